/* attention.c — fused multi-head attention over segments: the work-item driver (threads over (segment, head,
 * query tile)), the portable flash-attention block and the exact reference.
 *
 * A work item is one query tile (ATTN_BQ rows, the segment's last up to ATTN_BQ_MAX) of one (segment, head). It
 * streams the segment's keys in tiles (attn_key_tile: ATTN_BK keys, the last up to ATTN_BK_MAX) with an online
 * softmax (running max m, running sum l; when the max grows, the partial output and sum
 * are rescaled by exp(m_old − m_new)), so memory is O(tile) whatever the segment length. Items are handed out to the
 * pool's threads dynamically and each is computed by the same code whichever thread runs it, so results do not depend on
 * the thread count. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/cpu.h"
#include "cpu/attention.h"
#include "cpu/kernels_avx2.h"
#include "cpu/kernels_avx512.h"

size_t attn_workspace_size(int head_dim, int n_threads) {
    if (n_threads < 1) n_threads = 1;
    if (head_dim < 1) head_dim = 1;
    /* + 64: attn_run aligns the workspace itself (the SIMD block uses aligned loads), whatever the caller gives. */
    return (size_t)n_threads * attn_block_floats(head_dim) * sizeof(float) + 64;
}

/* Portable work item: same contract and tile structure as attn_block_avx2 (kernels_avx2.h), any hd. */
static void attn_block_scalar(const float *q, size_t ldq, const float *k, size_t ldk, const float *v, size_t ldv,
                              float *out, size_t ldo, int nq, int nk, int hd, float scale, float *ws) {
    const attn_ws w = attn_ws_carve(ws, hd); /* the SIMD blocks' layout; this block uses s, o, mrow and lrow */
    float *s = w.s, *o = w.o, *mrow = w.mrow, *lrow = w.lrow;
    for (int i = 0; i < nq; i++) {
        memset(o + (size_t)i * hd, 0, (size_t)hd * sizeof(float));
        mrow[i] = -INFINITY;
        lrow[i] = 0.0f;
    }
    for (int j0 = 0, nkt; j0 < nk; j0 += nkt) {
        nkt = attn_key_tile(nk, j0);
        for (int i = 0; i < nq; i++) {
            const float *qi = q + (size_t)i * ldq;
            float *si = s + (size_t)i * ATTN_BK_MAX, *oi = o + (size_t)i * hd;
            float mx = -INFINITY;
            for (int j = 0; j < nkt; j++) {
                const float *kj = k + (size_t)(j0 + j) * ldk;
                float dot = 0.0f;
                for (int d = 0; d < hd; d++) dot += qi[d] * kj[d];
                si[j] = dot * scale;
                mx = fmaxf(mx, si[j]);
            }
            const float m_new = fmaxf(mrow[i], mx);
            const float alpha = expf(mrow[i] - m_new);
            float sum = 0.0f;
            for (int j = 0; j < nkt; j++) {
                si[j] = expf(si[j] - m_new);
                sum += si[j];
            }
            lrow[i] = lrow[i] * alpha + sum;
            mrow[i] = m_new;
            for (int d = 0; d < hd; d++) oi[d] *= alpha;
            for (int j = 0; j < nkt; j++) {
                const float *vj = v + (size_t)(j0 + j) * ldv;
                const float p = si[j];
                for (int d = 0; d < hd; d++) oi[d] += p * vj[d];
            }
        }
    }
    for (int i = 0; i < nq; i++)
        for (int d = 0; d < hd; d++) out[(size_t)i * ldo + d] = o[(size_t)i * hd + d] / lrow[i];
}

typedef struct attn_job {
    const attn_args *a;
    attn_block_fn block;
    float *ws;
    size_t thread_floats;
} attn_job;

/* Work items of a segment of len rows: one per (head, query tile); none for an empty segment. */
static long seg_items(int len, int nh) { return len > 0 ? (long)nh * attn_query_tiles(len) : 0; }

static void attn_task(void *ctx, long it, int thread) {
    const attn_job *j = ctx;
    const attn_args *a = j->a;
    const int nh = a->n_heads, hd = a->head_dim;
    long rest = it;
    int s = 0, len = 0;
    for (;; s++) {
        len = a->cu[s + 1] - a->cu[s];
        const long n_it = seg_items(len, nh);
        if (rest < n_it) break;
        rest -= n_it;
    }
    const long tiles = attn_query_tiles(len);
    const int h = (int)(rest / tiles), qt = (int)(rest % tiles), base = a->cu[s];
    const int i0 = base + qt * ATTN_BQ, nq = attn_query_rows(len, qt);
    const size_t col = (size_t)h * hd;
    j->block(a->q + (size_t)i0 * a->ldq + col, a->ldq, a->k + (size_t)base * a->ldk + col, a->ldk,
             a->v + (size_t)base * a->ldv + col, a->ldv, a->out + (size_t)i0 * a->ldo + col, a->ldo, nq, len, hd,
             a->scale, j->ws + (size_t)thread * j->thread_floats);
}

void attn_run_blocks(const attn_args *a, void *ws, thread_pool *pool, attn_block_fn block, size_t thread_floats) {
    const int nh = a->n_heads, hd = a->head_dim;
    if (nh <= 0 || hd <= 0 || a->n_seg <= 0) return;
    long items = 0;
    for (int s = 0; s < a->n_seg; s++) items += seg_items(a->cu[s + 1] - a->cu[s], nh);
    attn_job j = {a, block, (float *)(void *)(((uintptr_t)ws + 63) & ~(uintptr_t)63), thread_floats};
    /* Items in (segment, head, query tile) order, handed out dynamically: consecutive items share K and V, every
     * core stays busy when segments differ in length or a core is shared, and which thread computes an item does
     * not change its bits. */
    pool_run(pool, items, attn_task, &j);
}

size_t attn_scratch_heads(const attn_args *a, size_t head_bytes, void **start) {
    if (!a->scratch || head_bytes == 0) return 0;
    const uintptr_t p0 = (uintptr_t)a->scratch, p1 = (p0 + 63) & ~(uintptr_t)63;
    if (a->scratch_bytes < p1 - p0) return 0;
    *start = (void *)p1;
    return (a->scratch_bytes - (p1 - p0)) / head_bytes;
}

void attn_run_head_groups(const attn_args *a, size_t fit, int *h0, int *nh, long (*chunks)(int len, int nh),
                          long (*tiles)(int len, int nh), pool_task_fn pack, pool_task_fn item, void *job,
                          thread_pool *pool) {
    const int heads = a->n_heads;
    const int n_groups = fit < (size_t)heads ? (int)(((size_t)heads + fit - 1) / fit) : 1;
    const int group = (heads + n_groups - 1) / n_groups;
    for (int g0 = 0; g0 < heads; g0 += group) {
        *h0 = g0;
        *nh = heads - g0 < group ? heads - g0 : group;
        long nc = 0, ni = 0;
        for (int s = 0; s < a->n_seg; s++) {
            nc += chunks(a->cu[s + 1] - a->cu[s], *nh);
            ni += tiles(a->cu[s + 1] - a->cu[s], *nh);
        }
        pool_run(pool, nc, pack, job);
        pool_run(pool, ni, item, job);
    }
}

void attn_run_isa(const attn_args *a, void *ws, thread_pool *pool, attn_isa isa) {
    if (isa == ATTN_ISA_AUTO)
        isa = (attn_isa)cpu_level(); /* the same numbering */
    attn_block_fn block = attn_block_scalar;
#if QVL_WITH_X86
    if (a->head_dim % 8 == 0 && isa == ATTN_ISA_AVX512) block = attn_block_avx512;
    else if (a->head_dim % 8 == 0 && isa == ATTN_ISA_AVX2) block = attn_block_avx2;
#else
    (void)isa; /* no SIMD sets in this build: every set runs the portable block */
#endif
    attn_run_blocks(a, ws, pool, block, attn_block_floats(a->head_dim));
}

void attn_run(const attn_args *a, void *ws, thread_pool *pool) { attn_run_isa(a, ws, pool, ATTN_ISA_AUTO); }

void attn_run_scalar(const attn_args *a, void *ws, thread_pool *pool) { attn_run_isa(a, ws, pool, ATTN_ISA_SCALAR); }

void attn_ref(const attn_args *a) {
    const int nh = a->n_heads, hd = a->head_dim;
    int max_len = 0;
    for (int s = 0; s < a->n_seg; s++)
        if (a->cu[s + 1] - a->cu[s] > max_len) max_len = a->cu[s + 1] - a->cu[s];
    float *p = malloc((size_t)(max_len > 0 ? max_len : 1) * sizeof(float));
    double *acc = malloc((size_t)hd * sizeof(double));
    if (!p || !acc) {
        free(p);
        free(acc);
        return;
    }
    for (int s = 0; s < a->n_seg; s++) {
        const int base = a->cu[s], len = a->cu[s + 1] - a->cu[s];
        for (int h = 0; h < nh; h++)
            for (int i = 0; i < len; i++) {
                const float *qi = a->q + (size_t)(base + i) * a->ldq + (size_t)h * hd;
                float mx = -INFINITY;
                for (int j = 0; j < len; j++) {
                    const float *kj = a->k + (size_t)(base + j) * a->ldk + (size_t)h * hd;
                    float dot = 0.0f;
                    for (int d = 0; d < hd; d++) dot += qi[d] * kj[d];
                    p[j] = dot * a->scale;
                    mx = fmaxf(mx, p[j]);
                }
                double sum = 0.0;
                for (int j = 0; j < len; j++) {
                    p[j] = expf(p[j] - mx);
                    sum += p[j];
                }
                for (int d = 0; d < hd; d++) acc[d] = 0.0;
                for (int j = 0; j < len; j++) {
                    const float *vj = a->v + (size_t)(base + j) * a->ldv + (size_t)h * hd;
                    for (int d = 0; d < hd; d++) acc[d] += (double)p[j] * vj[d];
                }
                float *oi = a->out + (size_t)(base + i) * a->ldo + (size_t)h * hd;
                for (int d = 0; d < hd; d++) oi[d] = (float)(acc[d] / sum);
            }
    }
    free(p);
    free(acc);
}
