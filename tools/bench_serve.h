/* `deepinfer bench serve` and `deepinfer bench plot`: the pieces of the
 * command (tools/bench_serve_*.c). The network-free parts (SSE parser,
 * percentiles, workload, record) are in src/loadgen/ with unit tests. */
#ifndef DI_TOOLS_BENCH_SERVE_H
#define DI_TOOLS_BENCH_SERVE_H

#include "loadgen/loadgen.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct bs_opts {
    const char *url;        /* base URL, without /v1 */
    const char *api_key;    /* NULL: no Authorization header */
    const char *model;      /* NULL: the first id of GET /v1/models */
    di_lg_workload wl;
    int64_t requests;       /* per point */
    double duration_s;      /* per point: no new request after this */
    double timeout_s;       /* per request, whole answer */
    double stall_s;         /* per request, longest gap between bytes */
    int64_t max_inflight;   /* open-loop mode: most requests in flight */
    double temperature;
    bool ignore_eos;        /* send "ignore_eos": true (llama.cpp, vLLM, ours) */
    bool quiet;             /* no progress line */
} bs_opts;

/* One point of a run: every request's sample and all inter-token gaps. */
typedef struct bs_result {
    di_lg_sample *s;  /* (n) */
    size_t n, cap;
    double *itl_ms;   /* (n_itl) */
    size_t n_itl, cap_itl;
    double duration_s, busy_s;
    int64_t n_conversations;
    bool interrupted; /* Ctrl-C: what was in flight is cancelled, the sweep stops */
} bs_result;

/* Runs one point: open-loop Poisson arrivals at rate (requests/s) when
 * rate > 0, else concurrency closed-loop users. Returns 0, or 1 when the
 * client itself failed (out of memory, curl); every server failure is a
 * counted sample, never a failure of the run. */
int bs_run(const bs_opts *o, double rate, int64_t concurrency, bs_result *res, di_error *err);
void bs_result_free(bs_result *r);
/* From now on Ctrl-C (SIGINT) ends the current point: bs_run cancels what
 * is in flight, returns what finished and sets res->interrupted. */
void bs_catch_sigint(void);

/* GET URL into a new string (at most max_bytes); 0 ok. *code = HTTP status;
 * server_hdr (cap 128) receives the Server header when non-NULL. */
int bs_http_get(const char *url, const char *api_key, double timeout_s, size_t max_bytes, char **body,
                long *code, char *server_hdr, di_error *err);

/* Steps 1-3 of the record: model (from /v1/models), engine (Server header,
 * our /metrics build info, user's --engine-name), hardware (this machine:
 * CPU, memory, GPU, load average). *model_id gets the id to send when
 * o->model is NULL (caller frees). */
int bs_discover(const bs_opts *o, const char *engine_name, json_t **model, json_t **engine, json_t **hardware,
                char **model_id, di_error *err);
/* Load average now (1 min), -1 when unknown. */
double bs_loadavg(void);

/* deepinfer bench plot: Pareto SVG of records through gnuplot. */
int di_cmd_bench_plot(int argc, char **argv);
int di_cmd_bench_serve(int argc, char **argv);

#endif
