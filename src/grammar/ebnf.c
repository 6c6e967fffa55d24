/* EBNF front end: llama.cpp's GBNF dialect.
 *
 *   grammar := (rule | comment | newline)*
 *   rule    := name '::=' alts            (ends at a newline outside parens)
 *   alts    := seq ('|' seq)*             (a newline may follow '|')
 *   seq     := (item)*
 *   item    := primary ('*' | '+' | '?' | '{m}' | '{m,}' | '{m,n}' | '{,n}')*
 *   primary := "literal" | [class] | [^class] | . | name | '(' alts ')'
 *
 * Literals and classes are sequences of Unicode code points (escapes \xHH,
 * \uHHHH, \UHHHHHHHH, \t \n \r \\ \" \[ \] denote code points, as in GBNF),
 * matched as their UTF-8 bytes. Nesting of parentheses is bounded by
 * max_depth so hostile input cannot exhaust the stack. */
#include "grammar/ir.h"

#include "base/alloc.h"

#include <stdlib.h>
#include <string.h>

typedef struct ep {
    gb *b;
    const char *s, *end, *line_start;
    uint32_t line;
    uint32_t depth, max_depth;
} ep;

static di_status perr(ep *p, di_status code, const char *what) {
    return gb_fail(p->b, code, "ebnf line %u col %u: %s", p->line, (unsigned)(p->s - p->line_start) + 1, what);
}

static bool at_end(const ep *p) { return p->s >= p->end; }

static bool is_word(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* Skips blanks and comments; newlines too when newline_ok (inside parens or
 * after '|'), since a bare newline ends a rule. */
static void skip_space(ep *p, bool newline_ok) {
    while (!at_end(p)) {
        char c = *p->s;
        if (c == ' ' || c == '\t') p->s++;
        else if (c == '#') {
            while (!at_end(p) && *p->s != '\n' && *p->s != '\r') p->s++;
        } else if (newline_ok && (c == '\n' || c == '\r')) {
            if (c == '\n') p->line++, p->line_start = p->s + 1;
            p->s++;
        } else break;
    }
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Decodes one (possibly escaped) code point; false on error. */
static bool parse_char(ep *p, uint32_t *cp) {
    if (at_end(p)) return perr(p, DI_ERR_FORMAT, "unexpected end of input"), false;
    unsigned char c = (unsigned char)*p->s;
    if (c == '\\') {
        p->s++;
        if (at_end(p)) return perr(p, DI_ERR_FORMAT, "unfinished escape"), false;
        char e = *p->s++;
        int nhex = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
        if (nhex) {
            uint32_t v = 0;
            for (int i = 0; i < nhex; i++) {
                int h = at_end(p) ? -1 : hexval(*p->s);
                if (h < 0) return perr(p, DI_ERR_FORMAT, "bad hex escape"), false;
                v = v << 4 | (uint32_t)h;
                p->s++;
            }
            if (v > 0x10FFFF) return perr(p, DI_ERR_FORMAT, "code point out of range"), false;
            *cp = v;
            return true;
        }
        switch (e) {
        case 't': *cp = '\t'; return true;
        case 'n': *cp = '\n'; return true;
        case 'r': *cp = '\r'; return true;
        case '\\': case '"': case '[': case ']': case '-': case '^': *cp = (uint32_t)e; return true;
        default: return perr(p, DI_ERR_FORMAT, "unknown escape"), false;
        }
    }
    /* UTF-8 decode (invalid bytes are an error: grammar text is UTF-8). */
    int len = c < 0x80 ? 1 : c >= 0xF0 && c < 0xF8 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c < 0xE0 ? 2 : 0;
    if (!len || p->end - p->s < len) return perr(p, DI_ERR_FORMAT, "invalid UTF-8"), false;
    uint32_t v = len == 1 ? c : c & (0x3F >> (len - 1));
    for (int i = 1; i < len; i++) {
        unsigned char x = (unsigned char)p->s[i];
        if ((x & 0xC0) != 0x80) return perr(p, DI_ERR_FORMAT, "invalid UTF-8"), false;
        v = v << 6 | (x & 0x3F);
    }
    p->s += len;
    *cp = v;
    return true;
}

static uint32_t put_utf8(uint32_t cp, uint8_t *o) {
    if (cp < 0x80) { o[0] = (uint8_t)cp; return 1; }
    if (cp < 0x800) { o[0] = (uint8_t)(0xC0 | cp >> 6); o[1] = (uint8_t)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        o[0] = (uint8_t)(0xE0 | cp >> 12); o[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (uint8_t)(0xF0 | cp >> 18); o[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F)); o[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

typedef struct vec {
    uint32_t *v;
    uint32_t n, cap;
} vec;

static bool vpush(ep *p, vec *x, uint32_t val) {
    if (x->n == x->cap) {
        uint32_t nc = x->cap ? x->cap * 2 : 8;
        uint32_t *t = di_realloc_array(x->v, nc, sizeof(uint32_t));
        if (!t) return perr(p, DI_ERR_NOMEM, "out of memory"), false;
        x->v = t, x->cap = nc;
    }
    x->v[x->n++] = val;
    return true;
}

static uint32_t parse_literal(ep *p) {
    p->s++; /* opening quote */
    uint8_t *buf = NULL;
    uint32_t n = 0, cap = 0;
    while (!at_end(p) && *p->s != '"') {
        if (*p->s == '\n' || *p->s == '\r') break;
        uint32_t cp;
        if (!parse_char(p, &cp)) { free(buf); return GB_NIL; }
        if (n + 4 > cap) {
            cap = cap ? cap * 2 : 32;
            uint8_t *t = realloc(buf, cap);
            if (!t) { free(buf); perr(p, DI_ERR_NOMEM, "out of memory"); return GB_NIL; }
            buf = t;
        }
        n += put_utf8(cp, buf + n);
    }
    if (at_end(p) || *p->s != '"') { free(buf); perr(p, DI_ERR_FORMAT, "unterminated string literal"); return GB_NIL; }
    p->s++;
    uint32_t node = gb_bytes(p->b, buf, n);
    free(buf);
    return node;
}

static uint32_t parse_class(ep *p) {
    p->s++; /* '[' */
    bool neg = false;
    if (!at_end(p) && *p->s == '^') neg = true, p->s++;
    vec pairs = {0};
    while (!at_end(p) && *p->s != ']') {
        uint32_t lo, hi;
        if (!parse_char(p, &lo)) { free(pairs.v); return GB_NIL; }
        hi = lo;
        if (p->end - p->s >= 2 && p->s[0] == '-' && p->s[1] != ']') {
            p->s++;
            if (!parse_char(p, &hi)) { free(pairs.v); return GB_NIL; }
            if (hi < lo) { free(pairs.v); perr(p, DI_ERR_FORMAT, "character range is reversed"); return GB_NIL; }
        }
        if (!vpush(p, &pairs, lo) || !vpush(p, &pairs, hi)) { free(pairs.v); return GB_NIL; }
    }
    if (at_end(p)) { free(pairs.v); perr(p, DI_ERR_FORMAT, "unterminated character class"); return GB_NIL; }
    p->s++;
    uint32_t node = gb_uclass(p->b, pairs.v, pairs.n / 2, neg);
    free(pairs.v);
    return node;
}

static bool parse_uint(ep *p, uint32_t *out) {
    if (at_end(p) || *p->s < '0' || *p->s > '9') return perr(p, DI_ERR_FORMAT, "expected a number"), false;
    uint64_t v = 0;
    while (!at_end(p) && *p->s >= '0' && *p->s <= '9') {
        v = v * 10 + (uint64_t)(*p->s++ - '0');
        if (v > GB_MAX_REPEAT) return perr(p, DI_ERR_RANGE, "repetition count too large"), false;
    }
    *out = (uint32_t)v;
    return true;
}

static uint32_t parse_alts(ep *p);

static uint32_t parse_primary(ep *p) {
    char c = *p->s;
    if (c == '"') return parse_literal(p);
    if (c == '[') return parse_class(p);
    if (c == '.') {
        p->s++;
        return gb_uclass(p->b, NULL, 0, true);
    }
    if (c == '(') {
        if (++p->depth > p->max_depth) return perr(p, DI_ERR_RANGE, "parentheses nested too deeply"), GB_NIL;
        p->s++;
        skip_space(p, true);
        uint32_t node = parse_alts(p);
        if (node == GB_NIL) return GB_NIL;
        skip_space(p, true);
        if (at_end(p) || *p->s != ')') return perr(p, DI_ERR_FORMAT, "expected ')'"), GB_NIL;
        p->s++;
        p->depth--;
        return node;
    }
    if (c == '<' || c == '!') return perr(p, DI_ERR_UNSUPPORTED, "token references (<...>) are not supported"), GB_NIL;
    if (is_word(c)) {
        const char *w = p->s;
        while (!at_end(p) && is_word(*p->s)) p->s++;
        size_t n = (size_t)(p->s - w);
        uint32_t r = gb_rule_find(p->b, w, n);
        if (r == GB_NIL) r = gb_rule_new(p->b, w, n);
        return r == GB_NIL ? GB_NIL : gb_ref(p->b, r);
    }
    return perr(p, DI_ERR_FORMAT, "unexpected character"), GB_NIL;
}

static uint32_t parse_item(ep *p) {
    uint32_t node = parse_primary(p);
    while (node != GB_NIL && !at_end(p)) {
        char c = *p->s;
        if (c == '*') p->s++, node = gb_star(p->b, node);
        else if (c == '+') p->s++, node = gb_plus(p->b, node);
        else if (c == '?') p->s++, node = gb_opt(p->b, node);
        else if (c == '{') {
            p->s++;
            skip_space(p, false);
            uint32_t lo = 0, hi;
            if (!at_end(p) && *p->s != ',' && !parse_uint(p, &lo)) return GB_NIL;
            skip_space(p, false);
            if (!at_end(p) && *p->s == ',') {
                p->s++;
                skip_space(p, false);
                if (!at_end(p) && *p->s == '}') hi = GB_INF;
                else if (!parse_uint(p, &hi)) return GB_NIL;
                skip_space(p, false);
            } else {
                hi = lo;
            }
            if (at_end(p) || *p->s != '}') return perr(p, DI_ERR_FORMAT, "expected '}'"), GB_NIL;
            p->s++;
            if (hi != GB_INF && hi < lo) return perr(p, DI_ERR_FORMAT, "repetition {m,n} with n < m"), GB_NIL;
            node = gb_repeat(p->b, node, lo, hi);
        } else break;
    }
    return node;
}

static bool seq_end(const ep *p) {
    if (at_end(p)) return true;
    char c = *p->s;
    return c == '|' || c == ')' || c == '\n' || c == '\r';
}

static uint32_t parse_seq(ep *p) {
    vec items = {0};
    bool nested = p->depth > 0;
    while (!seq_end(p)) {
        uint32_t it = parse_item(p);
        if (it == GB_NIL || !vpush(p, &items, it)) { free(items.v); return GB_NIL; }
        skip_space(p, nested);
    }
    uint32_t node = gb_seq(p->b, items.v, items.n);
    free(items.v);
    return node;
}

static uint32_t parse_alts(ep *p) {
    vec alts = {0};
    for (;;) {
        uint32_t s = parse_seq(p);
        if (s == GB_NIL || !vpush(p, &alts, s)) { free(alts.v); return GB_NIL; }
        if (at_end(p) || *p->s != '|') break;
        p->s++;
        skip_space(p, true);
    }
    uint32_t node = gb_alt(p->b, alts.v, alts.n);
    free(alts.v);
    return node;
}

static di_status parse_grammar(ep *p) {
    for (;;) {
        skip_space(p, true);
        if (at_end(p)) return DI_OK;
        if (!is_word(*p->s)) return perr(p, DI_ERR_FORMAT, "expected a rule name");
        const char *w = p->s;
        while (!at_end(p) && is_word(*p->s)) p->s++;
        size_t n = (size_t)(p->s - w);
        skip_space(p, false);
        if (p->end - p->s < 3 || memcmp(p->s, "::=", 3)) return perr(p, DI_ERR_FORMAT, "expected '::='");
        p->s += 3;
        skip_space(p, true);
        uint32_t r = gb_rule_find(p->b, w, n);
        if (r == GB_NIL) r = gb_rule_new(p->b, w, n);
        if (r == GB_NIL) return p->b->status;
        if (p->b->rules[r].body != GB_NIL) return perr(p, DI_ERR_FORMAT, "rule defined twice");
        uint32_t body = parse_alts(p);
        if (body == GB_NIL) return p->b->status;
        gb_rule_define(p->b, r, body);
        if (!at_end(p) && *p->s == ')') return perr(p, DI_ERR_FORMAT, "unbalanced ')'");
        if (!at_end(p) && *p->s != '\n' && *p->s != '\r') return perr(p, DI_ERR_FORMAT, "expected end of line");
    }
}

di_status di_grammar_compile_ebnf(const char *text, size_t len, const char *root_rule, di_grammar **out,
                                  di_error *err) {
    *out = NULL;
    if (!text) return di_error_set(err, DI_ERR_INVALID_ARG, "grammar text is NULL");
    if (len > GB_MAX_NODES) return di_error_set(err, DI_ERR_RANGE, "grammar text too long (%zu bytes)", len);
    gb b;
    gb_init(&b, err);
    ep p = {&b, text, text + len, text, 1, 0, DI_GRAMMAR_DEFAULT_MAX_DEPTH};
    di_status s = parse_grammar(&p);
    if (s == DI_OK) {
        const char *root = root_rule ? root_rule : "root";
        uint32_t r = gb_rule_find(&b, root, strlen(root));
        if (r == GB_NIL || b.rules[r].body == GB_NIL) s = gb_fail(&b, DI_ERR_FORMAT, "grammar has no rule '%s'", root);
        else s = gb_finish(&b, r, out);
    }
    gb_free(&b);
    return s;
}
