/* JSON Schema front end: a schema becomes a grammar for the compact (or
 * whitespace-flexible) JSON text of the values it accepts.
 *
 * Keywords: type, enum, const, properties, required, additionalProperties,
 * items, prefixItems, additionalItems (draft 7), minItems, maxItems,
 * minLength, maxLength, minimum, maximum, exclusiveMinimum,
 * exclusiveMaximum, pattern (also with minLength / maxLength: the
 * pattern's automaton times a character counter, regex_dfa.c), format
 * (date, time, date-time, email, uuid, uri, ipv4, hostname; other formats
 * are annotations), anyOf, oneOf (as anyOf: see below), allOf (merged into
 * one schema where the keywords combine), local $ref with $defs /
 * definitions, contains / minContains / maxContains (without item count
 * bounds); rewritten into alternatives (json_rewrite.c): not (of type,
 * required, properties, enum / const of scalars, bounds, and anyOf / allOf
 * / not of those), if / then / else ((if and then) or (not if and else)),
 * dependentRequired / dependentSchemas / dependencies (absent, or present
 * with what it needs; at most 6); in the forms a grammar expresses
 * exactly: multipleOf (1, 10^-k), minProperties / maxProperties (implied
 * by the members, or minProperties 1), patternProperties (one pattern; see
 * js_object_node in json_types.c).
 * Annotations (title, description, default, ...) are ignored; other JSON
 * Schema keywords are an error naming them unless the caller is lenient
 * (then they are dropped and listed: di_grammar_dropped), and so is a
 * pattern with a regex construct regex.c does not implement.
 *
 * Choices that shape the grammar:
 * - Object members come in schema order (listed properties, then
 *   additional ones); a JSON object with another key order is a different
 *   text, so generation is canonical and the grammar stays linear in size.
 * - oneOf is compiled as anyOf: "exactly one" is not context-free in
 *   general; for the usual disjoint branches the two are the same.
 * - Schema keywords that apply to one type constrain only that type, as in
 *   the specification ({"minimum": 1} still accepts "x").
 *
 * This file: the entry points and the dispatch of one schema; the other
 * files of the front end and their layers are listed in json_ctx.h. */
#include "grammar/json_schema.h"

#include "grammar/json_ctx.h"
#include "grammar/json_rewrite.h"
#include "grammar/json_types.h"

#include "base/alloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint32_t schema_node(jsc *c, json_t *s);

/* Supported keywords are listed at the top of this file; these are the
 * JSON Schema keywords we know and do not implement. */
static const char *const UNSUPPORTED[] = {
    "propertyNames", "uniqueItems", "unevaluatedProperties", "unevaluatedItems",
    "$dynamicRef", "$dynamicAnchor", "$recursiveRef", "$recursiveAnchor", NULL};

static uint32_t schema_body(jsc *c, json_t *s) {
    gb *b = c->b;
    if (json_is_true(s)) return js_any_value(c);
    if (json_is_false(s)) return js_nothing_because(c, "the schema false");
    if (!json_is_object(s)) return js_fail(c, DI_ERR_FORMAT, "%s", "schema is not an object or boolean");
    const char *k;
    json_t *v;
    json_object_foreach(s, k, v) {
        if (js_in_list(UNSUPPORTED, k)) {
            /* keywords whose given value is no constraint */
            if (!strcmp(k, "uniqueItems") && json_is_false(v)) continue;
            if ((!strcmp(k, "then") || !strcmp(k, "else")) && !json_object_get(s, "if")) continue;
            if (!c->opt.lenient) return js_fail(c, DI_ERR_UNSUPPORTED, "keyword '%s' is not supported", k);
            char what[200];
            snprintf(what, sizeof what, "'%.100s'", k);
            js_note_dropped(c, what);
        }
    }
    json_t *ref = json_object_get(s, "$ref");
    if (ref) {
        if (!json_is_string(ref)) return js_fail(c, DI_ERR_FORMAT, "%s", "$ref is not a string");
        if (c->draft7 || !js_has_constraints(s, "$ref")) {
            json_t *t = js_resolve_ref(c, json_string_value(ref));
            if (!t) return GB_NIL;
            uint32_t r = js_ref_rule(c, t);
            return r == GB_NIL ? GB_NIL : gb_ref(b, r);
        }
        json_t *m = js_deref(c, s, 0);
        return m ? schema_body(c, m) : GB_NIL;
    }
    json_t *all = json_object_get(s, "allOf");
    if (all) {
        if (!json_is_array(all)) return js_fail(c, DI_ERR_FORMAT, "%s", "'allOf' is not an array");
        json_t *m = js_keep(c, json_object());
        json_t *rest = js_keep(c, json_copy(s));
        json_object_del(rest, "allOf");
        size_t pn = js_path_push(c, "allOf");
        bool ok = js_merge_into(c, m, rest);
        size_t i;
        json_t *x;
        json_array_foreach(all, i, x) ok = ok && js_merge_into(c, m, x);
        js_path_pop(c, pn);
        if (!ok) return GB_NIL;
        /* anyOf/oneOf may now sit in m next to other keywords: handled below */
        return schema_body(c, m);
    }
    const char *anykw = json_object_get(s, "anyOf") ? "anyOf" : json_object_get(s, "oneOf") ? "oneOf" : NULL;
    if (anykw) {
        json_t *list = json_object_get(s, anykw);
        if (!json_is_array(list) || !json_array_size(list))
            return js_fail(c, DI_ERR_FORMAT, "'%s' is not a non-empty array", anykw);
        if (json_object_get(s, "anyOf") && json_object_get(s, "oneOf"))
            return js_fail(c, DI_ERR_UNSUPPORTED, "%s", "anyOf together with oneOf");
        json_t *rest = js_keep(c, json_copy(s));
        json_object_del(rest, anykw);
        bool plain = !js_has_constraints(rest, "");
        size_t n = json_array_size(list);
        uint32_t *alts = di_malloc_array(n, sizeof(uint32_t));
        if (!alts) return gb_fail(b, DI_ERR_NOMEM, "out of memory"), GB_NIL;
        size_t pn = js_path_push(c, anykw);
        for (size_t i = 0; i < n && gb_ok(b); i++) {
            json_t *branch = json_array_get(list, i);
            if (!plain) {
                /* distribute the sibling keywords into each branch */
                json_t *m = js_keep(c, json_object());
                if (!js_merge_into(c, m, rest) || !js_merge_into(c, m, branch)) break;
                branch = m;
            }
            alts[i] = schema_node(c, branch);
        }
        js_path_pop(c, pn);
        uint32_t r = gb_ok(b) ? gb_alt(b, alts, (uint32_t)n) : GB_NIL;
        free(alts);
        return r;
    }
    json_t *rw = js_rewrite_logic(c, s);
    if (!rw) return GB_NIL;
    if (rw != s) return schema_body(c, rw);
    int types = T_ALL | T_INTEGER;
    json_t *t = json_object_get(s, "type");
    if (t) {
        types = js_type_mask_of(t);
        if (types < 0) return js_fail(c, DI_ERR_FORMAT, "%s", "bad 'type'");
    }
    json_t *en = json_object_get(s, "enum"), *cst = json_object_get(s, "const");
    if (en || cst) {
        if (en && !json_is_array(en)) return js_fail(c, DI_ERR_FORMAT, "%s", "'enum' is not an array");
        size_t n = cst ? 1 : json_array_size(en);
        uint32_t *alts = di_malloc_array(n + 1, sizeof(uint32_t));
        if (!alts) return gb_fail(b, DI_ERR_NOMEM, "out of memory"), GB_NIL;
        uint32_t k2 = 0;
        for (size_t i = 0; i < n; i++) {
            json_t *x = cst ? cst : json_array_get(en, i);
            if (cst && en) {
                bool in = false;
                size_t q;
                json_t *y;
                json_array_foreach(en, q, y) in |= json_equal(x, y);
                if (!in) continue;
            }
            int tb = js_type_bit(x);
            if ((tb & types) == 0 || ((types & T_INTEGER) && !(types & T_NUMBER) && (tb & T_NUMBER) && !(tb & T_INTEGER)))
                continue;
            alts[k2++] = js_literal(c, x);
        }
        uint32_t r = gb_alt(b, alts, k2);
        free(alts);
        return r;
    }
    uint32_t alts[7], n = 0;
    if (types & T_NULL) alts[n++] = gb_str(b, "null");
    if (types & T_BOOL) alts[n++] = gb_alt2(b, gb_str(b, "true"), gb_str(b, "false"));
    if (types & T_OBJECT) alts[n++] = js_object_node(c, s);
    if (types & T_ARRAY) alts[n++] = js_array_node(c, s);
    if (types & T_NUMBER) alts[n++] = js_number_node(c, s, false);
    else if (types & T_INTEGER) alts[n++] = js_number_node(c, s, true);
    if (types & T_STRING) alts[n++] = js_string_node(c, s);
    return gb_ok(b) ? gb_alt(b, alts, n) : GB_NIL;
}

static uint32_t schema_node(jsc *c, json_t *s) {
    if (!gb_ok(c->b)) return GB_NIL;
    if (++c->depth > c->opt.max_depth) return js_fail(c, DI_ERR_RANGE, "%s", "schema nested too deeply");
    uint32_t r = schema_body(c, s);
    c->depth--;
    return r;
}

static di_status compile(json_t *schema, const di_grammar_options *opt, bool object_mode, di_grammar **out,
                         di_error *err) {
    gb b;
    gb_init(&b, err);
    b.empty_what = "the schema";
    b.empty_fallback = "every '$ref' cycle in it lacks a way out (a schema that only refers to itself)";
    jsc c = {.b = &b, .root = schema, .r_value = GB_NIL, .r_string = GB_NIL, .r_number = GB_NIL,
             .r_ws = GB_NIL, .r_char = GB_NIL, .sub = schema_node};
    c.opt = opt ? *opt : di_grammar_options_default();
    if (!c.opt.max_depth) c.opt.max_depth = DI_GRAMMAR_DEFAULT_MAX_DEPTH;
    c.draft7 = c.opt.draft == DI_GRAMMAR_DRAFT_7;
    const char *sv = json_string_value(json_object_get(schema, "$schema"));
    if (sv) c.draft7 = strstr(sv, "draft-07") || strstr(sv, "draft-06") || strstr(sv, "draft-04");
    c.scratch = json_array();
    uint32_t root;
    if (object_mode) {
        js_any_value(&c);
        root = gb_rule_of(&b, "root", gb_ref(&b, gb_rule_find(&b, "object", 6)));
    } else {
        uint32_t r = js_ref_rule(&c, schema);
        root = gb_rule_of(&b, "root", r == GB_NIL ? GB_NIL : gb_ref(&b, r));
    }
    di_status s = gb_ok(&b) ? gb_finish(&b, root, out) : b.status;
    if (!s && c.dropped[0] && !((*out)->dropped = di_strdup(c.dropped))) {
        di_grammar_free(*out);
        *out = NULL;
        s = di_error_set(err, DI_ERR_NOMEM, "out of memory");
    }
    json_decref(c.scratch);
    free(c.ref_keys);
    free(c.ref_rules);
    gb_free(&b);
    return s;
}

di_grammar_options di_grammar_options_default(void) {
    di_grammar_options o = {DI_GRAMMAR_WS_COMPACT, false, DI_GRAMMAR_DEFAULT_MAX_DEPTH, DI_GRAMMAR_DRAFT_2020_12};
    return o;
}

di_status di_grammar_compile_json_schema(const char *text, size_t len, const di_grammar_options *opt,
                                         di_grammar **out, di_error *err) {
    *out = NULL;
    if (!text) return di_error_set(err, DI_ERR_INVALID_ARG, "schema is NULL");
    json_error_t je;
    json_t *schema = json_loadb(text, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    /* integers beyond 64 bits (a "maximum" of 2^63) read as reals */
    if (!schema && strstr(je.text, "too big"))
        schema = json_loadb(text, len, JSON_DECODE_ANY | JSON_ALLOW_NUL | JSON_DECODE_INT_AS_REAL, &je);
    if (!schema) return di_error_set(err, DI_ERR_FORMAT, "schema is not JSON: %s (line %d)", je.text, je.line);
    di_status s = compile(schema, opt, false, out, err);
    json_decref(schema);
    return s;
}

di_status di_grammar_compile_json_object(const di_grammar_options *opt, di_grammar **out, di_error *err) {
    *out = NULL;
    json_t *t = json_true();
    di_status s = compile(t, opt, true, out, err);
    json_decref(t);
    return s;
}

/* ---- embedding: schemas inside another grammar (tool_calls.c) ---------- */

jsc *json_sub_new(gb *b, const di_grammar_options *opt) {
    jsc *c = calloc(1, sizeof *c);
    if (!c) return gb_fail(b, DI_ERR_NOMEM, "out of memory"), NULL;
    c->b = b;
    c->opt = opt ? *opt : di_grammar_options_default();
    if (!c->opt.max_depth) c->opt.max_depth = DI_GRAMMAR_DEFAULT_MAX_DEPTH;
    c->r_value = c->r_string = c->r_number = c->r_ws = c->r_char = GB_NIL;
    c->sub = schema_node;
    if (!(c->scratch = json_array())) {
        free(c);
        return gb_fail(b, DI_ERR_NOMEM, "out of memory"), NULL;
    }
    return c;
}

uint32_t json_sub_value(jsc *c, json_t *root, json_t *s, const char *path) {
    if (!c || !gb_ok(c->b)) return GB_NIL;
    c->root = root;
    c->draft7 = c->opt.draft == DI_GRAMMAR_DRAFT_7;
    const char *sv = json_string_value(json_object_get(root, "$schema"));
    if (sv) c->draft7 = strstr(sv, "draft-07") || strstr(sv, "draft-06") || strstr(sv, "draft-04");
    snprintf(c->path, sizeof c->path, "%s", path ? path : "");
    uint32_t r = js_ref_rule(c, s);
    return r == GB_NIL ? GB_NIL : gb_ref(c->b, r);
}

uint32_t json_sub_any_value(jsc *c) { return c && gb_ok(c->b) ? js_any_value(c) : GB_NIL; }

void json_sub_note_dropped(jsc *c, const char *what, const char *path) {
    snprintf(c->path, sizeof c->path, "%s", path ? path : "");
    js_note_dropped(c, what);
}

const char *json_sub_dropped(const jsc *c) { return c && c->dropped[0] ? c->dropped : NULL; }

void json_sub_free(jsc *c) {
    if (!c) return;
    json_decref(c->scratch);
    free(c->ref_keys);
    free(c->ref_rules);
    free(c);
}
