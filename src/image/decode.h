/* decode.h — private interface between the image dispatcher (decode.c) and the per-format decoders.
 *
 * Each decoder turns one file held in memory into 8-bit RGB the way Pillow 13 opens it and converts it with
 * convert("RGB"), and reports what the rest of transformers' load path needs: the EXIF orientation and the
 * transparency of the image as Pillow opened it, in the two forms the two alpha modes need:
 *   QVL_ALPHA_DROP (load_image, then convert_to_rgb): for modes whose PIL info keeps a "transparency" colour after
 *     convert("RGB"), that colour key (convert_to_rgb then composites pixels of exactly that colour onto white);
 *   QVL_ALPHA_WHITE (convert_to_rgb of the opened image): the alpha channel convert("RGBA") gives it, which
 *     convert_to_rgb alpha-composites onto white: an alpha plane (A band, palette alpha by index), or for the
 *     colour-keyed modes ("1", L, I;16, RGB with tRNS) the key convert_transparent compares the RGB pixels with.
 * decode.c applies the key or the alpha, then the orientation.
 *
 * Contract for every dec_* function: on success out->rgb holds width·height·3 bytes (malloc'd, owned by the caller),
 * and out->alpha width·height bytes or NULL (only where out->want_alpha is set; owned by the caller); on failure it
 * returns a status with a message naming `label` and the format, and out->rgb and out->alpha are NULL. No decoder
 * allocates pixel memory before dec_check_dims has accepted the header's dimensions. */
#ifndef QVL_IMAGE_DECODE_H
#define QVL_IMAGE_DECODE_H

#include <stddef.h>
#include <stdint.h>

#include "core/stop.h"
#include "qvl.h"

/* Resource limits of the decoders: the qvl_limits fields (qvl.h, docs/SECURITY.md) a decode runs under, resolved
 * by decode.c into a dec_limits. Every one is enforced before the memory it bounds is allocated, so that a small
 * file cannot make a decoder allocate or work far beyond what its pixels need; each failure is QVL_ERR_LIMIT with a
 * message naming the file, the size found, the limit and how to raise it (limit_fail).
 *   image_pixels (max_image_pixels and qvl_decode_params.max_pixels, the smaller; default 178956970 =
 *     2 · PIL.Image.MAX_IMAGE_PIXELS): the image, checked by dec_check_dims from the header before any pixel buffer
 *     exists. Pillow raises DecompressionBombError above the same count. PNG also hands it to libpng as the
 *     per-side limit (png_set_user_limits), so libpng refuses such an IHDR itself.
 *   canvas_pixels (max_canvas_pixels and qvl_decode_params.max_pixels, the smaller; default 178956970): the canvas
 *     a GIF or an animated WebP composes its first frame on (GIF: the logical screen, grown to hold the frame; WebP:
 *     the VP8X canvas), checked by dec_check_canvas from the headers before the canvas is allocated. The decoded
 *     image is that canvas, so it must also fit image_pixels.
 *   png_chunk_bytes (max_png_chunk_bytes, default 8 MiB): the largest non-IDAT chunk before the first IDAT,
 *     checked on the length field before libpng reads the chunk (libpng would allocate the claimed length: 2 GiB
 *     for a 53-byte file), and libpng's png_set_chunk_malloc_max, which also bounds a zTXt/iTXt/iCCP chunk's
 *     decompressed size. Real ICC profiles and eXIf blocks are well under 1 MiB (a JPEG APP segment holds 64 KiB)
 *     and Pillow's MAX_TEXT_CHUNK is 1 MiB, so 8 MiB refuses no image Pillow reads for its pixels.
 *   DEC_PNG_MAX_CHUNK_CACHE (1000): png_set_chunk_cache_max, the number of text/sPLT/unknown chunks libpng keeps
 *     (libpng's own default; set explicitly so that it does not depend on how libpng was configured).
 *   jpeg_scans (max_jpeg_scans, default 500): scans of a progressive JPEG, counted by a libjpeg progress monitor
 *     while the file is read (libjpeg has no limit, and each scan is a pass over the whole coefficient buffer: 3704
 *     scans of a 4096x4096 image took 8.5 s, and repeated refinement scans cost a few bytes each).
 *     jpeg_simple_progression writes 10 (6 for gray) and encoders rarely more than a few dozen; the longest valid
 *     script of a gray image (every coefficient band on its own, one bit at a time) has 704 (a colour one about
 *     three times as many), so only such contrived files are refused.
 *   decode_work (max_decode_work, default 2^31): scans · width · height of a JPEG, checked by the same monitor as
 *     each scan begins. The scan count alone does not bound the time: a 100 KB progressive 8192x8192 file of 500
 *     scans (within max_jpeg_scans) took 26.6 s to decode on a 2-core VM (issue 36's measurement); a 60-scan one of
 *     that size decoded at about 0.6 ns a pixel a scan (docs/PERFORMANCE.md, session 36), so 2^31 is about 1.3 s; a 10-scan file (jpeg_simple_progression's script) of up to 2^31 / 10 = 215 megapixels, more
 *     than image_pixels admits by default, passes (a caller raising image_pixels past that raises this too).
 *   dec_jpeg_max_memory(image_pixels): libjpeg's max_memory_to_use, DEC_JPEG_MEM_PER_PIXEL (8: four components of
 *     16-bit coefficients, the whole-image buffer of a progressive CMYK file) bytes per allowed pixel plus
 *     DEC_JPEG_MEM_SLACK (64 MiB) for its tables and row buffers: what the largest image the pixel limit admits
 *     needs, so that libjpeg refuses (JERR_NO_BACKING_STORE) rather than allocates more. With the pixel check before
 *     it, no file within the limit needs that much for its pixels (even a 1-pixel-wide 4x4-sampled image needs less
 *     than the slack): it is a backstop, and bounds the APP1 markers libjpeg keeps for EXIF/XMP, which count too.
 *   max_input_bytes (default 2 GiB): files above it are refused by qvl_image_load before reading, buffers by
 *     qvl_image_decode before decoding. */
#define DEC_PNG_MAX_CHUNK_CACHE 1000u
#define DEC_JPEG_MEM_PER_PIXEL 8u
#define DEC_JPEG_MEM_SLACK ((uint64_t)64 << 20)

/* libjpeg's memory limit for a pixel limit (see above), saturating at LONG_MAX. */
static inline long dec_jpeg_max_memory(uint64_t max_pixels) {
    const uint64_t cap = (uint64_t)(((unsigned long)-1) >> 1);
    if (max_pixels > (cap - DEC_JPEG_MEM_SLACK) / DEC_JPEG_MEM_PER_PIXEL) return (long)cap;
    return (long)(max_pixels * DEC_JPEG_MEM_PER_PIXEL + DEC_JPEG_MEM_SLACK);
}

/* The limits one decode runs under, and the name of the setting behind each pixel limit ("max_image_pixels", or
 * "qvl_decode_params.max_pixels" when that one is smaller) for the messages. */
typedef struct dec_limits {
    uint64_t image_pixels, canvas_pixels, png_chunk_bytes;
    uint32_t jpeg_scans;
    uint64_t decode_work; /* max_decode_work: a progressive JPEG's scans · pixels */
    const char *image_name, *canvas_name;
    const stop_probe *stop; /* the caller's cancellation (core/stop.h), polled by the JPEG and PNG decoders; NULL */
} dec_limits;

typedef struct dec_out {
    int32_t width, height;
    uint8_t *rgb;        /* [height][width][3] */
    int orientation;     /* EXIF/XMP orientation 1..8 (1 when absent or invalid) */
    int has_key;         /* 1: pixels equal to key[] become white (PIL info["transparency"] survives as RGB) */
    int32_t key[3];      /* the key as PIL holds it: values above 255 never match */
    int want_alpha;      /* in: 1 when the caller composites (QVL_ALPHA_WHITE): fill alpha / has_akey */
    uint8_t *alpha;      /* [height][width] alpha of convert("RGBA"), or NULL (opaque, or keyed: see has_akey) */
    int has_akey;        /* 1: convert("RGBA") makes pixels whose RGB equals akey[] transparent (alpha 0) */
    int32_t akey[3];     /* that key as convert_transparent compares it: values above 255 never match */
} dec_out;

qvl_status dec_jpeg(const uint8_t *data, size_t size, const char *label, const dec_limits *lim, dec_out *out,
                    qvl_error *err);
qvl_status dec_png(const uint8_t *data, size_t size, const char *label, const dec_limits *lim, dec_out *out,
                   qvl_error *err);
qvl_status dec_webp(const uint8_t *data, size_t size, const char *label, const dec_limits *lim, dec_out *out,
                    qvl_error *err);
qvl_status dec_gif(const uint8_t *data, size_t size, const char *label, const dec_limits *lim, dec_out *out,
                   qvl_error *err);
qvl_status dec_bmp(const uint8_t *data, size_t size, const char *label, const dec_limits *lim, dec_out *out,
                   qvl_error *err);

/* Dimensions from a header: QVL_ERR_FORMAT for a zero or negative side, QVL_ERR_LIMIT for more than
 * lim->image_pixels pixels or sides above INT32_MAX; `fmt` names the format in the message. */
qvl_status dec_check_dims(int64_t width, int64_t height, const dec_limits *lim, const char *label, const char *fmt,
                          qvl_error *err);
/* The same for a canvas (GIF screen, WebP canvas) that becomes the image: lim->canvas_pixels, then image_pixels. */
qvl_status dec_check_canvas(int64_t width, int64_t height, const dec_limits *lim, const char *label, const char *fmt,
                            qvl_error *err);

/* malloc of width·height·channels bytes with overflow checks (NULL on overflow or failure). */
uint8_t *dec_alloc_pixels(int64_t width, int64_t height, int channels);

/* Orientation tag (0x0112) of IFD0 in a TIFF-structured EXIF block (an optional "Exif\0\0" prefix is skipped),
 * as PIL's Image.getexif reads it; 0 when absent or unreadable. */
int dec_exif_orientation(const uint8_t *exif, size_t n);
/* PIL's XMP fallback: the first `tiff:Orientation="N` or `tiff:Orientation>N` (one digit); 0 when absent. */
int dec_xmp_orientation(const uint8_t *xmp, size_t n);

/* PIL's Image.alpha_composite(white, im) then convert("RGB") for one pixel of alpha `a`, in its integer arithmetic
 * (libImaging/AlphaComposite.c) with the destination opaque white: blend = 255·(255 − a), outa255 = 255·a + blend,
 * coef1 = a·255·255·128 / outa255, coef2 = 255·128 − coef1, c' = div255(c·coef1 + 255·coef2 + 128·128) >> 7,
 * div255(x) = ((x >> 8) + x) >> 8; a = 0 gives white, a = 255 keeps c. */
static inline void dec_white_px(uint8_t *rgb, uint32_t a) {
    if (a == 255) return;
    if (a == 0) {
        rgb[0] = rgb[1] = rgb[2] = 255;
        return;
    }
    const uint32_t outa255 = a * 255 + 255 * (255 - a);
    const uint32_t coef1 = a * 255 * 255 * 128 / outa255, coef2 = 255 * 128 - coef1;
    for (int c = 0; c < 3; c++) {
        const uint32_t t = rgb[c] * coef1 + 255 * coef2 + (0x80u << 7);
        rgb[c] = (uint8_t)((((t >> 8) + t) >> 8) >> 7);
    }
}
/* dec_white_px over n pixels of packed RGB with their alpha plane. */
void dec_composite_white(uint8_t *rgb, const uint8_t *alpha, size_t n);

/* The format of a file by its first bytes (at most DEC_SNIFF_BYTES are looked at): the one dispatch rule, shared by
 * the image decoder, the video reader and the plan's choice between image and video, for paths and for bytes in
 * memory. Images: JPEG, PNG, WebP, GIF, BMP. Video containers (the only ones handed to FFmpeg, see video.c):
 *   DEC_MOV     ISO base media / QuickTime (mp4, m4v, mov, 3gp, 3g2, mj2): a box type "ftyp" at offset 4, or one of
 *               the top-level QuickTime atoms "moov", "mdat", "wide", "free", "skip", "pnot" there;
 *   DEC_MKV     Matroska / WebM: the EBML magic 1A 45 DF A3;
 *   DEC_AVI     "RIFF" .... "AVI ";
 *   DEC_MPEGTS  MPEG transport stream: the sync byte 0x47 at every 188-byte packet start (or every 192, after the
 *               4-byte prefix of M2TS / Blu-ray), at least 3 packets and all that the sniffed bytes hold.
 * Anything else is DEC_UNKNOWN: neither decoder is given it (dec_unrecognised says what it looks like). */
typedef enum dec_format {
    DEC_UNKNOWN = 0, DEC_JPEG, DEC_PNG, DEC_WEBP, DEC_GIF, DEC_BMP,
    DEC_MOV, DEC_MKV, DEC_AVI, DEC_MPEGTS
} dec_format;
enum { DEC_SNIFF_BYTES = 1024 };
dec_format dec_sniff(const uint8_t *data, size_t n);
static inline int dec_is_image(dec_format f) { return f >= DEC_JPEG && f <= DEC_BMP; }
static inline int dec_is_video(dec_format f) { return f >= DEC_MOV && f <= DEC_MPEGTS; }
/* "JPEG", ..., "MP4/QuickTime", "Matroska/WebM", "AVI", "MPEG-TS"; "unknown". */
const char *dec_format_name(dec_format f);
/* The lists of what is recognised, for messages. */
#define DEC_IMAGE_FORMATS "JPEG, PNG, WebP, GIF, BMP"
#define DEC_VIDEO_FORMATS "MP4/QuickTime, Matroska/WebM, AVI, MPEG-TS"
/* QVL_ERR_FORMAT for bytes dec_sniff does not recognise: "LABEL: not a recognised image or video format (empty
 * file | N bytes, starting "text..." | N bytes, starting 00 01 ...)", and the formats that are. `total` is the
 * size of the whole file or buffer, of which `d`[n] are its first bytes. */
qvl_status dec_unrecognised(const char *label, const uint8_t *d, size_t n, uint64_t total, qvl_error *err);

#endif
