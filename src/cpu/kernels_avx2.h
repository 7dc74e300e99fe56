/* kernels_avx2.h — entry points of the AVX2+FMA+F16C kernels (gemm_avx2.c, attention_avx2.c), called only after
 * cpu_has_avx2() (core/cpu.h), and the attention tiling they share. The portable drivers (gemm.c, attention.c) own the loops,
 * the blocking and the threads; these functions only compute on data the driver has laid out. */
#ifndef QVL_CPU_KERNELS_AVX2_H
#define QVL_CPU_KERNELS_AVX2_H

#include <stddef.h>
#include <stdint.h>

#include "core/cpu.h"
#include "cpu/gemm.h"
#include "qvl.h"

/* The last K block of a micro-tile may finish the GEMM in the kernel instead of leaving partial sums for the
 * driver's epilogue pass: with a tail, the kernel computes per element v = (first ? 0 : cb) + acc (exactly what it
 * would store into its partial-sum tile), then v = v + bias[j] (bias not NULL), then v = gelu(v) (act: tanh or erf
 * GELU, by vmath_*.h, the code of op_gelu_*), then, with accumulate, v = C + v, and stores v into C for the
 * valid rows and columns only: the epilogue's operations in its order, so the same bits, and no pass over Cb and C
 * afterwards. */
typedef struct gemm_tail {
    float *c;          /* the tile's element (0, 0) in C */
    size_t ldc;
    const float *bias; /* bias of the tile's column 0, or NULL */
    int rows, cols;    /* valid part of the tile (>= 1) */
    int accumulate;
    gemm_epilogue act; /* GELU or none */
} gemm_tail;

/* GEMM micro-tile, 6 x 16 (gemm.c: GEMM_MR x GEMM_NR). a: packed A micro-panel, kc steps of 6 floats; b: packed
 * B micro-panel, kc steps of 16 floats (64-byte aligned); c: 6 rows of 16 floats at row stride ldc.
 * first != 0: c = a·b; else c += a·b. tail not NULL: c is only read (when !first) and the result goes to C
 * (gemm_tail, above). */
void gemm_ukr_6x16_avx2(int kc, const float *a, const float *b, float *c, size_t ldc, int first,
                        const gemm_tail *tail);
/* Same on a bf16 B micro-panel in the pre-packed order of gemm.h (kc steps of 16 bf16, any alignment), widened
 * in registers; bit-identical to gemm_ukr_6x16_avx2 on the widened panel. */
void gemm_ukr_6x16_bf16_avx2(int kc, const float *a, const uint16_t *b, float *c, size_t ldc, int first,
                             const gemm_tail *tail);
/* Pack rows [0, nr) (nr <= 16) of B (row-major, row stride ldb elements of dtype dt, possibly unaligned), columns
 * [0, kc), into a 16-wide f32 micro-panel: bp[k·16 + j] = B[j][k], zero for j >= nr. */
void gemm_pack_b16_avx2(const void *b, qvl_dtype dt, size_t ldb, int nr, int kc, float *bp);
/* Pack rows [0, mr) (mr <= 6) of A (row stride lda), columns [0, kc), into a 6-tall micro-panel:
 * ap[k·6 + i] = A[i][k], zero for i >= mr. */
void gemm_pack_a6_avx2(const float *a, size_t lda, int mr, int kc, float *ap);

/* Elementwise (ops_avx2.c): y[i] = tanh(x[i]) / erf(x[i]) (x and y may alias), and the two GELUs in place in
 * torch's operation order; within 2 ulp of libm, position-independent results (see ops_avx2.c). */
void ops_tanh_avx2(const float *x, float *y, size_t n);
void ops_erf_avx2(const float *x, float *y, size_t n);
void ops_gelu_tanh_avx2(float *x, size_t n);
void ops_gelu_erf_avx2(float *x, size_t n);
/* One LayerNorm row (ops.h op_layernorm's contract for a single row; w, b may be NULL). */
void ops_layernorm_row_avx2(const float *x, float *y, size_t cols, const float *w, const float *b, float eps);

/* Attention tile sizes shared by attention.c (scalar) and the SIMD blocks: a work item is one query tile of one
 * (segment, head); keys stream in tiles. Query tiles are ATTN_BQ rows, the last of a segment taking a tail of up to
 * ATTN_BQ_MAX − ATTN_BQ rows with it; key tiles are ATTN_BK keys, the last taking a tail of up to ATTN_BK_MAX −
 * ATTN_BK with it. A 196-row segment (one 224² image) is then one item of 196 rows over key tiles of 64, 64 and 68,
 * not 192 + 4 rows over 64, 64, 64 and 4: a 4-row item restages every key tile for 12 padded rows, and a 4-key
 * tile pays a whole tile's softmax and P·V set-up (bench_attention, AVX-512, 2 threads: 196 rows 180-185 GFLOP/s
 * before against 216 for 192 rows; 193-207 after; 784 rows, whose last key tile is now 80 keys, 226 → 229-238).
 * BQ and BQ_MAX are multiples of 48 (6-row score, 4- and 3-row P·V blocks, 8- and 16-row softmax groups), BK and
 * BK_MAX of 16. A large BQ amortises the Kᵀ tile transpose and the K/V reads (measured: 48 → 192 rows, +15 %); its
 * tiles (236 KiB at hd 72) stay in L2. */
enum { ATTN_BQ = 192, ATTN_BQ_MAX = 240, ATTN_BK = 64, ATTN_BK_MAX = 80 };

/* Query tiles of a segment of len rows (len >= 1), and the rows of tile t. */
static inline int attn_query_tiles(int len) {
    int n = (len + ATTN_BQ - 1) / ATTN_BQ;
    if (n > 1 && len - (n - 1) * ATTN_BQ <= ATTN_BQ_MAX - ATTN_BQ) n--;
    return n;
}
static inline int attn_query_rows(int len, int t) { /* the rule of attn_key_tile: all the rest when it fits */
    return len - t * ATTN_BQ <= ATTN_BQ_MAX ? len - t * ATTN_BQ : ATTN_BQ;
}

/* Keys in the tile starting at key j0 of nk: ATTN_BK, or all the rest when that fits in ATTN_BK_MAX. */
static inline int attn_key_tile(int nk, int j0) { return nk - j0 <= ATTN_BK_MAX ? nk - j0 : ATTN_BK; }

/* Floats of per-thread scratch one attention work item needs (64-byte multiple): Q tile, Kᵀ tile, score tile,
 * output accumulator, running max and sum, tile maxima and rescale factors. */
static inline size_t attn_block_floats(int hd) {
    size_t n = (size_t)ATTN_BQ_MAX * (size_t)hd * 2 + (size_t)hd * ATTN_BK_MAX + (size_t)ATTN_BQ_MAX * ATTN_BK_MAX +
               4 * ATTN_BQ_MAX;
    return (n + 15) & ~(size_t)15;
}

/* Those floats, carved in that order (the SIMD blocks' layout; every part stays 64-byte aligned as ATTN_BQ_MAX and
 * ATTN_BK_MAX are multiples of 16). Row strides: qs and o hd, kt and s ATTN_BK_MAX. */
typedef struct attn_ws {
    float *qs;   /* [BQ_MAX][hd] query rows, zero-padded */
    float *kt;   /* [hd][BK_MAX] key tile, transposed */
    float *s;    /* [BQ_MAX][BK_MAX] scores, then probabilities */
    float *o;    /* [BQ_MAX][hd] unnormalised output */
    float *mrow; /* [BQ_MAX] running max */
    float *lrow; /* [BQ_MAX] running sum */
    float *tmax; /* [BQ_MAX] this key tile's row maxima */
    float *alph; /* [BQ_MAX] rescale factors 2^(m_old − m_new) */
} attn_ws;

static inline attn_ws attn_ws_carve(float *ws, int hd) {
    attn_ws w;
    w.qs = ws;
    w.kt = w.qs + (size_t)ATTN_BQ_MAX * hd;
    w.s = w.kt + (size_t)hd * ATTN_BK_MAX;
    w.o = w.s + (size_t)ATTN_BQ_MAX * ATTN_BK_MAX;
    w.mrow = w.o + (size_t)ATTN_BQ_MAX * hd;
    w.lrow = w.mrow + ATTN_BQ_MAX;
    w.tmax = w.lrow + ATTN_BQ_MAX;
    w.alph = w.tmax + ATTN_BQ_MAX;
    return w;
}

/* One attention work item: nq <= ATTN_BQ_MAX query rows q (row stride ldq, hd floats of one head) against nk >= 1 key
 * and value rows k, v (strides ldk, ldv), online softmax over key tiles, written to out (stride ldo).
 * Needs hd % 8 == 0. ws: attn_block_floats(hd) floats, 64-byte aligned. */
void attn_block_avx2(const float *q, size_t ldq, const float *k, size_t ldk, const float *v, size_t ldv, float *out,
                     size_t ldo, int nq, int nk, int hd, float scale, float *ws);

#endif
