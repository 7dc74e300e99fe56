/* bench_util.h — clocks and thread pools shared by the kernel benchmarks (header-only, bench/ only). */
#ifndef QVL_BENCH_UTIL_H
#define QVL_BENCH_UTIL_H

#include <stdlib.h>
#include <time.h>

#include "core/pool.h"

/* Wall-clock seconds, monotonic. */
static inline double wall_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CPU seconds of this process (all threads): on a shared machine, work per CPU-second per thread shows a kernel's
 * efficiency apart from time lost to other processes. */
static inline double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One pool per thread count, made on first use and kept for the process's lifetime (NULL: one thread). */
static inline thread_pool *pool_of(int nt) {
    static thread_pool *pools[65];
    if (nt <= 1 || nt > 64) return NULL;
    if (!pools[nt]) pool_create(&pools[nt], nt, NULL);
    return pools[nt];
}

static inline int ab_cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* An A/B of two versions of a kernel in one process (bench/amx_ab.sh): two warm-up pairs, then `iters` pairs of
 * calls run(ctx, 0) (old) and run(ctx, 1) (new), which one goes first alternating; ratio[i] = old / new time of
 * pair i, t_old and t_new the times, each array sorted ascending (medians at [iters / 2]). */
static inline void ab_pairs(int iters, void (*run)(void *ctx, int which), void *ctx, double *ratio, double *t_old,
                            double *t_new) {
    for (int i = -2; i < iters; i++) {
        double t[2];
        for (int o = 0; o < 2; o++) {
            const int which = (i + o) & 1;
            const double t0 = wall_now();
            run(ctx, which);
            t[which] = wall_now() - t0;
        }
        if (i >= 0) ratio[i] = t[0] / t[1], t_old[i] = t[0], t_new[i] = t[1];
    }
    qsort(ratio, (size_t)iters, sizeof *ratio, ab_cmp_double);
    qsort(t_old, (size_t)iters, sizeof *t_old, ab_cmp_double);
    qsort(t_new, (size_t)iters, sizeof *t_new, ab_cmp_double);
}

#endif
