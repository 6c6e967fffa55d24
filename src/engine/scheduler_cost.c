/* Step cost model; the contract is in scheduler_cost.h.
 *
 * Weighted least squares with forgetting: after n steps the fit minimizes
 *   sum_i DECAY^(n-i) (ms_i - coef . x_i)^2
 *     + (PRIOR_DECAY^n PRIOR_STEPS + RIDGE) sum_j w_j (coef_j - prior_j)^2
 * with x = (1, n_decode, n_prefill) and w_j = TYPICAL_X[j]^2. The prior
 * starts as strong as PRIOR_STEPS typical steps, so the first few steps
 * cannot swing the model (one prefill-only step would otherwise "prove"
 * decoding free), and fades faster than data so that after a few dozen
 * steps the fit is the data's; the small permanent RIDGE keeps the
 * equations solvable along directions the data never varied. The decayed sums of x x^T and
 * x ms are all the state needed, and the 3x3 normal equations are solved
 * after every observation (a few dozen flops, once per step). */
#include "engine/scheduler_cost.h"

#include <math.h>
#include <string.h>

/* Weight of a step's measurement after each newer one: ~33 steps of memory,
 * enough to average out scheduling noise, short enough to follow a change
 * of load within a few seconds of serving. */
#define DECAY 0.97
/* The prior's starting weight, in typical steps, and its fading per step
 * (~1% left after 20 steps). */
#define PRIOR_STEPS 2.0
#define PRIOR_DECAY 0.8
/* Permanent ridge, as a fraction of one typical step's weight: negligible
 * next to ~33 steps of data (it biases the fit by ~0.1%). */
#define RIDGE 0.001
/* Typical size of each regressor (1, decode rows, prefill rows), so the
 * ridge pulls each coefficient about equally hard. */
static const double TYPICAL_X[DI_STEP_COST_TERMS] = {1.0, 16.0, 64.0};

void di_step_cost_init(di_step_cost *c, double fixed_ms, double decode_ms, double prefill_ms) {
    memset(c, 0, sizeof *c);
    double p[DI_STEP_COST_TERMS] = {fixed_ms, decode_ms, prefill_ms};
    for (int j = 0; j < DI_STEP_COST_TERMS; j++) {
        double v = isfinite(p[j]) && p[j] > 0 ? p[j] : 0.0;
        c->prior[j] = v;
        c->coef[j] = v;
    }
    c->prior_weight = PRIOR_STEPS;
}

/* Solves a (n x n) x = b in place by Gaussian elimination with partial
 * pivoting; false when singular. n <= DI_STEP_COST_TERMS. */
static int solve(double a[DI_STEP_COST_TERMS][DI_STEP_COST_TERMS], double b[DI_STEP_COST_TERMS],
                 int n, double x[DI_STEP_COST_TERMS]) {
    for (int k = 0; k < n; k++) {
        int piv = k;
        for (int i = k + 1; i < n; i++)
            if (fabs(a[i][k]) > fabs(a[piv][k])) piv = i;
        if (fabs(a[piv][k]) < 1e-12) return 0;
        if (piv != k) {
            for (int j = 0; j < n; j++) {
                double t = a[k][j];
                a[k][j] = a[piv][j];
                a[piv][j] = t;
            }
            double t = b[k];
            b[k] = b[piv];
            b[piv] = t;
        }
        for (int i = k + 1; i < n; i++) {
            double f = a[i][k] / a[k][k];
            for (int j = k; j < n; j++) a[i][j] -= f * a[k][j];
            b[i] -= f * b[k];
        }
    }
    for (int k = n - 1; k >= 0; k--) {
        double s = b[k];
        for (int j = k + 1; j < n; j++) s -= a[k][j] * x[j];
        x[k] = s / a[k][k];
    }
    return 1;
}

/* Refits coef: the ridge-regularized normal equations, with coefficients
 * that come out negative pinned at 0 and the rest refitted (at most one
 * refit per term, so this ends). */
static void refit(di_step_cost *c) {
    int zero[DI_STEP_COST_TERMS] = {0};
    for (int round = 0; round <= DI_STEP_COST_TERMS; round++) {
        double a[DI_STEP_COST_TERMS][DI_STEP_COST_TERMS], b[DI_STEP_COST_TERMS], x[DI_STEP_COST_TERMS];
        for (int i = 0; i < DI_STEP_COST_TERMS; i++) {
            double r = (c->prior_weight + RIDGE) * TYPICAL_X[i] * TYPICAL_X[i];
            for (int j = 0; j < DI_STEP_COST_TERMS; j++)
                a[i][j] = zero[i] ? (double)(i == j) : c->xx[i][j] + (i == j ? r : 0.0);
            b[i] = zero[i] ? 0.0 : c->xy[i] + r * c->prior[i];
        }
        /* A pinned term is a constant 0: drop its column from the others. */
        for (int i = 0; i < DI_STEP_COST_TERMS; i++)
            for (int j = 0; j < DI_STEP_COST_TERMS; j++)
                if (zero[j] && i != j) a[i][j] = 0.0;
        if (!solve(a, b, DI_STEP_COST_TERMS, x)) return; /* keep the last fit */
        int worst = -1;
        for (int j = 0; j < DI_STEP_COST_TERMS; j++)
            if (!zero[j] && x[j] < 0 && (worst < 0 || x[j] < x[worst])) worst = j;
        if (worst < 0) {
            memcpy(c->coef, x, sizeof c->coef);
            return;
        }
        zero[worst] = 1;
    }
}

void di_step_cost_observe(di_step_cost *c, int32_t n_decode, int32_t n_prefill, double ms) {
    if (n_decode < 0 || n_prefill < 0 || n_decode + (int64_t)n_prefill == 0 || !isfinite(ms) || ms < 0)
        return;
    double x[DI_STEP_COST_TERMS] = {1.0, (double)n_decode, (double)n_prefill};
    for (int i = 0; i < DI_STEP_COST_TERMS; i++) {
        for (int j = 0; j < DI_STEP_COST_TERMS; j++) c->xx[i][j] = DECAY * c->xx[i][j] + x[i] * x[j];
        c->xy[i] = DECAY * c->xy[i] + x[i] * ms;
    }
    c->prior_weight *= PRIOR_DECAY;
    c->n_observed++;
    refit(c);
}

double di_step_cost_predict(const di_step_cost *c, int32_t n_decode, int32_t n_prefill) {
    double ms = c->coef[0] + c->coef[1] * n_decode + c->coef[2] * n_prefill;
    return ms > 0 ? ms : 0.0;
}
