/* convert.h — scalar dtype conversions (bf16, f16 <-> f32), bit-exact round-to-nearest-even (convert.c). Shared
 * by the loaders, the tower and the kernels. */
#ifndef QVL_CORE_CONVERT_H
#define QVL_CORE_CONVERT_H

#include <stddef.h>
#include <stdint.h>

#include "qvl.h"

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
