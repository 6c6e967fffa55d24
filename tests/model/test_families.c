/* model/llama, the variants beyond llama and gemma3: Qwen 2 (q/k/v biases),
 * Qwen 3 (q/k head norms), Qwen3-MoE and Mixtral (routed experts), Mistral
 * (llama GQA; mistral_swa: with Mistral 7B v0.1's sliding window, 8 keys
 * here against a 24-token prompt) and Phi-3 (fused qkv / gate-up, LongRoPE's
 * short factors and attention factor), each on a tiny random-weight
 * checkpoint that transformers made and llama.cpp's converter and quantizer
 * turned into GGUFs (scripts/gen_tiny_families.py, tests/data/families/).
 *
 * Oracles:
 *  - transformers' own *ForCausalLM in float32 (golden/families/<f>.json):
 *    every prompt position's full logits and an 8-token greedy continuation,
 *    against our exact kernels on the f16 file (which holds the model's
 *    float16-rounded weights exactly);
 *  - llama.cpp's own forward of the quantized files (golden/families/
 *    <f>_llamacpp.json, scripts/gen_goldens_families_llamacpp.py): greedy
 *    tokens and teacher-forced top-1 where llama.cpp is decisive.
 * Also: a prompt split into prefill chunks and single decode steps gives
 * the same bits as the whole prompt in one batch (every variant's stage
 * reads its K/V back from the paged cache). */
#include "test_util.h"
#include "test_json.h"

#include "base/threadpool.h"
#include "format/gguf.h"
#include "kernels/cpu/kernels.h"
#include "model/llama.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Against transformers on raw logits. Both sides run float32 on the same
 * weights and differ in accumulation order (our FMA dots and online softmax
 * vs torch's GEMM and eager softmax) and libm: measured max |diff| over the
 * 24 x 320 prompt logits of each family, 2 layers (AMD EPYC, AVX2 exact
 * table): 6.9e-6 .. 7.7e-6 for all six (printed), i.e. the golden's own
 * rounding to 5 decimals. 1e-4 keeps 10x headroom; a missing bias, norm or
 * the wrong RoPE layout moves logits by 1e-1 or more. */
#define HF_LOGIT_TOL 1e-4
/* Greedy tokens must match where transformers' top-1/top-2 gap exceeds this. */
#define GREEDY_MIN_MARGIN 1e-3
/* Against llama.cpp's quantized forward: its activations are rounded to
 * 8 bits per block (Q8_0 / Q8_K), ours stay float32 (exact table) or are
 * rounded per row (-q8): top-1 is compared where its margin exceeds this. */
#define LLAMACPP_MIN_MARGIN 0.25

#define BLOCK_SIZE 8
#define N_BLOCKS 8
#define MAX_ROWS 64

static const char *const FAMILIES[] = {"qwen2", "qwen3", "qwen3moe", "mistral", "mistral_swa", "mixtral", "phi3"};
#define N_FAMILIES (sizeof FAMILIES / sizeof FAMILIES[0])

typedef struct model {
    di_gguf *g;
    di_llama_model *m;
    di_llama_kv *kv;
    di_llama_ctx *ctx;
    int32_t table[N_BLOCKS];
    const int32_t *tables[1];
    int32_t n_blocks[1];
    int32_t n_vocab;
} model;

static void model_open(model *mo, const char *family, const char *quant, const di_cpu_kernels *k) {
    memset(mo, 0, sizeof *mo);
    char rel[128], path[4096];
    di_error err = {0};
    snprintf(rel, sizeof rel, "tests/data/families/%s-%s.gguf", family, quant);
    di_status s = di_gguf_open(di_test_path(path, sizeof path, rel), &mo->g, &err);
    if (s == DI_OK) s = di_llama_load(mo->g, k, &mo->m, &err);
    if (s == DI_OK) s = di_llama_kv_create(mo->m, N_BLOCKS, BLOCK_SIZE, DI_DTYPE_F32, &mo->kv, &err);
    if (s == DI_OK) s = di_llama_ctx_create(mo->m, &mo->ctx, &err);
    if (s) fprintf(stderr, "%s: %s\n", rel, err.msg);
    assert_int_equal(s, DI_OK);
    for (int j = 0; j < N_BLOCKS; j++) mo->table[j] = N_BLOCKS - 1 - j; /* scattered blocks */
    mo->tables[0] = mo->table;
    mo->n_blocks[0] = N_BLOCKS;
    mo->n_vocab = (int32_t)di_llama_hparams_of(mo->m)->n_vocab;
}

static void model_close(model *mo) {
    di_llama_ctx_free(mo->ctx);
    di_llama_kv_free(mo->kv);
    di_llama_free(mo->m);
    di_gguf_close(mo->g);
}

/* Tokens [p0, p0 + n) at positions p0..; every row's logits into out. */
static void run(model *mo, const int32_t *toks, int32_t p0, int32_t n, float *out, di_threadpool *pool) {
    int32_t token[MAX_ROWS], seq[MAX_ROWS], pos[MAX_ROWS];
    uint8_t want[MAX_ROWS];
    assert_true(p0 + n <= MAX_ROWS && p0 + n <= N_BLOCKS * BLOCK_SIZE);
    for (int32_t i = 0; i < n; i++) {
        token[i] = toks[i];
        seq[i] = 0;
        pos[i] = p0 + i;
        want[i] = 1;
    }
    di_batch b = {.n_rows = n, .token = token, .seq = seq, .pos = pos, .want_logits = want, .n_seq_slots = 1,
                  .block_size = BLOCK_SIZE, .block_tables = mo->tables, .n_blocks = mo->n_blocks};
    di_error err = {0};
    di_status s = di_llama_forward(mo->ctx, mo->kv, &b, out, pool, &err);
    if (s) fprintf(stderr, "forward: %s\n", err.msg);
    assert_int_equal(s, DI_OK);
}

static json_t *load_golden(const char *family, const char *suffix) {
    char rel[128], path[4096];
    snprintf(rel, sizeof rel, "tests/data/golden/families/%s%s.json", family, suffix);
    json_error_t jerr;
    json_t *j = json_load_file(di_test_path(path, sizeof path, rel), 0, &jerr);
    if (!j) fprintf(stderr, "%s: %s\n", rel, jerr.text);
    return j;
}

/* Greedy continuation of prompt for n steps, one decode row at a time after
 * the prompt's prefill; ids into out. */
static void greedy(model *mo, const int32_t *prompt, int32_t n_prompt, int32_t n, int32_t *out, float *logits,
                   di_threadpool *pool) {
    run(mo, prompt, 0, n_prompt, logits, pool);
    int32_t tok = di_test_argmax(logits + (int64_t)(n_prompt - 1) * mo->n_vocab, mo->n_vocab);
    for (int32_t i = 0; i < n; i++) {
        out[i] = tok;
        if (i + 1 < n) {
            run(mo, &tok, n_prompt + i, 1, logits, pool);
            tok = di_test_argmax(logits, mo->n_vocab);
        }
    }
}

static const char *const ARCH_OF[N_FAMILIES] = {"qwen2", "qwen3", "qwen3moe", "llama", "llama", "llama", "phi3"};

static void exact_forward_matches_transformers(void **state) {
    (void)state;
    di_threadpool *pool = NULL;
    di_error err = {0};
    assert_int_equal(di_threadpool_create(2, &pool, &err), DI_OK);
    for (size_t f = 0; f < N_FAMILIES; f++) {
        json_t *gold = load_golden(FAMILIES[f], "");
        assert_non_null(gold);
        model mo;
        model_open(&mo, FAMILIES[f], "f16", di_cpu_kernels_best());
        assert_string_equal(di_llama_arch_name(di_llama_hparams_of(mo.m)->arch), ARCH_OF[f]);
        if (!strcmp(FAMILIES[f], "mistral_swa")) assert_int_equal(di_llama_hparams_of(mo.m)->sliding_window, 8);
        const int32_t V = mo.n_vocab;
        assert_int_equal(V, (int)json_integer_value(json_object_get(gold, "vocab")));
        int32_t prompt[MAX_ROWS], want[16], got[16];
        int32_t n = di_test_json_ids(json_object_get(gold, "prompt"), prompt, MAX_ROWS);
        float *lg = malloc((size_t)MAX_ROWS * (size_t)V * sizeof(float));
        assert_non_null(lg);
        run(&mo, prompt, 0, n, lg, pool);
        json_t *rows = json_object_get(gold, "logits");
        assert_int_equal((int)json_array_size(rows), n);
        double max_diff = 0;
        for (int32_t t = 0; t < n; t++) {
            json_t *row = json_array_get(rows, (size_t)t);
            assert_int_equal((int)json_array_size(row), V);
            for (int32_t v = 0; v < V; v++) {
                double d = fabs((double)lg[(int64_t)t * V + v] - json_real_value(json_array_get(row, (size_t)v)));
                if (d > max_diff) max_diff = d;
            }
        }
        printf("%-9s exact f16 vs transformers: max |logit diff| %.2e over %d x %d\n", FAMILIES[f], max_diff, n, V);
        assert_true(max_diff <= HF_LOGIT_TOL);

        /* greedy, decoded one row at a time through the cache */
        int32_t ng = di_test_json_ids(json_object_get(gold, "greedy"), want, 16);
        json_t *margin = json_object_get(gold, "greedy_margin");
        greedy(&mo, prompt, n, ng, got, lg, pool);
        for (int32_t i = 0; i < ng; i++) {
            if (got[i] != want[i]) {
                assert_true(json_real_value(json_array_get(margin, (size_t)i)) < GREEDY_MIN_MARGIN);
                break; /* a near tie flipped: the rest follows another path */
            }
        }
        free(lg);
        model_close(&mo);
        json_decref(gold);
    }
    di_threadpool_free(pool);
}

/* The prompt in one batch, in chunks of 5 and one row at a time: the same
 * bits (the exact table on the f16 file, the -q8 one on Q4_0). */
static void chunked_prefill_and_decode_give_the_same_bits(void **state) {
    (void)state;
    const di_cpu_kernels *tables[2] = {di_cpu_kernels_best(), di_cpu_kernels_best_q8()};
    const char *quants[2] = {"f16", "q4_0"};
    di_threadpool *pool = NULL;
    di_error err = {0};
    assert_int_equal(di_threadpool_create(2, &pool, &err), DI_OK);
    for (size_t f = 0; f < N_FAMILIES; f++) {
        json_t *gold = load_golden(FAMILIES[f], "");
        assert_non_null(gold);
        int32_t prompt[MAX_ROWS];
        int32_t n = di_test_json_ids(json_object_get(gold, "prompt"), prompt, MAX_ROWS);
        for (int k = 0; k < 2; k++) {
            model mo;
            model_open(&mo, FAMILIES[f], quants[k], tables[k]);
            const int64_t V = mo.n_vocab;
            float *whole = malloc((size_t)(n * V) * sizeof(float)), *part = malloc((size_t)(n * V) * sizeof(float));
            assert_true(whole && part);
            run(&mo, prompt, 0, n, whole, pool);
            for (int32_t p = 0; p < n; p += 5) run(&mo, prompt + p, p, p + 5 <= n ? 5 : n - p, part + p * V, pool);
            assert_memory_equal(whole, part, (size_t)(n * V) * sizeof(float));
            for (int32_t p = 0; p < n; p++) run(&mo, prompt + p, p, 1, part + p * V, NULL);
            assert_memory_equal(whole, part, (size_t)(n * V) * sizeof(float));
            free(whole);
            free(part);
            model_close(&mo);
        }
        json_decref(gold);
    }
    di_threadpool_free(pool);
}

/* The quantized files (llama.cpp's own Q8_0 / Q4_0 / Q4_K_M) against
 * llama.cpp's forward of them: teacher-forced top-1 at every prompt
 * position and the greedy continuation, wherever llama.cpp's top-1/top-2
 * margin exceeds LLAMACPP_MIN_MARGIN (a greedy run stops at the first
 * near tie: past it the two may follow different paths), on our int8
 * (-q8, the default for quantized files) and exact tables. The expert
 * models' output is discontinuous in the router's logits (a near tie
 * between two experts' probabilities, which llama.cpp's output margin does
 * not show, picks another expert when the activations round differently):
 * for them one top-1 flip in 8 decisive positions is allowed and the greedy
 * runs are printed, not asserted; their exact forward is held to
 * transformers above. Measured (printed per file): every dense family
 * agrees at every decisive position and greedy step; Mixtral Q8_0 on the
 * -q8 table flips one of 12. */
static void quantized_files_match_llamacpp(void **state) {
    (void)state;
    static const char *const quants[] = {"q8_0", "q4_0", "q4_k_m"};
    const di_cpu_kernels *tables[2] = {di_cpu_kernels_best_q8(), di_cpu_kernels_best()};
    di_threadpool *pool = NULL;
    di_error err = {0};
    assert_int_equal(di_threadpool_create(2, &pool, &err), DI_OK);
    for (size_t f = 0; f < N_FAMILIES; f++) {
        if (!strcmp(FAMILIES[f], "mistral_swa")) continue; /* llama.cpp ignores its window */
        json_t *gold = load_golden(FAMILIES[f], "_llamacpp");
        assert_non_null(gold);
        const bool moe = !strcmp(FAMILIES[f], "qwen3moe") || !strcmp(FAMILIES[f], "mixtral");
        int32_t prompt[MAX_ROWS], want[32], got[32];
        int32_t n = di_test_json_ids(json_object_get(gold, "prompt"), prompt, MAX_ROWS);
        for (size_t q = 0; q < sizeof quants / sizeof quants[0]; q++) {
            json_t *g = json_object_get(json_object_get(gold, "quants"), quants[q]);
            assert_non_null(g);
            json_t *am = json_object_get(g, "argmax"), *mg = json_object_get(g, "margin");
            json_t *gm = json_object_get(g, "greedy_margin");
            int32_t ng = di_test_json_ids(json_object_get(g, "greedy"), want, 32);
            for (int k = 0; k < 2; k++) {
                model mo;
                model_open(&mo, FAMILIES[f], quants[q], tables[k]);
                const int64_t V = mo.n_vocab;
                float *lg = malloc((size_t)(MAX_ROWS * V) * sizeof(float));
                assert_non_null(lg);
                run(&mo, prompt, 0, n, lg, pool);
                int top1 = 0, decisive = 0, greedy_ok = 0;
                for (int32_t t = 0; t < n; t++) {
                    if (json_real_value(json_array_get(mg, (size_t)t)) < LLAMACPP_MIN_MARGIN) continue;
                    decisive++;
                    top1 += di_test_argmax(lg + t * V, (int32_t)V) == (int32_t)json_integer_value(json_array_get(am, (size_t)t));
                }
                greedy(&mo, prompt, n, ng, got, lg, pool);
                for (int32_t i = 0; i < ng && json_real_value(json_array_get(gm, (size_t)i)) >= LLAMACPP_MIN_MARGIN; i++) {
                    if (got[i] != want[i]) break;
                    greedy_ok++;
                }
                int32_t expect = 0;
                while (expect < ng && json_real_value(json_array_get(gm, (size_t)expect)) >= LLAMACPP_MIN_MARGIN) expect++;
                printf("%-11s %-6s %-6s vs llama.cpp: top-1 %d/%d decisive, greedy %d/%d before a near tie\n",
                       FAMILIES[f], quants[q], k ? "exact" : "q8", top1, decisive, greedy_ok, expect);
                if (moe) {
                    /* a router near tie picks another expert: one flip in 8 allowed, greedy printed only */
                    assert_true(top1 >= decisive - (decisive / 8 > 1 ? decisive / 8 : 1));
                } else {
                    assert_int_equal(top1, decisive);
                    assert_int_equal(greedy_ok, expect);
                }
                free(lg);
                model_close(&mo);
            }
        }
        json_decref(gold);
    }
    di_threadpool_free(pool);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(exact_forward_matches_transformers),
        cmocka_unit_test(chunked_prefill_and_decode_give_the_same_bits),
        cmocka_unit_test(quantized_files_match_llamacpp),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
