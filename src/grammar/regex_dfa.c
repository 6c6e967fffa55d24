/* Regex determinization: a plain-mode regex node (UTF-8 text, no rule
 * references) becomes a deterministic automaton over bytes, written back as
 * right-linear rules (one rule per state: `byte-class next-state | ...`).
 *
 * Why: the tree form of an ambiguous regex such as (?:[a-z]+-?)+ gives the
 * Earley parser one item per way of splitting the text so far, so masks in
 * such a string cost milliseconds; the automaton has one live state.
 *
 * The product with a character counter gives `pattern` together with
 * minLength / maxLength exactly: characters are counted on the plain UTF-8
 * bytes (every byte that is not a continuation byte starts one), and the
 * count saturates at the minimum when there is no maximum.
 *
 * Steps: Thompson NFA over bytes (Unicode classes expanded to UTF-8 byte
 * sequences, counted repetitions unrolled), subset construction over the
 * byte partition of the NFA's classes (with the count), removal of states
 * from which no accepting state is reachable (the grammar must not allow a
 * prefix that cannot be completed), then emission. In JSON-string mode each
 * transition's bytes are written as the JSON encodings of those characters
 * (rx_cpset for ASCII: escapes for '"', '\' and controls; bytes >= 0x80 as
 * themselves). NFA and DFA sizes are capped: past a cap the caller gets
 * *too_big and keeps its fallback. */
#include "grammar/regex_dfa.h"

#include "grammar/cpset.h"
#include "grammar/keytab.h"
#include "grammar/u8.h"

#include "base/alloc.h"

#include <stdlib.h>
#include <string.h>

#define NFA_MAX_STATES (1u << 16)
#define EPS UINT32_MAX

typedef struct nfa_edge {
    uint32_t from, to, set; /* set: index into sets, or EPS */
} nfa_edge;

typedef struct nfa {
    gb *b;
    uint32_t n_states;
    nfa_edge *e;
    uint32_t n_e, cap_e;
    gb_bits *sets;
    uint32_t n_sets, cap_sets;
    bool too_big;
} nfa;

typedef struct frag {
    uint32_t s, e; /* start state; end state (no out edges yet) */
} frag;

static uint32_t nfa_state(nfa *a) {
    if (a->n_states >= NFA_MAX_STATES) {
        a->too_big = true;
        return 0;
    }
    return a->n_states++;
}

static void nfa_add(nfa *a, uint32_t from, uint32_t to, uint32_t set) {
    if (a->too_big) return;
    if (a->n_e == a->cap_e) {
        uint32_t nc = a->cap_e ? a->cap_e * 2 : 256;
        nfa_edge *x = di_realloc_array(a->e, nc, sizeof *x);
        if (!x) { a->too_big = true; return; }
        a->e = x, a->cap_e = nc;
    }
    a->e[a->n_e++] = (nfa_edge){from, to, set};
}

static uint32_t nfa_set(nfa *a, const gb_bits *x) {
    if (a->n_sets == a->cap_sets) {
        uint32_t nc = a->cap_sets ? a->cap_sets * 2 : 64;
        gb_bits *s = di_realloc_array(a->sets, nc, sizeof *s);
        if (!s) { a->too_big = true; return 0; }
        a->sets = s, a->cap_sets = nc;
    }
    a->sets[a->n_sets] = *x;
    return a->n_sets++;
}

static frag build(nfa *a, uint32_t node, uint32_t depth);

static frag byte_frag(nfa *a, const gb_bits *x) {
    frag f = {nfa_state(a), nfa_state(a)};
    nfa_add(a, f.s, f.e, nfa_set(a, x));
    return f;
}

static frag build(nfa *a, uint32_t node, uint32_t depth) {
    gb *b = a->b;
    frag f = {0, 0};
    if (a->too_big || depth > 4 * DI_GRAMMAR_DEFAULT_MAX_DEPTH) {
        a->too_big = true;
        return f;
    }
    gb_node nd = b->nodes[node];
    switch (nd.kind) {
    case GN_EMPTY: f.s = f.e = nfa_state(a); return f;
    case GN_NOTHING: f.s = nfa_state(a), f.e = nfa_state(a); return f;
    case GN_CLASS: return byte_frag(a, &b->classes[nd.a]);
    case GN_BYTES: {
        f.s = f.e = nfa_state(a);
        for (uint32_t i = 0; i < nd.b && !a->too_big; i++) {
            gb_bits one = {{0}};
            gb_bits_set(&one, b->bytes[nd.a + i]);
            frag k = byte_frag(a, &one);
            nfa_add(a, f.e, k.s, EPS);
            f.e = k.e;
        }
        return f;
    }
    case GN_UCLASS: {
        uint32_t x = gb_uclass_utf8(b, node);
        if (x == GB_NIL) { a->too_big = true; return f; }
        return build(a, x, depth + 1);
    }
    case GN_SEQ: {
        f.s = f.e = nfa_state(a);
        for (uint32_t i = 0; i < nd.b && !a->too_big; i++) {
            frag k = build(a, b->kids[nd.a + i], depth + 1);
            nfa_add(a, f.e, k.s, EPS);
            f.e = k.e;
        }
        return f;
    }
    case GN_ALT: {
        f.s = nfa_state(a), f.e = nfa_state(a);
        for (uint32_t i = 0; i < nd.b && !a->too_big; i++) {
            frag k = build(a, b->kids[nd.a + i], depth + 1);
            nfa_add(a, f.s, k.s, EPS);
            nfa_add(a, k.e, f.e, EPS);
        }
        return f;
    }
    case GN_REPEAT: {
        uint32_t lo = nd.c, hi = nd.d;
        if ((uint64_t)lo + (hi == GB_INF ? 1 : hi - lo) > NFA_MAX_STATES) {
            a->too_big = true;
            return f;
        }
        f.s = f.e = nfa_state(a);
        for (uint32_t i = 0; i < lo && !a->too_big; i++) {
            frag k = build(a, nd.a, depth + 1);
            nfa_add(a, f.e, k.s, EPS);
            f.e = k.e;
        }
        if (hi == GB_INF) {
            frag k = build(a, nd.a, depth + 1);
            uint32_t out = nfa_state(a);
            nfa_add(a, f.e, k.s, EPS);
            nfa_add(a, f.e, out, EPS);
            nfa_add(a, k.e, k.s, EPS);
            nfa_add(a, k.e, out, EPS);
            f.e = out;
        } else if (hi > lo) {
            uint32_t out = nfa_state(a);
            for (uint32_t i = lo; i < hi && !a->too_big; i++) {
                frag k = build(a, nd.a, depth + 1);
                nfa_add(a, f.e, k.s, EPS);
                nfa_add(a, f.e, out, EPS);
                f.e = k.e;
            }
            nfa_add(a, f.e, out, EPS);
            f.e = out;
        }
        return f;
    }
    default: /* rule references: not a regex */
        a->too_big = true;
        return f;
    }
}

/* ---- subset construction ------------------------------------------------ */

/* State sets are interned in an mt_keytab (keytab.h). */

static int cmp_u32(const void *x, const void *y) {
    uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
    return a < b ? -1 : a > b;
}

typedef struct closure {
    uint32_t *first, *eps_to; /* CSR of epsilon edges by source */
    uint32_t *bfirst, *bedge; /* CSR of byte edges by source (edge indices) */
    uint32_t *mark, gen;
    uint32_t *stack;
} closure;

/* Epsilon closure of the n states in buf (room for all NFA states), sorted;
 * returns the new count. */
static uint32_t close_set(closure *cl, uint32_t *buf, uint32_t n) {
    cl->gen++;
    uint32_t sp = 0, m = 0;
    for (uint32_t i = 0; i < n; i++)
        if (cl->mark[buf[i]] != cl->gen) cl->mark[buf[i]] = cl->gen, cl->stack[sp++] = buf[i];
    while (sp) {
        uint32_t s = cl->stack[--sp];
        buf[m++] = s;
        for (uint32_t j = cl->first[s]; j < cl->first[s + 1]; j++) {
            uint32_t t = cl->eps_to[j];
            if (cl->mark[t] != cl->gen) cl->mark[t] = cl->gen, cl->stack[sp++] = t;
        }
    }
    qsort(buf, m, sizeof *buf, cmp_u32);
    return m;
}

/* Edge rules already made, by byte set: an automaton has many edges but
 * few distinct sets, and a JSON-encoded set is dozens of nodes. */
typedef struct edge_cache {
    gb_bits *set;
    uint32_t *rule, n, cap;
} edge_cache;

static uint32_t edge_text(gb *b, const gb_bits *x, bool json);

static uint32_t edge_node(gb *b, edge_cache *ec, const gb_bits *x, bool json) {
    for (uint32_t i = 0; i < ec->n; i++)
        if (!memcmp(&ec->set[i], x, sizeof *x)) return gb_ref(b, ec->rule[i]);
    if (ec->n == ec->cap) {
        uint32_t nc = ec->cap ? ec->cap * 2 : 32;
        gb_bits *s = di_realloc_array(ec->set, nc, sizeof *s);
        if (!s) return gb_fail(b, DI_ERR_NOMEM, "out of memory"), GB_NIL;
        ec->set = s;
        uint32_t *r = di_realloc_array(ec->rule, nc, sizeof *r);
        if (!r) return gb_fail(b, DI_ERR_NOMEM, "out of memory"), GB_NIL;
        ec->rule = r, ec->cap = nc;
    }
    uint32_t r = gb_rule_of(b, NULL, edge_text(b, x, json));
    if (r == GB_NIL) return GB_NIL;
    ec->set[ec->n] = *x, ec->rule[ec->n++] = r;
    return gb_ref(b, r);
}

/* Bytes of set x as JSON-string text: ASCII through rx_cpset (escapes),
 * the UTF-8 bytes >= 0x80 as they are. */
static uint32_t edge_text(gb *b, const gb_bits *x, bool json) {
    if (!json) return gb_class(b, x);
    uint32_t pairs[2 * 128], n = 0, alts[2], k = 0;
    for (uint32_t c = 0; c < 128; c++) {
        if (!gb_bits_has(x, (uint8_t)c)) continue;
        if (n && pairs[2 * n - 1] + 1 == c) pairs[2 * n - 1] = c;
        else pairs[2 * n] = pairs[2 * n + 1] = c, n++;
    }
    if (n) alts[k++] = rx_cpset(b, pairs, n, false, true);
    gb_bits hi = *x;
    hi.w[0] = hi.w[1] = 0;
    if (hi.w[2] | hi.w[3]) alts[k++] = gb_class(b, &hi);
    return gb_alt(b, alts, k);
}

uint32_t rx_dfa(gb *b, uint32_t plain, uint32_t min_chars, uint32_t max_chars, bool json, uint32_t tail,
                uint32_t max_states, bool *too_big) {
    *too_big = false;
    nfa a = {.b = b};
    uint32_t result = GB_NIL;
    frag f = build(&a, plain, 0);
    uint32_t n = a.n_states;
    closure cl = {0};
    mt_keytab st = {0}, bs = {0}; /* product states; base states */
    uint32_t *btrans = NULL;
    uint32_t *buf = NULL, *trans = NULL, *rules = NULL, *alts = NULL;
    uint8_t *acc = NULL, *live = NULL;
    uint32_t n_cls = 0, rep[256];
    edge_cache ec = {0};
    gb_bits cls_bytes[256] = {{{0}}};
    uint8_t cls_of[256];
    uint8_t *bq = NULL, *uni = NULL;
    if (a.too_big || !gb_ok(b)) goto big;
    /* CSR of epsilon edges */
    cl.first = calloc((size_t)n + 1, sizeof(uint32_t));
    cl.eps_to = di_malloc_array((size_t)a.n_e + 1, sizeof(uint32_t));
    cl.mark = calloc(n, sizeof(uint32_t));
    cl.stack = di_malloc_array((size_t)n + 1, sizeof(uint32_t));
    cl.bfirst = calloc((size_t)n + 1, sizeof(uint32_t));
    cl.bedge = di_malloc_array((size_t)a.n_e + 1, sizeof(uint32_t));
    buf = di_malloc_array((size_t)n + 1, sizeof(uint32_t));
    if (!cl.first || !cl.eps_to || !cl.mark || !cl.stack || !buf || !cl.bfirst || !cl.bedge) goto nomem;
    for (uint32_t i = 0; i < a.n_e; i++) {
        if (a.e[i].set == EPS) cl.first[a.e[i].from + 1]++;
        else cl.bfirst[a.e[i].from + 1]++;
    }
    for (uint32_t i = 0; i < n; i++) cl.first[i + 1] += cl.first[i], cl.bfirst[i + 1] += cl.bfirst[i];
    {
        uint32_t *fill = di_malloc_array((size_t)n + 1, sizeof(uint32_t)), *bfill = di_malloc_array((size_t)n + 1, sizeof(uint32_t));
        if (!fill || !bfill) { free(fill), free(bfill); goto nomem; }
        memcpy(fill, cl.first, n * sizeof(uint32_t));
        memcpy(bfill, cl.bfirst, n * sizeof(uint32_t));
        for (uint32_t i = 0; i < a.n_e; i++) {
            if (a.e[i].set == EPS) cl.eps_to[fill[a.e[i].from]++] = a.e[i].to;
            else cl.bedge[bfill[a.e[i].from]++] = i;
        }
        free(fill), free(bfill);
    }
    /* byte partition: bytes no class tells apart, continuation bytes apart
     * from the others (the counter) */
    {
        uint64_t sig[256];
        for (uint32_t c = 0; c < 256; c++) sig[c] = (c >= 0x80 && c < 0xC0) ? 1 : 0;
        for (uint32_t s = 0; s < a.n_sets; s++)
            for (uint32_t c = 0; c < 256; c++)
                sig[c] = (sig[c] * 0x100000001B3ull) ^ (gb_bits_has(&a.sets[s], (uint8_t)c) ? s + 2 : 0);
        for (uint32_t c = 0; c < 256; c++) {
            uint32_t k = 0;
            while (k < n_cls && sig[rep[k]] != sig[c]) k++;
            if (k == n_cls) rep[n_cls++] = c;
            cls_of[c] = (uint8_t)k;
            gb_bits_set(&cls_bytes[k], (uint8_t)c);
        }
    }
    /* 1. the automaton over NFA state sets (closures), without the count */
    bool added;
    buf[0] = f.s;
    uint32_t m0 = close_set(&cl, buf, 1);
    if (mt_kt_intern(&bs, buf, m0, &added) == UINT32_MAX) goto nomem;
    uint32_t cap_bt = 0;
    for (uint32_t id = 0; id < bs.n_ids; id++) {
        if (bs.n_ids > max_states) goto big;
        if ((size_t)(id + 1) * n_cls > cap_bt) {
            uint32_t nc = cap_bt ? cap_bt * 2 : 64 * n_cls;
            uint32_t *t = di_realloc_array(btrans, nc, sizeof *t);
            if (!t) goto nomem;
            btrans = t, cap_bt = nc;
        }
        for (uint32_t k = 0; k < n_cls; k++) {
            uint32_t c = rep[k], m = 0;
            const uint32_t *key = bs.data + bs.off[id];
            uint32_t kn = (uint32_t)(bs.off[id + 1] - bs.off[id]);
            for (uint32_t q = 0; q < kn; q++) /* NFA byte edges on c from the set */
                for (uint32_t j = cl.bfirst[key[q]]; j < cl.bfirst[key[q] + 1]; j++) {
                    const nfa_edge *ed = &a.e[cl.bedge[j]];
                    if (gb_bits_has(&a.sets[ed->set], (uint8_t)c)) buf[m++] = ed->to;
                }
            btrans[(size_t)id * n_cls + k] = UINT32_MAX;
            if (!m) continue;
            m = close_set(&cl, buf, m);
            uint32_t to = mt_kt_intern(&bs, buf, m, &added);
            if (to == UINT32_MAX) goto nomem;
            btrans[(size_t)id * n_cls + k] = to;
        }
    }
    /* 1b. universal states: every string from them is accepted (the `.*`
     * after a search pattern matched). Each state's UTF-8 decoder state
     * follows from the bytes that reach it (states are numbered in the
     * order they were reached); a state reached at two decoder states is
     * left out. Then the greatest set where every state accepts at a
     * character boundary and steps on every byte its decoder allows to a
     * state of the set. In the product they become a counted repetition of
     * any character instead of one rule per count. */
    uint32_t nb = bs.n_ids;
    bq = malloc(nb), uni = malloc(nb);
    if (!bq || !uni) goto nomem;
    memset(bq, 0xFF, nb);
    memset(uni, 1, nb);
    bq[0] = MT_U8_START;
    for (uint32_t id = 0; id < nb; id++) {
        if (bq[id] == 0xFF) { uni[id] = 0; continue; }
        for (uint32_t x = 0; x < 256; x++) {
            uint32_t to = btrans[(size_t)id * n_cls + cls_of[x]];
            if (to == UINT32_MAX) continue;
            uint8_t nq = mt_u8_next(bq[id], (uint8_t)x);
            if (nq == MT_U8_BAD) uni[to] = 0;
            else if (bq[to] == 0xFF) bq[to] = nq;
            else if (bq[to] != nq) uni[to] = 0;
        }
    }
    for (bool changed = true; changed;) {
        changed = false;
        for (uint32_t id = 0; id < nb; id++) {
            if (!uni[id]) continue;
            bool ok = true;
            if (bq[id] == MT_U8_START) {
                const uint32_t *key = bs.data + bs.off[id];
                bool a_ = false;
                for (size_t q = 0; q < bs.off[id + 1] - bs.off[id]; q++) a_ |= key[q] == f.e;
                ok = a_;
            }
            for (uint32_t x = 0; ok && x < 256; x++) {
                if (mt_u8_next(bq[id], (uint8_t)x) == MT_U8_BAD) continue;
                uint32_t to = btrans[(size_t)id * n_cls + cls_of[x]];
                ok = to != UINT32_MAX && uni[to];
            }
            if (!ok) uni[id] = 0, changed = true;
        }
    }
    /* 2. its product with the character count (saturating at min_chars
     * when there is no maximum): states (base state, count) */
    uint32_t pk[2] = {0, 0};
    if (mt_kt_intern(&st, pk, 2, &added) == UINT32_MAX) goto nomem;
    uint32_t cap_trans = 0;
    for (uint32_t id = 0; id < st.n_ids; id++) {
        if (st.n_ids > max_states) goto big;
        if ((size_t)(id + 1) * n_cls > cap_trans) {
            uint32_t nc = cap_trans ? cap_trans * 2 : 256 * n_cls;
            uint32_t *t = di_realloc_array(trans, nc, sizeof *t);
            if (!t) goto nomem;
            trans = t, cap_trans = nc;
        }
        uint32_t bstate = st.data[st.off[id]], count = st.data[st.off[id] + 1];
        for (uint32_t k = 0; k < n_cls; k++) {
            if (uni[bstate] && bq[bstate] == MT_U8_START) { /* a counted repetition: no successors */
                trans[(size_t)id * n_cls + k] = UINT32_MAX;
                continue;
            }
            uint32_t c = rep[k], bto = btrans[(size_t)bstate * n_cls + k];
            trans[(size_t)id * n_cls + k] = UINT32_MAX;
            if (bto == UINT32_MAX) continue;
            uint32_t nc = count + !(c >= 0x80 && c < 0xC0);
            if (max_chars == GB_INF && nc > min_chars) nc = min_chars;
            if (max_chars != GB_INF && nc > max_chars) continue;
            pk[0] = bto, pk[1] = nc;
            uint32_t to = mt_kt_intern(&st, pk, 2, &added);
            if (to == UINT32_MAX) goto nomem;
            trans[(size_t)id * n_cls + k] = to;
        }
    }
    /* accepting states, then the states that reach one */
    uint32_t ns = st.n_ids;
    acc = calloc(ns, 1), live = calloc(ns, 1);
    if (!acc || !live) goto nomem;
    for (uint32_t id = 0; id < ns; id++) {
        uint32_t bstate = st.data[st.off[id]];
        if (uni[bstate] && bq[bstate] == MT_U8_START) { /* completes with enough characters */
            acc[id] = live[id] = 1;
            continue;
        }
        if (st.data[st.off[id] + 1] < min_chars) continue;
        const uint32_t *key = bs.data + bs.off[bstate];
        uint32_t kn = (uint32_t)(bs.off[bstate + 1] - bs.off[bstate]);
        for (uint32_t q = 0; q < kn; q++) acc[id] |= key[q] == f.e;
        live[id] = acc[id];
    }
    for (bool changed = true; changed;) {
        changed = false;
        for (uint32_t id = ns; id-- > 0;) { /* targets mostly come later: few passes */
            if (live[id]) continue;
            for (uint32_t k = 0; k < n_cls && !live[id]; k++) {
                uint32_t to = trans[(size_t)id * n_cls + k];
                if (to != UINT32_MAX && live[to]) live[id] = 1, changed = true;
            }
        }
    }
    if (!live[0]) {
        result = gb_nothing(b);
        goto done;
    }
    /* one rule per live state: alternatives grouped by target */
    rules = di_malloc_array(ns, sizeof(uint32_t));
    alts = di_malloc_array((size_t)n_cls + 1, sizeof(uint32_t));
    if (!rules || !alts) goto nomem;
    for (uint32_t id = 0; id < ns; id++) rules[id] = live[id] ? gb_rule_new(b, NULL, 0) : GB_NIL;
    uint32_t tail_rule = tail == GB_NIL ? GB_NIL : gb_rule_of(b, NULL, tail);
    uint32_t any_rule = GB_NIL;
    for (uint32_t id = 0; id < ns && gb_ok(b); id++) {
        if (!live[id]) continue;
        uint32_t bstate = st.data[st.off[id]], count = st.data[st.off[id] + 1];
        if (uni[bstate] && bq[bstate] == MT_U8_START) {
            if (any_rule == GB_NIL)
                any_rule = gb_rule_of(b, NULL, json ? json_string_char(b) : gb_uclass(b, NULL, 0, true));
            uint32_t lo = min_chars > count ? min_chars - count : 0;
            uint32_t hi = max_chars == GB_INF ? GB_INF : max_chars - count;
            uint32_t r = gb_repeat(b, gb_ref(b, any_rule), lo, hi);
            gb_rule_define(b, rules[id], tail_rule == GB_NIL ? r : gb_seq2(b, r, gb_ref(b, tail_rule)));
            continue;
        }
        uint32_t na = 0, loop = GB_NIL;
        uint8_t done[256] = {0};
        for (uint32_t k = 0; k < n_cls; k++) {
            uint32_t to = trans[(size_t)id * n_cls + k];
            if (to == UINT32_MAX || !live[to] || done[k]) continue;
            gb_bits x = {{0}};
            for (uint32_t k2 = k; k2 < n_cls; k2++)
                if (trans[(size_t)id * n_cls + k2] == to)
                    for (int w = 0; w < 4; w++) done[k2] = 1, x.w[w] |= cls_bytes[k2].w[w];
            /* a self-loop becomes a repetition in front of the other edges
             * (their bytes differ: the automaton is deterministic), so a
             * long run nests no rules: the parse of a closing quote does
             * not unwind one rule per byte */
            if (to == id) loop = gb_star(b, edge_node(b, &ec, &x, json));
            else alts[na++] = gb_seq2(b, edge_node(b, &ec, &x, json), gb_ref(b, rules[to]));
        }
        if (acc[id]) alts[na++] = tail_rule == GB_NIL ? gb_empty(b) : gb_ref(b, tail_rule);
        uint32_t body = gb_alt(b, alts, na);
        gb_rule_define(b, rules[id], loop == GB_NIL ? body : gb_seq2(b, loop, body));
    }
    result = gb_ok(b) ? gb_ref(b, rules[0]) : GB_NIL;
    goto done;
big:
    *too_big = gb_ok(b);
    goto done;
nomem:
    gb_fail(b, DI_ERR_NOMEM, "out of memory");
done:
    free(a.e), free(a.sets);
    free(cl.first), free(cl.eps_to), free(cl.mark), free(cl.stack), free(cl.bfirst), free(cl.bedge);
    free(buf), free(trans), free(rules), free(alts), free(acc), free(live);
    mt_kt_free(&st), mt_kt_free(&bs);
    free(btrans), free(bq), free(uni);
    free(ec.set), free(ec.rule);
    return result;
}

/* Whether a regex node nests unbounded (or long) repetitions, the shape
 * whose tree form is ambiguous enough to matter: (?:[a-z]+-?)+. */
static bool nested_rep(const gb *b, uint32_t node, bool under_rep, uint32_t depth) {
    const gb_node *nd = &b->nodes[node];
    if (depth > 1000) return false;
    switch (nd->kind) {
    case GN_SEQ: case GN_ALT:
        for (uint32_t i = 0; i < nd->b; i++)
            if (nested_rep(b, b->kids[nd->a + i], under_rep, depth + 1)) return true;
        return false;
    case GN_REPEAT: {
        bool big = nd->d == GB_INF || nd->d > 1;
        if (big && under_rep) return true;
        return nested_rep(b, nd->a, under_rep || big, depth + 1);
    }
    default: return false;
    }
}

bool rx_is_ambiguous(const gb *b, uint32_t plain) { return nested_rep(b, plain, false, 0); }
