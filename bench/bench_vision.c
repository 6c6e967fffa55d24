/* Vision tower encode time: bench_vision DIR [threads] [reps].
 * DIR: a checkpoint from bench/gen_vision_bench.py (V4.1 block shape, few
 * blocks). For square images of 8..40 patches a side it times the whole
 * tower (di_dsv41_vision_forward on prepared patches) and prints ms per
 * image, per block, per patch, and GFLOP/s counted as
 *   blocks * (2*n*(3E*E + E*E + 3*E*F) + 4*n*n*E) + 2*n*3*p*p*E
 * (qkv, out, SwiGLU w1 (2F) + w2 (F), attention QK^T and PV, patch embed;
 * norms, rotary, softmax and the projector left out). Median of reps. */
#include "base/threadpool.h"
#include "model/deepseek_v41_vision.h"
#include "text/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_vision DIR [threads] [reps]\n");
        return 2;
    }
    int threads = argc > 2 ? atoi(argv[2]) : 2, reps = argc > 3 ? atoi(argv[3]) : 3;
    if (reps < 1 || reps > 100) reps = 3;
    di_error err;
    di_tokenizer *tok = NULL;
    di_dsv41_model *m = NULL;
    di_threadpool *pool = NULL;
    if (di_tok_load_json(argv[1], &tok, &err) || di_dsv41_load(argv[1], NULL, DI_DSV41_NUMERICS_IDEAL, tok, &m, &err) ||
        di_threadpool_create(threads, &pool, &err)) {
        fprintf(stderr, "bench_vision: %s\n", err.msg);
        return 1;
    }
    if (!di_dsv41_has_vision(m)) {
        fprintf(stderr, "bench_vision: %s has no vision tower\n", argv[1]);
        return 1;
    }
    /* the tower's shape, read back from the config the loader used */
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", argv[1]);
    FILE *f = fopen(path, "r");
    int E = 1024, depth = 2, heads = 16;
    if (f) {
        char buf[1 << 14];
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        buf[n] = 0;
        fclose(f);
        const char *v = strstr(buf, "\"vision_config\"");
        const char *h = v ? strstr(v, "\"hidden_size\"") : NULL, *d = v ? strstr(v, "\"depth\"") : NULL;
        const char *nh = v ? strstr(v, "\"num_heads\"") : NULL;
        if (h) E = atoi(strchr(h, ':') + 1);
        if (d) depth = atoi(strchr(d, ':') + 1);
        if (nh) heads = atoi(strchr(nh, ':') + 1);
    }
    const int Fr = 128 * (((int)(E * 2.7) + 127) / 128);
    const di_image_cfg *geo = di_dsv41_image_cfg(m);
    const int p = geo->patch_size;
    printf("tower: width %d, %d heads, SwiGLU %d, %d blocks here (x32 in V4.1), patch %d, %d threads\n", E, heads, Fr,
           depth, p, threads);
    printf("%8s %8s %10s %10s %10s %9s\n", "patches", "tokens", "ms/image", "ms/block", "us/patch", "GFLOP/s");
    const int sides[] = {8, 16, 24, 32, 40};
    for (size_t si = 0; si < sizeof sides / sizeof *sides; si++) {
        const int s = sides[si];
        di_image_layout lay;
        if (di_image_layout_of((int64_t)s * p, (int64_t)s * p, geo, &lay, &err)) {
            fprintf(stderr, "layout: %s\n", err.msg);
            return 1;
        }
        const int64_t n = (int64_t)lay.n_vit_w * lay.n_vit_h;
        float *patches = malloc((size_t)(n * 3 * p * p) * sizeof(float));
        float *rows = malloc((size_t)lay.num_tokens * (size_t)di_dsv41_hparams_of(m)->n_embd * sizeof(float));
        for (int64_t i = 0; i < n * 3 * p * p; i++) patches[i] = (float)((i * 2654435761u) % 255) / 127.5f - 1.0f;
        double t[100];
        for (int r = 0; r < reps; r++) {
            double t0 = now_s();
            if (di_dsv41_vision_forward(m, &lay, patches, NULL, rows, pool, &err)) {
                fprintf(stderr, "forward: %s\n", err.msg);
                return 1;
            }
            t[r] = now_s() - t0;
        }
        qsort(t, (size_t)reps, sizeof *t, cmp);
        const double med = t[reps / 2];
        const double flop = (double)depth * (2.0 * n * (3.0 * E * E + (double)E * E + 3.0 * E * Fr) + 4.0 * n * n * E) +
                            2.0 * n * 3 * p * p * E;
        printf("%8lld %8d %10.1f %10.2f %10.1f %9.1f\n", (long long)n, lay.num_tokens, med * 1e3, med * 1e3 / depth,
               med * 1e6 / n, flop / med * 1e-9);
        free(patches);
        free(rows);
    }
    di_threadpool_free(pool);
    di_dsv41_free(m);
    di_tok_free(tok);
    return 0;
}
