/* deepinfer route: one OpenAI endpoint over N `deepinfer serve` engines
 * (src/router/router.h). Engines are given as URLs, each after --engine or
 * as plain arguments. SIGINT/SIGTERM stop it. */
#include "args.h"
#include "router/router.h"
#include "tools.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int di_cmd_route(int argc, char **argv) {
    di_router_params rp = di_router_params_default();
    const char *host = "127.0.0.1", *policy = "affinity";
    int64_t port = 8080, max_body = (int64_t)rp.max_body_bytes, down_ms = rp.down_ms, max_conn = rp.max_connections;
    double balance = rp.balance_bytes, timeout_s = rp.timeout_ms / 1000.0;
    /* --engine URL pairs become positional URLs. */
    char **args = calloc((size_t)argc + 1, sizeof *args);
    if (!args) return 1;
    int nargs = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--engine") && i + 1 < argc) {
            args[nargs++] = argv[++i];
            continue;
        }
        args[nargs++] = argv[i];
    }
    di_arg specs[] = {
        {"--host", NULL, DI_ARG_STR, &host, 0, 0, "address to listen on (127.0.0.1)"},
        {"--port", NULL, DI_ARG_INT, &port, 0, 65535, "port (8080; 0 = any free port)"},
        {"--policy", NULL, DI_ARG_STR, &policy, 0, 0, "affinity (prefix cache, balanced by load) or round-robin"},
        {"--balance-bytes", NULL, DI_ARG_FLOAT, &balance, 0, 1e12,
         "affinity: prompt bytes already cached that outweigh one request in flight (1024)"},
        {"--down-ms", NULL, DI_ARG_INT, &down_ms, 0, 86400000, "a failed engine stays out this long (2000)"},
        {"--timeout", NULL, DI_ARG_FLOAT, &timeout_s, 0.001, 86400, "seconds an engine may stay silent (600)"},
        {"--max-body-bytes", NULL, DI_ARG_INT, &max_body, 2, 1 << 30, "largest request body (1 MiB)"},
        {"--max-connections", NULL, DI_ARG_INT, &max_conn, 1, 65536, "open client connections (256)"},
    };
    const char *engines[DI_ROUTER_MAX_ENGINES];
    int n_eng = 0;
    int rc = di_args_parse("route", "[--port P] [--policy affinity|round-robin] --engine URL [--engine URL ...]",
                           specs, (int)(sizeof specs / sizeof specs[0]), nargs, args, engines,
                           DI_ROUTER_MAX_ENGINES, &n_eng);
    if (rc) {
        free(args);
        return rc == 1 ? 0 : 2;
    }
    if (strcmp(policy, "affinity") && strcmp(policy, "round-robin")) {
        fprintf(stderr, "deepinfer route: --policy must be affinity or round-robin\n");
        free(args);
        return 2;
    }
    rp.host = host;
    rp.port = (uint16_t)port;
    rp.engines = engines;
    rp.n_engines = n_eng;
    rp.policy = strcmp(policy, "affinity") ? DI_ROUTE_ROUND_ROBIN : DI_ROUTE_AFFINITY;
    rp.balance_bytes = balance;
    rp.down_ms = (int32_t)down_ms;
    rp.timeout_ms = (int32_t)(timeout_s * 1000);
    rp.max_body_bytes = (size_t)max_body;
    rp.max_connections = (int32_t)max_conn;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    di_router *r = NULL;
    di_error err;
    if (di_router_create(&rp, &r, &err)) {
        fprintf(stderr, "deepinfer route: %s\n", err.msg);
        free(args);
        return n_eng ? 1 : 2;
    }
    printf("deepinfer route: listening on http://%s:%u (%d engines, %s)\n", host, (unsigned)di_router_port(r), n_eng,
           policy);
    fflush(stdout);
    int sig = 0;
    sigwait(&set, &sig);
    di_router_free(r);
    free(args);
    fprintf(stderr, "deepinfer route: stopped\n");
    return 0;
}
