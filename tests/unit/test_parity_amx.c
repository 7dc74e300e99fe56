/* test_parity_amx.c — the fidelity of the AMX bf16 arithmetic (TDPBF16PS's order: gemm_amx.c, src/cpu/bf16.h) at
 * tower level, on CPUs without AMX too.
 *
 * The fixtures of tests/fixtures/tower (transformers' float32 run of each stage, and its own bf16 run's error
 * against it) are encoded on the backend entry "amx-emulated": the AMX GEMM over the C model of the tile
 * instructions (amx_emulated.c), bit for bit what AMX computes, loaded through model_load_on since no request
 * selects a test-only entry. Gates, the precision-bf16 gates of test_parity (gate 4, pu_bf16_gate): at every
 * block ‖ours − f32 oracle‖ / ‖f32 oracle‖ ≤ 1/2 of transformers-bf16's error at that stage; at the merged output
 * and every DeepStack feature ≤ 1/3 of it on full-depth towers (the tiny ones, wide_deep), ≤ 1/2 on truncated ones
 * (wide_single, w2b_deepstack); patch and pos no worse than it. The same rows go through the VDPBF16PS
 * arithmetic too ("avx512bf16", or "portable-bf16", the same bits, on CPUs without AVX512-BF16), gated the same,
 * and the table puts the two side by side; on a CPU where the AMX set is usable, the "amx" entry (the
 * instructions) is run and gated as well.
 *
 * The emulated kernels are scalar C: all the committed fixtures take about 16 s of CPU in Release (with the model's
 * FMA inlined), wide_deep (27 blocks of Qwen3.5-27B widths on 16 rows) more than half. Under AddressSanitizer the
 * model runs several times slower,
 * so a sanitizer build, and a cross build under qemu (757 s for all eight in CI's arm64 stage), runs every fixture
 * but wide_deep (speed only: the same code runs on wide_single's two
 * blocks of the same widths); QVL_PARITY_AMX_ALL=1 runs them all there too. Fixture paths on the command line run
 * just those. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "model/model.h"
#include "parity_util.h"
#include "qvl.h"
#include "testutil.h"

#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif
/* Set by tests.cmake in a cross build, whose tests run under a CPU emulator (qemu): the model is slow there too. */
#ifndef QVL_TEST_UNDER_EMULATOR
#define QVL_TEST_UNDER_EMULATOR 0
#endif

typedef struct run {
    const backend *be;
    pu_bf16_stage st[64];
    int n;
    float *merged;
    size_t n_merged;
    double secs;
} run;

/* The fixture's rows on entry r->be: per-stage errors into r, its merged output kept. 1 when it ran. */
static int run_on(const pu_fixture *f, run *r, int check_fp) {
    qvl_error err;
    qvl_model *m = NULL;
    r->n = 0;
    CHECK(model_load_on(f->dir, NULL, r->be, &m, &err) == QVL_OK);
    if (!m) {
        fprintf(stderr, "%s on %s: %s\n", f->name, r->be->name, err.message);
        return 0;
    }
    qvl_model_info info;
    qvl_model_get_info(m, &info);
    CHECK(strcmp(info.backend, r->be->name) == 0 && info.precision == QVL_PRECISION_BF16);
    if (check_fp) pu_fingerprint_ok(m, f);
    r->n_merged = f->S / 4 * (size_t)info.out_hidden;
    r->merged = calloc(r->n_merged + 1, sizeof(float));
    qvl_ctx *ctx = pu_ctx(m, f);
    stage_store st = {0};
    const double t0 = tu_now();
    pu_encode(ctx, f, &st, r->merged);
    r->secs = tu_now() - t0;
    r->n = pu_bf16_stages(f, &st, r->st, 64);
    CHECK(r->n >= 4);
    pu_stages_free(&st);
    qvl_ctx_free(ctx);
    qvl_model_free(m);
    return 1;
}

/* Values of n floats whose bits differ. */
static size_t bits_differ(const float *a, const float *b, size_t n) {
    size_t d = 0;
    for (size_t i = 0; i < n; i++) d += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return d;
}

static size_t n_differ; /* merged values whose bits differ between the two arithmetics, over all fixtures */

static void run_fixture(const char *path, const backend *amx_emu, const backend *vdp, const backend *amx) {
    pu_fixture f;
    if (!pu_fixture_open(path, &f)) return;
    run runs[3] = {{.be = amx_emu}, {.be = vdp}, {.be = amx}};
    const int n_runs = amx ? 3 : 2;
    int ok = 1;
    for (int k = 0; k < n_runs; k++) ok &= run_on(&f, &runs[k], k == 0);
    if (ok) {
        const run *e = &runs[0], *v = &runs[1];
        printf("%s (%s, grids %zu, S=%zu): %s %.2f s, %s %.2f s", f.name, f.preset, f.n_grids, f.S, e->be->name,
               e->secs, v->be->name, v->secs);
        if (amx) printf(", %s %.2f s", runs[2].be->name, runs[2].secs);
        printf("\n  %-12s %12s %12s %12s %10s %10s %7s\n", "stage", "amx rel", "vdpbf16 rel", "tf-bf16 rel",
               "amx ratio", "vdp ratio", "gate");
        CHECK(e->n == v->n && e->n >= 4);
        for (int i = 0; i < e->n && i < v->n; i++) {
            const pu_bf16_stage *a = &e->st[i], *b = &v->st[i];
            CHECK(strcmp(a->name, b->name) == 0);
            const double tf = a->tf, ra = tf > 0 ? a->rel / tf : 0.0, rb = tf > 0 ? b->rel / tf : 0.0;
            const int pa = a->rel <= a->gate * tf, pb = b->rel <= b->gate * tf;
            printf("  %-12s %12.3e %12.3e %12.3e %10.3f %10.3f %7.3f%s\n", a->name, a->rel, b->rel, tf, ra, rb,
                   a->gate, pa && pb ? "" : pb ? "  FAIL (amx)" : pa ? "  FAIL (vdpbf16)" : "  FAIL (both)");
            CHECK(a->rel <= a->gate * tf);
            CHECK(b->rel <= b->gate * tf);
        }
        const size_t nm = e->n_merged;
        CHECK(v->n_merged == nm);
        const size_t dif = bits_differ(e->merged, v->merged, nm);
        n_differ += dif;
        printf("  merged: %zu of %zu values differ in bits between %s and %s\n", dif, nm, e->be->name, v->be->name);
        if (amx) {
            const run *h = &runs[2];
            CHECK(h->n == e->n);
            for (int i = 0; i < h->n && i < e->n; i++) {
                printf("  %-12s %s rel %.3e (ratio %.3f, gate %.3f)%s\n", h->st[i].name, h->be->name, h->st[i].rel,
                       h->st[i].rel / h->st[i].tf, h->st[i].gate,
                       h->st[i].rel <= h->st[i].gate * h->st[i].tf ? "" : "  FAIL");
                CHECK(h->st[i].rel <= h->st[i].gate * h->st[i].tf);
            }
            printf("  merged: %zu of %zu values differ in bits between %s and %s\n",
                   bits_differ(h->merged, e->merged, nm), nm, h->be->name, e->be->name);
        }
    }
    for (int k = 0; k < n_runs; k++) free(runs[k].merged);
    pu_fixture_close(&f);
}

int main(int argc, char **argv) {
    const backend *amx_emu = backend_find("amx-emulated"), *vdp = backend_find("avx512bf16"), *amx = backend_find("amx");
    CHECK(amx_emu != NULL && amx_emu->precision == QVL_PRECISION_BF16);
    if (!vdp || !backend_runs(vdp)) vdp = backend_find("portable-bf16"); /* the VDPBF16PS arithmetic, same bits */
    CHECK(vdp != NULL);
    if (amx && !backend_runs(amx)) amx = NULL;
    if (!amx_emu || !vdp) return tu_finish("test_parity_amx");
    printf("AMX arithmetic on %s, VDPBF16PS arithmetic on %s%s\n", amx_emu->name, vdp->name,
           amx ? ", and on the AMX instructions (amx)" : "");
    const double t0 = tu_now();
    if (argc > 1) {
        for (int i = 1; i < argc; i++) run_fixture(argv[i], amx_emu, vdp, amx);
        printf("total %.1f s\n", tu_now() - t0);
        return tu_finish("test_parity_amx");
    }
    const char *all = getenv("QVL_PARITY_AMX_ALL");
    const int reduced = (SANITIZED || QVL_TEST_UNDER_EMULATOR) && !(all && strcmp(all, "1") == 0);
    char dirpath[512];
    tu_source_path("tests/fixtures/tower", dirpath, sizeof dirpath);
    char names[64][256];
    const int n = pu_list_fixtures(dirpath, names, 64);
    CHECK(n >= 5);
    int ran = 0, full = 0;
    for (int i = 0; i < n; i++) {
        if (reduced && strcmp(names[i], "wide_deep.safetensors") == 0) {
            printf("%s: not run in a sanitizer build or under a CPU emulator (speed only: the model of the tiles is "
                   "several times slower there; QVL_PARITY_AMX_ALL=1 runs it)\n", names[i]);
            continue;
        }
        char p[1024];
        CHECK(snprintf(p, sizeof p, "%s/%s", dirpath, names[i]) < (int)sizeof p);
        run_fixture(p, amx_emu, vdp, amx);
        ran++;
        full += strcmp(names[i], "wide_deep.safetensors") == 0;
    }
    CHECK(ran >= 5);
    CHECK(n_differ > 0); /* the AMX order ran, not the VDPBF16PS one again */
    CHECK(reduced || full == 1); /* the 1/3 output gate is checked on a full-depth tower */
    printf("total %.1f s\n", tu_now() - t0);
    return tu_finish("test_parity_amx");
}
