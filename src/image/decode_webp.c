/* decode_webp.c — WebP (lossy, lossless, alpha, animated) the way Pillow 13 reads it: libwebp's WebPAnimDecoder in
 * non-premultiplied RGBA, first frame of the canvas (the area outside a smaller first frame is transparent black).
 * Pillow's mode is RGBA when the demuxer's format flags have ALPHA_FLAG and RGB (rawmode RGBX, alpha dropped)
 * otherwise; with want_alpha an RGBA image hands its alpha on to be composited. EXIF and XMP come from the muxed
 * chunks. The canvas size is checked against the pixel limit before the decoder allocates its canvas. */
#include <stdlib.h>
#include <string.h>

#include <webp/decode.h>
#include <webp/demux.h>

#include "core/error.h"
#include "image/decode.h"

static int webp_orientation(const WebPDemuxer *dmx) {
    WebPChunkIterator it;
    int o = 0;
    if (WebPDemuxGetChunk(dmx, "EXIF", 1, &it)) {
        o = dec_exif_orientation(it.chunk.bytes, it.chunk.size);
        WebPDemuxReleaseChunkIterator(&it);
    }
    if (o == 0 && WebPDemuxGetChunk(dmx, "XMP ", 1, &it)) {
        o = dec_xmp_orientation(it.chunk.bytes, it.chunk.size);
        WebPDemuxReleaseChunkIterator(&it);
    }
    return o;
}

qvl_status dec_webp(const uint8_t *data, size_t size, const char *label, const dec_limits *lim, dec_out *out,
                    qvl_error *err) {
    WebPData wd = {data, size};
    WebPDemuxer *dmx = WebPDemux(&wd);
    /* libwebp returns NULL for a failed allocation and for a parse error alike */
    if (!dmx)
        return err_fail(err, QVL_ERR_FORMAT, "%s: corrupt or truncated WebP: cannot parse the container (or out of "
                        "memory: libwebp's demuxer does not tell which)", label);
    uint32_t w = WebPDemuxGetI(dmx, WEBP_FF_CANVAS_WIDTH), h = WebPDemuxGetI(dmx, WEBP_FF_CANVAS_HEIGHT);
    uint32_t frames = WebPDemuxGetI(dmx, WEBP_FF_FRAME_COUNT);
    qvl_status s = dec_check_canvas(w, h, lim, label, "WebP canvas", err);
    if (s == QVL_OK && frames == 0) s = err_fail(err, QVL_ERR_FORMAT, "%s: WebP: no frames", label);
    if (s != QVL_OK) {
        WebPDemuxDelete(dmx);
        return s;
    }
    out->orientation = webp_orientation(dmx);
    int has_alpha = (WebPDemuxGetI(dmx, WEBP_FF_FORMAT_FLAGS) & ALPHA_FLAG) != 0;
    WebPDemuxDelete(dmx);

    WebPAnimDecoderOptions opt;
    if (!WebPAnimDecoderOptionsInit(&opt))
        return err_fail(err, QVL_ERR_INTERNAL, "%s: WebP: libwebp version mismatch", label);
    opt.color_mode = MODE_RGBA;
    opt.use_threads = 0;
    WebPAnimDecoder *dec = WebPAnimDecoderNew(&wd, &opt);
    /* The same bytes demuxed above and the canvas is within the limit: what is left to fail is an allocation. */
    if (!dec) return err_fail(err, QVL_ERR_NOMEM, "%s: WebP: out of memory creating the decoder", label);
    uint8_t *rgba = NULL;
    int ts = 0;
    if (!WebPAnimDecoderGetNext(dec, &rgba, &ts) || !rgba) {
        WebPAnimDecoderDelete(dec);
        return err_fail(err, QVL_ERR_FORMAT, "%s: corrupt or truncated WebP: cannot decode the first frame", label);
    }
    int keep_alpha = has_alpha && out->want_alpha;
    uint8_t *rgb = dec_alloc_pixels(w, h, 3), *alpha = keep_alpha ? dec_alloc_pixels(w, h, 1) : NULL;
    if (!rgb || (keep_alpha && !alpha)) {
        WebPAnimDecoderDelete(dec);
        free(rgb);
        free(alpha);
        return err_fail(err, QVL_ERR_NOMEM, "%s: WebP: cannot allocate %ux%u pixels", label, w, h);
    }
    size_t n = (size_t)w * h;
    for (size_t i = 0; i < n; i++) memcpy(rgb + 3 * i, rgba + 4 * i, 3);
    if (alpha)
        for (size_t i = 0; i < n; i++) alpha[i] = rgba[4 * i + 3];
    WebPAnimDecoderDelete(dec);
    out->width = (int32_t)w;
    out->height = (int32_t)h;
    out->rgb = rgb;
    out->alpha = alpha;
    return QVL_OK;
}
