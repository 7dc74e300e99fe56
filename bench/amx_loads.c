/* amx_loads.c — what the AMX GEMM's tile loads cost: TDPBF16PS on a 2 x 2 block of accumulator tiles, as in
 * src/cpu/gemm_amx.c (per K step: load A0, B0, B1, two products, load A1, two products), with the A and B tiles
 * cycled through buffers of chosen sizes, so that they come from L1, L2 or L3. Rows:
 *   - "stream": the accumulators stay in the tiles; A cycles over A KiB and B over B KiB;
 *   - "loads": the peak loop with 1, 2 or 4 tile loads per 4 TDPBF16PS into a tile no product reads: what a load
 *     costs the tile unit apart from any wait for its data (measured 2026-12-06 on an Emerald Rapids VM: 4
 *     loads per 4 products ran at 66 % of the peak, 2 at 82 %: a load takes the unit about half a product's time,
 *     so a 2 x 2 block of accumulators, one load per product, cannot pass about two thirds of it);
 *   - "blocks": gemm_amx.c's tile loop as it runs in the tower: an A block of 4 (128 rows) or 8 row pairs of 36 K
 *     tiles against a column pair's panels (72 KiB: one pair, or 64 pairs cycled, 4.6 MB, from L3 as in the
 *     tower), the accumulators zeroed per block and, with "stored", stored after its last K step (4 tiles; 1: one
 *     tile) as the GEMM must; "+ a store a step": one scalar store per K step as well (the GEMM's epilogue stores
 *     rows between its K steps). Measured 2026-12-08 on an AMX VM (docs/PERFORMANCE.md "Session 46"): 58-66 % of
 *     the peak unstored, 45-50 % stored, 56-61 % stored with a store a step; with the panels from L3 39-44 %
 *     (4 row pairs) against 45-57 % (8): the per-block store after a long run of tile work, and the weight stream,
 *     are what the loop loses;
 *   - "store": the cost of storing after a chain of k K steps of the 2 x 2 block with no loads (tiles 4-7 held):
 *     ns per chain alone, with one tile stored and with the four;
 *   - "chunked": the structure gemm_amx.c had until session 35: a weight chunk of KC tiles per panel, used by P row pairs in turn, each
 *     loading its accumulators from a 32 x 32 f32 block (zeroing them on the first chunk) and storing them back,
 *     over NB column pairs of weights (NB x 2 x 36 KiB streamed), with or without the next chunk prefetched
 *     towards L2 as gemm_amx.c does.
 * One thread; GFLOP/s, and % of the one-thread TDPBF16PS peak measured first (tiles loaded once, as amx_peak.c).
 * Not a test; build with bench/CMakeLists.txt. Usage: amx_loads. Exit status 77 where AMX is not usable. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench_util.h"
#include "core/cpu.h"
#include "cpu/amx_tile.h"

enum { KB = 36 }; /* K tiles of a K = 1152 GEMM (qkv, proj, fc1 of the 27B tower) */

static double tflop(long tdp, double s) { return (double)tdp * 16384.0 / s / 1e9; }

/* The TDPBF16PS rate with no loads in the loop: tiles 4-7 loaded once. */
static double peak(const uint16_t *a) {
    AMX_LOADD(4, a, 64);
    AMX_LOADD(5, a + 512, 64);
    AMX_LOADD(6, a + 1024, 64);
    AMX_LOADD(7, a + 1536, 64);
    const long n = 2000000;
    const double t0 = wall_now();
    for (long i = 0; i < n; i++) {
        AMX_DPBF16PS(0, 4, 6);
        AMX_DPBF16PS(1, 4, 7);
        AMX_DPBF16PS(2, 5, 6);
        AMX_DPBF16PS(3, 5, 7);
    }
    return tflop(4 * n, wall_now() - t0);
}

/* A and B tiles cycled over na and nb tiles (1 KiB each), accumulators never stored. */
static double stream(const uint16_t *a, size_t na, const uint16_t *b, size_t nb, long steps) {
    size_t ia = 0, ib = 0;
    const double t0 = wall_now();
    for (long i = 0; i < steps; i++) {
        const uint16_t *a0 = a + ia * 512, *b0 = b + ib * 512;
        AMX_LOADD(4, a0, 64);
        AMX_LOADD(6, b0, 64);
        AMX_LOADD(7, b0 + 512, 64);
        AMX_DPBF16PS(0, 4, 6);
        AMX_DPBF16PS(1, 4, 7);
        AMX_LOADD(5, a0 + 512, 64);
        AMX_DPBF16PS(2, 5, 6);
        AMX_DPBF16PS(3, 5, 7);
        ia = ia + 2 >= na ? 0 : ia + 2;
        ib = ib + 2 >= nb ? 0 : ib + 2;
    }
    return tflop(4 * steps, wall_now() - t0);
}

/* gemm_amx.c's block loop (block()), with no epilogue and no prefetch: np row pairs of a (row tile g's KB tiles at
 * a + g·KB·512) each against a column pair of b (panel 0's KB tiles, then panel 1's; pair n % nbp of nbp back to
 * back), nb column pairs in all; the accumulators zeroed per block and `stored` of them (0, 1 or 4) stored after
 * its last step; with step_store, one scalar store per K step into cs's far end. */
static double blocks(const uint16_t *a, int np, const uint16_t *b, int nbp, int nb, int stored, int step_store,
                     float *cs) {
    volatile float *sink = cs + 16 * 1024 - 64;
    const double t0 = wall_now();
    for (int n = 0; n < nb; n++) {
        const uint16_t *b0 = b + (size_t)(n % nbp) * 2 * KB * 512, *b1 = b0 + KB * 512;
        for (int ir = 0; ir < np; ir++) {
            const uint16_t *a0 = a + (size_t)(2 * ir) * KB * 512, *a1 = a0 + KB * 512;
            float *c = cs + (size_t)(ir % 4) * 1024;
            AMX_ZERO(0);
            AMX_ZERO(1);
            AMX_ZERO(2);
            AMX_ZERO(3);
            for (int t = 0; t < KB; t++) {
                AMX_LOADD(4, a0 + (size_t)t * 512, 64);
                AMX_LOADD(6, b0 + (size_t)t * 512, 64);
                AMX_LOADD(7, b1 + (size_t)t * 512, 64);
                AMX_DPBF16PS(0, 4, 6);
                AMX_DPBF16PS(1, 4, 7);
                AMX_LOADD(5, a1 + (size_t)t * 512, 64);
                AMX_DPBF16PS(2, 5, 6);
                AMX_DPBF16PS(3, 5, 7);
                if (step_store) sink[t & 63] = (float)t;
            }
            if (stored > 0) AMX_STORED(0, c, 128);
            if (stored > 1) {
                AMX_STORED(1, c + 16, 128);
                AMX_STORED(2, c + 512, 128);
                AMX_STORED(3, c + 528, 128);
            }
        }
    }
    return tflop((long)nb * np * KB * 4, wall_now() - t0);
}

/* ns per chain of k K steps of the 2 x 2 block on held operand tiles 4-7, then `stored` (0, 1 or 4) tiles stored. */
static double store_cost(int k, int stored, long iters, float *cs) {
    const double t0 = wall_now();
    for (long i = 0; i < iters; i++) {
        for (int q = 0; q < k; q++) {
            AMX_DPBF16PS(0, 4, 6);
            AMX_DPBF16PS(1, 4, 7);
            AMX_DPBF16PS(2, 5, 6);
            AMX_DPBF16PS(3, 5, 7);
        }
        if (stored > 0) AMX_STORED(0, cs, 64);
        if (stored > 1) {
            AMX_STORED(1, cs + 256, 64);
            AMX_STORED(2, cs + 512, 64);
            AMX_STORED(3, cs + 768, 64);
        }
    }
    return (wall_now() - t0) / (double)iters * 1e9;
}

/* What a tile load costs the tile unit by itself: the peak loop's four TDPBF16PS with `per` loads of an L1-resident
 * tile into tile 5, which no product reads (so no product waits on a load's data). */
static double unused_loads(const uint16_t *a, int per, long steps) {
    const double t0 = wall_now();
    for (long i = 0; i < steps; i++) {
        AMX_DPBF16PS(0, 4, 6);
        if (per > 0) AMX_LOADD(5, a, 64);
        AMX_DPBF16PS(1, 4, 7);
        if (per > 1) AMX_LOADD(5, a + 512, 64);
        AMX_DPBF16PS(2, 4, 6);
        if (per > 2) AMX_LOADD(5, a, 64);
        AMX_DPBF16PS(3, 4, 7);
        if (per > 3) AMX_LOADD(5, a + 512, 64);
    }
    return tflop(4 * steps, wall_now() - t0);
}

/* gemm_amx.c's loop over nbp column pairs of weights b (2·KB tiles each: panel 0's KB tiles, then panel 1's), a
 * the packed A block of np row pairs (row tile g's KB tiles at a + g·KB·512), cs the accumulators' blocks. */
static double chunked(const uint16_t *a, int np, const uint16_t *b, size_t nbp, int kc, int pf, float *cs) {
    long tdp = 0;
    const int reps = (int)(40000 / ((long)nbp * np) + 1);
    const double t0 = wall_now();
    for (int rep = 0; rep < reps; rep++)
        for (size_t jp = 0; jp < nbp; jp++) {
            const uint16_t *b0 = b + jp * 2 * KB * 512, *b1 = b0 + KB * 512;
            for (int c0 = 0; c0 < KB; c0 += kc) {
                const int kt = KB - c0 < kc ? KB - c0 : kc;
                const char *nx = (const char *)(c0 + kc < KB ? b0 + (size_t)(c0 + kc) * 512 : b0 + 2 * KB * 512);
                const int nl = 16 * kc;
                for (int ir = 0; ir < np; ir++) {
                    const uint16_t *a0 = a + (size_t)(2 * ir) * KB * 512 + (size_t)c0 * 512, *a1 = a0 + KB * 512;
                    float *c = cs + (size_t)ir * 1024;
                    int l = nl * ir / np;
                    const int l1 = nl * (ir + 1) / np, per = (l1 - l + kt - 1) / kt;
                    if (c0 == 0) {
                        AMX_ZERO(0);
                        AMX_ZERO(1);
                        AMX_ZERO(2);
                        AMX_ZERO(3);
                    } else {
                        AMX_LOADD(0, c, 128);
                        AMX_LOADD(1, c + 16, 128);
                        AMX_LOADD(2, c + 512, 128);
                        AMX_LOADD(3, c + 528, 128);
                    }
                    for (int t = 0; t < kt; t++) {
                        for (int q = 0; pf && q < per && l < l1; q++, l++) {
                            AMX_PREFETCH_L2(nx + (size_t)l * 64);
                            AMX_PREFETCH_L2(nx + KB * 1024 + (size_t)l * 64);
                        }
                        AMX_LOADD(4, a0 + (size_t)t * 512, 64);
                        AMX_LOADD(6, b0 + (size_t)(c0 + t) * 512, 64);
                        AMX_LOADD(7, b1 + (size_t)(c0 + t) * 512, 64);
                        AMX_DPBF16PS(0, 4, 6);
                        AMX_DPBF16PS(1, 4, 7);
                        AMX_LOADD(5, a1 + (size_t)t * 512, 64);
                        AMX_DPBF16PS(2, 5, 6);
                        AMX_DPBF16PS(3, 5, 7);
                        tdp += 4;
                    }
                    AMX_STORED(0, c, 128);
                    AMX_STORED(1, c + 16, 128);
                    AMX_STORED(2, c + 512, 128);
                    AMX_STORED(3, c + 528, 128);
                }
            }
        }
    return tflop(tdp, wall_now() - t0);
}

int main(void) {
    if (!cpu_amx_usable()) {
        printf("amx_loads: AMX-BF16 is not usable here (%s)\n", cpu_amx_describe(cpu_amx_state()));
        return 77;
    }
    const size_t max_tiles = 8192, nbp_max = 120; /* 8 MiB of A or B tiles; 120 column pairs = 8.4 MiB */
    uint16_t *a = aligned_alloc(64, max_tiles * 1024), *b = aligned_alloc(64, (nbp_max + 1) * 2 * KB * 1024);
    float *cs = aligned_alloc(64, 16 * 1024 * sizeof(float));
    if (!a || !b || !cs) {
        fprintf(stderr, "amx_loads: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < max_tiles * 512; i++) a[i] = 0x3f80; /* bf16 1.0: no denormals, no overflow */
    for (size_t i = 0; i < (nbp_max + 1) * 2 * KB * 512; i++) b[i] = 0x3f80;
    for (size_t i = 0; i < 16 * 1024; i++) cs[i] = 0.0f;
    amx_tilecfg cfg;
    const uint8_t rows[8] = {16, 16, 16, 16, 16, 16, 16, 16};
    const uint16_t colsb[8] = {64, 64, 64, 64, 64, 64, 64, 64};
    amx_tilecfg_set(&cfg, 8, rows, colsb);
    AMX_LOADCONFIG(&cfg);
    AMX_ZERO(0);
    AMX_ZERO(1);
    AMX_ZERO(2);
    AMX_ZERO(3);
    const double pk = peak(a);
    printf("TDPBF16PS peak, 1 thread: %.0f GFLOP/s\n", pk);
    const size_t st[][2] = {{2, 2}, {16, 16}, {288, 16}, {288, 288}, {2048, 16}, {8192, 8192}};
    for (size_t i = 0; i < sizeof st / sizeof *st; i++) {
        stream(a, st[i][0], b, st[i][1], 100000);
        const double g = stream(a, st[i][0], b, st[i][1], 1000000);
        printf("stream   A %5zu KiB  B %5zu KiB                     %6.0f GFLOP/s  %3.0f %%\n", st[i][0], st[i][1], g,
               100.0 * g / pk);
    }
    for (int per = 1; per <= 4; per *= 2) {
        const double g = unused_loads(a, per, 1000000);
        printf("loads    %d per 4 TDPBF16PS into a tile no product reads     %6.0f GFLOP/s  %3.0f %%\n", per, g,
               100.0 * g / pk);
    }
    /* row pairs, column pairs cycled, tiles stored per block, a store a K step */
    const int bl[][4] = {{4, 1, 0, 0}, {4, 1, 1, 0}, {4, 1, 4, 0}, {4, 1, 4, 1}, {4, 64, 4, 1}, {8, 64, 4, 1}};
    for (size_t i = 0; i < sizeof bl / sizeof *bl; i++) {
        blocks(a, bl[i][0], b, bl[i][1], 200, bl[i][2], bl[i][3], cs);
        const double g = blocks(a, bl[i][0], b, bl[i][1], 16000 / bl[i][0], bl[i][2], bl[i][3], cs);
        printf("blocks   %d row pairs, column pairs %2d%s, stored %d%s  %6.0f GFLOP/s  %3.0f %%\n", bl[i][0], bl[i][1],
               bl[i][1] > 1 ? " (L3)" : "     ", bl[i][2], bl[i][3] ? " + a store a step" : "                 ", g,
               100.0 * g / pk);
    }
    AMX_LOADD(4, a, 64);
    AMX_LOADD(5, a + 512, 64);
    AMX_LOADD(6, a + 1024, 64);
    AMX_LOADD(7, a + 1536, 64);
    for (int k = 1; k <= 64; k *= 4) {
        const long it = 4000000 / k;
        const double t0 = store_cost(k, 0, it, cs), t1 = store_cost(k, 1, it, cs), t4 = store_cost(k, 4, it, cs);
        printf("store    after %2d K steps: %7.1f ns a chain, %7.1f with 1 tile stored, %7.1f with 4\n", k, t0, t1, t4);
    }
    const int ch[][4] = {{8, 4, 1, 0}, {8, 4, 108, 0}, {8, 4, 108, 1}, {16, 4, 108, 1}, {36, 4, 108, 1}, {8, 8, 108, 1}};
    for (size_t i = 0; i < sizeof ch / sizeof *ch; i++) {
        const double g = chunked(a, ch[i][1], b, (size_t)ch[i][2], ch[i][0], ch[i][3], cs);
        printf("chunked  KC %2d  row pairs %d  weights %5d KiB  prefetch %d  %6.0f GFLOP/s  %3.0f %%\n", ch[i][0],
               ch[i][1], ch[i][2] * 2 * KB, ch[i][3], g, 100.0 * g / pk);
    }
    AMX_RELEASE();
    free(a), free(b), free(cs);
    return 0;
}
