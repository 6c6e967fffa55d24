/* The confidence-scheduled verify length through the engine
 * (spec/verify_len.h). */
#include "spec/verify_len.h"

#include "base/alloc.h"
#include "model/model.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define MAX_POINTS 128
/* worker/cuda_graph_runner.py:build_graph_batch_sizes: 1, 2, 4, then
 * multiples of DEEPINFER_CUDAGRAPH_BATCH_SIZE_INTERVAL, then the max. */
#define GRAPH_INTERVAL 8
/* model_runner.py:profile_decode_perf: 1 warm-up + 5 timed replays. */
#define PROBE_WARMUP 1
#define PROBE_REPS 5
/* DEEPINFER_DECODE_PERF_CACHE_TTL_SEC's default. */
#define CACHE_TTL_S 3600

typedef struct slot_hist {
    int64_t seq_id;                /* owner the rates belong to, -1 = none */
    int32_t n;                     /* drafts of the last round */
    float rates[DI_SPEC_MAX_K];    /* cumulative confidences of the last round */
} slot_hist;

struct di_spec_vlen {
    di_dspark_sched *sched;
    int32_t n_slots, k;
    slot_hist *hist;               /* (n_slots) */
    di_dspark_seq_rates *q;        /* (n_slots) */
    float *cur;                    /* (n_slots, DI_SPEC_MAX_K) this round's rates */
    float *prev;                   /* (n_slots, DI_SPEC_MAX_K) the round before */
    int32_t *seqlens;              /* (n_slots) */
    void *scratch;
    di_dspark_cost_point curve[MAX_POINTS]; /* the curve in use (a copy for reports) */
    int32_t n_curve;
};

void di_spec_vlen_free(di_spec_vlen *v) {
    if (!v) return;
    di_dspark_sched_free(v->sched);
    free(v->hist);
    free(v->q);
    free(v->cur);
    free(v->prev);
    free(v->seqlens);
    free(v->scratch);
    free(v);
}

di_status di_spec_vlen_create(int32_t n_slots, int32_t k, di_spec_vlen **out, di_error *err) {
    *out = NULL;
    if (n_slots < 1 || k < 1 || k > DI_SPEC_MAX_K)
        return di_error_set(err, DI_ERR_INVALID_ARG, "verify length: %d slots, k %d", (int)n_slots, (int)k);
    di_spec_vlen *v = di_calloc(1, sizeof *v);
    if (!v) return di_error_set(err, DI_ERR_NOMEM, "verify length: out of memory");
    v->n_slots = n_slots;
    v->k = k;
    const size_t n = (size_t)n_slots;
    v->hist = di_calloc(n, sizeof *v->hist);
    v->q = di_calloc(n, sizeof *v->q);
    v->cur = di_calloc(n * DI_SPEC_MAX_K, sizeof *v->cur);
    v->prev = di_calloc(n * DI_SPEC_MAX_K, sizeof *v->prev);
    v->seqlens = di_calloc(n, sizeof *v->seqlens);
    v->scratch = malloc(di_dspark_sched_scratch_bytes((int64_t)n_slots * k));
    di_status s = DI_OK;
    if (!v->hist || !v->q || !v->cur || !v->prev || !v->seqlens || !v->scratch)
        s = di_error_set(err, DI_ERR_NOMEM, "verify length: out of memory");
    if (!s) s = di_dspark_sched_create(&v->sched, err);
    if (s) {
        di_spec_vlen_free(v);
        return s;
    }
    for (int32_t i = 0; i < n_slots; i++) v->hist[i].seq_id = -1;
    *out = v;
    return DI_OK;
}


/* Sets the schedule's curve and keeps a copy (the first MAX_POINTS). */
static di_status use_curve(di_spec_vlen *v, const di_dspark_cost_point *pts, int32_t n, di_error *err) {
    di_status s = di_dspark_sched_set_curve(v->sched, pts, n, err);
    if (s) return s;
    v->n_curve = n < MAX_POINTS ? n : MAX_POINTS;
    memcpy(v->curve, pts, (size_t)v->n_curve * sizeof *pts);
    return DI_OK;
}

int32_t di_spec_vlen_curve(const di_spec_vlen *v, di_dspark_cost_point *pts, int32_t cap) {
    int32_t n = v->n_curve < cap ? v->n_curve : cap;
    if (n > 0) memcpy(pts, v->curve, (size_t)n * sizeof *pts);
    return n;
}

static double mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* The step sizes measured: 1, 2, 4, 8, 16, 24, ..., max_rows. */
static int32_t probe_sizes(int32_t max_rows, int32_t *rows) {
    int32_t n = 0;
    for (int32_t r = 1; r <= max_rows && r < GRAPH_INTERVAL && n < MAX_POINTS; r *= 2) rows[n++] = r;
    for (int32_t r = GRAPH_INTERVAL; r <= max_rows && n < MAX_POINTS - 1; r += GRAPH_INTERVAL) rows[n++] = r;
    if (n == 0 || rows[n - 1] < max_rows) rows[n++] = max_rows;
    return n;
}

/* One step of r rows: slot 0, positions 0..r-1, every row with logits (a
 * verify step wants them all). trimmed mean of PROBE_REPS timed runs. */
static di_status probe_one(const di_spec_vlen_probe *p, int32_t r, int32_t *tok, int32_t *seq, int32_t *pos,
                           uint8_t *want, const int32_t *table, float *logits, float *ms_out, di_error *err) {
    const int32_t *tables[1] = {table};
    int32_t nb = (r + p->block_size - 1) / p->block_size;
    int32_t n_blocks[1] = {nb};
    for (int32_t i = 0; i < r; i++) {
        tok[i] = i % p->n_vocab;
        seq[i] = 0;
        pos[i] = i;
        want[i] = 1;
    }
    di_batch b = {.n_rows = r, .token = tok, .seq = seq, .pos = pos, .want_logits = want, .n_seq_slots = 1,
                  .block_size = p->block_size, .block_tables = tables, .n_blocks = n_blocks};
    double t[PROBE_REPS];
    for (int32_t rep = 0; rep < PROBE_WARMUP + PROBE_REPS; rep++) {
        double t0 = mono_ms();
        di_status s = di_model_forward(p->ctx, p->kv, &b, logits, p->pool, err);
        if (s) return s;
        if (rep >= PROBE_WARMUP) t[rep - PROBE_WARMUP] = mono_ms() - t0;
    }
    double lo = t[0], hi = t[0], sum = 0;
    for (int32_t i = 0; i < PROBE_REPS; i++) {
        lo = t[i] < lo ? t[i] : lo;
        hi = t[i] > hi ? t[i] : hi;
        sum += t[i];
    }
    double ms = (sum - lo - hi) / (PROBE_REPS - 2);
    *ms_out = (float)(ms > 1e-6 ? ms : 1e-6);
    return di_model_kv_truncate(p->kv, 0, 0, err);
}

static di_status measure(const di_spec_vlen_probe *p, di_dspark_cost_point *pts, int32_t *n_out, di_error *err) {
    int32_t rows[MAX_POINTS];
    int32_t max_rows = p->max_rows;
    if ((int64_t)max_rows > (int64_t)p->kv_blocks * p->block_size) max_rows = p->kv_blocks * p->block_size;
    if (max_rows < 1) return di_error_set(err, DI_ERR_INVALID_ARG, "verify length: no rows to measure");
    int32_t n = probe_sizes(max_rows, rows);
    int32_t nb = (max_rows + p->block_size - 1) / p->block_size;
    int32_t *tok = malloc((size_t)max_rows * sizeof *tok), *seq = malloc((size_t)max_rows * sizeof *seq);
    int32_t *pos = malloc((size_t)max_rows * sizeof *pos), *table = malloc((size_t)nb * sizeof *table);
    uint8_t *want = malloc((size_t)max_rows);
    float *logits = di_malloc_array((size_t)max_rows, (size_t)p->n_vocab * sizeof(float));
    di_status s = DI_OK;
    if (!tok || !seq || !pos || !table || !want || !logits)
        s = di_error_set(err, DI_ERR_NOMEM, "verify length: out of memory for a %d-row probe", (int)max_rows);
    for (int32_t i = 0; !s && i < nb; i++) table[i] = i;
    float last = 0.0f;
    for (int32_t i = 0; !s && i < n; i++) {
        float ms = 0.0f;
        s = probe_one(p, rows[i], tok, seq, pos, want, table, logits, &ms, err);
        /* the schedule wants a curve that never falls: noise on a busy
         * machine can make a bigger step time less */
        pts[i].rows = rows[i];
        pts[i].ms = ms > last ? ms : last;
        last = pts[i].ms;
    }
    free(tok);
    free(seq);
    free(pos);
    free(table);
    free(want);
    free(logits);
    if (!s) *n_out = n;
    return s;
}

/* (XDG_CACHE_HOME or HOME/.cache)/deepinfer/dspark, created; NULL when no
 * home is known or it cannot be made. */
static const char *user_cache_dir(char *buf, size_t cap) {
    const char *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
    int n;
    if (x && *x) n = snprintf(buf, cap, "%s/deepinfer", x);
    else if (h && *h) n = snprintf(buf, cap, "%s/.cache/deepinfer", h);
    else return NULL;
    if (n < 0 || (size_t)n + 8 >= cap) return NULL;
    if (!x || !*x) {
        char parent[4096];
        snprintf(parent, sizeof parent, "%s/.cache", h);
        if (mkdir(parent, 0700) && errno != EEXIST) return NULL;
    }
    if (mkdir(buf, 0700) && errno != EEXIST) return NULL;
    strcat(buf, "/dspark");
    if (mkdir(buf, 0700) && errno != EEXIST) return NULL;
    return buf;
}

di_status di_spec_vlen_startup(di_spec_vlen *v, const di_spec_vlen_probe *p, double *measured_ms, di_error *err) {
    *measured_ms = 0.0;
    di_dspark_cost_point pts[MAX_POINTS];
    int32_t n = 0;
    char buf[4096];
    const char *dir = p->cache_dir && !strcmp(p->cache_dir, "off") ? NULL
                      : p->cache_dir                                ? p->cache_dir
                                                                    : user_cache_dir(buf, sizeof buf);
    int64_t now = (int64_t)time(NULL);
    /* a missing, stale or malformed cache file is measured over */
    if (dir && !di_dspark_curve_load(dir, p->key, now, CACHE_TTL_S, pts, MAX_POINTS, &n, NULL))
        return use_curve(v, pts, n, err);
    double t0 = mono_ms();
    di_status s = measure(p, pts, &n, err);
    *measured_ms = mono_ms() - t0;
    if (s) return di_error_prefix(err, "verify length: measuring the cost curve: ");
    if ((s = use_curve(v, pts, n, err))) return s;
    /* a cache that cannot be written costs only the next start-up */
    if (dir) (void)di_dspark_curve_save(dir, p->key, pts, n, now, NULL);
    return DI_OK;
}

di_status di_spec_vlen_set_curve(di_spec_vlen *v, const di_dspark_cost_point *pts, int32_t n, di_error *err) {
    return use_curve(v, pts, n, err);
}

static void cumprod(const float *conf, int32_t n, float *out) {
    float c = 1.0f;
    for (int32_t j = 0; j < n; j++) {
        c *= conf[j];
        out[j] = c;
    }
}

di_status di_spec_vlen_plan(di_spec_vlen *v, const di_spec_seq *seqs, const di_spec_drafts *drafts, int32_t n,
                            int32_t *n_verify, di_error *err) {
    if (n < 0 || n > v->n_slots) return di_error_set(err, DI_ERR_INVALID_ARG, "verify length: %d sequences", (int)n);
    for (int32_t i = 0; i < n; i++) {
        const di_spec_seq *q = &seqs[i];
        const di_spec_drafts *d = &drafts[i];
        if (q->slot < 0 || q->slot >= v->n_slots || d->n < 0 || d->n > DI_SPEC_MAX_K)
            return di_error_set(err, DI_ERR_INVALID_ARG, "verify length: slot %d with %d drafts", (int)q->slot,
                                (int)d->n);
        float *cur = v->cur + (size_t)i * DI_SPEC_MAX_K, *prev = v->prev + (size_t)i * DI_SPEC_MAX_K;
        cumprod(d->confidence, d->n, cur);
        const slot_hist *h = &v->hist[q->slot];
        bool had = h->seq_id == q->seq_id && h->n > 0;
        /* the round before: its rates where it had as many drafts, else 0 */
        for (int32_t j = 0; j < d->n; j++) prev[j] = had && j < h->n ? h->rates[j] : 0.0f;
        v->q[i] = (di_dspark_seq_rates){.n_drafts = d->n, .rates = cur, .prev_rates = had ? prev : NULL,
                                        .has_drafts = d->n > 0, .scheduled_ahead = 0};
    }
    di_status s = di_dspark_sched_plan(v->sched, v->q, n, v->scratch, v->seqlens, err);
    if (s) return s;
    for (int32_t i = 0; i < n; i++) {
        int32_t nv = v->seqlens[i] - 1;
        n_verify[i] = nv < 0 ? 0 : nv > drafts[i].n ? drafts[i].n : nv;
        slot_hist *h = &v->hist[seqs[i].slot];
        h->seq_id = seqs[i].seq_id;
        h->n = drafts[i].n;
        memcpy(h->rates, v->cur + (size_t)i * DI_SPEC_MAX_K, (size_t)drafts[i].n * sizeof(float));
    }
    return DI_OK;
}

void di_spec_vlen_observe(di_spec_vlen *v, int32_t n_seqs, int32_t rows, double forward_ms, double sampler_ms) {
    di_dspark_sched_observe(v->sched, n_seqs, rows, forward_ms, sampler_ms);
}
