/* The Earley parser over bytes (matcher.c): the state of one matcher.
 * The token masks (token_mask_internal.h) sit above it and keep their
 * cache in it (cache, with the function that frees it), so that the
 * parser never names the mask code.
 *
 * The parser keeps one Earley set per byte consumed, stacked: set k holds the
 * items after k bytes. Rolling back is truncating the stack, which is what
 * makes speculative-decoding rollback and the trie walk of the mask cheap.
 * An item is (pos, origin, aux): pos a position in g->syms, origin the set
 * where the item's rule started, aux the repetition count when syms[pos] is
 * a REP symbol (0 otherwise). */
#ifndef DI_GRAMMAR_MATCHER_INTERNAL_H
#define DI_GRAMMAR_MATCHER_INTERNAL_H

#include "grammar/grammar.h"
#include "grammar/ir.h"
#include "grammar/vocab.h"

#include <stdint.h>

/* Bounds on parser memory: a hostile (very ambiguous) grammar can make
 * Earley sets grow; past these limits a byte is rejected instead. */
#define MT_MAX_SET_ITEMS (1u << 18)
#define MT_MAX_ITEMS (1u << 25)

typedef struct mt_item {
    uint32_t pos, origin, aux;
} mt_item;

/* Per-set bookkeeping; set k's items are items[start .. next set's start). */
typedef struct mt_set {
    uint32_t start;      /* first item */
    uint32_t scan_start; /* first index into scans (items before a TERM) */
    uint32_t wait_start; /* first index into waits (items before a RULE/REP) */
    uint32_t accept;     /* the set contains the accepting item */
    uint32_t escaped;    /* local parses: an item with origin 0 completed */
} mt_set;

typedef struct mt_mask_cache mt_mask_cache; /* token_mask_internal.h */

struct di_grammar_matcher {
    const di_grammar *g;
    const di_grammar_vocab *vocab;
    mt_item *items;
    uint32_t n_items, cap_items;
    mt_set *sets;           /* (n_sets + 1): sets[n_sets].start etc. = ends */
    uint32_t n_sets, cap_sets;
    uint32_t *scans, n_scans, cap_scans;
    uint32_t *waits, n_waits, cap_waits;
    /* dedup of the set under construction: slot -> item index, valid when
     * ht_gen[slot] == gen */
    uint32_t *ht_idx, *ht_gen, cap_ht, gen;
    /* token history for rollback: n_sets after each token; eos flag */
    uint32_t *tok_sets;
    uint8_t *tok_eos;
    uint32_t n_toks, cap_toks;
    bool eos_done;
    bool oom;   /* a limit or allocation failed during the last advance */
    bool local; /* a local parser of token_mask.c: set 0 stands for "outside" */
    /* content ids of the first n_sid_valid sets (token_mask.c) */
    uint32_t *sids, n_sid_valid, cap_sids;
    /* the token masks' cache of this matcher (token_mask.c makes it on
     * the first mask) and its destructor, which the parser calls from
     * di_grammar_matcher_free without knowing the mask code; both NULL
     * until then */
    mt_mask_cache *cache;
    void (*cache_free)(mt_mask_cache *c);
};

/* Consumes one byte into a new set; false (nothing changed) on rejection. */
bool mt_push_byte(di_grammar_matcher *m, uint8_t byte);
/* Drops sets so that n_sets remain (n_sets >= 1). */
void mt_truncate(di_grammar_matcher *m, uint32_t n_sets);

static inline const mt_set *mt_cur(const di_grammar_matcher *m) { return &m->sets[m->n_sets - 1]; }
static inline uint32_t mt_n_scans(const di_grammar_matcher *m) {
    return m->sets[m->n_sets].scan_start - mt_cur(m)->scan_start;
}

#endif
