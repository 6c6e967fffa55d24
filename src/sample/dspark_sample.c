/* DSpark sampling and verification (sample/dspark.h): DeepInfer 0.1.0's
 * counter-based RNG, logit transform, rejection test and residual sample,
 * read from tilelang_ops/{random_sampling,fused_sample,sampler,dflash}.py.
 * Float work follows the reference's precisions: fp32 probabilities and
 * logprobs, fp64 running sums where torch's CPU cumsum accumulates in
 * double. */
#include "sample/dspark.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define GOLDEN 0x9E3779B97F4A7C15ull

/* ---- RNG ------------------------------------------------------------------ */

double di_dspark_hash_uniform(uint64_t z) {
    z += GOLDEN;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) * (1.0 / 9007199254740992.0); /* 2^-53 */
}

double di_dspark_uniform(uint64_t seed, int64_t pos, di_dspark_case c) {
    uint64_t s = ((uint64_t)pos * 3u + (uint64_t)c) * GOLDEN;
    return di_dspark_hash_uniform(seed + (s ^ (s << 13)));
}

float di_dspark_verify_uniform(uint64_t seed, int64_t pos) {
    uint64_t s = ((uint64_t)pos * 3u + (uint64_t)DI_DSPARK_CASE_VERIFY) * GOLDEN;
    return (float)di_dspark_hash_uniform(seed ^ s);
}

int32_t di_dspark_sample_weights(const float *w, int32_t n, double u) {
    double total = 0.0;
    for (int32_t i = 0; i < n; i++)
        total += (double)w[i];
    if (!(total > 0.0))
        return -1;
    double target = u * total, cdf = 0.0;
    for (int32_t i = 0; i < n; i++) {
        cdf += (double)w[i];
        if (cdf > target)
            return i;
    }
    /* u < 1 makes target < total, so the loop returns; rounding of the two
     * sums is the same, but stay safe: the last non-zero weight. */
    for (int32_t i = n - 1; i >= 0; i--)
        if (w[i] > 0.0f)
            return i;
    return -1;
}

int32_t di_dspark_row_position(int32_t base, int32_t local_step) {
    return (int32_t)((uint32_t)base + (uint32_t)local_step * (uint32_t)DI_DSPARK_DRAFT_POS_HASH_MUL);
}

int32_t di_dspark_draft_position(int32_t base, int32_t last_valid_offset, int32_t step) {
    return (int32_t)((uint32_t)base + (uint32_t)last_valid_offset + (uint32_t)step + 1u);
}

/* ---- logits -> logprobs --------------------------------------------------- */

size_t di_dspark_scratch_bytes(int32_t n) {
    return n > 0 ? (size_t)n * (sizeof(float) + sizeof(int32_t)) : 0;
}

/* Sort keys: descending value, ties by ascending index (= torch's stable
 * descending sort). */
typedef struct {
    const float *v;
} sort_ctx;

static int cmp_desc(const void *a, const void *b, void *user) {
    const float *v = ((const sort_ctx *)user)->v;
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    if (v[i] > v[j])
        return -1;
    if (v[i] < v[j])
        return 1;
    return (i > j) - (i < j);
}

/* A small merge sort with a context (qsort_r is not portable C11). */
static void sort_idx(int32_t *idx, int32_t *tmp, int32_t n, const sort_ctx *ctx) {
    for (int32_t width = 1; width < n; width *= 2) {
        for (int32_t lo = 0; lo < n; lo += 2 * width) {
            int32_t mid = lo + width < n ? lo + width : n;
            int32_t hi = lo + 2 * width < n ? lo + 2 * width : n;
            int32_t a = lo, b = mid, o = lo;
            while (a < mid && b < hi)
                tmp[o++] = cmp_desc(&idx[b], &idx[a], (void *)ctx) < 0 ? idx[b++] : idx[a++];
            while (a < mid)
                tmp[o++] = idx[a++];
            while (b < hi)
                tmp[o++] = idx[b++];
        }
        memcpy(idx, tmp, (size_t)n * sizeof(int32_t));
    }
}

/* out = log_softmax(x) over n floats (in place allowed); -inf stays -inf. */
static void log_softmax(const float *x, int32_t n, float *out) {
    float mx = -INFINITY;
    for (int32_t i = 0; i < n; i++)
        mx = x[i] > mx ? x[i] : mx;
    double sum = 0.0;
    for (int32_t i = 0; i < n; i++)
        sum += x[i] == -INFINITY ? 0.0 : (double)expf(x[i] - mx);
    float lse = mx + (float)log(sum);
    for (int32_t i = 0; i < n; i++)
        out[i] = x[i] - lse;
}

di_status di_dspark_logprobs(const float *logits, int32_t n, float temperature, float top_p, int32_t top_k,
                             void *scratch, float *logprobs, di_error *err) {
    if (n < 1 || !logits || !logprobs || !scratch)
        return di_error_set(err, DI_ERR_INVALID_ARG, "dspark logprobs: n %d or a buffer is missing", (int)n);
    if (!(temperature >= 0.0f) || !isfinite(temperature))
        return di_error_set(err, DI_ERR_INVALID_ARG, "dspark logprobs: temperature %g", (double)temperature);
    if (!(top_p > 0.0f && top_p <= 1.0f))
        return di_error_set(err, DI_ERR_INVALID_ARG, "dspark logprobs: top_p %g not in (0, 1]", (double)top_p);
    float t = temperature < DI_DSPARK_MIN_TEMPERATURE ? DI_DSPARK_MIN_TEMPERATURE : temperature;
    float inv_t = 1.0f / t;
    float *x = logprobs; /* the scaled, then filtered logits, in place */
    int finite = 0;
    for (int32_t i = 0; i < n; i++) {
        if (isnan(logits[i]) || logits[i] == INFINITY)
            return di_error_set(err, DI_ERR_INVALID_ARG, "dspark logprobs: logit %d is %g", (int)i,
                                (double)logits[i]);
        x[i] = logits[i] * inv_t;
        finite |= x[i] != -INFINITY;
    }
    if (!finite)
        return di_error_set(err, DI_ERR_INVALID_ARG, "dspark logprobs: every logit is -inf");
    float *p = (float *)scratch;
    int32_t *idx = (int32_t *)(p + n);
    sort_ctx ctx;
    int32_t *tmp = NULL;
    /* top-p: softmax, then drop a token when the mass strictly before it (in
     * stable descending order) already exceeds top_p. */
    tmp = malloc((size_t)n * sizeof(int32_t));
    if (!tmp)
        return di_error_set(err, DI_ERR_NOMEM, "dspark logprobs: sort buffer");
    /* always, as the reference: at top_p = 1 the float running sum can pass
     * 1 before the tail, which then drops its (negligible) tokens */
    {
        float mx = -INFINITY, sum = 0.0f;
        for (int32_t i = 0; i < n; i++)
            mx = x[i] > mx ? x[i] : mx;
        for (int32_t i = 0; i < n; i++)
            sum += p[i] = x[i] == -INFINITY ? 0.0f : expf(x[i] - mx);
        for (int32_t i = 0; i < n; i++) {
            p[i] /= sum;
            idx[i] = i;
        }
        ctx.v = p;
        sort_idx(idx, tmp, n, &ctx);
        double cum = 0.0;
        for (int32_t r = 0; r < n; r++) {
            float pr = p[idx[r]];
            cum += (double)pr;
            if ((float)cum - pr > top_p)
                x[idx[r]] = -INFINITY;
        }
    }
    /* top-k over the survivors: rank by logit, stable. */
    if (top_k >= 0 && top_k < n) {
        for (int32_t i = 0; i < n; i++)
            idx[i] = i;
        ctx.v = x;
        sort_idx(idx, tmp, n, &ctx);
        for (int32_t r = top_k; r < n; r++)
            x[idx[r]] = -INFINITY;
    }
    free(tmp);
    log_softmax(x, n, logprobs);
    return DI_OK;
}

/* ---- verification --------------------------------------------------------- */

static int32_t first_argmax(const float *v, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (v[i] > v[best])
            best = i;
    return best;
}

di_status di_dspark_verify_row(const float *target_lp, const float *draft_lp, int32_t n, int32_t draft,
                               uint64_t seed, int32_t pos, di_dspark_rule rule, float *residual,
                               di_dspark_verdict *out, di_error *err) {
    if (n < 1 || !target_lp || !draft_lp || !residual || !out)
        return di_error_set(err, DI_ERR_INVALID_ARG, "dspark verify: n %d or a buffer is missing", (int)n);
    if (rule != DI_DSPARK_RULE_DEEPINFER && rule != DI_DSPARK_RULE_LOSSLESS)
        return di_error_set(err, DI_ERR_INVALID_ARG, "dspark verify: unknown rule %d", (int)rule);
    const float penalty = rule == DI_DSPARK_RULE_DEEPINFER ? (float)DI_DSPARK_DRAFT_PROB_PENALTY : 0.0f;
    float mass = 0.0f;
    for (int32_t i = 0; i < n; i++) {
        float r = expf(target_lp[i]) - expf(draft_lp[i] - penalty);
        residual[i] = r > 0.0f ? r : 0.0f;
        mass += residual[i];
    }
    float ap = 1.0f - mass;
    out->accept_prob = ap > 0.0f ? ap : 0.0f;
    int pad = draft < 0 || draft >= n;
    out->accepted = 0;
    if (!pad) {
        float lr = target_lp[draft] - draft_lp[draft];
        lr = lr < 0.0f ? lr : 0.0f;
        out->accepted = expf(lr) > di_dspark_verify_uniform(seed, pos);
    }
    if (out->accepted) {
        out->token = draft;
        return DI_OK;
    }
    int32_t t = di_dspark_sample_weights(residual, n, di_dspark_uniform(seed, pos, DI_DSPARK_CASE_RESIDUAL));
    /* An empty residual (target == scaled draft everywhere): the kernel's
     * fallback, the target's first argmax. */
    out->token = t >= 0 ? t : first_argmax(target_lp, n);
    return DI_OK;
}

int32_t di_dspark_sample_logprobs(const float *lp, int32_t n, uint64_t seed, int32_t pos) {
    double u = di_dspark_uniform(seed, pos, DI_DSPARK_CASE_FRESH);
    double total = 0.0;
    for (int32_t i = 0; i < n; i++)
        total += (double)expf(lp[i]);
    if (!(total > 0.0))
        return first_argmax(lp, n);
    double target = u * total, cdf = 0.0;
    int32_t last = -1;
    for (int32_t i = 0; i < n; i++) {
        float w = expf(lp[i]);
        cdf += (double)w;
        if (w > 0.0f)
            last = i;
        if (cdf > target)
            return i;
    }
    return last;
}

int32_t di_dspark_accepted_prefix(const int32_t *accepted, int32_t n_verify) {
    int32_t k = 0;
    while (k < n_verify && accepted[k])
        k++;
    return k;
}

float di_dspark_confidence(const float *h, int32_t n_embd, const float *e, int32_t rank, const float *w,
                           float temperature) {
    float z = 0.0f;
    for (int32_t i = 0; i < n_embd; i++)
        z += h[i] * w[i];
    for (int32_t i = 0; e && i < rank; i++)
        z += e[i] * w[n_embd + i];
    float t = temperature < 1e-5f ? 1e-5f : temperature; /* envs: clamped to at least 1e-5 */
    float s = z / t;
    s = s < -60.0f ? -60.0f : (s > 60.0f ? 60.0f : s);
    return 1.0f / (1.0f + expf(-s));
}
