/* SentencePiece BPE (GGUF tokenizer.ggml.model "llama").
 *
 * Spaces become ▁ (U+2581), the text is cut into UTF-8 characters, and the
 * adjacent pair whose concatenation is the highest-scoring vocabulary token
 * is merged first (ties: leftmost), until no concatenation is a token. What
 * is left and is not a token goes out as <0xNN> byte tokens (byte fallback),
 * else as <unk>. This is SentencePiece's BPE encoder, as llama.cpp's
 * llm_tokenizer_spm implements it. */
#include "text/tok_internal.h"

#include "base/alloc.h"

#include <stdlib.h>
#include <string.h>

typedef struct spm_cand {
    float score;
    uint32_t left, right;
    uint32_t size; /* bytes of the merged text, to spot stale entries */
} spm_cand;

_Static_assert(sizeof(spm_cand) == TOK_HEAP_ELEM_BYTES, "heap element size");

static bool cand_before(const spm_cand *a, const spm_cand *b) {
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static bool cmp_cand(const void *a, const void *b) { return cand_before(a, b); }

static bool try_pair(const di_tokenizer *t, tok_scratch *s, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return true;
    const char *w = s->word.data;
    uint32_t off = s->sym_off[l], size = s->sym_len[l] + s->sym_len[r];
    int32_t id = tok_find_key(t, w + off, size);
    if (id < 0) return true;
    spm_cand c = {t->tokens[id].score, (uint32_t)l, (uint32_t)r, size};
    return tok_heap_push(s, &c, cmp_cand);
}


di_status tok_spm_text(const di_tokenizer *t, const char *w, size_t n, bool add_prefix,
                       tok_scratch *s, di_tok_ids *out, di_error *err) {
    static const char SPACE[] = "\xE2\x96\x81"; /* ▁ */
    s->word.len = 0;
    if (add_prefix && !tok_buf_append(&s->word, SPACE, 3)) goto nomem;
    for (size_t i = 0; i < n; i++)
        if (!(w[i] == ' ' ? tok_buf_append(&s->word, SPACE, 3) : tok_buf_append(&s->word, w + i, 1))) goto nomem;
    const char *txt = s->word.data;
    size_t len = s->word.len;
    if (len == 0) return DI_OK;
    if (len > UINT32_MAX) return di_error_set(err, DI_ERR_RANGE, "text fragment too long");
    if (!tok_scratch_symbols(s, len)) goto nomem;
    size_t ns = 0;
    for (size_t i = 0; i < len;) {
        size_t l = tok_utf8_len((uint8_t)txt[i]);
        if (l > len - i) l = len - i;
        s->sym_off[ns] = (uint32_t)i;
        s->sym_len[ns] = (uint32_t)l;
        s->prev[ns] = (int32_t)ns - 1;
        s->next[ns] = i + l < len ? (int32_t)ns + 1 : -1;
        ns++;
        i += l;
    }
    s->heap_n = 0;
    for (size_t i = 1; i < ns; i++)
        if (!try_pair(t, s, (int32_t)i - 1, (int32_t)i)) goto nomem;
    while (s->heap_n) {
        spm_cand c;
        tok_heap_pop(s, &c, cmp_cand);
        uint32_t l = c.left, r = c.right;
        if (s->sym_len[l] == 0 || s->sym_len[r] == 0 || s->next[l] != (int32_t)r ||
            s->sym_len[l] + s->sym_len[r] != c.size)
            continue; /* stale */
        s->sym_len[l] += s->sym_len[r];
        s->sym_len[r] = 0;
        s->next[l] = s->next[r];
        if (s->next[r] >= 0) s->prev[s->next[r]] = (int32_t)l;
        if (!try_pair(t, s, s->prev[l], (int32_t)l) || !try_pair(t, s, (int32_t)l, s->next[l])) goto nomem;
    }
    for (int32_t i = 0; i >= 0; i = s->next[i]) {
        const char *p = txt + s->sym_off[i];
        size_t l = s->sym_len[i];
        int32_t id = tok_find_key(t, p, l);
        if (id >= 0) {
            if (!tok_ids_push(out, id)) goto nomem;
            continue;
        }
        for (size_t k = 0; k < l; k++) {
            int32_t b = t->byte_ids[(uint8_t)p[k]];
            if (b < 0) b = t->unk;
            if (b >= 0 && !tok_ids_push(out, b)) goto nomem;
        }
    }
    return DI_OK;
nomem:
    return di_error_set(err, DI_ERR_NOMEM, "tokenizer: out of memory");
}
