/* bench_attention.c — GFLOP/s (4·S²·H per segment: QKᵀ and P·V) of attn_run for a segment of S tokens,
 * 16 heads of head_dim 72 (BENCH_HD=64 for 64), Q/K/V thirds of a fused qkv buffer; 1 and 2 threads, best of
 * BENCH_REPS (3) timings, wall and per CPU-second (see bench_gemm.c); BENCH_ISA=scalar|avx2|avx512 forces that
 * f32 block kernel, BENCH_ISA=avx512bf16|portable-bf16 runs precision bf16's attention (src/cpu/bf16.h) with that
 * kernel set (avx512bf16 only where cpu_has_avx512bf16()); BENCH_ISA=amx-emulated-simd|amx-emulated runs the AMX
 * attention over the C model of the tile instructions (attn_amx_run_emulated_simd: with the instruction build's
 * AVX-512 layouts and softmax, AVX512-BF16 CPUs only; attn_amx_run_emulated: portable C): the model's tiles
 * dominate those timings, so they say little about the AMX kernel's speed; BENCH_ISA=amx runs the AMX attention
 * itself (attn_amx_run; only where cpu_amx_usable()). BENCH_LAYOUT=qkv (default: Q, K, V the thirds of
 * [S, 3H] rows, as the tower calls it), rows (Q, K, V each its own [S, H] buffer) or head (each head's K and V
 * contiguous [S, hd], ldk = ldv = hd). BENCH_PEAK=<GFLOP/s> (say bench/peak_flops.c's figure for the same threads)
 * adds the rate as a % of it. BENCH_SCRATCH=<I> gives the call the scratch the tower gives it (its MLP buffer:
 * min(S, 882) rows, rounded up to 42, of I floats; 4304 for the 27B tower, 4096 for the 2B), where the bf16 attention
 * packs K and V once per head; unset, none (K and V rounded per work item). BENCH_SEGMENTS=n: n segments of S rows
 * in one call (a batch of n images, a video's n temporal patches); the rate counts n·4·S²·H. BENCH_FRESH=1: the
 * qkv rows are written again before each timed call (untimed), so the call finds them where the tower's qkv GEMM
 * leaves them rather than in the caches the previous call warmed (once n·S rows outgrow L2 that costs: 8 x 196
 * rows ran at 0.7 of one 196-row segment's rate on an AMD Zen 5). Usage: bench_attention [S ...]. */
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

/* One timed unit: the call (16 calls, one per head, for BENCH_LAYOUT=head: q and out move by hd, K and V by
 * S·hd). */
#define RUN_ALL()                                                                                                    \
    do {                                                                                                             \
        for (int h_ = 0; h_ < (one_head ? nh : 1); h_++) {                                                           \
            attn_args b_ = a;                                                                                        \
            b_.q += (size_t)h_ * hd, b_.out += (size_t)h_ * hd;                                                      \
            b_.k += (size_t)h_ * S * hd, b_.v += (size_t)h_ * S * hd;                                                \
            if (amx_mode == 3) attn_amx_run(&b_, ws, pool_of(nt));                                                   \
            else if (amx_mode) run_amx_emulated(amx_mode, &b_, ws, pool_of(nt));                                     \
            else if (bf16) attn_bf16_run(bf16 - 1, &b_, ws, pool_of(nt));                                            \
            else attn_run_isa(&b_, ws, pool_of(nt), isa);                                                            \
        }                                                                                                            \
    } while (0)

/* The AMX attention over the C model of the tiles: which 1 with the AVX-512 parts (x86), 2 portable. */
static void run_amx_emulated(int which, const attn_args *a, void *ws, thread_pool *pool) {
#if QVL_WITH_X86
    if (which == 1) {
        attn_amx_run_emulated_simd(a, ws, pool);
        return;
    }
#else
    (void)which;
#endif
    attn_amx_run_emulated(a, ws, pool);
}

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
    /* the AMX attention: over the C model of the tiles, 1 with the AVX-512 layouts and softmax, 2 portable; 3 the
     * instructions */
    const int amx_mode = !isa_s                           ? 0
                        : !strcmp(isa_s, "amx-emulated-simd") ? 1
                        : !strcmp(isa_s, "amx-emulated")      ? 2
                        : !strcmp(isa_s, "amx")               ? 3
                                                              : 0;
    if (amx_mode == 3 && !cpu_amx_usable()) {
        fprintf(stderr, "bench_attention: AMX-BF16 is not usable here (%s)\n", cpu_amx_describe(cpu_amx_state()));
        return 1;
    }
    if ((bf16 == 1 + BF16_SET_AVX512BF16 || amx_mode == 1) && (!QVL_WITH_X86 || !cpu_has_avx512bf16())) {
        fprintf(stderr, "bench_attention: this CPU has no AVX512-BF16\n");
        return 1;
    }
    const char *layout = getenv("BENCH_LAYOUT") ? getenv("BENCH_LAYOUT") : "qkv";
    const double peak = getenv("BENCH_PEAK") ? atof(getenv("BENCH_PEAK")) : 0.0;
    size_t ws_bytes = attn_workspace_size(hd, 2);
    if (attn_bf16_workspace_size(hd, 2) > ws_bytes) ws_bytes = attn_bf16_workspace_size(hd, 2);
    if (attn_amx_workspace_size(hd, 2) > ws_bytes) ws_bytes = attn_amx_workspace_size(hd, 2);
    void *ws = aligned_alloc(64, (ws_bytes + 63) & ~(size_t)63);
    int n_seg = getenv("BENCH_SEGMENTS") ? atoi(getenv("BENCH_SEGMENTS")) : 1; /* BENCH_SEGMENTS, BENCH_FRESH: above */
    if (n_seg < 1 || n_seg > 64) n_seg = 1;
    const int fresh = getenv("BENCH_FRESH") && atoi(getenv("BENCH_FRESH"));
    for (int x = 0; x < n; x++) {
        const int S1 = lens[x], S = S1 * n_seg;
        float *qkv = malloc((size_t)S * 3 * H * sizeof(float)), *out = malloc((size_t)S * H * sizeof(float));
        for (size_t i = 0; i < (size_t)S * 3 * H; i++) qkv[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
        const size_t qkv_bytes = (size_t)S * 3 * H * sizeof(float);
        float *qkv0 = fresh ? malloc(qkv_bytes) : NULL;
        if (qkv0) memcpy(qkv0, qkv, qkv_bytes);
        int cu[65];
        for (int s = 0; s <= n_seg; s++) cu[s] = s * S1;
        attn_args a = {qkv, qkv + H, qkv + 2 * H, 3 * (size_t)H, 3 * (size_t)H, 3 * (size_t)H, out, (size_t)H, nh, hd,
                       cu, n_seg, 1.0f / sqrtf((float)hd), NULL, 0, NULL, NULL, NULL, NULL};
        void *scratch = NULL;
        if (getenv("BENCH_SCRATCH")) { /* tower.c's mlp_step(S, 42) · I floats */
            const size_t n = ((size_t)S + 881) / 882, step0 = ((S + n - 1) / n + 41) / 42 * 42;
            const size_t step = step0 < 882 ? step0 : 882;
            a.scratch_bytes = step * (size_t)atoi(getenv("BENCH_SCRATCH")) * sizeof(float);
            a.scratch = scratch = malloc(a.scratch_bytes);
        }
        if (!strcmp(layout, "rows")) /* the same numbers, Q, K and V each in its own [S, H] block */
            a.ldq = a.ldk = a.ldv = (size_t)H, a.k = qkv + (size_t)S * H, a.v = qkv + 2 * (size_t)S * H;
        const int one_head = !strcmp(layout, "head");
        if (one_head) /* K and V of one head contiguous (ldk = ldv = hd), one call per head */
            a.ldk = a.ldv = (size_t)hd, a.k = qkv + (size_t)S * H, a.v = qkv + 2 * (size_t)S * H, a.n_heads = 1;
        for (int nt = 1; nt <= 2; nt++) {
            RUN_ALL();
            double best = 0.0, best_cpu = 0.0, best_ms = 0.0;
            for (int r = 0; r < n_rep; r++) {
                int reps = 0;
                double dt = 0.0, cpu = 0.0; /* the calls' own wall and CPU time */
                do {
                    if (fresh) memcpy(qkv, qkv0, qkv_bytes); /* as the qkv GEMM leaves them; not timed */
                    const double t0 = wall_now(), c0 = cpu_now();
                    RUN_ALL();
                    dt += wall_now() - t0, cpu += cpu_now() - c0;
                    reps++;
                } while (dt < 0.5);
                const double gflop = 4.0 * S1 * (double)S1 * H * n_seg * reps * 1e-9;
                if (gflop / dt > best) best = gflop / dt, best_ms = dt / reps * 1e3;
                if (gflop / cpu * nt > best_cpu) best_cpu = gflop / cpu * nt;
            }
            printf("%s %s%s%s S %5d", isa_s ? isa_s : "auto", layout, scratch ? " scratch" : "", fresh ? " fresh" : "",
                   S1);
            if (n_seg > 1) printf(" x %d segments", n_seg);
            printf(" heads %d x %d threads %d: %.1f GFLOP/s [%.1f per CPU-second x threads], %.2f ms", nh, hd, nt, best,
                   best_cpu, best_ms);
            if (peak > 0) printf(" (%.0f %% of %.0f)", 100.0 * best / peak, peak);
            printf("\n");
            fflush(stdout);
        }
        free(qkv), free(qkv0), free(out), free(scratch);
    }
    free(ws);
    return 0;
}
