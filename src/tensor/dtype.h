/* Element types and quantized block layouts: one trait row per dtype
 * (ggml-style). A tensor of n elements of type t occupies
 * n / block_size * block_bytes bytes; n must be a multiple of block_size
 * along each row. */
#ifndef DI_TENSOR_DTYPE_H
#define DI_TENSOR_DTYPE_H

#include "base/status.h"

#include <stdbool.h>
#include <stdint.h>

typedef enum di_dtype {
    DI_DTYPE_F32 = 0,
    DI_DTYPE_F16,
    DI_DTYPE_BF16,
    DI_DTYPE_F64,
    DI_DTYPE_I8,
    DI_DTYPE_I16,
    DI_DTYPE_I32,
    DI_DTYPE_I64,
    DI_DTYPE_U8,
    DI_DTYPE_BOOL,
    DI_DTYPE_Q4_0,
    DI_DTYPE_Q4_1,
    DI_DTYPE_Q5_0,
    DI_DTYPE_Q5_1,
    DI_DTYPE_Q8_0,
    DI_DTYPE_Q8_1,
    DI_DTYPE_Q2_K,
    DI_DTYPE_Q3_K,
    DI_DTYPE_Q4_K,
    DI_DTYPE_Q5_K,
    DI_DTYPE_Q6_K,
    DI_DTYPE_Q8_K,
    DI_DTYPE_F8_E4M3, /* one byte per element; block scales live in a separate tensor */
    DI_DTYPE_F8_E8M0, /* power-of-two scale byte: value = 2^(b-127), 0xff = NaN */
    DI_DTYPE_MXFP4,   /* ggml MXFP4 block: 1 e8m0 byte + 16 bytes of e2m1 pairs (mxfp4.h) */
    DI_DTYPE_COUNT
} di_dtype;

/* Converts n elements (a multiple of block_size) starting at src to float. */
typedef void (*di_to_float_fn)(const void *src, float *dst, int64_t n);
/* Reference quantizer: n floats (a multiple of block_size) into blocks. */
typedef void (*di_from_float_fn)(const float *src, void *dst, int64_t n);

typedef struct di_dtype_traits {
    const char *name;          /* "q4_K", "bf16", ... (ggml spelling) */
    int32_t block_size;        /* elements per block (1 for plain types) */
    int32_t block_bytes;       /* bytes per block */
    bool is_quantized;
    int32_t ggml_type;         /* GGUF/ggml type id, -1 when GGUF has none */
    di_to_float_fn to_float;   /* NULL when not convertible to float */
    di_from_float_fn from_float; /* reference quantizer, NULL when none */
} di_dtype_traits;

/* Traits of t; NULL when t is out of range. */
const di_dtype_traits *di_dtype_traits_of(di_dtype t);
/* Maps a ggml type id from a GGUF file; DI_ERR_UNSUPPORTED when unknown. */
di_status di_dtype_from_ggml(uint32_t ggml_type, di_dtype *out);
/* Maps a safetensors dtype string ("BF16", "F8_E4M3", ...). */
di_status di_dtype_from_safetensors(const char *name, di_dtype *out);
/* Bytes of a row of n elements: fails when n is negative or not a multiple
 * of the block size, or the size overflows. */
di_status di_dtype_row_bytes(di_dtype t, int64_t n, uint64_t *out);

/* Converts n elements of type t at row to float (dst holds n floats).
 * Fails (with a message in err, which may be NULL) when t is unknown or has
 * no to_float, or n is negative or not a multiple of the block size. */
di_status di_dtype_row_to_float(di_dtype t, const void *row, float *dst, int64_t n, di_error *err);
/* The reverse through the type's reference quantizer (from_float); same
 * checks. See quant.h for which types have one. */
di_status di_dtype_row_from_float(di_dtype t, const float *src, void *row, int64_t n, di_error *err);

#endif
