/* BPE by merge rank over one pre-token.
 *
 * Symbols start as single bytes (byte-level vocabularies) or single UTF-8
 * characters (character vocabularies, with <0xNN> byte fallback for
 * characters the vocabulary lacks). The lowest-ranked adjacent pair is merged
 * until no pair has a rank; ties go to the leftmost pair. This is what HF
 * tokenizers' BPE and llama.cpp's llm_tokenizer_bpe do. A binary heap of
 * candidate pairs keeps a long pre-token O(n log n); stale heap entries are
 * recognized by checking that both symbols still hold the pair's ids. */
#include "text/tok_internal.h"

#include "base/alloc.h"

#include <stdlib.h>
#include <string.h>

typedef struct bpe_cand {
    int32_t rank;
    uint32_t pos;    /* index of the left symbol */
    int32_t left, right;
} bpe_cand;

_Static_assert(sizeof(bpe_cand) == TOK_HEAP_ELEM_BYTES, "heap element size");

static bool cand_less(const bpe_cand *a, const bpe_cand *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static bool cmp_cand(const void *a, const void *b) { return cand_less(a, b); }

static bool try_pair(const di_tokenizer *t, tok_scratch *s, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return true;
    int32_t a = s->sym_id[l], b = s->sym_id[r], rank, merged;
    if (a < 0 || b < 0) return true;
    if (!tok_pair_map_get(&t->merges, a, b, &rank, &merged)) return true;
    bpe_cand c = {rank, (uint32_t)l, a, b};
    return tok_heap_push(s, &c, cmp_cand);
}

di_status tok_bpe_word(const di_tokenizer *t, const char *w, size_t n, tok_scratch *s,
                       di_tok_ids *out, di_error *err) {
    if (n == 0) return DI_OK;
    if (t->ignore_merges) {
        int32_t id = tok_find_key(t, w, n);
        if (id >= 0) return tok_ids_push(out, id) ? DI_OK : di_error_set(err, DI_ERR_NOMEM, "out of memory");
    }
    if (!tok_scratch_symbols(s, n)) return di_error_set(err, DI_ERR_NOMEM, "tokenizer: out of memory");
    size_t ns = 0;
    if (t->byte_level) {
        for (size_t i = 0; i < n; i++) s->sym_id[ns++] = t->byte_ids[(uint8_t)w[i]];
    } else {
        for (size_t i = 0; i < n;) {
            size_t l = tok_utf8_len((uint8_t)w[i]);
            if (l > n - i) l = n - i;
            int32_t id = tok_find_key(t, w + i, l);
            if (id >= 0) {
                s->sym_id[ns++] = id;
            } else {
                bool all = t->byte_fallback;
                for (size_t k = 0; k < l && all; k++) all = t->byte_ids[(uint8_t)w[i + k]] >= 0;
                if (all) {
                    for (size_t k = 0; k < l; k++) s->sym_id[ns++] = t->byte_ids[(uint8_t)w[i + k]];
                } else {
                    s->sym_id[ns++] = t->unk; /* -1 when there is no unk: dropped */
                }
            }
            i += l;
        }
    }
    for (size_t i = 0; i < ns; i++) {
        s->prev[i] = (int32_t)i - 1;
        s->next[i] = i + 1 < ns ? (int32_t)i + 1 : -1;
    }
    s->heap_n = 0;
    for (size_t i = 0; i + 1 < ns; i++)
        if (!try_pair(t, s, (int32_t)i, (int32_t)i + 1)) goto nomem;
    while (s->heap_n) {
        bpe_cand c;
        tok_heap_pop(s, &c, cmp_cand);
        int32_t l = (int32_t)c.pos, r = s->next[l];
        if (r < 0 || s->sym_id[l] != c.left || s->sym_id[r] != c.right) continue; /* stale */
        int32_t rank = 0, merged = -1;
        if (!tok_pair_map_get(&t->merges, c.left, c.right, &rank, &merged)) continue;
        s->sym_id[l] = merged;
        s->next[l] = s->next[r];
        if (s->next[r] >= 0) s->prev[s->next[r]] = l;
        s->sym_id[r] = -2; /* dead */
        if (!try_pair(t, s, s->prev[l], l) || !try_pair(t, s, l, s->next[l])) goto nomem;
    }
    for (int32_t i = ns ? 0 : -1; i >= 0; i = s->next[i])
        if (s->sym_id[i] >= 0 && !tok_ids_push(out, s->sym_id[i])) goto nomem;
    return DI_OK;
nomem:
    return di_error_set(err, DI_ERR_NOMEM, "tokenizer: out of memory");
}
