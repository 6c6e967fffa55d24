/* DeepSeek's conversation protocol, prompt side (module `dsml`): a
 * conversation (system / user / assistant / tool / latest_reminder messages,
 * tools, thinking mode, reasoning effort, tool choice, response format)
 * rendered into a DeepSeek V4 or V4.1 prompt and encoded into token ids,
 * exactly as PyPI deepseek-recipe's DeepseekV4Encoding /
 * DeepseekV41Encoding do (goldens: tests/data/golden/dsml/, made by
 * scripts/gen_goldens_dsml.py). "DSML" is the tool-call markup the models
 * write (<｜DSML｜tool_calls> ... </｜DSML｜tool_calls>).
 *
 *   dsml_conv.c    JSON (Chat-Completions-like shape) -> di_dsml_conv, validated
 *   dsml_json.c    JSON text the way the recipe prints it (Python json.dumps)
 *   dsml_render.c  di_dsml_conv -> prompt text + special-token byte ranges
 *   dsml_encode.c  prompt -> ids (ranges = special tokens, the rest plain text)
 *   dsml_parse.c   model output -> reasoning / content / tool calls, incrementally
 *
 * Ownership: di_dsml_conv_from_json allocates a conversation the caller frees
 * with di_dsml_conv_free; di_dsml_render fills a prompt the caller frees with
 * di_dsml_prompt_free. Everything is plain data: no globals, thread-safe. */
#ifndef DI_TEXT_DSML_H
#define DI_TEXT_DSML_H

#include "base/status.h"
#include "text/tokenizer.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

typedef enum di_dsml_version {
    DI_DSML_V4 = 0,  /* DeepSeek-V4 (Pro / Flash): system text hoisted after BOS */
    DI_DSML_V41 = 1, /* DeepSeek-V4.1: <｜System｜> messages in place */
} di_dsml_version;

typedef enum di_dsml_role {
    DI_DSML_SYSTEM = 0,
    DI_DSML_USER,
    DI_DSML_ASSISTANT,
    DI_DSML_TOOL,
    DI_DSML_LATEST_REMINDER,
} di_dsml_role;

typedef enum di_dsml_effort {
    DI_DSML_EFFORT_DEFAULT = 0, /* none requested: the model's default */
    DI_DSML_EFFORT_LOW,
    DI_DSML_EFFORT_HIGH,
    DI_DSML_EFFORT_XHIGH,
    DI_DSML_EFFORT_MAX,
} di_dsml_effort;

typedef enum di_dsml_tool_choice {
    DI_DSML_TOOL_AUTO = 0,
    DI_DSML_TOOL_NONE,     /* tools are not shown to the model */
    DI_DSML_TOOL_REQUIRED, /* the prompt opens the tool-call block */
} di_dsml_tool_choice;

typedef enum di_dsml_format {
    DI_DSML_FORMAT_TEXT = 0,
    DI_DSML_FORMAT_JSON_OBJECT,
    DI_DSML_FORMAT_JSON_SCHEMA,
    DI_DSML_FORMAT_REGEX, /* enforced by the grammar engine only; not in the prompt */
} di_dsml_format;

/* A function tool. parameters is NULL when the tool has none (printed as
 * null); description NULL prints as "". */
typedef struct di_dsml_tool {
    char *name;
    char *description;
    json_t *parameters; /* owned reference */
} di_dsml_tool;

/* A tool call an earlier assistant turn made. arguments is the caller's text,
 * expected to be a JSON object (otherwise rendered as one string parameter
 * named "arguments", as the recipe does). */
typedef struct di_dsml_call {
    char *id;
    char *name;
    char *arguments;
} di_dsml_call;

typedef struct di_dsml_msg {
    di_dsml_role role;
    char *content;           /* never NULL ("" when absent) */
    char *reasoning;         /* assistant reasoning_content; NULL = absent (not "") */
    di_dsml_call *calls;     /* (n_calls) assistant tool calls */
    size_t n_calls;
    char *tool_call_id;      /* tool messages; may be NULL */
    bool prefix;             /* assistant: continue this message instead of a new turn */
    size_t n_images;         /* user / tool: the first n image_mark in content are images */
    char *image_mark;        /* the images' marker in content; NULL = "<｜image｜>" (rendered so) */
    di_dsml_tool *tools;     /* system: tools announced from here on (V4.1) */
    size_t n_tools;
} di_dsml_msg;

typedef struct di_dsml_conv {
    di_dsml_msg *msgs; /* (n_msgs) */
    size_t n_msgs;
    di_dsml_tool *tools; /* (n_tools) */
    size_t n_tools;
    bool thinking;
    di_dsml_effort effort;
    di_dsml_tool_choice tool_choice;
    di_dsml_format format;
    json_t *schema; /* FORMAT_JSON_SCHEMA: the schema (owned reference) */
    char *regex;    /* FORMAT_REGEX */
} di_dsml_conv;

/* Limits on hostile conversations (a clear error past them). */
#define DI_DSML_MAX_MESSAGES 100000u
#define DI_DSML_MAX_TOOLS 4096u
#define DI_DSML_MAX_CALLS 1024u
#define DI_DSML_MAX_NAME_BYTES 256u

/* Reads a conversation object:
 *   {"messages": [...], "tools": [{"type": "function", "function": {"name",
 *    "description", "parameters"}}], "tool_choice": "auto"|"none"|"required",
 *    "thinking": bool (default true), "reasoning_effort": "low"|"high"|
 *    "xhigh"|"max", "response_format": {"type": "text"|"json_object"|
 *    "json_schema" (json_schema.schema)|"regex" (regex)}}
 * messages: {"role", "content" (string), "reasoning_content", "tool_calls":
 * [{"id", "type": "function", "function": {"name", "arguments"}}],
 * "tool_call_id", "prefix", "images" (count), "image_mark" (the text
 * marking them in content, default "<｜image｜>"), "tools" (system)}.
 * Every field is checked; errors are DI_ERR_FORMAT / DI_ERR_RANGE with the
 * JSON path in the message. */
di_status di_dsml_conv_from_json(const json_t *root, di_dsml_conv **out, di_error *err);
void di_dsml_conv_free(di_dsml_conv *c);
/* A conversation of plain messages (roles "system", "user", "assistant",
 * "tool", "latest_reminder"; contents copied), no tools, thinking as given. */
di_status di_dsml_conv_from_messages(const char *const *roles, const char *const *contents, size_t n,
                                     bool thinking, di_dsml_conv **out, di_error *err);

/* A rendered prompt: text[0..len) (NUL-terminated) and the byte ranges that
 * are special tokens, ascending and disjoint. */
typedef struct di_dsml_prompt {
    char *text;
    size_t len;
    size_t (*ranges)[2]; /* (n_ranges) [start, end) byte offsets */
    size_t n_ranges;
} di_dsml_prompt;

di_status di_dsml_render(const di_dsml_conv *c, di_dsml_version v, di_dsml_prompt *out, di_error *err);
void di_dsml_prompt_free(di_dsml_prompt *p);

/* Appends the prompt's ids to out: each special range is one token (it must be
 * a special token of t, else DI_ERR_NOT_FOUND), the text between is encoded
 * as plain text (no special-token parsing, no BOS/EOS added). */
di_status di_dsml_encode(const di_tokenizer *t, const di_dsml_prompt *p, di_tok_ids *out, di_error *err);

/* ---- output side --------------------------------------------------------- */

/* A tool call parsed from the model's output; arguments is JSON text built
 * as the recipe builds it (not validated: a malformed call stays malformed). */
typedef struct di_dsml_out_call {
    char *name;
    size_t name_len;
    char *arguments;
    size_t arguments_len;
} di_dsml_out_call;

/* What the output says so far; strings NUL-terminated and owned by the
 * parser. reasoning is NULL when thinking is off. A caller streaming deltas
 * remembers the lengths it has sent. */
typedef struct di_dsml_message {
    char *reasoning;
    size_t reasoning_len;
    char *content;
    size_t content_len;
    di_dsml_out_call *calls; /* (n_calls) */
    size_t n_calls;
} di_dsml_message;

typedef struct di_dsml_parser di_dsml_parser;

/* thinking: the prompt opened a thought (output starts as reasoning);
 * parse_tools: the request has tools (DSML is parsed; otherwise plain text). */
di_status di_dsml_parser_create(di_dsml_version v, bool thinking, bool parse_tools, di_dsml_parser **out,
                                di_error *err);
/* Feeds the next piece of output text (any split, even inside a UTF-8
 * character or a tag). */
di_status di_dsml_parser_push(di_dsml_parser *p, const char *text, size_t n, di_error *err);
/* End of output: text held back in case it started a marker is decided. */
di_status di_dsml_parser_finish(di_dsml_parser *p, di_error *err);
const di_dsml_message *di_dsml_parser_message(const di_dsml_parser *p);
void di_dsml_parser_free(di_dsml_parser *p);

/* JSON text as the recipe prints it into a prompt of that version (Python
 * json.dumps layout with ensure_ascii off: ", " and ": " separators; floats
 * in Python's repr form for V4.1, ryu's for V4; see dsml_json.c). Returns a
 * malloc'd NUL-terminated string or NULL when out of memory. */
char *di_dsml_json_dumps(const json_t *v, di_dsml_version style);
/* s[0..n) as the inside of a JSON string (json.dumps with ensure_ascii off:
 * quotes, backslashes and control characters escaped), passed to put in
 * pieces. */
void di_dsml_json_escape(const char *s, size_t n, void (*put)(void *user, const char *s, size_t n), void *user);

#endif
