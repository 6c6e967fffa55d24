/* DSpark mechanics on a tiny random DeepSeek-V4.1 checkpoint (acceptance
 * means nothing on random weights, so this measures the machinery):
 *
 *   - step time vs rows of one sequence (1 = plain decode, 1+j = verifying
 *     j drafts), with and without the drafter's main keys: the cost curve
 *     the verify-length schedule reads (written with di_dspark_curve_save
 *     when -c DIR is given);
 *   - the drafter: time of one k-token draft block, per drafted token, and
 *     relative to a plain decode step;
 *   - the schedule: rows chosen (1 + drafts verified per sequence) for 1, 4
 *     and 16 sequences whose cumulative acceptance estimates are the
 *     drafter's own confidences over a generation, against that curve.
 *
 *   bench_dspark [-m DIR] [-n steps] [-t threads] [-c curve_dir]
 * Medians of n repetitions of process CPU time (run it with one thread for
 * step times). Nothing is asserted. */
#include "base/threadpool.h"
#include "model/deepseek_v41.h"
#include "model/deepseek_v41_dspark.h"
#include "sample/dspark.h"
#include "text/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BLOCK 16
#define N_BLOCKS 64
#define MAX_ROWS 16

/* CPU time of the process: with one thread it is the step's own compute,
 * unaffected by other jobs on a shared machine. */
static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

typedef struct env {
    di_dsv41_model *m;
    di_dsv41_kv *kv;
    di_dsv41_ctx *ctx;
    di_threadpool *pool;
    int32_t table[N_BLOCKS];
    const int32_t *tp[1];
    int32_t nb[1];
    float *logits;
} env;

static di_batch tables(env *e) {
    di_batch b = {.n_seq_slots = 1, .block_size = BLOCK, .block_tables = e->tp, .n_blocks = e->nb};
    return b;
}

static int forward(env *e, const int32_t *tok, int32_t n, int32_t p0) {
    int32_t seq[512], pos[512];
    uint8_t want[512];
    for (int32_t i = 0; i < n; i++) {
        seq[i] = 0;
        pos[i] = p0 + i;
        want[i] = 1;
    }
    di_batch b = tables(e);
    b.n_rows = n;
    b.token = tok;
    b.seq = seq;
    b.pos = pos;
    b.want_logits = want;
    di_error err;
    if (di_dsv41_forward(e->ctx, e->kv, &b, e->logits, e->pool, &err)) {
        fprintf(stderr, "forward: %s\n", err.msg);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    const char *dir = "tests/data/golden/deepseek_v41/tiny", *curve_dir = NULL;
    int reps = 15, threads = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-m")) dir = argv[i + 1];
        else if (!strcmp(argv[i], "-n")) reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-t")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-c")) curve_dir = argv[i + 1];
    }
    if (reps < 3) reps = 3;
    env e;
    memset(&e, 0, sizeof e);
    di_error err;
    di_tokenizer *tok = NULL;
    if (di_tok_load_json(dir, &tok, &err) || di_dsv41_load(dir, NULL, DI_DSV41_NUMERICS_DEEPINFER, tok, &e.m, &err) ||
        di_dsv41_kv_create(e.m, N_BLOCKS, BLOCK, &e.kv, &err) || di_dsv41_ctx_create(e.m, &e.ctx, &err) ||
        (threads > 1 && di_threadpool_create(threads, &e.pool, &err))) {
        fprintf(stderr, "%s: %s\n", dir, err.msg);
        return 1;
    }
    const di_dsv41_hparams *hp = di_dsv41_hparams_of(e.m);
    const int32_t V = hp->n_vocab, k = hp->dspark_block;
    for (int j = 0; j < N_BLOCKS; j++) e.table[j] = j;
    e.tp[0] = e.table;
    e.nb[0] = N_BLOCKS;
    e.logits = malloc(sizeof(float) * (size_t)64 * V); /* the prompt wants every row */
    int32_t prompt[64];
    for (int i = 0; i < 64; i++) prompt[i] = 4 + (i * 37) % (V - 4);
    printf("# DSpark mechanics: %s (hidden %d, %d layers, %d stages, k %d), %d thread(s), medians of %d\n", dir,
           (int)hp->n_embd, (int)hp->n_layers, (int)di_dsv41_dspark_stages(e.m), (int)k, threads, reps);

    /* step time vs rows, without and with the main keys */
    double t_rows[2][MAX_ROWS + 1];
    for (int with = 0; with < 2; with++) {
        if (with && di_dsv41_kv_enable_dspark(e.m, e.kv, &err)) {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
        if (forward(&e, prompt, 64, 0)) return 1;
        for (int rows = 1; rows <= k + 1; rows++) {
            double v[64];
            for (int r = 0; r < reps; r++) {
                int32_t in[MAX_ROWS];
                for (int i = 0; i < rows; i++) in[i] = 5 + (r * 11 + i * 3) % (V - 5);
                double t0 = now_ms();
                if (forward(&e, in, rows, 64)) return 1; /* the same positions each time: a rolled-back verify */
                v[r] = now_ms() - t0;
            }
            t_rows[with][rows] = median(v, reps);
        }
    }
    printf("\n| rows (1 + drafts verified) | step ms | step ms with DSpark main keys | vs plain decode |\n|---|---|---|---|\n");
    for (int rows = 1; rows <= k + 1; rows++)
        printf("| %d | %.2f | %.2f | %.2fx |\n", rows, t_rows[0][rows], t_rows[1][rows], t_rows[1][rows] / t_rows[0][1]);

    /* the drafter */
    float *conf = malloc(sizeof(float) * (size_t)k);
    int32_t drafts[64];
    double v[64];
    di_batch t = tables(&e);
    int32_t golden = 9;
    for (int r = 0; r < reps; r++) {
        di_dsv41_draft_req q = {.seq = 0, .golden = golden, .last_pos = 63, .temperature = 0.0f, .top_p = 1.0f,
                                .top_k = -1, .seed = 1, .sample_pos = 64};
        double t0 = now_ms();
        if (di_dsv41_dspark_draft(e.ctx, e.kv, &t, &q, 1, k, 1.0f, NULL, NULL, conf, drafts, e.pool, &err)) {
            fprintf(stderr, "draft: %s\n", err.msg);
            return 1;
        }
        v[r] = now_ms() - t0;
    }
    double t_draft = median(v, reps);
    printf("\ndrafter: %.2f ms per %d-token block = %.2f ms per drafted token = %.2fx a plain decode step\n", t_draft,
           (int)k, t_draft / k, t_draft / t_rows[0][1]);
    double spec_step = t_rows[1][k + 1] + t_draft;
    printf("one speculative step (verify %d drafts + draft the next block): %.2f ms; break-even at %.2f accepted "
           "drafts per step\n", (int)k, spec_step, spec_step / t_rows[0][1] - 1.0);

    /* the schedule over the drafter's own confidences along a greedy generation */
    di_dspark_cost_point curve[MAX_ROWS];
    int32_t nc = 0;
    for (int rows = 1; rows <= k + 1; rows++) curve[nc++] = (di_dspark_cost_point){rows, (float)t_rows[1][rows]};
    if (curve_dir) {
        if (di_dspark_curve_save(curve_dir, dir, curve, nc, (int64_t)time(NULL), &err))
            fprintf(stderr, "curve: %s\n", err.msg);
        else
            printf("curve written under %s\n", curve_dir);
    }
    const int gen = 24;
    float *rates = malloc(sizeof(float) * (size_t)gen * k);
    int32_t last = 63;
    golden = 9;
    for (int g = 0; g < gen; g++) {
        di_dsv41_draft_req q = {.seq = 0, .golden = golden, .last_pos = last, .temperature = 0.0f, .top_p = 1.0f,
                                .top_k = -1, .seed = 1, .sample_pos = last + 1};
        if (di_dsv41_dspark_draft(e.ctx, e.kv, &t, &q, 1, k, 1.0f, NULL, NULL, conf, drafts, e.pool, &err)) return 1;
        float c = 1.0f;
        for (int s = 0; s < k; s++) rates[g * k + s] = c *= conf[s];
        int32_t in[1] = {golden};
        if (forward(&e, in, 1, last + 1)) return 1; /* plain decode: accept nothing, advance one */
        last++;
        int32_t best = 0;
        for (int32_t x = 1; x < V; x++)
            if (e.logits[x] > e.logits[best]) best = x;
        golden = best;
    }
    printf("\n| cost curve | sequences | mean first-draft confidence | mean rows chosen per sequence (1 + verified) | all drafts would be |\n|---|---|---|---|---|\n");
    int n_seqs_list[3] = {1, 4, 16};
    for (int li = 0; li < 6; li++) {
        int ns = n_seqs_list[li % 3], flat = li >= 3;
        di_dspark_sched *sch;
        di_dspark_cost_point big[MAX_ROWS * 16];
        int32_t nb = 0;
        /* extend the one-sequence curve to ns sequences: rows r cost the
         * measured step of ceil(r / ns) rows each (ns sequences stepping) */
        for (int r = ns; r <= ns * (k + 1); r++) {
            int per = (r + ns - 1) / ns;
            /* flat: a weight-bandwidth-bound step (a real model), +5% per extra row */
            double ms = flat ? t_rows[1][1] * (1.0 + 0.05 * (r - 1)) : t_rows[1][per] * ns;
            big[nb++] = (di_dspark_cost_point){r, (float)ms};
        }
        if (di_dspark_sched_create(&sch, &err) || di_dspark_sched_set_curve(sch, big, nb, &err)) return 1;
        double sum_rows = 0.0, sum_c = 0.0;
        int n_plans = 0;
        di_dspark_seq_rates q[16];
        int32_t sq[16];
        void *scratch = malloc(di_dspark_sched_scratch_bytes((int64_t)ns * k));
        for (int g = 2; g < gen; g++) {
            for (int i = 0; i < ns; i++) {
                int gi = (g + i * 5) % (gen - 2) + 2;
                q[i] = (di_dspark_seq_rates){k, rates + (size_t)(gi - 1) * k, rates + (size_t)(gi - 2) * k, 1, 0};
                sum_c += rates[(size_t)(gi - 1) * k];
            }
            if (di_dspark_sched_plan(sch, q, ns, scratch, sq, &err)) return 1;
            for (int i = 0; i < ns; i++) sum_rows += sq[i];
            n_plans += ns;
        }
        printf("| %s | %d | %.3f | %.2f | %d |\n", flat ? "flat (+5%/row)" : "measured", ns, sum_c / n_plans,
               sum_rows / n_plans, (int)k + 1);
        free(scratch);
        di_dspark_sched_free(sch);
    }
    free(rates);
    free(conf);
    free(e.logits);
    di_threadpool_free(e.pool);
    di_dsv41_ctx_free(e.ctx);
    di_dsv41_kv_free(e.kv);
    di_dsv41_free(e.m);
    di_tok_free(tok);
    return 0;
}
