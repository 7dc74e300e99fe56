/* consumer.c — a program outside the tree using installed libqvl through qvl.h only (tests/install.sh builds it
 * against the shared and the static library, by pkg-config and by CMake): a tiny synthetic checkpoint written,
 * loaded and encoded; prints the version and the first output value. Usage: consumer TMPDIR */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <qvl.h>

static int fail(const char *what, const qvl_error *err) {
    fprintf(stderr, "consumer: %s: %s (%s)\n", what, err->message, qvl_status_name(err->status));
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 2) return fprintf(stderr, "usage: consumer TMPDIR\n"), 2;
    if (qvl_version_number() / 10000 != QVL_VERSION_MAJOR) return fprintf(stderr, "consumer: major mismatch\n"), 1;
    qvl_error err;
    qvl_synth_params sp;
    qvl_synth_params_default(&sp);
    sp.preset = "tiny";
    sp.depth = 2;
    sp.seed = 7;
    if (qvl_synth_write(&sp, argv[1], &err) != QVL_OK) return fail("qvl_synth_write", &err);
    qvl_model *m = NULL;
    if (qvl_model_load(argv[1], NULL, &m, &err) != QVL_OK) return fail("qvl_model_load", &err);
    qvl_model_info info;
    qvl_model_get_info(m, &info);
    qvl_ctx_params cp;
    qvl_ctx_params_default(&cp);
    cp.n_threads = 2;
    qvl_ctx *ctx = NULL;
    if (qvl_ctx_create(m, &cp, &ctx, &err) != QVL_OK) return qvl_model_free(m), fail("qvl_ctx_create", &err);
    const qvl_grid grid = {1, 4, 6};
    const size_t rows = qvl_patch_rows(&grid, 1), tokens = qvl_merged_tokens(&grid, 1);
    float *px = malloc(rows * (size_t)info.row_len * sizeof *px);
    float *out = malloc(tokens * (size_t)info.out_hidden * sizeof *out);
    int rc = !px || !out;
    for (size_t i = 0; !rc && i < rows * (size_t)info.row_len; i++) px[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
    if (!rc && qvl_encode(ctx, px, rows, &grid, 1, out, NULL, &err) != QVL_OK) rc = fail("qvl_encode", &err);
    size_t finite = 0, nonzero = 0;
    for (size_t i = 0; !rc && i < tokens * (size_t)info.out_hidden; i++) {
        finite += isfinite(out[i]) != 0;
        nonzero += out[i] != 0.0f;
    }
    if (!rc && (finite != tokens * (size_t)info.out_hidden || nonzero == 0)) {
        fprintf(stderr, "consumer: %zu of %zu outputs finite, %zu nonzero\n", finite, tokens * (size_t)info.out_hidden,
                nonzero);
        rc = 1;
    }
    if (!rc)
        printf("consumer: libqvl %s, %s depth %d: %zu tokens x %d, out[0] = %.6g\n", qvl_version(), info.model_type,
               info.depth, tokens, info.out_hidden, (double)out[0]);
    free(px), free(out);
    qvl_ctx_free(ctx);
    qvl_model_free(m);
    return rc;
}
