/* Adapter: the grammar vocabulary of a loaded tokenizer (text module).
 * Special tokens other than end-of-generation ones become NAMED tokens
 * (grammar.h): unreachable unless a grammar spells them. */
#include "grammar/grammar_tok.h"

#include "base/alloc.h"

#include <stdlib.h>
#include <string.h>

di_status di_grammar_vocab_from_tokenizer(const di_tokenizer *t, di_grammar_vocab **out, di_error *err) {
    *out = NULL;
    int32_t n = di_tok_vocab_size(t);
    if (n <= 0) return di_error_set(err, DI_ERR_INVALID_ARG, "tokenizer has no vocabulary");
    uint8_t **bytes = di_calloc((size_t)n, sizeof *bytes);
    uint32_t *lens = di_calloc((size_t)n, sizeof *lens);
    uint8_t *flags = di_calloc((size_t)n, 1);
    di_status st = DI_OK;
    if (!bytes || !lens || !flags) {
        st = di_error_set(err, DI_ERR_NOMEM, "out of memory");
        goto done;
    }
    char buf[256];
    for (int32_t id = 0; id < n; id++) {
        di_tok_type ty = di_tok_type_of(t, id);
        if (di_tok_is_eog(t, id)) flags[id] = DI_GRAMMAR_TOKEN_EOS;
        /* control, user-defined (chat markers), unknown and unused tokens
         * are part of grammar output only where a grammar names them */
        else if (ty != DI_TOK_TYPE_NORMAL && ty != DI_TOK_TYPE_BYTE) flags[id] = DI_GRAMMAR_TOKEN_NAMED;
        if (flags[id] == DI_GRAMMAR_TOKEN_EOS) continue;
        bool named = flags[id] == DI_GRAMMAR_TOKEN_NAMED;
        if (named) buf[0] = (char)DI_GRAMMAR_SPECIAL_BYTE;
        int64_t k = di_tok_piece(t, id, named, buf + named, sizeof buf - named);
        /* a special token without (clean) text cannot be named */
        if (named && (k <= 0 || ((size_t)k < sizeof buf - 1 && memchr(buf + 1, DI_GRAMMAR_SPECIAL_BYTE, (size_t)k)))) {
            flags[id] = DI_GRAMMAR_TOKEN_SPECIAL;
            continue;
        }
        k += named;
        if (k < 0) {
            st = di_error_set(err, DI_ERR_FORMAT, "token %d has no bytes", (int)id);
            goto done;
        }
        bytes[id] = malloc(k ? (size_t)k : 1);
        if (!bytes[id]) {
            st = di_error_set(err, DI_ERR_NOMEM, "out of memory");
            goto done;
        }
        if ((size_t)k <= sizeof buf) memcpy(bytes[id], buf, (size_t)k);
        else {
            bytes[id][0] = buf[0];
            di_tok_piece(t, id, named, (char *)bytes[id] + named, (size_t)k - named);
        }
        lens[id] = (uint32_t)k;
    }
    st = di_grammar_vocab_create((uint32_t)n, (const uint8_t *const *)bytes, lens, flags, out, err);
done:
    if (bytes)
        for (int32_t i = 0; i < n; i++) free(bytes[i]);
    free(bytes), free(lens), free(flags);
    return st;
}
