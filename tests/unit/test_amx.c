/* test_amx.c — the AMX-BF16 GEMM (src/cpu/gemm_amx.c) against its element-by-element definition (gemm_amx_ref,
 * TDPBF16PS's arithmetic), bit for bit, on sizes at and around every edge of its blocking (m: 16-row tiles,
 * 32-row pairs, 128-row M blocks; n: 16-column panels, 32-column pairs, N blocks split for the threads; k: odd,
 * one pair, 32-element tiles), bf16 / f16 / f32 weights, row strides past K, every epilogue, outputs
 * NaN-poisoned and ending at a guard page, 1 and 2 threads (16 on the multi-block shapes).
 *
 * Everywhere: the kernel over the C model of the tile instructions (amx_emulated.c), which checks the shapes and
 * configuration the CPU would fault on, and which the definition is checked against independently (the model
 * works on tiles, the definition element by element). The definition is checked against f32 within bf16
 * rounding, and the AVX512-BF16 set is checked to read the tile-padded panels. Where AMX is usable the same
 * cases run on the instructions too, from this (Release or sanitizer) build; elsewhere the test says that the
 * hardware half did not run, and exits 77 (skipped) after the emulated half passes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/convert.h"
#include "core/cpu.h"
#include "cpu/bf16.h"
#include "cpu/ops.h" /* op_rope */
#include "testutil.h"

static int hw;    /* the AMX set is usable here (CPU, OS permission and the start-up check) */
static int exact; /* ... and its tiles gave the definition's bits there (else a correct sum in another order) */

static void fill(float *x, size_t n, uint32_t *st, float scale) {
    for (size_t i = 0; i < n; i++) x[i] = tu_frand(st) * scale;
}

static int all_written(const float *c, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (isnan(c[i])) return 0;
    return 1;
}

typedef void (*run_fn)(const be_weight *, const float *, size_t, int, const float *, float *, size_t, int, be_act,
                       void *, int, thread_pool *);

static void gemm_case(int M, int N, int K, qvl_dtype dt, int bias_on, be_act act, int accumulate, int split) {
    uint32_t st = (uint32_t)(M * 7919 + N * 31 + K);
    const size_t lda = (size_t)K + (size_t)(M % 3); /* a row stride past K on some cases */
    float *A = malloc((size_t)M * lda * sizeof(float)), *Bf = malloc((size_t)N * K * sizeof(float));
    float *bias = malloc((size_t)N * sizeof(float)), *C0 = malloc((size_t)M * N * sizeof(float));
    uint16_t *Bh = malloc((size_t)N * K * 2);
    fill(A, (size_t)M * lda, &st, 1.0f);
    fill(Bf, (size_t)N * K, &st, 0.2f);
    fill(bias, (size_t)N, &st, 0.5f);
    fill(C0, (size_t)M * N, &st, 1.0f);
    for (size_t i = 0; i < (size_t)N * K; i++) Bh[i] = dt == QVL_DTYPE_F16 ? op_f32_to_f16(Bf[i]) : op_f32_to_bf16(Bf[i]);
    const void *B = dt == QVL_DTYPE_F32 ? (const void *)Bf : (const void *)Bh;
    void *buf = aligned_alloc(64, gemm_amx_pack_size(N, K));
    be_weight w;
    CHECK(gemm_amx_pack(&w, buf, B, dt, (size_t)K, N, K, NULL) == 0);
    CHECK(w.kp_panel % 16 == 0 && w.kp_panel >= (K + 1) / 2);
    if (split) w.arith = BE_ARITH_BF16X2; /* the backends set it after packing (same panels) */
    const size_t cn = (size_t)M * N;
    float *ref = malloc(cn * sizeof(float));
    if (accumulate) memcpy(ref, C0, cn * sizeof(float));
    else for (size_t i = 0; i < cn; i++) ref[i] = NAN;
    gemm_amx_ref(&w, A, lda, M, bias_on ? bias : NULL, ref, (size_t)N, accumulate, act);
    CHECK(all_written(ref, cn));
    /* the definition against f64 products of the same bf16 values (bf16 rounding of A: ~2^-9 relative) */
    if (!accumulate && act == BE_ACT_NONE && !bias_on) {
        double num = 0, den = 0;
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                double s = 0;
                for (int k = 0; k < K; k++) {
                    const float b = dt == QVL_DTYPE_F32 ? Bf[(size_t)j * K + k]
                                    : dt == QVL_DTYPE_F16 ? op_f16_to_f32(Bh[(size_t)j * K + k])
                                                          : op_bf16_to_f32(Bh[(size_t)j * K + k]);
                    s += (double)A[(size_t)i * lda + k] * op_bf16_to_f32(op_f32_to_bf16(b));
                }
                const double d = ref[(size_t)i * N + j] - s;
                num += d * d, den += s * s;
            }
        /* bf16 A: ~2^-9 relative; BF16X2's A to 16 bits: ~2^-17 (checked well below bf16's) */
        CHECK(den == 0 || sqrt(num / den) < (split ? 2e-5 : 1e-2));
    }
    void *ws = malloc(gemm_amx_workspace_size_emulated(16, K));
    float *C = tu_guarded_alloc(cn * sizeof(float));
    char what[128];
    struct { const char *name; run_fn run; int on; } sets[] = {
        {"emulated", gemm_amx_run_emulated, 1},
#if QVL_WITH_X86
        {"amx", gemm_amx_run, hw},
#endif
    };
    float *C1 = malloc(cn * sizeof(float));
    for (size_t s = 0; s < sizeof sets / sizeof *sets; s++) {
        if (!sets[s].on) continue;
        /* tiles that sum in another order than the definition (start-up check): within the bound of it, and the
         * two thread counts the same bits */
        const int inexact = s > 0 && !exact;
        /* 16 threads too on the multi-block shapes (more threads than M x N blocks on some: the N split for the
         * threads, idle threads) */
        static const int nts[] = {1, 2, 16};
        const int n_nt = M > 100 || K > 1000 ? 3 : 2;
        for (int ti = 0; ti < n_nt; ti++) {
            const int nt = nts[ti];
            if (accumulate) memcpy(C, C0, cn * sizeof(float));
            else for (size_t i = 0; i < cn; i++) C[i] = NAN;
            sets[s].run(&w, A, lda, M, bias_on ? bias : NULL, C, (size_t)N, accumulate, act, ws, K, tu_pool(nt));
            snprintf(what, sizeof what, "amx gemm m%d n%d k%d dt %d act %d acc %d split %d (%s, %d threads)", M, N, K,
                     (int)dt, (int)act, accumulate, split, sets[s].name, nt);
            if (!inexact) {
                CHECK(tu_same_bytes((const unsigned char *)C, (const unsigned char *)ref, cn * sizeof(float), what));
                continue;
            }
            const double x = amx_gemm_excess(A, lda, Bf, M, N, K, bias_on ? bias : NULL, accumulate ? C0 : NULL, act,
                                             C, ref, (size_t)N);
            if (!(x <= 1.0)) printf("%s: %.3g of the bound from the definition\n", what, x);
            CHECK(x <= 1.0);
            if (nt == 1) memcpy(C1, C, cn * sizeof(float));
            else CHECK(tu_same_bytes((const unsigned char *)C, (const unsigned char *)C1, cn * sizeof(float), what));
        }
    }
    free(C1);
    /* The VDPBF16PS sets read the tile-padded panels as their own (their definition, gemm_bf16_ref). */
    if (M <= 43 && !split) {
        void *bws = malloc(gemm_bf16_workspace_size(1));
        float *r2 = malloc(cn * sizeof(float));
        for (int set = 0; set <= (cpu_has_avx512bf16() ? 1 : 0); set++) {
            memcpy(C, C0, cn * sizeof(float));
            memcpy(r2, C0, cn * sizeof(float));
            gemm_bf16_run(set, &w, A, lda, M, bias_on ? bias : NULL, C, (size_t)N, 1, act, bws, NULL);
            gemm_bf16_ref(&w, A, lda, M, bias_on ? bias : NULL, r2, (size_t)N, 1, act);
            snprintf(what, sizeof what, "bf16 set %d on tile-padded panels m%d n%d k%d", set, M, N, K);
            CHECK(tu_same_bytes((const unsigned char *)C, (const unsigned char *)r2, cn * sizeof(float), what));
        }
        free(r2), free(bws);
    }
    tu_guarded_free(C);
    free(ws), free(ref), free(buf), free(Bh), free(A), free(Bf), free(bias), free(C0);
}

typedef void (*run_packed_fn)(const be_weight *, const float *, size_t, const uint16_t *, int, const float *,
                              float *, size_t, uint16_t *, int, be_act, void *, int, thread_pool *);

/* gemm_amx_run_packed: fc1 (N1 x K) writing its [M, N1] result in the operand layout, fc2 (N2 x N1, bf16 arithmetic,
 * accumulating) reading it, against fc1 into f32, gemm_amx_pack_a of that (emulated build), fc2 from the f32 rows:
 * the same bytes, the layout's every byte written (poisoned before; its padding zero past M and N1), on both
 * builds and 1, 2 and 16 threads. */
static void packed_case(int M, int K, int N1, int N2, be_act act) {
    uint32_t st = (uint32_t)(M * 131 + K * 7 + N1 * 3 + N2);
    float *A = malloc((size_t)M * K * sizeof(float)), *B1 = malloc((size_t)N1 * K * sizeof(float));
    float *B2 = malloc((size_t)N2 * N1 * sizeof(float)), *b1 = malloc((size_t)N1 * sizeof(float));
    float *b2 = malloc((size_t)N2 * sizeof(float)), *C0 = malloc((size_t)M * N2 * sizeof(float));
    float *H = malloc((size_t)M * N1 * sizeof(float)), *ref = malloc((size_t)M * N2 * sizeof(float));
    float *out = malloc((size_t)M * N2 * sizeof(float));
    fill(A, (size_t)M * K, &st, 1.0f), fill(B1, (size_t)N1 * K, &st, 0.2f), fill(B2, (size_t)N2 * N1, &st, 0.2f);
    fill(b1, (size_t)N1, &st, 0.5f), fill(b2, (size_t)N2, &st, 0.5f), fill(C0, (size_t)M * N2, &st, 1.0f);
    void *p1 = aligned_alloc(64, gemm_amx_pack_size(N1, K)), *p2 = aligned_alloc(64, gemm_amx_pack_size(N2, N1));
    be_weight w1, w2;
    CHECK(gemm_amx_pack(&w1, p1, B1, QVL_DTYPE_F32, (size_t)K, N1, K, NULL) == 0);
    CHECK(gemm_amx_pack(&w2, p2, B2, QVL_DTYPE_F32, (size_t)N1, N2, N1, NULL) == 0);
    const int kmax = K > N1 ? K : N1;
    void *ws = malloc(gemm_amx_workspace_size_emulated(16, kmax));
    const size_t pb = gemm_amx_packed_size(M, N1);
    CHECK(pb == ((size_t)M + 15) / 16 * 16 * (((size_t)N1 + 31) / 32 * 32) * 2);
    uint16_t *pref = aligned_alloc(64, pb), *pk = aligned_alloc(64, pb);
    /* the reference: f32 through the emulated build, the emulated packer over all rows */
    gemm_amx_run_emulated(&w1, A, (size_t)K, M, b1, H, (size_t)N1, 0, act, ws, kmax, NULL);
    memset(pref, 0xa5, pb);
    gemm_amx_pack_a_emulated(H, (size_t)N1, M, 0, N1, (N1 + 31) / 32, 1, pref);
    memcpy(ref, C0, (size_t)M * N2 * sizeof(float));
    gemm_amx_run_emulated(&w2, H, (size_t)N1, M, b2, ref, (size_t)N2, 1, BE_ACT_NONE, ws, kmax, NULL);
    struct { const char *name; run_packed_fn run; int on; } sets[] = {
        {"emulated", gemm_amx_run_packed_emulated, 1},
#if QVL_WITH_X86
        {"amx", gemm_amx_run_packed, hw && exact},
#endif
    };
    char what[128];
    for (size_t s = 0; s < sizeof sets / sizeof *sets; s++) {
        if (!sets[s].on) continue;
        static const int nts[] = {1, 2, 16};
        for (int ti = 0; ti < 3; ti++) {
            memset(pk, 0xa5, pb);
            sets[s].run(&w1, A, (size_t)K, NULL, M, b1, NULL, 0, pk, 0, act, ws, kmax, tu_pool(nts[ti]));
            snprintf(what, sizeof what, "packed result m%d k%d n%d act %d (%s, %d threads)", M, K, N1, (int)act,
                     sets[s].name, nts[ti]);
            CHECK(tu_same_bytes((const unsigned char *)pk, (const unsigned char *)pref, pb, what));
            memcpy(out, C0, (size_t)M * N2 * sizeof(float));
            sets[s].run(&w2, NULL, 0, pk, M, b2, out, (size_t)N2, NULL, 1, BE_ACT_NONE, ws, kmax, tu_pool(nts[ti]));
            snprintf(what, sizeof what, "packed operand m%d k%d n%d (%s, %d threads)", M, N1, N2, sets[s].name,
                     nts[ti]);
            CHECK(tu_same_bytes((const unsigned char *)out, (const unsigned char *)ref, (size_t)M * N2 * sizeof(float),
                                what));
        }
    }
    free(A), free(B1), free(B2), free(b1), free(b2), free(C0), free(H), free(ref), free(out), free(p1), free(p2);
    free(ws), free(pref), free(pk);
}

/* The AMX entries' layernorm_packed against layernorm into f32 and the emulated packer: the same bytes, every
 * byte of the layout written (rows past the last to their 16-row group zero), on 1, 2 and 16 threads. */
static void ln_packed_case(size_t rows, size_t cols) {
    uint32_t st = (uint32_t)(rows * 17 + cols);
    const size_t ldx = cols + 3;
    float *x = malloc(rows * ldx * sizeof(float)), *w = malloc(cols * sizeof(float)), *b = malloc(cols * sizeof(float));
    float *y = malloc(rows * cols * sizeof(float));
    fill(x, rows * ldx, &st, 3.0f), fill(w, cols, &st, 1.0f), fill(b, cols, &st, 0.5f);
    size_t n;
    const backend *const *tab = backend_table(&n);
    char what[96];
    for (size_t e = 0; e < n; e++) {
        const backend *be = tab[e];
        if (!be->layernorm_packed || !be->host_memory || !backend_runs(be)) continue;
        const size_t pb = be->packed_size((int)rows, (int)cols);
        uint16_t *ref = aligned_alloc(64, pb), *got = aligned_alloc(64, pb);
        void *ws = malloc(be->linear_ws(16, (int)cols));
        be->layernorm(be, x, ldx, y, cols, rows, cols, w, b, 1e-6f, NULL);
        memset(ref, 0xa5, pb);
        gemm_amx_pack_a_emulated(y, cols, (int)rows, 0, (int)cols, (int)(cols + 31) / 32, 1, ref);
        static const int nts[] = {1, 2, 16};
        for (int ti = 0; ti < 3; ti++) {
            memset(got, 0x5a, pb);
            be->layernorm_packed(be, x, ldx, got, rows, cols, w, b, 1e-6f, ws, tu_pool(nts[ti]));
            snprintf(what, sizeof what, "layernorm packed rows %zu cols %zu (%s, %d threads)", rows, cols, be->name,
                     nts[ti]);
            CHECK(tu_same_bytes((const unsigned char *)got, (const unsigned char *)ref, pb, what));
        }
        free(ref), free(got), free(ws);
    }
    free(x), free(w), free(b), free(y);
}

/* amx_gemm_excess, which lets the instructions through when their tiles sum in another order than the definition:
 * the VDPBF16PS order (gemm_bf16_ref) on the same operands is within its bound of the TDPBF16PS one, and so is
 * the f64 sum; a lost K tile, two swapped rows, an element off by 0.05·K and a NaN are not. */
static void agree_case(int M, int N, int K, be_act act, int accumulate) {
    uint32_t st = (uint32_t)(M * 131 + N * 7 + K);
    const size_t cn = (size_t)M * N;
    float *A = malloc((size_t)M * K * sizeof(float)), *B = malloc((size_t)N * K * sizeof(float));
    float *bias = malloc((size_t)N * sizeof(float)), *C0 = malloc(cn * sizeof(float));
    float *ref = malloc(cn * sizeof(float)), *alt = malloc(cn * sizeof(float)), *bad = malloc(cn * sizeof(float));
    fill(A, (size_t)M * K, &st, 1.0f);
    fill(B, (size_t)N * K, &st, 0.2f);
    for (size_t i = 0; i < (size_t)N * K; i++) B[i] = op_bf16_to_f32(op_f32_to_bf16(B[i]));
    fill(bias, (size_t)N, &st, 0.5f);
    fill(C0, cn, &st, 1.0f);
    void *buf = aligned_alloc(64, gemm_amx_pack_size(N, K));
    be_weight w;
    CHECK(gemm_amx_pack(&w, buf, B, QVL_DTYPE_F32, (size_t)K, N, K, NULL) == 0);
    const float *c0 = accumulate ? C0 : NULL;
#define AGREE_RUN(out, fn, a)                                                                                        \
    do {                                                                                                             \
        memcpy(out, C0, cn * sizeof(float));                                                                         \
        fn(&w, a, (size_t)K, M, bias, out, (size_t)N, accumulate, act);                                              \
    } while (0)
    AGREE_RUN(ref, gemm_amx_ref, A);
    AGREE_RUN(alt, gemm_bf16_ref, A);
    char what[96];
    snprintf(what, sizeof what, "agreement m%d n%d k%d act %d acc %d", M, N, K, (int)act, accumulate);
    const double x = amx_gemm_excess(A, (size_t)K, B, M, N, K, bias, c0, act, alt, ref, (size_t)N);
    if (!(x <= 1.0)) printf("%s: VDPBF16PS order at %.3g of the bound\n", what, x);
    CHECK(x <= 1.0);
    if (act == BE_ACT_NONE && !accumulate) { /* the exact sum of the same bf16 products */
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                double sum = bias[j];
                for (int k = 0; k < K; k++)
                    sum += (double)op_bf16_to_f32(op_f32_to_bf16(A[(size_t)i * K + k])) * B[(size_t)j * K + k];
                bad[(size_t)i * N + j] = (float)sum;
            }
        CHECK(amx_gemm_excess(A, (size_t)K, B, M, N, K, bias, c0, act, bad, ref, (size_t)N) <= 1.0);
    }
    double lost = NAN, swap = NAN;
    if (K > 32 && K <= 400) { /* the first K tile lost (the worst-case bound grows with K: ~4e-3 of Σ|a·b| at the
                                * fc2 width 4304, 8e-5 at the start-up check's 80, where a lost tile is far past it) */
        float *a2 = malloc((size_t)M * K * sizeof(float));
        memcpy(a2, A, (size_t)M * K * sizeof(float));
        for (int i = 0; i < M; i++) memset(a2 + (size_t)i * K, 0, 32 * sizeof(float));
        AGREE_RUN(bad, gemm_amx_ref, a2);
        lost = amx_gemm_excess(A, (size_t)K, B, M, N, K, bias, c0, act, bad, ref, (size_t)N);
        CHECK(lost > 1.0);
        free(a2);
    }
#undef AGREE_RUN
    if (M > 1) { /* rows 0 and 1 swapped */
        memcpy(bad, ref, cn * sizeof(float));
        memcpy(bad, ref + N, (size_t)N * sizeof(float));
        memcpy(bad + N, ref, (size_t)N * sizeof(float));
        swap = amx_gemm_excess(A, (size_t)K, B, M, N, K, bias, c0, act, bad, ref, (size_t)N);
        CHECK(swap > 1.0);
    }
    printf("test_amx: %s, in units of the bound: VDPBF16PS order %.3g, first K tile lost %.3g, rows swapped %.3g\n",
           what, x, lost, swap);
    memcpy(bad, ref, cn * sizeof(float)); /* one element off by a twentieth of a product per k */
    bad[cn - 1] += 0.25f + 0.05f * (float)K;
    CHECK(amx_gemm_excess(A, (size_t)K, B, M, N, K, bias, c0, act, bad, ref, (size_t)N) > 1.0);
    memcpy(bad, ref, cn * sizeof(float));
    bad[cn / 2] = NAN;
    CHECK(amx_gemm_excess(A, (size_t)K, B, M, N, K, bias, c0, act, bad, ref, (size_t)N) == INFINITY);
    free(buf), free(A), free(B), free(bias), free(C0), free(ref), free(alt), free(bad);
}

/* The two arithmetics differ only in order: on the same operands they agree to f32 rounding, and a case built
 * so the orders differ shows the AMX one (even and odd products in separate chains per 32-k tile). */
static void order_case(void) {
    enum { K = 64 };
    float A[K], B[K];
    for (int k = 0; k < K; k++) {
        A[k] = 1.0f;
        B[k] = 0.0f;
    }
    B[0] = 16777216.0f, B[2] = 1.0f, B[1] = 1.0f, B[3] = -16777216.0f;
    void *buf = aligned_alloc(64, gemm_amx_pack_size(1, K));
    be_weight w;
    CHECK(gemm_amx_pack(&w, buf, B, QVL_DTYPE_F32, K, 1, K, NULL) == 0);
    float amx = NAN, vdp = NAN;
    gemm_amx_ref(&w, A, K, 1, NULL, &amx, 1, 0, BE_ACT_NONE);
    gemm_bf16_ref(&w, A, K, 1, NULL, &vdp, 1, 0, BE_ACT_NONE);
    /* AMX: even = 2^24 + 1 → 2^24; odd = 1 - 2^24 → -(2^24 - 1) exactly; sum = 1.
     * VDPBF16PS chain: +B[1] (1), +B[0] (2^24 + 1 → 2^24), +B[3] (0), +B[2] (1): 1 as well; then a case where the
     * chain loses what the split keeps: */
    CHECK(amx == 1.0f && vdp == 1.0f);
    B[0] = 16777216.0f, B[1] = -16777216.0f, B[2] = 1.0f, B[3] = 0.0f, B[4] = 1.0f;
    CHECK(gemm_amx_pack(&w, buf, B, QVL_DTYPE_F32, K, 1, K, NULL) == 0);
    gemm_amx_ref(&w, A, K, 1, NULL, &amx, 1, 0, BE_ACT_NONE);
    gemm_bf16_ref(&w, A, K, 1, NULL, &vdp, 1, 0, BE_ACT_NONE);
    /* AMX: even = 2^24 + 1 + 1 → 2^24 (each +1 lost); odd = -2^24; sum 0. Chain: -2^24 + 2^24 = 0, +0, +1, +1 = 2. */
    CHECK(amx == 0.0f && vdp == 2.0f);
    free(buf);
}

/* BF16X2's split on values where it matters: exact for 16-bit significands (bf16 alone is not), NaN and
 * infinities through hi with lo = 0, denormals read as zero as the tiles do. */
static void split_specials(void) {
    enum { K = 32 };
    float A[4 * K], B[K];
    for (int k = 0; k < K; k++) {
        B[k] = k == 0 ? 1.0f : 0.0f; /* C[i] = A[i][0] */
        for (int i = 0; i < 4; i++) A[i * K + k] = 0.0f;
    }
    A[0 * K] = 1.0f + 0x1.0p-12f;          /* needs 13 bits: bf16 drops it, the split keeps it */
    A[1 * K] = -INFINITY;
    A[2 * K] = NAN;
    A[3 * K] = 3.0f * 0x1.0p-140f;         /* a denormal: read as zero by TDPBF16PS */
    void *buf = aligned_alloc(64, gemm_amx_pack_size(1, K));
    be_weight w;
    CHECK(gemm_amx_pack(&w, buf, B, QVL_DTYPE_F32, K, 1, K, NULL) == 0);
    w.arith = BE_ARITH_BF16X2;
    float c[4], e[4];
    gemm_amx_ref(&w, A, K, 4, NULL, c, 1, 0, BE_ACT_NONE);
    CHECK(c[0] == 1.0f + 0x1.0p-12f && c[1] == -INFINITY && isnan(c[2]) && c[3] == 0.0f);
    void *ws = malloc(gemm_amx_workspace_size_emulated(1, K));
    gemm_amx_run_emulated(&w, A, K, 4, NULL, e, 1, 0, BE_ACT_NONE, ws, K, NULL);
    CHECK(tu_same_bytes((const unsigned char *)e, (const unsigned char *)c, sizeof c, "split specials (emulated)"));
#if QVL_WITH_X86
    if (hw) {
        gemm_amx_run(&w, A, K, 4, NULL, e, 1, 0, BE_ACT_NONE, ws, K, NULL);
        /* The NaN's bits are the model's (x86 FMA keeps the operand's payload); the SDM does not say which NaN
         * the tiles return, so there only that it is one. */
        CHECK(isnan(e[2]));
        e[2] = c[2];
        CHECK(tu_same_bytes((const unsigned char *)e, (const unsigned char *)c, sizeof c, "split specials (amx)"));
    }
#endif
    w.arith = BE_ARITH_BF16;
    gemm_amx_ref(&w, A, K, 1, NULL, c, 1, 0, BE_ACT_NONE);
    CHECK(c[0] == 1.0f);
    free(ws), free(buf);
}

/* The instruction build's AVX-512 A packer (runs without AMX) against the portable one, bit for bit, on edge sizes
 * and special values (NaN, infinities, denormals, values whose rounding carries). */
static void packer_case(int mr, int K, int ns) {
#if QVL_WITH_X86
    const int kt = (K + 31) / 32, groups = (mr + 15) / 16;
    const size_t lda = (size_t)K + 3, n = (size_t)groups * kt * ns * 512;
    float *a = malloc((size_t)(mr > 0 ? mr : 1) * lda * sizeof(float));
    uint32_t st = (uint32_t)(mr * 131 + K * 7 + ns);
    for (size_t i = 0; i < (size_t)mr * lda; i++) {
        const float v = tu_frand(&st) * 4.0f;
        const int pick = (int)(i % 23);
        a[i] = pick == 3 ? NAN : pick == 5 ? INFINITY : pick == 7 ? -INFINITY : pick == 11 ? 1e-40f
             : pick == 13 ? 3.4e38f : pick == 17 ? 1.0f + 0x1.8p-8f : v;
    }
    uint16_t *p1 = malloc(n * 2), *p2 = malloc(n * 2);
    memset(p1, 0xab, n * 2);
    memset(p2, 0xcd, n * 2);
    gemm_amx_pack_a(a, lda, mr, 0, K, kt, ns, p1);
    gemm_amx_pack_a_emulated(a, lda, mr, 0, K, kt, ns, p2);
    char what[80];
    snprintf(what, sizeof what, "AVX-512 A packer m%d k%d ns %d", mr, K, ns);
    CHECK(tu_same_bytes((const unsigned char *)p1, (const unsigned char *)p2, n * 2, what));
    free(p1), free(p2), free(a);
#else
    (void)mr, (void)K, (void)ns;
#endif
}

/* The AMX entries' attention half on their own operands — qkv packed in the rotary order (pack_qkv), qkv_rope
 * (the rotary embedding in the GEMM's epilogue, Q, K, V in bf16), the attention reading them and writing proj's
 * operand — against the same entry's f32 path: linear into f32, op_rope, the attention into f32, and the
 * packer's rounding of its output. The same bytes (the operand and the attention's f32 output compared too),
 * with and without the attention's scratch, with A as f32 rows and as the GEMM's layout, on 1, 2 and 16 threads;
 * every byte of the outputs written (poisoned first). Segments end inside 16-row groups and 128-row blocks. */
static void attn_half_case(int heads, int hd, const int *cu, int n_seg, int hw_only) {
    const int H = heads * hd, N = 3 * H, K = H, S = cu[n_seg], half = hd / 2;
    CHECK(qkv_rope_takes(H, hd));
    uint32_t st = (uint32_t)(H * 7 + S);
    float *A = malloc((size_t)S * K * sizeof(float)), *B = malloc((size_t)N * K * sizeof(float));
    float *bias = malloc((size_t)N * sizeof(float)), *co = malloc((size_t)S * half * sizeof(float));
    float *si = malloc((size_t)S * half * sizeof(float)), *qkv = malloc((size_t)S * N * sizeof(float));
    float *o_ref = malloc((size_t)S * H * sizeof(float)), *o = malloc((size_t)S * H * sizeof(float));
    fill(A, (size_t)S * K, &st, 1.0f), fill(B, (size_t)N * K, &st, 0.1f), fill(bias, (size_t)N, &st, 0.5f);
    fill(co, (size_t)S * half, &st, 1.0f), fill(si, (size_t)S * half, &st, 1.0f);
    uint16_t *q_ref = malloc((size_t)S * N * 2), *q = malloc((size_t)S * N * 2);
    size_t n;
    const backend *const *tab = backend_table(&n);
    char what[160];
    for (size_t e = 0; e < n; e++) {
        const backend *be = tab[e];
        if (!be->qkv_rope || !be->host_memory || !backend_runs(be) || (hw_only && be->test_only)) continue;
        const size_t wb = be->pack_size(N, K, QVL_DTYPE_F32, BE_ARITH_BF16), pb = be->packed_size(S, H);
        void *w0 = aligned_alloc(64, wb), *w1 = aligned_alloc(64, wb), *ws = malloc(be->linear_ws(16, K));
        void *aws = malloc(be->attention_ws(hd, 16)), *scratch = malloc((size_t)S * N * 4);
        uint16_t *ap = aligned_alloc(64, be->packed_size(S, K)), *p_ref = aligned_alloc(64, pb);
        uint16_t *p = aligned_alloc(64, pb);
        be_weight wp, wr;
        CHECK(be->pack(be, &wp, w0, B, QVL_DTYPE_F32, (size_t)K, N, K, BE_ARITH_BF16, NULL) == 0 && wp.rope_hd == 0);
        CHECK(be->pack_qkv(be, &wr, w1, B, QVL_DTYPE_F32, (size_t)K, N, K, hd, BE_ARITH_BF16, NULL) == 0 &&
              wr.rope_hd == hd);
        /* the reference: the f32 path of the same entry */
        be->linear(be, &wp, A, (size_t)K, S, bias, qkv, (size_t)N, 0, BE_ACT_NONE, ws, K, tu_pool(2));
        op_rope(qkv, (size_t)N, (size_t)S, heads, hd, co, si, NULL);
        for (size_t i = 0; i < (size_t)S * N; i++) q_ref[i] = bf16_round_ftz(qkv[i]);
        be_attn at = {.q = qkv, .k = qkv + H, .v = qkv + 2 * H, .ldq = (size_t)N, .ldk = (size_t)N, .ldv = (size_t)N,
                      .out = o_ref, .ldo = (size_t)H, .n_heads = heads, .head_dim = hd, .cu = cu, .n_seg = n_seg,
                      .scale = 1.0f / sqrtf((float)hd), .scratch = scratch, .scratch_bytes = (size_t)S * N * 4};
        be->attention(be, &at, aws, tu_pool(2));
        memset(p_ref, 0xa5, pb);
        gemm_amx_pack_a_emulated(o_ref, (size_t)H, S, 0, H, (H + 31) / 32, 1, p_ref);
        gemm_amx_pack_a_emulated(A, (size_t)K, S, 0, K, (K + 31) / 32, 1, ap);
        static const int nts[] = {1, 2, 16};
        for (int ti = 0; ti < 3; ti++)
            for (int v = 0; v < 4; v++) { /* bit 0: A in the GEMM's layout; bit 1: no scratch for the attention */
                thread_pool *pool = tu_pool(nts[ti]);
                snprintf(what, sizeof what, "%s: qkv_rope %d heads of %d, %d rows in %d segments, A %s, %s, %d threads",
                         be->name, heads, hd, S, n_seg, v & 1 ? "packed" : "f32", v & 2 ? "no scratch" : "scratch",
                         nts[ti]);
                memset(q, 0xa5, (size_t)S * N * 2);
                CHECK(be->qkv_op_size(S, N) == (size_t)S * N * 2);
                be->qkv_rope(be, &wr, v & 1 ? NULL : A, (size_t)K, v & 1 ? ap : NULL, S, bias, co, si, q, ws, K, pool);
                CHECK(tu_same_bytes((const unsigned char *)q, (const unsigned char *)q_ref, (size_t)S * N * 2, what));
                be_attn a2 = at;
                a2.q = a2.k = a2.v = NULL;
                a2.qkv_op = q;
                a2.scratch = v & 2 ? NULL : scratch;
                a2.scratch_bytes = v & 2 ? 0 : (size_t)S * N * 4;
                a2.out_packed = p;
                memset(p, 0xa5, pb);
                be->attention(be, &a2, aws, pool);
                CHECK(tu_same_bytes((const unsigned char *)p, (const unsigned char *)p_ref, pb, what));
                a2.out_packed = NULL;
                a2.out = o;
                for (size_t i = 0; i < (size_t)S * H; i++) o[i] = NAN;
                be->attention(be, &a2, aws, pool);
                CHECK(tu_same_bytes((const unsigned char *)o, (const unsigned char *)o_ref, (size_t)S * H * 4, what));
#if QVL_WITH_X86
                if (be->test_only && cpu_has_avx512bf16()) { /* the instruction build's bf16 layouts, on any AVX512-BF16 CPU */
                    attn_args aa = {.ldq = (size_t)N, .ldk = (size_t)N, .ldv = (size_t)N, .n_heads = heads,
                                    .head_dim = hd, .cu = cu, .n_seg = n_seg, .scale = at.scale,
                                    .scratch = a2.scratch, .scratch_bytes = a2.scratch_bytes, .q16 = q, .k16 = q + H,
                                    .v16 = q + 2 * H, .out_tiles = p};
                    memset(p, 0xa5, pb);
                    attn_amx_run_emulated_simd(&aa, aws, pool);
                    snprintf(what + strlen(what), sizeof what - strlen(what), ", emulated tiles with AVX-512 layouts");
                    CHECK(tu_same_bytes((const unsigned char *)p, (const unsigned char *)p_ref, pb, what));
                }
#endif
            }
        free(w0), free(w1), free(ws), free(aws), free(scratch), free(ap), free(p_ref), free(p);
    }
    free(A), free(B), free(bias), free(co), free(si), free(qkv), free(o_ref), free(o), free(q_ref), free(q);
}

int main(void) {
    int usable = 0;
    const char *status = backend_amx_status(&usable);
    hw = usable;
    exact = backend_amx_exact();
    printf("test_amx: AMX-BF16 on this CPU: %s\n", status);
    if (hw && !exact)
        printf("test_amx: NOTE: the tiles sum in another order than gemm_amx_ref (TDPBF16PS as the SDM's pseudocode "
               "has it): the instructions are checked within f32 rounding of it here, not bit for bit\n");
    order_case();
    if (cpu_has_avx512bf16()) {
        static const int pm[] = {1, 15, 16, 17, 33}, pk[] = {1, 15, 16, 17, 31, 32, 33, 100};
        for (size_t i = 0; i < 5; i++)
            for (size_t k = 0; k < 8; k++)
                for (int ns = 1; ns <= 2; ns++) packer_case(pm[i], pk[k], ns);
    } else {
        printf("test_amx: no AVX512-BF16 here: the instruction build's A packer was not run\n");
    }
    static const int ms[] = {1, 15, 16, 17, 33, 127, 129};
    static const int ns[] = {1, 16, 17, 32, 33, 257};
    static const int ks[] = {1, 2, 31, 32, 33, 384, 385};
    int c = 0;
    for (size_t i = 0; i < sizeof ms / sizeof *ms; i++)
        for (size_t j = 0; j < sizeof ns / sizeof *ns; j++)
            for (size_t k = 0; k < sizeof ks / sizeof *ks; k++, c++)
                gemm_case(ms[i], ns[j], ks[k], c % 3 == 0 ? QVL_DTYPE_F32 : c % 3 == 1 ? QVL_DTYPE_BF16 : QVL_DTYPE_F16,
                          c % 2 == 0, (be_act)(c % 3), c % 4 == 1, c % 5 == 2);
    /* M blocks are 256 rows where K <= 2304 and the weights are plain BF16, else 128 (gemm_amx.c m_block) */
    gemm_case(130, 300, 800, QVL_DTYPE_BF16, 1, BE_ACT_GELU_TANH, 1, 0); /* one block of 130 rows */
    gemm_case(130, 300, 800, QVL_DTYPE_BF16, 0, BE_ACT_NONE, 0, 1);      /* split: two blocks, one of 2 rows */
    gemm_case(300, 40, 64, QVL_DTYPE_F32, 0, BE_ACT_GELU_ERF, 0, 0);      /* two blocks, 8-column tail */
    gemm_case(40, 96, 4304, QVL_DTYPE_BF16, 1, BE_ACT_NONE, 1, 0);        /* the 27B fc2's K (not a tile multiple) */
    gemm_case(272, 40, 2304, QVL_DTYPE_BF16, 1, BE_ACT_NONE, 1, 0);       /* the longest K of 256-row blocks: 256 + 16 */
    gemm_case(259, 33, 2305, QVL_DTYPE_BF16, 1, BE_ACT_GELU_TANH, 0, 0);  /* one past it: 128 + 128 + 3 */
    /* an MLP chunk of 882 rows: four blocks, the last of 114 rows; K of two tiles is shorter than a row pair's
     * epilogue rows */
    gemm_case(882, 256, 64, QVL_DTYPE_BF16, 1, BE_ACT_GELU_TANH, 1, 0);
    gemm_case(33, 70, 1536, QVL_DTYPE_BF16, 0, BE_ACT_NONE, 0, 1);        /* the patch embedding's K, split */
    split_specials();
    /* the MLP's hand-over: rows at and past the 16-row groups and 128-row blocks, hidden widths at and past the
     * 16- and 32-column edges (the 27B's 4304: a half tile), both GELUs */
    packed_case(1, 40, 16, 24, BE_ACT_GELU_TANH);
    packed_case(17, 33, 33, 16, BE_ACT_NONE);
    packed_case(130, 64, 100, 40, BE_ACT_GELU_ERF);
    packed_case(300, 32, 4304, 32, BE_ACT_GELU_TANH);
    ln_packed_case(1, 40);
    ln_packed_case(17, 33);
    ln_packed_case(130, 1152);
    {
        /* segments ending inside 16-row groups and past a 128-row block; four heads of 72 (rotary groups across
         * heads), two of 64, one of 32; on the tiles only (the model of them takes a minute), a 448² image's 784
         * rows in the 27B tower's 16 heads of 72 */
        static const int cu3[] = {0, 37, 137, 141}, cu1[] = {0, 784};
        attn_half_case(4, 72, cu3, 3, 0);
        attn_half_case(2, 64, cu3, 3, 0);
        attn_half_case(1, 32, cu3, 3, 0);
        attn_half_case(16, 72, cu1, 1, 1);
    }
    CHECK(backend_amx_check_emulated() == 2); /* the start-up check's own code, over the model */
    agree_case(40, 48, 80, BE_ACT_GELU_TANH, 1); /* the start-up check's shape */
    agree_case(17, 33, 385, BE_ACT_NONE, 0);
    agree_case(33, 16, 4304, BE_ACT_GELU_ERF, 0);
    agree_case(3, 5, 31, BE_ACT_NONE, 1);
#if QVL_WITH_X86
    if (!hw && cpu_amx_usable()) {
        /* The tiles run here but the start-up check found them differ from the definition, so the library uses
         * the AVX512-BF16 set instead: say by how much, for whoever adapts the definition to the hardware. */
        enum { DM = 40, DN = 48, DK = 800 };
        float *A = malloc(DM * DK * sizeof(float)), *B = malloc(DN * DK * sizeof(float));
        float *c1 = malloc(DM * DN * sizeof(float)), *c2 = malloc(DM * DN * sizeof(float));
        uint32_t st = 99;
        fill(A, DM * DK, &st, 1.0f);
        fill(B, DN * DK, &st, 0.2f);
        void *buf = aligned_alloc(64, gemm_amx_pack_size(DN, DK)), *ws = malloc(gemm_amx_workspace_size(1, DK));
        be_weight w;
        CHECK(gemm_amx_pack(&w, buf, B, QVL_DTYPE_F32, DK, DN, DK, NULL) == 0);
        gemm_amx_run(&w, A, DK, DM, NULL, c1, DN, 0, BE_ACT_NONE, ws, DK, NULL);
        gemm_amx_ref(&w, A, DK, DM, NULL, c2, DN, 0, BE_ACT_NONE);
        double maxabs = 0;
        const double rel = tu_relerr(c1, c2, DM * DN, &maxabs);
        printf("test_amx: NOTE: the AMX tiles differ from gemm_amx_ref (TDPBF16PS as the SDM's pseudocode has it) "
               "by %.3g relative, max |diff| %.3g, on a %dx%dx%d GEMM: the library runs AVX512-BF16 instead\n", rel,
               maxabs, DM, DN, DK);
        free(A), free(B), free(c1), free(c2), free(buf), free(ws);
    }
#endif
    if (!hw && tu_failures == 0) {
        printf("test_amx: the AMX kernel passes over the C model of the tile instructions; AMX is not usable here "
               "(%s), so the instructions themselves were not run (skipped)\n", status);
        tu_finish("test_amx");
        return TU_SKIP;
    }
    return tu_finish("test_amx");
}
