#include "tensor/dtype.h"

#include "tensor/quant.h"

#include <string.h>

/* Block layouts follow ggml (ggml-common.h) for the GGUF types and the OCP
 * MX spec for MXFP4; the row converters live in the per-family files named
 * in quant.h. U8 and BOOL have no ggml id (GGUF stores neither); F8_E4M3
 * and F8_E8M0 are safetensors element types that GGUF has no id for. */
static const di_dtype_traits TRAITS[DI_DTYPE_COUNT] = {
    [DI_DTYPE_F32]     = {"f32", 1, 4, false, 0, di_quant_f32_to_float, di_quant_f32_from_float},
    [DI_DTYPE_F16]     = {"f16", 1, 2, false, 1, di_quant_f16_to_float, di_quant_f16_from_float},
    [DI_DTYPE_BF16]    = {"bf16", 1, 2, false, 30, di_quant_bf16_to_float, di_quant_bf16_from_float},
    [DI_DTYPE_F64]     = {"f64", 1, 8, false, 28, di_quant_f64_to_float, NULL},
    [DI_DTYPE_I8]      = {"i8", 1, 1, false, 24, di_quant_i8_to_float, NULL},
    [DI_DTYPE_I16]     = {"i16", 1, 2, false, 25, di_quant_i16_to_float, NULL},
    [DI_DTYPE_I32]     = {"i32", 1, 4, false, 26, di_quant_i32_to_float, NULL},
    [DI_DTYPE_I64]     = {"i64", 1, 8, false, 27, di_quant_i64_to_float, NULL},
    [DI_DTYPE_U8]      = {"u8", 1, 1, false, -1, di_quant_u8_to_float, NULL},
    [DI_DTYPE_BOOL]    = {"bool", 1, 1, false, -1, di_quant_bool_to_float, NULL},
    [DI_DTYPE_Q4_0]    = {"q4_0", 32, 18, true, 2, di_quant_q4_0_to_float, di_quant_q4_0_from_float},
    [DI_DTYPE_Q4_1]    = {"q4_1", 32, 20, true, 3, di_quant_q4_1_to_float, di_quant_q4_1_from_float},
    [DI_DTYPE_Q5_0]    = {"q5_0", 32, 22, true, 6, di_quant_q5_0_to_float, di_quant_q5_0_from_float},
    [DI_DTYPE_Q5_1]    = {"q5_1", 32, 24, true, 7, di_quant_q5_1_to_float, di_quant_q5_1_from_float},
    [DI_DTYPE_Q8_0]    = {"q8_0", 32, 34, true, 8, di_quant_q8_0_to_float, di_quant_q8_0_from_float},
    [DI_DTYPE_Q8_1]    = {"q8_1", 32, 36, true, 9, di_quant_q8_1_to_float, di_quant_q8_1_from_float},
    [DI_DTYPE_Q2_K]    = {"q2_K", 256, 84, true, 10, di_quant_q2_K_to_float, NULL},
    [DI_DTYPE_Q3_K]    = {"q3_K", 256, 110, true, 11, di_quant_q3_K_to_float, NULL},
    [DI_DTYPE_Q4_K]    = {"q4_K", 256, 144, true, 12, di_quant_q4_K_to_float, di_quant_q4_K_from_float},
    [DI_DTYPE_Q5_K]    = {"q5_K", 256, 176, true, 13, di_quant_q5_K_to_float, NULL},
    [DI_DTYPE_Q6_K]    = {"q6_K", 256, 210, true, 14, di_quant_q6_K_to_float, di_quant_q6_K_from_float},
    [DI_DTYPE_Q8_K]    = {"q8_K", 256, 292, true, 15, di_quant_q8_K_to_float, di_quant_q8_K_from_float},
    [DI_DTYPE_F8_E4M3] = {"f8_e4m3", 1, 1, false, -1, di_quant_e4m3_to_float, di_quant_e4m3_from_float},
    [DI_DTYPE_F8_E8M0] = {"f8_e8m0", 1, 1, false, -1, di_quant_e8m0_to_float, NULL},
    [DI_DTYPE_MXFP4]   = {"mxfp4", 32, 17, true, 39, di_quant_mxfp4_to_float, di_quant_mxfp4_from_float},
};

/* The table's sizes must be the structs' sizes: kernels cast to them. */
_Static_assert(sizeof(di_block_q4_0) == 18, "q4_0 block");
_Static_assert(sizeof(di_block_q4_1) == 20, "q4_1 block");
_Static_assert(sizeof(di_block_q5_0) == 22, "q5_0 block");
_Static_assert(sizeof(di_block_q5_1) == 24, "q5_1 block");
_Static_assert(sizeof(di_block_q8_0) == 34, "q8_0 block");
_Static_assert(sizeof(di_block_q8_1) == 36, "q8_1 block");
_Static_assert(sizeof(di_block_q2_K) == 84, "q2_K block");
_Static_assert(sizeof(di_block_q3_K) == 110, "q3_K block");
_Static_assert(sizeof(di_block_q4_K) == 144, "q4_K block");
_Static_assert(sizeof(di_block_q5_K) == 176, "q5_K block");
_Static_assert(sizeof(di_block_q6_K) == 210, "q6_K block");
_Static_assert(sizeof(di_block_q8_K) == 292, "q8_K block");
_Static_assert(sizeof(di_block_mxfp4) == 17, "mxfp4 block");

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

/* Shared checks of the row converters: a known type with the converter,
 * non-negative n that is a whole number of blocks. */
static di_status check_row(di_dtype t, int64_t n, bool to_float, const di_dtype_traits **out,
                           di_error *err) {
    const di_dtype_traits *tr = di_dtype_traits_of(t);
    if (!tr) return di_error_set(err, DI_ERR_INVALID_ARG, "dtype %d is out of range", (int)t);
    bool has = to_float ? tr->to_float != NULL : tr->from_float != NULL;
    if (!has)
        return di_error_set(err, DI_ERR_UNSUPPORTED, "dtype %s has no %s converter", tr->name,
                            to_float ? "to-float" : "from-float");
    if (n < 0 || n % tr->block_size != 0)
        return di_error_set(err, DI_ERR_INVALID_ARG, "%lld elements is not a whole number of %s blocks of %d",
                            (long long)n, tr->name, (int)tr->block_size);
    *out = tr;
    return DI_OK;
}

di_status di_dtype_row_to_float(di_dtype t, const void *row, float *dst, int64_t n, di_error *err) {
    const di_dtype_traits *tr = NULL;
    di_status st = check_row(t, n, true, &tr, err);
    if (st != DI_OK) return st;
    tr->to_float(row, dst, n);
    return DI_OK;
}

di_status di_dtype_row_from_float(di_dtype t, const float *src, void *row, int64_t n, di_error *err) {
    const di_dtype_traits *tr = NULL;
    di_status st = check_row(t, n, false, &tr, err);
    if (st != DI_OK) return st;
    tr->from_float(src, row, n);
    return DI_OK;
}
