#include "tensor/dtype.h"

#include <string.h>

/* Block layouts follow ggml (ggml-common.h) for the GGUF types and the OCP
 * MX spec for MXFP4. to_float / from_float are filled in by the quant files. */
static const di_dtype_traits TRAITS[DI_DTYPE_COUNT] = {
    [DI_DTYPE_F32]     = {"f32", 1, 4, false, 0, NULL, NULL},
    [DI_DTYPE_F16]     = {"f16", 1, 2, false, 1, NULL, NULL},
    [DI_DTYPE_BF16]    = {"bf16", 1, 2, false, 30, NULL, NULL},
    [DI_DTYPE_F64]     = {"f64", 1, 8, false, 28, NULL, NULL},
    [DI_DTYPE_I8]      = {"i8", 1, 1, false, 24, NULL, NULL},
    [DI_DTYPE_I16]     = {"i16", 1, 2, false, 25, NULL, NULL},
    [DI_DTYPE_I32]     = {"i32", 1, 4, false, 26, NULL, NULL},
    [DI_DTYPE_I64]     = {"i64", 1, 8, false, 27, NULL, NULL},
    [DI_DTYPE_U8]      = {"u8", 1, 1, false, -1, NULL, NULL},
    [DI_DTYPE_BOOL]    = {"bool", 1, 1, false, -1, NULL, NULL},
    [DI_DTYPE_Q4_0]    = {"q4_0", 32, 18, true, 2, NULL, NULL},
    [DI_DTYPE_Q4_1]    = {"q4_1", 32, 20, true, 3, NULL, NULL},
    [DI_DTYPE_Q5_0]    = {"q5_0", 32, 22, true, 6, NULL, NULL},
    [DI_DTYPE_Q5_1]    = {"q5_1", 32, 24, true, 7, NULL, NULL},
    [DI_DTYPE_Q8_0]    = {"q8_0", 32, 34, true, 8, NULL, NULL},
    [DI_DTYPE_Q8_1]    = {"q8_1", 32, 36, true, 9, NULL, NULL},
    [DI_DTYPE_Q2_K]    = {"q2_K", 256, 84, true, 10, NULL, NULL},
    [DI_DTYPE_Q3_K]    = {"q3_K", 256, 110, true, 11, NULL, NULL},
    [DI_DTYPE_Q4_K]    = {"q4_K", 256, 144, true, 12, NULL, NULL},
    [DI_DTYPE_Q5_K]    = {"q5_K", 256, 176, true, 13, NULL, NULL},
    [DI_DTYPE_Q6_K]    = {"q6_K", 256, 210, true, 14, NULL, NULL},
    [DI_DTYPE_Q8_K]    = {"q8_K", 256, 292, true, 15, NULL, NULL},
    [DI_DTYPE_F8_E4M3] = {"f8_e4m3", 1, 1, false, -1, NULL, NULL},
    [DI_DTYPE_F8_E8M0] = {"f8_e8m0", 1, 1, false, -1, NULL, NULL},
    [DI_DTYPE_MXFP4]   = {"mxfp4", 32, 17, true, 39, NULL, NULL},
};

const di_dtype_traits *di_dtype_traits_of(di_dtype t) {
    if ((unsigned)t >= DI_DTYPE_COUNT) return NULL;
    return &TRAITS[t];
}

di_status di_dtype_from_ggml(uint32_t ggml_type, di_dtype *out) {
    for (int t = 0; t < DI_DTYPE_COUNT; t++) {
        if (TRAITS[t].ggml_type >= 0 && (uint32_t)TRAITS[t].ggml_type == ggml_type) {
            *out = (di_dtype)t;
            return DI_OK;
        }
    }
    return DI_ERR_UNSUPPORTED;
}

di_status di_dtype_from_safetensors(const char *name, di_dtype *out) {
    static const struct { const char *name; di_dtype t; } MAP[] = {
        {"F32", DI_DTYPE_F32}, {"F16", DI_DTYPE_F16}, {"BF16", DI_DTYPE_BF16},
        {"F64", DI_DTYPE_F64}, {"I8", DI_DTYPE_I8}, {"I16", DI_DTYPE_I16},
        {"I32", DI_DTYPE_I32}, {"I64", DI_DTYPE_I64}, {"U8", DI_DTYPE_U8},
        {"BOOL", DI_DTYPE_BOOL}, {"F8_E4M3", DI_DTYPE_F8_E4M3},
        {"F8_E8M0", DI_DTYPE_F8_E8M0},
    };
    for (size_t i = 0; i < sizeof MAP / sizeof MAP[0]; i++) {
        if (strcmp(MAP[i].name, name) == 0) {
            *out = MAP[i].t;
            return DI_OK;
        }
    }
    return DI_ERR_UNSUPPORTED;
}

di_status di_dtype_row_bytes(di_dtype t, int64_t n, uint64_t *out) {
    const di_dtype_traits *tr = di_dtype_traits_of(t);
    if (!tr || n < 0 || n % tr->block_size != 0) return DI_ERR_FORMAT;
    uint64_t bytes;
    if (__builtin_mul_overflow((uint64_t)(n / tr->block_size), (uint64_t)tr->block_bytes, &bytes))
        return DI_ERR_RANGE;
    *out = bytes;
    return DI_OK;
}
