/* model rollback (DeepSeek-V4.1, and DeepSeek-V4 at the end): speculative
 * rows that are rejected and forgotten with di_model_kv_truncate leave the
 * KV state exactly as a run without speculation.
 *
 * The reference is the model itself without speculation: a greedy
 * generation one token per step, every position's logits kept. The
 * speculative run feeds [last token, d1..dk] per step where each draft is
 * the true next token with probability ACCEPT_P and a random token
 * otherwise, accepts the correct prefix, sometimes backs off a few more
 * accepted positions (so a ratio-2 pair's first token, its pending
 * compressor state and the Engram n-grams are rewritten too), truncates,
 * and continues. Every logits row whose inputs were all correct must equal
 * the reference bit for bit (batch-invariant kernels: a row's result does
 * not depend on the other rows of its batch), and the tokens must be the
 * greedy ones. The generation runs well past the window (16) and the
 * indexer's top-k (32 compressed entries), on the tiny checkpoint with
 * every V4.1 layer kind (window, ratio-2 owners and reusers, the ratio-1
 * source, decoder layers, Engram). */
#include "test_util.h"

#include "dsv_golden.h"

#include "model/deepseek_v41.h"
#include "model/model.h"
#include "sample/dspark.h"
#include "text/tokenizer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef DI_SANITIZE_BUILD
#define N_GEN 28        /* lighter: still past the window */
#define MIN_BACKOFF 1
#else
#define N_GEN 110       /* past the window and the indexer's top-k */
#define MIN_BACKOFF 3
#endif
#define PROMPT 12
#define K 4           /* drafts per step (the tiny checkpoint's block size is 5) */
#define ACCEPT_P 0.6
#define BLOCK 8
#define N_BLOCKS 64
#define N_GEN_V4 150 /* DeepSeek-V4 tiny: past its HCA layers' 128-position groups */
#define MAX_POS (PROMPT + N_GEN_V4 + K + 2)

typedef struct runner {
    di_model *m;
    di_model_kv *kv;
    di_model_ctx *ctx;
    int32_t table[N_BLOCKS];
    const int32_t *tables[1];
    int32_t n_blocks[1];
    int32_t V;
} runner;

static void runner_open(runner *r, di_model *m) {
    memset(r, 0, sizeof *r);
    di_error err;
    r->m = m;
    assert_int_equal(di_model_kv_create(m, N_BLOCKS, BLOCK, DI_DTYPE_F32, &r->kv, &err), DI_OK);
    assert_int_equal(di_model_ctx_create(m, &r->ctx, &err), DI_OK);
    for (int j = 0; j < N_BLOCKS; j++) r->table[j] = N_BLOCKS - 1 - j; /* scattered */
    r->tables[0] = r->table;
    r->n_blocks[0] = N_BLOCKS;
    di_model_facts f;
    di_model_get_facts(m, &f);
    r->V = f.n_vocab;
}

static void runner_close(runner *r) {
    di_model_ctx_free(r->ctx);
    di_model_kv_free(r->kv);
}

/* Rows tok[0..n) at positions pos0.., all with logits. */
static void forward(runner *r, const int32_t *tok, int32_t n, int32_t pos0, float *logits) {
    int32_t seq[MAX_POS], pos[MAX_POS];
    uint8_t want[MAX_POS];
    for (int32_t i = 0; i < n; i++) {
        seq[i] = 0;
        pos[i] = pos0 + i;
        want[i] = 1;
    }
    di_batch b = {.n_rows = n, .token = tok, .seq = seq, .pos = pos, .want_logits = want, .n_seq_slots = 1,
                  .block_size = BLOCK, .block_tables = r->tables, .n_blocks = r->n_blocks};
    di_error err;
    di_status s = di_model_forward(r->ctx, r->kv, &b, logits, NULL, &err);
    if (s) fail_msg("forward: %s", err.msg);
}

static di_model *open_dir(const char *rel) {
    char dir[4096];
    di_test_path(dir, sizeof dir, rel);
    di_model *m = NULL;
    di_error err;
    if (di_model_open(dir, NULL, NULL, &m, &err)) fail_msg("open %s: %s", dir, err.msg);
    return m;
}

static di_model *open_tiny(void) { return open_dir("tests/data/golden/deepseek_v41/tiny"); }

static void rejected_drafts_are_forgotten_in(const char *rel, const int32_t n_gen) {
    di_model *m = open_dir(rel);
    runner ref, spec;
    runner_open(&ref, m);
    runner_open(&spec, m);
    const int32_t V = ref.V;
    float *ref_logits = malloc(sizeof(float) * (size_t)MAX_POS * (size_t)V); /* by position */
    float *lg = malloc(sizeof(float) * (size_t)MAX_POS * (size_t)V);
    int32_t toks[MAX_POS];
    di_test_rng rng = {0x5eed16ull};
    for (int i = 0; i < PROMPT; i++) toks[i] = 4 + (int32_t)(di_test_rand(&rng) % (uint32_t)(V - 4));

    /* the reference: prefill, then one token per step */
    forward(&ref, toks, PROMPT, 0, ref_logits);
    int32_t n = PROMPT; /* tokens known */
    toks[n] = dsv_argmax(ref_logits + (size_t)(n - 1) * V, V);
    n++;
    while (n < PROMPT + n_gen) {
        forward(&ref, &toks[n - 1], 1, n - 1, ref_logits + (size_t)(n - 1) * V);
        toks[n] = dsv_argmax(ref_logits + (size_t)(n - 1) * V, V);
        n++;
    }

    /* the speculative run */
    forward(&spec, toks, PROMPT, 0, lg);
    assert_memory_equal(lg, ref_logits, sizeof(float) * (size_t)PROMPT * V);
    int32_t have = PROMPT + 1; /* toks[0..have) committed; toks[have-1] not fed yet */
    int steps = 0, rows_checked = 0, n_rejected = 0, n_backoff = 0;
    while (have < PROMPT + n_gen) {
        int32_t in[K + 1], p0 = have - 1;
        in[0] = toks[p0];
        int32_t good = 0, still = 1; /* drafts matching the greedy tokens, as a prefix */
        for (int j = 1; j <= K; j++) {
            int32_t truth = p0 + j < PROMPT + n_gen ? toks[p0 + j] : 5;
            int ok = (double)di_test_rand(&rng) / 4294967296.0 < ACCEPT_P;
            in[j] = ok ? truth : 4 + (int32_t)(di_test_rand(&rng) % (uint32_t)(V - 4));
            still = still && in[j] == truth && p0 + j < PROMPT + n_gen;
            good += still;
        }
        forward(&spec, in, K + 1, p0, lg);
        /* rows 0..good saw only correct inputs */
        for (int32_t j = 0; j <= good && p0 + j < PROMPT + n_gen - 1; j++) {
            assert_memory_equal(lg + (size_t)j * V, ref_logits + (size_t)(p0 + j) * V, sizeof(float) * (size_t)V);
            assert_int_equal(dsv_argmax(lg + (size_t)j * V, V), toks[p0 + j + 1]);
            rows_checked++;
        }
        n_rejected += K - good;
        /* accept `good` drafts plus the token after them; sometimes back off */
        int32_t keep = p0 + 1 + good; /* positions < keep stay */
        if (good > 0 && di_test_rand(&rng) % 5 == 0) {
            int32_t back = 1 + (int32_t)(di_test_rand(&rng) % (uint32_t)good);
            keep -= back;
            n_backoff++;
        }
        di_error err;
        assert_int_equal(di_model_kv_truncate(spec.kv, 0, keep, &err), DI_OK);
        have = keep + 1;
        steps++;
    }
    print_message("rollback %s: %d steps, %d rows compared bit-exact, %d drafts rejected, %d back-offs\n", rel,
                  steps, rows_checked, n_rejected, n_backoff);
    assert_true(n_rejected > 20 && n_backoff >= MIN_BACKOFF);

    di_error err;
    assert_int_equal(di_model_kv_truncate(spec.kv, -1, 3, &err), DI_ERR_INVALID_ARG);
    assert_int_equal(di_model_kv_truncate(spec.kv, 0, -3, &err), DI_ERR_INVALID_ARG);
    assert_int_equal(di_model_kv_truncate(NULL, 0, 3, &err), DI_ERR_INVALID_ARG);
    free(ref_logits);
    free(lg);
    runner_close(&ref);
    runner_close(&spec);
    di_model_free(m);
}

/* A drafter that always proposes the greedy continuation (an oracle
 * drafter), verified with DeepInfer's rule on the target's greedy logprobs
 * (T -> 1e-5, a one-hot draft distribution): every step accepts all K
 * drafts and emits K + 1 tokens, and the tokens are the plain greedy ones. */
static void always_accepting_drafter_emits_k_plus_1(void **state) {
    (void)state;
    di_model *m = open_tiny();
    runner ref, spec;
    runner_open(&ref, m);
    runner_open(&spec, m);
    const int32_t V = ref.V, GEN = 3 * (K + 1);
    float *lg = malloc(sizeof(float) * (size_t)MAX_POS * (size_t)V);
    float *tlp = malloc(sizeof(float) * (size_t)V), *dlp = malloc(sizeof(float) * (size_t)V);
    float *res = malloc(sizeof(float) * (size_t)V);
    void *scratch = malloc(di_dspark_scratch_bytes(V));
    int32_t toks[MAX_POS];
    for (int i = 0; i < PROMPT; i++) toks[i] = 4 + (i * 29) % (V - 4);
    /* the plain greedy tokens */
    forward(&ref, toks, PROMPT, 0, lg);
    toks[PROMPT] = dsv_argmax(lg + (size_t)(PROMPT - 1) * V, V);
    for (int32_t n = PROMPT + 1; n < PROMPT + GEN + 1; n++) {
        forward(&ref, &toks[n - 1], 1, n - 1, lg);
        toks[n] = dsv_argmax(lg, V);
    }
    forward(&spec, toks, PROMPT, 0, lg);
    int32_t have = PROMPT + 1, steps = 0;
    di_error err;
    while (have + K < PROMPT + GEN + 1) {
        int32_t p0 = have - 1, in[K + 1];
        for (int j = 0; j <= K; j++) in[j] = toks[p0 + j]; /* [last, the K greedy drafts] */
        forward(&spec, in, K + 1, p0, lg);
        int32_t emitted = 0, accepted = 1;
        for (int j = 0; j < K && accepted; j++) {
            assert_int_equal(di_dspark_logprobs(lg + (size_t)j * V, V, 0.0f, 1.0f, -1, scratch, tlp, &err), DI_OK);
            for (int32_t v = 0; v < V; v++) dlp[v] = v == in[j + 1] ? 0.0f : -INFINITY;
            di_dspark_verdict vd;
            assert_int_equal(di_dspark_verify_row(tlp, dlp, V, in[j + 1], 99, di_dspark_row_position(p0 + 1, j),
                                                  DI_DSPARK_RULE_DEEPINFER, res, &vd, &err), DI_OK);
            accepted = vd.accepted;
            assert_int_equal(vd.token, toks[p0 + j + 1]);
            emitted++;
        }
        /* the final fresh row */
        assert_int_equal(di_dspark_logprobs(lg + (size_t)K * V, V, 0.0f, 1.0f, -1, scratch, tlp, &err), DI_OK);
        assert_int_equal(di_dspark_sample_logprobs(tlp, V, 99, di_dspark_row_position(p0 + 1, K)), toks[p0 + K + 1]);
        emitted++;
        assert_int_equal(emitted, K + 1);
        have += emitted;
        steps++;
    }
    assert_true(steps >= 2);
    free(lg);
    free(tlp);
    free(dlp);
    free(res);
    free(scratch);
    runner_close(&ref);
    runner_close(&spec);
    di_model_free(m);
}

static void rejected_drafts_are_forgotten(void **state) {
    (void)state;
    rejected_drafts_are_forgotten_in("tests/data/golden/deepseek_v41/tiny", N_GEN);
}

/* DeepSeek-V4 keeps all its state per position too (deepseek_v4.h): the
 * same check on its tiny checkpoints (window, CSA with the indexer, HCA
 * layers; bf16 and fp8 weights). */
static void deepseek_v4_rejected_drafts_are_forgotten(void **state) {
    (void)state;
    rejected_drafts_are_forgotten_in("tests/data/golden/deepseek_v4/tiny_bf16", N_GEN_V4);
    rejected_drafts_are_forgotten_in("tests/data/golden/deepseek_v4/tiny_fp8", N_GEN_V4);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(rejected_drafts_are_forgotten),
        cmocka_unit_test(always_accepting_drafter_emits_k_plus_1),
        cmocka_unit_test(deepseek_v4_rejected_drafts_are_forgotten),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
