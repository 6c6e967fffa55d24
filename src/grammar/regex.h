/* The regex front end (regex.c): the JSON Schema pattern dialect into
 * builder nodes, used directly (di_grammar_compile_regex) and for JSON
 * Schema `pattern`. */
#ifndef DI_GRAMMAR_REGEX_H
#define DI_GRAMMAR_REGEX_H

#include "grammar/ir.h"

/* Translates an ECMA-262 regex (the JSON Schema pattern dialect) into a
 * node. search: the pattern may match anywhere (JSON Schema semantics;
 * unanchored ends get `.*`); otherwise it must match the whole text.
 * json_string: the node matches the JSON-encoded form of the text (the
 * inside of a JSON string: `"` as \", controls escaped, ...). Errors go to
 * the builder (UNSUPPORTED names the construct). GB_NIL on error. */
uint32_t rx_translate(gb *b, const char *re, size_t len, bool search, bool json_string, uint32_t max_depth);

#endif
