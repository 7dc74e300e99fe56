/* peak_flops.c — AVX2 FMA peak: 12 independent _mm256_fmadd_ps chains per thread, timed for 1 and 2 threads
 * (wall clock, and per CPU-second so that a shared machine still shows the per-core peak).
 * Build: gcc -O2 -mavx2 -mfma -fopenmp bench/peak_flops.c -o peak_flops */
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

static float run(long iters) {
    __m256 c[12];
    for (int i = 0; i < 12; i++) c[i] = _mm256_set1_ps((float)i * 1e-3f);
    const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
    for (long it = 0; it < iters; it++) {
        c[0] = _mm256_fmadd_ps(c[0], a, b);
        c[1] = _mm256_fmadd_ps(c[1], a, b);
        c[2] = _mm256_fmadd_ps(c[2], a, b);
        c[3] = _mm256_fmadd_ps(c[3], a, b);
        c[4] = _mm256_fmadd_ps(c[4], a, b);
        c[5] = _mm256_fmadd_ps(c[5], a, b);
        c[6] = _mm256_fmadd_ps(c[6], a, b);
        c[7] = _mm256_fmadd_ps(c[7], a, b);
        c[8] = _mm256_fmadd_ps(c[8], a, b);
        c[9] = _mm256_fmadd_ps(c[9], a, b);
        c[10] = _mm256_fmadd_ps(c[10], a, b);
        c[11] = _mm256_fmadd_ps(c[11], a, b);
        __asm__ volatile("" : "+x"(c[0]), "+x"(c[1]), "+x"(c[2]), "+x"(c[3]), "+x"(c[4]), "+x"(c[5]));
    }
    float s = 0.0f;
    for (int i = 0; i < 12; i++) s += _mm256_cvtss_f32(c[i]);
    return s;
}

int main(void) {
    const long iters = 200000000;
    for (int nt = 1; nt <= 2; nt++) {
        volatile float sink = 0.0f;
        run(iters / 20); /* warm up the clocks */
        double t0 = omp_get_wtime(), c0 = cpu_now();
#pragma omp parallel num_threads(nt)
        {
            float s = run(iters);
#pragma omp atomic
            sink += s;
        }
        double dt = omp_get_wtime() - t0, dc = cpu_now() - c0;
        const double gflop = 2.0 * 8 * 12 * (double)iters * nt * 1e-9;
        printf("threads %d: %.1f GFLOP/s (fp32 FMA, AVX2) [%.1f per CPU-second x threads]\n", nt, gflop / dt,
               gflop / dc * nt);
    }
    return 0;
}
