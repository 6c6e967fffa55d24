/* The trie walk of a local classification (token_mask.c has the
 * overview, level 2): mt_classify walks the vocabulary trie through the
 * local DFA, skipping whole subtrees that loop or die, and the content
 * descend walks only the subtrees of the content frontier below a state
 * that loops on all string content. */
#include "grammar/token_mask_internal.h"

#include <stdlib.h>
#include <string.h>

/* Content descend below a node (or the root) whose children, nodes
 * first .. end-1 at depth dep0 with tokens from tok_lo on, are read from
 * state P = path_sid[dep0], when P loops on all string content
 * (LOOP_CONTENT: x is NULL) or steps to such a state on every content
 * character but the bytes x (LOOP_CTARGET), and the path to here is
 * content ending at a character boundary (gs: the frontier below). Then
 * every token below is accepted but those under the frontier nodes and
 * under the children whose byte is in x, and the state in front of each of
 * those follows from the DFA rows: those subtrees are walked one by one
 * (mt_jump_path) instead of every content node on the way to them (at an
 * object key with 128k tokens, some 10k visits, each a cache miss). Sets
 * *i to the first subtree to walk (end when none). false: no memory. */
static bool descend(mt_mask_cache *c, di_grammar_matcher *L, const di_grammar_vocab *v, uint32_t *acc, uint32_t first,
                    uint32_t end, uint32_t tok_lo, mt_gspan gs, uint32_t dep0, const gb_bits *x, uint32_t *i,
                    uint32_t *md) {
    if (gs.cnt + 128 > c->cap_jt) {
        uint32_t nc = gs.cnt + 128 > 2 * c->cap_jt ? gs.cnt + 128 : 2 * c->cap_jt;
        mt_frontier *t = di_realloc_array(c->jt, nc, sizeof *t);
        if (!t) return false;
        c->jt = t, c->cap_jt = nc;
    }
    /* the exception children: bytes in x are ASCII, and children come
     * in byte order */
    uint32_t ex[128], n_ex = 0, x_hi = 0;
    for (uint32_t b = 0; x && b < 128; b++)
        if (gb_bits_has(x, (uint8_t)b)) x_hi = b;
    for (uint32_t ch = first; x && ch < end && v->byte[ch] <= x_hi; ch = v->skip[ch])
        if (gb_bits_has(x, v->byte[ch])) ex[n_ex++] = ch;
    /* frontier entries and exception children in preorder; frontier
     * entries inside an exception child's subtree go with it */
    uint32_t n = 0, e = 0;
    for (uint32_t g = 0; g <= gs.cnt; g++) {
        uint32_t node = g < gs.cnt ? v->frontier[gs.idx + g].node : end;
        for (; e < n_ex && ex[e] < node; e++) {
            uint32_t sk = v->skip[ex[e]];
            c->jt[n++] = (mt_frontier){ex[e], sk, v->tok_start[ex[e]], v->tok_start[sk]};
        }
        if (g == gs.cnt) break;
        if (n && node < c->jt[n - 1].skip) continue;
        c->jt[n++] = v->frontier[gs.idx + g];
    }
    if (first == 0 && end == v->n_nodes && v->content_all) {
        /* below the root, the tokens outside the frontier are the content
         * tokens of the per-tokenizer table: one row of it, less those
         * under the subtrees walked that it holds (an exception child's,
         * a frontier node starting an ill-formed character) */
        size_t words = di_grammar_vocab_mask_words(v);
        const uint32_t *row = v->content_le + (size_t)v->content_max * words;
        for (size_t w = 0; w < words; w++) acc[w] |= row[w];
        /* (on the fast path, cls_fast, the walk skips the content-only
         * subtrees below those and keeps the table's bits instead: every
         * content token is allowed there) */
        for (uint32_t k = 0; k < n && !c->cls_fast; k++) {
            uint8_t b = v->byte[c->jt[k].node];
            if (b < 0x80 && !mt_json_content(b)) continue; /* no content token below */
            for (uint32_t q = c->jt[k].tok_lo; q < c->jt[k].tok_hi; q++) {
                uint32_t t = v->trie_tok[q];
                acc[t >> 5] &= ~(1u << (t & 31));
            }
        }
    } else {
        uint32_t lo = tok_lo;
        for (uint32_t k = 0; k < n; k++) accept_range(acc, v->trie_tok, lo, c->jt[k].tok_lo), lo = c->jt[k].tok_hi;
        accept_range(acc, v->trie_tok, lo, v->tok_start[end]);
    }
    if (!n) {
        *i = end;
        return true;
    }
    c->j_on = true;
    c->j_next = 1, c->j_end = n;
    c->j_after = end, c->j_dep = dep0, c->j_stop = c->jt[0].skip;
    *i = c->jt[0].node;
    return mt_jump_path(c, L, v, dep0, &c->jt[0], md);
}

/* Work units of classify's budget: one per trie node visited, STEP_WORK per
 * parser step (a step costs about as much as walking a hundred nodes). */
#define STEP_WORK 100

/* Walks the trie for le. budget (0: none): past it, returns CLS_OVER with
 * the walk suspended (le partly filled); mt_classify(..., resume = true)
 * continues where it stopped, so consulting the shared cache in between
 * wastes nothing. */
int mt_classify(di_grammar_matcher *m, mt_local_entry *le, uint64_t budget, bool resume) {
    mt_mask_cache *c = m->cache;
    const di_grammar_vocab *v = m->vocab;
    di_grammar_matcher *L = c->lp;
    ldfa *d = &c->dfa;
    uint32_t md = 0; /* materialized depth: L->n_sets == 2 + md */
    uint32_t cap_unc = 0, i = 0;
    if (resume) {
        i = c->cls_i, cap_unc = c->cls_cap_unc;
        goto walk;
    }
    size_t words = di_grammar_vocab_mask_words(v);
    le->acc = calloc(words, sizeof(uint32_t));
    if (!le->acc) return CLS_NOMEM;
    size_t depth_cap = (size_t)v->max_len + 2;
    if (!c->esc && !(c->esc = malloc(depth_cap))) return CLS_NOMEM;
    if (!c->path_sid && !(c->path_sid = di_malloc_array(depth_cap, sizeof(uint32_t)))) return CLS_NOMEM;
    if (!c->path_byte && !(c->path_byte = malloc(depth_cap))) return CLS_NOMEM;
    if (!c->anc && !(c->anc = di_malloc_array(depth_cap, sizeof(uint32_t)))) return CLS_NOMEM;
    if (!c->anc_dep && !(c->anc_dep = di_malloc_array(depth_cap, sizeof(uint32_t)))) return CLS_NOMEM;
    if (!c->anc_u8 && !(c->anc_u8 = malloc(depth_cap))) return CLS_NOMEM;
    if (!c->path_ch && !(c->path_ch = di_malloc_array(depth_cap, sizeof(uint32_t)))) return CLS_NOMEM;
    if (!c->pc_ok && !(c->pc_ok = malloc(depth_cap))) return CLS_NOMEM;
    if (!c->pc_u8 && !(c->pc_u8 = malloc(depth_cap))) return CLS_NOMEM;
    if (!c->csame && !(c->csame = malloc(depth_cap))) return CLS_NOMEM;
    /* + 4: u8_returns explores up to four bytes past the deepest node */
    if (L->cap_sids < depth_cap + 6) {
        uint32_t *x = di_realloc_array(L->sids, depth_cap + 6, sizeof *x);
        if (!x) return CLS_NOMEM;
        L->sids = x, L->cap_sids = (uint32_t)depth_cap + 6;
    }
    if (d->states.n_ids > DFA_MAX_STATES) mt_dfa_free(d), c->last_seed = UINT32_MAX;
    if (d->states.n_ids == 0) { /* id 0: the outside */
        uint32_t outside[3] = {KEY_ACCEPT, KEY_ACCEPT, KEY_ACCEPT};
        bool added;
        if (mt_kt_intern(&d->states, outside, 3, &added) != 0) return CLS_NOMEM;
    }
    L->sids[0] = 0;
    uint32_t seed = mt_local_sid(c, L, 1);
    if (seed == UINT32_MAX) return CLS_NOMEM;
    L->sids[1] = seed;
    /* The root state learns its loops up front (a few dozen parser steps;
     * a walk of a large vocabulary costs far more), so that a string
     * interior takes the fast path: the per-tokenizer table of content
     * tokens by length gives their bits at once, and the walk skips the
     * subtrees made of content only. The key of an extra object member
     * (mt_open_string_root) takes that path without them: it reads no
     * character back into itself, and what it would learn beyond that
     * (its content target, LOOP_CTARGET: some hundred parser steps with
     * the UTF-8 exploration) only serves the content descend, which the
     * fast path replaces; so it is not made to learn during the walk
     * either. */
    bool open = !d->loop_known[seed] && mt_open_string_root(v, m->g, L, le->acc);
    if (open)
        d->visits[seed] = LOOP_HOT_NODES;
    else if (!d->loop_known[seed] && !mt_inherit_loops(c, m->g, v, c->last_seed, seed) &&
             mt_learn_loops(c, L, m->g, v, seed, 0, true) < 0)
        return CLS_NOMEM;
    c->last_seed = seed;
    bool fc = !open && mt_fast_content(c, v, seed, le->acc);
    c->cls_fast = open || fc || mt_open_string_root(v, m->g, L, le->acc);
    c->cls_open = open;
    c->path_sid[0] = seed;
    c->esc[0] = 0;
    c->anc[0] = NO_ANCHOR;
    c->path_ch[0] = 0;
    c->pc_ok[0] = 1, c->pc_u8[0] = MT_U8_START;
    c->j_on = false;
    c->j_anc = NO_ANCHOR;
    mt_gspan all = {0, v->n_frontier};
    if (open) {
        /* every content token is allowed (mt_open_string_root), so only the
         * subtrees of the content frontier are left: walked one by one from
         * the state the rows give for their path (a content path never dies
         * in an open key), without visiting the content nodes on the way;
         * the named keys' prefixes need no exception, their states come
         * from the rows too */
        if (!descend(c, L, v, le->acc, 0, v->n_nodes, 0, all, 0, NULL, &i, &md)) return CLS_NOMEM;
    } else if (c->cls_fast) {
        if (fc && mt_count_descend(c, L, v, &i, &md) < 0) return CLS_NOMEM;
    } else if (d->loop_known[seed] & (LOOP_CONTENT | LOOP_CTARGET)) {
        const gb_bits *x = (d->loop_known[seed] & LOOP_CONTENT) ? NULL : &d->cx[seed];
        if (!descend(c, L, v, le->acc, 0, v->n_nodes, 0, all, 0, x, &i, &md)) return CLS_NOMEM;
    } else if (mt_class_descend(c, L, v, le->acc, &i, &md) < 0) {
        return CLS_NOMEM;
    }
walk:;
    uint64_t steps0 = c->n_steps, nodes = 0;
    for (;;) {
        /* in a content frontier (below): a frontier node's subtree done,
         * on to the next one, or past the descend point when none is left */
        while (c->j_on && i == c->j_stop) {
            if (c->j_next < c->j_end) {
                const mt_frontier *f = &c->jt[c->j_next++];
                if (!mt_jump_path(c, L, v, c->j_dep, f, &md)) return CLS_NOMEM;
                i = f->node, c->j_stop = f->skip;
            } else {
                i = c->j_after, c->j_on = false;
            }
        }
        if (i >= v->n_nodes) break;
        if (budget && ++nodes + (c->n_steps - steps0) * STEP_WORK > budget) {
            mt_truncate(L, 2); /* depth 0: what a resumed walk expects */
            c->cls_i = i, c->cls_cap_unc = cap_unc;
            return CLS_OVER;
        }
        uint32_t dep = v->depth[i], b = v->byte[i];
        if (c->cls_fast && c->pc_ok[dep] && c->path_ch[dep] + v->maxch[i] <= v->content_max &&
            content_subtree(v, i, c->pc_u8[dep])) { /* content tokens only: their bits came from the table */
            i = v->skip[i];
            continue;
        }
        if (md > dep) mt_truncate(L, 2 + dep), md = dep;
        uint32_t S = c->path_sid[dep];
        if ((d->loop_known[S] & LOOP_CONTENT) && v->cskip[i] != i) {
            /* i and its next siblings up to cskip[i] hold string content
             * only, which S reads without leaving it: all accepted, their
             * tokens one contiguous run in trie order */
            uint32_t j = v->cskip[i];
            for (uint32_t q = v->tok_start[i]; q < v->tok_start[j]; q++) {
                uint32_t t = v->trie_tok[q];
                le->acc[t >> 5] |= 1u << (t & 31);
            }
            i = j;
            continue;
        }
        if (drow(d, S)[b] == ROW_DEAD && !c->esc[dep]) {
            /* known dead, nothing to check later: skip before reading the
             * node's other fields (each a cache miss) */
            i = v->skip[i];
            continue;
        }
        if (d->loop_known[S]) {
            const gb_bits *sb = &v->sub[i], *lp = &d->loop[S];
            uint64_t ascii_out = (sb->w[0] & ~lp->w[0]) | (sb->w[1] & ~lp->w[1]);
            /* every path in this subtree loops in S, or S loops on every
             * UTF-8 character and the subtree is well-formed UTF-8 whose
             * ASCII bytes loop: all accepted */
            const gb_bits *cl = &d->cloop[S];
            uint64_t cascii_out = (sb->w[0] & ~cl->w[0]) | (sb->w[1] & ~cl->w[1]);
            uint8_t lk = d->loop_known[S];
            bool u8ok = (v->u8ok[i] >> MT_U8_START) & 1;
            /* ... or every path advances a count by one per character and
             * is shorter than the repetitions left */
            bool fits = (uint32_t)(v->maxdep[i] - dep) + 1 < d->rem[S];
            if (!(ascii_out | (sb->w[2] & ~lp->w[2]) | (sb->w[3] & ~lp->w[3])) ||
                ((lk & LOOP_U8) && !ascii_out && u8ok) ||
                ((lk & CLOOP_BYTES) && fits && !cascii_out &&
                 (!((sb->w[2] & ~cl->w[2]) | (sb->w[3] & ~cl->w[3])) || ((lk & CLOOP_U8) && u8ok)))) {
                for (uint32_t q = v->tok_start[i]; q < v->tok_start[v->skip[i]]; q++) {
                    uint32_t t = v->trie_tok[q];
                    le->acc[t >> 5] |= 1u << (t & 31);
                }
                i = v->skip[i];
                continue;
            }
        }
        /* The anchor: S when it learned its count loops (cloop), else the
         * nearest such state up the path with only looping characters
         * read since. Every path from it of fewer characters than its
         * repetitions left stays alive, so a subtree made of looping
         * characters whose tokens, counted from the anchor, are that short
         * is accepted whole; when nothing after the anchor's repetition
         * takes a looping character (REJ_OK), the longer tokens of such a
         * subtree die, so its tokens are decided by their character counts
         * (per-tokenizer tables nch / maxch) without walking its nodes.
         * The states in between need not have learned anything (deep
         * states of a maxLength string are entered too rarely to get
         * hot). */
        bool s_anc = (d->loop_known[S] & CLOOP_BYTES) != 0;
        uint32_t A = s_anc ? S : c->anc[dep];
        if (A != NO_ANCHOR) {
            const gb_bits *sb = &v->sub[i], *cl = &d->cloop[A];
            uint32_t adep = s_anc ? dep : c->anc_dep[dep];
            uint32_t before = c->path_ch[dep] - c->path_ch[adep]; /* characters since the anchor */
            /* the path since the anchor may end inside a character (aq):
             * then only well-formed UTF-8 from there on counts (an ASCII
             * byte there kills the path even though it loops on its own) */
            uint8_t aq = s_anc ? MT_U8_START : c->anc_u8[dep];
            bool ascii_in = !((sb->w[0] & ~cl->w[0]) | (sb->w[1] & ~cl->w[1]));
            bool high_in = (aq == MT_U8_START && !((sb->w[2] & ~cl->w[2]) | (sb->w[3] & ~cl->w[3]))) ||
                           ((d->loop_known[A] & CLOOP_U8) && ((v->u8ok[i] >> aq) & 1));
            if (ascii_in && high_in) {
                /* a token of k characters from the anchor stays alive while
                 * k <= rem (each one a repetition); with REJ_OK a longer
                 * one dies, so every token is decided by its length */
                bool all_fit = (uint64_t)before + v->maxch[i] <= d->rem[A];
                if (all_fit || (d->loop_known[A] & REJ_OK)) {
                    uint32_t base = c->path_ch[adep];
                    for (uint32_t q = v->tok_start[i]; q < v->tok_start[v->skip[i]]; q++) {
                        uint32_t t = v->trie_tok[q];
                        if (all_fit || (uint32_t)(v->nch[t] - base) <= d->rem[A]) le->acc[t >> 5] |= 1u << (t & 31);
                        else if (c->esc[dep] && !push_u32(&le->unc, &le->n_unc, &cap_unc, t)) return CLS_NOMEM;
                    }
                    i = v->skip[i];
                    continue;
                }
            }
        }
        uint32_t e = drow(d, S)[b];
        if (e == ROW_UNKNOWN) {
            if (!materialize(c, L, &md, dep)) return CLS_NOMEM;
            e = mt_step_row(c, L, S, b);
            if (e == UINT32_MAX) return CLS_NOMEM;
            if (e != ROW_DEAD) md = dep + 1;
        }
        if (e == ROW_DEAD) {
            if (c->esc[dep]) {
                /* the real parse may go on through the outside */
                for (uint32_t q = v->tok_start[i]; q < v->tok_start[v->skip[i]]; q++)
                    if (!push_u32(&le->unc, &le->n_unc, &cap_unc, v->trie_tok[q])) return CLS_NOMEM;
            }
            i = v->skip[i];
            continue;
        }
        uint32_t next = (e & ~ROW_ESC) - 2;
        c->path_sid[dep + 1] = next;
        c->path_byte[dep] = (uint8_t)b;
        c->esc[dep + 1] = c->esc[dep] | ((e & ROW_ESC) != 0);
        /* the children's anchor (A above), as long as b belongs to a
         * looping character */
        uint32_t ca = A;
        if (ca != NO_ANCHOR) {
            uint8_t nq = mt_u8_next(s_anc ? MT_U8_START : c->anc_u8[dep], (uint8_t)b);
            bool loops = b < 0x80 ? gb_bits_has(&d->cloop[ca], (uint8_t)b) : (d->loop_known[ca] & CLOOP_U8) != 0;
            if (nq == MT_U8_BAD || !loops) ca = NO_ANCHOR;
            c->anc_dep[dep + 1] = s_anc ? dep : c->anc_dep[dep];
            c->anc_u8[dep + 1] = nq;
        }
        c->path_ch[dep + 1] = c->path_ch[dep] + ((b & 0xC0) != 0x80);
        c->pc_u8[dep + 1] = mt_u8_next(c->pc_u8[dep], (uint8_t)b);
        c->pc_ok[dep + 1] = c->pc_ok[dep] && c->pc_u8[dep + 1] != MT_U8_BAD && (b >= 0x80 || mt_json_content((uint8_t)b));
        c->anc[dep + 1] = ca;
        for (uint32_t q = v->tok_start[i]; q < v->tok_start[i + 1]; q++) {
            uint32_t t = v->trie_tok[q];
            le->acc[t >> 5] |= 1u << (t & 31);
        }
        /* a hot state learns its self-loop bytes (one step per byte group,
         * once), or takes the count loops of its anchor A when it is A with
         * the counts further (mt_inherit_loops: a bounded string's first
         * characters, where learning costs some fifty parser steps a count) */
        if (!c->cls_open && !d->loop_known[S] && d->visits[S] < LOOP_HOT_NODES &&
            (d->visits[S] += v->skip[i] - i) >= LOOP_HOT_NODES && !mt_inherit_loops(c, m->g, v, A, S)) {
            if (md > dep) mt_truncate(L, 2 + dep), md = dep;
            if (!materialize(c, L, &md, dep) || mt_learn_loops(c, L, m->g, v, S, dep, true) < 0) return CLS_NOMEM;
        }
        if (!c->cls_fast && !c->j_on && ca == NO_ANCHOR && (d->loop_known[next] & (LOOP_CONTENT | LOOP_CTARGET)) &&
            v->gspan[i].cnt != UINT32_MAX) {
            const gb_bits *x = (d->loop_known[next] & LOOP_CONTENT) ? NULL : &d->cx[next];
            if (!descend(c, L, v, le->acc, i + 1, v->skip[i], v->tok_start[i + 1], v->gspan[i], dep + 1, x, &i, &md))
                return CLS_NOMEM;
            continue;
        }
        i++;
    }
    mt_truncate(L, 2);
    return CLS_OK;
}
