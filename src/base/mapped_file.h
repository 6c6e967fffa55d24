/* Read-only memory mapping of a whole file. Model weights point into the
 * mapping; nothing is copied. An empty file maps to data == NULL, size 0. */
#ifndef DI_BASE_MAPPED_FILE_H
#define DI_BASE_MAPPED_FILE_H

#include "base/status.h"

#include <stdbool.h>
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

/* Bytes read per progress report of di_mapped_pretouch. */
#define DI_PRETOUCH_CHUNK_BYTES ((size_t)16 << 20)

/* Makes the pages of [data, data + size) resident now rather than at their
 * first use (a mapped model's first forward otherwise page-faults every
 * weight in): madvise(WILLNEED) a chunk ahead, then one byte read per page.
 * fn (may be NULL) gets (0, size) first, then bytes done after every
 * DI_PRETOUCH_CHUNK_BYTES, and (size, size) last. Advisory: nothing can
 * fail. Returns false without touching (and without calling fn) when size
 * is 0 or more than half the machine's physical memory: reading a mapping
 * near the size of memory would evict its own first pages again. */
bool di_mapped_pretouch(const void *data, size_t size, di_load_progress_fn fn, void *user);

/* Tells the OS the pages wholly inside [data, data + size) will not be
 * read again soon (MADV_PAGEOUT where the kernel has it, else nothing):
 * clean file pages leave this process's memory, anonymous ones go to swap
 * if there is any. Contents are kept either way (a later read faults them
 * back in), so it is safe on any memory; advisory, nothing can fail. For
 * weights that a backend copied into its own layout (the llama loader's
 * x16-packed matrices). */
void di_memory_release_hint(const void *data, size_t size);

#endif
