/* The JSON Schema front end as a part of other grammars (json_schema.c;
 * json_ctx.h has its layers). */
#ifndef DI_GRAMMAR_JSON_SCHEMA_H
#define DI_GRAMMAR_JSON_SCHEMA_H

#include "grammar/ir.h"

#include <jansson.h>

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
