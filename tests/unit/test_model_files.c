/* test_model_files.c — a loaded model reads nothing more from its checkpoint. Once qvl_model_load returns, the
 * safetensors files may be rewritten in place, truncated and removed (a model directory updated under a running
 * server), and the model still gives the same fingerprint and bit-identical outputs, holding no mapping or
 * descriptor of them. Before the load closed its files, the fingerprint (computed later, through the mapping) read
 * the new bytes, and a truncated file made the forward's read of the position table fault with SIGBUS.
 * The preprocessing json files are read by the load too: plans after a rewrite of preprocessor_config.json
 * resize as before, and a bad one fails the plans (with its message), not the load.
 * A describe-only load (qvl info) gives the same description and fingerprint as a full one, holds nothing of the
 * files either, and refuses to make a context. */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "qvl.h"
#include "testutil.h"

static const qvl_grid k_grids[] = {{1, 4, 6}, {2, 2, 4}};

typedef struct result {
    char hex[33];
    float *out; /* merged, then each DeepStack feature */
    size_t n;   /* floats in out */
} result;

/* Fingerprint and outputs of `m` on deterministic rows. */
static int run(qvl_model *m, result *r) {
    qvl_error err;
    qvl_model_info in;
    qvl_model_get_info(m, &in);
    if (qvl_model_fingerprint(m, NULL, r->hex, &err) != QVL_OK) return 0;
    const size_t S = qvl_patch_rows(k_grids, 2), per = S / 4 * (size_t)in.out_hidden;
    float *px = malloc(S * (size_t)in.row_len * sizeof(float));
    r->n = per * (size_t)(1 + in.n_deepstack);
    r->out = malloc(r->n * sizeof(float));
    if (!px || !r->out) return 0;
    uint32_t seed = 7;
    for (size_t i = 0; i < S * (size_t)in.row_len; i++) px[i] = tu_frand(&seed);
    float *ds[QVL_MAX_DEEPSTACK];
    for (int k = 0; k < in.n_deepstack; k++) ds[k] = r->out + per * (size_t)(1 + k);
    qvl_ctx *ctx = NULL;
    const int ok = qvl_ctx_create(m, NULL, &ctx, &err) == QVL_OK &&
                   qvl_encode(ctx, px, S, k_grids, 2, r->out, ds, &err) == QVL_OK;
    if (!ok) fprintf(stderr, "encode: %s\n", err.message);
    qvl_ctx_free(ctx);
    free(px);
    return ok;
}

/* Every *.safetensors file under dir (one level of subdirectories: the sidecar layout's optiq/) overwritten in
 * place with 0xff bytes (NaN in every float type), then truncated to nothing, then removed; the count. */
static int clobber(const char *dir, int depth) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(path, &st) != 0) continue;
        if (S_ISDIR(st.st_mode)) {
            if (depth == 0) n += clobber(path, 1);
            continue;
        }
        const size_t len = strlen(e->d_name);
        if (len < 12 || strcmp(e->d_name + len - 12, ".safetensors") != 0) continue;
        const int fd = open(path, O_WRONLY);
        CHECK(fd >= 0);
        if (fd < 0) continue;
        static unsigned char ff[1 << 16];
        memset(ff, 0xff, sizeof ff);
        int wrote = 1;
        for (off_t at = 0; at < st.st_size && wrote; at += (off_t)sizeof ff) {
            const size_t k = st.st_size - at < (off_t)sizeof ff ? (size_t)(st.st_size - at) : sizeof ff;
            wrote = pwrite(fd, ff, k, at) == (ssize_t)k;
        }
        CHECK(wrote);
        CHECK(ftruncate(fd, 0) == 0);
        close(fd);
        CHECK(unlink(path) == 0);
        n++;
    }
    closedir(d);
    return n;
}

/* Lines of /proc/self/maps and entries of /proc/self/fd naming a path under dir. */
static int held(const char *dir) {
    int n = 0;
    size_t len = 0;
    char *maps = tu_read_file("/proc/self/maps", &len);
    CHECK(maps != NULL && strstr(maps, "[stack]") != NULL);
    for (const char *p = maps; p && (p = strstr(p, dir)); p += strlen(dir)) n++;
    free(maps);
    DIR *d = opendir("/proc/self/fd");
    CHECK(d != NULL);
    for (struct dirent *e; d && (e = readdir(d));) {
        char link[320], target[4096];
        snprintf(link, sizeof link, "/proc/self/fd/%s", e->d_name);
        const ssize_t k = readlink(link, target, sizeof target - 1);
        if (k <= 0) continue;
        target[k] = 0;
        if (strstr(target, dir)) n++;
    }
    if (d) closedir(d);
    return n;
}

static void check_layout(qvl_synth_layout layout, const char *what) {
    char dir[256];
    qvl_error err;
    CHECK(tu_tmpdir(dir, sizeof dir) != NULL);
    if (!tu_synth(dir, "tiny", 11, layout)) return;
    result want = {0}, got = {0};
    qvl_model *ref = NULL, *m = NULL;
    CHECK(qvl_model_load(dir, NULL, &ref, &err) == QVL_OK);
    CHECK(ref && run(ref, &want));
    qvl_model_free(ref);

    CHECK(qvl_model_load(dir, NULL, &m, &err) == QVL_OK);
    if (!m) return;
    qvl_model_info in;
    qvl_model_get_info(m, &in);
    const int n_files = clobber(dir, 0);
    printf("%s: %d checkpoint file(s) rewritten, truncated and removed after the load (info: %d)\n", what, n_files,
           in.n_files);
    CHECK(n_files >= 1 && in.n_files >= 1 && in.n_files <= n_files);
    CHECK(held(dir) == 0);
    CHECK(run(m, &got));
    CHECK(strcmp(got.hex, want.hex) == 0);
    CHECK(got.n == want.n && tu_same_bytes((const unsigned char *)got.out, (const unsigned char *)want.out,
                                           want.n * sizeof(float), what));
    qvl_model_free(m);
    free(want.out);
    free(got.out);
    tu_rmtree(dir);
}

/* The grid a plan on `m` gives a 640x360 RGB image (0 rows: the plan failed; its message in err). */
static qvl_grid plan_grid(qvl_model *m, qvl_error *err) {
    static uint8_t rgb[640 * 360 * 3];
    qvl_grid g = {0, 0, 0};
    qvl_ctx *ctx = NULL;
    if (qvl_ctx_create(m, NULL, &ctx, err) != QVL_OK) return g;
    qvl_item it;
    qvl_item_default(&it);
    it.kind = QVL_ITEM_PIXELS;
    it.image = (qvl_pixels){rgb, 640, 360, 3, 0};
    qvl_plan *plan = NULL;
    if (qvl_plan_create(ctx, &it, 1, NULL, &plan, err) == QVL_OK) {
        qvl_item_info info;
        qvl_plan_item(plan, 0, &info);
        if (info.status == QVL_OK) g = info.grid;
    }
    qvl_plan_free(plan);
    qvl_ctx_free(ctx);
    return g;
}

static void check_preprocess_files(void) {
    char dir[256];
    qvl_error err;
    CHECK(tu_tmpdir(dir, sizeof dir) != NULL);
    if (!tu_synth(dir, "tiny", 13, QVL_LAYOUT_HF)) return;
    qvl_model *m = NULL, *bad = NULL;
    CHECK(qvl_model_load(dir, NULL, &m, &err) == QVL_OK);
    if (!m) return;
    const qvl_grid g = plan_grid(m, &err);
    CHECK(g.h > 0 && g.w > 0);
    static const char small[] = "{\"min_pixels\": 1024, \"max_pixels\": 4096}";
    CHECK(tu_write_file(tu_path(dir, "preprocessor_config.json"), small, sizeof small - 1));
    const qvl_grid g1 = plan_grid(m, &err); /* a re-read would give g2's smaller grid */
    CHECK(g1.t == g.t && g1.h == g.h && g1.w == g.w);
    qvl_model *m2 = NULL; /* the new file is what a new load reads */
    CHECK(qvl_model_load(dir, NULL, &m2, &err) == QVL_OK);
    const qvl_grid g2 = m2 ? plan_grid(m2, &err) : (qvl_grid){0, 0, 0};
    CHECK(g2.h > 0 && (size_t)g2.h * (size_t)g2.w * 256 <= 4096 * 4 && g2.h * g2.w < g.h * g.w);
    qvl_model_free(m2);
    static const char broken[] = "{\"patch_size\": \"x\"}";
    CHECK(tu_write_file(tu_path(dir, "preprocessor_config.json"), broken, sizeof broken - 1));
    const qvl_grid g3 = plan_grid(m, &err); /* the loaded model resizes as its load read */
    CHECK(g3.t == g.t && g3.h == g.h && g3.w == g.w);
    CHECK(qvl_model_load(dir, NULL, &bad, &err) == QVL_OK);
    if (bad) {
        const qvl_grid g4 = plan_grid(bad, &err);
        printf("bad preprocessor_config.json: the load succeeds, a plan says: %s\n", err.message);
        CHECK(g4.h == 0 && err.status != QVL_OK && strstr(err.message, "patch_size") != NULL);
    }
    printf("preprocessing: grid %dx%d as loaded, %dx%d after a rewrite and a new load\n", g.h, g.w, g2.h, g2.w);
    qvl_model_free(bad);
    qvl_model_free(m);
    tu_rmtree(dir);
}

static void check_describe_only(void) {
    char dir[256];
    qvl_error err;
    CHECK(tu_tmpdir(dir, sizeof dir) != NULL);
    if (!tu_synth(dir, "tiny", 12, QVL_LAYOUT_SHARDED)) return;
    qvl_model *full = NULL, *d = NULL;
    qvl_load_params lp;
    qvl_load_params_default(&lp);
    CHECK(lp.describe_only == 0);
    lp.describe_only = 1;
    CHECK(qvl_model_load(dir, NULL, &full, &err) == QVL_OK);
    CHECK(qvl_model_load(dir, &lp, &d, &err) == QVL_OK);
    if (!full || !d) return;
    CHECK(held(dir) == 0);
    qvl_model_info a, b;
    qvl_model_get_info(full, &a);
    qvl_model_get_info(d, &b);
    CHECK(memcmp(&a, &b, sizeof a) == 0);
    char ha[33], hb[33];
    CHECK(qvl_model_fingerprint(full, NULL, ha, &err) == QVL_OK && qvl_model_fingerprint(d, NULL, hb, &err) == QVL_OK);
    CHECK(strcmp(ha, hb) == 0);
    qvl_model *x = (qvl_model *)1;
    lp.describe_only = 2;
    CHECK(qvl_model_load(dir, &lp, &x, &err) == QVL_ERR_INVALID_ARG && x == NULL &&
          strstr(err.message, "describe_only"));
    lp.describe_only = 1, lp.reserved1 = 7;
    CHECK(qvl_model_load(dir, &lp, &x, &err) == QVL_ERR_INVALID_ARG && x == NULL && strstr(err.message, "reserved1"));
    lp.reserved0 = 123, lp.reserved1 = 0; /* the old struct's padding: ignored */
    CHECK(qvl_model_load(dir, &lp, &x, &err) == QVL_OK && x != NULL);
    qvl_model_free(x);
    qvl_ctx *ctx = (qvl_ctx *)1;
    CHECK(qvl_ctx_create(d, NULL, &ctx, &err) == QVL_ERR_INVALID_ARG && ctx == NULL);
    CHECK(strstr(err.message, "describe_only") != NULL);
    printf("describe_only: fingerprint %s; qvl_ctx_create: %s\n", hb, err.message);
    qvl_model_free(d);
    qvl_model_free(full);
    tu_rmtree(dir);
}

int main(void) {
    check_preprocess_files();
    check_describe_only();
    check_layout(QVL_LAYOUT_HF, "hf");
    check_layout(QVL_LAYOUT_MLX, "mlx");
    check_layout(QVL_LAYOUT_SIDECAR, "sidecar");
    check_layout(QVL_LAYOUT_SHARDED, "sharded");
    return tu_finish("test_model_files");
}
