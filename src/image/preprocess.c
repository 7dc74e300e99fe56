/* preprocess.c — from decoded RGB to the tower's pixel rows, as transformers' Qwen3-VL processors do it:
 * smart_resize target → exact resize (torchvision or PIL kernel) → rescale + normalize (the chosen processor's
 * float32 sequence, as a 256-entry table per channel) → temporal fill → merge-block-major patch rows.
 * Compiled without FMA contraction: every float operation rounds as numpy/torch round it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/params.h"
#include "image/image_params.h"
#include "core/pool.h"
#include "image/resize.h"

void qvl_preprocess_params_init(qvl_preprocess_params *p, size_t struct_size) {
    qvl_preprocess_params d;
    preprocess_defaults(&d);
    params_init(p, struct_size, &d, sizeof d);
}

qvl_status preprocess_params_take(qvl_preprocess_params *full, const qvl_preprocess_params *p, qvl_error *err) {
    preprocess_defaults(full);
    return params_take(full, sizeof *full, p, "qvl_preprocess_params", err);
}

void preprocess_defaults(qvl_preprocess_params *p) {
    memset(p, 0, sizeof *p);
    p->struct_size = sizeof *p;
    p->resize = QVL_RESIZE_TORCHVISION;
    p->min_pixels = 65536;            /* preprocessor_config.json size.shortest_edge of every Qwen3-VL release */
    p->max_pixels = 16777216;         /* size.longest_edge */
    p->video_min_pixels = 4096;       /* video_preprocessor_config.json */
    p->video_max_pixels = 25165824;
    for (int c = 0; c < 3; c++) {
        p->image_mean[c] = 0.5f;
        p->image_std[c] = 0.5f;
    }
    p->rescale_factor = 1.0 / 255.0;
    p->patch = 16;
    p->temporal_patch = 2;
    p->merge = 2;
    p->cap_pixels_per_frame = 0;      /* transformers 5.23's default */
    p->max_video_tokens = 768;        /* Qwen3VLVideoProcessor.max_video_tokens */
}

/* Python's round() on a non-negative double: half to even (nearbyint in the default rounding mode). */
static double round_half_even(double x) { return nearbyint(x); }

qvl_status qvl_smart_resize(int32_t height, int32_t width, int32_t factor, uint64_t min_pixels, uint64_t max_pixels,
                            int32_t *out_h, int32_t *out_w, qvl_error *err) {
    err_clear(err);
    if (!out_h || !out_w)
        return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_smart_resize: %s is NULL", !out_h ? "out_height" : "out_width");
    if (height < 1 || width < 1 || factor < 1)
        return err_fail(err, QVL_ERR_INVALID_ARG,
                        "qvl_smart_resize: height %d, width %d, factor %d: each must be at least 1", height, width,
                        factor);
    if (max_pixels == 0) /* the reference divides by it (ZeroDivisionError) */
        return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_smart_resize: max_pixels is 0 (want at least 1)");
    double hi = height > width ? height : width, lo = height > width ? width : height;
    if (hi / lo > 200)
        return err_fail(err, QVL_ERR_INVALID_ARG, "image %dx%d: aspect ratio %.1f is above 200", width, height, hi / lo);
    double f = factor;
    double h_bar = round_half_even(height / f) * f, w_bar = round_half_even(width / f) * f;
    double hw = (double)height * (double)width;
    if (h_bar * w_bar > (double)max_pixels) {
        double beta = sqrt(hw / (double)max_pixels);
        h_bar = fmax(f, floor(height / beta / f) * f);
        w_bar = fmax(f, floor(width / beta / f) * f);
    } else if (h_bar * w_bar < (double)min_pixels) {
        double beta = sqrt((double)min_pixels / hw);
        h_bar = ceil(height * beta / f) * f;
        w_bar = ceil(width * beta / f) * f;
    }
    /* A side of at most factor/2 rounds to 0; with min_pixels ≥ 1 the min branch raises it to factor or more, so only
       min_pixels 0 leaves it there (the reference returns the 0, which its resize then fails on). */
    if (h_bar < 1 || w_bar < 1)
        return err_fail(err, QVL_ERR_INVALID_ARG, "image %dx%d: min_pixels %llu leaves the target size %.0fx%.0f "
                        "(a side of at most factor/2 = %g rounds to 0, and only min_pixels ≥ 1 raises it)", width, height,
                        (unsigned long long)min_pixels, w_bar, h_bar, f / 2);
    if (h_bar > 1e9 || w_bar > 1e9)
        return err_fail(err, QVL_ERR_LIMIT, "image %dx%d: target size %.0fx%.0f out of range", width, height, w_bar,
                        h_bar);
    *out_h = (int32_t)h_bar;
    *out_w = (int32_t)w_bar;
    return QVL_OK;
}

/* Qwen3VLVideoProcessor's smart_resize: one size for the whole clip, budget over t̄·h̄·w̄. */
static qvl_status video_smart_resize(int32_t frames, int32_t height, int32_t width, int32_t factor, int32_t tfactor,
                                     uint64_t min_pixels, uint64_t max_pixels, int32_t *out_h, int32_t *out_w,
                                     qvl_error *err) {
    if (frames < tfactor)
        return err_fail(err, QVL_ERR_INVALID_ARG, "video has %d frame(s); at least %d are needed", frames, tfactor);
    double h = height, w = width, f = factor;
    if (height < factor || width < factor) {
        double scale = fmax(f / h, f / w);
        h = (double)(int64_t)(h * scale);
        w = (double)(int64_t)(w * scale);
    }
    double hi = fmax(h, w), lo = fmin(h, w);
    if (lo < 1 || hi / lo > 200)
        return err_fail(err, QVL_ERR_INVALID_ARG, "video frames %dx%d: aspect ratio above 200", width, height);
    double h_bar = round_half_even(h / f) * f, w_bar = round_half_even(w / f) * f;
    double t_bar = round_half_even((double)frames / tfactor) * tfactor;
    if (t_bar * h_bar * w_bar > (double)max_pixels) {
        double beta = sqrt(((double)frames * h * w) / (double)max_pixels);
        h_bar = fmax(f, floor(h / beta / f) * f);
        w_bar = fmax(f, floor(w / beta / f) * f);
    } else if (t_bar * h_bar * w_bar < (double)min_pixels) {
        double beta = sqrt((double)min_pixels / ((double)frames * h * w));
        h_bar = ceil(h * beta / f) * f;
        w_bar = ceil(w * beta / f) * f;
    }
    if (h_bar < 1 || w_bar < 1 || h_bar > 1e9 || w_bar > 1e9)
        return err_fail(err, QVL_ERR_LIMIT, "video %dx%d: target size out of range", width, height);
    *out_h = (int32_t)h_bar;
    *out_w = (int32_t)w_bar;
    return QVL_OK;
}

qvl_status preprocess_geometry_check(const qvl_preprocess_params *p, const char *label, qvl_error *err) {
    if (p->patch < 1 || p->patch > 1024 || p->merge < 1 || p->merge > 16 || p->temporal_patch < 1 ||
        p->temporal_patch > 16)
        return err_fail(err, QVL_ERR_INVALID_ARG,
                        "%s%sqvl_preprocess_params: patch %d, merge %d, temporal_patch %d (want patch in 1..1024, "
                        "merge and temporal_patch in 1..16)", label ? label : "", label ? ": " : "", p->patch,
                        p->merge, p->temporal_patch);
    return QVL_OK;
}

static qvl_status check_params(const qvl_preprocess_params *p, qvl_error *err) {
    if (!p) return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_preprocess_params is NULL");
    TRY(preprocess_geometry_check(p, NULL, err));
    if (p->resize != QVL_RESIZE_TORCHVISION && p->resize != QVL_RESIZE_PIL && p->resize != QVL_RESIZE_PIL_LEGACY)
        return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_preprocess_params.resize is %d, not a qvl_resize_mode (0..2)",
                        (int)p->resize);
    if (!(p->rescale_factor > 0))
        return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_preprocess_params.rescale_factor is %g (want > 0)",
                        p->rescale_factor);
    for (int c = 0; c < 3; c++)
        if (!(p->image_std[c] != 0))
            return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_preprocess_params.image_std[%d] is %g (want nonzero)", c,
                            (double)p->image_std[c]);
    if (p->n_threads < 0 || p->n_threads > QVL_MAX_THREADS)
        return err_fail(err, QVL_ERR_INVALID_ARG,
                        "qvl_preprocess_params.n_threads is %d, outside 0..%d (0: one per CPU)", p->n_threads,
                        QVL_MAX_THREADS);
    for (int c = 0; c < 3; c++)
        if (!isfinite(p->image_mean[c]) || !isfinite(p->image_std[c]))
            return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_preprocess_params: image_mean[%d] %g / image_std[%d] %g "
                            "(want finite numbers)", c, (double)p->image_mean[c], c, (double)p->image_std[c]);
    if (!isfinite(p->rescale_factor))
        return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_preprocess_params.rescale_factor is %g (want finite)",
                        p->rescale_factor);
    if (p->cap_pixels_per_frame != 0 && p->cap_pixels_per_frame != 1)
        return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_preprocess_params.cap_pixels_per_frame is %d (want 0 or 1)",
                        p->cap_pixels_per_frame);
    if (p->max_video_tokens < 1 || p->max_video_tokens > 1048576)
        return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_preprocess_params.max_video_tokens is %d (want 1..1048576)",
                        (int)p->max_video_tokens);
    int32_t f = p->patch * p->merge;
    if ((p->size_h || p->size_w) && (p->size_h < f || p->size_w < f || p->size_h % f || p->size_w % f))
        return err_fail(err, QVL_ERR_INVALID_ARG,
                        "qvl_preprocess_params.size_h x size_w is %dx%d (want positive multiples of %d)", p->size_h,
                        p->size_w, f);
    return QVL_OK;
}

/* The image or frames a grid is asked for, whichever way its target is chosen (an exact size does not look at the
 * source otherwise): sides of at least 1, else a qvl_image / qvl_video filled in wrong (QVL_ERR_INVALID_ARG). */
static qvl_status check_source(int32_t w, int32_t h, const char *what, qvl_error *err) {
    if (w < 1 || h < 1)
        return err_fail(err, QVL_ERR_INVALID_ARG, "%s is %dx%d pixels (width x height); both sides must be at least 1",
                        what, w, h);
    return QVL_OK;
}

/* The resize from w x h to the target tw x th, if one is needed, within the sides the resize takes: refused with the
 * grid, as preprocessing would refuse it, so that a plan does not allocate the rows of an item that cannot be
 * resized. */
static qvl_status check_resize(int32_t w, int32_t h, int32_t tw, int32_t th, qvl_error *err) {
    if ((w != tw || h != th) &&
        (w > RESIZE_MAX_SIDE || h > RESIZE_MAX_SIDE || tw > RESIZE_MAX_SIDE || th > RESIZE_MAX_SIDE))
        return err_fail(err, QVL_ERR_LIMIT, "resize %dx%d -> %dx%d: a side above %d, the most the resize takes", w, h,
                        tw, th, RESIZE_MAX_SIDE);
    return QVL_OK;
}

static qvl_status image_target(int32_t h, int32_t w, const qvl_preprocess_params *p, int32_t *th, int32_t *tw,
                               qvl_error *err) {
    if (p->size_h && p->size_w) {
        /* an exact size is still held to the pixel budget: it replaces smart_resize, not the limit */
        if ((uint64_t)p->size_h * (uint64_t)p->size_w > p->max_pixels)
            return err_fail(err, QVL_ERR_LIMIT, "qvl_preprocess_params.size_h x size_w %dx%d is %llu pixels, above "
                            "max_pixels %llu (the image budget; raise max_pixels to allow it)", p->size_h, p->size_w,
                            (unsigned long long)p->size_h * (unsigned long long)p->size_w,
                            (unsigned long long)p->max_pixels);
        *th = p->size_h;
        *tw = p->size_w;
        return QVL_OK;
    }
    return qvl_smart_resize(h, w, p->patch * p->merge, p->min_pixels, p->max_pixels, th, tw, err);
}

qvl_status qvl_image_grid(const qvl_image *img, const qvl_preprocess_params *p, qvl_grid *grid, qvl_error *err) {
    err_clear(err);
    if (!img || !img->rgb || !grid)
        return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_image_grid: %s is NULL", !img ? "img" : !grid ? "grid" : "img->rgb");
    qvl_preprocess_params pp;
    TRY(preprocess_params_take(&pp, p, err));
    p = &pp;
    TRY(check_params(p, err));
    TRY(check_source(img->width, img->height, "qvl_image_grid: the image", err));
    int32_t th = 0, tw = 0;
    TRY(image_target(img->height, img->width, p, &th, &tw, err));
    TRY(check_resize(img->width, img->height, tw, th, err));
    *grid = (qvl_grid){1, th / p->patch, tw / p->patch};
    return QVL_OK;
}

/* The clip budget under transformers' per-frame cap (Qwen3VLVideoProcessor.resize with cap_pixels_per_frame,
 * transformers 5.23, models/qwen3_vl/video_processing_qwen3_vl.py), for n sampled frames:
 *     frame_cap = self.max_video_tokens * factor * factor
 *     pixels_per_frame = max(min(frame_cap, size.longest_edge // num_frames), int(size.shortest_edge * 1.05))
 *     max_pixels = pixels_per_frame * num_frames
 * (factor = patch · merge; int() truncates the double product). Python's integers do not overflow; a product past
 * 2^64 is refused here. */
static qvl_status video_capped_budget(const qvl_preprocess_params *p, int32_t n, uint64_t *max_pixels,
                                      qvl_error *err) {
    const uint64_t f = (uint64_t)p->patch * (uint64_t)p->merge;
    const uint64_t frame_cap = (uint64_t)p->max_video_tokens * f * f; /* ≤ 2^20 · 2^28 */
    const uint64_t share = p->video_max_pixels / (uint64_t)n;
    const double lo = (double)p->video_min_pixels * 1.05;
    const uint64_t floor_px = lo >= 18446744073709551616.0 ? UINT64_MAX : (uint64_t)lo;
    uint64_t per = frame_cap < share ? frame_cap : share;
    if (floor_px > per) per = floor_px;
    if (__builtin_mul_overflow(per, (uint64_t)n, max_pixels))
        return err_fail(err, QVL_ERR_LIMIT, "video: the per-frame cap's budget, %llu pixels a frame for %d frames, "
                        "overflows", (unsigned long long)per, (int)n);
    return QVL_OK;
}

static qvl_status video_target(const qvl_video *v, const qvl_preprocess_params *p, int32_t *th, int32_t *tw,
                               qvl_error *err) {
    if (p->size_h && p->size_w) {
        if ((uint64_t)p->size_h * (uint64_t)p->size_w > p->video_max_pixels)
            return err_fail(err, QVL_ERR_LIMIT, "qvl_preprocess_params.size_h x size_w %dx%d is %llu pixels a frame, "
                            "above video_max_pixels %llu (the clip budget; raise it to allow it)", p->size_h,
                            p->size_w, (unsigned long long)p->size_h * (unsigned long long)p->size_w,
                            (unsigned long long)p->video_max_pixels);
        if (v->n_frames < p->temporal_patch)
            return err_fail(err, QVL_ERR_INVALID_ARG, "video has %d frame(s); at least %d are needed", v->n_frames,
                            p->temporal_patch);
        *th = p->size_h;
        *tw = p->size_w;
        return QVL_OK;
    }
    uint64_t max_pixels = p->video_max_pixels;
    if (p->cap_pixels_per_frame && v->n_frames >= 1) TRY(video_capped_budget(p, v->n_frames, &max_pixels, err));
    return video_smart_resize(v->n_frames, v->height, v->width, p->patch * p->merge, p->temporal_patch,
                              p->video_min_pixels, max_pixels, th, tw, err);
}

qvl_status qvl_video_grid(const qvl_video *v, const qvl_preprocess_params *p, qvl_grid *grid, qvl_error *err) {
    err_clear(err);
    if (!v || !v->rgb || !grid)
        return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_video_grid: %s is NULL", !v ? "v" : !grid ? "grid" : "v->rgb");
    qvl_preprocess_params pp;
    TRY(preprocess_params_take(&pp, p, err));
    return video_grid_of(v, &pp, grid, err);
}

qvl_status video_grid_of(const qvl_video *v, const qvl_preprocess_params *p, qvl_grid *grid, qvl_error *err) {
    TRY(check_params(p, err));
    TRY(check_source(v->width, v->height, "qvl_video_grid: a frame", err));
    int32_t th = 0, tw = 0;
    TRY(video_target(v, p, &th, &tw, err));
    TRY(check_resize(v->width, v->height, tw, th, err));
    int32_t t = (v->n_frames + p->temporal_patch - 1) / p->temporal_patch;
    *grid = (qvl_grid){t, th / p->patch, tw / p->patch};
    return QVL_OK;
}

static resize_kind kind_of(qvl_resize_mode m) {
    return m == QVL_RESIZE_PIL ? RESIZE_PIL : m == QVL_RESIZE_PIL_LEGACY ? RESIZE_PIL_LEGACY : RESIZE_TORCHVISION;
}

/* Per-channel value of each uint8 level after rescale + normalize, by the processor's own float sequence. */
static void build_lut(const qvl_preprocess_params *p, float lut[3][256]) {
    for (int c = 0; c < 3; c++) {
        if (p->resize == QVL_RESIZE_TORCHVISION) {
            /* Fast processor: mean and std fused with the rescale factor in float32, then
             * torchvision normalize: (x − mean') / std' in float32. */
            float inv = (float)(1.0 / p->rescale_factor);
            float mean = p->image_mean[c] * inv, std = p->image_std[c] * inv;
            for (int u = 0; u < 256; u++) lut[c][u] = ((float)u - mean) / std;
        } else {
            /* PIL processor: numpy rescale in float64 cast to float32, then (x − mean) / std in float32. */
            for (int u = 0; u < 256; u++) {
                float r = (float)((double)u * p->rescale_factor);
                lut[c][u] = (r - p->image_mean[c]) / p->image_std[c];
            }
        }
    }
}

typedef struct patch_job {
    const uint8_t *frames; /* frames f0, f0 + 1, ... of the clip */
    int32_t f0, n_frames, th, tw;
    long r0;               /* the first row written */
    long rbase;            /* the clip's row that rows[0] is (0: rows are the whole clip's) */
    const qvl_preprocess_params *p;
    const float (*lut)[256];
    float *rows;
} patch_job;

/* Rows [r0, r1) of patchify. */
static void patch_rows(void *ctx, long r0, long r1, int thread) {
    (void)thread;
    const patch_job *j = ctx;
    const qvl_preprocess_params *p = j->p;
    const uint8_t *frames = j->frames;
    const int32_t n_frames = j->n_frames, tw = j->tw;
    const float (*lut)[256] = j->lut;
    const int P = p->patch, M = p->merge, T = p->temporal_patch;
    const int gh = j->th / P, gw = tw / P;
    const size_t row_len = (size_t)3 * T * P * P, frame_bytes = (size_t)j->th * tw * 3;
    for (long r = j->r0 + r0; r < j->r0 + r1; r++) {
        /* r = (((t·(gh/M) + bh)·(gw/M) + bw)·M + ih)·M + iw */
        long q = r;
        int iw = (int)(q % M); q /= M;
        int ih = (int)(q % M); q /= M;
        int bw = (int)(q % (gw / M)); q /= gw / M;
        int bh = (int)(q % (gh / M)); q /= gh / M;
        int t = (int)q;
        int y0 = (bh * M + ih) * P, x0 = (bw * M + iw) * P;
        float *out = j->rows + (size_t)(r - j->rbase) * row_len;
        for (int c = 0; c < 3; c++)
            for (int tp = 0; tp < T; tp++) {
                int f = t * T + tp;
                if (f >= n_frames) f = n_frames - 1;
                const uint8_t *fr = frames + (size_t)(f - j->f0) * frame_bytes;
                for (int y = 0; y < P; y++) {
                    const uint8_t *src = fr + ((size_t)(y0 + y) * tw + x0) * 3 + c;
                    float *dst = out + (((size_t)c * T + tp) * P + y) * P;
                    for (int x = 0; x < P; x++) dst[x] = lut[c][src[3 * x]];
                }
            }
    }
}

/* Patchify `frames` (n_frames resized RGB frames [th, tw, 3], padded in time by repeating the last) into rows. */
static void patchify(const uint8_t *frames, int32_t n_frames, int32_t th, int32_t tw, const qvl_preprocess_params *p,
                     const float lut[3][256], float *rows, thread_pool *pool) {
    const int P = p->patch, T = p->temporal_patch;
    const long n_rows = (long)((n_frames + T - 1) / T) * (th / P) * (tw / P);
    patch_job j = {frames, 0, n_frames, th, tw, 0, 0, p, lut, rows};
    pool_for(pool, n_rows, 0, patch_rows, &j);
}

/* Resize every frame to th × tw (frames already that size are read in place), then normalize and patchify.
 * n_frames = 1 for an image (it fills every temporal slot); a video with n_frames not a multiple of Tp repeats its
 * last frame. */
static qvl_status frames_to_rows(const uint8_t *rgb, int32_t n_frames, int32_t w, int32_t h, int32_t tw, int32_t th,
                                 const qvl_preprocess_params *p, float *rows, thread_pool *pool, qvl_error *err) {
    const int resize = w != tw || h != th;
    size_t frame_bytes, all = 0, ws_bytes = 0;
    if (size_mul_overflow((size_t)tw * 3, (size_t)th, &frame_bytes) ||
        size_mul_overflow(frame_bytes, (size_t)n_frames, &all))
        return err_fail(err, QVL_ERR_LIMIT, "resized frames %dx%d x %d overflow", tw, th, n_frames);
    if (resize) {
        ws_bytes = resize_workspace_size(w, h, tw, th, 3);
        if (!ws_bytes) return err_fail(err, QVL_ERR_LIMIT, "resize %dx%d -> %dx%d out of range", w, h, tw, th);
    }
    uint8_t *resized = resize ? malloc(all ? all : 1) : NULL;
    void *ws = resize ? malloc(ws_bytes) : NULL;
    if (resize && (!resized || !ws)) {
        free(resized);
        free(ws);
        return err_fail(err, QVL_ERR_NOMEM, "cannot allocate %zu bytes for resized frames", all + ws_bytes);
    }
    thread_pool *own = NULL; /* the caller's pool, else one of this call's own */
    qvl_status s = pool ? QVL_OK : pool_create(&own, p->n_threads, err);
    if (!pool) pool = own;
    const size_t src_bytes = (size_t)w * (size_t)h * 3;
    for (int32_t f = 0; resize && f < n_frames && s == QVL_OK; f++)
        s = resize_u8(rgb + (size_t)f * src_bytes, w, h, 3, resized + (size_t)f * frame_bytes, tw, th,
                      kind_of(p->resize), ws, pool, err);
    if (s == QVL_OK) {
        float lut[3][256];
        build_lut(p, lut);
        /* An image is one frame repeated into every temporal slot of its single temporal patch. */
        patchify(resize ? resized : rgb, n_frames, th, tw, p, (const float(*)[256])lut, rows, pool);
    }
    pool_destroy(own);
    free(ws);
    free(resized);
    return s;
}

qvl_status qvl_preprocess_image(const qvl_image *img, const qvl_preprocess_params *p, float *rows, qvl_grid *grid,
                                qvl_error *err) {
    err_clear(err);
    if (!rows) return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_preprocess_image: rows is NULL");
    qvl_preprocess_params pp;
    TRY(preprocess_params_take(&pp, p, err));
    p = &pp;
    TRY(qvl_image_grid(img, p, grid, err));
    return frames_to_rows(img->rgb, 1, img->width, img->height, grid->w * p->patch, grid->h * p->patch, p, rows, NULL,
                          err);
}

qvl_status preprocess_image_pool(const qvl_image *img, const qvl_preprocess_params *p, float *rows, qvl_grid *grid,
                                 thread_pool *pool, qvl_error *err) {
    TRY(qvl_image_grid(img, p, grid, err));
    return frames_to_rows(img->rgb, 1, img->width, img->height, grid->w * p->patch, grid->h * p->patch, p, rows, pool,
                          err);
}

qvl_status preprocess_video_pool(const qvl_video *v, const qvl_preprocess_params *p, float *rows, qvl_grid *grid,
                                 thread_pool *pool, qvl_error *err) {
    TRY(qvl_video_grid(v, p, grid, err));
    return frames_to_rows(v->rgb, v->n_frames, v->width, v->height, grid->w * p->patch, grid->h * p->patch, p, rows,
                          pool, err);
}

qvl_status qvl_preprocess_video(const qvl_video *v, const qvl_preprocess_params *p, float *rows, qvl_grid *grid,
                                qvl_error *err) {
    err_clear(err);
    if (!rows) return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_preprocess_video: rows is NULL");
    qvl_preprocess_params pp;
    TRY(preprocess_params_take(&pp, p, err));
    p = &pp;
    TRY(qvl_video_grid(v, p, grid, err));
    return frames_to_rows(v->rgb, v->n_frames, v->width, v->height, grid->w * p->patch, grid->h * p->patch, p, rows,
                          NULL, err);
}

/* ---- a video's rows as its frames arrive (video_rows, image_params.h) ----------------------------------------- */

void video_rows_free(video_rows *vr) {
    free(vr->frames);
    free(vr->pend_t);
    free(vr->pend_got);
    free(vr->taken);
    free(vr->ws);
    pool_destroy(vr->own);
    memset(vr, 0, sizeof *vr);
}

/* Room for `n` temporal patches' frames at once (n > vr->n_pend; the new buffers free). */
static qvl_status rows_grow(video_rows *vr, size_t n, qvl_error *err) {
    const size_t patch_bytes = vr->frame_bytes * (size_t)vr->p->temporal_patch;
    size_t bytes;
    if (size_mul_overflow(patch_bytes, n, &bytes))
        return err_fail(err, QVL_ERR_LIMIT, "resized frames: %zu temporal patches overflow", n);
    uint8_t *f = realloc(vr->frames, bytes);
    if (f) vr->frames = f;
    long *t = realloc(vr->pend_t, n * sizeof *t);
    if (t) vr->pend_t = t;
    int *g = realloc(vr->pend_got, n * sizeof *g);
    if (g) vr->pend_got = g;
    if (!f || !t || !g) return err_fail(err, QVL_ERR_NOMEM, "cannot allocate %zu bytes for resized frames", bytes);
    for (size_t i = vr->n_pend; i < n; i++) vr->pend_t[i] = -1, vr->pend_got[i] = 0;
    vr->n_pend = n;
    return QVL_OK;
}

qvl_status video_rows_start(video_rows *vr, const qvl_video *v, const qvl_grid *grid, const qvl_preprocess_params *p,
                            float *rows, thread_pool *pool, qvl_error *err) {
    video_rows_free(vr);
    const int32_t T = p->temporal_patch, th = grid->h * p->patch, tw = grid->w * p->patch;
    size_t frame_bytes, all;
    if (size_mul_overflow((size_t)tw * 3, (size_t)th, &frame_bytes) || size_mul_overflow(frame_bytes, (size_t)T, &all))
        return err_fail(err, QVL_ERR_LIMIT, "resized frames %dx%d x %d overflow", tw, th, T);
    vr->p = p;
    vr->frame_bytes = frame_bytes;
    vr->resize = v->width != tw || v->height != th;
    if (vr->resize) {
        const size_t ws_bytes = resize_workspace_size(v->width, v->height, tw, th, 3);
        if (!ws_bytes)
            return err_fail(err, QVL_ERR_LIMIT, "resize %dx%d -> %dx%d out of range", v->width, v->height, tw, th);
        vr->ws = malloc(ws_bytes);
    }
    vr->taken = calloc(v->n_frames > 0 ? (size_t)v->n_frames : 1, 1);
    if (!vr->taken || (vr->resize && !vr->ws)) {
        video_rows_free(vr);
        return err_fail(err, QVL_ERR_NOMEM, "cannot allocate %zu bytes for resized frames", all);
    }
    qvl_status s = rows_grow(vr, 1, err); /* frames in order need one patch's buffer; more come as needed */
    if (s == QVL_OK && !pool) {
        s = pool_create(&vr->own, p->n_threads, err);
        pool = vr->own;
    }
    if (s != QVL_OK) {
        video_rows_free(vr);
        return s;
    }
    vr->p = p, vr->pool = pool, vr->rows = rows;
    vr->w = v->width, vr->h = v->height, vr->th = th, vr->tw = tw, vr->n_frames = v->n_frames;
    vr->next = 0;
    build_lut(p, vr->lut);
    return QVL_OK;
}

/* Frames of temporal patch t in the clip (the last one may be short: it is padded with the clip's last frame). */
static long patch_frames(const video_rows *vr, long t) {
    const long T = vr->p->temporal_patch, left = (long)vr->n_frames - t * T;
    return left < T ? left : T;
}

static size_t rows_per_t(const video_rows *vr) { return (size_t)(vr->th / vr->p->patch) * (size_t)(vr->tw / vr->p->patch); }
static size_t row_len_p(const qvl_preprocess_params *p) { return (size_t)3 * p->temporal_patch * p->patch * p->patch; }

/* The rows of the complete temporal patch in buffer b into dst (its h·w rows), and the buffer freed. */
static void rows_emit(video_rows *vr, size_t b, float *dst) {
    const qvl_preprocess_params *p = vr->p;
    const long t = vr->pend_t[b];
    const uint8_t *patch = vr->frames + b * (size_t)p->temporal_patch * vr->frame_bytes;
    const long r0 = t * (long)rows_per_t(vr); /* the clip's first row of patch t, which dst holds */
    patch_job j = {patch, (int32_t)(t * p->temporal_patch), vr->n_frames, vr->th, vr->tw, r0, r0, p,
                   (const float(*)[256])vr->lut, dst};
    pool_for(vr->pool, (long)rows_per_t(vr), 0, patch_rows, &j);
    vr->pend_t[b] = -1;
}

qvl_status video_rows_frame(video_rows *vr, size_t slot, const uint8_t *rgb, qvl_error *err) {
    const qvl_preprocess_params *p = vr->p;
    if (!vr->taken || slot >= (size_t)vr->n_frames || vr->taken[slot])
        return err_fail(err, QVL_ERR_INTERNAL, "video rows: frame %zu given %s", slot,
                        !vr->taken || slot >= (size_t)vr->n_frames ? "outside the clip" : "twice");
    const int32_t T = p->temporal_patch;
    const long t = (long)(slot / (size_t)T);
    size_t b = vr->n_pend, free_b = vr->n_pend; /* the patch's buffer, else a free one */
    for (size_t i = 0; i < vr->n_pend && b == vr->n_pend; i++) {
        if (vr->pend_t[i] == t) b = i;
        else if (vr->pend_t[i] < 0 && free_b == vr->n_pend) free_b = i;
    }
    if (b == vr->n_pend) {
        if (free_b == vr->n_pend) TRY(rows_grow(vr, 2 * vr->n_pend, err));
        b = free_b;
        vr->pend_t[b] = t, vr->pend_got[b] = 0;
    }
    uint8_t *patch = vr->frames + b * (size_t)T * vr->frame_bytes, *dst = patch + (slot % (size_t)T) * vr->frame_bytes;
    if (vr->resize) TRY(resize_u8(rgb, vr->w, vr->h, 3, dst, vr->tw, vr->th, kind_of(p->resize), vr->ws, vr->pool, err));
    else memcpy(dst, rgb, vr->frame_bytes);
    vr->taken[slot] = 1;
    vr->next++;
    if (++vr->pend_got[b] < patch_frames(vr, t)) return QVL_OK;
    if (!vr->place.where) {
        rows_emit(vr, b, vr->rows + (size_t)t * rows_per_t(vr) * row_len_p(p));
        return QVL_OK;
    }
    video_rows_place(vr); /* this patch, where there is room (else it is kept), and any kept before it */
    return QVL_OK;
}

void video_rows_set_place(video_rows *vr, const rows_place *place) { vr->place = *place; }

size_t video_rows_place(video_rows *vr) {
    size_t kept = 0;
    for (;;) { /* the lowest complete patch first: a ring takes patches in order */
        size_t b = vr->n_pend;
        for (size_t i = 0; i < vr->n_pend; i++)
            if (vr->pend_t[i] >= 0 && vr->pend_got[i] == patch_frames(vr, vr->pend_t[i]) &&
                (b == vr->n_pend || vr->pend_t[i] < vr->pend_t[b]))
                b = i;
        if (b == vr->n_pend) return 0;
        const long t = vr->pend_t[b];
        float *dst = vr->place.where(vr->place.user, t);
        if (!dst) break;
        rows_emit(vr, b, dst);
        vr->place.placed(vr->place.user, t);
    }
    for (size_t i = 0; i < vr->n_pend; i++)
        kept += vr->pend_t[i] >= 0 && vr->pend_got[i] == patch_frames(vr, vr->pend_t[i]);
    return kept;
}

qvl_status qvl_image_resize(const qvl_image *src, int32_t height, int32_t width, qvl_resize_mode mode, int n_threads,
                            qvl_image *out, qvl_error *err) {
    err_clear(err);
    if (!src || !src->rgb || !out)
        return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_image_resize: %s is NULL", !src ? "src" : !out ? "out" : "src->rgb");
    memset(out, 0, sizeof *out);
    if (mode != QVL_RESIZE_TORCHVISION && mode != QVL_RESIZE_PIL && mode != QVL_RESIZE_PIL_LEGACY)
        return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_image_resize: mode %d is not a qvl_resize_mode (0..2)",
                        (int)mode);
    if (n_threads < 0 || n_threads > QVL_MAX_THREADS)
        return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_image_resize: n_threads %d is outside 0..%d (0: one per CPU)",
                        n_threads, QVL_MAX_THREADS);
    size_t ws_bytes = resize_workspace_size(src->width, src->height, width, height, 3), bytes;
    if (!ws_bytes || size_mul_overflow((size_t)width * 3, (size_t)height, &bytes))
        return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_image_resize: %dx%d -> width %d x height %d: bad size",
                        src->width, src->height, width, height);
    void *ws = malloc(ws_bytes);
    uint8_t *dst = malloc(bytes);
    if (!ws || !dst) {
        free(ws);
        free(dst);
        return err_fail(err, QVL_ERR_NOMEM, "cannot allocate a %dx%d image", width, height);
    }
    thread_pool *pool = NULL;
    qvl_status s = pool_create(&pool, n_threads, err);
    if (s == QVL_OK)
        s = resize_u8(src->rgb, src->width, src->height, 3, dst, width, height, kind_of(mode), ws, pool, err);
    pool_destroy(pool);
    free(ws);
    if (s != QVL_OK) {
        free(dst);
        return s;
    }
    *out = (qvl_image){width, height, dst};
    return QVL_OK;
}
