/* Expert + attention data parallelism of DeepSeek-V4 under mpirun, checked
 * bit for bit against the one-process forward (run by tests/dist/mpi_ep.sh,
 * built only with MPI).
 *
 * Every rank owns different sequences (sequence i runs on rank i % ranks;
 * their prompt and decode lengths differ, so ranks finish at different
 * steps and idle ranks run placeholder steps). Each step a rank runs its
 * batch twice: through the expert-parallel context (collective) and
 * through a plain one-process context with all experts, and the logits
 * must be the same bytes. With --interval EPLB rebalances while this runs
 * (expert weights move between ranks) and the logits must still match;
 * with --skew the routing is forced toward rank 0's experts (in both
 * contexts) and the rebalance must lower moe_lb on its window.
 *
 *   mpirun -np 2 mpi_ep_forward MODEL_DIR [--seqs N] [--decode N] [--extra N]
 *          [--interval N] [--skew RATIO] [--threads N] [--bench] [--check-measured]
 *          [--record FILE]
 * --bench skips the one-process twin (timing only); --check-measured also
 * requires the measured moe_lb after the first rebalance to be lower than
 * before it (needs enough rows per step to be more than noise); --record
 * writes the window's expert counts, summed over ranks, for
 * scripts/gen_goldens_eplb.py (tests/data/golden/eplb/recorded.txt).
 * Prints one summary line on rank 0; exit 0 when everything matched. */
#include "dist/dist.h"
#include "model/deepseek_v4.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BLOCK 16
#define MAX_SEQS 64
#define MAX_LEN 96

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int fail(di_dist *d, const char *what, const di_error *err) {
    fprintf(stderr, "mpi_ep_forward: rank %d: %s: %s\n", d ? (int)d->rank : -1, what, err ? err->msg : "");
    return 1;
}

typedef struct seq {
    int32_t tokens[MAX_LEN];
    int32_t n_prompt, n_decode, n_done; /* n_done: positions already in the cache */
    int32_t blocks[MAX_LEN / BLOCK + 1];
} seq;

int main(int argc, char **argv) {
    di_dist *d = NULL;
    di_error err = {0};
    if (di_dist_mpi_create(&argc, &argv, 60.0, &d, &err)) return fail(d, "mpi", &err);
    const char *dir = NULL;
    int n_seqs = 6, n_decode = 6, n_threads = 1, bench = 0, check_measured = 0;
    const char *record = NULL;
    di_dsv4_ep_params ep_p = {0};
    double skew = 0.0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seqs") && i + 1 < argc) n_seqs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--decode") && i + 1 < argc) n_decode = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--extra") && i + 1 < argc) ep_p.n_extra = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--interval") && i + 1 < argc) ep_p.interval = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--skew") && i + 1 < argc) skew = atof(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) n_threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--bench")) bench = 1;
        else if (!strcmp(argv[i], "--check-measured")) check_measured = 1;
        else if (!strcmp(argv[i], "--record") && i + 1 < argc) record = argv[++i];
        else dir = argv[i];
    }
    if (!dir || n_seqs < 1 || n_seqs > MAX_SEQS || n_decode < 0 || n_decode > 32) {
        fprintf(stderr, "usage: mpi_ep_forward MODEL_DIR [--seqs N<=64] [--decode N<=32] [--extra N] "
                        "[--interval N] [--skew R] [--threads N] [--bench]\n");
        di_dist_free(d);
        return 2;
    }
    ep_p.window = ep_p.interval;
    ep_p.force_imbalance = skew;
    ep_p.log = 1;
    di_dsv4_model *m = NULL;
    di_dsv4_kv *kv_ep = NULL, *kv_ref = NULL;
    di_dsv4_ctx *c_ep = NULL, *c_ref = NULL;
    di_dsv4_ep *ep = NULL;
    di_threadpool *pool = NULL;
    int rc = 1;
    if (di_dsv4_load(dir, NULL, &m, &err) || di_threadpool_create(n_threads, &pool, &err)) {
        rc = fail(d, "load", &err);
        goto done;
    }
    const di_dsv4_hparams *hp = di_dsv4_hparams_of(m);
    const int32_t V = hp->n_vocab;
    /* this rank's sequences: i % ranks == rank; lengths from i */
    seq *S = calloc(MAX_SEQS, sizeof *S);
    int n_mine = 0;
    for (int i = 0; i < n_seqs; i++) {
        if (i % d->size != d->rank) continue;
        seq *q = &S[n_mine];
        q->n_prompt = 1 + (i * 7) % 13;
        q->n_decode = n_decode - i % 3 > 0 ? n_decode - i % 3 : 0;
        for (int j = 0; j < q->n_prompt; j++) q->tokens[j] = (int32_t)((i * 131 + j * 17 + 5) % V);
        for (int j = 0; j < MAX_LEN / BLOCK + 1; j++) q->blocks[j] = n_mine * (MAX_LEN / BLOCK + 1) + j;
        n_mine++;
    }
    int32_t n_blocks_total = MAX_SEQS * (MAX_LEN / BLOCK + 1);
    if (di_dsv4_kv_create(m, n_blocks_total, BLOCK, DI_DTYPE_F32, &kv_ep, &err) ||
        di_dsv4_kv_create(m, n_blocks_total, BLOCK, DI_DTYPE_F32, &kv_ref, &err) ||
        di_dsv4_ctx_create(m, &c_ep, &err) || di_dsv4_ctx_create(m, &c_ref, &err) ||
        di_dsv4_ep_create(m, d, &ep_p, &ep, &err)) {
        rc = fail(d, "setup", &err);
        goto done;
    }
    di_dsv4_ctx_set_ep(c_ep, ep);
    if (skew >= 1.0) di_dsv4_ctx_set_route_skew(c_ref, skew, d->size);
    /* steps: one prefill step, then one decode step per generated token */
    int64_t my_steps = 0;
    for (int i = 0; i < n_mine; i++) my_steps = S[i].n_decode + 1 > my_steps ? S[i].n_decode + 1 : my_steps;
    int64_t n_steps = my_steps;
    if (di_dist_allreduce_i64(d, &n_steps, 1, DI_DIST_MAX, &err)) goto done;
    int32_t tok[MAX_SEQS * MAX_LEN], sq[MAX_SEQS * MAX_LEN], pos[MAX_SEQS * MAX_LEN], nb[MAX_SEQS];
    uint8_t want[MAX_SEQS * MAX_LEN];
    const int32_t *tables[MAX_SEQS];
    float *lg_ep = malloc((size_t)MAX_SEQS * V * sizeof(float)), *lg_ref = malloc((size_t)MAX_SEQS * V * sizeof(float));
    int64_t mismatches = 0, rows_total = 0, placeholders = 0;
    double lb_before = 0.0, lb_after = 0.0, t_ep = 0.0;
    int64_t rebal_seen = 0;
    for (int64_t step = 0; step < n_steps; step++) {
        int32_t n = 0;
        int owner[MAX_SEQS];
        int n_want = 0;
        for (int i = 0; i < n_mine; i++) {
            seq *q = &S[i];
            int32_t upto = step == 0 ? q->n_prompt : (step <= q->n_decode ? q->n_prompt + (int32_t)step : 0);
            if (step > 0 && step > q->n_decode) continue;
            for (int32_t p = q->n_done; p < upto; p++) {
                tok[n] = q->tokens[p];
                sq[n] = i;
                pos[n] = p;
                want[n] = p == upto - 1;
                if (want[n]) owner[n_want++] = i;
                n++;
            }
        }
        for (int i = 0; i < MAX_SEQS; i++) {
            nb[i] = i < n_mine ? MAX_LEN / BLOCK + 1 : 0;
            tables[i] = i < n_mine ? S[i].blocks : NULL;
        }
        di_batch b = {.n_rows = n, .token = tok, .seq = sq, .pos = pos, .want_logits = want,
                      .n_seq_slots = MAX_SEQS, .block_size = BLOCK, .block_tables = tables, .n_blocks = nb};
        placeholders += n == 0;
        rows_total += n;
        double t0 = now_s();
        if (di_dsv4_forward(c_ep, kv_ep, &b, lg_ep, pool, &err)) {
            rc = fail(d, "ep forward", &err);
            goto done;
        }
        t_ep += now_s() - t0;
        if (n > 0 && !bench) {
            if (di_dsv4_forward(c_ref, kv_ref, &b, lg_ref, pool, &err)) {
                rc = fail(d, "forward", &err);
                goto done;
            }
            if (memcmp(lg_ep, lg_ref, (size_t)n_want * V * sizeof(float))) mismatches++;
        }
        /* greedy next token of every sequence that produced logits */
        for (int w = 0; w < n_want; w++) {
            seq *q = &S[owner[w]];
            const float *l = lg_ep + (size_t)w * V;
            int32_t best = 0;
            for (int32_t v = 1; v < V; v++)
                if (l[v] > l[best]) best = v;
            int32_t upto = step == 0 ? q->n_prompt : q->n_prompt + (int32_t)step;
            q->n_done = upto;
            if (upto < MAX_LEN) q->tokens[upto] = best;
        }
        di_dsv4_ep_stats st;
        di_dsv4_ep_get_stats(ep, &st);
        if (st.n_rebalances > rebal_seen) { /* measured moe_lb before the first rebalance, */
            rebal_seen = st.n_rebalances;  /* then between the first and the second */
            if (rebal_seen == 1 && di_dsv4_ep_measure_lb(ep, &lb_before, &err)) goto done;
            if (rebal_seen == 2 && di_dsv4_ep_measure_lb(ep, &lb_after, &err)) goto done;
        }
    }
    if (rebal_seen < 2 && di_dsv4_ep_measure_lb(ep, &lb_after, &err)) goto done;
    int64_t agg[4] = {mismatches, placeholders, rows_total, 0};
    di_dsv4_ep_stats st;
    di_dsv4_ep_get_stats(ep, &st);
    int64_t bytes[7] = {st.bytes_sent, st.bytes_min, st.n_row_layers, st.bytes_rows, st.bytes_meta, st.bytes_counts,
                        st.bytes_combine};
    int64_t tus = (int64_t)(t_ep * 1e6), comm[2] = {(int64_t)(d->seconds * 1e6), d->n_collectives};
    if (di_dist_allreduce_i64(d, agg, 4, DI_DIST_SUM, &err) || di_dist_allreduce_i64(d, bytes, 7, DI_DIST_SUM, &err) ||
        di_dist_allreduce_i64(d, &tus, 1, DI_DIST_MAX, &err) || di_dist_allreduce_i64(d, comm, 2, DI_DIST_MAX, &err))
        goto done;
    rc = agg[0] ? 1 : 0;
    if (d->rank == 0) {
        double per = bytes[2] ? (double)bytes[0] / (double)bytes[2] : 0.0, pmin = bytes[2] ? (double)bytes[1] / bytes[2] : 0.0;
        printf("mpi_ep_forward: %d ranks, %lld steps, %lld rows, %lld placeholder steps, %lld mismatching steps; "
               "%d slots (%d/rank), %lld rebalances (moved %lld weight bytes); a2a %.1f B/row/layer vs "
               "routing min %.1f; moe_lb measured %.4f (before the first rebalance) -> %.4f (until the second), window %.4f -> %.4f; "
               "step %.3f ms\n",
               (int)d->size, (long long)n_steps, (long long)agg[2], (long long)agg[1], (long long)agg[0],
               (int)st.n_physical, (int)st.n_local, (long long)st.n_rebalances, (long long)st.weight_bytes_moved,
               per, pmin, rebal_seen ? lb_before : lb_after, lb_after, st.moe_lb_before, st.moe_lb_after,
               1e-3 * (double)tus / (double)n_steps);
        if (bytes[2])
            printf("mpi_ep_forward: a2a bytes per row per layer: rows %.1f + metadata %.1f + counts %.1f + "
                   "outputs %.1f = %.1f (sent %.1f); routing minimum %.1f\n",
                   (double)bytes[3] / bytes[2], (double)bytes[4] / bytes[2], (double)bytes[5] / bytes[2],
                   (double)bytes[6] / bytes[2], (double)(bytes[3] + bytes[4] + bytes[5] + bytes[6]) / bytes[2],
                   per, pmin);
        printf("mpi_ep_forward: inside MPI (max over ranks): %.3f ms per step, %lld calls, %.1f us per call\n",
               1e-3 * (double)comm[0] / (double)n_steps, (long long)comm[1],
               comm[1] ? (double)comm[0] / (double)comm[1] : 0.0);
        if (agg[0]) fprintf(stderr, "mpi_ep_forward: FAIL: EP logits differ from one process\n");
        if (ep_p.interval && !st.n_rebalances) {
            fprintf(stderr, "mpi_ep_forward: FAIL: no rebalance happened\n");
            rc = 1;
        }
        /* the placement must lower moe_lb on the counts it was made from (the
         * measured figures after it depend on what the rows route to next:
         * with a few rows per step they are printed, not checked) */
        if (skew >= 1.0 && d->size > 1 && st.n_rebalances && !(st.moe_lb_after < st.moe_lb_before)) {
            fprintf(stderr, "mpi_ep_forward: FAIL: EPLB did not lower moe_lb (%.4f -> %.4f)\n", st.moe_lb_before,
                    st.moe_lb_after);
            rc = 1;
        }
    }
    if (check_measured && d->rank == 0 && !(lb_after < lb_before)) {
        fprintf(stderr, "mpi_ep_forward: FAIL: measured moe_lb did not drop (%.4f -> %.4f)\n", lb_before, lb_after);
        rc = 1;
    }
    if (record) { /* the window's counts, summed over ranks */
        const int64_t per = (int64_t)hp->n_layers * hp->n_experts;
        int32_t ns = di_dsv4_ep_window(ep, NULL);
        int64_t *w = calloc((size_t)(ns > 0 ? ns : 1) * (size_t)per, sizeof *w);
        di_dsv4_ep_window(ep, w);
        if (ns && di_dist_allreduce_i64(d, w, (int32_t)(ns * per), DI_DIST_SUM, &err)) goto done;
        FILE *f = d->rank == 0 ? fopen(record, "w") : NULL;
        if (f) {
            fprintf(f, "# layers=%d experts=%d ranks=%d model=%s\n", (int)hp->n_layers, (int)hp->n_experts,
                    (int)d->size, dir);
            for (int32_t st_i = 0; st_i < ns; st_i++) {
                for (int64_t j = 0; j < per; j++) fprintf(f, j ? " %lld" : "%lld", (long long)w[st_i * per + j]);
                fprintf(f, "\n");
            }
            fclose(f);
        }
        free(w);
    }
    int64_t r64 = rc;
    di_dist_allreduce_i64(d, &r64, 1, DI_DIST_MAX, &err);
    rc = (int)r64;
    free(lg_ep);
    free(lg_ref);
    free(S);
done:
    di_dsv4_ep_free(ep);
    di_dsv4_ctx_free(c_ep);
    di_dsv4_ctx_free(c_ref);
    di_dsv4_kv_free(kv_ep);
    di_dsv4_kv_free(kv_ref);
    di_dsv4_free(m);
    di_threadpool_free(pool);
    di_dist_free(d);
    return rc;
}
