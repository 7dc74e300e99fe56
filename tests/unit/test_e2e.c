/* test_e2e.c — a photograph to embeddings, end to end, against transformers.
 *
 * tests/fixtures/e2e_*.safetensors (tests/oracle/e2e_oracle.py) hold what transformers 5.23 gives for an image
 * file: load_image, the checkpoint's AutoImageProcessor (the default torchvision-backed one) and the vision model
 * in float32: the merged output, every DeepStack feature, grid_thw, and the processor rows' xxh64 digest. This test
 * re-creates the checkpoint from the recorded synth recipe (the fingerprint must match), checks the input file is
 * the one the oracle read (size and xxh64 of its bytes), and then:
 *   - runs `qvl encode --model CKPT IMAGE -o OUT.safetensors` (QVL_BIN) and compares item0.merged and every
 *     item0.deepstack{k}, and `qvl encode --preprocess-only` and compares the rows' digest (bit for bit);
 *   - does the same through the library (qvl_image_load, qvl_preprocess_params_load, qvl_preprocess_image,
 *     qvl_encode), so the path is checked when the CLI is not built.
 * Gates per output: ‖ours − ref‖ / ‖ref‖ ≤ 1e-4, max |ours − ref| / rms(ref) ≤ 1e-4, and the grid equal. */
#include <dirent.h>
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include "core/error.h"
#include "io/safetensors.h"
#include "qvl.h"
#include "testutil.h"

#define REL_GATE 1e-4    /* ‖ours − ref‖ / ‖ref‖ */
#define MAXABS_GATE 1e-4 /* max |ours − ref| / rms(ref); see docs/PARITY.md */

/* A float32 tensor copied out (fixture data need not be 4-byte aligned); NULL if absent or not f32. */
static float *tensor_f32(const st_file *f, const char *name, size_t *n) {
    const st_tensor *t = st_find(f, name);
    if (!t || t->dtype != ST_F32) return NULL;
    *n = t->nbytes / 4;
    float *out = malloc(t->nbytes + 1);
    if (out) memcpy(out, t->data, t->nbytes);
    return out;
}

static double rms(const float *x, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return n ? sqrt(s / (double)n) : 0;
}

/* Compare one output with the fixture's; prints a table row. */
static void compare(const char *what, const char *name, const float *ours, size_t n, const st_file *fx) {
    size_t nr = 0;
    float *ref = tensor_f32(fx, name, &nr);
    CHECK(ref != NULL && nr == n);
    if (!ref || nr != n) {
        printf("  %-8s %-12s missing or %zu values, reference %zu\n", what, name, n, nr);
        free(ref);
        return;
    }
    double mx, rel = tu_relerr(ours, ref, n, &mx), r = rms(ref, n), mxr = r > 0 ? mx / r : mx;
    char key[64];
    snprintf(key, sizeof key, "bf16_relerr.%s", name);
    const char *b = st_meta(fx, key);
    int ok = rel <= REL_GATE && mxr <= MAXABS_GATE;
    printf("  %-8s %-12s %12.3e %12.3e %12.3e %12.3e%s\n", what, name, rel, mx, mxr, b ? atof(b) : -1.0,
           ok ? "" : "  FAIL");
    CHECK(rel <= REL_GATE);
    CHECK(mxr <= MAXABS_GATE);
    free(ref);
}

static int xxh64_matches(const st_file *fx, const char *key, const void *data, size_t n) {
    const char *want = st_meta(fx, key);
    return want && strtoull(want, NULL, 10) == (unsigned long long)XXH64(data, n, 0);
}

/* Run argv[0] with argv (no shell: paths may hold any character); its exit status, or -1. */
static int run_cmd(char *const argv[]) {
    fflush(stdout);
    pid_t pid;
    if (posix_spawn(&pid, argv[0], NULL, NULL, argv, environ) != 0) return -1;
    int st;
    if (waitpid(pid, &st, 0) != pid) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The CLI path: qvl encode, then qvl encode --preprocess-only. */
static void run_cli(const char *bin, const char *ckpt, const char *image, const char *max_pixels, const char *tmp,
                    const st_file *fx, const int64_t want_grid[3], int n_ds) {
    char out[600], pre[600];
    snprintf(out, sizeof out, "%s/out.safetensors", tmp);
    snprintf(pre, sizeof pre, "%s/pre.safetensors", tmp);
    /* qvl encode -q --model CKPT [--max-pixels N] IMAGE -o OUT, and the same with --preprocess-only */
    char *argv[16];
    int a = 0;
    argv[a++] = (char *)bin, argv[a++] = "encode", argv[a++] = "-q", argv[a++] = "--model", argv[a++] = (char *)ckpt;
    if (strcmp(max_pixels, "0") != 0) argv[a++] = "--max-pixels", argv[a++] = (char *)max_pixels;
    const int tail = a;
    argv[a++] = (char *)image, argv[a++] = "-o", argv[a++] = out, argv[a] = NULL;
    double t0 = tu_now();
    int rc = run_cmd(argv);
    double t_enc = tu_now() - t0;
    CHECK(rc == 0);
    a = tail;
    argv[a++] = "--preprocess-only", argv[a++] = (char *)image, argv[a++] = "-o", argv[a++] = pre, argv[a] = NULL;
    int rc2 = run_cmd(argv);
    CHECK(rc2 == 0);
    if (rc != 0 || rc2 != 0) { printf("  cli: %s encode failed (%d, %d)\n", bin, rc, rc2); return; }
    printf("  cli: qvl encode ran in %.2f s\n", t_enc);

    qvl_error err;
    st_file *o = NULL, *p = NULL;
    CHECK(st_load(out, SIZE_MAX, &o, &err) == QVL_OK);
    if (o) {
        const st_tensor *g = st_find(o, "grid_thw");
        int64_t got[3] = {0};
        CHECK(g && g->dtype == ST_I64 && g->nbytes == 24);
        if (g && g->nbytes == 24) memcpy(got, g->data, 24);
        CHECK(got[0] == want_grid[0] && got[1] == want_grid[1] && got[2] == want_grid[2]);
        size_t n = 0;
        float *m = tensor_f32(o, "item0.merged", &n);
        CHECK(m != NULL);
        if (m) compare("cli", "merged", m, n, fx);
        free(m);
        for (int k = 0; k < n_ds; k++) {
            char name[48], ref[32];
            snprintf(name, sizeof name, "item0.deepstack%d", k);
            snprintf(ref, sizeof ref, "deepstack%d", k);
            float *d = tensor_f32(o, name, &n);
            CHECK(d != NULL);
            if (d) compare("cli", ref, d, n, fx);
            free(d);
        }
        char extra_ds[48];
        snprintf(extra_ds, sizeof extra_ds, "item0.deepstack%d", n_ds);
        CHECK(st_find(o, extra_ds) == NULL); /* no more DeepStack features than the reference */
        st_close(o);
    }
    CHECK(st_load(pre, SIZE_MAX, &p, &err) == QVL_OK);
    if (p) {
        const st_tensor *t = st_find(p, "item0.pixel_values");
        int same = t && xxh64_matches(fx, "pixel_values.xxh64", t->data, t->nbytes);
        printf("  cli: pixel rows %s transformers' processor\n", same ? "bit-identical to" : "DIFFER from");
        CHECK(same);
        st_close(p);
    }
}

/* The library path: decode, the model's preprocessing settings, preprocess, encode. */
static void run_lib(qvl_model *m, const char *ckpt, const char *image, const char *max_pixels, const st_file *fx,
                    const int64_t want_grid[3]) {
    qvl_error err;
    qvl_model_info info;
    qvl_model_get_info(m, &info);
    qvl_preprocess_params pp;
    qvl_preprocess_params_default(&pp);
    CHECK(qvl_preprocess_params_load(ckpt, &pp, NULL, &err) == QVL_OK);
    if (strcmp(max_pixels, "0") != 0) pp.max_pixels = strtoull(max_pixels, NULL, 10);
    qvl_image img = {0};
    CHECK(qvl_image_load(image, NULL, &img, &err) == QVL_OK);
    if (!img.rgb) { printf("  lib: %s\n", err.message); return; }
    qvl_grid grid;
    CHECK(qvl_image_grid(&img, &pp, &grid, &err) == QVL_OK);
    CHECK(grid.t == want_grid[0] && grid.h == want_grid[1] && grid.w == want_grid[2]);
    if (grid.t != want_grid[0] || grid.h != want_grid[1] || grid.w != want_grid[2]) {
        printf("  lib: grid %dx%dx%d, reference %lldx%lldx%lld\n", grid.t, grid.h, grid.w, (long long)want_grid[0],
               (long long)want_grid[1], (long long)want_grid[2]);
        qvl_image_free(&img);
        return;
    }
    size_t S = qvl_patch_rows(&grid, 1), T = S / 4, O = (size_t)info.out_hidden;
    float *rows = malloc(S * (size_t)info.row_len * sizeof(float)), *merged = malloc(T * O * sizeof(float));
    float *ds[QVL_MAX_DEEPSTACK] = {0};
    for (int k = 0; k < info.n_deepstack; k++) ds[k] = malloc(T * O * sizeof(float));
    CHECK(qvl_preprocess_image(&img, &pp, rows, &grid, &err) == QVL_OK);
    int same = xxh64_matches(fx, "pixel_values.xxh64", rows, S * (size_t)info.row_len * sizeof(float));
    printf("  lib: pixel rows %s transformers' processor\n", same ? "bit-identical to" : "DIFFER from");
    CHECK(same);
    qvl_ctx *ctx = NULL;
    CHECK(qvl_ctx_create(m, NULL, &ctx, &err) == QVL_OK);
    CHECK(ctx && qvl_encode(ctx, rows, S, &grid, 1, merged, info.n_deepstack ? ds : NULL, &err) == QVL_OK);
    if (!ctx) printf("  lib: %s\n", err.message);
    compare("lib", "merged", merged, T * O, fx);
    for (int k = 0; k < info.n_deepstack; k++) {
        char ref[32];
        snprintf(ref, sizeof ref, "deepstack%d", k);
        compare("lib", ref, ds[k], T * O, fx);
    }
    qvl_ctx_free(ctx);
    for (int k = 0; k < info.n_deepstack; k++) free(ds[k]);
    free(rows);
    free(merged);
    qvl_image_free(&img);
}

static void run_fixture(const char *path) {
    qvl_error err;
    err_clear(&err);
    st_file *fx = NULL;
    CHECK(st_load(path, SIZE_MAX, &fx, &err) == QVL_OK);
    if (!fx) { printf("%s: %s\n", path, err.message); return; }
    const char *preset = st_meta(fx, "synth_preset"), *fp_want = st_meta(fx, "fingerprint");
    const char *image_rel = st_meta(fx, "image"), *max_pixels = st_meta(fx, "max_pixels");
    const char *seed = st_meta(fx, "synth_seed"), *depth = st_meta(fx, "synth_depth");
    const char *ds = st_meta(fx, "synth_deepstack"), *outputs = st_meta(fx, "outputs");
    CHECK(preset && fp_want && image_rel && max_pixels && seed && depth && ds && outputs);
    if (!(preset && fp_want && image_rel && max_pixels && seed && depth && ds && outputs)) { st_close(fx); return; }
    const st_tensor *gt = st_find(fx, "grid_thw");
    CHECK(gt && gt->dtype == ST_I64 && gt->nbytes == 24);
    int64_t grid[3] = {0};
    if (gt && gt->nbytes == 24) memcpy(grid, gt->data, 24);
    printf("%s: %s through the %s synth (seed %s, depth %s, deepstack %s), max_pixels %s, grid %lldx%lldx%lld\n",
           strrchr(path, '/') ? strrchr(path, '/') + 1 : path, image_rel, preset, seed, depth, ds, max_pixels,
           (long long)grid[0], (long long)grid[1], (long long)grid[2]);

    /* The input is the file the oracle read. */
    char image[1024];
    tu_source_path(image_rel, image, sizeof image);
    FILE *f = fopen(image, "rb");
    CHECK(f != NULL);
    unsigned char *bytes = NULL;
    long nb = 0;
    if (f && fseek(f, 0, SEEK_END) == 0 && (nb = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (bytes = malloc((size_t)nb)) && fread(bytes, 1, (size_t)nb, f) != (size_t)nb)
        nb = -1;
    if (f) fclose(f);
    const char *want_bytes = st_meta(fx, "image_bytes");
    CHECK(want_bytes && nb == atol(want_bytes));
    CHECK(bytes && xxh64_matches(fx, "image_xxh64", bytes, (size_t)nb));
    free(bytes);

    /* The checkpoint, from its recipe. */
    qvl_synth_params sp;
    qvl_synth_params_default(&sp);
    sp.preset = preset;
    sp.seed = strtoull(seed, NULL, 10);
    sp.depth = atoi(depth);
    if (strcmp(ds, "preset") != 0) {
        sp.n_deepstack = 0;
        for (const char *p = ds; *p && strcmp(p, "none") != 0 && sp.n_deepstack < QVL_MAX_DEEPSTACK;) {
            char *end;
            sp.deepstack_index[sp.n_deepstack++] = (int)strtol(p, &end, 10);
            p = *end == ',' ? end + 1 : end;
        }
    }
    char tmp[256], ckpt[300];
    CHECK(tu_tmpdir(tmp, sizeof tmp) != NULL);
    snprintf(ckpt, sizeof ckpt, "%s/ckpt", tmp);
    CHECK(qvl_synth_write(&sp, ckpt, &err) == QVL_OK);
    qvl_model *m = NULL;
    CHECK(qvl_model_load(ckpt, NULL, &m, &err) == QVL_OK);
    if (!m) { printf("  %s\n", err.message); st_close(fx); tu_rmtree(tmp); return; }
    char hex[33] = "";
    CHECK(qvl_model_fingerprint(m, NULL, hex, &err) == QVL_OK);
    CHECK(strcmp(hex, fp_want) == 0);
    if (strcmp(hex, fp_want) != 0) printf("  synth fingerprint %s, fixture made from %s\n", hex, fp_want);
    qvl_model_info info;
    qvl_model_get_info(m, &info);
    int n_ref_ds = 0; /* the reference's outputs: merged,deepstack0,... */
    for (const char *p = outputs; (p = strstr(p, "deepstack")); p++) n_ref_ds++;
    CHECK(info.n_deepstack == n_ref_ds);

    printf("  %-8s %-12s %12s %12s %12s %12s\n", "path", "output", "rel err", "max abs", "max/rms", "bf16 rel");
    const char *bin = getenv("QVL_BIN");
    if (bin && *bin) run_cli(bin, ckpt, image, max_pixels, tmp, fx, grid, n_ref_ds);
    else printf("  cli: QVL_BIN not set (CLI not built): library path only\n");
    run_lib(m, ckpt, image, max_pixels, fx, grid);

    qvl_model_free(m);
    st_close(fx);
    CHECK(tu_rmtree(tmp));
}

int main(int argc, char **argv) {
    if (!QVL_WITH_MEDIA) { /* the photograph needs the JPEG decoder */
        printf("test_e2e: skipped, built without image decoders (QVL_MEDIA=OFF)\n");
        return 77;
    }
    if (argc > 1) {
        for (int i = 1; i < argc; i++) run_fixture(argv[i]);
        return tu_finish("test_e2e");
    }
    char dirpath[512];
    tu_source_path("tests/fixtures", dirpath, sizeof dirpath);
    DIR *d = opendir(dirpath);
    CHECK(d != NULL);
    int n = 0;
    char names[16][256];
    struct dirent *e;
    while (d && (e = readdir(d)) && n < 16) {
        size_t len = strlen(e->d_name);
        if (strncmp(e->d_name, "e2e_", 4) == 0 && len > 12 && strcmp(e->d_name + len - 12, ".safetensors") == 0)
            snprintf(names[n++], sizeof names[0], "%s", e->d_name);
    }
    if (d) closedir(d);
    qsort(names, (size_t)n, sizeof names[0], (int (*)(const void *, const void *))strcmp);
    CHECK(n >= 1);
    for (int i = 0; i < n; i++) {
        char p[1024];
        snprintf(p, sizeof p, "%.500s/%.255s", dirpath, names[i]);
        run_fixture(p);
    }
    return tu_finish("test_e2e");
}
