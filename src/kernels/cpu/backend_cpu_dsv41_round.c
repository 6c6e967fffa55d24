/* The CPU backend's round_rows (kernels/backend.h): V4.1's activation
 * casts, the DeepInfer-faithful numerics' bf16 and fp8act round trips.
 * The same functions as model/deepseek_v41_quant.c's dsv41_round_bf16 /
 * dsv41_round_fp8 (the KV record codecs there keep their own copy; the
 * DeepSeek goldens pin both to the same bits). */
#include "kernels/cpu/backend_cpu_dsv4.h"

#include "tensor/fp8.h"
#include "tensor/half.h"

#include <math.h>
#include <string.h>

static float bits_f(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint32_t f_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* amax / qmax rounded up to a power of two, as the reference's bit trick. */
static float pow2_scale(float amax, float qmax) {
    float ds = amax / qmax;
    return bits_f((f_bits(ds) + 0x007fffffu) & 0x7f800000u);
}

static float block_amax(const float *x, int32_t n) {
    float a = 0.0f;
    for (int32_t i = 0; i < n; i++) a = fabsf(x[i]) > a ? fabsf(x[i]) : a;
    return a;
}

#define FP8_MIN_AMAX 1e-4f

/* v (|v| <= 448, finite) rounded to the nearest e4m3 value, ties to even:
 * the value di_e4m3_to_f32(di_f32_to_e4m3(v)) gives, without the codes
 * (inlined and vectorizable; tests compare the two on every f32 pattern
 * of a sweep). */
static inline float e4m3_round(float v) {
    uint32_t u = f_bits(v), s = u & 0x80000000u, a = u & 0x7fffffffu;
    if (a < 0x3c800000u) { /* below 2^-6: multiples of 2^-9 by the FPU's RNE */
        float t = bits_f(a) + 0x1p14f;
        return bits_f(f_bits(t - 0x1p14f) | s);
    }
    a += 0x7ffffu + ((a >> 20) & 1u); /* drop 20 mantissa bits, ties to even */
    return bits_f((a & ~0xfffffu) | s);
}

/* one block of n through e4m3 with scale sc */
static void fp8_block(float *x, int32_t n, float sc) {
    float inv = 1.0f / sc;
    for (int32_t i = 0; i < n; i++) {
        float v = x[i] * inv;
        v = v > DI_E4M3_MAX ? DI_E4M3_MAX : v < -DI_E4M3_MAX ? -DI_E4M3_MAX : v;
        x[i] = e4m3_round(v) * sc;
    }
}

static void round_fp8(float *x, int64_t n) {
    for (int64_t b = 0; b < n; b += 32) {
        int32_t len = n - b < 32 ? (int32_t)(n - b) : 32;
        float a = block_amax(x + b, len);
        fp8_block(x + b, len, pow2_scale(a > FP8_MIN_AMAX ? a : FP8_MIN_AMAX, DI_E4M3_MAX));
    }
}

void di_cpu_round_rows(const di_backend *be, di_round_kind kind, float *x, int64_t n_rows, int64_t ldx, int64_t n,
                       di_threadpool *pool) {
    (void)be, (void)pool; /* elementwise and cheap next to the linears: the caller's thread, as before */
    for (int64_t r = 0; r < n_rows; r++) {
        float *row = x + r * ldx;
        if (kind == DI_ROUND_FP8ACT) round_fp8(row, n);
        else
            for (int64_t i = 0; i < n; i++) row[i] = di_bf16_to_f32(di_f32_to_bf16(row[i]));
    }
}
