/* ops_avx512.c — 16-lane tanh, erf and the two GELUs (vmath_avx512.h): the same bits as ops_avx2.c for every
 * value, at twice the width. Compiled with -mavx512f/bw/dq/vl -mfma; called only after cpu_has_avx512(). */
#include <immintrin.h>
#include <string.h>

#include "cpu/kernels_avx512.h"
#include "cpu/vmath_avx512.h"

/* y[i] = f(x[i]); x and y may be the same array. The tail goes through a 16-lane copy (zero-padded). */
static inline __attribute__((always_inline)) void map16(const float *x, float *y, size_t n, __m512 (*f)(__m512)) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, f(_mm512_loadu_ps(x + i)));
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        _mm512_mask_storeu_ps(y + i, m, f(_mm512_maskz_loadu_ps(m, x + i)));
    }
}

void ops_tanh_avx512(const float *x, float *y, size_t n) { map16(x, y, n, v16_tanh); }
void ops_erf_avx512(const float *x, float *y, size_t n) { map16(x, y, n, v16_erf); }
void ops_gelu_tanh_avx512(float *x, size_t n) { map16(x, x, n, v16_gelu_tanh); }
void ops_gelu_erf_avx512(float *x, size_t n) { map16(x, x, n, v16_gelu_erf); }
