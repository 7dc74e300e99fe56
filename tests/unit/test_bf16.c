/* test_bf16.c — the bf16 arithmetic (precision bf16, src/cpu/bf16.h): the GEMM and attention drivers with the
 * portable and the AVX512-BF16 kernels against the element-by-element definitions (gemm_bf16_ref,
 * attn_bf16_ref), bit for bit, on sizes at and around the block edges (m: 14-row tiles and 42-row blocks; n:
 * 16-column panels, 32-column tiles, 1536-column blocks; k: odd, 384-element K blocks; segments: 16-row vectors,
 * 48-row blocks, 8-key chunks, odd key counts, 64/80-key tiles, 192/240-row query tiles; head dims 64, 72 and
 * others that end in a partial 8-column P·V pass), outputs NaN-poisoned and ending at a guard page, 1 and 2
 * threads.
 * The definitions are checked against f32 within bf16 rounding. Without AVX512-BF16 the portable checks run and
 * the test then exits 77 (skipped), saying so. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/convert.h"
#include "core/cpu.h"
#include "cpu/attention.h"
#include "cpu/bf16.h"
#include "cpu/kernels_avx2.h" /* attn_query_tiles */
#include "testutil.h"

static void fill(float *x, size_t n, uint32_t *st, float scale) {
    for (size_t i = 0; i < n; i++) x[i] = tu_frand(st) * scale;
}

static int all_written(const float *c, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (isnan(c[i])) return 0;
    return 1;
}

static int has_bf16;

static void gemm_case(int M, int N, int K, qvl_dtype dt, int bias_on, be_act act, int accumulate) {
    uint32_t st = (uint32_t)(M * 7919 + N * 31 + K);
    float *A = malloc((size_t)M * K * sizeof(float)), *Bf = malloc((size_t)N * K * sizeof(float));
    float *bias = malloc((size_t)N * sizeof(float)), *C0 = malloc((size_t)M * N * sizeof(float));
    uint16_t *Bh = malloc((size_t)N * K * 2);
    fill(A, (size_t)M * K, &st, 1.0f);
    fill(Bf, (size_t)N * K, &st, 0.2f);
    fill(bias, (size_t)N, &st, 0.5f);
    fill(C0, (size_t)M * N, &st, 1.0f);
    for (size_t i = 0; i < (size_t)N * K; i++) Bh[i] = dt == QVL_DTYPE_F16 ? op_f32_to_f16(Bf[i]) : op_f32_to_bf16(Bf[i]);
    const void *B = dt == QVL_DTYPE_F32 ? (const void *)Bf : (const void *)Bh;
    void *buf = aligned_alloc(64, gemm_bf16_pack_size(N, K));
    be_weight w;
    CHECK(gemm_bf16_pack(&w, buf, B, dt, (size_t)K, N, K, NULL) == 0);
    const size_t cn = (size_t)M * N;
    float *ref = malloc(cn * sizeof(float));
    if (accumulate) memcpy(ref, C0, cn * sizeof(float));
    else for (size_t i = 0; i < cn; i++) ref[i] = NAN;
    gemm_bf16_ref(&w, A, (size_t)K, M, bias_on ? bias : NULL, ref, (size_t)N, accumulate, act);
    if (!all_written(ref, cn)) printf("gemm m%d n%d k%d dt %d act %d acc %d: reference left NaN\n", M, N, K, (int)dt, (int)act, accumulate);
    CHECK(all_written(ref, cn));
    /* the definition against f32 products of the same bf16 values (bf16 rounding of A: ~2^-9 relative) */
    if (!accumulate && act == BE_ACT_NONE && !bias_on) {
        double num = 0, den = 0;
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                double s = 0;
                for (int k = 0; k < K; k++) s += (double)A[(size_t)i * K + k] * op_bf16_to_f32(op_f32_to_bf16(Bf[(size_t)j * K + k]));
                const double d = ref[(size_t)i * N + j] - s;
                num += d * d, den += s * s;
            }
        CHECK(den == 0 || sqrt(num / den) < 1e-2);
    }
    const size_t ws_bytes = gemm_bf16_workspace_size(2);
    void *ws = malloc(ws_bytes);
    float *C = tu_guarded_alloc(cn * sizeof(float));
    for (int set = 0; set <= (has_bf16 ? 1 : 0); set++)
        for (int nt = 1; nt <= 2; nt++) {
            if (accumulate) memcpy(C, C0, cn * sizeof(float));
            else for (size_t i = 0; i < cn; i++) C[i] = NAN;
            gemm_bf16_run(set, &w, A, (size_t)K, M, bias_on ? bias : NULL, C, (size_t)N, accumulate, act, ws, tu_pool(nt));
            char what[96];
            snprintf(what, sizeof what, "gemm m%d n%d k%d set %d threads %d", M, N, K, set, nt);
            CHECK(tu_same_bytes((const unsigned char *)C, (const unsigned char *)ref, cn * sizeof(float), what));
        }
    tu_guarded_free(C);
    free(ws), free(ref), free(buf), free(Bh), free(A), free(Bf), free(bias), free(C0);
}

/* A and C inside wider rows (lda > K, ldc > N; as the tower's qkv and residual rows): the columns around each C row
 * stay as they were, for every epilogue. */
static void gemm_strided_case(int M, int N, int K, be_act act, int accumulate) {
    const size_t lda = (size_t)K + 5, ldc = (size_t)N + 9, an = (size_t)M * lda, cn = (size_t)M * ldc;
    uint32_t st = (uint32_t)(M * 31 + N * 7 + K + act * 3 + accumulate);
    float *A = malloc(an * sizeof(float)), *Bf = malloc((size_t)N * K * sizeof(float));
    float *bias = malloc((size_t)N * sizeof(float)), *C0 = malloc(cn * sizeof(float)), *ref = malloc(cn * sizeof(float));
    fill(A, an, &st, 1.0f);
    fill(Bf, (size_t)N * K, &st, 0.2f);
    fill(bias, (size_t)N, &st, 0.5f);
    fill(C0, cn, &st, 1.0f);
    void *buf = aligned_alloc(64, gemm_bf16_pack_size(N, K)), *ws = malloc(gemm_bf16_workspace_size(2));
    be_weight w;
    CHECK(gemm_bf16_pack(&w, buf, Bf, QVL_DTYPE_F32, (size_t)K, N, K, NULL) == 0);
    memcpy(ref, C0, cn * sizeof(float));
    gemm_bf16_ref(&w, A, lda, M, bias, ref, ldc, accumulate, act);
    float *C = tu_guarded_alloc(cn * sizeof(float));
    for (int set = 0; set <= (has_bf16 ? 1 : 0); set++)
        for (int nt = 1; nt <= 2; nt++) {
            memcpy(C, C0, cn * sizeof(float));
            gemm_bf16_run(set, &w, A, lda, M, bias, C, ldc, accumulate, act, ws, tu_pool(nt));
            char what[96];
            snprintf(what, sizeof what, "strided gemm m%d n%d k%d act %d acc %d set %d threads %d", M, N, K, (int)act,
                     accumulate, set, nt);
            CHECK(tu_same_bytes((const unsigned char *)C, (const unsigned char *)ref, cn * sizeof(float), what));
        }
    tu_guarded_free(C);
    free(ws), free(buf), free(ref), free(C0), free(bias), free(Bf), free(A);
}

static void attn_case(const int *lens, int n_seg, int hd) {
    const int nh = 2, H = nh * hd;
    int cu[16], S = 0;
    cu[0] = 0;
    for (int s = 0; s < n_seg; s++) cu[s + 1] = S += lens[s];
    uint32_t st = (uint32_t)(S * 131 + hd);
    float *qkv = malloc((size_t)S * 3 * H * sizeof(float));
    fill(qkv, (size_t)S * 3 * H, &st, 2.0f);
    const size_t on = (size_t)S * H;
    float *ref = malloc(on * sizeof(float)), *f32 = malloc(on * sizeof(float));
    attn_args a = {.q = qkv, .k = qkv + H, .v = qkv + 2 * H, .ldq = 3 * (size_t)H, .ldk = 3 * (size_t)H,
                   .ldv = 3 * (size_t)H, .out = ref, .ldo = (size_t)H, .n_heads = nh, .head_dim = hd, .cu = cu,
                   .n_seg = n_seg, .scale = 1.0f / sqrtf((float)hd)};
    for (size_t i = 0; i < on; i++) ref[i] = NAN;
    attn_bf16_ref(&a);
    CHECK(all_written(ref, on));
    a.out = f32;
    attn_ref(&a);
    double mx;
    const double rel = tu_relerr(ref, f32, on, &mx);
    if (!(rel < 2e-2)) printf("attention bf16 vs f32: relative error %.3g\n", rel);
    CHECK(rel < 2e-2);
    void *ws = malloc(attn_bf16_workspace_size(hd, 2));
    float *out = tu_guarded_alloc(on * sizeof(float));
    a.out = out;
    for (int set = 0; set <= (has_bf16 ? 1 : 0); set++)
        for (int nt = 1; nt <= 2; nt++) {
            for (size_t i = 0; i < on; i++) out[i] = NAN;
            attn_bf16_run(set, &a, ws, tu_pool(nt));
            char what[96];
            snprintf(what, sizeof what, "attention S %d (%d segments, first %d) hd %d set %d threads %d", S, n_seg,
                     lens[0], hd, set, nt);
            CHECK(tu_same_bytes((const unsigned char *)out, (const unsigned char *)ref, on * sizeof(float), what));
        }
    /* With scratch for the K and V pack (attention_bf16.c): room for every head, for one head at a time (two
     * groups; the odd size also leaves the buffer unaligned), and one byte short of one head (the per-item path).
     * Only segments of more than one query tile are packed; when none is, any scratch is left alone (4 KiB here).
     * The scratch starts as NaN bytes, so a pair the pack leaves unwritten shows, and a scratch too small for one
     * head (or not needed) must come back untouched. */
    size_t keys = 0;
    for (int s = 0; s < n_seg; s++)
        if (attn_query_tiles(lens[s]) > 1) keys += ((size_t)lens[s] + 7) & ~(size_t)7;
    const size_t head_bytes = keys * (size_t)hd * sizeof(uint32_t);
    const size_t sizes[3] = {keys ? (size_t)nh * head_bytes + 64 : 4096, head_bytes + 63, head_bytes - 1};
    for (int z = 0; z < (keys ? 3 : 1); z++) {
        const int untouched = !keys || z == 2;
        unsigned char *scratch = tu_guarded_alloc(sizes[z]);
        a.scratch = scratch;
        a.scratch_bytes = sizes[z];
        for (int set = 0; set <= (has_bf16 ? 1 : 0); set++)
            for (int nt = 1; nt <= 2; nt++) {
                memset(scratch, 0xff, sizes[z]);
                for (size_t i = 0; i < on; i++) out[i] = NAN;
                attn_bf16_run(set, &a, ws, tu_pool(nt));
                char what[128];
                snprintf(what, sizeof what, "attention S %d (%d segments, first %d) hd %d set %d threads %d scratch %zu",
                         S, n_seg, lens[0], hd, set, nt, sizes[z]);
                CHECK(tu_same_bytes((const unsigned char *)out, (const unsigned char *)ref, on * sizeof(float), what));
                size_t w = 0;
                while (untouched && w < sizes[z] && scratch[w] == 0xff) w++;
                if (untouched && w < sizes[z]) printf("%s: scratch byte %zu written\n", what, w);
                CHECK(!untouched || w == sizes[z]);
            }
        tu_guarded_free(scratch);
    }
    tu_guarded_free(out);
    free(ws), free(ref), free(f32), free(qkv);
}

/* The pair step is VDPBF16PS's: odd product first, denormals in and out flushed (spot values). */
static void pair_rules(void) {
    const float tiny = 1e-39f; /* denormal */
    CHECK(bf16_pair(1.0f, 0x1p-24f, 1.0f, 0x1p-24f, 1.0f) == 1.0f); /* two ties to even, not one 2^-23 step */
    CHECK(bf16_pair(tiny, 0.0f, 0.0f, 0.0f, 0.0f) == 0.0f);
    CHECK(bf16_pair(0.0f, 0x1p-70f, 0x1p-70f, 0.0f, 0.0f) == 0.0f);
    CHECK(bf16_exp2(0.0f) == 1.0f && bf16_exp2(-1.0f) == 0.5f && bf16_exp2(-INFINITY) == 0.0f &&
          bf16_exp2(NAN) == 0.0f && bf16_exp2(-125.5f) == 0.0f && bf16_exp2(-125.0f) == 0x1p-125f);
    for (float x = -124.9f; x <= 0.0f; x += 0.37f) CHECK(fabsf(bf16_exp2(x) - exp2f(x)) <= 3e-7f * exp2f(x));
    /* attention's operand rounding is VCVTNEPS2BF16's: denormals to a zero of their sign, NaN quiet */
    CHECK(bf16_round_ftz(1e-39f) == 0 && bf16_round_ftz(-1e-39f) == 0x8000 && bf16_round_ftz(0x1p-126f) == 0x0080);
    CHECK(bf16_round_ftz(1.0f + 0x1p-8f) == 0x3f80 && bf16_round_ftz(1.0f + 0x1.8p-7f) == 0x3f82);
    CHECK((bf16_round_ftz(NAN) & 0x7fc0) == 0x7fc0);
}

/* Operands of chosen binary exponents (bf16 exponent fields ea, eb: |x| in [2^(ea-127), 2^(ea-126))), with the
 * second 14-row micro-tile's rows at ea2, all positive when pos: the portable micro-tile computes acc + x·y
 * where every product of the tile is exact (ea + eb in [128, 380]) and falls back to fmaf elsewhere; both, at
 * and past those bounds (products near FLT_MIN and denormal; sums overflowing), against the definition, bit for
 * bit. K spans three K blocks, so chains continue across the two paths. With AVX512-BF16 the same cases run
 * through VDPBF16PS (on an AMD Zen 4 its results agreed with the definition in all of them). */
static void gemm_range_case(int ea, int ea2, int eb, int pos, int accumulate) {
    const int M = 29, N = 70, K = 800;
    uint32_t st = (uint32_t)(ea * 131 + ea2 * 17 + eb * 7 + pos * 3 + accumulate);
    float *A = malloc((size_t)M * K * sizeof(float)), *C0 = malloc((size_t)M * N * sizeof(float));
    uint16_t *Bh = malloc((size_t)N * K * 2);
    for (int i = 0; i < M; i++)
        for (int k = 0; k < K; k++) {
            const uint16_t m = (uint16_t)(tu_frand(&st) * 64.0f + 64.0f) & 0x7f; /* 7 mantissa bits */
            const int e = i >= 14 && i < 28 ? ea2 : ea;
            const int neg = !pos && tu_frand(&st) < 0.0f;
            A[(size_t)i * K + k] = op_bf16_to_f32((uint16_t)((neg ? 0x8000u : 0u) | (unsigned)e << 7 | m));
        }
    for (size_t i = 0; i < (size_t)N * K; i++) {
        const uint16_t m = (uint16_t)(tu_frand(&st) * 64.0f + 64.0f) & 0x7f;
        const int neg = !pos && tu_frand(&st) < 0.0f;
        Bh[i] = (uint16_t)((neg ? 0x8000u : 0u) | (unsigned)eb << 7 | m);
    }
    fill(C0, (size_t)M * N, &st, 1e-37f);
    void *buf = aligned_alloc(64, gemm_bf16_pack_size(N, K)), *ws = malloc(gemm_bf16_workspace_size(2));
    be_weight w;
    CHECK(gemm_bf16_pack(&w, buf, Bh, QVL_DTYPE_BF16, (size_t)K, N, K, NULL) == 0);
    const size_t cn = (size_t)M * N;
    float *ref = malloc(cn * sizeof(float)), *C = tu_guarded_alloc(cn * sizeof(float));
    memcpy(ref, C0, cn * sizeof(float));
    gemm_bf16_ref(&w, A, (size_t)K, M, NULL, ref, (size_t)N, accumulate, BE_ACT_NONE);
    for (int set = 0; set <= (has_bf16 ? 1 : 0); set++)
        for (int nt = 1; nt <= 2; nt++) {
            memcpy(C, C0, cn * sizeof(float));
            gemm_bf16_run(set, &w, A, (size_t)K, M, NULL, C, (size_t)N, accumulate, BE_ACT_NONE, ws, tu_pool(nt));
            char what[96];
            snprintf(what, sizeof what, "range gemm ea %d/%d eb %d pos %d acc %d set %d threads %d", ea, ea2, eb,
                     pos, accumulate, set, nt);
            CHECK(tu_same_bytes((const unsigned char *)C, (const unsigned char *)ref, cn * sizeof(float), what));
        }
    tu_guarded_free(C);
    free(ref), free(ws), free(buf), free(Bh), free(C0), free(A);
}

/* A chain that continues into a K block whose products are all multiples of 2^-126 (where the portable micro-tile
 * may drop its daz steps) from a partial sum that is not one: block 1 leaves c = 195·235·2^-127 (fields 70 + 71),
 * block 2 adds −128·179·2^-126 (71 + 71), and the exact sum 2^-127 is denormal, so the definition flushes it to 0. */
static void gemm_start_case(void) {
    const int M = 14, N = 16, K = 386;
    float *A = calloc((size_t)M * K, sizeof(float)), *B = calloc((size_t)N * K, sizeof(float));
    for (int i = 0; i < M; i++) A[(size_t)i * K] = ldexpf(195, 70 - 134), A[(size_t)i * K + 384] = ldexpf(-128, 71 - 134);
    for (int j = 0; j < N; j++) B[(size_t)j * K] = ldexpf(235, 71 - 134), B[(size_t)j * K + 384] = ldexpf(179, 71 - 134);
    void *buf = aligned_alloc(64, gemm_bf16_pack_size(N, K)), *ws = malloc(gemm_bf16_workspace_size(2));
    be_weight w;
    CHECK(gemm_bf16_pack(&w, buf, B, QVL_DTYPE_F32, (size_t)K, N, K, NULL) == 0);
    float ref[14 * 16], C[14 * 16];
    gemm_bf16_ref(&w, A, (size_t)K, M, NULL, ref, (size_t)N, 0, BE_ACT_NONE);
    CHECK(ref[0] == 0.0f && ldexpf(195 * 235, -127) + ldexpf(-128 * 179, -126) == ldexpf(1, -127));
    for (int set = 0; set <= (has_bf16 ? 1 : 0); set++)
        for (int nt = 1; nt <= 2; nt++) {
            for (int i = 0; i < M * N; i++) C[i] = NAN;
            gemm_bf16_run(set, &w, A, (size_t)K, M, NULL, C, (size_t)N, 0, BE_ACT_NONE, ws, tu_pool(nt));
            char what[64];
            snprintf(what, sizeof what, "gemm, a denormal sum across K blocks, set %d threads %d", set, nt);
            CHECK(tu_same_bytes((const unsigned char *)C, (const unsigned char *)ref, sizeof C, what));
        }
    free(ws), free(buf), free(B), free(A);
}

/* Attention on operands of chosen exponent fields (q in [eq, eq + dq], k, v likewise; random signs and 7-bit
 * mantissas): the portable block computes a key tile's scores, and a row's o over a tile, as acc + x·y where the
 * exponents show every product exact, and with fmaf steps elsewhere: products of q and k below FLT_MIN or past
 * 2^128, p·v below FLT_MIN (small v, or p far below 1 where the scores spread widely), sums overflowing to inf.
 * Both against the definition, bit for bit, as is the AVX512-BF16 set where it runs. */
static void attn_range_case(int eq, int dq, int ek, int dk, int ev, int dv, int hd) {
    static const int lens[] = {150, 33};
    const int nh = 2, H = nh * hd, S = lens[0] + lens[1], cu[3] = {0, lens[0], S};
    uint32_t st = (uint32_t)(eq * 131 + ek * 31 + ev * 7 + hd);
    float *qkv = malloc((size_t)S * 3 * H * sizeof(float));
    const int e0[3] = {eq, ek, ev}, de[3] = {dq, dk, dv};
    for (int r = 0; r < S; r++)
        for (int c = 0; c < 3 * H; c++) {
            const int part = c / H;
            const int e = e0[part] + (int)((tu_frand(&st) * 0.5f + 0.5f) * (float)(de[part] + 1)) % (de[part] + 1);
            const uint16_t m = (uint16_t)(tu_frand(&st) * 64.0f + 64.0f) & 0x7f;
            const unsigned neg = tu_frand(&st) < 0.0f ? 0x8000u : 0u;
            qkv[(size_t)r * 3 * H + c] = op_bf16_to_f32((uint16_t)(neg | (unsigned)e << 7 | m));
        }
    const size_t on = (size_t)S * H;
    float *ref = malloc(on * sizeof(float)), *out = tu_guarded_alloc(on * sizeof(float));
    attn_args a = {.q = qkv, .k = qkv + H, .v = qkv + 2 * H, .ldq = 3 * (size_t)H, .ldk = 3 * (size_t)H,
                   .ldv = 3 * (size_t)H, .out = ref, .ldo = (size_t)H, .n_heads = nh, .head_dim = hd, .cu = cu,
                   .n_seg = 2, .scale = 1.0f / sqrtf((float)hd)};
    attn_bf16_ref(&a);
    void *ws = malloc(attn_bf16_workspace_size(hd, 2));
    a.out = out;
    for (int set = 0; set <= (has_bf16 && hd % 2 == 0 ? 1 : 0); set++)
        for (int nt = 1; nt <= 2; nt++) {
            for (size_t i = 0; i < on; i++) out[i] = NAN;
            attn_bf16_run(set, &a, ws, tu_pool(nt));
            char what[112];
            snprintf(what, sizeof what, "range attention q %d+%d k %d+%d v %d+%d hd %d set %d threads %d", eq, dq, ek,
                     dk, ev, dv, hd, set, nt);
            CHECK(tu_same_bytes((const unsigned char *)out, (const unsigned char *)ref, on * sizeof(float), what));
        }
    tu_guarded_free(out);
    free(ws), free(ref), free(qkv);
}

/* Scores whose second product alone overflows f32 while the pair's sum does not: hd 2, q = (1.5·2^63, 2^63),
 * k_j = (1.5·2^64 + j·2^58, −1.5·2^63): x0·y0 >= 1.125·2^128, x1·y1 = −1.5·2^126, the definition's fma gives the
 * finite sum (so every row's softmax is finite), a separate product would give inf. */
static void attn_overflow_case(void) {
    const int S = 90, hd = 2, cu[2] = {0, S};
    float *qkv = malloc((size_t)S * 3 * hd * sizeof(float)), *ref = malloc((size_t)S * hd * sizeof(float));
    float *out = tu_guarded_alloc((size_t)S * hd * sizeof(float));
    uint32_t st = 5;
    for (int r = 0; r < S; r++) {
        float *x = qkv + (size_t)r * 3 * hd;
        x[0] = 0x1.8p63f, x[1] = 0x1p63f;
        x[2] = 0x1.8p64f + (float)(r % 8) * 0x1p58f, x[3] = -0x1.8p63f;
        x[4] = tu_frand(&st), x[5] = tu_frand(&st);
    }
    attn_args a = {.q = qkv, .k = qkv + hd, .v = qkv + 2 * hd, .ldq = 3 * hd, .ldk = 3 * hd, .ldv = 3 * hd,
                   .out = ref, .ldo = hd, .n_heads = 1, .head_dim = hd, .cu = cu, .n_seg = 1, .scale = 0.5f};
    attn_bf16_ref(&a);
    CHECK(all_written(ref, (size_t)S * hd));
    void *ws = malloc(attn_bf16_workspace_size(hd, 2));
    a.out = out;
    for (int set = 0; set <= (has_bf16 ? 1 : 0); set++)
        for (int nt = 1; nt <= 2; nt++) {
            for (int i = 0; i < S * hd; i++) out[i] = NAN;
            attn_bf16_run(set, &a, ws, tu_pool(nt));
            char what[64];
            snprintf(what, sizeof what, "attention, a product past 2^128, set %d threads %d", set, nt);
            CHECK(tu_same_bytes((const unsigned char *)out, (const unsigned char *)ref, (size_t)S * hd * sizeof(float),
                                what));
        }
    tu_guarded_free(out);
    free(ws), free(ref), free(qkv);
}

int main(void) {
    has_bf16 = cpu_has_avx512bf16();
    pair_rules();
    static const int ms[] = {1, 13, 14, 15, 42, 43, 85};
    static const int ns[] = {1, 15, 16, 17, 31, 32, 33, 48};
    static const int ks[] = {1, 2, 3, 383, 384, 385, 770};
    int c = 0;
    for (size_t i = 0; i < sizeof ms / sizeof *ms; i++)
        for (size_t j = 0; j < sizeof ns / sizeof *ns; j++)
            for (size_t k = 0; k < sizeof ks / sizeof *ks; k++, c++)
                gemm_case(ms[i], ns[j], ks[k], c % 2 ? QVL_DTYPE_F32 : QVL_DTYPE_BF16, c % 3 != 0, (be_act)(c % 3),
                          c % 4 == 1);
    gemm_case(43, 1537, 66, QVL_DTYPE_BF16, 1, BE_ACT_GELU_TANH, 1); /* past the 1536-column N block */
    gemm_case(29, 3100, 40, QVL_DTYPE_F16, 1, BE_ACT_GELU_ERF, 0);
    for (int act = 0; act < 3; act++)
        for (int acc = 0; acc < 2; acc++) {
            gemm_strided_case(43, 47, 400, (be_act)act, acc);
            gemm_strided_case(15, 1570, 770, (be_act)act, acc);
        }
    /* Products at FLT_MIN (ea + eb = 128) and below it; up to 2^128 (380) and past it; denormal operands (0). */
    for (int acc = 0; acc < 2; acc++) {
        gemm_range_case(64, 63, 64, 0, acc);
        gemm_range_case(63, 64, 64, 0, acc);
        gemm_range_case(40, 127, 60, 0, acc);
        gemm_range_case(190, 191, 190, 1, acc);
        gemm_range_case(191, 190, 190, 0, acc);
        gemm_range_case(127, 0, 120, 0, acc);
        gemm_range_case(0, 127, 0, 0, acc);
        gemm_range_case(68, 67, 67, 0, acc); /* products under 2^-110, sums that cancel into the denormals */
        gemm_range_case(71, 70, 71, 0, acc); /* products multiples of 2^-126 (fields summing to 142), of 2^-127 (141) */
    }
    gemm_start_case();
    /* q·k at FLT_MIN (exponent fields summing to 128) and below; up to 2^128 and past it (sums to inf); small v
     * (p·v below FLT_MIN); widely spread scores (p down to 2^-125) against v of moderate size; zeros (field 0). */
    static const int ranges[][6] = {{64, 0, 64, 0, 127, 0},   {63, 1, 64, 0, 127, 0},  {120, 10, 120, 10, 1, 20},
                                    {190, 0, 190, 0, 127, 0}, {190, 1, 190, 0, 120, 0}, {140, 4, 136, 4, 20, 10},
                                    {0, 130, 120, 10, 0, 127}};
    for (size_t i = 0; i < sizeof ranges / sizeof *ranges; i++)
        for (int hd = 7; hd <= 72; hd += 65) {
            const int *r = ranges[i];
            attn_range_case(r[0], r[1], r[2], r[3], r[4], r[5], hd);
        }
    attn_overflow_case();
    /* Edges of the AVX512-BF16 block: 16-row vectors, 48-row blocks (3 vectors; tails of 1 and 2), 8-key score
     * chunks and key pairs (odd key counts), 64/80-key tiles, 192/240-row query tiles (208 = 13 vectors); with
     * scratch, segments of one query tile (not packed) before and after one of two (packed). */
    static const int segs[][4] = {{1, 2, 3, 0},    {7, 8, 9, 0},     {15, 16, 17, 0}, {31, 32, 33, 0},
                                  {47, 48, 49, 0},  {63, 64, 65, 0},  {79, 80, 81, 0}, {144, 31, 0, 0},
                                  {192, 193, 0, 0}, {208, 95, 0, 0}, {240, 241, 0, 0}, {433, 0, 0, 0},
                                  {784, 0, 0, 0},   {33, 241, 7, 0}};
    for (size_t i = 0; i < sizeof segs / sizeof *segs; i++) {
        int n = 0;
        while (n < 4 && segs[i][n]) n++;
        attn_case(segs[i], n, 64);
        attn_case(segs[i], n, 72);
    }
    attn_case(segs[2], 3, 80);  /* 10 P·V passes of 8 head columns */
    attn_case(segs[5], 3, 128); /* the widest head the block takes */
    attn_case(segs[0], 3, 6);   /* a head narrower than one vector */
    attn_case(segs[2], 3, 2);   /* one pair */
    attn_case(segs[3], 3, 10);  /* 8 head columns, then 2 */
    attn_case(segs[4], 3, 76);  /* 8 x 9 head columns, then 4 */
    if (!has_bf16 && tu_failures == 0) {
        printf("test_bf16: the portable bf16 kernels pass; this CPU has no AVX512-BF16, so the AVX512-BF16 kernels "
               "were not tested (skipped)\n");
        tu_finish("test_bf16");
        return TU_SKIP;
    }
    return tu_finish("test_bf16");
}
