/* attention_bf16.c — attention in bf16 arithmetic (precision bf16; the definition is in bf16.h): the portable
 * block, which is the definition one query row at a time, the reference built on it, and the dispatch to the
 * AVX512-BF16 block. Work items and threads come from attention.c's driver (attn_run_blocks). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/cpu.h"
#include "cpu/bf16.h"
#include "cpu/kernels_avx2.h" /* the attention tiling (attn_key_tile, ATTN_BQ_MAX, ATTN_BK_MAX); portable inlines */

/* Per thread (the AVX512-BF16 block's layout; the portable block uses the first BK_MAX + hd floats): Qᵀ pairs
 * [hp][BQ_MAX], K pairs [BK_MAX][hp], V pairs [BK_MAX/2][hd], scores [BK_MAX][48], P pairs [BK_MAX/2][48],
 * output Oᵀ [hd][BQ_MAX], running max, sum and rescale factors [BQ_MAX] each (in floats). */
size_t attn_bf16_block_floats(int hd) {
    const size_t hp = ((size_t)hd + 1) / 2, h2 = 2 * hp;
    size_t n = hp * ATTN_BQ_MAX + (size_t)ATTN_BK_MAX * hp + (size_t)ATTN_BK_MAX / 2 * h2 + (size_t)ATTN_BK_MAX * 48 +
               (size_t)ATTN_BK_MAX / 2 * 48 + h2 * ATTN_BQ_MAX + 3 * (size_t)ATTN_BQ_MAX;
    return (n + 15) & ~(size_t)15;
}

size_t attn_bf16_workspace_size(int head_dim, int n_threads) {
    if (n_threads < 1) n_threads = 1;
    if (head_dim < 1) head_dim = 1;
    return (size_t)n_threads * attn_bf16_block_floats(head_dim) * sizeof(float) + 64;
}

static inline float rb(float x) { return bf16_float(bf16_round_ftz(x)); }

/* The definition for one query tile (bf16.h), one row at a time over key tiles of attn_key_tile. ws: the scores
 * [BK_MAX] and output [hd] of one row at its start. */
static void block_portable(const float *q, size_t ldq, const float *k, size_t ldk, const float *v, size_t ldv,
                           float *out, size_t ldo, int nq, int nk, int hd, float scale, float *ws) {
    float *s = ws, *o = ws + ATTN_BK_MAX;
    const float c = scale * 1.44269504088896341f; /* log2 domain */
    for (int i = 0; i < nq; i++) {
        const float *qi = q + (size_t)i * ldq;
        float m = -INFINITY, l = 0.0f;
        for (int d = 0; d < hd; d++) o[d] = 0.0f;
        for (int j0 = 0, nkt; j0 < nk; j0 += nkt) {
            nkt = attn_key_tile(nk, j0);
            float amax = -INFINITY;
            for (int j = 0; j < nkt; j++) {
                const float *kj = k + (size_t)(j0 + j) * ldk;
                float acc = 0.0f;
                for (int d = 0; d < hd; d += 2) {
                    const int two = d + 1 < hd;
                    acc = bf16_pair(acc, rb(qi[d]), rb(kj[d]), two ? rb(qi[d + 1]) : 0.0f, two ? rb(kj[d + 1]) : 0.0f);
                }
                s[j] = acc;
                amax = amax > acc ? amax : acc; /* MAXPS's choice, also for NaN */
            }
            const float mt = amax * c, m_new = m > mt ? m : mt, alpha = bf16_exp2(m - m_new);
            float te = 0.0f, to = 0.0f;
            for (int j = 0; j < nkt; j++) {
                s[j] = rb(bf16_exp2(fmaf(s[j], c, -m_new)));
                if (j & 1) to = to + s[j];
                else te = te + s[j];
            }
            l = l * alpha + (te + to);
            m = m_new;
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

void attn_bf16_run(int set, const attn_args *a, void *ws, thread_pool *pool) {
    attn_block_fn block = block_portable;
#if QVL_WITH_X86
    if (set == BF16_SET_AVX512BF16 && a->head_dim % 2 == 0 && a->head_dim <= 128) block = attn_bf16_block_avx512bf16;
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
            block_portable(a->q + (size_t)base * a->ldq + col, a->ldq, a->k + (size_t)base * a->ldk + col, a->ldk,
                           a->v + (size_t)base * a->ldv + col, a->ldv, a->out + (size_t)base * a->ldo + col, a->ldo,
                           len, len, a->head_dim, a->scale, ws);
        }
    }
    free(ws);
}
