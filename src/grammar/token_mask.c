/* Allowed-token masks.
 *
 * The reference computes each token independently. The fast path walks the
 * vocabulary trie in preorder with the parser: a node's byte is pushed on
 * top of its parent's Earley set, so shared prefixes are parsed once and a
 * rejected prefix skips its whole subtree. */
#include "grammar/matcher_internal.h"

#include <stdlib.h>
#include <string.h>

struct mt_mask_cache {
    int unused;
};

void mt_mask_cache_free(mt_mask_cache *c) { free(c); }

static di_status check_args(di_grammar_matcher *m, uint32_t *mask, size_t n_words, di_error *err) {
    if (!m->vocab) return di_error_set(err, DI_ERR_INVALID_ARG, "matcher has no vocabulary");
    if (!mask || n_words < di_grammar_vocab_mask_words(m->vocab))
        return di_error_set(err, DI_ERR_INVALID_ARG, "mask has %zu words, need %zu", n_words,
                            di_grammar_vocab_mask_words(m->vocab));
    memset(mask, 0, n_words * sizeof(uint32_t));
    return DI_OK;
}

static void set_eos(const di_grammar_matcher *m, uint32_t *mask) {
    if (m->eos_done || !mt_cur(m)->accept) return;
    for (uint32_t i = 0; i < m->vocab->n_eos; i++) mask[m->vocab->eos[i] >> 5] |= 1u << (m->vocab->eos[i] & 31);
}

di_status di_grammar_matcher_fill_mask_slow(di_grammar_matcher *m, uint32_t *mask, size_t n_words,
                                            di_error *err) {
    di_status s = check_args(m, mask, n_words, err);
    if (s) return s;
    const di_grammar_vocab *v = m->vocab;
    if (m->eos_done) return DI_OK;
    uint32_t base = m->n_sets;
    for (uint32_t t = 0; t < v->n_tokens; t++) {
        if (v->flags[t] != DI_GRAMMAR_TOKEN_NORMAL || v->off[t + 1] == v->off[t]) continue;
        if (di_grammar_matcher_advance_bytes(m, v->data + v->off[t], (size_t)(v->off[t + 1] - v->off[t]))) {
            mask[t >> 5] |= 1u << (t & 31);
            mt_truncate(m, base);
        }
    }
    set_eos(m, mask);
    return DI_OK;
}

di_status di_grammar_matcher_fill_mask(di_grammar_matcher *m, uint32_t *mask, size_t n_words, di_error *err) {
    di_status s = check_args(m, mask, n_words, err);
    if (s) return s;
    const di_grammar_vocab *v = m->vocab;
    if (m->eos_done) return DI_OK;
    uint32_t base = m->n_sets;
    for (uint32_t i = 0; i < v->n_nodes;) {
        mt_truncate(m, base + v->depth[i]);
        if (!mt_push_byte(m, v->byte[i])) {
            i = v->skip[i];
            continue;
        }
        for (uint32_t k = v->tok_start[i]; k < v->tok_start[i + 1]; k++) {
            uint32_t t = v->trie_tok[k];
            mask[t >> 5] |= 1u << (t & 31);
        }
        i++;
    }
    mt_truncate(m, base);
    set_eos(m, mask);
    return DI_OK;
}
