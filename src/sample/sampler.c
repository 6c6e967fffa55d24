/* The sampler chain; see sampler.h for the order and the semantics of each
 * step. Everything here works on one row and on the sampler's scratch. */
#include "sample/sampler.h"

#include "base/alloc.h"
#include "base/status.h"
#include "sample/rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Below this many undecided candidates the nucleus search sorts the rest
 * instead of partitioning again. */
#define NUCLEUS_SORT_BELOW 32

struct di_sampler {
    int32_t n_vocab;
    float *z;              /* (n_vocab) logits after bias, mask, penalties */
    int32_t *count;        /* (n_vocab) all zero between calls */
    struct cand *cand;     /* (n_vocab) candidate tokens of the current row */
};

/* A candidate token: v is the key it is ranked by (the processed logit while
 * selecting, the scaled logit s = (z - zmax) / T after), w = exp(s). */
struct cand {
    float v;
    float w;
    int32_t id;
};

/* Rank order: larger value first; equal values by lower token id, so every
 * ranking (greedy, top-k, top-p, top logprobs) is a total order and the
 * result never depends on how the scan was done. */
static inline int ranks_before(float va, int32_t ida, float vb, int32_t idb) {
    return va > vb || (va == vb && ida < idb);
}

static int cand_cmp(const void *a, const void *b) {
    const struct cand *x = a, *y = b;
    if (ranks_before(x->v, x->id, y->v, y->id)) return -1;
    if (ranks_before(y->v, y->id, x->v, x->id)) return 1;
    return 0;
}

di_sampling_params di_sampling_params_default(void) {
    di_sampling_params p;
    memset(&p, 0, sizeof p);
    p.temperature = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.repetition_penalty = 1.0f;
    p.logprobs_mode = DI_LOGPROBS_PROCESSED;
    return p;
}

di_status di_sampling_params_validate(const di_sampling_params *p, int32_t n_vocab,
                                      di_error *err) {
    if (!p) return di_error_set(err, DI_ERR_INVALID_ARG, "sampling params: NULL");
    if (n_vocab < 1)
        return di_error_set(err, DI_ERR_INVALID_ARG, "sampling params: n_vocab %d < 1",
                            (int)n_vocab);
    /* isfinite() is false for NaN, so each "!(... )" below also rejects NaN. */
    if (!(isfinite(p->temperature) && p->temperature >= 0.0f))
        return di_error_set(err, DI_ERR_RANGE,
                            "temperature must be a finite number >= 0, got %g",
                            (double)p->temperature);
    if (p->top_k < -1)
        return di_error_set(err, DI_ERR_RANGE,
                            "top_k must be -1 or 0 (off) or >= 1, got %d", (int)p->top_k);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return di_error_set(err, DI_ERR_RANGE, "top_p must be in (0, 1], got %g",
                            (double)p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return di_error_set(err, DI_ERR_RANGE, "min_p must be in [0, 1], got %g",
                            (double)p->min_p);
    if (!(isfinite(p->repetition_penalty) && p->repetition_penalty > 0.0f))
        return di_error_set(err, DI_ERR_RANGE,
                            "repetition_penalty must be a finite number > 0, got %g",
                            (double)p->repetition_penalty);
    if (!(fabsf(p->presence_penalty) <= DI_SAMPLER_MAX_ABS_PENALTY))
        return di_error_set(err, DI_ERR_RANGE, "presence_penalty must be in [-2, 2], got %g",
                            (double)p->presence_penalty);
    if (!(fabsf(p->frequency_penalty) <= DI_SAMPLER_MAX_ABS_PENALTY))
        return di_error_set(err, DI_ERR_RANGE, "frequency_penalty must be in [-2, 2], got %g",
                            (double)p->frequency_penalty);
    if (p->n_logit_bias > 0 && !p->logit_bias)
        return di_error_set(err, DI_ERR_INVALID_ARG,
                            "logit_bias: %zu entries but no array", p->n_logit_bias);
    for (size_t i = 0; i < p->n_logit_bias; i++) {
        const di_logit_bias *b = &p->logit_bias[i];
        if (b->token < 0 || b->token >= n_vocab)
            return di_error_set(err, DI_ERR_RANGE,
                                "logit_bias: token %d outside the vocabulary [0, %d)",
                                (int)b->token, (int)n_vocab);
        if (!(fabsf(b->bias) <= DI_SAMPLER_MAX_ABS_LOGIT_BIAS))
            return di_error_set(err, DI_ERR_RANGE,
                                "logit_bias: bias for token %d must be in [-100, 100], got %g",
                                (int)b->token, (double)b->bias);
    }
    if (p->top_logprobs < 0 || p->top_logprobs > DI_SAMPLER_MAX_TOP_LOGPROBS)
        return di_error_set(err, DI_ERR_RANGE, "top_logprobs must be in [0, %d], got %d",
                            DI_SAMPLER_MAX_TOP_LOGPROBS, (int)p->top_logprobs);
    if (p->top_logprobs > 0 && !p->logprobs)
        return di_error_set(err, DI_ERR_INVALID_ARG, "top_logprobs needs logprobs enabled");
    if (p->logprobs_mode != DI_LOGPROBS_PROCESSED && p->logprobs_mode != DI_LOGPROBS_RAW)
        return di_error_set(err, DI_ERR_INVALID_ARG, "logprobs_mode: unknown value %d",
                            (int)p->logprobs_mode);
    return DI_OK;
}

di_status di_sampler_create(int32_t n_vocab, di_sampler **out, di_error *err) {
    *out = NULL;
    if (n_vocab < 1)
        return di_error_set(err, DI_ERR_INVALID_ARG, "sampler: n_vocab %d < 1", (int)n_vocab);
    di_sampler *s = di_calloc(1, sizeof *s);
    if (!s) return di_error_set(err, DI_ERR_NOMEM, "sampler: out of memory");
    s->n_vocab = n_vocab;
    s->z = di_malloc_array((size_t)n_vocab, sizeof *s->z);
    s->count = di_calloc((size_t)n_vocab, sizeof *s->count);
    s->cand = di_malloc_array((size_t)n_vocab, sizeof *s->cand);
    if (!s->z || !s->count || !s->cand) {
        di_sampler_free(s);
        return di_error_set(err, DI_ERR_NOMEM, "sampler: out of memory for %d-token scratch",
                            (int)n_vocab);
    }
    *out = s;
    return DI_OK;
}

void di_sampler_free(di_sampler *s) {
    if (!s) return;
    free(s->z);
    free(s->count);
    free(s->cand);
    free(s);
}

int32_t di_sampler_n_vocab(const di_sampler *s) { return s->n_vocab; }

static di_status check_input(const di_sampler *s, const di_sample_input *in, di_error *err) {
    if (!in || !in->logits)
        return di_error_set(err, DI_ERR_INVALID_ARG, "sampler: no logits");
    if (in->n_tokens < 0 || in->n_prompt < 0 || in->n_prompt > in->n_tokens)
        return di_error_set(err, DI_ERR_INVALID_ARG,
                            "sampler: bad history sizes (n_tokens %d, n_prompt %d)",
                            (int)in->n_tokens, (int)in->n_prompt);
    if (in->n_tokens > 0 && !in->tokens)
        return di_error_set(err, DI_ERR_INVALID_ARG, "sampler: %d history tokens but no array",
                            (int)in->n_tokens);
    for (int32_t i = 0; i < in->n_tokens; i++)
        if (in->tokens[i] < 0 || in->tokens[i] >= s->n_vocab)
            return di_error_set(err, DI_ERR_RANGE,
                                "sampler: history token %d at index %d outside [0, %d)",
                                (int)in->tokens[i], (int)i, (int)s->n_vocab);
    return DI_OK;
}

/* Step 2. `count` is all zero on entry and on exit, so clearing costs
 * O(history), not O(V). */
static void apply_penalties(di_sampler *s, const di_sampling_params *p,
                            const di_sample_input *in) {
    float *z = s->z;
    int32_t *count = s->count;
    const int32_t *tok = in->tokens;
    if (p->repetition_penalty != 1.0f) {
        const float r = p->repetition_penalty;
        for (int32_t i = 0; i < in->n_tokens; i++) {
            int32_t t = tok[i];
            if (count[t]) continue; /* once per distinct token */
            count[t] = 1;
            z[t] = z[t] > 0.0f ? z[t] / r : z[t] * r;
        }
        for (int32_t i = 0; i < in->n_tokens; i++) count[tok[i]] = 0;
    }
    if (p->frequency_penalty != 0.0f || p->presence_penalty != 0.0f) {
        for (int32_t i = in->n_prompt; i < in->n_tokens; i++) count[tok[i]]++;
        for (int32_t i = in->n_prompt; i < in->n_tokens; i++) {
            int32_t t = tok[i];
            if (!count[t]) continue; /* already applied */
            z[t] -= p->frequency_penalty * (float)count[t] + p->presence_penalty;
            count[t] = 0;
        }
    }
}

/* The row after steps 1-2, in s->z, plus what later steps need. */
struct processed {
    float zmax;     /* largest finite processed logit */
    int32_t argmax; /* its lowest token id: the greedy choice */
    int32_t n_finite;
};

/* Lanes of the row scan: enough for one AVX-512 vector of floats. */
#define SCAN_LANES 16

/* zmax, argmax and n_finite of z (V), as one pass over the tokens in order
 * would find them (strict >: the lowest id of the largest finite value),
 * but branch-free so the compiler vectorizes it: lane k keeps the first
 * maximum among tokens k, k + SCAN_LANES, ...; the lanes merge by value,
 * then lowest id, and the tail runs in order after them (its ids are the
 * highest). -inf never wins, so a row of -inf leaves argmax -1. Returns
 * nonzero if some value is +inf (NaN cannot reach here). */
static int scan_row(const float *z, int32_t V, struct processed *pr) {
    float lmax[SCAN_LANES];
    int32_t lidx[SCAN_LANES], lfin[SCAN_LANES];
    int32_t linf[SCAN_LANES];
    for (int k = 0; k < SCAN_LANES; k++) {
        lmax[k] = -INFINITY;
        lidx[k] = -1;
        lfin[k] = 0;
        linf[k] = 0;
    }
    int32_t t = 0;
    for (; t + SCAN_LANES <= V; t += SCAN_LANES)
        for (int k = 0; k < SCAN_LANES; k++) {
            float x = z[t + k];
            int gt = x > lmax[k];
            lmax[k] = gt ? x : lmax[k];
            lidx[k] = gt ? t + k : lidx[k];
            lfin[k] += x != -INFINITY;
            linf[k] |= x == INFINITY;
        }
    pr->zmax = -INFINITY;
    pr->argmax = -1;
    pr->n_finite = 0;
    int inf = 0;
    for (int k = 0; k < SCAN_LANES; k++) {
        if (lidx[k] >= 0 && (lmax[k] > pr->zmax || (lmax[k] == pr->zmax && lidx[k] < pr->argmax))) {
            pr->zmax = lmax[k];
            pr->argmax = lidx[k];
        }
        pr->n_finite += lfin[k];
        inf |= linf[k];
    }
    for (; t < V; t++) {
        float x = z[t];
        if (x > pr->zmax) {
            pr->zmax = x;
            pr->argmax = t;
        }
        pr->n_finite += x != -INFINITY;
        inf |= x == INFINITY;
    }
    return inf;
}

static di_status process_row(di_sampler *s, const di_sampling_params *p,
                             const di_sample_input *in, struct processed *pr, di_error *err) {
    const int32_t V = s->n_vocab;
    float *z = s->z;
    /* Model logits may be -inf (a model that masks), never NaN or +inf: those
     * mean a broken forward pass, and sampling from them would hide it. The
     * check has no early exit so the compiler vectorizes the copy; the rare
     * bad row is scanned again for the first offending token. */
    int bad = 0;
    for (int32_t t = 0; t < V; t++) {
        float x = in->logits[t];
        bad |= (x != x) | (x == INFINITY);
        z[t] = x;
    }
    if (bad)
        for (int32_t t = 0; t < V; t++)
            if (isnan(z[t]) || z[t] == INFINITY)
                return di_error_set(err, DI_ERR_RANGE, "sampler: logit of token %d is %g", (int)t,
                                    (double)z[t]);
    for (size_t i = 0; i < p->n_logit_bias; i++) z[p->logit_bias[i].token] += p->logit_bias[i].bias;
    if (in->allowed)
        for (int32_t t = 0; t < V; t++)
            if (!((in->allowed[t >> 5] >> (t & 31)) & 1u)) z[t] = -INFINITY;
    apply_penalties(s, p, in);

    /* A tiny repetition penalty can push a large logit to +inf (no NaN is
     * possible here: finite values and -inf stay clear of it). */
    if (scan_row(z, V, pr))
        for (int32_t t = 0; t < V; t++)
            if (z[t] == INFINITY)
                return di_error_set(err, DI_ERR_RANGE,
                                    "sampler: logit of token %d overflowed to %g after penalties",
                                    (int)t, (double)z[t]);
    if (pr->n_finite == 0)
        return di_error_set(err, DI_ERR_INVALID_ARG,
                            "sampler: the mask and logit_bias leave no token to sample");
    return DI_OK;
}

/* Min-heap on rank order (its root is the worst kept entry): keeps the k
 * best of a stream in O(log k) per accepted entry. */
static void heap_sift_down(struct cand *h, int32_t n, int32_t i) {
    for (;;) {
        int32_t l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && ranks_before(h[w].v, h[w].id, h[l].v, h[l].id)) w = l;
        if (r < n && ranks_before(h[w].v, h[w].id, h[r].v, h[r].id)) w = r;
        if (w == i) return;
        struct cand tmp = h[i];
        h[i] = h[w];
        h[w] = tmp;
        i = w;
    }
}

static void heap_sift_up(struct cand *h, int32_t i) {
    while (i > 0) {
        int32_t parent = (i - 1) / 2;
        if (!ranks_before(h[parent].v, h[parent].id, h[i].v, h[i].id)) return;
        struct cand tmp = h[i];
        h[i] = h[parent];
        h[parent] = tmp;
        i = parent;
    }
}

/* Writes the k best finite entries of x (V) into out, sorted best first;
 * returns how many (fewer than k when fewer are finite). O(V log k). */
static int32_t select_top(const float *x, int32_t V, int32_t k, struct cand *out) {
    int32_t n = 0;
    for (int32_t t = 0; t < V && k > 0; t++) {
        float v = x[t];
        if (v == -INFINITY) continue;
        if (n < k) {
            out[n] = (struct cand){.v = v, .w = 0.0f, .id = t};
            heap_sift_up(out, n++);
        } else if (ranks_before(v, t, out[0].v, out[0].id)) {
            out[0] = (struct cand){.v = v, .w = 0.0f, .id = t};
            heap_sift_down(out, n, 0);
        }
    }
    qsort(out, (size_t)n, sizeof *out, cand_cmp);
    return n;
}

/* Cuts a best-first candidate list to the top-p nucleus of a distribution
 * whose total (unnormalized) mass is `total`: a candidate stays while the
 * mass ranked strictly above it is < top_p * total. */
static int32_t cut_top_p(const struct cand *c, int32_t n, double total, float top_p) {
    const double limit = (double)top_p * total;
    double above = 0.0;
    int32_t keep = 0;
    while (keep < n && above < limit) above += c[keep++].w;
    return keep > 0 ? keep : 1;
}

/* Cuts a best-first list (c[0] is the maximum, w = 1) to w >= min_p. */
static int32_t cut_min_p(const struct cand *c, int32_t n, float min_p) {
    int32_t keep = 1;
    while (keep < n && c[keep].w >= min_p) keep++;
    return keep;
}

static inline void cand_swap(struct cand *a, struct cand *b) {
    struct cand t = *a;
    *a = *b;
    *b = t;
}

static inline int cand_before(const struct cand *a, const struct cand *b) {
    return ranks_before(a->v, a->id, b->v, b->id);
}

/* Moves the top-p nucleus of c[0..n) to the front and returns its size:
 * the tokens whose mass ranked strictly above them is < need. Quickselect
 * by rank, steered by mass instead of by count, so the expected cost is
 * O(n) and nothing is sorted but a small remainder; after a bounded number
 * of partitions (bad pivots) it sorts what is left, so the worst case is
 * O(n log n). The kept tokens come out in a deterministic order that is not
 * the rank order, which the draw does not need. */
static int32_t nucleus_select(struct cand *c, int32_t n, double need) {
    int32_t lo = 0, hi = n; /* [0, lo) kept, [hi, n) dropped, between: open */
    double above = 0.0;     /* mass of c[0..lo) */
    int budget = 8;
    for (int32_t m = n; m > 1; m >>= 1) budget += 2;
    while (hi - lo > NUCLEUS_SORT_BELOW && budget-- > 0) {
        /* Median of three, moved to hi - 1: deterministic, and robust to
         * logits that arrive sorted. */
        int32_t mid = lo + (hi - lo) / 2, last = hi - 1;
        if (cand_before(&c[mid], &c[lo])) cand_swap(&c[mid], &c[lo]);
        if (cand_before(&c[last], &c[lo])) cand_swap(&c[last], &c[lo]);
        if (cand_before(&c[mid], &c[last])) cand_swap(&c[mid], &c[last]);
        const struct cand pivot = c[last];
        int32_t store = lo;
        double mass_better = 0.0;
        for (int32_t i = lo; i < last; i++) {
            if (cand_before(&c[i], &pivot)) {
                mass_better += c[i].w;
                cand_swap(&c[i], &c[store++]);
            }
        }
        cand_swap(&c[store], &c[last]);
        if (above + mass_better >= need) {
            hi = store; /* the pivot has too much mass above it: it and all
                           worse tokens are out */
        } else {
            above += mass_better + c[store].w; /* the pivot and all better are in */
            lo = store + 1;
        }
    }
    qsort(c + lo, (size_t)(hi - lo), sizeof *c, cand_cmp);
    int32_t keep = lo;
    while (keep < hi && above < need) above += c[keep++].w;
    return keep > 0 ? keep : 1;
}

/* Steps 4-7: fills s->cand[0..n) with the surviving tokens and their
 * weights w = exp((z - zmax) / T); returns n. The order is deterministic
 * (a function of the row and the parameters only), which is all the draw
 * needs. */
static int32_t truncate_row(di_sampler *s, const di_sampling_params *p,
                            const struct processed *pr) {
    const int32_t V = s->n_vocab;
    const float *z = s->z;
    const float T = p->temperature, zmax = pr->zmax;
    struct cand *c = s->cand;
    const bool top_k_on = p->top_k > 0 && p->top_k < pr->n_finite;
    const bool top_p_on = p->top_p < 1.0f;
    const bool min_p_on = p->min_p > 0.0f;

    if (top_k_on) {
        int32_t n = select_top(z, V, p->top_k, c);
        double total = 0.0;
        for (int32_t i = 0; i < n; i++) {
            c[i].v = (c[i].v - zmax) / T;
            c[i].w = expf(c[i].v);
            total += c[i].w;
        }
        if (top_p_on) n = cut_top_p(c, n, total, p->top_p);
        if (min_p_on) n = cut_min_p(c, n, p->min_p);
        return n;
    }

    if (top_p_on) {
        /* The nucleus and the min-p set are both prefixes of the ranking,
         * so their intersection is the shorter one: collect only tokens that
         * pass min-p, but measure top-p against the mass of ALL tokens. */
        int32_t n = 0;
        double total = 0.0;
        for (int32_t t = 0; t < V; t++) {
            if (z[t] == -INFINITY) continue;
            float v = (z[t] - zmax) / T;
            float w = expf(v);
            total += w;
            if (min_p_on && !(w >= p->min_p)) continue;
            c[n++] = (struct cand){.v = v, .w = w, .id = t};
        }
        return nucleus_select(c, n, (double)p->top_p * total);
    }

    /* Neither top-k nor top-p: min-p (if on) is a threshold, no ranking. */
    int32_t n = 0;
    for (int32_t t = 0; t < V; t++) {
        if (z[t] == -INFINITY) continue;
        float v = (z[t] - zmax) / T;
        float w = expf(v);
        if (min_p_on && !(w >= p->min_p)) continue;
        c[n++] = (struct cand){.v = v, .w = w, .id = t};
    }
    return n;
}

/* Step 8: inverse CDF over the survivors with u in [0, 1). */
static int32_t draw_token(const struct cand *c, int32_t n, float u) {
    double sum = 0.0;
    for (int32_t i = 0; i < n; i++) sum += c[i].w;
    const double target = (double)u * sum;
    double cum = 0.0;
    int32_t last_positive = c[0].id;
    for (int32_t i = 0; i < n; i++) {
        if (c[i].w <= 0.0f) continue; /* never pick a zero-weight token */
        cum += c[i].w;
        last_positive = c[i].id;
        if (cum > target) return c[i].id;
    }
    return last_positive; /* rounding left target at the very end */
}

/* Log-softmax pieces of x (V) in double: returns log(sum exp(x)). */
static double log_normalizer(const float *x, int32_t V) {
    float m = -INFINITY;
    for (int32_t t = 0; t < V; t++)
        if (x[t] > m) m = x[t];
    double sum = 0.0;
    for (int32_t t = 0; t < V; t++)
        if (x[t] != -INFINITY) sum += exp((double)x[t] - (double)m);
    return (double)m + log(sum);
}

static void fill_logprobs(di_sampler *s, const di_sampling_params *p,
                          const di_sample_input *in, di_sample_result *out) {
    const float *x = p->logprobs_mode == DI_LOGPROBS_RAW ? in->logits : s->z;
    const double logz = log_normalizer(x, s->n_vocab);
    out->logprob = (float)((double)x[out->token] - logz);
    /* s->cand is free again once the token is drawn. */
    int32_t n = select_top(x, s->n_vocab, p->top_logprobs, s->cand);
    for (int32_t i = 0; i < n; i++) {
        out->top[i].token = s->cand[i].id;
        out->top[i].logprob = (float)((double)s->cand[i].v - logz);
    }
    out->n_top = n;
}

di_status di_sampler_sample(di_sampler *s, const di_sampling_params *p,
                            const di_sample_input *in, di_sample_result *out,
                            di_error *err) {
    di_status st = di_sampling_params_validate(p, s->n_vocab, err);
    if (st) return st;
    if ((st = check_input(s, in, err))) return st;
    struct processed pr;
    if ((st = process_row(s, p, in, &pr, err))) return st;

    int32_t token;
    if (p->temperature == 0.0f) {
        token = pr.argmax;
    } else {
        int32_t n = truncate_row(s, p, &pr);
        float u = di_rng_uniform(p->seed, DI_RNG_DOMAIN_SAMPLE, in->position, 0);
        token = draw_token(s->cand, n, u);
    }
    memset(out, 0, sizeof *out);
    out->token = token;
    if (p->logprobs) fill_logprobs(s, p, in, out);
    return DI_OK;
}

di_status di_sampler_distribution(di_sampler *s, const di_sampling_params *p,
                                  const di_sample_input *in, float *probs, di_error *err) {
    di_status st = di_sampling_params_validate(p, s->n_vocab, err);
    if (st) return st;
    if ((st = check_input(s, in, err))) return st;
    if (!probs) return di_error_set(err, DI_ERR_INVALID_ARG, "sampler: no output array");
    struct processed pr;
    if ((st = process_row(s, p, in, &pr, err))) return st;

    memset(probs, 0, (size_t)s->n_vocab * sizeof *probs);
    if (p->temperature == 0.0f) {
        probs[pr.argmax] = 1.0f;
        return DI_OK;
    }
    int32_t n = truncate_row(s, p, &pr);
    double sum = 0.0;
    for (int32_t i = 0; i < n; i++) sum += s->cand[i].w;
    for (int32_t i = 0; i < n; i++) probs[s->cand[i].id] = (float)(s->cand[i].w / sum);
    return DI_OK;
}
