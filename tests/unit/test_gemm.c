/* test_gemm.c — gemm_run (scalar, AVX2 and AVX-512 kernel sets, each where the CPU has it) against gemm_ref on
 * edge sizes around the block sizes of every set, every B dtype, bias, epilogue and accumulate; NaN-poisoned C;
 * unaligned B; bit-identical over thread counts, between B as stored and B pre-packed by gemm_pack_b (bf16 panels in
 * either order, f32 panels), and between the AVX2 and AVX-512 sets. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/gemm.h"
#include "cpu/kernels_avx2.h"
#include "cpu/kernels_avx512.h"
#include "cpu/ops.h"
#include "testutil.h"

static uint32_t rng = 12345u;
static float frand(void) { return tu_frand(&rng); }

/* Widened B value, for the tolerance bound. */
static float bval(const unsigned char *b, qvl_dtype dt, size_t i) {
    uint16_t h;
    float f;
    if (dt == QVL_DTYPE_F32) {
        memcpy(&f, b + 4 * i, 4);
        return f;
    }
    memcpy(&h, b + 2 * i, 2);
    return dt == QVL_DTYPE_BF16 ? op_bf16_to_f32(h) : op_f16_to_f32(h);
}

/* One case: returns 1 when every element is within tolerance of gemm_ref and threads 1/2 agree bit for bit. */
static int run_case(int M, int N, int K, qvl_dtype dt, int with_bias, gemm_epilogue epi, int accumulate, gemm_isa isa,
                    void *ws) {
    const size_t lda = (size_t)K + 3, ldb = (size_t)K + 1, ldc = (size_t)N + 5;
    const size_t esz = dt == QVL_DTYPE_F32 ? 4 : 2;
    float *A = malloc(((size_t)M * lda + 1) * sizeof(float));
    unsigned char *Bbuf = malloc((size_t)N * ldb * esz + 8);
    unsigned char *B = Bbuf + 2; /* deliberately misaligned, as in an mmapped file */
    float *bias = malloc(((size_t)N + 1) * sizeof(float));
    /* C ends at its last element, at a guard page: a store past it (a masked-store tail one column too wide, a row
     * too many) faults, where ASan would not see it. The padding columns of the other rows are checked below. */
    const size_t cn = M > 0 ? (size_t)(M - 1) * ldc + (size_t)N : 0, cbytes = cn * sizeof(float);
    float *C0 = tu_guarded_alloc(cbytes), *C1 = tu_guarded_alloc(cbytes), *C2 = tu_guarded_alloc(cbytes);
    float *Cr = tu_guarded_alloc(cbytes);
    if (!C0 || !C1 || !C2 || !Cr) {
        fprintf(stderr, "cannot map guarded C buffers\n");
        exit(1);
    }
    for (size_t i = 0; i < (size_t)M * lda; i++) A[i] = frand();
    for (size_t i = 0; i < (size_t)N * ldb; i++) {
        float f = frand();
        if (dt == QVL_DTYPE_F32) memcpy(B + 4 * i, &f, 4);
        else {
            uint16_t h = dt == QVL_DTYPE_BF16 ? op_f32_to_bf16(f) : op_f32_to_f16(f);
            memcpy(B + 2 * i, &h, 2);
        }
    }
    for (int i = 0; i < N; i++) bias[i] = frand();
    const float nan = nanf("");
    for (size_t i = 0; i < cn; i++) {
        float init = accumulate ? frand() : nan;
        Cr[i] = C1[i] = C2[i] = init;
    }
    memcpy(C0, Cr, cbytes);
    gemm_args g = {M, N, K, A, lda, B, dt, ldb, with_bias ? bias : NULL, Cr, ldc, accumulate, epi, NULL};
    gemm_ref(&g);
    g.C = C1;
    gemm_run_isa(&g, ws, tu_pool(1), isa);
    g.C = C2;
    gemm_run_isa(&g, ws, tu_pool(2), isa);

    /* Pre-packed B, both panel types (bf16 panels also in the other set's order, packed as if AUTO meant the other
     * set: read through memory): the same bits as the per-call packing, on either thread count. */
    int ok = 1;
    for (int w = 0; w < 3 && K > 0; w++) {
        const gemm_panel which = w == 1 ? GEMM_PANEL_F32 : GEMM_PANEL_AUTO;
        /* w == 2 packs in the other set's bf16 order: without the x86 kernels every set is the portable one, which
         * has one order only. */
        if (w == 2 && (dt != QVL_DTYPE_BF16 || !QVL_WITH_X86)) break;
        const size_t psz = gemm_pack_size(N, K, dt, which);
        void *pbuf = aligned_alloc(64, psz);
        gemm_packed pk;
        memset(pbuf, 0xff, psz); /* NaN bits: every byte the driver reads must have been written by the packer */
        /* bf16 → bf16 packing is portable code whatever the set, so the other order is packable on any CPU. */
        const gemm_isa eff = isa == GEMM_ISA_AUTO ? gemm_auto_isa() : isa;
        const gemm_isa pack_isa = w == 2 ? (eff == GEMM_ISA_AVX512 ? GEMM_ISA_AVX2 : GEMM_ISA_AVX512) : eff;
        CHECK(gemm_pack_b_isa(&pk, pbuf, B, dt, ldb, N, K, which, tu_pool(2), pack_isa) == 0);
        const gemm_bf16_order want = eff == GEMM_ISA_AVX512 ? GEMM_BF16_PAIRS : GEMM_BF16_LANES;
        const gemm_bf16_order other = want == GEMM_BF16_PAIRS ? GEMM_BF16_LANES : GEMM_BF16_PAIRS;
        if (pk.dtype == QVL_DTYPE_BF16) CHECK(pk.order == (w == 2 ? other : want));
        CHECK(pk.dtype == (dt == QVL_DTYPE_BF16 && w != 1 ? QVL_DTYPE_BF16 : QVL_DTYPE_F32));
        float *Cp = tu_guarded_alloc(cbytes);
        if (!Cp) exit(1);
        for (int nt = 1; nt <= 2; nt++) {
            memcpy(Cp, C0, cbytes);
            g.C = Cp;
            g.Bp = &pk;
            gemm_run_isa(&g, ws, tu_pool(nt), isa);
            g.Bp = NULL;
            if (memcmp(Cp, C1, cbytes)) {
                fprintf(stderr, "M=%d N=%d K=%d dt=%d panel=%d isa=%d threads=%d: packed B differs\n", M, N, K, (int)dt,
                        w, (int)isa, nt);
                ok = 0;
            }
        }
        tu_guarded_free(Cp);
        free(pbuf);
    }
    for (int i = 0; i < M && ok; i++)
        for (int j = 0; j < N; j++) {
            /* An independent double-precision value checks gemm_ref itself (it shares the epilogue code). */
            double mag = 0.0, x = 0.0;
            for (int k = 0; k < K; k++) {
                const double p = (double)A[(size_t)i * lda + k] * bval(B, dt, (size_t)j * ldb + k);
                mag += fabs(p);
                x += p;
            }
            if (with_bias) mag += fabs(bias[j]), x += bias[j];
            if (epi == GEMM_EPI_GELU_TANH) x = 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
            if (epi == GEMM_EPI_GELU_ERF) x = 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
            if (accumulate) mag += fabs(C0[(size_t)i * ldc + j]), x += C0[(size_t)i * ldc + j];
            const float r = Cr[(size_t)i * ldc + j], f = C1[(size_t)i * ldc + j];
            const double tol = 1e-6 * (mag + 1.0) * 4.0;
            if (!(fabs((double)r - f) <= tol) || !(fabs(r - x) <= tol) ||
                memcmp(&C1[(size_t)i * ldc + j], &C2[(size_t)i * ldc + j], 4)) {
                fprintf(stderr, "M=%d N=%d K=%d dt=%d bias=%d epi=%d acc=%d isa=%d: C[%d,%d] exact %.9g ref %.9g fast %.9g (2 thr %.9g)\n",
                        M, N, K, (int)dt, with_bias, (int)epi, accumulate, (int)isa, i, j, x, r, f,
                        C2[(size_t)i * ldc + j]);
                ok = 0;
                break;
            }
        }
    /* Padding between rows of C (columns N..ldc) must be untouched; the last row has none (the guard page). */
    for (int i = 0; i + 1 < M && ok; i++)
        for (size_t j = (size_t)N; j < ldc; j++)
            if (memcmp(&C1[(size_t)i * ldc + j], &C0[(size_t)i * ldc + j], 4)) ok = 0;
    /* The AVX2 and AVX-512 sets run the same FMA chains: the same bits (the SIMD sets only). */
    if (ok && (isa == GEMM_ISA_AVX2 || isa == GEMM_ISA_AVX512) && cpu_has_avx512()) {
        memcpy(C2, C0, cbytes);
        g.C = C2;
        g.Bp = NULL;
        gemm_run_isa(&g, ws, tu_pool(2), isa == GEMM_ISA_AVX2 ? GEMM_ISA_AVX512 : GEMM_ISA_AVX2);
        if (memcmp(C1, C2, cbytes)) {
            fprintf(stderr, "M=%d N=%d K=%d dt=%d isa=%d: AVX2 and AVX-512 sets differ\n", M, N, K, (int)dt, (int)isa);
            ok = 0;
        }
    }
    free(A), free(Bbuf), free(bias);
    tu_guarded_free(C0), tu_guarded_free(C1), tu_guarded_free(C2), tu_guarded_free(Cr);
    return ok;
}

int main(void) {
    CHECK(pool_size(tu_pool(2)) == 2); /* else "1 vs 2 threads" below would compare one thread with itself */
    /* A workspace that is not 64-byte aligned: gemm_run must cope (it aligns inside its own slack). */
    unsigned char *wsbuf = malloc(gemm_workspace_size(2) + 8);
    void *ws = wsbuf + 8;
    gemm_isa isas[3] = {GEMM_ISA_SCALAR, GEMM_ISA_AVX2, GEMM_ISA_AVX512};
    const int n_isa = cpu_has_avx512() ? 3 : cpu_has_avx2() ? 2 : 1;
    if (n_isa == 1) printf("test_gemm: no AVX2 on this CPU, scalar kernels only\n");
    if (n_isa == 2) printf("test_gemm: no AVX-512 on this CPU, its kernels untested here\n");
    const qvl_dtype dts[3] = {QVL_DTYPE_F32, QVL_DTYPE_F16, QVL_DTYPE_BF16};

    /* Edge sizes around MR = 6 / 14, NR = 16 / 32, KC = 512 (K blocks evened out: 513 → 2 x 264, 1030 → 3 x 344),
     * MC = 144 / 42 (145 → 2 x 78; 43 → 2 x 28, 85 → 3 x 42 with M blocks split further to even out 2 threads),
     * and small N (NC = 768 / 1536 below); odd K ends bf16 pair panels with a lone step. */
    const int ms[] = {1, 2, 5, 6, 7, 13, 14, 15, 29, 41, 42, 43, 85, 143, 145, 289};
    const int ns[] = {1, 15, 16, 17, 31, 32, 33, 35, 48, 191, 193, 400};
    const int ks[] = {0, 1, 7, 8, 9, 255, 511, 512, 513, 1030};
    for (int ii = 0; ii < n_isa; ii++) {
        /* Every dtype x bias x epilogue x accumulate on one awkward shape. */
        for (int d = 0; d < 3; d++)
            for (int bias = 0; bias < 2; bias++)
                for (int epi = 0; epi < 3; epi++)
                    for (int acc = 0; acc < 2; acc++)
                        CHECK(run_case(13, 35, 263, dts[d], bias, (gemm_epilogue)epi, acc, isas[ii], ws));
        /* Sizes sweep, rotating through the options so the product stays cheap. */
        int c = 0;
        for (size_t a = 0; a < sizeof ms / sizeof ms[0]; a++)
            for (size_t b = 0; b < sizeof ns / sizeof ns[0]; b++)
                for (size_t k = 0; k < sizeof ks / sizeof ks[0]; k++, c++) {
                    long work = (long)ms[a] * ns[b] * (ks[k] + 1);
                    if (work > 1000000 && (c % 7)) continue; /* keep a sample of the big ones */
                    CHECK(run_case(ms[a], ns[b], ks[k], dts[c % 3], c % 2, (gemm_epilogue)(c % 3), (c / 3) % 2,
                                   isas[ii], ws));
                }
    }
    /* N around NC = 768 (blocks evened out: 769 → 2 x 400, 1537 → 3 x 528) and the AVX-512 set's 1536 (1537 →
     * 2 x 800), every dtype, every kernel set. */
    for (int ii = 0; ii < n_isa; ii++) {
        CHECK(run_case(13, 767, 20, QVL_DTYPE_BF16, 1, GEMM_EPI_GELU_ERF, 0, isas[ii], ws));
        CHECK(run_case(13, 768, 21, QVL_DTYPE_F16, 0, GEMM_EPI_NONE, 1, isas[ii], ws));
        CHECK(run_case(7, 769, 33, QVL_DTYPE_F32, 1, GEMM_EPI_GELU_TANH, 1, isas[ii], ws));
        CHECK(run_case(150, 1537, 9, QVL_DTYPE_BF16, 1, GEMM_EPI_NONE, 0, isas[ii], ws));
        CHECK(run_case(15, 1536, 19, QVL_DTYPE_BF16, 1, GEMM_EPI_NONE, 1, isas[ii], ws));
        CHECK(run_case(29, 1569, 11, QVL_DTYPE_F32, 0, GEMM_EPI_GELU_TANH, 0, isas[ii], ws));
    }
    /* A kernel set a CPU lacks is never what AUTO means. */
    CHECK(gemm_auto_isa() == (n_isa == 3 ? GEMM_ISA_AVX512 : n_isa == 2 ? GEMM_ISA_AVX2 : GEMM_ISA_SCALAR));
    /* Tower-like shapes (one M block past the first, N not a multiple of 16, K not a multiple of 8). */
    CHECK(run_case(150, 4304 / 8, 4304 / 8 + 1, QVL_DTYPE_BF16, 1, GEMM_EPI_GELU_TANH, 0, GEMM_ISA_AUTO, ws));
    CHECK(run_case(40, 200, 1150, QVL_DTYPE_BF16, 1, GEMM_EPI_NONE, 1, GEMM_ISA_AUTO, ws));
    /* Few M blocks on many threads: the plan splits M and N finer to balance them (make_plan), over whole panels
     * and an uneven last N block. Every element written, the bits of one thread, on 3, 5 and 16 threads. */
    {
        unsigned char *ws16 = malloc(gemm_workspace_size(16) + 8);
        const int sm[] = {28, 49, 196}, sn[] = {1152, 1168, 3456};
        for (size_t a = 0; a < sizeof sm / sizeof sm[0]; a++)
            for (size_t b = 0; b < sizeof sn / sizeof sn[0]; b++) {
                const int M = sm[a], N = sn[b], K = 40;
                float *A = malloc((size_t)M * K * sizeof(float)), *B = malloc((size_t)N * K * sizeof(float));
                float *C1 = malloc((size_t)M * N * sizeof(float)), *Ct = malloc((size_t)M * N * sizeof(float));
                for (size_t i = 0; i < (size_t)M * K; i++) A[i] = frand();
                for (size_t i = 0; i < (size_t)N * K; i++) B[i] = frand();
                gemm_args g = {M, N, K, A, K, B, QVL_DTYPE_F32, K, NULL, C1, N, 0, GEMM_EPI_NONE, NULL};
                gemm_run_isa(&g, ws16 + 8, tu_pool(1), GEMM_ISA_AUTO);
                const int nts[] = {3, 5, 16};
                for (size_t t = 0; t < sizeof nts / sizeof nts[0]; t++) {
                    for (size_t i = 0; i < (size_t)M * N; i++) Ct[i] = nanf("");
                    g.C = Ct;
                    gemm_run_isa(&g, ws16 + 8, tu_pool(nts[t]), GEMM_ISA_AUTO);
                    if (memcmp(C1, Ct, (size_t)M * N * sizeof(float)))
                        fprintf(stderr, "M=%d N=%d: %d threads differ from one\n", M, N, nts[t]);
                    CHECK(!memcmp(C1, Ct, (size_t)M * N * sizeof(float)));
                }
                free(A), free(B), free(C1), free(Ct);
            }
        free(ws16);
    }
    /* gemm_pack_b rejects bad arguments without writing; gemm_ref reads packed weights too. */
    {
        gemm_packed pk;
        float b[4] = {1, 2, 3, 4};
        void *buf = aligned_alloc(64, 4096);
        CHECK(gemm_pack_size(0, 5, QVL_DTYPE_F32, GEMM_PANEL_AUTO) == 0);
        CHECK(gemm_pack_size(17, 3, QVL_DTYPE_BF16, GEMM_PANEL_AUTO) == 192);
        CHECK(gemm_pack_size(17, 3, QVL_DTYPE_BF16, GEMM_PANEL_F32) == 384);
        CHECK(gemm_pack_b(&pk, (char *)buf + 4, b, QVL_DTYPE_F32, 2, 2, 2, GEMM_PANEL_AUTO, NULL) == -1);
        CHECK(gemm_pack_b(&pk, buf, b, QVL_DTYPE_F32, 1, 2, 2, GEMM_PANEL_AUTO, NULL) == -1);
        CHECK(gemm_pack_b(&pk, buf, b, QVL_DTYPE_F32, 2, 2, 2, GEMM_PANEL_AUTO, NULL) == 0);
        float a[2] = {1, -1}, c1[2], c2[2];
        gemm_args g = {1, 2, 2, a, 2, b, QVL_DTYPE_F32, 2, NULL, c1, 2, 0, GEMM_EPI_NONE, NULL};
        gemm_ref(&g);
        g.C = c2;
        g.Bp = &pk;
        gemm_ref(&g);
        CHECK(c1[0] == -1.0f && c1[1] == -1.0f && !memcmp(c1, c2, sizeof c1));
        free(buf);
    }
    free(wsbuf);
    return tu_finish("test_gemm");
}
