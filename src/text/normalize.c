/* Normalizers of HF tokenizer.json (NFC, NFD, NFKC, NFKD via utf8proc,
 * Lowercase, Replace, Prepend, Strip, BertNormalizer, StripAccents,
 * Precompiled), applied in order to each text segment
 * between added tokens. Input is valid UTF-8 and so is every output. */
#include "text/tok_internal.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

void tok_norm_free(tok_norm_step *steps, size_t n) {
    for (size_t i = 0; i < n; i++) {
        pcre2_code_free(steps[i].re);
        free(steps[i].pattern);
        free(steps[i].content);
    }
    free(steps);
}

static di_status nomem(di_error *err) {
    return di_error_set(err, DI_ERR_NOMEM, "tokenizer: out of memory");
}

static di_status unicode_form(tok_norm_kind k, const char *in, size_t n, tok_buf *out, di_error *err) {
    int opts = UTF8PROC_STABLE;
    switch (k) {
    case TOK_NORM_NFC: opts |= UTF8PROC_COMPOSE; break;
    case TOK_NORM_NFD: opts |= UTF8PROC_DECOMPOSE; break;
    case TOK_NORM_NFKC: opts |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    default: opts |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
    }
    utf8proc_uint8_t *res = NULL;
    utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)in, (utf8proc_ssize_t)n, &res,
                                      (utf8proc_option_t)opts);
    if (r < 0) {
        free(res);
        return di_error_set(err, r == UTF8PROC_ERROR_NOMEM ? DI_ERR_NOMEM : DI_ERR_INVALID_ARG,
                            "normalizer: %s", utf8proc_errmsg(r));
    }
    bool ok = tok_buf_append(out, res, (size_t)r);
    free(res);
    return ok ? DI_OK : nomem(err);
}

static di_status lowercase(const char *in, size_t n, tok_buf *out, di_error *err) {
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t l = tok_utf8_decode((const uint8_t *)in + i, n - i, &cp);
        if (!l) return di_error_set(err, DI_ERR_INVALID_ARG, "normalizer: invalid UTF-8");
        char enc[4];
        size_t el = tok_utf8_encode((uint32_t)utf8proc_tolower((utf8proc_int32_t)cp), enc);
        if (!tok_buf_append(out, enc, el)) return nomem(err);
        i += l;
    }
    return DI_OK;
}

static di_status replace(const tok_norm_step *st, const char *in, size_t n, tok_buf *out,
                         tok_scratch *s, di_error *err) {
    if (!st->re) {
        if (st->pattern_len == 0) return tok_buf_append(out, in, n) ? DI_OK : nomem(err);
        size_t i = 0;
        while (i < n) {
            const char *hit = NULL;
            if (n - i >= st->pattern_len)
                hit = memmem(in + i, n - i, st->pattern, st->pattern_len);
            if (!hit) break;
            size_t at = (size_t)(hit - in);
            if (!tok_buf_append(out, in + i, at - i) || !tok_buf_append(out, st->content, st->content_len))
                return nomem(err);
            i = at + st->pattern_len;
        }
        return tok_buf_append(out, in + i, n - i) ? DI_OK : nomem(err);
    }
    if (!s->md) {
        s->md = pcre2_match_data_create(1, NULL);
        if (!s->md) return nomem(err);
    }
    size_t pos = 0, last = 0;
    while (pos <= n) {
        int r = pcre2_match(st->re, (PCRE2_SPTR)in, n, pos, PCRE2_NO_UTF_CHECK, s->md, s->mctx);
        if (r == PCRE2_ERROR_NOMATCH) break;
        if (r < 0) return di_error_set(err, DI_ERR_INTERNAL, "normalizer regex failed (%d)", r);
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->md);
        if (ov[1] == ov[0]) {
            if (ov[0] >= n) break;
            pos = ov[0] + tok_utf8_len((uint8_t)in[ov[0]]);
            continue;
        }
        if (!tok_buf_append(out, in + last, ov[0] - last) || !tok_buf_append(out, st->content, st->content_len))
            return nomem(err);
        last = pos = ov[1];
    }
    return tok_buf_append(out, in + last, n - last) ? DI_OK : nomem(err);
}

/* Rust's char::is_whitespace (Unicode White_Space), as HF's BERT code uses. */
static bool is_white_space(uint32_t cp) {
    return (cp >= 9 && cp <= 13) || cp == ' ' || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
           cp == 0x3000;
}

/* General category C (Cc, Cf, Cn, Co, Cs). */
static bool is_other(uint32_t cp) {
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return c == UTF8PROC_CATEGORY_CC || c == UTF8PROC_CATEGORY_CF || c == UTF8PROC_CATEGORY_CN ||
           c == UTF8PROC_CATEGORY_CO || c == UTF8PROC_CATEGORY_CS;
}

/* The CJK ideograph blocks BERT pads with spaces. */
static bool is_cjk_ideograph(uint32_t cp) {
    return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0x20000 && cp <= 0x2A6DF) ||
           (cp >= 0x2A700 && cp <= 0x2B73F) || (cp >= 0x2B740 && cp <= 0x2B81F) ||
           (cp >= 0x2B920 && cp <= 0x2CEAF) || (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

/* What filter_chars drops of the marks: BERT's accent stripping drops
 * nonspacing marks only (Mn), HF's StripAccents every combining mark
 * (Mn, Mc, Me: it drops Devanagari's spacing vowel signs too). */
enum { DROP_NO_MARKS, DROP_MN, DROP_MARKS };

static bool dropped_mark(uint32_t cp, int drop) {
    if (drop == DROP_NO_MARKS) return false;
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return c == UTF8PROC_CATEGORY_MN || (drop == DROP_MARKS && (c == UTF8PROC_CATEGORY_MC || c == UTF8PROC_CATEGORY_ME));
}

/* Copies in to out code point by code point: drop (clean: NUL, U+FFFD and
 * controls other than \t \n \r; marks as drop says), map White_Space to
 * ' ' (clean), pad CJK ideographs with spaces (cjk). */
static di_status filter_chars(const char *in, size_t n, bool clean, bool cjk, int drop, tok_buf *out,
                              di_error *err) {
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t l = tok_utf8_decode((const uint8_t *)in + i, n - i, &cp);
        if (!l) return di_error_set(err, DI_ERR_INVALID_ARG, "normalizer: invalid UTF-8");
        const char *p = in + i;
        i += l;
        bool tnr = cp == '\t' || cp == '\n' || cp == '\r';
        if (clean && (cp == 0 || cp == 0xFFFD || (!tnr && is_other(cp)))) continue;
        if (dropped_mark(cp, drop)) continue;
        bool ok;
        if (clean && (tnr || is_white_space(cp))) ok = tok_buf_append(out, " ", 1);
        else if (cjk && is_cjk_ideograph(cp))
            ok = tok_buf_append(out, " ", 1) && tok_buf_append(out, p, l) && tok_buf_append(out, " ", 1);
        else ok = tok_buf_append(out, p, l);
        if (!ok) return nomem(err);
    }
    return DI_OK;
}

/* HF BertNormalizer: clean text, pad CJK, (NFD + drop Mn), lowercase. */
static di_status bert(const tok_norm_step *st, const char *in, size_t n, tok_buf *out, di_error *err) {
    tok_buf a = {0}, b = {0};
    di_status rc = filter_chars(in, n, st->bert_clean, st->bert_chinese, DROP_NO_MARKS, &a, err);
    if (!rc && st->bert_strip_accents && a.len) {
        if (!(rc = unicode_form(TOK_NORM_NFD, a.data, a.len, &b, err))) {
            a.len = 0;
            rc = filter_chars(b.data, b.len, false, false, DROP_MN, &a, err);
        }
    }
    if (!rc) {
        if (st->bert_lowercase) rc = lowercase(a.data, a.len, out, err);
        else if (!tok_buf_append(out, a.data, a.len)) rc = nomem(err);
    }
    tok_buf_free(&a);
    tok_buf_free(&b);
    return rc;
}

static bool is_space_at(const char *s, size_t n, size_t *len) {
    uint32_t cp;
    size_t l = tok_utf8_decode((const uint8_t *)s, n, &cp);
    if (!l) return false;
    *len = l;
    return cp == ' ' || (cp >= 9 && cp <= 13) || utf8proc_category((utf8proc_int32_t)cp) == UTF8PROC_CATEGORY_ZS ||
           cp == 0x85 || cp == 0x2028 || cp == 0x2029;
}

di_status tok_normalize(const di_tokenizer *t, const char *text, size_t len, tok_scratch *s,
                        di_error *err) {
    tok_buf a = {0};
    s->norm.len = 0;
    if (!tok_buf_append(&s->norm, text, len)) return nomem(err);
    for (size_t i = 0; i < t->n_norm; i++) {
        const tok_norm_step *st = &t->norm[i];
        const char *in = s->norm.data;
        size_t n = s->norm.len;
        di_status rc = DI_OK;
        a.len = 0;
        if (!tok_buf_reserve(&a, n)) {
            tok_buf_free(&a);
            return nomem(err);
        }
        switch (st->kind) {
        case TOK_NORM_NFC:
        case TOK_NORM_NFD:
        case TOK_NORM_NFKC:
        case TOK_NORM_NFKD: rc = n ? unicode_form(st->kind, in, n, &a, err) : DI_OK; break;
        case TOK_NORM_LOWERCASE: rc = lowercase(in, n, &a, err); break;
        case TOK_NORM_REPLACE: rc = replace(st, in, n, &a, s, err); break;
        case TOK_NORM_BERT: rc = bert(st, in, n, &a, err); break;
        case TOK_NORM_PRECOMPILED: rc = tok_precompiled_apply(st->content, st->content_len, in, n, &a, err); break;
        case TOK_NORM_STRIP_ACCENTS: rc = filter_chars(in, n, false, false, DROP_MARKS, &a, err); break;
        case TOK_NORM_PREPEND:
            /* HF prepends only to non-empty text */
            if (n && (!tok_buf_append(&a, st->content, st->content_len) || !tok_buf_append(&a, in, n)))
                rc = nomem(err);
            break;
        case TOK_NORM_STRIP: {
            size_t b = 0, e = n, l;
            if (st->strip_left)
                while (b < e && is_space_at(in + b, e - b, &l)) b += l;
            if (st->strip_right)
                while (e > b) {
                    size_t k = e - 1;
                    while (k > b && ((uint8_t)in[k] & 0xC0) == 0x80) k--;
                    if (!is_space_at(in + k, e - k, &l)) break;
                    e = k;
                }
            if (!tok_buf_append(&a, in + b, e - b)) rc = nomem(err);
            break;
        }
        }
        if (rc) {
            tok_buf_free(&a);
            return rc;
        }
        tok_buf x = s->norm;
        s->norm = a;
        a = x;
    }
    tok_buf_free(&a);
    return DI_OK;
}
