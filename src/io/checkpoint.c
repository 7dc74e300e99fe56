/* checkpoint.c — find a tower's weights on disk and list its tensors (see checkpoint.h). Nothing here depends on
 * the model: the table says what is stored and where, and checkpoint_get checks what the reader asks for. */
#include "io/checkpoint.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "io/fileutil.h"
#include "io/jsonutil.h"

static const char *const k_prefixes[] = {"model.visual.", "vision_tower.", "model.language_model.visual.", "visual.",
                                         NULL};
static const char *const k_tower_roots[] = {"patch_embed.", "pos_embed.", "blocks.", "merger.",
                                            "deepstack_merger_list.", NULL};

static int is_tower_name(const char *rest) {
    for (const char *const *r = k_tower_roots; *r; r++)
        if (strncmp(rest, *r, strlen(*r)) == 0) return 1;
    return 0;
}

static qvl_status open_file(checkpoint *ck, const char *path, qvl_error *err) {
    st_file **grown = realloc(ck->files, (size_t)(ck->n_files + 1) * sizeof *grown);
    if (!grown) return err_fail(err, QVL_ERR_NOMEM, "out of memory opening %s", path);
    ck->files = grown;
    TRY(st_open(path, &ck->files[ck->n_files], err));
    ck->n_files++;
    return QVL_OK;
}

/* First opened file holding the stored name `name`. */
static const st_tensor *find_any(const checkpoint *ck, const char *name) {
    for (int i = 0; i < ck->n_files; i++) {
        const st_tensor *t = st_find(ck->files[i], name);
        if (t) return t;
    }
    return NULL;
}

static void files_searched(const checkpoint *ck, char *buf, size_t n) {
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < ck->n_files && used + 1 < n; i++) {
        int k = snprintf(buf + used, n - used, "%s%s", i ? ", " : "", ck->files[i]->path);
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

static int as_qvl_dtype(st_dtype d, qvl_dtype *dt) {
    switch (d) {
    case ST_F32: *dt = QVL_DTYPE_F32; return 1;
    case ST_F16: *dt = QVL_DTYPE_F16; return 1;
    case ST_BF16: *dt = QVL_DTYPE_BF16; return 1;
    default: return 0;
    }
}

/* MLX (out, kT, kH, kW, in) <-> HF (out, in, kT, kH, kW). */
static void mlx_to_hf(const int64_t *mlx, int64_t *hf) {
    hf[0] = mlx[0], hf[1] = mlx[4], hf[2] = mlx[1], hf[3] = mlx[2], hf[4] = mlx[3];
}
static void hf_to_mlx(const int64_t *hf, int64_t *mlx) {
    mlx[0] = hf[0], mlx[1] = hf[2], mlx[2] = hf[3], mlx[3] = hf[4], mlx[4] = hf[1];
}

static int entry_cmp(const void *a, const void *b) {
    const ckpt_tensor *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : (x->file > y->file) - (x->file < y->file);
}

/* Every tower tensor under the prefix, sorted by canonical name, the first file's where a name repeats. The
 * patch-embed weight is MLX order when its last axis is the channel axis; the two orders cannot be told apart
 * when in_channels == patch, and are then taken as HF. */
static qvl_status build_table(checkpoint *ck, const tower_config *cfg, qvl_error *err) {
    size_t plen = strlen(ck->prefix), n = 0, cap = 0;
    for (int i = 0; i < ck->n_files; i++)
        if (size_add_overflow(cap, ck->files[i]->n_tensors, &cap))
            return err_fail(err, QVL_ERR_LIMIT, "tensor count overflows");
    ck->tensors = calloc(cap ? cap : 1, sizeof *ck->tensors);
    if (!ck->tensors) return err_fail(err, QVL_ERR_NOMEM, "out of memory listing %zu tensors", cap);
    for (int i = 0; i < ck->n_files; i++) {
        const st_file *f = ck->files[i];
        for (size_t j = 0; j < f->n_tensors; j++) {
            const st_tensor *t = &f->tensors[j];
            if (strncmp(t->name, ck->prefix, plen) != 0 || !is_tower_name(t->name + plen)) continue;
            ckpt_tensor *e = &ck->tensors[n++];
            e->name = t->name + plen;
            e->stored_dtype = t->dtype;
            e->supported = as_qvl_dtype(t->dtype, &e->dtype);
            e->ndim = t->ndim;
            memcpy(e->stored_shape, t->shape, sizeof e->stored_shape);
            memcpy(e->shape, t->shape, sizeof e->shape);
            e->layout = CKPT_LAYOUT_STORED;
            if (strcmp(e->name, "patch_embed.proj.weight") == 0 && t->ndim == 5 &&
                t->shape[4] == cfg->in_channels && cfg->in_channels != cfg->patch) {
                e->layout = CKPT_LAYOUT_MLX_CONV;
                mlx_to_hf(t->shape, e->shape);
            }
            e->src = t;
            e->nbytes = t->nbytes;
            e->file = i;
        }
    }
    qsort(ck->tensors, n, sizeof *ck->tensors, entry_cmp);
    size_t kept = 0;
    for (size_t j = 0; j < n; j++)
        if (kept == 0 || strcmp(ck->tensors[kept - 1].name, ck->tensors[j].name) != 0)
            ck->tensors[kept++] = ck->tensors[j];
    ck->n_tensors = kept;
    return QVL_OK;
}

const ckpt_tensor *checkpoint_find(const checkpoint *ck, const char *name) {
    size_t lo = 0, hi = ck->n_tensors;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(ck->tensors[mid].name, name);
        if (c == 0) return &ck->tensors[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

qvl_status checkpoint_get(const checkpoint *ck, const char *name, int ndim, const int64_t *shape,
                          const ckpt_tensor **out, qvl_error *err) {
    char full[256], want[96], got[96], files[512];
    snprintf(full, sizeof full, "%s%s", ck->prefix, name);
    *out = NULL;
    if (ndim < 1 || ndim > ST_MAX_DIMS)
        return err_fail(err, QVL_ERR_INTERNAL, "checkpoint_get '%s': ndim %d outside 1..%d", full, ndim, ST_MAX_DIMS);
    const ckpt_tensor *t = checkpoint_find(ck, name);
    if (!t) {
        shape_str(shape, ndim, want, sizeof want);
        files_searched(ck, files, sizeof files);
        return err_fail(err, QVL_ERR_SHAPE, "missing tensor '%s' (expected shape %s) in %s", full, want, files);
    }
    int same = t->ndim == ndim;
    for (int i = 0; same && i < ndim; i++) same = t->shape[i] == shape[i];
    if (!same) {
        int64_t stored[ST_MAX_DIMS];
        if (t->layout == CKPT_LAYOUT_MLX_CONV && ndim == 5) hf_to_mlx(shape, stored);
        else memcpy(stored, shape, (size_t)ndim * sizeof *shape);
        shape_str(stored, ndim, want, sizeof want);
        shape_str(t->stored_shape, t->ndim, got, sizeof got);
        return err_fail(err, QVL_ERR_SHAPE, "tensor '%s' in %s has shape %s, expected %s", full,
                        ck->files[t->file]->path, got, want);
    }
    if (!t->supported)
        return err_fail(err, QVL_ERR_UNSUPPORTED, "tensor '%s' has dtype %s; the tower needs F32, F16 or BF16", full,
                        st_dtype_name(t->stored_dtype));
    *out = t;
    return QVL_OK;
}

/* Prefix under which `patch_embed.proj.weight` exists in the opened files. */
static const char *detect_prefix(const checkpoint *ck) {
    char full[256];
    for (const char *const *p = k_prefixes; *p; p++) {
        snprintf(full, sizeof full, "%spatch_embed.proj.weight", *p);
        if (find_any(ck, full)) return *p;
    }
    return NULL;
}

static int name_cmp(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* Map the shards of a model.safetensors.index.json that hold tower tensors. */
static qvl_status open_sharded(checkpoint *ck, const char *dir, const char *index, qvl_error *err) {
    char *text = NULL;
    size_t len = 0;
    TRY(fu_read_file(index, 64u << 20, &text, &len, err));
    cJSON *root;
    qvl_status ps = json_parse_object(text, len, index, &root, err);
    free(text);
    if (ps != QVL_OK) return ps;
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
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
        if (s == QVL_OK) s = open_file(ck, path, err);
    }
done:
    free(shards);
    cJSON_Delete(root);
    return s;
}

static qvl_status open_all(const char *dir, const tower_config *cfg, checkpoint *ck, qvl_error *err) {
    char path[4096];
    TRY(fu_join(path, sizeof path, dir, "optiq/optiq_vision.safetensors", err));
    /* fu_exists, not fu_is_file: a FIFO or directory by one of these names is reported as what it is */
    if (fu_exists(path)) {
        ck->source = QVL_SOURCE_SIDECAR;
        TRY(open_file(ck, path, err));
    } else {
        TRY(fu_join(path, sizeof path, dir, "model.safetensors.index.json", err));
        if (fu_exists(path)) {
            ck->source = QVL_SOURCE_SHARDED;
            TRY(open_sharded(ck, dir, path, err));
        } else {
            TRY(fu_join(path, sizeof path, dir, "model.safetensors", err));
            if (!fu_exists(path))
                return err_fail(err, QVL_ERR_IO, "no weights in %s (looked for optiq/optiq_vision.safetensors, "
                                "model.safetensors.index.json, model.safetensors)", dir);
            ck->source = QVL_SOURCE_SINGLE;
            TRY(open_file(ck, path, err));
        }
    }
    const char *prefix = detect_prefix(ck);
    if (!prefix) {
        char files[512];
        files_searched(ck, files, sizeof files);
        return err_fail(err, QVL_ERR_SHAPE, "no vision tower in %s: no patch_embed.proj.weight under any of "
                        "model.visual., vision_tower., model.language_model.visual., visual.", files);
    }
    snprintf(ck->prefix, sizeof ck->prefix, "%s", prefix);
    TRY(build_table(ck, cfg, err));

    /* A quantized tower ships .scales/.biases companions: out of scope, and silently wrong if bound as bf16. */
    if (checkpoint_find(ck, "blocks.0.attn.qkv.scales"))
        return err_fail(err, QVL_ERR_UNSUPPORTED, "quantized vision tower ('%sblocks.0.attn.qkv.scales' present): "
                        "only F32/F16/BF16 towers are supported", ck->prefix);
    return QVL_OK;
}

qvl_status checkpoint_open(const char *dir, const tower_config *cfg, checkpoint *ck, qvl_error *err) {
    memset(ck, 0, sizeof *ck);
    qvl_status s = open_all(dir, cfg, ck, err);
    if (s != QVL_OK) checkpoint_close(ck);
    return s;
}

void checkpoint_take_files(checkpoint *ck, st_file ***files, int *n_files) {
    *files = ck->files;
    *n_files = ck->n_files;
    ck->files = NULL;
    ck->n_files = 0;
}

void checkpoint_close(checkpoint *ck) {
    if (!ck) return;
    for (int i = 0; i < ck->n_files; i++) st_close(ck->files[i]);
    free(ck->files);
    free(ck->tensors);
    memset(ck, 0, sizeof *ck);
}
