/* test_ops.c — LayerNorm and GELU against double-precision references; the AVX2 tanh/erf within 2 ulp of double
 * libm over a dense sweep of all floats (tiny, huge, negative, ±0, ±inf, NaN), the AVX2 GELUs against the libm ones
 * and independent of position; dtype conversions: every f16 and bf16 value round-trips, and f32 → f16/bf16 rounds
 * to nearest even at every midpoint between adjacent values. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/kernels_avx2.h"
#include "cpu/kernels_avx512.h"
#include "cpu/ops.h"
#include "testutil.h"

static uint32_t rng = 4242u;
static float frand(void) { return tu_frand(&rng); }

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void test_layernorm(size_t rows, size_t cols, float offset, int in_place) {
    const size_t ldx = cols + 3, ldy = cols + 1;
    float *x = malloc(rows * ldx * sizeof(float)), *y1 = malloc(rows * ldx * sizeof(float));
    float *y2 = malloc(rows * ldx * sizeof(float)), *w = malloc(cols * sizeof(float)), *b = malloc(cols * sizeof(float));
    float *ys = malloc(rows * ldx * sizeof(float));
    for (size_t i = 0; i < rows * ldx; i++) x[i] = offset + frand() * (1.0f + (float)(i % 7));
    for (size_t c = 0; c < cols; c++) w[c] = 1.0f + 0.5f * frand(), b[c] = frand();
    const float eps = 1e-6f;
    size_t ld1 = ldy;
    if (in_place) {
        memcpy(y1, x, rows * ldx * sizeof(float));
        memcpy(y2, x, rows * ldx * sizeof(float));
        ld1 = ldx;
        memcpy(ys, x, rows * ldx * sizeof(float));
        op_layernorm(y1, ldx, y1, ldx, rows, cols, w, b, eps, tu_pool(1));
        op_layernorm(y2, ldx, y2, ldx, rows, cols, w, b, eps, tu_pool(2));
        op_layernorm_scalar(ys, ldx, ys, ldx, rows, cols, w, b, eps, tu_pool(2));
    } else {
        op_layernorm(x, ldx, y1, ldy, rows, cols, w, b, eps, tu_pool(1));
        op_layernorm(x, ldx, y2, ldy, rows, cols, w, b, eps, tu_pool(2));
        op_layernorm_scalar(x, ldx, ys, ldy, rows, cols, w, b, eps, tu_pool(2));
    }
    int ok = 1, same = 1, ok_s = 1;
    for (size_t r = 0; r < rows; r++) {
        const float *xr = x + r * ldx;
        double mean = 0.0, var = 0.0;
        for (size_t c = 0; c < cols; c++) mean += xr[c];
        mean /= (double)cols;
        for (size_t c = 0; c < cols; c++) var += (xr[c] - mean) * (xr[c] - mean);
        var /= (double)cols;
        const double rstd = 1.0 / sqrt(var + eps);
        for (size_t c = 0; c < cols; c++) {
            const double t = (xr[c] - mean) * rstd, ref = t * w[c] + b[c];
            /* f32 budget: a few ulps of each term, including |x|·rstd from rounding x − mean */
            const double tol = 4e-7 * (fabs(xr[c]) * rstd * fabs(w[c]) + fabs(t * w[c]) + fabs(b[c])) + 1e-30;
            const float got = y1[r * ld1 + c];
            if (!(fabs(got - ref) <= tol)) {
                if (ok) fprintf(stderr, "layernorm %zux%zu off %g: [%zu,%zu] %.9g vs %.9g\n", rows, cols, offset, r, c, got, ref);
                ok = 0;
            }
            if (memcmp(&y1[r * ld1 + c], &y2[r * ld1 + c], 4)) same = 0;
            if (!(fabs(ys[r * ld1 + c] - ref) <= tol)) ok_s = 0; /* the scalar reference path, same bound */
        }
    }
    CHECK(ok);
    CHECK(same);
    CHECK(ok_s);
    free(x), free(y1), free(y2), free(w), free(b), free(ys);
}

static void test_gelu(void) {
    enum { N = 40001 };
    float *xt = malloc(N * sizeof(float)), *xe = malloc(N * sizeof(float)), *x0 = malloc(N * sizeof(float));
    for (int i = 0; i < N; i++) x0[i] = xt[i] = xe[i] = -10.0f + 20.0f * (float)i / (N - 1) + 1e-3f * frand();
    op_gelu_tanh(xt, N);
    op_gelu_erf(xe, N);
    int ok_t = 1, ok_e = 1;
    const double k0 = sqrt(2.0 / M_PI);
    for (int i = 0; i < N; i++) {
        const double x = x0[i];
        const double rt = 0.5 * x * (1.0 + tanh(k0 * (x + 0.044715 * x * x * x)));
        const double re = 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
        const double tol = 4e-7 * fabs(x) + 1e-30;
        if (!(fabs(xt[i] - rt) <= tol)) ok_t = 0;
        if (!(fabs(xe[i] - re) <= tol)) ok_e = 0;
    }
    CHECK(ok_t);
    CHECK(ok_e);
    /* Specials: ±0 stay zero, +inf → +inf, NaN → NaN, large negative → -0 or tiny. */
    float s[4] = {0.0f, -0.0f, INFINITY, NAN};
    float e[4];
    memcpy(e, s, sizeof s);
    op_gelu_tanh(s, 4);
    op_gelu_erf(e, 4);
    CHECK(s[0] == 0.0f && s[1] == 0.0f && s[2] == INFINITY && isnan(s[3]));
    CHECK(e[0] == 0.0f && e[1] == 0.0f && e[2] == INFINITY && isnan(e[3]));
    free(xt), free(xe), free(x0);
}

#if QVL_WITH_X86
/* Error of got in units of the last place of the f32 nearest ref (subnormal spacing below FLT_MIN). */
static double ulps(float got, double ref) {
    if (isnan(ref)) return isnan(got) ? 0.0 : INFINITY;
    if (isinf(ref)) return got == ref ? 0.0 : INFINITY;
    int e;
    frexp(fmax(fabs(ref), 1.17549435e-38), &e);
    return fabs((double)got - ref) / ldexp(1.0, e - 24);
}

/* Worst ulp error of the AVX2 tanh and erf over bit patterns lo, lo + step, ... < hi (with the sign bit set on
 * every other one when alt_sign); also checks that the sign follows x. */
static void sweep(uint64_t lo, uint64_t hi, uint32_t step, int alt_sign, double *wt, double *we, int *signs_ok) {
    enum { B = 4096 };
    float x[B], t[B], e[B];
    size_t n = 0;
    for (uint64_t u = lo, c = 0; u < hi || n; u += step, c++) {
        if (u < hi) x[n++] = bits_f32((uint32_t)u | (alt_sign && (c & 1) ? 0x80000000u : 0u));
        if (n < B && u < hi) continue;
        ops_tanh_avx2(x, t, n);
        ops_erf_avx2(x, e, n);
        for (size_t i = 0; i < n; i++) {
            *wt = fmax(*wt, ulps(t[i], tanh((double)x[i])));
            *we = fmax(*we, ulps(e[i], erf((double)x[i])));
            if (!isnan(x[i]) && (signbit(t[i]) != signbit(x[i]) || signbit(e[i]) != signbit(x[i]))) *signs_ok = 0;
        }
        n = 0;
    }
}

#endif

static void test_vector_math(void) {
#if !QVL_WITH_X86
    printf("test_ops: built without the x86 kernels (QVL_WITH_X86=0), vector tanh/erf not tested\n");
#else
    if (!cpu_has_avx2()) {
        printf("test_ops: no AVX2 on this CPU, vector tanh/erf not tested\n");
        return;
    }
    double wt = 0.0, we = 0.0;
    int signs_ok = 1;
    sweep(0, 0x100000000ull, 4099u, 0, &wt, &we, &signs_ok);        /* all of float: subnormals to inf and NaN */
    sweep(0x3c000000u, 0x41000000u, 211u, 1, &wt, &we, &signs_ok); /* dense over |x| in [2^-7, 8), both signs */
    printf("test_ops: vector tanh max %.3f ulp, erf max %.3f ulp\n", wt, we);
    CHECK(wt <= 2.0);
    CHECK(we <= 2.0);
    CHECK(signs_ok);
    float s[6] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN}, st[6], se[6];
    ops_tanh_avx2(s, st, 6);
    ops_erf_avx2(s, se, 6);
    CHECK(st[0] == 0.0f && !signbit(st[0]) && st[1] == 0.0f && signbit(st[1]) && st[2] == 1.0f && st[3] == -1.0f);
    CHECK(se[0] == 0.0f && !signbit(se[0]) && se[1] == 0.0f && signbit(se[1]) && se[2] == 1.0f && se[3] == -1.0f);
    CHECK(isnan(st[4]) && isnan(st[5]) && isnan(se[4]) && isnan(se[5]));

    /* GELUs: AVX2 vs the libm formulas, and a value's bits do not depend on where it sits (n = 1 vs a long row). */
    enum { N = 20011 };
    float *g0 = malloc(N * sizeof(float)), *gt = malloc(N * sizeof(float)), *ge = malloc(N * sizeof(float));
    float *rt = malloc(N * sizeof(float)), *re = malloc(N * sizeof(float));
    for (int i = 0; i < N; i++) g0[i] = -12.0f + 24.0f * (float)i / (N - 1) + 1e-3f * frand();
    memcpy(gt, g0, N * sizeof(float)), memcpy(ge, g0, N * sizeof(float));
    memcpy(rt, g0, N * sizeof(float)), memcpy(re, g0, N * sizeof(float));
    ops_gelu_tanh_avx2(gt, N);
    ops_gelu_erf_avx2(ge, N);
    op_gelu_tanh_scalar(rt, N);
    op_gelu_erf_scalar(re, N);
    int close_t = 1, close_e = 1, pos = 1;
    for (int i = 0; i < N; i++) {
        /* tanh/erf within 2 ulp each: 0.5·|x|·(2 + 2) ulp(1) bounds the difference of the products */
        const double tol = 4e-7 * fabs(g0[i]) + 1e-30;
        if (!(fabs((double)gt[i] - rt[i]) <= tol)) close_t = 0;
        if (!(fabs((double)ge[i] - re[i]) <= tol)) close_e = 0;
        float one_t = g0[i], one_e = g0[i];
        ops_gelu_tanh_avx2(&one_t, 1);
        ops_gelu_erf_avx2(&one_e, 1);
        if (memcmp(&one_t, &gt[i], 4) || memcmp(&one_e, &ge[i], 4)) pos = 0;
    }
    CHECK(close_t);
    CHECK(close_e);
    CHECK(pos);
    free(g0), free(gt), free(ge), free(rt), free(re);
#endif
}

/* The AVX-512 twins give the AVX2 bits for every value: all of float at a stride of 257 (subnormals, inf, NaN,
 * both signs), for tanh, erf and the two GELUs, including 1..15-element tails. */
static void test_avx512_twins(void) {
#if !QVL_WITH_X86
    printf("test_ops: built without the x86 kernels (QVL_WITH_X86=0), the 16-lane vector math not tested\n");
#else
    if (!cpu_has_avx512()) {
        printf("test_ops: no AVX-512 on this CPU, the 16-lane vector math not tested\n");
        return;
    }
    enum { B = 4093 }; /* not a multiple of 16: every call ends in a masked tail */
    static float x[B], a[4][B], b[4][B];
    int same = 1;
    size_t n = 0;
    for (uint64_t u = 0; u < 0x100000000ull || n; u += 257) {
        if (u < 0x100000000ull) x[n++] = bits_f32((uint32_t)u);
        if (n < B && u < 0x100000000ull) continue;
        ops_tanh_avx2(x, a[0], n), ops_tanh_avx512(x, b[0], n);
        ops_erf_avx2(x, a[1], n), ops_erf_avx512(x, b[1], n);
        memcpy(a[2], x, n * 4), memcpy(b[2], x, n * 4), memcpy(a[3], x, n * 4), memcpy(b[3], x, n * 4);
        ops_gelu_tanh_avx2(a[2], n), ops_gelu_tanh_avx512(b[2], n);
        ops_gelu_erf_avx2(a[3], n), ops_gelu_erf_avx512(b[3], n);
        for (int f = 0; f < 4; f++)
            if (memcmp(a[f], b[f], n * 4)) same = 0;
        n = 0;
    }
    CHECK(same);
#endif
}

static void test_conversions(void) {
    int rt16 = 1, rtbf = 1, nan16 = 1, nanbf = 1;
    for (uint32_t h = 0; h < 65536; h++) {
        const float f = op_f16_to_f32((uint16_t)h), g = op_bf16_to_f32((uint16_t)h);
        const int is_nan16 = (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu);
        const int is_nanbf = (h & 0x7f80u) == 0x7f80u && (h & 0x7fu);
        if (is_nan16) {
            if (!isnan(f) || !(op_f32_to_f16(f) & 0x200u) || (op_f32_to_f16(f) & 0x7c00u) != 0x7c00u) nan16 = 0;
        } else if (op_f32_to_f16(f) != h) rt16 = 0;
        if (is_nanbf) {
            uint16_t r = op_f32_to_bf16(g);
            if (!isnan(g) || (r & 0x7f80u) != 0x7f80u || !(r & 0x40u) || (r & 0x8000u) != (h & 0x8000u)) nanbf = 0;
        } else if (op_f32_to_bf16(g) != h) rtbf = 0;
    }
    CHECK(rt16);
    CHECK(rtbf);
    CHECK(nan16);
    CHECK(nanbf);
    /* Ties and their neighbours between every pair of adjacent finite values (both signs): the midpoint is exact
     * in f32 and must go to the even one; one f32 ulp either side goes to the nearer one. */
    int ties16 = 1, tiesbf = 1;
    for (uint32_t sign = 0; sign <= 0x8000u; sign += 0x8000u) {
        for (uint32_t h = 0; h < 0x7bffu; h++) {
            const float a = op_f16_to_f32((uint16_t)(sign | h)), b = op_f16_to_f32((uint16_t)(sign | (h + 1)));
            const float m = (float)(((double)a + (double)b) / 2.0);
            const uint16_t even = (uint16_t)(sign | ((h & 1u) ? h + 1 : h));
            if (op_f32_to_f16(m) != even || op_f32_to_f16(nextafterf(m, a)) != (sign | h) ||
                op_f32_to_f16(nextafterf(m, b)) != (sign | (h + 1)))
                ties16 = 0;
        }
        for (uint32_t h = 0; h < 0x7f7fu; h++) {
            const float a = op_bf16_to_f32((uint16_t)(sign | h)), b = op_bf16_to_f32((uint16_t)(sign | (h + 1)));
            const float m = (float)(((double)a + (double)b) / 2.0);
            const uint16_t even = (uint16_t)(sign | ((h & 1u) ? h + 1 : h));
            if (op_f32_to_bf16(m) != even || op_f32_to_bf16(nextafterf(m, a)) != (sign | h) ||
                op_f32_to_bf16(nextafterf(m, b)) != (sign | (h + 1)))
                tiesbf = 0;
        }
    }
    CHECK(ties16);
    CHECK(tiesbf);
    /* Overflow: 65504 is the largest f16; from the 65520 midpoint up everything rounds to inf. */
    CHECK(op_f32_to_f16(65504.0f) == 0x7bffu);
    CHECK(op_f32_to_f16(nextafterf(65520.0f, 0.0f)) == 0x7bffu);
    CHECK(op_f32_to_f16(65520.0f) == 0x7c00u);
    CHECK(op_f32_to_f16(-1e10f) == 0xfc00u);
    CHECK(op_f32_to_f16(INFINITY) == 0x7c00u && op_f32_to_f16(-INFINITY) == 0xfc00u);
    CHECK(op_f32_to_bf16(INFINITY) == 0x7f80u && op_f32_to_bf16(-INFINITY) == 0xff80u);
    CHECK(op_f32_to_bf16(bits_f32(0x7f7fffffu)) == 0x7f80u); /* FLT_MAX rounds up to inf in bf16 */
    /* f32 subnormals: to bf16 they keep their top bits; to f16 they flush to signed zero. */
    CHECK(op_f32_to_bf16(bits_f32(0x00010000u)) == 0x0001u);
    CHECK(op_f32_to_f16(bits_f32(0x00000001u)) == 0x0000u && op_f32_to_f16(bits_f32(0x80000001u)) == 0x8000u);
    CHECK(op_f16_to_f32(0x0001u) == 5.9604644775390625e-8f && op_f16_to_f32(0x8400u) == -6.103515625e-5f);

    /* op_to_f32 from unaligned sources. */
    unsigned char buf[2 + 4 * 37];
    float out[37];
    int ok = 1;
    for (int i = 0; i < 37; i++) {
        uint16_t h = (uint16_t)(0x3c00u + 97u * (uint32_t)i);
        memcpy(buf + 1 + 2 * i, &h, 2);
    }
    op_to_f32(buf + 1, QVL_DTYPE_F16, out, 37);
    for (int i = 0; i < 37; i++) ok &= out[i] == op_f16_to_f32((uint16_t)(0x3c00u + 97u * (uint32_t)i));
    op_to_f32(buf + 1, QVL_DTYPE_BF16, out, 37);
    for (int i = 0; i < 37; i++) ok &= out[i] == op_bf16_to_f32((uint16_t)(0x3c00u + 97u * (uint32_t)i));
    unsigned char fbuf[2 + 4 * 36];
    for (int i = 0; i < 36; i++) {
        float f = (float)i * 0.25f - 3.0f;
        memcpy(fbuf + 2 + 4 * i, &f, 4);
    }
    op_to_f32(fbuf + 2, QVL_DTYPE_F32, out, 36);
    for (int i = 0; i < 36; i++) ok &= out[i] == (float)i * 0.25f - 3.0f;
    CHECK(ok);
}

int main(void) {
    test_layernorm(5, 1152, 0.0f, 0);
    test_layernorm(7, 1152, 100.0f, 0); /* large mean: a one-pass E[x²] − E[x]² would lose it */
    test_layernorm(3, 7, -3.0f, 1);
    test_layernorm(33, 64, 0.5f, 1);
    test_layernorm(4, 13, 2.0f, 0); /* vector body plus a scalar tail */
    test_gelu();
    test_avx512_twins();
    test_vector_math();
    test_conversions();
    return tu_finish("test_ops");
}
