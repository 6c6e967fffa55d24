/* Internals shared by the src/server files. Nothing here is part of the
 * contract in server.h.
 *
 *   http.c           libmicrohttpd glue: limits, routing, bodies, SSE pump
 *   routes_openai.c  the OpenAI routes: JSON requests -> engine requests
 *                    (openai_request.c fields, openai_prompt.c prompts,
 *                    openai_response.c answer shapes; openai.h)
 *   content_parts.c  a message's content parts joined into one text
 *                    (the OpenAI routes and dsml_chat.c)
 *   metrics.c        /metrics (Prometheus text), /health, latency histograms
 *   server.c         lifecycle, the engine thread, jobs and their queues
 *
 * A job is one HTTP request's engine work: one choice per engine request
 * (n x prompts). The engine thread appends each choice's output to the job
 * (its event callback); the connection thread takes it out and formats it.
 *
 * Locks: srv->mu -> job->mu is the one nesting among ours. The engine
 * calls our callback holding its own mutex, and the callback takes job->mu,
 * then (not nested) srv->mu; so no thread may call into the engine while
 * holding job->mu, and only the engine thread may while holding srv->mu
 * (its di_engine_idle check: the engine thread is the only one that takes
 * srv->mu under the engine's mutex, so that cannot deadlock). */
#ifndef DI_SERVER_INTERNAL_H
#define DI_SERVER_INTERNAL_H

#include "base/strbuf.h"
#include "server/server.h"

#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Most alternatives per position a request may ask for (OpenAI: 20). */
#define SRV_MAX_TOP_LOGPROBS 20

/* ---- growable byte buffer ------------------------------------------------- */

typedef di_strbuf srv_buf;

static inline bool srv_buf_append(srv_buf *b, const void *p, size_t n) { return di_strbuf_put(b, p, n); }
bool srv_buf_printf(srv_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void srv_buf_free(srv_buf *b);

/* ---- metrics -------------------------------------------------------------- */

/* Fixed-bucket latency histogram (Prometheus "le" buckets, milliseconds). */
#define SRV_HIST_BUCKETS 14
typedef struct srv_hist {
    uint64_t counts[SRV_HIST_BUCKETS + 1]; /* last = +Inf */
    double sum_ms;
    uint64_t n;
} srv_hist;

/* HTTP status classes counted per route. */
enum { SRV_ROUTE_CHAT, SRV_ROUTE_COMPLETIONS, SRV_ROUTE_RESPONSES, SRV_ROUTE_MESSAGES, SRV_ROUTE_MODELS, SRV_ROUTE_HEALTH,
       SRV_ROUTE_METRICS, SRV_ROUTE_TOKENIZE, SRV_ROUTE_DETOKENIZE, SRV_ROUTE_KV_EXPORT,
       SRV_ROUTE_KV_IMPORT, SRV_ROUTE_OTHER,
       SRV_N_ROUTES };

typedef struct srv_metrics {
    pthread_mutex_t mu;
    uint64_t http[SRV_N_ROUTES][6];     /* by route and status class 1xx..5xx (index 1..5) */
    uint64_t finished[5];               /* by di_finish */
    uint64_t prompt_tokens, generation_tokens, cached_tokens;
    uint64_t rejected_queue_full, client_disconnects;
    srv_hist ttft, tpot, e2e, queue;
} srv_metrics;

void srv_metrics_init(srv_metrics *m);
void srv_metrics_destroy(srv_metrics *m);
void srv_metrics_http(srv_metrics *m, int route, unsigned status);
/* One finished engine request (a choice). */
void srv_metrics_finish(srv_metrics *m, di_finish f, const di_request_stats *st);
void srv_metrics_disconnect(srv_metrics *m);
/* The Prometheus text exposition (caller frees). */
char *srv_metrics_render(di_server *s, size_t *len);

/* ---- jobs ------------------------------------------------------------------ */

typedef struct srv_tok {
    int32_t token;
    float logprob;
    int32_t n_top;
    di_token_prob top[SRV_MAX_TOP_LOGPROBS];
} srv_tok;

typedef struct srv_choice {
    struct srv_job *job;
    int32_t index;              /* OpenAI's choice index */
    int64_t id;                 /* engine request id once submitted */
    bool submitted;             /* di_engine_submit accepted it */
    bool done;                  /* final event seen (or never submitted) */
    bool slot_released;         /* its max_queue slot was given back */
    bool want_logprobs;
    bool final_taken;           /* srv_job_take handed over the final state */
    /* Output not yet taken by the connection thread (job->mu). */
    srv_buf text;
    srv_tok *toks;              /* (n_toks) entries, only when want_logprobs */
    size_t n_toks, cap_toks;
    /* Set by the final event. */
    di_finish finish;
    char error[256];
    di_request_stats stats;
} srv_choice;

typedef struct srv_job {
    di_server *srv;
    pthread_mutex_t mu;
    pthread_cond_t cv;          /* new output or a choice finished */
    int refs;                   /* the connection + each running choice */
    bool dirty;                 /* output appended since the last take */
    bool cancelled;
    size_t n_choices, n_done;
    srv_choice *choices;        /* (n_choices) */
    int fd;                     /* client socket for hang-up checks; -1 = none */
    int64_t last_hangup_check_ms; /* connection thread only */
    struct srv_job *prev, *next;/* srv->jobs (srv->mu) */
    void *route;                /* the route's request state, freed with route_free */
    void (*route_free)(void *);
} srv_job;

/* What the connection thread took out of one choice (owned by the caller). */
typedef struct srv_taken {
    char *text;                 /* (text_len) UTF-8; NULL when empty */
    size_t text_len;
    srv_tok *toks;              /* (n_toks) */
    size_t n_toks;
    bool finished;              /* the final event has been taken */
    di_finish finish;
    char error[256];
    di_request_stats stats;
} srv_taken;

typedef enum srv_admit_result { SRV_ADMIT_OK, SRV_ADMIT_FULL, SRV_ADMIT_STOPPING } srv_admit_result;

/* Creates a job of n choices holding n max_queue slots (all-or-nothing). */
srv_admit_result srv_job_create(di_server *s, size_t n, int fd, srv_job **out);
/* Submits choice i (r's callback and user are set here). On failure the
 * choice counts as done. */
di_status srv_job_submit(srv_job *j, size_t i, di_request *r, di_error *err);
/* Waits until every choice is done or, with for_output, until the job has
 * new output. false when the client hung up (the caller then cancels). */
bool srv_job_wait(srv_job *j, bool for_output);
/* Moves choice i's pending output into *t. *t's finished is set once, on
 * the take that hands over the final state. */
void srv_job_take(srv_job *j, size_t i, srv_taken *t);
void srv_taken_free(srv_taken *t);
bool srv_job_all_done(srv_job *j);
/* Marks the job as having output, so a stream's first wait returns at once
 * (the chat role chunks go out before the first token). */
void srv_job_poke(srv_job *j);
/* Cancels every unfinished choice; their final events still arrive. */
void srv_job_cancel(srv_job *j);
/* The connection's reference is dropped. */
void srv_job_release(srv_job *j);
/* A fresh seed for requests that did not give one. */
uint64_t srv_random_seed(di_server *s);
/* A unique id suffix ("chatcmpl-<this>"), 24 hex digits. */
void srv_request_id(di_server *s, char out[32]);

/* ---- the server ------------------------------------------------------------ */

struct di_server {
    di_server_params p;
    char *host, *api_key, *model_name, *cors_origin; /* owned copies of p's strings */
    bool kv_export, kv_import;  /* from p.role: prefill exports, decode imports */
    di_engine *engine;
    di_model_desc desc;
    struct MHD_Daemon *mhd;
    uint16_t port;
    /* The listener in front of MHD (http_listen.c). */
    int listen_fd;              /* -1 once closed */
    int wake_fd[2];             /* a byte here stops the accept loop */
    pthread_t accept_thread;
    bool accept_started, accept_stop, guard_stop;
    int32_t n_guarding;         /* accepted connections whose first head is being checked */
    pthread_cond_t slot_cv;     /* a connection or a guard ended, or stop */
    int64_t t_start;            /* unix seconds, for /v1/models "created" */

    pthread_mutex_t mu;
    pthread_cond_t engine_cv;   /* work submitted, or stop */
    pthread_cond_t drained_cv;  /* in_flight reached 0 */
    pthread_t engine_thread;
    bool engine_started, engine_stop, stopping, shut_down;
    int32_t in_flight;          /* max_queue slots held */
    int32_t n_connections;
    int32_t n_answering;        /* requests dispatched whose answer is not sent yet */
    srv_job *jobs;              /* live jobs */
    uint64_t seed_state, id_state;

    srv_metrics metrics;

    /* DeepSeek V4 / V4.1 checkpoints whose tokenizer has the protocol's
     * special tokens: chats go through src/text/dsml (dsml_chat.c). */
    bool dsml;
    int dsml_version;           /* di_dsml_version when dsml */
    /* --test-scripted-output: forced outputs as token ids (srv->mu for next). */
    int32_t **scripts;          /* (n_scripts) */
    char **script_when;         /* (n_scripts) NULL or the text that picks the entry */
    size_t *script_lens;
    size_t n_scripts, next_script;
};

/* dsml_chat.c: decides s->dsml from the model, loads the test scripts. */
di_status srv_dsml_setup(di_server *s, di_error *err);
void srv_dsml_teardown(di_server *s);
/* The scripted output for a request whose last message / prompt text is
 * hint (may be NULL) in test mode, or false when none is set. */
bool srv_next_script(di_server *s, const char *hint, const int32_t **ids, size_t *n);

/* ---- HTTP (http.c) and routes (routes_openai.c, metrics.c) ------------------ */

typedef struct srv_http_req {
    const char *method, *path;
    const char *body;           /* (body_len) not NUL-terminated; NULL for GET */
    size_t body_len;
    int fd;                     /* client socket */
} srv_http_req;

/* Turns a stream's pending output into SSE bytes; true once the stream is
 * complete ("data: [DONE]" written). Runs on the connection thread. */
typedef bool (*srv_sse_fn)(srv_job *j, srv_buf *out);

typedef struct srv_reply {
    unsigned status;
    json_t *json;               /* a JSON body (owned), or */
    char *text;                 /* a text body (owned, malloc'd) */
    size_t text_len;
    const char *content_type;   /* for text */
    srv_job *stream;            /* or an SSE stream over this job (reference moves) */
    srv_sse_fn sse;
    bool hang_up;               /* the client is gone: close without answering */
    /* Non-empty: sent as the X-DeepInfer-Warning header (printable ASCII),
     * e.g. the schema features a non-strict response_format dropped. */
    char warning[400];
    /* Non-empty: sent as the Allow header (405 and OPTIONS answers). */
    char allow[64];
} srv_reply;

/* Fills r with an OpenAI error body {"error": {message, type, param, code}}. */
void srv_reply_error(srv_reply *r, unsigned status, const char *type, const char *param,
                     const char *code, const char *fmt, ...) __attribute__((format(printf, 6, 7)));

void srv_route_chat(di_server *s, const srv_http_req *q, srv_reply *r);
void srv_route_completions(di_server *s, const srv_http_req *q, srv_reply *r);
/* OpenAI Responses and Anthropic Messages (DeepSeek checkpoints). */
void srv_route_responses(di_server *s, const srv_http_req *q, srv_reply *r);
void srv_route_messages(di_server *s, const srv_http_req *q, srv_reply *r);
void srv_route_models(di_server *s, const srv_http_req *q, srv_reply *r);
void srv_route_tokenize(di_server *s, const srv_http_req *q, srv_reply *r);
/* The one prompt of a chat ("messages") or completions ("prompt") body as
 * token ids, exactly as a generation request would submit it (*ids
 * malloc'd); false with r filled (400) otherwise. */
bool srv_request_prompt(di_server *s, const srv_http_req *q, int32_t **ids, size_t *n, srv_reply *r);
/* routes_kv.c: prefill -> decode KV transfer (--role). */
void srv_route_kv_export(di_server *s, const srv_http_req *q, srv_reply *r);
void srv_route_kv_import(di_server *s, const srv_http_req *q, srv_reply *r);
void srv_route_detokenize(di_server *s, const srv_http_req *q, srv_reply *r);
void srv_route_health(di_server *s, const srv_http_req *q, srv_reply *r);
void srv_route_metrics(di_server *s, const srv_http_req *q, srv_reply *r);

di_status srv_http_start(di_server *s, di_error *err);
/* Headers every answer carries when --cors-origin is set (CORS). */
struct MHD_Response;
void srv_http_cors(const di_server *s, struct MHD_Response *resp);

/* ---- the request-head check and the listener (http_head.c, http_listen.c) --- */

typedef enum { SRV_HEAD_NEED_MORE, SRV_HEAD_OK, SRV_HEAD_REFUSE } srv_head_kind;

typedef struct srv_head_verdict {
    srv_head_kind kind;
    unsigned status;            /* for SRV_HEAD_REFUSE: 400, 431 or 505 */
    size_t head_bytes;          /* through the empty line; 0 when not found */
    char message[160];
} srv_head_verdict;

/* Checks the bytes a connection sent so far (buf[0..n)) as a request head
 * under the limit: NEED_MORE (no empty line yet, still under the limit),
 * OK, or REFUSE with the status and message to answer. */
srv_head_verdict srv_head_check(const char *buf, size_t n, size_t max_header_bytes);

/* Binds host:port, then accepts on a thread of its own: each new
 * connection's first head is read ahead (not consumed) and checked; a bad
 * one is answered with JSON and closed, a good one goes to MHD. Needs s->mhd
 * started with MHD_USE_NO_LISTEN_SOCKET. Sets s->port. */
di_status srv_listen_start(di_server *s, di_error *err);
/* Stops accepting and closes the listening socket (open connections go on). */
void srv_listen_quiesce(di_server *s);
/* Ends the guards still reading heads; call before stopping MHD. */
void srv_listen_stop(di_server *s);
/* MHD closed a connection: wakes an accept loop waiting at the cap. */
void srv_listen_slot_freed(di_server *s);
/* Stops accepting new connections (open ones go on). */
void srv_http_quiesce(di_server *s);
/* Closes every connection and joins their threads. */
void srv_http_stop(di_server *s);
/* A request is being answered / its answer is sent (or abandoned). */
void srv_answering_begin(di_server *s);
void srv_answering_end(di_server *s);

/* Copies s[0..n) into a new jansson string, replacing invalid UTF-8 with
 * U+FFFD (json_stringn refuses invalid UTF-8). */
json_t *srv_json_string(const char *s, size_t n);

/* Decodes a base64 data: URL (data_url.c) into *out (malloc'd, n_out
 * bytes, at most max_bytes); false with *why on anything else. */
bool srv_data_url_decode(const char *url, size_t len, size_t max_bytes, uint8_t **out, size_t *n_out,
                         const char **why);

#endif
