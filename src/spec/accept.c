/* Acceptance rules of speculative decoding (contract in spec.h).
 *
 * LOSSLESS is Leviathan et al. / Chen et al.'s speculative sampling: a
 * draft d drawn from q is kept with probability min(1, p(d)/q(d)); on
 * reject the token comes from norm(max(0, p - q)). The kept-or-resampled
 * token is then distributed exactly as p.
 *
 * DEEPINFER is DeepInfer 0.1.0's variant (tilelang_ops/fused_sample.py,
 * fused_sample_ref): the same test, but the residual is max(0, p - alpha q)
 * with alpha = exp(-5e-5), "so that reject sampling can always sample
 * something"; when the residual has no mass it falls back to the argmax of
 * p. Its bound (common.py) is q_j - eps/(1+eps) <= A_j <= (1+eps) q_j. */
#include "spec/spec.h"

#include <math.h>
#include <string.h>

di_status di_spec_accept_from_name(const char *name, di_spec_accept *out, di_error *err) {
    if (!name || !strcmp(name, "greedy")) *out = DI_SPEC_ACCEPT_GREEDY;
    else if (!strcmp(name, "lossless")) *out = DI_SPEC_ACCEPT_LOSSLESS;
    else if (!strcmp(name, "deepinfer")) *out = DI_SPEC_ACCEPT_DEEPINFER;
    else
        return di_error_set(err, DI_ERR_INVALID_ARG,
                            "speculative acceptance rule '%s': expected greedy, lossless or deepinfer", name);
    return DI_OK;
}

const char *di_spec_accept_name(di_spec_accept a) {
    switch (a) {
    case DI_SPEC_ACCEPT_GREEDY: return "greedy";
    case DI_SPEC_ACCEPT_LOSSLESS: return "lossless";
    case DI_SPEC_ACCEPT_DEEPINFER: return "deepinfer";
    }
    return "?";
}

int32_t di_spec_match_prefix(const int32_t *drafts, int32_t n_drafts, const int32_t *rows) {
    int32_t a = 0;
    while (a < n_drafts && rows[a] == drafts[a]) a++;
    return a;
}

/* Lowest id of the largest p (ties to the lowest id, like the sampler). */
static int32_t argmax(const float *p, int32_t n) {
    int32_t best = 0;
    for (int32_t v = 1; v < n; v++)
        if (p[v] > p[best]) best = v;
    return best;
}

double di_spec_residual(di_spec_accept rule, const float *p, const float *q, int32_t n_vocab, int32_t draft,
                        float *residual) {
    double alpha = rule == DI_SPEC_ACCEPT_DEEPINFER ? exp(-DI_SPEC_DEEPINFER_PENALTY) : 1.0;
    double mass = 0;
    for (int32_t v = 0; v < n_vocab; v++) {
        double qv = q ? (double)q[v] : (v == draft ? 1.0 : 0.0);
        double r = (double)p[v] - alpha * qv;
        residual[v] = r > 0 ? (float)r : 0.0f;
        mass += residual[v];
    }
    return mass;
}

di_status di_spec_accept_row(di_spec_accept rule, const float *p, const float *q, int32_t n_vocab,
                             int32_t draft, float u_accept, float u_resample, float *residual,
                             bool *accepted, int32_t *token, di_error *err) {
    *accepted = false;
    *token = -1;
    if (rule != DI_SPEC_ACCEPT_LOSSLESS && rule != DI_SPEC_ACCEPT_DEEPINFER)
        return di_error_set(err, DI_ERR_INVALID_ARG, "spec: accept_row takes the lossless or deepinfer rule");
    if (n_vocab < 1 || draft < 0 || draft >= n_vocab)
        return di_error_set(err, DI_ERR_RANGE, "spec: draft token %d outside the vocabulary of %d", draft, n_vocab);
    double qd = q ? (double)q[draft] : 1.0;
    double pd = (double)p[draft];
    /* min(1, p/q) as u < p/q without dividing: a draft q gave no mass to
     * (qd == 0) is accepted only if p likes it, never by a 0/0. */
    if (qd > 0 && (double)u_accept * qd < pd) {
        *accepted = true;
        *token = draft;
        return DI_OK;
    }
    double mass = di_spec_residual(rule, p, q, n_vocab, draft, residual);
    if (!(mass > 0)) {
        *token = argmax(p, n_vocab);
        return DI_OK;
    }
    /* inverse CDF over the unnormalized residual, in id order */
    double target = (double)u_resample * mass, cum = 0;
    int32_t last = -1;
    for (int32_t v = 0; v < n_vocab; v++) {
        if (residual[v] <= 0) continue;
        last = v;
        cum += residual[v];
        if (target < cum) {
            *token = v;
            return DI_OK;
        }
    }
    *token = last; /* rounding left target at the very top */
    return DI_OK;
}
