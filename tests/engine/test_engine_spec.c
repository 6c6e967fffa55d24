/* Speculative decoding through the engine on the real default model:
 * output with speculation equals output without (greedy and seeded
 * sampling, ngram and draft-model drafters, alone and batched, 1 and 2
 * threads); an always-right drafter yields k+1 tokens per verify step;
 * random accept/reject patterns leave the KV exactly as a run without
 * speculation (every later logprob bit-identical); bad --spec values fail
 * with a message. */
#include "test_util.h"
#include "trace.h"

#include "deepinfer.h"
#include "spec/spec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef DI_SANITIZE_BUILD
#define N_GEN 10
#define N_LONG 16
#define N_BATCH 2
#else
#define N_GEN 16
#define N_LONG 40   /* the random-rejection run: a long generation */
#define N_BATCH 3
#endif
#define N_TOP 4


/* Prompts whose continuations repeat them, so the n-gram drafter hits. */
static const char *PROMPTS[4] = {
    "a b c d e f g h, a b c d e f g h, a b c d e f g h, a b c d e f g h, a b c",
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n",
    "One, two, three, four, five, six, seven, eight, nine, ten, eleven,",
    "The history of the printing press",
};

static di_engine *open_engine(int threads, const char *spec, const char *accept, int k) {
    di_engine_params p = di_engine_params_default();
    p.model_path = di_test_default_model();
    p.n_threads = threads;
    p.n_ctx = 512;
    p.kv_tokens = 2048;
    p.check_integrity = true;
    p.spec = spec;
    p.spec_accept = accept;
    p.spec_k = k;
    di_engine *e = NULL;
    di_error err;
    di_status s = di_engine_create(&p, &e, &err);
    if (s) print_message("engine: %s\n", err.msg);
    assert_int_equal(s, DI_OK);
    return e;
}

static di_request make_request(int idx, trace *t, float temperature, int n_gen) {
    di_request r;
    memset(&r, 0, sizeof r);
    r.text = PROMPTS[idx];
    r.max_tokens = n_gen;
    r.ignore_eos = true;
    r.sampling = di_sampling_params_default();
    r.sampling.temperature = temperature;
    r.sampling.top_p = 0.95f;
    r.sampling.seed = 77 + (uint64_t)idx;
    r.sampling.logprobs = true;
    r.sampling.top_logprobs = N_TOP;
    r.on_event = trace_record;
    r.user = t;
    return r;
}

/* Runs prompts [0, n) together, n_gen tokens each; traces t[0..n). */
static void run_n(di_engine *e, int n, float temperature, int n_gen, trace *t) {
    di_error err;
    memset(t, 0, sizeof(trace) * (size_t)n);
    for (int i = 0; i < n; i++) {
        di_request r = make_request(i, &t[i], temperature, n_gen);
        assert_int_equal(di_engine_submit(e, &r, NULL, &err), DI_OK);
    }
    di_status s = di_engine_run(e, &err);
    if (s) print_message("run: %s\n", err.msg);
    assert_int_equal(s, DI_OK);
    assert_int_equal(di_engine_check_integrity(e, &err), DI_OK);
}


static void run_all(di_engine *e, int n, float temperature, trace *t) { run_n(e, n, temperature, N_GEN, t); }

/* The runs without speculation, computed once per (temperature, length)
 * and shared by the tests. */
static const trace *reference(float temperature, int n_gen) {
    static trace refs[2][2][N_BATCH];
    static bool done[2][2];
    int ti = temperature > 0, li = n_gen == N_LONG;
    if (!done[ti][li]) {
        di_engine *e = open_engine(2, NULL, NULL, 0);
        run_n(e, N_BATCH, temperature, n_gen, refs[ti][li]);
        di_engine_free(e);
        done[ti][li] = true;
    }
    return refs[ti][li];
}

static void print_spec(const char *what, di_engine *e) {
    di_engine_stats st;
    di_engine_get_stats(e, &st);
    print_message("%s: drafted %lld verified %lld accepted %lld in %lld verify steps, %lld engine steps\n", what,
                  (long long)st.spec_drafted, (long long)st.spec_verified, (long long)st.spec_accepted,
                  (long long)st.spec_verify_steps, (long long)st.n_steps);
}

/* greedy and seeded sampling, ngram drafter, every acceptance rule that
 * promises it: alone and batched, 1 and 2 threads */
static void ngram_output_equals_output_without_speculation(void **state) {
    (void)state;
    if (!di_test_default_model()) skip();
    static trace got[N_BATCH];
    const float temps[2] = {0.0f, 0.8f};
    for (int ti = 0; ti < 2; ti++) {
        const trace *ref = reference(temps[ti], N_GEN);
        /* greedy: both rules promise it, at 1 and 2 threads; seeded
         * sampling: the lossless rule (one-hot q: the coupled draw) */
        const char *rules[2] = {"greedy", "lossless"};
        for (int ri = ti; ri < 2; ri++) {
            for (int threads = 1; threads <= 2; threads++) {
                if (ti == 0 && threads == 2 - ri) continue; /* greedy: one run per rule */
#ifdef DI_SANITIZE_BUILD
                if (threads == 1) continue;
#endif
                di_engine *e = open_engine(threads, "ngram", rules[ri], 3);
                run_all(e, N_BATCH, temps[ti], got);
                di_engine_stats st;
                di_engine_get_stats(e, &st);
                assert_true(st.spec_verified > 0);
                if (temps[ti] == 0) assert_true(st.spec_accepted > 0);
                print_spec(rules[ri], e);
                di_engine_free(e);
                for (int i = 0; i < N_BATCH; i++) assert_same_trace(&ref[i], &got[i]);
            }
        }
        /* alone, too */
        if (ti == 0) {
            di_engine *e = open_engine(1, "ngram", "greedy", 4);
            run_all(e, 1, temps[ti], got);
            di_engine_free(e);
            assert_same_trace(&ref[0], &got[0]);
        }
    }
}

/* A draft model of the same vocabulary: the default model drafting for
 * itself. Its drafts are the target's own greedy tokens (same weights,
 * batch-invariant kernels), so every draft must be accepted, and the
 * output is unchanged. */
static void draft_model_output_equals_output_without_speculation(void **state) {
    (void)state;
    if (!di_test_default_model()) skip();
    static trace got[N_BATCH];
    const trace *ref = reference(0.0f, N_GEN);
    char spec[4200];
    snprintf(spec, sizeof spec, "draft:%s", di_test_default_model());
    di_engine *e = open_engine(2, spec, "greedy", 3);
    run_all(e, N_BATCH, 0.0f, got);
    di_engine_stats st;
    di_engine_get_stats(e, &st);
    print_spec("draft model", e);
    assert_true(st.spec_verified > 0);
    assert_int_equal(st.spec_accepted, st.spec_verified);
    di_engine_free(e);
    for (int i = 0; i < N_BATCH; i++) assert_same_trace(&ref[i], &got[i]);
}

/* ---- test drafters --------------------------------------------------------- */

/* Proposes, from the reference traces, what the target will emit: the
 * continuation of the reference whose generated prefix the sequence
 * carries. With `miss_seed` != 0 each draft is wrong with probability 1/2
 * and the number of drafts varies, from a hash of (seed, position). */
typedef struct oracle_drafter {
    di_drafter base;
    const trace *ref;
    int n_ref;
    uint64_t miss_seed;
    int32_t n_vocab;
} oracle_drafter;

static uint32_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (uint32_t)x;
}

static di_status oracle_propose(di_drafter *base, const di_spec_seq *seqs, int32_t n, di_spec_drafts *out,
                                di_threadpool *pool, di_error *err) {
    (void)pool;
    (void)err;
    oracle_drafter *d = (oracle_drafter *)base;
    for (int32_t i = 0; i < n; i++) {
        const di_spec_seq *q = &seqs[i];
        int32_t g = q->n_tokens - q->n_prompt; /* generated so far */
        out[i].n = 0;
        out[i].has_q = false;
        for (int r = 0; r < d->n_ref; r++) {
            const trace *t = &d->ref[r];
            if (g > t->n || memcmp(t->tokens, q->tokens + q->n_prompt, sizeof(int32_t) * (size_t)g)) continue;
            int32_t k = q->k_max;
            if (d->miss_seed) k = (int32_t)(mix(d->miss_seed ^ (uint64_t)q->n_tokens * 31) % (uint32_t)(k + 1));
            for (int32_t j = 0; j < k && g + j < t->n; j++) {
                int32_t tok = t->tokens[g + j];
                if (d->miss_seed && mix(d->miss_seed * 7 + (uint64_t)(q->n_tokens + j)) % 2)
                    tok = (tok + 1) % d->n_vocab;
                out[i].tokens[j] = tok;
                out[i].confidence[j] = 1.0f;
                out[i].n = j + 1;
            }
            break;
        }
    }
    return DI_OK;
}

static void oracle_free(di_drafter *d) { free(d); }
static const di_drafter_ops ORACLE_OPS = {"oracle", oracle_propose, NULL, oracle_free};

static di_drafter *oracle(const trace *ref, int n_ref, uint64_t miss_seed) {
    oracle_drafter *d = calloc(1, sizeof *d);
    assert_non_null(d);
    d->base.ops = &ORACLE_OPS;
    d->ref = ref;
    d->n_ref = n_ref;
    d->miss_seed = miss_seed;
    d->n_vocab = 49152;
    return &d->base;
}

/* Always right: every verify step emits k accepted drafts + 1 token. The
 * first token comes from the prompt's step; then each step emits k+1 until
 * max_tokens leaves room for fewer. */
static void always_accepting_drafter_yields_k_plus_1_tokens_per_step(void **state) {
    (void)state;
    if (!di_test_default_model()) skip();
    static trace got[1];
    const trace *ref = reference(0.0f, N_GEN);
    const int32_t k = 4;
    di_engine *e = open_engine(2, NULL, NULL, 0);
    di_error err;
    assert_int_equal(di_engine_set_drafter(e, oracle(ref, 1, 0), DI_SPEC_ACCEPT_GREEDY, k, &err), DI_OK);
    run_all(e, 1, 0.0f, got);
    di_engine_stats st;
    di_engine_get_stats(e, &st);
    print_spec("oracle", e);
    assert_same_trace(&ref[0], &got[0]);
    /* N_GEN - 1 tokens after the first, k + 1 per step, the last step
     * what is left */
    int64_t steps = (N_GEN - 1 + k) / (k + 1);
    assert_int_equal(st.spec_verify_steps, steps);
    assert_int_equal(st.spec_accepted, st.spec_verified);
    assert_int_equal(st.spec_accepted, N_GEN - 1 - steps);
    assert_int_equal(st.n_steps, 1 + steps);
    for (int j = 0; j < k; j++) assert_int_equal(st.spec_accepted_at[j], st.spec_verified_at[j]);
    di_engine_free(e);
}

/* Random hits and misses and random draft counts over a long generation,
 * batched, greedy and seeded: the rejected rows' KV is forgotten without a
 * trace, so every token and every logprob equals the run without drafts. */
static void random_rejections_leave_the_kv_as_without_speculation(void **state) {
    (void)state;
    if (!di_test_default_model()) skip();
    static trace got[N_BATCH];
    const float temps[2] = {0.0f, 0.8f};
    for (int ti = 0; ti < 2; ti++) {
        const trace *ref = reference(temps[ti], N_LONG);
        di_engine *e = open_engine(2, NULL, NULL, 0);
        di_error err;
        assert_int_equal(di_engine_set_drafter(e, oracle(ref, N_BATCH, 12345 + (uint64_t)ti),
                                               ti ? DI_SPEC_ACCEPT_LOSSLESS : DI_SPEC_ACCEPT_GREEDY, 5, &err),
                         DI_OK);
        run_n(e, N_BATCH, temps[ti], N_LONG, got);
        di_engine_stats st;
        di_engine_get_stats(e, &st);
        print_spec("random", e);
        assert_true(st.spec_accepted > 0);
        assert_true(st.spec_accepted < st.spec_verified);
        di_engine_free(e);
        for (int i = 0; i < N_BATCH; i++) assert_same_trace(&ref[i], &got[i]);
    }
}

static void bad_spec_values_fail_with_a_message(void **state) {
    (void)state;
    if (!di_test_default_model()) skip();
    const char *bad[] = {"bogus", "draft:", "draft:/nonexistent/model.gguf", "dspark"};
    const di_status want[] = {DI_ERR_INVALID_ARG, DI_ERR_INVALID_ARG, 0, DI_ERR_UNSUPPORTED};
    for (int i = 0; i < 4; i++) {
        di_engine_params p = di_engine_params_default();
        p.model_path = di_test_default_model();
        p.n_ctx = 256;
        p.kv_tokens = 512;
        p.spec = bad[i];
        di_engine *e = NULL;
        di_error err;
        di_status s = di_engine_create(&p, &e, &err);
        assert_int_not_equal(s, DI_OK);
        if (want[i]) assert_int_equal(s, want[i]);
        assert_null(e);
        assert_true(strlen(err.msg) > 0);
        print_message("--spec %s: %s\n", bad[i], err.msg);
    }
    di_engine_params p = di_engine_params_default();
    p.model_path = di_test_default_model();
    p.spec = "ngram";
    p.spec_accept = "sometimes";
    di_engine *e = NULL;
    di_error err;
    assert_int_equal(di_engine_create(&p, &e, &err), DI_ERR_INVALID_ARG);
    p.spec_accept = NULL;
    p.spec_k = DI_SPEC_MAX_DRAFTS + 1;
    assert_int_equal(di_engine_create(&p, &e, &err), DI_ERR_RANGE);
    assert_null(e);
}

/* DeepSeek-V4 (window, compressed and indexer state, all per position)
 * speculates through the same verifier: greedy traces with --spec ngram
 * equal those without, drafts were made and rejected drafts rolled back. */
static void deepseek_v4_speculates_with_unchanged_output(void **state) {
    (void)state;
    char dir[4096];
    di_test_path(dir, sizeof dir, "tests/data/golden/deepseek_v4/tiny_bf16");
    trace with[2], without[2];
    for (int on = 0; on < 2; on++) {
        di_engine_params p = di_engine_params_default();
        p.model_path = dir;
        p.kv_tokens = 1024;
        p.check_integrity = true;
        p.spec = on ? "ngram" : "off";
        di_engine *e = NULL;
        di_error err;
        assert_int_equal(di_engine_create(&p, &e, &err), DI_OK);
        run_n(e, 2, 0.0f, N_LONG, on ? with : without);
        if (on) {
            di_engine_stats st;
            di_engine_get_stats(e, &st);
            print_message("deepseek_v4 --spec ngram: drafted %lld, accepted %lld\n", (long long)st.spec_drafted,
                          (long long)st.spec_accepted);
            assert_true(st.spec_drafted > 0);
        }
        di_engine_free(e);
    }
    for (int i = 0; i < 2; i++) assert_same_trace(&with[i], &without[i]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(ngram_output_equals_output_without_speculation),
        cmocka_unit_test(draft_model_output_equals_output_without_speculation),
        cmocka_unit_test(always_accepting_drafter_yields_k_plus_1_tokens_per_step),
        cmocka_unit_test(random_rejections_leave_the_kv_as_without_speculation),
        cmocka_unit_test(bad_spec_values_fail_with_a_message),
        cmocka_unit_test(deepseek_v4_speculates_with_unchanged_output),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
