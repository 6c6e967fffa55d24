/* Streaming detokenizer: ids in, displayable text out.
 *
 * Two holding areas sit between the token pieces and the caller:
 *  pend: raw bytes that end in an incomplete UTF-8 sequence (a character
 *        split over byte-fallback or byte-level tokens) - kept until the
 *        rest arrives; bytes that can never be part of a character become
 *        U+FFFD, as HF's decode(errors="replace") does;
 *  hold: valid text that could be the beginning of a stop string - kept
 *        until the following text shows whether the stop string completes.
 * Everything else is returned at once. */
#include "text/tok_internal.h"

#include "base/alloc.h"

#include <stdlib.h>
#include <string.h>

static const char REPLACEMENT[] = "\xEF\xBF\xBD"; /* U+FFFD */

struct di_tok_detok {
    const di_tokenizer *t;
    bool render_special;
    char **stops;      /* (n_stops) owned copies */
    size_t *stop_len;  /* (n_stops) */
    size_t n_stops;
    tok_buf pend, hold, outb;
    bool first;        /* nothing visible yet: the SentencePiece leading space rule applies */
    int stopped;       /* stop string index, or -1 */
};

di_status di_tok_detok_create(const di_tokenizer *t, const di_tok_detok_opts *opts, di_tok_detok **out,
                              di_error *err) {
    if (!t || !out) return di_error_set(err, DI_ERR_INVALID_ARG, "detokenizer: NULL argument");
    di_tok_detok *d = di_calloc(1, sizeof *d);
    if (!d) return di_error_set(err, DI_ERR_NOMEM, "detokenizer: out of memory");
    d->t = t;
    d->first = true;
    d->stopped = -1;
    if (opts) {
        d->render_special = opts->render_special;
        if (opts->n_stops) {
            if (!opts->stops) {
                di_tok_detok_free(d);
                return di_error_set(err, DI_ERR_INVALID_ARG, "detokenizer: stops is NULL");
            }
            d->stops = di_calloc(opts->n_stops, sizeof *d->stops);
            d->stop_len = di_calloc(opts->n_stops, sizeof *d->stop_len);
            if (!d->stops || !d->stop_len) {
                di_tok_detok_free(d);
                return di_error_set(err, DI_ERR_NOMEM, "detokenizer: out of memory");
            }
            d->n_stops = opts->n_stops;
            for (size_t i = 0; i < opts->n_stops; i++) {
                const char *s = opts->stops[i];
                size_t n = s ? strlen(s) : 0;
                if (!n || !tok_utf8_valid((const uint8_t *)s, n)) {
                    di_tok_detok_free(d);
                    return di_error_set(err, DI_ERR_INVALID_ARG, "detokenizer: stop string %zu is empty or not UTF-8", i);
                }
                d->stops[i] = di_strdup(s);
                d->stop_len[i] = n;
                if (!d->stops[i]) {
                    di_tok_detok_free(d);
                    return di_error_set(err, DI_ERR_NOMEM, "detokenizer: out of memory");
                }
            }
        }
    }
    *out = d;
    return DI_OK;
}

void di_tok_detok_free(di_tok_detok *d) {
    if (!d) return;
    for (size_t i = 0; i < d->n_stops; i++) free(d->stops[i]);
    free(d->stops);
    free(d->stop_len);
    tok_buf_free(&d->pend);
    tok_buf_free(&d->hold);
    tok_buf_free(&d->outb);
    free(d);
}

void di_tok_detok_reset(di_tok_detok *d) {
    d->pend.len = d->hold.len = d->outb.len = 0;
    d->first = true;
    d->stopped = -1;
}

/* True when s[0..n) (n < sequence length) can still become a character. */
static bool utf8_incomplete(const uint8_t *s, size_t n) {
    uint8_t c = s[0];
    size_t need = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (!need || n >= need) return false;
    for (size_t i = 1; i < n; i++)
        if ((s[i] & 0xC0) != 0x80) return false;
    /* second-byte limits that rule out overlongs and surrogates early */
    if (n >= 2 && ((c == 0xE0 && s[1] < 0xA0) || (c == 0xED && s[1] > 0x9F) || (c == 0xF0 && s[1] < 0x90) ||
                   (c == 0xF4 && s[1] > 0x8F)))
        return false;
    return true;
}

/* Moves the complete characters of pend into hold; at_end: flush all. */
static bool drain_pending(di_tok_detok *d, bool at_end) {
    const uint8_t *p = (const uint8_t *)d->pend.data;
    size_t n = d->pend.len, i = 0;
    while (i < n) {
        uint32_t cp;
        size_t l = tok_utf8_decode(p + i, n - i, &cp);
        if (l) {
            if (!tok_buf_append(&d->hold, p + i, l)) return false;
            i += l;
        } else if (!at_end && utf8_incomplete(p + i, n - i)) {
            break;
        } else {
            if (!tok_buf_append(&d->hold, REPLACEMENT, 3)) return false;
            /* an incomplete tail at the end counts as one bad character */
            i = at_end && utf8_incomplete(p + i, n - i) ? n : i + 1;
        }
    }
    if (i && n > i) memmove(d->pend.data, d->pend.data + i, n - i);
    d->pend.len = n - i;
    return true;
}

/* Emits what of hold is safe; finds stop strings. */
static bool release(di_tok_detok *d, bool at_end) {
    size_t n = d->hold.len, best = SIZE_MAX;
    int which = -1;
    for (size_t k = 0; k < d->n_stops; k++) {
        if (d->stop_len[k] > n) continue;
        const char *hit = memmem(d->hold.data, n, d->stops[k], d->stop_len[k]);
        if (hit && (size_t)(hit - d->hold.data) < best) best = (size_t)(hit - d->hold.data), which = (int)k;
    }
    if (which >= 0) {
        d->stopped = which;
        bool ok = tok_buf_append(&d->outb, d->hold.data, best);
        d->hold.len = 0;
        d->pend.len = 0;
        return ok;
    }
    size_t keep = 0;
    if (!at_end) {
        /* longest suffix of hold that is a proper prefix of a stop string */
        for (size_t k = 0; k < d->n_stops; k++) {
            size_t max = d->stop_len[k] - 1 < n ? d->stop_len[k] - 1 : n;
            for (size_t l = max; l > keep; l--)
                if (!memcmp(d->hold.data + n - l, d->stops[k], l)) {
                    keep = l;
                    break;
                }
        }
    }
    if (!tok_buf_append(&d->outb, d->hold.data, n - keep)) return false;
    if (keep && n > keep) memmove(d->hold.data, d->hold.data + n - keep, keep);
    d->hold.len = keep;
    return true;
}

static void set_out(di_tok_detok *d, di_tok_detok_out *out) {
    if (!d->outb.data) tok_buf_reserve(&d->outb, 0);
    if (out) {
        out->text = d->outb.data ? d->outb.data : "";
        out->len = d->outb.len;
        out->stop_index = d->stopped;
    }
}

di_status di_tok_detok_push(di_tok_detok *d, int32_t id, di_tok_detok_out *out, di_error *err) {
    if (!d) return di_error_set(err, DI_ERR_INVALID_ARG, "detokenizer: NULL detokenizer");
    d->outb.len = 0;
    if (id < 0 || id >= d->t->n_vocab) {
        set_out(d, out);
        return di_error_set(err, DI_ERR_RANGE, "detokenizer: token id %d out of range [0, %d)", id, d->t->n_vocab);
    }
    if (d->stopped < 0) {
        const tok_entry *e = &d->t->tokens[id];
        int64_t n = di_tok_piece(d->t, id, d->render_special, NULL, 0);
        if (n > 0) {
            const char *p = d->t->strings.data + e->piece_off;
            if (d->first && d->t->strip_first_space && p[0] == ' ') p++, n--;
            d->first = false;
            if (!tok_buf_append(&d->pend, p, (size_t)n) || !drain_pending(d, false) || !release(d, false)) {
                set_out(d, out);
                return di_error_set(err, DI_ERR_NOMEM, "detokenizer: out of memory");
            }
        }
    }
    set_out(d, out);
    return DI_OK;
}

di_status di_tok_detok_flush(di_tok_detok *d, di_tok_detok_out *out, di_error *err) {
    if (!d) return di_error_set(err, DI_ERR_INVALID_ARG, "detokenizer: NULL detokenizer");
    d->outb.len = 0;
    if (d->stopped < 0 && (!drain_pending(d, true) || !release(d, true))) {
        set_out(d, out);
        return di_error_set(err, DI_ERR_NOMEM, "detokenizer: out of memory");
    }
    set_out(d, out);
    return DI_OK;
}
