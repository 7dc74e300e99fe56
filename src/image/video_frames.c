/* video_frames.c — the parts of qvl_video that need no FFmpeg (compiled in every build): the sampled-frame buffer,
 * a video from frame images, qvl_video_free, and the entry points qvl_video_load / qvl_video_decode, which choose
 * by the first bytes (dec_sniff) what reads a video:
 *   an image (JPEG, PNG, WebP, GIF, BMP)  qvl's own decoders, as a one-frame video (what qvl_video_from_images makes
 *                                         of that one file); FFmpeg's image demuxers are never used;
 *   an accepted container                 video_container: FFmpeg through qvl's own I/O (video.c), or refused in
 *                                         the QVL_VIDEO=OFF build (video_none.c);
 *   anything else                         refused before FFmpeg sees it: QVL_ERR_UNSUPPORTED naming the format where
 *                                         FFmpeg's probe recognises it (an HLS playlist, an ffconcat script, ...),
 *                                         else QVL_ERR_FORMAT saying what the first bytes look like. */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/limits.h"
#include "image/decode.h"
#include "image/image_params.h"
#include "image/video_frames.h"
#include "io/fileutil.h"

/* Bytes read for the dispatch: dec_sniff looks at the first DEC_SNIFF_BYTES, FFmpeg's probe (naming a refused
 * format) at all of them. */
enum { VIDEO_HEAD_BYTES = 4096 };

/* Allocate the output's table of n sampled frames and room for `held` frames of w x h. */
static qvl_status alloc_frames(qvl_video *out, int32_t w, int32_t h, size_t n, size_t held, const char *what,
                               qvl_error *err) {
    size_t fs, total;
    if (n > INT32_MAX || size_mul_overflow((size_t)w * (size_t)h, 3, &fs) || size_mul_overflow(fs, held, &total))
        return err_fail(err, QVL_ERR_LIMIT, "%s: %zu frames of %dx%d are too large", what, n, (int)w, (int)h);
    out->rgb = held ? malloc(total + VIDEO_SWS_SLACK) : NULL; /* the last frame's last row may be written by
                                                                 sws_scale */
    out->indices = malloc(n * sizeof *out->indices);
    if ((held && !out->rgb) || !out->indices)
        return err_fail(err, QVL_ERR_NOMEM, "%s: cannot allocate %zu frames of %dx%d", what, held, (int)w, (int)h);
    out->width = w;
    out->height = h;
    out->n_frames = (int32_t)n;
    return QVL_OK;
}

/* The limits on n sampled frames of w x h, from the header's size and the sampled count, before any frame buffer
 * exists; max_video_pixels only where they are all held (not `streamed` to a sink). `counted` < 0: n is what
 * sampling picks; else the header gives no frame count, `counted` frames of the stream are counted so far and n,
 * what sampling picks from that many (at least 1), is a lower bound. */
static qvl_status frames_fit(const qvl_limits *lim, int32_t w, int32_t h, size_t n, int streamed, int64_t counted,
                             const char *what, qvl_error *err) {
    const char *least = counted >= 0 ? "at least " : "";
    char so_far[96] = "";
    if (counted >= 0)
        snprintf(so_far, sizeof so_far, " (the header gives no frame count; %lld counted so far)", (long long)counted);
    if (n > lim->max_video_frames)
        return limit_fail(err, "max_video_frames", lim->max_video_frames, "%s: sampling picks %s%zu frames%s, more "
                          "than the %u allowed", what, least, n, so_far, (unsigned)lim->max_video_frames);
    if (w > 0 && h > 0 && (uint64_t)w * (uint64_t)h > lim->max_image_pixels)
        return limit_fail(err, "max_image_pixels", lim->max_image_pixels, "%s: %dx%d frames have more than the %llu "
                          "pixels allowed", what, (int)w, (int)h, (unsigned long long)lim->max_image_pixels);
    if (!streamed && n > 0 && w > 0 && h > 0 && (uint64_t)w * (uint64_t)h > lim->max_video_pixels / n)
        return limit_fail(err, "max_video_pixels", lim->max_video_pixels, "%s: %s%zu frames of %dx%d are %llu "
                          "pixels%s, more than the %llu allowed", what, least, n, (int)w, (int)h,
                          (unsigned long long)((uint64_t)w * (uint64_t)h * n), so_far,
                          (unsigned long long)lim->max_video_pixels);
    return QVL_OK;
}

qvl_status video_count_check(int64_t counted, int32_t w, int32_t h, double fps, const qvl_video_params *p,
                             int streamed, const char *what, qvl_error *err) {
    size_t n = 0;
    TRY(qvl_video_sample_indices(counted > 1 ? counted : 1, fps, p, NULL, 0, &n, err));
    qvl_limits lim;
    TRY(limits_take(&lim, p->limits, "qvl_video_params.limits", err));
    return frames_fit(&lim, w, h, n, streamed, counted, what, err);
}

qvl_status video_sample_into(qvl_video *out, int32_t w, int32_t h, int64_t total, double fps,
                             const qvl_video_params *p, const video_sink *sink, int held_one, const char *what,
                             qvl_error *err) {
    size_t n = 0;
    TRY(qvl_video_sample_indices(total, fps, p, NULL, 0, &n, err));
    if (n == 0) return err_fail(err, QVL_ERR_INVALID_ARG, "%s: sampling picks no frames", what);
    qvl_limits lim;
    TRY(limits_take(&lim, p->limits, "qvl_video_params.limits", err));
    TRY(frames_fit(&lim, w, h, n, sink != NULL, -1, what, err));
    TRY(alloc_frames(out, w, h, n, sink ? held_one != 0 : n, what, err));
    TRY(qvl_video_sample_indices(total, fps, p, out->indices, n, &n, err));
    out->total_frames = total;
    out->fps = fps;
    return sink ? sink->begin(sink->user, out, err) : QVL_OK;
}

/* The decode params of a video's images (frame files, a still): the caller's `dp` (an item's, taken; NULL: the
 * defaults), so that EXIF orientation and alpha are handled as for the same file given as an image, under the
 * video's pixel limit (the smaller of the two max_pixels) and limits. */
static void frame_decode_params(qvl_decode_params *out, const qvl_video_params *p, const qvl_decode_params *dp) {
    if (dp) *out = *dp;
    else qvl_decode_params_default(out);
    if (!dp || p->max_pixels < out->max_pixels) out->max_pixels = p->max_pixels;
    out->limits = p->limits;
}

/* Decode every image in order (each must have the first one's size) and keep the sampled ones. */
/* Each sampled frame to `sink` (NULL: into out->rgb) as soon as its file is decoded. */
static qvl_status from_images(const char *const *paths, size_t n, const qvl_video_params *p,
                              const qvl_decode_params *item_dp, const stop_probe *stop, const video_sink *sink,
                              qvl_video *out, qvl_error *err) {
    qvl_decode_params dp;
    frame_decode_params(&dp, p, item_dp);
    size_t next = 0, fs = 0;
    for (size_t i = 0; i < n; i++) {
        if (!paths[i]) return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_video_from_images: path %zu is NULL", i);
        qvl_image img = {0};
        TRY(image_load_item(paths[i], &dp, stop, &img, err)); /* stopped before each file and within it */
        qvl_status s = QVL_OK;
        if (i == 0) { /* the first frame fixes the size */
            s = video_sample_into(out, img.width, img.height, (int64_t)n, p->default_fps, p, sink, 0, paths[0], err);
            fs = (size_t)img.width * (size_t)img.height * 3;
        } else if (img.width != out->width || img.height != out->height) {
            s = err_fail(err, QVL_ERR_INVALID_ARG, "%s: frame %zu is %dx%d, the first frame (%s) is %dx%d", paths[i],
                         i, (int)img.width, (int)img.height, paths[0], (int)out->width, (int)out->height);
        }
        for (size_t first = next; s == QVL_OK && next < (size_t)out->n_frames && out->indices[next] == (int64_t)i;
             next++)
            if (sink) s = sink->frame(sink->user, next, img.rgb, err);
            else memcpy(out->rgb + next * fs, next == first ? img.rgb : out->rgb + first * fs, fs);
        qvl_image_free(&img);
        if (s != QVL_OK) return s;
    }
    if (next != (size_t)out->n_frames)
        return err_fail(err, QVL_ERR_INTERNAL, "qvl_video_from_images: %zu of %d sampled frames filled", next,
                        (int)out->n_frames);
    return QVL_OK;
}

qvl_status video_from_images_item(const char *const *paths, size_t n, const qvl_video_params *p,
                                  const qvl_decode_params *dp, const stop_probe *stop, const video_sink *sink,
                                  qvl_video *out, qvl_error *err) {
    if (out) memset(out, 0, sizeof *out);
    if (!paths || !out || n == 0)
        return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_video_from_images: %s",
                        n == 0 ? "no frames (n is 0)" : !paths ? "paths is NULL" : "out is NULL");
    qvl_video_params def;
    TRY(video_params_take(&def, p, err));
    p = &def;
    qvl_status s = from_images(paths, n, p, dp, stop, sink, out, err);
    if (s != QVL_OK) qvl_video_free(out);
    return s;
}

qvl_status qvl_video_from_images(const char *const *paths, size_t n, const qvl_video_params *p, qvl_video *out,
                                 qvl_error *err) {
    err_clear(err);
    return video_from_images_item(paths, n, p, NULL, NULL, NULL, out, err);
}

long video_src_read(const video_src *src, void *buf, size_t n, uint64_t off) {
    if (off >= src->size) return 0;
    if (n > src->size - off) n = (size_t)(src->size - off);
    if (n > (size_t)LONG_MAX) n = (size_t)LONG_MAX;
    if (src->fd < 0) {
        memcpy(buf, src->data + off, n);
        return (long)n;
    }
    size_t got;
    if (fu_pread_full(src->fd, buf, n, off, &got) != 0 && got == 0) return -1;
    return (long)got;
}

/* An image as a one-frame video: decoded by qvl's decoders (the decode params of frame_decode_params), sampled at
 * p->default_fps like qvl_video_from_images of that one file. */
static qvl_status video_still(const video_src *src, const char *label, const qvl_video_params *p,
                              const qvl_decode_params *item_dp, const stop_probe *stop, const video_sink *sink,
                              qvl_video *out, qvl_error *err) {
    const uint8_t *d = src->data;
    uint8_t *owned = NULL;
    if (src->fd >= 0) {
        qvl_limits lim;
        TRY(limits_take(&lim, p->limits, "qvl_video_params.limits", err));
        if (src->size > lim.max_input_bytes)
            return limit_fail(err, "max_input_bytes", lim.max_input_bytes, "%s: %llu bytes, more than the %llu allowed",
                              label, (unsigned long long)src->size, (unsigned long long)lim.max_input_bytes);
        owned = malloc(src->size ? (size_t)src->size : 1);
        if (!owned) return err_fail(err, QVL_ERR_NOMEM, "%s: cannot allocate %llu bytes", label,
                                    (unsigned long long)src->size);
        long n = video_src_read(src, owned, (size_t)src->size, 0);
        if (n < 0 || (uint64_t)n != src->size) {
            int e = errno;
            free(owned);
            return err_fail(err, QVL_ERR_IO, "%s: %s", label, n < 0 ? strerror(e) : "short read");
        }
        d = owned;
    }
    qvl_decode_params dp;
    frame_decode_params(&dp, p, item_dp);
    qvl_image img;
    qvl_status s = image_decode_labeled(d, (size_t)src->size, &dp, stop, label, &img, err);
    free(owned);
    if (s != QVL_OK) return s;
    s = video_sample_into(out, img.width, img.height, 1, p->default_fps, p, sink, 0, label, err);
    size_t fs = (size_t)img.width * (size_t)img.height * 3;
    for (int32_t i = 0; s == QVL_OK && i < out->n_frames; i++)
        if (sink) s = sink->frame(sink->user, (size_t)i, img.rgb, err);
        else memcpy(out->rgb + (size_t)i * fs, img.rgb, fs);
    qvl_image_free(&img);
    return s;
}

/* The dispatch of every video entry point (see the top of this file). */
static qvl_status video_read(const video_src *src, const char *label, const qvl_video_params *p,
                             const qvl_decode_params *dp, const stop_probe *stop, const video_sink *sink,
                             qvl_video *out, qvl_error *err) {
    TRY(stop_before(stop, label, err));
    uint8_t head[VIDEO_HEAD_BYTES];
    long n = video_src_read(src, head, sizeof head, 0);
    if (n < 0) return err_fail(err, QVL_ERR_IO, "%s: cannot read: %s", label, strerror(errno));
    const dec_format f = dec_sniff(head, (size_t)n);
    if (dec_is_image(f)) return video_still(src, label, p, dp, stop, sink, out, err);
    if (dec_is_video(f)) return video_container(src, (int)f, label, p, dp, stop, sink, out, err);
    char name[192];
    const char *ff = video_probe_name(head, (size_t)n, name, sizeof name);
    if (ff)
        return err_fail(err, QVL_ERR_UNSUPPORTED, "%s: FFmpeg detects %s, not an accepted video container (videos: "
                        DEC_VIDEO_FORMATS "); qvl never lets FFmpeg open playlists, concat scripts or any other "
                        "file or URL that an input names", label, ff);
    return dec_unrecognised(label, head, (size_t)n, src->size, err);
}

qvl_status video_decode_labeled(const void *data, size_t size, const qvl_video_params *p,
                                const qvl_decode_params *dp, const stop_probe *stop, const video_sink *sink,
                                const char *label, qvl_video *out, qvl_error *err) {
    memset(out, 0, sizeof *out);
    /* the bytes in memory, as qvl_image_decode's, before anything reads them */
    qvl_limits lim;
    TRY(limits_take(&lim, p->limits, "qvl_video_params.limits", err));
    if (size > lim.max_input_bytes)
        return limit_fail(err, "max_input_bytes", lim.max_input_bytes, "%s: %zu bytes, more than the %llu allowed",
                          label, size, (unsigned long long)lim.max_input_bytes);
    video_src src = {data, -1, size};
    qvl_status s = video_read(&src, label, p, dp, stop, sink, out, err);
    if (s != QVL_OK) qvl_video_free(out);
    return s;
}

qvl_status qvl_video_decode(const void *data, size_t size, const qvl_video_params *p, qvl_video *out,
                            qvl_error *err) {
    err_clear(err);
    if (out) memset(out, 0, sizeof *out);
    if (!out || (!data && size))
        return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_video_decode: %s is NULL", out ? "data" : "out");
    qvl_video_params def;
    TRY(video_params_take(&def, p, err));
    return video_decode_labeled(data, size, &def, NULL, NULL, NULL, "<memory>", out, err);
}

qvl_status qvl_video_load(const char *path, const qvl_video_params *p, qvl_video *out, qvl_error *err) {
    err_clear(err);
    return video_load_item(path, p, NULL, NULL, NULL, out, err);
}

qvl_status video_load_item(const char *path, const qvl_video_params *p, const qvl_decode_params *dp,
                           const stop_probe *stop, const video_sink *sink, qvl_video *out, qvl_error *err) {
    if (out) memset(out, 0, sizeof *out);
    if (!path || !out)
        return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_video_load: %s is NULL", path ? "out" : "path");
    qvl_video_params def;
    TRY(video_params_take(&def, p, err));
    /* Opened once, without blocking, and only a regular file (a FIFO or a device fails here, an I/O error); every
       read after that, FFmpeg's included, goes through this descriptor: the path is never opened again. */
    int fd;
    size_t size;
    TRY(fu_open_fd(path, &fd, &size, err));
    video_src src = {NULL, fd, size};
    qvl_status s = video_read(&src, path, &def, dp, stop, sink, out, err);
    close(fd);
    if (s != QVL_OK) qvl_video_free(out);
    return s;
}

void qvl_video_free(qvl_video *v) {
    if (!v) return;
    free(v->rgb);
    free(v->indices);
    memset(v, 0, sizeof *v);
}
