/* See progress.h. */
#include "progress.h"

#include <stdio.h>
#include <time.h>
#include <unistd.h>

/* A terminal line is rewritten at most this often (seconds). */
#define PROGRESS_TTY_EVERY_S 0.1
/* Plain lines when stderr is not a terminal (seconds). */
#define PROGRESS_PLAIN_EVERY_S 5.0
#define BAR_WIDTH 24

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void line(const di_progress *p, int64_t done, double amount, double t) {
    double dt = t - p->t0, rate = dt > 0 ? amount / dt : 0;
    double eta = done > 0 && p->total > done ? dt * (double)(p->total - done) / (double)done : 0;
    if (p->tty) {
        int filled = p->total > 0 ? (int)(BAR_WIDTH * done / p->total) : 0;
        if (filled > BAR_WIDTH) filled = BAR_WIDTH;
        fprintf(stderr, "\r%s [%.*s%*s] %lld/%lld  %.1f %s  ETA %.0fs ", p->what, filled,
                "########################", BAR_WIDTH - filled, "", (long long)done, (long long)p->total, rate,
                p->unit, eta);
    } else {
        fprintf(stderr, "%s: %lld/%lld, %.1f %s, %.0fs elapsed, ETA %.0fs\n", p->what, (long long)done,
                (long long)p->total, rate, p->unit, dt, eta);
    }
    fflush(stderr);
}

void di_progress_start(di_progress *p, const char *what, int64_t total, const char *unit) {
    p->what = what;
    p->unit = unit;
    p->total = total;
    p->tty = isatty(STDERR_FILENO);
    p->t0 = p->last = now_s();
    line(p, 0, 0, p->t0);
}

void di_progress_update(di_progress *p, int64_t done, double amount) {
    double t = now_s();
    if (t - p->last < (p->tty ? PROGRESS_TTY_EVERY_S : PROGRESS_PLAIN_EVERY_S)) return;
    p->last = t;
    line(p, done, amount, t);
}

void di_progress_end(di_progress *p, int64_t done, double amount) {
    line(p, done, amount, now_s());
    if (p->tty) fputc('\n', stderr);
}

#define BYTES_PER_MB 1000000.0
/* Weights below this load in well under a second even from disk: no bar. */
#define LOAD_BAR_MIN_BYTES ((uint64_t)32 << 20)

static int64_t mb_up(uint64_t bytes) { return (int64_t)((bytes + 999999) / 1000000); }

static void load_progress(uint64_t done, uint64_t total, void *user) {
    di_progress *p = user;
    if (total < LOAD_BAR_MIN_BYTES) return;
    if (done == 0) di_progress_start(p, "load", mb_up(total), "MB/s");
    else if (done < total) di_progress_update(p, (int64_t)(done / 1000000), (double)done / BYTES_PER_MB);
    else di_progress_end(p, mb_up(total), (double)total / BYTES_PER_MB);
}

void di_progress_load_hook(di_engine_params *p, di_progress *storage) {
    if (!isatty(STDERR_FILENO)) return;
    p->load_progress = load_progress;
    p->load_progress_user = storage;
}
