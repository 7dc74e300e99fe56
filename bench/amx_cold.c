/* amx_cold.c — does the AMX GEMM wait on its weights? The tower uses each weight once per forward pass, so its
 * panels come from L3 or memory, while bench_gemm_bf16 calls one GEMM again and again on weights that stay cached.
 * Per shape (the 27B tower's qkv, proj, fc1, fc2 with their epilogues, bf16 weights), COPIES packed copies of the
 * same weight: a round of COPIES calls on copy 0 (hot) and a round over the copies in turn (cold: COPIES x 8-10 MB,
 * past what the caches keep), alternated for ROUNDS rounds (the tile rate of a shared VM wanders within seconds);
 * prints each one's GFLOP/s and the time ratio cold / hot (1: the weights' traffic costs nothing). The hot copy
 * (2.6-9.9 MB) is past L2 too, and each M block reads its column pairs' panels again, so this compares L3 with
 * memory, not L2 with L3: amx_loads' "blocks" rows show what the L3 stream costs the tile loop. Not a test;
 * exit status 77 where AMX is not usable. Usage: amx_cold [M [THREADS [COPIES [ROUNDS]]]] (default 784 2 40 6). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench_util.h"
#include "core/cpu.h"
#include "core/pool.h"
#include "cpu/bf16.h"

typedef struct shape { const char *name; int n, k; be_act act; int acc; } shape;
static const shape shapes[] = {{"qkv", 3456, 1152, BE_ACT_NONE, 0}, {"proj", 1152, 1152, BE_ACT_NONE, 1},
                               {"fc1", 4304, 1152, BE_ACT_GELU_TANH, 0}, {"fc2", 1152, 4304, BE_ACT_NONE, 1}};

static float lcg(uint32_t *st) { return (float)((*st = *st * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f; }

int main(int argc, char **argv) {
    const int M = argc > 1 ? atoi(argv[1]) : 784, nt = argc > 2 ? atoi(argv[2]) : 2,
              copies = argc > 3 ? atoi(argv[3]) : 40, rounds = argc > 4 ? atoi(argv[4]) : 6, max_k = 4608;
    if (!cpu_amx_usable()) {
        printf("amx_cold: AMX-BF16 is not usable here (%s)\n", cpu_amx_describe(cpu_amx_state()));
        return 77;
    }
    if (M < 1 || nt < 1 || copies < 2 || rounds < 2) {
        fprintf(stderr, "amx_cold: M and THREADS at least 1, COPIES and ROUNDS at least 2\n");
        return 2;
    }
    thread_pool *p = pool_of(nt);
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        const shape *sh = &shapes[s];
        const int N = sh->n, K = sh->k;
        float *A = malloc((size_t)M * K * 4), *C = calloc((size_t)M * N, 4), *bias = malloc((size_t)N * 4);
        uint16_t *B = malloc((size_t)N * K * 2);
        void *ws = malloc(gemm_amx_workspace_size(nt, max_k));
        be_weight *w = calloc((size_t)copies, sizeof *w);
        void **panels = calloc((size_t)copies, sizeof *panels);
        if (!A || !C || !bias || !B || !ws || !w || !panels) {
            fprintf(stderr, "amx_cold: out of memory\n");
            return 1;
        }
        uint32_t st = 1;
        for (size_t i = 0; i < (size_t)M * K; i++) A[i] = lcg(&st);
        for (size_t i = 0; i < (size_t)N * K; i++) B[i] = bf16_round(lcg(&st));
        for (int i = 0; i < N; i++) bias[i] = 0.01f * (float)(i % 7);
        for (int c = 0; c < copies; c++) {
            panels[c] = aligned_alloc(64, gemm_amx_pack_size(N, K));
            if (!panels[c] || gemm_amx_pack(&w[c], panels[c], B, QVL_DTYPE_BF16, (size_t)K, N, K, NULL) != 0) return 1;
        }
        double hot = 0, cold = 0;
        for (int r = 0; r <= rounds; r++) { /* round 0 warms up */
            const int cold_first = r % 2;
            double t[2];
            for (int h = 0; h < 2; h++) {
                const int is_cold = h ^ !cold_first;
                const double t0 = wall_now();
                for (int c = 0; c < copies; c++)
                    gemm_amx_run(&w[is_cold ? c : 0], A, (size_t)K, M, bias, C, (size_t)N, sh->acc, sh->act, ws,
                                 max_k, p);
                t[is_cold] = wall_now() - t0;
            }
            if (r) hot += t[0], cold += t[1];
        }
        const double gf = 2.0 * M * N * K * 1e-9 * copies * rounds;
        printf("%-5s M %5d N %5d K %5d threads %d, %d copies (%.0f MB): hot %.0f GFLOP/s, cold %.0f GFLOP/s, "
               "time cold / hot %.2f\n", sh->name, M, N, K, nt, copies,
               (double)gemm_amx_pack_size(N, K) * copies / 1e6, gf / hot, gf / cold, cold / hot);
        fflush(stdout);
        for (int c = 0; c < copies; c++) free(panels[c]);
        free(panels), free(w), free(A), free(C), free(bias), free(B), free(ws);
    }
    return 0;
}
