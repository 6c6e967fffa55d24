/* Regex front end: the ECMA-262 subset used by JSON Schema `pattern`.
 *
 * Supported: alternation, groups ((...), (?:...), (?<name>...)), greedy and
 * lazy quantifiers (* + ? {n} {n,} {n,m}; laziness does not change the
 * language), ., classes with ranges and negation, \d \D \w \W \s \S, the
 * character escapes (\t \n \r \v \f \0 \xHH \uHHHH \u{H..} \cX and identity
 * escapes), and ^ / $ at the ends of top-level alternatives (also inside
 * groups that open / close them when all their alternatives carry them:
 * (^\d+$)). Not supported (an error naming it): lookaround,
 * backreferences, \b \B, \p{..} property classes, anchors elsewhere. A
 * regex recognizes a regular language, so everything supported maps
 * directly onto grammar nodes; a regex with nested repetitions, whose tree
 * is ambiguous, goes through a deterministic automaton (regex_dfa.c). */
#include "grammar/regex.h"

#include "grammar/cpset.h"
#include "grammar/regex_dfa.h"

#include "base/alloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RX_DFA_MAX_STATES 4096 /* automaton for an ambiguous regex; past it, the tree form */

typedef struct rx {
    gb *b;
    const char *s, *start, *end;
    uint32_t depth, max_depth;
    bool json;   /* match the JSON-string encoding */
    bool search; /* unanchored ends match anything */
    /* Anchors inside groups: a group that opens (closes) a top-level
     * alternative may hold ^ ($) at the start (end) of its alternatives,
     * as in (^\d+$); ctx_* tell the group being parsed whether it does,
     * g_* report whether its alternatives were anchored: 1 all, 0 none,
     * -1 some (unsupported). */
    bool ctx_start, ctx_end;
    int g_start, g_end;
} rx;

static uint32_t rfail(rx *r, di_status code, const char *what) {
    gb_fail(r->b, code, "regex at offset %u: %s", (unsigned)(r->s - r->start), what);
    return GB_NIL;
}

/* ---- parser ------------------------------------------------------------ */

static bool at_end(const rx *r) { return r->s >= r->end; }

static bool next_cp(rx *r, uint32_t *cp) {
    const unsigned char *s = (const unsigned char *)r->s;
    unsigned char c = s[0];
    int len = c < 0x80 ? 1 : c >= 0xF0 && c < 0xF8 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c < 0xE0 ? 2 : 0;
    if (!len || r->end - r->s < len) return rfail(r, DI_ERR_FORMAT, "invalid UTF-8"), false;
    uint32_t v = len == 1 ? c : c & (0x3F >> (len - 1));
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return rfail(r, DI_ERR_FORMAT, "invalid UTF-8"), false;
        v = v << 6 | (s[i] & 0x3F);
    }
    r->s += len;
    *cp = v;
    return true;
}

static int hexv(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static bool read_hex(rx *r, int n, uint32_t *v) {
    *v = 0;
    for (int i = 0; i < n; i++) {
        int h = at_end(r) ? -1 : hexv(*r->s);
        if (h < 0) return rfail(r, DI_ERR_FORMAT, "bad hex escape"), false;
        *v = *v << 4 | (uint32_t)h;
        r->s++;
    }
    return true;
}

/* Class escapes \d \w \s and their negations append to p; returns 1 when
 * handled, 0 when not a class escape, -1 on error. */
static int class_escape(rx *r, char e, cp_pairs *p) {
    static const uint32_t digit[] = {'0', '9'};
    static const uint32_t word[] = {'0', '9', 'A', 'Z', '_', '_', 'a', 'z'};
    static const uint32_t space[] = {9, 13, 32, 32, 0xA0, 0xA0, 0x1680, 0x1680, 0x2000, 0x200A,
                                     0x2028, 0x2029, 0x202F, 0x202F, 0x205F, 0x205F, 0x3000, 0x3000, 0xFEFF, 0xFEFF};
    const uint32_t *set;
    uint32_t n;
    switch (e) {
    case 'd': case 'D': set = digit, n = 1; break;
    case 'w': case 'W': set = word, n = 4; break;
    case 's': case 'S': set = space, n = 10; break;
    default: return 0;
    }
    cp_pairs tmp = {0};
    for (uint32_t i = 0; i < n; i++)
        if (!cp_pairs_add(r->b, &tmp, set[2 * i], set[2 * i + 1])) return free(tmp.v), -1;
    bool neg = e == 'D' || e == 'W' || e == 'S';
    if (!cp_pairs_normalize(r->b, &tmp, neg)) return free(tmp.v), -1;
    for (uint32_t i = 0; i < tmp.n; i += 2)
        if (!cp_pairs_add(r->b, p, tmp.v[i], tmp.v[i + 1])) return free(tmp.v), -1;
    free(tmp.v);
    return 1;
}

/* A character escape (after the backslash, not a class escape): one code
 * point, or false on error. */
static bool char_escape(rx *r, bool in_class, uint32_t *cp) {
    if (at_end(r)) return rfail(r, DI_ERR_FORMAT, "trailing backslash"), false;
    char e = *r->s++;
    switch (e) {
    case 't': *cp = '\t'; return true;
    case 'n': *cp = '\n'; return true;
    case 'r': *cp = '\r'; return true;
    case 'v': *cp = '\v'; return true;
    case 'f': *cp = '\f'; return true;
    case '0': *cp = 0; return true;
    case 'x': return read_hex(r, 2, cp);
    case 'u':
        if (!at_end(r) && *r->s == '{') {
            r->s++;
            uint32_t v = 0;
            int n = 0;
            while (!at_end(r) && *r->s != '}') {
                int h = hexv(*r->s);
                if (h < 0 || ++n > 6) return rfail(r, DI_ERR_FORMAT, "bad \\u{...} escape"), false;
                v = v << 4 | (uint32_t)h;
                r->s++;
            }
            if (at_end(r) || n == 0 || v > CP_MAX) return rfail(r, DI_ERR_FORMAT, "bad \\u{...} escape"), false;
            r->s++;
            *cp = v;
            return true;
        }
        if (!read_hex(r, 4, cp)) return false;
        /* a surrogate pair written as two escapes is one code point */
        if (*cp >= 0xD800 && *cp < 0xDC00 && r->end - r->s >= 6 && r->s[0] == '\\' && r->s[1] == 'u') {
            const char *save = r->s;
            uint32_t lo;
            r->s += 2;
            if (read_hex(r, 4, &lo) && lo >= 0xDC00 && lo < 0xE000) {
                *cp = 0x10000 + ((*cp - 0xD800) << 10) + (lo - 0xDC00);
                return true;
            }
            if (!gb_ok(r->b)) return false;
            r->s = save;
        }
        return true;
    case 'c':
        if (!at_end(r) && ((*r->s >= 'a' && *r->s <= 'z') || (*r->s >= 'A' && *r->s <= 'Z'))) {
            *cp = (uint32_t)(*r->s++ % 32);
            return true;
        }
        return rfail(r, DI_ERR_FORMAT, "bad \\c escape"), false;
    case 'b':
        if (in_class) { *cp = '\b'; return true; }
        return rfail(r, DI_ERR_UNSUPPORTED, "word boundary \\b is not supported"), false;
    case 'B': return rfail(r, DI_ERR_UNSUPPORTED, "\\B is not supported"), false;
    case 'p': case 'P': return rfail(r, DI_ERR_UNSUPPORTED, "Unicode property escapes \\p{...} are not supported"), false;
    case 'k': return rfail(r, DI_ERR_UNSUPPORTED, "named backreferences are not supported"), false;
    default:
        if (e >= '1' && e <= '9') return rfail(r, DI_ERR_UNSUPPORTED, "backreferences are not supported"), false;
        r->s--;
        return next_cp(r, cp); /* identity escape */
    }
}

static uint32_t parse_class(rx *r) {
    r->s++; /* '[' */
    bool neg = false;
    if (!at_end(r) && *r->s == '^') neg = true, r->s++;
    cp_pairs p = {0};
    while (!at_end(r) && *r->s != ']') {
        uint32_t lo;
        if (*r->s == '\\') {
            r->s++;
            if (at_end(r)) { free(p.v); return rfail(r, DI_ERR_FORMAT, "trailing backslash"); }
            int k = class_escape(r, *r->s, &p);
            if (k < 0) { free(p.v); return GB_NIL; }
            if (k > 0) { r->s++; continue; }
            if (!char_escape(r, true, &lo)) { free(p.v); return GB_NIL; }
        } else if (!next_cp(r, &lo)) {
            free(p.v);
            return GB_NIL;
        }
        uint32_t hi = lo;
        if (r->end - r->s >= 2 && r->s[0] == '-' && r->s[1] != ']') {
            r->s++;
            if (*r->s == '\\') {
                r->s++;
                if (!at_end(r) && (*r->s == 'd' || *r->s == 'w' || *r->s == 's' || *r->s == 'D' || *r->s == 'W' || *r->s == 'S')) {
                    /* [a-\d]: '-' is literal in Annex B; keep it simple */
                    free(p.v);
                    return rfail(r, DI_ERR_UNSUPPORTED, "class escape as a range end");
                }
                if (!char_escape(r, true, &hi)) { free(p.v); return GB_NIL; }
            } else if (!next_cp(r, &hi)) {
                free(p.v);
                return GB_NIL;
            }
            if (hi < lo) { free(p.v); return rfail(r, DI_ERR_FORMAT, "character range out of order"); }
        }
        if (!cp_pairs_add(r->b, &p, lo, hi)) { free(p.v); return GB_NIL; }
    }
    if (at_end(r)) { free(p.v); return rfail(r, DI_ERR_FORMAT, "unterminated character class"); }
    r->s++;
    uint32_t node = rx_cpset(r->b, p.v, p.n / 2, neg, r->json);
    free(p.v);
    return node;
}

static uint32_t cp_node(rx *r, uint32_t cp) {
    uint32_t pr[2] = {cp, cp};
    return rx_cpset(r->b, pr, 1, false, r->json);
}

static uint32_t any_char(rx *r) {
    /* '.': anything but line terminators */
    uint32_t pr[6] = {'\n', '\n', '\r', '\r', 0x2028, 0x2029};
    return rx_cpset(r->b, pr, 3, true, r->json);
}

static uint32_t parse_alts(rx *r, bool top, bool can_start, bool can_end);

/* Any code point (for search-mode padding). */
static uint32_t any_cp(rx *r) { return rx_cpset(r->b, NULL, 0, true, r->json); }

static bool parse_bound(rx *r, uint32_t *out) {
    uint64_t v = 0;
    if (at_end(r) || *r->s < '0' || *r->s > '9') return false;
    while (!at_end(r) && *r->s >= '0' && *r->s <= '9') {
        v = v * 10 + (uint64_t)(*r->s++ - '0');
        if (v > GB_MAX_REPEAT) v = GB_MAX_REPEAT + 1;
    }
    *out = (uint32_t)v;
    return true;
}

/* Tries to read {n}, {n,}, {n,m} at r->s; false (r->s unchanged) when it is
 * not a quantifier (then '{' is a literal, as in Annex B). */
static bool parse_braces(rx *r, uint32_t *lo, uint32_t *hi) {
    const char *save = r->s;
    r->s++;
    if (!parse_bound(r, lo)) { r->s = save; return false; }
    *hi = *lo;
    if (!at_end(r) && *r->s == ',') {
        r->s++;
        if (!at_end(r) && *r->s == '}') *hi = GB_INF;
        else if (!parse_bound(r, hi)) { r->s = save; return false; }
    }
    if (at_end(r) || *r->s != '}') { r->s = save; return false; }
    r->s++;
    return true;
}

static uint32_t parse_atom(rx *r) {
    char c = *r->s;
    switch (c) {
    case '(': {
        if (++r->depth > r->max_depth) return rfail(r, DI_ERR_RANGE, "groups nested too deeply");
        r->s++;
        if (!at_end(r) && *r->s == '?') {
            r->s++;
            if (!at_end(r) && *r->s == ':') r->s++;
            else if (!at_end(r) && *r->s == '<' && r->s + 1 < r->end && r->s[1] != '=' && r->s[1] != '!') {
                while (!at_end(r) && *r->s != '>') r->s++;
                if (at_end(r)) return rfail(r, DI_ERR_FORMAT, "unterminated group name");
                r->s++;
            } else return rfail(r, DI_ERR_UNSUPPORTED, "lookaround assertions are not supported");
        }
        uint32_t node = parse_alts(r, false, r->ctx_start, r->ctx_end);
        if (node == GB_NIL) return GB_NIL;
        if (at_end(r) || *r->s != ')') return rfail(r, DI_ERR_FORMAT, "missing ')'");
        r->s++;
        r->depth--;
        return node;
    }
    case '[': return parse_class(r);
    case '.': r->s++; return any_char(r);
    case '\\': {
        r->s++;
        if (at_end(r)) return rfail(r, DI_ERR_FORMAT, "trailing backslash");
        cp_pairs p = {0};
        int k = class_escape(r, *r->s, &p);
        if (k < 0) { free(p.v); return GB_NIL; }
        if (k > 0) {
            r->s++;
            uint32_t node = rx_cpset(r->b, p.v, p.n / 2, false, r->json);
            free(p.v);
            return node;
        }
        uint32_t cp;
        if (!char_escape(r, false, &cp)) return GB_NIL;
        return cp_node(r, cp);
    }
    case '*': case '+': case '?': return rfail(r, DI_ERR_FORMAT, "nothing to repeat");
    case ')': return rfail(r, DI_ERR_FORMAT, "unmatched ')'");
    default: {
        if (c == '{') {
            uint32_t lo, hi;
            if (parse_braces(r, &lo, &hi)) return rfail(r, DI_ERR_FORMAT, "nothing to repeat");
        }
        uint32_t cp;
        if (!next_cp(r, &cp)) return GB_NIL;
        return cp_node(r, cp);
    }
    }
}

/* Whether the parser stands at the end of a sequence. */
static bool seq_ends(const rx *r) { return at_end(r) || *r->s == '|' || *r->s == ')'; }

/* seq := (atom quantifier*)*; a sequence that starts (ends) the pattern
 * may start with ^ (end with $), reported through the flags: top-level
 * ones, and those of groups that open (close) a top-level one (can_*). */
static uint32_t parse_seq(rx *r, bool can_start, bool can_end, bool *anch_start, bool *anch_end) {
    uint32_t *items = NULL, n = 0, cap = 0;
    *anch_start = *anch_end = false;
    bool first = true;
    while (!seq_ends(r)) {
        if (*r->s == '^') {
            if (!can_start || !first) { free(items); return rfail(r, DI_ERR_UNSUPPORTED, "'^' not at the start of the pattern"); }
            *anch_start = true;
            r->s++;
            first = false;
            continue;
        }
        if (*r->s == '$') {
            r->s++;
            if (!can_end || !seq_ends(r)) { free(items); return rfail(r, DI_ERR_UNSUPPORTED, "'$' not at the end of the pattern"); }
            *anch_end = true;
            break;
        }
        bool group = *r->s == '(';
        r->ctx_start = can_start && first, r->ctx_end = can_end;
        r->g_start = r->g_end = 0;
        first = false;
        uint32_t node = parse_atom(r);
        int gs = group ? r->g_start : 0, ge = group ? r->g_end : 0;
        if (node != GB_NIL && (gs < 0 || ge < 0))
            node = rfail(r, DI_ERR_UNSUPPORTED, "anchors in some alternatives of a group only");
        bool quantified = false;
        if (node != GB_NIL && !at_end(r)) {
            uint32_t lo = 1, hi = 1;
            char q = *r->s;
            bool quant = true;
            if (q == '*') r->s++, lo = 0, hi = GB_INF;
            else if (q == '+') r->s++, lo = 1, hi = GB_INF;
            else if (q == '?') r->s++, lo = 0, hi = 1;
            else if (!(q == '{' && parse_braces(r, &lo, &hi))) quant = false;
            quantified = quant;
            if (quant) {
                if (hi < lo) node = rfail(r, DI_ERR_FORMAT, "numbers out of order in {} quantifier");
                else {
                    if (!at_end(r) && *r->s == '?') r->s++; /* lazy: same language */
                    node = gb_repeat(r->b, node, lo, hi);
                    /* ECMA-262 has no quantified quantifier (a** or a{2}{3}) */
                    uint32_t l2, h2;
                    if (node != GB_NIL && !at_end(r) &&
                        (*r->s == '*' || *r->s == '+' || *r->s == '?' || (*r->s == '{' && parse_braces(r, &l2, &h2))))
                        node = rfail(r, DI_ERR_FORMAT, "nothing to repeat");
                }
            }
        }
        if (node != GB_NIL && (gs || ge) && quantified) node = rfail(r, DI_ERR_UNSUPPORTED, "repeated anchored group");
        if (node != GB_NIL && ge && !seq_ends(r)) node = rfail(r, DI_ERR_UNSUPPORTED, "'$' not at the end of the pattern");
        if (node == GB_NIL) { free(items); return GB_NIL; }
        *anch_start |= gs > 0, *anch_end |= ge > 0;
        if (n == cap) {
            cap = cap ? cap * 2 : 8;
            uint32_t *t = di_realloc_array(items, cap, sizeof(uint32_t));
            if (!t) { free(items); return rfail(r, DI_ERR_NOMEM, "out of memory"); }
            items = t;
        }
        items[n++] = node;
    }
    uint32_t node = gb_seq(r->b, items, n);
    free(items);
    return node;
}

/* In search mode an unanchored end may be preceded/followed by anything. */
static uint32_t wrap_search(rx *r, uint32_t node, bool anch_start, bool anch_end) {
    if (!r->search) return node;
    uint32_t pre = anch_start ? gb_empty(r->b) : gb_star(r->b, any_cp(r));
    uint32_t post = anch_end ? gb_empty(r->b) : gb_star(r->b, any_cp(r));
    return gb_seq3(r->b, pre, node, post);
}

static uint32_t parse_alts(rx *r, bool top, bool can_start, bool can_end) {
    uint32_t *alts = NULL, n = 0, cap = 0, n_as = 0, n_ae = 0;
    for (;;) {
        bool as, ae;
        uint32_t s = parse_seq(r, top || can_start, top || can_end, &as, &ae);
        if (s == GB_NIL) { free(alts); return GB_NIL; }
        n_as += as, n_ae += ae;
        if (top) {
            s = wrap_search(r, s, as, ae);
            if (s == GB_NIL) { free(alts); return GB_NIL; }
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 4;
            uint32_t *t = di_realloc_array(alts, cap, sizeof(uint32_t));
            if (!t) { free(alts); return rfail(r, DI_ERR_NOMEM, "out of memory"); }
            alts = t;
        }
        alts[n++] = s;
        if (at_end(r) || *r->s != '|') break;
        r->s++;
    }
    r->g_start = n_as == 0 ? 0 : n_as == n ? 1 : -1;
    r->g_end = n_ae == 0 ? 0 : n_ae == n ? 1 : -1;
    uint32_t node = gb_alt(r->b, alts, n);
    free(alts);
    return node;
}

uint32_t rx_translate(gb *b, const char *re, size_t len, bool search, bool json_string, uint32_t max_depth) {
    rx r = {b, re, re, re + len, 0, max_depth ? max_depth : DI_GRAMMAR_DEFAULT_MAX_DEPTH, json_string, search, false, false, 0, 0};
    uint32_t node = parse_alts(&r, true, true, true);
    if (node == GB_NIL) return GB_NIL;
    if (!at_end(&r)) return rfail(&r, DI_ERR_FORMAT, "unmatched ')'");
    return node;
}

di_status di_grammar_compile_regex(const char *re, size_t len, di_grammar **out, di_error *err) {
    *out = NULL;
    if (!re) return di_error_set(err, DI_ERR_INVALID_ARG, "regex is NULL");
    if (len > GB_MAX_NODES) return di_error_set(err, DI_ERR_RANGE, "regex too long (%zu bytes)", len);
    gb b;
    gb_init(&b, err);
    b.empty_what = "the regex";
    b.empty_fallback = "no string matches it (an empty class or a contradiction)";
    uint32_t node = rx_translate(&b, re, len, false, false, 0);
    if (node != GB_NIL && rx_is_ambiguous(&b, node)) { /* one automaton state instead of many splits */
        bool big;
        uint32_t d = rx_dfa(&b, node, 0, GB_INF, false, GB_NIL, RX_DFA_MAX_STATES, &big);
        if (d != GB_NIL || !big) node = d;
    }
    uint32_t root = gb_rule_of(&b, "root", node);
    di_status s = gb_ok(&b) ? gb_finish(&b, root, out) : b.status;
    gb_free(&b);
    return s;
}
