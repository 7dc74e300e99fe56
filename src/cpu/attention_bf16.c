/* attention_bf16.c — attention in bf16 arithmetic (precision bf16; the definition is in bf16.h): the definition one
 * query row at a time and the reference built on it, the portable block (the same bits, key tile by key tile, its
 * chains vectorisable where the operands' exponents allow), and the dispatch to the AVX512-BF16 block. Work items
 * and threads come from attention.c's driver (attn_run_blocks). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/cpu.h"
#include "core/error.h" /* size_mul_overflow */
#include "cpu/bf16.h"
#include "cpu/kernels_avx2.h" /* the attention tiling (attn_key_tile, ATTN_BQ_MAX, ATTN_BK_MAX); portable inlines */

/* Per thread, the larger of the two blocks' layouts. The AVX512-BF16 block's: Qᵀ pairs [hp][BQ_MAX], K pairs
 * [BK_MAX][hp], V pairs [BK_MAX/2][hd], scores [BK_MAX][48], P pairs [BK_MAX/2][48], output Oᵀ [hd][BQ_MAX], running
 * max, sum and rescale factors [BQ_MAX] each (in floats); the portable block's: portable_floats. */
static size_t portable_floats(size_t h2);

size_t attn_bf16_block_floats(int hd) {
    const size_t hp = ((size_t)hd + 1) / 2, h2 = 2 * hp;
    size_t n = hp * ATTN_BQ_MAX + (size_t)ATTN_BK_MAX * hp + (size_t)ATTN_BK_MAX / 2 * h2 + (size_t)ATTN_BK_MAX * 48 +
               (size_t)ATTN_BK_MAX / 2 * 48 + h2 * ATTN_BQ_MAX + 3 * (size_t)ATTN_BQ_MAX;
    if (portable_floats(h2) > n) n = portable_floats(h2);
    return (n + 15) & ~(size_t)15;
}

size_t attn_bf16_workspace_size(int head_dim, int n_threads) {
    if (n_threads < 1) n_threads = 1;
    if (head_dim < 1) head_dim = 1;
    return (size_t)n_threads * attn_bf16_block_floats(head_dim) * sizeof(float) + 64;
}

static inline float rb(float x) { return bf16_float(bf16_round_ftz(x)); }

/* The softmax step of one query row over a key tile (bf16.h): s holds the tile's nkt scores and becomes the rounded
 * p_j; the running max m and sum l move on; returns α. */
static inline float softmax_tile(float *s, int nkt, float c, float *m, float *l) {
    float amax = -INFINITY;
    for (int j = 0; j < nkt; j++) amax = amax > s[j] ? amax : s[j]; /* MAXPS's choice, also for NaN */
    const float mt = amax * c, m_new = *m > mt ? *m : mt, alpha = bf16_exp2(*m - m_new);
    float te = 0.0f, to = 0.0f;
    for (int j = 0; j < nkt; j++) {
        s[j] = rb(bf16_exp2(fmaf(s[j], c, -m_new)));
        if (j & 1) to = to + s[j];
        else te = te + s[j];
    }
    *l = *l * alpha + (te + to);
    *m = m_new;
    return alpha;
}

/* The definition for one query tile (bf16.h), one row at a time over key tiles of attn_key_tile: the reference.
 * ws: the scores [BK_MAX] and output [hd] of one row. */
static void block_def(const float *q, size_t ldq, const float *k, size_t ldk, const float *v, size_t ldv, float *out,
                      size_t ldo, int nq, int nk, int hd, float scale, float *ws) {
    float *s = ws, *o = ws + ATTN_BK_MAX;
    const float c = scale * 1.44269504088896341f; /* log2 domain */
    for (int i = 0; i < nq; i++) {
        const float *qi = q + (size_t)i * ldq;
        float m = -INFINITY, l = 0.0f;
        for (int d = 0; d < hd; d++) o[d] = 0.0f;
        for (int j0 = 0, nkt; j0 < nk; j0 += nkt) {
            nkt = attn_key_tile(nk, j0);
            for (int j = 0; j < nkt; j++) {
                const float *kj = k + (size_t)(j0 + j) * ldk;
                float acc = 0.0f;
                for (int d = 0; d < hd; d += 2) {
                    const int two = d + 1 < hd;
                    acc = bf16_pair(acc, rb(qi[d]), rb(kj[d]), two ? rb(qi[d + 1]) : 0.0f, two ? rb(kj[d + 1]) : 0.0f);
                }
                s[j] = acc;
            }
            const float alpha = softmax_tile(s, nkt, c, &m, &l);
            for (int d = 0; d < hd; d++) {
                float acc = o[d] * alpha;
                for (int j = 0; j < nkt; j += 2) {
                    const int two = j + 1 < nkt;
                    acc = bf16_pair(acc, s[j], rb(v[(size_t)(j0 + j) * ldv + d]), two ? s[j + 1] : 0.0f,
                                    two ? rb(v[(size_t)(j0 + j + 1) * ldv + d]) : 0.0f);
                }
                o[d] = acc;
            }
        }
        for (int d = 0; d < hd; d++) out[(size_t)i * ldo + d] = o[d] / l;
    }
}

/* ---- the portable block: the definition's bits, key tile by key tile for all rows of the query tile ----
 * q, k and v are rounded once (k and v per key tile, not per row) into the workspace, the head dim padded to h2
 * with zeros (an odd head dim's last pair is then (x, 0·0), as the definition pads it), each row keeping its running
 * max, sum and output there between tiles. The chains run as in gemm_bf16.c's ukr_fast where the exponent fields
 * show every product of nonzero operands in [FLT_MIN, 2^128) and no operand infinite or NaN (conservative: a
 * product of two bf16 values is exact in f32, denormal or not, once the fields sum to 119): the product is exact,
 * fma(x, y, acc) = acc + x·y with the sum the only rounding, and the daz steps stay (a sum can be denormal). The
 * scores of a tile then run across its keys, o across the head dim, both vectorisable; elsewhere (per key tile for
 * the scores, per row and tile for o) the literal bf16_pair steps on the same rounded values. Workspace (floats):
 * Q [BQ_MAX][h2], O [BQ_MAX][h2], Kᵀ [h2][BK_MAX], V [BK_MAX][h2], scores [BK_MAX], max and sum [BQ_MAX] each
 * (an odd tile has at most BK_MAX − 1 keys, so its zero pad fits). */
_Static_assert(ATTN_BK_MAX % 2 == 0, "a key tile's pairs, padded, fit in BK_MAX");
static size_t portable_floats(size_t h2) {
    return 2 * h2 * ATTN_BQ_MAX + 2 * h2 * ATTN_BK_MAX + ATTN_BK_MAX + 2 * ATTN_BQ_MAX;
}

static inline int f32_exp(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return (int)(u >> 23) & 0xff;
}

/* The largest exponent field of n values and the smallest of the nonzero ones (255 if none). */
static void exponents(const float *x, size_t n, int *emax, int *emin) {
    int mx = *emax, mn = *emin;
    for (size_t i = 0; i < n; i++) {
        const int e = f32_exp(x[i]);
        mx = e > mx ? e : mx;
        mn = e && e < mn ? e : mn;
    }
    *emax = mx, *emin = mn;
}

static void block_portable(const float *q, size_t ldq, const float *k, size_t ldk, const float *v, size_t ldv,
                           float *out, size_t ldo, int nq, int nk, int hd, float scale, float *ws) {
    const int h2 = (hd + 1) & ~1;
    float *Q = ws, *O = Q + (size_t)h2 * ATTN_BQ_MAX, *KT = O + (size_t)h2 * ATTN_BQ_MAX;
    float *V = KT + (size_t)h2 * ATTN_BK_MAX, *s = V + (size_t)h2 * ATTN_BK_MAX, *M = s + ATTN_BK_MAX;
    float *L = M + ATTN_BQ_MAX;
    const float c = scale * 1.44269504088896341f; /* log2 domain */
    int qmax = 0, qmin = 255;
    for (int i = 0; i < nq; i++) {
        float *qi = Q + (size_t)i * h2, *oi = O + (size_t)i * h2;
        for (int d = 0; d < h2; d++) {
            qi[d] = d < hd ? rb(q[(size_t)i * ldq + d]) : 0.0f;
            oi[d] = 0.0f;
        }
        M[i] = -INFINITY;
        L[i] = 0.0f;
    }
    exponents(Q, (size_t)nq * h2, &qmax, &qmin);
    for (int j0 = 0, nkt; j0 < nk; j0 += nkt) {
        nkt = attn_key_tile(nk, j0);
        const int np = (nkt + 1) & ~1; /* keys in pairs: an odd tile's last pair is (p, v) and (0, 0) */
        int kmax = 0, kmin = 255, vmax = 0, vmin = 255;
        for (int j = 0; j < np; j++)
            for (int d = 0; d < h2; d++) {
                const int in = j < nkt && d < hd;
                KT[(size_t)d * ATTN_BK_MAX + j] = in ? rb(k[(size_t)(j0 + j) * ldk + d]) : 0.0f;
                V[(size_t)j * h2 + d] = in ? rb(v[(size_t)(j0 + j) * ldv + d]) : 0.0f;
            }
        for (int d = 0; d < hd; d++) exponents(KT + (size_t)d * ATTN_BK_MAX, (size_t)nkt, &kmax, &kmin);
        exponents(V, (size_t)np * h2, &vmax, &vmin);
        const int qk_fast = bf16_products_exact(qmax, qmin, kmax, kmin);
        for (int i = 0; i < nq; i++) {
            const float *qi = Q + (size_t)i * h2;
            float *oi = O + (size_t)i * h2;
            if (qk_fast) {
                for (int j = 0; j < nkt; j++) s[j] = 0.0f;
                for (int d = 0; d < h2; d += 2) {
                    const float x0 = qi[d], x1 = qi[d + 1];
                    const float *y0 = KT + (size_t)d * ATTN_BK_MAX, *y1 = y0 + ATTN_BK_MAX;
                    for (int j = 0; j < nkt; j++) s[j] = bf16_daz(bf16_daz(s[j] + x1 * y1[j]) + x0 * y0[j]);
                }
            } else {
                for (int j = 0; j < nkt; j++) {
                    float acc = 0.0f;
                    for (int d = 0; d < h2; d += 2)
                        acc = bf16_pair(acc, qi[d], KT[(size_t)d * ATTN_BK_MAX + j], qi[d + 1],
                                        KT[(size_t)(d + 1) * ATTN_BK_MAX + j]);
                    s[j] = acc;
                }
            }
            const float alpha = softmax_tile(s, nkt, c, &M[i], &L[i]);
            if (nkt & 1) s[nkt] = 0.0f;
            int pmax = 0, pmin = 255;
            exponents(s, (size_t)nkt, &pmax, &pmin);
            if (bf16_products_exact(pmax, pmin, vmax, vmin)) {
                for (int d = 0; d < hd; d++) oi[d] = bf16_daz(oi[d] * alpha);
                for (int j = 0; j < np; j += 2) {
                    const float x0 = s[j], x1 = s[j + 1], *y0 = V + (size_t)j * h2, *y1 = y0 + h2;
                    for (int d = 0; d < hd; d++) oi[d] = bf16_daz(bf16_daz(oi[d] + x1 * y1[d]) + x0 * y0[d]);
                }
            } else {
                for (int d = 0; d < hd; d++) {
                    float acc = oi[d] * alpha;
                    for (int j = 0; j < np; j += 2)
                        acc = bf16_pair(acc, s[j], V[(size_t)j * h2 + d], s[j + 1], V[(size_t)(j + 1) * h2 + d]);
                    oi[d] = acc;
                }
            }
        }
    }
    for (int i = 0; i < nq; i++)
        for (int d = 0; d < hd; d++) out[(size_t)i * ldo + d] = O[(size_t)i * h2 + d] / L[i];
}

#if QVL_WITH_X86
/* K and V packed once per (segment, head) (bf16.h, attn_bf16_pack_avx512bf16), for a group of heads at a time in
 * a->scratch: per head, the K pairs of every segment ([nk8/8][hp][8] each, segment after segment: `keys` = Σ nk8),
 * then their V pairs ([nk8/2][hd] each), keys·hd dwords in all. The profile that led here (perf, 7056 rows, hd 72):
 * a quarter of an item's time was the wait for K and V rows 13.8 KB apart in the qkv rows, re-read and re-rounded
 * by each of a head's 37 query tiles. Each group is a pass that packs (over the pool, in 64-key chunks) and a pass
 * over its work items in attn_run_blocks' order (segment, head, query tile), handed out dynamically; the pairs are
 * those the block makes per key tile, so the bits are the per-item path's whatever the group size or thread. */
enum { PACK_CHUNK = ATTN_BK }; /* keys per packing task: a multiple of the key tile start spacing and of 8 */
_Static_assert(PACK_CHUNK % 8 == 0, "packing tasks start at whole 8-key chunks");

typedef struct pack_job {
    const attn_args *a;
    uint32_t *pack;
    size_t keys, head_dw; /* rows of K pairs per head (Σ nk8), dwords per head (keys·hd) */
    int h0, nh;           /* the group: heads [h0, h0 + nh) */
    float *ws;
    size_t thread_floats;
} pack_job;


/* A segment of one query tile is not packed: its single item per head rounds each key tile once anyway, and the
 * pack pass would only write the pairs out and read them back (bench_attention, 8 x 196 rows, AVX512-BF16, Zen 4:
 * 1 thread 119-123 GFLOP/s packed against 130-133 rounded in the item). Its item takes the per-item block. */
static int seg_packed(int len) { return len > 0 && attn_query_tiles(len) > 1; }
static size_t seg_keys8(int len) { return seg_packed(len) ? ((size_t)len + 7) & ~(size_t)7 : 0; } /* pack rows */
/* Segment of item `rest` of per-segment counts count(len), with that segment's key row offset in the pack. */
static int find_seg(const attn_args *a, long *rest, size_t *koff, long (*count)(int len, int nh), int nh) {
    size_t off = 0;
    for (int s = 0;; s++) {
        const int len = a->cu[s + 1] - a->cu[s];
        const long n = count(len, nh);
        if (*rest < n) {
            *koff = off;
            return s;
        }
        *rest -= n;
        off += seg_keys8(len);
    }
}

static long seg_chunks(int len, int nh) {
    return seg_packed(len) ? (long)nh * ((len + PACK_CHUNK - 1) / PACK_CHUNK) : 0;
}
static long seg_tiles(int len, int nh) { return len > 0 ? (long)nh * attn_query_tiles(len) : 0; }

/* Head g's (of the group) K and V pairs of the segment whose key rows start at koff in the pack. */
static uint32_t *head_k(const pack_job *j, int g, size_t koff) {
    return j->pack + (size_t)g * j->head_dw + koff * (size_t)(j->a->head_dim / 2);
}
static uint32_t *head_v(const pack_job *j, int g, size_t koff) {
    const size_t hd = (size_t)j->a->head_dim;
    return j->pack + (size_t)g * j->head_dw + j->keys * (hd / 2) + koff / 2 * hd;
}

static void pack_task(void *ctx, long it, int thread) {
    (void)thread;
    const pack_job *j = ctx;
    const attn_args *a = j->a;
    const int hd = a->head_dim;
    size_t koff;
    long rest = it;
    const int s = find_seg(a, &rest, &koff, seg_chunks, j->nh), base = a->cu[s], len = a->cu[s + 1] - base;
    const long chunks = (len + PACK_CHUNK - 1) / PACK_CHUNK;
    const int g = (int)(rest / chunks), j0 = (int)(rest % chunks) * PACK_CHUNK;
    const int n = len - j0 < PACK_CHUNK ? len - j0 : PACK_CHUNK;
    const size_t col = (size_t)(j->h0 + g) * hd;
    attn_bf16_pack_avx512bf16(a->k + (size_t)base * a->ldk + col, a->ldk, a->v + (size_t)base * a->ldv + col, a->ldv,
                              j0, n, len, hd, head_k(j, g, koff), head_v(j, g, koff));
}

static void item_task(void *ctx, long it, int thread) {
    const pack_job *j = ctx;
    const attn_args *a = j->a;
    const int hd = a->head_dim;
    size_t koff;
    long rest = it;
    const int s = find_seg(a, &rest, &koff, seg_tiles, j->nh), base = a->cu[s], len = a->cu[s + 1] - base;
    const long tiles = attn_query_tiles(len);
    const int g = (int)(rest / tiles), qt = (int)(rest % tiles);
    const int i0 = base + qt * ATTN_BQ, nq = attn_query_rows(len, qt);
    const size_t col = (size_t)(j->h0 + g) * hd;
    float *ws = j->ws + (size_t)thread * j->thread_floats;
    if (!seg_packed(len)) {
        attn_bf16_block_avx512bf16(a->q + (size_t)i0 * a->ldq + col, a->ldq, a->k + (size_t)base * a->ldk + col,
                                   a->ldk, a->v + (size_t)base * a->ldv + col, a->ldv,
                                   a->out + (size_t)i0 * a->ldo + col, a->ldo, nq, len, hd, a->scale, ws);
        return;
    }
    attn_bf16_block_avx512bf16_packed(a->q + (size_t)i0 * a->ldq + col, a->ldq, head_k(j, g, koff), head_v(j, g, koff),
                                      a->out + (size_t)i0 * a->ldo + col, a->ldo, nq, len, hd, a->scale, ws);
}

/* The packed path when a->scratch holds at least one head's pack; 0 (nothing done) otherwise. */
static int run_packed(const attn_args *a, void *ws, thread_pool *pool) {
    const int nh = a->n_heads, hd = a->head_dim;
    if (!a->scratch || nh <= 0 || a->n_seg <= 0) return 0;
    size_t keys = 0, head_dw, head_bytes;
    for (int s = 0; s < a->n_seg; s++)
        if (size_add_overflow(keys, seg_keys8(a->cu[s + 1] - a->cu[s]), &keys)) return 0;
    if (keys == 0 || size_mul_overflow(keys, (size_t)hd, &head_dw) ||
        size_mul_overflow(head_dw, sizeof(uint32_t), &head_bytes))
        return 0;
    void *start; /* the pack is read as uint32_t: it starts at a 64-byte boundary of the scratch */
    const size_t fit = attn_scratch_heads(a, head_bytes, &start);
    if (fit < 1) return 0;
    pack_job j = {a, start, keys, head_dw, 0, 0, (float *)(void *)(((uintptr_t)ws + 63) & ~(uintptr_t)63),
                  attn_bf16_block_floats(hd)};
    attn_run_head_groups(a, fit, &j.h0, &j.nh, seg_chunks, seg_tiles, pack_task, item_task, &j, pool);
    return 1;
}
#endif

void attn_bf16_run(int set, const attn_args *a, void *ws, thread_pool *pool) {
    attn_block_fn block = block_portable;
#if QVL_WITH_X86
    if (set == BF16_SET_AVX512BF16 && a->head_dim % 2 == 0 && a->head_dim <= 128) {
        if (run_packed(a, ws, pool)) return;
        block = attn_bf16_block_avx512bf16;
    }
#else
    (void)set;
#endif
    attn_run_blocks(a, ws, pool, block, attn_bf16_block_floats(a->head_dim));
}

void attn_bf16_ref(const attn_args *a) {
    float *ws = malloc(((size_t)ATTN_BK_MAX + (size_t)a->head_dim) * sizeof(float));
    if (!ws) return; /* tests only: a failure shows as unwritten (NaN-poisoned) output */
    for (int sg = 0; sg < a->n_seg; sg++) {
        const int base = a->cu[sg], len = a->cu[sg + 1] - base;
        for (int h = 0; h < a->n_heads; h++) {
            const size_t col = (size_t)h * a->head_dim;
            block_def(a->q + (size_t)base * a->ldq + col, a->ldq, a->k + (size_t)base * a->ldk + col, a->ldk,
                      a->v + (size_t)base * a->ldv + col, a->ldv, a->out + (size_t)base * a->ldo + col, a->ldo, len,
                      len, a->head_dim, a->scale, ws);
        }
    }
    free(ws);
}
