/* Helpers shared by the grammar tests (header-only: each test_*.c is its own
 * executable). */
#ifndef DI_GRAMMAR_TEST_UTIL_H
#define DI_GRAMMAR_TEST_UTIL_H

#include "test_util.h"

#include "grammar/grammar.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Whole-string match through a fresh byte matcher. */
static inline bool gt_accepts(const di_grammar *g, const char *s, size_t n) {
    di_grammar_matcher *m;
    di_error err;
    if (di_grammar_matcher_create(g, NULL, &m, &err)) return false;
    bool ok = di_grammar_matcher_advance_bytes(m, (const uint8_t *)s, n) && di_grammar_matcher_is_accepting(m);
    di_grammar_matcher_free(m);
    return ok;
}

static inline bool gt_accepts_str(const di_grammar *g, const char *s) { return gt_accepts(g, s, strlen(s)); }

/* Compiles EBNF or fails the test with the message. */
static inline di_grammar *gt_ebnf(const char *text) {
    di_grammar *g = NULL;
    di_error err = {0};
    di_status s = di_grammar_compile_ebnf(text, strlen(text), NULL, &g, &err);
    if (s) fail_msg("ebnf compile failed: %s\n%s", err.msg, text);
    return g;
}

/* A small synthetic vocabulary: the given strings, plus EOS as the last id. */
static inline di_grammar_vocab *gt_vocab(const char *const *toks, uint32_t n) {
    const uint8_t **b = calloc(n + 1, sizeof *b);
    uint32_t *l = calloc(n + 1, sizeof *l);
    uint8_t *f = calloc(n + 1, 1);
    for (uint32_t i = 0; i < n; i++) b[i] = (const uint8_t *)toks[i], l[i] = (uint32_t)strlen(toks[i]);
    b[n] = (const uint8_t *)"</s>", l[n] = 4, f[n] = DI_GRAMMAR_TOKEN_EOS;
    di_grammar_vocab *v = NULL;
    di_error err;
    if (di_grammar_vocab_create(n + 1, b, l, f, &v, &err)) fail_msg("vocab: %s", err.msg);
    free(b), free(l), free(f);
    return v;
}

static inline bool gt_bit(const uint32_t *mask, uint32_t id) { return (mask[id >> 5] >> (id & 31)) & 1; }

#endif
