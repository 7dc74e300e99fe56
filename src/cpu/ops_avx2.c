/* ops_avx2.c — AVX2+FMA tanh, erf, the two GELUs built on them (8 lanes at a time), and a LayerNorm row.
 *
 * Compiled with -mavx2 -mfma -mf16c; called only after cpu_has_avx2(). The vector math is in vmath_avx2.h
 * (shared with the GEMM's fused epilogue; 16-lane twin in vmath_avx512.h): Chebyshev fits (vmath_coef.h), each of
 * a smooth, slowly varying factor, so that the final result comes from one well-conditioned FMA. Against double-precision libm over every 7th float:
 * tanh within 1.40 ulp, erf within 1.25 ulp; NaN propagated, ±inf → ±1, ±0 kept (tests/unit/test_ops.c sweeps).
 * Every element goes through the same 8-lane code (tails through a padded copy), so a value's result does not
 * depend on its position or on n: the GEMM epilogue and op_gelu_* agree bit for bit. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "cpu/kernels_avx2.h"
#include "cpu/vmath_avx2.h"

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

void ops_tanh_avx2(const float *x, float *y, size_t n) { map8(x, y, n, v8_tanh); }
void ops_erf_avx2(const float *x, float *y, size_t n) { map8(x, y, n, v8_erf); }
void ops_gelu_tanh_avx2(float *x, size_t n) { map8(x, x, n, v8_gelu_tanh); }
void ops_gelu_erf_avx2(float *x, size_t n) { map8(x, x, n, v8_gelu_erf); }

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
