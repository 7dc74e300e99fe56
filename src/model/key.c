/* key.c — the content-addressed cache key of one item (qvl_item_key in qvl.h): XXH3-128 over a versioned canonical
 * serialisation of everything the item's embeddings depend on. The CLI, the Python binding and servers all call
 * this one function, so that a key computed by one finds what another cached.
 *
 * Serialisation "qvl-key-v1" (integers little-endian of the width given, floats as their IEEE-754 bits
 * little-endian, strings with their NUL):
 *   "qvl-key-v1"  weights fingerprint (16 bytes)  precision string  pos_mode u32  content tag string
 *   unless the tag is "rows":
 *     decode      apply_exif u32, alpha u32
 *     preprocess  resize u32, min_pixels u64, max_pixels u64, video_min_pixels u64, video_max_pixels u64,
 *                 size_h i32, size_w i32, image_mean f32×3, image_std f32×3, rescale_factor f64,
 *                 patch i32, temporal_patch i32, merge i32
 *     video       fps f64, num_frames i32, min_frames i32, max_frames i32, default_fps f64
 *   content by tag:
 *     "encoded"     (PATH file, ENCODED) byte count u64, the bytes: a file's bytes, never its name
 *     "frames-dir"  (PATH directory) file count u64, then per frame file in name order: byte count u64, bytes
 *     "pixels"      (PIXELS) width, height, channels i32, then each row's width·channels bytes (stride dropped)
 *     "frames"      (FRAMES) frame count u64, fps f64 as given, then per frame as "pixels"
 *     "rows"        (ROWS) grid t, h, w i32, row_len u64, row count u64, the float32 rows' bytes
 * Limits that only refuse inputs (max_pixels of decoding, the plan's batch size) and the output's dtype, layout
 * and DeepStack choice are not part of the key: it names the float32 embeddings with every DeepStack feature. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>

#include "core/error.h"
#include "core/params.h"
#include "io/fileutil.h"
#include "model/model.h"
#include "model/plan.h"
#include "model/tower.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "key.c hashes float32 rows and pixel bytes as stored: little-endian hosts only"
#endif

#define KEY_TAG "qvl-key-v1"
/* The compute precision of the context. Every context computes in float32 today; when contexts gain another
 * precision (bf16 activations), it goes here, read from the ctx's params: keys of f32 contexts stay as they are. */
#define KEY_PRECISION_F32 "f32"

static void h_bytes(XXH3_state_t *h, const void *p, size_t n) { XXH3_128bits_update(h, p, n); }
static void h_str(XXH3_state_t *h, const char *s) { h_bytes(h, s, strlen(s) + 1); }
static void h_u64(XXH3_state_t *h, uint64_t v) {
    unsigned char le[8];
    for (int k = 0; k < 8; k++) le[k] = (unsigned char)(v >> (8 * k));
    h_bytes(h, le, 8);
}
static void h_u32(XXH3_state_t *h, uint32_t v) {
    unsigned char le[4];
    for (int k = 0; k < 4; k++) le[k] = (unsigned char)(v >> (8 * k));
    h_bytes(h, le, 4);
}
static void h_i32(XXH3_state_t *h, int32_t v) { h_u32(h, (uint32_t)v); }
static void h_f32(XXH3_state_t *h, float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    h_u32(h, u);
}
static void h_f64(XXH3_state_t *h, double v) {
    uint64_t u;
    memcpy(&u, &v, 8);
    h_u64(h, u);
}

static void h_settings(XXH3_state_t *h, const item_settings *s) {
    h_u32(h, (uint32_t)s->dp.apply_exif);
    h_u32(h, (uint32_t)s->dp.alpha);
    const qvl_preprocess_params *pp = &s->pp;
    h_u32(h, (uint32_t)pp->resize);
    h_u64(h, pp->min_pixels), h_u64(h, pp->max_pixels);
    h_u64(h, pp->video_min_pixels), h_u64(h, pp->video_max_pixels);
    h_i32(h, pp->size_h), h_i32(h, pp->size_w);
    for (int c = 0; c < 3; c++) h_f32(h, pp->image_mean[c]);
    for (int c = 0; c < 3; c++) h_f32(h, pp->image_std[c]);
    h_f64(h, pp->rescale_factor);
    h_i32(h, pp->patch), h_i32(h, pp->temporal_patch), h_i32(h, pp->merge);
    const qvl_video_params *vp = &s->vp;
    h_f64(h, vp->fps);
    h_i32(h, vp->num_frames), h_i32(h, vp->min_frames), h_i32(h, vp->max_frames);
    h_f64(h, vp->default_fps);
}

/* A regular file's size and bytes, read in pieces (never held whole). */
static qvl_status h_file(XXH3_state_t *h, const char *path, unsigned char *buf, size_t cap, qvl_error *err) {
    FILE *f;
    size_t size;
    TRY(fu_open_regular(path, &f, &size, err));
    h_u64(h, (uint64_t)size);
    size_t got = 0, n;
    while ((n = fread(buf, 1, cap, f)) > 0) {
        h_bytes(h, buf, n);
        got += n;
    }
    const int bad = ferror(f);
    fclose(f);
    if (bad) return err_fail(err, QVL_ERR_IO, "%s: read error", path);
    if (got != size)
        return err_fail(err, QVL_ERR_IO, "%s: changed while it was read (%zu bytes, then %zu)", path, size, got);
    return QVL_OK;
}

static qvl_status h_pixels(XXH3_state_t *h, const qvl_pixels *px, const char *label, qvl_error *err) {
    if (!px->data) return err_fail(err, QVL_ERR_INVALID_ARG, "%s: image.data is NULL", label);
    if (px->width < 1 || px->height < 1 || (px->channels != 3 && px->channels != 4))
        return err_fail(err, QVL_ERR_INVALID_ARG, "%s: image is %dx%d pixels of %d channels", label, px->width,
                        px->height, px->channels);
    size_t row, all;
    if (size_mul_overflow((size_t)px->width, (size_t)px->channels, &row) ||
        size_mul_overflow(row, (size_t)px->height, &all))
        return err_fail(err, QVL_ERR_LIMIT, "%s: a %dx%d image overflows", label, px->width, px->height);
    const size_t stride = px->stride ? px->stride : row;
    if (stride < row)
        return err_fail(err, QVL_ERR_INVALID_ARG, "%s: image.stride %zu is below width·channels = %zu", label, stride,
                        row);
    h_i32(h, px->width), h_i32(h, px->height), h_i32(h, px->channels);
    if (stride == row) h_bytes(h, px->data, all);
    else
        for (int32_t y = 0; y < px->height; y++) h_bytes(h, px->data + (size_t)y * stride, row);
    return QVL_OK;
}

static qvl_status h_content(XXH3_state_t *h, const qvl_model *m, const qvl_item *it, const item_settings *s,
                            const char *label, qvl_error *err) {
    switch (it->kind) {
    case QVL_ITEM_ROWS: {
        if (!it->rows) return err_fail(err, QVL_ERR_INVALID_ARG, "%s: rows is NULL", label);
        const size_t row_len = (size_t)m->cfg.row_len;
        if (it->row_len && it->row_len != row_len)
            return err_fail(err, QVL_ERR_SHAPE, "%s: rows have %zu values, the model expects %zu", label, it->row_len,
                            row_len);
        TRY(tower_check_grid(m->cfg.merge, &it->grid, label, err));
        const size_t n = qvl_patch_rows(&it->grid, 1);
        size_t bytes;
        if (n == 0 || size_mul_overflow(n, row_len * sizeof(float), &bytes))
            return err_fail(err, QVL_ERR_LIMIT, "%s: grid %dx%dx%d is too many patch rows", label, it->grid.t,
                            it->grid.h, it->grid.w);
        h_str(h, "rows");
        h_i32(h, it->grid.t), h_i32(h, it->grid.h), h_i32(h, it->grid.w);
        h_u64(h, (uint64_t)row_len), h_u64(h, (uint64_t)n);
        h_bytes(h, it->rows, bytes);
        return QVL_OK;
    }
    case QVL_ITEM_PATH: {
        if (!it->path || !*it->path)
            return err_fail(err, QVL_ERR_INVALID_ARG, "%s: path is %s", label, it->path ? "empty" : "NULL");
        const size_t cap = (size_t)1 << 18;
        unsigned char *buf = malloc(cap);
        if (!buf) return err_fail(err, QVL_ERR_NOMEM, "%s: out of memory", label);
        struct stat sb;
        qvl_status st = QVL_OK;
        if (stat(it->path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
            char **names;
            size_t n;
            st = plan_list_frames(it->path, &names, &n, err);
            if (st == QVL_OK) {
                h_str(h, "frames-dir");
                h_settings(h, s);
                h_u64(h, (uint64_t)n);
                for (size_t i = 0; i < n && st == QVL_OK; i++) st = h_file(h, names[i], buf, cap, err);
                plan_free_names(names, n);
            }
        } else {
            h_str(h, "encoded");
            h_settings(h, s);
            st = h_file(h, it->path, buf, cap, err);
        }
        free(buf);
        return st;
    }
    case QVL_ITEM_ENCODED:
        if (!it->data || !it->size)
            return err_fail(err, QVL_ERR_INVALID_ARG, "%s: an ENCODED item needs data and size ≥ 1 (size %zu)", label,
                            it->size);
        h_str(h, "encoded");
        h_settings(h, s);
        h_u64(h, (uint64_t)it->size);
        h_bytes(h, it->data, it->size);
        return QVL_OK;
    case QVL_ITEM_PIXELS:
        h_str(h, "pixels");
        h_settings(h, s);
        return h_pixels(h, &it->image, label, err);
    case QVL_ITEM_FRAMES:
        if (!it->frames || it->n_frames == 0)
            return err_fail(err, QVL_ERR_INVALID_ARG, "%s: a FRAMES item needs frames and n_frames ≥ 1 (n_frames %zu)",
                            label, it->n_frames);
        h_str(h, "frames");
        h_settings(h, s);
        h_u64(h, (uint64_t)it->n_frames);
        h_f64(h, it->fps);
        for (size_t f = 0; f < it->n_frames; f++) TRY(h_pixels(h, &it->frames[f], label, err));
        return QVL_OK;
    default:
        return err_fail(err, QVL_ERR_INVALID_ARG, "%s: unknown item kind %d", label, (int)it->kind);
    }
}

qvl_status qvl_item_key(const qvl_ctx *ctx, const qvl_item *item, const qvl_plan_params *params, uint8_t digest[16],
                        char hex[33], qvl_error *err) {
    err_clear(err);
    if (hex) hex[0] = 0;
    if (!ctx || !item) return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_item_key: %s is NULL", ctx ? "item" : "ctx");
    qvl_item it;
    qvl_item_init(&it, sizeof it);
    TRY(params_take(&it, sizeof it, item, "qvl_item", err));
    qvl_plan_params pp;
    qvl_plan_params_init(&pp, sizeof pp);
    TRY(params_take(&pp, sizeof pp, params, "qvl_plan_params", err));
    char label[256];
    if (it.label && *it.label) snprintf(label, sizeof label, "%s", it.label);
    else if (it.kind == QVL_ITEM_PATH && it.path && *it.path) snprintf(label, sizeof label, "%s", it.path);
    else snprintf(label, sizeof label, "item");
    /* the fingerprint is computed once under the model's lock and cached: the only write, and a thread-safe one */
    qvl_model *m = (qvl_model *)ctx_model(ctx);
    uint8_t fp[16];
    TRY(qvl_model_fingerprint(m, fp, NULL, err));
    item_settings base, s;
    TRY(plan_base_settings(m, &pp, &base, err));
    TRY(plan_item_settings(&base, &it, &s, err));
    XXH3_state_t *h = XXH3_createState();
    if (!h) return err_fail(err, QVL_ERR_NOMEM, "qvl_item_key: out of memory");
    XXH3_128bits_reset(h);
    h_str(h, KEY_TAG);
    h_bytes(h, fp, 16);
    h_str(h, KEY_PRECISION_F32); /* precision: see KEY_PRECISION_F32 */
    h_u32(h, (uint32_t)ctx_params(ctx)->pos_mode);
    qvl_status st = h_content(h, m, &it, &s, label, err);
    XXH128_hash_t d = XXH3_128bits_digest(h);
    XXH3_freeState(h);
    if (st != QVL_OK) return st;
    XXH128_canonical_t canon;
    XXH128_canonicalFromHash(&canon, d);
    if (digest) memcpy(digest, canon.digest, 16);
    if (hex)
        for (int i = 0; i < 16; i++) snprintf(hex + 2 * i, 3, "%02x", canon.digest[i]);
    return QVL_OK;
}
