/* /metrics in the Prometheus text format, and /health.
 *
 * Counters and histograms are recorded as requests finish (engine thread)
 * and as HTTP answers go out (connection threads), under one small mutex.
 * Engine gauges (queue, running, KV blocks, prefix hits) are read from
 * di_engine_get_stats at scrape time, so they are never stale. Names follow
 * Prometheus conventions with a deepinfer_ prefix; latencies are seconds. */
#include "server/server_internal.h"

#include <stdlib.h>
#include <string.h>

/* Bucket upper bounds in ms: covers a fast decode step (TPOT of a few ms on
 * a GPU) to a long queue wait on a loaded CPU. */
static const double BUCKETS_MS[SRV_HIST_BUCKETS] = {5,   10,   25,   50,    100,   250,   500,
                                                    1000, 2500, 5000, 10000, 30000, 60000, 120000};

void srv_metrics_init(srv_metrics *m) {
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
}

void srv_metrics_destroy(srv_metrics *m) {
    pthread_mutex_destroy(&m->mu);
}

static void hist_add(srv_hist *h, double ms) {
    int b = 0;
    while (b < SRV_HIST_BUCKETS && ms > BUCKETS_MS[b]) b++;
    h->counts[b]++;
    h->sum_ms += ms;
    h->n++;
}

void srv_metrics_http(srv_metrics *m, int route, unsigned status) {
    unsigned cls = status / 100;
    if (cls < 1 || cls > 5) cls = 5;
    if (route < 0 || route >= SRV_N_ROUTES) route = SRV_ROUTE_OTHER;
    pthread_mutex_lock(&m->mu);
    m->http[route][cls]++;
    if (status == 503) m->rejected_queue_full++;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_finish(srv_metrics *m, di_finish f, const di_request_stats *st) {
    pthread_mutex_lock(&m->mu);
    if ((unsigned)f < 5) m->finished[f]++;
    m->prompt_tokens += (uint64_t)(st->n_prompt > 0 ? st->n_prompt : 0);
    m->generation_tokens += (uint64_t)(st->n_generated > 0 ? st->n_generated : 0);
    m->cached_tokens += (uint64_t)(st->n_cached > 0 ? st->n_cached : 0);
    if (st->n_generated > 0) {
        hist_add(&m->ttft, st->t_first_token_ms);
        /* TPOT: mean gap between output tokens after the first. */
        if (st->n_generated > 1)
            hist_add(&m->tpot, (st->t_total_ms - st->t_first_token_ms) / (st->n_generated - 1));
    }
    hist_add(&m->e2e, st->t_total_ms);
    hist_add(&m->queue, st->t_queued_ms);
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_disconnect(srv_metrics *m) {
    pthread_mutex_lock(&m->mu);
    m->client_disconnects++;
    pthread_mutex_unlock(&m->mu);
}

static void put_hist(srv_buf *b, const char *name, const char *help, const srv_hist *h) {
    srv_buf_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int i = 0; i < SRV_HIST_BUCKETS; i++) {
        cum += h->counts[i];
        srv_buf_printf(b, "%s_bucket{le=\"%g\"} %llu\n", name, BUCKETS_MS[i] / 1e3, (unsigned long long)cum);
    }
    cum += h->counts[SRV_HIST_BUCKETS];
    srv_buf_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)cum);
    srv_buf_printf(b, "%s_sum %.6f\n%s_count %llu\n", name, h->sum_ms / 1e3, name, (unsigned long long)h->n);
}

static void put_metric(srv_buf *b, const char *name, const char *type, const char *help, double v) {
    srv_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name, v);
}

char *srv_metrics_render(di_server *s, size_t *len) {
    static const char *ROUTE_NAMES[SRV_N_ROUTES] = {"chat_completions", "completions", "responses", "messages", "models",
                                                    "health", "metrics", "tokenize", "detokenize",
                                                    "kv_export", "kv_import", "other"};
    static const char *FINISH_NAMES[5] = {"none", "stop", "length", "cancel", "error"};
    di_engine_stats es;
    di_engine_get_stats(s->engine, &es);
    pthread_mutex_lock(&s->mu);
    int32_t in_flight = s->in_flight, n_conn = s->n_connections;
    pthread_mutex_unlock(&s->mu);

    srv_metrics m;
    pthread_mutex_lock(&s->metrics.mu);
    m = s->metrics; /* snapshot; the copied mutex is never used */
    pthread_mutex_unlock(&s->metrics.mu);

    srv_buf b = {0};
    /* build and kernel facts, for benchmark records (deepinfer bench serve) */
    di_model_desc md;
    di_engine_describe(s->engine, &md);
    srv_buf_printf(&b, "# HELP deepinfer_build_info Version, model architecture, CPU kernel table, threads.\n"
                       "# TYPE deepinfer_build_info gauge\n"
                       "deepinfer_build_info{version=\"%s\",arch=\"%s\",kernels=\"%s\",threads=\"%d\","
                       "n_ctx=\"%d\"} 1\n",
                   DI_VERSION_STRING, md.arch ? md.arch : "", md.kernels ? md.kernels : "", (int)md.n_threads,
                   (int)md.n_ctx);
    srv_buf_printf(&b, "# HELP deepinfer_http_requests_total HTTP answers by route and status class.\n"
                       "# TYPE deepinfer_http_requests_total counter\n");
    for (int r = 0; r < SRV_N_ROUTES; r++)
        for (int c = 1; c <= 5; c++)
            if (m.http[r][c])
                srv_buf_printf(&b, "deepinfer_http_requests_total{route=\"%s\",code=\"%dxx\"} %llu\n",
                               ROUTE_NAMES[r], c, (unsigned long long)m.http[r][c]);
    srv_buf_printf(&b, "# HELP deepinfer_requests_finished_total Engine requests (choices) by finish reason.\n"
                       "# TYPE deepinfer_requests_finished_total counter\n");
    for (int f = 1; f < 5; f++)
        srv_buf_printf(&b, "deepinfer_requests_finished_total{finish_reason=\"%s\"} %llu\n", FINISH_NAMES[f],
                       (unsigned long long)m.finished[f]);
    put_metric(&b, "deepinfer_prompt_tokens_total", "counter", "Prompt tokens of finished requests.",
               (double)m.prompt_tokens);
    put_metric(&b, "deepinfer_generation_tokens_total", "counter", "Generated tokens of finished requests.",
               (double)m.generation_tokens);
    put_metric(&b, "deepinfer_client_disconnects_total", "counter",
               "Requests cancelled because the client went away.", (double)m.client_disconnects);
    put_metric(&b, "deepinfer_requests_rejected_total", "counter", "Requests refused with 503 (queue full or stopping).",
               (double)m.rejected_queue_full);
    put_metric(&b, "deepinfer_requests_in_flight", "gauge", "Engine requests admitted and not finished.",
               in_flight);
    put_metric(&b, "deepinfer_http_connections", "gauge", "Open HTTP connections.", n_conn);
    put_metric(&b, "deepinfer_num_requests_waiting", "gauge", "Engine requests waiting to run (queue depth).",
               es.n_waiting);
    put_metric(&b, "deepinfer_num_requests_running", "gauge", "Sequences running in the engine.", es.n_running);
    put_metric(&b, "deepinfer_kv_blocks_total", "gauge", "KV cache blocks.", es.kv_blocks_total);
    put_metric(&b, "deepinfer_kv_blocks_free", "gauge", "KV blocks free.", es.kv_blocks_free);
    put_metric(&b, "deepinfer_kv_blocks_cached", "gauge", "KV blocks held only by the prefix cache (reusable).",
               es.kv_blocks_cached);
    put_metric(&b, "deepinfer_kv_blocks_used", "gauge", "KV blocks held by running sequences.",
               es.kv_blocks_total - es.kv_blocks_free - es.kv_blocks_cached);
    put_metric(&b, "deepinfer_prefix_cache_hit_tokens_total", "counter", "Prompt tokens served from the prefix cache.",
               (double)es.n_prefix_hit_tokens);
    put_metric(&b, "deepinfer_prefix_cache_queries_tokens_total", "counter", "Prompt tokens admitted.",
               (double)es.n_prompt_tokens);
    put_metric(&b, "deepinfer_prefix_cache_hit_rate", "gauge", "Prefix-cache hit tokens / prompt tokens.",
               es.n_prompt_tokens ? (double)es.n_prefix_hit_tokens / (double)es.n_prompt_tokens : 0.0);
    if (es.kv_disk_on) {
        put_metric(&b, "deepinfer_kv_disk_hit_tokens_total", "counter", "Prompt tokens whose KV came from the disk tier.",
                   (double)es.n_disk_hit_tokens);
        put_metric(&b, "deepinfer_kv_disk_writes_total", "counter", "KV records written to the disk tier.",
                   (double)es.kv_disk_writes);
        put_metric(&b, "deepinfer_kv_disk_write_errors_total", "counter", "Failed disk-tier writes.",
                   (double)es.kv_disk_write_errors);
        put_metric(&b, "deepinfer_kv_disk_hits_total", "counter", "Disk-tier records read and accepted.",
                   (double)es.kv_disk_hits);
        put_metric(&b, "deepinfer_kv_disk_rejected_total", "counter",
                   "Disk-tier records refused (corrupt, truncated, other model).", (double)es.kv_disk_rejected);
        put_metric(&b, "deepinfer_kv_disk_removed_total", "counter", "Disk-tier records removed to stay under the cap.",
                   (double)es.kv_disk_removed);
        put_metric(&b, "deepinfer_kv_disk_bytes", "gauge", "Bytes of records in the disk-tier directory.",
                   (double)es.kv_disk_bytes);
        put_metric(&b, "deepinfer_kv_disk_writes_disabled", "gauge", "1 after a failed write: RAM only.",
                   es.kv_disk_writes_disabled ? 1.0 : 0.0);
    }
    put_metric(&b, "deepinfer_engine_steps_total", "counter", "Engine steps.", (double)es.n_steps);
    put_metric(&b, "deepinfer_preemptions_total", "counter", "Sequences preempted for KV space.",
               (double)es.n_preemptions);
    put_metric(&b, "deepinfer_deferred_steps_total", "counter",
               "Steps that held prompt rows or new requests back for --max-prefill-tokens or --tpot-target-ms.",
               (double)es.n_deferred_steps);
    put_metric(&b, "deepinfer_step_seconds", "gauge", "Measured time of the last engine step.",
               es.last_step_ms / 1e3);
    put_metric(&b, "deepinfer_step_cost_fixed_seconds", "gauge", "Step cost model: time per step.",
               es.step_fixed_ms / 1e3);
    put_metric(&b, "deepinfer_step_cost_decode_row_seconds", "gauge", "Step cost model: time per decode row.",
               es.step_decode_ms / 1e3);
    put_metric(&b, "deepinfer_step_cost_prefill_row_seconds", "gauge", "Step cost model: time per prompt row.",
               es.step_prefill_ms / 1e3);
    /* speculative decoding (vLLM's spec_decode names) */
    put_metric(&b, "deepinfer_spec_decode_num_draft_tokens_total", "counter", "Draft tokens proposed.",
               (double)es.spec_drafted);
    put_metric(&b, "deepinfer_spec_decode_num_verified_tokens_total", "counter", "Draft tokens verified.",
               (double)es.spec_verified);
    put_metric(&b, "deepinfer_spec_decode_num_accepted_tokens_total", "counter", "Draft tokens accepted.",
               (double)es.spec_accepted);
    put_metric(&b, "deepinfer_spec_decode_acceptance_rate", "gauge", "Accepted / verified draft tokens.",
               es.spec_verified ? (double)es.spec_accepted / (double)es.spec_verified : 0.0);
    srv_buf_printf(&b, "# HELP deepinfer_spec_decode_num_accepted_tokens_per_pos_total Drafts accepted by "
                       "draft position.\n# TYPE deepinfer_spec_decode_num_accepted_tokens_per_pos_total counter\n");
    for (int i = 0; i < DI_SPEC_MAX_DRAFTS && es.spec_verified_at[i]; i++)
        srv_buf_printf(&b, "deepinfer_spec_decode_num_accepted_tokens_per_pos_total{position=\"%d\"} %lld\n", i,
                       (long long)es.spec_accepted_at[i]);
    srv_buf_printf(&b, "# HELP deepinfer_spec_decode_num_verified_tokens_per_pos_total Drafts verified by "
                       "draft position.\n# TYPE deepinfer_spec_decode_num_verified_tokens_per_pos_total counter\n");
    for (int i = 0; i < DI_SPEC_MAX_DRAFTS && es.spec_verified_at[i]; i++)
        srv_buf_printf(&b, "deepinfer_spec_decode_num_verified_tokens_per_pos_total{position=\"%d\"} %lld\n", i,
                       (long long)es.spec_verified_at[i]);
    put_hist(&b, "deepinfer_time_to_first_token_seconds", "Submit to first token.", &m.ttft);
    put_hist(&b, "deepinfer_time_per_output_token_seconds", "Mean gap between output tokens.", &m.tpot);
    put_hist(&b, "deepinfer_e2e_request_latency_seconds", "Submit to finish.", &m.e2e);
    put_hist(&b, "deepinfer_request_queue_time_seconds", "Submit to first scheduled.", &m.queue);
    *len = b.len;
    return b.data;
}

void srv_route_metrics(di_server *s, const srv_http_req *q, srv_reply *r) {
    (void)q;
    size_t len = 0;
    char *text = srv_metrics_render(s, &len);
    if (!text) {
        srv_reply_error(r, 500, "server_error", NULL, NULL, "out of memory");
        return;
    }
    r->status = 200;
    r->text = text;
    r->text_len = len;
    r->content_type = "text/plain; version=0.0.4; charset=utf-8";
}

void srv_route_health(di_server *s, const srv_http_req *q, srv_reply *r) {
    (void)q;
    pthread_mutex_lock(&s->mu);
    bool stopping = s->stopping;
    pthread_mutex_unlock(&s->mu);
    if (stopping) {
        srv_reply_error(r, 503, "server_error", NULL, "shutting_down", "The server is shutting down.");
        return;
    }
    r->status = 200;
    r->json = json_pack("{s:s}", "status", "ok");
}
