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
            const float d = _cvtsh_ss(bl->d);
            for (int j = 0; j < 16; j++) dw[sb * 16 + j] = d * (float)bl->scales[j];
        }
        break;
    default:
        for (int64_t sb = 0; sb < nb / 8; sb++) {
            const di_block_q4_K *bl = (const di_block_q4_K *)(const void *)row + sb;
            float d = _cvtsh_ss(bl->d), dmin = _cvtsh_ss(bl->dmin);
            for (int j = 0; j < 8; j++) {
                int sc, mn;
                di_q4_K_scale_min(bl->scales, j, &sc, &mn);
                dw[sb * 8 + j] = d * (float)sc;
                mw[sb * 8 + j] = -dmin * (float)mn;
            }
        }
        break;
    }
}

#endif
