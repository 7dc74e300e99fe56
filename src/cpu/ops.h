/* ops.h — elementwise and row-wise float32 operations of the tower. All are threaded over rows with OpenMP
 * (n_threads) and write results independent of the thread count. Weight vectors (LayerNorm affine) are float32. */
#ifndef QVL_CPU_OPS_H
#define QVL_CPU_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "qvl.h"

/* y[r, :] = (x[r, :] − mean) / sqrt(var + eps) · w + b for r < rows; biased variance, statistics in f32 with
 * a numerically stable two-pass mean/variance. x and y may alias. Row strides ldx, ldy. */
void op_layernorm(const float *x, size_t ldx, float *y, size_t ldy, size_t rows, size_t cols, const float *w,
                  const float *b, float eps, int n_threads);

/* In place: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) (gelu_pytorch_tanh). */
void op_gelu_tanh(float *x, size_t n);
/* In place: 0.5·x·(1 + erf(x/√2)) (nn.GELU exact). */
void op_gelu_erf(float *x, size_t n);

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
