/* The engine end to end on the real default model: seeded sampling is
 * independent of batch composition, thread count and prefix-cache hits;
 * cancellation, admission control, stop strings and KV accounting;
 * teacher-forced prompt logprobs. */
#include "test_util.h"
#include "trace.h"

#include "deepinfer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_GEN 12
#define N_TOP 5


static const char *PROMPTS[16] = {
    "The history of the printing press", "Write a haiku about rain.", "2 + 2 =",
    "List three fruits:", "Once upon a time", "Explain photosynthesis briefly.",
    "def fibonacci(n):", "The capital of Japan is", "Translate 'hello' to French:",
    "What is a prime number?", "Roses are red,", "The best way to learn C is",
    "import numpy as np\n", "Q: Why is the sky blue?\nA:", "Dear diary,", "In 1969,",
};

static di_engine *open_engine(int threads, bool prefix_cache) {
    const char *model = di_test_default_model();
    if (!model) return NULL;
    di_engine_params p = di_engine_params_default();
    p.model_path = model;
    p.n_threads = threads;
    p.n_ctx = 512;
    p.kv_tokens = 4096;
    p.no_prefix_cache = !prefix_cache;
    p.check_integrity = true;
    di_engine *e = NULL;
    di_error err;
    assert_int_equal(di_engine_create(&p, &e, &err), DI_OK);
    return e;
}

static di_request make_request(const char *prompt, trace *t, uint64_t seed) {
    di_request r;
    memset(&r, 0, sizeof r);
    r.text = prompt;
    r.max_tokens = N_GEN;
    r.ignore_eos = true;
    r.sampling = di_sampling_params_default();
    r.sampling.temperature = 0.8f;
    r.sampling.top_p = 0.95f;
    r.sampling.seed = seed;
    r.sampling.logprobs = true;
    r.sampling.top_logprobs = N_TOP;
    r.on_event = trace_record;
    r.user = t;
    return r;
}


static void run_alone(int threads, int idx, trace *t) {
    di_engine *e = open_engine(threads, false);
    di_request r = make_request(PROMPTS[idx], t, 1000 + (uint64_t)idx);
    di_error err;
    assert_int_equal(di_engine_submit(e, &r, NULL, &err), DI_OK);
    assert_int_equal(di_engine_run(e, &err), DI_OK);
    di_engine_free(e);
}

static void seeded_output_is_independent_of_batch_and_threads(void **state) {
    (void)state;
    if (!di_test_default_model()) skip();
    static trace alone[16], batched[16], batched1[16];
    for (int i = 0; i < 16; i += 5) run_alone(2, i, &alone[i]);
    /* all 16 at once, 2 threads, then 1 thread */
    for (int pass = 0; pass < 2; pass++) {
        trace *tr = pass ? batched1 : batched;
        memset(tr, 0, sizeof(trace) * 16);
        di_engine *e = open_engine(pass ? 1 : 2, false);
        di_error err;
        for (int i = 0; i < 16; i++) {
            di_request r = make_request(PROMPTS[i], &tr[i], 1000 + (uint64_t)i);
            assert_int_equal(di_engine_submit(e, &r, NULL, &err), DI_OK);
        }
        assert_int_equal(di_engine_run(e, &err), DI_OK);
        di_engine_stats st;
        di_engine_get_stats(e, &st);
        assert_int_equal(st.kv_blocks_free + st.kv_blocks_cached, st.kv_blocks_total);
        di_engine_free(e);
    }
    for (int i = 0; i < 16; i++) {
        assert_int_equal(batched[i].n, N_GEN);
        assert_same_trace(&batched[i], &batched1[i]);
        if (i % 5 == 0) assert_same_trace(&alone[i], &batched[i]);
    }
}

/* --max-num-seqs, --max-prefill-tokens and --tpot-target-ms only change
 * which requests share a step: every output stays the solo one. (The
 * target is far below any real step, so admission is one at a time however
 * fast the machine is; nothing here depends on wall time.) */
static void latency_controls_change_steps_not_outputs(void **state) {
    (void)state;
    if (!di_test_default_model()) skip();
    static trace alone[16], limited[16];
    for (int i = 0; i < 16; i += 5) run_alone(2, i, &alone[i]);
    const char *model = di_test_default_model();
    di_engine_params p = di_engine_params_default();
    p.model_path = model;
    p.n_threads = 2;
    p.n_ctx = 512;
    p.kv_tokens = 4096;
    p.no_prefix_cache = true;
    p.check_integrity = true;
    p.max_seqs = 3;
    p.max_prefill_tokens = 3;
    p.tpot_target_ms = 0.001;
    di_engine *e = NULL;
    di_error err;
    assert_int_equal(di_engine_create(&p, &e, &err), DI_OK);
    for (int i = 0; i < 16; i++) {
        di_request r = make_request(PROMPTS[i], &limited[i], 1000 + (uint64_t)i);
        assert_int_equal(di_engine_submit(e, &r, NULL, &err), DI_OK);
    }
    assert_int_equal(di_engine_run(e, &err), DI_OK);
    di_engine_stats st;
    di_engine_get_stats(e, &st);
    assert_true(st.n_deferred_steps > 0);
    assert_true(st.step_decode_ms >= 0 && st.step_prefill_ms >= 0 && st.step_fixed_ms >= 0);
    di_engine_free(e);
    for (int i = 0; i < 16; i++) {
        assert_int_equal(limited[i].n, N_GEN);
        if (i % 5 == 0) assert_same_trace(&alone[i], &limited[i]);
    }
    /* Bad values are refused, not clamped. */
    p.tpot_target_ms = -1;
    assert_int_equal(di_engine_create(&p, &e, &err), DI_ERR_INVALID_ARG);
    p.tpot_target_ms = 0;
    p.max_prefill_tokens = -2;
    assert_int_equal(di_engine_create(&p, &e, &err), DI_ERR_INVALID_ARG);
}

static void prefix_cache_hit_gives_identical_output(void **state) {
    (void)state;
    if (!di_test_default_model()) skip();
    /* a long shared prefix spans several full blocks */
    char prompt[1024];
    snprintf(prompt, sizeof prompt, "%s",
             "You are a helpful assistant who answers briefly and precisely. Always think about "
             "the question before answering, and never invent facts. Question: what is the "
             "boiling point of water at sea level?");
    di_engine *e = open_engine(2, true);
    trace a = {0}, b = {0};
    di_error err;
    di_request r = make_request(prompt, &a, 7);
    assert_int_equal(di_engine_submit(e, &r, NULL, &err), DI_OK);
    assert_int_equal(di_engine_run(e, &err), DI_OK);
    r = make_request(prompt, &b, 7);
    assert_int_equal(di_engine_submit(e, &r, NULL, &err), DI_OK);
    assert_int_equal(di_engine_run(e, &err), DI_OK);
    assert_int_equal(a.stats.n_cached, 0);
    assert_true(b.stats.n_cached >= 16);
    assert_same_trace(&a, &b);
    assert_int_equal(di_engine_check_integrity(e, &err), DI_OK);
    di_engine_free(e);
}

static void cancel_from_callback_and_by_id(void **state) {
    (void)state;
    if (!di_test_default_model()) skip();
    di_engine *e = open_engine(2, true);
    trace a = {0}, b = {0}, c = {0};
    a.cancel_after = 3;
    di_error err;
    int64_t id_b;
    di_request r = make_request(PROMPTS[0], &a, 1);
    assert_int_equal(di_engine_submit(e, &r, NULL, &err), DI_OK);
    r = make_request(PROMPTS[1], &b, 2);
    assert_int_equal(di_engine_submit(e, &r, &id_b, &err), DI_OK);
    r = make_request(PROMPTS[2], &c, 3);
    assert_int_equal(di_engine_submit(e, &r, NULL, &err), DI_OK);
    assert_int_equal(di_engine_step(e, &err), DI_OK);
    assert_int_equal(di_engine_cancel(e, id_b), DI_OK);
    assert_int_equal(di_engine_run(e, &err), DI_OK);
    assert_int_equal(a.finish, DI_FINISH_REASON_CANCEL);
    assert_int_equal(a.n, 3);
    assert_int_equal(b.finish, DI_FINISH_REASON_CANCEL);
    assert_int_equal(c.finish, DI_FINISH_REASON_LENGTH);
    assert_int_equal(c.n, N_GEN);
    assert_int_equal(di_engine_cancel(e, id_b), DI_ERR_NOT_FOUND);
    di_engine_stats st;
    di_engine_get_stats(e, &st);
    assert_int_equal(st.kv_blocks_free + st.kv_blocks_cached, st.kv_blocks_total);
    di_engine_free(e);
}

static void requests_that_cannot_fit_are_refused_at_submit(void **state) {
    (void)state;
    if (!di_test_default_model()) skip();
    di_engine *e = open_engine(1, true);
    trace t = {0};
    di_error err;
    di_request r = make_request(PROMPTS[0], &t, 1);
    r.max_tokens = 100000;
    assert_int_equal(di_engine_submit(e, &r, NULL, &err), DI_ERR_RANGE);
    assert_non_null(strstr(err.msg, "context"));
    r.max_tokens = 4;
    r.sampling.temperature = -1;
    assert_int_equal(di_engine_submit(e, &r, NULL, &err), DI_ERR_RANGE);
    r.sampling.temperature = 0;
    r.text = NULL;
    assert_int_equal(di_engine_submit(e, &r, NULL, &err), DI_ERR_INVALID_ARG);
    int32_t bad[2] = {1, 1 << 30};
    r.tokens = bad;
    r.n_tokens = 2;
    assert_int_equal(di_engine_submit(e, &r, NULL, &err), DI_ERR_RANGE);
    /* the engine is still fine */
    r = make_request(PROMPTS[3], &t, 1);
    assert_int_equal(di_engine_submit(e, &r, NULL, &err), DI_OK);
    assert_int_equal(di_engine_run(e, &err), DI_OK);
    assert_int_equal(t.n, N_GEN);
    di_engine_free(e);
}

static di_engine *open_engine_budget(int threads, int32_t batch_tokens, const char *kernels);

/* Exact kernels: the 135M model answers "Paris" with f32 activations;
 * int8 activations (the default for quantized GGUF, as in llama.cpp) flip
 * its greedy answer into French prose. */
static void greedy_chat_answers_and_stops(void **state) {
    (void)state;
    if (!di_test_default_model()) skip();
    di_engine *e = open_engine_budget(2, 0, "exact");
    trace t = {0};
    di_message m[1] = {{"user", "What is the capital of France?"}};
    di_request r;
    memset(&r, 0, sizeof r);
    r.messages = m;
    r.n_messages = 1;
    r.max_tokens = 40;
    r.sampling = di_sampling_params_default();
    r.sampling.temperature = 0;
    r.on_event = trace_record;
    r.user = &t;
    di_error err;
    assert_int_equal(di_engine_submit(e, &r, NULL, &err), DI_OK);
    assert_int_equal(di_engine_run(e, &err), DI_OK);
    t.text[t.text_len] = 0;
    assert_non_null(strstr(t.text, "Paris"));
    assert_int_equal(t.finish, DI_FINISH_REASON_STOP);
    /* the same with a stop string: output ends before it */
    trace s = {0};
    const char *stops[] = {"Paris"};
    r.stop = stops;
    r.n_stop = 1;
    r.user = &s;
    assert_int_equal(di_engine_submit(e, &r, NULL, &err), DI_OK);
    assert_int_equal(di_engine_run(e, &err), DI_OK);
    s.text[s.text_len] = 0;
    assert_int_equal(s.finish, DI_FINISH_REASON_STOP);
    assert_null(strstr(s.text, "Paris"));
    assert_true(strncmp(t.text, s.text, s.text_len) == 0);
    di_engine_free(e);
}

/* Runs one greedy constrained request; returns its text in t. */
static di_status run_constrained(di_engine *e, const char *prompt, di_constraint c, int max_tokens,
                                 trace *t) {
    di_message m[1] = {{"user", prompt}};
    di_request r;
    memset(&r, 0, sizeof r);
    r.messages = m;
    r.n_messages = 1;
    r.max_tokens = max_tokens;
    r.sampling = di_sampling_params_default();
    r.sampling.temperature = 0.7f;
    r.sampling.seed = 11;
    r.constraint = c;
    r.on_event = trace_record;
    r.user = t;
    di_error err;
    di_status s = di_engine_submit(e, &r, NULL, &err);
    if (s) return s;
    assert_int_equal(di_engine_run(e, &err), DI_OK);
    t->text[t->text_len] = 0;
    return DI_OK;
}

static void constrained_output_follows_the_grammar(void **state) {
    (void)state;
    if (!di_test_default_model()) skip();
    di_engine *e = open_engine(2, true);
    /* regex: the whole output matches, and generation stops when complete */
    trace t = {0};
    di_constraint re = {DI_CONSTRAINT_REGEX, "[0-9]{3}-[0-9]{4}", false, false};
    assert_int_equal(run_constrained(e, "Give me a phone number.", re, 40, &t), DI_OK);
    assert_int_equal(t.finish, DI_FINISH_REASON_STOP);
    assert_int_equal(strlen(t.text), 8);
    for (int i = 0; i < 8; i++) assert_true(i == 3 ? t.text[i] == '-' : (t.text[i] >= '0' && t.text[i] <= '9'));
    /* EBNF with a closed set of answers */
    trace y = {0};
    di_constraint yn = {DI_CONSTRAINT_EBNF, "root ::= (\"yes\" | \"no\") \".\"", false, false};
    assert_int_equal(run_constrained(e, "Is water wet?", yn, 10, &y), DI_OK);
    assert_true(!strcmp(y.text, "yes.") || !strcmp(y.text, "no."));
    /* JSON schema with a closed object: exactly the keys, in order */
    trace j = {0};
    di_constraint js = {DI_CONSTRAINT_JSON_SCHEMA,
                        "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":12},"
                        "\"population\":{\"type\":\"integer\"}},\"required\":[\"city\",\"population\"],"
                        "\"additionalProperties\":false}",
                        false, false};
    assert_int_equal(run_constrained(e, "Describe Paris as JSON.", js, 60, &j), DI_OK);
    assert_int_equal(j.finish, DI_FINISH_REASON_STOP);
    assert_true(strncmp(j.text, "{\"city\":\"", 9) == 0);
    assert_non_null(strstr(j.text, "\"population\":"));
    assert_int_equal(j.text[j.text_len - 1], '}');
    /* a bad schema is refused at submit with the compiler's message */
    trace b = {0};
    di_constraint bad = {DI_CONSTRAINT_JSON_SCHEMA, "{\"type\": \"objec", false, false};
    assert_int_not_equal(run_constrained(e, "x", bad, 4, &b), DI_OK);
    di_constraint unsup = {DI_CONSTRAINT_JSON_SCHEMA, "{\"uniqueItems\": true}", false, false};
    assert_int_not_equal(run_constrained(e, "x", unsup, 4, &b), DI_OK);
    assert_int_equal(di_engine_check_integrity(e, NULL), DI_OK);
    di_engine_free(e);
}

/* prompt_logprobs (teacher forcing) */

#define PLP_MAX 96

typedef struct plp_trace {
    float lp[PLP_MAX];
    int32_t argmax[PLP_MAX];
    int32_t n;
    di_finish finish;
    di_request_stats stats;
} plp_trace;

static int record_plp(const di_event *ev) {
    plp_trace *t = ev->user;
    if (!ev->finish) return 0;
    t->finish = ev->finish;
    t->stats = ev->stats;
    t->n = ev->n_prompt_logprobs;
    if (t->n > 0 && t->n <= PLP_MAX) {
        memcpy(t->lp, ev->prompt_logprobs, sizeof(float) * (size_t)t->n);
        memcpy(t->argmax, ev->prompt_argmax, sizeof(int32_t) * (size_t)t->n);
    }
    return 0;
}

static di_engine *open_engine_budget(int threads, int32_t batch_tokens, const char *kernels) {
    di_engine_params p = di_engine_params_default();
    p.kernels = kernels;
    p.model_path = di_test_default_model();
    p.n_threads = threads;
    p.n_ctx = 512;
    p.kv_tokens = 4096;
    p.max_batch_tokens = batch_tokens;
    p.check_integrity = true;
    di_engine *e = NULL;
    di_error err;
    assert_int_equal(di_engine_create(&p, &e, &err), DI_OK);
    return e;
}

static di_request plp_request(const int32_t *toks, size_t n, plp_trace *t) {
    di_request r;
    memset(&r, 0, sizeof r);
    r.tokens = toks;
    r.n_tokens = n;
    r.max_tokens = 1;
    r.sampling = di_sampling_params_default();
    r.sampling.temperature = 0;
    r.prompt_logprobs = true;
    r.on_event = record_plp;
    r.user = t;
    return r;
}

/* Teacher-forced logprobs agree with what sampling sees at each prefix
 * (greedy token = argmax, raw logprob of the true next token), and are
 * bit-identical alone, chunked inside a batch of generating requests with
 * 1 thread, and after the prompt's blocks were cached (no cache reuse).
 * kernels: the engine's kernel table (NULL: the default exact one). */
static void check_prompt_logprobs(const char *kernels) {
    if (!di_test_default_model()) skip();
    const char *text = "The history of the printing press begins in East Asia, where woodblock "
                       "printing was used for centuries before movable type reached Europe.";
    di_engine *e = open_engine_budget(2, 0, kernels);
    di_error err;
    int32_t *toks = NULL;
    size_t n = 0;
    assert_int_equal(di_engine_tokenize(e, text, true, false, &toks, &n, &err), DI_OK);
    assert_true(n > 16 && n <= PLP_MAX);
    plp_trace alone = {0};
    di_request r = plp_request(toks, n, &alone);
    assert_int_equal(di_engine_submit(e, &r, NULL, &err), DI_OK);
    assert_int_equal(di_engine_run(e, &err), DI_OK);
    assert_int_equal(alone.finish, DI_FINISH_REASON_LENGTH);
    assert_int_equal(alone.n, (int)n - 1);
    for (int32_t i = 0; i < alone.n; i++) assert_true(alone.lp[i] <= 0.0f && alone.lp[i] > -100.0f);

    /* Against the sampler at a few prefixes: greedy token and raw top logprobs. */
    for (size_t k = 2; k < n; k += 7) { /* prefix toks[0..k) predicts toks[k]: entry k - 1 */
        trace g = {0};
        di_request q;
        memset(&q, 0, sizeof q);
        q.tokens = toks;
        q.n_tokens = k;
        q.max_tokens = 1;
        q.ignore_eos = true;
        q.sampling = di_sampling_params_default();
        q.sampling.temperature = 0;
        q.sampling.logprobs = true;
        q.sampling.top_logprobs = N_TOP;
        q.sampling.logprobs_mode = DI_LOGPROBS_RAW;
        q.on_event = trace_record;
        q.user = &g;
        assert_int_equal(di_engine_submit(e, &q, NULL, &err), DI_OK);
        assert_int_equal(di_engine_run(e, &err), DI_OK);
        assert_int_equal(g.n, 1);
        assert_int_equal(g.tokens[0], alone.argmax[k - 1]);
        for (int i = 0; i < N_TOP; i++)
            if (g.top[0][i].token == toks[k]) assert_float_equal(g.top[0][i].logprob, alone.lp[k - 1], 1e-4);
    }
    /* The prompt is cached now; a second scoring request must not reuse it. */
    plp_trace again = {0};
    r = plp_request(toks, n, &again);
    assert_int_equal(di_engine_submit(e, &r, NULL, &err), DI_OK);
    assert_int_equal(di_engine_run(e, &err), DI_OK);
    assert_int_equal(again.stats.n_cached, 0);
    assert_memory_equal(alone.lp, again.lp, sizeof(float) * (size_t)alone.n);
    assert_memory_equal(alone.argmax, again.argmax, sizeof(int32_t) * (size_t)alone.n);
    di_engine_free(e);

    /* Chunked (8 rows a step) among generating requests, 1 thread. */
    e = open_engine_budget(1, 8, kernels);
    static trace others[4];
    memset(others, 0, sizeof others);
    for (int i = 0; i < 4; i++) {
        di_request o = make_request(PROMPTS[i], &others[i], 50 + (uint64_t)i);
        assert_int_equal(di_engine_submit(e, &o, NULL, &err), DI_OK);
    }
    plp_trace batched = {0};
    r = plp_request(toks, n, &batched);
    assert_int_equal(di_engine_submit(e, &r, NULL, &err), DI_OK);
    assert_int_equal(di_engine_run(e, &err), DI_OK);
    assert_int_equal(batched.n, alone.n);
    assert_memory_equal(alone.lp, batched.lp, sizeof(float) * (size_t)alone.n);
    assert_memory_equal(alone.argmax, batched.argmax, sizeof(int32_t) * (size_t)alone.n);
    for (int i = 0; i < 4; i++) assert_int_equal(others[i].n, N_GEN);
    di_engine_free(e);
    free(toks);
}

static void prompt_logprobs_are_consistent_and_batch_invariant(void **state) {
    (void)state;
    check_prompt_logprobs(NULL);
}

/* The same with llama.cpp's numerics (kernels "ggml"): every row is
 * quantized and attends by itself, so it is as invariant. */
static void ggml_prompt_logprobs_are_consistent_and_batch_invariant(void **state) {
    (void)state;
    check_prompt_logprobs("ggml");
}

typedef struct load_log {
    int n, monotonic;
    uint64_t first, last, total;
} load_log;

static void log_load(uint64_t done, uint64_t total, void *user) {
    load_log *l = user;
    if (l->n == 0) l->first = done;
    else if (done < l->last || total != l->total) l->monotonic = 0;
    l->last = done;
    l->total = total;
    l->n++;
}

/* Model-load progress (include/deepinfer.h): with a callback the weights
 * are pre-touched and reported from 0 to their whole size (the data
 * section of the GGUF: most of the file); pretouch = -1 turns both off. */
static void load_progress_reports_the_weights_when_pretouched(void **state) {
    (void)state;
    const char *model = di_test_default_model();
    if (!model) skip();
    FILE *fp = fopen(model, "rb");
    assert_non_null(fp);
    fseek(fp, 0, SEEK_END);
    uint64_t file_bytes = (uint64_t)ftell(fp);
    fclose(fp);
    di_engine_params p = di_engine_params_default();
    p.model_path = model;
    p.n_threads = 1;
    p.n_ctx = 64;
    p.kv_tokens = 256;
    load_log l = {.monotonic = 1};
    p.load_progress = log_load;
    p.load_progress_user = &l;
    di_engine *e = NULL;
    di_error err;
    assert_int_equal(di_engine_create(&p, &e, &err), DI_OK);
    di_engine_free(e);
    assert_true(l.n >= 3); /* > 16 MiB of weights: a report between start and end */
    assert_true(l.monotonic);
    assert_int_equal(l.first, 0);
    assert_int_equal(l.last, l.total);
    assert_true(l.total <= file_bytes && l.total > file_bytes / 10 * 9);
    load_log off = {.monotonic = 1};
    p.load_progress_user = &off;
    p.pretouch = -1;
    assert_int_equal(di_engine_create(&p, &e, &err), DI_OK);
    di_engine_free(e);
    assert_int_equal(off.n, 0);
    p.pretouch = 1; /* forced, no callback */
    p.load_progress = NULL;
    assert_int_equal(di_engine_create(&p, &e, &err), DI_OK);
    di_engine_free(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(seeded_output_is_independent_of_batch_and_threads),
        cmocka_unit_test(latency_controls_change_steps_not_outputs),
        cmocka_unit_test(prefix_cache_hit_gives_identical_output),
        cmocka_unit_test(cancel_from_callback_and_by_id),
        cmocka_unit_test(requests_that_cannot_fit_are_refused_at_submit),
        cmocka_unit_test(greedy_chat_answers_and_stops),
        cmocka_unit_test(constrained_output_follows_the_grammar),
        cmocka_unit_test(prompt_logprobs_are_consistent_and_batch_invariant),
        cmocka_unit_test(ggml_prompt_logprobs_are_consistent_and_batch_invariant),
        cmocka_unit_test(load_progress_reports_the_weights_when_pretouched),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
