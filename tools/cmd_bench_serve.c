/* deepinfer bench serve: a load generator for any OpenAI-compatible server
 * (ours, llama.cpp's llama-server, vLLM), writing one JSON record per point
 * with the seven steps of a fair comparison: model, engine, hardware,
 * workload (what was measured), latency, throughput under the SLO, cost.
 *
 *   deepinfer bench serve --url http://127.0.0.1:8080 --concurrency 8 \
 *       --workload turns=3,system=200,shared=1,input=uniform:16:64,output=fixed:64 \
 *       --out run.jsonl
 *
 * --sweep concurrency:1,2,4 (or rate:0.5,1,2) runs one point per value;
 * each point is one line of --out (JSON Lines; a single point is a plain
 * JSON file). A table row per point goes to stdout, progress to stderr. */
#include "args.h"
#include "bench_serve.h"
#include "tools.h"

#include "base/alloc.h"
#include "base/status.h"

#include <curl/curl.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_SWEEP 64

typedef struct sweep {
    bool by_rate;
    double v[MAX_SWEEP];
    int n;
} sweep;

static bool parse_sweep(const char *s, sweep *sw) {
    memset(sw, 0, sizeof *sw);
    const char *list;
    if (!strncmp(s, "concurrency:", 12)) list = s + 12;
    else if (!strncmp(s, "rate:", 5)) list = s + 5, sw->by_rate = true;
    else return false;
    while (*list) {
        char *end;
        errno = 0;
        double v = strtod(list, &end);
        if (errno || end == list || !(v > 0) || sw->n == MAX_SWEEP) return false;
        if (!sw->by_rate && (v != floor(v) || v > 4096)) return false;
        sw->v[sw->n++] = v;
        if (*end == ',') end++;
        else if (*end) return false;
        list = end;
    }
    return sw->n > 0;
}

static void iso_now(char *buf, size_t cap) {
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static void table_header(void) {
    printf("%8s %6s %5s %5s %4s %4s %15s %15s %9s %8s %9s %8s\n", "users", "rate", "sent", "ok", "err", "tmo",
           "ttft p50/p99", "tpot p50/p99", "e2e p99", "tok/s", "goodput/s", "$/Mtok");
}

static double num(json_t *o, const char *k1, const char *k2) {
    json_t *v = json_object_get(o, k1);
    if (k2) v = json_object_get(v, k2);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

static void table_row(json_t *rec, double rate, int64_t users) {
    char r[16], u[16], cost[16];
    snprintf(r, sizeof r, rate > 0 ? "%.2f" : "-", rate);
    snprintf(u, sizeof u, users > 0 ? "%lld" : "-", (long long)users);
    double c = num(rec, "cost_per_million_output_tokens", NULL);
    snprintf(cost, sizeof cost, isnan(c) ? "-" : "%.3f", c);
    char ttft[32], tpot[32];
    snprintf(ttft, sizeof ttft, "%.0f/%.0f", num(rec, "ttft_ms", "p50"), num(rec, "ttft_ms", "p99"));
    snprintf(tpot, sizeof tpot, "%.1f/%.1f", num(rec, "tpot_ms", "p50"), num(rec, "tpot_ms", "p99"));
    printf("%8s %6s %5.0f %5.0f %4.0f %4.0f %15s %15s %9.0f %8.1f %9.3f %8s\n", u, r,
           num(rec, "requests", "sent"), num(rec, "requests", "ok"), num(rec, "requests", "errors"),
           num(rec, "requests", "timeouts"), ttft, tpot, num(rec, "e2e_ms", "p99"),
           num(rec, "output_tokens_per_s", NULL), num(rec, "goodput_requests_per_s", NULL), cost);
    fflush(stdout);
}

/* Strips trailing slashes and a trailing /v1 (both spellings are common). */
static char *base_url(const char *u) {
    char *s = di_strdup(u);
    if (!s) return NULL;
    size_t n = strlen(s);
    while (n && s[n - 1] == '/') s[--n] = 0;
    if (n >= 3 && !strcmp(s + n - 3, "/v1")) s[n -= 3] = 0;
    return s;
}

int di_cmd_bench_serve(int argc, char **argv) {
    const char *url = NULL, *api_key = NULL, *model = NULL, *workload = NULL, *sweep_s = NULL, *out = NULL,
               *note = NULL, *engine_name = NULL;
    double rate = 0, duration = 300, timeout = 120, stall = 30, slo_ttft = 1000, slo_tpot = 100, cost = -1,
           watts = -1, temp = 0;
    int64_t conc = 0, requests = 64, max_inflight = 256;
    bool ignore_eos = false, no_samples = false, quiet = false;
    di_arg specs[] = {
        {"--url", NULL, DI_ARG_STR, &url, 0, 0, "server base URL, e.g. http://127.0.0.1:8080 (required)"},
        {"--api-key", NULL, DI_ARG_STR, &api_key, 0, 0, "Bearer token (default: $OPENAI_API_KEY if set)"},
        {"--model", NULL, DI_ARG_STR, &model, 0, 0, "model id to send (default: first of /v1/models)"},
        {"--workload", NULL, DI_ARG_STR, &workload, 0, 0,
         "turns=N,system=WORDS,shared=FRAC,input=LEN,output=LEN,prompts=FILE.jsonl,seed=S; "
         "LEN = fixed:N | uniform:LO:HI | lognormal:MEAN:P99"},
        {"--rate", NULL, DI_ARG_FLOAT, &rate, 1e-6, 1e6, "open loop: Poisson arrivals, requests/s"},
        {"--concurrency", "-c", DI_ARG_INT, &conc, 1, 4096, "closed loop: N users (default 1)"},
        {"--sweep", NULL, DI_ARG_STR, &sweep_s, 0, 0, "concurrency:1,2,4,... or rate:0.5,1,... (one point each)"},
        {"--requests", "-n", DI_ARG_INT, &requests, 1, 1 << 24, "requests per point (64)"},
        {"--duration", NULL, DI_ARG_FLOAT, &duration, 0.1, 86400, "per point: no new request after S seconds (300)"},
        {"--timeout", NULL, DI_ARG_FLOAT, &timeout, 0.1, 86400, "per request: whole answer within S seconds (120)"},
        {"--stall", NULL, DI_ARG_FLOAT, &stall, 0.05, 86400, "per request: no byte for S seconds is a timeout (30)"},
        {"--max-inflight", NULL, DI_ARG_INT, &max_inflight, 1, 4096, "open loop: most requests in flight (256)"},
        {"--temp", NULL, DI_ARG_FLOAT, &temp, 0, 2, "sampling temperature sent (0)"},
        {"--ignore-eos", NULL, DI_ARG_FLAG, &ignore_eos, 0, 0, "send ignore_eos (every answer max_tokens long)"},
        {"--slo-ttft-ms", NULL, DI_ARG_FLOAT, &slo_ttft, 0, 1e9, "goodput: TTFT within (1000)"},
        {"--slo-tpot-ms", NULL, DI_ARG_FLOAT, &slo_tpot, 0, 1e9, "goodput: TPOT within (100)"},
        {"--cost-per-hour", NULL, DI_ARG_FLOAT, &cost, 0, 1e9, "price of the server machine per hour"},
        {"--power-watts", NULL, DI_ARG_FLOAT, &watts, 0, 1e9, "power draw of the server machine"},
        {"--note", NULL, DI_ARG_STR, &note, 0, 0, "free text kept in the record"},
        {"--engine-name", NULL, DI_ARG_STR, &engine_name, 0, 0, "engine name for the record and plot"},
        {"--out", "-o", DI_ARG_STR, &out, 0, 0, "record file (JSON; JSON Lines with --sweep)"},
        {"--no-samples", NULL, DI_ARG_FLAG, &no_samples, 0, 0, "leave the per-request samples out of the record"},
        {"--quiet", "-q", DI_ARG_FLAG, &quiet, 0, 0, "no progress line"},
    };
    const char *pos[1];
    int npos = 0;
    int rc = di_args_parse("bench serve", "--url URL [--concurrency N | --rate R | --sweep ...] [--workload SPEC] "
                                          "[--out FILE]",
                           specs, (int)(sizeof specs / sizeof specs[0]), argc, argv, pos, 0, &npos);
    if (rc) return rc == 1 ? 0 : 2;
    if (!url) return fprintf(stderr, "bench serve: --url is required\n"), 2;
    if (rate > 0 && conc > 0) return fprintf(stderr, "bench serve: --rate and --concurrency exclude each other\n"), 2;
    if (!api_key) api_key = getenv("OPENAI_API_KEY");
    sweep sw = {0};
    if (sweep_s && !parse_sweep(sweep_s, &sw))
        return fprintf(stderr, "bench serve: bad --sweep '%s' (concurrency:1,2,4 or rate:0.5,1,2)\n", sweep_s), 2;
    if (!sweep_s) {
        sw.by_rate = rate > 0;
        sw.v[0] = rate > 0 ? rate : conc > 0 ? (double)conc : 1;
        sw.n = 1;
    }
    bs_opts o = {.api_key = api_key, .model = model, .requests = requests, .duration_s = duration,
                 .timeout_s = timeout, .stall_s = stall, .max_inflight = max_inflight, .temperature = temp,
                 .ignore_eos = ignore_eos, .quiet = quiet};
    di_error err = {0};
    if (di_lg_workload_parse(workload, &o.wl, &err) || di_lg_workload_load(&o.wl, &err)) {
        fprintf(stderr, "bench serve: %s\n", err.msg);
        di_lg_workload_free(&o.wl);
        return 2;
    }
    bs_catch_sigint();
    char *base = base_url(url);
    FILE *fo = NULL;
    json_t *jm = NULL, *je = NULL, *jh = NULL;
    char *model_id = NULL;
    int ret = 1;
    if (!base || curl_global_init(CURL_GLOBAL_DEFAULT)) {
        fprintf(stderr, "bench serve: out of memory\n");
        goto done;
    }
    o.url = base;
    if (bs_discover(&o, engine_name, &jm, &je, &jh, &model_id, &err)) {
        fprintf(stderr, "bench serve: %s\n", err.msg);
        goto done;
    }
    o.model = model_id;
    if (out && !(fo = fopen(out, "w"))) {
        fprintf(stderr, "bench serve: %s: %s\n", out, strerror(errno));
        goto done;
    }
    fprintf(stderr, "bench serve: %s, model %s, engine %s, %d point(s) of %lld requests\n", base, model_id,
            json_string_value(json_object_get(je, "name")), sw.n, (long long)requests);
    table_header();
    di_lg_slo slo = {slo_ttft, slo_tpot};
    di_lg_price price = {cost, watts};
    ret = 0;
    for (int i = 0; i < sw.n && !ret; i++) {
        double r_i = sw.by_rate ? sw.v[i] : 0;
        int64_t c_i = sw.by_rate ? 0 : (int64_t)sw.v[i];
        char started[32];
        iso_now(started, sizeof started);
        double load0 = bs_loadavg();
        bs_result res;
        if (bs_run(&o, r_i, c_i, &res, &err)) {
            fprintf(stderr, "bench serve: %s\n", err.msg);
            bs_result_free(&res);
            ret = 1;
            break;
        }
        json_t *rec = di_lg_record_metrics(res.s, res.n, res.itl_ms, res.n_itl, res.duration_s, res.busy_s, &slo,
                                           &price, !no_samples, &err);
        json_t *wl = di_lg_workload_json(&o.wl), *hw = json_deep_copy(jh);
        if (!rec || !wl || !hw) {
            fprintf(stderr, "bench serve: %s\n", rec ? "out of memory" : err.msg);
            json_decref(rec), json_decref(wl), json_decref(hw);
            bs_result_free(&res);
            ret = 1;
            break;
        }
        json_object_set_new(wl, "mode", json_string(sw.by_rate ? "poisson" : "concurrency"));
        json_object_set_new(wl, "rate", r_i > 0 ? json_real(r_i) : json_null());
        json_object_set_new(wl, "concurrency", c_i > 0 ? json_integer(c_i) : json_null());
        json_object_set_new(wl, "requests", json_integer(requests));
        json_object_set_new(wl, "conversations", json_integer(res.n_conversations));
        json_object_set_new(wl, "duration_s_max", json_real(duration));
        json_object_set_new(wl, "timeout_s", json_real(timeout));
        json_object_set_new(wl, "stall_s", json_real(stall));
        json_object_set_new(wl, "temperature", json_real(temp));
        json_object_set_new(wl, "ignore_eos", json_boolean(ignore_eos));
        json_object_set_new(hw, "loadavg_start", json_real(load0));
        json_object_set_new(hw, "loadavg_end", json_real(bs_loadavg()));
        json_object_set_new(rec, "schema", json_string("deepinfer-bench-serve/1"));
        json_object_set_new(rec, "started_at", json_string(started));
        json_object_set_new(rec, "model", json_deep_copy(jm));
        json_object_set_new(rec, "engine", json_deep_copy(je));
        json_object_set_new(rec, "hardware", hw);
        json_object_set_new(rec, "workload", wl);
        json_object_set_new(rec, "note", note ? json_string(note) : json_null());
        json_object_set_new(rec, "client", json_pack("{s:s, s:s}", "name", "deepinfer bench serve", "version",
                                                     DI_VERSION_STRING));
        table_row(rec, r_i, c_i);
        if (fo && (json_dumpf(rec, fo, JSON_COMPACT) || fputc('\n', fo) == EOF || fflush(fo))) {
            fprintf(stderr, "bench serve: %s: write failed\n", out);
            ret = 1;
        }
        json_decref(rec);
        bool stop = res.interrupted;
        bs_result_free(&res);
        if (stop) break;
    }
    if (fo && fclose(fo) && !ret) {
        fprintf(stderr, "bench serve: %s: %s\n", out, strerror(errno));
        ret = 1;
    }
    fo = NULL;
done:
    if (fo) fclose(fo);
    json_decref(jm), json_decref(je), json_decref(jh);
    free(model_id);
    free(base);
    di_lg_workload_free(&o.wl);
    curl_global_cleanup();
    return ret;
}
