/* backend_cpu.c — the table of CPU compute backends (backend/backend.h) and the selection at model load.
 *
 * f32 entries wrap the GEMM driver (gemm.c) and the attention driver (attention.c) with a fixed kernel set; their
 * outputs are those of gemm_run_isa / attn_run_isa with that set. bf16 entries (gemm_bf16.c, attention_bf16.c)
 * run the block and merger GEMMs and attention in bf16 arithmetic and the f32 linears (the patch embedding) on
 * the f32 kernels of the same CPU. */
#include <string.h>

#include "backend/backend.h"
#include "core/cpu.h"
#include "core/error.h"
#include "cpu/attention.h"
#include "cpu/bf16.h"
#include "cpu/gemm.h"
#include "cpu/ops.h"

/* The kernel index of an entry: the f32 gemm_isa / attn_isa of its f32 parts (the same numbering). */
static gemm_isa f32_isa(const backend *be) { return (gemm_isa)be->kernel; }

static size_t f32_pack_size(int N, int K, qvl_dtype dtype, be_arith ar) {
    (void)ar;
    return gemm_pack_size(N, K, dtype, GEMM_PANEL_AUTO);
}

static int f32_pack(const backend *be, be_weight *out, void *buf, const void *B, qvl_dtype dtype, size_t ldb, int N,
                    int K, be_arith ar, thread_pool *pool) {
    (void)ar;
    return gemm_pack_b_isa(out, buf, B, dtype, ldb, N, K, GEMM_PANEL_AUTO, pool, f32_isa(be));
}

static void f32_linear(const backend *be, const be_weight *w, const float *A, size_t lda, int M, const float *bias,
                       float *C, size_t ldc, int accumulate, be_act act, void *ws, thread_pool *pool) {
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

/* bf16 entries: bf16-arithmetic weights through the bf16 GEMM, f32 ones through the f32 kernels. */
static size_t bf16_pack_size(int N, int K, qvl_dtype dtype, be_arith ar) {
    return ar == BE_ARITH_BF16 ? gemm_bf16_pack_size(N, K) : f32_pack_size(N, K, dtype, ar);
}

static int bf16_pack(const backend *be, be_weight *out, void *buf, const void *B, qvl_dtype dtype, size_t ldb, int N,
                     int K, be_arith ar, thread_pool *pool) {
    if (ar == BE_ARITH_BF16) return gemm_bf16_pack(out, buf, B, dtype, ldb, N, K, pool);
    return f32_pack(be, out, buf, B, dtype, ldb, N, K, ar, pool);
}

static int bf16_set(const backend *be) { return be->kernel == GEMM_ISA_AVX512 ? BF16_SET_AVX512BF16 : BF16_SET_PORTABLE; }

static void bf16_linear(const backend *be, const be_weight *w, const float *A, size_t lda, int M, const float *bias,
                        float *C, size_t ldc, int accumulate, be_act act, void *ws, thread_pool *pool) {
    if (w->arith != BE_ARITH_BF16) {
        f32_linear(be, w, A, lda, M, bias, C, ldc, accumulate, act, ws, pool);
        return;
    }
    gemm_bf16_run(bf16_set(be), w, A, lda, M, bias, C, ldc, accumulate, act, ws, pool);
}

static size_t bf16_linear_ws(int n_threads) {
    const size_t a = gemm_workspace_size(n_threads), b = gemm_bf16_workspace_size(n_threads);
    return a > b ? a : b;
}

static size_t bf16_attention_ws(int head_dim, int n_threads) { return attn_bf16_workspace_size(head_dim, n_threads); }

static void bf16_attention(const backend *be, const be_attn *a, void *ws, thread_pool *pool) {
    attn_args at = {.q = a->q, .k = a->k, .v = a->v, .ldq = a->ldq, .ldk = a->ldk, .ldv = a->ldv, .out = a->out,
                    .ldo = a->ldo, .n_heads = a->n_heads, .head_dim = a->head_dim, .cu = a->cu, .n_seg = a->n_seg,
                    .scale = a->scale};
    attn_bf16_run(bf16_set(be), &at, ws, pool);
}

/* Rows of an M block of the f32 AVX-512 GEMM (3 of its 14-row tiles; 7 of the 6-row tiles of the other sets) and
 * of the bf16 GEMM (gemm_bf16.c). */
enum { ROW_ALIGN = 42 };

#define F32_ENTRY(nm, isa_)                                                                                          \
    {.name = nm, .isa = isa_, .precision = QVL_PRECISION_F32, .m_align = ROW_ALIGN, .pack_size = f32_pack_size,     \
     .pack = f32_pack, .linear_ws = gemm_workspace_size, .linear = f32_linear, .attention_ws = attn_workspace_size, \
     .attention = f32_attention, .layernorm = op_layernorm, .kernel = isa_}
#define BF16_ENTRY(nm, isa_)                                                                                         \
    {.name = nm, .isa = isa_, .precision = QVL_PRECISION_BF16, .m_align = ROW_ALIGN, .pack_size = bf16_pack_size,   \
     .pack = bf16_pack, .linear_ws = bf16_linear_ws, .linear = bf16_linear, .attention_ws = bf16_attention_ws,      \
     .attention = bf16_attention, .layernorm = op_layernorm, .kernel = isa_}

static const backend be_portable = F32_ENTRY("portable", GEMM_ISA_SCALAR);
static const backend be_portable_bf16 = BF16_ENTRY("portable-bf16", GEMM_ISA_SCALAR);
#if QVL_WITH_X86
static const backend be_avx2 = F32_ENTRY("avx2", GEMM_ISA_AVX2);
static const backend be_avx512 = F32_ENTRY("avx512", GEMM_ISA_AVX512);
/* f32 parts (the patch embedding) on the AVX-512 f32 kernels: every AVX512-BF16 CPU has AVX-512 F/BW/DQ/VL. */
static const backend be_avx512bf16 = BF16_ENTRY("avx512bf16", GEMM_ISA_AVX512);
#endif

static const backend *const table[] = {
    &be_portable, &be_portable_bf16,
#if QVL_WITH_X86
    &be_avx2, &be_avx512, &be_avx512bf16,
#endif
};

const backend *const *backend_table(size_t *n) {
    *n = sizeof table / sizeof table[0];
    return table;
}

int backend_runs(const backend *be) {
    if (!be) return 0;
    if (be->precision == QVL_PRECISION_BF16 && be->kernel == GEMM_ISA_AVX512) return cpu_has_avx512bf16();
    return be->kernel <= cpu_level();
}

const backend *backend_bf16_available(void) {
#if QVL_WITH_X86
    if (cpu_has_avx512bf16()) return &be_avx512bf16;
#endif
    return NULL;
}

static const backend *f32_for(int isa) {
#if QVL_WITH_X86
    if (isa == GEMM_ISA_AVX512) return &be_avx512;
    if (isa == GEMM_ISA_AVX2) return &be_avx2;
#endif
    (void)isa;
    return &be_portable;
}

qvl_status backend_select(qvl_isa isa, qvl_precision precision, const backend **out, qvl_error *err) {
    int want;
    *out = NULL;
    switch (isa) {
    case QVL_ISA_AUTO: want = cpu_level(); break;
    case QVL_ISA_AVX2:
        if (!cpu_has_avx2()) return err_fail(err, QVL_ERR_UNSUPPORTED, "qvl_model_load: this CPU has no AVX2+FMA");
        want = GEMM_ISA_AVX2;
        break;
    case QVL_ISA_AVX512:
        if (!cpu_has_avx512())
            return err_fail(err, QVL_ERR_UNSUPPORTED, "qvl_model_load: this CPU has no AVX-512 (F, BW, DQ, VL)");
        want = GEMM_ISA_AVX512;
        break;
    default: return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_model_load: unknown isa %d", (int)isa);
    }
    const backend *bf = backend_bf16_available();
    const int bf_fits = bf && (isa == QVL_ISA_AUTO || (int)isa == bf->isa);
    switch (precision) {
    case QVL_PRECISION_F32: *out = f32_for(want); return QVL_OK;
    case QVL_PRECISION_AUTO: *out = bf_fits ? bf : f32_for(want); return QVL_OK;
    case QVL_PRECISION_BF16:
        if (bf_fits) *out = bf;
        else if (isa == QVL_ISA_AUTO) *out = &be_portable_bf16; /* correct, slow: the portable reference arithmetic */
        else
            return err_fail(err, QVL_ERR_UNSUPPORTED, "qvl_model_load: no bf16 kernels for the %s kernel set on this CPU",
                            isa == QVL_ISA_AVX2 ? "avx2" : "avx512");
        return QVL_OK;
    default: return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_model_load: unknown precision %d", (int)precision);
    }
}
