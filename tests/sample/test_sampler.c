/* sample/sampler: the chain, step by step, against hand-computed values,
 * an in-test double-precision reference, and goldens from
 * scripts/gen_goldens_sampler.py. */
#include "test_util.h"

#include "sample/rng.h"
#include "sample/sampler.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_ELEMS(a) (sizeof(a) / sizeof((a)[0]))

static di_sampler *make_sampler(int32_t n_vocab) {
    di_sampler *s = NULL;
    di_error err;
    assert_int_equal(di_sampler_create(n_vocab, &s, &err), DI_OK);
    return s;
}

static di_sample_input row(const float *logits) {
    di_sample_input in;
    memset(&in, 0, sizeof in);
    in.logits = logits;
    return in;
}

static int32_t sample_one(di_sampler *s, const di_sampling_params *p, const di_sample_input *in) {
    di_sample_result r;
    di_error err;
    di_status st = di_sampler_sample(s, p, in, &r, &err);
    if (st) fail_msg("sample failed: %s", err.msg);
    return r.token;
}

static void distribution(di_sampler *s, const di_sampling_params *p, const di_sample_input *in,
                         float *probs) {
    di_error err;
    di_status st = di_sampler_distribution(s, p, in, probs, &err);
    if (st) fail_msg("distribution failed: %s", err.msg);
}

/* softmax(x / T) in double, -inf entries -> 0. */
static void softmax_ref(const float *x, int n, double T, double *out) {
    double m = -INFINITY, sum = 0;
    for (int i = 0; i < n; i++)
        if (x[i] / T > m) m = x[i] / T;
    for (int i = 0; i < n; i++) {
        out[i] = x[i] == -INFINITY ? 0.0 : exp(x[i] / T - m);
        sum += out[i];
    }
    for (int i = 0; i < n; i++) out[i] /= sum;
}

static void greedy_picks_argmax_with_lowest_id_on_ties(void **state) {
    (void)state;
    const float logits[] = {1.0f, 3.0f, -2.0f, 3.0f, 2.5f};
    di_sampler *s = make_sampler(5);
    di_sampling_params p = di_sampling_params_default();
    p.temperature = 0.0f;
    p.top_k = 2; /* ignored by greedy */
    p.top_p = 0.1f;
    di_sample_input in = row(logits);
    for (uint64_t pos = 0; pos < 10; pos++) {
        in.position = pos;
        assert_int_equal(sample_one(s, &p, &in), 1);
    }
    float probs[5];
    distribution(s, &p, &in, probs);
    assert_true(probs[1] == 1.0f && probs[3] == 0.0f);
    di_sampler_free(s);
}

/* The greedy scan runs in vector lanes plus an in-order tail: on rows of
 * every width around the lane count, with few distinct values (ties across
 * lanes and in the tail) and -inf holes, it must pick what one in-order
 * pass picks: the lowest id of the largest value. */
static void greedy_matches_in_order_scan_on_wide_rows_with_ties(void **state) {
    (void)state;
    const int32_t widths[] = {1, 2, 15, 16, 17, 31, 32, 33, 100, 1000, 4099};
    const float values[] = {-INFINITY, -1.0f, 0.0f, -0.0f, 0.5f, 2.0f};
    float z[4099];
    di_sampling_params p = di_sampling_params_default();
    p.temperature = 0.0f;
    uint32_t rng = 12345u;
    for (size_t w = 0; w < N_ELEMS(widths); w++) {
        const int32_t V = widths[w];
        di_sampler *s = make_sampler(V);
        for (int trial = 0; trial < 50; trial++) {
            for (int32_t t = 0; t < V; t++) {
                rng = rng * 1664525u + 1013904223u;
                z[t] = values[(rng >> 16) % N_ELEMS(values)];
            }
            if (trial % 5 == 0) z[V - 1] = 3.0f; /* the best in the tail */
            z[(trial * 7) % V] = z[(trial * 7) % V] == -INFINITY ? 1.0f : z[(trial * 7) % V];
            int32_t want = -1;
            float best = -INFINITY;
            for (int32_t t = 0; t < V; t++)
                if (z[t] > best) {
                    best = z[t];
                    want = t;
                }
            di_sample_input in = row(z);
            assert_int_equal(sample_one(s, &p, &in), want);
        }
        di_sampler_free(s);
    }
}

static void temperature_scales_the_distribution(void **state) {
    (void)state;
    const float logits[] = {0.5f, -1.0f, 2.0f, 0.0f, 1.25f, -3.0f};
    di_sampler *s = make_sampler(6);
    di_sample_input in = row(logits);
    const float temps[] = {0.25f, 0.7f, 1.0f, 2.0f, 10.0f};
    for (size_t k = 0; k < N_ELEMS(temps); k++) {
        di_sampling_params p = di_sampling_params_default();
        p.temperature = temps[k];
        float probs[6];
        double want[6];
        distribution(s, &p, &in, probs);
        softmax_ref(logits, 6, temps[k], want);
        for (int i = 0; i < 6; i++) assert_true(fabs(probs[i] - want[i]) < 1e-6);
    }
    di_sampler_free(s);
}

/* Indices of nonzero entries, as a bit set (vocab <= 32 in these tests). */
static uint32_t support(const float *probs, int n) {
    uint32_t set = 0;
    for (int i = 0; i < n; i++)
        if (probs[i] > 0.0f) set |= 1u << i;
    return set;
}

static void top_k_keeps_exactly_the_k_best(void **state) {
    (void)state;
    /* Ranked: 4 (5.0), 1 (4.0), 6 (4.0), 0 (3.0), 3 (1.0), ... */
    const float logits[] = {3.0f, 4.0f, -1.0f, 1.0f, 5.0f, 0.0f, 4.0f, -2.0f};
    di_sampler *s = make_sampler(8);
    di_sample_input in = row(logits);
    di_sampling_params p = di_sampling_params_default();
    float probs[8];
    p.top_k = 1;
    distribution(s, &p, &in, probs);
    assert_int_equal(support(probs, 8), 1u << 4);
    /* The tie at 4.0 is split by lowest id: k = 2 keeps token 1, not 6. */
    p.top_k = 2;
    distribution(s, &p, &in, probs);
    assert_int_equal(support(probs, 8), (1u << 4) | (1u << 1));
    p.top_k = 4;
    distribution(s, &p, &in, probs);
    assert_int_equal(support(probs, 8), (1u << 4) | (1u << 1) | (1u << 6) | (1u << 0));
    /* Survivors are renormalized softmax of the kept logits. */
    double e4 = exp(5.0), e1 = exp(4.0), e0 = exp(3.0), sum = e4 + 2 * e1 + e0;
    assert_true(fabs(probs[4] - e4 / sum) < 1e-6);
    assert_true(fabs(probs[0] - e0 / sum) < 1e-6);
    /* k >= vocab and k = -1 are "off". */
    p.top_k = 100;
    distribution(s, &p, &in, probs);
    assert_int_equal(support(probs, 8), 0xffu);
    p.top_k = -1;
    distribution(s, &p, &in, probs);
    assert_int_equal(support(probs, 8), 0xffu);
    di_sampler_free(s);
}

/* Logits log(p) for a given distribution, so truncation points are exact
 * enough to reason about by hand. */
static void log_of(const double *prob, int n, float *logits) {
    for (int i = 0; i < n; i++) logits[i] = (float)log(prob[i]);
}

static void top_p_keeps_the_smallest_prefix_reaching_p(void **state) {
    (void)state;
    const double prob[] = {0.05, 0.30, 0.10, 0.50, 0.05};
    float logits[5];
    log_of(prob, 5, logits);
    di_sampler *s = make_sampler(5);
    di_sample_input in = row(logits);
    di_sampling_params p = di_sampling_params_default();
    float probs[5];
    /* Mass ranked above: 3 -> 0, 1 -> 0.5, 2 -> 0.8, then 0.9, 0.95. */
    const struct {
        float top_p;
        uint32_t want;
    } cases[] = {
        {0.3f, 1u << 3},
        {0.5f, 1u << 3}, /* 0.5 above token 1 is not < 0.5 */
        {0.75f, (1u << 3) | (1u << 1)},
        {0.85f, (1u << 3) | (1u << 1) | (1u << 2)},
        {0.99f, 0x1fu},
    };
    for (size_t i = 0; i < N_ELEMS(cases); i++) {
        p.top_p = cases[i].top_p;
        distribution(s, &p, &in, probs);
        assert_int_equal(support(probs, 5), cases[i].want);
    }
    /* top_p 0.75 renormalizes over {0.5, 0.3}. */
    p.top_p = 0.75f;
    distribution(s, &p, &in, probs);
    assert_true(fabs(probs[3] - 0.625) < 1e-6 && fabs(probs[1] - 0.375) < 1e-6);
    di_sampler_free(s);
}

/* top-p works on the distribution left after top-k, as in HF. */
static void top_p_is_measured_after_top_k(void **state) {
    (void)state;
    const double prob[] = {0.4, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1};
    float logits[7];
    log_of(prob, 7, logits);
    di_sampler *s = make_sampler(7);
    di_sample_input in = row(logits);
    di_sampling_params p = di_sampling_params_default();
    float probs[7];
    /* Without top-k, top_p 0.55 keeps 0.4 + two 0.1s (above: 0, .4, .5). */
    p.top_p = 0.55f;
    distribution(s, &p, &in, probs);
    assert_int_equal(support(probs, 7), 0x7u);
    /* With top_k 2 the survivors are 0.8 / 0.2: top_p 0.55 keeps one. */
    p.top_k = 2;
    distribution(s, &p, &in, probs);
    assert_int_equal(support(probs, 7), 0x1u);
    di_sampler_free(s);
}

static void min_p_keeps_tokens_within_ratio_of_the_best(void **state) {
    (void)state;
    const double prob[] = {0.04, 0.2, 0.5, 0.1, 0.16};
    float logits[5];
    log_of(prob, 5, logits);
    di_sampler *s = make_sampler(5);
    di_sample_input in = row(logits);
    di_sampling_params p = di_sampling_params_default();
    float probs[5];
    p.min_p = 0.3f; /* keep p >= 0.15 */
    distribution(s, &p, &in, probs);
    assert_int_equal(support(probs, 5), (1u << 1) | (1u << 2) | (1u << 4));
    /* Temperature changes the ratios: at T = 0.5 p ~ prob^2, so
     * 0.2^2 / 0.5^2 = 0.16 < 0.3 and only token 2 stays. */
    p.temperature = 0.5f;
    distribution(s, &p, &in, probs);
    assert_int_equal(support(probs, 5), 1u << 2);
    /* With top-p, top-k too: the result is the intersection. */
    p.temperature = 1.0f;
    p.min_p = 0.1f;   /* keep >= 0.05: drops token 0 */
    p.top_p = 0.75f;  /* above: 2 -> 0, 1 -> .5, 4 -> .7, 3 -> .86 */
    distribution(s, &p, &in, probs);
    assert_int_equal(support(probs, 5), (1u << 1) | (1u << 2) | (1u << 4));
    p.top_k = 2;
    distribution(s, &p, &in, probs);
    assert_int_equal(support(probs, 5), (1u << 1) | (1u << 2));
    di_sampler_free(s);
}

/* Processed logprobs of all tokens (top_logprobs = vocab <= 20). */
static void processed_logprobs(di_sampler *s, const di_sampling_params *p0,
                               const di_sample_input *in, int n, double *lp) {
    di_sampling_params p = *p0;
    p.logprobs = true;
    p.top_logprobs = n;
    p.temperature = 0.0f;
    di_sample_result r;
    di_error err;
    assert_int_equal(di_sampler_sample(s, &p, in, &r, &err), DI_OK);
    for (int i = 0; i < n; i++) lp[i] = -INFINITY;
    for (int i = 0; i < r.n_top; i++) lp[r.top[i].token] = r.top[i].logprob;
}

static void log_softmax_ref(const double *z, int n, double *out) {
    double m = -INFINITY, sum = 0;
    for (int i = 0; i < n; i++)
        if (z[i] > m) m = z[i];
    for (int i = 0; i < n; i++)
        if (z[i] != -INFINITY) sum += exp(z[i] - m);
    for (int i = 0; i < n; i++) out[i] = z[i] - m - log(sum);
}

static void penalties_match_hand_computed_logits(void **state) {
    (void)state;
    const float logits[] = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f};
    const int32_t history[] = {0, 1, /* generated: */ 1, 3, 3};
    di_sampler *s = make_sampler(5);
    di_sample_input in = row(logits);
    in.tokens = history;
    in.n_tokens = 5;
    in.n_prompt = 2;
    di_sampling_params p = di_sampling_params_default();
    p.repetition_penalty = 2.0f;
    p.frequency_penalty = 0.5f;
    p.presence_penalty = 0.25f;
    /* Repetition over the distinct history {0, 1, 3}: 2/2, -1*2, 3/2.
     * Then generated counts {1: 1, 3: 2}: token 1: -2 - 0.5 - 0.25;
     * token 3: 1.5 - 1.0 - 0.25. Tokens 2 and 4 untouched. */
    const double z[] = {1.0, -2.75, 0.5, 0.25, -2.0};
    double want[5], got[5];
    log_softmax_ref(z, 5, want);
    processed_logprobs(s, &p, &in, 5, got);
    for (int i = 0; i < 5; i++) assert_true(fabs(got[i] - want[i]) < 1e-6);

    /* Only the repetition penalty: presence/frequency off. */
    p.frequency_penalty = p.presence_penalty = 0.0f;
    const double z_rep[] = {1.0, -2.0, 0.5, 1.5, -2.0};
    log_softmax_ref(z_rep, 5, want);
    processed_logprobs(s, &p, &in, 5, got);
    for (int i = 0; i < 5; i++) assert_true(fabs(got[i] - want[i]) < 1e-6);

    /* Presence/frequency never look at the prompt: with everything in
     * the prompt, only repetition applies. */
    p.frequency_penalty = 0.5f;
    p.presence_penalty = 0.25f;
    in.n_prompt = 5;
    processed_logprobs(s, &p, &in, 5, got);
    for (int i = 0; i < 5; i++) assert_true(fabs(got[i] - want[i]) < 1e-6);

    /* Negative penalties reward tokens (OpenAI allows [-2, 2]). */
    p = di_sampling_params_default();
    p.presence_penalty = -1.0f;
    in.n_prompt = 2;
    const double z_neg[] = {2.0, 0.0, 0.5, 4.0, -2.0};
    log_softmax_ref(z_neg, 5, want);
    processed_logprobs(s, &p, &in, 5, got);
    for (int i = 0; i < 5; i++) assert_true(fabs(got[i] - want[i]) < 1e-6);
    di_sampler_free(s);
}

static void penalties_leave_scratch_clean_between_calls(void **state) {
    (void)state;
    /* A second call with no history must see untouched logits: the count
     * scratch must be all zero again after a penalized call. */
    const float logits[] = {1.0f, 2.0f, 3.0f};
    const int32_t history[] = {2, 2, 1};
    di_sampler *s = make_sampler(3);
    di_sample_input in = row(logits);
    in.tokens = history;
    in.n_tokens = 3;
    di_sampling_params p = di_sampling_params_default();
    p.repetition_penalty = 3.0f;
    p.frequency_penalty = 1.0f;
    double got[3], want[3];
    processed_logprobs(s, &p, &in, 3, got);
    in.n_tokens = 0;
    processed_logprobs(s, &p, &in, 3, got);
    const double z[] = {1.0, 2.0, 3.0};
    log_softmax_ref(z, 3, want);
    for (int i = 0; i < 3; i++) assert_true(fabs(got[i] - want[i]) < 1e-6);
    di_sampler_free(s);
}

static void logit_bias_is_added_and_entries_accumulate(void **state) {
    (void)state;
    const float logits[] = {0.0f, 1.0f, 2.0f, 3.0f};
    di_sampler *s = make_sampler(4);
    di_sample_input in = row(logits);
    di_sampling_params p = di_sampling_params_default();
    const di_logit_bias bias[] = {{0, 2.0f}, {0, 2.0f}, {3, -100.0f}};
    p.logit_bias = bias;
    p.n_logit_bias = N_ELEMS(bias);
    p.temperature = 0.0f;
    assert_int_equal(sample_one(s, &p, &in), 0); /* 0 + 4 beats 2 */
    double got[4], want[4];
    const double z[] = {4.0, 1.0, 2.0, -97.0};
    log_softmax_ref(z, 4, want);
    processed_logprobs(s, &p, &in, 4, got);
    for (int i = 0; i < 4; i++) assert_true(fabs(got[i] - want[i]) < 1e-5);
    di_sampler_free(s);
}

static void mask_removes_disallowed_tokens(void **state) {
    (void)state;
    enum { V = 40 };
    float logits[V];
    for (int i = 0; i < V; i++) logits[i] = (float)i * 0.1f; /* best is 39 */
    uint32_t allowed[2] = {0, 0};
    const int ok[] = {3, 17, 33, 35};
    for (size_t i = 0; i < N_ELEMS(ok); i++) allowed[ok[i] / 32] |= 1u << (ok[i] % 32);
    di_sampler *s = make_sampler(V);
    di_sample_input in = row(logits);
    in.allowed = allowed;
    di_sampling_params p = di_sampling_params_default();
    p.temperature = 0.0f;
    assert_int_equal(sample_one(s, &p, &in), 35);
    p.temperature = 1.0f;
    float probs[V];
    distribution(s, &p, &in, probs);
    double sum = 0;
    for (int i = 0; i < V; i++) {
        int is_ok = i == 3 || i == 17 || i == 33 || i == 35;
        assert_true(is_ok ? probs[i] > 0 : probs[i] == 0);
        sum += probs[i];
    }
    assert_true(fabs(sum - 1.0) < 1e-6);
    for (uint64_t pos = 0; pos < 200; pos++) {
        in.position = pos;
        int32_t t = sample_one(s, &p, &in);
        assert_true(t == 3 || t == 17 || t == 33 || t == 35);
    }
    /* Processed logprobs: masked tokens are -inf, allowed renormalize. */
    p.logprobs = true;
    p.top_logprobs = 6;
    di_sample_result r;
    di_error err;
    assert_int_equal(di_sampler_sample(s, &p, &in, &r, &err), DI_OK);
    assert_int_equal(r.n_top, 4); /* only 4 tokens have finite logprobs */
    assert_int_equal(r.top[0].token, 35);
    assert_int_equal(r.top[3].token, 3);
    /* A mask that allows nothing is an error, not a crash. */
    allowed[0] = allowed[1] = 0;
    assert_int_equal(di_sampler_sample(s, &p, &in, &r, &err), DI_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "no token"));
    di_sampler_free(s);
}

/* Logprobs and top logprobs against a double log-softmax, on random
 * logits of a realistic vocabulary size, in both modes. */
static void logprobs_equal_double_log_softmax(void **state) {
    (void)state;
    enum { V = 5000 };
    float *logits = malloc(V * sizeof *logits);
    double *z = malloc(V * sizeof *z), *want = malloc(V * sizeof *want);
    assert_non_null(logits);
    for (int i = 0; i < V; i++)
        logits[i] = 8.0f * (di_rng_uniform(3, 9, (uint64_t)i, 0) - 0.5f);
    di_sampler *s = make_sampler(V);
    di_sample_input in = row(logits);
    const di_logit_bias bias[] = {{17, 6.0f}, {4000, -3.0f}};
    di_sampling_params p = di_sampling_params_default();
    p.logit_bias = bias;
    p.n_logit_bias = 2;
    p.logprobs = true;
    p.top_logprobs = DI_SAMPLER_MAX_TOP_LOGPROBS;
    p.top_k = 50; /* truncation must not change logprobs */
    p.temperature = 0.6f;
    for (int mode = 0; mode < 2; mode++) {
        p.logprobs_mode = mode ? DI_LOGPROBS_RAW : DI_LOGPROBS_PROCESSED;
        for (int i = 0; i < V; i++) z[i] = logits[i];
        if (!mode) {
            z[17] += 6.0;
            z[4000] -= 3.0;
        }
        log_softmax_ref(z, V, want);
        for (uint64_t pos = 0; pos < 20; pos++) {
            in.position = pos;
            di_sample_result r;
            di_error err;
            assert_int_equal(di_sampler_sample(s, &p, &in, &r, &err), DI_OK);
            assert_true(fabs(r.logprob - want[r.token]) < 1e-5);
            assert_int_equal(r.n_top, DI_SAMPLER_MAX_TOP_LOGPROBS);
            for (int k = 0; k < r.n_top; k++) {
                assert_true(fabs(r.top[k].logprob - want[r.top[k].token]) < 1e-5);
                if (k) assert_true(r.top[k].logprob <= r.top[k - 1].logprob);
            }
            /* No token outside top[] beats the last entry. */
            int better = 0;
            for (int i = 0; i < V; i++)
                if (want[i] > r.top[r.n_top - 1].logprob + 1e-6) better++;
            assert_int_equal(better, r.n_top - 1);
        }
        if (!mode) { /* bias lifted token 17 to the top in processed mode */
            di_sample_result r;
            di_error err;
            assert_int_equal(di_sampler_sample(s, &p, &in, &r, &err), DI_OK);
            assert_int_equal(r.top[0].token, 17);
        }
    }
    di_sampler_free(s);
    free(logits);
    free(z);
    free(want);
}

/* Pearson chi-square of observed counts against probabilities. */
static double chi_square(const int *count, const double *prob, int n, int total) {
    double chi2 = 0;
    for (int i = 0; i < n; i++) {
        if (prob[i] == 0) continue;
        double e = prob[i] * total;
        chi2 += (count[i] - e) * (count[i] - e) / e;
    }
    return chi2;
}

/* Frequencies over many positions match the distribution. The seed is
 * fixed, so this is deterministic: it cannot flake, it can only fail if
 * the draw is wrong. */
static void sampling_frequencies_match_softmax(void **state) {
    (void)state;
    enum { V = 6, N = 60000 };
    const float logits[V] = {1.0f, 0.2f, -0.5f, 2.0f, 0.0f, -3.0f};
    di_sampler *s = make_sampler(V);
    di_sample_input in = row(logits);
    di_sampling_params p = di_sampling_params_default();
    p.seed = 0x5eed;
    p.temperature = 0.8f;
    int count[V] = {0};
    for (int i = 0; i < N; i++) {
        in.position = (uint64_t)i;
        count[sample_one(s, &p, &in)]++;
    }
    double prob[V];
    softmax_ref(logits, V, 0.8, prob);
    /* 5 degrees of freedom: 0.999 quantile 20.52. */
    assert_true(chi_square(count, prob, V, N) < 20.52);

    /* With truncation (top_k 4 drops tokens 2 and 5), frequencies match
     * the renormalized distribution and the dropped tokens never appear. */
    p.top_k = 4;
    memset(count, 0, sizeof count);
    for (int i = 0; i < N; i++) {
        in.position = (uint64_t)i + N;
        count[sample_one(s, &p, &in)]++;
    }
    assert_int_equal(count[2], 0);
    assert_int_equal(count[5], 0);
    float probs[V];
    distribution(s, &p, &in, probs);
    for (int i = 0; i < V; i++) prob[i] = probs[i];
    assert_true(prob[2] == 0 && prob[5] == 0);
    /* 3 degrees of freedom: 0.999 quantile 16.27. */
    assert_true(chi_square(count, prob, V, N) < 16.27);
    di_sampler_free(s);
}

/* Same seed and position -> same token, whatever else the sampler did in
 * between, and whichever sampler instance does it. */
static void same_seed_and_position_give_same_token_in_any_order(void **state) {
    (void)state;
    enum { V = 100, N = 64 };
    float logits[V];
    for (int i = 0; i < V; i++) logits[i] = 0.05f * (float)((i * 37) % 100);
    di_sampler *a = make_sampler(V), *b = make_sampler(V);
    di_sample_input in = row(logits);
    di_sampling_params p = di_sampling_params_default(), other = p;
    p.seed = 1234;
    p.top_p = 0.9f;
    other.seed = 999;
    int32_t fwd[N], rev[N];
    for (int i = 0; i < N; i++) {
        in.position = (uint64_t)i;
        fwd[i] = sample_one(a, &p, &in);
    }
    for (int i = N - 1; i >= 0; i--) {
        in.position = (uint64_t)i * 7;
        (void)sample_one(b, &other, &in); /* another request in the batch */
        in.position = (uint64_t)i;
        rev[i] = sample_one(b, &p, &in);
    }
    assert_memory_equal(fwd, rev, sizeof fwd);
    /* A different seed gives a different sequence. */
    int differ = 0;
    for (int i = 0; i < N; i++) {
        in.position = (uint64_t)i;
        differ += sample_one(a, &other, &in) != fwd[i];
    }
    assert_true(differ > N / 4);
    di_sampler_free(a);
    di_sampler_free(b);
}

static void expect_invalid(di_sampler *s, const di_sampling_params *p, const di_sample_input *in,
                           const char *needle) {
    di_sample_result r;
    di_error err;
    di_status st = di_sampler_sample(s, p, in, &r, &err);
    assert_int_not_equal(st, DI_OK);
    if (!strstr(err.msg, needle)) fail_msg("error '%s' does not mention '%s'", err.msg, needle);
}

static void invalid_params_and_inputs_are_rejected_with_clear_errors(void **state) {
    (void)state;
    const float logits[] = {0.0f, 1.0f, 2.0f};
    di_sampler *s = make_sampler(3);
    di_sample_input in = row(logits);
    const di_sampling_params d = di_sampling_params_default();
    di_sampling_params p;
#define BAD(field, value, needle) \
    do { p = d; p.field = value; expect_invalid(s, &p, &in, needle); } while (0)
    BAD(temperature, -0.1f, "temperature");
    BAD(temperature, NAN, "temperature");
    BAD(temperature, INFINITY, "temperature");
    BAD(top_k, -2, "top_k");
    BAD(top_p, 0.0f, "top_p");
    BAD(top_p, 1.5f, "top_p");
    BAD(top_p, NAN, "top_p");
    BAD(min_p, -0.1f, "min_p");
    BAD(min_p, NAN, "min_p");
    BAD(repetition_penalty, 0.0f, "repetition_penalty");
    BAD(repetition_penalty, NAN, "repetition_penalty");
    BAD(presence_penalty, 2.5f, "presence_penalty");
    BAD(frequency_penalty, NAN, "frequency_penalty");
    BAD(top_logprobs, 21, "top_logprobs");
    BAD(top_logprobs, 2, "needs logprobs"); /* logprobs flag off */
    BAD(logprobs_mode, (di_logprobs_mode)7, "logprobs_mode");
#undef BAD
    di_logit_bias bad_tok = {3, 1.0f}, bad_bias = {1, NAN}, big_bias = {1, 101.0f};
    p = d;
    p.n_logit_bias = 1;
    p.logit_bias = &bad_tok;
    expect_invalid(s, &p, &in, "token 3 outside");
    p.logit_bias = &bad_bias;
    expect_invalid(s, &p, &in, "logit_bias");
    p.logit_bias = &big_bias;
    expect_invalid(s, &p, &in, "logit_bias");
    p.logit_bias = NULL;
    expect_invalid(s, &p, &in, "no array");

    /* Inputs. */
    p = d;
    const int32_t hist[] = {0, 5};
    in.tokens = hist;
    in.n_tokens = 2;
    expect_invalid(s, &p, &in, "history token 5");
    in.n_tokens = 1;
    in.n_prompt = 2;
    expect_invalid(s, &p, &in, "history sizes");
    in = row(logits);
    const float nan_logits[] = {0.0f, NAN, 1.0f};
    in.logits = nan_logits;
    expect_invalid(s, &p, &in, "logit of token 1");
    const float inf_logits[] = {0.0f, 1.0f, INFINITY};
    in.logits = inf_logits;
    expect_invalid(s, &p, &in, "logit of token 2");
    /* -inf logits are fine (a model may mask), unless all are -inf. */
    const float neg_inf[] = {-INFINITY, 1.0f, -INFINITY};
    in.logits = neg_inf;
    assert_int_equal(sample_one(s, &p, &in), 1);
    const float all_neg_inf[] = {-INFINITY, -INFINITY, -INFINITY};
    in.logits = all_neg_inf;
    expect_invalid(s, &p, &in, "no token");
    /* A penalty that overflows a logit is reported, not sampled from. */
    const float huge[] = {3e38f, 0.0f, 1.0f};
    const int32_t h0[] = {0};
    in = row(huge);
    in.tokens = h0;
    in.n_tokens = 1;
    p.repetition_penalty = 0.01f;
    expect_invalid(s, &p, &in, "overflowed");

    di_error err;
    di_sampler *none = NULL;
    assert_int_equal(di_sampler_create(0, &none, &err), DI_ERR_INVALID_ARG);
    assert_null(none);
    assert_int_equal(di_sampling_params_validate(&d, 0, &err), DI_ERR_INVALID_ARG);
    di_sampler_free(s);
}

/* In-test reference of steps 4-7 in double with a full sort, on random
 * rows and parameters; rows where a cut lies within 1e-6 of a boundary
 * are skipped (float vs double may disagree there, legitimately). */
static int ref_cmp_desc(const void *a, const void *b) {
    const double *x = a, *y = b; /* pairs (value, id) */
    if (x[0] != y[0]) return x[0] > y[0] ? -1 : 1;
    return x[1] < y[1] ? -1 : 1;
}

static int ref_distribution(const float *logits, int V, const di_sampling_params *p, double *out) {
    /* top-k ranks the same float logits as the sampler, so only exact ties
     * are ambiguous; the mass and ratio cuts compare float against double
     * sums, whose relative disagreement is far below this margin. */
    const double T = p->temperature, margin = 1e-6;
    double *pair = malloc(2 * (size_t)V * sizeof *pair);
    for (int i = 0; i < V; i++) {
        pair[2 * i] = logits[i] / T;
        pair[2 * i + 1] = i;
    }
    qsort(pair, (size_t)V, 2 * sizeof *pair, ref_cmp_desc);
    int n = V;
    if (p->top_k > 0 && p->top_k < V) {
        if (pair[2 * (p->top_k - 1)] == pair[2 * p->top_k]) n = -1;
        else n = p->top_k;
    }
    double mx = pair[0], total = 0;
    for (int i = 0; i < n; i++) total += exp(pair[2 * i] - mx);
    if (n > 0 && p->top_p < 1.0f) {
        double above = 0;
        int keep = 0;
        for (int i = 0; i < n; i++) {
            if (fabs(above / total - p->top_p) < margin) { keep = -1; break; }
            if (above / total >= p->top_p) break;
            above += exp(pair[2 * i] - mx);
            keep++;
        }
        n = keep;
    }
    if (n > 0 && p->min_p > 0.0f) {
        int keep = 0;
        for (int i = 0; i < n; i++) {
            double ratio = exp(pair[2 * i] - mx);
            if (fabs(ratio - p->min_p) < margin) { keep = -1; break; }
            if (ratio >= p->min_p) keep++;
        }
        n = keep;
    }
    if (n > 0) {
        double sum = 0;
        memset(out, 0, (size_t)V * sizeof *out);
        for (int i = 0; i < n; i++) sum += exp(pair[2 * i] - mx);
        for (int i = 0; i < n; i++) out[(int)pair[2 * i + 1]] = exp(pair[2 * i] - mx) / sum;
    }
    free(pair);
    return n > 0;
}

/* Shapes that are hard for a selection algorithm: all logits equal (ties
 * everywhere, broken by id) and logits already sorted either way. */
static void top_p_handles_ties_and_sorted_rows(void **state) {
    (void)state;
    enum { V = 1000 };
    float *logits = malloc(V * sizeof *logits), *probs = malloc(V * sizeof *probs);
    double *want = malloc(V * sizeof *want);
    di_sampler *s = make_sampler(V);
    di_sample_input in = row(logits);
    di_sampling_params p = di_sampling_params_default();
    /* Equal weights of exactly 1: the mass above token i is exactly i, so
     * top_p 0.5 keeps ids 0..499 and nothing else. */
    for (int i = 0; i < V; i++) logits[i] = 1.5f;
    p.top_p = 0.5f;
    distribution(s, &p, &in, probs);
    for (int i = 0; i < V; i++) assert_true(i < 500 ? probs[i] == 1.0f / 500 : probs[i] == 0);
    const float top_ps[] = {0.3f, 0.77f, 0.95f};
    for (int dir = 0; dir < 2; dir++) {
        for (int i = 0; i < V; i++) logits[i] = 0.004f * (float)(dir ? i : V - i);
        for (size_t k = 0; k < N_ELEMS(top_ps); k++) {
            p.top_p = top_ps[k];
            if (!ref_distribution(logits, V, &p, want)) continue;
            distribution(s, &p, &in, probs);
            for (int i = 0; i < V; i++) {
                assert_true((probs[i] > 0) == (want[i] > 0));
                assert_true(fabs(probs[i] - want[i]) < 1e-6);
            }
        }
    }
    di_sampler_free(s);
    free(logits);
    free(probs);
    free(want);
}

static void truncation_matches_full_sort_reference_on_random_rows(void **state) {
    (void)state;
    enum { V = 3000 };
    float *logits = malloc(V * sizeof *logits), *probs = malloc(V * sizeof *probs);
    double *want = malloc(V * sizeof *want);
    di_sampler *s = make_sampler(V);
    const float temps[] = {0.2f, 0.7f, 1.0f, 3.0f};
    const int32_t ks[] = {0, 1, 5, 100, 2999};
    const float top_ps[] = {1.0f, 0.1f, 0.5f, 0.9f, 0.999f};
    const float min_ps[] = {0.0f, 0.01f, 0.2f};
    int checked = 0, skipped = 0;
    for (int trial = 0; trial < 120; trial++) {
        /* Spread and shape vary: flat rows make the top-p window grow. */
        float spread = trial % 3 == 0 ? 0.5f : trial % 3 == 1 ? 4.0f : 15.0f;
        for (int i = 0; i < V; i++)
            logits[i] = spread * (di_rng_uniform(11, 0, (uint64_t)trial, (uint32_t)i) - 0.5f);
        di_sampling_params p = di_sampling_params_default();
        p.temperature = temps[trial % 4];
        p.top_k = ks[(trial / 4) % 5];
        p.top_p = top_ps[(trial / 20) % 5];
        p.min_p = min_ps[(trial / 2) % 3];
        if (!ref_distribution(logits, V, &p, want)) {
            skipped++;
            continue;
        }
        di_sample_input in = row(logits);
        distribution(s, &p, &in, probs);
        for (int i = 0; i < V; i++) {
            if ((probs[i] > 0) != (want[i] > 0) || fabs(probs[i] - want[i]) > 1e-5)
                fail_msg("trial %d token %d: got %g want %g (T %g k %d p %g min_p %g)", trial, i,
                         (double)probs[i], want[i], (double)p.temperature, (int)p.top_k,
                         (double)p.top_p, (double)p.min_p);
        }
        checked++;
    }
    if (checked <= 100) fail_msg("only %d rows checked, %d skipped", checked, skipped);
    di_sampler_free(s);
    free(logits);
    free(probs);
    free(want);
}

/* Goldens from scripts/gen_goldens_sampler.py (HF/OpenAI semantics in
 * float64 numpy). Format: see that script. */
static int read_floats(FILE *f, const char *tag, float *x, int n) {
    char word[32];
    if (fscanf(f, "%31s", word) != 1 || strcmp(word, tag)) return 0;
    for (int i = 0; i < n; i++)
        if (fscanf(f, "%f", &x[i]) != 1) return 0;
    return 1;
}

static void golden_distributions_and_logprobs_match(void **state) {
    (void)state;
    char path[1024];
    di_test_path(path, sizeof path, "tests/data/golden/sampler/cases.txt");
    FILE *f = fopen(path, "r");
    if (!f) fail_msg("cannot open %s (run scripts/gen_goldens_sampler.py)", path);
    char line[256];
    assert_non_null(fgets(line, sizeof line, f)); /* provenance comment */
    int n_cases = 0;
    assert_int_equal(fscanf(f, " cases %d", &n_cases), 1);
    assert_true(n_cases > 0);
    for (int c = 0; c < n_cases; c++) {
        char name[32];
        int V = 0, n_tok = 0, n_prompt = 0, n_bias = 0, has_mask = 0, top_k = 0;
        di_sampling_params p = di_sampling_params_default();
        assert_int_equal(fscanf(f, " case %31s vocab %d", name, &V), 2);
        assert_true(V > 0 && V <= 1 << 20);
        assert_int_equal(fscanf(f, " params %f %d %f %f %f %f %f", &p.temperature, &top_k,
                                &p.top_p, &p.min_p, &p.repetition_penalty, &p.presence_penalty,
                                &p.frequency_penalty),
                         7);
        p.top_k = top_k;
        float *logits = malloc((size_t)V * sizeof *logits);
        float *want = malloc((size_t)V * sizeof *want), *want_lp = malloc((size_t)V * sizeof *want_lp);
        float *probs = malloc((size_t)V * sizeof *probs);
        uint32_t *mask = calloc((size_t)V / 32 + 1, sizeof *mask);
        assert_true(read_floats(f, "logits", logits, V));
        assert_int_equal(fscanf(f, " history %d %d", &n_tok, &n_prompt), 2);
        int32_t *hist = malloc(((size_t)n_tok + 1) * sizeof *hist);
        for (int i = 0; i < n_tok; i++) assert_int_equal(fscanf(f, "%d", &hist[i]), 1);
        assert_int_equal(fscanf(f, " bias %d", &n_bias), 1);
        di_logit_bias *bias = malloc(((size_t)n_bias + 1) * sizeof *bias);
        for (int i = 0; i < n_bias; i++)
            assert_int_equal(fscanf(f, "%d %f", &bias[i].token, &bias[i].bias), 2);
        assert_int_equal(fscanf(f, " mask %d", &has_mask), 1);
        for (int i = 0; has_mask && i < V; i++) {
            int bit;
            assert_int_equal(fscanf(f, "%d", &bit), 1);
            if (bit) mask[i / 32] |= 1u << (i % 32);
        }
        assert_true(read_floats(f, "probs", want, V));
        assert_true(read_floats(f, "logprobs", want_lp, V));

        di_sampler *s = make_sampler(V);
        p.logit_bias = bias;
        p.n_logit_bias = (size_t)n_bias;
        di_sample_input in = row(logits);
        in.tokens = hist;
        in.n_tokens = n_tok;
        in.n_prompt = n_prompt;
        in.allowed = has_mask ? mask : NULL;
        distribution(s, &p, &in, probs);
        for (int i = 0; i < V; i++)
            if ((probs[i] > 0) != (want[i] > 0) || fabsf(probs[i] - want[i]) > 2e-5f)
                fail_msg("golden %s token %d: prob %g want %g", name, i, (double)probs[i],
                         (double)want[i]);
        /* Logprobs: the sampled token's and the top 20 against the file. */
        p.logprobs = true;
        p.top_logprobs = DI_SAMPLER_MAX_TOP_LOGPROBS;
        for (uint64_t pos = 0; pos < 3; pos++) {
            in.position = pos;
            di_sample_result r;
            di_error err;
            assert_int_equal(di_sampler_sample(s, &p, &in, &r, &err), DI_OK);
            assert_true(want[r.token] > 0); /* drawn from the support */
            assert_true(fabsf(r.logprob - want_lp[r.token]) < 2e-5f);
            for (int k = 0; k < r.n_top; k++)
                assert_true(fabsf(r.top[k].logprob - want_lp[r.top[k].token]) < 2e-5f);
        }
        di_sampler_free(s);
        free(logits);
        free(want);
        free(want_lp);
        free(probs);
        free(mask);
        free(hist);
        free(bias);
    }
    fclose(f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(greedy_picks_argmax_with_lowest_id_on_ties),
        cmocka_unit_test(greedy_matches_in_order_scan_on_wide_rows_with_ties),
        cmocka_unit_test(temperature_scales_the_distribution),
        cmocka_unit_test(top_k_keeps_exactly_the_k_best),
        cmocka_unit_test(top_p_keeps_the_smallest_prefix_reaching_p),
        cmocka_unit_test(top_p_is_measured_after_top_k),
        cmocka_unit_test(min_p_keeps_tokens_within_ratio_of_the_best),
        cmocka_unit_test(penalties_match_hand_computed_logits),
        cmocka_unit_test(penalties_leave_scratch_clean_between_calls),
        cmocka_unit_test(logit_bias_is_added_and_entries_accumulate),
        cmocka_unit_test(mask_removes_disallowed_tokens),
        cmocka_unit_test(logprobs_equal_double_log_softmax),
        cmocka_unit_test(sampling_frequencies_match_softmax),
        cmocka_unit_test(same_seed_and_position_give_same_token_in_any_order),
        cmocka_unit_test(invalid_params_and_inputs_are_rejected_with_clear_errors),
        cmocka_unit_test(top_p_handles_ties_and_sorted_rows),
        cmocka_unit_test(truncation_matches_full_sort_reference_on_random_rows),
        cmocka_unit_test(golden_distributions_and_logprobs_match),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
