/* Reasoning in <think> ... </think> (Qwen3, QwQ and the other ChatML
 * reasoning models whose chat template writes the tags), for the server's
 * Chat Completions replies: the model's output split into
 * reasoning_content (inside the tags) and content (after them), whole or
 * as stream deltas, the shape DeepSeek's replies have here (dsml_chat.h).
 *
 *   "<think>\nA\n</think>\n\nB"  ->  reasoning_content "A\n", content "B"
 *   "B" (no opening tag first)   ->  content "B", reasoning_content null
 *
 * The newlines right after each tag are the template's layout and are
 * dropped. Text that may still become a tag ("</thi" at the end of a
 * piece) is held back until the next piece decides it.
 *
 * Ownership: srv_think_out_new allocates, srv_think_out_free frees; JSON
 * returned is a new reference. */
#ifndef DI_SERVER_THINK_OUT_H
#define DI_SERVER_THINK_OUT_H

#include "server/server_internal.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* For a chat rendered by the model's template into *text: whether the
 * template is a <think> one (it writes the tags). If so, *thinking is the
 * request's chat_template_kwargs.enable_thinking (default true, as the
 * template's); false appends the empty thought the template itself adds
 * then ("<think>\n\n</think>\n\n"), so the reply starts with the answer.
 * false with r filled (400 on a bad field, 503 on no memory). */
bool srv_think_chat(di_server *s, const json_t *root, char **text, bool *is_think, bool *thinking, srv_reply *r);

typedef struct srv_think_out srv_think_out;

/* thinking: the reply may open with <think> (false: everything is content,
 * as when the prompt closed an empty thought: enable_thinking false). */
srv_think_out *srv_think_out_new(bool thinking);
void srv_think_out_free(srv_think_out *o);
/* Feeds output text (any split); final ends it. false when out of memory. */
bool srv_think_out_push(srv_think_out *o, const char *text, size_t n, bool final);
/* The deltas since the last call: [{"reasoning_content": ...}, {"content": ...}]. */
json_t *srv_think_out_deltas(srv_think_out *o);
/* {"role": "assistant", "content", "reasoning_content"} so far. */
json_t *srv_think_out_message(srv_think_out *o);
bool srv_think_out_thinking(const srv_think_out *o);

#endif
