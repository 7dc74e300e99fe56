/* decode.c — qvl_image_decode/load: format detection by magic bytes, the pixel limit, and the steps of
 * transformers' load path that follow the decoder: the processors' convert_to_rgb (transparency onto white) and
 * PIL.ImageOps.exif_transpose (orientation 2..8).
 *
 * With transformers 5.23 and Pillow 13 the result equals, for im = ImageOps.exif_transpose(Image.open(path)):
 *   QVL_ALPHA_WHITE  convert_to_rgb(im, return_numpy=True): an image with an A band or info["transparency"] is
 *                    converted to RGBA and alpha-composited onto opaque white (what the processors make of the
 *                    PIL image a user hands them);
 *   QVL_ALPHA_DROP   convert_to_rgb(im.convert("RGB"), return_numpy=True), i.e. of load_image(path): alpha dropped,
 *                    only a colour key that survives convert("RGB") whitened.
 * Compositing is per pixel, so it is done before the orientation. */
#include "image/decode.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/limits.h"
#include "core/params.h"
#include "image/image_params.h"
#include "io/fileutil.h"

void decode_defaults(qvl_decode_params *p) {
    memset(p, 0, sizeof *p);
    p->struct_size = sizeof *p;
    p->max_pixels = LIMIT_DEF_IMAGE_PIXELS; /* 2 · PIL.Image.MAX_IMAGE_PIXELS: DecompressionBombError above it */
    p->apply_exif = 1;
    p->alpha = QVL_ALPHA_WHITE;
}

void qvl_decode_params_init(qvl_decode_params *p, size_t struct_size) {
    qvl_decode_params d;
    decode_defaults(&d);
    params_init(p, struct_size, &d, sizeof d);
}

qvl_status decode_params_take(qvl_decode_params *full, const qvl_decode_params *p, qvl_error *err) {
    decode_defaults(full);
    TRY(params_take(full, sizeof *full, p, "qvl_decode_params", err));
    if (full->alpha != QVL_ALPHA_WHITE && full->alpha != QVL_ALPHA_DROP)
        return err_fail(err, QVL_ERR_INVALID_ARG,
                        "qvl_decode_params.alpha: %d is not QVL_ALPHA_WHITE (0) or QVL_ALPHA_DROP (1)",
                        (int)full->alpha);
    return QVL_OK;
}

void qvl_image_free(qvl_image *img) {
    if (!img) return;
    free(img->rgb);
    img->rgb = NULL;
    img->width = img->height = 0;
}

static qvl_status check_px(int64_t width, int64_t height, uint64_t limit, const char *name, const char *label,
                           const char *fmt, qvl_error *err) {
    if (width <= 0 || height <= 0)
        return err_fail(err, QVL_ERR_FORMAT, "%s: %s: invalid image size %lldx%lld", label, fmt, (long long)width,
                        (long long)height);
    if (width > INT32_MAX || height > INT32_MAX || (uint64_t)width * (uint64_t)height > limit)
        return limit_fail(err, name, limit, "%s: %s: %lldx%lld image has more than the %llu pixels allowed", label,
                          fmt, (long long)width, (long long)height, (unsigned long long)limit);
    return QVL_OK;
}

qvl_status dec_check_dims(int64_t width, int64_t height, const dec_limits *lim, const char *label, const char *fmt,
                          qvl_error *err) {
    return check_px(width, height, lim->image_pixels, lim->image_name, label, fmt, err);
}

qvl_status dec_check_canvas(int64_t width, int64_t height, const dec_limits *lim, const char *label, const char *fmt,
                            qvl_error *err) {
    TRY(check_px(width, height, lim->canvas_pixels, lim->canvas_name, label, fmt, err));
    return check_px(width, height, lim->image_pixels, lim->image_name, label, fmt, err);
}

/* The limits of a decode with params *p (taken): the smaller of max_pixels and each pixel limit. */
static qvl_status resolve_limits(const qvl_decode_params *p, dec_limits *d, uint64_t *input_bytes, qvl_error *err) {
    qvl_limits l;
    TRY(limits_take(&l, p->limits, "qvl_decode_params.limits", err));
    d->image_pixels = l.max_image_pixels, d->image_name = "max_image_pixels";
    d->canvas_pixels = l.max_canvas_pixels, d->canvas_name = "max_canvas_pixels";
    if (p->max_pixels < d->image_pixels) d->image_pixels = p->max_pixels, d->image_name = "qvl_decode_params.max_pixels";
    if (p->max_pixels < d->canvas_pixels)
        d->canvas_pixels = p->max_pixels, d->canvas_name = "qvl_decode_params.max_pixels";
    d->png_chunk_bytes = l.max_png_chunk_bytes;
    d->jpeg_scans = l.max_jpeg_scans;
    d->decode_work = l.max_decode_work;
    d->stop = NULL;
    *input_bytes = l.max_input_bytes;
    return QVL_OK;
}

uint8_t *dec_alloc_pixels(int64_t width, int64_t height, int channels) {
    size_t n;
    if (width <= 0 || height <= 0 || channels <= 0) return NULL;
    if (size_mul_overflow((size_t)width, (size_t)height, &n) || size_mul_overflow(n, (size_t)channels, &n))
        return NULL;
    return malloc(n);
}

/* ---- EXIF / XMP orientation ---------------------------------------------------------------------------------- */

static uint32_t rd16(const uint8_t *p, int be) { return be ? (uint32_t)p[0] << 8 | p[1] : (uint32_t)p[1] << 8 | p[0]; }
static uint32_t rd32(const uint8_t *p, int be) {
    return be ? (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]
              : (uint32_t)p[3] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[1] << 8 | p[0];
}

/* Returns the tag's integer value; -1 when the tag is present with a value PIL would not map to a transpose
 * (several values, a non-integer type): that still stops the XMP fallback. */
int dec_exif_orientation(const uint8_t *d, size_t n) {
    while (n >= 6 && memcmp(d, "Exif\0\0", 6) == 0) d += 6, n -= 6;
    if (n < 8) return 0;
    int be;
    if (memcmp(d, "II\x2a\0", 4) == 0) be = 0;
    else if (memcmp(d, "MM\0\x2a", 4) == 0) be = 1;
    else return 0;
    uint32_t off = rd32(d + 4, be);
    if (off > n || n - off < 2) return 0;
    uint32_t count = rd16(d + off, be);
    int found = 0;
    for (uint32_t i = 0; i < count; i++) {
        size_t e = (size_t)off + 2 + (size_t)i * 12;
        if (e + 12 > n) break; /* PIL stops at a truncated directory, keeping the entries read so far */
        if (rd16(d + e, be) != 0x0112) continue;
        uint32_t type = rd16(d + e + 2, be), cnt = rd32(d + e + 4, be);
        static const int sizes[13] = {0, 1, 1, 2, 4, 8, 1, 1, 2, 4, 8, 4, 8};
        if (type == 0 || type > 12) continue; /* unknown type: PIL skips the entry */
        uint64_t bytes = (uint64_t)sizes[type] * cnt;
        const uint8_t *v = d + e + 8;
        if (bytes > 4) {
            uint32_t vo = rd32(d + e + 8, be);
            if ((uint64_t)vo + bytes > n) continue; /* data outside the block: skipped */
            found = -1;
            continue;
        }
        if (cnt != 1) {
            found = -1;
            continue;
        }
        switch (type) {
        case 1: found = v[0]; break;
        case 6: found = (int8_t)v[0]; break;
        case 3: found = (int)rd16(v, be); break;
        case 8: found = (int16_t)rd16(v, be); break;
        case 4: found = rd32(v, be) > 8 ? -1 : (int)rd32(v, be); break;
        case 9: found = (int32_t)rd32(v, be); break;
        default: found = -1; break;
        }
        if (found == 0) found = -1; /* present but 0: no transpose, and no XMP fallback */
    }
    return found;
}

int dec_xmp_orientation(const uint8_t *x, size_t n) {
    static const char pat[] = "tiff:Orientation";
    const size_t pl = sizeof pat - 1;
    for (size_t i = 0; i + pl < n; i++) {
        if (x[i] != 't' || memcmp(x + i, pat, pl) != 0) continue;
        size_t j = i + pl;
        if (x[j] == '>' && j + 1 < n && x[j + 1] >= '0' && x[j + 1] <= '9') return x[j + 1] - '0';
        if (x[j] == '=' && j + 2 < n && x[j + 1] == '"' && x[j + 2] >= '0' && x[j + 2] <= '9') return x[j + 2] - '0';
    }
    return 0;
}

/* ---- post-processing ----------------------------------------------------------------------------------------- */

/* QVL_ALPHA_DROP, convert_to_rgb of load_image's RGB: info["transparency"] present → RGBA with alpha 0 exactly
 * where the pixel equals the key → alpha_composite over opaque white → those pixels white, all others unchanged. */
static void apply_key(dec_out *o) {
    if (!o->has_key) return;
    for (int c = 0; c < 3; c++)
        if (o->key[c] < 0 || o->key[c] > 255) return;
    size_t n = (size_t)o->width * (size_t)o->height;
    uint8_t *p = o->rgb;
    for (size_t i = 0; i < n; i++, p += 3)
        if (p[0] == o->key[0] && p[1] == o->key[1] && p[2] == o->key[2]) p[0] = p[1] = p[2] = 255;
}

/* PIL's Image.alpha_composite(white, im) then convert("RGB"), in its integer arithmetic (libImaging/
 * AlphaComposite.c) with the destination opaque white: blend = 255·(255 − a), outa255 = 255·a + blend,
 * coef1 = a·255·255·128 / outa255, coef2 = 255·128 − coef1, c' = div255(c·coef1 + 255·coef2 + 128·128) >> 7,
 * div255(x) = ((x >> 8) + x) >> 8; a = 0 copies the destination (white). a = 255 keeps c. */
void dec_composite_white(uint8_t *rgb, const uint8_t *alpha, size_t n) {
    for (size_t i = 0; i < n; i++, rgb += 3) dec_white_px(rgb, alpha[i]);
}

/* convert_to_rgb of the opened image: RGBA (convert("RGBA")), alpha_composite over white. For the colour-keyed
 * modes convert("RGBA") gives alpha 0 exactly where the pixel equals the key and 255 elsewhere, so those pixels
 * become white and all others are unchanged. */
static void apply_alpha(dec_out *o) {
    size_t n = (size_t)o->width * (size_t)o->height;
    if (o->alpha) {
        dec_composite_white(o->rgb, o->alpha, n);
        return;
    }
    if (!o->has_akey) return;
    for (int c = 0; c < 3; c++)
        if (o->akey[c] < 0 || o->akey[c] > 255) return;
    uint8_t *p = o->rgb;
    for (size_t i = 0; i < n; i++, p += 3)
        if (p[0] == o->akey[0] && p[1] == o->akey[1] && p[2] == o->akey[2]) p[0] = p[1] = p[2] = 255;
}

/* PIL's Image.transpose for orientation 2..8 (exif_transpose's table). Returns NOMEM on allocation failure. */
static qvl_status apply_orientation(dec_out *o, const char *label, qvl_error *err) {
    int t = o->orientation;
    if (t < 2 || t > 8) return QVL_OK;
    size_t w = (size_t)o->width, h = (size_t)o->height;
    int swap = t >= 5;
    size_t ow = swap ? h : w, oh = swap ? w : h;
    uint8_t *dst = dec_alloc_pixels((int64_t)ow, (int64_t)oh, 3);
    if (!dst) return err_fail(err, QVL_ERR_NOMEM, "%s: cannot allocate the rotated %zux%zu image", label, ow, oh);
    const uint8_t *src = o->rgb;
    for (size_t y = 0; y < oh; y++) {
        for (size_t x = 0; x < ow; x++) {
            size_t sx, sy;
            switch (t) {
            case 2: sx = w - 1 - x, sy = y; break;                 /* FLIP_LEFT_RIGHT */
            case 3: sx = w - 1 - x, sy = h - 1 - y; break;         /* ROTATE_180 */
            case 4: sx = x, sy = h - 1 - y; break;                 /* FLIP_TOP_BOTTOM */
            case 5: sx = y, sy = x; break;                         /* TRANSPOSE */
            case 6: sx = y, sy = h - 1 - x; break;                 /* ROTATE_270 */
            case 7: sx = w - 1 - y, sy = h - 1 - x; break;         /* TRANSVERSE */
            default: sx = w - 1 - y, sy = x; break;                /* 8: ROTATE_90 */
            }
            memcpy(dst + (y * ow + x) * 3, src + (sy * w + sx) * 3, 3);
        }
    }
    free(o->rgb);
    o->rgb = dst;
    o->width = (int32_t)ow;
    o->height = (int32_t)oh;
    return QVL_OK;
}

/* ---- public entry points ------------------------------------------------------------------------------------- */

/* MPEG-TS: the sync byte at every packet start that the sniffed bytes hold, at least 3 of them. */
static int ts_sync(const uint8_t *d, size_t n, size_t first, size_t stride) {
    size_t k = 0;
    for (size_t at = first; at < n; at += stride, k++)
        if (d[at] != 0x47) return 0;
    return k >= 3;
}

dec_format dec_sniff(const uint8_t *d, size_t n) {
    if (n > DEC_SNIFF_BYTES) n = DEC_SNIFF_BYTES;
    if (n >= 3 && d[0] == 0xFF && d[1] == 0xD8 && d[2] == 0xFF) return DEC_JPEG;
    if (n >= 8 && memcmp(d, "\x89PNG\r\n\x1a\n", 8) == 0) return DEC_PNG;
    if (n >= 12 && memcmp(d, "RIFF", 4) == 0 && memcmp(d + 8, "WEBP", 4) == 0) return DEC_WEBP;
    if (n >= 6 && (memcmp(d, "GIF87a", 6) == 0 || memcmp(d, "GIF89a", 6) == 0)) return DEC_GIF;
    if (n >= 2 && d[0] == 'B' && d[1] == 'M') return DEC_BMP;
    if (n >= 8) {
        static const char atoms[][5] = {"ftyp", "moov", "mdat", "wide", "free", "skip", "pnot"};
        for (size_t i = 0; i < sizeof atoms / sizeof atoms[0]; i++)
            if (memcmp(d + 4, atoms[i], 4) == 0) return DEC_MOV;
    }
    if (n >= 4 && memcmp(d, "\x1a\x45\xdf\xa3", 4) == 0) return DEC_MKV;
    if (n >= 12 && memcmp(d, "RIFF", 4) == 0 && memcmp(d + 8, "AVI ", 4) == 0) return DEC_AVI;
    if (ts_sync(d, n, 0, 188) || ts_sync(d, n, 4, 192)) return DEC_MPEGTS;
    return DEC_UNKNOWN;
}

const char *dec_format_name(dec_format f) {
    switch (f) {
    case DEC_JPEG: return "JPEG";
    case DEC_PNG: return "PNG";
    case DEC_WEBP: return "WebP";
    case DEC_GIF: return "GIF";
    case DEC_BMP: return "BMP";
    case DEC_MOV: return "MP4/QuickTime";
    case DEC_MKV: return "Matroska/WebM";
    case DEC_AVI: return "AVI";
    case DEC_MPEGTS: return "MPEG-TS";
    default: return "unknown";
    }
}

qvl_status dec_unrecognised(const char *label, const uint8_t *d, size_t n, uint64_t total, qvl_error *err) {
    if (total == 0)
        return err_fail(err, QVL_ERR_FORMAT, "%s: empty (0 bytes), not a recognised image or video format (images: "
                        DEC_IMAGE_FORMATS "; videos: " DEC_VIDEO_FORMATS ")", label);
    /* The first bytes as text when they are printable, else in hex. */
    char look[80];
    size_t k = n < 16 ? n : 16, at = 0;
    int text = 1;
    for (size_t i = 0; i < k; i++)
        if (!((d[i] >= 0x20 && d[i] < 0x7f) || d[i] == '\n' || d[i] == '\r' || d[i] == '\t')) text = 0;
    if (text) {
        look[at++] = '"';
        for (size_t i = 0; i < k; i++) {
            if (d[i] == '\n' || d[i] == '\r' || d[i] == '\t') {
                look[at++] = '\\';
                look[at++] = d[i] == '\n' ? 'n' : d[i] == '\r' ? 'r' : 't';
            } else {
                if (d[i] == '"' || d[i] == '\\') look[at++] = '\\';
                look[at++] = (char)d[i];
            }
        }
        look[at++] = '"';
        look[at] = 0;
    } else {
        for (size_t i = 0; i < k; i++) at += (size_t)snprintf(look + at, sizeof look - at, i ? " %02x" : "%02x", d[i]);
    }
    return err_fail(err, QVL_ERR_FORMAT, "%s: not a recognised image or video format (%llu bytes, starting %s%s; "
                    "images: " DEC_IMAGE_FORMATS "; videos: " DEC_VIDEO_FORMATS ")", label, (unsigned long long)total,
                    look, total > k ? "..." : "");
}

static qvl_status decode_labeled(const uint8_t *d, size_t n, const qvl_decode_params *p, const stop_probe *stop,
                                 const char *label, qvl_image *out, qvl_error *err) {
    qvl_decode_params def;
    TRY(decode_params_take(&def, p, err));
    p = &def;
    dec_limits lim;
    uint64_t max_bytes;
    TRY(resolve_limits(p, &lim, &max_bytes, err));
    lim.stop = stop;
    TRY(stop_before(stop, label, err));
    if (n > max_bytes)
        return limit_fail(err, "max_input_bytes", max_bytes, "%s: the image is %zu bytes, more than the %llu allowed",
                          label, n, (unsigned long long)max_bytes);
    dec_out o;
    memset(&o, 0, sizeof o);
    o.orientation = 1;
    o.want_alpha = p->alpha == QVL_ALPHA_WHITE;
    qvl_status s;
    const dec_format fmt = dec_sniff(d, n);
    if (fmt == DEC_JPEG)
        s = dec_jpeg(d, n, label, &lim, &o, err);
    else if (fmt == DEC_PNG)
        s = dec_png(d, n, label, &lim, &o, err);
    else if (fmt == DEC_WEBP)
        s = dec_webp(d, n, label, &lim, &o, err);
    else if (fmt == DEC_GIF)
        s = dec_gif(d, n, label, &lim, &o, err);
    else if (fmt == DEC_BMP)
        s = dec_bmp(d, n, label, &lim, &o, err);
    else if (dec_is_video(fmt))
        s = err_fail(err, QVL_ERR_FORMAT, "%s: a video (%s), not an image (read it with qvl_video_load or "
                     "qvl_video_decode, or as a PATH or ENCODED item)", label, dec_format_name(fmt));
    else
        s = dec_unrecognised(label, d, n, n, err);
    if (s == QVL_OK && !o.rgb) s = err_fail(err, QVL_ERR_INTERNAL, "%s: decoder returned no pixels", label);
    if (s == QVL_OK) {
        if (p->alpha == QVL_ALPHA_WHITE) apply_alpha(&o);
        else apply_key(&o);
        if (p->apply_exif) s = apply_orientation(&o, label, err);
    }
    free(o.alpha);
    if (s != QVL_OK) {
        free(o.rgb);
        return s;
    }
    out->width = o.width;
    out->height = o.height;
    out->rgb = o.rgb;
    return QVL_OK;
}

qvl_status qvl_image_decode(const void *data, size_t size, const qvl_decode_params *p, qvl_image *out,
                            qvl_error *err) {
    err_clear(err);
    if (!out) return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_image_decode: out is NULL");
    memset(out, 0, sizeof *out);
    if (!data && size) return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_image_decode: data is NULL");
    return decode_labeled(data, size, p, NULL, "<memory>", out, err);
}

qvl_status qvl_image_load(const char *path, const qvl_decode_params *p, qvl_image *out, qvl_error *err) {
    err_clear(err);
    if (!out) return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_image_load: out is NULL");
    memset(out, 0, sizeof *out);
    if (!path) return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_image_load: path is NULL");
    return image_load_item(path, p, NULL, out, err);
}

qvl_status image_load_item(const char *path, const qvl_decode_params *p, const stop_probe *stop, qvl_image *out,
                           qvl_error *err) {
    memset(out, 0, sizeof *out);
    qvl_decode_params def;
    TRY(decode_params_take(&def, p, err));
    dec_limits lim;
    uint64_t max_bytes;
    TRY(resolve_limits(&def, &lim, &max_bytes, err));
    char *buf = NULL;
    size_t n = 0;
    qvl_error re;
    err_clear(&re);
    qvl_status rs = fu_read_file(path, max_bytes > SIZE_MAX ? SIZE_MAX : (size_t)max_bytes, &buf, &n, &re);
    if (rs == QVL_ERR_LIMIT)
        return limit_fail(err, "max_input_bytes", max_bytes, "%s", re.message);
    if (rs != QVL_OK) return err_fail(err, rs, "%s", re.message);
    qvl_status s = decode_labeled((const uint8_t *)buf, n, p, stop, path, out, err);
    free(buf);
    return s;
}

qvl_status image_decode_labeled(const void *data, size_t size, const qvl_decode_params *p, const stop_probe *stop,
                                const char *label, qvl_image *out, qvl_error *err) {
    memset(out, 0, sizeof *out);
    return decode_labeled(data, size, p, stop, label, out, err);
}
