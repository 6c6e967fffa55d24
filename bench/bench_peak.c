/* The machine's limits, for "share of peak" figures next to kernel speeds.
 *
 *   bench_peak [-t threads] [-m read_megabytes] [-r reps]
 *
 * FMA peak: each thread runs independent chains of 256-bit (AVX2) and
 * 512-bit (AVX-512) fused multiply-adds, enough chains to cover the FMA
 * latency on two ports; a multiply-add counts 2 flops. Read bandwidth: each
 * thread sums its slice of one buffer (default 512 MB, far beyond the
 * caches) with 256-bit loads. Prints one JSON object with the best of reps
 * for 1 thread and for t threads. AMX int8: TDPBSSD on 4 accumulator tiles
 * (amx_peak.h), in G multiply-adds/s, at full rate (64-byte rows) and with
 * the 32-byte rows of the AMX gemm. A path the CPU lacks reports 0. Not a
 * test: nothing is asserted. */
#include "amx_peak.h"
#include "base/threadpool.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define HAVE_X86 1
#else
#define HAVE_X86 0
#endif

#define FMA_ITERS 20000000L /* per thread: long enough to amortize start-up */
#define CHAINS 12           /* > latency (4) x ports (2): keeps both FMA units busy */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct probe {
    int isa; /* 0 avx2, 1 avx512, 2 amx k=64, 3 amx k=32 */
    long iters;
    const float *buf;
    int64_t n_floats;
    int n_parts;
    float sink[256];
} probe;

#if HAVE_X86
__attribute__((target("avx2,fma"))) static float fma_avx2(long iters) {
    __m256 acc[CHAINS];
    const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
    for (int c = 0; c < CHAINS; c++) acc[c] = _mm256_set1_ps((float)c);
    for (long i = 0; i < iters; i++)
        for (int c = 0; c < CHAINS; c++) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
    __m256 s = acc[0];
    for (int c = 1; c < CHAINS; c++) s = _mm256_add_ps(s, acc[c]);
    float out[8];
    _mm256_storeu_ps(out, s);
    return out[0];
}

__attribute__((target("avx512f"))) static float fma_avx512(long iters) {
    __m512 acc[CHAINS];
    const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
    for (int c = 0; c < CHAINS; c++) acc[c] = _mm512_set1_ps((float)c);
    for (long i = 0; i < iters; i++)
        for (int c = 0; c < CHAINS; c++) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
    __m512 s = acc[0];
    for (int c = 1; c < CHAINS; c++) s = _mm512_add_ps(s, acc[c]);
    return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx2"))) static float read_sum(const float *p, int64_t n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps(), s2 = _mm256_setzero_ps(), s3 = _mm256_setzero_ps();
    for (int64_t i = 0; i + 32 <= n; i += 32) {
        s0 = _mm256_add_ps(s0, _mm256_loadu_ps(p + i));
        s1 = _mm256_add_ps(s1, _mm256_loadu_ps(p + i + 8));
        s2 = _mm256_add_ps(s2, _mm256_loadu_ps(p + i + 16));
        s3 = _mm256_add_ps(s3, _mm256_loadu_ps(p + i + 24));
    }
    float out[8];
    _mm256_storeu_ps(out, _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    return out[0];
}
#endif

#define AMX_DIV 16 /* AMX iterations per FMA_ITERS: 1/16 */

static void fma_task(void *arg, int64_t task, int thread) {
    probe *p = arg;
    (void)thread;
#if HAVE_X86
    if (p->isa >= 2) p->sink[task % 256] = (float)amx_peak_run(p->iters / AMX_DIV, p->isa == 2 ? 64 : 32);
    else p->sink[task % 256] = p->isa ? fma_avx512(p->iters) : fma_avx2(p->iters);
#else
    p->sink[task % 256] = 0;
#endif
}

static void read_task(void *arg, int64_t task, int thread) {
    probe *p = arg;
    (void)thread;
    int64_t b, e;
    di_threadpool_split(p->n_floats, p->n_parts, (int)task, &b, &e);
#if HAVE_X86
    p->sink[task % 256] = read_sum(p->buf + b, e - b);
#else
    float s = 0;
    for (int64_t i = b; i < e; i++) s += p->buf[i];
    p->sink[task % 256] = s;
#endif
}

static double fma_gflops(di_threadpool *pool, int n, int isa, int reps) {
    probe p = {.isa = isa, .iters = FMA_ITERS};
    double best = 0;
    int lanes = isa ? 16 : 8;
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        di_threadpool_run(pool, n, fma_task, &p);
        double g = 2.0 * lanes * CHAINS * (double)p.iters * n / (now_s() - t0) / 1e9;
        best = g > best ? g : best;
    }
    return best;
}

/* AMX int8 multiply-adds per second (G), best of reps. */
static double amx_gmacs(di_threadpool *pool, int n, int k, int reps) {
    probe p = {.isa = k == 64 ? 2 : 3, .iters = FMA_ITERS};
    double best = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        di_threadpool_run(pool, n, fma_task, &p);
        double g = 4.0 * 16 * 16 * k * (double)(p.iters / AMX_DIV) * n / (now_s() - t0) / 1e9;
        best = g > best ? g : best;
    }
    return best;
}

static double read_gbs(di_threadpool *pool, int n, const float *buf, int64_t n_floats, int reps) {
    probe p = {.buf = buf, .n_floats = n_floats, .n_parts = n};
    double best = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        di_threadpool_run(pool, n, read_task, &p);
        double g = (double)n_floats * 4.0 / (now_s() - t0) / 1e9;
        best = g > best ? g : best;
    }
    return best;
}

static void cpu_name(char *out, size_t size) {
    snprintf(out, size, "?");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10)) {
            char *c = strchr(line, ':');
            if (c) {
                c += 2;
                c[strcspn(c, "\n\"\\")] = 0;
                snprintf(out, size, "%s", c);
            }
            break;
        }
    fclose(f);
}

int main(int argc, char **argv) {
    int threads = 2, mb = 512, reps = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-t")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-m")) mb = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-r")) reps = atoi(argv[i + 1]);
    }
    if (threads < 1 || threads > 256 || mb < 1 || mb > 65536 || reps < 1 || reps > 100) {
        fprintf(stderr, "usage: bench_peak [-t threads] [-m MB] [-r reps]\n");
        return 2;
    }
    di_error err;
    di_threadpool *p1, *pt;
    if (di_threadpool_create(1, &p1, &err) || di_threadpool_create(threads, &pt, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    int64_t n_floats = (int64_t)mb * 1024 * 1024 / 4;
    float *buf = malloc((size_t)n_floats * sizeof(float));
    if (!buf) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    for (int64_t i = 0; i < n_floats; i++) buf[i] = (float)(i & 1023); /* touch every page */
    int avx2 = 0, avx512 = 0;
#if HAVE_X86
    __builtin_cpu_init();
    avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    avx512 = __builtin_cpu_supports("avx512f");
#endif
    double a1 = avx2 ? fma_gflops(p1, 1, 0, reps) : 0, at = avx2 ? fma_gflops(pt, threads, 0, reps) : 0;
    double b1 = avx512 ? fma_gflops(p1, 1, 1, reps) : 0, bt = avx512 ? fma_gflops(pt, threads, 1, reps) : 0;
    int amx = amx_peak_available();
    double x1 = amx ? amx_gmacs(p1, 1, 64, reps) : 0, xt = amx ? amx_gmacs(pt, threads, 64, reps) : 0;
    double y1 = amx ? amx_gmacs(p1, 1, 32, reps) : 0, yt = amx ? amx_gmacs(pt, threads, 32, reps) : 0;
    double r1 = read_gbs(p1, 1, buf, n_floats, reps), rt = read_gbs(pt, threads, buf, n_floats, reps);
    char cpu[256];
    cpu_name(cpu, sizeof cpu);
    printf("{\"cpu\": \"%s\", \"threads\": %d, \"fma_avx2_gflops_t1\": %.2f, \"fma_avx2_gflops_tn\": %.2f, "
           "\"fma_avx512_gflops_t1\": %.2f, \"fma_avx512_gflops_tn\": %.2f, \"read_mb\": %d, "
           "\"read_gbs_t1\": %.2f, \"read_gbs_tn\": %.2f, \"amx_int8_gmacs_t1\": %.1f, \"amx_int8_gmacs_tn\": %.1f, "
           "\"amx_k32_int8_gmacs_t1\": %.1f, \"amx_k32_int8_gmacs_tn\": %.1f}\n",
           cpu, threads, a1, at, b1, bt, mb, r1, rt, x1, xt, y1, yt);
    free(buf);
    di_threadpool_free(p1);
    di_threadpool_free(pt);
    return 0;
}
