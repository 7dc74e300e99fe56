/* bf16.h — the bf16 arithmetic of the tower (precision bf16): the GEMM and attention drivers, their kernel sets,
 * and the portable definition of the arithmetic every set reproduces bit for bit.
 *
 * The arithmetic is that of VDPBF16PS (AVX512-BF16): operands are bf16 (f32 rounded to nearest even, NaN kept
 * quiet), consumed in pairs (elements 2p, 2p+1 of the reduction), and each pair updates an f32 accumulator as
 *   acc = ftz(fma(x[2p+1], y[2p+1], daz(acc)));  acc = ftz(fma(x[2p], y[2p], acc))
 * with denormal inputs read as zero (daz) and denormal results flushed to zero (ftz). A reduction of odd length
 * is padded with a zero pair. A GEMM element is one such chain over k from 0 (its K blocks continue the chain),
 * then the f32 epilogue (bias, GELU, residual) as in the f32 GEMM.
 * Attention, per query row and key tile (attn_key_tile): operands q, k, v and p rounded by bf16_round_ftz
 * (VCVTNEPS2BF16's rule: nearest even, denormals to signed zero); scores a_j = chain(q, k_j) (pairs along the
 * head dim); in the log2 domain with c = scale·log2(e) (one f32 product): the tile max m_t = (max_j a_j)·c,
 * m' = max(m, m_t) (max as MAXPS: max(x, y) = x > y ? x : y), α = bf16_exp2(m − m'), p_j = bf16(bf16_exp2(fma(a_j, c, −m'))); the tile sum t = (Σ p_j over
 * even j) + (Σ p_j over odd j), each in key order from 0; l = l·α + t; o = o·α, then o = chain(p, v) over the
 * tile's key pairs (2i, 2i+1; a zero pair pads an odd count); after the last tile out = o / l. */
#ifndef QVL_CPU_BF16_H
#define QVL_CPU_BF16_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "backend/backend.h"
#include "core/pool.h"
#include "cpu/attention.h"
#include "cpu/vmath_coef.h"

/* Kernel sets of the bf16 drivers. */
enum { BF16_SET_PORTABLE = 0, BF16_SET_AVX512BF16 = 1, BF16_SET_AMX = 2, BF16_SET_AMX_EMULATED = 3 };

/* x, or a zero of its sign where x is denormal: fabsf(x) < FLT_MIN ? copysignf(0, x) : x, in bit operations that
 * vectorise to a compare and two logic steps (NaN and inf kept). */
static inline float bf16_daz(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    u &= (u & 0x7fffffffu) >= 0x00800000u ? 0xffffffffu : 0x80000000u;
    memcpy(&x, &u, 4);
    return x;
}
/* The portable kernels' fast-path rule, from the exponent fields of two operand sets (largest; smallest nonzero, 255
 * if none): no operand infinite or NaN, and every product of nonzero operands in [FLT_MIN, 2^128)
 * (2^(ea+eb−254) <= |x·y| < 2^(ea+eb−252)), so each product of two bf16 values is exact in f32 and
 * fma(x, y, acc) = acc + x·y. */
static inline int bf16_products_exact(int amax, int amin, int bmax, int bmin) {
    return amax < 255 && bmax < 255 && amax + bmax <= 380 && amin + bmin >= 128;
}
/* One pair step of the chain (see above), on values already rounded to bf16. */
static inline float bf16_pair(float acc, float x0, float y0, float x1, float y1) {
    acc = bf16_daz(fmaf(bf16_daz(x1), bf16_daz(y1), bf16_daz(acc)));
    return bf16_daz(fmaf(bf16_daz(x0), bf16_daz(y0), acc));
}
/* f32 → bf16 bits, nearest even, NaN quiet (op_f32_to_bf16's rule, inlined for the packers). */
static inline uint16_t bf16_round(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static inline float bf16_float(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* The low term of BF16X2's split of f (backend.h): bf16(f − hi) for hi = bf16_round(f), 0 where hi is not finite
 * (f − hi is exact in f32 then). */
static inline uint16_t bf16_round_lo(float f, uint16_t hi) {
    if ((hi & 0x7f80u) == 0x7f80u) return 0;
    return bf16_round(f - bf16_float(hi));
}

/* f32 → bf16 bits as VCVTNEPS2BF16 rounds (attention's operands): bf16_round, but a denormal becomes a zero of
 * its sign. */
static inline uint16_t bf16_round_ftz(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7f800000u) == 0) return (uint16_t)((u >> 16) & 0x8000u);
    return bf16_round(f);
}

/* 2^x for x <= 0 (softmax arguments in the log2 domain), 0 below −125 and for NaN: x = n + r with n the nearest
 * integer (ties to even), 2^r by a degree-6 polynomial in FMA steps (vm_exp2_p's coefficients; ~1 ulp), scaled by
 * 2^n exactly. The SIMD kernels do the same operations lane-wise. */
static inline float bf16_exp2(float x) {
    if (!(x >= -125.0f)) return 0.0f;
    const float n = nearbyintf(x), r = x - n;
    float y = vm_exp2_p[0];
    for (int i = 1; i < 6; i++) y = fmaf(y, r, vm_exp2_p[i]);
    y = fmaf(y, r, 1.0f);
    uint32_t u;
    memcpy(&u, &y, 4);
    u += (uint32_t)(int32_t)n << 23;
    memcpy(&y, &u, 4);
    return y;
}

/* ---- GEMM: C[M, N] (=|+=) act(A · Wᵀ + bias), W packed by gemm_bf16_pack ---- */

/* Panel layout: ceil(N/16) panels of 16 columns; panel p holds ceil(K/2) pair steps of 16 dwords, dword j of step
 * q = (bf16 W[16p + j][2q] in the low half, W[16p + j][2q + 1] in the high half), zero past N and past K. */
size_t gemm_bf16_pack_size(int N, int K);
/* Pack B [N, K] (stored dtype, row stride ldb, may be unaligned): bf16 kept as stored, f32/f16 rounded once.
 * Returns 0, or -1 for a bad shape or a misaligned buf. Sets out->arith = BE_ARITH_BF16. */
int gemm_bf16_pack(be_weight *out, void *buf, const void *B, qvl_dtype dtype, size_t ldb, int N, int K,
                   thread_pool *pool);
size_t gemm_bf16_workspace_size(int n_threads);
void gemm_bf16_run(int set, const be_weight *w, const float *A, size_t lda, int M, const float *bias, float *C,
                   size_t ldc, int accumulate, be_act act, void *ws, thread_pool *pool);
/* The epilogue of one row of n results t (modified): + bias, GELU, then stored to or added into c. */
void gemm_bf16_epilogue_row(float *t, const float *bias, int n, be_act act, float *c, int accumulate);
/* The definition, element by element (tests): no blocking, no workspace, one thread. */
void gemm_bf16_ref(const be_weight *w, const float *A, size_t lda, int M, const float *bias, float *C, size_t ldc,
                   int accumulate, be_act act);

/* Micro-tile of the bf16 GEMM: BF16_MR rows x 32 columns (16 when b1 is NULL). a: BF16_MR rows of kp pair dwords at
 * a fixed stride of BF16_KP (row i's pair q at a[i·BF16_KP + q], so the tile's broadcasts are one pointer plus
 * constant offsets and the packer stores whole vectors); b0, b1: kp pair steps of 16 dwords (panel layout). c:
 * BF16_MR rows at stride ldc; first != 0: the chains start at 0, else they continue from c. pf0, pf1: the next B
 * tile's two panels (pf1 may be NULL) and its pair steps pfn (<= kp), or pf0 NULL: one 64-byte line of each read
 * per pair step towards L2 while this tile computes (a hint; the results do not depend on it). */
enum {
    BF16_MR = 14,
    BF16_KP = 192, /* pair steps per K block (kp <= BF16_KP): a 32-column B tile of 192 steps is 24 KiB */
};
typedef void (*gemm_bf16_ukr_fn)(int kp, const uint32_t *a, const uint32_t *b0, const uint32_t *b1, float *c,
                                 size_t ldc, int first, const uint32_t *pf0, const uint32_t *pf1, int pfn);
/* Rows [0, mr) of A (stride lda), columns [k0, k0 + 2·kp) clipped to K, rounded into a pair micro-panel
 * (the layout above; zero past mr and K; pairs kp .. BF16_KP of a row not written). */
typedef void (*gemm_bf16_pack_a_fn)(const float *a, size_t lda, int mr, int kp, int kvalid, uint32_t *ap);
void gemm_bf16_ukr_avx512bf16(int kp, const uint32_t *a, const uint32_t *b0, const uint32_t *b1, float *c,
                              size_t ldc, int first, const uint32_t *pf0, const uint32_t *pf1, int pfn);
void gemm_bf16_pack_a_avx512bf16(const float *a, size_t lda, int mr, int kp, int kvalid, uint32_t *ap);

/* ---- GEMM on AMX tiles (gemm_amx.c) ----
 * Its arithmetic is TDPBF16PS's (amx_tile.h), which orders the same bf16 products differently from the chain
 * above: per element, k runs in tiles of 32 (16 pairs, zero past K); within a tile the even and the odd products
 * each form an f32 chain from 0 (fma, daz/ftz each step), and the element becomes c = c + (even + odd), tile
 * after tile from c = 0; then the f32 epilogue as above. Weights are the pair panels above with the pair steps of
 * each panel padded to whole tiles (w->kp_panel a multiple of 16), so the AVX512-BF16 set reads them as well. */
enum { BF16_AMX_MC = 128 }; /* rows per M block of the AMX GEMM (the AMX entries' m_align) */
size_t gemm_amx_pack_size(int N, int K);
int gemm_amx_pack(be_weight *out, void *buf, const void *B, qvl_dtype dtype, size_t ldb, int N, int K,
                  thread_pool *pool);
/* Workspace for calls on weights with K <= max_k. */
size_t gemm_amx_workspace_size(int n_threads, int max_k);
size_t gemm_amx_workspace_size_emulated(int n_threads, int max_k);
/* On the instructions: only after cpu_amx_usable(). The _emulated twin runs the same kernel over the C model of
 * the instructions (amx_emulated.c) on any CPU, bit for bit what the definition says: tests only (slow). */
void gemm_amx_run(const be_weight *w, const float *A, size_t lda, int M, const float *bias, float *C, size_t ldc,
                  int accumulate, be_act act, void *ws, int max_k, thread_pool *pool);
void gemm_amx_run_emulated(const be_weight *w, const float *A, size_t lda, int M, const float *bias, float *C,
                           size_t ldc, int accumulate, be_act act, void *ws, int max_k, thread_pool *pool);
/* gemm_amx_run with its A operand and/or its result in the A operand layout of the AMX GEMM (gemm_amx_pack_a's
 * tiles with ns = 1 for all rows: the 16 x 32 tile of row group g and K tile t at (g·ceil(K / 32) + t)·512
 * elements, zero past M (up to the group's 16 rows) and past K): with Ap not NULL, A is read from Ap (an [M, K]
 * operand, K = w->K; A and lda unused; w->arith BF16 only), and with Cp not NULL, the result is written there, as
 * a next GEMM's [M, N] operand (C and ldc unused; not with accumulate), each element the bf16 rounding
 * (bf16_round) of the f32 value C would get: the same bits as gemm_amx_run into C and gemm_amx_pack_a of C. */
void gemm_amx_run_packed(const be_weight *w, const float *A, size_t lda, const uint16_t *Ap, int M, const float *bias,
                         float *C, size_t ldc, uint16_t *Cp, int accumulate, be_act act, void *ws, int max_k,
                         thread_pool *pool);
void gemm_amx_run_packed_emulated(const be_weight *w, const float *A, size_t lda, const uint16_t *Ap, int M,
                                  const float *bias, float *C, size_t ldc, uint16_t *Cp, int accumulate, be_act act,
                                  void *ws, int max_k, thread_pool *pool);
/* Bytes of an [M, K] operand in that layout (0 when M or K <= 0). */
size_t gemm_amx_packed_size(int M, int K);
/* The A packer of the AMX GEMM: rows [0, mr) of A (row stride lda), k in [k0, k0 + 32·kt) clipped to K, into kt
 * 16 x 32 bf16 tiles per 16-row group (ns = 2: each followed by its BF16X2 lo tile), zero past mr and K. The
 * instruction build's is AVX-512 (callable on any AVX512-BF16 CPU, tests), the emulated build's portable C; the
 * two give the same bits. */
void gemm_amx_pack_a(const float *a, size_t lda, int mr, int k0, int K, int kt, int ns, uint16_t *ap);
void gemm_amx_pack_a_emulated(const float *a, size_t lda, int mr, int k0, int K, int kt, int ns, uint16_t *ap);
/* The definition, element by element (tests). For BF16X2 weights (w->arith) each K tile runs twice, its hi terms
 * then its lo terms (bf16_round_lo), each a TDPBF16PS step as above. */
void gemm_amx_ref(const be_weight *w, const float *A, size_t lda, int M, const float *bias, float *C, size_t ldc,
                  int accumulate, be_act act);

/* ---- attention ---- */
size_t attn_bf16_workspace_size(int head_dim, int n_threads);
void attn_bf16_run(int set, const attn_args *a, void *ws, thread_pool *pool);
/* The definition: one query row at a time, same key tiles (tests; allocates nothing, one thread). */
void attn_bf16_ref(const attn_args *a);
/* Floats of per-thread scratch of the bf16 blocks, and the AVX512-BF16 block (hd even, hd <= 128). */
size_t attn_bf16_block_floats(int hd);
void attn_bf16_block_avx512bf16(const float *q, size_t ldq, const float *k, size_t ldk, const float *v, size_t ldv,
                                float *out, size_t ldo, int nq, int nk, int hd, float scale, float *ws);
/* K and V rounded once per (segment, head) for all its work items (attn_bf16_run, when a->scratch holds them): a
 * segment of nk keys packs as K pairs in chunks of 8 keys, pair-major within a chunk ([nk8/8][hd/2][8]; nk8 = nk
 * rounded up to 8, keys past nk zero) and V pairs [nk8/2][hd] (keys 2i, 2i+1 per head column; the key past an odd
 * nk zero), the layouts the AVX512-BF16 block makes per key tile. The pack function writes keys [j0, j0 + n) (j0 a
 * multiple of 8) of it, and the padding when j0 + n = nk; the packed block reads the segment's pairs from kp, vp
 * instead of k and v, with the same bits. */
void attn_bf16_pack_avx512bf16(const float *k, size_t ldk, const float *v, size_t ldv, int j0, int n, int nk,
                               int hd, uint32_t *kp, uint32_t *vp);
void attn_bf16_block_avx512bf16_packed(const float *q, size_t ldq, const uint32_t *kp, const uint32_t *vp, float *out,
                                       size_t ldo, int nq, int nk, int hd, float scale, float *ws);

/* ---- attention on AMX tiles (attention_amx.c) ----
 * Its arithmetic (attn_amx_ref is the definition) is the definition above with the two products in TDPBF16PS's
 * order (amx_tile.h), as for the GEMM on AMX; the operand rounding (bf16_round_ftz of q, k, v and p), the key
 * tiles (attn_key_tile), the tile max, m', α, p_j, the tile sum t, l = l·α + t, o = o·α and out = o / l are
 * unchanged. Per query row and key tile:
 *   score a_j: the head dim runs in tiles of 32 (16 pairs, zero past hd); per tile te = Σ q[2p]·k_j[2p] and
 *     to = Σ q[2p+1]·k_j[2p+1], each an f32 chain from 0 in p order (te = ftz(fma(x, y, te))), and
 *     a = ftz(daz(a) + ftz(te + to)), tile after tile from a = 0 (instead of the pair chain over the head dim);
 *   o: after o = o·α, the tile's keys run in steps of 32 (16 key pairs; p = 0 and v = 0 past the tile's keys, so
 *     the last step of a 65-80-key tile is padded, and a key tile is 1-3 steps); per step and head column d,
 *     te = Σ p_2i·v_2i[d], to = Σ p_2i+1·v_2i+1[d] (chains from 0 in i order as above) and
 *     o = ftz(daz(o) + ftz(te + to)) (instead of continuing the pair chain from o·α over the tile's key pairs).
 * Other head dims (attn_amx_takes false) run the definition above: attn_amx_run uses the bf16 blocks and
 * attn_amx_ref is attn_bf16_ref there.
 * K and V are rounded into the tiles' layouts either per key tile inside each work item, or, when a->scratch
 * holds at least one head's pack, once per (segment, head) for all its items (a group of heads at a time, as
 * attn_bf16_run): per head, each segment's K rows [nk16][32·ceil(hd/32)] bf16 (nk16 = its keys rounded up to 16)
 * segment after segment, then each segment's Vᵀ pairs per 32-key step [nk32/32][16·ceil(hd/16)][16] dwords (nk32
 * rounded up to 32; dword = keys 2i, 2i+1 of one head column), zero past the keys and past hd: the layouts made per
 * key tile, so the same bits. */
static inline int attn_amx_takes(int head_dim) { return head_dim >= 2 && head_dim <= 128 && head_dim % 2 == 0; }
/* Bytes of workspace for attn_amx_run (any build) with n_threads threads: also enough for attn_bf16_run. */
size_t attn_amx_workspace_size(int head_dim, int n_threads);
/* On the instructions: only after cpu_amx_usable() (x86). The _emulated twin runs the same kernel over the C model
 * of the tile instructions, all portable C (any CPU; tests: slow); _emulated_simd the same with the instruction
 * build's AVX-512 parts (x86, only after cpu_has_avx512bf16(); tests). All three give attn_amx_ref's bits. */
void attn_amx_run(const attn_args *a, void *ws, thread_pool *pool);
void attn_amx_run_emulated(const attn_args *a, void *ws, thread_pool *pool);
void attn_amx_run_emulated_simd(const attn_args *a, void *ws, thread_pool *pool);
/* The definition: one query row at a time (tests; one thread, allocates). */
void attn_amx_ref(const attn_args *a);
/* A start-up check of each build against attn_amx_ref (a small fixed case on the calling thread; allocates): 2
 * when it agrees bit for bit, 1 when not but within amx_attn_excess's bound of it (a correct tile sum in another
 * order), 0 when not or out of memory. The instruction build's only after cpu_amx_usable(). */
int attn_amx_check(void);
int attn_amx_check_emulated(void);
int attn_amx_check_emulated_simd(void);

/* ---- a block's qkv on AMX with the rotary embedding in the epilogue (gemm_amx.c), for the attention on tiles ----
 * The qkv weight [3H, K] (Q, K, V parts of H = heads·hd columns, head h at [h·hd, (h+1)·hd) of each) is packed
 * with its columns reordered (gemm_amx_pack_qkv) so that each 32-column pair of the GEMM holds 16 columns and
 * their rotary partners: in the Q and K parts, pair g's first 16 columns are the part's first halves f = 16g ...
 * 16g + 15 (f over the heads' first halves, head after head: head f / (hd/2), dim f % (hd/2)) and its next 16 their
 * partners (dim + hd/2); V keeps its order. Reordering the columns changes no element's arithmetic (each is its
 * own chain over K). The epilogue (gemm_amx_run_qkv) then has a and its partner b in the same lane of the pair's two
 * halves and applies ops.c's op_rope to them as it does (t + bias; a·cos − b·sin and b·cos + a·sin, each
 * product rounded, no FMA), and writes q, k and v as bf16 rows [M, 3H] in the weight's own column order, each
 * value bf16_round_ftz of the f32 one (the rounding the attention on tiles gives its operands): the bits of
 * gemm_amx_run, op_rope and the attention's rounding, in one pass. Taken for head dims the attention on tiles
 * takes from 32 on (a 16-lane group then spans at most two heads) and H a multiple of 32 (every Qwen3-VL tower:
 * 1024 and 1152 wide, heads of 64 and 72). */
static inline int qkv_rope_takes(int H, int head_dim) {
    return attn_amx_takes(head_dim) && head_dim >= 32 && H > 0 && H % 32 == 0 && H % head_dim == 0;
}
/* The weight's column (and q, k, v's) that packed column j of the rotary order holds (H = N / 3). */
static inline int qkv_rope_col(int H, int head_dim, int j) {
    if (j >= 2 * H) return j;
    const int part = j / H, r = j % H, half = head_dim / 2, f = 16 * (r / 32) + r % 16;
    return part * H + f / half * head_dim + f % half + (r % 32 >= 16 ? half : 0);
}
/* gemm_amx_pack in that order; -1 where qkv_rope_takes(N / 3, head_dim) does not hold. w->rope_hd = head_dim. */
int gemm_amx_pack_qkv(be_weight *out, void *buf, const void *B, qvl_dtype dtype, size_t ldb, int N, int K,
                      int head_dim, thread_pool *pool);
/* qkv16 [M, N] bf16 rows (row stride N) = the attention's rounding of rope(A·Wᵀ + bias) in the weight's column
 * order; A as gemm_amx_run_packed's (f32 rows, or Ap); cos_t, sin_t [M, head_dim / 2] (tables_rope's). */
void gemm_amx_run_qkv(const be_weight *w, const float *A, size_t lda, const uint16_t *Ap, int M, const float *bias,
                      const float *cos_t, const float *sin_t, uint16_t *qkv16, void *ws, int max_k, thread_pool *pool);
void gemm_amx_run_qkv_emulated(const be_weight *w, const float *A, size_t lda, const uint16_t *Ap, int M,
                               const float *bias, const float *cos_t, const float *sin_t, uint16_t *qkv16, void *ws,
                               int max_k, thread_pool *pool);

/* ---- agreement of AMX results that are not the model's bits (amx_agree.c) ----
 * The largest |c − ref| over the elements of an M x N GEMM result c (row stride ldc; A [M][K] row stride lda, B
 * [N][K] the f32 weights, bias, c0 the accumulate base or NULL) in units of the bound within which two f32 sums of
 * the same exact bf16 products in any order (and the epilogue act) agree: ≤ 1 when c is such a sum, INFINITY
 * where c or ref is not finite where the other is. */
double amx_gemm_excess(const float *A, size_t lda, const float *B, int M, int N, int K, const float *bias,
                       const float *c0, be_act act, const float *c, const float *ref, size_t ldc);
/* The same for two bf16 attention results over a's segments (out and ref laid out as a->out): units of 2^-6 of
 * the largest |v| of each head column in its segment (a probability's bf16 rounding turned the other way). */
double amx_attn_excess(const attn_args *a, const float *out, const float *ref);

#endif
