/* amx_agree.c — whether a result of the AMX kernels is what TDPBF16PS can compute, when it is not the model's
 * bits (amx_tile.h). The model follows the SDM's pseudocode; real tiles may add the same exact bf16 products in
 * another order or with more internal precision. Every such sum is a correct bf16 GEMM, and all of them lie within
 * a few units of f32 rounding per product of each other; a wrong tile configuration, a lost K tile, a misplaced row
 * or a broken tile state is off by the size of the products themselves. The bounds here separate the two, for
 * the AMX set's start-up check (backend_cpu.c) and the tests that run the instructions.
 *
 * GEMM: each element is an f32 sum of up to 2K + 2 exact products (bf16 × bf16 is exact in f32; BF16X2 doubles
 * the terms) and the bias, every partial sum rounded once in any order, so it is within (2K + 3)·u·S of the exact
 * sum, S = |bias| + Σ|a·b| and u = 2^-24 (round to nearest; 2u per step for a truncating adder). Two such results
 * differ by at most twice that, times the largest slope of the GELU epilogues (1.13; 1.25 taken) and plus the
 * last roundings of the epilogue and the residual. The bound is taken with a factor of 4 on the sum's part (either
 * rounding rule; S from the f32 operands, which the bf16 ones do not exceed by more than 2^-8).
 *
 * Attention: both results round the same scores' probabilities to bf16, and a score that moved by f32 rounding
 * can turn one p_j's rounding the other way (one bf16 ulp, 2^-7 of p_j); out is a weighted mean of v with those
 * weights, which moves by at most twice the largest relative weight change times max|v| — 2^-6·max|v| per head
 * column over the segment's keys. (The tile kernels' layouts are checked bit for bit over the model, so this
 * bound is there to tell a correct sum from a broken one, not to find every layout slip.) */
#include <math.h>

#include "cpu/bf16.h"

static double excess_of(double diff, double bound) {
    if (!(diff <= bound * 1e30)) return INFINITY; /* NaN or unbounded */
    return diff / bound;
}

double amx_gemm_excess(const float *A, size_t lda, const float *B, int M, int N, int K, const float *bias,
                       const float *c0, be_act act, const float *c, const float *ref, size_t ldc) {
    const double u = ldexp(1.0, -24), slope = act == BE_ACT_NONE ? 1.0 : 1.25;
    double worst = 0.0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = bias ? fabs((double)bias[j]) : 0.0;
            for (int k = 0; k < K; k++) s += fabs((double)A[(size_t)i * lda + (size_t)k] * (double)B[(size_t)j * K + k]);
            const size_t e = (size_t)i * ldc + (size_t)j;
            const double base = c0 ? fabs((double)c0[e]) : 0.0;
            const double bound = 4.0 * 2.0 * (2.0 * K + 3.0) * u * 1.01 * s * slope +
                                 16.0 * u * (fabs((double)ref[e]) + base) + 1e-37;
            const double x = excess_of(fabs((double)c[e] - (double)ref[e]), bound);
            if (!(x <= worst)) worst = x;
        }
    return worst;
}

double amx_attn_excess(const attn_args *a, const float *out, const float *ref) {
    const int hd = a->head_dim;
    double worst = 0.0;
    for (int sg = 0; sg < a->n_seg; sg++) {
        const int base = a->cu[sg], len = a->cu[sg + 1] - base;
        for (int h = 0; h < a->n_heads; h++)
            for (int d = 0; d < hd; d++) {
                const size_t col = (size_t)h * (size_t)hd + (size_t)d;
                double vmax = 0.0;
                for (int j = 0; j < len; j++) {
                    const double v = fabs((double)a->v[(size_t)(base + j) * a->ldv + col]);
                    vmax = v > vmax ? v : vmax;
                }
                const double bound = ldexp(vmax, -6) + 1e-37;
                for (int i = 0; i < len; i++) {
                    const size_t e = (size_t)(base + i) * a->ldo + col;
                    const double x = excess_of(fabs((double)out[e] - (double)ref[e]), bound);
                    if (!(x <= worst)) worst = x;
                }
            }
    }
    return worst;
}
