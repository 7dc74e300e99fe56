/* mlp_amx_ab.c — the block MLP of the AMX set two ways, in one process, alternated call by call (the reason is
 * gemm_amx_ab.c's: this kind of VM's tile rate wanders by 2x between runs): fc1 (GELU tanh) into f32 rows and fc2
 * packing them again ("old"), against fc1 writing its result in the GEMM's bf16 operand layout and fc2 reading it
 * as it is (gemm_amx_run_packed, the tower's hand-over: "new"); the same bits (tests/unit/test_amx.c). The 27B
 * tower's shapes: M rows (an MLP chunk: 784 at 448², 896 at 896²), hidden 4304, width 1152, bias everywhere, fc2
 * adding to the residual. ITERS pairs; prints the median and quartiles of the per-pair time ratio old / new (> 1:
 * the hand-over is faster) and each one's median GFLOP/s. Not a test; exit status 77 where AMX is not usable.
 * Usage: mlp_amx_ab [M [THREADS [ITERS]]] (default 784 2 40). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench_util.h"
#include "core/cpu.h"
#include "core/pool.h"
#include "cpu/bf16.h"

typedef struct mlp_job {
    const be_weight *w1, *w2;
    const float *A, *b1, *b2;
    float *H, *X;
    uint16_t *P;
    int M, max_k;
    void *ws;
    thread_pool *pool;
} mlp_job;

static void run_one(void *ctx, int which) {
    const mlp_job *j = ctx;
    const int N1 = j->w1->N, N2 = j->w2->N, K = j->w1->K;
    if (which) {
        gemm_amx_run_packed(j->w1, j->A, (size_t)K, NULL, j->M, j->b1, NULL, 0, j->P, 0, BE_ACT_GELU_TANH, j->ws,
                            j->max_k, j->pool);
        gemm_amx_run_packed(j->w2, NULL, 0, j->P, j->M, j->b2, j->X, (size_t)N2, NULL, 1, BE_ACT_NONE, j->ws,
                            j->max_k, j->pool);
    } else {
        gemm_amx_run(j->w1, j->A, (size_t)K, j->M, j->b1, j->H, (size_t)N1, 0, BE_ACT_GELU_TANH, j->ws, j->max_k,
                     j->pool);
        gemm_amx_run(j->w2, j->H, (size_t)N1, j->M, j->b2, j->X, (size_t)N2, 1, BE_ACT_NONE, j->ws, j->max_k, j->pool);
    }
}

static float lcg(uint32_t *st) { return (float)((*st = *st * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f; }

int main(int argc, char **argv) {
    enum { H = 1152, I = 4304 };
    const int M = argc > 1 ? atoi(argv[1]) : 784, nt = argc > 2 ? atoi(argv[2]) : 2,
              iters = argc > 3 ? atoi(argv[3]) : 40;
    if (!cpu_amx_usable()) {
        printf("mlp_amx_ab: AMX-BF16 is not usable here (%s)\n", cpu_amx_describe(cpu_amx_state()));
        return 77;
    }
    if (M < 1 || nt < 1 || iters < 4) {
        fprintf(stderr, "mlp_amx_ab: M and THREADS must be at least 1, ITERS at least 4\n");
        return 2;
    }
    thread_pool *p = pool_of(nt);
    float *A = malloc((size_t)M * H * 4), *Hf = malloc((size_t)M * I * 4), *X = calloc((size_t)M * H, 4);
    float *b1 = malloc(I * 4), *b2 = malloc(H * 4);
    uint16_t *B1 = malloc((size_t)I * H * 2), *B2 = malloc((size_t)H * I * 2);
    uint16_t *P = aligned_alloc(64, gemm_amx_packed_size(M, I));
    void *p1 = aligned_alloc(64, gemm_amx_pack_size(I, H)), *p2 = aligned_alloc(64, gemm_amx_pack_size(H, I));
    void *ws = malloc(gemm_amx_workspace_size(nt, I));
    double *ratio = malloc(sizeof(double) * (size_t)iters), *t_old = malloc(sizeof(double) * (size_t)iters),
           *t_new = malloc(sizeof(double) * (size_t)iters);
    if (!A || !Hf || !X || !b1 || !b2 || !B1 || !B2 || !P || !p1 || !p2 || !ws || !ratio || !t_old || !t_new) {
        fprintf(stderr, "mlp_amx_ab: out of memory\n");
        return 1;
    }
    uint32_t st = 1;
    for (size_t i = 0; i < (size_t)M * H; i++) A[i] = lcg(&st);
    for (size_t i = 0; i < (size_t)I * H; i++) B1[i] = bf16_round(lcg(&st)), B2[i] = bf16_round(lcg(&st));
    for (int i = 0; i < I; i++) b1[i] = 0.01f * (float)(i % 7);
    for (int i = 0; i < H; i++) b2[i] = 0.01f * (float)(i % 5);
    be_weight w1, w2;
    if (gemm_amx_pack(&w1, p1, B1, QVL_DTYPE_BF16, H, I, H, NULL) != 0 ||
        gemm_amx_pack(&w2, p2, B2, QVL_DTYPE_BF16, I, H, I, NULL) != 0)
        return 1;
    mlp_job job = {&w1, &w2, A, b1, b2, Hf, X, P, M, I, ws, p};
    ab_pairs(iters, run_one, &job, ratio, t_old, t_new);
    const double gf = 2.0 * 2.0 * M * (double)H * I * 1e-9;
    printf("mlp M %5d hidden %d width %d threads %d: time f32/hand-over median %.3f (quartiles %.3f %.3f); GFLOP/s "
           "f32 %.0f (best %.0f), hand-over %.0f (best %.0f)\n", M, I, H, nt, ratio[iters / 2], ratio[iters / 4],
           ratio[3 * iters / 4], gf / t_old[iters / 2], gf / t_old[0], gf / t_new[iters / 2], gf / t_new[0]);
    free(A), free(Hf), free(X), free(b1), free(b2), free(B1), free(B2), free(P), free(p1), free(p2), free(ws);
    free(ratio), free(t_old), free(t_new);
    return 0;
}
