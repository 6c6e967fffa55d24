/* Single-sequence prefill and decode speed of the DeepSeek-V4 forward.
 *
 *   bench_deepseek -m DIR [-t threads] [-p prompt_tokens] [-n decode_tokens]
 *                  [-r reps] [--profile] [-o logits.f32]
 *
 * Prefill: one batch of p rows (all positions of one sequence), logits for
 * the last row only. Decode: n single-row batches, greedy from there. The
 * prompt is the fixed pseudo-random sequence tok[i] = x_i % n_vocab with
 * x_0 = 12345, x_{i+1} = x_i * 1664525 + 1013904223 (mod 2^32), so
 * bench/deepseek_v4_bench.py can feed transformers the same ids. Prints one
 * JSON object: median / min / max tokens/s over reps and, with --profile,
 * the per-block seconds, flops and bytes of one more (profiled) prefill and
 * decode run (di_dsv4_ctx_set_profile). -o writes the prefill's last-row
 * logits (float32 LE) so the script can check them against transformers.
 * Not a test: nothing is asserted. */
#include "base/threadpool.h"
#include "model/deepseek_v4.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_REPS 100
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

typedef struct bench {
    di_dsv4_ctx *ctx;
    di_dsv4_kv *kv;
    di_threadpool *pool;
    int32_t n_prompt, n_decode, n_vocab, n_blocks;
    int32_t *tok, *seq, *pos, *table;
    uint8_t *want;
    float *logits;
} bench;

/* One prefill then n_decode greedy steps; seconds of each into *pp_s, *tg_s. */
static di_status run_once(bench *B, double *pp_s, double *tg_s, di_error *err) {
    const int32_t *tables[1] = {B->table};
    int32_t nb[1] = {B->n_blocks};
    memset(B->want, 0, (size_t)B->n_prompt);
    B->want[B->n_prompt - 1] = 1;
    di_batch b = {B->n_prompt, B->tok, B->seq, B->pos, B->want, 1, BLOCK_SIZE, tables, nb, NULL, NULL};
    double t0 = now_s();
    di_status s = di_dsv4_forward(B->ctx, B->kv, &b, B->logits, B->pool, err);
    if (s) return s;
    *pp_s = now_s() - t0;
    uint8_t one = 1;
    int32_t zero = 0;
    t0 = now_s();
    for (int32_t i = 0; i < B->n_decode; i++) {
        int32_t best = 0;
        for (int32_t v = 1; v < B->n_vocab; v++)
            if (B->logits[v] > B->logits[best]) best = v;
        int32_t p = B->n_prompt + i;
        di_batch d = {1, &best, &zero, &p, &one, 1, BLOCK_SIZE, tables, nb, NULL, NULL};
        if ((s = di_dsv4_forward(B->ctx, B->kv, &d, B->logits, B->pool, err))) return s;
    }
    *tg_s = now_s() - t0;
    return DI_OK;
}

static void print_profile(const char *name, const di_dsv4_profile *p, double total_s) {
    printf(", \"%s\": {\"seconds\": %.6f, \"rows\": %lld, \"blocks\": {", name, total_s, (long long)p->n_rows);
    for (int k = 0; k < DI_DSV4_BLK_COUNT; k++)
        printf("%s\"%s\": [%.6f, %.6g, %.6g]", k ? ", " : "", di_dsv4_block_name((di_dsv4_block)k), p->seconds[k],
               p->flops[k], p->bytes[k]);
    printf("}}");
}

int main(int argc, char **argv) {
    const char *dir = NULL, *out_logits = NULL;
    int threads = 2, n_prompt = 512, n_decode = 32, reps = 3, profile = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--profile")) {
            profile = 1;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "%s needs a value\n", argv[i]);
            return 2;
        }
        if (!strcmp(argv[i], "-m")) dir = argv[++i];
        else if (!strcmp(argv[i], "-t")) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-p")) n_prompt = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-n")) n_decode = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-r")) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-o")) out_logits = argv[++i];
        else {
            fprintf(stderr, "unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (!dir || n_prompt < 1 || n_decode < 0 || reps < 1 || reps > MAX_REPS || n_prompt > 1 << 16 ||
        n_decode > 1 << 16 || threads < 1 || threads > 256) {
        fprintf(stderr, "usage: bench_deepseek -m DIR [-t threads] [-p n] [-n n] [-r reps] [--profile] [-o f]\n");
        return 2;
    }
    di_error err = {0};
    di_dsv4_model *m = NULL;
    bench B = {0};
    double t_load = now_s();
    if (di_dsv4_load(dir, NULL, &m, &err) || di_threadpool_create(threads, &B.pool, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    t_load = now_s() - t_load;
    const di_dsv4_hparams *hp = di_dsv4_hparams_of(m);
    B.n_prompt = n_prompt;
    B.n_decode = n_decode;
    B.n_vocab = hp->n_vocab;
    const int32_t total = n_prompt + n_decode;
    B.n_blocks = (total + BLOCK_SIZE - 1) / BLOCK_SIZE;
    if (di_dsv4_kv_create(m, B.n_blocks, BLOCK_SIZE, DI_DTYPE_F32, &B.kv, &err) ||
        di_dsv4_ctx_create(m, &B.ctx, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    B.tok = malloc(sizeof(int32_t) * (size_t)total);
    B.seq = calloc((size_t)total, sizeof(int32_t));
    B.pos = malloc(sizeof(int32_t) * (size_t)total);
    B.table = malloc(sizeof(int32_t) * (size_t)B.n_blocks);
    B.want = calloc((size_t)total, 1);
    B.logits = malloc(sizeof(float) * (size_t)hp->n_vocab);
    if (!B.tok || !B.seq || !B.pos || !B.table || !B.want || !B.logits) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    uint32_t x = 12345;
    for (int32_t i = 0; i < total; i++) {
        B.tok[i] = (int32_t)(x % (uint32_t)hp->n_vocab);
        x = x * 1664525u + 1013904223u;
        B.pos[i] = i;
    }
    for (int32_t i = 0; i < B.n_blocks; i++) B.table[i] = i;

    double pp[MAX_REPS], tg[MAX_REPS];
    for (int r = 0; r < reps; r++) {
        double pp_s, tg_s;
        if (run_once(&B, &pp_s, &tg_s, &err)) {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
        pp[r] = n_prompt / pp_s;
        tg[r] = n_decode > 0 ? n_decode / tg_s : 0.0;
    }
    if (out_logits) { /* prefill only: the last decode step overwrote the buffer */
        const int32_t *tables[1] = {B.table};
        int32_t nb[1] = {B.n_blocks};
        di_batch b = {n_prompt, B.tok, B.seq, B.pos, B.want, 1, BLOCK_SIZE, tables, nb, NULL, NULL};
        FILE *f = fopen(out_logits, "wb");
        if (!f || di_dsv4_forward(B.ctx, B.kv, &b, B.logits, B.pool, &err) ||
            fwrite(B.logits, sizeof(float), (size_t)hp->n_vocab, f) != (size_t)hp->n_vocab) {
            fprintf(stderr, "cannot write %s %s\n", out_logits, err.msg);
            return 1;
        }
        fclose(f);
    }
    qsort(pp, (size_t)reps, sizeof(double), cmp_double);
    qsort(tg, (size_t)reps, sizeof(double), cmp_double);
    printf("{\"model\": \"%s\", \"kernels\": \"%s\", \"threads\": %d, \"reps\": %d, \"load_s\": %.3f, "
           "\"n_prompt\": %d, \"n_decode\": %d, "
           "\"pp_tok_s\": %.3f, \"pp_min\": %.3f, \"pp_max\": %.3f, "
           "\"tg_tok_s\": %.3f, \"tg_min\": %.3f, \"tg_max\": %.3f",
           dir, di_dsv4_kernels(m)->name, threads, reps, t_load, n_prompt, n_decode, pp[reps / 2], pp[0],
           pp[reps - 1], tg[reps / 2], tg[0], tg[reps - 1]);
    if (profile) {
        /* profiled prefill, then profiled decode, each with fresh totals */
        const int32_t n_dec = n_decode;
        double pp_s, tg_s;
        di_dsv4_profile pf, dp;
        B.n_decode = 0;
        di_dsv4_ctx_set_profile(B.ctx, 1);
        if (run_once(&B, &pp_s, &tg_s, &err)) {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
        di_dsv4_ctx_get_profile(B.ctx, &pf);
        B.n_decode = n_dec;
        /* decode only: run the prefill unprofiled, then profile the steps */
        di_dsv4_ctx_set_profile(B.ctx, 0);
        const int32_t *tables[1] = {B.table};
        int32_t nb[1] = {B.n_blocks};
        di_batch b = {n_prompt, B.tok, B.seq, B.pos, B.want, 1, BLOCK_SIZE, tables, nb, NULL, NULL};
        if (di_dsv4_forward(B.ctx, B.kv, &b, B.logits, B.pool, &err)) {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
        di_dsv4_ctx_set_profile(B.ctx, 1);
        uint8_t one = 1;
        int32_t zero = 0;
        double t0 = now_s();
        for (int32_t i = 0; i < n_dec; i++) {
            int32_t best = 0;
            for (int32_t v = 1; v < hp->n_vocab; v++)
                if (B.logits[v] > B.logits[best]) best = v;
            int32_t p = n_prompt + i;
            di_batch d = {1, &best, &zero, &p, &one, 1, BLOCK_SIZE, tables, nb, NULL, NULL};
            if (di_dsv4_forward(B.ctx, B.kv, &d, B.logits, B.pool, &err)) {
                fprintf(stderr, "%s\n", err.msg);
                return 1;
            }
        }
        tg_s = now_s() - t0;
        di_dsv4_ctx_get_profile(B.ctx, &dp);
        print_profile("profile_prefill", &pf, pp_s);
        print_profile("profile_decode", &dp, tg_s);
    }
    printf("}\n");
    free(B.tok);
    free(B.seq);
    free(B.pos);
    free(B.table);
    free(B.want);
    free(B.logits);
    di_dsv4_ctx_free(B.ctx);
    di_dsv4_kv_free(B.kv);
    di_dsv4_free(m);
    di_threadpool_free(B.pool);
    return 0;
}
