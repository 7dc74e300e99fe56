/* attention_amx.c — attention in bf16 on AMX tiles (precision bf16 on AMX CPUs): one work item of attention.c's
 * driver (a query tile of up to ATTN_BQ_MAX rows of one (segment, head) against all the segment's keys) with both
 * products on tiles and the online softmax in f32 between them. The arithmetic is attn_amx_ref's (bf16.h).
 *
 * The products are computed transposed, so the softmax has 16 query rows in the vector lanes (vertical, as in the
 * AVX512-BF16 block: no horizontal reductions, and the definition's sums in key order), and only V needs a
 * transpose per key tile:
 *   Sᵀ = K·Qᵀ  A: 16 keys x 32 head dims of K rounded to bf16, from K rows [keys][32·ht] (zero past hd and past
 *              the segment's keys; row stride 64·ht bytes);
 *              B: Qᵀ pairs, 16 head-dim pairs x 16 queries (dword = q[2p] low, q[2p+1] high), made once per item;
 *              C: 16 keys x 16 queries of f32 scores, stored to a per-thread block s [keys][16].
 *   softmax    per key tile (attn_key_tile: 64 keys, or up to 80 for the last) and 16-query group, in f32 on
 *              the vector lanes (AVX-512; portable C in the emulated build); P rounded to bf16 (bf16_round_ftz)
 *              into B tiles of P pairs, 16 key pairs x 16 queries (dword = p[2i] low, p[2i+1] high), zero past
 *              the tile's keys up to a whole 32-key step; Oᵀ's 16 columns of the group scaled by α in memory.
 *   Oᵀ = Vᵀ·Pᵀ A: 16 head dims x 32 keys of V rounded to bf16, from Vᵀ pairs per 32-key step [steps][16·hb][16]
 *              (dword = v_2i[d] low, v_2i+1[d] high; zero past hd and the segment's keys; a tile is 1 KB in a
 *              row, stride 64 bytes); C: Oᵀ 16 head dims x 16 queries, loaded from and stored back to a
 *              per-thread f32 block [hd rounded to 16][ATTN_BQ_MAX] around the tile's 32-key steps.
 * K rows and Vᵀ steps (aa_layout_kv) are made either per key tile inside each work item (per-thread scratch), or,
 * when the call's scratch (attn_args.scratch: the tower's MLP buffer, free during attention) holds at least one
 * head's, once per (segment, head) for all its items beforehand, as many heads at a time as fit, over the pool
 * (aa_run_packed): key tiles start at multiples of 64, so a tile's rows and steps are the segment's, and the
 * items' tile loads read the pack directly. The same bf16_round_ftz of the same values: the same bits.
 * Q, K, V from the AMX GEMM's qkv epilogue (attn_args.q16, k16, v16: gemm_amx_run_qkv) are bf16 already, rounded as
 * the layouts round, so the layouts copy them (a row's Q pairs are its values as they are; K rows a copy; Vᵀ pairs
 * two rows' values interleaved): the same operands. With attn_args.out_tiles the output, Oᵀ / l, goes into proj's A
 * tiles with the GEMM packer's rounding (aa_output; the padding no item writes zeroed first, aa_zero_pad).
 * Head dims: Sᵀ takes 32 per K tile, the last padded with zeros (64: 2 tiles; 72: 3, i.e. padded to 96: one
 * tile configuration for every item, at the price of computing the scores as for 96 dims); Oᵀ 16 per row
 * tile (72: 5 tiles, the fifth's rows past 72 zero and never written out). Keys: a key tile is 1-3 steps of 32
 * (P = 0 and V = 0 past its keys), so every segment length works.
 * Tiles (one configuration of eight 16 x 64-byte tiles, loaded per work item, released at its end): both products
 * in 2 x 2 blocks of accumulators, as the AMX GEMM: two query groups (32 queries) at a time, against two 16-key
 * blocks (Sᵀ) or two 16-dim blocks (Oᵀ); tiles 0-3 the accumulators, 4-5 the K (Vᵀ) tiles, 6-7 the Qᵀ (P) tiles,
 * so four independent TDPBF16PS chains and one tile load per TDPBF16PS. The pairs are pipelined so that the tile
 * unit and the vector units work at the same time: while pair pp's softmax runs, pair pp − 1's Oᵀ update and pair
 * pp + 1's Sᵀ are issued in small steps (aa_tiles) between its operations, one every 4 key pairs (P needs two
 * buffers). Issued whole before the softmax (the design before), the two hardly overlapped (a product likely
 * filled the reorder window; no hardware counters showed it): the steps made the 896² shape (one segment of 3136
 * rows, 2 threads) 1.12-1.14x as fast, 1344² 1.09x, 448² 1.07x, eight 224² segments 1.03x (bench/amx_ab.sh
 * attention, Emerald Rapids VM; a step every 2 key pairs 0.89x, every 3 0.96x, every 5 or 6 0.98x, steps in the
 * max pass too 1.00x, all against every 4).
 * Per pair of groups and 64-key tile at hd 64: 16 + 16 TDPBF16PS, 16 + 24 tile loads, 8 + 8 tile stores, and
 * the softmax's 2 x 64 exp2 vectors (~15 AVX-512 operations per key and group: the expected bottleneck). Per
 * item and 64-key tile, without the pack, also the tile's layout: 64 K rows of hd floats (far apart in the qkv
 * rows) loaded and converted, and 2·hb 16 x 16 Vᵀ transposes — by count of instructions (an estimate, not a
 * measurement) ~2700 AVX-512 operations at hd 72, against ~1900 for one pair of groups' softmax, so of the order
 * of a fifth of a 192-row item's vector work, redone by each of a segment's query tiles (37 at 7056 rows); with
 * the pack it is done once per (segment, head), and an item's key tile is tile loads from the pack only.
 * Every element is the same sequence of operations whichever thread runs its item: results are independent of
 * the thread count and equal attn_amx_ref.
 *
 * Head dims the tiles take: attn_amx_takes (even, up to 128); the others run the bf16 definition's block
 * (attn_bf16_run), which attn_amx_ref then is.
 *
 * Built three times, the functions named by AA_NAME:
 *   - the instructions (this file, x86-64, AVX-512 + BF16 for the layouts and the softmax): attn_amx_run, called
 *     only after cpu_amx_usable();
 *   - over the C model of the tile instructions (amx_emulated.c includes this file with QVL_AMX_EMULATE), all
 *     portable C: attn_amx_run_emulated, any CPU (tests), and the definition attn_amx_ref;
 *   - over the C model with the AVX-512 layouts and softmax of the instruction build (attention_simd_amx.c sets
 *     ATTN_AMX_SIMD; x86): attn_amx_run_emulated_simd, so that everything but the tile instructions themselves
 *     is tested bit for bit on any AVX512-BF16 CPU. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h" /* size_add_overflow, size_mul_overflow */
#include "cpu/amx_tile.h"
#include "cpu/bf16.h"
#include "cpu/kernels_avx2.h" /* the attention tiling (attn_key_tile, ATTN_BQ_MAX, ATTN_BK_MAX) */

#ifndef ATTN_AMX_SIMD
#define ATTN_AMX_SIMD 0
#endif
#if QVL_AMX_EMULATE && ATTN_AMX_SIMD
#define AA_NAME(x) x##_emulated_simd
#else
#define AA_NAME(x) AMX_NAME(x)
#endif
/* The AVX-512 layouts and softmax: the instruction build and the _emulated_simd one. */
#define AA_SIMD (!QVL_AMX_EMULATE || ATTN_AMX_SIMD)

#if AA_SIMD
#include <immintrin.h>

#include "cpu/bf16_avx512.h" /* tr16_epi32 */
#endif

enum {
    AA_KB_MAX = 5,         /* 16-key blocks of a key tile (ATTN_BK_MAX = 80) */
    AA_KP = 96,            /* keys of a key tile padded to whole 32-key steps */
    AA_KS_MAX = AA_KP / 32 /* 32-key steps of a key tile */
};
_Static_assert((int)ATTN_BK_MAX <= (int)AA_KP && AA_KP % 32 == 0 && (int)ATTN_BK_MAX <= 16 * (int)AA_KB_MAX,
               "key tile padding");
_Static_assert(ATTN_BQ_MAX % 16 == 0, "query groups of 16");
/* Key tiles start at multiples of ATTN_BK, so a tile's 16-key blocks and 32-key steps are the segment's: the
 * pack's (one per segment and head) are then the per-tile layouts, back to back. */
_Static_assert(ATTN_BK % 32 == 0, "key tiles start at whole 32-key steps");

/* Per-thread scratch, in 32-bit words, each part a multiple of 16 (64 bytes): */
typedef struct aa_ws {
    uint32_t *qt; /* [16·ht][BQ_MAX] Qᵀ pairs (B tiles) */
    uint16_t *kr; /* [16·KB_MAX][32·ht] K rows in bf16 (A tiles) */
    uint32_t *vt; /* [KS_MAX][16·hb][16] Vᵀ pairs of keys, per 32-key step (A tiles) */
    float *s;     /* [4][16·KB_MAX][16] scores of two pairs of groups */
    uint32_t *pt; /* [2][2][KP/2][16] P pairs of two pairs of groups (B tiles), the pairs alternating */
    float *ot;    /* [16·hb][BQ_MAX] Oᵀ */
    float *mrow;  /* [BQ_MAX] running max (log2 domain) */
    float *lrow;  /* [BQ_MAX] running sum */
} aa_ws;

static inline size_t aa_floats(int hd) {
    const size_t ht = ((size_t)hd + 31) / 32, hb = ((size_t)hd + 15) / 16;
    return 16 * ht * ATTN_BQ_MAX + 16 * AA_KB_MAX * 16 * ht + AA_KS_MAX * 16 * hb * 16 + 4 * 16 * AA_KB_MAX * 16 +
           2 * (size_t)AA_KP * 16 + 16 * hb * ATTN_BQ_MAX + 2 * (size_t)ATTN_BQ_MAX;
}

static aa_ws aa_carve(float *ws, int hd) {
    const size_t ht = ((size_t)hd + 31) / 32, hb = ((size_t)hd + 15) / 16;
    aa_ws w;
    w.qt = (uint32_t *)(void *)ws;
    w.kr = (uint16_t *)(void *)(w.qt + 16 * ht * ATTN_BQ_MAX);
    w.vt = (uint32_t *)(void *)(w.kr + 2 * 16 * AA_KB_MAX * 16 * ht);
    w.s = (float *)(void *)(w.vt + AA_KS_MAX * 16 * hb * 16);
    w.pt = (uint32_t *)(void *)(w.s + 4 * 16 * AA_KB_MAX * 16);
    w.ot = (float *)(void *)(w.pt + 2 * (size_t)AA_KP * 16);
    w.mrow = w.ot + 16 * hb * ATTN_BQ_MAX;
    w.lrow = w.mrow + ATTN_BQ_MAX;
    return w;
}

/* ---- the layouts and the softmax, in AVX-512 or portable C (the same bits) ---- */

/* Rows of q, k or v: f32 (f), or bf16 already rounded as the layouts round (h: attn_args.q16 ...); ld elements. */
typedef struct aa_src {
    const float *f;
    const uint16_t *h;
    size_t ld;
} aa_src;

/* The source's rows from (row, col) on. */
static inline aa_src aa_at(const float *f, const uint16_t *h, size_t ld, size_t row, size_t col) {
    aa_src s = {f ? f + row * ld + col : NULL, h ? h + row * ld + col : NULL, ld};
    return s;
}

/* Where an item's output goes: f32 rows (f, row stride ld), or the AMX GEMM's A tiles (t, kt K tiles per 16-row
 * group) at absolute row `row` and column `col`. */
typedef struct aa_dst {
    float *f;
    size_t ld;
    uint16_t *t;
    size_t kt;
    int row, col;
} aa_dst;

/* Element (r, c) of an operand in the GEMM's tile layout of kt K tiles per 16-row group. */
static inline uint16_t *aa_tile_at(uint16_t *t, size_t kt, size_t r, size_t c) {
    return t + ((r / 16) * kt + c / 32) * 512 + (r % 16) * 32 + c % 32;
}

#if AA_SIMD
static inline __mmask16 aa_first(int n) {
    return n >= 16 ? (__mmask16)0xffff : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1u);
}
/* row[d, d + 16) clipped to n elements (zero past n; the pointer is only formed below n). */
static inline __m512 aa_load(const float *row, int d, int n) {
    return d < n ? _mm512_maskz_loadu_ps(aa_first(n - d), row + d) : _mm512_setzero_ps();
}
/* Row j's first hd elements towards L1. */
static inline void aa_prefetch_row(const aa_src *s, size_t j, int hd) {
    if (s->h)
        for (int d = 0; d < hd; d += 32) _mm_prefetch((const char *)(s->h + j * s->ld + d), _MM_HINT_T0);
    else
        for (int d = 0; d < hd; d += 16) _mm_prefetch((const char *)(s->f + j * s->ld + d), _MM_HINT_T0);
}
/* 16 pair dwords (even[i] low, odd[i] high), each rounded by bf16_round_ftz (VCVTNE2PS2BF16, then an
 * interleave of its two halves). */
static inline __m512i aa_pairs(__m512 even, __m512 odd) {
    const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                                         21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    return _mm512_permutexvar_epi16(idx, (__m512i)_mm512_cvtne2ps_pbh(odd, even));
}
#else
/* Element (j, d) of a source as f32. */
static inline float aa_val(const aa_src *s, size_t j, int d) {
    return s->h ? bf16_float(s->h[j * s->ld + (size_t)d]) : s->f[j * s->ld + (size_t)d];
}
static inline uint32_t aa_pair(float even, float odd) {
    return (uint32_t)bf16_round_ftz(even) | (uint32_t)bf16_round_ftz(odd) << 16;
}
#endif

/* Qᵀ pairs of the item's nq rows: qt[p][i] = (q_i[2p], q_i[2p + 1]), zero past hd and for rows nq .. 16·ng. */
#if AA_SIMD
/* bf: the source is bf16 (compile-time at each call, so each kind's loop has no test in it): a row's 16 pairs are
 * then its 32 values as they are, which VCVTNE2PS2BF16 of them widened would give back. */
static inline __attribute__((always_inline)) void aa_layout_q_on(const aa_src *q, int nq, int hd, int ht, uint32_t *qt,
                                                                  const int bf) {
    const int ng = (nq + 15) / 16;
    for (int i0 = 0; i0 < 16 * ng; i0 += 16)
        for (int p0 = 0; p0 < 16 * ht; p0 += 16) {
            __m512i r[16];
            const int left = hd - 2 * p0;
            const __mmask32 m32 = left >= 32 ? (__mmask32)0xffffffffu : left <= 0 ? 0 : (__mmask32)((1u << left) - 1u);
            for (int i = 0; i < 16; i++) {
                if (i0 + i >= nq) {
                    r[i] = _mm512_setzero_si512();
                    continue;
                }
                const size_t j = (size_t)(i0 + i);
                if (bf)
                    r[i] = _mm512_maskz_loadu_epi16(m32, q->h + j * q->ld + 2 * p0);
                else
                    r[i] = (__m512i)_mm512_cvtne2ps_pbh(aa_load(q->f + j * q->ld, 2 * p0 + 16, hd),
                                                        aa_load(q->f + j * q->ld, 2 * p0, hd));
            }
            tr16_epi32(r);
            for (int p = 0; p < 16; p++) _mm512_store_si512(qt + (size_t)(p0 + p) * ATTN_BQ_MAX + i0, r[p]);
        }
}
static void aa_layout_q(const aa_src *q, int nq, int hd, int ht, uint32_t *qt) {
    if (q->h)
        aa_layout_q_on(q, nq, hd, ht, qt, 1);
    else
        aa_layout_q_on(q, nq, hd, ht, qt, 0);
}
#else
static void aa_layout_q(const aa_src *q, int nq, int hd, int ht, uint32_t *qt) {
    const int ng = (nq + 15) / 16;
    for (int p = 0; p < 16 * ht; p++)
        for (int i = 0; i < 16 * ng; i++) {
            const int ok = i < nq;
            qt[(size_t)p * ATTN_BQ_MAX + i] = aa_pair(ok && 2 * p < hd ? aa_val(q, (size_t)i, 2 * p) : 0.0f,
                                                      ok && 2 * p + 1 < hd ? aa_val(q, (size_t)i, 2 * p + 1) : 0.0f);
        }
}
#endif

/* nkt keys' operands (a key tile, or a chunk of a segment's pack): K rows kr[j][d] (j < 16·nkb, d < 32·ht) and
 * Vᵀ pairs per 32-key step vt[t][d][i] = (v_32t+2i[d], v_32t+2i+1[d]) (t < nks, d < 16·hb, i < 16), all rounded
 * to bf16, zero past nkt keys and past hd. The K and V rows of the next `next` keys (right after these) are
 * prefetched towards L1: they are far apart in the qkv rows. */
#if AA_SIMD
/* bf as in aa_layout_q_on: bf16 sources are copied as they are. */
static inline __attribute__((always_inline)) void aa_layout_kv_on(const aa_src *k, const aa_src *v, int nkt, int next,
                                                                   int hd, int ht, int hb, uint16_t *kr, uint32_t *vt,
                                                                   const int bf) {
    const int nkb = (nkt + 15) / 16, nks = (nkt + 31) / 32, kl = 32 * ht;
    for (int j = 0; j < 16 * nkb; j++) {
        if (j < next) {
            aa_prefetch_row(k, (size_t)(nkt + j), hd);
            aa_prefetch_row(v, (size_t)(nkt + j), hd);
        }
        for (int d = 0; d < kl; d += 16) {
            __m256i x = _mm256_setzero_si256();
            if (j < nkt && d < hd)
                x = bf ? _mm256_maskz_loadu_epi16(aa_first(hd - d), k->h + (size_t)j * k->ld + d)
                       : (__m256i)_mm512_cvtneps_pbh(aa_load(k->f + (size_t)j * k->ld, d, hd));
            _mm256_store_si256((__m256i *)(void *)(kr + (size_t)j * kl + d), x);
        }
    }
    for (int i0 = 0; i0 < 16 * nks; i0 += 16)
        for (int d0 = 0; d0 < 16 * hb; d0 += 16) {
            __m512i r[16];
            const __mmask16 md = aa_first(hd - d0);
            for (int i = 0; i < 16; i++) {
                const int j = 2 * (i0 + i);
                if (bf) { /* (e, o) pairs of bf16 values: e in the low half, o in the high */
                    const __m512i e = _mm512_cvtepu16_epi32(j < nkt ? _mm256_maskz_loadu_epi16(md, v->h + (size_t)j * v->ld + d0)
                                                                    : _mm256_setzero_si256());
                    const __m512i o = _mm512_cvtepu16_epi32(
                        j + 1 < nkt ? _mm256_maskz_loadu_epi16(md, v->h + (size_t)(j + 1) * v->ld + d0)
                                    : _mm256_setzero_si256());
                    r[i] = _mm512_or_si512(e, _mm512_slli_epi32(o, 16));
                } else {
                    const __m512 e = j < nkt ? aa_load(v->f + (size_t)j * v->ld, d0, hd) : _mm512_setzero_ps();
                    const __m512 o = j + 1 < nkt ? aa_load(v->f + (size_t)(j + 1) * v->ld, d0, hd) : _mm512_setzero_ps();
                    r[i] = aa_pairs(e, o);
                }
            }
            tr16_epi32(r);
            uint32_t *vs = vt + (size_t)(i0 / 16) * 16 * hb * 16; /* step i0 / 16 */
            for (int d = 0; d < 16; d++) _mm512_store_si512(vs + (size_t)(d0 + d) * 16, r[d]);
        }
}
static void aa_layout_kv(const aa_src *k, const aa_src *v, int nkt, int next, int hd, int ht, int hb, uint16_t *kr,
                         uint32_t *vt) {
    if (k->h)
        aa_layout_kv_on(k, v, nkt, next, hd, ht, hb, kr, vt, 1);
    else
        aa_layout_kv_on(k, v, nkt, next, hd, ht, hb, kr, vt, 0);
}
#else
static void aa_layout_kv(const aa_src *k, const aa_src *v, int nkt, int next, int hd, int ht, int hb, uint16_t *kr,
                         uint32_t *vt) {
    const int nkb = (nkt + 15) / 16, nks = (nkt + 31) / 32, kl = 32 * ht;
    (void)next;
    for (int j = 0; j < 16 * nkb; j++)
        for (int d = 0; d < kl; d++)
            kr[(size_t)j * kl + d] = j < nkt && d < hd ? bf16_round_ftz(aa_val(k, (size_t)j, d)) : 0;
    for (int d = 0; d < 16 * hb; d++)
        for (int i = 0; i < 16 * nks; i++) {
            const int j = 2 * i;
            uint32_t *vs = vt + (size_t)(i / 16) * 16 * hb * 16; /* step i / 16 */
            const float e = j < nkt && d < hd ? aa_val(v, (size_t)j, d) : 0.0f;
            const float o = j + 1 < nkt && d < hd ? aa_val(v, (size_t)(j + 1), d) : 0.0f;
            vs[(size_t)d * 16 + (size_t)(i % 16)] = aa_pair(e, o);
        }
}
#endif

/* The online softmax step of one 16-query group over a key tile of nkt keys: scores s [keys][16] (raw chains),
 * running max m and sum l [16] of the group, P pairs into pt [16·nks][16], Oᵀ columns ot (row stride BQ_MAX,
 * 16·hb rows) scaled by α. c = scale·log2(e). */
typedef struct aa_tiles aa_tiles;
static int aa_tiles_step(aa_tiles *tl);

static void aa_softmax(const float *s, int nkt, int nks, float c, float *m, float *l, uint32_t *pt, float *ot,
                       int hb, aa_tiles *tl) {
    const int npair = (nkt + 1) / 2;
#if AA_SIMD
    const __m512 cv = _mm512_set1_ps(c), hi = _mm512_castsi512_ps(_mm512_set1_epi32((int)0xffff0000u));
    __m512 mx = _mm512_set1_ps(-INFINITY);
    for (int j = 0; j < nkt; j++) mx = _mm512_max_ps(mx, _mm512_load_ps(s + (size_t)j * 16));
    const __m512 m_old = _mm512_load_ps(m), m_new = _mm512_max_ps(m_old, _mm512_mul_ps(mx, cv));
    const __m512 alpha = bf16_exp2_16(_mm512_sub_ps(m_old, m_new));
    __m512 te = _mm512_setzero_ps(), to = _mm512_setzero_ps();
    for (int jp = 0; jp < npair; jp++) {
        const float *se = s + (size_t)(2 * jp) * 16;
        const __m512 pe = bf16_exp2_16(_mm512_fmsub_ps(_mm512_load_ps(se), cv, m_new));
        const __m512 po =
            2 * jp + 1 < nkt ? bf16_exp2_16(_mm512_fmsub_ps(_mm512_load_ps(se + 16), cv, m_new)) : _mm512_setzero_ps();
        const __m512i pr = aa_pairs(pe, po);
        _mm512_store_si512(pt + (size_t)jp * 16, pr);
        if ((jp & 3) == 3) aa_tiles_step(tl);
        te = _mm512_add_ps(te, _mm512_castsi512_ps(_mm512_slli_epi32(pr, 16)));
        to = _mm512_add_ps(to, _mm512_and_ps(_mm512_castsi512_ps(pr), hi));
    }
    for (int jp = npair; jp < 16 * nks; jp++) _mm512_store_si512(pt + (size_t)jp * 16, _mm512_setzero_si512());
    _mm512_store_ps(l, _mm512_add_ps(_mm512_mul_ps(_mm512_load_ps(l), alpha), _mm512_add_ps(te, to)));
    _mm512_store_ps(m, m_new);
    /* o·α; skipped when every α is 1 (the running max held, the usual case past the first tiles): x·1 = x. */
    if (_mm512_cmp_ps_mask(alpha, _mm512_set1_ps(1.0f), _CMP_NEQ_UQ))
        for (int d = 0; d < 16 * hb; d++) {
            float *od = ot + (size_t)d * ATTN_BQ_MAX;
            _mm512_store_ps(od, _mm512_mul_ps(_mm512_load_ps(od), alpha));
        }
#else
    while (aa_tiles_step(tl)) { /* the tile model: no overlap to gain */
    }
    for (int r = 0; r < 16; r++) {
        float mx = -INFINITY;
        for (int j = 0; j < nkt; j++) {
            const float x = s[(size_t)j * 16 + r];
            mx = mx > x ? mx : x; /* MAXPS's choice, also for NaN */
        }
        const float mt = mx * c, m_new = m[r] > mt ? m[r] : mt, alpha = bf16_exp2(m[r] - m_new);
        float te = 0.0f, to = 0.0f;
        for (int jp = 0; jp < npair; jp++) {
            const uint16_t pe = bf16_round_ftz(bf16_exp2(fmaf(s[(size_t)(2 * jp) * 16 + r], c, -m_new)));
            const uint16_t po =
                2 * jp + 1 < nkt ? bf16_round_ftz(bf16_exp2(fmaf(s[(size_t)(2 * jp + 1) * 16 + r], c, -m_new))) : 0;
            pt[(size_t)jp * 16 + r] = (uint32_t)pe | (uint32_t)po << 16;
            te = te + bf16_float(pe);
            to = to + bf16_float(po);
        }
        for (int jp = npair; jp < 16 * nks; jp++) pt[(size_t)jp * 16 + r] = 0;
        l[r] = l[r] * alpha + (te + to);
        m[r] = m_new;
        for (int d = 0; d < 16 * hb; d++) ot[(size_t)d * ATTN_BQ_MAX + r] *= alpha;
    }
#endif
}

/* Output rows [0, nq), columns [0, hd) = Oᵀ / l: into f32 rows, or bf16_round of it into the GEMM's tiles. */
static void aa_output(const float *ot, const float *lrow, int nq, int hd, int hb, const aa_dst *o) {
#if AA_SIMD
    for (int i0 = 0; i0 < nq; i0 += 16) {
        const __m512 l = _mm512_load_ps(lrow + i0);
        const int rows = nq - i0 < 16 ? nq - i0 : 16;
        for (int d0 = 0; d0 < 16 * hb; d0 += 16) {
            __m512i r[16];
            for (int d = 0; d < 16; d++)
                r[d] = _mm512_castps_si512(_mm512_div_ps(_mm512_load_ps(ot + (size_t)(d0 + d) * ATTN_BQ_MAX + i0), l));
            tr16_epi32(r);
            const __mmask16 mk = aa_first(hd - d0);
            if (o->f) {
                for (int i = 0; i < rows; i++) _mm512_mask_storeu_epi32(o->f + (size_t)(i0 + i) * o->ld + d0, mk, r[i]);
                continue;
            }
            /* 16 columns from c0 on: up to the end of c0's K tile, then the next tile's first ones */
            const size_t c0 = (size_t)o->col + (size_t)d0;
            const int n_in = 32 - (int)(c0 % 32);
            const __mmask16 m_in = (__mmask16)(mk & aa_first(n_in)), m_next = (__mmask16)(mk & ~aa_first(n_in));
            for (int i = 0; i < rows; i++) {
                const size_t row = (size_t)o->row + (size_t)(i0 + i);
                const __m256i b = _mm512_cvtepi32_epi16(bf16_round16(_mm512_castsi512_ps(r[i])));
                _mm256_mask_storeu_epi16(aa_tile_at(o->t, o->kt, row, c0), m_in, b);
                if (m_next) /* lane n_in + x at the next tile's column x */
                    _mm256_mask_storeu_epi16(aa_tile_at(o->t, o->kt, row, c0 + (size_t)n_in) - n_in, m_next, b);
            }
        }
    }
#else
    (void)hb;
    for (int i = 0; i < nq; i++)
        for (int d = 0; d < hd; d++) {
            const float x = ot[(size_t)d * ATTN_BQ_MAX + i] / lrow[i];
            if (o->f)
                o->f[(size_t)i * o->ld + (size_t)d] = x;
            else
                *aa_tile_at(o->t, o->kt, (size_t)o->row + (size_t)i, (size_t)o->col + (size_t)d) = bf16_round(x);
        }
#endif
}

/* ---- the tiles ---- */

/* Tile registers of both products: accumulators C[r][c] for row tile r (key block / head-dim block) and column
 * tile c (query group) of a 2 x 2 block, A row tiles (K / Vᵀ), B column tiles (Qᵀ / P). */
#define AA_C00 0
#define AA_C01 1
#define AA_C10 2
#define AA_C11 3
#define AA_A0 4
#define AA_A1 5
#define AA_B0 6
#define AA_B1 7

/* The tile work of a pair of query groups, queued to run in steps between a softmax's vector operations (the
 * tile unit and the vector units then work at the same time, which a product issued whole before a softmax
 * hardly did: see the top of this file): first an Oᵀ update, then an Sᵀ, each optional. A step is one 32-key
 * step of two 16-dim blocks (Oᵀ) or one 32-dim K tile of two 16-key blocks (Sᵀ), with the accumulators loaded or
 * zeroed before a block's first step and stored after its last. Each accumulator is the same TDPBF16PS chain in
 * the same order whichever way the steps are spread: the same bits.
 *   Oᵀ of the groups at og (and og + 16 with two_g; already scaled by α) += Vᵀ · P (P tiles pt0, pt1) over the
 *      tile's nks key steps (Vᵀ at vt, aa_layout_kv's layout: a step's 16·hb rows of 64 bytes);
 *   Sᵀ of the groups at qg (and qg + 16 with two_g): the nkb 16-key blocks of kr against their Qᵀ tiles, into s0
 *      (and s1). */
struct aa_tiles {
    const uint32_t *pt0, *pt1, *vt;
    float *og;
    int pv_two_g, hb, nks, pv_db, pv_ks; /* pv_db >= hb: no Oᵀ work left */
    const uint32_t *qg;
    const uint16_t *kr;
    float *s0, *s1;
    int sc_two_g, ht, nkb, sc_kb, sc_t; /* sc_kb >= nkb: no Sᵀ work left */
};

static void aa_tiles_none(aa_tiles *tl) {
    memset(tl, 0, sizeof *tl);
}

static void aa_tiles_pv(aa_tiles *tl, const uint32_t *pt0, const uint32_t *pt1, int two_g, const uint32_t *vt,
                        int hb, int nks, float *og) {
    tl->pt0 = pt0, tl->pt1 = pt1, tl->vt = vt, tl->og = og;
    tl->pv_two_g = two_g, tl->hb = hb, tl->nks = nks, tl->pv_db = 0, tl->pv_ks = 0;
}

static void aa_tiles_scores(aa_tiles *tl, const uint32_t *qg, int two_g, const uint16_t *kr, int ht, int nkb,
                            float *s0, float *s1) {
    tl->qg = qg, tl->kr = kr, tl->s0 = s0, tl->s1 = s1;
    tl->sc_two_g = two_g, tl->ht = ht, tl->nkb = nkb, tl->sc_kb = 0, tl->sc_t = 0;
}

/* One step of the queued work; 0 when none was left. */
static int aa_tiles_step(aa_tiles *tl) {
    if (tl->pv_db < tl->hb) {
        const size_t ldo = (size_t)ATTN_BQ_MAX * 4, vblk = (size_t)16 * 16, vstep = (size_t)16 * tl->hb * 16;
        const int db = tl->pv_db, ks = tl->pv_ks, two_g = tl->pv_two_g, two_d = db + 1 < tl->hb;
        const uint32_t *v0 = tl->vt + (size_t)db * vblk, *v1 = v0 + vblk;
        float *o0 = tl->og + (size_t)db * 16 * ATTN_BQ_MAX, *o1 = o0 + (size_t)16 * ATTN_BQ_MAX;
        if (ks == 0) {
            AMX_LOADD(AA_C00, o0, ldo);
            if (two_g) AMX_LOADD(AA_C01, o0 + 16, ldo);
            if (two_d) AMX_LOADD(AA_C10, o1, ldo);
            if (two_d && two_g) AMX_LOADD(AA_C11, o1 + 16, ldo);
        }
        AMX_LOADD(AA_B0, tl->pt0 + (size_t)ks * 256, 64);
        if (two_g) AMX_LOADD(AA_B1, tl->pt1 + (size_t)ks * 256, 64);
        AMX_LOADD(AA_A0, v0 + (size_t)ks * vstep, 64);
        AMX_DPBF16PS(AA_C00, AA_A0, AA_B0);
        if (two_g) AMX_DPBF16PS(AA_C01, AA_A0, AA_B1);
        if (two_d) {
            AMX_LOADD(AA_A1, v1 + (size_t)ks * vstep, 64);
            AMX_DPBF16PS(AA_C10, AA_A1, AA_B0);
            if (two_g) AMX_DPBF16PS(AA_C11, AA_A1, AA_B1);
        }
        if (++tl->pv_ks == tl->nks) {
            AMX_STORED(AA_C00, o0, ldo);
            if (two_g) AMX_STORED(AA_C01, o0 + 16, ldo);
            if (two_d) AMX_STORED(AA_C10, o1, ldo);
            if (two_d && two_g) AMX_STORED(AA_C11, o1 + 16, ldo);
            tl->pv_db += 2, tl->pv_ks = 0;
        }
        return 1;
    }
    if (tl->sc_kb < tl->nkb) {
        const size_t ldq = (size_t)ATTN_BQ_MAX * 4, ldk = (size_t)64 * tl->ht, kblk = (size_t)16 * 32 * tl->ht;
        const int kb = tl->sc_kb, t = tl->sc_t, two_g = tl->sc_two_g, two_k = kb + 1 < tl->nkb;
        const uint16_t *k0 = tl->kr + (size_t)kb * kblk, *k1 = k0 + kblk;
        if (t == 0) {
            AMX_ZERO(AA_C00);
            if (two_g) AMX_ZERO(AA_C01);
            if (two_k) AMX_ZERO(AA_C10);
            if (two_k && two_g) AMX_ZERO(AA_C11);
        }
        const uint32_t *q0 = tl->qg + (size_t)t * 16 * ATTN_BQ_MAX;
        AMX_LOADD(AA_B0, q0, ldq);
        if (two_g) AMX_LOADD(AA_B1, q0 + 16, ldq);
        AMX_LOADD(AA_A0, k0 + 32 * t, ldk);
        AMX_DPBF16PS(AA_C00, AA_A0, AA_B0);
        if (two_g) AMX_DPBF16PS(AA_C01, AA_A0, AA_B1);
        if (two_k) {
            AMX_LOADD(AA_A1, k1 + 32 * t, ldk);
            AMX_DPBF16PS(AA_C10, AA_A1, AA_B0);
            if (two_g) AMX_DPBF16PS(AA_C11, AA_A1, AA_B1);
        }
        if (++tl->sc_t == tl->ht) {
            AMX_STORED(AA_C00, tl->s0 + (size_t)kb * 256, 64);
            if (two_g) AMX_STORED(AA_C01, tl->s1 + (size_t)kb * 256, 64);
            if (two_k) AMX_STORED(AA_C10, tl->s0 + (size_t)(kb + 1) * 256, 64);
            if (two_k && two_g) AMX_STORED(AA_C11, tl->s1 + (size_t)(kb + 1) * 256, 64);
            tl->sc_kb += 2, tl->sc_t = 0;
        }
        return 1;
    }
    return 0;
}

static void aa_tiles_finish(aa_tiles *tl) {
    while (aa_tiles_step(tl)) {
    }
}

/* One work item (attn_block_fn's contract; hd even, hd <= 128; ws: aa_floats(hd) floats, 64-byte aligned).
 * kpack, vpack NULL: K and V laid out here, per key tile (aa_layout_kv into ws); else the segment's K rows and Vᵀ
 * steps laid out beforehand (aa_run_packed), read from there: the same operands, so the same bits. */
/* P pairs of pair of groups pp (two buffers, the pairs alternating: pp's softmax writes one while pp − 1's Oᵀ
 * reads the other). */
static inline uint32_t *aa_pair_p(const aa_ws *w, int pp) { return w->pt + (size_t)(pp % 2) * AA_KP * 16; }

static void aa_block_on(const aa_src *q, const aa_src *k, const aa_src *v, const uint16_t *kpack,
                        const uint32_t *vpack, const aa_dst *out, int nq, int nk, int hd, float scale, float *ws) {
    const int ht = (hd + 31) / 32, hb = (hd + 15) / 16, ng = (nq + 15) / 16, npp = (ng + 1) / 2;
    const aa_ws w = aa_carve(ws, hd);
    const float c = scale * 1.44269504088896341f; /* log2 domain */
    const size_t sb = (size_t)16 * AA_KB_MAX * 16;  /* floats of one group's scores */
    aa_layout_q(q, nq, hd, ht, w.qt);
    for (int i = 0; i < 16 * ng; i++) {
        w.mrow[i] = -INFINITY;
        w.lrow[i] = 0.0f;
    }
    for (int d = 0; d < 16 * hb; d++) memset(w.ot + (size_t)d * ATTN_BQ_MAX, 0, (size_t)16 * ng * sizeof(float));

    amx_tilecfg cfg;
    const uint8_t rows[8] = {16, 16, 16, 16, 16, 16, 16, 16};
    const uint16_t colsb[8] = {64, 64, 64, 64, 64, 64, 64, 64};
    amx_tilecfg_set(&cfg, 8, rows, colsb);
    AMX_LOADCONFIG(&cfg);
    for (int j0 = 0, nkt; j0 < nk; j0 += nkt) {
        nkt = attn_key_tile(nk, j0);
        const int nkb = (nkt + 15) / 16, nks = (nkt + 31) / 32;
        const uint16_t *kr = w.kr;
        const uint32_t *vt = w.vt;
        if (kpack) { /* j0 is a multiple of ATTN_BK, so of 32: the tile's blocks and steps are the segment's */
            kr = kpack + (size_t)j0 * 32 * ht;
            vt = vpack + (size_t)(j0 / 32) * 16 * hb * 16;
        } else {
            const int next = j0 + nkt < nk ? attn_key_tile(nk, j0 + nkt) : 0;
            const aa_src kt = aa_at(k->f, k->h, k->ld, (size_t)j0, 0), vt_ = aa_at(v->f, v->h, v->ld, (size_t)j0, 0);
            aa_layout_kv(&kt, &vt_, nkt, next, hd, ht, hb, w.kr, w.vt);
        }
        /* Pairs of query groups, pipelined: pair pp's softmax (vector units) runs with pair pp − 1's Oᵀ update and
         * pair pp + 1's Sᵀ (tiles) queued in steps between its operations. Scores of pair pp at
         * s + (pp % 2)·2·sb, its P at pt + (pp % 2)·KP·16. */
        aa_tiles tl;
        aa_tiles_none(&tl);
        aa_tiles_scores(&tl, w.qt, ng > 1, kr, ht, nkb, w.s, w.s + sb);
        aa_tiles_finish(&tl);
        for (int pp = 0; pp < npp; pp++) {
            const int g = 2 * pp, two_g = g + 1 < ng;
            float *s0 = w.s + (size_t)(pp % 2) * 2 * sb;
            uint32_t *p0 = aa_pair_p(&w, pp);
            aa_tiles_none(&tl);
            if (pp > 0) { /* pair pp − 1 has two groups: only the last pair may have one */
                const uint32_t *q0 = aa_pair_p(&w, pp - 1);
                aa_tiles_pv(&tl, q0, q0 + AA_KP / 2 * 16, 1, vt, hb, nks, w.ot + 16 * (g - 2));
            }
            if (pp + 1 < npp) {
                float *n0 = w.s + (size_t)((pp + 1) % 2) * 2 * sb;
                aa_tiles_scores(&tl, w.qt + 16 * (g + 2), g + 3 < ng, kr, ht, nkb, n0, n0 + sb);
            }
            aa_softmax(s0, nkt, nks, c, w.mrow + 16 * g, w.lrow + 16 * g, p0, w.ot + 16 * g, hb, &tl);
            if (two_g)
                aa_softmax(s0 + sb, nkt, nks, c, w.mrow + 16 * (g + 1), w.lrow + 16 * (g + 1), p0 + AA_KP / 2 * 16,
                           w.ot + 16 * (g + 1), hb, &tl);
            aa_tiles_finish(&tl);
        }
        const int g = 2 * (npp - 1);
        const uint32_t *q0 = aa_pair_p(&w, npp - 1);
        aa_tiles_none(&tl);
        aa_tiles_pv(&tl, q0, q0 + AA_KP / 2 * 16, g + 1 < ng, vt, hb, nks, w.ot + 16 * g);
        aa_tiles_finish(&tl);
    }
    AMX_RELEASE();
    aa_output(w.ot, w.lrow, nq, hd, hb, out);
}

/* ---- K and V laid out once per (segment, head): the pack in a->scratch ----
 * Per head, the K rows of every segment ([nk16][32·ht] bf16 each, nk16 = the segment's keys rounded up to 16,
 * segment after segment), then their Vᵀ steps ([nk32 / 32][16·hb][16] dwords each, nk32 rounded up to 32): a
 * segment's key tile at j0 reads its K rows at row j0 and its Vᵀ steps from step j0 / 32, the layouts aa_layout_kv
 * makes per key tile (zero past the segment's keys and past hd), so the tile loads read the pack directly. As in
 * the bf16 blocks' pack (attention_bf16.c): as many heads at a time as fit, each group a pass that lays out (over
 * the pool, in 64-key chunks) and a pass over its work items in (segment, head, query tile) order. */
enum { AA_CHUNK = ATTN_BK }; /* keys per layout task: whole 32-key steps */
_Static_assert(AA_CHUNK % 32 == 0 && AA_CHUNK <= 16 * AA_KB_MAX, "layout chunks of whole steps");

/* A head's pack: K rows (Σ nk16 of the segments) and Vᵀ steps (Σ nk32 / 32); its dwords (a multiple of 16), 0
 * on overflow or when no segment has a key. */
static size_t aa_pack_dwords(const attn_args *a, size_t *krows, size_t *vsteps) {
    const size_t ht = ((size_t)a->head_dim + 31) / 32, hb = ((size_t)a->head_dim + 15) / 16;
    size_t kr = 0, vs = 0, kd, vd, n;
    for (int s = 0; s < a->n_seg; s++) {
        const int len = a->cu[s + 1] - a->cu[s];
        if (len <= 0) continue;
        if (size_add_overflow(kr, ((size_t)len + 15) / 16 * 16, &kr) ||
            size_add_overflow(vs, ((size_t)len + 31) / 32, &vs))
            return 0;
    }
    if (size_mul_overflow(kr, 16 * ht, &kd) || size_mul_overflow(vs, 256 * hb, &vd) || size_add_overflow(kd, vd, &n))
        return 0;
    *krows = kr;
    *vsteps = vs;
    return n;
}

typedef struct aa_pack_job {
    const attn_args *a;
    uint32_t *pack;
    size_t krows, head_dw; /* K rows per head, dwords per head */
    int h0, nh;            /* the group: heads [h0, h0 + nh) */
    float *ws;
    size_t thread_floats;
} aa_pack_job;

static long aa_seg_chunks(int len, int nh) { return len > 0 ? (long)nh * ((len + AA_CHUNK - 1) / AA_CHUNK) : 0; }
static long aa_seg_tiles(int len, int nh) { return len > 0 ? (long)nh * attn_query_tiles(len) : 0; }

/* Segment of item `rest` (made its index in the segment) of per-segment counts count(len, nh), with the
 * segment's first K row and Vᵀ step in a head's pack. */
static int aa_find_seg(const attn_args *a, long *rest, size_t *krow, size_t *vstep, long (*count)(int, int), int nh) {
    size_t kr = 0, vs = 0;
    for (int s = 0;; s++) {
        const int len = a->cu[s + 1] - a->cu[s];
        const long n = count(len, nh);
        if (*rest < n) {
            *krow = kr;
            *vstep = vs;
            return s;
        }
        *rest -= n;
        if (len > 0) kr += ((size_t)len + 15) / 16 * 16, vs += ((size_t)len + 31) / 32;
    }
}

/* Head g's (of the group) K rows and Vᵀ steps of the segment starting at K row krow, Vᵀ step vstep. */
static uint16_t *aa_head_k(const aa_pack_job *j, int g, size_t krow) {
    const size_t ht = ((size_t)j->a->head_dim + 31) / 32;
    return (uint16_t *)(void *)(j->pack + (size_t)g * j->head_dw) + krow * 32 * ht;
}
static uint32_t *aa_head_v(const aa_pack_job *j, int g, size_t vstep) {
    const size_t ht = ((size_t)j->a->head_dim + 31) / 32, hb = ((size_t)j->a->head_dim + 15) / 16;
    return j->pack + (size_t)g * j->head_dw + j->krows * 16 * ht + vstep * 256 * hb;
}

/* The call's q, k, v from (row, col) on (bf16 rows where q16 is set), and its output at (row, col). */
static aa_src aa_q(const attn_args *a, size_t row, size_t col) {
    return aa_at(a->q16 ? NULL : a->q, a->q16, a->ldq, row, col);
}
static aa_src aa_k(const attn_args *a, size_t row, size_t col) {
    return aa_at(a->q16 ? NULL : a->k, a->q16 ? a->k16 : NULL, a->ldk, row, col);
}
static aa_src aa_v(const attn_args *a, size_t row, size_t col) {
    return aa_at(a->q16 ? NULL : a->v, a->q16 ? a->v16 : NULL, a->ldv, row, col);
}
static aa_dst aa_out(const attn_args *a, int row, int col) {
    aa_dst d = {a->out_tiles ? NULL : a->out + (size_t)row * a->ldo + (size_t)col, a->ldo, a->out_tiles,
                ((size_t)a->n_heads * (size_t)a->head_dim + 31) / 32, row, col};
    return d;
}

static void aa_pack_task(void *ctx, long it, int thread) {
    (void)thread;
    const aa_pack_job *j = ctx;
    const attn_args *a = j->a;
    const int hd = a->head_dim, ht = (hd + 31) / 32, hb = (hd + 15) / 16;
    size_t krow, vstep;
    long rest = it;
    const int s = aa_find_seg(a, &rest, &krow, &vstep, aa_seg_chunks, j->nh), base = a->cu[s];
    const int len = a->cu[s + 1] - base;
    const long chunks = (len + AA_CHUNK - 1) / AA_CHUNK;
    const int g = (int)(rest / chunks), j0 = (int)(rest % chunks) * AA_CHUNK;
    const int n = len - j0 < AA_CHUNK ? len - j0 : AA_CHUNK, rest_keys = len - j0 - n;
    const size_t col = (size_t)(j->h0 + g) * hd;
    /* the last chunk of a segment writes its padding: rows up to nk16, steps up to nk32 / 32 */
    const aa_src k = aa_k(a, (size_t)(base + j0), col), v = aa_v(a, (size_t)(base + j0), col);
    aa_layout_kv(&k, &v, n, rest_keys < AA_CHUNK ? rest_keys : AA_CHUNK, hd, ht, hb,
                 aa_head_k(j, g, krow) + (size_t)j0 * 32 * ht, aa_head_v(j, g, vstep) + (size_t)(j0 / 32) * 256 * hb);
}

/* One work item, (segment, head of the group, query tile) in order; with the pack (j->pack) K and V from it, else
 * (j->pack NULL: every head, h0 = 0) laid out per key tile inside the item. */
static void aa_item_task(void *ctx, long it, int thread) {
    const aa_pack_job *j = ctx;
    const attn_args *a = j->a;
    const int hd = a->head_dim;
    size_t krow, vstep;
    long rest = it;
    const int s = aa_find_seg(a, &rest, &krow, &vstep, aa_seg_tiles, j->nh), base = a->cu[s];
    const int len = a->cu[s + 1] - base;
    const long tiles = attn_query_tiles(len);
    const int g = (int)(rest / tiles), qt = (int)(rest % tiles);
    const int i0 = base + qt * ATTN_BQ, nq = attn_query_rows(len, qt), col = (j->h0 + g) * hd;
    const aa_src q = aa_q(a, (size_t)i0, (size_t)col);
    const aa_dst out = aa_out(a, i0, col);
    float *ws = j->ws + (size_t)thread * j->thread_floats;
    if (j->pack) {
        aa_block_on(&q, NULL, NULL, aa_head_k(j, g, krow), aa_head_v(j, g, vstep), &out, nq, len, hd, a->scale, ws);
        return;
    }
    const aa_src k = aa_k(a, (size_t)base, (size_t)col), v = aa_v(a, (size_t)base, (size_t)col);
    aa_block_on(&q, &k, &v, NULL, NULL, &out, nq, len, hd, a->scale, ws);
}

/* out_tiles' padding, which no item writes: rows S .. the last 16-row group's end, columns past H up to whole K
 * tiles. */
static void aa_zero_pad(const attn_args *a) {
    const size_t S = (size_t)a->cu[a->n_seg], H = (size_t)a->n_heads * (size_t)a->head_dim, kt = (H + 31) / 32;
    for (size_t r = S; r % 16; r++)
        for (size_t t = 0; t < kt; t++) memset(aa_tile_at(a->out_tiles, kt, r, 32 * t), 0, 32 * sizeof(uint16_t));
    if (H % 32)
        for (size_t r = 0; r < S; r++) memset(aa_tile_at(a->out_tiles, kt, r, H), 0, (32 - H % 32) * sizeof(uint16_t));
}

/* The packed path when a->scratch holds at least one head's pack; 0 (nothing done, scratch untouched)
 * otherwise. ws as for attn_run_blocks with aa_floats per thread. */
static int aa_run_packed(const attn_args *a, void *ws, thread_pool *pool) {
    const int nh = a->n_heads;
    size_t krows = 0, vsteps = 0, head_bytes;
    if (!a->scratch || nh <= 0 || a->n_seg <= 0) return 0;
    const size_t head_dw = aa_pack_dwords(a, &krows, &vsteps);
    if (head_dw == 0 || size_mul_overflow(head_dw, sizeof(uint32_t), &head_bytes)) return 0;
    void *start; /* the pack's stores are aligned (64-byte Vᵀ rows): it starts at a 64-byte boundary */
    const size_t fit = attn_scratch_heads(a, head_bytes, &start);
    if (fit < 1) return 0;
    aa_pack_job j = {a, start, krows, head_dw, 0, 0, (float *)(void *)(((uintptr_t)ws + 63) & ~(uintptr_t)63),
                     (aa_floats(a->head_dim) + 15) & ~(size_t)15};
    attn_run_head_groups(a, fit, &j.h0, &j.nh, aa_seg_chunks, aa_seg_tiles, aa_pack_task, aa_item_task, &j, pool);
    return 1;
}

void AA_NAME(attn_amx_run)(const attn_args *a, void *ws, thread_pool *pool) {
    if (!attn_amx_takes(a->head_dim)) {
#if AA_SIMD
        attn_bf16_run(BF16_SET_AVX512BF16, a, ws, pool); /* every AMX CPU has AVX512-BF16 */
#else
        attn_bf16_run(BF16_SET_PORTABLE, a, ws, pool);
#endif
        return;
    }
    if (a->out_tiles && a->n_seg > 0) aa_zero_pad(a);
    if (aa_run_packed(a, ws, pool)) return;
    long items = 0;
    for (int s = 0; s < a->n_seg; s++) items += aa_seg_tiles(a->cu[s + 1] - a->cu[s], a->n_heads);
    aa_pack_job j = {a, NULL, 0, 0, 0, a->n_heads, (float *)(void *)(((uintptr_t)ws + 63) & ~(uintptr_t)63),
                     (aa_floats(a->head_dim) + 15) & ~(size_t)15};
    pool_run(pool, items, aa_item_task, &j);
}

/* A start-up check of this build against the definition: two segments (37 rows: a partial query group; 100: two
 * key tiles, the second 36 keys, i.e. a padded second 32-key step) of two heads of 72 (3 K tiles, 5 Oᵀ tiles), on
 * the calling thread, with K and V laid out per key tile and from the pack (scratch for one head: two groups).
 * 2 when both agree bit for bit, 1 when both are within amx_attn_excess's bound, 0 when not or out of memory. */
int AA_NAME(attn_amx_check)(void) {
    enum { HD = 72, NH = 2, H = NH * HD, S = 137 };
    const int cu[3] = {0, 37, S};
    float *qkv = malloc((size_t)S * 3 * H * sizeof(float)), *o1 = malloc((size_t)S * H * sizeof(float));
    float *o2 = malloc((size_t)S * H * sizeof(float));
    void *ws = malloc(attn_amx_workspace_size(HD, 1));
    attn_args a = {.q = qkv, .k = qkv + H, .v = qkv + 2 * H, .ldq = 3 * H, .ldk = 3 * H, .ldv = 3 * H, .out = o1,
                   .ldo = H, .n_heads = NH, .head_dim = HD, .cu = cu, .n_seg = 2, .scale = 0.11785113f};
    size_t krows, vsteps;
    const size_t pack_bytes = aa_pack_dwords(&a, &krows, &vsteps) * sizeof(uint32_t) + 64; /* one head, aligned */
    void *scratch = malloc(pack_bytes);
    int ok = 0;
    if (qkv && o1 && o2 && ws && scratch) {
        uint32_t st = 2463534242u;
        for (size_t i = 0; i < (size_t)S * 3 * H; i++) {
            st ^= st << 13, st ^= st >> 17, st ^= st << 5;
            qkv[i] = (float)(int)(st % 4001u) / 1000.0f - 2.0f;
        }
        a.out = o2;
        attn_amx_ref(&a);
        for (int packed = 0; packed < 2; packed++) {
            a.out = o1;
            a.scratch = packed ? scratch : NULL;
            a.scratch_bytes = packed ? pack_bytes : 0;
            AA_NAME(attn_amx_run)(&a, ws, NULL);
            const int r =
                memcmp(o1, o2, (size_t)S * H * sizeof(float)) == 0 ? 2 : amx_attn_excess(&a, o1, o2) <= 1.0 ? 1 : 0;
            ok = packed == 0 || r < ok ? r : ok;
        }
    }
    free(qkv), free(o1), free(o2), free(ws), free(scratch);
    return ok;
}

#if QVL_AMX_EMULATE && !ATTN_AMX_SIMD
/* Built once (the emulated build is in every build). */
size_t attn_amx_workspace_size(int head_dim, int n_threads) {
    if (n_threads < 1) n_threads = 1;
    if (head_dim < 1) head_dim = 1;
    size_t f = attn_bf16_block_floats(head_dim);
    if (attn_amx_takes(head_dim) && aa_floats(head_dim) > f) f = aa_floats(head_dim);
    return (size_t)n_threads * ((f + 15) & ~(size_t)15) * sizeof(float) + 64;
}

static inline float aa_rb(float x) { return bf16_float(bf16_round_ftz(x)); }

/* The definition (bf16.h), one query row at a time. */
void attn_amx_ref(const attn_args *a) {
    const int hd = a->head_dim;
    if (!attn_amx_takes(hd)) {
        attn_bf16_ref(a);
        return;
    }
    float *s = malloc(((size_t)ATTN_BK_MAX + (size_t)hd) * sizeof(float)), *o = s ? s + ATTN_BK_MAX : NULL;
    if (!s) return; /* tests only: a failure shows as unwritten (NaN-poisoned) output */
    const float c = a->scale * 1.44269504088896341f;
    const int ht = (hd + 31) / 32;
    for (int sg = 0; sg < a->n_seg; sg++) {
        const int base = a->cu[sg], len = a->cu[sg + 1] - base;
        for (int h = 0; h < a->n_heads; h++) {
            const size_t col = (size_t)h * hd;
            const float *K = a->k + (size_t)base * a->ldk + col, *V = a->v + (size_t)base * a->ldv + col;
            for (int i = 0; i < len; i++) {
                const float *qi = a->q + (size_t)(base + i) * a->ldq + col;
                float m = -INFINITY, l = 0.0f;
                for (int d = 0; d < hd; d++) o[d] = 0.0f;
                for (int j0 = 0, nkt; j0 < len; j0 += nkt) {
                    nkt = attn_key_tile(len, j0);
                    float amax = -INFINITY;
                    for (int j = 0; j < nkt; j++) { /* scores: TDPBF16PS over 32-dim tiles */
                        const float *kj = K + (size_t)(j0 + j) * a->ldk;
                        float acc = 0.0f;
                        for (int t = 0; t < ht; t++) {
                            float te = 0.0f, to = 0.0f;
                            for (int p = 0; p < 16; p++) {
                                const int d = 32 * t + 2 * p; /* hd even: d, d + 1 both in or both out */
                                const float x0 = d < hd ? aa_rb(qi[d]) : 0.0f, y0 = d < hd ? aa_rb(kj[d]) : 0.0f;
                                const float x1 = d < hd ? aa_rb(qi[d + 1]) : 0.0f;
                                const float y1 = d < hd ? aa_rb(kj[d + 1]) : 0.0f;
                                te = bf16_daz(fmaf(x0, y0, te)); /* past hd: zero products, as in the tiles */
                                to = bf16_daz(fmaf(x1, y1, to));
                            }
                            acc = bf16_daz(bf16_daz(acc) + bf16_daz(te + to));
                        }
                        s[j] = acc;
                        amax = amax > acc ? amax : acc;
                    }
                    const float mt = amax * c, m_new = m > mt ? m : mt, alpha = bf16_exp2(m - m_new);
                    float te = 0.0f, to = 0.0f;
                    for (int j = 0; j < nkt; j++) {
                        s[j] = aa_rb(bf16_exp2(fmaf(s[j], c, -m_new)));
                        if (j & 1) to = to + s[j];
                        else te = te + s[j];
                    }
                    l = l * alpha + (te + to);
                    m = m_new;
                    for (int d = 0; d < hd; d++) { /* P·V: TDPBF16PS over 32-key steps */
                        float acc = o[d] * alpha;
                        for (int j1 = 0; j1 < nkt; j1 += 32) {
                            float pe = 0.0f, po = 0.0f;
                            for (int p = 0; p < 16; p++) {
                                const int j = j1 + 2 * p;
                                const float p0 = j < nkt ? s[j] : 0.0f, p1 = j + 1 < nkt ? s[j + 1] : 0.0f;
                                const float v0 = j < nkt ? aa_rb(V[(size_t)(j0 + j) * a->ldv + d]) : 0.0f;
                                const float v1 = j + 1 < nkt ? aa_rb(V[(size_t)(j0 + j + 1) * a->ldv + d]) : 0.0f;
                                pe = bf16_daz(fmaf(p0, v0, pe));
                                po = bf16_daz(fmaf(p1, v1, po));
                            }
                            acc = bf16_daz(bf16_daz(acc) + bf16_daz(pe + po));
                        }
                        o[d] = acc;
                    }
                }
                for (int d = 0; d < hd; d++) a->out[(size_t)(base + i) * a->ldo + col + (size_t)d] = o[d] / l;
            }
        }
    }
    free(s);
}
#endif
