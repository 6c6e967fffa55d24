/* The sampler: one row of logits in, one token (plus logprobs) out.
 *
 * Chain, in this order (HF transformers' processor order, which the engine
 * issue asks for):
 *   1. logit bias (added) and the grammar mask (disallowed -> -inf)
 *   2. penalties: repetition (HF/llama.cpp), then frequency and presence
 *      (OpenAI)
 *   3. temperature == 0: greedy argmax, lowest token id wins ties; stop here
 *   4. temperature: logits / T
 *   5. top-k: keep exactly the k largest (ties at the k-th value broken by
 *      lowest id; HF keeps every tie, which only differs on exact ties)
 *   6. top-p: over the distribution renormalized after top-k, keep a token
 *      when the probability mass of the tokens ranked strictly above it is
 *      < top_p (HF/vLLM: drop when the ascending cumulative sum <= 1-top_p)
 *   7. min-p: keep a token when p >= min_p * p_max (HF; the ratio does not
 *      change with renormalization, so it is a logit threshold)
 *   8. draw u from the request's Philox stream at (seed, position) and pick
 *      by inverse CDF over the survivors
 *
 * Penalty windows (the caller passes the history; the sampler does not keep
 * one):
 *   - repetition_penalty applies once to every distinct token in the whole
 *     history, prompt AND generated (HF RepetitionPenaltyLogitsProcessor and
 *     vLLM): logit > 0 ? logit / r : logit * r. llama.cpp's "last n" window
 *     is the caller's choice: pass the tail of the history.
 *   - presence/frequency apply over the GENERATED tokens only (OpenAI, vLLM):
 *     logit -= frequency * count + presence * (count > 0).
 *
 * Logprobs: log-softmax of the logits after step 2 (bias, mask, penalties)
 * and BEFORE temperature and truncation, in double precision. This is what
 * the engine issue asks for; it is NOT vLLM v1's default ("raw_logprobs" in
 * vLLM v1 is taken from the model logits before bias and penalties too). That
 * mode is DI_LOGPROBS_RAW. Masked tokens have logprob -inf.
 *
 * Cost: O(V) for the common paths; top-k is a bounded heap, O(V log k) (then
 * the k survivors are sorted); top-p without top-k finds the nucleus by a
 * mass-steered quickselect, expected O(V), sorting only a small remainder
 * (O(V log V) worst case on adversarial pivots). No allocation per call:
 * a di_sampler owns scratch for one row and is used by one thread at a time
 * (one sampler per worker thread). */
#ifndef DI_SAMPLE_SAMPLER_H
#define DI_SAMPLE_SAMPLER_H

#include "deepinfer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* OpenAI's limit on top_logprobs; the result carries a fixed array. */
#define DI_SAMPLER_MAX_TOP_LOGPROBS 20
/* OpenAI caps logit_bias values at +-100; larger values are certainly bugs. */
#define DI_SAMPLER_MAX_ABS_LOGIT_BIAS 100.0f
/* OpenAI's range for presence_penalty and frequency_penalty. */
#define DI_SAMPLER_MAX_ABS_PENALTY 2.0f

/* One logit_bias entry: bias is added to token's logit. Entries naming the
 * same token add up. */
typedef struct di_logit_bias {
    int32_t token;
    float bias;
} di_logit_bias;

typedef enum di_logprobs_mode {
    DI_LOGPROBS_PROCESSED = 0, /* after bias, mask and penalties; before temperature */
    DI_LOGPROBS_RAW = 1,       /* of the model logits as passed in (vLLM v1 default) */
} di_logprobs_mode;

/* Per-request sampling parameters. The server fills this from user input and
 * must call di_sampling_params_validate before the request is queued. */
typedef struct di_sampling_params {
    float temperature;        /* >= 0, finite; 0 = greedy */
    int32_t top_k;            /* 0 or -1 = off; >= 1 keeps k tokens */
    float top_p;              /* (0, 1]; 1 = off */
    float min_p;              /* [0, 1]; 0 = off */
    float repetition_penalty; /* > 0, finite; 1 = off */
    float presence_penalty;   /* [-2, 2]; 0 = off */
    float frequency_penalty;  /* [-2, 2]; 0 = off */
    const di_logit_bias *logit_bias; /* (n_logit_bias), borrowed; may be NULL if 0 */
    size_t n_logit_bias;
    uint64_t seed;            /* keys the Philox stream; the engine picks one
                                 when the user gave none */
    bool logprobs;            /* fill result logprob and top[] */
    int32_t top_logprobs;     /* 0..DI_SAMPLER_MAX_TOP_LOGPROBS; needs logprobs */
    di_logprobs_mode logprobs_mode;
} di_sampling_params;

/* Parameters that change nothing: temperature 1, no truncation, no
 * penalties, no bias, seed 0, no logprobs. */
di_sampling_params di_sampling_params_default(void);

/* Checks every field (ranges, NaN/inf, bias token ids against n_vocab).
 * DI_ERR_INVALID_ARG or DI_ERR_RANGE with a message naming the field. */
di_status di_sampling_params_validate(const di_sampling_params *p, int32_t n_vocab,
                                      di_error *err);

/* One row to sample. The grammar mask changes every step, so it travels
 * with the row, not with the request's parameters. */
typedef struct di_sample_input {
    const float *logits;    /* (n_vocab) model output for this position */
    const int32_t *tokens;  /* (n_tokens) history: prompt then generated */
    int32_t n_tokens;
    int32_t n_prompt;       /* tokens[0..n_prompt) are the prompt */
    uint64_t position;      /* RNG counter: the sequence position being
                               sampled (= n_tokens for plain decoding) */
    const uint32_t *allowed; /* (ceil(n_vocab/32)) bit t%32 of word t/32 set
                               = token t allowed; NULL = all allowed */
} di_sample_input;

typedef struct di_token_logprob {
    int32_t token;
    float logprob;
} di_token_logprob;

typedef struct di_sample_result {
    int32_t token;   /* the chosen token */
    float logprob;   /* its logprob (see header comment); 0 if !logprobs */
    int32_t n_top;   /* entries in top[], = top_logprobs when logprobs */
    di_token_logprob top[DI_SAMPLER_MAX_TOP_LOGPROBS]; /* by logprob desc,
                                                           ties by id asc */
} di_sample_result;

/* Scratch for one row of n_vocab logits. Not thread safe: one per thread. */
typedef struct di_sampler di_sampler;

/* Allocates a sampler for vocabularies of n_vocab tokens (>= 1). */
di_status di_sampler_create(int32_t n_vocab, di_sampler **out, di_error *err);
void di_sampler_free(di_sampler *s);
int32_t di_sampler_n_vocab(const di_sampler *s);

/* Runs the chain on one row. Fails (nothing written to out) on invalid
 * params, a history token outside [0, n_vocab), NaN or +inf logits, or a
 * mask/bias that leaves no token with a finite logit. */
di_status di_sampler_sample(di_sampler *s, const di_sampling_params *p,
                            const di_sample_input *in, di_sample_result *out,
                            di_error *err);

/* The distribution step 8 draws from, densely: probs (n_vocab) gets each
 * token's probability after steps 1-7 (0 for tokens cut away; one-hot for
 * greedy). For tests and for speculative decoding, whose accept/reject
 * needs the target distribution. */
di_status di_sampler_distribution(di_sampler *s, const di_sampling_params *p,
                                  const di_sample_input *in, float *probs,
                                  di_error *err);

#endif
