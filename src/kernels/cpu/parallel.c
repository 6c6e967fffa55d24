#include "kernels/cpu/parallel.h"

#include "base/alloc.h"

#include <pthread.h>
#include <stdlib.h>

#define MAX_THREADS 256

int32_t di_parallel_n_threads(const di_parallel *p) {
    return (p && p->run && p->n_threads > 1) ? p->n_threads : 1;
}

void di_parallel_for(const di_parallel *p, int32_t n_tasks, di_task_fn fn, void *arg) {
    if (n_tasks <= 0) return;
    if (!p || !p->run || n_tasks == 1) {
        for (int32_t t = 0; t < n_tasks; t++) fn(arg, t);
        return;
    }
    p->run(p->pool, n_tasks, fn, arg);
}

/* The simple pool: a generation counter announces each run; thread i (the
 * caller is thread 0) takes tasks i, i + n_threads, ... so no task queue or
 * atomics are needed, and the caller waits until every worker reports. */
typedef struct threads_pool {
    di_parallel iface;
    pthread_mutex_t mu;
    pthread_cond_t wake;  /* workers wait here for a new generation */
    pthread_cond_t done;  /* caller waits here for n_running == 0 */
    uint64_t generation;
    int32_t n_running;
    int quit;
    di_task_fn fn;
    void *arg;
    int32_t n_tasks;
    int32_t n_workers;
    pthread_t *threads;   /* (n_workers) */
} threads_pool;

typedef struct worker_arg {
    threads_pool *pool;
    int32_t index;
} worker_arg;

static void run_share(threads_pool *tp, int32_t index, int32_t stride) {
    for (int32_t t = index; t < tp->n_tasks; t += stride) tp->fn(tp->arg, t);
}

static void *worker_main(void *p) {
    threads_pool *tp = ((worker_arg *)p)->pool;
    int32_t index = ((worker_arg *)p)->index;
    free(p);
    uint64_t seen = 0;
    pthread_mutex_lock(&tp->mu);
    for (;;) {
        while (!tp->quit && tp->generation == seen) pthread_cond_wait(&tp->wake, &tp->mu);
        if (tp->quit) break;
        seen = tp->generation;
        pthread_mutex_unlock(&tp->mu);
        run_share(tp, index, tp->n_workers + 1);
        pthread_mutex_lock(&tp->mu);
        if (--tp->n_running == 0) pthread_cond_signal(&tp->done);
    }
    pthread_mutex_unlock(&tp->mu);
    return NULL;
}

static void pool_run(void *pool, int32_t n_tasks, di_task_fn fn, void *arg) {
    threads_pool *tp = pool;
    pthread_mutex_lock(&tp->mu);
    tp->fn = fn;
    tp->arg = arg;
    tp->n_tasks = n_tasks;
    tp->n_running = tp->n_workers;
    tp->generation++;
    pthread_cond_broadcast(&tp->wake);
    pthread_mutex_unlock(&tp->mu);
    run_share(tp, 0, tp->n_workers + 1);
    pthread_mutex_lock(&tp->mu);
    while (tp->n_running > 0) pthread_cond_wait(&tp->done, &tp->mu);
    pthread_mutex_unlock(&tp->mu);
}

static void stop_workers(threads_pool *tp, int32_t n_started) {
    pthread_mutex_lock(&tp->mu);
    tp->quit = 1;
    pthread_cond_broadcast(&tp->wake);
    pthread_mutex_unlock(&tp->mu);
    for (int32_t i = 0; i < n_started; i++) pthread_join(tp->threads[i], NULL);
}

di_status di_parallel_threads_create(int32_t n_threads, di_parallel **out, di_error *err) {
    *out = NULL;
    if (n_threads < 1 || n_threads > MAX_THREADS)
        return di_error_set(err, DI_ERR_INVALID_ARG, "thread count %d not in [1, %d]",
                            (int)n_threads, MAX_THREADS);
    threads_pool *tp = di_calloc(1, sizeof *tp);
    if (!tp) return di_error_set(err, DI_ERR_NOMEM, "thread pool: out of memory");
    tp->n_workers = n_threads - 1;
    tp->iface.n_threads = n_threads;
    tp->iface.run = pool_run;
    tp->iface.pool = tp;
    pthread_mutex_init(&tp->mu, NULL);
    pthread_cond_init(&tp->wake, NULL);
    pthread_cond_init(&tp->done, NULL);
    tp->threads = di_calloc((size_t)(tp->n_workers + 1), sizeof *tp->threads);
    if (!tp->threads) {
        tp->n_workers = 0;
        di_parallel_threads_free(&tp->iface);
        return di_error_set(err, DI_ERR_NOMEM, "thread pool: out of memory");
    }
    for (int32_t i = 0; i < tp->n_workers; i++) {
        worker_arg *wa = di_calloc(1, sizeof *wa);
        if (wa) {
            wa->pool = tp;
            wa->index = i + 1;
        }
        if (!wa || pthread_create(&tp->threads[i], NULL, worker_main, wa) != 0) {
            free(wa);
            stop_workers(tp, i);
            tp->n_workers = 0; /* already joined */
            di_parallel_threads_free(&tp->iface);
            return di_error_set(err, DI_ERR_INTERNAL, "thread pool: cannot start thread %d", (int)i + 1);
        }
    }
    *out = &tp->iface;
    return DI_OK;
}

void di_parallel_threads_free(di_parallel *p) {
    if (!p) return;
    threads_pool *tp = p->pool;
    stop_workers(tp, tp->n_workers);
    pthread_mutex_destroy(&tp->mu);
    pthread_cond_destroy(&tp->wake);
    pthread_cond_destroy(&tp->done);
    free(tp->threads);
    free(tp);
}
