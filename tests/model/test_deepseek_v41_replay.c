/* model/deepseek_v41_replay: SWA bounded replay (DeepInfer's YoCo compact
 * prefill) against the goldens of scripts/gen_goldens_bounded_replay_v41.py,
 * whose oracle is scripts/oracle_v41 with DeepInfer's compact semantics
 * (tests/data/golden/deepseek_v41/bounded/):
 *
 *   - keep >= prompt length (replay_from 0): bit-identical to the exact forward;
 *   - bounded logits of every kept prompt row and of greedy decode steps after
 *     it against the oracle's bounded computation (ideal: 1e-4 of the logit
 *     scale at every row; deepinfer: as test_deepseek_v41.c judges that mode,
 *     whose fp8 rounding-boundary flips cascade, rms(C - oracle) within 1.5x
 *     the quantization noise rms(oracle deepinfer - oracle ideal));
 *   - chunked bounded prefill (chunks wholly before the kept tail included)
 *     gives the bits of one bounded prefill;
 *   - through the engine: greedy ids with the prefix cache hit (capped at
 *     replay_from) equal the first run's and, in ideal mode, the oracle's;
 *   - bad inputs: clipped rows wanting logits, a negative replay_from, keep
 *     below the window. */
#include "test_util.h"

#include "dsv_golden.h"

#include "deepinfer.h"
#include "base/threadpool.h"
#include "model/deepseek_v41.h"
#include "text/tokenizer.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IDEAL_TOL 1e-4    /* of the logit scale */
#define FAITHFUL_NOISE_RATIO 1.5 /* rms(C - oracle) / rms(oracle deepinfer - ideal), as test_deepseek_v41.c */
#define BLOCK 8
#define N_BLOCKS 64
#define MAX_SLOTS 2

/* Sanitizer builds (several times slower) check the oracle cases of the
 * smaller checkpoint only, and one chunked case. */
#ifdef DI_SANITIZE_BUILD
#define LIGHT 1
#else
#define LIGHT 0
#endif

static const char *const MODES[] = {"deepinfer", "ideal"}; /* by di_dsv41_numerics */

typedef struct fixture {
    json_t *doc;
    float *logits;
    size_t n_logits;
} fixture;

static char *model_dir(char *buf, size_t size, const char *name) {
    return dsv_golden_dir(buf, size, "deepseek_v41", name);
}

static int setup(void **state) {
    static fixture f;
    *state = &f;
    char dir[4096];
    model_dir(dir, sizeof dir, "bounded");
    if (!(f.doc = dsv_load_json(dir, "goldens.json"))) return -1;
    if (!(f.logits = dsv_load_f32(dir, "logits.f32", &f.n_logits))) return -1;
    return 0;
}

static int teardown(void **state) {
    fixture *f = *state;
    json_decref(f->doc);
    free(f->logits);
    return 0;
}

/* ---- one model, a cache with scattered blocks, sequences in slots ---------- */

typedef struct runner {
    di_tokenizer *tok;
    di_dsv41_model *m;
    const di_dsv41_hparams *hp;
    di_dsv41_kv *kv;
    di_dsv41_ctx *ctx;
    dsv_rows rows;        /* the batch being built (dsv_rows.h) */
    int32_t replay_from[MAX_SLOTS];
} runner;

static void runner_init(runner *r, const char *name, int num) {
    memset(r, 0, sizeof *r);
    char dir[4096];
    model_dir(dir, sizeof dir, name);
    di_error err;
    assert_int_equal(di_tok_load_json(dir, &r->tok, &err), DI_OK);
    assert_int_equal(di_dsv41_load(dir, NULL, (di_dsv41_numerics)num, r->tok, &r->m, &err), DI_OK);
    r->hp = di_dsv41_hparams_of(r->m);
    assert_int_equal(di_dsv41_kv_create(r->m, N_BLOCKS, BLOCK, &r->kv, &err), DI_OK);
    assert_int_equal(di_dsv41_ctx_create(r->m, &r->ctx, &err), DI_OK);
    dsv_rows_init(&r->rows, MAX_SLOTS, N_BLOCKS, BLOCK, 512);
}

static void runner_free(runner *r) {
    di_dsv41_ctx_free(r->ctx);
    di_dsv41_kv_free(r->kv);
    di_dsv41_free(r->m);
    di_tok_free(r->tok);
    dsv_rows_free(&r->rows);
}

static void add_row(runner *r, int32_t tok, int32_t seq, int32_t pos, int want) {
    dsv_rows_add(&r->rows, tok, seq, pos, want);
}

/* bounded: pass r->replay_from (else the exact forward) */
static di_status run(runner *r, float *logits, int bounded, di_error *err) {
    di_batch b = dsv_rows_batch(&r->rows);
    b.replay_from = bounded ? r->replay_from : NULL;
    di_status s = di_dsv41_forward(r->ctx, r->kv, &b, logits, NULL, err);
    r->rows.n = 0;
    return s;
}

/* ---- golden cases ----------------------------------------------------------- */

typedef struct bcase {
    const char *model;
    int num;
    int32_t keep, from, n_prompt, n_rows, ids[512], greedy[16], n_greedy;
    const float *logits; /* (n_rows, vocab): kept prompt rows, then decode steps */
} bcase;

static size_t n_cases(const fixture *f) { return json_array_size(json_object_get(f->doc, "cases")); }

static void get_case(const fixture *f, size_t i, bcase *c) {
    json_t *jc = json_array_get(json_object_get(f->doc, "cases"), i);
    c->model = json_string_value(json_object_get(jc, "model"));
    const char *mode = json_string_value(json_object_get(jc, "numerics"));
    c->num = !strcmp(mode, "ideal") ? DI_DSV41_NUMERICS_IDEAL : DI_DSV41_NUMERICS_DEEPINFER;
    c->keep = (int32_t)json_integer_value(json_object_get(jc, "keep"));
    c->from = (int32_t)json_integer_value(json_object_get(jc, "replay_from"));
    json_t *ids = json_object_get(jc, "prompt"), *gr = json_object_get(jc, "greedy");
    c->n_prompt = (int32_t)json_array_size(ids);
    c->n_greedy = (int32_t)json_array_size(gr);
    assert_true(c->n_prompt <= 512 && c->n_greedy <= 16 && c->from == c->n_prompt - c->keep);
    for (int32_t t = 0; t < c->n_prompt; t++) c->ids[t] = (int32_t)json_integer_value(json_array_get(ids, (size_t)t));
    for (int32_t t = 0; t < c->n_greedy; t++) c->greedy[t] = (int32_t)json_integer_value(json_array_get(gr, (size_t)t));
    c->n_rows = (int32_t)json_integer_value(json_object_get(jc, "n_rows"));
    size_t off = (size_t)json_integer_value(json_object_get(jc, "offset"));
    assert_true(c->n_rows == c->keep + c->n_greedy);
    c->logits = f->logits + off;
}

/* Prefills ids into slot 1 in chunks of `chunk` rows (kept rows want
 * logits, into out (keep, V)), then decodes the given tokens one by one
 * (their logits after the kept rows). */
static void feed(runner *r, const bcase *c, int32_t chunk, const int32_t *dec, int32_t n_dec, float *out) {
    const int32_t V = r->hp->n_vocab;
    di_error err;
    r->replay_from[1] = c->from;
    float *o = out;
    for (int32_t t0 = 0; t0 < c->n_prompt; t0 += chunk) {
        int32_t t1 = t0 + chunk < c->n_prompt ? t0 + chunk : c->n_prompt, nw = 0;
        for (int32_t t = t0; t < t1; t++) {
            add_row(r, c->ids[t], 1, t, t >= c->from);
            nw += t >= c->from;
        }
        if (run(r, o, 1, &err) != DI_OK) {
            fprintf(stderr, "%s\n", err.msg);
            fail();
        }
        o += (size_t)nw * V;
    }
    for (int32_t s = 0; s < n_dec; s++) {
        add_row(r, dec[s], 1, c->n_prompt + s, 1);
        assert_int_equal(run(r, o, 1, &err), DI_OK);
        o += V;
    }
}

static void test_keep_covering_prompt_is_exact(void **state) {
    fixture *f = *state;
    for (int num = 0; num < 2; num++) {
        bcase c;
        get_case(f, 0, &c);
        runner r;
        runner_init(&r, c.model, num);
        const int32_t V = r.hp->n_vocab, n = c.n_prompt;
        float *exact = malloc(sizeof(float) * (size_t)n * V), *bnd = malloc(sizeof(float) * (size_t)n * V);
        di_error err;
        for (int32_t t = 0; t < n; t++) add_row(&r, c.ids[t], 0, t, 1);
        assert_int_equal(run(&r, exact, 0, &err), DI_OK);
        r.replay_from[1] = 0; /* keep = n: nothing clipped */
        for (int32_t t = 0; t < n; t++) add_row(&r, c.ids[t], 1, t, 1);
        assert_int_equal(run(&r, bnd, 1, &err), DI_OK);
        assert_memory_equal(exact, bnd, sizeof(float) * (size_t)n * V);
        free(exact);
        free(bnd);
        runner_free(&r);
    }
}

static void test_bounded_matches_oracle(void **state) {
    fixture *f = *state;
    for (size_t i = 0; i < n_cases(f); i++) {
        bcase c;
        get_case(f, i, &c);
        if (LIGHT && strcmp(c.model, "tiny_b")) continue;
        runner r;
        runner_init(&r, c.model, c.num);
        const int32_t V = r.hp->n_vocab;
        float *got = malloc(sizeof(float) * (size_t)c.n_rows * V);
        feed(&r, &c, c.n_prompt, c.greedy, c.n_greedy, got);
        double scale = 0, worst = 0, worst_dec = 0;
        for (int64_t k = 0; k < (int64_t)c.n_rows * V; k++) scale = fmax(scale, fabs(c.logits[k]));
        for (int32_t row = 0; row < c.n_rows; row++)
            for (int32_t v = 0; v < V; v++) {
                double e = fabs((double)got[(size_t)row * V + v] - c.logits[(size_t)row * V + v]);
                if (row < c.keep) worst = fmax(worst, e);
                else worst_dec = fmax(worst_dec, e);
            }
        printf("%s %-9s keep %d: kept rows max |diff| %.3g, decode rows %.3g (%.2g / %.2g of the scale %.3g)\n",
               c.model, MODES[c.num], (int)c.keep, worst, worst_dec, worst / scale, worst_dec / scale, scale);
        if (c.num == DI_DSV41_NUMERICS_IDEAL) {
            assert_true(worst <= IDEAL_TOL * scale && worst_dec <= IDEAL_TOL * scale);
        } else {
            /* fp8 rounding-boundary flips cascade (test_deepseek_v41.c:
             * check_feed): the deviation from the oracle at the level of the
             * quantization noise itself, measured against the ideal golden */
            const bcase *id = NULL;
            bcase ic;
            for (size_t j = 0; j < n_cases(f) && !id; j++) {
                get_case(f, j, &ic);
                if (ic.num == DI_DSV41_NUMERICS_IDEAL && !strcmp(ic.model, c.model) && ic.keep == c.keep) id = &ic;
            }
            assert_non_null(id);
            double sq_co = 0, sq_oi = 0, sq_ci = 0;
            for (int64_t k = 0; k < (int64_t)c.n_rows * V; k++) {
                double o = got[k], w = c.logits[k], d = id->logits[k];
                sq_co += (o - w) * (o - w);
                sq_oi += (w - d) * (w - d);
                sq_ci += (o - d) * (o - d);
            }
            double n_f = (double)c.n_rows * V, rms_co = sqrt(sq_co / n_f), rms_oi = sqrt(sq_oi / n_f);
            double rms_ci = sqrt(sq_ci / n_f);
            printf("  rms(C - oracle) %.3g, quantization noise rms(oracle - ideal) %.3g, rms(C - ideal) %.3g\n",
                   rms_co, rms_oi, rms_ci);
            assert_true(rms_co <= FAITHFUL_NOISE_RATIO * rms_oi);
            assert_true(rms_ci >= 0.5 * rms_oi && rms_ci <= 2.0 * rms_oi);
        }
        if (c.num == DI_DSV41_NUMERICS_IDEAL) /* the oracle's greedy ids from our own logits */
            for (int32_t s = 0; s < c.n_greedy; s++)
                assert_int_equal(dsv_argmax(got + (size_t)(c.keep - 1 + s) * V, V), c.greedy[s]);
        free(got);
        runner_free(&r);
    }
}

static void test_chunked_bounded_equals_one_shot(void **state) {
    fixture *f = *state;
    for (size_t i = 0; i < (LIGHT ? 1 : n_cases(f)); i += 2) { /* one numerics per keep is enough */
        bcase c;
        get_case(f, i, &c);
        runner r;
        runner_init(&r, c.model, c.num);
        const int32_t V = r.hp->n_vocab;
        size_t bytes = sizeof(float) * (size_t)c.n_rows * V;
        float *one = malloc(bytes), *chunked = malloc(bytes);
        feed(&r, &c, c.n_prompt, c.greedy, c.n_greedy, one);
        /* 7-row chunks: several wholly before the kept tail, one across it */
        feed(&r, &c, 7, c.greedy, c.n_greedy, chunked);
        assert_memory_equal(one, chunked, bytes);
        free(one);
        free(chunked);
        runner_free(&r);
    }
}

typedef struct engine_out {
    int32_t ids[16], n, n_cached;
    int done;
} engine_out;

static int on_event(const di_event *ev) {
    engine_out *o = ev->user;
    if (ev->finish == DI_FINISH_REASON_NONE) return 0;
    for (int32_t i = 0; i < ev->n_tokens && i < 16; i++) o->ids[i] = ev->tokens[i];
    o->n = ev->n_tokens;
    o->n_cached = ev->stats.n_cached;
    o->done = 1;
    return 0;
}

static void test_engine_prefix_cache_and_chunks(void **state) {
    fixture *f = *state;
    bcase c;
    size_t ci = 0;
    for (; ci < n_cases(f); ci++) { /* the default keep, ideal numerics */
        get_case(f, ci, &c);
        if (c.num == DI_DSV41_NUMERICS_IDEAL && !strcmp(c.model, "tiny") && c.keep == 22) break;
    }
    assert_true(ci < n_cases(f));
    char dir[4096];
    model_dir(dir, sizeof dir, c.model);
    di_engine_params p = di_engine_params_default();
    p.model_path = dir;
    p.numerics = "ideal";
    p.n_threads = 2;
    p.block_size = 8;
    p.max_batch_tokens = 16; /* chunked prefill */
    p.check_integrity = true;
    p.bounded_replay = -1; /* the default: window + 6 = the golden's keep */
    di_engine *e;
    di_error err;
    assert_int_equal(di_engine_create(&p, &e, &err), DI_OK);
    engine_out outs[2];
    memset(outs, 0, sizeof outs);
    for (int round = 0; round < 2; round++) {
        di_request q;
        memset(&q, 0, sizeof q);
        q.tokens = c.ids;
        q.n_tokens = (size_t)c.n_prompt;
        q.max_tokens = c.n_greedy;
        q.sampling = di_sampling_params_default();
        q.sampling.temperature = 0;
        q.ignore_eos = true;
        q.on_event = on_event;
        q.user = &outs[round];
        assert_int_equal(di_engine_submit(e, &q, NULL, &err), DI_OK);
        assert_int_equal(di_engine_run(e, &err), DI_OK);
        /* prompt_logprobs cannot be served: the clipped rows have no logits */
        q.prompt_logprobs = true;
        assert_int_equal(di_engine_submit(e, &q, NULL, &err), DI_ERR_INVALID_ARG);
        assert_non_null(strstr(err.msg, "bounded-replay"));
    }
    printf("engine: prefix hit %d tokens of %d (cap %d)\n", (int)outs[1].n_cached, (int)c.n_prompt, (int)c.from);
    assert_true(outs[1].n_cached > 0 && outs[1].n_cached <= c.from);
    for (int round = 0; round < 2; round++) {
        assert_true(outs[round].done);
        assert_int_equal(outs[round].n, c.n_greedy);
        for (int32_t s = 0; s < c.n_greedy; s++) assert_int_equal(outs[round].ids[s], c.greedy[s]);
    }
    di_engine_free(e);
}

static void test_bad_inputs_rejected(void **state) {
    fixture *f = *state;
    bcase c;
    get_case(f, 0, &c);
    runner r;
    runner_init(&r, c.model, DI_DSV41_NUMERICS_IDEAL);
    float *lg = malloc(sizeof(float) * 4 * (size_t)r.hp->n_vocab);
    di_error err;
    r.replay_from[0] = 5;
    add_row(&r, 7, 0, 0, 1); /* clipped, yet wants logits */
    assert_int_equal(run(&r, lg, 1, &err), DI_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "replay_from"));
    r.replay_from[0] = -1;
    add_row(&r, 7, 0, 0, 1);
    assert_int_equal(run(&r, lg, 1, &err), DI_ERR_INVALID_ARG);
    assert_int_equal(di_dsv41_replay_check(r.m, r.hp->window - 1, &err), DI_ERR_INVALID_ARG);
    assert_int_equal(di_dsv41_replay_check(r.m, r.hp->window, &err), DI_OK);
    assert_int_equal(di_dsv41_replay_default_keep(r.hp), r.hp->window + DI_DSV41_REPLAY_BACKTRACK);
    free(lg);
    runner_free(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keep_covering_prompt_is_exact),
        cmocka_unit_test(test_bounded_matches_oracle),
        cmocka_unit_test(test_chunked_bounded_equals_one_shot),
        cmocka_unit_test(test_engine_prefix_cache_and_chunks),
        cmocka_unit_test(test_bad_inputs_rejected),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
