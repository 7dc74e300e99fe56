/* attn_amx_ab.c — the AMX attention of this tree against another revision's, in one process, alternated call by
 * call (the reason is gemm_amx_ab.c's: this kind of VM's tile rate wanders by 2x between runs). The tower's shape:
 * 16 heads of 72, Q/K/V the thirds of [S, 3H] qkv rows, NSEG segments of S rows, the scratch the tower lends (its MLP
 * buffer: min(S, 896) rows of 4304 floats) so that K and V are packed once per head. ITERS pairs of calls, which one
 * goes first alternating; prints the median and quartiles of the per-pair time ratio old / new (> 1: the new
 * kernel is faster) and each one's median GFLOP/s (4·S²·H per segment). Built by bench/amx_ab.sh, which compiles
 * the other revision's attention_amx.c with its global symbols renamed old_*; not a test, and exit status 77 where
 * AMX is not usable. Usage: attn_amx_ab [S [THREADS [ITERS [NSEG]]]] (default 3136 2 20 1). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench_util.h"
#include "core/cpu.h"
#include "core/pool.h"
#include "cpu/bf16.h"

/* the other revision's attn_amx_run (same contract) */
void old_attn_amx_run(const attn_args *a, void *ws, thread_pool *pool);

typedef struct att_job {
    const attn_args *a;
    void *ws;
    thread_pool *pool;
} att_job;

static void run_one(void *ctx, int which) {
    const att_job *j = ctx;
    if (which) attn_amx_run(j->a, j->ws, j->pool);
    else old_attn_amx_run(j->a, j->ws, j->pool);
}

int main(int argc, char **argv) {
    enum { NH = 16, HD = 72, H = NH * HD, SCRATCH_ROWS = 896, SCRATCH_COLS = 4304 };
    const int S = argc > 1 ? atoi(argv[1]) : 3136, nt = argc > 2 ? atoi(argv[2]) : 2,
              iters = argc > 3 ? atoi(argv[3]) : 20, nseg = argc > 4 ? atoi(argv[4]) : 1;
    if (!cpu_amx_usable()) {
        printf("attn_amx_ab: AMX-BF16 is not usable here (%s)\n", cpu_amx_describe(cpu_amx_state()));
        return 77;
    }
    if (S < 1 || nt < 1 || iters < 4 || nseg < 1) {
        fprintf(stderr, "attn_amx_ab: S, THREADS and NSEG must be at least 1, ITERS at least 4\n");
        return 2;
    }
    const size_t rows = (size_t)S * (size_t)nseg, scratch_bytes = (size_t)(S < SCRATCH_ROWS ? S : SCRATCH_ROWS) *
                                                                   SCRATCH_COLS * sizeof(float);
    thread_pool *p = pool_of(nt);
    float *qkv = malloc(rows * 3 * H * sizeof(float)), *out = malloc(rows * H * sizeof(float));
    int *cu = malloc(sizeof(int) * (size_t)(nseg + 1));
    void *scratch = malloc(scratch_bytes), *ws = malloc(2 * attn_amx_workspace_size(HD, nt) + 4096);
    double *ratio = malloc(sizeof(double) * (size_t)iters), *t_old = malloc(sizeof(double) * (size_t)iters),
           *t_new = malloc(sizeof(double) * (size_t)iters);
    if (!qkv || !out || !cu || !scratch || !ws || !ratio || !t_old || !t_new) {
        fprintf(stderr, "attn_amx_ab: out of memory\n");
        return 1;
    }
    uint32_t st = 7;
    for (size_t i = 0; i < rows * 3 * H; i++) {
        st ^= st << 13, st ^= st >> 17, st ^= st << 5;
        qkv[i] = (float)(int)(st % 4001u) / 1000.0f - 2.0f;
    }
    for (int i = 0; i <= nseg; i++) cu[i] = i * S;
    const attn_args a = {.q = qkv, .k = qkv + H, .v = qkv + 2 * H, .ldq = 3 * H, .ldk = 3 * H, .ldv = 3 * H,
                         .out = out, .ldo = H, .n_heads = NH, .head_dim = HD, .cu = cu, .n_seg = nseg,
                         .scale = 0.11785113f, .scratch = scratch, .scratch_bytes = scratch_bytes};
    att_job j = {&a, ws, p};
    ab_pairs(iters, run_one, &j, ratio, t_old, t_new);
    const double gf = 4.0 * S * (double)S * HD * NH * nseg * 1e-9;
    printf("attention S %d x %d segments, %d heads of %d, threads %d: time old/new median %.3f (quartiles %.3f %.3f); "
           "GFLOP/s old %.0f, new %.0f\n", S, nseg, NH, HD, nt, ratio[iters / 2], ratio[iters / 4],
           ratio[3 * iters / 4], gf / t_old[iters / 2], gf / t_new[iters / 2]);
    free(qkv), free(out), free(cu), free(scratch), free(ws), free(ratio), free(t_old), free(t_new);
    return 0;
}
