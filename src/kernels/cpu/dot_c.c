/* The portable dispatch table: plain C, no intrinsics. It is the fallback
 * on CPUs without AVX2 and the second opinion in tests. Every dot keeps 8
 * running sums (element i goes to sum i % 8) combined in a fixed tree, so a
 * fused quant dot that dequantizes 32 or 256 elements at a time and feeds the
 * same sums equals dot_f32 of the dequantized row bit for bit. */
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/half.h"
#include "kernels/cpu/quant_blocks.h"
#include "tensor/fp8.h"
#include "tensor/half.h"

#include <math.h>
#include "kernels/cpu/gemm_q8.h"

#define LANES 8

typedef struct acc8 {
    float s[LANES];
} acc8;

/* Adds a[i]*b[i] for n (a multiple of LANES) elements. */
static void acc8_add(acc8 *acc, const float *a, const float *b, int64_t n) {
    for (int64_t i = 0; i < n; i += LANES)
        for (int j = 0; j < LANES; j++) acc->s[j] += a[i + j] * b[i + j];
}

static float acc8_sum(const acc8 *acc) {
    const float *s = acc->s;
    return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
}

static float dot_f32_c(const float *a, const float *b, int64_t n) {
    acc8 acc = {{0}};
    int64_t n8 = n - n % LANES;
    acc8_add(&acc, a, b, n8);
    float s = acc8_sum(&acc);
    for (int64_t i = n8; i < n; i++) s += a[i] * b[i];
    return s;
}

static void dot_f32_x4_c(const float *w, int64_t ldw, const float *x, int64_t n, float out[4]) {
    for (int j = 0; j < 4; j++) out[j] = dot_f32_c(w + j * ldw, x, n);
}

/* ---- dequantizers ---- */

static void dequant_f32(const void *w, float *dst, int64_t n) {
    const float *src = w;
    for (int64_t i = 0; i < n; i++) dst[i] = src[i];
}

static void dequant_f16(const void *w, float *dst, int64_t n) {
    const uint16_t *src = w;
    for (int64_t i = 0; i < n; i++) dst[i] = di_half_to_float(src[i]);
}

static void dequant_bf16(const void *w, float *dst, int64_t n) {
    const uint16_t *src = w;
    for (int64_t i = 0; i < n; i++) dst[i] = di_bf16_to_f32(src[i]);
}

static void q4_0_block(const di_block_q4_0 *b, float *y) {
    float d = di_half_to_float(b->d);
    for (int j = 0; j < DI_QK / 2; j++) {
        y[j] = (float)((b->qs[j] & 0xF) - 8) * d;
        y[j + DI_QK / 2] = (float)((b->qs[j] >> 4) - 8) * d;
    }
}

static void q4_1_block(const di_block_q4_1 *b, float *y) {
    float d = di_half_to_float(b->d), m = di_half_to_float(b->m);
    for (int j = 0; j < DI_QK / 2; j++) {
        y[j] = (float)(b->qs[j] & 0xF) * d + m;
        y[j + DI_QK / 2] = (float)(b->qs[j] >> 4) * d + m;
    }
}

static void q8_0_block(const di_block_q8_0 *b, float *y) {
    float d = di_half_to_float(b->d);
    for (int j = 0; j < DI_QK; j++) y[j] = (float)b->qs[j] * d;
}

static void q6_K_block(const di_block_q6_K *b, float *y) {
    di_q6_K_block_to_float(b, di_half_to_float(b->d), y);
}

#define DEFINE_BLOCKWISE(name, block_t, QK, block_fn)                          \
    static void dequant_##name(const void *w, float *dst, int64_t n) {         \
        const block_t *b = w;                                                  \
        for (int64_t i = 0; i < n / (QK); i++) block_fn(&b[i], dst + i * (QK)); \
    }                                                                          \
    static float dot_##name(const void *w, const float *x, int64_t n) {        \
        const block_t *b = w;                                                  \
        float tmp[QK]; /* one dequantized block */                             \
        acc8 acc = {{0}};                                                      \
        for (int64_t i = 0; i < n / (QK); i++) {                               \
            block_fn(&b[i], tmp);                                              \
            acc8_add(&acc, tmp, x + i * (QK), (QK));                           \
        }                                                                      \
        return acc8_sum(&acc);                                                 \
    }

DEFINE_BLOCKWISE(q4_0, di_block_q4_0, DI_QK, q4_0_block)
DEFINE_BLOCKWISE(q4_1, di_block_q4_1, DI_QK, q4_1_block)
DEFINE_BLOCKWISE(q8_0, di_block_q8_0, DI_QK, q8_0_block)
DEFINE_BLOCKWISE(q6_K, di_block_q6_K, DI_QK_K, q6_K_block)

static float dot_f32_row(const void *w, const float *x, int64_t n) { return dot_f32_c(w, x, n); }

/* 16-bit float rows (f16, bf16): dequantize a chunk, then the canonical
 * 8-lane accumulation, so the fused dot equals dot_f32(dequant(w), x). */
static float dot_half_row(const uint16_t *src, const float *x, int64_t n,
                          void (*dequant)(const void *, float *, int64_t), float (*one)(uint16_t)) {
    float tmp[LANES * 32]; /* dequantized chunk, a multiple of LANES */
    const int64_t chunk = (int64_t)(sizeof tmp / sizeof tmp[0]);
    acc8 acc = {{0}};
    int64_t n8 = n - n % LANES, i = 0;
    for (; i < n8; i += chunk) {
        int64_t m = n8 - i < chunk ? n8 - i : chunk;
        dequant(src + i, tmp, m);
        acc8_add(&acc, tmp, x + i, m);
    }
    float s = acc8_sum(&acc);
    for (i = n8; i < n; i++) s += one(src[i]) * x[i];
    return s;
}

static float dot_f16_row(const void *w, const float *x, int64_t n) {
    return dot_half_row(w, x, n, dequant_f16, di_half_to_float);
}

static float dot_bf16_row(const void *w, const float *x, int64_t n) {
    return dot_half_row(w, x, n, dequant_bf16, di_bf16_to_f32);
}

static void f16_to_f32_c(const uint16_t *src, float *dst, int64_t n) { dequant_f16(src, dst, n); }

static void f32_to_f16_c(const float *src, uint16_t *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = di_float_to_half(src[i]);
}

/* ---- DeepSeek FP8 block and MXFP4 rows (exact; see kernels.h) ---- */

static void fp8_row_c(const uint8_t *w, const float *scale, int32_t block, float *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = di_e4m3_to_f32(w[i]) * scale[i / block];
}

static void mxfp4_row_c(const uint8_t *w, const uint8_t *e8m0, float *dst, int64_t n) {
    for (int64_t g = 0; g < n / 32; g++) {
        float scale = ldexpf(1.0f, (int)e8m0[g] - 127); /* e8m0 < 255: exact */
        for (int j = 0; j < 16; j++) {
            uint8_t b = w[g * 16 + j];
            dst[g * 32 + 2 * j] = di_e2m1_to_f32(b & 15) * scale;
            dst[g * 32 + 2 * j + 1] = di_e2m1_to_f32(b >> 4) * scale;
        }
    }
}

#define C_FLOAT_ENTRIES \
    .dot_f32 = dot_f32_c, \
    .dot_f32_x4 = dot_f32_x4_c, \
    .dequant = { \
        [DI_DTYPE_F32] = dequant_f32, \
        [DI_DTYPE_F16] = dequant_f16, \
        [DI_DTYPE_BF16] = dequant_bf16, \
        [DI_DTYPE_Q4_0] = dequant_q4_0, \
        [DI_DTYPE_Q4_1] = dequant_q4_1, \
        [DI_DTYPE_Q8_0] = dequant_q8_0, \
        [DI_DTYPE_Q6_K] = dequant_q6_K, \
    }, \
    .dot = { \
        [DI_DTYPE_F32] = dot_f32_row, \
        [DI_DTYPE_F16] = dot_f16_row, \
        [DI_DTYPE_BF16] = dot_bf16_row, \
        [DI_DTYPE_Q4_0] = dot_q4_0, \
        [DI_DTYPE_Q4_1] = dot_q4_1, \
        [DI_DTYPE_Q8_0] = dot_q8_0, \
        [DI_DTYPE_Q6_K] = dot_q6_K, \
    }, \
    .f16_to_f32 = f16_to_f32_c, \
    .fp8_row = fp8_row_c, \
    .mxfp4_row = mxfp4_row_c, \
    .f32_to_f16 = f32_to_f16_c

/* The exact table and its int8 activation twin (the portable statement of
 * that path, gemm_q8_c.c). */
extern const di_cpu_kernels di_cpu_kernels_c_q8;
const di_cpu_kernels di_cpu_kernels_c = {
    .name = "c", C_FLOAT_ENTRIES, .exact = &di_cpu_kernels_c, .q8 = &di_cpu_kernels_c_q8,
};
const di_cpu_kernels di_cpu_kernels_c_q8 = {
    .name = "c-q8", C_FLOAT_ENTRIES, DI_GEMM_Q8_ENTRIES(c), .exact = &di_cpu_kernels_c, .q8 = &di_cpu_kernels_c_q8,
};
