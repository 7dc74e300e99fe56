/* vmath_avx512.h — the 16-lane twins of vmath_avx2.h: the same operations per lane on the same constants, so
 * every value gets the same bits from either ISA (test_ops checks it). Include only from files compiled with
 * -mavx512f/dq -mfma. */
#ifndef QVL_CPU_VMATH_AVX512_H
#define QVL_CPU_VMATH_AVX512_H

#include <immintrin.h>

#include "cpu/vmath_coef.h"

static inline __attribute__((always_inline)) __m512 v16_horner(__m512 t, const float *c, int n) {
    __m512 y = _mm512_set1_ps(c[0]);
    for (int i = 1; i < n; i++) y = _mm512_fmadd_ps(y, t, _mm512_set1_ps(c[i]));
    return y;
}

/* e^x for x in [-87, 88]: x = n·ln2 + r, |r| <= ln2/2 (exact with FMA and a two-part ln2), e^r = 1 + r + r²·P(r)
 * with P fitted on [-ln2/2, ln2/2] (6.9e-8 relative), scaled by 2^n through the exponent bits. */
static inline __attribute__((always_inline)) __m512 v16_exp(__m512 x) {
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), r);
    const __m512 q = v16_horner(_mm512_mul_ps(r, _mm512_set1_ps(2.88539004f)), vm_exp_p, 6);
    const __m512 y = _mm512_fmadd_ps(_mm512_mul_ps(r, r), q, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(y, _mm512_castsi512_ps(e));
}

/* tanh: |x| < 0.625: x + x·z·Q(z), z = x², Q fitted on [0, 0.390625] (9.9e-8 relative, and the correction is at
 * most 13 % of the result). Otherwise 1 − 2t/(1 + t) with t = e^(−2|x|), sign restored; t underflows to 0 (→ ±1)
 * for large |x| and ±inf. */
static inline __attribute__((always_inline)) __m512 v16_tanh(__m512 x) {
    const __m512 sign = _mm512_set1_ps(-0.0f);
    const __m512 ax = _mm512_andnot_ps(sign, x);
    const __m512 z = _mm512_mul_ps(x, x);
    const __m512 qz = v16_horner(_mm512_fmadd_ps(z, _mm512_set1_ps(5.11999989f), _mm512_set1_ps(-1.0f)), vm_tanh_q, 6);
    const __m512 small = _mm512_or_ps(_mm512_fmadd_ps(_mm512_mul_ps(ax, z), qz, ax), _mm512_and_ps(sign, x));
    const __m512 t = v16_exp(_mm512_max_ps(_mm512_mul_ps(ax, _mm512_set1_ps(-2.0f)), _mm512_set1_ps(-87.0f)));
    const __m512 f = _mm512_div_ps(_mm512_add_ps(t, t), _mm512_add_ps(t, _mm512_set1_ps(1.0f)));
    const __m512 big = _mm512_or_ps(_mm512_sub_ps(_mm512_set1_ps(1.0f), f), _mm512_and_ps(sign, x));
    const __m512 y = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(ax, _mm512_set1_ps(0.625f), _CMP_LT_OQ), big, small);
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), y, x);
}

/* erf: |x| < 1.25: x + x·R(z), z = x², R = erf(x)/x − 1 fitted on [0, 1.5625] (3.7e-8 absolute).
 * Otherwise 1 − e^(−x²)·G(|x|), G = e^(x²)·erfc fitted on [1.25, 4] (1.8e-7 relative; erfc(1.25) = 0.077, so that is
 * ≈ 0.25 ulp of the result), e^(−x²) with the rounding error of x² folded back in; |x| clamped to 4, where erf
 * rounds to 1; sign restored. */
static inline __attribute__((always_inline)) __m512 v16_erf(__m512 x) {
    const __m512 sign = _mm512_set1_ps(-0.0f);
    const __m512 ax = _mm512_andnot_ps(sign, x);
    const __m512 z = _mm512_mul_ps(x, x);
    const __m512 rz = v16_horner(_mm512_fmadd_ps(z, _mm512_set1_ps(1.27999997f), _mm512_set1_ps(-1.0f)), vm_erf_r, 9);
    const __m512 small = _mm512_fmadd_ps(x, rz, x);
    const __m512 a = _mm512_min_ps(_mm512_max_ps(ax, _mm512_set1_ps(1.25f)), _mm512_set1_ps(4.0f));
    const __m512 gz = v16_horner(_mm512_fmadd_ps(a, _mm512_set1_ps(0.727272749f), _mm512_set1_ps(-1.90909088f)), vm_erf_g, 12);
    const __m512 h = _mm512_mul_ps(a, a), l = _mm512_fmsub_ps(a, a, h); /* a² = h + l exactly */
    const __m512 eh = v16_exp(_mm512_sub_ps(_mm512_setzero_ps(), h));
    const __m512 e = _mm512_fnmadd_ps(eh, l, eh); /* e^(−h)·(1 − l) = e^(−a²) to first order in l */
    const __m512 big = _mm512_or_ps(_mm512_fnmadd_ps(e, gz, _mm512_set1_ps(1.0f)), _mm512_and_ps(sign, x));
    const __m512 y = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(ax, _mm512_set1_ps(1.25f), _CMP_LT_OQ), big, small);
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), y, x);
}

/* torch's gelu_pytorch_tanh operation order, no contraction: inner = β·(x + κ·(x·x·x)); 0.5·x·(1 + tanh(inner)). */
static inline __attribute__((always_inline)) __m512 v16_gelu_tanh(__m512 v) {
    const __m512 cube = _mm512_mul_ps(_mm512_mul_ps(v, v), v);
    const __m512 inner = _mm512_mul_ps(_mm512_set1_ps(0.797884583f),
                                       _mm512_add_ps(v, _mm512_mul_ps(_mm512_set1_ps(0.044715f), cube)));
    return _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), v),
                         _mm512_add_ps(_mm512_set1_ps(1.0f), v16_tanh(inner)));
}

/* torch's exact GELU order: x·0.5·(1 + erf(x·(1/√2))). */
static inline __attribute__((always_inline)) __m512 v16_gelu_erf(__m512 v) {
    const __m512 e = v16_erf(_mm512_mul_ps(v, _mm512_set1_ps(0.707106769f)));
    return _mm512_mul_ps(_mm512_mul_ps(v, _mm512_set1_ps(0.5f)), _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

#endif
