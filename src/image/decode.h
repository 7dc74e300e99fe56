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

#include "qvl.h"

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

qvl_status dec_jpeg(const uint8_t *data, size_t size, const char *label, uint64_t max_pixels, dec_out *out,
                    qvl_error *err);
qvl_status dec_png(const uint8_t *data, size_t size, const char *label, uint64_t max_pixels, dec_out *out,
                   qvl_error *err);
qvl_status dec_webp(const uint8_t *data, size_t size, const char *label, uint64_t max_pixels, dec_out *out,
                    qvl_error *err);
qvl_status dec_gif(const uint8_t *data, size_t size, const char *label, uint64_t max_pixels, dec_out *out,
                   qvl_error *err);
qvl_status dec_bmp(const uint8_t *data, size_t size, const char *label, uint64_t max_pixels, dec_out *out,
                   qvl_error *err);

/* Dimensions from a header: QVL_ERR_FORMAT for a zero or negative side, QVL_ERR_LIMIT for more than max_pixels
 * pixels or sides above INT32_MAX; `fmt` names the format in the message. */
qvl_status dec_check_dims(int64_t width, int64_t height, uint64_t max_pixels, const char *label, const char *fmt,
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

#endif
