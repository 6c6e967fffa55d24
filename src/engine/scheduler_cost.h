/* Online cost model of one engine step, for the scheduler's latency target
 * (di_scheduler_config.tpot_target_ms):
 *
 *   step_ms ~ fixed_ms + decode_ms * n_decode + prefill_ms * n_prefill
 *
 * fitted by exponentially weighted least squares over the steps the engine
 * measured (recent steps count most, so the model follows load changes),
 * with a weak ridge pull towards prior coefficients so it is solvable from
 * the first step and stays sane along directions the data never varied
 * (e.g. a server that only ever decodes 32 rows learns their total cost but
 * not how it splits into fixed and per-row). Coefficients are kept >= 0.
 *
 * Attention cost grows with context length; the model ignores that (it is
 * small next to the weight matmuls for short and medium contexts, and the
 * smoothing absorbs slow drift).
 *
 * Pure arithmetic on numbers it is given: never reads a clock, so tests can
 * drive it with made-up timings. */
#ifndef DI_ENGINE_SCHEDULER_COST_H
#define DI_ENGINE_SCHEDULER_COST_H

#include <stdint.h>

#define DI_STEP_COST_TERMS 3 /* fixed, per decode row, per prefill row */

typedef struct di_step_cost {
    double coef[DI_STEP_COST_TERMS];  /* current fit: fixed_ms, decode_ms, prefill_ms */
    double prior[DI_STEP_COST_TERMS]; /* what the ridge pulls towards */
    double xx[DI_STEP_COST_TERMS][DI_STEP_COST_TERMS]; /* decayed sum of x x^T */
    double xy[DI_STEP_COST_TERMS];                     /* decayed sum of x * ms */
    double prior_weight;              /* how hard the prior still pulls */
    int64_t n_observed;
} di_step_cost;

/* Starts from the prior coefficients (milliseconds: fixed, per decode row,
 * per prefill row; negative values are taken as 0). */
void di_step_cost_init(di_step_cost *c, double fixed_ms, double decode_ms, double prefill_ms);
/* Adds one measured step. Steps with no rows, or a time that is not a
 * finite number >= 0, are ignored. */
void di_step_cost_observe(di_step_cost *c, int32_t n_decode, int32_t n_prefill, double ms);
/* Predicted milliseconds of a step with these rows (>= 0). */
double di_step_cost_predict(const di_step_cost *c, int32_t n_decode, int32_t n_prefill);

#endif
