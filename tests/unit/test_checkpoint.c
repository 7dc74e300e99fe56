/* test_checkpoint.c — checkpoint discovery and binding errors: every broken checkpoint gives a clear error that
 * names the cause, never a crash or a leak (this test runs under ASan/LeakSanitizer in CI). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/checkpoint.h"
#include "io/config.h"
#include "io/safetensors.h"
#include "core/error.h"
#include "qvl.h"
#include "testutil.h"

static char g_root[256];

static void write_bytes(const char *dir, const char *name, const char *bytes, size_t n) {
    CHECK(tu_write_file(tu_path(dir, name), bytes, n));
}

static void write_text(const char *dir, const char *name, const char *text) { write_bytes(dir, name, text, strlen(text)); }

static void copy_config(const char *from, const char *to) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp '%s/config.json' '%s/'", to, from, to);
    CHECK(system(cmd) == 0);
}

/* Rewrite the tiny HF checkpoint into `to`, dropping tensor `drop`, reshaping `reshape` to [1, n], or adding a
 * companion `extra` tensor. */
static void rewrite(const char *from, const char *to, const char *drop, const char *reshape, const char *extra,
                    const char *flip) {
    copy_config(from, to);
    char src[512], dst[512];
    snprintf(src, sizeof src, "%s/model.safetensors", from);
    snprintf(dst, sizeof dst, "%s/model.safetensors", to);
    st_file *f = NULL;
    qvl_error err;
    err_clear(&err);
    CHECK(st_load(src, SIZE_MAX, &f, &err) == QVL_OK);
    if (!f) return;
    st_wtensor *w = calloc(f->n_tensors + 1, sizeof *w);
    unsigned char *flipped = NULL;
    size_t n = 0;
    for (size_t i = 0; i < f->n_tensors; i++) {
        const st_tensor *t = &f->tensors[i];
        if (drop && strcmp(t->name, drop) == 0) continue;
        w[n] = (st_wtensor){.name = t->name, .dtype = t->dtype, .ndim = t->ndim, .data = t->data};
        if (flip && strcmp(t->name, flip) == 0) {
            /* One bit of the last element's bytes flipped, in a private copy. */
            unsigned char *copy = malloc((size_t)t->nbytes);
            memcpy(copy, t->data, (size_t)t->nbytes);
            copy[t->nbytes - 1] ^= 1;
            w[n].data = copy;
            flipped = copy;
        }
        memcpy(w[n].shape, t->shape, sizeof t->shape);
        if (reshape && strcmp(t->name, reshape) == 0) {
            int64_t count = 1;
            for (int d = 0; d < t->ndim; d++) count *= t->shape[d];
            w[n].ndim = 2;
            w[n].shape[0] = 1;
            w[n].shape[1] = count;
        }
        n++;
    }
    static const uint16_t one[4] = {0};
    if (extra) w[n++] = (st_wtensor){.name = extra, .dtype = ST_BF16, .ndim = 1, .shape = {4}, .data = one};
    CHECK(st_write(dst, w, n, NULL, 0, &err) == QVL_OK);
    free(flipped);
    free(w);
    st_close(f);
}

/* One-way layering: nothing under src/io/ includes a header from src/model/. */
static void check_io_layering(void) {
    char dir[512], path[1024], line[512];
    CHECK(tu_source_path("src/io", dir, sizeof dir) != NULL);
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    if (!d) return;
    int scanned = 0, bad = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        size_t n = strlen(e->d_name);
        if (n < 3 || (strcmp(e->d_name + n - 2, ".c") != 0 && strcmp(e->d_name + n - 2, ".h") != 0)) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "r");
        CHECK(f != NULL);
        if (!f) continue;
        scanned++;
        while (fgets(line, sizeof line, f)) {
            if (strncmp(line, "#include", 8) != 0 || !strstr(line, "model/")) continue;
            printf("  layering: %s includes from src/model/: %s", e->d_name, line);
            bad++;
        }
        fclose(f);
    }
    closedir(d);
    printf("  layering: %d files under src/io/, %d includes from src/model/\n", scanned, bad);
    CHECK(scanned >= 10 && bad == 0);
}

/* The neutral table: canonical names, canonical shapes, the conv layout as stored, checked lookups. */
static void check_table(const char *dir, qvl_synth_layout layout) {
    char cfg_path[600];
    snprintf(cfg_path, sizeof cfg_path, "%s/config.json", dir);
    tower_config cfg;
    qvl_error err;
    err_clear(&err); /* internal calls do not clear it; the first failure recorded wins */
    CHECK(config_load(cfg_path, &cfg, &err) == QVL_OK);
    checkpoint ck;
    CHECK(checkpoint_open(dir, &cfg, &ck, &err) == QVL_OK);
    int mlx = layout == QVL_LAYOUT_MLX;
    CHECK(ck.source == QVL_SOURCE_SINGLE && ck.n_files == 1);
    CHECK(strcmp(ck.prefix, mlx ? "vision_tower." : "model.visual.") == 0);
    CHECK(ck.n_tensors == 69); /* tiny: 4 blocks · 12 + 9 + 2 DeepStack mergers · 6, nothing else */
    int sorted = 1;
    for (size_t i = 1; i < ck.n_tensors; i++) sorted &= strcmp(ck.tensors[i - 1].name, ck.tensors[i].name) < 0;
    CHECK(sorted);
    const ckpt_tensor *t = checkpoint_find(&ck, "patch_embed.proj.weight");
    CHECK(t != NULL);
    if (t) {
        static const int64_t hf[5] = {64, 3, 2, 16, 16}, as_mlx[5] = {64, 2, 16, 16, 3};
        CHECK(t->ndim == 5 && memcmp(t->shape, hf, sizeof hf) == 0);
        CHECK(memcmp(t->stored_shape, mlx ? as_mlx : hf, sizeof hf) == 0);
        CHECK(t->layout == (mlx ? CKPT_LAYOUT_MLX_CONV : CKPT_LAYOUT_STORED));
        CHECK(t->supported && t->dtype == QVL_DTYPE_BF16 && t->nbytes == 64 * 1536 * 2 && t->file == 0);
    }
    const ckpt_tensor *got = NULL;
    static const int64_t qkv[2] = {192, 64}, wrong[2] = {64, 192};
    CHECK(checkpoint_get(&ck, "blocks.3.attn.qkv.weight", 2, qkv, &got, &err) == QVL_OK && got != NULL);
    CHECK(got && strcmp(got->name, "blocks.3.attn.qkv.weight") == 0);
    err_clear(&err);
    CHECK(checkpoint_get(&ck, "blocks.3.attn.qkv.weight", 2, wrong, &got, &err) == QVL_ERR_SHAPE && got == NULL);
    CHECK(strstr(err.message, "has shape [192, 64], expected [64, 192]") != NULL);
    err_clear(&err);
    CHECK(checkpoint_get(&ck, "blocks.4.attn.qkv.weight", 2, qkv, &got, &err) == QVL_ERR_SHAPE && got == NULL);
    CHECK(strstr(err.message, mlx ? "missing tensor 'vision_tower.blocks.4.attn.qkv.weight' (expected shape [192, 64])"
                                  : "missing tensor 'model.visual.blocks.4.attn.qkv.weight' (expected shape [192, 64])")
          != NULL);
    printf("  table (%s): %zu tensors under %s, conv %s; %s\n", mlx ? "mlx" : "hf", ck.n_tensors, ck.prefix,
           t && t->layout == CKPT_LAYOUT_MLX_CONV ? "MLX order" : "HF order", err.message);
    if (mlx) {
        /* A 5-D conv shape mismatch is reported in the order it is stored. */
        static const int64_t hf_bad[5] = {64, 3, 2, 16, 8};
        err_clear(&err);
        CHECK(checkpoint_get(&ck, "patch_embed.proj.weight", 5, hf_bad, &got, &err) == QVL_ERR_SHAPE);
        CHECK(strstr(err.message, "has shape [64, 2, 16, 16, 3], expected [64, 2, 16, 8, 3]") != NULL);
    }
    st_file **files = NULL;
    int n_files = 0;
    checkpoint_take_files(&ck, &files, &n_files);
    CHECK(n_files == 1 && files != NULL && ck.files == NULL && ck.n_files == 0);
    checkpoint_close(&ck);
    CHECK(ck.tensors == NULL && ck.n_tensors == 0);
    for (int i = 0; i < n_files; i++) st_close(files[i]);
    free(files);
    checkpoint_close(NULL);
}

/* Geometry the tower does not implement is refused when config.json is read, naming the field: the merged-token
 * count (qvl_merged_tokens, S/4) and the tower's outputs assume 2×2 merging; preprocessing makes RGB rows. */
static void check_config_geometry(void) {
    static const struct { const char *field; int value; qvl_status want; } cases[] = {
        {"spatial_merge_size", 1, QVL_ERR_UNSUPPORTED}, {"spatial_merge_size", 2, QVL_OK},
        {"spatial_merge_size", 3, QVL_ERR_UNSUPPORTED}, {"spatial_merge_size", 4, QVL_ERR_UNSUPPORTED},
        {"in_channels", 1, QVL_ERR_UNSUPPORTED},        {"in_channels", 3, QVL_OK},
        {"in_channels", 4, QVL_ERR_UNSUPPORTED},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[256], want[64];
        snprintf(text, sizeof text, "{\"model_type\": \"qwen3_vl\", \"vision_config\": {\"hidden_size\": 64, "
                 "\"num_heads\": 4, \"%s\": %d}}", cases[i].field, cases[i].value);
        snprintf(want, sizeof want, "vision_config.%s %d", cases[i].field, cases[i].value);
        tower_config cfg;
        qvl_error err;
        err_clear(&err);
        qvl_status s = config_parse(text, strlen(text), "dir/config.json", &cfg, &err);
        printf("  config %s = %d -> %s: %s\n", cases[i].field, cases[i].value, qvl_status_name(s), err.message);
        CHECK(s == cases[i].want);
        if (cases[i].want != QVL_OK)
            CHECK(err.status == s && strstr(err.message, "dir/config.json") && strstr(err.message, want));
        else
            CHECK(cfg.merge == 2 && cfg.in_channels == 3);
    }
}

/* A config.json is read with its size: a NUL byte after the object, and bytes after it, are trailing bytes. */
static void check_config_nul(void) {
    static const char text[] = "{\"model_type\": \"qwen3_vl\", \"vision_config\": {\"hidden_size\": 64, "
                               "\"num_heads\": 4}}\0junk";
    tower_config cfg;
    qvl_error err;
    err_clear(&err);
    CHECK(config_parse(text, strlen(text), "dir/config.json", &cfg, &err) == QVL_OK);
    qvl_status s = config_parse(text, sizeof text - 1, "dir/config.json", &cfg, &err);
    printf("  config.json with a NUL and junk after the object -> %s: %s\n", qvl_status_name(s), err.message);
    CHECK(s == QVL_ERR_FORMAT && strstr(err.message, "dir/config.json") && strstr(err.message, "trailing bytes"));
}

static void expect_load_error(const char *dir, qvl_status want, const char *needle) {
    qvl_model *m = (qvl_model *)1;
    qvl_error err;
    qvl_status s = qvl_model_load(dir, NULL, &m, &err);
    int ok = s == want && m == NULL && err.status == want && strstr(err.message, needle) != NULL;
    printf("  %-40s -> %s: %s\n", strrchr(dir, '/') + 1, qvl_status_name(s), err.message);
    CHECK(ok);
    if (s == QVL_OK) qvl_model_free(m);
}

int main(void) {
    CHECK(tu_tmpdir(g_root, sizeof g_root) != NULL);
    char good[512], d[512];
    snprintf(good, sizeof good, "%s/good", g_root);
    qvl_synth_params p;
    qvl_synth_params_default(&p);
    p.preset = "tiny";
    qvl_error err;
    CHECK(qvl_synth_write(&p, good, &err) == QVL_OK);

    check_io_layering();
    check_config_geometry();
    check_config_nul();
    check_table(good, QVL_LAYOUT_HF);
    snprintf(d, sizeof d, "%s/mlx", g_root);
    p.layout = QVL_LAYOUT_MLX;
    CHECK(qvl_synth_write(&p, d, &err) == QVL_OK);
    check_table(d, QVL_LAYOUT_MLX);
    p.layout = QVL_LAYOUT_HF;

    snprintf(d, sizeof d, "%s/missing-dir", g_root);
    expect_load_error(d, QVL_ERR_IO, "config.json");

    snprintf(d, sizeof d, "%s/no-weights", g_root);
    copy_config(good, d);
    expect_load_error(d, QVL_ERR_IO, "no weights");

    snprintf(d, sizeof d, "%s/bad-json", g_root);
    copy_config(good, d);
    write_text(d, "config.json", "{\"model_type\": \"qwen3_vl\", ");
    expect_load_error(d, QVL_ERR_FORMAT, "invalid JSON: syntax error at byte 26 of 27 (line 1, column 27)");
    /* invalid, too deep and not an object each say so (they all said "not a JSON object") */
    write_text(d, "config.json", "[1, 2]");
    expect_load_error(d, QVL_ERR_FORMAT, "not a JSON object: the top-level value is a list of 2");
    write_text(d, "config.json", "{\"model_type\": \"qwen3_vl\"} x");
    expect_load_error(d, QVL_ERR_FORMAT, "invalid JSON: trailing bytes after the value (at byte 27 of 28)");
    {
        static char deep[2 * 1100 + 8];
        size_t k = 0;
        deep[k++] = '{', deep[k++] = '"', deep[k++] = 'a', deep[k++] = '"', deep[k++] = ':';
        for (int i = 0; i < 1100; i++) deep[k++] = '[';
        for (int i = 0; i < 1100; i++) deep[k++] = ']';
        deep[k++] = '}', deep[k] = '\0';
        write_text(d, "config.json", deep);
        expect_load_error(d, QVL_ERR_FORMAT, "JSON nested more than 1000 levels deep (at byte 1004 of 2206)");
    }

    snprintf(d, sizeof d, "%s/other-family", g_root);
    copy_config(good, d);
    write_text(d, "config.json", "{\"model_type\": \"qwen2_5_vl\", \"vision_config\": {}}");
    expect_load_error(d, QVL_ERR_UNSUPPORTED, "qwen2_5_vl");

    snprintf(d, sizeof d, "%s/bad-heads", g_root);
    copy_config(good, d);
    write_text(d, "config.json", "{\"model_type\": \"qwen3_vl\", \"vision_config\": {\"hidden_size\": 64, "
                                 "\"num_heads\": 5}}");
    expect_load_error(d, QVL_ERR_FORMAT, "num_heads");

    snprintf(d, sizeof d, "%s/bad-deepstack", g_root);
    copy_config(good, d);
    write_text(d, "config.json", "{\"model_type\": \"qwen3_vl\", \"vision_config\": {\"depth\": 4, "
                                 "\"deepstack_visual_indexes\": [1, 9]}}");
    expect_load_error(d, QVL_ERR_FORMAT, "deepstack_visual_indexes[1]");

    snprintf(d, sizeof d, "%s/missing-tensor", g_root);
    rewrite(good, d, "model.visual.blocks.2.mlp.linear_fc2.weight", NULL, NULL, NULL);
    expect_load_error(d, QVL_ERR_SHAPE, "model.visual.blocks.2.mlp.linear_fc2.weight");

    snprintf(d, sizeof d, "%s/missing-deepstack", g_root);
    rewrite(good, d, "model.visual.deepstack_merger_list.1.norm.bias", NULL, NULL, NULL);
    expect_load_error(d, QVL_ERR_SHAPE, "deepstack_merger_list.1.norm.bias");

    snprintf(d, sizeof d, "%s/misshapen-tensor", g_root);
    rewrite(good, d, NULL, "model.visual.blocks.0.attn.qkv.weight", NULL, NULL);
    expect_load_error(d, QVL_ERR_SHAPE, "expected [192, 64]");

    snprintf(d, sizeof d, "%s/misshapen-conv", g_root);
    rewrite(good, d, NULL, "model.visual.patch_embed.proj.weight", NULL, NULL);
    expect_load_error(d, QVL_ERR_SHAPE, "patch_embed.proj.weight");

    snprintf(d, sizeof d, "%s/quantized", g_root);
    rewrite(good, d, NULL, NULL, "model.visual.blocks.0.attn.qkv.scales", NULL);
    expect_load_error(d, QVL_ERR_UNSUPPORTED, "quantized");

    snprintf(d, sizeof d, "%s/no-tower", g_root);
    rewrite(good, d, "model.visual.patch_embed.proj.weight", NULL, NULL, NULL);
    expect_load_error(d, QVL_ERR_SHAPE, "no vision tower");

    snprintf(d, sizeof d, "%s/corrupt-weights", g_root);
    copy_config(good, d);
    static const char trunc_header[] = "\x10\0\0\0\0\0\0\0{\"a\":"; /* claims 16 header bytes, has 5 */
    write_bytes(d, "model.safetensors", trunc_header, sizeof trunc_header - 1);
    expect_load_error(d, QVL_ERR_FORMAT, "model.safetensors");

    /* The fingerprint changes when a single bit of a single weight changes, and only then. */
    snprintf(d, sizeof d, "%s/one-bit", g_root);
    rewrite(good, d, NULL, NULL, NULL, "model.visual.blocks.3.mlp.linear_fc2.bias");
    char same[512];
    snprintf(same, sizeof same, "%s/rewritten", g_root);
    rewrite(good, same, NULL, NULL, NULL, NULL);
    {
        const char *dirs[3] = {good, same, d};
        char hex[3][33];
        for (int i = 0; i < 3; i++) {
            qvl_model *fm = NULL;
            CHECK(qvl_model_load(dirs[i], NULL, &fm, &err) == QVL_OK);
            CHECK(qvl_model_fingerprint(fm, NULL, hex[i], &err) == QVL_OK);
            qvl_model_free(fm);
        }
        printf("  fingerprints: synth %s, rewritten %s, one bit flipped %s\n", hex[0], hex[1], hex[2]);
        CHECK(strcmp(hex[0], hex[1]) == 0);
        CHECK(strcmp(hex[0], hex[2]) != 0);
    }

    /* Bad encode arguments on a good model: clear errors, and the context stays usable. */
    qvl_model *m = NULL;
    CHECK(qvl_model_load(good, NULL, &m, &err) == QVL_OK);
    qvl_ctx *ctx = NULL;
    qvl_ctx_params bad;
    qvl_ctx_params_default(&bad);
    bad.n_threads = -1;
    CHECK(m && qvl_ctx_create(m, &bad, &ctx, &err) == QVL_ERR_INVALID_ARG && ctx == NULL);
    bad.n_threads = QVL_MAX_THREADS + 1;
    CHECK(m && qvl_ctx_create(m, &bad, &ctx, &err) == QVL_ERR_INVALID_ARG && ctx == NULL);
    printf("  n_threads %d -> %s\n", bad.n_threads, err.message);
    CHECK(qvl_ctx_create(m, NULL, &ctx, &err) == QVL_OK);
    if (m && ctx) {
        float px[16 * 1536] = {0}, out[4 * 96];
        qvl_grid odd = {1, 3, 4}, good_grid = {1, 4, 4}, zero = {0, 4, 4};
        CHECK(qvl_encode(ctx, px, 12, &odd, 1, out, NULL, &err) == QVL_ERR_INVALID_ARG);
        printf("  odd grid -> %s\n", err.message);
        CHECK(qvl_encode(ctx, px, 16, &zero, 1, out, NULL, &err) == QVL_ERR_INVALID_ARG);
        CHECK(qvl_encode(ctx, px, 15, &good_grid, 1, out, NULL, &err) == QVL_ERR_INVALID_ARG);
        printf("  row mismatch -> %s\n", err.message);
        CHECK(strstr(err.message, "15") != NULL);
        CHECK(qvl_encode(ctx, NULL, 16, &good_grid, 1, out, NULL, &err) == QVL_ERR_INVALID_ARG);
        CHECK(qvl_encode(ctx, px, 16, &good_grid, 1, out, NULL, &err) == QVL_OK);
    }
    qvl_ctx_free(ctx);
    qvl_model_free(m);
    qvl_model_free(NULL);
    qvl_ctx_free(NULL);

    CHECK(tu_rmtree(g_root));
    return tu_finish("test_checkpoint");
}
