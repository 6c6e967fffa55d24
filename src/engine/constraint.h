/* Structured-output constraints for the engine: compiles a request's
 * di_constraint into a grammar (reusing compiled grammars by their text),
 * and gives each request its own matcher over the model's vocabulary.
 *
 * Compiled grammars are shared and reference-counted; at most
 * DI_CONSTRAINT_CACHE_MAX unreferenced ones are kept for reuse. The cache is
 * thread-safe (submit runs on any thread); a matcher belongs to one request
 * and is used only by the stepping thread. */
#ifndef DI_ENGINE_CONSTRAINT_H
#define DI_ENGINE_CONSTRAINT_H

#include "deepinfer.h"
#include "grammar/grammar.h"
#include "text/tokenizer.h"

#define DI_CONSTRAINT_CACHE_MAX 64

typedef struct di_constraint_cache di_constraint_cache;
typedef struct di_constraint_entry di_constraint_entry;

typedef struct di_constraint_state {
    di_grammar_matcher *matcher; /* NULL when the request is unconstrained */
    di_constraint_entry *entry;  /* the shared grammar it borrows */
} di_constraint_state;

/* n_vocab: rows of the model's logits (>= the tokenizer's vocabulary). */
di_status di_constraint_cache_create(const di_tokenizer *tok, int32_t n_vocab,
                                     di_constraint_cache **out, di_error *err);
void di_constraint_cache_free(di_constraint_cache *c);

/* Compiles c (or reuses it) and creates a matcher at the grammar's start.
 * kind NONE leaves *st empty. */
di_status di_constraint_begin(di_constraint_cache *cache, const di_constraint *c,
                              di_constraint_state *st, di_error *err);
/* Compiles c as di_constraint_begin would (the grammar stays cached for
 * the submit that follows) and writes to notes (cap bytes, NUL-terminated,
 * "" when none) what a lenient compile dropped (di_grammar_dropped). */
di_status di_constraint_check(di_constraint_cache *cache, const di_constraint *c, char *notes, size_t cap,
                              di_error *err);
/* Frees the matcher and drops the grammar reference. */
void di_constraint_end(di_constraint_cache *cache, di_constraint_state *st);

/* Words of an allowed-token mask over the model's n_vocab logits. */
size_t di_constraint_mask_words(const di_constraint_cache *cache);
/* Fills mask (di_constraint_mask_words words) for st's next token; ids past
 * the tokenizer's vocabulary are never allowed. */
di_status di_constraint_fill_mask(di_constraint_cache *cache, di_constraint_state *st,
                                  uint32_t *mask, di_error *err);

/* Cached compiled grammars and how many compiles were avoided (stats). */
void di_constraint_cache_stats(di_constraint_cache *c, int64_t *n_compiled, int64_t *n_reused);

#endif
