/* gemm.c — the GEMM driver: BLIS-style blocking, packing, threads and the bias/GELU/residual epilogue.
 *
 * Loop structure (one work item = one mc x nc block of C, items handed out dynamically to the pool's threads):
 *
 *   for each item (ic, jc):                         C block [mc, nc], partial sums in a per-thread buffer Cb
 *     for pc in K by kc:                            K blocking (kc from K alone); the same for every item
 *       pack A[ic.., pc..] → Ap  (MR-tall micro-panels; mc x kc, L2-resident, reused over all of nc)
 *       for jr in nc by NR:
 *         B micro-panel [jr, pc..]: read in place from a pre-packed weight (gemm_pack_b: f32 panels, or bf16
 *           panels widened in registers; AVX-512 keeps the first tile's widened copy in Bp for the block's other
 *           tiles), else packed here (NR-wide f32, widened from f32/f16/bf16)
 *         for ir in mc by MR:                       the B micro-panel stays in L1 while A panels stream from L2
 *           ukr: Cb[ir, jr] (=|+=) Ap[ir] · Bp[jr]; on the last K block, the SIMD kernels finish the tile
 *                straight into C: t = Cb + acc + bias, GELU, C = accumulate ? C + t : t (gemm_tail)
 *           (AVX-512, pre-packed weights: the last tile also reads the next B tile towards L2, a hint)
 *     (the scalar set, or K = 0: epilogue over Cb, once per element after the full K sum, same operations)
 *
 * Partial sums live in Cb rather than in C so that C is read only at the end (accumulate) and written once.
 * K is never split across threads and every element goes through the same KC blocking and micro-tile code, so
 * the result is bit-identical for any thread count, any mc/nc and with or without pre-packed weights (the panels
 * hold the same widened values the per-call packer produces). Packed panels are zero-padded to MR/NR, so the
 * microkernel always computes full tiles into Cb and only the finish masks edges.
 *
 * Kernel sets (gemm_kernels, one looked up per call): scalar (reference, 6 x 16), AVX2 (6 x 16) and AVX-512
 * (14 x 32 over two adjacent 16-column panels; bf16 panels packed in its own order, GEMM_BF16_PAIRS). AUTO takes
 * the widest the CPU runs. The SIMD sets share the K blocking, one FMA chain per element and the vector GELU
 * (vmath_*.h), so they agree bit for bit; the scalar set (separate multiply and add, then the epilogue pass through
 * op_gelu_*) differs in the last bits. Measured on a 2-core AVX-512 VM (AVX-512 FMA peak ~175 GFLOP/s a core), tower shapes, bf16 panels:
 * the microkernel alone 164 GFLOP/s on bf16 panels, 176 on f32 (bench/bench_ukr.c: the widening takes an FMA slot
 * per vector); keeping the first tile's widened copy for the others lifted whole GEMMs (bench/bench_gemm.c,
 * FLOP-weighted over qkv, proj, fc1, fc2) from 136-150 to 151-154 GFLOP/s on one core and from 299-306 to 307-312
 * on two (86-89 % of the 349-358 GFLOP/s peak of run 3 in docs/PERFORMANCE.md). The AVX2 set on the same VM: 82-86
 * GFLOP/s a core (BENCH_ISA=avx2 bench_gemm 784). */
#include <stdint.h>
#include <string.h>

#include "core/pool.h"
#include "core/cpu.h"
#include "cpu/gemm.h"
#include "cpu/kernels_avx2.h"
#include "cpu/kernels_avx512.h"
#include "cpu/ops.h"

enum {
    GEMM_MR = 6,       /* micro-tile rows of the scalar and AVX2 sets (the AVX-512 set: 14) */
    GEMM_NR = 16,      /* B panel width; a micro-tile spans one panel (scalar, AVX2) or two (AVX-512) */
    GEMM_KC = 512,     /* max K block: a KC x NR B micro-panel is 32 KiB in f32, 16 KiB in bf16: L1-resident */
    GEMM_MC = 144,     /* max M block of the 6-row sets: the MC x KC packed A block is 288 KiB, L2-resident */
    GEMM_MC_MAX = 144, /* max M block of any set (AVX-512: 3 x 14 = 42 rows) */
    GEMM_NC = 768,     /* max N block of the 6-row sets: B streams through L1 one micro-panel at a time */
    GEMM_NC_MAX = 1536, /* max N block of any set (AVX-512: fewer A repacks, measured +2 %); Cb's row stride */
    GEMM_PLAN_THREADS_MAX = POOL_FINISH_THREADS_MAX /* thread counts make_plan weighs finer splits for */
};

/* Per-thread workspace layout, every part 64-byte aligned. */
#define GEMM_AP_BYTES ((size_t)GEMM_MC_MAX * GEMM_KC * sizeof(float))
#define GEMM_BP_BYTES ((size_t)GEMM_KC * 2 * GEMM_NR * sizeof(float)) /* two micro-panels, packed just before use */
#define GEMM_CB_BYTES ((size_t)GEMM_MC_MAX * GEMM_NC_MAX * sizeof(float)) /* <= 864 KiB */
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

/* Position of column j of a micro-panel step in the LANES bf16 panel order (see gemm.h): 0-3, 8-11, 4-7, 12-15. */
static inline int bf16_slot(int j) { return (j & 3) | ((j & 4) << 1) | ((j & 8) >> 1); }

/* Index of element (step k, column j) inside a bf16 panel of K steps in order `order` (gemm.h). */
static inline size_t panel_pos(gemm_bf16_order order, int K, int k, int j) {
    if (order == GEMM_BF16_LANES) return (size_t)k * GEMM_NR + (size_t)bf16_slot(j);
    if ((k | 1) < K) return (size_t)(k & ~1) * GEMM_NR + 2 * (size_t)j + (size_t)(k & 1); /* a full step pair */
    return (size_t)k * GEMM_NR + (size_t)j;                                                 /* the lone last step */
}

/* Steps [pc, pc + kc) of a pre-packed bf16 panel (K steps, order `order`) → f32 micro-panel in natural order
 * (exact: bf16 widening). */
static void widen_bf16_panel(const uint16_t *panel, gemm_bf16_order order, int K, int pc, int kc, float *bp) {
    for (int k = 0; k < kc; k++)
        for (int j = 0; j < GEMM_NR; j++)
            bp[(size_t)k * GEMM_NR + j] = op_bf16_to_f32(panel[panel_pos(order, K, pc + k, j)]);
}

/* A kernel set. Micro-tile: mr rows x nr columns (nr = 16, or 32 = two adjacent 16-column panels; the second
 * pointer b1 is NULL for a 16-column tile at the N edge). Every set runs one chain of FMAs (or, scalar, multiply
 * then add) per element over a K block, so a tile's width never changes the bits. */
typedef struct gemm_kernels {
    int mr, nr, mc_max, nc_max;
    gemm_bf16_order order; /* the bf16 panel order ukr_bf16 reads (and gemm_pack_b writes under this set) */
    /* tail: NULL, or (sets with has_tail only) finish the tile into C (kernels_avx2.h, gemm_tail). */
    /* pf0, pf1, pfn: the next B tile to read towards L2 while this tile computes (kernels_avx512.h); a hint the
     * 16-column sets ignore. */
    void (*ukr)(int kc, const float *a, const float *b0, const float *b1, float *c, size_t ldc, int first,
                const gemm_tail *tail, const void *pf0, const void *pf1, int pfn);
    /* Same contract on bf16 panels in `order` widened in registers; NULL: widen into Bp, then ukr. bw: NULL, or
     * (sets with keeps_widened only) where to store the widened micro-panels, b0's at bw, b1's at bw + kc·16. */
    void (*ukr_bf16)(int kc, const float *a, const uint16_t *b0, const uint16_t *b1, float *c, size_t ldc,
                     int first, const gemm_tail *tail, float *bw);
    void (*pack_b)(const void *b, qvl_dtype dt, size_t ldb, int nr, int kc, float *bp); /* one 16-wide panel */
    void (*pack_a)(const float *a, size_t lda, int mr, int kc, float *ap);
    int has_tail; /* the microkernels finish tiles into C on the last K block (no epilogue pass over Cb) */
    /* ukr_bf16 can keep what it widens: the first tile of an M block widens the B micro-panel once and the other
     * tiles run ukr on the f32 copy (worth it where widening takes FMA slots: AVX-512's shift and masked load;
     * AVX2's unpacks run on a shuffle port beside the FMAs). */
    int keeps_widened;
} gemm_kernels;

/* 16-column sets: b1 is always NULL. */
static void ukr_scalar16(int kc, const float *a, const float *b0, const float *b1, float *c, size_t ldc, int first,
                         const gemm_tail *tail, const void *pf0, const void *pf1, int pfn) {
    (void)b1, (void)tail; /* has_tail = 0: always NULL */
    (void)pf0, (void)pf1, (void)pfn;
    ukr_scalar(kc, a, b0, c, ldc, first);
}
#if QVL_WITH_X86
static void ukr_avx2_16(int kc, const float *a, const float *b0, const float *b1, float *c, size_t ldc, int first,
                        const gemm_tail *tail, const void *pf0, const void *pf1, int pfn) {
    (void)b1, (void)pf0, (void)pf1, (void)pfn;
    gemm_ukr_6x16_avx2(kc, a, b0, c, ldc, first, tail);
}
static void ukr_avx2_16_bf16(int kc, const float *a, const uint16_t *b0, const uint16_t *b1, float *c, size_t ldc,
                             int first, const gemm_tail *tail, float *bw) {
    (void)b1, (void)bw; /* keeps_widened = 0: always NULL */
    gemm_ukr_6x16_bf16_avx2(kc, a, b0, c, ldc, first, tail);
}
#endif

static const gemm_kernels kernels_scalar = {.mr = GEMM_MR, .nr = GEMM_NR, .mc_max = GEMM_MC, .nc_max = GEMM_NC,
                                            .order = GEMM_BF16_LANES, .ukr = ukr_scalar16, .ukr_bf16 = NULL,
                                            .pack_b = pack_b_scalar, .pack_a = pack_a_scalar};
#if QVL_WITH_X86
static const gemm_kernels kernels_avx2 = {.mr = GEMM_MR, .nr = GEMM_NR, .mc_max = GEMM_MC, .nc_max = GEMM_NC,
                                          .order = GEMM_BF16_LANES, .ukr = ukr_avx2_16, .ukr_bf16 = ukr_avx2_16_bf16,
                                          .pack_b = gemm_pack_b16_avx2, .pack_a = gemm_pack_a6_avx2, .has_tail = 1};
/* mc 42 x nc 1536: the A block (63 KiB at kc 384) and Cb (252 KiB) leave L2 to the B stream. Measured with
 * bench_gemm, FLOP-weighted over qkv, proj, fc1 and fc2 at M = 784 on 2 threads, 4 alternating rounds: mc 42
 * 309 GFLOP/s, 84 307, 126 304 (widened panels kept); before they were kept, mc 112 was 2-4 % slower than 42. */
static const gemm_kernels kernels_avx512 = {.mr = 14, .nr = 2 * GEMM_NR, .mc_max = 42, .nc_max = GEMM_NC_MAX,
                                            .order = GEMM_BF16_PAIRS, .ukr = gemm_ukr_14x32_avx512,
                                            .ukr_bf16 = gemm_ukr_14x32_bf16_avx512, .pack_b = gemm_pack_b16_avx2,
                                            .pack_a = gemm_pack_a14_avx512, .has_tail = 1, .keeps_widened = 1};
#endif

gemm_isa gemm_auto_isa(void) { return (gemm_isa)cpu_level(); /* the same numbering */ }

static const gemm_kernels *kernels_for(gemm_isa isa) {
    switch (isa == GEMM_ISA_AUTO ? gemm_auto_isa() : isa) {
#if QVL_WITH_X86
    case GEMM_ISA_AVX512: return &kernels_avx512;
    case GEMM_ISA_AVX2: return &kernels_avx2;
#endif
    default: return &kernels_scalar;
    }
}

/* ---- pre-packed weights ---- */

static qvl_dtype panel_dtype(qvl_dtype dtype, gemm_panel which) {
    return which == GEMM_PANEL_AUTO && dtype == QVL_DTYPE_BF16 ? QVL_DTYPE_BF16 : QVL_DTYPE_F32;
}

size_t gemm_pack_size(int N, int K, qvl_dtype dtype, gemm_panel which) {
    if (N <= 0 || K <= 0) return 0;
    const size_t esz = panel_dtype(dtype, which) == QVL_DTYPE_BF16 ? 2 : 4;
    const size_t bytes = (size_t)(N + GEMM_NR - 1) / GEMM_NR * GEMM_NR * (size_t)K * esz;
    return (bytes + 63) & ~(size_t)63;
}

typedef struct pack_job {
    const gemm_kernels *kr;
    const unsigned char *B;
    qvl_dtype dtype, pd;
    size_t ldb, esz;
    int N, K;
    void *buf;
} pack_job;

static void pack_panel(void *ctx, long p, int thread) {
    (void)thread;
    const pack_job *j = ctx;
    const int K = j->K, j0 = (int)p * GEMM_NR, nr = j->N - j0 < GEMM_NR ? j->N - j0 : GEMM_NR;
    const unsigned char *b = j->B + (size_t)j0 * j->ldb * j->esz;
    if (j->pd == QVL_DTYPE_F32) {
        j->kr->pack_b(b, j->dtype, j->ldb, nr, K, (float *)j->buf + (size_t)p * K * GEMM_NR);
        return;
    }
    /* bf16 → bf16: a permuted copy of the bits. */
    uint16_t *d = (uint16_t *)j->buf + (size_t)p * K * GEMM_NR;
    for (int k = 0; k < K; k++)
        for (int c = 0; c < GEMM_NR; c++) {
            uint16_t h = 0;
            if (c < nr) memcpy(&h, b + ((size_t)c * j->ldb + (size_t)k) * 2, 2);
            d[panel_pos(j->kr->order, K, k, c)] = h;
        }
}

int gemm_pack_b_isa(gemm_packed *out, void *buf, const void *B, qvl_dtype dtype, size_t ldb, int N, int K,
                    gemm_panel which, thread_pool *pool, gemm_isa isa) {
    if (!out || !buf || !B || N <= 0 || K <= 0 || ldb < (size_t)K || ((uintptr_t)buf & 63)) return -1;
    const qvl_dtype pd = panel_dtype(dtype, which);
    pack_job j = {kernels_for(isa), B, dtype, pd, ldb, dtype == QVL_DTYPE_F32 ? 4 : 2, N, K, buf};
    pool_run(pool, (N + GEMM_NR - 1) / GEMM_NR, pack_panel, &j);
    out->N = N;
    out->K = K;
    out->dtype = pd;
    out->order = pd == QVL_DTYPE_BF16 ? j.kr->order : GEMM_BF16_LANES;
    out->arith = BE_ARITH_F32;
    out->kp_panel = 0;
    out->rope_hd = 0;
    out->data = buf;
    return 0;
}

int gemm_pack_b(gemm_packed *out, void *buf, const void *B, qvl_dtype dtype, size_t ldb, int N, int K,
                gemm_panel which, thread_pool *pool) {
    return gemm_pack_b_isa(out, buf, B, dtype, ldb, N, K, which, pool, GEMM_ISA_AUTO);
}

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

typedef struct gemm_plan {
    int tiles_m;      /* MR-row tiles covering M */
    int nb_m;         /* M blocks: block b holds tiles [b·tiles_m/nb_m, (b+1)·tiles_m/nb_m), never more than mc_max rows */
    int nc, kc;       /* N and K block sizes: <= nc_max / GEMM_KC, multiples of nr / 8 */
    int nb_n;         /* blocks along N */
} gemm_plan;

/* The first micro-tile of M block b of a plan (b = nb_m: one past the last): blocks of near-equal tile counts. */
static inline int plan_tile0(const gemm_plan *p, long b) { return (int)(b * p->tiles_m / p->nb_m); }

/* The work of an item of a plan, in units of one micro-tile times one column: its tiles times its columns, plus a
 * quarter tile on each column for streaming B through the cache (an item of fewer rows reads B for fewer). */
#define GEMM_ITEM_WORK(tiles, cols) (((double)(tiles) + 0.25) * (double)(cols))

typedef struct plan_items {
    const gemm_plan *p;
    int N;
} plan_items;

/* Item i of a plan in gemm_run_isa's order (N-major: N block i / nb_m, M block i % nb_m): its work. */
static double plan_item_work(const void *ctx, long i) {
    const plan_items *q = ctx;
    const gemm_plan *p = q->p;
    const int jb = (int)(i / p->nb_m), b = (int)(i % p->nb_m);
    const int cols = q->N - jb * p->nc < p->nc ? q->N - jb * p->nc : p->nc;
    return GEMM_ITEM_WORK(plan_tile0(p, b + 1) - plan_tile0(p, b), cols);
}

/* The time the pool takes over a plan's items (pool_finish_time). O(items x threads): make_plan calls it once. */
static double plan_time(const gemm_plan *p, int N, int n_threads) {
    const plan_items q = {p, N};
    return pool_finish_time(n_threads, (long)p->nb_m * p->nb_n, plan_item_work, &q);
}

/* An upper bound on plan_time in O(1), for weighing many splits: as many rounds as it takes every thread to run
 * one item, each as long as the largest item (exact when the items are equal). */
static double plan_time_bound(const gemm_plan *p, int n_threads) {
    const long items = (long)p->nb_m * p->nb_n, rounds = (items + n_threads - 1) / n_threads;
    return (double)rounds * GEMM_ITEM_WORK((p->tiles_m + p->nb_m - 1) / p->nb_m, p->nc);
}

/* M blocks of near-equal tile counts (no sliver of a block that would stream all of B for a row or two) and even
 * N blocks, so the dynamic schedule has items of similar cost; kc depends on K only and no K block is too short to
 * amortise its Cb update: the same summation order for every M, N, thread count and B layout. */
static gemm_plan make_plan(int M, int N, int K, const gemm_kernels *kr, int n_threads) {
    gemm_plan p;
    const int nb_k = K > 0 ? (K + GEMM_KC - 1) / GEMM_KC : 1;
    p.kc = ((K + nb_k - 1) / nb_k + 7) / 8 * 8;
    if (p.kc > GEMM_KC) p.kc = GEMM_KC;
    if (p.kc < 8) p.kc = 8;
    const int tiles_max = kr->mc_max / kr->mr;
    p.tiles_m = (M + kr->mr - 1) / kr->mr;
    p.nb_m = (p.tiles_m + tiles_max - 1) / tiles_max;
    p.nb_n = (N + kr->nc_max - 1) / kr->nc_max;
    p.nc = ((N + p.nb_n - 1) / p.nb_n + kr->nr - 1) / kr->nr * kr->nr; /* nc_max is a multiple of nr */
    p.nb_n = (N + p.nc - 1) / p.nc;
    /* Items the threads cannot share evenly leave all but one thread idle for the last round (57 items on 2
     * threads: 29 rounds for 28.5 rounds' work). Split M finer, up to twice as many blocks and one tile a block at
     * least, to the first count that is a multiple of the thread count; failing that, to the first that gives 16
     * items a thread, where the last round's loss is small. */
    const int nb_m0 = p.nb_m;
    if (n_threads > 1 && (p.nb_m * p.nb_n) % n_threads) {
        int pick = 0;
        for (int pass = 0; pass < 2 && !pick; pass++)
            for (int nbm = p.nb_m; nbm <= 2 * p.nb_m && nbm <= p.tiles_m; nbm++) {
                const int items = nbm * p.nb_n;
                if (items % n_threads == 0 || (pass == 1 && items >= 16 * n_threads)) {
                    pick = nbm;
                    break;
                }
            }
        if (pick) p.nb_m = pick;
    }
    /* Fewer than 16 items a thread can still leave threads idle when the blocks differ (14 tiles in 6 blocks of 2
     * or 3 on 2 threads: 8 tiles' work for one thread, 6 for the other). There, weigh splitting M finer (up to
     * twice the blocks) and N finer too (up to four times, in whole nr-wide panels): a split replaces the plan when
     * its plan_time_bound is 3 % below the plan's own plan_time, or below the bound of the split taken so far (14
     * tiles x 1152 columns on 2 threads: 7 x 2 items of 2 tiles x 576 columns). */
    const int n_units = (N + kr->nr - 1) / kr->nr;
    if (n_threads > 1 && n_threads <= GEMM_PLAN_THREADS_MAX && p.nb_m * p.nb_n < 16 * n_threads) {
        gemm_plan best = p, q = p;
        double best_time = plan_time(&p, N, n_threads);
        for (int nbn = p.nb_n; nbn <= 4 * p.nb_n && nbn <= n_units; nbn++) {
            q.nc = (n_units + nbn - 1) / nbn * kr->nr;
            q.nb_n = (N + q.nc - 1) / q.nc;
            if (q.nb_n != nbn) continue; /* not a distinct split into whole panels */
            for (q.nb_m = nb_m0; q.nb_m <= 2 * nb_m0 && q.nb_m <= p.tiles_m; q.nb_m++) {
                const double t = plan_time_bound(&q, n_threads);
                if (t < 0.97 * best_time) best = q, best_time = t;
            }
        }
        p = best;
    }
    return p;
}

static void gemm_item(const gemm_args *g, const gemm_kernels *kr, const gemm_packed *pk, int KC, int i0, int mc,
                      int j0, int nc, unsigned char *ws) {
    float *ap = (float *)(void *)ws;
    float *bp = (float *)(void *)(ws + GEMM_AP_BYTES);
    float *cb = (float *)(void *)(ws + GEMM_AP_BYTES + GEMM_BP_BYTES);
    const size_t esz = g->b_dtype == QVL_DTYPE_F32 ? 4 : 2;
    const unsigned char *b = (const unsigned char *)g->B;
    const int in_regs = pk && pk->dtype == QVL_DTYPE_BF16 && kr->ukr_bf16 && pk->order == kr->order;
    const int MR = kr->mr;
    const size_t pstride = (size_t)GEMM_NR * (size_t)g->K; /* elements from one packed panel to the next */
    /* Fused finish: the last K block's tiles go straight into C, bias, GELU and residual applied in the kernel. */
    const int fuse = kr->has_tail && g->K > 0;
    /* bf16 panels widened once per micro-panel, by the M block's first tile, when there is a second tile. */
    const int keep = in_regs && kr->keeps_widened && mc > MR;

    if (g->K <= 0)
        for (int i = 0; i < mc; i++) memset(cb + (size_t)i * GEMM_NC_MAX, 0, (size_t)nc * sizeof(float));
    for (int pc = 0; pc < g->K; pc += KC) {
        const int kc = g->K - pc < KC ? g->K - pc : KC;
        const int finish = fuse && pc + kc >= g->K;
        for (int ir = 0; ir < mc; ir += MR) {
            const int mr = mc - ir < MR ? mc - ir : MR;
            kr->pack_a(g->A + (size_t)(i0 + ir) * g->lda + (size_t)pc, g->lda, mr, kc, ap + (size_t)ir * kc);
        }
        for (int jr = 0; jr < nc; jr += kr->nr) {
            const int two = nc - jr > GEMM_NR; /* a second panel in this tile (only when kr->nr is 32) */
            /* Panel (j0 + jr) / NR of a packed weight starts at element (j0 + jr)·K; step pc at + pc·NR. */
            const size_t poff = (size_t)(j0 + jr) * g->K + (size_t)pc * GEMM_NR;
            float *cj = cb + jr;
            gemm_tail tail = {g->C + (size_t)i0 * g->ldc + (size_t)(j0 + jr), g->ldc, g->bias ? g->bias + j0 + jr : NULL,
                              0, nc - jr < kr->nr ? nc - jr : kr->nr, g->accumulate, g->epilogue};
            const float *b0 = bp, *b1 = two ? bp + (size_t)GEMM_KC * GEMM_NR : NULL;
            const uint16_t *h0 = NULL, *h1 = NULL;
            if (in_regs) {
                h0 = (const uint16_t *)pk->data + poff;
                h1 = two ? h0 + pstride : NULL;
                b1 = two ? bp + (size_t)kc * GEMM_NR : NULL; /* where a kept widened copy puts the second panel */
            } else if (pk && pk->dtype == QVL_DTYPE_F32) {
                b0 = (const float *)pk->data + poff;
                b1 = two ? b0 + pstride : NULL;
            } else {
                for (int t = 0; t <= two; t++) {
                    float *dst = bp + (size_t)t * GEMM_KC * GEMM_NR;
                    const int jt = j0 + jr + t * GEMM_NR;
                    if (pk) /* no widening ukr for this panel order */
                        widen_bf16_panel((const uint16_t *)pk->data + (size_t)jt * g->K, pk->order, g->K, pc, kc, dst);
                    else
                        kr->pack_b(b + ((size_t)jt * g->ldb + (size_t)pc) * esz, g->b_dtype, g->ldb,
                                   j0 + nc - jt < GEMM_NR ? j0 + nc - jt : GEMM_NR, kc, dst);
                }
            }
            /* The last micro-tile on this B tile (one of the f32 kernel's: with keep, not the first) reads the
             * next B tile of the pre-packed weight (the next nr columns, else the first tile of the next K block)
             * towards L2: else the first tile on each B tile waits on L3 or memory. Measured single thread, M 784,
             * bench_gemm bf16 panels, old and new build alternated: fc2 (K 4304, 9.9 MB of weights streamed once
             * per 42-row M block) 94-98 -> 101-105 GFLOP per CPU-second (5 runs), f32 panels 86-98 -> 92-100;
             * the other tower shapes (K 1152, their weights stay in L3) and two threads (fc2 +1-2 %) unchanged
             * within the noise. The pointers stay inside the weight (a clamped line count; a bf16 step is 32
             * bytes, an f32 step 64). Also measured: the second tile reading ahead instead of the last, or the read
             * spread over all the f32 tiles: no better; _MM_HINT_T0 instead of T1: no better. The 16-column sets
             * ignore it (not tried: their M block runs up to 24 tiles per B panel, so the first tile's wait weighs
             * less there). */
            const void *pf0 = NULL, *pf1 = NULL;
            int pfn = 0;
            if (kr->nr > GEMM_NR && (keep || (pk && pk->dtype == QVL_DTYPE_F32))) {
                size_t noff = 0; /* element offset of the next tile in the packed weight */
                int ntwo = 0, nkc = 0;
                if (jr + kr->nr < nc) {
                    noff = poff + (size_t)kr->nr * (size_t)g->K;
                    ntwo = nc - (jr + kr->nr) > GEMM_NR;
                    nkc = kc;
                } else if (pc + kc < g->K) {
                    noff = (size_t)j0 * g->K + (size_t)(pc + kc) * GEMM_NR;
                    ntwo = nc > GEMM_NR;
                    nkc = g->K - (pc + kc) < KC ? g->K - (pc + kc) : KC;
                }
                if (nkc) {
                    const size_t esz_p = in_regs ? 2 : 4;
                    pf0 = (const unsigned char *)pk->data + noff * esz_p;
                    pf1 = ntwo ? (const unsigned char *)pf0 + pstride * esz_p : NULL;
                    pfn = in_regs ? (nkc + 1) / 2 : nkc;
                }
            }
            for (int ir = 0; ir < mc; ir += MR) {
                const gemm_tail *tp = NULL;
                if (finish) {
                    tail.rows = mc - ir < MR ? mc - ir : MR;
                    tp = &tail;
                }
                float *ct = cj + (size_t)ir * GEMM_NC_MAX;
                if (in_regs && (!keep || ir == 0)) /* keep: the first tile leaves the widened panels in Bp */
                    kr->ukr_bf16(kc, ap + (size_t)ir * kc, h0, h1, ct, GEMM_NC_MAX, pc == 0, tp, keep ? bp : NULL);
                else {
                    const int lastm = ir + MR >= mc;
                    kr->ukr(kc, ap + (size_t)ir * kc, b0, b1, ct, GEMM_NC_MAX, pc == 0, tp, lastm ? pf0 : NULL,
                            lastm ? pf1 : NULL, pfn);
                }
                tail.c += (size_t)MR * g->ldc;
            }
        }
    }
    for (int i = 0; i < mc && !fuse; i++) {
        float *t = cb + (size_t)i * GEMM_NC_MAX, *c = g->C + (size_t)(i0 + i) * g->ldc + j0;
        const float *bias = g->bias ? g->bias + j0 : NULL;
        epilogue_row(t, bias, nc, g->epilogue, c, g->accumulate);
    }
}

typedef struct gemm_job {
    const gemm_args *g;
    const gemm_kernels *kr;
    const gemm_packed *pk;
    gemm_plan pl;
    unsigned char *ws;
} gemm_job;

static void gemm_task(void *ctx, long it, int thread) {
    const gemm_job *j = ctx;
    const gemm_args *g = j->g;
    const long b = it % j->pl.nb_m;
    const int mr = j->kr->mr, t0 = plan_tile0(&j->pl, b), t1 = plan_tile0(&j->pl, b + 1);
    const int i0 = t0 * mr, i1 = t1 * mr < g->M ? t1 * mr : g->M, mc = i1 - i0;
    const int j0 = (int)(it / j->pl.nb_m) * j->pl.nc, nc = g->N - j0 < j->pl.nc ? g->N - j0 : j->pl.nc;
    gemm_item(g, j->kr, j->pk, j->pl.kc, i0, mc, j0, nc, j->ws + (size_t)thread * GEMM_THREAD_BYTES);
}

void gemm_run_isa(const gemm_args *g, void *ws, thread_pool *pool, gemm_isa isa) {
    if (g->M <= 0 || g->N <= 0) return;
    gemm_job j;
    j.g = g;
    j.kr = kernels_for(isa);
    j.pk = g->Bp && g->Bp->N == g->N && g->Bp->K == g->K && g->K > 0 ? g->Bp : NULL;
    j.pl = make_plan(g->M, g->N, g->K, j.kr, pool_size(pool));
    j.ws = (unsigned char *)(((uintptr_t)ws + 63) & ~(uintptr_t)63);
    /* Items in N-major order so items running close in time share the same B columns (warm in L2/L3). Dynamic
     * hand-out keeps every core busy when blocks differ in cost or a core is shared; which thread computes an
     * item does not change its bits. */
    pool_run(pool, (long)j.pl.nb_m * j.pl.nb_n, gemm_task, &j);
}

void gemm_run(const gemm_args *g, void *ws, thread_pool *pool) { gemm_run_isa(g, ws, pool, GEMM_ISA_AUTO); }

/* Element k of row j of a packed weight, as f32. */
static inline float packed_elem(const gemm_packed *pk, int j, int k) {
    const size_t base = (size_t)(j / GEMM_NR) * pk->K * GEMM_NR;
    if (pk->dtype == QVL_DTYPE_F32)
        return ((const float *)pk->data)[base + (size_t)k * GEMM_NR + (size_t)(j % GEMM_NR)];
    return op_bf16_to_f32(((const uint16_t *)pk->data)[base + panel_pos(pk->order, pk->K, k, j % GEMM_NR)]);
}

void gemm_ref(const gemm_args *g) {
    const gemm_packed *pk = g->Bp && g->Bp->N == g->N && g->Bp->K == g->K ? g->Bp : NULL;
    for (int i = 0; i < g->M; i++)
        for (int j = 0; j < g->N; j++) {
            const float *a = g->A + (size_t)i * g->lda;
            float s = 0.0f;
            if (pk)
                for (int k = 0; k < g->K; k++) s += a[k] * packed_elem(pk, j, k);
            else
                for (int k = 0; k < g->K; k++) s += a[k] * b_elem(g->B, g->b_dtype, g->ldb, (size_t)j, (size_t)k);
            epilogue_row(&s, g->bias ? g->bias + j : NULL, 1, g->epilogue, g->C + (size_t)i * g->ldc + j,
                         g->accumulate);
        }
}
