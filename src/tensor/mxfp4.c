/* MXFP4 in the ggml block layout and the HF split layout (see mxfp4.h). */
#include "tensor/mxfp4.h"

#include "tensor/fp8.h"
#include "tensor/quant.h"

#include <math.h>
#include <string.h>

#define E2M1_CODES 16
#define E2M1_EMAX 2        /* exponent of the largest e2m1 value (6 = 1.5*2^2) */
#define SCALE_MAX_CODE 254 /* 255 is NaN in OCP e8m0 */
#define NIBBLE 0x0f

/* ggml's kvalues_mxfp4: e2m1 values doubled so they are integers. */
static const int8_t KVALUES_X2[E2M1_CODES] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* ggml_e8m0_to_fp32_half: 2^(e - 128) as f32 bits, the two smallest codes
 * landing in the subnormal range. Only the GGUF block layout uses it. */
static float e8m0_half(uint8_t e) {
    uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

uint8_t di_mxfp4_scale_for_absmax(float amax) {
    if (!(amax > 0.0f) || !isfinite(amax)) return 0;
    int ex;
    frexpf(amax, &ex); /* amax = m * 2^ex, m in [0.5, 1): floor(log2) = ex - 1 */
    int e = ex - 1 - E2M1_EMAX + DI_E8M0_BIAS;
    if (e < 0) e = 0;
    if (e > SCALE_MAX_CODE) e = SCALE_MAX_CODE;
    return (uint8_t)e;
}

/* Same candidate products as ggml (doubled value times half scale), which
 * are exact, so the error comparisons and their tie-breaking match it. */
uint8_t di_mxfp4_nearest_code(float x, uint8_t e) {
    float d = e8m0_half(e);
    uint8_t best = 0;
    float best_err = INFINITY;
    for (int i = 0; i < E2M1_CODES; i++) {
        float err = fabsf(d * (float)KVALUES_X2[i] - x);
        if (err < best_err) {
            best_err = err;
            best = (uint8_t)i;
        }
    }
    return best;
}

void di_quant_mxfp4_to_float(const void *src, float *dst, int64_t n) {
    const uint8_t *p = src;
    for (int64_t b = 0; b < n / DI_QK_MXFP4; b++, dst += DI_QK_MXFP4) {
        di_block_mxfp4 blk;
        memcpy(&blk, p + b * sizeof blk, sizeof blk);
        float d = e8m0_half(blk.e);
        for (int j = 0; j < DI_QK_MXFP4 / 2; j++) {
            dst[j] = d * (float)KVALUES_X2[blk.qs[j] & NIBBLE];
            dst[j + DI_QK_MXFP4 / 2] = d * (float)KVALUES_X2[blk.qs[j] >> 4];
        }
    }
}

static float absmax(const float *x, int64_t n) {
    float amax = 0.0f;
    for (int64_t j = 0; j < n; j++)
        if (amax < fabsf(x[j])) amax = fabsf(x[j]);
    return amax;
}

void di_quant_mxfp4_from_float(const float *src, void *dst, int64_t n) {
    uint8_t *p = dst;
    for (int64_t b = 0; b < n / DI_QK_MXFP4; b++, src += DI_QK_MXFP4) {
        di_block_mxfp4 blk;
        blk.e = di_mxfp4_scale_for_absmax(absmax(src, DI_QK_MXFP4));
        for (int j = 0; j < DI_QK_MXFP4 / 2; j++) {
            uint8_t lo = di_mxfp4_nearest_code(src[j], blk.e);
            uint8_t hi = di_mxfp4_nearest_code(src[j + DI_QK_MXFP4 / 2], blk.e);
            blk.qs[j] = (uint8_t)(lo | hi << 4);
        }
        memcpy(p + b * sizeof blk, &blk, sizeof blk);
    }
}

/* ---- HF split layout ----------------------------------------------------- */

static di_status check_split(int64_t rows, int64_t cols, di_error *err) {
    if (rows <= 0 || cols <= 0 || cols % DI_MXFP4_GROUP != 0)
        return di_error_set(err, DI_ERR_INVALID_ARG,
                            "mxfp4: shape [%lld, %lld] needs positive sizes and cols a multiple of %d",
                            (long long)rows, (long long)cols, DI_MXFP4_GROUP);
    int64_t bytes;
    if (__builtin_mul_overflow(rows, cols, &bytes) ||
        __builtin_mul_overflow(bytes, (int64_t)sizeof(float), &bytes))
        return di_error_set(err, DI_ERR_RANGE, "mxfp4: shape [%lld, %lld] overflows", (long long)rows,
                            (long long)cols);
    return DI_OK;
}

di_status di_mxfp4_split_dequantize_rows(int64_t rows, int64_t cols, const uint8_t *blocks,
                                         const uint8_t *scales, int64_t row_begin, int64_t n_rows,
                                         float *dst, di_error *err) {
    di_status st = check_split(rows, cols, err);
    if (st != DI_OK) return st;
    if (row_begin < 0 || n_rows < 0 || row_begin > rows || n_rows > rows - row_begin)
        return di_error_set(err, DI_ERR_RANGE, "mxfp4: rows [%lld, +%lld) outside [0, %lld)",
                            (long long)row_begin, (long long)n_rows, (long long)rows);
    int64_t groups = cols / DI_MXFP4_GROUP;
    for (int64_t r = 0; r < n_rows; r++) {
        int64_t row = row_begin + r;
        const uint8_t *q = blocks + row * (cols / 2);
        float *y = dst + r * cols;
        for (int64_t g = 0; g < groups; g++) {
            float s = di_e8m0_to_f32(scales[row * groups + g]);
            for (int64_t i = g * DI_MXFP4_GROUP / 2; i < (g + 1) * DI_MXFP4_GROUP / 2; i++) {
                y[2 * i] = di_e2m1_to_f32(q[i] & NIBBLE) * s;
                y[2 * i + 1] = di_e2m1_to_f32(q[i] >> 4) * s;
            }
        }
    }
    return DI_OK;
}

di_status di_mxfp4_split_quantize(int64_t rows, int64_t cols, const float *src, uint8_t *blocks,
                                  uint8_t *scales, di_error *err) {
    di_status st = check_split(rows, cols, err);
    if (st != DI_OK) return st;
    int64_t groups = cols / DI_MXFP4_GROUP;
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t g = 0; g < groups; g++) {
            const float *x = src + r * cols + g * DI_MXFP4_GROUP;
            uint8_t e = di_mxfp4_scale_for_absmax(absmax(x, DI_MXFP4_GROUP));
            scales[r * groups + g] = e;
            uint8_t *q = blocks + r * (cols / 2) + g * DI_MXFP4_GROUP / 2;
            for (int i = 0; i < DI_MXFP4_GROUP / 2; i++)
                q[i] = (uint8_t)(di_mxfp4_nearest_code(x[2 * i], e) |
                                 di_mxfp4_nearest_code(x[2 * i + 1], e) << 4);
        }
    }
    return DI_OK;
}

di_status di_mxfp4_split_to_blocks(int64_t rows, int64_t cols, const uint8_t *blocks,
                                   const uint8_t *scales, void *dst, di_error *err) {
    di_status st = check_split(rows, cols, err);
    if (st != DI_OK) return st;
    int64_t groups = cols / DI_MXFP4_GROUP;
    uint8_t *out = dst;
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t g = 0; g < groups; g++) {
            di_block_mxfp4 blk;
            blk.e = scales[r * groups + g];
            if (blk.e == DI_E8M0_NAN_BITS)
                return di_error_set(err, DI_ERR_FORMAT, "mxfp4: scale [%lld, %lld] is NaN (0xff)",
                                    (long long)r, (long long)g);
            const uint8_t *q = blocks + r * (cols / 2) + g * DI_MXFP4_GROUP / 2;
            /* Element k of the group is nibble k&1 of byte k/2 here; ggml
             * wants element j and j+16 in byte j. */
            uint8_t code[DI_MXFP4_GROUP];
            for (int i = 0; i < DI_MXFP4_GROUP / 2; i++) {
                code[2 * i] = q[i] & NIBBLE;
                code[2 * i + 1] = q[i] >> 4;
            }
            for (int j = 0; j < DI_MXFP4_GROUP / 2; j++)
                blk.qs[j] = (uint8_t)(code[j] | code[j + DI_MXFP4_GROUP / 2] << 4);
            memcpy(out + (r * groups + g) * (int64_t)sizeof blk, &blk, sizeof blk);
        }
    }
    return DI_OK;
}
