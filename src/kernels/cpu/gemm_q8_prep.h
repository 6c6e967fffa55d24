/* The per-row weight scales of the int8-activation gemms (a template
 * part: the including ISA file defines TGT, ALWAYS and FN, and the kind
 * enum K_Q4_0 .. K_Q5_0). One scalar pass per weight row writes what
 * gemm_q8_c.c computes, float for float, so every table reads the same
 * scale and offset floats from plain arrays. (The AVX-512 file used to
 * gather them 16 blocks at a time: on Zen 4 those gathers took ~2/3 of
 * decode time.) */
#ifndef DI_KERNELS_CPU_GEMM_Q8_PREP_H
#define DI_KERNELS_CPU_GEMM_Q8_PREP_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

/* The eight 6-bit scales and mins of a Q4_K super-block's 12 bytes
 * (di_q4_K_scale_min's, all at once on 32-bit words): bytes 0-3 hold
 * scales 0-3 and, in their top 2 bits, the high bits of scales 4-7;
 * bytes 4-7 the same for the mins; bytes 8-11 the low nibbles of scales
 * 4-7 (low half) and mins 4-7 (high half). */
static inline void q4_K_scales_mins(const uint8_t *q, uint8_t sc[8], uint8_t mn[8]) {
    uint32_t w[3], out[4];
    memcpy(w, q, 12);
    const uint32_t low6 = 0x3f3f3f3fu, nib = 0x0f0f0f0fu, top2 = 0x03030303u;
    out[0] = w[0] & low6;                                     /* scales 0-3 */
    out[1] = (w[2] & nib) | (((w[0] >> 6) & top2) << 4);      /* scales 4-7 */
    out[2] = w[1] & low6;                                     /* mins 0-3 */
    out[3] = ((w[2] >> 4) & nib) | (((w[1] >> 6) & top2) << 4); /* mins 4-7 */
    memcpy(sc, out, 8);
    memcpy(mn, out + 2, 8);
}

/* Per-block scale dw and offset mw of one weight row (nb blocks), exactly
 * as gemm_q8_c.c computes them. */
TGT static inline ALWAYS void FN(prep)(int kind, const uint8_t *row, int64_t nb, float *dw, float *mw) {
    switch (kind) {
    case K_Q4_0:
        for (int64_t b = 0; b < nb; b++) {
            dw[b] = _cvtsh_ss(((const di_block_q4_0 *)(const void *)row)[b].d);
            mw[b] = -8.0f * dw[b];
        }
        break;
    case K_Q4_1:
        for (int64_t b = 0; b < nb; b++) {
            const di_block_q4_1 *bl = (const di_block_q4_1 *)(const void *)row + b;
            dw[b] = _cvtsh_ss(bl->d);
            mw[b] = _cvtsh_ss(bl->m);
        }
        break;
    case K_Q8_0: /* mw: the +128 of the AVX-512 layout (AVX2 reads no mw) */
        for (int64_t b = 0; b < nb; b++) {
            dw[b] = _cvtsh_ss(((const di_block_q8_0 *)(const void *)row)[b].d);
            mw[b] = -128.0f * dw[b];
        }
        break;
    case K_Q5_0:
        for (int64_t b = 0; b < nb; b++) {
            dw[b] = _cvtsh_ss(((const di_block_q5_0 *)(const void *)row)[b].d);
            mw[b] = -16.0f * dw[b];
        }
        break;
    case K_Q6_K: /* dw: 2 nb floats, d * scale of each 16-element sub-block; no mw */
        for (int64_t sb = 0; sb < nb / 8; sb++) {
            const di_block_q6_K *bl = (const di_block_q6_K *)(const void *)row + sb;
            const __m256 d = _mm256_set1_ps(_cvtsh_ss(bl->d));
            for (int h = 0; h < 2; h++) { /* d * (float)scale, 8 at a time */
                const __m128i sc8 = _mm_loadl_epi64((const __m128i *)(const void *)(bl->scales + 8 * h));
                _mm256_storeu_ps(dw + sb * 16 + 8 * h, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc8))));
            }
        }
        break;
    default:
        for (int64_t sb = 0; sb < nb / 8; sb++) {
            const di_block_q4_K *bl = (const di_block_q4_K *)(const void *)row + sb;
            uint8_t sc[8], mn[8];
            q4_K_scales_mins(bl->scales, sc, mn);
            const __m256 d = _mm256_set1_ps(_cvtsh_ss(bl->d)), ndmin = _mm256_set1_ps(-_cvtsh_ss(bl->dmin));
            const __m256 scf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(void *)sc)));
            const __m256 mnf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(void *)mn)));
            _mm256_storeu_ps(dw + sb * 8, _mm256_mul_ps(d, scf));
            _mm256_storeu_ps(mw + sb * 8, _mm256_mul_ps(ndmin, mnf));
        }
        break;
    }
}

#endif
