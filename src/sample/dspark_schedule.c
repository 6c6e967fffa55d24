/* Confidence-scheduled verify length (sample/dspark.h), as DeepInfer 0.1.0's
 * csrc/engine/mtp_varlen.hpp decides it:
 *
 *   - a cost curve (rows -> step ms) measured at start-up, strictly
 *     increasing in rows; a step of r rows costs the first curve point with
 *     at least r rows, plus an online slope x its rows, plus the sampler;
 *   - the slope: (forward_ms - baseline) / rows of the last 5000 steps,
 *     median per curve point with >= 10 samples, median of those medians;
 *   - the sampler: median of the last 9 steps (>= 5), per number of
 *     sequences, else over all steps;
 *   - the total rows: scan N, N+1, ... adding the cumulative acceptance
 *     estimates (two rounds back) in descending order, keep the first
 *     maximum of expected tokens / estimated ms;
 *   - the split: the extra rows go to the top entries of the last round's
 *     estimates.
 *
 * Plus the ZOS allocation of schedule_mtp_varlen.py and a small on-disk
 * cache of the curve. */
#include "sample/dspark.h"

#include "base/alloc.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_CURVE 1024
#define SLOPE_WINDOW 5000   /* ForwardRuntimeEstimator::_window_size */
#define SLOPE_MIN 10        /* ... _min_samples */
#define SAMPLER_WINDOW 9    /* SamplerRuntimeEstimator::_window_size */
#define SAMPLER_MIN 5       /* ... _min_samples */
#define MAX_SAMPLER_KEYS 256

typedef struct sampler_est {
    int32_t key;
    double v[SAMPLER_WINDOW];
    int32_t size, next;
    double median;
} sampler_est;

struct di_dspark_sched {
    di_dspark_cost_point curve[MAX_CURVE];
    int32_t n_curve;
    /* slope window: ring of (curve index, value) */
    int32_t *w_graph;
    double *w_val;
    int32_t w_size, w_next;
    double slope;
    double *tmp;                       /* (SLOPE_WINDOW) */
    double *medians;                   /* (MAX_CURVE) */
    sampler_est by_seqs[MAX_SAMPLER_KEYS];
    int32_t n_keys;
    sampler_est fallback;
};

di_status di_dspark_sched_create(di_dspark_sched **out, di_error *err) {
    di_dspark_sched *s = di_calloc(1, sizeof(*s));
    if (s) {
        s->w_graph = di_calloc(SLOPE_WINDOW, sizeof(int32_t));
        s->w_val = di_calloc(SLOPE_WINDOW, sizeof(double));
        s->tmp = di_calloc(SLOPE_WINDOW, sizeof(double));
        s->medians = di_calloc(MAX_CURVE, sizeof(double));
    }
    if (!s || !s->w_graph || !s->w_val || !s->tmp || !s->medians) {
        di_dspark_sched_free(s);
        return di_error_set(err, DI_ERR_NOMEM, "dspark schedule: out of memory");
    }
    *out = s;
    return DI_OK;
}

void di_dspark_sched_free(di_dspark_sched *s) {
    if (!s)
        return;
    free(s->w_graph);
    free(s->w_val);
    free(s->tmp);
    free(s->medians);
    free(s);
}

static di_status check_curve(const di_dspark_cost_point *pts, int32_t n, di_error *err) {
    if (n < 0 || n > MAX_CURVE || (n > 0 && !pts))
        return di_error_set(err, DI_ERR_INVALID_ARG, "dspark curve: %d points (at most %d)", (int)n, MAX_CURVE);
    for (int32_t i = 0; i < n; i++) {
        if (pts[i].rows < 1 || (i > 0 && pts[i].rows <= pts[i - 1].rows))
            return di_error_set(err, DI_ERR_INVALID_ARG, "dspark curve: rows not strictly increasing at point %d",
                                (int)i);
        if (!isfinite(pts[i].ms) || !(pts[i].ms > 0.0f))
            return di_error_set(err, DI_ERR_INVALID_ARG, "dspark curve: point %d has time %g ms", (int)i,
                                (double)pts[i].ms);
    }
    return DI_OK;
}

di_status di_dspark_sched_set_curve(di_dspark_sched *s, const di_dspark_cost_point *pts, int32_t n,
                                    di_error *err) {
    di_status st = check_curve(pts, n, err);
    if (st)
        return st;
    if (n)
        memcpy(s->curve, pts, (size_t)n * sizeof(*pts));
    s->n_curve = n;
    s->w_size = s->w_next = 0;
    s->slope = 0.0;
    return DI_OK;
}

/* First curve point with rows >= r, or n_curve. */
static int32_t bucket(const di_dspark_sched *s, int32_t r) {
    int32_t lo = 0, hi = s->n_curve;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (s->curve[mid].rows < r)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* MedianTracker::get: the middle, or the mean of the two middles. */
static double median_sorted(const double *v, int32_t n) {
    return n % 2 == 0 ? (v[n / 2 - 1] + v[n / 2]) * 0.5 : v[n / 2];
}

static void recompute_slope(di_dspark_sched *s) {
    int32_t n_med = 0;
    for (int32_t g = 0; g < s->n_curve; g++) {
        int32_t k = 0;
        for (int32_t i = 0; i < s->w_size; i++)
            if (s->w_graph[i] == g)
                s->tmp[k++] = s->w_val[i];
        if (k < SLOPE_MIN)
            continue;
        qsort(s->tmp, (size_t)k, sizeof(double), cmp_double);
        s->medians[n_med++] = median_sorted(s->tmp, k);
    }
    if (n_med == 0) {
        s->slope = 0.0;
        return;
    }
    qsort(s->medians, (size_t)n_med, sizeof(double), cmp_double);
    s->slope = median_sorted(s->medians, n_med);
}

static void sampler_update(sampler_est *e, double v) {
    e->v[e->next] = v;
    e->next = (e->next + 1) % SAMPLER_WINDOW;
    e->size = e->size + 1 < SAMPLER_WINDOW ? e->size + 1 : SAMPLER_WINDOW;
    double sorted[SAMPLER_WINDOW];
    memcpy(sorted, e->v, sizeof(sorted));
    qsort(sorted, (size_t)e->size, sizeof(double), cmp_double);
    e->median = median_sorted(sorted, e->size);
}

void di_dspark_sched_observe(di_dspark_sched *s, int32_t n_seqs, int32_t rows, double forward_ms,
                             double sampler_ms) {
    int32_t g = bucket(s, rows);
    if (g < s->n_curve && isfinite(forward_ms)) {
        double v = (forward_ms - (double)s->curve[g].ms) / (double)s->curve[g].rows;
        s->w_graph[s->w_next] = g;
        s->w_val[s->w_next] = v;
        s->w_next = (s->w_next + 1) % SLOPE_WINDOW;
        if (s->w_size < SLOPE_WINDOW)
            s->w_size++;
        recompute_slope(s);
    }
    if (!isfinite(sampler_ms))
        return;
    sampler_est *e = NULL;
    for (int32_t i = 0; i < s->n_keys; i++)
        if (s->by_seqs[i].key == n_seqs)
            e = &s->by_seqs[i];
    if (!e && s->n_keys < MAX_SAMPLER_KEYS) {
        e = &s->by_seqs[s->n_keys++];
        memset(e, 0, sizeof(*e));
        e->key = n_seqs;
    }
    if (e)
        sampler_update(e, sampler_ms);
    sampler_update(&s->fallback, sampler_ms);
}

double di_dspark_sched_slope_ms(const di_dspark_sched *s) { return s->slope > 0.0 ? s->slope : 0.0; }

double di_dspark_sched_sampler_ms(const di_dspark_sched *s, int32_t n_seqs) {
    for (int32_t i = 0; i < s->n_keys; i++)
        if (s->by_seqs[i].key == n_seqs && s->by_seqs[i].size >= SAMPLER_MIN)
            return s->by_seqs[i].median;
    /* A key that exists but is short of samples falls back, as std::optional does. */
    return s->fallback.size >= SAMPLER_MIN ? s->fallback.median : 0.0;
}

/* ---- the plan ------------------------------------------------------------- */

typedef struct {
    float rate;
    int32_t seq;
} entry;

/* rate descending, then seq ascending (by_rate_desc). */
static int entry_before(const entry *a, const entry *b) {
    return a->rate != b->rate ? a->rate > b->rate : a->seq < b->seq;
}

static void sort_entries(entry *v, entry *tmp, int64_t n) {
    for (int64_t width = 1; width < n; width *= 2) {
        for (int64_t lo = 0; lo < n; lo += 2 * width) {
            int64_t mid = lo + width < n ? lo + width : n;
            int64_t hi = lo + 2 * width < n ? lo + 2 * width : n;
            int64_t a = lo, b = mid, o = lo;
            while (a < mid && b < hi)
                tmp[o++] = entry_before(&v[b], &v[a]) ? v[b++] : v[a++];
            while (a < mid)
                tmp[o++] = v[a++];
            while (b < hi)
                tmp[o++] = v[b++];
        }
        memcpy(v, tmp, (size_t)n * sizeof(entry));
    }
}

size_t di_dspark_sched_scratch_bytes(int64_t total_drafts) {
    return total_drafts > 0 ? (size_t)total_drafts * 3 * sizeof(entry) : sizeof(entry);
}

static int64_t push_rates(entry *q, int64_t at, const float *rates, int32_t nd, int32_t seq, int32_t has_draft) {
    for (int32_t j = 0; j < nd; j++) {
        q[at + j].rate = rates ? rates[j] : (has_draft ? 1.0f : 0.0f);
        q[at + j].seq = seq;
    }
    return at + nd;
}

di_status di_dspark_sched_plan(const di_dspark_sched *s, const di_dspark_seq_rates *seqs, int32_t n_seqs,
                               void *scratch, int32_t *seqlens_q, di_error *err) {
    if (n_seqs < 0 || (n_seqs > 0 && (!seqs || !seqlens_q)))
        return di_error_set(err, DI_ERR_INVALID_ARG, "dspark plan: %d sequences or a buffer is missing",
                            (int)n_seqs);
    int64_t total = 0;
    for (int32_t i = 0; i < n_seqs; i++) {
        if (seqs[i].n_drafts < 0 || seqs[i].n_drafts > (1 << 20))
            return di_error_set(err, DI_ERR_INVALID_ARG, "dspark plan: sequence %d has %d drafts", (int)i,
                                (int)seqs[i].n_drafts);
        total += seqs[i].n_drafts;
    }
    if (s->n_curve == 0) {
        for (int32_t i = 0; i < n_seqs; i++)
            seqlens_q[i] = 1 + seqs[i].n_drafts;
        return DI_OK;
    }
    if (!scratch)
        return di_error_set(err, DI_ERR_INVALID_ARG, "dspark plan: no scratch");
    entry *for_bsz = (entry *)scratch, *for_seqs = for_bsz + total, *tmp = for_seqs + total;
    int64_t a = 0, b = 0;
    for (int32_t i = 0; i < n_seqs; i++) {
        const di_dspark_seq_rates *q = &seqs[i];
        /* scheduled ahead: `rates` is already two rounds back; otherwise the
         * budget takes prev_rates (two rounds back) and the split `rates`. */
        int32_t has_draft = q->has_drafts || q->scheduled_ahead;
        a = push_rates(for_bsz, a, q->scheduled_ahead ? q->rates : q->prev_rates, q->n_drafts, i, has_draft);
        b = push_rates(for_seqs, b, q->rates, q->n_drafts, i, has_draft);
    }
    sort_entries(for_bsz, tmp, total);
    sort_entries(for_seqs, tmp, total);

    const double sampler_ms = di_dspark_sched_sampler_ms(s, n_seqs);
    const double slope_ms = di_dspark_sched_slope_ms(s);
    double best_tp = 0.0;
    int64_t best = 0;
    float expected = (float)n_seqs;
    int64_t cur = n_seqs;
    int32_t gi = 0;
    for (int64_t k = 0; k <= total; k++) {
        if (k > 0) {
            expected += for_bsz[k - 1].rate;
            cur += 1;
        }
        while (gi < s->n_curve && cur > s->curve[gi].rows)
            gi++;
        if (gi == s->n_curve)
            continue; /* past the largest measured step: never chosen */
        double ms = (double)s->curve[gi].ms + slope_ms * (double)s->curve[gi].rows + sampler_ms;
        double tp = (double)expected / ms;
        if (tp > best_tp) {
            best_tp = tp;
            best = cur;
        }
    }
    if (best < n_seqs)
        return di_error_set(err, DI_ERR_RANGE,
                            "dspark plan: %d sequences do not fit the cost curve (largest step %d rows)",
                            (int)n_seqs, (int)s->curve[s->n_curve - 1].rows);
    for (int32_t i = 0; i < n_seqs; i++)
        seqlens_q[i] = 1;
    for (int64_t k = 0; k < best - n_seqs; k++)
        seqlens_q[for_seqs[k].seq] += 1;
    return DI_OK;
}

/* ---- ZOS allocation ------------------------------------------------------- */

size_t di_dspark_zos_scratch_bytes(int64_t n_entries) {
    return n_entries > 0 ? (size_t)n_entries * 2 * sizeof(entry) : sizeof(entry);
}

di_status di_dspark_zos_seqlens(int32_t total_q, const int32_t *remap, int32_t n_seqs, const float *prev_conf,
                                int32_t n_prev, int32_t nextn, void *scratch, int32_t *seqlens_q,
                                di_error *err) {
    if (n_seqs < 0 || nextn < 0 || n_prev < 0 || (n_seqs > 0 && (!remap || !seqlens_q || !scratch)) ||
        (n_prev > 0 && nextn > 0 && !prev_conf))
        return di_error_set(err, DI_ERR_INVALID_ARG, "dspark zos: bad sizes or a missing buffer");
    int64_t n = (int64_t)n_seqs * nextn;
    entry *v = (entry *)scratch, *tmp = v + n;
    /* cumulative rates, flattened; the entry's seq holds the flat index so
     * ties go to the lower flat index (the reference's stable argsort). */
    for (int32_t i = 0; i < n_seqs; i++) {
        if (remap[i] < -1 || remap[i] >= n_prev)
            return di_error_set(err, DI_ERR_INVALID_ARG, "dspark zos: remap[%d] = %d not in [-1, %d)", (int)i,
                                (int)remap[i], (int)n_prev);
        float c = 1.0f;
        for (int32_t j = 0; j < nextn; j++) {
            float r = remap[i] < 0 ? 0.0f : prev_conf[(int64_t)remap[i] * nextn + j];
            c = j == 0 ? r : c * r;
            v[(int64_t)i * nextn + j].rate = c;
            v[(int64_t)i * nextn + j].seq = (int32_t)((int64_t)i * nextn + j);
        }
        seqlens_q[i] = 1;
    }
    sort_entries(v, tmp, n);
    int64_t extra = (int64_t)total_q - n_seqs;
    for (int64_t k = 0; k < n && k < extra; k++)
        seqlens_q[v[k].seq / nextn] += 1;
    return DI_OK;
}

/* ---- the curve cache ------------------------------------------------------ */

#define CURVE_MAGIC "deepinfer-dspark-curve 1"

static uint64_t fnv1a(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

static di_status curve_path(const char *dir, const char *key, char *buf, size_t cap, di_error *err) {
    if (!dir || !key || strchr(key, '\n'))
        return di_error_set(err, DI_ERR_INVALID_ARG, "dspark curve cache: bad dir or key");
    int n = snprintf(buf, cap, "%s/%016llx.curve", dir, (unsigned long long)fnv1a(key));
    if (n < 0 || (size_t)n >= cap)
        return di_error_set(err, DI_ERR_INVALID_ARG, "dspark curve cache: path too long");
    return DI_OK;
}

di_status di_dspark_curve_save(const char *dir, const char *key, const di_dspark_cost_point *pts, int32_t n,
                               int64_t now_s, di_error *err) {
    char path[4096], tmp[4200];
    di_status st = check_curve(pts, n, err);
    if (st || (st = curve_path(dir, key, path, sizeof(path), err)))
        return st;
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return di_error_set(err, DI_ERR_IO, "%s: %s", tmp, strerror(errno));
    fprintf(f, "%s\nkey %s\ntime %lld\npoints %d\n", CURVE_MAGIC, key, (long long)now_s, (int)n);
    for (int32_t i = 0; i < n; i++)
        fprintf(f, "%d %.9g\n", (int)pts[i].rows, (double)pts[i].ms);
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) {
        remove(tmp);
        return di_error_set(err, DI_ERR_IO, "%s: write failed", tmp);
    }
    if (rename(tmp, path) != 0) {
        remove(tmp);
        return di_error_set(err, DI_ERR_IO, "%s: %s", path, strerror(errno));
    }
    return DI_OK;
}

di_status di_dspark_curve_load(const char *dir, const char *key, int64_t now_s, int64_t ttl_s,
                               di_dspark_cost_point *pts, int32_t cap, int32_t *n_out, di_error *err) {
    char path[4096], line[4200];
    di_status st = curve_path(dir, key, path, sizeof(path), err);
    if (st)
        return st;
    FILE *f = fopen(path, "r");
    if (!f)
        return di_error_set(err, DI_ERR_NOT_FOUND, "%s: no cached curve", path);
    long long t = 0;
    int n = -1;
    st = DI_OK;
    if (!fgets(line, sizeof(line), f) || strncmp(line, CURVE_MAGIC "\n", sizeof(CURVE_MAGIC)) != 0)
        st = di_error_set(err, DI_ERR_FORMAT, "%s: not a curve cache file", path);
    else if (!fgets(line, sizeof(line), f) || strncmp(line, "key ", 4) != 0)
        st = di_error_set(err, DI_ERR_FORMAT, "%s: no key line", path);
    else if (strcspn(line + 4, "\n") != strlen(key) || strncmp(line + 4, key, strlen(key)) != 0)
        st = di_error_set(err, DI_ERR_NOT_FOUND, "%s: cached for another key", path);
    else if (!fgets(line, sizeof(line), f) || sscanf(line, "time %lld", &t) != 1)
        st = di_error_set(err, DI_ERR_FORMAT, "%s: no time line", path);
    else if (ttl_s >= 0 && (now_s - t > ttl_s || t > now_s))
        st = di_error_set(err, DI_ERR_NOT_FOUND, "%s: cached curve expired", path);
    else if (!fgets(line, sizeof(line), f) || sscanf(line, "points %d", &n) != 1 || n < 1 || n > cap ||
             n > MAX_CURVE)
        st = di_error_set(err, DI_ERR_FORMAT, "%s: bad point count", path);
    for (int i = 0; !st && i < n; i++) {
        int r;
        float ms;
        if (!fgets(line, sizeof(line), f) || sscanf(line, "%d %f", &r, &ms) != 2)
            st = di_error_set(err, DI_ERR_FORMAT, "%s: bad point %d", path, i);
        else {
            pts[i].rows = r;
            pts[i].ms = ms;
        }
    }
    fclose(f);
    if (!st && check_curve(pts, n, NULL))
        st = di_error_set(err, DI_ERR_FORMAT, "%s: points not strictly increasing or not positive", path);
    if (!st)
        *n_out = n;
    return st;
}
