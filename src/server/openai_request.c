/* The OpenAI routes' request fields (openai.h): the body and field
 * readers (absent or null keeps the default; a wrong type or range is a
 * 400 naming the field), sampling and output fields, the features refused
 * by name, response_format -> an engine constraint, and the context check.
 * Prompts are openai_prompt.c's. */
#include "server/openai.h"

#include "base/alloc.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Limits on hostile bodies, beyond the byte limit. */
#define MAX_STOP_BYTES 256
#define MAX_LOGIT_BIAS 1024 /* OpenAI allows 300 */
#define MAX_LOGPROBS_COMPLETIONS 20

void oai_bad_type(srv_reply *r, const char *name, const char *want) {
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
        oai_bad_type(r, name, "a number");
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
        oai_bad_type(r, name, "an integer");
        return false;
    }
    if (x < lo || x > hi) {
        bad_range(r, name, (double)lo, (double)hi, (double)x);
        return false;
    }
    *out = x;
    return true;
}

bool oai_get_bool(json_t *o, const char *name, bool *out, srv_reply *r) {
    json_t *v = json_object_get(o, name);
    if (!v || json_is_null(v)) return true;
    if (!json_is_boolean(v)) {
        oai_bad_type(r, name, "a boolean");
        return false;
    }
    *out = json_is_true(v);
    return true;
}

static bool check_string(json_t *o, const char *name, srv_reply *r) {
    json_t *v = json_object_get(o, name);
    if (v && !json_is_null(v) && !json_is_string(v)) {
        oai_bad_type(r, name, "a string");
        return false;
    }
    return true;
}

/* Parses the body as a JSON object, or fills a 400. */
json_t *oai_parse_body(const srv_http_req *q, srv_reply *r) {
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

bool oai_check_model(di_server *s, json_t *root, srv_reply *r) {
    json_t *m = json_object_get(root, "model");
    if (!m || json_is_null(m)) return true;
    if (!json_is_string(m)) {
        oai_bad_type(r, "model", "a string");
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

/* ---- sampling and output fields ------------------------------------------------ */

static bool parse_stop(json_t *root, gen_req *g, srv_reply *r) {
    json_t *v = json_object_get(root, "stop");
    if (!v || json_is_null(v)) return true;
    size_t n = json_is_string(v) ? 1 : json_is_array(v) ? json_array_size(v) : 0;
    if (!json_is_string(v) && !json_is_array(v)) {
        oai_bad_type(r, "stop", "a string or an array of strings");
        return false;
    }
    if (n > MAX_STOPS) {
        srv_reply_error(r, 400, "invalid_request_error", "stop", "invalid_value", "At most %d stop strings.", MAX_STOPS);
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_is_string(v) ? v : json_array_get(v, i);
        if (!json_is_string(e)) {
            oai_bad_type(r, "stop", "a string or an array of strings");
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
        oai_bad_type(r, "logit_bias", "an object mapping token ids to numbers");
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
    if (!oai_get_bool(root, "echo", &echo, r)) return false;
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
        oai_bad_type(r, "response_format", "an object with a string 'type'");
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
        oai_bad_type(r, "response_format.json_schema", "an object with a 'schema' object");
        return false;
    }
    bool strict = false;
    if (!oai_get_bool(js, "strict", &strict, r)) return false;
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

bool oai_parse_gen(di_server *s, json_t *root, req_kind kind, gen_req *g, srv_reply *r) {
    g->kind = kind;
    g->sp = s->p.sampling;
    g->sp.logit_bias = NULL;
    g->sp.n_logit_bias = 0;
    g->n = 1;
    g->max_tokens = s->p.default_max_tokens;
    if (!oai_check_model(s, root, r) || !refuse_unsupported(s, root, kind, r) || !check_string(root, "user", r))
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
        !get_int(root, "seed", INT64_MIN, INT64_MAX, &seed, r) || !oai_get_bool(root, "stream", &g->stream, r) ||
        !oai_get_bool(root, "ignore_eos", &g->ignore_eos, r) || !parse_stop(root, g, r) ||
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
            oai_bad_type(r, "stream_options", "an object");
            return false;
        }
        if (!g->stream) {
            srv_reply_error(r, 400, "invalid_request_error", "stream_options", "invalid_value",
                            "stream_options is only allowed when stream is true.");
            return false;
        }
        if (!oai_get_bool(so, "include_usage", &g->include_usage, r)) return false;
    }
    if (kind == KIND_CHAT) {
        if (!oai_get_bool(root, "logprobs", &g->logprobs, r)) return false;
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
            oai_bad_type(r, "logprobs", "an integer");
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
    return kind == KIND_CHAT ? oai_chat_prompt(s, root, g, r) : oai_completion_prompts(s, root, g, r);
}

bool oai_check_context(di_server *s, const gen_req *g, srv_reply *r) {
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

void oai_gen_req_free(gen_req *g) {
    for (size_t i = 0; i < g->n_prompts; i++) free(g->prompts[i]);
    free(g->prompts);
    free(g->prompt_lens);
    free(g->bias);
    free(g->constraint_text);
    for (size_t i = 0; i < g->n_images; i++) free((void *)g->images[i].data);
}
