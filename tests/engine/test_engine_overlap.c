/* Grammar masks filled beside the forward (di_engine_params.no_overlap
 * false, the default) change where the mask time is spent, never an
 * output: greedy and seeded traces -- tokens, logprobs, top alternatives,
 * text, finish -- are bit-identical with the early masks on and off, for
 * requests alone and batched, with and without a grammar, on 1 and 2
 * threads. */
#include "test_util.h"
#include "trace.h"

#include "deepinfer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef DI_SANITIZE_BUILD
#define N_GEN 10
#define N_SOLO 1 /* requests also run alone: the greedy constrained one */
#else
#define N_GEN 20
#define N_SOLO 3
#endif
#define N_TOP 3
#define N_REQ 6


static const char *SCHEMA =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":\"integer\"},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}}},\"required\":[\"name\",\"age\",\"tags\"]}";

/* Request i: even ones follow the schema, odd ones are free text; 0 and 1
 * greedy, the others sampled with their own seed. */
static di_request make_request(int i, trace *t) {
    static const char *prompts[N_REQ] = {
        "Describe a cat as JSON with a name, an age and tags:", "The history of the printing press",
        "Describe a city as JSON:", "Once upon a time", "A person, as JSON:", "def fibonacci(n):",
    };
    di_request r;
    memset(&r, 0, sizeof r);
    r.text = prompts[i];
    r.max_tokens = N_GEN;
    r.ignore_eos = i % 2 == 1;
    r.sampling = di_sampling_params_default();
    r.sampling.temperature = i < 2 ? 0.0f : 0.9f;
    r.sampling.seed = 77 + (uint64_t)i;
    r.sampling.logprobs = true;
    r.sampling.top_logprobs = N_TOP;
    if (i % 2 == 0) r.constraint = (di_constraint){.kind = DI_CONSTRAINT_JSON_SCHEMA, .text = SCHEMA};
    r.on_event = trace_record;
    r.user = t;
    return r;
}

/* Runs requests [first, first + n) together; the stats of the run. */
static di_engine_stats run(int threads, bool no_overlap, int first, int n, trace *tr) {
    di_engine_params p = di_engine_params_default();
    p.model_path = di_test_default_model();
    p.n_threads = threads;
    p.n_ctx = 256;
    p.kv_tokens = 2048;
    p.no_overlap = no_overlap;
    p.check_integrity = true;
    di_engine *e = NULL;
    di_error err;
    assert_int_equal(di_engine_create(&p, &e, &err), DI_OK);
    for (int i = first; i < first + n; i++) {
        memset(&tr[i], 0, sizeof tr[i]);
        di_request r = make_request(i, &tr[i]);
        if (di_engine_submit(e, &r, NULL, &err)) fail_msg("submit %d: %s", i, err.msg);
    }
    if (di_engine_run(e, &err)) fail_msg("run: %s", err.msg);
    di_engine_stats st;
    di_engine_get_stats(e, &st);
    di_engine_free(e);
    return st;
}

static void assert_same(const trace *a, const trace *b, const char *what, int i) {
    if (a->n != b->n || a->finish != b->finish || a->text_len != b->text_len ||
        memcmp(a->tokens, b->tokens, sizeof(int32_t) * (size_t)a->n) ||
        memcmp(a->logprob, b->logprob, sizeof(float) * (size_t)a->n) ||
        memcmp(a->top, b->top, sizeof a->top[0] * (size_t)a->n) ||
        memcmp(a->text, b->text, a->text_len))
        fail_msg("%s: request %d differs (%d vs %d tokens: \"%.*s\" vs \"%.*s\")", what, i, a->n, b->n,
                 (int)a->text_len, a->text, (int)b->text_len, b->text);
}

static void early_masks_change_no_output(void **state) {
    (void)state;
    if (!di_test_default_model()) skip();
    static trace ref[N_REQ], tr[N_REQ];
    /* the reference: batched, 2 threads, masks after the forward */
    di_engine_stats st = run(2, true, 0, N_REQ, ref);
    assert_int_equal(st.n_masks_early, 0);
    assert_int_equal(st.n_masks_overlapped, 0);
    for (int i = 0; i < N_REQ; i += 2) assert_true(ref[i].n > 0);
    for (int i = 1; i < N_REQ; i += 2) assert_int_equal(ref[i].n, N_GEN);
    char what[64];
    for (int threads = 1; threads <= 2; threads++)
        for (int off = 0; off < 2; off++) {
            if (threads == 2 && off) continue; /* the reference itself */
            st = run(threads, off, 0, N_REQ, tr);
            snprintf(what, sizeof what, "batched, %d thread(s), early masks %s", threads, off ? "off" : "on");
            for (int i = 0; i < N_REQ; i++) assert_same(&ref[i], &tr[i], what, i);
            /* on: every constrained row's mask went ahead of sampling */
            if (!off) assert_true(st.n_masks_early > 0);
            else assert_int_equal(st.n_masks_early, 0);
            /* one thread has no idle worker: side_end fills them all */
            if (threads == 1) assert_int_equal(st.n_masks_overlapped, 0);
            assert_true(st.n_masks_overlapped <= st.n_masks_early);
        }
    /* alone: a greedy and a seeded constrained request, and a free one */
    const int solo[] = {0, 2, 3};
    for (int k = 0; k < N_SOLO; k++)
        for (int off = 0; off < 2; off++) {
            int i = solo[k];
            st = run(2, off, i, 1, tr);
            snprintf(what, sizeof what, "alone, early masks %s", off ? "off" : "on");
            assert_same(&ref[i], &tr[i], what, i);
            if (!off && i % 2 == 0) assert_int_equal(st.n_masks_early, tr[i].n);
        }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(early_masks_change_no_output),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
