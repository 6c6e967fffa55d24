/* The node of each JSON type under the keywords that apply to it
 * (json_types.c; json_ctx.h has the layers). s is one schema after the
 * rewrites; GB_NIL with the error recorded. */
#ifndef DI_GRAMMAR_JSON_TYPES_H
#define DI_GRAMMAR_JSON_TYPES_H

#include "grammar/json_ctx.h"

uint32_t js_string_node(jsc *c, json_t *s);
/* integer: only integral values. */
uint32_t js_number_node(jsc *c, json_t *s, bool integer);
uint32_t js_object_node(jsc *c, json_t *s);
uint32_t js_array_node(jsc *c, json_t *s);

#endif
