/* DSpark verification pieces, exactly as DeepSeek's DeepInfer 0.1.0 decides
 * them, in pure C with no engine dependence (the verifier in the engine's
 * batched step calls them; the DSpark drafter itself lives in
 * model/deepseek_v41_dspark.h).
 *
 *   RNG          counter-based: a uniform from (seed, position, case), the
 *                SplitMix64 of random_sampling.py:random_sampling_ref
 *   transform    logits -> target logprobs: temperature, stable top-p, stable
 *                top-k, log-softmax (fused_sample.py:apply_top_p_top_k_ref)
 *   verify       one packed row: accept draft d iff U < min(1, p(d)/q(d)),
 *                else sample the residual max(p - alpha q, 0), alpha =
 *                exp(-penalty) (fused_sample.py:fused_sample_ref); the
 *                accepted prefix of a sequence (sampler.py:get_accept_result_ref)
 *   schedule     the confidence-scheduled verify length
 *                (csrc/engine/mtp_varlen.hpp:MTPVarlen), the ZOS allocation
 *                (schedule_mtp_varlen.py:compute_seqlens_q_by_confidence_rates_ref)
 *                and the on-disk cache of the start-up cost curve
 *
 * Oracle: scripts/gen_goldens_dspark.py calls those DeepInfer functions (and
 * compiles mtp_varlen.hpp itself) on fixed-seed inputs; tests/spec/
 * test_dspark.c compares. Integer / RNG results are bit-exact; float results
 * agree within float32 rounding.
 *
 * Ownership: every function works on caller buffers; di_dspark_sched is the
 * only object (create/free). */
#ifndef DI_SAMPLE_DSPARK_H
#define DI_SAMPLE_DSPARK_H

#include "base/status.h"

#include <stdint.h>

/* tilelang_ops/common.py: bounds DeepInfer's rule's bias by ~5e-5 and keeps
 * the residual non-empty. */
#define DI_DSPARK_DRAFT_PROB_PENALTY 5e-5
/* tilelang_ops/common.py: row j of a sequence's packed decode rows samples at
 * position base + j * this (keeps the rows' RNG streams apart). */
#define DI_DSPARK_DRAFT_POS_HASH_MUL 10000019
/* fused_sample.py: draft sampling (tag "mtp") uses seed + this. */
#define DI_DSPARK_MTP_SEED_OFFSET 1000000007ull
/* sampling_params.py: temperatures below this are greedy, run as T = this. */
#define DI_DSPARK_MIN_TEMPERATURE 1e-5f

/* The three RNG streams of one sample position. */
typedef enum di_dspark_case {
    DI_DSPARK_CASE_FRESH = 0,    /* a plain (or the final fresh row's) sample */
    DI_DSPARK_CASE_RESIDUAL = 1, /* the resample after a rejected draft */
    DI_DSPARK_CASE_VERIFY = 2,   /* the accept-test uniform */
} di_dspark_case;

/* Acceptance rules. DEEPINFER: the residual keeps alpha = exp(-5e-5) of the
 * draft (near-lossless: q - eps/(1+eps) <= A <= (1+eps) q, eps ~ 5e-5).
 * LOSSLESS: the plain residual max(p - q, 0), exactly the target. */
typedef enum di_dspark_rule {
    DI_DSPARK_RULE_DEEPINFER = 0,
    DI_DSPARK_RULE_LOSSLESS = 1,
} di_dspark_rule;

/* ---- RNG -------------------------------------------------------------- */

/* SplitMix64 finalizer of z, as a uniform double in [0, 1) (53 bits). */
double di_dspark_hash_uniform(uint64_t z);
/* The sampling uniform of (seed, pos, c): random_sampling_ref's key
 * seed + (s ^ (s << 13)), s = (pos*3 + c) * 0x9E3779B97F4A7C15. */
double di_dspark_uniform(uint64_t seed, int64_t pos, di_dspark_case c);
/* The accept-test uniform: key seed ^ ((pos*3 + 2) * 0x9E3779B97F4A7C15),
 * rounded to float as fused_sample_ref compares it. */
float di_dspark_verify_uniform(uint64_t seed, int64_t pos);
/* Inverse CDF of the unnormalized weights w (n >= 1, non-negative) at u:
 * the first index whose float64 running sum exceeds u * total. All-zero
 * weights: -1. */
int32_t di_dspark_sample_weights(const float *w, int32_t n, double u);

/* Position of packed row `local_step` of a sequence whose first row samples
 * at `base` (expand_sampling_params_ref: int32 arithmetic, wrapping). */
int32_t di_dspark_row_position(int32_t base, int32_t local_step);
/* Position of draft step i (0-based) after a verify that kept
 * last_valid_offset drafts (dflash.py:sample_drafts). */
int32_t di_dspark_draft_position(int32_t base, int32_t last_valid_offset, int32_t step);

/* ---- logits -> logprobs ------------------------------------------------ */

/* logprobs (n) = log_softmax(filter(logits / T)), where filter keeps the
 * smallest stable prefix (by probability, ties by index) whose mass reaches
 * top_p, then the top_k survivors (by logit, ties by index; top_k < 0 or
 * >= n: all). Dropped tokens get -inf. temperature <
 * DI_DSPARK_MIN_TEMPERATURE runs as that minimum (greedy). scratch: n
 * floats + n int32 (see di_dspark_scratch_bytes). Returns DI_ERR_INVALID_ARG
 * on a bad n / top_p / temperature / non-finite logits everywhere. */
size_t di_dspark_scratch_bytes(int32_t n);
di_status di_dspark_logprobs(const float *logits, int32_t n, float temperature, float top_p, int32_t top_k,
                             void *scratch, float *logprobs, di_error *err);

/* ---- verification ------------------------------------------------------ */

typedef struct di_dspark_verdict {
    int32_t token;       /* the draft when accepted, else the residual sample */
    int32_t accepted;    /* 1 when the draft was accepted */
    float accept_prob;   /* max(1 - sum(residual), 0): DeepInfer's estimate of sum min(p, q) */
} di_dspark_verdict;

/* One verify row of fused_sample_ref. target_lp, draft_lp: (n) logprobs of
 * the target row and of the draft distribution that proposed `draft`
 * (draft < 0 or >= n: a pad draft, always rejected). seed: the sequence's
 * seed (the target stream), pos: the row's sample position
 * (di_dspark_row_position). residual: n floats of scratch. */
di_status di_dspark_verify_row(const float *target_lp, const float *draft_lp, int32_t n, int32_t draft,
                               uint64_t seed, int32_t pos, di_dspark_rule rule, float *residual,
                               di_dspark_verdict *out, di_error *err);

/* A fresh sample from logprobs lp (n) on stream (seed, pos, FRESH): the
 * final row of a sequence, a plain decode, or (seed + MTP offset) a draft. */
int32_t di_dspark_sample_logprobs(const float *lp, int32_t n, uint64_t seed, int32_t pos);

/* Accepted prefix of one sequence's packed rows (get_accept_result_ref):
 * accepted[j] for its q-1 verify rows. Returns the number of accepted
 * drafts; the emitted tokens are those drafts plus the token of row
 * (returned value), the first rejected verify row or the final fresh row. */
int32_t di_dspark_accepted_prefix(const int32_t *accepted, int32_t n_verify);

/* Confidence of one draft step (dflash.py:confidence_head_fused_ref):
 * sigmoid(clamp(([h ; e] . w) / T, -60, 60)), h (n_embd) the draft hidden
 * before the final norm, e (rank) the Markov embedding of the previous
 * token (NULL when rank is 0), w (n_embd + rank). */
float di_dspark_confidence(const float *h, int32_t n_embd, const float *e, int32_t rank, const float *w,
                           float temperature);

/* ---- confidence-scheduled verify length -------------------------------- */

typedef struct di_dspark_sched di_dspark_sched;

/* One point of the start-up cost curve: a step of `rows` total query rows
 * took `ms` (rows strictly increasing along the curve). */
typedef struct di_dspark_cost_point {
    int32_t rows;
    float ms;
} di_dspark_cost_point;

/* A sequence's state for one schedule call (MtpState of scheduler.hpp):
 * rates / prev_rates: the cumulative acceptance estimates of the last and
 * the one-before-last processed rounds (n_drafts each, NULL when none);
 * scheduled_ahead: 1 when the previous forward is not yet post-processed
 * (zero-overhead scheduling), so `rates` is then two rounds back. */
typedef struct di_dspark_seq_rates {
    int32_t n_drafts;
    const float *rates, *prev_rates;
    int32_t has_drafts;
    int32_t scheduled_ahead;
} di_dspark_seq_rates;

di_status di_dspark_sched_create(di_dspark_sched **out, di_error *err);
void di_dspark_sched_free(di_dspark_sched *s);
/* Sets the cost curve (copied; rows strictly increasing, ms finite > 0). An
 * empty curve turns scheduling off: every sequence verifies all drafts. */
di_status di_dspark_sched_set_curve(di_dspark_sched *s, const di_dspark_cost_point *pts, int32_t n,
                                    di_error *err);
/* Feeds one measured decode step (MTPVarlen::update_runtime): the step had
 * n_seqs sequences and `rows` rows, the forward took forward_ms and the
 * sampler (drafting included) sampler_ms. */
void di_dspark_sched_observe(di_dspark_sched *s, int32_t n_seqs, int32_t rows, double forward_ms,
                             double sampler_ms);
/* The current online slope (ms per row, >= 0) and sampler estimate (ms). */
double di_dspark_sched_slope_ms(const di_dspark_sched *s);
double di_dspark_sched_sampler_ms(const di_dspark_sched *s, int32_t n_seqs);
/* seqlens_q (n_seqs): 1 + the drafts each sequence verifies
 * (MTPVarlen::schedule; the sequences in the batch order the caller sorted
 * them in). scratch: di_dspark_sched_scratch_bytes(total drafts). */
size_t di_dspark_sched_scratch_bytes(int64_t total_drafts);
di_status di_dspark_sched_plan(const di_dspark_sched *s, const di_dspark_seq_rates *seqs, int32_t n_seqs,
                               void *scratch, int32_t *seqlens_q, di_error *err);

/* The ZOS allocation (compute_seqlens_q_by_confidence_rates_ref): total_q
 * rows over n_seqs sequences from the previous round's per-step confidences
 * prev_conf (n_prev, nextn), remap[i] = the row of sequence i there or -1.
 * scratch: di_dspark_zos_scratch_bytes(n_seqs * nextn). */
size_t di_dspark_zos_scratch_bytes(int64_t n_entries);
di_status di_dspark_zos_seqlens(int32_t total_q, const int32_t *remap, int32_t n_seqs, const float *prev_conf,
                                int32_t n_prev, int32_t nextn, void *scratch, int32_t *seqlens_q,
                                di_error *err);

/* The on-disk cache of the cost curve (worker/decode_perf_cache.py's role):
 * one file per key under dir, "<key-hash>.curve", a text header with the key
 * and the unix time, then "rows ms" lines. load: DI_ERR_NOT_FOUND when
 * absent, older than ttl_s, or for another key; a malformed file is
 * DI_ERR_FORMAT (never trusted). save: written to a temp file and renamed. */
di_status di_dspark_curve_save(const char *dir, const char *key, const di_dspark_cost_point *pts, int32_t n,
                               int64_t now_s, di_error *err);
di_status di_dspark_curve_load(const char *dir, const char *key, int64_t now_s, int64_t ttl_s,
                               di_dspark_cost_point *pts, int32_t cap, int32_t *n_out, di_error *err);

#endif
