/* The JSON Schema compiler's context and shared rules (json_ctx.h). */
#include "grammar/json_ctx.h"

#include "grammar/cpset.h"
#include "grammar/json_number.h"

#include "base/alloc.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool js_in_list(const char *const *list, const char *k) {
    for (; *list; list++)
        if (!strcmp(*list, k)) return true;
    return false;
}

uint32_t js_fail(jsc *c, di_status code, const char *fmt, const char *arg) {
    char msg[300];
    snprintf(msg, sizeof msg, fmt, arg);
    gb_fail(c->b, code, "json schema at %s: %s", c->path[0] ? c->path : "#", msg);
    return GB_NIL;
}

/* Path bookkeeping for error messages; truncates quietly when long. */
size_t js_path_push(jsc *c, const char *seg) {
    size_t n = strlen(c->path);
    snprintf(c->path + n, sizeof c->path - n, "/%s", seg);
    return n;
}
void js_path_pop(jsc *c, size_t n) { c->path[n] = 0; }

/* Lenient mode drops what it cannot enforce: note what and where (once
 * per what and place), so that callers can say so. */
void js_note_dropped(jsc *c, const char *what) {
    char item[480];
    snprintf(item, sizeof item, "%.200s at #%.255s", what, c->path);
    if (strstr(c->dropped, item)) return;
    size_t n = strlen(c->dropped);
    snprintf(c->dropped + n, sizeof c->dropped - n, "%s%s", n ? "; " : "", item);
}

/* gb_nothing with the reason noted (gb_note_empty) for the message an
 * entirely unsatisfiable schema gets: why, at the current path. */
uint32_t js_nothing_because(jsc *c, const char *why) {
    gb_note_empty(c->b, "%s at #%s", why, c->path);
    return gb_nothing(c->b);
}

/* "'lo_key' lo is above 'hi_key' hi" for a pair of count bounds. */
uint32_t js_counts_cross(jsc *c, const char *lo_key, uint32_t lo, const char *hi_key, uint32_t hi) {
    char why[128];
    snprintf(why, sizeof why, "'%s' %u is above '%s' %u", lo_key, lo, hi_key, hi);
    return js_nothing_because(c, why);
}

/* ---- shared rules ------------------------------------------------------ */

uint32_t js_ws(jsc *c) {
    if (c->opt.whitespace == DI_GRAMMAR_WS_COMPACT) return gb_empty(c->b);
    if (c->r_ws == GB_NIL) {
        gb_bits w = {{0}};
        for (const char *p = " \t\n\r"; *p; p++) gb_bits_set(&w, (uint8_t)*p);
        c->r_ws = gb_rule_of(c->b, "ws", gb_repeat(c->b, gb_class(c->b, &w), 0, DI_GRAMMAR_MAX_WS));
    }
    return gb_ref(c->b, c->r_ws);
}

uint32_t js_string_char(jsc *c) {
    if (c->r_char == GB_NIL) c->r_char = gb_rule_of(c->b, "char", json_string_char(c->b));
    return gb_ref(c->b, c->r_char);
}

uint32_t js_quoted(jsc *c, uint32_t body) {
    return gb_seq3(c->b, gb_str(c->b, "\""), body, gb_str(c->b, "\""));
}

uint32_t js_any_string(jsc *c) {
    if (c->r_string == GB_NIL) c->r_string = gb_rule_of(c->b, "string", js_quoted(c, gb_star(c->b, js_string_char(c))));
    return gb_ref(c->b, c->r_string);
}

uint32_t js_any_number(jsc *c) {
    if (c->r_number == GB_NIL) c->r_number = gb_rule_of(c->b, "number", jn_number(c->b, false, NULL, false, NULL, false));
    return gb_ref(c->b, c->r_number);
}

/* "[" ws (item (ws "," ws item)* ws)? "]" and the object analogue. */
static uint32_t list_of(jsc *c, const char *open, const char *close, uint32_t item_rule) {
    gb *b = c->b;
    uint32_t sep = gb_seq3(b, js_ws(c), gb_str(b, ","), js_ws(c));
    uint32_t more = gb_star(b, gb_seq2(b, sep, gb_ref(b, item_rule)));
    uint32_t body = gb_opt(b, gb_seq3(b, gb_ref(b, item_rule), more, js_ws(c)));
    uint32_t k[4] = {gb_str(b, open), js_ws(c), body, gb_str(b, close)};
    return gb_seq(b, k, 4);
}

uint32_t js_any_value(jsc *c) {
    gb *b = c->b;
    if (c->r_value == GB_NIL) {
        c->r_value = gb_rule_new(b, "value", 5);
        uint32_t member = gb_rule_of(b, "member", gb_seq3(b, js_any_string(c), gb_seq3(b, js_ws(c), gb_str(b, ":"), js_ws(c)),
                                                          gb_ref(b, c->r_value)));
        uint32_t object = gb_rule_of(b, "object", list_of(c, "{", "}", member));
        uint32_t array = gb_rule_of(b, "array", list_of(c, "[", "]", c->r_value));
        uint32_t alts[7] = {gb_ref(b, object), gb_ref(b, array), js_any_string(c), js_any_number(c),
                            gb_str(b, "true"), gb_str(b, "false"), gb_str(b, "null")};
        gb_rule_define(b, c->r_value, gb_alt(b, alts, 7));
    }
    return gb_ref(b, c->r_value);
}

/* ---- $ref --------------------------------------------------------------- */

/* Resolves a local reference ("#", "#/a/b~1c/0"); NULL with an error set
 * otherwise. */
json_t *js_resolve_ref(jsc *c, const char *ref) {
    if (ref[0] != '#') return js_fail(c, DI_ERR_UNSUPPORTED, "remote $ref '%s' is not supported", ref), NULL;
    if (ref[1] && ref[1] != '/') return js_fail(c, DI_ERR_UNSUPPORTED, "$ref to an anchor '%s' is not supported", ref), NULL;
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
            if (n + 1 >= sizeof seg) return js_fail(c, DI_ERR_RANGE, "$ref segment too long in '%s'", ref), NULL;
            seg[n++] = ch;
        }
        seg[n] = 0;
        if (json_is_object(cur)) cur = json_object_get(cur, seg);
        else if (json_is_array(cur)) {
            char *end;
            unsigned long i = strtoul(seg, &end, 10);
            cur = *end || !seg[0] ? NULL : json_array_get(cur, i);
        } else cur = NULL;
        if (!cur) return js_fail(c, DI_ERR_NOT_FOUND, "$ref '%s' does not resolve", ref), NULL;
    }
    return cur;
}

uint32_t js_ref_rule(jsc *c, json_t *target) {
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
    gb_rule_define(c->b, rule, js_sub(c, target));
    return rule;
}

/* ---- literals ----------------------------------------------------------- */

uint32_t js_literal(jsc *c, json_t *v) {
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
                parts[k++] = js_literal(c, json_array_get(v, i));
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
                parts[k++] = js_literal(c, x);
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

int js_type_bit(json_t *v) {
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
