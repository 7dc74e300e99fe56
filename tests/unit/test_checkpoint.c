/* test_checkpoint.c — checkpoint discovery and binding errors: every broken checkpoint gives a clear error that
 * names the cause, never a crash or a leak (this test runs under ASan/LeakSanitizer in CI). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"
#include "core/error.h"
#include "qvl.h"
#include "testutil.h"

static char g_root[256];

static void write_bytes(const char *dir, const char *name, const char *bytes, size_t n) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    CHECK(f != NULL);
    if (f) {
        CHECK(fwrite(bytes, 1, n, f) == n);
        fclose(f);
    }
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
    CHECK(st_open(src, &f, &err) == QVL_OK);
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

    snprintf(d, sizeof d, "%s/missing-dir", g_root);
    expect_load_error(d, QVL_ERR_IO, "config.json");

    snprintf(d, sizeof d, "%s/no-weights", g_root);
    copy_config(good, d);
    expect_load_error(d, QVL_ERR_IO, "no weights");

    snprintf(d, sizeof d, "%s/bad-json", g_root);
    copy_config(good, d);
    write_text(d, "config.json", "{\"model_type\": \"qwen3_vl\", ");
    expect_load_error(d, QVL_ERR_FORMAT, "not a JSON object");

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
