/* test_synth.c — the safetensors writer (round trip through the reader), the .npy reader/writer, the public file
 * helpers, and synthetic checkpoints: tensor sets per layout, identical values across layouts, byte determinism. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "cpu/ops.h"
#include "io/npy.h"
#include "io/safetensors.h"
#include "testutil.h"

static char tmp[512];

static const char *tpath(const char *name) { return tu_path(tmp, name); }

/* 1 if the test directory holds no dot-file: no temporary was left behind. */
static int no_temporaries(void) { return tu_dotfiles(tmp) == 0; }

static int same_bytes(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int same = fa && fb;
    while (same) {
        int ca = fgetc(fa), cb = fgetc(fb);
        if (ca != cb) same = 0;
        if (ca == EOF || cb == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

/* a/b into buf; an empty string if it does not fit (the return value is used, so no truncation warning). */
static const char *cat(char *buf, size_t n, const char *a, const char *b) {
    int k = snprintf(buf, n, "%s/%s", a, b);
    if (k < 0 || (size_t)k >= n) buf[0] = '\0';
    return buf;
}

static int exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

static void test_st_roundtrip(void) {
    float a[6] = {1, -2, 3.5f, 0, 1e-3f, -7};
    uint16_t b[4] = {0x3f80, 0x4000, 0xbf80, 0};
    int64_t c[3] = {1, 4, 6};
    st_wtensor t[3] = {
        {.name = "zeta", .dtype = ST_F32, .ndim = 2, .shape = {2, 3}, .data = a},
        {.name = "alpha \"q\"", .dtype = ST_BF16, .ndim = 1, .shape = {4}, .data = b},
        {.name = "grid", .dtype = ST_I64, .ndim = 2, .shape = {1, 3}, .data = c},
    };
    const char *meta[] = {"format", "pt", "note", "line\nbreak"};
    qvl_error err;
    err_clear(&err);
    CHECK(st_write(tpath("rt.safetensors"), t, 3, meta, 2, &err) == QVL_OK);
    CHECK(st_write(tpath("rt2.safetensors"), t, 3, meta, 2, &err) == QVL_OK);
    CHECK(same_bytes(tpath("rt.safetensors"), tpath("rt2.safetensors")));
    CHECK(no_temporaries());

    FILE *f = fopen(tpath("rt.safetensors"), "rb");
    unsigned char len8[8] = {0};
    CHECK(f && fread(len8, 1, 8, f) == 8);
    if (f) fclose(f);
    uint64_t hl = 0;
    for (int k = 0; k < 8; k++) hl |= (uint64_t)len8[k] << (8 * k);
    CHECK(hl % 8 == 0);

    st_file *sf = NULL;
    err_clear(&err);
    CHECK(st_load(tpath("rt.safetensors"), SIZE_MAX, &sf, &err) == QVL_OK);
    if (!sf) {
        fprintf(stderr, "st_open: %s\n", err.message);
        return;
    }
    CHECK(sf->n_tensors == 3);
    const st_tensor *ta = st_find(sf, "zeta"), *tb = st_find(sf, "alpha \"q\""), *tc = st_find(sf, "grid");
    CHECK(ta && tb && tc);
    if (ta && tb && tc) {
        CHECK(ta->dtype == ST_F32 && ta->ndim == 2 && ta->shape[0] == 2 && ta->shape[1] == 3);
        CHECK(memcmp(ta->data, a, sizeof a) == 0);
        CHECK(tb->dtype == ST_BF16 && tb->ndim == 1 && tb->shape[0] == 4 && memcmp(tb->data, b, sizeof b) == 0);
        CHECK(tc->dtype == ST_I64 && memcmp(tc->data, c, sizeof c) == 0);
        /* Offsets ascend in the order given. */
        CHECK((const char *)ta->data < (const char *)tb->data && (const char *)tb->data < (const char *)tc->data);
    }
    CHECK(st_meta(sf, "format") && strcmp(st_meta(sf, "format"), "pt") == 0);
    CHECK(st_meta(sf, "note") && strcmp(st_meta(sf, "note"), "line\nbreak") == 0);
    st_close(sf);

    /* Errors: duplicate names, bad dtype, unwritable path. */
    st_wtensor dup[2] = {t[0], t[0]};
    err_clear(&err);
    CHECK(st_write(tpath("dup.safetensors"), dup, 2, NULL, 0, &err) == QVL_ERR_INVALID_ARG);
    CHECK(!exists(tpath("dup.safetensors")) && no_temporaries());
    st_wtensor bad = t[0];
    bad.dtype = ST_DTYPE_COUNT;
    err_clear(&err);
    CHECK(st_write(tpath("bad.safetensors"), &bad, 1, NULL, 0, &err) == QVL_ERR_INVALID_ARG);
    err_clear(&err);
    CHECK(st_write("/nonexistent-dir/x.safetensors", t, 1, NULL, 0, &err) == QVL_ERR_IO);
    CHECK(strstr(err.message, "/nonexistent-dir/x.safetensors") != NULL);
    /* An empty file (no tensors, no metadata) is valid. */
    err_clear(&err);
    CHECK(st_write(tpath("empty.safetensors"), NULL, 0, NULL, 0, &err) == QVL_OK);
    err_clear(&err);
    CHECK(st_load(tpath("empty.safetensors"), SIZE_MAX, &sf, &err) == QVL_OK);
    if (sf) CHECK(sf->n_tensors == 0);
    st_close(sf);
}

/* A hand-made .npy: version `major`, dict text, then `data`. */
static void make_npy(const char *path, int major, const char *dict, const void *data, size_t n) {
    unsigned char buf[4096];
    size_t pre = major == 1 ? 10 : 12, dl = strlen(dict);
    size_t total = (pre + dl + 1 + 63) / 64 * 64, hlen = total - pre;
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (unsigned char)major;
    buf[7] = 0;
    buf[8] = (unsigned char)hlen;
    buf[9] = (unsigned char)(hlen >> 8);
    if (major != 1) buf[10] = buf[11] = 0;
    memcpy(buf + pre, dict, dl);
    memset(buf + pre + dl, ' ', total - pre - dl - 1);
    buf[total - 1] = '\n';
    memcpy(buf + total, data, n);
    tu_write_file(path, buf, total + n);
}

static void test_npy(void) {
    float a[15];
    for (int i = 0; i < 15; i++) a[i] = (float)i * 0.25f - 1;
    qvl_error err;
    err_clear(&err);
    CHECK(npy_write_f32(tpath("a.npy"), a, 3, 5, &err) == QVL_OK);
    float *d = NULL;
    size_t r = 0, c = 0;
    CHECK(npy_read_f32(tpath("a.npy"), NULL, &d, &r, &c, &err) == QVL_OK);
    CHECK(r == 3 && c == 5 && d && memcmp(d, a, sizeof a) == 0);
    free(d);
    FILE *f = fopen(tpath("a.npy"), "rb");
    if (f) {
        fseek(f, 0, SEEK_END);
        CHECK(ftell(f) == 128 + 60); /* header padded to 64 */
        fclose(f);
    }

    double f8[6] = {1.5, -2, 3, 4, 5, 6e10};
    make_npy(tpath("f8.npy"), 2, "{'descr': '<f8', 'fortran_order': False, 'shape': (1, 2, 3), }", f8, sizeof f8);
    err_clear(&err);
    CHECK(npy_read_f32(tpath("f8.npy"), NULL, &d, &r, &c, &err) == QVL_OK);
    CHECK(r == 1 && c == 6 && d && d[0] == 1.5f && d[1] == -2.0f && d[5] == (float)6e10);
    free(d);

    uint16_t f2[3] = {0x3c00, 0xc000, 0x3800}; /* 1, -2, 0.5 */
    make_npy(tpath("f2.npy"), 3, "{\"shape\": (3,), \"fortran_order\": False, \"descr\": \"<f2\"}", f2, sizeof f2);
    err_clear(&err);
    CHECK(npy_read_f32(tpath("f2.npy"), NULL, &d, &r, &c, &err) == QVL_OK);
    CHECK(r == 1 && c == 3 && d && d[0] == 1.0f && d[1] == -2.0f && d[2] == 0.5f);
    free(d);

    make_npy(tpath("fo.npy"), 1, "{'descr': '<f4', 'fortran_order': True, 'shape': (1, 2), }", a, 8);
    err_clear(&err);
    CHECK(npy_read_f32(tpath("fo.npy"), NULL, &d, &r, &c, &err) == QVL_ERR_UNSUPPORTED && d == NULL);
    make_npy(tpath("tr.npy"), 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 4), }", a, 60);
    err_clear(&err);
    CHECK(npy_read_f32(tpath("tr.npy"), NULL, &d, &r, &c, &err) == QVL_ERR_FORMAT && d == NULL);
    make_npy(tpath("big.npy"), 1,
             "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", a, 4);
    err_clear(&err);
    CHECK(npy_read_f32(tpath("big.npy"), NULL, &d, &r, &c, &err) == QVL_ERR_LIMIT && d == NULL);
    make_npy(tpath("i4.npy"), 1, "{'descr': '<i4', 'fortran_order': False, 'shape': (1,), }", a, 4);
    err_clear(&err);
    CHECK(npy_read_f32(tpath("i4.npy"), NULL, &d, &r, &c, &err) == QVL_ERR_UNSUPPORTED);
    make_npy(tpath("0d.npy"), 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (), }", a, 4);
    err_clear(&err);
    CHECK(npy_read_f32(tpath("0d.npy"), NULL, &d, &r, &c, &err) == QVL_ERR_SHAPE);
    make_npy(tpath("junk.npy"), 1, "{'descr': '<f4', 'fortran_order': Maybe, 'shape': (1,), }", a, 4);
    err_clear(&err);
    CHECK(npy_read_f32(tpath("junk.npy"), NULL, &d, &r, &c, &err) == QVL_ERR_FORMAT);
    /* Bytes after the data are refused, not ignored: expected and actual sizes named. */
    make_npy(tpath("trail.npy"), 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2), }", a, 12);
    err_clear(&err);
    CHECK(npy_read_f32(tpath("trail.npy"), NULL, &d, &r, &c, &err) == QVL_ERR_FORMAT && d == NULL);
    CHECK(strstr(err.message, "trail.npy") && strstr(err.message, "8 bytes") && strstr(err.message, "12"));
    printf("  trailing bytes: %s\n", err.message);
    {
        FILE *tf = fopen(tpath("trail.npy"), "rb");
        unsigned char tb[512];
        size_t tn = tf ? fread(tb, 1, sizeof tb, tf) : 0;
        if (tf) fclose(tf);
        err_clear(&err);
        CHECK(npy_parse_f32(tb, tn, "mem.npy", NULL, &d, &r, &c, &err) == QVL_ERR_FORMAT && d == NULL);
        CHECK(strstr(err.message, "mem.npy") && strstr(err.message, "8 bytes") && strstr(err.message, "12"));
        err_clear(&err);
        CHECK(npy_parse_f32(tb, tn - 4, "mem.npy", NULL, &d, &r, &c, &err) == QVL_OK && r == 1 && c == 2);
        free(d);
    }
    tu_write_file(tpath("short.npy"), "\x93NUM", 4);
    err_clear(&err);
    CHECK(npy_read_f32(tpath("short.npy"), NULL, &d, &r, &c, &err) == QVL_ERR_FORMAT);
    /* A header length past the end of the file. */
    tu_write_file(tpath("hl.npy"), "\x93NUMPY\x01\x00\xff\xff{}", 12);
    err_clear(&err);
    CHECK(npy_read_f32(tpath("hl.npy"), NULL, &d, &r, &c, &err) == QVL_ERR_FORMAT);
}

static void test_files(void) {
    float px[8 * 6];
    for (int i = 0; i < 48; i++) px[i] = (float)i;
    qvl_grid g[2] = {{1, 2, 2}, {1, 2, 2}};
    qvl_out_tensor o = {"pixel_values", px, 8, 6};
    qvl_error err;
    CHECK(qvl_write_safetensors(tpath("px.safetensors"), &o, 1, g, 2, NULL, 0, &err) == QVL_OK);
    float *rows = NULL;
    size_t n_rows = 0, row_len = 0, n_grids = 0;
    qvl_grid *grids = NULL;
    CHECK(qvl_read_rows(tpath("px.safetensors"), &rows, &n_rows, &row_len, &grids, &n_grids, &err) == QVL_OK);
    CHECK(n_rows == 8 && row_len == 6 && rows && memcmp(rows, px, sizeof px) == 0);
    CHECK(n_grids == 2 && grids && grids[1].t == 1 && grids[1].h == 2 && grids[1].w == 2);
    qvl_free(rows);
    qvl_free(grids);

    CHECK(qvl_write_npy(tpath("px.npy"), px, 8, 6, &err) == QVL_OK);
    CHECK(qvl_read_rows(tpath("px.npy"), &rows, &n_rows, &row_len, &grids, &n_grids, &err) == QVL_OK);
    CHECK(n_rows == 8 && row_len == 6 && rows && memcmp(rows, px, sizeof px) == 0 && n_grids == 0 && !grids);
    qvl_free(rows);

    /* A safetensors file without pixel_values. */
    qvl_out_tensor other = {"other", px, 8, 6};
    CHECK(qvl_write_safetensors(tpath("nopx.safetensors"), &other, 1, NULL, 0, NULL, 0, &err) == QVL_OK);
    CHECK(qvl_read_rows(tpath("nopx.safetensors"), &rows, &n_rows, &row_len, NULL, NULL, &err) == QVL_ERR_SHAPE);
    CHECK(rows == NULL && strstr(err.message, "pixel_values") != NULL);
    CHECK(qvl_read_rows(tpath("missing.npy"), &rows, &n_rows, &row_len, NULL, NULL, &err) == QVL_ERR_IO);
}

/* Read tensor `canon` of a synthetic checkpoint file as float32 in HF layout. */
static float *load_f32(const char *file, const char *name, size_t *n, int mlx_conv) {
    st_file *f = NULL;
    qvl_error err;
    err_clear(&err);
    if (st_load(file, SIZE_MAX, &f, &err) != QVL_OK) return NULL;
    const st_tensor *t = st_find(f, name);
    float *out = NULL;
    if (t) {
        size_t cnt = 1;
        for (int d = 0; d < t->ndim; d++) cnt *= (size_t)t->shape[d];
        float *raw = malloc(cnt * sizeof(float));
        out = malloc(cnt * sizeof(float));
        qvl_dtype dt = t->dtype == ST_F32 ? QVL_DTYPE_F32 : t->dtype == ST_F16 ? QVL_DTYPE_F16 : QVL_DTYPE_BF16;
        op_to_f32(t->data, dt, raw, cnt);
        if (mlx_conv) { /* MLX (o, t, y, x, c) → HF (o, c, t, y, x) */
            for (size_t e = 0; e < cnt; e++) {
                size_t o = e / 1536, r = e % 1536, ch = r / 512, tt = (r / 256) % 2, yx = r % 256;
                out[e] = raw[o * 1536 + (tt * 256 + yx) * 3 + ch];
            }
        } else {
            memcpy(out, raw, cnt * sizeof(float));
        }
        free(raw);
        *n = cnt;
    }
    st_close(f);
    return out;
}

static size_t count_tensors(const char *file) {
    st_file *f = NULL;
    qvl_error err;
    err_clear(&err);
    if (st_load(file, SIZE_MAX, &f, &err) != QVL_OK) return 0;
    size_t n = f->n_tensors;
    st_close(f);
    return n;
}

static void test_synth(void) {
    static const char *layouts[] = {"hf", "mlx", "sidecar", "sharded", "nested"};
    char dirs[5][600];
    qvl_synth_params p;
    qvl_error err;
    for (int l = 0; l < 5; l++) {
        qvl_synth_params_default(&p);
        p.seed = 7;
        p.layout = (qvl_synth_layout)l;
        snprintf(dirs[l], sizeof dirs[l], "%s/synth-%s", tmp, layouts[l]);
        CHECK(qvl_synth_write(&p, dirs[l], &err) == QVL_OK);
        if (err.status != QVL_OK) fprintf(stderr, "synth %s: %s\n", layouts[l], err.message);
    }
    char path[1024], path2[1024];
#define P(d, f) cat(path, sizeof path, d, f)
    CHECK(exists(P(dirs[0], "config.json")) && exists(P(dirs[0], "preprocessor_config.json")));
    CHECK(count_tensors(P(dirs[0], "model.safetensors")) == 69);
    CHECK(count_tensors(P(dirs[1], "model.safetensors")) == 69);
    CHECK(count_tensors(P(dirs[2], "optiq/optiq_vision.safetensors")) == 69);
    CHECK(count_tensors(P(dirs[2], "model.safetensors")) == 2);
    CHECK(exists(P(dirs[3], "model.safetensors.index.json")));
    size_t shard_total = count_tensors(P(dirs[3], "model-00001-of-00003.safetensors")) +
                         count_tensors(P(dirs[3], "model-00002-of-00003.safetensors")) +
                         count_tensors(P(dirs[3], "model-00003-of-00003.safetensors"));
    CHECK(shard_total == 69 + 4);
    CHECK(count_tensors(P(dirs[4], "model.safetensors")) == 69);

    /* Same values in every layout (MLX conv permuted back). */
    static const char *check[] = {"patch_embed.proj.weight", "blocks.3.attn.qkv.weight", "merger.norm.weight",
                                  "deepstack_merger_list.1.linear_fc2.bias"};
    for (int i = 0; i < 4; i++) {
        char name[160];
        size_t n0 = 0, n1 = 0;
        snprintf(name, sizeof name, "model.visual.%s", check[i]);
        float *ref = load_f32(P(dirs[0], "model.safetensors"), name, &n0, 0);
        snprintf(name, sizeof name, "vision_tower.%s", check[i]);
        int conv = i == 0;
        float *mlx = load_f32(P(dirs[1], "model.safetensors"), name, &n1, conv);
        CHECK(ref && mlx && n0 == n1 && memcmp(ref, mlx, n0 * sizeof(float)) == 0);
        free(mlx);
        mlx = load_f32(P(dirs[2], "optiq/optiq_vision.safetensors"), name, &n1, conv);
        CHECK(mlx && n0 == n1 && memcmp(ref, mlx, n0 * sizeof(float)) == 0);
        free(mlx);
        snprintf(name, sizeof name, "model.language_model.visual.%s", check[i]);
        float *nest = load_f32(P(dirs[4], "model.safetensors"), name, &n1, 0);
        CHECK(nest && n0 == n1 && memcmp(ref, nest, n0 * sizeof(float)) == 0);
        free(nest);
        if (i == 2) { /* LayerNorm weights sit near 1 */
            double mean = 0;
            for (size_t k = 0; ref && k < n0; k++) mean += ref[k];
            CHECK(ref && fabs(mean / (double)n0 - 1.0) < 0.01);
        }
        free(ref);
    }

    /* Byte determinism, and statistics of a weight in f32. */
    qvl_synth_params_default(&p);
    p.seed = 7;
    snprintf(path2, sizeof path2, "%s/synth-hf-again", tmp);
    CHECK(qvl_synth_write(&p, path2, &err) == QVL_OK);
    char a[1024], b[1024];
    cat(a, sizeof a, dirs[0], "model.safetensors");
    cat(b, sizeof b, path2, "model.safetensors");
    CHECK(same_bytes(a, b));
    cat(a, sizeof a, dirs[0], "config.json");
    cat(b, sizeof b, path2, "config.json");
    CHECK(same_bytes(a, b));

    p.dtype = QVL_DTYPE_F32;
    p.seed = 8;
    snprintf(path2, sizeof path2, "%s/synth-f32", tmp);
    CHECK(qvl_synth_write(&p, path2, &err) == QVL_OK);
    size_t n = 0;
    float *w = load_f32(P(path2, "model.safetensors"), "model.visual.blocks.0.mlp.linear_fc1.weight", &n, 0);
    CHECK(w && n == 128 * 64);
    if (w) {
        double s = 0, s2 = 0;
        for (size_t k = 0; k < n; k++) s += w[k], s2 += (double)w[k] * w[k];
        double mean = s / (double)n, sd = sqrt(s2 / (double)n - mean * mean);
        CHECK(fabs(mean) < 0.002 && fabs(sd - 0.02) < 0.002);
        /* A different seed gives different values. */
        size_t n2 = 0;
        cat(a, sizeof a, dirs[0], "model.safetensors");
        float *w7 = load_f32(a, "model.visual.blocks.0.mlp.linear_fc1.weight", &n2, 0);
        CHECK(w7 && n2 == n && memcmp(w, w7, n * sizeof(float)) != 0);
        free(w7);
    }
    free(w);

    /* Overrides: depth 2 keeps the preset's DeepStack indexes below it ([1]); Qwen3.5 has none. */
    qvl_synth_params_default(&p);
    p.depth = 2;
    snprintf(path2, sizeof path2, "%s/synth-d2", tmp);
    CHECK(qvl_synth_write(&p, path2, &err) == QVL_OK);
    CHECK(count_tensors(P(path2, "model.safetensors")) == 2 * 12 + 9 + 6);
    qvl_synth_params_default(&p);
    p.preset = "tiny-3.5";
    snprintf(path2, sizeof path2, "%s/synth-35", tmp);
    CHECK(qvl_synth_write(&p, path2, &err) == QVL_OK);
    CHECK(count_tensors(P(path2, "model.safetensors")) == 4 * 12 + 9);
    qvl_synth_params_default(&p);
    p.n_deepstack = 3;
    p.deepstack_index[0] = 0, p.deepstack_index[1] = 2, p.deepstack_index[2] = 3;
    snprintf(path2, sizeof path2, "%s/synth-ds3", tmp);
    CHECK(qvl_synth_write(&p, path2, &err) == QVL_OK);
    CHECK(count_tensors(P(path2, "model.safetensors")) == 4 * 12 + 9 + 18);

    /* Invalid params. */
    qvl_synth_params_default(&p);
    p.preset = "nope";
    CHECK(qvl_synth_write(&p, path2, &err) == QVL_ERR_INVALID_ARG);
    qvl_synth_params_default(&p);
    p.n_deepstack = 1;
    p.deepstack_index[0] = 4;
    CHECK(qvl_synth_write(&p, path2, &err) == QVL_ERR_INVALID_ARG);
    qvl_synth_params_default(&p);
    p.preset = "tiny-3.5";
    p.n_deepstack = 1;
    CHECK(qvl_synth_write(&p, path2, &err) == QVL_ERR_INVALID_ARG);

    const char *const *names = qvl_synth_presets();
    size_t k = 0;
    while (names[k]) k++;
    CHECK(k == 8);
#undef P
}

int main(void) {
    if (!tu_tmpdir(tmp, sizeof tmp)) {
        fprintf(stderr, "cannot create a temp dir\n");
        return 1;
    }
    test_st_roundtrip();
    test_npy();
    test_files();
    test_synth();
    int rc = tu_finish("test_synth");
    if (rc == 0) {
        if (!tu_rmtree(tmp)) fprintf(stderr, "warning: could not remove %s\n", tmp);
    }
    return rc;
}
