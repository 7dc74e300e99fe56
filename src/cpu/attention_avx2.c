/* attention_avx2.c — one flash-attention work item with AVX2+FMA: Kᵀ tile by 8x8 transposes, scores by a 6x16
 * register-blocked product, online softmax with a vector exp2 (log2-domain scores), P·V by a 4x24 (3x32 when hd
 * is a multiple of 32 but not of 24) register-blocked product.
 * Compiled with -mavx2 -mfma -mf16c; called only after cpu_has_avx2(). */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "cpu/kernels_avx2.h"
#include "cpu/simd_x86.h"
#include "cpu/vmath_avx2.h"

/* 2^x for x <= 0 (softmax arguments in the log2 domain: scores are pre-scaled by log2(e)). x is clamped to -125
 * (2^-125 ≈ 2.4e-38 stands in for 0, so -inf and NaN — the unused padding rows — give that, never NaN); x = n + r,
 * |r| <= 1/2 exactly; 2^r = 1 + r·P(r), P a degree-5 Chebyshev fit of (2^r − 1)/r (7.6e-8 relative,
 * vmath_coef.h); 2^n added to the exponent bits. ~1 ulp; 12 vector operations. */
static inline __m256 exp2_256(__m256 x) {
    x = _mm256_max_ps(x, _mm256_set1_ps(-125.0f));
    const __m256 n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256 r = _mm256_sub_ps(x, n);
    const __m256 y = _mm256_fmadd_ps(v8_horner(r, vm_exp2_p, 6), r, _mm256_set1_ps(1.0f));
    return _mm256_castsi256_ps(
        _mm256_add_epi32(_mm256_castps_si256(y), _mm256_slli_epi32(_mm256_cvtps_epi32(n), 23)));
}

static inline float hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline float hmax256(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* s[6 rows][16 keys] = (qs rows · ktᵀ columns) · scale (the caller passes scale·log2(e)). */
static inline void scores_6x16(const float *qs, int hd, const float *kt, float *s, float scale) {
    /* The register-block loops must be fully unrolled (c[] in registers) at any -O level: hence the pragmas. */
    __m256 c[12];
#pragma GCC unroll 12
    for (int r = 0; r < 12; r++) c[r] = _mm256_setzero_ps();
    for (int d = 0; d < hd; d++) {
        const float *kd = kt + (size_t)d * ATTN_BK_MAX;
        const __m256 b0 = _mm256_load_ps(kd), b1 = _mm256_load_ps(kd + 8);
#pragma GCC unroll 6
        for (int r = 0; r < 6; r++) {
            const __m256 a = _mm256_broadcast_ss(qs + (size_t)r * hd + d);
            c[2 * r] = _mm256_fmadd_ps(a, b0, c[2 * r]);
            c[2 * r + 1] = _mm256_fmadd_ps(a, b1, c[2 * r + 1]);
        }
    }
    const __m256 sc = _mm256_set1_ps(scale);
#pragma GCC unroll 6
    for (int r = 0; r < 6; r++) {
        _mm256_store_ps(s + (size_t)r * ATTN_BK_MAX, _mm256_mul_ps(c[2 * r], sc));
        _mm256_store_ps(s + (size_t)r * ATTN_BK_MAX + 8, _mm256_mul_ps(c[2 * r + 1], sc));
    }
}

/* o[4 rows][nv·8 dims] += p[4 rows][0..nk) · v[0..nk)[nv·8 dims]; nv in 1..3 (a constant after inlining). */
static inline __attribute__((always_inline)) void pv_4xn(const float *p, const float *v, size_t ldv, int nk, float *o,
                                                         int hd, int nv) {
    __m256 c[12];
#pragma GCC unroll 12
    for (int i = 0; i < 12; i++) c[i] = _mm256_setzero_ps(); /* dead for nv < 3 once inlined; quiets -O2 */
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++)
#pragma GCC unroll 3
        for (int x = 0; x < nv; x++) c[r * 3 + x] = _mm256_load_ps(o + (size_t)r * hd + 8 * x);
    for (int j = 0; j < nk; j++) {
        const float *vj = v + (size_t)j * ldv;
        __m256 b[3];
#pragma GCC unroll 3
        for (int x = 0; x < nv; x++) b[x] = _mm256_loadu_ps(vj + 8 * x);
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            const __m256 a = _mm256_broadcast_ss(p + (size_t)r * ATTN_BK_MAX + j);
#pragma GCC unroll 3
            for (int x = 0; x < nv; x++) c[r * 3 + x] = _mm256_fmadd_ps(a, b[x], c[r * 3 + x]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++)
#pragma GCC unroll 3
        for (int x = 0; x < nv; x++) _mm256_store_ps(o + (size_t)r * hd + 8 * x, c[r * 3 + x]);
}

/* o[3 rows][32 dims] += p[3 rows][0..nk) · v[0..nk)[32 dims]: the P·V block for head dims that are a multiple
 * of 32 (64), where 4x24 chunks would leave a half-width one. 12 accumulators, 3 broadcasts and 4 loads per key. */
static inline void pv_3x32(const float *p, const float *v, size_t ldv, int nk, float *o, int hd) {
    __m256 c[12];
#pragma GCC unroll 3
    for (int r = 0; r < 3; r++)
#pragma GCC unroll 4
        for (int x = 0; x < 4; x++) c[r * 4 + x] = _mm256_load_ps(o + (size_t)r * hd + 8 * x);
    for (int j = 0; j < nk; j++) {
        const float *vj = v + (size_t)j * ldv;
        const __m256 a0 = _mm256_broadcast_ss(p + j), a1 = _mm256_broadcast_ss(p + ATTN_BK_MAX + j),
                     a2 = _mm256_broadcast_ss(p + 2 * ATTN_BK_MAX + j);
#pragma GCC unroll 4
        for (int x = 0; x < 4; x++) {
            const __m256 b = _mm256_loadu_ps(vj + 8 * x);
            c[x] = _mm256_fmadd_ps(a0, b, c[x]);
            c[4 + x] = _mm256_fmadd_ps(a1, b, c[4 + x]);
            c[8 + x] = _mm256_fmadd_ps(a2, b, c[8 + x]);
        }
    }
#pragma GCC unroll 3
    for (int r = 0; r < 3; r++)
#pragma GCC unroll 4
        for (int x = 0; x < 4; x++) _mm256_store_ps(o + (size_t)r * hd + 8 * x, c[r * 4 + x]);
}

void attn_block_avx2(const float *q, size_t ldq, const float *k, size_t ldk, const float *v, size_t ldv, float *out,
                     size_t ldo, int nq, int nk, int hd, float scale, float *ws) {
    const attn_ws w = attn_ws_carve(ws, hd);
    float *qs = w.qs, *kt = w.kt, *s = w.s, *o = w.o, *mrow = w.mrow, *lrow = w.lrow, *tmax = w.tmax, *alph = w.alph;
    const float scale_l2 = scale * 1.44269504088896341f; /* scores in the log2 domain: e^(s·scale) = 2^(s·scale_l2) */
    const int nqp = (nq + 11) / 12 * 12, nq8 = (nqp + 7) / 8 * 8; /* nq8 <= ATTN_BQ_MAX, a multiple of 24 */
    attn_stage_queries(q, ldq, nq, nqp, nq8, hd, qs, o, mrow, lrow, tmax);
    for (int j0 = 0, nkt; j0 < nk; j0 += nkt) {
        nkt = attn_key_tile(nk, j0);
        const int nk16 = (nkt + 15) & ~15;
        /* Kᵀ tile, zero columns past nkt up to nk16. */
        attn_load_kt(k + (size_t)j0 * ldk, ldk, nkt, nk16, hd, kt, ATTN_BK_MAX);
        for (int i = 0; i < nqp; i += 6)
            for (int jb = 0; jb < nk16; jb += 16)
                scores_6x16(qs + (size_t)i * hd, hd, kt + jb, s + (size_t)i * ATTN_BK_MAX + jb, scale_l2);
        /* Online softmax over this tile; keys past nkt are masked to -inf. Row maxima first, then the new running
         * maxima and the rescale factors 8 rows at a time (vector exp2), then probabilities and row sums. */
        const int nv = nk16 / 8;
        for (int i = 0; i < nqp; i++) {
            float *si = s + (size_t)i * ATTN_BK_MAX;
            for (int j = nkt; j < nk16; j++) si[j] = -INFINITY;
            __m256 mx = _mm256_load_ps(si);
            for (int x = 1; x < nv; x++) mx = _mm256_max_ps(mx, _mm256_load_ps(si + 8 * x));
            tmax[i] = hmax256(mx);
        }
        for (int i = 0; i < nq8; i += 8) {
            const __m256 m_old = _mm256_load_ps(mrow + i);
            const __m256 m_new = _mm256_max_ps(m_old, _mm256_load_ps(tmax + i));
            /* m_old = -inf (first tile): 2^-inf ≈ 0; the unused rows past nqp give the same from NaN. */
            _mm256_store_ps(alph + i, exp2_256(_mm256_sub_ps(m_old, m_new)));
            _mm256_store_ps(mrow + i, m_new);
        }
        for (int i = 0; i < nqp; i++) {
            float *si = s + (size_t)i * ATTN_BK_MAX;
            const __m256 mv = _mm256_set1_ps(mrow[i]);
            __m256 sum = _mm256_setzero_ps();
            for (int x = 0; x < nv; x++) {
                const __m256 p = exp2_256(_mm256_sub_ps(_mm256_load_ps(si + 8 * x), mv));
                _mm256_store_ps(si + 8 * x, p);
                sum = _mm256_add_ps(sum, p);
            }
            const float alpha = alph[i];
            lrow[i] = lrow[i] * alpha + hsum256(sum);
            if (alpha != 1.0f) {
                const __m256 av = _mm256_set1_ps(alpha);
                float *oi = o + (size_t)i * hd;
                for (int d = 0; d < hd; d += 8) _mm256_store_ps(oi + d, _mm256_mul_ps(_mm256_load_ps(oi + d), av));
            }
        }
        if (hd % 24 != 0 && hd % 32 == 0) {
            for (int i = 0; i < nqp; i += 3)
                for (int dc = 0; dc < hd; dc += 32)
                    pv_3x32(s + (size_t)i * ATTN_BK_MAX, v + (size_t)j0 * ldv + dc, ldv, nkt,
                            o + (size_t)i * hd + dc, hd);
            continue;
        }
        for (int i = 0; i < nqp; i += 4)
            for (int dc = 0; dc < hd; dc += 24) {
                const int nvd = (hd - dc) / 8 < 3 ? (hd - dc) / 8 : 3;
                const float *pv = s + (size_t)i * ATTN_BK_MAX, *vv = v + (size_t)j0 * ldv + dc;
                float *ov = o + (size_t)i * hd + dc;
                if (nvd == 3) pv_4xn(pv, vv, ldv, nkt, ov, hd, 3);
                else if (nvd == 2) pv_4xn(pv, vv, ldv, nkt, ov, hd, 2);
                else pv_4xn(pv, vv, ldv, nkt, ov, hd, 1);
            }
    }
    for (int i = 0; i < nq; i++) {
        const __m256 l = _mm256_set1_ps(lrow[i]);
        for (int d = 0; d < hd; d += 8)
            _mm256_storeu_ps(out + (size_t)i * ldo + d, _mm256_div_ps(_mm256_load_ps(o + (size_t)i * hd + d), l));
    }
}
