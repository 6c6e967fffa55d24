/* Internals of the allowed-token masks, shared by the files that make
 * them (token_mask.c has the overview). They sit above the parser
 * (matcher_internal.h), the vocabulary (vocab.h), the shared cache and
 * the key table, and call down only; among themselves, top to bottom:
 *
 *   token_mask.c         the entry points, whole-state ids and masks, the
 *                        local entries, check_uncertain (level 3)
 *   token_mask_walk.c    the trie walk of a classification, and the
 *                        content descend
 *   token_mask_length.c  the class and count descends (tokens decided by
 *                        their length)
 *   token_mask_loops.c   what a hot DFA state learns: its loops, count
 *                        loops and content target; the content fast path
 *   token_mask_dfa.c     local keys, the local parser's seed, the lazily
 *                        built DFA over its sets and paths along its rows
 *
 * (each calls only files below it: tests/grammar/include_order.sh checks).
 * Small helpers called in the walk's inner loops are static inline here,
 * so that splitting the file inlines them as before. */
#ifndef DI_GRAMMAR_TOKEN_MASK_INTERNAL_H
#define DI_GRAMMAR_TOKEN_MASK_INTERNAL_H

#include "grammar/keytab.h"
#include "grammar/matcher_internal.h"
#include "grammar/shared_cache.h"
#include "grammar/vocab.h"

#include "base/alloc.h"

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
    /* the anchor (see classify) that mt_jump_path gives the nodes on the way
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
    uint8_t *csame;          /* mt_count_descend scratch per chain state: 0 unknown, 1 holds S0's items, 2 not */
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
    ctab ctabs[CTAB_N]; /* mt_class_descend's tables, built when a class comes back */
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

/* Frees a matcher's cache (m->cache_free: the parser frees the matcher). */
void mt_mask_cache_free(mt_mask_cache *c);

/* mt_classify() results */
enum { CLS_OK, CLS_NOMEM, CLS_OVER };

/* ---- small helpers of the inner loops ----------------------------------- */

/* Repetition counts in a local key keep only what a token (at most max_len
 * bytes, each repetition at least one byte) can observe: the distance to
 * min and to max, clamped. */
static inline uint32_t canon_lim(const di_grammar_vocab *v) { return v->max_len + 2 < 0xFFFF ? v->max_len + 2 : 0xFFFF; }

/* Grows the scratch key c->key to at least n words; false on no memory. */
static inline bool ensure_key(mt_mask_cache *c, uint32_t n) {
    if (n <= c->cap_key) return true;
    uint32_t nc = c->cap_key ? c->cap_key : 256;
    while (nc < n) nc *= 2;
    uint32_t *k = di_realloc_array(c->key, nc, sizeof *k);
    if (!k) return false;
    c->key = k, c->cap_key = nc;
    return true;
}

/* Appends x to the growable array *v (*n used, *cap allocated); false on
 * no memory (*v unchanged). */
static inline bool push_u32(uint32_t **v, uint32_t *n, uint32_t *cap, uint32_t x) {
    if (*n == *cap) {
        uint32_t nc = *cap ? *cap * 2 : 256;
        uint32_t *t = di_realloc_array(*v, nc, sizeof *t);
        if (!t) return false;
        *v = t, *cap = nc;
    }
    (*v)[(*n)++] = x;
    return true;
}

/* Materializes the local parser along the current walk path up to depth
 * `depth` (replaying the recorded bytes); *md is the depth materialized. */
static inline bool materialize(mt_mask_cache *c, di_grammar_matcher *L, uint32_t *md, uint32_t depth) {
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
static inline gb_bits byte_group(const di_grammar_matcher *P, uint8_t b) {
    const di_grammar *g = P->g;
    gb_bits same = {{~0ull, ~0ull, ~0ull, ~0ull}};
    for (uint32_t si = mt_cur(P)->scan_start; si < P->sets[P->n_sets].scan_start; si++) {
        const gb_bits *cl = &g->classes[SYM_VAL(g->syms[P->items[P->scans[si]].pos])];
        bool in = gb_bits_has(cl, b);
        for (int w = 0; w < 4; w++) same.w[w] &= in ? cl->w[w] : ~cl->w[w];
    }
    return same;
}

/* Whether node i's subtree, entered with the UTF-8 decoder in state q, is
 * made of content bytes only (with a content path above it, its tokens are
 * those of the per-tokenizer content tables). */
static inline bool content_subtree(const di_grammar_vocab *v, uint32_t i, uint8_t q) {
    return mt_json_content_ascii(&v->sub[i]) && ((v->u8ok[i] >> q) & 1);
}

/* ORs the tokens trie_tok[lo .. hi) into acc. */
static inline void accept_range(uint32_t *acc, const uint32_t *trie_tok, uint32_t lo, uint32_t hi) {
    for (uint32_t q = lo; q < hi; q++) acc[trie_tok[q] >> 5] |= 1u << (trie_tok[q] & 31);
}

/* ---- token_mask_dfa.c: local keys, the local DFA, paths along its rows - */

/* Frees the local DFA's states and rows and leaves it empty. */
void mt_dfa_free(ldfa *d);

/* Sorts (a, b, c) triples and drops duplicates; returns the new count. */
uint32_t mt_sort_triples(uint32_t *k, uint32_t n);

/* How mt_set_key writes an item's origin and aux. */
typedef enum {
    MT_KEY_LOCAL,     /* origin: 1 when the item began in set k, else 0; canonical aux */
    MT_KEY_IDS_CANON, /* origin: KEY_SELF for set k, else the set's id (m->sids); canonical aux */
    MT_KEY_IDS,       /* origin as MT_KEY_IDS_CANON; the item's own aux */
} mt_key_kind;

/* Writes set k's scanning, then waiting items into c->key as triples (pos,
 * origin, aux), leaving room for one more triple; returns the words
 * written, UINT32_MAX on no memory. */
uint32_t mt_set_key(mt_mask_cache *c, const di_grammar_matcher *m, uint32_t k, mt_key_kind kind);

/* Builds the local key of the current set into c->key; returns its length
 * in words (triples pos, here?, canon aux). */
uint32_t mt_local_key(di_grammar_matcher *m);

/* Seeds the local parser with the current set's items: origin "here" -> 1,
 * anything earlier -> 0 (the outside). One representative per key triple
 * (items that differ only in which outside set they came from behave the
 * same until they try to complete, which is exactly the escape). */
bool mt_seed_local(di_grammar_matcher *m);

/* Interns the content of local set k (origins as ids; 0 = outside) and
 * makes sure its DFA row exists. UINT32_MAX on no memory. */
uint32_t mt_local_sid(mt_mask_cache *c, di_grammar_matcher *L, uint32_t k);

/* Steps the top set S of L (materialized) on byte b and records the DFA
 * row (S, x) for every byte x that steps the same way: x and b belong to
 * the same classes of S's scanning items, so the same items scan and the
 * new set is the same. A JSON string interior has about a dozen such byte
 * groups, so learning a state costs a dozen parser steps, not 256. */
uint32_t mt_step_row(mt_mask_cache *c, di_grammar_matcher *L, uint32_t S, uint32_t b);

/* Sets up the walk path from depth dep0 down to frontier node f->node,
 * each state from the DFA rows; false when out of memory or when a step on
 * the way dies (the definition says why that stays exact). */
bool mt_jump_path(mt_mask_cache *c, di_grammar_matcher *L, const di_grammar_vocab *v, uint32_t dep0,
                  const mt_frontier *f, uint32_t *md);

/* ---- token_mask_loops.c: what hot states learn ------------------------- */

/* A state reached from the last root P through its count loops has P's
 * loops with the counts further: it takes them instead of learning (the
 * next classification of a maxLength string is k characters on). */
bool mt_inherit_loops(mt_mask_cache *c, const di_grammar *g, const di_grammar_vocab *v, uint32_t P, uint32_t S);

/* Learns the loops of DFA state S, the top of L at depth dep (L is left
 * there): self-loop bytes, whether every UTF-8 character loops, and for
 * bounded repetitions the bytes that step to S with the counts advanced
 * (cloop), the repetitions left (rem) and REJ_OK; with ct, the content
 * target too (LOOP_CTARGET). -1 on no memory. */
int mt_learn_loops(mt_mask_cache *c, di_grammar_matcher *L, const di_grammar *g, const di_grammar_vocab *v,
                   uint32_t S, uint32_t dep, bool ct);

/* Whether root state S of a classification is a string interior that
 * takes every content token (exact loops), or every one of at most rem
 * characters (count loops whose excess kills: REJ_OK, or rem beyond the
 * longest): then ORs them into acc from the per-tokenizer table. */
bool mt_fast_content(const mt_mask_cache *c, const di_grammar_vocab *v, uint32_t S, uint32_t *acc);

/* Whether the root (local set 1) begins a rule marked open-string (the key
 * of an extra object member, json_schema.c): every content token is then a
 * viable prefix that cannot complete it, so allowed in every state with
 * this key; ORs them into acc from the per-tokenizer table. */
bool mt_open_string_root(const di_grammar_vocab *v, const di_grammar *g, const di_grammar_matcher *L, uint32_t *acc);

/* ---- token_mask_walk.c: the trie walk ---------------------------------- */

/* Walks the trie for le. budget (0: none): past it, returns CLS_OVER with
 * the walk suspended (le partly filled); mt_classify(..., resume = true)
 * continues where it stopped, so consulting the shared cache in between
 * wastes nothing. */
int mt_classify(di_grammar_matcher *m, mt_local_entry *le, uint64_t budget, bool resume);

/* ---- token_mask_length.c: class and count descends --------------------- */

/* Class descend at the root of a classification: the tokens made of the
 * largest class C of ASCII bytes that step alike are decided by their
 * length, and only the class frontier's subtrees within reach are walked
 * (the definition says when it applies). Returns 1 done (*i: the first
 * subtree to walk), 0 not applicable, -1 no memory. */
int mt_class_descend(mt_mask_cache *c, di_grammar_matcher *L, const di_grammar_vocab *v, uint32_t *acc, uint32_t *i,
                     uint32_t *md);

/* Count descend at the root S0 of a string interior on the content fast
 * path: the content frontier's nodes are taken from the per-tokenizer list
 * (those past the repetitions left, or dead from the state that many
 * characters on, dropped) instead of walking the content paths down to
 * them (the definition says when it applies). Returns 1 done (*i: the
 * first subtree to walk), 0 not applicable (the plain walk follows), -1
 * no memory. */
int mt_count_descend(mt_mask_cache *c, di_grammar_matcher *L, const di_grammar_vocab *v, uint32_t *i,
                     uint32_t *md);

#endif
