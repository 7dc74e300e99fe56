/* pool.c — persistent worker threads for one parallel loop at a time (contract in pool.h).
 *
 * The current job is (fn, ctx, n_tasks) plus one 64-bit word `work` = generation << 32 | next task. pool_run
 * writes the job, then stores a new generation with next = 0 (release) and wakes sleepers. Every thread, the
 * caller included, claims tasks by compare-and-swap on `work`, so a claim succeeds only for the generation it
 * read the job under: a worker that wakes late, after the job it saw has finished, can never run a task of the
 * wrong job, and the caller never waits for it. A finished job's word is closed (index 0xffffffff) before the
 * next job's fields change, so a claimer holding the old word cannot pair it with the new task count. `done`
 * counts finished tasks; pool_run returns when it reaches n_tasks (spinning, then sleeping on `done_cv`). Workers
 * wait for a new generation spinning POOL_SPIN rounds, then on `wake`; when the pool has more threads than the
 * process has CPUs they, and pool_run's caller, sleep at once, as spinning would only take time from the thread
 * that has work. */
#include "core/pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/error.h"

/* Spin rounds (one pause each, ~10-140 cycles by CPU) before a waiting thread sleeps: long enough to cover the
 * gap between the tower's back-to-back loops, short enough not to hold a core when the pool is idle. Tasks per
 * job are claimed through a 32-bit counter: larger loops run as several jobs. */
enum { POOL_SPIN = 1 << 14 };
#define POOL_MAX_TASKS 0x7fffffffL

typedef struct pool_worker {
    struct thread_pool *pool;
    int index; /* thread number handed to tasks: 1 .. n - 1 */
    pthread_t tid;
} pool_worker;

struct thread_pool {
    int n;         /* threads, the caller included */
    int n_workers; /* started workers: n - 1 */
    int spin;      /* spin rounds before sleeping (0 when oversubscribed) */
    pool_worker *workers;
    pthread_mutex_t mu;
    pthread_cond_t wake;    /* a new generation, or stop */
    pthread_cond_t done_cv; /* done reached the job's task count */
    atomic_int stop;
    _Atomic uint64_t work;  /* generation << 32 | next task */
    atomic_long done;       /* tasks of the current job finished */
    /* The current job: written before its generation is published, read by claimers (relaxed: a claim that
     * succeeds proves they were this generation's). */
    _Atomic(pool_task_fn) fn;
    _Atomic(void *) ctx;
    atomic_long n_tasks;
    atomic_long base; /* task number of claim index 0 (loops over POOL_MAX_TASKS run in slices) */
};

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* The CPUs this process may run on (its affinity mask: taskset, cgroup cpusets), as OpenMP's default counted them;
 * the online CPUs where the mask cannot be read. */
int pool_cpu_count(void) {
    long n = 0;
#ifdef CPU_COUNT
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) n = CPU_COUNT(&set);
#endif
    if (n < 1) n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > QVL_MAX_THREADS ? QVL_MAX_THREADS : (int)n;
}

int pool_size(const thread_pool *p) { return p ? p->n : 1; }

/* Claim and run tasks of generation `gen` until none is left (or a newer generation has replaced it). */
static void run_tasks(thread_pool *p, uint32_t gen, int thread) {
    for (;;) {
        uint64_t w = atomic_load_explicit(&p->work, memory_order_acquire);
        if ((uint32_t)(w >> 32) != gen) return;
        const pool_task_fn fn = atomic_load_explicit(&p->fn, memory_order_relaxed);
        void *ctx = atomic_load_explicit(&p->ctx, memory_order_relaxed);
        const long n = atomic_load_explicit(&p->n_tasks, memory_order_acquire);
        const long base = atomic_load_explicit(&p->base, memory_order_relaxed);
        const long i = (long)(uint32_t)w;
        if (i >= n) return;
        if (!atomic_compare_exchange_weak_explicit(&p->work, &w, w + 1, memory_order_acq_rel, memory_order_relaxed))
            continue;
        fn(ctx, base + i, thread);
        if (atomic_fetch_add_explicit(&p->done, 1, memory_order_acq_rel) + 1 == n) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done_cv);
            pthread_mutex_unlock(&p->mu);
        }
    }
}

static void *worker_main(void *arg) {
    pool_worker *w = arg;
    thread_pool *p = w->pool;
    uint32_t seen = 0;
    for (;;) {
        uint32_t g = (uint32_t)(atomic_load_explicit(&p->work, memory_order_acquire) >> 32);
        for (int s = 0; g == seen && s < p->spin; s++) {
            cpu_relax();
            g = (uint32_t)(atomic_load_explicit(&p->work, memory_order_acquire) >> 32);
        }
        if (g == seen) {
            pthread_mutex_lock(&p->mu);
            while ((g = (uint32_t)(atomic_load_explicit(&p->work, memory_order_acquire) >> 32)) == seen &&
                   !atomic_load(&p->stop))
                pthread_cond_wait(&p->wake, &p->mu);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->stop)) return NULL;
        seen = g;
        run_tasks(p, g, w->index);
    }
}

qvl_status pool_create(thread_pool **out, int n_threads, qvl_error *err) {
    *out = NULL;
    const int cpus = pool_cpu_count();
    if (n_threads <= 0) n_threads = cpus;
    if (n_threads > QVL_MAX_THREADS) n_threads = QVL_MAX_THREADS;
    thread_pool *p = calloc(1, sizeof *p);
    if (!p) return err_fail(err, QVL_ERR_NOMEM, "thread pool: out of memory");
    if (n_threads > 1 && !(p->workers = calloc((size_t)n_threads - 1, sizeof *p->workers))) {
        free(p);
        return err_fail(err, QVL_ERR_NOMEM, "thread pool: out of memory for %d threads", n_threads);
    }
    p->spin = n_threads > cpus ? 0 : POOL_SPIN;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done_cv, NULL);
    atomic_init(&p->stop, 0);
    atomic_init(&p->work, (uint64_t)0);
    atomic_init(&p->done, 0L);
    atomic_init(&p->fn, (pool_task_fn)NULL);
    atomic_init(&p->ctx, (void *)NULL);
    atomic_init(&p->n_tasks, 0L);
    atomic_init(&p->base, 0L);
    for (int i = 0; i < n_threads - 1; i++) {
        pool_worker *w = &p->workers[i];
        w->pool = p;
        w->index = i + 1;
        if (pthread_create(&w->tid, NULL, worker_main, w) != 0) break; /* keep the threads we have */
        p->n_workers++;
    }
    p->n = 1 + p->n_workers;
    *out = p;
    return QVL_OK;
}

void pool_destroy(thread_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, 1);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_workers; i++) pthread_join(p->workers[i].tid, NULL);
    pthread_cond_destroy(&p->done_cv);
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->mu);
    free(p->workers);
    free(p);
}

/* One job of n <= POOL_MAX_TASKS tasks numbered base .. base + n - 1. */
static void run_job(thread_pool *p, long base, long n, pool_task_fn fn, void *ctx) {
    atomic_store_explicit(&p->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&p->ctx, ctx, memory_order_relaxed);
    atomic_store_explicit(&p->n_tasks, n, memory_order_release); /* after the closing of the last job: below */
    atomic_store_explicit(&p->base, base, memory_order_relaxed);
    atomic_store_explicit(&p->done, 0L, memory_order_relaxed);
    const uint32_t gen = (uint32_t)(atomic_load_explicit(&p->work, memory_order_relaxed) >> 32) + 1;
    pthread_mutex_lock(&p->mu); /* a worker between its check of the generation and its wait holds mu */
    atomic_store_explicit(&p->work, (uint64_t)gen << 32, memory_order_release);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    run_tasks(p, gen, 0);
    for (int s = 0; atomic_load_explicit(&p->done, memory_order_acquire) < n && s < p->spin; s++) cpu_relax();
    if (atomic_load_explicit(&p->done, memory_order_acquire) < n) {
        pthread_mutex_lock(&p->mu);
        while (atomic_load_explicit(&p->done, memory_order_acquire) < n) pthread_cond_wait(&p->done_cv, &p->mu);
        pthread_mutex_unlock(&p->mu);
    }
    /* Close the generation: a claimer that read this job's word but sees the next job's task count (written
     * before the next generation is published) must fail its compare-and-swap, not claim a task of the next job
     * under this generation. It reads that count with acquire, so it sees this store too. */
    atomic_store_explicit(&p->work, (uint64_t)gen << 32 | 0xffffffffu, memory_order_relaxed);
}

void pool_run(thread_pool *p, long n_tasks, pool_task_fn fn, void *ctx) {
    if (n_tasks <= 0) return;
    if (!p || p->n_workers == 0 || n_tasks == 1) {
        for (long t = 0; t < n_tasks; t++) fn(ctx, t, 0);
        return;
    }
    for (long base = 0; base < n_tasks; base += POOL_MAX_TASKS)
        run_job(p, base, n_tasks - base < POOL_MAX_TASKS ? n_tasks - base : POOL_MAX_TASKS, fn, ctx);
}

typedef struct range_job {
    pool_range_fn fn;
    void *ctx;
    long n, grain;
} range_job;

static void range_task(void *ctx, long task, int thread) {
    const range_job *j = ctx;
    const long b = task * j->grain, e = j->n - b < j->grain ? j->n : b + j->grain;
    j->fn(j->ctx, b, e, thread);
}

void pool_for(thread_pool *p, long n, long grain, pool_range_fn fn, void *ctx) {
    if (n <= 0) return;
    if (grain <= 0) {
        const long parts = 4L * pool_size(p);
        grain = (n + parts - 1) / parts;
    }
    range_job j = {fn, ctx, n, grain};
    pool_run(p, (n + grain - 1) / grain, range_task, &j);
}

double pool_finish_time(int n_threads, long n_items, double (*cost)(const void *ctx, long i), const void *ctx) {
    double busy[POOL_FINISH_THREADS_MAX] = {0}, end = 0;
    if (n_threads < 1) n_threads = 1;
    if (n_threads > POOL_FINISH_THREADS_MAX) n_threads = POOL_FINISH_THREADS_MAX;
    for (long i = 0; i < n_items; i++) {
        int t = 0;
        for (int u = 1; u < n_threads; u++)
            if (busy[u] < busy[t]) t = u;
        busy[t] += cost(ctx, i);
    }
    for (int t = 0; t < n_threads; t++) end = busy[t] > end ? busy[t] : end;
    return end;
}
