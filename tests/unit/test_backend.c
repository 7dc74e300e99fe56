/* test_backend.c — the compute-backend table (backend/backend.h): selection by kernel set and precision, and every
 * entry this CPU runs against the kernels it stands for. f32 entries must give exactly gemm_run_isa's and
 * attn_run_isa's bits for their set (the tower's f32 outputs depend on nothing else); bf16 entries exactly the
 * bf16 definitions (gemm_bf16_ref, attn_bf16_ref; gemm_amx_ref, attn_amx_ref for the AMX sets) for bf16-arithmetic
 * weights, and the f32 GEMM of their f32 parts for f32 ones. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/cpu.h"
#include "core/error.h"
#include "cpu/attention.h"
#include "cpu/bf16.h"
#include "cpu/gemm.h"
#include "testutil.h"

enum { M = 45, N = 70, K = 133, S = 90, NH = 2, HD = 72 };

/* The AMX instructions where the start-up check found the tiles sum in another order than the definitions:
 * compared within amx_agree.c's bound of them instead of bit for bit (the layouts are checked over the model). */
static int inexact_tiles(const backend *be) {
    return be->precision == QVL_PRECISION_BF16 && be->set == BF16_SET_AMX && !backend_amx_exact();
}

static void check_entry(const backend *be, const float *A, const float *B, const float *bias, const float *qkv) {
    char what[96];
    void *ws = malloc(be->linear_ws(2, K) > be->attention_ws(HD, 2) ? be->linear_ws(2, K) : be->attention_ws(HD, 2));
    float *c1 = malloc(M * N * sizeof(float)), *c2 = malloc(M * N * sizeof(float));
    for (int ar = 0; ar <= (be->precision == QVL_PRECISION_BF16); ar++) {
        be_weight w;
        void *buf = aligned_alloc(64, be->pack_size(N, K, QVL_DTYPE_F32, (be_arith)ar));
        CHECK(be->pack(be, &w, buf, B, QVL_DTYPE_F32, K, N, K, (be_arith)ar, NULL) == 0);
        CHECK(w.arith == (be_arith)ar);
        for (int i = 0; i < M * N; i++) c1[i] = c2[i] = (float)(i % 7) * 0.25f;
        be->linear(be, &w, A, K, M, bias, c1, N, 1, BE_ACT_GELU_TANH, ws, K, tu_pool(2));
        if (ar == BE_ARITH_BF16 && (be->set == BF16_SET_AMX || be->set == BF16_SET_AMX_EMULATED)) {
            gemm_amx_ref(&w, A, K, M, bias, c2, N, 1, BE_ACT_GELU_TANH);
        } else if (ar == BE_ARITH_BF16) {
            gemm_bf16_ref(&w, A, K, M, bias, c2, N, 1, BE_ACT_GELU_TANH);
        } else {
            gemm_packed pk;
            void *pb = aligned_alloc(64, gemm_pack_size(N, K, QVL_DTYPE_F32, GEMM_PANEL_AUTO));
            CHECK(gemm_pack_b_isa(&pk, pb, B, QVL_DTYPE_F32, K, N, K, GEMM_PANEL_AUTO, NULL, (gemm_isa)be->kernel) == 0);
            gemm_args g = {.M = M, .N = N, .K = K, .A = A, .lda = K, .B = B, .b_dtype = QVL_DTYPE_F32, .ldb = K,
                           .bias = bias, .C = c2, .ldc = N, .accumulate = 1, .epilogue = GEMM_EPI_GELU_TANH, .Bp = &pk};
            void *gws = malloc(gemm_workspace_size(1));
            gemm_run_isa(&g, gws, NULL, (gemm_isa)be->kernel);
            free(gws);
            free(pb);
        }
        snprintf(what, sizeof what, "%s linear (arith %d)", be->name, ar);
        if (ar == BE_ARITH_BF16 && inexact_tiles(be)) { /* tiles that sum in another order: a correct sum */
            float c0[M * N];
            for (int i = 0; i < M * N; i++) c0[i] = (float)(i % 7) * 0.25f;
            CHECK(amx_gemm_excess(A, K, B, M, N, K, bias, c0, BE_ACT_GELU_TANH, c1, c2, N) <= 1.0);
        } else {
            CHECK(tu_same_bytes((const unsigned char *)c1, (const unsigned char *)c2, M * N * sizeof(float), what));
        }
        free(buf);
    }
    const int cu[3] = {0, 37, S};
    float *o1 = malloc((size_t)S * NH * HD * sizeof(float)), *o2 = malloc((size_t)S * NH * HD * sizeof(float));
    be_attn a = {qkv, qkv + NH * HD, qkv + 2 * NH * HD, 3 * NH * HD, 3 * NH * HD, 3 * NH * HD, o1, NH * HD, NH, HD,
                 cu, 2, 1.0f / sqrtf((float)HD), NULL, 0, NULL, NULL};
    be->attention(be, &a, ws, tu_pool(2));
    attn_args at = {qkv, qkv + NH * HD, qkv + 2 * NH * HD, 3 * NH * HD, 3 * NH * HD, 3 * NH * HD, o2, NH * HD, NH, HD,
                    cu, 2, 1.0f / sqrtf((float)HD), NULL, 0, NULL, NULL, NULL, NULL};
    if (be->precision == QVL_PRECISION_BF16 && (be->set == BF16_SET_AMX || be->set == BF16_SET_AMX_EMULATED)) {
        attn_amx_ref(&at);
    } else if (be->precision == QVL_PRECISION_BF16) {
        attn_bf16_ref(&at);
    } else {
        void *aws = malloc(attn_workspace_size(HD, 1));
        attn_run_isa(&at, aws, NULL, (attn_isa)be->kernel);
        free(aws);
    }
    snprintf(what, sizeof what, "%s attention", be->name);
    if (inexact_tiles(be)) CHECK(amx_attn_excess(&at, o1, o2) <= 1.0);
    else CHECK(tu_same_bytes((const unsigned char *)o1, (const unsigned char *)o2, (size_t)S * NH * HD * sizeof(float), what));
    free(o1), free(o2), free(c1), free(c2), free(ws);
}

int main(void) {
    uint32_t st = 5;
    float *A = malloc(M * K * sizeof(float)), *B = malloc(N * K * sizeof(float)), *bias = malloc(N * sizeof(float));
    float *qkv = malloc((size_t)S * 3 * NH * HD * sizeof(float));
    for (int i = 0; i < M * K; i++) A[i] = tu_frand(&st);
    for (int i = 0; i < N * K; i++) B[i] = tu_frand(&st) * 0.1f;
    for (int i = 0; i < N; i++) bias[i] = tu_frand(&st);
    for (int i = 0; i < S * 3 * NH * HD; i++) qkv[i] = tu_frand(&st) * 2.0f;
    size_t n;
    const backend *const *t = backend_table(&n);
    int ran = 0;
    for (size_t i = 0; i < n; i++) {
        CHECK(t[i]->name && t[i]->m_align > 0);
        if (!backend_runs(t[i])) {
            printf("backend %s: not run (this CPU lacks it)\n", t[i]->name);
            continue;
        }
        if (!t[i]->host_memory) { /* its operations take its own memory: the encodes of test_remote run it */
            printf("backend %s: its memory is not the host's (test_remote)\n", t[i]->name);
            continue;
        }
        check_entry(t[i], A, B, bias, qkv);
        ran++;
    }
    CHECK(ran >= 2); /* the portable pair at least */

    /* selection */
    const backend *be = NULL;
    qvl_error err;
    CHECK(backend_select(QVL_ISA_AUTO, QVL_PRECISION_F32, &be, &err) == QVL_OK && be &&
          be->precision == QVL_PRECISION_F32 && be->kernel == cpu_level());
    CHECK(backend_select(QVL_ISA_AUTO, QVL_PRECISION_BF16, &be, &err) == QVL_OK && be &&
          be->precision == QVL_PRECISION_BF16);
    /* precision auto: AMX where usable, AVX512-BF16 where its dot product was measured at 1.25x the FMA rate or
     * more, else f32 (every case of the rule) */
    CHECK(backend_auto_bf16(1, 1, 0.5) == BACKEND_AUTO_AMX && backend_auto_bf16(1, 0, 0) == BACKEND_AUTO_AMX);
    CHECK(backend_auto_bf16(0, 1, 2.0) == BACKEND_AUTO_AVX512BF16);  /* AMD Zen 4/5 */
    CHECK(backend_auto_bf16(0, 1, 1.25) == BACKEND_AUTO_AVX512BF16);
    CHECK(backend_auto_bf16(0, 1, 1.24) == BACKEND_AUTO_F32);
    CHECK(backend_auto_bf16(0, 1, 0.5) == BACKEND_AUTO_F32); /* Intel Xeon, AMX hidden or not enabled */
    CHECK(backend_auto_bf16(0, 0, 2.0) == BACKEND_AUTO_F32 && backend_auto_bf16(0, 0, 0) == BACKEND_AUTO_F32);
    {
        int amx_usable = 0;
        (void)backend_amx_status(&amx_usable);
        /* the rate: measured once, remembered (the same value again), plausible where there is AVX512-BF16 */
        const double rate = backend_bf16_dot_rate();
        CHECK(backend_bf16_dot_rate() == rate);
        CHECK(cpu_has_avx512bf16() ? rate > 0.05 && rate < 20 : rate == 0);
        if (cpu_has_avx512bf16()) printf("VDPBF16PS : f32 FMA rate on this CPU: %.3f\n", rate);
        const int pick = backend_auto_bf16(amx_usable, cpu_has_avx512bf16(), rate);
        CHECK(backend_select(QVL_ISA_AUTO, QVL_PRECISION_AUTO, &be, &err) == QVL_OK && be);
        CHECK(pick == BACKEND_AUTO_AMX   ? strcmp(be->name, "amx") == 0
              : pick == BACKEND_AUTO_F32 ? be->precision == QVL_PRECISION_F32 && be->kernel == cpu_level()
                                         : strcmp(be->name, "avx512bf16") == 0);
        /* what qvl info prints says the same */
        char why[96];
        backend_auto_describe(why, sizeof why);
        CHECK(strncmp(why, pick == BACKEND_AUTO_F32 ? "f32 (" : "bf16 on ", pick == BACKEND_AUTO_F32 ? 5 : 8) == 0);
        CHECK(strstr(why, be->name) != NULL || pick == BACKEND_AUTO_F32);
        CHECK(cpu_has_avx512bf16() && pick != BACKEND_AUTO_AMX ? strstr(why, "VDPBF16PS measured at") != NULL : 1);
        /* --isa avx512 --precision auto: the AVX512-BF16 set by the same measured rule (AMX left aside), else f32
         * (it took the set wherever the CPU had it, so on an Intel Xeon the slower one) */
        if (cpu_has_avx512()) {
            const int fast = cpu_has_avx512bf16() && backend_auto_bf16(0, 1, rate) == BACKEND_AUTO_AVX512BF16;
            CHECK(backend_select(QVL_ISA_AVX512, QVL_PRECISION_AUTO, &be, &err) == QVL_OK && be);
            CHECK(fast ? strcmp(be->name, "avx512bf16") == 0
                       : be->precision == QVL_PRECISION_F32 && be->kernel == GEMM_ISA_AVX512);
            if (cpu_has_avx512bf16()) /* bf16 asked for: the set, whatever its rate */
                CHECK(backend_select(QVL_ISA_AVX512, QVL_PRECISION_BF16, &be, &err) == QVL_OK && be &&
                      strcmp(be->name, "avx512bf16") == 0);
        }
    }
    CHECK(backend_select(QVL_ISA_AUTO, (qvl_precision)7, &be, &err) == QVL_ERR_INVALID_ARG && !be);
    CHECK(backend_select((qvl_isa)9, QVL_PRECISION_F32, &be, &err) == QVL_ERR_INVALID_ARG && !be);
    if (cpu_has_avx2()) {
        CHECK(backend_select(QVL_ISA_AVX2, QVL_PRECISION_BF16, &be, &err) == QVL_ERR_UNSUPPORTED && !be);
        CHECK(backend_select(QVL_ISA_AVX2, QVL_PRECISION_AUTO, &be, &err) == QVL_OK && be &&
              be->precision == QVL_PRECISION_F32 && strcmp(be->name, "avx2") == 0);
    }
    if (cpu_has_avx512bf16()) {
        CHECK(backend_select(QVL_ISA_AVX512, QVL_PRECISION_BF16, &be, &err) == QVL_OK && be &&
              strcmp(be->name, "avx512bf16") == 0);
    }
    /* AMX: bf16 only; refused with the reason where it is not usable; auto picks it where it is. */
    int amx = 0;
    const char *why = backend_amx_status(&amx);
    printf("AMX-BF16 here: %s\n", why);
    err_clear(&err);
    CHECK(backend_select(QVL_ISA_AMX, QVL_PRECISION_F32, &be, &err) == QVL_ERR_UNSUPPORTED && !be &&
          strstr(err.message, "bf16"));
    CHECK(backend_select(QVL_ISA_AMX, (qvl_precision)7, &be, &err) != QVL_OK && !be);
    if (amx) {
        CHECK(backend_select(QVL_ISA_AMX, QVL_PRECISION_BF16, &be, &err) == QVL_OK && be && strcmp(be->name, "amx") == 0);
        CHECK(backend_select(QVL_ISA_AUTO, QVL_PRECISION_AUTO, &be, &err) == QVL_OK && be && strcmp(be->name, "amx") == 0);
    } else {
        err_clear(&err);
        CHECK(backend_select(QVL_ISA_AMX, QVL_PRECISION_BF16, &be, &err) == QVL_ERR_UNSUPPORTED && !be &&
              strstr(err.message, "AMX"));
    }
    /* no request selects a test-only entry */
    const qvl_isa isas[] = {QVL_ISA_AUTO, QVL_ISA_AVX2, QVL_ISA_AVX512, QVL_ISA_AMX};
    for (size_t i = 0; i < 4; i++)
        for (int p = 0; p <= 2; p++)
            if (backend_select(isas[i], (qvl_precision)p, &be, &err) == QVL_OK) CHECK(be && !be->test_only);
    free(A), free(B), free(bias), free(qkv);
    return tu_finish("test_backend");
}
