/* GGUF v3 writer: enough to rewrite a model with other tensor types (the
 * quantize command). Metadata is copied from an open reader handle, with
 * one optional u32 key set or replaced (general.file_type); tensors come as
 * a list and are laid out in order at the source's alignment.
 *
 * Ownership: nothing is retained; the caller owns src and every buffer. */
#ifndef DI_FORMAT_GGUF_WRITE_H
#define DI_FORMAT_GGUF_WRITE_H

#include "format/gguf.h"

typedef struct di_gguf_wtensor {
    const char *name;             /* NUL-terminated */
    uint32_t n_dims;              /* 1..DI_GGUF_MAX_DIMS */
    int64_t ne[DI_GGUF_MAX_DIMS]; /* ggml order; unused dims 1 */
    uint32_t ggml_type;
    const void *data;
    uint64_t n_bytes;             /* must equal the type's size for ne */
} di_gguf_wtensor;

/* Writes path: every KV of src in order (u32_key, when not NULL, replaced
 * in place or appended with u32_val), then the n tensors. Checks each
 * tensor's byte size against its dtype and shape. The file is written to
 * path + ".tmp" and renamed, so a failure leaves no partial file. */
di_status di_gguf_write_file(const char *path, const di_gguf *src, const char *u32_key, uint32_t u32_val,
                             const di_gguf_wtensor *t, uint64_t n, di_error *err);

#endif
