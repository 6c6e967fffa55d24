/* Internals of the JSON Schema front end shared by json_schema.c and
 * json_number.c. */
#ifndef DI_GRAMMAR_JSON_INTERNAL_H
#define DI_GRAMMAR_JSON_INTERNAL_H

#include "grammar/cpset.h"
#include "grammar/regex.h"
#include "grammar/regex_dfa.h"

#include <jansson.h>

/* A bound as exact decimal digits: value = (neg ? -1 : 1) * ip.fp, ip
 * canonical (no leading zeros), fp without trailing zeros. */
typedef struct jn_dec {
    bool neg;
    char ip[24];
    char fp[48];
} jn_dec;

/* Decimal form of a bound; false when it is out of the supported range
 * (|x| >= 1e18, nonzero |x| < 1e-20, or not finite). */
bool jn_parse_bound(double x, jn_dec *d);

/* Node for JSON number text within the bounds (lo/hi NULL: unbounded;
 * *_strict: exclusive). integer: only integral values (I or I.0+). */
uint32_t jn_number(gb *g, bool integer, const jn_dec *lo, bool lo_strict, const jn_dec *hi, bool hi_strict);

/* The JSON Schema compiler writing into a builder another front end owns
 * (tool_calls.c puts one value grammar per tool parameter into its call
 * syntax). Shared rules (any value, whitespace) are made once per
 * compiler; one compiler serves every schema of the grammar.
 *   json_sub_new      NULL (error recorded in b) on no memory; free with
 *                     json_sub_free
 *   json_sub_value    node for the JSON text of the values valid under s,
 *                     $refs resolved against root; path ("/a/b", or NULL)
 *                     prefixes error messages; GB_NIL on error (recorded)
 *   json_sub_dropped  what lenient compiles dropped so far, or NULL */
typedef struct jsc jsc;
jsc *json_sub_new(gb *b, const di_grammar_options *opt);
uint32_t json_sub_value(jsc *c, json_t *root, json_t *s, const char *path);
uint32_t json_sub_any_value(jsc *c);
void json_sub_note_dropped(jsc *c, const char *what, const char *path);
const char *json_sub_dropped(const jsc *c);
void json_sub_free(jsc *c);

#endif
