/* The OpenAI Responses (POST /v1/responses) and Anthropic Messages (POST
 * /v1/messages) shapes for DeepSeek V4 / V4.1 checkpoints.
 *
 * Requests: converted here into the Chat Completions body that
 * dsml_chat.c reads (one conversation path), following deepseek-recipe
 * 0.2.0's ResponsesRequest / MessagesRequest conversions:
 *   Responses: instructions -> a system message first; input as a string
 *     (one user message) or items: messages (content string or
 *     input_text / output_text parts joined by a blank line), reasoning
 *     items (their text becomes the next assistant turn's
 *     reasoning_content), function_call (assistant tool calls; consecutive
 *     ones share a turn), function_call_output (a tool message); function
 *     tools {type, name, description, parameters}; tool_choice auto / none
 *     / required / {type: function, name}; reasoning.effort;
 *     max_output_tokens; input_image parts (data: URLs) in messages and
 *     function_call_output outputs.
 *   Messages: system (a string or text blocks joined by a blank line);
 *     user text blocks are one user message each, tool_result blocks tool
 *     messages; assistant thinking -> reasoning_content, text -> content,
 *     tool_use -> tool calls (input printed as the recipe prints JSON);
 *     tools {name, description, input_schema}; tool_choice auto / any
 *     (auto, as the recipe reads it) / none / tool (named); thinking
 *     enabled / disabled; stop_sequences; image blocks with a base64
 *     source (user messages, tool_result content; in assistant messages V4
 *     writes the recipe's text, V4.1 refuses them as the recipe does).
 * Images become the chat shape's image_url parts (the placeholder and the
 * pixels are dsml_chat.c's and the vision path's); remote ones are refused,
 * since the server fetches nothing.
 * Unknown item, part and block types are a 400 naming them.
 *
 * Answers and streams: the output parser's deltas (dsml_chat.c) become
 * output items / content blocks; a stream is the event sequence the recipe's
 * ResponsesChunkGenerator / MessagesChunkGenerator emit (item or block
 * added, deltas, done), ended by response.completed / message_delta +
 * message_stop. */
#include "server/routes_protocols.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void bad(srv_reply *r, const char *param, const char *fmt, const char *what) {
    srv_reply_error(r, 400, "invalid_request_error", param, "invalid_value", fmt, what ? what : "");
}

/* Text parts of a content array joined by a blank line; the part types
 * allowed are types[0..n). NULL with r filled on anything else. */
static json_t *join_parts(const json_t *c, const char *param, const char *const *types, size_t n_types, srv_reply *r) {
    if (json_is_string(c)) return json_incref((json_t *)c);
    if (!c || json_is_null(c)) return json_string("");
    if (!json_is_array(c)) {
        bad(r, param, "'%s' must be a string or an array of parts.", param);
        return NULL;
    }
    srv_buf b = {0};
    size_t i;
    json_t *p;
    json_array_foreach(c, i, p) {
        const char *t = json_string_value(json_object_get(p, "type"));
        json_t *text = json_object_get(p, "text");
        bool ok = false;
        for (size_t k = 0; t && k < n_types; k++) ok = ok || !strcmp(t, types[k]);
        if (!ok || !json_is_string(text)) {
            srv_reply_error(r, 400, "invalid_request_error", param, "unsupported_content",
                            "Content of type '%.40s' is not supported here (text only).", t ? t : "(none)");
            srv_buf_free(&b);
            return NULL;
        }
        if ((i && !srv_buf_append(&b, "\n\n", 2)) || !srv_buf_append(&b, json_string_value(text), json_string_length(text))) {
            srv_buf_free(&b);
            srv_reply_error(r, 503, "server_error", NULL, NULL, "Out of memory.");
            return NULL;
        }
    }
    json_t *s = json_stringn(b.data ? b.data : "", b.len);
    srv_buf_free(&b);
    return s;
}

/* One image part or block as the chat shape's image_url part (NULL with r
 * filled when it names no inline image): Responses' input_image
 * {image_url: "data:..."} (file_id refused, as the recipe refuses it) or
 * Messages' image {source: {type: base64, media_type, data}}. Remote URLs
 * (an image_url that is no data: URL, a url source) are refused: the
 * server fetches nothing. */
static json_t *image_part(const json_t *p, const char *param, srv_reply *r) {
    const char *type = json_string_value(json_object_get(p, "type"));
    json_t *url = NULL;
    if (!strcmp(type, "input_image")) {
        if (json_object_get(p, "file_id")) {
            bad(r, param, "'%s': file_id is not supported; pass the image as a base64 data URL.", param);
            return NULL;
        }
        url = json_incref(json_object_get(p, "image_url"));
    } else {
        json_t *src = json_object_get(p, "source");
        const char *st = json_string_value(json_object_get(src, "type"));
        json_t *mt = json_object_get(src, "media_type"), *data = json_object_get(src, "data");
        if (st && !strcmp(st, "base64") && json_is_string(mt) && json_is_string(data)) {
            srv_buf b = {0};
            if (!srv_buf_append(&b, "data:", 5) || !srv_buf_append(&b, json_string_value(mt), json_string_length(mt)) ||
                !srv_buf_append(&b, ";base64,", 8) ||
                !srv_buf_append(&b, json_string_value(data), json_string_length(data))) {
                srv_buf_free(&b);
                srv_reply_error(r, 503, "server_error", NULL, NULL, "Out of memory.");
                return NULL;
            }
            url = json_stringn(b.data, b.len);
            srv_buf_free(&b);
        } else if (st && !strcmp(st, "url")) {
            url = json_incref(json_object_get(src, "url"));
        }
    }
    if (!json_is_string(url)) {
        json_decref(url);
        bad(r, param, "'%s' needs an inline image: {\"type\": \"input_image\", \"image_url\": \"data:image/...;base64,...\"} "
                      "or {\"type\": \"image\", \"source\": {\"type\": \"base64\", \"media_type\", \"data\"}}.", param);
        return NULL;
    }
    if (strncmp(json_string_value(url), "data:", 5)) {
        json_decref(url);
        srv_reply_error(r, 400, "invalid_request_error", param, "invalid_image_url",
                        "Remote image URLs are not fetched by this server; send the image inline as a data: URL "
                        "(data:image/png;base64,...) or a base64 source.");
        return NULL;
    }
    return json_pack("{s:s, s:{s:o}}", "type", "image_url", "image_url", "url", url);
}

/* A content array with images in it as Chat Completions parts (text parts
 * of types[0..n), image parts of type img), which the chat path joins by a
 * blank line as join_parts does, with the image placeholder for each
 * image; without images, join_parts' string. */
static json_t *chat_parts(const json_t *c, const char *param, const char *const *types, size_t n_types,
                          const char *img, srv_reply *r) {
    bool images = false;
    size_t i;
    json_t *p;
    if (json_is_array(c))
        json_array_foreach(c, i, p) {
            const char *t = json_string_value(json_object_get(p, "type"));
            images = images || (t && !strcmp(t, img));
        }
    if (!images) return join_parts(c, param, types, n_types, r);
    json_t *out = json_array();
    json_array_foreach(c, i, p) {
        const char *t = json_string_value(json_object_get(p, "type"));
        json_t *part;
        if (t && !strcmp(t, img)) {
            part = image_part(p, param, r);
        } else {
            json_t *one = json_pack("[O]", p);
            json_t *text = join_parts(one, param, types, n_types, r);
            json_decref(one);
            part = text ? json_pack("{s:s, s:o}", "type", "text", "text", text) : NULL;
        }
        if (!part) {
            json_decref(out);
            return NULL;
        }
        json_array_append_new(out, part);
    }
    return out;
}

/* Fields both shapes pass on as they are. */
static void copy_fields(const json_t *from, json_t *to, const char *const *keys, size_t n) {
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_object_get(from, keys[i]);
        if (v) json_object_set(to, keys[i], v);
    }
}

/* ---- Responses -> chat ------------------------------------------------------ */

static const char *const RESP_PARTS[] = {"input_text", "output_text", "text"};

static json_t *resp_tools(const json_t *tools, srv_reply *r) {
    json_t *out = json_array();
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        const char *type = json_string_value(json_object_get(t, "type"));
        if (!type || strcmp(type, "function")) {
            char param[32];
            snprintf(param, sizeof param, "tools[%zu]", i);
            srv_reply_error(r, 400, "invalid_request_error", param, "unsupported_tool",
                            "Tools of type '%.40s' are not supported; only function tools.", type ? type : "(none)");
            json_decref(out);
            return NULL;
        }
        json_t *f = json_object();
        static const char *const KEYS[] = {"name", "description", "parameters", "strict"};
        copy_fields(t, f, KEYS, 4);
        json_array_append_new(out, json_pack("{s:s, s:o}", "type", "function", "function", f));
    }
    return out;
}

json_t *srv_responses_to_chat(const json_t *root, srv_reply *r) {
    if (!json_is_object(root)) {
        bad(r, NULL, "The body must be a JSON object.%s", NULL);
        return NULL;
    }
    json_t *chat = json_object(), *msgs = json_array();
    json_object_set_new(chat, "messages", msgs);
    static const char *const KEYS[] = {"model", "temperature", "top_p", "stream", "parallel_tool_calls", "user", "seed"};
    copy_fields(root, chat, KEYS, sizeof KEYS / sizeof KEYS[0]);
    json_t *v;
    if ((v = json_object_get(root, "max_output_tokens")) && !json_is_null(v)) json_object_set(chat, "max_tokens", v);
    if ((v = json_object_get(root, "reasoning")) && !json_is_null(v)) {
        json_t *e = json_object_get(v, "effort");
        if (!json_is_object(v) || (e && !json_is_null(e) && !json_is_string(e))) {
            bad(r, "reasoning", "'reasoning' must be {\"effort\": ...}.%s", NULL);
            goto fail;
        }
        if (json_is_string(e)) json_object_set(chat, "reasoning_effort", e);
    }
    if ((v = json_object_get(root, "instructions")) && !json_is_null(v)) {
        if (!json_is_string(v)) {
            bad(r, "instructions", "'instructions' must be a string.%s", NULL);
            goto fail;
        }
        json_array_append_new(msgs, json_pack("{s:s, s:O}", "role", "system", "content", v));
    }
    json_t *input = json_object_get(root, "input");
    if (json_is_string(input)) {
        json_array_append_new(msgs, json_pack("{s:s, s:O}", "role", "user", "content", input));
    } else if (json_is_array(input)) {
        json_t *reasoning = NULL, *turn = NULL; /* the assistant turn function calls join */
        size_t i;
        json_t *it;
        json_array_foreach(input, i, it) {
            char param[32];
            snprintf(param, sizeof param, "input[%zu]", i);
            const char *type = json_string_value(json_object_get(it, "type"));
            json_t *role = json_object_get(it, "role");
            if (!json_is_object(it)) {
                bad(r, param, "'%s' must be an object.", param);
                goto fail_items;
            }
            if (!type || !strcmp(type, "message")) {
                const char *rv = json_string_value(role);
                if (!rv || (strcmp(rv, "user") && strcmp(rv, "system") && strcmp(rv, "developer") &&
                            strcmp(rv, "assistant"))) {
                    bad(r, param, "'%s.role' must be user, system, developer or assistant.", param);
                    goto fail_items;
                }
                json_t *text = chat_parts(json_object_get(it, "content"), param, RESP_PARTS, 3, "input_image", r);
                if (!text) goto fail_items;
                json_t *m = json_pack("{s:s, s:o}", "role", rv, "content", text);
                if (!strcmp(rv, "assistant") && reasoning) {
                    json_object_set_new(m, "reasoning_content", reasoning);
                    reasoning = NULL;
                }
                json_array_append_new(msgs, m);
                turn = !strcmp(rv, "assistant") ? m : NULL;
            } else if (!strcmp(type, "reasoning")) {
                json_t *parts = json_object_get(it, "content");
                if (!json_array_size(parts)) parts = json_object_get(it, "summary");
                static const char *const RT[] = {"reasoning_text", "summary_text"};
                json_t *t = join_parts(parts, param, RT, 2, r);
                if (!t) goto fail_items;
                json_decref(reasoning);
                reasoning = t;
            } else if (!strcmp(type, "function_call")) {
                json_t *id = json_object_get(it, "call_id"), *name = json_object_get(it, "name"),
                       *args = json_object_get(it, "arguments");
                if (!json_is_string(id) || !json_is_string(name) || !json_is_string(args)) {
                    bad(r, param, "'%s' needs string call_id, name and arguments.", param);
                    goto fail_items;
                }
                if (!turn) {
                    turn = json_pack("{s:s, s:s}", "role", "assistant", "content", "");
                    if (reasoning) json_object_set_new(turn, "reasoning_content", reasoning);
                    reasoning = NULL;
                    json_array_append_new(msgs, turn);
                }
                json_t *calls = json_object_get(turn, "tool_calls");
                if (!calls) json_object_set_new(turn, "tool_calls", calls = json_array());
                json_array_append_new(calls, json_pack("{s:O, s:s, s:{s:O, s:O}}", "id", id, "type", "function",
                                                       "function", "name", name, "arguments", args));
            } else if (!strcmp(type, "function_call_output")) {
                json_t *id = json_object_get(it, "call_id");
                json_t *out = chat_parts(json_object_get(it, "output"), param, RESP_PARTS, 3, "input_image", r);
                if (!out) goto fail_items;
                if (!json_is_string(id)) {
                    json_decref(out);
                    bad(r, param, "'%s.call_id' must be a string.", param);
                    goto fail_items;
                }
                json_array_append_new(msgs, json_pack("{s:s, s:O, s:o}", "role", "tool", "tool_call_id", id,
                                                      "content", out));
                turn = NULL;
            } else {
                srv_reply_error(r, 400, "invalid_request_error", param, "unsupported_item",
                                "Input items of type '%.40s' are not supported (message, reasoning, function_call, "
                                "function_call_output).", type);
                goto fail_items;
            }
            continue;
        fail_items:
            json_decref(reasoning);
            goto fail;
        }
        json_decref(reasoning);
    } else {
        bad(r, "input", "'input' must be a string or an array of items.%s", NULL);
        goto fail;
    }
    if ((v = json_object_get(root, "tools")) && !json_is_null(v)) {
        if (!json_is_array(v)) {
            bad(r, "tools", "'tools' must be an array.%s", NULL);
            goto fail;
        }
        json_t *t = resp_tools(v, r);
        if (!t) goto fail;
        json_object_set_new(chat, "tools", t);
    }
    if ((v = json_object_get(root, "tool_choice")) && !json_is_null(v)) {
        json_t *name = json_object_get(v, "name");
        if (json_is_object(v) && json_is_string(name))
            json_object_set_new(chat, "tool_choice", json_pack("{s:s, s:{s:O}}", "type", "function", "function", "name", name));
        else json_object_set(chat, "tool_choice", v);
    }
    return chat;
fail:
    json_decref(chat);
    return NULL;
}

/* ---- Messages -> chat --------------------------------------------------------- */

static const char *const TEXT_ONLY[] = {"text"};

json_t *srv_messages_to_chat(const json_t *root, di_dsml_version v, srv_reply *r) {
    if (!json_is_object(root)) {
        bad(r, NULL, "The body must be a JSON object.%s", NULL);
        return NULL;
    }
    json_t *chat = json_object(), *msgs = json_array();
    json_object_set_new(chat, "messages", msgs);
    static const char *const KEYS[] = {"model", "temperature", "top_p", "top_k", "stream", "max_tokens"};
    copy_fields(root, chat, KEYS, sizeof KEYS / sizeof KEYS[0]);
    json_t *x;
    if ((x = json_object_get(root, "stop_sequences")) && !json_is_null(x)) json_object_set(chat, "stop", x);
    if ((x = json_object_get(root, "thinking")) && !json_is_null(x)) json_object_set(chat, "thinking", x);
    if ((x = json_object_get(root, "system")) && !json_is_null(x)) {
        json_t *s = join_parts(x, "system", TEXT_ONLY, 1, r);
        if (!s) goto fail;
        json_array_append_new(msgs, json_pack("{s:s, s:o}", "role", "system", "content", s));
    }
    json_t *in = json_object_get(root, "messages");
    if (!json_is_array(in) || !json_array_size(in)) {
        bad(r, "messages", "'messages' must be a non-empty array.%s", NULL);
        goto fail;
    }
    size_t i;
    json_t *m;
    json_array_foreach(in, i, m) {
        char param[40];
        snprintf(param, sizeof param, "messages[%zu]", i);
        const char *role = json_string_value(json_object_get(m, "role"));
        json_t *c = json_object_get(m, "content");
        if (!json_is_object(m) || !role || (strcmp(role, "user") && strcmp(role, "assistant"))) {
            bad(r, param, "'%s.role' must be user or assistant.", param);
            goto fail;
        }
        if (json_is_string(c)) {
            json_array_append_new(msgs, json_pack("{s:s, s:O}", "role", role, "content", c));
            continue;
        }
        if (!json_is_array(c)) {
            bad(r, param, "'%s.content' must be a string or an array of content blocks.", param);
            goto fail;
        }
        bool user = !strcmp(role, "user");
        srv_buf text = {0}, thinking = {0};
        json_t *aparts = user ? NULL : json_array(); /* the assistant's text and images, if it has images */
        bool a_images = false;
        bool has_thinking = false;
        json_t *calls = json_array();
        size_t k;
        json_t *b;
        json_array_foreach(c, k, b) {
            char bparam[96];
            snprintf(bparam, sizeof bparam, "%s.content[%zu]", param, k);
            const char *type = json_string_value(json_object_get(b, "type"));
            json_t *t = json_object_get(b, "text");
            if (type && !strcmp(type, "text") && json_is_string(t)) {
                if (user) json_array_append_new(msgs, json_pack("{s:s, s:O}", "role", "user", "content", t));
                else if ((text.len && !srv_buf_append(&text, "\n\n", 2)) ||
                         !srv_buf_append(&text, json_string_value(t), json_string_length(t)) ||
                         json_array_append_new(aparts, json_pack("{s:s, s:O}", "type", "text", "text", t)))
                    goto oom;
            } else if (type && !strcmp(type, "image")) {
                /* assistant images: the chat path decides (V4 writes the
                 * recipe's text for them, V4.1 refuses them as the recipe) */
                json_t *part = image_part(b, bparam, r);
                if (!part) goto block_fail;
                if (user) json_array_append_new(msgs, json_pack("{s:s, s:[o]}", "role", "user", "content", part));
                else json_array_append_new(aparts, part), a_images = true;
            } else if (user && type && !strcmp(type, "tool_result")) {
                json_t *id = json_object_get(b, "tool_use_id");
                json_t *res = chat_parts(json_object_get(b, "content"), bparam, TEXT_ONLY, 1, "image", r);
                if (!res) goto block_fail;
                if (!json_is_string(id)) {
                    json_decref(res);
                    bad(r, bparam, "'%s.tool_use_id' must be a string.", bparam);
                    goto block_fail;
                }
                json_array_append_new(msgs, json_pack("{s:s, s:O, s:o}", "role", "tool", "tool_call_id", id, "content", res));
            } else if (!user && type && !strcmp(type, "thinking") && json_is_string(json_object_get(b, "thinking"))) {
                json_t *th = json_object_get(b, "thinking");
                has_thinking = true;
                if (!srv_buf_append(&thinking, json_string_value(th), json_string_length(th))) goto oom;
            } else if (!user && type && !strcmp(type, "tool_use")) {
                json_t *id = json_object_get(b, "id"), *name = json_object_get(b, "name"), *input = json_object_get(b, "input");
                if (!json_is_string(id) || !json_is_string(name) || !json_is_object(input)) {
                    bad(r, bparam, "'%s' needs string id and name and an object input.", bparam);
                    goto block_fail;
                }
                char *args = di_dsml_json_dumps(input, v);
                if (!args) goto oom;
                json_array_append_new(calls, json_pack("{s:O, s:s, s:{s:O, s:s}}", "id", id, "type", "function",
                                                       "function", "name", name, "arguments", args));
                free(args);
            } else {
                srv_reply_error(r, 400, "invalid_request_error", bparam, "unsupported_content",
                                "Content blocks of type '%.40s' are not supported in %s messages.",
                                type ? type : "(none)", role);
                goto block_fail;
            }
            continue;
        oom:
            srv_reply_error(r, 503, "server_error", NULL, NULL, "Out of memory.");
        block_fail:
            srv_buf_free(&text);
            srv_buf_free(&thinking);
            json_decref(calls);
            json_decref(aparts);
            goto fail;
        }
        if (!user) {
            json_t *a = a_images ? json_pack("{s:s, s:O}", "role", "assistant", "content", aparts)
                                 : json_pack("{s:s, s:s#}", "role", "assistant", "content", text.data ? text.data : "", text.len);
            if (has_thinking) json_object_set_new(a, "reasoning_content", json_stringn(thinking.data ? thinking.data : "", thinking.len));
            if (json_array_size(calls)) json_object_set(a, "tool_calls", calls);
            json_array_append_new(msgs, a);
        }
        srv_buf_free(&text);
        srv_buf_free(&thinking);
        json_decref(calls);
        json_decref(aparts);
    }
    if ((x = json_object_get(root, "tools")) && !json_is_null(x)) {
        json_t *tools = json_array();
        json_object_set_new(chat, "tools", tools);
        size_t k;
        json_t *t;
        json_array_foreach(x, k, t) {
            json_t *f = json_object();
            static const char *const TK[] = {"name", "description"};
            copy_fields(t, f, TK, 2);
            json_t *schema = json_object_get(t, "input_schema");
            if (schema) json_object_set(f, "parameters", schema);
            json_t *type = json_object_get(t, "type");
            if (type && !(json_is_string(type) && !strcmp(json_string_value(type), "custom"))) {
                char param[32];
                snprintf(param, sizeof param, "tools[%zu]", k);
                srv_reply_error(r, 400, "invalid_request_error", param, "unsupported_tool",
                                "Tools of type '%.40s' are not supported; only custom (function) tools.",
                                json_is_string(type) ? json_string_value(type) : "?");
                json_decref(f);
                goto fail;
            }
            json_array_append_new(tools, json_pack("{s:s, s:o}", "type", "function", "function", f));
        }
        if (!json_is_array(x)) {
            bad(r, "tools", "'tools' must be an array.%s", NULL);
            goto fail;
        }
    }
    if ((x = json_object_get(root, "tool_choice")) && !json_is_null(x)) {
        const char *type = json_string_value(json_object_get(x, "type"));
        json_t *name = json_object_get(x, "name");
        if (type && (!strcmp(type, "auto") || !strcmp(type, "any"))) json_object_set_new(chat, "tool_choice", json_string("auto"));
        else if (type && !strcmp(type, "none")) json_object_set_new(chat, "tool_choice", json_string("none"));
        else if (type && !strcmp(type, "tool") && json_is_string(name))
            json_object_set_new(chat, "tool_choice", json_pack("{s:s, s:{s:O}}", "type", "function", "function", "name", name));
        else {
            bad(r, "tool_choice", "'tool_choice' must be {\"type\": auto | any | none | tool (with name)}.%s", NULL);
            goto fail;
        }
    }
    return chat;
fail:
    json_decref(chat);
    return NULL;
}

/* ---- answers ---------------------------------------------------------------------- */

static void item_id(char out[96], const char *prefix, const char *id, size_t index) {
    snprintf(out, 96, "%.8s_%.48s_%zu", prefix, id, index);
}

json_t *srv_proto_answer(srv_proto_kind kind, const char *id, const char *model, int64_t created, const json_t *msg,
                         const char *finish, int64_t in_tokens, int64_t out_tokens, int64_t cached) {
    const char *content = json_string_value(json_object_get(msg, "content"));
    json_t *reasoning = json_object_get(msg, "reasoning_content"), *calls = json_object_get(msg, "tool_calls");
    json_t *items = json_array();
    size_t n = 0, k;
    json_t *c;
    char iid[96];
    if (kind == SRV_PROTO_RESPONSES) {
        if (json_is_string(reasoning)) {
            item_id(iid, "rs", id, n++);
            json_array_append_new(items, json_pack("{s:s, s:s, s:s, s:[{s:s, s:O}], s:[]}", "type", "reasoning", "id", iid,
                                                   "status", "completed", "content", "type", "reasoning_text", "text",
                                                   reasoning, "summary"));
        }
        if (content && *content) {
            item_id(iid, "msg", id, n++);
            json_array_append_new(items, json_pack("{s:s, s:s, s:s, s:s, s:[{s:s, s:[], s:s}]}", "type", "message", "id",
                                                   iid, "status", "completed", "role", "assistant", "content", "type",
                                                   "output_text", "annotations", "text", content));
        }
        json_array_foreach(calls, k, c) {
            json_t *f = json_object_get(c, "function");
            item_id(iid, "fc", id, n++);
            json_array_append_new(items, json_pack("{s:s, s:s, s:s, s:O, s:O, s:O}", "type", "function_call", "id", iid,
                                                   "status", "completed", "call_id", json_object_get(c, "id"), "name",
                                                   json_object_get(f, "name"), "arguments", json_object_get(f, "arguments")));
        }
        bool complete = !strcmp(finish, "stop") || !strcmp(finish, "tool_calls");
        json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:s, s:o, s:n, s:o}", "id", id, "object", "response", "created_at",
                              (json_int_t)created, "status", complete ? "completed" : "incomplete", "model", model,
                              "output", items, "error", "incomplete_details",
                              complete ? json_null() : json_pack("{s:s}", "reason", "max_output_tokens"));
        json_object_set_new(o, "usage", json_pack("{s:I, s:I, s:I, s:{s:I}, s:{s:I}}", "input_tokens", (json_int_t)in_tokens,
                                                  "output_tokens", (json_int_t)out_tokens, "total_tokens",
                                                  (json_int_t)(in_tokens + out_tokens), "input_tokens_details",
                                                  "cached_tokens", (json_int_t)cached, "output_tokens_details",
                                                  "reasoning_tokens", (json_int_t)0));
        return o;
    }
    if (json_is_string(reasoning))
        json_array_append_new(items, json_pack("{s:s, s:O, s:s}", "type", "thinking", "thinking", reasoning, "signature", id));
    if (content && *content) json_array_append_new(items, json_pack("{s:s, s:s}", "type", "text", "text", content));
    json_array_foreach(calls, k, c) {
        json_t *f = json_object_get(c, "function");
        json_t *input = json_loads(json_string_value(json_object_get(f, "arguments")), JSON_DECODE_ANY, NULL);
        if (!json_is_object(input)) {
            json_decref(input);
            input = json_object(); /* a malformed call from the model */
        }
        json_array_append_new(items, json_pack("{s:s, s:O, s:O, s:o}", "type", "tool_use", "id", json_object_get(c, "id"),
                                               "name", json_object_get(f, "name"), "input", input));
    }
    const char *stop = !strcmp(finish, "tool_calls") ? "tool_use" : !strcmp(finish, "length") ? "max_tokens" : "end_turn";
    return json_pack("{s:s, s:s, s:s, s:s, s:o, s:s, s:n, s:{s:I, s:I, s:I, s:I}}", "id", id, "type", "message", "role",
                     "assistant", "model", model, "content", items, "stop_reason", stop, "stop_sequence", "usage",
                     "input_tokens", (json_int_t)in_tokens, "output_tokens", (json_int_t)out_tokens,
                     "cache_read_input_tokens", (json_int_t)cached, "cache_creation_input_tokens", (json_int_t)0);
}

/* ---- streams ------------------------------------------------------------------------ */

typedef enum { OPEN_NONE, OPEN_REASONING, OPEN_TEXT, OPEN_CALL } open_kind;

struct srv_proto_stream {
    srv_proto_kind kind;
    char id[64];
    const char *model;
    int64_t created;
    int64_t seq;              /* Responses sequence_number */
    size_t index;             /* output_index / content block index of the open one */
    size_t n_items;
    open_kind open;
    srv_buf text;             /* the open item's text so far (for the done events) */
    char call_id[48], call_name[256];
    json_t *done_items;       /* Responses: finished output items */
};

srv_proto_stream *srv_proto_stream_new(srv_proto_kind kind, const char *id, const char *model, int64_t created) {
    srv_proto_stream *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->kind = kind;
    snprintf(p->id, sizeof p->id, "%s", id);
    p->model = model;
    p->created = created;
    p->done_items = json_array();
    return p;
}

void srv_proto_stream_free(srv_proto_stream *p) {
    if (!p) return;
    srv_buf_free(&p->text);
    json_decref(p->done_items);
    free(p);
}

/* "event: TYPE\ndata: JSON\n\n", with the Responses sequence number. */
static void put_event(srv_proto_stream *p, srv_buf *out, json_t *ev) {
    if (p->kind == SRV_PROTO_RESPONSES) json_object_set_new(ev, "sequence_number", json_integer((json_int_t)p->seq++));
    char *s = json_dumps(ev, JSON_COMPACT);
    const char *type = json_string_value(json_object_get(ev, "type"));
    if (s && type) {
        srv_buf_printf(out, "event: %s\ndata: ", type);
        srv_buf_append(out, s, strlen(s));
        srv_buf_append(out, "\n\n", 2);
    }
    free(s);
    json_decref(ev);
}

static json_t *resp_object(srv_proto_stream *p, const char *status, json_t *output) {
    return json_pack("{s:s, s:s, s:I, s:s, s:s, s:o, s:n}", "id", p->id, "object", "response", "created_at",
                     (json_int_t)p->created, "status", status, "model", p->model, "output", output, "error");
}

void srv_proto_begin(srv_proto_stream *p, srv_buf *out, int64_t in_tokens) {
    if (p->kind == SRV_PROTO_RESPONSES) {
        put_event(p, out, json_pack("{s:s, s:o}", "type", "response.created", "response",
                                    resp_object(p, "in_progress", json_array())));
        put_event(p, out, json_pack("{s:s, s:o}", "type", "response.in_progress", "response",
                                    resp_object(p, "in_progress", json_array())));
        return;
    }
    put_event(p, out, json_pack("{s:s, s:{s:s, s:s, s:s, s:s, s:[], s:n, s:n, s:{s:I, s:I}}}", "type", "message_start",
                                "message", "id", p->id, "type", "message", "role", "assistant", "model", p->model,
                                "content", "stop_reason", "stop_sequence", "usage", "input_tokens",
                                (json_int_t)in_tokens, "output_tokens", (json_int_t)0));
}

static void close_open(srv_proto_stream *p, srv_buf *out) {
    if (p->open == OPEN_NONE) return;
    json_t *text = json_stringn(p->text.data ? p->text.data : "", p->text.len);
    char iid[96];
    if (p->kind == SRV_PROTO_MESSAGES) {
        if (p->open == OPEN_REASONING)
            put_event(p, out, json_pack("{s:s, s:I, s:{s:s, s:s}}", "type", "content_block_delta", "index",
                                        (json_int_t)p->index, "delta", "type", "signature_delta", "signature", p->id));
        put_event(p, out, json_pack("{s:s, s:I}", "type", "content_block_stop", "index", (json_int_t)p->index));
        json_decref(text);
    } else if (p->open == OPEN_CALL) {
        item_id(iid, "fc", p->id, p->index);
        put_event(p, out, json_pack("{s:s, s:O, s:s, s:I}", "type", "response.function_call_arguments.done", "arguments",
                                    text, "item_id", iid, "output_index", (json_int_t)p->index));
        json_t *item = json_pack("{s:s, s:s, s:s, s:s, s:s, s:o}", "type", "function_call", "id", iid, "status",
                                 "completed", "call_id", p->call_id, "name", p->call_name, "arguments", text);
        json_array_append(p->done_items, item);
        put_event(p, out, json_pack("{s:s, s:o, s:I}", "type", "response.output_item.done", "item", item, "output_index",
                                    (json_int_t)p->index));
    } else {
        bool r = p->open == OPEN_REASONING;
        item_id(iid, r ? "rs" : "msg", p->id, p->index);
        const char *ptype = r ? "reasoning_text" : "output_text";
        json_t *part = r ? json_pack("{s:s, s:O}", "type", ptype, "text", text)
                         : json_pack("{s:s, s:[], s:O}", "type", ptype, "annotations", "text", text);
        put_event(p, out, json_pack("{s:s, s:I, s:s, s:I, s:O}", "type",
                                    r ? "response.reasoning_text.done" : "response.output_text.done", "content_index",
                                    (json_int_t)0, "item_id", iid, "output_index", (json_int_t)p->index, "text", text));
        put_event(p, out, json_pack("{s:s, s:I, s:s, s:I, s:O}", "type", "response.content_part.done", "content_index",
                                    (json_int_t)0, "item_id", iid, "output_index", (json_int_t)p->index, "part", part));
        json_t *item = r ? json_pack("{s:s, s:s, s:s, s:[o], s:[]}", "type", "reasoning", "id", iid, "status", "completed",
                                     "content", part, "summary")
                         : json_pack("{s:s, s:s, s:s, s:s, s:[o]}", "type", "message", "id", iid, "status", "completed",
                                     "role", "assistant", "content", part);
        json_array_append(p->done_items, item);
        put_event(p, out, json_pack("{s:s, s:o, s:I}", "type", "response.output_item.done", "item", item, "output_index",
                                    (json_int_t)p->index));
        json_decref(text);
    }
    p->open = OPEN_NONE;
    p->text.len = 0;
}

static void open_item(srv_proto_stream *p, srv_buf *out, open_kind k, const json_t *call) {
    close_open(p, out);
    p->open = k;
    p->index = p->n_items++;
    char iid[96];
    if (k == OPEN_CALL) {
        snprintf(p->call_id, sizeof p->call_id, "%s", json_string_value(json_object_get(call, "id")));
        snprintf(p->call_name, sizeof p->call_name, "%s",
                 json_string_value(json_object_get(json_object_get(call, "function"), "name")));
    }
    if (p->kind == SRV_PROTO_MESSAGES) {
        json_t *block = k == OPEN_REASONING ? json_pack("{s:s, s:s, s:s}", "type", "thinking", "thinking", "", "signature", "")
                        : k == OPEN_TEXT    ? json_pack("{s:s, s:s}", "type", "text", "text", "")
                                            : json_pack("{s:s, s:s, s:s, s:{}}", "type", "tool_use", "id", p->call_id,
                                                        "name", p->call_name, "input");
        put_event(p, out, json_pack("{s:s, s:I, s:o}", "type", "content_block_start", "index", (json_int_t)p->index,
                                    "content_block", block));
        if (p->index == 0) put_event(p, out, json_pack("{s:s}", "type", "ping")); /* where the recipe pings */
        return;
    }
    json_t *item;
    if (k == OPEN_CALL) {
        item_id(iid, "fc", p->id, p->index);
        item = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "type", "function_call", "id", iid, "status", "in_progress",
                         "call_id", p->call_id, "name", p->call_name, "arguments", "");
    } else if (k == OPEN_REASONING) {
        item_id(iid, "rs", p->id, p->index);
        item = json_pack("{s:s, s:s, s:s, s:[], s:[]}", "type", "reasoning", "id", iid, "status", "in_progress", "content",
                         "summary");
    } else {
        item_id(iid, "msg", p->id, p->index);
        item = json_pack("{s:s, s:s, s:s, s:s, s:[]}", "type", "message", "id", iid, "status", "in_progress", "role",
                         "assistant", "content");
    }
    put_event(p, out, json_pack("{s:s, s:o, s:I}", "type", "response.output_item.added", "item", item, "output_index",
                                (json_int_t)p->index));
    if (k != OPEN_CALL) {
        json_t *part = k == OPEN_REASONING ? json_pack("{s:s, s:s}", "type", "reasoning_text", "text", "")
                                           : json_pack("{s:s, s:[], s:s}", "type", "output_text", "annotations", "text", "");
        put_event(p, out, json_pack("{s:s, s:I, s:s, s:I, s:o}", "type", "response.content_part.added", "content_index",
                                    (json_int_t)0, "item_id", iid, "output_index", (json_int_t)p->index, "part", part));
    }
}

static void put_delta(srv_proto_stream *p, srv_buf *out, const char *s, size_t n) {
    srv_buf_append(&p->text, s, n);
    json_t *d = srv_json_string(s, n);
    char iid[96];
    if (p->kind == SRV_PROTO_MESSAGES) {
        const char *dt = p->open == OPEN_REASONING ? "thinking_delta" : p->open == OPEN_TEXT ? "text_delta" : "input_json_delta";
        const char *key = p->open == OPEN_REASONING ? "thinking" : p->open == OPEN_TEXT ? "text" : "partial_json";
        put_event(p, out, json_pack("{s:s, s:I, s:{s:s, s:o}}", "type", "content_block_delta", "index", (json_int_t)p->index,
                                    "delta", "type", dt, key, d));
        return;
    }
    if (p->open == OPEN_CALL) {
        item_id(iid, "fc", p->id, p->index);
        put_event(p, out, json_pack("{s:s, s:o, s:s, s:I}", "type", "response.function_call_arguments.delta", "delta", d,
                                    "item_id", iid, "output_index", (json_int_t)p->index));
        return;
    }
    bool r = p->open == OPEN_REASONING;
    item_id(iid, r ? "rs" : "msg", p->id, p->index);
    put_event(p, out, json_pack("{s:s, s:I, s:o, s:s, s:I}", "type",
                                r ? "response.reasoning_text.delta" : "response.output_text.delta", "content_index",
                                (json_int_t)0, "delta", d, "item_id", iid, "output_index", (json_int_t)p->index));
}

void srv_proto_deltas(srv_proto_stream *p, srv_buf *out, const json_t *deltas) {
    size_t i;
    json_t *d;
    json_array_foreach(deltas, i, d) {
        json_t *rc = json_object_get(d, "reasoning_content"), *ct = json_object_get(d, "content");
        if (json_is_string(rc) && json_string_length(rc)) {
            if (p->open != OPEN_REASONING) open_item(p, out, OPEN_REASONING, NULL);
            put_delta(p, out, json_string_value(rc), json_string_length(rc));
        }
        if (json_is_string(ct) && json_string_length(ct)) {
            if (p->open != OPEN_TEXT) open_item(p, out, OPEN_TEXT, NULL);
            put_delta(p, out, json_string_value(ct), json_string_length(ct));
        }
        size_t k;
        json_t *tc;
        json_array_foreach(json_object_get(d, "tool_calls"), k, tc) {
            if (json_object_get(tc, "id")) open_item(p, out, OPEN_CALL, tc);
            const char *a = json_string_value(json_object_get(json_object_get(tc, "function"), "arguments"));
            if (a && *a && p->open == OPEN_CALL) put_delta(p, out, a, strlen(a));
        }
    }
}

void srv_proto_end(srv_proto_stream *p, srv_buf *out, const char *finish, int64_t in_tokens, int64_t out_tokens,
                   int64_t cached) {
    close_open(p, out);
    if (p->kind == SRV_PROTO_MESSAGES) {
        const char *stop = !strcmp(finish, "tool_calls") ? "tool_use" : !strcmp(finish, "length") ? "max_tokens" : "end_turn";
        put_event(p, out, json_pack("{s:s, s:{s:s, s:n}, s:{s:I, s:I, s:I}}", "type", "message_delta", "delta",
                                    "stop_reason", stop, "stop_sequence", "usage", "input_tokens", (json_int_t)in_tokens,
                                    "output_tokens", (json_int_t)out_tokens, "cache_read_input_tokens", (json_int_t)cached));
        put_event(p, out, json_pack("{s:s}", "type", "message_stop"));
        return;
    }
    bool complete = !strcmp(finish, "stop") || !strcmp(finish, "tool_calls");
    json_t *resp = resp_object(p, complete ? "completed" : "incomplete", json_incref(p->done_items));
    json_object_set_new(resp, "incomplete_details", complete ? json_null() : json_pack("{s:s}", "reason", "max_output_tokens"));
    json_object_set_new(resp, "usage", json_pack("{s:I, s:I, s:I, s:{s:I}, s:{s:I}}", "input_tokens", (json_int_t)in_tokens,
                                                 "output_tokens", (json_int_t)out_tokens, "total_tokens",
                                                 (json_int_t)(in_tokens + out_tokens), "input_tokens_details",
                                                 "cached_tokens", (json_int_t)cached, "output_tokens_details",
                                                 "reasoning_tokens", (json_int_t)0));
    put_event(p, out, json_pack("{s:s, s:o}", "type", complete ? "response.completed" : "response.incomplete", "response", resp));
}
