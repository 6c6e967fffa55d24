/* Chat messages -> prompt ids: the one call a caller that only has plain
 * messages makes (the engine's di_request.messages), so that it never
 * needs to know which model family it serves. The tokenizer's chat kind
 * (or the one asked for) picks the rendering:
 *
 *   DI_CHAT_DEEPSEEK41  the conversation renderer of dsml.h (thinking off),
 *                       as deepseek-recipe renders and encodes it: special
 *                       tokens only where the renderer writes them, so a
 *                       message's text cannot inject one. A tokenizer
 *                       without those special tokens (tiny test
 *                       checkpoints) takes the template path below;
 *   any other kind      di_tok_chat_apply's template text, encoded with
 *                       special-token parsing and no BOS of its own (the
 *                       template writes it). */
#include "base/alloc.h"
#include "text/dsml.h"
#include "text/tok_internal.h"

#include <stdlib.h>
#include <string.h>

/* DI_ERR_NOT_FOUND when t lacks the renderer's special tokens. */
static di_status dsml_ids(const di_tokenizer *t, const di_chat_msg *msgs, size_t n_msgs, di_tok_ids *ids,
                          di_error *err) {
    const char **roles = di_malloc_array(n_msgs ? n_msgs : 1, sizeof *roles);
    const char **contents = di_malloc_array(n_msgs ? n_msgs : 1, sizeof *contents);
    di_status s = roles && contents ? DI_OK : di_error_set(err, DI_ERR_NOMEM, "chat: out of memory");
    for (size_t i = 0; i < n_msgs && !s; i++) {
        roles[i] = msgs[i].role;
        contents[i] = msgs[i].content;
    }
    di_dsml_conv *c = NULL;
    di_dsml_prompt p = {0};
    if (!s) s = di_dsml_conv_from_messages(roles, contents, n_msgs, false, &c, err);
    if (!s) s = di_dsml_render(c, DI_DSML_V41, &p, err);
    if (!s) s = di_dsml_encode(t, &p, ids, err);
    di_dsml_prompt_free(&p);
    di_dsml_conv_free(c);
    free(roles);
    free(contents);
    return s;
}

di_status di_tok_chat_encode(const di_tokenizer *t, di_chat_kind kind, const di_chat_msg *msgs, size_t n_msgs,
                             di_tok_ids *ids, di_error *err) {
    if (!t || !ids || (!msgs && n_msgs)) return di_error_set(err, DI_ERR_INVALID_ARG, "chat: NULL argument");
    if (kind == DI_CHAT_UNKNOWN) kind = t->chat_kind;
    if (kind == DI_CHAT_DEEPSEEK41) {
        di_status s = dsml_ids(t, msgs, n_msgs, ids, err);
        if (s != DI_ERR_NOT_FOUND) return s;
        ids->n = 0; /* the special tokens are missing: the template's text instead */
        di_error_clear(err);
    }
    for (size_t i = 0; i < n_msgs; i++)
        if (!msgs[i].role || !msgs[i].content)
            return di_error_set(err, DI_ERR_INVALID_ARG, "chat: message %zu has no role or content", i);
    char *text = NULL;
    di_status s = di_tok_chat_apply(t, kind, msgs, n_msgs, true, &text, NULL, err);
    if (s) return s;
    s = di_tok_encode(t, text, strlen(text), false, true, ids, err);
    free(text);
    return s;
}
