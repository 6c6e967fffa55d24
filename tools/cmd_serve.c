/* deepinfer serve: the OpenAI-compatible HTTP server (src/server).
 *
 * The engine and sampling flags are the ones run/chat/batch take; here the
 * sampling flags set the defaults for fields a request leaves out, which
 * start at OpenAI's (temperature 1, top_p 1, a fresh seed per request).
 *
 * Signals: SIGINT and SIGTERM are blocked in every thread and taken by
 * sigwait in the main thread, so shutdown runs as ordinary code rather than
 * in a signal handler. The first signal drains gracefully (in-flight
 * requests get --shutdown-grace seconds); a second one cancels at once. */
#include "gen_common.h"
#include "server/server.h"
#include "tools.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The model id clients use: the file name without its directory and .gguf. */
static char *model_id_from_path(const char *path) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strlen(base);
    if (n > 5 && !strcmp(base + n - 5, ".gguf")) n -= 5;
    char *id = malloc(n + 1);
    if (!id) return NULL;
    memcpy(id, base, n);
    id[n] = '\0';
    return id;
}

typedef struct shutdown_ctx {
    di_server *srv;
    int32_t grace_ms;
    atomic_bool done;
} shutdown_ctx;

/* Runs the graceful shutdown while the main thread keeps listening for a
 * second signal. */
static void *shutdown_main(void *arg) {
    shutdown_ctx *c = arg;
    di_server_shutdown(c->srv, c->grace_ms);
    atomic_store(&c->done, true);
    return NULL;
}

int di_cmd_serve(int argc, char **argv) {
    di_gen_opts o;
    di_gen_opts_defaults(&o);
    /* OpenAI's defaults, not the CLI's: temperature 1, top_p 1, no fixed
     * seed, max_tokens up to the context. The flags below override them. */
    o.temp = 1.0;
    o.top_p = 1.0;
    o.seed = -1;
    o.max_tokens = 0;
    di_server_params sp = di_server_params_default();
    const char *host = sp.host, *api_key = NULL, *name = NULL, *cors = NULL, *role = NULL, *scripted = NULL;
    int64_t port = sp.port, max_queue = sp.max_queue, max_body = (int64_t)sp.max_body_bytes,
            max_header = (int64_t)sp.max_header_bytes, max_conn = sp.max_connections,
            idle = sp.idle_timeout_s, max_n = sp.max_n;
    double grace_s = 30;
    bool verbose = false;
    di_arg specs[DI_GEN_MAX_SPECS];
    int n = di_gen_opts_specs(&o, specs, 0);
    specs[n++] = (di_arg){"--host", NULL, DI_ARG_STR, &host, 0, 0, "address to listen on (127.0.0.1)"};
    specs[n++] = (di_arg){"--port", NULL, DI_ARG_INT, &port, 0, 65535, "port (8080; 0 = any free port)"};
    specs[n++] = (di_arg){"--api-key", NULL, DI_ARG_STR, &api_key, 0, 0,
                          "require 'Authorization: Bearer KEY' (or set DEEPINFER_API_KEY)"};
    specs[n++] = (di_arg){"--model-name", NULL, DI_ARG_STR, &name, 0, 0, "model id clients send (file name)"};
    specs[n++] = (di_arg){"--max-queue", NULL, DI_ARG_INT, &max_queue, 1, 1 << 20,
                          "engine requests queued or running at once; more get 503 (256)"};
    specs[n++] = (di_arg){"--max-body-bytes", NULL, DI_ARG_INT, &max_body, 2, 1 << 30,
                          "largest request body; larger get 413 (1 MiB)"};
    specs[n++] = (di_arg){"--max-header-bytes", NULL, DI_ARG_INT, &max_header, 256, 1 << 20,
                          "largest request line + headers (16 KiB)"};
    specs[n++] = (di_arg){"--max-connections", NULL, DI_ARG_INT, &max_conn, 1, 65536,
                          "open connections at once (256)"};
    specs[n++] = (di_arg){"--idle-timeout", NULL, DI_ARG_INT, &idle, 1, 86400,
                          "seconds a silent connection stays open (60)"};
    specs[n++] = (di_arg){"--cors-origin", NULL, DI_ARG_STR, &cors, 0, 0,
                          "let browsers on this origin call the API ('*' = any; off)"};
    specs[n++] = (di_arg){"--max-n", NULL, DI_ARG_INT, &max_n, 1, 4096, "most choices per request (128)"};
    specs[n++] = (di_arg){"--shutdown-grace", NULL, DI_ARG_FLOAT, &grace_s, 0, 3600,
                          "seconds in-flight requests get on SIGINT/SIGTERM (30)"};
    specs[n++] = (di_arg){"--role", NULL, DI_ARG_STR, &role, 0, 0,
                          "prefill/decode split: prefill (serves /v1/kv/export), decode (/v1/kv/import) or both"};
    specs[n++] = (di_arg){"--test-scripted-output", NULL, DI_ARG_STR, &scripted, 0, 0,
                          "TESTS ONLY: FILE is a JSON array of output texts or {\"when\", \"say\"} "
                          "entries the generated tokens are forced to (README: tools and reasoning)"};
    specs[n++] = (di_arg){"-v", "--verbose", DI_ARG_FLAG, &verbose, 0, 0, "log each request"};
    const char *pos[1];
    int npos = 0;
    int rc = di_args_parse("serve", "-m MODEL [--host H] [--port P] [--api-key K] [options]", specs, n, argc,
                           argv, pos, 0, &npos);
    if (rc) return rc == 1 ? 0 : 2;
    if (!api_key) api_key = getenv("DEEPINFER_API_KEY");
    if (api_key && !api_key[0]) api_key = NULL;

    /* Block the stop signals before any thread exists, so all inherit it. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN); /* a vanished client must not kill the server */

    di_engine *e = di_gen_engine_open("serve", &o);
    if (!e) return 1;
    char *model_id = name ? NULL : model_id_from_path(o.model);
    sp.host = host;
    /* --ep: every rank is a data-parallel replica with its own scheduler
     * and listener, rank r on port + r (any free port with 0) */
    if (port && port + di_gen_rank() > 65535) {
        fprintf(stderr, "deepinfer serve: --port %lld + rank %d is past 65535\n", (long long)port, di_gen_rank());
        free(model_id);
        di_engine_free(e);
        return 1;
    }
    sp.port = (uint16_t)(port ? port + di_gen_rank() : 0);
    sp.api_key = api_key;
    sp.model_name = name ? name : model_id;
    sp.max_queue = (int32_t)max_queue;
    sp.max_body_bytes = (size_t)max_body;
    sp.max_header_bytes = (size_t)max_header;
    sp.max_connections = (int32_t)max_conn;
    sp.idle_timeout_s = (int32_t)idle;
    sp.max_n = (int32_t)max_n;
    sp.sampling = di_gen_sampling(&o);
    sp.has_default_seed = o.seed >= 0;
    sp.default_seed = o.seed >= 0 ? (uint64_t)o.seed : 0;
    sp.default_max_tokens = (int32_t)o.max_tokens;
    sp.verbose = verbose;
    sp.cors_origin = cors;
    sp.role = role;
    sp.test_scripted_output = scripted;
    di_server *srv = NULL;
    di_error err;
    if (di_server_create(e, &sp, &srv, &err)) {
        fprintf(stderr, "deepinfer serve: %s\n", err.msg);
        free(model_id);
        di_engine_free(e);
        return 1;
    }
    di_model_desc d;
    di_engine_describe(e, &d);
    char rank_note[64] = "";
    if (di_gen_ranks() > 1)
        snprintf(rank_note, sizeof rank_note, " [rank %d of %d, --ep]", di_gen_rank(), di_gen_ranks());
    printf("deepinfer serve: listening on http://%s:%u (model '%s', context %d, %d threads, role %s)%s%s\n", host,
           (unsigned)di_server_port(srv), sp.model_name, d.n_ctx, d.n_threads, role ? role : "both",
           api_key ? ", API key required" : "", rank_note);
    fflush(stdout);

    int sig = 0;
    sigwait(&set, &sig);
    fprintf(stderr, "deepinfer serve: %s, shutting down (a second signal cancels running requests)\n",
            sig == SIGINT ? "SIGINT" : "SIGTERM");
    /* Drain on a helper thread; a second signal here cuts the grace short. */
    shutdown_ctx sc = {.srv = srv, .grace_ms = (int32_t)(grace_s * 1000)};
    atomic_init(&sc.done, false);
    pthread_t th;
    if (pthread_create(&th, NULL, shutdown_main, &sc) == 0) {
        while (!atomic_load(&sc.done)) {
            struct timespec ts = {0, 100 * 1000000L};
            if (sigtimedwait(&set, NULL, &ts) > 0) {
                fprintf(stderr, "deepinfer serve: cancelling running requests\n");
                di_server_cancel_all(srv);
            }
        }
        pthread_join(th, NULL);
    } else {
        di_server_shutdown(srv, 0);
    }
    di_server_free(srv);
    free(model_id);
    di_gen_engine_close(e);
    fprintf(stderr, "deepinfer serve: stopped\n");
    return 0;
}
