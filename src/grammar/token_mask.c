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
 *    not tell apart (step_row). Hot states learn their self-loop bytes, and whether
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
 *    The key of an extra object member (open_string_root) takes the fast
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
 *    tell apart), as step_row does for the local DFA.
 *
 * Caches are bounded; when one fills up it is emptied (ids are then
 * recomputed lazily). Masks and rows are stored in fixed-size blocks, so
 * that growing a cache never copies it (a doubling array of 128k-token
 * masks or 1 KiB rows cost up to a millisecond per growth). */
#include "grammar/matcher_internal.h"

#include "base/alloc.h"

#include <stdlib.h>
#include <string.h>

#define KEY_SELF 0xFFFFFFFFu   /* origin == the set itself */
#define KEY_ACCEPT 0xFFFFFFFEu /* marker triple for the accepting flag */
#define CACHE_MAX_STATES (1u << 20)
#define CACHE_MAX_KEY_WORDS (1u << 24)       /* 64 MiB of interned keys */
#define CACHE_MAX_MASK_BYTES (64u << 20)     /* whole-state masks */
#define MASK_BLOCK 32u /* whole-state masks per storage block (512 KiB with 128k tokens) */
#define CACHE_MAX_LOCAL_BYTES (128u << 20)   /* local classifications */

/* Lazily built DFA over local parser sets (content ids as for whole
 * states; set 0, the outside, has id 0). drow(id)[byte]: 0 unknown,
 * 1 dead, otherwise (next id + 2) | ESC_BIT when that step tried to
 * complete into the outside. loop[id]: bytes that lead back to id, known
 * once the state was hot (then whole trie subtrees made of those bytes are
 * accepted without visiting them). */
#define ROW_UNKNOWN 0u
#define ROW_DEAD 1u
#define ROW_ESC 0x80000000u
#define DFA_MAX_STATES (1u << 16)
#define DFA_ROW_BLOCK 256u /* DFA rows per storage block (256 KiB) */
/* A state learns its loops once the subtrees entered from it add up to
 * this many trie nodes: learning costs a few dozen parser steps (tens of
 * microseconds), walking a node a few nanoseconds. */
#define LOOP_HOT_NODES 2048
/* loop_known flags */
#define LOOP_BYTES 1 /* loop[] holds the self-loop bytes */
#define LOOP_U8 2    /* ... and every UTF-8 character loops as well */
#define CLOOP_BYTES 4 /* cloop[] holds the bytes that loop up to a count (see is_shift) */
#define CLOOP_U8 8    /* ... and so does every UTF-8 character */
#define REJ_OK 16     /* the count loops are of the only repetition, and what follows it
                       * takes no looping character: more characters than it has left
                       * kill the path (rep_then_stop) */
#define LOOP_CONTENT 32 /* LOOP_U8, and every mt_json_content byte loops: a run of
                         * siblings of content-only subtrees (vocab cskip) is accepted at once */
#define LOOP_CTARGET 64 /* every UTF-8 character and every mt_json_content byte but those of
                         * cx[] step to one LOOP_CONTENT state (the key of an open object: any
                         * string but the named keys' first bytes) */
#define NO_ANCHOR UINT32_MAX
#define RROWS_MAX 4096u /* whole-state rows of check_uncertain: 4 MiB */
#define RROW_BLOCK 64u  /* whole-state rows per storage block (64 KiB) */
#define CTAB_N 4          /* byte-class tables kept per matcher (class_tab): up to 1 MiB each */
#define CTAB_MAX_LEN 64   /* longest class run tracked by length */
#define CTAB_MIN_BYTES 32 /* smaller classes (digits, hex) are cheap to walk: not worth a table */
#define REFUSED_N 64      /* items whose structural key was refused, remembered per matcher */

/* Per byte class C (ASCII bytes): the tokens made of C bytes only, by
 * length (rows[k]: those of at most k bytes, k <= rmax; rows[rmax + 1]:
 * all of them), and the class frontier: in preorder, the nodes where a
 * path of C bytes from the root first leaves C (depth in fdep). reach:
 * the longest such C path (the deepest frontier node's depth, or the
 * longest C token). */
typedef struct ctab {
    uint64_t cls[2];
    uint32_t rmax, reach;
    uint32_t *rows;
    mt_frontier *fr;
    uint16_t *fdep;
    uint8_t *fbyte; /* the frontier node's byte */
    gb_bits *dbytes; /* (reach + 1) per depth: the bytes of the frontier nodes there */
    uint32_t n_fr;
} ctab;

typedef struct ldfa {
    mt_keytab states;
    uint32_t **rblk;   /* rows in blocks of DFA_ROW_BLOCK states (drow): growing never copies them */
    uint32_t n_rblk, cap_rblk;
    gb_bits *loop;
    gb_bits *cloop;    /* bytes stepping to the same state with counts advanced by one */
    uint32_t *rem;     /* repetitions left before the tightest count bound (UINT32_MAX: none) */
    uint32_t *visits;
    gb_bits *cx;       /* LOOP_CTARGET: the content bytes that step elsewhere */
    uint8_t *loop_known;
    uint32_t cap;
} ldfa;

/* Row of DFA state S: per byte, ROW_UNKNOWN, ROW_DEAD or (next + 2) | ROW_ESC. */
static inline uint32_t *drow(const ldfa *d, uint32_t S) {
    return d->rblk[S / DFA_ROW_BLOCK] + (size_t)(S % DFA_ROW_BLOCK) * 256;
}

struct mt_mask_cache {
    ldfa dfa;
    uint32_t *path_sid; /* scratch per depth */
    uint8_t *path_byte;
    mt_keytab states;
    uint32_t *mask_of;   /* per state id: index of its mask + 1, 0 = none */
    uint32_t cap_mask_of;
    /* whole-state masks in blocks of MASK_BLOCK (mask_at): a new block
     * never moves the others, so storing a mask never copies the cache
     * (a doubling array cost up to 0.5 ms per growth with 128k tokens) */
    uint32_t **mblocks;  /* (n_mblocks) each MASK_BLOCK * words, kept across flushes */
    uint32_t n_masks, n_mblocks, cap_mblocks;
    mt_keytab locals;
    mt_local_entry *lents;
    uint32_t cap_lents;
    size_t local_bytes;
    di_grammar_matcher *lp; /* local parser */
    uint32_t *key, cap_key;  /* scratch */
    uint64_t n_steps;        /* local parser steps so far (classify's budget) */
    uint32_t cls_i, cls_cap_unc; /* a suspended classify: next node, capacity of unc */
    bool cls_fast;               /* the classify under way takes the content fast path */
    bool cls_open;               /* ... from the key of an extra object member (no state learns its loops) */
    uint32_t last_seed;          /* root DFA state of the last classify (UINT32_MAX: none) */
    /* the content frontier being walked (see descend): the subtrees
     * jt[j_next .. j_end) are left, the current one ends at node j_stop,
     * the descend point's subtree at j_after; the descend point's children
     * are at depth j_dep. The subtrees walked hold no further descend point
     * (no path through a frontier node is content, and an exception child's
     * state does not loop on content), so one level is all there is. */
    bool j_on;
    uint32_t j_next, j_end, j_stop, j_after, j_dep;
    /* the anchor (see classify) that jump_path gives the nodes on the way
     * to each frontier node: the root of a count descend, whose paths
     * there are looping characters; NO_ANCHOR otherwise */
    uint32_t j_anc;
    mt_frontier *jt;
    uint32_t cap_jt;
    uint8_t *esc;            /* scratch: escape seen along the walk, per depth */
    /* scratch per depth: the anchor of the walk path (see classify), its
     * depth and the UTF-8 decoder state since it; NO_ANCHOR: none */
    uint32_t *anc, *anc_dep, *path_ch; /* path_ch: characters on the path above */
    uint8_t *anc_u8;
    uint8_t *pc_ok, *pc_u8; /* per depth: the path above is string content; its decoder state */
    uint8_t *csame;          /* count_descend scratch per chain state: 0 unknown, 1 holds S0's items, 2 not */
    uint32_t *lmap;          /* scratch: dedup of local seed items */
    uint32_t cap_lmap;
    /* Whole-state steps for the uncertain tokens (check_uncertain):
     * row rrow_of[id] - 1 (rrow: in rblocks) holds per byte ROW_UNKNOWN,
     * ROW_DEAD or the next whole-state id + 2; rows only for the states stepped from, at
     * most RROWS_MAX (then all are dropped); they go with the ids
     * (flush_states). rpath: scratch per depth, the id after each byte. */
    uint32_t *rrow_of, cap_rrow_of;
    uint32_t **rblocks;     /* (n_rblocks) each RROW_BLOCK rows of 256; never moved (see store_mask) */
    uint32_t n_rrows, n_rblocks, cap_rblocks;
    uint32_t *rpath;
    ctab ctabs[CTAB_N]; /* class_descend's tables, built when a class comes back */
    uint32_t n_ctabs, ctab_next;
    uint64_t cseen[CTAB_N * 4][2]; /* classes seen once (a ring) */
    uint32_t n_cseen;
    /* local keys whose structural key was refused (too large), by the hash
     * of their items without the counts (a ring): the same items reach the
     * same grammar, so the key of another count is refused too and is not
     * worth building (tens of microseconds inside a large object) */
    uint32_t refused[REFUSED_N];
    uint32_t n_refused;
    mt_struct_scratch ss; /* structural keys for the shared cache */
};

/* ---- key table ---------------------------------------------------------- */

static uint32_t hash_words(const uint32_t *k, uint32_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
    for (uint32_t i = 0; i < n; i++) {
        h ^= k[i];
        h *= 0xff51afd7ed558ccdull;
        h ^= h >> 32;
    }
    return (uint32_t)h;
}

void mt_kt_free(mt_keytab *t) {
    free(t->slot), free(t->data), free(t->off), free(t->hash);
    memset(t, 0, sizeof *t);
}

static bool kt_rehash(mt_keytab *t, uint32_t nc) {
    uint32_t *s = calloc(nc, sizeof *s);
    if (!s) return false;
    for (uint32_t id = 0; id < t->n_ids; id++) {
        uint32_t h = t->hash[id] & (nc - 1);
        while (s[h]) h = (h + 1) & (nc - 1);
        s[h] = id + 1;
    }
    free(t->slot);
    t->slot = s, t->cap = nc;
    return true;
}

/* Returns the id of key (adding it when absent; *added tells), or
 * UINT32_MAX when out of memory. */
uint32_t mt_kt_intern(mt_keytab *t, const uint32_t *k, uint32_t n, bool *added) {
    *added = false;
    if ((t->n_ids + 1) * 2 > t->cap && !kt_rehash(t, t->cap ? t->cap * 2 : 1024)) return UINT32_MAX;
    uint32_t h = hash_words(k, n), i = h & (t->cap - 1);
    while (t->slot[i]) {
        uint32_t id = t->slot[i] - 1;
        if (t->hash[id] == h && t->off[id + 1] - t->off[id] == n && (!n || !memcmp(t->data + t->off[id], k, n * sizeof *k)))
            return id;
        i = (i + 1) & (t->cap - 1);
    }
    if (t->n_ids + 2 > t->cap_ids) {
        uint32_t nc = t->cap_ids ? t->cap_ids * 2 : 1024;
        size_t *o = di_realloc_array(t->off, (size_t)nc + 1, sizeof *o);
        if (!o) return UINT32_MAX;
        t->off = o;
        uint32_t *hh = di_realloc_array(t->hash, nc, sizeof *hh);
        if (!hh) return UINT32_MAX;
        t->hash = hh, t->cap_ids = nc;
    }
    if (t->n_data + n > t->cap_data) {
        size_t nc = t->cap_data ? t->cap_data * 2 : 4096;
        while (nc < t->n_data + n) nc *= 2;
        uint32_t *d = di_realloc_array(t->data, nc, sizeof *d);
        if (!d) return UINT32_MAX;
        t->data = d, t->cap_data = nc;
    }
    if (t->n_ids == 0) t->off[0] = 0;
    if (n) memcpy(t->data + t->n_data, k, n * sizeof *k); /* empty keys are valid (a finished state) */
    t->n_data += n;
    uint32_t id = t->n_ids++;
    t->off[id + 1] = t->n_data;
    t->hash[id] = h;
    t->slot[i] = id + 1;
    *added = true;
    return id;
}

uint32_t mt_kt_find(const mt_keytab *t, const uint32_t *k, uint32_t n) {
    if (!t->cap) return UINT32_MAX;
    uint32_t h = hash_words(k, n), i = h & (t->cap - 1);
    while (t->slot[i]) {
        uint32_t id = t->slot[i] - 1;
        if (t->hash[id] == h && t->off[id + 1] - t->off[id] == n && (!n || !memcmp(t->data + t->off[id], k, n * sizeof *k)))
            return id;
        i = (i + 1) & (t->cap - 1);
    }
    return UINT32_MAX;
}

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

static void dfa_free(ldfa *d) {
    mt_kt_free(&d->states);
    for (uint32_t b = 0; b < d->n_rblk; b++) free(d->rblk[b]);
    free(d->rblk), free(d->loop), free(d->visits), free(d->loop_known), free(d->cloop), free(d->rem);
    free(d->cx);
    memset(d, 0, sizeof *d);
}

void mt_mask_cache_free(mt_mask_cache *c) {
    if (!c) return;
    flush_locals(c);
    dfa_free(&c->dfa);
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

static bool ensure_key(mt_mask_cache *c, uint32_t n) {
    if (n <= c->cap_key) return true;
    uint32_t nc = c->cap_key ? c->cap_key : 256;
    while (nc < n) nc *= 2;
    uint32_t *k = di_realloc_array(c->key, nc, sizeof *k);
    if (!k) return false;
    c->key = k, c->cap_key = nc;
    return true;
}

/* Sorts (a, b, c) triples and drops duplicates; returns the new count. */
static uint32_t sort_triples(uint32_t *k, uint32_t n) {
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

/* ---- whole-state ids ---------------------------------------------------- */

/* Content id of set k (all lower sets have ids); UINT32_MAX on no memory. */
static uint32_t state_id(di_grammar_matcher *m, uint32_t k) {
    mt_mask_cache *c = m->cache;
    const mt_set *s = &m->sets[k], *e = &m->sets[k + 1];
    uint32_t n = (e->scan_start - s->scan_start) + (e->wait_start - s->wait_start) + 1;
    if (!ensure_key(c, 3 * n)) return UINT32_MAX;
    uint32_t q = 0;
    for (int pass = 0; pass < 2; pass++) {
        const uint32_t *idx = pass ? m->waits : m->scans;
        uint32_t a = pass ? s->wait_start : s->scan_start, z = pass ? e->wait_start : e->scan_start;
        for (uint32_t i = a; i < z; i++) {
            const mt_item *it = &m->items[idx[i]];
            c->key[q++] = it->pos;
            c->key[q++] = it->origin == k ? KEY_SELF : m->sids[it->origin];
            c->key[q++] = it->aux;
        }
    }
    c->key[q++] = KEY_ACCEPT, c->key[q++] = s->accept, c->key[q++] = 0;
    n = sort_triples(c->key, q / 3);
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

/* ---- local classification ---------------------------------------------- */

/* Repetition counts in a local key keep only what a token (at most max_len
 * bytes, each repetition at least one byte) can observe: the distance to
 * min and to max, clamped. */
static uint32_t canon_lim(const di_grammar_vocab *v) { return v->max_len + 2 < 0xFFFF ? v->max_len + 2 : 0xFFFF; }

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

/* Builds the local key of the current set into c->key; returns its length
 * in words (triples pos, here?, canon aux). */
static uint32_t local_key(di_grammar_matcher *m) {
    mt_mask_cache *c = m->cache;
    uint32_t k = m->n_sets - 1;
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
            c->key[q++] = it->origin == k;
            c->key[q++] = canon_aux(m->g, m->vocab, it);
        }
    }
    return 3 * sort_triples(c->key, q / 3);
}

/* Seeds the local parser with the current set's items: origin "here" -> 1,
 * anything earlier -> 0 (the outside). One representative per key triple
 * (items that differ only in which outside set they came from behave the
 * same until they try to complete, which is exactly the escape). */
static bool seed_local(di_grammar_matcher *m) {
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

static bool push_u32(uint32_t **v, uint32_t *n, uint32_t *cap, uint32_t x) {
    if (*n == *cap) {
        uint32_t nc = *cap ? *cap * 2 : 256;
        uint32_t *t = di_realloc_array(*v, nc, sizeof *t);
        if (!t) return false;
        *v = t, *cap = nc;
    }
    (*v)[(*n)++] = x;
    return true;
}

/* Interns the content of local set k (origins as ids; 0 = outside) and
 * makes sure its DFA row exists. UINT32_MAX on no memory. */
static uint32_t local_sid(mt_mask_cache *c, di_grammar_matcher *L, uint32_t k) {
    ldfa *d = &c->dfa;
    const mt_set *s = &L->sets[k], *e = &L->sets[k + 1];
    uint32_t n = (e->scan_start - s->scan_start) + (e->wait_start - s->wait_start);
    if (!ensure_key(c, 3 * n + 3)) return UINT32_MAX;
    uint32_t q = 0;
    for (int pass = 0; pass < 2; pass++) {
        const uint32_t *idx = pass ? L->waits : L->scans;
        uint32_t a = pass ? s->wait_start : s->scan_start, z = pass ? e->wait_start : e->scan_start;
        for (uint32_t i = a; i < z; i++) {
            const mt_item *it = &L->items[idx[i]];
            c->key[q++] = it->pos;
            c->key[q++] = it->origin == k ? KEY_SELF : L->sids[it->origin];
            c->key[q++] = canon_aux(L->g, L->vocab, it);
        }
    }
    n = sort_triples(c->key, q / 3);
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

/* Materializes the local parser along the current walk path up to depth
 * `depth` (replaying the recorded bytes); *md is the depth materialized. */
static bool materialize(mt_mask_cache *c, di_grammar_matcher *L, uint32_t *md, uint32_t depth) {
    while (*md < depth) {
        if (!mt_push_byte(L, c->path_byte[*md])) return false; /* cannot happen: the path is alive */
        L->sids[L->n_sets - 1] = c->path_sid[*md + 1];
        (*md)++;
    }
    return true;
}

/* The bytes that the scanning items of P's top set do not tell apart from
 * b (each item's class holds all of them or none): stepping the set on
 * any of them gives the same set, hence the same next state. */
static gb_bits byte_group(const di_grammar_matcher *P, uint8_t b) {
    const di_grammar *g = P->g;
    gb_bits same = {{~0ull, ~0ull, ~0ull, ~0ull}};
    for (uint32_t si = mt_cur(P)->scan_start; si < P->sets[P->n_sets].scan_start; si++) {
        const gb_bits *cl = &g->classes[SYM_VAL(g->syms[P->items[P->scans[si]].pos])];
        bool in = gb_bits_has(cl, b);
        for (int w = 0; w < 4; w++) same.w[w] &= in ? cl->w[w] : ~cl->w[w];
    }
    return same;
}

/* One DFA step from the state at depth d (materialized) on byte b. */
static uint32_t step(mt_mask_cache *c, di_grammar_matcher *L, uint32_t b) {
    c->n_steps++;
    if (!mt_push_byte(L, (uint8_t)b)) return L->oom ? UINT32_MAX : ROW_DEAD;
    uint32_t k = L->n_sets - 1;
    uint32_t id = local_sid(c, L, k);
    if (id == UINT32_MAX) return UINT32_MAX;
    L->sids[k] = id;
    return (id + 2) | (L->sets[k].escaped ? ROW_ESC : 0);
}

/* Steps the top set S of L (materialized) on byte b and records the DFA
 * row (S, x) for every byte x that steps the same way: x and b belong to
 * the same classes of S's scanning items, so the same items scan and the
 * new set is the same. A JSON string interior has about a dozen such byte
 * groups, so learning a state costs a dozen parser steps, not 256. */
static uint32_t step_row(mt_mask_cache *c, di_grammar_matcher *L, uint32_t S, uint32_t b) {
    gb_bits same = byte_group(L, (uint8_t)b);
    uint32_t e = step(c, L, b);
    if (e == UINT32_MAX) return e;
    uint32_t *row = drow(&c->dfa, S);
    for (int w = 0; w < 4; w++)
        for (uint64_t bits = same.w[w]; bits; bits &= bits - 1) row[w * 64 + __builtin_ctzll(bits)] = e;
    return e;
}

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
            e = step_row(c, L, T, b); /* pushes a set unless dead */
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
static bool inherit_loops(mt_mask_cache *c, const di_grammar *g, const di_grammar_vocab *v, uint32_t P, uint32_t S) {
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

static int learn_loops(mt_mask_cache *c, di_grammar_matcher *L, const di_grammar *g, const di_grammar_vocab *v,
                       uint32_t S, uint32_t dep, bool ct) {
    ldfa *d = &c->dfa;
    gb_bits lp = {{0}};
    for (uint32_t x = 0; x < 256; x++) { /* one step per byte group (step_row) */
        if (drow(d, S)[x] == ROW_UNKNOWN) {
            if (step_row(c, L, S, x) == UINT32_MAX) return -1;
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

/* Learns whether S (all of its row known: learn_loops) steps to one
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
        int r = learn_loops(c, L, g, v, N, dep + 1, false);
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

/* Whether node i's subtree, entered with the UTF-8 decoder in state q, is
 * made of content bytes only (with a content path above it, its tokens are
 * those of the per-tokenizer content tables). */
static bool content_subtree(const di_grammar_vocab *v, uint32_t i, uint8_t q) {
    return mt_json_content_ascii(&v->sub[i]) && ((v->u8ok[i] >> q) & 1);
}

/* Whether root state S of a classification is a string interior that
 * takes every content token (exact loops), or every one of at most rem
 * characters (count loops whose excess kills: REJ_OK, or rem beyond the
 * longest): then ORs them into acc from the per-tokenizer table. */
static bool fast_content(const mt_mask_cache *c, const di_grammar_vocab *v, uint32_t S, uint32_t *acc) {
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

/* Sets up the walk path from depth dep0 (the path arrays hold what is
 * above) down to frontier node f->node: the bytes are those of the first
 * token below it, each state comes from the DFA rows (stepping the local
 * parser where a row is not known yet). false when out of memory, or when
 * a step on the way dies, which a state that loops on all string content
 * rules out (the caller then gives up, which stays exact). */
static bool jump_path(mt_mask_cache *c, di_grammar_matcher *L, const di_grammar_vocab *v, uint32_t dep0,
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
            e = step_row(c, L, S, b);
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

static void accept_range(uint32_t *acc, const uint32_t *trie_tok, uint32_t lo, uint32_t hi) {
    for (uint32_t q = lo; q < hi; q++) acc[trie_tok[q] >> 5] |= 1u << (trie_tok[q] & 31);
}

/* Content descend below a node (or the root) whose children, nodes
 * first .. end-1 at depth dep0 with tokens from tok_lo on, are read from
 * state P = path_sid[dep0], when P loops on all string content
 * (LOOP_CONTENT: x is NULL) or steps to such a state on every content
 * character but the bytes x (LOOP_CTARGET), and the path to here is
 * content ending at a character boundary (gs: the frontier below). Then
 * every token below is accepted but those under the frontier nodes and
 * under the children whose byte is in x, and the state in front of each of
 * those follows from the DFA rows: those subtrees are walked one by one
 * (jump_path) instead of every content node on the way to them (at an
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
    return jump_path(c, L, v, dep0, &c->jt[0], md);
}

/* Whether the root (local set 1) begins a rule marked open-string (the key
 * of an extra object member, json_schema.c): every content token is then a
 * viable prefix that cannot complete it, so allowed in every state with
 * this key; ORs them into acc from the per-tokenizer table. */
static bool open_string_root(const di_grammar_vocab *v, const di_grammar *g, const di_grammar_matcher *L, uint32_t *acc) {
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
    e = step_row(c, L, S, b);
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
static int class_descend(mt_mask_cache *c, di_grammar_matcher *L, const di_grammar_vocab *v, uint32_t *acc, uint32_t *i,
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
    return jump_path(c, L, v, 0, &c->jt[0], md) ? 1 : -1;
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
 * interior taking the content fast path (fast_content held: every content
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
 * are walked, each from the state the rows give for its path (jump_path).
 * S_k is the end of the chain S0 -> S1 -> ... on 'a', used while every
 * ASCII content byte steps alike from each chain state (checked); that
 * every UTF-8 character steps there too is what CLOOP_U8 / LOOP_U8 says of
 * S0 and the counts further (as inherit_loops takes it). The first mask
 * inside each property's bounded string is such a root (its state holds
 * the rest of the object, so every property classifies its own). Returns
 * 1 done (*i: the first subtree to walk), 0 not applicable (the plain walk
 * follows), -1 no memory. */
static int count_descend(mt_mask_cache *c, di_grammar_matcher *L, const di_grammar_vocab *v, uint32_t *i,
                         uint32_t *md) {
    const ldfa *d = &c->dfa;
    uint32_t S0 = c->path_sid[0];
    uint8_t lk = d->loop_known[S0];
    bool exact = (lk & LOOP_U8) != 0; /* fast_content: then every content byte loops */
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
    return jump_path(c, L, v, 0, &c->jt[0], md) ? 1 : -1;
}

/* Walks the whole trie with the seeded local parser, through the DFA. */
/* classify() results */
enum { CLS_OK, CLS_NOMEM, CLS_OVER };

/* Work units of classify's budget: one per trie node visited, STEP_WORK per
 * parser step (a step costs about as much as walking a hundred nodes). */
#define STEP_WORK 100
/* Walks the trie for le. budget (0: none): past it, returns CLS_OVER with
 * the walk suspended (le partly filled); classify(..., resume = true)
 * continues where it stopped, so consulting the shared cache in between
 * wastes nothing. */
static int classify(di_grammar_matcher *m, mt_local_entry *le, uint64_t budget, bool resume) {
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
    if (d->states.n_ids > DFA_MAX_STATES) dfa_free(d), c->last_seed = UINT32_MAX;
    if (d->states.n_ids == 0) { /* id 0: the outside */
        uint32_t outside[3] = {KEY_ACCEPT, KEY_ACCEPT, KEY_ACCEPT};
        bool added;
        if (mt_kt_intern(&d->states, outside, 3, &added) != 0) return CLS_NOMEM;
    }
    L->sids[0] = 0;
    uint32_t seed = local_sid(c, L, 1);
    if (seed == UINT32_MAX) return CLS_NOMEM;
    L->sids[1] = seed;
    /* The root state learns its loops up front (a few dozen parser steps;
     * a walk of a large vocabulary costs far more), so that a string
     * interior takes the fast path: the per-tokenizer table of content
     * tokens by length gives their bits at once, and the walk skips the
     * subtrees made of content only. The key of an extra object member
     * (open_string_root) takes that path without them: it reads no
     * character back into itself, and what it would learn beyond that
     * (its content target, LOOP_CTARGET: some hundred parser steps with
     * the UTF-8 exploration) only serves the content descend, which the
     * fast path replaces; so it is not made to learn during the walk
     * either. */
    bool open = !d->loop_known[seed] && open_string_root(v, m->g, L, le->acc);
    if (open)
        d->visits[seed] = LOOP_HOT_NODES;
    else if (!d->loop_known[seed] && !inherit_loops(c, m->g, v, c->last_seed, seed) &&
             learn_loops(c, L, m->g, v, seed, 0, true) < 0)
        return CLS_NOMEM;
    c->last_seed = seed;
    bool fc = !open && fast_content(c, v, seed, le->acc);
    c->cls_fast = open || fc || open_string_root(v, m->g, L, le->acc);
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
        /* every content token is allowed (open_string_root), so only the
         * subtrees of the content frontier are left: walked one by one from
         * the state the rows give for their path (a content path never dies
         * in an open key), without visiting the content nodes on the way;
         * the named keys' prefixes need no exception, their states come
         * from the rows too */
        if (!descend(c, L, v, le->acc, 0, v->n_nodes, 0, all, 0, NULL, &i, &md)) return CLS_NOMEM;
    } else if (c->cls_fast) {
        if (fc && count_descend(c, L, v, &i, &md) < 0) return CLS_NOMEM;
    } else if (d->loop_known[seed] & (LOOP_CONTENT | LOOP_CTARGET)) {
        const gb_bits *x = (d->loop_known[seed] & LOOP_CONTENT) ? NULL : &d->cx[seed];
        if (!descend(c, L, v, le->acc, 0, v->n_nodes, 0, all, 0, x, &i, &md)) return CLS_NOMEM;
    } else if (class_descend(c, L, v, le->acc, &i, &md) < 0) {
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
                if (!jump_path(c, L, v, c->j_dep, f, &md)) return CLS_NOMEM;
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
            e = step_row(c, L, S, b);
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
         * the counts further (inherit_loops: a bounded string's first
         * characters, where learning costs some fifty parser steps a count) */
        if (!c->cls_open && !d->loop_known[S] && d->visits[S] < LOOP_HOT_NODES &&
            (d->visits[S] += v->skip[i] - i) >= LOOP_HOT_NODES && !inherit_loops(c, m->g, v, A, S)) {
            if (md > dep) mt_truncate(L, 2 + dep), md = dep;
            if (!materialize(c, L, &md, dep) || learn_loops(c, L, m->g, v, S, dep, true) < 0) return CLS_NOMEM;
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
    uint32_t n = local_key(m);
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
    int r = seed_local(m) ? classify(m, le, sh ? m->vocab->share_budget : 0, false) : CLS_NOMEM;
    if (r == CLS_OVER) {
        /* the key is rebuilt: classify used c->key as scratch */
        n = local_key(m);
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
        r = classify(m, le, 0, true); /* the local parser is still seeded */
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
    if (!m->cache && (m->cache = calloc(1, sizeof *m->cache))) m->cache->last_seed = UINT32_MAX;
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
