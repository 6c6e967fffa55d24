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
 * bounds); rewritten into alternatives (rewrite_logic): not (of type,
 * required, properties, enum / const of scalars, bounds, and anyOf / allOf
 * / not of those), if / then / else ((if and then) or (not if and else)),
 * dependentRequired / dependentSchemas / dependencies (absent, or present
 * with what it needs; at most 6); in the forms a grammar expresses
 * exactly: multipleOf (1, 10^-k), minProperties / maxProperties (implied
 * by the members, or minProperties 1), patternProperties (one pattern; see
 * object_node).
 * Annotations (title, description, default, ...) are ignored; other JSON
 * Schema keywords are an error naming them unless the caller is lenient.
 *
 * Choices that shape the grammar:
 * - Object members come in schema order (listed properties, then
 *   additional ones); a JSON object with another key order is a different
 *   text, so generation is canonical and the grammar stays linear in size.
 * - oneOf is compiled as anyOf: "exactly one" is not context-free in
 *   general; for the usual disjoint branches the two are the same.
 * - Schema keywords that apply to one type constrain only that type, as in
 *   the specification ({"minimum": 1} still accepts "x"). */
#include "grammar/json_internal.h"

#include "base/alloc.h"

#include <jansson.h>
#include <math.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
} jsc;

enum { T_NULL = 1, T_BOOL = 2, T_OBJECT = 4, T_ARRAY = 8, T_NUMBER = 16, T_INTEGER = 32, T_STRING = 64 };
#define T_ALL (T_NULL | T_BOOL | T_OBJECT | T_ARRAY | T_NUMBER | T_STRING)

static const char *const ANNOTATIONS[] = {
    "$schema", "$id", "id", "$comment", "title", "description", "default", "examples", "readOnly",
    "writeOnly", "deprecated", "contentMediaType", "contentEncoding", "contentSchema", "$anchor",
    "$vocabulary", "$defs", "definitions", NULL};
/* Supported keywords are listed at the top of this file; these are the
 * JSON Schema keywords we know and do not implement. */
static const char *const UNSUPPORTED[] = {
    "propertyNames", "uniqueItems", "unevaluatedProperties", "unevaluatedItems",
    "$dynamicRef", "$dynamicAnchor", "$recursiveRef", "$recursiveAnchor", NULL};

/* Internal keyword (rewrite_logic): the strings listed are excluded. */
#define NOT_IN "$deepinfer:notIn"

static bool in_list(const char *const *list, const char *k) {
    for (; *list; list++)
        if (!strcmp(*list, k)) return true;
    return false;
}

static uint32_t jfail(jsc *c, di_status code, const char *fmt, const char *arg) {
    char msg[300];
    snprintf(msg, sizeof msg, fmt, arg);
    gb_fail(c->b, code, "json schema at %s: %s", c->path[0] ? c->path : "#", msg);
    return GB_NIL;
}

/* Path bookkeeping for error messages; truncates quietly when long. */
static size_t path_push(jsc *c, const char *seg) {
    size_t n = strlen(c->path);
    snprintf(c->path + n, sizeof c->path - n, "/%s", seg);
    return n;
}
static void path_pop(jsc *c, size_t n) { c->path[n] = 0; }

/* Lenient mode drops what it cannot enforce: note what and where (once
 * per what and place), so that callers can say so. */
static void note_dropped(jsc *c, const char *what) {
    char item[480];
    snprintf(item, sizeof item, "%.200s at #%.255s", what, c->path);
    if (strstr(c->dropped, item)) return;
    size_t n = strlen(c->dropped);
    snprintf(c->dropped + n, sizeof c->dropped - n, "%s%s", n ? "; " : "", item);
}

/* gb_nothing with the reason noted (gb_note_empty) for the message an
 * entirely unsatisfiable schema gets: why, at the current path. */
static uint32_t nothing_because(jsc *c, const char *why) {
    gb_note_empty(c->b, "%s at #%s", why, c->path);
    return gb_nothing(c->b);
}

/* "'lo_key' lo is above 'hi_key' hi" for a pair of count bounds. */
static uint32_t counts_cross(jsc *c, const char *lo_key, uint32_t lo, const char *hi_key, uint32_t hi) {
    char why[128];
    snprintf(why, sizeof why, "'%s' %u is above '%s' %u", lo_key, lo, hi_key, hi);
    return nothing_because(c, why);
}

static uint32_t schema_node(jsc *c, json_t *s);

/* ---- shared rules ------------------------------------------------------ */

static uint32_t ws(jsc *c) {
    if (c->opt.whitespace == DI_GRAMMAR_WS_COMPACT) return gb_empty(c->b);
    if (c->r_ws == GB_NIL) {
        gb_bits w = {{0}};
        for (const char *p = " \t\n\r"; *p; p++) gb_bits_set(&w, (uint8_t)*p);
        c->r_ws = gb_rule_of(c->b, "ws", gb_repeat(c->b, gb_class(c->b, &w), 0, DI_GRAMMAR_MAX_WS));
    }
    return gb_ref(c->b, c->r_ws);
}

static uint32_t string_char(jsc *c) {
    if (c->r_char == GB_NIL) c->r_char = gb_rule_of(c->b, "char", json_string_char(c->b));
    return gb_ref(c->b, c->r_char);
}

static uint32_t quoted(jsc *c, uint32_t body) {
    return gb_seq3(c->b, gb_str(c->b, "\""), body, gb_str(c->b, "\""));
}

static uint32_t any_string(jsc *c) {
    if (c->r_string == GB_NIL) c->r_string = gb_rule_of(c->b, "string", quoted(c, gb_star(c->b, string_char(c))));
    return gb_ref(c->b, c->r_string);
}

static uint32_t any_number(jsc *c) {
    if (c->r_number == GB_NIL) c->r_number = gb_rule_of(c->b, "number", jn_number(c->b, false, NULL, false, NULL, false));
    return gb_ref(c->b, c->r_number);
}

/* "[" ws (item (ws "," ws item)* ws)? "]" and the object analogue. */
static uint32_t list_of(jsc *c, const char *open, const char *close, uint32_t item_rule) {
    gb *b = c->b;
    uint32_t sep = gb_seq3(b, ws(c), gb_str(b, ","), ws(c));
    uint32_t more = gb_star(b, gb_seq2(b, sep, gb_ref(b, item_rule)));
    uint32_t body = gb_opt(b, gb_seq3(b, gb_ref(b, item_rule), more, ws(c)));
    uint32_t k[4] = {gb_str(b, open), ws(c), body, gb_str(b, close)};
    return gb_seq(b, k, 4);
}

static uint32_t any_value(jsc *c) {
    gb *b = c->b;
    if (c->r_value == GB_NIL) {
        c->r_value = gb_rule_new(b, "value", 5);
        uint32_t member = gb_rule_of(b, "member", gb_seq3(b, any_string(c), gb_seq3(b, ws(c), gb_str(b, ":"), ws(c)),
                                                          gb_ref(b, c->r_value)));
        uint32_t object = gb_rule_of(b, "object", list_of(c, "{", "}", member));
        uint32_t array = gb_rule_of(b, "array", list_of(c, "[", "]", c->r_value));
        uint32_t alts[7] = {gb_ref(b, object), gb_ref(b, array), any_string(c), any_number(c),
                            gb_str(b, "true"), gb_str(b, "false"), gb_str(b, "null")};
        gb_rule_define(b, c->r_value, gb_alt(b, alts, 7));
    }
    return gb_ref(b, c->r_value);
}

/* ---- $ref --------------------------------------------------------------- */

/* Resolves a local reference ("#", "#/a/b~1c/0"); NULL with an error set
 * otherwise. */
static json_t *resolve_ref(jsc *c, const char *ref) {
    if (ref[0] != '#') return jfail(c, DI_ERR_UNSUPPORTED, "remote $ref '%s' is not supported", ref), NULL;
    if (ref[1] && ref[1] != '/') return jfail(c, DI_ERR_UNSUPPORTED, "$ref to an anchor '%s' is not supported", ref), NULL;
    json_t *cur = c->root;
    const char *p = ref + 1;
    char seg[256];
    while (*p == '/') {
        p++;
        size_t n = 0;
        while (*p && *p != '/') {
            char ch = *p++;
            if (ch == '~' && (*p == '0' || *p == '1')) ch = *p++ == '0' ? '~' : '/';
            else if (ch == '%' && p[0] && p[1]) {
                char hex[3] = {p[0], p[1], 0};
                char *end;
                long v = strtol(hex, &end, 16);
                if (*end == 0) ch = (char)v, p += 2;
            }
            if (n + 1 >= sizeof seg) return jfail(c, DI_ERR_RANGE, "$ref segment too long in '%s'", ref), NULL;
            seg[n++] = ch;
        }
        seg[n] = 0;
        if (json_is_object(cur)) cur = json_object_get(cur, seg);
        else if (json_is_array(cur)) {
            char *end;
            unsigned long i = strtoul(seg, &end, 10);
            cur = *end || !seg[0] ? NULL : json_array_get(cur, i);
        } else cur = NULL;
        if (!cur) return jfail(c, DI_ERR_NOT_FOUND, "$ref '%s' does not resolve", ref), NULL;
    }
    return cur;
}

static uint32_t ref_rule(jsc *c, json_t *target) {
    for (uint32_t i = 0; i < c->n_refs; i++)
        if (c->ref_keys[i] == target) return c->ref_rules[i];
    if (c->n_refs == c->cap_refs) {
        uint32_t nc = c->cap_refs ? c->cap_refs * 2 : 16;
        json_t **k = di_realloc_array(c->ref_keys, nc, sizeof *k);
        if (!k) return gb_fail(c->b, DI_ERR_NOMEM, "out of memory"), GB_NIL;
        c->ref_keys = k;
        uint32_t *r = di_realloc_array(c->ref_rules, nc, sizeof *r);
        if (!r) return gb_fail(c->b, DI_ERR_NOMEM, "out of memory"), GB_NIL;
        c->ref_rules = r;
        c->cap_refs = nc;
    }
    uint32_t rule = gb_rule_new(c->b, NULL, 0);
    if (rule == GB_NIL) return GB_NIL;
    c->ref_keys[c->n_refs] = target;
    c->ref_rules[c->n_refs++] = rule;
    /* Define after registering, so a recursive $ref finds the rule. */
    gb_rule_define(c->b, rule, schema_node(c, target));
    return rule;
}

/* ---- allOf / sibling merging ------------------------------------------- */

static json_t *keep(jsc *c, json_t *v) { /* scratch owns v */
    if (v) json_array_append_new(c->scratch, v);
    return v;
}

static json_t *all_of2(jsc *c, json_t *a, json_t *x) {
    json_t *o = keep(c, json_object());
    json_t *l = json_array();
    json_array_append(l, a);
    json_array_append(l, x);
    json_object_set_new(o, "allOf", l);
    return o;
}

static int type_mask_of(json_t *t) {
    static const char *names[] = {"null", "boolean", "object", "array", "number", "integer", "string"};
    int m = 0;
    size_t n = json_is_array(t) ? json_array_size(t) : 1;
    for (size_t i = 0; i < n; i++) {
        const char *s = json_string_value(json_is_array(t) ? json_array_get(t, i) : t);
        if (!s) return -1;
        int bit = -1;
        for (int k = 0; k < 7; k++)
            if (!strcmp(s, names[k])) bit = 1 << k;
        if (bit < 0) return -1;
        m |= bit;
    }
    if (m & T_NUMBER) m |= T_INTEGER;
    return m;
}

static json_t *type_json(int m) {
    static const char *names[] = {"null", "boolean", "object", "array", "number", "integer", "string"};
    json_t *a = json_array();
    if (m & T_NUMBER) m &= ~T_INTEGER;
    for (int k = 0; k < 7; k++)
        if (m & (1 << k)) json_array_append_new(a, json_string(names[k]));
    return a;
}

static bool is_max_kw(const char *k) {
    return !strcmp(k, "maximum") || !strcmp(k, "maxLength") || !strcmp(k, "maxItems") || !strcmp(k, "exclusiveMaximum");
}
static bool is_min_kw(const char *k) {
    return !strcmp(k, "minimum") || !strcmp(k, "minLength") || !strcmp(k, "minItems") || !strcmp(k, "exclusiveMinimum");
}

static json_t *deref(jsc *c, json_t *s, uint32_t hops);

/* Merges schema src into the object dst (both constrain the same value).
 * false (error set) when the keywords do not combine into one schema. */
static bool merge_into(jsc *c, json_t *dst, json_t *src) {
    src = deref(c, src, 0);
    if (!src) return false;
    if (json_is_true(src)) return true;
    if (json_is_false(src)) {
        json_object_set_new(dst, "type", json_array()); /* nothing matches */
        return true;
    }
    if (!json_is_object(src)) return jfail(c, DI_ERR_FORMAT, "%s", "schema is not an object"), false;
    json_t *nested = json_object_get(src, "allOf");
    size_t i;
    json_t *v;
    json_array_foreach(nested, i, v) if (!merge_into(c, dst, v)) return false;
    /* additionalProperties refers to the properties of its own schema; the
     * merged schema would change its meaning unless the key sets agree. */
    json_t *dap = json_object_get(dst, "additionalProperties"), *sap = json_object_get(src, "additionalProperties");
    json_t *dpr = json_object_get(dst, "properties"), *spr = json_object_get(src, "properties");
    json_t *dpp = json_object_get(dst, "patternProperties"), *spp = json_object_get(src, "patternProperties");
    if ((dap || sap || dpp || spp) && !json_equal(dpp, spp) && (dpp || spp) && (dap || sap || (dpr && spr)))
        return jfail(c, DI_ERR_UNSUPPORTED, "%s", "allOf with patternProperties and additionalProperties in different schemas"), false;
    bool joint = false; /* properties and additionalProperties merged together below */
    if (((dap && !json_is_true(dap)) && spr && !json_equal(dpr, spr)) ||
        ((sap && !json_is_true(sap)) && dpr && !json_equal(dpr, spr))) {
        if (dpp || spp)
            return jfail(c, DI_ERR_UNSUPPORTED, "%s", "allOf with additionalProperties over different properties"), false;
        /* Each key takes both sides' schemas: a side's own property, or
         * that side's additionalProperties when it does not list the key;
         * keys neither lists take both additionalProperties. */
        json_t *np = json_object();
        const char *pk;
        json_t *pv;
        json_object_foreach(dpr, pk, pv) {
            json_t *other = json_object_get(spr, pk);
            if (!other) other = sap;
            json_object_set(np, pk, !other || json_is_true(other) ? pv : all_of2(c, pv, other));
        }
        json_object_foreach(spr, pk, pv) {
            if (json_object_get(np, pk)) continue;
            json_object_set(np, pk, !dap || json_is_true(dap) ? pv : all_of2(c, dap, pv));
        }
        json_object_set_new(dst, "properties", np);
        if (sap) json_object_set(dst, "additionalProperties", dap ? all_of2(c, dap, sap) : sap);
        joint = true;
    }
    /* likewise `items` means "after the prefix" of its own schema */
    json_t *dit = json_object_get(dst, "items"), *sit = json_object_get(src, "items");
    bool dtuple = json_object_get(dst, "prefixItems") || json_is_array(dit);
    bool stuple = json_object_get(src, "prefixItems") || json_is_array(sit);
    if ((dit && !json_is_array(dit) && stuple && !dtuple) || (sit && !json_is_array(sit) && dtuple && !stuple))
        return jfail(c, DI_ERR_UNSUPPORTED, "%s", "allOf with items over different prefixItems"), false;
    const char *k;
    json_object_foreach(src, k, v) {
        if (!strcmp(k, "allOf") || in_list(ANNOTATIONS, k)) continue;
        if (joint && (!strcmp(k, "properties") || !strcmp(k, "additionalProperties"))) continue;
        /* additionalItems reads only its own schema's tuple `items`, never
         * one an applicator brings in: without that tuple it does nothing */
        if (!strcmp(k, "additionalItems") && !json_is_array(sit)) continue;
        json_t *d = json_object_get(dst, k);
        if (!d) { json_object_set(dst, k, v); continue; }
        if (json_equal(d, v)) continue;
        if (!strcmp(k, "type")) {
            int a = type_mask_of(d), bm = type_mask_of(v);
            if (a < 0 || bm < 0) return jfail(c, DI_ERR_FORMAT, "%s", "bad 'type'"), false;
            json_object_set_new(dst, k, type_json(a & bm));
        } else if (!strcmp(k, "required")) {
            json_t *u = json_deep_copy(d);
            size_t j;
            json_t *x;
            json_array_foreach(v, j, x) {
                bool have = false;
                size_t q;
                json_t *y;
                json_array_foreach(u, q, y) have |= json_equal(x, y);
                if (!have) json_array_append(u, x);
            }
            json_object_set_new(dst, k, u);
        } else if (!strcmp(k, "properties")) {
            json_t *u = json_copy(d);
            const char *pk;
            json_t *pv;
            json_object_foreach(v, pk, pv) {
                json_t *have = json_object_get(u, pk);
                json_object_set(u, pk, have ? all_of2(c, have, pv) : pv);
            }
            json_object_set_new(dst, k, u);
        } else if (!strcmp(k, "additionalProperties") || !strcmp(k, "items")) {
            if (json_is_array(d) || json_is_array(v))
                return jfail(c, DI_ERR_UNSUPPORTED, "allOf combining tuple '%s'", k), false;
            json_object_set(dst, k, all_of2(c, d, v));
        } else if ((is_max_kw(k) || is_min_kw(k)) && json_is_number(d) && json_is_number(v)) {
            double a = json_number_value(d), bv = json_number_value(v);
            bool take = is_max_kw(k) ? bv < a : bv > a;
            if (take) json_object_set(dst, k, v);
        } else if (!strcmp(k, NOT_IN)) {
            json_t *u = json_deep_copy(d);
            json_array_extend(u, v);
            json_object_set_new(dst, k, u);
        } else if (!strcmp(k, "enum")) {
            json_t *u = json_array();
            size_t j, q;
            json_t *x, *y;
            json_array_foreach(d, j, x) {
                bool in = false;
                json_array_foreach(v, q, y) in |= json_equal(x, y);
                if (in) json_array_append(u, x);
            }
            json_object_set_new(dst, k, u);
        } else {
            return jfail(c, DI_ERR_UNSUPPORTED, "allOf: cannot combine two different '%s'", k), false;
        }
    }
    return true;
}

/* Follows a chain of pure references ({"$ref": ...} plus annotations). */
static json_t *deref(jsc *c, json_t *s, uint32_t hops) {
    if (!json_is_object(s)) return s;
    json_t *r = json_object_get(s, "$ref");
    if (!r) return s;
    if (!json_is_string(r)) return jfail(c, DI_ERR_FORMAT, "%s", "$ref is not a string"), NULL;
    if (hops > 64) return jfail(c, DI_ERR_RANGE, "%s", "$ref chain too long"), NULL;
    json_t *t = resolve_ref(c, json_string_value(r));
    if (!t) return NULL;
    if (json_object_size(s) > 1 && !c->draft7) {
        /* 2020-12: siblings of $ref also apply: merge both */
        json_t *m = keep(c, json_object());
        json_t *rest = keep(c, json_copy(s));
        json_object_del(rest, "$ref");
        if (!merge_into(c, m, t) || !merge_into(c, m, rest)) return NULL;
        return m;
    }
    return deref(c, t, hops + 1);
}

/* ---- literals ----------------------------------------------------------- */

static uint32_t literal(jsc *c, json_t *v) {
    gb *b = c->b;
    if (json_is_integer(v) || (json_is_real(v) && json_real_value(v) > -1e15 && json_real_value(v) < 1e15 &&
                               json_real_value(v) == (double)(long long)json_real_value(v))) {
        /* integral numbers: 1 == 1.0 == 1.00 in JSON Schema */
        char buf[32];
        long long x = json_is_integer(v) ? (long long)json_integer_value(v) : (long long)json_real_value(v);
        snprintf(buf, sizeof buf, "%lld", x);
        uint32_t zeros = gb_opt(b, gb_seq2(b, gb_str(b, "."), gb_plus(b, gb_byte_range(b, '0', '0'))));
        return gb_seq2(b, gb_str(b, buf), zeros);
    }
    if (json_is_real(v)) {
        /* jansson's text (17 digits) and the shortest round-trip text */
        char *t = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
        char s[40];
        double x = json_real_value(v);
        for (int prec = 1; prec <= 17; prec++) {
            snprintf(s, sizeof s, "%.*g", prec, x);
            if (strtod(s, NULL) == x) break;
        }
        if (!t) return gb_fail(b, DI_ERR_NOMEM, "out of memory"), GB_NIL;
        uint32_t n = gb_alt2(b, gb_str(b, t), gb_str(b, s));
        free(t);
        return n;
    }
    if ((json_is_array(v) || json_is_object(v)) && c->depth < c->opt.max_depth) {
        /* element by element, so nested numbers get the integral forms */
        size_t n = json_is_array(v) ? json_array_size(v) : json_object_size(v);
        uint32_t *parts = di_malloc_array(2 * n + 2, sizeof(uint32_t));
        if (!parts) return gb_fail(b, DI_ERR_NOMEM, "out of memory"), GB_NIL;
        uint32_t k = 0;
        parts[k++] = gb_str(b, json_is_array(v) ? "[" : "{");
        c->depth++;
        if (json_is_array(v)) {
            for (size_t i = 0; i < n; i++) {
                if (i) parts[k++] = gb_str(b, ",");
                parts[k++] = literal(c, json_array_get(v, i));
            }
        } else {
            const char *key;
            json_t *x;
            size_t i = 0;
            json_object_foreach(v, key, x) {
                json_t *ks = json_string(key);
                char *kt = json_dumps(ks, JSON_ENCODE_ANY | JSON_COMPACT);
                json_decref(ks);
                if (!kt) { gb_fail(b, DI_ERR_NOMEM, "out of memory"); break; }
                parts[k++] = gb_seq3(b, gb_str(b, i++ ? "," : ""), gb_str(b, kt), gb_str(b, ":"));
                free(kt);
                parts[k++] = literal(c, x);
            }
        }
        c->depth--;
        parts[k++] = gb_str(b, json_is_array(v) ? "]" : "}");
        uint32_t r = gb_seq(b, parts, k);
        free(parts);
        return r;
    }
    char *t = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    if (!t) return gb_fail(b, DI_ERR_NOMEM, "out of memory"), GB_NIL;
    uint32_t n = gb_str(b, t);
    free(t);
    return n;
}

/* Whether x is a whole number (without casting out of range). */
static bool integral(double x) { return isfinite(x) && x == floor(x); }

static int json_type_bit(json_t *v) {
    switch (json_typeof(v)) {
    case JSON_NULL: return T_NULL;
    case JSON_TRUE: case JSON_FALSE: return T_BOOL;
    case JSON_OBJECT: return T_OBJECT;
    case JSON_ARRAY: return T_ARRAY;
    case JSON_STRING: return T_STRING;
    case JSON_INTEGER: return T_INTEGER | T_NUMBER;
    case JSON_REAL: return integral(json_real_value(v)) ? T_INTEGER | T_NUMBER : T_NUMBER;
    }
    return 0;
}

/* ---- strings ------------------------------------------------------------ */

static const struct { const char *name, *re; } FORMATS[] = {
    {"date", "\\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\\d|3[01])"},
    {"time", "([01]\\d|2[0-3]):[0-5]\\d:([0-5]\\d|60)(\\.\\d+)?([Zz]|[+-]([01]\\d|2[0-3]):[0-5]\\d)"},
    {"date-time", "\\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\\d|3[01])[Tt]([01]\\d|2[0-3]):[0-5]\\d:([0-5]\\d|60)"
                  "(\\.\\d+)?([Zz]|[+-]([01]\\d|2[0-3]):[0-5]\\d)"},
    {"uuid", "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"},
    {"email", "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*"
              "@[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)+"},
    {"uri", "[A-Za-z][A-Za-z0-9+.-]*:[^\\x00-\\x20\"<>\\\\^`{|}]*"},
    {"ipv4", "((25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)\\.){3}(25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)"},
    {"hostname", "[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*"},
};

static bool get_count(jsc *c, json_t *s, const char *k, uint32_t *out) {
    json_t *v = json_object_get(s, k);
    if (!v) return true;
    double x = json_number_value(v);
    if (!json_is_number(v) || x < 0 || x != (double)(uint64_t)x)
        return jfail(c, DI_ERR_FORMAT, "'%s' is not a non-negative integer", k), false;
    if (x > GB_MAX_REPEAT) {
        if (!strncmp(k, "max", 3)) return true; /* effectively unbounded */
        return jfail(c, DI_ERR_RANGE, "'%s' is too large", k), false;
    }
    *out = (uint32_t)x;
    return true;
}

/* Length range, in characters, of the strings a plain-mode regex node
 * matches (hi GB_INF: unbounded). Regex nodes hold no rule references. */
static void node_len(const gb *b, uint32_t node, uint32_t depth, uint64_t *lo, uint64_t *hi) {
    const gb_node *nd = &b->nodes[node];
    *lo = 0, *hi = GB_INF;
    if (depth > 1000) return; /* unknown: widest range */
    switch (nd->kind) {
    case GN_EMPTY: *hi = 0; return;
    case GN_NOTHING: *lo = GB_INF, *hi = 0; return;
    case GN_BYTES: {
        uint64_t n = 0;
        for (uint32_t i = 0; i < nd->b; i++) n += (b->bytes[nd->a + i] & 0xC0) != 0x80;
        *lo = *hi = n;
        return;
    }
    case GN_CLASS: case GN_UCLASS: *lo = *hi = 1; return;
    case GN_SEQ: case GN_ALT: {
        bool seq = nd->kind == GN_SEQ;
        uint64_t l = seq ? 0 : GB_INF, h = 0;
        for (uint32_t i = 0; i < nd->b; i++) {
            uint64_t kl, kh;
            node_len(b, b->kids[nd->a + i], depth + 1, &kl, &kh);
            if (seq) {
                l = l + kl > GB_INF ? GB_INF : l + kl;
                h = h == GB_INF || kh == GB_INF || h + kh >= GB_INF ? GB_INF : h + kh;
            } else {
                if (kl < l) l = kl;
                if (kh > h) h = kh;
            }
        }
        *lo = l, *hi = h;
        return;
    }
    case GN_REPEAT: {
        uint64_t kl, kh;
        node_len(b, nd->a, depth + 1, &kl, &kh);
        *lo = kl * nd->c >= GB_INF ? GB_INF : kl * nd->c;
        *hi = nd->d == GB_INF || kh == GB_INF ? (kh == 0 ? 0 : GB_INF) : (kh * nd->d >= GB_INF ? GB_INF : kh * nd->d);
        return;
    }
    default: return;
    }
}

/* Automaton states for a pattern (with its length counter): past this the
 * grammar would be large, so an ambiguous pattern keeps its tree form and a
 * pattern with length bounds is refused. */
#define JS_DFA_MAX_STATES 4096

/* The JSON string `"` automaton `"` with the closing quote inside the
 * automaton's accepting states (see rx_dfa's tail); d from rx_dfa. */
static uint32_t quoted_dfa(jsc *c, uint32_t d) {
    return d == GB_NIL ? GB_NIL : gb_seq2(c->b, gb_str(c->b, "\""), d);
}

/* A JSON string (quotes included) matching a regex with minLength /
 * maxLength. The regex's own length range already lies within the bounds;
 * or the regex is one repeated character (^[a-z]+$), whose repeat count
 * takes the bounds; or else the regex's automaton with a character counter
 * (rx_dfa). NIL with *fits false when that automaton is too large (error
 * left to the caller). */
static uint32_t pattern_with_length(jsc *c, const char *re, bool search, uint32_t lo, uint32_t hi, bool *fits) {
    gb *b = c->b;
    *fits = true;
    uint32_t plain = rx_translate(b, re, strlen(re), search, false, c->opt.max_depth);
    if (plain == GB_NIL) return GB_NIL;
    uint64_t pl, ph;
    node_len(b, plain, 0, &pl, &ph);
    uint32_t json = rx_translate(b, re, strlen(re), search, true, c->opt.max_depth);
    if (json == GB_NIL) return GB_NIL;
    if (pl >= lo && (hi == GB_INF || (ph != GB_INF && ph <= hi))) return quoted(c, json);
    const gb_node *p = &b->nodes[plain], *j = &b->nodes[json];
    if (p->kind == GN_REPEAT && j->kind == GN_REPEAT) {
        uint64_t kl, kh;
        node_len(b, p->a, 0, &kl, &kh);
        if (kl == 1 && kh == 1) {
            uint32_t nlo = p->c > lo ? p->c : lo, nhi = p->d < hi ? p->d : hi;
            return quoted(c, gb_repeat(b, j->a, nlo, nhi));
        }
    }
    /* otherwise the pattern's automaton times a character counter */
    bool big;
    uint32_t d = rx_dfa(b, plain, lo, hi, true, gb_str(b, "\""), JS_DFA_MAX_STATES, &big);
    if (d == GB_NIL && big) *fits = false;
    return quoted_dfa(c, d);
}

/* A JSON string (quotes included) matching a pattern without length
 * bounds: the tree form, or the automaton when the tree is ambiguous
 * (nested repetitions) and the automaton is small. */
static uint32_t pattern_node(jsc *c, const char *re, bool search) {
    gb *b = c->b;
    uint32_t plain = rx_translate(b, re, strlen(re), search, false, c->opt.max_depth);
    if (plain == GB_NIL) return GB_NIL;
    if (rx_is_ambiguous(b, plain)) {
        bool big;
        uint32_t d = rx_dfa(b, plain, 0, GB_INF, true, gb_str(b, "\""), JS_DFA_MAX_STATES, &big);
        if (d != GB_NIL || !big) return quoted_dfa(c, d);
    }
    uint32_t t = rx_translate(b, re, strlen(re), search, true, c->opt.max_depth);
    return t == GB_NIL ? GB_NIL : quoted(c, t);
}

/* An object member as object_node lists it (name, value schema). */
typedef struct member {
    const char *name;
    json_t *schema;
    bool required;
} member;

static uint32_t key_not_in(jsc *c, const member *m, const uint32_t *idx, uint32_t n_idx);

/* A string other than the listed ones (`not` of an enum / const): the
 * property-name exclusion automaton (key_not_in), with its precision. */
static uint32_t string_not_in(jsc *c, json_t *list, bool has_len) {
    gb *b = c->b;
    if (has_len) return jfail(c, DI_ERR_UNSUPPORTED, "%s", "'not' of an enum together with minLength/maxLength");
    size_t n = json_array_size(list);
    member *m = di_calloc(n + 1, sizeof *m);
    uint32_t *idx = di_malloc_array(n + 1, sizeof(uint32_t));
    if (!m || !idx) { free(m), free(idx); return gb_fail(b, DI_ERR_NOMEM, "out of memory"), GB_NIL; }
    for (size_t i = 0; i < n; i++) {
        m[i].name = json_string_value(json_array_get(list, i));
        idx[i] = (uint32_t)i;
    }
    uint32_t r = gb_seq2(b, gb_str(b, "\""), key_not_in(c, m, idx, (uint32_t)n));
    free(m), free(idx);
    return r;
}

static uint32_t string_node(jsc *c, json_t *s) {
    gb *b = c->b;
    uint32_t lo = 0, hi = GB_INF;
    if (!get_count(c, s, "minLength", &lo) || !get_count(c, s, "maxLength", &hi)) return GB_NIL;
    if (hi != GB_INF && lo > hi) return counts_cross(c, "minLength", lo, "maxLength", hi);
    bool has_len = lo > 0 || hi != GB_INF;
    json_t *pat = json_object_get(s, "pattern"), *fmt = json_object_get(s, "format");
    /* `format` is an annotation in the specification; we enforce the
     * formats we know (generation wants them) and treat the others as the
     * annotations they are. */
    const char *fre = NULL;
    if (fmt) {
        const char *f = json_string_value(fmt);
        if (!f) return jfail(c, DI_ERR_FORMAT, "%s", "'format' is not a string");
        for (size_t i = 0; i < sizeof FORMATS / sizeof FORMATS[0]; i++)
            if (!strcmp(f, FORMATS[i].name)) fre = FORMATS[i].re;
        /* an unknown format is one we cannot enforce: strict refuses it,
         * lenient drops it and says so (a pattern next to it still holds) */
        if (!fre && !pat) {
            char what[160];
            snprintf(what, sizeof what, "'format' '%.80s'", f);
            if (!c->opt.lenient) return jfail(c, DI_ERR_UNSUPPORTED, "%s is not enforced", what);
            note_dropped(c, what);
        }
    }
    if (pat) {
        /* a pattern is an assertion: it wins over the format annotation */
        const char *re = json_string_value(pat);
        if (!re) return jfail(c, DI_ERR_FORMAT, "%s", "'pattern' is not a string");
        size_t n = path_push(c, "pattern");
        bool fits = true;
        uint32_t body = has_len ? pattern_with_length(c, re, true, lo, hi, &fits) : pattern_node(c, re, true);
        if (body == GB_NIL && gb_ok(b) && !fits) {
            if (!c->opt.lenient)
                jfail(c, DI_ERR_UNSUPPORTED, "%s", "'pattern' together with minLength/maxLength (automaton too large)");
            else if (note_dropped(c, "'minLength'/'maxLength' next to 'pattern'"), (body = rx_translate(b, re, strlen(re), true, true, c->opt.max_depth)) != GB_NIL)
                body = quoted(c, body);
        } else if (body == GB_NIL) {
            di_error_prefix(b->err, "json schema at %s: ", c->path);
        }
        path_pop(c, n);
        return body;
    }
    if (fre) {
        bool fits = true;
        uint32_t body = has_len ? pattern_with_length(c, fre, false, lo, hi, &fits)
                                : pattern_node(c, fre, false);
        if (body != GB_NIL) return body;
        if (!gb_ok(b)) return GB_NIL;
        /* the format cannot take the length bounds: keep the bounds (the
         * assertion) and drop the format (the annotation) */
    }
    json_t *not_in = json_object_get(s, NOT_IN);
    if (not_in) return string_not_in(c, not_in, has_len);
    if (!has_len) return any_string(c);
    return quoted(c, gb_repeat(b, string_char(c), lo, hi));
}

/* ---- numbers ------------------------------------------------------------ */

static bool bound(jsc *c, json_t *s, const char *k, jn_dec *d, bool *have) {
    json_t *v = json_object_get(s, k);
    *have = false;
    if (!v) return true;
    if (json_is_boolean(v)) return true; /* draft 4 style flags, read by the caller */
    if (!json_is_number(v)) return jfail(c, DI_ERR_FORMAT, "'%s' is not a number", k), false;
    double x = json_number_value(v);
    if (!jn_parse_bound(x, d)) {
        /* huge bounds: only values we would never write without an
         * exponent lie beyond them, so a huge maximum (or a hugely
         * negative minimum) is no constraint */
        bool is_max = !strncmp(k, "max", 3) || !strcmp(k, "exclusiveMaximum");
        if ((is_max && x > 0) || (!is_max && x < 0)) return true;
        return jfail(c, DI_ERR_UNSUPPORTED, "'%s' is out of the supported range", k), false;
    }
    *have = true;
    return true;
}

/* Orders two bounds (-1, 0, 1); both came from doubles, so comparing the
 * doubles their digits spell is exact enough. */
static int dec_order(const jn_dec *a, const jn_dec *b) {
    char ta[80], tb[80];
    snprintf(ta, sizeof ta, "%s%s.%s0", a->neg ? "-" : "", a->ip, a->fp);
    snprintf(tb, sizeof tb, "%s%s.%s0", b->neg ? "-" : "", b->ip, b->fp);
    double p = strtod(ta, NULL), q = strtod(tb, NULL);
    return p < q ? -1 : p > q;
}

static uint32_t number_node(jsc *c, json_t *s, bool integer) {
    jn_dec lo, hi, elo, ehi;
    bool hlo, hhi, helo, hehi;
    if (!bound(c, s, "minimum", &lo, &hlo) || !bound(c, s, "maximum", &hi, &hhi) ||
        !bound(c, s, "exclusiveMinimum", &elo, &helo) || !bound(c, s, "exclusiveMaximum", &ehi, &hehi))
        return GB_NIL;
    bool lo_strict = json_is_true(json_object_get(s, "exclusiveMinimum")) && hlo;
    bool hi_strict = json_is_true(json_object_get(s, "exclusiveMaximum")) && hhi;
    if (helo && (!hlo || dec_order(&elo, &lo) >= 0)) lo = elo, hlo = true, lo_strict = true;
    if (hehi && (!hhi || dec_order(&ehi, &hi) <= 0)) hi = ehi, hhi = true, hi_strict = true;
    /* multipleOf: 1 means integers; 10^-k (0.01 for money) means at most
     * k fraction digits, supported without bounds */
    json_t *mo = json_object_get(s, "multipleOf");
    uint32_t frac_digits = UINT32_MAX;
    if (mo) {
        double q = json_number_value(mo);
        if (!json_is_number(mo) || !(q > 0)) return jfail(c, DI_ERR_FORMAT, "%s", "'multipleOf' is not a positive number");
        uint32_t k = 0;
        while (k < 9 && fabs(q * pow(10, k) - 1) > 1e-9) k++;
        if (q == 1) integer = true;
        else if (k < 9 && !integer && !hlo && !hhi) frac_digits = k;
        else if (!integer && !c->opt.lenient)
            return jfail(c, DI_ERR_UNSUPPORTED, "%s", "'multipleOf' other than 1 or 10^-k (without bounds)");
        else if (integer && !(q < 1 && k < 9) && !c->opt.lenient)
            return jfail(c, DI_ERR_UNSUPPORTED, "%s", "'multipleOf' on integers other than 1");
        else if (!integer || !(q < 1 && k < 9))
            note_dropped(c, "'multipleOf'");
    }
    if (frac_digits != UINT32_MAX) {
        gb *b = c->b;
        uint32_t ip = gb_alt2(b, gb_str(b, "0"), gb_seq2(b, gb_byte_range(b, '1', '9'), gb_star(b, gb_byte_range(b, '0', '9'))));
        uint32_t frac = gb_opt(b, gb_seq2(b, gb_str(b, "."), gb_repeat(b, gb_byte_range(b, '0', '9'), 1, frac_digits)));
        return gb_seq3(b, gb_opt(b, gb_str(b, "-")), ip, frac);
    }
    if (!hlo && !hhi) {
        if (integer) return jn_number(c->b, true, NULL, false, NULL, false);
        return any_number(c);
    }
    uint32_t r = jn_number(c->b, integer, hlo ? &lo : NULL, lo_strict, hhi ? &hi : NULL, hi_strict);
    if (r != GB_NIL && c->b->nodes[r].kind == GN_NOTHING) {
        /* name the bounds as the schema spelled them */
        char why[160];
        size_t n = (size_t)snprintf(why, sizeof why, "no %s satisfies", integer ? "integer" : "number");
        static const char *const keys[] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"};
        for (int i = 0, n_named = 0; i < 4 && n < sizeof why; i++) {
            json_t *v = json_object_get(s, keys[i]);
            if (json_is_number(v))
                n += (size_t)snprintf(why + n, sizeof why - n, "%s '%s' %g", n_named++ ? "," : "", keys[i],
                                      json_number_value(v));
        }
        return nothing_because(c, why);
    }
    return r;
}

/* ---- objects ------------------------------------------------------------ */

/* key_not_in recurses once per byte of a property name */
#define JS_MAX_NAME_BYTES 2048



/* One character of a raw property name as our key literals write it (as
 * jansson does): plain UTF-8, a short escape (\n, \", ...), or \u00XX for
 * other controls. Returns the raw bytes consumed; *esc is the short escape
 * letter or 0, *cp the code point. */
static int name_unit(const unsigned char *s, uint32_t *cp, char *esc) {
    int len = *s < 0x80 ? 1 : *s >= 0xF0 ? 4 : *s >= 0xE0 ? 3 : 2;
    uint32_t v = len == 1 ? *s : (uint32_t)(*s & (0x3F >> (len - 1)));
    for (int j = 1; j < len; j++) v = v << 6 | (s[j] & 0x3F);
    *cp = v;
    static const char from[] = "\"\\\b\f\n\r\t", to[] = "\"\\bfnrt";
    *esc = 0;
    for (int i = 0; i < 7; i++)
        if (v == (uint8_t)from[i]) *esc = to[i];
    return len;
}

/* The names' trie from byte off on (names idx, all sharing the first off
 * bytes). leave: the paths that leave it, each ending with the first
 * character that follows no name on that path (another plain character,
 * another short escape, or a \u escape); else the paths that close the
 * string at a prefix that is not a name (the quote included). */
static uint32_t name_trie(jsc *c, const member *m, size_t off, const uint32_t *idx, uint32_t n_idx, bool leave) {
    gb *b = c->b;
    uint32_t *alts = di_malloc_array((size_t)n_idx + 4, sizeof(uint32_t));
    uint32_t *cps = di_malloc_array(2 * (size_t)n_idx + 2, sizeof(uint32_t));
    uint32_t *sub = di_malloc_array((size_t)n_idx + 1, sizeof(uint32_t));
    bool *done = calloc((size_t)n_idx + 1, 1);
    if (!alts || !cps || !sub || !done) {
        free(alts), free(cps), free(sub), free(done);
        return gb_fail(b, DI_ERR_NOMEM, "out of memory"), GB_NIL;
    }
    uint32_t k = 0, n_cp = 0;
    bool ends_here = false;
    char escs[16] = {0};
    size_t n_esc = 0;
    for (uint32_t i = 0; i < n_idx; i++) ends_here |= m[idx[i]].name[off] == 0;
    if (!leave && !ends_here) alts[k++] = gb_str(b, "\"");
    if (off > JS_MAX_NAME_BYTES) gb_fail(b, DI_ERR_RANGE, "property name too long");
    for (uint32_t i = 0; i < n_idx && gb_ok(b); i++) {
        const unsigned char *s = (const unsigned char *)m[idx[i]].name + off;
        if (!*s || done[i]) continue;
        uint32_t cp;
        char esc;
        int len = name_unit(s, &cp, &esc);
        bool plain = cp >= 0x20 && !esc;
        if (!plain && !esc) continue; /* \u00XX: covered by the leaving branch */
        uint32_t ns = 0;
        for (uint32_t q = i; q < n_idx; q++) {
            const unsigned char *t = (const unsigned char *)m[idx[q]].name + off;
            if (!done[q] && strlen((const char *)t) >= (size_t)len && !memcmp(t, s, (size_t)len)) done[q] = 1, sub[ns++] = idx[q];
        }
        uint32_t unit;
        if (plain) {
            cps[2 * n_cp] = cps[2 * n_cp + 1] = cp, n_cp++;
            unit = gb_bytes(b, s, (uint32_t)len);
        } else {
            char e[3] = {'\\', esc, 0};
            escs[n_esc++] = esc;
            unit = gb_str(b, e);
        }
        alts[k++] = gb_seq2(b, unit, name_trie(c, m, off + (size_t)len, sub, ns, leave));
    }
    if (leave && gb_ok(b)) {
        gb_bits sh = {{0}};
        for (const char *p = "\"\\/bfnrt"; *p; p++)
            if (!memchr(escs, *p, n_esc)) gb_bits_set(&sh, (uint8_t)*p);
        gb_bits hex = {{0}};
        for (const char *h = "0123456789abcdefABCDEF"; *h; h++) gb_bits_set(&hex, (uint8_t)*h);
        uint32_t hx = gb_class(b, &hex);
        uint32_t u[5] = {gb_str(b, "\\u"), hx, hx, hx, hx};
        uint32_t other3[3] = {gb_seq2(b, gb_str(b, "\\"), gb_class(b, &sh)), gb_seq(b, u, 5), GB_NIL};
        /* other plain characters: the complement of the children, controls,
         * '"' and '\\' */
        uint32_t excl[6];
        uint32_t ne = 0;
        excl[ne++] = 0, excl[ne++] = 0x1F, excl[ne++] = '"', excl[ne++] = '"', excl[ne++] = '\\', excl[ne++] = '\\';
        uint32_t *allx = di_malloc_array(2 * (size_t)n_cp + 6, sizeof(uint32_t));
        if (!allx) { free(alts), free(cps), free(sub), free(done); return gb_fail(b, DI_ERR_NOMEM, "out of memory"), GB_NIL; }
        memcpy(allx, excl, ne * sizeof(uint32_t));
        memcpy(allx + ne, cps, 2 * (size_t)n_cp * sizeof(uint32_t));
        other3[2] = gb_uclass(b, allx, (uint32_t)(ne / 2) + n_cp, true);
        free(allx);
        alts[k++] = gb_alt(b, other3, 3);
    }
    uint32_t r = gb_alt(b, alts, k);
    free(alts), free(cps), free(sub), free(done);
    return r;
}

/* JSON string (after the opening quote) whose text is not one of the
 * names: a path of the names' trie that leaves it, then any characters and
 * the quote; or a prefix of a name that is no name, then the quote. Exact
 * for names whose characters are plain or short escapes; a name with
 * another control character (written \u00XX) may also be produced through
 * the leaving branch.
 *
 * The "any characters" sit outside the trie's nested rules on purpose:
 * after leaving, the parser's state (its items and their origins) is the
 * same whichever trie path was taken, so a mask's local classification
 * meets one string-interior state instead of one per path (each walking
 * its own part of the vocabulary). */
static uint32_t key_not_in(jsc *c, const member *m, const uint32_t *idx, uint32_t n_idx) {
    gb *b = c->b;
    uint32_t rest = gb_seq2(b, gb_star(b, string_char(c)), gb_str(b, "\""));
    uint32_t r = gb_rule_of(b, NULL, gb_alt2(b, gb_seq2(b, name_trie(c, m, 0, idx, n_idx, true), rest),
                                              name_trie(c, m, 0, idx, n_idx, false)));
    /* Every string content is a viable prefix: it follows the trie as far
     * as it can and then leaves it (the leaving branch takes every
     * character that continues no name), and only a quote ends the rule */
    gb_rule_mark_open_string(b, r);
    return gb_ref(b, r);
}

static uint32_t object_node(jsc *c, json_t *s) {
    gb *b = c->b;
    json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    json_t *ap = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props)) return jfail(c, DI_ERR_FORMAT, "%s", "'properties' is not an object");
    if (req && !json_is_array(req)) return jfail(c, DI_ERR_FORMAT, "%s", "'required' is not an array");
    size_t n_props = json_object_size(props), n_req = json_array_size(req);
    member *m = di_calloc(n_props + n_req + 1, sizeof *m);
    if (!m) return gb_fail(b, DI_ERR_NOMEM, "out of memory"), GB_NIL;
    uint32_t n = 0;
    const char *k;
    json_t *v;
    json_object_foreach(props, k, v) m[n++] = (member){k, v, false};
    size_t i;
    json_array_foreach(req, i, v) {
        const char *name = json_string_value(v);
        if (!name) { free(m); return jfail(c, DI_ERR_FORMAT, "%s", "'required' has a non-string"); }
        bool found = false;
        for (uint32_t j = 0; j < n; j++)
            if (!strcmp(m[j].name, name)) m[j].required = found = true;
        if (!found) m[n++] = (member){name, ap ? ap : json_true(), true};
    }
    bool extra = !json_is_false(ap);
    /* patternProperties: keys matching the pattern take its schema. The
     * keys that match no pattern would need the pattern's complement, which
     * a grammar cannot build from a regex cheaply, so with patternProperties
     * only pattern keys are generated as extra members (a subset of the
     * valid objects). Exact support needs: one pattern, no listed name
     * matching it (it would have to satisfy both schemas), and no separate
     * additionalProperties schema. */
    json_t *pp = json_object_get(s, "patternProperties");
    const char *pp_re = NULL;
    json_t *pp_schema = NULL;
    if (pp && json_object_size(pp)) {
        if (!json_is_object(pp)) { free(m); return jfail(c, DI_ERR_FORMAT, "%s", "'patternProperties' is not an object"); }
        const char *pk;
        json_t *pv;
        json_object_foreach(pp, pk, pv) if (!pp_re) pp_re = pk, pp_schema = pv;
        const char *why = NULL;
        if (json_object_size(pp) > 1) why = "'patternProperties' with more than one pattern";
        else if (ap && !json_is_boolean(ap)) why = "'patternProperties' together with an additionalProperties schema";
        else {
            int ec;
            PCRE2_SIZE eo;
            pcre2_code *re = pcre2_compile((PCRE2_SPTR)pp_re, PCRE2_ZERO_TERMINATED, PCRE2_UTF, &ec, &eo, NULL);
            if (!re) why = "'patternProperties' pattern not understood";
            for (uint32_t j = 0; re && j < n && !why; j++) {
                pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
                if (md && pcre2_match(re, (PCRE2_SPTR)m[j].name, strlen(m[j].name), 0, 0, md, NULL) >= 0)
                    why = "'patternProperties' pattern matching a listed property";
                pcre2_match_data_free(md);
            }
            pcre2_code_free(re);
        }
        if (why && !c->opt.lenient) { free(m); return jfail(c, DI_ERR_UNSUPPORTED, "%s", why); }
        if (why) note_dropped(c, why);
        extra = true; /* pattern keys are allowed even under additionalProperties: false */
    }
    /* minProperties / maxProperties: the cases a member chain expresses
     * exactly (bounds implied by the required / listed members, or "at
     * least one member") */
    uint32_t n_required = 0, min_props = 0, max_props = GB_INF;
    for (uint32_t j = 0; j < n; j++) n_required += m[j].required;
    if (!get_count(c, s, "minProperties", &min_props) || !get_count(c, s, "maxProperties", &max_props)) {
        free(m);
        return GB_NIL;
    }
    bool need_one = min_props > n_required && min_props == 1;
    if (min_props > n_required && min_props > 1 && !c->opt.lenient) {
        free(m);
        return jfail(c, DI_ERR_UNSUPPORTED, "%s", "'minProperties' above the required count (other than 1)");
    }
    if (min_props > n_required && min_props > 1) note_dropped(c, "'minProperties'");
    if (max_props != GB_INF && (extra || n > max_props) && !c->opt.lenient) {
        if (max_props < n_required) {
            free(m);
            return counts_cross(c, "required count", n_required, "maxProperties", max_props);
        }
        free(m);
        return jfail(c, DI_ERR_UNSUPPORTED, "%s", "'maxProperties' below the possible member count");
    }
    if (max_props != GB_INF && (extra || n > max_props) && max_props >= n_required) note_dropped(c, "'maxProperties'");
    /* member nodes: "name" ws ":" ws value */
    uint32_t *mem = di_malloc_array(n + 1, sizeof(uint32_t));
    if (!mem) { free(m); return gb_fail(b, DI_ERR_NOMEM, "out of memory"), GB_NIL; }
    uint32_t colon = gb_seq3(b, ws(c), gb_str(b, ":"), ws(c));
    for (uint32_t j = 0; j < n && gb_ok(b); j++) {
        json_t *name = json_string(m[j].name);
        char *key = json_dumps(name, JSON_ENCODE_ANY | JSON_COMPACT);
        json_decref(name);
        if (!key) { gb_fail(b, DI_ERR_NOMEM, "out of memory"); break; }
        size_t pn = path_push(c, m[j].name);
        uint32_t val = schema_node(c, m[j].schema);
        path_pop(c, pn);
        mem[j] = gb_seq3(b, gb_str(b, key), colon, val);
        free(key);
    }
    uint32_t extra_member = GB_NIL;
    if (extra && gb_ok(b)) {
        uint32_t *idx = di_malloc_array(n + 1, sizeof(uint32_t));
        if (!idx) { free(m); free(mem); return gb_fail(b, DI_ERR_NOMEM, "out of memory"), GB_NIL; }
        for (uint32_t j = 0; j < n; j++) idx[j] = j;
        uint32_t key, val;
        if (pp_re) {
            size_t pn = path_push(c, "patternProperties");
            key = quoted(c, rx_translate(b, pp_re, strlen(pp_re), true, true, c->opt.max_depth));
            val = schema_node(c, pp_schema);
            path_pop(c, pn);
        } else {
            key = n ? gb_seq2(b, gb_str(b, "\""), key_not_in(c, m, idx, n)) : any_string(c);
            size_t pn = path_push(c, "additionalProperties");
            val = ap ? schema_node(c, ap) : any_value(c);
            path_pop(c, pn);
        }
        free(idx);
        extra_member = gb_rule_of(b, NULL, gb_seq3(b, key, colon, val));
    }
    /* A[j]: members j.. when none was written yet; B[j]: after one was
     * (each preceded by a comma). Built from the end. */
    uint32_t sep = gb_seq3(b, ws(c), gb_str(b, ","), ws(c));
    uint32_t a_next, b_next;
    if (extra_member != GB_NIL) {
        uint32_t more = gb_star(b, gb_seq2(b, sep, gb_ref(b, extra_member)));
        b_next = gb_rule_of(b, NULL, more);
        uint32_t some = gb_seq2(b, gb_ref(b, extra_member), gb_ref(b, b_next));
        a_next = gb_rule_of(b, NULL, need_one ? some : gb_opt(b, some));
    } else {
        b_next = gb_rule_of(b, NULL, gb_empty(b));
        a_next = gb_rule_of(b, NULL, need_one ? gb_nothing(b) : gb_empty(b));
    }
    for (uint32_t j = n; j-- > 0 && gb_ok(b);) {
        uint32_t with_b = gb_seq3(b, sep, mem[j], gb_ref(b, b_next));
        uint32_t with_a = gb_seq2(b, mem[j], gb_ref(b, b_next));
        uint32_t nb = gb_rule_of(b, NULL, m[j].required ? with_b : gb_alt2(b, with_b, gb_ref(b, b_next)));
        uint32_t na = gb_rule_of(b, NULL, m[j].required ? with_a : gb_alt2(b, with_a, gb_ref(b, a_next)));
        a_next = na, b_next = nb;
    }
    free(m);
    free(mem);
    uint32_t parts[5] = {gb_str(b, "{"), ws(c), gb_ref(b, a_next), ws(c), gb_str(b, "}")};
    return gb_seq(b, parts, 5);
}

/* ---- arrays ------------------------------------------------------------- */

static json_t *with_not(jsc *c, json_t *rest, json_t *v);

/* Most counted states of a contains automaton (maxContains / minContains). */
#define JS_MAX_CONTAINS 64

/* contains C with minContains lo / maxContains hi over items I: the
 * elements are I; between lo and hi of them (at least lo, when hi is
 * unbounded) match C. Rules S[k] "after an element, k counted": more
 * elements that are not counted (I and not C; just I once enough are
 * counted and there is no maximum), then the end when k >= lo, or a
 * counted element (I and C) and S[k+1]. */
static uint32_t contains_node(jsc *c, json_t *s, json_t *items) {
    gb *b = c->b;
    uint32_t lo = 1, hi = GB_INF;
    if (!get_count(c, s, "minContains", &lo) || !get_count(c, s, "maxContains", &hi)) return GB_NIL;
    if (json_object_get(s, "prefixItems") || json_is_array(items) || json_object_get(s, "minItems") ||
        json_object_get(s, "maxItems"))
        return jfail(c, DI_ERR_UNSUPPORTED, "%s", "'contains' together with prefixItems / minItems / maxItems");
    if (hi != GB_INF && lo > hi) return counts_cross(c, "minContains", lo, "maxContains", hi);
    uint32_t top = hi == GB_INF ? lo : hi; /* counts past top are all alike */
    if (top > JS_MAX_CONTAINS) return jfail(c, DI_ERR_UNSUPPORTED, "%s", "'minContains' / 'maxContains' above 64");
    json_t *item = items ? items : json_true();
    json_t *hit = keep(c, json_object()), *base = keep(c, json_object());
    if (!merge_into(c, hit, item) || !merge_into(c, hit, json_object_get(s, "contains")) || !merge_into(c, base, item))
        return GB_NIL;
    size_t pn = path_push(c, "contains");
    uint32_t r_hit = gb_rule_of(b, NULL, schema_node(c, hit));
    uint32_t r_any = gb_rule_of(b, NULL, schema_node(c, base)), r_miss = r_any;
    if (hi != GB_INF) { /* uncounted elements must fail C */
        json_t *miss = with_not(c, base, json_object_get(s, "contains"));
        r_miss = miss ? gb_rule_of(b, NULL, schema_node(c, miss)) : GB_NIL;
    }
    path_pop(c, pn);
    if (!gb_ok(b)) return GB_NIL;
    uint32_t sep = gb_seq3(b, ws(c), gb_str(b, ","), ws(c));
    uint32_t *st = di_malloc_array((size_t)top + 2, sizeof(uint32_t));
    if (!st) return gb_fail(b, DI_ERR_NOMEM, "out of memory"), GB_NIL;
    for (uint32_t k = 0; k <= top; k++) st[k] = gb_rule_new(b, NULL, 0);
    for (uint32_t k = 0; k <= top && gb_ok(b); k++) {
        uint32_t plain = k == top && hi == GB_INF ? r_any : r_miss;
        uint32_t alts[2], n = 0;
        if (k >= lo) alts[n++] = gb_empty(b);
        if (k < top) alts[n++] = gb_seq3(b, sep, gb_ref(b, r_hit), gb_ref(b, st[k + 1]));
        uint32_t loop = gb_star(b, gb_seq2(b, sep, gb_ref(b, plain)));
        gb_rule_define(b, st[k], gb_seq2(b, loop, gb_alt(b, alts, n)));
    }
    /* the first element, without a separator */
    uint32_t first[3], nf = 0;
    if (lo == 0) first[nf++] = gb_empty(b);
    first[nf++] = gb_seq2(b, gb_ref(b, top == 0 && hi == GB_INF ? r_any : r_miss), gb_ref(b, st[0]));
    if (top > 0) first[nf++] = gb_seq2(b, gb_ref(b, r_hit), gb_ref(b, st[1]));
    uint32_t body = gb_alt(b, first, nf);
    free(st);
    uint32_t parts[5] = {gb_str(b, "["), ws(c), body, ws(c), gb_str(b, "]")};
    return gb_seq(b, parts, 5);
}

static uint32_t array_node(jsc *c, json_t *s) {
    gb *b = c->b;
    uint32_t lo = 0, hi = GB_INF;
    if (json_object_get(s, "contains")) return contains_node(c, s, json_object_get(s, "items"));
    if (!get_count(c, s, "minItems", &lo) || !get_count(c, s, "maxItems", &hi)) return GB_NIL;
    if (hi != GB_INF && lo > hi) return counts_cross(c, "minItems", lo, "maxItems", hi);
    json_t *items = json_object_get(s, "items"), *prefix = json_object_get(s, "prefixItems");
    json_t *rest = items;
    if (json_is_array(items)) prefix = items, rest = json_object_get(s, "additionalItems");
    if (prefix && !json_is_array(prefix)) return jfail(c, DI_ERR_FORMAT, "%s", "'prefixItems' is not an array");
    uint32_t k = (uint32_t)json_array_size(prefix);
    if (k > GB_MAX_REPEAT) return jfail(c, DI_ERR_RANGE, "%s", "too many prefixItems");
    bool rest_ok = !json_is_false(rest);
    uint32_t rest_item = GB_NIL;
    if (rest_ok && (hi == GB_INF || hi > k)) {
        size_t pn = path_push(c, "items");
        rest_item = gb_rule_of(b, NULL, rest ? schema_node(c, rest) : any_value(c));
        path_pop(c, pn);
    }
    uint32_t sep = gb_seq3(b, ws(c), gb_str(b, ","), ws(c));
    /* tail(i): elements from position i on, i elements already written */
    uint32_t tail;
    {
        uint32_t min_rest = lo > k ? lo - k : 0;
        uint32_t max_rest = hi == GB_INF ? GB_INF : (hi > k ? hi - k : 0);
        if (rest_item == GB_NIL || max_rest == 0) {
            tail = min_rest ? gb_nothing(b) : gb_empty(b);
        } else if (k > 0) {
            tail = gb_repeat(b, gb_seq2(b, sep, gb_ref(b, rest_item)), min_rest, max_rest);
        } else {
            uint32_t more = gb_repeat(b, gb_seq2(b, sep, gb_ref(b, rest_item)), min_rest ? min_rest - 1 : 0,
                                      max_rest == GB_INF ? GB_INF : max_rest - 1);
            uint32_t some = gb_seq2(b, gb_ref(b, rest_item), more);
            tail = min_rest ? some : gb_opt(b, some);
        }
    }
    uint32_t limit = hi == GB_INF ? k : (hi < k ? hi : k);
    for (uint32_t i = limit; i-- > 0 && gb_ok(b);) {
        size_t pn = path_push(c, "prefixItems");
        uint32_t item = schema_node(c, json_array_get(prefix, i));
        path_pop(c, pn);
        uint32_t step = gb_seq3(b, i ? sep : gb_empty(b), item, tail);
        tail = gb_rule_of(b, NULL, i + 1 > lo ? gb_opt(b, step) : step);
        tail = gb_ref(b, tail);
    }
    uint32_t parts[5] = {gb_str(b, "["), ws(c), tail, ws(c), gb_str(b, "]")};
    return gb_seq(b, parts, 5);
}

/* ---- schema ------------------------------------------------------------- */

static bool has_constraints(json_t *s, const char *except) {
    const char *k;
    json_t *v;
    json_object_foreach(s, k, v) if (strcmp(k, except) && !in_list(ANNOTATIONS, k)) return true;
    return false;
}

/* ---- not, dependencies, if/then/else ------------------------------------ */

/* Most dependencies rewritten as alternatives (2^n branches). */
#define JS_MAX_DEPENDENCIES 6

/* Copy of s (top level, properties and required copied too, so the branch
 * can change them), owned by scratch. */
static json_t *branch_of(jsc *c, json_t *s) {
    json_t *o = keep(c, json_copy(s));
    json_t *p = json_object_get(o, "properties"), *r = json_object_get(o, "required");
    if (json_is_object(p)) json_object_set_new(o, "properties", json_copy(p));
    if (json_is_array(r)) json_object_set_new(o, "required", json_copy(r));
    return o;
}

static void add_required(json_t *o, const char *name) {
    json_t *r = json_object_get(o, "required");
    if (!json_is_array(r)) json_object_set_new(o, "required", r = json_array());
    size_t i;
    json_t *x;
    json_array_foreach(r, i, x) if (json_is_string(x) && !strcmp(json_string_value(x), name)) return;
    json_array_append_new(r, json_string(name));
}

static void set_property(json_t *o, const char *name, json_t *schema) {
    json_t *p = json_object_get(o, "properties");
    if (!json_is_object(p)) json_object_set_new(o, "properties", p = json_object());
    json_t *have = json_object_get(p, name);
    if (!have) json_object_set(p, name, schema);
    else {
        json_t *a = json_array();
        json_array_append(a, have);
        json_array_append(a, schema);
        json_t *all = json_object();
        json_object_set_new(all, "allOf", a);
        json_object_set_new(p, name, all);
    }
}

static json_t *one_of_branches(jsc *c, json_t *branches) {
    size_t n = json_array_size(branches);
    if (n == 0) return keep(c, json_false());
    if (n == 1) return json_array_get(branches, 0);
    json_t *o = keep(c, json_object());
    json_object_set(o, "anyOf", branches);
    return o;
}

/* Bounds whose negation is the opposite bound on the same type:
 * "if a number then <= 5" fails exactly for numbers > 5. delta shifts a
 * count bound (maxLength 3 fails for minLength 4). */
static const struct { const char *kw, *flip; int types, delta; } FLIPS[] = {
    {"maximum", "exclusiveMinimum", T_NUMBER | T_INTEGER, 0},
    {"exclusiveMaximum", "minimum", T_NUMBER | T_INTEGER, 0},
    {"minimum", "exclusiveMaximum", T_NUMBER | T_INTEGER, 0},
    {"exclusiveMinimum", "maximum", T_NUMBER | T_INTEGER, 0},
    {"maxLength", "minLength", T_STRING, 1},
    {"minLength", "maxLength", T_STRING, -1},
    {"maxItems", "minItems", T_ARRAY, 1},
    {"minItems", "maxItems", T_ARRAY, -1},
    {"maxProperties", "minProperties", T_OBJECT, 1},
    {"minProperties", "maxProperties", T_OBJECT, -1},
};

/* Most branches a negation may expand to. */
#define JS_MAX_NOT_BRANCHES 64

/* Branch of rest restricted to the types in mask; NULL when none remain. */
static json_t *typed_branch(jsc *c, json_t *rest, int mask) {
    json_t *rt = json_object_get(rest, "type");
    int have = rt ? type_mask_of(rt) : T_ALL | T_INTEGER;
    if (have < 0 || !(have & mask)) return NULL;
    json_t *o = branch_of(c, rest);
    if ((have & mask) != have) json_object_set_new(o, "type", type_json(have & mask));
    return o;
}

static bool push_branch(jsc *c, json_t *out, json_t *b) {
    if (json_array_size(out) >= JS_MAX_NOT_BRANCHES)
        return jfail(c, DI_ERR_UNSUPPORTED, "%s", "'not' expands to too many alternatives"), false;
    json_array_append(out, b);
    return true;
}

/* A negation we cannot build: an error naming it, or when lenient, rest
 * itself (the `not` is dropped, as lenient mode drops keywords). */
static bool not_unsupported(jsc *c, json_t *rest, json_t *out, const char *fmt, const char *arg) {
    if (c->opt.lenient) {
        char what[200];
        snprintf(what, sizeof what, fmt, arg);
        note_dropped(c, what);
        return push_branch(c, out, rest);
    }
    jfail(c, DI_ERR_UNSUPPORTED, fmt, arg);
    return false;
}

static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

/* rest and a value not in the list (enum / const): per type, the values
 * of that type other than the listed ones. Strings: the exclusion
 * automaton; numbers: the open intervals between the listed ones;
 * booleans: the other one; null: none; types not listed: all. */
static bool enum_not_branches(jsc *c, json_t *rest, const char *k, json_t *x, json_t *out) {
    json_t *list = json_is_array(x) ? x : NULL, *one = NULL;
    if (!list) list = one = keep(c, json_array()), json_array_append(one, x);
    size_t n = json_array_size(list), i;
    json_t *e;
    json_t *strs = keep(c, json_array());
    double *nums = di_malloc_array(n + 1, sizeof(double));
    if (!nums) return gb_fail(c->b, DI_ERR_NOMEM, "out of memory"), false;
    size_t n_num = 0;
    int touched = 0;
    bool has_true = false, has_false = false;
    json_array_foreach(list, i, e) {
        if (json_is_string(e)) {
            const char *sv = json_string_value(e);
            for (; *sv; sv++) /* key_not_in is exact for plain text and short escapes */
                if ((unsigned char)*sv < 0x20 && !strchr("\b\f\n\r\t", *sv)) {
                    free(nums);
                    return not_unsupported(c, rest, out, "'not' of '%s' with a string holding control characters", k);
                }
            json_array_append(strs, e), touched |= T_STRING;
        } else if (json_is_number(e)) {
            nums[n_num++] = json_number_value(e), touched |= T_NUMBER | T_INTEGER;
        } else if (json_is_boolean(e)) {
            has_true |= json_is_true(e), has_false |= json_is_false(e), touched |= T_BOOL;
        } else if (json_is_null(e)) {
            touched |= T_NULL;
        } else {
            free(nums);
            return not_unsupported(c, rest, out, "'not' of '%s' with an object or array value", k);
        }
    }
    bool ok = true;
    json_t *o = typed_branch(c, rest, (T_ALL | T_INTEGER) & ~touched);
    if (o) ok = push_branch(c, out, o);
    if (ok && (touched & T_STRING) && (o = typed_branch(c, rest, T_STRING))) {
        json_t *na = json_object_get(o, NOT_IN);
        json_t *u = na ? json_deep_copy(na) : json_array();
        json_array_extend(u, strs);
        json_object_set_new(o, NOT_IN, u);
        ok = push_branch(c, out, o);
    }
    if (ok && has_true != has_false && (o = typed_branch(c, rest, T_BOOL))) {
        json_t *only = keep(c, json_object());
        json_object_set_new(only, "const", json_boolean(!has_true));
        ok = merge_into(c, o, only) && push_branch(c, out, o);
    }
    qsort(nums, n_num, sizeof *nums, cmp_double);
    for (size_t q = 0; ok && n_num && q <= n_num; q++) { /* (-inf, v0), (v0, v1), ..., (vn, inf) */
        if (q > 0 && q < n_num && nums[q] == nums[q - 1]) continue;
        if (!(o = typed_branch(c, rest, T_NUMBER | T_INTEGER))) break;
        json_t *bd = keep(c, json_object());
        if (q > 0) json_object_set_new(bd, "exclusiveMinimum", json_real(nums[q - 1]));
        if (q < n_num) json_object_set_new(bd, "exclusiveMaximum", json_real(nums[q]));
        ok = merge_into(c, o, bd) && push_branch(c, out, o);
    }
    free(nums);
    return ok;
}

/* Appends to out the alternatives whose union is rest and not v: not (A
 * and B and ...) is (not A) or (not B) or ..., one or more branches per
 * constraint of v, for constraints whose negation is a schema again:
 * type, required, properties, enum / const of strings, bounds, anyOf /
 * allOf / not of those, and the trivial schemas. false with the error set
 * for other forms. */
static bool not_branches(jsc *c, json_t *rest, json_t *v, json_t *out, uint32_t depth) {
    v = deref(c, v, 0);
    if (!v) return false;
    if (depth > c->opt.max_depth) return jfail(c, DI_ERR_RANGE, "%s", "'not' nested too deeply"), false;
    if (json_is_false(v)) return push_branch(c, out, rest);
    if (json_is_true(v)) return true;
    if (!json_is_object(v)) return jfail(c, DI_ERR_FORMAT, "%s", "'not' is not a schema"), false;
    const char *k;
    json_t *x;
    json_object_foreach(v, k, x) {
        if (in_list(ANNOTATIONS, k)) continue;
        int flip = -1;
        for (int f = 0; f < (int)(sizeof FLIPS / sizeof FLIPS[0]); f++)
            if (!strcmp(k, FLIPS[f].kw)) flip = f;
        if (flip >= 0) {
            if (!json_is_number(x)) return not_unsupported(c, rest, out, "'not' with a non-numeric '%s'", k);
            json_t *o = typed_branch(c, rest, FLIPS[flip].types);
            if (!o) continue;
            json_t *bound = keep(c, json_object());
            if (FLIPS[flip].delta) {
                double n = json_number_value(x) + FLIPS[flip].delta;
                if (n < 0) continue; /* minLength 0 always holds */
                json_object_set_new(bound, FLIPS[flip].flip, json_integer((json_int_t)n));
            } else {
                json_object_set(bound, FLIPS[flip].flip, x);
            }
            if (!merge_into(c, o, bound) || !push_branch(c, out, o)) return false;
        } else if (!strcmp(k, "type")) {
            int m = type_mask_of(x);
            if (m < 0) return jfail(c, DI_ERR_FORMAT, "%s", "bad 'type'"), false;
            if ((m & T_INTEGER) && !(m & T_NUMBER))
                return not_unsupported(c, rest, out, "%s", "'not' of type integer (non-integral numbers)");
            json_t *o = typed_branch(c, rest, (T_ALL | T_INTEGER) & ~m & ~((m & T_NUMBER) ? T_INTEGER : 0));
            if (o && !push_branch(c, out, o)) return false;
        } else if (!strcmp(k, "required")) {
            size_t i;
            json_t *name;
            json_array_foreach(x, i, name) {
                if (!json_is_string(name)) return jfail(c, DI_ERR_FORMAT, "%s", "'required' has a non-string"), false;
                json_t *o = typed_branch(c, rest, T_OBJECT);
                if (!o) break;
                set_property(o, json_string_value(name), json_false());
                if (!push_branch(c, out, o)) return false;
            }
        } else if (!strcmp(k, "properties") && json_is_object(x)) {
            const char *pk;
            json_t *pv;
            json_object_foreach(x, pk, pv) {
                json_t *o = typed_branch(c, rest, T_OBJECT);
                if (!o) break;
                if (!json_object_get(json_object_get(rest, "properties"), pk)) {
                    /* an extra member: it takes additionalProperties too */
                    json_t *ap = json_object_get(rest, "additionalProperties");
                    if (json_object_get(rest, "patternProperties"))
                        return not_unsupported(c, rest, out, "%s", "'not' of properties next to patternProperties");
                    if (json_is_false(ap)) continue;
                    if (ap && !json_is_true(ap)) set_property(o, pk, ap);
                }
                json_t *neg = keep(c, json_object());
                json_object_set(neg, "not", pv);
                add_required(o, pk);
                set_property(o, pk, neg);
                if (!push_branch(c, out, o)) return false;
            }
        } else if (!strcmp(k, "enum") || !strcmp(k, "const")) {
            if (!enum_not_branches(c, rest, k, x, out)) return false;
        } else if (!strcmp(k, "not")) { /* not not x: x */
            json_t *o = branch_of(c, rest);
            if (!merge_into(c, o, x) || !push_branch(c, out, o)) return false;
        } else if (!strcmp(k, "allOf") && json_is_array(x)) { /* some member fails */
            size_t i;
            json_t *e;
            json_array_foreach(x, i, e) if (!not_branches(c, rest, e, out, depth + 1)) return false;
        } else if ((!strcmp(k, "anyOf") || !strcmp(k, "oneOf")) && json_is_array(x)) {
            /* every member fails: negate them one after the other, each
             * over the branches so far (oneOf: as anyOf, see the top) */
            json_t *cur = keep(c, json_array());
            json_array_append(cur, rest);
            size_t i;
            json_t *e;
            json_array_foreach(x, i, e) {
                json_t *next = keep(c, json_array());
                size_t q;
                json_t *b;
                json_array_foreach(cur, q, b) if (!not_branches(c, b, e, next, depth + 1)) return false;
                cur = next;
            }
            size_t q;
            json_t *b;
            json_array_foreach(cur, q, b) if (!push_branch(c, out, b)) return false;
        } else {
            return not_unsupported(c, rest, out, "'not' with '%s' is not supported", k);
        }
    }
    return true;
}

static json_t *with_not(jsc *c, json_t *rest, json_t *v) {
    json_t *br = keep(c, json_array());
    return not_branches(c, rest, v, br, 0) ? one_of_branches(c, br) : NULL;
}

/* dependentRequired / dependentSchemas / dependencies (draft 7: both): for
 * each dependency, the property is absent, or present with what it needs;
 * the schema becomes the alternatives over all choices (disjoint, so the
 * grammar stays unambiguous). */
static json_t *with_dependencies(jsc *c, json_t *s) {
    const char *kws[] = {"dependencies", "dependentRequired", "dependentSchemas"};
    json_t *rest = branch_of(c, s);
    const char *names[JS_MAX_DEPENDENCIES];
    json_t *needs[JS_MAX_DEPENDENCIES];
    uint32_t n = 0;
    json_t *props = json_object_get(s, "properties"), *ap = json_object_get(s, "additionalProperties");
    bool closed = json_is_false(ap) && !json_object_get(s, "patternProperties");
    for (int i = 0; i < 3; i++) {
        json_t *d = json_object_get(s, kws[i]);
        json_object_del(rest, kws[i]);
        if (!d) continue;
        if (!json_is_object(d)) return jfail(c, DI_ERR_FORMAT, "'%s' is not an object", kws[i]), NULL;
        const char *k;
        json_t *x;
        json_object_foreach(d, k, x) {
            if (closed && !json_object_get(props, k)) continue; /* can never be present */
            if (json_is_array(x) && !json_array_size(x)) continue;
            if (json_is_true(x) || (json_is_object(x) && !json_object_size(x))) continue;
            if (n == JS_MAX_DEPENDENCIES) {
                if (c->opt.lenient) { /* dropped */
                    note_dropped(c, "dependencies beyond the sixth");
                    continue;
                }
                return jfail(c, DI_ERR_UNSUPPORTED, "'%s': more than 6 dependencies", kws[i]), NULL;
            }
            names[n] = k, needs[n++] = x;
        }
    }
    json_t *branches = keep(c, json_array());
    for (uint32_t mask = 0; mask < (1u << n); mask++) {
        json_t *o = branch_of(c, rest);
        bool ok = true;
        for (uint32_t i = 0; i < n && ok; i++) {
            if (!(mask >> i & 1)) { /* absent */
                set_property(o, names[i], json_false());
                continue;
            }
            /* unlisted names are written in required order: the
             * dependents, then the property that needs them */
            if (json_is_array(needs[i])) {
                size_t q;
                json_t *r;
                json_array_foreach(needs[i], q, r) {
                    if (!json_is_string(r)) return jfail(c, DI_ERR_FORMAT, "%s", "dependency list has a non-string"), NULL;
                    if (closed && !json_object_get(props, json_string_value(r))) ok = false;
                    add_required(o, json_string_value(r));
                }
            } else if (!merge_into(c, o, needs[i])) {
                return NULL;
            }
            add_required(o, names[i]);
        }
        if (ok) json_array_append(branches, o);
    }
    return one_of_branches(c, branches);
}

/* The logic keywords rewritten into ones the grammar builds: returns s
 * (nothing to do), another schema, or NULL (error set). */
static json_t *rewrite_logic(jsc *c, json_t *s) {
    if (json_object_get(s, "dependencies") || json_object_get(s, "dependentRequired") ||
        json_object_get(s, "dependentSchemas"))
        return with_dependencies(c, s);
    json_t *cond = json_object_get(s, "if");
    if (cond || json_object_get(s, "then") || json_object_get(s, "else")) {
        json_t *then = json_object_get(s, "then"), *els = json_object_get(s, "else");
        json_t *rest = branch_of(c, s);
        json_object_del(rest, "if"), json_object_del(rest, "then"), json_object_del(rest, "else");
        if (!cond || (!then && !els)) return rest; /* no constraint */
        /* (if and then) or (not if and else): disjoint alternatives */
        json_t *yes = branch_of(c, rest);
        size_t pn = path_push(c, "if");
        bool ok = merge_into(c, yes, cond) && (!then || merge_into(c, yes, then));
        json_t *no = ok ? with_not(c, rest, cond) : NULL;
        path_pop(c, pn);
        if (!no) return NULL;
        if (els) {
            json_t *m = branch_of(c, no);
            if (!merge_into(c, m, els)) return NULL;
            no = m;
        }
        json_t *br = keep(c, json_array());
        json_array_append(br, yes);
        json_array_append(br, no);
        return one_of_branches(c, br);
    }
    json_t *v = json_object_get(s, "not");
    if (v) {
        json_t *rest = branch_of(c, s);
        json_object_del(rest, "not");
        size_t pn = path_push(c, "not");
        json_t *r = with_not(c, rest, v);
        path_pop(c, pn);
        return r;
    }
    return s;
}

static uint32_t schema_body(jsc *c, json_t *s) {
    gb *b = c->b;
    if (json_is_true(s)) return any_value(c);
    if (json_is_false(s)) return nothing_because(c, "the schema false");
    if (!json_is_object(s)) return jfail(c, DI_ERR_FORMAT, "%s", "schema is not an object or boolean");
    const char *k;
    json_t *v;
    json_object_foreach(s, k, v) {
        if (in_list(UNSUPPORTED, k)) {
            /* keywords whose given value is no constraint */
            if (!strcmp(k, "uniqueItems") && json_is_false(v)) continue;
            if ((!strcmp(k, "then") || !strcmp(k, "else")) && !json_object_get(s, "if")) continue;
            if (!c->opt.lenient) return jfail(c, DI_ERR_UNSUPPORTED, "keyword '%s' is not supported", k);
            char what[200];
            snprintf(what, sizeof what, "'%.100s'", k);
            note_dropped(c, what);
        }
    }
    json_t *ref = json_object_get(s, "$ref");
    if (ref) {
        if (!json_is_string(ref)) return jfail(c, DI_ERR_FORMAT, "%s", "$ref is not a string");
        if (c->draft7 || !has_constraints(s, "$ref")) {
            json_t *t = resolve_ref(c, json_string_value(ref));
            if (!t) return GB_NIL;
            uint32_t r = ref_rule(c, t);
            return r == GB_NIL ? GB_NIL : gb_ref(b, r);
        }
        json_t *m = deref(c, s, 0);
        return m ? schema_body(c, m) : GB_NIL;
    }
    json_t *all = json_object_get(s, "allOf");
    if (all) {
        if (!json_is_array(all)) return jfail(c, DI_ERR_FORMAT, "%s", "'allOf' is not an array");
        json_t *m = keep(c, json_object());
        json_t *rest = keep(c, json_copy(s));
        json_object_del(rest, "allOf");
        size_t pn = path_push(c, "allOf");
        bool ok = merge_into(c, m, rest);
        size_t i;
        json_t *x;
        json_array_foreach(all, i, x) ok = ok && merge_into(c, m, x);
        path_pop(c, pn);
        if (!ok) return GB_NIL;
        /* anyOf/oneOf may now sit in m next to other keywords: handled below */
        return schema_body(c, m);
    }
    const char *anykw = json_object_get(s, "anyOf") ? "anyOf" : json_object_get(s, "oneOf") ? "oneOf" : NULL;
    if (anykw) {
        json_t *list = json_object_get(s, anykw);
        if (!json_is_array(list) || !json_array_size(list))
            return jfail(c, DI_ERR_FORMAT, "'%s' is not a non-empty array", anykw);
        if (json_object_get(s, "anyOf") && json_object_get(s, "oneOf"))
            return jfail(c, DI_ERR_UNSUPPORTED, "%s", "anyOf together with oneOf");
        json_t *rest = keep(c, json_copy(s));
        json_object_del(rest, anykw);
        bool plain = !has_constraints(rest, "");
        size_t n = json_array_size(list);
        uint32_t *alts = di_malloc_array(n, sizeof(uint32_t));
        if (!alts) return gb_fail(b, DI_ERR_NOMEM, "out of memory"), GB_NIL;
        size_t pn = path_push(c, anykw);
        for (size_t i = 0; i < n && gb_ok(b); i++) {
            json_t *branch = json_array_get(list, i);
            if (!plain) {
                /* distribute the sibling keywords into each branch */
                json_t *m = keep(c, json_object());
                if (!merge_into(c, m, rest) || !merge_into(c, m, branch)) break;
                branch = m;
            }
            alts[i] = schema_node(c, branch);
        }
        path_pop(c, pn);
        uint32_t r = gb_ok(b) ? gb_alt(b, alts, (uint32_t)n) : GB_NIL;
        free(alts);
        return r;
    }
    json_t *rw = rewrite_logic(c, s);
    if (!rw) return GB_NIL;
    if (rw != s) return schema_body(c, rw);
    int types = T_ALL | T_INTEGER;
    json_t *t = json_object_get(s, "type");
    if (t) {
        types = type_mask_of(t);
        if (types < 0) return jfail(c, DI_ERR_FORMAT, "%s", "bad 'type'");
    }
    json_t *en = json_object_get(s, "enum"), *cst = json_object_get(s, "const");
    if (en || cst) {
        if (en && !json_is_array(en)) return jfail(c, DI_ERR_FORMAT, "%s", "'enum' is not an array");
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
            int tb = json_type_bit(x);
            if ((tb & types) == 0 || ((types & T_INTEGER) && !(types & T_NUMBER) && (tb & T_NUMBER) && !(tb & T_INTEGER)))
                continue;
            alts[k2++] = literal(c, x);
        }
        uint32_t r = gb_alt(b, alts, k2);
        free(alts);
        return r;
    }
    uint32_t alts[7], n = 0;
    if (types & T_NULL) alts[n++] = gb_str(b, "null");
    if (types & T_BOOL) alts[n++] = gb_alt2(b, gb_str(b, "true"), gb_str(b, "false"));
    if (types & T_OBJECT) alts[n++] = object_node(c, s);
    if (types & T_ARRAY) alts[n++] = array_node(c, s);
    if (types & T_NUMBER) alts[n++] = number_node(c, s, false);
    else if (types & T_INTEGER) alts[n++] = number_node(c, s, true);
    if (types & T_STRING) alts[n++] = string_node(c, s);
    return gb_ok(b) ? gb_alt(b, alts, n) : GB_NIL;
}

static uint32_t schema_node(jsc *c, json_t *s) {
    if (!gb_ok(c->b)) return GB_NIL;
    if (++c->depth > c->opt.max_depth) return jfail(c, DI_ERR_RANGE, "%s", "schema nested too deeply");
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
             .r_ws = GB_NIL, .r_char = GB_NIL};
    c.opt = opt ? *opt : di_grammar_options_default();
    if (!c.opt.max_depth) c.opt.max_depth = DI_GRAMMAR_DEFAULT_MAX_DEPTH;
    c.draft7 = c.opt.draft == DI_GRAMMAR_DRAFT_7;
    const char *sv = json_string_value(json_object_get(schema, "$schema"));
    if (sv) c.draft7 = strstr(sv, "draft-07") || strstr(sv, "draft-06") || strstr(sv, "draft-04");
    c.scratch = json_array();
    uint32_t root;
    if (object_mode) {
        any_value(&c);
        root = gb_rule_of(&b, "root", gb_ref(&b, gb_rule_find(&b, "object", 6)));
    } else {
        uint32_t r = ref_rule(&c, schema);
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
    uint32_t r = ref_rule(c, s);
    return r == GB_NIL ? GB_NIL : gb_ref(c->b, r);
}

uint32_t json_sub_any_value(jsc *c) { return c && gb_ok(c->b) ? any_value(c) : GB_NIL; }

void json_sub_note_dropped(jsc *c, const char *what, const char *path) {
    snprintf(c->path, sizeof c->path, "%s", path ? path : "");
    note_dropped(c, what);
}

const char *json_sub_dropped(const jsc *c) { return c && c->dropped[0] ? c->dropped : NULL; }

void json_sub_free(jsc *c) {
    if (!c) return;
    json_decref(c->scratch);
    free(c->ref_keys);
    free(c->ref_rules);
    free(c);
}
