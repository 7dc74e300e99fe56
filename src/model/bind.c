/* bind.c — bind every tensor the configuration calls for, from a checkpoint's table, into the model.
 *
 * In canonical order: the patch embedding, the position table, each block, the merger, each DeepStack merger.
 * Matrices are recorded with where they are stored, for the load to read, check, pack and hash; biases and norms
 * are read here and widened to f32 in one allocation; a patch-embed weight stored in MLX order is read and permuted
 * once into an owned buffer in the HF column order (c, t, y, x). Each bound tensor is recorded for the fingerprint
 * under its canonical name and HF shape. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/convert.h"
#include "io/checkpoint.h"
#include "model/model.h"

typedef struct binder {
    qvl_model *m;
    const checkpoint *ck;
    size_t small_cap, small_used;
    void *scratch; /* a tensor's stored bytes, read before they are widened or permuted */
    size_t scratch_cap;
    qvl_error *err;
} binder;

/* Look up `canonical`, check its shape and dtype, and record it for the fingerprint. */
static qvl_status lookup(binder *b, const char *canonical, int ndim, const int64_t *shape, const ckpt_tensor **out) {
    const ckpt_tensor *t = NULL;
    TRY(checkpoint_get(b->ck, canonical, ndim, shape, &t, b->err));
    bound_tensor *bt = &b->m->bound[b->m->n_bound++];
    size_t len = strlen(canonical);
    if (len >= sizeof bt->name)
        return err_fail(b->err, QVL_ERR_INTERNAL, "tensor name '%s' is longer than %zu bytes", canonical,
                        sizeof bt->name - 1);
    memcpy(bt->name, canonical, len + 1);
    bt->dtype = t->dtype;
    bt->ndim = ndim;
    memcpy(bt->shape, shape, (size_t)ndim * sizeof *shape);
    bt->file = b->ck->files[t->file];
    bt->src = t->src;
    bt->data = NULL;
    bt->nbytes = t->nbytes;
    *out = t;
    return QVL_OK;
}

/* Read checkpoint tensor t's stored bytes into the binder's scratch (*out), which grows to the largest read. */
static qvl_status read_stored(binder *b, const ckpt_tensor *t, const unsigned char **out) {
    if (t->nbytes > b->scratch_cap) {
        void *grown = realloc(b->scratch, (size_t)t->nbytes);
        if (!grown)
            return err_fail(b->err, QVL_ERR_NOMEM, "cannot allocate %llu bytes to read '%s'",
                            (unsigned long long)t->nbytes, t->name);
        b->scratch = grown;
        b->scratch_cap = (size_t)t->nbytes;
    }
    TRY(st_read(b->ck->files[t->file], t->src, 0, (size_t)t->nbytes, b->scratch, b->err));
    *out = b->scratch;
    return QVL_OK;
}

static qvl_status bind_mat(binder *b, const char *canonical, int rows, int cols, wmat *w) {
    const ckpt_tensor *t = NULL;
    int64_t shape[2] = {rows, cols};
    TRY(lookup(b, canonical, 2, shape, &t));
    w->data = NULL;
    w->bound = b->m->n_bound - 1;
    w->rows = rows;
    w->cols = cols;
    w->dtype = t->dtype;
    return QVL_OK;
}

static qvl_status bind_vec(binder *b, const char *canonical, int n, const float **out) {
    const ckpt_tensor *t = NULL;
    int64_t shape[1] = {n};
    TRY(lookup(b, canonical, 1, shape, &t));
    if (b->small_used + (size_t)n > b->small_cap)
        return err_fail(b->err, QVL_ERR_INTERNAL, "vector storage undersized at '%s'", canonical);
    const unsigned char *src = NULL;
    TRY(read_stored(b, t, &src));
    float *dst = b->m->small + b->small_used;
    op_to_f32(src, t->dtype, dst, (size_t)n);
    b->small_used += (size_t)n;
    *out = dst;
    return QVL_OK;
}

static qvl_status bind_linear(binder *b, const char *base, int out, int in, linear *l) {
    char name[160];
    snprintf(name, sizeof name, "%s.weight", base);
    TRY(bind_mat(b, name, out, in, &l->w));
    snprintf(name, sizeof name, "%s.bias", base);
    return bind_vec(b, name, out, &l->b);
}

static qvl_status bind_norm(binder *b, const char *base, int dim, layernorm *n) {
    char name[160];
    n->dim = dim;
    snprintf(name, sizeof name, "%s.weight", base);
    TRY(bind_vec(b, name, dim, &n->w));
    snprintf(name, sizeof name, "%s.bias", base);
    return bind_vec(b, name, dim, &n->b);
}

static qvl_status bind_merger(binder *b, const char *base, int norm_dim, merger_w *mw) {
    const tower_config *c = &b->m->cfg;
    char name[120];
    int h4 = c->hidden * c->merge * c->merge; /* one merged token: merge² patch tokens side by side */
    snprintf(name, sizeof name, "%s.norm", base);
    TRY(bind_norm(b, name, norm_dim, &mw->norm));
    snprintf(name, sizeof name, "%s.linear_fc1", base);
    TRY(bind_linear(b, name, h4, h4, &mw->fc1));
    snprintf(name, sizeof name, "%s.linear_fc2", base);
    return bind_linear(b, name, c->out_hidden, h4, &mw->fc2);
}

/* The patch embedding: a 5-D Conv3d weight (HF shape), exposed as [H, row_len] in (c, t, y, x) order. */
static qvl_status bind_patch(binder *b) {
    qvl_model *m = b->m;
    const tower_config *c = &m->cfg;
    int64_t hf[5] = {c->hidden, c->in_channels, c->temporal_patch, c->patch, c->patch};
    const ckpt_tensor *found = NULL;
    TRY(lookup(b, "patch_embed.proj.weight", 5, hf, &found));
    m->patch.w.dtype = found->dtype;
    m->patch.w.data = NULL;
    m->patch.w.bound = m->n_bound - 1;
    int is_mlx = found->layout == CKPT_LAYOUT_MLX_CONV;
    if (is_mlx) {
        size_t es = st_dtype_size(found->stored_dtype);
        const unsigned char *src = NULL;
        TRY(read_stored(b, found, &src));
        unsigned char *dst = malloc((size_t)found->nbytes);
        if (!dst)
            return err_fail(b->err, QVL_ERR_NOMEM, "cannot allocate %llu bytes for the patch weight",
                            (unsigned long long)found->nbytes);
        int C = c->in_channels, T = c->temporal_patch, P = c->patch;
        for (int o = 0; o < c->hidden; o++)
            for (int ci = 0; ci < C; ci++)
                for (int ti = 0; ti < T; ti++)
                    for (int y = 0; y < P; y++)
                        for (int x = 0; x < P; x++) {
                            size_t di = ((((size_t)o * C + ci) * T + ti) * P + y) * P + x;
                            size_t si = ((((size_t)o * T + ti) * P + y) * P + x) * C + ci;
                            memcpy(dst + di * es, src + si * es, es);
                        }
        m->owned_patch = dst;
        m->bound[m->n_bound - 1].data = dst; /* the fingerprint sees HF layout whatever was stored */
    }
    m->patch.w.rows = c->hidden;
    m->patch.w.cols = c->row_len;
    m->info.conv_layout_mlx = is_mlx;
    return bind_vec(b, "patch_embed.proj.bias", c->hidden, &m->patch.b);
}

/* Bind every tensor the configuration calls for, in canonical order. */
static qvl_status bind_all(binder *b) {
    qvl_model *m = b->m;
    const tower_config *c = &m->cfg;
    char base[96];
    TRY(bind_patch(b));
    TRY(bind_mat(b, "pos_embed.weight", c->num_pos, c->hidden, &m->pos));
    for (int i = 0; i < c->depth; i++) {
        block_w *bw = &m->blocks[i];
        snprintf(base, sizeof base, "blocks.%d.norm1", i);
        TRY(bind_norm(b, base, c->hidden, &bw->norm1));
        snprintf(base, sizeof base, "blocks.%d.attn.qkv", i);
        TRY(bind_linear(b, base, 3 * c->hidden, c->hidden, &bw->qkv));
        snprintf(base, sizeof base, "blocks.%d.attn.proj", i);
        TRY(bind_linear(b, base, c->hidden, c->hidden, &bw->proj));
        snprintf(base, sizeof base, "blocks.%d.norm2", i);
        TRY(bind_norm(b, base, c->hidden, &bw->norm2));
        snprintf(base, sizeof base, "blocks.%d.mlp.linear_fc1", i);
        TRY(bind_linear(b, base, c->intermediate, c->hidden, &bw->fc1));
        snprintf(base, sizeof base, "blocks.%d.mlp.linear_fc2", i);
        TRY(bind_linear(b, base, c->hidden, c->intermediate, &bw->fc2));
    }
    TRY(bind_merger(b, "merger", c->hidden, &m->merger));
    for (int k = 0; k < c->n_deepstack; k++) {
        snprintf(base, sizeof base, "deepstack_merger_list.%d", k);
        TRY(bind_merger(b, base, c->hidden * c->merge * c->merge, &m->deepstack[k]));
    }
    return QVL_OK;
}

qvl_status model_bind(qvl_model *m, const checkpoint *ck, qvl_error *err) {
    const tower_config *c = &m->cfg;
    m->info.source = ck->source;
    snprintf(m->info.prefix, sizeof m->info.prefix, "%s", ck->prefix);
    size_t h = (size_t)c->hidden, h4 = h * (size_t)c->merge * (size_t)c->merge, o = (size_t)c->out_hidden;
    size_t per_block = 4 * h + 3 * h + h + (size_t)c->intermediate + h;
    size_t n_tensors = (size_t)c->depth * 12 + 9 + 6 * (size_t)c->n_deepstack;
    binder b = {.m = m, .ck = ck, .err = err};
    b.small_cap = h + (size_t)c->depth * per_block + (2 * h + h4 + o) + (size_t)c->n_deepstack * (2 * h4 + h4 + o);
    m->small = malloc(b.small_cap * sizeof(float));
    m->bound = calloc(n_tensors, sizeof *m->bound);
    m->blocks = calloc((size_t)c->depth, sizeof *m->blocks);
    if (!m->small || !m->bound || !m->blocks) return err_fail(err, QVL_ERR_NOMEM, "out of memory binding weights");
    qvl_status s = bind_all(&b);
    m->n_small = b.small_used;
    free(b.scratch);
    if (s != QVL_OK) return s;
    if (m->n_bound != n_tensors)
        return err_fail(err, QVL_ERR_INTERNAL, "bound %zu tensors, expected %zu", m->n_bound, n_tensors);
    return QVL_OK;
}
