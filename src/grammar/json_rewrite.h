/* Schemas rewritten into schemas (json_rewrite.c; json_ctx.h has the
 * layers). Every json_t returned belongs to the context's scratch. */
#ifndef DI_GRAMMAR_JSON_REWRITE_H
#define DI_GRAMMAR_JSON_REWRITE_H

#include "grammar/json_ctx.h"

/* v, owned by the context's scratch from now on (freed with it). */
json_t *js_keep(jsc *c, json_t *v);
/* The T_* bits of a "type" value (a name or an array of names). */
int js_type_mask_of(json_t *t);
/* Merges schema src into the object dst (both constrain the same value).
 * false (error set) when the keywords do not combine into one schema. */
bool js_merge_into(jsc *c, json_t *dst, json_t *src);
/* Follows a chain of pure references ({"$ref": ...} plus annotations). */
json_t *js_deref(jsc *c, json_t *s, uint32_t hops);
/* Whether s has a keyword other than except that is not an annotation. */
bool js_has_constraints(json_t *s, const char *except);
/* rest and not v, as alternatives; NULL (error set, or dropped when
 * lenient) when the negation cannot be built. */
json_t *js_with_not(jsc *c, json_t *rest, json_t *v);
/* The logic keywords rewritten into ones the grammar builds: returns s
 * (nothing to do), another schema, or NULL (error set). */
json_t *js_rewrite_logic(jsc *c, json_t *s);

#endif
