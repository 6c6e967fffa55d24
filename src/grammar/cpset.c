/* Code point sets (cpset.h): lists of ranges, sorted and merged, and
 * their grammar nodes, as UTF-8 or as the text of a JSON string. */
#include "grammar/cpset.h"

#include "base/alloc.h"

#include <stdlib.h>
#include <string.h>

bool cp_pairs_add(gb *b, cp_pairs *p, uint32_t lo, uint32_t hi) {
    if (p->n + 2 > p->cap) {
        uint32_t nc = p->cap ? p->cap * 2 : 16;
        uint32_t *t = di_realloc_array(p->v, nc, sizeof(uint32_t));
        if (!t) return gb_fail(b, DI_ERR_NOMEM, "out of memory"), false;
        p->v = t, p->cap = nc;
    }
    p->v[p->n++] = lo;
    p->v[p->n++] = hi;
    return true;
}

static int cmp_pair(const void *x, const void *y) {
    const uint32_t *a = x, *c = y;
    return a[0] < c[0] ? -1 : a[0] > c[0];
}

bool cp_pairs_normalize(gb *b, cp_pairs *p, bool negate) {
    uint32_t n = p->n / 2;
    if (n > 1) qsort(p->v, n, 2 * sizeof(uint32_t), cmp_pair);
    uint32_t m = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t lo = p->v[2 * i], hi = p->v[2 * i + 1] > CP_MAX ? CP_MAX : p->v[2 * i + 1];
        if (lo > hi) continue;
        if (m && lo <= p->v[2 * m - 1] + 1) {
            if (hi > p->v[2 * m - 1]) p->v[2 * m - 1] = hi;
        } else {
            p->v[2 * m] = lo, p->v[2 * m + 1] = hi, m++;
        }
    }
    p->n = 2 * m;
    if (!negate) return true;
    cp_pairs q = {0};
    uint32_t next = 0;
    for (uint32_t i = 0; i < m; i++) {
        if (p->v[2 * i] > next && !cp_pairs_add(b, &q, next, p->v[2 * i] - 1)) return free(q.v), false;
        next = p->v[2 * i + 1] + 1;
    }
    if (next <= CP_MAX && !cp_pairs_add(b, &q, next, CP_MAX)) return free(q.v), false;
    free(p->v);
    *p = q;
    return true;
}

static bool pairs_has(const cp_pairs *p, uint32_t cp) {
    for (uint32_t i = 0; i < p->n; i += 2)
        if (cp >= p->v[i] && cp <= p->v[i + 1]) return true;
    return false;
}

/* \uXXXX for a code point below 0x10000, hex digits in either case. */
static uint32_t u_escape(gb *b, uint32_t cp) {
    uint32_t parts[6];
    parts[0] = gb_str(b, "\\u");
    for (int i = 0; i < 4; i++) {
        uint32_t d = (cp >> (12 - 4 * i)) & 15;
        gb_bits bits = {{0}};
        gb_bits_set(&bits, (uint8_t)"0123456789ABCDEF"[d]);
        gb_bits_set(&bits, (uint8_t)"0123456789abcdef"[d]);
        parts[1 + i] = gb_class(b, &bits);
    }
    return gb_seq(b, parts, 5);
}

uint32_t rx_cpset(gb *b, const uint32_t *in, uint32_t n_pairs, bool negate, bool json_string) {
    if (!json_string) return gb_uclass(b, in, n_pairs, negate);
    cp_pairs p = {0};
    for (uint32_t i = 0; i < n_pairs; i++)
        if (!cp_pairs_add(b, &p, in[2 * i], in[2 * i + 1])) return free(p.v), GB_NIL;
    if (!cp_pairs_normalize(b, &p, negate)) return free(p.v), GB_NIL;
    /* Printable part: the set minus controls, '"' and '\'. */
    cp_pairs plain = {0};
    for (uint32_t i = 0; i < p.n; i += 2) {
        uint32_t lo = p.v[i] < 0x20 ? 0x20 : p.v[i], hi = p.v[i + 1];
        const uint32_t cut[2] = {'"', '\\'};
        for (int c = 0; c < 2 && lo <= hi; c++) {
            if (cut[c] >= lo && cut[c] <= hi) {
                if (cut[c] > lo && !cp_pairs_add(b, &plain, lo, cut[c] - 1)) goto oom;
                lo = cut[c] + 1;
            }
        }
        if (lo <= hi && !cp_pairs_add(b, &plain, lo, hi)) goto oom;
    }
    uint32_t alts[48], n = 0; /* 1 + 8 short escapes + 34 \\u forms at most */
    alts[n++] = gb_uclass(b, plain.v, plain.n / 2, false);
    static const char short_esc[][2] = {{'"', '"'}, {'\\', '\\'}, {'/', '/'}, {'\b', 'b'},
                                        {'\f', 'f'}, {'\n', 'n'}, {'\r', 'r'}, {'\t', 't'}};
    for (size_t i = 0; i < sizeof short_esc / sizeof short_esc[0]; i++) {
        if (!pairs_has(&p, (uint8_t)short_esc[i][0])) continue;
        char e[3] = {'\\', short_esc[i][1], 0};
        alts[n++] = gb_str(b, e);
    }
    /* Controls, '"' and '\' also as \uXXXX; other code points could be
     * too, but one canonical form keeps the grammar small. */
    uint32_t ctl[2 * 34], nc = 0;
    for (uint32_t cp = 0; cp < 0x20; cp++)
        if (pairs_has(&p, cp)) ctl[nc++] = cp;
    if (pairs_has(&p, '"')) ctl[nc++] = '"';
    if (pairs_has(&p, '\\')) ctl[nc++] = '\\';
    if (nc == 34) {
        /* every control: \u00[01][0-9a-fA-F] and the two others */
        uint32_t k[4] = {gb_str(b, "\\u00"), gb_byte_range(b, '0', '1'), 0, 0};
        gb_bits hex = {{0}};
        for (const char *h = "0123456789abcdefABCDEF"; *h; h++) gb_bits_set(&hex, (uint8_t)*h);
        k[2] = gb_class(b, &hex);
        alts[n++] = gb_seq(b, k, 3);
        alts[n++] = u_escape(b, '"');
        alts[n++] = u_escape(b, '\\');
    } else {
        for (uint32_t i = 0; i < nc; i++) alts[n++] = u_escape(b, ctl[i]);
    }
    free(p.v);
    free(plain.v);
    return gb_alt(b, alts, n);
oom:
    free(p.v);
    free(plain.v);
    return gb_fail(b, DI_ERR_NOMEM, "out of memory"), GB_NIL;
}

uint32_t json_string_char(gb *b) {
    /* printable: U+0020.. minus '"' (0x22) and '\' (0x5C) */
    uint32_t pr[6] = {0x20, 0x21, 0x23, 0x5B, 0x5D, 0x10FFFF};
    uint32_t plain = gb_uclass(b, pr, 3, false);
    gb_bits esc = {{0}};
    for (const char *e = "\"\\/bfnrt"; *e; e++) gb_bits_set(&esc, (uint8_t)*e);
    uint32_t short_esc = gb_seq2(b, gb_str(b, "\\"), gb_class(b, &esc));
    gb_bits hex = {{0}};
    for (const char *h = "0123456789abcdefABCDEF"; *h; h++) gb_bits_set(&hex, (uint8_t)*h);
    /* \uXXXX outside the surrogates, or a high+low surrogate pair. Hex digit
     * classes: D800-DFFF is "d" then [89ab] / [c-f]. */
    gb_bits d = {{0}}, notd = hex, hi_s = {{0}}, lo_s = {{0}}, not_s = hex;
    gb_bits_set(&d, 'd'), gb_bits_set(&d, 'D');
    notd.w[('d') >> 6] &= ~(1ull << ('d' & 63));
    notd.w[('D') >> 6] &= ~(1ull << ('D' & 63));
    for (const char *h = "89abAB"; *h; h++) gb_bits_set(&hi_s, (uint8_t)*h);
    for (const char *h = "cdefCDEF"; *h; h++) gb_bits_set(&lo_s, (uint8_t)*h);
    for (const char *h = "89abcdefABCDEF"; *h; h++) not_s.w[(uint8_t)*h >> 6] &= ~(1ull << ((uint8_t)*h & 63));
    uint32_t H = gb_class(b, &hex);
    uint32_t u = gb_str(b, "\\u");
    uint32_t bmp1[5] = {u, gb_class(b, &notd), H, H, H};
    uint32_t bmp2[5] = {u, gb_class(b, &d), gb_class(b, &not_s), H, H};
    uint32_t pair[10] = {u, gb_class(b, &d), gb_class(b, &hi_s), H, H, gb_str(b, "\\u"), gb_class(b, &d),
                         gb_class(b, &lo_s), H, H};
    uint32_t alts[5] = {plain, short_esc, gb_seq(b, bmp1, 5), gb_seq(b, bmp2, 5), gb_seq(b, pair, 10)};
    return gb_alt(b, alts, 5);
}
