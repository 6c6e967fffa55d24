/* DeepSeek V4 / V4.1 chats in the server (dsml_chat.c): Chat Completions
 * body -> conversation -> prompt ids through src/text/dsml.h, and model
 * output -> content / reasoning_content / tool_calls (whole message or
 * stream deltas in Chat Completions' delta shape).
 *
 * Ownership: srv_dsml_out_new allocates an output state the caller frees
 * with srv_dsml_out_free; JSON returned is a new reference. */
#ifndef DI_SERVER_DSML_CHAT_H
#define DI_SERVER_DSML_CHAT_H

#include "server/server_internal.h"
#include "text/dsml.h"
#include "server/llama_tools.h"
#include "vision/image.h"

/* What the output parser needs to know about the request. */
typedef struct srv_dsml_opts {
    di_dsml_version version;
    bool thinking;     /* the prompt opened a thought */
    bool parse_tools;  /* tools shown and tool_choice not "none" */
    bool in_calls;     /* required / named tool: the prompt opened the call block */
    char opener[64];   /* in_calls: the prompt's tail from the block's opening tag */
    /* image_url parts in prompt order (their "url" values, borrowed from
     * the request body); the prompt holds one image placeholder each */
    const json_t *image_urls[DI_IMAGE_DEFAULT_MAX_IMAGES];
    size_t n_images;
    bool llama_json;   /* not DeepSeek: a Llama 3.1 chat with tools (llama_tools.h) */
    bool think_tags;   /* not DeepSeek: a ChatML reasoning model's <think> reply (think_out.h);
                        * thinking says whether the reply may open one */
} srv_dsml_opts;

/* Checked tools (a new array; only the named one when named), or NULL with
 * r filled (400). Shared by the DeepSeek and Llama paths. */
json_t *srv_chat_tools(const json_t *tools, const char *named, srv_reply *r);
/* tool_choice: *choice "auto" | "none" | "required" (a named function is
 * "required" with *named borrowing its name); false with r filled. */
bool srv_chat_tool_choice(const json_t *root, const char **choice, const char **named, srv_reply *r);

/* Converts a Chat Completions body into a conversation (*conv, caller frees
 * with di_dsml_conv_free); false with r filled (400) on a bad field. */
bool srv_dsml_chat_conv(const json_t *root, di_dsml_version v, di_dsml_conv **conv, srv_dsml_opts *o,
                        srv_reply *r);
/* The conversation rendered and encoded for the server's model (*ids
 * malloc'd). *grammar: NULL, or (a required / named tool_choice) the
 * DI_CONSTRAINT_TOOL_CALLS text that enforces the opened call block
 * (malloc'd; the caller frees). */
bool srv_dsml_chat_prompt(di_server *s, const json_t *root, srv_dsml_opts *o, int32_t **ids, size_t *n,
                          char **grammar, srv_reply *r);

typedef struct srv_dsml_out srv_dsml_out;

srv_dsml_out *srv_dsml_out_new(di_server *s, const srv_dsml_opts *o);
void srv_dsml_out_free(srv_dsml_out *d);
/* Feeds output text (any split); final also ends the output. false on a
 * parser failure (out of memory). */
bool srv_dsml_out_push(srv_dsml_out *d, const char *text, size_t n, bool final);
/* (An output state made with opts llama_json reads a Llama 3.1 reply
 * instead: llama_tools.h; think_tags a <think> reply: think_out.h; the
 * same calls below.) */
/* The deltas since the last call: an array of Chat Completions delta
 * objects (reasoning_content, content, a new tool call's id + name, its
 * argument text). */
json_t *srv_dsml_out_deltas(srv_dsml_out *d);
/* The whole assistant message so far (content, reasoning_content when
 * thinking, tool_calls when any). */
json_t *srv_dsml_out_message(srv_dsml_out *d);
size_t srv_dsml_out_n_calls(const srv_dsml_out *d);
bool srv_dsml_out_thinking(const srv_dsml_out *d);

#endif
