/* vmath_avx2.h — 8-lane tanh, erf, e^x and the two GELUs in torch's operation order (AVX2 + FMA), inline so the
 * elementwise ops (ops_avx2.c) and the GEMM microkernel's fused epilogue (gemm_avx2.c) run the very same code.
 * Include only from files compiled with -mavx2 -mfma. Accuracy and special values: ops_avx2.c. */
#ifndef QVL_CPU_VMATH_AVX2_H
#define QVL_CPU_VMATH_AVX2_H

#include <immintrin.h>

#include "cpu/vmath_coef.h"

static inline __attribute__((always_inline)) __m256 v8_horner(__m256 t, const float *c, int n) {
    __m256 y = _mm256_set1_ps(c[0]);
    for (int i = 1; i < n; i++) y = _mm256_fmadd_ps(y, t, _mm256_set1_ps(c[i]));
    return y;
}

/* e^x for x in [-87, 88]: x = n·ln2 + r, |r| <= ln2/2 (exact with FMA and a two-part ln2), e^r = 1 + r + r²·P(r)
 * with P fitted on [-ln2/2, ln2/2] (6.9e-8 relative), scaled by 2^n through the exponent bits. */
static inline __attribute__((always_inline)) __m256 v8_exp(__m256 x) {
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187e-06f), r);
    const __m256 q = v8_horner(_mm256_mul_ps(r, _mm256_set1_ps(2.88539004f)), vm_exp_p, 6);
    const __m256 y = _mm256_fmadd_ps(_mm256_mul_ps(r, r), q, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

/* tanh: |x| < 0.625: x + x·z·Q(z), z = x², Q fitted on [0, 0.390625] (9.9e-8 relative, and the correction is at
 * most 13 % of the result). Otherwise 1 − 2t/(1 + t) with t = e^(−2|x|), sign restored; t underflows to 0 (→ ±1)
 * for large |x| and ±inf. */
static inline __attribute__((always_inline)) __m256 v8_tanh(__m256 x) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256 ax = _mm256_andnot_ps(sign, x);
    const __m256 z = _mm256_mul_ps(x, x);
    const __m256 qz = v8_horner(_mm256_fmadd_ps(z, _mm256_set1_ps(5.11999989f), _mm256_set1_ps(-1.0f)), vm_tanh_q, 6);
    const __m256 small = _mm256_or_ps(_mm256_fmadd_ps(_mm256_mul_ps(ax, z), qz, ax), _mm256_and_ps(sign, x));
    const __m256 t = v8_exp(_mm256_max_ps(_mm256_mul_ps(ax, _mm256_set1_ps(-2.0f)), _mm256_set1_ps(-87.0f)));
    const __m256 f = _mm256_div_ps(_mm256_add_ps(t, t), _mm256_add_ps(t, _mm256_set1_ps(1.0f)));
    const __m256 big = _mm256_or_ps(_mm256_sub_ps(_mm256_set1_ps(1.0f), f), _mm256_and_ps(sign, x));
    const __m256 y = _mm256_blendv_ps(big, small, _mm256_cmp_ps(ax, _mm256_set1_ps(0.625f), _CMP_LT_OQ));
    return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

/* erf: |x| < 1.25: x + x·R(z), z = x², R = erf(x)/x − 1 fitted on [0, 1.5625] (3.7e-8 absolute).
 * Otherwise 1 − e^(−x²)·G(|x|), G = e^(x²)·erfc fitted on [1.25, 4] (1.8e-7 relative; erfc(1.25) = 0.077, so that is
 * ≈ 0.25 ulp of the result), e^(−x²) with the rounding error of x² folded back in; |x| clamped to 4, where erf
 * rounds to 1; sign restored. */
static inline __attribute__((always_inline)) __m256 v8_erf(__m256 x) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256 ax = _mm256_andnot_ps(sign, x);
    const __m256 z = _mm256_mul_ps(x, x);
    const __m256 rz = v8_horner(_mm256_fmadd_ps(z, _mm256_set1_ps(1.27999997f), _mm256_set1_ps(-1.0f)), vm_erf_r, 9);
    const __m256 small = _mm256_fmadd_ps(x, rz, x);
    const __m256 a = _mm256_min_ps(_mm256_max_ps(ax, _mm256_set1_ps(1.25f)), _mm256_set1_ps(4.0f));
    const __m256 gz = v8_horner(_mm256_fmadd_ps(a, _mm256_set1_ps(0.727272749f), _mm256_set1_ps(-1.90909088f)), vm_erf_g, 12);
    const __m256 h = _mm256_mul_ps(a, a), l = _mm256_fmsub_ps(a, a, h); /* a² = h + l exactly */
    const __m256 eh = v8_exp(_mm256_sub_ps(_mm256_setzero_ps(), h));
    const __m256 e = _mm256_fnmadd_ps(eh, l, eh); /* e^(−h)·(1 − l) = e^(−a²) to first order in l */
    const __m256 big = _mm256_or_ps(_mm256_fnmadd_ps(e, gz, _mm256_set1_ps(1.0f)), _mm256_and_ps(sign, x));
    const __m256 y = _mm256_blendv_ps(big, small, _mm256_cmp_ps(ax, _mm256_set1_ps(1.25f), _CMP_LT_OQ));
    return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

/* torch's gelu_pytorch_tanh operation order, no contraction: inner = β·(x + κ·(x·x·x)); 0.5·x·(1 + tanh(inner)). */
static inline __attribute__((always_inline)) __m256 v8_gelu_tanh(__m256 v) {
    const __m256 cube = _mm256_mul_ps(_mm256_mul_ps(v, v), v);
    const __m256 inner = _mm256_mul_ps(_mm256_set1_ps(0.797884583f),
                                       _mm256_add_ps(v, _mm256_mul_ps(_mm256_set1_ps(0.044715f), cube)));
    return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), v),
                         _mm256_add_ps(_mm256_set1_ps(1.0f), v8_tanh(inner)));
}

/* torch's exact GELU order: x·0.5·(1 + erf(x·(1/√2))). */
static inline __attribute__((always_inline)) __m256 v8_gelu_erf(__m256 v) {
    const __m256 e = v8_erf(_mm256_mul_ps(v, _mm256_set1_ps(0.707106769f)));
    return _mm256_mul_ps(_mm256_mul_ps(v, _mm256_set1_ps(0.5f)), _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

#endif
