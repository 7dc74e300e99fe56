/* plan.c — plans: a list of items (files, encoded bytes, pixels, frames, patch rows) decoded and preprocessed on a
 * context's pool, with every size known before anything is encoded; then one encode into caller buffers, items
 * grouped into passes of up to max_batch_rows rows. One item's failure stays with that item. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "core/error.h"
#include "core/limits.h"
#include "core/params.h"
#include "image/decode.h"
#include "image/image_params.h"
#include "image/video_frames.h"
#include "io/fileutil.h"
#include "model/model.h"
#include "model/plan.h"
#include "model/tower.h"

typedef struct plan_item {
    qvl_status status;     /* planning */
    qvl_status enc_status; /* the last encode (QVL_OK until one fails) */
    char message[1024];
    char label[256];
    const char *kind;
    qvl_grid grid;
    size_t n_rows, n_tokens, out_bytes;
    const float *rows;     /* the plan's copy (rows_owned), or a ROWS item's borrowed rows */
    float *rows_owned;
    int32_t src_w, src_h, res_w, res_h, n_frames;
    int64_t total_frames;
    double fps;
    int64_t *indices;
    double *timestamps;
    size_t n_timestamps;
    double decode_ms, preprocess_ms, encode_ms;
    size_t row_len;        /* floats per row */
    uint64_t row_units;    /* patch rows one row counts as against the patch limits (row_units_of) */
    int merge;             /* of the item's preprocessing */
    int encoded;           /* the last encode reached this item's group and it succeeded */
    size_t group;          /* of the plan's groups (plan_groups); an encode's groups never reach past one */
} plan_item;

struct qvl_plan {
    const qvl_model *m;
    qvl_plan_params p;
    qvl_limits lim;               /* the ctx's limits lowered by the plan's own */
    uint64_t planned_rows;        /* patch rows of the items planned so far, counted by row_units (against
                                     lim.max_call_patches) */
    out_spec o;                   /* of its outputs */
    size_t n;
    plan_item *items;
    size_t n_ok, out_bytes, held, max_group_rows, scratch;
    /* encode-time tables, sized here so the encode allocates nothing */
    const float **g_rows;
    qvl_grid *g_grids;
    tower_sink *g_sinks;
    size_t *g_items;
};

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static void item_defaults(qvl_item *it) {
    memset(it, 0, sizeof *it);
    it->struct_size = sizeof *it;
    it->kind = QVL_ITEM_PATH;
}

void qvl_item_init(qvl_item *p, size_t struct_size) {
    qvl_item d;
    item_defaults(&d);
    params_init(p, struct_size, &d, sizeof d);
}

static void plan_defaults(qvl_plan_params *p) {
    memset(p, 0, sizeof *p);
    p->struct_size = sizeof *p;
    p->dtype = QVL_DTYPE_F32;
    p->layout = QVL_OUTPUT_CONCAT;
    p->deepstack = 1;
    p->max_batch_rows = 0;
}

void qvl_plan_params_init(qvl_plan_params *p, size_t struct_size) {
    qvl_plan_params d;
    plan_defaults(&d);
    params_init(p, struct_size, &d, sizeof d);
}

/* ---- one item: decode ----------------------------------------------------------------------------------------- */

/* Image files by their first bytes (JPEG, PNG, GIF, WebP, BMP); anything else goes to qvl_video_load, which reads
 * the accepted containers and refuses the rest with a message saying what the file is. A file that cannot be
 * opened (or is no regular file) and a read error are reported here: taking the file for a video would give a
 * message about its container instead. */
static qvl_status sniff_image(const char *path, const char *label, int *image, qvl_error *err) {
    unsigned char b[DEC_SNIFF_BYTES] = {0};
    FILE *f;
    size_t size;
    *image = 1;
    /* never blocks on a FIFO. Before, a failed open was left to the image loader to report on its own open: an
     * allocation that failed in the first open and not in the second sent a video to the image decoder ("a video,
     * not an image" instead of out of memory) */
    TRY(fu_open_regular(path, &f, &size, err));
    size_t n = fread(b, 1, sizeof b, f);
    int bad = ferror(f);
    fclose(f);
    if (bad) return err_fail(err, QVL_ERR_IO, "%s: read error: %s", label, strerror(errno));
    *image = dec_is_image(dec_sniff(b, n));
    return QVL_OK;
}

static int name_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The regular files of a directory (dot files skipped), sorted by name: one video's frames (model/plan.h). */
qvl_status plan_list_frames(const char *dir, char ***out, size_t *n_out, qvl_error *err) {
    *out = NULL, *n_out = 0;
    DIR *d = opendir(dir);
    if (!d) return err_fail(err, QVL_ERR_IO, "%s: cannot open the directory", dir);
    char **names = NULL;
    size_t n = 0, cap = 0;
    qvl_status s = QVL_OK;
    struct dirent *e;
    const size_t dl = strlen(dir);
    while (s == QVL_OK && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        size_t len = dl + strlen(e->d_name) + 2;
        char *p = malloc(len);
        if (!p) {
            s = err_fail(err, QVL_ERR_NOMEM, "%s: out of memory listing frames", dir);
            break;
        }
        if ((s = fu_join(p, len, dir, e->d_name, err)) != QVL_OK) { /* it fits: len counts the '/' */
            free(p);
            break;
        }
        struct stat st;
        if (stat(p, &st) != 0 || !S_ISREG(st.st_mode)) {
            free(p);
            continue;
        }
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **q = realloc(names, cap * sizeof *q);
            if (!q) {
                free(p);
                s = err_fail(err, QVL_ERR_NOMEM, "%s: out of memory listing frames", dir);
                break;
            }
            names = q;
        }
        names[n++] = p;
    }
    closedir(d);
    if (s == QVL_OK && n == 0) s = err_fail(err, QVL_ERR_INVALID_ARG, "%s: no frame images in the directory", dir);
    if (s != QVL_OK) {
        plan_free_names(names, n);
        return s;
    }
    qsort(names, n, sizeof *names, name_cmp);
    *out = names, *n_out = n;
    return QVL_OK;
}

void plan_free_names(char **names, size_t n) {
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
}

/* The regular files of a directory, sorted by name, as one video's frames. */
static qvl_status load_frames_dir(const char *dir, const qvl_video_params *vp, const qvl_decode_params *dp,
                                  const stop_probe *stop, const video_sink *sink, qvl_video *v, qvl_error *err) {
    char **names;
    size_t n;
    TRY(plan_list_frames(dir, &names, &n, err));
    qvl_status s = video_from_images_item((const char *const *)names, n, vp, dp, stop, sink, v, err);
    plan_free_names(names, n);
    return s;
}

/* Packed RGB from caller pixels: in place when they already are (returned *owned NULL), else converted (RGBA:
 * alpha composited onto white, as PIL's convert_to_rgb does, or dropped). */
static qvl_status pixels_rgb(const qvl_pixels *px, qvl_alpha_mode alpha, const qvl_limits *lim, const char *label,
                             qvl_image *img, uint8_t **owned, qvl_error *err) {
    *owned = NULL;
    if (!px->data) return err_fail(err, QVL_ERR_INVALID_ARG, "%s: image.data is NULL", label);
    if (px->width < 1 || px->height < 1)
        return err_fail(err, QVL_ERR_INVALID_ARG, "%s: image is %dx%d pixels; both sides must be at least 1", label,
                        px->width, px->height);
    if (px->channels != 3 && px->channels != 4)
        return err_fail(err, QVL_ERR_INVALID_ARG, "%s: image.channels is %d; 3 (RGB) or 4 (RGBA) are accepted",
                        label, px->channels);
    if ((uint64_t)px->width * (uint64_t)px->height > lim->max_image_pixels)
        return limit_fail(err, "max_image_pixels", lim->max_image_pixels, "%s: a %dx%d image has more than the %llu "
                          "pixels allowed", label, px->width, px->height, (unsigned long long)lim->max_image_pixels);
    size_t row, bytes;
    if (size_mul_overflow((size_t)px->width, (size_t)px->channels, &row) ||
        size_mul_overflow((size_t)px->width * 3, (size_t)px->height, &bytes))
        return err_fail(err, QVL_ERR_LIMIT, "%s: a %dx%d image overflows", label, px->width, px->height);
    const size_t stride = px->stride ? px->stride : row;
    if (stride < row)
        return err_fail(err, QVL_ERR_INVALID_ARG, "%s: image.stride %zu is below width·channels = %zu", label, stride,
                        row);
    if (px->channels == 3 && stride == row) {
        *img = (qvl_image){px->width, px->height, (uint8_t *)px->data};
        return QVL_OK;
    }
    uint8_t *rgb = malloc(bytes);
    if (!rgb) return err_fail(err, QVL_ERR_NOMEM, "%s: out of memory converting a %dx%d image", label, px->width,
                              px->height);
    for (int32_t y = 0; y < px->height; y++) {
        const uint8_t *s = px->data + (size_t)y * stride;
        uint8_t *d = rgb + (size_t)y * px->width * 3;
        for (int32_t x = 0; x < px->width; x++, s += px->channels, d += 3) {
            if (px->channels == 3 || alpha == QVL_ALPHA_DROP) {
                d[0] = s[0], d[1] = s[1], d[2] = s[2];
            } else { /* as PIL's convert_to_rgb does with the same pixels as an RGBA image */
                d[0] = s[0], d[1] = s[1], d[2] = s[2];
                dec_white_px(d, s[3]);
            }
        }
    }
    *owned = rgb;
    *img = (qvl_image){px->width, px->height, rgb};
    return QVL_OK;
}

/* A video from caller frames (all used, one size), each frame to `sink` as it is converted to packed RGB (in place
 * where it already is): v gets the sampling (every frame, in order), never the frames, which stay the caller's. */
static qvl_status frames_video(const qvl_item *it, const qvl_video_params *vp, qvl_alpha_mode alpha,
                               const qvl_limits *lim, const char *label, const video_sink *sink, qvl_video *v,
                               qvl_error *err) {
    memset(v, 0, sizeof *v);
    if (!it->frames || it->n_frames == 0)
        return err_fail(err, QVL_ERR_INVALID_ARG, "%s: a FRAMES item needs frames and n_frames ≥ 1 (n_frames %zu)",
                        label, it->n_frames);
    if (it->n_frames > INT32_MAX)
        return err_fail(err, QVL_ERR_LIMIT, "%s: %zu frames is too many", label, it->n_frames);
    const double fps = it->fps > 0 ? it->fps : vp->default_fps;
    if (!(fps > 0) || !isfinite(fps))
        return err_fail(err, QVL_ERR_INVALID_ARG, "%s: fps %g is not a positive number", label, it->fps);
    const int32_t w = it->frames[0].width, h = it->frames[0].height;
    if (w < 1 || h < 1) return err_fail(err, QVL_ERR_INVALID_ARG, "%s: frame 0 is %dx%d pixels", label, w, h);
    if (it->n_frames > lim->max_video_frames)
        return limit_fail(err, "max_video_frames", lim->max_video_frames, "%s: %zu frames, more than the %u allowed",
                          label, it->n_frames, (unsigned)lim->max_video_frames);
    /* every frame's size, and the image limit each is held to, before any is converted */
    if ((uint64_t)w * (uint64_t)h > lim->max_image_pixels)
        return limit_fail(err, "max_image_pixels", lim->max_image_pixels, "%s frame 0: a %dx%d image has more than "
                          "the %llu pixels allowed", label, w, h, (unsigned long long)lim->max_image_pixels);
    for (size_t f = 1; f < it->n_frames; f++)
        if (it->frames[f].width != w || it->frames[f].height != h)
            return err_fail(err, QVL_ERR_INVALID_ARG, "%s: frame %zu is %dx%d, frame 0 is %dx%d", label, f,
                            it->frames[f].width, it->frames[f].height, w, h);
    v->indices = malloc(it->n_frames * sizeof *v->indices);
    if (!v->indices) return err_fail(err, QVL_ERR_NOMEM, "%s: out of memory for %zu frames", label, it->n_frames);
    for (size_t f = 0; f < it->n_frames; f++) v->indices[f] = (int64_t)f;
    v->width = w, v->height = h, v->n_frames = (int32_t)it->n_frames;
    v->total_frames = (int64_t)it->n_frames;
    v->fps = fps;
    TRY(sink->begin(sink->user, v, err));
    for (size_t f = 0; f < it->n_frames; f++) {
        char flabel[300];
        snprintf(flabel, sizeof flabel, "%s frame %zu", label, f);
        qvl_image img;
        uint8_t *owned;
        TRY(pixels_rgb(&it->frames[f], alpha, lim, flabel, &img, &owned, err));
        qvl_status s = sink->frame(sink->user, f, img.rgb, err);
        free(owned);
        TRY(s);
    }
    return QVL_OK;
}

/* ---- one item: preprocess ------------------------------------------------------------------------------------- */

static qvl_status fits_model(const qvl_model *m, const qvl_preprocess_params *pp, const char *label, qvl_error *err) {
    if (!m) return QVL_OK; /* preprocessing alone: the params decide */
    const tower_config *k = &m->cfg;
    if (pp->patch != k->patch || pp->temporal_patch != k->temporal_patch || pp->merge != k->merge)
        return err_fail(err, QVL_ERR_INVALID_ARG,
                        "%s: preprocessing patch %d / temporal_patch %d / merge %d does not fit the tower's %d / %d / %d",
                        label, pp->patch, pp->temporal_patch, pp->merge, k->patch, k->temporal_patch, k->merge);
    return QVL_OK;
}

/* Row length of the preprocessing (the model's, once fits_model has passed). */
static size_t row_len_of(const qvl_preprocess_params *pp) {
    return (size_t)3 * (size_t)pp->temporal_patch * (size_t)pp->patch * (size_t)pp->patch;
}

/* Qwen3-VL's patch row, 3 · 2 · 16 · 16 values: how long a row the patch limits count by. */
#define ROW_UNIT 1536

/* Patch rows one row of row_len values counts as against the patch limits: 1 on a ctx (its model fixes the row);
 * without one, whose params may choose any geometry up to check_params' bounds (patch 1024 and temporal_patch 16
 * make a row of 50 M values), one per ROW_UNIT values or part of them, so that the limits bound the rows' bytes as
 * they do a model's rows. */
static uint64_t row_units_of(const qvl_model *m, size_t row_len) {
    return m || row_len <= ROW_UNIT ? 1 : ((uint64_t)row_len + ROW_UNIT - 1) / ROW_UNIT;
}

/* The item's grid against the patch limits, before its rows (or a resize) are allocated: its own rows, and the
 * plan's rows so far with them, each row counted as pi->row_units. */
static qvl_status check_patches(plan_item *pi, const qvl_limits *lim, uint64_t planned, qvl_error *err) {
    const qvl_grid *g = &pi->grid;
    uint64_t rows, n;
    if (__builtin_mul_overflow((uint64_t)g->t, (uint64_t)g->h, &rows) ||
        __builtin_mul_overflow(rows, (uint64_t)g->w, &rows))
        rows = UINT64_MAX;
    if (__builtin_mul_overflow(rows, pi->row_units, &n)) n = UINT64_MAX;
    char units[160] = "";
    if (pi->row_units > 1)
        snprintf(units, sizeof units, " of %zu values, counted as %llu rows of %d values (Qwen3-VL's 3·2·16·16, as a "
                 "plan without a ctx counts them)", pi->row_len, (unsigned long long)n, ROW_UNIT);
    if (n > lim->max_item_patches)
        return limit_fail(err, "max_item_patches", lim->max_item_patches,
                          "%s: grid %dx%dx%d (t x h x w) is %llu patch rows%s, more than the %llu allowed per item",
                          pi->label, g->t, g->h, g->w, (unsigned long long)rows, units,
                          (unsigned long long)lim->max_item_patches);
    if (planned > lim->max_call_patches || n > lim->max_call_patches - planned)
        return limit_fail(err, "max_call_patches", lim->max_call_patches,
                          "%s: grid %dx%dx%d adds %llu patch rows%s to the %llu of the items before it, more than the "
                          "%llu allowed in one plan", pi->label, g->t, g->h, g->w, (unsigned long long)rows, units,
                          (unsigned long long)planned, (unsigned long long)lim->max_call_patches);
    return QVL_OK;
}

/* The item's patch rows from its grid, within the limits (before anything is allocated for them). */
static qvl_status count_rows(plan_item *pi, size_t row_len, const qvl_limits *lim, uint64_t planned, qvl_error *err) {
    size_t bytes;
    TRY(check_patches(pi, lim, planned, err));
    pi->n_rows = qvl_patch_rows(&pi->grid, 1);
    if (pi->n_rows == 0 || pi->n_rows > INT32_MAX || size_mul_overflow(pi->n_rows, row_len * sizeof(float), &bytes))
        return err_fail(err, QVL_ERR_LIMIT, "%s: grid %dx%dx%d is %zu patch rows, above the limit %d", pi->label,
                        pi->grid.t, pi->grid.h, pi->grid.w, pi->n_rows, INT32_MAX);
    return QVL_OK;
}

static qvl_status alloc_rows(plan_item *pi, size_t row_len, const qvl_limits *lim, uint64_t planned, qvl_error *err) {
    TRY(count_rows(pi, row_len, lim, planned, err));
    const size_t bytes = pi->n_rows * row_len * sizeof(float);
    pi->rows_owned = malloc(bytes);
    if (!pi->rows_owned)
        return err_fail(err, QVL_ERR_NOMEM, "%s: cannot allocate %zu bytes for %zu patch rows", pi->label, bytes,
                        pi->n_rows);
    pi->rows = pi->rows_owned;
    return QVL_OK;
}

static qvl_status plan_image(plan_item *pi, const qvl_image *img, const qvl_preprocess_params *pp,
                             const qvl_limits *lim, uint64_t planned, thread_pool *pool, qvl_error *err) {
    pi->src_w = img->width, pi->src_h = img->height;
    TRY(qvl_image_grid(img, pp, &pi->grid, err));
    TRY(alloc_rows(pi, row_len_of(pp), lim, planned, err)); /* the limits, before the resize allocates */
    return preprocess_image_pool(img, pp, pi->rows_owned, &pi->grid, pool, err);
}

static void item_info_of(const qvl_plan *p, const plan_item *pi, qvl_item_info *f);

/* A video item's sampling is known (v's sizes, indices, counts and rate; v->rgb is not read): its grid against the
 * limits, its frame table and timestamps, and vr ready to make its rows as the frames come: into rows of its own,
 * or, with a hook (a stream, plan.h), where the hook places them. Called again when a stream is sampled again
 * (video_sink.begin): the first call's tables and rows are dropped. */
typedef struct plan_stream {
    const qvl_plan *plan;
    plan_item *pi;
    const qvl_preprocess_params *pp;
    const qvl_limits *lim;
    uint64_t planned;
    thread_pool *pool;
    const plan_hook *hook; /* NULL: the rows are the item's own */
    video_rows vr;
    double ms; /* spent in begin and frame */
} plan_stream;

static qvl_status plan_video_begin(plan_stream *ps, const qvl_video *v, qvl_error *err) {
    plan_item *pi = ps->pi;
    const qvl_preprocess_params *pp = ps->pp;
    free(pi->indices), pi->indices = NULL, pi->n_frames = 0;
    free(pi->timestamps), pi->timestamps = NULL, pi->n_timestamps = 0;
    free(pi->rows_owned), pi->rows_owned = NULL, pi->rows = NULL;
    pi->src_w = v->width, pi->src_h = v->height;
    pi->total_frames = v->total_frames, pi->fps = v->fps;
    TRY(video_grid_of(v, pp, &pi->grid, err));
    TRY(check_patches(pi, ps->lim, ps->planned, err));
    pi->indices = malloc((size_t)v->n_frames * sizeof *pi->indices);
    pi->timestamps = malloc((size_t)pi->grid.t * sizeof *pi->timestamps);
    if (!pi->indices || !pi->timestamps)
        return err_fail(err, QVL_ERR_NOMEM, "%s: out of memory for the frame table", pi->label);
    memcpy(pi->indices, v->indices, (size_t)v->n_frames * sizeof *pi->indices);
    pi->n_frames = v->n_frames; /* with the table it counts: never n_frames > 0 beside frame_indices NULL */
    TRY(qvl_video_timestamps(v, pp->temporal_patch, pi->timestamps, (size_t)pi->grid.t, &pi->n_timestamps, err));
    pi->res_w = pi->grid.w * pp->patch, pi->res_h = pi->grid.h * pp->patch;
    if (!ps->hook) {
        TRY(alloc_rows(pi, row_len_of(pp), ps->lim, ps->planned, err));
        return video_rows_start(&ps->vr, v, &pi->grid, pp, pi->rows_owned, ps->pool, err);
    }
    TRY(count_rows(pi, row_len_of(pp), ps->lim, ps->planned, err));
    const size_t mm = (size_t)pp->merge * (size_t)pp->merge;
    pi->n_tokens = pi->n_rows / mm;
    if (size_mul_overflow(pi->n_tokens, ps->plan->o.cols * ps->plan->o.planes * ps->plan->o.esize, &pi->out_bytes))
        return err_fail(err, QVL_ERR_LIMIT, "%s: the output size overflows", pi->label);
    TRY(video_rows_start(&ps->vr, v, &pi->grid, pp, NULL, ps->pool, err));
    qvl_item_info info;
    item_info_of(ps->plan, pi, &info);
    return ps->hook->begin(ps->hook->user, &info, &ps->vr, err);
}

/* A video item's frames into its rows as the reader hands them over (video_sink): the reader holds one source frame,
 * the item its rows and temporal_patch resized frames. The resize and patchify time is kept apart from decoding. */
static qvl_status stream_begin(void *user, const qvl_video *v, qvl_error *err) {
    plan_stream *ps = user;
    const double t0 = now_ms();
    qvl_status s = plan_video_begin(ps, v, err);
    ps->ms += now_ms() - t0;
    return s;
}

static qvl_status stream_frame(void *user, size_t slot, const uint8_t *rgb, qvl_error *err) {
    plan_stream *ps = user;
    if (ps->hook) TRY(ps->hook->frame(ps->hook->user, &ps->vr, 0, err)); /* room first (its wait is not counted) */
    const double t0 = now_ms();
    qvl_status s = video_rows_frame(&ps->vr, slot, rgb, err);
    ps->ms += now_ms() - t0;
    return s;
}

static qvl_status plan_one(const qvl_plan *plan, plan_item *pi, const qvl_item *it, const item_settings *base,
                           uint64_t planned, const stop_probe *stop, thread_pool *pool, thread_pool *vpool,
                           const plan_hook *hook, qvl_error *err) {
    const qvl_model *m = plan->m;
    const qvl_limits *plan_lim = &plan->lim;
    item_settings s;
    TRY(plan_item_settings(base, it, &s, err));
    /* The plan's limits, lowered by any the decode / video params (the item's, else the plan's) give; every decoder
     * sees these. The pointers are the caller's, read during this call only. */
    qvl_limits lim = *plan_lim, own;
    if (s.dp.limits) {
        TRY(limits_take(&own, s.dp.limits, "qvl_decode_params.limits", err));
        limits_min(&lim, &own);
    }
    if (s.vp.limits) {
        TRY(limits_take(&own, s.vp.limits, "qvl_video_params.limits", err));
        limits_min(&lim, &own);
    }
    s.dp.limits = &lim;
    s.vp.limits = &lim;
    s.vp.max_pixels = s.dp.max_pixels < s.vp.max_pixels ? s.dp.max_pixels : s.vp.max_pixels;
    double t0 = now_ms();
    qvl_image img = {0};
    qvl_video vid = {0};
    uint8_t *owned = NULL;
    qvl_status st = QVL_OK;
    int video = 0;
    /* a video goes into its rows frame by frame, each as soon as it is decoded (or converted) */
    plan_stream ps = {plan, pi, &s.pp, &lim, planned, vpool, hook, {0}, 0};
    const video_sink sink = {stream_begin, stream_frame, &ps};
    pi->row_len = row_len_of(&s.pp);
    pi->row_units = row_units_of(m, pi->row_len); /* read once the geometry is checked */
    pi->merge = s.pp.merge;
    switch (it->kind) {
    case QVL_ITEM_ROWS:
        pi->kind = "rows";
        if (!it->rows) return err_fail(err, QVL_ERR_INVALID_ARG, "%s: rows is NULL", pi->label);
        TRY(preprocess_geometry_check(&s.pp, pi->label, err)); /* rows go through no grid query */
        TRY(fits_model(m, &s.pp, pi->label, err));
        if (it->row_len && it->row_len != pi->row_len)
            return err_fail(err, QVL_ERR_SHAPE, "%s: rows have %zu values, the %s expects %zu (3 · %d · %d · %d)",
                            pi->label, it->row_len, m ? "model" : "preprocessing", pi->row_len, s.pp.temporal_patch,
                            s.pp.patch, s.pp.patch);
        TRY(tower_check_grid(s.pp.merge, &it->grid, pi->label, err));
        pi->grid = it->grid;
        TRY(check_patches(pi, &lim, planned, err));
        pi->n_rows = qvl_patch_rows(&pi->grid, 1);
        if (pi->n_rows == 0 || pi->n_rows > INT32_MAX)
            return err_fail(err, QVL_ERR_LIMIT, "%s: grid %dx%dx%d is too many patch rows", pi->label, it->grid.t,
                            it->grid.h, it->grid.w);
        TRY(rows_finite(it->rows, pi->n_rows, pi->row_len, pi->label, err));
        pi->rows = it->rows;
        return QVL_OK;
    case QVL_ITEM_PATH: {
        if (!it->path || !*it->path)
            return err_fail(err, QVL_ERR_INVALID_ARG, "%s: path is %s", pi->label, it->path ? "empty" : "NULL");
        struct stat sb;
        const int dir = stat(it->path, &sb) == 0 && S_ISDIR(sb.st_mode);
        int image = 0;
        if (!dir) TRY(sniff_image(it->path, pi->label, &image, err));
        video = dir || !image;
        pi->kind = dir ? "frames" : video ? "video" : "image";
        if (video) TRY(fits_model(m, &s.pp, pi->label, err)); /* before the first frame is resized */
        if (!video) st = image_load_item(it->path, &s.dp, stop, &img, err);
        else if (dir) st = load_frames_dir(it->path, &s.vp, &s.dp, stop, &sink, &vid, err);
        else st = video_load_item(it->path, &s.vp, &s.dp, stop, &sink, &vid, err);
        break;
    }
    case QVL_ITEM_ENCODED:
        if (!it->data || !it->size)
            return err_fail(err, QVL_ERR_INVALID_ARG, "%s: an ENCODED item needs data and size ≥ 1 (size %zu)",
                            pi->label, it->size);
        /* the same choice as for a path: images by their magic bytes, everything else to the video reader */
        video = !dec_is_image(dec_sniff(it->data, it->size));
        pi->kind = video ? "video" : "image";
        if (video) TRY(fits_model(m, &s.pp, pi->label, err));
        if (video) st = video_decode_labeled(it->data, it->size, &s.vp, &s.dp, stop, &sink, pi->label, &vid, err);
        else st = image_decode_labeled(it->data, it->size, &s.dp, stop, pi->label, &img, err);
        break;
    case QVL_ITEM_PIXELS:
        pi->kind = "image";
        st = pixels_rgb(&it->image, s.dp.alpha, &lim, pi->label, &img, &owned, err);
        break;
    case QVL_ITEM_FRAMES:
        pi->kind = "frames";
        video = 1;
        TRY(fits_model(m, &s.pp, pi->label, err));
        st = frames_video(it, &s.vp, s.dp.alpha, &lim, pi->label, &sink, &vid, err);
        break;
    default:
        return err_fail(err, QVL_ERR_INVALID_ARG, "%s: unknown item kind %d", pi->label, (int)it->kind);
    }
    if (st == QVL_OK && hook && ps.vr.taken) st = hook->frame(hook->user, &ps.vr, 1, err); /* the last rows placed */
    video_rows_free(&ps.vr);
    pi->decode_ms = now_ms() - t0 - ps.ms;
    t0 = now_ms();
    if (st == QVL_OK && !video) st = fits_model(m, &s.pp, pi->label, err);
    if (st == QVL_OK && !video) st = plan_image(pi, &img, &s.pp, &lim, planned, pool, err);
    pi->res_w = pi->grid.w * s.pp.patch, pi->res_h = pi->grid.h * s.pp.patch;
    pi->preprocess_ms = now_ms() - t0 + ps.ms;
    if (owned) free(owned);
    else if (it->kind != QVL_ITEM_PIXELS) qvl_image_free(&img);
    qvl_video_free(&vid);
    return st;
}

qvl_status plan_item_settings(const item_settings *base, const qvl_item *it, item_settings *s, qvl_error *err) {
    *s = *base;
    if (it->preprocess) TRY(preprocess_params_take(&s->pp, it->preprocess, err));
    if (it->video) TRY(video_params_take(&s->vp, it->video, err));
    if (it->decode) TRY(decode_params_take(&s->dp, it->decode, err));
    return QVL_OK;
}

/* ---- plans ---------------------------------------------------------------------------------------------------- */

static void item_free(plan_item *pi) {
    free(pi->rows_owned);
    free(pi->indices);
    free(pi->timestamps);
}

void qvl_plan_free(qvl_plan *p) {
    if (!p) return;
    for (size_t i = 0; i < p->n; i++) item_free(&p->items[i]);
    free(p->items);
    free(p->g_rows);
    free(p->g_grids);
    free(p->g_sinks);
    free(p->g_items);
    free(p);
}

/* The settings items without their own start from: the plan's, else the model directory's json files as the load
 * read them. */
qvl_status plan_base_settings(const qvl_model *m, const qvl_plan_params *pp, item_settings *s, qvl_error *err) {
    preprocess_defaults(&s->pp);
    video_defaults(&s->vp);
    decode_defaults(&s->dp);
    if (m && (!pp->preprocess || !pp->video)) {
        if (m->pre_status != QVL_OK) return err_fail(err, m->pre_status, "%s", m->pre_err.message);
        if (!pp->preprocess) s->pp = m->pre;
        if (!pp->video) s->vp = m->pre_video;
    }
    if (pp->preprocess) TRY(preprocess_params_take(&s->pp, pp->preprocess, err));
    if (pp->video) TRY(video_params_take(&s->vp, pp->video, err));
    if (pp->decode) TRY(decode_params_take(&s->dp, pp->decode, err));
    return QVL_OK;
}

/* Temporal patches of item pi in one piece when its rows are more than `cap`: as many whole temporal patches as fit,
 * at least one. A video attends within each temporal patch, and every row-wise operation and GEMM of the tower
 * gives the same bits however its rows are split (model/tower.c), so pieces of whole temporal patches, each with
 * the grid (t', h, w), encode to exactly the rows of the whole item: the scratch an encode holds is then set by
 * the cap, not by the video's length. */
static int32_t piece_t(const plan_item *pi, size_t cap) {
    const size_t per_t = (size_t)pi->grid.h * (size_t)pi->grid.w, fit = cap / (per_t ? per_t : 1);
    return fit < 1 ? 1 : fit > (size_t)pi->grid.t ? pi->grid.t : (int32_t)fit;
}

/* The group structure: consecutive ok items while their rows fit max_batch_rows; an item above it alone, in pieces
 * of whole temporal patches (piece_t) where it has more than one. */
static void plan_groups(qvl_plan *p, const qvl_ctx *ctx) {
    const size_t cap = p->p.max_batch_rows;
    size_t rows = 0, largest = 0, group = 0;
    for (size_t i = 0; i < p->n; i++) {
        plan_item *pi = &p->items[i];
        if (pi->status != QVL_OK) continue;
        if (pi->n_rows > cap) { /* alone: its pieces */
            if (rows) group++;
            pi->group = group++;
            const size_t piece = (size_t)piece_t(pi, cap) * (size_t)pi->grid.h * (size_t)pi->grid.w;
            if (piece > largest) largest = piece;
            rows = 0;
            continue;
        }
        if (rows && rows + pi->n_rows > cap) rows = 0, group++;
        rows += pi->n_rows;
        pi->group = group;
        if (rows > largest) largest = rows;
    }
    p->max_group_rows = largest;
    p->scratch = largest ? tower_scratch_bytes(ctx, largest, p->p.dtype != QVL_DTYPE_F32) : 0;
}

/* The decoding's stop probe (core/stop.h): the ctx's cancel flag (and its cancel_fn), then the plan's cancel_fn. */
typedef struct plan_stop {
    qvl_ctx *ctx;
    qvl_cancel_fn fn;
    void *user;
} plan_stop;

static int plan_stopped(void *user) {
    const plan_stop *s = user;
    return (s->ctx && ctx_cancelled(s->ctx)) || (s->fn && s->fn(s->user));
}

qvl_status qvl_plan_create(qvl_ctx *ctx, const qvl_item *items, size_t n_items, const qvl_plan_params *params,
                           qvl_plan **out, qvl_error *err) {
    return plan_create_hooked(ctx, items, n_items, params, NULL, out, err);
}

qvl_status plan_create_hooked(qvl_ctx *ctx, const qvl_item *items, size_t n_items, const qvl_plan_params *params,
                              const plan_hook *hook, qvl_plan **out, qvl_error *err) {
    err_clear(err);
    if (!out) return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_plan_create: out is NULL");
    *out = NULL;
    if (!items && n_items) return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_plan_create: items is NULL");
    size_t stride = n_items ? items[0].struct_size : 0;
    if (n_items && stride < offsetof(qvl_item, kind) + sizeof(qvl_item_kind))
        return err_fail(err, QVL_ERR_INVALID_ARG,
                        "qvl_plan_create: items[0].struct_size is %zu: initialise items with qvl_item_default()",
                        stride);
    const qvl_model *m = ctx ? ctx_model(ctx) : NULL;
    qvl_plan *p = calloc(1, sizeof *p);
    if (!p) return err_fail(err, QVL_ERR_NOMEM, "qvl_plan_create: out of memory");
    plan_defaults(&p->p);
    qvl_status s = params_take(&p->p, sizeof p->p, params, "qvl_plan_params", err);
    if (s == QVL_OK && p->p.dtype != QVL_DTYPE_F32 && p->p.dtype != QVL_DTYPE_BF16 && p->p.dtype != QVL_DTYPE_F16)
        s = err_fail(err, QVL_ERR_INVALID_ARG, "qvl_plan_params.dtype %d is not F32, BF16 or F16", (int)p->p.dtype);
    if (s == QVL_OK && p->p.layout != QVL_OUTPUT_CONCAT && p->p.layout != QVL_OUTPUT_SPLIT)
        s = err_fail(err, QVL_ERR_INVALID_ARG, "qvl_plan_params.layout %d is not CONCAT or SPLIT", (int)p->p.layout);
    item_settings base;
    if (s == QVL_OK) s = plan_base_settings(m, &p->p, &base, err);
    /* A ctx's limits are the ceiling the plan's own lower; without a ctx (preprocessing only) the plan's own are
     * the limits (they were lowered by the defaults, so a raised one, `qvl encode --preprocess-only --limit`, was
     * ignored). */
    if (ctx) p->lim = *ctx_limits(ctx);
    else limits_defaults(&p->lim);
    if (s == QVL_OK && p->p.limits) {
        qvl_limits own;
        s = limits_take(&own, p->p.limits, "qvl_plan_params.limits", err);
        if (ctx) limits_min(&p->lim, &own);
        else p->lim = own;
    }
    p->p.limits = NULL;
    p->p.preprocess = NULL, p->p.video = NULL, p->p.decode = NULL; /* taken; the caller's may go */
    if (!p->p.max_batch_rows) p->p.max_batch_rows = 16384;
    p->m = m;
    out_spec_of(m, &p->p, &p->o);
    if (s == QVL_OK) {
        const size_t n = n_items ? n_items : 1;
        p->items = calloc(n, sizeof *p->items);
        p->g_rows = calloc(n, sizeof *p->g_rows);
        p->g_grids = calloc(n, sizeof *p->g_grids);
        p->g_sinks = calloc(n, sizeof *p->g_sinks);
        p->g_items = calloc(n, sizeof *p->g_items);
        if (!p->items || !p->g_rows || !p->g_grids || !p->g_sinks || !p->g_items)
            s = err_fail(err, QVL_ERR_NOMEM, "qvl_plan_create: out of memory for %zu items", n_items);
        else
            p->n = n_items;
    }
    /* without a ctx, a pool for this call; with a hook, a video's rows are made on one thread of their own, as the
     * ctx's pool encodes meanwhile (an image uses the ctx's: its stream encodes only after it is planned) */
    thread_pool *own = NULL, *vown = NULL;
    if (s == QVL_OK && !ctx) s = pool_create(&own, 0, err);
    if (s == QVL_OK && hook) s = pool_create(&vown, 1, err);
    if (s != QVL_OK) {
        qvl_plan_free(p);
        return s;
    }
    thread_pool *pool = ctx ? ctx_pool(ctx) : own, *vpool = vown ? vown : pool;
    plan_stop ps = {ctx, p->p.cancel_fn, p->p.cancel_user};
    const stop_probe probe = hook ? (stop_probe){hook->stopped, hook->user} : (stop_probe){plan_stopped, &ps};
    p->p.cancel_fn = NULL, p->p.cancel_user = NULL; /* polled during this call only */
    for (size_t i = 0; i < n_items; i++) {
        plan_item *pi = &p->items[i];
        qvl_item it;
        item_defaults(&it);
        const qvl_item *ci = (const qvl_item *)((const unsigned char *)items + i * stride);
        qvl_error ie;
        err_clear(&ie);
        pi->status = params_take(&it, sizeof it, ci, "qvl_item", &ie);
        if (it.label && *it.label) snprintf(pi->label, sizeof pi->label, "%s", it.label);
        else if (it.kind == QVL_ITEM_PATH && it.path && *it.path) snprintf(pi->label, sizeof pi->label, "%s", it.path);
        else snprintf(pi->label, sizeof pi->label, "item %zu", i);
        if (pi->status == QVL_OK)
            pi->status = plan_one(p, pi, &it, &base, p->planned_rows, &probe, pool, vpool, hook, &ie);
        if (pi->status == QVL_OK) {
            const size_t merge = (size_t)pi->merge; /* the model's, once fits_model has passed */
            pi->n_tokens = pi->n_rows / (merge * merge);
            size_t b, total; /* the plan's total only grows when the item is kept */
            if (size_mul_overflow(pi->n_tokens, p->o.cols * p->o.planes * p->o.esize, &b) ||
                size_add_overflow(p->out_bytes, b, &total))
                pi->status = err_fail(&ie, QVL_ERR_LIMIT, "%s: the output size overflows", pi->label);
            else
                pi->out_bytes = b, p->out_bytes = total;
        }
        if (pi->status != QVL_OK) {
            if (!pi->kind) pi->kind = it.kind == QVL_ITEM_ROWS ? "rows" : it.kind == QVL_ITEM_FRAMES ? "frames" : "image";
            snprintf(pi->message, sizeof pi->message, "%s", ie.message[0] ? ie.message : qvl_status_name(pi->status));
            free(pi->rows_owned), pi->rows_owned = NULL, pi->rows = NULL;
            continue;
        }
        p->n_ok++;
        p->planned_rows += pi->n_rows * pi->row_units; /* within max_call_patches: check_patches */
        p->held += pi->rows_owned ? pi->n_rows * pi->row_len * sizeof(float) : 0;
    }
    pool_destroy(own);
    pool_destroy(vown);
    if (ctx) plan_groups(p, ctx);
    *out = p;
    return QVL_OK;
}

size_t qvl_plan_count(const qvl_plan *p) { return p ? p->n : 0; }
size_t qvl_plan_ok_count(const qvl_plan *p) { return p ? p->n_ok : 0; }
size_t qvl_plan_out_bytes(const qvl_plan *p) { return p ? p->out_bytes : 0; }
size_t qvl_plan_scratch_bytes(const qvl_plan *p) { return p ? p->scratch : 0; }
size_t qvl_plan_held_bytes(const qvl_plan *p) { return p ? p->held : 0; }

const float *qvl_plan_rows(const qvl_plan *p, size_t i) {
    return p && i < p->n && p->items[i].status == QVL_OK ? p->items[i].rows : NULL;
}

size_t plan_row_len(const qvl_plan *p, size_t i) { return p && i < p->n ? p->items[i].row_len : 0; }

/* Item pi's info (pointers into pi). */
static void item_info_of(const qvl_plan *p, const plan_item *pi, qvl_item_info *f) {
    memset(f, 0, sizeof *f);
    f->status = pi->status != QVL_OK ? pi->status : pi->enc_status;
    f->message = pi->message;
    f->kind = pi->kind ? pi->kind : "";
    if (pi->status == QVL_OK) {
        f->grid = pi->grid;
        f->n_rows = pi->n_rows;
        f->n_tokens = pi->n_tokens;
        f->out_cols = p->o.cols;
        f->n_planes = p->o.planes;
        f->out_bytes = pi->out_bytes;
    }
    f->src_width = pi->src_w, f->src_height = pi->src_h;
    f->resized_width = pi->res_w, f->resized_height = pi->res_h;
    f->n_frames = pi->n_frames;
    f->total_frames = pi->total_frames;
    f->source_fps = pi->fps;
    f->frame_indices = pi->indices;
    f->n_timestamps = pi->n_timestamps;
    f->timestamps = pi->timestamps;
    f->decode_ms = pi->decode_ms, f->preprocess_ms = pi->preprocess_ms, f->encode_ms = pi->encode_ms;
}

void qvl_plan_item_sized(const qvl_plan *p, size_t i, qvl_item_info *info, size_t size) {
    if (!info) return;
    qvl_item_info f;
    if (!p || i >= p->n) {
        memset(&f, 0, sizeof f);
        f.status = QVL_ERR_INVALID_ARG;
        f.message = !p ? "qvl_plan_item: plan is NULL" : "qvl_plan_item: index out of range";
        f.kind = "";
    } else {
        item_info_of(p, &p->items[i], &f);
    }
    memcpy(info, &f, size < sizeof f ? size : sizeof f);
}

qvl_status qvl_ctx_reserve_plan(qvl_ctx *ctx, const qvl_plan *p, qvl_error *err) {
    err_clear(err);
    if (!ctx || !p) return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_ctx_reserve_plan: %s is NULL", !ctx ? "ctx" : "plan");
    if (ctx_model(ctx) != p->m)
        return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_ctx_reserve_plan: the plan was made for another model");
    if (!p->max_group_rows) return QVL_OK;
    /* groups on this ctx are within the plan's and within its call limit (qvl_plan_encode) */
    const uint64_t call = ctx_limits(ctx)->max_call_patches;
    const size_t rows = call < p->max_group_rows ? (size_t)call : p->max_group_rows;
    return tower_reserve(ctx, rows, p->p.dtype != QVL_DTYPE_F32, err);
}

void out_spec_of(const qvl_model *m, const qvl_plan_params *p, out_spec *o) {
    o->dtype = p->dtype;
    o->layout = p->layout;
    o->n_ds = m && p->deepstack ? m->cfg.n_deepstack : 0;
    o->O = m ? (size_t)m->cfg.out_hidden : 0;
    o->esize = p->dtype == QVL_DTYPE_F32 ? 4 : 2;
    o->cols = p->layout == QVL_OUTPUT_CONCAT ? o->O * (1 + (size_t)o->n_ds) : o->O;
    o->planes = p->layout == QVL_OUTPUT_CONCAT ? 1 : 1 + (size_t)o->n_ds;
}

void out_sink(const out_spec *o, void *out, size_t plane_tokens, size_t t0, size_t tok0, size_t n, tower_sink *k) {
    memset(k, 0, sizeof *k);
    k->t0 = t0;
    k->n = n;
    k->dtype = o->dtype;
    k->ld = o->cols;
    unsigned char *base = out;
    for (int d = 0; d <= o->n_ds; d++) {
        const size_t off = o->layout == QVL_OUTPUT_CONCAT ? (size_t)d * o->O : (size_t)d * plane_tokens * o->O;
        k->dst[d] = base + (off + tok0 * o->cols) * o->esize;
    }
}

qvl_status out_finite(const out_spec *o, const void *out, size_t plane_tokens, size_t tok0, size_t n_tok,
                      size_t tok_base, qvl_error *err) {
    size_t i = SIZE_MAX;
    for (size_t q = 0; q < o->planes && i == SIZE_MAX; q++) {
        const size_t start = (q * plane_tokens + tok0) * o->cols, n = n_tok * o->cols;
        const void *first = (const unsigned char *)out + start * o->esize;
        const size_t j = o->dtype == QVL_DTYPE_F32 ? first_nonfinite_f32(first, n)
                                                   : first_nonfinite_16(first, n, o->dtype == QVL_DTYPE_BF16);
        if (j < n) i = start + j;
    }
    if (i == SIZE_MAX) return QVL_OK;
    size_t plane, tok, col;
    if (o->layout == QVL_OUTPUT_CONCAT) tok = i / o->cols, col = i % o->cols, plane = col / o->O, col %= o->O;
    else plane = i / (plane_tokens * o->O), tok = i % (plane_tokens * o->O) / o->O, col = i % o->O;
    char what[32];
    if (plane == 0) snprintf(what, sizeof what, "merged");
    else snprintf(what, sizeof what, "deepstack%zu", plane - 1);
    return err_fail(err, QVL_ERR_NONFINITE, "the tower's output is not finite: %s token %zu, column %zu (non-finite "
                    "weights, or activations past the float32 range)", what, tok_base + tok, col);
}

/* Item pi's output, tokens [tok0, tok0 + n_tok), finite (out_finite), the message naming the item. */
static qvl_status item_out_finite(const qvl_plan *p, const plan_item *pi, const void *out, size_t tok0, size_t n_tok,
                                  qvl_error *err) {
    qvl_error e;
    const qvl_status s = out_finite(&p->o, out, pi->n_tokens, tok0, n_tok, 0, &e);
    return s == QVL_OK ? QVL_OK : err_fail(err, s, "%s: %s", pi->label, e.message);
}

/* An item against the limits of the ctx that encodes it, which may be lower than those it was planned under (a
 * plan can be encoded on another ctx over the same model): its rows against max_item_patches, and against
 * max_call_patches as a group of its own. Checked per item so that one over a limit fails alone, named. */
static qvl_status item_fits_ctx(const plan_item *pi, const qvl_limits *lim, qvl_error *err) {
    const qvl_grid *g = &pi->grid;
    if (pi->n_rows > lim->max_item_patches)
        return limit_fail(err, "max_item_patches", lim->max_item_patches,
                          "%s: grid %dx%dx%d (t x h x w) is %zu patch rows, more than the %llu this ctx allows per "
                          "item", pi->label, g->t, g->h, g->w, pi->n_rows, (unsigned long long)lim->max_item_patches);
    if (pi->n_rows > lim->max_call_patches)
        return limit_fail(err, "max_call_patches", lim->max_call_patches,
                          "%s: grid %dx%dx%d (t x h x w) is %zu patch rows, more than the %llu this ctx encodes in "
                          "one call", pi->label, g->t, g->h, g->w, pi->n_rows,
                          (unsigned long long)lim->max_call_patches);
    return QVL_OK;
}

static void mark(qvl_plan *p, const size_t *idx, size_t n, qvl_status s, const char *msg) {
    for (size_t j = 0; j < n; j++) {
        plan_item *pi = &p->items[idx[j]];
        pi->enc_status = s;
        snprintf(pi->message, sizeof pi->message, "%.200s: %.800s", pi->label, msg);
    }
}

static qvl_status plan_encode(const char *fname, qvl_ctx *ctx, qvl_plan *p, void *const *outputs, qvl_chunk_fn fn,
                              void *user, qvl_error *err);

qvl_status qvl_plan_encode(qvl_ctx *ctx, qvl_plan *p, void *const *outputs, qvl_error *err) {
    return plan_encode("qvl_plan_encode", ctx, p, outputs, NULL, NULL, err);
}

qvl_status qvl_plan_encode_chunks(qvl_ctx *ctx, qvl_plan *p, void *const *outputs, qvl_chunk_fn fn, void *user,
                                  qvl_error *err) {
    return plan_encode("qvl_plan_encode_chunks", ctx, p, outputs, fn, user, err);
}

static qvl_status plan_encode(const char *fname, qvl_ctx *ctx, qvl_plan *p, void *const *outputs, qvl_chunk_fn fn,
                              void *user, qvl_error *err) {
    err_clear(err);
    if (!ctx || !p || (!outputs && p->n_ok))
        return err_fail(err, QVL_ERR_INVALID_ARG, "%s: %s is NULL", fname, !ctx ? "ctx" : !p ? "plan" : "outputs");
    if (!p->m)
        return err_fail(err, QVL_ERR_INVALID_ARG, "%s: the plan was made without a ctx (preprocessing only); make it "
                        "on a ctx to encode it", fname);
    if (ctx_model(ctx) != p->m)
        return err_fail(err, QVL_ERR_INVALID_ARG, "%s: the plan was made for another model", fname);
    const qvl_limits *lim = ctx_limits(ctx);
    for (size_t i = 0; i < p->n; i++) { /* a fresh encode: earlier encode failures are forgotten */
        plan_item *pi = &p->items[i];
        if (pi->status != QVL_OK) continue;
        pi->enc_status = QVL_OK;
        pi->message[0] = '\0';
        pi->encode_ms = 0;
        pi->encoded = 0;
        qvl_error fe;
        err_clear(&fe);
        if (!outputs[i]) {
            pi->enc_status = QVL_ERR_INVALID_ARG;
            snprintf(pi->message, sizeof pi->message, "%s: outputs[%zu] is NULL", pi->label, i);
        } else if ((pi->enc_status = item_fits_ctx(pi, lim, &fe)) != QVL_OK) {
            snprintf(pi->message, sizeof pi->message, "%s", fe.message);
        }
    }
    /* Groups within this ctx's call limit too, so that no group-level limit can fail an item that fits it alone;
     * and within the plan's groups, so that an item skipped here joins no neighbours into a larger group than the
     * plan reserved for. */
    const size_t cap = lim->max_call_patches < p->p.max_batch_rows ? (size_t)lim->max_call_patches
                                                                   : p->p.max_batch_rows;
    int stop = 0;     /* cancelled, or the chunk callback asked to stop */
    int by_fn = 0;    /* ... the callback */
    for (size_t i = 0; i < p->n && !stop;) {
        /* the next group: consecutive ok items of one plan group while their rows fit (on the planning ctx, with
         * every item encoded, the plan's groups: its call limit, which bounds the whole plan, lowers nothing); an
         * item above the cap alone, in pieces of whole temporal patches (piece_t) */
        size_t n = 0, rows = 0, tok = 0, group = 0;
        for (; i < p->n; i++) {
            plan_item *pi = &p->items[i];
            if (pi->status != QVL_OK || pi->enc_status != QVL_OK) continue;
            if (n && (pi->group != group || rows + pi->n_rows > cap)) break;
            group = pi->group;
            p->g_rows[n] = pi->rows;
            p->g_grids[n] = pi->grid;
            out_sink(&p->o, outputs[i], pi->n_tokens, tok, 0, pi->n_tokens, &p->g_sinks[n]);
            p->g_items[n++] = i;
            rows += pi->n_rows;
            tok += pi->n_tokens;
            if (pi->n_rows > cap) {
                i++;
                break;
            }
        }
        if (!n) break;
        qvl_error ge;
        err_clear(&ge);
        double t0 = now_ms();
        qvl_status s = QVL_OK;
        const plan_item *one = &p->items[p->g_items[0]];
        int delivered = 0; /* the pieces went to the callback one by one (each checked finite first) */
        if (n == 1 && rows > cap && one->grid.t > 1) { /* in pieces */
            const size_t per_t = (size_t)one->grid.h * (size_t)one->grid.w, mm = (size_t)one->merge * one->merge;
            const int32_t step = piece_t(one, cap);
            void *out = outputs[p->g_items[0]];
            delivered = fn != NULL;
            for (int32_t t = 0; t < one->grid.t && s == QVL_OK; t += step) {
                const int32_t tn = one->grid.t - t < step ? one->grid.t - t : step;
                const size_t r0 = (size_t)t * per_t, pr = (size_t)tn * per_t;
                const float *piece_rows = one->rows + r0 * one->row_len;
                const qvl_grid g = {tn, one->grid.h, one->grid.w};
                tower_sink k;
                out_sink(&p->o, out, one->n_tokens, 0, r0 / mm, pr / mm, &k);
                s = tower_encode(ctx, NULL, &piece_rows, pr, &g, 1, &k, 1, &ge);
                if (s != QVL_OK || !fn) continue;
                if ((s = item_out_finite(p, one, out, r0 / mm, pr / mm, &ge)) != QVL_OK) break;
                if (fn(user, p->g_items[0], r0 / mm, pr / mm)) {
                    by_fn = 1;
                    if (t + tn < one->grid.t)
                        s = err_fail(&ge, QVL_ERR_CANCELLED, "stopped by the chunk callback after %zu of its %zu "
                                     "tokens", (r0 + pr) / mm, one->n_tokens);
                    break;
                }
            }
        } else {
            s = tower_encode(ctx, NULL, p->g_rows, rows, p->g_grids, n, p->g_sinks, n, &ge);
        }
        double ms = now_ms() - t0;
        for (size_t j = 0; j < n; j++) { /* the group's time, shared by rows */
            plan_item *pi = &p->items[p->g_items[j]];
            pi->encode_ms = ms * (double)pi->n_rows / (double)rows;
        }
        if (s == QVL_ERR_NONFINITE && delivered) { /* a piece's tokens (the message names the item) */
            plan_item *pi = &p->items[p->g_items[0]];
            pi->encoded = 1;
            pi->enc_status = s;
            snprintf(pi->message, sizeof pi->message, "%s", ge.message);
        } else if (s != QVL_OK) {
            mark(p, p->g_items, n, s, ge.message);
            if (s == QVL_ERR_CANCELLED) stop = 1;
        } else {
            for (size_t j = 0; j < n; j++) {
                const size_t ii = p->g_items[j];
                plan_item *pi = &p->items[ii];
                pi->encoded = 1;
                if (delivered) continue; /* its pieces were checked and handed over */
                qvl_error fe;
                err_clear(&fe);
                if (item_out_finite(p, pi, outputs[ii], 0, pi->n_tokens, &fe) != QVL_OK) {
                    pi->enc_status = QVL_ERR_NONFINITE;
                    snprintf(pi->message, sizeof pi->message, "%s", fe.message);
                } else if (fn && !by_fn && fn(user, ii, 0, pi->n_tokens)) {
                    by_fn = 1;
                }
            }
        }
        if (by_fn) stop = 1;
    }
    /* Items a cancellation left unencoded. */
    qvl_status first = QVL_OK;
    for (size_t i = 0; i < p->n; i++) {
        plan_item *pi = &p->items[i];
        if (pi->status != QVL_OK) continue;
        if (stop && pi->enc_status == QVL_OK && !pi->encoded) {
            pi->enc_status = QVL_ERR_CANCELLED;
            snprintf(pi->message, sizeof pi->message, "%s: not encoded: %s", pi->label,
                     by_fn ? "the chunk callback asked to stop" : "the encode was cancelled");
        }
        if (pi->enc_status != QVL_OK && first == QVL_OK) {
            first = pi->enc_status;
            err_fail(err, first, "%s", pi->message);
        }
    }
    return first;
}
