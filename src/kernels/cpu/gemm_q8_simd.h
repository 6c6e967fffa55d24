/* The int8-activation gemm body of the AVX2 file (a template: an AVX-VNNI
 * variant would include it with another DOT8).
 * Not a public header: an ISA file defines, before including it,
 *   TGT        the function attribute that enables its instructions,
 *   ISA        the name suffix (avx2, avx512),
 *   DOT8(u, q) 8 int32 lanes, lane i = sum of u[4i..4i+3] * q[4i..4i+3] for
 *              32 unsigned bytes u and 32 signed bytes q (exact: maddubs
 *              cannot saturate here, see below; VNNI has no intermediate),
 *   GEMM_NR, GEMM_NC  the register tile: activation rows x output rows.
 * What the block integers mean is in gemm_q8_c.c.
 *
 * Batch invariance: every (activation row r, output o) pair gets its own
 * accumulator and sees, block by block, the same instructions
 *   acc = fma(cvt(DOT8(u_o_b, q_r_b)), dw_o_b * dx_r_b, acc)
 * whatever tile it sits in (NR x NC, 1 x NC or 1 x 1), then the fixed hsum
 * and the offset dot mdot(). Tiles only share loads of u and q. */
#include "kernels/cpu/gemm_q8.h"

#include <immintrin.h>
#include <math.h>

#define ALWAYS __attribute__((always_inline))
#define CAT_(a, b) a##_##b
#define CAT(a, b) CAT_(a, b)
#define FN(name) CAT(name, ISA)

/* Weights are streamed once per token in decode; a software prefetch a few
 * blocks ahead keeps the loads in flight (measured: ~2x on this VM). */
#define PREFETCH_BYTES 1024

enum { K_Q4_0, K_Q4_1, K_Q8_0, K_Q4_K, K_Q5_0, K_Q6_K }; /* Q6_K: AVX-512 only */

#include "kernels/cpu/gemm_q8_prep.h"

TGT static inline float FN(hsum)(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* The offset term of one (row, output) pair: sum_b mw[b] * s[b] in block
 * order. Out of line so every tile shape runs the very same code. */
__attribute__((noinline)) TGT static float FN(mdot)(const float *mw, const float *s, int64_t nb) {
    /* 8 lanes (block b into lane b % 8), the fixed hsum, then the tail */
    __m256 acc = _mm256_setzero_ps();
    int64_t b = 0;
    for (; b + 8 <= nb; b += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(mw + b), _mm256_loadu_ps(s + b), acc);
    float t = FN(hsum)(acc);
    for (; b < nb; b++) t = fmaf(mw[b], s[b], t);
    return t;
}

/* Bytes of weight per 32-element block (prefetch stride). */
static inline int64_t FN(block_bytes)(int kind) {
    return kind == K_Q4_0 ? 18 : kind == K_Q4_1 ? 20 : kind == K_Q8_0 ? 34 : kind == K_Q5_0 ? 22 : 18;
}

/* 16 bytes of nibbles -> 32 bytes: low nibbles (elements 0-15) then high. */
TGT static inline ALWAYS __m256i FN(nib16)(const uint8_t *qs) {
    __m128i raw = _mm_loadu_si128((const __m128i *)(const void *)qs);
    __m128i m = _mm_set1_epi8(0x0F);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw, 4), m), _mm_and_si128(raw, m));
}

/* The 32 integers of block b of a weight row: unsigned except Q8_0. */
TGT static inline ALWAYS __m256i FN(load_u)(int kind, const uint8_t *row, int64_t b) {
    switch (kind) {
    case K_Q4_0:
        return FN(nib16)(((const di_block_q4_0 *)(const void *)row)[b].qs);
    case K_Q4_1:
        return FN(nib16)(((const di_block_q4_1 *)(const void *)row)[b].qs);
    case K_Q8_0:
        return _mm256_loadu_si256((const __m256i *)(const void *)((const di_block_q8_0 *)(const void *)row)[b].qs);
    case K_Q5_0: { /* nibbles | bit j of qh << 4 */
        const di_block_q5_0 *bl = (const di_block_q5_0 *)(const void *)row + b;
        uint32_t qh;
        memcpy(&qh, bl->qh, sizeof qh);
        /* byte j of the high bits: broadcast qh's byte j/8, test bit j%8 */
        const __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32((int)qh),
                                                  _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2,
                                                                   2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
        const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
        const __m256i hb = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit), _mm256_set1_epi8(16));
        return _mm256_or_si256(FN(nib16)(bl->qs), hb);
    }
    default: {
        const di_block_q4_K *bl = (const di_block_q4_K *)(const void *)row + (b >> 3);
        int j = (int)(b & 7);
        __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(bl->qs + 32 * (j >> 1)));
        if (j & 1) v = _mm256_srli_epi16(v, 4);
        return _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
    }
    }
}

/* One register tile: activation rows r0..r0+nr-1 x the nc weight rows
 * w[0..nc-1] (whose scales are dw + j*nb, offsets mw + j*nb). */
TGT static inline ALWAYS void FN(tile)(int kind, const int nr, const int nc, const uint8_t *const *w,
                                       const float *dw, const float *mw, int64_t nb, const di_q8_rows *x,
                                       int64_t r0, float *y, int64_t ldy, int64_t o) {
    __m256 acc[GEMM_NR][GEMM_NC];
#pragma GCC unroll 8
    for (int i = 0; i < nr; i++)
#pragma GCC unroll 8
        for (int j = 0; j < nc; j++) acc[i][j] = _mm256_setzero_ps();
    const int64_t bb = FN(block_bytes)(kind);
    for (int64_t b = 0; b < nb; b++) {
        __m256i u[GEMM_NC], ua[GEMM_NC];
#pragma GCC unroll 8
        for (int j = 0; j < nc; j++) {
            _mm_prefetch((const char *)w[j] + b * bb + PREFETCH_BYTES, _MM_HINT_T0);
            u[j] = FN(load_u)(kind, w[j], b);
            /* Q8_0: |w| unsigned and the sign moved onto q (|w| * q <= 128 *
             * 127, so maddubs' pair sums stay below 2^15) */
            if (kind == K_Q8_0) ua[j] = _mm256_abs_epi8(u[j]);
        }
#pragma GCC unroll 8
        for (int i = 0; i < nr; i++) {
            const int64_t r = r0 + i;
            __m256i q = _mm256_loadu_si256((const __m256i *)(const void *)(x->q + r * x->ldq + b * 32));
            float dx = x->d[r * x->ldb + b];
#pragma GCC unroll 8
            for (int j = 0; j < nc; j++) {
                __m256i p = kind == K_Q8_0 ? DOT8(ua[j], _mm256_sign_epi8(q, u[j])) : DOT8(u[j], q);
                __m256 sc = _mm256_set1_ps(dw[j * nb + b] * dx);
                acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), sc, acc[i][j]);
            }
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < nr; i++)
#pragma GCC unroll 8
        for (int j = 0; j < nc; j++) {
            float v = FN(hsum)(acc[i][j]);
            if (kind != K_Q8_0) v = v + FN(mdot)(mw + j * nb, x->s + (r0 + i) * x->ldb, nb);
            y[(r0 + i) * ldy + o + j] = v;
        }
}

TGT static inline ALWAYS void FN(gemm)(int kind, const void *w, uint64_t row_bytes, int64_t o0, int64_t o1,
                                       const di_q8_rows *x, int64_t n_rows, int64_t n_in, float *y,
                                       int64_t ldy, float *scratch) {
    const int64_t nb = n_in / DI_Q8_ACT_BLOCK;
    float *dw = scratch, *mw = scratch + GEMM_NC * nb; /* (GEMM_NC, nb) each */
    for (int64_t o = o0; o < o1; o += GEMM_NC) {
        int nc = o1 - o < GEMM_NC ? (int)(o1 - o) : GEMM_NC;
        const uint8_t *rows[GEMM_NC];
        for (int j = 0; j < nc; j++) {
            rows[j] = (const uint8_t *)w + (uint64_t)(o + j) * row_bytes;
            FN(prep)(kind, rows[j], nb, dw + j * nb, mw + j * nb);
        }
        if (nc == GEMM_NC) {
            int64_t r = 0;
            for (; r + GEMM_NR <= n_rows; r += GEMM_NR)
                FN(tile)(kind, GEMM_NR, GEMM_NC, rows, dw, mw, nb, x, r, y, ldy, o);
            for (; r < n_rows; r++) FN(tile)(kind, 1, GEMM_NC, rows, dw, mw, nb, x, r, y, ldy, o);
        } else {
            for (int j = 0; j < nc; j++)
                for (int64_t r = 0; r < n_rows; r++)
                    FN(tile)(kind, 1, 1, rows + j, dw + j * nb, mw + j * nb, nb, x, r, y, ldy, o + j);
        }
    }
}

#define DEFINE_GEMM(name, kind)                                                                    \
    TGT void CAT(di_gemm_q8_##name, ISA)(const void *w, uint64_t row_bytes, int64_t o0, int64_t o1, \
                                         const di_q8_rows *x, int64_t n_rows, int64_t n_in, float *y, \
                                         int64_t ldy, float *scratch) {                            \
        FN(gemm)(kind, w, row_bytes, o0, o1, x, n_rows, n_in, y, ldy, scratch);                    \
    }

DEFINE_GEMM(q4_0, K_Q4_0)
DEFINE_GEMM(q4_1, K_Q4_1)
DEFINE_GEMM(q5_0, K_Q5_0)
DEFINE_GEMM(q8_0, K_Q8_0)
DEFINE_GEMM(q4_K, K_Q4_K)

/* Per block: amax -> d = amax / 127, q = nearest-even(x / d) through the
 * same single multiply by 1/d as the C reference, so the bits agree. */
TGT void CAT(di_quantize_q8, ISA)(const float *x, int8_t *q, float *d, float *s, int64_t n) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t b = 0; b < n / DI_Q8_ACT_BLOCK; b++) {
        const float *xb = x + b * DI_Q8_ACT_BLOCK;
        __m256 v0 = _mm256_loadu_ps(xb), v1 = _mm256_loadu_ps(xb + 8);
        __m256 v2 = _mm256_loadu_ps(xb + 16), v3 = _mm256_loadu_ps(xb + 24);
        __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v0), _mm256_andnot_ps(sign, v1)),
                                 _mm256_max_ps(_mm256_andnot_ps(sign, v2), _mm256_andnot_ps(sign, v3)));
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        h = _mm_max_ss(h, _mm_movehdup_ps(h));
        float amax = _mm_cvtss_f32(h);
        float db = amax / 127.0f;
        float id = db != 0.0f ? 1.0f / db : 0.0f;
        __m256 vid = _mm256_set1_ps(id);
        __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(v0, vid)), i1 = _mm256_cvtps_epi32(_mm256_mul_ps(v1, vid));
        __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(v2, vid)), i3 = _mm256_cvtps_epi32(_mm256_mul_ps(v3, vid));
        __m256i sum = _mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3));
        __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
        /* packs work within 128-bit lanes; the permute restores order */
        __m256i p16a = _mm256_packs_epi32(i0, i1), p16b = _mm256_packs_epi32(i2, i3);
        __m256i p8 = _mm256_packs_epi16(p16a, p16b);
        p8 = _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)(void *)(q + b * DI_Q8_ACT_BLOCK), p8);
        d[b] = db;
        s[b] = db * (float)_mm_cvtsi128_si32(s4);
    }
}
