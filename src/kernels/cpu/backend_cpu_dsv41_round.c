/* The CPU backend's round_rows (kernels/backend.h): V4.1's activation
 * casts, the DeepInfer-faithful numerics' bf16 and fp8act round trips.
 * The same functions as model/deepseek_v41_quant.c's dsv41_round_bf16 /
 * dsv41_round_fp8 (the KV record codecs there keep their own copy; the
 * DeepSeek goldens pin both to the same bits). */
#include "kernels/cpu/backend_cpu_dsv4.h"
#include "tensor/block_scale.h"

#include "tensor/fp8.h"
#include "tensor/half.h"

#include <math.h>
#include <string.h>



#define FP8_MIN_AMAX 1e-4f


/* one block of n through e4m3 with scale sc */
static void fp8_block(float *x, int32_t n, float sc) {
    float inv = 1.0f / sc;
    for (int32_t i = 0; i < n; i++) {
        float v = x[i] * inv;
        v = v > DI_E4M3_MAX ? DI_E4M3_MAX : v < -DI_E4M3_MAX ? -DI_E4M3_MAX : v;
        x[i] = di_e4m3_round(v) * sc;
    }
}

static void round_fp8(float *x, int64_t n) {
    for (int64_t b = 0; b < n; b += 32) {
        int32_t len = n - b < 32 ? (int32_t)(n - b) : 32;
        float a = di_block_amax(x + b, len);
        fp8_block(x + b, len, di_pow2_scale(a > FP8_MIN_AMAX ? a : FP8_MIN_AMAX, DI_E4M3_MAX));
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
