/* video_sample.c — which source frames a video contributes: Qwen3VLVideoProcessor.sample_frames, exactly; and
 * the seconds of each temporal patch that Qwen3VLProcessor puts in the prompt (qvl_video_timestamps, below).
 *
 * transformers 5.23 (models/qwen3_vl/video_processing_qwen3_vl.py), with `metadata` the video's frame count and
 * native rate:
 *
 *     fps = fps if fps is not None else self.fps                          # class default 2
 *     if num_frames is None and fps is not None:
 *         if metadata.fps is None: metadata.fps = 24                      # unknown native rate
 *         num_frames = int(total_num_frames / metadata.fps * fps)         # truncation toward zero
 *         num_frames = min(max(num_frames, self.min_frames), self.max_frames, total_num_frames)
 *     if num_frames is None:                                              # fps=None and num_frames=None
 *         num_frames = min(max(total_num_frames, self.min_frames), self.max_frames)
 *     indices = np.linspace(0, total_num_frames - 1, num_frames).round().astype(int)
 *
 * An explicit num_frames is used as given: not clamped by min/max frames nor by the frame count, so asking for
 * more frames than the video has repeats indices. So does the fps=None branch when total < min_frames. The
 * fps branch never exceeds the frame count. numpy's linspace (numpy 2.x, function_base.py) evaluates
 * y[i] = i · ((stop − start) / (num − 1)) + start in double and stores stop exactly in the last slot; np.round
 * rounds half to even, which rint does in the default rounding mode. */
#include <math.h>
#include <string.h>

#include "core/error.h"
#include "core/params.h"
#include "image/image_params.h"

void qvl_video_params_init(qvl_video_params *p, size_t struct_size) {
    qvl_video_params d;
    video_defaults(&d);
    params_init(p, struct_size, &d, sizeof d);
}

qvl_status video_params_take(qvl_video_params *full, const qvl_video_params *p, qvl_error *err) {
    video_defaults(full);
    return params_take(full, sizeof *full, p, "qvl_video_params", err);
}

void video_defaults(qvl_video_params *p) {
    memset(p, 0, sizeof *p);
    p->struct_size = sizeof *p;
    p->fps = 2.0;
    p->num_frames = 0;
    p->min_frames = 4;
    p->max_frames = 768;
    p->default_fps = 24.0;
    p->max_pixels = 178956970u; /* LIMIT_DEF_IMAGE_PIXELS */
}

/* The number of frames sample_frames picks; *n_out is set on success. */
static qvl_status sample_count(int64_t total, double video_fps, const qvl_video_params *p, int64_t *n_out,
                               qvl_error *err) {
    if (p->num_frames > 0) {
        *n_out = p->num_frames;
        return QVL_OK;
    }
    if (p->num_frames < 0)
        return err_fail(err, QVL_ERR_INVALID_ARG, "video sampling: num_frames %d is negative", (int)p->num_frames);
    if (!(p->fps > 0.0)) { /* fps=None: every frame, within [min_frames, max_frames] */
        int64_t n = total > p->min_frames ? total : p->min_frames;
        *n_out = n < p->max_frames ? n : p->max_frames;
        return QVL_OK;
    }
    if (!(video_fps > 0.0) || !isfinite(video_fps)) video_fps = p->default_fps; /* unknown native rate */
    if (!(video_fps > 0.0) || !isfinite(video_fps))
        return err_fail(err, QVL_ERR_INVALID_ARG, "video sampling: default_fps %g is not a positive rate",
                        p->default_fps);
    double x = (double)total / video_fps * p->fps; /* Python's float expression, left to right */
    if (isnan(x)) return err_fail(err, QVL_ERR_INVALID_ARG, "video sampling: fps %g gives no frame count", p->fps);
    /* int() truncates; the result is then clamped into [min_frames, max_frames] and to total, so a huge or
       infinite x only needs to be brought into int64 range first. */
    double t = trunc(x);
    int64_t n = t >= 9.0e18 ? INT64_MAX : (int64_t)t;
    if (n < p->min_frames) n = p->min_frames;
    if (n > p->max_frames) n = p->max_frames;
    if (n > total) n = total;
    *n_out = n;
    return QVL_OK;
}

qvl_status qvl_video_sample_indices(int64_t total, double video_fps, const qvl_video_params *p, int64_t *indices,
                                    size_t cap, size_t *n, qvl_error *err) {
    err_clear(err);
    if (n) *n = 0;
    if (!n || (cap > 0 && !indices))
        return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_video_sample_indices: %s is NULL", !n ? "n" : "indices");
    qvl_video_params vp;
    TRY(video_params_take(&vp, p, err));
    p = &vp;
    if (total < 1)
        return err_fail(err, QVL_ERR_INVALID_ARG, "video sampling: the video has %lld frames", (long long)total);
    int64_t count = 0;
    TRY(sample_count(total, video_fps, p, &count, err));
    if (count < 0) /* np.linspace raises on a negative count (max_frames < 0) */
        return err_fail(err, QVL_ERR_INVALID_ARG, "video sampling: %lld frames (max_frames %d)", (long long)count,
                        (int)p->max_frames);
    if ((uint64_t)count > SIZE_MAX)
        return err_fail(err, QVL_ERR_LIMIT, "video sampling: %lld frames", (long long)count);
    size_t m = (size_t)count < cap ? (size_t)count : cap;
    double stop = (double)(total - 1);
    if (count > 1) {
        double step = stop / (double)(count - 1);
        for (size_t i = 0; i < m; i++) {
            /* step == 0 (total 1): numpy computes (i / div) · delta instead, also 0 */
            double y = i + 1 == (size_t)count ? stop : (double)i * step;
            indices[i] = (int64_t)rint(y);
        }
    } else if (m == 1) {
        indices[0] = 0; /* num = 1: y = 0 · delta + start */
    }
    *n = (size_t)count;
    return QVL_OK;
}

/* Qwen3VLProcessor._calculate_timestamps (transformers 5.23, models/qwen3_vl/processing_qwen3_vl.py), which
 * replace_video_token calls with metadata.frames_indices, metadata.fps (the container's rate, 24 when unknown) and
 * video_processor.temporal_patch_size as `merge_size`:
 *
 *     if len(indices) % merge_size != 0:
 *         indices.extend(indices[-1] for _ in range(merge_size - len(indices) % merge_size))
 *     timestamps = [idx / video_fps for idx in indices]
 *     timestamps = [(timestamps[i] + timestamps[i + merge_size - 1]) / 2
 *                   for i in range(0, len(timestamps), merge_size)]
 *
 * and prints each as f"<{t:.1f} seconds>". Python's int / float converts the index to a double (exact below
 * 2^53) and divides once, so each value here is the same two IEEE divisions, one addition and one halving, in
 * that order: (i0 / fps + i1 / fps) / 2, not (i0 + i1) / (2 · fps), which rounds differently (in the last bit,
 * and then in the printed tenth: 0.15000000000000002 is "0.2", 0.14999999999999999 "0.1"). */
qvl_status qvl_video_timestamps(const qvl_video *v, int32_t temporal_patch, double *ts, size_t cap, size_t *n,
                                qvl_error *err) {
    err_clear(err);
    if (n) *n = 0;
    if (!v || !n || (cap > 0 && !ts))
        return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_video_timestamps: %s is NULL", !v ? "v" : !n ? "n" : "ts");
    if (temporal_patch < 1)
        return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_video_timestamps: temporal_patch %d is not a positive count",
                        (int)temporal_patch);
    if (v->n_frames < 1)
        return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_video_timestamps: the video has %d frames (v->n_frames)",
                        (int)v->n_frames);
    if (!v->indices)
        return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_video_timestamps: v->indices is NULL with %d frames",
                        (int)v->n_frames);
    if (!(v->fps > 0.0) || !isfinite(v->fps))
        return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_video_timestamps: v->fps %g is not a positive finite rate",
                        v->fps);
    size_t frames = (size_t)v->n_frames, tp = (size_t)temporal_patch;
    size_t count = frames / tp + (frames % tp != 0);
    size_t m = count < cap ? count : cap;
    for (size_t g = 0; g < m; g++) {
        size_t first = g * tp, last = first + tp - 1; /* in the padded list: past the end means the last frame */
        if (last >= frames) last = frames - 1;
        double a = (double)v->indices[first] / v->fps;
        double b = (double)v->indices[last] / v->fps;
        ts[g] = (a + b) / 2.0;
    }
    *n = count;
    return QVL_OK;
}
