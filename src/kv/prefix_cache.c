/* Prefix cache over the block pool: a hash index of cached full blocks
 * (separate chaining through per-block links), the tokens of every cached
 * block for exact comparison, and an intrusive LRU list of cached blocks that
 * no sequence references. Everything is per-block arrays sized at creation,
 * so no operation after create allocates. */
#include "kv/prefix_cache.h"

#include "base/alloc.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define NO_BLOCK (-1)
/* Hash of the empty prefix: any constant works; a non-zero one keeps an
 * all-zero block from hashing to zero. */
#define ROOT_HASH UINT64_C(0x6a09e667f3bcc908)

struct di_prefix_cache {
    di_block_pool *pool; /* borrowed */
    di_prefix_hash_fn hash_fn;
    int32_t n_blocks;
    int32_t block_size;
    int32_t n_cached;
    int32_t n_evictable;
    uint32_t bucket_mask;  /* n_buckets - 1, n_buckets a power of two >= n_blocks */
    int32_t *buckets;      /* (n_buckets) first cached block of each chain */
    /* Per block, meaningful while cached[b]: */
    uint8_t *cached;       /* (n_blocks) */
    uint64_t *hash;        /* (n_blocks) chained hash of the prefix ending with b */
    int32_t *parent;       /* (n_blocks) block matched before b, NO_BLOCK for the first */
    uint32_t *parent_gen;  /* (n_blocks) gen[parent] when b was cached */
    uint32_t *gen;         /* (n_blocks) bumped each time b is (re)cached */
    int32_t *bucket_next;  /* (n_blocks) next block in the same hash chain */
    int32_t *tokens;       /* (n_blocks, block_size) the block's token ids */
    /* LRU list of cached blocks with no sequence reference; head = oldest. */
    uint8_t *in_lru;       /* (n_blocks) */
    int32_t *lru_prev;     /* (n_blocks) */
    int32_t *lru_next;     /* (n_blocks) */
    int32_t lru_head, lru_tail;
    uint8_t *scratch;      /* (n_blocks) marks for check_integrity */
    di_prefix_block_fn evict_fn; /* the slower tier's hook, or NULL */
    void *evict_user;
    int32_t *chain;        /* (n_blocks) scratch: a block's ancestors */
    int32_t *prefix;       /* (n_blocks, block_size) scratch: their tokens */
};

/* Chained block hash: 64-bit multiply-xorshift over the token ids, seeded with
 * the parent's hash, finished with the murmur3 fmix64 avalanche. Quality only
 * affects speed (tokens are compared on every hit), never correctness. */
static uint64_t hash_block(uint64_t parent_hash, const int32_t *tokens, int32_t n) {
    uint64_t h = parent_hash ^ UINT64_C(0x9e3779b97f4a7c15);
    for (int32_t i = 0; i < n; i++) {
        h ^= (uint64_t)(uint32_t)tokens[i];
        h *= UINT64_C(0xbf58476d1ce4e5b9);
        h ^= h >> 29;
    }
    h ^= h >> 33;
    h *= UINT64_C(0xff51afd7ed558ccd);
    h ^= h >> 33;
    h *= UINT64_C(0xc4ceb9fe1a85ec53);
    h ^= h >> 33;
    return h;
}

di_status di_prefix_cache_create(di_block_pool *pool, di_prefix_cache **out, di_error *err) {
    *out = NULL;
    di_prefix_cache *c = di_calloc(1, sizeof *c);
    if (!c) return di_error_set(err, DI_ERR_NOMEM, "prefix cache: out of memory");
    c->pool = pool;
    c->hash_fn = hash_block;
    c->n_blocks = di_block_pool_n_blocks(pool);
    c->block_size = di_block_pool_block_size(pool);
    uint32_t n_buckets = 1;
    while (n_buckets < (uint32_t)c->n_blocks) n_buckets <<= 1;
    c->bucket_mask = n_buckets - 1;
    size_t n = (size_t)c->n_blocks;
    c->buckets = di_malloc_array(n_buckets, sizeof *c->buckets);
    c->cached = di_calloc(n, 1);
    c->hash = di_calloc(n, sizeof *c->hash);
    c->parent = di_calloc(n, sizeof *c->parent);
    c->parent_gen = di_calloc(n, sizeof *c->parent_gen);
    c->gen = di_calloc(n, sizeof *c->gen);
    c->bucket_next = di_calloc(n, sizeof *c->bucket_next);
    c->tokens = di_malloc_array(n, (size_t)c->block_size * sizeof *c->tokens);
    c->in_lru = di_calloc(n, 1);
    c->lru_prev = di_calloc(n, sizeof *c->lru_prev);
    c->lru_next = di_calloc(n, sizeof *c->lru_next);
    c->scratch = di_calloc(n, 1);
    c->chain = di_malloc_array(n, sizeof *c->chain);
    c->prefix = di_malloc_array(n, (size_t)c->block_size * sizeof *c->prefix);
    if (!c->chain || !c->prefix || !c->buckets || !c->cached || !c->hash || !c->parent || !c->parent_gen || !c->gen ||
        !c->bucket_next || !c->tokens || !c->in_lru || !c->lru_prev || !c->lru_next ||
        !c->scratch) {
        di_prefix_cache_free(c);
        return di_error_set(err, DI_ERR_NOMEM, "prefix cache: out of memory for %d blocks",
                            (int)n);
    }
    for (uint32_t i = 0; i < n_buckets; i++) c->buckets[i] = NO_BLOCK;
    c->lru_head = c->lru_tail = NO_BLOCK;
    *out = c;
    return DI_OK;
}

static void lru_remove(di_prefix_cache *c, int32_t b) {
    int32_t p = c->lru_prev[b], n = c->lru_next[b];
    if (p != NO_BLOCK) c->lru_next[p] = n; else c->lru_head = n;
    if (n != NO_BLOCK) c->lru_prev[n] = p; else c->lru_tail = p;
    c->in_lru[b] = 0;
    c->n_evictable--;
}

static void lru_push_tail(di_prefix_cache *c, int32_t b) {
    c->lru_prev[b] = c->lru_tail;
    c->lru_next[b] = NO_BLOCK;
    if (c->lru_tail != NO_BLOCK) c->lru_next[c->lru_tail] = b; else c->lru_head = b;
    c->lru_tail = b;
    c->in_lru[b] = 1;
    c->n_evictable++;
}

static void index_remove(di_prefix_cache *c, int32_t b) {
    int32_t *link = &c->buckets[c->hash[b] & c->bucket_mask];
    while (*link != b) link = &c->bucket_next[*link];
    *link = c->bucket_next[b];
    c->cached[b] = 0;
    c->n_cached--;
}

/* Rebuilds the tokens of the prefix ending with cached block b into
 * c->prefix; returns their count, 0 when an ancestor is gone (evicted, or
 * re-cached with other content: its generation moved on). */
static int32_t rebuild_prefix(di_prefix_cache *c, int32_t b) {
    int32_t depth = 0;
    for (int32_t at = b;;) {
        if (depth >= c->n_blocks) return 0; /* a cycle would be a bug; never loop */
        c->chain[depth++] = at;
        int32_t p = c->parent[at];
        if (p == NO_BLOCK) break;
        if (!c->cached[p] || c->gen[p] != c->parent_gen[at]) return 0;
        at = p;
    }
    size_t bs = (size_t)c->block_size;
    for (int32_t i = 0; i < depth; i++)
        memcpy(c->prefix + (size_t)i * bs, c->tokens + (size_t)c->chain[depth - 1 - i] * bs, bs * sizeof *c->prefix);
    return depth * c->block_size;
}

static void tell_tier(di_prefix_cache *c, int32_t b) {
    if (!c->evict_fn) return;
    int32_t n = rebuild_prefix(c, b);
    if (n > 0) c->evict_fn(c->evict_user, b, c->prefix, n);
}

void di_prefix_cache_set_evict_hook(di_prefix_cache *cache, di_prefix_block_fn fn, void *user) {
    cache->evict_fn = fn;
    cache->evict_user = user;
}

void di_prefix_cache_for_each(di_prefix_cache *cache, di_prefix_block_fn fn, void *user) {
    for (int32_t b = 0; b < cache->n_blocks; b++) {
        if (!cache->cached[b]) continue;
        int32_t n = rebuild_prefix(cache, b);
        if (n > 0) fn(user, b, cache->prefix, n);
    }
}

/* Un-caches block b (must be on the LRU list) and drops the cache's
 * reference, which returns it to the pool; the slower tier sees it first. */
static void evict_block(di_prefix_cache *c, int32_t b) {
    tell_tier(c, b);
    lru_remove(c, b);
    index_remove(c, b);
    /* Cannot fail: b is cached, so the pool counts our reference. */
    (void)di_block_pool_decref(c->pool, b, NULL, NULL);
}

void di_prefix_cache_free(di_prefix_cache *cache) {
    if (!cache) return;
    if (cache->cached) {
        for (int32_t b = 0; b < cache->n_blocks; b++)
            if (cache->cached[b]) (void)di_block_pool_decref(cache->pool, b, NULL, NULL);
    }
    free(cache->buckets);
    free(cache->cached);
    free(cache->hash);
    free(cache->parent);
    free(cache->parent_gen);
    free(cache->gen);
    free(cache->bucket_next);
    free(cache->tokens);
    free(cache->in_lru);
    free(cache->lru_prev);
    free(cache->lru_next);
    free(cache->scratch);
    free(cache->chain);
    free(cache->prefix);
    free(cache);
}

/* The cached block holding `tokens` right after `parent` (of generation
 * parent_gen), whose chained hash is h; NO_BLOCK when there is none. */
static int32_t find_child(const di_prefix_cache *c, uint64_t h, int32_t parent,
                          uint32_t parent_gen, const int32_t *tokens) {
    size_t bytes = (size_t)c->block_size * sizeof *tokens;
    for (int32_t b = c->buckets[h & c->bucket_mask]; b != NO_BLOCK; b = c->bucket_next[b]) {
        if (c->hash[b] == h && c->parent[b] == parent && c->parent_gen[b] == parent_gen &&
            memcmp(c->tokens + (size_t)b * (size_t)c->block_size, tokens, bytes) == 0)
            return b;
    }
    return NO_BLOCK;
}

int32_t di_prefix_cache_match(const di_prefix_cache *cache, const int32_t *tokens,
                              int32_t n_tokens, int32_t *blocks_out, int32_t max_blocks) {
    int32_t bs = cache->block_size;
    int32_t n_full = n_tokens > 0 ? n_tokens / bs : 0;
    if (n_full > max_blocks) n_full = max_blocks;
    int32_t parent = NO_BLOCK;
    uint32_t pgen = 0;
    uint64_t ph = ROOT_HASH;
    int32_t i = 0;
    for (; i < n_full; i++) {
        const int32_t *t = tokens + (size_t)i * (size_t)bs;
        uint64_t h = cache->hash_fn(ph, t, bs);
        int32_t b = find_child(cache, h, parent, pgen, t);
        if (b == NO_BLOCK) break;
        blocks_out[i] = b;
        parent = b;
        pgen = cache->gen[b];
        ph = h;
    }
    return i;
}

di_status di_prefix_cache_insert(di_prefix_cache *cache, const int32_t *tokens, int32_t n_tokens,
                                 const int32_t *blocks, int32_t n_blocks,
                                 int32_t *n_inserted_out, di_error *err) {
    di_prefix_cache *c = cache;
    int32_t bs = c->block_size;
    int32_t n_full = n_tokens > 0 ? n_tokens / bs : 0;
    if (n_full > n_blocks) n_full = n_blocks;
    int32_t inserted = 0;
    if (n_inserted_out) *n_inserted_out = 0;
    int32_t parent = NO_BLOCK;
    uint32_t pgen = 0;
    uint64_t ph = ROOT_HASH;
    for (int32_t i = 0; i < n_full; i++) {
        int32_t b = blocks[i];
        if (b < 0 || b >= c->n_blocks || di_block_pool_refcount(c->pool, b) < 1)
            return di_error_set(err, DI_ERR_INVALID_ARG,
                                "prefix cache: insert of block %d that the caller does not hold",
                                (int)b);
        const int32_t *t = tokens + (size_t)i * (size_t)bs;
        if (c->cached[b]) {
            /* Already cached (matched earlier, or inserted by an earlier
             * call): trust its hash, but only while it still hangs off the
             * chain we are walking; otherwise stop, the rest cannot be
             * reached by a match anyway. */
            if (c->parent[b] != parent || c->parent_gen[b] != pgen) break;
            parent = b;
            pgen = c->gen[b];
            ph = c->hash[b];
            continue;
        }
        uint64_t h = cache->hash_fn(ph, t, bs);
        int32_t same = find_child(c, h, parent, pgen, t);
        if (same != NO_BLOCK) {
            /* Same content cached under another id (two sequences computed
             * the same prefix at once): keep the existing one as the chain
             * and leave b private to its sequence. */
            parent = same;
            pgen = c->gen[same];
            ph = h;
            continue;
        }
        di_status st = di_block_pool_incref(c->pool, b, err);
        if (st) return st;
        c->cached[b] = 1;
        c->n_cached++;
        c->hash[b] = h;
        c->parent[b] = parent;
        c->parent_gen[b] = pgen;
        c->gen[b]++;
        memcpy(c->tokens + (size_t)b * (size_t)bs, t, (size_t)bs * sizeof *t);
        int32_t *head = &c->buckets[h & c->bucket_mask];
        c->bucket_next[b] = *head;
        *head = b;
        inserted++;
        parent = b;
        pgen = c->gen[b];
        ph = h;
    }
    if (n_inserted_out) *n_inserted_out = inserted;
    return DI_OK;
}

di_status di_prefix_cache_lock(di_prefix_cache *cache, const int32_t *blocks, int32_t n,
                               di_error *err) {
    for (int32_t i = 0; i < n; i++) {
        int32_t b = blocks[i];
        if (b < 0 || b >= cache->n_blocks || di_block_pool_refcount(cache->pool, b) < 1) {
            /* Undo what this call did so the caller sees all or nothing. */
            (void)di_prefix_cache_unlock(cache, blocks, i, NULL);
            return di_error_set(err, DI_ERR_INVALID_ARG,
                                "prefix cache: lock of block %d, which is not in use", (int)b);
        }
        if (cache->in_lru[b]) lru_remove(cache, b);
        di_status st = di_block_pool_incref(cache->pool, b, err);
        if (st) {
            if (cache->cached[b] && di_block_pool_refcount(cache->pool, b) == 1)
                lru_push_tail(cache, b);
            (void)di_prefix_cache_unlock(cache, blocks, i, NULL);
            return st;
        }
    }
    return DI_OK;
}

di_status di_prefix_cache_unlock(di_prefix_cache *cache, const int32_t *blocks, int32_t n,
                                 di_error *err) {
    di_status first = DI_OK;
    /* Keep going past a bad entry: the caller is releasing, and stopping
     * half-way would leak every block after it. */
    for (int32_t i = n - 1; i >= 0; i--) {
        int32_t b = blocks[i];
        int32_t refs = 0;
        int32_t is_cached = (b >= 0 && b < cache->n_blocks && cache->cached[b]) ? 1 : 0;
        if (is_cached && di_block_pool_refcount(cache->pool, b) <= 1) {
            /* Only the cache's own reference is left: a sequence must not
             * drop it. */
            if (!first)
                first = di_error_set(err, DI_ERR_INTERNAL,
                                     "prefix cache: unlock of cached block %d no sequence holds",
                                     (int)b);
            continue;
        }
        di_status st = di_block_pool_decref(cache->pool, b, &refs, first ? NULL : err);
        if (st) {
            if (!first) first = st;
            continue;
        }
        if (is_cached && refs == 1) lru_push_tail(cache, b);
    }
    return first;
}

int32_t di_prefix_cache_evict(di_prefix_cache *cache, int32_t n) {
    int32_t freed = 0;
    while (freed < n && cache->lru_head != NO_BLOCK) {
        evict_block(cache, cache->lru_head);
        freed++;
    }
    return freed;
}

di_status di_prefix_cache_set_hash(di_prefix_cache *cache, di_prefix_hash_fn fn, di_error *err) {
    if (cache->n_cached > 0)
        return di_error_set(err, DI_ERR_INVALID_ARG,
                            "prefix cache: hash changed while %d blocks are cached",
                            (int)cache->n_cached);
    cache->hash_fn = fn ? fn : hash_block;
    return DI_OK;
}

int32_t di_prefix_cache_n_cached(const di_prefix_cache *cache) { return cache->n_cached; }
int32_t di_prefix_cache_n_evictable(const di_prefix_cache *cache) { return cache->n_evictable; }

di_status di_prefix_cache_check_integrity(const di_prefix_cache *cache, const int32_t *seq_refs,
                                          di_error *err) {
    const di_prefix_cache *c = cache;
    di_status st = di_block_pool_check(c->pool, err);
    if (st) return st;
    int32_t n_cached = 0, n_lru_flagged = 0;
    for (int32_t b = 0; b < c->n_blocks; b++) {
        int32_t held = seq_refs ? seq_refs[b] : 0;
        int32_t want = held + (c->cached[b] ? 1 : 0);
        int32_t have = di_block_pool_refcount(c->pool, b);
        if (held < 0 || have != want)
            return di_error_set(err, DI_ERR_INTERNAL,
                                "prefix cache: block %d has refcount %d, expected %d "
                                "(%d from sequences%s)",
                                (int)b, (int)have, (int)want, (int)held,
                                c->cached[b] ? " + 1 from the cache" : "");
        bool evictable = c->cached[b] && held == 0;
        if ((c->in_lru[b] != 0) != evictable)
            return di_error_set(err, DI_ERR_INTERNAL,
                                "prefix cache: block %d %s the LRU list but is %s", (int)b,
                                c->in_lru[b] ? "on" : "off",
                                evictable ? "cached and unreferenced" : "not evictable");
        n_cached += c->cached[b];
        n_lru_flagged += c->in_lru[b];
    }
    if (n_cached != c->n_cached || n_lru_flagged != c->n_evictable)
        return di_error_set(err, DI_ERR_INTERNAL,
                            "prefix cache: counters say %d cached / %d evictable, blocks say %d / %d",
                            (int)c->n_cached, (int)c->n_evictable, (int)n_cached,
                            (int)n_lru_flagged);
    /* The LRU list: back links agree with forward links, no cycle, and it
     * holds exactly the blocks flagged in_lru. */
    int32_t walked = 0, prev = NO_BLOCK;
    for (int32_t b = c->lru_head; b != NO_BLOCK; b = c->lru_next[b]) {
        if (b < 0 || b >= c->n_blocks || !c->in_lru[b] || c->lru_prev[b] != prev ||
            ++walked > c->n_evictable)
            return di_error_set(err, DI_ERR_INTERNAL, "prefix cache: LRU list broken at block %d",
                                (int)b);
        prev = b;
    }
    if (walked != c->n_evictable || c->lru_tail != prev)
        return di_error_set(err, DI_ERR_INTERNAL, "prefix cache: LRU list holds %d of %d blocks",
                            (int)walked, (int)c->n_evictable);
    /* Every cached block sits exactly once in the chain of its own bucket. */
    memset(c->scratch, 0, (size_t)c->n_blocks);
    int32_t indexed = 0;
    for (uint32_t k = 0; k <= c->bucket_mask; k++) {
        for (int32_t b = c->buckets[k]; b != NO_BLOCK; b = c->bucket_next[b]) {
            if (b < 0 || b >= c->n_blocks || !c->cached[b] || c->scratch[b] ||
                (c->hash[b] & c->bucket_mask) != k)
                return di_error_set(err, DI_ERR_INTERNAL,
                                    "prefix cache: hash index broken at block %d", (int)b);
            c->scratch[b] = 1;
            indexed++;
        }
    }
    if (indexed != c->n_cached)
        return di_error_set(err, DI_ERR_INTERNAL, "prefix cache: index holds %d of %d cached blocks",
                            (int)indexed, (int)c->n_cached);
    return DI_OK;
}
