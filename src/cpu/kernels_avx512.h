/* kernels_avx512.h — entry points of the AVX-512 (F/BW/DQ/VL + FMA) kernels (gemm_avx512.c, attention_avx512.c),
 * called only after cpu_has_avx512() (core/cpu.h). As for kernels_avx2.h, the portable drivers
 * (gemm.c, attention.c) own loops, blocking and threads; these functions compute on data the driver laid out. */
#ifndef QVL_CPU_KERNELS_AVX512_H
#define QVL_CPU_KERNELS_AVX512_H

#include <stddef.h>
#include <stdint.h>

#include "cpu/kernels_avx2.h"

/* GEMM micro-tile, 14 x 32 (or 14 x 16 when b1 is NULL). a: packed A micro-panel, kc steps of 14 floats; b0, b1:
 * two 16-column f32 B micro-panels (kc steps of 16 floats each, 64-byte aligned) giving columns 0-15 and 16-31;
 * c: 14 rows at row stride ldc. first != 0: c = a·b; else c += a·b. Per element: one FMA chain over k from 0, so
 * the bits do not depend on the tile width. tail: as for the AVX2 kernel (kernels_avx2.h, gemm_tail). pf0, pf1:
 * the next B tile's two panels (pf1 may be NULL) and pfn, how many 64-byte lines of each to read, or pf0 NULL:
 * during its first min(pfn, kc) steps the tile reads line k of each towards L2 (a hint; the results do not depend
 * on it; the caller keeps every line inside the weight buffer). */
void gemm_ukr_14x32_avx512(int kc, const float *a, const float *b0, const float *b1, float *c, size_t ldc,
                           int first, const gemm_tail *tail, const void *pf0, const void *pf1, int pfn);
/* Same on bf16 panels in the AVX-512 pre-packed order (gemm.h, GEMM_BF16_PAIRS), any alignment, widened in
 * registers: b0, b1 (b1 may be NULL) point at an even step of their panels; an odd kc means the block ends with
 * the panel's lone last step (odd K), stored in natural order. Bit-identical to gemm_ukr_14x32_avx512 on the
 * widened panels. bw not NULL (64-byte aligned, 2·kc·16 floats): the widened panels are also stored there, b0's
 * at bw and b1's at bw + kc·16, so that the other tiles of the M block run gemm_ukr_14x32_avx512 on them: the
 * widening (a shift or a masked load, each taking an FMA port's slot) is then paid once per micro-panel, not once
 * per tile. */
void gemm_ukr_14x32_bf16_avx512(int kc, const float *a, const uint16_t *b0, const uint16_t *b1, float *c,
                                size_t ldc, int first, const gemm_tail *tail, float *bw);
/* Pack rows [0, mr) (mr <= 14) of A (row stride lda), columns [0, kc), into a 14-tall micro-panel:
 * ap[k·14 + i] = A[i][k], zero for i >= mr. */
void gemm_pack_a14_avx512(const float *a, size_t lda, int mr, int kc, float *ap);

/* Elementwise, the 16-lane twins of ops_tanh_avx2 & co. (kernels_avx2.h): the same bits for every value. */
void ops_tanh_avx512(const float *x, float *y, size_t n);
void ops_erf_avx512(const float *x, float *y, size_t n);
void ops_gelu_tanh_avx512(float *x, size_t n);
void ops_gelu_erf_avx512(float *x, size_t n);

/* One attention work item, same contract as attn_block_avx2 (kernels_avx2.h). Needs hd % 16 == 0 or hd % 16 == 8. */
void attn_block_avx512(const float *q, size_t ldq, const float *k, size_t ldk, const float *v, size_t ldv,
                       float *out, size_t ldo, int nq, int nk, int hd, float scale, float *ws);

#endif
