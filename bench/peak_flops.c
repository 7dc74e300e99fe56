/* peak_flops.c — FMA peak: 12 independent fmadd chains per thread (_mm256 with -mavx2; 24 of _mm512 when built with
 * -mavx512f), timed for 1 and 2 threads (wall clock, and per CPU-second so that a shared machine still shows the
 * per-core peak). Best of 3 timings.
 * Built with -mavx512bf16 it measures the AVX512-BF16 dot-product peak instead: 24 chains of VDPBF16PS (each one
 * 16 lanes x 2 bf16 products accumulated into f32: 64 FLOP), the unit qvl's bf16 kernels run on without AMX.
 * Build: gcc -O2 -mavx2 -mfma -fopenmp bench/peak_flops.c -o peak_flops   (or -mavx512f -mfma: peak_flops_avx512;
 *        -mavx512f -mavx512bf16: peak_flops_bf16) */
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <time.h>

/* CPU seconds of this process (all threads); see bench_gemm.c. */
static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#if defined(__AVX512BF16__)
typedef __m512 vec;
#define VSET1 _mm512_set1_ps
/* c += a . b over bf16 pairs; a is 0.999999f's bit pattern read as bf16 pairs and b = 1e-7f's: both finite */
#define VFMA(c, a, b) _mm512_dpbf16_ps((c), (__m512bh)(a), (__m512bh)(b))
#define VLANES 32 /* products per instruction: 16 f32 lanes x 2 bf16 pairs */
#define VNAME "bf16 dot, AVX512-BF16 VDPBF16PS"
static inline float vfirst(vec v) { return _mm512_cvtss_f32(v); }
#elif defined(__AVX512F__)
typedef __m512 vec;
#define VSET1 _mm512_set1_ps
#define VFMA _mm512_fmadd_ps
#define VLANES 16
#define VNAME "fp32 FMA, AVX-512"
static inline float vfirst(vec v) { return _mm512_cvtss_f32(v); }
#else
typedef __m256 vec;
#define VSET1 _mm256_set1_ps
#define VFMA _mm256_fmadd_ps
#define VLANES 8
#define VNAME "fp32 FMA, AVX2"
static inline float vfirst(vec v) { return _mm256_cvtss_f32(v); }
#endif

/* Chains per thread: a unit of two pipes and latency L needs 2·L in flight. 12 for AVX2 (16 ymm registers); 24
 * for the 512-bit units: VDPBF16PS on AMD Zen 5 reached only 92 % of its rate with 12 (tools/cli_bench.c says
 * what was measured). */
#if defined(__AVX512F__)
#define NCHAIN 24
#define CHAINS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15) X(16) X(17) \
    X(18) X(19) X(20) X(21) X(22) X(23)
#else
#define NCHAIN 12
#define CHAINS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#endif

static float run(long iters) {
    /* Named accumulators, not an array: an array under the asm barrier was kept in memory and stored every
     * iteration, which measured the store port instead of the FMA ports. */
#define DECL(i) vec c##i = VSET1(1e-3f * (float)(i));
#define STEP(i) c##i = VFMA(c##i, a, b);
#define KEEP(i) __asm__ volatile("" : "+v"(c##i));
#define SUM(i) +vfirst(c##i)
    CHAINS(DECL)
    const vec a = VSET1(0.999999f), b = VSET1(1e-7f);
    for (long it = 0; it < iters; it++) {
        CHAINS(STEP)
        CHAINS(KEEP)
    }
    return 0.0f CHAINS(SUM);
}

int main(void) {
    const long iters = 200000000;
    for (int nt = 1; nt <= 2; nt++) {
        volatile float sink = 0.0f;
        run(iters / 20); /* warm up the clocks */
        double best = 0.0, best_cpu = 0.0;
        const double gflop = 2.0 * VLANES * NCHAIN * (double)(iters / 4) * nt * 1e-9;
        for (int r = 0; r < 3; r++) {
            double t0 = omp_get_wtime(), c0 = cpu_now();
#pragma omp parallel num_threads(nt)
            {
                float s = run(iters / 4);
#pragma omp atomic
                sink += s;
            }
            double dt = omp_get_wtime() - t0, dc = cpu_now() - c0;
            if (gflop / dt > best) best = gflop / dt;
            if (gflop / dc * nt > best_cpu) best_cpu = gflop / dc * nt;
        }
        printf("threads %d: %.1f GFLOP/s (%s) [%.1f per CPU-second x threads]\n", nt, best, VNAME,
               best_cpu);
    }
    return 0;
}
