/* 16-bit floats: IEEE binary16 (f16) and bfloat16 (bf16) <-> f32.
 *
 * These are static inline because every dequantizer calls them per block
 * scale and the kernels per element; they are plain bit manipulation, so the
 * reference and the fast paths share them. Conversions are exact towards f32
 * and round to nearest, ties to even, towards the 16-bit types. */
#ifndef DI_TENSOR_HALF_H
#define DI_TENSOR_HALF_H

#include <stdint.h>
#include <string.h>

static inline uint32_t di_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float di_f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* binary16 layout: 1 sign, 5 exponent (bias 15), 10 mantissa bits. */
#define DI_F16_EXP_MASK 0x7c00u
#define DI_F16_MANT_MASK 0x03ffu
#define DI_F16_QUIET_BIT 0x0200u
/* f32 exponent bias minus f16 exponent bias: rebiases a normal exponent. */
#define DI_F16_REBIAS (127 - 15)

static inline float di_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h & DI_F16_EXP_MASK) >> 10;
    uint32_t mant = h & DI_F16_MANT_MASK;
    if (exp == 0x1f) /* inf or NaN: keep the payload in the top mantissa bits */
        return di_f32_from_bits(sign | 0x7f800000u | (mant << 13));
    if (exp != 0)
        return di_f32_from_bits(sign | ((exp + DI_F16_REBIAS) << 23) | (mant << 13));
    if (mant == 0) return di_f32_from_bits(sign);
    /* Subnormal: mant * 2^-24 is exact in f32 (24-bit mantissa). */
    float v = (float)mant * 0x1p-24f;
    return sign ? -v : v;
}

static inline uint16_t di_f32_to_f16(float f) {
    uint32_t u = di_f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) /* NaN: quiet it and keep the top payload bits */
        return (uint16_t)(sign | DI_F16_EXP_MASK | DI_F16_QUIET_BIT | ((a >> 13) & DI_F16_MANT_MASK));
    /* 65520 = max f16 (65504) + half an ulp: from here on RNE gives inf. */
    if (a >= 0x477ff000u) return (uint16_t)(sign | DI_F16_EXP_MASK);
    if (a < 0x38800000u) {
        /* Below the smallest normal f16 (2^-14): the result is a subnormal
         * m * 2^-24. Adding 0.5 makes the FPU do the RNE at the right bit:
         * 0.5 has ulp 2^-24 in f32, exactly the f16 subnormal quantum. */
        float t = di_f32_from_bits(a) + 0.5f;
        return (uint16_t)(sign | (di_f32_bits(t) - di_f32_bits(0.5f)));
    }
    /* Normal: rebias the exponent, then round the 13 dropped bits to nearest
     * even; a carry out of the mantissa correctly bumps the exponent. */
    uint32_t odd = (a >> 13) & 1u;
    a += ((uint32_t)(-DI_F16_REBIAS) << 23) + 0xfffu + odd;
    return (uint16_t)(sign | (a >> 13));
}

static inline float di_bf16_to_f32(uint16_t b) {
    return di_f32_from_bits((uint32_t)b << 16);
}

/* Same rule as ggml_compute_fp32_to_bf16 (and gguf.quants.BF16): NaNs are
 * made quiet by setting bit 6 of the result, everything else rounds to
 * nearest even (overflow rounds to inf). */
static inline uint16_t di_f32_to_bf16(float f) {
    uint32_t u = di_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

#endif
