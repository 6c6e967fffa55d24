/* K-quant dequantizers: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K (256-element
 * super-blocks of 16 or 8 sub-blocks, each sub-block with its own small
 * integer scale under one f16 super-scale).
 *
 * The element order inside a super-block is ggml's: codes are packed in
 * runs of 32 bytes, and successive bit fields of one byte belong to elements
 * 32 (2-bit fields) or 32/64 (nibbles) apart. The helpers below spell out the
 * element -> (byte, shift) map once per field width; gguf.quants'
 * dequantizers are the oracle for it (tests/tensor/test_dtype.c).
 *
 * As in quant_legacy.c, each f32 multiply / subtract the reference rounds
 * separately is its own statement, so results are bit-exact. */
#include "tensor/half.h"
#include "tensor/quant.h"

#include <string.h>

#define SUB16 16            /* sub-block size of Q2_K, Q3_K, Q6_K */
#define SUB32 32            /* sub-block size of Q4_K, Q5_K */
#define Q3_SCALE_OFFSET 32  /* Q3_K stores 6-bit scales as sc + 32 */
#define Q3_HBIT_OFFSET 4    /* Q3_K subtracts 4 when the high bit is clear */
#define Q6_OFFSET 32        /* Q6_K stores q + 32 */

/* 2-bit field of element e in a 64-byte array packed 4 fields per byte:
 * bytes 0..31 hold elements 0..127, bytes 32..63 hold 128..255; within a
 * half, shift 2*s selects elements 32*s .. 32*s+31. */
static inline int crumb_at(const uint8_t *q, int e) {
    int g = e / 128, s = (e % 128) / 32, l = e % 32;
    return (q[g * 32 + l] >> (2 * s)) & 3;
}

/* Nibble of element e in a 128-byte Q4_K/Q5_K array: sub-block sb = e/32
 * lives in bytes 32*(sb/2)..+31, low nibble for even sb, high for odd. */
static inline int nibble_k4(const uint8_t *qs, int e) {
    int sb = e / 32, l = e % 32;
    return (qs[(sb / 2) * 32 + l] >> (4 * (sb % 2))) & 0x0f;
}

/* Bit sb of byte l (e = 32*sb + l): Q3_K hmask and Q5_K qh. */
static inline int bit_at(const uint8_t *q, int e) {
    return (q[e % 32] >> (e / 32)) & 1;
}

/* Nibble of element e in Q6_K's 128-byte ql: each 128-element half uses 64
 * bytes, low nibbles for its first 64 elements, high for the next 64. */
static inline int nibble_q6(const uint8_t *ql, int e) {
    int g = e / 128, h = (e % 128) / 64, l = e % 64;
    return (ql[g * 64 + l] >> (4 * h)) & 0x0f;
}

/* The 6-bit scale and min of sub-block j from Q4_K/Q5_K's 12 packed bytes:
 * bytes 0..3 hold scales 0..3 (low 6 bits) and the top 2 bits of scales
 * 4..7; bytes 4..7 the same for the mins; bytes 8..11 the low nibbles of
 * scale (low half) and min (high half) 4..7. */
void di_quant_k4_scale_min(const uint8_t *scales, int j, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = scales[j] & 63;
        *m = scales[j + 4] & 63;
    } else {
        *sc = (uint8_t)((scales[j + 4] & 0x0f) | ((scales[j - 4] >> 6) << 4));
        *m = (uint8_t)((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4));
    }
}

/* Q3_K's 16 signed 6-bit scales: low nibbles in bytes 0..7 (low nibble for
 * scales 0..7, high for 8..15), top 2 bits in bytes 8..11. */
static int q3_scale(const uint8_t *scales, int k) {
    int lo = k < 8 ? (scales[k] & 0x0f) : (scales[k - 8] >> 4);
    int hi = (scales[8 + k % 4] >> (2 * (k / 4))) & 3;
    return (lo | hi << 4) - Q3_SCALE_OFFSET;
}

void di_quant_q2_K_to_float(const void *src, float *dst, int64_t n) {
    const uint8_t *p = src;
    for (int64_t b = 0; b < n / DI_QK_K; b++, dst += DI_QK_K) {
        di_block_q2_K blk;
        memcpy(&blk, p + b * sizeof blk, sizeof blk);
        float d = di_f16_to_f32(blk.d);
        float dmin = di_f16_to_f32(blk.dmin);
        for (int sb = 0; sb < DI_QK_K / SUB16; sb++) {
            float dl = d * (float)(blk.scales[sb] & 0x0f);
            float ml = dmin * (float)(blk.scales[sb] >> 4);
            for (int l = 0; l < SUB16; l++) {
                int e = sb * SUB16 + l;
                float y = dl * (float)crumb_at(blk.qs, e);
                dst[e] = y - ml;
            }
        }
    }
}

void di_quant_q3_K_to_float(const void *src, float *dst, int64_t n) {
    const uint8_t *p = src;
    for (int64_t b = 0; b < n / DI_QK_K; b++, dst += DI_QK_K) {
        di_block_q3_K blk;
        memcpy(&blk, p + b * sizeof blk, sizeof blk);
        float d = di_f16_to_f32(blk.d);
        for (int sb = 0; sb < DI_QK_K / SUB16; sb++) {
            float dl = d * (float)q3_scale(blk.scales, sb);
            for (int l = 0; l < SUB16; l++) {
                int e = sb * SUB16 + l;
                int q = crumb_at(blk.qs, e) - (bit_at(blk.hmask, e) ? 0 : Q3_HBIT_OFFSET);
                dst[e] = dl * (float)q;
            }
        }
    }
}

void di_quant_q4_K_to_float(const void *src, float *dst, int64_t n) {
    const uint8_t *p = src;
    for (int64_t b = 0; b < n / DI_QK_K; b++, dst += DI_QK_K) {
        di_block_q4_K blk;
        memcpy(&blk, p + b * sizeof blk, sizeof blk);
        float d = di_f16_to_f32(blk.d);
        float dmin = di_f16_to_f32(blk.dmin);
        for (int sb = 0; sb < DI_QK_K / SUB32; sb++) {
            uint8_t sc, m;
            di_quant_k4_scale_min(blk.scales, sb, &sc, &m);
            float d1 = d * (float)sc;
            float m1 = dmin * (float)m;
            for (int l = 0; l < SUB32; l++) {
                int e = sb * SUB32 + l;
                float y = d1 * (float)nibble_k4(blk.qs, e);
                dst[e] = y - m1;
            }
        }
    }
}

void di_quant_q5_K_to_float(const void *src, float *dst, int64_t n) {
    const uint8_t *p = src;
    for (int64_t b = 0; b < n / DI_QK_K; b++, dst += DI_QK_K) {
        di_block_q5_K blk;
        memcpy(&blk, p + b * sizeof blk, sizeof blk);
        float d = di_f16_to_f32(blk.d);
        float dmin = di_f16_to_f32(blk.dmin);
        for (int sb = 0; sb < DI_QK_K / SUB32; sb++) {
            uint8_t sc, m;
            di_quant_k4_scale_min(blk.scales, sb, &sc, &m);
            float d1 = d * (float)sc;
            float m1 = dmin * (float)m;
            for (int l = 0; l < SUB32; l++) {
                int e = sb * SUB32 + l;
                int q = nibble_k4(blk.qs, e) | bit_at(blk.qh, e) << 4;
                float y = d1 * (float)q;
                dst[e] = y - m1;
            }
        }
    }
}

void di_quant_q6_K_to_float(const void *src, float *dst, int64_t n) {
    const uint8_t *p = src;
    for (int64_t b = 0; b < n / DI_QK_K; b++, dst += DI_QK_K) {
        di_block_q6_K blk;
        memcpy(&blk, p + b * sizeof blk, sizeof blk);
        float d = di_f16_to_f32(blk.d);
        for (int sb = 0; sb < DI_QK_K / SUB16; sb++) {
            float dl = d * (float)blk.scales[sb];
            for (int l = 0; l < SUB16; l++) {
                int e = sb * SUB16 + l;
                int q = (nibble_q6(blk.ql, e) | crumb_at(blk.qh, e) << 4) - Q6_OFFSET;
                dst[e] = dl * (float)q;
            }
        }
    }
}

void di_quant_q8_K_to_float(const void *src, float *dst, int64_t n) {
    const uint8_t *p = src;
    for (int64_t b = 0; b < n / DI_QK_K; b++, dst += DI_QK_K) {
        di_block_q8_K blk;
        memcpy(&blk, p + b * sizeof blk, sizeof blk);
        for (int j = 0; j < DI_QK_K; j++) dst[j] = (float)blk.qs[j] * blk.d;
    }
}
