/* The descends at the root of a classification that decide tokens by
 * their length (token_mask.c has the overview): the class descend (the
 * tokens made of one byte class, with per-matcher tables by length) and
 * the count descend (a bounded string interior: its frontier nodes by the
 * characters on their paths). */
#include "grammar/token_mask_internal.h"

#include <stdlib.h>
#include <string.h>

/* The table of class cls (see ctab), built on first use from the C paths
 * of the trie (those nodes and the frontier only); NULL when out of
 * memory. */
static const ctab *class_tab(mt_mask_cache *c, const di_grammar_vocab *v, const uint64_t cls[2]) {
    for (uint32_t k = 0; k < c->n_ctabs; k++)
        if (c->ctabs[k].cls[0] == cls[0] && c->ctabs[k].cls[1] == cls[1]) return &c->ctabs[k];
    ctab *t = &c->ctabs[c->n_ctabs < CTAB_N ? c->n_ctabs : c->ctab_next++ % CTAB_N];
    if (c->n_ctabs < CTAB_N) c->n_ctabs++;
    free(t->rows), free(t->fr), free(t->fdep), free(t->fbyte), free(t->dbytes);
    memset(t, 0, sizeof *t);
    size_t words = di_grammar_vocab_mask_words(v);
    uint32_t cap = 1024, n = 0, reach = 0;
    mt_frontier *fr = di_malloc_array(cap, sizeof *fr);
    uint16_t *fdep = di_malloc_array(cap, sizeof *fdep);
    uint8_t *fbyte = malloc(cap);
    bool ok = fr && fdep && fbyte;
    /* the frontier and the reach first (C paths and frontier nodes only) */
    for (uint32_t i = 0; ok && i < v->n_nodes;) {
        uint8_t b = v->byte[i];
        uint32_t d = v->depth[i];
        if (b < 0x80 && ((cls[b >> 6] >> (b & 63)) & 1)) { /* on a C path */
            if (d + 1 > reach) reach = d + 1;
            i++;
            continue;
        }
        if (n == cap) { /* the first byte off C: a frontier node */
            cap *= 2;
            mt_frontier *x = di_realloc_array(fr, cap, sizeof *x);
            uint16_t *y = x ? di_realloc_array(fdep, cap, sizeof *y) : NULL;
            uint8_t *z = y ? realloc(fbyte, cap) : NULL;
            if (x) fr = x;
            if (y) fdep = y;
            if (z) fbyte = z;
            if (!z) {
                ok = false;
                break;
            }
        }
        if (d > reach) reach = d;
        fr[n] = (mt_frontier){i, v->skip[i], v->tok_start[i], v->tok_start[v->skip[i]]};
        fdep[n] = (uint16_t)d;
        fbyte[n++] = b;
        i = v->skip[i];
    }
    uint32_t rmax = reach < CTAB_MAX_LEN ? reach : CTAB_MAX_LEN;
    uint32_t *rows = ok ? calloc((size_t)(rmax + 2) * words, sizeof *rows) : NULL;
    gb_bits *dbytes = rows ? calloc((size_t)reach + 1, sizeof *dbytes) : NULL;
    if (!dbytes) {
        free(rows), free(fr), free(fdep), free(fbyte);
        c->n_ctabs--; /* t is the last slot used, or a reused one: drop it either way */
        if (t != &c->ctabs[c->n_ctabs]) *t = c->ctabs[c->n_ctabs];
        memset(&c->ctabs[c->n_ctabs], 0, sizeof *t);
        return NULL;
    }
    for (uint32_t k = 0; k < n; k++) gb_bits_set(&dbytes[fdep[k]], fbyte[k]);
    /* then the C tokens by length: every token on a C path is one */
    for (uint32_t i = 0; i < v->n_nodes;) {
        uint8_t b = v->byte[i];
        if (!(b < 0x80 && ((cls[b >> 6] >> (b & 63)) & 1))) {
            i = v->skip[i];
            continue;
        }
        uint32_t len = v->depth[i] + 1u, r = len <= rmax ? len : rmax + 1;
        for (uint32_t q = v->tok_start[i]; q < v->tok_start[i + 1]; q++) {
            uint32_t tk = v->trie_tok[q];
            rows[(size_t)r * words + (tk >> 5)] |= 1u << (tk & 31);
        }
        i++;
    }
    for (uint32_t r = 1; r <= rmax + 1; r++)
        for (size_t w = 0; w < words; w++) rows[(size_t)r * words + w] |= rows[(size_t)(r - 1) * words + w];
    t->cls[0] = cls[0], t->cls[1] = cls[1];
    t->rmax = rmax, t->reach = reach;
    t->rows = rows, t->fr = fr, t->fdep = fdep, t->fbyte = fbyte, t->dbytes = dbytes, t->n_fr = n;
    return t;
}

/* The DFA row of path state k (the path materialized as needed) on byte b. */
static uint32_t row_at(mt_mask_cache *c, di_grammar_matcher *L, uint32_t *md, uint32_t k, uint8_t b) {
    uint32_t S = c->path_sid[k], e = drow(&c->dfa, S)[b];
    if (e != ROW_UNKNOWN) return e;
    if (*md > k) mt_truncate(L, 2 + k), *md = k;
    if (!materialize(c, L, md, k)) return UINT32_MAX;
    e = mt_step_row(c, L, S, b);
    if (e != UINT32_MAX && e != ROW_DEAD) mt_truncate(L, 2 + k); /* b need not be the path's byte */
    return e;
}

/* Class descend at the root of a classification (a string whose pattern
 * class is not all of string content, say, with its length counted in
 * the automaton's states: each count a new state, so nothing loops). C is
 * the largest set of ASCII bytes that step alike from the root state S0.
 * When every byte of C steps alike from each state along the way too
 * (S0 -> S1 -> ... without escaping), up to a state where all of C dies
 * (after L bytes) or loops, or past every C path of the trie, then the
 * tokens made of C bytes are decided by their length (one row of the
 * class table), and only the subtrees under the class frontier nodes
 * within reach are walked, each from the state the rows give for its
 * path. Returns 1 done (*i: the first subtree to walk), 0 not applicable,
 * -1 no memory. */
int mt_class_descend(mt_mask_cache *c, di_grammar_matcher *L, const di_grammar_vocab *v, uint32_t *acc, uint32_t *i,
                     uint32_t *md) {
    /* C: the ASCII bytes with the most common live, non-escaping step */
    uint32_t ev[128], val[128], cnt[128], n_val = 0, best = ROW_DEAD, best_n = 0;
    for (uint32_t b = 0; b < 128; b++) {
        ev[b] = row_at(c, L, md, 0, (uint8_t)b);
        if (ev[b] == UINT32_MAX) return -1;
        if (ev[b] == ROW_DEAD || (ev[b] & ROW_ESC)) continue;
        uint32_t k = 0;
        while (k < n_val && val[k] != ev[b]) k++;
        if (k == n_val) val[n_val] = ev[b], cnt[n_val++] = 0;
        if (++cnt[k] > best_n) best_n = cnt[k], best = ev[b];
    }
    if (best_n < CTAB_MIN_BYTES) return 0;
    uint64_t cls[2] = {0, 0};
    uint8_t b0 = 0;
    for (uint32_t b = 128; b-- > 0;)
        if (ev[b] == best) cls[b >> 6] |= 1ull << (b & 63), b0 = (uint8_t)b;
    /* a table costs about a millisecond with 128k tokens, a walk a few
     * tenths: build it when the class comes back (a counted pattern: one
     * root state per count), not for a class seen once */
    bool have = false;
    for (uint32_t k = 0; k < c->n_ctabs && !have; k++) have = c->ctabs[k].cls[0] == cls[0] && c->ctabs[k].cls[1] == cls[1];
    for (uint32_t k = 0; k < CTAB_N * 4 && !have; k++) have = c->cseen[k][0] == cls[0] && c->cseen[k][1] == cls[1];
    if (!have) {
        uint32_t k = c->n_cseen++ % (CTAB_N * 4);
        c->cseen[k][0] = cls[0], c->cseen[k][1] = cls[1];
        return 0;
    }
    /* the chain of states along C paths (the rows of a state are known for
     * all of C once one C byte has been stepped, unless C splits there) */
    const ctab *t = NULL;
    uint32_t rmax = v->max_len < CTAB_MAX_LEN ? v->max_len : CTAB_MAX_LEN;
    uint32_t len = UINT32_MAX; /* C tokens of at most len bytes live, longer ones die; UINT32_MAX: all live */
    uint32_t kend = 0; /* the last state of the chain (path_sid[0 .. kend]) */
    for (uint32_t k = 0;; k++) {
        kend = k;
        if (t && k >= t->reach) break; /* past every C path of the trie */
        uint32_t x = ROW_UNKNOWN;
        for (uint32_t w = 0; w < 2; w++)
            for (uint64_t bits = cls[w]; bits; bits &= bits - 1) {
                uint32_t e = row_at(c, L, md, k, (uint8_t)(w * 64 + __builtin_ctzll(bits)));
                if (e == UINT32_MAX) return -1;
                if (x != ROW_UNKNOWN && e != x) return 0; /* C splits here */
                x = e;
            }
        if (x == ROW_DEAD) {
            len = k;
            break;
        }
        if (x & ROW_ESC) return 0;
        uint32_t N = x - 2;
        if (N == c->path_sid[k]) break; /* loops on C: every C token lives */
        if (k + 1 > rmax) { /* longer than the table tracks: only when no C path goes further */
            if (!t && !(t = class_tab(c, v, cls))) return -1;
            if (k + 1 < t->reach) return 0;
        }
        c->path_sid[k + 1] = N;
        c->path_byte[k] = b0;
        c->esc[k + 1] = c->esc[k];
    }
    if (!t && !(t = class_tab(c, v, cls))) return -1;
    size_t words = di_grammar_vocab_mask_words(v);
    /* past the table's rows (rmax: the reach, at most CTAB_MAX_LEN) every
     * C token lives: the chain only goes past CTAB_MAX_LEN when no C path
     * is longer */
    const uint32_t *row = t->rows + (size_t)(len == UINT32_MAX || len > t->rmax ? t->rmax + 1 : len) * words;
    for (size_t w = 0; w < words; w++) acc[w] |= row[w];
    if (t->n_fr + 1 > c->cap_jt) {
        mt_frontier *x = di_realloc_array(c->jt, t->n_fr + 1, sizeof *x);
        if (!x) return -1;
        c->jt = x, c->cap_jt = t->n_fr + 1;
    }
    /* the frontier nodes to walk: not those past len bytes of C (died on
     * the way), nor those whose byte is known dead from the state in front
     * (no escape on a C path): each walked one costs cache misses */
    uint32_t n = 0, top = len == UINT32_MAX ? t->reach : len;
    for (uint32_t k = 0; k <= top && k <= t->reach; k++) { /* the rows first, depth by depth: few parser steps */
        const gb_bits *fb = &t->dbytes[k];
        for (uint32_t w = 0; w < 4; w++)
            for (uint64_t bits = fb->w[w]; bits; bits &= bits - 1)
                if (row_at(c, L, md, k < kend ? k : kend, (uint8_t)(w * 64 + __builtin_ctzll(bits))) == UINT32_MAX) return -1;
    }
    for (uint32_t k = 0; k < t->n_fr; k++) {
        uint32_t dep = t->fdep[k];
        if (len != UINT32_MAX && dep > len) continue;
        if (drow(&c->dfa, c->path_sid[dep < kend ? dep : kend])[t->fbyte[k]] == ROW_DEAD) continue;
        c->jt[n++] = t->fr[k];
    }
    if (!n) {
        *i = v->n_nodes;
        return 1;
    }
    c->j_on = true;
    c->j_next = 1, c->j_end = n;
    c->j_after = v->n_nodes, c->j_dep = 0, c->j_stop = c->jt[0].skip;
    *i = c->jt[0].node;
    return mt_jump_path(c, L, v, 0, &c->jt[0], md) ? 1 : -1;
}

/* Whether DFA states S and T hold the same items but for their counts
 * (the positions and origins of their keys agree): then the same items
 * scan, so a byte is dead from one exactly when it is dead from the other
 * (a byte is dead when no scanning item's class holds it). */
static bool same_items(const mt_mask_cache *c, uint32_t S, uint32_t T) {
    const mt_keytab *t = &c->dfa.states;
    size_t n = t->off[S + 1] - t->off[S];
    if (n != t->off[T + 1] - t->off[T]) return false;
    const uint32_t *ks = t->data + t->off[S], *kt = t->data + t->off[T];
    for (size_t q = 0; q + 2 < n; q += 3)
        if (ks[q] != kt[q] || ks[q + 1] != kt[q + 1]) return false;
    return true;
}

/* The row of state S on byte b taken from state P's (known) row, when S
 * holds P's items but for their counts (same_items) and every item of P
 * that scans b began before P's set: the step then advances the same
 * items and completes them into the same earlier sets, never reading the
 * items (the counts) of the set stepped from, so it ends where P's does
 * (the closing quote of a bounded string from every count, say). Stored
 * in S's row; ROW_UNKNOWN when not derivable. */
static uint32_t row_from(mt_mask_cache *c, const di_grammar *g, uint32_t P, uint32_t S, uint8_t b) {
    uint32_t e = drow(&c->dfa, P)[b];
    if (e == ROW_UNKNOWN || (P != S && !same_items(c, P, S))) return ROW_UNKNOWN;
    const mt_keytab *t = &c->dfa.states;
    const uint32_t *k = t->data + t->off[P];
    size_t n = t->off[P + 1] - t->off[P];
    for (size_t q = 0; q + 2 < n; q += 3) {
        if (k[q] >= g->n_syms) return ROW_UNKNOWN;
        uint32_t sym = g->syms[k[q]];
        if (SYM_KIND(sym) == SYM_TERM && gb_bits_has(&g->classes[SYM_VAL(sym)], b) && k[q + 1] == KEY_SELF)
            return ROW_UNKNOWN;
    }
    drow(&c->dfa, S)[b] = e;
    return e;
}

/* Count descend at the root S0 of a classification that is a string
 * interior taking the content fast path (mt_fast_content held: every content
 * character, ASCII or UTF-8, steps to S0 itself, or to S0 with the counts
 * one further; the content tokens of at most rem characters came from the
 * per-tokenizer table, and with REJ_OK the longer ones die). Every other
 * token lies below a node of the content frontier (vocab.c), reached
 * through k content characters, so it dies on the way when k > rem
 * (REJ_OK); else the state in front of the node is S_k, S0 with the counts
 * k further (S0 itself when it loops). The frontier nodes are taken from
 * the per-tokenizer list instead of walking the content paths down to
 * them (4k nodes per string root with 128k tokens, each a cache miss); a
 * node whose byte is dead from S_k is dropped (known without a parser
 * step when S0's row has it dead and S_k holds S0's items), and the rest
 * are walked, each from the state the rows give for its path (mt_jump_path).
 * S_k is the end of the chain S0 -> S1 -> ... on 'a', used while every
 * ASCII content byte steps alike from each chain state (checked); that
 * every UTF-8 character steps there too is what CLOOP_U8 / LOOP_U8 says of
 * S0 and the counts further (as mt_inherit_loops takes it). The first mask
 * inside each property's bounded string is such a root (its state holds
 * the rest of the object, so every property classifies its own). Returns
 * 1 done (*i: the first subtree to walk), 0 not applicable (the plain walk
 * follows), -1 no memory. */
int mt_count_descend(mt_mask_cache *c, di_grammar_matcher *L, const di_grammar_vocab *v, uint32_t *i,
                     uint32_t *md) {
    const ldfa *d = &c->dfa;
    uint32_t S0 = c->path_sid[0];
    uint8_t lk = d->loop_known[S0];
    bool exact = (lk & LOOP_U8) != 0; /* mt_fast_content: then every content byte loops */
    if (!v->n_frontier) return 0;
    uint32_t rem = exact ? UINT32_MAX : d->rem[S0];
    /* content tokens past the table's longest would be alive: walk them */
    if (!v->content_all && rem >= v->content_max) return 0;
    /* the longest path to a frontier node within rem */
    uint32_t top = 0;
    for (uint32_t k = 0; k < v->n_frontier; k++) {
        uint32_t ch = v->fnode[k].ch;
        if (ch > rem && !(lk & REJ_OK)) return 0; /* alive past rem: not decided here */
        if (ch <= rem && ch > top) top = ch;
    }
    /* the chain S0 .. S_kchain on 'a', written on the path arrays (row_at
     * materializes them); loops: S_kchain steps to itself, so it is S_k
     * for every k past it too */
    uint32_t kchain = 0;
    bool loops = false;
    for (; kchain < top; kchain++) {
        uint32_t e = row_at(c, L, md, kchain, 'a');
        if (e == UINT32_MAX) return -1;
        if (e == ROW_DEAD || (e & ROW_ESC)) break;
        bool alike = true;
        for (uint32_t x = 0x20; x < 0x80 && alike; x++) {
            if (!mt_json_content((uint8_t)x)) continue;
            uint32_t ex = row_at(c, L, md, kchain, (uint8_t)x);
            if (ex == UINT32_MAX) return -1;
            alike = ex == e;
        }
        if (!alike) break;
        if (e - 2 == c->path_sid[kchain]) {
            loops = true;
            break;
        }
        c->path_byte[kchain] = 'a';
        c->path_sid[kchain + 1] = e - 2;
        c->esc[kchain + 1] = 0;
    }
    if (v->n_frontier + 1 > c->cap_jt) {
        mt_frontier *x = di_realloc_array(c->jt, v->n_frontier + 1, sizeof *x);
        if (!x) return -1;
        c->jt = x, c->cap_jt = v->n_frontier + 1;
    }
    memset(c->csame, 0, (size_t)kchain + 1);
    uint32_t n = 0;
    for (uint32_t k = 0; k < v->n_frontier; k++) {
        const mt_fnode *f = &v->fnode[k];
        if (f->ch > rem) continue; /* dies on the way (REJ_OK) */
        if (f->ch <= kchain || loops) { /* the state in front is S_ch */
            uint32_t at = f->ch < kchain ? f->ch : kchain, S = c->path_sid[at];
            if (drow(&c->dfa, S0)[f->byte] == ROW_DEAD) {
                if (!c->csame[at]) c->csame[at] = at == 0 || same_items(c, S0, S) ? 1 : 2;
                if (c->csame[at] == 1) continue;
            }
            uint32_t e = drow(&c->dfa, S)[f->byte];
            if (e == ROW_UNKNOWN) e = row_from(c, L->g, S0, S, f->byte);
            if (e == ROW_UNKNOWN) e = row_at(c, L, md, at, f->byte);
            if (e == UINT32_MAX) return -1;
            if (e == ROW_DEAD) continue; /* no escape on the way: rejected */
        }
        c->jt[n++] = v->frontier[k];
    }
    if (!n) {
        *i = v->n_nodes;
        return 1;
    }
    c->j_on = true;
    c->j_next = 1, c->j_end = n;
    c->j_after = v->n_nodes, c->j_dep = 0, c->j_stop = c->jt[0].skip;
    c->j_anc = exact ? NO_ANCHOR : S0;
    *i = c->jt[0].node;
    return mt_jump_path(c, L, v, 0, &c->jt[0], md) ? 1 : -1;
}
