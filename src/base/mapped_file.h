/* Read-only memory mapping of a whole file. Model weights point into the
 * mapping; nothing is copied. An empty file maps to data == NULL, size 0. */
#ifndef DI_BASE_MAPPED_FILE_H
#define DI_BASE_MAPPED_FILE_H

#include "base/status.h"

#include <stddef.h>
#include <stdint.h>

typedef struct di_mapped_file {
    const uint8_t *data; /* (size) bytes, read-only */
    size_t size;
    char *path;          /* owned copy of the path, for messages */
} di_mapped_file;

/* Maps path read-only. On success the caller owns *out and frees it with
 * di_mapped_file_close. */
di_status di_mapped_file_open(const char *path, di_mapped_file *out, di_error *err);
void di_mapped_file_close(di_mapped_file *f);

#endif
