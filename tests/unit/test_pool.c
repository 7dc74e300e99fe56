/* test_pool.c — the thread pool: every task runs exactly once with a valid thread number, many back-to-back loops
 * (the tower's pattern) and loops after the workers have gone to sleep, pool_for's ranges, several pools driven
 * from several threads at once, and the NULL / one-thread pools running inline. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/pool.h"
#include "testutil.h"

typedef struct count_job {
    atomic_int *hits;   /* [n_tasks] */
    atomic_int bad_thread;
    int size;
} count_job;

static void count_task(void *ctx, long t, int thread) {
    count_job *j = ctx;
    atomic_fetch_add(&j->hits[t], 1);
    if (thread < 0 || thread >= j->size) atomic_store(&j->bad_thread, 1);
}

/* Runs n_tasks tasks on p and checks each ran once, on a thread number below pool_size. */
static int run_counted(thread_pool *p, long n_tasks) {
    atomic_int *hits = calloc((size_t)n_tasks + 1, sizeof *hits);
    count_job j = {hits, 0, pool_size(p)};
    pool_run(p, n_tasks, count_task, &j);
    int ok = !atomic_load(&j.bad_thread);
    for (long t = 0; t < n_tasks; t++) ok &= atomic_load(&hits[t]) == 1;
    free(hits);
    return ok;
}

typedef struct range_job {
    unsigned char *seen; /* [n] */
    atomic_int bad;
    long grain;
} range_job;

static void range_fn(void *ctx, long b, long e, int thread) {
    (void)thread;
    range_job *j = ctx;
    if (b >= e || (j->grain > 0 && (e - b > j->grain || b % j->grain))) atomic_store(&j->bad, 1);
    for (long i = b; i < e; i++) j->seen[i]++;
}

static int run_ranges(thread_pool *p, long n, long grain) {
    unsigned char *seen = calloc((size_t)n + 1, 1);
    range_job j = {seen, 0, grain};
    pool_for(p, n, grain, range_fn, &j);
    int ok = !atomic_load(&j.bad);
    for (long i = 0; i < n; i++) ok &= seen[i] == 1;
    free(seen);
    return ok;
}

/* A pool per thread, each hammered with small loops at the same time (the one-context-per-thread pattern). */
static void *driver(void *arg) {
    int *ok = arg;
    thread_pool *p = NULL;
    *ok = pool_create(&p, 2, NULL) == QVL_OK && pool_size(p) == 2;
    for (int r = 0; r < 300 && *ok; r++) *ok = run_counted(p, 1 + r % 7);
    pool_destroy(p);
    return NULL;
}

/* pool_finish_time's item costs: ctx an array of doubles. */
static double cost_of(const void *ctx, long i) { return ((const double *)ctx)[i]; }

int main(void) {
    /* NULL and one-thread pools run inline, thread 0 only. */
    CHECK(pool_size(NULL) == 1);
    CHECK(run_counted(NULL, 5));
    thread_pool *one = NULL;
    CHECK(pool_create(&one, 1, NULL) == QVL_OK && pool_size(one) == 1);
    CHECK(run_counted(one, 9));
    pool_destroy(one);
    pool_destroy(NULL);
    CHECK(pool_cpu_count() >= 1);

    for (int n = 2; n <= 5; n++) {
        thread_pool *p = NULL;
        CHECK(pool_create(&p, n, NULL) == QVL_OK);
        CHECK(pool_size(p) == n);
        int ok = 1;
        for (long r = 0; r < 2000; r++) ok &= run_counted(p, r % 13); /* 0, 1 and more tasks than threads */
        CHECK(ok);
        CHECK(run_counted(p, 100000));
        /* Let the workers fall asleep, then wake them. */
        struct timespec ts = {0, 30 * 1000 * 1000};
        nanosleep(&ts, NULL);
        CHECK(run_counted(p, 64));
        CHECK(run_ranges(p, 1, 0));
        CHECK(run_ranges(p, 1000, 0));
        CHECK(run_ranges(p, 1000, 7));
        CHECK(run_ranges(p, 999, 1000));
        pool_destroy(p);
    }

    pthread_t t[3];
    int ok[3] = {0, 0, 0};
    for (int i = 0; i < 3; i++) CHECK(pthread_create(&t[i], NULL, driver, &ok[i]) == 0);
    for (int i = 0; i < 3; i++) {
        pthread_join(t[i], NULL);
        CHECK(ok[i]);
    }
    /* pool_finish_time: items in order to the thread free first, ties to the lowest */
    {
        const double c1[] = {3, 1, 1}, c2[] = {1, 1, 1, 1, 1}, c3[] = {2, 2, 1, 1, 1, 1};
        CHECK(pool_finish_time(2, 3, cost_of, c1) == 3); /* 3 | 1 + 1 */
        CHECK(pool_finish_time(2, 5, cost_of, c2) == 3); /* 5 equal items on 2 threads: 3 rounds */
        CHECK(pool_finish_time(1, 5, cost_of, c2) == 5);
        CHECK(pool_finish_time(3, 6, cost_of, c3) == 3); /* 2 + 1 | 2 + 1 | 1 + 1 */
        CHECK(pool_finish_time(2, 0, cost_of, c1) == 0);
    }
    return tu_finish("test_pool");
}
