/* test_attention.c — attn_run_isa (portable, AVX2 and AVX-512 blocks, each where the CPU has it) against attn_ref:
 * unequal segments (length 1, lengths around the query/key tiles), head_dim 8..80 and 12 (portable fallback),
 * Q/K/V as thirds of a fused [S, 3H] buffer, NaN-poisoned output, bit-identical results for 1 and 2 threads. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/attention.h"
#include "cpu/kernels_avx2.h"
#include "cpu/kernels_avx512.h"
#include "testutil.h"

static uint32_t rng = 777u;
static float frand(void) { return tu_frand(&rng); }

static attn_isa isa = ATTN_ISA_AUTO;

static void run_case(const int *lens, int n_seg, int nh, int hd, float qmag) {
    int cu[16];
    cu[0] = 0;
    for (int s = 0; s < n_seg; s++) cu[s + 1] = cu[s] + lens[s];
    const int S = cu[n_seg], H = nh * hd;
    const size_t ldqkv = (size_t)3 * H, ldo = (size_t)H + 4;
    float *qkv = malloc((size_t)S * ldqkv * sizeof(float));
    for (size_t i = 0; i < (size_t)S * ldqkv; i++) qkv[i] = frand() * ((i % ldqkv) < (size_t)H ? qmag : 1.0f);
    /* Each output ends at its last element, at a guard page: a store past it faults (masked stores escape ASan). */
    const size_t on = S > 0 ? (size_t)(S - 1) * ldo + (size_t)H : 0;
    float *outs[4];
    for (int x = 0; x < 4; x++) {
        outs[x] = tu_guarded_alloc(on * sizeof(float));
        if (!outs[x]) {
            fprintf(stderr, "cannot map guarded outputs\n");
            exit(1);
        }
        for (size_t i = 0; i < on; i++) outs[x][i] = nanf("");
    }
    unsigned char *wsbuf = malloc(attn_workspace_size(hd, 2) + 4);
    void *ws = wsbuf + 4; /* misaligned on purpose: attn_run aligns inside its slack */
    attn_args a = {qkv, qkv + H, qkv + 2 * H, ldqkv, ldqkv, ldqkv, outs[0], ldo, nh, hd, cu, n_seg,
                   1.0f / sqrtf((float)hd), NULL, 0, NULL, NULL, NULL, NULL};
    attn_ref(&a);
    a.out = outs[1];
    attn_run_isa(&a, ws, tu_pool(1), isa);
    a.out = outs[2];
    attn_run_isa(&a, ws, tu_pool(2), isa);
    a.out = outs[3];
    attn_run_scalar(&a, ws, tu_pool(2));

    int ok_fast = 1, ok_scalar = 1, ok_threads = 1, ok_pad = 1;
    double worst = 0.0;
    for (int i = 0; i < S; i++) {
        for (int c = 0; c < H; c++) {
            const size_t e = (size_t)i * ldo + c;
            const double r = outs[0][e];
            /* outputs are convex combinations of v in [-1, 1]: absolute error against a unit scale */
            const double ef = fabs(outs[1][e] - r), es = fabs(outs[3][e] - r);
            if (ef > worst) worst = ef;
            if (!(ef <= 2e-6)) ok_fast = 0;
            if (!(es <= 2e-6)) ok_scalar = 0;
            if (memcmp(&outs[1][e], &outs[2][e], 4)) ok_threads = 0;
        }
        for (size_t c = (size_t)H; c < ldo && i + 1 < S; c++) /* the last row's padding is the guard page */
            if (!isnan(outs[1][(size_t)i * ldo + c])) ok_pad = 0;
    }
    if (!ok_fast || !ok_scalar || !ok_threads || !ok_pad)
        fprintf(stderr, "isa=%d nseg=%d nh=%d hd=%d qmag=%g: fast %d scalar %d threads %d pad %d (max err %.3g)\n",
                (int)isa, n_seg, nh, hd, qmag, ok_fast, ok_scalar, ok_threads, ok_pad, worst);
    CHECK(ok_fast);
    CHECK(ok_scalar);
    CHECK(ok_threads);
    CHECK(ok_pad);
    free(wsbuf);
    free(qkv);
    for (int x = 0; x < 4; x++) tu_guarded_free(outs[x]);
}

int main(void) {
    if (!cpu_has_avx2()) printf("test_attention: no AVX2 on this CPU, portable blocks only\n");
    else if (!cpu_has_avx512()) printf("test_attention: no AVX-512 on this CPU, its block untested here\n");
    const attn_isa isas[4] = {ATTN_ISA_AUTO, ATTN_ISA_SCALAR, ATTN_ISA_AVX2, ATTN_ISA_AVX512};
    const int n_isa = cpu_has_avx512() ? 4 : cpu_has_avx2() ? 3 : 2;
    /* Around ATTN_BQ = 192 and ATTN_BK = 64 (193 rows and 65 keys are now single tiles that took a tail; 400 rows
     * and keys split), and the 6/12-row blocks (11, 13, 25) and 16-key groups (17, 33). */
    const int lens1[] = {1, 47, 191, 192, 193, 64, 65, 400};
    /* Tails taken by the tile before them (up to ATTN_BQ_MAX = 240 rows, ATTN_BK_MAX = 80 keys) and one past:
     * 196 (a 224² image: 196 rows, keys 64 + 64 + 68), 240 and 241 rows, 80 and 81 keys, 144 = 64 + 80,
     * 432 = 192 + 240. */
    const int lens4[] = {196, 240, 241, 80, 81, 144, 432, 2};
    const int lens2[] = {5, 0, 97, 11, 13, 25, 17, 33};
    const int lens3[] = {1};
    /* 64 and 72 (the towers'), every 16-dim chunk count of the AVX-512 block with and without its 8-dim tail, and
     * 12 (not a multiple of 8: portable whatever the set). */
    const int hds[] = {64, 72, 8, 16, 24, 32, 40, 48, 56, 80, 12};
    for (int ii = 0; ii < n_isa; ii++) {
        isa = isas[ii];
        for (size_t h = 0; h < sizeof hds / sizeof hds[0]; h++) {
            run_case(lens1, 8, 2, hds[h], 1.0f);
            run_case(lens1, 8, 2, hds[h], 6.0f); /* peaky softmax: the running max moves across key tiles */
            run_case(lens2, 8, 2, hds[h], 1.0f);
            run_case(lens3, 1, 3, hds[h], 1.0f);
            run_case(lens4, 8, 2, hds[h], 6.0f);
        }
        const int big[] = {700};
        run_case(big, 1, 2, 72, 3.0f);
    }
    return tu_finish("test_attention");
}
