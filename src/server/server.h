/* The OpenAI-compatible HTTP server (`deepinfer serve`).
 *
 * One di_server serves one engine: it listens (libmicrohttpd, one thread per
 * connection), turns JSON requests into engine requests, and runs the engine
 * loop on a thread of its own (the one thread that steps the engine). Every
 * byte that arrives over HTTP is hostile: bodies, headers, connections and
 * queued work are bounded by di_server_params, and a bad request gets an
 * OpenAI-shaped error, never a crash.
 *
 * Lifecycle (the caller owns the engine, which must outlive the server):
 *   di_server_create    starts the engine thread and the listener
 *   di_server_port      the port actually bound (useful with port 0)
 *   di_server_shutdown  stops accepting, lets in-flight requests finish for
 *                       up to grace_ms, cancels the rest, stops the threads
 *   di_server_free      releases everything (calls shutdown if needed)
 * The module's internals are in server_internal.h. */
#ifndef DI_SERVER_SERVER_H
#define DI_SERVER_SERVER_H

#include "deepinfer.h"

#include <stddef.h>
#include <stdint.h>

typedef struct di_server di_server;

typedef struct di_server_params {
    const char *host;            /* address to bind; NULL = "127.0.0.1" */
    uint16_t port;               /* 0 = any free port (see di_server_port) */
    const char *api_key;         /* when set, /v1 and /tokenize need "Bearer <key>" */
    const char *model_name;      /* id in /v1/models and accepted "model"; NULL = "deepinfer" */
    int32_t max_queue;           /* engine requests (choices) in flight at once; more get 503 */
    size_t max_body_bytes;       /* larger bodies get 413 */
    size_t max_kv_body_bytes;    /* the same for POST /v1/kv/import (records) */
    size_t max_header_bytes;     /* request line + headers; larger ones are refused */
    int32_t max_connections;     /* open connections; more are closed at accept */
    int32_t idle_timeout_s;      /* a connection silent this long is closed (slow clients) */
    int32_t max_n;               /* most choices one request may ask for (n x prompts) */
    /* Defaults for fields a request leaves out. */
    di_sampling_params sampling; /* seed is ignored: see has_default_seed */
    bool has_default_seed;       /* false = a fresh seed per request (OpenAI's behaviour) */
    uint64_t default_seed;
    int32_t default_max_tokens;  /* 0 = up to the context limit */
    bool verbose;                /* one log line per request on stderr */
    /* CORS: NULL = no CORS headers; "*" = any origin; else the one origin
     * browsers may call from (Access-Control-Allow-Origin on every answer,
     * OPTIONS preflights answered). */
    const char *cors_origin;
    const char *role;            /* prefill/decode split: "prefill" serves POST
                                  * /v1/kv/export, "decode" POST /v1/kv/import,
                                  * "both" (NULL) both; every role generates */
    /* TESTS ONLY (protocol tests on tiny checkpoints): a file holding a JSON
     * array of output texts or {"when": S, "say": T} entries; a generation
     * request whose last message (or prompt) contains S says T, the others
     * say the plain texts in turn (special tokens parsed, then end of
     * sequence). NULL = off. */
    const char *test_scripted_output;
} di_server_params;

/* Defaults: 127.0.0.1:8080, no key, queue 256, body 1 MiB (KV import
 * 1 GiB), headers 16 KiB,
 * 256 connections, idle timeout 60 s, n <= 128, OpenAI sampling defaults
 * (temperature 1, top_p 1). */
di_server_params di_server_params_default(void);

di_status di_server_create(di_engine *engine, const di_server_params *p, di_server **out,
                           di_error *err);
uint16_t di_server_port(const di_server *s);
/* Graceful stop; idempotent. Safe to call from any thread except a server
 * thread (not from a signal handler: use sigwait in the main thread). */
void di_server_shutdown(di_server *s, int32_t grace_ms);
/* Cancels every running request (their clients get what was generated so
 * far, finish_reason "abort"); thread-safe. For a second stop signal. */
void di_server_cancel_all(di_server *s);
void di_server_free(di_server *s);

#endif
