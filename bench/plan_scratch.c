/* plan_scratch.c — what a plan of one input holds and reserves, through the public API alone: the input's rows
 * (qvl_plan_held_bytes) and the context scratch its encode reserves (qvl_plan_scratch_bytes), with the default
 * max_batch_rows (a video above it encoded in pieces of whole temporal patches) and with one pass for everything
 * (max_batch_rows 1000000); with ENCODE "pieces" or "one-pass", the plan of that setting alone is also encoded, timed
 * (run each in its own process under /usr/bin/time for its peak RSS). Not a test. Build and run against a built
 * libqvl:
 *   cc -O1 -I include bench/plan_scratch.c -L build -lqvl -Wl,-rpath,$PWD/build -o /tmp/plan_scratch
 *   /tmp/plan_scratch MODEL_DIR INPUT [f32|bf16 [pieces|one-pass]] */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "qvl.h"

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: plan_scratch MODEL_DIR INPUT [f32|bf16 [pieces|one-pass]]\n");
        return 2;
    }
    qvl_error err;
    qvl_model *m = NULL;
    qvl_ctx *c = NULL;
    qvl_load_params lp;
    qvl_load_params_default(&lp);
    lp.precision = argc > 3 && strcmp(argv[3], "f32") == 0 ? QVL_PRECISION_F32 : QVL_PRECISION_BF16;
    if (qvl_model_load(argv[1], &lp, &m, &err) != QVL_OK || qvl_ctx_create(m, NULL, &c, &err) != QVL_OK) {
        fprintf(stderr, "plan_scratch: %s\n", err.message);
        return 1;
    }
    qvl_item it;
    qvl_item_default(&it);
    it.kind = QVL_ITEM_PATH;
    it.path = argv[2];
    const char *enc = argc > 4 ? argv[4] : NULL;
    if (enc && strcmp(enc, "pieces") != 0 && strcmp(enc, "one-pass") != 0) {
        fprintf(stderr, "plan_scratch: ENCODE is pieces or one-pass, not %s\n", enc);
        return 2;
    }
    for (int k = 0; k < 2; k++) {
        if (enc && k != (strcmp(enc, "one-pass") == 0)) continue;
        qvl_plan_params pp;
        qvl_plan_params_default(&pp);
        pp.max_batch_rows = k ? 1000000 : 0;
        qvl_plan *p = NULL;
        if (qvl_plan_create(c, &it, 1, &pp, &p, &err) != QVL_OK) {
            fprintf(stderr, "plan_scratch: %s\n", err.message);
            return 1;
        }
        qvl_item_info in;
        qvl_plan_item(p, 0, &in);
        if (in.status != QVL_OK) {
            fprintf(stderr, "plan_scratch: %s\n", in.message);
            return 1;
        }
        printf("max_batch_rows %s: %zu rows (grid %dx%dx%d), encode scratch %.0f MiB, rows %.0f MiB\n",
               k ? "1000000 (one pass)" : "default", in.n_rows, in.grid.t, in.grid.h, in.grid.w,
               (double)qvl_plan_scratch_bytes(p) / 1048576.0, (double)qvl_plan_held_bytes(p) / 1048576.0);
        if (enc) {
            void *out = malloc(in.out_bytes ? in.out_bytes : 1);
            struct timespec t0, t1;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            const qvl_status s = out ? qvl_plan_encode(c, p, &out, &err) : QVL_ERR_NOMEM;
            clock_gettime(CLOCK_MONOTONIC, &t1);
            if (s != QVL_OK) fprintf(stderr, "plan_scratch: encode: %s\n", out ? err.message : "out of memory");
            else printf("  encoded in %.2f s (%zu tokens)\n", (double)(t1.tv_sec - t0.tv_sec) +
                        (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9, in.n_tokens);
            free(out);
            if (s != QVL_OK) return 1;
        }
        qvl_plan_free(p);
    }
    qvl_ctx_free(c);
    qvl_model_free(m);
    return 0;
}
