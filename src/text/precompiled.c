/* The Precompiled normalizer of SentencePiece models (T5, ALBERT, XLM-R,
 * mT5 ...): the model's own normalization rules (e.g. nmt_nfkc) compiled
 * into a blob that tokenizer.json carries base64-encoded.
 *
 * Blob layout (little endian): u32 trie_bytes, then trie_bytes / 4 u32
 * units of a darts-clone double-array trie over UTF-8 keys, then the
 * replacement strings, each NUL-terminated; a key's trie value is the
 * offset of its replacement.
 *
 * Applied as HF tokenizers does (its rules, quirks included): the text is
 * cut into extended grapheme clusters; a cluster shorter than 6 bytes whose
 * leading bytes match a key is replaced whole by the replacement of the
 * shortest matching key; otherwise each character is looked up alone.
 *
 * The blob is hostile: it is checked once at load (sizes), and every trie
 * step and replacement offset is bounds-checked when used. */
#include "text/tok_internal.h"

#include "base/base64.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* Graphemes of at least this many bytes are looked up char by char (HF). */
#define GRAPHEME_WHOLE_MAX_BYTES 6

di_status tok_precompiled_load(const char *b64, size_t n, char **blob, size_t *blob_len, di_error *err) {
    char *out = malloc(n / 4 * 3 + 3);
    if (!out) return di_error_set(err, DI_ERR_NOMEM, "tokenizer: out of memory");
    size_t i = 0, o, bad;
    while (i < n && b64[i] != '=') i++;
    if (!di_base64_decode(b64, i, (uint8_t *)out, &o, &bad)) {
        free(out);
        return di_error_set(err, DI_ERR_FORMAT, "Precompiled charsmap: not base64 (byte %zu)", bad);
    }
    for (; i < n; i++)
        if (b64[i] != '=') {
            free(out);
            return di_error_set(err, DI_ERR_FORMAT, "Precompiled charsmap: data after base64 padding");
        }
    uint32_t trie_bytes = 0;
    if (o >= 4) memcpy(&trie_bytes, out, 4); /* little endian hosts only (x86-64, arm64) */
    if (o < 4 || trie_bytes % 4 || trie_bytes > o - 4 || trie_bytes == 0) {
        free(out);
        return di_error_set(err, DI_ERR_FORMAT, "Precompiled charsmap: bad trie size");
    }
    *blob = out;
    *blob_len = o;
    return DI_OK;
}

typedef struct charsmap {
    const uint32_t *units; /* unaligned in the blob: read with memcpy */
    size_t n_units;
    const char *repl;
    size_t repl_len;
} charsmap;

static uint32_t unit_at(const charsmap *m, size_t i) {
    uint32_t u;
    memcpy(&u, (const char *)m->units + i * 4, 4);
    return u;
}

static uint32_t offset_of(uint32_t u) { return (u >> 10) << ((u & (1u << 9)) >> 6); }

/* The replacement of the shortest key that is a prefix of s[0..n), or NULL. */
static const char *lookup(const charsmap *m, const char *s, size_t n, size_t *len) {
    size_t pos = offset_of(unit_at(m, 0));
    for (size_t i = 0; i < n; i++) {
        uint8_t c = (uint8_t)s[i];
        if (c == 0) break;
        pos ^= c;
        if (pos >= m->n_units) return NULL;
        uint32_t u = unit_at(m, pos);
        if ((u & ((1u << 31) | 0xFF)) != c) return NULL;
        pos ^= offset_of(u);
        if (pos >= m->n_units) return NULL;
        if ((u >> 8) & 1) {
            size_t at = unit_at(m, pos) & ((1u << 31) - 1);
            if (at >= m->repl_len) return NULL;
            const char *end = memchr(m->repl + at, '\0', m->repl_len - at);
            *len = end ? (size_t)(end - (m->repl + at)) : m->repl_len - at;
            return m->repl + at;
        }
    }
    return NULL;
}

di_status tok_precompiled_apply(const char *blob, size_t blob_len, const char *in, size_t n, tok_buf *out,
                                di_error *err) {
    uint32_t trie_bytes;
    memcpy(&trie_bytes, blob, 4);
    charsmap m = {(const uint32_t *)(blob + 4), trie_bytes / 4, blob + 4 + trie_bytes, blob_len - 4 - trie_bytes};
    utf8proc_int32_t state = 0, prev = -1;
    size_t g = 0; /* start of the current grapheme */
    for (size_t i = 0; i <= n;) {
        uint32_t cp = 0;
        size_t l = 0;
        if (i < n) {
            l = tok_utf8_decode((const uint8_t *)in + i, n - i, &cp);
            if (!l) return di_error_set(err, DI_ERR_INVALID_ARG, "normalizer: invalid UTF-8");
        }
        bool boundary = i == n || (prev >= 0 && utf8proc_grapheme_break_stateful(prev, (utf8proc_int32_t)cp, &state));
        if (boundary && i > g) {
            const char *r;
            size_t rl = 0;
            if (i - g < GRAPHEME_WHOLE_MAX_BYTES && (r = lookup(&m, in + g, i - g, &rl))) {
                if (!tok_buf_append(out, r, rl)) goto nomem;
            } else {
                for (size_t k = g; k < i;) {
                    size_t cl = tok_utf8_len((uint8_t)in[k]);
                    if ((r = lookup(&m, in + k, cl, &rl))) {
                        if (!tok_buf_append(out, r, rl)) goto nomem;
                    } else if (!tok_buf_append(out, in + k, cl)) {
                        goto nomem;
                    }
                    k += cl;
                }
            }
            g = i;
        }
        if (i == n) break;
        prev = (utf8proc_int32_t)cp;
        i += l;
    }
    /* Replacements come from the file: keep the output valid UTF-8. */
    if (!tok_utf8_valid((const uint8_t *)out->data, out->len))
        return di_error_set(err, DI_ERR_FORMAT, "Precompiled charsmap: replacement is not UTF-8");
    return DI_OK;
nomem:
    return di_error_set(err, DI_ERR_NOMEM, "tokenizer: out of memory");
}
