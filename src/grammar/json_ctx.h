/* The JSON Schema compiler's context and the pieces every part of it
 * uses (json_ctx.c): errors and paths, what a lenient compile dropped,
 * the shared rules (whitespace, any string / number / value), $ref
 * resolution and literals. The front end in layers, each calling only
 * those below it:
 *
 *   json_schema.c   the entry points and the dispatch of one schema
 *   json_types.c    the node of each type: strings, numbers, objects, arrays
 *   json_rewrite.c  schemas rewritten into schemas: allOf merged, not /
 *                   if-then-else / dependencies as alternatives
 *   json_ctx.c      this
 *   json_number.c   number text within decimal bounds
 *
 * A subschema's node is c->sub (schema_node): the recursion of the
 * front end goes through the context, not through a call up. */
#ifndef DI_GRAMMAR_JSON_CTX_H
#define DI_GRAMMAR_JSON_CTX_H

#include "grammar/ir.h"

#include <jansson.h>

typedef struct jsc {
    gb *b;
    json_t *root;
    di_grammar_options opt;
    bool draft7;
    uint32_t depth;
    char path[256];
    /* $ref targets already given a rule (recursion goes through them) */
    json_t **ref_keys;
    uint32_t *ref_rules;
    uint32_t n_refs, cap_refs;
    /* temporary merged schemas (allOf), freed at the end */
    json_t *scratch;
    /* lenient: what was dropped ("'uniqueItems' at #/tags; ..."), for
     * di_grammar_dropped; truncated quietly when long */
    char dropped[512];
    /* shared rules, GB_NIL until first use */
    uint32_t r_value, r_string, r_number, r_ws, r_char;
    /* The node of a subschema: json_schema.c's schema_node (depth count,
     * logic rewritten, then the type builders). The builders below it
     * (json_types.c, $refs here) reach their subschemas through it, so
     * that no file of the front end calls up. */
    uint32_t (*sub)(struct jsc *c, json_t *s);
} jsc;

enum { T_NULL = 1, T_BOOL = 2, T_OBJECT = 4, T_ARRAY = 8, T_NUMBER = 16, T_INTEGER = 32, T_STRING = 64 };
#define T_ALL (T_NULL | T_BOOL | T_OBJECT | T_ARRAY | T_NUMBER | T_STRING)

/* Internal keyword (rewrite_logic): the strings listed are excluded. */
#define NOT_IN "$deepinfer:notIn"

/* The node of subschema s (c->sub). */
static inline uint32_t js_sub(jsc *c, json_t *s) { return c->sub(c, s); }

/* ---- errors, paths, notes ------------------------------------------------ */

bool js_in_list(const char *const *list, const char *k);
/* Records "json schema at PATH: fmt(arg)" in the builder; GB_NIL. */
uint32_t js_fail(jsc *c, di_status code, const char *fmt, const char *arg);
/* Appends "/seg" to the path for messages; returns the length to pop back
 * to (js_path_pop). Truncates quietly when long. */
size_t js_path_push(jsc *c, const char *seg);
void js_path_pop(jsc *c, size_t n);
/* Lenient mode drops what it cannot enforce: notes what, at the path. */
void js_note_dropped(jsc *c, const char *what);
/* gb_nothing with the reason noted for the message an unsatisfiable
 * schema gets; js_counts_cross: "'lo_key' lo is above 'hi_key' hi". */
uint32_t js_nothing_because(jsc *c, const char *why);
uint32_t js_counts_cross(jsc *c, const char *lo_key, uint32_t lo, const char *hi_key, uint32_t hi);

/* ---- shared rules (made once per compiler) ------------------------------- */

uint32_t js_ws(jsc *c);
/* One JSON string character (the unit of minLength / maxLength). */
uint32_t js_string_char(jsc *c);
/* "\"" body "\"" */
uint32_t js_quoted(jsc *c, uint32_t body);
uint32_t js_any_string(jsc *c);
uint32_t js_any_number(jsc *c);
uint32_t js_any_value(jsc *c);

/* ---- $ref, literals -------------------------------------------------------- */

/* Resolves a local reference ("#", "#/a/b~1c/0"); NULL with an error set
 * otherwise. */
json_t *js_resolve_ref(jsc *c, const char *ref);
/* The rule of a $ref target, made on first use (recursion goes through it). */
uint32_t js_ref_rule(jsc *c, json_t *target);
/* The node for the JSON text of one value (const, enum members). */
uint32_t js_literal(jsc *c, json_t *v);
/* The T_* bit of a value's type (T_INTEGER for integral numbers). */
int js_type_bit(json_t *v);

#endif
