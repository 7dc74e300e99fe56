/* bench_attention.c — GFLOP/s (4·S²·H per segment: QKᵀ and P·V) of attn_run for one segment of S tokens,
 * 16 heads of head_dim 72 (BENCH_HD=64 for 64), Q/K/V thirds of a fused qkv buffer; 1 and 2 threads, best of
 * BENCH_REPS (3) timings, wall and per CPU-second (see bench_gemm.c); BENCH_ISA=scalar|avx2|avx512 forces that
 * f32 block kernel, BENCH_ISA=avx512bf16|portable-bf16 runs precision bf16's attention (src/cpu/bf16.h) with that
 * kernel set (avx512bf16 only where cpu_has_avx512bf16()). Usage: bench_attention [S ...]. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "core/pool.h"
#include "core/cpu.h"
#include "cpu/attention.h"
#include "cpu/bf16.h"

int main(int argc, char **argv) {
    int lens[8] = {784, 3136}, n = 2;
    if (argc > 1) {
        n = 0;
        for (int i = 1; i < argc && n < 8; i++) lens[n++] = atoi(argv[i]);
    }
    const int nh = 16, hd = getenv("BENCH_HD") ? atoi(getenv("BENCH_HD")) : 72, H = nh * hd;
    const int n_rep = getenv("BENCH_REPS") ? atoi(getenv("BENCH_REPS")) : 3;
    const char *isa_s = getenv("BENCH_ISA");
    const attn_isa isa = !isa_s ? ATTN_ISA_AUTO
                         : !strcmp(isa_s, "avx512") ? ATTN_ISA_AVX512
                         : !strcmp(isa_s, "avx2")   ? ATTN_ISA_AVX2
                                                    : ATTN_ISA_SCALAR;
    /* bf16: 1 + the kernel set (attn_bf16_run's set), 0 for f32 */
    const int bf16 = !isa_s ? 0 : !strcmp(isa_s, "avx512bf16") ? 1 + BF16_SET_AVX512BF16
                              : !strcmp(isa_s, "portable-bf16") ? 1 + BF16_SET_PORTABLE : 0;
    if (bf16 == 1 + BF16_SET_AVX512BF16 && !cpu_has_avx512bf16()) {
        fprintf(stderr, "bench_attention: this CPU has no AVX512-BF16\n");
        return 1;
    }
    size_t ws_bytes = attn_workspace_size(hd, 2);
    if (attn_bf16_workspace_size(hd, 2) > ws_bytes) ws_bytes = attn_bf16_workspace_size(hd, 2);
    void *ws = aligned_alloc(64, (ws_bytes + 63) & ~(size_t)63);
    for (int x = 0; x < n; x++) {
        const int S = lens[x];
        float *qkv = malloc((size_t)S * 3 * H * sizeof(float)), *out = malloc((size_t)S * H * sizeof(float));
        for (size_t i = 0; i < (size_t)S * 3 * H; i++) qkv[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
        int cu[2] = {0, S};
        attn_args a = {qkv, qkv + H, qkv + 2 * H, 3 * (size_t)H, 3 * (size_t)H, 3 * (size_t)H, out, (size_t)H, nh, hd,
                       cu, 1, 1.0f / sqrtf((float)hd)};
        for (int nt = 1; nt <= 2; nt++) {
            if (bf16) attn_bf16_run(bf16 - 1, &a, ws, pool_of(nt));
            else attn_run_isa(&a, ws, pool_of(nt), isa);
            double best = 0.0, best_cpu = 0.0, best_ms = 0.0;
            for (int r = 0; r < n_rep; r++) {
                int reps = 0;
                double t0 = wall_now(), c0 = cpu_now(), dt;
                do {
                    if (bf16) attn_bf16_run(bf16 - 1, &a, ws, pool_of(nt));
                    else attn_run_isa(&a, ws, pool_of(nt), isa);
                    reps++;
                    dt = wall_now() - t0;
                } while (dt < 0.5);
                const double gflop = 4.0 * S * (double)S * H * reps * 1e-9;
                if (gflop / dt > best) best = gflop / dt, best_ms = dt / reps * 1e3;
                if (gflop / (cpu_now() - c0) * nt > best_cpu) best_cpu = gflop / (cpu_now() - c0) * nt;
            }
            printf("%s S %5d heads %d x %d threads %d: %.1f GFLOP/s [%.1f per CPU-second x threads], %.2f ms\n",
                   isa_s ? isa_s : "auto", S, nh, hd, nt, best, best_cpu, best_ms);
            fflush(stdout);
        }
        free(qkv), free(out);
    }
    free(ws);
    return 0;
}
