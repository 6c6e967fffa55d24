/* libFuzzer target for src/text: random bytes (invalid UTF-8 included) into
 * encode with and without special-token parsing, the same bytes read as ids
 * into decode and the streaming detokenizer (with a stop string), and into
 * the chat renderer. Must never crash, leak or trip a sanitizer; invalid
 * input must come back as an error status.
 * Tokenizers are loaded once from testdata/ (`make testdata`; run from the repo root,
 * as scripts/fuzz.sh does); the first input byte picks one. */
#include "text/tokenizer.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char *const PATHS[] = {
    "testdata/tokenizer/ggml-vocab-gpt-2.gguf",
    "testdata/tokenizer/ggml-vocab-llama-spm.gguf",
    "testdata/tokenizer/ggml-vocab-deepseek-llm.gguf",
    "testdata/tokenizer/deepseek-v3",
    "testdata/tokenizer/ggml-vocab-phi-3.gguf",
    "tests/data/golden/tokenizer/json/qwen2",
    "tests/data/golden/tokenizer/json/wordpiece",
    "tests/data/golden/tokenizer/json/wordpiece_nfd",
    "tests/data/golden/tokenizer/json/unigram",
};
#define N_TOK (sizeof PATHS / sizeof PATHS[0])
static di_tokenizer *g_tok[N_TOK];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    for (size_t i = 0; i < N_TOK; i++) {
        di_error err;
        if (di_tok_load(PATHS[i], &g_tok[i], &err)) g_tok[i] = NULL;
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    di_tokenizer *t = g_tok[data[0] % N_TOK];
    if (!t) return 0;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    di_error err;
    di_tok_ids ids = {0};
    for (int ps = 0; ps < 2; ps++) {
        ids.n = 0;
        if (di_tok_encode(t, text, len, ps, ps, &ids, &err) == DI_OK) {
            char *out;
            size_t n;
            if (di_tok_decode(t, ids.data, ids.n, ps, &out, &n, &err) == DI_OK) free(out);
        }
    }
    di_tok_ids_free(&ids);

    /* bytes as ids: some in range, some not */
    size_t n_ids = len / 4;
    int32_t *raw = malloc(n_ids ? n_ids * sizeof *raw : 1);
    if (!raw) return 0;
    int32_t vocab = di_tok_vocab_size(t);
    for (size_t i = 0; i < n_ids; i++) {
        uint32_t v;
        memcpy(&v, text + 4 * i, 4);
        raw[i] = (v & 0x80000000u) ? (int32_t)v : (int32_t)(v % (uint32_t)(vocab + 2));
    }
    char *out;
    size_t n;
    if (di_tok_decode(t, raw, n_ids, data[0] & 1, &out, &n, &err) == DI_OK) free(out);
    const char *stops[] = {"\n\n", "</s>"};
    di_tok_detok_opts o = {.render_special = data[0] & 2, .stops = stops, .n_stops = 2};
    di_tok_detok *d;
    if (di_tok_detok_create(t, &o, &d, &err) == DI_OK) {
        di_tok_detok_out r;
        for (size_t i = 0; i < n_ids; i++) di_tok_detok_push(d, raw[i], &r, &err);
        di_tok_detok_flush(d, &r, &err);
        di_tok_detok_free(d);
    }
    free(raw);

    /* chat: the text (NUL-terminated copy) as a user message */
    char *msg = malloc(len + 1);
    if (msg) {
        memcpy(msg, text, len);
        msg[len] = '\0';
        di_chat_msg m[2] = {{"system", "s"}, {(data[0] & 4) ? "tool" : "user", msg}};
        char *p;
        if (di_tok_chat_apply(t, (di_chat_kind)(data[0] % 5), m, 2, data[0] & 8, &p, &n, &err) == DI_OK) free(p);
        free(msg);
    }
    return 0;
}
