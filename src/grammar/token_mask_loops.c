/* What a hot state of the local DFA learns (token_mask.c has the
 * overview): its self-loop bytes and whether every UTF-8 character loops,
 * for bounded repetitions the bytes that step to the same state with the
 * counts one further (is_shift) and the repetitions left, and the content
 * target of an object key; then the content fast path of a string
 * interior's root (per-tokenizer tables, vocab.c). */
#include "grammar/token_mask_internal.h"

#include <stdlib.h>
#include <string.h>

/* Whether DFA state N is state S with every bounded repetition one further
 * (canonical aux: to_min << 16 | to_max, both clamped at lim) and nothing
 * else changed. Reading more characters from S then only moves the counts
 * towards their bounds: while the remaining maximum is not reached, every
 * such step stays alive (at to_min 0 the exit items join, which only adds
 * ways to go on). */
static bool is_shift(const mt_mask_cache *c, const di_grammar *g, uint32_t lim, uint32_t S, uint32_t N) {
    const mt_keytab *t = &c->dfa.states;
    size_t na = t->off[S + 1] - t->off[S];
    if (S == N || na != t->off[N + 1] - t->off[N]) return false;
    const uint32_t *ks = t->data + t->off[S], *kn = t->data + t->off[N];
    bool moved = false;
    for (size_t q = 0; q + 2 < na; q += 3) {
        if (ks[q] != kn[q] || ks[q + 1] != kn[q + 1]) return false;
        if (ks[q + 2] == kn[q + 2]) continue;
        if (ks[q] >= g->n_syms || SYM_KIND(g->syms[ks[q]]) != SYM_REP) return false;
        uint32_t mn = ks[q + 2] >> 16, mx = ks[q + 2] & 0xFFFF, mn2 = kn[q + 2] >> 16, mx2 = kn[q + 2] & 0xFFFF;
        bool ok_min = (mn == 0 && mn2 == 0) || mn2 + 1 == mn || (mn == lim && mn2 == lim);
        bool ok_max = mx2 + 1 == mx || (mx == lim && mx2 == lim);
        if (!ok_min || !ok_max) return false;
        moved = true;
    }
    return moved;
}

/* Repetitions left before the tightest maximum among S's bounded
 * repetitions (UINT32_MAX when none is bounded below lim). */
static uint32_t rem_of(const mt_mask_cache *c, const di_grammar *g, uint32_t lim, uint32_t S) {
    const mt_keytab *t = &c->dfa.states;
    const uint32_t *k = t->data + t->off[S];
    size_t n = t->off[S + 1] - t->off[S];
    uint32_t r = UINT32_MAX;
    for (size_t q = 0; q + 2 < n; q += 3) {
        if (k[q] >= g->n_syms || SYM_KIND(g->syms[k[q]]) != SYM_REP) continue;
        uint32_t mx = k[q + 2] & 0xFFFF;
        if (mx < lim && mx < r) r = mx;
    }
    return r;
}

/* Whether DFA state S holds exactly one repetition item, bounded below
 * lim, followed in its rule by a byte class that no looping character
 * (cl; every byte >= 0x80 when u8) starts: then such a character read
 * after the last repetition has nothing to go to, and the path dies (a
 * JSON string "..." with maxLength). */
static bool rep_then_stop(const mt_mask_cache *c, const di_grammar *g, uint32_t lim, uint32_t S, const gb_bits *cl,
                          bool u8) {
    const mt_keytab *t = &c->dfa.states;
    const uint32_t *k = t->data + t->off[S];
    size_t n = t->off[S + 1] - t->off[S];
    uint32_t reps = 0;
    bool ok = false;
    for (size_t q = 0; q + 2 < n; q += 3) {
        if (k[q] >= g->n_syms || SYM_KIND(g->syms[k[q]]) != SYM_REP) continue;
        reps++;
        uint32_t after = k[q] + 1 < g->n_syms ? g->syms[k[q] + 1] : SYM_MAKE(SYM_END, 0);
        ok = (k[q + 2] & 0xFFFF) < lim && SYM_KIND(after) == SYM_TERM;
        if (ok) {
            const gb_bits *x = &g->classes[SYM_VAL(after)];
            ok = !((x->w[0] & cl->w[0]) | (x->w[1] & cl->w[1])) && (!u8 || !(x->w[2] | x->w[3]));
        }
    }
    return reps == 1 && ok;
}

/* Mid-character states already shown to return (u8_walk): the answer
 * from a state depends only on it and the decoder state, and different
 * lead bytes often reach the same one (a grammar's UTF-8 rule has a few
 * continuation states, shared by many byte classes). */
#define U8_MEMO 64
typedef struct u8_memo {
    uint32_t st[U8_MEMO];
    uint8_t q[U8_MEMO];
    uint32_t n;
} u8_memo;

static bool u8_memo_has(const u8_memo *mo, uint32_t st, uint8_t q) {
    for (uint32_t i = 0; i < mo->n; i++)
        if (mo->st[i] == st && mo->q[i] == q) return true;
    return false;
}

static int u8_walk(mt_mask_cache *c, di_grammar_matcher *L, const di_grammar *g, uint32_t S, uint32_t T, uint8_t q,
                   bool count, u8_memo *mo) {
    uint32_t top = L->n_sets;
    uint8_t done[256] = {0}; /* per byte class: decoder states already tried */
    for (uint32_t b = 0x80; b < 256; b++) {
        uint8_t nq = mt_u8_next(q, (uint8_t)b);
        if (nq == MT_U8_BAD) continue;
        uint32_t k = g->byte_eq[b];
        if (done[k] & (1u << nq)) continue;
        done[k] |= (uint8_t)(1u << nq);
        uint32_t e = drow(&c->dfa, T)[b];
        if (e != ROW_UNKNOWN && e != ROW_DEAD && nq != MT_U8_START && u8_memo_has(mo, (e & ~ROW_ESC) - 2, nq)) continue;
        if (e == ROW_UNKNOWN || (e != ROW_DEAD && nq != MT_U8_START)) {
            e = mt_step_row(c, L, T, b); /* pushes a set unless dead */
            if (e == UINT32_MAX) return -1;
            if (e != ROW_DEAD && nq != MT_U8_START) {
                uint32_t E = (e & ~ROW_ESC) - 2;
                int r = u8_memo_has(mo, E, nq) ? 1 : u8_walk(c, L, g, S, E, nq, count, mo);
                mt_truncate(L, top);
                if (r != 1) return r;
                if (mo->n < U8_MEMO && !u8_memo_has(mo, E, nq)) mo->st[mo->n] = E, mo->q[mo->n] = nq, mo->n++;
                continue;
            }
            mt_truncate(L, top);
        }
        if (e == ROW_DEAD) return 0;
        if (nq == MT_U8_START) {
            uint32_t N = (e & ~ROW_ESC) - 2;
            if (count ? !is_shift(c, g, canon_lim(L->vocab), S, N) : N != S) return 0;
        }
    }
    return 1;
}

/* Whether every well-formed UTF-8 character (two to four bytes) read from
 * local state T, entered with decoder state q, stays alive and ends back in
 * state S. T is the top of L; sets pushed above it are scratch. Steps go one
 * per (byte class, decoder state) and mid-character state, so this costs
 * one or two dozen parser steps, once per hot state. Returns 1 yes, 0 no,
 * -1 no memory. */
static int u8_returns(mt_mask_cache *c, di_grammar_matcher *L, const di_grammar *g, uint32_t S, uint32_t T,
                      uint8_t q, bool count) {
    u8_memo mo;
    mo.n = 0;
    return u8_walk(c, L, g, S, T, q, count, &mo);
}

/* Whether DFA state S is state P with every bounded repetition k >= 1
 * further (the same k for all) and nothing else changed: S is where P's
 * count loops lead after k characters. */
static bool is_shift_by(const mt_mask_cache *c, const di_grammar *g, uint32_t lim, uint32_t P, uint32_t S) {
    const mt_keytab *t = &c->dfa.states;
    if (P == UINT32_MAX || P >= t->n_ids || S >= t->n_ids || P == S) return false;
    size_t na = t->off[P + 1] - t->off[P];
    if (na != t->off[S + 1] - t->off[S]) return false;
    const uint32_t *kp = t->data + t->off[P], *ks = t->data + t->off[S];
    uint32_t k = 0;
    for (size_t q = 0; q + 2 < na; q += 3) {
        if (kp[q] != ks[q] || kp[q + 1] != ks[q + 1]) return false;
        if (kp[q + 2] == ks[q + 2]) continue;
        if (kp[q] >= g->n_syms || SYM_KIND(g->syms[kp[q]]) != SYM_REP) return false;
        uint32_t mn = kp[q + 2] >> 16, mx = kp[q + 2] & 0xFFFF, mn2 = ks[q + 2] >> 16, mx2 = ks[q + 2] & 0xFFFF;
        if (mx >= lim || mx2 >= mx) return false;
        uint32_t kk = mx - mx2;
        if (k && kk != k) return false;
        k = kk;
        if (!(mn2 + kk == mn || (mn2 == 0 && mn <= kk && mn < lim))) return false;
    }
    return k > 0;
}

/* A state reached from the last root P through its count loops has P's
 * loops with the counts further: it takes them instead of learning (the
 * next classification of a maxLength string is k characters on). */
bool mt_inherit_loops(mt_mask_cache *c, const di_grammar *g, const di_grammar_vocab *v, uint32_t P, uint32_t S) {
    ldfa *d = &c->dfa;
    if (P == UINT32_MAX || P >= d->states.n_ids || !(d->loop_known[P] & CLOOP_BYTES)) return false;
    uint32_t lim = canon_lim(v);
    if (!is_shift_by(c, g, lim, P, S)) return false;
    d->loop[S] = (gb_bits){{0}};
    d->cloop[S] = d->cloop[P];
    d->rem[S] = rem_of(c, g, lim, S);
    d->loop_known[S] = (uint8_t)(LOOP_BYTES | (d->loop_known[P] & (CLOOP_BYTES | CLOOP_U8 | REJ_OK)));
    d->visits[S] = LOOP_HOT_NODES;
    return d->rem[S] != 0;
}

/* Learns the loops of DFA state S, the top of L at depth dep (L is left
 * there): self-loop bytes, whether every UTF-8 character loops, and for
 * bounded repetitions the bytes that step to S with the counts advanced
 * (cloop), the repetitions left (rem) and REJ_OK. One parser step per byte
 * group, once per state. -1 on no memory. */
static int learn_ctarget(mt_mask_cache *c, di_grammar_matcher *L, const di_grammar *g, const di_grammar_vocab *v,
                         uint32_t S, uint32_t dep);

int mt_learn_loops(mt_mask_cache *c, di_grammar_matcher *L, const di_grammar *g, const di_grammar_vocab *v,
                   uint32_t S, uint32_t dep, bool ct) {
    ldfa *d = &c->dfa;
    gb_bits lp = {{0}};
    for (uint32_t x = 0; x < 256; x++) { /* one step per byte group (mt_step_row) */
        if (drow(d, S)[x] == ROW_UNKNOWN) {
            if (mt_step_row(c, L, S, x) == UINT32_MAX) return -1;
            mt_truncate(L, 2 + dep);
        }
        uint32_t r = drow(d, S)[x];
        if (r != ROW_DEAD && (r & ~ROW_ESC) - 2 == S) gb_bits_set(&lp, (uint8_t)x);
    }
    d->loop[S] = lp;
    d->loop_known[S] = LOOP_BYTES;
    if (lp.w[0] | lp.w[1]) { /* worth checking only when ASCII loops too */
        int r = u8_returns(c, L, g, S, S, MT_U8_START, false);
        if (r < 0) return -1;
        mt_truncate(L, 2 + dep);
        if (r) d->loop_known[S] |= LOOP_U8;
        if (r && !((MT_CONTENT_W0 & ~lp.w[0]) | (MT_CONTENT_W1 & ~lp.w[1]))) d->loop_known[S] |= LOOP_CONTENT;
    }
    /* bounded repetitions: the state moves on with every character,
     * but to itself with the counts advanced (is_shift) */
    gb_bits cl = {{0}};
    uint32_t lim = canon_lim(v);
    d->rem[S] = rem_of(c, g, lim, S);
    if (d->rem[S] != 0 && !(lp.w[0] | lp.w[1])) {
        for (uint32_t x = 0; x < 256; x++) {
            uint32_t r = drow(d, S)[x];
            if (r != ROW_DEAD && is_shift(c, g, lim, S, (r & ~ROW_ESC) - 2)) gb_bits_set(&cl, (uint8_t)x);
        }
        if (cl.w[0] | cl.w[1]) {
            d->loop_known[S] |= CLOOP_BYTES;
            int r = u8_returns(c, L, g, S, S, MT_U8_START, true);
            if (r < 0) return -1;
            mt_truncate(L, 2 + dep);
            if (r) d->loop_known[S] |= CLOOP_U8;
            if (rep_then_stop(c, g, lim, S, &cl, r != 0)) d->loop_known[S] |= REJ_OK;
        }
    }
    d->cloop[S] = cl;
    d->visits[S] = LOOP_HOT_NODES;
    if (ct && !(d->loop_known[S] & LOOP_CONTENT)) return learn_ctarget(c, L, g, v, S, dep);
    return 0;
}

/* Content bytes that must step to one state for LOOP_CTARGET to be worth
 * it (there are 94): below that, the exceptions are most of the children. */
#define CTARGET_MIN_BYTES 48

/* Learns whether S (all of its row known: mt_learn_loops) steps to one
 * LOOP_CONTENT state N on every UTF-8 character and on all but a few
 * content bytes (LOOP_CTARGET). N learns its loops here when it has not
 * yet. L is left at depth dep. A few dozen parser steps, once per state.
 * -1 on no memory. */
static int learn_ctarget(mt_mask_cache *c, di_grammar_matcher *L, const di_grammar *g, const di_grammar_vocab *v,
                         uint32_t S, uint32_t dep) {
    ldfa *d = &c->dfa;
    /* the target of the most content bytes (escapes not counted) */
    uint32_t cand[8], cnt[8], nc = 0, first[8];
    for (uint32_t x = 0x20; x < 0x80; x++) {
        uint32_t r = drow(d, S)[x];
        if (!mt_json_content((uint8_t)x) || r == ROW_DEAD || (r & ROW_ESC)) continue;
        uint32_t k = 0;
        while (k < nc && cand[k] != r - 2) k++;
        if (k == nc) {
            if (nc == 8) continue;
            cand[nc] = r - 2, cnt[nc] = 0, first[nc] = x, nc++;
        }
        cnt[k]++;
    }
    uint32_t best = 0;
    for (uint32_t k = 1; k < nc; k++)
        if (cnt[k] > cnt[best]) best = k;
    if (!nc || cnt[best] < CTARGET_MIN_BYTES) return 0;
    uint32_t N = cand[best];
    /* a bounded string (maxLength): content steps to S with the counts one
     * further, which reads content on to the next count, never back to
     * itself (no LOOP_CONTENT); N learns its count loops from S instead,
     * when it gets hot (classify) */
    if (N == S || is_shift(c, g, canon_lim(v), S, N)) return 0;
    if (!d->loop_known[N]) {
        if (!mt_push_byte(L, (uint8_t)first[best])) return L->oom ? -1 : 0; /* alive: the row says so */
        L->sids[L->n_sets - 1] = N;
        int r = mt_learn_loops(c, L, g, v, N, dep + 1, false);
        mt_truncate(L, 2 + dep);
        if (r < 0) return -1;
    }
    if (!(d->loop_known[N] & LOOP_CONTENT)) return 0;
    gb_bits x = {{0}};
    for (uint32_t b = 0x20; b < 0x80; b++)
        if (mt_json_content((uint8_t)b) && drow(d, S)[b] != N + 2) gb_bits_set(&x, (uint8_t)b);
    int r = u8_returns(c, L, g, N, S, MT_U8_START, false);
    mt_truncate(L, 2 + dep);
    if (r < 0) return -1;
    if (!r) return 0;
    d->cx[S] = x;
    d->loop_known[S] |= LOOP_CTARGET;
    return 0;
}

/* Whether root state S of a classification is a string interior that
 * takes every content token (exact loops), or every one of at most rem
 * characters (count loops whose excess kills: REJ_OK, or rem beyond the
 * longest): then ORs them into acc from the per-tokenizer table. */
bool mt_fast_content(const mt_mask_cache *c, const di_grammar_vocab *v, uint32_t S, uint32_t *acc) {
    const ldfa *d = &c->dfa;
    if (!v->content_le) return false;
    uint8_t lk = d->loop_known[S];
    const gb_bits *lp = (lk & LOOP_U8) ? &d->loop[S] : &d->cloop[S];
    uint32_t r = v->content_max;
    if (!(lk & LOOP_U8)) {
        if (!(lk & CLOOP_BYTES) || !(lk & CLOOP_U8)) return false;
        if (d->rem[S] < r) {
            if (!(lk & REJ_OK)) return false;
            r = d->rem[S];
        }
    }
    for (uint32_t x = 0x20; x < 0x80; x++)
        if (mt_json_content((uint8_t)x) && !gb_bits_has(lp, (uint8_t)x)) return false;
    size_t words = di_grammar_vocab_mask_words(v);
    const uint32_t *t = v->content_le + (size_t)r * words;
    for (size_t w = 0; w < words; w++) acc[w] |= t[w];
    return true;
}

/* Whether the root (local set 1) begins a rule marked open-string (the key
 * of an extra object member, json_schema.c): every content token is then a
 * viable prefix that cannot complete it, so allowed in every state with
 * this key; ORs them into acc from the per-tokenizer table. */
bool mt_open_string_root(const di_grammar_vocab *v, const di_grammar *g, const di_grammar_matcher *L, uint32_t *acc) {
    if (!v->content_le || !g->open_start) return false;
    bool open = false;
    for (uint32_t i = L->sets[1].start; i < L->sets[2].start && !open; i++)
        open = L->items[i].origin == 1 && g->open_start[L->items[i].pos];
    if (!open) return false;
    size_t words = di_grammar_vocab_mask_words(v);
    const uint32_t *t = v->content_le + (size_t)v->content_max * words;
    for (size_t w = 0; w < words; w++) acc[w] |= t[w];
    return true;
}
