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
