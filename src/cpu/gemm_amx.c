/* gemm_amx.c — the AMX-BF16 GEMM of precision bf16 on AMX CPUs: C[M, N] (=|+=) act(A · Wᵀ + bias) with W packed by
 * gemm_amx_pack (bf16 pair panels, pair steps padded to whole tiles), A rounded to bf16 while it is packed into
 * tiles, TDPBF16PS on a 2 x 2 block of 16 x 16 f32 accumulator tiles, and the f32 epilogue of the bf16 GEMM.
 * The arithmetic is TDPBF16PS's (amx_tile.h, bf16.h: gemm_amx_ref is the definition).
 *
 * Built twice: as the instructions (this file, x86-64 with AVX-512 for the A packer; called only after
 * cpu_amx_usable()) and over the C model of the instructions (amx_emulated.c includes this file with
 * QVL_AMX_EMULATE; the functions are then gemm_amx_*_emulated and the packer portable).
 *
 * Driver: items are (M block of up to m_block's rows: AMX_MC, or AMX_MC_WIDE where K is short, N block of a
 * 32-column multiple), handed out dynamically to the pool's threads. N is split by plan_nc: where the threads have
 * fewer than 8 M blocks each, the split whose items the pool finishes first in a simulation of its hand-out (7
 * blocks on 2 threads: one thread had 4 and the other 3; 2 N blocks make 14 items); else as few N blocks as give
 * every thread two items.
 * Per item, the block's rows of A are rounded and packed once, whole K, into 16 x 32 bf16 tiles (1 KiB each, zero
 * past M and K; in the per-thread workspace, sized for the model's widest K). Then for each 32-column pair of
 * weight panels (read in place), each 32-row pair of the block runs the whole K with its four accumulators
 * resident in the tiles (zeroed, never loaded: one tile store each at the end), into the pair's sums (up to 256 x
 * 32 f32, 32 KiB). The A block stays in L2, the panel pair in L2 after the first row pair brought it in, and the
 * next column pair's panels are prefetched towards L2 meanwhile (each weight byte comes from L3 or memory once per
 * M block). A pair's epilogue (bias, activation, residual; from its sums into C) runs a row at a time between the
 * next pair's K steps, so the vector units work while the tile unit does (two sums buffers per thread); the last
 * pair's runs after the tiles are released. Every element is one TDPBF16PS chain over its K tiles in order,
 * whatever the blocking or thread count, so results are bit-identical for any thread count and equal to
 * gemm_amx_ref.
 * Measured on a 2-vCPU Emerald Rapids VM (docs/PERFORMANCE.md, session 35): old and new kernels in one
 * process, alternated call by call (the host's tile rate wanders by 2x from minute to minute, so separate runs
 * say nothing at 10 %): at M = 784 on 2 threads qkv 1.21-1.24x, proj 1.08-1.11x, fc1 1.11-1.14x, fc2 0.98-1.03x
 * the speed of the chunked kernel it replaced (K in chunks of 8 tiles, accumulators loaded and stored per chunk,
 * the epilogue after each column pair): the accumulator loads and stores were a quarter of the tile unit's
 * operations, and a tile load costs the unit about half a TDPBF16PS (bench/amx_loads: a 2 x 2 block's one load per
 * product leaves about two thirds of the TDPBF16PS rate with every operand in L1). */
#include <stdint.h>
#include <string.h>

#include "cpu/amx_tile.h"
#include "cpu/bf16.h"

#if !QVL_AMX_EMULATE
#include "cpu/bf16_avx512.h"
#include "cpu/vmath_avx512.h"
#endif

enum {
    AMX_MC = BF16_AMX_MC, /* rows per M block (8 A row tiles; with K = 4608 a 1.2 MB A block, L2-resident) */
    AMX_MC_WIDE = 2 * AMX_MC, /* rows per M block where K <= AMX_WIDE_K (BF16 weights; thread_bytes relies on 2x) */
    AMX_WIDE_K = 2304,
    AMX_KT = 32,          /* k per tile (16 pairs) */
    PLAN_MAX_THREADS = POOL_FINISH_THREADS_MAX, /* the N split is planned by simulation up to this many threads */
    EPI_AHEAD = 8,         /* rows of C prefetched ahead of the epilogue */
};

/* Tile registers: accumulators C[r][c] for row tile r and column tile c of the 2 x 2 block, A row tiles, B tiles. */
#define TC00 0
#define TC01 1
#define TC10 2
#define TC11 3
#define TA0 4
#define TA1 5
#define TB0 6
#define TB1 7

#define AMX_SCRATCH_BYTES ((size_t)AMX_MC_WIDE * 32 * 4) /* an M block's sums for one 32-column pair */

/* Rows per M block of a weight: AMX_MC_WIDE where K <= AMX_WIDE_K and the weights are plain BF16 (its A block then
 * holds no more bytes than AMX_MC rows of the widest K: L2-resident), else AMX_MC. Each column pair's panels come
 * from L3 once per M block, and the block's first row pair waits on them; with twice the rows, half as often
 * (docs/PERFORMANCE.md "Session 46": the tower's K = 1152 GEMMs 1.04-1.08x at 784 rows, 2 threads; K = 4304,
 * whose A block would then outgrow L2, 0.73x, so not there). The blocking never changes a result. */
static int m_block(const be_weight *w) {
    return w->K <= AMX_WIDE_K && w->arith != BE_ARITH_BF16X2 ? AMX_MC_WIDE : AMX_MC;
}

/* Per thread: the A block (AMX_MC rows x max_k rounded to tiles, bf16; twice that for BF16X2's two terms, which
 * also holds AMX_MC_WIDE = 2 x AMX_MC rows of BF16 for K <= max_k) and two column pairs' sums (one being written
 * out while the next is computed). */
static size_t thread_bytes(int max_k) {
    const size_t kp = (size_t)((max_k > 0 ? max_k : 1) + AMX_KT - 1) / AMX_KT * AMX_KT;
    return 2 * (size_t)AMX_MC * kp * 2 + 2 * AMX_SCRATCH_BYTES;
}

#if QVL_AMX_EMULATE /* one definition, in the build every platform has (the layout is the same in both) */
size_t gemm_amx_packed_size(int M, int K) {
    if (M <= 0 || K <= 0) return 0;
    return (size_t)(M + 15) / 16 * 16 * ((size_t)(K + AMX_KT - 1) / AMX_KT * AMX_KT) * sizeof(uint16_t);
}
#endif

size_t AMX_NAME(gemm_amx_workspace_size)(int n_threads, int max_k) {
    if (n_threads < 1) n_threads = 1;
    return (size_t)n_threads * thread_bytes(max_k) + 64;
}

/* Rows [0, mr) of A (stride lda), k in [k0, k0 + 32·kt) clipped to K, rounded to bf16 into kt tiles per 16-row
 * group: with ns = 1, tile (g, t) at ap + (g·kt + t)·512 elements, row r of it 32 bf16 (k0 + 32t ...); with
 * ns = 2 (BF16X2) the hi tile of (g, t) at ap + (2(g·kt + t))·512 and its lo tile right after it (lo = bf16(a −
 * hi), 0 where hi is not finite). Zero past mr and K. */
#if QVL_AMX_EMULATE
void AMX_NAME(gemm_amx_pack_a)(const float *a, size_t lda, int mr, int k0, int K, int kt, int ns, uint16_t *ap) {
    const int groups = (mr + 15) / 16;
    for (int g = 0; g < groups; g++)
        for (int t = 0; t < kt; t++) {
            uint16_t *tile = ap + ((size_t)g * kt + t) * (size_t)ns * 512;
            for (int r = 0; r < 16; r++) {
                const int i = 16 * g + r;
                for (int c = 0; c < AMX_KT; c++) {
                    const int k = k0 + AMX_KT * t + c;
                    const float x = i < mr && k < K ? a[(size_t)i * lda + (size_t)k] : 0.0f;
                    const uint16_t hi = bf16_round(x);
                    tile[r * AMX_KT + c] = hi;
                    if (ns == 2) tile[512 + r * AMX_KT + c] = bf16_round_lo(x, hi);
                }
            }
        }
}
#else
/* 16 floats → hi (bf16_round) into h[0..16) and, if l, lo (bf16_round_lo) into l[0..16). */
static inline void split16(__m512 f, uint16_t *h, uint16_t *l) {
    const __m512i hi = bf16_round16(f);
    _mm256_storeu_si256((__m256i *)(void *)h, _mm512_cvtepi32_epi16(hi));
    if (!l) return;
    const __m512 hf = _mm512_castsi512_ps(_mm512_slli_epi32(hi, 16));
    /* lo = bf16(f - hi) where hi is finite (exponent not all ones), else 0 */
    const __mmask16 fin = _mm512_cmp_epi32_mask(_mm512_and_si512(hi, _mm512_set1_epi32(0x7f80)),
                                                _mm512_set1_epi32(0x7f80), _MM_CMPINT_NE);
    const __m512i lo = _mm512_maskz_mov_epi32(fin, bf16_round16(_mm512_sub_ps(f, hf)));
    _mm256_storeu_si256((__m256i *)(void *)l, _mm512_cvtepi32_epi16(lo));
}

void AMX_NAME(gemm_amx_pack_a)(const float *a, size_t lda, int mr, int k0, int K, int kt, int ns, uint16_t *ap) {
    const int groups = (mr + 15) / 16;
    for (int g = 0; g < groups; g++)
        for (int r = 0; r < 16; r++) {
            const int i = 16 * g + r;
            const float *ai = i < mr ? a + (size_t)i * lda : a; /* rows past mr: all lanes masked off */
            for (int t = 0; t < kt; t++) {
                uint16_t *row = ap + ((size_t)g * kt + t) * (size_t)ns * 512 + (size_t)r * AMX_KT;
                const int k = k0 + AMX_KT * t, left = i < mr ? K - k : 0;
                const int n0 = left < 0 ? 0 : left > 16 ? 16 : left, n1 = left - 16 < 0 ? 0 : left - 16 > 16 ? 16 : left - 16;
                const __m512 lo = _mm512_maskz_loadu_ps((__mmask16)((1u << n0) - 1u), ai + (n0 ? k : 0));
                const __m512 hi = _mm512_maskz_loadu_ps((__mmask16)((1u << n1) - 1u), ai + (n1 ? k + 16 : 0));
                split16(lo, row, ns == 2 ? row + 512 : NULL);
                split16(hi, row + 16, ns == 2 ? row + 512 + 16 : NULL);
            }
        }
}
#endif

typedef struct amx_job {
    const be_weight *w;
    const float *A;
    size_t lda;
    int M;
    const float *bias;
    float *C;
    size_t ldc;
    int accumulate;
    be_act act;
    int nb_m, nc, mb; /* M blocks of mb rows, N blocks of nc columns */
    size_t thread_bytes;
    unsigned char *ws;
    const uint16_t *Ap; /* A packed by the caller (gemm_amx_run_packed), or NULL: packed here per item */
    uint16_t *Cp;       /* the result packed as a next GEMM's A (K = N), or NULL: into C */
    uint16_t *Q;        /* gemm_amx_run_qkv: q, k, v as bf16 rows [M, N] (C, Cp unused), rotated by cos_t, sin_t */
    const float *cos_t, *sin_t;
} amx_job;

/* Lines of the next column pair's panels (p0 and, if not NULL, p1: one range per 16-column panel) that a row
 * pair's block prefetches towards L2, spread over its K steps: every weight byte is read from L3 or memory once
 * per M block, and a first use that waits on it stalls the tiles. */
typedef struct b_prefetch {
    const char *p0, *p1;
    int lines;
} b_prefetch;

/* The next `per` lines of pf from line *pl on (at most pf->lines in all). */
static inline void prefetch_step(const b_prefetch *pf, int *pl, int per) {
    for (int q = 0; q < per && *pl < pf->lines; q++, (*pl)++) {
        AMX_PREFETCH_L2(pf->p0 + (size_t)*pl * 64);
        if (pf->p1) AMX_PREFETCH_L2(pf->p1 + (size_t)*pl * 64);
    }
}

/* A finished column pair's epilogue, written a row at a time between the next pair's tile steps: rows [0, mc) of
 * its sums cb (row stride 32) into C (stride ldc), ncols (<= 32) columns, with gemm_bf16_epilogue_row's
 * arithmetic (t + bias, then the activation, then c + t or a plain store). The instruction build does it in
 * registers, two 16-lane vectors per row (vmath_avx512.h's GELUs are op_gelu_*'s on an AVX-512 CPU, which every
 * AMX CPU is: the same bits); the vector work then runs while the tile unit works on the next pair. */
typedef struct epi {
    const float *cb;
    float *C;
    size_t ldc;
    uint16_t *P;     /* or, where not NULL, the rows as bf16 into this column pair's A tiles of the next GEMM */
    size_t pgroup;   /* elements from one 16-row group's tile to the next's */
    const float *bias;
    be_act act;
    int accumulate, ncols;
    int next, rows; /* the next row to write, and the rows */
    /* gemm_amx_run_qkv (Q not NULL): the pair's rows as bf16 into Q (row stride ldq, the weight's column order).
     * A rotary pair (co not NULL: the rows' cos and sin tables, row stride half): lane i of the first 16 columns
     * is the weight's column base + i (+ half from lane n1 on: the next head's first dims), lane i of the next 16
     * its partner (half further); a V pair (co NULL): columns base ... base + 31. Lane i's rotary frequency: d0 + i
     * below lane n1, i − n1 from it on. */
    uint16_t *Q;
    size_t ldq;
    const float *co, *si;
    int half, hd, base, d0, n1;
#if QVL_AMX_EMULATE
    int col[32];    /* the weight's column of each lane (qkv_rope_col) */
    float bq[32];   /* its bias (qkv: in the lanes' order) */
#else
    __mmask16 m0, m1;
    __m512 b0, b1;
#endif
} epi;

static void epi_init(epi *e, const float *cb, int rows, int ncols, const float *bias, be_act act, float *C,
                     size_t ldc, int accumulate, uint16_t *P, size_t pgroup) {
    e->cb = cb, e->C = C, e->ldc = ldc, e->bias = bias, e->act = act, e->accumulate = accumulate;
    e->P = P, e->pgroup = pgroup;
    e->ncols = ncols, e->next = 0, e->rows = rows;
    e->Q = NULL;
#if !QVL_AMX_EMULATE
    e->m0 = (__mmask16)(ncols >= 16 ? 0xffffu : (1u << ncols) - 1u);
    e->m1 = (__mmask16)(ncols >= 32 ? 0xffffu : ncols > 16 ? (1u << (ncols - 16)) - 1u : 0u);
    /* no bias: + 0 is exact for every value but -0 (-0 + 0 = +0), so the add is skipped instead */
    e->b0 = bias ? _mm512_maskz_loadu_ps(e->m0, bias) : _mm512_setzero_ps();
    e->b1 = bias ? _mm512_maskz_loadu_ps(e->m1, bias + 16) : _mm512_setzero_ps();
#endif
}

/* The pair of packed columns jc .. jc + 31 of a qkv weight in the rotary order (gemm_amx_run_qkv): rows of cb into
 * Q's rows (row stride ldq), rotated by the rows' tables co, si (row stride hd / 2) where jc is in the Q or K part
 * (H columns each). */
static void epi_init_qkv(epi *e, const float *cb, int rows, const float *bias, uint16_t *Q, size_t ldq, int jc,
                         int H, int hd, const float *co, const float *si) {
    epi_init(e, cb, rows, 32, bias && jc >= 2 * H ? bias + jc : bias, BE_ACT_NONE, NULL, 0, 0, NULL, 0);
    const int half = hd / 2, r = jc % H, f0 = 16 * (r / 32), d0 = f0 % half;
    e->Q = Q, e->ldq = ldq, e->half = half, e->hd = hd;
    e->co = jc < 2 * H ? co : NULL, e->si = si;
    e->base = jc < 2 * H ? jc - r + f0 / half * hd + d0 : jc;
    e->d0 = d0, e->n1 = half - d0 < 16 ? half - d0 : 16;
#if QVL_AMX_EMULATE
    for (int c = 0; c < 32; c++) {
        e->col[c] = qkv_rope_col(H, hd, jc + c);
        e->bq[c] = bias ? bias[e->col[c]] : 0.0f;
    }
#else
    if (bias && e->co) { /* lanes from n1 on: half further in the weight's order (the next head's first dims) */
        const __mmask16 lo = (__mmask16)((1u << e->n1) - 1u);
        const float *b = bias + e->base;
        e->b0 = _mm512_mask_loadu_ps(_mm512_maskz_loadu_ps(lo, b), (__mmask16)~lo, b + half);
        e->b1 = _mm512_mask_loadu_ps(_mm512_maskz_loadu_ps(lo, b + half), (__mmask16)~lo, b + hd);
    }
#endif
}

#if QVL_AMX_EMULATE
/* Row r of a qkv pair (epi_init_qkv): t + bias; in a rotary pair a = t[i], b = t[16 + i] rotated as op_rope does;
 * each value bf16_round_ftz into its column of Q. */
static void epi_row_qkv(const epi *e, int r) {
    const float *t = e->cb + (size_t)r * 32;
    uint16_t *q = e->Q + (size_t)r * e->ldq;
    float v[32];
    for (int c = 0; c < 32; c++) v[c] = e->bias ? t[c] + e->bq[c] : t[c];
    if (e->co) {
        const float *co = e->co + (size_t)r * e->half, *si = e->si + (size_t)r * e->half;
        for (int i = 0; i < 16; i++) {
            const int k = i < e->n1 ? e->d0 + i : i - e->n1; /* the lane's frequency */
            const float a = v[i], b = v[16 + i];
            const float ac = a * co[k], bs = b * si[k], bc = b * co[k], as = a * si[k];
            v[i] = ac - bs;
            v[16 + i] = bc + as;
        }
    }
    for (int c = 0; c < 32; c++) q[e->col[c]] = bf16_round_ftz(v[c]);
}

static void epi_row(epi *e) {
    const int r = e->next++;
    if (e->Q) {
        epi_row_qkv(e, r);
        return;
    }
    float t[32];
    memcpy(t, e->cb + (size_t)r * 32, (size_t)e->ncols * sizeof(float));
    if (e->P) { /* the value C would get, rounded as gemm_amx_pack_a rounds it; zero past the columns */
        float v[32];
        gemm_bf16_epilogue_row(t, e->bias, e->ncols, e->act, v, 0);
        uint16_t *d = e->P + (size_t)(r / 16) * e->pgroup + (size_t)(r % 16) * AMX_KT;
        for (int c = 0; c < AMX_KT; c++) d[c] = bf16_round(c < e->ncols ? v[c] : 0.0f);
        return;
    }
    gemm_bf16_epilogue_row(t, e->bias, e->ncols, e->act, e->C + (size_t)r * e->ldc, e->accumulate);
}
#else
/* t (+ b where has_bias), then the activation. */
static inline __attribute__((always_inline)) __m512 epi16(__m512 v, int has_bias, __m512 b, be_act act) {
    if (has_bias) v = _mm512_add_ps(v, b);
    if (act == BE_ACT_GELU_TANH) v = v16_gelu_tanh(v);
    else if (act == BE_ACT_GELU_ERF) v = v16_gelu_erf(v);
    return v;
}

/* A row's 16 values of a rotary pair's table (t: the row's hd / 2 entries) in the lanes' order: t[d0 + i] below
 * lane n1, t[i − n1] from it on (the next head's first dims). */
static inline __m512 epi_table(const float *t, int d0, int n1) {
    const __mmask16 lo = (__mmask16)((1u << n1) - 1u);
    const __m512 v = _mm512_maskz_loadu_ps(lo, t + d0);
    return n1 < 16 ? _mm512_mask_expandloadu_ps(v, (__mmask16)~lo, t) : v;
}

/* Row r of a qkv pair (epi_init_qkv), epi_row_qkv's arithmetic in registers (no FMA: the build does not contract). */
static inline void epi_row_qkv(const epi *e, int r) {
    const float *t = e->cb + (size_t)r * 32;
    uint16_t *q = e->Q + (size_t)r * e->ldq + e->base;
    const __m512 v0 = epi16(_mm512_loadu_ps(t), e->bias != NULL, e->b0, BE_ACT_NONE);
    const __m512 v1 = epi16(_mm512_loadu_ps(t + 16), e->bias != NULL, e->b1, BE_ACT_NONE);
    if (!e->co) {
        _mm256_storeu_si256((__m256i *)(void *)q, (__m256i)_mm512_cvtneps_pbh(v0));
        _mm256_storeu_si256((__m256i *)(void *)(q + 16), (__m256i)_mm512_cvtneps_pbh(v1));
        return;
    }
    const int half = e->half, d0 = e->d0, n1 = e->n1;
    const float *cr = e->co + (size_t)r * half, *sr = e->si + (size_t)r * half;
    const __m512 c = epi_table(cr, d0, n1), s = epi_table(sr, d0, n1);
    const __m256i x0 = (__m256i)_mm512_cvtneps_pbh(_mm512_sub_ps(_mm512_mul_ps(v0, c), _mm512_mul_ps(v1, s)));
    const __m256i x1 = (__m256i)_mm512_cvtneps_pbh(_mm512_add_ps(_mm512_mul_ps(v1, c), _mm512_mul_ps(v0, s)));
    const __mmask16 lo = (__mmask16)((1u << n1) - 1u);
    _mm256_mask_storeu_epi16(q, lo, x0);
    _mm256_mask_storeu_epi16(q + half, lo, x1);
    if (n1 < 16) { /* lane i from n1 on: the next head's dim i − n1, at base + i + half (its partner + hd) */
        _mm256_mask_storeu_epi16(q + half, (__mmask16)~lo, x0);
        _mm256_mask_storeu_epi16(q + e->hd, (__mmask16)~lo, x1);
    }
}

static inline void epi_row(epi *e) {
    const int r = e->next++;
    if (e->Q) {
        epi_row_qkv(e, r);
        return;
    }
    const float *t = e->cb + (size_t)r * 32;
    if (e->P) { /* the value C would get, rounded as gemm_amx_pack_a rounds it (split16); zero past the columns */
        const __m512 v0 = _mm512_maskz_mov_ps(e->m0, epi16(_mm512_loadu_ps(t), e->bias != NULL, e->b0, e->act));
        const __m512 v1 = _mm512_maskz_mov_ps(e->m1, epi16(_mm512_loadu_ps(t + 16), e->bias != NULL, e->b1, e->act));
        uint16_t *d = e->P + (size_t)(r / 16) * e->pgroup + (size_t)(r % 16) * AMX_KT;
        split16(v0, d, NULL);
        split16(v1, d + 16, NULL);
        return;
    }
    float *c = e->C + (size_t)r * e->ldc;
    /* C's rows are far apart and rarely cached: ask for them EPI_AHEAD rows before they are read or written, so
     * that a miss does not hold up the tile instructions retiring behind it */
    if (r + EPI_AHEAD < e->rows) {
        const char *ca = (const char *)(c + (size_t)EPI_AHEAD * e->ldc);
        _mm_prefetch(ca, _MM_HINT_T0);
        _mm_prefetch(ca + 64, _MM_HINT_T0);
    }
    __m512 v0 = epi16(_mm512_loadu_ps(t), e->bias != NULL, e->b0, e->act);
    __m512 v1 = epi16(_mm512_loadu_ps(t + 16), e->bias != NULL, e->b1, e->act);
    if (e->accumulate) {
        v0 = _mm512_add_ps(_mm512_maskz_loadu_ps(e->m0, c), v0);
        v1 = _mm512_add_ps(_mm512_maskz_loadu_ps(e->m1, c + 16), v1);
    }
    _mm512_mask_storeu_ps(c, e->m0, v0);
    _mm512_mask_storeu_ps(c + 16, e->m1, v1);
}
#endif

/* One 32 x 32 block (or its 16-row / 16-column part: two_r / two_c = 0) over all KB K tiles, the accumulators
 * resident in the tiles from zero to the end: A tiles a0 (a1), `as` elements from one K tile to the next (with
 * split, each K tile's lo tile 512 elements after its hi tile, run right after it), B tiles b0 (b1) at 1 KiB per K
 * tile; the accumulators are stored to cs (32 x 32, row stride 32). Between K steps, the rows of e (the previous
 * column pair's epilogue, if any) up to e_end are written, one per step. */
static void block(int kt, const uint16_t *a0, const uint16_t *a1, size_t as, int split, const uint32_t *b0,
                  const uint32_t *b1, float *cs, int two_r, int two_c, const b_prefetch *pf, epi *e, int e_end) {
    const size_t ldcs = 32 * 4, s = 64;
    const int per = (pf->lines + kt - 1) / kt;
    int pl = 0;
    float *c10 = cs + 16 * 32;
    AMX_ZERO(TC00);
    if (two_c) AMX_ZERO(TC01);
    if (two_r) AMX_ZERO(TC10);
    if (two_r && two_c) AMX_ZERO(TC11);
    if (two_r && two_c) {
        for (int t = 0; t < kt; t++) {
            const uint16_t *x0 = a0 + (size_t)t * as, *x1 = a1 + (size_t)t * as;
            prefetch_step(pf, &pl, per);
            AMX_LOADD(TA0, x0, s);
            AMX_LOADD(TB0, b0 + (size_t)t * 256, s);
            AMX_LOADD(TB1, b1 + (size_t)t * 256, s);
            AMX_DPBF16PS(TC00, TA0, TB0);
            AMX_DPBF16PS(TC01, TA0, TB1);
            AMX_LOADD(TA1, x1, s);
            AMX_DPBF16PS(TC10, TA1, TB0);
            AMX_DPBF16PS(TC11, TA1, TB1);
            if (split) {
                AMX_LOADD(TA0, x0 + 512, s);
                AMX_DPBF16PS(TC00, TA0, TB0);
                AMX_DPBF16PS(TC01, TA0, TB1);
                AMX_LOADD(TA1, x1 + 512, s);
                AMX_DPBF16PS(TC10, TA1, TB0);
                AMX_DPBF16PS(TC11, TA1, TB1);
            }
            if (e && e->next < e_end) epi_row(e);
        }
    } else {
        for (int t = 0; t < kt; t++) {
            prefetch_step(pf, &pl, per);
            for (int h = 0; h <= split; h++) {
                const uint16_t *x0 = a0 + (size_t)t * as + (size_t)h * 512, *x1 = a1 + (size_t)t * as + (size_t)h * 512;
                AMX_LOADD(TA0, x0, s);
                AMX_LOADD(TB0, b0 + (size_t)t * 256, s);
                AMX_DPBF16PS(TC00, TA0, TB0);
                if (two_c) {
                    AMX_LOADD(TB1, b1 + (size_t)t * 256, s);
                    AMX_DPBF16PS(TC01, TA0, TB1);
                }
                if (two_r) {
                    AMX_LOADD(TA1, x1, s);
                    AMX_DPBF16PS(TC10, TA1, TB0);
                }
            }
            if (e && e->next < e_end) epi_row(e);
        }
    }
    AMX_STORED(TC00, cs, ldcs);
    if (two_c) AMX_STORED(TC01, cs + 16, ldcs);
    if (two_r) AMX_STORED(TC10, c10, ldcs);
    if (two_r && two_c) AMX_STORED(TC11, c10 + 16, ldcs);
    while (e && e->next < e_end) epi_row(e); /* K shorter than the rows to write */
}

static void amx_task(void *ctx, long it, int thread) {
    const amx_job *j = ctx;
    const be_weight *w = j->w;
    const int i0 = (int)(it % j->nb_m) * j->mb, mc = j->M - i0 < j->mb ? j->M - i0 : j->mb;
    const int j0 = (int)(it / j->nb_m) * j->nc, nc = w->N - j0 < j->nc ? w->N - j0 : j->nc;
    const int KB = (w->K + AMX_KT - 1) / AMX_KT;
    unsigned char *ws = j->ws + (size_t)thread * j->thread_bytes;
    const uint16_t *ap = (const uint16_t *)(void *)ws;
    float *cbs[2] = {(float *)(void *)(ws + j->thread_bytes - 2 * AMX_SCRATCH_BYTES),
                     (float *)(void *)(ws + j->thread_bytes - AMX_SCRATCH_BYTES)};
    const uint32_t *panels = w->data;
    const size_t panel = (size_t)w->kp_panel * 16; /* dwords per 16-column panel */
    float *Cm = j->C ? j->C + (size_t)i0 * j->ldc : NULL;

    const int split = w->arith == BE_ARITH_BF16X2, ns = 1 + split;
    if (j->Ap) /* the block's 16-row groups of the caller's packed A (ns = 1: BF16 weights only) */
        ap = j->Ap + (size_t)(i0 / 16) * KB * 512;
    else
        AMX_NAME(gemm_amx_pack_a)(j->A + (size_t)i0 * j->lda, j->lda, mc, 0, w->K, KB, ns, (uint16_t *)(void *)ws);
    /* packed result: K tiles of the next GEMM (one per 32 columns of this one), zero rows past M in the group */
    const size_t pgroup = (size_t)((w->N + AMX_KT - 1) / AMX_KT) * 512;
    uint16_t *Pm = j->Cp ? j->Cp + (size_t)(i0 / 16) * pgroup : NULL;
    if (Pm)
        for (int r = mc; r % 16; r++)
            for (int jr = 0; jr < nc; jr += 32)
                memset(Pm + (size_t)(r / 16) * pgroup + (size_t)(j0 + jr) / 32 * 512 + (size_t)(r % 16) * AMX_KT, 0,
                       AMX_KT * sizeof(uint16_t));
    amx_tilecfg cfg;
    const uint8_t rows[8] = {16, 16, 16, 16, 16, 16, 16, 16};
    const uint16_t colsb[8] = {64, 64, 64, 64, 64, 64, 64, 64};
    amx_tilecfg_set(&cfg, 8, rows, colsb);
    AMX_LOADCONFIG(&cfg);
    epi e;
    int pending = 0; /* e holds the previous column pair's epilogue */
    const int npairs = (mc + 31) / 32;
    for (int jr = 0, jp = 0; jr < nc; jr += 32, jp ^= 1) {
        const uint32_t *b0 = panels + (size_t)(j0 + jr) / 16 * panel;
        const int ncols = nc - jr < 32 ? nc - jr : 32;
        float *cb = cbs[jp];
        /* the next column pair's panels, towards L2 while this pair runs */
        const uint32_t *n0 = jr + 32 < nc ? b0 + 2 * panel : NULL;
        const int ntwo = nc - jr - 32 > 16, nlines = n0 ? KB * 16 : 0; /* 16 lines per 1 KiB tile */
        for (int ir = 0; ir < mc; ir += 32) {
            const uint16_t *a0 = ap + (size_t)(ir / 16) * KB * (size_t)ns * 512;
            const int q = ir / 32, l0 = nlines * q / npairs, l1 = nlines * (q + 1) / npairs;
            const b_prefetch pf = {n0 ? (const char *)(n0) + (size_t)l0 * 64 : NULL,
                                   n0 && ntwo ? (const char *)(n0 + panel) + (size_t)l0 * 64 : NULL, l1 - l0};
            block(KB, a0, a0 + (size_t)KB * (size_t)ns * 512, (size_t)ns * 512, split, b0, b0 + panel,
                  cb + (size_t)ir * 32, mc - ir > 16, ncols > 16, &pf, pending ? &e : NULL,
                  ir + 32 < mc ? ir + 32 : mc);
        }
        if (j->Q) {
            const size_t half = (size_t)w->rope_hd / 2;
            epi_init_qkv(&e, cb, mc, j->bias, j->Q + (size_t)i0 * (size_t)w->N, (size_t)w->N, j0 + jr, w->N / 3,
                         w->rope_hd, j->cos_t + (size_t)i0 * half, j->sin_t + (size_t)i0 * half);
        } else {
            epi_init(&e, cb, mc, ncols, j->bias ? j->bias + j0 + jr : NULL, j->act, Cm ? Cm + j0 + jr : NULL, j->ldc,
                     j->accumulate, Pm ? Pm + (size_t)(j0 + jr) / 32 * 512 : NULL, pgroup);
        }
        pending = 1;
    }
    AMX_RELEASE();
    while (pending && e.next < mc) epi_row(&e);
}

typedef struct plan_items {
    int M, N, nc, nb_m, mb;
} plan_items;

/* Item i of a split in gemm_amx_run's order (M block i % nb_m of N block i / nb_m): its 16-row tiles times its
 * column tiles plus the A packing (about two tiles' work per row and K tile). */
static double plan_item_work(const void *ctx, long i) {
    const plan_items *q = ctx;
    const int b = (int)(i % q->nb_m), j0 = (int)(i / q->nb_m) * q->nc;
    const int rows = q->M - b * q->mb < q->mb ? q->M - b * q->mb : q->mb;
    const int cols = q->N - j0 < q->nc ? q->N - j0 : q->nc;
    return (double)((rows + 15) / 16) * ((cols + 15) / 16 + 2);
}

/* How long the pool takes over the items of M in blocks of mb rows and N in blocks of nc columns
 * (pool_finish_time). */
static double plan_time(int M, int N, int nc, int nt, int mb) {
    const plan_items q = {M, N, nc, (M + mb - 1) / mb, mb};
    return pool_finish_time(nt, (long)q.nb_m * ((N + nc - 1) / nc), plan_item_work, &q);
}

/* Columns per N block. With few M blocks a thread (fewer than 8), the split whose items the threads finish first
 * (plan_time; the fewest N blocks among those within 2 %: each N block packs its A rows again); else, and on
 * more than PLAN_MAX_THREADS threads, as few N blocks as give every thread two items. */
static int plan_nc(int M, int N, int nt, int mb) {
    const int n32 = (N + 31) / 32, nb_m = (M + mb - 1) / mb;
    if (nt < 2 || nt > PLAN_MAX_THREADS || nb_m >= 8 * nt) {
        int nb_n = (2 * nt + nb_m - 1) / nb_m;
        nb_n = nb_n < 1 ? 1 : nb_n > n32 ? n32 : nb_n;
        return (n32 + nb_n - 1) / nb_n * 32;
    }
    int best = n32 * 32;
    double best_t = plan_time(M, N, best, nt, mb);
    for (int nb = 2; nb <= n32 && nb * nb_m <= 16 * nt; nb++) {
        const int nc = (n32 + nb - 1) / nb * 32;
        if (nc == best) continue;
        const double t = plan_time(M, N, nc, nt, mb);
        if (t < best_t * 0.98) best = nc, best_t = t;
    }
    return best;
}

void AMX_NAME(gemm_amx_run_packed)(const be_weight *w, const float *A, size_t lda, const uint16_t *Ap, int M,
                                   const float *bias, float *C, size_t ldc, uint16_t *Cp, int accumulate, be_act act,
                                   void *ws, int max_k, thread_pool *pool) {
    if (M <= 0 || w->N <= 0) return;
    const int mb = m_block(w), nb_m = (M + mb - 1) / mb, nc = plan_nc(M, w->N, pool_size(pool), mb);
    amx_job j = {w, A, lda, M, bias, C, ldc, accumulate, act, nb_m, nc, mb, thread_bytes(max_k),
                 (unsigned char *)(((uintptr_t)ws + 63) & ~(uintptr_t)63), Ap, Cp, NULL, NULL, NULL};
    /* M-block-major within an N block, so items running close in time share B panels. */
    pool_run(pool, (long)nb_m * ((w->N + nc - 1) / nc), amx_task, &j);
}

void AMX_NAME(gemm_amx_run_qkv)(const be_weight *w, const float *A, size_t lda, const uint16_t *Ap, int M,
                                const float *bias, const float *cos_t, const float *sin_t, uint16_t *qkv16, void *ws,
                                int max_k, thread_pool *pool) {
    if (M <= 0 || w->N <= 0 || !w->rope_hd) return;
    const int mb = m_block(w), nb_m = (M + mb - 1) / mb, nc = plan_nc(M, w->N, pool_size(pool), mb);
    amx_job j = {w, A, lda, M, bias, NULL, 0, 0, BE_ACT_NONE, nb_m, nc, mb, thread_bytes(max_k),
                 (unsigned char *)(((uintptr_t)ws + 63) & ~(uintptr_t)63), Ap, NULL, qkv16, cos_t, sin_t};
    pool_run(pool, (long)nb_m * ((w->N + nc - 1) / nc), amx_task, &j);
}

void AMX_NAME(gemm_amx_run)(const be_weight *w, const float *A, size_t lda, int M, const float *bias, float *C,
                            size_t ldc, int accumulate, be_act act, void *ws, int max_k, thread_pool *pool) {
    AMX_NAME(gemm_amx_run_packed)(w, A, lda, NULL, M, bias, C, ldc, NULL, accumulate, act, ws, max_k, pool);
}
