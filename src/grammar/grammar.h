/* grammar: structured output. JSON Schema, regexes and EBNF (GBNF dialect)
 * compile to one internal context-free grammar over bytes; a matcher walks
 * bytes/tokens through it (Earley parser with rollback) and computes the
 * allowed-token bitmask over a vocabulary.
 *
 * Objects and ownership:
 *   di_grammar          compiled grammar; immutable after compile, shareable
 *                       across threads; freed with di_grammar_free.
 *   di_grammar_vocab    the token byte strings of one tokenizer plus which
 *                       ids are special / end-of-sequence; immutable; freed
 *                       with di_grammar_vocab_free. Independent of the text
 *                       module: built from plain arrays.
 *   di_grammar_matcher  the parse state of one sequence (not thread-safe);
 *                       borrows the grammar and the vocab, which must outlive
 *                       it; freed with di_grammar_matcher_free.
 *
 * Grammar text (schema, regex, EBNF) is hostile input: every front end has
 * size and nesting limits and reports errors as DI_ERR_FORMAT (malformed),
 * DI_ERR_UNSUPPORTED (a keyword or construct we do not implement, named in
 * the message) or DI_ERR_RANGE (a limit was hit). */
#ifndef DI_GRAMMAR_GRAMMAR_H
#define DI_GRAMMAR_GRAMMAR_H

#include "deepinfer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct di_grammar di_grammar;
typedef struct di_grammar_vocab di_grammar_vocab;
typedef struct di_grammar_matcher di_grammar_matcher;

/* Whitespace allowed between JSON tokens. COMPACT: none (what the model sees
 * is exactly JSON_COMPACT); FLEXIBLE: any run of space, \t, \n, \r up to
 * DI_GRAMMAR_MAX_WS bytes (bounded so a model cannot stall in whitespace). */
typedef enum di_grammar_ws {
    DI_GRAMMAR_WS_COMPACT = 0,
    DI_GRAMMAR_WS_FLEXIBLE = 1,
} di_grammar_ws;

#define DI_GRAMMAR_MAX_WS 20

/* Which JSON Schema draft a schema without "$schema" follows. The drafts
 * differ in `items` (array = tuple in draft 7; prefixItems in 2020-12) and
 * in whether keywords beside `$ref` apply (ignored in draft 7). */
typedef enum di_grammar_draft {
    DI_GRAMMAR_DRAFT_2020_12 = 0,
    DI_GRAMMAR_DRAFT_7 = 1,
} di_grammar_draft;

typedef struct di_grammar_options {
    di_grammar_ws whitespace;
    /* Lenient: unsupported JSON Schema keywords are ignored (the output may
     * then violate them) instead of failing the compile. */
    bool lenient;
    /* Maximum nesting of schemas / regex groups; 0 means
     * DI_GRAMMAR_DEFAULT_MAX_DEPTH. */
    uint32_t max_depth;
    di_grammar_draft draft;
} di_grammar_options;

#define DI_GRAMMAR_DEFAULT_MAX_DEPTH 128

/* Default options: compact whitespace, strict keywords, default limits. */
di_grammar_options di_grammar_options_default(void);

/* ---- compile ------------------------------------------------------------ */

/* EBNF in llama.cpp's GBNF dialect: `name ::= alt | alt`, "literals",
 * [classes], [^negated], ., ( ), * + ? {m} {m,} {m,n}, # comments. root_rule
 * names the start rule (NULL: "root"). */
di_status di_grammar_compile_ebnf(const char *text, size_t len, const char *root_rule,
                                  di_grammar **out, di_error *err);

/* A regex in the JSON Schema `pattern` dialect (ECMA-262 subset), matched
 * against the whole output (anchored both ends, as for a generated string). */
di_status di_grammar_compile_regex(const char *re, size_t len, di_grammar **out, di_error *err);

/* JSON Schema (draft 2020-12 / draft 7 keywords; see json_schema.c for the
 * list). opt may be NULL (defaults). */
di_status di_grammar_compile_json_schema(const char *schema, size_t len,
                                         const di_grammar_options *opt, di_grammar **out,
                                         di_error *err);

/* JSON-object mode: any JSON object (values of any type and nesting). */
di_status di_grammar_compile_json_object(const di_grammar_options *opt, di_grammar **out,
                                         di_error *err);

/* Tool calls a request requires (tool_choice "required" or a named
 * function), in the model's call syntax, from spec, a JSON object:
 *   {"syntax": "dsml_v4" | "dsml_v41", "parallel": bool (default true),
 *    "tools": [{"name": "...", "parameters": JSON Schema | null}, ...]}
 * The grammar starts where the prompt opened the call block and ends with
 * its closing tag; arguments follow each tool's parameters schema (see
 * tool_calls.c). DSML's special token is named the DI_GRAMMAR_SPECIAL_BYTE
 * way. opt: whitespace inside JSON values, lenient keywords. */
di_status di_grammar_compile_tool_calls(const char *spec, size_t len, const di_grammar_options *opt,
                                        di_grammar **out, di_error *err);

void di_grammar_free(di_grammar *g);

/* Prints the compiled grammar as GBNF-like text (malloc'd; caller frees). For
 * debugging and tests; NULL on no memory. */
char *di_grammar_to_text(const di_grammar *g);

/* What a lenient compile dropped because it cannot be enforced (keywords,
 * formats; each with its schema path, "; "-separated), or NULL when the
 * grammar enforces all of its source. Owned by the grammar. */
const char *di_grammar_dropped(const di_grammar *g);

/* Number of rules / symbols after lowering (for size reports). */
uint32_t di_grammar_n_rules(const di_grammar *g);

/* ---- vocabulary --------------------------------------------------------- */

enum {
    DI_GRAMMAR_TOKEN_NORMAL = 0,
    DI_GRAMMAR_TOKEN_SPECIAL = 1, /* control token: never allowed by a grammar */
    DI_GRAMMAR_TOKEN_EOS = 2,     /* end of sequence: allowed when accepting */
    DI_GRAMMAR_TOKEN_NAMED = 3,   /* special token a grammar may name (below) */
};

/* Special tokens in grammars. A NAMED token's bytes are
 * DI_GRAMMAR_SPECIAL_BYTE followed by the token's text ("\xff<think>"): a
 * byte that no UTF-8 text holds and no grammar text (EBNF, regex, schema:
 * all code points) produces, so a grammar allows the token exactly where it
 * spells that byte string (tool_calls.c does), and no grammar that does
 * not can reach it. So that no run of other tokens spells it either,
 * normal tokens holding that byte (byte-fallback / byte-level 0xFF) are
 * never allowed. */
#define DI_GRAMMAR_SPECIAL_BYTE 0xFF

/* Builds a vocabulary from n_tokens byte strings (bytes[i], lens[i]) and one
 * flag per token (DI_GRAMMAR_TOKEN_*; flags may be NULL = all normal). The
 * strings are copied. Empty tokens are never allowed; a NAMED token must
 * start with DI_GRAMMAR_SPECIAL_BYTE and have text after it. */
di_status di_grammar_vocab_create(uint32_t n_tokens, const uint8_t *const *bytes,
                                  const uint32_t *lens, const uint8_t *flags,
                                  di_grammar_vocab **out, di_error *err);

/* Reads the vocabulary of a Hugging Face byte-level BPE tokenizer.json
 * (GPT-2 byte-to-unicode mapping undone; added tokens marked special, and
 * eos_token names the EOS one, e.g. "<｜end▁of▁sentence｜>"; NULL: none). */
di_status di_grammar_vocab_from_hf_json(const char *path, const char *eos_token,
                                        di_grammar_vocab **out, di_error *err);

/* Greedy longest-match tokenization of bytes into normal tokens: a valid
 * (not the tokenizer's) segmentation, for tests and tools that need token
 * sequences before a real tokenizer is wired in. Writes at most cap ids;
 * returns the number needed, or -1 when some byte has no token. */
int64_t di_grammar_vocab_greedy_tokenize(const di_grammar_vocab *v, const uint8_t *bytes, size_t n,
                                         uint32_t *ids, size_t cap);

void di_grammar_vocab_free(di_grammar_vocab *v);
uint32_t di_grammar_vocab_size(const di_grammar_vocab *v);
/* Bytes of token id (NULL when out of range); *len receives the length. */
const uint8_t *di_grammar_vocab_token(const di_grammar_vocab *v, uint32_t id, uint32_t *len);
/* Number of uint32 words of a mask for this vocabulary: ceil(n / 32). */
size_t di_grammar_vocab_mask_words(const di_grammar_vocab *v);

/* ---- matcher ------------------------------------------------------------ */

/* Creates a matcher at the start of the grammar. vocab may be NULL for a
 * byte-only matcher (then the token functions fail with INVALID_ARG). The
 * per-(grammar, vocab) token tables are built lazily and cached in the
 * matcher; di_grammar_matcher_fork shares them. */
di_status di_grammar_matcher_create(const di_grammar *g, const di_grammar_vocab *vocab,
                                    di_grammar_matcher **out, di_error *err);
void di_grammar_matcher_free(di_grammar_matcher *m);

/* Back to the start state (keeps caches). */
void di_grammar_matcher_reset(di_grammar_matcher *m);

/* Feeds bytes. On rejection returns false and leaves the state unchanged. */
bool di_grammar_matcher_advance_bytes(di_grammar_matcher *m, const uint8_t *bytes, size_t n);

/* Feeds one token: its bytes, or for an EOS token, the end of output (only
 * when accepting; afterwards nothing more is allowed). false (state unchanged)
 * when the token is not allowed. Each accepted token can be rolled back. */
bool di_grammar_matcher_advance_token(di_grammar_matcher *m, uint32_t token);

/* Undoes the last n tokens (speculative decoding). INVALID_ARG when fewer
 * than n tokens were advanced. */
di_status di_grammar_matcher_rollback(di_grammar_matcher *m, uint32_t n_tokens);

/* Tokens advanced since create/reset (the rollback depth available). */
uint32_t di_grammar_matcher_n_tokens(const di_grammar_matcher *m);

/* True when the bytes so far form a complete sentence of the grammar. */
bool di_grammar_matcher_is_accepting(const di_grammar_matcher *m);

/* The bytes that may come next: next[b] is set when advancing by byte b
 * would succeed (all false once terminated). For error messages. */
void di_grammar_matcher_next_bytes(const di_grammar_matcher *m, bool next[256]);

/* True after an EOS token was accepted or when nothing but the end can
 * follow (no byte can extend the output). */
bool di_grammar_matcher_is_terminated(const di_grammar_matcher *m);

/* Writes the allowed-token bitmask: bit (id % 32) of mask[id / 32] is set when
 * token id may come next. n_words must be >= di_grammar_vocab_mask_words.
 * Special tokens are never allowed (NAMED ones where the grammar names
 * them); EOS tokens exactly when accepting. */
di_status di_grammar_matcher_fill_mask(di_grammar_matcher *m, uint32_t *mask, size_t n_words,
                                       di_error *err);

/* Reference mask: the same result by feeding every token's bytes through the
 * parser one by one (slow; the oracle for tests of the fast path). */
di_status di_grammar_matcher_fill_mask_slow(di_grammar_matcher *m, uint32_t *mask,
                                            size_t n_words, di_error *err);

/* Seeded random walk from the matcher's state: repeatedly fills the mask and
 * advances by a token drawn from it (xorshift64 seeded with seed; EOS, when
 * allowed, is drawn half of the time, and half of the other steps prefer a
 * token containing '"'), for at most max_tokens tokens. Writes the ids to
 * ids (room for max_tokens) and their count to *n_ids; *complete is true
 * when the walk ended with EOS, i.e. the bytes form a sentence of the
 * grammar. The same seed on the same grammar and vocabulary gives the same
 * walk on every platform (the mask is exact). For property tests and
 * `deepinfer grammar --sample`. */
di_status di_grammar_random_walk(di_grammar_matcher *m, uint64_t seed, uint32_t max_tokens, uint32_t *ids,
                                 uint32_t *n_ids, bool *complete, di_error *err);

#endif
