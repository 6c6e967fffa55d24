/* Code point sets as grammar nodes, the one place that knows how JSON
 * strings encode characters: the regex translator (regex.c), its
 * automaton (regex_dfa.c) and the JSON Schema strings use it. Above the
 * builder (ir.h) only. */
#ifndef DI_GRAMMAR_CPSET_H
#define DI_GRAMMAR_CPSET_H

#include "grammar/ir.h"

#define CP_MAX 0x10FFFFu

/* A set of code points as lo,hi pairs (growable; free v). */
typedef struct cp_pairs {
    uint32_t *v; /* lo,hi,lo,hi,... */
    uint32_t n, cap; /* n counts uint32s */
} cp_pairs;

/* Appends lo..hi; false (error recorded in b) on no memory. */
bool cp_pairs_add(gb *b, cp_pairs *p, uint32_t lo, uint32_t hi);
/* Sorts and merges in place (ranges clamped to CP_MAX); complements when
 * negate. false (error recorded) on no memory. */
bool cp_pairs_normalize(gb *b, cp_pairs *p, bool negate);

/* Node matching one code point from the set (lo,hi pairs, normalized or
 * not), JSON-string-encoded when json_string: printable code points as UTF-8,
 * `"` `\` and controls as escapes, \uXXXX (any hex case) for controls. */
uint32_t rx_cpset(gb *b, const uint32_t *pairs, uint32_t n_pairs, bool negate, bool json_string);

/* One JSON string character (any code point, any escape, surrogate pairs as
 * one character), the unit counted by minLength/maxLength. */
uint32_t json_string_char(gb *b);

#endif
