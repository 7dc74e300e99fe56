/* gemm_avx512.c — AVX-512 GEMM microkernel (14 x 32 f32 tile: 28 zmm accumulators) on f32 or bf16 B panels,
 * and the 14-row A packer. Compiled with -mavx512f/bw/dq/vl -mfma -mavx2; called only after cpu_has_avx512().
 *
 * Per k step: two 16-wide B vectors, 14 broadcasts of A, 28 FMAs. On a core with two 512-bit FMA ports that is
 * 14 cycles of FMA against 16 loads, so loads never limit it. bf16 panels (gemm.h, GEMM_BF16_PAIRS order: dword j
 * of a two-step block holds column j of the even step in its low half, of the odd step in its high half) widen
 * with one operation per vector: a 16-bit left shift gives the even step, a zero-masked load of the high halves
 * the odd one; 2 extra uops per 28 FMAs, on the FMA ports. Measured on the 2-core AVX-512 VM (bench/bench_ukr.c,
 * L1-resident panels): f32 at the FMA peak (176 GFLOP/s a core), bf16 at 93 % of it (164). So the bf16 kernel can
 * store what it widens (bw) and the driver runs the f32 kernel on that copy for the M block's other tiles; whole
 * GEMMs: gemm.c. The f32 kernel can also read the next B tile towards L2 as it goes (pf0, pf1: one line of each
 * per k step; gemm.c has the last tile on each B tile do so). (Tried without gain: the even step as a masked load
 * from one element back, which costs the same as the shift; a 28 x 16 tile, one widening per 28 FMAs, which is
 * load-bound at the same 93 %.) */
#include <immintrin.h>
#include <stdint.h>

#include "cpu/kernels_avx512.h"
#include "cpu/simd_x86.h"
#include "cpu/vmath_avx512.h"

enum { MR = 14 };

/* One k step on B vectors x0 (columns 0-15) and x1 (16-31, when two). */
static inline __attribute__((always_inline)) void step(__m512 acc[2 * MR], const float *a, __m512 x0, __m512 x1,
                                                       int two) {
#pragma GCC unroll 14
    for (int i = 0; i < MR; i++) {
        const __m512 ai = _mm512_set1_ps(a[i]);
        acc[2 * i] = _mm512_fmadd_ps(ai, x0, acc[2 * i]);
        if (two) acc[2 * i + 1] = _mm512_fmadd_ps(ai, x1, acc[2 * i + 1]);
    }
}

/* The tile's final values into C (kernels_avx2.h, gemm_tail): partial sums, bias, GELU, residual, masked to the
 * valid rows and columns. Not inlined, so that its GELU does not weigh on the k loop's register allocation. */
static __attribute__((noinline)) void finish(const __m512 acc[2 * MR], const float *cb, size_t ldc, int first,
                                             int two, const gemm_tail *t) {
    const int c0 = t->cols < 16 ? t->cols : 16, c1 = t->cols - c0;
    const __mmask16 m0 = (__mmask16)((1u << c0) - 1u), m1 = (__mmask16)((1u << c1) - 1u); /* two: c1 > 0 */
    __m512 b0 = _mm512_setzero_ps(), b1 = _mm512_setzero_ps();
    if (t->bias) {
        b0 = _mm512_maskz_loadu_ps(m0, t->bias);
        if (two) b1 = _mm512_maskz_loadu_ps(m1, t->bias + 16);
    }
#pragma GCC unroll 14
    for (int i = 0; i < MR; i++) { /* constant indices keep acc in registers */
        if (i >= t->rows) break;
        const float *cbi = cb + (size_t)i * ldc;
        float *ci = t->c + (size_t)i * t->ldc;
        __m512 v = first ? acc[2 * i] : _mm512_add_ps(_mm512_loadu_ps(cbi), acc[2 * i]);
        if (t->bias) v = _mm512_add_ps(v, b0);
        if (t->act) v = t->act == GEMM_EPI_GELU_TANH ? v16_gelu_tanh(v) : v16_gelu_erf(v);
        if (t->accumulate) v = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, ci), v);
        _mm512_mask_storeu_ps(ci, m0, v);
        if (two) {
            v = first ? acc[2 * i + 1] : _mm512_add_ps(_mm512_loadu_ps(cbi + 16), acc[2 * i + 1]);
            if (t->bias) v = _mm512_add_ps(v, b1);
            if (t->act) v = t->act == GEMM_EPI_GELU_TANH ? v16_gelu_tanh(v) : v16_gelu_erf(v);
            if (t->accumulate) v = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, ci + 16), v);
            _mm512_mask_storeu_ps(ci + 16, m1, v);
        }
    }
}

/* bf16 and keep are compile-time constants at every call: keep stores the widened B vectors to bw (bf16 only). */
static inline __attribute__((always_inline)) void ukr(int kc, const float *a, const void *b0v, const void *b1v,
                                                      int two, int bf16, int keep, float *bw, float *c, size_t ldc,
                                                      int first, const gemm_tail *tail, const void *pf0,
                                                      const void *pf1, int pfn) {
    __m512 acc[2 * MR];
#pragma GCC unroll 28
    for (int r = 0; r < 2 * MR; r++) acc[r] = _mm512_setzero_ps();
    if (bf16) {
        const uint16_t *p0 = (const uint16_t *)b0v, *p1 = (const uint16_t *)b1v;
        const __mmask32 hi_words = 0xAAAAAAAAu;
        float *w0 = bw, *w1 = keep ? bw + (size_t)kc * 16 : NULL; /* keep: the two widened micro-panels */
        int k = 0;
        for (; k + 2 <= kc; k += 2, p0 += 32, p1 += two ? 32 : 0, a += 2 * MR) {
            __m512 x0 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_loadu_si512((const void *)p0), 16));
            __m512 x1 = x0;
            if (two) x1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_loadu_si512((const void *)p1), 16));
            if (keep) {
                _mm512_store_ps(w0 + (size_t)k * 16, x0);
                if (two) _mm512_store_ps(w1 + (size_t)k * 16, x1);
            }
            step(acc, a, x0, x1, two);
            /* The odd step: a zero-masked load of the high halves (not the first load reused: that would hold
             * two more registers across the 28 FMAs and spill accumulators). */
            x0 = _mm512_castsi512_ps(_mm512_maskz_loadu_epi16(hi_words, p0));
            if (two) x1 = _mm512_castsi512_ps(_mm512_maskz_loadu_epi16(hi_words, p1));
            if (keep) {
                _mm512_store_ps(w0 + (size_t)(k + 1) * 16, x0);
                if (two) _mm512_store_ps(w1 + (size_t)(k + 1) * 16, x1);
            }
            step(acc, a + MR, x0, x1, two);
        }
        if (k < kc) { /* the panel's lone last step, natural order */
            const __m512 x0 = _mm512_castsi512_ps(
                _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)p0)), 16));
            __m512 x1 = x0;
            if (two)
                x1 = _mm512_castsi512_ps(_mm512_slli_epi32(
                    _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)p1)), 16));
            if (keep) {
                _mm512_store_ps(w0 + (size_t)k * 16, x0);
                if (two) _mm512_store_ps(w1 + (size_t)k * 16, x1);
            }
            step(acc, a, x0, x1, two);
        }
    } else {
        const float *p0 = (const float *)b0v, *p1 = (const float *)b1v;
        int k = 0;
        if (pf0) { /* the first pfn steps also read one line of each of the next B tile's panels towards L2 */
            const char *q0 = (const char *)pf0, *q1 = (const char *)(pf1 ? pf1 : pf0);
            for (const int n = pfn < kc ? pfn : kc; k < n; k++, p0 += 16, p1 += two ? 16 : 0, a += MR) {
                _mm_prefetch(q0 + 64 * (size_t)k, _MM_HINT_T1);
                _mm_prefetch(q1 + 64 * (size_t)k, _MM_HINT_T1);
                const __m512 x0 = _mm512_load_ps(p0);
                const __m512 x1 = two ? _mm512_load_ps(p1) : x0;
                step(acc, a, x0, x1, two);
            }
        }
        for (; k < kc; k++, p0 += 16, p1 += two ? 16 : 0, a += MR) {
            const __m512 x0 = _mm512_load_ps(p0);
            const __m512 x1 = two ? _mm512_load_ps(p1) : x0;
            step(acc, a, x0, x1, two);
        }
    }
    if (tail) {
        __m512 out[2 * MR]; /* a copy, so that acc's address never escapes and acc stays in registers */
#pragma GCC unroll 28
        for (int r = 0; r < 2 * MR; r++) out[r] = acc[r];
        finish(out, c, ldc, first, two, tail);
        return;
    }
#pragma GCC unroll 14
    for (int i = 0; i < MR; i++) {
        float *ci = c + (size_t)i * ldc;
        if (first) {
            _mm512_storeu_ps(ci, acc[2 * i]);
            if (two) _mm512_storeu_ps(ci + 16, acc[2 * i + 1]);
        } else {
            _mm512_storeu_ps(ci, _mm512_add_ps(_mm512_loadu_ps(ci), acc[2 * i]));
            if (two) _mm512_storeu_ps(ci + 16, _mm512_add_ps(_mm512_loadu_ps(ci + 16), acc[2 * i + 1]));
        }
    }
}

void gemm_ukr_14x32_avx512(int kc, const float *a, const float *b0, const float *b1, float *c, size_t ldc,
                           int first, const gemm_tail *tail, const void *pf0, const void *pf1, int pfn) {
    if (b1) ukr(kc, a, b0, b1, 1, 0, 0, NULL, c, ldc, first, tail, pf0, pf1, pfn);
    else ukr(kc, a, b0, b0, 0, 0, 0, NULL, c, ldc, first, tail, pf0, pf1, pfn);
}

void gemm_ukr_14x32_bf16_avx512(int kc, const float *a, const uint16_t *b0, const uint16_t *b1, float *c,
                                size_t ldc, int first, const gemm_tail *tail, float *bw) {
    if (bw) {
        if (b1) ukr(kc, a, b0, b1, 1, 1, 1, bw, c, ldc, first, tail, NULL, NULL, 0);
        else ukr(kc, a, b0, b0, 0, 1, 1, bw, c, ldc, first, tail, NULL, NULL, 0);
    } else {
        if (b1) ukr(kc, a, b0, b1, 1, 1, 0, NULL, c, ldc, first, tail, NULL, NULL, 0);
        else ukr(kc, a, b0, b0, 0, 1, 0, NULL, c, ldc, first, tail, NULL, NULL, 0);
    }
}

void gemm_pack_a14_avx512(const float *a, size_t lda, int mr, int kc, float *ap) {
    int k = 0;
    for (; k + 8 <= kc; k += 8) {
        __m256 lo[8], hi[8];
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) {
            lo[i] = i < mr ? _mm256_loadu_ps(a + (size_t)i * lda + k) : _mm256_setzero_ps();
            hi[i] = i < 6 && i + 8 < mr ? _mm256_loadu_ps(a + (size_t)(i + 8) * lda + k) : _mm256_setzero_ps();
        }
        transpose8(lo);
        transpose8(hi);
#pragma GCC unroll 8
        for (int t = 0; t < 8; t++) {
            float *d = ap + (size_t)(k + t) * MR;
            _mm256_storeu_ps(d, lo[t]);
            _mm256_mask_storeu_ps(d + 8, 0x3F, hi[t]); /* rows 8-13 only: d + 14 is the next step */
        }
    }
    for (; k < kc; k++)
        for (int i = 0; i < MR; i++) ap[(size_t)k * MR + i] = i < mr ? a[(size_t)i * lda + k] : 0.0f;
}
