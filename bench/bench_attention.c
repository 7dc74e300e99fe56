/* bench_attention.c — GFLOP/s (4·S²·H per segment: QKᵀ and P·V) of attn_run for one segment of S tokens,
 * 16 heads of 72, Q/K/V thirds of a fused qkv buffer; 1 and 2 threads. Usage: bench_attention [S ...]. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include "cpu/attention.h"

int main(int argc, char **argv) {
    int lens[8] = {784, 3136}, n = 2;
    if (argc > 1) {
        n = 0;
        for (int i = 1; i < argc && n < 8; i++) lens[n++] = atoi(argv[i]);
    }
    const int nh = 16, hd = 72, H = nh * hd;
    void *ws = aligned_alloc(64, attn_workspace_size(hd, 2));
    for (int x = 0; x < n; x++) {
        const int S = lens[x];
        float *qkv = malloc((size_t)S * 3 * H * sizeof(float)), *out = malloc((size_t)S * H * sizeof(float));
        for (size_t i = 0; i < (size_t)S * 3 * H; i++) qkv[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
        int cu[2] = {0, S};
        attn_args a = {qkv, qkv + H, qkv + 2 * H, 3 * (size_t)H, 3 * (size_t)H, 3 * (size_t)H, out, (size_t)H, nh, hd,
                       cu, 1, 1.0f / sqrtf((float)hd)};
        for (int nt = 1; nt <= 2; nt++) {
            attn_run(&a, ws, nt);
            int reps = 0;
            double t0 = omp_get_wtime(), dt;
            do {
                attn_run(&a, ws, nt);
                reps++;
                dt = omp_get_wtime() - t0;
            } while (dt < 0.5);
            printf("S %5d heads %d x %d threads %d: %.1f GFLOP/s, %.2f ms\n", S, nh, hd, nt,
                   4.0 * S * (double)S * H * reps / dt * 1e-9, dt / reps * 1e3);
        }
        free(qkv), free(out);
    }
    free(ws);
    return 0;
}
