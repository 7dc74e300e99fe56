/* attention_avx512.c — one flash-attention work item with AVX-512: the structure of attention_avx2.c (Kᵀ tile,
 * log2-domain online softmax, register-blocked products) on 16-lane vectors: scores by a 6 x 64 block (24 zmm
 * accumulators), P·V by 6 x 64 blocks over the head dims and, for head dims that are 8 mod 16 (72), a 12 x 8 ymm
 * block for the last 8 dims. Compiled with -mavx512f/bw/dq/vl -mfma -mavx2; called only after
 * cpu_has_avx512(), for hd % 8 == 0. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "cpu/kernels_avx512.h"
#include "cpu/simd_x86.h"
#include "cpu/vmath_avx512.h"

/* 2^x for x <= 0: exp2_256 of attention_avx2.c on 16 lanes (same clamp, same polynomial, ~1 ulp). */
static inline __m512 exp2_512(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-125.0f));
    const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 r = _mm512_sub_ps(x, n);
    const __m512 y = _mm512_fmadd_ps(v16_horner(r, vm_exp2_p, 6), r, _mm512_set1_ps(1.0f));
    return _mm512_castsi512_ps(
        _mm512_add_epi32(_mm512_castps_si512(y), _mm512_slli_epi32(_mm512_cvtps_epi32(n), 23)));
}

/* s[6 rows][nv·16 keys] = (qs rows · kt columns) · scale; nv in 1..4 (a constant after inlining); kt and s have
 * row stride ATTN_BK_MAX. */
static inline __attribute__((always_inline)) void scores_6xn(const float *qs, int hd, const float *kt, float *s,
                                                             float scale, int nv) {
    __m512 c[24];
#pragma GCC unroll 24
    for (int r = 0; r < 24; r++) c[r] = _mm512_setzero_ps();
    for (int d = 0; d < hd; d++) {
        __m512 b[4];
#pragma GCC unroll 4
        for (int x = 0; x < nv; x++) b[x] = _mm512_load_ps(kt + (size_t)d * ATTN_BK_MAX + 16 * x);
#pragma GCC unroll 6
        for (int r = 0; r < 6; r++) {
            const __m512 a = _mm512_set1_ps(qs[(size_t)r * hd + d]);
#pragma GCC unroll 4
            for (int x = 0; x < nv; x++) c[4 * r + x] = _mm512_fmadd_ps(a, b[x], c[4 * r + x]);
        }
    }
    const __m512 sc = _mm512_set1_ps(scale);
#pragma GCC unroll 6
    for (int r = 0; r < 6; r++)
#pragma GCC unroll 4
        for (int x = 0; x < nv; x++)
            _mm512_store_ps(s + (size_t)r * ATTN_BK_MAX + 16 * x, _mm512_mul_ps(c[4 * r + x], sc));
}

/* o[6 rows][nv·16 dims] += p[6 rows][0..nk) · v[0..nk)[nv·16 dims]; nv in 1..4 (a constant after inlining). */
static inline __attribute__((always_inline)) void pv_6xn(const float *p, const float *v, size_t ldv, int nk, float *o,
                                                         int hd, int nv) {
    __m512 c[24];
#pragma GCC unroll 6
    for (int r = 0; r < 6; r++)
#pragma GCC unroll 4
        for (int x = 0; x < nv; x++) c[4 * r + x] = _mm512_loadu_ps(o + (size_t)r * hd + 16 * x);
    for (int j = 0; j < nk; j++) {
        const float *vj = v + (size_t)j * ldv;
        __m512 b[4];
#pragma GCC unroll 4
        for (int x = 0; x < nv; x++) b[x] = _mm512_loadu_ps(vj + 16 * x);
#pragma GCC unroll 6
        for (int r = 0; r < 6; r++) {
            const __m512 a = _mm512_set1_ps(p[(size_t)r * ATTN_BK_MAX + j]);
#pragma GCC unroll 4
            for (int x = 0; x < nv; x++) c[4 * r + x] = _mm512_fmadd_ps(a, b[x], c[4 * r + x]);
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < 6; r++)
#pragma GCC unroll 4
        for (int x = 0; x < nv; x++) _mm512_storeu_ps(o + (size_t)r * hd + 16 * x, c[4 * r + x]);
}

/* o[12 rows][8 dims] += p[12 rows][0..nk) · v[0..nk)[8 dims]: the last 8 dims of a head dim that is 8 mod 16. */
static inline void pv_12x8(const float *p, const float *v, size_t ldv, int nk, float *o, int hd) {
    __m256 c[12];
#pragma GCC unroll 12
    for (int r = 0; r < 12; r++) c[r] = _mm256_loadu_ps(o + (size_t)r * hd);
    for (int j = 0; j < nk; j++) {
        const __m256 b = _mm256_loadu_ps(v + (size_t)j * ldv);
#pragma GCC unroll 12
        for (int r = 0; r < 12; r++)
            c[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(p + (size_t)r * ATTN_BK_MAX + j), b, c[r]);
    }
#pragma GCC unroll 12
    for (int r = 0; r < 12; r++) _mm256_storeu_ps(o + (size_t)r * hd, c[r]);
}

/* Mask of the valid lanes of the 16-dim chunk starting at d (hd % 8 == 0: 8 or 16 lanes). */
static inline __mmask16 dim_mask(int hd, int d) { return hd - d >= 16 ? (__mmask16)0xFFFF : (__mmask16)0x00FF; }

void attn_block_avx512(const float *q, size_t ldq, const float *k, size_t ldk, const float *v, size_t ldv,
                       float *out, size_t ldo, int nq, int nk, int hd, float scale, float *ws) {
    const attn_ws w = attn_ws_carve(ws, hd);
    float *qs = w.qs, *kt = w.kt, *s = w.s, *o = w.o, *mrow = w.mrow, *lrow = w.lrow, *tmax = w.tmax, *alph = w.alph;
    const float scale_l2 = scale * 1.44269504088896341f; /* scores in the log2 domain */
    /* nqp: a multiple of 12 (6-row blocks, 12-row tail block); nq16 <= ATTN_BQ_MAX, a multiple of 48. */
    const int nqp = (nq + 11) / 12 * 12, nq16 = (nqp + 15) / 16 * 16;
    const int hd64 = hd / 64 * 64, hd16 = hd / 16 * 16; /* dims in 6x64 blocks, then one 6x(16·n), then 12x8 */
    attn_stage_queries(q, ldq, nq, nqp, nq16, hd, qs, o, mrow, lrow, tmax);
    for (int j0 = 0, nkt; j0 < nk; j0 += nkt) {
        nkt = attn_key_tile(nk, j0);
        const int nk16 = (nkt + 15) & ~15, nv = nk16 / 16;
        /* Kᵀ tile, zero columns past nkt up to nk16. */
        attn_load_kt(k + (size_t)j0 * ldk, ldk, nkt, nk16, hd, kt, ATTN_BK_MAX);
        for (int i = 0; i < nqp; i += 6) {
            const float *qi = qs + (size_t)i * hd;
            float *si = s + (size_t)i * ATTN_BK_MAX;
            if (nv == 5) { /* a tile that took the segment's tail: 64 + 16 keys */
                scores_6xn(qi, hd, kt, si, scale_l2, 4);
                scores_6xn(qi, hd, kt + 64, si + 64, scale_l2, 1);
            } else if (nv == 4) scores_6xn(qi, hd, kt, si, scale_l2, 4);
            else if (nv == 3) scores_6xn(qi, hd, kt, si, scale_l2, 3);
            else if (nv == 2) scores_6xn(qi, hd, kt, si, scale_l2, 2);
            else scores_6xn(qi, hd, kt, si, scale_l2, 1);
        }
        /* Online softmax over this tile; keys past nkt masked to -inf. */
        for (int i = 0; i < nqp; i++) {
            float *si = s + (size_t)i * ATTN_BK_MAX;
            for (int j = nkt; j < nk16; j++) si[j] = -INFINITY;
            __m512 mx = _mm512_load_ps(si);
            for (int x = 1; x < nv; x++) mx = _mm512_max_ps(mx, _mm512_load_ps(si + 16 * x));
            tmax[i] = _mm512_reduce_max_ps(mx);
        }
        for (int i = 0; i < nq16; i += 16) {
            const __m512 m_old = _mm512_load_ps(mrow + i);
            const __m512 m_new = _mm512_max_ps(m_old, _mm512_load_ps(tmax + i));
            /* m_old = -inf (first tile): 2^-inf ≈ 0; the unused rows past nqp give the same from NaN. */
            _mm512_store_ps(alph + i, exp2_512(_mm512_sub_ps(m_old, m_new)));
            _mm512_store_ps(mrow + i, m_new);
        }
        for (int i = 0; i < nqp; i++) {
            float *si = s + (size_t)i * ATTN_BK_MAX;
            const __m512 mv = _mm512_set1_ps(mrow[i]);
            __m512 sum = _mm512_setzero_ps();
            for (int x = 0; x < nv; x++) {
                const __m512 p = exp2_512(_mm512_sub_ps(_mm512_load_ps(si + 16 * x), mv));
                _mm512_store_ps(si + 16 * x, p);
                sum = _mm512_add_ps(sum, p);
            }
            const float alpha = alph[i];
            lrow[i] = lrow[i] * alpha + _mm512_reduce_add_ps(sum);
            if (alpha != 1.0f) {
                const __m512 av = _mm512_set1_ps(alpha);
                float *oi = o + (size_t)i * hd;
                for (int d = 0; d < hd; d += 16) {
                    const __mmask16 m = dim_mask(hd, d);
                    _mm512_mask_storeu_ps(oi + d, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, oi + d), av));
                }
            }
        }
        const float *vt = v + (size_t)j0 * ldv;
        for (int i = 0; i < nqp; i += 6) {
            const float *pi = s + (size_t)i * ATTN_BK_MAX;
            float *oi = o + (size_t)i * hd;
            for (int dc = 0; dc < hd64; dc += 64) pv_6xn(pi, vt + dc, ldv, nkt, oi + dc, hd, 4);
            const int rest = (hd16 - hd64) / 16;
            if (rest == 3) pv_6xn(pi, vt + hd64, ldv, nkt, oi + hd64, hd, 3);
            else if (rest == 2) pv_6xn(pi, vt + hd64, ldv, nkt, oi + hd64, hd, 2);
            else if (rest == 1) pv_6xn(pi, vt + hd64, ldv, nkt, oi + hd64, hd, 1);
        }
        if (hd16 < hd)
            for (int i = 0; i < nqp; i += 12)
                pv_12x8(s + (size_t)i * ATTN_BK_MAX, vt + hd16, ldv, nkt, o + (size_t)i * hd + hd16, hd);
    }
    for (int i = 0; i < nq; i++) {
        const __m512 l = _mm512_set1_ps(lrow[i]);
        for (int d = 0; d < hd; d += 16) {
            const __mmask16 m = dim_mask(hd, d);
            _mm512_mask_storeu_ps(out + (size_t)i * ldo + d, m,
                                  _mm512_div_ps(_mm512_maskz_loadu_ps(m, o + (size_t)i * hd + d), l));
        }
    }
}
