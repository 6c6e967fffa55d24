/* Earley parser over bytes with a stack of sets (see matcher_internal.h).
 *
 * Why Earley: it accepts any context-free grammar the front ends produce
 * (left recursion, ambiguity, nullable rules) without a grammar transform,
 * and its state after k bytes is a plain array we can truncate to roll back.
 * Nullable rules use the Aycock-Horspool rule: predicting a nullable
 * nonterminal also advances over it, so completions with origin == current
 * set can be skipped. Bounded repetition keeps its count in the item. */
#include "grammar/matcher_internal.h"

#include "base/alloc.h"

#include <stdlib.h>
#include <string.h>

static bool grow_arr(void **p, uint32_t *cap, uint32_t need, size_t sz) {
    if (need <= *cap) return true;
    uint32_t nc = *cap ? *cap : 64;
    while (nc < need) {
        if (nc > UINT32_MAX / 2) return false;
        nc *= 2;
    }
    void *q = di_realloc_array(*p, nc, sz);
    if (!q) return false;
    *p = q;
    *cap = nc;
    return true;
}

static inline uint32_t item_hash(uint32_t pos, uint32_t origin, uint32_t aux) {
    uint64_t h = (uint64_t)pos * 0x9E3779B97F4A7C15ull ^ (uint64_t)origin * 0xC2B2AE3D27D4EB4Full ^
                 (uint64_t)aux * 0x165667B19E3779F9ull;
    return (uint32_t)(h >> 32);
}

/* Rebuilds the dedup table at twice the size for the set being built. */
static bool ht_grow(di_grammar_matcher *m, uint32_t set_begin) {
    uint32_t nc = m->cap_ht ? m->cap_ht * 2 : 256;
    uint32_t *idx = di_malloc_array(nc, sizeof(uint32_t));
    uint32_t *gen = di_calloc(nc, sizeof(uint32_t));
    if (!idx || !gen) { free(idx); free(gen); return false; }
    free(m->ht_idx);
    free(m->ht_gen);
    m->ht_idx = idx, m->ht_gen = gen, m->cap_ht = nc;
    m->gen = 1;
    for (uint32_t i = set_begin; i < m->n_items; i++) {
        const mt_item *it = &m->items[i];
        uint32_t h = item_hash(it->pos, it->origin, it->aux) & (nc - 1);
        while (m->ht_gen[h] == m->gen) h = (h + 1) & (nc - 1);
        m->ht_gen[h] = m->gen, m->ht_idx[h] = i;
    }
    return true;
}

/* Adds an item to the set under construction (starting at set_begin)
 * unless present. false on a limit or no memory (m->oom set). */
static bool add_item(di_grammar_matcher *m, uint32_t set_begin, uint32_t pos, uint32_t origin, uint32_t aux) {
    uint32_t n_in_set = m->n_items - set_begin;
    if ((n_in_set + 1) * 2 > m->cap_ht && !ht_grow(m, set_begin)) return m->oom = true, false;
    uint32_t mask = m->cap_ht - 1, h = item_hash(pos, origin, aux) & mask;
    while (m->ht_gen[h] == m->gen) {
        const mt_item *it = &m->items[m->ht_idx[h]];
        if (it->pos == pos && it->origin == origin && it->aux == aux) return true;
        h = (h + 1) & mask;
    }
    if (n_in_set >= MT_MAX_SET_ITEMS || m->n_items >= MT_MAX_ITEMS) return m->oom = true, false;
    if (!grow_arr((void **)&m->items, &m->cap_items, m->n_items + 1, sizeof(mt_item))) return m->oom = true, false;
    m->items[m->n_items] = (mt_item){pos, origin, aux};
    m->ht_gen[h] = m->gen, m->ht_idx[h] = m->n_items++;
    return true;
}

static void predict(di_grammar_matcher *m, uint32_t set_begin, uint32_t rule, uint32_t k) {
    const di_grammar *g = m->g;
    for (uint32_t a = g->rule_alt[rule]; a < g->rule_alt[rule + 1]; a++)
        if (!add_item(m, set_begin, g->alt_pos[a], k, 0)) return;
}

/* Count after one more repetition; unbounded repetitions stop counting at
 * min so that items stay finite. */
static inline uint32_t rep_inc(const gb_rep *rp, uint32_t c) {
    uint32_t n = c + 1;
    return rp->max == GB_INF && n > rp->min ? rp->min : n;
}

/* Advances a waiting item (RULE or REP before the dot) over one completed
 * derivation of its nonterminal. */
static void advance_waiting(di_grammar_matcher *m, uint32_t set_begin, mt_item w) {
    const di_grammar *g = m->g;
    uint32_t s = g->syms[w.pos];
    if (SYM_KIND(s) == SYM_RULE) {
        add_item(m, set_begin, w.pos + 1, w.origin, 0);
        return;
    }
    const gb_rep *rp = &g->reps[SYM_VAL(s)];
    if (w.aux >= rp->max) return;
    uint32_t c = rep_inc(rp, w.aux);
    if (c < rp->max) add_item(m, set_begin, w.pos, w.origin, c);
    if (c >= rp->min) add_item(m, set_begin, w.pos + 1, w.origin, 0);
}

/* Closes set k (items from set_begin): prediction and completion until no
 * new item appears, then files each item as scanning or waiting. */
static bool close_set(di_grammar_matcher *m, uint32_t k, uint32_t set_begin) {
    const di_grammar *g = m->g;
    uint32_t escaped = 0;
    for (uint32_t i = set_begin; i < m->n_items && !m->oom; i++) {
        mt_item it = m->items[i];
        uint32_t s = g->syms[it.pos], v = SYM_VAL(s);
        switch (SYM_KIND(s)) {
        case SYM_TERM: break;
        case SYM_RULE:
            predict(m, set_begin, v, k);
            if (g->nullable[v]) add_item(m, set_begin, it.pos + 1, it.origin, 0);
            break;
        case SYM_REP: {
            const gb_rep *rp = &g->reps[v];
            if (it.aux < rp->max) {
                predict(m, set_begin, rp->rule, k);
                if (g->nullable[rp->rule]) {
                    uint32_t c = rep_inc(rp, it.aux);
                    if (c < rp->max) add_item(m, set_begin, it.pos, it.origin, c);
                    if (c >= rp->min) add_item(m, set_begin, it.pos + 1, it.origin, 0);
                }
            }
            if (it.aux >= rp->min) add_item(m, set_begin, it.pos + 1, it.origin, 0);
            break;
        }
        case SYM_END: {
            if (it.origin == k) break; /* empty derivation: handled by nullable */
            if (it.origin == 0 && m->local) escaped = 1;
            const mt_set *o = &m->sets[it.origin];
            /* set origin+1 may be the one under construction: its waits
             * are not filed yet, so the end of origin's waits is n_waits */
            uint32_t wend = it.origin + 1 < k ? m->sets[it.origin + 1].wait_start : m->n_waits;
            for (uint32_t w = o->wait_start; w < wend && !m->oom; w++) {
                mt_item wi = m->items[m->waits[w]];
                uint32_t ws = g->syms[wi.pos];
                uint32_t wr = SYM_KIND(ws) == SYM_RULE ? SYM_VAL(ws) : g->reps[SYM_VAL(ws)].rule;
                if (wr == v) advance_waiting(m, set_begin, wi);
            }
            break;
        }
        }
    }
    if (m->oom) return false;
    /* File items; sets[k + 1] becomes the end sentinel. */
    mt_set *cur = &m->sets[k];
    cur->scan_start = m->n_scans;
    cur->wait_start = m->n_waits;
    cur->accept = 0;
    cur->escaped = escaped;
    uint32_t n = m->n_items - set_begin;
    if (!grow_arr((void **)&m->scans, &m->cap_scans, m->n_scans + n, sizeof(uint32_t)) ||
        !grow_arr((void **)&m->waits, &m->cap_waits, m->n_waits + n, sizeof(uint32_t)))
        return m->oom = true, false;
    for (uint32_t i = set_begin; i < m->n_items; i++) {
        const mt_item *it = &m->items[i];
        uint32_t kind = SYM_KIND(g->syms[it->pos]);
        if (kind == SYM_TERM) m->scans[m->n_scans++] = i;
        else if (kind != SYM_END) m->waits[m->n_waits++] = i;
        else if (it->pos == g->accept_pos && it->origin == 0) cur->accept = 1;
    }
    m->sets[k + 1] = (mt_set){m->n_items, m->n_scans, m->n_waits, 0, 0};
    return true;
}

static bool begin_set(di_grammar_matcher *m) {
    if (!grow_arr((void **)&m->sets, &m->cap_sets, m->n_sets + 2, sizeof(mt_set))) return m->oom = true, false;
    if (m->cap_ht == 0 && !ht_grow(m, m->n_items)) return m->oom = true, false;
    if (++m->gen == 0) { /* generation wrapped: clear stamps */
        memset(m->ht_gen, 0, m->cap_ht * sizeof(uint32_t));
        m->gen = 1;
    }
    m->sets[m->n_sets].start = m->n_items;
    return true;
}

void mt_truncate(di_grammar_matcher *m, uint32_t n_sets) {
    if (n_sets >= m->n_sets || n_sets == 0) return;
    const mt_set *e = &m->sets[n_sets];
    m->n_items = e->start;
    m->n_scans = e->scan_start;
    m->n_waits = e->wait_start;
    m->n_sets = n_sets;
    m->sets[n_sets] = (mt_set){m->n_items, m->n_scans, m->n_waits, 0, 0};
    if (m->n_sid_valid > n_sets) m->n_sid_valid = n_sets;
}

bool mt_push_byte(di_grammar_matcher *m, uint8_t byte) {
    const di_grammar *g = m->g;
    m->oom = false;
    if (m->eos_done || !begin_set(m)) return false;
    uint32_t k = m->n_sets, begin = m->n_items;
    const mt_set *prev = &m->sets[k - 1];
    for (uint32_t si = prev->scan_start; si < m->n_scans; si++) {
        mt_item it = m->items[m->scans[si]];
        if (gb_bits_has(&g->classes[SYM_VAL(g->syms[it.pos])], byte))
            if (!add_item(m, begin, it.pos + 1, it.origin, 0)) break;
    }
    if (m->n_items == begin || m->oom) {
        m->n_items = begin;
        m->sets[k] = (mt_set){m->n_items, m->n_scans, m->n_waits, 0, 0};
        return false;
    }
    if (!close_set(m, k, begin)) {
        m->n_items = begin;
        m->sets[k] = (mt_set){m->n_items, m->n_scans, m->n_waits, 0, 0};
        return false;
    }
    m->n_sets = k + 1;
    return true;
}

/* Builds set 0: the prediction of $start. */
static bool init_state(di_grammar_matcher *m) {
    m->n_items = m->n_scans = m->n_waits = m->n_sets = m->n_toks = 0;
    m->n_sid_valid = 0;
    m->eos_done = false;
    m->oom = false;
    if (!begin_set(m)) return false;
    const di_grammar *g = m->g;
    add_item(m, 0, g->alt_pos[g->rule_alt[g->start_rule]], 0, 0);
    if (m->oom || !close_set(m, 0, 0)) return false;
    m->n_sets = 1;
    return true;
}

di_status di_grammar_matcher_create(const di_grammar *g, const di_grammar_vocab *vocab,
                                    di_grammar_matcher **out, di_error *err) {
    *out = NULL;
    if (!g) return di_error_set(err, DI_ERR_INVALID_ARG, "grammar is NULL");
    di_grammar_matcher *m = calloc(1, sizeof *m);
    if (!m) return di_error_set(err, DI_ERR_NOMEM, "out of memory");
    m->g = g;
    m->vocab = vocab;
    if (!init_state(m)) {
        di_grammar_matcher_free(m);
        return di_error_set(err, DI_ERR_NOMEM, "out of memory (initial parser state)");
    }
    *out = m;
    return DI_OK;
}

void di_grammar_matcher_free(di_grammar_matcher *m) {
    if (!m) return;
    if (m->cache) m->cache_free(m->cache);
    free(m->items);
    free(m->sets);
    free(m->scans);
    free(m->waits);
    free(m->ht_idx);
    free(m->ht_gen);
    free(m->tok_sets);
    free(m->tok_eos);
    free(m->sids);
    free(m);
}

void di_grammar_matcher_reset(di_grammar_matcher *m) {
    mt_truncate(m, 1);
    m->n_toks = 0;
    m->eos_done = false;
}

bool di_grammar_matcher_advance_bytes(di_grammar_matcher *m, const uint8_t *bytes, size_t n) {
    uint32_t keep = m->n_sets;
    for (size_t i = 0; i < n; i++) {
        if (!mt_push_byte(m, bytes[i])) {
            mt_truncate(m, keep);
            return false;
        }
    }
    return true;
}

static bool push_tok(di_grammar_matcher *m, bool eos) {
    uint32_t need = m->n_toks + 1, c1 = m->cap_toks, c2 = m->cap_toks;
    if (!grow_arr((void **)&m->tok_sets, &c1, need, sizeof(uint32_t))) return false;
    if (!grow_arr((void **)&m->tok_eos, &c2, need, 1)) return false;
    m->cap_toks = c1 < c2 ? c1 : c2;
    m->tok_sets[m->n_toks] = m->n_sets;
    m->tok_eos[m->n_toks] = eos;
    m->n_toks++;
    return true;
}

bool di_grammar_matcher_advance_token(di_grammar_matcher *m, uint32_t token) {
    const di_grammar_vocab *v = m->vocab;
    if (!v || token >= v->n_tokens || m->eos_done) return false;
    uint8_t f = v->flags[token];
    if (f == DI_GRAMMAR_TOKEN_EOS) {
        if (!mt_cur(m)->accept || !push_tok(m, true)) return false;
        m->eos_done = true;
        return true;
    }
    uint64_t a = v->off[token], b = v->off[token + 1];
    if (f != DI_GRAMMAR_TOKEN_NORMAL || a == b) return false;
    uint32_t keep = m->n_sets;
    if (!di_grammar_matcher_advance_bytes(m, v->data + a, (size_t)(b - a))) return false;
    if (!push_tok(m, false)) {
        mt_truncate(m, keep);
        return false;
    }
    return true;
}

di_status di_grammar_matcher_rollback(di_grammar_matcher *m, uint32_t n_tokens) {
    if (n_tokens > m->n_toks) return DI_ERR_INVALID_ARG;
    if (n_tokens == 0) return DI_OK;
    uint32_t first = m->n_toks - n_tokens;
    /* tok_sets[i] is n_sets after token i; before token `first` it was the
     * value after token first-1, or 1 (the initial set). */
    uint32_t target = first ? m->tok_sets[first - 1] : 1;
    mt_truncate(m, target);
    m->n_toks = first;
    m->eos_done = first ? m->tok_eos[first - 1] : false;
    return DI_OK;
}

uint32_t di_grammar_matcher_n_tokens(const di_grammar_matcher *m) { return m->n_toks; }

bool di_grammar_matcher_is_accepting(const di_grammar_matcher *m) { return mt_cur(m)->accept != 0; }

bool di_grammar_matcher_is_terminated(const di_grammar_matcher *m) {
    return m->eos_done || mt_n_scans(m) == 0;
}

void di_grammar_matcher_next_bytes(const di_grammar_matcher *m, bool next[256]) {
    memset(next, 0, 256 * sizeof next[0]);
    if (m->eos_done) return;
    /* the scan items of the current set wait for one byte of their class */
    const di_grammar *g = m->g;
    uint32_t first = mt_cur(m)->scan_start, end = first + mt_n_scans(m);
    for (uint32_t si = first; si < end; si++) {
        const gb_bits *c = &g->classes[SYM_VAL(g->syms[m->items[m->scans[si]].pos])];
        for (int b = 0; b < 256; b++) next[b] |= gb_bits_has(c, (uint8_t)b);
    }
}
