/* Prefix cache: reuse of FULL KV blocks across sequences (mini-sglang's
 * interface: match_prefix / insert_prefix / evict / lock / unlock /
 * check_integrity, over nano-vllm's hash -> block map).
 *
 * A cached block is keyed by the chained hash of its tokens,
 *   hash(block i) = H(hash(block i-1), tokens of block i),
 * and stores its block_size tokens and its parent block. A match walks the
 * chain from the first block and accepts a block only when the tokens are
 * equal AND its recorded parent is the block matched just before (same
 * "generation" of that block id), so a 64-bit collision can cost a missed
 * reuse but never a wrong one.
 *
 * References: the cache holds one reference on each block it caches; each
 * live sequence holds one on every block of its table. So a block is either
 *   free                  (refcount 0),
 *   cached, unreferenced  (refcount 1, on the LRU list, reclaimable by evict),
 *   or in use             (refcount = sequences holding it + 1 if cached).
 * Sequences take and drop their references through lock/unlock (for cached
 * and private blocks alike) so that the cache sees when a cached block
 * becomes unreferenced and can put it on the LRU list.
 *
 * Ownership: the cache borrows the pool (which must outlive it); blocks still
 * cached at di_prefix_cache_free keep their reference in the pool.
 * Not thread-safe. */
#ifndef DI_KV_PREFIX_CACHE_H
#define DI_KV_PREFIX_CACHE_H

#include "base/status.h"
#include "kv/block_pool.h"

#include <stdint.h>

typedef struct di_prefix_cache di_prefix_cache;

di_status di_prefix_cache_create(di_block_pool *pool, di_prefix_cache **out, di_error *err);
/* Drops the cache's references (cached blocks go back to the pool) and frees. */
void di_prefix_cache_free(di_prefix_cache *cache);

/* Longest chain of cached full blocks equal to a prefix of tokens
 * (n_tokens of them): writes up to max_blocks block ids to blocks_out and
 * returns how many. Takes no reference: call lock before anything that may
 * evict. Pass n_tokens - 1 when the last token must still be computed. */
int32_t di_prefix_cache_match(const di_prefix_cache *cache, const int32_t *tokens,
                              int32_t n_tokens, int32_t *blocks_out, int32_t max_blocks);

/* Caches the full blocks of a sequence: blocks[i] holds tokens
 * [i*block_size, (i+1)*block_size) and only min(n_blocks, n_tokens/block_size)
 * blocks are considered. The caller must hold a reference on each block and
 * their KV must be computed. A block whose content is already cached under
 * another id is skipped (it stays private to the caller). Blocks already
 * cached cost O(1), so calling again as a sequence grows is cheap.
 * *n_inserted_out (may be NULL) gets the number of newly cached blocks. */
di_status di_prefix_cache_insert(di_prefix_cache *cache, const int32_t *tokens, int32_t n_tokens,
                                 const int32_t *blocks, int32_t n_blocks,
                                 int32_t *n_inserted_out, di_error *err);

/* A sequence takes a reference on each of n blocks (cached or not); a cached
 * block leaves the LRU list. All or nothing on error. */
di_status di_prefix_cache_lock(di_prefix_cache *cache, const int32_t *blocks, int32_t n,
                               di_error *err);

/* A sequence drops its reference on each of n blocks, LAST block first, so
 * that the LRU list evicts the tail of a chain before its head (a head is
 * shared by more prompts). Private blocks return to the pool; cached ones
 * that become unreferenced join the LRU list as most recently used. */
di_status di_prefix_cache_unlock(di_prefix_cache *cache, const int32_t *blocks, int32_t n,
                                 di_error *err);

/* Returns up to n least recently used unreferenced cached blocks to the
 * pool; returns how many were freed. */
int32_t di_prefix_cache_evict(di_prefix_cache *cache, int32_t n);

/* A slower tier below the cache (kv/disk_tier.h) learns of blocks through
 * this hook: fn(user, block, prefix, n_prefix) with the block's whole prefix
 * (n_prefix tokens, the block's own last) while its KV is still in the pool.
 * Called by evict for every block it is about to free, and by for_each. A
 * block whose parent chain is no longer cached (its prefix cannot be
 * rebuilt) is skipped. fn must not call back into the cache. */
typedef void (*di_prefix_block_fn)(void *user, int32_t block, const int32_t *prefix, int32_t n_prefix);
void di_prefix_cache_set_evict_hook(di_prefix_cache *cache, di_prefix_block_fn fn, void *user);
/* Calls fn for every cached block (e.g. to flush them all to disk). */
void di_prefix_cache_for_each(di_prefix_cache *cache, di_prefix_block_fn fn, void *user);

/* The block hash: chained hash of a block given its parent's. */
typedef uint64_t (*di_prefix_hash_fn)(uint64_t parent_hash, const int32_t *tokens, int32_t n);

/* Replaces the block hash (NULL restores the built-in one). Only while
 * nothing is cached (DI_ERR_INVALID_ARG otherwise). Tests install a constant
 * hash to show that collisions never produce a wrong match. */
di_status di_prefix_cache_set_hash(di_prefix_cache *cache, di_prefix_hash_fn fn, di_error *err);

int32_t di_prefix_cache_n_cached(const di_prefix_cache *cache);
/* Cached blocks no sequence references: what evict can reclaim. */
int32_t di_prefix_cache_n_evictable(const di_prefix_cache *cache);

/* Checks every block against the pool: refcount == seq_refs[b] + cached(b),
 * the LRU list holds exactly the cached blocks with no sequence reference,
 * the hash index holds exactly the cached blocks, the pool's free list is
 * consistent. seq_refs (n_blocks entries) counts references held by live
 * sequences; NULL means none (the idle state). */
di_status di_prefix_cache_check_integrity(const di_prefix_cache *cache, const int32_t *seq_refs,
                                          di_error *err);

#endif
