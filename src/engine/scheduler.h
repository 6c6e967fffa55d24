/* Continuous-batching scheduler (nano-vllm's decomposition): sequences move
 * between a WAITING and a RUNNING queue; each step packs decode tokens and
 * prefill chunks into one flat batch under a token budget, manages their KV
 * blocks (block pool + prefix cache), and preempts by recompute when blocks
 * run out.
 *
 * The engine loop, one step:
 *
 *   di_scheduler_schedule(s, &out, &err);       // batch + rows to sample
 *   model forward(&out.batch)                   // writes KV, gives logits
 *   for i in 0..out.n_samples-1:                // logits of row out.sample_rows[i]
 *       tok = sample(...);
 *       di_scheduler_postprocess(s, out.sample_seqs[i], tok, why, &final, &err);
 *
 * KV blocks are only allocated in schedule (the one place where running out
 * can be answered by preemption); postprocess appends the token and, on
 * finish, caches and frees. The block for a sampled token is taken by the
 * schedule that feeds that token back.
 *
 * Every sampled sequence gets exactly one postprocess before the next
 * schedule (or is cancelled). The forward must run before the next schedule:
 * schedule counts the batch's tokens as computed, and caches their full
 * blocks for other sequences at the next schedule.
 *
 * Sequence lifecycle and ownership:
 *   di_scheduler_add      -> WAITING; the scheduler owns the di_seq and copies
 *                            the prompt. Refused (DI_ERR_FULL / RANGE) when
 *                            prompt + max_tokens can never fit the pool or
 *                            the context; nothing else is affected.
 *   schedule              -> admitted to RUNNING (slot + blocks), possibly
 *                            preempted back to the front of WAITING (blocks
 *                            freed; its prompt + generated tokens will be
 *                            recomputed, often from the prefix cache).
 *   postprocess(finish)   -> FINISHED: full blocks go to the prefix cache,
 *                            all the sequence's block references are dropped.
 *   (forward failed)      -> di_scheduler_abort_step, then schedule again.
 *   di_scheduler_cancel   -> FINISHED (DI_FINISH_CANCEL) at once, from WAITING
 *                            or RUNNING; blocks dropped, nothing cached.
 *   di_scheduler_release  -> the FINISHED di_seq is freed (the caller reads
 *                            its tokens first). di_scheduler_free frees all.
 * A di_seq pointer stays valid from add until release or scheduler free.
 *
 * Not thread-safe: one engine thread drives one scheduler. */
#ifndef DI_ENGINE_SCHEDULER_H
#define DI_ENGINE_SCHEDULER_H

#include "base/status.h"
#include "model/batch.h"
#include "engine/scheduler_cost.h"
#include "kv/block_pool.h"
#include "kv/prefix_cache.h"

#include <stdbool.h>
#include <stdint.h>

typedef enum di_seq_status {
    DI_SEQ_WAITING = 0,
    DI_SEQ_RUNNING,
    DI_SEQ_FINISHED,
} di_seq_status;

typedef enum di_finish_reason {
    DI_FINISH_NONE = 0, /* still generating */
    DI_FINISH_STOP,     /* stop token or stop string (the engine decides) */
    DI_FINISH_LENGTH,   /* max_tokens reached (the scheduler also detects it) */
    DI_FINISH_CANCEL,   /* cancelled by the caller */
} di_finish_reason;

/* One request's state. Read-only outside the scheduler. Generated tokens are
 * tokens[n_prompt .. n_tokens). */
typedef struct di_seq {
    int64_t id;                 /* 1, 2, ... in order of add */
    void *user;                 /* the caller's pointer, never touched */
    di_seq_status status;
    di_finish_reason finish;
    int32_t n_prompt;
    int32_t max_tokens;         /* generated tokens allowed, >= 1 */
    int32_t n_tokens;           /* prompt + generated so far */
    int32_t *tokens;            /* (n_prompt + max_tokens) capacity */
    int32_t n_computed;         /* tokens whose KV is written (or in the batch
                                   just scheduled); 0 while WAITING */
    int32_t n_cached_prefix;    /* tokens taken from the prefix cache at the
                                   last admission (not computed) */
    int32_t n_blocks;           /* valid entries of block_table */
    int32_t *block_table;       /* (max blocks of this sequence) block ids */
    int32_t slot;               /* batch sequence slot while RUNNING, else -1 */
    int32_t n_preemptions;
    bool prompt_logits;         /* logits at every prompt row (see
                                   di_scheduler_want_prompt_logits) */
    int32_t *key;               /* (n_prompt) prefix-cache key of the prompt, NULL = tokens
                                   (di_scheduler_set_prefix_key) */
    int32_t n_drafts;           /* speculative drafts for the next schedule,
                                   kept at tokens[n_tokens .. n_tokens + n_drafts)
                                   (di_scheduler_set_drafts) */
    int32_t n_draft_rows;       /* drafts that got rows in the last schedule */
    /* Private to the scheduler: */
    int64_t admit_order;        /* larger = admitted later (preempted first) */
    int32_t n_blocks_cap;
    int32_t n_blocks_offered;   /* full blocks already offered to the cache */
    bool awaiting_sample;       /* a sampled row was scheduled; postprocess due */
    bool in_step;               /* has rows in the batch being built */
    int32_t n_computed_before_step; /* for di_scheduler_abort_step */
    struct di_seq *all_prev, *all_next; /* every seq not yet released */
} di_seq;

/* A slower KV tier under the prefix cache (the engine's disk tier): blocks
 * the cache evicts are offered to spill while their KV is still in the
 * pool; at admission, after the RAM prefix match, fetch is asked for the
 * next full blocks of the prompt one by one (into a block the scheduler
 * allocated) until it says no. Both get the block's whole prefix
 * (n_prefix tokens, whole blocks). Called on the scheduling thread between
 * forwards, so no forward touches these blocks meanwhile. */
typedef struct di_kv_tier {
    void *user;
    void (*spill)(void *user, int32_t block, const int32_t *prefix, int32_t n_prefix);
    bool (*fetch)(void *user, int32_t block, const int32_t *prefix, int32_t n_prefix);
} di_kv_tier;

typedef struct di_scheduler_config {
    int32_t n_blocks;             /* KV blocks in the pool */
    int32_t block_size;           /* tokens per block */
    int32_t max_tokens_per_step;  /* token budget: batch rows per step */
    int32_t max_running;          /* RUNNING sequences at once = batch slots */
    int32_t max_context;          /* prompt + max_tokens limit (model context) */
    bool prefix_cache;            /* reuse full blocks across sequences */
    /* Latency controls (0 = off). They change which rows share a step,
     * never what any row computes: outputs stay those of each request run
     * alone (the kernels are batch-invariant). */
    int32_t max_prefill_tokens;   /* prompt/recompute rows per step at most, so
                                     long prompts cannot stall decoding */
    double tpot_target_ms;        /* SLO mode: admit prefill rows and new
                                     sequences only while the predicted step
                                     time (di_step_cost) stays within this */
    di_kv_tier tier;              /* optional (spill/fetch NULL = none); needs
                                     prefix_cache */
    int32_t replay_keep;          /* SWA bounded replay (0 = off): batches carry
                                     replay_from = n_prompt - keep per slot, and
                                     prefix hits stop at that position so that
                                     every row a kept row reads is computed by
                                     its own sequence */
} di_scheduler_config;

/* What one step runs. Arrays are owned by the scheduler and stay valid until
 * the next schedule / free; batch.block_tables point into live di_seqs. */
typedef struct di_sched_output {
    di_batch batch;
    int32_t n_samples;
    const int32_t *sample_rows;       /* (n_samples) batch row whose logits to sample */
    const int32_t *sample_n_rows;     /* (n_samples) rows of that sequence from
                                         sample_rows[i] on, all with logits:
                                         1 + its drafts (speculative verify) */
    di_seq *const *sample_seqs;       /* (n_samples) the sequence of that row */
    int32_t n_decode_tokens;          /* one-token rows of sequences with all else computed */
    int32_t n_prefill_tokens;         /* the other rows (prompt chunks, recompute) */
    int32_t n_preempted;              /* sequences preempted by this step */
} di_sched_output;

typedef struct di_scheduler_stats {
    int32_t n_waiting, n_running;
    int32_t n_blocks_free;            /* in the pool's free list */
    int32_t n_blocks_cached;          /* held by the prefix cache */
    int32_t n_blocks_evictable;       /* cached and referenced by no sequence */
    int64_t n_steps;
    int64_t n_preemptions;
    int64_t n_prefix_hit_tokens;      /* prompt tokens skipped thanks to the cache
                                         (RAM or tier) */
    int64_t n_tier_hit_tokens;        /* of which the tier's fetch supplied */
    int64_t n_computed_tokens;        /* batch rows scheduled so far */
    int64_t n_deferred_steps;         /* steps that left prefill rows or waiting
                                         sequences out for max_prefill_tokens or
                                         tpot_target_ms (not for the token budget,
                                         slots or blocks) */
    double step_fixed_ms;             /* the step cost model (di_step_cost) */
    double step_decode_ms;
    double step_prefill_ms;
    double predicted_step_ms;         /* of the last planned step */
} di_scheduler_stats;

typedef struct di_scheduler di_scheduler;

/* Validates cfg (every count >= 1) and builds the pool and cache. */
di_status di_scheduler_create(const di_scheduler_config *cfg, di_scheduler **out, di_error *err);
/* Frees every di_seq (live or finished), the cache and the pool. */
void di_scheduler_free(di_scheduler *s);

/* Queues a request at the back of WAITING. prompt: n_prompt >= 1 token ids
 * (>= 0), copied. Refuses with DI_ERR_RANGE when n_prompt + max_tokens exceeds
 * max_context, DI_ERR_FULL when its KV could never fit the whole pool; the
 * message says by how much. *out is the new sequence. */
di_status di_scheduler_add(di_scheduler *s, const int32_t *prompt, int32_t n_prompt,
                           int32_t max_tokens, void *user, di_seq **out, di_error *err);

/* Teacher-forced scoring: asks for logits at every prompt row of seq, not
 * only at the sampled row (batch.want_logits marks them; they are not sampled
 * rows), and turns off prefix-cache reuse for seq so every prompt row is
 * computed. A recompute after preemption produces those rows again, with the
 * same values. Call while seq is WAITING and was never admitted (right after
 * di_scheduler_add); DI_ERR_INVALID_ARG otherwise. */
di_status di_scheduler_want_prompt_logits(di_scheduler *s, di_seq *seq, di_error *err);

/* The prefix cache keys seq's prompt by key (n_prompt ids, copied) instead of
 * its tokens; generated tokens key as themselves. Images use it: their
 * positions share one token id, so the key carries the image's content
 * hash there (same bytes = same prefix). Call right after add. */
di_status di_scheduler_set_prefix_key(di_scheduler *s, di_seq *seq, const int32_t *key, di_error *err);

/* Plans one step into *out: first one decode token per RUNNING sequence (in
 * admission order), then the next chunks of RUNNING sequences still
 * prefilling, then admits WAITING sequences (prefix-cache hit first) while
 * budget and slots remain. A sequence whose chunk reaches its last token gets
 * a sampled row. When blocks run out the newest RUNNING sequence not in this
 * batch is preempted (possibly the one asking). n_rows is 0 when idle.
 * DI_ERR_INVALID_ARG when the last step's samples were not all postprocessed.
 *
 * Prefill rows (chunks and admissions) are further limited by
 * max_prefill_tokens and, in SLO mode, by the time the cost model predicts
 * is left of tpot_target_ms after the decode rows; a new sequence is only
 * admitted while the predicted decode step of all RUNNING sequences plus it
 * fits the target. Progress is never lost: every RUNNING sequence decodes
 * each step, the first prefill chunk of a step may always take
 * DI_SCHED_MIN_PREFILL_ROWS rows, and an idle scheduler always admits. */
#define DI_SCHED_MIN_PREFILL_ROWS 16
di_status di_scheduler_schedule(di_scheduler *s, di_sched_output *out, di_error *err);

/* Appends the token sampled for seq. finish is the engine's verdict
 * (NONE / STOP / LENGTH / CANCEL); the scheduler turns NONE into LENGTH when
 * max_tokens is reached. When the result is not NONE the sequence finishes:
 * its full blocks are offered to the prefix cache and its references
 * dropped. *final_out (may be NULL) gets the resulting finish reason. */
di_status di_scheduler_postprocess(di_scheduler *s, di_seq *seq, int32_t token,
                                   di_finish_reason finish, di_finish_reason *final_out,
                                   di_error *err);

/* Speculative decoding: the next schedule gives seq, when it decodes,
 * 1 + n rows: its last token, then drafts[0..n) at the following positions,
 * every row with logits. n is clamped to what the sequence may still
 * generate (max_tokens - generated - 1, so accepting every draft and the
 * bonus token never passes max_tokens) and to DI_SCHED_MAX_DRAFTS; fewer
 * rows are given when budget or blocks are short. Drafts are for one
 * schedule only. seq must be RUNNING with every token but the last
 * computed; *n_set (may be NULL) gets the drafts kept. */
/* Speculative decoding, before set_drafts: grows a decoding sequence's
 * block table to cover its first n_tokens tokens, as far as free (or
 * evictable cached) blocks allow and never by preempting; *n_covered gets
 * the tokens the table covers afterwards. For a drafter that writes its
 * own scratch records at the positions its drafts will take (DSpark). The
 * blocks past what the next schedule gives the sequence are returned by
 * that schedule (or the postprocess after it). */
di_status di_scheduler_reserve(di_scheduler *s, di_seq *seq, int32_t n_tokens, int32_t *n_covered,
                               di_error *err);
#define DI_SCHED_MAX_DRAFTS 16
di_status di_scheduler_set_drafts(di_scheduler *s, di_seq *seq, const int32_t *drafts, int32_t n,
                                  int32_t *n_set, di_error *err);

/* Postprocess of a verify: appends tokens[0..n) (1 <= n <= 1 + the drafts
 * that had rows; the first n-1 are the accepted drafts, tokens[n-1] the
 * token of the first row not accepted, or the bonus). The rows after them
 * are forgotten: the sequence's computed length drops to its new n_tokens
 * - 1 and blocks past its tokens are returned. tokens may point into
 * seq->tokens. Otherwise as di_scheduler_postprocess (which is n = 1). */
di_status di_scheduler_postprocess_n(di_scheduler *s, di_seq *seq, const int32_t *tokens, int32_t n,
                                     di_finish_reason finish, di_finish_reason *final_out, di_error *err);

/* Undoes the last schedule() when its forward failed: the batch's tokens
 * count as not computed again and its pending samples are dropped, so the
 * next schedule() plans them again. Blocks already given stay with their
 * sequences; preemptions of that step stand (they lost nothing). Call before
 * any postprocess of that step. */
void di_scheduler_abort_step(di_scheduler *s);

/* Finishes a WAITING or RUNNING sequence with DI_FINISH_CANCEL and drops its
 * blocks at once (nothing is cached: its last batch may not have run). A
 * pending sample of it is dropped too. No-op on a FINISHED sequence. */
di_status di_scheduler_cancel(di_scheduler *s, di_seq *seq, di_error *err);

/* Frees a FINISHED sequence; DI_ERR_INVALID_ARG (and nothing freed) otherwise. */
di_status di_scheduler_release(di_scheduler *s, di_seq *seq, di_error *err);

/* Offers every cached block to the tier's spill (at shutdown, so the RAM
 * cache outlives the process). No-op without a tier. */
void di_scheduler_flush_tier(di_scheduler *s);

/* Prefill -> decode transfer. match_cached: the cached blocks holding the
 * longest prefix of tokens in whole blocks (ids to blocks_out, at most max;
 * no reference taken: read them before the next schedule). import_block:
 * caches the block that ends prefix (n_prefix tokens, whole blocks) when
 * the blocks before it are cached: takes a block (evicting if needed),
 * fill(user, block) writes its KV, and it joins the cache unreferenced.
 * *present says it was cached already (nothing done). DI_ERR_NOT_FOUND when
 * the parent blocks are not cached (records out of order), DI_ERR_FULL when
 * no block can be had, DI_ERR_FORMAT when fill fails. */
int32_t di_scheduler_match_cached(di_scheduler *s, const int32_t *tokens, int32_t n_tokens, int32_t *blocks_out,
                                  int32_t max_blocks);
di_status di_scheduler_import_block(di_scheduler *s, const int32_t *prefix, int32_t n_prefix,
                                    bool (*fill)(void *user, int32_t block), void *user, bool *present,
                                    di_error *err);

/* No WAITING or RUNNING sequence. */
bool di_scheduler_is_idle(const di_scheduler *s);

/* Checks every block's reference count against the block tables of RUNNING
 * sequences and the prefix cache (see di_prefix_cache_check_integrity), and
 * each sequence's own invariants. When idle this proves every block is free
 * or cached. Meant for tests and debug builds; O(blocks + sequences). */
di_status di_scheduler_check_integrity(const di_scheduler *s, di_error *err);

void di_scheduler_get_stats(const di_scheduler *s, di_scheduler_stats *out);

/* Feeds the cost model the measured time of the step last planned (rows as
 * in its di_sched_output); the engine calls it after every step. */
void di_scheduler_observe_step(di_scheduler *s, int32_t n_decode, int32_t n_prefill, double ms);

#endif
