/* gemm_avx2.c — AVX2+FMA GEMM microkernel (6 x 16 f32 tile) and packers (f32/f16/bf16 B → f32 panels).
 * Compiled with -mavx2 -mfma -mf16c; called only after cpu_has_avx2(). */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "cpu/kernels_avx2.h"
#include "cpu/ops.h"
#include "cpu/simd_x86.h"
#include "cpu/vmath_avx2.h"

/* 12 accumulators (6 rows x 2 vectors), 2 B vectors and 6 broadcasts per k: FMA-bound on 2-FMA-port cores.
 * bf16 != 0: b is a bf16 panel (gemm.h order) widened by two in-lane unpacks with zero (shuffle port, not the
 * FMA ports); the FMA sequence is the same, so both variants give the same bits on the same widened values. */
/* The tile's final values into C (kernels_avx2.h, gemm_tail): partial sums, bias, GELU, residual, masked to the
 * valid rows and columns. Not inlined: with its GELU inside the k loop's function, gcc's register allocation of
 * the loop (12 accumulators, 2 B vectors and broadcasts in 16 registers) spilled, measured -30 %. full: all 16
 * columns valid, so plain loads and stores: VMASKMOVPS is microcoded on AMD cores (Zen 1-4), its store form
 * several times slower than a store. */
static inline __attribute__((always_inline)) void finish_tile(const __m256 acc[12], const float *cb, size_t ldc,
                                                              int first, const gemm_tail *t, int full) {
    static const int32_t ramp[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    const __m256i lo = _mm256_loadu_si256((const __m256i *)(const void *)ramp);
    const __m256i hi = _mm256_loadu_si256((const __m256i *)(const void *)(ramp + 8));
    const __m256i n = _mm256_set1_epi32(t->cols);
    const __m256i m0 = _mm256_cmpgt_epi32(n, lo), m1 = _mm256_cmpgt_epi32(n, hi);
    __m256 b0 = _mm256_setzero_ps(), b1 = _mm256_setzero_ps();
    if (t->bias) {
        b0 = full ? _mm256_loadu_ps(t->bias) : _mm256_maskload_ps(t->bias, m0);
        b1 = full ? _mm256_loadu_ps(t->bias + 8) : _mm256_maskload_ps(t->bias + 8, m1);
    }
#pragma GCC unroll 6
    for (int i = 0; i < 6; i++) { /* constant indices keep acc in registers */
        if (i >= t->rows) break;
        const float *cbi = cb + (size_t)i * ldc;
        float *ci = t->c + (size_t)i * t->ldc;
        __m256 v0 = first ? acc[2 * i] : _mm256_add_ps(_mm256_loadu_ps(cbi), acc[2 * i]);
        __m256 v1 = first ? acc[2 * i + 1] : _mm256_add_ps(_mm256_loadu_ps(cbi + 8), acc[2 * i + 1]);
        if (t->bias) {
            v0 = _mm256_add_ps(v0, b0);
            v1 = _mm256_add_ps(v1, b1);
        }
        if (t->act == GEMM_EPI_GELU_TANH) {
            v0 = v8_gelu_tanh(v0);
            v1 = v8_gelu_tanh(v1);
        } else if (t->act == GEMM_EPI_GELU_ERF) {
            v0 = v8_gelu_erf(v0);
            v1 = v8_gelu_erf(v1);
        }
        if (t->accumulate) {
            v0 = _mm256_add_ps(full ? _mm256_loadu_ps(ci) : _mm256_maskload_ps(ci, m0), v0);
            v1 = _mm256_add_ps(full ? _mm256_loadu_ps(ci + 8) : _mm256_maskload_ps(ci + 8, m1), v1);
        }
        if (full) {
            _mm256_storeu_ps(ci, v0);
            _mm256_storeu_ps(ci + 8, v1);
        } else {
            _mm256_maskstore_ps(ci, m0, v0);
            _mm256_maskstore_ps(ci + 8, m1, v1);
        }
    }
}

static __attribute__((noinline)) void finish(const __m256 acc[12], const float *cb, size_t ldc, int first,
                                             const gemm_tail *t) {
    if (t->cols >= 16) finish_tile(acc, cb, ldc, first, t, 1);
    else finish_tile(acc, cb, ldc, first, t, 0);
}

static inline __attribute__((always_inline)) void ukr_6x16(int kc, const float *a, const void *bv, int bf16,
                                                             float *c, size_t ldc, int first, const gemm_tail *tail) {
    __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps();
    __m256 c10 = _mm256_setzero_ps(), c11 = _mm256_setzero_ps();
    __m256 c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps();
    __m256 c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps();
    __m256 c40 = _mm256_setzero_ps(), c41 = _mm256_setzero_ps();
    __m256 c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
    const float *bf = (const float *)bv;
    const uint16_t *bh = (const uint16_t *)bv;
    const __m256i zero = _mm256_setzero_si256();
    for (int k = 0; k < kc; k++) {
        __m256 b0, b1;
        if (bf16) {
            const __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)bh);
            b0 = _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, h));
            b1 = _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, h));
            bh += 16;
        } else {
            b0 = _mm256_load_ps(bf);
            b1 = _mm256_load_ps(bf + 8);
            bf += 16;
        }
        __m256 a0 = _mm256_broadcast_ss(a + 0), a1 = _mm256_broadcast_ss(a + 1);
        c00 = _mm256_fmadd_ps(a0, b0, c00);
        c01 = _mm256_fmadd_ps(a0, b1, c01);
        c10 = _mm256_fmadd_ps(a1, b0, c10);
        c11 = _mm256_fmadd_ps(a1, b1, c11);
        a0 = _mm256_broadcast_ss(a + 2);
        a1 = _mm256_broadcast_ss(a + 3);
        c20 = _mm256_fmadd_ps(a0, b0, c20);
        c21 = _mm256_fmadd_ps(a0, b1, c21);
        c30 = _mm256_fmadd_ps(a1, b0, c30);
        c31 = _mm256_fmadd_ps(a1, b1, c31);
        a0 = _mm256_broadcast_ss(a + 4);
        a1 = _mm256_broadcast_ss(a + 5);
        c40 = _mm256_fmadd_ps(a0, b0, c40);
        c41 = _mm256_fmadd_ps(a0, b1, c41);
        c50 = _mm256_fmadd_ps(a1, b0, c50);
        c51 = _mm256_fmadd_ps(a1, b1, c51);
        a += 6;
    }
    __m256 acc[12] = {c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51};
    if (tail) {
        finish(acc, c, ldc, first, tail);
        return;
    }
#pragma GCC unroll 6
    for (int i = 0; i < 6; i++) {
        float *ci = c + (size_t)i * ldc;
        if (first) {
            _mm256_storeu_ps(ci, acc[2 * i]);
            _mm256_storeu_ps(ci + 8, acc[2 * i + 1]);
        } else {
            _mm256_storeu_ps(ci, _mm256_add_ps(_mm256_loadu_ps(ci), acc[2 * i]));
            _mm256_storeu_ps(ci + 8, _mm256_add_ps(_mm256_loadu_ps(ci + 8), acc[2 * i + 1]));
        }
    }
}

void gemm_ukr_6x16_avx2(int kc, const float *a, const float *b, float *c, size_t ldc, int first,
                        const gemm_tail *tail) {
    ukr_6x16(kc, a, b, 0, c, ldc, first, tail);
}

void gemm_ukr_6x16_bf16_avx2(int kc, const float *a, const uint16_t *b, float *c, size_t ldc, int first,
                             const gemm_tail *tail) {
    ukr_6x16(kc, a, b, 1, c, ldc, first, tail);
}

/* 8 consecutive elements of a row, widened to f32; p may be unaligned. */
static inline __m256 load8(const unsigned char *p, qvl_dtype dt) {
    switch (dt) {
    case QVL_DTYPE_BF16:
        return _mm256_castsi256_ps(
            _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)p)), 16));
    case QVL_DTYPE_F16: return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)p));
    case QVL_DTYPE_F32: break;
    }
    return _mm256_loadu_ps((const float *)(const void *)p);
}

static inline float load1(const unsigned char *p, qvl_dtype dt) {
    if (dt == QVL_DTYPE_F32) {
        float f;
        memcpy(&f, p, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, p, 2);
    return dt == QVL_DTYPE_BF16 ? op_bf16_to_f32(h) : op_f16_to_f32(h);
}

void gemm_pack_b16_avx2(const void *b, qvl_dtype dt, size_t ldb, int nr, int kc, float *bp) {
    const size_t esz = dt == QVL_DTYPE_F32 ? 4 : 2;
    const unsigned char *row[16];
    for (int j = 0; j < 16; j++) row[j] = (const unsigned char *)b + (size_t)(j < nr ? j : 0) * ldb * esz;
    int k = 0;
    for (; k + 8 <= kc; k += 8) {
        __m256 lo[8], hi[8];
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            lo[j] = j < nr ? load8(row[j] + (size_t)k * esz, dt) : _mm256_setzero_ps();
            hi[j] = j + 8 < nr ? load8(row[j + 8] + (size_t)k * esz, dt) : _mm256_setzero_ps();
        }
        transpose8(lo);
        transpose8(hi);
#pragma GCC unroll 8
        for (int t = 0; t < 8; t++) {
            _mm256_store_ps(bp + (size_t)(k + t) * 16, lo[t]);
            _mm256_store_ps(bp + (size_t)(k + t) * 16 + 8, hi[t]);
        }
    }
    for (; k < kc; k++)
        for (int j = 0; j < 16; j++) bp[(size_t)k * 16 + j] = j < nr ? load1(row[j] + (size_t)k * esz, dt) : 0.0f;
}

void gemm_pack_a6_avx2(const float *a, size_t lda, int mr, int kc, float *ap) {
    int k = 0;
    for (; k + 8 <= kc; k += 8) {
        __m256 r[8];
        for (int i = 0; i < 6; i++) r[i] = i < mr ? _mm256_loadu_ps(a + (size_t)i * lda + k) : _mm256_setzero_ps();
        r[6] = r[7] = _mm256_setzero_ps();
        transpose8(r);
        for (int t = 0; t < 8; t++) {
            float *d = ap + (size_t)(k + t) * 6;
            _mm_storeu_ps(d, _mm256_castps256_ps128(r[t]));
            _mm_storel_pi((__m64 *)(void *)(d + 4), _mm256_extractf128_ps(r[t], 1));
        }
    }
    for (; k < kc; k++)
        for (int i = 0; i < 6; i++) ap[(size_t)k * 6 + i] = i < mr ? a[(size_t)i * lda + k] : 0.0f;
}
