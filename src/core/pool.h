/* pool.h — the thread pool an encoder context owns (and that model loading and preprocessing borrow for one
 * call): persistent worker threads that run the tasks of one parallel loop at a time.
 *
 * A pool of n threads is the calling thread plus n - 1 workers. pool_run(p, n_tasks, fn, ctx) calls
 * fn(ctx, task, thread) once for every task in [0, n_tasks), handing tasks out one at a time, in increasing order,
 * to whichever thread asks first (the caller takes part as thread 0), and returns when every task has finished.
 * `thread` is in [0, pool_size(p)) and names the per-thread scratch a task may use; no two tasks run on the same
 * `thread` at once. A task's result must not depend on which thread runs it: then, as everywhere in qvl, results
 * do not depend on the thread count.
 *
 * Between loops the workers spin for a short while (the next loop usually follows within microseconds), then
 * sleep on a condition variable. Not reentrant: a task must not call pool_run, and two threads must not call
 * pool_run on one pool at the same time (a pool belongs to one context, a context to one thread at a time).
 * A NULL pool is a valid pool of one thread (tasks run inline). */
#ifndef QVL_CORE_POOL_H
#define QVL_CORE_POOL_H

#include "qvl.h"

typedef struct thread_pool thread_pool;

typedef void (*pool_task_fn)(void *ctx, long task, int thread);

/* Creates a pool of n_threads threads in all (n_threads <= 0: one per CPU this process may use; at most
 * QVL_MAX_THREADS). When the system refuses to start some threads, the pool keeps the ones it has (pool_size
 * tells); only an allocation failure is an error. *out is NULL on failure. */
qvl_status pool_create(thread_pool **out, int n_threads, qvl_error *err);
/* Stops and joins the workers. NULL is a no-op. */
void pool_destroy(thread_pool *p);
/* Threads in the pool, the caller included (1 for NULL). */
int pool_size(const thread_pool *p);
/* Runs fn(ctx, t, thread) for every t in [0, n_tasks) and returns when all have run (see the top of this file). */
void pool_run(thread_pool *p, long n_tasks, pool_task_fn fn, void *ctx);
/* A loop over [0, n) in ranges: fn(ctx, begin, end, thread) for consecutive ranges of `grain` items (the last may
 * be shorter), through pool_run. grain <= 0 picks about four ranges per thread. */
typedef void (*pool_range_fn)(void *ctx, long begin, long end, int thread);
void pool_for(thread_pool *p, long n, long grain, pool_range_fn fn, void *ctx);
/* How long n_threads threads take over n_items items handed out in order, each to the thread free first (ties:
 * the lowest), as pool_run hands them out, item i taking cost(ctx, i): the busiest thread's total. For planning a
 * split of work (the GEMMs'); O(n_items x n_threads), n_threads at most POOL_FINISH_THREADS_MAX. */
enum { POOL_FINISH_THREADS_MAX = 64 };
double pool_finish_time(int n_threads, long n_items, double (*cost)(const void *ctx, long i), const void *ctx);
/* The CPUs this process may run on (at least 1, at most QVL_MAX_THREADS). */
int pool_cpu_count(void);

#endif
