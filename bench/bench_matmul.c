/* Speed of di_matmul per dispatch table on one thread (or -t N), for the
 * SmolLM2-135M shapes: decode (1 row) in GB/s of weights and prefill
 * (-r rows) in GMAC/s, per CPU-second (so per core for -t 1). Random
 * weights; nothing is asserted.
 *
 *   bench_matmul [-d q4_1] [-i 576] [-o 1536] [-r 512] [-t 1] [-n iters] [-k table]
 *
 * -k runs only the table of that name (e.g. avx512-amx-q8), for profiling.
 * A table with an x16 gemm for the dtype (pack_x16.h) runs twice: on the
 * rows ("rows") and on the packed copy the loader would make ("x16"). */
#include "base/threadpool.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/pack_x16.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* CPU time of the process, not wall time: on a shared, overloaded machine
 * it counts only the cycles this process got (threads summed). */
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double best_time(const di_cpu_kernels *k, di_matmul_args *a, float *scratch, di_threadpool *pool,
                        int iters) {
    double best = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = now_s();
        for (int i = 0; i < iters; i++) di_matmul(k, a, scratch, pool);
        double t = (now_s() - t0) / iters;
        best = t < best ? t : best;
    }
    return best;
}

int main(int argc, char **argv) {
    const char *dname = "q4_1", *only = NULL;
    int64_t n_in = 576, n_out = 1536, rows = 512;
    int threads = 1, iters = 20;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-d")) dname = argv[i + 1];
        else if (!strcmp(argv[i], "-i")) n_in = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "-o")) n_out = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "-r")) rows = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "-t")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-n")) iters = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-k")) only = argv[i + 1];
    }
    di_dtype t = DI_DTYPE_COUNT;
    for (int d = 0; d < DI_DTYPE_COUNT; d++)
        if (di_dtype_traits_of((di_dtype)d) && !strcmp(di_dtype_traits_of((di_dtype)d)->name, dname)) t = (di_dtype)d;
    if (t == DI_DTYPE_COUNT || n_in < 256 || n_out < 1 || rows < 1 || threads < 1 || iters < 1) {
        fprintf(stderr, "bad arguments\n");
        return 2;
    }
    uint64_t rb;
    if (di_dtype_row_bytes(t, n_in, &rb) != DI_OK) return 2;
    uint8_t *w = malloc(rb * (uint64_t)n_out);
    float *x = malloc(sizeof(float) * (size_t)(rows * n_in)), *y = malloc(sizeof(float) * (size_t)(rows * n_out));
    float *src = malloc(sizeof(float) * (size_t)n_in);
    float *scratch = malloc(sizeof(float) * (size_t)di_matmul_scratch_floats(rows, n_in, threads));
    if (!w || !x || !y || !src || !scratch) return 1;
    uint32_t s = 1;
    for (int64_t o = 0; o < n_out; o++) {
        for (int64_t i = 0; i < n_in; i++) src[i] = (float)((s = s * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f;
        di_dtype_traits_of(t)->from_float(src, w + o * rb, n_in);
    }
    for (int64_t i = 0; i < rows * n_in; i++) x[i] = (float)((s = s * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f;
    void *packed_w = NULL;
    if (di_x16_packable(t, n_in) && (packed_w = malloc(di_x16_packed_bytes(t, n_out, n_in))))
        di_x16_pack(t, w, rb, n_out, n_in, packed_w);
    di_threadpool *pool = NULL;
    di_error err;
    if (threads > 1 && di_threadpool_create(threads, &pool, &err)) return 1;
    printf("%s %lld x %lld, threads %d\n", dname, (long long)n_out, (long long)n_in, threads);
    for (int isa = 0; isa < DI_CPU_ISA_COUNT; isa++) {
        const di_cpu_kernels *k0 = di_cpu_kernels_get((di_cpu_isa)isa);
        if (!k0) continue;
        for (int exact = 0; exact < 2; exact++) {
            const di_cpu_kernels *k = exact ? k0->q8 : k0;
            if (!k || (only && strcmp(k->name, only))) continue;
            for (int packed = 0; packed < 2; packed++) {
                if (packed && !(k->gemm_q8_x16[t] && packed_w)) continue;
                const void *pw = packed ? packed_w : NULL;
                di_matmul_args a1 = {t, w, rb, x, n_in, y, n_out, 1, n_in, n_out, pw};
                di_matmul_args ar = {t, w, rb, x, n_in, y, n_out, rows, n_in, n_out, pw};
                double t1 = best_time(k, &a1, scratch, pool, iters * 10);
                double tr = best_time(k, &ar, scratch, pool, isa == 0 ? 1 : iters);
                printf("  %-16s %-4s decode %6.2f GB/s (%7.1f us)   %lld rows %7.2f GMAC/s\n", k->name,
                       k->gemm_q8_x16[t] ? (packed ? "x16" : "rows") : "", (double)(rb * (uint64_t)n_out) / t1 / 1e9,
                       t1 * 1e6, (long long)rows, (double)(rows * n_in * n_out) / tr / 1e9);
            }
        }
    }
    di_threadpool_free(pool);
    free(packed_w);
    return 0;
}
