/* tower.c — the encoder context and the forward pass of the vision tower.
 *
 *   pixels [S, K] ─ patch GEMM ─▶ x [S, H] ─ + pos ─▶ blocks ─▶ merger ─▶ merged [S/4, O]
 *                                                      └─ after block b_k: DeepStack merger k ─▶ ds_k [S/4, O]
 * A block: a = LN1(x); qkv = a·Wqkvᵀ + b; rotary on q, k; o = attention per segment; x += o·Wprojᵀ + b;
 * a = LN2(x); x += fc2(gelu_tanh(fc1(a))). Final merger: LN per token, view [S/4, 4H], fc1, erf GELU, fc2.
 * DeepStack merger: view [S/4, 4H], LN over 4H, fc1, erf GELU, fc2. Rows are merge-block-major, so the 2×2
 * shuffle is a plain reinterpretation of the row-major buffer.
 * All scratch lives in one block reserved for the largest input seen; encode never allocates otherwise. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "core/params.h"
#include "core/pool.h"
#include "cpu/attention.h"
#include "cpu/gemm.h"
#include "cpu/ops.h"
#include "model/model.h"
#include "model/tables.h"

struct qvl_ctx {
    const qvl_model *m;
    qvl_ctx_params p;
    thread_pool *pool; /* this context's threads */
    qvl_tap_fn tap;
    void *tap_user;
    /* scratch, reserved for cap_rows patch rows */
    size_t cap_rows;
    void *block;
    size_t block_bytes;
    float *x;      /* [S, H] residual stream */
    float *a;      /* [S, H] normalized (also [S/4, 4H]); then the attention output, once qkv is computed */
    float *qkv;    /* [S, 3H] */
    float *pos;    /* [S, H] interpolated position table of the cached grids */
    float *mlp;    /* [MLP_ROWS, max(I, merger hidden)] MLP hidden of one row chunk; merger fc1 output */
    float *ds;     /* [S/4, O] DeepStack output when the caller wants only the tap (models with DeepStack) */
    float *cos_t;  /* [S, hd/2] */
    float *sin_t;
    void *gemm_ws, *attn_ws, *taps;
    int *cu;       /* [segments + 1] */
    size_t cap_cu;
    /* The grids whose position and rotary tables are in pos / cos_t / sin_t (built once per grid list). */
    qvl_grid *tab_grids;
    size_t n_tab_grids, cap_tab_grids;
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
    qvl_ctx *c = calloc(1, sizeof *c);
    if (!c) return err_fail(err, QVL_ERR_NOMEM, "out of memory");
    c->m = m;
    ctx_defaults(&c->p);
    qvl_status ps = params_take(&c->p, sizeof c->p, params, "qvl_ctx_params", err);
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
    free(c->block);
    free(c->cu);
    free(c->tab_grids);
    free(c);
}

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
 * GEMM's bits (its K blocking alone fixes the summation order). Chunks are multiples of 42 rows (the AVX-512
 * GEMM's M block, 3 of its 14-row tiles; 7 of the AVX2 6-row tiles), so no chunk adds partial tiles or streams the
 * weights more often than one call over all rows would. */
enum { MLP_ROWS = 882, MLP_ALIGN = 42 };

/* Rows per chunk for `rows` rows: near-even chunks of at most MLP_ROWS, rounded up to MLP_ALIGN. */
static size_t mlp_step(size_t rows) {
    const size_t n = (rows + MLP_ROWS - 1) / MLP_ROWS;
    const size_t step = n ? ((rows + n - 1) / n + MLP_ALIGN - 1) / MLP_ALIGN * MLP_ALIGN : 1;
    return step < MLP_ROWS ? step : MLP_ROWS;
}

/* Widest MLP hidden layer of the model: block intermediate, merger and DeepStack mergers' fc1 outputs. */
static size_t mlp_width(const qvl_model *m) {
    size_t w = (size_t)m->cfg.intermediate;
    if ((size_t)m->merger.fc1.w.rows > w) w = (size_t)m->merger.fc1.w.rows;
    for (int d = 0; d < m->cfg.n_deepstack; d++)
        if ((size_t)m->deepstack[d].fc1.w.rows > w) w = (size_t)m->deepstack[d].fc1.w.rows;
    return w;
}

static void layout(qvl_ctx *c, carver *cv, size_t S) {
    const tower_config *k = &c->m->cfg;
    size_t H = (size_t)k->hidden, mm = (size_t)k->merge * k->merge;
    c->x = carve(cv, S * H, sizeof(float));
    c->a = carve(cv, S * H, sizeof(float));
    c->qkv = carve(cv, S * 3 * H, sizeof(float));
    c->pos = carve(cv, S * H, sizeof(float));
    c->mlp = carve(cv, mlp_step(S) * mlp_width(c->m), sizeof(float));
    c->ds = carve(cv, k->n_deepstack > 0 ? (S / mm) * (size_t)k->out_hidden : 0, sizeof(float));
    c->cos_t = carve(cv, S * (size_t)k->head_dim / 2, sizeof(float));
    c->sin_t = carve(cv, S * (size_t)k->head_dim / 2, sizeof(float));
    c->gemm_ws = carve(cv, gemm_workspace_size(pool_size(c->pool)), 1);
    c->attn_ws = carve(cv, attn_workspace_size(k->head_dim, pool_size(c->pool)), 1);
    c->taps = carve(cv, TABLES_TAPS_BYTES, 1);
}

qvl_status qvl_ctx_reserve(qvl_ctx *c, size_t max_rows, size_t max_segment, qvl_error *err) {
    if (!c) return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_ctx_reserve: ctx is NULL");
    (void)max_segment; /* attention memory does not grow with the segment length */
    if (max_rows <= c->cap_rows && c->block) return QVL_OK;
    carver cv = {0};
    layout(c, &cv, max_rows);
    if (cv.overflow) return err_fail(err, QVL_ERR_LIMIT, "%zu rows: scratch size overflows", max_rows);
    void *block = aligned_alloc(64, cv.used);
    if (!block)
        return err_fail(err, QVL_ERR_NOMEM, "cannot allocate %zu bytes of scratch for %zu rows", cv.used, max_rows);
    free(c->block);
    c->block = block;
    c->block_bytes = cv.used;
    c->tab_valid = 0; /* the tables lived in the old block */
    cv = (carver){.base = block};
    layout(c, &cv, max_rows);
    c->cap_rows = max_rows;
    return QVL_OK;
}

size_t qvl_ctx_scratch_size(const qvl_ctx *c) { return c && c->block ? c->block_bytes : 0; }

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

/* Validate grids against the model and the row count; fill the segment table (*n_seg_out segments). */
static qvl_status prepare(qvl_ctx *c, size_t n_rows, const qvl_grid *grids, size_t n_grids, size_t *n_seg_out,
                          qvl_error *err) {
    const tower_config *k = &c->m->cfg;
    if (!grids || n_grids == 0) return err_fail(err, QVL_ERR_INVALID_ARG, "no grids given");
    size_t n_seg = 0;
    for (size_t i = 0; i < n_grids; i++) {
        const qvl_grid *g = &grids[i];
        if (g->t < 1 || g->h < k->merge || g->w < k->merge || g->h % k->merge || g->w % k->merge ||
            g->h > MAX_GRID_SIDE || g->w > MAX_GRID_SIDE)
            return err_fail(err, QVL_ERR_INVALID_ARG, "grid %zu (t=%d, h=%d, w=%d): t must be ≥ 1 and h, w positive "
                            "multiples of the merge size %d, at most %d", i, g->t, g->h, g->w, k->merge,
                            MAX_GRID_SIDE);
        if (size_add_overflow(n_seg, (size_t)g->t, &n_seg)) return err_fail(err, QVL_ERR_LIMIT, "too many segments");
    }
    size_t S = qvl_patch_rows(grids, n_grids);
    if (S == 0 || S > (size_t)INT32_MAX) return err_fail(err, QVL_ERR_LIMIT, "patch row count overflows");
    if (S != n_rows)
        return err_fail(err, QVL_ERR_INVALID_ARG, "%zu pixel rows given, the grids need %zu", n_rows, S);
    TRY(qvl_ctx_reserve(c, S, 0, err)); /* the scratch depends on the rows alone */
    if (n_seg + 1 > c->cap_cu) {
        int *cu = realloc(c->cu, (n_seg + 1) * sizeof *cu);
        if (!cu) return err_fail(err, QVL_ERR_NOMEM, "out of memory for %zu segments", n_seg);
        c->cu = cu;
        c->cap_cu = n_seg + 1;
    }
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
static qvl_status build_tables(qvl_ctx *c, const qvl_grid *grids, size_t n_grids, int want_pos, qvl_error *err) {
    int same = c->tab_valid && c->n_tab_grids == n_grids &&
               memcmp(c->tab_grids, grids, n_grids * sizeof *grids) == 0 && (c->tab_valid == 2 || !want_pos);
    if (same) return QVL_OK;
    if (n_grids > c->cap_tab_grids) {
        qvl_grid *g = realloc(c->tab_grids, n_grids * sizeof *g);
        if (!g) return err_fail(err, QVL_ERR_NOMEM, "out of memory for %zu grids", n_grids);
        c->tab_grids = g;
        c->cap_tab_grids = n_grids;
    }
    memcpy(c->tab_grids, grids, n_grids * sizeof *grids);
    c->n_tab_grids = n_grids;
    if (want_pos) tables_pos(c->m, c->p.pos_mode, grids, n_grids, c->pos, c->taps, c->pool);
    tables_rope(&c->m->cfg, grids, n_grids, c->cos_t, c->sin_t);
    c->tab_valid = want_pos ? 2 : 1;
    return QVL_OK;
}

static void tap(qvl_ctx *c, const char *name, const float *data, size_t rows, size_t cols) {
    if (c->tap) c->tap(c->tap_user, name, data, rows, cols);
}

static void linear_run(qvl_ctx *c, const linear *l, const float *A, size_t lda, size_t M, float *C, size_t ldc,
                       int accumulate, gemm_epilogue epi) {
    gemm_args g = {.M = (int)M, .N = l->w.rows, .K = l->w.cols, .A = A, .lda = lda, .B = l->w.data,
                   .b_dtype = l->w.dtype, .ldb = (size_t)l->w.cols, .bias = l->b, .C = C, .ldc = ldc,
                   .accumulate = accumulate, .epilogue = epi, .Bp = &l->packed};
    gemm_run_isa(&g, c->gemm_ws, c->pool, (gemm_isa)c->m->isa);
    c->prof.gemm_flops += 2.0 * (double)M * l->w.rows * l->w.cols;
}

/* out (=|+=) fc2(act(fc1(in))) over `rows` rows, in chunks of mlp_step rows through c->mlp. */
static void mlp_rows(qvl_ctx *c, const linear *fc1, const linear *fc2, gemm_epilogue act, const float *in,
                     size_t ld_in, size_t rows, float *out, size_t ld_out, int accumulate) {
    const size_t hid = (size_t)fc1->w.rows, step = mlp_step(rows);
    for (size_t r = 0; r < rows; r += step) {
        const size_t m = rows - r < step ? rows - r : step;
        linear_run(c, fc1, in + r * ld_in, ld_in, m, c->mlp, hid, 0, act);
        linear_run(c, fc2, c->mlp, hid, m, out + r * ld_out, ld_out, accumulate, GEMM_EPI_NONE);
    }
}

/* fc1 → erf GELU → fc2 over `in` [S/4, 4H] into out [S/4, O]. */
static void merger_mlp(qvl_ctx *c, const merger_w *mw, const float *in, size_t rows, float *out) {
    mlp_rows(c, &mw->fc1, &mw->fc2, GEMM_EPI_GELU_ERF, in, (size_t)mw->fc1.w.cols, rows, out, (size_t)mw->fc2.w.rows,
             0);
}

static void block_forward(qvl_ctx *c, const block_w *b, size_t S, size_t n_seg) {
    const tower_config *k = &c->m->cfg;
    size_t H = (size_t)k->hidden;
    qvl_profile *pf = &c->prof;
    double t0 = now_ms(), t1;
    op_layernorm(c->x, H, c->a, H, S, H, b->norm1.w, b->norm1.b, k->ln_eps, c->pool);
    t1 = now_ms(), pf->norm_ms += t1 - t0, t0 = t1;
    linear_run(c, &b->qkv, c->a, H, S, c->qkv, 3 * H, 0, GEMM_EPI_NONE);
    t1 = now_ms(), pf->gemm_ms += t1 - t0, t0 = t1;
    rope_apply(c->qkv, 3 * H, S, k->heads, k->head_dim, c->cos_t, c->sin_t, c->pool);
    t1 = now_ms(), pf->pos_rope_ms += t1 - t0, t0 = t1;
    attn_args at = {.q = c->qkv, .k = c->qkv + H, .v = c->qkv + 2 * H, .ldq = 3 * H, .ldk = 3 * H, .ldv = 3 * H,
                    .out = c->a, .ldo = H, .n_heads = k->heads, .head_dim = k->head_dim, .cu = c->cu,
                    .n_seg = (int)n_seg, .scale = 1.0f / sqrtf((float)k->head_dim)};
    attn_run_isa(&at, c->attn_ws, c->pool, (attn_isa)c->m->isa); /* the same numbering as gemm_isa */
    t1 = now_ms(), pf->attention_ms += t1 - t0, t0 = t1;
    linear_run(c, &b->proj, c->a, H, S, c->x, H, 1, GEMM_EPI_NONE);
    t1 = now_ms(), pf->gemm_ms += t1 - t0, t0 = t1;
    op_layernorm(c->x, H, c->a, H, S, H, b->norm2.w, b->norm2.b, k->ln_eps, c->pool);
    t1 = now_ms(), pf->norm_ms += t1 - t0, t0 = t1;
    mlp_rows(c, &b->fc1, &b->fc2, k->act == ACT_GELU_TANH ? GEMM_EPI_GELU_TANH : GEMM_EPI_GELU_ERF, c->a, H, S,
             c->x, H, 1);
    pf->gemm_ms += now_ms() - t0;
}

/* Blocks from c->x (rotary tables and segments prepared), DeepStack features, and optionally the merger. */
static void run_chain(qvl_ctx *c, size_t S, size_t n_seg, float *merged, float *const *deepstack) {
    const tower_config *k = &c->m->cfg;
    size_t H = (size_t)k->hidden, mm = (size_t)k->merge * k->merge, T = S / mm, O = (size_t)k->out_hidden;
    char name[32];
    double seg_flops = 0; /* attention FLOPs of one block: QKᵀ and P·V per segment */
    for (size_t s = 0; s < n_seg; s++) {
        const double n = (double)(c->cu[s + 1] - c->cu[s]);
        seg_flops += 4.0 * n * n * k->head_dim * k->heads;
    }
    for (int i = 0; i < k->depth; i++) {
        block_forward(c, &c->m->blocks[i], S, n_seg);
        c->prof.attention_flops += seg_flops;
        snprintf(name, sizeof name, "blk%d", i);
        tap(c, name, c->x, S, H);
        for (int d = 0; d < k->n_deepstack; d++) {
            if (k->deepstack_index[d] != i) continue;
            float *dst = deepstack && deepstack[d] ? deepstack[d] : c->tap ? c->ds : NULL;
            if (!dst) continue;
            const merger_w *mw = &c->m->deepstack[d];
            double t0 = now_ms();
            op_layernorm(c->x, H * mm, c->a, H * mm, T, H * mm, mw->norm.w, mw->norm.b, k->ln_eps, c->pool);
            merger_mlp(c, mw, c->a, T, dst);
            c->prof.merger_ms += now_ms() - t0;
            snprintf(name, sizeof name, "deepstack%d", d);
            tap(c, name, dst, T, O);
        }
    }
    if (!merged) return;
    const merger_w *mw = &c->m->merger;
    double t0 = now_ms();
    op_layernorm(c->x, H, c->a, H, S, H, mw->norm.w, mw->norm.b, k->ln_eps, c->pool);
    merger_mlp(c, mw, c->a, T, merged);
    c->prof.merger_ms += now_ms() - t0;
    tap(c, "merged", merged, T, O);
}

typedef struct add_job {
    float *x;
    const float *y;
    size_t cols;
} add_job;

/* x[r, :] += y[r, :] for rows [r0, r1). */
static void add_rows(void *ctx, long r0, long r1, int thread) {
    (void)thread;
    const add_job *j = ctx;
    for (size_t i = (size_t)r0 * j->cols; i < (size_t)r1 * j->cols; i++) j->x[i] = j->x[i] + j->y[i];
}

qvl_status qvl_encode(qvl_ctx *c, const float *pixels, size_t n_rows, const qvl_grid *grids, size_t n_grids,
                      float *merged, float *const *deepstack, qvl_error *err) {
    err_clear(err);
    if (!c || !pixels || !merged)
        return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_encode: ctx, pixels and merged must not be NULL");
    size_t n_seg;
    TRY(prepare(c, n_rows, grids, n_grids, &n_seg, err));
    const tower_config *k = &c->m->cfg;
    size_t S = n_rows, H = (size_t)k->hidden;

    memset(&c->prof, 0, sizeof c->prof);
    double start = now_ms(), t0 = start;
    linear_run(c, &c->m->patch, pixels, (size_t)k->row_len, S, c->x, H, 0, GEMM_EPI_NONE);
    c->prof.patch_ms = now_ms() - t0;
    tap(c, "patch", c->x, S, H);
    t0 = now_ms();
    TRY(build_tables(c, grids, n_grids, 1, err));
    tap(c, "pos", c->pos, S, H);
    add_job aj = {c->x, c->pos, H};
    pool_for(c->pool, (long)S, 0, add_rows, &aj);
    c->prof.pos_rope_ms += now_ms() - t0;
    run_chain(c, S, n_seg, merged, deepstack);
    c->prof.total_ms = now_ms() - start;
    return QVL_OK;
}

qvl_status qvl_run_blocks(qvl_ctx *c, const float *hidden, size_t n_rows, const qvl_grid *grids, size_t n_grids,
                          int through_merger, float *out, qvl_error *err) {
    err_clear(err);
    if (!c || !hidden || !out)
        return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_run_blocks: ctx, hidden and out must not be NULL");
    size_t n_seg;
    TRY(prepare(c, n_rows, grids, n_grids, &n_seg, err));
    const tower_config *k = &c->m->cfg;
    size_t S = n_rows, H = (size_t)k->hidden;
    memset(&c->prof, 0, sizeof c->prof);
    double start = now_ms();
    memcpy(c->x, hidden, S * H * sizeof(float));
    TRY(build_tables(c, grids, n_grids, 0, err));
    run_chain(c, S, n_seg, through_merger ? out : NULL, NULL);
    c->prof.total_ms = now_ms() - start;
    if (!through_merger) memcpy(out, c->x, S * H * sizeof(float));
    return QVL_OK;
}
