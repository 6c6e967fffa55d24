/* The confidence-scheduled verify length through the engine (issue 16 part
 * 3): DeepInfer's MTPVarlen (sample/dspark.h: di_dspark_sched_*) fed the way
 * its scheduler feeds it.
 *
 *   start-up   the cost curve of this machine: steps of 1, 2, 4, 8, 16,
 *              24, ... rows (DeepInfer's graph sizes, interval 8) up to
 *              max_rows, each 1 warm-up + 5 timed forwards, min and max
 *              dropped, the rest averaged (profile_decode_perf); cached on
 *              disk under the user cache dir, keyed by model, threads,
 *              kernels and sizes, for an hour (decode_perf_cache.py's TTL)
 *   each step  plan: per sequence the cumulative products of its drafts'
 *              confidences (this round's drafts: the split) and of the
 *              previous round's (the budget), as process_MTPInfo keeps
 *              accept_rates / prev_accept_rates; the number of drafts each
 *              sequence verifies
 *   after      observe: decode steps feed the online slope and the sampler
 *              median (update_runtime)
 *
 * Per-slot history is keyed by seq_id: a slot's new owner starts without
 * rates (DeepInfer pads with 1.0 when the sequence has drafts).
 *
 * Ownership: create/free; the measurement borrows the engine's model
 * objects for the call. */
#ifndef DI_SPEC_VERIFY_LEN_H
#define DI_SPEC_VERIFY_LEN_H

#include "sample/dspark.h"
#include "spec/spec.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct di_spec_vlen di_spec_vlen;

/* n_slots: the engine's batch sequence slots; k: the most drafts a
 * sequence ever gets. */
di_status di_spec_vlen_create(int32_t n_slots, int32_t k, di_spec_vlen **out, di_error *err);
void di_spec_vlen_free(di_spec_vlen *v);

/* Sets the curve directly (tests; copied). */
di_status di_spec_vlen_set_curve(di_spec_vlen *v, const di_dspark_cost_point *pts, int32_t n, di_error *err);

/* The start-up curve: loaded from cache_dir/<key> when fresh, else measured
 * with forwards of ctx on kv (which must hold no sequence yet: the
 * measurement writes blocks 0.. of slot 0 and forgets them) and saved
 * there. cache_dir NULL: the user cache dir ($XDG_CACHE_HOME or
 * ~/.cache)/deepinfer/dspark; "off": measure, keep nothing. *measured_ms:
 * the time measuring took (0 on a cache hit). */
typedef struct di_spec_vlen_probe {
    struct di_model_ctx *ctx;
    struct di_model_kv *kv;
    int32_t kv_blocks, block_size, n_vocab;
    int32_t max_rows;                 /* the largest step measured */
    di_threadpool *pool;
    const char *cache_dir;
    const char *key;                  /* model path, threads, kernels, ... */
} di_spec_vlen_probe;
di_status di_spec_vlen_startup(di_spec_vlen *v, const di_spec_vlen_probe *p, double *measured_ms, di_error *err);

/* The curve in use (n_out points, at most cap). */
int32_t di_spec_vlen_curve(const di_spec_vlen *v, di_dspark_cost_point *pts, int32_t cap);

/* Drafts each of seqs[0..n) verifies this step: n_verify[i] in
 * 0..drafts[i].n, from drafts[i].confidence and the slot's history (which
 * this call advances by one round). */
di_status di_spec_vlen_plan(di_spec_vlen *v, const di_spec_seq *seqs, const di_spec_drafts *drafts, int32_t n,
                            int32_t *n_verify, di_error *err);

/* One measured decode step: n_seqs sequences, rows rows, the forward's ms
 * and the rest of the step's (drafting + sampling) ms. */
void di_spec_vlen_observe(di_spec_vlen *v, int32_t n_seqs, int32_t rows, double forward_ms, double sampler_ms);

#endif
