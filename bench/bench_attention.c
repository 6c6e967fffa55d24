/* di_attention alone, per kernel table, on the shape of one SmolLM2-135M
 * layer's prefill: a prompt of n rows (one sequence, positions 0..n-1),
 * 9 query heads, 3 KV heads, head_dim 64, KV blocks of 16, f16 cache.
 *
 *   bench_attention [-n rows] [-t threads] [-r reps] [-f32] [-decode] [-k table]
 *
 * -decode times n single-row calls instead (one per position: the decode
 * steps of the same prompt). Useful flops: 4 * head_dim * (pos + 1) per
 * (row, head) (scores and P.V, a multiply-add counts 2). Prints the best of
 * reps per table in ms and GFLOP/s; compare with bench_peak's f32 FMA peak.
 * Not a test: nothing is asserted. */
#include "base/threadpool.h"
#include "kernels/cpu/half.h"
#include "kernels/cpu/kernels.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { HEADS = 9, KV_HEADS = 3, HD = 64, BS = 16 };

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static float rndf(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return (float)((*s * 0x2545F4914F6CDD1Dull) >> 40) / 16777216.0f * 2.0f - 1.0f;
}

int main(int argc, char **argv) {
    int32_t n = 512;
    int threads = 2, reps = 5, f32 = 0, decode = 0;
    const char *only = NULL; /* one table by name, else every table this CPU runs */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-n") && i + 1 < argc) n = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-t") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-r") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-f32")) f32 = 1;
        else if (!strcmp(argv[i], "-decode")) decode = 1;
        else if (!strcmp(argv[i], "-k") && i + 1 < argc) only = argv[++i];
        else {
            fprintf(stderr, "usage: bench_attention [-n rows] [-t threads] [-r reps] [-f32] [-decode] [-k table]\n");
            return 2;
        }
    }
    if (n < 1 || threads < 1 || reps < 1) return 2;
    int32_t n_blocks = (n + BS - 1) / BS;
    int64_t kv_elems = (int64_t)n_blocks * BS * KV_HEADS * HD;
    float *q = malloc(sizeof(float) * (size_t)n * HEADS * HD), *out = malloc(sizeof(float) * (size_t)n * HEADS * HD);
    float *kf = malloc(sizeof(float) * (size_t)kv_elems), *vf = malloc(sizeof(float) * (size_t)kv_elems);
    uint16_t *kh = malloc(sizeof(uint16_t) * (size_t)kv_elems), *vh = malloc(sizeof(uint16_t) * (size_t)kv_elems);
    int32_t *table = malloc(sizeof(int32_t) * (size_t)n_blocks), *pos = malloc(sizeof(int32_t) * (size_t)n);
    const int32_t **rows = malloc(sizeof(*rows) * (size_t)n);
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    for (int64_t i = 0; i < (int64_t)n * HEADS * HD; i++) q[i] = rndf(&seed);
    for (int64_t i = 0; i < kv_elems; i++) {
        kf[i] = rndf(&seed);
        vf[i] = rndf(&seed);
        kh[i] = di_float_to_half(kf[i]);
        vh[i] = di_float_to_half(vf[i]);
    }
    for (int32_t b = 0; b < n_blocks; b++) table[b] = n_blocks - 1 - b; /* scattered, as a paged cache */
    for (int32_t r = 0; r < n; r++) {
        pos[r] = r;
        rows[r] = table;
    }
    di_threadpool *pool;
    di_error err;
    if (di_threadpool_create(threads, &pool, &err) != DI_OK) return 1;
    float *scratch = malloc(sizeof(float) * (size_t)threads * (size_t)di_attention_scratch_floats(HEADS, HD, BS));
    double flops = 4.0 * HD * HEADS * ((double)n * (n + 1) / 2);
    printf("attention %s n=%d threads=%d cache=%s (%.3f GFLOP)\n", decode ? "decode steps" : "prefill", n, threads,
           f32 ? "f32" : "f16", flops * 1e-9);
    for (int isa = 0; isa < DI_CPU_ISA_COUNT; isa++) {
        const di_cpu_kernels *k = di_cpu_kernels_get((di_cpu_isa)isa);
        if (!k || (only && strcmp(only, k->name))) continue;
        double best = 1e30;
        for (int rep = 0; rep < reps; rep++) {
            di_attn_args a = {
                .q = q, .n_rows = n, .n_heads = HEADS, .n_kv_heads = KV_HEADS, .head_dim = HD,
                .scale = 1.0f / sqrtf((float)HD), .k_cache = f32 ? (const void *)kf : (const void *)kh,
                .v_cache = f32 ? (const void *)vf : (const void *)vh, .kv_f16 = !f32, .block_size = BS,
                .row_blocks = rows, .pos = pos, .out = out,
            };
            double t0 = now_s();
            if (!decode) di_attention(k, &a, scratch, pool);
            else
                for (int32_t r = 0; r < n; r++) {
                    di_attn_args a1 = a;
                    a1.q = q + (int64_t)r * HEADS * HD;
                    a1.n_rows = 1;
                    a1.row_blocks = rows + r;
                    a1.pos = pos + r;
                    a1.out = out + (int64_t)r * HEADS * HD;
                    di_attention(k, &a1, scratch, pool);
                }
            double dt = now_s() - t0;
            best = dt < best ? dt : best;
        }
        printf("  %-12s %8.2f ms %7.1f GFLOP/s\n", k->name, best * 1e3, flops / best * 1e-9);
    }
    di_threadpool_free(pool);
    free(scratch);
    free(q), free(out), free(kf), free(vf), free(kh), free(vh), free(table), free(pos), free(rows);
    return 0;
}
