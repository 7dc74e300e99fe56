/* video_frames.c — the parts of qvl_video that need no FFmpeg (compiled in every build): the sampled-frame buffer,
 * a video from frame images, qvl_video_free. video.c (QVL_VIDEO=ON) reads video files into the same buffer;
 * video_none.c (QVL_VIDEO=OFF) refuses them. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/limits.h"
#include "image/image_params.h"
#include "image/video_frames.h"

/* Allocate the output for n frames of w x h. */
static qvl_status alloc_frames(qvl_video *out, int32_t w, int32_t h, size_t n, const char *what, qvl_error *err) {
    size_t fs, total;
    if (n > INT32_MAX || size_mul_overflow((size_t)w * (size_t)h, 3, &fs) || size_mul_overflow(fs, n, &total))
        return err_fail(err, QVL_ERR_LIMIT, "%s: %zu frames of %dx%d are too large", what, n, (int)w, (int)h);
    out->rgb = malloc(total + VIDEO_SWS_SLACK); /* the last frame's last row may be written by sws_scale */
    out->indices = malloc(n * sizeof *out->indices);
    if (!out->rgb || !out->indices)
        return err_fail(err, QVL_ERR_NOMEM, "%s: cannot allocate %zu frames of %dx%d", what, n, (int)w, (int)h);
    out->width = w;
    out->height = h;
    out->n_frames = (int32_t)n;
    return QVL_OK;
}

qvl_status video_sample_into(qvl_video *out, int32_t w, int32_t h, int64_t total, double fps,
                             const qvl_video_params *p, const char *what, qvl_error *err) {
    size_t n = 0;
    TRY(qvl_video_sample_indices(total, fps, p, NULL, 0, &n, err));
    if (n == 0) return err_fail(err, QVL_ERR_INVALID_ARG, "%s: sampling picks no frames", what);
    /* the frames to hold, from the header's size and the sampled count, before any frame buffer exists */
    qvl_limits lim;
    TRY(limits_take(&lim, p->limits, "qvl_video_params.limits", err));
    if (n > lim.max_video_frames)
        return limit_fail(err, "max_video_frames", lim.max_video_frames, "%s: sampling picks %zu frames, more than the "
                          "%u allowed", what, n, (unsigned)lim.max_video_frames);
    if (w > 0 && h > 0 && (uint64_t)w * (uint64_t)h > lim.max_image_pixels)
        return limit_fail(err, "max_image_pixels", lim.max_image_pixels, "%s: %dx%d frames have more than the %llu "
                          "pixels allowed", what, (int)w, (int)h, (unsigned long long)lim.max_image_pixels);
    if (w > 0 && h > 0 && (uint64_t)w * (uint64_t)h > lim.max_video_pixels / n)
        return limit_fail(err, "max_video_pixels", lim.max_video_pixels, "%s: %zu frames of %dx%d are %llu pixels, "
                          "more than the %llu allowed", what, n, (int)w, (int)h,
                          (unsigned long long)((uint64_t)w * (uint64_t)h * n), (unsigned long long)lim.max_video_pixels);
    TRY(alloc_frames(out, w, h, n, what, err));
    TRY(qvl_video_sample_indices(total, fps, p, out->indices, n, &n, err));
    out->total_frames = total;
    out->fps = fps;
    return QVL_OK;
}

/* Decode every image in order (each must have the first one's size) and keep the sampled ones. */
static qvl_status from_images(const char *const *paths, size_t n, const qvl_video_params *p, qvl_video *out,
                              qvl_error *err) {
    qvl_decode_params dp;
    qvl_decode_params_default(&dp);
    dp.max_pixels = p->max_pixels;
    dp.limits = p->limits;
    size_t next = 0, fs = 0;
    for (size_t i = 0; i < n; i++) {
        if (!paths[i]) return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_video_from_images: path %zu is NULL", i);
        qvl_image img = {0};
        TRY(qvl_image_load(paths[i], &dp, &img, err));
        qvl_status s = QVL_OK;
        if (i == 0) { /* the first frame fixes the size */
            s = video_sample_into(out, img.width, img.height, (int64_t)n, p->default_fps, p, paths[0], err);
            fs = (size_t)img.width * (size_t)img.height * 3;
        } else if (img.width != out->width || img.height != out->height) {
            s = err_fail(err, QVL_ERR_INVALID_ARG, "%s: frame %zu is %dx%d, the first frame (%s) is %dx%d", paths[i],
                         i, (int)img.width, (int)img.height, paths[0], (int)out->width, (int)out->height);
        }
        for (size_t first = next; s == QVL_OK && next < (size_t)out->n_frames && out->indices[next] == (int64_t)i;
             next++)
            memcpy(out->rgb + next * fs, next == first ? img.rgb : out->rgb + first * fs, fs);
        qvl_image_free(&img);
        if (s != QVL_OK) return s;
    }
    if (next != (size_t)out->n_frames)
        return err_fail(err, QVL_ERR_INTERNAL, "qvl_video_from_images: %zu of %d sampled frames filled", next,
                        (int)out->n_frames);
    return QVL_OK;
}

qvl_status qvl_video_from_images(const char *const *paths, size_t n, const qvl_video_params *p, qvl_video *out,
                                 qvl_error *err) {
    err_clear(err);
    if (out) memset(out, 0, sizeof *out);
    if (!paths || !out || n == 0)
        return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_video_from_images: %s",
                        n == 0 ? "no frames (n is 0)" : !paths ? "paths is NULL" : "out is NULL");
    qvl_video_params def;
    TRY(video_params_take(&def, p, err));
    p = &def;
    qvl_status s = from_images(paths, n, p, out, err);
    if (s != QVL_OK) qvl_video_free(out);
    return s;
}

void qvl_video_free(qvl_video *v) {
    if (!v) return;
    free(v->rgb);
    free(v->indices);
    memset(v, 0, sizeof *v);
}
