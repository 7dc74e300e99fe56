/* ops.c — LayerNorm and GELU of the tower (scalar, libm-exact formulas in torch's operation order).
 *
 * Accuracy over speed: these run on [S, 1152]-sized activations a few times per block, next to GEMMs that cost
 * three orders of magnitude more, and they sit on the parity path (1e-4 relative end to end vs PyTorch). */
#include <math.h>

#include "cpu/ops.h"

/* LayerNorm statistics are accumulated in double: the mean and biased variance come out as the correctly rounded
 * f32 values of the exact statistics (two passes: mean, then Σ(x − mean)²), which is within torch's own f32
 * Welford rounding of the true value, so the two agree to ~1e-7 relative per element. The per-element transform
 * is done in f32 as (x − mean)·rstd·w + b. */
static void layernorm_row(const float *x, float *y, size_t cols, const float *w, const float *b, float eps) {
    double s = 0.0;
    for (size_t c = 0; c < cols; c++) s += (double)x[c];
    double mean_d = s / (double)cols;
    double v = 0.0;
    for (size_t c = 0; c < cols; c++) {
        double d = (double)x[c] - mean_d;
        v += d * d;
    }
    double var_d = v / (double)cols;
    float mean = (float)mean_d;
    float rstd = (float)(1.0 / sqrt(var_d + (double)eps));
    for (size_t c = 0; c < cols; c++) {
        float t = (x[c] - mean) * rstd;
        y[c] = t * (w ? w[c] : 1.0f) + (b ? b[c] : 0.0f);
    }
}

void op_layernorm(const float *x, size_t ldx, float *y, size_t ldy, size_t rows, size_t cols, const float *w,
                  const float *b, float eps, int n_threads) {
    if (rows == 0 || cols == 0) return;
    if (n_threads < 1) n_threads = 1;
    long nr = (long)rows;
#pragma omp parallel for schedule(static) num_threads(n_threads) if (n_threads > 1 && rows > 1)
    for (long r = 0; r < nr; r++) layernorm_row(x + (size_t)r * ldx, y + (size_t)r * ldy, cols, w, b, eps);
}

/* torch (aten/src/ATen/native/cpu/Activation.cpp, GeluKernelImpl tanh branch):
 *   kBeta = M_SQRT2 * M_2_SQRTPI * 0.5; kKappa = 0.044715;
 *   inner = kBeta * (x + kKappa * (x * x * x)); y = 0.5 * x * (1 + tanh(inner)). Same order here, all f32. */
void op_gelu_tanh(float *x, size_t n) {
    const float k_beta = (float)(M_SQRT2 * M_2_SQRTPI * 0.5);
    const float k_kappa = 0.044715f;
    for (size_t i = 0; i < n; i++) {
        float v = x[i];
        float cube = v * v * v;
        float inner = k_beta * (v + k_kappa * cube);
        x[i] = 0.5f * v * (1.0f + tanhf(inner));
    }
}

/* torch GeluKernelImpl none branch: y = x * 0.5 * (1 + erf(x * M_SQRT1_2)). */
void op_gelu_erf(float *x, size_t n) {
    const float k_alpha = (float)M_SQRT1_2;
    for (size_t i = 0; i < n; i++) {
        float v = x[i];
        x[i] = v * 0.5f * (1.0f + erff(v * k_alpha));
    }
}
