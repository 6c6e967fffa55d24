/* The machine's limits for bench/compare_llamacpp.py:
 *   read bandwidth  STREAM-like: T threads each sum their slice of a buffer
 *                   of -s MiB (default: bigger than any cache, about the
 *                   model's size) with wide loads; best and median of -r
 *                   passes, in GB/s (1e9 bytes);
 *   peak f32 FMA    T threads running 12 independent FMA chains (AVX2 ymm
 *                   and AVX-512 zmm when the CPU has it), in GFLOP/s
 *                   (2 per multiply-add);
 *   peak int8 MAC   the same with AVX-512 VNNI vpdpbusd, in G MAC/s;
 *   AMX int8 MAC    TDPBSSD on 4 accumulator tiles (amx_peak.h), full rate
 *                   (64-byte rows) and the 32-byte rows of the AMX gemm,
 *                   where the CPU and OS allow it (else 0).
 * Prints one JSON object. Not a test: nothing is asserted. -c 0 skips the
 * compute peaks (their fields are 0): the quick read-only probe that
 * compare_llamacpp.py runs between decode repetitions.
 *
 *   bench_bandwidth [-s MiB] [-t threads] [-r passes] [-c 0|1] */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "amx_peak.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define X86 1
#endif

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct job {
    const uint64_t *p;
    size_t n;      /* words */
    int kind;      /* 0 read, 1 f32 ymm, 2 f32 zmm, 3 int8 vnni, 4/5 amx k=64/32 */
    int64_t iters;
    uint64_t sink;
    pthread_barrier_t *bar;
    double t0, t1;
} job;

/* 8 independent sums so the loop is bound by loads, not by add latency. */
static uint64_t read_sum(const uint64_t *p, size_t n) {
    uint64_t s[8] = {0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) s[k] += p[i + k];
    for (; i < n; i++) s[0] += p[i];
    return s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
}

#ifdef X86
#define CHAINS 12
__attribute__((target("avx2,fma"))) static uint64_t fma_ymm(int64_t iters) {
    __m256 a[CHAINS], m = _mm256_set1_ps(0.999f), c = _mm256_set1_ps(1e-3f);
    for (int k = 0; k < CHAINS; k++) a[k] = _mm256_set1_ps((float)k);
    for (int64_t i = 0; i < iters; i++)
        for (int k = 0; k < CHAINS; k++) a[k] = _mm256_fmadd_ps(a[k], m, c);
    float out[8], s = 0;
    for (int k = 0; k < CHAINS; k++) {
        _mm256_storeu_ps(out, a[k]);
        s += out[0];
    }
    return (uint64_t)s;
}

__attribute__((target("avx512f"))) static uint64_t fma_zmm(int64_t iters) {
    __m512 a[CHAINS], m = _mm512_set1_ps(0.999f), c = _mm512_set1_ps(1e-3f);
    for (int k = 0; k < CHAINS; k++) a[k] = _mm512_set1_ps((float)k);
    for (int64_t i = 0; i < iters; i++)
        for (int k = 0; k < CHAINS; k++) a[k] = _mm512_fmadd_ps(a[k], m, c);
    float s = 0;
    for (int k = 0; k < CHAINS; k++) s += _mm512_reduce_add_ps(a[k]);
    return (uint64_t)s;
}

__attribute__((target("avx512f,avx512vnni"))) static uint64_t vnni_zmm(int64_t iters) {
    __m512i a[CHAINS], u = _mm512_set1_epi8(3), q = _mm512_set1_epi8(-2);
    for (int k = 0; k < CHAINS; k++) a[k] = _mm512_set1_epi32(k);
    for (int64_t i = 0; i < iters; i++)
        for (int k = 0; k < CHAINS; k++) a[k] = _mm512_dpbusd_epi32(a[k], u, q);
    int64_t s = 0;
    for (int k = 0; k < CHAINS; k++) s += _mm512_reduce_add_epi32(a[k]);
    return (uint64_t)s;
}

static int has_avx512(int vnni) {
    unsigned a, b, c, d;
    if (__get_cpuid_max(0, NULL) < 7) return 0;
    __cpuid_count(7, 0, a, b, c, d);
    unsigned lo, hi;
    __cpuid(1, a, b, c, d);
    if (!((c >> 27) & 1)) return 0;
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & 0xE6u) != 0xE6u) return 0;
    __cpuid_count(7, 0, a, b, c, d);
    return ((b >> 16) & 1) && (!vnni || ((c >> 11) & 1));
}
#endif

#define AMX_DIV 16 /* AMX iterations per compute_rate iteration: 1/16 */

static void *worker(void *arg) {
    job *j = arg;
    pthread_barrier_wait(j->bar);
    j->t0 = now_s();
    switch (j->kind) {
    case 0: j->sink = read_sum(j->p, j->n); break;
#ifdef X86
    case 1: j->sink = fma_ymm(j->iters); break;
    case 2: j->sink = fma_zmm(j->iters); break;
    case 3: j->sink = vnni_zmm(j->iters); break;
#endif
    case 4: j->sink = (uint64_t)amx_peak_run(j->iters / AMX_DIV, 64); break;
    case 5: j->sink = (uint64_t)amx_peak_run(j->iters / AMX_DIV, 32); break;
    default: break;
    }
    j->t1 = now_s();
    return NULL;
}

/* Runs kind on t threads; returns the wall time from the first start to the
 * last end. */
static double run(int kind, int t, const uint64_t *buf, size_t words, int64_t iters) {
    pthread_t th[64];
    job jobs[64];
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, (unsigned)t);
    for (int i = 0; i < t; i++) {
        size_t a = words * (size_t)i / (size_t)t, b = words * (size_t)(i + 1) / (size_t)t;
        jobs[i] = (job){buf + a, b - a, kind, iters, 0, &bar, 0, 0};
        pthread_create(&th[i], NULL, worker, &jobs[i]);
    }
    double t0 = 1e300, t1 = 0;
    uint64_t sink = 0;
    for (int i = 0; i < t; i++) {
        pthread_join(th[i], NULL);
        t0 = jobs[i].t0 < t0 ? jobs[i].t0 : t0;
        t1 = jobs[i].t1 > t1 ? jobs[i].t1 : t1;
        sink += jobs[i].sink;
    }
    pthread_barrier_destroy(&bar);
    if (sink == 42) fprintf(stderr, " "); /* keep the sums alive */
    return t1 - t0;
}

/* Median and best of reps runs of a compute kind, in G ops/s where one
 * iteration is ops_per_iter per thread. */
static void compute_rate(int kind, int t, int reps, double ops_per_iter, double *best, double *med) {
    const int64_t iters = 20 * 1000 * 1000;
    double v[64];
    for (int r = 0; r < reps; r++) v[r] = ops_per_iter * (double)iters * t / run(kind, t, NULL, 0, iters) / 1e9;
    qsort(v, (size_t)reps, sizeof v[0], cmp_double);
    *best = v[reps - 1];
    *med = v[reps / 2];
}

int main(int argc, char **argv) {
    int mib = 512, t = 2, reps = 7, compute = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-s")) mib = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-t")) t = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-r")) reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-c")) compute = atoi(argv[i + 1]);
    }
    if (mib < 1 || mib > 65536 || t < 1 || t > 64 || reps < 1 || reps > 64 || (compute != 0 && compute != 1)) {
        fprintf(stderr, "bench_bandwidth: bad arguments\n");
        return 2;
    }
    size_t words = (size_t)mib * 1024 * 1024 / 8;
    uint64_t *buf = malloc(words * 8);
    if (!buf) {
        fprintf(stderr, "bench_bandwidth: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < words; i++) buf[i] = i; /* touch every page */
    double bw[64];
    for (int r = 0; r < reps; r++) bw[r] = (double)words * 8 / run(0, t, buf, words, 0) / 1e9;
    qsort(bw, (size_t)reps, sizeof bw[0], cmp_double);
    double ymm_b = 0, ymm_m = 0, zmm_b = 0, zmm_m = 0, vnni_b = 0, vnni_m = 0;
#ifdef X86
    if (compute) compute_rate(1, t, reps, CHAINS * 8 * 2, &ymm_b, &ymm_m);
    if (compute && has_avx512(0)) compute_rate(2, t, reps, CHAINS * 16 * 2, &zmm_b, &zmm_m);
    if (compute && has_avx512(1)) compute_rate(3, t, reps, CHAINS * 64, &vnni_b, &vnni_m);
#endif
    double amx_b = 0, amx_m = 0, amx32_b = 0, amx32_m = 0;
    if (compute && amx_peak_available()) {
        compute_rate(4, t, reps, 4.0 * 16 * 16 * 64 / AMX_DIV, &amx_b, &amx_m);
        compute_rate(5, t, reps, 4.0 * 16 * 16 * 32 / AMX_DIV, &amx32_b, &amx32_m);
    }
    printf("{\"threads\": %d, \"buffer_mib\": %d, \"read_gbs_best\": %.2f, \"read_gbs_median\": %.2f, "
           "\"f32_gflops_best\": %.1f, \"f32_gflops_median\": %.1f, \"f32_ymm_gflops_best\": %.1f, "
           "\"f32_zmm_gflops_best\": %.1f, \"int8_gmacs_best\": %.1f, \"int8_gmacs_median\": %.1f, "
           "\"amx_int8_gmacs_best\": %.1f, \"amx_int8_gmacs_median\": %.1f, \"amx_k32_int8_gmacs_best\": %.1f, "
           "\"amx_k32_int8_gmacs_median\": %.1f}\n",
           t, mib, bw[reps - 1], bw[reps / 2], ymm_b > zmm_b ? ymm_b : zmm_b, ymm_b > zmm_b ? ymm_m : zmm_m, ymm_b,
           zmm_b, vnni_b, vnni_m, amx_b, amx_m, amx32_b, amx32_m);
    free(buf);
    return 0;
}
