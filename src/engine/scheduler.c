/* Continuous-batching scheduler; the contract is in scheduler.h.
 *
 * Every sequence is "tokens[0..n_tokens) of which the first n_computed have
 * KV". A step gives a sequence the next min(n_tokens - n_computed, budget)
 * tokens; decode is simply the case where one token is left. When a chunk
 * reaches the last token its row is sampled, postprocess appends the sampled
 * token, and the sequence has one token left again. Preemption throws the KV
 * away (n_computed = 0) and keeps the tokens, so the sequence is recomputed
 * like a longer prompt: the same function of the same tokens, hence the same
 * output.
 *
 * All memory a step needs is sized at create/add time, so schedule,
 * postprocess and cancel never allocate. */
#include "engine/scheduler.h"

#include "base/alloc.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The cost model's starting point, before any step was measured: a small
 * model on a few cores. A handful of real steps outweigh it. */
#define PRIOR_FIXED_MS 5.0
#define PRIOR_DECODE_MS 1.0
#define PRIOR_PREFILL_MS 0.5

struct di_scheduler {
    di_scheduler_config cfg;
    di_block_pool *pool;
    di_prefix_cache *cache;

    di_seq **waiting;          /* (cap_waiting) front = next to admit */
    int32_t n_waiting, cap_waiting;
    di_seq **running;          /* (max_running) in admission order */
    int32_t n_running;
    di_seq **snapshot;         /* (max_running) running at the start of a step */
    di_seq **slot_owner;       /* (max_running) RUNNING seq per batch slot, or NULL */
    di_seq *all;               /* every unreleased seq, for di_scheduler_free */
    int64_t next_id, next_admit;

    /* The batch being built; capacity max_tokens_per_step rows. */
    int32_t n_rows;
    int32_t *row_token, *row_seq, *row_pos; /* (max_tokens_per_step) */
    uint8_t *row_logits;                    /* (max_tokens_per_step) */
    const int32_t **tables;                 /* (max_running) per slot */
    int32_t *table_n;                       /* (max_running) per slot */
    int32_t *replay_from;                   /* (max_running) per slot, bounded replay only */
    int32_t n_samples;
    int32_t *sample_rows;                   /* (max_running) */
    int32_t *sample_n_rows;                 /* (max_running) */
    di_seq **sample_seqs;                   /* (max_running) */
    int32_t step_decode, step_prefill, step_preempted;
    bool step_deferred;                     /* a latency control held work back */
    di_step_cost cost;                      /* for tpot_target_ms */

    int32_t *seq_refs;   /* (n_blocks) scratch for check_integrity */
    int64_t *ref_stamp;  /* (n_blocks) scratch: last seq id that referenced a block */
    di_scheduler_stats stats;
};

static int32_t blocks_for(int32_t n_tokens, int32_t block_size) {
    return (int32_t)(((int64_t)n_tokens + block_size - 1) / block_size);
}

/* KV positions a sequence can ever write: the last generated token is never
 * fed back, so prompt + max_tokens - 1. */
static int64_t max_kv_tokens(int64_t n_prompt, int64_t max_tokens) {
    return n_prompt + max_tokens - 1;
}

di_status di_scheduler_create(const di_scheduler_config *cfg, di_scheduler **out, di_error *err) {
    *out = NULL;
    if (cfg->n_blocks < 1 || cfg->block_size < 1 || cfg->max_tokens_per_step < 1 ||
        cfg->max_running < 1 || cfg->max_context < 1)
        return di_error_set(err, DI_ERR_INVALID_ARG,
                            "scheduler: n_blocks %d, block_size %d, max_tokens_per_step %d, "
                            "max_running %d, max_context %d must all be >= 1",
                            (int)cfg->n_blocks, (int)cfg->block_size,
                            (int)cfg->max_tokens_per_step, (int)cfg->max_running,
                            (int)cfg->max_context);
    if (cfg->max_prefill_tokens < 0 || !isfinite(cfg->tpot_target_ms) || cfg->tpot_target_ms < 0)
        return di_error_set(err, DI_ERR_INVALID_ARG,
                            "scheduler: max_prefill_tokens %d and tpot_target_ms %g must be >= 0",
                            (int)cfg->max_prefill_tokens, cfg->tpot_target_ms);
    di_scheduler *s = di_calloc(1, sizeof *s);
    if (!s) return di_error_set(err, DI_ERR_NOMEM, "scheduler: out of memory");
    s->cfg = *cfg;
    di_status st = di_block_pool_create(cfg->n_blocks, cfg->block_size, &s->pool, err);
    if (!st) st = di_prefix_cache_create(s->pool, &s->cache, err);
    if (st) {
        di_scheduler_free(s);
        return st;
    }
    if (cfg->tier.spill) di_prefix_cache_set_evict_hook(s->cache, cfg->tier.spill, cfg->tier.user);
    size_t rows = (size_t)cfg->max_tokens_per_step, slots = (size_t)cfg->max_running;
    s->running = di_calloc(slots, sizeof *s->running);
    s->snapshot = di_calloc(slots, sizeof *s->snapshot);
    s->slot_owner = di_calloc(slots, sizeof *s->slot_owner);
    s->row_token = di_calloc(rows, sizeof *s->row_token);
    s->row_seq = di_calloc(rows, sizeof *s->row_seq);
    s->row_pos = di_calloc(rows, sizeof *s->row_pos);
    s->row_logits = di_calloc(rows, sizeof *s->row_logits);
    s->tables = di_calloc(slots, sizeof *s->tables);
    s->table_n = di_calloc(slots, sizeof *s->table_n);
    s->replay_from = di_calloc(slots, sizeof *s->replay_from);
    s->sample_rows = di_calloc(slots, sizeof *s->sample_rows);
    s->sample_n_rows = di_calloc(slots, sizeof *s->sample_n_rows);
    s->sample_seqs = di_calloc(slots, sizeof *s->sample_seqs);
    s->seq_refs = di_calloc((size_t)cfg->n_blocks, sizeof *s->seq_refs);
    s->ref_stamp = di_calloc((size_t)cfg->n_blocks, sizeof *s->ref_stamp);
    if (!s->running || !s->snapshot || !s->slot_owner || !s->row_token || !s->row_seq ||
        !s->row_pos || !s->row_logits || !s->tables || !s->table_n || !s->replay_from || !s->sample_rows ||
        !s->sample_n_rows || !s->sample_seqs || !s->seq_refs || !s->ref_stamp) {
        di_scheduler_free(s);
        return di_error_set(err, DI_ERR_NOMEM, "scheduler: out of memory");
    }
    s->next_id = 1;
    di_step_cost_init(&s->cost, PRIOR_FIXED_MS, PRIOR_DECODE_MS, PRIOR_PREFILL_MS);
    *out = s;
    return DI_OK;
}

static void seq_destroy(di_seq *seq) {
    free(seq->tokens);
    free(seq->key);
    free(seq->block_table);
    free(seq);
}

void di_scheduler_free(di_scheduler *s) {
    if (!s) return;
    /* Sequences first: their block references are dropped by freeing the
     * pool wholesale, no need to unlock one by one. */
    for (di_seq *q = s->all, *next; q; q = next) {
        next = q->all_next;
        seq_destroy(q);
    }
    di_prefix_cache_free(s->cache);
    di_block_pool_free(s->pool);
    free(s->waiting);
    free(s->running);
    free(s->snapshot);
    free(s->slot_owner);
    free(s->row_token);
    free(s->row_seq);
    free(s->row_pos);
    free(s->row_logits);
    free(s->tables);
    free(s->table_n);
    free(s->replay_from);
    free(s->sample_rows);
    free(s->sample_n_rows);
    free(s->sample_seqs);
    free(s->seq_refs);
    free(s->ref_stamp);
    free(s);
}

/* ---- queues ------------------------------------------------------------ */

static void waiting_remove_at(di_scheduler *s, int32_t i) {
    memmove(s->waiting + i, s->waiting + i + 1, (size_t)(s->n_waiting - i - 1) * sizeof *s->waiting);
    s->n_waiting--;
}

/* cap_waiting >= live sequences always (ensured in add), so a preempted
 * sequence can go back to the front without allocating. */
static void waiting_push_front(di_scheduler *s, di_seq *seq) {
    memmove(s->waiting + 1, s->waiting, (size_t)s->n_waiting * sizeof *s->waiting);
    s->waiting[0] = seq;
    s->n_waiting++;
}

static void running_remove(di_scheduler *s, di_seq *seq) {
    for (int32_t i = 0; i < s->n_running; i++) {
        if (s->running[i] != seq) continue;
        memmove(s->running + i, s->running + i + 1,
                (size_t)(s->n_running - i - 1) * sizeof *s->running);
        s->n_running--;
        return;
    }
}

static void trim_blocks(di_scheduler *s, di_seq *seq);

static int32_t free_slot(const di_scheduler *s) {
    for (int32_t i = 0; i < s->cfg.max_running; i++)
        if (!s->slot_owner[i]) return i;
    return -1;
}

/* ---- blocks ------------------------------------------------------------ */

static int32_t blocks_available(const di_scheduler *s) {
    return di_block_pool_n_free(s->pool) + di_prefix_cache_n_evictable(s->cache);
}

/* Grows seq's block table to cover its first n_tokens tokens, evicting
 * unreferenced cached blocks when the free list is short. The caller checked
 * blocks_available, so this only fails on a broken invariant. */
static di_status grow_blocks(di_scheduler *s, di_seq *seq, int32_t n_tokens, di_error *err) {
    int32_t need = blocks_for(n_tokens, s->cfg.block_size) - seq->n_blocks;
    if (need <= 0) return DI_OK;
    if (seq->n_blocks + need > seq->n_blocks_cap)
        return di_error_set(err, DI_ERR_INTERNAL, "scheduler: seq %lld needs %d blocks, cap %d",
                            (long long)seq->id, (int)(seq->n_blocks + need),
                            (int)seq->n_blocks_cap);
    int32_t short_by = need - di_block_pool_n_free(s->pool);
    if (short_by > 0) di_prefix_cache_evict(s->cache, short_by);
    di_status st = di_block_pool_alloc(s->pool, need, seq->block_table + seq->n_blocks, err);
    if (st) {
        di_error_prefix(err, "scheduler: seq %lld: ", (long long)seq->id);
        return st;
    }
    seq->n_blocks += need;
    return DI_OK;
}

/* Offers the sequence's computed full blocks to the prefix cache. Only
 * called when the KV of its first n_computed tokens has been written. */
static di_status offer_to_cache(di_scheduler *s, di_seq *seq, di_error *err) {
    if (!s->cfg.prefix_cache) return DI_OK;
    int32_t n_full = seq->n_computed / s->cfg.block_size;
    if (n_full <= seq->n_blocks_offered) return DI_OK;
    di_status st = di_prefix_cache_insert(s->cache, seq->key ? seq->key : seq->tokens, seq->n_computed,
                                          seq->block_table, seq->n_blocks, NULL, err);
    if (st) return st;
    seq->n_blocks_offered = n_full;
    return DI_OK;
}

static di_status drop_blocks(di_scheduler *s, di_seq *seq, di_error *err) {
    di_status st = di_prefix_cache_unlock(s->cache, seq->block_table, seq->n_blocks, err);
    seq->n_blocks = 0;
    seq->n_blocks_offered = 0;
    return st;
}

/* Takes seq out of RUNNING: cache (when its KV is known written), drop
 * blocks, free the slot. */
static di_status leave_running(di_scheduler *s, di_seq *seq, bool cache_blocks, di_error *err) {
    di_status st = cache_blocks ? offer_to_cache(s, seq, err) : DI_OK;
    di_status st2 = drop_blocks(s, seq, st ? NULL : err);
    running_remove(s, seq);
    if (seq->slot >= 0 && seq->slot < s->cfg.max_running) s->slot_owner[seq->slot] = NULL;
    seq->slot = -1;
    seq->awaiting_sample = false;
    seq->n_computed = 0;
    return st ? st : st2;
}

/* Preemption by recompute: the victim keeps its tokens (prompt + generated)
 * and goes to the front of WAITING; its KV is dropped, after its full blocks
 * were offered to the cache so the recompute is often a cache hit. */
static di_status preempt(di_scheduler *s, di_seq *victim, di_error *err) {
    di_status st = leave_running(s, victim, true, err);
    victim->status = DI_SEQ_WAITING;
    victim->n_cached_prefix = 0;
    victim->n_preemptions++;
    waiting_push_front(s, victim);
    s->step_preempted++;
    s->stats.n_preemptions++;
    return st;
}

/* The newest RUNNING sequence admitted after `asker` that has no rows in
 * this step, or NULL. Older sequences are never preempted for newer ones:
 * that is what guarantees the oldest always makes progress. */
static di_seq *pick_victim(const di_scheduler *s, const di_seq *asker) {
    for (int32_t i = s->n_running - 1; i >= 0; i--) {
        di_seq *q = s->running[i];
        if (q->admit_order <= asker->admit_order) break;
        if (!q->in_step) return q;
    }
    return NULL;
}

/* ---- the batch --------------------------------------------------------- */

/* Appends rows for tokens [n_computed, n_computed + k) of seq, which must
 * have its blocks; marks a sample when the chunk reaches the last token.
 * Rows past the last token are drafts (tokens[n_tokens..]): they all want
 * logits and belong to the same sample. */
static void emit_rows(di_scheduler *s, di_seq *seq, int32_t k, bool decode) {
    seq->n_computed_before_step = seq->n_computed;
    seq->n_draft_rows = 0;
    for (int32_t j = 0; j < k; j++) {
        int32_t pos = seq->n_computed + j, r = s->n_rows++;
        s->row_token[r] = seq->tokens[pos];
        s->row_seq[r] = seq->slot;
        s->row_pos[r] = pos;
        bool sampled = pos == seq->n_tokens - 1;
        s->row_logits[r] = pos >= seq->n_tokens - 1 || (seq->prompt_logits && pos < seq->n_prompt);
        if (sampled) {
            s->sample_rows[s->n_samples] = r;
            s->sample_n_rows[s->n_samples] = seq->n_computed + k - pos;
            s->sample_seqs[s->n_samples] = seq;
            s->n_samples++;
            seq->awaiting_sample = true;
            seq->n_draft_rows = seq->n_computed + k - pos - 1;
        }
    }
    seq->n_computed += k;
    seq->in_step = true;
    if (decode) s->step_decode += k; else s->step_prefill += k;
}

static int32_t budget_left(const di_scheduler *s) {
    return s->cfg.max_tokens_per_step - s->n_rows;
}

/* Prefill rows this step may still take: the token budget, the prefill cap,
 * and in SLO mode the rows the cost model says fit in the target after what
 * is already planned. The first prefill chunk of a step may take
 * DI_SCHED_MIN_PREFILL_ROWS whatever the prediction, so prompts always
 * advance (the latency target bends, queued work never starves). */
static int32_t prefill_room(const di_scheduler *s) {
    int32_t room = budget_left(s);
    if (s->cfg.max_prefill_tokens > 0 && s->cfg.max_prefill_tokens - s->step_prefill < room)
        room = s->cfg.max_prefill_tokens - s->step_prefill;
    if (s->cfg.tpot_target_ms > 0) {
        double left = s->cfg.tpot_target_ms -
                      di_step_cost_predict(&s->cost, s->step_decode, s->step_prefill);
        double per_row = s->cost.coef[2];
        double fit = per_row > 0 ? floor(left / per_row) : (double)room;
        if (s->step_prefill == 0 && fit < DI_SCHED_MIN_PREFILL_ROWS) fit = DI_SCHED_MIN_PREFILL_ROWS;
        if (fit < room) room = fit < 0 ? 0 : (int32_t)fit;
    }
    return room > 0 ? room : 0;
}

/* SLO mode: may one more sequence run? Only while a decode step of every
 * RUNNING sequence plus the new one is predicted to fit the target; an
 * idle scheduler always admits. */
static bool slo_admits_another(const di_scheduler *s) {
    if (s->cfg.tpot_target_ms <= 0 || s->n_running == 0) return true;
    return di_step_cost_predict(&s->cost, s->n_running + 1, 0) <= s->cfg.tpot_target_ms;
}

/* Schedules up to `want` more tokens of a RUNNING sequence. A short pool
 * first shrinks the chunk (prefill), then preempts newer sequences, and
 * finally preempts seq itself. */
static di_status schedule_running(di_scheduler *s, di_seq *seq, int32_t want, bool decode,
                                  di_error *err) {
    int32_t bs = s->cfg.block_size;
    for (;;) {
        int32_t k = want < budget_left(s) ? want : budget_left(s);
        if (k <= 0) return DI_OK;
        int64_t cover = ((int64_t)seq->n_blocks + blocks_available(s)) * bs - seq->n_computed;
        if (cover < k) k = (int32_t)cover;
        if (k >= 1) {
            di_status st = grow_blocks(s, seq, seq->n_computed + k, err);
            if (st) return st;
            emit_rows(s, seq, k, decode);
            return DI_OK;
        }
        di_seq *victim = pick_victim(s, seq);
        di_status st = preempt(s, victim ? victim : seq, err);
        if (st || !victim) return st;
    }
}

/* Bounded replay: the first position seq's decoder layers run on, fixed by
 * its prompt so that chunks and recompute see the same rows. */
static int32_t replay_from(const di_scheduler *s, const di_seq *seq) {
    int32_t keep = s->cfg.replay_keep;
    return keep && seq->n_prompt > keep ? seq->n_prompt - keep : 0;
}

/* Tokens a prefix hit may cover: all but the last (its logits are sampled);
 * with bounded replay no further than replay_from, since the cached blocks
 * past it hold decoder records computed under another sequence's
 * replay_from (or none): recomputing from there gives the same bits as no
 * hit at all. */
static int32_t match_limit(const di_scheduler *s, const di_seq *seq) {
    int32_t lim = seq->n_tokens - 1;
    if (s->cfg.replay_keep) {
        int32_t from = replay_from(s, seq);
        lim = from < lim ? from : lim;
    }
    return lim;
}

/* Asks the tier for the full blocks of seq's prompt after the first m
 * (which it holds), one block at a time, each into a block taken from the
 * pool (evicting an unreferenced cached one when none is free), and stops
 * at the first the tier does not have or when no block is left. The prompt's
 * last token is always computed, as for a RAM match. Returns how many
 * blocks seq->block_table[m..] now holds, each with seq's reference. */
static int32_t fetch_from_tier(di_scheduler *s, di_seq *seq, int32_t m) {
    int32_t bs = s->cfg.block_size, j = m;
    while ((int64_t)(j + 1) * bs <= match_limit(s, seq) && j < seq->n_blocks_cap && blocks_available(s) > 0) {
        if (di_block_pool_n_free(s->pool) == 0) di_prefix_cache_evict(s->cache, 1);
        int32_t b;
        if (di_block_pool_alloc(s->pool, 1, &b, NULL)) break;
        if (!s->cfg.tier.fetch(s->cfg.tier.user, b, seq->tokens, (j + 1) * bs)) {
            (void)di_block_pool_decref(s->pool, b, NULL, NULL);
            break;
        }
        seq->block_table[j++] = b;
    }
    return j - m;
}

/* Admits the front WAITING sequence when a slot is free and the blocks of
 * its first chunk are available; *admitted says whether it was. The prefix
 * match stops one token short of the end so that the last token is always
 * computed (its logits are what gets sampled) and no shared block is ever
 * written. */
static di_status admit(di_scheduler *s, di_seq *seq, bool *admitted, di_error *err) {
    int32_t bs = s->cfg.block_size;
    *admitted = false;
    int32_t slot = free_slot(s);
    if (slot < 0) return DI_OK;
    int32_t m = 0;
    if (s->cfg.prefix_cache && !seq->prompt_logits) {
        m = di_prefix_cache_match(s->cache, seq->key ? seq->key : seq->tokens, match_limit(s, seq), seq->block_table,
                                  seq->n_blocks_cap);
        /* Lock before anything can evict: the matched blocks may be on the
         * LRU list right now. */
        di_status st = di_prefix_cache_lock(s->cache, seq->block_table, m, err);
        if (st) return st;
    }
    if (s->cfg.prefix_cache && !seq->prompt_logits && s->cfg.tier.fetch) {
        int32_t got = fetch_from_tier(s, seq, m);
        /* The fetched blocks join the cache like computed ones, so the next
         * prompt with this prefix finds them in RAM. */
        seq->n_blocks = m + got;
        di_status st = got ? di_prefix_cache_insert(s->cache, seq->tokens, (m + got) * bs, seq->block_table,
                                                    m + got, NULL, err)
                           : DI_OK;
        seq->n_blocks = 0;
        if (st) {
            (void)di_prefix_cache_unlock(s->cache, seq->block_table, m + got, NULL);
            return st;
        }
        m += got;
        s->stats.n_tier_hit_tokens += (int64_t)got * bs;
    }
    int32_t c = m * bs;
    int32_t room = prefill_room(s);
    int32_t k = seq->n_tokens - c < room ? seq->n_tokens - c : room;
    int32_t need = blocks_for(c + k, bs) - m;
    if (need > blocks_available(s)) {
        return di_prefix_cache_unlock(s->cache, seq->block_table, m, err);
    }
    seq->n_blocks = m;
    seq->n_blocks_offered = m;
    seq->n_computed = c;
    seq->n_cached_prefix = c;
    di_status st = grow_blocks(s, seq, c + k, err);
    if (st) {
        (void)drop_blocks(s, seq, NULL);
        seq->n_computed = 0;
        return st;
    }
    seq->status = DI_SEQ_RUNNING;
    seq->slot = slot;
    seq->admit_order = s->next_admit++;
    s->slot_owner[slot] = seq;
    s->running[s->n_running++] = seq;
    s->stats.n_prefix_hit_tokens += c;
    emit_rows(s, seq, k, false);
    *admitted = true;
    return DI_OK;
}

int32_t di_scheduler_match_cached(di_scheduler *s, const int32_t *tokens, int32_t n_tokens, int32_t *blocks_out,
                                  int32_t max_blocks) {
    if (!s->cfg.prefix_cache) return 0;
    return di_prefix_cache_match(s->cache, tokens, n_tokens, blocks_out, max_blocks);
}

di_status di_scheduler_import_block(di_scheduler *s, const int32_t *prefix, int32_t n_prefix,
                                    bool (*fill)(void *user, int32_t block), void *user, bool *present,
                                    di_error *err) {
    int32_t bs = s->cfg.block_size;
    *present = false;
    if (!s->cfg.prefix_cache)
        return di_error_set(err, DI_ERR_UNSUPPORTED, "kv import: the prefix cache is off");
    if (n_prefix < bs || n_prefix % bs != 0)
        return di_error_set(err, DI_ERR_FORMAT, "kv import: prefix of %d tokens is not whole blocks of %d",
                            (int)n_prefix, (int)bs);
    int32_t want = n_prefix / bs;
    if (want > s->cfg.n_blocks)
        return di_error_set(err, DI_ERR_FULL, "kv import: prefix of %d blocks exceeds the pool", (int)want);
    /* seq_refs doubles as the block list: it has n_blocks entries and is
     * only scratch for check_integrity. */
    int32_t *blocks = s->seq_refs;
    int32_t m = di_prefix_cache_match(s->cache, prefix, n_prefix, blocks, want);
    if (m == want) {
        *present = true;
        return DI_OK;
    }
    if (m < want - 1)
        return di_error_set(err, DI_ERR_NOT_FOUND,
                            "kv import: block %d of the prefix arrived before block %d", (int)want, (int)(m + 1));
    di_status st = di_prefix_cache_lock(s->cache, blocks, m, err);
    if (st) return st;
    if (blocks_available(s) < 1) {
        (void)di_prefix_cache_unlock(s->cache, blocks, m, NULL);
        return di_error_set(err, DI_ERR_FULL, "kv import: every KV block is in use");
    }
    if (di_block_pool_n_free(s->pool) == 0) di_prefix_cache_evict(s->cache, 1);
    st = di_block_pool_alloc(s->pool, 1, &blocks[m], err);
    if (st) {
        (void)di_prefix_cache_unlock(s->cache, blocks, m, NULL);
        return st;
    }
    if (!fill(user, blocks[m])) {
        (void)di_prefix_cache_unlock(s->cache, blocks, m + 1, NULL);
        return di_error_set(err, DI_ERR_FORMAT, "kv import: the block's KV could not be written");
    }
    st = di_prefix_cache_insert(s->cache, prefix, n_prefix, blocks, m + 1, NULL, err);
    di_status st2 = di_prefix_cache_unlock(s->cache, blocks, m + 1, st ? NULL : err);
    return st ? st : st2;
}

void di_scheduler_flush_tier(di_scheduler *s) {
    if (s->cfg.tier.spill) di_prefix_cache_for_each(s->cache, s->cfg.tier.spill, s->cfg.tier.user);
}

di_status di_scheduler_schedule(di_scheduler *s, di_sched_output *out, di_error *err) {
    memset(out, 0, sizeof *out);
    for (int32_t i = 0; i < s->n_running; i++)
        if (s->running[i]->awaiting_sample)
            return di_error_set(err, DI_ERR_INVALID_ARG,
                                "scheduler: seq %lld was sampled last step but not postprocessed",
                                (long long)s->running[i]->id);
    s->n_rows = 0;
    s->n_samples = 0;
    s->step_decode = s->step_prefill = s->step_preempted = 0;
    s->step_deferred = false;
    di_status st = DI_OK;

    /* The previous batch has run: its completed blocks become reusable. */
    for (int32_t i = 0; i < s->n_running && !st; i++) {
        s->running[i]->in_step = false;
        st = offer_to_cache(s, s->running[i], err);
    }
    int32_t n_snap = s->n_running;
    memcpy(s->snapshot, s->running, (size_t)n_snap * sizeof *s->snapshot);

    /* Decode first: one token each, oldest first. */
    for (int32_t i = 0; i < n_snap && !st; i++) {
        di_seq *q = s->snapshot[i];
        if (q->status == DI_SEQ_RUNNING && !q->in_step && q->n_tokens - q->n_computed == 1)
            st = schedule_running(s, q, 1 + q->n_drafts, true, err);
    }
    /* Drafts (and blocks reserved for them) are for this schedule only. */
    for (int32_t i = 0; i < n_snap; i++) {
        s->snapshot[i]->n_drafts = 0;
        if (s->snapshot[i]->status == DI_SEQ_RUNNING && !s->snapshot[i]->in_step) trim_blocks(s, s->snapshot[i]);
    }
    /* Then running prefills (chunked), with what budget is left. */
    for (int32_t i = 0; i < n_snap && !st; i++) {
        di_seq *q = s->snapshot[i];
        if (q->status != DI_SEQ_RUNNING || q->in_step || q->n_tokens - q->n_computed <= 1) continue;
        int32_t want = q->n_tokens - q->n_computed, room = prefill_room(s);
        if (room < want && room < budget_left(s)) s->step_deferred = true;
        if (room > 0) st = schedule_running(s, q, want < room ? want : room, false, err);
    }
    /* Then admissions, unless this step already had to preempt: admitting
     * now would only take the blocks that preemption just freed. */
    while (!st && s->step_preempted == 0 && s->n_waiting > 0 && budget_left(s) > 0 &&
           s->n_running < s->cfg.max_running) {
        if (!slo_admits_another(s) || prefill_room(s) == 0) {
            s->step_deferred = true;
            break;
        }
        bool admitted = false;
        di_seq *q = s->waiting[0];
        st = admit(s, q, &admitted, err);
        if (!admitted) break;
        waiting_remove_at(s, 0);
    }
    if (st) return st;
    if (s->step_deferred) s->stats.n_deferred_steps++;
    s->stats.predicted_step_ms = di_step_cost_predict(&s->cost, s->step_decode, s->step_prefill);

    for (int32_t i = 0; i < s->cfg.max_running; i++) {
        di_seq *q = s->slot_owner[i];
        s->tables[i] = q ? q->block_table : NULL;
        s->table_n[i] = q ? q->n_blocks : 0;
        s->replay_from[i] = q ? replay_from(s, q) : 0;
    }
    out->batch.n_rows = s->n_rows;
    out->batch.token = s->row_token;
    out->batch.seq = s->row_seq;
    out->batch.pos = s->row_pos;
    out->batch.want_logits = s->row_logits;
    out->batch.n_seq_slots = s->cfg.max_running;
    out->batch.block_size = s->cfg.block_size;
    out->batch.block_tables = s->tables;
    out->batch.n_blocks = s->table_n;
    out->batch.replay_from = s->cfg.replay_keep ? s->replay_from : NULL;
    out->n_samples = s->n_samples;
    out->sample_rows = s->sample_rows;
    out->sample_n_rows = s->sample_n_rows;
    out->sample_seqs = s->sample_seqs;
    out->n_decode_tokens = s->step_decode;
    out->n_prefill_tokens = s->step_prefill;
    out->n_preempted = s->step_preempted;
    s->stats.n_steps++;
    s->stats.n_computed_tokens += s->n_rows;
    return DI_OK;
}

/* Returns the blocks of seq past those its tokens need (draft rows that
 * were rejected or never ran). They were never offered to the cache: only
 * blocks full of computed tokens are, and these lie past n_computed. */
static void trim_blocks(di_scheduler *s, di_seq *seq) {
    int32_t keep = blocks_for(seq->n_tokens, s->cfg.block_size);
    if (seq->n_blocks <= keep) return;
    (void)di_prefix_cache_unlock(s->cache, seq->block_table + keep, seq->n_blocks - keep, NULL);
    seq->n_blocks = keep;
}

void di_scheduler_abort_step(di_scheduler *s) {
    for (int32_t i = 0; i < s->n_running; i++) {
        di_seq *q = s->running[i];
        if (!q->in_step) continue;
        q->n_computed = q->n_computed_before_step;
        q->awaiting_sample = false;
        q->in_step = false;
        q->n_draft_rows = 0;
        trim_blocks(s, q);
    }
    s->n_rows = 0;
    s->n_samples = 0;
}

/* ---- per-sequence calls ------------------------------------------------ */

di_status di_scheduler_add(di_scheduler *s, const int32_t *prompt, int32_t n_prompt,
                           int32_t max_tokens, void *user, di_seq **out, di_error *err) {
    *out = NULL;
    if (n_prompt < 1 || !prompt)
        return di_error_set(err, DI_ERR_INVALID_ARG, "scheduler: empty prompt");
    if (max_tokens < 1)
        return di_error_set(err, DI_ERR_INVALID_ARG, "scheduler: max_tokens %d must be >= 1",
                            (int)max_tokens);
    for (int32_t i = 0; i < n_prompt; i++)
        if (prompt[i] < 0)
            return di_error_set(err, DI_ERR_INVALID_ARG, "scheduler: prompt token %d is %d",
                                (int)i, (int)prompt[i]);
    int64_t total = (int64_t)n_prompt + max_tokens;
    if (total > s->cfg.max_context)
        return di_error_set(err, DI_ERR_RANGE,
                            "request needs %lld tokens (prompt %d + max_tokens %d), "
                            "the context holds %d",
                            (long long)total, (int)n_prompt, (int)max_tokens,
                            (int)s->cfg.max_context);
    int64_t kv = max_kv_tokens(n_prompt, max_tokens);
    int64_t need = (kv + s->cfg.block_size - 1) / s->cfg.block_size;
    if (need > s->cfg.n_blocks)
        return di_error_set(err, DI_ERR_FULL,
                            "request needs %lld KV blocks (prompt %d + max_tokens %d at %d "
                            "tokens a block), the whole cache has %d",
                            (long long)need, (int)n_prompt, (int)max_tokens,
                            (int)s->cfg.block_size, (int)s->cfg.n_blocks);
    /* Keep room for every live sequence in WAITING (see waiting_push_front). */
    int32_t live = s->n_waiting + s->n_running + 1;
    if (live > s->cap_waiting) {
        int32_t cap = s->cap_waiting ? s->cap_waiting * 2 : 16;
        if (cap < live) cap = live;
        di_seq **w = di_realloc_array(s->waiting, (size_t)cap, sizeof *w);
        if (!w) return di_error_set(err, DI_ERR_NOMEM, "scheduler: out of memory");
        s->waiting = w;
        s->cap_waiting = cap;
    }
    di_seq *q = di_calloc(1, sizeof *q);
    if (q) {
        q->tokens = di_malloc_array((size_t)total, sizeof *q->tokens);
        q->block_table = di_malloc_array((size_t)need, sizeof *q->block_table);
    }
    if (!q || !q->tokens || !q->block_table) {
        if (q) seq_destroy(q);
        return di_error_set(err, DI_ERR_NOMEM, "scheduler: out of memory for a %lld-token request",
                            (long long)total);
    }
    memcpy(q->tokens, prompt, (size_t)n_prompt * sizeof *prompt);
    q->id = s->next_id++;
    q->user = user;
    q->status = DI_SEQ_WAITING;
    q->n_prompt = n_prompt;
    q->max_tokens = max_tokens;
    q->n_tokens = n_prompt;
    q->n_blocks_cap = (int32_t)need;
    q->slot = -1;
    q->all_next = s->all;
    if (s->all) s->all->all_prev = q;
    s->all = q;
    s->waiting[s->n_waiting++] = q;
    *out = q;
    return DI_OK;
}

di_status di_scheduler_want_prompt_logits(di_scheduler *s, di_seq *seq, di_error *err) {
    (void)s;
    if (!seq || seq->status != DI_SEQ_WAITING || seq->n_preemptions != 0)
        return di_error_set(err, DI_ERR_INVALID_ARG,
                            "scheduler: prompt logits asked for seq %lld after it was admitted",
                            seq ? (long long)seq->id : -1LL);
    seq->prompt_logits = true;
    return DI_OK;
}

di_status di_scheduler_set_prefix_key(di_scheduler *s, di_seq *seq, const int32_t *key, di_error *err) {
    (void)s;
    if (!seq || !key || seq->status != DI_SEQ_WAITING || seq->n_preemptions != 0 || seq->key)
        return di_error_set(err, DI_ERR_INVALID_ARG, "scheduler: prefix key set after admission");
    seq->key = di_malloc_array((size_t)seq->n_prompt + (size_t)seq->max_tokens, sizeof(int32_t));
    if (!seq->key) return di_error_set(err, DI_ERR_NOMEM, "scheduler: out of memory");
    memcpy(seq->key, key, (size_t)seq->n_prompt * sizeof(int32_t));
    return DI_OK;
}

static di_status finish_seq(di_scheduler *s, di_seq *seq, di_finish_reason why,
                            bool cache_blocks, di_error *err) {
    di_status st = DI_OK;
    if (seq->status == DI_SEQ_RUNNING) {
        st = leave_running(s, seq, cache_blocks, err);
    } else if (seq->status == DI_SEQ_WAITING) {
        for (int32_t i = 0; i < s->n_waiting; i++)
            if (s->waiting[i] == seq) {
                waiting_remove_at(s, i);
                break;
            }
    }
    seq->status = DI_SEQ_FINISHED;
    seq->finish = why;
    return st;
}

di_status di_scheduler_set_drafts(di_scheduler *s, di_seq *seq, const int32_t *drafts, int32_t n,
                                  int32_t *n_set, di_error *err) {
    (void)s;
    if (n_set) *n_set = 0;
    if (!seq || seq->status != DI_SEQ_RUNNING || seq->awaiting_sample || seq->n_tokens - seq->n_computed != 1)
        return di_error_set(err, DI_ERR_INVALID_ARG, "scheduler: drafts for seq %lld, which is not decoding",
                            seq ? (long long)seq->id : -1LL);
    if (n < 0 || (n > 0 && !drafts))
        return di_error_set(err, DI_ERR_INVALID_ARG, "scheduler: %d drafts", (int)n);
    int32_t room = seq->max_tokens - (seq->n_tokens - seq->n_prompt) - 1;
    if (n > room) n = room;
    if (n > DI_SCHED_MAX_DRAFTS) n = DI_SCHED_MAX_DRAFTS;
    if (n < 0) n = 0;
    for (int32_t i = 0; i < n; i++)
        if (drafts[i] < 0)
            return di_error_set(err, DI_ERR_INVALID_ARG, "scheduler: draft %d is token %d", (int)i, (int)drafts[i]);
    /* tokens has room for prompt + max_tokens: n_tokens + n stays inside */
    memmove(seq->tokens + seq->n_tokens, drafts, (size_t)n * sizeof *drafts);
    seq->n_drafts = n;
    if (n_set) *n_set = n;
    return DI_OK;
}

di_status di_scheduler_reserve(di_scheduler *s, di_seq *seq, int32_t n_tokens, int32_t *n_covered,
                               di_error *err) {
    if (n_covered) *n_covered = 0;
    if (!seq || seq->status != DI_SEQ_RUNNING || seq->awaiting_sample || seq->n_tokens - seq->n_computed != 1)
        return di_error_set(err, DI_ERR_INVALID_ARG, "scheduler: reserve for seq %lld, which is not decoding",
                            seq ? (long long)seq->id : -1LL);
    int32_t bs = s->cfg.block_size;
    int64_t cap = (int64_t)seq->n_blocks_cap * bs, room = ((int64_t)seq->n_blocks + blocks_available(s)) * bs;
    int64_t want = n_tokens < cap ? n_tokens : cap;
    if (want > room) want = room;
    di_status st = want > (int64_t)seq->n_blocks * bs ? grow_blocks(s, seq, (int32_t)want, err) : DI_OK;
    if (st) return st;
    if (n_covered) *n_covered = seq->n_blocks * bs;
    return DI_OK;
}

di_status di_scheduler_postprocess(di_scheduler *s, di_seq *seq, int32_t token,
                                   di_finish_reason finish, di_finish_reason *final_out,
                                   di_error *err) {
    return di_scheduler_postprocess_n(s, seq, &token, 1, finish, final_out, err);
}

di_status di_scheduler_postprocess_n(di_scheduler *s, di_seq *seq, const int32_t *tokens, int32_t n,
                                     di_finish_reason finish, di_finish_reason *final_out, di_error *err) {
    if (final_out) *final_out = DI_FINISH_NONE;
    if (!seq || seq->status != DI_SEQ_RUNNING || !seq->awaiting_sample)
        return di_error_set(err, DI_ERR_INVALID_ARG,
                            "scheduler: postprocess of seq %lld, which has no pending sample",
                            seq ? (long long)seq->id : -1LL);
    if (n < 1 || n > 1 + seq->n_draft_rows)
        return di_error_set(err, DI_ERR_INVALID_ARG, "scheduler: %d tokens for seq %lld, which had %d draft rows",
                            (int)n, (long long)seq->id, (int)seq->n_draft_rows);
    for (int32_t i = 0; i < n; i++)
        if (tokens[i] < 0)
            return di_error_set(err, DI_ERR_INVALID_ARG, "scheduler: sampled token %d", (int)tokens[i]);
    if (finish < DI_FINISH_NONE || finish > DI_FINISH_CANCEL)
        return di_error_set(err, DI_ERR_INVALID_ARG, "scheduler: finish reason %d", (int)finish);
    seq->awaiting_sample = false;
    /* Rows past the accepted drafts are forgotten. */
    seq->n_computed -= seq->n_draft_rows + 1 - n;
    seq->n_draft_rows = 0;
    /* Room exists: drafts were clamped so that all of them plus the bonus
     * token never pass max_tokens. */
    memmove(seq->tokens + seq->n_tokens, tokens, (size_t)n * sizeof *tokens);
    if (seq->key) memcpy(seq->key + seq->n_tokens, tokens, (size_t)n * sizeof *tokens);
    seq->n_tokens += n;
    trim_blocks(s, seq);
    if (finish == DI_FINISH_NONE && seq->n_tokens - seq->n_prompt >= seq->max_tokens)
        finish = DI_FINISH_LENGTH;
    if (final_out) *final_out = finish;
    if (finish == DI_FINISH_NONE) return DI_OK;
    /* The forward of this sample has run, so every computed block is real. */
    return finish_seq(s, seq, finish, true, err);
}

di_status di_scheduler_cancel(di_scheduler *s, di_seq *seq, di_error *err) {
    if (!seq) return di_error_set(err, DI_ERR_INVALID_ARG, "scheduler: cancel of NULL");
    if (seq->status == DI_SEQ_FINISHED) return DI_OK;
    return finish_seq(s, seq, DI_FINISH_CANCEL, false, err);
}

di_status di_scheduler_release(di_scheduler *s, di_seq *seq, di_error *err) {
    if (!seq || seq->status != DI_SEQ_FINISHED)
        return di_error_set(err, DI_ERR_INVALID_ARG,
                            "scheduler: release of seq %lld, which is not finished",
                            seq ? (long long)seq->id : -1LL);
    if (seq->all_prev) seq->all_prev->all_next = seq->all_next; else s->all = seq->all_next;
    if (seq->all_next) seq->all_next->all_prev = seq->all_prev;
    seq_destroy(seq);
    return DI_OK;
}

bool di_scheduler_is_idle(const di_scheduler *s) { return s->n_waiting == 0 && s->n_running == 0; }

/* ---- checks and stats -------------------------------------------------- */

static di_status check_seq(const di_scheduler *s, const di_seq *q, di_error *err) {
    int32_t bs = s->cfg.block_size;
    if (q->n_tokens < q->n_prompt || q->n_tokens - q->n_prompt >= q->max_tokens ||
        q->n_computed < 0 || q->n_computed > q->n_tokens)
        return di_error_set(err, DI_ERR_INTERNAL,
                            "scheduler: seq %lld has %d tokens (prompt %d, max %d), %d computed",
                            (long long)q->id, (int)q->n_tokens, (int)q->n_prompt,
                            (int)q->max_tokens, (int)q->n_computed);
    if (q->status == DI_SEQ_WAITING) {
        if (q->n_blocks != 0 || q->slot != -1 || q->n_computed != 0 || q->awaiting_sample)
            return di_error_set(err, DI_ERR_INTERNAL,
                                "scheduler: waiting seq %lld holds %d blocks / slot %d",
                                (long long)q->id, (int)q->n_blocks, (int)q->slot);
        return DI_OK;
    }
    if (q->status != DI_SEQ_RUNNING || q->slot < 0 || q->slot >= s->cfg.max_running ||
        s->slot_owner[q->slot] != q)
        return di_error_set(err, DI_ERR_INTERNAL, "scheduler: running seq %lld: bad slot %d",
                            (long long)q->id, (int)q->slot);
    if (q->n_blocks < blocks_for(q->n_computed, bs) || q->n_blocks > q->n_blocks_cap ||
        q->n_blocks > blocks_for(q->n_tokens, bs))
        return di_error_set(err, DI_ERR_INTERNAL,
                            "scheduler: seq %lld has %d blocks for %d computed of %d tokens",
                            (long long)q->id, (int)q->n_blocks, (int)q->n_computed,
                            (int)q->n_tokens);
    for (int32_t i = 0; i < q->n_blocks; i++) {
        int32_t b = q->block_table[i];
        if (b < 0 || b >= s->cfg.n_blocks)
            return di_error_set(err, DI_ERR_INTERNAL, "scheduler: seq %lld block %d is %d",
                                (long long)q->id, (int)i, (int)b);
        if (s->ref_stamp[b] == q->id)
            return di_error_set(err, DI_ERR_INTERNAL, "scheduler: seq %lld holds block %d twice",
                                (long long)q->id, (int)b);
        s->ref_stamp[b] = q->id;
        s->seq_refs[b]++;
    }
    return DI_OK;
}

di_status di_scheduler_check_integrity(const di_scheduler *s, di_error *err) {
    memset(s->seq_refs, 0, (size_t)s->cfg.n_blocks * sizeof *s->seq_refs);
    memset(s->ref_stamp, 0, (size_t)s->cfg.n_blocks * sizeof *s->ref_stamp);
    if (s->n_running > s->cfg.max_running || s->n_waiting > s->cap_waiting)
        return di_error_set(err, DI_ERR_INTERNAL, "scheduler: %d running, %d waiting",
                            (int)s->n_running, (int)s->n_waiting);
    int32_t slots_used = 0;
    for (int32_t i = 0; i < s->cfg.max_running; i++) slots_used += s->slot_owner[i] != NULL;
    if (slots_used != s->n_running)
        return di_error_set(err, DI_ERR_INTERNAL, "scheduler: %d slots used by %d running",
                            (int)slots_used, (int)s->n_running);
    for (int32_t i = 0; i < s->n_running; i++) {
        if (i > 0 && s->running[i]->admit_order <= s->running[i - 1]->admit_order)
            return di_error_set(err, DI_ERR_INTERNAL, "scheduler: running queue out of order");
        di_status st = check_seq(s, s->running[i], err);
        if (st) return st;
    }
    for (int32_t i = 0; i < s->n_waiting; i++) {
        if (s->waiting[i]->status != DI_SEQ_WAITING)
            return di_error_set(err, DI_ERR_INTERNAL, "scheduler: seq %lld in WAITING has status %d",
                                (long long)s->waiting[i]->id, (int)s->waiting[i]->status);
        di_status st = check_seq(s, s->waiting[i], err);
        if (st) return st;
    }
    return di_prefix_cache_check_integrity(s->cache, s->seq_refs, err);
}

void di_scheduler_get_stats(const di_scheduler *s, di_scheduler_stats *out) {
    *out = s->stats;
    out->n_waiting = s->n_waiting;
    out->n_running = s->n_running;
    out->n_blocks_free = di_block_pool_n_free(s->pool);
    out->n_blocks_cached = di_prefix_cache_n_cached(s->cache);
    out->n_blocks_evictable = di_prefix_cache_n_evictable(s->cache);
    out->step_fixed_ms = s->cost.coef[0];
    out->step_decode_ms = s->cost.coef[1];
    out->step_prefill_ms = s->cost.coef[2];
}

void di_scheduler_observe_step(di_scheduler *s, int32_t n_decode, int32_t n_prefill, double ms) {
    di_step_cost_observe(&s->cost, n_decode, n_prefill, ms);
}
