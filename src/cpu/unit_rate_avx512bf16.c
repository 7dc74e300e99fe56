/* unit_rate_avx512bf16.c — the VDPBF16PS : FMA rate of this CPU (contract in unit_rate.h). Compiled for
 * AVX-512 + AVX512-BF16; called only after cpu_has_avx512bf16().
 *
 * The two timed loops are inline assembly, so that every build runs the same instructions: written with intrinsics,
 * the sanitizer build compiled them differently from the release build (its loops measured VDPBF16PS above 1.25x
 * the FMA rate on an Emerald Rapids VM where the release build measured below it, so precision auto chose another
 * kernel set under ASan). The accumulators live in zmm0-zmm23 and the operands in zmm30-zmm31: nothing touches
 * memory inside a loop, and the values stay normal (1.0 plus products of zero), so no denormal assist is timed. */
#include <immintrin.h>
#include <time.h>

#include "cpu/unit_rate.h"

#if defined(__x86_64__)

/* 24 independent accumulator chains per loop: enough to cover the latency times the issue width of either unit on
 * the cores measured. */
enum { CHAINS = 24, ITERS = 20000, ROUNDS = 5 };

static double now_s(void) {
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) return -1;
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#define QVL_X24(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7) M(8) M(9) M(10) M(11) \
                   M(12) M(13) M(14) M(15) M(16) M(17) M(18) M(19) M(20) M(21) M(22) M(23)
#define QVL_INIT(i) "vmovaps %%zmm30, %%zmm" #i "\n\t"
#define QVL_FMA(i) "vfmadd231ps %%zmm31, %%zmm30, %%zmm" #i "\n\t"
#define QVL_DOT(i) "vdpbf16ps %%zmm31, %%zmm30, %%zmm" #i "\n\t"
#define QVL_CLOBBERS "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", \
    "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", "xmm21", "xmm22", \
    "xmm23", "xmm30", "xmm31", "cc"

/* A loop of `iters` x 24 instructions OP (QVL_FMA or QVL_DOT) over the accumulators zmm0-23, from zmm30 = 1.0 and
 * zmm31 = 0: the FMA adds 1.0 x 0.0, VDPBF16PS the pairs of zmm30 (bf16 0.0 and 1.0) times those of zmm31. */
#define QVL_RATE_LOOP(name, OP)                                                                                    \
    static void name(long iters) {                                                                                 \
        static const float one = 1.0f;                                                                             \
        __asm__ volatile("vbroadcastss %[one], %%zmm30\n\t"                                                        \
                         "vpxord %%zmm31, %%zmm31, %%zmm31\n\t" QVL_X24(QVL_INIT) "1:\n\t" QVL_X24(OP)           \
                         "dec %[n]\n\t"                                                                            \
                         "jnz 1b\n\t"                                                                              \
                         : [n] "+r"(iters)                                                                         \
                         : [one] "m"(one)                                                                          \
                         : QVL_CLOBBERS);                                                                          \
    }
QVL_RATE_LOOP(fma_loop, QVL_FMA)
QVL_RATE_LOOP(dot_loop, QVL_DOT)

double unit_rate_bf16_dot_vs_fma(void) {
    /* FLOP per loop: an FMA is 16 lanes x 2, a VDPBF16PS 16 lanes x 2 products x 2 */
    const double fma_flop = (double)ITERS * CHAINS * 32, dot_flop = (double)ITERS * CHAINS * 64;
    double best_fma = 0, best_dot = 0;
    for (int r = -1; r < ROUNDS; r++) { /* round -1 warms the clock up and is not counted */
        const double t0 = now_s();
        fma_loop(ITERS);
        const double t1 = now_s();
        dot_loop(ITERS);
        const double t2 = now_s();
        if (t0 < 0 || t1 < 0 || t2 < 0) return 0;
        if (r < 0) continue;
        if (t1 > t0 && fma_flop / (t1 - t0) > best_fma) best_fma = fma_flop / (t1 - t0);
        if (t2 > t1 && dot_flop / (t2 - t1) > best_dot) best_dot = dot_flop / (t2 - t1);
    }
    return best_fma > 0 ? best_dot / best_fma : 0;
}
#else
/* 32-bit x86 has 8 vector registers, too few independent chains to cover either unit's latency: no measurement
 * (0, as for a failed clock), so precision auto stays f32 there where the tiles are not usable. */
double unit_rate_bf16_dot_vs_fma(void) { return 0; }
#endif
