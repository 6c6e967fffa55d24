/* What the load-time pre-touch of the weights (di_engine_params.pretouch,
 * the CLI's load bar) costs or saves: engine create and the first token
 * of a one-token request, with pre-touch off and on, alternated.
 *
 *   bench_load [-m MODEL] [-r reps] [-t threads] [--cold]
 *
 * --cold drops the file's pages from the page cache before every rep
 * (posix_fadvise DONTNEED: clean pages of a file nobody else maps), the
 * first start after a reboot or a download; without it the file stays
 * cached, the usual restart. Prints per mode the median of the reps:
 * create ms, create-to-first-token ms, and the process CPU ms of the
 * whole rep. Wall-clock times: quote them from a quiet machine. Nothing
 * is asserted. */
#include "deepinfer.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define MAX_REPS 64

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static double cpu_ms(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-3;
}

static int on_event(const di_event *ev) {
    double *first = ev->user;
    if (ev->token >= 0 && *first == 0) *first = now_ms();
    return 0;
}

static void drop_cache(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return;
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
}

/* One rep: create (pretouch on/off), one token, free. */
static int rep(const char *model, int threads, int pretouch, double *create_ms, double *first_ms, double *cpu) {
    di_engine_params p = di_engine_params_default();
    p.model_path = model;
    p.n_threads = threads;
    p.n_ctx = 64;
    p.kv_tokens = 256;
    p.pretouch = pretouch ? 1 : -1;
    di_error err;
    di_engine *e;
    double c0 = cpu_ms(), t0 = now_ms();
    if (di_engine_create(&p, &e, &err)) {
        fprintf(stderr, "bench_load: %s\n", err.msg);
        return 1;
    }
    double t1 = now_ms(), first = 0;
    di_request r;
    memset(&r, 0, sizeof r);
    r.text = "The capital of France is";
    r.max_tokens = 1;
    r.sampling = di_sampling_params_default();
    r.sampling.temperature = 0;
    r.on_event = on_event;
    r.user = &first;
    if (di_engine_submit(e, &r, NULL, &err) || di_engine_run(e, &err)) {
        fprintf(stderr, "bench_load: %s\n", err.msg);
        di_engine_free(e);
        return 1;
    }
    di_engine_free(e);
    *create_ms = t1 - t0;
    *first_ms = first - t0;
    *cpu = cpu_ms() - c0;
    return 0;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv) {
    const char *model = "models/gemma-3-270m-q4_k_m.gguf";
    int reps = 5, threads = 2, cold = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-m") && i + 1 < argc) model = argv[++i];
        else if (!strcmp(argv[i], "-r") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-t") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--cold")) cold = 1;
        else {
            fprintf(stderr, "usage: bench_load [-m MODEL] [-r reps] [-t threads] [--cold]\n");
            return 2;
        }
    }
    if (reps < 1 || reps > MAX_REPS) reps = reps < 1 ? 1 : MAX_REPS;
    double create[2][MAX_REPS], first[2][MAX_REPS], cpu[2][MAX_REPS];
    for (int r = 0; r < reps; r++)
        for (int mode = 0; mode < 2; mode++) {
            int on = (r + mode) % 2; /* alternate which mode goes first */
            if (cold) drop_cache(model);
            if (rep(model, threads, on, &create[on][r], &first[on][r], &cpu[on][r])) return 1;
        }
    printf("model %s, %s page cache, threads %d, median of %d\n", model, cold ? "cold" : "warm", threads, reps);
    printf("pretouch  create_ms  first_token_ms  cpu_ms\n");
    for (int on = 0; on < 2; on++)
        printf("%-8s  %9.1f  %14.1f  %6.1f\n", on ? "on" : "off", median(create[on], reps), median(first[on], reps),
               median(cpu[on], reps));
    return 0;
}
