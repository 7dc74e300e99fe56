/* amx_peak.c — AMX-BF16 peak: a loop of TDPBF16PS on four independent 16 x 16 f32 accumulator tiles (two A and
 * two B tiles of 16 rows x 64 bytes, loaded once), timed on 1, 2, 4, 8, ... and N threads (wall clock, and per
 * CPU-second so that a shared machine still shows the per-core peak). Best of 3 timings; each line is written as
 * soon as it is measured (line-buffered), so a run stopped by a time limit keeps what it had. One TDPBF16PS is a
 * 16 x 16 x 32 bf16 multiply-accumulate into f32: 2 * 16 * 16 * 32 = 16384 FLOP.
 *
 * Build: gcc -O2 -mamx-tile -mamx-bf16 -pthread bench/amx_peak.c -o amx_peak   (bench/CMakeLists.txt does this
 * when the compiler takes the flags). Usage: amx_peak [MAX_THREADS] (default: the online cores).
 *
 * Exit status 77 (and a line saying why) when there is nothing to measure: a CPU without AMX-BF16 / AMX-TILE
 * (cpuid leaf 7, EDX bits 22 and 24), a kernel that refuses the tile data state (Linux needs
 * arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) once per process before the first tile instruction), a
 * non-Linux or non-x86 build, or a compiler without the AMX flags. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__linux__) && defined(__AMX_TILE__) && defined(__AMX_BF16__)
#include <cpuid.h>
#include <errno.h>
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

static double wall_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static double cpu_now(void) { /* CPU seconds of this process, all threads */
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The 64-byte tile configuration (palette 1) that LDTILECFG reads. */
typedef struct tile_config {
    uint8_t palette_id;
    uint8_t start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

typedef struct worker {
    long iters;
    float sink;
    uint16_t a[2][16 * 32], b[2][16 * 32]; /* bf16 bit patterns, 16 rows x 64 bytes each */
    float c[16 * 16];
} worker;

static void *run(void *p) {
    worker *w = p;
    tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette_id = 1;
    for (int t = 0; t < 8; t++) {
        cfg.rows[t] = 16;
        cfg.colsb[t] = 64;
    }
    /* gcc 12 at -O2 does not see that _tile_loadconfig reads the struct and drops the stores that fill it (the
     * tiles then come up unconfigured and the first tile instruction faults): the barrier makes the stores land. */
    __asm__ volatile("" ::: "memory");
    _tile_loadconfig(&cfg);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(4, w->a[0], 64);
    _tile_loadd(5, w->a[1], 64);
    _tile_loadd(6, w->b[0], 64);
    _tile_loadd(7, w->b[1], 64);
    for (long i = 0; i < w->iters; i++) {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    float s = 0;
    for (int t = 0; t < 4; t++) {
        switch (t) { /* tile numbers are immediates */
        case 0: _tile_stored(0, w->c, 64); break;
        case 1: _tile_stored(1, w->c, 64); break;
        case 2: _tile_stored(2, w->c, 64); break;
        default: _tile_stored(3, w->c, 64); break;
        }
        s += w->c[0] + w->c[255];
    }
    _tile_release();
    w->sink = s;
    return NULL;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    int have_bf16 = 0, have_tile = 0;
    if (__get_cpuid_max(0, NULL) >= 7) {
        __cpuid_count(7, 0, eax, ebx, ecx, edx);
        have_bf16 = (edx >> 22) & 1;
        have_tile = (edx >> 24) & 1;
    }
    if (!have_bf16 || !have_tile) {
        printf("amx_peak: this CPU has no AMX (cpuid leaf 7 EDX: AMX-BF16 %d, AMX-TILE %d): the AMX peak is not "
               "available on this machine\n", have_bf16, have_tile);
        return 77;
    }
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0) {
        printf("amx_peak: the CPU has AMX but the kernel refuses the tile data state (arch_prctl "
               "ARCH_REQ_XCOMP_PERM: %s; Linux 5.16 or later is needed): the AMX peak is not available\n",
               strerror(errno));
        return 77;
    }
    long max_threads = sysconf(_SC_NPROCESSORS_ONLN);
    if (argc > 1) max_threads = strtol(argv[1], NULL, 10);
    if (max_threads < 1) max_threads = 1;
    if (max_threads > 256) max_threads = 256;
    worker *w = aligned_alloc(64, sizeof(worker) * (size_t)max_threads);
    if (!w) return 1;
    for (long t = 0; t < max_threads; t++)
        for (int k = 0; k < 16 * 32; k++) {
            w[t].a[0][k] = w[t].a[1][k] = 0x3f80; /* 1.0 */
            w[t].b[0][k] = w[t].b[1][k] = 0x3380; /* 2^-24: the sums stay finite */
        }
    const long iters = 20000000;
    const double flop_per_op = 2.0 * 16 * 16 * 32;
    double per_thread = 0;
    for (long nt = 1; nt <= max_threads; nt = nt < max_threads && 2 * nt > max_threads ? max_threads : 2 * nt) {
        pthread_t tid[256];
        double best = 0, best_cpu = 0, sink = 0;
        for (int r = 0; r < 4; r++) { /* the first round warms the clocks and is not counted */
            double t0 = wall_now(), c0 = cpu_now();
            long started = 0;
            for (long t = 1; t < nt; t++) {
                w[t].iters = iters;
                if (pthread_create(&tid[t], NULL, run, &w[t]) != 0) break;
                started++;
            }
            w[0].iters = iters;
            run(&w[0]);
            for (long t = 1; t <= started; t++) pthread_join(tid[t], NULL);
            double dt = wall_now() - t0, dc = cpu_now() - c0;
            for (long t = 0; t <= started; t++) sink += w[t].sink;
            double gflop = flop_per_op * 4 * (double)iters * (double)(started + 1) * 1e-9;
            if (r == 0) continue;
            if (gflop / dt > best) best = gflop / dt;
            if (gflop / dc * (double)(started + 1) > best_cpu) best_cpu = gflop / dc * (double)(started + 1);
        }
        if (nt == 1) per_thread = best;
        printf("threads %ld: %.1f GFLOP/s (AMX-BF16 TDPBF16PS) [%.1f per CPU-second x threads]%s\n", nt, best,
               best_cpu, sink == 12345.0 ? " " : "");
    }
    printf("per thread: %.1f GFLOP/s (AMX-BF16 TDPBF16PS)\n", per_thread);
    free(w);
    return 0;
}
#else
int main(void) {
    printf("amx_peak: built without AMX support (needs x86-64 Linux and a compiler taking -mamx-tile -mamx-bf16): "
           "the AMX peak is not available\n");
    return 77;
}
#endif
