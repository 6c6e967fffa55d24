/* `--spec dspark` through the engine on the tiny DeepSeek-V4.1 checkpoint
 * (random weights with the three DSpark stages, tests/data/golden/
 * deepseek_v41/tiny): the real drafter (target features captured in the
 * main forward, the draft block, heads, confidences) through the same
 * verifier as ngram / draft:PATH.
 *
 * Oracle: the engine without speculation (tokens and logprobs bit for
 * bit: batch-invariant kernels) and di_dspark_sched_plan (golden-checked
 * against DeepInfer's MTPVarlen in tests/spec/test_dspark.c) for the rows
 * the schedule gives each sequence. Acceptance on random weights is
 * meaningless, so an always-right and a half-right run replace the drafts
 * after the real draft forward (di_spec_dspark_set_oracle). */
#include "test_util.h"
#include "trace.h"

#include "deepinfer.h"
#include "model/deepseek_v41.h"
#include "model/deepseek_v41_dspark.h"
#include "sample/dspark.h"
#include "spec/spec.h"
#include "text/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef DI_SANITIZE_BUILD
#define N_GEN 10
#define N_LONG 16
#else
#define N_GEN 16
#define N_LONG 40 /* past the window (16): rollback across ratio-2 pairs and the window ring */
#endif
#define N_BATCH 3
#define MAX_GEN 64
#define N_TOP 3
#define K 4 /* the tiny checkpoint's DSpark block is 5: four drafts */
#define N_VOCAB 512


static const int32_t PROMPTS[N_BATCH][12] = {
    {5, 17, 99, 230, 41, 41, 8, 300, 12, 77, 401, 9},
    {6, 6, 6, 120, 121, 122, 123, 124, 125, 126, 127, 128},
    {500, 13, 260, 31, 7, 7, 44, 210, 333, 90, 18, 64},
};

static const char *tiny_dir(void) {
    static char dir[4096];
    di_test_path(dir, sizeof dir, "tests/data/golden/deepseek_v41/tiny");
    return dir;
}

typedef struct opts {
    int threads;
    const char *spec, *accept;
    bool fixed_k;
    const char *cost_cache;
} opts;

static di_engine *open_engine(opts o) {
    di_engine_params p = di_engine_params_default();
    p.model_path = tiny_dir();
    p.n_threads = o.threads;
    p.n_ctx = 128;
    p.kv_tokens = 1024;
    p.max_seqs = 4;
    p.check_integrity = true;
    p.spec = o.spec;
    p.spec_accept = o.accept;
    p.spec_k = K;
    p.spec_fixed_k = o.fixed_k;
    p.spec_cost_cache = o.cost_cache ? o.cost_cache : "off";
    di_engine *e = NULL;
    di_error err;
    di_status s = di_engine_create(&p, &e, &err);
    if (s) print_message("engine: %s\n", err.msg);
    assert_int_equal(s, DI_OK);
    return e;
}

static void run_n(di_engine *e, int n, float temperature, int n_gen, trace *t) {
    di_error err;
    memset(t, 0, sizeof(trace) * (size_t)n);
    for (int i = 0; i < n; i++) {
        di_request r;
        memset(&r, 0, sizeof r);
        r.tokens = PROMPTS[i];
        r.n_tokens = 12;
        r.max_tokens = n_gen;
        r.ignore_eos = true;
        r.sampling = di_sampling_params_default();
        r.sampling.temperature = temperature;
        r.sampling.top_p = 0.9f;
        r.sampling.seed = 31 + (uint64_t)i;
        r.sampling.logprobs = true;
        r.sampling.top_logprobs = N_TOP;
        r.on_event = trace_record;
        r.user = &t[i];
        assert_int_equal(di_engine_submit(e, &r, NULL, &err), DI_OK);
    }
    di_status s = di_engine_run(e, &err);
    if (s) print_message("run: %s\n", err.msg);
    assert_int_equal(s, DI_OK);
    assert_int_equal(di_engine_check_integrity(e, &err), DI_OK);
}


/* Without speculation, once per (temperature, length). */
static const trace *reference(float temperature, int n_gen) {
    static trace refs[2][2][N_BATCH];
    static bool done[2][2];
    int ti = temperature > 0, li = n_gen == N_LONG;
    if (!done[ti][li]) {
        di_engine *e = open_engine((opts){.threads = 2});
        run_n(e, N_BATCH, temperature, n_gen, refs[ti][li]);
        di_engine_free(e);
        done[ti][li] = true;
    }
    return refs[ti][li];
}

static di_engine_stats stats_of(di_engine *e, const char *what) {
    di_engine_stats st;
    di_engine_get_stats(e, &st);
    print_message("%s: drafted %lld verified %lld accepted %lld in %lld verify steps, %lld engine steps\n", what,
                  (long long)st.spec_drafted, (long long)st.spec_verified, (long long)st.spec_accepted,
                  (long long)st.spec_verify_steps, (long long)st.n_steps);
    return st;
}

/* Greedy: the tokens and logprobs of plain greedy decoding, alone and
 * batched, at 1 and 2 threads, with every draft verified and with the
 * confidence schedule (measured curve) choosing how many. */
static void dspark_greedy_equals_greedy_without_speculation(void **state) {
    (void)state;
    static trace got[N_BATCH];
    const trace *ref = reference(0.0f, N_GEN);
    const opts runs[] = {
        {.threads = 1, .spec = "dspark", .fixed_k = true},
        {.threads = 2, .spec = "dspark", .fixed_k = true},
        {.threads = 2, .spec = "dspark", .fixed_k = false},
        {.threads = 1, .spec = "dspark", .accept = "lossless", .fixed_k = true},
    };
    for (size_t ri = 0; ri < sizeof runs / sizeof runs[0]; ri++) {
#ifdef DI_SANITIZE_BUILD
        if (ri != 1) continue; /* the schedule is covered by its own test below */
#endif
#ifdef DI_SANITIZE_BUILD
        for (int n = N_BATCH; n <= N_BATCH; n++) {
#else
        for (int n = 1; n <= N_BATCH; n += N_BATCH - 1) {
#endif
            di_engine *e = open_engine(runs[ri]);
            run_n(e, n, 0.0f, N_GEN, got);
            di_engine_stats st = stats_of(e, runs[ri].fixed_k ? "dspark fixed k" : "dspark scheduled");
            assert_true(st.spec_drafted > 0);
            if (runs[ri].fixed_k) assert_true(st.spec_verified > 0);
            di_engine_free(e);
            for (int i = 0; i < n; i++) assert_same_trace(&ref[i], &got[i]);
        }
    }
}

/* Seeded sampling with the verify length fixed: the match rule ("greedy":
 * accept iff the draft is the request's own seeded draw) gives the tokens
 * of the run without speculation; DeepInfer's rule runs and verifies (its
 * tokens are another draw of the same distribution: not compared). */
static void dspark_seeded_sampling_keeps_the_tokens_under_the_match_rule(void **state) {
    (void)state;
    static trace got[N_BATCH];
    const trace *ref = reference(0.8f, N_GEN);
    di_engine *e = open_engine((opts){.threads = 2, .spec = "dspark", .accept = "greedy", .fixed_k = true});
    run_n(e, N_BATCH, 0.8f, N_GEN, got);
    di_engine_stats st = stats_of(e, "dspark seeded, match rule");
    assert_true(st.spec_verified > 0);
    di_engine_free(e);
    for (int i = 0; i < N_BATCH; i++) assert_same_trace(&ref[i], &got[i]);
#ifdef DI_SANITIZE_BUILD
    return; /* the release build also runs DeepInfer's rule */
#endif
    e = open_engine((opts){.threads = 2, .spec = "dspark", .accept = "deepinfer", .fixed_k = true});
    run_n(e, N_BATCH, 0.8f, N_GEN, got);
    st = stats_of(e, "dspark seeded, deepinfer rule");
    assert_true(st.spec_verified > 0);
    for (int i = 0; i < N_BATCH; i++) assert_int_equal(got[i].n, N_GEN);
    di_engine_free(e);
}

/* ---- drafts replaced after the real draft forward ---------------------- */

typedef struct oracle_ctx {
    const trace *ref;
    int n_ref;
    uint64_t miss_seed; /* 0: always right */
} oracle_ctx;

static uint32_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (uint32_t)x;
}

/* The reference continuation of the sequence (found by its prompt), wrong
 * by one with probability 1/2 when miss_seed is set. */
static int32_t oracle_token(void *user, const di_spec_seq *q, int32_t j, int32_t draft, float conf) {
    (void)draft;
    (void)conf;
    const oracle_ctx *o = user;
    int32_t g = q->n_tokens - q->n_prompt;
    for (int r = 0; r < o->n_ref; r++) {
        if (memcmp(q->tokens, PROMPTS[r], sizeof PROMPTS[r])) continue;
        if (g + j >= o->ref[r].n) return -1;
        int32_t t = o->ref[r].tokens[g + j];
        if (o->miss_seed && mix(o->miss_seed * 7 + (uint64_t)(q->n_tokens + j)) % 2) t = (t + 1) % N_VOCAB;
        return t;
    }
    return -1;
}

/* Always right through the real dspark path: every verify step emits k
 * accepted drafts + 1 token. */
static void always_accepting_dspark_yields_k_plus_1_tokens_per_step(void **state) {
    (void)state;
    static trace got[1];
    const trace *ref = reference(0.0f, N_GEN);
    di_engine *e = open_engine((opts){.threads = 2, .spec = "dspark", .fixed_k = true});
    di_error err;
    oracle_ctx o = {ref, 1, 0};
    assert_int_equal(di_spec_dspark_set_oracle(di_engine_drafter(e), oracle_token, &o, &err), DI_OK);
    run_n(e, 1, 0.0f, N_GEN, got);
    di_engine_stats st = stats_of(e, "dspark always right");
    assert_same_trace(&ref[0], &got[0]);
    int64_t steps = (N_GEN - 1 + K) / (K + 1);
    assert_int_equal(st.spec_verify_steps, steps);
    assert_int_equal(st.spec_accepted, st.spec_verified);
    assert_int_equal(st.spec_accepted, N_GEN - 1 - steps);
    assert_int_equal(st.n_steps, 1 + steps);
    di_engine_free(e);
}

/* Half the drafts wrong over a long batched generation: the rejected rows
 * are forgotten (di_model_kv_truncate; the draft block's scratch keys are
 * overwritten), so every token and logprob equals the run without drafts. */
static void random_rejections_leave_the_kv_as_without_speculation(void **state) {
    (void)state;
    static trace got[N_BATCH];
    const trace *ref = reference(0.0f, N_LONG);
    di_engine *e = open_engine((opts){.threads = 2, .spec = "dspark", .fixed_k = true});
    di_error err;
    oracle_ctx o = {ref, N_BATCH, 4242};
    assert_int_equal(di_spec_dspark_set_oracle(di_engine_drafter(e), oracle_token, &o, &err), DI_OK);
    run_n(e, N_BATCH, 0.0f, N_LONG, got);
    di_engine_stats st = stats_of(e, "dspark half right");
    assert_true(st.spec_accepted > 0);
    assert_true(st.spec_accepted < st.spec_verified);
    di_engine_free(e);
    for (int i = 0; i < N_BATCH; i++) assert_same_trace(&ref[i], &got[i]);
}

/* ---- the drafts themselves ------------------------------------------------ */

#define MAX_CALLS 64
typedef struct draft_log {
    int32_t n_tokens[MAX_CALLS]; /* the sequence's tokens when it drafted */
    int32_t drafts[MAX_CALLS][K];
    float conf[MAX_CALLS][K];
    int32_t n;
} draft_log;

static int32_t log_drafts(void *user, const di_spec_seq *q, int32_t j, int32_t draft, float conf) {
    draft_log *l = user;
    if (j == 0 && l->n < MAX_CALLS) l->n_tokens[l->n++] = q->n_tokens;
    if (l->n > 0 && j < K) {
        l->drafts[l->n - 1][j] = draft;
        l->conf[l->n - 1][j] = conf;
    }
    return -1; /* keep the real draft */
}

/* What the engine's drafter proposes at each step is what the model-level
 * drafter (di_dsv41_dspark_draft, oracle-checked in
 * tests/model/test_deepseek_v41_dspark.c) drafts after a plain forward of
 * the same tokens: golden = the token just sampled, the main keys of every
 * position before it, k drafts, bit for bit (batch-invariant kernels: the
 * engine's prefill chunks, verify rows and rejected rows do not matter). */
static void engine_drafts_equal_the_model_drafter_on_the_same_tokens(void **state) {
    (void)state;
    static trace got[1];
    di_engine *e = open_engine((opts){.threads = 2, .spec = "dspark", .fixed_k = true});
    di_error err;
    static draft_log l;
    memset(&l, 0, sizeof l);
    assert_int_equal(di_spec_dspark_set_oracle(di_engine_drafter(e), log_drafts, &l, &err), DI_OK);
    run_n(e, 1, 0.0f, N_GEN, got);
    di_engine_free(e);
    assert_true(l.n >= 3);
    int32_t all[12 + MAX_GEN];
    memcpy(all, PROMPTS[0], sizeof PROMPTS[0]);
    memcpy(all + 12, got[0].tokens, sizeof(int32_t) * (size_t)got[0].n);

    di_tokenizer *tok = NULL;
    di_dsv41_model *m = NULL;
    di_dsv41_kv *kv = NULL;
    di_dsv41_ctx *ctx = NULL;
    assert_int_equal(di_tok_load_json(tiny_dir(), &tok, &err), DI_OK);
    assert_int_equal(di_dsv41_load(tiny_dir(), NULL, DI_DSV41_NUMERICS_DEEPINFER, tok, &m, &err), DI_OK);
    assert_int_equal(di_dsv41_kv_create(m, 16, 16, &kv, &err), DI_OK);
    assert_int_equal(di_dsv41_kv_enable_dspark(m, kv, &err), DI_OK);
    assert_int_equal(di_dsv41_ctx_create(m, &ctx, &err), DI_OK);
    int32_t table[16];
    for (int i = 0; i < 16; i++) table[i] = 15 - i;
    const int32_t *tables[1] = {table};
    int32_t nb[1] = {16};
    di_batch t = {.n_seq_slots = 1, .block_size = 16, .block_tables = tables, .n_blocks = nb};
    int32_t fed = 0, checked = 0;
    for (int32_t c = 0; c < l.n; c++) {
        const int32_t n = l.n_tokens[c];
        /* feed positions fed .. n-2 (the main keys the drafter reads) */
        int32_t seq[12 + MAX_GEN], pos[12 + MAX_GEN];
        uint8_t want[12 + MAX_GEN];
        for (int32_t i = 0; i < n - 1 - fed; i++) {
            seq[i] = 0;
            pos[i] = fed + i;
            want[i] = 0;
        }
        di_batch b = t;
        b.n_rows = n - 1 - fed;
        b.token = all + fed;
        b.seq = seq;
        b.pos = pos;
        b.want_logits = want;
        if (b.n_rows > 0 && di_dsv41_forward(ctx, kv, &b, NULL, NULL, &err)) fail_msg("forward: %s", err.msg);
        fed = n - 1;
        di_dsv41_draft_req q = {.seq = 0, .golden = all[n - 1], .last_pos = n - 2, .temperature = 0.0f,
                                .top_p = 0.9f, .top_k = -1, .seed = 31, .sample_pos = n - 1};
        int32_t k = n - 12 + K < N_GEN ? K : N_GEN - (n - 12) - 1; /* the engine's room clamp */
        int32_t drafts[K];
        float conf[K];
        assert_int_equal(di_dsv41_dspark_draft(ctx, kv, &t, &q, 1, k, 1.0f, NULL, NULL, conf, drafts, NULL, &err),
                         DI_OK);
        assert_memory_equal(drafts, l.drafts[c], sizeof(int32_t) * (size_t)k);
        assert_memory_equal(conf, l.conf[c], sizeof(float) * (size_t)k);
        checked++;
    }
    print_message("engine drafts: %d steps of drafts equal the model-level drafter's\n", (int)checked);
    di_dsv41_ctx_free(ctx);
    di_dsv41_kv_free(kv);
    di_dsv41_free(m);
    di_tok_free(tok);
}

/* ---- the verify-length schedule ----------------------------------------- */

/* A drafter with known confidences: per (sequence, round) a hash decides
 * them; it remembers the rates it gave last round and records what the
 * engine verified (after_forward). */
#define MAX_ROUNDS 256
typedef struct conf_drafter {
    di_drafter base;
    int64_t seq_id[8];
    int32_t prev_n[8];
    float prev_rates[8][K];
    bool had[8];
    /* per round: expected verify counts from di_dspark_sched_plan */
    int32_t want[MAX_ROUNDS][8];
    int32_t got[MAX_ROUNDS][8];
    int64_t ids[MAX_ROUNDS][8];
    int32_t n_seqs[MAX_ROUNDS];
    int32_t rounds, checked;
    di_dspark_sched *plan; /* the same curve, fed nothing */
} conf_drafter;

static di_status conf_propose(di_drafter *base, const di_spec_seq *seqs, int32_t n, di_spec_drafts *out,
                              di_threadpool *pool, di_error *err) {
    (void)pool;
    conf_drafter *d = (conf_drafter *)base;
    di_dspark_seq_rates q[8];
    float cur[8][K], prev[8][K];
    for (int32_t i = 0; i < n; i++) {
        const di_spec_seq *s = &seqs[i];
        out[i].n = s->k_max;
        out[i].has_q = false;
        float c = 1.0f;
        for (int32_t j = 0; j < s->k_max; j++) {
            out[i].tokens[j] = (s->tokens[s->n_tokens - 1] + j + 1) % N_VOCAB;
            out[i].confidence[j] = 0.05f + 0.9f * (float)(mix((uint64_t)s->n_tokens * 131 + (uint64_t)j) % 1000) / 1000.0f;
            c *= out[i].confidence[j];
            cur[i][j] = c;
        }
        int sl = s->slot;
        bool had = d->had[sl] && d->seq_id[sl] == s->seq_id && d->prev_n[sl] > 0;
        for (int32_t j = 0; j < s->k_max; j++) prev[i][j] = had && j < d->prev_n[sl] ? d->prev_rates[sl][j] : 0.0f;
        q[i] = (di_dspark_seq_rates){.n_drafts = s->k_max, .rates = cur[i], .prev_rates = had ? prev[i] : NULL,
                                     .has_drafts = 1, .scheduled_ahead = 0};
        d->had[sl] = true;
        d->seq_id[sl] = s->seq_id;
        d->prev_n[sl] = s->k_max;
        memcpy(d->prev_rates[sl], cur[i], sizeof cur[i]);
    }
    int32_t seqlens[8];
    float scratch[8 * K * 3 * 4]; /* di_dspark_sched_scratch_bytes(8 * K), aligned */
    di_status s = di_dspark_sched_plan(d->plan, q, n, scratch, seqlens, err);
    if (s) return s;
    if (d->rounds < MAX_ROUNDS) {
        for (int32_t i = 0; i < n; i++) {
            d->want[d->rounds][i] = seqlens[i] - 1;
            d->ids[d->rounds][i] = seqs[i].seq_id;
            d->got[d->rounds][i] = -1;
        }
        d->n_seqs[d->rounds] = n;
    }
    return DI_OK;
}

/* The outcome of each sequence of the round just verified. */
static void conf_after(di_drafter *base, const di_batch *b, const di_spec_outcome *o, int32_t n) {
    (void)b;
    conf_drafter *d = (conf_drafter *)base;
    if (d->rounds >= MAX_ROUNDS || d->n_seqs[d->rounds] == 0) return;
    for (int32_t i = 0; i < n; i++)
        for (int32_t j = 0; j < d->n_seqs[d->rounds]; j++)
            if (d->ids[d->rounds][j] == o[i].seq_id) d->got[d->rounds][j] = o[i].n_rows - 1;
    d->rounds++;
}

static void conf_free(di_drafter *base) {
    conf_drafter *d = (conf_drafter *)base;
    di_dspark_sched_free(d->plan);
    free(d);
}

static const di_drafter_ops CONF_OPS = {"confidences", conf_propose, conf_after, conf_free};

/* Step times (ms) huge against anything measured (the sampler median, the
 * online slope): the engine's choices are then the plan's on these
 * points alone. Rows 3..15 for three sequences of four drafts. */
static const di_dspark_cost_point CURVE[] = {{3, 1.0e6f}, {5, 1.15e6f}, {7, 1.4e6f},
                                             {9, 1.9e6f}, {12, 2.3e6f}, {15, 3.2e6f}};

static void schedule_gives_each_sequence_the_rows_of_the_plan(void **state) {
    (void)state;
    static trace got[N_BATCH];
    di_engine *e = open_engine((opts){.threads = 2});
    di_error err;
    conf_drafter *d = calloc(1, sizeof *d);
    assert_non_null(d);
    d->base.ops = &CONF_OPS;
    assert_int_equal(di_dspark_sched_create(&d->plan, &err), DI_OK);
    const int32_t n_pts = (int32_t)(sizeof CURVE / sizeof CURVE[0]);
    assert_int_equal(di_dspark_sched_set_curve(d->plan, CURVE, n_pts, &err), DI_OK);
    assert_int_equal(di_engine_set_drafter(e, &d->base, DI_SPEC_ACCEPT_GREEDY, K, &err), DI_OK);
    assert_int_equal(di_engine_set_spec_curve(e, CURVE, n_pts, &err), DI_OK);
    run_n(e, N_BATCH, 0.0f, N_GEN, got);
    int32_t total = 0, varied = 0, shortest = K, longest = 0;
    for (int32_t r = 0; r < d->rounds; r++)
        for (int32_t i = 0; i < d->n_seqs[r]; i++) {
            if (d->got[r][i] < 0) continue; /* finished or not scheduled */
            assert_int_equal(d->got[r][i], d->want[r][i]);
            total++;
            shortest = d->want[r][i] < shortest ? d->want[r][i] : shortest;
            longest = d->want[r][i] > longest ? d->want[r][i] : longest;
        }
    varied = longest > shortest;
    print_message("schedule: %d (sequence, round) choices checked, verify lengths %d..%d\n", (int)total,
                  (int)shortest, (int)longest);
    assert_true(total >= N_BATCH * 3);
    assert_true(varied); /* the curve and confidences make the lengths differ */
    di_engine_free(e);
    /* the tokens are still the greedy ones */
    const trace *ref = reference(0.0f, N_GEN);
    for (int i = 0; i < N_BATCH; i++) assert_same_trace(&ref[i], &got[i]);
}

/* The start-up curve is measured once and then read from the cache under
 * the given directory (same key: model, threads, sizes). */
static void cost_curve_is_measured_once_then_cached(void **state) {
    (void)state;
    char dir[] = "/tmp/di_dspark_curve_XXXXXX";
    assert_non_null(mkdtemp(dir));
    di_dspark_cost_point a[64], b[64];
    int32_t na = 0, nb = 0;
    double ms_a = 0, ms_b = 0;
    di_engine *e = open_engine((opts){.threads = 1, .spec = "dspark", .cost_cache = dir});
    di_engine_spec_curve(e, a, 64, &na, &ms_a);
    di_engine_free(e);
    e = open_engine((opts){.threads = 1, .spec = "dspark", .cost_cache = dir});
    di_engine_spec_curve(e, b, 64, &nb, &ms_b);
    di_engine_free(e);
    print_message("curve: %d points, measured in %.1f ms; rows %d: %.3f ms .. rows %d: %.3f ms\n", (int)na, ms_a,
                  (int)a[0].rows, (double)a[0].ms, (int)a[na - 1].rows, (double)a[na - 1].ms);
    assert_true(na >= 3);
    assert_int_equal(a[na - 1].rows, 4 * (K + 1)); /* max_seqs x (1 + k) */
    assert_true(ms_a > 0);
    assert_true(ms_b == 0); /* a cache hit */
    assert_int_equal(na, nb);
    for (int32_t i = 0; i < na; i++) {
        assert_int_equal(a[i].rows, b[i].rows);
        assert_true(a[i].ms > 0 && (i == 0 || a[i].ms >= a[i - 1].ms));
        assert_float_equal(a[i].ms, b[i].ms, 1e-5 * a[i].ms);
    }
    char cmd[512];
#ifndef DI_SANITIZE_BUILD
    /* a damaged cache file is never trusted: measured over, then rewritten */
    snprintf(cmd, sizeof cmd, "for f in '%s'/*.curve; do printf 'deepinfer-dspark-curve 1\\nkey x\\n' > \"$f\"; done",
             dir);
    assert_int_equal(system(cmd), 0);
    e = open_engine((opts){.threads = 1, .spec = "dspark", .cost_cache = dir});
    di_engine_spec_curve(e, b, 64, &nb, &ms_b);
    di_engine_free(e);
    assert_true(ms_b > 0);
    assert_int_equal(nb, na);
    snprintf(cmd, sizeof cmd, "for f in '%s'/*.curve; do printf 'garbage\\n' > \"$f\"; done", dir);
    assert_int_equal(system(cmd), 0);
    e = open_engine((opts){.threads = 1, .spec = "dspark", .cost_cache = dir});
    di_engine_spec_curve(e, b, 64, &nb, &ms_b);
    di_engine_free(e);
    assert_true(ms_b > 0);
    assert_int_equal(nb, na);
#endif
    /* and with the schedule off there is no curve */
    e = open_engine((opts){.threads = 1, .spec = "dspark", .fixed_k = true, .cost_cache = dir});
    di_engine_spec_curve(e, a, 64, &na, &ms_a);
    assert_int_equal(na, 0);
    di_engine_free(e);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(dspark_greedy_equals_greedy_without_speculation),
        cmocka_unit_test(dspark_seeded_sampling_keeps_the_tokens_under_the_match_rule),
        cmocka_unit_test(always_accepting_dspark_yields_k_plus_1_tokens_per_step),
        cmocka_unit_test(random_rejections_leave_the_kv_as_without_speculation),
        cmocka_unit_test(engine_drafts_equal_the_model_drafter_on_the_same_tokens),
        cmocka_unit_test(schedule_gives_each_sequence_the_rows_of_the_plan),
        cmocka_unit_test(cost_curve_is_measured_once_then_cached),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
