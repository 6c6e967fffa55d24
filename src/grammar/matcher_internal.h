/* Matcher internals shared by matcher.c (the Earley parser), vocab.c and
 * token_mask*.c (allowed-token masks; token_mask_internal.h adds theirs).
 *
 * The parser keeps one Earley set per byte consumed, stacked: set k holds the
 * items after k bytes. Rolling back is truncating the stack, which is what
 * makes speculative-decoding rollback and the trie walk of the mask cheap.
 * An item is (pos, origin, aux): pos a position in g->syms, origin the set
 * where the item's rule started, aux the repetition count when syms[pos] is
 * a REP symbol (0 otherwise). */
#ifndef DI_GRAMMAR_MATCHER_INTERNAL_H
#define DI_GRAMMAR_MATCHER_INTERNAL_H

#include "grammar/grammar.h"
#include "grammar/ir.h"

#include <stdint.h>

/* Bounds on parser memory: a hostile (very ambiguous) grammar can make
 * Earley sets grow; past these limits a byte is rejected instead. */
#define MT_MAX_SET_ITEMS (1u << 18)
#define MT_MAX_ITEMS (1u << 25)

typedef struct mt_item {
    uint32_t pos, origin, aux;
} mt_item;

/* Per-set bookkeeping; set k's items are items[start .. next set's start). */
typedef struct mt_set {
    uint32_t start;      /* first item */
    uint32_t scan_start; /* first index into scans (items before a TERM) */
    uint32_t wait_start; /* first index into waits (items before a RULE/REP) */
    uint32_t accept;     /* the set contains the accepting item */
    uint32_t escaped;    /* local parses: an item with origin 0 completed */
} mt_set;

typedef struct mt_shared_cache mt_shared_cache; /* shared_cache.c */

/* A node of the content frontier: reached from the trie root through
 * string content only (ASCII mt_json_content, or whole well-formed UTF-8
 * characters), at a character boundary, and itself not content: a quote,
 * backslash or control byte, or the first byte of a character that is
 * ill-formed on some path below. Below a node whose path is content, a
 * state that loops on all string content accepts every token except those
 * under its frontier nodes, and is itself the state in front of each of
 * those (token_mask.c). tok_lo .. tok_hi: the tokens of the node's
 * subtree (trie order). */
typedef struct mt_frontier {
    uint32_t node, skip, tok_lo, tok_hi;
} mt_frontier;

/* What token_mask_length.c's count descend reads of each frontier node, in one
 * row: the characters on the path to it (ch; ch == dep: the path is ASCII),
 * its depth and its byte. */
typedef struct mt_fnode {
    uint16_t ch, dep;
    uint8_t byte;
} mt_fnode;

/* A node's share of the frontier: entries idx .. idx + cnt - 1 lie in its
 * subtree; cnt is UINT32_MAX when the path from the root to the node is
 * not string content ending at a character boundary. */
typedef struct mt_gspan {
    uint32_t idx, cnt;
} mt_gspan;

/* Vocabulary with a byte trie laid out in preorder: node i's subtree is
 * nodes i .. skip[i]-1, its byte is byte[i] at depth depth[i] (0 = first
 * byte), and the tokens whose bytes end exactly at node i are
 * trie_tok[tok_start[i] .. tok_start[i+1]). */
struct di_grammar_vocab {
    uint32_t n_tokens;
    uint8_t *data;   /* concatenated token bytes */
    uint64_t *off;   /* (n_tokens + 1) offsets into data */
    uint8_t *flags;  /* (n_tokens) DI_GRAMMAR_TOKEN_* */
    uint32_t *eos;   /* ids flagged EOS */
    uint32_t n_eos;
    uint32_t n_nodes;
    uint8_t *byte;      /* (n_nodes) */
    uint16_t *depth;    /* (n_nodes) */
    uint32_t *skip;     /* (n_nodes) */
    uint32_t *tok_start; /* (n_nodes + 1) */
    uint32_t *trie_tok; /* normal tokens in trie order */
    gb_bits *sub;       /* (n_nodes) bytes occurring in node i's subtree, i included */
    /* (n_nodes) bit q: every path of node i's subtree, entered with the
     * UTF-8 decoder in state q (MT_U8_*), is a well-formed UTF-8 prefix */
    uint16_t *u8ok;
    uint16_t *maxdep;   /* (n_nodes) deepest depth in node i's subtree */
    mt_frontier *frontier; /* (n_frontier) in preorder */
    uint32_t n_frontier;
    mt_fnode *fnode;    /* (n_frontier) */
    mt_gspan *gspan;    /* (n_nodes) */
    /* (n_nodes) cskip[i]: i when node i's subtree holds a byte that is not
     * JSON string content (mt_json_content, or UTF-8 well formed from a
     * character boundary); else the next sibling of i with such a byte,
     * or the end of i's parent's subtree when none follows. The tokens of
     * nodes i .. cskip[i]-1 are then string content only: a state that
     * loops on all of it accepts them in one run (token_mask.c) */
    uint32_t *cskip;
    /* Per-tokenizer character counts (bytes that are not UTF-8
     * continuations): maxch (n_nodes) from node i's byte to the end of the
     * longest token below it; nch (n_tokens) of each token. */
    uint16_t *maxch, *nch;
    /* ((content_max + 1) * mask words) content_le[r]: the normal tokens of
     * at most r characters whose bytes are JSON string content
     * (mt_json_content, or UTF-8 from a character boundary), for the fast
     * path of string interiors (token_mask.c) */
    uint32_t *content_le;
    /* (n_tokens) esc_tail[t]: t's first byte when it is a one-byte JSON
     * escape character (" \\ / b f n r t) and every later byte of t is ASCII
     * string content (mt_json_content), else 0. Right after a backslash
     * such a token stays in the string it continues whenever that string
     * reads all ASCII content (check_uncertain's shortcut, token_mask.c). */
    uint8_t *esc_tail;
    uint32_t content_max;
    bool content_all;   /* no token is longer than content_max characters */
    uint32_t max_len;   /* longest token in bytes */
    /* Local classifications shared by every matcher on this vocabulary,
     * whatever its grammar (shared_cache.c). Internally locked, so the
     * vocabulary stays shareable across threads; NULL when it could not be
     * allocated (then each matcher classifies on its own). */
    mt_shared_cache *shared;
    /* Work (token_mask.c: trie nodes + 100 per parser step) after which a
     * classification consults the shared cache: cheaper ones are not worth
     * a structural key. MT_SHARE_BUDGET; tests set 1 to share everything. */
    uint64_t share_budget;
};

#define MT_SHARE_BUDGET 2500

/* Longest content token (characters) in the per-tokenizer tables: bounds
 * their memory on hostile vocabularies; longer tokens take the walk. */
#define MT_CONTENT_MAX_CHARS 256

/* ASCII bytes a JSON string holds unescaped. */
static inline bool mt_json_content(uint8_t x) { return x >= 0x20 && x < 0x80 && x != '"' && x != '\\'; }
/* mt_json_content as bits of gb_bits words 0 and 1: 0x20..0x7F but " and \\ */
#define MT_CONTENT_W0 0xFFFFFFFB00000000ull
#define MT_CONTENT_W1 0xFFFFFFFFEFFFFFFFull
/* Whether the ASCII bytes of set b are all mt_json_content. */
static inline bool mt_json_content_ascii(const gb_bits *b) {
    return !((b->w[0] & ~MT_CONTENT_W0) | (b->w[1] & ~MT_CONTENT_W1));
}

typedef struct mt_mask_cache mt_mask_cache; /* token_mask_internal.h */

/* Strict UTF-8 decoder states (RFC 3629: no overlongs, no surrogates, at
 * most U+10FFFF): what the next byte must be. */
enum {
    MT_U8_START = 0, /* at a character boundary */
    MT_U8_CONT1,     /* one continuation byte 80..BF left */
    MT_U8_CONT2,     /* two continuation bytes left, next 80..BF */
    MT_U8_E0,        /* after E0: next A0..BF */
    MT_U8_ED,        /* after ED: next 80..9F */
    MT_U8_CONT3,     /* after F1..F3: next 80..BF */
    MT_U8_F0,        /* after F0: next 90..BF */
    MT_U8_F4,        /* after F4: next 80..8F */
    MT_U8_N,
    MT_U8_BAD = 0xFF
};

/* Next decoder state after byte b in state q, or MT_U8_BAD. */
static inline uint8_t mt_u8_next(uint8_t q, uint8_t b) {
    switch (q) {
    case MT_U8_START:
        if (b < 0x80) return MT_U8_START;
        if (b >= 0xC2 && b <= 0xDF) return MT_U8_CONT1;
        if (b == 0xE0) return MT_U8_E0;
        if (b == 0xED) return MT_U8_ED;
        if (b >= 0xE1 && b <= 0xEF) return MT_U8_CONT2;
        if (b == 0xF0) return MT_U8_F0;
        if (b >= 0xF1 && b <= 0xF3) return MT_U8_CONT3;
        if (b == 0xF4) return MT_U8_F4;
        return MT_U8_BAD;
    case MT_U8_CONT1: return b >= 0x80 && b <= 0xBF ? MT_U8_START : MT_U8_BAD;
    case MT_U8_CONT2: return b >= 0x80 && b <= 0xBF ? MT_U8_CONT1 : MT_U8_BAD;
    case MT_U8_E0: return b >= 0xA0 && b <= 0xBF ? MT_U8_CONT1 : MT_U8_BAD;
    case MT_U8_ED: return b >= 0x80 && b <= 0x9F ? MT_U8_CONT1 : MT_U8_BAD;
    case MT_U8_CONT3: return b >= 0x80 && b <= 0xBF ? MT_U8_CONT2 : MT_U8_BAD;
    case MT_U8_F0: return b >= 0x90 && b <= 0xBF ? MT_U8_CONT2 : MT_U8_BAD;
    case MT_U8_F4: return b >= 0x80 && b <= 0x8F ? MT_U8_CONT2 : MT_U8_BAD;
    default: return MT_U8_BAD;
    }
}

struct di_grammar_matcher {
    const di_grammar *g;
    const di_grammar_vocab *vocab;
    mt_item *items;
    uint32_t n_items, cap_items;
    mt_set *sets;           /* (n_sets + 1): sets[n_sets].start etc. = ends */
    uint32_t n_sets, cap_sets;
    uint32_t *scans, n_scans, cap_scans;
    uint32_t *waits, n_waits, cap_waits;
    /* dedup of the set under construction: slot -> item index, valid when
     * ht_gen[slot] == gen */
    uint32_t *ht_idx, *ht_gen, cap_ht, gen;
    /* token history for rollback: n_sets after each token; eos flag */
    uint32_t *tok_sets;
    uint8_t *tok_eos;
    uint32_t n_toks, cap_toks;
    bool eos_done;
    bool oom;   /* a limit or allocation failed during the last advance */
    bool local; /* a local parser of token_mask.c: set 0 stands for "outside" */
    /* content ids of the first n_sid_valid sets (token_mask.c) */
    uint32_t *sids, n_sid_valid, cap_sids;
    mt_mask_cache *cache;
};

/* Consumes one byte into a new set; false (nothing changed) on rejection. */
bool mt_push_byte(di_grammar_matcher *m, uint8_t byte);
/* Drops sets so that n_sets remain (n_sets >= 1). */
void mt_truncate(di_grammar_matcher *m, uint32_t n_sets);

static inline const mt_set *mt_cur(const di_grammar_matcher *m) { return &m->sets[m->n_sets - 1]; }
static inline uint32_t mt_n_scans(const di_grammar_matcher *m) {
    return m->sets[m->n_sets].scan_start - mt_cur(m)->scan_start;
}

void mt_mask_cache_free(mt_mask_cache *c);

/* Interning of uint32 arrays: key -> dense id (token_mask_dfa.c). */
typedef struct mt_keytab {
    uint32_t *slot; /* cap entries: id + 1, 0 = empty */
    uint32_t cap;
    uint32_t *data;
    size_t n_data, cap_data;
    size_t *off; /* (n_ids + 1) */
    uint32_t *hash;
    uint32_t n_ids, cap_ids;
} mt_keytab;

/* Id of key k (n words), added when absent (*added tells); UINT32_MAX on
 * no memory. */
uint32_t mt_kt_intern(mt_keytab *t, const uint32_t *k, uint32_t n, bool *added);
/* Id of k or UINT32_MAX when absent. */
uint32_t mt_kt_find(const mt_keytab *t, const uint32_t *k, uint32_t n);
void mt_kt_free(mt_keytab *t);

/* The classification of the vocabulary for one local key (token_mask.c):
 * tokens allowed in every state with that key, and the uncertain ones (in
 * trie order) to check against the real state. shared: the arrays belong
 * to the vocabulary's shared cache, not to the matcher. */
typedef struct mt_local_entry {
    uint32_t *acc; /* (mask words) */
    uint32_t *unc; /* (n_unc) */
    uint32_t n_unc;
    bool shared;
} mt_local_entry;

/* ---- shared_cache.c ---------------------------------------------------- */

/* Scratch for structural keys (one per matcher cache). */
typedef struct mt_struct_scratch {
    uint32_t *rule_map, *rule_gen; /* (n_rules) canonical id, valid when gen matches */
    uint32_t *class_map, *class_gen; /* (n_classes) */
    uint32_t *queue, *classes;     /* rule bodies / classes in canonical order */
    uint8_t *queued;               /* (n_rules) body queued (valid with rule_gen) */
    uint32_t gen;
    uint32_t *out, n_out, cap_out;
} mt_struct_scratch;

mt_shared_cache *mt_shared_create(void);
void mt_shared_free(mt_shared_cache *s);
void mt_struct_scratch_free(mt_struct_scratch *sc);

/* Canonical structural key of a local state: the local key lkey (n words of
 * sorted triples pos, here?, canonical aux) rewritten with the grammar
 * reachable from those items, numbered by first appearance, so that two
 * states (of any grammars) with equal structural keys classify every token
 * the same. lim: repetition bounds at or past lim are equivalent (see
 * canon_aux). Returns the length in sc->out, or UINT32_MAX when the
 * reachable grammar is too large to be worth sharing or memory ran out. */
uint32_t mt_struct_key(mt_struct_scratch *sc, const di_grammar *g, uint32_t lim, const uint32_t *lkey,
                       uint32_t n);

/* The shared entry for key (NULL when absent). Entries are never freed or
 * moved before the cache, so the pointer stays valid. */
const mt_local_entry *mt_shared_find(mt_shared_cache *s, const uint32_t *key, uint32_t n);

/* Publishes e under key. On success the cache takes e's arrays and returns
 * the stored entry; when another matcher published the key first, returns
 * that one (e unchanged, still the caller's); NULL when the cache is full
 * or out of memory (e unchanged). */
const mt_local_entry *mt_shared_insert(mt_shared_cache *s, const uint32_t *key, uint32_t n, mt_local_entry *e,
                                       size_t bytes);

#endif
