/* bench_ukr.c — the AVX-512 GEMM microkernel alone (one thread), 14 x 32 tiles, kc = 384 (the K block of the
 * 1152-wide tower GEMMs), A micro-panels cycling through an L2-resident block. Cases:
 *   bf16 / f32 panels, one B micro-panel (L1-resident): the kernel's own ceiling;
 *   bf16, the GEMM's access pattern: B panels laid out as pre-packed weights (two 16-column panels K·16 apart),
 *   a new B micro-panel every MT tiles from a 4.7 MB set (L3), partial-sum tiles spread as in the driver's Cb;
 *   the same, widened once: the first of the MT tiles keeps its widened panels (bw), the others run the f32 kernel
 *   on them (what gemm.c does).
 * Usage: bench_ukr (needs a CPU with AVX-512; prints GFLOP/s, best of 5 half-second runs). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench_util.h"
#include "cpu/kernels_avx512.h"

enum { KC = 384, K = 1152, NB = 64, LDC = 1536 };

typedef struct bcase {
    const char *name;
    int f32, mt, gemm_like, keep;
} bcase;

int main(void) {
    if (!cpu_has_avx512()) {
        puts("bench_ukr: no AVX-512 on this CPU");
        return 0;
    }
    const size_t panel = (size_t)K * 16; /* elements of one 16-column panel over K */
    float *a = aligned_alloc(64, (size_t)14 * KC * 8 * sizeof(float));
    uint16_t *bh = aligned_alloc(64, panel * 2 * NB * sizeof(uint16_t));
    float *bf = aligned_alloc(64, (size_t)KC * 32 * sizeof(float));
    float *c = aligned_alloc(64, (size_t)14 * LDC * 8 * sizeof(float));
    for (size_t i = 0; i < (size_t)14 * KC * 8; i++) a[i] = 1e-3f * (float)(i % 7);
    for (size_t i = 0; i < panel * 2 * NB; i++) bh[i] = 0x3f80; /* bf16 1.0 */
    for (size_t i = 0; i < (size_t)KC * 32; i++) bf[i] = 1.0f;
    float *bw = aligned_alloc(64, (size_t)KC * 32 * sizeof(float));
    const bcase cases[] = {{"bf16 panels, B in L1", 0, 8, 0, 0},
                           {"f32 panels, B in L1", 1, 8, 0, 0},
                           {"bf16, GEMM pattern, B every 3 tiles (mc 42)", 0, 3, 1, 0},
                           {"bf16, GEMM pattern, B every 8 tiles (mc 112)", 0, 8, 1, 0},
                           {"bf16, GEMM pattern, mc 42, widened once", 0, 3, 1, 1}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const bcase *k = &cases[ci];
        double best = 0;
        for (int rep = 0; rep < 5; rep++) {
            long calls = 0;
            const double t0 = wall_now();
            do {
                for (int j = 0; j < 1200; j++) {
                    const float *aj = a + (size_t)(j % k->mt) * 14 * KC;
                    float *cj = c + (size_t)(j % k->mt) * 14 * LDC;
                    if (k->f32) {
                        gemm_ukr_14x32_avx512(KC, aj, bf, bf + (size_t)KC * 16, cj, LDC, 1, NULL, NULL, NULL, 0);
                    } else if (k->gemm_like) {
                        const size_t t = (size_t)(j / k->mt % NB);
                        const uint16_t *b0 = bh + t * panel * 2;
                        float *ct = cj + (size_t)(j / k->mt % 36) * 32;
                        if (k->keep && j % k->mt)
                            gemm_ukr_14x32_avx512(KC, aj, bw, bw + (size_t)KC * 16, ct, LDC, 1, NULL, NULL, NULL, 0);
                        else
                            gemm_ukr_14x32_bf16_avx512(KC, aj, b0, b0 + panel, ct, LDC, 1, NULL, k->keep ? bw : NULL);
                    } else {
                        gemm_ukr_14x32_bf16_avx512(KC, aj, bh, bh + panel, cj, LDC, 1, NULL, NULL);
                    }
                }
                calls += 1200;
            } while (wall_now() - t0 < 0.5);
            const double gf = (double)calls * 2.0 * 14 * 32 * KC / (wall_now() - t0) * 1e-9;
            if (gf > best) best = gf;
        }
        printf("%-46s %6.1f GFLOP/s\n", k->name, best);
    }
    free(a), free(bh), free(bf), free(c), free(bw);
    return 0;
}
