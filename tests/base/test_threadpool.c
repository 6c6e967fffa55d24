/* base/threadpool: every task exactly once, the caller participates, no
 * lost wake-ups across sleeps, side work beside runs, deterministic
 * partitions, and a printed
 * (not asserted) dispatch overhead. */
#include "test_util.h"

#include "base/threadpool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static di_threadpool *make_pool(int n_threads) {
    di_threadpool *pool = NULL;
    di_error err;
    di_status st = di_threadpool_create(n_threads, &pool, &err);
    if (st) fail_msg("create(%d): %s", n_threads, err.msg);
    return pool;
}

struct count_ctx {
    atomic_int *hits;       /* (n_tasks) */
    atomic_int by_thread[8];
    int n_threads;
    atomic_int bad_thread;
    atomic_uint sink; /* keeps slow_task's busy loop from being optimized out */
};

static void count_task(void *arg, int64_t task, int thread) {
    struct count_ctx *c = arg;
    atomic_fetch_add(&c->hits[task], 1);
    if (thread < 0 || thread >= c->n_threads) atomic_fetch_add(&c->bad_thread, 1);
    else atomic_fetch_add(&c->by_thread[thread], 1);
}

static void every_task_runs_exactly_once_over_many_small_dispatches(void **state) {
    (void)state;
    enum { MAX_TASKS = 64, ROUNDS = 4000 };
    for (int n_threads = 1; n_threads <= 4; n_threads++) {
        di_threadpool *pool = make_pool(n_threads);
        assert_int_equal(di_threadpool_n_threads(pool), n_threads);
        atomic_int hits[MAX_TASKS];
        struct count_ctx c = {.hits = hits, .n_threads = n_threads};
        for (int r = 0; r < ROUNDS; r++) {
            int n = 1 + (r * 7) % MAX_TASKS; /* 1..64, cycling */
            for (int i = 0; i < MAX_TASKS; i++) atomic_init(&hits[i], 0);
            di_threadpool_run(pool, n, count_task, &c);
            for (int i = 0; i < MAX_TASKS; i++)
                if (atomic_load(&hits[i]) != (i < n))
                    fail_msg("threads %d round %d task %d ran %d times", n_threads, r, i,
                             atomic_load(&hits[i]));
        }
        assert_int_equal(atomic_load(&c.bad_thread), 0);
        di_threadpool_free(pool);
    }
}

/* Tasks that take a moment, so every thread gets some over many runs. */
static void slow_task(void *arg, int64_t task, int thread) {
    struct count_ctx *c = arg;
    volatile unsigned x = 0;
    for (int i = 0; i < 2000; i++) x += (unsigned)i;
    atomic_fetch_add(&c->sink, x);
    count_task(c, task, thread);
}

static void caller_and_all_workers_take_part(void **state) {
    (void)state;
    enum { N = 256 };
    di_threadpool *pool = make_pool(3);
    atomic_int hits[N];
    struct count_ctx c = {.hits = hits, .n_threads = 3};
    for (int r = 0; r < 50; r++) {
        for (int i = 0; i < N; i++) atomic_init(&hits[i], 0);
        di_threadpool_run(pool, N, slow_task, &c);
    }
    assert_true(atomic_load(&c.by_thread[0]) > 0); /* the caller worked */
    assert_int_equal(atomic_load(&c.by_thread[0]) + atomic_load(&c.by_thread[1]) +
                         atomic_load(&c.by_thread[2]),
                     50 * N);
    di_threadpool_free(pool);
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Workers that went to sleep (spin exhausted) must be woken by the next
 * run: a lost wake-up would hang here (ctest's timeout catches it). */
static void sleeping_workers_wake_for_the_next_run(void **state) {
    (void)state;
    enum { N = 32 };
    di_threadpool *pool = make_pool(4);
    atomic_int hits[N];
    struct count_ctx c = {.hits = hits, .n_threads = 4};
    for (int r = 0; r < 20; r++) {
        sleep_ms(r % 4 == 0 ? 20 : 1);
        for (int i = 0; i < N; i++) atomic_init(&hits[i], 0);
        di_threadpool_run(pool, N, slow_task, &c);
        for (int i = 0; i < N; i++) assert_int_equal(atomic_load(&hits[i]), 1);
    }
    di_threadpool_free(pool);
}

struct nested_ctx {
    di_threadpool *pool;
    atomic_int inner_hits;
};

static void inner_task(void *arg, int64_t task, int thread) {
    (void)task;
    (void)thread;
    atomic_fetch_add(&((struct nested_ctx *)arg)->inner_hits, 1);
}

static void outer_task(void *arg, int64_t task, int thread) {
    struct nested_ctx *c = arg;
    (void)task;
    (void)thread;
    di_threadpool_run(c->pool, 5, inner_task, c); /* runs inline */
}

static void nested_run_executes_inline_without_deadlock(void **state) {
    (void)state;
    struct nested_ctx c = {.pool = make_pool(2)};
    atomic_init(&c.inner_hits, 0);
    di_threadpool_run(c.pool, 8, outer_task, &c);
    assert_int_equal(atomic_load(&c.inner_hits), 40);
    di_threadpool_free(c.pool);
}

static void record_thread(void *arg, int64_t task, int thread) {
    ((int *)arg)[task] = thread;
}

static void null_pool_and_trivial_runs_execute_on_the_caller(void **state) {
    (void)state;
    int thread[4] = {-1, -1, -1, -1};
    di_threadpool_run(NULL, 4, record_thread, thread);
    for (int i = 0; i < 4; i++) assert_int_equal(thread[i], 0);
    assert_int_equal(di_threadpool_n_threads(NULL), 1);
    di_threadpool *pool = make_pool(2);
    di_threadpool_run(pool, 0, record_thread, NULL);  /* nothing to do */
    di_threadpool_run(pool, -3, record_thread, NULL);
    thread[0] = -1;
    di_threadpool_run(pool, 1, record_thread, thread);
    assert_int_equal(thread[0], 0);
    di_threadpool_free(pool);
    di_threadpool_free(NULL);
}

static void create_rejects_bad_thread_counts(void **state) {
    (void)state;
    di_threadpool *pool = (di_threadpool *)&pool;
    di_error err;
    assert_int_equal(di_threadpool_create(-1, &pool, &err), DI_ERR_RANGE);
    assert_null(pool);
    assert_int_equal(di_threadpool_create(DI_THREADPOOL_MAX_THREADS + 1, &pool, &err),
                     DI_ERR_RANGE);
    assert_non_null(strstr(err.msg, "threads"));
    assert_int_equal(di_threadpool_create(0, &pool, &err), DI_OK); /* one per CPU */
    assert_true(di_threadpool_n_threads(pool) >= 1);
    di_threadpool_free(pool);
}

static void split_covers_range_contiguously_and_evenly(void **state) {
    (void)state;
    for (int64_t n = 0; n < 200; n += (n < 20 ? 1 : 13)) {
        for (int parts = 1; parts <= 9; parts++) {
            int64_t expect_begin = 0, min_size = n, max_size = 0;
            for (int p = 0; p < parts; p++) {
                int64_t b, e;
                di_threadpool_split(n, parts, p, &b, &e);
                assert_int_equal(b, expect_begin);
                assert_true(e >= b);
                if (e - b < min_size) min_size = e - b;
                if (e - b > max_size) max_size = e - b;
                expect_begin = e;
            }
            assert_int_equal(expect_begin, n);
            assert_true(max_size - min_size <= 1);
            for (int64_t align = 1; align <= 16; align *= 4) {
                int64_t at = 0;
                for (int p = 0; p < parts; p++) {
                    int64_t b, e;
                    di_threadpool_split_aligned(n, align, parts, p, &b, &e);
                    assert_int_equal(b, at);
                    assert_true(e >= b);
                    if (e != n) assert_int_equal(e % align, 0);
                    at = e;
                }
                assert_int_equal(at, n);
            }
        }
    }
    /* Out-of-range parts get an empty range, never garbage. */
    int64_t b, e;
    di_threadpool_split(10, 2, 5, &b, &e);
    assert_int_equal(b, e);
}

/* The property kernels rely on: split over output rows, and the result is
 * bit-identical for any thread count. Rows are float sums in a fixed order
 * within a row; only the assignment of rows to threads varies. */
enum { ROWS = 97, COLS = 1000 };

struct rows_ctx {
    const float *x; /* (ROWS, COLS) */
    float *y;       /* (ROWS) */
    int n_parts;
};

static void row_sum_task(void *arg, int64_t task, int thread) {
    struct rows_ctx *c = arg;
    (void)thread;
    int64_t b, e;
    di_threadpool_split_aligned(ROWS, 4, c->n_parts, (int)task, &b, &e);
    for (int64_t r = b; r < e; r++) {
        float acc = 0.0f;
        for (int k = 0; k < COLS; k++) acc += c->x[r * COLS + k];
        c->y[r] = acc;
    }
}

static void row_split_results_are_identical_for_any_thread_count(void **state) {
    (void)state;
    float *x = malloc(sizeof(float) * ROWS * COLS);
    float ref[ROWS], y[ROWS];
    unsigned v = 12345;
    for (int i = 0; i < ROWS * COLS; i++) {
        v = v * 1103515245u + 12345u;
        x[i] = (float)(v >> 8) / 16777216.0f - 0.5f;
    }
    struct rows_ctx c = {.x = x, .y = ref, .n_parts = 1};
    di_threadpool_run(NULL, 1, row_sum_task, &c);
    for (int n_threads = 1; n_threads <= 4; n_threads++) {
        di_threadpool *pool = make_pool(n_threads);
        for (int parts = 1; parts <= 7; parts += 3) {
            memset(y, 0, sizeof y);
            c.y = y;
            c.n_parts = parts * n_threads;
            di_threadpool_run(pool, c.n_parts, row_sum_task, &c);
            assert_memory_equal(y, ref, sizeof y);
        }
        di_threadpool_free(pool);
    }
    free(x);
}

/* Side tasks beside runs: each side task exactly once by side_end, the
 * runs in between unharmed, for every thread count. */
static void side_tasks_run_exactly_once_beside_runs(void **state) {
    (void)state;
    enum { MAX_SIDE = 40, MAX_TASKS = 24, ROUNDS = 600 };
    for (int n_threads = 1; n_threads <= 4; n_threads++) {
        di_threadpool *pool = make_pool(n_threads);
        atomic_int side_hits[MAX_SIDE], hits[MAX_TASKS];
        struct count_ctx sc = {.hits = side_hits, .n_threads = n_threads};
        struct count_ctx c = {.hits = hits, .n_threads = n_threads};
        for (int r = 0; r < ROUNDS; r++) {
            int n_side = r % MAX_SIDE; /* 0 too: posts nothing */
            for (int i = 0; i < MAX_SIDE; i++) atomic_init(&side_hits[i], 0);
            di_threadpool_side_begin(pool, n_side, r % 2 ? slow_task : count_task, &sc);
            for (int k = 0; k < r % 4; k++) {
                int n = 1 + (r * 5 + k) % MAX_TASKS;
                for (int i = 0; i < MAX_TASKS; i++) atomic_init(&hits[i], 0);
                di_threadpool_run(pool, n, slow_task, &c);
                for (int i = 0; i < MAX_TASKS; i++)
                    if (atomic_load(&hits[i]) != (i < n))
                        fail_msg("threads %d round %d run task %d ran %d times", n_threads, r, i,
                                 atomic_load(&hits[i]));
            }
            di_threadpool_side_end(pool);
            for (int i = 0; i < MAX_SIDE; i++)
                if (atomic_load(&side_hits[i]) != (i < n_side))
                    fail_msg("threads %d round %d side task %d ran %d times", n_threads, r, i,
                             atomic_load(&side_hits[i]));
        }
        assert_int_equal(atomic_load(&sc.bad_thread), 0);
        assert_int_equal(atomic_load(&c.bad_thread), 0);
        /* one thread: nobody but side_end's caller */
        if (n_threads == 1) assert_int_equal(di_threadpool_side_by_workers(pool), 0);
        di_threadpool_free(pool);
    }
}

/* Workers asleep (spin exhausted) wake for side work alone, with no run:
 * a lost wake-up leaves every task to side_end, and this waits in vain. */
static void sleeping_workers_wake_for_side_work(void **state) {
    (void)state;
    enum { N = 8 };
    di_threadpool *pool = make_pool(2);
    atomic_int hits[N];
    struct count_ctx c = {.hits = hits, .n_threads = 2};
    for (int r = 0; r < 5; r++) {
        sleep_ms(20);
        for (int i = 0; i < N; i++) atomic_init(&hits[i], 0);
        int64_t before = di_threadpool_side_by_workers(pool);
        di_threadpool_side_begin(pool, N, slow_task, &c);
        /* up to 20 s: a loaded machine may not schedule the worker soon */
        for (int t = 0; t < 20000 && di_threadpool_side_by_workers(pool) == before; t++) sleep_ms(1);
        di_threadpool_side_end(pool);
        assert_true(di_threadpool_side_by_workers(pool) > before);
        for (int i = 0; i < N; i++) assert_int_equal(atomic_load(&hits[i]), 1);
    }
    di_threadpool_free(pool);
}

static void side_work_without_a_pool_runs_on_the_caller(void **state) {
    (void)state;
    int thread[4] = {-1, -1, -1, -1};
    di_threadpool_side_begin(NULL, 4, record_thread, thread); /* runs now */
    for (int i = 0; i < 4; i++) assert_int_equal(thread[i], 0);
    di_threadpool_side_end(NULL);
    assert_int_equal(di_threadpool_side_by_workers(NULL), 0);
    di_threadpool *pool = make_pool(2);
    di_threadpool_side_end(pool); /* nothing begun */
    di_threadpool_side_begin(pool, 0, record_thread, NULL);
    di_threadpool_side_end(pool);
    di_threadpool_free(pool);
}

static void empty_task(void *arg, int64_t task, int thread) {
    (void)arg;
    (void)task;
    (void)thread;
}

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

/* Not a test of speed (shared CPUs make times noisy): prints the median of
 * several batches so a human or a bench log can track it. */
static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void dispatch_overhead_is_reported(void **state) {
    (void)state;
    enum { BATCHES = 7, PER_BATCH = 500 };
    for (int n_threads = 2; n_threads <= 3; n_threads++) {
        di_threadpool *pool = make_pool(n_threads);
        double per[BATCHES];
        for (int b = 0; b < BATCHES; b++) {
            double t0 = now_ns();
            for (int i = 0; i < PER_BATCH; i++)
                di_threadpool_run(pool, n_threads, empty_task, NULL);
            per[b] = (now_ns() - t0) / PER_BATCH;
        }
        qsort(per, BATCHES, sizeof per[0], cmp_double);
        /* Wake-up from sleep: the first run after an idle pause. */
        double wake[5];
        for (int i = 0; i < 5; i++) {
            sleep_ms(5);
            double t0 = now_ns();
            di_threadpool_run(pool, n_threads, empty_task, NULL);
            wake[i] = now_ns() - t0;
        }
        qsort(wake, 5, sizeof wake[0], cmp_double);
        printf("threadpool: %d threads: back-to-back dispatch median %.0f ns "
               "(min %.0f, max %.0f); after 5 ms idle %.0f ns (median of 5)\n",
               n_threads, per[BATCHES / 2], per[0], per[BATCHES - 1], wake[2]);
        di_threadpool_free(pool);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_task_runs_exactly_once_over_many_small_dispatches),
        cmocka_unit_test(caller_and_all_workers_take_part),
        cmocka_unit_test(sleeping_workers_wake_for_the_next_run),
        cmocka_unit_test(nested_run_executes_inline_without_deadlock),
        cmocka_unit_test(null_pool_and_trivial_runs_execute_on_the_caller),
        cmocka_unit_test(create_rejects_bad_thread_counts),
        cmocka_unit_test(split_covers_range_contiguously_and_evenly),
        cmocka_unit_test(row_split_results_are_identical_for_any_thread_count),
        cmocka_unit_test(side_tasks_run_exactly_once_beside_runs),
        cmocka_unit_test(sleeping_workers_wake_for_side_work),
        cmocka_unit_test(side_work_without_a_pool_runs_on_the_caller),
        cmocka_unit_test(dispatch_overhead_is_reported),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
