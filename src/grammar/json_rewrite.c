/* Schemas rewritten into schemas the type builders take (json_ctx.h has
 * the layers): allOf and sibling keywords merged into one schema, chains
 * of pure $refs followed, and not / if-then-else / dependencies rewritten
 * into alternatives (rewrite_logic). Everything here is JSON in, JSON
 * out; temporaries belong to the context's scratch (js_keep). */
#include "grammar/json_rewrite.h"

#include "base/alloc.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Keywords that constrain nothing (merging and "has constraints" skip them). */
static const char *const ANNOTATIONS[] = {
    "$schema", "$id", "id", "$comment", "title", "description", "default", "examples", "readOnly",
    "writeOnly", "deprecated", "contentMediaType", "contentEncoding", "contentSchema", "$anchor",
    "$vocabulary", "$defs", "definitions", NULL};

/* ---- allOf / sibling merging ------------------------------------------- */

json_t *js_keep(jsc *c, json_t *v) { /* scratch owns v */
    if (v) json_array_append_new(c->scratch, v);
    return v;
}

static json_t *all_of2(jsc *c, json_t *a, json_t *x) {
    json_t *o = js_keep(c, json_object());
    json_t *l = json_array();
    json_array_append(l, a);
    json_array_append(l, x);
    json_object_set_new(o, "allOf", l);
    return o;
}

int js_type_mask_of(json_t *t) {
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

/* Merges schema src into the object dst (both constrain the same value).
 * false (error set) when the keywords do not combine into one schema. */
bool js_merge_into(jsc *c, json_t *dst, json_t *src) {
    src = js_deref(c, src, 0);
    if (!src) return false;
    if (json_is_true(src)) return true;
    if (json_is_false(src)) {
        json_object_set_new(dst, "type", json_array()); /* nothing matches */
        return true;
    }
    if (!json_is_object(src)) return js_fail(c, DI_ERR_FORMAT, "%s", "schema is not an object"), false;
    json_t *nested = json_object_get(src, "allOf");
    size_t i;
    json_t *v;
    json_array_foreach(nested, i, v) if (!js_merge_into(c, dst, v)) return false;
    /* additionalProperties refers to the properties of its own schema; the
     * merged schema would change its meaning unless the key sets agree. */
    json_t *dap = json_object_get(dst, "additionalProperties"), *sap = json_object_get(src, "additionalProperties");
    json_t *dpr = json_object_get(dst, "properties"), *spr = json_object_get(src, "properties");
    json_t *dpp = json_object_get(dst, "patternProperties"), *spp = json_object_get(src, "patternProperties");
    if ((dap || sap || dpp || spp) && !json_equal(dpp, spp) && (dpp || spp) && (dap || sap || (dpr && spr)))
        return js_fail(c, DI_ERR_UNSUPPORTED, "%s", "allOf with patternProperties and additionalProperties in different schemas"), false;
    bool joint = false; /* properties and additionalProperties merged together below */
    if (((dap && !json_is_true(dap)) && spr && !json_equal(dpr, spr)) ||
        ((sap && !json_is_true(sap)) && dpr && !json_equal(dpr, spr))) {
        if (dpp || spp)
            return js_fail(c, DI_ERR_UNSUPPORTED, "%s", "allOf with additionalProperties over different properties"), false;
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
        return js_fail(c, DI_ERR_UNSUPPORTED, "%s", "allOf with items over different prefixItems"), false;
    const char *k;
    json_object_foreach(src, k, v) {
        if (!strcmp(k, "allOf") || js_in_list(ANNOTATIONS, k)) continue;
        if (joint && (!strcmp(k, "properties") || !strcmp(k, "additionalProperties"))) continue;
        /* additionalItems reads only its own schema's tuple `items`, never
         * one an applicator brings in: without that tuple it does nothing */
        if (!strcmp(k, "additionalItems") && !json_is_array(sit)) continue;
        json_t *d = json_object_get(dst, k);
        if (!d) { json_object_set(dst, k, v); continue; }
        if (json_equal(d, v)) continue;
        if (!strcmp(k, "type")) {
            int a = js_type_mask_of(d), bm = js_type_mask_of(v);
            if (a < 0 || bm < 0) return js_fail(c, DI_ERR_FORMAT, "%s", "bad 'type'"), false;
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
                return js_fail(c, DI_ERR_UNSUPPORTED, "allOf combining tuple '%s'", k), false;
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
            return js_fail(c, DI_ERR_UNSUPPORTED, "allOf: cannot combine two different '%s'", k), false;
        }
    }
    return true;
}

/* Follows a chain of pure references ({"$ref": ...} plus annotations). */
json_t *js_deref(jsc *c, json_t *s, uint32_t hops) {
    if (!json_is_object(s)) return s;
    json_t *r = json_object_get(s, "$ref");
    if (!r) return s;
    if (!json_is_string(r)) return js_fail(c, DI_ERR_FORMAT, "%s", "$ref is not a string"), NULL;
    if (hops > 64) return js_fail(c, DI_ERR_RANGE, "%s", "$ref chain too long"), NULL;
    json_t *t = js_resolve_ref(c, json_string_value(r));
    if (!t) return NULL;
    if (json_object_size(s) > 1 && !c->draft7) {
        /* 2020-12: siblings of $ref also apply: merge both */
        json_t *m = js_keep(c, json_object());
        json_t *rest = js_keep(c, json_copy(s));
        json_object_del(rest, "$ref");
        if (!js_merge_into(c, m, t) || !js_merge_into(c, m, rest)) return NULL;
        return m;
    }
    return js_deref(c, t, hops + 1);
}

/* ---- schema ------------------------------------------------------------- */

bool js_has_constraints(json_t *s, const char *except) {
    const char *k;
    json_t *v;
    json_object_foreach(s, k, v) if (strcmp(k, except) && !js_in_list(ANNOTATIONS, k)) return true;
    return false;
}

/* ---- not, dependencies, if/then/else ------------------------------------ */

/* Most dependencies rewritten as alternatives (2^n branches). */
#define JS_MAX_DEPENDENCIES 6

/* Copy of s (top level, properties and required copied too, so the branch
 * can change them), owned by scratch. */
static json_t *branch_of(jsc *c, json_t *s) {
    json_t *o = js_keep(c, json_copy(s));
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
    if (n == 0) return js_keep(c, json_false());
    if (n == 1) return json_array_get(branches, 0);
    json_t *o = js_keep(c, json_object());
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
    int have = rt ? js_type_mask_of(rt) : T_ALL | T_INTEGER;
    if (have < 0 || !(have & mask)) return NULL;
    json_t *o = branch_of(c, rest);
    if ((have & mask) != have) json_object_set_new(o, "type", type_json(have & mask));
    return o;
}

static bool push_branch(jsc *c, json_t *out, json_t *b) {
    if (json_array_size(out) >= JS_MAX_NOT_BRANCHES)
        return js_fail(c, DI_ERR_UNSUPPORTED, "%s", "'not' expands to too many alternatives"), false;
    json_array_append(out, b);
    return true;
}

/* A negation we cannot build: an error naming it, or when lenient, rest
 * itself (the `not` is dropped, as lenient mode drops keywords). */
static bool not_unsupported(jsc *c, json_t *rest, json_t *out, const char *fmt, const char *arg) {
    if (c->opt.lenient) {
        char what[200];
        snprintf(what, sizeof what, fmt, arg);
        js_note_dropped(c, what);
        return push_branch(c, out, rest);
    }
    js_fail(c, DI_ERR_UNSUPPORTED, fmt, arg);
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
    if (!list) list = one = js_keep(c, json_array()), json_array_append(one, x);
    size_t n = json_array_size(list), i;
    json_t *e;
    json_t *strs = js_keep(c, json_array());
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
        json_t *only = js_keep(c, json_object());
        json_object_set_new(only, "const", json_boolean(!has_true));
        ok = js_merge_into(c, o, only) && push_branch(c, out, o);
    }
    qsort(nums, n_num, sizeof *nums, cmp_double);
    for (size_t q = 0; ok && n_num && q <= n_num; q++) { /* (-inf, v0), (v0, v1), ..., (vn, inf) */
        if (q > 0 && q < n_num && nums[q] == nums[q - 1]) continue;
        if (!(o = typed_branch(c, rest, T_NUMBER | T_INTEGER))) break;
        json_t *bd = js_keep(c, json_object());
        if (q > 0) json_object_set_new(bd, "exclusiveMinimum", json_real(nums[q - 1]));
        if (q < n_num) json_object_set_new(bd, "exclusiveMaximum", json_real(nums[q]));
        ok = js_merge_into(c, o, bd) && push_branch(c, out, o);
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
    v = js_deref(c, v, 0);
    if (!v) return false;
    if (depth > c->opt.max_depth) return js_fail(c, DI_ERR_RANGE, "%s", "'not' nested too deeply"), false;
    if (json_is_false(v)) return push_branch(c, out, rest);
    if (json_is_true(v)) return true;
    if (!json_is_object(v)) return js_fail(c, DI_ERR_FORMAT, "%s", "'not' is not a schema"), false;
    const char *k;
    json_t *x;
    json_object_foreach(v, k, x) {
        if (js_in_list(ANNOTATIONS, k)) continue;
        int flip = -1;
        for (int f = 0; f < (int)(sizeof FLIPS / sizeof FLIPS[0]); f++)
            if (!strcmp(k, FLIPS[f].kw)) flip = f;
        if (flip >= 0) {
            if (!json_is_number(x)) return not_unsupported(c, rest, out, "'not' with a non-numeric '%s'", k);
            json_t *o = typed_branch(c, rest, FLIPS[flip].types);
            if (!o) continue;
            json_t *bound = js_keep(c, json_object());
            if (FLIPS[flip].delta) {
                double n = json_number_value(x) + FLIPS[flip].delta;
                if (n < 0) continue; /* minLength 0 always holds */
                json_object_set_new(bound, FLIPS[flip].flip, json_integer((json_int_t)n));
            } else {
                json_object_set(bound, FLIPS[flip].flip, x);
            }
            if (!js_merge_into(c, o, bound) || !push_branch(c, out, o)) return false;
        } else if (!strcmp(k, "type")) {
            int m = js_type_mask_of(x);
            if (m < 0) return js_fail(c, DI_ERR_FORMAT, "%s", "bad 'type'"), false;
            if ((m & T_INTEGER) && !(m & T_NUMBER))
                return not_unsupported(c, rest, out, "%s", "'not' of type integer (non-integral numbers)");
            json_t *o = typed_branch(c, rest, (T_ALL | T_INTEGER) & ~m & ~((m & T_NUMBER) ? T_INTEGER : 0));
            if (o && !push_branch(c, out, o)) return false;
        } else if (!strcmp(k, "required")) {
            size_t i;
            json_t *name;
            json_array_foreach(x, i, name) {
                if (!json_is_string(name)) return js_fail(c, DI_ERR_FORMAT, "%s", "'required' has a non-string"), false;
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
                json_t *neg = js_keep(c, json_object());
                json_object_set(neg, "not", pv);
                add_required(o, pk);
                set_property(o, pk, neg);
                if (!push_branch(c, out, o)) return false;
            }
        } else if (!strcmp(k, "enum") || !strcmp(k, "const")) {
            if (!enum_not_branches(c, rest, k, x, out)) return false;
        } else if (!strcmp(k, "not")) { /* not not x: x */
            json_t *o = branch_of(c, rest);
            if (!js_merge_into(c, o, x) || !push_branch(c, out, o)) return false;
        } else if (!strcmp(k, "allOf") && json_is_array(x)) { /* some member fails */
            size_t i;
            json_t *e;
            json_array_foreach(x, i, e) if (!not_branches(c, rest, e, out, depth + 1)) return false;
        } else if ((!strcmp(k, "anyOf") || !strcmp(k, "oneOf")) && json_is_array(x)) {
            /* every member fails: negate them one after the other, each
             * over the branches so far (oneOf: as anyOf, see the top) */
            json_t *cur = js_keep(c, json_array());
            json_array_append(cur, rest);
            size_t i;
            json_t *e;
            json_array_foreach(x, i, e) {
                json_t *next = js_keep(c, json_array());
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

json_t *js_with_not(jsc *c, json_t *rest, json_t *v) {
    json_t *br = js_keep(c, json_array());
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
        if (!json_is_object(d)) return js_fail(c, DI_ERR_FORMAT, "'%s' is not an object", kws[i]), NULL;
        const char *k;
        json_t *x;
        json_object_foreach(d, k, x) {
            if (closed && !json_object_get(props, k)) continue; /* can never be present */
            if (json_is_array(x) && !json_array_size(x)) continue;
            if (json_is_true(x) || (json_is_object(x) && !json_object_size(x))) continue;
            if (n == JS_MAX_DEPENDENCIES) {
                if (c->opt.lenient) { /* dropped */
                    js_note_dropped(c, "dependencies beyond the sixth");
                    continue;
                }
                return js_fail(c, DI_ERR_UNSUPPORTED, "'%s': more than 6 dependencies", kws[i]), NULL;
            }
            names[n] = k, needs[n++] = x;
        }
    }
    json_t *branches = js_keep(c, json_array());
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
                    if (!json_is_string(r)) return js_fail(c, DI_ERR_FORMAT, "%s", "dependency list has a non-string"), NULL;
                    if (closed && !json_object_get(props, json_string_value(r))) ok = false;
                    add_required(o, json_string_value(r));
                }
            } else if (!js_merge_into(c, o, needs[i])) {
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
json_t *js_rewrite_logic(jsc *c, json_t *s) {
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
        size_t pn = js_path_push(c, "if");
        bool ok = js_merge_into(c, yes, cond) && (!then || js_merge_into(c, yes, then));
        json_t *no = ok ? js_with_not(c, rest, cond) : NULL;
        js_path_pop(c, pn);
        if (!no) return NULL;
        if (els) {
            json_t *m = branch_of(c, no);
            if (!js_merge_into(c, m, els)) return NULL;
            no = m;
        }
        json_t *br = js_keep(c, json_array());
        json_array_append(br, yes);
        json_array_append(br, no);
        return one_of_branches(c, br);
    }
    json_t *v = json_object_get(s, "not");
    if (v) {
        json_t *rest = branch_of(c, s);
        json_object_del(rest, "not");
        size_t pn = js_path_push(c, "not");
        json_t *r = js_with_not(c, rest, v);
        js_path_pop(c, pn);
        return r;
    }
    return s;
}
