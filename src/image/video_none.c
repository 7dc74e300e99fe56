/* video_none.c — qvl_video_load in a build without FFmpeg (QVL_VIDEO=OFF; CMake compiles this file instead of
 * video.c): video files are refused, frame images (qvl_video_from_images, video_frames.c) still work. */
#include <string.h>

#include "core/error.h"

qvl_status qvl_video_load(const char *path, const qvl_video_params *p, qvl_video *out, qvl_error *err) {
    (void)p;
    err_clear(err);
    if (out) memset(out, 0, sizeof *out);
    if (!path || !out)
        return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_video_load: %s is NULL", path ? "out" : "path");
    return err_fail(err, QVL_ERR_UNSUPPORTED,
                    "%s: cannot read a video file: this libqvl was built without video support (QVL_VIDEO=OFF)", path);
}
