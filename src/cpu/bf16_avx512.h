/* bf16_avx512.h — bf16 helpers for the AVX-512 kernel files (*_avx512bf16.c, *_amx.c), which are compiled with the
 * AVX-512 flags and called only after a CPU check. Private to the library. */
#ifndef QVL_CPU_BF16_AVX512_H
#define QVL_CPU_BF16_AVX512_H

#include <immintrin.h>

#include "cpu/vmath_coef.h" /* vm_exp2_p */

/* 16 floats → 16 bf16 bits in the low halves of 16 dwords (bf16_round's rule lane-wise: NaN quiet, else nearest
 * even; integer arithmetic, so no dependence on VCVTNEPS2BF16's denormal handling). */
static inline __m512i bf16_round16(__m512 f) {
    const __m512i u = _mm512_castps_si512(f);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
    const __mmask16 nan = _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q);
    const __m512i qn = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    return _mm512_mask_mov_epi32(r, nan, qn);
}

/* bf16_exp2 (bf16.h) lane-wise, the same operations in the same order: 0 where x < -125 or NaN, else p(r) with n
 * = x rounded to nearest added to its exponent field, r = x - n. (VSCALEFPS would scale in one operation instead of
 * three, but differs where the softmax's fma residual x is 128 or more, scores of 2^31 and up, which bf16_exp2's
 * integer conversion maps to 1: tried, test_bf16's overflow case fails, and the AVX512-BF16 attention ran within
 * 1 % either way on an Emerald Rapids VM.) */
static inline __m512 bf16_exp2_16(__m512 x) {
    const __mmask16 ok = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-125.0f), _CMP_GE_OQ);
    const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 r = _mm512_sub_ps(x, n);
    __m512 y = _mm512_set1_ps(vm_exp2_p[0]);
#pragma GCC unroll 5
    for (int i = 1; i < 6; i++) y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(vm_exp2_p[i]));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.0f));
    return _mm512_castsi512_ps(
        _mm512_maskz_add_epi32(ok, _mm512_castps_si512(y), _mm512_slli_epi32(_mm512_cvtps_epi32(n), 23)));
}

/* 16 x 16 dwords transposed in registers: r[i] element j → r[j] element i. */
static inline void tr16_epi32(__m512i *r) {
    __m512i a[16], b[16];
    for (int i = 0; i < 8; i++) {
        a[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        a[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) { /* b[4i + c], lane L: column 4L + c of rows 4i .. 4i + 3 */
        b[4 * i] = _mm512_unpacklo_epi64(a[4 * i], a[4 * i + 2]);
        b[4 * i + 1] = _mm512_unpackhi_epi64(a[4 * i], a[4 * i + 2]);
        b[4 * i + 2] = _mm512_unpacklo_epi64(a[4 * i + 1], a[4 * i + 3]);
        b[4 * i + 3] = _mm512_unpackhi_epi64(a[4 * i + 1], a[4 * i + 3]);
    }
    for (int c = 0; c < 4; c++) {
        const __m512i e0 = _mm512_shuffle_i32x4(b[c], b[4 + c], 0x44), e1 = _mm512_shuffle_i32x4(b[c], b[4 + c], 0xee);
        const __m512i e2 = _mm512_shuffle_i32x4(b[8 + c], b[12 + c], 0x44);
        const __m512i e3 = _mm512_shuffle_i32x4(b[8 + c], b[12 + c], 0xee);
        r[c] = _mm512_shuffle_i32x4(e0, e2, 0x88);
        r[4 + c] = _mm512_shuffle_i32x4(e0, e2, 0xdd);
        r[8 + c] = _mm512_shuffle_i32x4(e1, e3, 0x88);
        r[12 + c] = _mm512_shuffle_i32x4(e1, e3, 0xdd);
    }
}
#endif
