/* A fixed pool of KV-cache blocks with reference counts.
 *
 * The pool only hands out block ids 0..n_blocks-1; the KV tensors themselves
 * belong to the model, which addresses them through block tables (see
 * model/batch.h). A block is free when its reference count is 0. Whoever
 * holds a block holds one reference: a live sequence that has the block in its
 * block table, and the prefix cache for a block it has cached (kv/prefix_cache.h).
 *
 * Ownership: di_block_pool_create allocates, di_block_pool_free releases.
 * Not thread-safe: one scheduler owns one pool. */
#ifndef DI_KV_BLOCK_POOL_H
#define DI_KV_BLOCK_POOL_H

#include "base/status.h"

#include <stdint.h>

typedef struct di_block_pool di_block_pool;

/* Creates a pool of n_blocks blocks of block_size tokens each, all free.
 * n_blocks >= 1, block_size >= 1. */
di_status di_block_pool_create(int32_t n_blocks, int32_t block_size, di_block_pool **out,
                               di_error *err);
void di_block_pool_free(di_block_pool *pool);

int32_t di_block_pool_n_blocks(const di_block_pool *pool);
int32_t di_block_pool_block_size(const di_block_pool *pool);
int32_t di_block_pool_n_free(const di_block_pool *pool);
int32_t di_block_pool_n_used(const di_block_pool *pool);

/* Takes n free blocks, each with reference count 1, writing their ids to
 * ids_out (n entries). All or nothing: DI_ERR_FULL when fewer than n are free,
 * and then nothing is taken. */
di_status di_block_pool_alloc(di_block_pool *pool, int32_t n, int32_t *ids_out, di_error *err);

/* Adds a reference to a block that is already in use (refcount >= 1).
 * DI_ERR_INVALID_ARG for a bad id, DI_ERR_INTERNAL for a free block. */
di_status di_block_pool_incref(di_block_pool *pool, int32_t id, di_error *err);

/* Drops one reference; at 0 the block returns to the free list. The new count
 * is written to *refs_out when non-NULL. DI_ERR_INTERNAL for a free block. */
di_status di_block_pool_decref(di_block_pool *pool, int32_t id, int32_t *refs_out,
                               di_error *err);

/* Reference count of a block, or -1 for an id out of range. */
int32_t di_block_pool_refcount(const di_block_pool *pool, int32_t id);

/* Verifies the free list against the reference counts: every block with
 * count 0 is on the free list exactly once and no other block is. */
di_status di_block_pool_check(const di_block_pool *pool, di_error *err);

#endif
