/* attn_half_ab.c — a block's attention half on the AMX backend entry two ways, in one process, alternated call by
 * call (the reason is gemm_amx_ab.c's: this kind of VM's tile rate wanders by 2x between runs): qkv from LN1's
 * rows in the GEMM's layout into f32 rows, op_rope, the attention from f32 q, k, v into f32 rows, proj packing
 * them ("f32"), against the tower's hand-overs: qkv packed in the rotary order with the rotary embedding in its
 * epilogue writing Q, K, V in bf16 (pack_qkv, qkv_rope), the attention reading them and writing proj's operand,
 * proj reading it (be_attn.qkv_op, out_packed; linear_packed: "hand-over"); the same bits (tests/unit/test_amx.c).
 * The 27B tower's shapes: M rows in one segment (784 at 448², 3136 at 896²), 16 heads of 72, bias everywhere,
 * proj adding to the residual. ITERS pairs; prints the median and quartiles of the per-pair time ratio f32 /
 * hand-over (> 1: the hand-over is faster) and each one's median time. Not a test; exit status 77 where AMX is not
 * usable. Usage: attn_half_ab [M [THREADS [ITERS]]] (default 784 2 20). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "bench_util.h"
#include "core/cpu.h"
#include "core/pool.h"
#include "cpu/bf16.h"
#include "cpu/ops.h"

enum { NH = 16, HD = 72, H = NH * HD };

typedef struct attn_job {
    const backend *be;
    const be_weight *wq, *wr, *wp; /* qkv plain, qkv in the rotary order, proj */
    const float *bq, *bp, *co, *si;
    const void *PA;  /* LN1's rows in the GEMM's layout */
    float *qkv, *O, *Y;
    void *QO, *PO, *scratch;
    size_t scratch_bytes;
    int M, cu[2];
    void *ws, *aws;
    thread_pool *pool;
} attn_job;

static void run_one(void *ctx, int which) {
    const attn_job *j = ctx;
    const backend *be = j->be;
    be_attn at = {.q = j->qkv, .k = j->qkv + H, .v = j->qkv + 2 * H, .ldq = 3 * H, .ldk = 3 * H, .ldv = 3 * H,
                  .out = j->O, .ldo = H, .n_heads = NH, .head_dim = HD, .cu = j->cu, .n_seg = 1,
                  .scale = 1.0f / sqrtf((float)HD), .scratch = j->scratch, .scratch_bytes = j->scratch_bytes};
    if (which) {
        be->qkv_rope(be, j->wr, NULL, 0, j->PA, j->M, j->bq, j->co, j->si, j->QO, j->ws, 4 * H, j->pool);
        at.qkv_op = j->QO;
        at.out_packed = j->PO;
        be->attention(be, &at, j->aws, j->pool);
        be->linear_packed(be, j->wp, NULL, 0, j->PO, j->M, j->bp, j->Y, H, NULL, 1, BE_ACT_NONE, j->ws, 4 * H, j->pool);
    } else {
        be->linear_packed(be, j->wq, NULL, 0, j->PA, j->M, j->bq, j->qkv, 3 * H, NULL, 0, BE_ACT_NONE, j->ws, 4 * H,
                          j->pool);
        op_rope(j->qkv, 3 * H, (size_t)j->M, NH, HD, j->co, j->si, j->pool);
        be->attention(be, &at, j->aws, j->pool);
        be->linear(be, j->wp, j->O, H, j->M, j->bp, j->Y, H, 1, BE_ACT_NONE, j->ws, 4 * H, j->pool);
    }
}

static float lcg(uint32_t *st) { return (float)((*st = *st * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f; }

int main(int argc, char **argv) {
    const int M = argc > 1 ? atoi(argv[1]) : 784, nt = argc > 2 ? atoi(argv[2]) : 2,
              iters = argc > 3 ? atoi(argv[3]) : 20;
    if (!cpu_amx_usable() || !backend_amx_usable()) {
        printf("attn_half_ab: AMX-BF16 is not usable here (%s)\n", cpu_amx_describe(cpu_amx_state()));
        return 77;
    }
    if (M < 1 || nt < 1 || iters < 4) {
        fprintf(stderr, "attn_half_ab: M and THREADS must be at least 1, ITERS at least 4\n");
        return 2;
    }
    thread_pool *p = pool_of(nt);
    const backend *be = backend_cpu_entry(BE_CPU_BF16_AMX);
    const size_t sb = (size_t)(M < 896 ? M : 896) * 4304 * 4; /* the tower's scratch: an MLP chunk's hidden rows */
    float *X = malloc((size_t)M * H * 4), *qkv = malloc((size_t)M * 3 * H * 4), *O = malloc((size_t)M * H * 4);
    float *Y = calloc((size_t)M * H, 4), *bq = malloc(3 * H * 4), *bp = malloc(H * 4);
    float *co = malloc((size_t)M * HD / 2 * 4), *si = malloc((size_t)M * HD / 2 * 4);
    uint16_t *Bq = malloc((size_t)3 * H * H * 2), *Bp = malloc((size_t)H * H * 2);
    void *PA = aligned_alloc(64, be->packed_size(M, H)), *PO = aligned_alloc(64, be->packed_size(M, H));
    void *QO = malloc(be->qkv_op_size(M, 3 * H)), *scratch = malloc(sb);
    void *pq = aligned_alloc(64, be->pack_size(3 * H, H, QVL_DTYPE_BF16, BE_ARITH_BF16));
    void *pr = aligned_alloc(64, be->pack_size(3 * H, H, QVL_DTYPE_BF16, BE_ARITH_BF16));
    void *pp = aligned_alloc(64, be->pack_size(H, H, QVL_DTYPE_BF16, BE_ARITH_BF16));
    void *ws = malloc(be->linear_ws(nt, 4 * H)), *aws = malloc(be->attention_ws(HD, nt));
    double *ratio = malloc(sizeof(double) * (size_t)iters), *t_old = malloc(sizeof(double) * (size_t)iters),
           *t_new = malloc(sizeof(double) * (size_t)iters);
    if (!X || !qkv || !O || !Y || !bq || !bp || !co || !si || !Bq || !Bp || !PA || !PO || !QO || !scratch || !pq ||
        !pr || !pp || !ws || !aws || !ratio || !t_old || !t_new) {
        fprintf(stderr, "attn_half_ab: out of memory\n");
        return 1;
    }
    uint32_t st = 1;
    for (size_t i = 0; i < (size_t)M * H; i++) X[i] = lcg(&st);
    for (size_t i = 0; i < (size_t)3 * H * H; i++) Bq[i] = bf16_round(0.1f * lcg(&st));
    for (size_t i = 0; i < (size_t)H * H; i++) Bp[i] = bf16_round(0.1f * lcg(&st));
    for (int i = 0; i < 3 * H; i++) bq[i] = 0.01f * (float)(i % 7);
    for (int i = 0; i < H; i++) bp[i] = 0.01f * (float)(i % 5);
    for (size_t i = 0; i < (size_t)M * HD / 2; i++) {
        const float a = 0.01f * (float)(i % 997);
        co[i] = cosf(a), si[i] = sinf(a);
    }
    be_weight wq, wr, wp;
    if (be->pack(be, &wq, pq, Bq, QVL_DTYPE_BF16, H, 3 * H, H, BE_ARITH_BF16, NULL) != 0 ||
        be->pack_qkv(be, &wr, pr, Bq, QVL_DTYPE_BF16, H, 3 * H, H, HD, BE_ARITH_BF16, NULL) != 0 || !wr.rope_hd ||
        be->pack(be, &wp, pp, Bp, QVL_DTYPE_BF16, H, H, H, BE_ARITH_BF16, NULL) != 0)
        return 1;
    float *g = malloc(H * 4), *beta = calloc(H, 4);
    for (int i = 0; i < H; i++) g[i] = 1.0f;
    be->layernorm_packed(be, X, H, PA, (size_t)M, H, g, beta, 1e-6f, ws, NULL);
    attn_job job = {be, &wq, &wr, &wp, bq, bp, co, si, PA, qkv, O, Y, QO, PO, scratch, sb, M, {0, M}, ws, aws, p};
    ab_pairs(iters, run_one, &job, ratio, t_old, t_new);
    printf("attention half M %5d (one segment) threads %d: time f32/hand-over median %.3f (quartiles %.3f %.3f); "
           "ms f32 %.2f (best %.2f), hand-over %.2f (best %.2f)\n", M, nt, ratio[iters / 2], ratio[iters / 4],
           ratio[3 * iters / 4], 1e3 * t_old[iters / 2], 1e3 * t_old[0], 1e3 * t_new[iters / 2], 1e3 * t_new[0]);
    free(X), free(qkv), free(O), free(Y), free(bq), free(bp), free(co), free(si), free(Bq), free(Bp), free(PA);
    free(PO), free(QO), free(scratch), free(pq), free(pr), free(pp), free(ws), free(aws), free(g), free(beta);
    free(ratio), free(t_old), free(t_new);
    return 0;
}
