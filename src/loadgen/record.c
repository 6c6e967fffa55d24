/* The measured half of a `bench serve` record (steps 5-7 of the evaluation
 * plan): latency percentiles, request counts, throughput, goodput under the
 * SLO, and cost per million delivered output tokens. The caller adds steps
 * 1-4 (model, engine, hardware, workload), which it discovers or is told. */
#include "loadgen/loadgen.h"

#include "base/alloc.h"
#include "base/status.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static json_t *summary_json(const double *x, size_t n, di_error *err) {
    di_lg_summary s;
    if (di_lg_summarize(x, n, &s, err)) return NULL;
    return json_pack("{s:f, s:f, s:f, s:f, s:f, s:I}", "p50", s.p50, "p95", s.p95, "p99", s.p99, "mean", s.mean,
                     "max", s.max, "n", (json_int_t)s.n);
}

static const char *outcome_name(di_lg_outcome o) {
    return o == DI_LG_OK ? "ok" : o == DI_LG_TIMEOUT ? "timeout" : "error";
}

/* {"reason": count} over errors and timeouts. */
static json_t *reasons_json(const di_lg_sample *s, size_t n) {
    json_t *r = json_object();
    for (size_t i = 0; r && i < n; i++) {
        if (s[i].outcome == DI_LG_OK) continue;
        const char *k = s[i].reason[0] ? s[i].reason : "unknown";
        json_int_t c = json_integer_value(json_object_get(r, k));
        json_object_set_new(r, k, json_integer(c + 1));
    }
    return r;
}

static json_t *nullable(double v) {
    return v >= 0 && isfinite(v) ? json_real(v) : json_null();
}

json_t *di_lg_record_metrics(const di_lg_sample *s, size_t n, const double *itl_ms, size_t n_itl,
                             double duration_s, double busy_s, const di_lg_slo *slo,
                             const di_lg_price *price, bool with_samples, di_error *err) {
    double *ttft = di_malloc_array(n ? n : 1, sizeof *ttft);
    double *tpot = di_malloc_array(n ? n : 1, sizeof *tpot);
    double *e2e = di_malloc_array(n ? n : 1, sizeof *e2e);
    json_t *out = NULL;
    if (!ttft || !tpot || !e2e) {
        di_error_set(err, DI_ERR_NOMEM, "record of %zu samples", n);
        goto done;
    }
    size_t n_ok = 0, n_err = 0, n_tmo = 0, n_tpot = 0, n_good = 0;
    int64_t out_tokens = 0, prompt_tokens = 0, cached_tokens = 0;
    bool cached_known = false;
    for (size_t i = 0; i < n; i++) {
        const di_lg_sample *x = &s[i];
        if (x->outcome == DI_LG_ERROR) n_err++;
        if (x->outcome == DI_LG_TIMEOUT) n_tmo++;
        if (x->outcome != DI_LG_OK) continue;
        ttft[n_ok] = x->ttft_ms;
        e2e[n_ok] = x->e2e_ms;
        n_ok++;
        if (x->output_tokens > 1) tpot[n_tpot++] = x->tpot_ms;
        out_tokens += x->output_tokens > 0 ? x->output_tokens : 0;
        prompt_tokens += x->prompt_tokens > 0 ? x->prompt_tokens : 0;
        if (x->cached_tokens >= 0) {
            cached_known = true;
            cached_tokens += x->cached_tokens;
        }
        /* a one-token answer has no TPOT: it meets that half of the SLO */
        bool good = x->ttft_ms <= slo->ttft_ms && (x->output_tokens < 2 || x->tpot_ms <= slo->tpot_ms);
        n_good += good;
    }
    double dur = duration_s > 0 ? duration_s : 1e-9;
    json_t *t = summary_json(ttft, n_ok, err), *p = summary_json(tpot, n_tpot, err),
           *e = summary_json(e2e, n_ok, err), *it = summary_json(itl_ms, n_itl, err);
    out = json_object();
    if (!t || !p || !e || !it || !out) {
        json_decref(t), json_decref(p), json_decref(e), json_decref(it), json_decref(out);
        out = NULL;
        di_error_set(err, DI_ERR_NOMEM, "record");
        goto done;
    }
    json_object_set_new(out, "ttft_ms", t);
    json_object_set_new(out, "tpot_ms", p);
    json_object_set_new(out, "itl_ms", it);
    json_object_set_new(out, "e2e_ms", e);
    json_object_set_new(out, "requests",
                        json_pack("{s:I, s:I, s:I, s:I, s:f, s:f, s:o}", "sent", (json_int_t)n, "ok",
                                  (json_int_t)n_ok, "errors", (json_int_t)n_err, "timeouts", (json_int_t)n_tmo,
                                  "error_rate", n ? (double)n_err / (double)n : 0.0, "timeout_rate",
                                  n ? (double)n_tmo / (double)n : 0.0, "reasons", reasons_json(s, n)));
    json_object_set_new(out, "duration_s", json_real(duration_s));
    json_object_set_new(out, "busy_fraction", json_real(duration_s > 0 ? busy_s / duration_s : 0));
    json_object_set_new(out, "output_tokens", json_integer(out_tokens));
    json_object_set_new(out, "prompt_tokens", json_integer(prompt_tokens));
    json_object_set_new(out, "output_tokens_per_s", json_real((double)out_tokens / dur));
    json_object_set_new(out, "requests_per_s", json_real((double)n_ok / dur));
    json_object_set_new(out, "slo", json_pack("{s:f, s:f}", "ttft_ms", slo->ttft_ms, "tpot_ms", slo->tpot_ms));
    json_object_set_new(out, "goodput_requests_per_s", json_real((double)n_good / dur));
    json_object_set_new(out, "slo_attainment", json_real(n ? (double)n_good / (double)n : 0));
    /* prefix-cache hit rate: cached prompt tokens / prompt tokens, from usage */
    json_object_set_new(out, "prefix_cache_hit_rate",
                        cached_known && prompt_tokens > 0 ? json_real((double)cached_tokens / (double)prompt_tokens)
                                                          : json_null());
    /* Cost: the machine is paid for the whole run, busy or idle, so idle
     * capacity and failed requests raise the price of delivered tokens. */
    double hours = duration_s / 3600.0;
    bool priced = price->cost_per_hour >= 0 && out_tokens > 0;
    json_object_set_new(out, "cost_per_hour", nullable(price->cost_per_hour));
    json_object_set_new(out, "cost_per_million_output_tokens",
                        priced ? json_real(price->cost_per_hour * hours / ((double)out_tokens / 1e6)) : json_null());
    bool powered = price->power_watts >= 0 && out_tokens > 0;
    json_object_set_new(out, "power_watts", nullable(price->power_watts));
    json_object_set_new(out, "energy_wh_per_million_output_tokens",
                        powered ? json_real(price->power_watts * hours / ((double)out_tokens / 1e6)) : json_null());
    if (with_samples) {
        json_t *arr = json_array();
        for (size_t i = 0; arr && i < n; i++) {
            const di_lg_sample *x = &s[i];
            json_t *o = json_pack("{s:s, s:f, s:f, s:f, s:f, s:I, s:I, s:I}", "outcome", outcome_name(x->outcome),
                                  "t_start_s", x->t_start_s, "ttft_ms", x->ttft_ms, "tpot_ms", x->tpot_ms, "e2e_ms",
                                  x->e2e_ms, "prompt_tokens", (json_int_t)x->prompt_tokens, "output_tokens",
                                  (json_int_t)x->output_tokens, "cached_tokens", (json_int_t)x->cached_tokens);
            if (o && x->outcome != DI_LG_OK) json_object_set_new(o, "reason", json_string(x->reason));
            json_array_append_new(arr, o);
        }
        json_object_set_new(out, "samples", arr);
    }
done:
    free(ttft);
    free(tpot);
    free(e2e);
    return out;
}
