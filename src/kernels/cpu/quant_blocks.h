/* Helpers the fast paths use on the GGUF blocks they read directly (the
 * structs themselves are tensor/quant.h's, the ggml layouts; static asserts
 * in src/tensor/dtype.c pin their sizes). */
#ifndef DI_KERNELS_CPU_QUANT_BLOCKS_H
#define DI_KERNELS_CPU_QUANT_BLOCKS_H

#include <stdint.h>
#include <string.h>

#include "tensor/quant.h" /* the block structs: di_block_q4_0 ... di_block_q6_K */

#define DI_QK 32 /* elements per Q4_0/Q4_1/Q8_0 block */

/* Scale and min of sub-block j (0..7) of a Q4_K block: j < 4 take the low 6
 * bits of bytes j and j + 4; j >= 4 combine a nibble of byte j + 4 with the
 * top two bits of bytes j - 4 and j. */
static inline void di_q4_K_scale_min(const uint8_t *sc, int j, int *scale, int *min) {
    if (j < 4) {
        *scale = sc[j] & 63;
        *min = sc[j + 4] & 63;
    } else {
        *scale = (sc[j + 4] & 0xF) | ((sc[j - 4] >> 6) << 4);
        *min = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
    }
}

/* All 8 scales and mins of a Q4_K super-block at once (di_q4_K_scale_min
 * for j = 0..7)
 * as bytes of two words, from its 12 packed bytes read as 32-bit words
 * a, b, c (little-endian, as on x86): scales 0-3 are the low 6 bits of a's bytes, mins 0-3 of b's;
 * scales 4-7 take c's low nibbles and a's top 2 bits as bits 4-5, mins 4-7
 * c's high nibbles and b's top 2 bits. */
static inline void di_q4_K_scales_mins(const uint8_t *s12, uint64_t *sc, uint64_t *mn) {
    uint32_t a, b, c;
    memcpy(&a, s12, 4);
    memcpy(&b, s12 + 4, 4);
    memcpy(&c, s12 + 8, 4);
    const uint32_t low6 = 0x3f3f3f3fu, low4 = 0x0f0f0f0fu, low2 = 0x03030303u;
    uint32_t sc_hi = (c & low4) | (((a >> 6) & low2) << 4);
    uint32_t mn_hi = ((c >> 4) & low4) | (((b >> 6) & low2) << 4);
    *sc = (uint64_t)(a & low6) | (uint64_t)sc_hi << 32;
    *mn = (uint64_t)(b & low6) | (uint64_t)mn_hi << 32;
}

_Static_assert(sizeof(di_block_q4_K) == 144, "q4_K block size");
_Static_assert(sizeof(di_block_q4_0) == 18, "q4_0 block size");
_Static_assert(sizeof(di_block_q4_1) == 20, "q4_1 block size");
_Static_assert(sizeof(di_block_q8_0) == 34, "q8_0 block size");
_Static_assert(sizeof(di_block_q6_K) == 210, "q6_K block size");

/* Q6_K super-block -> 256 floats, value d * scale * q with q in [-32, 31].
 * Shared by the C and AVX2 tables (each compiles its own copy). Layout: two
 * halves of 128; in each, for l in 0..31, ql[l] and ql[l+32] give the low
 * nibbles and qh[l] the high bit pairs of elements l, l+32, l+64, l+96. */
static inline void di_q6_K_block_to_float(const di_block_q6_K *b, float d, float *y) {
    const uint8_t *ql = b->ql, *qh = b->qh;
    const int8_t *sc = b->scales;
    for (int half = 0; half < 2; half++) {
        for (int l = 0; l < 32; l++) {
            int is = l / 16;
            int q1 = (int)((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
            int q2 = (int)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
            int q3 = (int)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            int q4 = (int)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            y[l] = d * (float)sc[is] * (float)q1;
            y[l + 32] = d * (float)sc[is + 2] * (float)q2;
            y[l + 64] = d * (float)sc[is + 4] * (float)q3;
            y[l + 96] = d * (float)sc[is + 6] * (float)q4;
        }
        y += 128;
        ql += 64;
        qh += 32;
        sc += 8;
    }
}

#endif
