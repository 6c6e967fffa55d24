/* Status codes and error messages. Every function that can fail returns a
 * di_status (0 = ok) and, when it fails, fills a di_error with a message the
 * caller can print. Library code never exits or aborts on bad input. */
#ifndef DI_BASE_STATUS_H
#define DI_BASE_STATUS_H

#include "deepinfer.h"

#include <stdarg.h>
#include <stddef.h>

/* Fills err (if non-NULL) with code and a printf-style message; returns code
 * so callers can write `return di_error_set(err, DI_ERR_FORMAT, ...)`. */
di_status di_error_set(di_error *err, di_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prefixes an existing message with more context ("file.gguf: " + msg). */
di_status di_error_prefix(di_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Clears err to DI_OK with an empty message. */
void di_error_clear(di_error *err);

#endif
