/* Deterministic automata of regex nodes (regex_dfa.c): for patterns whose
 * tree form is ambiguous and for patterns with length bounds. Takes the
 * plain-mode node rx_translate built and writes right-linear rules. */
#ifndef DI_GRAMMAR_REGEX_DFA_H
#define DI_GRAMMAR_REGEX_DFA_H

#include "grammar/ir.h"

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
