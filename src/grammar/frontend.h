/* Pieces the front ends share: the regex translator (used directly and for
 * JSON Schema `pattern`) and JSON string encoding of code point sets. */
#ifndef DI_GRAMMAR_FRONTEND_H
#define DI_GRAMMAR_FRONTEND_H

#include "grammar/ir.h"

/* Translates an ECMA-262 regex (the JSON Schema pattern dialect) into a
 * node. search: the pattern may match anywhere (JSON Schema semantics;
 * unanchored ends get `.*`); otherwise it must match the whole text.
 * json_string: the node matches the JSON-encoded form of the text (the
 * inside of a JSON string: `"` as \", controls escaped, ...). Errors go to
 * the builder (UNSUPPORTED names the construct). GB_NIL on error. */
uint32_t rx_translate(gb *b, const char *re, size_t len, bool search, bool json_string, uint32_t max_depth);

/* Node matching one code point from the set (lo,hi pairs, normalized or
 * not), JSON-string-encoded when json_string: printable code points as UTF-8,
 * `"` `\` and controls as escapes, \uXXXX (any hex case) for controls. */
uint32_t rx_cpset(gb *b, const uint32_t *pairs, uint32_t n_pairs, bool negate, bool json_string);

/* One JSON string character (any code point, any escape, surrogate pairs as
 * one character), the unit counted by minLength/maxLength. */
uint32_t json_string_char(gb *b);

/* Determinizes a plain-mode regex node (rx_translate with json_string
 * false) intersected with a length of min_chars..max_chars characters
 * (max GB_INF: unbounded) into right-linear rules; json: the rules match the
 * JSON-string encoding. tail (GB_NIL: none) is what follows the match,
 * written into the automaton's accepting states (the closing quote of a
 * JSON string): then the rules complete only after it, so a token that
 * reads past the last character the automaton allows dies inside them
 * instead of reaching the enclosing rule (which a mask's local
 * classification cannot see, so such tokens would each be checked
 * against the real parse). At most max_states automaton states: past
 * that, GB_NIL with *too_big set (no error recorded; the caller falls
 * back). Other failures are recorded in the builder. */
uint32_t rx_dfa(gb *b, uint32_t plain, uint32_t min_chars, uint32_t max_chars, bool json, uint32_t tail,
                uint32_t max_states, bool *too_big);

/* Whether a plain-mode regex node nests repetitions ((?:[a-z]+-?)+): its
 * tree form is ambiguous, so the parser tracks many splits per byte. */
bool rx_is_ambiguous(const gb *b, uint32_t plain);

#endif
