/* The draft-model drafter (`--spec draft:PATH`): a second, cheaper model of
 * the same vocabulary (e.g. the default model quantized to Q4_0 drafting
 * for its Q8_0 / F16 version) with its own paged KV.
 *
 * Per batch slot it remembers the tokens its KV holds. Each step it keeps
 * the longest prefix its KV shares with the sequence (accepted drafts stay,
 * rejected ones are forgotten with di_model_kv_truncate), feeds the rest,
 * then drafts greedily: round r of a step is ONE batched forward with one
 * row per sequence still drafting (round 0 also carries every sequence's
 * catch-up rows). Drafts are the draft model's argmax, so q is one-hot.
 *
 * Its blocks come from its own di_block_pool; when the pool runs dry it
 * drops the state of slots not asking this step, and failing that gives
 * no drafts to that sequence (never an error). */
#include "spec/spec.h"

#include "base/alloc.h"
#include "kv/block_pool.h"
#include "model/model.h"
#include "text/tokenizer.h"

#include <stdlib.h>
#include <string.h>

/* Catch-up rows one sequence may feed in one step: a long prompt is fed
 * over several steps (without drafts) instead of one huge forward. */
#define DRAFT_MAX_CATCHUP 512
#define PIECE_MAX 256 /* bytes of one token's text compared at open */

typedef struct slot_state {
    int64_t seq_id;   /* 0 = empty */
    int32_t *tokens;  /* (n_ctx + DI_SPEC_MAX_K) the tokens fed or drafted */
    int32_t n_kv;     /* tokens[0..n_kv) have KV in the draft cache */
    int32_t *blocks;  /* (blocks_cap) */
    int32_t n_blocks;
    bool asking;      /* in this propose call */
} slot_state;

typedef struct model_drafter {
    di_drafter base;
    di_model *m;
    di_model_kv *kv;
    di_model_ctx *ctx;
    di_block_pool *pool;
    int32_t n_vocab, n_ctx, max_seqs, block_size, blocks_cap;
    slot_state *slots;       /* (max_seqs) */
    /* one forward's batch */
    int32_t cap_rows;
    int32_t *row_token, *row_seq, *row_pos; /* (cap_rows) */
    uint8_t *row_logits;                    /* (cap_rows) */
    const int32_t **tables;                 /* (max_seqs) */
    int32_t *table_n;                       /* (max_seqs) */
    float *logits;                          /* (max_seqs, n_vocab) */
    int32_t *feed_from;                     /* (max_seqs) per asking seq: first token to feed */
} model_drafter;

static void slot_reset(model_drafter *d, slot_state *st) {
    for (int32_t i = 0; i < st->n_blocks; i++) (void)di_block_pool_decref(d->pool, st->blocks[i], NULL, NULL);
    st->n_blocks = 0;
    st->n_kv = 0;
    st->seq_id = 0;
}

/* Blocks for positions [0, n_pos) of st; false when the pool cannot give
 * them even after dropping the slots that are not asking. */
static bool slot_grow(model_drafter *d, slot_state *st, int32_t n_pos) {
    int32_t need = (n_pos + d->block_size - 1) / d->block_size - st->n_blocks;
    if (need <= 0) return true;
    if (st->n_blocks + need > d->blocks_cap) return false;
    if (di_block_pool_n_free(d->pool) < need)
        for (int32_t s = 0; s < d->max_seqs && di_block_pool_n_free(d->pool) < need; s++)
            if (!d->slots[s].asking && d->slots[s].n_blocks) slot_reset(d, &d->slots[s]);
    if (di_block_pool_alloc(d->pool, need, st->blocks + st->n_blocks, NULL)) return false;
    st->n_blocks += need;
    return true;
}

static int32_t argmax(const float *x, int32_t n) {
    int32_t best = 0;
    for (int32_t v = 1; v < n; v++)
        if (x[v] > x[best]) best = v;
    return best;
}

static di_status grow_rows(model_drafter *d, int32_t n, di_error *err) {
    if (n <= d->cap_rows) return DI_OK;
    int32_t cap = d->cap_rows * 2 > n ? d->cap_rows * 2 : n;
    int32_t *t = di_realloc_array(d->row_token, (size_t)cap, sizeof *t);
    if (t) d->row_token = t;
    int32_t *q = di_realloc_array(d->row_seq, (size_t)cap, sizeof *q);
    if (q) d->row_seq = q;
    int32_t *p = di_realloc_array(d->row_pos, (size_t)cap, sizeof *p);
    if (p) d->row_pos = p;
    uint8_t *l = di_realloc_array(d->row_logits, (size_t)cap, sizeof *l);
    if (l) d->row_logits = l;
    if (!t || !q || !p || !l) return di_error_set(err, DI_ERR_NOMEM, "draft model: out of memory for %d rows", n);
    d->cap_rows = cap;
    return DI_OK;
}

static di_status run_forward(model_drafter *d, int32_t n_rows, di_threadpool *pool, di_error *err) {
    for (int32_t s = 0; s < d->max_seqs; s++) {
        d->tables[s] = d->slots[s].n_blocks ? d->slots[s].blocks : NULL;
        d->table_n[s] = d->slots[s].n_blocks;
    }
    di_batch b = {.n_rows = n_rows, .token = d->row_token, .seq = d->row_seq, .pos = d->row_pos,
                  .want_logits = d->row_logits, .n_seq_slots = d->max_seqs, .block_size = d->block_size,
                  .block_tables = d->tables, .n_blocks = d->table_n};
    di_status s = di_model_forward(d->ctx, d->kv, &b, d->logits, pool, err);
    if (s) di_error_prefix(err, "draft model: ");
    return s;
}

static di_status model_propose(di_drafter *base, const di_spec_seq *seqs, int32_t n, di_spec_drafts *out,
                               di_threadpool *pool, di_error *err) {
    model_drafter *d = (model_drafter *)base;
    for (int32_t s = 0; s < d->max_seqs; s++) d->slots[s].asking = false;
    for (int32_t i = 0; i < n; i++) {
        out[i].n = 0;
        out[i].has_q = false;
        if (seqs[i].slot < 0 || seqs[i].slot >= d->max_seqs)
            return di_error_set(err, DI_ERR_RANGE, "draft model: slot %d not in [0, %d)", seqs[i].slot, d->max_seqs);
        d->slots[seqs[i].slot].asking = true;
    }
    /* Round 0: catch-up rows of every sequence; logits at the last row of
     * those that will draft. */
    int32_t n_rows = 0, n_drafting = 0;
    for (int32_t i = 0; i < n; i++) {
        const di_spec_seq *q = &seqs[i];
        slot_state *st = &d->slots[q->slot];
        d->feed_from[i] = -1;
        if (q->n_tokens < 1 || q->n_tokens > d->n_ctx || q->k_max < 1 || q->k_max > DI_SPEC_MAX_K) continue;
        if (st->seq_id != q->seq_id) {
            slot_reset(d, st);
            st->seq_id = q->seq_id;
        }
        int32_t keep = st->n_kv < q->n_tokens - 1 ? st->n_kv : q->n_tokens - 1;
        int32_t m = 0;
        while (m < keep && st->tokens[m] == q->tokens[m]) m++;
        if (m < st->n_kv && di_model_kv_truncate(d->kv, q->slot, m, err)) {
            di_error_prefix(err, "draft model: ");
            return DI_ERR_INTERNAL;
        }
        st->n_kv = m;
        int32_t feed = q->n_tokens - m;
        bool drafts = feed <= DRAFT_MAX_CATCHUP;
        if (!drafts) feed = DRAFT_MAX_CATCHUP;
        /* positions written this step: m .. m+feed-1, then k-1 drafts */
        int32_t end = m + feed + (drafts ? q->k_max - 1 : 0);
        if (!slot_grow(d, st, end)) {
            slot_reset(d, st);
            continue;
        }
        di_status s = grow_rows(d, n_rows + feed, err);
        if (s) return s;
        for (int32_t j = 0; j < feed; j++) {
            int32_t r = n_rows++;
            st->tokens[m + j] = q->tokens[m + j];
            d->row_token[r] = q->tokens[m + j];
            d->row_seq[r] = q->slot;
            d->row_pos[r] = m + j;
            d->row_logits[r] = 0;
        }
        st->n_kv = m + feed;
        if (drafts) {
            d->row_logits[n_rows - 1] = 1;
            d->feed_from[i] = 0; /* drafting: index of its next draft */
            n_drafting++;
        }
    }
    if (n_rows == 0) return DI_OK;
    di_status s = run_forward(d, n_rows, pool, err);
    if (s) return s;
    /* Rounds 1..: one row per sequence still drafting. */
    for (int32_t round = 0;; round++) {
        int32_t li = 0;
        for (int32_t i = 0; i < n; i++) {
            if (d->feed_from[i] != round) continue;
            int32_t tok = argmax(d->logits + (size_t)li++ * (size_t)d->n_vocab, d->n_vocab);
            out[i].tokens[round] = tok;
            out[i].confidence[round] = 1.0f;
            out[i].n = round + 1;
            d->slots[seqs[i].slot].tokens[seqs[i].n_tokens + round] = tok;
            d->feed_from[i] = round + 1 < seqs[i].k_max ? round + 1 : -1;
        }
        n_rows = 0;
        for (int32_t i = 0; i < n; i++) {
            if (d->feed_from[i] != round + 1) continue;
            slot_state *st = &d->slots[seqs[i].slot];
            int32_t r = n_rows++, pos = seqs[i].n_tokens + round;
            d->row_token[r] = out[i].tokens[round];
            d->row_seq[r] = seqs[i].slot;
            d->row_pos[r] = pos;
            d->row_logits[r] = 1;
            st->n_kv = pos + 1;
        }
        if (n_rows == 0) break;
        if ((s = run_forward(d, n_rows, pool, err))) return s;
    }
    (void)n_drafting;
    return DI_OK;
}

static void model_free(di_drafter *base) {
    model_drafter *d = (model_drafter *)base;
    for (int32_t s = 0; d->slots && s < d->max_seqs; s++) {
        free(d->slots[s].tokens);
        free(d->slots[s].blocks);
    }
    free(d->slots);
    free(d->row_token);
    free(d->row_seq);
    free(d->row_pos);
    free(d->row_logits);
    free(d->tables);
    free(d->table_n);
    free(d->logits);
    free(d->feed_from);
    di_block_pool_free(d->pool);
    di_model_ctx_free(d->ctx);
    di_model_kv_free(d->kv);
    di_model_free(d->m);
    free(d);
}

static const di_drafter_ops MODEL_OPS = {"draft", model_propose, NULL, model_free};

/* Same vocabulary = same size and the same text for every token, so a
 * draft id means to the target what it meant to the drafter. */
static di_status check_vocab(const di_model *target, const di_model *draft, const char *path, di_error *err) {
    const di_tokenizer *a = di_model_tokenizer(target), *b = di_model_tokenizer(draft);
    int32_t na = di_tok_vocab_size(a), nb = di_tok_vocab_size(b);
    if (na != nb)
        return di_error_set(err, DI_ERR_INVALID_ARG, "--spec draft:%s: vocabulary of %d tokens, the model has %d",
                            path, nb, na);
    char pa[PIECE_MAX], pb[PIECE_MAX];
    for (int32_t id = 0; id < na; id++) {
        int64_t la = di_tok_piece(a, id, true, pa, sizeof pa), lb = di_tok_piece(b, id, true, pb, sizeof pb);
        if (la != lb || (la > 0 && memcmp(pa, pb, (size_t)(la < PIECE_MAX ? la : PIECE_MAX))))
            return di_error_set(err, DI_ERR_INVALID_ARG,
                                "--spec draft:%s: token %d differs from the model's: not the same vocabulary", path,
                                id);
    }
    return DI_OK;
}

di_status di_spec_draft_model_create(const char *path, const di_spec_env *env, di_drafter **out, di_error *err) {
    *out = NULL;
    model_drafter *d = di_calloc(1, sizeof *d);
    if (!d) return di_error_set(err, DI_ERR_NOMEM, "draft model: out of memory");
    d->base.ops = &MODEL_OPS;
    di_status s = di_model_open(path, env->kernels, NULL, &d->m, err);
    if (s) {
        di_error_prefix(err, "--spec draft:%s: ", path);
        goto fail;
    }
    di_model_facts f;
    di_model_get_facts(d->m, &f);
    if (f.n_vocab != env->n_vocab) {
        s = di_error_set(err, DI_ERR_INVALID_ARG, "--spec draft:%s: %d logits per row, the model has %d", path,
                         f.n_vocab, env->n_vocab);
        goto fail;
    }
    if ((s = check_vocab(env->target, d->m, path, err))) goto fail;
    d->n_vocab = f.n_vocab;
    d->n_ctx = env->n_ctx;
    d->max_seqs = env->max_seqs;
    d->block_size = env->block_size;
    d->blocks_cap = (env->n_ctx + DI_SPEC_MAX_K + d->block_size - 1) / d->block_size;
    /* as many blocks as the target's pool: the drafter never holds more
     * tokens than the sequences it drafts for */
    int32_t n_blocks = (env->kv_tokens + d->block_size - 1) / d->block_size;
    if ((s = di_model_kv_create(d->m, n_blocks, d->block_size, DI_DTYPE_F16, &d->kv, err))) goto fail;
    if ((s = di_model_ctx_create(d->m, &d->ctx, err))) goto fail;
    if ((s = di_block_pool_create(n_blocks, d->block_size, &d->pool, err))) goto fail;
    d->slots = di_calloc((size_t)d->max_seqs, sizeof *d->slots);
    d->tables = di_calloc((size_t)d->max_seqs, sizeof *d->tables);
    d->table_n = di_calloc((size_t)d->max_seqs, sizeof *d->table_n);
    d->logits = di_malloc_array((size_t)d->max_seqs * (size_t)d->n_vocab, sizeof(float));
    d->feed_from = di_calloc((size_t)d->max_seqs, sizeof *d->feed_from);
    if (!d->slots || !d->tables || !d->table_n || !d->logits || !d->feed_from) {
        s = di_error_set(err, DI_ERR_NOMEM, "draft model: out of memory");
        goto fail;
    }
    for (int32_t i = 0; i < d->max_seqs; i++) {
        d->slots[i].tokens = di_malloc_array((size_t)d->n_ctx + DI_SPEC_MAX_K, sizeof(int32_t));
        d->slots[i].blocks = di_malloc_array((size_t)d->blocks_cap, sizeof(int32_t));
        if (!d->slots[i].tokens || !d->slots[i].blocks) {
            s = di_error_set(err, DI_ERR_NOMEM, "draft model: out of memory");
            goto fail;
        }
    }
    if ((s = grow_rows(d, 256, err))) goto fail;
    *out = &d->base;
    return DI_OK;
fail:
    model_free(&d->base);
    return s;
}
