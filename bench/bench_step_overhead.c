/* The share of an engine step spent outside the model forward (issue 16
 * part 7's measure, before any overlap): scheduling, block tables,
 * sampling (grammar masks included), detokenizing, streaming.
 *
 * For 1, 8 and 32 sequences decoding together, free text and structured
 * output (a JSON schema), on the given model: the wall time of each
 * di_engine_step against the forward's own time (di_engine_stats
 * t_forward_ms), summed over the decode steps (the first step, which
 * prefills every prompt, is left out).
 *
 *   bench_step_overhead [-m MODEL] [-n tokens] [-t threads]
 * Wall-clock times: on a shared machine quote them with the load average.
 * Nothing is asserted. */
#include "deepinfer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int on_event(const di_event *ev) {
    (void)ev;
    return 0;
}

static const char *SCHEMA =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":\"integer\"},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}}},\"required\":[\"name\",\"age\",\"tags\"]}";

static int run(const char *model, int threads, int n_seqs, int n_gen, bool structured, double *step_ms,
               double *fwd_ms, int64_t *steps) {
    di_engine_params p = di_engine_params_default();
    p.model_path = model;
    p.n_threads = threads;
    p.n_ctx = 512;
    p.kv_tokens = 32 * 512;
    p.max_seqs = 32;
    di_engine *e = NULL;
    di_error err;
    if (di_engine_create(&p, &e, &err)) {
        fprintf(stderr, "engine: %s\n", err.msg);
        return 1;
    }
    char text[128];
    for (int i = 0; i < n_seqs; i++) {
        snprintf(text, sizeof text, "Describe person number %d as JSON with a name, an age and tags:", i);
        di_request r;
        memset(&r, 0, sizeof r);
        r.text = text;
        r.max_tokens = n_gen;
        r.ignore_eos = !structured;
        r.sampling = di_sampling_params_default();
        r.sampling.temperature = 0.0f;
        if (structured) r.constraint = (di_constraint){.kind = DI_CONSTRAINT_JSON_SCHEMA, .text = SCHEMA};
        r.on_event = on_event;
        if (di_engine_submit(e, &r, NULL, &err)) {
            fprintf(stderr, "submit: %s\n", err.msg);
            di_engine_free(e);
            return 1;
        }
    }
    int rc = di_engine_step(e, &err) ? 1 : 0;
    di_engine_stats s0, s1;
    di_engine_get_stats(e, &s0);
    double wall = 0;
    while (!rc && !di_engine_idle(e)) {
        double t0 = now_ms();
        rc = di_engine_step(e, &err) ? 1 : 0;
        wall += now_ms() - t0;
    }
    if (rc) fprintf(stderr, "step: %s\n", err.msg);
    di_engine_get_stats(e, &s1);
    *step_ms = wall;
    *fwd_ms = s1.t_forward_ms - s0.t_forward_ms;
    *steps = s1.n_steps - s0.n_steps;
    di_engine_free(e);
    return rc;
}

int main(int argc, char **argv) {
    const char *model = "models/SmolLM2-135M-Instruct.q6_K.gguf";
    int n_gen = 32, threads = 2;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-m")) model = argv[i + 1];
        else if (!strcmp(argv[i], "-n")) n_gen = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-t")) threads = atoi(argv[i + 1]);
    }
    printf("# share of the step outside the forward: %s, %d thread(s), %d tokens per sequence, greedy\n\n", model,
           threads, n_gen);
    printf("| sequences | output | decode steps | ms per step | forward ms per step | outside the forward |\n"
           "|---|---|---|---|---|---|\n");
    const int seqs[] = {1, 8, 32};
    for (int si = 0; si < 3; si++)
        for (int st = 0; st < 2; st++) {
            double step = 0, fwd = 0;
            int64_t steps = 0;
            if (run(model, threads, seqs[si], n_gen, st == 1, &step, &fwd, &steps)) return 1;
            printf("| %d | %s | %lld | %.2f | %.2f | %.1f%% |\n", seqs[si], st ? "JSON schema" : "free text",
                   (long long)steps, step / (double)(steps ? steps : 1), fwd / (double)(steps ? steps : 1),
                   step > 0 ? 100.0 * (step - fwd) / step : 0.0);
        }
    return 0;
}
