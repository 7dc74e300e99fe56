/* synth.c — deterministic synthetic checkpoints: the tower tensors of a preset (optionally shallower or with other
 * DeepStack taps) with pseudo-random values, written in any of the on-disk layouts the loader accepts, plus
 * config.json and preprocessor_config.json.
 *
 * Values depend on (seed, canonical tensor name, element index) only, so every layout, dtype and sharding of the
 * same params holds the same float32 numbers before dtype rounding. Each tensor is cut into chunks of CHUNK
 * elements with an independent xoshiro256** stream per chunk, so generation is threaded and still independent of the
 * thread count. A sample is an Irwin–Hall sum of four 16-bit uniforms, scaled to N(0, 0.02)-like spread with integer
 * and correctly rounded double arithmetic only: bit-reproducible with no libm. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/params.h"
#include "core/pool.h"
#include "cpu/ops.h"
#include "io/fileutil.h"
#include "io/safetensors.h"

#define SYNTH_MAX_DEPTH 64
#define NAME_MAX_LEN 128
#define CHUNK ((size_t)1 << 16)

/* ---------------------------------------------------------------------------------------------------------------
 * Presets
 * ------------------------------------------------------------------------------------------------------------- */

typedef struct preset {
    const char *name, *model_type;
    int depth, hidden, heads, intermediate, out_hidden, num_pos;
    int n_deepstack, deepstack[3];
} preset;

static const preset presets[] = {
    {"tiny", "qwen3_vl", 4, 64, 4, 128, 96, 256, 2, {1, 3, 0}},
    {"tiny-3.5", "qwen3_5", 4, 64, 4, 128, 96, 256, 0, {0, 0, 0}},
    {"qwen3-vl-2b", "qwen3_vl", 24, 1024, 16, 4096, 2048, 2304, 3, {5, 11, 17}},
    {"qwen3-vl-4b", "qwen3_vl", 24, 1024, 16, 4096, 2560, 2304, 3, {5, 11, 17}},
    {"qwen3-vl-8b", "qwen3_vl", 27, 1152, 16, 4304, 4096, 2304, 3, {8, 16, 24}},
    {"qwen3-vl-32b", "qwen3_vl", 27, 1152, 16, 4304, 5120, 2304, 3, {8, 16, 24}},
    {"qwen3-vl-30b-a3b", "qwen3_vl_moe", 27, 1152, 16, 4304, 2048, 2304, 3, {8, 16, 24}},
    {"qwen3.5-27b", "qwen3_5", 27, 1152, 16, 4304, 5120, 2304, 0, {0, 0, 0}},
};
#define N_PRESETS (sizeof presets / sizeof presets[0])

static const char *const preset_names[] = {"tiny",         "tiny-3.5",         "qwen3-vl-2b", "qwen3-vl-4b",
                                           "qwen3-vl-8b",  "qwen3-vl-32b",     "qwen3-vl-30b-a3b",
                                           "qwen3.5-27b",  NULL};

const char *const *qvl_synth_presets(void) { return preset_names; }

static void synth_defaults(qvl_synth_params *p);

void qvl_synth_params_init(qvl_synth_params *p, size_t struct_size) {
    qvl_synth_params d;
    synth_defaults(&d);
    params_init(p, struct_size, &d, sizeof d);
}

static void synth_defaults(qvl_synth_params *p) {
    memset(p, 0, sizeof *p);
    p->struct_size = sizeof *p;
    p->preset = "tiny";
    p->seed = 0;
    p->layout = QVL_LAYOUT_HF;
    p->dtype = QVL_DTYPE_BF16;
    p->depth = 0;
    p->n_deepstack = -1;
}

/* The tower actually written: a preset with the params' overrides applied. */
typedef struct tower {
    const preset *pr;
    int depth, n_deepstack, deepstack[QVL_MAX_DEEPSTACK];
} tower;

static qvl_status resolve(const qvl_synth_params *p, tower *tw, qvl_error *err) {
    const char *name = p->preset ? p->preset : "tiny";
    tw->pr = NULL;
    for (size_t i = 0; i < N_PRESETS; i++)
        if (strcmp(presets[i].name, name) == 0) tw->pr = &presets[i];
    if (!tw->pr)
        return err_fail(err, QVL_ERR_INVALID_ARG,
                        "qvl_synth_params.preset \"%.64s\" is not a preset (see qvl_synth_presets)", name);
    if ((unsigned)p->layout > QVL_LAYOUT_NESTED)
        return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_synth_params.layout is %d, not a qvl_synth_layout (0..%d)",
                        (int)p->layout, (int)QVL_LAYOUT_NESTED);
    if (p->dtype != QVL_DTYPE_F32 && p->dtype != QVL_DTYPE_F16 && p->dtype != QVL_DTYPE_BF16)
        return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_synth_params.dtype is %d, not F32, F16 or BF16",
                        (int)p->dtype);
    if (p->depth < 0 || p->depth > SYNTH_MAX_DEPTH)
        return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_synth_params.depth is %d, outside 0..%d", p->depth,
                        SYNTH_MAX_DEPTH);
    tw->depth = p->depth ? p->depth : tw->pr->depth;
    int has_ds = strcmp(tw->pr->model_type, "qwen3_5") != 0;
    if (p->n_deepstack < 0) {
        tw->n_deepstack = 0;
        for (int k = 0; k < tw->pr->n_deepstack; k++)
            if (tw->pr->deepstack[k] < tw->depth) tw->deepstack[tw->n_deepstack++] = tw->pr->deepstack[k];
        return QVL_OK;
    }
    if (p->n_deepstack > QVL_MAX_DEEPSTACK)
        return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_synth_params.n_deepstack is %d (want -1..%d)",
                        p->n_deepstack, QVL_MAX_DEEPSTACK);
    if (p->n_deepstack > 0 && !has_ds)
        return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_synth_params.n_deepstack is %d, but preset %s (%s) has no "
                        "DeepStack mergers", p->n_deepstack, tw->pr->name, tw->pr->model_type);
    tw->n_deepstack = p->n_deepstack;
    for (int k = 0; k < p->n_deepstack; k++) {
        int v = p->deepstack_index[k];
        if (v < 0 || v >= tw->depth)
            return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_synth_params.deepstack_index[%d] is %d, outside 0..%d",
                            k, v, tw->depth - 1);
        if (k && v <= p->deepstack_index[k - 1])
            return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_synth_params.deepstack_index[%d] is %d, not above "
                            "deepstack_index[%d] = %d (must be strictly increasing)", k, v, k - 1,
                            p->deepstack_index[k - 1]);
        tw->deepstack[k] = v;
    }
    return QVL_OK;
}

/* ---------------------------------------------------------------------------------------------------------------
 * Tensor specs and values
 * ------------------------------------------------------------------------------------------------------------- */

typedef enum init_kind { INIT_NORMAL, INIT_LN_WEIGHT } init_kind;

typedef struct tspec {
    char canon[NAME_MAX_LEN]; /* canonical name (seeds the values); the full name for fake text tensors */
    char name[NAME_MAX_LEN];  /* name as stored */
    int ndim;
    int64_t shape[5]; /* as stored */
    init_kind kind;
    int conv_mlx;     /* patch_embed.proj.weight stored (out, kT, kH, kW, in) */
    int shard;        /* 0-based file index in the sharded layout */
} tspec;

typedef struct tlist {
    tspec *v;
    size_t n, cap;
} tlist;

static tspec *tl_add(tlist *l, const char *prefix, const char *canon, init_kind kind, int ndim, const int64_t *shape) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        tspec *q = realloc(l->v, cap * sizeof *q);
        if (!q) return NULL;
        l->v = q;
        l->cap = cap;
    }
    tspec *t = &l->v[l->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->canon, sizeof t->canon, "%s", canon);
    snprintf(t->name, sizeof t->name, "%s%s", prefix, canon);
    t->ndim = ndim;
    memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
    t->kind = kind;
    return t;
}

/* Linear (weight [rows, cols] + bias [rows]) under `base`. */
/* base + suffix into c (NAME_MAX_LEN bytes); 0 if it does not fit (names here are far shorter). */
static int suffixed(char *c, const char *base, const char *suffix) {
    int k = snprintf(c, NAME_MAX_LEN, "%s%s", base, suffix);
    return k > 0 && k < NAME_MAX_LEN;
}

static int add_linear(tlist *l, const char *prefix, const char *base, int64_t rows, int64_t cols) {
    char c[NAME_MAX_LEN];
    if (!suffixed(c, base, ".weight") || !tl_add(l, prefix, c, INIT_NORMAL, 2, (int64_t[]){rows, cols})) return 0;
    return suffixed(c, base, ".bias") && tl_add(l, prefix, c, INIT_NORMAL, 1, (int64_t[]){rows}) != NULL;
}

static int add_norm(tlist *l, const char *prefix, const char *base, int64_t n) {
    char c[NAME_MAX_LEN];
    if (!suffixed(c, base, ".weight") || !tl_add(l, prefix, c, INIT_LN_WEIGHT, 1, (int64_t[]){n})) return 0;
    return suffixed(c, base, ".bias") && tl_add(l, prefix, c, INIT_NORMAL, 1, (int64_t[]){n}) != NULL;
}

/* The tower's tensors in canonical order (reference §3.1): depth·12 + 9 + 6·n_deepstack entries. */
static int build_tower(tlist *l, const tower *tw, const char *prefix, int conv_mlx) {
    const preset *p = tw->pr;
    int64_t H = p->hidden, I = p->intermediate, O = p->out_hidden, H4 = 4 * (int64_t)p->hidden;
    tspec *t = conv_mlx ? tl_add(l, prefix, "patch_embed.proj.weight", INIT_NORMAL, 5, (int64_t[]){H, 2, 16, 16, 3})
                        : tl_add(l, prefix, "patch_embed.proj.weight", INIT_NORMAL, 5, (int64_t[]){H, 3, 2, 16, 16});
    if (!t) return 0;
    t->conv_mlx = conv_mlx;
    if (!tl_add(l, prefix, "patch_embed.proj.bias", INIT_NORMAL, 1, (int64_t[]){H})) return 0;
    if (!tl_add(l, prefix, "pos_embed.weight", INIT_NORMAL, 2, (int64_t[]){p->num_pos, H})) return 0;
    char b[NAME_MAX_LEN];
    for (int i = 0; i < tw->depth; i++) {
        size_t first = l->n;
        snprintf(b, sizeof b, "blocks.%d.norm1", i);
        if (!add_norm(l, prefix, b, H)) return 0;
        snprintf(b, sizeof b, "blocks.%d.attn.qkv", i);
        if (!add_linear(l, prefix, b, 3 * H, H)) return 0;
        snprintf(b, sizeof b, "blocks.%d.attn.proj", i);
        if (!add_linear(l, prefix, b, H, H)) return 0;
        snprintf(b, sizeof b, "blocks.%d.norm2", i);
        if (!add_norm(l, prefix, b, H)) return 0;
        snprintf(b, sizeof b, "blocks.%d.mlp.linear_fc1", i);
        if (!add_linear(l, prefix, b, I, H)) return 0;
        snprintf(b, sizeof b, "blocks.%d.mlp.linear_fc2", i);
        if (!add_linear(l, prefix, b, H, I)) return 0;
        /* Sharded layout: the first half of the blocks (with the embeddings) in shard 1, the rest in shard 2. */
        for (size_t k = first; k < l->n; k++) l->v[k].shard = i < tw->depth / 2 ? 0 : 1;
    }
    size_t first = l->n;
    if (!add_norm(l, prefix, "merger.norm", H)) return 0;
    if (!add_linear(l, prefix, "merger.linear_fc1", H4, H4)) return 0;
    if (!add_linear(l, prefix, "merger.linear_fc2", O, H4)) return 0;
    for (int k = 0; k < tw->n_deepstack; k++) {
        snprintf(b, sizeof b, "deepstack_merger_list.%d.norm", k);
        if (!add_norm(l, prefix, b, H4)) return 0;
        snprintf(b, sizeof b, "deepstack_merger_list.%d.linear_fc1", k);
        if (!add_linear(l, prefix, b, H4, H4)) return 0;
        snprintf(b, sizeof b, "deepstack_merger_list.%d.linear_fc2", k);
        if (!add_linear(l, prefix, b, O, H4)) return 0;
    }
    for (size_t k = first; k < l->n; k++) l->v[k].shard = 1;
    return 1;
}

/* A small fake text tensor (the loader must skip these). */
static int add_text(tlist *l, const char *name, int64_t rows, int64_t cols, int shard) {
    tspec *t = cols ? tl_add(l, "", name, INIT_NORMAL, 2, (int64_t[]){rows, cols})
                    : tl_add(l, "", name, INIT_LN_WEIGHT, 1, (int64_t[]){rows});
    if (!t) return 0;
    t->shard = shard;
    return 1;
}

static inline uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static inline uint64_t xoshiro_next(uint64_t s[4]) {
    uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
}

static uint64_t tensor_seed(uint64_t seed, const char *canon) {
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (const unsigned char *c = (const unsigned char *)canon; *c; c++) h = (h ^ *c) * 0x100000001b3ull;
    uint64_t x = seed ^ h;
    splitmix64(&x);
    return splitmix64(&x);
}

/* Irwin–Hall(4) of 16-bit uniforms: mean 0, standard deviation 0.02 (up to the discrete-uniform correction). */
static inline float sample(uint64_t s[4], init_kind kind) {
    static const double scale = 0.034641016151377546 / 65536.0; /* 0.02·√3 / 2^16 */
    uint64_t r = xoshiro_next(s);
    int64_t k = (int64_t)(r & 0xffff) + (int64_t)((r >> 16) & 0xffff) + (int64_t)((r >> 32) & 0xffff) +
                (int64_t)(r >> 48) - 131070;
    double z = (double)k * scale;
    return kind == INIT_LN_WEIGHT ? (float)(1.0 + z) : (float)z;
}

typedef struct fill_ctx {
    const tspec *const *specs; /* the file's tensors, in write order */
    uint64_t seed;
    qvl_dtype dtype;
    thread_pool *pool;
} fill_ctx;

typedef struct chunk_job {
    const tspec *t;
    uint64_t ts;
    size_t n;
    qvl_dtype dt;
    void *buf;
} chunk_job;

/* Chunks [c0, c1) of one tensor: each chunk has its own generator state, so any split gives the same bytes. */
static void fill_chunks(void *ctx, long c0, long c1, int thread) {
    (void)thread;
    const chunk_job *jb = ctx;
    const tspec *t = jb->t;
    const qvl_dtype dt = jb->dt;
    const int mlx = t->conv_mlx;
    const size_t K = 3 * 2 * 16 * 16, n = jb->n;
    void *buf = jb->buf;
    for (size_t c = (size_t)c0; c < (size_t)c1; c++) {
        uint64_t sm = jb->ts ^ (c * 0xd1b54a32d192ed03ull), s[4];
        for (int k = 0; k < 4; k++) s[k] = splitmix64(&sm);
        size_t end = (c + 1) * CHUNK < n ? (c + 1) * CHUNK : n;
        for (size_t e = c * CHUNK; e < end; e++) {
            float v = sample(s, t->kind);
            size_t j = e; /* element index e in HF order; j where it is stored */
            if (mlx) {
                /* HF (o, c, t, y, x) → MLX (o, t, y, x, c) */
                size_t o = e / K, r = e % K, ch = r / 512, tt = (r / 256) % 2, yx = r % 256;
                j = o * K + ((tt * 256 + yx) * 3 + ch);
            }
            if (dt == QVL_DTYPE_F32) ((float *)buf)[j] = v;
            else if (dt == QVL_DTYPE_BF16) ((uint16_t *)buf)[j] = op_f32_to_bf16(v);
            else ((uint16_t *)buf)[j] = op_f32_to_f16(v);
        }
    }
}

/* st_fill_fn: generate tensor i of the file straight into the stored dtype (and layout, for the MLX conv). */
static qvl_status fill_tensor(void *user, size_t i, void *buf, size_t nbytes, qvl_error *err) {
    const fill_ctx *fc = user;
    const tspec *t = fc->specs[i];
    size_t es = fc->dtype == QVL_DTYPE_F32 ? 4 : 2;
    size_t n = nbytes / es;
    if (n * es != nbytes) return err_fail(err, QVL_ERR_INTERNAL, "synth: %s: byte size %zu", t->name, nbytes);
    chunk_job jb = {t, tensor_seed(fc->seed, t->canon), n, fc->dtype, buf};
    pool_for(fc->pool, (long)((n + CHUNK - 1) / CHUNK), 1, fill_chunks, &jb);
    return QVL_OK;
}

/* ---------------------------------------------------------------------------------------------------------------
 * Files
 * ------------------------------------------------------------------------------------------------------------- */

static st_dtype st_of(qvl_dtype d) { return d == QVL_DTYPE_F32 ? ST_F32 : d == QVL_DTYPE_F16 ? ST_F16 : ST_BF16; }

static qvl_status mkdir_p(const char *path, qvl_error *err) {
    char buf[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf)
        return err_fail(err, QVL_ERR_INVALID_ARG, "%.200s...: directory path of %zu bytes (want 1..%zu)", path, n,
                        sizeof buf - 1);
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != '\0') continue;
        char saved = buf[i];
        buf[i] = '\0';
        if (mkdir(buf, 0777) != 0 && errno != EEXIST)
            return err_fail(err, QVL_ERR_IO, "%s: cannot create directory: %s", buf, strerror(errno));
        buf[i] = saved;
    }
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return err_fail(err, QVL_ERR_IO, "%s: not a directory", path);
    return QVL_OK;
}

static qvl_status write_text(const char *dir, const char *name, const char *text, qvl_error *err) {
    char path[4096];
    TRY(fu_join(path, sizeof path, dir, name, err));
    fu_tmpfile t;
    TRY(fu_tmp_open(&t, path, err));
    fu_tmp_write(&t, text, strlen(text));
    return fu_tmp_finish(&t, QVL_OK, 0, err);
}

/* Write the tensors of `l` whose shard is `shard` (or all when shard < 0) to dir/name. */
static qvl_status write_weights(const tlist *l, int shard, const char *dir, const char *name, const char *format,
                                const qvl_synth_params *p, thread_pool *pool, qvl_error *err) {
    char path[4096];
    TRY(fu_join(path, sizeof path, dir, name, err));
    st_wtensor *w = calloc(l->n ? l->n : 1, sizeof *w);
    const tspec **specs = calloc(l->n ? l->n : 1, sizeof *specs);
    if (!w || !specs) {
        free(w);
        free(specs);
        return err_fail(err, QVL_ERR_NOMEM, "synth: out of memory");
    }
    size_t n = 0;
    for (size_t i = 0; i < l->n; i++) {
        if (shard >= 0 && l->v[i].shard != shard) continue;
        w[n] = (st_wtensor){.name = l->v[i].name, .dtype = st_of(p->dtype), .ndim = l->v[i].ndim};
        memcpy(w[n].shape, l->v[i].shape, sizeof l->v[i].shape);
        specs[n++] = &l->v[i];
    }
    const char *meta[] = {"format", format};
    fill_ctx fc = {specs, p->seed, p->dtype, pool};
    qvl_status s = st_write_stream(path, w, n, meta, 1, fill_tensor, &fc, err);
    free(w);
    free(specs);
    return s;
}

static int cmp_spec_name(const void *a, const void *b) {
    return strcmp((*(const tspec *const *)a)->name, (*(const tspec *const *)b)->name);
}

/* model.safetensors.index.json for the shards (es: bytes per stored element): total_size and weight_map sorted by
 * name, as transformers writes it. */
static qvl_status write_index(const tlist *l, const char *const *files, const char *dir, size_t es, qvl_error *err) {
    const tspec **sorted = malloc((l->n ? l->n : 1) * sizeof *sorted);
    size_t cap = 256 + l->n * (NAME_MAX_LEN + 48);
    char *json = malloc(cap);
    if (!sorted || !json) {
        free(sorted);
        free(json);
        return err_fail(err, QVL_ERR_NOMEM, "synth: out of memory");
    }
    uint64_t total = 0;
    for (size_t i = 0; i < l->n; i++) {
        sorted[i] = &l->v[i];
        uint64_t nb = es;
        for (int d = 0; d < l->v[i].ndim; d++) nb *= (uint64_t)l->v[i].shape[d];
        total += nb;
    }
    qsort(sorted, l->n, sizeof *sorted, cmp_spec_name);
    size_t len =
        (size_t)snprintf(json, cap, "{\n  \"metadata\": {\n    \"total_size\": %llu\n  },\n  \"weight_map\": {\n",
                         (unsigned long long)total);
    for (size_t i = 0; i < l->n; i++)
        len += (size_t)snprintf(json + len, cap - len, "    \"%s\": \"%s\"%s\n", sorted[i]->name,
                                files[sorted[i]->shard], i + 1 < l->n ? "," : "");
    snprintf(json + len, cap - len, "  }\n}\n");
    qvl_status s = write_text(dir, "model.safetensors.index.json", json, err);
    free(sorted);
    free(json);
    return s;
}

static const char *architecture(const char *model_type) {
    if (strcmp(model_type, "qwen3_vl_moe") == 0) return "Qwen3VLMoeForConditionalGeneration";
    if (strcmp(model_type, "qwen3_5") == 0) return "Qwen3_5ForConditionalGeneration";
    if (strcmp(model_type, "qwen3_5_moe") == 0) return "Qwen3_5MoeForConditionalGeneration";
    return "Qwen3VLForConditionalGeneration";
}

static qvl_status write_configs(const tower *tw, const char *dir, qvl_error *err) {
    const preset *p = tw->pr;
    char ds[160] = "";
    if (strcmp(p->model_type, "qwen3_5") != 0) {
        size_t len = (size_t)snprintf(ds, sizeof ds, "    \"deepstack_visual_indexes\": [");
        for (int k = 0; k < tw->n_deepstack; k++)
            len += (size_t)snprintf(ds + len, sizeof ds - len, "%s%d", k ? ", " : "", tw->deepstack[k]);
        snprintf(ds + len, sizeof ds - len, "],\n");
    }
    char cfg[2048];
    int n = snprintf(cfg, sizeof cfg,
                     "{\n"
                     "  \"architectures\": [\n    \"%s\"\n  ],\n"
                     "  \"model_type\": \"%s\",\n"
                     "  \"text_config\": {\n    \"hidden_size\": %d\n  },\n"
                     "  \"vision_config\": {\n"
                     "%s"
                     "    \"depth\": %d,\n"
                     "    \"hidden_act\": \"gelu_pytorch_tanh\",\n"
                     "    \"hidden_size\": %d,\n"
                     "    \"in_channels\": 3,\n"
                     "    \"initializer_range\": 0.02,\n"
                     "    \"intermediate_size\": %d,\n"
                     "    \"model_type\": \"%s\",\n"
                     "    \"num_heads\": %d,\n"
                     "    \"num_position_embeddings\": %d,\n"
                     "    \"out_hidden_size\": %d,\n"
                     "    \"patch_size\": 16,\n"
                     "    \"spatial_merge_size\": 2,\n"
                     "    \"temporal_patch_size\": 2\n"
                     "  }\n"
                     "}\n",
                     architecture(p->model_type), p->model_type, p->out_hidden, ds, tw->depth, p->hidden,
                     p->intermediate, p->model_type, p->heads, p->num_pos, p->out_hidden);
    if (n < 0 || (size_t)n >= sizeof cfg) return err_fail(err, QVL_ERR_INTERNAL, "synth: config.json overflow");
    TRY(write_text(dir, "config.json", cfg, err));
    static const char pre[] = "{\n"
                              "  \"image_mean\": [\n    0.5,\n    0.5,\n    0.5\n  ],\n"
                              "  \"image_processor_type\": \"Qwen2VLImageProcessorFast\",\n"
                              "  \"image_std\": [\n    0.5,\n    0.5,\n    0.5\n  ],\n"
                              "  \"merge_size\": 2,\n"
                              "  \"patch_size\": 16,\n"
                              "  \"processor_class\": \"Qwen3VLProcessor\",\n"
                              "  \"size\": {\n    \"longest_edge\": 16777216,\n    \"shortest_edge\": 65536\n  },\n"
                              "  \"temporal_patch_size\": 2\n"
                              "}\n";
    return write_text(dir, "preprocessor_config.json", pre, err);
}

qvl_status qvl_synth_write(const qvl_synth_params *p, const char *dir, qvl_error *err) {
    err_clear(err);
    if (!dir || !dir[0])
        return err_fail(err, QVL_ERR_INVALID_ARG, "qvl_synth_write: dir is %s", dir ? "the empty string" : "NULL");
    qvl_synth_params sp;
    synth_defaults(&sp);
    TRY(params_take(&sp, sizeof sp, p, "qvl_synth_params", err));
    p = &sp;
    tower tw = {0};
    TRY(resolve(p, &tw, err));
    TRY(mkdir_p(dir, err));

    const char *prefix = "model.visual.";
    int mlx = p->layout == QVL_LAYOUT_MLX || p->layout == QVL_LAYOUT_SIDECAR;
    if (mlx) prefix = "vision_tower.";
    if (p->layout == QVL_LAYOUT_NESTED) prefix = "model.language_model.visual.";

    tlist tower_l = {0}, text_l = {0};
    thread_pool *pool = NULL; /* one thread per CPU for generating the values, for every file written */
    qvl_status s = QVL_OK;
    if (!build_tower(&tower_l, &tw, prefix, mlx)) {
        s = err_fail(err, QVL_ERR_NOMEM, "synth: out of memory");
        goto done;
    }
    const size_t es = p->dtype == QVL_DTYPE_F32 ? 4 : 2;
    if ((s = write_configs(&tw, dir, err)) != QVL_OK || (s = pool_create(&pool, 0, err)) != QVL_OK) goto done;

    switch (p->layout) {
    case QVL_LAYOUT_HF:
    case QVL_LAYOUT_MLX:
    case QVL_LAYOUT_NESTED:
        s = write_weights(&tower_l, -1, dir, "model.safetensors", mlx ? "mlx" : "pt", p, pool, err);
        break;
    case QVL_LAYOUT_SIDECAR: {
        char sub[4096];
        if ((s = fu_join(sub, sizeof sub, dir, "optiq", err)) != QVL_OK) break;
        if ((s = mkdir_p(sub, err)) != QVL_OK) break;
        if ((s = write_weights(&tower_l, -1, sub, "optiq_vision.safetensors", "mlx", p, pool, err)) != QVL_OK) break;
        if (!add_text(&text_l, "model.language_model.embed_tokens.weight", 16, 8, 0) ||
            !add_text(&text_l, "model.language_model.norm.weight", 8, 0, 0)) {
            s = err_fail(err, QVL_ERR_NOMEM, "synth: out of memory");
            break;
        }
        s = write_weights(&text_l, -1, dir, "model.safetensors", "mlx", p, pool, err);
        break;
    }
    case QVL_LAYOUT_SHARDED: {
        static const char *const files[3] = {"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                                             "model-00003-of-00003.safetensors"};
        /* Text tensors in every shard, appended to the tower list so one index covers all of them. */
        if (!add_text(&tower_l, "model.language_model.embed_tokens.weight", 16, 8, 0) ||
            !add_text(&tower_l, "model.language_model.layers.0.mlp.down_proj.weight", 8, 16, 1) ||
            !add_text(&tower_l, "model.language_model.norm.weight", 8, 0, 2) ||
            !add_text(&tower_l, "lm_head.weight", 16, 8, 2)) {
            s = err_fail(err, QVL_ERR_NOMEM, "synth: out of memory");
            break;
        }
        for (int k = 0; k < 3 && s == QVL_OK; k++) s = write_weights(&tower_l, k, dir, files[k], "pt", p, pool, err);
        if (s == QVL_OK) s = write_index(&tower_l, files, dir, es, err);
        break;
    }
    }
done:
    pool_destroy(pool);
    free(tower_l.v);
    free(text_l.v);
    return s;
}
