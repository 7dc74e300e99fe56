/* test_layouts.c — the same weights in every checkpoint layout give the same fingerprint and bit-identical
 * outputs; different weights give a different fingerprint; results do not depend on the thread count, nor on
 * other contexts encoding at the same time. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qvl.h"
#include "testutil.h"

typedef struct result {
    char hex[33];
    float *merged;
    float *ds[QVL_MAX_DEEPSTACK];
    size_t n_merged;
    int n_ds;
    qvl_model_info info;
} result;

/* Deterministic pixel rows in [-1, 1]. */
static void fill_pixels(float *p, size_t n) {
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        p[i] = (float)((s >> 40) & 0xffff) / 32767.5f - 1.0f;
    }
}

static const qvl_grid k_grids[] = {{1, 4, 6}, {2, 2, 4}};

static int encode_dir(const char *dir, int n_threads, result *r) {
    qvl_error err;
    qvl_model *m = NULL;
    if (qvl_model_load(dir, NULL, &m, &err) != QVL_OK) {
        fprintf(stderr, "load %s: %s\n", dir, err.message);
        return 0;
    }
    qvl_model_get_info(m, &r->info);
    qvl_model_fingerprint(m, NULL, r->hex, &err);
    size_t S = qvl_patch_rows(k_grids, 2);
    float *px = malloc(S * (size_t)r->info.row_len * sizeof(float));
    fill_pixels(px, S * (size_t)r->info.row_len);
    r->n_merged = S / 4 * (size_t)r->info.out_hidden;
    r->merged = malloc(r->n_merged * sizeof(float));
    r->n_ds = r->info.n_deepstack;
    for (int k = 0; k < r->n_ds; k++) r->ds[k] = malloc(r->n_merged * sizeof(float));
    qvl_ctx_params cp;
    qvl_ctx_params_default(&cp);
    cp.n_threads = n_threads;
    qvl_ctx *ctx = NULL;
    int ok = qvl_ctx_create(m, &cp, &ctx, &err) == QVL_OK &&
             qvl_encode(ctx, px, S, k_grids, 2, r->merged, r->ds, &err) == QVL_OK;
    if (!ok) fprintf(stderr, "encode %s: %s\n", dir, err.message);
    qvl_ctx_free(ctx);
    qvl_model_free(m);
    free(px);
    return ok;
}

static void free_result(result *r) {
    free(r->merged);
    for (int k = 0; k < r->n_ds; k++) free(r->ds[k]);
}

static int same_outputs(const result *a, const result *b) {
    if (a->n_merged != b->n_merged || a->n_ds != b->n_ds) return 0;
    if (memcmp(a->merged, b->merged, a->n_merged * sizeof(float)) != 0) return 0;
    for (int k = 0; k < a->n_ds; k++)
        if (memcmp(a->ds[k], b->ds[k], a->n_merged * sizeof(float)) != 0) return 0;
    return 1;
}

static int synth(const char *preset, uint64_t seed, qvl_synth_layout layout, qvl_dtype dt, const char *dir) {
    qvl_synth_params p;
    qvl_synth_params_default(&p);
    p.preset = preset;
    p.seed = seed;
    p.layout = layout;
    p.dtype = dt;
    qvl_error err;
    if (qvl_synth_write(&p, dir, &err) != QVL_OK) {
        fprintf(stderr, "synth %s: %s\n", dir, err.message);
        return 0;
    }
    return 1;
}

static void check_preset(const char *preset, const char *root) {
    static const struct { qvl_synth_layout l; const char *name; qvl_weight_source src; int mlx; const char *prefix; }
        layouts[] = {
            {QVL_LAYOUT_HF, "hf", QVL_SOURCE_SINGLE, 0, "model.visual."},
            {QVL_LAYOUT_MLX, "mlx", QVL_SOURCE_SINGLE, 1, "vision_tower."},
            {QVL_LAYOUT_SIDECAR, "sidecar", QVL_SOURCE_SIDECAR, 1, "vision_tower."},
            {QVL_LAYOUT_SHARDED, "sharded", QVL_SOURCE_SHARDED, 0, "model.visual."},
            {QVL_LAYOUT_NESTED, "nested", QVL_SOURCE_SINGLE, 0, "model.language_model.visual."},
        };
    result ref = {0};
    char dir[512];
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++) {
        snprintf(dir, sizeof dir, "%s/%s-%s", root, preset, layouts[i].name);
        CHECK(synth(preset, 7, layouts[i].l, QVL_DTYPE_BF16, dir));
        result r = {0};
        CHECK(encode_dir(dir, 2, &r));
        CHECK(r.info.source == layouts[i].src);
        CHECK(r.info.conv_layout_mlx == layouts[i].mlx);
        CHECK(strcmp(r.info.prefix, layouts[i].prefix) == 0);
        CHECK(r.info.weight_dtype == QVL_DTYPE_BF16);
        CHECK(r.info.n_tensors == (size_t)r.info.depth * 12 + 9 + 6 * (size_t)r.info.n_deepstack);
        if (i == 0) {
            ref = r;
            printf("%s: fingerprint %s, %zu tensors, %llu params\n", preset, r.hex, r.info.n_tensors,
                   (unsigned long long)r.info.n_params);
            continue;
        }
        printf("  layout %-8s fingerprint %s outputs %s\n", layouts[i].name, r.hex,
               same_outputs(&ref, &r) ? "identical" : "DIFFER");
        CHECK(strcmp(r.hex, ref.hex) == 0);
        CHECK(same_outputs(&ref, &r));
        free_result(&r);
    }
    /* Thread count: 1 thread gives the same bits as 2. */
    snprintf(dir, sizeof dir, "%s/%s-hf", root, preset);
    result one = {0};
    CHECK(encode_dir(dir, 1, &one));
    CHECK(same_outputs(&ref, &one));
    free_result(&one);
    /* Another seed: different weights, different fingerprint. */
    snprintf(dir, sizeof dir, "%s/%s-seed8", root, preset);
    CHECK(synth(preset, 8, QVL_LAYOUT_HF, QVL_DTYPE_BF16, dir));
    result other = {0};
    CHECK(encode_dir(dir, 2, &other));
    CHECK(strcmp(other.hex, ref.hex) != 0);
    free_result(&other);
    /* Stored as f16 and f32: loads, same shapes, outputs close to the bf16 ones (weights differ by rounding). */
    for (int d = 0; d < 2; d++) {
        qvl_dtype dt = d ? QVL_DTYPE_F32 : QVL_DTYPE_F16;
        snprintf(dir, sizeof dir, "%s/%s-%s", root, preset, qvl_dtype_name(dt));
        CHECK(synth(preset, 7, QVL_LAYOUT_HF, dt, dir));
        result r = {0};
        CHECK(encode_dir(dir, 2, &r));
        CHECK(r.info.weight_dtype == dt);
        CHECK(strcmp(r.hex, ref.hex) != 0);
        double maxabs, rel = r.merged ? tu_relerr(r.merged, ref.merged, ref.n_merged, &maxabs) : 1;
        printf("  dtype %-4s vs bf16: rel %.3e\n", qvl_dtype_name(dt), rel);
        CHECK(rel < 0.05);
        free_result(&r);
    }
    free_result(&ref);
}

typedef struct conc_arg {
    qvl_model *m;
    const float *px;
    size_t S, n_out;
    const float *want;
    int ok;
} conc_arg;

/* One context of 2 threads (its own pool), encoding the same input 5 times. */
static void *encode_thread(void *p) {
    conc_arg *a = p;
    qvl_ctx_params cp;
    qvl_ctx_params_default(&cp);
    cp.n_threads = 2;
    qvl_ctx *ctx = NULL;
    qvl_error err;
    float *out = malloc(a->n_out * sizeof(float));
    a->ok = out && qvl_ctx_create(a->m, &cp, &ctx, &err) == QVL_OK;
    for (int r = 0; r < 5 && a->ok; r++)
        a->ok = qvl_encode(ctx, a->px, a->S, k_grids, 2, out, NULL, &err) == QVL_OK &&
                memcmp(out, a->want, a->n_out * sizeof(float)) == 0;
    qvl_ctx_free(ctx);
    free(out);
    return NULL;
}

/* Several contexts on one model, each driven from its own thread at the same time (each owns its thread pool),
 * give the bits of one context alone; so do 3 threads. */
static void check_concurrent(qvl_model *m, const qvl_model_info *mi, const char *dir) {
    qvl_error err;
    const qvl_model_info in = *mi;
    size_t S = qvl_patch_rows(k_grids, 2), n_out = S / 4 * (size_t)in.out_hidden;
    float *px = malloc(S * (size_t)in.row_len * sizeof(float)), *want = malloc(n_out * sizeof(float));
    fill_pixels(px, S * (size_t)in.row_len);
    qvl_ctx_params cp;
    qvl_ctx_params_default(&cp);
    cp.n_threads = 3;
    qvl_ctx *ctx = NULL;
    CHECK(qvl_ctx_create(m, &cp, &ctx, &err) == QVL_OK);
    CHECK(qvl_encode(ctx, px, S, k_grids, 2, want, NULL, &err) == QVL_OK);
    qvl_ctx_free(ctx);
    result two = {0};
    CHECK(encode_dir(dir, 2, &two));
    CHECK(two.merged && memcmp(two.merged, want, n_out * sizeof(float)) == 0);
    free_result(&two);
    pthread_t t[3];
    conc_arg a[3];
    for (int i = 0; i < 3; i++) {
        a[i] = (conc_arg){m, px, S, n_out, want, 0};
        CHECK(pthread_create(&t[i], NULL, encode_thread, &a[i]) == 0);
    }
    for (int i = 0; i < 3; i++) {
        pthread_join(t[i], NULL);
        CHECK(a[i].ok);
    }
    free(px), free(want);
}

/* Models loaded at the same time from three threads, each a different layout of the same weights (the config,
 * index and safetensors parsers running concurrently; under ThreadSanitizer in test_layouts_tsan), give the
 * fingerprint and bits of the model loaded alone. */
typedef struct load_arg {
    char dir[512];
    result r;
    int ok;
} load_arg;

static void *load_thread(void *p) {
    load_arg *a = p;
    a->ok = encode_dir(a->dir, 1, &a->r);
    return NULL;
}

static void check_concurrent_load(const char *root) {
    static const char *const names[3] = {"tiny-hf", "tiny-sharded", "tiny-sidecar"};
    result ref = {0};
    char dir[512];
    snprintf(dir, sizeof dir, "%s/tiny-hf", root);
    CHECK(encode_dir(dir, 1, &ref));
    pthread_t t[3];
    load_arg *a = calloc(3, sizeof *a);
    CHECK(a != NULL);
    if (!a) return;
    for (int i = 0; i < 3; i++) {
        snprintf(a[i].dir, sizeof a[i].dir, "%s/%s", root, names[i]);
        CHECK(pthread_create(&t[i], NULL, load_thread, &a[i]) == 0);
    }
    for (int i = 0; i < 3; i++) {
        pthread_join(t[i], NULL);
        CHECK(a[i].ok);
        CHECK(strcmp(a[i].r.hex, ref.hex) == 0);
        CHECK(same_outputs(&a[i].r, &ref));
        free_result(&a[i].r);
    }
    free(a);
    free_result(&ref);
}

/* An item's outputs do not depend on what else is in the call: a 64x64 image (4096 rows: the MLPs run in row
 * chunks, the merger's 1024 rows too) alone, and after a small image in one call, where every chunk boundary
 * falls elsewhere. */
static void check_batch_invariance(qvl_model *m, const qvl_model_info *mi) {
    qvl_error err;
    const qvl_model_info in = *mi;
    const qvl_grid big = {1, 64, 64}, both[2] = {{1, 4, 4}, {1, 64, 64}};
    const size_t sb = qvl_patch_rows(&big, 1), s2 = qvl_patch_rows(both, 2), O = (size_t)in.out_hidden;
    const size_t small = s2 - sb, row = (size_t)in.row_len;
    float *px = malloc(s2 * row * sizeof(float)), *o1 = malloc(sb / 4 * O * 4), *o2 = malloc(s2 / 4 * O * 4);
    fill_pixels(px, s2 * row);
    qvl_ctx *ctx = NULL;
    CHECK(qvl_ctx_create(m, NULL, &ctx, &err) == QVL_OK);
    CHECK(qvl_encode(ctx, px + small * row, sb, &big, 1, o1, NULL, &err) == QVL_OK);
    CHECK(qvl_encode(ctx, px, s2, both, 2, o2, NULL, &err) == QVL_OK);
    CHECK(memcmp(o1, o2 + small / 4 * O, sb / 4 * O * 4) == 0);
    qvl_ctx_free(ctx);
    free(px), free(o1), free(o2);
}

/* Each kernel set this CPU runs (qvl_load_params.isa) encodes the same input to float32 rounding: the GEMMs agree
 * bit for bit between AVX2 and AVX-512, attention sums in another order. An unknown set is refused. */
static void check_isa(const char *dir) {
    static const int sets[] = {QVL_ISA_AVX2, QVL_ISA_AVX512};
    qvl_error err;
    float *ref = NULL;
    size_t n = 0;
    for (int i = 0; i < 2; i++) {
        qvl_load_params lp;
        qvl_load_params_default(&lp);
        lp.isa = (qvl_isa)sets[i];
        qvl_model *m = NULL;
        qvl_status s = qvl_model_load(dir, &lp, &m, &err);
        if (s == QVL_ERR_UNSUPPORTED) {
            printf("  isa %s: not on this CPU (%s)\n", qvl_isa_name(sets[i]), err.message);
            continue;
        }
        CHECK(s == QVL_OK);
        if (!m) continue;
        qvl_model_info in;
        qvl_model_get_info(m, &in);
        CHECK(in.isa == sets[i]);
        const size_t S = qvl_patch_rows(k_grids, 2);
        n = S / 4 * (size_t)in.out_hidden;
        float *px = malloc(S * (size_t)in.row_len * sizeof(float)), *out = malloc(n * sizeof(float));
        fill_pixels(px, S * (size_t)in.row_len);
        qvl_ctx *ctx = NULL;
        CHECK(qvl_ctx_create(m, NULL, &ctx, &err) == QVL_OK);
        CHECK(qvl_encode(ctx, px, S, k_grids, 2, out, NULL, &err) == QVL_OK);
        if (ref) {
            double maxabs, rel = tu_relerr(out, ref, n, &maxabs);
            printf("  isa %s vs %s: rel %.3e, max abs %.3e\n", qvl_isa_name(sets[i]), qvl_isa_name(sets[0]), rel, maxabs);
            CHECK(rel < 1e-6);
            free(out);
        } else {
            ref = out;
        }
        qvl_ctx_free(ctx);
        qvl_model_free(m);
        free(px);
    }
    free(ref);
    qvl_load_params bad;
    qvl_load_params_default(&bad);
    bad.isa = (qvl_isa)7;
    qvl_model *m = NULL;
    CHECK(qvl_model_load(dir, &bad, &m, &err) == QVL_ERR_INVALID_ARG && m == NULL);
    /* A zeroed struct was never initialised: refused, naming the struct and the initialiser. */
    qvl_load_params zeroed = {0};
    CHECK(qvl_model_load(dir, &zeroed, &m, &err) == QVL_ERR_INVALID_ARG && m == NULL &&
          strstr(err.message, "qvl_load_params.struct_size") && strstr(err.message, "qvl_load_params_default"));
    /* An older caller's shorter struct: the fields it lacks take their defaults. */
    qvl_load_params older;
    qvl_load_params_init(&older, offsetof(qvl_load_params, n_threads));
    CHECK(older.struct_size == offsetof(qvl_load_params, n_threads));
    CHECK(qvl_model_load(dir, &older, &m, &err) == QVL_OK);
    qvl_model_free(m);
    m = NULL;
    /* A newer caller's longer struct with a field this library does not know set: refused. */
    struct { qvl_load_params p; int extra; } newer;
    memset(&newer, 0, sizeof newer);
    qvl_load_params_init(&newer.p, sizeof newer);
    newer.extra = 1;
    CHECK(qvl_model_load(dir, &newer.p, &m, &err) == QVL_ERR_UNSUPPORTED && m == NULL);
    newer.extra = 0;
    CHECK(qvl_model_load(dir, &newer.p, &m, &err) == QVL_OK);
    qvl_model_free(m);
}

/* The per-grid table cache: A, then B, then A again gives A's bits; so does a fresh context. */
static void check_table_cache(qvl_model *m, const qvl_model_info *mi) {
    qvl_error err;
    const qvl_model_info in = *mi;
    qvl_grid a = {1, 6, 4}, b = {2, 4, 4};
    size_t sa = qvl_patch_rows(&a, 1), sb = qvl_patch_rows(&b, 1), O = (size_t)in.out_hidden;
    float *px = malloc(sb * (size_t)in.row_len * sizeof(float));
    fill_pixels(px, sb * (size_t)in.row_len);
    float *o1 = malloc(sa / 4 * O * 4), *o2 = malloc(sb / 4 * O * 4), *o3 = malloc(sa / 4 * O * 4);
    qvl_ctx *ctx = NULL;
    CHECK(qvl_ctx_create(m, NULL, &ctx, &err) == QVL_OK);
    CHECK(qvl_encode(ctx, px, sa, &a, 1, o1, NULL, &err) == QVL_OK);
    CHECK(qvl_encode(ctx, px, sb, &b, 1, o2, NULL, &err) == QVL_OK);
    CHECK(qvl_encode(ctx, px, sa, &a, 1, o3, NULL, &err) == QVL_OK);
    CHECK(memcmp(o1, o3, sa / 4 * O * 4) == 0);
    qvl_ctx_free(ctx);
    CHECK(qvl_ctx_create(m, NULL, &ctx, &err) == QVL_OK);
    CHECK(qvl_encode(ctx, px, sa, &a, 1, o3, NULL, &err) == QVL_OK);
    CHECK(memcmp(o1, o3, sa / 4 * O * 4) == 0);
    qvl_ctx_free(ctx);
    free(px), free(o1), free(o2), free(o3);
}

int main(void) {
    char root[256];
    CHECK(tu_tmpdir(root, sizeof root) != NULL);
    check_preset("tiny", root);
    check_preset("tiny-3.5", root);
    char dir[512];
    snprintf(dir, sizeof dir, "%s/tiny-hf", root);
    qvl_error err;
    qvl_model *m = NULL;
    CHECK(qvl_model_load(dir, NULL, &m, &err) == QVL_OK);
    if (m) {
        qvl_model_info in;
        qvl_model_get_info(m, &in);
        check_table_cache(m, &in);
        check_concurrent(m, &in, dir);
        check_batch_invariance(m, &in);
        qvl_model_free(m);
    }
    check_isa(dir);
    check_concurrent_load(root);
    CHECK(tu_rmtree(root));
    return tu_finish("test_layouts");
}
