/* Prefix affinity sets (contract in affinity.h): open addressing over
 * 64-bit chunk hashes, 0 marking an empty slot. */
#include "router/affinity.h"

#include "base/alloc.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

struct di_aff_set {
    uint64_t *slots; /* (cap) */
    uint32_t cap, n; /* cap a power of two */
};

di_status di_aff_set_create(uint32_t capacity, di_aff_set **out, di_error *err) {
    *out = NULL;
    uint32_t cap = 1024;
    while (cap < capacity && cap < (1u << 24)) cap <<= 1;
    di_aff_set *s = di_calloc(1, sizeof *s);
    if (s) s->slots = di_calloc(cap, sizeof *s->slots);
    if (!s || !s->slots) {
        free(s);
        return di_error_set(err, DI_ERR_NOMEM, "router: out of memory");
    }
    s->cap = cap;
    *out = s;
    return DI_OK;
}

void di_aff_set_free(di_aff_set *s) {
    if (!s) return;
    free(s->slots);
    free(s);
}

int32_t di_aff_chunks(const char *text, size_t n, uint64_t *out, int32_t max) {
    uint64_t h = UINT64_C(0x84222325cbf29ce4);
    int32_t k = 0;
    for (size_t at = 0; at + DI_AFF_CHUNK <= n && k < max; at += DI_AFF_CHUNK) {
        for (size_t i = 0; i < DI_AFF_CHUNK; i++) h = (h ^ (uint8_t)text[at + i]) * UINT64_C(0x100000001b3);
        uint64_t x = h ^ (h >> 31);
        x *= UINT64_C(0xbf58476d1ce4e5b9);
        x ^= x >> 29;
        out[k++] = x ? x : 1; /* 0 marks an empty slot */
    }
    return k;
}

static bool contains(const di_aff_set *s, uint64_t h) {
    for (uint32_t i = (uint32_t)h & (s->cap - 1);; i = (i + 1) & (s->cap - 1)) {
        if (s->slots[i] == h) return true;
        if (s->slots[i] == 0) return false;
    }
}

int32_t di_aff_match(const di_aff_set *s, const uint64_t *chunks, int32_t n) {
    int32_t i = 0;
    while (i < n && contains(s, chunks[i])) i++;
    return i;
}

void di_aff_insert(di_aff_set *s, const uint64_t *chunks, int32_t n) {
    for (int32_t k = 0; k < n; k++) {
        if (contains(s, chunks[k])) continue;
        if (s->n + 1 > s->cap / 4 * 3) { /* full: forget everything, start over */
            memset(s->slots, 0, (size_t)s->cap * sizeof *s->slots);
            s->n = 0;
        }
        uint32_t i = (uint32_t)chunks[k] & (s->cap - 1);
        while (s->slots[i]) i = (i + 1) & (s->cap - 1);
        s->slots[i] = chunks[k];
        s->n++;
    }
}
