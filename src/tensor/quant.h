/* Quantized block layouts and the reference row converters behind the dtype
 * trait table (dtype.h).
 *
 * The GGUF block structs follow ggml's ggml-common.h byte for byte (the
 * static asserts in dtype.c pin the sizes); f16 fields are stored as raw
 * uint16_t bits (see half.h). Kernels may cast a block-aligned pointer to
 * these structs; the reference converters below copy each block out with
 * memcpy instead, so they accept any alignment.
 *
 * Every converter processes n elements, n a multiple of the type's block
 * size; callers that cannot guarantee that go through di_dtype_row_to_float,
 * which checks. Files: half.c (plain types), quant_legacy.c (Q4_0..Q8_1),
 * quant_k.c (K-quant dequantizers), quant_k_quantize.c (K-quant
 * quantizers), fp8.c (e4m3 / e8m0), mxfp4.c. */
#ifndef DI_TENSOR_QUANT_H
#define DI_TENSOR_QUANT_H

#include <stdint.h>

#define DI_QK4_0 32
#define DI_QK4_1 32
#define DI_QK5_0 32
#define DI_QK5_1 32
#define DI_QK8_0 32
#define DI_QK8_1 32
#define DI_QK_K 256          /* super-block of every K-quant */
#define DI_K_SCALE_SIZE 12   /* packed 6-bit scales+mins of Q4_K / Q5_K */
#define DI_QK_MXFP4 32

/* x = d * (q - 8), q in 0..15. qs[j] holds element j (low nibble) and
 * element j + 16 (high nibble). */
typedef struct di_block_q4_0 {
    uint16_t d;
    uint8_t qs[DI_QK4_0 / 2];
} di_block_q4_0;

/* x = d * q + m, q in 0..15, nibbles as in Q4_0. */
typedef struct di_block_q4_1 {
    uint16_t d;
    uint16_t m;
    uint8_t qs[DI_QK4_1 / 2];
} di_block_q4_1;

/* x = d * (q - 16), q 5 bits: low 4 as in Q4_0, bit 4 of element j is bit j
 * of the little-endian u32 qh. */
typedef struct di_block_q5_0 {
    uint16_t d;
    uint8_t qh[4];
    uint8_t qs[DI_QK5_0 / 2];
} di_block_q5_0;

/* x = d * q + m, q 5 bits as in Q5_0. */
typedef struct di_block_q5_1 {
    uint16_t d;
    uint16_t m;
    uint8_t qh[4];
    uint8_t qs[DI_QK5_1 / 2];
} di_block_q5_1;

/* x = d * q. */
typedef struct di_block_q8_0 {
    uint16_t d;
    int8_t qs[DI_QK8_0];
} di_block_q8_0;

/* x = d * q; s = d * sum(q) so dot products with Q4_1/Q5_1 can fold in the
 * offset without touching the values again (an activation format). */
typedef struct di_block_q8_1 {
    uint16_t d;
    uint16_t s;
    int8_t qs[DI_QK8_1];
} di_block_q8_1;

/* 16 sub-blocks of 16: x = d * sc * q - dmin * m, sc/m 4 bits each
 * (scales[i] = sc | m << 4), q 2 bits. */
typedef struct di_block_q2_K {
    uint8_t scales[DI_QK_K / 16];
    uint8_t qs[DI_QK_K / 4];
    uint16_t d;
    uint16_t dmin;
} di_block_q2_K;

/* 16 sub-blocks of 16: x = d * (sc - 32) * (q - (hbit ? 0 : 4)), sc 6 bits
 * packed in 12 bytes, q 2 low bits in qs and 1 high bit in hmask. */
typedef struct di_block_q3_K {
    uint8_t hmask[DI_QK_K / 8];
    uint8_t qs[DI_QK_K / 4];
    uint8_t scales[12];
    uint16_t d;
} di_block_q3_K;

/* 8 sub-blocks of 32: x = d * sc * q - dmin * m, sc/m 6 bits packed in 12
 * bytes, q 4 bits. */
typedef struct di_block_q4_K {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[DI_K_SCALE_SIZE];
    uint8_t qs[DI_QK_K / 2];
} di_block_q4_K;

/* As Q4_K with a fifth bit per element in qh. */
typedef struct di_block_q5_K {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[DI_K_SCALE_SIZE];
    uint8_t qh[DI_QK_K / 8];
    uint8_t qs[DI_QK_K / 2];
} di_block_q5_K;

/* 16 sub-blocks of 16: x = d * sc * (q - 32), sc int8, q 6 bits (4 in ql,
 * 2 in qh). */
typedef struct di_block_q6_K {
    uint8_t ql[DI_QK_K / 2];
    uint8_t qh[DI_QK_K / 4];
    int8_t scales[DI_QK_K / 16];
    uint16_t d;
} di_block_q6_K;

/* Activation format for K-quant dot products: x = d * q with an f32 scale;
 * bsums[i] = sum of q over the i-th 16 elements. */
typedef struct di_block_q8_K {
    float d;
    int8_t qs[DI_QK_K];
    int16_t bsums[DI_QK_K / 16];
} di_block_q8_K;

/* ggml MXFP4: e is an e8m0 scale byte, qs packs e2m1 codes with element j
 * in the low nibble and element j + 16 in the high nibble of qs[j] (the Q4_0
 * order, not the interleaved HF order; see mxfp4.h). */
typedef struct di_block_mxfp4 {
    uint8_t e;
    uint8_t qs[DI_QK_MXFP4 / 2];
} di_block_mxfp4;

/* Plain element types (half.c). */
void di_quant_f32_to_float(const void *src, float *dst, int64_t n);
void di_quant_f32_from_float(const float *src, void *dst, int64_t n);
void di_quant_f16_to_float(const void *src, float *dst, int64_t n);
void di_quant_f16_from_float(const float *src, void *dst, int64_t n);
void di_quant_bf16_to_float(const void *src, float *dst, int64_t n);
void di_quant_bf16_from_float(const float *src, void *dst, int64_t n);
void di_quant_f64_to_float(const void *src, float *dst, int64_t n);
void di_quant_i8_to_float(const void *src, float *dst, int64_t n);
void di_quant_i16_to_float(const void *src, float *dst, int64_t n);
void di_quant_i32_to_float(const void *src, float *dst, int64_t n);
void di_quant_i64_to_float(const void *src, float *dst, int64_t n);
void di_quant_u8_to_float(const void *src, float *dst, int64_t n);
void di_quant_bool_to_float(const void *src, float *dst, int64_t n);

/* Legacy 32-element blocks (quant_legacy.c). The quantizers reproduce
 * ggml's *_ref quantizers (and so gguf.quants.quantize) bit for bit. */
void di_quant_q4_0_to_float(const void *src, float *dst, int64_t n);
void di_quant_q4_0_from_float(const float *src, void *dst, int64_t n);
void di_quant_q4_1_to_float(const void *src, float *dst, int64_t n);
void di_quant_q4_1_from_float(const float *src, void *dst, int64_t n);
void di_quant_q5_0_to_float(const void *src, float *dst, int64_t n);
void di_quant_q5_0_from_float(const float *src, void *dst, int64_t n);
void di_quant_q5_1_to_float(const void *src, float *dst, int64_t n);
void di_quant_q5_1_from_float(const float *src, void *dst, int64_t n);
void di_quant_q8_0_to_float(const void *src, float *dst, int64_t n);
void di_quant_q8_0_from_float(const float *src, void *dst, int64_t n);
void di_quant_q8_1_to_float(const void *src, float *dst, int64_t n);
void di_quant_q8_1_from_float(const float *src, void *dst, int64_t n);

/* K-quants (quant_k.c, quant_k_quantize.c). */
void di_quant_q2_K_to_float(const void *src, float *dst, int64_t n);
void di_quant_q3_K_to_float(const void *src, float *dst, int64_t n);
void di_quant_q4_K_to_float(const void *src, float *dst, int64_t n);
void di_quant_q4_K_from_float(const float *src, void *dst, int64_t n);
void di_quant_q5_K_to_float(const void *src, float *dst, int64_t n);
void di_quant_q6_K_to_float(const void *src, float *dst, int64_t n);
void di_quant_q6_K_from_float(const float *src, void *dst, int64_t n);
void di_quant_q8_K_to_float(const void *src, float *dst, int64_t n);
void di_quant_q8_K_from_float(const float *src, void *dst, int64_t n);
/* The 6-bit scale and min of sub-block j (0..7) of a Q4_K / Q5_K block from
 * its 12 packed scale bytes. */
void di_quant_k4_scale_min(const uint8_t *scales, int j, uint8_t *sc, uint8_t *m);

/* FP8 elements (fp8.c) and ggml MXFP4 blocks (mxfp4.c). */
void di_quant_e4m3_to_float(const void *src, float *dst, int64_t n);
void di_quant_e4m3_from_float(const float *src, void *dst, int64_t n);
void di_quant_e8m0_to_float(const void *src, float *dst, int64_t n);
void di_quant_mxfp4_to_float(const void *src, float *dst, int64_t n);
void di_quant_mxfp4_from_float(const float *src, void *dst, int64_t n);

#endif
