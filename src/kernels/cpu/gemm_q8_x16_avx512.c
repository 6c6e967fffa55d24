/* The int8-activation gemm of the AVX-512 table over x16-packed weights
 * (pack_x16.h: 16 weight rows interleaved 4 bytes at a time). One 64-byte
 * load holds 4 quantized bytes of each of 16 output rows; vpdpbusd of it
 * against a broadcast 4-byte piece of one activation row advances all 16
 * dots, each in its own lane. The sub-block scales are then lane vectors
 * (one per row), so per 32 (Q4_K) or 16 (Q6_K) inputs there is one integer
 * scale multiply and one float FMA per 16 outputs, and no horizontal sum:
 * the float work per weight byte is a fraction of gemm_q8_avx512.c's.
 *
 * Numerics, per (activation row r, output row o), every quantity exact
 * until it is named rounded (s is a super-block, j a sub-block, dx / xs the
 * activation block's scale and d * sum(q), kernels.h):
 *   Q4_K: per s: acc = 0; per j = 0..7 in order:
 *           acc = fma((float)(sc_j * dot_j), dx_{8s+j}, acc)
 *           y   = fma(-(dmin_s * (float)mn_j), xs_{8s+j}, y)
 *         then y = fma(d_s, acc, y)
 *         (dot_j = sum of the 32 nibbles times activations: |sc * dot| <=
 *         63 * 32 * 15 * 127 < 2^22, so the conversion is exact)
 *   Q6_K: per s: acc = 0; per half h, quarter i (0, 1), k = 0..3, the
 *         sub-block j = 8h + 2k + i of 16 inputs:
 *           acc = fma((float)(sc_j * (dot_j - 32 * sum_j(q))), dx_{8s+j/2}, acc)
 *         then y = fma(d_s, acc, y)
 *         (dot_j over the unsigned 6-bit values, so dot_j - 32 sum is the
 *         dot of q - 32: |.| <= 128 * 16 * 32 * 127 < 2^24, exact)
 *   Q4_0, Q4_1, Q5_0, Q8_0 (32-element blocks b, u the unsigned stored
 *   value: nibble, nibble | fifth bit << 4, or q + 128):
 *         per b: acc = fma((float)dot_b(u, q), dw_b * dx_b, acc)
 *                off = fma(mw_b, xs_b, off)
 *         with mw = -8 dw (Q4_0), m (Q4_1), -16 dw (Q5_0), -128 dw (Q8_0),
 *         then y = acc + off (both from 0; |dot| <= 32 * 255 * 127, exact)
 * starting from y = 0. Which tile a pair sits in (1 to NR activation rows,
 * any group of 16 outputs, any thread's range) changes nothing of this:
 * the integer dots are exact and the float steps are these, in this order,
 * lane by lane; tests/kernels/test_matmul_x16.c checks it bit for bit
 * against a scalar C oracle of the formulas above.
 * Entered only after cpuid reports AVX512F/BW/VL/VNNI and OS ZMM state. */
#include "kernels/cpu/gemm_q8.h"
#include "kernels/cpu/pack_x16.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>

#define TGT __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
#define ALWAYS __attribute__((always_inline))
#define NR 4          /* activation rows per register tile (8 for the 32-element kinds measured no better) */
#define ROW_CHUNK 64  /* Q6_K: rows whose 32 * sum_j(q) sit in scratch at once */
/* No software prefetch: each task reads its groups as one sequential
 * stream, which the hardware prefetchers follow (Zen 4: with every block
 * laid out in read order, a prefetch 1-8 super-blocks ahead was no better,
 * from 2 threads worse; before Q6_K's block was reordered it needed one). */

/* acc + vpdpbusd(w, the 4 bytes at p in every lane), the broadcast folded
 * into the instruction ({1to16}): GCC emits a separate vpbroadcastd for
 * the intrinsic form, an extra vector uop per dot step. */
TGT static inline ALWAYS __m512i dpb(__m512i acc, __m512i w, const int8_t *p) {
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const int32_t *)(const void *)p));
    return acc;
}

TGT static inline ALWAYS __m512i zext16(const uint8_t *p) {
    return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)p));
}

/* Rows r0 .. r0+nr-1 x the 16 outputs of group G (o .. o+15; lanes outside
 * keep are not stored). */
TGT static inline ALWAYS void tile_q4_K(const int nr, const di_block_q4_K_x16 *G, int64_t nsb, const di_q8_rows *x,
                                        int64_t r0, float *y, int64_t ldy, int64_t o, __mmask16 keep) {
    const __m512i lo4 = _mm512_set1_epi8(0x0F), hi4 = _mm512_set1_epi8((char)0xF0);
    __m512 yacc[NR];
#pragma GCC unroll 4
    for (int i = 0; i < nr; i++) yacc[i] = _mm512_setzero_ps();
    for (int64_t s = 0; s < nsb; s++) {
        const di_block_q4_K_x16 *B = G + s;
        const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)B->dmin));
        __m512 acc[NR];
#pragma GCC unroll 4
        for (int i = 0; i < nr; i++) acc[i] = _mm512_setzero_ps();
        for (int p = 0; p < 4; p++) {
            __m512i lo[NR], hi[NR];
#pragma GCC unroll 4
            for (int i = 0; i < nr; i++) lo[i] = hi[i] = _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int c = 0; c < 8; c++) {
                const __m512i w = _mm512_loadu_si512((const void *)B->qs[p][c]);
                const __m512i wl = _mm512_and_si512(w, lo4), wh = _mm512_and_si512(w, hi4); /* wh: 16 x nibble */
#pragma GCC unroll 4
                for (int i = 0; i < nr; i++) {
                    const int8_t *q = x->q + (r0 + i) * x->ldq + 256 * s + 64 * p + 4 * c;
                    lo[i] = dpb(lo[i], wl, q);
                    hi[i] = dpb(hi[i], wh, q + 32);
                }
            }
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                const int j = 2 * p + h;
                const __m512i sc = zext16(B->sc[j]);
                const __m512 mn = _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(zext16(B->mn[j]))); /* dmin * mn, rounded */
#pragma GCC unroll 4
                for (int i = 0; i < nr; i++) {
                    const __m512i dot = h ? _mm512_srai_epi32(hi[i], 4) : lo[i];
                    const int64_t b = (r0 + i) * x->ldb + 8 * s + j;
                    acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_mullo_epi32(dot, sc)), _mm512_set1_ps(x->d[b]),
                                             acc[i]);
                    yacc[i] = _mm512_fnmadd_ps(mn, _mm512_set1_ps(x->s[b]), yacc[i]);
                }
            }
        }
        const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)B->d));
#pragma GCC unroll 4
        for (int i = 0; i < nr; i++) yacc[i] = _mm512_fmadd_ps(d, acc[i], yacc[i]);
    }
#pragma GCC unroll 4
    for (int i = 0; i < nr; i++) _mm512_mask_storeu_ps(y + (r0 + i) * ldy + o, keep, yacc[i]);
}

/* As tile_q4_K for Q6_K; cs (rows from r0, ld nsb * 16) holds 32 * sum_j(q). */
TGT static inline ALWAYS void tile_q6_K(const int nr, const di_block_q6_K_x16 *G, int64_t nsb, const di_q8_rows *x,
                                        int64_t r0, const int32_t *cs, float *y, int64_t ldy, int64_t o,
                                        __mmask16 keep) {
    const __m512i lo4 = _mm512_set1_epi8(0x0F), b45 = _mm512_set1_epi8(0x30);
    const int nq = nr == 1 ? 2 : 1; /* quarters per pass */
    const int64_t ldc = nsb * 16;
    __m512 yacc[NR];
#pragma GCC unroll 4
    for (int i = 0; i < nr; i++) yacc[i] = _mm512_setzero_ps();
    for (int64_t s = 0; s < nsb; s++) {
        const di_block_q6_K_x16 *B = G + s;
                __m512 acc[NR];
#pragma GCC unroll 4
        for (int i = 0; i < nr; i++) acc[i] = _mm512_setzero_ps();
        for (int h = 0; h < 2; h++) {
            /* one row: both quarters' 8 accumulators at once (more chains in
             * flight); more rows: a quarter at a time (registers). The scale
             * steps run in the same order either way. */
            for (int q0 = 0; q0 < 2; q0 += nq) {
                __m512i a[NR][2][4];
#pragma GCC unroll 4
                for (int i = 0; i < nr; i++)
#pragma GCC unroll 2
                    for (int qi = 0; qi < nq; qi++)
#pragma GCC unroll 4
                        for (int k = 0; k < 4; k++) a[i][qi][k] = _mm512_setzero_si512();
#pragma GCC unroll 8
                for (int c = 0; c < 4 * nq; c++) {
                    const int cc = 4 * q0 + c, qi = c / 4; /* chunk, quarter in this pass */
                    const __m512i l0 = _mm512_loadu_si512((const void *)B->q[h][cc][0]);
                    const __m512i l1 = _mm512_loadu_si512((const void *)B->q[h][cc][1]);
                    const __m512i qh = _mm512_loadu_si512((const void *)B->q[h][cc][2]);
                    /* element 128h + 32k + l: its low nibble | bits 2k, 2k+1 of qh at 4-5 (0xF8: a | (b & c)) */
                    __m512i u[4];
                    u[0] = _mm512_ternarylogic_epi32(_mm512_and_si512(l0, lo4), _mm512_slli_epi16(qh, 4), b45, 0xF8);
                    u[1] = _mm512_ternarylogic_epi32(_mm512_and_si512(l1, lo4), _mm512_slli_epi16(qh, 2), b45, 0xF8);
                    u[2] = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(l0, 4), lo4), qh, b45, 0xF8);
                    u[3] = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(l1, 4), lo4),
                                                     _mm512_srli_epi16(qh, 2), b45, 0xF8);
#pragma GCC unroll 4
                    for (int i = 0; i < nr; i++) {
                        const int8_t *q = x->q + (r0 + i) * x->ldq + 256 * s + 128 * h + 4 * cc;
#pragma GCC unroll 4
                        for (int k = 0; k < 4; k++)
                            a[i][qi][k] = dpb(a[i][qi][k], u[k], q + 32 * k);
                    }
                }
#pragma GCC unroll 2
                for (int qi = 0; qi < nq; qi++)
#pragma GCC unroll 4
                    for (int k = 0; k < 4; k++) {
                        const int j = 8 * h + 2 * k + q0 + qi;
                        const __m512i sc = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)B->sc[j]));
#pragma GCC unroll 4
                        for (int i = 0; i < nr; i++) {
                            const __m512i dot = _mm512_sub_epi32(a[i][qi][k], _mm512_set1_epi32(cs[i * ldc + 16 * s + j]));
                            const float dx = x->d[(r0 + i) * x->ldb + 8 * s + j / 2];
                            acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_mullo_epi32(dot, sc)), _mm512_set1_ps(dx),
                                                     acc[i]);
                        }
                    }
            }
        }
        const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)B->d));
#pragma GCC unroll 4
        for (int i = 0; i < nr; i++) yacc[i] = _mm512_fmadd_ps(d, acc[i], yacc[i]);
    }
#pragma GCC unroll 4
    for (int i = 0; i < nr; i++) _mm512_mask_storeu_ps(y + (r0 + i) * ldy + o, keep, yacc[i]);
}

/* As tile_q4_K for the 32-element kinds (nb blocks). One activation row
 * splits each block's dot over 4 integer accumulators (two rows: 2), so
 * the dpbusd chains are short; integer sums, so the bits do not change. */
TGT static inline ALWAYS void tile_32(const di_dtype kind, const int nr, const uint8_t *G, int64_t nb,
                                      const di_q8_rows *x, int64_t r0, float *y, int64_t ldy, int64_t o,
                                      __mmask16 keep) {
    const __m512i lo4 = _mm512_set1_epi8(0x0F), b16 = _mm512_set1_epi8(16);
    const uint64_t bb = di_x16_block32_bytes(kind);
    const int ns = nr == 1 ? 4 : nr == 2 ? 2 : 1; /* accumulators per row */
    const float moff = kind == DI_DTYPE_Q4_0 ? -8.0f : kind == DI_DTYPE_Q5_0 ? -16.0f : -128.0f;
    __m512 acc[NR], off[NR];
#pragma GCC unroll 4
    for (int i = 0; i < nr; i++) acc[i] = off[i] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *B = G + (uint64_t)b * bb;
        __m512i dot[NR][4];
#pragma GCC unroll 4
        for (int i = 0; i < nr; i++)
#pragma GCC unroll 4
            for (int k = 0; k < ns; k++) dot[i][k] = _mm512_setzero_si512();
        if (kind == DI_DTYPE_Q8_0) {
            const di_block_q8_0_x16 *P = (const void *)B;
#pragma GCC unroll 8
            for (int c = 0; c < 8; c++) {
                const __m512i w = _mm512_loadu_si512((const void *)P->qs[c]);
#pragma GCC unroll 4
                for (int i = 0; i < nr; i++) {
                    const int8_t *q = x->q + (r0 + i) * x->ldq + 32 * b + 4 * c;
                    dot[i][c % ns] = dpb(dot[i][c % ns], w, q);
                }
            }
        } else {
            const uint8_t *qs = B + di_x16_block32_qs(kind);
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++) {
                const __m512i w = _mm512_loadu_si512((const void *)(qs + 64 * c));
                __m512i wl = _mm512_and_si512(w, lo4), wh = _mm512_and_si512(_mm512_srli_epi16(w, 4), lo4);
                if (kind == DI_DTYPE_Q5_0) {
                    const di_block_q5_0_x16 *P = (const void *)B;
                    wl = _mm512_mask_add_epi8(wl, (__mmask64)P->qh[0][c], wl, b16);
                    wh = _mm512_mask_add_epi8(wh, (__mmask64)P->qh[1][c], wh, b16);
                }
#pragma GCC unroll 4
                for (int i = 0; i < nr; i++) {
                    const int8_t *q = x->q + (r0 + i) * x->ldq + 32 * b + 4 * c;
                    dot[i][(2 * c) % ns] = dpb(dot[i][(2 * c) % ns], wl, q);
                    dot[i][(2 * c + 1) % ns] = dpb(dot[i][(2 * c + 1) % ns], wh, q + 16);
                }
            }
        }
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)B));
        const __m512 mw = kind == DI_DTYPE_Q4_1
                              ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(B + 32)))
                              : _mm512_mul_ps(dw, _mm512_set1_ps(moff));
#pragma GCC unroll 4
        for (int i = 0; i < nr; i++) {
            __m512i t = dot[i][0];
#pragma GCC unroll 4
            for (int k = 1; k < ns; k++) t = _mm512_add_epi32(t, dot[i][k]);
            const int64_t xb = (r0 + i) * x->ldb + b;
            acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), _mm512_mul_ps(dw, _mm512_set1_ps(x->d[xb])), acc[i]);
            off[i] = _mm512_fmadd_ps(mw, _mm512_set1_ps(x->s[xb]), off[i]);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < nr; i++) _mm512_mask_storeu_ps(y + (r0 + i) * ldy + o, keep, _mm512_add_ps(acc[i], off[i]));
}

/* 32 * (sum of q over each 16 inputs) of rows [r0, r1) -> cs (ld n_in / 16). */
static void q6_K_sums(const di_q8_rows *x, int64_t r0, int64_t r1, int64_t n_in, int32_t *cs) {
    for (int64_t r = r0; r < r1; r++) {
        const int8_t *q = x->q + r * x->ldq;
        for (int64_t j = 0; j < n_in / 16; j++) {
            int32_t t = 0;
            for (int e = 0; e < 16; e++) t += q[16 * j + e];
            cs[(r - r0) * (n_in / 16) + j] = 32 * t;
        }
    }
}

TGT static inline ALWAYS void gemm_x16(di_dtype dtype, const void *packed, int64_t o0, int64_t o1,
                                       const di_q8_rows *x, int64_t n_rows, int64_t n_in, float *y, int64_t ldy,
                                       float *scratch) {
    const int64_t nsb = n_in / 256, nb = n_in / 32;
    const uint64_t gbytes = di_x16_group_bytes(dtype, n_in);
    int32_t *cs = (int32_t *)(void *)scratch; /* (ROW_CHUNK, n_in / 16): Q6_K only */
    for (int64_t rc = 0; rc < n_rows; rc += ROW_CHUNK) {
        const int64_t rc1 = rc + ROW_CHUNK < n_rows ? rc + ROW_CHUNK : n_rows;
        if (dtype == DI_DTYPE_Q6_K) q6_K_sums(x, rc, rc1, n_in, cs);
        for (int64_t o = o0; o < o1; o += DI_X16_ROWS) {
            const int64_t nv = o1 - o < DI_X16_ROWS ? o1 - o : DI_X16_ROWS;
            const __mmask16 keep = (__mmask16)((1u << nv) - 1);
            const uint8_t *G = (const uint8_t *)packed + (uint64_t)(o / DI_X16_ROWS) * gbytes;
            int64_t r = rc;
            if (dtype != DI_DTYPE_Q4_K && dtype != DI_DTYPE_Q6_K) {
                for (; r + NR <= rc1; r += NR) tile_32(dtype, NR, G, nb, x, r, y, ldy, o, keep);
                for (; r < rc1; r++) tile_32(dtype, 1, G, nb, x, r, y, ldy, o, keep);
            } else if (dtype == DI_DTYPE_Q4_K) {
                for (; r + NR <= rc1; r += NR) tile_q4_K(NR, (const void *)G, nsb, x, r, y, ldy, o, keep);
                for (; r < rc1; r++) tile_q4_K(1, (const void *)G, nsb, x, r, y, ldy, o, keep);
            } else {
                for (; r + NR <= rc1; r += NR)
                    tile_q6_K(NR, (const void *)G, nsb, x, r, cs + (r - rc) * (n_in / 16), y, ldy, o, keep);
                for (; r < rc1; r++)
                    tile_q6_K(1, (const void *)G, nsb, x, r, cs + (r - rc) * (n_in / 16), y, ldy, o, keep);
            }
        }
    }
}

#define DEFINE_X16(name, dtype)                                                                          \
    TGT void di_gemm_q8_x16_##name##_avx512(const void *w, uint64_t row_bytes, const void *packed, int64_t o0, \
                                            int64_t o1, const di_q8_rows *x, int64_t n_rows, int64_t n_in,       \
                                            float *y, int64_t ldy, float *scratch) {                             \
        (void)w, (void)row_bytes; /* the packed copy only */                                                 \
        gemm_x16(dtype, packed, o0, o1, x, n_rows, n_in, y, ldy, scratch);                                  \
    }
DEFINE_X16(q4_0, DI_DTYPE_Q4_0)
DEFINE_X16(q4_1, DI_DTYPE_Q4_1)
DEFINE_X16(q5_0, DI_DTYPE_Q5_0)
DEFINE_X16(q8_0, DI_DTYPE_Q8_0)

DEFINE_X16(q4_K, DI_DTYPE_Q4_K)
DEFINE_X16(q6_K, DI_DTYPE_Q6_K)

#endif
