/* Fixed KV block pool: reference counts plus a LIFO stack of free ids.
 * LIFO because a just-freed block is the one most likely to still be warm in
 * cache memory; it also makes tests reuse blocks quickly, which is what
 * exposes stale block-table bugs. */
#include "kv/block_pool.h"

#include "base/alloc.h"

#include <stdlib.h>
#include <string.h>

struct di_block_pool {
    int32_t n_blocks;
    int32_t block_size;
    int32_t n_free;
    int32_t *refs;       /* (n_blocks) reference count per block */
    int32_t *free_stack; /* (n_blocks) free ids; the top is free_stack[n_free-1] */
    uint8_t *scratch;    /* (n_blocks) check() marks, kept so check never allocates */
};

di_status di_block_pool_create(int32_t n_blocks, int32_t block_size, di_block_pool **out,
                               di_error *err) {
    *out = NULL;
    if (n_blocks < 1 || block_size < 1)
        return di_error_set(err, DI_ERR_INVALID_ARG,
                            "block pool: n_blocks (%d) and block_size (%d) must be >= 1",
                            (int)n_blocks, (int)block_size);
    di_block_pool *p = di_calloc(1, sizeof *p);
    if (!p) return di_error_set(err, DI_ERR_NOMEM, "block pool: out of memory");
    p->refs = di_calloc((size_t)n_blocks, sizeof *p->refs);
    p->free_stack = di_malloc_array((size_t)n_blocks, sizeof *p->free_stack);
    p->scratch = di_calloc((size_t)n_blocks, 1);
    if (!p->refs || !p->free_stack || !p->scratch) {
        di_block_pool_free(p);
        return di_error_set(err, DI_ERR_NOMEM, "block pool: out of memory for %d blocks",
                            (int)n_blocks);
    }
    p->n_blocks = n_blocks;
    p->block_size = block_size;
    /* Push in reverse so that the first allocations hand out 0, 1, 2, ...:
     * block tables in logs and tests then read naturally. */
    for (int32_t i = 0; i < n_blocks; i++) p->free_stack[i] = n_blocks - 1 - i;
    p->n_free = n_blocks;
    *out = p;
    return DI_OK;
}

void di_block_pool_free(di_block_pool *pool) {
    if (!pool) return;
    free(pool->refs);
    free(pool->free_stack);
    free(pool->scratch);
    free(pool);
}

int32_t di_block_pool_n_blocks(const di_block_pool *pool) { return pool->n_blocks; }
int32_t di_block_pool_block_size(const di_block_pool *pool) { return pool->block_size; }
int32_t di_block_pool_n_free(const di_block_pool *pool) { return pool->n_free; }
int32_t di_block_pool_n_used(const di_block_pool *pool) { return pool->n_blocks - pool->n_free; }

di_status di_block_pool_alloc(di_block_pool *pool, int32_t n, int32_t *ids_out, di_error *err) {
    if (n < 0) return di_error_set(err, DI_ERR_INVALID_ARG, "block pool: alloc of %d blocks", (int)n);
    if (n > pool->n_free)
        return di_error_set(err, DI_ERR_FULL, "block pool: %d blocks wanted, %d free of %d",
                            (int)n, (int)pool->n_free, (int)pool->n_blocks);
    for (int32_t i = 0; i < n; i++) {
        int32_t id = pool->free_stack[--pool->n_free];
        pool->refs[id] = 1;
        ids_out[i] = id;
    }
    return DI_OK;
}

static di_status check_id(const di_block_pool *pool, int32_t id, const char *what, di_error *err) {
    if (id < 0 || id >= pool->n_blocks)
        return di_error_set(err, DI_ERR_INVALID_ARG, "block pool: %s of block %d, pool has %d",
                            what, (int)id, (int)pool->n_blocks);
    if (pool->refs[id] == 0)
        return di_error_set(err, DI_ERR_INTERNAL, "block pool: %s of free block %d", what, (int)id);
    return DI_OK;
}

di_status di_block_pool_incref(di_block_pool *pool, int32_t id, di_error *err) {
    di_status st = check_id(pool, id, "incref", err);
    if (st) return st;
    if (pool->refs[id] == INT32_MAX)
        return di_error_set(err, DI_ERR_INTERNAL, "block pool: refcount overflow on block %d", (int)id);
    pool->refs[id]++;
    return DI_OK;
}

di_status di_block_pool_decref(di_block_pool *pool, int32_t id, int32_t *refs_out, di_error *err) {
    di_status st = check_id(pool, id, "decref", err);
    if (st) return st;
    int32_t r = --pool->refs[id];
    /* n_free < n_blocks holds here because this block was in use. */
    if (r == 0) pool->free_stack[pool->n_free++] = id;
    if (refs_out) *refs_out = r;
    return DI_OK;
}

int32_t di_block_pool_refcount(const di_block_pool *pool, int32_t id) {
    if (id < 0 || id >= pool->n_blocks) return -1;
    return pool->refs[id];
}

di_status di_block_pool_check(const di_block_pool *pool, di_error *err) {
    if (pool->n_free < 0 || pool->n_free > pool->n_blocks)
        return di_error_set(err, DI_ERR_INTERNAL, "block pool: n_free %d out of range",
                            (int)pool->n_free);
    memset(pool->scratch, 0, (size_t)pool->n_blocks);
    for (int32_t i = 0; i < pool->n_free; i++) {
        int32_t id = pool->free_stack[i];
        if (id < 0 || id >= pool->n_blocks)
            return di_error_set(err, DI_ERR_INTERNAL, "block pool: free list holds bad id %d", (int)id);
        if (pool->scratch[id])
            return di_error_set(err, DI_ERR_INTERNAL, "block pool: block %d twice on free list", (int)id);
        if (pool->refs[id] != 0)
            return di_error_set(err, DI_ERR_INTERNAL,
                                "block pool: block %d on free list with refcount %d", (int)id,
                                (int)pool->refs[id]);
        pool->scratch[id] = 1;
    }
    for (int32_t id = 0; id < pool->n_blocks; id++) {
        if (pool->refs[id] < 0)
            return di_error_set(err, DI_ERR_INTERNAL, "block pool: block %d refcount %d", (int)id,
                                (int)pool->refs[id]);
        if (pool->refs[id] == 0 && !pool->scratch[id])
            return di_error_set(err, DI_ERR_INTERNAL, "block pool: block %d unreferenced but not free",
                                (int)id);
    }
    return DI_OK;
}
