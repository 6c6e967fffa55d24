/* The key table (keytab.h): open addressing over the ids, keys stored
 * back to back in one array. */
#include "grammar/keytab.h"

#include "base/alloc.h"

#include <stdlib.h>
#include <string.h>

static uint32_t hash_words(const uint32_t *k, uint32_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
    for (uint32_t i = 0; i < n; i++) {
        h ^= k[i];
        h *= 0xff51afd7ed558ccdull;
        h ^= h >> 32;
    }
    return (uint32_t)h;
}

void mt_kt_free(mt_keytab *t) {
    free(t->slot), free(t->data), free(t->off), free(t->hash);
    memset(t, 0, sizeof *t);
}

static bool kt_rehash(mt_keytab *t, uint32_t nc) {
    uint32_t *s = calloc(nc, sizeof *s);
    if (!s) return false;
    for (uint32_t id = 0; id < t->n_ids; id++) {
        uint32_t h = t->hash[id] & (nc - 1);
        while (s[h]) h = (h + 1) & (nc - 1);
        s[h] = id + 1;
    }
    free(t->slot);
    t->slot = s, t->cap = nc;
    return true;
}

/* The id of key k (hash h) in t, or UINT32_MAX with *slot at the empty
 * slot where it would go. t->cap must be nonzero. */
static uint32_t kt_probe(const mt_keytab *t, const uint32_t *k, uint32_t n, uint32_t h, uint32_t *slot) {
    uint32_t i = h & (t->cap - 1);
    while (t->slot[i]) {
        uint32_t id = t->slot[i] - 1;
        if (t->hash[id] == h && t->off[id + 1] - t->off[id] == n && (!n || !memcmp(t->data + t->off[id], k, n * sizeof *k)))
            return id;
        i = (i + 1) & (t->cap - 1);
    }
    *slot = i;
    return UINT32_MAX;
}

/* Returns the id of key (adding it when absent; *added tells), or
 * UINT32_MAX when out of memory. */
uint32_t mt_kt_intern(mt_keytab *t, const uint32_t *k, uint32_t n, bool *added) {
    *added = false;
    if ((t->n_ids + 1) * 2 > t->cap && !kt_rehash(t, t->cap ? t->cap * 2 : 1024)) return UINT32_MAX;
    uint32_t h = hash_words(k, n), i = 0, id = kt_probe(t, k, n, h, &i);
    if (id != UINT32_MAX) return id;
    if (t->n_ids + 2 > t->cap_ids) {
        uint32_t nc = t->cap_ids ? t->cap_ids * 2 : 1024;
        size_t *o = di_realloc_array(t->off, (size_t)nc + 1, sizeof *o);
        if (!o) return UINT32_MAX;
        t->off = o;
        uint32_t *hh = di_realloc_array(t->hash, nc, sizeof *hh);
        if (!hh) return UINT32_MAX;
        t->hash = hh, t->cap_ids = nc;
    }
    if (t->n_data + n > t->cap_data) {
        size_t nc = t->cap_data ? t->cap_data * 2 : 4096;
        while (nc < t->n_data + n) nc *= 2;
        uint32_t *d = di_realloc_array(t->data, nc, sizeof *d);
        if (!d) return UINT32_MAX;
        t->data = d, t->cap_data = nc;
    }
    if (t->n_ids == 0) t->off[0] = 0;
    if (n) memcpy(t->data + t->n_data, k, n * sizeof *k); /* empty keys are valid (a finished state) */
    t->n_data += n;
    id = t->n_ids++;
    t->off[id + 1] = t->n_data;
    t->hash[id] = h;
    t->slot[i] = id + 1;
    *added = true;
    return id;
}

uint32_t mt_kt_find(const mt_keytab *t, const uint32_t *k, uint32_t n) {
    if (!t->cap) return UINT32_MAX;
    uint32_t i;
    return kt_probe(t, k, n, hash_words(k, n), &i);
    return UINT32_MAX;
}
