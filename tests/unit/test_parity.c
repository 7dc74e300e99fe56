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
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/ops.h"
#include "io/safetensors.h"
#include "core/error.h"
#include "parity_util.h"
#include "qvl.h"
#include "testutil.h"

#define REL_GATE 1e-4
#define MAXABS_GATE 1e-4 /* max |ours − ref| / rms(ref); measured ≤ 6.7e-6 over the committed fixtures */
/* BF16_BLOCK_GATE, BF16_OUTPUT_GATE: parity_util.h (pu_bf16_gate), shared with test_parity_amx */

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

/* Gate 4 (see the top): the fixture's rows through a bf16-precision model of its checkpoint. */
static void bf16_pass(const pu_fixture *f, float *merged) {
    qvl_error err;
    qvl_load_params lp;
    qvl_load_params_default(&lp);
    lp.precision = QVL_PRECISION_BF16;
    qvl_model *m = NULL;
    CHECK(qvl_model_load(f->dir, &lp, &m, &err) == QVL_OK);
    if (!m) { fprintf(stderr, "bf16 load: %s\n", err.message); return; }
    qvl_model_info info;
    qvl_model_get_info(m, &info);
    CHECK(info.precision == QVL_PRECISION_BF16);
    qvl_ctx *ctx = pu_ctx(m, f);
    stage_store st = {0};
    pu_encode(ctx, f, &st, merged);
    printf("  precision bf16 (%s kernels):\n  %-12s %12s %12s %12s %8s\n", info.backend, "stage", "rel err",
           "tf-bf16 rel", "ratio", "gate");
    pu_bf16_stage rows[64];
    const int compared = pu_bf16_stages(f, &st, rows, 64);
    for (int i = 0; i < compared; i++) {
        const pu_bf16_stage *r = &rows[i];
        printf("  %-12s %12.3e %12.3e %12.3f %8.3f%s\n", r->name, r->rel, r->tf, r->tf > 0 ? r->rel / r->tf : 0.0,
               r->gate, r->rel <= r->gate * r->tf ? "" : "  FAIL");
        CHECK(r->rel <= r->gate * r->tf);
    }
    CHECK(compared >= 4);
    pu_stages_free(&st);
    qvl_ctx_free(ctx);
    qvl_model_free(m);
}

static void run_fixture(const char *path) {
    pu_fixture f;
    if (!pu_fixture_open(path, &f)) return;
    qvl_error err;
    qvl_model *m = NULL;
    CHECK(qvl_model_load(f.dir, NULL, &m, &err) == QVL_OK);
    if (!m) { fprintf(stderr, "%s: %s\n", path, err.message); pu_fixture_close(&f); return; }
    pu_fingerprint_ok(m, &f);

    qvl_model_info info;
    qvl_model_get_info(m, &info);
    const size_t S = f.S;
    float *merged = malloc(S / 4 * (size_t)info.out_hidden * sizeof(float));
    qvl_ctx *ctx = pu_ctx(m, &f);
    stage_store st = {0};
    pu_encode(ctx, &f, &st, merged);

    printf("%s (%s, grids %zu, S=%zu)\n", f.name, f.preset, f.n_grids, S);
    printf("  %-12s %12s %12s %12s %12s\n", "stage", "rel err", "max abs", "max/rms", "bf16 rel");
    int compared = 0;
    for (int i = 0; i < st.n; i++) {
        const st_tensor *ref = st_find(f.fx, st.names[i]);
        if (!ref) continue;
        size_t n;
        float *r = pu_tensor_f32(ref, &n);
        CHECK(n == st.rows[i] * st.cols[i]);
        if (n != st.rows[i] * st.cols[i]) { free(r); continue; }
        double maxabs, rel = tu_relerr(st.data[i], r, n, &maxabs), mxr = scaled_max(maxabs, r, n);
        char key[64];
        snprintf(key, sizeof key, "bf16_relerr.%s", st.names[i]);
        const char *b = st_meta(f.fx, key);
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
    const st_tensor *rp = st_find(f.fx, "patch"), *rq = st_find(f.fx, "pos"), *rm = st_find(f.fx, "merged");
    char last[32];
    snprintf(last, sizeof last, "blk%d", info.depth - 1);
    const st_tensor *rl = st_find(f.fx, last);
    CHECK(rp && rq && rm && rl);
    if (rp && rq && rm && rl && ctx) {
        size_t n, n2, H = (size_t)info.hidden;
        float *hid = pu_tensor_f32(rp, &n), *pq = pu_tensor_f32(rq, &n2), *ref_l = pu_tensor_f32(rl, &n2);
        float *ref_m = pu_tensor_f32(rm, &n2);
        for (size_t i = 0; i < n; i++) hid[i] = hid[i] + pq[i];
        float *outb = malloc(S * H * sizeof(float));
        CHECK(qvl_run_blocks(ctx, hid, S, f.grids, f.n_grids, 0, outb, &err) == QVL_OK);
        double mx1, r1 = tu_relerr(outb, ref_l, S * H, &mx1), s1 = scaled_max(mx1, ref_l, S * H);
        CHECK(qvl_run_blocks(ctx, hid, S, f.grids, f.n_grids, 1, merged, &err) == QVL_OK);
        double mx2, r2 = tu_relerr(merged, ref_m, S / 4 * (size_t)info.out_hidden, &mx2);
        double s2 = scaled_max(mx2, ref_m, S / 4 * (size_t)info.out_hidden);
        printf("  run_blocks from the reference's patch+pos: %s rel %.3e max/rms %.3e, merged rel %.3e max/rms %.3e\n",
               last, r1, s1, r2, s2);
        CHECK(r1 <= REL_GATE && r2 <= REL_GATE);
        CHECK(s1 <= MAXABS_GATE && s2 <= MAXABS_GATE);
        free(hid); free(pq); free(ref_l); free(ref_m); free(outb);
    }
    pu_stages_free(&st);
    bf16_pass(&f, merged);
    free(merged);
    qvl_ctx_free(ctx);
    qvl_model_free(m);
    pu_fixture_close(&f);
}

int main(int argc, char **argv) {
    char dirpath[512];
    tu_source_path("tests/fixtures/tower", dirpath, sizeof dirpath);
    if (argc > 1) {
        for (int i = 1; i < argc; i++) run_fixture(argv[i]);
        return tu_finish("test_parity");
    }
    char names[64][256];
    const int n = pu_list_fixtures(dirpath, names, 64);
    CHECK(n >= 5);
    for (int i = 0; i < n; i++) {
        char p[1024];
        CHECK(snprintf(p, sizeof p, "%s/%s", dirpath, names[i]) < (int)sizeof p);
        run_fixture(p);
    }
    return tu_finish("test_parity");
}
