/* DeepSeek-V4.1's DSpark drafter behind the drafter ops table (`--spec
 * dspark`).
 *
 * The draft forward is model code (model/deepseek_v41_dspark.h); this file
 * only adapts it to the engine's verifier:
 *
 *   create    the target must be deepseek_v41 with DSpark stages (mtp.*);
 *             DSpark is enabled on the engine's kv, so from the first
 *             forward on every main forward also writes each row's target
 *             features into the stages' main-key records
 *   propose   one di_dsv41_dspark_draft per distinct draft count, all the
 *             sequences of that count in one forward of the stages: golden
 *             = the token just sampled (the step's decode row), last_pos =
 *             the last position with KV; drafts sampled with the request's
 *             own temperature / top-p / top-k on DeepInfer's draft RNG
 *             stream; q = exp(the draft logprobs); confidences from the
 *             confidence head
 *
 * The draft block writes its own scratch keys at positions last_pos+1 ..
 * last_pos+k of the slot (the engine's block table covers them: see
 * di_spec_seq.blocks); the verify forward overwrites them with main keys,
 * and rejected positions are overwritten later. Nothing is kept per
 * sequence, so a slot's new owner needs no reset (after_forward is NULL).
 *
 * Ownership: the drafter owns its V4.1 context and its logprob buffer; the
 * model and kv are the engine's. */
#include "spec/spec.h"

#include "base/alloc.h"
#include "model/deepseek_v41_dspark.h"
#include "model/model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* DEEPINFER_DFLASH_CONFIDENCE_HEAD_TEMPERATURE's default. */
#define CONF_TEMPERATURE 1.0f

typedef struct dspark_drafter {
    di_drafter base;
    const di_dsv41_model *m;
    di_dsv41_kv *kv;
    di_dsv41_ctx *ctx;
    int32_t n_vocab, n_slots, block_size;
    di_dsv41_draft_req *reqs;    /* (n_slots) */
    int32_t *which;              /* (n_slots) index into seqs of reqs[i] */
    const int32_t **tables;      /* (n_slots) block table per slot */
    int32_t *table_n;            /* (n_slots) */
    int32_t *drafts;             /* (n_slots * DI_SPEC_MAX_K) */
    float *conf;                 /* (n_slots * DI_SPEC_MAX_K) */
    float *lp;                   /* (n_slots * DI_SPEC_MAX_K, n_vocab) */
    di_spec_dspark_oracle oracle; /* test knob, NULL = off */
    void *oracle_user;
} dspark_drafter;

static void dspark_free(di_drafter *base) {
    dspark_drafter *d = (dspark_drafter *)base;
    if (!d) return;
    di_dsv41_ctx_free(d->ctx);
    free(d->reqs);
    free(d->which);
    free(d->tables);
    free(d->table_n);
    free(d->drafts);
    free(d->conf);
    free(d->lp);
    free(d);
}

/* The request of seqs[i]: its slot, the token of this step's decode row,
 * and the request's sampling (top_k 0 = off is DeepInfer's -1). */
static di_dsv41_draft_req draft_req(const di_spec_seq *q) {
    const di_sampling_params *sp = q->sampling;
    return (di_dsv41_draft_req){.seq = q->slot,
                                .golden = q->tokens[q->n_tokens - 1],
                                .last_pos = q->n_tokens - 2,
                                .temperature = sp->temperature,
                                .top_p = sp->top_p,
                                .top_k = sp->top_k > 0 ? sp->top_k : -1,
                                .seed = sp->seed,
                                .sample_pos = q->n_tokens - 1};
}

/* Drafts k tokens for every sequence of seqs whose k_max is k, in one
 * forward of the stages. */
static di_status draft_group(dspark_drafter *d, const di_spec_seq *seqs, int32_t n, int32_t k, di_spec_drafts *out,
                             di_threadpool *pool, di_error *err) {
    int32_t n_req = 0;
    for (int32_t s = 0; s < d->n_slots; s++) {
        d->tables[s] = NULL;
        d->table_n[s] = 0;
    }
    for (int32_t i = 0; i < n; i++) {
        const di_spec_seq *q = &seqs[i];
        if (q->k_max != k) continue;
        d->tables[q->slot] = q->blocks;
        d->table_n[q->slot] = q->n_blocks;
        d->reqs[n_req] = draft_req(q);
        d->which[n_req++] = i;
    }
    if (n_req == 0) return DI_OK;
    di_batch tables = {.n_seq_slots = d->n_slots, .block_size = d->block_size, .block_tables = d->tables,
                       .n_blocks = d->table_n};
    di_status s = di_dsv41_dspark_draft(d->ctx, d->kv, &tables, d->reqs, n_req, k, CONF_TEMPERATURE, NULL, d->lp,
                                        d->conf, d->drafts, pool, err);
    if (s) return di_error_prefix(err, "--spec dspark: ");
    const size_t v = (size_t)d->n_vocab;
    for (int32_t r = 0; r < n_req; r++) {
        const int32_t i = d->which[r];
        di_spec_drafts *o = &out[i];
        o->n = k;
        o->has_q = true;
        for (int32_t j = 0; j < k; j++) {
            const size_t row = (size_t)r * (size_t)k + (size_t)j;
            o->tokens[j] = d->drafts[row];
            o->confidence[j] = d->conf[row];
            int32_t t = d->oracle ? d->oracle(d->oracle_user, &seqs[i], j, d->drafts[row], d->conf[row]) : -1;
            if (t >= 0) {
                o->tokens[j] = t;
                o->has_q = false;
            }
            const float *lp = d->lp + row * v;
            float *q = o->q + (size_t)j * v;
            for (size_t x = 0; x < v; x++) q[x] = expf(lp[x]);
        }
    }
    return DI_OK;
}

static di_status dspark_propose(di_drafter *base, const di_spec_seq *seqs, int32_t n, di_spec_drafts *out,
                                di_threadpool *pool, di_error *err) {
    dspark_drafter *d = (dspark_drafter *)base;
    bool seen[DI_SPEC_MAX_K + 1] = {false};
    for (int32_t i = 0; i < n; i++) {
        out[i].n = 0;
        /* a slot outside the tables or a table too short for the block: no drafts */
        const di_spec_seq *q = &seqs[i];
        if (q->slot < 0 || q->slot >= d->n_slots || q->n_tokens < 2 || !q->blocks ||
            (int64_t)q->n_blocks * d->block_size < (int64_t)q->n_tokens - 1 + q->k_max || q->k_max < 1 ||
            q->k_max > DI_SPEC_MAX_K)
            return di_error_set(err, DI_ERR_INVALID_ARG, "--spec dspark: sequence %lld: slot %d, %d tokens, k %d",
                                (long long)q->seq_id, (int)q->slot, (int)q->n_tokens, (int)q->k_max);
    }
    for (int32_t i = 0; i < n; i++) {
        int32_t k = seqs[i].k_max;
        if (seen[k]) continue;
        seen[k] = true;
        di_status s = draft_group(d, seqs, n, k, out, pool, err);
        if (s) return s;
    }
    return DI_OK;
}

static const di_drafter_ops DSPARK_OPS = {"dspark", dspark_propose, NULL, dspark_free};

di_status di_spec_dspark_set_oracle(di_drafter *d, di_spec_dspark_oracle fn, void *user, di_error *err) {
    if (!d || d->ops != &DSPARK_OPS)
        return di_error_set(err, DI_ERR_INVALID_ARG, "dspark oracle: the drafter is not dspark");
    ((dspark_drafter *)d)->oracle = fn;
    ((dspark_drafter *)d)->oracle_user = user;
    return DI_OK;
}

di_status di_spec_dspark_create(const di_spec_env *env, di_drafter **out, di_error *err) {
    *out = NULL;
    di_model_facts f;
    di_model_get_facts(env->target, &f);
    const di_dsv41_model *m = di_model_as_dsv41(env->target);
    di_dsv41_kv *kv = di_model_kv_as_dsv41(env->target_kv);
    if (!m || !kv || di_dsv41_dspark_stages(m) < 1)
        return di_error_set(err, DI_ERR_UNSUPPORTED, "--spec dspark: not available for this model (%s%s)", f.arch,
                            m ? " without DSpark stages mtp.*" : "");
    if (env->k_max < 1 || env->k_max > DI_SPEC_MAX_K || env->max_seqs < 1)
        return di_error_set(err, DI_ERR_INVALID_ARG, "--spec dspark: k %d, %d sequences", (int)env->k_max,
                            (int)env->max_seqs);
    di_status s = di_dsv41_kv_enable_dspark(m, kv, err);
    if (s) return di_error_prefix(err, "--spec dspark: ");
    dspark_drafter *d = di_calloc(1, sizeof *d);
    if (!d) return di_error_set(err, DI_ERR_NOMEM, "--spec dspark: out of memory");
    d->base.ops = &DSPARK_OPS;
    d->m = m;
    d->kv = kv;
    d->n_vocab = env->n_vocab;
    d->n_slots = env->max_seqs;
    d->block_size = env->block_size;
    const size_t n = (size_t)env->max_seqs, rows = n * DI_SPEC_MAX_K;
    d->reqs = di_calloc(n, sizeof *d->reqs);
    d->which = di_calloc(n, sizeof *d->which);
    d->tables = di_calloc(n, sizeof *d->tables);
    d->table_n = di_calloc(n, sizeof *d->table_n);
    d->drafts = di_calloc(rows, sizeof *d->drafts);
    d->conf = di_calloc(rows, sizeof *d->conf);
    d->lp = di_malloc_array(n * (size_t)env->k_max, (size_t)env->n_vocab * sizeof(float));
    if (!d->reqs || !d->which || !d->tables || !d->table_n || !d->drafts || !d->conf || !d->lp) {
        dspark_free(&d->base);
        return di_error_set(err, DI_ERR_NOMEM, "--spec dspark: out of memory for %zu sequences", n);
    }
    if ((s = di_dsv41_ctx_create(m, &d->ctx, err))) {
        dspark_free(&d->base);
        return di_error_prefix(err, "--spec dspark: ");
    }
    *out = &d->base;
    return DI_OK;
}
