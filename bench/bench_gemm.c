/* bench_gemm.c — GFLOP/s of gemm_run on the tower's shapes (M = 784 and 3136 tokens), f32 and bf16 weights,
 * 1 and 2 threads. Not a test; build with bench/CMakeLists.txt or:
 *   gcc -O2 -std=c11 -D_GNU_SOURCE -fopenmp -ffp-contract=off -Iinclude -Isrc bench/bench_gemm.c \
 *       src/cpu/gemm.c src/cpu/convert.c src/cpu/ops.c <gemm_avx2.c built with -mavx2 -mfma -mf16c> -lm
 * Usage: bench_gemm [M ...]  (default 784 3136); env BENCH_SECONDS (default 0.5) sets time per measurement,
 * BENCH_EPI=tanh|erf adds that GELU epilogue, BENCH_ACC=1 accumulates into C. */
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/gemm.h"
#include "cpu/ops.h"

typedef struct shape { const char *name; int n, k; } shape;

static const shape shapes[] = {
    {"qkv", 3456, 1152}, {"proj", 1152, 1152}, {"fc1", 4304, 1152}, {"fc2", 1152, 4304},
    {"merger.fc1", 4608, 4608}, {"merger.fc2", 5120, 4608}, {"patch", 1152, 1536},
};

static double bench_one(gemm_args *g, void *ws, int nt, double seconds) {
    gemm_run(g, ws, nt); /* warm */
    int reps = 0;
    double t0 = omp_get_wtime(), dt;
    do {
        gemm_run(g, ws, nt);
        reps++;
        dt = omp_get_wtime() - t0;
    } while (dt < seconds);
    return 2.0 * g->M * (double)g->N * g->K * reps / dt * 1e-9;
}

int main(int argc, char **argv) {
    int ms[8] = {784, 3136}, n_m = 2;
    if (argc > 1) {
        n_m = 0;
        for (int i = 1; i < argc && n_m < 8; i++) ms[n_m++] = atoi(argv[i]);
    }
    double seconds = getenv("BENCH_SECONDS") ? atof(getenv("BENCH_SECONDS")) : 0.5;
    const char *epi_s = getenv("BENCH_EPI");
    const gemm_epilogue epi = !epi_s ? GEMM_EPI_NONE : epi_s[0] == 't' ? GEMM_EPI_GELU_TANH : GEMM_EPI_GELU_ERF;
    const int acc = getenv("BENCH_ACC") ? atoi(getenv("BENCH_ACC")) : 0;
    void *ws = aligned_alloc(64, gemm_workspace_size(2));
    printf("%-11s %5s %5s %5s  %-5s %9s %9s\n", "shape", "M", "N", "K", "B", "1 thr", "2 thr");
    for (int mi = 0; mi < n_m; mi++) {
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            const int M = ms[mi], N = shapes[s].n, K = shapes[s].k;
            float *A = malloc((size_t)M * K * sizeof(float));
            float *C = calloc((size_t)M * N, sizeof(float));
            float *Bf = malloc((size_t)N * K * sizeof(float));
            uint16_t *Bh = malloc((size_t)N * K * sizeof(uint16_t));
            float *bias = malloc((size_t)N * sizeof(float));
            for (size_t i = 0; i < (size_t)M * K; i++) A[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
            for (size_t i = 0; i < (size_t)N * K; i++) {
                Bf[i] = (float)((i * 40503u) % 997) * 1e-3f - 0.5f;
                Bh[i] = op_f32_to_bf16(Bf[i]);
            }
            for (int i = 0; i < N; i++) bias[i] = 0.01f * (float)i;
            for (int dt = 0; dt < 2; dt++) {
                gemm_args g = {M, N, K, A, (size_t)K, dt ? (const void *)Bh : (const void *)Bf,
                               dt ? QVL_DTYPE_BF16 : QVL_DTYPE_F32, (size_t)K, bias, C, (size_t)N, acc, epi};
                double g1 = bench_one(&g, ws, 1, seconds), g2 = bench_one(&g, ws, 2, seconds);
                printf("%-11s %5d %5d %5d  %-5s %9.1f %9.1f\n", shapes[s].name, M, N, K, dt ? "bf16" : "f32", g1, g2);
                fflush(stdout);
            }
            free(A), free(C), free(Bf), free(Bh), free(bias);
        }
    }
    free(ws);
    return 0;
}
