/* checkpoint.c — find a tower's weights on disk and bind every tensor the configuration calls for.
 *
 * Sources, first match wins: the OptiQ sidecar optiq/optiq_vision.safetensors (the only source when present);
 * a sharded model.safetensors.index.json (only the shards holding tower tensors are mapped); a single
 * model.safetensors. Name prefixes: model.visual., vision_tower., model.language_model.visual., visual.
 * The patch-embed Conv3d weight may be HF (out, in, kT, kH, kW) or MLX (out, kT, kH, kW, in); MLX is detected by
 * its last axis and permuted once into an owned buffer in the HF column order (c, t, y, x). */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "cpu/ops.h"
#include "io/fileutil.h"
#include "model/model.h"

static const char *const k_prefixes[] = {"model.visual.", "vision_tower.", "model.language_model.visual.", "visual.",
                                         NULL};
static const char *const k_tower_roots[] = {"patch_embed.", "pos_embed.", "blocks.", "merger.",
                                            "deepstack_merger_list.", NULL};

typedef struct binder {
    qvl_model *m;
    const char *dir;
    const char *prefix;
    size_t small_cap, small_used;
    qvl_error *err;
} binder;

static int is_tower_name(const char *rest) {
    for (const char *const *r = k_tower_roots; *r; r++)
        if (strncmp(rest, *r, strlen(*r)) == 0) return 1;
    return 0;
}

static qvl_status open_file(qvl_model *m, const char *path, qvl_error *err) {
    st_file **grown = realloc(m->files, (size_t)(m->n_files + 1) * sizeof *grown);
    if (!grown) return err_fail(err, QVL_ERR_NOMEM, "out of memory opening %s", path);
    m->files = grown;
    TRY(st_open(path, &m->files[m->n_files], err));
    m->n_files++;
    return QVL_OK;
}

/* First file holding `name` (its index in *file when not NULL). */
static const st_tensor *find_in(const qvl_model *m, const char *name, int *file) {
    for (int i = 0; i < m->n_files; i++) {
        const st_tensor *t = st_find(m->files[i], name);
        if (t) {
            if (file) *file = i;
            return t;
        }
    }
    return NULL;
}

static const st_tensor *find_any(const qvl_model *m, const char *name) { return find_in(m, name, NULL); }

static void files_searched(const qvl_model *m, char *buf, size_t n) {
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < m->n_files && used + 1 < n; i++) {
        int k = snprintf(buf + used, n - used, "%s%s", i ? ", " : "", m->files[i]->path);
        if (k < 0) break;
        used += (size_t)k;
    }
}

static void shape_str(const int64_t *shape, int ndim, char *buf, size_t n) {
    size_t used = 0;
    used += (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < ndim && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (used < n) snprintf(buf + used, n - used, "]");
}

static qvl_status as_qvl_dtype(const st_tensor *t, qvl_dtype *dt, qvl_error *err) {
    switch (t->dtype) {
    case ST_F32: *dt = QVL_DTYPE_F32; return QVL_OK;
    case ST_F16: *dt = QVL_DTYPE_F16; return QVL_OK;
    case ST_BF16: *dt = QVL_DTYPE_BF16; return QVL_OK;
    default:
        return err_fail(err, QVL_ERR_UNSUPPORTED, "tensor '%s' has dtype %s; the tower needs F32, F16 or BF16",
                        t->name, st_dtype_name(t->dtype));
    }
}

/* Look up `canonical` under the prefix, check it has `shape`, record it for the fingerprint under its canonical
 * shape `canon` (NULL: the same). */
static qvl_status lookup2(binder *b, const char *canonical, int ndim, const int64_t *shape, const int64_t *canon,
                          const st_tensor **out) {
    char full[256], want[96], got[96], files[512];
    snprintf(full, sizeof full, "%s%s", b->prefix, canonical);
    int file = 0;
    const st_tensor *t = find_in(b->m, full, &file);
    shape_str(shape, ndim, want, sizeof want);
    if (!t) {
        files_searched(b->m, files, sizeof files);
        return err_fail(b->err, QVL_ERR_SHAPE, "missing tensor '%s' (expected shape %s) in %s", full, want, files);
    }
    int same = t->ndim == ndim;
    for (int i = 0; same && i < ndim; i++) same = t->shape[i] == shape[i];
    if (!same) {
        shape_str(t->shape, t->ndim, got, sizeof got);
        return err_fail(b->err, QVL_ERR_SHAPE, "tensor '%s' in %s has shape %s, expected %s", full,
                        b->m->files[file]->path, got, want);
    }
    qvl_dtype dt = QVL_DTYPE_F32;
    TRY(as_qvl_dtype(t, &dt, b->err));
    bound_tensor *bt = &b->m->bound[b->m->n_bound++];
    snprintf(bt->name, sizeof bt->name, "%s", canonical);
    bt->dtype = dt;
    bt->ndim = ndim;
    memcpy(bt->shape, canon ? canon : shape, (size_t)ndim * sizeof *shape);
    bt->data = t->data;
    bt->nbytes = t->nbytes;
    *out = t;
    return QVL_OK;
}

static qvl_status lookup(binder *b, const char *canonical, int ndim, const int64_t *shape, const st_tensor **out) {
    return lookup2(b, canonical, ndim, shape, NULL, out);
}

static qvl_status bind_mat(binder *b, const char *canonical, int rows, int cols, wmat *w) {
    const st_tensor *t;
    int64_t shape[2] = {rows, cols};
    TRY(lookup(b, canonical, 2, shape, &t));
    w->data = t->data;
    w->rows = rows;
    w->cols = cols;
    return as_qvl_dtype(t, &w->dtype, b->err);
}

static qvl_status bind_vec(binder *b, const char *canonical, int n, const float **out) {
    const st_tensor *t;
    int64_t shape[1] = {n};
    TRY(lookup(b, canonical, 1, shape, &t));
    if (b->small_used + (size_t)n > b->small_cap)
        return err_fail(b->err, QVL_ERR_INTERNAL, "vector storage undersized at '%s'", canonical);
    float *dst = b->m->small + b->small_used;
    qvl_dtype dt = QVL_DTYPE_F32;
    TRY(as_qvl_dtype(t, &dt, b->err));
    op_to_f32(t->data, dt, dst, (size_t)n);
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

/* The patch embedding: a 5-D Conv3d weight in HF or MLX layout, exposed as [H, row_len] in (c, t, y, x) order. */
static qvl_status bind_patch(binder *b) {
    qvl_model *m = b->m;
    const tower_config *c = &m->cfg;
    char full[256];
    snprintf(full, sizeof full, "%spatch_embed.proj.weight", b->prefix);
    const st_tensor *t = find_any(m, full);
    int64_t hf[5] = {c->hidden, c->in_channels, c->temporal_patch, c->patch, c->patch};
    int64_t mlx[5] = {c->hidden, c->temporal_patch, c->patch, c->patch, c->in_channels};
    /* MLX layout ends in the channel axis; the two shapes cannot collide unless in_channels == patch. */
    int is_mlx = t && t->ndim == 5 && t->shape[4] == c->in_channels && c->in_channels != c->patch;
    const st_tensor *found;
    TRY(lookup2(b, "patch_embed.proj.weight", 5, is_mlx ? mlx : hf, hf, &found));
    TRY(as_qvl_dtype(found, &m->patch.w.dtype, b->err));
    m->patch.w.data = found->data;
    if (is_mlx) {
        size_t es = st_dtype_size(found->dtype);
        unsigned char *dst = malloc((size_t)found->nbytes);
        if (!dst)
            return err_fail(b->err, QVL_ERR_NOMEM, "cannot allocate %llu bytes for the patch weight",
                            (unsigned long long)found->nbytes);
        const unsigned char *src = found->data;
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
        m->patch.w.data = dst;
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

/* Prefix under which `patch_embed.proj.weight` exists in the opened files. */
static const char *detect_prefix(const qvl_model *m) {
    char full[256];
    for (const char *const *p = k_prefixes; *p; p++) {
        snprintf(full, sizeof full, "%spatch_embed.proj.weight", *p);
        if (find_any(m, full)) return *p;
    }
    return NULL;
}

static int name_cmp(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* Map the shards of a model.safetensors.index.json that hold tower tensors. */
static qvl_status open_sharded(qvl_model *m, const char *dir, const char *index, qvl_error *err) {
    char *text = NULL;
    size_t len = 0;
    TRY(fu_read_file(index, 64u << 20, &text, &len, err));
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    const cJSON *wm = root ? cJSON_GetObjectItemCaseSensitive(root, "weight_map") : NULL;
    if (!cJSON_IsObject(wm)) {
        cJSON_Delete(root);
        return err_fail(err, QVL_ERR_FORMAT, "%s: no weight_map object", index);
    }
    qvl_status s = QVL_OK;
    const char *prefix = NULL;
    char full[256];
    for (const char *const *p = k_prefixes; *p && !prefix; p++) {
        snprintf(full, sizeof full, "%spatch_embed.proj.weight", *p);
        if (cJSON_GetObjectItemCaseSensitive(wm, full)) prefix = *p;
    }
    const char **shards = NULL;
    size_t n_shards = 0;
    if (!prefix) {
        s = err_fail(err, QVL_ERR_SHAPE, "no vision tower tensors in %s (no patch_embed.proj.weight under %s)",
                     index, "model.visual., vision_tower., model.language_model.visual., visual.");
        goto done;
    }
    size_t plen = strlen(prefix);
    const cJSON *e;
    cJSON_ArrayForEach(e, wm) {
        if (strncmp(e->string, prefix, plen) != 0 || !is_tower_name(e->string + plen)) continue;
        if (!cJSON_IsString(e) || strchr(e->valuestring, '/') || strstr(e->valuestring, "..") ||
            !e->valuestring[0]) {
            s = err_fail(err, QVL_ERR_FORMAT, "%s: weight_map entry for '%s' is not a plain file name", index,
                         e->string);
            goto done;
        }
        size_t j = 0;
        while (j < n_shards && strcmp(shards[j], e->valuestring) != 0) j++;
        if (j < n_shards) continue;
        const char **grown = realloc(shards, (n_shards + 1) * sizeof *grown);
        if (!grown) {
            s = err_fail(err, QVL_ERR_NOMEM, "out of memory reading %s", index);
            goto done;
        }
        shards = grown;
        shards[n_shards++] = e->valuestring;
    }
    qsort(shards, n_shards, sizeof *shards, name_cmp);
    for (size_t j = 0; j < n_shards && s == QVL_OK; j++) {
        char path[4096];
        s = fu_join(path, sizeof path, dir, shards[j], err);
        if (s == QVL_OK) s = open_file(m, path, err);
    }
done:
    free(shards);
    cJSON_Delete(root);
    return s;
}

qvl_status checkpoint_bind(qvl_model *m, const char *dir, qvl_error *err) {
    char path[4096];
    TRY(fu_join(path, sizeof path, dir, "optiq/optiq_vision.safetensors", err));
    if (fu_is_file(path)) {
        m->info.source = QVL_SOURCE_SIDECAR;
        TRY(open_file(m, path, err));
    } else {
        TRY(fu_join(path, sizeof path, dir, "model.safetensors.index.json", err));
        if (fu_is_file(path)) {
            m->info.source = QVL_SOURCE_SHARDED;
            TRY(open_sharded(m, dir, path, err));
        } else {
            TRY(fu_join(path, sizeof path, dir, "model.safetensors", err));
            if (!fu_is_file(path))
                return err_fail(err, QVL_ERR_IO, "no weights in %s (looked for optiq/optiq_vision.safetensors, "
                                "model.safetensors.index.json, model.safetensors)", dir);
            m->info.source = QVL_SOURCE_SINGLE;
            TRY(open_file(m, path, err));
        }
    }
    const char *prefix = detect_prefix(m);
    if (!prefix) {
        char files[512];
        files_searched(m, files, sizeof files);
        return err_fail(err, QVL_ERR_SHAPE, "no vision tower in %s: no patch_embed.proj.weight under any of "
                        "model.visual., vision_tower., model.language_model.visual., visual.", files);
    }
    snprintf(m->info.prefix, sizeof m->info.prefix, "%s", prefix);

    /* A quantized tower ships .scales/.biases companions: out of scope, and silently wrong if bound as bf16. */
    char qname[256];
    snprintf(qname, sizeof qname, "%sblocks.0.attn.qkv.scales", prefix);
    if (find_any(m, qname))
        return err_fail(err, QVL_ERR_UNSUPPORTED, "quantized vision tower ('%s' present): only F32/F16/BF16 towers "
                        "are supported", qname);

    const tower_config *c = &m->cfg;
    size_t h = (size_t)c->hidden, h4 = h * (size_t)c->merge * (size_t)c->merge, o = (size_t)c->out_hidden;
    size_t per_block = 4 * h + 3 * h + h + (size_t)c->intermediate + h;
    size_t n_tensors = (size_t)c->depth * 12 + 9 + 6 * (size_t)c->n_deepstack;
    binder b = {.m = m, .dir = dir, .prefix = prefix, .err = err};
    b.small_cap = h + (size_t)c->depth * per_block + (2 * h + h4 + o) + (size_t)c->n_deepstack * (2 * h4 + h4 + o);
    m->small = malloc(b.small_cap * sizeof(float));
    m->bound = calloc(n_tensors, sizeof *m->bound);
    m->blocks = calloc((size_t)c->depth, sizeof *m->blocks);
    if (!m->small || !m->bound || !m->blocks) return err_fail(err, QVL_ERR_NOMEM, "out of memory binding weights");
    TRY(bind_all(&b));
    if (m->n_bound != n_tensors)
        return err_fail(err, QVL_ERR_INTERNAL, "bound %zu tensors, expected %zu", m->n_bound, n_tensors);
    return QVL_OK;
}
