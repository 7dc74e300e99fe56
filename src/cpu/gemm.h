/* gemm.h — the GEMM every Linear of the tower runs through.
 *
 *   C[M, N] (=|+=) A[M, K] · B[N, K]ᵀ (+ bias[N]), then an optional elementwise epilogue on the result.
 *
 * A and C are float32, row-major with leading dimensions lda/ldc (in elements). B is a weight matrix stored
 * row-major [N, K] (nn.Linear's [out, in]) in its stored dtype (f32, f16, bf16), leading dimension ldb; it is
 * widened to f32 in registers, never copied to f32 as a whole. B's data may be unaligned (a tensor as stored).
 * Accumulation is f32. With accumulate != 0, the result is added to C (residual add) after bias and epilogue:
 * C = C + epi(A·Bᵀ + bias). Threads: splits work over the threads of `pool` (core/pool.h; NULL: the calling
 * thread alone); the result does not depend on the thread count. `ws` is a workspace of
 * gemm_workspace_size(pool_size(pool)) bytes (aligned inside), so the call never allocates. */
#ifndef QVL_CPU_GEMM_H
#define QVL_CPU_GEMM_H

#include <stddef.h>

#include "backend/backend.h"
#include "core/pool.h"
#include "qvl.h"

typedef enum gemm_epilogue { GEMM_EPI_NONE = 0, GEMM_EPI_GELU_TANH = 1, GEMM_EPI_GELU_ERF = 2 } gemm_epilogue;

/* A weight packed once (at model load) into the microkernel's panel layout, so gemm_run reads B with unit stride
 * and never repacks it. Panels: ceil(N/16) of them, panel p holding B rows [16p, 16p+16) (zero rows past N) as K
 * steps of 16 elements: f32 in natural order, or bf16 in the order j = 0-3, 8-11, 4-7, 12-15 that two in-lane
 * unpacks with zero widen to f32 in registers (or the AVX-512 order, below). Memory: 16·ceil(N/16)·K elements of
 * 4 (f32) or 2 (bf16) bytes, i.e. the checkpoint's own size for bf16 panels of a bf16 weight, twice that for f32
 * panels, whatever the order. Results are
 * bit-identical to the unpacked path on the same weight (same widened values, same accumulation order). */
/* Order of the bf16 elements inside a panel, chosen at packing for the kernels this CPU will run (gemm_pack_b):
 * LANES is the AVX2 order above; PAIRS (AVX-512) stores K steps two at a time as 16 dwords, dword j holding column
 * j of the even step in its low half and of the odd step in its high half (a lone last step for an odd K in natural
 * order). Any order is read correctly by every kernel set (a mismatch is widened through memory, tests only). */
typedef enum gemm_bf16_order { GEMM_BF16_LANES = 0, GEMM_BF16_PAIRS = 1 } gemm_bf16_order;

/* The packed weight is the backend's be_weight (backend/backend.h): N, K, panel dtype, bf16 order (a
 * gemm_bf16_order), arithmetic (gemm_pack_b writes BE_ARITH_F32; gemm_run computes in f32 whatever it says) and
 * the data (gemm_pack_size() bytes, 64-byte aligned, owned by whoever packed it). */
typedef be_weight gemm_packed;

/* Panel element type. AUTO: bf16 panels for a bf16 weight (no extra memory; widened in registers, measured no
 * slower than f32 panels), f32 panels for f32 and f16 weights (f16 is widened once, at packing). */
typedef enum gemm_panel { GEMM_PANEL_AUTO = 0, GEMM_PANEL_F32 = 1 } gemm_panel;

/* Bytes gemm_pack_b needs for a [N, K] weight of stored dtype `dtype` (0 when N or K <= 0). */
size_t gemm_pack_size(int N, int K, qvl_dtype dtype, gemm_panel which);
/* Packs B [N, K] (row-major, row stride ldb elements, stored dtype `dtype`, may be unaligned) into `buf`
 * (gemm_pack_size bytes, 64-byte aligned, caller-owned and kept alive while `out` is used) and describes it in
 * *out. Deterministic; threads over panels (pool may be NULL). Returns 0, or -1 (nothing written) for a bad shape or a misaligned
 * buf. */
int gemm_pack_b(gemm_packed *out, void *buf, const void *B, qvl_dtype dtype, size_t ldb, int N, int K,
                gemm_panel which, thread_pool *pool);

typedef struct gemm_args {
    int M, N, K;
    const float *A; size_t lda;
    const void *B; qvl_dtype b_dtype; size_t ldb;
    const float *bias;          /* [N] or NULL */
    float *C; size_t ldc;
    int accumulate;
    gemm_epilogue epilogue;
    const gemm_packed *Bp;      /* when non-NULL: B pre-packed (Bp->N == N, Bp->K == K); B, b_dtype, ldb ignored */
} gemm_args;

size_t gemm_workspace_size(int n_threads);
void gemm_run(const gemm_args *g, void *ws, thread_pool *pool);

/* Scalar reference (same contract, no workspace, single thread). */
void gemm_ref(const gemm_args *g);

/* gemm_run with an explicit kernel set (tests and benchmarks): AUTO picks AVX-512, else AVX2, when the CPU has
 * it. Forcing a set on a CPU without it is undefined behaviour; callers check cpu_has_avx2() /
 * cpu_has_avx512() (cpu/kernels_avx2.h, cpu/kernels_avx512.h) first. The AVX-512 set (14 x 32 tiles) and the
 * AVX2 set (6 x 16) run the same FMA chain per element over the same K blocks, so they agree bit for bit. */
typedef enum gemm_isa { GEMM_ISA_AUTO = 0, GEMM_ISA_SCALAR = 1, GEMM_ISA_AVX2 = 2, GEMM_ISA_AVX512 = 3 } gemm_isa;
void gemm_run_isa(const gemm_args *g, void *ws, thread_pool *pool, gemm_isa isa);
/* gemm_pack_b with the panel order of an explicit kernel set (the set gemm_run_isa will run; AUTO as gemm_pack_b). */
int gemm_pack_b_isa(gemm_packed *out, void *buf, const void *B, qvl_dtype dtype, size_t ldb, int N, int K,
                    gemm_panel which, thread_pool *pool, gemm_isa isa);
/* The kernel set AUTO resolves to: the widest this CPU runs. */
gemm_isa gemm_auto_isa(void);

#endif
