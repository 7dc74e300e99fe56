/* key.c — the content-addressed cache key of one item (qvl_item_key in qvl.h): SHA-256 over a length-prefixed
 * canonical tuple of everything an item's output depends on. The CLI, the Python binding and servers all call this
 * one function, so that a key computed by one finds what another cached. A cryptographic hash, because a key names
 * a cache entry shared between clients: with a non-cryptographic hash, a client could craft an input whose key
 * collides with another's and so have its embeddings served for that input.
 *
 * The tuple "qvl-key-v1": each field is its byte count (u64 little-endian), then its bytes; integers are
 * little-endian of the width given, floats their IEEE-754 bits little-endian, strings without a NUL.
 *   tag "qvl-key-v1" · weights fingerprint (16 bytes) · precision ("f32", "bf16") · pos_mode u32 ·
 *   output dtype ("f32", "f16", "bf16") · layout ("concat", "split") · deepstack u32 ·
 *   content kind ("encoded", "frames-dir", "pixels", "frames", "rows") ·
 *   settings (empty for "rows"): apply_exif u32, alpha u32, resize u32, min_pixels u64, max_pixels u64,
 *     video_min_pixels u64, video_max_pixels u64, size_h i32, size_w i32, image_mean f32×3, image_std f32×3,
 *     rescale_factor f64, patch i32, temporal_patch i32, merge i32, fps f64, num_frames i32, min_frames i32,
 *     max_frames i32, default_fps f64, and only when transformers' per-frame cap is on (so that every key made
 *     before it existed stays what it was): cap_pixels_per_frame u32 (1), max_video_tokens i32 ·
 *   SHA-256 of the content, by kind:
 *     "encoded"     (PATH file, ENCODED) byte count u64, the bytes: a file's bytes, never its name
 *     "frames-dir"  (PATH directory) file count u64, then per frame file in name order: byte count u64, bytes
 *     "pixels"      (PIXELS) width, height, channels i32, then each row's width·channels bytes (stride dropped)
 *     "frames"      (FRAMES) frame count u64, fps f64 as given, then per frame as "pixels"
 *     "rows"        (ROWS) grid t, h, w i32, row_len u64, row count u64, the float32 rows' bytes
 * Limits that only refuse inputs (max_pixels of decoding, the plan's batch size) are not part of the key. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <nettle/sha2.h>

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

/* The content digest streams into a SHA-256; small fixed fields are first laid out in a byte builder (kb), so each
 * is encoded once, little-endian, whether it goes into the tuple or into the content stream. */
typedef struct kb {
    unsigned char b[192];
    size_t n;
} kb;
static void kb_raw(kb *k, const void *p, size_t n) { /* callers put at most ~120 bytes: fixed fields only */
    memcpy(k->b + k->n, p, n);
    k->n += n;
}
static void kb_u64(kb *k, uint64_t v) {
    unsigned char le[8];
    for (int i = 0; i < 8; i++) le[i] = (unsigned char)(v >> (8 * i));
    kb_raw(k, le, 8);
}
static void kb_u32(kb *k, uint32_t v) {
    unsigned char le[4];
    for (int i = 0; i < 4; i++) le[i] = (unsigned char)(v >> (8 * i));
    kb_raw(k, le, 4);
}
static void kb_i32(kb *k, int32_t v) { kb_u32(k, (uint32_t)v); }
static void kb_f32(kb *k, float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    kb_u32(k, u);
}
static void kb_f64(kb *k, double v) {
    uint64_t u;
    memcpy(&u, &v, 8);
    kb_u64(k, u);
}
static void sha_kb(struct sha256_ctx *h, const kb *k) { sha256_update(h, k->n, k->b); }
static void sha_bytes(struct sha256_ctx *h, const void *p, size_t n) { sha256_update(h, n, p); }
static void sha_u64(struct sha256_ctx *h, uint64_t v) {
    kb k = {.n = 0};
    kb_u64(&k, v);
    sha_kb(h, &k);
}
/* One field of the tuple: its byte count (u64), then its bytes. */
static void field(struct sha256_ctx *h, const void *p, size_t n) {
    sha_u64(h, (uint64_t)n);
    sha_bytes(h, p, n);
}
static void field_str(struct sha256_ctx *h, const char *s) { field(h, s, strlen(s)); }
static void field_u32(struct sha256_ctx *h, uint32_t v) {
    kb k = {.n = 0};
    kb_u32(&k, v);
    field(h, k.b, k.n);
}

/* The resolved decode, preprocess and video settings, as one field. */
static void field_settings(struct sha256_ctx *h, const item_settings *s) {
    kb k = {.n = 0};
    kb_u32(&k, (uint32_t)s->dp.apply_exif);
    kb_u32(&k, (uint32_t)s->dp.alpha);
    const qvl_preprocess_params *pp = &s->pp;
    kb_u32(&k, (uint32_t)pp->resize);
    kb_u64(&k, pp->min_pixels), kb_u64(&k, pp->max_pixels);
    kb_u64(&k, pp->video_min_pixels), kb_u64(&k, pp->video_max_pixels);
    kb_i32(&k, pp->size_h), kb_i32(&k, pp->size_w);
    for (int c = 0; c < 3; c++) kb_f32(&k, pp->image_mean[c]);
    for (int c = 0; c < 3; c++) kb_f32(&k, pp->image_std[c]);
    kb_f64(&k, pp->rescale_factor);
    kb_i32(&k, pp->patch), kb_i32(&k, pp->temporal_patch), kb_i32(&k, pp->merge);
    const qvl_video_params *vp = &s->vp;
    kb_f64(&k, vp->fps);
    kb_i32(&k, vp->num_frames), kb_i32(&k, vp->min_frames), kb_i32(&k, vp->max_frames);
    kb_f64(&k, vp->default_fps);
    if (pp->cap_pixels_per_frame) kb_u32(&k, (uint32_t)pp->cap_pixels_per_frame), kb_i32(&k, pp->max_video_tokens);
    field(h, k.b, k.n);
}

/* A regular file's size and bytes into the content digest, read in pieces (never held whole). */
static qvl_status c_file(struct sha256_ctx *c, const char *path, unsigned char *buf, size_t cap, qvl_error *err) {
    FILE *f;
    size_t size;
    TRY(fu_open_regular(path, &f, &size, err));
    sha_u64(c, (uint64_t)size);
    size_t got = 0, n;
    while ((n = fread(buf, 1, cap, f)) > 0) {
        sha_bytes(c, buf, n);
        got += n;
    }
    const int bad = ferror(f);
    fclose(f);
    if (bad) return err_fail(err, QVL_ERR_IO, "%s: read error", path);
    if (got != size)
        return err_fail(err, QVL_ERR_IO, "%s: changed while it was read (%zu bytes, then %zu)", path, size, got);
    return QVL_OK;
}

static qvl_status c_pixels(struct sha256_ctx *c, const qvl_pixels *px, const char *label, qvl_error *err) {
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
    kb k = {.n = 0};
    kb_i32(&k, px->width), kb_i32(&k, px->height), kb_i32(&k, px->channels);
    sha_kb(c, &k);
    if (stride == row) sha_bytes(c, px->data, all);
    else
        for (int32_t y = 0; y < px->height; y++) sha_bytes(c, px->data + (size_t)y * stride, row);
    return QVL_OK;
}

/* The item's content into the digest `c`; *kind names how it was given ("rows" takes no settings). */
static qvl_status c_content(struct sha256_ctx *c, const qvl_model *m, const qvl_item *it, const char *label,
                            const char **kind, qvl_error *err) {
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
        *kind = "rows";
        kb k = {.n = 0};
        kb_i32(&k, it->grid.t), kb_i32(&k, it->grid.h), kb_i32(&k, it->grid.w);
        kb_u64(&k, (uint64_t)row_len), kb_u64(&k, (uint64_t)n);
        sha_kb(c, &k);
        sha_bytes(c, it->rows, bytes);
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
                *kind = "frames-dir";
                sha_u64(c, (uint64_t)n);
                for (size_t i = 0; i < n && st == QVL_OK; i++) st = c_file(c, names[i], buf, cap, err);
                plan_free_names(names, n);
            }
        } else {
            *kind = "encoded";
            st = c_file(c, it->path, buf, cap, err);
        }
        free(buf);
        return st;
    }
    case QVL_ITEM_ENCODED:
        if (!it->data || !it->size)
            return err_fail(err, QVL_ERR_INVALID_ARG, "%s: an ENCODED item needs data and size ≥ 1 (size %zu)", label,
                            it->size);
        *kind = "encoded";
        sha_u64(c, (uint64_t)it->size);
        sha_bytes(c, it->data, it->size);
        return QVL_OK;
    case QVL_ITEM_PIXELS:
        *kind = "pixels";
        return c_pixels(c, &it->image, label, err);
    case QVL_ITEM_FRAMES: {
        if (!it->frames || it->n_frames == 0)
            return err_fail(err, QVL_ERR_INVALID_ARG, "%s: a FRAMES item needs frames and n_frames ≥ 1 (n_frames %zu)",
                            label, it->n_frames);
        *kind = "frames";
        kb k = {.n = 0};
        kb_u64(&k, (uint64_t)it->n_frames);
        kb_f64(&k, it->fps);
        sha_kb(c, &k);
        for (size_t f = 0; f < it->n_frames; f++) TRY(c_pixels(c, &it->frames[f], label, err));
        return QVL_OK;
    }
    default:
        return err_fail(err, QVL_ERR_INVALID_ARG, "%s: unknown item kind %d", label, (int)it->kind);
    }
}

qvl_status qvl_item_key(const qvl_ctx *ctx, const qvl_item *item, const qvl_plan_params *params,
                        uint8_t digest[QVL_KEY_BYTES], char hex[QVL_KEY_HEX], qvl_error *err) {
    err_clear(err);
    if (hex) hex[0] = 0;
    if (!ctx || !item) return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_item_key: %s is NULL", ctx ? "item" : "ctx");
    qvl_item it;
    qvl_item_init(&it, sizeof it);
    TRY(params_take(&it, sizeof it, item, "qvl_item", err));
    qvl_plan_params pp;
    qvl_plan_params_init(&pp, sizeof pp);
    TRY(params_take(&pp, sizeof pp, params, "qvl_plan_params", err));
    if (pp.dtype != QVL_DTYPE_F32 && pp.dtype != QVL_DTYPE_F16 && pp.dtype != QVL_DTYPE_BF16)
        return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_item_key: unknown output dtype %d", (int)pp.dtype);
    if (pp.layout != QVL_OUTPUT_CONCAT && pp.layout != QVL_OUTPUT_SPLIT)
        return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_item_key: unknown output layout %d", (int)pp.layout);
    char label[256];
    if (it.label && *it.label) snprintf(label, sizeof label, "%s", it.label);
    else if (it.kind == QVL_ITEM_PATH && it.path && *it.path) snprintf(label, sizeof label, "%s", it.path);
    else snprintf(label, sizeof label, "item");
    /* the fingerprint was computed by the load; reading it writes nothing (the API takes a non-const model) */
    qvl_model *m = (qvl_model *)ctx_model(ctx);
    uint8_t fp[16];
    TRY(qvl_model_fingerprint(m, fp, NULL, err));
    item_settings base, s;
    TRY(plan_base_settings(m, &pp, &base, err));
    TRY(plan_item_settings(&base, &it, &s, err));
    struct sha256_ctx c, h;
    sha256_init(&c);
    const char *kind = "";
    TRY(c_content(&c, m, &it, label, &kind, err));
    uint8_t content[SHA256_DIGEST_SIZE];
    sha256_digest(&c, sizeof content, content);

    sha256_init(&h);
    field_str(&h, KEY_TAG);
    field(&h, fp, sizeof fp);
    field_str(&h, qvl_precision_name(m->be->precision)); /* "f32" or "bf16": the arithmetic of the contexts */
    field_u32(&h, (uint32_t)ctx_params(ctx)->pos_mode);
    field_str(&h, qvl_dtype_name(pp.dtype));
    field_str(&h, pp.layout == QVL_OUTPUT_SPLIT ? "split" : "concat");
    field_u32(&h, pp.deepstack ? 1u : 0u);
    field_str(&h, kind);
    if (strcmp(kind, "rows") == 0) field(&h, NULL, 0); /* rows are already preprocessed */
    else field_settings(&h, &s);
    field(&h, content, sizeof content);
    uint8_t d[SHA256_DIGEST_SIZE];
    sha256_digest(&h, sizeof d, d);
    if (digest) memcpy(digest, d, sizeof d);
    if (hex)
        for (size_t i = 0; i < sizeof d; i++) snprintf(hex + 2 * i, 3, "%02x", d[i]);
    return QVL_OK;
}
