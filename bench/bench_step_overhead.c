/* The share of an engine step spent outside the model forward (issue 16
 * part 7's measure): scheduling, block tables, sampling (grammar masks
 * included), detokenizing, streaming.
 *
 * For 1, 8 and 32 sequences decoding together, free text and structured
 * output (a JSON schema), on the given model, with the early grammar
 * masks off (di_engine_params.no_overlap: masks filled after the forward,
 * in the sampling phase) and on (the default: idle pool workers fill them
 * beside the forward): the wall time of each di_engine_step against the
 * forward's own time (di_engine_stats t_forward_ms), summed over the decode
 * steps (the first step, which prefills every prompt, is left out). Each
 * configuration runs -r times, off and on alternating; the run with the
 * median step time is reported.
 *
 *   bench_step_overhead [-m MODEL] [-n tokens] [-t threads] [-r reps]
 * Wall-clock times: on a shared machine quote them with the load average.
 * Nothing is asserted. */
#include "deepinfer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_REPS 15

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

typedef struct result {
    double step_ms, fwd_ms; /* summed over the decode steps */
    int64_t steps, masks_early, masks_overlapped;
} result;

static int run(const char *model, int threads, int n_seqs, int n_gen, bool structured, bool no_overlap,
               result *res) {
    di_engine_params p = di_engine_params_default();
    p.model_path = model;
    p.n_threads = threads;
    p.n_ctx = 512;
    p.kv_tokens = 32 * 512;
    p.max_seqs = 32;
    p.no_overlap = no_overlap;
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
    res->step_ms = wall;
    res->fwd_ms = s1.t_forward_ms - s0.t_forward_ms;
    res->steps = s1.n_steps - s0.n_steps;
    res->masks_early = s1.n_masks_early - s0.n_masks_early;
    res->masks_overlapped = s1.n_masks_overlapped - s0.n_masks_overlapped;
    di_engine_free(e);
    return rc;
}

static int cmp_step(const void *a, const void *b) {
    const result *x = a, *y = b;
    double u = x->step_ms / (double)(x->steps ? x->steps : 1), v = y->step_ms / (double)(y->steps ? y->steps : 1);
    return (u > v) - (u < v);
}

static void print_row(int n_seqs, bool structured, bool no_overlap, const result *r) {
    double steps = (double)(r->steps ? r->steps : 1);
    printf("| %d | %s | %s | %lld | %.2f | %.2f | %.1f%% | ", n_seqs, structured ? "JSON schema" : "free text",
           no_overlap ? "off" : "on", (long long)r->steps, r->step_ms / steps, r->fwd_ms / steps,
           r->step_ms > 0 ? 100.0 * (r->step_ms - r->fwd_ms) / r->step_ms : 0.0);
    if (r->masks_early) printf("%lld / %lld |\n", (long long)r->masks_overlapped, (long long)r->masks_early);
    else printf("- |\n");
}

int main(int argc, char **argv) {
    const char *model = "models/SmolLM2-135M-Instruct.q6_K.gguf";
    int n_gen = 32, threads = 2, reps = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-m")) model = argv[i + 1];
        else if (!strcmp(argv[i], "-n")) n_gen = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-t")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-r")) reps = atoi(argv[i + 1]);
    }
    if (reps < 1) reps = 1;
    if (reps > MAX_REPS) reps = MAX_REPS;
    printf("# share of the step outside the forward: %s, %d thread(s), %d tokens per sequence, greedy, "
           "median of %d\n\n",
           model, threads, n_gen, reps);
    printf("| sequences | output | early masks | decode steps | ms per step | forward ms per step | outside the "
           "forward | masks filled by idle workers / posted |\n"
           "|---|---|---|---|---|---|---|---|\n");
    const int seqs[] = {1, 8, 32};
    for (int si = 0; si < 3; si++)
        for (int st = 0; st < 2; st++) {
            result off[MAX_REPS], on[MAX_REPS];
            for (int k = 0; k < reps; k++) {
                if (run(model, threads, seqs[si], n_gen, st == 1, true, &off[k])) return 1;
                if (run(model, threads, seqs[si], n_gen, st == 1, false, &on[k])) return 1;
            }
            qsort(off, (size_t)reps, sizeof off[0], cmp_step);
            qsort(on, (size_t)reps, sizeof on[0], cmp_step);
            print_row(seqs[si], st == 1, true, &off[reps / 2]);
            print_row(seqs[si], st == 1, false, &on[reps / 2]);
            fflush(stdout);
        }
    return 0;
}
