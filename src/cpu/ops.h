/* ops.h — elementwise and row-wise float32 operations of the tower. The row-wise ones are threaded over rows with
 * `pool` (core/pool.h; NULL: the caller alone) and write results independent of the thread count. Weight vectors (LayerNorm affine) are float32. */
#ifndef QVL_CPU_OPS_H
#define QVL_CPU_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "core/pool.h"
#include "qvl.h"

/* y[r, :] = (x[r, :] − mean) / sqrt(var + eps) · w + b for r < rows; biased variance, statistics in double with
 * a numerically stable two-pass mean/variance. x and y may alias. Row strides ldx, ldy. */
void op_layernorm(const float *x, size_t ldx, float *y, size_t ldy, size_t rows, size_t cols, const float *w,
                  const float *b, float eps, thread_pool *pool);
/* The portable LayerNorm (statistics in double, per-element transform in f32): op_layernorm's path without AVX2
 * and the reference the AVX2 rows (same transform, double statistics summed in another order) are tested against. */
void op_layernorm_scalar(const float *x, size_t ldx, float *y, size_t ldy, size_t rows, size_t cols, const float *w,
                         const float *b, float eps, thread_pool *pool);

/* In place: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) (gelu_pytorch_tanh). */
void op_gelu_tanh(float *x, size_t n);
/* In place: 0.5·x·(1 + erf(x/√2)) (nn.GELU exact). */
void op_gelu_erf(float *x, size_t n);
/* The two GELUs with libm tanhf/erff: the portable path of op_gelu_* and the reference the AVX2 path (vector
 * tanh/erf within 2 ulp of libm) is tested against. A value's result never depends on n or its position. */
void op_gelu_tanh_scalar(float *x, size_t n);
void op_gelu_erf_scalar(float *x, size_t n);

/* Widen n stored-dtype elements to float32 (src may be unaligned). */
void op_to_f32(const void *src, qvl_dtype dt, float *dst, size_t n);

/* Conversions of one value. */
static inline float op_bf16_to_f32(uint16_t h) {
    union { uint32_t u; float f; } v = {(uint32_t)h << 16};
    return v.f;
}
float op_f16_to_f32(uint16_t h);
/* Round-to-nearest-even float32 → bf16 / f16 (NaN preserved as a quiet NaN). */
uint16_t op_f32_to_bf16(float f);
uint16_t op_f32_to_f16(float f);

#endif
