/* Command-line flag parsing shared by the subcommands. Flags are untrusted
 * input: numbers are parsed completely (no trailing junk), range-checked, and
 * a bad value gives a message naming the flag. */
#ifndef DI_TOOLS_ARGS_H
#define DI_TOOLS_ARGS_H

#include <stdbool.h>
#include <stdint.h>

/* DI_ARG_OPT_INT: "--name" alone stores -1 (the feature's default),
 * "--name=N" stores N (range-checked); it never takes the next argument. */
typedef enum di_arg_kind { DI_ARG_FLAG, DI_ARG_STR, DI_ARG_INT, DI_ARG_FLOAT, DI_ARG_OPT_INT } di_arg_kind;

typedef struct di_arg {
    const char *name;  /* "-n" or "--max-tokens" (short alias in alt) */
    const char *alt;   /* second spelling or NULL */
    di_arg_kind kind;
    void *out;         /* bool*, const char**, int64_t* (INT, OPT_INT), double* */
    double lo, hi;     /* range for INT/FLOAT (inclusive) */
    const char *help;
} di_arg;

/* Parses argv[1..argc) against specs. Non-flag arguments are collected into
 * positional (up to max_positional; their count in *n_positional).
 * Returns 0 ok, 1 when --help was given (usage printed to stdout),
 * 2 on error (message + usage printed to stderr). */
int di_args_parse(const char *cmd, const char *usage_line, const di_arg *specs, int n_specs,
                  int argc, char **argv, const char **positional, int max_positional,
                  int *n_positional);

#endif
