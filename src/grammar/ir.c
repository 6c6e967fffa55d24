/* Grammar builder and lowering to the flat form (see ir.h). */
#include "grammar/ir.h"

#include "base/alloc.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define UNICODE_MAX 0x10FFFFu

void gb_init(gb *b, di_error *err) {
    memset(b, 0, sizeof *b);
    b->err = err;
}

void gb_free(gb *b) {
    for (uint32_t i = 0; i < b->n_rules; i++) free(b->rules[i].name);
    free(b->nodes);
    free(b->kids);
    free(b->bytes);
    free(b->classes);
    free(b->cps);
    free(b->rules);
    free(b->name_ht);
    memset(b, 0, sizeof *b);
}

di_status gb_fail(gb *b, di_status code, const char *fmt, ...) {
    if (b->status != DI_OK) return b->status;
    b->status = code;
    if (b->err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(b->err->msg, sizeof b->err->msg, fmt, ap);
        va_end(ap);
        b->err->code = code;
    }
    return code;
}

/* Grows *p (element size sz) so that n + extra elements fit; false (and the
 * builder fails) on overflow or no memory. */
void gb_note_empty(gb *b, const char *fmt, ...) {
    if (b->empty_why[0]) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->empty_why, sizeof b->empty_why, fmt, ap);
    va_end(ap);
}

static bool grow(gb *b, void **p, uint32_t *cap, uint32_t n, uint32_t extra, size_t sz, uint32_t limit) {
    if (b->status != DI_OK) return false;
    if (extra > limit || n > limit - extra) {
        gb_fail(b, DI_ERR_RANGE, "grammar too large (more than %u elements)", limit);
        return false;
    }
    if (n + extra <= *cap) return true;
    uint32_t nc = *cap ? *cap : 16;
    while (nc < n + extra) nc = nc > limit / 2 ? limit : nc * 2;
    void *q = di_realloc_array(*p, nc, sz);
    if (!q) {
        gb_fail(b, DI_ERR_NOMEM, "out of memory building grammar");
        return false;
    }
    *p = q;
    *cap = nc;
    return true;
}

static uint32_t node_new(gb *b, uint32_t kind, uint32_t a, uint32_t bb, uint32_t c, uint32_t d) {
    if (!grow(b, (void **)&b->nodes, &b->cap_nodes, b->n_nodes, 1, sizeof(gb_node), GB_MAX_NODES))
        return GB_NIL;
    b->nodes[b->n_nodes] = (gb_node){kind, a, bb, c, d};
    return b->n_nodes++;
}

/* EMPTY and NOTHING are tiny; a fresh node per call keeps the builder
 * stateless (no cached ids to invalidate). */
uint32_t gb_empty(gb *b) { return node_new(b, GN_EMPTY, 0, 0, 0, 0); }
uint32_t gb_nothing(gb *b) { return node_new(b, GN_NOTHING, 0, 0, 0, 0); }

uint32_t gb_bytes(gb *b, const void *s, uint32_t n) {
    if (n == 0) return gb_empty(b);
    if (!grow(b, (void **)&b->bytes, &b->cap_bytes, b->n_bytes, n, 1, GB_MAX_SYMS)) return GB_NIL;
    memcpy(b->bytes + b->n_bytes, s, n);
    b->n_bytes += n;
    return node_new(b, GN_BYTES, b->n_bytes - n, n, 0, 0);
}

uint32_t gb_str(gb *b, const char *s) { return gb_bytes(b, s, (uint32_t)strlen(s)); }

uint32_t gb_class(gb *b, const gb_bits *bits) {
    if (!(bits->w[0] | bits->w[1] | bits->w[2] | bits->w[3])) return gb_nothing(b);
    if (!grow(b, (void **)&b->classes, &b->cap_classes, b->n_classes, 1, sizeof(gb_bits), GB_MAX_NODES))
        return GB_NIL;
    b->classes[b->n_classes] = *bits;
    return node_new(b, GN_CLASS, b->n_classes++, 0, 0, 0);
}

uint32_t gb_byte_range(gb *b, uint8_t lo, uint8_t hi) {
    gb_bits bits = {{0}};
    for (unsigned c = lo; c <= hi; c++) gb_bits_set(&bits, (uint8_t)c);
    return gb_class(b, &bits);
}

static int cmp_pair(const void *x, const void *y) {
    const uint32_t *p = x, *q = y;
    return p[0] < q[0] ? -1 : p[0] > q[0] ? 1 : (p[1] < q[1] ? -1 : p[1] > q[1]);
}

uint32_t gb_uclass(gb *b, const uint32_t *pairs, uint32_t n_pairs, bool negate) {
    if (!gb_ok(b)) return GB_NIL;
    /* Normalize: clamp, drop surrogates, sort, merge; then complement if
     * negated. Space: at most n_pairs + 2 pairs (surrogate split adds one per
     * pair, complement adds one). */
    uint32_t cap = 2 * n_pairs + 4, n = 0;
    uint32_t *p = di_malloc_array(cap, 2 * sizeof(uint32_t));
    if (!p) return gb_fail(b, DI_ERR_NOMEM, "out of memory"), GB_NIL;
    for (uint32_t i = 0; i < n_pairs; i++) {
        uint32_t lo = pairs[2 * i], hi = pairs[2 * i + 1];
        if (hi > UNICODE_MAX) hi = UNICODE_MAX;
        if (lo > hi) continue;
        p[2 * n] = lo, p[2 * n + 1] = hi, n++;
    }
    qsort(p, n, 2 * sizeof(uint32_t), cmp_pair);
    uint32_t m = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (m && p[2 * i] <= p[2 * (m - 1) + 1] + 1) {
            if (p[2 * i + 1] > p[2 * (m - 1) + 1]) p[2 * (m - 1) + 1] = p[2 * i + 1];
        } else {
            p[2 * m] = p[2 * i], p[2 * m + 1] = p[2 * i + 1], m++;
        }
    }
    if (negate) {
        uint32_t *q = di_malloc_array(m + 2, 2 * sizeof(uint32_t));
        if (!q) { free(p); return gb_fail(b, DI_ERR_NOMEM, "out of memory"), GB_NIL; }
        uint32_t k = 0, next = 0;
        for (uint32_t i = 0; i < m; i++) {
            if (p[2 * i] > next) q[2 * k] = next, q[2 * k + 1] = p[2 * i] - 1, k++;
            next = p[2 * i + 1] + 1;
        }
        if (next <= UNICODE_MAX) q[2 * k] = next, q[2 * k + 1] = UNICODE_MAX, k++;
        free(p);
        p = q;
        m = k;
    }
    /* Cut out surrogates D800..DFFF. */
    uint32_t k = 0;
    uint32_t *r = di_malloc_array(2 * m + 2, 2 * sizeof(uint32_t));
    if (!r) { free(p); return gb_fail(b, DI_ERR_NOMEM, "out of memory"), GB_NIL; }
    for (uint32_t i = 0; i < m; i++) {
        uint32_t lo = p[2 * i], hi = p[2 * i + 1];
        if (hi < 0xD800 || lo > 0xDFFF) { r[2 * k] = lo, r[2 * k + 1] = hi, k++; continue; }
        if (lo < 0xD800) r[2 * k] = lo, r[2 * k + 1] = 0xD7FF, k++;
        if (hi > 0xDFFF) r[2 * k] = 0xE000, r[2 * k + 1] = hi, k++;
    }
    free(p);
    if (k == 0) { free(r); return gb_nothing(b); }
    /* All ASCII: a plain byte class. */
    if (r[2 * (k - 1) + 1] < 0x80) {
        gb_bits bits = {{0}};
        for (uint32_t i = 0; i < k; i++)
            for (uint32_t c = r[2 * i]; c <= r[2 * i + 1]; c++) gb_bits_set(&bits, (uint8_t)c);
        free(r);
        return gb_class(b, &bits);
    }
    uint32_t id = GB_NIL;
    if (grow(b, (void **)&b->cps, &b->cap_cps, b->n_cps, 2 * k, sizeof(uint32_t), GB_MAX_NODES)) {
        memcpy(b->cps + b->n_cps, r, 2 * k * sizeof(uint32_t));
        b->n_cps += 2 * k;
        id = node_new(b, GN_UCLASS, b->n_cps - 2 * k, k, 0, 0);
    }
    free(r);
    return id;
}

/* Builds SEQ or ALT with simplifications: nested nodes of the same kind are
 * flattened, EMPTY dropped from sequences, NOTHING dropped from alternations
 * (and a sequence containing NOTHING is NOTHING). */
static uint32_t build_list(gb *b, uint32_t kind, const uint32_t *kids, uint32_t n) {
    if (!gb_ok(b)) return GB_NIL;
    for (uint32_t i = 0; i < n; i++)
        if (kids[i] >= b->n_nodes) return gb_fail(b, DI_ERR_INTERNAL, "bad node"), GB_NIL;
    uint32_t total = 0;
    for (uint32_t i = 0; i < n; i++) {
        const gb_node *k = &b->nodes[kids[i]];
        if (kind == GN_SEQ && k->kind == GN_NOTHING) return gb_nothing(b);
        if (k->kind == kind) total += k->b;
        else if (!((kind == GN_SEQ && k->kind == GN_EMPTY) || (kind == GN_ALT && k->kind == GN_NOTHING)))
            total++;
    }
    if (total == 0) return kind == GN_SEQ ? gb_empty(b) : gb_nothing(b);
    if (!grow(b, (void **)&b->kids, &b->cap_kids, b->n_kids, total, sizeof(uint32_t), GB_MAX_NODES))
        return GB_NIL;
    uint32_t start = b->n_kids;
    for (uint32_t i = 0; i < n; i++) {
        const gb_node *k = &b->nodes[kids[i]];
        if (k->kind == kind) {
            memmove(b->kids + b->n_kids, b->kids + k->a, k->b * sizeof(uint32_t));
            b->n_kids += k->b;
        } else if (!((kind == GN_SEQ && k->kind == GN_EMPTY) || (kind == GN_ALT && k->kind == GN_NOTHING))) {
            b->kids[b->n_kids++] = kids[i];
        }
    }
    if (total == 1) {
        uint32_t only = b->kids[start];
        b->n_kids = start;
        return only;
    }
    return node_new(b, kind, start, total, 0, 0);
}

uint32_t gb_seq(gb *b, const uint32_t *kids, uint32_t n) { return build_list(b, GN_SEQ, kids, n); }
uint32_t gb_alt(gb *b, const uint32_t *kids, uint32_t n) { return build_list(b, GN_ALT, kids, n); }
uint32_t gb_seq2(gb *b, uint32_t x, uint32_t y) { uint32_t k[2] = {x, y}; return gb_seq(b, k, 2); }
uint32_t gb_seq3(gb *b, uint32_t x, uint32_t y, uint32_t z) { uint32_t k[3] = {x, y, z}; return gb_seq(b, k, 3); }
uint32_t gb_alt2(gb *b, uint32_t x, uint32_t y) { uint32_t k[2] = {x, y}; return gb_alt(b, k, 2); }

uint32_t gb_ref(gb *b, uint32_t rule) {
    if (!gb_ok(b)) return GB_NIL;
    if (rule >= b->n_rules) return gb_fail(b, DI_ERR_INTERNAL, "bad rule"), GB_NIL;
    return node_new(b, GN_REF, rule, 0, 0, 0);
}

uint32_t gb_repeat(gb *b, uint32_t child, uint32_t min, uint32_t max) {
    if (!gb_ok(b)) return GB_NIL;
    if (child >= b->n_nodes) return gb_fail(b, DI_ERR_INTERNAL, "bad node"), GB_NIL;
    if (max != GB_INF && max > GB_MAX_REPEAT)
        return gb_fail(b, DI_ERR_RANGE, "repetition bound %u exceeds the limit %u", max, GB_MAX_REPEAT), GB_NIL;
    if (min > GB_MAX_REPEAT)
        return gb_fail(b, DI_ERR_RANGE, "repetition bound %u exceeds the limit %u", min, GB_MAX_REPEAT), GB_NIL;
    if (min > max) return gb_nothing(b);
    if (max == 0) return gb_empty(b);
    uint32_t k = b->nodes[child].kind;
    if (k == GN_EMPTY) return child;
    if (k == GN_NOTHING) return min == 0 ? gb_empty(b) : child;
    if (min == 1 && max == 1) return child;
    return node_new(b, GN_REPEAT, child, 0, min, max);
}

static uint32_t name_hash(const char *s, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 16777619u;
    return h;
}

static bool ht_insert(gb *b, uint32_t rule) {
    if ((b->n_rules + 1) * 2 > b->cap_ht) {
        uint32_t nc = b->cap_ht ? b->cap_ht * 2 : 64;
        uint32_t *t = di_malloc_array(nc, sizeof(uint32_t));
        if (!t) return gb_fail(b, DI_ERR_NOMEM, "out of memory"), false;
        memset(t, 0xff, nc * sizeof(uint32_t));
        for (uint32_t i = 0; i < b->cap_ht; i++) {
            uint32_t r = b->name_ht[i];
            if (r == GB_NIL) continue;
            uint32_t h = name_hash(b->rules[r].name, strlen(b->rules[r].name)) & (nc - 1);
            while (t[h] != GB_NIL) h = (h + 1) & (nc - 1);
            t[h] = r;
        }
        free(b->name_ht);
        b->name_ht = t;
        b->cap_ht = nc;
    }
    uint32_t h = name_hash(b->rules[rule].name, strlen(b->rules[rule].name)) & (b->cap_ht - 1);
    while (b->name_ht[h] != GB_NIL) h = (h + 1) & (b->cap_ht - 1);
    b->name_ht[h] = rule;
    return true;
}

uint32_t gb_rule_find(const gb *b, const char *name, size_t n) {
    if (!b->cap_ht) return GB_NIL;
    uint32_t h = name_hash(name, n) & (b->cap_ht - 1);
    for (;;) {
        uint32_t r = b->name_ht[h];
        if (r == GB_NIL) return GB_NIL;
        if (strlen(b->rules[r].name) == n && !memcmp(b->rules[r].name, name, n)) return r;
        h = (h + 1) & (b->cap_ht - 1);
    }
}

uint32_t gb_rule_new(gb *b, const char *name, size_t n) {
    if (!grow(b, (void **)&b->rules, &b->cap_rules, b->n_rules, 1, sizeof(gb_rule), GB_MAX_RULES))
        return GB_NIL;
    char gen[32];
    if (!name) {
        n = (size_t)snprintf(gen, sizeof gen, "_%u", b->n_rules);
        name = gen;
    }
    char *s = di_strndup(name, n);
    if (!s) return gb_fail(b, DI_ERR_NOMEM, "out of memory"), GB_NIL;
    b->rules[b->n_rules] = (gb_rule){s, GB_NIL, false};
    uint32_t id = b->n_rules++;
    /* Only named rules are looked up; generated names start with '_'. */
    if (name != gen && !ht_insert(b, id)) return GB_NIL;
    return id;
}

void gb_rule_define(gb *b, uint32_t rule, uint32_t body) {
    if (!gb_ok(b)) return;
    if (rule >= b->n_rules || body >= b->n_nodes) {
        gb_fail(b, DI_ERR_INTERNAL, "bad rule definition");
        return;
    }
    b->rules[rule].body = body;
}

void gb_rule_mark_open_string(gb *b, uint32_t rule) {
    if (gb_ok(b) && rule < b->n_rules) b->rules[rule].open_string = true;
}

uint32_t gb_rule_of(gb *b, const char *name, uint32_t body) {
    uint32_t r = gb_rule_new(b, name, name ? strlen(name) : 0);
    gb_rule_define(b, r, body);
    return r;
}

/* ---- UTF-8 expansion --------------------------------------------------- */

static uint32_t utf8_len(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

static void utf8_put(uint32_t cp, uint8_t *o) {
    switch (utf8_len(cp)) {
    case 1: o[0] = (uint8_t)cp; break;
    case 2: o[0] = (uint8_t)(0xC0 | cp >> 6); o[1] = (uint8_t)(0x80 | (cp & 0x3F)); break;
    case 3:
        o[0] = (uint8_t)(0xE0 | cp >> 12); o[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (uint8_t)(0x80 | (cp & 0x3F));
        break;
    default:
        o[0] = (uint8_t)(0xF0 | cp >> 18); o[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
        o[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F)); o[3] = (uint8_t)(0x80 | (cp & 0x3F));
        break;
    }
}

typedef struct u8alts {
    uint32_t *v;
    uint32_t n, cap;
} u8alts;

/* Splits [lo, hi] (same encoded length) until each piece is a product of
 * byte ranges, then appends that sequence of classes (the classic
 * construction used by RE2 and Go's utf8 range tables). Recursion depth is
 * bounded by 2 * 4 levels. */
static void utf8_split(gb *b, uint32_t lo, uint32_t hi, u8alts *out) {
    uint32_t n = utf8_len(lo);
    if (n != utf8_len(hi)) {
        uint32_t edge = n == 1 ? 0x7F : n == 2 ? 0x7FF : 0xFFFF;
        utf8_split(b, lo, edge, out);
        utf8_split(b, edge + 1, hi, out);
        return;
    }
    for (uint32_t i = 1; i < n; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0) {
                utf8_split(b, lo, lo | m, out);
                utf8_split(b, (lo | m) + 1, hi, out);
                return;
            }
            if ((hi & m) != m) {
                utf8_split(b, lo, (hi & ~m) - 1, out);
                utf8_split(b, hi & ~m, hi, out);
                return;
            }
        }
    }
    uint8_t a[4], z[4];
    utf8_put(lo, a);
    utf8_put(hi, z);
    uint32_t parts[4];
    for (uint32_t i = 0; i < n; i++) parts[i] = gb_byte_range(b, a[i], z[i]);
    uint32_t seq = gb_seq(b, parts, n);
    if (!gb_ok(b)) return;
    if (out->n == out->cap) {
        uint32_t nc = out->cap ? out->cap * 2 : 16;
        uint32_t *v = di_realloc_array(out->v, nc, sizeof(uint32_t));
        if (!v) { gb_fail(b, DI_ERR_NOMEM, "out of memory"); return; }
        out->v = v, out->cap = nc;
    }
    out->v[out->n++] = seq;
}

uint32_t gb_uclass_utf8(gb *b, uint32_t node) {
    gb_node nd = b->nodes[node];
    u8alts alts = {0};
    for (uint32_t i = 0; i < nd.b && gb_ok(b); i++) {
        uint32_t lo = b->cps[nd.a + 2 * i], hi = b->cps[nd.a + 2 * i + 1];
        /* ASCII part of a range becomes one class (fewer alternatives). */
        if (lo < 0x80) {
            uint32_t top = hi < 0x80 ? hi : 0x7F;
            uint32_t c = gb_byte_range(b, (uint8_t)lo, (uint8_t)top);
            if (gb_ok(b) && alts.n < alts.cap) alts.v[alts.n++] = c;
            else if (gb_ok(b)) {
                uint32_t nc = alts.cap ? alts.cap * 2 : 16;
                uint32_t *v = di_realloc_array(alts.v, nc, sizeof(uint32_t));
                if (!v) { gb_fail(b, DI_ERR_NOMEM, "out of memory"); break; }
                alts.v = v, alts.cap = nc, alts.v[alts.n++] = c;
            }
            if (hi < 0x80) continue;
            lo = 0x80;
        }
        utf8_split(b, lo, hi, &alts);
    }
    uint32_t r = gb_alt(b, alts.v, alts.n);
    free(alts.v);
    return r;
}

/* ---- lowering ---------------------------------------------------------- */

typedef struct lower {
    gb *b;
    di_grammar *g;
    uint32_t cap_syms, cap_alts, cap_reps, cap_ruleAlt;
    uint32_t *cls_ht; /* interned classes: index into g->classes */
    uint32_t cap_cls_ht, cap_classes;
} lower;

static bool push_u32(gb *b, uint32_t **v, uint32_t *n, uint32_t *cap, uint32_t x, uint32_t limit) {
    if (!grow(b, (void **)v, cap, *n, 1, sizeof(uint32_t), limit)) return false;
    (*v)[(*n)++] = x;
    return true;
}

static uint32_t bits_hash(const gb_bits *x) {
    uint64_t h = x->w[0] * 0x9E3779B97F4A7C15ull ^ x->w[1] * 0xC2B2AE3D27D4EB4Full ^
                 x->w[2] * 0x165667B19E3779F9ull ^ x->w[3] * 0x27D4EB2F165667C5ull;
    return (uint32_t)(h ^ (h >> 32));
}

/* Interns a byte class so equal classes share one index (smaller tables). */
static uint32_t intern_class(lower *L, const gb_bits *x) {
    di_grammar *g = L->g;
    if ((g->n_classes + 1) * 2 > L->cap_cls_ht) {
        uint32_t nc = L->cap_cls_ht ? L->cap_cls_ht * 2 : 256;
        uint32_t *t = di_malloc_array(nc, sizeof(uint32_t));
        if (!t) return gb_fail(L->b, DI_ERR_NOMEM, "out of memory"), GB_NIL;
        memset(t, 0xff, nc * sizeof(uint32_t));
        for (uint32_t i = 0; i < g->n_classes; i++) {
            uint32_t h = bits_hash(&g->classes[i]) & (nc - 1);
            while (t[h] != GB_NIL) h = (h + 1) & (nc - 1);
            t[h] = i;
        }
        free(L->cls_ht);
        L->cls_ht = t, L->cap_cls_ht = nc;
    }
    uint32_t h = bits_hash(x) & (L->cap_cls_ht - 1);
    while (L->cls_ht[h] != GB_NIL) {
        if (!memcmp(&g->classes[L->cls_ht[h]], x, sizeof *x)) return L->cls_ht[h];
        h = (h + 1) & (L->cap_cls_ht - 1);
    }
    if (!grow(L->b, (void **)&g->classes, &L->cap_classes, g->n_classes, 1, sizeof(gb_bits), GB_MAX_SYMS))
        return GB_NIL;
    g->classes[g->n_classes] = *x;
    L->cls_ht[h] = g->n_classes;
    return g->n_classes++;
}

static bool emit(lower *L, uint32_t sym) {
    return push_u32(L->b, &L->g->syms, &L->g->n_syms, &L->cap_syms, sym, GB_MAX_SYMS);
}

static bool emit_term(lower *L, const gb_bits *x) {
    uint32_t c = intern_class(L, x);
    return c != GB_NIL && emit(L, SYM_MAKE(SYM_TERM, c));
}

/* Emits the symbols of one item of an alternative. Nested alternations,
 * Unicode classes and repeated non-rule children become anonymous rules
 * (appended to the builder's rule list, lowered later by the main loop). */
static bool emit_item(lower *L, uint32_t node) {
    gb *b = L->b;
    gb_node nd = b->nodes[node];
    switch (nd.kind) {
    case GN_EMPTY: return true;
    case GN_NOTHING: {
        gb_bits none = {{0}};
        return emit_term(L, &none);
    }
    case GN_BYTES:
        for (uint32_t i = 0; i < nd.b; i++) {
            gb_bits one = {{0}};
            gb_bits_set(&one, b->bytes[nd.a + i]);
            if (!emit_term(L, &one)) return false;
        }
        return true;
    case GN_CLASS: return emit_term(L, &b->classes[nd.a]);
    case GN_SEQ:
        /* gb_seq flattens, so a SEQ child of a SEQ only appears as a rule
         * body's single alternative; its kids are never SEQs. */
        for (uint32_t i = 0; i < nd.b; i++)
            if (!emit_item(L, b->kids[nd.a + i])) return false;
        return true;
    case GN_UCLASS: {
        uint32_t body = gb_uclass_utf8(b, node);
        uint32_t r = gb_rule_of(b, NULL, body);
        return gb_ok(b) && emit(L, SYM_MAKE(SYM_RULE, r));
    }
    case GN_ALT: {
        uint32_t r = gb_rule_of(b, NULL, node);
        return gb_ok(b) && emit(L, SYM_MAKE(SYM_RULE, r));
    }
    case GN_REF: return emit(L, SYM_MAKE(SYM_RULE, nd.a));
    case GN_REPEAT: {
        uint32_t child = nd.a, r;
        if (b->nodes[child].kind == GN_REF) r = b->nodes[child].a;
        else r = gb_rule_of(b, NULL, child);
        if (!gb_ok(b)) return false;
        di_grammar *g = L->g;
        if (!grow(b, (void **)&g->reps, &L->cap_reps, g->n_reps, 1, sizeof(gb_rep), GB_MAX_SYMS)) return false;
        g->reps[g->n_reps] = (gb_rep){r, nd.c, nd.d};
        return emit(L, SYM_MAKE(SYM_REP, g->n_reps++));
    }
    }
    return gb_fail(b, DI_ERR_INTERNAL, "bad node kind"), false;
}

static bool emit_alt(lower *L, uint32_t rule, uint32_t node) {
    di_grammar *g = L->g;
    if (!push_u32(L->b, &g->alt_pos, &g->n_alts, &L->cap_alts, g->n_syms, GB_MAX_SYMS)) return false;
    if (!emit_item(L, node)) return false;
    return emit(L, SYM_MAKE(SYM_END, rule));
}

/* Fixpoint for nullable and FIRST byte sets. Iterates over all rules until
 * nothing changes; the number of rounds is bounded by the longest chain of
 * rule dependencies, which is small for real grammars. */
static void compute_sets(di_grammar *g) {
    bool changed = true;
    while (changed) {
        changed = false;
        for (uint32_t r = 0; r < g->n_rules; r++) {
            for (uint32_t a = g->rule_alt[r]; a < g->rule_alt[r + 1]; a++) {
                uint32_t p = g->alt_pos[a];
                gb_bits f = g->first[r];
                bool all_null = true;
                for (;; p++) {
                    uint32_t s = g->syms[p], k = SYM_KIND(s), v = SYM_VAL(s);
                    if (k == SYM_END) break;
                    if (k == SYM_TERM) {
                        for (int w = 0; w < 4; w++) f.w[w] |= g->classes[v].w[w];
                        all_null = false;
                        break;
                    }
                    uint32_t sub = k == SYM_RULE ? v : g->reps[v].rule;
                    for (int w = 0; w < 4; w++) f.w[w] |= g->first[sub].w[w];
                    bool nul = g->nullable[sub] || (k == SYM_REP && g->reps[v].min == 0);
                    if (!nul) { all_null = false; break; }
                }
                if (memcmp(&f, &g->first[r], sizeof f)) g->first[r] = f, changed = true;
                if (all_null && !g->nullable[r]) g->nullable[r] = 1, changed = true;
            }
        }
    }
}

/* Productive rules: those that derive at least one byte string (a TERM
 * with a non-empty class, a repetition that may be empty or of a productive
 * rule, a productive rule). The least fixpoint over the rules; a rule that
 * only refers to itself ($ref "#") never becomes productive. Writes
 * (n_rules) flags to prod. */
static void compute_productive(const di_grammar *g, uint8_t *prod) {
    bool changed = true;
    while (changed) {
        changed = false;
        for (uint32_t r = 0; r < g->n_rules; r++) {
            if (prod[r]) continue;
            for (uint32_t a = g->rule_alt[r]; a < g->rule_alt[r + 1] && !prod[r]; a++) {
                bool ok = true;
                for (uint32_t p = g->alt_pos[a];; p++) {
                    uint32_t s = g->syms[p], k = SYM_KIND(s), v = SYM_VAL(s);
                    if (k == SYM_END) break;
                    if (k == SYM_TERM) {
                        const gb_bits *c = &g->classes[v];
                        ok = (c->w[0] | c->w[1] | c->w[2] | c->w[3]) != 0;
                    } else if (k == SYM_RULE) {
                        ok = prod[v];
                    } else {
                        ok = g->reps[v].min == 0 || prod[g->reps[v].rule];
                    }
                    if (!ok) break;
                }
                if (ok) prod[r] = 1, changed = true;
            }
        }
    }
}

void di_grammar_free(di_grammar *g) {
    if (!g) return;
    if (g->names)
        for (uint32_t i = 0; i < g->n_rules; i++) free(g->names[i]);
    free(g->names);
    free(g->rule_alt);
    free(g->alt_pos);
    free(g->syms);
    free(g->classes);
    free(g->reps);
    free(g->nullable);
    free(g->first);
    free(g->open_start);
    free(g->dropped);
    free(g);
}

/* Refines the partition of the 256 byte values by every class (the
 * classes are already deduplicated by the lowering): O(256) per class,
 * stopping once every byte is alone. */
static void byte_partition(di_grammar *g) {
    uint8_t p[256] = {0}, q[256];
    uint16_t newid[512];
    uint32_t n = 1;
    for (uint32_t c = 0; c < g->n_classes && n < 256; c++) {
        const gb_bits *cl = &g->classes[c];
        memset(newid, 0xff, 2 * n * sizeof newid[0]);
        uint32_t nn = 0;
        for (uint32_t x = 0; x < 256; x++) {
            uint32_t key = 2u * p[x] + gb_bits_has(cl, (uint8_t)x);
            if (newid[key] == 0xffff) newid[key] = (uint16_t)nn++;
            q[x] = (uint8_t)newid[key];
        }
        memcpy(p, q, sizeof p);
        n = nn;
    }
    memcpy(g->byte_eq, p, sizeof p);
    g->n_byte_eq = n;
}

di_status gb_finish(gb *b, uint32_t root_rule, di_grammar **out) {
    *out = NULL;
    if (!gb_ok(b)) return b->status;
    if (root_rule >= b->n_rules) return gb_fail(b, DI_ERR_INTERNAL, "bad root rule");
    di_grammar *g = calloc(1, sizeof *g);
    if (!g) return gb_fail(b, DI_ERR_NOMEM, "out of memory");
    lower L = {.b = b, .g = g};
    /* $start ::= root, so that "accepting" is one fixed item. */
    uint32_t start = gb_rule_of(b, "$start", gb_ref(b, root_rule));
    uint32_t cap_rule_alt = 0, n_rule_alt = 0;
    for (uint32_t r = 0; r < b->n_rules && gb_ok(b); r++) {
        if (!push_u32(b, &g->rule_alt, &n_rule_alt, &cap_rule_alt, g->n_alts, GB_MAX_RULES + 1)) break;
        uint32_t body = b->rules[r].body;
        if (body == GB_NIL) {
            gb_fail(b, DI_ERR_FORMAT, "undefined rule '%s'", b->rules[r].name);
            break;
        }
        if (b->nodes[body].kind == GN_ALT) {
            gb_node nd = b->nodes[body];
            for (uint32_t i = 0; i < nd.b && gb_ok(b); i++) emit_alt(&L, r, b->kids[nd.a + i]);
        } else {
            emit_alt(&L, r, body);
        }
    }
    push_u32(b, &g->rule_alt, &n_rule_alt, &cap_rule_alt, g->n_alts, GB_MAX_RULES + 1);
    free(L.cls_ht);
    if (!gb_ok(b)) {
        di_grammar_free(g);
        return b->status;
    }
    g->n_rules = b->n_rules;
    g->start_rule = start;
    g->accept_pos = g->alt_pos[g->rule_alt[start]] + 1;
    g->nullable = calloc(g->n_rules, 1);
    g->first = di_calloc(g->n_rules, sizeof(gb_bits));
    g->names = di_calloc(g->n_rules, sizeof(char *));
    if (!g->nullable || !g->first || !g->names) {
        di_grammar_free(g);
        return gb_fail(b, DI_ERR_NOMEM, "out of memory");
    }
    for (uint32_t r = 0; r < g->n_rules; r++) {
        g->names[r] = b->rules[r].name; /* ownership moves to the grammar */
        b->rules[r].name = NULL;
        if (!b->rules[r].open_string) continue;
        if (!g->open_start && !(g->open_start = calloc(g->n_syms ? g->n_syms : 1, 1))) {
            di_grammar_free(g);
            return gb_fail(b, DI_ERR_NOMEM, "out of memory");
        }
        for (uint32_t a = g->rule_alt[r]; a < g->rule_alt[r + 1]; a++) g->open_start[g->alt_pos[a]] = 1;
    }
    uint8_t *prod = calloc(g->n_rules, 1);
    if (!prod) {
        di_grammar_free(g);
        return gb_fail(b, DI_ERR_NOMEM, "out of memory");
    }
    compute_productive(g, prod);
    bool empty = !prod[start];
    free(prod);
    if (empty) {
        di_grammar_free(g);
        const char *what = b->empty_what ? b->empty_what : "the grammar";
        if (b->empty_why[0]) return gb_fail(b, DI_ERR_FORMAT, "%s matches nothing: %s", what, b->empty_why);
        return gb_fail(b, DI_ERR_FORMAT, "%s matches nothing: %s", what,
                       b->empty_fallback ? b->empty_fallback : "no rule of it ever completes (a rule that only refers to itself?)");
    }
    compute_sets(g);
    byte_partition(g);
    *out = g;
    return DI_OK;
}

uint32_t di_grammar_n_rules(const di_grammar *g) { return g->n_rules; }

const char *di_grammar_dropped(const di_grammar *g) { return g->dropped; }

/* ---- printing ---------------------------------------------------------- */

typedef struct sbuf {
    char *s;
    size_t n, cap;
    bool oom;
} sbuf;

static void sb_printf(sbuf *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *sb, const char *fmt, ...) {
    if (sb->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(sb->s ? sb->s + sb->n : NULL, sb->s ? sb->cap - sb->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0) { sb->oom = true; return; }
        if (sb->s && sb->n + (size_t)k < sb->cap) { sb->n += (size_t)k; return; }
        size_t nc = (sb->cap ? sb->cap * 2 : 256) + (size_t)k;
        char *t = realloc(sb->s, nc);
        if (!t) { sb->oom = true; return; }
        sb->s = t, sb->cap = nc;
    }
}

static void print_class(sbuf *sb, const gb_bits *c) {
    int n = 0;
    for (int i = 0; i < 256; i++) n += gb_bits_has(c, (uint8_t)i);
    if (n == 1) {
        for (int i = 0; i < 256; i++)
            if (gb_bits_has(c, (uint8_t)i)) {
                if (i >= 0x20 && i < 0x7f && i != '"' && i != '\\') sb_printf(sb, "\"%c\"", i);
                else sb_printf(sb, "\"\\x%02X\"", i);
            }
        return;
    }
    sb_printf(sb, "[");
    for (int i = 0; i < 256;) {
        if (!gb_bits_has(c, (uint8_t)i)) { i++; continue; }
        int j = i;
        while (j + 1 < 256 && gb_bits_has(c, (uint8_t)(j + 1))) j++;
        for (int e = 0; e < (j > i ? 2 : 1); e++) {
            int x = e ? j : i;
            if (e) sb_printf(sb, "-");
            if (x > 0x20 && x < 0x7f && x != ']' && x != '\\' && x != '-' && x != '^') sb_printf(sb, "%c", x);
            else sb_printf(sb, "\\x%02X", x);
        }
        i = j + 1;
    }
    sb_printf(sb, "]");
}

char *di_grammar_to_text(const di_grammar *g) {
    sbuf sb = {0};
    for (uint32_t r = 0; r < g->n_rules; r++) {
        sb_printf(&sb, "%s ::=", g->names[r]);
        for (uint32_t a = g->rule_alt[r]; a < g->rule_alt[r + 1]; a++) {
            if (a > g->rule_alt[r]) sb_printf(&sb, " |");
            uint32_t p = g->alt_pos[a];
            if (SYM_KIND(g->syms[p]) == SYM_END) sb_printf(&sb, " \"\"");
            for (;; p++) {
                uint32_t s = g->syms[p], k = SYM_KIND(s), v = SYM_VAL(s);
                if (k == SYM_END) break;
                sb_printf(&sb, " ");
                if (k == SYM_TERM) print_class(&sb, &g->classes[v]);
                else if (k == SYM_RULE) sb_printf(&sb, "%s", g->names[v]);
                else {
                    const gb_rep *rp = &g->reps[v];
                    if (rp->max == GB_INF) sb_printf(&sb, "%s{%u,}", g->names[rp->rule], rp->min);
                    else sb_printf(&sb, "%s{%u,%u}", g->names[rp->rule], rp->min, rp->max);
                }
            }
        }
        sb_printf(&sb, "\n");
    }
    if (sb.oom) { free(sb.s); return NULL; }
    if (!sb.s) return di_strdup("");
    return sb.s;
}
