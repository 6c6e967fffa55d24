/* JSON text the way deepseek-recipe prints tool schemas and tool-call
 * arguments into prompts: Python's json.dumps(ensure_ascii=False) layout,
 * numbers aside.
 *
 *   separators ", " and ": ", keys in their input order
 *   strings: \" \\ \n \r \t \b \f escaped, other controls as \u00XX, the
 *            rest (DEL, non-ASCII) as is
 *   integers as written; reals: the shortest digits that read back to the same
 *            double, positional (with ".0" when integral) when the decimal
 *            exponent is in range, else in exponent form:
 *              V4.1: Python's repr: [-4, 16), d.ddde+XX / d.ddde-XX (2 digits)
 *              V4:   ryu's layout:  [-5, 16), d.ddde+X / d.ddde-X (the V4
 *                    renderer is Rust; "+" added)
 *
 * The golden corpus (tests/data/golden/dsml/) pins these against the recipe. */
#include "text/dsml.h"

#include "base/strbuf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef di_strbuf jbuf;

static void put(jbuf *b, const char *s, size_t n) { (void)di_strbuf_put(b, s, n); }

static void puts_(jbuf *b, const char *s) { (void)di_strbuf_puts(b, s); }

void di_dsml_json_escape(const char *s, size_t n, void (*sink)(void *user, const char *s, size_t n), void *user) {
    size_t run = 0; /* bytes copied verbatim in one go */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char u[8];
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        default:
            if (c < 0x20) {
                snprintf(u, sizeof u, "\\u%04x", c);
                esc = u;
            }
        }
        if (!esc) {
            run++;
            continue;
        }
        sink(user, s + i - run, run);
        run = 0;
        sink(user, esc, strlen(esc));
    }
    sink(user, s + n - run, run);
}

static void put_string(jbuf *b, const char *s, size_t n) {
    put(b, "\"", 1);
    di_dsml_json_escape(s, n, di_strbuf_sink, b);
    put(b, "\"", 1);
}

/* Python's repr of a finite double. */
static void put_real(jbuf *b, double x, bool python) {
    char digits[40];
    int prec;
    /* Shortest %.{p}e that reads back exactly (17 always does). */
    for (prec = 0; prec < 17; prec++) {
        snprintf(digits, sizeof digits, "%.*e", prec, x);
        if (strtod(digits, NULL) == x) break;
    }
    snprintf(digits, sizeof digits, "%.*e", prec, x);
    /* digits = [-]d[.ddd]e(+|-)XX */
    char *e = strchr(digits, 'e');
    int exp10 = atoi(e + 1);
    *e = '\0';
    bool neg = digits[0] == '-';
    char mant[24];
    size_t nm = 0;
    for (const char *p = digits + neg; *p && nm < sizeof mant - 1; p++)
        if (*p != '.') mant[nm++] = *p;
    mant[nm] = '\0';
    char out[64];
    size_t o = 0;
    if (neg) out[o++] = '-';
    if (exp10 >= (python ? -4 : -5) && exp10 < 16) {
        if (exp10 < 0) {
            out[o++] = '0';
            out[o++] = '.';
            for (int k = -1; k > exp10; k--) out[o++] = '0';
            for (size_t k = 0; k < nm; k++) out[o++] = mant[k];
        } else {
            size_t int_digits = (size_t)exp10 + 1;
            for (size_t k = 0; k < int_digits; k++) out[o++] = k < nm ? mant[k] : '0';
            out[o++] = '.';
            if (nm > int_digits)
                for (size_t k = int_digits; k < nm; k++) out[o++] = mant[k];
            else
                out[o++] = '0';
        }
        out[o] = '\0';
    } else {
        out[o++] = mant[0];
        if (nm > 1) {
            out[o++] = '.';
            for (size_t k = 1; k < nm; k++) out[o++] = mant[k];
        }
        snprintf(out + o, sizeof out - o, python ? "e%c%02d" : "e%c%d", exp10 < 0 ? '-' : '+',
                 exp10 < 0 ? -exp10 : exp10);
    }
    puts_(b, out);
}

/* depth bounds the recursion on hostile input (jansson's parser already caps
 * nesting at 2048; values built in code could be deeper). */
#define DSML_JSON_MAX_DEPTH 4096

static void dump(jbuf *b, const json_t *v, bool python, int depth) {
    if (depth > DSML_JSON_MAX_DEPTH) {
        b->failed = true;
        return;
    }
    char num[32];
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        put(b, "{", 1);
        const char *key;
        json_t *val;
        bool first = true;
        json_object_foreach((json_t *)v, key, val) {
            if (!first) put(b, ", ", 2);
            first = false;
            put_string(b, key, strlen(key));
            put(b, ": ", 2);
            dump(b, val, python, depth + 1);
        }
        put(b, "}", 1);
        break;
    }
    case JSON_ARRAY:
        put(b, "[", 1);
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i) put(b, ", ", 2);
            dump(b, json_array_get(v, i), python, depth + 1);
        }
        put(b, "]", 1);
        break;
    case JSON_STRING: put_string(b, json_string_value(v), json_string_length(v)); break;
    case JSON_INTEGER:
        snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        puts_(b, num);
        break;
    case JSON_REAL: put_real(b, json_real_value(v), python); break;
    case JSON_TRUE: puts_(b, "true"); break;
    case JSON_FALSE: puts_(b, "false"); break;
    default: puts_(b, "null"); break;
    }
}

char *di_dsml_json_dumps(const json_t *v, di_dsml_version style) {
    jbuf b = {0};
    if (v) dump(&b, v, style == DI_DSML_V41, 0);
    else puts_(&b, "null");
    if (b.failed) {
        free(b.data);
        return NULL;
    }
    return b.data;
}
