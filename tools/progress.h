/* Progress of long work on stderr (batch, perplexity, quantize): on a
 * terminal one line rewritten in place (bar, done/total, rate, ETA); when
 * stderr is a file or pipe, plain lines - at the start, every
 * PROGRESS_PLAIN_EVERY_S seconds and at the end - so that logs stay
 * readable (no carriage returns). */
#ifndef DI_TOOLS_PROGRESS_H
#define DI_TOOLS_PROGRESS_H

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

#endif
