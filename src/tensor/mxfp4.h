/* MXFP4 (OCP microscaling FP4): 32 e2m1 values sharing one e8m0 scale,
 * value = e2m1(code) * 2^(e - 127). Two layouts of the same numbers:
 *
 * 1. ggml / GGUF block (DI_DTYPE_MXFP4, di_block_mxfp4 in quant.h): 17 bytes
 *    per 32 elements, the scale byte first, then 16 bytes where qs[j] holds
 *    element j in its low nibble and element j + 16 in its high nibble.
 *    ggml decodes with doubled e2m1 values (0,1,2,3,4,6,8,12) times
 *    2^(e - 128) ("e8m0 to fp32 half"), which is the same number for every
 *    e < 255; for e = 255, which OCP reserves for NaN, ggml yields
 *    (doubled value) * 2^127 and so do we for this layout, to match
 *    gguf.quants bit for bit.
 *
 * 2. HF safetensors split layout (gpt-oss and DeepSeek V4 routed experts):
 *    blocks U8/I8 [rows, cols/2] and scales U8/F8_E8M0 [rows, cols/32].
 *    Byte i of a row holds element 2i in its LOW nibble and element 2i+1 in
 *    its HIGH nibble (transformers' MXFP4 unpacking: lut[b & 0xf] goes to the
 *    even column, lut[b >> 4] to the odd one; the same convention as
 *    torch.float4_e2m1fn_x2). Scale byte 255 decodes as NaN (OCP).
 *
 * The scale byte means the same in both layouts, so converting is a nibble
 * reorder (di_mxfp4_split_to_blocks). Callers own all buffers. */
#ifndef DI_TENSOR_MXFP4_H
#define DI_TENSOR_MXFP4_H

#include "base/status.h"

#include <stdint.h>

#define DI_MXFP4_GROUP 32 /* elements per scale */

/* The shared scale byte for a group whose largest magnitude is amax:
 * floor(log2(amax)) - 2 + 127, the OCP / ggml choice (it maps amax into
 * [4, 8) times the scale, so values above 6 * scale clip to 6). Clamped to
 * 0..254; amax == 0 (or not finite) gives 0. */
uint8_t di_mxfp4_scale_for_absmax(float amax);

/* The e2m1 code nearest to x / 2^(e-127); ties go to the smaller
 * magnitude (the first code in ggml's table order). */
uint8_t di_mxfp4_nearest_code(float x, uint8_t e);

/* Split layout -> float: rows [row_begin, row_begin + n_rows) of a
 * [rows, cols] tensor into dst [n_rows, cols]. cols must be a positive
 * multiple of 32. */
di_status di_mxfp4_split_dequantize_rows(int64_t rows, int64_t cols, const uint8_t *blocks,
                                         const uint8_t *scales, int64_t row_begin, int64_t n_rows,
                                         float *dst, di_error *err);

/* float [rows, cols] -> split layout (blocks [rows, cols/2], scales
 * [rows, cols/32]), with the scale and rounding rules above. */
di_status di_mxfp4_split_quantize(int64_t rows, int64_t cols, const float *src, uint8_t *blocks,
                                  uint8_t *scales, di_error *err);

/* Split layout -> ggml blocks (dst: rows * cols/32 di_block_mxfp4, row
 * major), e.g. to run GGUF MXFP4 kernels on a safetensors checkpoint. Fails
 * with DI_ERR_FORMAT on a scale byte of 255 (NaN), which ggml cannot
 * express. */
di_status di_mxfp4_split_to_blocks(int64_t rows, int64_t cols, const uint8_t *blocks,
                                   const uint8_t *scales, void *dst, di_error *err);

#endif
