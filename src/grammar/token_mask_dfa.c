/* The local DFA of the allowed-token masks (token_mask.c has the
 * overview): the local key of a set, the local parser seeded with a set's
 * items, the DFA over the local parser's sets, built lazily one byte group
 * at a time (mt_step_row), and walk paths set up along its rows
 * (mt_jump_path, for the walk's and the length descends' jumps). The
 * lowest of the mask files: the others call it, it calls none of them. */
#include "grammar/token_mask_internal.h"

#include <stdlib.h>
#include <string.h>

void mt_dfa_free(ldfa *d) {
    mt_kt_free(&d->states);
    for (uint32_t b = 0; b < d->n_rblk; b++) free(d->rblk[b]);
    free(d->rblk), free(d->loop), free(d->visits), free(d->loop_known), free(d->cloop), free(d->rem);
    free(d->cx);
    memset(d, 0, sizeof *d);
}

/* Sorts (a, b, c) triples and drops duplicates; returns the new count. */
uint32_t mt_sort_triples(uint32_t *k, uint32_t n) {
    for (uint32_t i = 1; i < n; i++) { /* insertion sort: sets are small */
        uint32_t a = k[3 * i], b = k[3 * i + 1], d = k[3 * i + 2], j = i;
        while (j > 0) {
            uint32_t *p = k + 3 * (j - 1);
            if (p[0] < a || (p[0] == a && (p[1] < b || (p[1] == b && p[2] <= d)))) break;
            memcpy(k + 3 * j, p, 3 * sizeof *k);
            j--;
        }
        k[3 * j] = a, k[3 * j + 1] = b, k[3 * j + 2] = d;
    }
    uint32_t m = 0;
    for (uint32_t i = 0; i < n; i++)
        if (!m || memcmp(k + 3 * (m - 1), k + 3 * i, 3 * sizeof *k)) memmove(k + 3 * m, k + 3 * i, 3 * sizeof *k), m++;
    return m;
}

/* ---- local classification ---------------------------------------------- */


static uint32_t canon_aux(const di_grammar *g, const di_grammar_vocab *v, const mt_item *it) {
    uint32_t s = g->syms[it->pos];
    if (SYM_KIND(s) != SYM_REP) return it->aux;
    const gb_rep *rp = &g->reps[SYM_VAL(s)];
    uint32_t lim = canon_lim(v);
    uint32_t to_min = it->aux >= rp->min ? 0 : rp->min - it->aux;
    uint32_t to_max = rp->max == GB_INF ? lim : rp->max - it->aux;
    if (to_min > lim) to_min = lim;
    if (to_max > lim) to_max = lim;
    return to_min << 16 | to_max;
}

uint32_t mt_set_key(mt_mask_cache *c, const di_grammar_matcher *m, uint32_t k, mt_key_kind kind) {
    const mt_set *s = &m->sets[k], *e = &m->sets[k + 1];
    uint32_t n = (e->scan_start - s->scan_start) + (e->wait_start - s->wait_start);
    if (!ensure_key(c, 3 * n + 3)) return UINT32_MAX;
    uint32_t q = 0;
    for (int pass = 0; pass < 2; pass++) {
        const uint32_t *idx = pass ? m->waits : m->scans;
        uint32_t a = pass ? s->wait_start : s->scan_start, z = pass ? e->wait_start : e->scan_start;
        for (uint32_t i = a; i < z; i++) {
            const mt_item *it = &m->items[idx[i]];
            c->key[q++] = it->pos;
            if (kind == MT_KEY_LOCAL) c->key[q++] = it->origin == k;
            else c->key[q++] = it->origin == k ? KEY_SELF : m->sids[it->origin];
            c->key[q++] = kind == MT_KEY_IDS ? it->aux : canon_aux(m->g, m->vocab, it);
        }
    }
    return q;
}

/* Builds the local key of the current set into c->key; returns its length
 * in words (triples pos, here?, canon aux). */
uint32_t mt_local_key(di_grammar_matcher *m) {
    uint32_t q = mt_set_key(m->cache, m, m->n_sets - 1, MT_KEY_LOCAL);
    return q == UINT32_MAX ? q : 3 * mt_sort_triples(m->cache->key, q / 3);
}

/* Seeds the local parser with the current set's items: origin "here" -> 1,
 * anything earlier -> 0 (the outside). One representative per key triple
 * (items that differ only in which outside set they came from behave the
 * same until they try to complete, which is exactly the escape). */
bool mt_seed_local(di_grammar_matcher *m) {
    mt_mask_cache *c = m->cache;
    if (!c->lp) {
        di_error err;
        if (di_grammar_matcher_create(m->g, m->vocab, &c->lp, &err)) return false;
        c->lp->local = true;
    }
    di_grammar_matcher *L = c->lp;
    uint32_t k = m->n_sets - 1;
    const mt_set *s = &m->sets[k], *e = &m->sets[k + 1];
    uint32_t n = (e->scan_start - s->scan_start) + (e->wait_start - s->wait_start);
    mt_truncate(L, 1);
    L->eos_done = false;
    /* set 0 of the local parser: empty (the outside) */
    L->n_items = L->n_scans = L->n_waits = 0;
    L->sets[0] = (mt_set){0, 0, 0, 0, 0};
    if (n > L->cap_items) {
        mt_item *it = di_realloc_array(L->items, n, sizeof *it);
        if (!it) return false;
        L->items = it, L->cap_items = n;
    }
    if (n > L->cap_scans) {
        uint32_t *x = di_realloc_array(L->scans, n, sizeof *x);
        if (!x) return false;
        L->scans = x, L->cap_scans = n;
    }
    if (n > L->cap_waits) {
        uint32_t *x = di_realloc_array(L->waits, n, sizeof *x);
        if (!x) return false;
        L->waits = x, L->cap_waits = n;
    }
    if (L->cap_sets < 3) {
        mt_set *x = di_realloc_array(L->sets, 16, sizeof *x);
        if (!x) return false;
        L->sets = x, L->cap_sets = 16;
    }
    /* scans first, then waits, deduplicated by (pos, origin class, aux) */
    for (int pass = 0; pass < 2; pass++) {
        const uint32_t *idx = pass ? m->waits : m->scans;
        uint32_t a = pass ? s->wait_start : s->scan_start, z = pass ? e->wait_start : e->scan_start;
        for (uint32_t i = a; i < z; i++) {
            mt_item it = m->items[idx[i]];
            it.origin = it.origin == k ? 1 : 0;
            bool dup = false;
            for (uint32_t j = 0; j < L->n_items && !dup; j++) {
                const mt_item *o = &L->items[j];
                dup = o->pos == it.pos && o->origin == it.origin &&
                      canon_aux(m->g, m->vocab, o) == canon_aux(m->g, m->vocab, &it);
            }
            if (dup) continue;
            L->items[L->n_items] = it;
            if (pass) L->waits[L->n_waits++] = L->n_items;
            else L->scans[L->n_scans++] = L->n_items;
            L->n_items++;
        }
    }
    L->sets[1] = (mt_set){0, 0, 0, 0, 0};
    L->sets[2] = (mt_set){L->n_items, L->n_scans, L->n_waits, 0, 0};
    L->n_sets = 2;
    L->n_sid_valid = 0;
    return true;
}

/* Interns the content of local set k (origins as ids; 0 = outside) and
 * makes sure its DFA row exists. UINT32_MAX on no memory. */
uint32_t mt_local_sid(mt_mask_cache *c, di_grammar_matcher *L, uint32_t k) {
    ldfa *d = &c->dfa;
    uint32_t q = mt_set_key(c, L, k, MT_KEY_IDS_CANON);
    if (q == UINT32_MAX) return UINT32_MAX;
    uint32_t n = mt_sort_triples(c->key, q / 3);
    bool added;
    uint32_t id = mt_kt_intern(&d->states, c->key, 3 * n, &added);
    if (id == UINT32_MAX || !added) return id;
    if (id / DFA_ROW_BLOCK >= d->n_rblk) {
        if (d->n_rblk == d->cap_rblk) {
            uint32_t nb = d->cap_rblk ? d->cap_rblk * 2 : 4;
            uint32_t **x = di_realloc_array(d->rblk, nb, sizeof *x);
            if (!x) return UINT32_MAX;
            d->rblk = x, d->cap_rblk = nb;
        }
        if (!(d->rblk[d->n_rblk] = di_malloc_array((size_t)DFA_ROW_BLOCK * 256, sizeof(uint32_t)))) return UINT32_MAX;
        d->n_rblk++;
    }
    if (id >= d->cap) {
        uint32_t nc = d->cap ? d->cap * 2 : 256;
        gb_bits *lp = di_realloc_array(d->loop, nc, sizeof *lp);
        if (!lp) return UINT32_MAX;
        d->loop = lp;
        lp = di_realloc_array(d->cloop, nc, sizeof *lp);
        if (!lp) return UINT32_MAX;
        d->cloop = lp;
        uint32_t *rm = di_realloc_array(d->rem, nc, sizeof *rm);
        if (!rm) return UINT32_MAX;
        d->rem = rm;
        uint32_t *vi = di_realloc_array(d->visits, nc, sizeof *vi);
        if (!vi) return UINT32_MAX;
        d->visits = vi;
        lp = di_realloc_array(d->cx, nc, sizeof *lp);
        if (!lp) return UINT32_MAX;
        d->cx = lp;
        uint8_t *lk = realloc(d->loop_known, nc);
        if (!lk) return UINT32_MAX;
        d->loop_known = lk, d->cap = nc;
    }
    memset(drow(d, id), 0, 256 * sizeof(uint32_t));
    d->visits[id] = 0, d->loop_known[id] = 0;
    return id;
}

/* One DFA step from the state at depth d (materialized) on byte b. */
static uint32_t step(mt_mask_cache *c, di_grammar_matcher *L, uint32_t b) {
    c->n_steps++;
    if (!mt_push_byte(L, (uint8_t)b)) return L->oom ? UINT32_MAX : ROW_DEAD;
    uint32_t k = L->n_sets - 1;
    uint32_t id = mt_local_sid(c, L, k);
    if (id == UINT32_MAX) return UINT32_MAX;
    L->sids[k] = id;
    return (id + 2) | (L->sets[k].escaped ? ROW_ESC : 0);
}

/* Steps the top set S of L (materialized) on byte b and records the DFA
 * row (S, x) for every byte x that steps the same way: x and b belong to
 * the same classes of S's scanning items, so the same items scan and the
 * new set is the same. A JSON string interior has about a dozen such byte
 * groups, so learning a state costs a dozen parser steps, not 256. */
uint32_t mt_step_row(mt_mask_cache *c, di_grammar_matcher *L, uint32_t S, uint32_t b) {
    gb_bits same = byte_group(L, (uint8_t)b);
    uint32_t e = step(c, L, b);
    if (e == UINT32_MAX) return e;
    uint32_t *row = drow(&c->dfa, S);
    for (int w = 0; w < 4; w++)
        for (uint64_t bits = same.w[w]; bits; bits &= bits - 1) row[w * 64 + __builtin_ctzll(bits)] = e;
    return e;
}

/* Sets up the walk path from depth dep0 (the path arrays hold what is
 * above) down to frontier node f->node: the bytes are those of the first
 * token below it, each state comes from the DFA rows (stepping the local
 * parser where a row is not known yet). false when out of memory, or when
 * a step on the way dies, which a state that loops on all string content
 * rules out (the caller then gives up, which stays exact). */
bool mt_jump_path(mt_mask_cache *c, di_grammar_matcher *L, const di_grammar_vocab *v, uint32_t dep0,
                  const mt_frontier *f, uint32_t *md) {
    uint32_t dj = v->depth[f->node];
    const uint8_t *s = v->data + v->off[v->trie_tok[f->tok_lo]];
    if (*md > dep0) mt_truncate(L, 2 + dep0), *md = dep0;
    for (uint32_t dd = dep0; dd < dj; dd++) {
        uint8_t b = s[dd];
        uint32_t S = c->path_sid[dd];
        c->path_byte[dd] = b;
        uint32_t e = drow(&c->dfa, S)[b];
        if (e == ROW_UNKNOWN) {
            if (!materialize(c, L, md, dd)) return false;
            e = mt_step_row(c, L, S, b);
            if (e == UINT32_MAX) return false;
            if (e != ROW_DEAD) *md = dd + 1;
        }
        if (e == ROW_DEAD) return false;
        c->path_sid[dd + 1] = (e & ~ROW_ESC) - 2;
        c->esc[dd + 1] = c->esc[dd] | ((e & ROW_ESC) != 0);
        c->path_ch[dd + 1] = c->path_ch[dd] + ((b & 0xC0) != 0x80);
        c->pc_u8[dd + 1] = mt_u8_next(c->pc_u8[dd], b);
        c->pc_ok[dd + 1] = c->pc_ok[dd] && c->pc_u8[dd + 1] != MT_U8_BAD && (b >= 0x80 || mt_json_content(b));
        c->anc[dd + 1] = c->j_anc;
        if (c->j_anc != NO_ANCHOR) c->anc_dep[dd + 1] = 0, c->anc_u8[dd + 1] = c->pc_u8[dd + 1];
    }
    return true;
}
