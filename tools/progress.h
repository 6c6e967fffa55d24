/* Progress of long work on stderr (batch, perplexity, quantize): on a
 * terminal one line rewritten in place (bar, done/total, rate, ETA); when
 * stderr is a file or pipe, plain lines - at the start, every
 * PROGRESS_PLAIN_EVERY_S seconds and at the end - so that logs stay
 * readable (no carriage returns). */
#ifndef DI_TOOLS_PROGRESS_H
#define DI_TOOLS_PROGRESS_H

#include "deepinfer.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct di_progress {
    const char *what;  /* "perplexity", ... (borrowed) */
    const char *unit;  /* of the rate: "tok/s", "tensors/s" */
    int64_t total;
    bool tty;
    double t0, last;   /* seconds: start, last line written */
} di_progress;

void di_progress_start(di_progress *p, const char *what, int64_t total, const char *unit);
/* done of total; amount = what the rate counts so far (tokens, ...). */
void di_progress_update(di_progress *p, int64_t done, double amount);
/* The last line (and on a terminal the newline that ends it). */
void di_progress_end(di_progress *p, int64_t done, double amount);

/* Model-load progress for a command's engine: when stderr is a terminal,
 * sets p's load_progress (and so the weights' pre-touch, deepinfer.h) to
 * draw a "load" bar in MB on it (weights of 32 MiB and more: smaller ones
 * load too fast to need one), with storage as its state (must outlive
 * di_engine_create). Off a terminal it leaves p alone: no pre-touch, no
 * extra output in logs. */
void di_progress_load_hook(di_engine_params *p, di_progress *storage);

#endif
