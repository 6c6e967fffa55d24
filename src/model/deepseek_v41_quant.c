/* The DeepInfer-faithful numerics of V4.1: the casts DeepInfer 0.1.0 applies
 * to activations and KV, written from their references:
 *
 *   bf16        round to nearest even (torch .to(bfloat16))
 *   fp8act      tile_kernels torch/cast.py:cast(fmt e4m3, block (1, 32),
 *               round_sf=True): amax per 32 clamped at 1e-4, scale =
 *               amax / 448 rounded UP to a power of two (bits + 0x7fffff
 *               & 0x7f800000), q = e4m3(clamp(x * (1 / scale), +-448))
 *   MXFP8 KV    the same cast per 32 of the 512 dims (cache_common.py
 *               V41_FORMAT), 528 bytes a token; read back as bf16
 *   FP4 KV      cache_common.py:ref_cast_from_bf16 for V41_FP4_FORMAT:
 *               per 16, sf = e4m3(min(max(amax, 2^-9 * 6) / 6, 448)),
 *               q = e2m1(x * (1 / sf)) (torch/cast.py:convert_to_e2m1_bits,
 *               round half to even), low nibble = even element; 288 bytes
 *   FP4 index   FP4_INDEX_KV_FORMAT: e2m1 with a power-of-two scale per 32
 *               (amax clamped at 6 * 2^-126, scale rounded up as fp8act)
 *
 * Every function is elementwise over its own blocks, so batch invariant. */
#include "model/deepseek_v41_internal.h"
#include "tensor/block_scale.h"

#include "model/deepseek_v41_luts.h"
#include "tensor/fp8.h"
#include "tensor/half.h"

#include <math.h>
#include <string.h>

void dsv41_round_bf16(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = di_bf16_to_f32(di_f32_to_bf16(x[i]));
}



/* e2m1 code of v (already scaled), round half to even in each spacing. */
static uint8_t e2m1_code(float v) {
    float m = fabsf(v);
    if (!(m <= 6.0f)) m = 6.0f; /* NaN and inf go to 6 as the reference */
    float c;
    if (m < 2.0f) c = rintf(m * 2.0f);
    else if (m < 4.0f) c = rintf(m) + 2.0f;
    else c = rintf(m * 0.5f) + 4.0f;
    return (uint8_t)((uint8_t)c | (signbit(v) ? 8u : 0u));
}

#define FP8_MIN_AMAX 1e-4f
#define FP4I_MIN_AMAX (6.0f * 1.17549435e-38f)   /* 6 * 2^-126 */
#define NVFP4_MIN_AMAX (6.0f * 0.001953125f)     /* e4m3 min subnormal 2^-9, times 6 */


/* one block of n through e4m3 with scale sc; out codes optional */
static void fp8_block(float *x, int32_t n, float sc, uint8_t *codes) {
    float inv = 1.0f / sc;
    for (int32_t i = 0; i < n; i++) {
        float v = x[i] * inv;
        v = v > DI_E4M3_MAX ? DI_E4M3_MAX : v < -DI_E4M3_MAX ? -DI_E4M3_MAX : v;
        if (codes) {
            uint8_t q = di_f32_to_e4m3(v);
            codes[i] = q;
            x[i] = E4M3_LUT[q] * sc;
        } else {
            x[i] = di_e4m3_round(v) * sc;
        }
    }
}

void dsv41_round_fp8(float *x, int64_t n) {
    for (int64_t b = 0; b < n; b += 32) {
        int32_t len = n - b < 32 ? (int32_t)(n - b) : 32;
        float a = di_block_amax(x + b, len);
        fp8_block(x + b, len, di_pow2_scale(a > FP8_MIN_AMAX ? a : FP8_MIN_AMAX, DI_E4M3_MAX), NULL);
    }
}

void dsv41_round_fp4_index(float *x, int64_t n) {
    for (int64_t b = 0; b < n; b += 32) {
        int32_t len = n - b < 32 ? (int32_t)(n - b) : 32;
        float a = di_block_amax(x + b, len);
        float sc = di_pow2_scale(a > FP4I_MIN_AMAX ? a : FP4I_MIN_AMAX, DI_E2M1_MAX), inv = 1.0f / sc;
        for (int32_t i = 0; i < len; i++) x[b + i] = E2M1_LUT[e2m1_code(x[b + i] * inv)] * sc;
    }
}

int32_t dsv41_mxfp8_bytes(int32_t n) { return n + n / 32; }
int32_t dsv41_nvfp4_bytes(int32_t n) { return n / 2 + n / 16; }
int32_t dsv41_fp4i_bytes(int32_t n) { return n / 2 + n / 32; }

void dsv41_mxfp8_encode(const float *x, int32_t n, uint8_t *out) {
    float tmp[32];
    for (int32_t b = 0; b < n / 32; b++) {
        memcpy(tmp, x + 32 * b, sizeof tmp);
        float a = di_block_amax(tmp, 32);
        float sc = di_pow2_scale(a > FP8_MIN_AMAX ? a : FP8_MIN_AMAX, DI_E4M3_MAX);
        fp8_block(tmp, 32, sc, out + 32 * b);
        out[n + b] = (uint8_t)(di_f32_bits(sc) >> 23);
    }
}

void dsv41_mxfp8_decode(const uint8_t *in, int32_t n, float *out) {
    for (int32_t b = 0; b < n / 32; b++) {
        float sc = di_e8m0_to_f32(in[n + b]);
        for (int32_t i = 0; i < 32; i++) out[32 * b + i] = E4M3_LUT[in[32 * b + i]] * sc;
    }
    dsv41_round_bf16(out, n); /* read back as bf16 */
}

void dsv41_nvfp4_encode(const float *x, int32_t n, uint8_t *out) {
    for (int32_t b = 0; b < n / 16; b++) {
        const float *v = x + 16 * b;
        float a = di_block_amax(v, 16);
        a = a > NVFP4_MIN_AMAX ? a : NVFP4_MIN_AMAX;
        float s = a * (1.0f / DI_E2M1_MAX);
        s = s < DI_E4M3_MAX ? s : DI_E4M3_MAX;
        uint8_t sq = di_f32_to_e4m3(s);
        float inv = 1.0f / di_e4m3_to_f32(sq);
        for (int32_t i = 0; i < 16; i += 2)
            out[8 * b + i / 2] = (uint8_t)(e2m1_code(v[i] * inv) | (e2m1_code(v[i + 1] * inv) << 4));
        out[n / 2 + b] = sq;
    }
}

void dsv41_nvfp4_decode(const uint8_t *in, int32_t n, float *out) {
    for (int32_t b = 0; b < n / 16; b++) {
        float sc = E4M3_LUT[in[n / 2 + b]];
        for (int32_t i = 0; i < 16; i += 2) {
            uint8_t p = in[8 * b + i / 2];
            out[16 * b + i] = E2M1_LUT[p & 15u] * sc;
            out[16 * b + i + 1] = E2M1_LUT[p >> 4] * sc;
        }
    }
    dsv41_round_bf16(out, n);
}

void dsv41_fp4i_encode(const float *x, int32_t n, uint8_t *out) {
    for (int32_t b = 0; b < n / 32; b++) {
        const float *v = x + 32 * b;
        float a = di_block_amax(v, 32);
        float sc = di_pow2_scale(a > FP4I_MIN_AMAX ? a : FP4I_MIN_AMAX, DI_E2M1_MAX), inv = 1.0f / sc;
        for (int32_t i = 0; i < 32; i += 2)
            out[16 * b + i / 2] = (uint8_t)(e2m1_code(v[i] * inv) | (e2m1_code(v[i + 1] * inv) << 4));
        out[n / 2 + b] = (uint8_t)(di_f32_bits(sc) >> 23);
    }
}

void dsv41_fp4i_decode(const uint8_t *in, int32_t n, float *out) {
    for (int32_t b = 0; b < n / 32; b++) {
        float sc = di_e8m0_to_f32(in[n / 2 + b]);
        for (int32_t i = 0; i < 32; i += 2) {
            uint8_t p = in[16 * b + i / 2];
            out[32 * b + i] = E2M1_LUT[p & 15u] * sc;
            out[32 * b + i + 1] = E2M1_LUT[p >> 4] * sc;
        }
    }
}
