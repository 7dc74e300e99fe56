/* amx_emulated.c — the C model of the AMX tile instructions (amx_tile.h), and the AMX kernels built over it:
 * the same kernel source as the instruction build, compiled here with QVL_AMX_EMULATE so its functions are the
 * *_emulated variants. Portable C; used by the tests on every CPU (the kernels' layouts, blocking and edges,
 * against the element-by-element definitions), never chosen to encode.
 *
 * The model keeps one register file per thread (the tile registers are per-thread state on the CPU too) and
 * follows the SDM's pseudocode; where the CPU raises #UD (or #GP for a bad config) it prints what was wrong and
 * aborts, as an unhandled SIGILL would end the process: that is a kernel bug, never an input error. */
#define QVL_AMX_EMULATE 1

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/amx_tile.h"

typedef struct amx_regs {
    amx_tilecfg cfg;
    int configured;
    unsigned char t[8][16][64];
} amx_regs;

/* The model's register file: thread-local like the CPU's (not shared state between threads). */
static _Thread_local amx_regs regs;

static void fault(const char *what, int a, int b) {
    fprintf(stderr, "qvl: emulated AMX instruction would fault: %s (%d, %d)\n", what, a, b);
    abort();
}

static void need_tile(int t, const char *op) {
    if (!regs.configured) fault(op, t, -1);
    if (t < 0 || t > 7) fault("tile number out of range", t, 0);
    if (regs.cfg.rows[t] == 0 || regs.cfg.colsb[t] == 0) fault("tile not configured", t, 0);
}

void amx_emu_loadconfig(const amx_tilecfg *cfg) {
    if (cfg->palette == 0) { /* palette 0: back to the init state */
        memset(&regs, 0, sizeof regs);
        return;
    }
    if (cfg->palette != 1) fault("LDTILECFG palette", cfg->palette, 1);
    for (int i = 0; i < 14; i++)
        if (cfg->reserved[i]) fault("LDTILECFG reserved byte set", i, cfg->reserved[i]);
    if (cfg->start_row) fault("LDTILECFG start_row", cfg->start_row, 0);
    for (int t = 0; t < 16; t++) {
        if (t >= 8 && (cfg->rows[t] || cfg->colsb[t])) fault("LDTILECFG tile 8-15 configured", t, 0);
        if (cfg->rows[t] > 16 || cfg->colsb[t] > 64) fault("LDTILECFG shape too large", cfg->rows[t], cfg->colsb[t]);
        if ((cfg->rows[t] == 0) != (cfg->colsb[t] == 0)) fault("LDTILECFG rows/colsb zero mismatch", t, 0);
    }
    memset(&regs, 0, sizeof regs);
    regs.cfg = *cfg;
    regs.configured = 1;
}

void amx_emu_loadd(int t, const void *base, size_t stride) {
    need_tile(t, "TILELOADD before LDTILECFG");
    memset(regs.t[t], 0, sizeof regs.t[t]);
    for (int r = 0; r < regs.cfg.rows[t]; r++)
        memcpy(regs.t[t][r], (const unsigned char *)base + (size_t)r * stride, regs.cfg.colsb[t]);
}

void amx_emu_stored(int t, void *base, size_t stride) {
    need_tile(t, "TILESTORED before LDTILECFG");
    for (int r = 0; r < regs.cfg.rows[t]; r++)
        memcpy((unsigned char *)base + (size_t)r * stride, regs.t[t][r], regs.cfg.colsb[t]);
}

void amx_emu_zero(int t) {
    need_tile(t, "TILEZERO before LDTILECFG");
    memset(regs.t[t], 0, sizeof regs.t[t]);
}

void amx_emu_release(void) { memset(&regs, 0, sizeof regs); }

static float daz(float x) { return fabsf(x) < 1.17549435e-38f ? copysignf(0.0f, x) : x; }
static float bf(const unsigned char *p) { /* bf16 at p → f32 (exact), denormal read as zero */
    uint16_t h;
    memcpy(&h, p, 2);
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return daz(f);
}

/* The arithmetic of TDPBF16PS on widened operands (amx_tile.h): per (m, n) two chains from 0, then c + (te + to). */
#define DP_BODY(FMA)                                                                                                 \
    for (int m = 0; m < M; m++)                                                                                      \
        for (int n = 0; n < N; n++) {                                                                                \
            float te = 0.0f, to = 0.0f;                                                                              \
            for (int k = 0; k < K; k++) {                                                                            \
                te = daz(FMA(av[m][2 * k], bv[k][2 * n], te));                                                       \
                to = daz(FMA(av[m][2 * k + 1], bv[k][2 * n + 1], to));                                               \
            }                                                                                                        \
            cv[m][n] = daz(daz(cv[m][n]) + daz(te + to));                                                            \
        }

static void dp_portable(int M, int N, int K, float av[16][32], float bv[16][32], float cv[16][16]) { DP_BODY(fmaf) }
#if defined(__x86_64__) && defined(__GNUC__)
/* The same with the FMA instruction inlined (fmaf is otherwise a library call here): the model is 10x faster. */
__attribute__((target("fma"))) static void dp_fma(int M, int N, int K, float av[16][32], float bv[16][32],
                                                  float cv[16][16]) {
    DP_BODY(__builtin_fmaf)
}
#endif

void amx_emu_dpbf16ps(int c, int a, int b) {
    need_tile(c, "TDPBF16PS before LDTILECFG");
    need_tile(a, "TDPBF16PS before LDTILECFG");
    need_tile(b, "TDPBF16PS before LDTILECFG");
    if (c == a || c == b || a == b) fault("TDPBF16PS with a repeated tile register", c, a == b ? a : b);
    const int M = regs.cfg.rows[c], N = regs.cfg.colsb[c] / 4, K = regs.cfg.colsb[a] / 4;
    if (regs.cfg.colsb[c] % 4 || regs.cfg.colsb[a] % 4) fault("TDPBF16PS colsb not a multiple of 4", c, a);
    if (regs.cfg.rows[a] != M) fault("TDPBF16PS a.rows != c.rows", regs.cfg.rows[a], M);
    if (regs.cfg.colsb[b] != regs.cfg.colsb[c]) fault("TDPBF16PS b.colsb != c.colsb", regs.cfg.colsb[b], N * 4);
    if (regs.cfg.rows[b] != K) fault("TDPBF16PS b.rows != a.colsb / 4", regs.cfg.rows[b], K);
    /* operands widened once (each is used 16 times below), denormals read as zero */
    float av[16][32], bv[16][32], cv[16][16];
    for (int m = 0; m < M; m++)
        for (int e = 0; e < 2 * K; e++) av[m][e] = bf(&regs.t[a][m][2 * e]);
    for (int k = 0; k < K; k++)
        for (int e = 0; e < 2 * N; e++) bv[k][e] = bf(&regs.t[b][k][2 * e]);
    for (int m = 0; m < M; m++) memcpy(cv[m], regs.t[c][m], (size_t)N * 4);
#if defined(__x86_64__) && defined(__GNUC__)
    if (__builtin_cpu_supports("fma")) dp_fma(M, N, K, av, bv, cv);
    else
#endif
        dp_portable(M, N, K, av, bv, cv);
    for (int m = 0; m < M; m++) memcpy(regs.t[c][m], cv[m], (size_t)N * 4);
}

/* The kernels, built over the model. */
#include "cpu/gemm_amx.c"
#include "cpu/attention_amx.c"
