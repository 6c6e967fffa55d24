/* Seeded random walks through the token mask: the sampler behind the
 * property test (scripts/gen_goldens_grammar.py samples strings this way and
 * validates them with an independent JSON Schema validator) and behind
 * `deepinfer grammar --sample`.
 *
 * Why in the library: the C test must regenerate exactly the walks the
 * goldens were made from, and the tool and the test then share one
 * implementation instead of two copies that could drift. */
#include "grammar/matcher_internal.h"

#include <stdlib.h>
#include <string.h>

static uint64_t xorshift(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

/* Picks one set bit of mask uniformly (by rank) among those for which
 * keep(id) holds; UINT32_MAX when none. Two passes (count, then select)
 * avoid a list of allowed ids. */
static uint32_t pick(const di_grammar_vocab *v, const uint32_t *mask, size_t words, uint64_t r, int want_quote) {
    uint32_t n = 0;
    for (int pass = 0; pass < 2; pass++) {
        uint32_t target = pass ? (uint32_t)(r % n) : 0, seen = 0;
        for (size_t w = 0; w < words; w++) {
            for (uint32_t bits = mask[w]; bits; bits &= bits - 1) {
                uint32_t id = (uint32_t)(w * 32 + (uint32_t)__builtin_ctz(bits));
                if (want_quote) {
                    uint64_t a = v->off[id], b = v->off[id + 1];
                    if (v->flags[id] != DI_GRAMMAR_TOKEN_NORMAL || !memchr(v->data + a, '"', (size_t)(b - a))) continue;
                }
                if (!pass) n++;
                else if (seen++ == target) return id;
            }
        }
        if (!n) return UINT32_MAX;
    }
    return UINT32_MAX;
}

di_status di_grammar_random_walk(di_grammar_matcher *m, uint64_t seed, uint32_t max_tokens, uint32_t *ids,
                                 uint32_t *n_ids, bool *complete, di_error *err) {
    *n_ids = 0;
    *complete = false;
    if (!m->vocab) return di_error_set(err, DI_ERR_INVALID_ARG, "matcher has no vocabulary");
    const di_grammar_vocab *v = m->vocab;
    size_t words = di_grammar_vocab_mask_words(v);
    uint32_t *mask = malloc(words * sizeof *mask);
    if (!mask) return di_error_set(err, DI_ERR_NOMEM, "out of memory");
    uint64_t s = seed ? seed : 0x9E3779B97F4A7C15ull; /* xorshift has no zero state */
    di_status st = DI_OK;
    while (*n_ids < max_tokens) {
        st = di_grammar_matcher_fill_mask(m, mask, words, err);
        if (st) break;
        /* End as soon as the output may end, half of the time (walks stay
         * short); otherwise half of the steps prefer a token with a quote,
         * so strings get closed and walks reach the end of the structure. */
        uint32_t t = UINT32_MAX;
        uint64_t r1 = xorshift(&s), r2 = xorshift(&s), r3 = xorshift(&s);
        if (di_grammar_matcher_is_accepting(m) && v->n_eos && (r1 & 1)) t = v->eos[0];
        if (t == UINT32_MAX && (r2 & 1)) t = pick(v, mask, words, r3, 1);
        if (t == UINT32_MAX) t = pick(v, mask, words, r3, 0);
        if (t == UINT32_MAX) break; /* nothing allowed: a finished grammar without EOS */
        if (!di_grammar_matcher_advance_token(m, t)) {
            st = di_error_set(err, DI_ERR_INTERNAL, "token %u was in the mask but not accepted", t);
            break;
        }
        ids[(*n_ids)++] = t;
        if (m->eos_done) {
            *complete = true;
            break;
        }
    }
    free(mask);
    return st;
}
