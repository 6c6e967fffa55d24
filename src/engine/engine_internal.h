/* Internals shared by the src/engine files that implement di_engine.
 * Nothing here is part of the contract in include/deepinfer.h.
 *
 *   engine.c         create/free, submission, events, the step
 *   engine_prompt.c  a request's prompt -> ids (tokens, text, chat messages
 *                    through the text room's di_tok_chat_encode), image
 *                    placeholders -> image positions; the text helpers
 *   engine_spec.c    speculative decoding: drafter set-up, proposing drafts
 *                    before the schedule, settling a verify after sampling
 *   engine_kv_xfer.c prefill -> decode KV transfer (export / import records)
 *
 * Locking is engine.c's (its top comment): e->mu guards the scheduler and
 * the request list; the eng_spec_* functions are called by the stepping
 * thread and say when they need the lock. */
#ifndef DI_ENGINE_ENGINE_INTERNAL_H
#define DI_ENGINE_ENGINE_INTERNAL_H

#include "deepinfer.h"

#include "base/threadpool.h"
#include "engine/constraint.h"
#include "engine/image_cache.h"
#include "engine/kv_tier.h"
#include "engine/scheduler.h"
#include "model/model.h"
#include "sample/sampler.h"
#include "spec/spec.h"
#include "spec/verify_len.h"
#include "text/tokenizer.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

typedef struct request {
    int64_t id;
    di_seq *seq;                 /* owned by the scheduler until released */
    di_sampling_params sampling; /* logit_bias points at bias below */
    di_logit_bias *bias;
    int32_t *stop_tokens;
    size_t n_stop_tokens;
    int32_t *forced;             /* (n_forced) test mode: tokens replacing the samples */
    size_t n_forced;
    bool ignore_eos;
    float *prompt_lp;            /* (n_prompt - 1) prompt_logprobs, or NULL */
    int32_t *prompt_argmax;      /* (n_prompt - 1) */
    di_tok_detok *detok;
    di_constraint_state constraint; /* grammar matcher, when constrained */
    uint32_t *early_mask;        /* (mask words) the mask filled beside the forward, or NULL */
    uint32_t early_at;           /* matcher token count + 1 it was filled at; 0 = none */
    di_event_fn on_event;
    void *user;
    bool cancel_requested;
    bool started;                /* has been in a forward */
    int32_t spec_draft;          /* index into the step's spec_drafts, or -1 */
    int32_t n_cached;            /* prefix-cache hit tokens at first admission */
    double t_submit, t_start, t_first;
    char *text_buf;              /* final event: push text + flushed text */
    size_t text_cap;
    /* images (NULL without): the input rows of the image positions */
    float *img_rows;             /* (n_img_rows, n_embd) */
    int32_t *img_index;          /* (n_prompt) row of img_rows at an image position, else -1 */
    int32_t *hist;               /* (n_prompt + max_tokens) the sampler's history: image
                                    positions read as the placeholder id */
    struct request *prev, *next;
} request;

/* One row to sample in the parallel phase of a step. A sequence that
 * verifies drafts has one job per row: row j sees its drafts 0..j-1. */
typedef struct sample_job {
    request *r;
    const float *logits;       /* (n_vocab) */
    int32_t row;               /* j: 0 = the decode row, then one per draft */
    int32_t n_drafts;          /* drafts of this sequence this step */
    const float *q;            /* (n_vocab) draft distribution of draft j, or
                                  NULL (one-hot: the match rule) */
    di_sample_result res;
    int32_t token;             /* what row j emits if reached */
    bool accepted;             /* row j < n_drafts: draft j stands */
    bool forced_end;           /* test mode: the script is over, the output ends here */
    di_status status;
    di_error err;
} sample_job;

struct di_engine {
    di_engine_params params;
    di_model *model;
    di_model_facts facts;
    const di_tokenizer *tok;
    di_model_kv *kv;
    di_model_ctx *ctx;
    di_threadpool *pool;
    di_scheduler *sched;
    di_engine_tier *tier;        /* disk tier, or NULL */
    int32_t replay_keep;         /* SWA bounded replay: prompt rows the decoder layers run on, 0 = exact */
    di_image_cache *image_cache; /* encoded images by bytes, NULL = off */
    int64_t n_image_encodes;     /* vision tower runs (atomic: submit runs on any thread) */
    bool have_kv_id;             /* kv_id computed (at the first export/import) */
    di_kv_key kv_id;             /* model id stamped on exported KV records */
    uint8_t *xfer_block;         /* (block bytes) scratch of export/import */
    di_sampler **samplers;       /* (n_threads) one per pool thread: samplers keep scratch */
    int32_t n_threads;
    sample_job *jobs;            /* (max_batch_tokens) */
    int32_t n_jobs;
    int32_t n_ctx;
    float *logits;               /* (logits_rows, n_vocab) */
    size_t logits_rows;          /* max_seqs; grows (up to max_batch_tokens) when
                                    prompt_logprobs requests want every prompt row */
    int32_t *logit_index;        /* (max_batch_tokens) row -> logits row or -1 */
    di_constraint_cache *constraints;
    uint32_t *masks;             /* (n_threads, mask words) grammar masks being filled */
    size_t mask_words;
    request **early_reqs;        /* (max_seqs) requests whose masks are posted this step */
    int64_t n_masks_early;       /* statistics: masks posted before forwards */
    request **slot_req;          /* (max_seqs) scratch: prompt_logprobs request per slot */
    const float **row_embd;      /* (max_batch_tokens) scratch: image rows of the batch */
    char *image_placeholder;     /* the placeholder token's text, NULL without images */
    pthread_mutex_t mu;
    request *reqs;               /* live requests (queued or running) */
    int64_t next_id;
    int64_t n_prompt_tokens, n_generated_tokens, n_finished;
    int64_t n_prefill_rows; /* prompt tokens computed, over all steps */
    double t_forward_ms;
    double t_last_step_ms;
    /* Speculative decoding (docs/SPECULATIVE.md); drafter NULL = off. */
    di_drafter *drafter;
    di_spec_accept spec_accept;
    int32_t spec_k;
    di_spec_seq *spec_seqs;      /* (max_seqs) asking this step */
    di_spec_drafts *spec_drafts; /* (max_seqs) their drafts */
    int32_t *spec_tokens;        /* (max_seqs, DI_SPEC_MAX_K) */
    float *spec_conf;            /* (max_seqs, DI_SPEC_MAX_K) */
    float *spec_q;               /* (max_seqs, spec_k, n_vocab) */
    float *spec_p;               /* (n_threads, 2, n_vocab): p and residual */
    di_spec_outcome *spec_out;   /* (max_seqs) */
    di_engine_stats spec_stats;  /* only the spec_* fields */
    int32_t n_spec_out;          /* entries of spec_out this step */
    di_spec_vlen *vlen;          /* confidence-scheduled verify length, NULL = off */
    int32_t *spec_nverify;       /* (max_seqs) drafts each sequence verifies */
    double t_propose_ms;         /* this step's drafting */
    double t_curve_ms;           /* start-up cost-curve measurement (0: cached) */
};

static inline double eng_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Everything besides the model file that changes the KV bits, written to
 * buf (cap bytes): records of another flavor are another model's. */
void eng_kv_flavor(const di_engine *e, int32_t block, char *buf, size_t cap);

/* ---- prompts (engine_prompt.c) ---------------------------------------------- */

/* The prompt token ids of r (exactly one of messages, text or tokens) into
 * *ids (caller frees), image placeholders not yet expanded. No lock. */
di_status eng_build_prompt(di_engine *e, const di_request *r, di_tok_ids *ids, di_error *err);
/* Expands each image placeholder of ids into the image's positions (ids
 * from the model: DeepInfer's vocab + IMAGE, IMAGE_PAD...), keeps their rows
 * in q (img_rows, img_index), and gives the prefix cache a key that hashes
 * the image's bytes there (*key_out: (ids->n) malloc'd, caller frees). */
di_status eng_expand_images(di_engine *e, const di_request *r, request *q, di_tok_ids *ids, int32_t **key_out,
                            di_error *err);

/* ---- speculative decoding (engine_spec.c) ---------------------------------- */

/* Frees the drafter and the draft buffers; safe on an engine without them. */
void eng_spec_close(di_engine *e);
/* The drafter p->spec names, its buffers, and (DSpark) the confidence
 * schedule with its start-up cost curve. */
di_status eng_spec_open(di_engine *e, const di_engine_params *p, di_error *err);
/* Drafts for the sequences about to decode, handed to the scheduler.
 * Lock held on entry and exit; dropped while the drafter runs. */
di_status eng_spec_propose(di_engine *e, di_error *err);
/* After one sequence's verify: statistics, KV rollback, its outcome. */
di_status eng_spec_settle(di_engine *e, int32_t slot, int64_t seq_id, int32_t first_row, int32_t n_rows,
                          int32_t n_accepted, int32_t n_tokens_before, di_error *err);

#endif
