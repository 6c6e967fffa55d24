/* Allowed-token masks.
 *
 * The reference (fill_mask_slow) feeds each token through the parser. The
 * fast path has three levels, each a cache in front of the next:
 *
 * 1. Whole-state cache. Every Earley set gets a content id: its scanning and
 *    waiting items, with each origin replaced by the content id of the origin
 *    set. Equal ids have the same future, so the mask is a pure function of
 *    the id (inside a long string every token lands in the same state).
 *
 * 2. Local classification (the idea behind XGrammar's context-independent
 *    tokens, phrased for Earley). A parse that starts in set B and never
 *    completes an item whose origin lies before B only reads set B's own
 *    items, so whether a token can be consumed that way depends only on
 *    B's items with origins reduced to "here" / "outside" (the local key).
 *    Per local key we walk the vocabulary trie once with a local parser in
 *    which set 0 stands for "outside": a token consumed entirely is allowed
 *    in every state with that key; a token that dies without ever trying to
 *    complete into "outside" is rejected; the rest (few: those that close
 *    the enclosing structure and go on) are "uncertain".
 *
 *    Classifications are also published in the vocabulary's shared cache
 *    under a structural key (shared_cache.c), so an isomorphic state of
 *    another grammar or matcher (a JSON string interior, the start of any
 *    value) never walks the vocabulary again.
 *
 *    The walk steps a DFA over local parser states, built lazily. A step is
 *    computed once per group of bytes that the state's scanning items do
 *    not tell apart (mt_step_row). Hot states learn their self-loop bytes, and whether
 *    every UTF-8 character loops too (string interiors); then whole trie
 *    subtrees made of looping bytes, or of well-formed UTF-8 whose ASCII
 *    bytes loop, are accepted without being visited. Bounded repetitions
 *    (maxLength strings) never loop exactly, but step to the same state with
 *    the count one further (is_shift): subtrees shallower than the count
 *    left are accepted the same way.
 *
 *    The root of a classification learns its loops before the walk (or
 *    takes them from the previous root when it is that root's counts
 *    further on: the next step of a maxLength string). A string interior
 *    then takes the fast path: per-tokenizer tables (vocab.c) hold the JSON
 *    string content tokens by character count, so their bits come from one
 *    table row (all of them, or those of at most the repetitions left), and
 *    the rest lies below the content frontier (vocab.c's list of the nodes
 *    where a content path first meets a quote, backslash, control byte or
 *    ill-formed character, with the characters on each path): count
 *    descend takes those nodes from the list instead of walking the few
 *    thousand content nodes on the way to them, drops the ones past the
 *    count left and those whose byte is dead from the state that many
 *    characters on (a chain of count states on one content byte; rows of
 *    a count state taken from the root's where the step cannot read the
 *    counts), and walks the others. A deeper
 *    state that loops on all string content (an object key that became any
 *    string, say) accepts in one pass the run of sibling subtrees made of
 *    content only (vocab.c's cskip: their tokens are contiguous in trie
 *    order) instead of visiting each (every visit there is a cache miss
 *    with 128k tokens). Deeper states of a bounded string, the counts
 *    further on, inherit their anchor's count loops (also as their own,
 *    when they get hot, instead of learning them), and decide whole
 *    subtrees by their tokens' character counts.
 *
 *    Class descend: at the root of a classification that is no string
 *    interior, the largest set C of ASCII bytes that step alike (a
 *    pattern's class); when C steps alike from every state along the way
 *    until it dies or loops (a length counted in the automaton: each count
 *    a new state), the tokens made of C bytes are decided by their length
 *    (per matcher table by class, built when the class comes back, with
 *    the class frontier: the nodes where a C path first leaves C), and
 *    only the frontier subtrees whose first step is not known dead are
 *    walked.
 *
 *    The key of an extra object member (mt_open_string_root) takes the fast
 *    path too, without learning loops (nor does any state of its walk),
 *    and walks only the subtrees of the content frontier (content descend
 *    from the root, every other token being a content token the table
 *    allows), each from the state the rows give for its path.
 *
 *    Content descend: when the children of a node (or the root) are read
 *    from a state that loops on all string content, or that steps to one
 *    such state on every character but a few ASCII bytes (an object key:
 *    any string, except the first bytes of the named keys), and the path
 *    to the node is content, every token below is accepted except those
 *    under the node's content frontier (per-tokenizer list, vocab.c: the
 *    first quote, backslash, control byte or ill-formed character on each
 *    content path) and under the excepted children. Only those subtrees
 *    are walked, each from the state the DFA rows give for its path; at
 *    the root the accepted tokens are one row of the content table.
 *
 * 3. Uncertain tokens are checked against the real state, in trie order so
 *    that consecutive tokens share the parse of their common prefix. They
 *    step whole-state ids (level 1's), whose next id per byte is kept in
 *    rows across masks: the parser steps only where a row is new. Right
 *    after a backslash in a string every token that starts with an escape
 *    character is uncertain (the escape completes into the outside); they
 *    then cost a few row lookups each; and when the string reads every ASCII
 *    content byte back into itself after the escape character, the tokens
 *    of that character and ASCII content (most of them, per-tokenizer
 *    esc_tail) are allowed without stepping their bytes (escape_loops).
 *    A row is filled per byte group (the bytes the scanning items do not
 *    tell apart), as mt_step_row does for the local DFA.
 *
 * Caches are bounded; when one fills up it is emptied (ids are then
 * recomputed lazily). Masks and rows are stored in fixed-size blocks, so
 * that growing a cache never copies it (a doubling array of 128k-token
 * masks or 1 KiB rows cost up to a millisecond per growth).
 *
 * This file holds the entry points, levels 1 and 3 and the local entries;
 * level 2 lies in token_mask_dfa.c (the local DFA), token_mask_loops.c
 * (what hot states learn, the content fast path), token_mask_walk.c (the
 * trie walk, content descend) and token_mask_length.c (class and count
 * descend); token_mask_internal.h holds what they share. */
#include "grammar/token_mask_internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- cache lifetime ------------------------------------------------------ */

static void flush_states(di_grammar_matcher *m) {
    mt_mask_cache *c = m->cache;
    mt_kt_free(&c->states);
    free(c->mask_of), c->mask_of = NULL, c->cap_mask_of = 0;
    c->n_masks = 0;
    m->n_sid_valid = 0;
    free(c->rrow_of), c->rrow_of = NULL, c->cap_rrow_of = 0;
    c->n_rrows = 0;
}

static void flush_locals(mt_mask_cache *c) {
    for (uint32_t i = 0; i < c->locals.n_ids; i++)
        if (!c->lents[i].shared) free(c->lents[i].acc), free(c->lents[i].unc);
    mt_kt_free(&c->locals);
    c->local_bytes = 0;
}

void mt_mask_cache_free(mt_mask_cache *c) {
    if (!c) return;
    flush_locals(c);
    mt_dfa_free(&c->dfa);
    free(c->path_sid), free(c->path_byte);
    mt_kt_free(&c->states);
    free(c->lents);
    free(c->mask_of);
    for (uint32_t b = 0; b < c->n_mblocks; b++) free(c->mblocks[b]);
    free(c->mblocks);
    di_grammar_matcher_free(c->lp);
    free(c->key);
    free(c->esc);
    free(c->anc), free(c->anc_dep), free(c->anc_u8), free(c->path_ch), free(c->pc_ok), free(c->pc_u8);
    free(c->lmap);
    free(c->jt), free(c->csame);
    for (uint32_t b = 0; b < c->n_rblocks; b++) free(c->rblocks[b]);
    free(c->rrow_of), free(c->rblocks), free(c->rpath);
    for (uint32_t k = 0; k < c->n_ctabs; k++)
        free(c->ctabs[k].rows), free(c->ctabs[k].fr), free(c->ctabs[k].fdep), free(c->ctabs[k].fbyte),
            free(c->ctabs[k].dbytes);
    mt_struct_scratch_free(&c->ss);
    free(c);
}

/* ---- whole-state ids ---------------------------------------------------- */

/* Content id of set k (all lower sets have ids); UINT32_MAX on no memory. */
static uint32_t state_id(di_grammar_matcher *m, uint32_t k) {
    mt_mask_cache *c = m->cache;
    const mt_set *s = &m->sets[k];
    uint32_t q = mt_set_key(c, m, k, MT_KEY_IDS);
    if (q == UINT32_MAX) return UINT32_MAX;
    c->key[q++] = KEY_ACCEPT, c->key[q++] = s->accept, c->key[q++] = 0;
    uint32_t n = mt_sort_triples(c->key, q / 3);
    bool added;
    return mt_kt_intern(&c->states, c->key, 3 * n, &added);
}

/* Ids for all sets of the real parse; false on no memory. */
static bool update_sids(di_grammar_matcher *m) {
    mt_mask_cache *c = m->cache;
    if (c->states.n_ids > CACHE_MAX_STATES || c->states.n_data > CACHE_MAX_KEY_WORDS) flush_states(m);
    if (m->n_sets > m->cap_sids) {
        uint32_t nc = m->cap_sids ? m->cap_sids : 256;
        while (nc < m->n_sets) nc *= 2;
        uint32_t *s = di_realloc_array(m->sids, nc, sizeof *s);
        if (!s) return false;
        m->sids = s, m->cap_sids = nc;
    }
    for (uint32_t k = m->n_sid_valid; k < m->n_sets; k++) {
        uint32_t id = state_id(m, k);
        if (id == UINT32_MAX) return false;
        m->sids[k] = id;
        m->n_sid_valid = k + 1;
    }
    return true;
}

/* Hash of local key k (n words of triples pos, here?, canonical aux)
 * without the counts; never 0 (0 marks an empty slot of c->refused). */
static uint32_t items_hash(const uint32_t *k, uint32_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
    for (uint32_t i = 0; i + 2 < n; i += 3) {
        h ^= (uint64_t)k[i] << 1 | (k[i + 1] & 1);
        h *= 0xff51afd7ed558ccdull;
        h ^= h >> 32;
    }
    return (uint32_t)h | 1;
}

static bool refused_has(const mt_mask_cache *c, uint32_t h) {
    for (uint32_t q = 0; q < REFUSED_N; q++)
        if (c->refused[q] == h) return true;
    return false;
}

static mt_local_entry *local_entry_for(di_grammar_matcher *m) {
    mt_mask_cache *c = m->cache;
    if (c->local_bytes > CACHE_MAX_LOCAL_BYTES) flush_locals(c);
    uint32_t n = mt_local_key(m);
    if (n == UINT32_MAX) return NULL;
    bool added;
    uint32_t id = mt_kt_intern(&c->locals, c->key, n, &added);
    if (id == UINT32_MAX) return NULL;
    if (id >= c->cap_lents) {
        uint32_t nc = c->cap_lents ? c->cap_lents * 2 : 64;
        while (nc <= id) nc *= 2;
        mt_local_entry *x = di_realloc_array(c->lents, nc, sizeof *x);
        if (!x) return NULL;
        c->lents = x, c->cap_lents = nc;
    }
    mt_local_entry *le = &c->lents[id];
    if (!added) return le;
    memset(le, 0, sizeof *le);
    /* A cheap classification is just done. An expensive one may have been
     * done already by another matcher (any grammar) on an isomorphic state:
     * past a small budget, look it up by structural key. */
    mt_shared_cache *sh = m->vocab->shared;
    uint32_t sn = UINT32_MAX;
    int r = mt_seed_local(m) ? mt_classify(m, le, sh ? m->vocab->share_budget : 0, false) : CLS_NOMEM;
    if (r == CLS_OVER) {
        /* the key is rebuilt: classify used c->key as scratch */
        n = mt_local_key(m);
        uint32_t ih = n != UINT32_MAX ? items_hash(c->key, n) : 0;
        if (ih && !refused_has(c, ih)) {
            sn = mt_struct_key(&c->ss, m->g, canon_lim(m->vocab), c->key, n);
            if (sn == UINT32_MAX) c->refused[c->n_refused++ % REFUSED_N] = ih;
        }
        if (sn != UINT32_MAX) {
            const mt_local_entry *se = mt_shared_find(sh, c->ss.out, sn);
            if (se) {
                free(le->acc), free(le->unc);
                *le = *se;
                return le;
            }
        }
        r = mt_classify(m, le, 0, true); /* the local parser is still seeded */
    }
    if (r != CLS_OK) {
        /* leave a consistent entry: nothing accepted, all uncertain is
         * not representable cheaply, so drop the whole local cache */
        free(le->acc), free(le->unc);
        memset(le, 0, sizeof *le);
        flush_locals(c);
        return NULL;
    }
    size_t bytes = di_grammar_vocab_mask_words(m->vocab) * sizeof(uint32_t) + (size_t)le->n_unc * sizeof(uint32_t);
    if (sn != UINT32_MAX) {
        const mt_local_entry *se = mt_shared_insert(sh, c->ss.out, sn, le, bytes);
        if (se && !le->shared) { /* published first by another matcher */
            free(le->acc), free(le->unc);
            *le = *se;
        }
    }
    if (!le->shared) c->local_bytes += bytes;
    return le;
}

/* Grows the index *a (0 = absent) to cover entry i, new entries 0; false
 * when out of memory (*a unchanged). */
static bool cover_index(uint32_t **a, uint32_t *cap, uint32_t i) {
    if (i < *cap) return true;
    uint32_t nc = *cap ? *cap : 1024;
    while (nc <= i) nc *= 2;
    uint32_t *x = di_realloc_array(*a, nc, sizeof *x);
    if (!x) return false;
    memset(x + *cap, 0, (nc - *cap) * sizeof *x);
    *a = x, *cap = nc;
    return true;
}

/* Whole-state mask number k (k < n_masks). */
static uint32_t *mask_at(const mt_mask_cache *c, uint32_t k, size_t words) {
    return c->mblocks[k / MASK_BLOCK] + (size_t)(k % MASK_BLOCK) * words;
}

/* Remembers the mask of whole state sid (nothing when out of memory: the
 * mask is then computed again next time). Past CACHE_MAX_MASK_BYTES every
 * mask is dropped and the blocks are reused. */
static void store_mask(mt_mask_cache *c, uint32_t sid, const uint32_t *mask, size_t words) {
    if ((size_t)(c->n_masks + 1) * words * sizeof(uint32_t) > CACHE_MAX_MASK_BYTES) {
        if (c->mask_of) memset(c->mask_of, 0, c->cap_mask_of * sizeof *c->mask_of);
        c->n_masks = 0;
    }
    if (!cover_index(&c->mask_of, &c->cap_mask_of, sid)) return;
    uint32_t b = c->n_masks / MASK_BLOCK;
    if (b == c->n_mblocks) {
        if (b == c->cap_mblocks) {
            uint32_t nc = c->cap_mblocks ? c->cap_mblocks * 2 : 8;
            uint32_t **x = di_realloc_array(c->mblocks, nc, sizeof *x);
            if (!x) return;
            c->mblocks = x, c->cap_mblocks = nc;
        }
        if (!(c->mblocks[b] = di_malloc_array((size_t)MASK_BLOCK * words, sizeof(uint32_t)))) return;
        c->n_mblocks++;
    }
    memcpy(mask_at(c, c->n_masks, words), mask, words * sizeof(uint32_t));
    c->mask_of[sid] = ++c->n_masks;
}

/* The whole-state row of state id S (made, all unknown, when absent);
 * NULL when out of memory. Past RROWS_MAX rows all are dropped first. */
static uint32_t *rrow(mt_mask_cache *c, uint32_t S) {
    if (S < c->cap_rrow_of && c->rrow_of[S]) {
        uint32_t k = c->rrow_of[S] - 1;
        return c->rblocks[k / RROW_BLOCK] + (size_t)(k % RROW_BLOCK) * 256;
    }
    if (c->n_rrows == RROWS_MAX) {
        memset(c->rrow_of, 0, c->cap_rrow_of * sizeof *c->rrow_of);
        c->n_rrows = 0;
    }
    if (!cover_index(&c->rrow_of, &c->cap_rrow_of, S)) return NULL;
    uint32_t b = c->n_rrows / RROW_BLOCK;
    if (b == c->n_rblocks) {
        if (b == c->cap_rblocks) {
            uint32_t nc = c->cap_rblocks ? c->cap_rblocks * 2 : 8;
            uint32_t **x = di_realloc_array(c->rblocks, nc, sizeof *x);
            if (!x) return NULL;
            c->rblocks = x, c->cap_rblocks = nc;
        }
        if (!(c->rblocks[b] = di_malloc_array((size_t)RROW_BLOCK * 256, sizeof(uint32_t)))) return NULL;
        c->n_rblocks++;
    }
    uint32_t *row = c->rblocks[b] + (size_t)(c->n_rrows % RROW_BLOCK) * 256;
    memset(row, 0, 256 * sizeof *row);
    c->rrow_of[S] = ++c->n_rrows;
    return row;
}

/* Checks the uncertain tokens against the real state, sharing prefixes
 * between neighbours in trie order; used when whole-state ids are not
 * available. */
static void check_uncertain_parse(di_grammar_matcher *m, const mt_local_entry *le, uint32_t *mask) {
    const di_grammar_vocab *v = m->vocab;
    const uint32_t base = m->n_sets;
    const uint8_t *prev = NULL;
    uint32_t prev_len = 0, ok_len = 0; /* bytes of prev pushed successfully */
    uint32_t fail_at = UINT32_MAX;     /* prev failed at this byte */
    for (uint32_t u = 0; u < le->n_unc; u++) {
        uint32_t t = le->unc[u];
        const uint8_t *b = v->data + v->off[t];
        uint32_t len = (uint32_t)(v->off[t + 1] - v->off[t]);
        uint32_t lcp = 0;
        if (prev)
            while (lcp < len && lcp < prev_len && b[lcp] == prev[lcp]) lcp++;
        if (fail_at != UINT32_MAX && lcp > fail_at) continue; /* same failing prefix */
        uint32_t from = lcp < ok_len ? lcp : ok_len;
        mt_truncate(m, base + from);
        uint32_t j = from;
        while (j < len && mt_push_byte(m, b[j])) j++;
        prev = b, prev_len = len, ok_len = j;
        fail_at = j < len ? j : UINT32_MAX;
        if (j == len) mask[t >> 5] |= 1u << (t & 31);
    }
    mt_truncate(m, base);
}

/* Whole-state step of the real parse (m, top set at depth base + d with
 * id `from`) on byte b, through the rows: the parser steps (one per byte
 * group) only where the row is not known. Leaves the parser at depth
 * base + d. Returns the next id + 2, ROW_DEAD, or UINT32_MAX on no
 * memory. */
static uint32_t wstep(di_grammar_matcher *m, uint32_t base, uint32_t d, uint32_t from, uint8_t b) {
    mt_mask_cache *c = m->cache;
    uint32_t *row = rrow(c, from);
    if (!row) return UINT32_MAX;
    if (row[b] != ROW_UNKNOWN) return row[b];
    gb_bits same = byte_group(m, b);
    uint32_t e;
    if (mt_push_byte(m, b)) {
        uint32_t id = state_id(m, base + d);
        mt_truncate(m, base + d);
        if (id == UINT32_MAX) return UINT32_MAX;
        e = id + 2;
    } else if (m->oom) {
        return UINT32_MAX;
    } else {
        e = ROW_DEAD;
    }
    row = rrow(c, from); /* state_id may have added states, not rows: still there */
    for (int w = 0; row && w < 4; w++)
        for (uint64_t bits = same.w[w]; bits; bits &= bits - 1) row[w * 64 + __builtin_ctzll(bits)] = e;
    return e;
}

/* Whether the real state sid (the top set, at depth base), after the
 * escape character e, is one that every ASCII string content byte leads
 * back to (a string interior without a length bound or pattern): then
 * every token e + ASCII content (vocab esc_tail) is allowed right after a
 * backslash, without stepping its bytes. A few dozen row lookups once
 * the rows are known, one parser step per byte group before. Leaves the
 * parser at depth base. 1 yes, 0 no, -1 no memory. */
static int escape_loops(di_grammar_matcher *m, uint32_t sid, uint8_t e) {
    const uint32_t base = m->n_sets;
    uint32_t r = wstep(m, base, 0, sid, e);
    if (r == UINT32_MAX) return -1;
    if (r == ROW_DEAD) return 0;
    uint32_t X = r - 2;
    if (!mt_push_byte(m, e)) return m->oom ? -1 : 0; /* alive: the row says so */
    m->sids[base] = X;
    m->n_sid_valid = base + 1;
    int ok = 1;
    for (uint32_t x = 0x20; x < 0x80 && ok == 1; x++) {
        if (!mt_json_content((uint8_t)x)) continue;
        uint32_t q = wstep(m, base, 1, X, (uint8_t)x);
        ok = q == UINT32_MAX ? -1 : q == X + 2;
    }
    mt_truncate(m, base);
    return ok;
}

/* Checks the uncertain tokens against the real state sid (the top set's
 * whole-state id), stepping whole-state ids rather than the parser: equal
 * ids have the same future, so the id after a byte is a function of the id
 * before it, kept in rows (rrow) across masks. The parser only steps where
 * a row is not known yet, materialized along the token's path first. The
 * uncertain tokens after a backslash in a JSON string (every token that
 * starts with an escape character: some 3k with 128k tokens) step through
 * a few string states, so after the first bytes almost every step is a
 * row lookup; and when the string reads every ASCII content byte back
 * into itself after the escape (escape_loops), those made of the escape
 * character and ASCII content (most of them) are allowed without reading
 * their bytes (each token visited costs cache misses with 128k tokens). */
static void check_uncertain(di_grammar_matcher *m, const mt_local_entry *le, uint32_t *mask, uint32_t sid) {
    mt_mask_cache *c = m->cache;
    const di_grammar_vocab *v = m->vocab;
    const uint32_t base = m->n_sets;
    size_t need = (size_t)base + v->max_len + 1;
    if (sid == UINT32_MAX || m->n_sid_valid != base) {
        check_uncertain_parse(m, le, mask);
        return;
    }
    if (!c->rpath && !(c->rpath = di_malloc_array((size_t)v->max_len + 1, sizeof(uint32_t)))) {
        check_uncertain_parse(m, le, mask);
        return;
    }
    if (m->cap_sids < need) {
        uint32_t *x = need <= UINT32_MAX ? di_realloc_array(m->sids, need, sizeof *x) : NULL;
        if (!x) {
            check_uncertain_parse(m, le, mask);
            return;
        }
        m->sids = x, m->cap_sids = (uint32_t)need;
    }
    uint32_t *rp = c->rpath;
    rp[0] = sid;
    uint32_t md = 0; /* bytes of the path pushed on the parser: n_sets == base + md */
    const uint8_t *prev = NULL;
    uint32_t prev_len = 0, ok_len = 0; /* bytes of prev stepped alive (rp[0 .. ok_len] hold) */
    uint32_t fail_at = UINT32_MAX;     /* prev died at this byte */
    uint8_t esc_ok[256] = {0};         /* per escape character: 0 not known yet, 1 its tails loop, 2 not */
    for (uint32_t u = 0; u < le->n_unc; u++) {
        uint32_t t = le->unc[u];
        uint8_t et = v->esc_tail[t];
        if (et) {
            if (!esc_ok[et]) {
                if (md) mt_truncate(m, base), md = 0;
                esc_ok[et] = escape_loops(m, sid, et) == 1 ? 1 : 2;
            }
            if (esc_ok[et] == 1) { /* prev stays the last token stepped */
                mask[t >> 5] |= 1u << (t & 31);
                continue;
            }
        }
        const uint8_t *b = v->data + v->off[t];
        uint32_t len = (uint32_t)(v->off[t + 1] - v->off[t]);
        uint32_t lcp = 0;
        if (prev)
            while (lcp < len && lcp < prev_len && b[lcp] == prev[lcp]) lcp++;
        if (fail_at != UINT32_MAX && lcp > fail_at) continue; /* same dying prefix */
        uint32_t j = lcp < ok_len ? lcp : ok_len;
        if (md > j) mt_truncate(m, base + j), md = j;
        while (j < len) {
            uint32_t *row = rrow(c, rp[j]);
            uint32_t e = row ? row[b[j]] : ROW_UNKNOWN;
            if (e == ROW_UNKNOWN) {
                /* step the parser: push the path up to here first */
                while (md < j && mt_push_byte(m, b[md])) {
                    m->sids[base + md] = rp[md + 1];
                    m->n_sid_valid = base + md + 1;
                    md++;
                }
                if (md < j) break; /* out of memory: the path was alive */
                gb_bits same = byte_group(m, b[j]);
                if (mt_push_byte(m, b[j])) {
                    uint32_t id = state_id(m, base + j);
                    if (id == UINT32_MAX) break;
                    m->sids[base + j] = id;
                    m->n_sid_valid = base + j + 1;
                    md = j + 1;
                    e = id + 2;
                } else if (m->oom) {
                    break;
                } else {
                    e = ROW_DEAD;
                }
                /* the whole byte group steps alike (state_id left the rows
                 * alone): the bytes of one group cost one parser step */
                for (int w = 0; row && w < 4; w++)
                    for (uint64_t bits = same.w[w]; bits; bits &= bits - 1) row[w * 64 + __builtin_ctzll(bits)] = e;
            }
            if (e == ROW_DEAD) break;
            rp[j + 1] = e - 2;
            j++;
        }
        prev = b, prev_len = len, ok_len = j;
        fail_at = j < len ? j : UINT32_MAX;
        if (j == len) mask[t >> 5] |= 1u << (t & 31);
    }
    mt_truncate(m, base);
}

/* ---- entry points -------------------------------------------------------- */

static di_status check_args(di_grammar_matcher *m, uint32_t *mask, size_t n_words, di_error *err) {
    if (!m->vocab) return di_error_set(err, DI_ERR_INVALID_ARG, "matcher has no vocabulary");
    if (!mask || n_words < di_grammar_vocab_mask_words(m->vocab))
        return di_error_set(err, DI_ERR_INVALID_ARG, "mask has %zu words, need %zu", n_words,
                            di_grammar_vocab_mask_words(m->vocab));
    memset(mask, 0, n_words * sizeof(uint32_t));
    return DI_OK;
}

static void set_eos(const di_grammar_matcher *m, uint32_t *mask) {
    if (m->eos_done || !mt_cur(m)->accept) return;
    for (uint32_t i = 0; i < m->vocab->n_eos; i++) mask[m->vocab->eos[i] >> 5] |= 1u << (m->vocab->eos[i] & 31);
}

di_status di_grammar_matcher_fill_mask_slow(di_grammar_matcher *m, uint32_t *mask, size_t n_words,
                                            di_error *err) {
    di_status s = check_args(m, mask, n_words, err);
    if (s) return s;
    const di_grammar_vocab *v = m->vocab;
    if (m->eos_done) return DI_OK;
    uint32_t base = m->n_sets;
    for (uint32_t t = 0; t < v->n_tokens; t++) {
        if (v->flags[t] != DI_GRAMMAR_TOKEN_NORMAL || v->off[t + 1] == v->off[t]) continue;
        if (di_grammar_matcher_advance_bytes(m, v->data + v->off[t], (size_t)(v->off[t + 1] - v->off[t]))) {
            mask[t >> 5] |= 1u << (t & 31);
            mt_truncate(m, base);
        }
    }
    set_eos(m, mask);
    return DI_OK;
}

/* Plain trie walk with the real parser: the fallback when a cache cannot
 * be built (no memory). */
static void trie_walk(di_grammar_matcher *m, uint32_t *mask) {
    const di_grammar_vocab *v = m->vocab;
    uint32_t base = m->n_sets;
    for (uint32_t i = 0; i < v->n_nodes;) {
        mt_truncate(m, base + v->depth[i]);
        if (!mt_push_byte(m, v->byte[i])) {
            i = v->skip[i];
            continue;
        }
        for (uint32_t k = v->tok_start[i]; k < v->tok_start[i + 1]; k++) {
            uint32_t t = v->trie_tok[k];
            mask[t >> 5] |= 1u << (t & 31);
        }
        i++;
    }
    mt_truncate(m, base);
}

di_status di_grammar_matcher_fill_mask(di_grammar_matcher *m, uint32_t *mask, size_t n_words, di_error *err) {
    di_status s = check_args(m, mask, n_words, err);
    if (s) return s;
    if (m->eos_done) return DI_OK;
    const di_grammar_vocab *v = m->vocab;
    size_t words = di_grammar_vocab_mask_words(v);
    if (!m->cache && (m->cache = calloc(1, sizeof *m->cache))) {
        m->cache->last_seed = UINT32_MAX;
        m->cache_free = mt_mask_cache_free;
    }
    if (!m->cache) {
        trie_walk(m, mask);
        set_eos(m, mask);
        return DI_OK;
    }
    mt_mask_cache *c = m->cache;
    /* 1. whole-state cache */
    uint32_t sid = UINT32_MAX;
    if (update_sids(m)) {
        sid = m->sids[m->n_sets - 1];
        if (sid < c->cap_mask_of && c->mask_of[sid]) {
            memcpy(mask, mask_at(c, c->mask_of[sid] - 1, words), words * sizeof(uint32_t));
            return DI_OK;
        }
    }
    /* 2 + 3. local classification, then the uncertain tokens */
    const mt_local_entry *le = local_entry_for(m);
    if (le) {
        memcpy(mask, le->acc, words * sizeof(uint32_t));
        check_uncertain(m, le, mask, sid);
    } else {
        trie_walk(m, mask);
    }
    set_eos(m, mask);
    if (sid != UINT32_MAX) store_mask(c, sid, mask, words);
    return DI_OK;
}
