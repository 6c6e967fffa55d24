#include "args.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* " [default: V]" for a flag with a value, from what its variable holds
 * before parsing; "" when the help text already names it ("(512)", "(0 =
 * off)"), for switches, unset strings and sentinels outside the range
 * (e.g. -1 = random seed, which the help text explains). */
static const char *default_note(const di_arg *s) {
    static char note[160];
    char v[128] = "";
    if (s->kind == DI_ARG_INT) {
        int64_t x = *(const int64_t *)s->out;
        if ((double)x >= s->lo && (double)x <= s->hi) snprintf(v, sizeof v, "%lld", (long long)x);
    } else if (s->kind == DI_ARG_FLOAT) {
        double x = *(const double *)s->out;
        if (x >= s->lo && x <= s->hi) snprintf(v, sizeof v, "%g", x);
    } else if (s->kind == DI_ARG_STR) {
        const char *x = *(const char *const *)s->out;
        if (x) snprintf(v, sizeof v, "%.100s", x);
    }
    if (!v[0]) return "";
    /* "(512)", "(0 = off)": the help text already says it */
    char named[136];
    snprintf(named, sizeof named, "(%s", v);
    if (strstr(s->help, named)) return "";
    snprintf(note, sizeof note, " [default: %s]", v);
    return note;
}

static void print_usage(FILE *f, const char *cmd, const char *usage_line, const di_arg *specs,
                        int n_specs) {
    fprintf(f, "usage: deepinfer %s %s\n\noptions:\n", cmd, usage_line);
    for (int i = 0; i < n_specs; i++) {
        char names[64];
        if (specs[i].alt)
            snprintf(names, sizeof names, "%s, %s", specs[i].name, specs[i].alt);
        else if (specs[i].kind == DI_ARG_OPT_INT)
            snprintf(names, sizeof names, "%s[=N]", specs[i].name);
        else
            snprintf(names, sizeof names, "%s", specs[i].name);
        fprintf(f, "  %-24s %s%s\n", names, specs[i].help, default_note(&specs[i]));
    }
}

static const di_arg *find_spec(const di_arg *specs, int n, const char *a) {
    for (int i = 0; i < n; i++)
        if (!strcmp(specs[i].name, a) || (specs[i].alt && !strcmp(specs[i].alt, a))) return &specs[i];
    return NULL;
}

/* "--name=VALUE" of an optional-value flag: the spec, and *v the value. */
static const di_arg *find_spec_eq(const di_arg *specs, int n, const char *a, const char **v) {
    const char *eq = strchr(a, '=');
    if (!eq) return NULL;
    for (int i = 0; i < n; i++) {
        size_t len = strlen(specs[i].name);
        if (specs[i].kind == DI_ARG_OPT_INT && (size_t)(eq - a) == len && !strncmp(specs[i].name, a, len)) {
            *v = eq + 1;
            return &specs[i];
        }
    }
    return NULL;
}

static int set_value(const char *cmd, const di_arg *s, const char *v) {
    char *end = NULL;
    errno = 0;
    switch (s->kind) {
    case DI_ARG_STR:
        *(const char **)s->out = v;
        return 0;
    case DI_ARG_INT:
    case DI_ARG_OPT_INT: {
        long long x = strtoll(v, &end, 10);
        if (errno || end == v || *end || (double)x < s->lo || (double)x > s->hi) {
            fprintf(stderr, "deepinfer %s: %s: expected an integer in [%.0f, %.0f], got '%s'\n",
                    cmd, s->name, s->lo, s->hi, v);
            return 2;
        }
        *(int64_t *)s->out = x;
        return 0;
    }
    case DI_ARG_FLOAT: {
        double x = strtod(v, &end);
        if (errno || end == v || *end || !isfinite(x) || x < s->lo || x > s->hi) {
            fprintf(stderr, "deepinfer %s: %s: expected a number in [%g, %g], got '%s'\n", cmd,
                    s->name, s->lo, s->hi, v);
            return 2;
        }
        *(double *)s->out = x;
        return 0;
    }
    case DI_ARG_FLAG:
        break;
    }
    return 2;
}

int di_args_parse(const char *cmd, const char *usage_line, const di_arg *specs, int n_specs,
                  int argc, char **argv, const char **positional, int max_positional,
                  int *n_positional) {
    *n_positional = 0;
    bool only_positional = false;
    /* --help anywhere: the defaults are printed before any flag sets them */
    for (int i = 1; i < argc && strcmp(argv[i], "--"); i++) {
        const di_arg *s = find_spec(specs, n_specs, argv[i]);
        if (s && s->kind != DI_ARG_FLAG && s->kind != DI_ARG_OPT_INT) {
            i++;
            continue;
        }
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            print_usage(stdout, cmd, usage_line, specs, n_specs);
            return 1;
        }
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!only_positional && !strcmp(a, "--")) {
            only_positional = true;
            continue;
        }
        if (!only_positional && a[0] == '-' && a[1] != '\0') {
            const char *eqv = NULL;
            const di_arg *s = find_spec(specs, n_specs, a);
            if (!s && (s = find_spec_eq(specs, n_specs, a, &eqv))) {
                int rc = set_value(cmd, s, eqv);
                if (rc) return rc;
                continue;
            }
            if (!s) {
                fprintf(stderr, "deepinfer %s: unknown option '%s'\n", cmd, a);
                print_usage(stderr, cmd, usage_line, specs, n_specs);
                return 2;
            }
            if (s->kind == DI_ARG_FLAG) {
                *(bool *)s->out = true;
                continue;
            }
            if (s->kind == DI_ARG_OPT_INT) {
                *(int64_t *)s->out = -1;
                continue;
            }
            if (i + 1 >= argc) {
                fprintf(stderr, "deepinfer %s: %s needs a value\n", cmd, a);
                return 2;
            }
            int rc = set_value(cmd, s, argv[++i]);
            if (rc) return rc;
            continue;
        }
        if (*n_positional >= max_positional) {
            fprintf(stderr, "deepinfer %s: unexpected argument '%s'\n", cmd, a);
            print_usage(stderr, cmd, usage_line, specs, n_specs);
            return 2;
        }
        positional[(*n_positional)++] = a;
    }
    return 0;
}
