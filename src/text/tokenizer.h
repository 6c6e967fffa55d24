/* Tokenizers, chat templates and streaming detokenization (module `tok`).
 *
 * One di_tokenizer serves every model kind DeepInfer runs:
 *  - byte-level BPE (GPT-2 style; GGUF tokenizer.ggml.model "gpt2", or an HF
 *    tokenizer.json BPE model behind a ByteLevel pre-tokenizer),
 *  - SentencePiece-style BPE (GGUF "llama": score-ordered merges over UTF-8
 *    characters, "▁" as the space marker, <0xNN> byte fallback, optional
 *    prefix space; or an HF BPE model over characters with byte_fallback).
 * Text passes: added/special-token split -> normalizers -> pre-tokenizer
 * (PCRE2 regex splits chosen by tokenizer.ggml.pre or tokenizer.json) -> model.
 *
 * A loaded tokenizer is immutable: encode/decode/chat calls may run from many
 * threads at once. Token ids are int32_t; every id a function receives is
 * range-checked. Text in is UTF-8 (invalid UTF-8 is rejected by encode with
 * DI_ERR_INVALID_ARG); text out of di_tok_decode is the exact byte string the
 * tokens stand for (may be partial UTF-8 at the ends), while the streaming
 * detokenizer only ever emits whole, valid UTF-8. */
#ifndef DI_TEXT_TOKENIZER_H
#define DI_TEXT_TOKENIZER_H

#include "base/status.h"
#include "format/gguf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DI_TOK_NULL (-1) /* "no such token" (e.g. a model without BOS) */

typedef struct di_tokenizer di_tokenizer;

/* Token kinds (GGUF tokenizer.ggml.token_type numbering). */
typedef enum di_tok_type {
    DI_TOK_TYPE_UNDEFINED = 0,
    DI_TOK_TYPE_NORMAL = 1,
    DI_TOK_TYPE_UNKNOWN = 2,
    DI_TOK_TYPE_CONTROL = 3,      /* special: BOS, EOS, <|im_start|>; only parsed on request */
    DI_TOK_TYPE_USER_DEFINED = 4, /* added, non-special: always matched in text */
    DI_TOK_TYPE_UNUSED = 5,
    DI_TOK_TYPE_BYTE = 6,         /* <0xNN> byte fallback */
} di_tok_type;

/* A growable id array the caller owns (zero-initialize, then reuse across
 * calls; encode appends). Free with di_tok_ids_free. */
typedef struct di_tok_ids {
    int32_t *data; /* (n) */
    size_t n, cap;
} di_tok_ids;
void di_tok_ids_free(di_tok_ids *ids);

/* ---- loading ---------------------------------------------------------- */

/* Builds the tokenizer from an open GGUF (vocab-only files are enough). The
 * tokenizer copies what it needs; g may be closed afterwards. */
di_status di_tok_load_gguf(const di_gguf *g, di_tokenizer **out, di_error *err);
/* path: a tokenizer.json file, or a folder holding tokenizer.json (and
 * optionally tokenizer_config.json for BOS/EOS, add_bos_token and the chat
 * template). */
di_status di_tok_load_json(const char *path, di_tokenizer **out, di_error *err);
/* Convenience: a path ending in .gguf goes through di_gguf_open, anything
 * else through di_tok_load_json. */
di_status di_tok_load(const char *path, di_tokenizer **out, di_error *err);
void di_tok_free(di_tokenizer *t);

/* ---- vocabulary --------------------------------------------------------- */

int32_t di_tok_vocab_size(const di_tokenizer *t);
int32_t di_tok_bos(const di_tokenizer *t); /* DI_TOK_NULL when absent */
int32_t di_tok_eos(const di_tokenizer *t);
int32_t di_tok_eot(const di_tokenizer *t); /* end-of-turn (<|eot_id|>, <|im_end|>) or DI_TOK_NULL */
bool di_tok_adds_bos(const di_tokenizer *t); /* metadata: encode(add_special) prepends BOS */
/* True for every id that ends generation: EOS, EOT, EOM and the control
 * tokens whose text is a known end marker (<|im_end|>, <|eot_id|>, ...). */
bool di_tok_is_eog(const di_tokenizer *t, int32_t id);
di_tok_type di_tok_type_of(const di_tokenizer *t, int32_t id); /* UNDEFINED when out of range */
/* The token's stored text (vocab form, e.g. "Ġhello" / "▁hello"), not NUL-
 * terminated; NULL and *len = 0 when id is out of range. */
const char *di_tok_text(const di_tokenizer *t, int32_t id, size_t *len);
/* The bytes the token decodes to ("piece"); control tokens give their text
 * only when render_special. Returns bytes written or needed: like snprintf
 * it never writes past size and never adds a NUL. Negative on a bad id. */
int64_t di_tok_piece(const di_tokenizer *t, int32_t id, bool render_special, char *buf,
                     size_t size);
/* Looks up a token by its exact stored text; DI_TOK_NULL when absent. */
int32_t di_tok_find(const di_tokenizer *t, const char *text, size_t len);
/* Short description: model kind and pre-tokenizer ("bpe/smollm"). */
const char *di_tok_describe(const di_tokenizer *t);

/* ---- encode / decode ----------------------------------------------------- */

/* Appends the ids of text[0..len) to out.
 * add_special: prepend BOS / append EOS as the model's metadata says
 *   (add_bos_token / add_eos_token; HF post-processor template).
 * parse_special: recognize special (control) tokens written in the text;
 *   when false they are tokenized as plain text. Non-special added tokens
 *   (GGUF USER_DEFINED) are always recognized, as in llama.cpp and HF. */
di_status di_tok_encode(const di_tokenizer *t, const char *text, size_t len, bool add_special,
                        bool parse_special, di_tok_ids *out, di_error *err);

/* Decodes ids into a malloc'd, NUL-terminated byte string (*out, *out_len
 * excludes the NUL; caller frees). Control tokens are rendered only when
 * render_special. For SentencePiece vocabularies the one space the encoder
 * put in front of the text is removed again. */
di_status di_tok_decode(const di_tokenizer *t, const int32_t *ids, size_t n_ids,
                        bool render_special, char **out, size_t *out_len, di_error *err);

/* ---- streaming detokenizer ---------------------------------------------- */

/* Turns a stream of ids into text that is safe to show as it comes: output
 * is always whole, valid UTF-8 (bytes that can never form a character come
 * out as U+FFFD), byte-fallback tokens are joined, the SentencePiece leading
 * space is dropped as in di_tok_decode, and stop strings are found even when
 * they span several tokens: text that might be the start of a stop string is
 * held back until it is known not to be. One object per sequence. */
typedef struct di_tok_detok di_tok_detok;

typedef struct di_tok_detok_opts {
    bool render_special;      /* show control tokens' text */
    const char *const *stops; /* (n_stops) NUL-terminated UTF-8 stop strings, copied */
    size_t n_stops;
} di_tok_detok_opts;

/* Output of one step; text points into the detokenizer and stays valid
 * until the next call on it. */
typedef struct di_tok_detok_out {
    const char *text; /* (len) bytes of new text, valid UTF-8 */
    size_t len;
    int stop_index;   /* >= 0: this stop string was found; text ends before it, and
                         later pushes return no text and the same index. -1 otherwise. */
} di_tok_detok_out;

/* opts may be NULL. t must outlive the detokenizer. */
di_status di_tok_detok_create(const di_tokenizer *t, const di_tok_detok_opts *opts,
                              di_tok_detok **out, di_error *err);
void di_tok_detok_free(di_tok_detok *d);
/* Feeds one id. */
di_status di_tok_detok_push(di_tok_detok *d, int32_t id, di_tok_detok_out *out, di_error *err);
/* End of stream: returns what was held back (incomplete UTF-8 -> U+FFFD;
 * a partial stop-string prefix is plain text after all). */
di_status di_tok_detok_flush(di_tok_detok *d, di_tok_detok_out *out, di_error *err);
/* Back to the start-of-sequence state (keeps the options). */
void di_tok_detok_reset(di_tok_detok *d);

/* ---- chat templates ----------------------------------------------------- */

typedef enum di_chat_kind {
    DI_CHAT_UNKNOWN = 0, /* not recognized: apply falls back to ChatML */
    DI_CHAT_CHATML,      /* <|im_start|>role\n...<|im_end|>\n (SmolLM2, Qwen) */
    DI_CHAT_LLAMA3,      /* <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|> */
    DI_CHAT_DEEPSEEK3,   /* <｜User｜>...<｜Assistant｜>...<｜end▁of▁sentence｜> (V3, V4) */
    DI_CHAT_PHI3,        /* <|user|>\n...<|end|>\n<|assistant|>\n */
    DI_CHAT_DEEPSEEK41,  /* <｜System｜>..<｜User｜>..<｜Assistant｜></think>.. (V4.1, non-thinking) */
    DI_CHAT_GEMMA,       /* <start_of_turn>user\n...<end_of_turn>\n<start_of_turn>model\n (Gemma 2 / 3) */
    DI_CHAT_LLAMA31,     /* Llama 3.1 / 3.2 / 3.3: LLAMA3 turns after a system header with the
                          * dates, JSON tool calls (text/chat_llama31.h) */
    DI_CHAT_MISTRAL,     /* Mistral-7B-Instruct-v0.3: <s>[INST] ...[/INST] reply</s>, the system text
                          * in front of the last user turn */
    DI_CHAT_MISTRAL_V1,  /* Mistral-7B-Instruct-v0.1 / v0.2, Mixtral-8x7B-Instruct: <s>[INST] ... [/INST]reply</s>,
                          * no system messages */
    DI_CHAT_MISTRAL_TEKKEN, /* Mistral-Nemo-Instruct-2407 (v3-tekken): v3 without the spaces,
                             * <s>[INST]...[/INST]reply</s> */
    DI_CHAT_MISTRAL_V7,  /* Mistral-Large-Instruct-2411: [SYSTEM_PROMPT] ...[/SYSTEM_PROMPT][INST] ...[/INST] reply</s> */
    DI_CHAT_LLAMA2,      /* Llama-2-chat: <s>[INST] <<SYS>>\n...\n<</SYS>>\n\n... [/INST] reply </s> */
} di_chat_kind;

typedef struct di_chat_msg {
    const char *role;    /* "system", "user", "assistant" or "tool" */
    const char *content; /* UTF-8, NUL-terminated */
} di_chat_msg;

/* Recognizes a Jinja template text by its markers; DI_CHAT_UNKNOWN if none. */
di_chat_kind di_tok_chat_detect(const char *template_text);
/* "chatml", "llama3", "llama3.1", "deepseek3" (also "deepseek-v3",
 * "deepseek-v4"), "phi3", "deepseek-v4.1", "gemma", "mistral" (also
 * "mistral-v3"), "mistral-v1" (also "mixtral"), "mistral-v3-tekken" (also
 * "mistral-nemo", "tekken"), "mistral-v7", "llama2" (also "llama-2");
 * DI_CHAT_UNKNOWN for anything else. */
di_chat_kind di_tok_chat_from_name(const char *name);
const char *di_tok_chat_name(di_chat_kind k);
/* The kind recognized from the template shipped with the model
 * (GGUF tokenizer.chat_template or tokenizer_config.json chat_template). */
di_chat_kind di_tok_chat_kind(const di_tokenizer *t);
/* The shipped template text, or NULL. */
const char *di_tok_chat_template(const di_tokenizer *t);
/* Sets the kind apply uses by default (the model's loader knows the family
 * when the tokenizer files do not say it: DeepSeek-V4.1 folders). */
void di_tok_set_chat_kind(di_tokenizer *t, di_chat_kind kind);

/* Renders messages into the prompt string (malloc'd, NUL-terminated; caller
 * frees). kind DI_CHAT_UNKNOWN means "the model's own template", and when
 * that is not recognized either, ChatML (the most common format; see
 * src/text/chat_template.c for why). BOS is written where the template writes
 * it (Llama-3, DeepSeek, Phi-3), so encode the result with add_special=false
 * and parse_special=true. */
di_status di_tok_chat_apply(const di_tokenizer *t, di_chat_kind kind, const di_chat_msg *msgs,
                            size_t n_msgs, bool add_generation_prompt, char **out,
                            size_t *out_len, di_error *err);

/* Messages -> prompt ids (appended to *ids; caller frees), ending with the
 * assistant's turn opened: what a caller holding only plain messages
 * calls, so that it never names a model family (src/text/chat_prompt.c).
 * kind DI_CHAT_UNKNOWN means the tokenizer's own. The kind picks the
 * rendering: DI_CHAT_DEEPSEEK41 through the conversation renderer of
 * text/dsml.h (special tokens only where it writes them; a tokenizer
 * lacking them falls back to the template), every other kind through
 * di_tok_chat_apply, encoded with add_special=false, parse_special=true. */
di_status di_tok_chat_encode(const di_tokenizer *t, di_chat_kind kind, const di_chat_msg *msgs, size_t n_msgs,
                             di_tok_ids *ids, di_error *err);

#endif
