/* Llama 3.1 / 3.2 / 3.3 chats with JSON tool calls (chat_llama31.c): the
 * shipped chat template (meta-llama-Llama-3.1-8B-Instruct.jinja; 3.2 and
 * 3.3 render the same without builtin tools) reproduced in C, and the
 * model's JSON tool call read back.
 *
 * Goldens: tests/data/golden/chat/llama31_tools.json, rendered by jinja2 from
 * the template text in the pinned llama-cpp-python sdist
 * (scripts/gen_goldens_llama31_tools.py); tests/text/test_chat_llama31.c.
 *
 * Ownership: rendered text and parsed strings are malloc'd; the caller
 * frees them. */
#ifndef DI_TEXT_CHAT_LLAMA31_H
#define DI_TEXT_CHAT_LLAMA31_H

#include "base/status.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* The template's "today" when the renderer gives it no date (3.1 fixes it;
 * 3.2 asks strftime_now, which plain jinja2 does not define). */
#define DI_LLAMA31_DATE "26 Jul 2024"

/* Renders messages (an array of {"role", "content": string | null |
 * object | array, "tool_calls": [{"function": {"name", "arguments"}}]})
 * with tools (an array printed as given, or NULL: none) the way the
 * template does with tools_in_user_message (its default): BOS, the system
 * header ("Environment: ipython" when tools are given, the knowledge and
 * today dates, the first message's text when it is a system message), the
 * tools and their instructions in front of the first remaining message's
 * text, then every turn; an assistant turn with tool_calls is its one call
 * as {"name": N, "parameters": ARGS}; tool / ipython turns are the ipython
 * role with the content as JSON. bos is the BOS token's text. Errors
 * (DI_ERR_FORMAT) where the template raises: tools with no message to put
 * them in, an assistant turn with other than one call. */
di_status di_chat_llama31_render(const json_t *messages, const json_t *tools, bool add_generation_prompt,
                                 const char *bos, char **out, size_t *out_len, di_error *err);

/* Whether text (the whole reply) is a tool call as the template asks for
 * it: optional whitespace and <|python_tag|>, then one JSON object
 * {"name": string, "parameters": object} ("arguments" is taken for
 * "parameters"), then only whitespace. On true *name and *arguments (the
 * parameters as compact JSON) are malloc'd. */
bool di_chat_llama31_parse_call(const char *text, size_t n, char **name, char **arguments);

/* Whether a reply that starts with text[0..n) may still become a tool
 * call (the first non-space byte is '{' or the start of <|python_tag|>):
 * a streaming caller holds such text back until the end. */
bool di_chat_llama31_may_be_call(const char *text, size_t n);

#endif
