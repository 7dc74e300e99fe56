/* attention.h — fused multi-head attention over segments (images / temporal slices), no mask, no n×n matrix.
 *
 * q, k, v: float32 rows of one token each, head h at columns [h·hd, (h+1)·hd) of each row, row strides ldq,
 * ldk, ldv (so they can be the Q, K, V thirds of a fused [S, 3H] qkv buffer). Rotary is already applied.
 * For each segment s = [cu[s], cu[s+1]) and head h: out[i] = softmax_j(q_i·k_j·scale)·v_j over j in the segment,
 * computed with an online (streaming) softmax in f32 over key tiles. out: [S, nh·hd] row stride ldo.
 * Threads: those of `pool` (NULL: the caller alone), over (segment, head, query tile); results independent of
 * the thread count. `ws` has attn_workspace_size(hd, pool_size(pool)) bytes, so the call never allocates. */
#ifndef QVL_CPU_ATTENTION_H
#define QVL_CPU_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

#include "core/pool.h"

typedef struct attn_args {
    const float *q, *k, *v;
    size_t ldq, ldk, ldv;
    float *out; size_t ldo;
    int n_heads, head_dim;
    const int *cu; int n_seg;      /* cu[0] = 0 ... cu[n_seg] = S */
    float scale;
    /* Memory free for the call's duration, or NULL (scratch_bytes 0): the bf16 attention (attention_bf16.c's
     * AVX512-BF16 block, and the AMX attention, attention_amx.c) packs K and V there once per (segment, head)
     * instead of once per work item, as many heads at a time as fit; with less than one head's pack it is not
     * touched. Any alignment (the pack starts at its first 64-byte boundary). */
    void *scratch;
    size_t scratch_bytes;
    /* The attention on AMX tiles only (attn_amx_run, for head dims it takes; NULL elsewhere). q16 (with k16, v16):
     * q, k, v as bf16 rows instead (strides ldq, ldk, ldv in elements), each value already the kernel's rounding
     * of the f32 one (bf16_round_ftz), as gemm_amx_run_qkv writes them: the same bits. out_tiles: the output into
     * the AMX GEMM's A operand layout of [S, n_heads·head_dim] (gemm_amx_run_packed's Ap) instead of out, each
     * value bf16_round of out's (the GEMM packer's rounding), padding zeroed: the bits the packer would make. */
    const uint16_t *q16, *k16, *v16;
    uint16_t *out_tiles;
} attn_args;

size_t attn_workspace_size(int head_dim, int n_threads);
void attn_run(const attn_args *a, void *ws, thread_pool *pool);
/* Scalar reference: one full softmax row at a time (allocates; tests only). */
void attn_ref(const attn_args *a);
/* attn_run with the portable (non-SIMD) kernel whatever the CPU (tests and benchmarks). */
void attn_run_scalar(const attn_args *a, void *ws, thread_pool *pool);
/* attn_run with an explicit block kernel (tests and benchmarks). AUTO: AVX-512, else AVX2, when the CPU has it and
 * head_dim % 8 == 0, else portable; a SIMD choice also falls back to portable for other head dims. Forcing a set
 * the CPU lacks is undefined behaviour (check cpu_has_avx2() / cpu_has_avx512() first). */
typedef enum attn_isa { ATTN_ISA_AUTO = 0, ATTN_ISA_SCALAR = 1, ATTN_ISA_AVX2 = 2, ATTN_ISA_AVX512 = 3 } attn_isa;
void attn_run_isa(const attn_args *a, void *ws, thread_pool *pool, attn_isa isa);

/* The work-item driver with a caller's block (the bf16 sets): `block` computes one query tile of one (segment,
 * head) over all the segment's keys (the contract of attn_block_avx2, kernels_avx2.h) in `thread_floats` floats
 * of per-thread scratch (a 16-float multiple); ws holds n_threads·thread_floats floats + 64 bytes. */
typedef void (*attn_block_fn)(const float *q, size_t ldq, const float *k, size_t ldk, const float *v, size_t ldv,
                              float *out, size_t ldo, int nq, int nk, int hd, float scale, float *ws);
void attn_run_blocks(const attn_args *a, void *ws, thread_pool *pool, attn_block_fn block, size_t thread_floats);

/* The drivers that lay K and V out once per (segment, head) in a->scratch (attention_bf16.c, attention_amx.c).
 * attn_scratch_heads: how many heads of head_bytes the scratch holds from its first 64-byte boundary (*start);
 * 0 when not one (or no scratch): the caller then leaves the scratch untouched. attn_run_head_groups: the heads in
 * the fewest groups of near-equal size of at most fit (16 heads with room for 7: 6, 6, 4, not 7, 7, 2); per group,
 * *h0 and *nh set (the job's group fields), then a pool pass of `pack` tasks and one of `item` tasks on job,
 * counted over the segments by chunks(len, nh) and tiles(len, nh). */
size_t attn_scratch_heads(const attn_args *a, size_t head_bytes, void **start);
void attn_run_head_groups(const attn_args *a, size_t fit, int *h0, int *nh, long (*chunks)(int len, int nh),
                          long (*tiles)(int len, int nh), pool_task_fn pack, pool_task_fn item, void *job,
                          thread_pool *pool);

#endif
