/* Internal grammar representation shared by the front ends (ebnf.c, regex.c,
 * json_schema.c) and the matcher.
 *
 * Front ends build an expression tree with the gb_* builder (nodes are
 * indices into one growing array, so there is no per-node malloc to leak on
 * error paths). gb_finish lowers it into the flat form the Earley matcher
 * runs on: every rule is a list of alternatives; every alternative is a run
 * of symbols in one array ending with an END symbol. Positions in that array
 * are the "dotted items" of the parser.
 *
 * Symbols (uint32): kind in the top 3 bits, value in the low 29.
 *   TERM  c  one byte from class c (256-bit set)
 *   RULE  r  nonterminal r
 *   REP   i  bounded repetition reps[i] = {rule, min, max} of a nonterminal;
 *            the parser keeps the count in the item, so x{0,1000} costs one
 *            item per byte instead of 1000 nested rules, and x* is not
 *            right-recursive (which would make Earley quadratic).
 *   END   r  end of an alternative of rule r
 * Errors are sticky: after the first failure every builder call returns
 * GB_NIL and gb_finish reports the first error. */
#ifndef DI_GRAMMAR_IR_H
#define DI_GRAMMAR_IR_H

#include "base/status.h"
#include "grammar/grammar.h"

#include <stdbool.h>
#include <stdint.h>

#define GB_NIL UINT32_MAX
#define GB_INF UINT32_MAX     /* unbounded repetition */
#define GB_MAX_NODES (1u << 22) /* builder size limit: bounds memory on hostile input */
#define GB_MAX_SYMS (1u << 23)
#define GB_MAX_RULES (1u << 20)
#define GB_MAX_REPEAT 100000u /* largest finite repetition bound we accept */

enum { SYM_TERM = 0, SYM_RULE = 1, SYM_REP = 2, SYM_END = 3 };
#define SYM_KIND(s) ((s) >> 29)
#define SYM_VAL(s) ((s)&0x1fffffffu)
#define SYM_MAKE(k, v) (((uint32_t)(k) << 29) | (uint32_t)(v))

typedef struct gb_rep {
    uint32_t rule, min, max; /* max == GB_INF: unbounded */
} gb_rep;

/* 256-bit byte set. */
typedef struct gb_bits {
    uint64_t w[4];
} gb_bits;

static inline bool gb_bits_has(const gb_bits *b, uint8_t c) { return (b->w[c >> 6] >> (c & 63)) & 1; }
static inline void gb_bits_set(gb_bits *b, uint8_t c) { b->w[c >> 6] |= 1ull << (c & 63); }

/* The compiled grammar (flat form). */
struct di_grammar {
    uint32_t n_rules;
    uint32_t *rule_alt;   /* (n_rules + 1) alternatives of rule r: alt_pos[rule_alt[r] .. rule_alt[r+1]) */
    uint32_t *alt_pos;    /* (n_alts) position of each alternative's first symbol */
    uint32_t n_alts;
    uint32_t *syms;       /* (n_syms) */
    uint32_t n_syms;
    gb_bits *classes;     /* (n_classes) */
    uint32_t n_classes;
    gb_rep *reps;         /* (n_reps) */
    uint32_t n_reps;
    uint8_t *nullable;    /* (n_rules) rule derives the empty string */
    gb_bits *first;       /* (n_rules) bytes that can start a non-empty derivation */
    char **names;         /* (n_rules) rule names (generated for anonymous rules) */
    /* Byte equivalence classes: bytes that every class of the grammar
     * either contains or lacks together. The parser cannot tell them apart,
     * so a mask computation steps one byte per class and reuses the result
     * for its siblings. byte_eq[b] is b's class, 0 .. n_byte_eq-1. */
    uint8_t byte_eq[256];
    uint32_t n_byte_eq;
    /* (n_syms; NULL when no rule is marked) 1 at the first position of each
     * alternative of a rule marked open-string (gb_rule_mark_open_string):
     * from its start, every JSON string content (ASCII content bytes,
     * well-formed UTF-8, possibly ending inside a character) is a viable
     * prefix of the rule and does not complete it. A mask's local
     * classification whose root begins such a rule allows every content
     * token at once (token_mask.c). */
    uint8_t *open_start;
    char *dropped;        /* NULL, or what a lenient compile dropped (di_grammar_dropped) */
    uint32_t start_rule;  /* synthetic `$start ::= root` */
    uint32_t accept_pos;  /* position of the END of $start: item (accept_pos, 0) = accepting */
};

enum {
    GN_EMPTY,   /* matches "" */
    GN_NOTHING, /* matches nothing */
    GN_BYTES,   /* a = offset into bytes, b = length */
    GN_CLASS,   /* a = index into classes */
    GN_UCLASS,  /* a = offset into cps (lo,hi pairs, sorted, merged), b = pair count */
    GN_SEQ,     /* a = offset into kids, b = count */
    GN_ALT,     /* a = offset into kids, b = count */
    GN_REF,     /* a = rule */
    GN_REPEAT,  /* a = child, c = min, d = max */
};

typedef struct gb_node {
    uint32_t kind, a, b, c, d;
} gb_node;

typedef struct gb_rule {
    char *name;
    uint32_t body; /* GB_NIL until defined */
    bool open_string; /* see di_grammar.open_start */
} gb_rule;

typedef struct gb {
    gb_node *nodes;
    uint32_t n_nodes, cap_nodes;
    uint32_t *kids;
    uint32_t n_kids, cap_kids;
    uint8_t *bytes;
    uint32_t n_bytes, cap_bytes;
    gb_bits *classes;
    uint32_t n_classes, cap_classes;
    uint32_t *cps;
    uint32_t n_cps, cap_cps;
    gb_rule *rules;
    uint32_t n_rules, cap_rules;
    uint32_t *name_ht; /* open addressing over rule ids by name; cap_ht slots */
    uint32_t cap_ht;
    di_status status;
    di_error *err;
    /* Why a part of the grammar matches nothing (the first reason a front
     * end noted, e.g. "'minimum' 10 is above 'maximum' 5"): the message
     * gb_finish gives when the whole language turns out empty. */
    char empty_why[200];
    const char *empty_what;     /* "the schema" / "the regex" ...; NULL: "the grammar" */
    const char *empty_fallback; /* the reason when none was noted; NULL: a generic one */
} gb;

void gb_init(gb *b, di_error *err);
void gb_free(gb *b);
/* Records the first error; returns its code. */
di_status gb_fail(gb *b, di_status code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static inline bool gb_ok(const gb *b) { return b->status == DI_OK; }

uint32_t gb_empty(gb *b);
uint32_t gb_nothing(gb *b);
uint32_t gb_bytes(gb *b, const void *s, uint32_t n);
uint32_t gb_str(gb *b, const char *s);
uint32_t gb_class(gb *b, const gb_bits *bits);
uint32_t gb_byte_range(gb *b, uint8_t lo, uint8_t hi);
/* Unicode code point class from n (lo, hi) pairs (any order, may overlap);
 * negate: the complement within U+0000..U+10FFFF. Surrogates are never
 * matched (they are not valid UTF-8). */
uint32_t gb_uclass(gb *b, const uint32_t *pairs, uint32_t n_pairs, bool negate);
/* The UTF-8 byte sequences of a GN_UCLASS node: an ALT of SEQs of byte
 * classes (new nodes; the class node is unchanged). */
uint32_t gb_uclass_utf8(gb *b, uint32_t uclass_node);
uint32_t gb_seq(gb *b, const uint32_t *kids, uint32_t n);
uint32_t gb_seq2(gb *b, uint32_t x, uint32_t y);
uint32_t gb_seq3(gb *b, uint32_t x, uint32_t y, uint32_t z);
uint32_t gb_alt(gb *b, const uint32_t *kids, uint32_t n);
uint32_t gb_alt2(gb *b, uint32_t x, uint32_t y);
uint32_t gb_ref(gb *b, uint32_t rule);
uint32_t gb_repeat(gb *b, uint32_t child, uint32_t min, uint32_t max);
static inline uint32_t gb_opt(gb *b, uint32_t x) { return gb_repeat(b, x, 0, 1); }
static inline uint32_t gb_star(gb *b, uint32_t x) { return gb_repeat(b, x, 0, GB_INF); }
static inline uint32_t gb_plus(gb *b, uint32_t x) { return gb_repeat(b, x, 1, GB_INF); }

/* Rules. gb_rule_new makes a rule with the given name (NULL: generated);
 * gb_rule_find returns GB_NIL when no rule has that name. */
uint32_t gb_rule_new(gb *b, const char *name, size_t name_len);
uint32_t gb_rule_find(const gb *b, const char *name, size_t name_len);
void gb_rule_define(gb *b, uint32_t rule, uint32_t body);
/* A rule whose body is the node (for sharing a subexpression). */
uint32_t gb_rule_of(gb *b, const char *name, uint32_t body);
/* Marks a rule open-string (di_grammar.open_start): the caller vouches that
 * every JSON string content is a viable prefix of it that does not complete
 * it. Only speeds masks up; a wrong mark would make them wrong. */
void gb_rule_mark_open_string(gb *b, uint32_t rule);

/* Notes why the node a front end is about to return matches nothing (the
 * first note wins; see gb.empty_why). */
void gb_note_empty(gb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Lowers the tree under root_rule into a di_grammar. Undefined referenced
 * rules are an error (named), and so is an empty language (DI_ERR_FORMAT:
 * no output could ever complete, so a sampler would find no token to
 * sample); the message gives the first gb_note_empty reason. Consumes
 * nothing; call gb_free after. */
di_status gb_finish(gb *b, uint32_t root_rule, di_grammar **out);

#endif
