/* tower.c — the encoder context and the forward pass of the vision tower.
 *
 *   pixels [S, K] ─ patch GEMM ─▶ x [S, H] ─ + pos ─▶ blocks ─▶ merger ─▶ merged [S/4, O]
 *                                                      └─ after block b_k: DeepStack merger k ─▶ ds_k [S/4, O]
 * A block: a = LN1(x); qkv = a·Wqkvᵀ + b; rotary on q, k; o = attention per segment; x += o·Wprojᵀ + b;
 * a = LN2(x); x += fc2(gelu_tanh(fc1(a))). Final merger: LN per token, view [S/4, 4H], fc1, erf GELU, fc2.
 * DeepStack merger: view [S/4, 4H], LN over 4H, fc1, erf GELU, fc2. Rows are merge-block-major, so the 2×2
 * shuffle is a plain reinterpretation of the row-major buffer.
 *
 * The activations live in the backend's memory (backend.h), which need not be the host's: this file computes
 * addresses in it but reads and writes it only through the backend's operations — the pixel rows and tables go in
 * by upload, the outputs come out by store_rows, taps by download. Where the backend's memory is the host's, the
 * caller's pixel rows and float32 outputs are handed to its operations as they are.
 * All scratch lives in two blocks (the backend's, and the host's for tables and taps) reserved for the largest
 * input seen; encode never allocates otherwise. */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "core/convert.h"
#include "core/error.h"
#include "core/limits.h"
#include "core/params.h"
#include "core/pool.h"
#include "model/model.h"
#include "model/tables.h"
#include "model/tower.h"

struct qvl_ctx {
    const qvl_model *m;
    const backend *be; /* the model's compute backend (kernel set + precision), fixed at creation */
    qvl_ctx_params p;
    qvl_limits lim;    /* the context's resource limits (p.limits taken; p.limits itself is not kept) */
    thread_pool *pool; /* this context's threads */
    qvl_tap_fn tap;
    void *tap_user;
    atomic_int cancel;       /* raised by qvl_ctx_cancel from any thread */
    qvl_cancel_fn cancel_fn; /* polled with the flag */
    void *cancel_user;
    /* scratch, reserved for cap_rows patch rows (with the output staging buffer when cap_stage) */
    size_t cap_rows;
    int cap_stage;
    void *block;   /* the backend's memory (be->alloc) */
    void *hblock;  /* the host's */
    size_t block_bytes, hblock_bytes;
    /* in the backend's memory */
    float *x;      /* [S, H] residual stream */
    float *a;      /* [S, H] normalized (also [S/4, 4H]); then the attention output, once qkv is computed */
    float *qkv;    /* [S, 3H] */
    float *pos;    /* [S, H] interpolated position table of the cached grids */
    float *mlp;    /* [MLP_ROWS, max(I, merger hidden)] MLP hidden of one row chunk; merger fc1 output; free
                    * during attention, which packs K and V there (be_attn.scratch) */
    size_t mlp_floats;
    float *cos_t;  /* [S, hd/2] */
    float *sin_t;
    float *stage;  /* [mlp_cap(S/m²), O] merger output before store_rows into a sink (when cap_stage, or the
                    * backend's memory is not the host's) */
    float *in;     /* [S, row_len] the pixel rows uploaded (when the backend's memory is not the host's) */
    void *gemm_ws, *attn_ws;
    /* in the host's; pos_h, cos_h, sin_h are pos, cos_t, sin_t where the backend's memory is the host's */
    float *pos_h, *cos_h, *sin_h; /* the tables as built, uploaded into pos, cos_t, sin_t */
    float *tap_h;  /* [S, H] a tapped activation downloaded (when the backend's memory is not the host's) */
    float *ds;     /* [S/4, O] DeepStack output when the caller wants only the tap (models with DeepStack) */
    void *taps;
    int max_k;     /* widest K of the model's Linears (gemm_ws is sized for it) */
    int *cu;       /* [S/m² + 1]: segment boundaries (a segment has at least m² rows) */
    /* The grids whose position and rotary tables are in pos / cos_t / sin_t (built once per grid list); room for
     * S/m² grids, as many as S rows can hold. */
    qvl_grid *tab_grids;
    size_t n_tab_grids;
    int tab_valid;
    qvl_profile prof;
};

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

void qvl_ctx_get_profile_sized(const qvl_ctx *c, qvl_profile *out, size_t size) {
    if (!out) return;
    memset(out, 0, size);
    if (c) memcpy(out, &c->prof, size < sizeof c->prof ? size : sizeof c->prof);
}

static void ctx_defaults(qvl_ctx_params *p) {
    memset(p, 0, sizeof *p);
    p->struct_size = sizeof *p;
    p->n_threads = 0;
    p->pos_mode = QVL_POS_CLOSED_FORM;
}

void qvl_ctx_params_init(qvl_ctx_params *p, size_t struct_size) {
    qvl_ctx_params d;
    ctx_defaults(&d);
    params_init(p, struct_size, &d, sizeof d);
}

qvl_status qvl_ctx_create(const qvl_model *m, const qvl_ctx_params *params, qvl_ctx **out, qvl_error *err) {
    err_clear(err);
    if (!out) return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_ctx_create: out is NULL");
    *out = NULL;
    if (!m) return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_ctx_create: model is NULL");
    if (m->describe_only)
        return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_ctx_create: the model was loaded with describe_only (its "
                        "weights were not packed); load it without describe_only to encode");
    qvl_ctx *c = calloc(1, sizeof *c);
    if (!c) return err_fail(err, QVL_ERR_NOMEM, "out of memory");
    c->m = m;
    c->be = m->be;
    ctx_defaults(&c->p);
    qvl_status ps = params_take(&c->p, sizeof c->p, params, "qvl_ctx_params", err);
    if (ps == QVL_OK) ps = limits_take(&c->lim, c->p.limits, "qvl_ctx_params.limits", err);
    c->p.limits = NULL; /* taken; the caller's may go */
    if (ps != QVL_OK) {
        free(c);
        return ps;
    }
    if (c->p.pos_mode != QVL_POS_CLOSED_FORM && c->p.pos_mode != QVL_POS_LINSPACE) {
        int mode = (int)c->p.pos_mode;
        free(c);
        return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_ctx_create: unknown pos_mode %d", mode);
    }
    if (c->p.n_threads < 0 || c->p.n_threads > QVL_MAX_THREADS) {
        int n = c->p.n_threads;
        free(c);
        return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_ctx_create: n_threads %d is outside 0..%d (0: one per CPU)", n,
                        QVL_MAX_THREADS);
    }
    qvl_status s = pool_create(&c->pool, c->p.n_threads, err);
    if (s != QVL_OK) {
        free(c);
        return s;
    }
    *out = c;
    return QVL_OK;
}

void qvl_ctx_free(qvl_ctx *c) {
    if (!c) return;
    pool_destroy(c->pool);
    c->be->release(c->be, c->block);
    free(c->hblock);
    free(c);
}

void qvl_ctx_cancel(qvl_ctx *c) {
    if (c) atomic_store(&c->cancel, 1);
}

void qvl_ctx_uncancel(qvl_ctx *c) {
    if (c) atomic_store(&c->cancel, 0);
}

void qvl_ctx_set_cancel_fn(qvl_ctx *c, qvl_cancel_fn fn, void *user) {
    if (!c) return;
    c->cancel_fn = fn;
    c->cancel_user = user;
}

int ctx_cancel_flag(qvl_ctx *c) { return atomic_load(&c->cancel); }

int ctx_cancelled(qvl_ctx *c) {
    if (atomic_load(&c->cancel)) return 1;
    if (c->cancel_fn && c->cancel_fn(c->cancel_user)) {
        atomic_store(&c->cancel, 1);
        return 1;
    }
    return 0;
}

thread_pool *ctx_pool(qvl_ctx *c) { return c->pool; }
const qvl_limits *ctx_limits(const qvl_ctx *c) { return &c->lim; }
const qvl_model *ctx_model(const qvl_ctx *c) { return c->m; }
const qvl_ctx_params *ctx_params(const qvl_ctx *c) { return &c->p; }

void qvl_ctx_set_tap(qvl_ctx *c, qvl_tap_fn fn, void *user) {
    if (!c) return;
    c->tap = fn;
    c->tap_user = user;
}

/* Carve 64-byte-aligned regions out of one allocation; with base NULL only measures. */
typedef struct carver {
    unsigned char *base;
    size_t used;
    int overflow;
} carver;

static void *carve(carver *cv, size_t count, size_t elem) {
    size_t bytes;
    if (size_mul_overflow(count, elem, &bytes) || size_add_overflow(bytes, 63, &bytes)) {
        cv->overflow = 1;
        return NULL;
    }
    bytes &= ~(size_t)63;
    void *p = cv->base ? cv->base + cv->used : NULL;
    if (size_add_overflow(cv->used, bytes, &cv->used)) cv->overflow = 1;
    return p;
}

/* The MLPs (block and mergers) run over row chunks of at most MLP_ROWS rows, so their hidden activations (the
 * widest tensor of the tower: I or 4H columns) take MLP_ROWS rows of memory, not S. Chunking M does not change a
 * GEMM's bits (its K blocking alone fixes the summation order). Chunks are multiples of the backend's M block
 * (m_align rows: 42 for the f32 and AVX512-BF16 sets, 128 for AMX), so no chunk adds partial tiles or streams the
 * weights more often than one call over all rows would: at most MLP_ROWS rounded down to m_align (882 rows for
 * 42, 896 for 128). (AMX's fc1, K <= 2304, runs 256-row blocks: an 896-row chunk ends in a half one.) */
enum { MLP_ROWS = 896 };

/* Rows per chunk for `rows` rows: as few chunks as the cap allows, near-even, each rounded up to `align`. */
static size_t mlp_step(size_t rows, size_t align) {
    const size_t cap = align <= MLP_ROWS ? MLP_ROWS / align * align : align;
    const size_t n = (rows + cap - 1) / cap;
    return n ? ((rows + n - 1) / n + align - 1) / align * align : 1;
}

/* The most rows a chunk takes for any row count up to S: what the chunk buffers are laid out for. Not mlp_step(S):
 * fewer rows can take a larger chunk (1008 rows go in two chunks of 504, 672 in one of 672), and the scratch laid
 * out for S serves every smaller encode. */
static size_t mlp_cap(size_t S, size_t align) {
    const size_t cap = align <= MLP_ROWS ? MLP_ROWS / align * align : align;
    const size_t up = S ? (S + align - 1) / align * align : align;
    return up < cap ? up : cap;
}

/* Widest MLP hidden layer of the model: block intermediate, merger and DeepStack mergers' fc1 outputs. */
static size_t mlp_width(const qvl_model *m) {
    size_t w = (size_t)m->cfg.intermediate;
    if ((size_t)m->merger.fc1.w.rows > w) w = (size_t)m->merger.fc1.w.rows;
    for (int d = 0; d < m->cfg.n_deepstack; d++)
        if ((size_t)m->deepstack[d].fc1.w.rows > w) w = (size_t)m->deepstack[d].fc1.w.rows;
    return w;
}

/* Widest K (input columns) of the model's Linears: what the GEMM workspace must hold. */
static int widest_k(const qvl_model *m) {
    int k = m->patch.w.cols;
    const linear *ls[] = {&m->merger.fc1, &m->merger.fc2};
    for (size_t i = 0; i < 2; i++) k = ls[i]->w.cols > k ? ls[i]->w.cols : k;
    for (int d = 0; d < m->cfg.n_deepstack; d++) {
        k = m->deepstack[d].fc1.w.cols > k ? m->deepstack[d].fc1.w.cols : k;
        k = m->deepstack[d].fc2.w.cols > k ? m->deepstack[d].fc2.w.cols : k;
    }
    for (int b = 0; b < m->cfg.depth; b++) {
        const block_w *bw = &m->blocks[b];
        const linear *bl[] = {&bw->qkv, &bw->proj, &bw->fc1, &bw->fc2};
        for (size_t i = 0; i < 4; i++) k = bl[i]->w.cols > k ? bl[i]->w.cols : k;
    }
    return k;
}

/* The scratch for S rows: the backend's memory from cv (activations, workspaces), the host's from hv (tables as
 * built, taps, segments). */
static void layout(qvl_ctx *c, carver *cv, carver *hv, size_t S, int stage) {
    const tower_config *k = &c->m->cfg;
    const int host = c->be->host_memory;
    size_t H = (size_t)k->hidden, mm = (size_t)k->merge * k->merge, half = S * (size_t)k->head_dim / 2;
    c->x = carve(cv, S * H, sizeof(float));
    c->a = carve(cv, S * H, sizeof(float));
    c->qkv = carve(cv, S * 3 * H, sizeof(float));
    c->pos = carve(cv, S * H, sizeof(float));
    c->mlp_floats = mlp_cap(S, (size_t)c->be->m_align) * mlp_width(c->m);
    c->mlp = carve(cv, c->mlp_floats, sizeof(float));
    c->cos_t = carve(cv, half, sizeof(float));
    c->sin_t = carve(cv, half, sizeof(float));
    c->max_k = widest_k(c->m);
    c->gemm_ws = carve(cv, c->be->linear_ws(pool_size(c->pool), c->max_k), 1);
    c->attn_ws = carve(cv, c->be->attention_ws(k->head_dim, pool_size(c->pool)), 1);
    c->stage = carve(cv, stage || !host ? mlp_cap(S / mm, (size_t)c->be->m_align) * (size_t)k->out_hidden : 0,
                     sizeof(float));
    c->in = carve(cv, host ? 0 : S * (size_t)k->row_len, sizeof(float));
    c->pos_h = host ? c->pos : carve(hv, S * H, sizeof(float));
    c->cos_h = host ? c->cos_t : carve(hv, half, sizeof(float));
    c->sin_h = host ? c->sin_t : carve(hv, half, sizeof(float));
    c->tap_h = carve(hv, host ? 0 : S * H, sizeof(float));
    c->ds = carve(hv, k->n_deepstack > 0 ? (S / mm) * (size_t)k->out_hidden : 0, sizeof(float));
    c->taps = carve(hv, TABLES_TAPS_BYTES, 1);
    c->cu = carve(hv, S / mm + 1, sizeof(int));
    c->tab_grids = carve(hv, S / mm + 1, sizeof(qvl_grid));
}

/* The bytes of both blocks for `rows` rows into *dev and *host; 0 on overflow. */
static int scratch_sizes(const qvl_ctx *c, size_t rows, int stage, size_t *dev, size_t *host) {
    qvl_ctx tmp; /* layout only measures through NULL bases; it reads m, be and pool and writes tmp's pointers */
    memset(&tmp, 0, sizeof tmp);
    tmp.m = c->m;
    tmp.be = c->be;
    tmp.pool = c->pool;
    carver cv = {0}, hv = {0};
    layout(&tmp, &cv, &hv, rows, stage);
    *dev = cv.used, *host = hv.used;
    return !cv.overflow && !hv.overflow && cv.used <= SIZE_MAX - hv.used;
}

size_t tower_scratch_bytes(const qvl_ctx *c, size_t rows, int stage) {
    size_t dev, host;
    return scratch_sizes(c, rows, stage, &dev, &host) ? dev + host : 0;
}

qvl_status tower_reserve(qvl_ctx *c, size_t max_rows, int stage, qvl_error *err) {
    stage = stage || !c->be->host_memory; /* such a backend's outputs always go through the staging buffer */
    if (c->block && max_rows <= c->cap_rows && (c->cap_stage || !stage)) return QVL_OK;
    if (c->block) { /* grow to cover both what is held and what is asked */
        if (c->cap_rows > max_rows) max_rows = c->cap_rows;
        stage = stage || c->cap_stage;
    }
    /* Measured on a copy: a failure leaves the ctx with the blocks and pointers it had. */
    size_t bytes, hbytes;
    if (!scratch_sizes(c, max_rows, stage, &bytes, &hbytes))
        return err_fail(err, QVL_ERR_LIMIT, "%zu patch rows: the scratch size overflows", max_rows);
    void *block = c->be->alloc(c->be, bytes), *hblock = aligned_alloc(64, hbytes ? hbytes : 64);
    if (!block || !hblock) {
        c->be->release(c->be, block);
        free(hblock);
        return err_fail(err, QVL_ERR_NOMEM, "cannot allocate %zu bytes of scratch for %zu patch rows", bytes + hbytes,
                        max_rows);
    }
    c->be->release(c->be, c->block);
    free(c->hblock);
    c->block = block, c->hblock = hblock;
    c->block_bytes = bytes, c->hblock_bytes = hbytes;
    c->tab_valid = 0; /* the tables lived in the old blocks */
    carver cv = {.base = block}, hv = {.base = hblock};
    layout(c, &cv, &hv, max_rows, stage);
    c->cap_rows = max_rows;
    c->cap_stage = stage;
    return QVL_OK;
}

qvl_status qvl_ctx_reserve(qvl_ctx *c, size_t max_rows, size_t max_segment, qvl_error *err) {
    err_clear(err);
    if (!c) return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_ctx_reserve: ctx is NULL");
    (void)max_segment; /* attention memory does not grow with the segment length */
    if (max_rows == 0) return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_ctx_reserve: max_rows is 0");
    return tower_reserve(c, max_rows, 0, err);
}

size_t qvl_ctx_scratch_size(const qvl_ctx *c) { return c && c->block ? c->block_bytes + c->hblock_bytes : 0; }

int qvl_ctx_threads(const qvl_ctx *c) { return c ? pool_size(c->pool) : 0; }

size_t qvl_patch_rows(const qvl_grid *grids, size_t n_grids) {
    size_t total = 0, n;
    if (!grids) return 0;
    for (size_t i = 0; i < n_grids; i++) {
        if (grids[i].t < 1 || grids[i].h < 1 || grids[i].w < 1) return 0;
        if (size_mul_overflow((size_t)grids[i].t, (size_t)grids[i].h, &n) || size_mul_overflow(n, (size_t)grids[i].w, &n) ||
            size_add_overflow(total, n, &total))
            return 0;
    }
    return total;
}

size_t qvl_merged_tokens(const qvl_grid *grids, size_t n_grids) { return qvl_patch_rows(grids, n_grids) / 4; }

qvl_status limits_check_grids(const qvl_limits *l, const qvl_grid *grids, size_t n_grids, qvl_error *err) {
    uint64_t total = 0;
    for (size_t i = 0; i < n_grids; i++) {
        const qvl_grid *g = &grids[i];
        if (g->t < 1 || g->h < 1 || g->w < 1)
            return err_fail(err, QVL_ERR_INVALID_ARG, "grid %zu (t=%d, h=%d, w=%d): t, h and w must be at least 1", i,
                            g->t, g->h, g->w);
        uint64_t n;
        if (__builtin_mul_overflow((uint64_t)g->t, (uint64_t)g->h, &n) || __builtin_mul_overflow(n, (uint64_t)g->w, &n))
            n = UINT64_MAX;
        if (n > l->max_item_patches)
            return limit_fail(err, "max_item_patches", l->max_item_patches,
                              "grid %zu (t=%d, h=%d, w=%d) is %llu patch rows, more than the %llu allowed per item", i,
                              g->t, g->h, g->w, (unsigned long long)n, (unsigned long long)l->max_item_patches);
        total += n; /* each n ≤ max_item_patches here; the sum is checked as it grows */
        if (total > l->max_call_patches)
            return limit_fail(err, "max_call_patches", l->max_call_patches,
                              "grids 0..%zu are %llu patch rows, more than the %llu allowed in one call", i,
                              (unsigned long long)total, (unsigned long long)l->max_call_patches);
    }
    return QVL_OK;
}

qvl_status qvl_limits_check_grids(const qvl_limits *limits, const qvl_grid *grids, size_t n_grids, qvl_error *err) {
    err_clear(err);
    if (!grids && n_grids) return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_limits_check_grids: grids is NULL");
    qvl_limits l;
    TRY(limits_take(&l, limits, "qvl_limits_check_grids", err));
    return limits_check_grids(&l, grids, n_grids, err);
}

qvl_status tower_check_grid(int merge, const qvl_grid *g, const char *label, qvl_error *err) {
    if (merge < 1) /* a caller's bug, not the grid's: refused before the divisions below */
        return err_fail(err, QVL_ERR_INVALID_ARG, "%s: merge size %d (want at least 1)", label, merge);
    if (g->t < 1 || g->h < merge || g->w < merge || g->h % merge || g->w % merge || g->h > MAX_GRID_SIDE ||
        g->w > MAX_GRID_SIDE)
        return err_fail(err, QVL_ERR_INVALID_ARG, "%s (t=%d, h=%d, w=%d): t must be ≥ 1 and h, w positive multiples "
                        "of the merge size %d, at most %d", label, g->t, g->h, g->w, merge, MAX_GRID_SIDE);
    return QVL_OK;
}

/* Validate grids against the model and the row count; reserve; fill the segment table (*n_seg_out segments). */
static qvl_status prepare(qvl_ctx *c, size_t n_rows, const qvl_grid *grids, size_t n_grids, int stage,
                          size_t *n_seg_out, qvl_error *err) {
    if (!grids || n_grids == 0) return err_fail(err, QVL_ERR_INVALID_ARG, "no grids given");
    size_t n_seg = 0;
    for (size_t i = 0; i < n_grids; i++) {
        char label[32];
        snprintf(label, sizeof label, "grid %zu", i);
        TRY(tower_check_grid(c->m->cfg.merge, &grids[i], label, err));
        if (size_add_overflow(n_seg, (size_t)grids[i].t, &n_seg))
            return err_fail(err, QVL_ERR_LIMIT, "too many segments");
    }
    TRY(limits_check_grids(&c->lim, grids, n_grids, err)); /* before the scratch is sized for them */
    size_t S = qvl_patch_rows(grids, n_grids);
    if (S == 0 || S > (size_t)INT32_MAX) return err_fail(err, QVL_ERR_LIMIT, "patch row count overflows");
    if (S != n_rows)
        return err_fail(err, QVL_ERR_INVALID_ARG, "%zu pixel rows given, the grids need %zu", n_rows, S);
    TRY(tower_reserve(c, S, stage, err)); /* the scratch depends on the rows alone; a no-op once reserved */
    size_t s = 0, row = 0;
    c->cu[0] = 0;
    for (size_t i = 0; i < n_grids; i++)
        for (int t = 0; t < grids[i].t; t++) {
            row += (size_t)grids[i].h * (size_t)grids[i].w;
            c->cu[++s] = (int)row;
        }
    *n_seg_out = n_seg;
    return QVL_OK;
}

/* Build the position and rotary tables for `grids` unless the last call used the same list. */
static void build_tables(qvl_ctx *c, const qvl_grid *grids, size_t n_grids, int want_pos) {
    int same = c->tab_valid && c->n_tab_grids == n_grids &&
               memcmp(c->tab_grids, grids, n_grids * sizeof *grids) == 0 && (c->tab_valid == 2 || !want_pos);
    if (same) return;
    memcpy(c->tab_grids, grids, n_grids * sizeof *grids);
    c->n_tab_grids = n_grids;
    const tower_config *k = &c->m->cfg;
    const size_t S = qvl_patch_rows(grids, n_grids), half = S * (size_t)k->head_dim / 2;
    if (want_pos) {
        tables_pos(c->m, c->p.pos_mode, grids, n_grids, c->pos_h, c->taps, c->pool);
        c->be->upload(c->be, c->pos, c->pos_h, S * (size_t)k->hidden * sizeof(float));
    }
    tables_rope(k, grids, n_grids, c->cos_h, c->sin_h);
    c->be->upload(c->be, c->cos_t, c->cos_h, half * sizeof(float));
    c->be->upload(c->be, c->sin_t, c->sin_h, half * sizeof(float));
    c->tab_valid = want_pos ? 2 : 1;
}

/* The tap: host rows as they are. */
static void tap(qvl_ctx *c, const char *name, const float *data, size_t rows, size_t cols) {
    if (c->tap) c->tap(c->tap_user, name, data, rows, cols);
}

/* The tap of [rows, cols] contiguous rows in the backend's memory: downloaded unless that is the host's. */
static void tap_be(qvl_ctx *c, const char *name, const float *data, size_t rows, size_t cols) {
    if (!c->tap) return;
    if (!c->be->host_memory) {
        c->be->download(c->be, c->tap_h, data, rows * cols * sizeof(float));
        data = c->tap_h;
    }
    c->tap(c->tap_user, name, data, rows, cols);
}

/* C (=|+=) act(A·Wᵀ + b), or with A_packed / C_packed (not NULL) the input read from / the result written into the
 * backend's own operand layout instead of the f32 rows A / C (backend.h, linear_packed). */
static void count_linear(qvl_ctx *c, const linear *l, size_t M) { c->prof.gemm_flops += 2.0 * (double)M * l->w.rows * l->w.cols; }

static void linear_io(qvl_ctx *c, const linear *l, const float *A, size_t lda, const void *A_packed, size_t M,
                      float *C, size_t ldc, void *C_packed, int accumulate, be_act act) {
    const backend *be = c->be;
    const float *bias = model_vec(c->m, l->b);
    if (A_packed || C_packed)
        be->linear_packed(be, &l->packed, A, lda, A_packed, (int)M, bias, C, ldc, C_packed, accumulate, act,
                          c->gemm_ws, c->max_k, c->pool);
    else
        be->linear(be, &l->packed, A, lda, (int)M, bias, C, ldc, accumulate, act, c->gemm_ws, c->max_k, c->pool);
    count_linear(c, l, M);
}

static void linear_run(qvl_ctx *c, const linear *l, const float *A, size_t lda, size_t M, float *C, size_t ldc,
                       int accumulate, be_act act) {
    linear_io(c, l, A, lda, NULL, M, C, ldc, NULL, accumulate, act);
}

/* out (=|+=) fc2(act(fc1(in))) over `rows` rows, in chunks of mlp_step rows through c->mlp. Where the backend
 * has its own operand layout and fc2 rounds its input to bf16 (the blocks' fc2 past the first DeepStack tap), fc1
 * writes the hidden rows in that layout and fc2 reads them as they are: the same bits as through f32 (the layout
 * holds exactly what fc2 would pack), without the f32 round trip and fc2's packing. */
static void mlp_rows(qvl_ctx *c, const linear *fc1, const linear *fc2, be_act act, const float *in,
                     size_t ld_in, const void *in_packed, size_t rows, float *out, size_t ld_out, int accumulate) {
    const backend *be = c->be;
    const size_t hid = (size_t)fc1->w.rows, step = mlp_step(rows, (size_t)be->m_align);
    const int handover = be->linear_packed && fc1->packed.arith != BE_ARITH_F32 && fc2->packed.arith == BE_ARITH_BF16 &&
                         be->packed_size((int)step, (int)hid) <= c->mlp_floats * sizeof(float);
    void *hp = handover ? c->mlp : NULL; /* the hidden rows in the backend's layout */
    for (size_t r = 0; r < rows; r += step) {
        const size_t m = rows - r < step ? rows - r : step;
        const void *ap = in_packed ? (const unsigned char *)in_packed + be->packed_size((int)r, fc1->w.cols) : NULL;
        linear_io(c, fc1, in + r * ld_in, ld_in, ap, m, c->mlp, hid, hp, 0, act);
        linear_io(c, fc2, c->mlp, hid, hp, m, out + r * ld_out, ld_out, NULL, accumulate, BE_ACT_NONE);
    }
}

/* Merger MLP (fc1 → erf GELU → fc2) over in [rows, 4H] (row stride ld_in) into a sink target (host memory):
 * straight into it when it is float32 and the backend's memory is the host's, else through the staging buffer
 * and the backend's store_rows. */
static void merger_to(qvl_ctx *c, const merger_w *mw, const float *in, size_t ld_in, size_t rows, void *dst,
                      size_t ld, qvl_dtype dt) {
    const backend *be = c->be;
    if (dt == QVL_DTYPE_F32 && be->host_memory) {
        mlp_rows(c, &mw->fc1, &mw->fc2, BE_ACT_GELU_ERF, in, ld_in, NULL, rows, dst, ld, 0);
        return;
    }
    const size_t hid = (size_t)mw->fc1.w.rows, O = (size_t)mw->fc2.w.rows, step = mlp_step(rows, (size_t)be->m_align),
                 es = dt == QVL_DTYPE_F32 ? sizeof(float) : sizeof(uint16_t);
    for (size_t r = 0; r < rows; r += step) {
        const size_t m = rows - r < step ? rows - r : step;
        linear_run(c, &mw->fc1, in + r * ld_in, ld_in, m, c->mlp, hid, 0, BE_ACT_GELU_ERF);
        linear_run(c, &mw->fc2, c->mlp, hid, m, c->stage, O, 0, BE_ACT_NONE);
        be->store_rows(be, c->stage, O, m, O, (unsigned char *)dst + r * ld * es, ld, dt, c->pool);
    }
}

/* Whether the LayerNorm feeding `l` (all S rows of c->a) can be written in the backend's operand layout: l rounds
 * its input to bf16 and the layout fits in c->a. */
static int ln_hands_over(const qvl_ctx *c, const linear *l, size_t S) {
    const backend *be = c->be;
    return be->layernorm_packed && be->linear_packed && l->packed.arith == BE_ARITH_BF16 &&
           be->packed_size((int)S, l->w.cols) <= S * (size_t)c->m->cfg.hidden * sizeof(float);
}

/* LayerNorm of the residual stream into c->a, in the backend's operand layout when `packed`. */
static void block_norm(qvl_ctx *c, const layernorm *n, size_t S, int packed) {
    const size_t H = (size_t)c->m->cfg.hidden;
    const float *w = model_vec(c->m, n->w), *b = model_vec(c->m, n->b);
    if (packed)
        c->be->layernorm_packed(c->be, c->x, H, c->a, S, H, w, b, c->m->cfg.ln_eps, c->gemm_ws, c->pool);
    else
        c->be->layernorm(c->be, c->x, H, c->a, H, S, H, w, b, c->m->cfg.ln_eps, c->pool);
}

static void block_forward(qvl_ctx *c, const block_w *b, size_t S, size_t n_seg) {
    const tower_config *k = &c->m->cfg;
    const backend *be = c->be;
    size_t H = (size_t)k->hidden;
    qvl_profile *pf = &c->prof;
    /* the LayerNorms hand their rows to qkv and fc1 in the backend's layout where those round them to bf16 (the
     * same bits: the layout holds exactly what the GEMM would pack from f32) */
    const int p1 = ln_hands_over(c, &b->qkv, S), p2 = ln_hands_over(c, &b->fc1, S);
    /* where the backend packed qkv for qkv_rope, the rotary embedding is in its epilogue and Q, K, V go to the
     * attention in the backend's operand (c->qkv), and the attention hands its output to proj in the GEMM's layout
     * where proj rounds it to bf16 (c->a: LN1's rows are consumed by then) */
    const int fused = b->qkv.packed.rope_hd != 0 && be->qkv_op_size((int)S, 3 * k->hidden) <= S * 3 * H * sizeof(float);
    const int p3 = fused && be->linear_packed && b->proj.packed.arith == BE_ARITH_BF16 &&
                   be->packed_size((int)S, k->hidden) <= S * H * sizeof(float);
    double t0 = now_ms(), t1;
    block_norm(c, &b->norm1, S, p1);
    t1 = now_ms(), pf->norm_ms += t1 - t0, t0 = t1;
    if (fused) {
        be->qkv_rope(be, &b->qkv.packed, c->a, H, p1 ? c->a : NULL, (int)S, model_vec(c->m, b->qkv.b), c->cos_t,
                     c->sin_t, c->qkv, c->gemm_ws, c->max_k, c->pool);
        count_linear(c, &b->qkv, S);
        t1 = now_ms(), pf->gemm_ms += t1 - t0, t0 = t1;
    } else {
        linear_io(c, &b->qkv, c->a, H, p1 ? c->a : NULL, S, c->qkv, 3 * H, NULL, 0, BE_ACT_NONE);
        t1 = now_ms(), pf->gemm_ms += t1 - t0, t0 = t1;
        be->rope(be, c->qkv, 3 * H, S, k->heads, k->head_dim, c->cos_t, c->sin_t, c->pool);
        t1 = now_ms(), pf->pos_rope_ms += t1 - t0, t0 = t1;
    }
    be_attn at = {.q = c->qkv, .k = c->qkv + H, .v = c->qkv + 2 * H, .ldq = 3 * H, .ldk = 3 * H, .ldv = 3 * H,
                  .out = c->a, .ldo = H, .n_heads = k->heads, .head_dim = k->head_dim, .cu = c->cu,
                  .n_seg = (int)n_seg, .scale = 1.0f / sqrtf((float)k->head_dim), .scratch = c->mlp,
                  .scratch_bytes = c->mlp_floats * sizeof(float), .qkv_op = fused ? c->qkv : NULL,
                  .out_packed = p3 ? c->a : NULL};
    be->attention(be, &at, c->attn_ws, c->pool);
    t1 = now_ms(), pf->attention_ms += t1 - t0, t0 = t1;
    linear_io(c, &b->proj, c->a, H, p3 ? c->a : NULL, S, c->x, H, NULL, 1, BE_ACT_NONE);
    t1 = now_ms(), pf->gemm_ms += t1 - t0, t0 = t1;
    block_norm(c, &b->norm2, S, p2);
    t1 = now_ms(), pf->norm_ms += t1 - t0, t0 = t1;
    mlp_rows(c, &b->fc1, &b->fc2, k->act == ACT_GELU_TANH ? BE_ACT_GELU_TANH : BE_ACT_GELU_ERF, c->a, H,
             p2 ? c->a : NULL, S, c->x, H, 1);
    pf->gemm_ms += now_ms() - t0;
}

/* Merger target `target` (0: the final merger, 1 + d: DeepStack d) for every sink that wants it, from the
 * normalized rows in c->a ([T, 4H]). Taps the result when a sink holds it as contiguous float32. */
static void mergers_out(qvl_ctx *c, const merger_w *mw, int target, const tower_sink *sinks, size_t n_sinks,
                        const char *tap_name) {
    const size_t H4 = (size_t)mw->fc1.w.cols, O = (size_t)mw->fc2.w.rows;
    for (size_t i = 0; i < n_sinks; i++) {
        const tower_sink *k = &sinks[i];
        if (!k->dst[target]) continue;
        merger_to(c, mw, c->a + k->t0 * H4, H4, k->n, k->dst[target], k->ld, k->dtype);
        if (k->dtype == QVL_DTYPE_F32 && k->ld == O) tap(c, tap_name, k->dst[target], k->n, O);
    }
}

static int sinks_want(const tower_sink *sinks, size_t n_sinks, int target) {
    for (size_t i = 0; i < n_sinks; i++)
        if (sinks[i].dst[target]) return 1;
    return 0;
}

/* Blocks from c->x (rotary tables and segments prepared), DeepStack features, and the merger into the sinks.
 * Checks for cancellation before every block and merger. */
static qvl_status run_chain(qvl_ctx *c, size_t S, size_t n_seg, const tower_sink *sinks, size_t n_sinks,
                            qvl_error *err) {
    const tower_config *k = &c->m->cfg;
    size_t H = (size_t)k->hidden, mm = (size_t)k->merge * k->merge, T = S / mm;
    char name[32];
    double seg_flops = 0; /* attention FLOPs of one block: QKᵀ and P·V per segment */
    for (size_t s = 0; s < n_seg; s++) {
        const double n = (double)(c->cu[s + 1] - c->cu[s]);
        seg_flops += 4.0 * n * n * k->head_dim * k->heads;
    }
    for (int i = 0; i < k->depth; i++) {
        if (ctx_cancelled(c)) return err_fail(err, QVL_ERR_CANCELLED, "encode cancelled before block %d of %d", i, k->depth);
        block_forward(c, &c->m->blocks[i], S, n_seg);
        c->prof.attention_flops += seg_flops;
        snprintf(name, sizeof name, "blk%d", i);
        tap_be(c, name, c->x, S, H);
        for (int d = 0; d < k->n_deepstack; d++) {
            if (k->deepstack_index[d] != i || !sinks_want(sinks, n_sinks, 1 + d)) continue;
            if (ctx_cancelled(c)) return err_fail(err, QVL_ERR_CANCELLED, "encode cancelled before DeepStack merger %d", d);
            const merger_w *mw = &c->m->deepstack[d];
            double t0 = now_ms();
            c->be->layernorm(c->be, c->x, H * mm, c->a, H * mm, T, H * mm, model_vec(c->m, mw->norm.w),
                             model_vec(c->m, mw->norm.b), k->ln_eps, c->pool);
            snprintf(name, sizeof name, "deepstack%d", d);
            mergers_out(c, mw, 1 + d, sinks, n_sinks, name);
            c->prof.merger_ms += now_ms() - t0;
        }
    }
    if (!sinks_want(sinks, n_sinks, 0)) return QVL_OK;
    if (ctx_cancelled(c)) return err_fail(err, QVL_ERR_CANCELLED, "encode cancelled before the merger");
    const merger_w *mw = &c->m->merger;
    double t0 = now_ms();
    c->be->layernorm(c->be, c->x, H, c->a, H, S, H, model_vec(c->m, mw->norm.w), model_vec(c->m, mw->norm.b),
                     k->ln_eps, c->pool);
    mergers_out(c, mw, 0, sinks, n_sinks, "merged");
    c->prof.merger_ms += now_ms() - t0;
    return QVL_OK;
}

/* An encode's status `s` after its backend operations: the backend's own failure where s is QVL_OK, and the
 * backend's state cleared either way (a failure left behind would be the next call's). */
static qvl_status backend_check(const backend *be, qvl_status s, qvl_error *err) {
    if (!be->status) return s;
    qvl_error ignored;
    err_clear(&ignored);
    const qvl_status b = be->status(be, s == QVL_OK ? err : &ignored);
    return s == QVL_OK ? b : s;
}

qvl_status tower_encode(qvl_ctx *c, const float *pixels, const float *const *item_rows, size_t n_rows,
                        const qvl_grid *grids, size_t n_grids, const tower_sink *sinks, size_t n_sinks,
                        qvl_error *err) {
    int stage = 0;
    for (size_t i = 0; i < n_sinks; i++) stage |= sinks[i].dtype != QVL_DTYPE_F32;
    size_t n_seg;
    TRY(prepare(c, n_rows, grids, n_grids, stage, &n_seg, err));
    const tower_config *k = &c->m->cfg;
    if (pixels) TRY(rows_finite(pixels, n_rows, (size_t)k->row_len, "qvl_encode: pixels", err));
    size_t S = n_rows, H = (size_t)k->hidden;

    memset(&c->prof, 0, sizeof c->prof);
    if (ctx_cancelled(c)) return err_fail(err, QVL_ERR_CANCELLED, "encode cancelled before it started");
    double start = now_ms(), t0 = start;
    const size_t RL = (size_t)k->row_len;
    const backend *be = c->be;
    if (!be->host_memory) { /* the rows into the backend's memory, then one GEMM over them */
        size_t r = 0;
        for (size_t i = 0; i < (pixels ? 1 : n_grids); i++) {
            const size_t n = pixels ? S : qvl_patch_rows(&grids[i], 1);
            be->upload(be, c->in + r * RL, pixels ? pixels : item_rows[i], n * RL * sizeof(float));
            r += n;
        }
        linear_run(c, &c->m->patch, c->in, RL, S, c->x, H, 0, BE_ACT_NONE);
    } else if (pixels) {
        linear_run(c, &c->m->patch, pixels, RL, S, c->x, H, 0, BE_ACT_NONE);
    } else { /* each item's rows where they are (the patch GEMM's bits do not depend on how M is split) */
        size_t r = 0;
        for (size_t i = 0; i < n_grids; i++) {
            const size_t n = qvl_patch_rows(&grids[i], 1);
            linear_run(c, &c->m->patch, item_rows[i], RL, n, c->x + r * H, H, 0, BE_ACT_NONE);
            r += n;
        }
    }
    c->prof.patch_ms = now_ms() - t0;
    tap_be(c, "patch", c->x, S, H);
    t0 = now_ms();
    build_tables(c, grids, n_grids, 1);
    tap(c, "pos", c->pos_h, S, H);
    be->add_rows(be, c->x, H, c->pos, H, S, H, c->pool);
    c->prof.pos_rope_ms += now_ms() - t0;
    qvl_status s = backend_check(be, run_chain(c, S, n_seg, sinks, n_sinks, err), err);
    c->prof.total_ms = now_ms() - start;
    return s;
}

qvl_status rows_finite(const float *rows, size_t n_rows, size_t cols, const char *label, qvl_error *err) {
    size_t n;
    if (size_mul_overflow(n_rows, cols, &n)) return err_fail(err, QVL_ERR_LIMIT, "%s: the row count overflows", label);
    const size_t i = first_nonfinite_f32(rows, n);
    if (i == n) return QVL_OK;
    return err_fail(err, QVL_ERR_NONFINITE, "%s: row %zu, column %zu is %s; pixel rows must be finite", label,
                    i / cols, i % cols, nonfinite_name(rows[i]));
}

/* The outputs of an encode: [rows, cols] float32 (row stride ld) must be finite; NaN weights or an overflow in the
 * tower would otherwise return NaN embeddings as a success. */
static qvl_status out_finite(const float *out, size_t rows, size_t cols, size_t ld, const char *what, qvl_error *err) {
    for (size_t r = 0; r < rows; r++) {
        const size_t j = first_nonfinite_f32(out + r * ld, cols);
        if (j < cols)
            return err_fail(err, QVL_ERR_NONFINITE, "qvl_encode: the tower's output is not finite: %s token %zu, "
                            "column %zu is %s (non-finite weights, or activations past the float32 range)", what, r, j,
                            nonfinite_name(out[r * ld + j]));
    }
    return QVL_OK;
}

qvl_status qvl_encode(qvl_ctx *c, const float *pixels, size_t n_rows, const qvl_grid *grids, size_t n_grids,
                      float *merged, float *const *deepstack, qvl_error *err) {
    err_clear(err);
    if (!c || !pixels || !merged)
        return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_encode: %s is NULL", !c ? "ctx" : !pixels ? "pixels" : "merged");
    const tower_config *k = &c->m->cfg;
    tower_sink sink = {.t0 = 0, .n = qvl_patch_rows(grids, n_grids) / ((size_t)k->merge * k->merge),
                       .ld = (size_t)k->out_hidden, .dtype = QVL_DTYPE_F32};
    sink.dst[0] = merged;
    /* A DeepStack feature the caller skips still reaches the tap, through c->ds: reserve first, so that c->ds
     * exists on a context's first encode (before, it was NULL then, and those features were silently skipped). */
    if (c->tap && k->n_deepstack > 0 && sink.n > 0 && qvl_patch_rows(grids, n_grids) == n_rows) {
        TRY(limits_check_grids(&c->lim, grids, n_grids, err)); /* before any scratch is sized for them */
        TRY(tower_reserve(c, n_rows, 0, err));
    }
    for (int d = 0; d < k->n_deepstack; d++)
        sink.dst[1 + d] = deepstack && deepstack[d] ? deepstack[d] : c->tap ? c->ds : NULL;
    TRY(tower_encode(c, pixels, NULL, n_rows, grids, n_grids, &sink, 1, err));
    const size_t O = (size_t)k->out_hidden;
    TRY(out_finite(merged, sink.n, O, O, "merged", err));
    for (int d = 0; d < k->n_deepstack; d++)
        if (deepstack && deepstack[d]) {
            char what[32];
            snprintf(what, sizeof what, "deepstack%d", d);
            TRY(out_finite(deepstack[d], sink.n, O, O, what, err));
        }
    return QVL_OK;
}

qvl_status qvl_run_blocks(qvl_ctx *c, const float *hidden, size_t n_rows, const qvl_grid *grids, size_t n_grids,
                          int through_merger, float *out, qvl_error *err) {
    err_clear(err);
    if (!c || !hidden || !out)
        return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_run_blocks: %s is NULL", !c ? "ctx" : !hidden ? "hidden" : "out");
    size_t n_seg;
    TRY(prepare(c, n_rows, grids, n_grids, 0, &n_seg, err));
    const tower_config *k = &c->m->cfg;
    size_t S = n_rows, H = (size_t)k->hidden;
    memset(&c->prof, 0, sizeof c->prof);
    double start = now_ms();
    c->be->upload(c->be, c->x, hidden, S * H * sizeof(float));
    build_tables(c, grids, n_grids, 0);
    tower_sink sink = {.t0 = 0, .n = S / ((size_t)k->merge * k->merge), .ld = (size_t)k->out_hidden,
                       .dtype = QVL_DTYPE_F32};
    sink.dst[0] = through_merger ? out : NULL;
    for (int d = 0; d < k->n_deepstack; d++) sink.dst[1 + d] = c->tap ? c->ds : NULL;
    qvl_status s = run_chain(c, S, n_seg, &sink, 1, err);
    c->prof.total_ms = now_ms() - start;
    if (s == QVL_OK && !through_merger) c->be->download(c->be, out, c->x, S * H * sizeof(float));
    s = backend_check(c->be, s, err);
    return s;
}
