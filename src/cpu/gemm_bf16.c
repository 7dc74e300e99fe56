/* gemm_bf16.c — the bf16 GEMM (precision bf16; arithmetic defined in bf16.h): weight packing into pair panels,
 * the blocked driver, the portable micro-tile and the element-by-element definition.
 *
 * Driver: items are (M block of up to BF16_MC rows, N block of up to BF16_NC columns), handed out dynamically to
 * the pool's threads. Per item, K runs in blocks of BF16_KP pair steps: A's rows are rounded to bf16 pairs into a
 * per-thread micro-panel block, each 32-column B tile (two panels, read in place) is streamed against every
 * 14-row A micro-panel, and the micro-tiles continue their f32 chains in a per-thread partial-sum block Cb. After
 * the last K block the epilogue (bias, GELU, residual) runs once per element. While a K block runs, the next
 * one's A rows are read ahead towards L2 (a_prefetch). K is never split across threads
 * and every element's chain runs over k from 0 in order, so results are bit-identical for any thread count, any
 * blocking, and between the portable and the AVX512-BF16 micro-tiles. */
#include <stdint.h>
#include <string.h>

#include "core/cpu.h"
#include "cpu/bf16.h"
#include "cpu/ops.h"

enum {
    BF16_NR = 16,    /* panel width; a micro-tile spans two panels */
    BF16_MC = 42,    /* rows per M block (3 micro-tiles; the MLP row chunks are multiples of it) */
    BF16_NC = 1536,  /* columns per N block (Cb's row stride) */
};

#define BF16_AP_BYTES ((size_t)BF16_MC * BF16_KP * 4)
#define BF16_CB_BYTES ((size_t)BF16_MC * BF16_NC * 4)
#define BF16_THREAD_BYTES (BF16_AP_BYTES + BF16_CB_BYTES)

size_t gemm_bf16_workspace_size(int n_threads) {
    if (n_threads < 1) n_threads = 1;
    return (size_t)n_threads * BF16_THREAD_BYTES + 64;
}

/* Pair steps stored per panel: (K + 1) / 2, or for the AMX GEMM padded to whole 16-pair tiles. */
static int kp_panel(int K, int amx) { return amx ? (K + 31) / 32 * 16 : (K + 1) / 2; }

static size_t pack_size(int N, int K, int amx) {
    if (N <= 0 || K <= 0) return 0;
    const size_t bytes = (size_t)(N + BF16_NR - 1) / BF16_NR * BF16_NR * (size_t)kp_panel(K, amx) * 4;
    return (bytes + 63) & ~(size_t)63;
}
size_t gemm_bf16_pack_size(int N, int K) { return pack_size(N, K, 0); }
size_t gemm_amx_pack_size(int N, int K) { return pack_size(N, K, 1); }

/* Element (j, k) of B as bf16 bits: bf16 as stored, f32 / f16 rounded to nearest even. Inlined into each
 * dtype's loop of bpack_panel (the dtype a constant there). */
static inline __attribute__((always_inline)) uint16_t b_bf16(const unsigned char *B, qvl_dtype dt, size_t ldb,
                                                             size_t j, size_t k) {
    if (dt == QVL_DTYPE_BF16) {
        uint16_t h;
        memcpy(&h, B + (j * ldb + k) * 2, 2);
        return h;
    }
    if (dt == QVL_DTYPE_F16) {
        uint16_t h;
        memcpy(&h, B + (j * ldb + k) * 2, 2);
        return bf16_round(op_f16_to_f32(h));
    }
    float f;
    memcpy(&f, B + (j * ldb + k) * 4, 4);
    return bf16_round(f);
}

typedef struct bpack_job {
    const unsigned char *B;
    qvl_dtype dt;
    size_t ldb;
    int N, K, kpp;
    int rope_hd; /* 0, or the panels' columns in the rotary order of qkv_rope_col */
    uint32_t *buf;
} bpack_job;

/* Panel p's pair steps: a column (one row of B, read along k) at a time, zero past N and K. */
static inline __attribute__((always_inline)) void bpack_panel_dt(const bpack_job *j, long p, qvl_dtype dt) {
    const int j0 = (int)p * BF16_NR, K = j->K;
    uint32_t *d = j->buf + (size_t)p * j->kpp * BF16_NR;
    for (int c = 0; c < BF16_NR; c++) {
        if (j0 + c >= j->N) {
            for (int q = 0; q < j->kpp; q++) d[(size_t)q * BF16_NR + c] = 0;
            continue;
        }
        const size_t n = (size_t)(j->rope_hd ? qkv_rope_col(j->N / 3, j->rope_hd, j0 + c) : j0 + c);
        int q = 0;
        for (; 2 * q + 1 < K; q++)
            d[(size_t)q * BF16_NR + c] = (uint32_t)b_bf16(j->B, dt, j->ldb, n, (size_t)(2 * q)) |
                                         (uint32_t)b_bf16(j->B, dt, j->ldb, n, (size_t)(2 * q + 1)) << 16;
        if (2 * q < K) { /* odd K: the last pair's high half zero */
            d[(size_t)q * BF16_NR + c] = b_bf16(j->B, dt, j->ldb, n, (size_t)(2 * q));
            q++;
        }
        for (; q < j->kpp; q++) d[(size_t)q * BF16_NR + c] = 0;
    }
}

static void bpack_panel(void *ctx, long p, int thread) {
    (void)thread;
    const bpack_job *j = ctx;
    switch (j->dt) {
    case QVL_DTYPE_BF16: bpack_panel_dt(j, p, QVL_DTYPE_BF16); return;
    case QVL_DTYPE_F16: bpack_panel_dt(j, p, QVL_DTYPE_F16); return;
    default: bpack_panel_dt(j, p, QVL_DTYPE_F32); return;
    }
}

static int pack(be_weight *out, void *buf, const void *B, qvl_dtype dtype, size_t ldb, int N, int K, int amx,
                int rope_hd, thread_pool *pool) {
    if (!out || !buf || !B || N <= 0 || K <= 0 || ldb < (size_t)K || ((uintptr_t)buf & 63)) return -1;
    bpack_job j = {B, dtype, ldb, N, K, kp_panel(K, amx), rope_hd, buf};
    pool_run(pool, (N + BF16_NR - 1) / BF16_NR, bpack_panel, &j);
    out->N = N;
    out->K = K;
    out->dtype = QVL_DTYPE_BF16;
    out->order = 0;
    out->arith = BE_ARITH_BF16;
    out->kp_panel = j.kpp;
    out->rope_hd = rope_hd;
    out->data = buf;
    return 0;
}

int gemm_bf16_pack(be_weight *out, void *buf, const void *B, qvl_dtype dtype, size_t ldb, int N, int K,
                   thread_pool *pool) {
    return pack(out, buf, B, dtype, ldb, N, K, 0, 0, pool);
}

int gemm_amx_pack(be_weight *out, void *buf, const void *B, qvl_dtype dtype, size_t ldb, int N, int K,
                  thread_pool *pool) {
    return pack(out, buf, B, dtype, ldb, N, K, 1, 0, pool);
}

int gemm_amx_pack_qkv(be_weight *out, void *buf, const void *B, qvl_dtype dtype, size_t ldb, int N, int K,
                      int head_dim, thread_pool *pool) {
    if (N % 3 || !qkv_rope_takes(N / 3, head_dim)) return -1;
    return pack(out, buf, B, dtype, ldb, N, K, 1, head_dim, pool);
}

/* ---- portable micro-tile and A packer ---- */

/* The definition's loop: one element at a time, each pair step with fmaf (any operands). */
static void ukr_exact(int kp, const uint32_t *a, const uint32_t *b0, const uint32_t *b1, float *c, size_t ldc,
                      int first) {
    const int nr = b1 ? 2 * BF16_NR : BF16_NR;
    for (int i = 0; i < BF16_MR; i++)
        for (int j = 0; j < nr; j++) {
            const uint32_t *b = j < BF16_NR ? b0 + j : b1 + (j - BF16_NR);
            float acc = first ? 0.0f : c[(size_t)i * ldc + j];
            for (int q = 0; q < kp; q++) {
                const uint32_t x = a[(size_t)i * BF16_KP + q], y = b[(size_t)q * BF16_NR];
                acc = bf16_pair(acc, bf16_float((uint16_t)x), bf16_float((uint16_t)y), bf16_float((uint16_t)(x >> 16)),
                                bf16_float((uint16_t)(y >> 16)));
            }
            c[(size_t)i * ldc + j] = acc;
        }
}

/* Exponent fields of n bf16 pairs (both halves): the largest, and the smallest of the nonzero ones (255 if none;
 * a denormal's field is 0, so it counts as zero, as the arithmetic reads it). Branch-free on the magnitudes
 * (field = |h| >> 7), so the compiler vectorises it. */
static void pair_exponents(const uint32_t *p, size_t n, size_t stride, int width, int *emax, int *emin) {
    uint32_t mx = (uint32_t)*emax << 7, mn = (uint32_t)*emin << 7;
    for (size_t r = 0; r < n; r++)
        for (int c = 0; c < width; c++) {
            const uint32_t w = p[r * stride + (size_t)c], lo = w & 0x7fffu, hi = (w >> 16) & 0x7fffu;
            const uint32_t big = lo > hi ? lo : hi, small = lo < hi ? lo : hi;
            mx = big > mx ? big : mx;
            const uint32_t nz = small >= 0x80u ? small : big >= 0x80u ? big : 0x7fffu; /* the smaller nonzero one */
            mn = nz < mn ? nz : mn;
        }
    *emax = (int)(mx >> 7), *emin = (int)(mn >> 7);
}

/* One pair step of a 16-column panel as f32, low and high halves apart, denormals read as zero. */
static inline void unpack_pairs(const uint32_t *p, float *lo, float *hi) {
    for (int j = 0; j < BF16_NR; j++) {
        lo[j] = bf16_daz(bf16_float((uint16_t)p[j]));
        hi[j] = bf16_daz(bf16_float((uint16_t)(p[j] >> 16)));
    }
}

/* The same chains, vectorisable: where no operand is infinite or NaN and every product x·y of nonzero operands
 * lies in [FLT_MIN, 2^128) — decided from the exponent fields, 2^(ea+eb−254) <= |x·y| < 2^(ea+eb−252) —
 * each product of two bf16 values (8-bit significands) is exact in f32, so fma(x, y, acc) = acc + x·y with the
 * product and the sum each rounded once (the sum is the only rounding): the definition's bits. Contracting
 * acc + x·y into an fma would give them too.
 * daz = 0 where moreover every product is a multiple of 2^-126 (fields summing to 142 or more: a product is
 * (significand product, 16 bits)·2^(ea+eb−268)) and so is every chain's start (0, or partial sums in c that are, no_denormal_start):
 * then so is every exact sum, and its rounding (a sum under 2^-103 is exact; at or above it, f32's spacing is a
 * multiple of 2^-126), so no partial sum is ever denormal and the daz steps change nothing. */
static inline __attribute__((always_inline)) void ukr_fast(int kp, const uint32_t *a, const uint32_t *b0,
                                                           const uint32_t *b1, float *c, size_t ldc, int first,
                                                           int nr, int daz) {
    float acc[BF16_MR][2 * BF16_NR], y0[2 * BF16_NR], y1[2 * BF16_NR];
    for (int i = 0; i < BF16_MR; i++)
        for (int j = 0; j < nr; j++) acc[i][j] = first ? 0.0f : bf16_daz(c[(size_t)i * ldc + j]);
    for (int q = 0; q < kp; q++) {
        unpack_pairs(b0 + (size_t)q * BF16_NR, y0, y1);
        if (nr > BF16_NR) unpack_pairs(b1 + (size_t)q * BF16_NR, y0 + BF16_NR, y1 + BF16_NR);
        for (int i = 0; i < BF16_MR; i++) {
            const uint32_t x = a[(size_t)i * BF16_KP + q];
            const float x0 = bf16_daz(bf16_float((uint16_t)x)), x1 = bf16_daz(bf16_float((uint16_t)(x >> 16)));
            if (daz)
                for (int j = 0; j < nr; j++) {
                    const float t = bf16_daz(acc[i][j] + x1 * y1[j]);
                    acc[i][j] = bf16_daz(t + x0 * y0[j]);
                }
            else
                for (int j = 0; j < nr; j++) acc[i][j] = acc[i][j] + x1 * y1[j] + x0 * y0[j];
        }
    }
    for (int i = 0; i < BF16_MR; i++)
        for (int j = 0; j < nr; j++) c[(size_t)i * ldc + j] = acc[i][j];
}

/* Every partial sum of the tile in c is 0 or a multiple of 2^-126 (f32: zero, or a field of 24 or more, i.e.
 * |x| >= 2^-103; smaller nonzero values are taken not to be, whatever their bits). */
static int no_denormal_start(const float *c, size_t ldc, int nr) {
    int ok = 1;
    for (int i = 0; i < BF16_MR; i++)
        for (int j = 0; j < nr; j++) {
            uint32_t u;
            memcpy(&u, &c[(size_t)i * ldc + j], 4);
            u &= 0x7fffffffu;
            ok &= u == 0 || u >= 24u << 23;
        }
    return ok;
}

static void ukr_portable(int kp, const uint32_t *a, const uint32_t *b0, const uint32_t *b1, float *c, size_t ldc,
                         int first, const uint32_t *pf0, const uint32_t *pf1, int pfn) {
    (void)pf0, (void)pf1, (void)pfn;
    int amax = 0, amin = 255, bmax = 0, bmin = 255;
    pair_exponents(a, BF16_MR, BF16_KP, kp, &amax, &amin);
    pair_exponents(b0, (size_t)kp, BF16_NR, BF16_NR, &bmax, &bmin);
    if (b1) pair_exponents(b1, (size_t)kp, BF16_NR, BF16_NR, &bmax, &bmin);
    const int nr = b1 ? 2 * BF16_NR : BF16_NR;
    if (!bf16_products_exact(amax, amin, bmax, bmin)) ukr_exact(kp, a, b0, b1, c, ldc, first);
    else if (amin + bmin >= 142 && (first || no_denormal_start(c, ldc, nr))) {
        if (b1) ukr_fast(kp, a, b0, b1, c, ldc, first, 2 * BF16_NR, 0);
        else ukr_fast(kp, a, b0, b1, c, ldc, first, BF16_NR, 0);
    } else if (b1) ukr_fast(kp, a, b0, b1, c, ldc, first, 2 * BF16_NR, 1);
    else ukr_fast(kp, a, b0, b1, c, ldc, first, BF16_NR, 1);
}

static void pack_a_portable(const float *a, size_t lda, int mr, int kp, int kvalid, uint32_t *ap) {
    for (int q = 0; q < kp; q++)
        for (int i = 0; i < BF16_MR; i++) {
            uint32_t lo = 0, hi = 0;
            if (i < mr) {
                if (2 * q < kvalid) lo = bf16_round(a[(size_t)i * lda + 2 * (size_t)q]);
                if (2 * q + 1 < kvalid) hi = bf16_round(a[(size_t)i * lda + 2 * (size_t)q + 1]);
            }
            ap[(size_t)i * BF16_KP + q] = lo | hi << 16;
        }
}

/* ---- epilogue (the f32 GEMM's operations in its order: + bias, GELU, then store or add) ---- */

void gemm_bf16_epilogue_row(float *t, const float *bias, int n, be_act act, float *c, int accumulate) {
    if (bias)
        for (int j = 0; j < n; j++) t[j] = t[j] + bias[j];
    if (act == BE_ACT_GELU_TANH) op_gelu_tanh(t, (size_t)n);
    else if (act == BE_ACT_GELU_ERF) op_gelu_erf(t, (size_t)n);
    if (accumulate)
        for (int j = 0; j < n; j++) c[j] = c[j] + t[j];
    else
        memcpy(c, t, (size_t)n * sizeof(float));
}

/* ---- driver ---- */

typedef struct bgemm_job {
    const be_weight *w;
    const float *A;
    size_t lda;
    int M;
    const float *bias;
    float *C;
    size_t ldc;
    int accumulate;
    be_act act;
    gemm_bf16_ukr_fn ukr;
    gemm_bf16_pack_a_fn pack_a;
    int nb_m;
    unsigned char *ws;
} bgemm_job;

/* Lines of A to read ahead: `rows` rows from `row` (`stride` bytes apart), bytes [0, bytes) of each, `per` lines
 * per step; r and off: the next line. */
typedef struct a_prefetch {
    const char *row;
    size_t stride;
    int rows, bytes, per, r, off;
} a_prefetch;

static void a_prefetch_init(a_prefetch *p, const bgemm_job *j, int i0, int mc, int q_next, int steps) {
    const be_weight *w = j->w;
    int row0 = i0, rows = mc, k = 2 * q_next;
    if (k >= w->K) { /* this item's last K block: the next M block's first */
        row0 = i0 + mc, rows = j->M - row0 < BF16_MC ? j->M - row0 : BF16_MC, k = 0;
    }
    p->bytes = (w->K - k < 2 * BF16_KP ? w->K - k : 2 * BF16_KP) * 4;
    p->rows = rows > 0 ? rows : 0;
    p->row = (const char *)(j->A + (p->rows ? (size_t)row0 * j->lda + (size_t)k : 0));
    p->stride = j->lda * sizeof(float);
    const int lines = p->rows * ((p->bytes + 63) / 64 + 1);
    p->per = (lines + steps - 1) / steps;
    p->r = 0, p->off = 0;
}

static inline void a_prefetch_step(a_prefetch *p) {
    for (int q = 0; q < p->per && p->r < p->rows; q++) {
        if (p->off >= p->bytes) { /* the line of the row's last byte, then the next row (never past the last) */
            __builtin_prefetch(p->row + p->bytes - 1, 0, 2);
            if (++p->r < p->rows) p->row += p->stride;
            p->off = 0;
        } else {
            __builtin_prefetch(p->row + p->off, 0, 2);
            p->off += 64;
        }
    }
}

static void bgemm_task(void *ctx, long it, int thread) {
    const bgemm_job *j = ctx;
    const be_weight *w = j->w;
    const int i0 = (int)(it % j->nb_m) * BF16_MC, mc = j->M - i0 < BF16_MC ? j->M - i0 : BF16_MC;
    const int j0 = (int)(it / j->nb_m) * BF16_NC, nc = w->N - j0 < BF16_NC ? w->N - j0 : BF16_NC;
    const int KP = (w->K + 1) / 2;
    unsigned char *ws = j->ws + (size_t)thread * BF16_THREAD_BYTES;
    uint32_t *ap = (uint32_t *)(void *)ws;
    float *cb = (float *)(void *)(ws + BF16_AP_BYTES);
    const uint32_t *panels = w->data;
    const int ntile = (nc + 2 * BF16_NR - 1) / (2 * BF16_NR);
    for (int q0 = 0; q0 < KP; q0 += BF16_KP) {
        const int kp = KP - q0 < BF16_KP ? KP - q0 : BF16_KP;
        for (int ir = 0; ir < mc; ir += BF16_MR)
            j->pack_a(j->A + (size_t)(i0 + ir) * j->lda + 2 * (size_t)q0, j->lda, mc - ir < BF16_MR ? mc - ir : BF16_MR,
                      kp, w->K - 2 * q0, ap + (size_t)ir * BF16_KP);
        /* The next K block's A rows (of this item, else the first K block of the next M block), read towards L2
         * while this block's micro-tiles run, a few lines per B tile: the packer otherwise waits on them (the
         * activations are in L3 by now; a profile put 10 % of the GEMM's time in the packer, nearly all of it on
         * its loads). A prefetch never faults; the addresses stay inside A. */
        a_prefetch pf;
        a_prefetch_init(&pf, j, i0, mc, q0 + kp, ntile);
        for (int jr = 0; jr < nc; jr += 2 * BF16_NR) {
            a_prefetch_step(&pf);
            const uint32_t *b0 = panels + ((size_t)(j0 + jr) / BF16_NR * w->kp_panel + (size_t)q0) * BF16_NR;
            const uint32_t *b1 = nc - jr > BF16_NR ? b0 + (size_t)w->kp_panel * BF16_NR : NULL;
            /* The last micro-tile on this B tile reads the next B tile (the next 32 columns, or the first of the
             * next K block) towards L2: else its first micro-tile waits on L3 or memory, most on large K (fc2's
             * 9.9 MB of weights stream through once per M block). */
            const uint32_t *pf0 = NULL, *pf1 = NULL;
            int pfn = kp;
            if (jr + 2 * BF16_NR < nc) {
                pf0 = b0 + (size_t)2 * w->kp_panel * BF16_NR;
                if (nc - jr > 3 * BF16_NR) pf1 = pf0 + (size_t)w->kp_panel * BF16_NR;
            } else if (q0 + kp < KP) {
                pf0 = panels + ((size_t)j0 / BF16_NR * w->kp_panel + (size_t)(q0 + kp)) * BF16_NR;
                if (nc > BF16_NR) pf1 = pf0 + (size_t)w->kp_panel * BF16_NR;
                if (KP - (q0 + kp) < pfn) pfn = KP - (q0 + kp);
            }
            for (int ir = 0; ir < mc; ir += BF16_MR) {
                const int lastm = ir + BF16_MR >= mc;
                j->ukr(kp, ap + (size_t)ir * BF16_KP, b0, b1, cb + (size_t)ir * BF16_NC + jr, BF16_NC, q0 == 0,
                       lastm ? pf0 : NULL, lastm ? pf1 : NULL, pfn);
            }
        }
    }
    for (int i = 0; i < mc; i++)
        gemm_bf16_epilogue_row(cb + (size_t)i * BF16_NC, j->bias ? j->bias + j0 : NULL, nc, j->act,
                     j->C + (size_t)(i0 + i) * j->ldc + j0, j->accumulate);
}

void gemm_bf16_run(int set, const be_weight *w, const float *A, size_t lda, int M, const float *bias, float *C,
                   size_t ldc, int accumulate, be_act act, void *ws, thread_pool *pool) {
    if (M <= 0 || w->N <= 0) return;
    bgemm_job j = {w, A, lda, M, bias, C, ldc, accumulate, act, ukr_portable, pack_a_portable,
                   (M + BF16_MC - 1) / BF16_MC, (unsigned char *)(((uintptr_t)ws + 63) & ~(uintptr_t)63)};
#if QVL_WITH_X86
    if (set == BF16_SET_AVX512BF16) {
        j.ukr = gemm_bf16_ukr_avx512bf16;
        j.pack_a = gemm_bf16_pack_a_avx512bf16;
    }
#else
    (void)set;
#endif
    /* M-block-major within an N block, so items running close in time share B columns. */
    pool_run(pool, (long)j.nb_m * ((w->N + BF16_NC - 1) / BF16_NC), bgemm_task, &j);
}

void gemm_bf16_ref(const be_weight *w, const float *A, size_t lda, int M, const float *bias, float *C, size_t ldc,
                   int accumulate, be_act act) {
    const int KP = (w->K + 1) / 2;
    const uint32_t *panels = w->data;
    for (int i = 0; i < M; i++)
        for (int n = 0; n < w->N; n++) {
            const float *a = A + (size_t)i * lda;
            const uint32_t *b = panels + (size_t)(n / BF16_NR) * w->kp_panel * BF16_NR + (size_t)(n % BF16_NR);
            float acc = 0.0f;
            for (int q = 0; q < KP; q++) {
                const float x0 = bf16_float(bf16_round(a[2 * q]));
                const float x1 = 2 * q + 1 < w->K ? bf16_float(bf16_round(a[2 * q + 1])) : 0.0f;
                const uint32_t y = b[(size_t)q * BF16_NR];
                acc = bf16_pair(acc, x0, bf16_float((uint16_t)y), x1, bf16_float((uint16_t)(y >> 16)));
            }
            gemm_bf16_epilogue_row(&acc, bias ? bias + n : NULL, 1, act, C + (size_t)i * ldc + n, accumulate);
        }
}

void gemm_amx_ref(const be_weight *w, const float *A, size_t lda, int M, const float *bias, float *C, size_t ldc,
                  int accumulate, be_act act) {
    const int KB = (w->K + 31) / 32, split = w->arith == BE_ARITH_BF16X2;
    const uint32_t *panels = w->data;
    for (int i = 0; i < M; i++)
        for (int n = 0; n < w->N; n++) {
            const float *a = A + (size_t)i * lda;
            const uint32_t *b = panels + (size_t)(n / BF16_NR) * w->kp_panel * BF16_NR + (size_t)(n % BF16_NR);
            float acc = 0.0f;
            for (int t = 0; t < KB; t++)
                for (int h = 0; h <= split; h++) {
                    float te = 0.0f, to = 0.0f;
                    for (int p = 0; p < 16; p++) {
                        const int k = 32 * t + 2 * p;
                        float x[2];
                        for (int e = 0; e < 2; e++) {
                            const float v = k + e < w->K ? a[k + e] : 0.0f;
                            const uint16_t hi = bf16_round(v);
                            x[e] = bf16_float(h ? bf16_round_lo(v, hi) : hi);
                        }
                        const uint32_t y = b[(size_t)(16 * t + p) * BF16_NR];
                        te = bf16_daz(fmaf(bf16_daz(x[0]), bf16_daz(bf16_float((uint16_t)y)), te));
                        to = bf16_daz(fmaf(bf16_daz(x[1]), bf16_daz(bf16_float((uint16_t)(y >> 16))), to));
                    }
                    acc = bf16_daz(bf16_daz(acc) + bf16_daz(te + to));
                }
            gemm_bf16_epilogue_row(&acc, bias ? bias + n : NULL, 1, act, C + (size_t)i * ldc + n, accumulate);
        }
}
