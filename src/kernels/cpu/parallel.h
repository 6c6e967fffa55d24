/* How kernels fan work out over threads without knowing which pool runs it.
 *
 * run(pool, n_tasks, fn, arg) calls fn(arg, task) exactly once for every task
 * in [0, n_tasks), possibly concurrently, and returns when all are done.
 * Kernels always split into tasks by OUTPUT rows/columns and give each task
 * its own scratch, so results never depend on n_tasks (DESIGN.md section 3).
 *
 * A NULL di_parallel runs the tasks inline on the caller's thread. The engine
 * wraps its thread pool in a di_parallel; di_parallel_threads_create() is a
 * small persistent pool for tests, benchmarks and callers without one. */
#ifndef DI_KERNELS_CPU_PARALLEL_H
#define DI_KERNELS_CPU_PARALLEL_H

#include "base/status.h"

#include <stdint.h>

typedef void (*di_task_fn)(void *arg, int32_t task);

typedef struct di_parallel {
    int32_t n_threads; /* how many tasks kernels split their work into (>= 1) */
    void (*run)(void *pool, int32_t n_tasks, di_task_fn fn, void *arg);
    void *pool;        /* passed to run; not owned by this struct */
} di_parallel;

/* Number of tasks a kernel should split into: p->n_threads, or 1 for NULL. */
int32_t di_parallel_n_threads(const di_parallel *p);
/* Runs fn over [0, n_tasks) through p (inline when p is NULL). */
void di_parallel_for(const di_parallel *p, int32_t n_tasks, di_task_fn fn, void *arg);

/* A persistent pool of n_threads - 1 workers plus the calling thread.
 * Workers sleep on a condition variable between runs. The caller owns *out
 * and frees it with di_parallel_threads_free. n_threads in [1, 256]. */
di_status di_parallel_threads_create(int32_t n_threads, di_parallel **out, di_error *err);
void di_parallel_threads_free(di_parallel *p);

#endif
