/* convert.c — scalar dtype conversions (bf16, f16 ↔ f32), bit-exact round-to-nearest-even. */
#include <string.h>

#include "core/convert.h"

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float op_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (man << 13)); /* inf, NaN */
    if (exp == 0) {
        if (man == 0) return bits_f32(sign);
        /* subnormal: value = man · 2^-24, exact in f32 */
        float v = (float)man * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    return bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

uint16_t op_f32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

uint16_t op_f32_to_f16(float f) {
    uint32_t u = f32_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);           /* NaN */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);          /* ≥ 65520 rounds to inf */
    if (a < 0x38800000u) {                                            /* result is f16 subnormal or zero */
        /* value / 2^-24, rounded to nearest even integer: exact via float arithmetic on the magic number */
        float v = bits_f32(a) * 16777216.0f; /* exact: scaling by a power of two */
        /* v < 1024; round half to even through adding 2^23 (v ≥ 0) */
        float r = (v + 8388608.0f) - 8388608.0f;
        return (uint16_t)(sign | (uint32_t)r);
    }
    uint32_t mant_odd = (a >> 13) & 1u;
    a += 0xfffu + mant_odd;                                          /* round to nearest even at bit 13 */
    return (uint16_t)(sign | ((a - 0x38000000u) >> 13));
}

void op_to_f32(const void *src, qvl_dtype dt, float *dst, size_t n) {
    const unsigned char *p = src;
    switch (dt) {
    case QVL_DTYPE_F32: memcpy(dst, src, n * sizeof(float)); return;
    case QVL_DTYPE_BF16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            dst[i] = op_bf16_to_f32(h);
        }
        return;
    case QVL_DTYPE_F16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            dst[i] = op_f16_to_f32(h);
        }
        return;
    }
}
