/* Balanced context parallelism of a DeepSeek-V4 prefill under mpirun (run
 * by tests/dist/mpi_ep.sh, built only with MPI), checked bit for bit
 * against one process.
 *
 * The prompts (sequences of --len and --len*5/8 tokens, longer than the
 * window and several compression groups) are split with DeepInfer's zigzag
 * (di_cp_zigzag): each rank runs only its rows, the CP forward gathers the
 * per-layer state, and every row's logits must equal the one-process
 * prefill's row. Then every rank decodes --decode greedy tokens of each
 * sequence from its own cache without CP and must match one process again
 * (the gathered cache is complete). Timing of both prefills on rank 0.
 *
 *   mpirun -np 2 mpi_cp_forward MODEL_DIR [--len N] [--decode N] [--threads N]
 * DI_CP_PROFILE=1 prints each rank's per-block times of the CP prefill. */
#include "dist/cp.h"
#include "dist/dist.h"
#include "model/deepseek_v4.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BLOCK 16
#define N_SEQS 2
#define MAX_LEN 1024

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    di_dist *d = NULL;
    di_error err = {0};
    if (di_dist_mpi_create(&argc, &argv, 60.0, &d, &err)) {
        fprintf(stderr, "mpi_cp_forward: %s\n", err.msg);
        return 1;
    }
    const char *dir = NULL;
    int len = 80, n_decode = 4, n_threads = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--len") && i + 1 < argc) len = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--decode") && i + 1 < argc) n_decode = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) n_threads = atoi(argv[++i]);
        else dir = argv[i];
    }
    if (!dir || len < 2 || len + n_decode > MAX_LEN || n_decode < 0) {
        fprintf(stderr, "usage: mpi_cp_forward MODEL_DIR [--len 2..1000] [--decode N] [--threads N]\n");
        di_dist_free(d);
        return 2;
    }
    di_dsv4_model *m = NULL;
    di_dsv4_kv *kv_cp = NULL, *kv_ref = NULL;
    di_dsv4_ctx *c_cp = NULL, *c_ref = NULL;
    di_threadpool *pool = NULL;
    int rc = 1;
    int32_t lens[N_SEQS] = {len, len * 5 / 8 > 1 ? len * 5 / 8 : 1}, total = lens[0] + lens[1];
    const int32_t nb_per = MAX_LEN / BLOCK + 1;
    int32_t blocks[N_SEQS][MAX_LEN / BLOCK + 1], nb[N_SEQS];
    const int32_t *tables[N_SEQS];
    for (int s = 0; s < N_SEQS; s++) {
        for (int j = 0; j < nb_per; j++) blocks[s][j] = s * nb_per + j;
        tables[s] = blocks[s];
        nb[s] = nb_per;
    }
    int32_t *tok = malloc(sizeof(int32_t) * 4 * (MAX_LEN * N_SEQS)), *sq = tok + MAX_LEN * N_SEQS,
            *pos = sq + MAX_LEN * N_SEQS, *gtok = pos + MAX_LEN * N_SEQS;
    uint8_t *want = malloc(MAX_LEN * N_SEQS);
    float *lg_ref = NULL, *lg_cp = NULL;
    if (di_dsv4_load(dir, NULL, &m, &err) || di_threadpool_create(n_threads, &pool, &err) ||
        di_dsv4_kv_create(m, N_SEQS * nb_per, BLOCK, DI_DTYPE_F32, &kv_cp, &err) ||
        di_dsv4_kv_create(m, N_SEQS * nb_per, BLOCK, DI_DTYPE_F32, &kv_ref, &err) ||
        di_dsv4_ctx_create(m, &c_cp, &err) || di_dsv4_ctx_create(m, &c_ref, &err)) {
        fprintf(stderr, "mpi_cp_forward: rank %d: setup: %s\n", (int)d->rank, err.msg);
        goto done;
    }
    const int32_t V = di_dsv4_hparams_of(m)->n_vocab;
    lg_ref = malloc((size_t)total * V * sizeof(float));
    lg_cp = malloc((size_t)total * V * sizeof(float));
    /* the one-process prefill of both sequences, every row's logits */
    int32_t g = 0;
    for (int s = 0; s < N_SEQS; s++)
        for (int p = 0; p < lens[s]; p++, g++) {
            gtok[g] = tok[g] = (int32_t)((s * 97 + p * 31 + 7) % V);
            sq[g] = s;
            pos[g] = p;
            want[g] = 1;
        }
    di_batch b = {.n_rows = total, .token = tok, .seq = sq, .pos = pos, .want_logits = want, .n_seq_slots = N_SEQS,
                  .block_size = BLOCK, .block_tables = tables, .n_blocks = nb};
    double t0 = now_s();
    if (di_dsv4_forward(c_ref, kv_ref, &b, lg_ref, pool, &err)) goto fail_fwd;
    double t_one = now_s() - t0;
    /* this rank's zigzag rows */
    int64_t per = di_cp_rows_per_rank(lens, N_SEQS, d->size);
    int32_t *mirror = malloc((size_t)per * sizeof *mirror);
    di_cp_zigzag(lens, N_SEQS, d->size, d->rank, mirror, NULL);
    int32_t n = 0, *grow = malloc((size_t)per * sizeof *grow);
    for (int64_t i = 0; i < per; i++) {
        int32_t r = mirror[i];
        if (r < 0) continue; /* padding */
        tok[n] = gtok[r];
        sq[n] = r < lens[0] ? 0 : 1;
        pos[n] = r < lens[0] ? r : r - lens[0];
        want[n] = 1;
        grow[n++] = r;
    }
    b.n_rows = n;
    di_dsv4_ctx_set_cp(c_cp, d);
    if (getenv("DI_CP_PROFILE")) di_dsv4_ctx_set_profile(c_cp, 1);
    di_dist_barrier(d, &err);
    t0 = now_s();
    if (di_dsv4_forward(c_cp, kv_cp, &b, lg_cp, pool, &err)) goto fail_fwd;
    int64_t t_cp_us = (int64_t)((now_s() - t0) * 1e6);
    if (getenv("DI_CP_PROFILE")) {
        di_dsv4_profile pr;
        di_dsv4_ctx_get_profile(c_cp, &pr);
        for (int bl = 0; bl < DI_DSV4_BLK_COUNT; bl++)
            fprintf(stderr, "rank %d %-12s %8.2f ms\n", (int)d->rank, di_dsv4_block_name((di_dsv4_block)bl),
                    1e3 * pr.seconds[bl]);
        di_dsv4_ctx_set_profile(c_cp, 0);
    }
    int64_t bad = 0;
    for (int32_t i = 0; i < n; i++)
        bad += memcmp(lg_cp + (size_t)i * V, lg_ref + (size_t)grow[i] * V, (size_t)V * sizeof(float)) != 0;
    /* decode from each rank's own (gathered) cache, without CP */
    di_dsv4_ctx_set_cp(c_cp, NULL);
    int32_t next[N_SEQS];
    for (int s = 0; s < N_SEQS; s++) {
        const float *l = lg_ref + (size_t)(s ? total - 1 : lens[0] - 1) * V;
        next[s] = 0;
        for (int32_t v = 1; v < V; v++)
            if (l[v] > l[next[s]]) next[s] = v;
    }
    int64_t bad_dec = 0;
    for (int step = 0; step < n_decode; step++) {
        for (int s = 0; s < N_SEQS; s++) {
            tok[s] = next[s];
            sq[s] = s;
            pos[s] = lens[s] + step;
            want[s] = 1;
        }
        b.n_rows = N_SEQS;
        if (di_dsv4_forward(c_cp, kv_cp, &b, lg_cp, pool, &err) || di_dsv4_forward(c_ref, kv_ref, &b, lg_ref, pool, &err))
            goto fail_fwd;
        bad_dec += memcmp(lg_cp, lg_ref, (size_t)N_SEQS * V * sizeof(float)) != 0;
        for (int s = 0; s < N_SEQS; s++) {
            const float *l = lg_ref + (size_t)s * V;
            next[s] = 0;
            for (int32_t v = 1; v < V; v++)
                if (l[v] > l[next[s]]) next[s] = v;
        }
    }
    int64_t agg[3] = {bad, bad_dec, n};
    di_dist_allreduce_i64(d, agg, 3, DI_DIST_SUM, &err);
    di_dist_allreduce_i64(d, &t_cp_us, 1, DI_DIST_MAX, &err);
    rc = agg[0] || agg[1] || agg[2] != total;
    if (d->rank == 0)
        printf("mpi_cp_forward: %d ranks, prompts %d + %d tokens, %lld rows over the ranks (%lld per rank with padding), "
               "%lld mismatching prefill rows, %lld mismatching decode steps (x%d ranks); prefill %.1f ms one process, "
               "%.1f ms context parallel\n",
               (int)d->size, (int)lens[0], (int)lens[1], (long long)agg[2], (long long)per, (long long)agg[0],
               (long long)agg[1], (int)d->size, 1e3 * t_one, 1e-3 * (double)t_cp_us);
    free(mirror);
    free(grow);
    goto done;
fail_fwd:
    fprintf(stderr, "mpi_cp_forward: rank %d: forward: %s\n", (int)d->rank, err.msg);
done:
    free(tok);
    free(want);
    free(lg_ref);
    free(lg_cp);
    di_dsv4_ctx_free(c_cp);
    di_dsv4_ctx_free(c_ref);
    di_dsv4_kv_free(kv_cp);
    di_dsv4_kv_free(kv_ref);
    di_dsv4_free(m);
    di_threadpool_free(pool);
    di_dist_free(d);
    return rc;
}
