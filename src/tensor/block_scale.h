/* The block-scale helpers of DeepSeek V4.1's activation and cache casts
 * (model/deepseek_v41_quant.c, kernels/cpu/backend_cpu_dsv41_round.c): a
 * block's largest |x|, amax / qmax rounded up to a power of two (the
 * reference's bit trick: add 2^23 - 1 to the float's bits and keep the
 * exponent), and a value rounded to e4m3. Header-only: both sides inline
 * the same operations. */
#ifndef DI_TENSOR_BLOCK_SCALE_H
#define DI_TENSOR_BLOCK_SCALE_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "tensor/half.h"

static inline float di_block_amax(const float *x, int32_t n) {
    float a = 0.0f;
    for (int32_t i = 0; i < n; i++) a = fabsf(x[i]) > a ? fabsf(x[i]) : a;
    return a;
}

static inline float di_pow2_scale(float amax, float qmax) {
    float ds = amax / qmax, out;
    uint32_t u;
    memcpy(&u, &ds, 4);
    u = (u + 0x007fffffu) & 0x7f800000u;
    memcpy(&out, &u, 4);
    return out;
}

/* v (|v| <= 448, finite) rounded to the nearest e4m3 value, ties to even:
 * the value di_e4m3_to_f32(di_f32_to_e4m3(v)) gives, without the codes
 * (inlined and vectorizable; tests compare the two on every f32 pattern
 * of a sweep). */
static inline float di_e4m3_round(float v) {
    uint32_t u = di_f32_bits(v), s = u & 0x80000000u, a = u & 0x7fffffffu;
    if (a < 0x3c800000u) { /* below 2^-6: multiples of 2^-9 by the FPU's RNE */
        float t = di_f32_from_bits(a) + 0x1p14f;
        return di_f32_from_bits(di_f32_bits(t - 0x1p14f) | s);
    }
    a += 0x7ffffu + ((a >> 20) & 1u); /* drop 20 mantissa bits, ties to even */
    return di_f32_from_bits((a & ~0xfffffu) | s);
}

#endif
