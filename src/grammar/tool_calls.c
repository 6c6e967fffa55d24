/* Tool-call grammars: what a model must write when a request requires a
 * tool call (tool_choice "required" or a named function). DeepSeek V4 /
 * V4.1 write calls in DSML, where "｜DSML｜" is a special token and the rest
 * is text; deepseek-recipe's rendering of an assistant's calls
 * (src/text/dsml_render.c, the golden corpus) is the syntax:
 *
 *   [the prompt ends with "\n\n<｜DSML｜ calls>\n"; the grammar starts here]
 *   call+ "</｜DSML｜ calls>"                 (one call: parallel off)
 *   call  ::= "<｜DSML｜ invoke name=\"" NAME "\">\n" params "</｜DSML｜ invoke>\n"
 *   params (V4.1) ::= (param "\n")+ | "\n"    (V4) ::= (param "\n")*
 *   param ::= "<｜DSML｜ parameter name=\"" KEY "\" string=\"true\">" TEXT "</｜DSML｜ parameter>"
 *           | "<｜DSML｜ parameter name=\"" KEY "\" string=\"false\">" JSON "</｜DSML｜ parameter>"
 *   (V4 spells the words tool_calls / invoke / parameter without the space)
 *
 * The arguments are the tool's parameters schema, one parameter per
 * property, in schema order (as object members are in json_schema.c: the
 * grammar stays linear and generation canonical), required ones present.
 * A string value is raw text with string="true", as the recipe writes
 * strings (see raw_alts: enum / const members, pattern, minLength /
 * maxLength enforced; a format is dropped and reported); any other value
 * is JSON with string="false" (the JSON Schema front end, whitespace as
 * the options say), which the recipe's parser takes as written. A schema with no properties and additionalProperties
 * not false takes parameters of any name (no '"' or '>', which the parser
 * could not read back).
 *
 * The special token is DI_GRAMMAR_SPECIAL_BYTE + its text (grammar.h), so
 * only the token itself matches it, never the same characters as text.
 * Known limit: TEXT may contain the characters "</｜DSML｜ parameter>"
 * written as plain text, which the recipe's parser (reading text) would
 * take for the closing tag. */
#include "grammar/json_schema.h"

#include "grammar/regex.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DSML_TEXT "\xef\xbd\x9c" "DSML" "\xef\xbd\x9c" /* ｜DSML｜ */
#define MAX_TOOLS 4096u       /* as many as the server admits (DI_DSML_MAX_TOOLS) */
#define MAX_PARAMS 1024u      /* properties of one tool's parameters */
#define MAX_NAME_BYTES 256u   /* a tool or parameter name */

typedef struct tcc {
    gb *b;
    jsc *js;
    bool v41;
    bool lenient;
    uint32_t r_text; /* any text (code points), GB_NIL until first use */
} tcc;

static uint32_t lit(tcc *c, const char *s) { return gb_str(c->b, s); }

/* "<" or "</" + the DSML token + the version's word + after. */
static uint32_t tag(tcc *c, bool close, int word, const char *after) {
    static const char *const WORDS[2][3] = {{"tool_calls", "invoke", "parameter"}, {" calls", " invoke", " parameter"}};
    static const uint8_t SPECIAL[] = {DI_GRAMMAR_SPECIAL_BYTE};
    uint32_t k[4] = {lit(c, close ? "</" : "<"),
                     gb_seq2(c->b, gb_bytes(c->b, SPECIAL, 1), lit(c, DSML_TEXT)),
                     lit(c, WORDS[c->v41][word]), lit(c, after)};
    return gb_seq(c->b, k, 4);
}

static uint32_t fail(tcc *c, di_status code, const char *fmt, const char *arg) {
    gb_fail(c->b, code, fmt, arg);
    return GB_NIL;
}

static uint32_t any_char(tcc *c) {
    const uint32_t all[2] = {0, 0x10FFFF};
    return gb_uclass(c->b, all, 1, false);
}

static uint32_t any_text(tcc *c) {
    if (c->r_text == GB_NIL) c->r_text = gb_rule_of(c->b, NULL, gb_star(c->b, any_char(c)));
    return gb_ref(c->b, c->r_text);
}

/* A name written between quotes that the recipe's parser reads back: it
 * stops at the first '"' and the tag at the first '>'. */
static bool name_ok(const char *s) {
    size_t n = strlen(s);
    return n > 0 && n <= MAX_NAME_BYTES && !strchr(s, '"') && !strchr(s, '>');
}

/* Does s (a property schema) admit strings only: type "string" without
 * combinators, or an enum / const whose members are all strings? Then the
 * value is raw text alone (the recipe never writes a string as JSON). */
static bool plain_string(json_t *s) {
    if (!json_is_object(s)) return false;
    static const char *const COMBINATORS[] = {"anyOf", "oneOf", "allOf", "not", "$ref", "if"};
    for (size_t i = 0; i < sizeof COMBINATORS / sizeof COMBINATORS[0]; i++)
        if (json_object_get(s, COMBINATORS[i])) return false;
    json_t *en = json_object_get(s, "enum"), *cn = json_object_get(s, "const");
    if (cn) return json_is_string(cn);
    if (en) {
        size_t i;
        json_t *e;
        if (!json_is_array(en) || !json_array_size(en)) return false;
        json_array_foreach(en, i, e) if (!json_is_string(e)) return false;
        return true;
    }
    json_t *t = json_object_get(s, "type");
    return json_is_string(t) && !strcmp(json_string_value(t), "string");
}

static uint32_t raw_string(tcc *c, json_t *s, const char *path);

#define MAX_RAW_DEPTH 8 /* anyOf nesting followed for raw strings */

/* The raw texts (string="true") of the strings s admits, *has false when
 * it admits none this grammar can write raw: true / no type, a type that
 * includes "string", the string members of an enum / const, and the union
 * over anyOf / oneOf branches. Strings under allOf, $ref, not or if are
 * written as JSON (string="false"), which the parser reads the same. */
static uint32_t raw_alts(tcc *c, json_t *s, const char *path, int depth, bool *has) {
    *has = false;
    if (json_is_true(s)) {
        *has = true;
        return any_text(c);
    }
    if (!json_is_object(s) || depth > MAX_RAW_DEPTH) return GB_NIL;
    json_t *t = json_object_get(s, "type"), *en = json_object_get(s, "enum"), *cn = json_object_get(s, "const");
    json_t *any = json_object_get(s, "anyOf");
    if (!any) any = json_object_get(s, "oneOf");
    static const char *const OPAQUE[] = {"allOf", "not", "$ref", "if"};
    for (size_t i = 0; i < sizeof OPAQUE / sizeof OPAQUE[0]; i++)
        if (json_object_get(s, OPAQUE[i])) return GB_NIL;
    if (any) {
        if (t || en || cn || !json_is_array(any)) return GB_NIL;
        size_t n = json_array_size(any), i, k = 0;
        uint32_t *alts = calloc(n ? n : 1, sizeof *alts);
        if (!alts) return fail(c, DI_ERR_NOMEM, "%s", "out of memory");
        json_t *br;
        json_array_foreach(any, i, br) {
            bool h;
            uint32_t r = raw_alts(c, br, path, depth + 1, &h);
            if (h) alts[k++] = r;
        }
        uint32_t r = k ? gb_alt(c->b, alts, (uint32_t)k) : GB_NIL;
        free(alts);
        *has = k > 0;
        return r;
    }
    if (cn) {
        *has = json_is_string(cn);
        return *has ? raw_string(c, s, path) : GB_NIL;
    }
    if (en) {
        size_t i;
        json_t *e;
        json_array_foreach(en, i, e) if (json_is_string(e)) *has = true;
        return *has ? raw_string(c, s, path) : GB_NIL;
    }
    if (t) {
        size_t i;
        json_t *e;
        if (json_is_string(t)) *has = !strcmp(json_string_value(t), "string");
        json_array_foreach(t, i, e) if (json_is_string(e) && !strcmp(json_string_value(e), "string")) *has = true;
        if (!*has) return GB_NIL;
    }
    *has = true;
    return raw_string(c, s, path);
}

/* The raw text of the strings of s (an enum / const has a string member). */
static uint32_t raw_string(tcc *c, json_t *s, const char *path) {
    gb *b = c->b;
    json_t *en = json_object_get(s, "enum"), *cn = json_object_get(s, "const");
    if (cn) return gb_bytes(b, json_string_value(cn), (uint32_t)json_string_length(cn));
    if (en) { /* the string members (raw_alts saw that there is one) */
        size_t n = json_array_size(en), i, k = 0;
        uint32_t *alts = calloc(n, sizeof *alts);
        if (!alts) return fail(c, DI_ERR_NOMEM, "%s", "out of memory");
        json_t *e;
        json_array_foreach(en, i, e) if (json_is_string(e))
            alts[k++] = gb_bytes(b, json_string_value(e), (uint32_t)json_string_length(e));
        uint32_t r = gb_alt(b, alts, (uint32_t)k);
        free(alts);
        return r;
    }
    json_t *lo_v = json_object_get(s, "minLength"), *hi_v = json_object_get(s, "maxLength");
    json_t *pat = json_object_get(s, "pattern");
    if (json_object_get(s, "format")) {
        if (!c->lenient) return fail(c, DI_ERR_UNSUPPORTED, "tool parameter at #%s: 'format' on a raw string is not enforced", path);
        json_sub_note_dropped(c->js, "'format'", path);
    }
    if (pat) {
        if (!json_is_string(pat)) return fail(c, DI_ERR_FORMAT, "tool parameter at #%s: 'pattern' is not a string", path);
        if (lo_v || hi_v) {
            if (!c->lenient)
                return fail(c, DI_ERR_UNSUPPORTED, "tool parameter at #%s: 'pattern' with a length bound on a raw string", path);
            json_sub_note_dropped(c->js, "'minLength'/'maxLength' next to 'pattern'", path);
        }
        return rx_translate(b, json_string_value(pat), json_string_length(pat), true, false, DI_GRAMMAR_DEFAULT_MAX_DEPTH);
    }
    if (lo_v || hi_v) {
        json_int_t lo = lo_v ? json_integer_value(lo_v) : 0, hi = hi_v ? json_integer_value(hi_v) : -1;
        if ((lo_v && !json_is_integer(lo_v)) || (hi_v && !json_is_integer(hi_v)) || lo < 0 || lo > GB_MAX_REPEAT ||
            hi > GB_MAX_REPEAT || (hi_v && hi < lo))
            return fail(c, DI_ERR_RANGE, "tool parameter at #%s: bad minLength / maxLength", path);
        return gb_repeat(b, any_char(c), (uint32_t)lo, hi_v ? (uint32_t)hi : GB_INF);
    }
    return any_text(c);
}

/* One parameter: the tag with its string="..." kind and the value. */
static uint32_t param_node(tcc *c, uint32_t key, bool is_string, uint32_t value) {
    uint32_t k[6] = {tag(c, false, 2, " name=\""), key, lit(c, is_string ? "\" string=\"true\">" : "\" string=\"false\">"),
                     value, tag(c, true, 2, ">"), lit(c, "\n")};
    return gb_seq(c->b, k, 6);
}

/* A property's parameter (followed by its "\n"): raw text for the strings
 * it admits, JSON unless it admits strings only. */
static uint32_t property_param(tcc *c, json_t *root, const char *key, json_t *s, const char *path) {
    gb *b = c->b;
    bool has_raw;
    uint32_t raw = raw_alts(c, s, path, 0, &has_raw);
    if (!gb_ok(b)) return GB_NIL;
    uint32_t alts[2], n = 0;
    if (has_raw) alts[n++] = param_node(c, gb_bytes(b, key, (uint32_t)strlen(key)), true, raw);
    if (!plain_string(s))
        alts[n++] = param_node(c, gb_bytes(b, key, (uint32_t)strlen(key)), false, json_sub_value(c->js, root, s, path));
    return gb_alt(b, alts, n);
}

/* Parameters of any name (no properties listed): raw text or JSON (valid
 * under additionalProperties when it is a schema). */
static uint32_t free_param(tcc *c, json_t *root, json_t *extra, const char *path) {
    gb *b = c->b;
    const uint32_t bad[] = {'"', '"', '>', '>', 0, 0x1f};
    uint32_t key = gb_plus(b, gb_uclass(b, bad, 3, true));
    uint32_t json = json_is_object(extra) ? json_sub_value(c->js, root, extra, path) : json_sub_any_value(c->js);
    bool has_raw;
    uint32_t raw = json_is_object(extra) ? raw_alts(c, extra, path, 0, &has_raw) : (has_raw = true, any_text(c));
    uint32_t alts[2], n = 0;
    if (has_raw) alts[n++] = param_node(c, key, true, raw);
    if (!json_is_object(extra) || !plain_string(extra)) alts[n++] = param_node(c, key, false, json);
    return gb_alt(b, alts, n);
}

/* params of one tool (see the top of the file). */
static uint32_t params_node(tcc *c, json_t *params, const char *tool) {
    gb *b = c->b;
    char path[300];
    json_t *props = json_object_get(params, "properties");
    json_t *extra = json_object_get(params, "additionalProperties");
    uint32_t empty = c->v41 ? lit(c, "\n") : gb_empty(b);
    if (!json_is_object(params)) return empty; /* no parameters */
    if (!props || (json_is_object(props) && json_object_size(props) == 0)) {
        if (json_is_false(extra)) return empty;
        snprintf(path, sizeof path, "/%s/additionalProperties", tool);
        uint32_t p = gb_rule_of(b, NULL, free_param(c, params, extra, path));
        return c->v41 ? gb_alt2(b, gb_plus(b, gb_ref(b, p)), empty) : gb_star(b, gb_ref(b, p));
    }
    if (!json_is_object(props)) return fail(c, DI_ERR_FORMAT, "tool '%s': 'properties' is not an object", tool);
    size_t n = json_object_size(props);
    if (n > MAX_PARAMS) return fail(c, DI_ERR_RANGE, "tool '%s' has too many parameters", tool);
    json_t *req = json_object_get(params, "required");
    /* items[i]: the parameter node; need[i]: required */
    uint32_t *items = calloc(n, sizeof *items);
    bool *need = calloc(n, sizeof *need);
    if (!items || !need) {
        free(items), free(need);
        return fail(c, DI_ERR_NOMEM, "%s", "out of memory");
    }
    size_t m = 0, n_need = 0;
    const char *key;
    json_t *s;
    json_object_foreach(props, key, s) {
        bool required = false;
        size_t i;
        json_t *r;
        json_array_foreach(req, i, r) if (json_is_string(r) && !strcmp(json_string_value(r), key)) required = true;
        snprintf(path, sizeof path, "/%s/properties/%.200s", tool, key);
        if (!name_ok(key)) {
            /* DSML cannot carry this name: the parser would misread it */
            if (required) {
                free(items), free(need);
                return fail(c, DI_ERR_UNSUPPORTED, "tool parameter name '%.200s' holds '\"' or '>' (DSML cannot write it)", key);
            }
            json_sub_note_dropped(c->js, "a parameter whose name holds '\"' or '>'", path);
            continue;
        }
        items[m] = gb_rule_of(b, NULL, property_param(c, params, key, s, path));
        need[m] = required;
        n_need += required;
        m++;
    }
    size_t ri;
    json_t *r;
    json_array_foreach(req, ri, r) /* a required name with no property is unsatisfiable */
        if (json_is_string(r) && !json_object_get(props, json_string_value(r))) {
            free(items), free(need);
            return fail(c, DI_ERR_FORMAT, "required parameter '%.200s' is not among the properties", json_string_value(r));
        }
    /* seq[i] = items i.. (optional ones may be left out) */
    uint32_t tail = gb_empty(b);
    for (size_t i = m; i-- > 0;)
        tail = gb_seq2(b, need[i] ? gb_ref(b, items[i]) : gb_opt(b, gb_ref(b, items[i])), tail);
    uint32_t out = tail;
    if (c->v41 && n_need == 0) {
        /* V4.1 writes a lone "\n" for no parameters: at least one, or "\n".
         * some[i] = at least one of items i.., rest[i] = any of them. */
        uint32_t some = GB_NIL, rest = gb_rule_of(b, NULL, gb_empty(b));
        for (size_t i = m; i-- > 0;) {
            uint32_t with = gb_seq2(b, gb_ref(b, items[i]), gb_ref(b, rest));
            some = gb_rule_of(b, NULL, some == GB_NIL ? with : gb_alt2(b, with, gb_ref(b, some)));
            rest = gb_rule_of(b, NULL, gb_seq2(b, gb_opt(b, gb_ref(b, items[i])), gb_ref(b, rest)));
        }
        out = m ? gb_alt2(b, gb_ref(b, some), empty) : empty;
    }
    free(items), free(need);
    return out;
}

static uint32_t call_node(tcc *c, json_t *tool, size_t index) {
    json_t *name = json_object_get(tool, "name"), *params = json_object_get(tool, "parameters");
    char where[32];
    snprintf(where, sizeof where, "%zu", index);
    if (!json_is_object(tool) || !json_is_string(name))
        return fail(c, DI_ERR_FORMAT, "tool %s: expected {\"name\": string, \"parameters\": schema}", where);
    if (!name_ok(json_string_value(name))) return fail(c, DI_ERR_FORMAT, "tool %s: bad name", where);
    if (params && !json_is_null(params) && !json_is_object(params))
        return fail(c, DI_ERR_FORMAT, "tool '%s': 'parameters' must be an object or null", json_string_value(name));
    uint32_t k[5] = {tag(c, false, 1, " name=\""), gb_bytes(c->b, json_string_value(name), (uint32_t)json_string_length(name)),
                     lit(c, "\">\n"), params_node(c, params, json_string_value(name)), tag(c, true, 1, ">\n")};
    return gb_seq(c->b, k, 5);
}

di_status di_grammar_compile_tool_calls(const char *spec, size_t len, const di_grammar_options *opt, di_grammar **out,
                                        di_error *err) {
    *out = NULL;
    if (!spec) return di_error_set(err, DI_ERR_INVALID_ARG, "tool calls: spec is NULL");
    json_error_t je;
    json_t *root = json_loadb(spec, len, JSON_ALLOW_NUL, &je);
    if (!root) return di_error_set(err, DI_ERR_FORMAT, "tool calls: spec is not JSON: %s", je.text);
    json_t *syntax = json_object_get(root, "syntax"), *tools = json_object_get(root, "tools");
    json_t *parallel = json_object_get(root, "parallel");
    const char *sv = json_string_value(syntax);
    di_status st = DI_OK;
    if (!sv || (strcmp(sv, "dsml_v4") && strcmp(sv, "dsml_v41")))
        st = di_error_set(err, DI_ERR_FORMAT, "tool calls: 'syntax' must be \"dsml_v4\" or \"dsml_v41\"");
    else if (!json_is_array(tools) || !json_array_size(tools) || json_array_size(tools) > MAX_TOOLS)
        st = di_error_set(err, DI_ERR_FORMAT, "tool calls: 'tools' must be an array of 1..%u tools", MAX_TOOLS);
    else if (parallel && !json_is_boolean(parallel))
        st = di_error_set(err, DI_ERR_FORMAT, "tool calls: 'parallel' must be a boolean");
    if (st) {
        json_decref(root);
        return st;
    }
    gb b;
    gb_init(&b, err);
    b.empty_what = "the tool-call grammar";
    di_grammar_options o = opt ? *opt : di_grammar_options_default();
    tcc c = {.b = &b, .v41 = !strcmp(sv, "dsml_v41"), .lenient = o.lenient, .r_text = GB_NIL};
    c.js = json_sub_new(&b, &o);
    size_t n = json_array_size(tools), i;
    uint32_t *alts = calloc(n, sizeof *alts);
    if (!alts) gb_fail(&b, DI_ERR_NOMEM, "out of memory");
    json_t *t;
    json_array_foreach(tools, i, t) if (alts && gb_ok(&b)) alts[i] = call_node(&c, t, i);
    if (alts && gb_ok(&b)) {
        uint32_t call = gb_rule_of(&b, "call", gb_alt(&b, alts, (uint32_t)n));
        uint32_t calls = json_is_false(parallel) ? gb_ref(&b, call) : gb_plus(&b, gb_ref(&b, call));
        uint32_t r = gb_rule_of(&b, "root", gb_seq2(&b, calls, tag(&c, true, 0, ">")));
        st = gb_ok(&b) ? gb_finish(&b, r, out) : b.status;
    } else {
        st = b.status;
    }
    const char *dropped = json_sub_dropped(c.js);
    if (!st && dropped && !((*out)->dropped = strdup(dropped))) {
        di_grammar_free(*out);
        *out = NULL;
        st = di_error_set(err, DI_ERR_NOMEM, "out of memory");
    }
    free(alts);
    json_sub_free(c.js);
    gb_free(&b);
    json_decref(root);
    return st;
}
