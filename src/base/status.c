#include "base/status.h"

#include <stdio.h>
#include <string.h>

const char *di_status_name(di_status s) {
    switch (s) {
    case DI_OK: return "ok";
    case DI_ERR_IO: return "io error";
    case DI_ERR_FORMAT: return "invalid format";
    case DI_ERR_NOMEM: return "out of memory";
    case DI_ERR_UNSUPPORTED: return "unsupported";
    case DI_ERR_INVALID_ARG: return "invalid argument";
    case DI_ERR_RANGE: return "out of range";
    case DI_ERR_NOT_FOUND: return "not found";
    case DI_ERR_CANCELLED: return "cancelled";
    case DI_ERR_FULL: return "capacity exceeded";
    case DI_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}

di_status di_error_set(di_error *err, di_status code, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->code = code;
    }
    return code;
}

di_status di_error_prefix(di_error *err, const char *fmt, ...) {
    if (!err) return DI_OK;
    char prefix[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    size_t np = strlen(prefix), room = sizeof err->msg - 1;
    if (np > room) np = room;
    size_t nold = strlen(err->msg);
    if (nold > room - np) nold = room - np;
    memmove(err->msg + np, err->msg, nold);
    memcpy(err->msg, prefix, np);
    err->msg[np + nold] = '\0';
    return err->code;
}

void di_error_clear(di_error *err) {
    if (!err) return;
    err->code = DI_OK;
    err->msg[0] = '\0';
}
