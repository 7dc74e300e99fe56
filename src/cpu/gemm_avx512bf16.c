/* gemm_avx512bf16.c — the AVX512-BF16 micro-tile of the bf16 GEMM (bf16.h): 14 rows x 32 columns in 28 zmm
 * accumulators, one VDPBF16PS per accumulator and pair step (an A pair broadcast against 16 B pairs), and the A
 * packer that rounds f32 rows to bf16 pairs (integer round-to-nearest-even, bf16_round's rule, lane-wise).
 * Compiled with -mavx512bf16 and called only after cpu_has_avx512bf16(). */
#include <immintrin.h>
#include <stdint.h>

#include "cpu/bf16.h"
#include "cpu/bf16_avx512.h"

#define MR BF16_MR

static inline __m512 dp(__m512 acc, __m512i a, __m512i b) {
    return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b);
}

void gemm_bf16_ukr_avx512bf16(int kp, const uint32_t *a, const uint32_t *b0, const uint32_t *b1, float *c,
                              size_t ldc, int first) {
    __m512 acc0[MR], acc1[MR];
    if (b1) {
#pragma GCC unroll 14
        for (int i = 0; i < MR; i++) {
            acc0[i] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(c + (size_t)i * ldc);
            acc1[i] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(c + (size_t)i * ldc + 16);
        }
        for (int q = 0; q < kp; q++, a += MR, b0 += 16, b1 += 16) {
            const __m512i y0 = _mm512_loadu_si512(b0), y1 = _mm512_loadu_si512(b1);
    #pragma GCC unroll 14
        for (int i = 0; i < MR; i++) {
                const __m512i x = _mm512_set1_epi32((int)a[i]);
                acc0[i] = dp(acc0[i], x, y0);
                acc1[i] = dp(acc1[i], x, y1);
            }
        }
#pragma GCC unroll 14
        for (int i = 0; i < MR; i++) {
            _mm512_storeu_ps(c + (size_t)i * ldc, acc0[i]);
            _mm512_storeu_ps(c + (size_t)i * ldc + 16, acc1[i]);
        }
        return;
    }
#pragma GCC unroll 14
    for (int i = 0; i < MR; i++) acc0[i] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(c + (size_t)i * ldc);
    for (int q = 0; q < kp; q++, a += MR, b0 += 16) {
        const __m512i y0 = _mm512_loadu_si512(b0);
    #pragma GCC unroll 14
    for (int i = 0; i < MR; i++) acc0[i] = dp(acc0[i], _mm512_set1_epi32((int)a[i]), y0);
    }
    for (int i = 0; i < MR; i++) _mm512_storeu_ps(c + (size_t)i * ldc, acc0[i]);
}

void gemm_bf16_pack_a_avx512bf16(const float *a, size_t lda, int mr, int kp, int kvalid, uint32_t *ap) {
    /* Row i's pairs for 8 steps at a time: 16 consecutive floats → 8 dwords (lo | hi << 16), scattered with
     * stride MR. Zero rows past mr, zero elements past kvalid. */
    uint32_t tmp[8];
    for (int i = 0; i < MR; i++) {
        const float *ai = a + (size_t)i * lda;
        for (int q = 0; q < kp; q += 8) {
            const int n = 2 * (kp - q < 8 ? kp - q : 8), left = kvalid - 2 * q;
            const int nv = i < mr ? (n < left ? n : left > 0 ? left : 0) : 0;
            const __mmask16 m = (__mmask16)((1u << nv) - 1u);
            const __m512i r = bf16_round16(_mm512_maskz_loadu_ps(m, ai + 2 * (size_t)q));
            /* qword t = d(2t) | d(2t+1) << 32 with 16-bit d: its low dword | (it >> 16) is d(2t) | d(2t+1) << 16 */
            const __m512i pk = _mm512_or_si512(r, _mm512_srli_epi64(r, 16));
            const __m256i d = _mm512_cvtepi64_epi32(pk);
            _mm256_storeu_si256((__m256i *)(void *)tmp, d);
            for (int t = 0; t < n / 2; t++) ap[(size_t)(q + t) * MR + i] = nv > 2 * t ? tmp[t] : 0;
        }
    }
}
