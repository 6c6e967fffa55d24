/* Encode and decode: the pipeline around the models.
 *
 * encode: validate UTF-8 -> cut the text at added tokens (special ones only
 * with parse_special) -> per text segment: SentencePiece model directly, or
 * normalizers -> pre-tokenizer -> BPE per piece -> BOS/EOS as metadata says.
 * All working memory is a per-call tok_scratch, so one tokenizer can serve
 * many threads. */
#include "text/tok_internal.h"

#include "base/alloc.h"

#include <stdlib.h>
#include <string.h>

bool tok_scratch_symbols(tok_scratch *s, size_t n) {
    if (n <= s->sym_cap) return true;
    size_t cap = s->sym_cap ? s->sym_cap : 64;
    while (cap < n) cap *= 2;
    int32_t *id = di_realloc_array(s->sym_id, cap, sizeof *id);
    if (id) s->sym_id = id;
    uint32_t *off = di_realloc_array(s->sym_off, cap, sizeof *off);
    if (off) s->sym_off = off;
    uint32_t *len = di_realloc_array(s->sym_len, cap, sizeof *len);
    if (len) s->sym_len = len;
    int32_t *prev = di_realloc_array(s->prev, cap, sizeof *prev);
    if (prev) s->prev = prev;
    int32_t *next = di_realloc_array(s->next, cap, sizeof *next);
    if (next) s->next = next;
    if (!id || !off || !len || !prev || !next) return false;
    s->sym_cap = cap;
    return true;
}

void tok_scratch_free(tok_scratch *s) {
    tok_pieces_free(&s->a);
    tok_pieces_free(&s->b);
    tok_buf_free(&s->norm);
    tok_buf_free(&s->word);
    pcre2_match_data_free(s->md);
    pcre2_match_context_free(s->mctx);
    pcre2_jit_stack_free(s->jit);
    free(s->sym_id);
    free(s->sym_off);
    free(s->sym_len);
    free(s->prev);
    free(s->next);
    free(s->heap);
    memset(s, 0, sizeof *s);
}

/* Tokenizes one stretch of plain text (no added tokens inside). */
static di_status encode_segment(const di_tokenizer *t, const char *text, size_t len, bool first_segment,
                                bool after_token, tok_scratch *s, di_tok_ids *out, di_error *err) {
    if (len == 0) return DI_OK;
    if (t->model == TOK_MODEL_SPM)
        return tok_spm_text(t, text, len, t->spm_prefix_space && after_token, s, out, err);
    di_status rc;
    if (t->n_norm) {
        if ((rc = tok_normalize(t, text, len, s, err))) return rc;
        text = s->norm.data;
        len = s->norm.len;
    }
    tok_pieces *p;
    if ((rc = tok_pretokenize(t, text, len, first_segment, s, &p, err))) return rc;
    for (size_t i = 0; i < p->n; i++) {
        const char *w = p->base + p->spans[i].off;
        size_t wl = p->spans[i].len;
        rc = t->model == TOK_MODEL_WORDPIECE ? tok_wordpiece_word(t, w, wl, s, out, err)
             : t->model == TOK_MODEL_UNIGRAM ? tok_unigram_word(t, w, wl, s, out, err)
                                             : tok_bpe_word(t, w, wl, s, out, err);
        if (rc) return rc;
    }
    return DI_OK;
}

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

/* Longest added token that starts at text[i], or -1. */
static int32_t match_added(const di_tokenizer *t, const char *text, size_t len, size_t i, bool parse_special) {
    uint8_t c = (uint8_t)text[i];
    for (uint32_t k = t->added_start[c]; k < t->added_start[c + 1]; k++) {
        int32_t id = t->added[k];
        const tok_entry *e = &t->tokens[id];
        if ((e->attr & TOK_ATTR_SPECIAL) && !parse_special) continue;
        if (e->text_len <= len - i && !memcmp(text + i, t->strings.data + e->text_off, e->text_len)) return id;
    }
    return -1;
}

di_status di_tok_encode(const di_tokenizer *t, const char *text, size_t len, bool add_special,
                        bool parse_special, di_tok_ids *out, di_error *err) {
    if (!t || !out || (!text && len)) return di_error_set(err, DI_ERR_INVALID_ARG, "tokenizer: NULL argument");
    if (!tok_utf8_valid((const uint8_t *)text, len))
        return di_error_set(err, DI_ERR_INVALID_ARG, "tokenizer: input is not valid UTF-8");
    if (len > UINT32_MAX) return di_error_set(err, DI_ERR_RANGE, "tokenizer: input longer than 4 GiB");
    size_t n0 = out->n;
    tok_scratch s = {0};
    di_status rc = DI_OK;
    if (add_special && t->add_bos && t->bos >= 0 && !tok_ids_push(out, t->bos)) goto nomem;
    size_t seg = 0, i = 0;
    bool first = true, after_token = true;
    while (i < len) {
        int32_t id = t->n_added && t->added_start[(uint8_t)text[i]] != t->added_start[(uint8_t)text[i] + 1]
                         ? match_added(t, text, len, i, parse_special) : -1;
        if (id < 0) {
            i += tok_utf8_len((uint8_t)text[i]);
            continue;
        }
        const tok_entry *e = &t->tokens[id];
        size_t end = i;
        if (e->attr & TOK_ATTR_LSTRIP)
            while (end > seg && is_ws(text[end - 1])) end--;
        if ((rc = encode_segment(t, text + seg, end - seg, first, after_token, &s, out, err))) goto done;
        if (!tok_ids_push(out, id)) goto nomem;
        first = false;
        after_token = true;
        i += e->text_len;
        if (e->attr & TOK_ATTR_RSTRIP)
            while (i < len && is_ws(text[i])) i++;
        seg = i;
    }
    if ((rc = encode_segment(t, text + seg, len - seg, first, after_token, &s, out, err))) goto done;
    if (add_special && t->add_eos && t->eos >= 0 && !tok_ids_push(out, t->eos)) goto nomem;
done:
    if (rc) out->n = n0;
    tok_scratch_free(&s);
    return rc;
nomem:
    rc = di_error_set(err, DI_ERR_NOMEM, "tokenizer: out of memory");
    goto done;
}

di_status di_tok_decode(const di_tokenizer *t, const int32_t *ids, size_t n_ids, bool render_special,
                        char **out, size_t *out_len, di_error *err) {
    if (!t || !out || (!ids && n_ids)) return di_error_set(err, DI_ERR_INVALID_ARG, "tokenizer: NULL argument");
    tok_buf b = {0};
    if (!tok_buf_reserve(&b, n_ids * 4)) goto nomem;
    bool first = true;
    for (size_t i = 0; i < n_ids; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= t->n_vocab) {
            tok_buf_free(&b);
            return di_error_set(err, DI_ERR_RANGE, "tokenizer: token id %d out of range [0, %d)", id, t->n_vocab);
        }
        const tok_entry *e = &t->tokens[id];
        int64_t n = di_tok_piece(t, id, render_special, NULL, 0);
        if (n <= 0) continue;
        const char *p = t->strings.data + e->piece_off;
        if (first && t->strip_first_space && p[0] == ' ') p++, n--;
        first = false;
        if (!tok_buf_append(&b, p, (size_t)n)) goto nomem;
    }
    if (!b.data && !tok_buf_reserve(&b, 0)) goto nomem;
    *out = b.data;
    if (out_len) *out_len = b.len;
    return DI_OK;
nomem:
    tok_buf_free(&b);
    return di_error_set(err, DI_ERR_NOMEM, "tokenizer: out of memory");
}

di_status di_tok_load(const char *path, di_tokenizer **out, di_error *err) {
    if (!path || !out) return di_error_set(err, DI_ERR_INVALID_ARG, "tokenizer: NULL argument");
    size_t n = strlen(path);
    if (n >= 5 && !strcmp(path + n - 5, ".gguf")) {
        di_gguf *g = NULL;
        di_status s = di_gguf_open(path, &g, err); /* its messages name the file */
        if (s) return s;
        s = di_tok_load_gguf(g, out, err);
        di_gguf_close(g);
        if (s) di_error_prefix(err, "%s: ", path);
        return s;
    }
    return di_tok_load_json(path, out, err);
}
