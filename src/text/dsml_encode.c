/* A rendered DeepSeek prompt -> token ids, as deepseek-recipe's encode():
 * each special range is exactly one special token of the tokenizer; the text
 * between ranges is encoded as plain text (special-token spellings in it are
 * not recognized), each stretch on its own. */
#include "text/dsml.h"
#include "text/tok_internal.h"

di_status di_dsml_encode(const di_tokenizer *t, const di_dsml_prompt *p, di_tok_ids *out, di_error *err) {
    if (!t || !p || !out || (!p->text && p->len)) return di_error_set(err, DI_ERR_INVALID_ARG, "dsml encode: NULL");
    size_t at = 0;
    for (size_t i = 0; i <= p->n_ranges; i++) {
        size_t start = i < p->n_ranges ? p->ranges[i][0] : p->len;
        size_t end = i < p->n_ranges ? p->ranges[i][1] : p->len;
        if (start < at || end < start || end > p->len)
            return di_error_set(err, DI_ERR_INVALID_ARG, "dsml encode: special ranges out of order");
        if (start > at) {
            di_status s = di_tok_encode(t, p->text + at, start - at, false, false, out, err);
            if (s) return s;
        }
        if (end > start) {
            int32_t id = di_tok_find(t, p->text + start, end - start);
            if (id == DI_TOK_NULL || (di_tok_type_of(t, id) != DI_TOK_TYPE_CONTROL && di_tok_type_of(t, id) != DI_TOK_TYPE_USER_DEFINED))
                return di_error_set(err, DI_ERR_NOT_FOUND, "dsml encode: special token \"%.*s\" is not in the vocabulary",
                                    (int)(end - start), p->text + start);
            if (!tok_ids_push(out, id)) return di_error_set(err, DI_ERR_NOMEM, "dsml encode: out of memory");
        }
        at = end;
    }
    return DI_OK;
}
