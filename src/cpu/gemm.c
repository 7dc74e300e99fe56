/* gemm.c — the GEMM driver: BLIS-style blocking, packing, threads and the bias/GELU/residual epilogue.
 *
 * Loop structure (one work item = one MC x NC block of C, items split statically over the threads):
 *
 *   for each item (ic, jc):                         C block [mc, nc], partial sums in a per-thread buffer Cb
 *     for pc in K by KC:                            K blocking; the same for every item and thread count
 *       pack B[jc.., pc..] → Bp  (NR-wide f32 micro-panels, widened from f32/f16/bf16 while packing)
 *       pack A[ic.., pc..] → Ap  (MR-tall micro-panels)
 *       for jr in nc by NR: for ir in mc by MR:     B micro-panel stays in L1 while A panels stream from L2
 *         ukr: Cb[ir, jr] (=|+=) Ap[ir] · Bp[jr]
 *     epilogue, once per element after the full K sum: t = Cb + bias; t = gelu(t); C = accumulate ? C + t : t
 *
 * Partial sums live in Cb rather than in C so that C is read only by the epilogue (accumulate) and written once.
 * K is never split across threads and every element goes through the same KC blocking and micro-tile code, so
 * the result is bit-identical for any thread count. Packed panels are zero-padded to MR/NR, so the microkernel
 * always computes full tiles into Cb and edges only matter to the epilogue. */
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "cpu/gemm.h"
#include "cpu/kernels_avx2.h"
#include "cpu/ops.h"

enum {
    GEMM_MR = 6,   /* micro-tile rows (A micro-panel height) */
    GEMM_NR = 16,  /* micro-tile columns (B micro-panel width) */
    GEMM_KC = 256, /* K block: a KC x NR B micro-panel is 16 KiB, L1-resident */
    GEMM_MC = 144, /* M block: the MC x KC packed A block is 144 KiB, L2-resident */
    GEMM_NC = 192  /* N block: KC x NC packed B is 192 KiB; Cb is MC x NC */
};

/* Per-thread workspace layout, every part 64-byte aligned. */
#define GEMM_AP_BYTES ((size_t)GEMM_MC * GEMM_KC * sizeof(float))
#define GEMM_BP_BYTES ((size_t)GEMM_KC * GEMM_NC * sizeof(float))
#define GEMM_CB_BYTES ((size_t)GEMM_MC * GEMM_NC * sizeof(float))
#define GEMM_THREAD_BYTES (GEMM_AP_BYTES + GEMM_BP_BYTES + GEMM_CB_BYTES)

size_t gemm_workspace_size(int n_threads) {
    if (n_threads < 1) n_threads = 1;
    return (size_t)n_threads * GEMM_THREAD_BYTES + 64; /* + 64: gemm_run aligns ws itself if it must */
}

/* ---- scalar kernels (fallback and reference for the SIMD ones; same contracts as in kernels_avx2.h) ---- */

static void ukr_scalar(int kc, const float *a, const float *b, float *c, size_t ldc, int first) {
    float acc[GEMM_MR][GEMM_NR];
    memset(acc, 0, sizeof acc);
    for (int k = 0; k < kc; k++, a += GEMM_MR, b += GEMM_NR)
        for (int i = 0; i < GEMM_MR; i++)
            for (int j = 0; j < GEMM_NR; j++) acc[i][j] += a[i] * b[j];
    for (int i = 0; i < GEMM_MR; i++)
        for (int j = 0; j < GEMM_NR; j++) c[(size_t)i * ldc + j] = first ? acc[i][j] : c[(size_t)i * ldc + j] + acc[i][j];
}

/* Element k of row j of B as f32 (B may be unaligned). */
static inline float b_elem(const void *b, qvl_dtype dt, size_t ldb, size_t j, size_t k) {
    const unsigned char *p = (const unsigned char *)b;
    if (dt == QVL_DTYPE_F32) {
        float f;
        memcpy(&f, p + (j * ldb + k) * 4, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, p + (j * ldb + k) * 2, 2);
    return dt == QVL_DTYPE_BF16 ? op_bf16_to_f32(h) : op_f16_to_f32(h);
}

static void pack_b_scalar(const void *b, qvl_dtype dt, size_t ldb, int nr, int kc, float *bp) {
    for (int k = 0; k < kc; k++)
        for (int j = 0; j < GEMM_NR; j++) bp[(size_t)k * GEMM_NR + j] = j < nr ? b_elem(b, dt, ldb, (size_t)j, (size_t)k) : 0.0f;
}

static void pack_a_scalar(const float *a, size_t lda, int mr, int kc, float *ap) {
    for (int k = 0; k < kc; k++)
        for (int i = 0; i < GEMM_MR; i++) ap[(size_t)k * GEMM_MR + i] = i < mr ? a[(size_t)i * lda + k] : 0.0f;
}

typedef struct gemm_kernels {
    void (*ukr)(int kc, const float *a, const float *b, float *c, size_t ldc, int first);
    void (*pack_b)(const void *b, qvl_dtype dt, size_t ldb, int nr, int kc, float *bp);
    void (*pack_a)(const float *a, size_t lda, int mr, int kc, float *ap);
} gemm_kernels;

static const gemm_kernels kernels_scalar = {ukr_scalar, pack_b_scalar, pack_a_scalar};
static const gemm_kernels kernels_avx2 = {gemm_ukr_6x16_avx2, gemm_pack_b16_avx2, gemm_pack_a6_avx2};

/* ---- epilogue ---- */

/* t = acc + bias (per column), GELU, then store or add into C: one row segment of n elements. `t` is modified. */
static void epilogue_row(float *t, const float *bias, int n, gemm_epilogue epi, float *c, int accumulate) {
    if (bias)
        for (int j = 0; j < n; j++) t[j] = t[j] + bias[j];
    if (epi == GEMM_EPI_GELU_TANH) op_gelu_tanh(t, (size_t)n);
    else if (epi == GEMM_EPI_GELU_ERF) op_gelu_erf(t, (size_t)n);
    if (accumulate)
        for (int j = 0; j < n; j++) c[j] = c[j] + t[j];
    else
        memcpy(c, t, (size_t)n * sizeof(float));
}

/* ---- driver ---- */

static void gemm_item(const gemm_args *g, const gemm_kernels *kr, int i0, int j0, unsigned char *ws) {
    float *ap = (float *)(void *)ws;
    float *bp = (float *)(void *)(ws + GEMM_AP_BYTES);
    float *cb = (float *)(void *)(ws + GEMM_AP_BYTES + GEMM_BP_BYTES);
    const int mc = g->M - i0 < GEMM_MC ? g->M - i0 : GEMM_MC;
    const int nc = g->N - j0 < GEMM_NC ? g->N - j0 : GEMM_NC;
    const size_t esz = g->b_dtype == QVL_DTYPE_F32 ? 4 : 2;
    const unsigned char *b = (const unsigned char *)g->B;

    if (g->K <= 0)
        for (int i = 0; i < mc; i++) memset(cb + (size_t)i * GEMM_NC, 0, (size_t)nc * sizeof(float));
    for (int pc = 0; pc < g->K; pc += GEMM_KC) {
        const int kc = g->K - pc < GEMM_KC ? g->K - pc : GEMM_KC;
        for (int jr = 0; jr < nc; jr += GEMM_NR) {
            const int nr = nc - jr < GEMM_NR ? nc - jr : GEMM_NR;
            kr->pack_b(b + ((size_t)(j0 + jr) * g->ldb + (size_t)pc) * esz, g->b_dtype, g->ldb, nr, kc,
                       bp + (size_t)jr * kc);
        }
        for (int ir = 0; ir < mc; ir += GEMM_MR) {
            const int mr = mc - ir < GEMM_MR ? mc - ir : GEMM_MR;
            kr->pack_a(g->A + (size_t)(i0 + ir) * g->lda + (size_t)pc, g->lda, mr, kc, ap + (size_t)ir * kc);
        }
        for (int jr = 0; jr < nc; jr += GEMM_NR)
            for (int ir = 0; ir < mc; ir += GEMM_MR)
                kr->ukr(kc, ap + (size_t)ir * kc, bp + (size_t)jr * kc, cb + (size_t)ir * GEMM_NC + jr, GEMM_NC, pc == 0);
    }
    for (int i = 0; i < mc; i++)
        epilogue_row(cb + (size_t)i * GEMM_NC, g->bias ? g->bias + j0 : NULL, nc, g->epilogue,
                     g->C + (size_t)(i0 + i) * g->ldc + j0, g->accumulate);
}

void gemm_run_isa(const gemm_args *g, void *ws, int n_threads, gemm_isa isa) {
    if (g->M <= 0 || g->N <= 0) return;
    const gemm_kernels *kr = &kernels_scalar;
    if (isa == GEMM_ISA_AVX2 || (isa == GEMM_ISA_AUTO && qvl_cpu_has_avx2())) kr = &kernels_avx2;
    const int nb_m = (g->M + GEMM_MC - 1) / GEMM_MC;
    const int nb_n = (g->N + GEMM_NC - 1) / GEMM_NC;
    const long items = (long)nb_m * nb_n;
    if (n_threads < 1) n_threads = 1;
    if (n_threads > items) n_threads = (int)items;
    /* Items in N-major order so consecutive items of one thread share the same B columns (warm in cache). */
#pragma omp parallel num_threads(n_threads) if (n_threads > 1)
    {
        const int t = omp_get_thread_num(), nt = omp_get_num_threads();
        const long lo = items * t / nt, hi = items * (t + 1) / nt;
        unsigned char *wst = (unsigned char *)(((uintptr_t)ws + 63) & ~(uintptr_t)63) + (size_t)t * GEMM_THREAD_BYTES;
        for (long it = lo; it < hi; it++)
            gemm_item(g, kr, (int)(it % nb_m) * GEMM_MC, (int)(it / nb_m) * GEMM_NC, wst);
    }
}

void gemm_run(const gemm_args *g, void *ws, int n_threads) { gemm_run_isa(g, ws, n_threads, GEMM_ISA_AUTO); }

void gemm_ref(const gemm_args *g) {
    for (int i = 0; i < g->M; i++)
        for (int j = 0; j < g->N; j++) {
            const float *a = g->A + (size_t)i * g->lda;
            float s = 0.0f;
            for (int k = 0; k < g->K; k++) s += a[k] * b_elem(g->B, g->b_dtype, g->ldb, (size_t)j, (size_t)k);
            epilogue_row(&s, g->bias ? g->bias + j : NULL, 1, g->epilogue, g->C + (size_t)i * g->ldc + j,
                         g->accumulate);
        }
}
