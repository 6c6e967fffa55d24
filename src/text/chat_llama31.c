/* Llama 3.1 / 3.2 / 3.3 chat template with tools, step by step (see
 * chat_llama31.h). What the Jinja text does, in order:
 *
 *   bos "<|start_header_id|>system<|end_header_id|>\n\n"
 *   ["Environment: ipython\n"]                                   tools given
 *   "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
 *   trim(first message's content, when its role is system) "<|eot_id|>"
 *   tools: "<|start_header_id|>user<|end_header_id|>\n\n" + instructions +
 *          tojson(tool, indent=4) + "\n\n" per tool + trim(next message's
 *          content, whatever its role) + "<|eot_id|>"
 *   per message: header(role) + trim(content) + "<|eot_id|>"; an assistant
 *          with tool_calls: header(assistant) + {"name": "N", "parameters":
 *          tojson(arguments)} + "<|eot_id|>"; tool / ipython:
 *          header(ipython) + tojson(content) (a string is iterable in
 *          Jinja, so it is printed as a JSON string) + "<|eot_id|>"
 *   [header(assistant)]                                 add_generation_prompt
 *
 * tojson is Python's json.dumps(ensure_ascii=False) as transformers defines
 * the filter (keys in their order; indent=4 puts each member on its own
 * line, "," between); trim is Python's str.strip (Unicode whitespace). */
#include "text/chat_llama31.h"

#include "base/strbuf.h"
#include "text/dsml.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef di_strbuf lbuf;

static void put(lbuf *b, const char *s, size_t n) { (void)di_strbuf_put(b, s, n); }

static void puts_(lbuf *b, const char *s) { (void)di_strbuf_puts(b, s); }

/* Python's str.isspace for the code point at s (n bytes left): its
 * length, or 0 when it is not whitespace. */
static size_t space_at(const unsigned char *s, size_t n) {
    if (n >= 1 && (s[0] == ' ' || (s[0] >= '\t' && s[0] <= '\r') || (s[0] >= 0x1c && s[0] <= 0x1f))) return 1;
    if (n >= 2 && s[0] == 0xC2 && (s[1] == 0x85 || s[1] == 0xA0)) return 2; /* U+0085, U+00A0 */
    if (n >= 3 && s[0] == 0xE1 && s[1] == 0x9A && s[2] == 0x80) return 3;   /* U+1680 */
    if (n >= 3 && s[0] == 0xE2 && s[1] == 0x80 &&
        (s[2] <= 0x8A || s[2] == 0xA8 || s[2] == 0xA9 || s[2] == 0xAF)) /* U+2000..200A, 2028, 2029, 202F */
        return 3;
    if (n >= 3 && s[0] == 0xE2 && s[1] == 0x81 && s[2] == 0x9F) return 3; /* U+205F */
    if (n >= 3 && s[0] == 0xE3 && s[1] == 0x80 && s[2] == 0x80) return 3; /* U+3000 */
    return 0;
}

/* text without the whitespace at both ends (str.strip). */
static void put_trimmed(lbuf *b, const char *text, size_t n) {
    const unsigned char *s = (const unsigned char *)text;
    size_t i = 0, k;
    while (i < n && (k = space_at(s + i, n - i))) i += k;
    /* the end: the last run of whitespace code points */
    size_t end = i, j = i;
    while (j < n) {
        if ((k = space_at(s + j, n - j))) {
            j += k;
        } else {
            j++;
            while (j < n && (s[j] & 0xC0) == 0x80) j++; /* the rest of the character */
            end = j;
        }
    }
    put(b, text + i, end - i);
}

/* Jinja's `x | trim` of a message's content (null prints as "None"). */
static void put_content_trimmed(lbuf *b, const json_t *c) {
    if (json_is_string(c)) {
        put_trimmed(b, json_string_value(c), json_string_length(c));
        return;
    }
    if (!c || json_is_null(c)) {
        puts_(b, "None");
        return;
    }
    char *s = di_dsml_json_dumps(c, DI_DSML_V41);
    if (!s) b->failed = true;
    else puts_(b, s);
    free(s);
}

/* json.dumps(v, ensure_ascii=False, indent=4) at nesting level. */
static void dumps_indent(lbuf *b, const json_t *v, int level) {
    char pad[4 * 64 + 2];
    if (json_is_object(v) && json_object_size(v)) {
        puts_(b, "{");
        const char *key;
        json_t *x;
        size_t i = 0;
        json_object_foreach((json_t *)v, key, x) {
            int n = snprintf(pad, sizeof pad, "%s\n%*s", i++ ? "," : "", 4 * (level + 1 > 64 ? 64 : level + 1), "");
            put(b, pad, (size_t)n);
            puts_(b, "\"");
            di_dsml_json_escape(key, strlen(key), di_strbuf_sink, b);
            puts_(b, "\": ");
            dumps_indent(b, x, level + 1);
        }
        int n = snprintf(pad, sizeof pad, "\n%*s}", 4 * (level > 64 ? 64 : level), "");
        put(b, pad, (size_t)n);
        return;
    }
    if (json_is_array(v) && json_array_size(v)) {
        puts_(b, "[");
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x) {
            int n = snprintf(pad, sizeof pad, "%s\n%*s", i ? "," : "", 4 * (level + 1 > 64 ? 64 : level + 1), "");
            put(b, pad, (size_t)n);
            dumps_indent(b, x, level + 1);
        }
        int n = snprintf(pad, sizeof pad, "\n%*s]", 4 * (level > 64 ? 64 : level), "");
        put(b, pad, (size_t)n);
        return;
    }
    char *s = di_dsml_json_dumps(v, DI_DSML_V41); /* scalars, {} and [] */
    if (!s) b->failed = true;
    else puts_(b, s);
    free(s);
}

static void put_dumps(lbuf *b, const json_t *v) {
    char *s = di_dsml_json_dumps(v, DI_DSML_V41);
    if (!s) b->failed = true;
    else puts_(b, s);
    free(s);
}

static void header(lbuf *b, const char *role) {
    puts_(b, "<|start_header_id|>");
    puts_(b, role);
    puts_(b, "<|end_header_id|>\n\n");
}

static const char TOOLS_INTRO[] =
    "Given the following functions, please respond with a JSON for a function call with its proper arguments "
    "that best answers the given prompt.\n\nRespond in the format {\"name\": function name, \"parameters\": "
    "dictionary of argument name and its value}.Do not use variables.\n\n";

static const char *role_of(const json_t *m) {
    const char *r = json_string_value(json_object_get(m, "role"));
    return r ? r : "";
}

di_status di_chat_llama31_render(const json_t *messages, const json_t *tools, bool add_generation_prompt,
                                 const char *bos, char **out, size_t *out_len, di_error *err) {
    *out = NULL;
    if (!json_is_array(messages) || (tools && !json_is_array(tools)))
        return di_error_set(err, DI_ERR_INVALID_ARG, "llama 3.1 chat: messages / tools must be arrays");
    size_t n = json_array_size(messages), first = 0;
    for (size_t i = 0; i < n; i++)
        if (!json_is_object(json_array_get(messages, i)) || !json_is_string(json_object_get(json_array_get(messages, i), "role")))
            return di_error_set(err, DI_ERR_FORMAT, "llama 3.1 chat: message %zu has no role", i);
    lbuf b = {0};
    puts_(&b, bos ? bos : "");
    header(&b, "system");
    if (tools) puts_(&b, "Environment: ipython\n");
    puts_(&b, "Cutting Knowledge Date: December 2023\nToday Date: " DI_LLAMA31_DATE "\n\n");
    if (n && !strcmp(role_of(json_array_get(messages, 0)), "system")) {
        put_content_trimmed(&b, json_object_get(json_array_get(messages, 0), "content"));
        first = 1;
    }
    puts_(&b, "<|eot_id|>");
    if (tools) {
        if (first >= n) {
            free(b.data);
            return di_error_set(err, DI_ERR_FORMAT,
                                "Cannot put tools in the first user message when there's no first user message!");
        }
        header(&b, "user");
        puts_(&b, TOOLS_INTRO);
        size_t i;
        json_t *t;
        json_array_foreach(tools, i, t) {
            dumps_indent(&b, t, 0);
            puts_(&b, "\n\n");
        }
        put_content_trimmed(&b, json_object_get(json_array_get(messages, first), "content"));
        puts_(&b, "<|eot_id|>");
        first++;
    }
    for (size_t i = first; i < n && !b.failed; i++) {
        const json_t *m = json_array_get(messages, i);
        const char *role = role_of(m);
        const json_t *calls = json_object_get(m, "tool_calls");
        bool is_tool = !strcmp(role, "tool") || !strcmp(role, "ipython");
        if (calls && !is_tool) {
            if (json_array_size(calls) != 1) {
                free(b.data);
                return di_error_set(err, DI_ERR_FORMAT, "This model only supports single tool-calls at once!");
            }
            const json_t *f = json_object_get(json_array_get(calls, 0), "function");
            const json_t *name = json_object_get(f, "name");
            if (!json_is_string(name)) {
                free(b.data);
                return di_error_set(err, DI_ERR_FORMAT, "llama 3.1 chat: message %zu: a tool call without a name", i);
            }
            header(&b, "assistant");
            puts_(&b, "{\"name\": \"");
            put(&b, json_string_value(name), json_string_length(name));
            puts_(&b, "\", \"parameters\": ");
            const json_t *args = json_object_get(f, "arguments");
            if (args) put_dumps(&b, args);
            else puts_(&b, "null");
            puts_(&b, "}<|eot_id|>");
        } else if (is_tool) {
            header(&b, "ipython");
            const json_t *c = json_object_get(m, "content");
            if (json_is_string(c) || json_is_object(c) || json_is_array(c)) put_dumps(&b, c);
            else if (!c || json_is_null(c)) puts_(&b, "None");
            else put_dumps(&b, c);
            puts_(&b, "<|eot_id|>");
        } else {
            header(&b, role);
            put_content_trimmed(&b, json_object_get(m, "content"));
            puts_(&b, "<|eot_id|>");
        }
    }
    if (add_generation_prompt) header(&b, "assistant");
    if (b.failed) {
        free(b.data);
        return di_error_set(err, DI_ERR_NOMEM, "llama 3.1 chat: out of memory");
    }
    *out = b.data;
    if (out_len) *out_len = b.len;
    return DI_OK;
}

/* ---- output: the JSON tool call ------------------------------------------ */

#define PYTHON_TAG "<|python_tag|>"

static size_t skip_space(const char *s, size_t n, size_t i) {
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) i++;
    return i;
}

bool di_chat_llama31_may_be_call(const char *text, size_t n) {
    size_t i = skip_space(text, n, 0);
    if (i == n) return true; /* nothing decided yet */
    if (text[i] == '{') return true;
    size_t k = n - i < strlen(PYTHON_TAG) ? n - i : strlen(PYTHON_TAG);
    return !memcmp(text + i, PYTHON_TAG, k);
}

bool di_chat_llama31_parse_call(const char *text, size_t n, char **name, char **arguments) {
    *name = *arguments = NULL;
    size_t i = skip_space(text, n, 0);
    if (n - i >= strlen(PYTHON_TAG) && !memcmp(text + i, PYTHON_TAG, strlen(PYTHON_TAG)))
        i = skip_space(text, n, i + strlen(PYTHON_TAG));
    if (i >= n || text[i] != '{') return false;
    json_error_t je;
    /* the object, then only whitespace (JSON_DISABLE_EOF_CHECK reports
     * where the value ended) */
    json_t *o = json_loadb(text + i, n - i, JSON_DISABLE_EOF_CHECK, &je);
    if (!o) return false;
    bool ok = json_is_object(o) && skip_space(text, n, i + (size_t)je.position) == n;
    const json_t *nm = json_object_get(o, "name"), *params = json_object_get(o, "parameters");
    if (!params) params = json_object_get(o, "arguments");
    ok = ok && json_is_string(nm) && json_string_length(nm) > 0 && json_is_object(params) && json_object_size(o) == 2;
    if (ok) {
        *name = strndup(json_string_value(nm), json_string_length(nm));
        *arguments = json_dumps(params, JSON_COMPACT);
        if (!*name || !*arguments) {
            free(*name), free(*arguments);
            *name = *arguments = NULL;
            ok = false;
        }
    }
    json_decref(o);
    return ok;
}
