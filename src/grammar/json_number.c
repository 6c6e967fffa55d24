/* JSON numbers within bounds (minimum / maximum / exclusive*), as grammar
 * nodes over their decimal text.
 *
 * Bounds are turned into exact decimal digit strings (the shortest text
 * that round-trips the double, so 1.1 means 1.1) and compared digit by
 * digit: an integer part is a range over digit strings of each length, a
 * fraction is a walk that stays "tight" against the bound's digits until it
 * moves strictly inside. Bounded numbers are written without an exponent
 * (the bound check would otherwise need arithmetic on the exponent). */
#include "grammar/json_number.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEC_MAX_DIGITS 40 /* |bound| < 1e18 and at most 17 significant digits */

static uint32_t digit_class(gb *b, int lo, int hi) {
    if (lo > hi) return gb_nothing(b);
    return gb_byte_range(b, (uint8_t)('0' + lo), (uint8_t)('0' + hi));
}

static uint32_t any_digits(gb *b) { return gb_star(b, digit_class(b, 0, 9)); }

/* Same-length digit strings s with a <= s <= b (leading zeros allowed). */
static uint32_t fixed_range(gb *g, const char *a, const char *b, size_t n) {
    if (n == 0) return gb_empty(g);
    int a0 = a[0] - '0', b0 = b[0] - '0';
    if (a0 == b0) return gb_seq2(g, digit_class(g, a0, a0), fixed_range(g, a + 1, b + 1, n - 1));
    bool a_zero = true, b_nine = true;
    for (size_t i = 1; i < n; i++) a_zero &= a[i] == '0', b_nine &= b[i] == '9';
    uint32_t rest_any = gb_repeat(g, digit_class(g, 0, 9), (uint32_t)(n - 1), (uint32_t)(n - 1));
    if (a_zero && b_nine) return gb_seq2(g, digit_class(g, a0, b0), rest_any);
    char nines[DEC_MAX_DIGITS + 1], zeros[DEC_MAX_DIGITS + 1];
    memset(nines, '9', n), memset(zeros, '0', n);
    uint32_t alts[3];
    uint32_t k = 0;
    alts[k++] = gb_seq2(g, digit_class(g, a0, a0), fixed_range(g, a + 1, nines, n - 1));
    if (a0 + 1 <= b0 - 1) alts[k++] = gb_seq2(g, digit_class(g, a0 + 1, b0 - 1), rest_any);
    alts[k++] = gb_seq2(g, digit_class(g, b0, b0), fixed_range(g, zeros, b + 1, n - 1));
    return gb_alt(g, alts, k);
}

/* Canonical naturals (no leading zeros) n with lo <= n <= hi; hi NULL means
 * unbounded. lo and hi are canonical digit strings. */
static uint32_t nat_range(gb *g, const char *lo, const char *hi) {
    size_t ll = strlen(lo), hl = hi ? strlen(hi) : 0;
    if (hi && (ll > hl || (ll == hl && strcmp(lo, hi) > 0))) return gb_nothing(g);
    char nines[DEC_MAX_DIGITS + 1], ten[DEC_MAX_DIGITS + 1];
    uint32_t alts[3], k = 0;
    /* the band of lo's length */
    memset(nines, '9', ll);
    nines[ll] = 0;
    alts[k++] = fixed_range(g, lo, hi && hl == ll ? hi : nines, ll);
    if (hi && hl == ll) return alts[0];
    /* full bands strictly between the two lengths: [1-9][0-9]{len-1} */
    uint32_t from = (uint32_t)ll, to = hi ? (uint32_t)hl - 2 : GB_INF; /* repeat count of [0-9] */
    if (!hi || hl >= ll + 2)
        alts[k++] = gb_seq2(g, digit_class(g, 1, 9), gb_repeat(g, digit_class(g, 0, 9), from, to));
    if (hi) {
        memset(ten, '0', hl);
        ten[0] = '1';
        ten[hl] = 0;
        alts[k++] = fixed_range(g, ten, hi, hl);
    }
    return gb_alt(g, alts, k);
}

/* Fraction digit strings D (after the '.') compared with the bound
 * fractions lo (strict: >) and hi (strict: <); tl/th: D so far equals the
 * bound's digits (the constraint is still open). lo/hi have no trailing
 * zeros; NULL means no bound on that side. allow_end: D may stop here. */
typedef struct fracb {
    const char *lo, *hi;
    size_t ll, hl;
    bool lo_strict, hi_strict;
} fracb;

static uint32_t frac_walk(gb *g, const fracb *f, size_t pos, bool tl, bool th, bool allow_end) {
    /* Once past the lower bound's digits, equality already satisfies a
     * non-strict bound. */
    if (tl && pos >= f->ll && !f->lo_strict) tl = false;
    if (!tl && !th) return allow_end ? any_digits(g) : gb_plus(g, digit_class(g, 0, 9));
    bool beyond_lo = tl && pos >= f->ll, beyond_hi = th && pos >= f->hl;
    if (beyond_hi) {
        /* D equals hi so far: only zeros may follow, and ending is equality */
        if (f->hi_strict || tl) return gb_nothing(g); /* tl here is a strict lo past its digits */
        return allow_end ? gb_star(g, digit_class(g, 0, 0)) : gb_plus(g, digit_class(g, 0, 0));
    }
    if (beyond_lo && !th) {
        /* strict lower bound met with equality: need a nonzero digit */
        return gb_seq3(g, gb_star(g, digit_class(g, 0, 0)), digit_class(g, 1, 9), any_digits(g));
    }
    /* Ending here: lower bound fails if still tight (a proper prefix of lo
     * is smaller); upper bound holds (a proper prefix of hi is smaller). */
    bool end_ok = allow_end && !tl;
    int dl = tl ? (pos < f->ll ? f->lo[pos] - '0' : 0) : 0;
    int dh = th ? f->hi[pos] - '0' : 9;
    uint32_t alts[5], k = 0;
    if (end_ok) alts[k++] = gb_empty(g);
    if (tl && th && dl == dh) {
        alts[k++] = gb_seq2(g, digit_class(g, dl, dl), frac_walk(g, f, pos + 1, true, true, true));
    } else {
        if (tl) alts[k++] = gb_seq2(g, digit_class(g, dl, dl), frac_walk(g, f, pos + 1, true, false, true));
        if (th) alts[k++] = gb_seq2(g, digit_class(g, dh, dh), frac_walk(g, f, pos + 1, false, true, true));
        int a = tl ? dl + 1 : 0, z = th ? dh - 1 : 9;
        if (a <= z) alts[k++] = gb_seq2(g, digit_class(g, a, z), any_digits(g));
    }
    return gb_alt(g, alts, k);
}

/* Optional fraction part ('.' digits) whose value v satisfies the bounds
 * (lo/hi as fraction digit strings; NULL = none). */
static uint32_t frac_part(gb *g, const char *lo, bool lo_strict, const char *hi, bool hi_strict) {
    fracb f = {lo, hi, lo ? strlen(lo) : 0, hi ? strlen(hi) : 0, lo_strict, hi_strict};
    /* No fraction part: value 0. */
    bool zero_ok = (!lo || (f.ll == 0 && !lo_strict)) && (!hi || f.hl > 0 || !hi_strict);
    uint32_t digits = frac_walk(g, &f, 0, lo != NULL, hi != NULL, false);
    return gb_alt2(g, zero_ok ? gb_empty(g) : gb_nothing(g), gb_seq2(g, gb_str(g, "."), digits));
}

/* Decimal digit string arithmetic on canonical naturals. */
static void dec_inc(char *s) {
    size_t n = strlen(s);
    for (size_t i = n; i-- > 0;) {
        if (s[i] != '9') { s[i]++; return; }
        s[i] = '0';
    }
    memmove(s + 1, s, n + 1);
    s[0] = '1';
}

static bool dec_dec(char *s) { /* false when s is "0" */
    size_t n = strlen(s);
    if (n == 1 && s[0] == '0') return false;
    for (size_t i = n; i-- > 0;) {
        if (s[i] != '0') { s[i]--; break; }
        s[i] = '9';
    }
    if (s[0] == '0' && n > 1) memmove(s, s + 1, n);
    return true;
}

static int nat_cmp(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la != lb) return la < lb ? -1 : 1;
    int c = strcmp(a, b);
    return c < 0 ? -1 : c > 0;
}

bool jn_parse_bound(double x, jn_dec *d) {
    if (!isfinite(x) || fabs(x) >= 1e18 || (x != 0 && fabs(x) < 1e-20)) return false;
    char buf[64];
    /* shortest text that reads back as the same double */
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*e", prec - 1, x);
        if (strtod(buf, NULL) == x) break;
    }
    /* buf is [-]D.DDDDe[+-]XX: expand into integer and fraction digits */
    const char *p = buf;
    d->neg = *p == '-';
    if (d->neg) p++;
    char mant[32];
    size_t nm = 0;
    for (; *p && *p != 'e'; p++)
        if (*p != '.') mant[nm++] = *p;
    mant[nm] = 0;
    int e = atoi(p + 1); /* value = 0.mant * 10^(e+1) */
    int point = e + 1;   /* digits of mant before the decimal point */
    size_t ni = 0, nf = 0;
    if (point <= 0) {
        d->ip[ni++] = '0';
        for (int i = 0; i < -point; i++) d->fp[nf++] = '0';
        for (size_t i = 0; i < nm; i++) d->fp[nf++] = mant[i];
    } else {
        for (int i = 0; i < point; i++) d->ip[ni++] = (size_t)i < nm ? mant[i] : '0';
        for (size_t i = (size_t)point; i < nm; i++) d->fp[nf++] = mant[i];
    }
    d->ip[ni] = 0;
    while (nf && d->fp[nf - 1] == '0') nf--;
    d->fp[nf] = 0;
    /* strip leading zeros of the integer part */
    size_t z = 0;
    while (d->ip[z] == '0' && d->ip[z + 1]) z++;
    memmove(d->ip, d->ip + z, strlen(d->ip + z) + 1);
    if (!strcmp(d->ip, "0") && nf == 0) d->neg = false; /* -0 is 0 */
    return true;
}

/* Compares magnitudes. */
static int mag_cmp(const jn_dec *a, const jn_dec *b) {
    int c = nat_cmp(a->ip, b->ip);
    if (c) return c;
    c = strcmp(a->fp, b->fp); /* no trailing zeros: lexicographic works, shorter = smaller prefix */
    return c < 0 ? -1 : c > 0;
}

static int dec_cmp(const jn_dec *a, const jn_dec *b) {
    if (a->neg != b->neg) return a->neg ? -1 : 1;
    int c = mag_cmp(a, b);
    return a->neg ? -c : c;
}

static bool is_zero(const jn_dec *d) { return !strcmp(d->ip, "0") && !d->fp[0]; }

/* Magnitudes m (written as I[.F]) with lo <= m <= hi (strictness per side;
 * hi NULL = unbounded). integer: only integral values, written I or I.0+. */
static uint32_t magnitude(gb *g, const jn_dec *lo, bool lo_strict, const jn_dec *hi, bool hi_strict, bool integer) {
    if (hi) {
        int c = mag_cmp(lo, hi);
        if (c > 0 || (c == 0 && (lo_strict || hi_strict))) return gb_nothing(g);
    }
    if (integer) {
        /* integral m in [ceil(lo), floor(hi)] with adjustments for strictness */
        char a[DEC_MAX_DIGITS + 2], z[DEC_MAX_DIGITS + 2];
        strcpy(a, lo->ip);
        if (lo->fp[0] || lo_strict) dec_inc(a);
        uint32_t zero_frac = gb_opt(g, gb_seq2(g, gb_str(g, "."), gb_plus(g, digit_class(g, 0, 0))));
        if (!hi) return gb_seq2(g, nat_range(g, a, NULL), zero_frac);
        strcpy(z, hi->ip);
        if (!hi->fp[0] && hi_strict && !dec_dec(z)) return gb_nothing(g);
        return gb_seq2(g, nat_range(g, a, z), zero_frac);
    }
    if (hi && !strcmp(lo->ip, hi->ip))
        return gb_seq2(g, gb_str(g, lo->ip), frac_part(g, lo->fp, lo_strict, hi->fp, hi_strict));
    uint32_t alts[3], k = 0;
    alts[k++] = gb_seq2(g, gb_str(g, lo->ip), frac_part(g, lo->fp, lo_strict, NULL, false));
    char a[DEC_MAX_DIGITS + 2];
    strcpy(a, lo->ip);
    dec_inc(a);
    uint32_t any_frac = gb_opt(g, gb_seq2(g, gb_str(g, "."), gb_plus(g, digit_class(g, 0, 9))));
    if (!hi) {
        alts[k++] = gb_seq2(g, nat_range(g, a, NULL), any_frac);
    } else {
        char z[DEC_MAX_DIGITS + 2];
        strcpy(z, hi->ip);
        if (dec_dec(z) && nat_cmp(a, z) <= 0) alts[k++] = gb_seq2(g, nat_range(g, a, z), any_frac);
        alts[k++] = gb_seq2(g, gb_str(g, hi->ip), frac_part(g, NULL, false, hi->fp, hi_strict));
    }
    return gb_alt(g, alts, k);
}

uint32_t jn_number(gb *g, bool integer, const jn_dec *lo, bool lo_strict, const jn_dec *hi, bool hi_strict) {
    if (!lo && !hi) {
        /* -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? ; integers: I(.0+)? */
        uint32_t ip = gb_alt2(g, gb_str(g, "0"), gb_seq2(g, digit_class(g, 1, 9), any_digits(g)));
        uint32_t sign = gb_opt(g, gb_str(g, "-"));
        uint32_t d0 = digit_class(g, 0, integer ? 0 : 9);
        uint32_t frac = gb_opt(g, gb_seq2(g, gb_str(g, "."), gb_plus(g, d0)));
        if (integer) return gb_seq3(g, sign, ip, frac);
        gb_bits e = {{0}}, pm = {{0}};
        gb_bits_set(&e, 'e'), gb_bits_set(&e, 'E'), gb_bits_set(&pm, '+'), gb_bits_set(&pm, '-');
        uint32_t ex[3] = {gb_class(g, &e), gb_opt(g, gb_class(g, &pm)), gb_plus(g, digit_class(g, 0, 9))};
        uint32_t parts[4] = {sign, ip, frac, gb_opt(g, gb_seq(g, ex, 3))};
        return gb_seq(g, parts, 4);
    }
    if (lo && hi && (dec_cmp(lo, hi) > 0 || (dec_cmp(lo, hi) == 0 && (lo_strict || hi_strict)))) return gb_nothing(g);
    jn_dec zero = {false, "0", ""};
    uint32_t alts[2], k = 0;
    /* negative values: magnitudes in [|hi| or 0 exclusive, |lo|] */
    if (!lo || lo->neg) {
        const jn_dec *mlo = &zero;
        bool mlo_strict = true;
        if (hi && hi->neg) mlo = hi, mlo_strict = hi_strict;
        jn_dec mhi;
        if (lo) mhi = *lo, mhi.neg = false;
        alts[k++] = gb_seq2(g, gb_str(g, "-"), magnitude(g, mlo, mlo_strict, lo ? &mhi : NULL, lo_strict, integer));
    }
    /* non-negative values: [max(lo, 0), hi] */
    if (!hi || !hi->neg) {
        bool skip = hi && is_zero(hi) && hi_strict;
        if (!skip) {
            const jn_dec *nlo = lo && !lo->neg ? lo : &zero;
            bool nlo_strict = lo && !lo->neg ? lo_strict : false;
            alts[k++] = magnitude(g, nlo, nlo_strict, hi, hi_strict, integer);
        }
    }
    return gb_alt(g, alts, k);
}
