/* ops_avx2.c — AVX2+FMA tanh, erf, the two GELUs built on them (8 lanes at a time), and a LayerNorm row.
 *
 * Compiled with -mavx2 -mfma -mf16c; called only after qvl_cpu_has_avx2(). The polynomials are Chebyshev fits
 * (in long double, rounded to float) made for this file: each approximates a smooth, slowly varying factor, so
 * that the final result comes from one well-conditioned FMA. Against double-precision libm over every 7th float:
 * tanh within 1.40 ulp, erf within 1.25 ulp; NaN propagated, ±inf → ±1, ±0 kept (tests/unit/test_ops.c sweeps).
 * Every element goes through the same 8-lane code (tails through a padded copy), so a value's result does not
 * depend on its position or on n: the GEMM epilogue and op_gelu_* agree bit for bit. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "cpu/kernels_avx2.h"

static inline __m256 horner(__m256 t, const float *c, int n) {
    __m256 y = _mm256_set1_ps(c[0]);
    for (int i = 1; i < n; i++) y = _mm256_fmadd_ps(y, t, _mm256_set1_ps(c[i]));
    return y;
}

/* e^x for x in [-87, 88]: x = n·ln2 + r, |r| <= ln2/2 (exact with FMA and a two-part ln2), e^r = 1 + r + r²·P(r)
 * with P fitted on [-ln2/2, ln2/2] (6.9e-8 relative), scaled by 2^n through the exponent bits. */
static inline __m256 v_exp(__m256 x) {
    static const float p[6] = {9.949806099e-07f, 2.010233766e-05f, 3.468992363e-04f,
                               5.004694685e-03f, 5.776226521e-02f, 5.000000000e-01f};
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187e-06f), r);
    const __m256 q = horner(_mm256_mul_ps(r, _mm256_set1_ps(2.88539004f)), p, 6);
    const __m256 y = _mm256_fmadd_ps(_mm256_mul_ps(r, r), q, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

/* tanh: |x| < 0.625: x + x·z·Q(z), z = x², Q fitted on [0, 0.390625] (9.9e-8 relative, and the correction is at
 * most 13 % of the result). Otherwise 1 − 2t/(1 + t) with t = e^(−2|x|), sign restored; t underflows to 0 (→ ±1)
 * for large |x| and ±inf. */
static inline __m256 v_tanh(__m256 x) {
    static const float q[6] = {6.525173148e-07f, -8.883868759e-06f, 1.201382038e-04f,
                               -1.638144953e-03f, 2.236610651e-02f, -3.091993928e-01f};
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256 ax = _mm256_andnot_ps(sign, x);
    const __m256 z = _mm256_mul_ps(x, x);
    const __m256 qz = horner(_mm256_fmadd_ps(z, _mm256_set1_ps(5.11999989f), _mm256_set1_ps(-1.0f)), q, 6);
    const __m256 small = _mm256_or_ps(_mm256_fmadd_ps(_mm256_mul_ps(ax, z), qz, ax), _mm256_and_ps(sign, x));
    const __m256 t = v_exp(_mm256_max_ps(_mm256_mul_ps(ax, _mm256_set1_ps(-2.0f)), _mm256_set1_ps(-87.0f)));
    const __m256 f = _mm256_div_ps(_mm256_add_ps(t, t), _mm256_add_ps(t, _mm256_set1_ps(1.0f)));
    const __m256 big = _mm256_or_ps(_mm256_sub_ps(_mm256_set1_ps(1.0f), f), _mm256_and_ps(sign, x));
    const __m256 y = _mm256_blendv_ps(big, small, _mm256_cmp_ps(ax, _mm256_set1_ps(0.625f), _CMP_LT_OQ));
    return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

/* erf: |x| < 1.25: x + x·R(z), z = x², R = erf(x)/x − 1 fitted on [0, 1.5625] (3.7e-8 absolute).
 * Otherwise 1 − e^(−x²)·G(|x|), G = e^(x²)·erfc fitted on [1.25, 4] (1.8e-7 relative; erfc(1.25) = 0.077, so that is
 * ≈ 0.25 ulp of the result), e^(−x²) with the rounding error of x² folded back in; |x| clamped to 4, where erf
 * rounds to 1; sign restored. */
static inline __m256 v_erf(__m256 x) {
    static const float r[9] = {1.154328899e-07f, -1.355216227e-06f, 1.398621407e-05f, -1.291481603e-04f,
                               1.034496934e-03f, -7.047492079e-03f, 3.998833522e-02f, -1.878515333e-01f,
                               -1.076873019e-01f};
    static const float g[12] = {-9.000739738e-06f, 2.629308437e-05f, -5.025160863e-05f, 1.428839751e-04f,
                                -4.207967140e-04f, 1.125759794e-03f, -2.913951408e-03f, 7.341603749e-03f,
                                -1.787216216e-02f, 4.188709334e-02f, -9.414556623e-02f, 2.018875480e-01f};
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256 ax = _mm256_andnot_ps(sign, x);
    const __m256 z = _mm256_mul_ps(x, x);
    const __m256 rz = horner(_mm256_fmadd_ps(z, _mm256_set1_ps(1.27999997f), _mm256_set1_ps(-1.0f)), r, 9);
    const __m256 small = _mm256_fmadd_ps(x, rz, x);
    const __m256 a = _mm256_min_ps(_mm256_max_ps(ax, _mm256_set1_ps(1.25f)), _mm256_set1_ps(4.0f));
    const __m256 gz = horner(_mm256_fmadd_ps(a, _mm256_set1_ps(0.727272749f), _mm256_set1_ps(-1.90909088f)), g, 12);
    const __m256 h = _mm256_mul_ps(a, a), l = _mm256_fmsub_ps(a, a, h); /* a² = h + l exactly */
    const __m256 eh = v_exp(_mm256_sub_ps(_mm256_setzero_ps(), h));
    const __m256 e = _mm256_fnmadd_ps(eh, l, eh); /* e^(−h)·(1 − l) = e^(−a²) to first order in l */
    const __m256 big = _mm256_or_ps(_mm256_fnmadd_ps(e, gz, _mm256_set1_ps(1.0f)), _mm256_and_ps(sign, x));
    const __m256 y = _mm256_blendv_ps(big, small, _mm256_cmp_ps(ax, _mm256_set1_ps(1.25f), _CMP_LT_OQ));
    return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

/* torch's gelu_pytorch_tanh operation order, no contraction: inner = β·(x + κ·(x·x·x)); 0.5·x·(1 + tanh(inner)). */
static inline __m256 v_gelu_tanh(__m256 v) {
    const __m256 cube = _mm256_mul_ps(_mm256_mul_ps(v, v), v);
    const __m256 inner = _mm256_mul_ps(_mm256_set1_ps(0.797884583f),
                                       _mm256_add_ps(v, _mm256_mul_ps(_mm256_set1_ps(0.044715f), cube)));
    return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), v),
                         _mm256_add_ps(_mm256_set1_ps(1.0f), v_tanh(inner)));
}

/* torch's exact GELU order: x·0.5·(1 + erf(x·(1/√2))). */
static inline __m256 v_gelu_erf(__m256 v) {
    const __m256 e = v_erf(_mm256_mul_ps(v, _mm256_set1_ps(0.707106769f)));
    return _mm256_mul_ps(_mm256_mul_ps(v, _mm256_set1_ps(0.5f)), _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

/* y[i] = f(x[i]); x and y may be the same array. The tail goes through an 8-lane copy (zero-padded). */
static inline __attribute__((always_inline)) void map8(const float *x, float *y, size_t n, __m256 (*f)(__m256)) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, f(_mm256_loadu_ps(x + i)));
    if (i < n) {
        float buf[8] = {0};
        memcpy(buf, x + i, (n - i) * sizeof(float));
        _mm256_storeu_ps(buf, f(_mm256_loadu_ps(buf)));
        memcpy(y + i, buf, (n - i) * sizeof(float));
    }
}

void ops_tanh_avx2(const float *x, float *y, size_t n) { map8(x, y, n, v_tanh); }
void ops_erf_avx2(const float *x, float *y, size_t n) { map8(x, y, n, v_erf); }
void ops_gelu_tanh_avx2(float *x, size_t n) { map8(x, x, n, v_gelu_tanh); }
void ops_gelu_erf_avx2(float *x, size_t n) { map8(x, x, n, v_gelu_erf); }

static inline double hsum_pd(__m256d v) {
    __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}

/* One LayerNorm row, same contract and per-element f32 arithmetic as ops.c's scalar row: statistics in double
 * (4 double lanes x 2 accumulators, then a final combine: a different summation order from the scalar row, so
 * mean and variance can differ from it in the last double bits, far below their f32 rounding), then
 * y = ((x − mean)·rstd)·w + b in f32 with no contraction. */
void ops_layernorm_row_avx2(const float *x, float *y, size_t cols, const float *w, const float *b, float eps) {
    __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
    size_t c = 0;
    for (; c + 8 <= cols; c += 8) {
        const __m256 v = _mm256_loadu_ps(x + c);
        s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
        s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
    }
    double s = hsum_pd(_mm256_add_pd(s0, s1));
    for (; c < cols; c++) s += (double)x[c];
    const double mean_d = s / (double)cols;
    const __m256d mv = _mm256_set1_pd(mean_d);
    __m256d v0 = _mm256_setzero_pd(), v1 = _mm256_setzero_pd();
    for (c = 0; c + 8 <= cols; c += 8) {
        const __m256 v = _mm256_loadu_ps(x + c);
        const __m256d d0 = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)), mv);
        const __m256d d1 = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)), mv);
        v0 = _mm256_add_pd(v0, _mm256_mul_pd(d0, d0));
        v1 = _mm256_add_pd(v1, _mm256_mul_pd(d1, d1));
    }
    double var = hsum_pd(_mm256_add_pd(v0, v1));
    for (; c < cols; c++) {
        const double d = (double)x[c] - mean_d;
        var += d * d;
    }
    const float mean = (float)mean_d;
    const float rstd = (float)(1.0 / sqrt(var / (double)cols + (double)eps));
    const __m256 mf = _mm256_set1_ps(mean), rf = _mm256_set1_ps(rstd);
    for (c = 0; c + 8 <= cols; c += 8) {
        __m256 t = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + c), mf), rf);
        if (w) t = _mm256_mul_ps(t, _mm256_loadu_ps(w + c));
        if (b) t = _mm256_add_ps(t, _mm256_loadu_ps(b + c));
        _mm256_storeu_ps(y + c, t);
    }
    for (; c < cols; c++) {
        const float t = (x[c] - mean) * rstd;
        y[c] = t * (w ? w[c] : 1.0f) + (b ? b[c] : 0.0f);
    }
}
