/* The pieces of `deepinfer bench serve` (the OpenAI-compatible load
 * generator) that need no network, so they can be unit-tested alone:
 *
 *   sse.c       incremental Server-Sent-Events parser (bytes in, events out)
 *   stats.c     percentiles and latency summaries
 *   workload.c  seeded request generator: length distributions, multi-turn
 *               conversations with a shared system prompt, JSONL prompts
 *   record.c    the run record (JSON): latency, counts, goodput, cost
 *
 * The HTTP side (libcurl) lives in tools/bench_serve_*.c. Every input here
 * (server bytes, workload specs, prompt files) is untrusted: errors come back
 * as di_status with a message, never an abort. */
#ifndef DI_LOADGEN_H
#define DI_LOADGEN_H

#include "deepinfer.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- SSE (sse.c) --------------------------------------------------------
 * Fed any split of the byte stream, it calls on_event once per complete
 * event with the joined `data:` lines (WHATWG rules: lines end in LF, CRLF
 * or CR; one space after the colon is dropped; comments and other fields are
 * ignored; an event without data lines is not delivered). */
typedef int (*di_sse_event_fn)(void *user, const char *data, size_t n_bytes); /* nonzero: stop */

typedef struct di_sse_parser {
    char *line;          /* (line_cap) the line being read */
    size_t line_len, line_cap;
    char *data;          /* (data_cap) data of the event being read */
    size_t data_len, data_cap;
    size_t max_event_bytes; /* a line or an event past this is an error */
    bool after_cr;       /* last byte was CR: a following LF is the same line end */
    bool has_data;
} di_sse_parser;

void di_sse_init(di_sse_parser *p, size_t max_event_bytes);
/* DI_ERR_FULL past max_event_bytes, DI_ERR_CANCELLED when on_event stopped it. */
di_status di_sse_feed(di_sse_parser *p, const char *buf, size_t n_bytes, di_sse_event_fn on_event,
                      void *user, di_error *err);
/* True when bytes of an unfinished line or event are pending. */
bool di_sse_pending(const di_sse_parser *p);
void di_sse_free(di_sse_parser *p);

/* ---- statistics (stats.c) ----------------------------------------------- */
/* q in [0, 1] of n sorted values, linear interpolation between closest ranks
 * (numpy's default, Python's statistics.quantiles method='inclusive'). */
double di_lg_percentile(const double *sorted, size_t n, double q);

typedef struct di_lg_summary {
    size_t n;
    double mean, p50, p95, p99, max;
} di_lg_summary;
/* Summarizes x (unsorted, not modified). n = 0 gives all zeros. */
di_status di_lg_summarize(const double *x, size_t n, di_lg_summary *out, di_error *err);

/* ---- workload (workload.c) ---------------------------------------------- */
typedef enum di_lg_len_kind { DI_LG_LEN_FIXED, DI_LG_LEN_UNIFORM, DI_LG_LEN_LOGNORMAL } di_lg_len_kind;

/* A length distribution, in words. fixed:N, uniform:LO:HI,
 * lognormal:MEAN:P99 (mu, sigma solved so the mean and the 99th percentile
 * are the given ones; samples are clamped to [1, DI_LG_MAX_LEN]). */
typedef struct di_lg_len {
    di_lg_len_kind kind;
    double a, b;       /* fixed: a; uniform: [a, b]; lognormal: mean a, p99 b */
    double mu, sigma;  /* lognormal parameters (of ln x) */
} di_lg_len;

#define DI_LG_MAX_LEN 100000

di_status di_lg_len_parse(const char *spec, di_lg_len *out, di_error *err);
int64_t di_lg_len_sample(const di_lg_len *d, uint64_t *rng);
/* Writes "fixed:64" / "uniform:8:32" / "lognormal:100:400" (for records). */
void di_lg_len_format(const di_lg_len *d, char *buf, size_t cap);

/* splitmix64 step and a uniform double in [0, 1). */
uint64_t di_lg_rng_next(uint64_t *state);
double di_lg_rng_uniform(uint64_t *state);

/* What to send. Parsed from "turns=3,system=200,shared=0.8,input=...,
 * output=...,prompts=FILE,seed=1" (every key optional). */
typedef struct di_lg_workload {
    int32_t turns;          /* user turns per conversation (1: single-shot) */
    int32_t system_words;   /* system prompt length (0: none) */
    double shared_fraction; /* conversations whose system prompt is the shared one */
    di_lg_len input;        /* user message length per turn */
    di_lg_len output;       /* max_tokens per turn */
    uint64_t seed;
    char prompts_path[512]; /* JSONL of real prompts ("" = synthetic) */
    char **prompts;         /* (n_prompts) user messages from the file */
    size_t n_prompts;
} di_lg_workload;

di_status di_lg_workload_parse(const char *spec, di_lg_workload *out, di_error *err);
/* Reads prompts_path: each line {"prompt": "..."} or {"messages": [..]}
 * (the last user message is taken) or a JSON string. Bad lines are an error
 * naming the line. */
di_status di_lg_workload_load(di_lg_workload *w, di_error *err);
/* The workload as a JSON object for the record (caller owns it). */
json_t *di_lg_workload_json(const di_lg_workload *w);
void di_lg_workload_free(di_lg_workload *w);

/* One conversation: its messages so far, as sent. Conversation i's text
 * depends only on (seed, i, turn), so two runs send the same user turns;
 * the assistant turns are the server's own replies. */
typedef struct di_lg_conv {
    int64_t index;
    int32_t turn;      /* turns already sent */
    bool shared_system;
    uint64_t rng;
    json_t *messages;  /* owned array of {"role", "content"} */
} di_lg_conv;

di_status di_lg_conv_start(const di_lg_workload *w, int64_t index, di_lg_conv *c, di_error *err);
/* True when the conversation has turns left. */
bool di_lg_conv_more(const di_lg_workload *w, const di_lg_conv *c);
/* Appends the next user turn; *body is a new object {"messages": [...],
 * "max_tokens": N} the caller completes and frees. */
di_status di_lg_conv_next(const di_lg_workload *w, di_lg_conv *c, json_t **body, di_error *err);
/* Appends the assistant's reply to the history. */
di_status di_lg_conv_reply(di_lg_conv *c, const char *text, di_error *err);
void di_lg_conv_free(di_lg_conv *c);

/* ---- the record (record.c) ---------------------------------------------- */
typedef enum di_lg_outcome { DI_LG_OK, DI_LG_ERROR, DI_LG_TIMEOUT } di_lg_outcome;

/* One request as measured by the client. Times in ms from its send. */
typedef struct di_lg_sample {
    di_lg_outcome outcome;
    char reason[160];        /* why, for errors and timeouts */
    double t_start_s;        /* send time from the run's start */
    double ttft_ms, e2e_ms;  /* first content byte; last byte */
    double tpot_ms;          /* (e2e - ttft) / (output_tokens - 1); 0 if < 2 tokens */
    int64_t prompt_tokens, output_tokens, cached_tokens; /* from usage (-1: not reported) */
    int32_t n_chunks;        /* content-bearing SSE events */
} di_lg_sample;

typedef struct di_lg_slo {
    double ttft_ms, tpot_ms; /* a request meets the SLO when within both */
} di_lg_slo;

typedef struct di_lg_price {
    double cost_per_hour;    /* < 0: not given */
    double power_watts;      /* < 0: not given */
} di_lg_price;

/* The measured half of the record: latency summaries, counts, throughput,
 * goodput, cost. itl_ms (n_itl) are all inter-token gaps of ok requests.
 * busy_s is the time with at least one request in flight. */
json_t *di_lg_record_metrics(const di_lg_sample *s, size_t n, const double *itl_ms, size_t n_itl,
                             double duration_s, double busy_s, const di_lg_slo *slo,
                             const di_lg_price *price, bool with_samples, di_error *err);

#endif
