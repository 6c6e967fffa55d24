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
 * request draws a fresh one (OpenAI's behaviour).
 *
 * The routes are here; the request's fields, its prompts and the answers'
 * shapes are openai_request.c, openai_prompt.c and openai_response.c
 * (openai.h). */
#include "server/openai.h"

#include "base/alloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
        oai_route_state_free(rs);
        return NULL;
    }
    if (g->dsml) {
        rs->dsml = di_calloc(n_choices, sizeof *rs->dsml);
        for (size_t i = 0; rs->dsml && i < n_choices; i++)
            if (!(rs->dsml[i] = srv_dsml_out_new(s, &g->dsml_opts))) {
                oai_route_state_free(rs);
                return NULL;
            }
        if (!rs->dsml) {
            oai_route_state_free(rs);
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
            oai_route_state_free(rs);
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
    json_t *root = oai_parse_body(q, r);
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
    if (!oai_parse_gen(s, root, kind, &g, r) || !oai_check_context(s, &g, r)) goto out;
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
    j->route_free = oai_route_state_free;
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
        r->sse = oai_sse_produce;
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
    oai_build_response(j, r);
out:
    srv_job_release(j);
    oai_gen_req_free(&g);
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
    json_t *root = oai_parse_body(q, r);
    if (!root) return;
    gen_req g;
    memset(&g, 0, sizeof g);
    bool add_special = true;
    json_t *prompt = json_object_get(root, "prompt");
    if (!oai_check_model(s, root, r) || !oai_get_bool(root, "add_special_tokens", &add_special, r)) goto out;
    if (json_object_get(root, "messages")) {
        if (!oai_chat_prompt(s, root, &g, r)) goto out;
    } else if (json_is_string(prompt)) {
        g.prompts = calloc(1, sizeof *g.prompts);
        g.prompt_lens = calloc(1, sizeof *g.prompt_lens);
        if (!g.prompts || !g.prompt_lens) {
            srv_reply_error(r, 503, "server_error", NULL, NULL, "Out of memory.");
            goto out;
        }
        g.n_prompts = 1;
        if (!oai_tokenize_text(s, json_string_value(prompt), add_special, &g.prompts[0], &g.prompt_lens[0], r)) goto out;
    } else {
        if (!prompt) srv_reply_error(r, 400, "invalid_request_error", "prompt", "missing_required_parameter",
                                     "Give 'prompt' (a string) or 'messages'.");
        else oai_bad_type(r, "prompt", "a string");
        goto out;
    }
    json_t *ids = json_array();
    for (size_t i = 0; i < g.prompt_lens[0]; i++) json_array_append_new(ids, json_integer(g.prompts[0][i]));
    r->status = 200;
    r->json = json_pack("{s:o, s:I, s:i}", "tokens", ids, "count", (json_int_t)g.prompt_lens[0], "max_model_len",
                        s->desc.n_ctx);
out:
    oai_gen_req_free(&g);
    json_decref(root);
}

bool srv_request_prompt(di_server *s, const srv_http_req *q, int32_t **ids, size_t *n, srv_reply *r) {
    *ids = NULL;
    *n = 0;
    json_t *root = oai_parse_body(q, r);
    if (!root) return false;
    gen_req g;
    memset(&g, 0, sizeof g);
    bool ok = oai_check_model(s, root, r) &&
              (json_object_get(root, "messages") ? oai_chat_prompt(s, root, &g, r) : oai_completion_prompts(s, root, &g, r));
    if (ok && g.n_prompts != 1) {
        srv_reply_error(r, 400, "invalid_request_error", "prompt", "invalid_value", "Give exactly one prompt.");
        ok = false;
    }
    if (ok) {
        *ids = g.prompts[0];
        *n = g.prompt_lens[0];
        g.prompts[0] = NULL;
    }
    oai_gen_req_free(&g);
    json_decref(root);
    return ok;
}

void srv_route_detokenize(di_server *s, const srv_http_req *q, srv_reply *r) {
    json_t *root = oai_parse_body(q, r);
    if (!root) return;
    json_t *toks = json_object_get(root, "tokens");
    int32_t *ids = NULL;
    size_t n = 0;
    char *text = NULL;
    if (!oai_check_model(s, root, r)) goto out;
    if (!json_is_array(toks)) {
        if (!toks) srv_reply_error(r, 400, "invalid_request_error", "tokens", "missing_required_parameter", "'tokens' is required.");
        else oai_bad_type(r, "tokens", "an array of token ids");
        goto out;
    }
    if (!oai_token_prompt(s, toks, &ids, &n, r)) {
        /* oai_token_prompt names "prompt"; here the field is "tokens". */
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
