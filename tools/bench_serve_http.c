/* The load generator's network side: libcurl's multi interface drives every
 * request of a point from one thread (no thread per connection), streams
 * each answer through the incremental SSE parser and times it.
 *
 * Arrivals are either open-loop (Poisson at --rate, independent of how fast
 * the server answers) or closed-loop (--concurrency users, each sending its
 * conversation's next turn when the previous answer is complete). Every
 * failure of the server is one counted sample with a reason: refused
 * connection, HTTP error, an answer that is not an SSE stream, malformed
 * events, a stream that ends before [DONE], a stall (no byte for --stall),
 * the --timeout of the whole answer. */
#include "bench_serve.h"

#include "base/alloc.h"
#include "base/status.h"

#include <curl/curl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* One SSE event may not exceed this (a chat chunk is ~300 bytes). */
#define MAX_EVENT_BYTES (1 << 20)
/* Bytes of a non-SSE answer kept for the error reason. */
#define SNIPPET_BYTES 80
/* Poll granularity: bounds how late a stall or an arrival is noticed. */
#define POLL_MS 20

static volatile sig_atomic_t g_interrupted;
static void on_sigint(int sig) {
    (void)sig;
    g_interrupted = 1;
}

void bs_catch_sigint(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    g_interrupted = 0;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct xfer {
    CURL *h;
    struct curl_slist *hdrs;
    char *body;
    bool busy, has_conv, checked, got_done, stalled;
    di_lg_conv conv;
    di_sse_parser sse;
    double t0, t_first, t_last_byte, t_last_tok;
    di_lg_sample s;
    char reason[160];         /* set when we abort the transfer ourselves */
    char *text;               /* (text_len) the reply so far */
    size_t text_len, text_cap;
    double *itl;              /* (n_itl) gaps between content events */
    size_t n_itl, cap_itl;
    char snippet[SNIPPET_BYTES + 1];
    size_t snippet_len;
    char curl_err[CURL_ERROR_SIZE];
} xfer;

typedef struct run_ctx {
    const bs_opts *o;
    bs_result *res;
    xfer *x;                  /* (n_x) */
    int64_t n_x;
    di_lg_conv *ready;        /* (n_ready) conversations waiting for their next turn (open loop) */
    size_t n_ready, cap_ready;
    int64_t next_conv;
    double t_start;
    const char *model;
    char chat_url[1024];
    bool oom;
} run_ctx;

static bool push_double(double **a, size_t *n, size_t *cap, double v) {
    if (*n == *cap) {
        size_t c = *cap ? 2 * *cap : 64;
        double *p = di_realloc_array(*a, c, sizeof *p);
        if (!p) return false;
        *a = p;
        *cap = c;
    }
    (*a)[(*n)++] = v;
    return true;
}

static int on_event(void *user, const char *data, size_t n) {
    xfer *x = user;
    if (n == 6 && !memcmp(data, "[DONE]", 6)) {
        x->got_done = true;
        return 0;
    }
    if (x->got_done) {
        snprintf(x->reason, sizeof x->reason, "malformed SSE: event after [DONE]");
        return 1;
    }
    json_error_t je;
    json_t *j = json_loadb(data, n, 0, &je);
    if (!j || !json_is_object(j)) {
        snprintf(x->reason, sizeof x->reason, "malformed SSE: event is not a JSON object");
        json_decref(j);
        return 1;
    }
    json_t *e = json_object_get(j, "error");
    if (e) {
        const char *m = json_string_value(json_object_get(e, "message"));
        snprintf(x->reason, sizeof x->reason, "error in stream: %.100s", m ? m : "(no message)");
        json_decref(j);
        return 1;
    }
    json_t *choices = json_object_get(j, "choices"), *usage = json_object_get(j, "usage");
    if (!json_is_array(choices) && !json_is_object(usage)) {
        snprintf(x->reason, sizeof x->reason, "malformed SSE: chunk without choices or usage");
        json_decref(j);
        return 1;
    }
    json_t *c0 = json_array_get(choices, 0);
    json_t *delta = json_object_get(c0, "delta");
    const char *content = json_string_value(json_object_get(delta, "content"));
    if (!content) content = json_string_value(json_object_get(c0, "text")); /* /v1/completions shape */
    if (content && *content) {
        double t = now_s();
        if (x->s.n_chunks == 0) x->t_first = t;
        else if (!push_double(&x->itl, &x->n_itl, &x->cap_itl, (t - x->t_last_tok) * 1e3)) goto oom;
        x->t_last_tok = t;
        x->s.n_chunks++;
        size_t cl = strlen(content);
        if (x->text_len + cl + 1 > x->text_cap) {
            size_t c = x->text_cap ? x->text_cap : 256;
            while (c < x->text_len + cl + 1) c *= 2;
            char *p = realloc(x->text, c);
            if (!p) goto oom;
            x->text = p;
            x->text_cap = c;
        }
        memcpy(x->text + x->text_len, content, cl + 1);
        x->text_len += cl;
    }
    if (json_is_object(usage)) {
        json_t *pt = json_object_get(usage, "prompt_tokens"), *ct = json_object_get(usage, "completion_tokens");
        json_t *cached = json_object_get(json_object_get(usage, "prompt_tokens_details"), "cached_tokens");
        if (json_is_integer(pt)) x->s.prompt_tokens = json_integer_value(pt);
        if (json_is_integer(ct)) x->s.output_tokens = json_integer_value(ct);
        if (json_is_integer(cached)) x->s.cached_tokens = json_integer_value(cached);
    }
    /* llama-server reports its prompt-cache reuse in "timings" */
    json_t *cache_n = json_object_get(json_object_get(j, "timings"), "cache_n");
    if (json_is_integer(cache_n) && x->s.cached_tokens < 0) x->s.cached_tokens = json_integer_value(cache_n);
    json_decref(j);
    return 0;
oom:
    snprintf(x->reason, sizeof x->reason, "client out of memory");
    json_decref(j);
    return 1;
}

static size_t on_write(char *ptr, size_t size, size_t nmemb, void *user) {
    xfer *x = user;
    size_t n = size * nmemb;
    x->t_last_byte = now_s();
    if (!x->checked) {
        x->checked = true;
        long code = 0;
        char *ct = NULL;
        curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &code);
        curl_easy_getinfo(x->h, CURLINFO_CONTENT_TYPE, &ct);
        if (code == 200 && (!ct || strncmp(ct, "text/event-stream", 17) != 0))
            snprintf(x->reason, sizeof x->reason, "not an SSE stream (Content-Type %.60s)", ct ? ct : "none");
        else if (code != 200)
            snprintf(x->reason, sizeof x->reason, "HTTP %ld", code);
    }
    if (x->reason[0]) { /* keep the start of the answer for the message, then stop */
        size_t k = n < SNIPPET_BYTES - x->snippet_len ? n : SNIPPET_BYTES - x->snippet_len;
        memcpy(x->snippet + x->snippet_len, ptr, k);
        x->snippet_len += k;
        x->snippet[x->snippet_len] = 0;
        return x->snippet_len < SNIPPET_BYTES ? n : 0;
    }
    di_error err;
    di_status st = di_sse_feed(&x->sse, ptr, n, on_event, x, &err);
    if (st == DI_ERR_FULL) snprintf(x->reason, sizeof x->reason, "malformed SSE: %.120s", err.msg);
    return st ? 0 : n;
}

/* Prepares and adds the next turn of x's conversation. false: out of memory. */
static bool launch(run_ctx *r, xfer *x) {
    const bs_opts *o = r->o;
    di_error err;
    json_t *body = NULL;
    if (di_lg_conv_next(&o->wl, &x->conv, &body, &err)) return false;
    json_object_set_new(body, "model", json_string(r->model));
    json_object_set_new(body, "stream", json_true());
    json_object_set_new(body, "stream_options", json_pack("{s:b}", "include_usage", 1));
    json_object_set_new(body, "temperature", json_real(o->temperature));
    json_object_set_new(body, "seed", json_integer((json_int_t)(o->wl.seed + (uint64_t)x->conv.index)));
    if (o->ignore_eos) json_object_set_new(body, "ignore_eos", json_true());
    free(x->body);
    x->body = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    if (!x->body) return false;

    di_sse_free(&x->sse);
    di_sse_init(&x->sse, MAX_EVENT_BYTES);
    memset(&x->s, 0, sizeof x->s);
    x->s.prompt_tokens = x->s.output_tokens = x->s.cached_tokens = -1;
    x->reason[0] = x->snippet[0] = x->curl_err[0] = 0;
    x->snippet_len = x->text_len = x->n_itl = 0;
    if (x->text) x->text[0] = 0;
    x->checked = x->got_done = x->stalled = false;
    x->t0 = x->t_last_byte = now_s();
    x->s.t_start_s = x->t0 - r->t_start;

    if (!x->h && !(x->h = curl_easy_init())) return false;
    curl_easy_reset(x->h);
    curl_easy_setopt(x->h, CURLOPT_URL, r->chat_url);
    curl_easy_setopt(x->h, CURLOPT_POSTFIELDS, x->body);
    curl_easy_setopt(x->h, CURLOPT_HTTPHEADER, x->hdrs);
    curl_easy_setopt(x->h, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(x->h, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(x->h, CURLOPT_PRIVATE, x);
    curl_easy_setopt(x->h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(x->h, CURLOPT_ERRORBUFFER, x->curl_err);
    curl_easy_setopt(x->h, CURLOPT_TIMEOUT_MS, (long)(o->timeout_s * 1e3));
    curl_easy_setopt(x->h, CURLOPT_CONNECTTIMEOUT_MS, (long)(fmin(o->timeout_s, 10.0) * 1e3));
    x->busy = true;
    return true;
}

/* Classifies a finished (or aborted) transfer into a sample. */
static void finish(run_ctx *r, xfer *x, CURLcode rc) {
    double t = now_s();
    di_lg_sample *s = &x->s;
    s->e2e_ms = (t - x->t0) * 1e3;
    s->outcome = DI_LG_ERROR;
    long code = 0;
    curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &code);
    if (x->stalled) {
        s->outcome = DI_LG_TIMEOUT;
        snprintf(s->reason, sizeof s->reason, "stalled: no byte for %g s", r->o->stall_s);
    } else if (x->reason[0]) {
        bool snip = x->snippet_len > 0;
        for (size_t i = 0; i < x->snippet_len; i++)
            if ((unsigned char)x->snippet[i] < 0x20) x->snippet[i] = ' ';
        snprintf(s->reason, sizeof s->reason, "%.90s%s%.60s", x->reason, snip ? ": " : "", x->snippet);
        if (!strncmp(x->reason, "HTTP ", 5)) snprintf(s->reason, sizeof s->reason, "%s", x->reason);
    } else if (rc == CURLE_OPERATION_TIMEDOUT) {
        s->outcome = DI_LG_TIMEOUT;
        snprintf(s->reason, sizeof s->reason, "timeout: answer not complete in %g s", r->o->timeout_s);
    } else if (rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST) {
        snprintf(s->reason, sizeof s->reason, "connect: %s", curl_easy_strerror(rc));
    } else if (rc != CURLE_OK) {
        snprintf(s->reason, sizeof s->reason, "transfer: %s", curl_easy_strerror(rc));
    } else if (code != 200) {
        snprintf(s->reason, sizeof s->reason, "HTTP %ld", code);
    } else if (!x->got_done) {
        snprintf(s->reason, sizeof s->reason, "stream closed before [DONE]");
    } else if (s->n_chunks == 0) {
        snprintf(s->reason, sizeof s->reason, "no content in the answer");
    } else {
        s->outcome = DI_LG_OK;
        s->ttft_ms = (x->t_first - x->t0) * 1e3;
        if (s->output_tokens < 0) s->output_tokens = s->n_chunks; /* no usage: one token per chunk */
        s->tpot_ms = s->output_tokens > 1 ? (s->e2e_ms - s->ttft_ms) / (double)(s->output_tokens - 1) : 0;
        for (size_t i = 0; i < x->n_itl && !r->oom; i++)
            if (!push_double(&r->res->itl_ms, &r->res->n_itl, &r->res->cap_itl, x->itl[i])) r->oom = true;
    }
    bs_result *res = r->res;
    if (res->n == res->cap) {
        size_t c = res->cap ? 2 * res->cap : 64;
        di_lg_sample *p = di_realloc_array(res->s, c, sizeof *p);
        if (!p) {
            r->oom = true;
        } else {
            res->s = p;
            res->cap = c;
        }
    }
    if (res->n < res->cap) res->s[res->n++] = *s;
    x->busy = false;
    /* the conversation goes on only after a complete answer */
    di_error err;
    bool more = s->outcome == DI_LG_OK && !di_lg_conv_reply(&x->conv, x->text ? x->text : "", &err) &&
                di_lg_conv_more(&r->o->wl, &x->conv);
    if (!more) {
        di_lg_conv_free(&x->conv);
        x->has_conv = false;
    }
}

/* Gives x a conversation: its own (closed loop), a waiting one, or a new one. */
static bool take_conv(run_ctx *r, xfer *x, bool closed_loop) {
    if (x->has_conv) return true;
    di_error err;
    if (!closed_loop && r->n_ready) {
        x->conv = r->ready[0];
        memmove(r->ready, r->ready + 1, (r->n_ready - 1) * sizeof *r->ready);
        r->n_ready--;
    } else if (di_lg_conv_start(&r->o->wl, r->next_conv++, &x->conv, &err)) {
        return false;
    }
    x->has_conv = true;
    r->res->n_conversations = r->next_conv;
    return true;
}

/* Open loop: a conversation with turns left waits for the next arrival. */
static bool park_conv(run_ctx *r, xfer *x) {
    if (!x->has_conv) return true;
    if (r->n_ready == r->cap_ready) {
        size_t c = r->cap_ready ? 2 * r->cap_ready : 64;
        di_lg_conv *p = di_realloc_array(r->ready, c, sizeof *p);
        if (!p) return false;
        r->ready = p;
        r->cap_ready = c;
    }
    r->ready[r->n_ready++] = x->conv;
    x->has_conv = false;
    return true;
}

static void progress(const run_ctx *r, int64_t in_flight, bool final) {
    if (r->o->quiet) return;
    size_t ok = 0, bad = 0;
    int64_t toks = 0;
    for (size_t i = 0; i < r->res->n; i++) {
        if (r->res->s[i].outcome == DI_LG_OK) {
            ok++;
            toks += r->res->s[i].output_tokens;
        } else {
            bad++;
        }
    }
    double el = now_s() - r->t_start;
    fprintf(stderr, "%s  %6.1f s  done %zu/%lld  ok %zu  failed %zu  in flight %lld  %.1f tok/s%s",
            isatty(2) ? "\r" : "", el, r->res->n, (long long)r->o->requests, ok, bad, (long long)in_flight,
            el > 0 ? (double)toks / el : 0.0, final || !isatty(2) ? "\n" : "");
    fflush(stderr);
}

int bs_run(const bs_opts *o, double rate, int64_t concurrency, bs_result *res, di_error *err) {
    memset(res, 0, sizeof *res);
    run_ctx r = {.o = o, .res = res, .model = o->model};
    bool closed = rate <= 0;
    r.n_x = closed ? concurrency : o->max_inflight;
    if (r.n_x < 1) return di_error_set(err, DI_ERR_INVALID_ARG, "need --concurrency >= 1 or --rate > 0"), 1;
    snprintf(r.chat_url, sizeof r.chat_url, "%s/v1/chat/completions", o->url);
    r.x = di_calloc((size_t)r.n_x, sizeof *r.x);
    CURLM *m = curl_multi_init();
    struct curl_slist *hdrs = curl_slist_append(NULL, "Content-Type: application/json");
    hdrs = curl_slist_append(hdrs, "Accept: text/event-stream");
    char auth[600];
    if (o->api_key) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %.500s", o->api_key);
        hdrs = curl_slist_append(hdrs, auth);
    }
    if (!r.x || !m || !hdrs) {
        free(r.x);
        if (m) curl_multi_cleanup(m);
        curl_slist_free_all(hdrs);
        return di_error_set(err, DI_ERR_NOMEM, "client state"), 1;
    }

    uint64_t arrival_rng = o->wl.seed ^ 0xa771ULL;
    r.t_start = now_s();
    double next_arrival = r.t_start, last_progress = r.t_start, busy_since = -1;
    int64_t sent = 0, in_flight = 0;
    const double hard_end = r.t_start + o->duration_s + o->timeout_s + 1;
    for (;;) {
        double t = now_s();
        bool sending = sent < o->requests && t - r.t_start < o->duration_s && !g_interrupted && !r.oom;
        /* start what is due */
        for (int64_t i = 0; sending && i < r.n_x; i++) {
            xfer *x = &r.x[i];
            if (x->busy) continue;
            if (!closed && next_arrival > t) break;
            if (!take_conv(&r, x, closed) || !launch(&r, x)) {
                r.oom = true;
                break;
            }
            x->hdrs = hdrs;
            curl_easy_setopt(x->h, CURLOPT_HTTPHEADER, hdrs);
            curl_multi_add_handle(m, x->h);
            if (in_flight++ == 0) busy_since = t;
            if (++sent >= o->requests) sending = false;
            if (!closed) next_arrival += -log(1.0 - di_lg_rng_uniform(&arrival_rng)) / rate;
        }
        if (!sending && in_flight == 0) break;
        int still = 0;
        curl_multi_perform(m, &still);
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(m, &left))) {
            if (msg->msg != CURLMSG_DONE) continue;
            xfer *x = NULL;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&x);
            CURLcode rc = msg->data.result;
            curl_multi_remove_handle(m, x->h);
            finish(&r, x, rc);
            if (!closed && !park_conv(&r, x)) r.oom = true;
            if (--in_flight == 0) res->busy_s += now_s() - busy_since;
        }
        /* stalls, the user's Ctrl-C and the hard end abort what is in flight */
        t = now_s();
        for (int64_t i = 0; i < r.n_x; i++) {
            xfer *x = &r.x[i];
            if (!x->busy) continue;
            bool stall = t - x->t_last_byte > o->stall_s;
            if (!stall && !g_interrupted && t < hard_end) continue;
            x->stalled = stall;
            if (!stall)
                snprintf(x->reason, sizeof x->reason, "%s",
                         g_interrupted ? "cancelled (interrupt)" : "cancelled at the run's time bound");
            curl_multi_remove_handle(m, x->h);
            finish(&r, x, CURLE_OK);
            if (!closed && !park_conv(&r, x)) r.oom = true;
            if (--in_flight == 0) res->busy_s += t - busy_since;
        }
        if (t - last_progress >= (isatty(2) ? 0.5 : 5.0)) {
            progress(&r, in_flight, false);
            last_progress = t;
        }
        int wait_ms = POLL_MS;
        if (!closed && sending) {
            double until = (next_arrival - now_s()) * 1e3;
            if (until < wait_ms) wait_ms = until < 0 ? 0 : (int)until;
        }
        curl_multi_poll(m, NULL, 0, wait_ms, NULL);
    }
    res->duration_s = now_s() - r.t_start;
    progress(&r, 0, true);
    for (int64_t i = 0; i < r.n_x; i++) {
        xfer *x = &r.x[i];
        if (x->h) curl_easy_cleanup(x->h);
        if (x->has_conv) di_lg_conv_free(&x->conv);
        di_sse_free(&x->sse);
        free(x->body);
        free(x->text);
        free(x->itl);
    }
    for (size_t i = 0; i < r.n_ready; i++) di_lg_conv_free(&r.ready[i]);
    free(r.ready);
    free(r.x);
    curl_multi_cleanup(m);
    curl_slist_free_all(hdrs);
    if (r.oom) return di_error_set(err, DI_ERR_NOMEM, "client out of memory"), 1;
    res->interrupted = g_interrupted;
    if (g_interrupted) fprintf(stderr, "bench serve: interrupted; the record has what finished\n");
    return 0;
}

void bs_result_free(bs_result *r) {
    free(r->s);
    free(r->itl_ms);
    memset(r, 0, sizeof *r);
}

typedef struct get_buf {
    char *p;
    size_t n, max;
} get_buf;

static size_t on_get(char *ptr, size_t size, size_t nmemb, void *user) {
    get_buf *b = user;
    size_t n = size * nmemb;
    if (b->n + n > b->max) return 0;
    char *q = realloc(b->p, b->n + n + 1);
    if (!q) return 0;
    b->p = q;
    memcpy(b->p + b->n, ptr, n);
    b->n += n;
    b->p[b->n] = 0;
    return n;
}

typedef struct hdr_ctx {
    char *server; /* (128) */
} hdr_ctx;

static size_t on_header(char *ptr, size_t size, size_t nmemb, void *user) {
    hdr_ctx *h = user;
    size_t n = size * nmemb;
    if (h->server && n > 7 && !strncasecmp(ptr, "Server:", 7)) {
        size_t i = 7;
        while (i < n && ptr[i] == ' ') i++;
        size_t k = 0;
        while (i < n && ptr[i] != '\r' && ptr[i] != '\n' && k < 127) h->server[k++] = ptr[i++];
        h->server[k] = 0;
    }
    return n;
}

int bs_http_get(const char *url, const char *api_key, double timeout_s, size_t max_bytes, char **body,
                long *code, char *server_hdr, di_error *err) {
    *body = NULL;
    *code = 0;
    if (server_hdr) server_hdr[0] = 0;
    CURL *h = curl_easy_init();
    if (!h) return di_error_set(err, DI_ERR_NOMEM, "curl"), 1;
    get_buf b = {.max = max_bytes};
    hdr_ctx hc = {server_hdr};
    struct curl_slist *hdrs = NULL;
    char auth[600];
    if (api_key) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %.500s", api_key);
        hdrs = curl_slist_append(NULL, auth);
    }
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)(timeout_s * 1e3));
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_get);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &hc);
    if (hdrs) curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    CURLcode rc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, code);
    curl_easy_cleanup(h);
    curl_slist_free_all(hdrs);
    if (rc != CURLE_OK) {
        free(b.p);
        return di_error_set(err, DI_ERR_IO, "GET %s: %s", url, curl_easy_strerror(rc)), 1;
    }
    *body = b.p ? b.p : di_strdup("");
    return *body ? 0 : (di_error_set(err, DI_ERR_NOMEM, "GET body"), 1);
}
