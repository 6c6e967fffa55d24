/* deepinfer bench plot: the throughput-vs-interactivity Pareto front of one
 * or several `bench serve` records, drawn by gnuplot (Debian gnuplot-nox)
 * as SVG. The shape of DeepInfer's own serving charts:
 *   x  interactivity = 1000 / p50 TPOT, output tokens/s seen by one user
 *   y  throughput    = output tokens/s of the whole server
 * Each record file (JSON or JSON Lines: one point per line) is one series,
 * named by its engine; its points are labelled with their concurrency or
 * rate, and the line joins the points no other point of the series beats
 * on both axes. A dashed line marks the TPOT SLO of the first point. */
#include "args.h"
#include "bench_serve.h"

#include "base/alloc.h"
#include "base/status.h"

#include <errno.h>
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_SERIES 16
#define MAX_POINTS 256

typedef struct point {
    double x, y;
    char label[32];
} point;

typedef struct series {
    char name[96];
    point p[MAX_POINTS];
    int n;
} series;

/* Prints a message; returns 1 (the failure exit status). */
static int plot_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int plot_err(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    return 1;
}

static double jnum(json_t *o, const char *k1, const char *k2) {
    json_t *v = json_object_get(o, k1);
    if (k2) v = json_object_get(v, k2);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

/* Reads one record file into s; 0 ok, else a message on stderr. */
static int read_series(const char *path, series *s, double *slo_tpot) {
    FILE *f = fopen(path, "r");
    if (!f) return fprintf(stderr, "bench plot: %s: %s\n", path, strerror(errno)), 1;
    char *line = NULL;
    size_t cap = 0;
    int lineno = 0, rc = 0;
    while (getline(&line, &cap, f) >= 0) {
        lineno++;
        if (line[strspn(line, " \t\r\n")] == 0) continue;
        json_error_t je;
        json_t *r = json_loads(line, 0, &je);
        double tpot = jnum(r, "tpot_ms", "p50"), tput = jnum(r, "output_tokens_per_s", NULL);
        if (!r || !json_is_object(r) || isnan(tput) || isnan(tpot)) {
            fprintf(stderr, "bench plot: %s:%d: not a bench serve record%s%s\n", path, lineno, r ? "" : ": ",
                    r ? "" : je.text);
            json_decref(r);
            rc = 1;
            break;
        }
        if (s->n == 0) {
            const char *name = json_string_value(json_object_get(json_object_get(r, "engine"), "name"));
            snprintf(s->name, sizeof s->name, "%s", name ? name : path);
            double slo = jnum(r, "slo", "tpot_ms");
            if (*slo_tpot <= 0 && slo > 0) *slo_tpot = slo;
        }
        if (s->n == MAX_POINTS) {
            fprintf(stderr, "bench plot: %s: more than %d points\n", path, MAX_POINTS);
            json_decref(r);
            rc = 1;
            break;
        }
        point *p = &s->p[s->n];
        /* a point without TPOT (no request with 2+ tokens) cannot be placed */
        if (tpot > 0) {
            p->x = 1000.0 / tpot;
            p->y = tput;
            double c = jnum(r, "workload", "concurrency"), rt = jnum(r, "workload", "rate");
            if (!isnan(c)) snprintf(p->label, sizeof p->label, "%.0f", c);
            else if (!isnan(rt)) snprintf(p->label, sizeof p->label, "%g/s", rt);
            s->n++;
        }
        json_decref(r);
    }
    free(line);
    fclose(f);
    if (!rc && s->n == 0) rc = plot_err("bench plot: %s: no plottable point\n", path);
    return rc;
}

static int cmp_x_desc(const void *a, const void *b) {
    const point *p = a, *q = b;
    return p->x > q->x ? -1 : p->x < q->x;
}

/* The gnuplot string literal of s: single quotes, '' for a quote. */
static void put_quoted(FILE *f, const char *s) {
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'') fputc('\'', f);
        if ((unsigned char)*s >= 0x20) fputc(*s, f);
    }
    fputc('\'', f);
}

int di_cmd_bench_plot(int argc, char **argv) {
    const char *out = NULL, *title = "deepinfer bench serve: throughput vs interactivity", *labels = NULL;
    di_arg specs[] = {
        {"--out", "-o", DI_ARG_STR, &out, 0, 0, "plot file to write: SVG, or PNG when it ends in .png (required)"},
        {"--title", NULL, DI_ARG_STR, &title, 0, 0, "plot title"},
        {"--labels", NULL, DI_ARG_STR, &labels, 0, 0, "series names, comma-separated (default: engine names)"},
    };
    const char *pos[MAX_SERIES];
    int npos = 0;
    int rc = di_args_parse("bench plot", "--out PLOT.svg RECORD.jsonl [RECORD.jsonl ...]", specs, 3, argc, argv, pos,
                           MAX_SERIES, &npos);
    if (rc) return rc == 1 ? 0 : 2;
    if (!out || npos == 0) return fprintf(stderr, "bench plot: want --out and at least one record file\n"), 2;
    series *ss = di_calloc((size_t)npos, sizeof *ss);
    if (!ss) return fprintf(stderr, "bench plot: out of memory\n"), 1;
    double slo_tpot = 0;
    for (int i = 0; i < npos && !rc; i++) rc = read_series(pos[i], &ss[i], &slo_tpot);
    /* --labels a,b: the i-th name replaces the i-th series' engine name */
    for (int i = 0; !rc && labels && *labels && i < npos; i++) {
        size_t n = strcspn(labels, ",");
        snprintf(ss[i].name, sizeof ss[i].name, "%.*s", (int)(n < sizeof ss[i].name ? n : sizeof ss[i].name - 1),
                 labels);
        labels += n + (labels[n] == ',');
    }
    char dir[] = "/tmp/deepinfer-plot-XXXXXX";
    if (!rc && !mkdtemp(dir)) rc = plot_err("bench plot: temp dir: %s\n", strerror(errno));
    char script[64];
    snprintf(script, sizeof script, "%s/plot.gp", dir);
    FILE *g = rc ? NULL : fopen(script, "w");
    if (!rc && !g) rc = plot_err("bench plot: %s: %s\n", script, strerror(errno));
    if (!rc) {
        /* the script holds the data inline ($dataN heredocs): one file */
        for (int i = 0; i < npos; i++) {
            series *s = &ss[i];
            qsort(s->p, (size_t)s->n, sizeof s->p[0], cmp_x_desc);
            fprintf(g, "$all%d << EOD\n", i);
            for (int k = 0; k < s->n; k++) fprintf(g, "%.6g %.6g \"%s\"\n", s->p[k].x, s->p[k].y, s->p[k].label);
            fprintf(g, "EOD\n$front%d << EOD\n", i);
            double best = -1; /* from the most interactive point down: keep those with more throughput */
            for (int k = 0; k < s->n; k++)
                if (s->p[k].y > best) {
                    best = s->p[k].y;
                    fprintf(g, "%.6g %.6g\n", s->p[k].x, s->p[k].y);
                }
            fprintf(g, "EOD\n");
        }
        size_t ol = strlen(out);
        if (ol > 4 && !strcmp(out + ol - 4, ".png")) /* PNG when asked for by name, else SVG */
            fprintf(g, "set terminal pngcairo size 900,560 enhanced font 'sans,10' background rgb 'white'\n");
        else
            fprintf(g, "set terminal svg size 900,560 dynamic enhanced font 'sans,12' background rgb 'white'\n");
        fprintf(g, "set output ");
        put_quoted(g, out);
        fprintf(g, "\nset title ");
        put_quoted(g, title);
        fprintf(g, " noenhanced\nset xlabel 'interactivity: output tokens/s per user (1000 / p50 TPOT)'\n"
                   "set ylabel 'throughput: output tokens/s'\nset grid\nset key top right noenhanced\n"
                   "set xrange [0:*]\nset yrange [0:*]\n");
        if (slo_tpot > 0)
            fprintf(g, "set arrow from %.6g, graph 0 to %.6g, graph 1 nohead dashtype 2 lc rgb 'gray40'\n"
                       "set label 'TPOT SLO %.0f ms' at %.6g, graph 0.95 offset 0.5,0 tc rgb 'gray40'\n",
                    1000 / slo_tpot, 1000 / slo_tpot, slo_tpot, 1000 / slo_tpot);
        fprintf(g, "plot ");
        for (int i = 0; i < npos; i++) {
            fprintf(g, "%s$front%d using 1:2 with linespoints lw 2 pt 7 lc %d title ", i ? ", " : "", i, i + 1);
            put_quoted(g, ss[i].name);
            fprintf(g, ", $all%d using 1:2 with points pt 6 lc %d notitle", i, i + 1);
            fprintf(g, ", $all%d using 1:2:3 with labels offset 0.8,0.6 font ',9' tc lt %d notitle", i, i + 1);
        }
        fprintf(g, "\n");
        if (fclose(g)) rc = plot_err("bench plot: %s: write failed\n", script);
    }
    if (!rc) {
        pid_t pid = fork();
        if (pid == 0) {
            execlp("gnuplot", "gnuplot", script, (char *)NULL);
            fprintf(stderr, "bench plot: cannot run gnuplot (%s): install gnuplot-nox (scripts/install-deps.sh)\n",
                    strerror(errno));
            _exit(127);
        }
        int status = 0;
        if (pid < 0 || waitpid(pid, &status, 0) < 0) rc = plot_err("bench plot: fork: %s\n", strerror(errno));
        else if (!WIFEXITED(status) || WEXITSTATUS(status)) {
            if (!WIFEXITED(status) || WEXITSTATUS(status) != 127) fprintf(stderr, "bench plot: gnuplot failed\n");
            rc = 1;
        }
    }
    if (dir[strlen(dir) - 1] != 'X') {
        unlink(script);
        rmdir(dir);
    }
    if (!rc) fprintf(stderr, "bench plot: wrote %s (%d series)\n", out, npos);
    free(ss);
    return rc;
}
