/* mlp_amx_ab.c — a block's second half on the AMX backend entry two ways, in one process, alternated call by call
 * (the reason is gemm_amx_ab.c's: this kind of VM's tile rate wanders by 2x between runs): LayerNorm into f32 rows,
 * fc1 (GELU tanh) packing them and writing f32 rows, fc2 packing those ("f32"), against the tower's hand-overs:
 * LayerNorm writing the GEMM's bf16 operand layout, fc1 reading it and writing fc2's, fc2 reading that
 * (layernorm_packed, linear_packed: "hand-over"); the same bits (tests/unit/test_amx.c). With `mlp` only the MLP
 * (the LayerNorm's f32 rows either way, packed once for the hand-over outside the timing). The 27B tower's shapes:
 * M rows (784 at 448², 896: an MLP chunk at 896²), hidden 4304, width 1152, bias everywhere, fc2 adding to the
 * residual. ITERS pairs; prints the median and quartiles of the per-pair time ratio f32 / hand-over (> 1: the
 * hand-over is faster) and each one's median GFLOP/s. Not a test; exit status 77 where AMX is not usable.
 * Usage: mlp_amx_ab [M [THREADS [ITERS [mlp]]]] (default 784 2 40). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "bench_util.h"
#include "core/cpu.h"
#include "core/pool.h"
#include "cpu/bf16.h"

typedef struct mlp_job {
    const backend *be;
    const be_weight *w1, *w2;
    const float *X, *g, *beta, *b1, *b2;
    float *A, *H, *Y;
    void *PA, *P;
    int M, max_k, with_ln;
    void *ws;
    thread_pool *pool;
} mlp_job;

static void run_one(void *ctx, int which) {
    const mlp_job *j = ctx;
    const backend *be = j->be;
    const int N1 = j->w1->N, N2 = j->w2->N, K = j->w1->K;
    if (which) {
        if (j->with_ln) be->layernorm_packed(be, j->X, (size_t)K, j->PA, (size_t)j->M, (size_t)K, j->g, j->beta, 1e-6f,
                                             j->ws, j->pool);
        be->linear_packed(be, j->w1, NULL, 0, j->PA, j->M, j->b1, NULL, 0, j->P, 0, BE_ACT_GELU_TANH, j->ws, j->max_k,
                          j->pool);
        be->linear_packed(be, j->w2, NULL, 0, j->P, j->M, j->b2, j->Y, (size_t)N2, NULL, 1, BE_ACT_NONE, j->ws,
                          j->max_k, j->pool);
    } else {
        if (j->with_ln) be->layernorm(be, j->X, (size_t)K, j->A, (size_t)K, (size_t)j->M, (size_t)K, j->g, j->beta, 1e-6f,
                                      j->pool);
        be->linear(be, j->w1, j->A, (size_t)K, j->M, j->b1, j->H, (size_t)N1, 0, BE_ACT_GELU_TANH, j->ws, j->max_k,
                   j->pool);
        be->linear(be, j->w2, j->H, (size_t)N1, j->M, j->b2, j->Y, (size_t)N2, 1, BE_ACT_NONE, j->ws, j->max_k, j->pool);
    }
}

static float lcg(uint32_t *st) { return (float)((*st = *st * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f; }

int main(int argc, char **argv) {
    enum { H = 1152, I = 4304 };
    const int M = argc > 1 ? atoi(argv[1]) : 784, nt = argc > 2 ? atoi(argv[2]) : 2,
              iters = argc > 3 ? atoi(argv[3]) : 40, with_ln = !(argc > 4 && !strcmp(argv[4], "mlp"));
    if (!cpu_amx_usable() || !backend_amx_usable()) {
        printf("mlp_amx_ab: AMX-BF16 is not usable here (%s)\n", cpu_amx_describe(cpu_amx_state()));
        return 77;
    }
    if (M < 1 || nt < 1 || iters < 4) {
        fprintf(stderr, "mlp_amx_ab: M and THREADS must be at least 1, ITERS at least 4\n");
        return 2;
    }
    thread_pool *p = pool_of(nt);
    const backend *be = backend_cpu_entry(BE_CPU_BF16_AMX);
    float *X = malloc((size_t)M * H * 4), *A = malloc((size_t)M * H * 4), *Hf = malloc((size_t)M * I * 4);
    float *Y = calloc((size_t)M * H, 4), *g = malloc(H * 4), *beta = malloc(H * 4), *b1 = malloc(I * 4);
    float *b2 = malloc(H * 4);
    uint16_t *B1 = malloc((size_t)I * H * 2), *B2 = malloc((size_t)H * I * 2);
    void *PA = aligned_alloc(64, be->packed_size(M, H)), *P = aligned_alloc(64, be->packed_size(M, I));
    void *p1 = aligned_alloc(64, be->pack_size(I, H, QVL_DTYPE_BF16, BE_ARITH_BF16));
    void *p2 = aligned_alloc(64, be->pack_size(H, I, QVL_DTYPE_BF16, BE_ARITH_BF16));
    void *ws = malloc(be->linear_ws(nt, I));
    double *ratio = malloc(sizeof(double) * (size_t)iters), *t_old = malloc(sizeof(double) * (size_t)iters),
           *t_new = malloc(sizeof(double) * (size_t)iters);
    if (!X || !A || !Hf || !Y || !g || !beta || !b1 || !b2 || !B1 || !B2 || !PA || !P || !p1 || !p2 || !ws || !ratio ||
        !t_old || !t_new) {
        fprintf(stderr, "mlp_amx_ab: out of memory\n");
        return 1;
    }
    uint32_t st = 1;
    for (size_t i = 0; i < (size_t)M * H; i++) X[i] = lcg(&st);
    for (int i = 0; i < H; i++) g[i] = 1.0f + 0.1f * lcg(&st), beta[i] = 0.1f * lcg(&st);
    for (size_t i = 0; i < (size_t)I * H; i++) B1[i] = bf16_round(lcg(&st)), B2[i] = bf16_round(lcg(&st));
    for (int i = 0; i < I; i++) b1[i] = 0.01f * (float)(i % 7);
    for (int i = 0; i < H; i++) b2[i] = 0.01f * (float)(i % 5);
    be_weight w1, w2;
    if (be->pack(be, &w1, p1, B1, QVL_DTYPE_BF16, H, I, H, BE_ARITH_BF16, NULL) != 0 ||
        be->pack(be, &w2, p2, B2, QVL_DTYPE_BF16, I, H, I, BE_ARITH_BF16, NULL) != 0)
        return 1;
    be->layernorm(be, X, H, A, H, (size_t)M, H, g, beta, 1e-6f, NULL); /* `mlp`: the rows both ways read */
    be->layernorm_packed(be, X, H, PA, (size_t)M, H, g, beta, 1e-6f, ws, NULL);
    mlp_job job = {be, &w1, &w2, X, g, beta, b1, b2, A, Hf, Y, PA, P, M, I, with_ln, ws, p};
    ab_pairs(iters, run_one, &job, ratio, t_old, t_new);
    const double gf = 2.0 * 2.0 * M * (double)H * I * 1e-9;
    printf("%s M %5d hidden %d width %d threads %d: time f32/hand-over median %.3f (quartiles %.3f %.3f); GFLOP/s "
           "f32 %.0f (best %.0f), hand-over %.0f (best %.0f)\n", with_ln ? "ln+mlp" : "mlp", M, I, H, nt,
           ratio[iters / 2], ratio[iters / 4], ratio[3 * iters / 4], gf / t_old[iters / 2], gf / t_old[0],
           gf / t_new[iters / 2], gf / t_new[0]);
    free(X), free(A), free(Hf), free(Y), free(g), free(beta), free(b1), free(b2), free(B1), free(B2), free(PA);
    free(P), free(p1), free(p2), free(ws);
    free(ratio), free(t_old), free(t_new);
    return 0;
}
