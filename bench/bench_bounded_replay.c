/* Prefill speed and logit error of SWA bounded replay on a DeepSeek-V4.1
 * checkpoint (a benchmark, not a test: nothing is asserted).
 *
 *   bench_bounded_replay -m DIR [-t threads] [-p prompt_tokens] [-k keep]
 *                        [-c chunk_rows] [-n decode_tokens] [-r reps]
 *                        [--numerics deepinfer|ideal]
 *
 * One sequence, the prompt in chunks of c rows (as the engine's token
 * budget splits it), exact (no replay_from) and bounded (replay_from =
 * p - keep, keep 0 = the model's default), through di_model_forward. The
 * prompt is bench_deepseek.c's fixed pseudo-random sequence. Prints one
 * JSON object: median / min / max prefill tokens/s of each mode over reps,
 * the speed-up, and the last prompt row's logit error of bounded against
 * exact (max |diff|, rms, the logit scale, top-1 agreement), plus how many
 * of n greedy tokens after the prompt agree. */
#include "base/threadpool.h"
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_REPS 50
#define BLOCK_SIZE 16

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int32_t argmax(const float *x, int32_t n) {
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

typedef struct bench {
    di_model_ctx *ctx;
    di_model_kv *kv;
    di_threadpool *pool;
    int32_t n_prompt, n_chunk, n_decode, n_vocab, n_blocks, replay_from;
    int32_t *tok, *seq, *pos, *table, *gen;
    uint8_t *want;
    float *logits, *last; /* (n_vocab) the decode step's, the prompt's last row */
} bench;

static di_status forward(bench *B, int32_t p0, int32_t n, int bounded, di_error *err) {
    const int32_t *tables[1] = {B->table};
    int32_t from[1] = {B->replay_from};
    for (int32_t i = 0; i < n; i++) {
        B->seq[i] = 0;
        B->pos[i] = p0 + i;
        B->want[i] = p0 + i == B->n_prompt - 1 || p0 >= B->n_prompt; /* the prompt's last row, decode rows */
    }
    di_batch b = {.n_rows = n, .token = B->tok + p0, .seq = B->seq, .pos = B->pos, .want_logits = B->want,
                  .n_seq_slots = 1, .block_size = BLOCK_SIZE, .block_tables = tables, .n_blocks = &B->n_blocks,
                  .replay_from = bounded ? from : NULL};
    return di_model_forward(B->ctx, B->kv, &b, B->logits, B->pool, err);
}

/* The prompt in chunks (seconds into *s), then n_decode greedy steps into B->gen. */
static di_status run_once(bench *B, int bounded, double *s, di_error *err) {
    double t0 = now_s();
    di_status st = DI_OK;
    for (int32_t p0 = 0; p0 < B->n_prompt && !st; p0 += B->n_chunk) {
        int32_t n = B->n_prompt - p0 < B->n_chunk ? B->n_prompt - p0 : B->n_chunk;
        st = forward(B, p0, n, bounded, err);
    }
    *s = now_s() - t0;
    if (st) return st;
    memcpy(B->last, B->logits, sizeof(float) * (size_t)B->n_vocab);
    for (int32_t k = 0; k < B->n_decode && !st; k++) {
        B->gen[k] = argmax(B->logits, B->n_vocab);
        B->tok[B->n_prompt + k] = B->gen[k];
        st = forward(B, B->n_prompt + k, 1, bounded, err);
    }
    return st;
}

int main(int argc, char **argv) {
    const char *dir = NULL, *numerics = NULL;
    int threads = 2, n_prompt = 2048, keep = 0, chunk = 512, n_decode = 16, reps = 3;
    for (int i = 1; i < argc; i += 2) { /* every option takes a value */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            fprintf(stderr, "%s needs a value\n", a);
            return 2;
        }
        if (!strcmp(a, "-m")) dir = v;
        else if (!strcmp(a, "--numerics")) numerics = v;
        else if (!strcmp(a, "-t")) threads = atoi(v);
        else if (!strcmp(a, "-p")) n_prompt = atoi(v);
        else if (!strcmp(a, "-k")) keep = atoi(v);
        else if (!strcmp(a, "-c")) chunk = atoi(v);
        else if (!strcmp(a, "-n")) n_decode = atoi(v);
        else if (!strcmp(a, "-r")) reps = atoi(v);
        else {
            fprintf(stderr, "unknown option %s\n", a);
            return 2;
        }
    }
    if (!dir || threads < 1 || n_prompt < 2 || n_prompt > (1 << 20) || chunk < 1 || n_decode < 0 ||
        n_decode > 4096 || reps < 1 || reps > MAX_REPS || keep < 0) {
        fprintf(stderr, "usage: bench_bounded_replay -m DIR [-t T] [-p P] [-k KEEP] [-c CHUNK] [-n N] [-r R] "
                        "[--numerics deepinfer|ideal]\n");
        return 2;
    }
    di_error err;
    di_model *m = NULL;
    bench B;
    memset(&B, 0, sizeof B);
    if (di_model_open(dir, NULL, numerics, &m, &err)) goto fail;
    int32_t keep_used = 0;
    if (di_model_bounded_replay(m, keep ? keep : -1, &keep_used, &err)) goto fail;
    di_model_facts facts;
    di_model_get_facts(m, &facts);
    B.n_prompt = n_prompt;
    B.n_chunk = chunk;
    B.n_decode = n_decode;
    B.n_vocab = facts.n_vocab;
    B.replay_from = n_prompt > keep_used ? n_prompt - keep_used : 0;
    int32_t total = n_prompt + n_decode;
    B.n_blocks = (total + BLOCK_SIZE - 1) / BLOCK_SIZE;
    B.tok = malloc(sizeof(int32_t) * (size_t)total);
    B.seq = malloc(sizeof(int32_t) * (size_t)total);
    B.pos = malloc(sizeof(int32_t) * (size_t)total);
    B.want = malloc((size_t)total);
    B.table = malloc(sizeof(int32_t) * (size_t)B.n_blocks);
    B.gen = malloc(sizeof(int32_t) * (size_t)(n_decode + 1));
    B.logits = malloc(sizeof(float) * (size_t)B.n_vocab);
    B.last = malloc(sizeof(float) * (size_t)B.n_vocab);
    float *exact_last = malloc(sizeof(float) * (size_t)B.n_vocab);
    int32_t *exact_gen = malloc(sizeof(int32_t) * (size_t)(n_decode + 1));
    if (!B.tok || !B.seq || !B.pos || !B.want || !B.table || !B.gen || !B.logits || !B.last || !exact_last ||
        !exact_gen) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    uint32_t x = 12345;
    for (int32_t i = 0; i < n_prompt; i++) {
        B.tok[i] = (int32_t)(x % (uint32_t)B.n_vocab);
        x = x * 1664525u + 1013904223u;
    }
    for (int32_t i = 0; i < B.n_blocks; i++) B.table[i] = i;
    if (di_threadpool_create(threads, &B.pool, &err) || di_model_kv_create(m, B.n_blocks, BLOCK_SIZE, DI_DTYPE_F32,
                                                                          &B.kv, &err) ||
        di_model_ctx_create(m, &B.ctx, &err))
        goto fail;
    double t[2][MAX_REPS];
    for (int r = 0; r < reps; r++)
        for (int mode = 0; mode < 2; mode++) { /* interleaved: load drifts hit both alike */
            if (run_once(&B, mode, &t[mode][r], &err)) goto fail;
            if (mode == 0) {
                memcpy(exact_last, B.last, sizeof(float) * (size_t)B.n_vocab);
                memcpy(exact_gen, B.gen, sizeof(int32_t) * (size_t)n_decode);
            }
        }
    double max_abs = 0, sq = 0, scale = 0;
    for (int32_t v = 0; v < B.n_vocab; v++) {
        double d = fabs((double)B.last[v] - exact_last[v]);
        max_abs = fmax(max_abs, d);
        sq += d * d;
        scale = fmax(scale, fabs(exact_last[v]));
    }
    int32_t agree = 0;
    while (agree < n_decode && B.gen[agree] == exact_gen[agree]) agree++;
    double med[2], lo[2], hi[2];
    for (int mode = 0; mode < 2; mode++) {
        qsort(t[mode], (size_t)reps, sizeof(double), cmp_double);
        med[mode] = n_prompt / t[mode][reps / 2];
        lo[mode] = n_prompt / t[mode][reps - 1];
        hi[mode] = n_prompt / t[mode][0];
    }
    printf("{\"prompt\": %d, \"chunk\": %d, \"keep\": %d, \"threads\": %d, \"reps\": %d, \"kernels\": \"%s\", "
           "\"numerics\": \"%s\", \"exact_tok_s\": {\"median\": %.2f, \"min\": %.2f, \"max\": %.2f}, "
           "\"bounded_tok_s\": {\"median\": %.2f, \"min\": %.2f, \"max\": %.2f}, \"speedup\": %.3f, "
           "\"last_row\": {\"max_abs\": %.4g, \"rms\": %.4g, \"logit_scale\": %.4g, \"top1_same\": %s}, "
           "\"greedy_agree\": %d, \"greedy_n\": %d}\n",
           n_prompt, chunk, (int)keep_used, threads, reps, facts.kernels, numerics ? numerics : "deepinfer", med[0],
           lo[0], hi[0], med[1], lo[1], hi[1], med[1] / med[0], max_abs, sqrt(sq / B.n_vocab), scale,
           argmax(B.last, B.n_vocab) == argmax(exact_last, B.n_vocab) ? "true" : "false", (int)agree, n_decode);
    di_model_ctx_free(B.ctx);
    di_model_kv_free(B.kv);
    di_threadpool_free(B.pool);
    di_model_free(m);
    void *bufs[] = {B.tok, B.seq, B.pos, B.want, B.table, B.gen, B.logits, B.last, exact_last, exact_gen};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]);
    return 0;
fail:
    fprintf(stderr, "bench_bounded_replay: %s\n", err.msg);
    return 1;
}
