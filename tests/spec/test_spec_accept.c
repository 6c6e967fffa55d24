/* The acceptance rules and the n-gram drafter as pure functions: the
 * lossless rule's output distribution is the target's (chi-square over
 * seeded draws), DeepInfer's residual rule stays within its stated bound,
 * hand-worked accept/reject cases, the match prefix, prompt lookup, and
 * bad arguments. */
#include "test_util.h"

#include "sample/rng.h"
#include "spec/spec.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define V 6
#ifdef DI_SANITIZE_BUILD
#define N_DRAWS 20000
#else
#define N_DRAWS 200000
#endif
/* chi-square with V-1 = 5 degrees of freedom: P(X > 20.52) = 0.001 */
#define CHI2_CRIT_5DF_0001 20.52

/* Inverse CDF of q at u. */
static int32_t draw(const float *q, int32_t n, float u) {
    double c = 0;
    for (int32_t v = 0; v < n; v++) {
        c += q[v];
        if (u < c) return v;
    }
    return n - 1;
}

/* Histogram of the rule's output over N_DRAWS drafts d ~ q. */
static void histogram(di_spec_accept rule, const float *p, const float *q, double *hist, double *accept_rate) {
    float residual[V];
    int64_t n_acc = 0;
    memset(hist, 0, sizeof(double) * V);
    for (uint32_t i = 0; i < N_DRAWS; i++) {
        float u0 = di_rng_uniform(7, 10, i, 0), u1 = di_rng_uniform(7, 11, i, 0), u2 = di_rng_uniform(7, 12, i, 0);
        int32_t d = draw(q, V, u0), tok = -1;
        bool acc = false;
        di_error err;
        assert_int_equal(di_spec_accept_row(rule, p, q, V, d, u1, u2, residual, &acc, &tok, &err), DI_OK);
        assert_true(tok >= 0 && tok < V);
        if (acc) assert_int_equal(tok, d);
        n_acc += acc;
        hist[tok] += 1;
    }
    *accept_rate = (double)n_acc / N_DRAWS;
}

static double chi2(const double *hist, const float *p) {
    double x = 0;
    for (int v = 0; v < V; v++) {
        double e = (double)p[v] * N_DRAWS;
        x += (hist[v] - e) * (hist[v] - e) / e;
    }
    return x;
}

static const float P[V] = {0.30f, 0.05f, 0.25f, 0.10f, 0.20f, 0.10f};
static const float Q[V] = {0.10f, 0.40f, 0.05f, 0.25f, 0.15f, 0.05f};

static void lossless_output_is_distributed_as_the_target(void **state) {
    (void)state;
    double hist[V], rate;
    histogram(DI_SPEC_ACCEPT_LOSSLESS, P, Q, hist, &rate);
    double x = chi2(hist, P);
    print_message("lossless: chi2 %.2f (5 df, 0.001 critical %.2f), acceptance %.4f\n", x, CHI2_CRIT_5DF_0001, rate);
    assert_true(x < CHI2_CRIT_5DF_0001);
    /* the acceptance rate is sum_v min(p, q) */
    double expect = 0;
    for (int v = 0; v < V; v++) expect += fmin(P[v], Q[v]);
    assert_true(fabs(rate - expect) < 5.0 * sqrt(expect * (1 - expect) / N_DRAWS));
    /* and the chi-square would see a wrong answer: q itself fails */
    assert_true(chi2(hist, Q) > 100.0);
}

/* DeepInfer's residual max(p - alpha q, 0), alpha = exp(-5e-5): its
 * output is p within (1 + eps) (tilelang_ops/common.py), so at this
 * sample size it is indistinguishable from p too. */
static void deepinfer_rule_stays_within_its_bound(void **state) {
    (void)state;
    double hist[V], rate;
    histogram(DI_SPEC_ACCEPT_DEEPINFER, P, Q, hist, &rate);
    double x = chi2(hist, P);
    print_message("deepinfer: chi2 %.2f, acceptance %.4f\n", x, rate);
    assert_true(x < CHI2_CRIT_5DF_0001);
}

static void accept_row_worked_cases(void **state) {
    (void)state;
    const float p[3] = {0.5f, 0.3f, 0.2f}, q[3] = {0.2f, 0.5f, 0.3f};
    float r[3];
    bool acc;
    int32_t tok;
    di_error err;
    /* draft 1: accepted iff u < p/q = 0.6 */
    assert_int_equal(di_spec_accept_row(DI_SPEC_ACCEPT_LOSSLESS, p, q, 3, 1, 0.59f, 0.5f, r, &acc, &tok, &err), 0);
    assert_true(acc);
    assert_int_equal(tok, 1);
    assert_int_equal(di_spec_accept_row(DI_SPEC_ACCEPT_LOSSLESS, p, q, 3, 1, 0.61f, 0.99f, r, &acc, &tok, &err), 0);
    assert_false(acc);
    assert_int_equal(tok, 0); /* residual max(p - q, 0) = (0.3, 0, 0) */
    /* DeepInfer: residual (0.5 - 0.2a, 0, 0) as well here */
    assert_int_equal(di_spec_accept_row(DI_SPEC_ACCEPT_DEEPINFER, p, q, 3, 1, 0.61f, 0.99f, r, &acc, &tok, &err), 0);
    assert_false(acc);
    assert_int_equal(tok, 0);
    /* draft 0: p >= q, always accepted */
    assert_int_equal(di_spec_accept_row(DI_SPEC_ACCEPT_LOSSLESS, p, q, 3, 0, 0.999f, 0.0f, r, &acc, &tok, &err), 0);
    assert_true(acc);
    /* one-hot q (deterministic drafter): accept with p(d); the residual is
     * p without d; a greedy target (one-hot p) keeps its argmax */
    const float g[3] = {0.0f, 0.0f, 1.0f};
    assert_int_equal(di_spec_accept_row(DI_SPEC_ACCEPT_DEEPINFER, g, NULL, 3, 1, 0.0f, 0.7f, r, &acc, &tok, &err), 0);
    assert_false(acc);
    assert_int_equal(tok, 2);
    assert_int_equal(di_spec_accept_row(DI_SPEC_ACCEPT_LOSSLESS, g, NULL, 3, 2, 0.999f, 0.7f, r, &acc, &tok, &err), 0);
    assert_true(acc);
    /* bad arguments */
    assert_int_equal(di_spec_accept_row(DI_SPEC_ACCEPT_LOSSLESS, p, q, 3, 3, 0, 0, r, &acc, &tok, &err), DI_ERR_RANGE);
    assert_int_equal(di_spec_accept_row(DI_SPEC_ACCEPT_LOSSLESS, p, q, 3, -1, 0, 0, r, &acc, &tok, &err), DI_ERR_RANGE);
    assert_int_equal(di_spec_accept_row(DI_SPEC_ACCEPT_GREEDY, p, q, 3, 0, 0, 0, r, &acc, &tok, &err),
                     DI_ERR_INVALID_ARG);
    di_spec_accept a;
    assert_int_equal(di_spec_accept_from_name("bogus", &a, &err), DI_ERR_INVALID_ARG);
    assert_int_equal(di_spec_accept_from_name("lossless", &a, &err), DI_OK);
    assert_int_equal(a, DI_SPEC_ACCEPT_LOSSLESS);
    assert_string_equal(di_spec_accept_name(DI_SPEC_ACCEPT_DEEPINFER), "deepinfer");
}

static void match_prefix_stops_at_the_first_difference(void **state) {
    (void)state;
    const int32_t d[4] = {5, 6, 7, 8};
    const int32_t all[5] = {5, 6, 7, 8, 9}, two[5] = {5, 6, 1, 8, 9}, none[5] = {4, 6, 7, 8, 9};
    assert_int_equal(di_spec_match_prefix(d, 4, all), 4);
    assert_int_equal(di_spec_match_prefix(d, 4, two), 2);
    assert_int_equal(di_spec_match_prefix(d, 4, none), 0);
    assert_int_equal(di_spec_match_prefix(d, 0, all), 0);
}

static void ngram_proposes_the_continuation_of_the_latest_match(void **state) {
    (void)state;
    di_drafter *g = NULL;
    di_spec_env env = {.n_vocab = 100};
    di_error err;
    assert_int_equal(di_spec_drafter_create("ngram", &env, &g, &err), DI_OK);
    /* ... 1 2 3 [9 9] ... 1 2 3 [4 5] ... 1 2 3  -> the latest copy: 4 5 */
    const int32_t t[] = {1, 2, 3, 9, 9, 0, 1, 2, 3, 4, 5, 7, 1, 2, 3};
    int32_t toks[DI_SPEC_MAX_K];
    float conf[DI_SPEC_MAX_K];
    di_spec_seq s = {.seq_id = 1, .slot = 0, .tokens = t, .n_tokens = 15, .n_prompt = 15, .k_max = 3};
    di_spec_drafts d = {.tokens = toks, .confidence = conf};
    assert_int_equal(g->ops->propose(g, &s, 1, &d, NULL, &err), DI_OK);
    assert_int_equal(d.n, 3);
    assert_false(d.has_q);
    assert_int_equal(toks[0], 4);
    assert_int_equal(toks[1], 5);
    assert_int_equal(toks[2], 7);
    /* no earlier occurrence of anything: no drafts */
    const int32_t u[] = {1, 2, 3, 4};
    s.tokens = u;
    s.n_tokens = 4;
    assert_int_equal(g->ops->propose(g, &s, 1, &d, NULL, &err), DI_OK);
    assert_int_equal(d.n, 0);
    /* a match at the very end has nothing after it within reach */
    const int32_t w[] = {8, 8};
    s.tokens = w;
    s.n_tokens = 2;
    assert_int_equal(g->ops->propose(g, &s, 1, &d, NULL, &err), DI_OK);
    assert_int_equal(d.n, 1);
    assert_int_equal(toks[0], 8);
    di_drafter_free(g);
    /* unknown names */
    assert_int_equal(di_spec_drafter_create("bogus", &env, &g, &err), DI_ERR_INVALID_ARG);
    assert_null(g);
    assert_int_equal(di_spec_drafter_create("draft:", &env, &g, &err), DI_ERR_INVALID_ARG);
}

/* DeepInfer's own fused_sample_ref on 96 verify rows (goldens from
 * scripts/gen_goldens_spec.py): given its uniforms, the same accept
 * decisions, the same residual samples and the same accept_probs. */
static void deepinfer_rule_matches_deepinfer_reference(void **state) {
    (void)state;
    char path[4096];
    di_test_path(path, sizeof path, "tests/data/golden/spec/deepinfer_accept.txt");
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[256];
    assert_non_null(fgets(line, sizeof line, f)); /* comment */
    int rows = 0, v = 0;
    assert_int_equal(fscanf(f, "%d %d", &rows, &v), 2);
    assert_true(rows > 0 && v > 0 && v <= 64);
    int n_acc = 0, n_mismatch = 0;
    double max_err = 0;
    for (int r = 0; r < rows; r++) {
        int draft, acc_ref, tok_ref;
        double u_acc, u_res, acc_p;
        float p[64], q[64], residual[64];
        assert_int_equal(fscanf(f, "%d %lf %lf %d %d %lf", &draft, &u_acc, &u_res, &acc_ref, &tok_ref, &acc_p), 6);
        for (int i = 0; i < v; i++) assert_int_equal(fscanf(f, "%f", &p[i]), 1);
        for (int i = 0; i < v; i++) assert_int_equal(fscanf(f, "%f", &q[i]), 1);
        bool acc;
        int32_t tok;
        di_error err;
        assert_int_equal(di_spec_accept_row(DI_SPEC_ACCEPT_DEEPINFER, p, q, v, draft, (float)u_acc, (float)u_res,
                                            residual, &acc, &tok, &err), DI_OK);
        double mass = di_spec_residual(DI_SPEC_ACCEPT_DEEPINFER, p, q, v, draft, residual);
        double a = 1.0 - mass > 0 ? 1.0 - mass : 0.0;
        if (fabs(a - acc_p) > max_err) max_err = fabs(a - acc_p);
        n_mismatch += acc != (acc_ref != 0) || tok != tok_ref;
        n_acc += acc;
    }
    fclose(f);
    print_message("deepinfer golden: %d rows, %d accepted, %d mismatches, accept_probs max error %.2e\n", rows,
                  n_acc, n_mismatch, max_err);
    assert_int_equal(n_mismatch, 0);
    assert_true(max_err < 1e-5);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(lossless_output_is_distributed_as_the_target),
        cmocka_unit_test(deepinfer_rule_stays_within_its_bound),
        cmocka_unit_test(deepinfer_rule_matches_deepinfer_reference),
        cmocka_unit_test(accept_row_worked_cases),
        cmocka_unit_test(match_prefix_stops_at_the_first_difference),
        cmocka_unit_test(ngram_proposes_the_continuation_of_the_latest_match),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
