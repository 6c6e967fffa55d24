/* WordPiece (BERT): each pre-token is cut greedily into the longest vocab
 * entries, left to right; every piece after the first is looked up with
 * the continuing-subword prefix ("##"). As HF tokenizers does: a word with
 * more than max_input_chars_per_word characters, or with a rest no entry
 * matches, becomes a single unk token. */
#include "text/tok_internal.h"

#include <string.h>

static di_status push(di_tok_ids *out, int32_t id, di_error *err) {
    return tok_ids_push(out, id) ? DI_OK : di_error_set(err, DI_ERR_NOMEM, "tokenizer: out of memory");
}

static di_status push_unk(const di_tokenizer *t, di_tok_ids *out, di_error *err) {
    if (t->unk < 0) return di_error_set(err, DI_ERR_FORMAT, "tokenizer: WordPiece word not in the vocabulary and no unk_token");
    return push(out, t->unk, err);
}

di_status tok_wordpiece_word(const di_tokenizer *t, const char *w, size_t n, tok_scratch *s,
                             di_tok_ids *out, di_error *err) {
    if (n == 0) return DI_OK;
    size_t chars = 0;
    for (size_t i = 0; i < n; i += tok_utf8_len((uint8_t)w[i])) chars++;
    if (chars > (size_t)t->wp_max_chars) return push_unk(t, out, err);
    /* s->word holds prefix + the candidate; pieces go to out only once the
     * whole word matched. */
    size_t n0 = out->n;
    for (size_t start = 0; start < n;) {
        s->word.len = 0;
        if (start > 0 && !tok_buf_append(&s->word, t->wp_prefix, t->wp_prefix_len))
            return di_error_set(err, DI_ERR_NOMEM, "tokenizer: out of memory");
        size_t base = s->word.len;
        if (!tok_buf_append(&s->word, w + start, n - start))
            return di_error_set(err, DI_ERR_NOMEM, "tokenizer: out of memory");
        size_t end = n;
        int32_t id = -1;
        while (end > start) {
            id = tok_find_key(t, s->word.data, base + (end - start));
            if (id >= 0) break;
            /* drop the last character */
            size_t e = end - 1;
            while (e > start && ((uint8_t)w[e] & 0xC0) == 0x80) e--;
            end = e;
        }
        if (id < 0) {
            out->n = n0;
            return push_unk(t, out, err);
        }
        di_status rc = push(out, id, err);
        if (rc) return rc;
        start = end;
    }
    return DI_OK;
}
