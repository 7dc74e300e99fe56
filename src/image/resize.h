/* resize.h — bit-exact antialiased bicubic resize of interleaved uint8 images, as torchvision and Pillow do it.
 *
 * Three kinds, selected per call:
 *   RESIZE_TORCHVISION  torchvision.transforms.v2.functional.resize(uint8 CHW, [dh, dw], BICUBIC, antialias=True)
 *                       on CPU, i.e. torch's _upsample_bicubic2d_aa uint8 kernel (the HF "fast" processor default).
 *   RESIZE_PIL          PIL.Image.resize((dw, dh), Image.BICUBIC) on an "L" (c = 1), "RGB" (c = 3) or
 *                       "RGBX"/"RGBa" (c = 4, no premultiplication) image, Pillow >= 13.0.
 *   RESIZE_PIL_LEGACY   the same with Pillow 9.4 .. 12.1, which always runs the horizontal pass first.
 * All share the window and the double-precision Keys cubic (a = −0.5) weights; they differ in the fixed point:
 * torch uses int16 weights at a per-axis precision p (14..22 bits, from the largest weight), Pillow 22 bits.
 * Two passes with a uint8 intermediate, horizontal first (Pillow 13 runs the vertical one first when the height
 * shrinks by more than twice as many pixels as the width); a pass whose size is unchanged is skipped.
 *
 * Ownership: the caller owns src, dst and the workspace ws (resize_workspace_size bytes, any alignment); resize_u8
 * never allocates. Results are identical for every thread count and with or without SIMD. */
#ifndef QVL_IMAGE_RESIZE_H
#define QVL_IMAGE_RESIZE_H

#include <stddef.h>
#include <stdint.h>

#include "core/pool.h"
#include "qvl.h"

typedef enum resize_kind {
    RESIZE_TORCHVISION = 0, /* torch _upsample_bicubic2d_aa, uint8 CPU kernel (HF default)    */
    RESIZE_PIL = 1,         /* Pillow >= 13.0: vertical pass first when (sh − dh) > 0 and (sh − dh) > 2·(sw − dw) */
    RESIZE_PIL_LEGACY = 2   /* Pillow 9.4 .. 12.1: always horizontal first (12.2/12.3 differ only for sh > 100·sw) */
} resize_kind;

/* Largest side accepted (either image); larger sizes are QVL_ERR_LIMIT. */
#define RESIZE_MAX_SIDE (1 << 20)

/* Bytes of workspace resize_u8 needs for these sizes (the same for every kind); 0 if a size is invalid
 * (side < 1 or > RESIZE_MAX_SIDE, channels outside 1..4) or the total overflows size_t. */
size_t resize_workspace_size(int sw, int sh, int dw, int dh, int channels);

/* Resize src [sh, sw, channels] (row-major, interleaved, tightly packed) into dst [dh, dw, channels].
 * ws: at least resize_workspace_size(sw, sh, dw, dh, channels) bytes. Threads: those of `pool` (NULL: the caller alone).
 * src and dst must not overlap. Errors: QVL_ERR_INVALID_ARG (NULL pointer, side < 1, channels outside 1..4,
 * unknown kind), QVL_ERR_LIMIT (side > RESIZE_MAX_SIDE or byte sizes overflow). */
qvl_status resize_u8(const uint8_t *src, int sw, int sh, int channels, uint8_t *dst, int dw, int dh,
                     resize_kind kind, void *ws, thread_pool *pool, qvl_error *err);

/* Test hook: 0 forces the portable loops, nonzero (the default) lets resize_u8 use AVX2 where the CPU has it.
 * Process-wide; do not call while a resize is running. */
void resize_set_simd(int allow);

/* ---- Internal: shared by resize.c and resize_avx2.c. ---- */

/* Fixed-point tables of one axis (n_in → n_out). Output o reads inputs first[o] .. first[o] + count[o] − 1. */
typedef struct resize_axis {
    int n_in, n_out;
    int ksize;        /* taps per output in w32 (Pillow's ksize = ceil(support)·2 + 1) */
    int ksize4;       /* ksize rounded up to a multiple of 4: row length of w16lo / w16hi, zero-padded */
    int prec;         /* fixed-point bits: out = clamp((2^(prec−1) + Σ u·w) >> prec, 0, 255) */
    int split;        /* 1 when a weight needs more than int16 (Pillow's 22 bits): w = hi·2^16 + lo */
    int simd_end;     /* horizontal SIMD may handle outputs [0, simd_end) without reading past the row */
    const int32_t *first;  /* [n_out] */
    const int32_t *count;  /* [n_out] */
    const int32_t *w32;    /* [n_out][ksize] weights */
    const int16_t *w16lo;  /* [n_out][ksize4] low int16 part (the whole weight when !split) */
    const int16_t *w16hi;  /* [n_out][ksize4] high part, hi = (w + 2^15) >> 16 (all zero when !split) */
} resize_axis;

/* resize_avx2.c: call only when cpu_level() >= 2 (resize.c checks). Outputs [0, ax->simd_end) of one row: src_row [n_in, c], dst_row [n_out, c]; c in 1..4. */
void resize_hrow_avx2(const uint8_t *src_row, uint8_t *dst_row, int c, const resize_axis *ax);
/* Bytes [0, n32) of output row o (n32 a multiple of 32): src rows of `stride` bytes, vertical taps of ax. */
void resize_vrow_avx2(const uint8_t *src, size_t stride, uint8_t *dst_row, size_t n32, const resize_axis *ax, int o);

#endif
