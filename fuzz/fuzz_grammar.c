/* libFuzzer target for src/grammar: the first input byte picks the front
 * end (EBNF, regex, JSON Schema strict/lenient/flexible, JSON-object mode,
 * tool calls: the text is the spec, e.g. {"syntax": "dsml_v41", "tools":
 * [...]}),
 * the rest up to the first NUL is the grammar text and the bytes after it
 * are fed to a matcher (with resets and token rollbacks over a small
 * synthetic vocabulary, so the mask caches run too). Must never crash, leak
 * or trip a sanitizer; bad grammars come back as an error status. */
#include "grammar/grammar.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static di_grammar_vocab *g_vocab;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    static const char *const toks[] = {"{", "}", "[", "]", "\"", ",", ":", "a", "ab", "1", "12", " ", "\\", "\"a\"",
                                       "true", "null", "é", "\xe4\xb8", "-", ".", "x\"}", "\xff｜DSML｜", "\xff",
                                       "</s>"};
    enum { N = sizeof toks / sizeof toks[0] };
    const uint8_t *b[N];
    uint32_t l[N];
    uint8_t f[N] = {0};
    for (int i = 0; i < N; i++) b[i] = (const uint8_t *)toks[i], l[i] = (uint32_t)strlen(toks[i]);
    f[N - 3] = DI_GRAMMAR_TOKEN_NAMED; /* a special token grammars may name */
    f[N - 1] = DI_GRAMMAR_TOKEN_EOS;
    di_error err;
    if (di_grammar_vocab_create(N, b, l, f, &g_vocab, &err)) g_vocab = NULL;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || !g_vocab) return 0;
    const char *text = (const char *)data + 1;
    const uint8_t *nul = memchr(text, 0, size - 1);
    size_t len = nul ? (size_t)(nul - (const uint8_t *)text) : size - 1;
    const uint8_t *feed = nul ? nul + 1 : NULL;
    size_t n_feed = nul ? size - 1 - len - 1 : 0;
    di_grammar_options opt = di_grammar_options_default();
    di_grammar *g = NULL;
    di_error err;
    switch (data[0] % 7) {
    case 0: di_grammar_compile_ebnf(text, len, NULL, &g, &err); break;
    case 1: di_grammar_compile_regex(text, len, &g, &err); break;
    case 2: di_grammar_compile_json_schema(text, len, &opt, &g, &err); break;
    case 3: opt.lenient = true; di_grammar_compile_json_schema(text, len, &opt, &g, &err); break;
    case 4: opt.whitespace = DI_GRAMMAR_WS_FLEXIBLE; di_grammar_compile_json_schema(text, len, &opt, &g, &err); break;
    case 5: opt.lenient = true; di_grammar_compile_tool_calls(text, len, &opt, &g, &err); break;
    default: di_grammar_compile_json_object(&opt, &g, &err); break;
    }
    if (!g) return 0;
    di_grammar_matcher *m;
    if (di_grammar_matcher_create(g, g_vocab, &m, &err) == DI_OK) {
        uint32_t mask[1];
        for (size_t i = 0; i < n_feed; i++) {
            uint8_t c = feed[i];
            if (c < 0x20) {
                /* control bytes drive the token API */
                di_grammar_matcher_fill_mask(m, mask, 1, &err);
                if (c & 1) di_grammar_matcher_rollback(m, c >> 1 & 3);
                else if (c & 2) di_grammar_matcher_reset(m);
                else di_grammar_matcher_advance_token(m, (uint32_t)(c >> 2) % di_grammar_vocab_size(g_vocab));
            } else {
                di_grammar_matcher_advance_bytes(m, &c, 1);
            }
        }
        di_grammar_matcher_free(m);
    }
    di_grammar_free(g);
    return 0;
}
