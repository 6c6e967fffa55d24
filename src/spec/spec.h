/* Speculative decoding: drafters behind one ops table, and the verifier's
 * acceptance rules as pure functions.
 *
 * A drafter proposes up to k tokens per running sequence before a step;
 * the engine puts them as extra rows of that sequence in the step's one
 * di_batch (every row wants logits), samples every row, and the verifier
 * keeps the longest accepted prefix plus one token from the first row that
 * was not accepted (or the bonus row after the last draft). Rejected rows
 * are forgotten with di_model_kv_truncate: nothing is copied.
 *
 *   engine step:
 *     drafter->propose(seqs)           drafts (+ q, confidences) per sequence
 *     schedule: decode row + drafts    scheduler/di_scheduler_set_drafts
 *     forward(batch)                   target logits at every row
 *     sample each row, di_spec_accept_*  accepted prefix + final token
 *     kv_truncate(slot, n_keep)        rejected positions forgotten
 *     drafter->after_forward(...)      the hook a model drafter reads its
 *                                      features in (DSpark)
 *
 * Drafters (spec/drafter_*.c), chosen by name in di_spec_drafter_create:
 *   "ngram"       prompt lookup over the sequence's own tokens; q one-hot
 *   "draft:PATH"  a second model of the same vocabulary with its own KV;
 *                 greedy drafts of all sequences in one batched forward per
 *                 draft position; q one-hot
 *   "dspark"      DeepSeek-V4.1's drafter, provided by the model
 *                 (spec/drafter_dspark.c is the registration point)
 *
 * Ownership: di_spec_drafter_create allocates, di_drafter_free frees; the
 * drafter may keep pointers from di_spec_env (they outlive it). A drafter
 * is driven by the stepping thread only. */
#ifndef DI_SPEC_SPEC_H
#define DI_SPEC_SPEC_H

#include "base/status.h"
#include "base/threadpool.h"
#include "deepinfer.h"
#include "model/batch.h"
#include "sample/dspark.h"

#include <stdbool.h>
#include <stdint.h>

struct di_model;
struct di_model_ctx;
struct di_model_kv;

/* Drafts per sequence per step at most (the rows one verify may add). */
#define DI_SPEC_MAX_K DI_SPEC_MAX_DRAFTS
#define DI_SPEC_DEFAULT_K 4

typedef enum di_spec_accept {
    /* Accept a draft iff it equals the token the request's own sampler
     * draws at that position (argmax when greedy; the seeded draw when
     * sampling). Output = the output without speculation, token for token. */
    DI_SPEC_ACCEPT_GREEDY = 0,
    /* Exactly lossless speculative sampling: accept with min(1, p/q), on
     * reject sample norm(max(0, p - q)). With a deterministic drafter
     * (q one-hot) it is computed as the coupling "draw x ~ p with the
     * position's own uniform; accept iff x == draft", which is the same
     * rule and also gives the tokens of a run without speculation. */
    DI_SPEC_ACCEPT_LOSSLESS,
    /* DeepInfer 0.1.0's rule (tilelang_ops/fused_sample.py): accept iff
     * u < min(1, p/q); on reject sample max(p - alpha q, 0) with
     * alpha = exp(-DI_SPEC_DEEPINFER_PENALTY): near-lossless. */
    DI_SPEC_ACCEPT_DEEPINFER,
} di_spec_accept;

/* DeepInfer's DRAFT_PROB_PENALTY (tilelang_ops/common.py). */
#define DI_SPEC_DEEPINFER_PENALTY 5e-5

/* Parses "greedy" / "lossless" / "deepinfer". */
di_status di_spec_accept_from_name(const char *name, di_spec_accept *out, di_error *err);
const char *di_spec_accept_name(di_spec_accept a);

/* One sequence asking for drafts. tokens: (n_tokens) prompt + generated;
 * the last token has no KV yet (it is this step's decode row). */
typedef struct di_spec_seq {
    int64_t seq_id;        /* changes when a slot gets a new sequence */
    int32_t slot;          /* the batch sequence slot */
    const int32_t *tokens; /* (n_tokens) */
    int32_t n_tokens;
    int32_t n_prompt;
    int32_t k_max;         /* drafts wanted at most, 1..DI_SPEC_MAX_K */
    const di_sampling_params *sampling; /* the request's parameters */
    /* The slot's block table (the engine's, n_blocks entries): it covers
     * positions 0 .. n_tokens - 2 + k_max, so a drafter may write scratch
     * records at the positions its drafts take (DSpark's draft block). */
    const int32_t *blocks;
    int32_t n_blocks;
} di_spec_seq;

/* What a drafter gives for one sequence. Buffers are the engine's, sized
 * for k_max drafts. */
typedef struct di_spec_drafts {
    int32_t n;            /* drafts given, 0..k_max */
    int32_t *tokens;      /* (k_max) */
    bool has_q;           /* false: q is one-hot at tokens[i] (deterministic) */
    float *q;             /* (k_max, n_vocab) the draft distribution of each
                             draft, when has_q; rows sum to 1 */
    float *confidence;    /* (k_max) the drafter's own estimate that draft i
                             is accepted (DSpark), or 1 when it has none */
} di_spec_drafts;

/* After a verify step: how one sequence's drafts fared. */
typedef struct di_spec_outcome {
    int64_t seq_id;
    int32_t slot;
    int32_t first_row;   /* batch row of its decode token */
    int32_t n_rows;      /* 1 + drafts verified */
    int32_t n_accepted;  /* drafts accepted, 0..n_rows-1 */
    int32_t n_tokens;    /* the sequence's tokens after the step */
} di_spec_outcome;

typedef struct di_drafter di_drafter;

/* The interface every drafter implements. */
typedef struct di_drafter_ops {
    const char *name;
    /* Fills out[i] for seqs[i], i < n. May run forwards on pool. A failure
     * fails the step; giving 0 drafts is always allowed. */
    di_status (*propose)(di_drafter *d, const di_spec_seq *seqs, int32_t n, di_spec_drafts *out,
                         di_threadpool *pool, di_error *err);
    /* Called after every target forward (also steps with no drafts) with
     * that step's batch and the outcome of each sequence that was sampled.
     * A model drafter reads the features the target forward captured here.
     * May be NULL. */
    void (*after_forward)(di_drafter *d, const di_batch *b, const di_spec_outcome *o, int32_t n);
    /* A drafter sees a slot's new owner by seq_id changing; a slot that no
     * propose asks for may be dropped whenever the drafter needs room. */
    void (*free)(di_drafter *d);
} di_drafter_ops;

/* Every drafter struct starts with this header. */
struct di_drafter {
    const di_drafter_ops *ops;
};

/* What a drafter may use, borrowed from the engine for its lifetime. */
typedef struct di_spec_env {
    const struct di_model *target;
    struct di_model_ctx *target_ctx; /* a model drafter's features live here */
    struct di_model_kv *target_kv;
    int32_t n_vocab;
    int32_t k_max;                  /* --spec-k: the most drafts ever asked for */
    int32_t n_ctx;                  /* tokens per sequence at most */
    int32_t max_seqs;               /* batch sequence slots */
    int32_t kv_tokens;              /* the target's KV pool, for sizing a draft KV */
    int32_t block_size;
    const char *kernels;            /* the engine's kernel table choice */
} di_spec_env;

/* Opens the drafter `spec` names ("ngram", "draft:PATH", "dspark").
 * DI_ERR_INVALID_ARG for an unknown name, DI_ERR_UNSUPPORTED when the
 * drafter cannot serve this model. */
di_status di_spec_drafter_create(const char *spec, const di_spec_env *env, di_drafter **out, di_error *err);
void di_drafter_free(di_drafter *d);

/* The constructors behind the names (spec/drafter_*.c). */
di_status di_spec_ngram_create(const di_spec_env *env, di_drafter **out, di_error *err);
di_status di_spec_draft_model_create(const char *path, const di_spec_env *env, di_drafter **out, di_error *err);
di_status di_spec_dspark_create(const di_spec_env *env, di_drafter **out, di_error *err);

/* Test knob of the DSpark drafter: after the real draft forward (features,
 * draft block, heads, q, confidences) fn(user, seq, j, draft, confidence)
 * sees draft j of each sequence and replaces it when it returns a token
 * >= 0 (q is then reported as one-hot). For tests that need an
 * always-right drafter through the real dspark path, or that check the
 * drafts themselves. DI_ERR_INVALID_ARG when d is not the dspark drafter. */
typedef int32_t (*di_spec_dspark_oracle)(void *user, const di_spec_seq *seq, int32_t j, int32_t draft,
                                         float confidence);
di_status di_spec_dspark_set_oracle(di_drafter *d, di_spec_dspark_oracle fn, void *user, di_error *err);

/* ---- acceptance (spec/accept.c), pure functions ------------------------ */

/* One verify row with a distribution q (has_q drafters) under LOSSLESS or
 * DEEPINFER: p is the target's sampling distribution at that row (n_vocab,
 * sums to 1), q the draft distribution, draft the proposed token,
 * u_accept / u_resample uniforms in [0, 1). *accepted says whether the
 * draft stands; when not, *token is the residual sample (the draft when
 * accepted). residual: (n_vocab) scratch. */
di_status di_spec_accept_row(di_spec_accept rule, const float *p, const float *q, int32_t n_vocab,
                             int32_t draft, float u_accept, float u_resample, float *residual,
                             bool *accepted, int32_t *token, di_error *err);
/* q == NULL means one-hot at draft (a deterministic drafter). */

/* The unnormalized residual a reject samples from: max(0, p - q)
 * (LOSSLESS) or max(0, p - alpha q) (DEEPINFER) into residual (n_vocab);
 * returns its mass (1 - mass is DeepInfer's accept_probs). */
double di_spec_residual(di_spec_accept rule, const float *p, const float *q, int32_t n_vocab, int32_t draft,
                        float *residual);

/* The accepted prefix of a sequence's drafts under the match rule (GREEDY,
 * and LOSSLESS with one-hot q): rows[j] is the token sampled at
 * row j (j = 0..n_drafts; row j sees drafts 0..j-1). Returns how many
 * drafts are accepted; the emitted tokens are rows[0..accepted]. */
int32_t di_spec_match_prefix(const int32_t *drafts, int32_t n_drafts, const int32_t *rows);

/* Installs d (taken over; freed with the engine) as e's drafter with rule
 * and k, replacing any other: for tests that need a drafter of their own
 * (an oracle that always hits, random hits and misses). DI_ERR_UNSUPPORTED
 * when the model cannot roll back its KV. Call before the first submit. */
di_status di_engine_set_drafter(di_engine *e, di_drafter *d, di_spec_accept rule, int32_t k, di_error *err);
/* The engine's drafter (NULL when speculation is off), still owned by the
 * engine: for tests that turn a drafter's knobs. */
di_drafter *di_engine_drafter(di_engine *e);
/* The verify-length schedule's cost curve (dspark without spec_fixed_k):
 * *n_out points copied into pts (at most cap; 0 when there is no
 * schedule), *measured_ms the start-up measurement's time (0 on a cache
 * hit). set: replaces the curve (tests; turns the schedule on for any
 * drafter, an empty curve makes it verify every draft). */
di_status di_engine_spec_curve(di_engine *e, di_dspark_cost_point *pts, int32_t cap, int32_t *n_out,
                               double *measured_ms);
di_status di_engine_set_spec_curve(di_engine *e, const di_dspark_cost_point *pts, int32_t n, di_error *err);

#endif
