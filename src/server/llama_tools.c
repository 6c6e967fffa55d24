/* Tools on Llama 3.1 / 3.2 / 3.3 chats (see llama_tools.h). Request rules:
 *   - tools are checked as on the DeepSeek path (srv_chat_tools: names,
 *     unique, parameters a JSON Schema of type object);
 *   - tool_choice "auto" shows them (the template's tools-in-first-user-
 *     message form); "none" renders the chat without them (as the recipe
 *     hides them); "required" / a named function (only that tool shown)
 *     also compiles a JSON Schema of the call -- {"name": one of the tools,
 *     "parameters": valid under its schema}, in the template's key order --
 *     that the grammar engine enforces;
 *   - earlier assistant tool_calls become the template's one JSON call (the
 *     template takes one call per turn: more is a 400, as it raises);
 *     their OpenAI "arguments" strings must hold JSON objects; tool results
 *     become ipython turns;
 *   - parallel_tool_calls must be a boolean; the reply holds one call at
 *     most (the template's format), so it changes nothing. */
#include "server/llama_tools.h"

#include "base/alloc.h"
#include "engine/engine_text.h"
#include "server/dsml_chat.h"
#include "text/chat_llama31.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CALL_ID_RANDOM 24 /* call_<24 characters> */

static bool bad(srv_reply *r, const char *param, const char *fmt, const char *arg) {
    srv_reply_error(r, 400, "invalid_request_error", param, "invalid_value", fmt, arg);
    return false;
}

static bool oom(srv_reply *r) {
    srv_reply_error(r, 503, "server_error", NULL, NULL, "Out of memory.");
    return false;
}

bool srv_llama_tools_model(di_server *s) {
    return di_tok_chat_kind(di_engine_tokenizer(s->engine)) == DI_CHAT_LLAMA31;
}

/* An assistant message's tool_calls in the template's shape
 * ([{"function": {"name", "arguments": object}}]); NULL with r filled. */
static json_t *template_calls(const json_t *calls, size_t i, srv_reply *r) {
    char param[64];
    snprintf(param, sizeof param, "messages[%zu].tool_calls", i);
    if (!json_is_array(calls)) return bad(r, param, "'%s' must be an array of function calls.", param), NULL;
    json_t *out = json_array();
    size_t k;
    json_t *c;
    json_array_foreach(calls, k, c) {
        json_t *f = json_object_get(c, "function"), *name = json_object_get(f, "name");
        json_t *args = json_object_get(f, "arguments");
        json_t *obj = json_is_string(args) ? json_loads(json_string_value(args), 0, NULL) : json_incref(args);
        if (!json_is_string(name) || !json_is_object(obj)) {
            json_decref(obj);
            json_decref(out);
            return bad(r, param, "'%s' entries need function.name and function.arguments holding a JSON object.",
                       param), NULL;
        }
        json_array_append_new(out, json_pack("{s:{s:O, s:o}}", "function", "name", name, "arguments", obj));
    }
    return out;
}

/* {"name": N, "parameters": P} for one tool: the template's key order. */
static json_t *call_schema(const json_t *tool) {
    const json_t *f = json_object_get(tool, "function");
    const json_t *params = json_object_get(f, "parameters");
    json_t *p = params && !json_is_null(params) ? json_incref((json_t *)params) : json_pack("{s:s}", "type", "object");
    return json_pack("{s:s, s:{s:{s:O}, s:o}, s:[s, s], s:b}", "type", "object", "properties", "name", "const",
                     json_object_get(f, "name"), "parameters", p, "required", "name", "parameters",
                     "additionalProperties", false);
}

bool srv_llama_chat_text(di_server *s, const json_t *root, const char *const *roles, const char *const *contents,
                         size_t n, char **text, char **schema, bool *parse, srv_reply *r) {
    *text = *schema = NULL;
    *parse = false;
    const char *choice, *named;
    if (!srv_chat_tool_choice(root, &choice, &named, r)) return false;
    json_t *ptc = json_object_get(root, "parallel_tool_calls");
    if (ptc && !json_is_null(ptc) && !json_is_boolean(ptc))
        return bad(r, "parallel_tool_calls", "%s", "'parallel_tool_calls' must be a boolean.");
    json_t *tools = srv_chat_tools(json_object_get(root, "tools"), named, r);
    if (!tools) return false;
    bool has_tools = json_array_size(tools) > 0, required = !strcmp(choice, "required");
    if (required && !has_tools) {
        json_decref(tools);
        return bad(r, "tool_choice", "%s", "tool_choice 'required' needs at least one tool.");
    }
    bool shown = has_tools && strcmp(choice, "none");
    json_t *msgs = json_array();
    const json_t *body_msgs = json_object_get(root, "messages");
    bool ok = msgs != NULL;
    for (size_t i = 0; ok && i < n; i++) {
        json_t *m = json_pack("{s:s, s:s}", "role", roles[i], "content", contents[i]);
        const json_t *calls = json_object_get(json_array_get(body_msgs, i), "tool_calls");
        if (m && !strcmp(roles[i], "assistant") && calls && !json_is_null(calls)) {
            json_t *tc = template_calls(calls, i, r);
            if (!tc) {
                json_decref(m);
                json_decref(msgs);
                json_decref(tools);
                return false;
            }
            json_object_set_new(m, "tool_calls", tc);
        }
        ok = m && !json_array_append_new(msgs, m);
    }
    const di_tokenizer *t = di_engine_tokenizer(s->engine);
    size_t bl = 0;
    const char *bt = di_tok_bos(t) >= 0 ? di_tok_text(t, di_tok_bos(t), &bl) : NULL;
    char *bos = bt ? di_strndup(bt, bl) : di_strdup("");
    di_error err = {0};
    di_status st = ok && bos ? di_chat_llama31_render(msgs, shown ? tools : NULL, true, bos, text, NULL, &err)
                             : DI_ERR_NOMEM;
    free(bos);
    json_decref(msgs);
    if (!st && required) {
        json_t *alts = json_array();
        size_t i;
        json_t *tool;
        json_array_foreach(tools, i, tool) json_array_append_new(alts, call_schema(tool));
        json_t *sch = json_array_size(alts) == 1 ? json_incref(json_array_get(alts, 0)) : json_pack("{s:O}", "anyOf", alts);
        json_decref(alts);
        if (!sch || !(*schema = json_dumps(sch, JSON_COMPACT))) st = DI_ERR_NOMEM;
        json_decref(sch);
    }
    json_decref(tools);
    if (st) {
        free(*text);
        *text = NULL;
        if (st == DI_ERR_NOMEM) return oom(r);
        srv_reply_error(r, 400, "invalid_request_error", "messages", "invalid_value", "Cannot apply the chat template: %s",
                        err.msg);
        return false;
    }
    *parse = shown;
    return true;
}

/* ---- output ---------------------------------------------------------------- */

struct srv_llama_out {
    di_server *srv;
    srv_buf text; /* the reply so far */
    bool content;   /* decided: plain content (streams as it comes) */
    bool call;      /* decided: one tool call (name, args) */
    char *name, *args;
    size_t sent;    /* content bytes streamed */
    bool call_sent;
    char id[48];
};

srv_llama_out *srv_llama_out_new(di_server *s) {
    srv_llama_out *o = calloc(1, sizeof *o);
    if (!o) return NULL;
    o->srv = s;
    return o;
}

void srv_llama_out_free(srv_llama_out *o) {
    if (!o) return;
    srv_buf_free(&o->text), free(o->name), free(o->args);
    free(o);
}

bool srv_llama_out_push(srv_llama_out *o, const char *text, size_t n, bool final) {
    if (o->call) return true; /* the call is the whole reply */
    if (!srv_buf_append(&o->text, text, n)) return false;
    const char *so_far = o->text.data ? o->text.data : "";
    if (!o->content && !di_chat_llama31_may_be_call(so_far, o->text.len)) o->content = true;
    if (final && !o->content) {
        o->call = di_chat_llama31_parse_call(so_far, o->text.len, &o->name, &o->args);
        o->content = !o->call;
        if (o->call) {
            char rid[32];
            srv_request_id(o->srv, rid);
            snprintf(o->id, sizeof o->id, "call_%.*s", CALL_ID_RANDOM, rid);
        }
    }
    return true;
}

static json_t *call_json(const srv_llama_out *o, bool with_index, bool with_args) {
    json_t *c = json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", o->id, "type", "function", "function", "name", o->name,
                          "arguments", with_args ? o->args : "");
    if (with_index) json_object_set_new(c, "index", json_integer(0));
    return c;
}

json_t *srv_llama_out_deltas(srv_llama_out *o) {
    json_t *arr = json_array();
    if (o->content && o->text.len > o->sent) {
        json_array_append_new(arr, json_pack("{s:o}", "content", srv_json_string(o->text.data + o->sent, o->text.len - o->sent)));
        o->sent = o->text.len;
    }
    if (o->call && !o->call_sent) {
        json_array_append_new(arr, json_pack("{s:[o]}", "tool_calls", call_json(o, true, false)));
        json_array_append_new(arr, json_pack("{s:[{s:i, s:{s:s}}]}", "tool_calls", "index", 0, "function", "arguments",
                                             o->args));
        o->call_sent = true;
    }
    return arr;
}

json_t *srv_llama_out_message(srv_llama_out *o) {
    if (o->call)
        return json_pack("{s:s, s:n, s:[o]}", "role", "assistant", "content", "tool_calls", call_json(o, false, true));
    return json_pack("{s:s, s:o}", "role", "assistant", "content", srv_json_string(o->text.data ? o->text.data : "", o->text.len));
}

size_t srv_llama_out_n_calls(const srv_llama_out *o) { return o->call ? 1 : 0; }
