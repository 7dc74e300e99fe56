/* gemm.h — the GEMM every Linear of the tower runs through.
 *
 *   C[M, N] (=|+=) A[M, K] · B[N, K]ᵀ (+ bias[N]), then an optional elementwise epilogue on the result.
 *
 * A and C are float32, row-major with leading dimensions lda/ldc (in elements). B is a weight matrix stored
 * row-major [N, K] (nn.Linear's [out, in]) in its stored dtype (f32, f16, bf16), leading dimension ldb; it is
 * widened to f32 in registers, never copied to f32 as a whole. B's data may be unaligned (mmapped safetensors).
 * Accumulation is f32. With accumulate != 0, the result is added to C (residual add) after bias and epilogue:
 * C = C + epi(A·Bᵀ + bias). Threads: splits work over `n_threads` OpenMP threads; the result does not depend
 * on the thread count. `ws` is a workspace of gemm_workspace_size(n_threads) bytes (64-byte aligned), so the
 * call never allocates. */
#ifndef QVL_CPU_GEMM_H
#define QVL_CPU_GEMM_H

#include <stddef.h>

#include "qvl.h"

typedef enum gemm_epilogue { GEMM_EPI_NONE = 0, GEMM_EPI_GELU_TANH = 1, GEMM_EPI_GELU_ERF = 2 } gemm_epilogue;

typedef struct gemm_args {
    int M, N, K;
    const float *A; size_t lda;
    const void *B; qvl_dtype b_dtype; size_t ldb;
    const float *bias;          /* [N] or NULL */
    float *C; size_t ldc;
    int accumulate;
    gemm_epilogue epilogue;
} gemm_args;

size_t gemm_workspace_size(int n_threads);
void gemm_run(const gemm_args *g, void *ws, int n_threads);

/* Scalar reference (same contract, no workspace, single thread). */
void gemm_ref(const gemm_args *g);

/* gemm_run with an explicit kernel set (tests and benchmarks): AUTO picks AVX2 when the CPU has it. Forcing AVX2
 * on a CPU without it is undefined behaviour; callers check qvl_cpu_has_avx2() (cpu/kernels_avx2.h) first. */
typedef enum gemm_isa { GEMM_ISA_AUTO = 0, GEMM_ISA_SCALAR = 1, GEMM_ISA_AVX2 = 2 } gemm_isa;
void gemm_run_isa(const gemm_args *g, void *ws, int n_threads, gemm_isa isa);

#endif
