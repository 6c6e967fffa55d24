/* libmicrohttpd glue: the daemon, per-connection limits, routing, request
 * bodies, API-key checks, CORS and the SSE pump.
 *
 * Why libmicrohttpd: it is packaged by Debian (libmicrohttpd-dev), fuzzed
 * upstream (OSS-Fuzz), parses HTTP/1.1 incl. chunked bodies for us, and has
 * the limits we need (connections, per-connection memory, idle timeout) as
 * daemon options. It does not listen itself: http_listen.c accepts and
 * checks each connection's first request head, so that the errors MHD
 * would answer with HTML pages get our JSON ones (see there).
 *
 * Threading: one thread per connection (MHD_USE_THREAD_PER_CONNECTION).
 * That lets a connection thread block while its engine requests run (the
 * non-streaming answer is built at the end; a stream's reader callback
 * waits for the next tokens) and poll its own socket for a hang-up, which
 * is how a vanished client cancels its engine requests promptly. Threads
 * are bounded by --max-connections. */
#include "server/server_internal.h"

#include "base/status.h"

#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

/* Per-connection memory: MHD keeps the head and one record per header line
 * (~50 bytes each) in the same pool as its read and write buffers. Twice
 * the header limit plus this leaves room for every head under the limit,
 * which on_headers then measures exactly. */
#define CONN_POOL_EXTRA (32u << 10)
/* Methods a route path answers besides its own: HEAD for GET routes
 * (MHD sends no body), OPTIONS everywhere (CORS preflight). */
#define ALLOW_BYTES 64
/* Bytes the SSE reader hands MHD at a time. */
#define SSE_BLOCK_BYTES (16u << 10)

typedef struct conn_ctx {
    const struct route *route;
    srv_buf body;
    bool too_large;
    bool answered;              /* a response was queued before the body */
    bool counted;               /* counted in srv->n_answering */
} conn_ctx;

typedef struct route {
    const char *path;
    bool prefix;                /* path is a prefix ("/v1/models/<id>") */
    const char *method;
    int id;                     /* SRV_ROUTE_* for metrics */
    bool needs_key;
    void (*fn)(di_server *, const srv_http_req *, srv_reply *);
} route;

static const route ROUTES[] = {
    {"/v1/chat/completions", false, "POST", SRV_ROUTE_CHAT, true, srv_route_chat},
    {"/v1/completions", false, "POST", SRV_ROUTE_COMPLETIONS, true, srv_route_completions},
    {"/v1/responses", false, "POST", SRV_ROUTE_RESPONSES, true, srv_route_responses},
    {"/v1/messages", false, "POST", SRV_ROUTE_MESSAGES, true, srv_route_messages},
    {"/v1/models", false, "GET", SRV_ROUTE_MODELS, true, srv_route_models},
    {"/v1/models/", true, "GET", SRV_ROUTE_MODELS, true, srv_route_models},
    {"/health", false, "GET", SRV_ROUTE_HEALTH, false, srv_route_health},
    {"/metrics", false, "GET", SRV_ROUTE_METRICS, false, srv_route_metrics},
    {"/tokenize", false, "POST", SRV_ROUTE_TOKENIZE, true, srv_route_tokenize},
    {"/detokenize", false, "POST", SRV_ROUTE_DETOKENIZE, true, srv_route_detokenize},
    {"/v1/kv/export", false, "POST", SRV_ROUTE_KV_EXPORT, true, srv_route_kv_export},
    {"/v1/kv/import", false, "POST", SRV_ROUTE_KV_IMPORT, true, srv_route_kv_import},
};
#define N_ROUTES (sizeof ROUTES / sizeof ROUTES[0])

void srv_reply_error(srv_reply *r, unsigned status, const char *type, const char *param,
                     const char *code, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    json_decref(r->json);
    r->status = status;
    json_t *e = json_object();
    json_object_set_new(e, "message", srv_json_string(msg, strlen(msg)));
    json_object_set_new(e, "type", json_string(type));
    json_object_set_new(e, "param", param ? srv_json_string(param, strlen(param)) : json_null());
    json_object_set_new(e, "code", code ? json_string(code) : json_null());
    r->json = json_object();
    json_object_set_new(r->json, "error", e);
}

/* ---- the SSE pump ------------------------------------------------------------ */

typedef struct sse_ctx {
    di_server *srv;
    srv_job *job;
    srv_sse_fn fn;
    srv_buf out;                /* formatted bytes not yet handed to MHD */
    size_t pos;
    bool complete;
    bool gone;                  /* the client hung up (counted, cancelled) */
} sse_ctx;

static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    sse_ctx *x = cls;
    while (x->pos == x->out.len) {
        if (x->complete) return MHD_CONTENT_READER_END_OF_STREAM;
        x->out.len = 0;
        x->pos = 0;
        if (!srv_job_wait(x->job, true)) {
            x->gone = true;
            srv_metrics_disconnect(&x->srv->metrics);
            srv_job_cancel(x->job);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        x->complete = x->fn(x->job, &x->out);
    }
    size_t n = x->out.len - x->pos;
    if (n > max) n = max;
    memcpy(buf, x->out.data + x->pos, n);
    x->pos += n;
    return (ssize_t)n;
}

/* MHD drops the response: after the last byte, or when a write failed
 * because the client went away (then the job is still running). */
static void sse_free(void *cls) {
    sse_ctx *x = cls;
    if (!x->complete && !x->gone) {
        /* MHD failed to write: the client is gone. */
        srv_metrics_disconnect(&x->srv->metrics);
        srv_job_cancel(x->job);
    }
    srv_job_release(x->job);
    srv_buf_free(&x->out);
    free(x);
}

/* ---- answering ------------------------------------------------------------------ */

static enum MHD_Result queue(struct MHD_Connection *conn, unsigned status, struct MHD_Response *resp) {
    if (!resp) return MHD_NO;
    enum MHD_Result ret = MHD_queue_response(conn, status, resp);
    MHD_destroy_response(resp);
    return ret;
}

void srv_http_cors(const di_server *s, struct MHD_Response *resp) {
    if (!s->cors_origin) return;
    MHD_add_response_header(resp, "Access-Control-Allow-Origin", s->cors_origin);
    /* One named origin: caches must not serve this answer to another. */
    if (strcmp(s->cors_origin, "*")) MHD_add_response_header(resp, "Vary", "Origin");
    MHD_add_response_header(resp, "Access-Control-Expose-Headers", "X-DeepInfer-Warning");
}

static void add_common_headers(const di_server *s, struct MHD_Response *resp, const srv_reply *r) {
    if (r->warning[0]) MHD_add_response_header(resp, "X-DeepInfer-Warning", r->warning);
    if (r->allow[0]) MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, r->allow);
    srv_http_cors(s, resp);
}

static enum MHD_Result send_reply(di_server *s, struct MHD_Connection *conn, int route_id,
                                  srv_reply *r) {
    if (r->hang_up) {
        json_decref(r->json);
        free(r->text);
        srv_metrics_disconnect(&s->metrics);
        return MHD_NO; /* closes the connection */
    }
    srv_metrics_http(&s->metrics, route_id, r->status);
    struct MHD_Response *resp = NULL;
    if (r->stream) {
        sse_ctx *x = calloc(1, sizeof *x);
        if (x) {
            x->srv = s;
            x->job = r->stream;
            x->fn = r->sse;
            resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, SSE_BLOCK_BYTES, sse_read, x,
                                                     sse_free);
            if (!resp) free(x);
        }
        if (!resp) {
            srv_job_cancel(r->stream);
            srv_job_release(r->stream);
            return MHD_NO;
        }
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        /* Proxies (nginx) must not buffer a token stream. */
        MHD_add_response_header(resp, "X-Accel-Buffering", "no");
        add_common_headers(s, resp, r);
        return queue(conn, r->status, resp);
    }
    char *body;
    size_t len;
    const char *ctype;
    if (r->json) {
        body = json_dumps(r->json, JSON_COMPACT);
        json_decref(r->json);
        r->json = NULL;
        if (!body) return MHD_NO;
        len = strlen(body);
        ctype = "application/json";
    } else {
        body = r->text ? r->text : calloc(1, 1);
        if (!body) return MHD_NO;
        len = r->text ? r->text_len : 0;
        ctype = r->content_type ? r->content_type : "text/plain; charset=utf-8";
    }
    resp = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    if (len || r->json) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    add_common_headers(s, resp, r);
    return queue(conn, r->status, resp);
}

/* Answers an error before the body was read (MHD then closes the
 * connection rather than read a body nobody wants). allow: for 405. */
static enum MHD_Result early_error(di_server *s, struct MHD_Connection *conn, conn_ctx *cc,
                                   int route_id, unsigned status, const char *type,
                                   const char *code, const char *msg, const char *allow) {
    srv_reply r = {0};
    srv_reply_error(&r, status, type, NULL, code, "%s", msg);
    if (allow) snprintf(r.allow, sizeof r.allow, "%s", allow);
    cc->answered = true;
    return send_reply(s, conn, route_id, &r);
}

/* KV records are large (a block of every layer): the import route has a
 * limit of its own, so the JSON routes keep theirs. */
static size_t body_limit(const di_server *s, const route *rt) {
    return rt && rt->id == SRV_ROUTE_KV_IMPORT ? s->p.max_kv_body_bytes : s->p.max_body_bytes;
}

static bool path_matches(const route *rt, const char *path) {
    size_t n = strlen(rt->path);
    return rt->prefix ? !strncmp(path, rt->path, n) && path[n] : !strcmp(path, rt->path);
}

/* The route for path and method (HEAD is served as GET); NULL when none.
 * allow receives the methods the path answers ("" for an unknown path). */
static const route *find_route(const char *path, const char *method, char allow[ALLOW_BYTES]) {
    const route *found = NULL;
    bool get = false;
    allow[0] = '\0';
    for (size_t i = 0; i < N_ROUTES; i++) {
        const route *rt = &ROUTES[i];
        if (!path_matches(rt, path)) continue;
        size_t l = strlen(allow);
        snprintf(allow + l, ALLOW_BYTES - l, "%s%s", l ? ", " : "", rt->method);
        get |= !strcmp(rt->method, "GET");
        if (!strcmp(method, rt->method) || (!strcmp(method, "HEAD") && !strcmp(rt->method, "GET"))) found = rt;
    }
    if (allow[0]) {
        size_t l = strlen(allow);
        snprintf(allow + l, ALLOW_BYTES - l, "%s, OPTIONS", get ? ", HEAD" : "");
    }
    return found;
}

/* OPTIONS: the methods of the path, and with --cors-origin what a browser's
 * preflight asks for. Needs no API key (preflights never carry one). */
static enum MHD_Result answer_options(di_server *s, struct MHD_Connection *conn, conn_ctx *cc,
                                      const char *allow) {
    cc->answered = true;
    srv_metrics_http(&s->metrics, SRV_ROUTE_OTHER, MHD_HTTP_NO_CONTENT);
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, allow);
    if (s->cors_origin) {
        srv_http_cors(s, resp);
        MHD_add_response_header(resp, "Access-Control-Allow-Methods", allow);
        MHD_add_response_header(resp, "Access-Control-Allow-Headers", "Authorization, Content-Type, x-api-key, anthropic-version");
        MHD_add_response_header(resp, "Access-Control-Max-Age", "600");
    }
    return queue(conn, MHD_HTTP_NO_CONTENT, resp);
}

/* Constant-time comparison: the key check must not leak a prefix match
 * through timing. */
static bool key_matches(const char *got, const char *want) {
    size_t gl = strlen(got), wl = strlen(want);
    unsigned char diff = gl != wl;
    for (size_t i = 0; i < wl; i++) diff |= (unsigned char)(want[i] ^ (i < gl ? got[i] : 0));
    return diff == 0;
}

static bool authorized(di_server *s, struct MHD_Connection *conn) {
    if (!s->api_key) return true;
    const char *h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    /* Anthropic's clients send the key as x-api-key */
    const char *x = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "x-api-key");
    if ((!h || strncasecmp(h, "Bearer ", 7)) && x) return key_matches(x, s->api_key);
    if (!h || strncasecmp(h, "Bearer ", 7)) return false;
    h += 7;
    while (*h == ' ') h++;
    return key_matches(h, s->api_key);
}

/* First call for a request: headers are in, no body yet. Cheap refusals
 * (unknown route, wrong method, no key, declared body too large) happen
 * here, before a byte of the body is read. */
static enum MHD_Result on_headers(di_server *s, struct MHD_Connection *conn, conn_ctx *cc,
                                  const char *url, const char *method) {
    /* Exact, for every request of a keep-alive connection (the listener
     * checked the first one before MHD saw it). */
    const union MHD_ConnectionInfo *hi = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
    if (hi && hi->header_size > s->p.max_header_bytes) {
        char msg[128];
        snprintf(msg, sizeof msg, "Request line and headers exceed the limit of %zu bytes.", s->p.max_header_bytes);
        return early_error(s, conn, cc, SRV_ROUTE_OTHER, MHD_HTTP_REQUEST_HEADER_FIELDS_TOO_LARGE,
                           "invalid_request_error", "request_header_fields_too_large", msg, NULL);
    }
    char allow[ALLOW_BYTES];
    cc->route = find_route(url, method, allow);
    if (!strcmp(method, "OPTIONS") && (allow[0] || !strcmp(url, "*")))
        return answer_options(s, conn, cc, allow[0] ? allow : "GET, HEAD, POST, OPTIONS");
    if (!cc->route) {
        if (allow[0])
            return early_error(s, conn, cc, SRV_ROUTE_OTHER, MHD_HTTP_METHOD_NOT_ALLOWED,
                               "invalid_request_error", "method_not_allowed",
                               "Method not allowed for this route.", allow);
        char msg[160];
        snprintf(msg, sizeof msg, "Unknown route %s %.100s", method, url);
        return early_error(s, conn, cc, SRV_ROUTE_OTHER, MHD_HTTP_NOT_FOUND,
                           "invalid_request_error", "not_found", msg, NULL);
    }
    if (cc->route->needs_key && !authorized(s, conn))
        return early_error(s, conn, cc, cc->route->id, MHD_HTTP_UNAUTHORIZED,
                           "invalid_request_error", "invalid_api_key",
                           "Incorrect API key provided.", NULL);
    const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl) {
        char *end;
        unsigned long long n = strtoull(cl, &end, 10);
        if (end != cl && n > body_limit(s, cc->route)) {
            char msg[160];
            snprintf(msg, sizeof msg, "Request body of %llu bytes exceeds the limit of %zu bytes.", n,
                     body_limit(s, cc->route));
            return early_error(s, conn, cc, cc->route->id, MHD_HTTP_CONTENT_TOO_LARGE,
                               "invalid_request_error", "request_too_large", msg, NULL);
        }
    }
    return MHD_YES;
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *conn, const char *url,
                                 const char *method, const char *version,
                                 const char *upload_data, size_t *upload_data_size,
                                 void **con_cls) {
    (void)version;
    di_server *s = cls;
    conn_ctx *cc = *con_cls;
    if (!cc) {
        cc = calloc(1, sizeof *cc);
        if (!cc) return MHD_NO;
        *con_cls = cc;
        return on_headers(s, conn, cc, url, method);
    }
    if (cc->answered) {
        /* MHD keeps feeding a body we already refused: drop it. */
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (*upload_data_size) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (cc->too_large) return MHD_YES;
        if (cc->body.len + n > body_limit(s, cc->route)) {
            /* A chunked body with no Content-Length grew past the limit:
             * stop buffering, answer 413 once it ends (or the idle timeout
             * closes a client that never ends it). */
            cc->too_large = true;
            srv_buf_free(&cc->body);
            return MHD_YES;
        }
        if (!srv_buf_append(&cc->body, upload_data, n)) return MHD_NO;
        return MHD_YES;
    }
    /* The whole request is in. */
    if (cc->too_large) {
        char msg[128];
        snprintf(msg, sizeof msg, "Request body exceeds the limit of %zu bytes.", body_limit(s, cc->route));
        return early_error(s, conn, cc, cc->route->id, MHD_HTTP_CONTENT_TOO_LARGE,
                           "invalid_request_error", "request_too_large", msg, NULL);
    }
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    srv_http_req q = {
        .method = method,
        .path = url,
        .body = cc->body.data,
        .body_len = cc->body.len,
        .fd = ci ? ci->connect_fd : -1,
    };
    srv_reply r = {.status = MHD_HTTP_OK};
    /* Shutdown waits for this answer to be sent (on_completed). */
    srv_answering_begin(s);
    cc->counted = true;
    /* The idle timeout is for silent clients, not for us: a long prefill or
     * queue wait would otherwise get the connection closed under a client
     * that is waiting politely. A vanished client is caught by polling its
     * socket instead; on_completed restores the timeout for keep-alive. */
    MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
    cc->route->fn(s, &q, &r);
    cc->answered = true;
    if (s->p.verbose)
        fprintf(stderr, "deepinfer serve: %s %s %zu bytes -> %u%s\n", method, url, cc->body.len, r.status,
                r.hang_up ? " (client gone)" : r.stream ? " (stream)" : "");
    return send_reply(s, conn, cc->route->id, &r);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    (void)toe;
    di_server *s = cls;
    conn_ctx *cc = *con_cls;
    if (!cc) return;
    if (cc->counted) {
        MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)s->p.idle_timeout_s);
        srv_answering_end(s);
    }
    srv_buf_free(&cc->body);
    free(cc);
    *con_cls = NULL;
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe) {
    (void)conn;
    (void)socket_context;
    di_server *s = cls;
    pthread_mutex_lock(&s->mu);
    s->n_connections += toe == MHD_CONNECTION_NOTIFY_STARTED ? 1 : -1;
    if (toe != MHD_CONNECTION_NOTIFY_STARTED) srv_listen_slot_freed(s);
    pthread_mutex_unlock(&s->mu);
}

/* MHD's own messages (malformed requests, limits hit) go to stderr with
 * our prefix. */
static void on_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    fputs("deepinfer serve: http: ", stderr);
    vfprintf(stderr, fmt, ap);
}

di_status srv_http_start(di_server *s, di_error *err) {
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ITC |
                     MHD_USE_ERROR_LOG | MHD_USE_NO_LISTEN_SOCKET;
    s->mhd = MHD_start_daemon(
        flags, 0, NULL, NULL, on_access, s,
        MHD_OPTION_EXTERNAL_LOGGER, on_log, s, /* first, or MHD logs to stderr itself */
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)s->p.max_connections,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(2 * s->p.max_header_bytes + CONN_POOL_EXTRA),
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)s->p.idle_timeout_s,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
        MHD_OPTION_END);
    if (!s->mhd) return di_error_set(err, DI_ERR_IO, "serve: cannot start the HTTP daemon");
    di_status st = srv_listen_start(s, err);
    if (st) srv_http_stop(s);
    return st;
}

void srv_http_quiesce(di_server *s) {
    srv_listen_quiesce(s);
}

void srv_http_stop(di_server *s) {
    srv_listen_stop(s);
    if (!s->mhd) return;
    MHD_stop_daemon(s->mhd);
    s->mhd = NULL;
}
