/* Local classifications shared by every matcher on one vocabulary,
 * whatever its grammar (shared_cache.c has the why): entries keyed by the
 * canonical structure of the grammar a local state can reach. Below the
 * vocabulary, which owns one, and the masks, which fill it; it knows the
 * grammar (ir.h) and the key table, nothing of a parse or a token. */
#ifndef DI_GRAMMAR_SHARED_CACHE_H
#define DI_GRAMMAR_SHARED_CACHE_H

#include "grammar/ir.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct mt_shared_cache mt_shared_cache;

/* The classification of the vocabulary for one local key (token_mask.c):
 * tokens allowed in every state with that key, and the uncertain ones (in
 * trie order) to check against the real state. shared: the arrays belong
 * to the vocabulary's shared cache, not to the matcher. */
typedef struct mt_local_entry {
    uint32_t *acc; /* (mask words) */
    uint32_t *unc; /* (n_unc) */
    uint32_t n_unc;
    bool shared;
} mt_local_entry;

/* Scratch for structural keys (one per matcher cache). */
typedef struct mt_struct_scratch {
    uint32_t *rule_map, *rule_gen; /* (n_rules) canonical id, valid when gen matches */
    uint32_t *class_map, *class_gen; /* (n_classes) */
    uint32_t *queue, *classes;     /* rule bodies / classes in canonical order */
    uint8_t *queued;               /* (n_rules) body queued (valid with rule_gen) */
    uint32_t gen;
    uint32_t *out, n_out, cap_out;
} mt_struct_scratch;

mt_shared_cache *mt_shared_create(void);
void mt_shared_free(mt_shared_cache *s);
void mt_struct_scratch_free(mt_struct_scratch *sc);

/* Canonical structural key of a local state: the local key lkey (n words of
 * sorted triples pos, here?, canonical aux) rewritten with the grammar
 * reachable from those items, numbered by first appearance, so that two
 * states (of any grammars) with equal structural keys classify every token
 * the same. lim: repetition bounds at or past lim are equivalent (see
 * canon_aux). Returns the length in sc->out, or UINT32_MAX when the
 * reachable grammar is too large to be worth sharing or memory ran out. */
uint32_t mt_struct_key(mt_struct_scratch *sc, const di_grammar *g, uint32_t lim, const uint32_t *lkey,
                       uint32_t n);

/* The shared entry for key (NULL when absent). Entries are never freed or
 * moved before the cache, so the pointer stays valid. */
const mt_local_entry *mt_shared_find(mt_shared_cache *s, const uint32_t *key, uint32_t n);

/* Publishes e under key. On success the cache takes e's arrays and returns
 * the stored entry; when another matcher published the key first, returns
 * that one (e unchanged, still the caller's); NULL when the cache is full
 * or out of memory (e unchanged). */
const mt_local_entry *mt_shared_insert(mt_shared_cache *s, const uint32_t *key, uint32_t n, mt_local_entry *e,
                                       size_t bytes);

#endif
