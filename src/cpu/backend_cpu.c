/* backend_cpu.c — the CPU compute backends (backend/backend.h; listed in backend/table.c), the AMX set's start-up
 * check and the VDPBF16PS rate; which entry a load gets is backend/select.c's. Their memory is the host's.
 *
 * f32 entries wrap the GEMM driver (gemm.c) and the attention driver (attention.c) with a fixed kernel set; their
 * outputs are those of gemm_run_isa / attn_run_isa with that set. bf16 entries (gemm_bf16.c, attention_bf16.c)
 * run the block and merger GEMMs and attention in bf16 arithmetic and the f32 linears (the patch embedding) on
 * the f32 kernels of the same CPU. */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/cpu.h"
#include "core/error.h"
#include "cpu/attention.h"
#include "cpu/backend_cpu.h"
#include "cpu/bf16.h"
#include "cpu/gemm.h"
#include "cpu/ops.h"
#include "cpu/unit_rate.h"

/* The kernel index of an entry: the f32 gemm_isa / attn_isa of its f32 parts (the same numbering). */
static gemm_isa f32_isa(const backend *be) { return (gemm_isa)be->kernel; }

/* Every entry's memory is the host's: allocations, copies and the row operations on host floats. */
static void *host_alloc(const backend *be, size_t bytes) {
    (void)be;
    return aligned_alloc(64, bytes ? (bytes + 63) & ~(size_t)63 : 64);
}

static void host_release(const backend *be, void *p) {
    (void)be;
    free(p);
}

static void host_copy(const backend *be, void *dst, const void *src, size_t bytes) {
    (void)be;
    if (bytes && dst != src) memcpy(dst, src, bytes);
}

static void host_store_rows(const backend *be, const float *src, size_t lds, size_t rows, size_t cols, void *dst,
                            size_t ld, qvl_dtype dt, thread_pool *pool) {
    (void)be, (void)pool;
    op_store_rows(src, lds, rows, cols, dst, ld, dt);
}

static void cpu_layernorm(const backend *be, const float *x, size_t ldx, float *y, size_t ldy, size_t rows,
                          size_t cols, const float *w, const float *b, float eps, thread_pool *pool) {
    (void)be;
    op_layernorm(x, ldx, y, ldy, rows, cols, w, b, eps, pool);
}

static void cpu_rope(const backend *be, float *qkv, size_t ld, size_t rows, int heads, int head_dim,
                     const float *cos_t, const float *sin_t, thread_pool *pool) {
    (void)be;
    op_rope(qkv, ld, rows, heads, head_dim, cos_t, sin_t, pool);
}

static void cpu_add_rows(const backend *be, float *x, size_t ldx, const float *y, size_t ldy, size_t rows,
                         size_t cols, thread_pool *pool) {
    (void)be;
    op_add_rows(x, ldx, y, ldy, rows, cols, pool);
}

#define HOST_OPS                                                                                                    \
    .layernorm = cpu_layernorm, .rope = cpu_rope, .add_rows = cpu_add_rows, .alloc = host_alloc,                   \
    .release = host_release, .upload = host_copy, .download = host_copy, .store_rows = host_store_rows,            \
    .host_memory = 1

static size_t f32_pack_size(int N, int K, qvl_dtype dtype, be_arith ar) {
    (void)ar;
    return gemm_pack_size(N, K, dtype, GEMM_PANEL_AUTO);
}

static int f32_pack(const backend *be, be_weight *out, void *buf, const void *B, qvl_dtype dtype, size_t ldb, int N,
                    int K, be_arith ar, thread_pool *pool) {
    (void)ar;
    return gemm_pack_b_isa(out, buf, B, dtype, ldb, N, K, GEMM_PANEL_AUTO, pool, f32_isa(be));
}

static size_t f32_linear_ws(int n_threads, int max_k) {
    (void)max_k;
    return gemm_workspace_size(n_threads);
}

static void f32_linear(const backend *be, const be_weight *w, const float *A, size_t lda, int M, const float *bias,
                       float *C, size_t ldc, int accumulate, be_act act, void *ws, int max_k, thread_pool *pool) {
    (void)max_k;
    gemm_args g = {.M = M, .N = w->N, .K = w->K, .A = A, .lda = lda, .B = w->data, .b_dtype = w->dtype,
                   .ldb = (size_t)w->K, .bias = bias, .C = C, .ldc = ldc, .accumulate = accumulate,
                   .epilogue = (gemm_epilogue)act, .Bp = w};
    gemm_run_isa(&g, ws, pool, f32_isa(be));
}

static void f32_attention(const backend *be, const be_attn *a, void *ws, thread_pool *pool) {
    attn_args at = {.q = a->q, .k = a->k, .v = a->v, .ldq = a->ldq, .ldk = a->ldk, .ldv = a->ldv, .out = a->out,
                    .ldo = a->ldo, .n_heads = a->n_heads, .head_dim = a->head_dim, .cu = a->cu, .n_seg = a->n_seg,
                    .scale = a->scale};
    attn_run_isa(&at, ws, pool, (attn_isa)be->kernel);
}

/* bf16 entries: bf16-arithmetic weights through the bf16 GEMM of the entry's set, f32 ones through the f32
 * kernels. The AMX entries pack tile-padded panels (gemm_amx_pack: pair steps in whole 16-pair tiles), the
 * VDPBF16PS ones the unpadded panels (gemm_bf16_pack; the padding would be 1 MB of the 27B tower's fc2, K = 4304). */
#define IS_AMX(set_) ((set_) == BF16_SET_AMX || (set_) == BF16_SET_AMX_EMULATED)
static size_t bf16_pack_size(int N, int K, qvl_dtype dtype, be_arith ar) {
    return ar != BE_ARITH_F32 ? gemm_bf16_pack_size(N, K) : f32_pack_size(N, K, dtype, ar);
}
static size_t amx_pack_size(int N, int K, qvl_dtype dtype, be_arith ar) {
    return ar != BE_ARITH_F32 ? gemm_amx_pack_size(N, K) : f32_pack_size(N, K, dtype, ar);
}

static int bf16_pack(const backend *be, be_weight *out, void *buf, const void *B, qvl_dtype dtype, size_t ldb, int N,
                     int K, be_arith ar, thread_pool *pool) {
    if (ar == BE_ARITH_BF16X2 && !be->split) return -1;
    if (ar != BE_ARITH_F32) {
        if ((IS_AMX(be->set) ? gemm_amx_pack : gemm_bf16_pack)(out, buf, B, dtype, ldb, N, K, pool) != 0) return -1;
        out->arith = ar;
        return 0;
    }
    return f32_pack(be, out, buf, B, dtype, ldb, N, K, ar, pool);
}

static void bf16_linear(const backend *be, const be_weight *w, const float *A, size_t lda, int M, const float *bias,
                        float *C, size_t ldc, int accumulate, be_act act, void *ws, int max_k, thread_pool *pool) {
    if (w->arith == BE_ARITH_F32) {
        f32_linear(be, w, A, lda, M, bias, C, ldc, accumulate, act, ws, max_k, pool);
        return;
    }
    switch (be->set) {
#if QVL_WITH_X86
    case BF16_SET_AMX: gemm_amx_run(w, A, lda, M, bias, C, ldc, accumulate, act, ws, max_k, pool); return;
#endif
    case BF16_SET_AMX_EMULATED: gemm_amx_run_emulated(w, A, lda, M, bias, C, ldc, accumulate, act, ws, max_k, pool); return;
    default: gemm_bf16_run(be->set, w, A, lda, M, bias, C, ldc, accumulate, act, ws, pool); return;
    }
}

/* The AMX sets' linear with operands in the tiles' layout (gemm_amx_run_packed); f32-arithmetic weights and the
 * other sets have none (their entries leave linear_packed NULL; the tower asks only for bf16-arithmetic pairs). */
static void amx_linear_packed(const backend *be, const be_weight *w, const float *A, size_t lda, const void *A_packed,
                              int M, const float *bias, float *C, size_t ldc, void *C_packed, int accumulate,
                              be_act act, void *ws, int max_k, thread_pool *pool) {
    switch (be->set) {
#if QVL_WITH_X86
    case BF16_SET_AMX:
        gemm_amx_run_packed(w, A, lda, A_packed, M, bias, C, ldc, C_packed, accumulate, act, ws, max_k, pool);
        return;
#endif
    default:
        gemm_amx_run_packed_emulated(w, A, lda, A_packed, M, bias, C, ldc, C_packed, accumulate, act, ws, max_k, pool);
        return;
    }
}

/* The AMX sets' qkv in the rotary column order (gemm_amx_pack_qkv) where it takes the shape, for qkv_rope. */
static int amx_pack_qkv(const backend *be, be_weight *out, void *buf, const void *B, qvl_dtype dtype, size_t ldb,
                        int N, int K, int head_dim, be_arith ar, thread_pool *pool) {
    if (ar == BE_ARITH_BF16 && N % 3 == 0 && qkv_rope_takes(N / 3, head_dim))
        return gemm_amx_pack_qkv(out, buf, B, dtype, ldb, N, K, head_dim, pool);
    return bf16_pack(be, out, buf, B, dtype, ldb, N, K, ar, pool);
}

/* Their attention operand: q, k, v as bf16 rows [M, N] (gemm_amx_run_qkv). */
static size_t amx_qkv_op_size(int M, int N) { return M > 0 && N > 0 ? (size_t)M * (size_t)N * sizeof(uint16_t) : 0; }

static void amx_qkv_rope(const backend *be, const be_weight *w, const float *A, size_t lda, const void *A_packed,
                         int M, const float *bias, const float *cos_t, const float *sin_t, void *qkv_op, void *ws,
                         int max_k, thread_pool *pool) {
    switch (be->set) {
#if QVL_WITH_X86
    case BF16_SET_AMX: gemm_amx_run_qkv(w, A, lda, A_packed, M, bias, cos_t, sin_t, qkv_op, ws, max_k, pool); return;
#endif
    default: gemm_amx_run_qkv_emulated(w, A, lda, A_packed, M, bias, cos_t, sin_t, qkv_op, ws, max_k, pool); return;
    }
}

/* The AMX sets' LayerNorm into the GEMM's operand layout: 16-row groups over the pool, each normalized by
 * op_layernorm into the thread's part of ws (16 x cols floats) and packed by the set's own packer. */
typedef struct ln_packed_job {
    const float *x;
    size_t ldx, rows, cols, stride; /* stride: bytes of ws per thread */
    uint16_t *y;
    const float *w, *b;
    float eps;
    unsigned char *ws;
    int emulated;
} ln_packed_job;

static void ln_packed_groups(void *ctx, long g0, long g1, int thread) {
    const ln_packed_job *j = ctx;
    float *t = (float *)(void *)(j->ws + (size_t)thread * j->stride);
    const int kt = (int)((j->cols + 31) / 32);
    for (long g = g0; g < g1; g++) {
        const size_t r0 = (size_t)g * 16, mr = j->rows - r0 < 16 ? j->rows - r0 : 16;
        uint16_t *dst = j->y + (size_t)g * (size_t)kt * 512;
        op_layernorm(j->x + r0 * j->ldx, j->ldx, t, j->cols, mr, j->cols, j->w, j->b, j->eps, NULL);
#if QVL_WITH_X86
        if (!j->emulated) {
            gemm_amx_pack_a(t, j->cols, (int)mr, 0, (int)j->cols, kt, 1, dst);
            continue;
        }
#endif
        gemm_amx_pack_a_emulated(t, j->cols, (int)mr, 0, (int)j->cols, kt, 1, dst);
    }
}

static void amx_layernorm_packed(const backend *be, const float *x, size_t ldx, void *y, size_t rows, size_t cols,
                                 const float *w, const float *b, float eps, void *ws, thread_pool *pool) {
    if (rows == 0 || cols == 0) return;
    /* 16 rows of cols floats a thread, 64-byte aligned: within linear_ws (the A block alone is 128 x cols bf16) */
    ln_packed_job j = {x, ldx, rows, cols, (16 * cols * sizeof(float) + 63) & ~(size_t)63, y, w, b, eps,
                       (unsigned char *)(((uintptr_t)ws + 63) & ~(uintptr_t)63), be->set == BF16_SET_AMX_EMULATED};
    pool_for(pool, (long)((rows + 15) / 16), 1, ln_packed_groups, &j);
}

static size_t max2(size_t a, size_t b) { return a > b ? a : b; }

static size_t bf16_linear_ws(int n_threads, int max_k) {
    (void)max_k;
    return max2(gemm_workspace_size(n_threads), gemm_bf16_workspace_size(n_threads));
}

static size_t amx_linear_ws(int n_threads, int max_k) { /* both AMX builds have the same layout */
    return max2(gemm_workspace_size(n_threads), gemm_amx_workspace_size_emulated(n_threads, max_k));
}

/* attn_amx_workspace_size covers both the AMX kernel's scratch and the bf16 blocks'. */
static size_t bf16_attention_ws(int head_dim, int n_threads) {
    const size_t a = attn_bf16_workspace_size(head_dim, n_threads), b = attn_amx_workspace_size(head_dim, n_threads);
    return a > b ? a : b;
}

static void bf16_attention(const backend *be, const be_attn *a, void *ws, thread_pool *pool) {
    attn_args at = {.q = a->q, .k = a->k, .v = a->v, .ldq = a->ldq, .ldk = a->ldk, .ldv = a->ldv, .out = a->out,
                    .ldo = a->ldo, .n_heads = a->n_heads, .head_dim = a->head_dim, .cu = a->cu, .n_seg = a->n_seg,
                    .scale = a->scale, .scratch = a->scratch, .scratch_bytes = a->scratch_bytes,
                    .out_tiles = a->out_packed};
    if (a->qkv_op) { /* the AMX sets' operand (amx_qkv_rope): bf16 rows [S, 3H] */
        const size_t H = (size_t)a->n_heads * (size_t)a->head_dim;
        at.q16 = a->qkv_op, at.k16 = at.q16 + H, at.v16 = at.q16 + 2 * H;
        at.ldq = at.ldk = at.ldv = 3 * H;
    }
    /* The AMX sets' attention is on the tiles (attn_amx_ref's arithmetic; the emulated set over the C model). */
    switch (be->set) {
#if QVL_WITH_X86
    case BF16_SET_AMX: attn_amx_run(&at, ws, pool); return;
#endif
    case BF16_SET_AMX_EMULATED: attn_amx_run_emulated(&at, ws, pool); return;
    default: attn_bf16_run(be->set, &at, ws, pool); return;
    }
}

/* Rows of an M block of the f32 AVX-512 GEMM (3 of its 14-row tiles; 7 of the 6-row tiles of the other sets) and
 * of the bf16 GEMM (gemm_bf16.c). */
enum { ROW_ALIGN = 42 };

#define F32_ENTRY(nm, isa_)                                                                                          \
    {.name = nm, .isa = isa_, .precision = QVL_PRECISION_F32, .m_align = ROW_ALIGN, .pack_size = f32_pack_size,     \
     .pack = f32_pack, .linear_ws = f32_linear_ws, .linear = f32_linear, .attention_ws = attn_workspace_size, \
     .attention = f32_attention, .kernel = isa_, HOST_OPS}
/* isa_: the qvl_isa reported; kern_: the f32 kernels of its f32 parts; set_: its bf16 kernel set. */
#define BF16_ENTRY(nm, isa_, kern_, set_, test_)                                                                     \
    {.name = nm, .isa = isa_, .precision = QVL_PRECISION_BF16, .m_align = IS_AMX(set_) ? BF16_AMX_MC : ROW_ALIGN,   \
     .pack_size = IS_AMX(set_) ? amx_pack_size : bf16_pack_size, .pack = bf16_pack, .linear = bf16_linear,         \
     .linear_ws = IS_AMX(set_) ? amx_linear_ws : bf16_linear_ws, .attention_ws = bf16_attention_ws,                 \
     .packed_size = IS_AMX(set_) ? gemm_amx_packed_size : NULL,                                                     \
     .layernorm_packed = IS_AMX(set_) ? amx_layernorm_packed : NULL,                                                \
     .linear_packed = IS_AMX(set_) ? amx_linear_packed : NULL,                                                      \
     .pack_qkv = IS_AMX(set_) ? amx_pack_qkv : NULL, .qkv_op_size = IS_AMX(set_) ? amx_qkv_op_size : NULL,         \
     .qkv_rope = IS_AMX(set_) ? amx_qkv_rope : NULL,                                                                \
     .attention = bf16_attention, .kernel = kern_, .set = set_, .test_only = test_, .split = IS_AMX(set_), HOST_OPS}

const backend backend_cpu_portable = F32_ENTRY("portable", GEMM_ISA_SCALAR);
const backend backend_cpu_portable_bf16 =
    BF16_ENTRY("portable-bf16", GEMM_ISA_SCALAR, GEMM_ISA_SCALAR, BF16_SET_PORTABLE, 0);
/* The AMX GEMM and attention over the C model of the tile instructions (amx_emulated.c), f32 parts portable: tests
 * only. */
const backend backend_cpu_amx_emulated =
    BF16_ENTRY("amx-emulated", GEMM_ISA_SCALAR, GEMM_ISA_SCALAR, BF16_SET_AMX_EMULATED, 1);
#if QVL_WITH_X86
const backend backend_cpu_avx2 = F32_ENTRY("avx2", GEMM_ISA_AVX2);
const backend backend_cpu_avx512 = F32_ENTRY("avx512", GEMM_ISA_AVX512);
/* f32 parts (the patch embedding) on the AVX-512 f32 kernels: every AVX512-BF16 CPU has AVX-512 F/BW/DQ/VL. */
const backend backend_cpu_avx512bf16 =
    BF16_ENTRY("avx512bf16", GEMM_ISA_AVX512, GEMM_ISA_AVX512, BF16_SET_AVX512BF16, 0);
const backend backend_cpu_amx = BF16_ENTRY("amx", QVL_ISA_AMX, GEMM_ISA_AVX512, BF16_SET_AMX, 0);
#endif

/* The AMX set's start-up check: a 40 x 48 x 80 GEMM (two K tiles, partial row and column tiles, GELU and
 * accumulate) and a small attention (attn_check) on the tiles against their definitions. 2 when both agree
 * bit for bit; 1 when they do not, but every element is within the bound of a correct sum of the same bf16
 * products in another order (amx_agree.c: tiles that add in an order other than the SDM pseudocode's, which the
 * definitions follow, are still a correct bf16 GEMM, and the set runs); 0 when not (a broken tile state or
 * kernel: the set is then not used and `qvl info` says so), or out of memory. Run once per process on the
 * instructions (amx_check); over the C model of the tiles by the tests (backend_amx_check_emulated). */
typedef void (*amx_gemm_fn)(const be_weight *, const float *, size_t, int, const float *, float *, size_t, int,
                            be_act, void *, int, thread_pool *);
static int amx_check_on(amx_gemm_fn run, size_t (*ws_size)(int, int), int (*attn_check)(void)) {
    enum { CM = 40, CN = 48, CK = 80 };
    /* on the heap (52 KB): the loading thread may be a caller's thread with a small stack */
    float *A = malloc(((size_t)CM * CK + (size_t)CN * CK + CN + 3 * (size_t)CM * CN) * sizeof(float));
    void *packed = aligned_alloc(64, gemm_amx_pack_size(CN, CK)), *ws = malloc(ws_size(1, CK));
    int ok = 0;
    if (!A || !packed || !ws) {
        free(A), free(packed), free(ws);
        return 0;
    }
    float *B = A + CM * CK, *bias = B + CN * CK, *c0 = bias + CN, *c1 = c0 + CM * CN, *c2 = c1 + CM * CN;
    uint32_t st = 12345u;
    for (int i = 0; i < CM * CK; i++) A[i] = (float)((int)((st = st * 1664525u + 1013904223u) >> 9) % 4001 - 2000) / 997.0f;
    for (int i = 0; i < CN * CK; i++) B[i] = (float)((int)((st = st * 1664525u + 1013904223u) >> 9) % 4001 - 2000) / 1499.0f;
    for (int i = 0; i < CN; i++) bias[i] = (float)i / 7.0f - 3.0f;
    for (int i = 0; i < CM * CN; i++) c0[i] = c1[i] = c2[i] = (float)(i % 5) * 0.5f;
    be_weight w;
    if (gemm_amx_pack(&w, packed, B, QVL_DTYPE_F32, CK, CN, CK, NULL) == 0) {
        run(&w, A, CK, CM, bias, c1, CN, 1, BE_ACT_GELU_TANH, ws, CK, NULL);
        gemm_amx_ref(&w, A, CK, CM, bias, c2, CN, 1, BE_ACT_GELU_TANH);
        const int g = memcmp(c1, c2, (size_t)CM * CN * sizeof(float)) == 0 ? 2
                      : amx_gemm_excess(A, CK, B, CM, CN, CK, bias, c0, BE_ACT_GELU_TANH, c1, c2, CN) <= 1.0 ? 1 : 0;
        const int at = g ? attn_check() : 0; /* and the tile attention against its own */
        ok = g < at ? g : at;
    }
    free(A), free(packed), free(ws);
    return ok;
}

int backend_amx_check_emulated(void) {
    return amx_check_on(gemm_amx_run_emulated, gemm_amx_workspace_size_emulated, attn_amx_check_emulated);
}

#if QVL_WITH_X86
static int amx_check(void) { return amx_check_on(gemm_amx_run, gemm_amx_workspace_size, attn_amx_check); }
#endif

/* The AMX set on this CPU (cpu_amx_usable(), then amx_check()'s 0 / 1 / 2). Asking twice is harmless. */
enum { AMX_NOT_ASKED = 0, AMX_ABSENT, AMX_CHECK_FAILED, AMX_OTHER_ORDER, AMX_EXACT };
static int amx_state(void) {
#if QVL_WITH_X86
    static _Atomic int state;
    int s = atomic_load_explicit(&state, memory_order_acquire);
    if (s == AMX_NOT_ASKED) {
        s = !cpu_amx_usable() ? AMX_ABSENT : AMX_CHECK_FAILED + amx_check(); /* 0 failed, 1 other order, 2 exact */
        atomic_store_explicit(&state, s, memory_order_release);
    }
    return s;
#else
    return AMX_ABSENT;
#endif
}

static int amx_ok(void) { return amx_state() >= AMX_OTHER_ORDER; }

int backend_amx_exact(void) { return amx_state() == AMX_EXACT; }

const char *backend_amx_status(int *usable) {
    const int s = amx_state();
    *usable = s >= AMX_OTHER_ORDER;
    if (s == AMX_CHECK_FAILED)
        return "present and enabled, but its start-up check found the tiles' results wrong: not used";
    if (s == AMX_OTHER_ORDER)
        return "usable (tile data permission granted; the tiles sum in another order than the definition)";
    return cpu_amx_describe(cpu_amx_state());
}

int backend_runs(const backend *be) {
    if (!be) return 0;
    if (be->test_only) return 1;
    if (be->precision == QVL_PRECISION_BF16 && be->set == BF16_SET_AMX) return amx_ok();
    if (be->precision == QVL_PRECISION_BF16 && be->set == BF16_SET_AVX512BF16) return cpu_has_avx512bf16();
    return be->kernel <= cpu_level();
}

double backend_bf16_dot_rate(void) {
#if QVL_WITH_X86
    /* in thousandths; 0: not measured yet (a race only measures twice), -1: no AVX512-BF16 */
    static _Atomic int milli;
    int r = atomic_load_explicit(&milli, memory_order_relaxed);
    if (r == 0) {
        r = cpu_has_avx512bf16() ? (int)(unit_rate_bf16_dot_vs_fma() * 1000.0 + 0.5) : -1;
        if (r == 0) r = -1; /* the clock failed: no evidence that bf16 is faster */
        atomic_store_explicit(&milli, r, memory_order_relaxed);
    }
    return r > 0 ? r / 1000.0 : 0;
#else
    return 0;
#endif
}

int backend_amx_usable(void) { return amx_ok(); }

const backend *backend_cpu_entry(be_cpu_entry e) {
    switch (e) {
    case BE_CPU_F32_PORTABLE: return &backend_cpu_portable;
    case BE_CPU_BF16_PORTABLE: return &backend_cpu_portable_bf16;
    case BE_CPU_BF16_AMX_EMULATED: return &backend_cpu_amx_emulated;
#if QVL_WITH_X86
    case BE_CPU_F32_AVX2: return &backend_cpu_avx2;
    case BE_CPU_F32_AVX512: return &backend_cpu_avx512;
    case BE_CPU_BF16_AVX512: return &backend_cpu_avx512bf16;
    case BE_CPU_BF16_AMX: return &backend_cpu_amx;
#endif
    default: return NULL;
    }
}
