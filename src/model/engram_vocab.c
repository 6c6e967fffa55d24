/* The Engram compressed vocabulary: DeepInfer 0.1.0
 * engram_metadata.py:CompressedVocabulary, built from a loaded di_tokenizer.
 *
 * For every id in order: piece = decode([id]) with special tokens kept
 * (di_tok_decode with render_special: byte-level pieces come out as raw
 * bytes, added tokens as their text). HF decodes bytes lossily, so a piece
 * that is not valid UTF-8 alone shows U+FFFD there; such pieces, and any
 * that hold a real U+FFFD, are keyed by their raw vocabulary spelling
 * (di_tok_text) so distinct byte pieces cannot collapse. Every other piece is
 * keyed by HF's normalizer Sequence
 *   NFKC, NFD, StripAccents, Lowercase, Replace(/[ \t\r\n]+/, " "),
 *   Replace(/^ $/, U+E000), Strip, Replace(U+E000, " ")
 * (falling back to the piece itself when that is empty), and compressed ids
 * number the distinct keys in order of first appearance.
 *
 * How each HF step is matched: NFKC/NFD by utf8proc; StripAccents drops
 * General_Category M (Mn, Mc, Me: unicode-normalization's is_combining_mark);
 * Lowercase is Rust's per-char to_lowercase, whose only multi-char
 * unconditional mapping (U+0130) NFD has already decomposed, so
 * utf8proc_tolower gives the same; /^ $/ under Oniguruma's line anchors can
 * only match a whole string " " once newlines are collapsed; Strip removes
 * Unicode White_Space (Rust char::is_whitespace) at both ends. */
#include "model/engram.h"

#include "base/strbuf.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#define SENTINEL_CP 0xE000u /* the private-use stand-in that keeps a lone " " */

/* Key bytes (NUL-terminated by di_strbuf, which nothing here relies on). */
typedef di_strbuf bytes;

static bool bytes_append(bytes *b, const void *p, size_t n) { return di_strbuf_put(b, p, n); }

/* Strict UTF-8 (what Rust's from_utf8 accepts): no overlongs, surrogates or
 * values past U+10FFFF. Returns the sequence length, 0 when invalid. */
static size_t utf8_next(const uint8_t *s, size_t n, uint32_t *cp) {
    uint8_t c = s[0];
    size_t len;
    uint32_t v, min;
    if (c < 0x80) return *cp = c, 1;
    if (c >= 0xC2 && c <= 0xDF) len = 2, v = c & 0x1Fu, min = 0x80;
    else if (c >= 0xE0 && c <= 0xEF) len = 3, v = c & 0x0Fu, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4) len = 4, v = c & 0x07u, min = 0x10000;
    else return 0;
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = v << 6 | (s[i] & 0x3Fu);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = v;
    return len;
}

/* True when HF's lossy decode of these bytes would contain U+FFFD. */
static bool shows_replacement_char(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t l = utf8_next((const uint8_t *)s + i, n - i, &cp);
        if (!l || cp == 0xFFFD) return true;
        i += l;
    }
    return false;
}

static bool is_white_space(uint32_t c) { /* Unicode White_Space */
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

static bool is_mark(uint32_t c) {
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    return k == UTF8PROC_CATEGORY_MN || k == UTF8PROC_CATEGORY_MC || k == UTF8PROC_CATEGORY_ME;
}

/* utf8proc_map into a malloc'd string; NULL on failure (input is valid). */
static char *unicode_map(const char *s, size_t n, int opts, size_t *out_len) {
    utf8proc_uint8_t *res = NULL;
    utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &res,
                                      (utf8proc_option_t)(UTF8PROC_STABLE | opts));
    if (r < 0) {
        free(res);
        return NULL;
    }
    *out_len = (size_t)r;
    return (char *)res;
}

/* The normalizer Sequence on a valid UTF-8 piece; appends the key to *key.
 * false (with *st and err set) on failure. */
static bool normalize_key(const char *piece, size_t n, bytes *key, di_error *err, di_status *st) {
    size_t n1 = 0, n2 = 0;
    char *nfkc = unicode_map(piece, n, UTF8PROC_COMPOSE | UTF8PROC_COMPAT, &n1);
    char *nfd = nfkc ? unicode_map(nfkc, n1, UTF8PROC_DECOMPOSE, &n2) : NULL;
    uint32_t *cps = nfd ? malloc((n2 + 1) * sizeof *cps) : NULL;
    free(nfkc);
    if (!cps) {
        free(nfd);
        *st = di_error_set(err, DI_ERR_NOMEM, "engram vocab: normalizing a token failed");
        return false;
    }
    /* StripAccents, Lowercase and the whitespace collapse, one code point at a time. */
    size_t m = 0;
    for (size_t i = 0; i < n2;) {
        uint32_t cp = 0;
        size_t l = utf8_next((const uint8_t *)nfd + i, n2 - i, &cp);
        if (!l) l = 1, cp = 0xFFFD; /* cannot happen: utf8proc emits valid UTF-8 */
        i += l;
        if (is_mark(cp)) continue;
        cp = (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp);
        if (cp == ' ' || cp == '\t' || cp == '\r' || cp == '\n') {
            /* every ' ' already kept ends a run of this class: extend it */
            if (m && cps[m - 1] == ' ') continue;
            cp = ' ';
        }
        cps[m++] = cp;
    }
    free(nfd);
    if (m == 1 && cps[0] == ' ') cps[0] = SENTINEL_CP;
    size_t lo = 0, hi = m;
    while (lo < hi && is_white_space(cps[lo])) lo++;
    while (hi > lo && is_white_space(cps[hi - 1])) hi--;
    size_t start = key->len;
    for (size_t i = lo; i < hi; i++) {
        uint32_t cp = cps[i] == SENTINEL_CP ? ' ' : cps[i];
        utf8proc_uint8_t enc[4];
        utf8proc_ssize_t el = utf8proc_encode_char((utf8proc_int32_t)cp, enc);
        if (!bytes_append(key, enc, (size_t)el)) goto nomem;
    }
    if (key->len == start && !bytes_append(key, piece, n)) goto nomem; /* `... or text` */
    free(cps);
    return true;
nomem:
    free(cps);
    *st = di_error_set(err, DI_ERR_NOMEM, "engram vocab: out of memory");
    return false;
}

/* key -> compressed id: open addressing over (offset, length) into one
 * byte buffer of all distinct keys. */
typedef struct key_map {
    int32_t *slots; /* (cap) compressed id, -1 when empty */
    size_t cap;
    uint32_t *off, *len; /* (n) where key id lives in keys */
    bytes keys;
    int32_t n;
} key_map;

static uint64_t fnv1a(const char *s, size_t n) {
    uint64_t h = 0xCBF29CE484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 0x100000001B3ull;
    return h;
}

/* The id of key s[0..n), a new one when unseen (-1 when out of memory).
 * The map holds at most n_vocab keys and cap >= 2 * n_vocab, so a slot is
 * always free. */
static int32_t key_map_intern(key_map *km, const char *s, size_t n) {
    size_t i = (size_t)fnv1a(s, n) & (km->cap - 1);
    for (;; i = (i + 1) & (km->cap - 1)) {
        int32_t id = km->slots[i];
        if (id < 0) break;
        if (km->len[id] == n && !memcmp(km->keys.data + km->off[id], s, n)) return id;
    }
    if (km->keys.len > UINT32_MAX - n) return -1;
    int32_t id = km->n++;
    km->off[id] = (uint32_t)km->keys.len;
    km->len[id] = (uint32_t)n;
    if (!bytes_append(&km->keys, s, n)) return -1;
    km->slots[i] = id;
    return id;
}

static void key_map_free(key_map *km) {
    free(km->slots);
    free(km->off);
    free(km->len);
    free(km->keys.data);
}

/* DeepInfer asserts token_to_id("<｜▁pad▁｜>") == 2. */
static di_status check_pad(const di_tokenizer *t, di_error *err) {
    const char *pad = DI_ENGRAM_PAD_TOKEN_TEXT;
    int32_t id = di_tok_find(t, pad, strlen(pad));
    if (id == DI_TOK_NULL)
        return di_error_set(err, DI_ERR_FORMAT, "engram vocab: the tokenizer has no %s token (Engram needs it at id %d)",
                            pad, DI_ENGRAM_PAD_TOKEN_ID);
    if (id != DI_ENGRAM_PAD_TOKEN_ID)
        return di_error_set(err, DI_ERR_FORMAT, "engram vocab: expected the %s token at id %d, got %d", pad,
                            DI_ENGRAM_PAD_TOKEN_ID, id);
    return DI_OK;
}

di_status di_engram_vocab_build(const di_tokenizer *t, di_engram_vocab *out, di_error *err) {
    if (!t || !out) return di_error_set(err, DI_ERR_INVALID_ARG, "engram vocab: NULL argument");
    memset(out, 0, sizeof *out);
    di_status st = check_pad(t, err);
    if (st) return st;
    int32_t n_vocab = di_tok_vocab_size(t);
    key_map km = {0};
    bytes key = {0};
    km.cap = 16;
    while (km.cap < 2 * (size_t)n_vocab) km.cap *= 2;
    km.slots = malloc(km.cap * sizeof *km.slots);
    km.off = malloc((size_t)n_vocab * sizeof *km.off);
    km.len = malloc((size_t)n_vocab * sizeof *km.len);
    int32_t *lookup = malloc((size_t)n_vocab * sizeof *lookup);
    if (!km.slots || !km.off || !km.len || !lookup) goto nomem;
    memset(km.slots, 0xff, km.cap * sizeof *km.slots);

    for (int32_t id = 0; id < n_vocab; id++) {
        char *piece = NULL;
        size_t n = 0;
        if ((st = di_tok_decode(t, &id, 1, true, &piece, &n, err))) goto fail;
        key.len = 0;
        bool ok = true;
        if (shows_replacement_char(piece, n)) {
            size_t raw_len = 0;
            const char *raw = di_tok_text(t, id, &raw_len);
            ok = bytes_append(&key, raw, raw_len);
            if (!ok) st = di_error_set(err, DI_ERR_NOMEM, "engram vocab: out of memory");
        } else {
            ok = normalize_key(piece, n, &key, err, &st);
        }
        free(piece);
        if (!ok) goto fail;
        int32_t cid = key_map_intern(&km, key.data ? key.data : "", key.len);
        if (cid < 0) goto nomem;
        lookup[id] = cid;
    }
    out->lookup = lookup;
    out->n_vocab = n_vocab;
    out->n_compressed = km.n;
    out->pad = lookup[DI_ENGRAM_PAD_TOKEN_ID];
    key_map_free(&km);
    free(key.data);
    return DI_OK;
nomem:
    st = di_error_set(err, DI_ERR_NOMEM, "engram vocab: out of memory");
fail:
    free(lookup);
    key_map_free(&km);
    free(key.data);
    return st;
}

void di_engram_vocab_free(di_engram_vocab *v) {
    if (!v) return;
    free(v->lookup);
    memset(v, 0, sizeof *v);
}
