/* Speculative decoding inside the engine (docs/SPECULATIVE.md): the
 * drafter and its buffers, drafts proposed before the schedule, and a
 * verify settled after sampling (the accept rule itself runs in engine.c's
 * sample_task, with the rest of a row's sampling). */
#include "engine/engine_internal.h"

#include "base/alloc.h"
#include "base/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- speculative decoding: set-up ------------------------------------------ */

void eng_spec_close(di_engine *e) {
    di_drafter_free(e->drafter);
    e->drafter = NULL;
    di_spec_vlen_free(e->vlen);
    e->vlen = NULL;
    free(e->spec_nverify);
    e->spec_nverify = NULL;
    free(e->spec_seqs);
    free(e->spec_drafts);
    free(e->spec_tokens);
    free(e->spec_conf);
    free(e->spec_q);
    free(e->spec_p);
    free(e->spec_out);
    e->spec_seqs = NULL;
    e->spec_drafts = NULL;
    e->spec_tokens = NULL;
    e->spec_conf = NULL;
    e->spec_q = NULL;
    e->spec_p = NULL;
    e->spec_out = NULL;
}

/* Buffers for drafts of k tokens per sequence, and the rule. Refuses a
 * model whose KV cannot roll back (probed on slot 0 before any use). */
static di_status spec_prepare(di_engine *e, di_spec_accept rule, int32_t k, di_error *err) {
    if (k < 1 || k > DI_SPEC_MAX_K)
        return di_error_set(err, DI_ERR_RANGE, "--spec-k %d: expected 1..%d", (int)k, DI_SPEC_MAX_K);
    if (e->params.dist || e->params.cp)
        return di_error_set(err, DI_ERR_UNSUPPORTED, "--spec does not work with --ep / --cp yet");
    di_status s = di_model_kv_truncate(e->kv, 0, 0, err);
    if (s) return di_error_prefix(err, "--spec: ");
    size_t n = (size_t)e->params.max_seqs, v = (size_t)e->facts.n_vocab;
    e->spec_accept = rule;
    e->spec_k = k;
    e->spec_seqs = di_calloc(n, sizeof *e->spec_seqs);
    e->spec_drafts = di_calloc(n, sizeof *e->spec_drafts);
    e->spec_tokens = di_calloc(n * DI_SPEC_MAX_K, sizeof *e->spec_tokens);
    e->spec_conf = di_calloc(n * DI_SPEC_MAX_K, sizeof *e->spec_conf);
    e->spec_q = di_malloc_array(n * (size_t)k, v * sizeof(float));
    e->spec_p = di_malloc_array((size_t)e->n_threads * 2, v * sizeof(float));
    e->spec_out = di_calloc(n, sizeof *e->spec_out);
    if (!e->spec_seqs || !e->spec_drafts || !e->spec_tokens || !e->spec_conf || !e->spec_q || !e->spec_p ||
        !e->spec_out)
        return di_error_set(err, DI_ERR_NOMEM, "--spec: out of memory for the drafts of %zu sequences", n);
    return DI_OK;
}

di_status eng_spec_open(di_engine *e, const di_engine_params *p, di_error *err) {
    di_spec_accept rule;
    di_status s = di_spec_accept_from_name(p->spec_accept, &rule, err);
    if (s) return s;
    int32_t k = p->spec_k ? p->spec_k : DI_SPEC_DEFAULT_K;
    if ((s = spec_prepare(e, rule, k, err))) return s;
    di_spec_env env = {.target = e->model, .target_ctx = e->ctx, .target_kv = e->kv,
                       .n_vocab = e->facts.n_vocab, .k_max = k, .n_ctx = e->n_ctx,
                       .max_seqs = e->params.max_seqs, .kv_tokens = e->params.kv_tokens,
                       .block_size = e->params.block_size, .kernels = p->kernels};
    if ((s = di_spec_drafter_create(p->spec, &env, &e->drafter, err))) return s;
    /* DSpark's drafts carry confidences: schedule the verify length from
     * them unless told to verify every draft */
    if (p->spec_fixed_k || strcmp(p->spec, "dspark")) return DI_OK;
    if ((s = di_spec_vlen_create(e->params.max_seqs, k, &e->vlen, err))) return s;
    e->spec_nverify = di_calloc((size_t)e->params.max_seqs, sizeof *e->spec_nverify);
    if (!e->spec_nverify) return di_error_set(err, DI_ERR_NOMEM, "--spec: out of memory");
    int64_t max_rows = (int64_t)e->params.max_seqs * (k + 1);
    if (max_rows > e->params.max_batch_tokens) max_rows = e->params.max_batch_tokens;
    char key[4600];
    snprintf(key, sizeof key, "model=%s threads=%d rows=%lld ", p->model_path, (int)e->n_threads,
             (long long)max_rows);
    size_t used = strlen(key);
    eng_kv_flavor(e, e->params.block_size, key + used, sizeof key - used);
    di_spec_vlen_probe probe = {.ctx = e->ctx, .kv = e->kv, .kv_blocks = e->params.kv_tokens / e->params.block_size,
                                .block_size = e->params.block_size, .n_vocab = e->facts.n_vocab,
                                .max_rows = (int32_t)max_rows, .pool = e->pool, .cache_dir = p->spec_cost_cache,
                                .key = key};
    return di_spec_vlen_startup(e->vlen, &probe, &e->t_curve_ms, err);
}

di_status di_engine_spec_curve(di_engine *e, di_dspark_cost_point *pts, int32_t cap, int32_t *n_out,
                               double *measured_ms) {
    *n_out = e && e->vlen ? di_spec_vlen_curve(e->vlen, pts, cap) : 0;
    if (measured_ms) *measured_ms = e ? e->t_curve_ms : 0.0;
    return DI_OK;
}

di_status di_engine_set_spec_curve(di_engine *e, const di_dspark_cost_point *pts, int32_t n, di_error *err) {
    if (!e || !e->drafter) return di_error_set(err, DI_ERR_INVALID_ARG, "spec curve: speculation is off");
    if (!e->vlen) {
        di_status s = di_spec_vlen_create(e->params.max_seqs, e->spec_k, &e->vlen, err);
        if (s) return s;
        e->spec_nverify = di_calloc((size_t)e->params.max_seqs, sizeof *e->spec_nverify);
        if (!e->spec_nverify) return di_error_set(err, DI_ERR_NOMEM, "spec curve: out of memory");
    }
    return di_spec_vlen_set_curve(e->vlen, pts, n, err);
}

di_drafter *di_engine_drafter(di_engine *e) { return e ? e->drafter : NULL; }

di_status di_engine_set_drafter(di_engine *e, di_drafter *d, di_spec_accept rule, int32_t k, di_error *err) {
    eng_spec_close(e);
    di_status s = spec_prepare(e, rule, k, err);
    if (s) {
        eng_spec_close(e);
        di_drafter_free(d);
        return s;
    }
    e->drafter = d;
    return DI_OK;
}

/* ---- speculative decoding: the step's two ends ----------------------------- */

/* Asks the drafter for drafts of every RUNNING sequence about to decode
 * and hands them to the scheduler. Called with the lock held; drops it
 * while the drafter runs (a draft model runs forwards): only this thread
 * changes sequences' tokens, and cancels are only flagged meanwhile.
 * Constrained requests do not draft (their matcher cannot roll back), nor
 * requests with images (their sampler history is a separate array). */
di_status eng_spec_propose(di_engine *e, di_error *err) {
    int32_t n = 0;
    size_t v = (size_t)e->facts.n_vocab;
    for (request *r = e->reqs; r && n < e->params.max_seqs; r = r->next) {
        di_seq *q = r->seq;
        if (q->status != DI_SEQ_RUNNING || q->awaiting_sample || q->n_tokens - q->n_computed != 1 ||
            r->constraint.matcher || r->cancel_requested || r->hist)
            continue;
        int32_t room = q->max_tokens - (q->n_tokens - q->n_prompt) - 1;
        int32_t k = e->spec_k < room ? e->spec_k : room;
        if (k < 1) continue;
        /* blocks for the positions the drafts take (a drafter's scratch,
         * then the verify rows); fewer drafts when blocks are short */
        int32_t covered = 0;
        di_status s = di_scheduler_reserve(e->sched, q, q->n_tokens - 1 + k, &covered, err);
        if (s) return s;
        if (covered - (q->n_tokens - 1) < k) k = covered - (q->n_tokens - 1);
        if (k < 1) continue;
        e->spec_seqs[n] = (di_spec_seq){.seq_id = q->id, .slot = q->slot, .tokens = q->tokens,
                                        .n_tokens = q->n_tokens, .n_prompt = q->n_prompt, .k_max = k,
                                        .sampling = &r->sampling, .blocks = q->block_table,
                                        .n_blocks = q->n_blocks};
        e->spec_drafts[n] = (di_spec_drafts){.n = 0, .tokens = e->spec_tokens + (size_t)n * DI_SPEC_MAX_K,
                                             .has_q = false, .q = e->spec_q + (size_t)n * (size_t)e->spec_k * v,
                                             .confidence = e->spec_conf + (size_t)n * DI_SPEC_MAX_K};
        n++;
    }
    if (n == 0) return DI_OK;
    pthread_mutex_unlock(&e->mu);
    di_status s = e->drafter->ops->propose(e->drafter, e->spec_seqs, n, e->spec_drafts, e->pool, err);
    pthread_mutex_lock(&e->mu);
    if (s) return s;
    for (int32_t i = 0; i < n; i++) {
        di_spec_drafts *d = &e->spec_drafts[i];
        const di_spec_seq *q = &e->spec_seqs[i];
        /* A drafter's output is checked like any input. */
        int32_t nd = d->n < 0 ? 0 : d->n > q->k_max ? q->k_max : d->n;
        for (int32_t j = 0; j < nd; j++)
            if (d->tokens[j] < 0 || d->tokens[j] >= e->facts.n_vocab) nd = j;
        for (int32_t j = 0; j < nd; j++)
            d->confidence[j] = d->confidence[j] >= 0.0f ? (d->confidence[j] <= 1.0f ? d->confidence[j] : 1.0f) : 0.0f;
        d->n = nd;
        e->spec_stats.spec_drafted += nd;
        for (int32_t j = 0; j < nd; j++) e->spec_stats.spec_conf_sum += d->confidence[j];
    }
    /* the confidence schedule: how many of its drafts each one verifies;
     * a batch the curve cannot price (more sequences than its largest
     * measured step) verifies every draft rather than fail the step */
    if (e->vlen && di_spec_vlen_plan(e->vlen, e->spec_seqs, e->spec_drafts, n, e->spec_nverify, NULL))
        for (int32_t i = 0; i < n; i++) e->spec_nverify[i] = e->spec_drafts[i].n;
    for (int32_t i = 0; i < n; i++) {
        di_spec_drafts *d = &e->spec_drafts[i];
        const di_spec_seq *q = &e->spec_seqs[i];
        int32_t nd = e->vlen ? e->spec_nverify[i] : d->n;
        if (e->vlen) e->spec_stats.spec_plan_rows += nd;
        request *r = NULL;
        for (request *x = e->reqs; x; x = x->next)
            if (x->seq->id == q->seq_id) r = x;
        if (!r || nd == 0) continue;
        int32_t n_set = 0;
        if ((s = di_scheduler_set_drafts(e->sched, r->seq, d->tokens, nd, &n_set, err))) return s;
        d->n = n_set;
        r->spec_draft = i;
    }
    return DI_OK;
}

/* After the verify of one sequence: statistics, the rollback of its
 * rejected rows (n_keep = tokens whose KV stays), and its outcome for the
 * drafter's hook. */
di_status eng_spec_settle(di_engine *e, int32_t slot, int64_t seq_id, int32_t first_row, int32_t n_rows,
                          int32_t n_accepted, int32_t n_tokens_before, di_error *err) {
    int32_t nd = n_rows - 1;
    di_engine_stats *st = &e->spec_stats;
    if (nd > 0) {
        st->spec_verified += nd;
        st->spec_accepted += n_accepted;
        st->spec_verify_steps++;
        for (int32_t j = 0; j < nd; j++) st->spec_verified_at[j]++;
        for (int32_t j = 0; j < n_accepted; j++) st->spec_accepted_at[j]++;
    }
    e->spec_out[e->n_spec_out++] = (di_spec_outcome){.seq_id = seq_id, .slot = slot, .first_row = first_row,
                                                     .n_rows = n_rows, .n_accepted = n_accepted,
                                                     .n_tokens = n_tokens_before + n_accepted + 1};
    if (n_accepted == nd) return DI_OK;
    return di_model_kv_truncate(e->kv, slot, n_tokens_before + n_accepted, err);
}
