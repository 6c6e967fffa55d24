/* kv/prefix_cache: exact chained matching, duplicates, LRU eviction order,
 * locking, collision safety, integrity checking. */
#include "test_util.h"

#include "kv/prefix_cache.h"

#include <stdlib.h>
#include <string.h>

enum { BS = 4 };

typedef struct fixture {
    di_block_pool *pool;
    di_prefix_cache *cache;
} fixture;

static void fx_open(fixture *f, int32_t n_blocks) {
    di_error err;
    assert_int_equal(di_block_pool_create(n_blocks, BS, &f->pool, &err), DI_OK);
    assert_int_equal(di_prefix_cache_create(f->pool, &f->cache, &err), DI_OK);
}

static void fx_close(fixture *f) {
    di_prefix_cache_free(f->cache);
    /* Freeing the cache returned its blocks: whatever is left is a leak. */
    di_block_pool_free(f->pool);
}

/* A "sequence" that computed tokens into fresh blocks and caches them. */
static void compute_and_insert(fixture *f, const int32_t *tokens, int32_t n_tokens,
                               int32_t *blocks, int32_t *n_inserted) {
    di_error err;
    int32_t nb = (n_tokens + BS - 1) / BS;
    assert_int_equal(di_block_pool_alloc(f->pool, nb, blocks, &err), DI_OK);
    assert_int_equal(di_prefix_cache_insert(f->cache, tokens, n_tokens, blocks, nb, n_inserted, &err),
                     DI_OK);
}

static void match_on_empty_cache_finds_nothing(void **state) {
    (void)state;
    fixture f;
    fx_open(&f, 8);
    int32_t toks[8] = {1, 2, 3, 4, 5, 6, 7, 8}, out[2];
    assert_int_equal(di_prefix_cache_match(f.cache, toks, 8, out, 2), 0);
    assert_int_equal(di_prefix_cache_match(f.cache, toks, 0, out, 2), 0);
    fx_close(&f);
}

static void insert_then_match_returns_the_full_block_chain(void **state) {
    (void)state;
    fixture f;
    di_error err;
    fx_open(&f, 8);
    int32_t toks[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, blocks[3], out[3], ins = -1;
    compute_and_insert(&f, toks, 10, blocks, &ins);
    assert_int_equal(ins, 2); /* the partial third block is never cached */
    assert_int_equal(di_prefix_cache_n_cached(f.cache), 2);
    assert_int_equal(di_prefix_cache_match(f.cache, toks, 10, out, 3), 2);
    assert_int_equal(out[0], blocks[0]);
    assert_int_equal(out[1], blocks[1]);
    assert_int_equal(di_prefix_cache_match(f.cache, toks, 7, out, 3), 1);
    assert_int_equal(di_prefix_cache_match(f.cache, toks, 10, out, 1), 1);
    int32_t other[8] = {1, 2, 3, 4, 5, 6, 7, 99};
    assert_int_equal(di_prefix_cache_match(f.cache, other, 8, out, 3), 1);
    other[0] = 99;
    assert_int_equal(di_prefix_cache_match(f.cache, other, 8, out, 3), 0);
    /* Inserting again is a no-op. */
    assert_int_equal(di_prefix_cache_insert(f.cache, toks, 10, blocks, 3, &ins, &err), DI_OK);
    assert_int_equal(ins, 0);
    int32_t refs[8] = {0};
    for (int i = 0; i < 3; i++) refs[blocks[i]] = 1;
    assert_int_equal(di_prefix_cache_check_integrity(f.cache, refs, &err), DI_OK);
    assert_int_equal(di_prefix_cache_unlock(f.cache, blocks, 3, &err), DI_OK);
    assert_int_equal(di_prefix_cache_check_integrity(f.cache, NULL, &err), DI_OK);
    fx_close(&f);
}

static void same_content_in_another_block_stays_private(void **state) {
    (void)state;
    fixture f;
    di_error err;
    fx_open(&f, 8);
    int32_t toks[8] = {5, 5, 5, 5, 6, 6, 6, 6}, a[2], b[2], ins = -1;
    compute_and_insert(&f, toks, 8, a, &ins);
    assert_int_equal(ins, 2);
    compute_and_insert(&f, toks, 8, b, &ins);
    assert_int_equal(ins, 0);
    assert_int_equal(di_block_pool_n_free(f.pool), 4);
    assert_int_equal(di_prefix_cache_unlock(f.cache, b, 2, &err), DI_OK);
    assert_int_equal(di_block_pool_n_free(f.pool), 6); /* b's private blocks went back */
    assert_int_equal(di_prefix_cache_unlock(f.cache, a, 2, &err), DI_OK);
    assert_int_equal(di_block_pool_n_free(f.pool), 6); /* a's stay cached */
    assert_int_equal(di_prefix_cache_n_evictable(f.cache), 2);
    assert_int_equal(di_prefix_cache_check_integrity(f.cache, NULL, &err), DI_OK);
    fx_close(&f);
}

static void evict_takes_chain_tails_before_heads(void **state) {
    (void)state;
    fixture f;
    di_error err;
    fx_open(&f, 8);
    int32_t toks[12] = {1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3}, blocks[3], out[3];
    compute_and_insert(&f, toks, 12, blocks, NULL);
    assert_int_equal(di_prefix_cache_n_evictable(f.cache), 0); /* still referenced */
    assert_int_equal(di_prefix_cache_evict(f.cache, 5), 0);
    assert_int_equal(di_prefix_cache_unlock(f.cache, blocks, 3, &err), DI_OK);
    assert_int_equal(di_prefix_cache_n_evictable(f.cache), 3);
    assert_int_equal(di_prefix_cache_evict(f.cache, 1), 1);
    assert_int_equal(di_prefix_cache_match(f.cache, toks, 12, out, 3), 2);
    assert_int_equal(di_prefix_cache_evict(f.cache, 1), 1);
    assert_int_equal(di_prefix_cache_match(f.cache, toks, 12, out, 3), 1);
    assert_int_equal(di_block_pool_n_free(f.pool), 7);
    assert_int_equal(di_prefix_cache_check_integrity(f.cache, NULL, &err), DI_OK);
    fx_close(&f);
}

static void locked_blocks_are_not_evicted(void **state) {
    (void)state;
    fixture f;
    di_error err;
    fx_open(&f, 8);
    int32_t toks[12] = {1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3}, blocks[3], out[3];
    compute_and_insert(&f, toks, 12, blocks, NULL);
    assert_int_equal(di_prefix_cache_unlock(f.cache, blocks, 3, &err), DI_OK);
    /* A second sequence with the first 8 tokens in common takes them. */
    int32_t m = di_prefix_cache_match(f.cache, toks, 8, out, 3);
    assert_int_equal(m, 2);
    assert_int_equal(di_prefix_cache_lock(f.cache, out, m, &err), DI_OK);
    assert_int_equal(di_prefix_cache_n_evictable(f.cache), 1);
    int32_t refs[8] = {0};
    refs[out[0]] = refs[out[1]] = 1;
    assert_int_equal(di_prefix_cache_check_integrity(f.cache, refs, &err), DI_OK);
    assert_int_equal(di_prefix_cache_evict(f.cache, 10), 1);
    assert_int_equal(di_prefix_cache_match(f.cache, toks, 12, out, 3), 2);
    assert_int_equal(di_prefix_cache_unlock(f.cache, out, 2, &err), DI_OK);
    assert_int_equal(di_prefix_cache_evict(f.cache, 10), 2);
    assert_int_equal(di_block_pool_n_free(f.pool), 8);
    assert_int_equal(di_prefix_cache_check_integrity(f.cache, NULL, &err), DI_OK);
    fx_close(&f);
}

static uint64_t constant_hash(uint64_t parent, const int32_t *tokens, int32_t n) {
    (void)parent;
    (void)tokens;
    (void)n;
    return 42;
}

/* With every block hashing alike, a match must still only follow blocks
 * whose tokens and parent are right: compare against brute force. */
static void run_random_chains(di_prefix_hash_fn fn) {
    enum { N_BLOCKS = 64, N_CHAINS = 12, MAX_NB = 4, N_QUERIES = 400 };
    fixture f;
    di_error err;
    fx_open(&f, N_BLOCKS);
    assert_int_equal(di_prefix_cache_set_hash(f.cache, fn, &err), DI_OK);
    srand(77);
    int32_t chains[N_CHAINS][MAX_NB * BS], chain_nb[N_CHAINS];
    int32_t content[N_BLOCKS][BS];
    for (int c = 0; c < N_CHAINS; c++) {
        chain_nb[c] = 1 + rand() % MAX_NB;
        /* A two-letter alphabet makes shared prefixes common. */
        for (int i = 0; i < chain_nb[c] * BS; i++) chains[c][i] = rand() % 2;
        int32_t blocks[MAX_NB];
        compute_and_insert(&f, chains[c], chain_nb[c] * BS, blocks, NULL);
        for (int i = 0; i < chain_nb[c]; i++) memcpy(content[blocks[i]], chains[c] + i * BS, sizeof content[0]);
        assert_int_equal(di_prefix_cache_unlock(f.cache, blocks, chain_nb[c], &err), DI_OK);
    }
    assert_int_equal(di_prefix_cache_check_integrity(f.cache, NULL, &err), DI_OK);
    for (int qi = 0; qi < N_QUERIES; qi++) {
        int32_t q[MAX_NB * BS], out[MAX_NB];
        for (int i = 0; i < MAX_NB * BS; i++) q[i] = rand() % 2;
        int32_t want = 0;
        for (int c = 0; c < N_CHAINS; c++) {
            int32_t k = 0;
            while (k < chain_nb[c] && memcmp(chains[c] + k * BS, q + k * BS, BS * sizeof *q) == 0) k++;
            if (k > want) want = k;
        }
        int32_t got = di_prefix_cache_match(f.cache, q, MAX_NB * BS, out, MAX_NB);
        assert_int_equal(got, want);
        for (int i = 0; i < got; i++)
            assert_memory_equal(content[out[i]], q + i * BS, BS * sizeof *q);
    }
    fx_close(&f);
}

static void matches_are_exact_with_the_real_hash(void **state) {
    (void)state;
    run_random_chains(NULL);
}

static void matches_are_exact_when_every_hash_collides(void **state) {
    (void)state;
    run_random_chains(constant_hash);
}

/* Block X is evicted while its child Y stays cached, then X's id is reused
 * for other content: Y must not hang off the new X, even when the hashes
 * collide. */
static void orphaned_child_is_never_matched_after_parent_id_reuse(void **state) {
    (void)state;
    fixture f;
    di_error err;
    fx_open(&f, 4);
    assert_int_equal(di_prefix_cache_set_hash(f.cache, constant_hash, &err), DI_OK);
    int32_t toks[8] = {1, 1, 1, 1, 2, 2, 2, 2}, blocks[2], out[2];
    compute_and_insert(&f, toks, 8, blocks, NULL);
    assert_int_equal(di_prefix_cache_unlock(f.cache, blocks, 1, &err), DI_OK); /* X only */
    assert_int_equal(di_prefix_cache_evict(f.cache, 1), 1);
    int32_t other[8] = {7, 7, 7, 7, 2, 2, 2, 2}, nb;
    compute_and_insert(&f, other, 4, &nb, NULL);
    assert_int_equal(nb, blocks[0]); /* the pool reuses X's id first */
    assert_int_equal(di_prefix_cache_match(f.cache, other, 8, out, 2), 1);
    assert_int_equal(di_prefix_cache_match(f.cache, toks, 8, out, 2), 0);
    int32_t refs[4] = {0};
    refs[blocks[1]] = 1;
    refs[nb] = 1;
    assert_int_equal(di_prefix_cache_check_integrity(f.cache, refs, &err), DI_OK);
    assert_int_equal(di_prefix_cache_unlock(f.cache, &blocks[1], 1, &err), DI_OK);
    assert_int_equal(di_prefix_cache_unlock(f.cache, &nb, 1, &err), DI_OK);
    assert_int_equal(di_prefix_cache_check_integrity(f.cache, NULL, &err), DI_OK);
    fx_close(&f);
}

static void integrity_check_catches_refcount_drift(void **state) {
    (void)state;
    fixture f;
    di_error err;
    fx_open(&f, 4);
    int32_t toks[4] = {3, 3, 3, 3}, b;
    compute_and_insert(&f, toks, 4, &b, NULL);
    int32_t refs[4] = {0};
    assert_int_equal(di_prefix_cache_check_integrity(f.cache, refs, &err), DI_ERR_INTERNAL);
    assert_non_null(strstr(err.msg, "refcount"));
    refs[b] = 1;
    assert_int_equal(di_prefix_cache_check_integrity(f.cache, refs, &err), DI_OK);
    assert_int_equal(di_block_pool_incref(f.pool, b, &err), DI_OK); /* behind the cache's back */
    assert_int_equal(di_prefix_cache_check_integrity(f.cache, refs, &err), DI_ERR_INTERNAL);
    assert_int_equal(di_block_pool_decref(f.pool, b, NULL, &err), DI_OK);
    int32_t stray;
    assert_int_equal(di_block_pool_alloc(f.pool, 1, &stray, &err), DI_OK); /* a leak */
    assert_int_equal(di_prefix_cache_check_integrity(f.cache, refs, &err), DI_ERR_INTERNAL);
    assert_int_equal(di_block_pool_decref(f.pool, stray, NULL, &err), DI_OK);
    assert_int_equal(di_prefix_cache_unlock(f.cache, &b, 1, &err), DI_OK);
    assert_int_equal(di_prefix_cache_check_integrity(f.cache, NULL, &err), DI_OK);
    fx_close(&f);
}

static void misuse_is_refused_without_damage(void **state) {
    (void)state;
    fixture f;
    di_error err;
    fx_open(&f, 4);
    int32_t toks[4] = {3, 3, 3, 3}, b, bad = 9;
    /* insert of a block the caller does not hold */
    int32_t free_id = 0;
    assert_int_equal(di_prefix_cache_insert(f.cache, toks, 4, &free_id, 1, NULL, &err),
                     DI_ERR_INVALID_ARG);
    compute_and_insert(&f, toks, 4, &b, NULL);
    assert_int_equal(di_prefix_cache_set_hash(f.cache, constant_hash, &err), DI_ERR_INVALID_ARG);
    assert_int_equal(di_prefix_cache_lock(f.cache, &bad, 1, &err), DI_ERR_INVALID_ARG);
    assert_int_equal(di_prefix_cache_unlock(f.cache, &b, 1, &err), DI_OK);
    /* Only the cache holds b now: a sequence cannot drop that reference. */
    assert_int_equal(di_prefix_cache_unlock(f.cache, &b, 1, &err), DI_ERR_INTERNAL);
    int32_t pair[2] = {b, 7};
    assert_int_equal(di_prefix_cache_lock(f.cache, pair, 2, &err), DI_ERR_INVALID_ARG);
    assert_int_equal(di_prefix_cache_n_evictable(f.cache), 1); /* the partial lock was undone */
    assert_int_equal(di_prefix_cache_check_integrity(f.cache, NULL, &err), DI_OK);
    fx_close(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(match_on_empty_cache_finds_nothing),
        cmocka_unit_test(insert_then_match_returns_the_full_block_chain),
        cmocka_unit_test(same_content_in_another_block_stays_private),
        cmocka_unit_test(evict_takes_chain_tails_before_heads),
        cmocka_unit_test(locked_blocks_are_not_evicted),
        cmocka_unit_test(matches_are_exact_with_the_real_hash),
        cmocka_unit_test(matches_are_exact_when_every_hash_collides),
        cmocka_unit_test(orphaned_child_is_never_matched_after_parent_id_reuse),
        cmocka_unit_test(integrity_check_catches_refcount_drift),
        cmocka_unit_test(misuse_is_refused_without_damage),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
