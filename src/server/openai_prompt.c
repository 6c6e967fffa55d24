/* The OpenAI routes' prompts (openai.h): a chat body's "messages" ->
 * one prompt through the model's chat template (with Llama 3.1's tool
 * form, or a <think> model's output parser, when they apply) or, for
 * DeepSeek checkpoints, the conversation of dsml_chat.c; a completions
 * body's "prompt" in OpenAI's four forms; token-id arrays; image_url parts
 * as the model's placeholder plus the decoded image. */
#include "server/openai.h"
#include "server/content_parts.h"
#include "server/think_out.h"

#include "base/alloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Limits on hostile bodies, beyond the byte limit. */
#define MAX_MESSAGES 4096
#define MAX_PROMPTS 64 /* prompts in one /v1/completions body */

bool oai_tokenize_text(di_server *s, const char *text, bool add_special, int32_t **ids, size_t *n, srv_reply *r) {
    di_error err;
    if (di_engine_tokenize(s->engine, text, add_special, true, ids, n, &err)) {
        srv_reply_error(r, 400, "invalid_request_error", NULL, NULL, "Cannot tokenize the prompt: %s", err.msg);
        return false;
    }
    return true;
}

/* One image of g from its URL: a base64 data: URL, decoded. A remote URL
 * is refused (the server never fetches from the network). */
static bool add_image(const json_t *url, const char *param, gen_req *g, srv_reply *r) {
    if (!json_is_string(url)) {
        oai_bad_type(r, param, "an image_url part with {\"url\": \"data:image/...;base64,...\"}");
        return false;
    }
    const char *u = json_string_value(url);
    if (strncmp(u, "data:", 5) != 0) {
        srv_reply_error(r, 400, "invalid_request_error", param, "invalid_image_url",
                        "Remote image URLs are not fetched by this server; send the image inline as a "
                        "data: URL (data:image/png;base64,...).");
        return false;
    }
    if (g->n_images == DI_IMAGE_DEFAULT_MAX_IMAGES) {
        srv_reply_error(r, 400, "invalid_request_error", param, "too_many_images", "At most %d images per request.",
                        DI_IMAGE_DEFAULT_MAX_IMAGES);
        return false;
    }
    uint8_t *bytes;
    size_t n;
    const char *why;
    if (!srv_data_url_decode(u, json_string_length(url), DI_IMAGE_DEFAULT_MAX_BYTES, &bytes, &n, &why)) {
        srv_reply_error(r, 400, "invalid_request_error", param, "invalid_image_url", "Bad image data URL: %s.", why);
        return false;
    }
    g->images[g->n_images++] = (di_image_input){bytes, n};
    return true;
}

/* What an image_url part of a chat message becomes (srv_parts_rules.image):
 * one image of g and the model's placeholder in the text. */
typedef struct image_parts {
    di_server *s;
    gen_req *g;
} image_parts;

static bool image_piece(void *ctx, json_t *part, const char *param, const char **piece, size_t *len, srv_reply *r) {
    image_parts *ip = ctx;
    json_t *iu = json_object_get(part, "image_url");
    json_t *url = json_is_object(iu) ? json_object_get(iu, "url") : iu;
    const char *ph = di_engine_image_placeholder(ip->s->engine);
    if (!ph) {
        srv_reply_error(r, 400, "invalid_request_error", param, "unsupported_content",
                        "This model takes no images (it has no vision tower).");
        return false;
    }
    if (!add_image(url, param, ip->g, r)) return false;
    *piece = ph;
    *len = strlen(ph);
    return true;
}

/* One message's content: a string, null (assistant turns), or an array of
 * {"type": "text", "text": ...} parts joined by newlines (vLLM does the
 * same) and {"type": "image_url", ...} parts (image_piece). *owned is set
 * when a joined copy was made. */
static bool message_content(di_server *s, json_t *c, size_t i, const char **out, char **owned, gen_req *g,
                            srv_reply *r) {
    char param[64];
    snprintf(param, sizeof param, "messages[%zu].content", i);
    *owned = NULL;
    if (!c || json_is_null(c)) {
        *out = "";
        return true;
    }
    if (json_is_string(c)) {
        *out = json_string_value(c);
        return true;
    }
    if (!json_is_array(c)) {
        oai_bad_type(r, param, "a string or an array of content parts");
        return false;
    }
    image_parts ip = {s, g};
    const srv_parts_rules rules = {
        .sep = "\n",
        .shape_tail = " must be an array of {\"type\": \"text\", \"text\": ...} parts.",
        .only = "by this model; only text",
        .image = image_piece,
        .ctx = &ip,
    };
    srv_buf b = {0};
    if (!srv_content_parts_join(c, param, &rules, &b, r)) return false;
    *owned = b.data ? b.data : calloc(1, 1);
    *out = *owned ? *owned : "";
    return true;
}

/* DeepSeek V4 / V4.1: the conversation through src/text/dsml (tools,
 * reasoning), not the tokenizer's template. */
static bool dsml_chat_prompt(di_server *s, json_t *root, gen_req *g, srv_reply *r) {
    g->prompts = calloc(1, sizeof *g->prompts);
    g->prompt_lens = calloc(1, sizeof *g->prompt_lens);
    if (!g->prompts || !g->prompt_lens) {
        srv_reply_error(r, 503, "server_error", NULL, NULL, "Out of memory.");
        return false;
    }
    char *grammar;
    if (!srv_dsml_chat_prompt(s, root, &g->dsml_opts, &g->prompts[0], &g->prompt_lens[0], &grammar, r)) return false;
    g->n_prompts = 1;
    g->dsml = true;
    for (size_t i = 0; i < g->dsml_opts.n_images; i++)
        if (!add_image(g->dsml_opts.image_urls[i], "messages", g, r)) {
            free(grammar);
            return false;
        }
    if (grammar) {
        /* A required / named tool: the reply is the call block alone (no
         * content for a response_format to shape), and the grammar makes
         * it calls of those tools with arguments their schemas accept.
         * Lenient: schema keywords it cannot enforce are reported in
         * X-DeepInfer-Warning, not refused (tools' schemas are guidance;
         * the recipe does not check them). JSON values may be spaced as
         * the recipe prints them (", " and ": "). */
        free(g->constraint_text);
        g->constraint_text = grammar;
        g->constraint = (di_constraint){DI_CONSTRAINT_TOOL_CALLS, grammar, true, true};
    }
    return true;
}

/* A Llama 3.1 chat with tools or tool turns: the template's tool form. */
static bool llama_tools_path(di_server *s, json_t *root) {
    if (!srv_llama_tools_model(s)) return false;
    json_t *tools = json_object_get(root, "tools");
    if (json_array_size(tools) > 0) return true;
    size_t i;
    json_t *msg;
    json_array_foreach(json_object_get(root, "messages"), i, msg) {
        json_t *tc = json_object_get(msg, "tool_calls");
        if (tc && !json_is_null(tc)) return true;
    }
    return false;
}

bool oai_chat_prompt(di_server *s, json_t *root, gen_req *g, srv_reply *r) {
    if (s->dsml) return dsml_chat_prompt(s, root, g, r);
    json_t *msgs = json_object_get(root, "messages");
    if (!msgs || !json_is_array(msgs)) {
        if (!msgs) srv_reply_error(r, 400, "invalid_request_error", "messages", "missing_required_parameter",
                                   "'messages' is required.");
        else oai_bad_type(r, "messages", "an array");
        return false;
    }
    size_t n = json_array_size(msgs);
    if (n == 0 || n > MAX_MESSAGES) {
        srv_reply_error(r, 400, "invalid_request_error", "messages", "invalid_value",
                        "'messages' must hold 1 to %d messages, got %zu.", MAX_MESSAGES, n);
        return false;
    }
    di_message *m = di_calloc(n, sizeof *m);
    char **owned = di_calloc(n, sizeof *owned);
    bool ok = m && owned;
    if (!ok) srv_reply_error(r, 503, "server_error", NULL, NULL, "Out of memory.");
    for (size_t i = 0; ok && i < n; i++) {
        json_t *msg = json_array_get(msgs, i);
        json_t *role = json_object_get(msg, "role");
        char param[48];
        snprintf(param, sizeof param, "messages[%zu].role", i);
        if (!json_is_object(msg) || !json_is_string(role)) {
            oai_bad_type(r, param, "a string in an object");
            ok = false;
            break;
        }
        const char *rv = json_string_value(role);
        /* OpenAI's "developer" role is the newer name for "system". */
        if (!strcmp(rv, "developer")) rv = "system";
        if (strcmp(rv, "system") && strcmp(rv, "user") && strcmp(rv, "assistant") && strcmp(rv, "tool")) {
            srv_reply_error(r, 400, "invalid_request_error", param, "invalid_value",
                            "Unknown role '%.40s' (system, developer, user, assistant or tool).", rv);
            ok = false;
            break;
        }
        m[i].role = rv;
        ok = message_content(s, json_object_get(msg, "content"), i, &m[i].content, &owned[i], g, r);
    }
    char *text = NULL, *schema = NULL;
    if (ok && llama_tools_path(s, root)) {
        /* Llama 3.1's template with tools / tool turns (llama_tools.c) */
        const char **roles = di_calloc(n, sizeof *roles), **contents = di_calloc(n, sizeof *contents);
        ok = roles && contents;
        if (!ok) srv_reply_error(r, 503, "server_error", NULL, NULL, "Out of memory.");
        for (size_t i = 0; ok && i < n; i++) roles[i] = m[i].role, contents[i] = m[i].content;
        bool parse = false;
        ok = ok && srv_llama_chat_text(s, root, roles, contents, n, &text, &schema, &parse, r);
        free(roles), free(contents);
        if (ok && parse) {
            g->dsml = true; /* the reply goes through the output parser (Llama mode) */
            g->dsml_opts.llama_json = true;
        }
        if (ok && schema) {
            /* tool_choice required / named: the call, held to its schema;
             * JSON spaced as the template writes it ({"name": ...}) */
            free(g->constraint_text);
            g->constraint_text = schema;
            g->constraint = (di_constraint){DI_CONSTRAINT_JSON_SCHEMA, schema, true, true};
        }
    } else if (ok) {
        di_error err;
        if (di_engine_apply_chat(s->engine, NULL, m, n, true, &text, &err)) {
            srv_reply_error(r, 400, "invalid_request_error", "messages", NULL, "Cannot apply the chat template: %s", err.msg);
            ok = false;
        } else {
            /* a <think> model's reply goes through the output parser (think_out.c) */
            bool think = false, on = true;
            ok = srv_think_chat(s, root, &text, &think, &on, r);
            if (ok && think) {
                g->dsml = true;
                g->dsml_opts.think_tags = true;
                g->dsml_opts.thinking = on;
            }
        }
    }
    if (owned)
        for (size_t i = 0; i < n; i++) free(owned[i]);
    free(owned);
    free(m);
    if (!ok) {
        free(text); /* rendered, then refused (e.g. bad chat_template_kwargs) */
        return false;
    }
    g->prompts = calloc(1, sizeof *g->prompts);
    g->prompt_lens = calloc(1, sizeof *g->prompt_lens);
    if (!g->prompts || !g->prompt_lens) {
        free(text);
        srv_reply_error(r, 503, "server_error", NULL, NULL, "Out of memory.");
        return false;
    }
    g->n_prompts = 1;
    /* The template wrote the special tokens; no BOS of our own. */
    ok = oai_tokenize_text(s, text, false, &g->prompts[0], &g->prompt_lens[0], r);
    free(text);
    return ok;
}

/* A token-id prompt: every id must be in the vocabulary. */
bool oai_token_prompt(di_server *s, json_t *arr, int32_t **ids, size_t *n, srv_reply *r) {
    size_t len = json_array_size(arr);
    *ids = di_malloc_array(len ? len : 1, sizeof **ids);
    if (!*ids) {
        srv_reply_error(r, 503, "server_error", NULL, NULL, "Out of memory.");
        return false;
    }
    for (size_t i = 0; i < len; i++) {
        json_t *v = json_array_get(arr, i);
        json_int_t t = json_is_integer(v) ? json_integer_value(v) : -1;
        if (!json_is_integer(v) || t < 0 || t >= s->desc.n_vocab) {
            srv_reply_error(r, 400, "invalid_request_error", "prompt", "invalid_value",
                            "Prompt token %zu is not a token id in [0, %d).", i, s->desc.n_vocab);
            return false;
        }
        (*ids)[i] = (int32_t)t;
    }
    *n = len;
    return true;
}

/* "prompt": a string, an array of strings, an array of token ids, or an
 * array of arrays of token ids (OpenAI's four forms). */
bool oai_completion_prompts(di_server *s, json_t *root, gen_req *g, srv_reply *r) {
    json_t *p = json_object_get(root, "prompt");
    if (!p || json_is_null(p)) {
        srv_reply_error(r, 400, "invalid_request_error", "prompt", "missing_required_parameter", "'prompt' is required.");
        return false;
    }
    size_t n;
    bool single_ids = false;
    if (json_is_string(p)) {
        n = 1;
    } else if (json_is_array(p)) {
        n = json_array_size(p);
        single_ids = n > 0 && json_is_integer(json_array_get(p, 0));
        if (single_ids) n = 1;
    } else {
        oai_bad_type(r, "prompt", "a string, an array of strings or an array of token ids");
        return false;
    }
    if (n == 0 || n > MAX_PROMPTS) {
        srv_reply_error(r, 400, "invalid_request_error", "prompt", "invalid_value",
                        "'prompt' must hold 1 to %d prompts.", MAX_PROMPTS);
        return false;
    }
    g->prompts = di_calloc(n, sizeof *g->prompts);
    g->prompt_lens = di_calloc(n, sizeof *g->prompt_lens);
    if (!g->prompts || !g->prompt_lens) {
        srv_reply_error(r, 503, "server_error", NULL, NULL, "Out of memory.");
        return false;
    }
    g->n_prompts = n;
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_is_string(p) ? p : single_ids ? p : json_array_get(p, i);
        bool ok;
        if (json_is_string(e)) ok = oai_tokenize_text(s, json_string_value(e), true, &g->prompts[i], &g->prompt_lens[i], r);
        else if (json_is_array(e)) ok = oai_token_prompt(s, e, &g->prompts[i], &g->prompt_lens[i], r);
        else {
            oai_bad_type(r, "prompt", "a string, an array of strings or an array of token ids");
            ok = false;
        }
        if (!ok) return false;
    }
    return true;
}
