/* gemm_amx_ab.c — the AMX GEMM of this tree against another revision's, in one process, alternated call by call:
 * on a VM whose tile rate wanders by 2x from minute to minute (another guest on the core's sibling), separate runs
 * of two builds cannot tell 10 % apart, but two calls a few milliseconds apart see the same machine. Per shape
 * (the 27B tower's qkv, proj, fc1, fc2 with their epilogues; bf16 weights), ITERS pairs of calls, which one goes
 * first alternating; prints the median and quartiles of the per-pair time ratio old / new (> 1: the new kernel is
 * faster) and each kernel's median and best GFLOP/s. Built by bench/amx_ab.sh gemm, which compiles the other
 * revision's gemm_amx.c with its global symbols renamed old_*; not a test, and exit status 77 where AMX is not
 * usable. The shapes "projp", "fc1p", "fc2p" are the tower's hand-overs on AMX (gemm_amx_run_packed): A already in
 * the tiles' layout (proj from the attention, fc1 from LN2, fc2 from fc1), fc1 writing fc2's operand instead of f32
 * rows. Usage: gemm_amx_ab [M [THREADS [ITERS [SHAPES]]]] (default 784 2 40 qkv,proj,fc1,fc2). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "core/cpu.h"
#include "core/pool.h"
#include "cpu/bf16.h"

/* the other revision's gemm_amx_run and gemm_amx_workspace_size (same contracts) */
void old_gemm_amx_run(const be_weight *w, const float *A, size_t lda, int M, const float *bias, float *C, size_t ldc,
                      int accumulate, be_act act, void *ws, int max_k, thread_pool *pool);
size_t old_gemm_amx_workspace_size(int n_threads, int max_k);
void old_gemm_amx_run_packed(const be_weight *w, const float *A, size_t lda, const uint16_t *Ap, int M,
                             const float *bias, float *C, size_t ldc, uint16_t *Cp, int accumulate, be_act act,
                             void *ws, int max_k, thread_pool *pool);

/* packed: A in the tiles' layout; packed_out: the result into the next GEMM's operand layout */
typedef struct shape { const char *name; int n, k; be_act act; int acc, packed, packed_out; } shape;
static const shape shapes[] = {{"qkv", 3456, 1152, BE_ACT_NONE, 0, 0, 0},
                               {"proj", 1152, 1152, BE_ACT_NONE, 1, 0, 0},
                               {"fc1", 4304, 1152, BE_ACT_GELU_TANH, 0, 0, 0},
                               {"fc2", 1152, 4304, BE_ACT_NONE, 1, 0, 0},
                               {"projp", 1152, 1152, BE_ACT_NONE, 1, 1, 0},
                               {"fc1p", 4304, 1152, BE_ACT_GELU_TANH, 0, 1, 1},
                               {"fc2p", 1152, 4304, BE_ACT_NONE, 1, 1, 0}};

typedef struct gemm_job {
    const shape *sh;
    const be_weight *w;
    const float *A, *bias;
    float *C;
    const uint16_t *Ap;
    uint16_t *Cp;
    int M, max_k;
    void *ws;
    thread_pool *pool;
} gemm_job;

static void run_one(void *ctx, int which) {
    const gemm_job *j = ctx;
    const int K = j->w->K, N = j->w->N;
    if (j->sh->packed) {
        float *C = j->Cp ? NULL : j->C;
        (which ? gemm_amx_run_packed : old_gemm_amx_run_packed)(j->w, NULL, 0, j->Ap, j->M, j->bias, C, (size_t)N,
                                                                j->Cp, j->sh->acc, j->sh->act, j->ws, j->max_k,
                                                                j->pool);
    } else if (which)
        gemm_amx_run(j->w, j->A, (size_t)K, j->M, j->bias, j->C, (size_t)N, j->sh->acc, j->sh->act, j->ws, j->max_k,
                     j->pool);
    else
        old_gemm_amx_run(j->w, j->A, (size_t)K, j->M, j->bias, j->C, (size_t)N, j->sh->acc, j->sh->act, j->ws,
                         j->max_k, j->pool);
}

static float lcg(uint32_t *st) { return (float)((*st = *st * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f; }

int main(int argc, char **argv) {
    const int M = argc > 1 ? atoi(argv[1]) : 784, nt = argc > 2 ? atoi(argv[2]) : 2,
              iters = argc > 3 ? atoi(argv[3]) : 40, max_k = 4608;
    const char *only = argc > 4 ? argv[4] : NULL;
    if (!cpu_amx_usable()) {
        printf("gemm_amx_ab: AMX-BF16 is not usable here (%s)\n", cpu_amx_describe(cpu_amx_state()));
        return 77;
    }
    if (M < 1 || nt < 1 || iters < 4) {
        fprintf(stderr, "gemm_amx_ab: M and THREADS must be at least 1, ITERS at least 4\n");
        return 2;
    }
    thread_pool *p = pool_of(nt);
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        const shape *sh = &shapes[s];
        if (only) { /* a name of the comma-separated list, whole */
            const size_t n = strlen(sh->name);
            const char *f = only;
            while ((f = strstr(f, sh->name)) && ((f != only && f[-1] != ',') || (f[n] && f[n] != ','))) f++;
            if (!f) continue;
        }
        const int N = sh->n, K = sh->k;
        float *A = malloc((size_t)M * K * 4), *C = calloc((size_t)M * N, 4), *bias = malloc((size_t)N * 4);
        uint16_t *B = malloc((size_t)N * K * 2);
        const size_t wn = gemm_amx_workspace_size(nt, max_k), wo = old_gemm_amx_workspace_size(nt, max_k);
        void *panels = aligned_alloc(64, gemm_amx_pack_size(N, K)), *ws = malloc(wn > wo ? wn : wo);
        double *ratio = malloc(sizeof(double) * (size_t)iters), *t_old = malloc(sizeof(double) * (size_t)iters),
               *t_new = malloc(sizeof(double) * (size_t)iters);
        be_weight w;
        uint32_t st = 1;
        if (!A || !C || !bias || !B || !panels || !ws || !ratio || !t_old || !t_new) {
            fprintf(stderr, "gemm_amx_ab: out of memory\n");
            return 1;
        }
        for (size_t i = 0; i < (size_t)M * K; i++) A[i] = lcg(&st);
        for (size_t i = 0; i < (size_t)N * K; i++) B[i] = bf16_round(lcg(&st));
        for (int i = 0; i < N; i++) bias[i] = 0.01f * (float)(i % 7);
        if (gemm_amx_pack(&w, panels, B, QVL_DTYPE_BF16, (size_t)K, N, K, NULL) != 0) return 1;
        uint16_t *Ap = sh->packed ? aligned_alloc(64, gemm_amx_packed_size(M, K)) : NULL;
        uint16_t *Cp = sh->packed_out ? aligned_alloc(64, gemm_amx_packed_size(M, N)) : NULL;
        if ((sh->packed && !Ap) || (sh->packed_out && !Cp)) {
            fprintf(stderr, "gemm_amx_ab: out of memory\n");
            return 1;
        }
        if (Ap) gemm_amx_pack_a(A, (size_t)K, M, 0, K, (K + 31) / 32, 1, Ap);
        gemm_job job = {sh, &w, A, bias, C, Ap, Cp, M, max_k, ws, p};
        ab_pairs(iters, run_one, &job, ratio, t_old, t_new);
        const double gf = 2.0 * M * N * K * 1e-9;
        printf("%-5s M %5d N %5d K %5d threads %d: time old/new median %.3f (quartiles %.3f %.3f); GFLOP/s old "
               "%.0f (best %.0f), new %.0f (best %.0f)\n", sh->name, M, N, K, nt, ratio[iters / 2], ratio[iters / 4],
               ratio[3 * iters / 4], gf / t_old[iters / 2], gf / t_old[0], gf / t_new[iters / 2], gf / t_new[0]);
        fflush(stdout);
        free(Ap), free(Cp);
        free(A), free(C), free(bias), free(B), free(panels), free(ws), free(ratio), free(t_old), free(t_new);
    }
    return 0;
}
