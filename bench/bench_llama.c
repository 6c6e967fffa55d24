/* Single-sequence prefill and decode speed of the llama forward.
 *
 *   bench_llama [-m model.gguf] [-t threads] [-p prompt_tokens] [-n decode_tokens] [-r reps]
 *
 * Prefill: one batch of p rows (all positions of one sequence), logits for
 * the last row only. Decode: n single-row batches, greedy. Prints the median
 * and range over reps. Tokens are a fixed pseudo-random sequence (speed does
 * not depend on the ids). Not a test: nothing is asserted. */
#include "base/threadpool.h"
#include "format/gguf.h"
#include "model/llama.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    const char *path = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
    int threads = 2, n_prompt = 128, n_decode = 64, reps = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-m")) path = argv[i + 1];
        else if (!strcmp(argv[i], "-t")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-p")) n_prompt = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-n")) n_decode = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-r")) reps = atoi(argv[i + 1]);
    }
    if (n_prompt < 1 || n_decode < 0 || reps < 1 || reps > 100 || n_prompt > 1 << 16 || n_decode > 1 << 16) {
        fprintf(stderr, "bad arguments\n");
        return 2;
    }
    di_error err;
    di_gguf *g;
    di_llama_model *m;
    di_threadpool *pool;
    if (di_gguf_open(path, &g, &err) || di_llama_load(g, NULL, &m, &err) ||
        di_threadpool_create(threads, &pool, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    const di_llama_hparams *hp = di_llama_hparams_of(m);
    const int32_t bs = 16, total = n_prompt + n_decode;
    const int32_t n_blocks = (total + bs - 1) / bs;
    di_llama_kv *kv;
    di_llama_ctx *ctx;
    if (di_llama_kv_create(m, n_blocks, bs, DI_DTYPE_F32, &kv, &err) || di_llama_ctx_create(m, &ctx, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)total), *seq = calloc((size_t)total, sizeof(int32_t));
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)total), *table = malloc(sizeof(int32_t) * (size_t)n_blocks);
    uint8_t *want = calloc((size_t)total, 1);
    float *logits = malloc(sizeof(float) * hp->n_vocab);
    if (!tok || !seq || !pos || !table || !want || !logits) return 1;
    uint32_t x = 12345;
    for (int32_t i = 0; i < total; i++) {
        x = x * 1664525u + 1013904223u;
        tok[i] = (int32_t)(x % hp->n_vocab);
        pos[i] = i;
    }
    for (int32_t i = 0; i < n_blocks; i++) table[i] = i;
    const int32_t *tables[1] = {table};
    int32_t nb[1] = {n_blocks};
    double pp[100], tg[100];
    for (int r = 0; r < reps; r++) {
        want[n_prompt - 1] = 1;
        di_batch b = {n_prompt, tok, seq, pos, want, 1, bs, tables, nb, NULL, NULL};
        double t0 = now_s();
        if (di_llama_forward(ctx, kv, &b, logits, pool, &err)) {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
        pp[r] = n_prompt / (now_s() - t0);
        uint8_t one = 1;
        t0 = now_s();
        for (int32_t i = 0; i < n_decode; i++) {
            int32_t best = 0;
            for (int32_t v = 1; v < (int32_t)hp->n_vocab; v++)
                if (logits[v] > logits[best]) best = v;
            int32_t p = n_prompt + i;
            di_batch d = {1, &best, seq, &p, &one, 1, bs, tables, nb, NULL, NULL};
            if (di_llama_forward(ctx, kv, &d, logits, pool, &err)) {
                fprintf(stderr, "%s\n", err.msg);
                return 1;
            }
        }
        tg[r] = n_decode > 0 ? n_decode / (now_s() - t0) : 0;
    }
    qsort(pp, (size_t)reps, sizeof(double), cmp_double);
    qsort(tg, (size_t)reps, sizeof(double), cmp_double);
    printf("model %s, kernels %s, threads %d, reps %d\n", path, di_llama_kernels(m)->name, threads, reps);
    printf("prefill pp%d: %.1f tok/s (min %.1f, max %.1f)\n", n_prompt, pp[reps / 2], pp[0], pp[reps - 1]);
    printf("decode  tg%d: %.1f tok/s (min %.1f, max %.1f)\n", n_decode, tg[reps / 2], tg[0], tg[reps - 1]);
    free(tok);
    free(seq);
    free(pos);
    free(table);
    free(want);
    free(logits);
    di_llama_ctx_free(ctx);
    di_llama_kv_free(kv);
    di_llama_free(m);
    di_threadpool_free(pool);
    di_gguf_close(g);
    return 0;
}
