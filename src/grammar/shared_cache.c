/* Local classifications shared across grammars and matchers.
 *
 * Why: a local classification (token_mask.c) walks the whole vocabulary
 * once per local key, 1-10 ms with a 128k vocabulary. The keys that cost
 * the most -- "inside a JSON string", "start of any JSON value", "inside a
 * number" -- recur in almost every schema, at different positions of
 * different grammars. A per-grammar cache pays for each of them again for
 * every new schema, and that first payment is what sets the mask p99.
 *
 * What makes two local states interchangeable is not their positions but
 * the grammar reachable from their items: the local parser only ever looks
 * at the symbols after each item's dot, the alternatives of the rules those
 * symbols predict (transitively), and, on completing an item, the rule of
 * its END symbol. So the structural key is that reachable grammar written
 * out with rules and byte classes renumbered by first appearance. Equal
 * keys describe isomorphic parsers, hence identical classifications; the
 * key is compared word by word (no hash-only equality), so sharing is
 * exact.
 *
 * The cache hangs off the vocabulary (classifications depend on its
 * tokens), is bounded, and never evicts: entries stay valid for the
 * vocabulary's lifetime, so a pointer handed out under the lock can be
 * used after it is released. */
#include "grammar/shared_cache.h"

#include "grammar/keytab.h"

#include "base/alloc.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Reachable grammars past this size are schema-specific (the start of a
 * large object) and rarely recur: they are classified per matcher. Keys are
 * only built for classifications that turned out expensive (see
 * share_budget), so their cost hides behind the walk they may save. */
#define STRUCT_MAX_WORDS (1u << 12)
/* Memory bound of the shared cache; past it nothing more is published
 * (matchers then keep their own classifications, as before). */
#define SHARED_MAX_BYTES ((size_t)256 << 20)

/* Word tags of the serialization (top 3 bits, as SYM_* in ir.h). */
#define TAG_ITEM 4u
#define TAG_RULE_HDR 5u
#define TAG_CLASS 6u

struct mt_shared_cache {
    pthread_mutex_t mu;
    mt_keytab keys;
    mt_local_entry **entries; /* (keys.n_ids) owned */
    uint32_t cap_entries;
    size_t bytes;
};

mt_shared_cache *mt_shared_create(void) {
    mt_shared_cache *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    if (pthread_mutex_init(&s->mu, NULL)) {
        free(s);
        return NULL;
    }
    return s;
}

void mt_shared_free(mt_shared_cache *s) {
    if (!s) return;
    for (uint32_t i = 0; i < s->keys.n_ids; i++) {
        if (!s->entries[i]) continue;
        free(s->entries[i]->acc), free(s->entries[i]->unc);
        free(s->entries[i]);
    }
    free(s->entries);
    mt_kt_free(&s->keys);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

const mt_local_entry *mt_shared_find(mt_shared_cache *s, const uint32_t *key, uint32_t n) {
    pthread_mutex_lock(&s->mu);
    uint32_t id = mt_kt_find(&s->keys, key, n);
    const mt_local_entry *e = id == UINT32_MAX ? NULL : s->entries[id];
    pthread_mutex_unlock(&s->mu);
    return e;
}

const mt_local_entry *mt_shared_insert(mt_shared_cache *s, const uint32_t *key, uint32_t n, mt_local_entry *e,
                                       size_t bytes) {
    const mt_local_entry *r = NULL;
    pthread_mutex_lock(&s->mu);
    uint32_t id = mt_kt_find(&s->keys, key, n);
    if (id != UINT32_MAX) {
        r = s->entries[id];
        goto out;
    }
    size_t cost = bytes + (size_t)n * sizeof(uint32_t) + sizeof(mt_local_entry);
    if (s->bytes + cost > SHARED_MAX_BYTES) goto out;
    if (s->keys.n_ids >= s->cap_entries) {
        uint32_t nc = s->cap_entries ? s->cap_entries * 2 : 256;
        mt_local_entry **x = di_realloc_array(s->entries, nc, sizeof *x);
        if (!x) goto out;
        s->entries = x, s->cap_entries = nc;
    }
    mt_local_entry *copy = malloc(sizeof *copy);
    if (!copy) goto out;
    bool added;
    id = mt_kt_intern(&s->keys, key, n, &added);
    if (id == UINT32_MAX || !added) { /* !added cannot happen: looked up above */
        free(copy);
        goto out;
    }
    *copy = *e;
    copy->shared = true;
    s->entries[id] = copy;
    s->bytes += cost;
    e->shared = true; /* the arrays now belong to the cache */
    r = copy;
out:
    pthread_mutex_unlock(&s->mu);
    return r;
}

void mt_struct_scratch_free(mt_struct_scratch *sc) {
    free(sc->rule_map), free(sc->rule_gen), free(sc->class_map), free(sc->class_gen);
    free(sc->queue), free(sc->queued), free(sc->classes), free(sc->out);
    memset(sc, 0, sizeof *sc);
}

static bool emit(mt_struct_scratch *sc, uint32_t w) {
    if (sc->n_out == sc->cap_out) {
        if (sc->cap_out >= STRUCT_MAX_WORDS) return false;
        uint32_t nc = sc->cap_out ? sc->cap_out * 2 : 1024;
        uint32_t *x = di_realloc_array(sc->out, nc, sizeof *x);
        if (!x) return false;
        sc->out = x, sc->cap_out = nc;
    }
    sc->out[sc->n_out++] = w;
    return true;
}

/* Canonical id of rule r (numbered by first appearance). body: r is
 * predicted from here, so its alternatives are part of the key and r is
 * queued for them. A rule seen only in END symbols needs no body: completing
 * it looks only at the items waiting for it, which are in the key already
 * or outside (the escape). Ids and body order are separate sequences. */
static uint32_t canon_rule(mt_struct_scratch *sc, uint32_t r, bool body, uint32_t *n_ids, uint32_t *n_bodies) {
    if (sc->rule_gen[r] != sc->gen) {
        sc->rule_gen[r] = sc->gen;
        sc->rule_map[r] = (*n_ids)++;
        sc->queued[r] = 0;
    }
    if (body && !sc->queued[r]) {
        sc->queued[r] = 1;
        sc->queue[(*n_bodies)++] = r;
    }
    return sc->rule_map[r];
}

static uint32_t canon_class(mt_struct_scratch *sc, uint32_t c, uint32_t *n_classes) {
    if (sc->class_gen[c] != sc->gen) {
        sc->class_gen[c] = sc->gen;
        sc->class_map[c] = *n_classes;
        sc->classes[(*n_classes)++] = c;
    }
    return sc->class_map[c];
}

/* Repetition bounds at or past lim are indistinguishable within one token
 * when every repetition consumes a byte (non-nullable rule): a token makes
 * at most max_len < lim repetitions. Nullable rules keep exact bounds. */
static uint32_t clamp_bound(const di_grammar *g, const gb_rep *rp, uint32_t x, uint32_t lim) {
    if (g->nullable[rp->rule]) return x;
    return x > lim ? lim : x;
}

/* Emits the symbols from position p through the END of its alternative. */
static bool emit_run(mt_struct_scratch *sc, const di_grammar *g, uint32_t p, uint32_t lim, uint32_t *n_rules,
                     uint32_t *n_bodies, uint32_t *n_classes) {
    for (;; p++) {
        if (p >= g->n_syms) return false;
        uint32_t s = g->syms[p], k = SYM_KIND(s), v = SYM_VAL(s);
        switch (k) {
        case SYM_TERM:
            if (!emit(sc, SYM_MAKE(SYM_TERM, canon_class(sc, v, n_classes)))) return false;
            break;
        case SYM_RULE:
            if (!emit(sc, SYM_MAKE(SYM_RULE, canon_rule(sc, v, true, n_rules, n_bodies)))) return false;
            break;
        case SYM_REP: {
            const gb_rep *rp = &g->reps[v];
            if (!emit(sc, SYM_MAKE(SYM_REP, canon_rule(sc, rp->rule, true, n_rules, n_bodies))) ||
                !emit(sc, clamp_bound(g, rp, rp->min, lim)) || !emit(sc, clamp_bound(g, rp, rp->max, lim)))
                return false;
            break;
        }
        default: /* END: the rule whose alternative this is */
            return emit(sc, SYM_MAKE(SYM_END, canon_rule(sc, v, false, n_rules, n_bodies)));
        }
    }
}

static bool scratch_ready(mt_struct_scratch *sc, const di_grammar *g) {
    if (!sc->rule_map) {
        sc->rule_map = di_malloc_array(g->n_rules ? g->n_rules : 1, sizeof(uint32_t));
        sc->rule_gen = di_calloc(g->n_rules ? g->n_rules : 1, sizeof(uint32_t));
        sc->queue = di_malloc_array(g->n_rules ? g->n_rules : 1, sizeof(uint32_t));
        sc->queued = malloc(g->n_rules ? g->n_rules : 1);
        sc->class_map = di_malloc_array(g->n_classes ? g->n_classes : 1, sizeof(uint32_t));
        sc->class_gen = di_calloc(g->n_classes ? g->n_classes : 1, sizeof(uint32_t));
        sc->classes = di_malloc_array(g->n_classes ? g->n_classes : 1, sizeof(uint32_t));
        if (!sc->rule_map || !sc->rule_gen || !sc->queue || !sc->queued || !sc->class_map || !sc->class_gen || !sc->classes)
            return false;
    }
    if (++sc->gen == 0) { /* stamps wrapped */
        memset(sc->rule_gen, 0, (g->n_rules ? g->n_rules : 1) * sizeof(uint32_t));
        memset(sc->class_gen, 0, (g->n_classes ? g->n_classes : 1) * sizeof(uint32_t));
        sc->gen = 1;
    }
    return true;
}

uint32_t mt_struct_key(mt_struct_scratch *sc, const di_grammar *g, uint32_t lim, const uint32_t *lkey, uint32_t n) {
    if (!scratch_ready(sc, g)) return UINT32_MAX;
    sc->n_out = 0;
    uint32_t n_rules = 0, n_bodies = 0, n_classes = 0;
    /* the items, in local-key order: (here?, canonical aux), then the rest
     * of the alternative after the dot */
    for (uint32_t i = 0; i + 2 < n; i += 3) {
        if (!emit(sc, SYM_MAKE(TAG_ITEM, lkey[i + 1] & 1)) || !emit(sc, lkey[i + 2])) return UINT32_MAX;
        if (!emit_run(sc, g, lkey[i], lim, &n_rules, &n_bodies, &n_classes)) return UINT32_MAX;
    }
    /* every rule reachable from them, in canonical order (the queue grows
     * while it is read) */
    for (uint32_t q = 0; q < n_bodies; q++) {
        uint32_t r = sc->queue[q];
        if (!emit(sc, SYM_MAKE(TAG_RULE_HDR, sc->rule_map[r])) || !emit(sc, g->rule_alt[r + 1] - g->rule_alt[r]))
            return UINT32_MAX;
        for (uint32_t a = g->rule_alt[r]; a < g->rule_alt[r + 1]; a++)
            if (!emit_run(sc, g, g->alt_pos[a], lim, &n_rules, &n_bodies, &n_classes)) return UINT32_MAX;
    }
    /* byte classes by value */
    for (uint32_t q = 0; q < n_classes; q++) {
        const gb_bits *b = &g->classes[sc->classes[q]];
        if (!emit(sc, SYM_MAKE(TAG_CLASS, 0))) return UINT32_MAX;
        for (int w = 0; w < 4; w++)
            if (!emit(sc, (uint32_t)b->w[w]) || !emit(sc, (uint32_t)(b->w[w] >> 32))) return UINT32_MAX;
    }
    return sc->n_out;
}
