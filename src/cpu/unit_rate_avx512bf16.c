/* unit_rate_avx512bf16.c — the VDPBF16PS : FMA rate of this CPU (contract in unit_rate.h). Compiled for
 * AVX-512 + AVX512-BF16; called only after cpu_has_avx512bf16(). */
#include <immintrin.h>
#include <time.h>

#include "cpu/unit_rate.h"

/* Independent accumulator chains per loop: enough to cover the latency times the issue width of either unit on
 * the cores measured (24 also fits the 32 zmm registers). */
enum { CHAINS = 24, ITERS = 20000, ROUNDS = 5 };

static double now_s(void) {
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) return -1;
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Each loop returns a value of its chains, which the caller adds up, so that none of the work can be dropped. */
static float fma_loop(int iters) {
    __m512 a[CHAINS];
    const __m512 m = _mm512_set1_ps(1.0000001f), add = _mm512_set1_ps(1e-7f);
    for (int k = 0; k < CHAINS; k++) a[k] = _mm512_set1_ps(1e-7f * (float)k);
    for (int i = 0; i < iters; i++)
#pragma GCC unroll 24
        for (int k = 0; k < CHAINS; k++) a[k] = _mm512_fmadd_ps(a[k], m, add);
    float s = 0;
    for (int k = 0; k < CHAINS; k++) s += _mm512_cvtss_f32(a[k]);
    return s;
}

static float dot_loop(int iters) {
    __m512 a[CHAINS];
    const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-7f); /* finite as bf16 pairs */
    for (int k = 0; k < CHAINS; k++) a[k] = _mm512_set1_ps(1e-7f * (float)k);
    for (int i = 0; i < iters; i++)
#pragma GCC unroll 24
        for (int k = 0; k < CHAINS; k++) a[k] = _mm512_dpbf16_ps(a[k], (__m512bh)x, (__m512bh)y);
    float s = 0;
    for (int k = 0; k < CHAINS; k++) s += _mm512_cvtss_f32(a[k]);
    return s;
}

double unit_rate_bf16_dot_vs_fma(void) {
    /* FLOP per loop: an FMA is 16 lanes x 2, a VDPBF16PS 16 lanes x 2 products x 2 */
    const double fma_flop = (double)ITERS * CHAINS * 32, dot_flop = (double)ITERS * CHAINS * 64;
    double best_fma = 0, best_dot = 0;
    volatile float sink = 0;
    for (int r = -1; r < ROUNDS; r++) { /* round -1 warms the clock up and is not counted */
        const double t0 = now_s();
        sink += fma_loop(ITERS);
        const double t1 = now_s();
        sink += dot_loop(ITERS);
        const double t2 = now_s();
        if (t0 < 0 || t1 < 0 || t2 < 0) return 0;
        if (r < 0) continue;
        if (t1 > t0 && fma_flop / (t1 - t0) > best_fma) best_fma = fma_flop / (t1 - t0);
        if (t2 > t1 && dot_flop / (t2 - t1) > best_dot) best_dot = dot_flop / (t2 - t1);
    }
    (void)sink;
    return best_fma > 0 ? best_dot / best_fma : 0;
}
