/* e4m3fn, e8m0 and e2m1 element conversions (see fp8.h for the formats).
 * ml_dtypes (float8_e4m3fn, float8_e8m0fnu, float4_e2m1fn) is the oracle in
 * tests/tensor/test_dtype.c. */
#include "tensor/fp8.h"

#include "tensor/half.h"
#include "tensor/quant.h"

#include <string.h>

#define E4M3_EXP_BIAS 7
#define E4M3_MANT_BITS 3
/* f32 bias minus e4m3 bias: rebiases a normal exponent. */
#define E4M3_REBIAS (127 - E4M3_EXP_BIAS)
/* Subnormal quantum 2^-9 = 2^(1 - bias - mantissa bits). */
#define E4M3_SUBNORMAL_QUANTUM 0x1p-9f
#define F32_MIN_E4M3_NORMAL_BITS 0x3c800000u /* 2^-6 */
#define F32_E4M3_MAX_BITS 0x43e00000u        /* 448 */
#define F32_QUIET_NAN_BITS 0x7fc00000u
/* 2^14 has an f32 ulp of 2^-9, the e4m3 subnormal quantum. */
#define E4M3_SUBNORMAL_MAGIC 0x1p14f

float di_e4m3_to_f32(uint8_t b) {
    uint32_t sign = (uint32_t)(b & 0x80u) << 24;
    uint32_t exp = (b >> E4M3_MANT_BITS) & 0x0fu;
    uint32_t mant = b & 0x07u;
    if ((b & 0x7fu) == DI_E4M3_NAN_BITS) return di_f32_from_bits(sign | F32_QUIET_NAN_BITS);
    if (exp == 0) {
        float v = (float)mant * E4M3_SUBNORMAL_QUANTUM;
        return sign ? -v : v;
    }
    return di_f32_from_bits(sign | (exp + E4M3_REBIAS) << 23 | mant << (23 - E4M3_MANT_BITS));
}

uint8_t di_f32_to_e4m3(float f) {
    uint32_t u = di_f32_bits(f);
    uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint8_t)(sign | DI_E4M3_NAN_BITS);
    if (a >= F32_E4M3_MAX_BITS) return (uint8_t)(sign | DI_E4M3_MAX_BITS);
    if (a < F32_MIN_E4M3_NORMAL_BITS) {
        /* Subnormal (or zero): let the FPU round |f| to a multiple of 2^-9,
         * ties to even, by adding a number whose ulp is 2^-9. A result of 8
         * quanta is the smallest normal, code 0x08, so no special case. */
        float t = di_f32_from_bits(a) + E4M3_SUBNORMAL_MAGIC;
        return (uint8_t)(sign | (di_f32_bits(t) - di_f32_bits(E4M3_SUBNORMAL_MAGIC)));
    }
    /* Normal: round the 20 dropped mantissa bits to nearest even (a carry
     * moves into the exponent, as it should), then rebias. Below 448 the
     * result stays <= 0x7e. */
    uint32_t drop = 23 - E4M3_MANT_BITS;
    a += ((1u << (drop - 1)) - 1u) + ((a >> drop) & 1u);
    return (uint8_t)(sign | ((a >> drop) - ((uint32_t)E4M3_REBIAS << E4M3_MANT_BITS)));
}

float di_e8m0_to_f32(uint8_t b) {
    if (b == DI_E8M0_NAN_BITS) return di_f32_from_bits(F32_QUIET_NAN_BITS);
    /* 2^-127 is below the f32 normal range: it is the subnormal with only
     * mantissa bit 22 set. Every other code is a normal exponent field. */
    if (b == 0) return di_f32_from_bits(0x00400000u);
    return di_f32_from_bits((uint32_t)b << 23);
}

float di_e2m1_to_f32(uint8_t code) {
    static const float MAGNITUDE[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    float v = MAGNITUDE[code & 7u];
    return (code & 8u) ? -v : v;
}

void di_quant_e4m3_to_float(const void *src, float *dst, int64_t n) {
    const uint8_t *p = src;
    for (int64_t i = 0; i < n; i++) dst[i] = di_e4m3_to_f32(p[i]);
}

void di_quant_e4m3_from_float(const float *src, void *dst, int64_t n) {
    uint8_t *p = dst;
    for (int64_t i = 0; i < n; i++) p[i] = di_f32_to_e4m3(src[i]);
}

void di_quant_e8m0_to_float(const void *src, float *dst, int64_t n) {
    const uint8_t *p = src;
    for (int64_t i = 0; i < n; i++) dst[i] = di_e8m0_to_f32(p[i]);
}
