/* attention_avx512bf16.c — one attention work item in bf16 arithmetic on AVX512-BF16 (bf16.h's definition, bit
 * for bit): Q·Kᵀ and P·V by VDPBF16PS on pair-interleaved tiles (Q pairs broadcast against 16 keys' pairs; P pairs
 * broadcast against 16 head columns' pairs of two keys), online softmax in f32 with bf16_exp's operations
 * lane-wise. Any even head_dim up to 128 (64 and 72 in the towers), any segment length. Compiled with
 * -mavx512bf16, called only after cpu_has_avx512bf16(). */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#include "cpu/bf16.h"
#include "cpu/kernels_avx2.h" /* attention tiling */

static inline __m512 dp(__m512 acc, __m512i a, __m512i b) { return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b); }

/* bf16_exp lane-wise (same operations, same order). */
static inline __m512 exp16(__m512 x) {
    const __mmask16 ok = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.3f), _CMP_GE_OQ);
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.3f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_sub_ps(x, _mm512_mul_ps(n, _mm512_set1_ps(0.693359375f)));
    r = _mm512_sub_ps(r, _mm512_mul_ps(n, _mm512_set1_ps(-2.12194440e-4f)));
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_add_ps(_mm512_mul_ps(p, _mm512_mul_ps(r, r)), r);
    p = _mm512_add_ps(p, _mm512_set1_ps(1.0f));
    const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_maskz_mul_ps(ok, p, _mm512_castsi512_ps(e));
}

/* bf16_round lane-wise: 16 bf16 in the low halves of 16 dwords. */
static inline __m512i round16(__m512 f) {
    const __m512i u = _mm512_castps_si512(f);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
    const __mmask16 nan = _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q);
    return _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40)));
}

/* 16 bf16 (low halves of dwords) → 8 pair dwords. */
static inline __m256i pairs8(__m512i r) { return _mm512_cvtepi64_epi32(_mm512_or_si512(r, _mm512_srli_epi64(r, 16))); }

/* bf16_row_sum's order on 16 lane sums. */
static inline float tree16(__m512 v) {
    __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    b = _mm_add_ps(b, _mm_movehl_ps(b, b));
    b = _mm_add_ss(b, _mm_shuffle_ps(b, b, 1));
    return _mm_cvtss_f32(b);
}

static inline __mmask16 first_n(int n) { return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1u); }

/* x[0, n) rounded into (n + 1) / 2 pair dwords at dst (a zero high half for an odd n). */
static inline void pairs_row(const float *x, int n, uint32_t *dst) {
    for (int e = 0; e < n; e += 16) {
        const int cnt = n - e < 16 ? n - e : 16;
        const __m256i d = pairs8(round16(_mm512_maskz_loadu_ps(first_n(cnt), x + e)));
        _mm256_mask_storeu_epi32(dst + e / 2, (__mmask8)((1u << ((cnt + 1) / 2)) - 1u), d);
    }
}

/* Scores of R query rows (pairs at qp, row stride hp) against NV 16-key vectors of a Kᵀ pair tile, into acc. */
static inline __attribute__((always_inline)) void scores_rows(const int R, const int NV, const uint32_t *qp, int hp,
                                                               const uint32_t *kt, __m512 out[4][5]) {
    __m512 acc[4][5];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 5
        for (int c = 0; c < NV; c++) acc[r][c] = _mm512_setzero_ps();
    for (int p = 0; p < hp; p++) {
        __m512i x[4];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) x[r] = _mm512_set1_epi32((int)qp[(size_t)r * hp + p]);
        const uint32_t *kr = kt + (size_t)p * ATTN_BK_MAX;
#pragma GCC unroll 5
        for (int c = 0; c < NV; c++) {
            const __m512i y = _mm512_loadu_si512(kr + 16 * c);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) acc[r][c] = dp(acc[r][c], x[r], y);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 5
        for (int c = 0; c < NV; c++) out[r][c] = acc[r][c];
}

/* o[r] = o[r]·alpha[r] + Σ over key pairs of P pair · V pair, for R rows (P pairs at pp, row stride BK_MAX/2; o
 * row stride dpad) and ND 16-column vectors. */
static inline __attribute__((always_inline)) void pv_rows(const int R, const int ND, const uint32_t *pp, int npair,
                                                           const uint32_t *vt, int dpad, float *o,
                                                           const float *alpha) {
    __m512 ov[4][5];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
        const __m512 va = _mm512_set1_ps(alpha[r]);
#pragma GCC unroll 5
        for (int c = 0; c < ND; c++) ov[r][c] = _mm512_mul_ps(_mm512_loadu_ps(o + (size_t)r * dpad + 16 * c), va);
    }
    for (int jp = 0; jp < npair; jp++) {
        __m512i x[4];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) x[r] = _mm512_set1_epi32((int)pp[(size_t)r * (ATTN_BK_MAX / 2) + jp]);
        const uint32_t *vr = vt + (size_t)jp * dpad;
#pragma GCC unroll 5
        for (int c = 0; c < ND; c++) {
            const __m512i y = _mm512_loadu_si512(vr + 16 * c);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) ov[r][c] = dp(ov[r][c], x[r], y);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 5
        for (int c = 0; c < ND; c++) _mm512_storeu_ps(o + (size_t)r * dpad + 16 * c, ov[r][c]);
}

static void scores_any(int R, int nv, const uint32_t *qp, int hp, const uint32_t *kt, __m512 acc[4][5]) {
#define SC(r, n) \
    case (r) * 8 + (n): scores_rows(r, n, qp, hp, kt, acc); return;
    switch (R * 8 + nv) {
        SC(4, 1) SC(4, 2) SC(4, 3) SC(4, 4) SC(4, 5) SC(1, 1) SC(1, 2) SC(1, 3) SC(1, 4) SC(1, 5)
    default: /* 2 or 3 rows: one at a time */
        for (int r = 0; r < R; r++) scores_any(1, nv, qp + (size_t)r * hp, hp, kt, acc + r);
    }
#undef SC
}

static void pv_any(int R, int nd, const uint32_t *pp, int npair, const uint32_t *vt, int dpad, float *o,
                   const float *alpha) {
#define PV(r, n) \
    case (r) * 8 + (n): pv_rows(r, n, pp, npair, vt, dpad, o, alpha); return;
    switch (R * 8 + nd) {
        PV(4, 1) PV(4, 2) PV(4, 3) PV(4, 4) PV(4, 5) PV(1, 1) PV(1, 2) PV(1, 3) PV(1, 4) PV(1, 5)
    default: /* other row counts one row at a time; more than 5 vectors (hd > 80) in chunks of 5 columns */
        if (nd > 5) {
            for (int c0 = 0; c0 < nd; c0 += 5) {
                /* column chunk c0: the rows' o and V pair rows advance by 16·c0; the strides stay dpad */
                const int n = nd - c0 < 5 ? nd - c0 : 5;
                for (int r = 0; r < R; r++) {
                    __m512 ov[5];
                    for (int c = 0; c < n; c++)
                        ov[c] = _mm512_mul_ps(_mm512_loadu_ps(o + (size_t)r * dpad + 16 * (c0 + c)),
                                              _mm512_set1_ps(alpha[r]));
                    for (int jp = 0; jp < npair; jp++) {
                        const __m512i x = _mm512_set1_epi32((int)pp[(size_t)r * (ATTN_BK_MAX / 2) + jp]);
                        for (int c = 0; c < n; c++)
                            ov[c] = dp(ov[c], x, _mm512_loadu_si512(vt + (size_t)jp * dpad + 16 * (c0 + c)));
                    }
                    for (int c = 0; c < n; c++) _mm512_storeu_ps(o + (size_t)r * dpad + 16 * (c0 + c), ov[c]);
                }
            }
            return;
        }
        for (int r = 0; r < R; r++)
            pv_any(1, nd, pp + (size_t)r * (ATTN_BK_MAX / 2), npair, vt, dpad, o + (size_t)r * dpad, alpha + r);
    }
#undef PV
}

void attn_bf16_block_avx512bf16(const float *q, size_t ldq, const float *k, size_t ldk, const float *v, size_t ldv,
                                float *out, size_t ldo, int nq, int nk, int hd, float scale, float *ws) {
    const int hp = (hd + 1) / 2, dpad = (hd + 15) & ~15, ndv = dpad / 16;
    uint32_t *qp = (uint32_t *)(void *)ws;
    uint32_t *kt = qp + (size_t)ATTN_BQ_MAX * hp;
    uint32_t *vt = kt + (size_t)hp * ATTN_BK_MAX;
    float *s = (float *)(void *)(vt + (size_t)ATTN_BK_MAX / 2 * dpad);
    uint32_t *pp = (uint32_t *)(void *)(s + (size_t)ATTN_BQ_MAX * ATTN_BK_MAX);
    float *o = (float *)(void *)(pp + (size_t)ATTN_BQ_MAX * ATTN_BK_MAX / 2);
    float *mrow = o + (size_t)ATTN_BQ_MAX * dpad, *lrow = mrow + ATTN_BQ_MAX, *alph = s; /* s: rescale factors */
    uint32_t tmp[64];
    for (int i = 0; i < nq; i++) {
        pairs_row(q + (size_t)i * ldq, hd, qp + (size_t)i * hp);
        for (int d = 0; d < dpad; d++) o[(size_t)i * dpad + d] = 0.0f;
        mrow[i] = -INFINITY;
        lrow[i] = 0.0f;
    }
    for (int j0 = 0, nkt; j0 < nk; j0 += nkt) {
        nkt = attn_key_tile(nk, j0);
        const int nv = (nkt + 15) / 16, npair = (nkt + 1) / 2;
        for (int j = 0; j < nv * 16; j++) { /* Kᵀ: key j's pairs down column j (zero keys past nkt) */
            if (j < nkt) pairs_row(k + (size_t)(j0 + j) * ldk, hd, tmp);
            for (int p = 0; p < hp; p++) kt[(size_t)p * ATTN_BK_MAX + j] = j < nkt ? tmp[p] : 0;
        }
        for (int jp = 0; jp < npair; jp++) { /* V: keys 2jp, 2jp+1 interleaved per column (zero past hd, nkt) */
            const float *v0 = v + (size_t)(j0 + 2 * jp) * ldv, *v1 = 2 * jp + 1 < nkt ? v0 + ldv : NULL;
            for (int d = 0; d < dpad; d += 16) {
                const __mmask16 m = first_n(hd - d);
                const __m512i lo = round16(_mm512_maskz_loadu_ps(m, v0 + d));
                const __m512i hi = v1 ? round16(_mm512_maskz_loadu_ps(m, v1 + d)) : _mm512_setzero_si512();
                _mm512_storeu_si512(vt + (size_t)jp * dpad + d, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
            }
        }
        for (int i0 = 0; i0 < nq; i0 += 4) {
            const int R = nq - i0 < 4 ? nq - i0 : 4;
            __m512 acc[4][5];
            scores_any(R, nv, qp + (size_t)i0 * hp, hp, kt, acc);
            for (int r = 0; r < R; r++) {
                const int i = i0 + r;
                __m512 mx = _mm512_set1_ps(-INFINITY);
                for (int c = 0; c < nv; c++) {
                    const int left = nkt - 16 * c;
                    const __mmask16 m = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u);
                    acc[r][c] = _mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), m,
                                                   _mm512_mul_ps(acc[r][c], _mm512_set1_ps(scale)));
                    mx = _mm512_max_ps(mx, acc[r][c]);
                }
                const float m_old = mrow[i], m_new = fmaxf(m_old, _mm512_reduce_max_ps(mx));
                const float alpha = bf16_exp(m_old - m_new);
                __m512 sum = _mm512_setzero_ps();
                uint32_t *pi = pp + (size_t)i * (ATTN_BK_MAX / 2);
                for (int c = 0; c < nv; c++) {
                    const __m512i pb = round16(exp16(_mm512_sub_ps(acc[r][c], _mm512_set1_ps(m_new))));
                    sum = _mm512_add_ps(sum, _mm512_castsi512_ps(_mm512_slli_epi32(pb, 16)));
                    _mm256_storeu_si256((__m256i *)(void *)(pi + 8 * c), pairs8(pb));
                }
                lrow[i] = lrow[i] * alpha + tree16(sum);
                mrow[i] = m_new;
                alph[r] = alpha;
            }
            pv_any(R, ndv, pp + (size_t)i0 * (ATTN_BK_MAX / 2), npair, vt, dpad, o + (size_t)i0 * dpad, alph);
        }
    }
    for (int i = 0; i < nq; i++)
        for (int d = 0; d < hd; d++) out[(size_t)i * ldo + d] = o[(size_t)i * dpad + d] / lrow[i];
}
