/* The node of each JSON type under its keywords (json_ctx.h has the
 * layers): strings (lengths, formats, patterns, excluded names), numbers
 * (bounds, multipleOf), objects (members in schema order, the names'
 * trie for the others) and arrays (items, prefixItems, contains).
 * Subschemas come from js_sub. */
#include "grammar/json_types.h"

#include "grammar/json_number.h"
#include "grammar/json_rewrite.h"
#include "grammar/regex.h"
#include "grammar/regex_dfa.h"

#include "base/alloc.h"

#include <math.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
        return js_fail(c, DI_ERR_FORMAT, "'%s' is not a non-negative integer", k), false;
    if (x > GB_MAX_REPEAT) {
        if (!strncmp(k, "max", 3)) return true; /* effectively unbounded */
        return js_fail(c, DI_ERR_RANGE, "'%s' is too large", k), false;
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
    if (pl >= lo && (hi == GB_INF || (ph != GB_INF && ph <= hi))) return js_quoted(c, json);
    const gb_node *p = &b->nodes[plain], *j = &b->nodes[json];
    if (p->kind == GN_REPEAT && j->kind == GN_REPEAT) {
        uint64_t kl, kh;
        node_len(b, p->a, 0, &kl, &kh);
        if (kl == 1 && kh == 1) {
            uint32_t nlo = p->c > lo ? p->c : lo, nhi = p->d < hi ? p->d : hi;
            return js_quoted(c, gb_repeat(b, j->a, nlo, nhi));
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
    return t == GB_NIL ? GB_NIL : js_quoted(c, t);
}

#define PATTERN_WHY 160 /* bytes of the reason a lenient compile drops a pattern */

/* Lenient compiles only: whether pattern re uses a construct the regex
 * front end does not implement (lookaround, backreferences, anchors in
 * some alternatives only, ...), tried in a scratch builder so that the
 * failure leaves the schema's builder as it was. Then the caller drops the
 * pattern and says why. A malformed regex, a limit or no memory is not
 * such a construct: it fails as before. */
static bool pattern_unsupported(jsc *c, const char *re, char why[PATTERN_WHY]) {
    di_error e = {0};
    gb t;
    gb_init(&t, &e);
    uint32_t n = rx_translate(&t, re, strlen(re), true, false, c->opt.max_depth);
    bool unsupported = n == GB_NIL && t.status == DI_ERR_UNSUPPORTED;
    if (unsupported) snprintf(why, PATTERN_WHY, "%.150s", e.msg); /* the regex error, cut quietly */
    gb_free(&t);
    return unsupported;
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
    if (has_len) return js_fail(c, DI_ERR_UNSUPPORTED, "%s", "'not' of an enum together with minLength/maxLength");
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

uint32_t js_string_node(jsc *c, json_t *s) {
    gb *b = c->b;
    uint32_t lo = 0, hi = GB_INF;
    if (!get_count(c, s, "minLength", &lo) || !get_count(c, s, "maxLength", &hi)) return GB_NIL;
    if (hi != GB_INF && lo > hi) return js_counts_cross(c, "minLength", lo, "maxLength", hi);
    bool has_len = lo > 0 || hi != GB_INF;
    json_t *pat = json_object_get(s, "pattern"), *fmt = json_object_get(s, "format");
    const char *re = pat ? json_string_value(pat) : NULL;
    if (pat && !re) return js_fail(c, DI_ERR_FORMAT, "%s", "'pattern' is not a string");
    char why[PATTERN_WHY];
    if (re && c->opt.lenient && pattern_unsupported(c, re, why)) {
        /* lenient: the pattern goes, the rest of the string's keywords stay */
        char what[260];
        snprintf(what, sizeof what, "'pattern' (%s)", why);
        js_note_dropped(c, what);
        re = NULL;
    }
    /* `format` is an annotation in the specification; we enforce the
     * formats we know (generation wants them) and treat the others as the
     * annotations they are. */
    const char *fre = NULL;
    if (fmt) {
        const char *f = json_string_value(fmt);
        if (!f) return js_fail(c, DI_ERR_FORMAT, "%s", "'format' is not a string");
        for (size_t i = 0; i < sizeof FORMATS / sizeof FORMATS[0]; i++)
            if (!strcmp(f, FORMATS[i].name)) fre = FORMATS[i].re;
        /* an unknown format is one we cannot enforce: strict refuses it,
         * lenient drops it and says so (a pattern next to it still holds) */
        if (!fre && !re) {
            char what[160];
            snprintf(what, sizeof what, "'format' '%.80s'", f);
            if (!c->opt.lenient) return js_fail(c, DI_ERR_UNSUPPORTED, "%s is not enforced", what);
            js_note_dropped(c, what);
        }
    }
    if (re) {
        /* a pattern is an assertion: it wins over the format annotation */
        size_t n = js_path_push(c, "pattern");
        bool fits = true;
        uint32_t body = has_len ? pattern_with_length(c, re, true, lo, hi, &fits) : pattern_node(c, re, true);
        if (body == GB_NIL && gb_ok(b) && !fits) {
            if (!c->opt.lenient)
                js_fail(c, DI_ERR_UNSUPPORTED, "%s", "'pattern' together with minLength/maxLength (automaton too large)");
            else if (js_note_dropped(c, "'minLength'/'maxLength' next to 'pattern'"), (body = rx_translate(b, re, strlen(re), true, true, c->opt.max_depth)) != GB_NIL)
                body = js_quoted(c, body);
        } else if (body == GB_NIL) {
            di_error_prefix(b->err, "json schema at %s: ", c->path);
        }
        js_path_pop(c, n);
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
    if (!has_len) return js_any_string(c);
    return js_quoted(c, gb_repeat(b, js_string_char(c), lo, hi));
}

/* ---- numbers ------------------------------------------------------------ */

static bool bound(jsc *c, json_t *s, const char *k, jn_dec *d, bool *have) {
    json_t *v = json_object_get(s, k);
    *have = false;
    if (!v) return true;
    if (json_is_boolean(v)) return true; /* draft 4 style flags, read by the caller */
    if (!json_is_number(v)) return js_fail(c, DI_ERR_FORMAT, "'%s' is not a number", k), false;
    double x = json_number_value(v);
    if (!jn_parse_bound(x, d)) {
        /* huge bounds: only values we would never write without an
         * exponent lie beyond them, so a huge maximum (or a hugely
         * negative minimum) is no constraint */
        bool is_max = !strncmp(k, "max", 3) || !strcmp(k, "exclusiveMaximum");
        if ((is_max && x > 0) || (!is_max && x < 0)) return true;
        return js_fail(c, DI_ERR_UNSUPPORTED, "'%s' is out of the supported range", k), false;
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

uint32_t js_number_node(jsc *c, json_t *s, bool integer) {
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
        if (!json_is_number(mo) || !(q > 0)) return js_fail(c, DI_ERR_FORMAT, "%s", "'multipleOf' is not a positive number");
        uint32_t k = 0;
        while (k < 9 && fabs(q * pow(10, k) - 1) > 1e-9) k++;
        if (q == 1) integer = true;
        else if (k < 9 && !integer && !hlo && !hhi) frac_digits = k;
        else if (!integer && !c->opt.lenient)
            return js_fail(c, DI_ERR_UNSUPPORTED, "%s", "'multipleOf' other than 1 or 10^-k (without bounds)");
        else if (integer && !(q < 1 && k < 9) && !c->opt.lenient)
            return js_fail(c, DI_ERR_UNSUPPORTED, "%s", "'multipleOf' on integers other than 1");
        else if (!integer || !(q < 1 && k < 9))
            js_note_dropped(c, "'multipleOf'");
    }
    if (frac_digits != UINT32_MAX) {
        gb *b = c->b;
        uint32_t ip = gb_alt2(b, gb_str(b, "0"), gb_seq2(b, gb_byte_range(b, '1', '9'), gb_star(b, gb_byte_range(b, '0', '9'))));
        uint32_t frac = gb_opt(b, gb_seq2(b, gb_str(b, "."), gb_repeat(b, gb_byte_range(b, '0', '9'), 1, frac_digits)));
        return gb_seq3(b, gb_opt(b, gb_str(b, "-")), ip, frac);
    }
    if (!hlo && !hhi) {
        if (integer) return jn_number(c->b, true, NULL, false, NULL, false);
        return js_any_number(c);
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
        return js_nothing_because(c, why);
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
    uint32_t rest = gb_seq2(b, gb_star(b, js_string_char(c)), gb_str(b, "\""));
    uint32_t r = gb_rule_of(b, NULL, gb_alt2(b, gb_seq2(b, name_trie(c, m, 0, idx, n_idx, true), rest),
                                              name_trie(c, m, 0, idx, n_idx, false)));
    /* Every string content is a viable prefix: it follows the trie as far
     * as it can and then leaves it (the leaving branch takes every
     * character that continues no name), and only a quote ends the rule */
    gb_rule_mark_open_string(b, r);
    return gb_ref(b, r);
}

uint32_t js_object_node(jsc *c, json_t *s) {
    gb *b = c->b;
    json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    json_t *ap = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props)) return js_fail(c, DI_ERR_FORMAT, "%s", "'properties' is not an object");
    if (req && !json_is_array(req)) return js_fail(c, DI_ERR_FORMAT, "%s", "'required' is not an array");
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
        if (!name) { free(m); return js_fail(c, DI_ERR_FORMAT, "%s", "'required' has a non-string"); }
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
        if (!json_is_object(pp)) { free(m); return js_fail(c, DI_ERR_FORMAT, "%s", "'patternProperties' is not an object"); }
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
        if (why && !c->opt.lenient) { free(m); return js_fail(c, DI_ERR_UNSUPPORTED, "%s", why); }
        if (why) js_note_dropped(c, why);
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
        return js_fail(c, DI_ERR_UNSUPPORTED, "%s", "'minProperties' above the required count (other than 1)");
    }
    if (min_props > n_required && min_props > 1) js_note_dropped(c, "'minProperties'");
    if (max_props != GB_INF && (extra || n > max_props) && !c->opt.lenient) {
        if (max_props < n_required) {
            free(m);
            return js_counts_cross(c, "required count", n_required, "maxProperties", max_props);
        }
        free(m);
        return js_fail(c, DI_ERR_UNSUPPORTED, "%s", "'maxProperties' below the possible member count");
    }
    if (max_props != GB_INF && (extra || n > max_props) && max_props >= n_required) js_note_dropped(c, "'maxProperties'");
    /* member nodes: "name" ws ":" ws value */
    uint32_t *mem = di_malloc_array(n + 1, sizeof(uint32_t));
    if (!mem) { free(m); return gb_fail(b, DI_ERR_NOMEM, "out of memory"), GB_NIL; }
    uint32_t colon = gb_seq3(b, js_ws(c), gb_str(b, ":"), js_ws(c));
    for (uint32_t j = 0; j < n && gb_ok(b); j++) {
        json_t *name = json_string(m[j].name);
        char *key = json_dumps(name, JSON_ENCODE_ANY | JSON_COMPACT);
        json_decref(name);
        if (!key) { gb_fail(b, DI_ERR_NOMEM, "out of memory"); break; }
        size_t pn = js_path_push(c, m[j].name);
        uint32_t val = js_sub(c, m[j].schema);
        js_path_pop(c, pn);
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
            size_t pn = js_path_push(c, "patternProperties");
            key = js_quoted(c, rx_translate(b, pp_re, strlen(pp_re), true, true, c->opt.max_depth));
            val = js_sub(c, pp_schema);
            js_path_pop(c, pn);
        } else {
            key = n ? gb_seq2(b, gb_str(b, "\""), key_not_in(c, m, idx, n)) : js_any_string(c);
            size_t pn = js_path_push(c, "additionalProperties");
            val = ap ? js_sub(c, ap) : js_any_value(c);
            js_path_pop(c, pn);
        }
        free(idx);
        extra_member = gb_rule_of(b, NULL, gb_seq3(b, key, colon, val));
    }
    /* A[j]: members j.. when none was written yet; B[j]: after one was
     * (each preceded by a comma). Built from the end. */
    uint32_t sep = gb_seq3(b, js_ws(c), gb_str(b, ","), js_ws(c));
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
    uint32_t parts[5] = {gb_str(b, "{"), js_ws(c), gb_ref(b, a_next), js_ws(c), gb_str(b, "}")};
    return gb_seq(b, parts, 5);
}

/* ---- arrays ------------------------------------------------------------- */

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
        return js_fail(c, DI_ERR_UNSUPPORTED, "%s", "'contains' together with prefixItems / minItems / maxItems");
    if (hi != GB_INF && lo > hi) return js_counts_cross(c, "minContains", lo, "maxContains", hi);
    uint32_t top = hi == GB_INF ? lo : hi; /* counts past top are all alike */
    if (top > JS_MAX_CONTAINS) return js_fail(c, DI_ERR_UNSUPPORTED, "%s", "'minContains' / 'maxContains' above 64");
    json_t *item = items ? items : json_true();
    json_t *hit = js_keep(c, json_object()), *base = js_keep(c, json_object());
    if (!js_merge_into(c, hit, item) || !js_merge_into(c, hit, json_object_get(s, "contains")) || !js_merge_into(c, base, item))
        return GB_NIL;
    size_t pn = js_path_push(c, "contains");
    uint32_t r_hit = gb_rule_of(b, NULL, js_sub(c, hit));
    uint32_t r_any = gb_rule_of(b, NULL, js_sub(c, base)), r_miss = r_any;
    if (hi != GB_INF) { /* uncounted elements must fail C */
        json_t *miss = js_with_not(c, base, json_object_get(s, "contains"));
        r_miss = miss ? gb_rule_of(b, NULL, js_sub(c, miss)) : GB_NIL;
    }
    js_path_pop(c, pn);
    if (!gb_ok(b)) return GB_NIL;
    uint32_t sep = gb_seq3(b, js_ws(c), gb_str(b, ","), js_ws(c));
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
    uint32_t parts[5] = {gb_str(b, "["), js_ws(c), body, js_ws(c), gb_str(b, "]")};
    return gb_seq(b, parts, 5);
}

uint32_t js_array_node(jsc *c, json_t *s) {
    gb *b = c->b;
    uint32_t lo = 0, hi = GB_INF;
    if (json_object_get(s, "contains")) return contains_node(c, s, json_object_get(s, "items"));
    if (!get_count(c, s, "minItems", &lo) || !get_count(c, s, "maxItems", &hi)) return GB_NIL;
    if (hi != GB_INF && lo > hi) return js_counts_cross(c, "minItems", lo, "maxItems", hi);
    json_t *items = json_object_get(s, "items"), *prefix = json_object_get(s, "prefixItems");
    json_t *rest = items;
    if (json_is_array(items)) prefix = items, rest = json_object_get(s, "additionalItems");
    if (prefix && !json_is_array(prefix)) return js_fail(c, DI_ERR_FORMAT, "%s", "'prefixItems' is not an array");
    uint32_t k = (uint32_t)json_array_size(prefix);
    if (k > GB_MAX_REPEAT) return js_fail(c, DI_ERR_RANGE, "%s", "too many prefixItems");
    bool rest_ok = !json_is_false(rest);
    uint32_t rest_item = GB_NIL;
    if (rest_ok && (hi == GB_INF || hi > k)) {
        size_t pn = js_path_push(c, "items");
        rest_item = gb_rule_of(b, NULL, rest ? js_sub(c, rest) : js_any_value(c));
        js_path_pop(c, pn);
    }
    uint32_t sep = gb_seq3(b, js_ws(c), gb_str(b, ","), js_ws(c));
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
        size_t pn = js_path_push(c, "prefixItems");
        uint32_t item = js_sub(c, json_array_get(prefix, i));
        js_path_pop(c, pn);
        uint32_t step = gb_seq3(b, i ? sep : gb_empty(b), item, tail);
        tail = gb_rule_of(b, NULL, i + 1 > lo ? gb_opt(b, step) : step);
        tail = gb_ref(b, tail);
    }
    uint32_t parts[5] = {gb_str(b, "["), js_ws(c), tail, js_ws(c), gb_str(b, "]")};
    return gb_seq(b, parts, 5);
}
