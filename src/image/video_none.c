/* video_none.c — video containers in a build without FFmpeg (QVL_VIDEO=OFF; CMake compiles this file instead of
 * video.c). qvl_video_load and qvl_video_decode (video_frames.c) exist in every build and dispatch as usual: an
 * image is still read as a one-frame video, unrecognised bytes get the usual message, and a video container is
 * refused here with QVL_ERR_UNSUPPORTED. */
#include "core/error.h"
#include "image/decode.h"
#include "image/video_frames.h"

qvl_status video_container(const video_src *src, int fmt, const char *label, const qvl_video_params *p,
                           const qvl_decode_params *dp, const stop_probe *stop, const video_sink *sink,
                           qvl_video *out, qvl_error *err) {
    (void)src, (void)p, (void)dp, (void)stop, (void)sink, (void)out;
    return err_fail(err, QVL_ERR_UNSUPPORTED,
                    "%s: a video (%s), but this libqvl was built without video support (QVL_VIDEO=OFF): cannot "
                    "read a video file", label, dec_format_name((dec_format)fmt));
}

const char *video_probe_name(const uint8_t *head, size_t n, char *buf, size_t cap) {
    (void)head, (void)n, (void)buf, (void)cap;
    return NULL;
}
