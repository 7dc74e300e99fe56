/* attention_avx512bf16.c — one attention work item in bf16 arithmetic on AVX512-BF16 (bf16.h's definition, bit
 * for bit), with the query rows in the vector lanes throughout:
 *   - Qᵀ pairs [hd/2][rows] (pairs along the head dim, 16 rows a vector; laid out by 16 x 16 transposes), K pairs
 *     in chunks of 8 keys, pair-major within a chunk ([keys/8][hd/2][8]: the 8 keys' pair p side by side, so the
 *     broadcasts of a chunk are one pointer plus constant offsets): the scores of 16·G rows x 8 keys by
 *     VDPBF16PS, a key's pair broadcast against G row vectors (G = 3, 2 or 1);
 *   - the online softmax vertical: per-row max, rescale factors, sums and the log2-domain exp2 on row vectors, no
 *     horizontal reductions; P rounded two keys at a time into pair vectors (VCVTNE2PS2BF16 and an interleave);
 *   - P·V into Oᵀ [hd][rows]: a V pair (two keys, one head column) broadcast against G row vectors of P pairs, 8
 *     head columns at a time (fewer for a head dim that is not a multiple of 8), so a 72-wide head pays for 72.
 * K and V are rounded into pairs either once per key tile of the item (shared by all the item's rows:
 * attn_bf16_block_avx512bf16), or once per (segment, head) for all its items beforehand (attn_bf16_pack_avx512bf16
 * into a packed buffer that attn_bf16_block_avx512bf16_packed reads): the same pairs, so the same bits. One
 * function, rows_pass, does every row block with its group count as a compile-time constant. Any even head_dim up
 * to 128, any segment length. Compiled with -mavx512bf16, called only after cpu_has_avx512bf16(). */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#include "cpu/bf16.h"
#include "cpu/bf16_avx512.h" /* tr16_epi32 */
#include "cpu/kernels_avx2.h" /* attention tiling */

enum { RB = 48 }; /* rows of a full row block: 3 vectors of 16 */

/* acc += a · b (VDPBF16PS) with b one pair dword broadcast from memory inside the instruction: no separate
 * broadcast uop (compilers keep a broadcast used three times in a register otherwise; measured 8 % slower). */
static inline __m512 dpm(__m512 acc, __m512i a, const uint32_t *b) {
    __asm__("vdpbf16ps %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(a), "m"(*b));
    return acc;
}

/* Word order that interleaves VCVTNE2PS2BF16(odd, even) (even in words 0-15, odd in 16-31) into pair dwords. */
static inline __m512i pair_index(void) {
    return _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21, 5, 20, 4,
                            19, 3, 18, 2, 17, 1, 16, 0);
}
/* 16 pair dwords (even[i] low, odd[i] high), each rounded by bf16_round_ftz. */
static inline __m512i pairs16(__m512 even, __m512 odd, __m512i idx) {
    return _mm512_permutexvar_epi16(idx, (__m512i)_mm512_cvtne2ps_pbh(odd, even));
}

static inline __mmask16 first_n(int n) { return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1u); }

/* x[d, d + 16) clipped to n elements (zero past n; the pointer is only formed below n). */
static inline __m512 load_clip(const float *x, int d, int n) {
    return d < n ? _mm512_maskz_loadu_ps(first_n(n - d), x + d) : _mm512_setzero_ps();
}

/* The 16 pair dwords of x[2·p0, 2·p0 + 32) clipped to n elements: dword p = bf16(x[2p]) | bf16(x[2p + 1]) << 16
 * (VCVTNE2PS2BF16: bf16_round_ftz). */
static inline __m512i pairs32(const float *x, int p0, int n) {
    return (__m512i)_mm512_cvtne2ps_pbh(load_clip(x, 2 * p0 + 16, n), load_clip(x, 2 * p0, n));
}

/* Scores of G row vectors (Qᵀ pairs at qt, row stride BQ_MAX dwords) against keys [0, nk8) of the K pair tile kp
 * (k_pairs' layout; nk8 a multiple of 8, keys at or past nkt zero) into s [nk8][RB] (raw chains); the row
 * vectors' max over the keys before nkt into mx[G]. */
static inline __attribute__((always_inline)) void scores_pass(const int G, const uint32_t *qt, const uint32_t *kp,
                                                              int hp, int nk8, int nkt, float *s, __m512 *mx) {
    for (int g = 0; g < G; g++) mx[g] = _mm512_set1_ps(-INFINITY);
    for (int kc = 0; kc < nk8; kc += 8) {
        __m512 acc[8][3];
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++)
#pragma GCC unroll 3
            for (int g = 0; g < G; g++) acc[j][g] = _mm512_setzero_ps();
        const uint32_t *kr = kp + (size_t)kc * hp;
        for (int p = 0; p < hp; p++) {
            __m512i x[3];
#pragma GCC unroll 3
            for (int g = 0; g < G; g++) x[g] = _mm512_load_si512(qt + (size_t)p * ATTN_BQ_MAX + 16 * g);
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++)
#pragma GCC unroll 3
                for (int g = 0; g < G; g++) acc[j][g] = dpm(acc[j][g], x[g], kr + (size_t)p * 8 + j);
        }
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            const int valid = kc + j < nkt;
#pragma GCC unroll 3
            for (int g = 0; g < G; g++) {
                _mm512_store_ps(s + (size_t)(kc + j) * RB + 16 * g, acc[j][g]);
                if (valid) mx[g] = _mm512_max_ps(mx[g], acc[j][g]);
            }
        }
    }
}

/* Oᵀ columns [d0, d0 + D) of G row vectors (ot row stride BQ_MAX): o = o·α, then the chain over the tile's npair
 * key pairs of P pairs (pt [npair][RB]) and V pairs (vp [npair][hd], broadcast). */
static inline __attribute__((always_inline)) void pv_pass(const int G, const int D, float *ot, const __m512 *alpha,
                                                          const uint32_t *pt, const uint32_t *vp, int hd, int npair) {
    __m512 acc[8][3];
#pragma GCC unroll 8
    for (int d = 0; d < D; d++)
#pragma GCC unroll 3
        for (int g = 0; g < G; g++)
            acc[d][g] = _mm512_mul_ps(_mm512_load_ps(ot + (size_t)d * ATTN_BQ_MAX + 16 * g), alpha[g]);
    for (int jp = 0; jp < npair; jp++) {
        __m512i x[3];
#pragma GCC unroll 3
        for (int g = 0; g < G; g++) x[g] = _mm512_load_si512(pt + (size_t)jp * RB + 16 * g);
        const uint32_t *vr = vp + (size_t)jp * hd;
#pragma GCC unroll 8
        for (int d = 0; d < D; d++)
#pragma GCC unroll 3
            for (int g = 0; g < G; g++) acc[d][g] = dpm(acc[d][g], x[g], vr + d);
    }
#pragma GCC unroll 8
    for (int d = 0; d < D; d++)
#pragma GCC unroll 3
        for (int g = 0; g < G; g++) _mm512_store_ps(ot + (size_t)d * ATTN_BQ_MAX + 16 * g, acc[d][g]);
}

/* One key tile for the G row vectors starting at row r0: scores, the online softmax step, P·V. */
static inline __attribute__((always_inline)) void rows_pass(const int G, int r0, const uint32_t *qt,
                                                            const uint32_t *kp, const uint32_t *vp, int hp, int hd,
                                                            int nkt, float c, float *s, uint32_t *pt, float *ot,
                                                            float *mrow, float *lrow) {
    const int nk8 = (nkt + 7) & ~7, npair = (nkt + 1) / 2;
    __m512 mx[3], alpha[3];
    scores_pass(G, qt + r0, kp, hp, nk8, nkt, s, mx);
    const __m512 cv = _mm512_set1_ps(c), hi = _mm512_castsi512_ps(_mm512_set1_epi32((int)0xffff0000u));
    const __m512i idx = pair_index();
#pragma GCC unroll 3
    for (int g = 0; g < G; g++) {
        const __m512 m_old = _mm512_load_ps(mrow + r0 + 16 * g);
        const __m512 m_new = _mm512_max_ps(m_old, _mm512_mul_ps(mx[g], cv));
        alpha[g] = bf16_exp2_16(_mm512_sub_ps(m_old, m_new));
        __m512 te = _mm512_setzero_ps(), to = _mm512_setzero_ps();
        for (int jp = 0; jp < npair; jp++) {
            const float *se = s + (size_t)(2 * jp) * RB + 16 * g;
            const __m512 pe = bf16_exp2_16(_mm512_fmsub_ps(_mm512_load_ps(se), cv, m_new));
            const __m512 po = 2 * jp + 1 < nkt ? bf16_exp2_16(_mm512_fmsub_ps(_mm512_load_ps(se + RB), cv, m_new))
                                               : _mm512_setzero_ps();
            const __m512i pr = pairs16(pe, po, idx);
            _mm512_store_si512(pt + (size_t)jp * RB + 16 * g, pr);
            te = _mm512_add_ps(te, _mm512_castsi512_ps(_mm512_slli_epi32(pr, 16)));
            to = _mm512_add_ps(to, _mm512_and_ps(_mm512_castsi512_ps(pr), hi));
        }
        float *l = lrow + r0 + 16 * g;
        _mm512_store_ps(l, _mm512_add_ps(_mm512_mul_ps(_mm512_load_ps(l), alpha[g]), _mm512_add_ps(te, to)));
        _mm512_store_ps(mrow + r0 + 16 * g, m_new);
    }
    int d0 = 0;
    for (; d0 + 8 <= hd; d0 += 8)
        pv_pass(G, 8, ot + (size_t)d0 * ATTN_BQ_MAX + r0, alpha, pt, vp + d0, hd, npair);
    switch (hd - d0) { /* hd is even */
    case 6: pv_pass(G, 6, ot + (size_t)d0 * ATTN_BQ_MAX + r0, alpha, pt, vp + d0, hd, npair); break;
    case 4: pv_pass(G, 4, ot + (size_t)d0 * ATTN_BQ_MAX + r0, alpha, pt, vp + d0, hd, npair); break;
    case 2: pv_pass(G, 2, ot + (size_t)d0 * ATTN_BQ_MAX + r0, alpha, pt, vp + d0, hd, npair); break;
    default: break;
    }
}

/* K pairs of keys [0, nk8) of a key tile (nkt keys from k, zero past nkt) into kp: per chunk of 8 keys, pair p of
 * key j at [p][j] ([nk8/8][hp][8]); two chunks' 16 rows transposed 16 x 16 at a time, 16 pairs at a time (the
 * low half of each result to the first chunk, the high half to the second, when there is one). */
static inline void k_pairs(const float *k, size_t ldk, int nkt, int nk8, int hd, uint32_t *kp) {
    const int hp = hd / 2;
    for (int c = 0; c < nk8; c += 16) {
        uint32_t *k0 = kp + (size_t)c * hp, *k1 = c + 8 < nk8 ? k0 + (size_t)8 * hp : NULL;
        for (int p0 = 0; p0 < hp; p0 += 16) {
            __m512i r[16];
            for (int j = 0; j < 16; j++)
                r[j] = c + j < nkt ? pairs32(k + (size_t)(c + j) * ldk, p0, hd) : _mm512_setzero_si512();
            tr16_epi32(r);
            for (int p = 0; p < 16 && p0 + p < hp; p++) {
                _mm256_storeu_si256((__m256i *)(void *)(k0 + (size_t)(p0 + p) * 8), _mm512_castsi512_si256(r[p]));
                if (k1)
                    _mm256_storeu_si256((__m256i *)(void *)(k1 + (size_t)(p0 + p) * 8),
                                        _mm512_extracti64x4_epi64(r[p], 1));
            }
        }
    }
}

/* V pairs of key pairs [0, npair) of a key tile of nkt keys from v: keys 2jp, 2jp+1 per head column (zero past
 * nkt) into vp [npair][hd]. */
static inline void v_pairs(const float *v, size_t ldv, int nkt, int npair, int hd, uint32_t *vp, __m512i idx) {
    for (int jp = 0; jp < npair; jp++) {
        const float *v0 = v + (size_t)(2 * jp) * ldv;
        const int two = 2 * jp + 1 < nkt;
        for (int d = 0; d < hd; d += 16) {
            const __mmask16 m = first_n(hd - d);
            const __m512 lo = _mm512_maskz_loadu_ps(m, v0 + d);
            const __m512 hi = two ? _mm512_maskz_loadu_ps(m, v0 + ldv + d) : _mm512_setzero_ps();
            _mm512_mask_storeu_epi32(vp + (size_t)jp * hd + d, m, pairs16(lo, hi, idx));
        }
    }
}

void attn_bf16_pack_avx512bf16(const float *k, size_t ldk, const float *v, size_t ldv, int j0, int n, int nk,
                               int hd, uint32_t *kp, uint32_t *vp) {
    const int hp = hd / 2, end = j0 + n, pad = end == nk ? ((nk + 7) & ~7) - end : 0;
    k_pairs(k + (size_t)j0 * ldk, ldk, n, n + pad, hd, kp + (size_t)j0 * hp);
    v_pairs(v + (size_t)j0 * ldv, ldv, n, (n + 1) / 2, hd, vp + (size_t)j0 / 2 * hd, pair_index());
}

/* The work item; kpack, vpack NULL: K and V rounded here, per key tile, else read from the packed pairs. */
static inline __attribute__((always_inline)) void block(const float *q, size_t ldq, const float *k, size_t ldk,
                                                        const float *v, size_t ldv, const uint32_t *kpack,
                                                        const uint32_t *vpack, float *out, size_t ldo, int nq,
                                                        int nk, int hd, float scale, float *ws) {
    const int hp = hd / 2, ng = (nq + 15) / 16, nqp = 16 * ng;
    uint32_t *qt = (uint32_t *)(void *)ws;                   /* [hp][BQ_MAX] */
    uint32_t *kt = qt + (size_t)hp * ATTN_BQ_MAX;             /* [BK_MAX][hp] */
    uint32_t *vt = kt + (size_t)ATTN_BK_MAX * hp;             /* [BK_MAX/2][hd] */
    float *s = (float *)(void *)(vt + (size_t)ATTN_BK_MAX / 2 * hd); /* [BK_MAX][RB] */
    uint32_t *pt = (uint32_t *)(void *)(s + (size_t)ATTN_BK_MAX * RB); /* [BK_MAX/2][RB] */
    float *ot = (float *)(void *)(pt + (size_t)ATTN_BK_MAX / 2 * RB); /* [hd][BQ_MAX] */
    float *mrow = ot + (size_t)hd * ATTN_BQ_MAX, *lrow = mrow + ATTN_BQ_MAX;
    const float c = scale * 1.44269504088896341f;
    const __m512i idx = pair_index();
    for (int i0 = 0; i0 < nqp; i0 += 16) /* Qᵀ pairs (zero rows past nq), 16 rows x 16 pairs at a time */
        for (int p0 = 0; p0 < hp; p0 += 16) {
            __m512i r[16];
            for (int i = 0; i < 16; i++)
                r[i] = i0 + i < nq ? pairs32(q + (size_t)(i0 + i) * ldq, p0, hd) : _mm512_setzero_si512();
            tr16_epi32(r);
            for (int p = 0; p < 16 && p0 + p < hp; p++)
                _mm512_store_si512(qt + (size_t)(p0 + p) * ATTN_BQ_MAX + i0, r[p]);
        }
    for (int i = 0; i < nqp; i += 16) {
        _mm512_store_ps(mrow + i, _mm512_set1_ps(-INFINITY));
        _mm512_store_ps(lrow + i, _mm512_setzero_ps());
        for (int d = 0; d < hd; d++) _mm512_store_ps(ot + (size_t)d * ATTN_BQ_MAX + i, _mm512_setzero_ps());
    }
    for (int j0 = 0, nkt; j0 < nk; j0 += nkt) {
        nkt = attn_key_tile(nk, j0);
        const int nk8 = (nkt + 7) & ~7, npair = (nkt + 1) / 2;
        const uint32_t *kp = kt, *vp = vt;
        if (kpack) { /* j0 is even (a multiple of ATTN_BK): the tile's pairs are the segment's */
            kp = kpack + (size_t)j0 * hp;
            vp = vpack + (size_t)j0 / 2 * hd;
        } else {
            const int next = j0 + nkt < nk ? attn_key_tile(nk, j0 + nkt) : 0;
            for (int j = 0; j < next; j++) /* the next tile's K and V rows, far apart in the qkv rows, towards L1 */
                for (int d = 0; d < hd; d += 16) {
                    _mm_prefetch((const char *)(k + (size_t)(j0 + nkt + j) * ldk + d), _MM_HINT_T0);
                    _mm_prefetch((const char *)(v + (size_t)(j0 + nkt + j) * ldv + d), _MM_HINT_T0);
                }
            k_pairs(k + (size_t)j0 * ldk, ldk, nkt, nk8, hd, kt);
            v_pairs(v + (size_t)j0 * ldv, ldv, nkt, npair, hd, vt, idx);
        }
        int g0 = 0;
        for (; g0 + 3 <= ng; g0 += 3)
            rows_pass(3, 16 * g0, qt, kp, vp, hp, hd, nkt, c, s, pt, ot, mrow, lrow);
        if (ng - g0 == 2) rows_pass(2, 16 * g0, qt, kp, vp, hp, hd, nkt, c, s, pt, ot, mrow, lrow);
        else if (ng - g0 == 1) rows_pass(1, 16 * g0, qt, kp, vp, hp, hd, nkt, c, s, pt, ot, mrow, lrow);
    }
    for (int i0 = 0; i0 < nqp; i0 += 16) { /* out = Oᵀ / l, transposed back to rows 16 x 16 at a time */
        const __m512 l = _mm512_load_ps(lrow + i0);
        const int rows = nq - i0 < 16 ? nq - i0 : 16;
        for (int d0 = 0; d0 < hd; d0 += 16) {
            __m512i r[16];
            for (int d = 0; d < 16; d++)
                r[d] = d0 + d < hd ? _mm512_castps_si512(
                                         _mm512_div_ps(_mm512_load_ps(ot + (size_t)(d0 + d) * ATTN_BQ_MAX + i0), l))
                                   : _mm512_setzero_si512();
            tr16_epi32(r);
            const __mmask16 m = first_n(hd - d0);
            for (int i = 0; i < rows; i++) _mm512_mask_storeu_epi32(out + (size_t)(i0 + i) * ldo + d0, m, r[i]);
        }
    }
}

void attn_bf16_block_avx512bf16(const float *q, size_t ldq, const float *k, size_t ldk, const float *v, size_t ldv,
                                float *out, size_t ldo, int nq, int nk, int hd, float scale, float *ws) {
    block(q, ldq, k, ldk, v, ldv, NULL, NULL, out, ldo, nq, nk, hd, scale, ws);
}

void attn_bf16_block_avx512bf16_packed(const float *q, size_t ldq, const uint32_t *kp, const uint32_t *vp, float *out,
                                       size_t ldo, int nq, int nk, int hd, float scale, float *ws) {
    block(q, ldq, NULL, 0, NULL, 0, kp, vp, out, ldo, nq, nk, hd, scale, ws);
}
