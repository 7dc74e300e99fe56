/* decode_none.c — the JPEG, PNG, WebP and GIF decoders of a core-only build (QVL_MEDIA=OFF; CMake compiles this
 * file instead of decode_jpeg/png/webp/gif.c): decode.c's dispatch still recognises the format by its magic
 * bytes, and the image is refused with QVL_ERR_UNSUPPORTED naming it. BMP (decode_bmp.c, no dependency) is read. */
#include "core/error.h"
#include "image/decode.h"

static qvl_status no_decoder(const char *label, const char *fmt, dec_out *out, qvl_error *err) {
    out->rgb = NULL;
    return err_fail(err, QVL_ERR_UNSUPPORTED,
                    "%s: a %s image, but this libqvl was built without image decoders (QVL_MEDIA=OFF; only BMP is read)",
                    label, fmt);
}

#define QVL_NO_DECODER(fn, fmt)                                                                                     \
    qvl_status fn(const uint8_t *data, size_t size, const char *label, const dec_limits *lim, dec_out *out,          \
                  qvl_error *err) {                                                                                 \
        (void)data, (void)size, (void)lim;                                                                  \
        return no_decoder(label, fmt, out, err);                                                                   \
    }
QVL_NO_DECODER(dec_jpeg, "JPEG")
QVL_NO_DECODER(dec_png, "PNG")
QVL_NO_DECODER(dec_webp, "WebP")
QVL_NO_DECODER(dec_gif, "GIF")
