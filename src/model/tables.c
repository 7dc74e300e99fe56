/* tables.c — position-embedding interpolation and rotary tables, with torch's float32 arithmetic.
 * This file is compiled without FMA contraction (see CMakeLists.txt): every operation rounds as torch's does. */
#include "model/tables.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/convert.h"

static inline float table_at(const wmat *t, size_t row, size_t col) {
    size_t i = row * (size_t)t->cols + col;
    const unsigned char *p = t->data;
    uint16_t h;
    float f;
    switch (t->dtype) {
    case QVL_DTYPE_BF16: memcpy(&h, p + 2 * i, 2); return op_bf16_to_f32(h);
    case QVL_DTYPE_F16: memcpy(&h, p + 2 * i, 2); return op_f16_to_f32(h);
    case QVL_DTYPE_F32: break;
    }
    memcpy(&f, p + 4 * i, 4);
    return f;
}

/* Per-axis taps and weights for n output positions over a table side of G entries. */
typedef struct axis_tap {
    int lo, hi;     /* the two table indices */
    float wlo, whi; /* their weights */
} axis_tap;

static void axis_taps(qvl_pos_mode mode, int n, int G, axis_tap *out) {
    for (int i = 0; i < n; i++) {
        float c;
        if (mode == QVL_POS_LINSPACE) {
            /* torch.linspace(0, G-1, n) on the CPU, scalar formula: the first half counts up from the start,
             * the second half down from the end. */
            if (n == 1) {
                c = 0.0f;
            } else {
                float step = (float)(G - 1) / (float)(n - 1);
                int half = n / 2;
                c = i < half ? step * (float)i : (float)(G - 1) - step * (float)(n - 1 - i);
            }
        } else {
            /* Closed form: one correctly rounded division of exact integers. */
            c = (float)((long)i * (G - 1)) / (float)(n > 1 ? n - 1 : 1);
        }
        int f = (int)floorf(c);
        if (f < 0) f = 0;
        if (f > G - 1) f = G - 1;
        float d = c - (float)f;
        out[i].lo = f;
        out[i].hi = f + 1 < G ? f + 1 : G - 1;
        out[i].wlo = 1.0f - d;
        /* The closed form derives the second weight from the first (it can differ from d in the last ulp). */
        out[i].whi = mode == QVL_POS_LINSPACE ? d : 1.0f - out[i].wlo;
    }
}

typedef struct pos_job {
    const qvl_model *m;
    const axis_tap *ah, *aw;
    float *slice;
    int bw_n;
} pos_job;

/* Merge blocks [b0, b1) of one grid's first frame: 2 x 2 (merge x merge) rows each. */
static void pos_blocks(void *ctx, long b0, long b1, int thread) {
    (void)thread;
    const pos_job *j = ctx;
    const tower_config *c = &j->m->cfg;
    const int H = c->hidden, G = c->pos_side, ms = c->merge;
    for (long blk = b0; blk < b1; blk++) {
        const int bh = (int)(blk / j->bw_n), bwi = (int)(blk % j->bw_n);
        for (int ih = 0; ih < ms; ih++)
            for (int iw = 0; iw < ms; iw++) {
                const axis_tap *r = &j->ah[bh * ms + ih], *q = &j->aw[bwi * ms + iw];
                size_t tap[4] = {(size_t)r->lo * G + q->lo, (size_t)r->lo * G + q->hi,
                                 (size_t)r->hi * G + q->lo, (size_t)r->hi * G + q->hi};
                float wt[4] = {r->wlo * q->wlo, r->wlo * q->whi, r->whi * q->wlo, r->whi * q->whi};
                float *dst = j->slice + ((size_t)blk * ms * ms + (size_t)ih * ms + iw) * H;
                for (int e = 0; e < H; e++) {
                    float s = table_at(&j->m->pos, tap[0], e) * wt[0];
                    s = s + table_at(&j->m->pos, tap[1], e) * wt[1];
                    s = s + table_at(&j->m->pos, tap[2], e) * wt[2];
                    s = s + table_at(&j->m->pos, tap[3], e) * wt[3];
                    dst[e] = s;
                }
            }
    }
}

void tables_pos(const qvl_model *m, qvl_pos_mode mode, const qvl_grid *grids, size_t n_grids, float *pos,
                void *taps, thread_pool *pool) {
    const tower_config *c = &m->cfg;
    const int H = c->hidden, G = c->pos_side, ms = c->merge;
    size_t row0 = 0;
    for (size_t gi = 0; gi < n_grids; gi++) {
        const int T = grids[gi].t, h = grids[gi].h, w = grids[gi].w;
        axis_tap *ah = taps, *aw = ah + h; /* h, w ≤ MAX_GRID_SIDE, validated by the caller */
        axis_taps(mode, h, G, ah);
        axis_taps(mode, w, G, aw);
        float *slice = pos + row0 * (size_t)H;
        pos_job j = {m, ah, aw, slice, w / ms};
        pool_for(pool, (long)(h / ms) * (w / ms), 0, pos_blocks, &j);
        size_t hw = (size_t)h * w;
        for (int t = 1; t < T; t++) memcpy(slice + (size_t)t * hw * H, slice, hw * H * sizeof(float));
        row0 += (size_t)T * hw;
    }
}

void tables_rope(const tower_config *c, const qvl_grid *grids, size_t n_grids, float *cos_t, float *sin_t) {
    const int d = c->head_dim / 2, nf = d / 2, ms = c->merge;
    float inv[MAX_HEAD_DIM / 4];
    for (int k = 0; k < nf; k++)
        inv[k] = 1.0f / powf(c->rope_theta, (float)(2 * k) / (float)d);
    size_t row = 0;
    for (size_t gi = 0; gi < n_grids; gi++) {
        const int T = grids[gi].t, h = grids[gi].h, w = grids[gi].w;
        size_t first = row;
        for (int bh = 0; bh < h / ms; bh++)
            for (int bw = 0; bw < w / ms; bw++)
                for (int ih = 0; ih < ms; ih++)
                    for (int iw = 0; iw < ms; iw++, row++) {
                        float pr = (float)(bh * ms + ih), pc = (float)(bw * ms + iw);
                        float *co = cos_t + row * d, *si = sin_t + row * d;
                        for (int k = 0; k < nf; k++) {
                            float ar = pr * inv[k], ac = pc * inv[k];
                            co[k] = cosf(ar);
                            si[k] = sinf(ar);
                            co[nf + k] = cosf(ac);
                            si[nf + k] = sinf(ac);
                        }
                    }
        size_t hw = (size_t)h * w;
        for (int t = 1; t < T; t++, row += hw) {
            memcpy(cos_t + row * d, cos_t + first * d, hw * d * sizeof(float));
            memcpy(sin_t + row * d, sin_t + first * d, hw * d * sizeof(float));
        }
    }
}
