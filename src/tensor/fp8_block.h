/* 2-D block-scaled FP8 weights, as in the DeepSeek V4 / V4.1 checkpoints.
 *
 *   weight  e4m3fn [rows, cols]                       (safetensors F8_E4M3)
 *   scale   [ceil(rows/B), ceil(cols/B)]              (the "*_scale_inv" or
 *           "*.scale" tensor: F32, BF16, or F8_E8M0 powers of two)
 *   value   w[r][c] = e4m3(weight[r][c]) * scale[r / B][c / B]
 *
 * B is 128 for V4 and 32 for V4.1. The scale multiplies even where the
 * checkpoint calls it "scale_inv" (it is the inverse of the quantization
 * scale). Edge blocks are partial when rows or cols is not a multiple of B.
 * The product is one f32 multiply of two exactly converted numbers, so
 * dequantization is deterministic and bit-exact against any f32 oracle.
 *
 * Ownership: callers own every buffer; nothing here allocates. */
#ifndef DI_TENSOR_FP8_BLOCK_H
#define DI_TENSOR_FP8_BLOCK_H

#include "base/status.h"
#include "tensor/dtype.h"

#include <stdbool.h>
#include <stdint.h>

#define DI_FP8_BLOCK_V4 128  /* DeepSeek-V4-Flash weight blocks */
#define DI_FP8_BLOCK_V41 32  /* DeepSeek-V4.1-Flash weight blocks */

typedef struct di_fp8_block_layout {
    int64_t rows;         /* weight rows (output features) */
    int64_t cols;         /* weight columns (input features) */
    int32_t block;        /* block edge B, > 0 */
    di_dtype scale_dtype; /* DI_DTYPE_F32, DI_DTYPE_BF16 or DI_DTYPE_F8_E8M0 */
} di_fp8_block_layout;

/* Validates the layout (positive sizes, supported scale dtype, element and
 * byte counts that fit in int64) and returns the scale tensor's shape. */
di_status di_fp8_block_scale_shape(const di_fp8_block_layout *layout, int64_t *scale_rows,
                                   int64_t *scale_cols, di_error *err);

/* Dequantizes weight rows [row_begin, row_begin + n_rows) into
 * dst [n_rows, cols]. weight points at the whole [rows, cols] tensor and
 * scale at the whole scale tensor. */
di_status di_fp8_block_dequantize_rows(const di_fp8_block_layout *layout, const uint8_t *weight,
                                       const void *scale, int64_t row_begin, int64_t n_rows,
                                       float *dst, di_error *err);

/* Quantizes src [rows, cols] into weight [rows, cols] and scale (shape from
 * di_fp8_block_scale_shape). Each block's scale is amax / 448 so the largest
 * element maps to the largest e4m3 value; with pow2_scales (forced for an
 * F8_E8M0 scale dtype) it is rounded up to a power of two,
 * 2^ceil(log2(amax / 448)), the DeepSeek "ue8m0" convention. All-zero blocks
 * get scale 1. Elements are then divided by the scale and rounded to e4m3,
 * nearest even, saturating at +-448. Fails on non-finite input. */
di_status di_fp8_block_quantize(const di_fp8_block_layout *layout, const float *src,
                                bool pow2_scales, uint8_t *weight, void *scale, di_error *err);

#endif
