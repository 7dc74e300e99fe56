/* attention_avx2.c — one flash-attention work item with AVX2+FMA: Kᵀ tile by 8x8 transposes, scores by a 6x16
 * register-blocked product, online softmax with a vector exp, P·V by a 4x24 register-blocked product.
 * Compiled with -mavx2 -mfma -mf16c; called only after qvl_cpu_has_avx2(). */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "cpu/kernels_avx2.h"

/* exp(x) for x <= 0 (softmax arguments s − max), Cephes expf: x = n·ln2 + r with |r| <= ln2/2, degree-6 polynomial,
 * scaled by 2^n through the exponent bits. ~1 ulp; results below e^-87 (and -inf) flush to 0. */
static inline __m256 exp256(__m256 x) {
    const __m256 lo = _mm256_set1_ps(-87.0f);
    const __m256 keep = _mm256_cmp_ps(x, lo, _CMP_GE_OQ);
    x = _mm256_max_ps(x, lo);
    __m256 fx = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
    x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
    __m256 y = _mm256_set1_ps(1.9875691500e-4f);
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
    y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
    __m256i n = _mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127));
    y = _mm256_mul_ps(y, _mm256_castsi256_ps(_mm256_slli_epi32(n, 23)));
    return _mm256_and_ps(y, keep);
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

static inline void transpose8(__m256 r[8]) {
    __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
    r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
    r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
    r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
    r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
    r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
    r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
    r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

/* s[6 rows][16 keys] = (qs rows · ktᵀ columns) · scale. */
static inline void scores_6x16(const float *qs, int hd, const float *kt, float *s, float scale) {
    /* The register-block loops must be fully unrolled (c[] in registers) at any -O level: hence the pragmas. */
    __m256 c[12];
#pragma GCC unroll 12
    for (int r = 0; r < 12; r++) c[r] = _mm256_setzero_ps();
    for (int d = 0; d < hd; d++) {
        const __m256 b0 = _mm256_load_ps(kt + (size_t)d * ATTN_BK), b1 = _mm256_load_ps(kt + (size_t)d * ATTN_BK + 8);
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
        _mm256_store_ps(s + (size_t)r * ATTN_BK, _mm256_mul_ps(c[2 * r], sc));
        _mm256_store_ps(s + (size_t)r * ATTN_BK + 8, _mm256_mul_ps(c[2 * r + 1], sc));
    }
}

/* o[4 rows][nv·8 dims] += p[4 rows][0..nk) · v[0..nk)[nv·8 dims]; nv in 1..3 (a constant after inlining). */
static inline void pv_4xn(const float *p, const float *v, size_t ldv, int nk, float *o, int hd, int nv) {
    __m256 c[12];
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
            const __m256 a = _mm256_broadcast_ss(p + (size_t)r * ATTN_BK + j);
#pragma GCC unroll 3
            for (int x = 0; x < nv; x++) c[r * 3 + x] = _mm256_fmadd_ps(a, b[x], c[r * 3 + x]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++)
#pragma GCC unroll 3
        for (int x = 0; x < nv; x++) _mm256_store_ps(o + (size_t)r * hd + 8 * x, c[r * 3 + x]);
}

void attn_block_avx2(const float *q, size_t ldq, const float *k, size_t ldk, const float *v, size_t ldv, float *out,
                     size_t ldo, int nq, int nk, int hd, float scale, float *ws) {
    float *qs = ws;                                  /* [BQ][hd] query rows, zero-padded to nqp */
    float *kt = qs + (size_t)ATTN_BQ * hd;           /* [hd][BK] key tile, transposed */
    float *s = kt + (size_t)hd * ATTN_BK;            /* [BQ][BK] scores, then probabilities */
    float *o = s + (size_t)ATTN_BQ * ATTN_BK;        /* [BQ][hd] unnormalised output */
    float *mrow = o + (size_t)ATTN_BQ * hd;          /* [BQ] running max */
    float *lrow = mrow + ATTN_BQ;                    /* [BQ] running sum */
    const int nqp = (nq + 11) / 12 * 12;
    for (int i = 0; i < nqp; i++) {
        if (i < nq) memcpy(qs + (size_t)i * hd, q + (size_t)i * ldq, (size_t)hd * sizeof(float));
        else memset(qs + (size_t)i * hd, 0, (size_t)hd * sizeof(float));
        memset(o + (size_t)i * hd, 0, (size_t)hd * sizeof(float));
        mrow[i] = -INFINITY;
        lrow[i] = 0.0f;
    }
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    for (int j0 = 0; j0 < nk; j0 += ATTN_BK) {
        const int nkt = nk - j0 < ATTN_BK ? nk - j0 : ATTN_BK;
        const int nk16 = (nkt + 15) & ~15;
        /* Kᵀ tile, zero columns past nkt up to nk16. */
        for (int jb = 0; jb < nk16; jb += 8)
            for (int db = 0; db < hd; db += 8) {
                __m256 r[8];
                for (int x = 0; x < 8; x++)
                    r[x] = jb + x < nkt ? _mm256_loadu_ps(k + (size_t)(j0 + jb + x) * ldk + db) : _mm256_setzero_ps();
                transpose8(r);
                for (int x = 0; x < 8; x++) _mm256_store_ps(kt + (size_t)(db + x) * ATTN_BK + jb, r[x]);
            }
        for (int i = 0; i < nqp; i += 6)
            for (int jb = 0; jb < nk16; jb += 16)
                scores_6x16(qs + (size_t)i * hd, hd, kt + jb, s + (size_t)i * ATTN_BK + jb, scale);
        /* Online softmax over this tile, row by row; keys past nkt are masked to -inf. */
        const int nv = nk16 / 8;
        for (int i = 0; i < nqp; i++) {
            float *si = s + (size_t)i * ATTN_BK;
            for (int j = nkt; j < nk16; j++) si[j] = -INFINITY;
            __m256 mx = ninf;
            for (int x = 0; x < nv; x++) mx = _mm256_max_ps(mx, _mm256_load_ps(si + 8 * x));
            const float m_new = fmaxf(mrow[i], hmax256(mx));
            const float alpha = expf(mrow[i] - m_new);
            const __m256 mv = _mm256_set1_ps(m_new);
            __m256 sum = _mm256_setzero_ps();
            for (int x = 0; x < nv; x++) {
                const __m256 p = exp256(_mm256_sub_ps(_mm256_load_ps(si + 8 * x), mv));
                _mm256_store_ps(si + 8 * x, p);
                sum = _mm256_add_ps(sum, p);
            }
            lrow[i] = lrow[i] * alpha + hsum256(sum);
            mrow[i] = m_new;
            if (alpha != 1.0f) {
                const __m256 av = _mm256_set1_ps(alpha);
                float *oi = o + (size_t)i * hd;
                for (int d = 0; d < hd; d += 8) _mm256_store_ps(oi + d, _mm256_mul_ps(_mm256_load_ps(oi + d), av));
            }
        }
        for (int i = 0; i < nqp; i += 4)
            for (int dc = 0; dc < hd; dc += 24) {
                const int nvd = (hd - dc) / 8 < 3 ? (hd - dc) / 8 : 3;
                const float *pv = s + (size_t)i * ATTN_BK, *vv = v + (size_t)j0 * ldv + dc;
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
