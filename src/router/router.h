/* `deepinfer route`: one OpenAI endpoint in front of N engine processes
 * (`deepinfer serve`, data-parallel replicas of one model).
 *
 * Each generation request (POST /v1/chat/completions, /v1/completions) goes
 * to one engine: with the affinity policy the one that holds the longest
 * cached prefix of its prompt as far as the router learned it
 * (router/affinity.h), traded against load: score = matched prefix bytes -
 * balance_bytes x requests in flight there (ties: fewest in flight, then
 * round robin); with round-robin the next engine in turn. Answers, SSE
 * streams included, are passed through as they arrive. An engine that
 * cannot be reached, or fails before its answer is complete, is taken out of
 * rotation for down_ms (then tried again) and the request is retried on
 * another engine; a stream that already started when its engine died ends
 * with an OpenAI error event and [DONE]. When no engine is left the client
 * gets 503. GET /metrics: the router's counters, per engine and in total;
 * GET /health: 200 while an engine is up; GET /v1/models: from an engine.
 *
 * Lifecycle: di_router_create starts listening; di_router_free stops. */
#ifndef DI_ROUTER_ROUTER_H
#define DI_ROUTER_ROUTER_H

#include "base/status.h"

#include <stddef.h>
#include <stdint.h>

#define DI_ROUTER_MAX_ENGINES 64

typedef enum di_route_policy { DI_ROUTE_AFFINITY = 0, DI_ROUTE_ROUND_ROBIN } di_route_policy;

typedef struct di_router_params {
    const char *host;             /* bind address; NULL = 127.0.0.1 */
    uint16_t port;                /* 0 = any free port */
    const char *const *engines;   /* (n_engines) "http://host:port" */
    int32_t n_engines;
    di_route_policy policy;
    double balance_bytes;         /* prompt bytes one in-flight request is worth (affinity) */
    int32_t down_ms;              /* a failed engine stays out this long */
    int32_t timeout_ms;           /* connect / silence limit towards an engine */
    size_t max_body_bytes;
    int32_t max_connections;
} di_router_params;

di_router_params di_router_params_default(void);

typedef struct di_router di_router;
di_status di_router_create(const di_router_params *p, di_router **out, di_error *err);
uint16_t di_router_port(const di_router *r);
void di_router_free(di_router *r);

#endif
