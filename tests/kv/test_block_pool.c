/* kv/block_pool: reference counts, free list, all-or-nothing allocation. */
#include "test_util.h"

#include "kv/block_pool.h"

#include <stdlib.h>
#include <string.h>

static void create_rejects_empty_pool(void **state) {
    (void)state;
    di_block_pool *p = (di_block_pool *)1;
    di_error err;
    assert_int_equal(di_block_pool_create(0, 16, &p, &err), DI_ERR_INVALID_ARG);
    assert_null(p);
    assert_int_equal(di_block_pool_create(4, 0, &p, &err), DI_ERR_INVALID_ARG);
}

static void alloc_hands_out_distinct_blocks_and_counts(void **state) {
    (void)state;
    di_block_pool *p;
    di_error err;
    assert_int_equal(di_block_pool_create(8, 4, &p, &err), DI_OK);
    assert_int_equal(di_block_pool_n_free(p), 8);
    assert_int_equal(di_block_pool_block_size(p), 4);
    int32_t ids[8];
    assert_int_equal(di_block_pool_alloc(p, 5, ids, &err), DI_OK);
    assert_int_equal(di_block_pool_n_used(p), 5);
    assert_int_equal(di_block_pool_n_free(p), 3);
    uint8_t seen[8] = {0};
    for (int i = 0; i < 5; i++) {
        assert_true(ids[i] >= 0 && ids[i] < 8);
        assert_false(seen[ids[i]]);
        seen[ids[i]] = 1;
        assert_int_equal(di_block_pool_refcount(p, ids[i]), 1);
    }
    assert_int_equal(di_block_pool_check(p, &err), DI_OK);
    di_block_pool_free(p);
}

static void alloc_beyond_free_takes_nothing(void **state) {
    (void)state;
    di_block_pool *p;
    di_error err;
    assert_int_equal(di_block_pool_create(4, 4, &p, &err), DI_OK);
    int32_t ids[8];
    assert_int_equal(di_block_pool_alloc(p, 3, ids, &err), DI_OK);
    assert_int_equal(di_block_pool_alloc(p, 2, ids + 3, &err), DI_ERR_FULL);
    assert_non_null(strstr(err.msg, "1 free"));
    assert_int_equal(di_block_pool_n_free(p), 1);
    assert_int_equal(di_block_pool_alloc(p, -1, ids, &err), DI_ERR_INVALID_ARG);
    assert_int_equal(di_block_pool_check(p, &err), DI_OK);
    di_block_pool_free(p);
}

static void decref_to_zero_returns_block_for_reuse(void **state) {
    (void)state;
    di_block_pool *p;
    di_error err;
    assert_int_equal(di_block_pool_create(2, 4, &p, &err), DI_OK);
    int32_t ids[2];
    assert_int_equal(di_block_pool_alloc(p, 2, ids, &err), DI_OK);
    assert_int_equal(di_block_pool_incref(p, ids[0], &err), DI_OK);
    int32_t refs = -1;
    assert_int_equal(di_block_pool_decref(p, ids[0], &refs, &err), DI_OK);
    assert_int_equal(refs, 1);
    assert_int_equal(di_block_pool_n_free(p), 0);
    assert_int_equal(di_block_pool_decref(p, ids[0], &refs, &err), DI_OK);
    assert_int_equal(refs, 0);
    assert_int_equal(di_block_pool_n_free(p), 1);
    int32_t again;
    assert_int_equal(di_block_pool_alloc(p, 1, &again, &err), DI_OK);
    assert_int_equal(again, ids[0]);
    assert_int_equal(di_block_pool_check(p, &err), DI_OK);
    di_block_pool_free(p);
}

static void refcount_misuse_is_an_error_not_a_crash(void **state) {
    (void)state;
    di_block_pool *p;
    di_error err;
    assert_int_equal(di_block_pool_create(3, 4, &p, &err), DI_OK);
    assert_int_equal(di_block_pool_incref(p, 0, &err), DI_ERR_INTERNAL);   /* free block */
    assert_int_equal(di_block_pool_decref(p, 1, NULL, &err), DI_ERR_INTERNAL);
    assert_int_equal(di_block_pool_incref(p, 3, &err), DI_ERR_INVALID_ARG); /* out of range */
    assert_int_equal(di_block_pool_decref(p, -1, NULL, &err), DI_ERR_INVALID_ARG);
    assert_int_equal(di_block_pool_refcount(p, 99), -1);
    assert_int_equal(di_block_pool_n_free(p), 3);
    assert_int_equal(di_block_pool_check(p, &err), DI_OK);
    di_block_pool_free(p);
}

/* Random alloc/incref/decref against a shadow count array: the pool's
 * counts, free total and free list stay consistent throughout. */
static void random_operations_keep_counts_consistent(void **state) {
    (void)state;
    enum { N = 37 };
    di_block_pool *p;
    di_error err;
    assert_int_equal(di_block_pool_create(N, 8, &p, &err), DI_OK);
    int32_t shadow[N] = {0};
    srand(1234);
    for (int it = 0; it < 20000; it++) {
        int op = rand() % 3;
        int32_t id = rand() % N;
        if (op == 0) {
            int32_t n = rand() % 4, ids[4];
            int32_t free_before = di_block_pool_n_free(p);
            di_status st = di_block_pool_alloc(p, n, ids, &err);
            assert_int_equal(st, n <= free_before ? DI_OK : DI_ERR_FULL);
            if (!st)
                for (int i = 0; i < n; i++) {
                    assert_int_equal(shadow[ids[i]], 0);
                    shadow[ids[i]] = 1;
                }
        } else if (op == 1) {
            assert_int_equal(di_block_pool_incref(p, id, &err), shadow[id] ? DI_OK : DI_ERR_INTERNAL);
            if (shadow[id]) shadow[id]++;
        } else {
            assert_int_equal(di_block_pool_decref(p, id, NULL, &err),
                             shadow[id] ? DI_OK : DI_ERR_INTERNAL);
            if (shadow[id]) shadow[id]--;
        }
        int32_t n_free = 0;
        for (int b = 0; b < N; b++) {
            assert_int_equal(di_block_pool_refcount(p, b), shadow[b]);
            n_free += shadow[b] == 0;
        }
        assert_int_equal(di_block_pool_n_free(p), n_free);
        if (it % 97 == 0) assert_int_equal(di_block_pool_check(p, &err), DI_OK);
    }
    di_block_pool_free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(create_rejects_empty_pool),
        cmocka_unit_test(alloc_hands_out_distinct_blocks_and_counts),
        cmocka_unit_test(alloc_beyond_free_takes_nothing),
        cmocka_unit_test(decref_to_zero_returns_block_for_reuse),
        cmocka_unit_test(refcount_misuse_is_an_error_not_a_crash),
        cmocka_unit_test(random_operations_keep_counts_consistent),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
