/* GGUF v2/v3 reader. The whole file is validated at open (see gguf.c for the
 * checklist); afterwards every accessor can trust what it reads. Tensor data
 * and string values point into the read-only mapping; nothing is copied
 * except keys and tensor names (NUL-terminated, validated UTF-8).
 * Dimensions follow ggml order: ne[0] is the contiguous (row) dimension. */
#ifndef DI_FORMAT_GGUF_H
#define DI_FORMAT_GGUF_H

#include "base/status.h"
#include "tensor/dtype.h"

#include <stdbool.h>
#include <stdint.h>

#define DI_GGUF_MAX_DIMS 4

typedef enum di_gguf_type {
    DI_GGUF_UINT8 = 0,
    DI_GGUF_INT8 = 1,
    DI_GGUF_UINT16 = 2,
    DI_GGUF_INT16 = 3,
    DI_GGUF_UINT32 = 4,
    DI_GGUF_INT32 = 5,
    DI_GGUF_FLOAT32 = 6,
    DI_GGUF_BOOL = 7,
    DI_GGUF_STRING = 8,
    DI_GGUF_ARRAY = 9,
    DI_GGUF_UINT64 = 10,
    DI_GGUF_INT64 = 11,
    DI_GGUF_FLOAT64 = 12,
    DI_GGUF_TYPE_COUNT
} di_gguf_type;

/* A string inside the mapping: not NUL-terminated. */
typedef struct di_gguf_str {
    const char *ptr;
    uint64_t len;
} di_gguf_str;

typedef struct di_gguf_kv {
    char *key;               /* owned, NUL-terminated */
    di_gguf_type type;
    /* scalars (type != STRING/ARRAY), widened: */
    union { uint64_t u64; int64_t i64; double f64; bool b; } val;
    di_gguf_str str;         /* type == STRING */
    di_gguf_type arr_type;   /* type == ARRAY: element type (never ARRAY) */
    uint64_t arr_len;        /* type == ARRAY: element count */
    const uint8_t *arr_data; /* type == ARRAY, numeric: packed little-endian elements (unaligned) */
    di_gguf_str *arr_str;    /* type == ARRAY of STRING: owned table of arr_len strings */
} di_gguf_kv;

typedef struct di_gguf_tensor {
    char *name;                   /* owned, NUL-terminated */
    uint32_t n_dims;
    int64_t ne[DI_GGUF_MAX_DIMS]; /* unused dims are 1 */
    uint32_t ggml_type;
    di_dtype dtype;
    uint64_t offset;              /* relative to the data section */
    uint64_t n_elems;
    uint64_t n_bytes;
    const void *data;             /* into the mapping */
} di_gguf_tensor;

typedef struct di_gguf di_gguf;

/* Opens and validates path. On success the caller owns *out (di_gguf_close). */
di_status di_gguf_open(const char *path, di_gguf **out, di_error *err);
/* Parses an in-memory image (not copied; must outlive the handle). Used by
 * the fuzzer and tests. name is used in messages. */
di_status di_gguf_open_memory(const void *data, uint64_t size, const char *name,
                              di_gguf **out, di_error *err);
void di_gguf_close(di_gguf *g);

uint32_t di_gguf_version(const di_gguf *g);
uint64_t di_gguf_alignment(const di_gguf *g);
uint64_t di_gguf_file_size(const di_gguf *g);
const char *di_gguf_name(const di_gguf *g); /* path or memory name */
/* Byte offset of the data section (tensor offsets are relative to it). */
uint64_t di_gguf_data_offset(const di_gguf *g);

uint64_t di_gguf_kv_count(const di_gguf *g);
const di_gguf_kv *di_gguf_kv_at(const di_gguf *g, uint64_t i);
/* NULL when absent. */
const di_gguf_kv *di_gguf_find_kv(const di_gguf *g, const char *key);

uint64_t di_gguf_tensor_count(const di_gguf *g);
const di_gguf_tensor *di_gguf_tensor_at(const di_gguf *g, uint64_t i);
/* NULL when absent. */
const di_gguf_tensor *di_gguf_find_tensor(const di_gguf *g, const char *name);

/* Typed getters. DI_ERR_NOT_FOUND when the key is absent, DI_ERR_FORMAT when
 * the type does not fit (integers convert between widths when the value is
 * in range; floats accept FLOAT32/FLOAT64). The message names the key. */
di_status di_gguf_get_u32(const di_gguf *g, const char *key, uint32_t *out, di_error *err);
di_status di_gguf_get_u64(const di_gguf *g, const char *key, uint64_t *out, di_error *err);
di_status di_gguf_get_i64(const di_gguf *g, const char *key, int64_t *out, di_error *err);
di_status di_gguf_get_f32(const di_gguf *g, const char *key, float *out, di_error *err);
di_status di_gguf_get_bool(const di_gguf *g, const char *key, bool *out, di_error *err);
di_status di_gguf_get_str(const di_gguf *g, const char *key, di_gguf_str *out, di_error *err);

/* Array element access (i < arr_len, checked). Numeric elements are widened. */
di_status di_gguf_arr_get_i64(const di_gguf_kv *kv, uint64_t i, int64_t *out);
di_status di_gguf_arr_get_f64(const di_gguf_kv *kv, uint64_t i, double *out);
/* String element i of an ARRAY of STRING (points into the mapping). */
di_status di_gguf_arr_get_str(const di_gguf_kv *kv, uint64_t i, di_gguf_str *out);

const char *di_gguf_type_name(di_gguf_type t);

#endif
