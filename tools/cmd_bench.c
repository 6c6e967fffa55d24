/* deepinfer bench: llama-bench style throughput through the public engine
 * API (the same path as run/batch/serve), so scheduling, sampling and the
 * KV cache are all counted.
 *
 *   ppP      one prompt of P tokens, prefill only: P / (first token time)
 *   tgN      one sequence generating N tokens after a 1-token prompt:
 *            N / decode time (first token excluded, as llama-bench's tg)
 *   batchB   B sequences decoding together (1-token prompts, N/4 tokens
 *            each, at least 16): tokens generated / wall time, counted from
 *            the step after every sequence has its first token
 * Each test runs -r times after one untimed warm-up; the median is the
 * result, min and max the spread. Prompt ids are fixed pseudo-random tokens
 * (speed does not depend on them); sampling is greedy with EOS ignored.
 * Progress goes to stderr; results to stdout as a table or, with --json, as
 * one JSON object per test. */
#include "args.h"
#include "bench_serve.h"
#include "gen_common.h"
#include "progress.h"
#include "tools.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_REPS 100
#define MAX_BATCH_TESTS 8

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Per-request progress, filled by the event callback. */
typedef struct seq_state {
    int32_t n_tokens;
    bool done, failed;
    di_request_stats stats;
} seq_state;

static int on_event(const di_event *ev) {
    seq_state *s = ev->user;
    if (ev->token >= 0) s->n_tokens++;
    if (ev->finish != DI_FINISH_REASON_NONE) {
        s->done = true;
        s->failed = ev->finish == DI_FINISH_REASON_ERROR;
        s->stats = ev->stats;
    }
    return 0;
}

typedef struct bench_ctx {
    di_engine *e;
    int32_t *prompt; /* (n_prompt_cap) pseudo-random ids */
    int32_t n_vocab;
} bench_ctx;

/* Runs n_seqs requests of n_prompt prompt tokens and n_gen generated
 * tokens each; returns tokens/s of the measured phase (< 0 on failure).
 * phase 0: prefill (n_prompt / time to first token, one sequence);
 * phase 1: decode (tokens after the first / their time). */
static double run_once(bench_ctx *b, int n_seqs, int32_t n_prompt, int32_t n_gen, int phase) {
    seq_state st[256];
    di_error err;
    memset(st, 0, sizeof st);
    for (int i = 0; i < n_seqs; i++) {
        di_request r;
        memset(&r, 0, sizeof r);
        /* distinct first token per sequence: no prefix sharing */
        int32_t *toks = b->prompt + i;
        r.tokens = toks;
        r.n_tokens = (size_t)n_prompt;
        r.max_tokens = n_gen;
        r.ignore_eos = true;
        r.sampling = di_sampling_params_default();
        r.sampling.temperature = 0;
        r.on_event = on_event;
        r.user = &st[i];
        if (di_engine_submit(b->e, &r, NULL, &err)) {
            fprintf(stderr, "deepinfer bench: %s\n", err.msg);
            return -1;
        }
    }
    double t0 = 0;
    int64_t at_t0 = 0;
    bool started = false;
    while (!di_engine_idle(b->e)) {
        if (di_engine_step(b->e, &err)) {
            fprintf(stderr, "deepinfer bench: %s\n", err.msg);
            return -1;
        }
        if (!started) {
            int all = 1;
            int64_t total = 0;
            for (int i = 0; i < n_seqs; i++) {
                all &= st[i].n_tokens > 0;
                total += st[i].n_tokens;
            }
            if (all) {
                started = true;
                t0 = now_s();
                at_t0 = total;
            }
        }
    }
    double t1 = now_s();
    int64_t total = 0;
    for (int i = 0; i < n_seqs; i++) {
        if (st[i].failed) return -1;
        total += st[i].n_tokens;
    }
    if (phase == 0) {
        double ms = st[0].stats.t_first_token_ms - st[0].stats.t_queued_ms;
        return ms > 0 ? n_prompt / (ms / 1e3) : -1;
    }
    return t1 > t0 && total > at_t0 ? (double)(total - at_t0) / (t1 - t0) : -1;
}

typedef struct test_result {
    char name[32];
    double med, min, max;
    int n_seqs;
} test_result;

static int run_test(bench_ctx *b, const char *name, int n_seqs, int32_t n_prompt, int32_t n_gen, int phase,
                    int reps, test_result *out) {
    double v[MAX_REPS];
    /* progress: runs done of warm-up + reps (a bar on a terminal; in a log
     * the plain progress lines and one line per rep with its result) */
    char what[48];
    snprintf(what, sizeof what, "bench %s", name);
    di_progress prog;
    di_progress_start(&prog, what, reps + 1, "runs/s");
    if (!prog.tty) fprintf(stderr, "bench: %s warm-up\n", name);
    if (run_once(b, n_seqs, n_prompt < 16 ? n_prompt : 16, n_gen < 4 ? n_gen : 4, phase) < 0) return 1;
    di_progress_update(&prog, 1, 1);
    for (int r = 0; r < reps; r++) {
        v[r] = run_once(b, n_seqs, n_prompt, n_gen, phase);
        if (v[r] < 0) return 1;
        if (!prog.tty) fprintf(stderr, "bench: %s rep %d/%d: %.1f tok/s\n", name, r + 1, reps, v[r]);
        di_progress_update(&prog, r + 2, r + 2);
    }
    di_progress_end(&prog, reps + 1, reps + 1);
    qsort(v, (size_t)reps, sizeof v[0], cmp_double);
    snprintf(out->name, sizeof out->name, "%s", name);
    out->med = reps % 2 ? v[reps / 2] : 0.5 * (v[reps / 2 - 1] + v[reps / 2]);
    out->min = v[0];
    out->max = v[reps - 1];
    out->n_seqs = n_seqs;
    return 0;
}

/* s as a JSON string body (quotes, backslashes and control bytes escaped). */
static void print_json_str(const char *s) {
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 0x20) printf("\\u%04x", c);
        else putchar(c);
    }
}

/* "1,8,32" -> sizes (at most MAX_BATCH_TESTS, each 1..256). */
static int parse_sizes(const char *s, int *sizes) {
    int n = 0;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > 256 || n == MAX_BATCH_TESTS) return -1;
        sizes[n++] = (int)v;
        s = end;
        if (*s == ',') s++;
        else if (*s) return -1;
    }
    return n;
}

int di_cmd_bench(int argc, char **argv) {
    /* deepinfer bench serve / plot: the HTTP load generator (bench_serve_*.c) */
    if (argc > 1 && !strcmp(argv[1], "serve")) return di_cmd_bench_serve(argc - 1, argv + 1);
    if (argc > 1 && !strcmp(argv[1], "plot")) return di_cmd_bench_plot(argc - 1, argv + 1);
    const char *model = NULL, *batches = "1,8,32", *kernels = NULL, *numerics = NULL,
               *device = NULL;
    int64_t n_prompt = 512, n_gen = 128, threads = 2, reps = 3, batch_gen = 0;
    bool json = false;
    di_arg specs[] = {
        {"-m", "--model", DI_ARG_STR, &model, 0, 0,
         "model: a .gguf file or an HF checkpoint folder (default: the embedded SmolLM2-135M-Instruct)"},
        {"-p", "--n-prompt", DI_ARG_INT, &n_prompt, 0, 8192, "prompt tokens of the pp test (0 = skip)"},
        {"-n", "--n-gen", DI_ARG_INT, &n_gen, 0, 8192, "generated tokens of the tg test (0 = skip)"},
        {"-t", "--threads", DI_ARG_INT, &threads, 0, 1024, "threads (0 = one per CPU)"},
        {"-r", "--reps", DI_ARG_INT, &reps, 1, MAX_REPS, "repetitions per test"},
        {"-b", "--batch", DI_ARG_STR, &batches, 0, 0, "concurrent sequences of the batch tests, e.g. 1,8,32 ('' = skip)"},
        {"--batch-gen", NULL, DI_ARG_INT, &batch_gen, 0, 8192, "tokens per sequence in batch tests (0 = max(16, n/4))"},
        {"--kernels", NULL, DI_ARG_STR, &kernels, 0, 0, "kernel table: exact, q8, ggml, avx512, avx2-q8, ... (default: q8 for quantized GGUF, else exact)"},
        {"--numerics", NULL, DI_ARG_STR, &numerics, 0, 0, "DeepSeek-V4.1: deepinfer (default) or ideal"},
        {"--device", NULL, DI_ARG_STR, &device, 0, 0, "where the forward runs: cpu (default), cuda or cuda:N"},
        {"--json", NULL, DI_ARG_FLAG, &json, 0, 0, "one JSON object per test on stdout"},
    };
    const char *pos[1];
    int npos = 0;
    int rc = di_args_parse("bench", "-m MODEL [-p 512] [-n 128] [-t 2] [-r 3] [-b 1,8,32] [--json]", specs,
                           (int)(sizeof specs / sizeof specs[0]), argc, argv, pos, 0, &npos);
    if (rc) return rc == 1 ? 0 : 2;
    if (!model && !(model = di_gen_resolve_model("bench"))) return 1;
    int sizes[MAX_BATCH_TESTS];
    int n_sizes = parse_sizes(batches, sizes);
    if (n_sizes < 0) {
        fprintf(stderr, "deepinfer bench: -b wants comma-separated counts in 1..256\n");
        return 2;
    }
    if (batch_gen == 0) batch_gen = n_gen / 4 > 16 ? n_gen / 4 : 16;
    int max_seqs = 1;
    for (int i = 0; i < n_sizes; i++) max_seqs = sizes[i] > max_seqs ? sizes[i] : max_seqs;

    di_engine_params p = di_engine_params_default();
    p.model_path = model;
    p.n_threads = di_gen_cap_threads("bench", threads);
    p.n_ctx = (int32_t)(n_prompt + (n_gen > batch_gen ? n_gen : batch_gen) + 16);
    p.kv_tokens = p.n_ctx > max_seqs * (int32_t)(batch_gen + 16) ? p.n_ctx : max_seqs * (int32_t)(batch_gen + 16);
    p.kv_tokens += 64;
    p.max_batch_tokens = (int32_t)(n_prompt > 512 ? n_prompt : 512);
    p.max_seqs = max_seqs > 64 ? max_seqs : 64;
    p.no_prefix_cache = true; /* every rep computes its prompt */
    p.kernels = kernels;
    p.device = device;
    p.numerics = numerics;
    di_progress load;
    di_progress_load_hook(&p, &load);
    di_engine *e;
    di_error err;
    if (di_engine_create(&p, &e, &err)) {
        fprintf(stderr, "deepinfer bench: %s\n", err.msg);
        return 1;
    }
    di_model_desc desc;
    di_engine_describe(e, &desc);
    bench_ctx b = {e, NULL, desc.n_vocab};
    int32_t n_ids = (int32_t)n_prompt + max_seqs + 1;
    b.prompt = malloc(sizeof(int32_t) * (size_t)n_ids);
    if (!b.prompt) {
        di_engine_free(e);
        return 1;
    }
    uint32_t x = 12345;
    for (int32_t i = 0; i < n_ids; i++) {
        x = x * 1664525u + 1013904223u;
        b.prompt[i] = (int32_t)(x % (uint32_t)desc.n_vocab);
    }
    test_result res[2 + MAX_BATCH_TESTS];
    int n_res = 0;
    char name[32];
    rc = 0;
    if (n_prompt > 0) {
        snprintf(name, sizeof name, "pp%d", (int)n_prompt);
        rc |= run_test(&b, name, 1, (int32_t)n_prompt, 1, 0, (int)reps, &res[n_res++]);
    }
    if (!rc && n_gen > 0) {
        snprintf(name, sizeof name, "tg%d", (int)n_gen);
        rc |= run_test(&b, name, 1, 1, (int32_t)n_gen + 1, 1, (int)reps, &res[n_res++]);
    }
    for (int i = 0; !rc && i < n_sizes; i++) {
        snprintf(name, sizeof name, "batch%d", sizes[i]);
        rc |= run_test(&b, name, sizes[i], 1, (int32_t)batch_gen + 1, 1, (int)reps, &res[n_res++]);
    }
    if (rc) {
        fprintf(stderr, "deepinfer bench: a run failed\n");
    } else {
        if (!json)
            printf("model %s, device %s, kernels %s, threads %d, reps %d\n%-10s %12s %12s %12s\n", model,
                   desc.device ? desc.device : "cpu", desc.kernels, desc.n_threads, (int)reps, "test", "tokens/s", "min", "max");
        for (int i = 0; i < n_res; i++) {
            if (json)
            {
                printf("{\"test\": \"%s\", \"tokens_per_s\": %.3f, \"min\": %.3f, \"max\": %.3f, \"reps\": %d, "
                       "\"n_seqs\": %d, \"threads\": %d, \"device\": \"%s\", \"kernels\": \"%s\", \"model\": \"",
                       res[i].name, res[i].med, res[i].min, res[i].max, (int)reps, res[i].n_seqs, desc.n_threads,
                       desc.device ? desc.device : "cpu", desc.kernels);
                print_json_str(model);
                printf("\"}\n");
            }
            else printf("%-10s %12.2f %12.2f %12.2f\n", res[i].name, res[i].med, res[i].min, res[i].max);
        }
    }
    free(b.prompt);
    di_engine_free(e);
    return rc ? 1 : 0;
}
