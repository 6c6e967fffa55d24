/* Vocabulary storage shared by every tokenizer kind: growable buffers, UTF-8
 * and GPT-2 byte-level helpers, the key and merge hash maps, and the steps
 * that turn a loaded token list into lookup tables (tok_finish). */
#include "text/tok_internal.h"

#include "base/alloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- buffers ------------------------------------------------------------- */

bool tok_buf_reserve(tok_buf *b, size_t extra) {
    if (extra > SIZE_MAX - b->len - 1) return false;
    size_t need = b->len + extra + 1; /* room for a NUL */
    if (need <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need) cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    char *p = realloc(b->data, cap);
    if (!p) return false;
    b->data = p;
    b->cap = cap;
    return true;
}

bool tok_buf_append(tok_buf *b, const void *p, size_t n) {
    if (!tok_buf_reserve(b, n)) return false;
    if (n) memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return true;
}

void tok_buf_free(tok_buf *b) {
    free(b->data);
    memset(b, 0, sizeof *b);
}

bool tok_ids_push(di_tok_ids *ids, int32_t id) {
    if (ids->n == ids->cap) {
        size_t cap = ids->cap ? ids->cap * 2 : 64;
        int32_t *p = di_realloc_array(ids->data, cap, sizeof *p);
        if (!p) return false;
        ids->data = p;
        ids->cap = cap;
    }
    ids->data[ids->n++] = id;
    return true;
}

void di_tok_ids_free(di_tok_ids *ids) {
    if (!ids) return;
    free(ids->data);
    memset(ids, 0, sizeof *ids);
}

/* ---- UTF-8 ----------------------------------------------------------------- */

size_t tok_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp) {
    if (n == 0) return 0;
    uint8_t c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    size_t len;
    uint32_t v, min;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2, v = c & 0x1F, min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3, v = c & 0x0F, min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4, v = c & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = v << 6 | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = v;
    return len;
}

bool tok_utf8_valid(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        /* ASCII fast path: 8 bytes at a time */
        while (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (w & 0x8080808080808080ull) break;
            i += 8;
        }
        if (i >= n) break;
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        size_t l = tok_utf8_decode(s + i, n - i, &cp);
        if (!l) return false;
        i += l;
    }
    return true;
}

size_t tok_utf8_encode(uint32_t cp, char *out) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12);
        out[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | cp >> 18);
    out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* GPT-2's mapping: printable Latin-1 bytes stand for themselves; the other 68
 * bytes (controls, space, DEL, NBSP, soft hyphen) are moved, in byte order,
 * to U+0100 upwards so every byte has a visible character. */
static bool byte_is_printable(uint8_t b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
}

uint32_t tok_byte_to_cp(uint8_t b) {
    if (byte_is_printable(b)) return b;
    uint32_t n = 0; /* rank of b among the non-printable bytes */
    for (uint32_t x = 0; x < b; x++)
        if (!byte_is_printable((uint8_t)x)) n++;
    return 256 + n;
}

int tok_cp_to_byte(uint32_t cp) {
    if (cp < 256) return byte_is_printable((uint8_t)cp) ? (int)cp : -1;
    if (cp >= 256 + 68) return -1;
    uint32_t n = cp - 256;
    for (uint32_t x = 0; x < 256; x++)
        if (!byte_is_printable((uint8_t)x) && n-- == 0) return (int)x;
    return -1;
}

bool tok_bytelevel_decode(const char *s, size_t n, tok_buf *out) {
    size_t start = out->len;
    if (!tok_buf_reserve(out, n)) return false;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t l = tok_utf8_decode((const uint8_t *)s + i, n - i, &cp);
        int b = l ? tok_cp_to_byte(cp) : -1;
        if (b < 0) {
            out->len = start;
            return false;
        }
        out->data[out->len++] = (char)b;
        i += l;
    }
    out->data[out->len] = '\0';
    return true;
}

bool tok_bytelevel_encode(const char *s, size_t n, tok_buf *out) {
    if (!tok_buf_reserve(out, n * 2)) return false;
    for (size_t i = 0; i < n; i++) out->len += tok_utf8_encode(tok_byte_to_cp((uint8_t)s[i]), out->data + out->len);
    out->data[out->len] = '\0';
    return true;
}

/* ---- hashing ------------------------------------------------------------- */

uint64_t tok_hash(const void *p, size_t n) {
    /* FNV-1a with a final avalanche; keys are short token strings. */
    const uint8_t *s = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ull;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

static size_t pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n) c *= 2;
    return c;
}

bool tok_pair_map_init(tok_pair_map *m, size_t n_expected) {
    size_t cap = pow2_at_least(n_expected * 2 + 1);
    m->keys = di_malloc_array(cap, sizeof *m->keys);
    m->rank = di_malloc_array(cap, sizeof *m->rank);
    m->merged = di_malloc_array(cap, sizeof *m->merged);
    if (!m->keys || !m->rank || !m->merged) {
        tok_pair_map_free(m);
        return false;
    }
    memset(m->keys, 0xFF, cap * sizeof *m->keys);
    m->mask = (uint32_t)(cap - 1);
    m->n = 0;
    return true;
}

void tok_pair_map_free(tok_pair_map *m) {
    free(m->keys);
    free(m->rank);
    free(m->merged);
    memset(m, 0, sizeof *m);
}

bool tok_pair_map_put(tok_pair_map *m, int32_t left, int32_t right, int32_t rank, int32_t merged) {
    if ((size_t)m->n * 2 + 2 > (size_t)m->mask + 1) {
        tok_pair_map bigger = {0};
        if (!tok_pair_map_init(&bigger, (size_t)m->mask + 1)) return false;
        for (uint32_t i = 0; i <= m->mask; i++)
            if (m->keys[i] != UINT64_MAX)
                tok_pair_map_put(&bigger, (int32_t)(m->keys[i] >> 32), (int32_t)(uint32_t)m->keys[i],
                                 m->rank[i], m->merged[i]);
        tok_pair_map_free(m);
        *m = bigger;
    }
    uint64_t k = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    uint64_t h = k * 0x9E3779B97F4A7C15ull;
    for (uint32_t i = (uint32_t)(h >> 32) & m->mask;; i = (i + 1) & m->mask) {
        if (m->keys[i] == k) return true; /* first (lowest rank) wins */
        if (m->keys[i] == UINT64_MAX) {
            m->keys[i] = k;
            m->rank[i] = rank;
            m->merged[i] = merged;
            m->n++;
            return true;
        }
    }
}

int32_t tok_find_key(const di_tokenizer *t, const char *key, size_t len) {
    const tok_str_map *m = &t->keys;
    if (!m->slots) return DI_TOK_NULL;
    uint64_t h = tok_hash(key, len);
    uint32_t h32 = (uint32_t)h;
    for (uint32_t i = (uint32_t)(h >> 32) & m->mask;; i = (i + 1) & m->mask) {
        int32_t id = m->slots[i];
        if (id < 0) return DI_TOK_NULL;
        if (m->hashes[i] == h32 && t->tokens[id].key_len == len &&
            !memcmp(t->strings.data + t->tokens[id].key_off, key, len))
            return id;
    }
}

static di_status build_key_map(di_tokenizer *t, di_error *err) {
    size_t cap = pow2_at_least((size_t)t->n_vocab * 2 + 1);
    t->keys.slots = di_malloc_array(cap, sizeof *t->keys.slots);
    t->keys.hashes = di_malloc_array(cap, sizeof *t->keys.hashes);
    if (!t->keys.slots || !t->keys.hashes) return di_error_set(err, DI_ERR_NOMEM, "tokenizer: out of memory");
    memset(t->keys.slots, 0xFF, cap * sizeof *t->keys.slots);
    t->keys.mask = (uint32_t)(cap - 1);
    for (int32_t id = 0; id < t->n_vocab; id++) {
        const tok_entry *e = &t->tokens[id];
        if (e->type == DI_TOK_TYPE_UNDEFINED) continue; /* a hole in the id range */
        const char *k = t->strings.data + e->key_off;
        uint64_t h = tok_hash(k, e->key_len);
        for (uint32_t i = (uint32_t)(h >> 32) & t->keys.mask;; i = (i + 1) & t->keys.mask) {
            int32_t o = t->keys.slots[i];
            if (o < 0) {
                t->keys.slots[i] = id;
                t->keys.hashes[i] = (uint32_t)h;
                break;
            }
            /* duplicate key: the lower id keeps it */
            if (t->keys.hashes[i] == (uint32_t)h && t->tokens[o].key_len == e->key_len &&
                !memcmp(t->strings.data + t->tokens[o].key_off, k, e->key_len))
                break;
        }
    }
    return DI_OK;
}

/* ---- building ------------------------------------------------------------ */

di_status tok_alloc(int32_t n_vocab, di_tokenizer **out, di_error *err) {
    if (n_vocab <= 0 || (uint32_t)n_vocab > TOK_MAX_VOCAB)
        return di_error_set(err, DI_ERR_FORMAT, "tokenizer: vocabulary size %d out of range", n_vocab);
    di_tokenizer *t = di_calloc(1, sizeof *t);
    if (!t) return di_error_set(err, DI_ERR_NOMEM, "tokenizer: out of memory");
    t->tokens = di_calloc((size_t)n_vocab, sizeof *t->tokens);
    t->eog = di_calloc((size_t)n_vocab, 1);
    if (!t->tokens || !t->eog) {
        di_tok_free(t);
        return di_error_set(err, DI_ERR_NOMEM, "tokenizer: out of memory");
    }
    t->n_vocab = n_vocab;
    t->bos = t->eos = t->eot = t->eom = t->unk = DI_TOK_NULL;
    for (int i = 0; i < 256; i++) t->byte_ids[i] = DI_TOK_NULL;
    *out = t;
    return DI_OK;
}

di_status tok_set_token(di_tokenizer *t, int32_t id, const char *text, size_t len,
                        di_tok_type type, float score, di_error *err) {
    if (id < 0 || id >= t->n_vocab) return di_error_set(err, DI_ERR_FORMAT, "token id %d out of range", id);
    if (len > TOK_MAX_TOKEN_BYTES)
        return di_error_set(err, DI_ERR_FORMAT, "token %d is %zu bytes long (limit %u)", id, len,
                            TOK_MAX_TOKEN_BYTES);
    if (type == DI_TOK_TYPE_UNDEFINED || type > DI_TOK_TYPE_BYTE) type = DI_TOK_TYPE_NORMAL;
    tok_entry *e = &t->tokens[id];
    size_t off = t->strings.len;
    if (off > UINT32_MAX - len - 1 || !tok_buf_append(&t->strings, text, len))
        return di_error_set(err, DI_ERR_NOMEM, "tokenizer: out of memory (token strings)");
    e->text_off = e->key_off = e->piece_off = (uint32_t)off;
    e->text_len = e->key_len = e->piece_len = (uint32_t)len;
    e->type = (uint8_t)type;
    e->score = score;
    return DI_OK;
}

/* "<0xNN>" -> NN, or -1. */
static int parse_byte_token(const char *s, size_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) || s[5] != '>') return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10
              : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* Appends s to the strings buffer; *off gets its offset. */
static bool store(di_tokenizer *t, const char *s, size_t n, uint32_t *off) {
    if (t->strings.len > UINT32_MAX - n - 1) return false;
    *off = (uint32_t)t->strings.len;
    return tok_buf_append(&t->strings, s, n);
}

/* Works out each token's model key and decoded piece. */
static di_status derive_keys_and_pieces(di_tokenizer *t, di_error *err) {
    tok_buf tmp = {0};
    static const char SPM_SPACE[] = "\xE2\x96\x81"; /* ▁ U+2581 */
    for (int32_t id = 0; id < t->n_vocab; id++) {
        tok_entry *e = &t->tokens[id];
        if (e->type == DI_TOK_TYPE_UNDEFINED) continue;
        tmp.len = 0;
        if (t->byte_level) {
            /* Normal tokens are byte-level text; added ones are plain text. */
            if (e->type == DI_TOK_TYPE_NORMAL || e->type == DI_TOK_TYPE_USER_DEFINED) {
                /* decode into tmp first: strings.data may move when we store */
                if (tok_bytelevel_decode(t->strings.data + e->text_off, e->text_len, &tmp)) {
                    uint32_t off;
                    if (!store(t, tmp.data, tmp.len, &off)) goto nomem;
                    e->key_off = off;
                    e->key_len = (uint32_t)tmp.len;
                    if (!(e->attr & TOK_ATTR_MATCH)) {
                        e->piece_off = off;
                        e->piece_len = e->key_len;
                    }
                }
            }
        } else {
            int b = e->type == DI_TOK_TYPE_BYTE || t->byte_fallback
                        ? parse_byte_token(t->strings.data + e->text_off, e->text_len) : -1;
            if (b >= 0 && e->type != DI_TOK_TYPE_CONTROL && !(e->attr & TOK_ATTR_MATCH)) {
                char c = (char)b;
                uint32_t off;
                if (!store(t, &c, 1, &off)) goto nomem;
                e->piece_off = off;
                e->piece_len = 1;
            } else if (t->model == TOK_MODEL_WORDPIECE && e->type == DI_TOK_TYPE_NORMAL &&
                       !(e->attr & TOK_ATTR_MATCH)) {
                /* "##ing" continues a word; any other piece starts one */
                const char *s = t->strings.data + e->text_off;
                size_t n = e->text_len;
                bool cont = n >= t->wp_prefix_len && !memcmp(s, t->wp_prefix, t->wp_prefix_len);
                if (!tok_buf_reserve(&tmp, n + 1)) goto nomem;
                if (cont) tok_buf_append(&tmp, s + t->wp_prefix_len, n - t->wp_prefix_len);
                else tok_buf_append(&tmp, " ", 1), tok_buf_append(&tmp, s, n);
                uint32_t off;
                if (!store(t, tmp.data, tmp.len, &off)) goto nomem;
                e->piece_off = off;
                e->piece_len = (uint32_t)tmp.len;
            } else if (e->type == DI_TOK_TYPE_NORMAL && !(e->attr & TOK_ATTR_MATCH)) {
                /* ▁ -> ' ' */
                const char *s = t->strings.data + e->text_off;
                size_t n = e->text_len;
                if (!tok_buf_reserve(&tmp, n)) goto nomem;
                for (size_t i = 0; i < n;) {
                    if (i + 3 <= n && !memcmp(s + i, SPM_SPACE, 3)) {
                        tmp.data[tmp.len++] = ' ';
                        i += 3;
                    } else {
                        tmp.data[tmp.len++] = s[i++];
                    }
                }
                uint32_t off;
                if (!store(t, tmp.data, tmp.len, &off)) goto nomem;
                e->piece_off = off;
                e->piece_len = (uint32_t)tmp.len;
            }
        }
    }
    tok_buf_free(&tmp);
    return DI_OK;
nomem:
    tok_buf_free(&tmp);
    return di_error_set(err, DI_ERR_NOMEM, "tokenizer: out of memory");
}

static int cmp_added(const void *a, const void *b, void *ctx) {
    const di_tokenizer *t = ctx;
    const tok_entry *x = &t->tokens[*(const int32_t *)a], *y = &t->tokens[*(const int32_t *)b];
    uint8_t fx = x->text_len ? (uint8_t)t->strings.data[x->text_off] : 0;
    uint8_t fy = y->text_len ? (uint8_t)t->strings.data[y->text_off] : 0;
    if (fx != fy) return fx < fy ? -1 : 1;
    if (x->text_len != y->text_len) return x->text_len > y->text_len ? -1 : 1;
    return *(const int32_t *)a < *(const int32_t *)b ? -1 : 1;
}

/* qsort_r is a GNU extension (we build with _GNU_SOURCE). */
static di_status build_added(di_tokenizer *t, di_error *err) {
    uint32_t n = 0;
    for (int32_t id = 0; id < t->n_vocab; id++)
        if ((t->tokens[id].attr & TOK_ATTR_MATCH) && t->tokens[id].text_len) n++;
    t->added = di_malloc_array(n ? n : 1, sizeof *t->added);
    if (!t->added) return di_error_set(err, DI_ERR_NOMEM, "tokenizer: out of memory");
    n = 0;
    for (int32_t id = 0; id < t->n_vocab; id++)
        if ((t->tokens[id].attr & TOK_ATTR_MATCH) && t->tokens[id].text_len) t->added[n++] = id;
    t->n_added = n;
    qsort_r(t->added, n, sizeof *t->added, cmp_added, t);
    uint32_t i = 0;
    for (uint32_t c = 0; c < 256; c++) {
        t->added_start[c] = i;
        while (i < n && (uint8_t)t->strings.data[t->tokens[t->added[i]].text_off] == c) i++;
    }
    t->added_start[256] = n;
    return DI_OK;
}

/* Control tokens whose text marks the end of a turn or of the text. */
static const char *const EOG_TEXTS[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|endoftext|>", "<|end_of_text|>", "<|eom_id|>",
    "<end_of_turn>", "<|return|>", "<|EOT|>", "<｜end▁of▁sentence｜>", "</s>", "<|call|>",
};

di_status tok_finish(di_tokenizer *t, const char *pre_name, di_error *err) {
    di_status s = derive_keys_and_pieces(t, err);
    if (s) return s;
    if ((s = build_key_map(t, err))) return s;
    if ((s = build_added(t, err))) return s;
    for (int b = 0; b < 256; b++) {
        if (t->byte_level) {
            char c = (char)b;
            t->byte_ids[b] = tok_find_key(t, &c, 1);
        } else {
            char name[8];
            static const char HEX[] = "0123456789ABCDEF";
            memcpy(name, "<0x", 3);
            name[3] = HEX[b >> 4];
            name[4] = HEX[b & 15];
            name[5] = '>';
            t->byte_ids[b] = tok_find_key(t, name, 6);
        }
    }
    for (int32_t id = 0; id < t->n_vocab; id++) {
        const tok_entry *e = &t->tokens[id];
        if (e->type != DI_TOK_TYPE_CONTROL && !(e->attr & TOK_ATTR_SPECIAL) && e->type != DI_TOK_TYPE_USER_DEFINED)
            continue;
        for (size_t k = 0; k < sizeof EOG_TEXTS / sizeof EOG_TEXTS[0]; k++)
            if (strlen(EOG_TEXTS[k]) == e->text_len &&
                !memcmp(EOG_TEXTS[k], t->strings.data + e->text_off, e->text_len))
                t->eog[id] = 1;
    }
    int32_t ends[3] = {t->eos, t->eot, t->eom};
    for (int i = 0; i < 3; i++)
        if (ends[i] >= 0 && ends[i] < t->n_vocab) t->eog[ends[i]] = 1;
    if (t->eot == DI_TOK_NULL) {
        static const char *const EOT_TEXTS[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<|EOT|>", "<end_of_turn>"};
        for (size_t k = 0; k < sizeof EOT_TEXTS / sizeof EOT_TEXTS[0] && t->eot == DI_TOK_NULL; k++) {
            int32_t id = di_tok_find(t, EOT_TEXTS[k], strlen(EOT_TEXTS[k]));
            if (id >= 0 && (t->tokens[id].type == DI_TOK_TYPE_CONTROL || (t->tokens[id].attr & TOK_ATTR_SPECIAL)))
                t->eot = id;
        }
    }
    if (t->chat_template) t->chat_kind = di_tok_chat_detect(t->chat_template);
    snprintf(t->describe, sizeof t->describe, "%s/%s",
             t->model == TOK_MODEL_SPM         ? "spm"
             : t->model == TOK_MODEL_WORDPIECE ? "wordpiece"
             : t->model == TOK_MODEL_UNIGRAM   ? "unigram"
             : t->byte_level                   ? "bpe"
                                               : "bpe-chars",
             pre_name ? pre_name : "default");
    return DI_OK;
}

di_status tok_add_merge(di_tokenizer *t, const char *left, size_t left_len, const char *right,
                        size_t right_len, int32_t rank, di_error *err) {
    /* Halves are in vocabulary form; look them up by their keys. */
    tok_buf k = {0};
    int32_t l, r, m;
    if (t->byte_level) {
        if (!tok_bytelevel_decode(left, left_len, &k)) goto skip;
        size_t nl = k.len;
        if (!tok_bytelevel_decode(right, right_len, &k)) goto skip;
        l = tok_find_key(t, k.data, nl);
        r = tok_find_key(t, k.data + nl, k.len - nl);
        m = tok_find_key(t, k.data, k.len);
    } else {
        if (!tok_buf_append(&k, left, left_len) || !tok_buf_append(&k, right, right_len)) goto nomem;
        l = tok_find_key(t, left, left_len);
        r = tok_find_key(t, right, right_len);
        m = tok_find_key(t, k.data, k.len);
    }
    if (l < 0 || r < 0 || m < 0) goto skip;
    if (!t->merges.keys && !tok_pair_map_init(&t->merges, 1024)) goto nomem;
    if (!tok_pair_map_put(&t->merges, l, r, rank, m)) goto nomem;
skip:
    tok_buf_free(&k);
    return DI_OK;
nomem:
    tok_buf_free(&k);
    return di_error_set(err, DI_ERR_NOMEM, "tokenizer: out of memory (merges)");
}

void di_tok_free(di_tokenizer *t) {
    if (!t) return;
    free(t->tokens);
    free(t->eog);
    tok_buf_free(&t->strings);
    free(t->keys.slots);
    free(t->keys.hashes);
    tok_pair_map_free(&t->merges);
    free(t->added);
    tok_pre_free(t->pre, t->n_pre);
    tok_norm_free(t->norm, t->n_norm);
    free(t->chat_template);
    free(t->uni_score);
    free(t);
}

/* ---- accessors ------------------------------------------------------------ */

int32_t di_tok_vocab_size(const di_tokenizer *t) { return t->n_vocab; }
int32_t di_tok_bos(const di_tokenizer *t) { return t->bos; }
int32_t di_tok_eos(const di_tokenizer *t) { return t->eos; }
int32_t di_tok_eot(const di_tokenizer *t) { return t->eot; }
bool di_tok_adds_bos(const di_tokenizer *t) { return t->add_bos && t->bos >= 0; }
const char *di_tok_describe(const di_tokenizer *t) { return t->describe; }

bool di_tok_is_eog(const di_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab && t->eog[id];
}

di_tok_type di_tok_type_of(const di_tokenizer *t, int32_t id) {
    if (id < 0 || id >= t->n_vocab) return DI_TOK_TYPE_UNDEFINED;
    return (di_tok_type)t->tokens[id].type;
}

const char *di_tok_text(const di_tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->n_vocab) {
        *len = 0;
        return NULL;
    }
    *len = t->tokens[id].text_len;
    return t->strings.data + t->tokens[id].text_off;
}

int32_t di_tok_find(const di_tokenizer *t, const char *text, size_t len) {
    /* by stored text: try the key map first (covers non-byte-level vocabs
     * and added tokens), then byte-level keys */
    for (int32_t pass = 0; pass < 2; pass++) {
        int32_t id;
        if (pass == 0) {
            id = tok_find_key(t, text, len);
            if (id >= 0 && t->tokens[id].text_len == len &&
                !memcmp(t->strings.data + t->tokens[id].text_off, text, len))
                return id;
        } else if (t->byte_level) {
            tok_buf k = {0};
            id = DI_TOK_NULL;
            if (tok_bytelevel_decode(text, len, &k)) id = tok_find_key(t, k.data, k.len);
            tok_buf_free(&k);
            if (id >= 0 && t->tokens[id].text_len == len &&
                !memcmp(t->strings.data + t->tokens[id].text_off, text, len))
                return id;
        }
    }
    /* added tokens are matched by text */
    for (uint32_t i = 0; i < t->n_added; i++) {
        const tok_entry *e = &t->tokens[t->added[i]];
        if (e->text_len == len && !memcmp(t->strings.data + e->text_off, text, len)) return t->added[i];
    }
    return DI_TOK_NULL;
}

static bool piece_is_hidden(const tok_entry *e, bool render_special) {
    if (render_special) return false;
    if (e->attr & TOK_ATTR_SPECIAL) return true;
    return e->type == DI_TOK_TYPE_CONTROL || e->type == DI_TOK_TYPE_UNKNOWN ||
           e->type == DI_TOK_TYPE_UNUSED || e->type == DI_TOK_TYPE_UNDEFINED;
}

int64_t di_tok_piece(const di_tokenizer *t, int32_t id, bool render_special, char *buf, size_t size) {
    if (id < 0 || id >= t->n_vocab) return -1;
    const tok_entry *e = &t->tokens[id];
    if (piece_is_hidden(e, render_special)) return 0;
    if (buf && size) memcpy(buf, t->strings.data + e->piece_off, e->piece_len < size ? e->piece_len : size);
    return e->piece_len;
}
