/* Block-scaled FP8 (see fp8_block.h). */
#include "tensor/fp8_block.h"

#include "tensor/fp8.h"
#include "tensor/half.h"

#include <math.h>
#include <string.h>

/* e8m0 codes 0..254 cover 2^-127..2^127; 255 is NaN. */
#define E8M0_MIN_EXP (-DI_E8M0_BIAS)
#define E8M0_MAX_EXP 127

static int64_t ceil_div(int64_t a, int64_t b) {
    return a / b + (a % b != 0);
}

di_status di_fp8_block_scale_shape(const di_fp8_block_layout *layout, int64_t *scale_rows,
                                   int64_t *scale_cols, di_error *err) {
    if (!layout) return di_error_set(err, DI_ERR_INVALID_ARG, "fp8 block: no layout");
    if (layout->rows <= 0 || layout->cols <= 0)
        return di_error_set(err, DI_ERR_INVALID_ARG, "fp8 block: shape [%lld, %lld] is not positive",
                            (long long)layout->rows, (long long)layout->cols);
    if (layout->block <= 0)
        return di_error_set(err, DI_ERR_INVALID_ARG, "fp8 block: block size %d is not positive",
                            (int)layout->block);
    if (layout->scale_dtype != DI_DTYPE_F32 && layout->scale_dtype != DI_DTYPE_BF16 &&
        layout->scale_dtype != DI_DTYPE_F8_E8M0) {
        const di_dtype_traits *tr = di_dtype_traits_of(layout->scale_dtype);
        return di_error_set(err, DI_ERR_UNSUPPORTED, "fp8 block: scale dtype %s is not f32, bf16 or f8_e8m0",
                            tr ? tr->name : "(invalid)");
    }
    int64_t elems;
    if (__builtin_mul_overflow(layout->rows, layout->cols, &elems) ||
        __builtin_mul_overflow(elems, (int64_t)sizeof(float), &elems))
        return di_error_set(err, DI_ERR_RANGE, "fp8 block: shape [%lld, %lld] overflows",
                            (long long)layout->rows, (long long)layout->cols);
    *scale_rows = ceil_div(layout->rows, layout->block);
    *scale_cols = ceil_div(layout->cols, layout->block);
    return DI_OK;
}

static float scale_at(di_dtype dtype, const void *scale, int64_t i) {
    const uint8_t *p = scale;
    if (dtype == DI_DTYPE_F8_E8M0) return di_e8m0_to_f32(p[i]);
    if (dtype == DI_DTYPE_BF16) {
        uint16_t b;
        memcpy(&b, p + 2 * i, sizeof b);
        return di_bf16_to_f32(b);
    }
    float f;
    memcpy(&f, p + 4 * i, sizeof f);
    return f;
}

di_status di_fp8_block_dequantize_rows(const di_fp8_block_layout *layout, const uint8_t *weight,
                                       const void *scale, int64_t row_begin, int64_t n_rows,
                                       float *dst, di_error *err) {
    int64_t srows, scols;
    di_status st = di_fp8_block_scale_shape(layout, &srows, &scols, err);
    if (st != DI_OK) return st;
    if (row_begin < 0 || n_rows < 0 || row_begin > layout->rows || n_rows > layout->rows - row_begin)
        return di_error_set(err, DI_ERR_RANGE, "fp8 block: rows [%lld, +%lld) outside [0, %lld)",
                            (long long)row_begin, (long long)n_rows, (long long)layout->rows);
    int64_t cols = layout->cols, bs = layout->block;
    for (int64_t r = 0; r < n_rows; r++) {
        int64_t row = row_begin + r;
        const uint8_t *w = weight + row * cols;
        float *y = dst + r * cols;
        int64_t srow = row / bs;
        for (int64_t c0 = 0; c0 < cols; c0 += bs) {
            float s = scale_at(layout->scale_dtype, scale, srow * scols + c0 / bs);
            int64_t c1 = c0 + bs < cols ? c0 + bs : cols;
            for (int64_t c = c0; c < c1; c++) y[c] = di_e4m3_to_f32(w[c]) * s;
        }
    }
    return DI_OK;
}

/* Scale for a block whose largest magnitude is amax (> 0, finite). */
static float choose_scale(float amax, bool pow2) {
    float s = amax / DI_E4M3_MAX;
    if (!pow2) {
        /* amax below 448 * 2^-149 underflows; the smallest subnormal still
         * maps every element into range. */
        return s > 0.0f ? s : 0x1p-149f;
    }
    int e;
    float m = frexpf(s, &e); /* s = m * 2^e, m in [0.5, 1) */
    int exp = m == 0.5f ? e - 1 : e; /* ceil(log2(s)) */
    if (exp < E8M0_MIN_EXP) exp = E8M0_MIN_EXP;
    if (exp > E8M0_MAX_EXP) exp = E8M0_MAX_EXP;
    return ldexpf(1.0f, exp);
}

/* Stores s in the scale tensor and returns the value that will be read
 * back, which is what elements must be divided by. */
static float store_scale(di_dtype dtype, void *scale, int64_t i, float s) {
    uint8_t *p = scale;
    if (dtype == DI_DTYPE_F8_E8M0) {
        int e;
        frexpf(s, &e); /* s is a power of two here: s = 0.5 * 2^e */
        p[i] = (uint8_t)(e - 1 + DI_E8M0_BIAS);
        return di_e8m0_to_f32(p[i]);
    }
    if (dtype == DI_DTYPE_BF16) {
        uint16_t b = di_f32_to_bf16(s);
        memcpy(p + 2 * i, &b, sizeof b);
        return di_bf16_to_f32(b);
    }
    memcpy(p + 4 * i, &s, sizeof s);
    return s;
}

di_status di_fp8_block_quantize(const di_fp8_block_layout *layout, const float *src,
                                bool pow2_scales, uint8_t *weight, void *scale, di_error *err) {
    int64_t srows, scols;
    di_status st = di_fp8_block_scale_shape(layout, &srows, &scols, err);
    if (st != DI_OK) return st;
    int64_t rows = layout->rows, cols = layout->cols, bs = layout->block;
    bool pow2 = pow2_scales || layout->scale_dtype == DI_DTYPE_F8_E8M0;
    for (int64_t i = 0; i < rows * cols; i++)
        if (!isfinite(src[i]))
            return di_error_set(err, DI_ERR_INVALID_ARG, "fp8 block: element %lld is not finite",
                                (long long)i);
    for (int64_t br = 0; br < srows; br++) {
        int64_t r0 = br * bs, r1 = r0 + bs < rows ? r0 + bs : rows;
        for (int64_t bc = 0; bc < scols; bc++) {
            int64_t c0 = bc * bs, c1 = c0 + bs < cols ? c0 + bs : cols;
            float amax = 0.0f;
            for (int64_t r = r0; r < r1; r++)
                for (int64_t c = c0; c < c1; c++)
                    if (fabsf(src[r * cols + c]) > amax) amax = fabsf(src[r * cols + c]);
            float s = amax > 0.0f ? choose_scale(amax, pow2) : 1.0f;
            s = store_scale(layout->scale_dtype, scale, br * scols + bc, s);
            for (int64_t r = r0; r < r1; r++)
                for (int64_t c = c0; c < c1; c++)
                    weight[r * cols + c] = di_f32_to_e4m3(src[r * cols + c] / s);
        }
    }
    return DI_OK;
}
