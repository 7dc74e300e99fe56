/* bench_util.h — clocks and thread pools shared by the kernel benchmarks (header-only, bench/ only). */
#ifndef QVL_BENCH_UTIL_H
#define QVL_BENCH_UTIL_H

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

#endif
