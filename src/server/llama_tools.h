/* Tools on Llama 3.1 / 3.2 / 3.3 chats (llama_tools.c): a Chat Completions
 * body with tools -> the prompt the model's template renders
 * (src/text/chat_llama31.c), and the reply -> content or one tool call
 * (the template's JSON {"name": ..., "parameters": ...}), whole or as
 * stream deltas in Chat Completions' shape.
 *
 * Ownership: srv_llama_out_new allocates an output state the caller frees
 * with srv_llama_out_free; text, schema and JSON returned are the caller's. */
#ifndef DI_SERVER_LLAMA_TOOLS_H
#define DI_SERVER_LLAMA_TOOLS_H

#include "server/server_internal.h"

/* Whether the model's template is Llama 3.1's (tools take this path). */
bool srv_llama_tools_model(di_server *s);

/* The prompt text for msgs (role and joined text of each body message, in
 * order) with the body's tools, tool_choice and assistant tool_calls.
 * *schema: NULL, or for tool_choice "required" / a named function a JSON
 * Schema of the call (one of the tools with valid parameters) for the
 * grammar engine. *parse: the reply may be a tool call (tools shown).
 * false with r filled (400) on a bad field or what the template refuses. */
bool srv_llama_chat_text(di_server *s, const json_t *root, const char *const *roles, const char *const *contents,
                         size_t n, char **text, char **schema, bool *parse, srv_reply *r);

typedef struct srv_llama_out srv_llama_out;

srv_llama_out *srv_llama_out_new(di_server *s);
void srv_llama_out_free(srv_llama_out *o);
/* Feeds reply text (any split); final ends it. false on no memory. A reply
 * that may still become a call (chat_llama31.h) is held back until it is
 * decided; other text streams at once. */
bool srv_llama_out_push(srv_llama_out *o, const char *text, size_t n, bool final);
/* The deltas since the last call (content, or the call: id + name, then
 * its arguments). */
json_t *srv_llama_out_deltas(srv_llama_out *o);
/* The whole message: content, or tool_calls with content null. */
json_t *srv_llama_out_message(srv_llama_out *o);
size_t srv_llama_out_n_calls(const srv_llama_out *o);

#endif
