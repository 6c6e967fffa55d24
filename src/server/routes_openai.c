/* The OpenAI routes: request JSON -> validated engine requests, engine
 * output -> OpenAI's response and chunk shapes; plus /v1/models,
 * /tokenize and /detokenize.
 *
 * Validation follows OpenAI's API: a field of the wrong type or out of its
 * range is a 400 naming the field (param); unknown fields are ignored;
 * known features we do not have (echo, suffix, tools, non-text content
 * parts) are a 400 rather than being silently dropped, so a client never
 * gets an answer to a question it did not ask. response_format json_object
 * and json_schema become engine constraints (structured output).
 *
 * Seeds: the engine's RNG is counter-based and keyed by (seed, position),
 * so a seeded request reproduces exactly whatever else is running. With
 * n > 1 (or several prompts) choice i uses seed + i, which keeps choices
 * different from one another and each one reproducible. Without a seed each
 * request draws a fresh one (OpenAI's behaviour). */
#include "server/server_internal.h"
#include "server/dsml_chat.h"
#include "server/think_out.h"
#include "server/routes_protocols.h"

#include "base/alloc.h"
#include "vision/image.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Limits on hostile bodies, beyond the byte limit. */
#define MAX_STOPS 16           /* OpenAI allows 4; vLLM more */
#define MAX_STOP_BYTES 256
#define MAX_MESSAGES 4096
#define MAX_PROMPTS 64         /* prompts in one /v1/completions body */
#define MAX_LOGIT_BIAS 1024    /* OpenAI allows 300 */
#define MAX_LOGPROBS_COMPLETIONS 20
/* What JSON cannot say: a logprob of -inf is reported as OpenAI does. */
#define LOGPROB_FLOOR (-9999.0)

typedef enum req_kind { KIND_CHAT, KIND_COMPLETION } req_kind;

/* A parsed generation request; json strings are borrowed from the body. */
typedef struct gen_req {
    req_kind kind;
    int32_t **prompts;         /* (n_prompts) token ids, owned */
    size_t *prompt_lens;       /* (n_prompts) */
    size_t n_prompts;
    int32_t max_tokens;        /* 0 = the server's default */
    int32_t n;
    di_sampling_params sp;
    bool seed_given;
    uint64_t seed;
    const char *stops[MAX_STOPS];
    size_t n_stops;
    di_logit_bias *bias;       /* (n_bias), owned */
    size_t n_bias;
    bool stream, include_usage, ignore_eos;
    bool logprobs;
    int32_t top_logprobs;
    di_constraint constraint;  /* from response_format */
    char *constraint_text;     /* owned JSON Schema text */
    di_image_input images[DI_IMAGE_DEFAULT_MAX_IMAGES]; /* image_url parts, data owned */
    size_t n_images;
    bool dsml;                 /* a DeepSeek conversation (dsml_chat.c) */
    srv_proto_kind proto;      /* Responses / Messages body (routes_protocols.c) */
    srv_dsml_opts dsml_opts;
} gen_req;

/* Per-job formatting state, freed with the job. */
typedef struct route_state {
    req_kind kind;
    char id[48];
    int64_t created;
    const char *model;         /* the server's name (outlives jobs) */
    di_engine *engine;
    bool include_usage, logprobs;
    int32_t top_logprobs;
    int32_t n;                 /* choices per prompt */
    size_t n_choices;
    int64_t prompt_tokens;     /* usage: each distinct prompt once */
    int64_t image_prompt_len;  /* chat with images: the prompt before expansion, else -1 */
    int64_t completion_tokens, cached_tokens;
    size_t n_final;
    bool *sent_role;           /* (n_choices) chat stream: role chunk sent */
    srv_dsml_out **dsml;       /* (n_choices) DeepSeek output parsers, or NULL */
    srv_proto_kind proto;      /* Responses / Messages shapes (one choice) */
    srv_proto_stream *ps;      /* their stream state */
    bool proto_begun;
    size_t *text_offset;       /* (n_choices) completions logprobs text_offset */
    bool failed;               /* a choice ended in error */
    bool cancelled;            /* a choice was cancelled (shutdown) */
    char error[256];
} route_state;

static void route_state_free(void *p) {
    route_state *rs = p;
    if (!rs) return;
    for (size_t i = 0; rs->dsml && i < rs->n_choices; i++) srv_dsml_out_free(rs->dsml[i]);
    free(rs->dsml);
    srv_proto_stream_free(rs->ps);
    free(rs->sent_role);
    free(rs->text_offset);
    free(rs);
}

static void gen_req_free(gen_req *g) {
    for (size_t i = 0; i < g->n_prompts; i++) free(g->prompts[i]);
    free(g->prompts);
    free(g->prompt_lens);
    free(g->bias);
    free(g->constraint_text);
    for (size_t i = 0; i < g->n_images; i++) free((void *)g->images[i].data);
}

/* ---- field readers: absent or null keeps the default ----------------------- */

static void bad_type(srv_reply *r, const char *name, const char *want) {
    srv_reply_error(r, 400, "invalid_request_error", name, "invalid_type", "'%s' must be %s.", name, want);
}

static void bad_range(srv_reply *r, const char *name, double lo, double hi, double got) {
    srv_reply_error(r, 400, "invalid_request_error", name, "invalid_value",
                    "'%s' must be in [%g, %g], got %g.", name, lo, hi, got);
}

static bool get_number(json_t *o, const char *name, double lo, double hi, double *out, srv_reply *r) {
    json_t *v = json_object_get(o, name);
    if (!v || json_is_null(v)) return true;
    if (!json_is_number(v)) {
        bad_type(r, name, "a number");
        return false;
    }
    double x = json_number_value(v);
    if (!isfinite(x) || x < lo || x > hi) {
        bad_range(r, name, lo, hi, x);
        return false;
    }
    *out = x;
    return true;
}

static bool get_int(json_t *o, const char *name, int64_t lo, int64_t hi, int64_t *out, srv_reply *r) {
    json_t *v = json_object_get(o, name);
    if (!v || json_is_null(v)) return true;
    int64_t x;
    if (json_is_integer(v)) {
        x = json_integer_value(v);
    } else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) &&
               fabs(json_real_value(v)) < 9.0e15) {
        x = (int64_t)json_real_value(v); /* 5.0 is an integer to Python clients */
    } else {
        bad_type(r, name, "an integer");
        return false;
    }
    if (x < lo || x > hi) {
        bad_range(r, name, (double)lo, (double)hi, (double)x);
        return false;
    }
    *out = x;
    return true;
}

static bool get_bool(json_t *o, const char *name, bool *out, srv_reply *r) {
    json_t *v = json_object_get(o, name);
    if (!v || json_is_null(v)) return true;
    if (!json_is_boolean(v)) {
        bad_type(r, name, "a boolean");
        return false;
    }
    *out = json_is_true(v);
    return true;
}

static bool check_string(json_t *o, const char *name, srv_reply *r) {
    json_t *v = json_object_get(o, name);
    if (v && !json_is_null(v) && !json_is_string(v)) {
        bad_type(r, name, "a string");
        return false;
    }
    return true;
}

/* Parses the body as a JSON object, or fills a 400. */
static json_t *parse_body(const srv_http_req *q, srv_reply *r) {
    if (!q->body || q->body_len == 0) {
        srv_reply_error(r, 400, "invalid_request_error", NULL, "invalid_json", "The request body is empty; expected a JSON object.");
        return NULL;
    }
    json_error_t je;
    json_t *root = json_loadb(q->body, q->body_len, 0, &je);
    if (!root) {
        srv_reply_error(r, 400, "invalid_request_error", NULL, "invalid_json",
                        "Invalid JSON body: %s (line %d, column %d).", je.text, je.line, je.column);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        srv_reply_error(r, 400, "invalid_request_error", NULL, "invalid_json", "The request body must be a JSON object.");
        return NULL;
    }
    return root;
}

/* "model", when given, must name the served model (404 otherwise). */
static bool check_model(di_server *s, json_t *root, srv_reply *r) {
    json_t *m = json_object_get(root, "model");
    if (!m || json_is_null(m)) return true;
    if (!json_is_string(m)) {
        bad_type(r, "model", "a string");
        return false;
    }
    if (strcmp(json_string_value(m), s->model_name)) {
        srv_reply_error(r, 404, "invalid_request_error", "model", "model_not_found",
                        "The model '%.200s' does not exist. This server serves '%s'.",
                        json_string_value(m), s->model_name);
        return false;
    }
    return true;
}

/* ---- prompts ------------------------------------------------------------------ */

static bool tokenize_text(di_server *s, const char *text, bool add_special, int32_t **ids, size_t *n,
                          srv_reply *r) {
    di_error err;
    if (di_engine_tokenize(s->engine, text, add_special, true, ids, n, &err)) {
        srv_reply_error(r, 400, "invalid_request_error", NULL, NULL, "Cannot tokenize the prompt: %s", err.msg);
        return false;
    }
    return true;
}

/* An image_url part: a base64 data: URL becomes one image of g and the
 * model's placeholder in the text; a remote URL is refused (the server
 * never fetches from the network). */
static bool add_image(const json_t *url, const char *param, gen_req *g, srv_reply *r);

static bool image_part(di_server *s, json_t *part, const char *param, gen_req *g, srv_buf *b, srv_reply *r) {
    json_t *iu = json_object_get(part, "image_url");
    json_t *url = json_is_object(iu) ? json_object_get(iu, "url") : iu;
    const char *ph = di_engine_image_placeholder(s->engine);
    if (!ph) {
        srv_reply_error(r, 400, "invalid_request_error", param, "unsupported_content",
                        "This model takes no images (it has no vision tower).");
        return false;
    }
    if (!add_image(url, param, g, r)) return false;
    if (!srv_buf_append(b, ph, strlen(ph))) {
        srv_reply_error(r, 503, "server_error", NULL, NULL, "Out of memory.");
        return false;
    }
    return true;
}

/* One image of g from its URL: a base64 data: URL, decoded. */
static bool add_image(const json_t *url, const char *param, gen_req *g, srv_reply *r) {
    if (!json_is_string(url)) {
        bad_type(r, param, "an image_url part with {\"url\": \"data:image/...;base64,...\"}");
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

/* One message's content: a string, null (assistant turns), or an array of
 * {"type": "text", "text": ...} parts joined by newlines (vLLM does the
 * same) and {"type": "image_url", ...} parts (image_part). *owned is set
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
        bad_type(r, param, "a string or an array of content parts");
        return false;
    }
    srv_buf b = {0};
    size_t k;
    json_t *part;
    json_array_foreach(c, k, part) {
        json_t *type = json_object_get(part, "type"), *text = json_object_get(part, "text");
        if (!json_is_object(part) || !json_is_string(type)) {
            srv_buf_free(&b);
            bad_type(r, param, "an array of {\"type\": \"text\", \"text\": ...} parts");
            return false;
        }
        if (!strcmp(json_string_value(type), "image_url")) {
            if (k && !srv_buf_append(&b, "\n", 1)) {
                srv_buf_free(&b);
                srv_reply_error(r, 503, "server_error", NULL, NULL, "Out of memory.");
                return false;
            }
            if (!image_part(s, part, param, g, &b, r)) {
                srv_buf_free(&b);
                return false;
            }
            continue;
        }
        if (strcmp(json_string_value(type), "text") || !json_is_string(text)) {
            srv_buf_free(&b);
            srv_reply_error(r, 400, "invalid_request_error", param, "unsupported_content",
                            "Content parts of type '%.40s' are not supported by this model; only text.",
                            json_string_value(type));
            return false;
        }
        if ((k && !srv_buf_append(&b, "\n", 1)) ||
            !srv_buf_append(&b, json_string_value(text), json_string_length(text))) {
            srv_buf_free(&b);
            srv_reply_error(r, 503, "server_error", NULL, NULL, "Out of memory.");
            return false;
        }
    }
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

static bool chat_prompt(di_server *s, json_t *root, gen_req *g, srv_reply *r) {
    if (s->dsml) return dsml_chat_prompt(s, root, g, r);
    json_t *msgs = json_object_get(root, "messages");
    if (!msgs || !json_is_array(msgs)) {
        if (!msgs) srv_reply_error(r, 400, "invalid_request_error", "messages", "missing_required_parameter",
                                   "'messages' is required.");
        else bad_type(r, "messages", "an array");
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
            bad_type(r, param, "a string in an object");
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
    ok = tokenize_text(s, text, false, &g->prompts[0], &g->prompt_lens[0], r);
    free(text);
    return ok;
}

/* A token-id prompt: every id must be in the vocabulary. */
static bool token_prompt(di_server *s, json_t *arr, int32_t **ids, size_t *n, srv_reply *r) {
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
static bool completion_prompts(di_server *s, json_t *root, gen_req *g, srv_reply *r) {
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
        bad_type(r, "prompt", "a string, an array of strings or an array of token ids");
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
        if (json_is_string(e)) ok = tokenize_text(s, json_string_value(e), true, &g->prompts[i], &g->prompt_lens[i], r);
        else if (json_is_array(e)) ok = token_prompt(s, e, &g->prompts[i], &g->prompt_lens[i], r);
        else {
            bad_type(r, "prompt", "a string, an array of strings or an array of token ids");
            ok = false;
        }
        if (!ok) return false;
    }
    return true;
}

/* ---- sampling and output fields ------------------------------------------------ */

static bool parse_stop(json_t *root, gen_req *g, srv_reply *r) {
    json_t *v = json_object_get(root, "stop");
    if (!v || json_is_null(v)) return true;
    size_t n = json_is_string(v) ? 1 : json_is_array(v) ? json_array_size(v) : 0;
    if (!json_is_string(v) && !json_is_array(v)) {
        bad_type(r, "stop", "a string or an array of strings");
        return false;
    }
    if (n > MAX_STOPS) {
        srv_reply_error(r, 400, "invalid_request_error", "stop", "invalid_value", "At most %d stop strings.", MAX_STOPS);
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_is_string(v) ? v : json_array_get(v, i);
        if (!json_is_string(e)) {
            bad_type(r, "stop", "a string or an array of strings");
            return false;
        }
        size_t len = json_string_length(e);
        if (len == 0 || len > MAX_STOP_BYTES) {
            srv_reply_error(r, 400, "invalid_request_error", "stop", "invalid_value",
                            "Stop strings must be 1 to %d bytes.", MAX_STOP_BYTES);
            return false;
        }
        g->stops[g->n_stops++] = json_string_value(e);
    }
    return true;
}

static bool parse_logit_bias(di_server *s, json_t *root, gen_req *g, srv_reply *r) {
    json_t *v = json_object_get(root, "logit_bias");
    if (!v || json_is_null(v)) return true;
    if (!json_is_object(v)) {
        bad_type(r, "logit_bias", "an object mapping token ids to numbers");
        return false;
    }
    size_t n = json_object_size(v);
    if (n > MAX_LOGIT_BIAS) {
        srv_reply_error(r, 400, "invalid_request_error", "logit_bias", "invalid_value", "At most %d logit_bias entries.",
                        MAX_LOGIT_BIAS);
        return false;
    }
    if (n == 0) return true;
    g->bias = di_calloc(n, sizeof *g->bias);
    if (!g->bias) {
        srv_reply_error(r, 503, "server_error", NULL, NULL, "Out of memory.");
        return false;
    }
    const char *key;
    json_t *val;
    json_object_foreach(v, key, val) {
        char *end;
        long t = strtol(key, &end, 10);
        if (end == key || *end || t < 0 || t >= s->desc.n_vocab) {
            srv_reply_error(r, 400, "invalid_request_error", "logit_bias", "invalid_value",
                            "logit_bias key '%.40s' is not a token id in [0, %d).", key, s->desc.n_vocab);
            return false;
        }
        if (!json_is_number(val) || fabs(json_number_value(val)) > 100.0) {
            srv_reply_error(r, 400, "invalid_request_error", "logit_bias", "invalid_value",
                            "logit_bias values must be numbers in [-100, 100].");
            return false;
        }
        g->bias[g->n_bias++] = (di_logit_bias){(int32_t)t, (float)json_number_value(val)};
    }
    return true;
}

/* Known OpenAI features this server does not implement: refuse them.
 * Tools work for DeepSeek V4 / V4.1 chats (dsml_chat.c) and Llama 3.1
 * templates (llama_tools.c); other models' templates here define no
 * tool-call format, so tools are refused rather than silently dropped. */
static bool refuse_unsupported(di_server *s, json_t *root, req_kind kind, srv_reply *r) {
    bool echo = false;
    if (!get_bool(root, "echo", &echo, r)) return false;
    json_t *v;
    const char *what = NULL, *param = NULL;
    if (echo) what = "echo", param = "echo";
    else if ((v = json_object_get(root, "suffix")) && !json_is_null(v) &&
             !(json_is_string(v) && json_string_length(v) == 0))
        what = "suffix", param = "suffix";
    else if (!(kind == KIND_CHAT && (s->dsml || srv_llama_tools_model(s))) && (v = json_object_get(root, "tools")) &&
             !json_is_null(v) &&
             !(json_is_array(v) && json_array_size(v) == 0)) {
        srv_reply_error(r, 400, "invalid_request_error", "tools", "unsupported_parameter",
                        "'tools' is not supported for this model: its chat template defines no tool-call format "
                        "this server parses (tools work with DeepSeek V4 / V4.1 and Llama 3.1 / 3.2 / 3.3 "
                        "templates).");
        return false;
    }
    if (what) {
        srv_reply_error(r, 400, "invalid_request_error", param, "unsupported_parameter", "'%s' is not supported by this server.",
                        what);
        return false;
    }
    return true;
}

/* response_format: "text" (free), "json_object" (any JSON object) or
 * "json_schema" ({"json_schema": {"schema": {...}, "strict": bool}}).
 * Non-strict schemas compile leniently (what cannot be enforced is dropped
 * and reported in X-DeepInfer-Warning); strict ones must compile exactly. */
static bool parse_response_format(json_t *root, gen_req *g, srv_reply *r) {
    json_t *v = json_object_get(root, "response_format");
    if (!v || json_is_null(v)) return true;
    json_t *t = json_object_get(v, "type");
    if (!json_is_object(v) || !json_is_string(t)) {
        bad_type(r, "response_format", "an object with a string 'type'");
        return false;
    }
    const char *type = json_string_value(t);
    if (!strcmp(type, "text")) return true;
    if (!strcmp(type, "json_object")) {
        g->constraint.kind = DI_CONSTRAINT_JSON_OBJECT;
        return true;
    }
    if (strcmp(type, "json_schema")) {
        srv_reply_error(r, 400, "invalid_request_error", "response_format.type", "invalid_value",
                        "Unknown response_format type '%.40s' (text, json_object or json_schema).", type);
        return false;
    }
    json_t *js = json_object_get(v, "json_schema");
    json_t *schema = json_object_get(js, "schema");
    if (!json_is_object(js) || !json_is_object(schema)) {
        bad_type(r, "response_format.json_schema", "an object with a 'schema' object");
        return false;
    }
    bool strict = false;
    if (!get_bool(js, "strict", &strict, r)) return false;
    g->constraint_text = json_dumps(schema, JSON_COMPACT);
    if (!g->constraint_text) {
        srv_reply_error(r, 503, "server_error", NULL, NULL, "Out of memory.");
        return false;
    }
    g->constraint.kind = DI_CONSTRAINT_JSON_SCHEMA;
    g->constraint.text = g->constraint_text;
    g->constraint.lenient = !strict;
    return true;
}

static bool parse_gen(di_server *s, json_t *root, req_kind kind, gen_req *g, srv_reply *r) {
    g->kind = kind;
    g->sp = s->p.sampling;
    g->sp.logit_bias = NULL;
    g->sp.n_logit_bias = 0;
    g->n = 1;
    g->max_tokens = s->p.default_max_tokens;
    if (!check_model(s, root, r) || !refuse_unsupported(s, root, kind, r) || !check_string(root, "user", r))
        return false;
    double temp = g->sp.temperature, top_p = g->sp.top_p, min_p = g->sp.min_p;
    double pres = g->sp.presence_penalty, freq = g->sp.frequency_penalty, rep = g->sp.repetition_penalty;
    int64_t top_k = g->sp.top_k, n = 1, max_tokens = -1, max_completion = -1, seed = 0;
    json_t *seed_v = json_object_get(root, "seed");
    bool seed_given = seed_v && !json_is_null(seed_v);
    if (!get_number(root, "temperature", 0, 2, &temp, r) || !get_number(root, "top_p", 0, 1, &top_p, r) ||
        !get_number(root, "min_p", 0, 1, &min_p, r) || !get_number(root, "presence_penalty", -2, 2, &pres, r) ||
        !get_number(root, "frequency_penalty", -2, 2, &freq, r) ||
        !get_number(root, "repetition_penalty", 0.01, 10, &rep, r) ||
        !get_int(root, "top_k", -1, s->desc.n_vocab, &top_k, r) || !get_int(root, "n", 1, s->p.max_n, &n, r) ||
        !get_int(root, "max_tokens", 1, INT32_MAX, &max_tokens, r) ||
        !get_int(root, "max_completion_tokens", 1, INT32_MAX, &max_completion, r) ||
        !get_int(root, "seed", INT64_MIN, INT64_MAX, &seed, r) || !get_bool(root, "stream", &g->stream, r) ||
        !get_bool(root, "ignore_eos", &g->ignore_eos, r) || !parse_stop(root, g, r) ||
        !parse_logit_bias(s, root, g, r) || !parse_response_format(root, g, r))
        return false;
    json_t *best_of = json_object_get(root, "best_of");
    if (best_of && !json_is_null(best_of)) {
        int64_t b = n;
        if (!get_int(root, "best_of", 1, s->p.max_n, &b, r)) return false;
        if (b != n) {
            srv_reply_error(r, 400, "invalid_request_error", "best_of", "unsupported_parameter",
                            "best_of other than n is not supported.");
            return false;
        }
    }
    json_t *so = json_object_get(root, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so)) {
            bad_type(r, "stream_options", "an object");
            return false;
        }
        if (!g->stream) {
            srv_reply_error(r, 400, "invalid_request_error", "stream_options", "invalid_value",
                            "stream_options is only allowed when stream is true.");
            return false;
        }
        if (!get_bool(so, "include_usage", &g->include_usage, r)) return false;
    }
    if (kind == KIND_CHAT) {
        if (!get_bool(root, "logprobs", &g->logprobs, r)) return false;
        int64_t top = 0;
        if (!get_int(root, "top_logprobs", 0, SRV_MAX_TOP_LOGPROBS, &top, r)) return false;
        json_t *tl = json_object_get(root, "top_logprobs");
        if (tl && !json_is_null(tl) && !g->logprobs) {
            srv_reply_error(r, 400, "invalid_request_error", "top_logprobs", "invalid_value",
                            "top_logprobs requires logprobs to be true.");
            return false;
        }
        g->top_logprobs = (int32_t)top;
    } else {
        json_t *lp = json_object_get(root, "logprobs");
        int64_t k = -1;
        if (lp && json_is_boolean(lp)) {
            bad_type(r, "logprobs", "an integer");
            return false;
        }
        if (!get_int(root, "logprobs", 0, MAX_LOGPROBS_COMPLETIONS, &k, r)) return false;
        g->logprobs = k >= 0;
        g->top_logprobs = k > 0 ? (int32_t)k : 0;
    }
    g->sp.temperature = (float)temp;
    /* top_p = 0 asks for the single most likely token; the sampler wants
     * (0, 1], and the smallest positive mass keeps exactly that token. */
    g->sp.top_p = top_p > 0 ? (float)top_p : 1e-9f;
    g->sp.min_p = (float)min_p;
    g->sp.presence_penalty = (float)pres;
    g->sp.frequency_penalty = (float)freq;
    g->sp.repetition_penalty = (float)rep;
    g->sp.top_k = (int32_t)top_k;
    g->sp.logprobs = g->logprobs;
    g->sp.top_logprobs = g->top_logprobs;
    g->sp.logit_bias = g->bias;
    g->sp.n_logit_bias = g->n_bias;
    g->n = (int32_t)n;
    if (max_completion > 0) g->max_tokens = (int32_t)max_completion;
    else if (max_tokens > 0) g->max_tokens = (int32_t)max_tokens;
    g->seed_given = seed_given;
    g->seed = (uint64_t)seed;
    return kind == KIND_CHAT ? chat_prompt(s, root, g, r) : completion_prompts(s, root, g, r);
}

/* OpenAI's context_length_exceeded answer, with the counts. */
static bool check_context(di_server *s, const gen_req *g, srv_reply *r) {
    int32_t n_ctx = s->desc.n_ctx;
    const char *param = g->kind == KIND_CHAT ? "messages" : "prompt";
    const char *what = g->kind == KIND_CHAT ? "messages" : "prompt";
    for (size_t i = 0; i < g->n_prompts; i++) {
        int64_t np = (int64_t)g->prompt_lens[i];
        if (np == 0) {
            srv_reply_error(r, 400, "invalid_request_error", param, "invalid_value", "The prompt is empty.");
            return false;
        }
        if (np >= n_ctx) {
            srv_reply_error(r, 400, "invalid_request_error", param, "context_length_exceeded",
                            "This model's maximum context length is %d tokens. However, your %s resulted in "
                            "%lld tokens. Please reduce the length of the %s.",
                            n_ctx, what, (long long)np, what);
            return false;
        }
        if (g->max_tokens > 0 && np + g->max_tokens > n_ctx) {
            srv_reply_error(r, 400, "invalid_request_error", param, "context_length_exceeded",
                            "This model's maximum context length is %d tokens. However, you requested %lld "
                            "tokens (%lld in the %s, %d in the completion). Please reduce the length of the "
                            "%s or completion.",
                            n_ctx, (long long)(np + g->max_tokens), (long long)np, what, g->max_tokens, what);
            return false;
        }
    }
    return true;
}

/* ---- response shapes ----------------------------------------------------------- */

static json_t *logprob_value(float lp) {
    return json_real(isfinite(lp) ? (double)lp : LOGPROB_FLOOR);
}

/* The token's text (U+FFFD for partial characters) and, when bytes_out,
 * its exact bytes as an array of integers. */
static json_t *token_text(di_engine *e, int32_t tok, json_t **bytes_out) {
    char small[128];
    int64_t n = di_engine_token_piece(e, tok, small, sizeof small);
    char *buf = small;
    if (n > (int64_t)sizeof small) {
        buf = malloc((size_t)n);
        if (!buf) n = 0;
        else di_engine_token_piece(e, tok, buf, (size_t)n);
    }
    if (n < 0) n = 0;
    if (bytes_out) {
        *bytes_out = json_array();
        for (int64_t i = 0; i < n; i++) json_array_append_new(*bytes_out, json_integer((unsigned char)buf[i]));
    }
    json_t *s = srv_json_string(buf, (size_t)n);
    if (buf != small) free(buf);
    return s;
}

/* Chat: [{"token", "logprob", "bytes", "top_logprobs": [...]}, ...] */
static json_t *chat_logprobs_content(route_state *rs, const srv_tok *toks, size_t n) {
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) {
        json_t *bytes, *e = json_object();
        json_object_set_new(e, "token", token_text(rs->engine, toks[i].token, &bytes));
        json_object_set_new(e, "logprob", logprob_value(toks[i].logprob));
        json_object_set_new(e, "bytes", bytes);
        json_t *top = json_array();
        for (int32_t k = 0; k < toks[i].n_top && k < rs->top_logprobs; k++) {
            json_t *tb, *t = json_object();
            json_object_set_new(t, "token", token_text(rs->engine, toks[i].top[k].token, &tb));
            json_object_set_new(t, "logprob", logprob_value(toks[i].top[k].logprob));
            json_object_set_new(t, "bytes", tb);
            json_array_append_new(top, t);
        }
        json_object_set_new(e, "top_logprobs", top);
        json_array_append_new(arr, e);
    }
    return arr;
}

/* Completions: {"tokens", "token_logprobs", "top_logprobs", "text_offset"};
 * each top_logprobs entry holds the k best and the sampled token. */
static json_t *completion_logprobs(route_state *rs, const srv_tok *toks, size_t n, size_t *offset) {
    json_t *o = json_object(), *tokens = json_array(), *lps = json_array(), *tops = json_array(),
           *offs = json_array();
    for (size_t i = 0; i < n; i++) {
        json_t *t = token_text(rs->engine, toks[i].token, NULL);
        json_array_append_new(offs, json_integer((json_int_t)*offset));
        *offset += json_string_length(t);
        json_array_append_new(lps, logprob_value(toks[i].logprob));
        json_t *top = json_object();
        for (int32_t k = 0; k < toks[i].n_top && k < rs->top_logprobs; k++) {
            json_t *tt = token_text(rs->engine, toks[i].top[k].token, NULL);
            json_object_set_new(top, json_string_value(tt), logprob_value(toks[i].top[k].logprob));
            json_decref(tt);
        }
        json_object_set_new(top, json_string_value(t), logprob_value(toks[i].logprob));
        json_array_append_new(tops, top);
        json_array_append_new(tokens, t);
    }
    json_object_set_new(o, "tokens", tokens);
    json_object_set_new(o, "token_logprobs", lps);
    json_object_set_new(o, "top_logprobs", tops);
    json_object_set_new(o, "text_offset", offs);
    return o;
}

static const char *finish_name(di_finish f) {
    switch (f) {
    case DI_FINISH_REASON_STOP: return "stop";
    case DI_FINISH_REASON_LENGTH: return "length";
    case DI_FINISH_REASON_CANCEL: return "abort"; /* vLLM's name; only at shutdown */
    case DI_FINISH_REASON_ERROR: break; /* no OpenAI value: the answer is an error object */
    case DI_FINISH_REASON_NONE: break;
    }
    return NULL;
}

static json_t *usage_json(const route_state *rs) {
    json_t *u = json_pack("{s:I, s:I, s:I}", "prompt_tokens", (json_int_t)rs->prompt_tokens, "completion_tokens",
                          (json_int_t)rs->completion_tokens, "total_tokens",
                          (json_int_t)(rs->prompt_tokens + rs->completion_tokens));
    json_object_set_new(u, "prompt_tokens_details", json_pack("{s:I}", "cached_tokens", (json_int_t)rs->cached_tokens));
    return u;
}

/* Counts a finished choice into usage and remembers failures. */
static void account_final(route_state *rs, const srv_taken *t, size_t choice_index) {
    rs->completion_tokens += t->stats.n_generated;
    /* Usage counts each prompt once; its first choice's cache hits stand
     * for it (later choices hit the blocks the first one wrote). */
    if (choice_index % (size_t)rs->n == 0) rs->cached_tokens += t->stats.n_cached;
    /* images expand inside the engine: usage counts their positions */
    if (choice_index % (size_t)rs->n == 0 && rs->image_prompt_len >= 0 && t->stats.n_prompt > 0)
        rs->prompt_tokens += t->stats.n_prompt - rs->image_prompt_len;
    if (t->finish == DI_FINISH_REASON_ERROR && !rs->failed) {
        rs->failed = true;
        snprintf(rs->error, sizeof rs->error, "%s", t->error[0] ? t->error : "generation failed");
    }
    if (t->finish == DI_FINISH_REASON_CANCEL) rs->cancelled = true;
    rs->n_final++;
}

static json_t *chunk_base(const route_state *rs) {
    json_t *c = json_object();
    json_object_set_new(c, "id", json_string(rs->id));
    json_object_set_new(c, "object", json_string(rs->kind == KIND_CHAT ? "chat.completion.chunk" : "text_completion"));
    json_object_set_new(c, "created", json_integer(rs->created));
    json_object_set_new(c, "model", json_string(rs->model));
    json_object_set_new(c, "system_fingerprint", json_string("deepinfer-" DI_VERSION_STRING));
    json_object_set_new(c, "choices", json_array());
    if (rs->include_usage) json_object_set_new(c, "usage", json_null());
    return c;
}

static void sse_put(srv_buf *out, json_t *obj) {
    char *s = json_dumps(obj, JSON_COMPACT);
    json_decref(obj);
    if (!s) return;
    srv_buf_append(out, "data: ", 6);
    srv_buf_append(out, s, strlen(s));
    srv_buf_append(out, "\n\n", 2);
    free(s);
}

/* One streamed chunk for choice i: text (may be empty) and/or finish. */
static void sse_choice_chunk(route_state *rs, srv_buf *out, size_t i, const srv_taken *t, bool with_text,
                             const char *finish) {
    json_t *c = chunk_base(rs);
    json_t *ch = json_object();
    json_object_set_new(ch, "index", json_integer((json_int_t)i));
    json_t *lp = json_null();
    if (rs->logprobs && with_text && t->n_toks) {
        if (rs->kind == KIND_CHAT)
            lp = json_pack("{s:o, s:n}", "content", chat_logprobs_content(rs, t->toks, t->n_toks), "refusal");
        else
            lp = completion_logprobs(rs, t->toks, t->n_toks, &rs->text_offset[i]);
    }
    if (rs->kind == KIND_CHAT) {
        json_t *delta = json_object();
        if (with_text) json_object_set_new(delta, "content", srv_json_string(t->text, t->text_len));
        json_object_set_new(ch, "delta", delta);
    } else {
        json_object_set_new(ch, "text", with_text ? srv_json_string(t->text, t->text_len) : json_string(""));
    }
    json_object_set_new(ch, "logprobs", lp);
    json_object_set_new(ch, "finish_reason", finish ? json_string(finish) : json_null());
    json_array_append_new(json_object_get(c, "choices"), ch);
    sse_put(out, c);
}

/* One chat chunk for choice i with this delta (reference taken). */
static void sse_delta_chunk(route_state *rs, srv_buf *out, size_t i, json_t *delta, json_t *lp, const char *finish) {
    json_t *c = chunk_base(rs);
    json_t *ch = json_object();
    json_object_set_new(ch, "index", json_integer((json_int_t)i));
    json_object_set_new(ch, "delta", delta);
    json_object_set_new(ch, "logprobs", lp ? lp : json_null());
    json_object_set_new(ch, "finish_reason", finish ? json_string(finish) : json_null());
    json_array_append_new(json_object_get(c, "choices"), ch);
    sse_put(out, c);
}

/* The finish reason of a DeepSeek choice: a stop after tool calls is
 * "tool_calls" (the recipe's rule). */
static const char *dsml_finish(route_state *rs, size_t i, di_finish f) {
    if (f == DI_FINISH_REASON_STOP && srv_dsml_out_n_calls(rs->dsml[i])) return "tool_calls";
    return finish_name(f);
}

/* DeepSeek stream: the output parser's deltas (reasoning_content,
 * content, tool calls), one chunk each, in the recipe's delta shapes. */
static void sse_dsml_choice(route_state *rs, srv_buf *out, size_t i, const srv_taken *t) {
    srv_dsml_out *d = rs->dsml[i];
    bool final = t->finished && t->finish != DI_FINISH_REASON_ERROR;
    if (!srv_dsml_out_push(d, t->text, t->text_len, final)) return;
    json_t *deltas = srv_dsml_out_deltas(d);
    json_t *lp = NULL;
    if (rs->logprobs && t->n_toks)
        lp = json_pack("{s:o, s:n}", "content", chat_logprobs_content(rs, t->toks, t->n_toks), "refusal");
    size_t k;
    json_t *delta;
    json_array_foreach(deltas, k, delta) {
        sse_delta_chunk(rs, out, i, json_incref(delta), lp, NULL);
        lp = NULL;
    }
    json_decref(deltas);
    if (lp) sse_delta_chunk(rs, out, i, json_object(), lp, NULL);
}

static json_t *dsml_last_delta(route_state *rs, size_t i) {
    json_t *o = json_pack("{s:s}", "content", "");
    if (srv_dsml_out_thinking(rs->dsml[i])) json_object_set_new(o, "reasoning_content", json_null());
    return o;
}

/* Responses / Messages stream: events from the output parser's deltas. */
static bool sse_proto(srv_job *j, srv_buf *out) {
    route_state *rs = j->route;
    if (!rs->proto_begun) {
        srv_proto_begin(rs->ps, out, rs->prompt_tokens);
        rs->proto_begun = true;
    }
    srv_taken t;
    srv_job_take(j, 0, &t);
    bool final = t.finished && t.finish != DI_FINISH_REASON_ERROR;
    if (srv_dsml_out_push(rs->dsml[0], t.text, t.text_len, final)) {
        json_t *deltas = srv_dsml_out_deltas(rs->dsml[0]);
        srv_proto_deltas(rs->ps, out, deltas);
        json_decref(deltas);
    }
    if (t.finished) {
        account_final(rs, &t, 0);
        if (t.finish == DI_FINISH_REASON_ERROR) {
            json_t *e = rs->proto == SRV_PROTO_MESSAGES
                            ? json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "type", "api_error", "message", rs->error)
                            : json_pack("{s:s, s:s, s:s}", "type", "error", "code", "generation_failed", "message", rs->error);
            char *es = e ? json_dumps(e, JSON_COMPACT) : NULL;
            if (es) srv_buf_printf(out, "event: error\ndata: %s\n\n", es);
            free(es);
            json_decref(e);
        } else {
            srv_proto_end(rs->ps, out, dsml_finish(rs, 0, t.finish), rs->prompt_tokens, rs->completion_tokens,
                          rs->cached_tokens);
        }
    }
    srv_taken_free(&t);
    return rs->n_final == j->n_choices;
}

static bool sse_produce(srv_job *j, srv_buf *out) {
    route_state *rs = j->route;
    if (rs->proto) return sse_proto(j, out);
    for (size_t i = 0; i < j->n_choices; i++) {
        if (rs->kind == KIND_CHAT && !rs->sent_role[i]) {
            json_t *delta = json_pack("{s:s, s:s}", "role", "assistant", "content", "");
            if (rs->dsml && srv_dsml_out_thinking(rs->dsml[i])) {
                json_object_set_new(delta, "content", json_null());
                json_object_set_new(delta, "reasoning_content", json_string(""));
            }
            sse_delta_chunk(rs, out, i, delta, NULL, NULL);
            rs->sent_role[i] = true;
        }
        srv_taken t;
        srv_job_take(j, i, &t);
        if (rs->dsml) sse_dsml_choice(rs, out, i, &t);
        else if (t.text_len || t.n_toks) sse_choice_chunk(rs, out, i, &t, true, NULL);
        if (t.finished) {
            account_final(rs, &t, i);
            if (t.finish == DI_FINISH_REASON_ERROR) {
                /* The status line is long gone: a failure after the stream
                 * began ends it with an OpenAI error object (as vLLM does),
                 * not with a finish_reason OpenAI does not have. */
                char msg[sizeof rs->error + 32];
                snprintf(msg, sizeof msg, "Generation failed: %s", rs->error);
                json_t *e = json_pack("{s:{s:s, s:s, s:n, s:s}}", "error", "message", msg, "type",
                                      "server_error", "param", "code", "generation_failed");
                if (e) sse_put(out, e);
            } else if (rs->dsml) {
                sse_delta_chunk(rs, out, i, dsml_last_delta(rs, i), NULL, dsml_finish(rs, i, t.finish));
            } else {
                sse_choice_chunk(rs, out, i, &t, false, finish_name(t.finish));
            }
        }
        srv_taken_free(&t);
    }
    if (rs->n_final < j->n_choices) return false;
    if (rs->include_usage) {
        json_t *c = chunk_base(rs);
        json_object_set_new(c, "usage", usage_json(rs));
        sse_put(out, c);
    }
    srv_buf_append(out, "data: [DONE]\n\n", 14);
    return true;
}

/* Responses / Messages: the whole answer of the one choice. */
static void build_proto_response(srv_job *j, srv_reply *r) {
    route_state *rs = j->route;
    srv_taken t;
    srv_job_take(j, 0, &t);
    if (t.finished) account_final(rs, &t, 0);
    srv_dsml_out_push(rs->dsml[0], t.text, t.text_len, true);
    json_t *msg = srv_dsml_out_message(rs->dsml[0]);
    const char *fin = dsml_finish(rs, 0, t.finish);
    srv_taken_free(&t);
    if (rs->failed || rs->cancelled || !fin) {
        json_decref(msg);
        if (rs->cancelled) srv_reply_error(r, 503, "server_error", NULL, "shutting_down", "The server is shutting down.");
        else srv_reply_error(r, 500, "server_error", NULL, NULL, "Generation failed: %s", rs->error);
        return;
    }
    r->status = 200;
    r->json = srv_proto_answer(rs->proto, rs->id, rs->model, rs->created, msg, fin, rs->prompt_tokens,
                               rs->completion_tokens, rs->cached_tokens);
    json_decref(msg);
}

/* The whole answer, once every choice is done. */
static void build_response(srv_job *j, srv_reply *r) {
    route_state *rs = j->route;
    if (rs->proto) {
        build_proto_response(j, r);
        return;
    }
    json_t *choices = json_array();
    for (size_t i = 0; i < j->n_choices; i++) {
        srv_taken t;
        srv_job_take(j, i, &t);
        if (t.finished) account_final(rs, &t, i);
        json_t *ch = json_object();
        json_object_set_new(ch, "index", json_integer((json_int_t)i));
        json_t *lp = json_null();
        const char *fin = finish_name(t.finish);
        if (rs->dsml) {
            srv_dsml_out_push(rs->dsml[i], t.text, t.text_len, true);
            json_object_set_new(ch, "message", srv_dsml_out_message(rs->dsml[i]));
            fin = dsml_finish(rs, i, t.finish);
            if (rs->logprobs)
                lp = json_pack("{s:o, s:n}", "content", chat_logprobs_content(rs, t.toks, t.n_toks), "refusal");
        } else if (rs->kind == KIND_CHAT) {
            json_object_set_new(ch, "message", json_pack("{s:s, s:o, s:n}", "role", "assistant", "content",
                                                         srv_json_string(t.text, t.text_len), "refusal"));
            if (rs->logprobs)
                lp = json_pack("{s:o, s:n}", "content", chat_logprobs_content(rs, t.toks, t.n_toks), "refusal");
        } else {
            json_object_set_new(ch, "text", srv_json_string(t.text, t.text_len));
            if (rs->logprobs) lp = completion_logprobs(rs, t.toks, t.n_toks, &rs->text_offset[i]);
        }
        json_object_set_new(ch, "logprobs", lp);
        json_object_set_new(ch, "finish_reason", fin ? json_string(fin) : json_null());
        json_array_append_new(choices, ch);
        srv_taken_free(&t);
    }
    if (rs->failed) {
        json_decref(choices);
        srv_reply_error(r, 500, "server_error", NULL, NULL, "Generation failed: %s", rs->error);
        return;
    }
    if (rs->cancelled) {
        json_decref(choices);
        srv_reply_error(r, 503, "server_error", NULL, "shutting_down", "The server is shutting down.");
        return;
    }
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(rs->id));
    json_object_set_new(o, "object", json_string(rs->kind == KIND_CHAT ? "chat.completion" : "text_completion"));
    json_object_set_new(o, "created", json_integer(rs->created));
    json_object_set_new(o, "model", json_string(rs->model));
    json_object_set_new(o, "system_fingerprint", json_string("deepinfer-" DI_VERSION_STRING));
    json_object_set_new(o, "choices", choices);
    json_object_set_new(o, "usage", usage_json(rs));
    r->status = 200;
    r->json = o;
}

/* ---- generation routes ------------------------------------------------------------ */

static void submit_error(srv_reply *r, di_status st, const di_error *err, req_kind kind) {
    const char *param = kind == KIND_CHAT ? "messages" : "prompt";
    if (!strncmp(err->msg, "image ", 6) && st != DI_ERR_NOMEM) { /* a bad image (engine: "image K: ...") */
        srv_reply_error(r, 400, "invalid_request_error", param, "invalid_image", "%s", err->msg);
        return;
    }
    switch (st) {
    case DI_ERR_RANGE:
        /* RANGE is the context check (ours ran first, so rarely) or a value
         * the engine refused that our checks let through. */
        if (strstr(err->msg, "context"))
            srv_reply_error(r, 400, "invalid_request_error", param, "context_length_exceeded", "%s", err->msg);
        else
            srv_reply_error(r, 400, "invalid_request_error", NULL, "invalid_value", "%s", err->msg);
        break;
    case DI_ERR_FULL:
        srv_reply_error(r, 400, "invalid_request_error", param, "context_length_exceeded",
                        "The request can never fit this server's KV cache: %s", err->msg);
        break;
    case DI_ERR_INVALID_ARG:
        srv_reply_error(r, 400, "invalid_request_error", NULL, NULL, "%s", err->msg);
        break;
    case DI_ERR_FORMAT:
    case DI_ERR_UNSUPPORTED:
        /* Only a response_format schema the grammar compiler refused gets
         * here: our own checks ran on everything else. */
        srv_reply_error(r, 400, "invalid_request_error", "response_format", "invalid_schema", "%s", err->msg);
        break;
    case DI_ERR_NOMEM:
        srv_reply_error(r, 503, "server_error", NULL, NULL, "Out of memory: %s", err->msg);
        break;
    default:
        srv_reply_error(r, 500, "server_error", NULL, NULL, "%s", err->msg);
        break;
    }
}

static route_state *route_state_new(di_server *s, const gen_req *g, size_t n_choices) {
    route_state *rs = calloc(1, sizeof *rs);
    if (!rs) return NULL;
    rs->n_choices = n_choices;
    rs->sent_role = di_calloc(n_choices, sizeof *rs->sent_role);
    rs->text_offset = di_calloc(n_choices, sizeof *rs->text_offset);
    if (!rs->sent_role || !rs->text_offset) {
        route_state_free(rs);
        return NULL;
    }
    if (g->dsml) {
        rs->dsml = di_calloc(n_choices, sizeof *rs->dsml);
        for (size_t i = 0; rs->dsml && i < n_choices; i++)
            if (!(rs->dsml[i] = srv_dsml_out_new(s, &g->dsml_opts))) {
                route_state_free(rs);
                return NULL;
            }
        if (!rs->dsml) {
            route_state_free(rs);
            return NULL;
        }
    }
    rs->kind = g->kind;
    char rid[32];
    srv_request_id(s, rid);
    snprintf(rs->id, sizeof rs->id, "%s-%s", g->kind == KIND_CHAT ? "chatcmpl" : "cmpl", rid);
    rs->created = (int64_t)time(NULL);
    rs->proto = g->proto;
    if (g->proto) {
        snprintf(rs->id, sizeof rs->id, "%s_%s", g->proto == SRV_PROTO_RESPONSES ? "resp" : "msg", rid);
        if (!(rs->ps = srv_proto_stream_new(g->proto, rs->id, s->model_name, rs->created))) {
            route_state_free(rs);
            return NULL;
        }
    }
    rs->model = s->model_name;
    rs->engine = s->engine;
    rs->include_usage = g->include_usage;
    rs->logprobs = g->logprobs;
    rs->top_logprobs = g->top_logprobs;
    rs->n = g->n;
    for (size_t i = 0; i < g->n_prompts; i++) rs->prompt_tokens += (int64_t)g->prompt_lens[i];
    rs->image_prompt_len = g->n_images && g->n_prompts == 1 ? (int64_t)g->prompt_lens[0] : -1;
    return rs;
}

/* Test mode: the text that picks a scripted output (the last message's
 * string content, or a string prompt). */
static const char *script_hint(json_t *root) {
    json_t *msgs = json_object_get(root, "messages");
    json_t *last = json_array_get(msgs, json_array_size(msgs) ? json_array_size(msgs) - 1 : 0);
    const char *h = json_string_value(json_object_get(last, "content"));
    return h ? h : json_string_value(json_object_get(root, "prompt"));
}

static void generate(di_server *s, const srv_http_req *q, srv_reply *r, req_kind kind, srv_proto_kind proto) {
    json_t *root = parse_body(q, r);
    if (!root) return;
    gen_req g;
    memset(&g, 0, sizeof g);
    srv_job *j = NULL;
    if (proto) {
        /* Responses / Messages: the same path as a chat, from the body
         * converted to the Chat Completions shape */
        json_t *chat = NULL;
        if (!s->dsml)
            srv_reply_error(r, 400, "invalid_request_error", NULL, "unsupported_model",
                            "%s is served for DeepSeek V4 / V4.1 checkpoints only; use /v1/chat/completions.",
                            proto == SRV_PROTO_RESPONSES ? "/v1/responses" : "/v1/messages");
        else if (proto == SRV_PROTO_RESPONSES) chat = srv_responses_to_chat(root, r);
        else chat = srv_messages_to_chat(root, (di_dsml_version)s->dsml_version, r);
        json_decref(root);
        if (!chat) return;
        root = chat;
        g.proto = proto;
    }
    if (!parse_gen(s, root, kind, &g, r) || !check_context(s, &g, r)) goto out;
    size_t n_choices = g.n_prompts * (size_t)g.n;
    if (n_choices > (size_t)s->p.max_n) {
        srv_reply_error(r, 400, "invalid_request_error", "n", "invalid_value",
                        "%zu prompts x n = %d asks for %zu choices; this server allows %d.", g.n_prompts, g.n,
                        n_choices, s->p.max_n);
        goto out;
    }
    if (n_choices > (size_t)s->p.max_queue) {
        /* It could never be admitted: a 503 would invite endless retries. */
        srv_reply_error(r, 400, "invalid_request_error", "n", "invalid_value",
                        "%zu choices exceed this server's queue of %d.", n_choices, s->p.max_queue);
        goto out;
    }
    if (g.constraint.kind != DI_CONSTRAINT_NONE) {
        /* One policy with the CLI (OpenAI's): a strict schema refuses what
         * the grammar cannot enforce (400 from the compile), a non-strict
         * one drops it, and the response and the log say what. */
        char notes[sizeof r->warning - 64];
        di_error err;
        di_status st = di_engine_check_constraint(s->engine, &g.constraint, notes, sizeof notes, &err);
        if (st) {
            submit_error(r, st, &err, kind);
            goto out;
        }
        if (notes[0]) {
            const char *what = g.constraint.kind == DI_CONSTRAINT_TOOL_CALLS ? "tool parameters" : "response_format";
            fprintf(stderr, "deepinfer serve: %s: not enforced (non-strict schema): %s\n", what, notes);
            for (char *p = notes; *p; p++)
                if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f) *p = '?'; /* a header value */
            snprintf(r->warning, sizeof r->warning, "%s not enforced: %s", what, notes);
        }
    }
    srv_admit_result ar = srv_job_create(s, n_choices, q->fd, &j);
    if (ar == SRV_ADMIT_STOPPING) {
        srv_reply_error(r, 503, "server_error", NULL, "shutting_down", "The server is shutting down.");
        goto out;
    }
    if (ar != SRV_ADMIT_OK) {
        srv_reply_error(r, 503, "server_error", NULL, "queue_full",
                        "The server is at capacity (%d requests queued or running); retry later.", s->p.max_queue);
        goto out;
    }
    route_state *rs = route_state_new(s, &g, n_choices);
    if (!rs) {
        srv_reply_error(r, 503, "server_error", NULL, NULL, "Out of memory.");
        goto out;
    }
    j->route = rs;
    j->route_free = route_state_free;
    uint64_t seed = g.seed_given ? g.seed : s->p.has_default_seed ? s->p.default_seed : srv_random_seed(s);
    for (size_t i = 0; i < n_choices; i++) {
        size_t p = i / (size_t)g.n;
        di_request dr;
        memset(&dr, 0, sizeof dr);
        dr.tokens = g.prompts[p];
        dr.n_tokens = g.prompt_lens[p];
        dr.max_tokens = g.max_tokens;
        dr.sampling = g.sp;
        dr.sampling.seed = seed + i; /* see the header comment */
        dr.stop = g.stops;
        dr.n_stop = g.n_stops;
        dr.ignore_eos = g.ignore_eos;
        dr.constraint = g.constraint;
        dr.images = g.images;
        dr.n_images = g.n_images;
        /* DeepSeek: </think> and the DSML markers are special tokens the
         * output parser reads */
        dr.render_special = g.dsml && s->dsml;
        const int32_t *forced;
        size_t n_forced;
        if (srv_next_script(s, script_hint(root), &forced, &n_forced)) {
            dr.forced_tokens = forced;
            dr.n_forced_tokens = n_forced;
        }
        di_error err;
        di_status st = srv_job_submit(j, i, &dr, &err);
        if (st) {
            submit_error(r, st, &err, kind);
            srv_job_cancel(j);
            goto out;
        }
    }
    if (g.stream) {
        srv_job_poke(j);
        r->status = 200;
        r->stream = j;
        r->sse = sse_produce;
        j = NULL; /* the reply owns the reference now */
        goto out;
    }
    while (!srv_job_all_done(j)) {
        if (!srv_job_wait(j, false)) {
            srv_job_cancel(j);
            r->hang_up = true;
            goto out;
        }
    }
    build_response(j, r);
out:
    srv_job_release(j);
    gen_req_free(&g);
    json_decref(root);
}

void srv_route_chat(di_server *s, const srv_http_req *q, srv_reply *r) {
    generate(s, q, r, KIND_CHAT, SRV_PROTO_NONE);
}

void srv_route_responses(di_server *s, const srv_http_req *q, srv_reply *r) {
    generate(s, q, r, KIND_CHAT, SRV_PROTO_RESPONSES);
}

void srv_route_messages(di_server *s, const srv_http_req *q, srv_reply *r) {
    generate(s, q, r, KIND_CHAT, SRV_PROTO_MESSAGES);
}

void srv_route_completions(di_server *s, const srv_http_req *q, srv_reply *r) {
    generate(s, q, r, KIND_COMPLETION, SRV_PROTO_NONE);
}

/* ---- models, tokenize, detokenize ------------------------------------------------------ */

static json_t *model_object(di_server *s) {
    return json_pack("{s:s, s:s, s:I, s:s, s:i}", "id", s->model_name, "object", "model", "created",
                     (json_int_t)s->t_start, "owned_by", "deepinfer", "max_model_len", s->desc.n_ctx);
}

void srv_route_models(di_server *s, const srv_http_req *q, srv_reply *r) {
    static const char prefix[] = "/v1/models/";
    if (!strncmp(q->path, prefix, sizeof prefix - 1)) {
        const char *id = q->path + sizeof prefix - 1;
        if (strcmp(id, s->model_name)) {
            srv_reply_error(r, 404, "invalid_request_error", "model", "model_not_found",
                            "The model '%.200s' does not exist.", id);
            return;
        }
        r->status = 200;
        r->json = model_object(s);
        return;
    }
    r->status = 200;
    r->json = json_pack("{s:s, s:[o]}", "object", "list", "data", model_object(s));
}

void srv_route_tokenize(di_server *s, const srv_http_req *q, srv_reply *r) {
    json_t *root = parse_body(q, r);
    if (!root) return;
    gen_req g;
    memset(&g, 0, sizeof g);
    bool add_special = true;
    json_t *prompt = json_object_get(root, "prompt");
    if (!check_model(s, root, r) || !get_bool(root, "add_special_tokens", &add_special, r)) goto out;
    if (json_object_get(root, "messages")) {
        if (!chat_prompt(s, root, &g, r)) goto out;
    } else if (json_is_string(prompt)) {
        g.prompts = calloc(1, sizeof *g.prompts);
        g.prompt_lens = calloc(1, sizeof *g.prompt_lens);
        if (!g.prompts || !g.prompt_lens) {
            srv_reply_error(r, 503, "server_error", NULL, NULL, "Out of memory.");
            goto out;
        }
        g.n_prompts = 1;
        if (!tokenize_text(s, json_string_value(prompt), add_special, &g.prompts[0], &g.prompt_lens[0], r)) goto out;
    } else {
        if (!prompt) srv_reply_error(r, 400, "invalid_request_error", "prompt", "missing_required_parameter",
                                     "Give 'prompt' (a string) or 'messages'.");
        else bad_type(r, "prompt", "a string");
        goto out;
    }
    json_t *ids = json_array();
    for (size_t i = 0; i < g.prompt_lens[0]; i++) json_array_append_new(ids, json_integer(g.prompts[0][i]));
    r->status = 200;
    r->json = json_pack("{s:o, s:I, s:i}", "tokens", ids, "count", (json_int_t)g.prompt_lens[0], "max_model_len",
                        s->desc.n_ctx);
out:
    gen_req_free(&g);
    json_decref(root);
}

bool srv_request_prompt(di_server *s, const srv_http_req *q, int32_t **ids, size_t *n, srv_reply *r) {
    *ids = NULL;
    *n = 0;
    json_t *root = parse_body(q, r);
    if (!root) return false;
    gen_req g;
    memset(&g, 0, sizeof g);
    bool ok = check_model(s, root, r) &&
              (json_object_get(root, "messages") ? chat_prompt(s, root, &g, r) : completion_prompts(s, root, &g, r));
    if (ok && g.n_prompts != 1) {
        srv_reply_error(r, 400, "invalid_request_error", "prompt", "invalid_value", "Give exactly one prompt.");
        ok = false;
    }
    if (ok) {
        *ids = g.prompts[0];
        *n = g.prompt_lens[0];
        g.prompts[0] = NULL;
    }
    gen_req_free(&g);
    json_decref(root);
    return ok;
}

void srv_route_detokenize(di_server *s, const srv_http_req *q, srv_reply *r) {
    json_t *root = parse_body(q, r);
    if (!root) return;
    json_t *toks = json_object_get(root, "tokens");
    int32_t *ids = NULL;
    size_t n = 0;
    char *text = NULL;
    if (!check_model(s, root, r)) goto out;
    if (!json_is_array(toks)) {
        if (!toks) srv_reply_error(r, 400, "invalid_request_error", "tokens", "missing_required_parameter", "'tokens' is required.");
        else bad_type(r, "tokens", "an array of token ids");
        goto out;
    }
    if (!token_prompt(s, toks, &ids, &n, r)) {
        /* token_prompt names "prompt"; here the field is "tokens". */
        json_t *e = json_object_get(r->json, "error");
        if (e && json_object_get(e, "param") && !json_is_null(json_object_get(e, "param")))
            json_object_set_new(e, "param", json_string("tokens"));
        goto out;
    }
    di_error err;
    if (di_engine_detokenize(s->engine, ids, n, &text, &err)) {
        srv_reply_error(r, 400, "invalid_request_error", "tokens", NULL, "Cannot detokenize: %s", err.msg);
        goto out;
    }
    r->status = 200;
    r->json = json_pack("{s:o}", "prompt", srv_json_string(text, strlen(text)));
out:
    free(text);
    free(ids);
    json_decref(root);
}
