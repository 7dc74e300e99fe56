/* bf16_avx512.h — bf16 helpers for the AVX-512 kernel files (*_avx512bf16.c, *_amx.c), which are compiled with the
 * AVX-512 flags and called only after a CPU check. Private to the library. */
#ifndef QVL_CPU_BF16_AVX512_H
#define QVL_CPU_BF16_AVX512_H

#include <immintrin.h>

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

#endif
