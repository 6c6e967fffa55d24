/* Legacy ggml block formats: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1 (32 elements
 * per block, one f16 scale, optionally an f16 minimum).
 *
 * Bit-exactness: the dequantizers compute exactly the f32 operations
 * gguf.quants does (scale converted to f32, then multiply, then add), and the
 * quantizers follow ggml's quantize_row_*_ref, which gguf.quants.quantize
 * reproduces. Every multiply and add that the references round separately is
 * a separate C statement here: C only allows contracting a*b+c into an FMA
 * within one expression, so this keeps clang's default -ffp-contract=on from
 * changing a last bit. */
#include "tensor/half.h"
#include "tensor/quant.h"

#include <math.h>
#include <string.h>

#define Q4_OFFSET 8     /* Q4_0 stores q + 8 so that q in -8..7 fits a nibble */
#define Q5_OFFSET 16    /* Q5_0 stores q + 16 */
#define Q4_LEVELS 15    /* largest 4-bit code */
#define Q5_LEVELS 31    /* largest 5-bit code */
#define Q8_LEVELS 127.0f /* Q8 uses the symmetric range -127..127 */
#define NIBBLE 0x0f

/* Float -> int with a clamp; NaN gives lo. Casting an out-of-range or NaN
 * float to int is undefined behaviour in C, so every quantizer goes through
 * here instead of a bare cast. Truncates toward zero like the cast would. */
static inline int trunc_clamp(float v, int lo, int hi) {
    if (!(v >= (float)lo)) return lo;
    if (v >= (float)hi) return hi;
    return (int)v;
}

/* The element of largest magnitude, with its sign; on ties the first one,
 * as numpy's argmax of abs() and ggml's strict '<' scan both pick it. */
static float signed_absmax(const float *x, int n) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++) {
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    return max;
}

static void min_max(const float *x, int n, float *lo, float *hi) {
    float mn = x[0], mx = x[0];
    for (int j = 1; j < n; j++) {
        if (x[j] < mn) mn = x[j];
        if (x[j] > mx) mx = x[j];
    }
    *lo = mn;
    *hi = mx;
}

static inline float inverse_or_zero(float d) {
    return d != 0.0f ? 1.0f / d : 0.0f;
}

/* ---- Q4_0 ---------------------------------------------------------------- */

void di_quant_q4_0_to_float(const void *src, float *dst, int64_t n) {
    const uint8_t *p = src;
    for (int64_t b = 0; b < n / DI_QK4_0; b++, dst += DI_QK4_0) {
        di_block_q4_0 blk;
        memcpy(&blk, p + b * sizeof blk, sizeof blk);
        float d = di_f16_to_f32(blk.d);
        for (int j = 0; j < DI_QK4_0 / 2; j++) {
            dst[j] = d * (float)((blk.qs[j] & NIBBLE) - Q4_OFFSET);
            dst[j + DI_QK4_0 / 2] = d * (float)((blk.qs[j] >> 4) - Q4_OFFSET);
        }
    }
}

/* The element of largest magnitude maps to code 0 (q = -8) exactly, which
 * uses the asymmetric 4-bit range fully on the side where it matters. */
void di_quant_q4_0_from_float(const float *src, void *dst, int64_t n) {
    uint8_t *p = dst;
    for (int64_t b = 0; b < n / DI_QK4_0; b++, src += DI_QK4_0) {
        float d = signed_absmax(src, DI_QK4_0) / -(float)Q4_OFFSET;
        float id = inverse_or_zero(d);
        di_block_q4_0 blk;
        blk.d = di_f32_to_f16(d);
        for (int j = 0; j < DI_QK4_0 / 2; j++) {
            float x0 = src[j] * id;
            float x1 = src[j + DI_QK4_0 / 2] * id;
            x0 += (float)Q4_OFFSET + 0.5f;
            x1 += (float)Q4_OFFSET + 0.5f;
            int q0 = trunc_clamp(x0, 0, Q4_LEVELS);
            int q1 = trunc_clamp(x1, 0, Q4_LEVELS);
            blk.qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
        memcpy(p + b * sizeof blk, &blk, sizeof blk);
    }
}

/* ---- Q4_1 ---------------------------------------------------------------- */

void di_quant_q4_1_to_float(const void *src, float *dst, int64_t n) {
    const uint8_t *p = src;
    for (int64_t b = 0; b < n / DI_QK4_1; b++, dst += DI_QK4_1) {
        di_block_q4_1 blk;
        memcpy(&blk, p + b * sizeof blk, sizeof blk);
        float d = di_f16_to_f32(blk.d);
        float m = di_f16_to_f32(blk.m);
        for (int j = 0; j < DI_QK4_1 / 2; j++) {
            float y0 = d * (float)(blk.qs[j] & NIBBLE);
            float y1 = d * (float)(blk.qs[j] >> 4);
            dst[j] = y0 + m;
            dst[j + DI_QK4_1 / 2] = y1 + m;
        }
    }
}

void di_quant_q4_1_from_float(const float *src, void *dst, int64_t n) {
    uint8_t *p = dst;
    for (int64_t b = 0; b < n / DI_QK4_1; b++, src += DI_QK4_1) {
        float mn, mx;
        min_max(src, DI_QK4_1, &mn, &mx);
        float d = (mx - mn) / (float)Q4_LEVELS;
        float id = inverse_or_zero(d);
        di_block_q4_1 blk;
        blk.d = di_f32_to_f16(d);
        blk.m = di_f32_to_f16(mn);
        for (int j = 0; j < DI_QK4_1 / 2; j++) {
            float x0 = (src[j] - mn) * id;
            float x1 = (src[j + DI_QK4_1 / 2] - mn) * id;
            x0 += 0.5f;
            x1 += 0.5f;
            int q0 = trunc_clamp(x0, 0, Q4_LEVELS);
            int q1 = trunc_clamp(x1, 0, Q4_LEVELS);
            blk.qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
        memcpy(p + b * sizeof blk, &blk, sizeof blk);
    }
}

/* ---- Q5_0 / Q5_1 --------------------------------------------------------- */

static inline uint32_t load_qh(const uint8_t qh[4]) {
    return (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
}

static inline void store_qh(uint8_t qh[4], uint32_t v) {
    for (int i = 0; i < 4; i++) qh[i] = (uint8_t)(v >> (8 * i));
}

/* The 5-bit code of element j (0..31) of a Q5 block. */
static inline int q5_code(const uint8_t *qs, uint32_t qh, int j) {
    int half = DI_QK5_0 / 2;
    int lo = j < half ? (qs[j] & NIBBLE) : (qs[j - half] >> 4);
    return lo | (int)((qh >> j) & 1u) << 4;
}

/* Packs 32 five-bit codes into qs / qh. */
static void q5_pack(const int *q, uint8_t *qs, uint8_t qh_out[4]) {
    int half = DI_QK5_0 / 2;
    uint32_t qh = 0;
    for (int j = 0; j < half; j++) {
        qs[j] = (uint8_t)((q[j] & NIBBLE) | (q[j + half] & NIBBLE) << 4);
        qh |= (uint32_t)(q[j] >> 4) << j;
        qh |= (uint32_t)(q[j + half] >> 4) << (j + half);
    }
    store_qh(qh_out, qh);
}

void di_quant_q5_0_to_float(const void *src, float *dst, int64_t n) {
    const uint8_t *p = src;
    for (int64_t b = 0; b < n / DI_QK5_0; b++, dst += DI_QK5_0) {
        di_block_q5_0 blk;
        memcpy(&blk, p + b * sizeof blk, sizeof blk);
        float d = di_f16_to_f32(blk.d);
        uint32_t qh = load_qh(blk.qh);
        for (int j = 0; j < DI_QK5_0; j++)
            dst[j] = d * (float)(q5_code(blk.qs, qh, j) - Q5_OFFSET);
    }
}

void di_quant_q5_0_from_float(const float *src, void *dst, int64_t n) {
    uint8_t *p = dst;
    for (int64_t b = 0; b < n / DI_QK5_0; b++, src += DI_QK5_0) {
        float d = signed_absmax(src, DI_QK5_0) / -(float)Q5_OFFSET;
        float id = inverse_or_zero(d);
        int q[DI_QK5_0];
        for (int j = 0; j < DI_QK5_0; j++) {
            float x = src[j] * id;
            x += (float)Q5_OFFSET + 0.5f;
            q[j] = trunc_clamp(x, 0, Q5_LEVELS);
        }
        di_block_q5_0 blk;
        blk.d = di_f32_to_f16(d);
        q5_pack(q, blk.qs, blk.qh);
        memcpy(p + b * sizeof blk, &blk, sizeof blk);
    }
}

void di_quant_q5_1_to_float(const void *src, float *dst, int64_t n) {
    const uint8_t *p = src;
    for (int64_t b = 0; b < n / DI_QK5_1; b++, dst += DI_QK5_1) {
        di_block_q5_1 blk;
        memcpy(&blk, p + b * sizeof blk, sizeof blk);
        float d = di_f16_to_f32(blk.d);
        float m = di_f16_to_f32(blk.m);
        uint32_t qh = load_qh(blk.qh);
        for (int j = 0; j < DI_QK5_1; j++) {
            float y = d * (float)q5_code(blk.qs, qh, j);
            dst[j] = y + m;
        }
    }
}

void di_quant_q5_1_from_float(const float *src, void *dst, int64_t n) {
    uint8_t *p = dst;
    for (int64_t b = 0; b < n / DI_QK5_1; b++, src += DI_QK5_1) {
        float mn, mx;
        min_max(src, DI_QK5_1, &mn, &mx);
        float d = (mx - mn) / (float)Q5_LEVELS;
        float id = inverse_or_zero(d);
        int q[DI_QK5_1];
        for (int j = 0; j < DI_QK5_1; j++) {
            float x = (src[j] - mn) * id;
            x += 0.5f;
            q[j] = trunc_clamp(x, 0, Q5_LEVELS);
        }
        di_block_q5_1 blk;
        blk.d = di_f32_to_f16(d);
        blk.m = di_f32_to_f16(mn);
        q5_pack(q, blk.qs, blk.qh);
        memcpy(p + b * sizeof blk, &blk, sizeof blk);
    }
}

/* ---- Q8_0 / Q8_1 --------------------------------------------------------- */

/* Round half away from zero (C roundf, gguf's np_roundf), clamped to the
 * symmetric int8 range; NaN gives 0. */
static inline int8_t round_q8(float v) {
    if (!(v == v)) return 0;
    float r = roundf(v);
    if (r > Q8_LEVELS) r = Q8_LEVELS;
    if (r < -Q8_LEVELS) r = -Q8_LEVELS;
    return (int8_t)r;
}

static float absmax(const float *x, int n) {
    float amax = 0.0f;
    for (int j = 0; j < n; j++)
        if (amax < fabsf(x[j])) amax = fabsf(x[j]);
    return amax;
}

void di_quant_q8_0_to_float(const void *src, float *dst, int64_t n) {
    const uint8_t *p = src;
    for (int64_t b = 0; b < n / DI_QK8_0; b++, dst += DI_QK8_0) {
        di_block_q8_0 blk;
        memcpy(&blk, p + b * sizeof blk, sizeof blk);
        float d = di_f16_to_f32(blk.d);
        for (int j = 0; j < DI_QK8_0; j++) dst[j] = (float)blk.qs[j] * d;
    }
}

void di_quant_q8_0_from_float(const float *src, void *dst, int64_t n) {
    uint8_t *p = dst;
    for (int64_t b = 0; b < n / DI_QK8_0; b++, src += DI_QK8_0) {
        float d = absmax(src, DI_QK8_0) / Q8_LEVELS;
        float id = inverse_or_zero(d);
        di_block_q8_0 blk;
        blk.d = di_f32_to_f16(d);
        for (int j = 0; j < DI_QK8_0; j++) blk.qs[j] = round_q8(src[j] * id);
        memcpy(p + b * sizeof blk, &blk, sizeof blk);
    }
}

void di_quant_q8_1_to_float(const void *src, float *dst, int64_t n) {
    const uint8_t *p = src;
    for (int64_t b = 0; b < n / DI_QK8_1; b++, dst += DI_QK8_1) {
        di_block_q8_1 blk;
        memcpy(&blk, p + b * sizeof blk, sizeof blk);
        float d = di_f16_to_f32(blk.d);
        for (int j = 0; j < DI_QK8_1; j++) dst[j] = (float)blk.qs[j] * d;
    }
}

/* As ggml's quantize_row_q8_1_ref: s is the unrounded f32 scale times the
 * integer sum, rounded once to f16. */
void di_quant_q8_1_from_float(const float *src, void *dst, int64_t n) {
    uint8_t *p = dst;
    for (int64_t b = 0; b < n / DI_QK8_1; b++, src += DI_QK8_1) {
        float d = absmax(src, DI_QK8_1) / Q8_LEVELS;
        float id = inverse_or_zero(d);
        di_block_q8_1 blk;
        int sum = 0;
        for (int j = 0; j < DI_QK8_1; j++) {
            blk.qs[j] = round_q8(src[j] * id);
            sum += blk.qs[j];
        }
        blk.d = di_f32_to_f16(d);
        blk.s = di_f32_to_f16((float)sum * d);
        memcpy(p + b * sizeof blk, &blk, sizeof blk);
    }
}
