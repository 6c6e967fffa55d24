/* Thread pool: one 64-bit atomic word holds (generation, n_tasks, next
 * task). Workers spin on it for a while, then sleep on a condition
 * variable. Everyone -- caller included -- claims a task with a CAS that
 * succeeds only while the word still names the same job and a task is left,
 * and the caller waits for the tasks to be DONE, not for every worker to
 * check in: on an oversubscribed machine a descheduled worker then costs
 * nothing (waiting for it made 2 threads slower than 1 under load). A
 * successful claim proves the job is current and unfinished, so its fields
 * (fn, ctx) cannot change while the task runs: the caller rewrites them
 * only after every task of the previous job is done. The side queue
 * (di_threadpool_side_begin) is a second word of the same kind that only
 * waiting workers claim from, and side_end's caller when it drains it. */
#include "base/threadpool.h"

#include "base/alloc.h"
#include "base/status.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Pause-loop iterations before a waiting worker sleeps: on the order of
 * 100 us, longer than the gap between two kernels of one forward pass,
 * far shorter than the gap between requests on an idle engine. */
#define SPIN_ITERS (1 << 14)
/* After this many pure pause iterations a spinning worker also yields now
 * and then, so on an oversubscribed machine it does not hold a core the
 * caller (or the worker with the last task) needs. */
#define SPIN_PURE_ITERS (1 << 10)
#define SPIN_YIELD_EVERY 256
/* Iterations the caller spins on stragglers before yielding its CPU (a
 * worker may have been descheduled on an oversubscribed machine). */
#define CALLER_SPIN_ITERS (1 << 12)
/* Keeps the hot atomics on separate cache lines. */
#define CACHE_LINE 64
/* The state word: 20 bits of generation, 22 of task count, 22 of next
 * task. Runs with more tasks go in rounds of at most ROUND_MAX. */
#define FIELD_BITS 22
#define NT_SHIFT FIELD_BITS
#define GEN_SHIFT (2 * FIELD_BITS)
#define FIELD_MASK ((1ull << FIELD_BITS) - 1)
#define ROUND_MAX ((int64_t)FIELD_MASK)
static inline unsigned st_gen(unsigned long long s) { return (unsigned)(s >> GEN_SHIFT); }

struct worker {
    di_threadpool *pool;
    int thread;
};

struct di_threadpool {
    int n_threads;
    pthread_t *threads;       /* (n_threads - 1) */
    struct worker *workers;   /* (n_threads - 1) */
    int n_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;

    /* The current job; written by the caller before `generation` moves. */
    di_threadpool_task_fn fn;
    void *ctx;
    int64_t n_tasks;

    int64_t base;             /* task index of this round's first task */
    /* (generation << GEN_SHIFT) | (n_tasks << NT_SHIFT) | next */
    alignas(CACHE_LINE) atomic_ullong state;
    atomic_int n_sleeping;
    atomic_bool stop;
    alignas(CACHE_LINE) atomic_llong done; /* tasks finished in this round */
    alignas(CACHE_LINE) atomic_bool busy;

    /* Side queue (di_threadpool_side_begin): fn and ctx are written before
     * side_state moves, as for runs. side_state = (n_tasks << 32) | next;
     * 0 = no queue. A successful claim CAS proves the queue is current. */
    di_threadpool_task_fn side_fn;
    void *side_ctx;
    alignas(CACHE_LINE) atomic_ullong side_state;
    alignas(CACHE_LINE) atomic_llong side_done; /* side tasks finished */
    atomic_llong side_by_workers;               /* statistics */
};

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
}

/* Claims and runs tasks of the job in *s until none is left or the word
 * moves to another job. */
static void run_tasks(di_threadpool *pool, int thread, unsigned long long s) {
    for (;;) {
        unsigned long long nt = (s >> NT_SHIFT) & FIELD_MASK, next = s & FIELD_MASK;
        if (next >= nt) return;
        /* acquire on success: the job fields written before the publish */
        if (!atomic_compare_exchange_weak_explicit(&pool->state, &s, s + 1, memory_order_acquire,
                                                   memory_order_acquire))
            continue; /* s reloaded: retry (another job ends the loop) */
        pool->fn(pool->ctx, pool->base + (int64_t)next, thread);
        /* release: the caller sees this task's writes */
        atomic_fetch_add_explicit(&pool->done, 1, memory_order_release);
        s = atomic_load_explicit(&pool->state, memory_order_acquire);
    }
}

#define SIDE_NEXT_MASK 0xFFFFFFFFull

static inline bool side_left(unsigned long long s) { return (s & SIDE_NEXT_MASK) < (s >> 32); }

/* Claims one side task and runs it; false when none is left. */
static bool side_run_one(di_threadpool *pool, int thread) {
    unsigned long long s = atomic_load_explicit(&pool->side_state, memory_order_acquire);
    do {
        if (!side_left(s)) return false;
        /* acquire on success: side_fn and side_ctx written before the publish */
    } while (!atomic_compare_exchange_weak_explicit(&pool->side_state, &s, s + 1, memory_order_acquire,
                                                    memory_order_acquire));
    pool->side_fn(pool->side_ctx, (int64_t)(s & SIDE_NEXT_MASK), thread);
    if (thread) atomic_fetch_add_explicit(&pool->side_by_workers, 1, memory_order_relaxed);
    /* release: side_end's caller sees this task's writes */
    atomic_fetch_add_explicit(&pool->side_done, 1, memory_order_release);
    return true;
}

/* Returns the new state once its generation differs from seen, or a state
 * of generation seen when the pool is stopping. While no run is due, side
 * tasks are taken one at a time, the state re-checked between them. */
static unsigned long long wait_for_job(di_threadpool *pool, unsigned seen, int thread) {
    for (;;) {
        for (int i = 0; i < SPIN_ITERS; i++) {
            unsigned long long s = atomic_load_explicit(&pool->state, memory_order_acquire);
            if (st_gen(s) != seen) return s;
            if (atomic_load_explicit(&pool->stop, memory_order_relaxed)) return s;
            if (side_run_one(pool, thread)) {
                i = 0; /* awake and busy: spin afresh before any sleep */
                continue;
            }
            if (i >= SPIN_PURE_ITERS && i % SPIN_YIELD_EVERY == 0) sched_yield();
            else cpu_relax();
        }
        /* Announce the sleep BEFORE re-checking the state (both seq_cst):
         * either run() or side_begin() sees n_sleeping > 0 and broadcasts
         * under the mutex, or this re-check sees the new generation or
         * side queue. No lost wake-up. */
        pthread_mutex_lock(&pool->mu);
        atomic_fetch_add(&pool->n_sleeping, 1);
        unsigned long long s;
        while (st_gen(s = atomic_load(&pool->state)) == seen && !atomic_load(&pool->stop) &&
               !side_left(atomic_load(&pool->side_state)))
            pthread_cond_wait(&pool->cv, &pool->mu);
        atomic_fetch_sub(&pool->n_sleeping, 1);
        pthread_mutex_unlock(&pool->mu);
        if (st_gen(s) != seen || atomic_load(&pool->stop)) return s;
        /* woken for side work: back to the spin loop, which takes it */
    }
}

static void *worker_main(void *arg) {
    struct worker *w = arg;
    di_threadpool *pool = w->pool;
    unsigned seen = 0;
    for (;;) {
        unsigned long long s = wait_for_job(pool, seen, w->thread);
        if (atomic_load_explicit(&pool->stop, memory_order_relaxed)) return NULL;
        seen = st_gen(s);
        run_tasks(pool, w->thread, s);
    }
}

static void stop_workers(di_threadpool *pool) {
    atomic_store(&pool->stop, true);
    pthread_mutex_lock(&pool->mu);
    pthread_cond_broadcast(&pool->cv);
    pthread_mutex_unlock(&pool->mu);
    for (int i = 0; i < pool->n_started; i++) pthread_join(pool->threads[i], NULL);
    pool->n_started = 0;
}

di_status di_threadpool_create(int n_threads, di_threadpool **out, di_error *err) {
    *out = NULL;
    if (n_threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = n < 1 ? 1 : n > DI_THREADPOOL_MAX_THREADS ? DI_THREADPOOL_MAX_THREADS : (int)n;
    }
    if (n_threads < 1 || n_threads > DI_THREADPOOL_MAX_THREADS)
        return di_error_set(err, DI_ERR_RANGE, "thread pool: %d threads, want 1..%d",
                            n_threads, DI_THREADPOOL_MAX_THREADS);
    di_threadpool *pool = aligned_alloc(CACHE_LINE, sizeof *pool);
    if (!pool) return di_error_set(err, DI_ERR_NOMEM, "thread pool: out of memory");
    memset(pool, 0, sizeof *pool);
    pool->n_threads = n_threads;
    atomic_init(&pool->state, 0);
    atomic_init(&pool->n_sleeping, 0);
    atomic_init(&pool->stop, false);
    atomic_init(&pool->done, 0);
    atomic_init(&pool->busy, false);
    atomic_init(&pool->side_state, 0);
    atomic_init(&pool->side_done, 0);
    atomic_init(&pool->side_by_workers, 0);
    pthread_mutex_init(&pool->mu, NULL);
    pthread_cond_init(&pool->cv, NULL);
    int n_workers = n_threads - 1;
    if (n_workers > 0) {
        pool->threads = di_calloc((size_t)n_workers, sizeof *pool->threads);
        pool->workers = di_calloc((size_t)n_workers, sizeof *pool->workers);
        if (!pool->threads || !pool->workers) {
            di_threadpool_free(pool);
            return di_error_set(err, DI_ERR_NOMEM, "thread pool: out of memory");
        }
    }
    for (int i = 0; i < n_workers; i++) {
        pool->workers[i] = (struct worker){.pool = pool, .thread = i + 1};
        int rc = pthread_create(&pool->threads[i], NULL, worker_main, &pool->workers[i]);
        if (rc) {
            di_threadpool_free(pool);
            return di_error_set(err, DI_ERR_NOMEM, "thread pool: cannot start thread %d of %d: %s",
                                i + 1, n_threads, strerror(rc));
        }
        pool->n_started++;
    }
    *out = pool;
    return DI_OK;
}

void di_threadpool_free(di_threadpool *pool) {
    if (!pool) return;
    stop_workers(pool);
    pthread_cond_destroy(&pool->cv);
    pthread_mutex_destroy(&pool->mu);
    free(pool->threads);
    free(pool->workers);
    free(pool);
}

int di_threadpool_n_threads(const di_threadpool *pool) { return pool ? pool->n_threads : 1; }

static void run_inline(int64_t n_tasks, di_threadpool_task_fn fn, void *ctx) {
    for (int64_t t = 0; t < n_tasks; t++) fn(ctx, t, 0);
}

void di_threadpool_run(di_threadpool *pool, int64_t n_tasks, di_threadpool_task_fn fn,
                       void *ctx) {
    if (n_tasks <= 0) return;
    /* One task, or one thread: waking workers would only add latency. */
    if (!pool || pool->n_threads == 1 || n_tasks == 1) {
        run_inline(n_tasks, fn, ctx);
        return;
    }
    if (atomic_exchange_explicit(&pool->busy, true, memory_order_acquire)) {
        run_inline(n_tasks, fn, ctx); /* nested or concurrent run */
        return;
    }
    pool->fn = fn;
    pool->ctx = ctx;
    for (int64_t base = 0; base < n_tasks; base += ROUND_MAX) {
        int64_t n = n_tasks - base < ROUND_MAX ? n_tasks - base : ROUND_MAX;
        pool->base = base;
        atomic_store_explicit(&pool->done, 0, memory_order_relaxed);
        unsigned long long old = atomic_load_explicit(&pool->state, memory_order_relaxed);
        unsigned gen = (st_gen(old) + 1) & ((1u << (64 - GEN_SHIFT)) - 1);
        unsigned long long s = ((unsigned long long)gen << GEN_SHIFT) | ((unsigned long long)n << NT_SHIFT);
        /* seq_cst: publishes the job, and orders against the n_sleeping
         * load below (see wait_for_job). */
        atomic_store(&pool->state, s);
        if (atomic_load(&pool->n_sleeping) > 0) {
            pthread_mutex_lock(&pool->mu);
            pthread_cond_broadcast(&pool->cv);
            pthread_mutex_unlock(&pool->mu);
        }
        run_tasks(pool, 0, s);
        /* only tasks another thread claimed and has not finished remain */
        for (int i = 0; atomic_load_explicit(&pool->done, memory_order_acquire) < n; i++) {
            if (i < CALLER_SPIN_ITERS) cpu_relax();
            else sched_yield();
        }
    }
    atomic_store_explicit(&pool->busy, false, memory_order_release);
}

void di_threadpool_side_begin(di_threadpool *pool, int64_t n_tasks, di_threadpool_task_fn fn, void *ctx) {
    if (n_tasks <= 0) return;
    /* no pool, or more tasks than the state word counts: run them now */
    if (!pool || n_tasks > (int64_t)INT32_MAX) {
        run_inline(n_tasks, fn, ctx);
        return;
    }
    pool->side_fn = fn;
    pool->side_ctx = ctx;
    atomic_store_explicit(&pool->side_done, 0, memory_order_relaxed);
    /* seq_cst: publishes the queue, and orders against the n_sleeping load
     * below (see wait_for_job) */
    atomic_store(&pool->side_state, (unsigned long long)n_tasks << 32);
    if (atomic_load(&pool->n_sleeping) > 0) {
        pthread_mutex_lock(&pool->mu);
        pthread_cond_broadcast(&pool->cv);
        pthread_mutex_unlock(&pool->mu);
    }
}

void di_threadpool_side_end(di_threadpool *pool) {
    if (!pool) return;
    unsigned long long s = atomic_load_explicit(&pool->side_state, memory_order_relaxed);
    long long n = (long long)(s >> 32);
    if (n == 0) return;
    while (side_run_one(pool, 0)) {
    }
    /* every task is claimed: wait for those workers still run */
    for (int i = 0; atomic_load_explicit(&pool->side_done, memory_order_acquire) < n; i++) {
        if (i < CALLER_SPIN_ITERS) cpu_relax();
        else sched_yield();
    }
    atomic_store_explicit(&pool->side_state, 0, memory_order_release);
}

int64_t di_threadpool_side_by_workers(const di_threadpool *pool) {
    return pool ? atomic_load_explicit(&pool->side_by_workers, memory_order_relaxed) : 0;
}

void di_threadpool_split(int64_t n, int n_parts, int part, int64_t *begin, int64_t *end) {
    if (n <= 0 || n_parts < 1 || part < 0 || part >= n_parts) {
        *begin = *end = n > 0 ? n : 0;
        return;
    }
    int64_t base = n / n_parts, rem = n % n_parts;
    *begin = part * base + (part < rem ? part : rem);
    *end = *begin + base + (part < rem ? 1 : 0);
}

void di_threadpool_split_aligned(int64_t n, int64_t align, int n_parts, int part,
                                 int64_t *begin, int64_t *end) {
    if (align < 1) align = 1;
    int64_t units = n > 0 ? (n + align - 1) / align : 0;
    int64_t ub, ue;
    di_threadpool_split(units, n_parts, part, &ub, &ue);
    *begin = ub * align < n ? ub * align : (n > 0 ? n : 0);
    *end = ue * align < n ? ue * align : (n > 0 ? n : 0);
}

typedef struct rows_job {
    di_threadpool_row_fn fn;
    void *user;
    int64_t n;
    int n_tasks;
} rows_job;

static void rows_task(void *arg, int64_t task, int thread) {
    (void)thread;
    const rows_job *j = arg;
    int64_t r0, r1;
    di_threadpool_split(j->n, j->n_tasks, (int)task, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) j->fn(j->user, r);
}

void di_threadpool_rows(di_threadpool *pool, int64_t n, di_threadpool_row_fn fn, void *user) {
    if (n <= 0) return;
    int64_t t = (int64_t)di_threadpool_n_threads(pool) * 4;
    rows_job j = {fn, user, n, (int)(t < n ? t : n)};
    di_threadpool_run(pool, j.n_tasks, rows_task, &j);
}
