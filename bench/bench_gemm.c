/* bench_gemm.c — GFLOP/s of gemm_run on the tower's shapes (M = 784 and 3136 tokens), 1 and 2 threads, for B
 * as stored f32 / bf16 (packed per call), pre-packed (gemm_pack_b: f32 panels, bf16 panels) and, when the bench
 * was built against OpenBLAS, cblas_sgemm on the same f32 shapes (no epilogue; Debian's OpenBLAS picks its
 * generic "Prescott" kernels on this VM's CPU: OPENBLAS_CORETYPE=Haswell gives its AVX2 kernels, the fair
 * yardstick). Not a test; build with bench/CMakeLists.txt. Usage: bench_gemm [M ...] (default 784 3136).
 * Environment: BENCH_SECONDS (default 0.5; the best of BENCH_REPS = 3 timings of that length is reported),
 * BENCH_EPI=tanh|erf adds that GELU epilogue, BENCH_ACC=1 accumulates into C, BENCH_SHAPES=qkv,fc1 restricts the
 * shapes, BENCH_THREADS=1|2 runs only that count, BENCH_ISA=scalar|avx2|avx512 forces that kernel set (and its
 * bf16 panel order) instead of the CPU's best, BENCH_VARIANTS=3 runs only the bf16 pre-packed B (the model's). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "core/pool.h"
#include "cpu/gemm.h"
#include "cpu/ops.h"

#ifdef QVL_BENCH_OPENBLAS
/* From cblas.h (not always installed with the library). */
void cblas_sgemm(int order, int transa, int transb, int m, int n, int k, float alpha, const float *a, int lda,
                 const float *b, int ldb, float beta, float *c, int ldc);
void openblas_set_num_threads(int n);
#endif

typedef struct shape { const char *name; int n, k; } shape;

static const shape shapes[] = {
    {"qkv", 3456, 1152}, {"proj", 1152, 1152}, {"fc1", 4304, 1152}, {"fc2", 1152, 4304},
    {"merger.fc1", 4608, 4608}, {"merger.fc2", 5120, 4608}, {"patch", 1152, 1536},
};

static double seconds = 0.5;
static int reps_best = 3;

static double best_cpu; /* best GFLOP per CPU-second per thread of the last bench_one */
static gemm_isa isa = GEMM_ISA_AUTO; /* BENCH_ISA */

/* Best-of-reps GFLOP/s; variant < 4: gemm_run, 4: cblas_sgemm. */
static double bench_one(gemm_args *g, void *ws, int nt, int variant) {
    double best = 0.0;
    best_cpu = 0.0;
    for (int r = 0; r < reps_best; r++) {
        int reps = 0;
        double t0 = wall_now(), c0 = cpu_now(), dt;
        do {
#ifdef QVL_BENCH_OPENBLAS
            if (variant == 4) {
                openblas_set_num_threads(nt);
                cblas_sgemm(101 /* row major */, 111 /* no trans */, 112 /* trans */, g->M, g->N, g->K, 1.0f, g->A,
                            (int)g->lda, (const float *)g->B, (int)g->ldb, 0.0f, g->C, (int)g->ldc);
            } else
#endif
                gemm_run_isa(g, ws, pool_of(nt), isa);
            reps++;
            dt = wall_now() - t0;
        } while (dt < seconds);
        const double gflop = 2.0 * g->M * (double)g->N * g->K * reps * 1e-9, gc = gflop / (cpu_now() - c0) * nt;
        if (gflop / dt > best) best = gflop / dt;
        if (gc > best_cpu) best_cpu = gc;
    }
    return best;
}

int main(int argc, char **argv) {
    int ms[8] = {784, 3136}, n_m = 2;
    if (argc > 1) {
        n_m = 0;
        for (int i = 1; i < argc && n_m < 8; i++) ms[n_m++] = atoi(argv[i]);
    }
    if (getenv("BENCH_SECONDS")) seconds = atof(getenv("BENCH_SECONDS"));
    if (getenv("BENCH_REPS")) reps_best = atoi(getenv("BENCH_REPS"));
    const char *epi_s = getenv("BENCH_EPI"), *only = getenv("BENCH_SHAPES");
    const gemm_epilogue epi = !epi_s ? GEMM_EPI_NONE : epi_s[0] == 't' ? GEMM_EPI_GELU_TANH : GEMM_EPI_GELU_ERF;
    const int acc = getenv("BENCH_ACC") ? atoi(getenv("BENCH_ACC")) : 0;
    const int only_nt = getenv("BENCH_THREADS") ? atoi(getenv("BENCH_THREADS")) : 0;
    const char *isa_s = getenv("BENCH_ISA"), *only_v = getenv("BENCH_VARIANTS");
    isa = !isa_s                      ? gemm_auto_isa()
          : !strcmp(isa_s, "avx512") ? GEMM_ISA_AVX512
          : !strcmp(isa_s, "avx2")   ? GEMM_ISA_AVX2
                                     : GEMM_ISA_SCALAR;
    static const char *iname[4] = {"auto", "scalar", "avx2", "avx512"};
    printf("kernel set: %s\n", iname[isa]);
    void *ws = aligned_alloc(64, gemm_workspace_size(2));
    static const char *vname[5] = {"f32", "bf16", "f32 packed", "bf16 packed", "openblas"};
    printf("GFLOP/s (wall), and in [] GFLOP per CPU-second of all threads x threads (contention-free estimate)\n");
    printf("%-11s %5s %5s %5s  %-11s %9s %7s %9s %7s\n", "shape", "M", "N", "K", "B", "1 thr", "[cpu]", "2 thr",
           "[cpu]");
    for (int mi = 0; mi < n_m; mi++) {
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            if (only && !strstr(only, shapes[s].name)) continue;
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
            gemm_packed pf, ph;
            void *bufp_f = aligned_alloc(64, gemm_pack_size(N, K, QVL_DTYPE_F32, GEMM_PANEL_AUTO));
            void *bufp_h = aligned_alloc(64, gemm_pack_size(N, K, QVL_DTYPE_BF16, GEMM_PANEL_AUTO));
            gemm_pack_b_isa(&pf, bufp_f, Bf, QVL_DTYPE_F32, (size_t)K, N, K, GEMM_PANEL_AUTO, pool_of(2), isa);
            gemm_pack_b_isa(&ph, bufp_h, Bh, QVL_DTYPE_BF16, (size_t)K, N, K, GEMM_PANEL_AUTO, pool_of(2), isa);
#ifdef QVL_BENCH_OPENBLAS
            const int n_var = 5;
#else
            const int n_var = 4;
#endif
            for (int v = 0; v < n_var; v++) {
                if (only_v && !strchr(only_v, '0' + v)) continue;
                const int bf = v == 1 || v == 3;
                gemm_args g = {M, N, K, A, (size_t)K, bf ? (const void *)Bh : (const void *)Bf,
                               bf ? QVL_DTYPE_BF16 : QVL_DTYPE_F32, (size_t)K, bias, C, (size_t)N, acc, epi,
                               v == 2 ? &pf : v == 3 ? &ph : NULL};
                if (v == 4) g.bias = NULL;
                double g1 = only_nt == 2 ? 0.0 : bench_one(&g, ws, 1, v), c1 = best_cpu;
                double g2 = only_nt == 1 ? 0.0 : bench_one(&g, ws, 2, v), c2 = best_cpu;
                printf("%-11s %5d %5d %5d  %-11s %9.1f [%5.1f] %9.1f [%5.1f]\n", shapes[s].name, M, N, K, vname[v], g1,
                       c1, g2, c2);
                fflush(stdout);
            }
            free(A), free(C), free(Bf), free(Bh), free(bias), free(bufp_f), free(bufp_h);
        }
    }
    free(ws);
    return 0;
}
