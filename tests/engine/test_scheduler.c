/* engine/scheduler driven by a fake model (fake_model.h) whose output is a
 * function of the KV it reads through the block tables. Every test checks
 * the outputs against the model function applied to each request alone, and
 * the scheduler's integrity after every step. */
#include "test_util.h"

#include "engine/scheduler.h"
#include "fake_model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum {
    VOCAB = 50,
    STOP = 0,        /* the "end of sequence" token: ends ~2% of steps */
    MAX_PROMPT = 160,
    MAX_GEN = 64,
};

typedef struct request {
    int32_t prompt[MAX_PROMPT];
    int32_t n_prompt, max_tokens;
    int32_t stop;               /* token that ends it (STOP), or -1 for none */
    /* What the request produces alone (fake_reference_next, greedy). */
    int32_t expect[MAX_GEN];
    int32_t n_expect;
    di_finish_reason expect_finish;
    /* What the scheduler produced. */
    di_seq *seq;
    bool done;
    di_finish_reason finish;
    int32_t out[MAX_GEN];
    int32_t n_out;
    int32_t n_cached_prefix;
    int32_t n_preemptions;
} request;

static void request_init_stop(request *r, const int32_t *prompt, int32_t n_prompt,
                              int32_t max_tokens, int32_t stop) {
    int32_t copy[MAX_PROMPT];
    assert_true(n_prompt <= MAX_PROMPT);
    memcpy(copy, prompt, (size_t)n_prompt * sizeof *prompt); /* prompt may alias r */
    prompt = copy;
    memset(r, 0, sizeof *r);
    r->stop = stop;
    assert_true(n_prompt <= MAX_PROMPT && max_tokens <= MAX_GEN);
    memcpy(r->prompt, prompt, (size_t)n_prompt * sizeof *prompt);
    r->n_prompt = n_prompt;
    r->max_tokens = max_tokens;
    int32_t toks[MAX_PROMPT + MAX_GEN];
    memcpy(toks, prompt, (size_t)n_prompt * sizeof *prompt);
    int32_t n = n_prompt;
    r->expect_finish = DI_FINISH_LENGTH;
    for (int32_t g = 0; g < max_tokens; g++) {
        int32_t t = fake_reference_next(toks, n, VOCAB);
        toks[n++] = t;
        r->expect[r->n_expect++] = t;
        if (t == stop) {
            r->expect_finish = DI_FINISH_STOP;
            break;
        }
    }
}

static void request_init(request *r, const int32_t *prompt, int32_t n_prompt, int32_t max_tokens) {
    request_init_stop(r, prompt, n_prompt, max_tokens, STOP);
}

static void request_random(request *r, int32_t max_prompt, int32_t max_gen) {
    int32_t p[MAX_PROMPT];
    int32_t n = 1 + rand() % max_prompt;
    for (int32_t i = 0; i < n; i++) p[i] = 1 + rand() % (VOCAB - 1);
    request_init(r, p, n, 1 + rand() % max_gen);
}

static void assert_matches_reference(const request *r) {
    assert_true(r->done);
    assert_int_equal(r->finish, r->expect_finish);
    assert_int_equal(r->n_out, r->n_expect);
    assert_memory_equal(r->out, r->expect, (size_t)r->n_expect * sizeof *r->out);
}

typedef struct harness {
    di_scheduler_config cfg;
    di_scheduler *s;
    fake_model m;
    int32_t *next;             /* (max_tokens_per_step) model output per row */
    di_sched_output last;      /* the last step's plan */
    int32_t n_steps, n_mixed_steps, max_rows;
} harness;

static di_scheduler_config config(int32_t n_blocks, int32_t block_size, int32_t budget,
                                  int32_t max_running, bool prefix_cache) {
    di_scheduler_config c = {
        .n_blocks = n_blocks,
        .block_size = block_size,
        .max_tokens_per_step = budget,
        .max_running = max_running,
        .max_context = MAX_PROMPT + MAX_GEN,
        .prefix_cache = prefix_cache,
    };
    return c;
}

static void h_open(harness *h, di_scheduler_config cfg) {
    memset(h, 0, sizeof *h);
    di_error err;
    h->cfg = cfg;
    assert_int_equal(di_scheduler_create(&cfg, &h->s, &err), DI_OK);
    assert_true(fake_model_init(&h->m, cfg.n_blocks, cfg.block_size, cfg.max_running, VOCAB));
    h->next = calloc((size_t)cfg.max_tokens_per_step, sizeof *h->next);
    assert_non_null(h->next);
}

static void h_close(harness *h) {
    di_scheduler_free(h->s);
    fake_model_free(&h->m);
    free(h->next);
}

static void h_add(harness *h, request *r) {
    di_error err;
    di_status st = di_scheduler_add(h->s, r->prompt, r->n_prompt, r->max_tokens, r, &r->seq, &err);
    if (st) fail_msg("add: %s", err.msg);
}

static void h_check(harness *h) {
    di_error err;
    if (di_scheduler_check_integrity(h->s, &err)) fail_msg("integrity: %s", err.msg);
}

/* Copies a finished sequence's output into its request and frees it. */
static void h_collect(harness *h, request *r) {
    di_error err;
    di_seq *q = r->seq;
    assert_int_equal(q->status, DI_SEQ_FINISHED);
    r->done = true;
    r->finish = q->finish;
    r->n_out = q->n_tokens - q->n_prompt;
    memcpy(r->out, q->tokens + q->n_prompt, (size_t)r->n_out * sizeof *r->out);
    r->n_cached_prefix = q->n_cached_prefix;
    r->n_preemptions = q->n_preemptions;
    assert_int_equal(di_scheduler_release(h->s, q, &err), DI_OK);
    r->seq = NULL;
}

/* One engine step: schedule, check the plan's shape, run the fake model,
 * postprocess every sample (STOP ends a request), check integrity.
 * Returns the number of rows. */
static int32_t h_step(harness *h) {
    di_error err;
    di_sched_output *o = &h->last;
    if (di_scheduler_schedule(h->s, o, &err)) fail_msg("schedule: %s", err.msg);
    const di_batch *b = &o->batch;
    assert_true(b->n_rows <= h->cfg.max_tokens_per_step);
    assert_int_equal(b->n_rows, o->n_decode_tokens + o->n_prefill_tokens);
    /* Decode rows come first, and each of them is sampled. */
    int32_t n_logits = 0;
    for (int32_t r = 0; r < b->n_rows; r++) {
        n_logits += b->want_logits[r];
        if (r < o->n_decode_tokens) assert_true(b->want_logits[r]);
    }
    assert_int_equal(n_logits, o->n_samples);
    for (int32_t i = 0; i < o->n_samples; i++) {
        int32_t r = o->sample_rows[i];
        const di_seq *q = o->sample_seqs[i];
        assert_true(b->want_logits[r]);
        assert_int_equal(b->seq[r], q->slot);
        assert_int_equal(b->pos[r], q->n_tokens - 1);
    }
    char why[256];
    if (!fake_model_forward(&h->m, b, h->next, why, sizeof why)) fail_msg("forward: %s", why);
    for (int32_t i = 0; i < o->n_samples; i++) {
        di_seq *q = o->sample_seqs[i];
        int32_t tok = h->next[o->sample_rows[i]];
        const request *r = q->user;
        di_finish_reason fin;
        if (di_scheduler_postprocess(h->s, q, tok, tok == r->stop ? DI_FINISH_STOP : DI_FINISH_NONE,
                                     &fin, &err))
            fail_msg("postprocess: %s", err.msg);
        if (fin != DI_FINISH_NONE) h_collect(h, q->user);
    }
    h_check(h);
    h->n_steps++;
    if (o->n_decode_tokens > 0 && o->n_prefill_tokens > 0) h->n_mixed_steps++;
    if (b->n_rows > h->max_rows) h->max_rows = b->n_rows;
    return b->n_rows;
}

static void h_run(harness *h) {
    for (int32_t guard = 0; !di_scheduler_is_idle(h->s); guard++) {
        assert_true(guard < 100000);
        int32_t rows = h_step(h);
        /* Not idle means some sequence can always make progress. */
        assert_true(rows > 0 || di_scheduler_is_idle(h->s));
    }
}

/* Idle: every block is free or cached-and-unreferenced. */
static void h_assert_all_blocks_reclaimable(harness *h) {
    di_scheduler_stats st;
    di_scheduler_get_stats(h->s, &st);
    assert_true(di_scheduler_is_idle(h->s));
    assert_int_equal(st.n_blocks_free + st.n_blocks_evictable, h->cfg.n_blocks);
    assert_int_equal(st.n_blocks_cached, st.n_blocks_evictable);
    if (!h->cfg.prefix_cache) assert_int_equal(st.n_blocks_free, h->cfg.n_blocks);
    h_check(h);
}

/* ---- tests ------------------------------------------------------------- */

static void single_request_matches_reference(void **state) {
    (void)state;
    harness h;
    h_open(&h, config(16, 4, 64, 4, true));
    request r;
    int32_t p[10] = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3};
    request_init(&r, p, 10, 20);
    h_add(&h, &r);
    h_run(&h);
    assert_matches_reference(&r);
    assert_int_equal(h.n_steps, r.n_out); /* one prefill step, then one per token */
    h_assert_all_blocks_reclaimable(&h);
    h_close(&h);
}

static void run_concurrent(bool prefix_cache, unsigned seed) {
    enum { N = 24 };
    harness h;
    /* 24 blocks of 4 = 96 tokens for 24 requests of up to 70 tokens each. */
    h_open(&h, config(24, 4, 32, 8, prefix_cache));
    srand(seed);
    request *rs = calloc(N, sizeof *rs);
    assert_non_null(rs);
    for (int i = 0; i < N; i++) {
        request_random(&rs[i], 40, 30);
        h_add(&h, &rs[i]);
    }
    h_run(&h);
    for (int i = 0; i < N; i++) assert_matches_reference(&rs[i]);
    di_scheduler_stats st;
    di_scheduler_get_stats(h.s, &st);
    assert_true(st.n_preemptions > 0); /* the pool really was too small */
    if (prefix_cache) assert_true(st.n_prefix_hit_tokens > 0); /* recompute hit its own blocks */
    h_assert_all_blocks_reclaimable(&h);
    free(rs);
    h_close(&h);
}

static void concurrent_requests_in_small_pool_preempt_and_match_reference(void **state) {
    (void)state;
    run_concurrent(false, 11);
    run_concurrent(true, 11);
    run_concurrent(true, 12);
}

static void shared_system_prompt_is_computed_once(void **state) {
    (void)state;
    enum { SYS = 22, N = 4 };
    harness h;
    h_open(&h, config(64, 4, 256, 8, true));
    int32_t p[SYS + 6];
    for (int i = 0; i < SYS; i++) p[i] = 1 + (i * 7) % (VOCAB - 1);
    request rs[N];
    for (int k = 0; k < N; k++) {
        for (int i = 0; i < 6; i++) p[SYS + i] = 1 + (k * 13 + i * 3) % (VOCAB - 1);
        request_init(&rs[k], p, SYS + 6, 8);
    }
    h_add(&h, &rs[0]);
    h_run(&h);
    di_scheduler_stats before;
    di_scheduler_get_stats(h.s, &before);
    for (int k = 1; k < N; k++) h_add(&h, &rs[k]);
    h_run(&h);
    di_scheduler_stats after;
    di_scheduler_get_stats(h.s, &after);
    assert_int_equal(rs[0].n_cached_prefix, 0);
    for (int k = 0; k < N; k++) assert_matches_reference(&rs[k]);
    /* The 5 full blocks of the system prompt (20 of its 22 tokens) are reused;
     * the 6th block mixes system and user tokens and is computed. */
    for (int k = 1; k < N; k++) assert_int_equal(rs[k].n_cached_prefix, 20);
    assert_int_equal(after.n_prefix_hit_tokens - before.n_prefix_hit_tokens, 3 * 20);
    int64_t rows = after.n_computed_tokens - before.n_computed_tokens;
    int64_t want_rows = 0;
    for (int k = 1; k < N; k++) want_rows += rs[k].n_prompt - 20 + rs[k].n_out - 1;
    assert_int_equal(rows, want_rows);
    h_assert_all_blocks_reclaimable(&h);
    h_close(&h);
}

/* A prompt that is all full cached blocks still computes its last token
 * (that is where the logits come from), and never writes a shared block. */
static void fully_cached_prompt_still_computes_its_last_token(void **state) {
    (void)state;
    harness h;
    h_open(&h, config(32, 4, 64, 4, true));
    int32_t p[9] = {5, 6, 7, 8, 9, 10, 11, 12, 13};
    request a, b, c;
    request_init(&a, p, 8, 6);
    request_init(&b, p, 8, 6);
    request_init(&c, p, 9, 6);
    h_add(&h, &a);
    h_run(&h);
    h_add(&h, &b);
    h_run(&h);
    h_add(&h, &c);
    h_run(&h);
    assert_matches_reference(&a);
    assert_matches_reference(&b);
    assert_matches_reference(&c);
    assert_int_equal(b.n_cached_prefix, 4); /* block 2 holds the last token */
    assert_int_equal(c.n_cached_prefix, 8); /* one token left to compute */
    h_assert_all_blocks_reclaimable(&h);
    h_close(&h);
}

/* Identical prompts admitted in the same step both compute; the second's
 * blocks stay private and everything is still released. */
static void identical_prompts_at_once_are_both_correct(void **state) {
    (void)state;
    harness h;
    h_open(&h, config(32, 4, 64, 4, true));
    int32_t p[13] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13};
    request a, b;
    request_init(&a, p, 13, 10);
    request_init(&b, p, 13, 10);
    h_add(&h, &a);
    h_add(&h, &b);
    h_run(&h);
    assert_matches_reference(&a);
    assert_matches_reference(&b);
    h_assert_all_blocks_reclaimable(&h);
    h_close(&h);
}

static void run_chunked(int32_t budget, request *rs, int n, harness *h) {
    h_open(h, config(128, 4, budget, 8, false));
    for (int i = 0; i < n; i++) h_add(h, &rs[i]);
    h_run(h);
    for (int i = 0; i < n; i++) assert_matches_reference(&rs[i]);
    h_assert_all_blocks_reclaimable(h);
}

static void chunked_prefill_matches_unchunked(void **state) {
    (void)state;
    enum { N = 5 };
    request big[N], small[N];
    srand(5);
    for (int i = 0; i < N; i++) {
        int32_t p[MAX_PROMPT];
        int32_t n = 60 + rand() % 40;
        for (int32_t k = 0; k < n; k++) p[k] = 1 + rand() % (VOCAB - 1);
        request_init(&big[i], p, n, 12);
        request_init(&small[i], p, n, 12);
    }
    harness hb, hs;
    run_chunked(1024, big, N, &hb);
    run_chunked(7, small, N, &hs);
    for (int i = 0; i < N; i++) {
        assert_int_equal(small[i].n_out, big[i].n_out);
        assert_memory_equal(small[i].out, big[i].out, (size_t)big[i].n_out * sizeof *big[i].out);
    }
    assert_true(hb.max_rows > 7 * 10); /* unchunked: whole prompts in one step */
    assert_true(hs.max_rows <= 7);
    assert_true(hs.n_mixed_steps > 0); /* decode and prefill shared steps */
    h_close(&hb);
    h_close(&hs);
}

static void decode_rows_come_before_prefill_chunks(void **state) {
    (void)state;
    harness h;
    h_open(&h, config(64, 4, 6, 4, false));
    request a, b;
    int32_t pa[4] = {1, 2, 3, 4}, pb[30];
    for (int i = 0; i < 30; i++) pb[i] = 1 + i % (VOCAB - 1);
    request_init(&a, pa, 4, 40);
    request_init(&b, pb, 30, 3);
    h_add(&h, &a);
    h_step(&h); /* a's prefill, sampled */
    h_add(&h, &b);
    h_step(&h);
    if (!a.done) {
        assert_int_equal(h.last.n_decode_tokens, 1);
        assert_int_equal(h.last.n_prefill_tokens, 5);
        assert_int_equal(h.last.batch.seq[0], a.seq->slot);
        assert_int_equal(h.last.batch.pos[1], 0); /* b starts after a's decode row */
    }
    h_run(&h);
    assert_matches_reference(&a);
    assert_matches_reference(&b);
    h_close(&h);
}

static void cancel_frees_blocks(harness *h, request *r) {
    di_error err;
    assert_int_equal(di_scheduler_cancel(h->s, r->seq, &err), DI_OK);
    assert_int_equal(r->seq->status, DI_SEQ_FINISHED);
    assert_int_equal(r->seq->finish, DI_FINISH_CANCEL);
    assert_int_equal(r->seq->n_blocks, 0);
    h_check(h);
    h_collect(h, r);
}

static void cancel_mid_prefill_frees_blocks_at_once(void **state) {
    (void)state;
    for (int pc = 0; pc < 2; pc++) {
        harness h;
        h_open(&h, config(32, 4, 8, 4, pc));
        request r;
        int32_t p[40];
        for (int i = 0; i < 40; i++) p[i] = 1 + i % (VOCAB - 1);
        request_init(&r, p, 40, 5);
        h_add(&h, &r);
        h_step(&h);
        h_step(&h);
        assert_int_equal(r.seq->n_computed, 16);
        assert_int_equal(r.seq->n_blocks, 4);
        cancel_frees_blocks(&h, &r);
        assert_true(r.n_out == 0);
        h_assert_all_blocks_reclaimable(&h);
        h_close(&h);
    }
}

static void cancel_mid_decode_frees_blocks_and_others_finish(void **state) {
    (void)state;
    harness h;
    h_open(&h, config(32, 4, 16, 4, false));
    request a, b;
    int32_t pa[9] = {9, 8, 7, 6, 5, 4, 3, 2, 1}, pb[5] = {1, 2, 3, 4, 5};
    request_init(&a, pa, 9, 40);
    request_init(&b, pb, 5, 12);
    h_add(&h, &a);
    h_add(&h, &b);
    for (int i = 0; i < 4 && !a.done; i++) h_step(&h);
    assert_false(a.done);
    di_scheduler_stats before, after;
    di_scheduler_get_stats(h.s, &before);
    int32_t a_blocks = a.seq->n_blocks;
    int32_t generated = a.seq->n_tokens - a.seq->n_prompt;
    assert_true(generated >= 3);
    /* a's generated tokens so far are what it would produce alone. */
    assert_memory_equal(a.seq->tokens + 9, a.expect, (size_t)generated * sizeof(int32_t));
    cancel_frees_blocks(&h, &a);
    di_scheduler_get_stats(h.s, &after);
    assert_int_equal(after.n_blocks_free, before.n_blocks_free + a_blocks);
    h_run(&h);
    assert_matches_reference(&b);
    h_assert_all_blocks_reclaimable(&h);
    h_close(&h);
}

/* Blocks reserved for a drafter's positions (di_scheduler_reserve): the
 * table covers what was asked while blocks last, never more than the
 * sequence may hold; a schedule that does not give the sequence those
 * rows returns the extra blocks; the output is unchanged. */
static void reserved_blocks_are_returned_and_output_unchanged(void **state) {
    (void)state;
    harness h;
    h_open(&h, config(8, 4, 16, 2, false));
    request a;
    int32_t pa[5] = {3, 1, 4, 1, 5};
    request_init(&a, pa, 5, 10);
    h_add(&h, &a);
    h_step(&h); /* prefill + first token */
    di_error err;
    di_seq *q = a.seq;
    int32_t covered = 0, before = q->n_blocks;
    di_scheduler_stats st0, st1;
    di_scheduler_get_stats(h.s, &st0);
    assert_int_equal(di_scheduler_reserve(h.s, q, q->n_tokens + 6, &covered, &err), DI_OK);
    assert_true(covered >= q->n_tokens + 6);
    assert_true(q->n_blocks > before);
    /* far more than the pool: covers what the pool and the cap allow */
    assert_int_equal(di_scheduler_reserve(h.s, q, 1000, &covered, &err), DI_OK);
    assert_true(covered <= 8 * 4 && covered >= q->n_tokens + 6);
    /* no drafts set: the decode step gives one row and the extra blocks go back */
    h_step(&h);
    di_scheduler_get_stats(h.s, &st1);
    assert_int_equal(q->n_blocks, (q->n_tokens + 3) / 4);
    assert_int_equal(st1.n_blocks_free, st0.n_blocks_free - (q->n_blocks - before));
    /* not decoding: refused */
    request b;
    int32_t pb[3] = {2, 7, 1};
    request_init(&b, pb, 3, 4);
    h_add(&h, &b);
    assert_int_equal(di_scheduler_reserve(h.s, b.seq, 8, &covered, &err), DI_ERR_INVALID_ARG);
    h_run(&h);
    assert_matches_reference(&a);
    assert_matches_reference(&b);
    h_assert_all_blocks_reclaimable(&h);
    h_close(&h);
}

static void cancel_waiting_and_pending_sample_is_clean(void **state) {
    (void)state;
    harness h;
    di_error err;
    h_open(&h, config(32, 4, 16, 1, true)); /* one slot: b waits */
    request a, b, c;
    int32_t p[6] = {1, 2, 3, 4, 5, 6};
    request_init(&a, p, 6, 10);
    request_init(&b, p, 5, 10);
    request_init(&c, p, 4, 10);
    h_add(&h, &a);
    h_add(&h, &b);
    h_add(&h, &c);
    h_step(&h);
    assert_int_equal(b.seq->status, DI_SEQ_WAITING);
    cancel_frees_blocks(&h, &b);
    /* Cancel a between schedule and postprocess: its sample is dropped. */
    assert_int_equal(di_scheduler_schedule(h.s, &h.last, &err), DI_OK);
    assert_int_equal(h.last.n_samples, 1);
    assert_ptr_equal(h.last.sample_seqs[0], a.seq);
    cancel_frees_blocks(&h, &a);
    h_run(&h);
    assert_matches_reference(&c);
    assert_int_equal(di_scheduler_cancel(h.s, NULL, &err), DI_ERR_INVALID_ARG);
    h_assert_all_blocks_reclaimable(&h);
    h_close(&h);
}

/* A failed forward is undone with abort_step: the next schedule plans the
 * same rows again and the outputs are unaffected. */
static void aborted_step_is_planned_again(void **state) {
    (void)state;
    harness h;
    di_error err;
    h_open(&h, config(32, 4, 8, 4, true));
    request a, b;
    int32_t p[20];
    for (int i = 0; i < 20; i++) p[i] = 1 + (i * 3) % (VOCAB - 1);
    request_init(&a, p, 20, 10);
    request_init(&b, p + 2, 6, 10);
    h_add(&h, &a);
    h_step(&h);
    h_add(&h, &b);
    for (int round = 0; round < 6; round++) {
        di_sched_output first;
        assert_int_equal(di_scheduler_schedule(h.s, &first, &err), DI_OK);
        int32_t rows = first.batch.n_rows, tok[8], pos[8], seq[8];
        memcpy(tok, first.batch.token, (size_t)rows * sizeof *tok);
        memcpy(pos, first.batch.pos, (size_t)rows * sizeof *pos);
        memcpy(seq, first.batch.seq, (size_t)rows * sizeof *seq);
        di_scheduler_abort_step(h.s);
        h_check(&h);
        h_step(&h);
        assert_int_equal(h.last.batch.n_rows, rows);
        assert_memory_equal(h.last.batch.token, tok, (size_t)rows * sizeof *tok);
        assert_memory_equal(h.last.batch.pos, pos, (size_t)rows * sizeof *pos);
        assert_memory_equal(h.last.batch.seq, seq, (size_t)rows * sizeof *seq);
    }
    h_run(&h);
    assert_matches_reference(&a);
    assert_matches_reference(&b);
    h_assert_all_blocks_reclaimable(&h);
    h_close(&h);
}

static void request_that_never_fits_is_refused_and_others_complete(void **state) {
    (void)state;
    harness h;
    di_error err;
    di_scheduler_config cfg = config(8, 4, 16, 4, true); /* 32 tokens of KV */
    cfg.max_context = 64;
    h_open(&h, cfg);
    request a, exact, c;
    int32_t p[60];
    for (int i = 0; i < 60; i++) p[i] = 1 + (i * 5) % (VOCAB - 1);
    request_init(&a, p, 10, 10);
    request_init(&c, p + 3, 12, 10);
    h_add(&h, &a);
    di_seq *q = (di_seq *)&q;
    assert_int_equal(di_scheduler_add(h.s, p, 30, 10, NULL, &q, &err), DI_ERR_FULL);
    assert_null(q);
    assert_non_null(strstr(err.msg, "KV blocks"));
    assert_int_equal(di_scheduler_add(h.s, p, 60, 10, NULL, &q, &err), DI_ERR_RANGE);
    assert_non_null(strstr(err.msg, "context"));
    assert_int_equal(di_scheduler_add(h.s, p, 0, 10, NULL, &q, &err), DI_ERR_INVALID_ARG);
    assert_int_equal(di_scheduler_add(h.s, p, 5, 0, NULL, &q, &err), DI_ERR_INVALID_ARG);
    int32_t neg[2] = {1, -4};
    assert_int_equal(di_scheduler_add(h.s, neg, 2, 5, NULL, &q, &err), DI_ERR_INVALID_ARG);
    h_add(&h, &c);
    h_run(&h);
    assert_matches_reference(&a);
    assert_matches_reference(&c);
    /* The biggest request that fits (20 + 13 - 1 = 32 KV tokens = the whole
     * pool) is accepted and completes: the bound is exact, not padded. */
    int32_t nostop[20]; /* and no stop token: it runs to max_tokens */
    for (int i = 0; i < 20; i++) nostop[i] = 1 + i;
    request_init_stop(&exact, nostop, 20, 13, -1);
    h_add(&h, &exact);
    h_run(&h);
    assert_matches_reference(&exact);
    h_assert_all_blocks_reclaimable(&h);
    h_close(&h);
}

static void api_misuse_is_refused(void **state) {
    (void)state;
    harness h;
    di_error err;
    di_scheduler *bad = NULL;
    di_scheduler_config cfg = config(8, 4, 16, 2, true);
    cfg.max_running = 0;
    assert_int_equal(di_scheduler_create(&cfg, &bad, &err), DI_ERR_INVALID_ARG);
    assert_null(bad);
    h_open(&h, config(8, 4, 16, 2, true));
    request a;
    int32_t p[3] = {1, 2, 3};
    request_init(&a, p, 3, 4);
    h_add(&h, &a);
    assert_int_equal(di_scheduler_postprocess(h.s, a.seq, 1, DI_FINISH_NONE, NULL, &err),
                     DI_ERR_INVALID_ARG); /* not sampled yet */
    assert_int_equal(di_scheduler_release(h.s, a.seq, &err), DI_ERR_INVALID_ARG);
    assert_int_equal(di_scheduler_schedule(h.s, &h.last, &err), DI_OK);
    assert_int_equal(di_scheduler_schedule(h.s, &h.last, &err), DI_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "postprocessed"));
    assert_int_equal(di_scheduler_postprocess(h.s, a.seq, -2, DI_FINISH_NONE, NULL, &err),
                     DI_ERR_INVALID_ARG);
    assert_int_equal(di_scheduler_postprocess(h.s, a.seq, 1, (di_finish_reason)9, NULL, &err),
                     DI_ERR_INVALID_ARG);
    di_finish_reason fin;
    assert_int_equal(di_scheduler_postprocess(h.s, a.seq, 1, DI_FINISH_STOP, &fin, &err), DI_OK);
    assert_int_equal(fin, DI_FINISH_STOP);
    assert_int_equal(a.seq->n_tokens, 4);
    h_collect(&h, &a);
    h_assert_all_blocks_reclaimable(&h);
    /* An unreleased live sequence is freed with the scheduler (ASan: no leak). */
    request b;
    request_init(&b, p, 3, 4);
    h_add(&h, &b);
    h_step(&h);
    h_close(&h);
}

/* ---- latency controls ------------------------------------------------- */

static void max_running_caps_concurrent_sequences_and_outputs_match_solo(void **state) {
    (void)state;
    enum { N = 7 };
    harness h;
    h_open(&h, config(128, 4, 64, 2, true));
    request rs[N];
    srand(21);
    for (int i = 0; i < N; i++) {
        request_random(&rs[i], 30, 20);
        h_add(&h, &rs[i]);
    }
    int32_t most = 0;
    for (int guard = 0; !di_scheduler_is_idle(h.s); guard++) {
        assert_true(guard < 10000);
        h_step(&h);
        di_scheduler_stats st;
        di_scheduler_get_stats(h.s, &st);
        assert_true(st.n_running <= 2);
        if (st.n_running > most) most = st.n_running;
    }
    assert_int_equal(most, 2); /* the cap, not the workload, was the limit */
    for (int i = 0; i < N; i++) assert_matches_reference(&rs[i]);
    h_assert_all_blocks_reclaimable(&h);
    h_close(&h);
}

static void prefill_cap_bounds_prompt_rows_per_step(void **state) {
    (void)state;
    enum { N = 5, CAP = 6 };
    harness h;
    di_scheduler_config c = config(256, 4, 64, 8, false);
    c.max_prefill_tokens = CAP;
    h_open(&h, c);
    request rs[N];
    srand(22);
    for (int i = 0; i < N; i++) {
        int32_t p[MAX_PROMPT];
        int32_t n = 20 + rand() % 30;
        for (int32_t k = 0; k < n; k++) p[k] = 1 + rand() % (VOCAB - 1);
        request_init_stop(&rs[i], p, n, 10, -1);
        h_add(&h, &rs[i]);
    }
    bool mixed = false;
    for (int guard = 0; !di_scheduler_is_idle(h.s); guard++) {
        assert_true(guard < 10000);
        h_step(&h);
        assert_true(h.last.n_prefill_tokens <= CAP);
        mixed |= h.last.n_decode_tokens > 0 && h.last.n_prefill_tokens > 0;
    }
    assert_true(mixed); /* decoding went on while later prompts were chunked in */
    di_scheduler_stats st;
    di_scheduler_get_stats(h.s, &st);
    assert_true(st.n_deferred_steps > 0);
    for (int i = 0; i < N; i++) assert_matches_reference(&rs[i]);
    h_close(&h);
}

/* The fake clock: what a step of d decode and p prefill rows "takes". */
#define FAKE_FIXED_MS 2.0
#define FAKE_DECODE_MS 1.0
#define FAKE_PREFILL_MS 0.25
static double fake_step_ms(int32_t d, int32_t p) {
    return FAKE_FIXED_MS + FAKE_DECODE_MS * d + FAKE_PREFILL_MS * p;
}

static void step_cost_model_learns_a_linear_cost(void **state) {
    (void)state;
    di_step_cost c;
    di_step_cost_init(&c, 10.0, 0.1, 3.0); /* a wrong prior */
    srand(23);
    for (int i = 0; i < 200; i++) {
        int32_t d = rand() % 40, p = rand() % 100;
        di_step_cost_observe(&c, d, p, fake_step_ms(d, p));
    }
    assert_true(fabs(c.coef[0] - FAKE_FIXED_MS) < 0.1);
    assert_true(fabs(c.coef[1] - FAKE_DECODE_MS) < 0.01);
    assert_true(fabs(c.coef[2] - FAKE_PREFILL_MS) < 0.01);
    assert_true(fabs(di_step_cost_predict(&c, 32, 0) - fake_step_ms(32, 0)) < 0.1);
    /* Garbage is ignored, and a cost that would be negative is pinned at 0. */
    di_step_cost_observe(&c, 5, 5, -1.0);
    di_step_cost_observe(&c, 5, 5, NAN);
    di_step_cost_observe(&c, 0, 0, 1e9);
    assert_true(fabs(c.coef[1] - FAKE_DECODE_MS) < 0.01);
    di_step_cost z;
    di_step_cost_init(&z, 1.0, 1.0, 1.0);
    for (int i = 0; i < 100; i++) {
        int32_t d = 1 + rand() % 20;
        di_step_cost_observe(&z, d, 0, 30.0 - d); /* faster with more rows: nonsense */
    }
    assert_true(z.coef[1] >= 0 && z.coef[2] >= 0 && z.coef[0] >= 0);
}

/* Runs rs through a scheduler whose steps "take" fake_step_ms, feeding the
 * cost model exactly as the engine does. Returns the slowest step after
 * the first `warmup` steps; *most_running gets the peak of RUNNING after
 * them (before, the model still leans on its prior). */
static double run_fake_clock(harness *h, request *rs, int n, int warmup, int32_t *most_running,
                             double target) {
    for (int i = 0; i < n; i++) h_add(h, &rs[i]);
    double worst = 0;
    *most_running = 0;
    for (int step = 0; !di_scheduler_is_idle(h->s); step++) {
        assert_true(step < 100000);
        h_step(h);
        int32_t d = h->last.n_decode_tokens, p = h->last.n_prefill_tokens;
        double ms = fake_step_ms(d, p);
        di_scheduler_observe_step(h->s, d, p, ms);
        /* Over the target only by the progress floor of one prefill chunk. */
        if (target > 0 && step >= warmup && ms > target)
            assert_true(p <= DI_SCHED_MIN_PREFILL_ROWS);
        if (step >= warmup && ms > worst) worst = ms;
        di_scheduler_stats st;
        di_scheduler_get_stats(h->s, &st);
        if (step >= warmup && st.n_running > *most_running) *most_running = st.n_running;
    }
    return worst;
}

static void slo_mode_keeps_predicted_steps_within_target(void **state) {
    (void)state;
    enum { N = 40 };
    const double target = 10.0; /* fake_step_ms(8, 0) == 10: at most 8 decoding */
    request slo[N], plain[N];
    srand(24);
    for (int i = 0; i < N; i++) {
        request_random(&slo[i], 60, 25);
        plain[i] = slo[i];
    }
    harness hs, hp;
    di_scheduler_config c = config(512, 4, 128, 32, true);
    di_scheduler_config cs = c;
    cs.tpot_target_ms = target;
    h_open(&hs, cs);
    h_open(&hp, c);
    int32_t most_slo, most_plain;
    double worst_slo = run_fake_clock(&hs, slo, N, 10, &most_slo, target);
    double worst_plain = run_fake_clock(&hp, plain, N, 10, &most_plain, 0);
    for (int i = 0; i < N; i++) {
        assert_matches_reference(&slo[i]);
        assert_matches_reference(&plain[i]);
    }
    /* The model learned the fake cost, so admissions stopped at 8 running;
     * without the target everything runs at once and steps are slow. */
    assert_true(most_slo >= 6 && most_slo <= 8);
    assert_true(most_plain > 8);
    assert_true(worst_plain > target);
    assert_true(worst_slo <= target + FAKE_PREFILL_MS * DI_SCHED_MIN_PREFILL_ROWS);
    di_scheduler_stats st;
    di_scheduler_get_stats(hs.s, &st);
    assert_true(st.n_deferred_steps > 0);
    assert_true(fabs(st.step_decode_ms - FAKE_DECODE_MS) < 0.05);
    h_assert_all_blocks_reclaimable(&hs);
    h_close(&hs);
    h_close(&hp);
}

static void slo_target_below_one_decode_serializes_but_never_starves(void **state) {
    (void)state;
    enum { N = 6 };
    request rs[N];
    srand(25);
    for (int i = 0; i < N; i++) request_random(&rs[i], 40, 10);
    harness h;
    di_scheduler_config c = config(256, 4, 64, 8, false);
    c.tpot_target_ms = 0.5; /* less than any step: nothing fits */
    h_open(&h, c);
    int32_t most;
    run_fake_clock(&h, rs, N, 0, &most, 0);
    assert_int_equal(most, 1); /* one at a time, each admitted when the last finished */
    for (int i = 0; i < N; i++) assert_matches_reference(&rs[i]);
    h_close(&h);
}

/* Random arrivals, lengths, shared prefixes, cancellations and tiny pools.
 * Every request that is not cancelled ends with exactly its solo output;
 * a cancelled one has produced a prefix of it. */
static void run_stress(unsigned seed) {
    enum { N = 120 };
    srand(seed);
    int32_t bs = 1 + rand() % 8;
    int32_t max_prompt = 48, max_gen = 24;
    int32_t min_blocks = (max_prompt + max_gen - 1 + bs - 1) / bs;
    di_scheduler_config cfg = config(min_blocks + rand() % (2 * min_blocks), bs, 1 + rand() % 40,
                                     1 + rand() % 10, rand() % 4 != 0);
    /* Latency controls on some seeds; the fake clock feeds the cost model. */
    if (rand() % 3 == 0) cfg.max_prefill_tokens = 1 + rand() % 12;
    if (rand() % 3 == 0) cfg.tpot_target_ms = 1.0 + rand() % 30;
    harness h;
    h_open(&h, cfg);
    int32_t prefixes[3][32];
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < 32; i++) prefixes[k][i] = 1 + rand() % (VOCAB - 1);
    request *rs = calloc(N, sizeof *rs);
    assert_non_null(rs);
    bool *cancelled = calloc(N, sizeof *cancelled);
    assert_non_null(cancelled);
    int n_added = 0;
    for (int guard = 0; n_added < N || !di_scheduler_is_idle(h.s); guard++) {
        assert_true(guard < 200000);
        for (int burst = rand() % 3; burst > 0 && n_added < N; burst--) {
            request *r = &rs[n_added];
            request_random(r, max_prompt, max_gen);
            if (rand() % 2) { /* start with one of the shared prefixes */
                int32_t k = rand() % 3, len = rand() % 33;
                if (len > r->n_prompt) len = r->n_prompt;
                memcpy(r->prompt, prefixes[k], (size_t)len * sizeof(int32_t));
                request_init(r, r->prompt, r->n_prompt, r->max_tokens);
            }
            h_add(&h, r);
            n_added++;
        }
        if (rand() % 10 == 0 && n_added > 0) {
            int i = rand() % n_added;
            if (!rs[i].done) {
                cancelled[i] = true;
                cancel_frees_blocks(&h, &rs[i]);
            }
        }
        h_step(&h);
        di_scheduler_observe_step(h.s, h.last.n_decode_tokens, h.last.n_prefill_tokens,
                                  fake_step_ms(h.last.n_decode_tokens, h.last.n_prefill_tokens));
    }
    int n_cancelled = 0;
    for (int i = 0; i < N; i++) {
        if (cancelled[i]) {
            n_cancelled++;
            assert_int_equal(rs[i].finish, DI_FINISH_CANCEL);
            assert_true(rs[i].n_out <= rs[i].n_expect);
            assert_memory_equal(rs[i].out, rs[i].expect, (size_t)rs[i].n_out * sizeof(int32_t));
        } else {
            assert_matches_reference(&rs[i]);
        }
    }
    assert_true(n_cancelled < N);
    h_assert_all_blocks_reclaimable(&h);
    free(cancelled);
    free(rs);
    h_close(&h);
}

static void randomized_stress_with_fixed_seeds(void **state) {
    (void)state;
    for (unsigned seed = 100; seed < 130; seed++) run_stress(seed);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(single_request_matches_reference),
        cmocka_unit_test(concurrent_requests_in_small_pool_preempt_and_match_reference),
        cmocka_unit_test(shared_system_prompt_is_computed_once),
        cmocka_unit_test(fully_cached_prompt_still_computes_its_last_token),
        cmocka_unit_test(identical_prompts_at_once_are_both_correct),
        cmocka_unit_test(chunked_prefill_matches_unchunked),
        cmocka_unit_test(decode_rows_come_before_prefill_chunks),
        cmocka_unit_test(cancel_mid_prefill_frees_blocks_at_once),
        cmocka_unit_test(cancel_mid_decode_frees_blocks_and_others_finish),
        cmocka_unit_test(cancel_waiting_and_pending_sample_is_clean),
        cmocka_unit_test(reserved_blocks_are_returned_and_output_unchanged),
        cmocka_unit_test(aborted_step_is_planned_again),
        cmocka_unit_test(request_that_never_fits_is_refused_and_others_complete),
        cmocka_unit_test(api_misuse_is_refused),
        cmocka_unit_test(max_running_caps_concurrent_sequences_and_outputs_match_solo),
        cmocka_unit_test(prefill_cap_bounds_prompt_rows_per_step),
        cmocka_unit_test(step_cost_model_learns_a_linear_cost),
        cmocka_unit_test(slo_mode_keeps_predicted_steps_within_target),
        cmocka_unit_test(slo_target_below_one_decode_serializes_but_never_starves),
        cmocka_unit_test(randomized_stress_with_fixed_seeds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
