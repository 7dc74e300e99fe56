/* bench_pool.c — the cost of one pool_run (4 empty tasks) back to back, for pools of 1 to 5 threads: the dispatch
 * overhead the tower pays a few hundred times per encode. Pools larger than the machine's CPU count sleep instead
 * of spinning (core/pool.c). Usage: bench_pool. */
#include <stdio.h>

#include "bench_util.h"
#include "core/pool.h"

static void nop(void *ctx, long task, int thread) { (void)ctx, (void)task, (void)thread; }

int main(void) {
    printf("online CPUs: %d\n", pool_cpu_count());
    for (int n = 1; n <= 5; n++) {
        thread_pool *p = NULL;
        if (pool_create(&p, n, NULL) != QVL_OK) return 1;
        const int runs = 20000;
        const double t0 = wall_now();
        for (int r = 0; r < runs; r++) pool_run(p, 4, nop, NULL);
        printf("%d thread(s): %.2f us per pool_run\n", n, (wall_now() - t0) / runs * 1e6);
        pool_destroy(p);
    }
    return 0;
}
