/* `--spec dspark` through the engine on a tiny random DeepSeek-V4.1
 * checkpoint: the mechanics (acceptance means nothing on random weights).
 *
 * For 1, 4 and 8 sequences of greedy generation: plain decode, DSpark
 * verifying every draft (--spec-fixed-k), and DSpark with the
 * confidence-scheduled verify length on the curve measured at start-up.
 * Reports the wall time per engine step, the forward's share, the
 * drafter's time per drafted token, the mean confidence of the drafts, and
 * how many rows per sequence-step the schedule chose.
 *
 *   bench_dspark_engine [-m DIR] [-n tokens] [-t threads]
 * Wall-clock times (the engine's own timers): on a shared machine quote
 * them with the load average. Nothing is asserted. */
#include "deepinfer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define K 4

static int on_event(const di_event *ev) {
    (void)ev;
    return 0;
}

typedef struct run_stats {
    double wall_ms, fwd_ms, draft_ms;
    int64_t steps, tokens, drafted, verified, accepted, plan_rows, verify_steps;
    double conf_sum;
    int32_t curve_points;
} run_stats;

static int run(const char *dir, int threads, int n_seqs, int n_gen, const char *spec, bool fixed, run_stats *o) {
    di_engine_params p = di_engine_params_default();
    p.model_path = dir;
    p.n_threads = threads;
    p.n_ctx = 256;
    p.kv_tokens = 4096;
    p.max_seqs = 8;
    p.spec = spec;
    p.spec_k = K;
    p.spec_fixed_k = fixed;
    p.spec_cost_cache = "off";
    di_engine *e = NULL;
    di_error err;
    if (di_engine_create(&p, &e, &err)) {
        fprintf(stderr, "engine: %s\n", err.msg);
        return 1;
    }
    for (int i = 0; i < n_seqs; i++) {
        int32_t prompt[16];
        for (int j = 0; j < 16; j++) prompt[j] = 4 + (i * 37 + j * 11) % 500;
        di_request r;
        memset(&r, 0, sizeof r);
        r.tokens = prompt;
        r.n_tokens = 16;
        r.max_tokens = n_gen;
        r.ignore_eos = true;
        r.sampling = di_sampling_params_default();
        r.sampling.temperature = 0.0f;
        r.on_event = on_event;
        if (di_engine_submit(e, &r, NULL, &err)) {
            fprintf(stderr, "submit: %s\n", err.msg);
            di_engine_free(e);
            return 1;
        }
    }
    /* the first step prefills every prompt: leave it out of the per-step times */
    if (di_engine_step(e, &err)) {
        fprintf(stderr, "step: %s\n", err.msg);
        di_engine_free(e);
        return 1;
    }
    di_engine_stats s0, s1;
    di_engine_get_stats(e, &s0);
    double wall = 0;
    while (!di_engine_idle(e)) {
        if (di_engine_step(e, &err)) {
            fprintf(stderr, "step: %s\n", err.msg);
            di_engine_free(e);
            return 1;
        }
        di_engine_stats st;
        di_engine_get_stats(e, &st);
        wall += st.last_step_ms;
    }
    di_engine_get_stats(e, &s1);
    memset(o, 0, sizeof *o);
    o->steps = s1.n_steps - s0.n_steps;
    o->tokens = s1.n_generated_tokens - s0.n_generated_tokens;
    o->fwd_ms = s1.t_forward_ms - s0.t_forward_ms;
    o->draft_ms = s1.spec_draft_ms - s0.spec_draft_ms;
    o->wall_ms = wall + o->draft_ms;
    o->drafted = s1.spec_drafted - s0.spec_drafted;
    o->verified = s1.spec_verified - s0.spec_verified;
    o->accepted = s1.spec_accepted - s0.spec_accepted;
    o->plan_rows = s1.spec_plan_rows - s0.spec_plan_rows;
    o->verify_steps = s1.spec_verify_steps - s0.spec_verify_steps;
    o->conf_sum = s1.spec_conf_sum - s0.spec_conf_sum;
    di_engine_free(e);
    return 0;
}

int main(int argc, char **argv) {
    const char *dir = "tests/data/golden/deepseek_v41/tiny";
    int n_gen = 48, threads = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-m")) dir = argv[i + 1];
        else if (!strcmp(argv[i], "-n")) n_gen = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-t")) threads = atoi(argv[i + 1]);
    }
    printf("# --spec dspark through the engine: %s, %d thread(s), k %d, %d tokens per sequence, greedy\n\n", dir,
           threads, K, n_gen);
    printf("| sequences | mode | ms per step | forward share | tokens per step | drafter ms per drafted token | "
           "mean confidence | draft rows verified per sequence-step | accepted |\n|---|---|---|---|---|---|---|---|---|\n");
    const int seqs[] = {1, 4, 8};
    for (int si = 0; si < 3; si++) {
        for (int mode = 0; mode < 3; mode++) {
            run_stats r;
            const char *spec = mode ? "dspark" : NULL;
            if (run(dir, threads, seqs[si], n_gen, spec, mode == 1, &r)) return 1;
            const char *name = mode == 0 ? "plain" : mode == 1 ? "dspark, all drafts" : "dspark, scheduled";
            int64_t seq_steps = r.steps * seqs[si];
            char per_tok[32] = "-", conf[32] = "-", rows[64] = "-";
            if (mode && r.drafted) {
                snprintf(per_tok, sizeof per_tok, "%.3f", r.draft_ms / (double)r.drafted);
                snprintf(conf, sizeof conf, "%.3f", r.conf_sum / (double)r.drafted);
                snprintf(rows, sizeof rows, "%.2f of %.2f drafted", (double)r.verified / (double)seq_steps,
                         (double)r.drafted / (double)seq_steps);
            }
            printf("| %d | %s | %.2f | %.0f%% | %.2f | %s | %s | %s | %lld / %lld |\n", seqs[si], name,
                   r.wall_ms / (double)r.steps, 100.0 * r.fwd_ms / r.wall_ms, (double)r.tokens / (double)r.steps,
                   per_tok, conf, rows, (long long)r.accepted, (long long)r.verified);
        }
    }
    return 0;
}
