/* DeepSeek V4 / V4.1 chats in the server: a Chat Completions body -> the
 * conversation of src/text/dsml.h (rendered and encoded by DeepSeek's own
 * rules, not the tokenizer's template), and the model's output -> content /
 * reasoning_content / tool_calls, whole or as stream deltas.
 *
 * The request rules follow PyPI deepseek-recipe 0.2.0's ChatCompletionRequest
 * conversion (checked by scripts/gen_goldens_server_dsml.py ->
 * tests/data/golden/dsml/server_chat.json, tests/server/test_dsml_chat.c):
 *   - thinking is on unless `thinking: {"type": "disabled"}` or
 *     `reasoning_effort: "none"`; efforts minimal/low -> low, medium/high
 *     (and none given) -> high, xhigh, max;
 *   - tool_choice auto / none (tools hidden) / required / a named function
 *     (only that tool, required); required and named are refused in
 *     thinking mode, as the recipe refuses them; where the prompt opens
 *     the call block (required / named), the grammar engine holds the
 *     output to DSML calls of those tools with schema-valid arguments
 *     (src/grammar/tool_calls.c; one call when parallel_tool_calls is
 *     false);
 *   - content parts are joined with a blank line: text, and image_url
 *     parts of user / tool messages as the <｜image｜> placeholder (V4.1;
 *     its pixels go to the engine's vision path in placeholder order) or
 *     the text "[Unsupported Image]" (V4), as the recipe renders them;
 *   - tool names match ^[a-zA-Z0-9_-]{1,64}$, are unique, and parameters
 *     are a JSON Schema object of type "object" (structure checked here).
 * Everything else a client sends is checked and refused with a 400 naming
 * the field; nothing is silently dropped. */
#include "server/dsml_chat.h"
#include "server/content_parts.h"
#include "server/think_out.h"

#include "base/alloc.h"
#include "engine/engine_text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TOOL_NAME 64      /* OpenAI's and the recipe's limit */
#define MAX_SCHEMA_DEPTH 32   /* nesting of a tool's parameter schema */
#define CALL_ID_RANDOM 24     /* call_00_<24 characters>, the recipe's shape */

static void bad(srv_reply *r, const char *param, const char *code, const char *msg) {
    srv_reply_error(r, 400, "invalid_request_error", param, code, "%s", msg);
}

static bool oom(srv_reply *r) {
    srv_reply_error(r, 503, "server_error", NULL, NULL, "Out of memory.");
    return false;
}

static bool tool_name_ok(const char *s, size_t n) {
    if (n == 0 || n > MAX_TOOL_NAME) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return false;
    }
    return true;
}

/* ---- JSON Schema structure ----------------------------------------------- */

static bool schema_ok(const json_t *s, int depth, const char **why);

static bool schema_type_ok(const json_t *t) {
    static const char *const TYPES[] = {"object", "array", "string", "number", "integer", "boolean", "null"};
    if (json_is_string(t)) {
        for (size_t i = 0; i < sizeof TYPES / sizeof TYPES[0]; i++)
            if (!strcmp(json_string_value(t), TYPES[i])) return true;
        return false;
    }
    if (!json_is_array(t) || json_array_size(t) == 0) return false;
    size_t i;
    json_t *e;
    json_array_foreach(t, i, e) if (!json_is_string(e) || !schema_type_ok(e)) return false;
    return true;
}

static bool schema_map_ok(const json_t *m, int depth, const char **why) {
    if (!json_is_object(m)) return false;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)m, k, v) if (!schema_ok(v, depth + 1, why)) return false;
    return true;
}

static bool schema_list_ok(const json_t *a, int depth, const char **why) {
    if (!json_is_array(a) || json_array_size(a) == 0) return false;
    size_t i;
    json_t *v;
    json_array_foreach(a, i, v) if (!schema_ok(v, depth + 1, why)) return false;
    return true;
}

/* The keywords whose shape JSON Schema fixes; unknown keywords are allowed
 * (annotations, vendor extensions), as JSON Schema allows them. */
static bool schema_ok(const json_t *s, int depth, const char **why) {
    if (json_is_boolean(s)) return true;
    if (!json_is_object(s)) {
        *why = "a schema must be an object or a boolean";
        return false;
    }
    if (depth > MAX_SCHEMA_DEPTH) {
        *why = "the schema nests too deeply";
        return false;
    }
    const json_t *v;
    if ((v = json_object_get(s, "type")) && !schema_type_ok(v)) {
        *why = "'type' must be one of object, array, string, number, integer, boolean, null (or a list of them)";
        return false;
    }
    if ((v = json_object_get(s, "properties")) && !schema_map_ok(v, depth, why)) {
        if (!*why) *why = "'properties' must map names to schemas";
        return false;
    }
    if ((v = json_object_get(s, "$defs")) && !schema_map_ok(v, depth, why)) {
        if (!*why) *why = "'$defs' must map names to schemas";
        return false;
    }
    if ((v = json_object_get(s, "required"))) {
        size_t i;
        json_t *e;
        bool ok = json_is_array(v);
        json_array_foreach(v, i, e) ok = ok && json_is_string(e);
        if (!ok) {
            *why = "'required' must be an array of strings";
            return false;
        }
    }
    if ((v = json_object_get(s, "enum")) && !json_is_array(v)) {
        *why = "'enum' must be an array";
        return false;
    }
    static const char *const ONE[] = {"items", "additionalProperties", "not", "if", "then", "else", "contains"};
    for (size_t i = 0; i < sizeof ONE / sizeof ONE[0]; i++)
        if ((v = json_object_get(s, ONE[i])) && !schema_ok(v, depth + 1, why)) return false;
    static const char *const MANY[] = {"anyOf", "oneOf", "allOf", "prefixItems"};
    for (size_t i = 0; i < sizeof MANY / sizeof MANY[0]; i++)
        if ((v = json_object_get(s, MANY[i])) && !schema_list_ok(v, depth, why)) {
            if (!*why) *why = "'anyOf' / 'oneOf' / 'allOf' / 'prefixItems' must be non-empty arrays of schemas";
            return false;
        }
    static const char *const TEXT[] = {"description", "title", "pattern", "format", "$ref"};
    for (size_t i = 0; i < sizeof TEXT / sizeof TEXT[0]; i++)
        if ((v = json_object_get(s, TEXT[i])) && !json_is_string(v)) {
            *why = "'description', 'title', 'pattern', 'format' and '$ref' must be strings";
            return false;
        }
    return true;
}

/* ---- request -> conversation JSON ---------------------------------------- */

#define IMAGE_TOKEN "<\xef\xbd\x9cimage\xef\xbd\x9c>" /* <｜image｜>: what the recipe writes */
#define V4_NO_IMAGE "[Unsupported Image]"                  /* V4's text for an image part (the recipe's) */

/* The mark of a message's images in its content: the placeholder's own
 * spelling, unless the message's text holds it as text (which must stay
 * text, as in the recipe), then a spelling the text lacks. */
static void image_mark(const json_t *parts, char mark[48]) {
    snprintf(mark, 48, "%s", IMAGE_TOKEN);
    for (unsigned k = 0;; k++) {
        bool clash = false;
        size_t i;
        json_t *p;
        json_array_foreach(parts, i, p) {
            const char *t = json_string_value(json_object_get(p, "text"));
            if (t && strstr(t, mark)) clash = true;
        }
        if (!clash) return;
        snprintf(mark, 48, "\x1f<image %u>\x1f", k);
    }
}

/* What an image_url part becomes in a DeepSeek message (srv_parts_rules.image). */
typedef struct image_parts {
    srv_dsml_opts *o;
    size_t *n_images;
    const char *mark;
} image_parts;

static bool image_piece(void *ctx, json_t *part, const char *param, const char **piece, size_t *len, srv_reply *r) {
    image_parts *ip = ctx;
    json_t *iu = json_object_get(part, "image_url");
    json_t *url = json_object_get(iu, "url");
    if (!json_is_object(iu) || !json_is_string(url)) {
        srv_reply_error(r, 400, "invalid_request_error", param, "invalid_type",
                        "'%s' image_url parts need {\"url\": \"data:image/...;base64,...\"}.", param);
        return false;
    }
    if (ip->o->version == DI_DSML_V4) {
        /* V4 takes no images: the recipe writes this text instead */
        *piece = V4_NO_IMAGE;
    } else if (ip->o->n_images == DI_IMAGE_DEFAULT_MAX_IMAGES) {
        srv_reply_error(r, 400, "invalid_request_error", param, "too_many_images", "At most %d images per request.",
                        DI_IMAGE_DEFAULT_MAX_IMAGES);
        return false;
    } else {
        ip->o->image_urls[ip->o->n_images++] = url;
        (*ip->n_images)++;
        *piece = ip->mark;
    }
    *len = strlen(*piece);
    return true;
}

/* content: a string, null, or parts joined by a blank line (the recipe's
 * join): text parts, and image_url parts (user and tool messages) as the
 * image placeholder (V4: the recipe's "[Unsupported Image]" text); their
 * URLs go to o->image_urls in order (borrowed from the body), *n_images
 * counts this message's. Other part types are refused by name. */
static json_t *content_text(const json_t *c, const char *param, bool images_ok, srv_dsml_opts *o, size_t *n_images,
                            char mark[48], srv_reply *r) {
    *n_images = 0;
    if (!c || json_is_null(c)) return json_string("");
    if (json_is_string(c)) return json_incref((json_t *)c);
    if (!json_is_array(c)) {
        srv_reply_error(r, 400, "invalid_request_error", param, "invalid_type",
                        "'%s' must be a string or an array of content parts.", param);
        return NULL;
    }
    image_mark(c, mark);
    image_parts ip = {o, n_images, mark};
    const srv_parts_rules rules = {
        .sep = "\n\n",
        .shape_tail = " parts must be objects with a string 'type'.",
        .only = images_ok ? "here; only text and image_url" : "here; only text",
        .image = images_ok ? image_piece : NULL,
        .ctx = &ip,
    };
    srv_buf b = {0};
    if (!srv_content_parts_join(c, param, &rules, &b, r)) return NULL;
    json_t *s = json_stringn(b.data ? b.data : "", b.len);
    srv_buf_free(&b);
    if (!s) bad(r, param, "invalid_value", "Content text must be valid UTF-8.");
    return s;
}

static bool copy_str(const json_t *from, json_t *to, const char *key, const char *param, srv_reply *r) {
    const json_t *v = json_object_get(from, key);
    if (!v || json_is_null(v)) return true;
    if (!json_is_string(v)) {
        srv_reply_error(r, 400, "invalid_request_error", param, "invalid_type", "'%s.%s' must be a string.", param,
                        key);
        return false;
    }
    json_object_set(to, key, (json_t *)v);
    return true;
}

/* Assistant reasoning_content follows the recipe's conversion
 * (ReasoningContentBehavior FillEmpty): in thinking mode an assistant turn
 * without one gets "", outside thinking mode it is dropped. */
static json_t *convert_messages(const json_t *msgs, bool thinking, srv_dsml_opts *o, srv_reply *r) {
    if (!json_is_array(msgs) || json_array_size(msgs) == 0) {
        bad(r, "messages", "invalid_value", "'messages' must be a non-empty array.");
        return NULL;
    }
    json_t *out = json_array();
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        char param[64];
        snprintf(param, sizeof param, "messages[%zu]", i);
        json_t *role = json_object_get(m, "role");
        if (!json_is_object(m) || !json_is_string(role)) {
            srv_reply_error(r, 400, "invalid_request_error", param, "invalid_type",
                            "'%s' must be an object with a string 'role'.", param);
            goto fail;
        }
        const char *rv = json_string_value(role);
        if (!strcmp(rv, "developer")) rv = "system";
        if (strcmp(rv, "system") && strcmp(rv, "user") && strcmp(rv, "assistant") && strcmp(rv, "tool")) {
            srv_reply_error(r, 400, "invalid_request_error", param, "invalid_value",
                            "Unknown role '%.40s' (system, developer, user, assistant or tool).", rv);
            goto fail;
        }
        char cparam[80];
        snprintf(cparam, sizeof cparam, "%s.content", param);
        size_t n_images;
        char mark[48];
        /* V4.1 takes images in user and tool messages (the recipe refuses
         * them elsewhere, but for system turns, which di_dsml_conv does not
         * model: refused here); V4 writes its text for one anywhere */
        bool images_ok = o->version == DI_DSML_V4 || !strcmp(rv, "user") || !strcmp(rv, "tool");
        json_t *text = content_text(json_object_get(m, "content"), cparam, images_ok, o, &n_images, mark, r);
        if (!text) goto fail;
        json_t *msg = json_pack("{s:s, s:o}", "role", rv, "content", text);
        if (!msg) {
            oom(r);
            goto fail;
        }
        json_array_append_new(out, msg);
        if (n_images) {
            json_object_set_new(msg, "images", json_integer((json_int_t)n_images));
            json_object_set_new(msg, "image_mark", json_string(mark));
        }
        if (!strcmp(rv, "assistant")) {
            if (thinking && !copy_str(m, msg, "reasoning_content", param, r)) goto fail;
            if (thinking && !json_object_get(msg, "reasoning_content"))
                json_object_set_new(msg, "reasoning_content", json_string(""));
            json_t *calls = json_object_get(m, "tool_calls");
            if (calls && !json_is_null(calls)) json_object_set(msg, "tool_calls", calls);
            json_t *prefix = json_object_get(m, "prefix");
            if (prefix && !json_is_null(prefix)) json_object_set(msg, "prefix", prefix);
        }
        if (!strcmp(rv, "tool") && !copy_str(m, msg, "tool_call_id", param, r)) goto fail;
    }
    return out;
fail:
    json_decref(out);
    return NULL;
}

/* tools -> the conversation's tool list, each checked; *named (when the
 * tool_choice names one) keeps only that tool. */
json_t *srv_chat_tools(const json_t *tools, const char *named, srv_reply *r) {
    if (!tools || json_is_null(tools)) return json_array();
    if (!json_is_array(tools)) {
        bad(r, "tools", "invalid_type", "'tools' must be an array of function tools.");
        return NULL;
    }
    if (json_array_size(tools) > DI_DSML_MAX_TOOLS) {
        srv_reply_error(r, 400, "invalid_request_error", "tools", "invalid_value",
                        "'tools' holds %zu tools; this server allows at most %u.", json_array_size(tools),
                        DI_DSML_MAX_TOOLS);
        return NULL;
    }
    json_t *out = json_array(), *seen = json_object();
    bool found = !named;
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        char param[64];
        snprintf(param, sizeof param, "tools[%zu]", i);
        json_t *type = json_object_get(t, "type"), *f = json_object_get(t, "function");
        if (!json_is_object(t) || !json_is_string(type) || strcmp(json_string_value(type), "function") ||
            !json_is_object(f)) {
            srv_reply_error(r, 400, "invalid_request_error", param, "invalid_value",
                            "'%s' must be {\"type\": \"function\", \"function\": {...}}.", param);
            goto fail;
        }
        json_t *name = json_object_get(f, "name"), *params = json_object_get(f, "parameters");
        json_t *desc = json_object_get(f, "description");
        if (!json_is_string(name) || !tool_name_ok(json_string_value(name), json_string_length(name))) {
            srv_reply_error(r, 400, "invalid_request_error", param, "invalid_value",
                            "'%s.function.name' must match ^[a-zA-Z0-9_-]{1,%d}$.", param, MAX_TOOL_NAME);
            goto fail;
        }
        if (json_object_get(seen, json_string_value(name))) {
            bad(r, param, "invalid_value", "Tool names must be unique.");
            goto fail;
        }
        json_object_set_new(seen, json_string_value(name), json_true());
        if (desc && !json_is_null(desc) && !json_is_string(desc)) {
            srv_reply_error(r, 400, "invalid_request_error", param, "invalid_type",
                            "'%s.function.description' must be a string.", param);
            goto fail;
        }
        if (params && !json_is_null(params)) {
            const char *why = NULL;
            json_t *pt = json_object_get(params, "type");
            if (!json_is_object(params) || !json_is_string(pt) || strcmp(json_string_value(pt), "object"))
                why = "the parameters must be a JSON Schema of type \"object\"";
            else if (!schema_ok(params, 0, &why) && !why)
                why = "not a JSON Schema";
            if (why) {
                srv_reply_error(r, 400, "invalid_request_error", param, "invalid_schema",
                                "Invalid schema for function '%s': %s.", json_string_value(name), why);
                goto fail;
            }
        }
        if (named && strcmp(named, json_string_value(name))) continue;
        found = true;
        json_array_append(out, t);
    }
    if (!found) {
        srv_reply_error(r, 400, "invalid_request_error", "tool_choice", "invalid_value",
                        "tool_choice names the function '%.64s', which is not in 'tools'.", named);
        goto fail;
    }
    json_decref(seen);
    return out;
fail:
    json_decref(seen);
    json_decref(out);
    return NULL;
}

/* thinking / reasoning_effort, as the recipe reads them. */
static bool read_thinking(const json_t *root, bool *thinking, const char **effort, srv_reply *r) {
    *thinking = true;
    *effort = "high";
    json_t *th = json_object_get(root, "thinking");
    if (th && !json_is_null(th)) {
        json_t *type = json_object_get(th, "type");
        if (json_is_boolean(th)) *thinking = json_is_true(th);
        else if (json_is_object(th) && json_is_string(type) &&
                 (!strcmp(json_string_value(type), "enabled") || !strcmp(json_string_value(type), "disabled")))
            *thinking = !strcmp(json_string_value(type), "enabled");
        else {
            bad(r, "thinking", "invalid_value", "'thinking' must be {\"type\": \"enabled\"} or {\"type\": \"disabled\"}.");
            return false;
        }
    }
    json_t *e = json_object_get(root, "reasoning_effort");
    if (!e || json_is_null(e)) return true;
    static const struct {
        const char *in, *out;
    } EFFORTS[] = {{"minimal", "low"}, {"low", "low"},     {"medium", "high"}, {"high", "high"},
                   {"xhigh", "xhigh"}, {"max", "max"},     {"none", NULL}};
    for (size_t i = 0; json_is_string(e) && i < sizeof EFFORTS / sizeof EFFORTS[0]; i++)
        if (!strcmp(json_string_value(e), EFFORTS[i].in)) {
            if (!EFFORTS[i].out) *thinking = false;
            else *effort = EFFORTS[i].out;
            return true;
        }
    bad(r, "reasoning_effort", "invalid_value",
        "'reasoning_effort' must be one of none, minimal, low, medium, high, xhigh, max.");
    return false;
}

/* tool_choice: "auto" | "none" | "required" | {"type": "function",
 * "function": {"name": ...}}; *named borrows the name. */
bool srv_chat_tool_choice(const json_t *root, const char **choice, const char **named, srv_reply *r) {
    *choice = "auto";
    *named = NULL;
    json_t *tc = json_object_get(root, "tool_choice");
    if (!tc || json_is_null(tc)) return true;
    if (json_is_string(tc)) {
        const char *v = json_string_value(tc);
        if (!strcmp(v, "auto") || !strcmp(v, "none") || !strcmp(v, "required")) {
            *choice = v;
            return true;
        }
    } else if (json_is_object(tc)) {
        json_t *type = json_object_get(tc, "type"), *name = json_object_get(json_object_get(tc, "function"), "name");
        if (json_is_string(type) && !strcmp(json_string_value(type), "function") && json_is_string(name)) {
            *choice = "required";
            *named = json_string_value(name);
            return true;
        }
    }
    bad(r, "tool_choice", "invalid_value",
        "'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"function\": "
        "{\"name\": ...}}.");
    return false;
}

/* OpenAI's and the recipe's rule for json_object: some message says "json"
 * (any case), so the model is asked for JSON, not only constrained to it. */
static bool mentions_json(const json_t *conv) {
    size_t i;
    json_t *m;
    json_array_foreach(json_object_get(conv, "messages"), i, m) {
        const char *c = json_string_value(json_object_get(m, "content"));
        for (const char *p = c; p && *p; p++)
            if ((p[0] | 0x20) == 'j' && (p[1] | 0x20) == 's' && (p[2] | 0x20) == 'o' && (p[3] | 0x20) == 'n')
                return true;
    }
    return false;
}

bool srv_dsml_chat_conv(const json_t *root, di_dsml_version v, di_dsml_conv **conv, srv_dsml_opts *o,
                        srv_reply *r) {
    (void)v;
    *conv = NULL;
    memset(o, 0, sizeof *o);
    o->version = v;
    bool thinking;
    const char *effort, *choice, *named;
    if (!read_thinking(root, &thinking, &effort, r) || !srv_chat_tool_choice(root, &choice, &named, r)) return false;
    json_t *ptc = json_object_get(root, "parallel_tool_calls");
    if (ptc && !json_is_null(ptc) && !json_is_boolean(ptc)) {
        bad(r, "parallel_tool_calls", "invalid_type", "'parallel_tool_calls' must be a boolean.");
        return false;
    }
    json_t *msgs = convert_messages(json_object_get(root, "messages"), thinking, o, r);
    if (!msgs) return false;
    json_t *tools = srv_chat_tools(json_object_get(root, "tools"), named, r);
    if (!tools) {
        json_decref(msgs);
        return false;
    }
    bool has_tools = json_array_size(tools) > 0;
    if (!strcmp(choice, "required") && !has_tools) {
        json_decref(msgs);
        json_decref(tools);
        bad(r, "tool_choice", "invalid_value", "tool_choice 'required' needs at least one tool.");
        return false;
    }
    if (thinking && has_tools && !strcmp(choice, "required")) {
        json_decref(msgs);
        json_decref(tools);
        bad(r, "tool_choice", "invalid_value",
            "Thinking mode does not support this tool_choice (send thinking {\"type\": \"disabled\"} or "
            "reasoning_effort \"none\" with a required or named tool).");
        return false;
    }
    json_t *cj = json_pack("{s:o, s:o, s:b, s:s}", "messages", msgs, "tools", tools, "thinking", thinking,
                           "tool_choice", choice);
    if (thinking) json_object_set_new(cj, "reasoning_effort", json_string(effort));
    json_t *rf = json_object_get(root, "response_format");
    if (rf && !json_is_null(rf)) json_object_set(cj, "response_format", rf);
    json_t *rft = json_object_get(rf, "type");
    if (json_is_string(rft) && !strcmp(json_string_value(rft), "json_object") && !mentions_json(cj)) {
        json_decref(cj);
        bad(r, "response_format", "invalid_value",
            "Prompt must contain the word 'json' in some form to use 'response_format' of type 'json_object'.");
        return false;
    }
    di_error err;
    di_status st = di_dsml_conv_from_json(cj, conv, &err);
    json_decref(cj);
    if (st) {
        if (st == DI_ERR_NOMEM) return oom(r);
        srv_reply_error(r, 400, "invalid_request_error", "messages", "invalid_value", "Bad conversation: %s",
                        err.msg);
        return false;
    }
    o->thinking = thinking;
    o->parse_tools = has_tools && strcmp(choice, "none");
    o->in_calls = has_tools && !strcmp(choice, "required");
    return true;
}

/* The grammar (DI_CONSTRAINT_TOOL_CALLS text) for the call block the prompt
 * opened: the conversation's tools (only the named one for a named
 * tool_choice), one call unless parallel_tool_calls. malloc'd; NULL when
 * out of memory. */
static char *call_grammar(const di_dsml_conv *c, di_dsml_version v, bool parallel) {
    json_t *tools = json_array();
    for (size_t i = 0; tools && i < c->n_tools; i++) {
        json_t *t = json_pack("{s:s, s:O}", "name", c->tools[i].name, "parameters",
                              c->tools[i].parameters ? c->tools[i].parameters : json_null());
        if (!t || json_array_append_new(tools, t)) {
            json_decref(tools);
            return NULL;
        }
    }
    json_t *spec = tools ? json_pack("{s:s, s:b, s:o}", "syntax", v == DI_DSML_V4 ? "dsml_v4" : "dsml_v41",
                                     "parallel", parallel, "tools", tools)
                         : NULL;
    char *text = spec ? json_dumps(spec, JSON_COMPACT) : NULL;
    json_decref(spec);
    return text;
}

bool srv_dsml_chat_prompt(di_server *s, const json_t *root, srv_dsml_opts *o, int32_t **ids, size_t *n,
                          char **grammar, srv_reply *r) {
    di_dsml_conv *c;
    *ids = NULL;
    *n = 0;
    *grammar = NULL;
    if (!srv_dsml_chat_conv(root, s->dsml_version, &c, o, r)) return false;
    if (o->n_images && !di_engine_image_placeholder(s->engine)) {
        di_dsml_conv_free(c);
        srv_reply_error(r, 400, "invalid_request_error", "messages", "unsupported_content",
                        "This model takes no images (it has no vision tower).");
        return false;
    }
    if (o->in_calls) {
        json_t *ptc = json_object_get(root, "parallel_tool_calls");
        if (!(*grammar = call_grammar(c, s->dsml_version, !json_is_false(ptc)))) {
            di_dsml_conv_free(c);
            return oom(r);
        }
    }
    di_dsml_prompt p = {0};
    di_tok_ids t = {0};
    di_error err;
    di_status st = di_dsml_render(c, s->dsml_version, &p, &err);
    if (!st && o->in_calls) {
        /* The prompt opened the tool-call block: the output parser starts
         * there too (the recipe's starts_in_tool_calls). */
        static const char MARK[] = "<\xef\xbd\x9c" "DSML\xef\xbd\x9c";
        const char *last = NULL;
        for (const char *q = p.text; (q = strstr(q, MARK)); q++) last = q;
        if (last && strlen(last) < sizeof o->opener) snprintf(o->opener, sizeof o->opener, "%s", last);
    }
    if (!st) st = di_dsml_encode(di_engine_tokenizer(s->engine), &p, &t, &err);
    di_dsml_prompt_free(&p);
    di_dsml_conv_free(c);
    if (st) {
        di_tok_ids_free(&t);
        free(*grammar);
        *grammar = NULL;
        if (st == DI_ERR_NOMEM) return oom(r);
        srv_reply_error(r, 400, "invalid_request_error", "messages", "invalid_value", "Cannot render the chat: %s",
                        err.msg);
        return false;
    }
    *ids = t.data;
    *n = t.n;
    return true;
}

/* ---- output -> message / deltas ------------------------------------------- */

struct srv_dsml_out {
    srv_llama_out *llama;    /* Llama 3.1 JSON tool calls instead (llama_tools.c) */
    srv_think_out *think;    /* or a <think> reply (think_out.c) */
    di_dsml_parser *p;
    di_dsml_version version;
    char tail[64];           /* the end of the output pushed so far */
    size_t tail_len;
    char held[64], prev_held[64]; /* what the last / the one before may hold back */
    size_t held_len, prev_held_len;
    bool thinking;
    size_t sent_reasoning, sent_content;
    size_t n_calls_sent;
    size_t *sent_args;       /* (n_calls_sent) argument bytes streamed per call */
    char (*call_ids)[48];    /* (n_calls_sent) */
    size_t cap;
    di_server *srv;
};

srv_dsml_out *srv_dsml_out_new(di_server *s, const srv_dsml_opts *o) {
    srv_dsml_out *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    if (o->think_tags) {
        if (!(d->think = srv_think_out_new(o->thinking))) {
            free(d);
            return NULL;
        }
        return d;
    }
    if (o->llama_json) {
        if (!(d->llama = srv_llama_out_new(s))) {
            free(d);
            return NULL;
        }
        return d;
    }
    di_error err;
    if (di_dsml_parser_create(o->version, o->thinking && !o->in_calls, o->parse_tools, &d->p, &err) ||
        (o->opener[0] && di_dsml_parser_push(d->p, o->opener, strlen(o->opener), &err))) {
        srv_dsml_out_free(d);
        return NULL;
    }
    d->thinking = o->thinking;
    d->version = o->version;
    d->srv = s;
    return d;
}

void srv_dsml_out_free(srv_dsml_out *d) {
    if (!d) return;
    srv_llama_out_free(d->llama);
    srv_think_out_free(d->think);
    di_dsml_parser_free(d->p);
    free(d->sent_args);
    free(d->call_ids);
    free(d);
}

/* The markers the parser holds text back for (a piece ending in a prefix
 * of one is not shown until the next piece decides it). Returns how many
 * bytes at the end of d->tail may be held. */
static size_t held_suffix(const srv_dsml_out *d) {
    static const char *const V4[] = {"</think>", "\n\n<\xef\xbd\x9c" "DSML\xef\xbd\x9ctool_calls>",
                                     "<\xef\xbd\x9c" "DSML\xef\xbd\x9ctool_calls>"};
    static const char *const V41[] = {"</think>", "\n\n<\xef\xbd\x9c" "DSML\xef\xbd\x9c calls>",
                                      "<\xef\xbd\x9c" "DSML\xef\xbd\x9c calls>"};
    const char *const *m = d->version == DI_DSML_V4 ? V4 : V41;
    size_t best = 0;
    for (size_t k = 0; k < 3; k++) {
        size_t ml = strlen(m[k]);
        for (size_t len = d->tail_len < ml - 1 ? d->tail_len : ml - 1; len > best; len--)
            if (!memcmp(d->tail + d->tail_len - len, m[k], len)) {
                best = len;
                break;
            }
    }
    return best;
}

bool srv_dsml_out_push(srv_dsml_out *d, const char *text, size_t n, bool final) {
    if (d->think) return srv_think_out_push(d->think, text, n, final);
    if (d->llama) return srv_llama_out_push(d->llama, text, n, final);
    di_error err;
    if (n && di_dsml_parser_push(d->p, text, n, &err)) return false;
    if (n) {
        /* What the parser holds back of this piece comes out with the next
         * one, as a delta of its own (the recipe's chunks): remember it. */
        d->prev_held_len = d->held_len;
        memcpy(d->prev_held, d->held, d->held_len);
        const size_t cap = sizeof d->tail - 1;
        if (n >= cap) {
            memcpy(d->tail, text + n - cap, cap);
            d->tail_len = cap;
        } else {
            size_t keep = d->tail_len + n > cap ? cap - n : d->tail_len;
            memmove(d->tail, d->tail + d->tail_len - keep, keep);
            memcpy(d->tail + keep, text, n);
            d->tail_len = keep + n;
        }
        d->held_len = held_suffix(d);
        memcpy(d->held, d->tail + d->tail_len - d->held_len, d->held_len);
    }
    if (final && di_dsml_parser_finish(d->p, &err)) return false;
    return true;
}

/* Text s[0..n) as deltas: the bytes the previous piece held back first
 * (when the text starts with them), then the rest. */
static void text_deltas(srv_dsml_out *d, json_t *arr, bool reasoning, const char *s, size_t n) {
    size_t cut = d->prev_held_len && d->prev_held_len < n && !memcmp(s, d->prev_held, d->prev_held_len)
                     ? d->prev_held_len : 0;
    for (int part = 0; part < 2; part++) {
        const char *p = part ? s + cut : s;
        size_t len = part ? n - cut : cut;
        if (!len) continue;
        json_t *o;
        if (reasoning) {
            o = json_pack("{s:n, s:o}", "content", "reasoning_content", srv_json_string(p, len));
        } else {
            o = json_pack("{s:o}", "content", srv_json_string(p, len));
            if (d->thinking) json_object_set_new(o, "reasoning_content", json_null());
        }
        json_array_append_new(arr, o);
    }
    d->prev_held_len = 0;
}

static bool grow_calls(srv_dsml_out *d, size_t n) {
    if (n <= d->cap) return true;
    size_t cap = n + 8;
    size_t *a = realloc(d->sent_args, cap * sizeof *a);
    if (!a) return false;
    d->sent_args = a;
    char(*ids)[48] = realloc(d->call_ids, cap * sizeof *ids);
    if (!ids) return false;
    d->call_ids = ids;
    d->cap = cap;
    return true;
}

static void new_call_id(srv_dsml_out *d, size_t i, char out[48]) {
    char rid[32];
    srv_request_id(d->srv, rid);
    snprintf(out, 48, "call_%02zu_%.*s", i, CALL_ID_RANDOM, rid);
}

static json_t *call_json(const di_dsml_out_call *c, const char *id, size_t index, bool with_index) {
    json_t *o = json_object();
    if (with_index) json_object_set_new(o, "index", json_integer((json_int_t)index));
    json_object_set_new(o, "id", json_string(id));
    json_object_set_new(o, "type", json_string("function"));
    json_object_set_new(o, "function", json_pack("{s:o, s:o}", "name", srv_json_string(c->name, c->name_len),
                                                 "arguments", srv_json_string(c->arguments, c->arguments_len)));
    return o;
}

json_t *srv_dsml_out_deltas(srv_dsml_out *d) {
    if (d->think) return srv_think_out_deltas(d->think);
    if (d->llama) return srv_llama_out_deltas(d->llama);
    const di_dsml_message *m = di_dsml_parser_message(d->p);
    json_t *arr = json_array();
    if (m->reasoning && m->reasoning_len > d->sent_reasoning) {
        text_deltas(d, arr, true, m->reasoning + d->sent_reasoning, m->reasoning_len - d->sent_reasoning);
        d->sent_reasoning = m->reasoning_len;
    }
    if (m->content_len > d->sent_content) {
        text_deltas(d, arr, false, m->content + d->sent_content, m->content_len - d->sent_content);
        d->sent_content = m->content_len;
    }
    d->prev_held_len = 0;
    for (size_t i = 0; i < m->n_calls; i++) {
        const di_dsml_out_call *c = &m->calls[i];
        if (i >= d->n_calls_sent) {
            if (!grow_calls(d, i + 1)) break;
            new_call_id(d, i, d->call_ids[i]);
            d->sent_args[i] = 0;
            d->n_calls_sent = i + 1;
            di_dsml_out_call head = *c;
            head.arguments = "";
            head.arguments_len = 0;
            json_array_append_new(arr, json_pack("{s:[o]}", "tool_calls", call_json(&head, d->call_ids[i], i, true)));
        }
        if (c->arguments_len > d->sent_args[i]) {
            json_t *piece = srv_json_string(c->arguments + d->sent_args[i], c->arguments_len - d->sent_args[i]);
            json_array_append_new(arr, json_pack("{s:[{s:I, s:{s:o}}]}", "tool_calls", "index", (json_int_t)i,
                                                 "function", "arguments", piece));
            d->sent_args[i] = c->arguments_len;
        }
    }
    return arr;
}

json_t *srv_dsml_out_message(srv_dsml_out *d) {
    if (d->think) return srv_think_out_message(d->think);
    if (d->llama) return srv_llama_out_message(d->llama);
    const di_dsml_message *m = di_dsml_parser_message(d->p);
    json_t *o = json_pack("{s:s, s:o}", "role", "assistant", "content", srv_json_string(m->content, m->content_len));
    if (d->thinking)
        json_object_set_new(o, "reasoning_content",
                            m->reasoning ? srv_json_string(m->reasoning, m->reasoning_len) : json_null());
    if (m->n_calls && grow_calls(d, m->n_calls)) {
        json_t *calls = json_array();
        for (size_t i = 0; i < m->n_calls; i++) {
            if (i >= d->n_calls_sent) {
                new_call_id(d, i, d->call_ids[i]);
                d->sent_args[i] = 0;
                d->n_calls_sent = i + 1;
            }
            json_array_append_new(calls, call_json(&m->calls[i], d->call_ids[i], i, false));
        }
        json_object_set_new(o, "tool_calls", calls);
    }
    return o;
}

size_t srv_dsml_out_n_calls(const srv_dsml_out *d) {
    if (d->think) return 0;
    return d->llama ? srv_llama_out_n_calls(d->llama) : di_dsml_parser_message(d->p)->n_calls;
}

bool srv_dsml_out_thinking(const srv_dsml_out *d) { return d->think ? srv_think_out_thinking(d->think) : d->thinking; }

/* ---- setup: is this a DeepSeek protocol model; test scripts --------------- */

/* The special tokens the protocol writes and reads: without them (tiny
 * checkpoints' own tokenizers) chats keep the template path. */
static bool has_protocol_tokens(di_engine *e) {
    static const char PROBE[] = "<think></think>\xef\xbd\x9c" "DSML\xef\xbd\x9c<\xef\xbd\x9cUser\xef\xbd\x9c>"
                                "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>";
    int32_t *ids = NULL;
    size_t n = 0;
    di_error err;
    bool ok = !di_engine_tokenize(e, PROBE, false, true, &ids, &n, &err) && n == 5;
    free(ids);
    return ok;
}

static di_status load_scripts(di_server *s, const char *path, di_error *err) {
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root) return di_error_set(err, DI_ERR_FORMAT, "--test-scripted-output %s: %s (line %d)", path, je.text, je.line);
    di_status st = DI_OK;
    size_t n = json_array_size(root);
    if (!json_is_array(root) || n == 0)
        st = di_error_set(err, DI_ERR_FORMAT, "--test-scripted-output %s: not a non-empty array of strings", path);
    if (!st && (!(s->scripts = di_calloc(n, sizeof *s->scripts)) ||
                !(s->script_lens = di_calloc(n, sizeof *s->script_lens))))
        st = di_error_set(err, DI_ERR_NOMEM, "--test-scripted-output: out of memory");
    if (!st && !(s->script_when = di_calloc(n, sizeof *s->script_when)))
        st = di_error_set(err, DI_ERR_NOMEM, "--test-scripted-output: out of memory");
    for (size_t i = 0; !st && i < n; i++) {
        json_t *e = json_array_get(root, i), *t = e, *when = NULL;
        if (json_is_object(e)) {
            t = json_object_get(e, "say");
            when = json_object_get(e, "when");
        }
        if (!json_is_string(t) || (when && !json_is_string(when))) {
            st = di_error_set(err, DI_ERR_FORMAT,
                              "--test-scripted-output %s: entry %zu is neither a string nor {\"when\", \"say\"}",
                              path, i);
            break;
        }
        s->n_scripts = i + 1;
        if (when && !(s->script_when[i] = strdup(json_string_value(when)))) {
            st = di_error_set(err, DI_ERR_NOMEM, "--test-scripted-output: out of memory");
            break;
        }
        st = di_engine_tokenize(s->engine, json_string_value(t), false, true, &s->scripts[i], &s->script_lens[i], err);
    }
    json_decref(root);
    return st;
}

di_status srv_dsml_setup(di_server *s, di_error *err) {
    const char *arch = s->desc.arch ? s->desc.arch : "";
    bool v41 = !strcmp(arch, "deepseek_v41"), v4 = !strcmp(arch, "deepseek_v4");
    s->dsml = (v4 || v41) && has_protocol_tokens(s->engine);
    s->dsml_version = v41 ? DI_DSML_V41 : DI_DSML_V4;
    if (s->p.test_scripted_output) {
        di_status st = load_scripts(s, s->p.test_scripted_output, err);
        if (st) return st;
        fprintf(stderr, "deepinfer serve: TEST MODE: outputs are scripted by %s (%zu texts)\n",
                s->p.test_scripted_output, s->n_scripts);
    }
    s->p.test_scripted_output = NULL; /* the path is not kept */
    return DI_OK;
}

void srv_dsml_teardown(di_server *s) {
    for (size_t i = 0; i < s->n_scripts; i++) {
        free(s->scripts[i]);
        if (s->script_when) free(s->script_when[i]);
    }
    free(s->script_when);
    free(s->scripts);
    free(s->script_lens);
    s->scripts = NULL;
    s->n_scripts = 0;
}

bool srv_next_script(di_server *s, const char *hint, const int32_t **ids, size_t *n) {
    if (!s->n_scripts) return false;
    /* the first {"when"} entry the request's last text contains, else the
     * plain entries in turn */
    for (size_t i = 0; hint && i < s->n_scripts; i++)
        if (s->script_when[i] && strstr(hint, s->script_when[i])) {
            *ids = s->scripts[i];
            *n = s->script_lens[i];
            return true;
        }
    pthread_mutex_lock(&s->mu);
    size_t k = 0;
    for (size_t tries = 0; tries < s->n_scripts; tries++) {
        k = s->next_script++ % s->n_scripts;
        if (!s->script_when[k]) break;
    }
    pthread_mutex_unlock(&s->mu);
    *ids = s->scripts[k];
    *n = s->script_lens[k];
    return true;
}
