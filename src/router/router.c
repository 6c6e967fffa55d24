/* The router (contract in router.h): libmicrohttpd in front, one upstream
 * connection per forwarded request. */
#include "router/router.h"

#include "base/alloc.h"
#include "router/affinity.h"
#include "router/upstream.h"

#include <jansson.h>
#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define AFF_CAPACITY (1u << 16)   /* chunk hashes remembered per engine */
#define MAX_ANSWER_BYTES (64u << 20) /* a non-streamed answer larger than this is refused */
#define SSE_BLOCK 4096

typedef struct engine {
    char url[256];
    char host[200];
    int port;
    di_aff_set *aff;
    int32_t in_flight;
    int64_t down_until_ms;
    uint64_t n_requests, n_failures, matched_bytes;
} engine;

struct di_router {
    di_router_params p;
    struct MHD_Daemon *mhd;
    uint16_t port;
    pthread_mutex_t mu;
    engine *eng;   /* (n_engines) */
    int32_t n_eng;
    uint32_t rr;   /* round-robin cursor */
    uint64_t n_requests, n_retries, n_failed, n_streams_broken;
};

static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

di_router_params di_router_params_default(void) {
    di_router_params p;
    memset(&p, 0, sizeof p);
    p.balance_bytes = 1024; /* one queued request ~ 16 cached blocks of text */
    p.down_ms = 2000;
    p.timeout_ms = 600000;
    p.max_body_bytes = 1u << 20;
    p.max_connections = 256;
    return p;
}

/* "http://host:port[/]" -> host, port. */
static bool parse_url(const char *url, char *host, size_t cap, int *port) {
    const char *h = strncmp(url, "http://", 7) == 0 ? url + 7 : url;
    const char *colon = strrchr(h, ':');
    if (!colon || colon == h || (size_t)(colon - h) >= cap) return false;
    char *end;
    long v = strtol(colon + 1, &end, 10);
    if (end == colon + 1 || (*end && strcmp(end, "/")) || v < 1 || v > 65535) return false;
    memcpy(host, h, (size_t)(colon - h));
    host[colon - h] = 0;
    *port = (int)v;
    return true;
}

/* ---- choosing an engine ---------------------------------------------------------- */

/* The prompt text of a generation body, for affinity: chat messages as
 * "role\ncontent\n" (text parts of array contents), or the prompt string. */
static char *prompt_text(const char *body, size_t n, size_t *len) {
    *len = 0;
    json_t *root = json_loadb(body, n, 0, NULL);
    if (!json_is_object(root)) {
        json_decref(root);
        return NULL;
    }
    size_t cap = 4096, at = 0;
    char *t = malloc(cap);
    json_t *msgs = json_object_get(root, "messages"), *prompt = json_object_get(root, "prompt");
    size_t i;
    json_t *m;
#define PUT(s, k) do { size_t k_ = (k); if (at + k_ + 1 > cap) { while (at + k_ + 1 > cap) cap *= 2; char *nt = realloc(t, cap); if (!nt) goto oom; t = nt; } memcpy(t + at, (s), k_); at += k_; } while (0)
    if (!t) goto oom;
    if (json_is_array(msgs)) {
        json_array_foreach(msgs, i, m) {
            json_t *role = json_object_get(m, "role"), *c = json_object_get(m, "content");
            if (json_is_string(role)) PUT(json_string_value(role), json_string_length(role));
            PUT("\n", 1);
            if (json_is_string(c)) PUT(json_string_value(c), json_string_length(c));
            else if (json_is_array(c)) {
                size_t j;
                json_t *part;
                json_array_foreach(c, j, part) {
                    json_t *tx = json_object_get(part, "text");
                    if (json_is_string(tx)) PUT(json_string_value(tx), json_string_length(tx));
                }
            }
            PUT("\n", 1);
        }
    } else if (json_is_string(prompt)) {
        PUT(json_string_value(prompt), json_string_length(prompt));
    }
#undef PUT
    json_decref(root);
    *len = at;
    return t;
oom:
    free(t);
    json_decref(root);
    return NULL;
}

/* Picks an up engine not in `tried` (bit mask), takes an in-flight slot on
 * it and learns the prompt there. -1 when none is left. */
static int pick(di_router *r, const uint64_t *chunks, int32_t n_chunks, uint64_t tried) {
    pthread_mutex_lock(&r->mu);
    int64_t t = now_ms();
    int best = -1;
    double best_score = 0;
    int32_t best_match = 0;
    for (int32_t k = 0; k < r->n_eng; k++) {
        int i = (int)((r->rr + (uint32_t)k) % (uint32_t)r->n_eng);
        engine *e = &r->eng[i];
        if ((tried >> i) & 1 || e->down_until_ms > t) continue;
        if (r->p.policy == DI_ROUTE_ROUND_ROBIN) {
            best = i;
            break;
        }
        int32_t m = di_aff_match(e->aff, chunks, n_chunks);
        double score = (double)m * DI_AFF_CHUNK - r->p.balance_bytes * e->in_flight;
        if (best < 0 || score > best_score || (score == best_score && e->in_flight < r->eng[best].in_flight)) {
            best = i;
            best_score = score;
            best_match = m;
        }
    }
    if (best >= 0) {
        engine *e = &r->eng[best];
        e->in_flight++;
        e->n_requests++;
        e->matched_bytes += (uint64_t)best_match * DI_AFF_CHUNK;
        di_aff_insert(e->aff, chunks, n_chunks);
        r->rr = (uint32_t)(best + 1) % (uint32_t)r->n_eng;
    }
    pthread_mutex_unlock(&r->mu);
    return best;
}

static void release(di_router *r, int i, bool failed) {
    pthread_mutex_lock(&r->mu);
    engine *e = &r->eng[i];
    e->in_flight--;
    if (failed) {
        e->n_failures++;
        e->down_until_ms = now_ms() + r->p.down_ms;
    }
    pthread_mutex_unlock(&r->mu);
}

/* ---- answering ------------------------------------------------------------------- */

typedef struct conn_ctx {
    char *body;
    size_t len, cap;
    bool too_large;
} conn_ctx;

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, const char *type, char *body, size_t len) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    enum MHD_Result ret = MHD_queue_response(c, status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static enum MHD_Result reply_error(struct MHD_Connection *c, unsigned status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static enum MHD_Result reply_error(struct MHD_Connection *c, unsigned status, const char *code, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    json_t *j = json_pack("{s:{s:s, s:s, s:n, s:s}}", "error", "message", msg, "type",
                          status >= 500 ? "server_error" : "invalid_request_error", "param", "code", code);
    char *body = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!body) return MHD_NO;
    return reply(c, status, "application/json", body, strlen(body));
}

typedef struct stream_ctx {
    di_router *r;
    int engine;
    di_up *up;
    bool ended, failed;
    char tail[256];   /* the error event written after a broken stream */
    size_t tail_len, tail_pos;
} stream_ctx;

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    stream_ctx *x = cls;
    if (x->tail_len) {
        if (x->tail_pos == x->tail_len) return MHD_CONTENT_READER_END_OF_STREAM;
        size_t n = x->tail_len - x->tail_pos < max ? x->tail_len - x->tail_pos : max;
        memcpy(buf, x->tail + x->tail_pos, n);
        x->tail_pos += n;
        return (ssize_t)n;
    }
    ssize_t n = di_up_read(x->up, buf, max);
    if (n > 0) return n;
    if (n == 0) {
        x->ended = true;
        return MHD_CONTENT_READER_END_OF_STREAM;
    }
    /* The engine died mid-stream: what was sent stands; end cleanly. */
    x->failed = true;
    pthread_mutex_lock(&x->r->mu);
    x->r->n_streams_broken++;
    pthread_mutex_unlock(&x->r->mu);
    x->tail_len = (size_t)snprintf(x->tail, sizeof x->tail,
                                   "\n\ndata: {\"error\": {\"message\": \"The engine serving this stream failed.\", "
                                   "\"type\": \"server_error\", \"param\": null, \"code\": \"engine_failed\"}}\n\n"
                                   "data: [DONE]\n\n");
    return stream_read(cls, pos, buf, max);
}

static void stream_free(void *cls) {
    stream_ctx *x = cls;
    release(x->r, x->engine, x->failed);
    di_up_close(x->up);
    free(x);
}

static const char *auth_header(struct MHD_Connection *c, char *buf, size_t cap) {
    static const char CT[] = "Content-Type: application/json\r\n";
    const char *a = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    size_t at = 0;
    /* The client's key is passed on (engines check it); a header that
     * could split the request is not. */
    if (a && !strpbrk(a, "\r\n") && strlen(a) + sizeof CT + 20 < cap) {
        memcpy(buf, "Authorization: ", 15);
        at = 15;
        memcpy(buf + at, a, strlen(a));
        at += strlen(a);
        memcpy(buf + at, "\r\n", 2);
        at += 2;
    }
    memcpy(buf + at, CT, sizeof CT);
    return buf;
}

/* Forwards a request, retrying on other engines while nothing reached the
 * client. */
static enum MHD_Result forward(di_router *r, struct MHD_Connection *c, const char *method, const char *path,
                               const char *body, size_t len, bool learn) {
    uint64_t chunks[DI_AFF_MAX_CHUNKS];
    int32_t n_chunks = 0;
    if (learn) {
        size_t tl = 0;
        char *text = prompt_text(body, len, &tl);
        if (text) n_chunks = di_aff_chunks(text, tl, chunks, DI_AFF_MAX_CHUNKS);
        free(text);
    }
    char hdr[1024];
    auth_header(c, hdr, sizeof hdr);
    pthread_mutex_lock(&r->mu);
    r->n_requests++;
    pthread_mutex_unlock(&r->mu);
    uint64_t tried = 0;
    for (int attempt = 0; attempt < r->n_eng; attempt++) {
        int i = pick(r, chunks, n_chunks, tried);
        if (i < 0) break;
        tried |= 1ull << i;
        if (attempt) {
            pthread_mutex_lock(&r->mu);
            r->n_retries++;
            pthread_mutex_unlock(&r->mu);
        }
        engine *e = &r->eng[i];
        di_up *up = NULL;
        di_error err;
        if (di_up_open(e->host, e->port, method, path, body, len, hdr, r->p.timeout_ms, &up, &err)) {
            release(r, i, true);
            continue;
        }
        int status = di_up_status(up);
        if (status == 200 && strstr(di_up_content_type(up), "text/event-stream")) {
            stream_ctx *x = di_calloc(1, sizeof *x);
            struct MHD_Response *resp =
                x ? MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, SSE_BLOCK, stream_read, x, stream_free) : NULL;
            if (!resp) {
                free(x);
                di_up_close(up);
                release(r, i, false);
                return MHD_NO;
            }
            x->r = r;
            x->engine = i;
            x->up = up;
            MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
            MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
            enum MHD_Result ret = MHD_queue_response(c, 200, resp);
            MHD_destroy_response(resp);
            return ret;
        }
        /* A whole answer: read it all first, so an engine that dies half
         * way can still be replaced. */
        size_t cap = 65536, at = 0;
        char *out = malloc(cap);
        bool ok = out != NULL;
        while (ok) {
            if (at == cap) {
                if (cap >= MAX_ANSWER_BYTES) { ok = false; break; }
                char *no = realloc(out, cap * 2);
                if (!no) { ok = false; break; }
                out = no;
                cap *= 2;
            }
            ssize_t n = di_up_read(up, out + at, cap - at);
            if (n < 0) ok = false;
            if (n <= 0) break;
            at += (size_t)n;
        }
        char type[128];
        snprintf(type, sizeof type, "%s", di_up_content_type(up)[0] ? di_up_content_type(up) : "application/json");
        di_up_close(up);
        bool engine_failed = !ok || status >= 500;
        release(r, i, !ok);
        if (engine_failed && status != 503 && !ok) {
            free(out);
            continue;
        }
        return reply(c, (unsigned)status, type, out, at);
    }
    pthread_mutex_lock(&r->mu);
    r->n_failed++;
    pthread_mutex_unlock(&r->mu);
    return reply_error(c, 503, "no_engine", "No engine could serve the request (%d tried).", r->n_eng);
}

static char *render_metrics(di_router *r, size_t *len) {
    size_t cap = 8192 + (size_t)r->n_eng * 1024, at = 0;
    char *b = malloc(cap);
    if (!b) return NULL;
#define P(...) do { int k_ = snprintf(b + at, cap - at, __VA_ARGS__); if (k_ > 0 && (size_t)k_ < cap - at) at += (size_t)k_; } while (0)
    pthread_mutex_lock(&r->mu);
    int64_t t = now_ms();
    P("# TYPE deepinfer_router_requests_total counter\ndeepinfer_router_requests_total %llu\n",
      (unsigned long long)r->n_requests);
    P("# TYPE deepinfer_router_retries_total counter\ndeepinfer_router_retries_total %llu\n",
      (unsigned long long)r->n_retries);
    P("# TYPE deepinfer_router_failed_requests_total counter\ndeepinfer_router_failed_requests_total %llu\n",
      (unsigned long long)r->n_failed);
    P("# TYPE deepinfer_router_broken_streams_total counter\ndeepinfer_router_broken_streams_total %llu\n",
      (unsigned long long)r->n_streams_broken);
    P("# TYPE deepinfer_router_engine_requests_total counter\n");
    for (int32_t i = 0; i < r->n_eng; i++)
        P("deepinfer_router_engine_requests_total{engine=\"%s\"} %llu\n", r->eng[i].url,
          (unsigned long long)r->eng[i].n_requests);
    P("# TYPE deepinfer_router_engine_failures_total counter\n");
    for (int32_t i = 0; i < r->n_eng; i++)
        P("deepinfer_router_engine_failures_total{engine=\"%s\"} %llu\n", r->eng[i].url,
          (unsigned long long)r->eng[i].n_failures);
    P("# TYPE deepinfer_router_engine_matched_prefix_bytes_total counter\n");
    for (int32_t i = 0; i < r->n_eng; i++)
        P("deepinfer_router_engine_matched_prefix_bytes_total{engine=\"%s\"} %llu\n", r->eng[i].url,
          (unsigned long long)r->eng[i].matched_bytes);
    P("# TYPE deepinfer_router_engine_in_flight gauge\n");
    for (int32_t i = 0; i < r->n_eng; i++)
        P("deepinfer_router_engine_in_flight{engine=\"%s\"} %d\n", r->eng[i].url, (int)r->eng[i].in_flight);
    P("# TYPE deepinfer_router_engine_up gauge\n");
    for (int32_t i = 0; i < r->n_eng; i++)
        P("deepinfer_router_engine_up{engine=\"%s\"} %d\n", r->eng[i].url, r->eng[i].down_until_ms > t ? 0 : 1);
    pthread_mutex_unlock(&r->mu);
#undef P
    *len = at;
    return b;
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                 const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    di_router *r = cls;
    conn_ctx *cc = *con_cls;
    if (!cc) {
        if (!(cc = di_calloc(1, sizeof *cc))) return MHD_NO;
        *con_cls = cc;
        return MHD_YES;
    }
    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        if (cc->too_large || cc->len + n > r->p.max_body_bytes) {
            cc->too_large = true;
            return MHD_YES;
        }
        if (cc->len + n > cc->cap) {
            size_t nc = cc->cap ? cc->cap : 4096;
            while (nc < cc->len + n) nc *= 2;
            char *nb = realloc(cc->body, nc);
            if (!nb) return MHD_NO;
            cc->body = nb;
            cc->cap = nc;
        }
        memcpy(cc->body + cc->len, upload, n);
        cc->len += n;
        return MHD_YES;
    }
    if (cc->too_large)
        return reply_error(c, 413, "request_too_large", "Request body exceeds the limit of %zu bytes.",
                           r->p.max_body_bytes);
    bool post = !strcmp(method, "POST"), get = !strcmp(method, "GET");
    if (get && !strcmp(url, "/metrics")) {
        size_t n = 0;
        char *m = render_metrics(r, &n);
        return m ? reply(c, 200, "text/plain; version=0.0.4; charset=utf-8", m, n) : MHD_NO;
    }
    if (get && !strcmp(url, "/health")) {
        pthread_mutex_lock(&r->mu);
        int up = 0;
        int64_t t = now_ms();
        for (int32_t i = 0; i < r->n_eng; i++) up += r->eng[i].down_until_ms <= t;
        pthread_mutex_unlock(&r->mu);
        if (!up) return reply_error(c, 503, "no_engine", "No engine is up.");
        char *b = strdup("{\"status\":\"ok\"}");
        return b ? reply(c, 200, "application/json", b, strlen(b)) : MHD_NO;
    }
    if (post && (!strcmp(url, "/v1/chat/completions") || !strcmp(url, "/v1/completions")))
        return forward(r, c, method, url, cc->body, cc->len, true);
    if ((get && !strncmp(url, "/v1/models", 10)) || (post && (!strcmp(url, "/tokenize") || !strcmp(url, "/detokenize"))))
        return forward(r, c, method, url, cc->body, cc->len, false);
    return reply_error(c, 404, "not_found", "Unknown route %s %.100s", method, url);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)cls;
    (void)c;
    (void)toe;
    conn_ctx *cc = *con_cls;
    if (!cc) return;
    free(cc->body);
    free(cc);
    *con_cls = NULL;
}

di_status di_router_create(const di_router_params *p, di_router **out, di_error *err) {
    *out = NULL;
    if (p->n_engines < 1 || p->n_engines > DI_ROUTER_MAX_ENGINES)
        return di_error_set(err, DI_ERR_INVALID_ARG, "route: give 1 to %d engines", DI_ROUTER_MAX_ENGINES);
    if (p->max_body_bytes < 2 || p->max_connections < 1 || p->down_ms < 0 || p->timeout_ms < 1 ||
        !(p->balance_bytes >= 0))
        return di_error_set(err, DI_ERR_RANGE, "route: limits must be positive");
    di_router *r = di_calloc(1, sizeof *r);
    if (!r) return di_error_set(err, DI_ERR_NOMEM, "route: out of memory");
    r->p = *p;
    pthread_mutex_init(&r->mu, NULL);
    r->eng = di_calloc((size_t)p->n_engines, sizeof *r->eng);
    if (!r->eng) {
        di_router_free(r);
        return di_error_set(err, DI_ERR_NOMEM, "route: out of memory");
    }
    r->n_eng = p->n_engines;
    for (int32_t i = 0; i < p->n_engines; i++) {
        engine *e = &r->eng[i];
        if (!p->engines[i] || strlen(p->engines[i]) >= sizeof e->url ||
            !parse_url(p->engines[i], e->host, sizeof e->host, &e->port)) {
            di_router_free(r);
            return di_error_set(err, DI_ERR_INVALID_ARG, "route: engine '%.100s' is not http://HOST:PORT",
                                p->engines[i] ? p->engines[i] : "");
        }
        snprintf(e->url, sizeof e->url, "%s", p->engines[i]);
        di_status s = di_aff_set_create(AFF_CAPACITY, &e->aff, err);
        if (s) {
            di_router_free(r);
            return s;
        }
    }
    const char *host = p->host ? p->host : "127.0.0.1";
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai = NULL;
    char port[8];
    snprintf(port, sizeof port, "%u", (unsigned)p->port);
    if (getaddrinfo(host, port, &hints, &ai) || !ai) {
        di_router_free(r);
        return di_error_set(err, DI_ERR_INVALID_ARG, "route: cannot resolve host '%s'", host);
    }
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ITC;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    r->mhd = MHD_start_daemon(flags, p->port, NULL, NULL, on_access, r, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                              MHD_OPTION_CONNECTION_LIMIT, (unsigned)p->max_connections,
                              MHD_OPTION_CONNECTION_TIMEOUT, 600u, MHD_OPTION_NOTIFY_COMPLETED, on_completed, r,
                              MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!r->mhd) {
        di_router_free(r);
        return di_error_set(err, DI_ERR_IO, "route: cannot listen on %s:%u", host, (unsigned)p->port);
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(r->mhd, MHD_DAEMON_INFO_BIND_PORT);
    r->port = di && di->port ? di->port : p->port;
    *out = r;
    return DI_OK;
}

uint16_t di_router_port(const di_router *r) { return r->port; }

void di_router_free(di_router *r) {
    if (!r) return;
    if (r->mhd) MHD_stop_daemon(r->mhd);
    for (int32_t i = 0; r->eng && i < r->n_eng; i++) di_aff_set_free(r->eng[i].aff);
    free(r->eng);
    pthread_mutex_destroy(&r->mu);
    free(r);
}
