/* gemm_avx512bf16.c — the AVX512-BF16 micro-tile of the bf16 GEMM (bf16.h): 14 rows x 32 columns in 28 zmm
 * accumulators, one VDPBF16PS per accumulator and pair step (an A pair broadcast against 16 B pairs; row i's pairs
 * at the constant offset i·BF16_KP), optionally reading the next B tile towards L2 as it goes, and the A packer
 * that rounds f32 rows to bf16 pairs (integer round-to-nearest-even, bf16_round's rule, lane-wise) and stores
 * each row's pairs as whole vectors.
 * Compiled with -mavx512bf16 and called only after cpu_has_avx512bf16(). */
#include <immintrin.h>
#include <stdint.h>

#include "cpu/bf16.h"
#include "cpu/bf16_avx512.h"

#define MR BF16_MR

static inline __m512 dp(__m512 acc, __m512i a, __m512i b) {
    return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b);
}

/* One pair step of the 14 x 32 tile. */
#define STEP2(q)                                                                                                     \
    do {                                                                                                             \
        const __m512i y0 = _mm512_loadu_si512(b0 + 16 * (q)), y1 = _mm512_loadu_si512(b1 + 16 * (q));                \
        _Pragma("GCC unroll 14") for (int i = 0; i < MR; i++) {                                                      \
            const __m512i x = _mm512_set1_epi32((int)a[(size_t)i * BF16_KP + (q)]);                                  \
            acc0[i] = dp(acc0[i], x, y0);                                                                            \
            acc1[i] = dp(acc1[i], x, y1);                                                                            \
        }                                                                                                            \
    } while (0)

void gemm_bf16_ukr_avx512bf16(int kp, const uint32_t *a, const uint32_t *b0, const uint32_t *b1, float *c,
                              size_t ldc, int first, const uint32_t *pf0, const uint32_t *pf1, int pfn) {
    __m512 acc0[MR], acc1[MR];
    if (b1) {
#pragma GCC unroll 14
        for (int i = 0; i < MR; i++) {
            acc0[i] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(c + (size_t)i * ldc);
            acc1[i] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(c + (size_t)i * ldc + 16);
        }
        int q = 0;
        if (pf0) {
            const char *p0 = (const char *)pf0, *p1 = (const char *)(pf1 ? pf1 : pf0);
            for (const int n = pfn < kp ? pfn : kp; q < n; q++) {
                _mm_prefetch(p0 + 64 * (size_t)q, _MM_HINT_T1);
                _mm_prefetch(p1 + 64 * (size_t)q, _MM_HINT_T1);
                STEP2(q);
            }
        }
        for (; q < kp; q++) STEP2(q);
#pragma GCC unroll 14
        for (int i = 0; i < MR; i++) {
            _mm512_storeu_ps(c + (size_t)i * ldc, acc0[i]);
            _mm512_storeu_ps(c + (size_t)i * ldc + 16, acc1[i]);
        }
        return;
    }
    (void)pf0, (void)pf1, (void)pfn; /* a 16-column tile (the last of its N block) reads nothing ahead */
#pragma GCC unroll 14
    for (int i = 0; i < MR; i++) acc0[i] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(c + (size_t)i * ldc);
    for (int q = 0; q < kp; q++) {
        const __m512i y0 = _mm512_loadu_si512(b0 + 16 * q);
#pragma GCC unroll 14
        for (int i = 0; i < MR; i++) acc0[i] = dp(acc0[i], _mm512_set1_epi32((int)a[(size_t)i * BF16_KP + q]), y0);
    }
    for (int i = 0; i < MR; i++) _mm512_storeu_ps(c + (size_t)i * ldc, acc0[i]);
}

void gemm_bf16_pack_a_avx512bf16(const float *a, size_t lda, int mr, int kp, int kvalid, uint32_t *ap) {
    /* 16 pair steps at a time: 32 consecutive floats of a row → 32 bf16 (low halves of two vectors' dwords) → the
     * even words of the two, in order: 16 dwords d(t) = bf16(a[2t]) | bf16(a[2t + 1]) << 16. Zero past kvalid;
     * zero rows past mr. */
    const __m512i even = _mm512_set_epi16(62, 60, 58, 56, 54, 52, 50, 48, 46, 44, 42, 40, 38, 36, 34, 32, 30, 28, 26,
                                          24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    for (int i = 0; i < MR; i++) {
        const float *ai = a + (size_t)i * lda;
        uint32_t *d = ap + (size_t)i * BF16_KP;
        for (int q = 0; q < kp; q += 16) {
            const int left = i < mr ? kvalid - 2 * q : 0;
            const int n0 = left < 0 ? 0 : left < 16 ? left : 16, n1 = left < 16 ? 0 : left < 32 ? left - 16 : 16;
            const __m512i r0 = bf16_round16(_mm512_maskz_loadu_ps((__mmask16)((1u << n0) - 1u), ai + 2 * (size_t)q));
            const __m512i r1 =
                bf16_round16(_mm512_maskz_loadu_ps((__mmask16)((1u << n1) - 1u), ai + 2 * (size_t)q + 16));
            const int ns = kp - q < 16 ? kp - q : 16;
            _mm512_mask_storeu_epi32(d + q, (__mmask16)((1u << ns) - 1u), _mm512_permutex2var_epi16(r0, even, r1));
        }
    }
}
