/* bench_gemm_bf16.c — GFLOP/s of precision bf16's GEMMs on the tower's shapes (M = 784 and 3136 tokens), 1 and 2
 * threads, with the tower's epilogues, on bf16 weights packed as the model packs them (pair panels; tile-padded
 * for AMX): the AVX512-BF16 set (VDPBF16PS, gemm_bf16_run) and, where AMX is usable, the AMX set (TDPBF16PS,
 * gemm_amx_run) in bf16 and, on the patch and merger shapes, in BF16X2 (the arithmetic those run in on AMX: twice
 * the tile work). Each row also gives GFLOP per CPU-second per thread (the kernel's rate apart from time lost to
 * other processes on a shared machine).
 * Not a test; build with bench/CMakeLists.txt. Usage: bench_gemm_bf16 [M ...] (default 784 3136).
 * Environment: BENCH_SECONDS (default 0.5; the best of 3 timings of that length is reported), BENCH_SHAPES=qkv,fc1
 * restricts the shapes, BENCH_THREADS=1|2 runs only that count, BENCH_SETS=avx512bf16,amx,bf16x2 only those sets
 * (amx: AMX in bf16; bf16x2: AMX in BF16X2). A set this CPU lacks is reported as such. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "core/cpu.h"
#include "cpu/bf16.h"

/* The tower's GEMMs with their epilogues: bias everywhere, GELU after fc1 (tanh) and the merger's fc1 (erf), the
 * residual added by proj and fc2. */
typedef struct shape { const char *name; int n, k, small; be_act act; int acc; } shape;

static const shape shapes[] = {
    {"qkv", 3456, 1152, 0, BE_ACT_NONE, 0},
    {"proj", 1152, 1152, 0, BE_ACT_NONE, 1},
    {"fc1", 4304, 1152, 0, BE_ACT_GELU_TANH, 0},
    {"fc2", 1152, 4304, 0, BE_ACT_NONE, 1},
    {"merger.fc1", 4608, 4608, 1, BE_ACT_GELU_ERF, 0},
    {"merger.fc2", 5120, 4608, 1, BE_ACT_NONE, 0},
    {"patch", 1152, 1536, 1, BE_ACT_NONE, 0},
};

enum { SET_VDP = 0, SET_AMX = 1 };

static double seconds = 0.5;

static const shape *cur; /* the shape being timed (its epilogue) */
static const float *cur_bias;

static void run(int set, const be_weight *w, const float *A, int M, float *C, void *ws, int max_k, thread_pool *p) {
    if (set == SET_VDP) gemm_bf16_run(BF16_SET_AVX512BF16, w, A, (size_t)w->K, M, cur_bias, C, (size_t)w->N, cur->acc,
                                      cur->act, ws, p);
    else gemm_amx_run(w, A, (size_t)w->K, M, cur_bias, C, (size_t)w->N, cur->acc, cur->act, ws, max_k, p);
}

/* Best GFLOP/s (wall) of 3 timings of `seconds`, and GFLOP per CPU-second per thread in *per_cpu. */
static double bench_one(int set, const be_weight *w, const float *A, int M, float *C, void *ws, int max_k, int nt,
                        double *per_cpu) {
    thread_pool *p = pool_of(nt);
    const double flop = 2.0 * M * w->N * w->K; /* the GEMM's FLOPs, whatever the arithmetic's tile work */
    run(set, w, A, M, C, ws, max_k, p); /* warm-up */
    double best = 0, best_cpu = 0;
    for (int r = 0; r < 3; r++) {
        int n = 0;
        const double t0 = wall_now(), c0 = cpu_now();
        double t1;
        do {
            run(set, w, A, M, C, ws, max_k, p);
            n++;
            t1 = wall_now();
        } while (t1 - t0 < seconds);
        const double c1 = cpu_now(), g = flop * n / (t1 - t0) * 1e-9, gc = flop * n / ((c1 - c0) / nt) * 1e-9;
        if (g > best) best = g;
        if (gc > best_cpu) best_cpu = gc;
    }
    *per_cpu = best_cpu;
    return best;
}

int main(int argc, char **argv) {
    const char *env = getenv("BENCH_SECONDS");
    if (env) seconds = atof(env);
    const char *only = getenv("BENCH_SHAPES"), *th = getenv("BENCH_THREADS"), *sets = getenv("BENCH_SETS");
    int ms[8] = {784, 3136}, nm = 2;
    if (argc > 1) {
        nm = 0;
        for (int i = 1; i < argc && nm < 8; i++) ms[nm++] = atoi(argv[i]);
    }
    const int vdp = cpu_has_avx512bf16(), amx = cpu_amx_usable();
    printf("AVX512-BF16: %s; AMX-BF16: %s\n", vdp ? "yes" : "no (its rows are skipped)",
           cpu_amx_describe(cpu_amx_state()));
    if (!amx) printf("(no AMX rows: the AMX kernels need a CPU and OS where AMX is usable)\n");
    printf("%-11s %5s %5s %5s %-14s %3s %10s %14s\n", "shape", "M", "N", "K", "set", "thr", "GFLOP/s",
           "GFLOP/cpu-s/t");
    int max_k = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) max_k = shapes[s].k > max_k ? shapes[s].k : max_k;
    for (int mi = 0; mi < nm; mi++)
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
            const shape *sh = &shapes[s];
            if (only && !strstr(only, sh->name)) continue;
            const int M = ms[mi], N = sh->n, K = sh->k;
            float *A = malloc((size_t)M * K * sizeof(float)), *C = malloc((size_t)M * N * sizeof(float));
            uint16_t *B = malloc((size_t)N * K * 2);
            uint32_t st = 1;
            for (size_t i = 0; i < (size_t)M * K; i++) A[i] = (float)((st = st * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f;
            for (size_t i = 0; i < (size_t)N * K; i++) B[i] = bf16_round((float)((st = st * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f);
            float *bias = malloc((size_t)N * sizeof(float));
            void *buf = aligned_alloc(64, gemm_bf16_pack_size(N, K)), *bufa = aligned_alloc(64, gemm_amx_pack_size(N, K));
            be_weight w, wa_;
            size_t wsb = gemm_bf16_workspace_size(2), wa = gemm_amx_workspace_size(2, max_k);
            void *ws = malloc(wsb > wa ? wsb : wa);
            if (!A || !C || !B || !bias || !buf || !bufa || !ws ||
                gemm_bf16_pack(&w, buf, B, QVL_DTYPE_BF16, (size_t)K, N, K, NULL) ||
                gemm_amx_pack(&wa_, bufa, B, QVL_DTYPE_BF16, (size_t)K, N, K, NULL)) {
                fprintf(stderr, "bench_gemm_bf16: out of memory\n");
                return 1;
            }
            for (int i = 0; i < N; i++) bias[i] = 0.01f * (float)(i % 7);
            /* the residual add keeps C bounded: C grows by about one product per run, far from overflow */
            memset(C, 0, (size_t)M * N * sizeof(float));
            cur = sh, cur_bias = bias;
            for (int nt = 1; nt <= 2; nt++) {
                if (th && atoi(th) != nt) continue;
                for (int set = 0; set <= 2; set++) {
                    const char *name = set == 0 ? "avx512bf16" : set == 1 ? "amx bf16" : "amx bf16x2";
                    if ((set == 0 && !vdp) || (set > 0 && !amx) || (set == 2 && !sh->small)) continue;
                    if (sets && !strstr(sets, set == 0 ? "avx512bf16" : set == 1 ? "amx" : "bf16x2")) continue;
                    wa_.arith = set == 2 ? BE_ARITH_BF16X2 : BE_ARITH_BF16;
                    double pc;
                    const double g = bench_one(set == 0 ? SET_VDP : SET_AMX, set == 0 ? &w : &wa_, A, M, C, ws, max_k,
                                               nt, &pc);
                    printf("%-11s %5d %5d %5d %-14s %3d %10.1f %14.1f\n", sh->name, M, N, K, name, nt, g, pc);
                    fflush(stdout);
                }
            }
            free(A), free(C), free(B), free(bias), free(buf), free(bufa), free(ws);
        }
    return 0;
}
