/* The engine: one model, its paged KV cache, the scheduler and the sampler,
 * driven by step() = schedule(); forward(); sample + postprocess()
 * (nano-vllm's loop). The public contract is in include/deepinfer.h.
 *
 * Threads: submit/cancel may come from any thread; one thread steps. A
 * recursive mutex guards the scheduler and the request list; it is dropped
 * during the forward so submitters never wait for a whole forward, and it
 * is recursive so an event callback may call submit or cancel. Cancels are
 * only flagged by di_engine_cancel and applied by the stepping thread, so
 * the scheduler never frees blocks that a running forward writes. During
 * the forward, idle pool workers fill the grammar masks of the step's
 * constrained rows (early_mask_task, pool side work); the stepping thread
 * ends that side work before it reads or frees any matcher. */
#include "engine/engine_internal.h"

#include "base/alloc.h"
#include "base/status.h"
#include "dist/dist.h"
#include "sample/rng.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Defaults chosen for a laptop-class CPU and the embedded default model. */
#define DEFAULT_CTX_CAP 8192       /* cap on the model's trained context */
#define DEFAULT_KV_TOKENS_MIN 8192 /* smallest default KV pool, in tokens */
#define DEFAULT_BLOCK_SIZE 16      /* tokens per KV block: small = little waste */
#define DEFAULT_BATCH_TOKENS 512   /* rows per forward: enough to fill the matmuls */
#define DEFAULT_MAX_SEQS 64
#define DEFAULT_KV_DISK_GB 16.0    /* disk tier cap when kv_disk_dir is set */
#define DEFAULT_IMAGE_CACHE_MB 256.0 /* encoded-image cache cap: an image costs n_tokens x n_embd floats */

di_engine_params di_engine_params_default(void) {
    di_engine_params p;
    memset(&p, 0, sizeof p);
    return p;
}

/* Everything besides the model file that changes the KV bits: records of
 * another flavor are another model's. */
void eng_kv_flavor(const di_engine *e, int32_t block, char *buf, size_t cap) {
    snprintf(buf, cap, "arch=%s kernels=%s numerics=%s kv=%s block=%d", e->facts.arch, e->facts.kernels,
             e->params.numerics ? e->params.numerics : "default", e->params.kv_f32 ? "f32" : "f16", (int)block);
    /* bounded replay leaves the decoder records of clipped rows unwritten:
     * its blocks are never another engine's exact blocks */
    size_t len = strlen(buf);
    if (e->replay_keep && len < cap) snprintf(buf + len, cap - len, " replay=%d", (int)e->replay_keep);
}


di_status di_engine_create(const di_engine_params *p, di_engine **out, di_error *err) {
    *out = NULL;
    if (!p || !p->model_path) return di_error_set(err, DI_ERR_INVALID_ARG, "engine: no model path");
    if (p->n_threads < 0 || p->n_ctx < 0 || p->kv_tokens < 0 || p->block_size < 0 ||
        p->max_batch_tokens < 0 || p->max_seqs < 0 || p->max_prefill_tokens < 0)
        return di_error_set(err, DI_ERR_INVALID_ARG, "engine: negative size parameter");
    if (p->spec_k < 0 || p->spec_k > DI_SPEC_MAX_K)
        return di_error_set(err, DI_ERR_RANGE, "engine: spec_k %d: expected 0..%d", (int)p->spec_k,
                            DI_SPEC_MAX_K);
    if (!isfinite(p->tpot_target_ms) || p->tpot_target_ms < 0)
        return di_error_set(err, DI_ERR_INVALID_ARG, "engine: tpot_target_ms %g must be >= 0",
                            p->tpot_target_ms);
    di_engine *e = calloc(1, sizeof *e);
    if (!e) return di_error_set(err, DI_ERR_NOMEM, "engine: out of memory");
    e->params = *p;
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&e->mu, &attr);
    pthread_mutexattr_destroy(&attr);
    e->next_id = 1;

    di_status s = di_model_open_on(p->model_path, p->kernels, p->numerics, p->device, &e->model, err);
    if (s) goto fail;
    if (p->pretouch > 0 || (p->pretouch == 0 && p->load_progress))
        (void)di_model_pretouch(e->model, p->load_progress, p->load_progress_user); /* advisory */
    di_model_get_facts(e->model, &e->facts);
    e->tok = di_model_tokenizer(e->model);
    if (p->bounded_replay) {
        if (p->cp) {
            s = di_error_set(err, DI_ERR_UNSUPPORTED, "--bounded-replay does not combine with --cp");
            goto fail;
        }
        if ((s = di_model_bounded_replay(e->model, p->bounded_replay < 0 ? -1 : p->bounded_replay, &e->replay_keep,
                                         err)))
            goto fail;
    }

    if (di_model_image_token(e->model) >= 0 && p->image_cache_mb >= 0) {
        double mb = p->image_cache_mb > 0 ? p->image_cache_mb : DEFAULT_IMAGE_CACHE_MB;
        if ((s = di_image_cache_create((uint64_t)(mb * 1e6), &e->image_cache, err))) goto fail;
    }

    int32_t n_ctx = p->n_ctx;
    if (n_ctx == 0) n_ctx = e->facts.n_ctx_train < DEFAULT_CTX_CAP ? e->facts.n_ctx_train : DEFAULT_CTX_CAP;
    if (n_ctx < 1) n_ctx = DEFAULT_CTX_CAP;
    e->n_ctx = n_ctx;
    int32_t block = p->block_size ? p->block_size : DEFAULT_BLOCK_SIZE;
    int64_t kv_tokens = p->kv_tokens ? p->kv_tokens
                                     : (2ll * n_ctx > DEFAULT_KV_TOKENS_MIN ? 2ll * n_ctx : DEFAULT_KV_TOKENS_MIN);
    int64_t n_blocks = (kv_tokens + block - 1) / block;
    if (n_blocks > INT32_MAX / 2) {
        s = di_error_set(err, DI_ERR_RANGE, "engine: KV cache of %lld tokens is too large", (long long)kv_tokens);
        goto fail;
    }
    di_dtype kv_dtype = p->kv_f32 ? DI_DTYPE_F32 : DI_DTYPE_F16;
    s = di_model_kv_create(e->model, (int32_t)n_blocks, block, kv_dtype, &e->kv, err);
    if (s) goto fail;
    s = di_model_ctx_create(e->model, &e->ctx, err);
    if (s) goto fail;
    if (p->dist && (s = di_model_ctx_set_ep(e->model, e->ctx, p->dist, &p->ep, err))) goto fail;
    if (p->cp && p->dist && p->cp != p->dist) {
        s = di_error_set(err, DI_ERR_INVALID_ARG, "engine: expert and context parallelism need the same group");
        goto fail;
    }
    if (p->cp && (s = di_model_ctx_set_cp(e->model, e->ctx, p->cp, p->cp_min_rows > 0 ? p->cp_min_rows : 256, err)))
        goto fail;
    s = di_threadpool_create(p->n_threads, &e->pool, err);
    if (s) goto fail;
    if (p->kv_disk_dir && p->kv_disk_dir[0]) {
        if (p->no_prefix_cache) {
            s = di_error_set(err, DI_ERR_INVALID_ARG, "engine: the disk KV tier needs the prefix cache");
            goto fail;
        }
        /* Context-parallel ranks must schedule identical batches; a shared
         * directory filled while they run could give one rank a hit the
         * others miss. */
        if (p->cp) {
            s = di_error_set(err, DI_ERR_UNSUPPORTED, "engine: the disk KV tier does not combine with --cp");
            goto fail;
        }
        double gb = p->kv_disk_max_gb > 0 ? p->kv_disk_max_gb : DEFAULT_KV_DISK_GB;
        if (!isfinite(gb) || gb > 1e9) {
            s = di_error_set(err, DI_ERR_INVALID_ARG, "engine: kv_disk_max_gb %g out of range", p->kv_disk_max_gb);
            goto fail;
        }
        char flavor[256];
        eng_kv_flavor(e, block, flavor, sizeof flavor);
        uint64_t bytes = (uint64_t)(gb * 1e9);
        s = di_engine_tier_open(p->kv_disk_dir, bytes ? bytes : 1, p->model_path, flavor, e->kv, block, &e->tier, err);
        if (s) goto fail;
    }
    di_scheduler_config sc = {
        .n_blocks = (int32_t)n_blocks,
        .block_size = block,
        .max_tokens_per_step = p->max_batch_tokens ? p->max_batch_tokens : DEFAULT_BATCH_TOKENS,
        .max_running = p->max_seqs ? p->max_seqs : DEFAULT_MAX_SEQS,
        .max_context = n_ctx,
        .prefix_cache = !p->no_prefix_cache,
        .max_prefill_tokens = p->max_prefill_tokens,
        .tpot_target_ms = p->tpot_target_ms,
        .replay_keep = e->replay_keep,
    };
    if (e->tier) sc.tier = di_engine_tier_hooks(e->tier);
    e->params.block_size = block;
    e->params.max_batch_tokens = sc.max_tokens_per_step;
    e->params.max_seqs = sc.max_running;
    e->params.kv_tokens = (int32_t)(n_blocks * block);
    s = di_scheduler_create(&sc, &e->sched, err);
    if (s) goto fail;
    e->n_threads = di_threadpool_n_threads(e->pool);
    e->samplers = calloc((size_t)e->n_threads, sizeof *e->samplers);
    e->jobs = calloc((size_t)sc.max_tokens_per_step, sizeof *e->jobs);
    if (!e->samplers || !e->jobs) {
        s = di_error_set(err, DI_ERR_NOMEM, "engine: out of memory");
        goto fail;
    }
    for (int32_t i = 0; i < e->n_threads && !s; i++)
        s = di_sampler_create(e->facts.n_vocab, &e->samplers[i], err);
    if (s) goto fail;
    s = di_constraint_cache_create(e->tok, e->facts.n_vocab, &e->constraints, err);
    if (s) goto fail;
    e->mask_words = di_constraint_mask_words(e->constraints);
    e->masks = di_malloc_array((size_t)e->n_threads * e->mask_words, sizeof(uint32_t));
    e->logits_rows = (size_t)sc.max_running;
    e->logits = di_malloc_array(e->logits_rows * (size_t)e->facts.n_vocab, sizeof(float));
    e->logit_index = di_malloc_array((size_t)sc.max_tokens_per_step, sizeof(int32_t));
    e->slot_req = di_calloc((size_t)sc.max_running, sizeof *e->slot_req);
    e->early_reqs = di_calloc((size_t)sc.max_running, sizeof *e->early_reqs);
    e->row_embd = di_calloc((size_t)sc.max_tokens_per_step, sizeof *e->row_embd);
    if (!e->logits || !e->logit_index || !e->masks || !e->slot_req || !e->early_reqs || !e->row_embd) {
        s = di_error_set(err, DI_ERR_NOMEM, "engine: out of memory for logits");
        goto fail;
    }
    if (p->spec && strcmp(p->spec, "off")) {
        if ((s = eng_spec_open(e, p, err))) goto fail;
    }
    *out = e;
    return DI_OK;
fail:
    di_engine_free(e);
    return s;
}

static void request_free(di_engine *e, request *r) {
    if (!r) return;
    di_constraint_end(e->constraints, &r->constraint);
    free(r->early_mask);
    free(r->bias);
    free(r->stop_tokens);
    free(r->forced);
    free(r->prompt_lp);
    free(r->prompt_argmax);
    di_tok_detok_free(r->detok);
    free(r->text_buf);
    free(r->img_rows);
    free(r->img_index);
    free(r->hist);
    free(r);
}

void di_engine_free(di_engine *e) {
    if (!e) return;
    for (request *r = e->reqs, *n; r; r = n) {
        n = r->next;
        request_free(e, r);
    }
    eng_spec_close(e);
    di_constraint_cache_free(e->constraints);
    free(e->masks);
    for (int32_t i = 0; e->samplers && i < e->n_threads; i++) di_sampler_free(e->samplers[i]);
    free(e->samplers);
    free(e->jobs);
    /* The RAM prefix cache outlives the process through the disk tier. */
    if (e->sched) di_scheduler_flush_tier(e->sched);
    di_scheduler_free(e->sched);
    di_engine_tier_free(e->tier);
    di_image_cache_free(e->image_cache);
    free(e->xfer_block);
    di_threadpool_free(e->pool);
    di_model_ctx_free(e->ctx);
    di_model_kv_free(e->kv);
    di_model_free(e->model);
    free(e->logits);
    free(e->logit_index);
    free(e->slot_req);
    free(e->early_reqs);
    free(e->row_embd);
    free(e->image_placeholder);
    pthread_mutex_destroy(&e->mu);
    free(e);
}

/* ---- submission ------------------------------------------------------- */

di_status di_engine_check_constraint(di_engine *e, const di_constraint *c, char *notes, size_t cap,
                                     di_error *err) {
    if (cap) notes[0] = 0;
    if (!e || !c) return di_error_set(err, DI_ERR_INVALID_ARG, "constraint: NULL argument");
    return di_constraint_check(e->constraints, c, notes, cap, err);
}

static di_status request_init(di_engine *e, const di_request *r, request *q, di_error *err) {
    di_status s = di_sampling_params_validate(&r->sampling, e->facts.n_vocab, err);
    if (s) return s;
    q->sampling = r->sampling;
    if (r->sampling.n_logit_bias) {
        q->bias = di_malloc_array(r->sampling.n_logit_bias, sizeof *q->bias);
        if (!q->bias) return di_error_set(err, DI_ERR_NOMEM, "request: out of memory");
        memcpy(q->bias, r->sampling.logit_bias, r->sampling.n_logit_bias * sizeof *q->bias);
    }
    q->sampling.logit_bias = q->bias;
    if (r->n_stop_tokens) {
        q->stop_tokens = di_malloc_array(r->n_stop_tokens, sizeof(int32_t));
        if (!q->stop_tokens) return di_error_set(err, DI_ERR_NOMEM, "request: out of memory");
        memcpy(q->stop_tokens, r->stop_tokens, r->n_stop_tokens * sizeof(int32_t));
        q->n_stop_tokens = r->n_stop_tokens;
    }
    for (size_t i = 0; i < r->n_stop; i++)
        if (!r->stop[i] || !r->stop[i][0])
            return di_error_set(err, DI_ERR_INVALID_ARG, "request: stop string %zu is empty", i);
    if (r->n_forced_tokens) {
        int32_t nv = di_tok_vocab_size(e->tok);
        q->forced = di_malloc_array(r->n_forced_tokens, sizeof(int32_t));
        if (!q->forced) return di_error_set(err, DI_ERR_NOMEM, "request: out of memory");
        for (size_t i = 0; i < r->n_forced_tokens; i++)
            if (!r->forced_tokens || r->forced_tokens[i] < 0 || r->forced_tokens[i] >= nv ||
                r->forced_tokens[i] >= e->facts.n_vocab)
                return di_error_set(err, DI_ERR_RANGE, "request: forced token %zu outside the vocabulary", i);
        memcpy(q->forced, r->forced_tokens, r->n_forced_tokens * sizeof(int32_t));
        q->n_forced = r->n_forced_tokens;
    }
    di_tok_detok_opts dopts = {.render_special = r->render_special, .stops = r->stop, .n_stops = r->n_stop};
    s = di_tok_detok_create(e->tok, &dopts, &q->detok, err);
    if (s) return s;
    s = di_constraint_begin(e->constraints, &r->constraint, &q->constraint, err);
    if (s) return s;
    q->ignore_eos = r->ignore_eos;
    q->on_event = r->on_event;
    q->user = r->user;
    return DI_OK;
}

di_status di_engine_submit(di_engine *e, const di_request *r, int64_t *id, di_error *err) {
    if (!e || !r) return di_error_set(err, DI_ERR_INVALID_ARG, "submit: NULL argument");
    if (r->max_tokens < 0) return di_error_set(err, DI_ERR_RANGE, "request: max_tokens must be >= 0");
    di_tok_ids ids = {0};
    di_status s = eng_build_prompt(e, r, &ids, err);
    if (s) {
        di_tok_ids_free(&ids);
        return s;
    }
    if (ids.n == 0) {
        di_tok_ids_free(&ids);
        return di_error_set(err, DI_ERR_INVALID_ARG, "request: the prompt is empty");
    }
    /* an HF folder may pair a tokenizer larger than its logits (di_model_open):
     * like DeepInfer's add_request, refuse a prompt the model cannot take */
    for (size_t i = 0; i < ids.n; i++)
        if (ids.data[i] >= e->facts.n_vocab) {
            int32_t t = ids.data[i];
            di_tok_ids_free(&ids);
            return di_error_set(err, DI_ERR_RANGE,
                                "request: prompt token %zu (%d) is outside the model's vocabulary of %d (the "
                                "tokenizer has %d tokens)",
                                i, t, e->facts.n_vocab, di_tok_vocab_size(e->tok));
        }
    request *q = calloc(1, sizeof *q);
    int32_t *key = NULL;
    if (!q) {
        di_tok_ids_free(&ids);
        return di_error_set(err, DI_ERR_NOMEM, "request: out of memory");
    }
    if (r->n_images && (s = eng_expand_images(e, r, q, &ids, &key, err))) {
        di_tok_ids_free(&ids);
        request_free(e, q);
        return s;
    }
    if (ids.n >= (size_t)e->n_ctx) {
        size_t n = ids.n;
        di_tok_ids_free(&ids);
        free(key);
        request_free(e, q);
        return di_error_set(err, DI_ERR_RANGE,
                            "request: prompt of %zu tokens leaves no room in the context of %d tokens", n,
                            e->n_ctx);
    }
    int32_t max_tokens = r->max_tokens ? r->max_tokens : e->n_ctx - (int32_t)ids.n;
    q->spec_draft = -1;
    s = request_init(e, r, q, err);
    if (!s && key) {
        /* the sampler's history reads image positions as the placeholder (a text id) */
        q->hist = di_malloc_array(ids.n + (size_t)max_tokens, sizeof(int32_t));
        if (!q->hist) s = di_error_set(err, DI_ERR_NOMEM, "request: out of memory");
        for (size_t i = 0; !s && i < ids.n; i++) q->hist[i] = q->img_index[i] >= 0 ? di_model_image_token(e->model) : ids.data[i];
    }
    if (!s && r->prompt_logprobs && e->replay_keep)
        s = di_error_set(err, DI_ERR_INVALID_ARG,
                         "request: prompt_logprobs with --bounded-replay (the decoder layers skip all but the last "
                         "%d prompt rows)", (int)e->replay_keep);
    if (!s && r->prompt_logprobs) {
        size_t n = ids.n > 1 ? ids.n - 1 : 1;
        q->prompt_lp = di_malloc_array(n, sizeof *q->prompt_lp);
        q->prompt_argmax = di_malloc_array(n, sizeof *q->prompt_argmax);
        if (!q->prompt_lp || !q->prompt_argmax)
            s = di_error_set(err, DI_ERR_NOMEM, "request: out of memory for prompt logprobs");
    }
    if (!s) {
        pthread_mutex_lock(&e->mu);
        s = di_scheduler_add(e->sched, ids.data, (int32_t)ids.n, max_tokens, q, &q->seq, err);
        if (!s && q->prompt_lp) s = di_scheduler_want_prompt_logits(e->sched, q->seq, err);
        if (!s && key) s = di_scheduler_set_prefix_key(e->sched, q->seq, key, err);
        if (s && q->seq) {
            /* Added but not wanted: take it back out before anyone steps. */
            di_scheduler_cancel(e->sched, q->seq, NULL);
            di_scheduler_release(e->sched, q->seq, NULL);
            q->seq = NULL;
        }
        if (!s) {
            q->id = e->next_id++;
            q->t_submit = eng_now_ms();
            q->next = e->reqs;
            if (e->reqs) e->reqs->prev = q;
            e->reqs = q;
            if (id) *id = q->id;
        }
        pthread_mutex_unlock(&e->mu);
    }
    di_tok_ids_free(&ids);
    free(key);
    if (s) request_free(e, q);
    return s;
}

static request *find_request(di_engine *e, int64_t id) {
    for (request *r = e->reqs; r; r = r->next)
        if (r->id == id) return r;
    return NULL;
}

di_status di_engine_cancel(di_engine *e, int64_t id) {
    pthread_mutex_lock(&e->mu);
    request *r = find_request(e, id);
    if (r) r->cancel_requested = true;
    pthread_mutex_unlock(&e->mu);
    return r ? DI_OK : DI_ERR_NOT_FOUND;
}

/* ---- events ------------------------------------------------------------ */

static di_finish public_finish(di_finish_reason f) {
    switch (f) {
    case DI_FINISH_NONE: return DI_FINISH_REASON_NONE;
    case DI_FINISH_STOP: return DI_FINISH_REASON_STOP;
    case DI_FINISH_LENGTH: return DI_FINISH_REASON_LENGTH;
    case DI_FINISH_CANCEL: return DI_FINISH_REASON_CANCEL;
    }
    return DI_FINISH_REASON_ERROR;
}

static void fill_stats(const request *r, di_request_stats *st) {
    const di_seq *s = r->seq;
    double t = eng_now_ms();
    st->n_prompt = s->n_prompt;
    st->n_generated = s->n_tokens - s->n_prompt;
    st->n_cached = r->n_cached;
    st->n_preemptions = s->n_preemptions;
    st->t_queued_ms = r->started ? r->t_start - r->t_submit : t - r->t_submit;
    st->t_first_token_ms = r->t_first > 0 ? r->t_first - r->t_submit : 0;
    st->t_total_ms = t - r->t_submit;
}

/* Calls the request's callback; a non-zero answer asks for cancellation. */
static void emit(request *r, di_event *ev) {
    ev->request_id = r->id;
    ev->user = r->user;
    if (r->on_event && r->on_event(ev) != 0) r->cancel_requested = true;
}

/* Removes a finished request: final bookkeeping, then the scheduler's seq. */
static void retire(di_engine *e, request *r) {
    if (r->prev) r->prev->next = r->next;
    else e->reqs = r->next;
    if (r->next) r->next->prev = r->prev;
    e->n_finished++;
    di_scheduler_release(e->sched, r->seq, NULL);
    request_free(e, r);
}

static di_status append_text(request *r, size_t *len, const char *text, size_t n) {
    if (*len + n + 1 > r->text_cap) {
        size_t cap = (*len + n + 1) * 2;
        char *p = realloc(r->text_buf, cap);
        if (!p) return DI_ERR_NOMEM;
        r->text_buf = p;
        r->text_cap = cap;
    }
    memcpy(r->text_buf + *len, text, n);
    *len += n;
    return DI_OK;
}

/* Final event of r with finish f (and, when tok >= 0, the token that ended it). */
static void finish_request(di_engine *e, request *r, di_finish f, const char *error) {
    di_event ev;
    memset(&ev, 0, sizeof ev);
    ev.token = -1;
    ev.finish = f;
    ev.error = error;
    size_t len = 0;
    di_tok_detok_out o;
    if (f != DI_FINISH_REASON_ERROR && !di_tok_detok_flush(r->detok, &o, NULL) && o.len)
        append_text(r, &len, o.text, o.len);
    ev.text = r->text_buf;
    ev.text_len = len;
    ev.tokens = r->seq->tokens + r->seq->n_prompt;
    ev.n_tokens = r->seq->n_tokens - r->seq->n_prompt;
    fill_stats(r, &ev.stats);
    emit(r, &ev);
    retire(e, r);
}

/* Applies pending cancellations (stepping thread only). */
static void apply_cancels(di_engine *e) {
    for (request *r = e->reqs, *n; r; r = n) {
        n = r->next;
        if (!r->cancel_requested) continue;
        di_scheduler_cancel(e->sched, r->seq, NULL);
        finish_request(e, r, DI_FINISH_REASON_CANCEL, NULL);
    }
}

/* ---- the step ------------------------------------------------------------ */

static bool is_stop_token(const di_engine *e, const request *r, int32_t tok) {
    if (!r->ignore_eos && di_tok_is_eog(e->tok, tok)) return true;
    for (size_t i = 0; i < r->n_stop_tokens; i++)
        if (r->stop_tokens[i] == tok) return true;
    return false;
}

/* Parallel phase: masks and samples one row on pool thread `thread`. Rows
 * of different requests are independent (own matcher, own RNG stream), and
 * each thread has its own sampler scratch, so the result never depends on
 * which thread ran it. Verify row j of a sequence samples as if its drafts
 * 0..j-1 were already generated (they sit at seq->tokens[n_tokens..]), at
 * position n_tokens + j: exactly what plain decoding would sample there
 * once they are. */
static void sample_task(void *ctx, int64_t task, int thread) {
    di_engine *e = ctx;
    sample_job *j = &e->jobs[task];
    request *r = j->r;
    di_seq *seq = r->seq;
    if (r->hist)
        for (int32_t i = seq->n_prompt; i < seq->n_tokens; i++) r->hist[i] = seq->tokens[i];
    di_sample_input in = {
        .logits = j->logits,
        .tokens = r->hist ? r->hist : seq->tokens,
        .n_tokens = seq->n_tokens + j->row,
        .n_prompt = seq->n_prompt,
        .position = (uint64_t)seq->n_tokens + (uint64_t)j->row,
        .allowed = NULL,
    };
    if (r->constraint.matcher) {
        /* the mask filled beside the forward, when it was and is still the
         * matcher's state (one job per request: constrained rows never
         * verify drafts); else filled here, to the same bits */
        uint32_t at = di_grammar_matcher_n_tokens(r->constraint.matcher) + 1;
        if (j->n_drafts == 0 && r->early_at == at) {
            in.allowed = r->early_mask;
        } else {
            uint32_t *mask = e->masks + (size_t)thread * e->mask_words;
            j->status = di_constraint_fill_mask(e->constraints, &r->constraint, mask, &j->err);
            if (j->status) return;
            in.allowed = mask;
        }
        if (j->n_drafts == 0) r->early_at = 0;
    }
    j->status = di_sampler_sample(e->samplers[thread], &r->sampling, &in, &j->res, &j->err);
    if (j->status) return;
    j->forced_end = false;
    if (r->forced) {
        /* test mode: the script decides, then the output ends (as at EOS) */
        size_t k = (size_t)(seq->n_tokens + j->row - seq->n_prompt);
        if (k < r->n_forced) j->res.token = r->forced[k];
        else j->forced_end = true;
    }
    j->token = j->res.token;
    j->accepted = false;
    if (j->row >= j->n_drafts) return; /* the decode row without drafts, or the bonus row */
    int32_t draft = seq->tokens[seq->n_tokens + j->row];
    bool match_rule = e->spec_accept == DI_SPEC_ACCEPT_GREEDY ||
                      (e->spec_accept == DI_SPEC_ACCEPT_LOSSLESS && !j->q);
    if (match_rule) {
        j->accepted = j->token == draft;
        return;
    }
    /* min(1, p/q) against the distribution the sampler draws from */
    size_t v = (size_t)e->facts.n_vocab;
    float *p = e->spec_p + (size_t)thread * 2 * v, *residual = p + v;
    j->status = di_sampler_distribution(e->samplers[thread], &r->sampling, &in, p, &j->err);
    if (j->status) return;
    float u_acc = di_rng_uniform(r->sampling.seed, DI_RNG_DOMAIN_SPEC_ACCEPT, in.position, 0);
    float u_res = di_rng_uniform(r->sampling.seed, DI_RNG_DOMAIN_SPEC_RESAMPLE, in.position, 0);
    j->status = di_spec_accept_row(e->spec_accept, p, j->q, e->facts.n_vocab, draft, u_acc, u_res, residual,
                                   &j->accepted, &j->token, &j->err);
    if (j->status || j->token == j->res.token) return;
    /* The row emits another token than the sampler's own draw: report its
     * logprob from the alternatives when it is there, else log p. */
    float lp = p[j->token] > 0 ? logf(p[j->token]) : -INFINITY;
    for (int32_t i = 0; i < j->res.n_top; i++)
        if (j->res.top[i].token == j->token) lp = j->res.top[i].logprob;
    j->res.token = j->token;
    j->res.logprob = lp;
}

/* Sequential phase: advances the grammar, streams and postprocesses one
 * sequence's new tokens: jobs[0..n_jobs) are its rows; they emit the
 * accepted drafts and the token of the first row not accepted. A stop
 * token or string ends the list there (later accepted tokens are dropped).
 * Returns the drafts accepted (for the statistics). */
static int32_t process_sample(di_engine *e, sample_job *jobs, int32_t n_jobs) {
    request *r = jobs[0].r;
    di_seq *seq = r->seq;
    if (r->t_first == 0) r->t_first = eng_now_ms();
    int32_t n_emit = 0, n_drafts = jobs[0].n_drafts;
    while (n_emit < n_jobs) {
        sample_job *j = &jobs[n_emit++];
        if (j->status || !j->accepted || j->row >= n_drafts) break;
    }
    sample_job *bad = NULL;
    for (int32_t t = 0; t < n_emit && !bad; t++)
        if (jobs[t].status) bad = &jobs[t];
    di_error err = bad ? bad->err : jobs[0].err;
    if (bad || (r->constraint.matcher &&
                !di_grammar_matcher_advance_token(r->constraint.matcher, (uint32_t)jobs[0].res.token) &&
                di_error_set(&err, DI_ERR_INTERNAL, "sampled token %d is not allowed by the grammar",
                             jobs[0].res.token))) {
        di_scheduler_cancel(e->sched, seq, NULL);
        finish_request(e, r, DI_FINISH_REASON_ERROR, err.msg);
        return 0;
    }
    /* Text of each token: text_buf[seg[t] .. seg[t + 1]). */
    int32_t toks[DI_SPEC_MAX_K + 1];
    size_t seg[DI_SPEC_MAX_K + 2];
    di_finish_reason why = DI_FINISH_NONE;
    size_t len = 0;
    int32_t n = 0;
    while (n < n_emit && why == DI_FINISH_NONE) {
        int32_t tok = jobs[n].res.token;
        seg[n] = len;
        toks[n++] = tok;
        if (is_stop_token(e, r, tok) || jobs[n - 1].forced_end) {
            why = DI_FINISH_STOP;
            break;
        }
        di_tok_detok_out o;
        if (!di_tok_detok_push(r->detok, tok, &o, NULL)) {
            if (o.len) append_text(r, &len, o.text, o.len);
            if (o.stop_index >= 0) why = DI_FINISH_STOP;
        }
        /* a complete grammar that nothing can extend ends the output */
        if (r->constraint.matcher && di_grammar_matcher_is_terminated(r->constraint.matcher))
            why = DI_FINISH_STOP;
    }
    seg[n] = len;
    di_finish_reason final = DI_FINISH_NONE;
    if (di_scheduler_postprocess_n(e->sched, seq, toks, n, why, &final, &err)) {
        di_scheduler_cancel(e->sched, seq, NULL);
        finish_request(e, r, DI_FINISH_REASON_ERROR, err.msg);
        return 0;
    }
    e->n_generated_tokens += n;
    for (int32_t t = 0; t < n; t++) {
        di_sample_result *res = &jobs[t].res;
        di_event ev;
        memset(&ev, 0, sizeof ev);
        ev.token = res->token;
        ev.logprob = res->logprob;
        ev.n_top = res->n_top;
        di_token_prob top[DI_SAMPLER_MAX_TOP_LOGPROBS];
        for (int i = 0; i < res->n_top; i++) {
            top[i].token = res->top[i].token;
            top[i].logprob = res->top[i].logprob;
        }
        ev.top = top;
        ev.text = r->text_buf + seg[t];
        ev.text_len = seg[t + 1] - seg[t];
        if (t < n - 1 || final == DI_FINISH_NONE) {
            emit(r, &ev);
            continue;
        }
        /* The last token's text and the held-back text travel in one event
         * (after a stop string the detokenizer holds nothing back). */
        size_t end = seg[n];
        di_tok_detok_out o;
        if (!di_tok_detok_flush(r->detok, &o, NULL) && o.len) append_text(r, &end, o.text, o.len);
        ev.text = r->text_buf + seg[t];
        ev.text_len = end - seg[t];
        ev.finish = public_finish(final);
        ev.tokens = seq->tokens + seq->n_prompt;
        ev.n_tokens = seq->n_tokens - seq->n_prompt;
        fill_stats(r, &ev.stats);
        if (r->prompt_lp) {
            /* Every prompt row has run by the time a token is sampled. */
            ev.prompt_logprobs = r->prompt_lp;
            ev.prompt_argmax = r->prompt_argmax;
            ev.n_prompt_logprobs = seq->n_prompt - 1;
        }
        emit(r, &ev);
        retire(e, r);
    }
    return n - 1 < n_drafts ? n - 1 : n_drafts;
}

/* log_softmax(logits)[target] (accumulated in double) and the argmax (the
 * lowest id on ties) of one row of raw logits. */
static void score_row(const float *logits, int32_t n_vocab, int32_t target, float *logprob,
                      int32_t *argmax) {
    int32_t best = 0;
    for (int32_t v = 1; v < n_vocab; v++)
        if (logits[v] > logits[best]) best = v;
    double mx = logits[best], sum = 0.0;
    for (int32_t v = 0; v < n_vocab; v++) sum += exp((double)logits[v] - mx);
    *logprob = (float)((double)logits[target] - mx - log(sum));
    *argmax = best;
}

/* Teacher-forced scoring of this step's prompt rows for prompt_logprobs
 * requests: the row at position p predicts prompt token p + 1. A recompute
 * after preemption rewrites the same entries with the same values. Called
 * under the lock after the forward; slots are those of this step's batch. */
static void score_prompt_rows(di_engine *e, const di_batch *b) {
    bool any = false;
    for (request *r = e->reqs; r; r = r->next) {
        const di_seq *q = r->seq;
        if (!r->prompt_lp || q->status != DI_SEQ_RUNNING || q->slot < 0 || q->slot >= b->n_seq_slots)
            continue;
        e->slot_req[q->slot] = r;
        any = true;
    }
    if (!any) return;
    for (int32_t i = 0; i < b->n_rows; i++) {
        int32_t li = e->logit_index[i];
        if (li < 0) continue;
        request *r = e->slot_req[b->seq[i]];
        if (!r) continue;
        const di_seq *q = r->seq;
        int32_t p = b->pos[i];
        if (p < 0 || p >= q->n_prompt - 1) continue;
        score_row(e->logits + (size_t)li * (size_t)e->facts.n_vocab, e->facts.n_vocab, q->tokens[p + 1],
                  &r->prompt_lp[p], &r->prompt_argmax[p]);
    }
    for (int32_t i = 0; i < b->n_seq_slots; i++) e->slot_req[i] = NULL;
}

/* Data parallelism: the processes of the group agree whether anyone has
 * rows this step (and whether anyone failed to schedule). *run: a forward
 * is due here, with our rows or as a placeholder. */
static di_status dp_vote(di_engine *e, di_status s, int32_t n_rows, int *run, di_error *err) {
    int64_t v[2] = {n_rows > 0, s != DI_OK};
    di_error e2;
    di_status s2 = di_dist_allreduce_i64(e->params.dist, v, 2, DI_DIST_MAX, &e2);
    if (s) return s;
    if (s2) return di_error_set(err, s2, "%s", e2.msg);
    if (v[1]) return di_error_set(err, DI_ERR_IO, "engine: another process of the group failed its step");
    *run = v[0] != 0;
    return DI_OK;
}

/* Points the batch's image positions at their rows (di_batch.embd); under
 * the lock. The rows live in the request until it is freed. */
static void attach_image_rows(di_engine *e, di_batch *b) {
    bool any = false;
    for (request *r = e->reqs; r; r = r->next) {
        const di_seq *q = r->seq;
        if (!r->img_index || q->status != DI_SEQ_RUNNING || q->slot < 0 || q->slot >= b->n_seq_slots) continue;
        e->slot_req[q->slot] = r;
        any = true;
    }
    if (!any) return;
    for (int32_t i = 0; i < b->n_rows; i++) {
        request *r = e->slot_req[b->seq[i]];
        const int32_t p = b->pos[i];
        e->row_embd[i] = r && p < r->seq->n_prompt && r->img_index[p] >= 0
                             ? r->img_rows + (int64_t)r->img_index[p] * e->facts.n_embd
                             : NULL;
    }
    for (int32_t i = 0; i < b->n_seq_slots; i++) e->slot_req[i] = NULL;
    b->embd = e->row_embd;
}

/* ---- grammar masks beside the forward ------------------------------------ */

/* A constrained row's mask depends only on the tokens its matcher has
 * consumed, all known when the step is scheduled, not on the forward's
 * logits: xgrammar-style engines fill it on the CPU while the GPU runs the
 * forward. Here the forward takes both cores, so the masks go to the pool
 * as side work (base/threadpool.h): a worker with no kernel task to claim
 * (a straggler's tail, a serial stage, the step's own serial parts) fills
 * one, and what is left when the forward returns is filled by the stepping
 * thread before sampling. The bits are di_constraint_fill_mask's either
 * way, so outputs never change; only where the time is spent does. */

/* Fills the early mask of e->early_reqs[task] (pool side task; touches
 * only that request's matcher, which nothing else uses during a forward).
 * A failure leaves no mask: sampling fills it again and reports it. */
static void early_mask_task(void *ctx, int64_t task, int thread) {
    (void)thread;
    di_engine *e = ctx;
    request *r = e->early_reqs[task];
    di_error err;
    if (!di_constraint_fill_mask(e->constraints, &r->constraint, r->early_mask, &err))
        r->early_at = di_grammar_matcher_n_tokens(r->constraint.matcher) + 1;
}

/* The constrained requests that sample one row this step, their early
 * masks cleared (lock held). Returns how many went to e->early_reqs. A
 * request without room for a mask (no memory) is left to sampling. */
static int32_t early_masks_collect(di_engine *e, const di_sched_output *out) {
    int32_t n = 0;
    for (int32_t i = 0; i < out->n_samples && n < e->params.max_seqs; i++) {
        request *r = out->sample_seqs[i]->user;
        r->early_at = 0;
        if (!r->constraint.matcher || r->cancel_requested || out->sample_n_rows[i] != 1) continue;
        if (!r->early_mask && !(r->early_mask = di_malloc_array(e->mask_words, sizeof(uint32_t)))) continue;
        e->early_reqs[n++] = r;
    }
    return n;
}

di_status di_engine_step(di_engine *e, di_error *err) {
    pthread_mutex_lock(&e->mu);
    apply_cancels(e);
    di_sched_output out;
    double t_prop = eng_now_ms();
    di_status s = e->drafter ? eng_spec_propose(e, err) : DI_OK;
    e->t_propose_ms = eng_now_ms() - t_prop;
    e->spec_stats.spec_draft_ms += e->t_propose_ms;
    if (s) {
        pthread_mutex_unlock(&e->mu);
        return s;
    }
    s = di_scheduler_schedule(e->sched, &out, err);
    if (e->params.dist) {
        int run = 0;
        s = dp_vote(e, s, s ? 0 : out.batch.n_rows, &run, err);
        if (!s && run && out.batch.n_rows == 0) {
            /* placeholder: others have rows; join their MoE exchanges */
            pthread_mutex_unlock(&e->mu);
            di_batch none = {0};
            return di_model_forward(e->ctx, e->kv, &none, NULL, e->pool, err);
        }
    }
    if (s || out.batch.n_rows == 0) {
        pthread_mutex_unlock(&e->mu);
        return s;
    }
    double t_now = eng_now_ms(), t_step0 = t_now;
    for (request *r = e->reqs; r; r = r->next) {
        if (!r->started && r->seq->status == DI_SEQ_RUNNING) {
            r->started = true;
            r->t_start = t_now;
            r->n_cached = r->seq->n_cached_prefix;
            e->n_prompt_tokens += r->seq->n_prompt;
        }
    }
    attach_image_rows(e, &out.batch);
    int32_t n_early = e->params.no_overlap ? 0 : early_masks_collect(e, &out);
    e->n_masks_early += n_early;
    pthread_mutex_unlock(&e->mu);
    di_threadpool_side_begin(e->pool, n_early, early_mask_task, e);

    /* Map each batch row to its logits row (forward writes them in row order). */
    int32_t n_logits = 0;
    for (int32_t i = 0; i < out.batch.n_rows; i++)
        e->logit_index[i] = out.batch.want_logits[i] ? n_logits++ : -1;
    if ((size_t)n_logits > e->logits_rows) {
        /* prompt_logprobs rows: only the stepping thread touches e->logits. */
        float *l = di_realloc_array(e->logits, (size_t)n_logits * (size_t)e->facts.n_vocab, sizeof(float));
        if (l) {
            e->logits = l;
            e->logits_rows = (size_t)n_logits;
        } else {
            s = di_error_set(err, DI_ERR_NOMEM, "engine: out of memory for %d rows of logits", n_logits);
        }
    }
    double t0 = eng_now_ms();
    if (!s) s = di_model_forward(e->ctx, e->kv, &out.batch, e->logits, e->pool, err);
    const double t_fwd = eng_now_ms() - t0;
    e->t_forward_ms += t_fwd;
    /* before anything reads or frees the matchers (outside the forward's
     * time: what the workers left is filled here) */
    di_threadpool_side_end(e->pool);

    pthread_mutex_lock(&e->mu);
    if (s) {
        /* The requests of this step cannot make progress: fail them. */
        di_scheduler_abort_step(e->sched);
        for (int32_t i = 0; i < out.n_samples; i++) {
            request *r = out.sample_seqs[i]->user;
            di_scheduler_cancel(e->sched, r->seq, NULL);
            finish_request(e, r, DI_FINISH_REASON_ERROR, err ? err->msg : "forward failed");
        }
        pthread_mutex_unlock(&e->mu);
        return s;
    }
    score_prompt_rows(e, &out.batch);
    e->n_jobs = 0;
    size_t v = (size_t)e->facts.n_vocab;
    for (int32_t i = 0; i < out.n_samples; i++) {
        request *r = out.sample_seqs[i]->user;
        if (r->cancel_requested) {
            di_scheduler_cancel(e->sched, r->seq, NULL);
            finish_request(e, r, DI_FINISH_REASON_CANCEL, NULL);
            continue;
        }
        /* one job per row: the decode row, then one per draft */
        int32_t nd = out.sample_n_rows[i] - 1;
        const di_spec_drafts *d = nd > 0 && r->spec_draft >= 0 ? &e->spec_drafts[r->spec_draft] : NULL;
        for (int32_t j = 0; j <= nd; j++) {
            int32_t li = e->logit_index[out.sample_rows[i] + j];
            e->jobs[e->n_jobs++] = (sample_job){
                .r = r, .logits = e->logits + (size_t)li * v, .row = j, .n_drafts = nd,
                .q = d && d->has_q && j < nd ? d->q + (size_t)j * v : NULL};
        }
        r->spec_draft = -1;
    }
    /* Sampling needs no lock: only this thread touches the jobs' requests,
     * and submitters only add new requests. */
    pthread_mutex_unlock(&e->mu);
    di_threadpool_run(e->pool, e->n_jobs, sample_task, e);
    pthread_mutex_lock(&e->mu);
    e->n_spec_out = 0;
    for (int32_t i = 0; i < e->n_jobs && !s;) {
        sample_job *j = &e->jobs[i];
        di_seq *q = j->r->seq;
        int32_t n_rows = j->n_drafts + 1, slot = q->slot, n_before = q->n_tokens, row0 = -1;
        int64_t id = q->id;
        for (int32_t k = 0; k < out.n_samples; k++)
            if (out.sample_seqs[k] == q) row0 = out.sample_rows[k];
        int32_t n_acc = process_sample(e, j, n_rows);
        if (e->drafter) s = eng_spec_settle(e, slot, id, row0, n_rows, n_acc, n_before, err);
        i += n_rows;
    }
    if (!s && e->drafter && e->drafter->ops->after_forward)
        e->drafter->ops->after_forward(e->drafter, &out.batch, e->spec_out, e->n_spec_out);
    /* What a client waits between tokens: forward, sampling and streaming
     * of the step, which is what the latency target bounds. */
    e->t_last_step_ms = eng_now_ms() - t_step0;
    /* decode steps feed the schedule's slope and sampler estimates */
    if (e->vlen && out.n_prefill_tokens == 0 && out.n_samples > 0)
        di_spec_vlen_observe(e->vlen, out.n_samples, out.batch.n_rows, t_fwd,
                             e->t_last_step_ms - t_fwd + e->t_propose_ms);
    di_scheduler_observe_step(e->sched, out.n_decode_tokens, out.n_prefill_tokens, e->t_last_step_ms);
    e->n_prefill_rows += out.n_prefill_tokens;
    if (e->params.check_integrity) s = di_scheduler_check_integrity(e->sched, err);
    pthread_mutex_unlock(&e->mu);
    return s;
}

struct di_dist *di_engine_group(di_engine *e) { return e->params.dist; }

bool di_engine_idle(di_engine *e) {
    pthread_mutex_lock(&e->mu);
    bool idle = e->reqs == NULL;
    pthread_mutex_unlock(&e->mu);
    return idle;
}

di_status di_engine_run(di_engine *e, di_error *err) {
    for (;;) {
        int64_t busy = !di_engine_idle(e);
        if (e->params.dist) {
            di_status s = di_dist_allreduce_i64(e->params.dist, &busy, 1, DI_DIST_MAX, err);
            if (s) return s;
        }
        if (!busy) return DI_OK;
        di_status s = di_engine_step(e, err);
        if (s) return s;
    }
}

void di_engine_get_stats(di_engine *e, di_engine_stats *out) {
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&e->mu);
    di_scheduler_stats ss;
    di_scheduler_get_stats(e->sched, &ss);
    out->n_waiting = ss.n_waiting;
    out->n_running = ss.n_running;
    out->kv_blocks_total = e->params.kv_tokens / e->params.block_size;
    out->kv_blocks_free = ss.n_blocks_free;
    out->kv_blocks_cached = ss.n_blocks_cached;
    out->n_steps = ss.n_steps;
    out->n_preemptions = ss.n_preemptions;
    out->n_prompt_tokens = e->n_prompt_tokens;
    out->n_prefill_rows = e->n_prefill_rows;
    out->n_prefix_hit_tokens = ss.n_prefix_hit_tokens;
    out->n_generated_tokens = e->n_generated_tokens;
    out->n_requests_finished = e->n_finished;
    out->t_forward_ms = e->t_forward_ms;
    out->n_deferred_steps = ss.n_deferred_steps;
    out->step_fixed_ms = ss.step_fixed_ms;
    out->step_decode_ms = ss.step_decode_ms;
    out->step_prefill_ms = ss.step_prefill_ms;
    out->last_step_ms = e->t_last_step_ms;
    out->n_disk_hit_tokens = ss.n_tier_hit_tokens;
    out->n_image_encodes = __atomic_load_n(&e->n_image_encodes, __ATOMIC_RELAXED);
    if (e->image_cache) {
        di_image_cache_stats is;
        di_image_cache_get_stats(e->image_cache, &is);
        out->n_image_cache_hits = is.hits;
        out->image_cache_entries = is.entries;
        out->image_cache_bytes = is.bytes;
    }
    if (e->tier) {
        di_kv_disk_stats ds;
        di_engine_tier_get_stats(e->tier, &ds);
        out->kv_disk_on = true;
        out->kv_disk_writes_disabled = ds.writes_disabled;
        out->kv_disk_writes = ds.n_writes;
        out->kv_disk_write_errors = ds.n_write_errors;
        out->kv_disk_hits = ds.n_hits;
        out->kv_disk_misses = ds.n_misses;
        out->kv_disk_rejected = ds.n_rejected;
        out->kv_disk_removed = ds.n_removed;
        out->kv_disk_bytes = ds.bytes_used;
    }
    out->spec_drafted = e->spec_stats.spec_drafted;
    out->spec_verified = e->spec_stats.spec_verified;
    out->spec_accepted = e->spec_stats.spec_accepted;
    out->spec_verify_steps = e->spec_stats.spec_verify_steps;
    memcpy(out->spec_verified_at, e->spec_stats.spec_verified_at, sizeof out->spec_verified_at);
    memcpy(out->spec_accepted_at, e->spec_stats.spec_accepted_at, sizeof out->spec_accepted_at);
    out->spec_draft_ms = e->spec_stats.spec_draft_ms;
    out->spec_conf_sum = e->spec_stats.spec_conf_sum;
    out->spec_plan_rows = e->spec_stats.spec_plan_rows;
    out->n_masks_early = e->n_masks_early;
    /* the engine's pool runs no side work but the early masks */
    out->n_masks_overlapped = di_threadpool_side_by_workers(e->pool);
    pthread_mutex_unlock(&e->mu);
}

di_status di_engine_check_integrity(di_engine *e, di_error *err) {
    pthread_mutex_lock(&e->mu);
    di_status s = di_scheduler_check_integrity(e->sched, err);
    pthread_mutex_unlock(&e->mu);
    return s;
}

/* ---- model facts and text helpers --------------------------------------- */

void di_engine_describe(di_engine *e, di_model_desc *out) {
    memset(out, 0, sizeof *out);
    out->arch = e->facts.arch;
    out->n_vocab = e->facts.n_vocab;
    out->n_ctx_train = e->facts.n_ctx_train;
    out->n_ctx = e->n_ctx;
    out->n_layers = e->facts.n_layers;
    out->n_embd = e->facts.n_embd;
    out->n_threads = di_threadpool_n_threads(e->pool);
    out->kernels = e->facts.kernels;
    out->device = e->facts.device;
}
