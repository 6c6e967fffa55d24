/* The OpenAI routes' answers (openai.h): a job's output -> OpenAI's
 * chat.completion / text_completion objects and their streamed chunks
 * (logprobs, usage, finish reasons), DeepSeek / Llama-tools / <think>
 * replies through the output parser's deltas (dsml_chat.h), and the
 * Responses / Messages shapes through routes_protocols.c. */
#include "server/openai.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What JSON cannot say: a logprob of -inf is reported as OpenAI does. */
#define LOGPROB_FLOOR (-9999.0)

void oai_route_state_free(void *p) {
    route_state *rs = p;
    if (!rs) return;
    for (size_t i = 0; rs->dsml && i < rs->n_choices; i++) srv_dsml_out_free(rs->dsml[i]);
    free(rs->dsml);
    srv_proto_stream_free(rs->ps);
    free(rs->sent_role);
    free(rs->text_offset);
    free(rs);
}

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

/* The fields an answer and a chunk open with, in OpenAI's order. */
static json_t *answer_head(const route_state *rs, const char *object) {
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(rs->id));
    json_object_set_new(o, "object", json_string(object));
    json_object_set_new(o, "created", json_integer(rs->created));
    json_object_set_new(o, "model", json_string(rs->model));
    json_object_set_new(o, "system_fingerprint", json_string("deepinfer-" DI_VERSION_STRING));
    return o;
}

static json_t *chunk_base(const route_state *rs) {
    json_t *c = answer_head(rs, rs->kind == KIND_CHAT ? "chat.completion.chunk" : "text_completion");
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

bool oai_sse_produce(srv_job *j, srv_buf *out) {
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

void oai_build_response(srv_job *j, srv_reply *r) {
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
    json_t *o = answer_head(rs, rs->kind == KIND_CHAT ? "chat.completion" : "text_completion");
    json_object_set_new(o, "choices", choices);
    json_object_set_new(o, "usage", usage_json(rs));
    r->status = 200;
    r->json = o;
}
