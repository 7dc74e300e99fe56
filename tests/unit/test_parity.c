/* test_parity.c — per-stage parity against the transformers oracle.
 *
 * Each fixture in tests/fixtures was written by tests/oracle/oracle.py (pinned torch/transformers) from a
 * checkpoint made by `qvl synth`; its metadata records the synth parameters and the checkpoint's fingerprint.
 * This test re-creates the checkpoint, checks the fingerprint (so a drifted synth cannot pass silently), encodes
 * the fixture's pixel rows and compares every stage the fixture holds:
 *   gate 1: ‖ours − ref‖ / ‖ref‖ ≤ 1e-4 against the float32 oracle;
 *   gate 2: that error is no larger than transformers' own bf16 run's error at the same stage;
 *   gate 3: max |ours − ref| / rms(ref) ≤ 1e-4, so that an error confined to a few values (one wrong row or
 *           element), which barely moves the L2 norm of a large stage, still fails (docs/PARITY.md).
 * Then the same rows through a model loaded with precision bf16 (bf16 GEMM and attention operands, f32
 * accumulation; the portable bf16 kernels where the CPU has no AVX512-BF16), against the same float32 oracle:
 *   gate 4: at every block, ‖ours − ref‖ / ‖ref‖ ≤ 1/2 of transformers' bf16 run's error at that stage; at the
 *           merged output and every DeepStack feature of a full-depth tower (wide_deep: all 27 blocks) ≤ 1/3 of
 *           it, of a truncated tower (2-4 blocks) ≤ 1/2; patch and pos no worse than it.
 *           Why the two: transformers' bf16 error compounds with depth (every op rounds the residual stream) while
 *           ours grows slowly, so the ratio falls with depth: measured (bench/bf16_fidelity.sh, 448²) from 0.40 at
 *           block 0 to 0.28 at block 26 and 0.275 at the merged output of the 27-block Qwen3.5-27B tower, but
 *           0.385-0.39 at the merged output of the 2- and 4-block fixtures, and 0.35 at Qwen3-VL-2B's first DeepStack
 *           feature (block 5) at full depth: a 1/3 gate there is not met by this arithmetic (docs/PARITY.md). Its
 *           largest parts are the bf16 inputs of fc1 and fc2 (tests/oracle/bf16_ablation.py: only one of those kept
 *           f32 would reach 1/3, and they are the block's largest GEMMs, not small ones that may stay f32). */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/ops.h"
#include "io/safetensors.h"
#include "core/error.h"
#include "qvl.h"
#include "testutil.h"

#define REL_GATE 1e-4
#define MAXABS_GATE 1e-4 /* max |ours − ref| / rms(ref); measured ≤ 6.7e-6 over the committed fixtures */
#define BF16_BLOCK_GATE 0.5  /* bf16 precision: block error / transformers-bf16 error at that block */
#define BF16_OUTPUT_GATE (1.0 / 3.0) /* bf16 precision, full-depth towers: merged and DeepStack error / tf-bf16's */

typedef struct stage_store {
    char names[64][32];
    float *data[64];
    size_t rows[64], cols[64];
    int n;
} stage_store;

static void on_tap(void *user, const char *stage, const float *data, size_t rows, size_t cols) {
    stage_store *s = user;
    if (s->n >= 64) return;
    snprintf(s->names[s->n], sizeof s->names[0], "%s", stage);
    s->data[s->n] = malloc(rows * cols * sizeof(float));
    memcpy(s->data[s->n], data, rows * cols * sizeof(float));
    s->rows[s->n] = rows;
    s->cols[s->n] = cols;
    s->n++;
}

static float *tensor_f32(const st_tensor *t, size_t *n) {
    size_t count = 1;
    for (int i = 0; i < t->ndim; i++) count *= (size_t)t->shape[i];
    float *out = malloc(count * sizeof(float) + 1);
    if (t->dtype == ST_F32) memcpy(out, t->data, count * sizeof(float));
    *n = count;
    return out;
}

static double rms(const float *x, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return n ? sqrt(s / (double)n) : 0;
}

/* max |d| scaled by the reference's RMS (a zero reference: max |d| itself). */
static double scaled_max(double maxabs, const float *ref, size_t n) {
    double r = rms(ref, n);
    return r > 0 ? maxabs / r : maxabs;
}

static int meta_int(const st_file *f, const char *key, int dflt) {
    const char *v = st_meta(f, key);
    return v ? atoi(v) : dflt;
}

/* Gate 4 (see the top): the fixture's rows through a bf16-precision model of checkpoint `dir`. */
static void bf16_pass(const st_file *fx, const char *dir, int linspace, const float *pixels, size_t S,
                      const qvl_grid *grids, size_t n_grids, float *merged) {
    const int full_depth = meta_int(fx, "synth_depth", 0) == 0; /* the preset's own depth */
    qvl_error err;
    qvl_load_params lp;
    qvl_load_params_default(&lp);
    lp.precision = QVL_PRECISION_BF16;
    qvl_model *m = NULL;
    CHECK(qvl_model_load(dir, &lp, &m, &err) == QVL_OK);
    if (!m) { fprintf(stderr, "bf16 load: %s\n", err.message); return; }
    qvl_model_info info;
    qvl_model_get_info(m, &info);
    CHECK(info.precision == QVL_PRECISION_BF16);
    qvl_ctx_params cp;
    qvl_ctx_params_default(&cp);
    cp.pos_mode = linspace ? QVL_POS_LINSPACE : QVL_POS_CLOSED_FORM;
    qvl_ctx *ctx = NULL;
    CHECK(qvl_ctx_create(m, &cp, &ctx, &err) == QVL_OK);
    stage_store st = {0};
    if (ctx) {
        qvl_ctx_set_tap(ctx, on_tap, &st);
        CHECK(qvl_encode(ctx, pixels, S, grids, n_grids, merged, NULL, &err) == QVL_OK);
    }
    printf("  precision bf16 (%s kernels):\n  %-12s %12s %12s %12s %8s\n", info.backend, "stage", "rel err",
           "tf-bf16 rel", "ratio", "gate");
    int compared = 0;
    for (int i = 0; i < st.n; i++) {
        const st_tensor *ref = st_find(fx, st.names[i]);
        char key[64];
        snprintf(key, sizeof key, "bf16_relerr.%s", st.names[i]);
        const char *b = st_meta(fx, key);
        if (!ref || !b) continue;
        size_t n;
        float *r = tensor_f32(ref, &n);
        CHECK(n == st.rows[i] * st.cols[i]);
        if (n != st.rows[i] * st.cols[i]) { free(r); continue; }
        double maxabs, rel = tu_relerr(st.data[i], r, n, &maxabs), bf = atof(b);
        const int blk = strncmp(st.names[i], "blk", 3) == 0;
        const int out = strcmp(st.names[i], "merged") == 0 || strncmp(st.names[i], "deepstack", 9) == 0;
        const double gate = blk ? BF16_BLOCK_GATE : out ? (full_depth ? BF16_OUTPUT_GATE : BF16_BLOCK_GATE) : 1.0;
        printf("  %-12s %12.3e %12.3e %12.3f %8.3f%s\n", st.names[i], rel, bf, bf > 0 ? rel / bf : 0.0, gate,
               rel <= gate * bf ? "" : "  FAIL");
        CHECK(rel <= gate * bf);
        compared++;
        free(r);
    }
    CHECK(compared >= 4);
    for (int i = 0; i < st.n; i++) free(st.data[i]);
    qvl_ctx_free(ctx);
    qvl_model_free(m);
}

static void run_fixture(const char *path) {
    st_file *fx = NULL;
    qvl_error err;
    err_clear(&err);
    CHECK(st_open(path, &fx, &err) == QVL_OK);
    if (!fx) { fprintf(stderr, "%s: %s\n", path, err.message); return; }
    const char *preset = st_meta(fx, "synth_preset");
    const char *fp_want = st_meta(fx, "fingerprint");
    CHECK(preset != NULL && fp_want != NULL);
    if (!preset || !fp_want) { st_close(fx); return; }

    qvl_synth_params sp;
    qvl_synth_params_default(&sp);
    sp.preset = preset;
    sp.seed = (uint64_t)meta_int(fx, "synth_seed", 0);
    sp.depth = meta_int(fx, "synth_depth", 0);
    const char *ds = st_meta(fx, "synth_deepstack");
    if (ds && strcmp(ds, "preset") != 0) {
        sp.n_deepstack = 0;
        for (char *p = (char *)ds; *p && strcmp(p, "none") != 0;) {
            sp.deepstack_index[sp.n_deepstack++] = (int)strtol(p, &p, 10);
            if (*p == ',') p++;
        }
    }
    char dir[256];
    CHECK(tu_tmpdir(dir, sizeof dir) != NULL);
    CHECK(qvl_synth_write(&sp, dir, &err) == QVL_OK);
    qvl_model *m = NULL;
    CHECK(qvl_model_load(dir, NULL, &m, &err) == QVL_OK);
    if (!m) { fprintf(stderr, "%s: %s\n", path, err.message); st_close(fx); return; }
    char hex[33];
    qvl_model_fingerprint(m, NULL, hex, &err);
    CHECK(strcmp(hex, fp_want) == 0);
    if (strcmp(hex, fp_want) != 0) fprintf(stderr, "%s: synth fingerprint %s, fixture made from %s\n", path, hex, fp_want);

    const st_tensor *px = st_find(fx, "pixel_values"), *gt = st_find(fx, "grid_thw");
    CHECK(px && gt && px->dtype == ST_F32 && gt->dtype == ST_I64 && gt->ndim == 2 && gt->shape[1] == 3);
    if (!(px && gt && px->dtype == ST_F32 && gt->dtype == ST_I64)) { qvl_model_free(m); st_close(fx); return; }
    size_t n_grids = (size_t)gt->shape[0], n_px;
    qvl_grid grids[16];
    for (size_t i = 0; i < n_grids && i < 16; i++) {
        int64_t v[3];
        memcpy(v, (const unsigned char *)gt->data + 24 * i, 24);
        grids[i] = (qvl_grid){(int32_t)v[0], (int32_t)v[1], (int32_t)v[2]};
    }
    float *pixels = tensor_f32(px, &n_px);
    qvl_model_info info;
    qvl_model_get_info(m, &info);
    size_t S = qvl_patch_rows(grids, n_grids);
    float *merged = malloc(S / 4 * (size_t)info.out_hidden * sizeof(float));

    qvl_ctx_params cp;
    qvl_ctx_params_default(&cp);
    const char *pm = st_meta(fx, "pos_mode");
    cp.pos_mode = pm && strcmp(pm, "linspace") == 0 ? QVL_POS_LINSPACE : QVL_POS_CLOSED_FORM;
    qvl_ctx *ctx = NULL;
    CHECK(qvl_ctx_create(m, &cp, &ctx, &err) == QVL_OK);
    stage_store st = {0};
    qvl_ctx_set_tap(ctx, on_tap, &st);
    CHECK(qvl_encode(ctx, pixels, S, grids, n_grids, merged, NULL, &err) == QVL_OK);

    printf("%s (%s, grids %zu, S=%zu)\n", strrchr(path, '/') ? strrchr(path, '/') + 1 : path, preset, n_grids, S);
    printf("  %-12s %12s %12s %12s %12s\n", "stage", "rel err", "max abs", "max/rms", "bf16 rel");
    int compared = 0;
    for (int i = 0; i < st.n; i++) {
        const st_tensor *ref = st_find(fx, st.names[i]);
        if (!ref) continue;
        size_t n;
        float *r = tensor_f32(ref, &n);
        CHECK(n == st.rows[i] * st.cols[i]);
        if (n != st.rows[i] * st.cols[i]) { free(r); continue; }
        double maxabs, rel = tu_relerr(st.data[i], r, n, &maxabs), mxr = scaled_max(maxabs, r, n);
        char key[64];
        snprintf(key, sizeof key, "bf16_relerr.%s", st.names[i]);
        const char *b = st_meta(fx, key);
        double bf = b ? atof(b) : -1;
        printf("  %-12s %12.3e %12.3e %12.3e %12.3e%s\n", st.names[i], rel, maxabs, mxr, bf,
               rel <= REL_GATE && (bf < 0 || rel <= bf) && mxr <= MAXABS_GATE ? "" : "  FAIL");
        CHECK(rel <= REL_GATE);
        if (bf >= 0) CHECK(rel <= bf);
        CHECK(mxr <= MAXABS_GATE);
        compared++;
        free(r);
    }
    CHECK(compared >= 4);

    /* Block-chain debug entry: the reference's own post-position hidden state (patch + pos), through the blocks
     * and the merger, must land on the reference's last block and merged output. */
    const st_tensor *rp = st_find(fx, "patch"), *rq = st_find(fx, "pos"), *rm = st_find(fx, "merged");
    char last[32];
    snprintf(last, sizeof last, "blk%d", info.depth - 1);
    const st_tensor *rl = st_find(fx, last);
    CHECK(rp && rq && rm && rl);
    if (rp && rq && rm && rl) {
        size_t n, n2, H = (size_t)info.hidden;
        float *hid = tensor_f32(rp, &n), *pq = tensor_f32(rq, &n2), *ref_l = tensor_f32(rl, &n2);
        float *ref_m = tensor_f32(rm, &n2);
        for (size_t i = 0; i < n; i++) hid[i] = hid[i] + pq[i];
        float *outb = malloc(S * H * sizeof(float));
        qvl_ctx_set_tap(ctx, NULL, NULL);
        CHECK(qvl_run_blocks(ctx, hid, S, grids, n_grids, 0, outb, &err) == QVL_OK);
        double mx1, r1 = tu_relerr(outb, ref_l, S * H, &mx1), s1 = scaled_max(mx1, ref_l, S * H);
        CHECK(qvl_run_blocks(ctx, hid, S, grids, n_grids, 1, merged, &err) == QVL_OK);
        double mx2, r2 = tu_relerr(merged, ref_m, S / 4 * (size_t)info.out_hidden, &mx2);
        double s2 = scaled_max(mx2, ref_m, S / 4 * (size_t)info.out_hidden);
        printf("  run_blocks from the reference's patch+pos: %s rel %.3e max/rms %.3e, merged rel %.3e max/rms %.3e\n",
               last, r1, s1, r2, s2);
        CHECK(r1 <= REL_GATE && r2 <= REL_GATE);
        CHECK(s1 <= MAXABS_GATE && s2 <= MAXABS_GATE);
        free(hid); free(pq); free(ref_l); free(ref_m); free(outb);
    }
    for (int i = 0; i < st.n; i++) free(st.data[i]);
    bf16_pass(fx, dir, pm && strcmp(pm, "linspace") == 0, pixels, S, grids, n_grids, merged);
    free(pixels);
    free(merged);
    qvl_ctx_free(ctx);
    qvl_model_free(m);
    st_close(fx);
    CHECK(tu_rmtree(dir));
}

int main(int argc, char **argv) {
    char dirpath[512];
    tu_source_path("tests/fixtures/tower", dirpath, sizeof dirpath);
    if (argc > 1) {
        for (int i = 1; i < argc; i++) run_fixture(argv[i]);
        return tu_finish("test_parity");
    }
    DIR *d = opendir(dirpath);
    CHECK(d != NULL);
    int n = 0;
    struct dirent *e;
    char names[64][256];
    while (d && (e = readdir(d)) && n < 64) {
        size_t len = strlen(e->d_name);
        if (len > 12 && strcmp(e->d_name + len - 12, ".safetensors") == 0) snprintf(names[n++], 256, "%s", e->d_name);
    }
    if (d) closedir(d);
    qsort(names, (size_t)n, sizeof names[0], (int (*)(const void *, const void *))strcmp);
    CHECK(n >= 5);
    for (int i = 0; i < n; i++) {
        char p[1024];
        CHECK(snprintf(p, sizeof p, "%s/%s", dirpath, names[i]) < (int)sizeof p);
        run_fixture(p);
    }
    return tu_finish("test_parity");
}
