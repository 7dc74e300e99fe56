/* decode_png.c — PNG through libpng's classic API, with no colour transforms (only unpacking of sub-byte
 * samples and Adam7 de-interlacing); the mapping to RGB is Pillow 13's:
 *   gray 1-bit → "1" (0/255), 2/4-bit → "L;2"/"L;4" (scaled ×85/×17), 8-bit → L, 16-bit → "I;16" then clipped
 *   to 255 by convert("RGB"); gray+alpha → LA (16-bit: Pillow's RGBA from LA;16B, high bytes); RGB/RGBA 16-bit →
 *   high byte; palette → lookup (entries past PLTE are black).
 * Transparency (see decode.h): tRNS that PIL keeps as info["transparency"] after convert("RGB") becomes the colour
 * key; with want_alpha, the alpha of convert("RGBA"): the A sample (16-bit: its high byte), a palette's tRNS alpha
 * by index (entries past tRNS opaque), or for gray / RGB the tRNS value as convert_transparent compares it.
 * EXIF comes from eXIf, XMP from an uncompressed iTXt "XML:com.adobe.xmp"; both found by walking the chunk list. */
#include <png.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/limits.h"
#include "image/decode.h"

typedef struct png_ctx {
    const uint8_t *data;
    size_t size, pos;
    const char *label;
    char msg[256];
    int over_limit;                /* a side over the user limit was warned about (limit_msg) */
    char limit_msg[128];
    uint8_t *volatile raw;         /* all rows as libpng delivers them */
    png_bytep *volatile rows;      /* row pointers into raw */
    uint8_t *volatile rgb;
    uint8_t *volatile alpha;       /* want_alpha and an A band or palette alpha */
    volatile int oom;              /* one of libpng's allocations failed (on_malloc) */
    const stop_probe *stop;        /* the caller's cancellation (dec_limits.stop), polled on each read */
    volatile int stopped;          /* the longjmp came from it */
} png_ctx;

/* libpng's allocations, through these so that a failed one is known for what it is: libpng reports it as an error
 * like any other ("Out of memory", "Insufficient memory for ..." and others, from several places). */
static png_voidp on_malloc(png_structp png, png_alloc_size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) ((png_ctx *)png_get_mem_ptr(png))->oom = 1;
    return p;
}
static void on_free(png_structp png, png_voidp p) {
    (void)png;
    free(p);
}

static void on_error(png_structp png, png_const_charp msg) {
    png_ctx *c = png_get_error_ptr(png);
    snprintf(c->msg, sizeof c->msg, "%s", msg);
    png_longjmp(png, 1);
}

/* Warnings are ignored, except the one png_check_IHDR gives before its "Invalid IHDR data" error for a side over
 * png_set_user_limits' bound: that error is the pixel limit. */
static void on_warning(png_structp png, png_const_charp msg) {
    png_ctx *c = png_get_error_ptr(png);
    if (!c->over_limit && strstr(msg, "exceeds user limit")) {
        c->over_limit = 1;
        snprintf(c->limit_msg, sizeof c->limit_msg, "%s", msg);
    }
}

static void on_read(png_structp png, png_bytep dst, size_t n) {
    png_ctx *c = png_get_io_ptr(png);
    if (stop_now(c->stop)) { /* libpng reads IDAT 8 KiB at a time: a read per few MB of pixels at most */
        c->stopped = 1;
        png_error(png, "cancelled");
    }
    if (c->size - c->pos < n) png_error(png, "truncated file (unexpected end of data)");
    memcpy(dst, c->data + c->pos, n);
    c->pos += n;
}

static uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* CRC-32 of the PNG spec (zlib's), a nibble at a time. */
static uint32_t crc32_png(uint32_t crc, const uint8_t *p, size_t n) {
    static const uint32_t t[16] = {0x00000000, 0x1db71064, 0x3b6e20c8, 0x26d930ac, 0x76dc4190, 0x6b6b51f4,
                                   0x4db26158, 0x5005713c, 0xedb88320, 0xf00f9344, 0xd6d6a3e8, 0xcb61b38c,
                                   0x9b64c2b0, 0x86d3d2d4, 0xa00ae278, 0xbdbdf21c};
    crc = ~crc;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        crc = (crc >> 4) ^ t[crc & 15];
        crc = (crc >> 4) ^ t[crc & 15];
    }
    return ~crc;
}

static void chunk_name(const uint8_t *type, char name[5]) {
    memcpy(name, type, 4);
    name[4] = 0;
    for (int i = 0; i < 4; i++)
        if (name[i] < 32 || name[i] > 126) name[i] = '?';
}

/* The chunks before the first IDAT, which libpng reads (and for most, allocates) before any pixel: a length field
 * over max_png_chunk_bytes (decode.h) is refused here, before libpng allocates what it claims, even when the
 * file is shorter than the claim. Pillow checks the CRC of every chunk before the first IDAT and of none after it
 * (IDAT data errors surface as zlib errors instead); libpng is told to ignore CRCs so that both accept the same
 * files. Returns QVL_OK when all are good or the list ends early (truncation: libpng reports it). */
static qvl_status png_prescan(const uint8_t *d, size_t n, const char *label, uint64_t max_chunk, qvl_error *err) {
    size_t p = 8;
    char name[5];
    while (n - p >= 8) {
        uint32_t len = be32(d + p);
        if (memcmp(d + p + 4, "IDAT", 4) == 0) return QVL_OK;
        if (len > max_chunk) {
            chunk_name(d + p + 4, name);
            return limit_fail(err, "max_png_chunk_bytes", max_chunk,
                              "%s: PNG: the %s chunk claims %u bytes, more than the %llu allowed", label, name,
                              (unsigned)len, (unsigned long long)max_chunk);
        }
        if (n - p < 12 || len > n - p - 12) return QVL_OK;
        if (crc32_png(0, d + p + 4, 4 + (size_t)len) != be32(d + p + 8 + len)) {
            chunk_name(d + p + 4, name);
            return err_fail(err, QVL_ERR_FORMAT, "%s: corrupt PNG: bad CRC in the %s chunk", label, name);
        }
        p += 12 + (size_t)len;
    }
    return QVL_OK;
}

/* Walk the chunks for eXIf (last wins, as in PIL's info) and an uncompressed XMP iTXt. */
static int png_orientation(const uint8_t *d, size_t n) {
    static const char xmp_key[] = "XML:com.adobe.xmp";
    const uint8_t *exif = NULL, *xmp = NULL;
    size_t exif_n = 0, xmp_n = 0;
    size_t p = 8;
    while (n - p >= 12) {
        uint32_t len = be32(d + p);
        const uint8_t *type = d + p + 4, *body = d + p + 8;
        if (len > n - p - 12) break;
        if (memcmp(type, "eXIf", 4) == 0) {
            exif = body;
            exif_n = len;
        } else if (memcmp(type, "iTXt", 4) == 0 && len >= sizeof xmp_key + 2 &&
                   memcmp(body, xmp_key, sizeof xmp_key) == 0 && body[sizeof xmp_key] == 0) {
            /* keyword\0 flag method lang\0 translated\0 text */
            const uint8_t *r = body + sizeof xmp_key + 2, *end = body + len;
            const uint8_t *z1 = memchr(r, 0, (size_t)(end - r));
            const uint8_t *z2 = z1 ? memchr(z1 + 1, 0, (size_t)(end - z1 - 1)) : NULL;
            if (z2) {
                xmp = z2 + 1;
                xmp_n = (size_t)(end - xmp);
            }
        } else if (memcmp(type, "IEND", 4) == 0) {
            break;
        }
        p += 12 + (size_t)len;
    }
    int o = exif ? dec_exif_orientation(exif, exif_n) : 0;
    if (o == 0 && xmp) o = dec_xmp_orientation(xmp, xmp_n);
    return o;
}

/* A palette image's tRNS chunk before IDAT as Pillow reads it: libpng drops one longer than the palette (a benign
 * "invalid" error), Pillow keeps it. Sets *n to its length (at most 256 entries used) and returns its data or NULL. */
static const uint8_t *png_palette_trns(const uint8_t *d, size_t n, int *len) {
    size_t p = 8;
    while (n - p >= 12) {
        uint32_t l = be32(d + p);
        if (l > n - p - 12 || memcmp(d + p + 4, "IDAT", 4) == 0) break;
        if (memcmp(d + p + 4, "tRNS", 4) == 0) {
            *len = l > 256 ? 256 : (int)l;
            return l ? d + p + 8 : NULL;
        }
        p += 12 + (size_t)l;
    }
    return NULL;
}

static inline int sample(const uint8_t *row, size_t i, int depth16) {
    return depth16 ? row[2 * i] << 8 | row[2 * i + 1] : row[i];
}

qvl_status dec_png(const uint8_t *data, size_t size, const char *label, const dec_limits *lim, dec_out *out,
                   qvl_error *err) {
    qvl_status s = png_prescan(data, size, label, lim->png_chunk_bytes, err);
    if (s != QVL_OK) return s;
    png_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.data = data;
    ctx.size = size;
    ctx.label = label;
    ctx.stop = lim->stop;
    png_structp png = png_create_read_struct_2(PNG_LIBPNG_VER_STRING, &ctx, on_error, on_warning, &ctx, on_malloc,
                                               on_free);
    if (!png) return err_fail(err, QVL_ERR_NOMEM, "%s: PNG: cannot create the libpng reader", label);
    png_infop info = png_create_info_struct(png);
    if (!info) {
        png_destroy_read_struct(&png, NULL, NULL);
        return err_fail(err, QVL_ERR_NOMEM, "%s: PNG: cannot create the libpng reader", label);
    }
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_read_struct(&png, &info, NULL);
        free(ctx.raw);
        free(ctx.rows);
        free(ctx.rgb);
        free(ctx.alpha);
        out->rgb = out->alpha = NULL;
        if (ctx.over_limit) /* png_set_user_limits below: a side over the pixel limit */
            return limit_fail(err, lim->image_name, lim->image_pixels, "%s: PNG: %s (more than the %llu pixels allowed)",
                              label, ctx.limit_msg, (unsigned long long)lim->image_pixels);
        if (ctx.stopped) return err_fail(err, QVL_ERR_CANCELLED, "%s: PNG: decode cancelled", label);
        if (ctx.oom) return err_fail(err, QVL_ERR_NOMEM, "%s: PNG: out of memory in libpng: %s", label, ctx.msg);
        return err_fail(err, QVL_ERR_FORMAT, "%s: corrupt or truncated PNG: %s", label, ctx.msg);
    }
    png_set_read_fn(png, &ctx, on_read);
    png_set_crc_action(png, PNG_CRC_QUIET_USE, PNG_CRC_QUIET_USE);
    /* the limits of decode.h: no side can exceed the pixel limit (libpng's 1,000,000-pixel default side cap would
     * refuse valid panoramas; the product is checked below), and chunk sizes and counts are bounded */
    png_uint_32 side = lim->image_pixels < 0x7fffffff ? (png_uint_32)lim->image_pixels : 0x7fffffff;
    png_set_user_limits(png, side, side);
    png_set_chunk_cache_max(png, DEC_PNG_MAX_CHUNK_CACHE);
    png_set_chunk_malloc_max(png, lim->png_chunk_bytes > (png_alloc_size_t)-1 ? (png_alloc_size_t)-1
                                                                            : (png_alloc_size_t)lim->png_chunk_bytes);
    png_read_info(png, info);

    png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
    int ct = png_get_color_type(png, info), depth = png_get_bit_depth(png, info);
    s = dec_check_dims(w, h, lim, label, "PNG", err);
    if (s != QVL_OK) {
        png_destroy_read_struct(&png, &info, NULL);
        return s;
    }
    out->orientation = png_orientation(data, size);

    /* the colour key and palette, as PIL holds them */
    uint8_t pal[256][3];
    memset(pal, 0, sizeof pal);
    if (ct == PNG_COLOR_TYPE_PALETTE) {
        png_colorp plte = NULL;
        int np = 0;
        if (png_get_PLTE(png, info, &plte, &np) && plte)
            for (int i = 0; i < np && i < 256; i++)
                pal[i][0] = plte[i].red, pal[i][1] = plte[i].green, pal[i][2] = plte[i].blue;
    }
    png_bytep trans = NULL;
    int ntrans = 0, palpha = 0;
    png_color_16p tc = NULL;
    uint8_t pal_a[256];
    memset(pal_a, 255, sizeof pal_a);
    int have_trns = png_get_tRNS(png, info, &trans, &ntrans, &tc) != 0;
    if (!have_trns && ct == PNG_COLOR_TYPE_PALETTE)
        have_trns = (trans = (png_bytep)png_palette_trns(data, size, &ntrans)) != NULL;
    if (have_trns) {
        if (ct == PNG_COLOR_TYPE_PALETTE && trans) {
            /* convert("RGBA"): putpalettealpha(index, 0) or putpalettealphas(bytes); the rest stay opaque */
            palpha = out->want_alpha;
            for (int i = 0; i < ntrans && i < 256; i++) pal_a[i] = trans[i];
            /* PIL's _simple_palette: one 0 entry, all others 255 → an index key; else alpha bytes (no key) */
            int zero = -1, simple = 1;
            for (int i = 0; i < ntrans; i++) {
                if (trans[i] == 0 && zero < 0) zero = i;
                else if (trans[i] != 255) simple = 0;
            }
            if (simple && zero >= 0) {
                out->has_key = 1;
                for (int c = 0; c < 3; c++) out->key[c] = pal[zero][c];
            }
        } else if (ct == PNG_COLOR_TYPE_GRAY && tc) {
            out->has_key = 1;
            if (depth == 1) out->key[0] = tc->gray ? 255 : 0; /* mode "1": (t, 0, 0) via RGB→RGBA */
            else if (depth == 16) out->key[0] = tc->gray;     /* "I;16": (t, 0, 0) */
            else out->key[0] = out->key[1] = out->key[2] = tc->gray; /* L: raw value, unscaled */
            /* convert("RGBA") of "1" / L / I;16: convert_transparent, (t, t, t) against the converted RGB */
            out->has_akey = out->want_alpha;
            out->akey[0] = out->akey[1] = out->akey[2] = depth == 1 ? (tc->gray ? 255 : 0) : tc->gray;
        } else if (ct == PNG_COLOR_TYPE_RGB && tc) {
            out->has_key = 1;
            out->key[0] = tc->red, out->key[1] = tc->green, out->key[2] = tc->blue;
            out->has_akey = out->want_alpha;
            memcpy(out->akey, out->key, sizeof out->akey);
        }
    }
    int aband = out->want_alpha && (ct == PNG_COLOR_TYPE_GRAY_ALPHA || ct == PNG_COLOR_TYPE_RGB_ALPHA);

    if (depth < 8) png_set_packing(png);
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    size_t rowbytes = png_get_rowbytes(png, info), total;
    int ch = png_get_channels(png, info);
    if (size_mul_overflow(rowbytes, (size_t)h, &total)) {
        png_destroy_read_struct(&png, &info, NULL);
        return err_fail(err, QVL_ERR_LIMIT, "%s: PNG: %ux%u image too large", label, (unsigned)w, (unsigned)h);
    }
    ctx.raw = malloc(total ? total : 1);
    ctx.rows = (png_bytep *)dec_alloc_pixels(h, 1, (int)sizeof(png_bytep));
    ctx.rgb = dec_alloc_pixels(w, h, 3);
    if (aband || palpha) ctx.alpha = dec_alloc_pixels(w, h, 1);
    if (!ctx.raw || !ctx.rows || !ctx.rgb || ((aband || palpha) && !ctx.alpha)) {
        png_destroy_read_struct(&png, &info, NULL);
        free(ctx.raw);
        free(ctx.rows);
        free(ctx.rgb);
        free(ctx.alpha);
        return err_fail(err, QVL_ERR_NOMEM, "%s: PNG: cannot allocate %ux%u pixels", label, (unsigned)w,
                        (unsigned)h);
    }
    for (size_t y = 0; y < h; y++) ctx.rows[y] = ctx.raw + y * rowbytes;
    png_read_image(png, ctx.rows);
    png_destroy_read_struct(&png, &info, NULL);

    int d16 = depth == 16;
    int scale = depth == 1 ? 255 : depth == 2 ? 85 : depth == 4 ? 17 : 1;
    for (size_t y = 0; y < h; y++) {
        const uint8_t *r = ctx.rows[y];
        uint8_t *o = ctx.rgb + y * (size_t)w * 3;
        uint8_t *a = ctx.alpha ? ctx.alpha + y * (size_t)w : NULL;
        if (aband) /* the last sample of each pixel; 16-bit: its high byte */
            for (size_t x = 0; x < w; x++) a[x] = r[(x * (size_t)ch + (size_t)ch - 1) * (d16 ? 2 : 1)];
        else if (palpha)
            for (size_t x = 0; x < w; x++) a[x] = pal_a[r[x]];
        for (size_t x = 0; x < w; x++, o += 3) {
            size_t i = x * (size_t)ch;
            switch (ct) {
            case PNG_COLOR_TYPE_GRAY: {
                int v = sample(r, i, d16);
                v = d16 ? (v > 255 ? 255 : v) : v * scale;
                o[0] = o[1] = o[2] = (uint8_t)v;
                break;
            }
            case PNG_COLOR_TYPE_GRAY_ALPHA:
                o[0] = o[1] = o[2] = r[d16 ? 2 * i : i];
                break;
            case PNG_COLOR_TYPE_PALETTE:
                memcpy(o, pal[r[x]], 3);
                break;
            default: /* RGB, RGBA: the high byte of 16-bit samples */
                for (int c = 0; c < 3; c++) o[c] = r[d16 ? 2 * (i + (size_t)c) : i + (size_t)c];
                break;
            }
        }
    }
    free(ctx.raw);
    free(ctx.rows);
    out->width = (int32_t)w;
    out->height = (int32_t)h;
    out->rgb = ctx.rgb;
    out->alpha = ctx.alpha;
    return QVL_OK;
}
