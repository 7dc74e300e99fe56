/* ops.h — elementwise and row-wise float32 operations of the tower. The row-wise ones are threaded over rows with
 * `pool` (core/pool.h; NULL: the caller alone) and write results independent of the thread count. Weight vectors (LayerNorm affine) are float32. */
#ifndef QVL_CPU_OPS_H
#define QVL_CPU_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "core/pool.h"
#include "core/convert.h"
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

/* Rotate q and k in place: rows of `qkv` (row stride ld) hold q at [0, H) and k at [H, 2H), H = heads·head_dim;
 * per pair (a, b) = (x[k], x[k + head_dim/2]) of a head, a·cos − b·sin and b·cos + a·sin with cos_t, sin_t
 * [rows, head_dim / 2] (tables_rope's), each product rounded (no FMA). */
void op_rope(float *qkv, size_t ld, size_t rows, int heads, int head_dim, const float *cos_t, const float *sin_t,
             thread_pool *pool);
/* x[r, c] += y[r, c] for r < rows, c < cols (row strides ldx, ldy). */
void op_add_rows(float *x, size_t ldx, const float *y, size_t ldy, size_t rows, size_t cols, thread_pool *pool);
/* Rows [rows, cols] of src (row stride lds) into dst (row stride ld elements) as `dt`: f32 copied, bf16 / f16
 * rounded to nearest even. */
void op_store_rows(const float *src, size_t lds, size_t rows, size_t cols, void *dst, size_t ld, qvl_dtype dt);

#endif
