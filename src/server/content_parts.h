/* A chat message's "content" as an array of parts, joined into one text:
 * the loop the OpenAI routes (openai_prompt.c) and the DeepSeek
 * conversation (dsml_chat.c) share. They differ only in data: the
 * separator, the wording of their refusals and what an image_url part
 * turns into (a placeholder, or a text standing for the image).
 *
 * Every part must be an object with a string "type"; a "text" part adds
 * its "text", an "image_url" part the piece the rules' image callback
 * gives; any other part is refused by name (400 unsupported_content). */
#ifndef DI_SERVER_CONTENT_PARTS_H
#define DI_SERVER_CONTENT_PARTS_H

#include "server/server_internal.h"

typedef struct srv_parts_rules {
    const char *sep;        /* between two parts: "\n" (vLLM's join) or "\n\n" (deepseek-recipe's) */
    const char *shape_tail; /* a part not {"type": string}: 400 invalid_type "'<param>'<shape_tail>" */
    const char *only;       /* another type: "... are not supported <only>." */
    /* An image_url part (NULL: refused like any other type): sets *piece
     * (borrowed; lives until the join ends) and *len, or fills r and
     * returns false. */
    bool (*image)(void *ctx, json_t *part, const char *param, const char **piece, size_t *len, srv_reply *r);
    void *ctx;
} srv_parts_rules;

/* Joins the parts of the array `parts` into *out (which the caller
 * initializes and frees with srv_buf_free; out->data stays NULL when
 * nothing was written). false with r filled and *out freed. */
bool srv_content_parts_join(const json_t *parts, const char *param, const srv_parts_rules *rules, srv_buf *out,
                            srv_reply *r);

#endif
