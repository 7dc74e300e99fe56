/* ops.c — LayerNorm and GELU of the tower: libm-exact scalar formulas in torch's operation order, and the dispatch
 * to the AVX2 kernels (ops_avx2.c: GELUs on a vector tanh/erf within 2 ulp of libm, LayerNorm rows with the same
 * per-element arithmetic) when the CPU has them.
 *
 * Accuracy over speed: these run on [S, 1152]-sized activations a few times per block, next to GEMMs that cost
 * three orders of magnitude more, and they sit on the parity path (1e-4 relative end to end vs PyTorch). */
#include <math.h>
#include <string.h>

#include "core/cpu.h"
#include "cpu/kernels_avx2.h"
#include "cpu/kernels_avx512.h"
#include "cpu/ops.h"

/* The elementwise kernels follow cpu_level() (1 portable, 2 AVX2, 3 AVX-512, the same bits as AVX2), which
 * is cached: the GEMM epilogue calls GELU per row segment. */

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

typedef void (*layernorm_row_fn)(const float *x, float *y, size_t cols, const float *w, const float *b, float eps);

typedef struct ln_job {
    const float *x;
    size_t ldx;
    float *y;
    size_t ldy, cols;
    const float *w, *b;
    float eps;
    layernorm_row_fn row;
} ln_job;

static void ln_range(void *ctx, long r0, long r1, int thread) {
    (void)thread;
    const ln_job *j = ctx;
    for (long r = r0; r < r1; r++) j->row(j->x + (size_t)r * j->ldx, j->y + (size_t)r * j->ldy, j->cols, j->w, j->b, j->eps);
}

static void layernorm_rows(const float *x, size_t ldx, float *y, size_t ldy, size_t rows, size_t cols,
                           const float *w, const float *b, float eps, thread_pool *pool, layernorm_row_fn row) {
    if (rows == 0 || cols == 0) return;
    ln_job j = {x, ldx, y, ldy, cols, w, b, eps, row};
    pool_for(pool, (long)rows, 0, ln_range, &j);
}

void op_layernorm(const float *x, size_t ldx, float *y, size_t ldy, size_t rows, size_t cols, const float *w,
                  const float *b, float eps, thread_pool *pool) {
#if QVL_WITH_X86
    layernorm_rows(x, ldx, y, ldy, rows, cols, w, b, eps, pool, cpu_has_avx2() ? ops_layernorm_row_avx2 : layernorm_row);
#else
    layernorm_rows(x, ldx, y, ldy, rows, cols, w, b, eps, pool, layernorm_row);
#endif
}

void op_layernorm_scalar(const float *x, size_t ldx, float *y, size_t ldy, size_t rows, size_t cols, const float *w,
                         const float *b, float eps, thread_pool *pool) {
    layernorm_rows(x, ldx, y, ldy, rows, cols, w, b, eps, pool, layernorm_row);
}

/* torch (aten/src/ATen/native/cpu/Activation.cpp, GeluKernelImpl tanh branch):
 *   kBeta = M_SQRT2 * M_2_SQRTPI * 0.5; kKappa = 0.044715;
 *   inner = kBeta * (x + kKappa * (x * x * x)); y = 0.5 * x * (1 + tanh(inner)). Same order here, all f32. */
void op_gelu_tanh_scalar(float *x, size_t n) {
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
void op_gelu_erf_scalar(float *x, size_t n) {
    const float k_alpha = (float)M_SQRT1_2;
    for (size_t i = 0; i < n; i++) {
        float v = x[i];
        x[i] = v * 0.5f * (1.0f + erff(v * k_alpha));
    }
}

void op_gelu_tanh(float *x, size_t n) {
#if QVL_WITH_X86
    const int l = cpu_level();
    if (l == 3) ops_gelu_tanh_avx512(x, n);
    else if (l == 2) ops_gelu_tanh_avx2(x, n);
    else
#endif
        op_gelu_tanh_scalar(x, n);
}

void op_gelu_erf(float *x, size_t n) {
#if QVL_WITH_X86
    const int l = cpu_level();
    if (l == 3) ops_gelu_erf_avx512(x, n);
    else if (l == 2) ops_gelu_erf_avx2(x, n);
    else
#endif
        op_gelu_erf_scalar(x, n);
}

typedef struct rope_job {
    float *qkv;
    size_t ld;
    int heads, head_dim;
    const float *cos_t, *sin_t;
} rope_job;

static void rope_rows(void *ctx, long r0, long r1, int thread) {
    (void)thread;
    const rope_job *j = ctx;
    const int half = j->head_dim / 2;
    const size_t H = (size_t)j->heads * j->head_dim;
    for (size_t r = (size_t)r0; r < (size_t)r1; r++) {
        const float *co = j->cos_t + r * half, *si = j->sin_t + r * half;
        for (int part = 0; part < 2; part++) {
            float *base = j->qkv + r * j->ld + part * H;
            for (int hh = 0; hh < j->heads; hh++) {
                float *x = base + (size_t)hh * j->head_dim;
                for (int k = 0; k < half; k++) {
                    float a = x[k], b = x[k + half];
                    float ac = a * co[k], bs = b * si[k], bc = b * co[k], as = a * si[k];
                    x[k] = ac - bs;
                    x[k + half] = bc + as;
                }
            }
        }
    }
}

void op_rope(float *qkv, size_t ld, size_t rows, int heads, int head_dim, const float *cos_t, const float *sin_t,
             thread_pool *pool) {
    rope_job j = {qkv, ld, heads, head_dim, cos_t, sin_t};
    pool_for(pool, (long)rows, 0, rope_rows, &j);
}

typedef struct add_job {
    float *x;
    const float *y;
    size_t ldx, ldy, cols;
} add_job;

static void add_rows_job(void *ctx, long r0, long r1, int thread) {
    (void)thread;
    const add_job *j = ctx;
    for (size_t r = (size_t)r0; r < (size_t)r1; r++) {
        float *x = j->x + r * j->ldx;
        const float *y = j->y + r * j->ldy;
        for (size_t i = 0; i < j->cols; i++) x[i] = x[i] + y[i];
    }
}

void op_add_rows(float *x, size_t ldx, const float *y, size_t ldy, size_t rows, size_t cols, thread_pool *pool) {
    add_job j = {x, y, ldx, ldy, cols};
    pool_for(pool, (long)rows, 0, add_rows_job, &j);
}

void op_store_rows(const float *src, size_t lds, size_t rows, size_t cols, void *dst, size_t ld, qvl_dtype dt) {
    for (size_t r = 0; r < rows; r++) {
        const float *s = src + r * lds;
        if (dt == QVL_DTYPE_F32) {
            memcpy((float *)dst + r * ld, s, cols * sizeof *s);
        } else {
            uint16_t *d = (uint16_t *)dst + r * ld;
            if (dt == QVL_DTYPE_BF16)
                for (size_t j = 0; j < cols; j++) d[j] = op_f32_to_bf16(s[j]);
            else
                for (size_t j = 0; j < cols; j++) d[j] = op_f32_to_f16(s[j]);
        }
    }
}
