/* 8-bit and 4-bit float element formats used by the DeepSeek checkpoints
 * and by MXFP4:
 *
 *   e4m3  OCP "E4M3FN" (ml_dtypes float8_e4m3fn, torch float8_e4m3fn):
 *         1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities;
 *         S.1111.111 is NaN; largest finite 448; subnormals m * 2^-9.
 *   e8m0  OCP scale byte (ml_dtypes float8_e8m0fnu): 2^(b-127), b = 0xff is
 *         NaN; no sign, no zero.
 *   e2m1  OCP FP4 (ml_dtypes float4_e2m1fn): 1 sign, 2 exponent, 1 mantissa
 *         bit: +-{0, 0.5, 1, 1.5, 2, 3, 4, 6}; the sign is bit 3.
 *
 * Conversions to f32 are exact. The block-scaled layouts built on these live
 * in fp8_block.h and mxfp4.h. */
#ifndef DI_TENSOR_FP8_H
#define DI_TENSOR_FP8_H

#include <stdint.h>

#define DI_E4M3_MAX 448.0f      /* largest finite e4m3fn value */
#define DI_E4M3_MAX_BITS 0x7eu  /* its code: exponent 15, mantissa 6 */
#define DI_E4M3_NAN_BITS 0x7fu  /* canonical NaN (sign bit clear) */
#define DI_E8M0_BIAS 127
#define DI_E8M0_NAN_BITS 0xffu
#define DI_E2M1_MAX 6.0f

float di_e4m3_to_f32(uint8_t b);
/* Round to nearest even with saturation: finite values beyond +-448 and
 * infinities become +-448 (the "satfinite" conversion quantizers want); NaN
 * becomes NaN with its sign; -0 stays -0. */
uint8_t di_f32_to_e4m3(float f);

/* 2^(b-127); b = 0 gives 2^-127 (an f32 subnormal), 0xff gives NaN. */
float di_e8m0_to_f32(uint8_t b);

/* Value of an e2m1 code (low 4 bits of code; higher bits ignored). */
float di_e2m1_to_f32(uint8_t code);

#endif
