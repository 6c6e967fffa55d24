/* A persistent thread pool for kernels: many small dispatches per token, so
 * dispatch must cost microseconds, not a thread start.
 *
 * di_threadpool_run(pool, n_tasks, fn, ctx) calls fn(ctx, task, thread) once
 * for every task in [0, n_tasks); the calling thread works too (it is
 * thread 0; workers are 1..n_threads-1) and the call returns when every task
 * is done. Tasks are handed out dynamically, so WHICH thread runs a task
 * varies from run to run: a kernel that wants batch-invariant results must
 * make each task's output independent of the thread, e.g. one task per
 * contiguous block of output rows from di_threadpool_split, never a split of
 * a reduction. `thread` is for per-thread scratch only.
 *
 * Waiting workers spin briefly on an atomic (back-to-back dispatches in a
 * forward pass find them awake) and then sleep on a condition variable, so
 * an idle engine costs no CPU.
 *
 * One run at a time per pool: a run issued while the pool is busy (from a
 * task, or from another thread) executes inline in its caller, serially,
 * rather than deadlocking. A NULL pool runs everything inline. */
#ifndef DI_BASE_THREADPOOL_H
#define DI_BASE_THREADPOOL_H

#include "deepinfer.h"

#include <stdint.h>

/* More threads than this is a configuration mistake, not a machine. */
#define DI_THREADPOOL_MAX_THREADS 1024

typedef struct di_threadpool di_threadpool;

/* One task: `task` in [0, n_tasks), `thread` in [0, n_threads). */
typedef void (*di_threadpool_task_fn)(void *ctx, int64_t task, int thread);

/* Starts n_threads - 1 workers (the caller of run is the n-th thread).
 * n_threads == 0 means one per online CPU. */
di_status di_threadpool_create(int n_threads, di_threadpool **out, di_error *err);
/* Stops and joins the workers. NULL is a no-op. Must not race with run. */
void di_threadpool_free(di_threadpool *pool);
/* Threads that run tasks, caller included; 1 for a NULL pool. */
int di_threadpool_n_threads(const di_threadpool *pool);

/* Runs fn for every task in [0, n_tasks) and returns when all are done.
 * n_tasks <= 0 does nothing. */
void di_threadpool_run(di_threadpool *pool, int64_t n_tasks, di_threadpool_task_fn fn,
                       void *ctx);

/* Side work: tasks that idle workers take while the caller keeps the pool
 * busy with runs (a forward's kernels), e.g. grammar masks that do not need
 * the forward's result. side_begin posts n_tasks of fn and wakes sleeping
 * workers; from then on a worker that finds no run task to claim claims a
 * side task instead, one at a time, and joins a run issued meanwhile when
 * that task ends (runs wait for their own tasks only, so nothing waits for
 * it). The caller never takes side tasks inside a run: it is the forward's
 * critical path. side_end runs on the caller whatever is still unclaimed,
 * waits until every side task is done and closes the queue: each task has
 * run exactly once when it returns. One side queue at a time, begun and
 * ended by the thread that issues the runs; fn must not use the pool.
 * n_tasks <= 0 posts nothing. With one thread side_end runs them all; a
 * NULL pool runs them inside side_begin. Which thread runs a side task
 * varies, so fn's result must not depend on it. */
void di_threadpool_side_begin(di_threadpool *pool, int64_t n_tasks, di_threadpool_task_fn fn, void *ctx);
void di_threadpool_side_end(di_threadpool *pool);
/* Side tasks run by workers (not by side_end's caller) since the pool was
 * created: how much side work found idle workers. */
int64_t di_threadpool_side_by_workers(const di_threadpool *pool);

/* Deterministic static partition: part `part` of n_parts gets [*begin, *end)
 * of [0, n), contiguous, in order, sizes differing by at most one. Depends
 * only on (n, n_parts, part). */
void di_threadpool_split(int64_t n, int n_parts, int part, int64_t *begin, int64_t *end);

/* fn(user, r) for every r in [0, n): 4 contiguous runs per pool thread
 * (fewer when n is small), the caller's thread taking part. For work
 * whose rows do not depend on each other, so the split never changes a
 * result. pool NULL: all on the caller's thread. */
typedef void (*di_threadpool_row_fn)(void *user, int64_t row);
void di_threadpool_rows(di_threadpool *pool, int64_t n, di_threadpool_row_fn fn, void *user);
/* The same in units of `align` items (SIMD row blocks, quant blocks): every
 * boundary except n itself is a multiple of align. */
void di_threadpool_split_aligned(int64_t n, int64_t align, int n_parts, int part,
                                 int64_t *begin, int64_t *end);

#endif
