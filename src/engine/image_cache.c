/* Encoded-image cache (image_cache.h): a list in recency order, most recent
 * first. Lookups scan it: entries are megabytes of rows each, so even a
 * generous cap holds a few hundred, and a hash compare skips the rest. */
#include "engine/image_cache.h"

#include "base/alloc.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct entry {
    struct entry *prev, *next;
    uint64_t cfg, hash;
    uint8_t *bytes;
    size_t n_bytes;
    int32_t *ids;
    float *rows;
    int32_t n_tokens;
    int64_t row_floats;
    uint64_t cost; /* bytes + ids + rows */
} entry;

struct di_image_cache {
    pthread_mutex_t mu;
    uint64_t max_bytes, bytes;
    entry *head, *tail;
    di_image_cache_stats st;
};

/* FNV-1a 64 with the length: only a filter, the bytes are compared */
static uint64_t hash_bytes(const uint8_t *d, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ d[i]) * 1099511628211ull;
    return h ^ (uint64_t)n;
}

di_status di_image_cache_create(uint64_t max_bytes, di_image_cache **out, di_error *err) {
    *out = NULL;
    di_image_cache *c = di_calloc(1, sizeof *c);
    if (!c) return di_error_set(err, DI_ERR_NOMEM, "image cache: out of memory");
    pthread_mutex_init(&c->mu, NULL);
    c->max_bytes = max_bytes;
    *out = c;
    return DI_OK;
}

static void entry_free(entry *e) {
    free(e->bytes);
    free(e->ids);
    free(e->rows);
    free(e);
}

static void unlink_entry(di_image_cache *c, entry *e) {
    if (e->prev) e->prev->next = e->next;
    else c->head = e->next;
    if (e->next) e->next->prev = e->prev;
    else c->tail = e->prev;
    e->prev = e->next = NULL;
}

static void push_front(di_image_cache *c, entry *e) {
    e->prev = NULL;
    e->next = c->head;
    if (c->head) c->head->prev = e;
    c->head = e;
    if (!c->tail) c->tail = e;
}

void di_image_cache_free(di_image_cache *c) {
    if (!c) return;
    for (entry *e = c->head, *nx; e; e = nx) {
        nx = e->next;
        entry_free(e);
    }
    pthread_mutex_destroy(&c->mu);
    free(c);
}

static entry *find(di_image_cache *c, uint64_t cfg, uint64_t h, const uint8_t *bytes, size_t n) {
    for (entry *e = c->head; e; e = e->next)
        if (e->hash == h && e->cfg == cfg && e->n_bytes == n && !memcmp(e->bytes, bytes, n)) return e;
    return NULL;
}

bool di_image_cache_get(di_image_cache *c, uint64_t cfg, const uint8_t *bytes, size_t n_bytes, int32_t **ids,
                        float **rows, int32_t *n_tokens) {
    *ids = NULL;
    *rows = NULL;
    *n_tokens = 0;
    const uint64_t h = hash_bytes(bytes, n_bytes);
    pthread_mutex_lock(&c->mu);
    entry *e = find(c, cfg, h, bytes, n_bytes);
    bool hit = false;
    if (e) {
        size_t nr = (size_t)e->n_tokens * (size_t)e->row_floats;
        int32_t *i = di_malloc_array((size_t)e->n_tokens, sizeof(int32_t));
        float *r = di_malloc_array(nr, sizeof(float));
        if (i && r) {
            memcpy(i, e->ids, (size_t)e->n_tokens * sizeof(int32_t));
            memcpy(r, e->rows, nr * sizeof(float));
            *ids = i;
            *rows = r;
            *n_tokens = e->n_tokens;
            unlink_entry(c, e);
            push_front(c, e);
            hit = true;
        } else {
            free(i);
            free(r);
        }
    }
    if (hit) c->st.hits++;
    else c->st.misses++;
    pthread_mutex_unlock(&c->mu);
    return hit;
}

void di_image_cache_put(di_image_cache *c, uint64_t cfg, const uint8_t *bytes, size_t n_bytes, const int32_t *ids,
                        const float *rows, int32_t n_tokens, int64_t row_floats) {
    if (n_tokens <= 0 || row_floats <= 0) return;
    uint64_t n_rows, row_bytes, cost;
    if (di_mul_overflow_u64((uint64_t)n_tokens, (uint64_t)row_floats, &n_rows) ||
        di_mul_overflow_u64(n_rows, sizeof(float), &row_bytes))
        return;
    cost = row_bytes + (uint64_t)n_bytes + (uint64_t)n_tokens * sizeof(int32_t);
    if (cost > c->max_bytes) return;
    entry *e = di_calloc(1, sizeof *e);
    if (!e) return;
    e->bytes = di_malloc_array(n_bytes ? n_bytes : 1, 1);
    e->ids = di_malloc_array((size_t)n_tokens, sizeof(int32_t));
    e->rows = di_malloc_array((size_t)n_rows, sizeof(float));
    if (!e->bytes || !e->ids || !e->rows) {
        entry_free(e);
        return;
    }
    memcpy(e->bytes, bytes, n_bytes);
    memcpy(e->ids, ids, (size_t)n_tokens * sizeof(int32_t));
    memcpy(e->rows, rows, (size_t)row_bytes);
    e->n_bytes = n_bytes;
    e->n_tokens = n_tokens;
    e->row_floats = row_floats;
    e->cfg = cfg;
    e->hash = hash_bytes(bytes, n_bytes);
    e->cost = cost;
    pthread_mutex_lock(&c->mu);
    entry *old = find(c, cfg, e->hash, bytes, n_bytes);
    if (old) { /* two submitters encoded it at once: keep the one there */
        pthread_mutex_unlock(&c->mu);
        entry_free(e);
        return;
    }
    while (c->tail && c->bytes + cost > c->max_bytes) {
        entry *t = c->tail;
        unlink_entry(c, t);
        c->bytes -= t->cost;
        c->st.entries--;
        c->st.evictions++;
        entry_free(t);
    }
    push_front(c, e);
    c->bytes += cost;
    c->st.entries++;
    pthread_mutex_unlock(&c->mu);
}

void di_image_cache_get_stats(di_image_cache *c, di_image_cache_stats *out) {
    pthread_mutex_lock(&c->mu);
    *out = c->st;
    out->bytes = c->bytes;
    pthread_mutex_unlock(&c->mu);
}
