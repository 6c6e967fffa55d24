/* The few-row path of the "avx512-amx-q8" table (gemm_q8_amx.c) on
 * AVX-512 VNNI: batches of fewer than DI_GEMM_Q8_AMX_FEW_ROWS rows (decode)
 * with the SAME numerics as the AMX tiles, so a row's bits do not depend on
 * which path its batch took.
 *
 * An AMX tile product costs the same for 1 activation row as for 16, so at
 * decode 15/16 of it is wasted. Here one zmm holds 16 OUTPUTS of one row:
 * per 32-element block, the 16 weight rows' bytes are transposed in
 * registers (transpose16x4 / transpose16x8: dword k of output o to lane o
 * of vector k, two or three rounds of two-source dword permutes), then
 * every row multiplies them by its own activation dwords, broadcast
 * (vpdpbusd with a {1to16} operand, dpb), 8 vpdpbusd per block and row. That
 * gives each lane the exact integer block sum isum of its output: integer
 * sums are exact in any order, so the element order of the transpose does
 * not matter as long as weights and activations pair up (both stay in
 * element order here). vpdpbusd multiplies unsigned by signed bytes:
 * Q4_1/Q4_K nibbles are unsigned already; Q4_0 uses the nibble, Q5_0 the
 * nibble | high bit << 4 and Q8_0 the byte + 128, and the offset comes back
 * exactly as -8 (-16, -128) times the row's block sum of q (qsum), which
 * starts the integer chain.
 *
 * The float part is then, per row and output lane, blocks in order:
 *   acc = fma((float)isum, dw * dx, acc)
 *   acc = fma(mw, s, acc)            (Q4_1 and Q4_K)
 * exactly gemm_q8_amx.c's epilogue (tests/kernels pins both to one scalar
 * oracle bit for bit). dw and mw come from the AMX file's prep_scales, so
 * they are the same floats too. */
#include "kernels/cpu/gemm_q8.h"
#include "kernels/cpu/pack_x16.h"

#if defined(__x86_64__)

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define TGT __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
#define ALWAYS __attribute__((always_inline))
#define NO 16 /* outputs per group: one per lane */

enum { K_Q4_0, K_Q4_1, K_Q8_0, K_Q4_K, K_Q5_0 };

/* One round of the transposes: a and b differ in one bit of their vector
 * index, and that bit trades places with lane bit p: afterwards a holds the
 * dwords whose lane bit p was 0 and b those where it was 1, lane bit p
 * telling the source. Index tables per p (16 + l: from b). */
static const int32_t SWAP_LO[3][16] = {
    {0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30},
    {0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29},
    {0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27},
};
static const int32_t SWAP_HI[3][16] = {
    {1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31},
    {2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31},
    {4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31},
};

TGT static inline ALWAYS void swap_round(__m512i *a, __m512i *b, int p) {
    const __m512i lo = _mm512_loadu_si512((const void *)SWAP_LO[p]), hi = _mm512_loadu_si512((const void *)SWAP_HI[p]);
    const __m512i x = _mm512_permutex2var_epi32(*a, lo, *b), y = _mm512_permutex2var_epi32(*a, hi, *b);
    *a = x;
    *b = y;
}

/* 16 bytes at off of each of the 16 rows -> t[k] (k < 4): lane o = bytes
 * 4k..4k+3 of row o. Loaded as v[m] = rows m, m+4, m+8, m+12 (one per
 * 128-bit lane: lane bits o3 o2 k1 k0, vector bits o1 o0), then o0 trades
 * with k0 and o1 with k1. */
TGT static inline ALWAYS void transpose16x4(const uint8_t *const *rows, int64_t off, __m512i *t) {
#pragma GCC unroll 4
    for (int m = 0; m < 4; m++) {
        __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(const void *)(rows[m] + off)));
        v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(const void *)(rows[m + 4] + off)), 1);
        v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(const void *)(rows[m + 8] + off)), 2);
        t[m] = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(const void *)(rows[m + 12] + off)), 3);
    }
    swap_round(&t[0], &t[1], 0);
    swap_round(&t[2], &t[3], 0);
    swap_round(&t[0], &t[2], 1);
    swap_round(&t[1], &t[3], 1);
}

/* 32 bytes at off of each of the 16 rows -> t[k] (k < 8): lane o = bytes
 * 4k..4k+3 of row o. Loaded as v[i] = rows i, i+8 (one per 256-bit half:
 * lane bits o3 k2 k1 k0, vector bits o2 o1 o0), then o0, o1, o2 trade with
 * k0, k1, k2. */
TGT static inline ALWAYS void transpose16x8(const uint8_t *const *rows, int64_t off, __m512i *t) {
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++)
        t[i] = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(const void *)(rows[i] + off))),
            _mm256_loadu_si256((const __m256i *)(const void *)(rows[i + 8] + off)), 1);
#pragma GCC unroll 3
    for (int p = 0; p < 3; p++)
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++)
            if (!(i & (1 << p))) swap_round(&t[i], &t[i | (1 << p)], p);
}

/* Decode streams the weights once: while a group runs, the next group's
 * rows (the 16 * row_bytes bytes after it, contiguous) are prefetched at
 * the rate they will be read, step by step: span [lo, hi) of them. A
 * prefetch past the matrix (the last group) never faults. */
TGT static inline ALWAYS void prefetch_span(const uint8_t *next, int64_t lo, int64_t hi) {
    for (int64_t p = lo & ~(int64_t)63; p < hi; p += 64) _mm_prefetch((const char *)next + p, _MM_HINT_T0);
}

/* acc + vpdpbusd(u, dword k of a row's block bytes q in all 16 lanes),
 * the broadcast folded into the instruction ({1to16}; GCC emits a separate
 * vpbroadcastd for the intrinsic form). */
TGT static inline ALWAYS __m512i dpb(__m512i acc, __m512i u, const int8_t *q, int k) {
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(u), "m"(*(const int32_t *)(const void *)(q + 4 * k)));
    return acc;
}

/* isum of 16 outputs for one row and block: u[k] holds element dwords k
 * (elements 4k..4k+3, unsigned) of the 16 outputs, q the row's 32 block
 * bytes, start the exact offset correction. Two chains of four. */
TGT static inline ALWAYS __m512i block_isum(const __m512i *u, const int8_t *q, __m512i start) {
    __m512i c0 = dpb(start, u[0], q, 0);
    __m512i c1 = dpb(_mm512_setzero_si512(), u[1], q, 1);
#pragma GCC unroll 3
    for (int k = 2; k < 8; k += 2) {
        c0 = dpb(c0, u[k], q, k);
        c1 = dpb(c1, u[k + 1], q, k + 1);
    }
    return _mm512_add_epi32(c0, c1);
}

/* Q5_0: element e of output lane o gains 16 where bit e of that row's qh
 * (the dword at byte off) is set; u[k] holds elements 4k..4k+3 (k < 4)
 * and 16 + 4(k-4).. (k >= 4) in byte order within each lane. */
TGT static inline ALWAYS void add_high_bits(const uint8_t *const *rows, int64_t off, __m512i *u) {
    int32_t h[NO];
    for (int j = 0; j < NO; j++) memcpy(&h[j], rows[j] + off, sizeof h[j]);
    const __m512i qh = _mm512_loadu_si512((const void *)h), bit = _mm512_set1_epi32(0x08040201);
    const __m512i rep0 = _mm512_set4_epi32(0x0C0C0C0C, 0x08080808, 0x04040404, 0x00000000); /* byte 0 of each dword */
    const __m512i sixteen = _mm512_set1_epi8(16);
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) {
        const int first = k < 4 ? 4 * k : 16 + 4 * (k - 4);
        const __m512i nib = _mm512_shuffle_epi8(_mm512_srli_epi32(qh, (unsigned)first), rep0);
        u[k] = _mm512_mask_add_epi8(u[k], _mm512_test_epi8_mask(nib, bit), u[k], sixteen);
    }
}

/* The float chain of one row and block (see the top of the file). */
TGT static inline ALWAYS __m512 scale_block(int kind, __m512i isum, __m512 vdw, __m512 vmw, float dx, float sx,
                                            __m512 acc) {
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(vdw, _mm512_set1_ps(dx)), acc);
    if (kind == K_Q4_1 || kind == K_Q4_K) acc = _mm512_fmadd_ps(vmw, _mm512_set1_ps(sx), acc);
    return acc;
}

/* Block b of every row 0 .. NR-1 against the 16 outputs' integers u:
 * the exact block sum (started at the offset correction, -8 / -16 / -128
 * times the row's qsum for Q4_0 / Q5_0 / Q8_0) and the float chain. */
TGT static inline ALWAYS void rows_block(int kind, const int NR, const __m512i *u, __m512 vdw, __m512 vmw,
                                         const di_q8_rows *x, const int32_t *qsum, int64_t nb, int64_t b, __m512 *acc) {
#pragma GCC unroll 16
    for (int i = 0; i < NR; i++) {
        __m512i start = _mm512_setzero_si512();
        if (kind == K_Q4_0) start = _mm512_set1_epi32(-8 * qsum[i * nb + b]);
        if (kind == K_Q5_0) start = _mm512_set1_epi32(-16 * qsum[i * nb + b]);
        if (kind == K_Q8_0) start = _mm512_set1_epi32(-128 * qsum[i * nb + b]);
        const __m512i isum = block_isum(u, x->q + i * x->ldq + 32 * b, start);
        acc[i] = scale_block(kind, isum, vdw, vmw, x->d[i * x->ldb + b], x->s[i * x->ldb + b], acc[i]);
    }
}

/* One group: outputs o .. o+nc-1 (rows[j] = weight row o+j; j >= nc
 * repeat row 0 and are never stored) x activation rows 0 .. NR-1 ->
 * y[i * ldy + j]. dw, mw: (nb, NO) scales of the group; qsum (NR, nb). NR is
 * a constant in every instance, so acc stays in registers. */
TGT static inline ALWAYS void group(int kind, const int NR, const uint8_t *const *rows, int nc, const float *dw,
                                    const float *mw, const di_q8_rows *x, const int32_t *qsum, int64_t nb, float *y,
                                    int64_t ldy, uint64_t row_bytes) {
    const uint8_t *next = rows[0] + NO * row_bytes;
    const int64_t group_bytes = (int64_t)(NO * row_bytes);
    __m512 acc[DI_GEMM_Q8_AMX_FEW_ROWS];
#pragma GCC unroll 16
    for (int i = 0; i < NR; i++) acc[i] = _mm512_setzero_ps();
    const __m512i m4 = _mm512_set1_epi8(0x0F), sign = _mm512_set1_epi8((char)0x80);
    if (kind == K_Q4_K) {
        for (int64_t c = 0; c < nb / 2; c++) { /* sub-blocks 2c and 2c+1: low and high nibbles of 32 bytes */
            __m512i t[8], u[8];
            prefetch_span(next, group_bytes * c / (nb / 2), group_bytes * (c + 1) / (nb / 2));
            transpose16x8(rows, (c >> 2) * (int64_t)sizeof(di_block_q4_K) + (int64_t)offsetof(di_block_q4_K, qs) + 32 * (c & 3), t);
            for (int h = 0; h < 2; h++) {
                const int64_t b = 2 * c + h;
#pragma GCC unroll 8
                for (int k = 0; k < 8; k++) u[k] = _mm512_and_si512(h ? _mm512_srli_epi16(t[k], 4) : t[k], m4);
                const __m512 vdw = _mm512_load_ps(dw + b * NO), vmw = _mm512_load_ps(mw + b * NO);
                rows_block(kind, NR, u, vdw, vmw, x, qsum, nb, b, acc);
            }
        }
    } else {
        const int64_t bb = kind == K_Q4_0   ? (int64_t)sizeof(di_block_q4_0)
                           : kind == K_Q4_1 ? (int64_t)sizeof(di_block_q4_1)
                           : kind == K_Q5_0 ? (int64_t)sizeof(di_block_q5_0)
                                            : (int64_t)sizeof(di_block_q8_0);
        const int64_t qs = kind == K_Q4_0   ? (int64_t)offsetof(di_block_q4_0, qs) /* the block's integers */
                           : kind == K_Q4_1 ? (int64_t)offsetof(di_block_q4_1, qs)
                           : kind == K_Q5_0 ? (int64_t)offsetof(di_block_q5_0, qs)
                                            : (int64_t)offsetof(di_block_q8_0, qs);
        for (int64_t b = 0; b < nb; b++) {
            __m512i u[8];
            prefetch_span(next, group_bytes * b / nb, group_bytes * (b + 1) / nb);
            if (kind == K_Q8_0) {
                transpose16x8(rows, b * bb + qs, u);
#pragma GCC unroll 8
                for (int k = 0; k < 8; k++) u[k] = _mm512_xor_si512(u[k], sign); /* w + 128 */
            } else { /* low nibbles are elements 0-15, high 16-31 */
                __m512i t[4];
                transpose16x4(rows, b * bb + qs, t);
#pragma GCC unroll 4
                for (int k = 0; k < 4; k++) {
                    u[k] = _mm512_and_si512(t[k], m4);
                    u[k + 4] = _mm512_and_si512(_mm512_srli_epi16(t[k], 4), m4);
                }
                if (kind == K_Q5_0) add_high_bits(rows, b * bb + (int64_t)offsetof(di_block_q5_0, qh), u);
            }
            const __m512 vdw = _mm512_load_ps(dw + b * NO), vmw = _mm512_load_ps(mw + b * NO);
            rows_block(kind, NR, u, vdw, vmw, x, qsum, nb, b, acc);
        }
    }
    const __mmask16 keep = (__mmask16)((1u << nc) - 1u);
#pragma GCC unroll 16
    for (int i = 0; i < NR; i++) _mm512_mask_storeu_ps(y + i * ldy, keep, acc[i]);
}

/* Block sums of q for rows 0 .. n_rows-1: (q + 128) summed by vpsadbw. */
TGT void di_gemm_q8_amx_few_qsum(const di_q8_rows *x, int64_t n_rows, int64_t nb, int32_t *qsum) {
    const __m256i sign = _mm256_set1_epi8((char)0x80), z = _mm256_setzero_si256();
    for (int64_t i = 0; i < n_rows; i++)
        for (int64_t b = 0; b < nb; b++) {
            __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(x->q + i * x->ldq + 32 * b));
            __m256i s = _mm256_sad_epu8(_mm256_xor_si256(v, sign), z);
            __m128i h = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
            h = _mm_add_epi64(h, _mm_unpackhi_epi64(h, h));
            qsum[i * nb + b] = (int32_t)_mm_cvtsi128_si64(h) - 32 * 128;
        }
}

#define GROUP_CASE(kind, n)                                                                         \
    case n:                                                                                         \
        group(kind, n, rows, nc, dw, mw, x, qsum, nb, y, ldy, row_bytes);                           \
        break;

TGT static inline ALWAYS void few(int kind, const void *w, uint64_t row_bytes, int64_t o, int nc, const float *dw,
                                  const float *mw, const di_q8_rows *x, const int32_t *qsum, int n_rows, int64_t nb,
                                  float *y, int64_t ldy) {
    const uint8_t *rows[NO];
    for (int j = 0; j < NO; j++) rows[j] = (const uint8_t *)w + (uint64_t)(o + (j < nc ? j : 0)) * row_bytes;
    _Static_assert(DI_GEMM_Q8_AMX_FEW_ROWS == 11, "one case per row count below it");
    switch (n_rows) {
        GROUP_CASE(kind, 1)
        GROUP_CASE(kind, 2)
        GROUP_CASE(kind, 3)
        GROUP_CASE(kind, 4)
        GROUP_CASE(kind, 5)
        GROUP_CASE(kind, 6)
        GROUP_CASE(kind, 7)
        GROUP_CASE(kind, 8)
        GROUP_CASE(kind, 9)
        GROUP_CASE(kind, 10)
    default:
        break;
    }
}

#define DEFINE_FEW(name, kind)                                                                          \
    TGT void di_gemm_q8_amx_few_##name(const void *w, uint64_t row_bytes, int64_t o, int nc, const float *dw, \
                                       const float *mw, const di_q8_rows *x, const int32_t *qsum,        \
                                       int n_rows, int64_t nb, float *y, int64_t ldy) {                 \
        few(kind, w, row_bytes, o, nc, dw, mw, x, qsum, n_rows, nb, y, ldy);                            \
    }

DEFINE_FEW(q4_0, K_Q4_0)
DEFINE_FEW(q4_1, K_Q4_1)
DEFINE_FEW(q5_0, K_Q5_0)
DEFINE_FEW(q8_0, K_Q8_0)
DEFINE_FEW(q4_K, K_Q4_K)

/* ---- the same numerics on the x16 copy (pack_x16.h) -----------------------
 * The packed groups hold what the transposes above produce: chunk k of a
 * block is dword k of each of the 16 rows, lane by lane. So u[k], dw and mw
 * come straight from the packed block (dw = d, mw = m, Q4_K d * sc and
 * -dmin * mn: the prep_scales floats) and the float chain is group()'s. */
static inline di_dtype x16_dtype(int kind) {
    return kind == K_Q4_0 ? DI_DTYPE_Q4_0 : kind == K_Q4_1 ? DI_DTYPE_Q4_1 : kind == K_Q5_0 ? DI_DTYPE_Q5_0
           : kind == K_Q8_0 ? DI_DTYPE_Q8_0 : DI_DTYPE_Q4_K;
}

TGT static inline ALWAYS void group_x16(int kind, const int NR, const uint8_t *G, int nc, const di_q8_rows *x,
                                        const int32_t *qsum, int64_t nb, float *y, int64_t ldy) {
    __m512 acc[DI_GEMM_Q8_AMX_FEW_ROWS];
#pragma GCC unroll 16
    for (int i = 0; i < NR; i++) acc[i] = _mm512_setzero_ps();
    const __m512i m4 = _mm512_set1_epi8(0x0F), sixteen = _mm512_set1_epi8(16);
    if (kind == K_Q4_K) {
        for (int64_t sb = 0; sb < nb / 8; sb++) {
            const di_block_q4_K_x16 *B = (const di_block_q4_K_x16 *)(const void *)G + sb;
            const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)B->d));
            const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)B->dmin));
            const __m512 ndmin = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(dmin), _mm512_set1_epi32(INT32_MIN)));
            for (int p = 0; p < 4; p++) {
                __m512i t[8], u[8];
#pragma GCC unroll 8
                for (int k = 0; k < 8; k++) t[k] = _mm512_loadu_si512((const void *)B->qs[p][k]);
                for (int h = 0; h < 2; h++) {
                    const int j = 2 * p + h;
                    const int64_t b = 8 * sb + j;
#pragma GCC unroll 8
                    for (int k = 0; k < 8; k++) u[k] = _mm512_and_si512(h ? _mm512_srli_epi16(t[k], 4) : t[k], m4);
                    const __m512 vdw = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)B->sc[j]))));
                    const __m512 vmw = _mm512_mul_ps(ndmin, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)B->mn[j]))));
                    rows_block(kind, NR, u, vdw, vmw, x, qsum, nb, b, acc);
                }
            }
        }
    } else {
        const int64_t bb = (int64_t)di_x16_block32_bytes(x16_dtype(kind));
        const int64_t qs = (int64_t)di_x16_block32_qs(x16_dtype(kind));
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t *B = G + b * bb;
            __m512i u[8];
            if (kind == K_Q8_0) { /* stored + 128 already */
#pragma GCC unroll 8
                for (int k = 0; k < 8; k++) u[k] = _mm512_loadu_si512((const void *)(B + qs + 64 * k));
            } else {
#pragma GCC unroll 4
                for (int k = 0; k < 4; k++) {
                    const __m512i t = _mm512_loadu_si512((const void *)(B + qs + 64 * k));
                    u[k] = _mm512_and_si512(t, m4);
                    u[k + 4] = _mm512_and_si512(_mm512_srli_epi16(t, 4), m4);
                }
                if (kind == K_Q5_0) {
                    const di_block_q5_0_x16 *P = (const void *)B;
#pragma GCC unroll 8
                    for (int k = 0; k < 8; k++) u[k] = _mm512_mask_add_epi8(u[k], (__mmask64)P->qh[k / 4][k % 4], u[k], sixteen);
                }
            }
            const __m512 vdw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)B));
            const __m512 vmw = kind == K_Q4_1 ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(B + 32)))
                                              : _mm512_setzero_ps();
            rows_block(kind, NR, u, vdw, vmw, x, qsum, nb, b, acc);
        }
    }
    const __mmask16 keep = (__mmask16)((1u << nc) - 1u);
#pragma GCC unroll 16
    for (int i = 0; i < NR; i++) _mm512_mask_storeu_ps(y + i * ldy, keep, acc[i]);
}

#define X16_CASE(kind, n)                                                                           \
    case n:                                                                                         \
        group_x16(kind, n, G, nc, x, qsum, nb, y + o, ldy);                                         \
        break;

/* scratch: the rows' block sums of q (Q4_0, Q5_0, Q8_0). */
TGT static inline ALWAYS void few_x16(int kind, const void *packed, int64_t o0, int64_t o1, const di_q8_rows *x,
                                      int n_rows, int64_t n_in, float *y, int64_t ldy, float *scratch) {
    const int64_t nb = n_in / DI_Q8_ACT_BLOCK;
    const uint64_t gbytes = di_x16_group_bytes(x16_dtype(kind), n_in);
    int32_t *qsum = (int32_t *)(void *)scratch;
    if (kind == K_Q4_0 || kind == K_Q5_0 || kind == K_Q8_0) di_gemm_q8_amx_few_qsum(x, n_rows, nb, qsum);
    for (int64_t o = o0; o < o1; o += NO) {
        const int nc = o1 - o < NO ? (int)(o1 - o) : NO;
        const uint8_t *G = (const uint8_t *)packed + (uint64_t)(o / NO) * gbytes;
        switch (n_rows) {
            X16_CASE(kind, 1)
            X16_CASE(kind, 2)
            X16_CASE(kind, 3)
            X16_CASE(kind, 4)
            X16_CASE(kind, 5)
            X16_CASE(kind, 6)
            X16_CASE(kind, 7)
            X16_CASE(kind, 8)
            X16_CASE(kind, 9)
            X16_CASE(kind, 10)
        default:
            break;
        }
    }
}

/* Below the tile limits the packed copy, else the tiles on the rows. */
#define DEFINE_X16_AMX(name, kind, limit)                                                              \
    TGT void di_gemm_q8_x16_##name##_amx(const void *w, uint64_t row_bytes, const void *packed, int64_t o0, \
                                         int64_t o1, const di_q8_rows *x, int64_t n_rows, int64_t n_in,  \
                                         float *y, int64_t ldy, float *scratch) {                         \
        if (n_rows >= (limit) || n_in / DI_Q8_ACT_BLOCK == 0)                                           \
            di_gemm_q8_##name##_amx(w, row_bytes, o0, o1, x, n_rows, n_in, y, ldy, scratch);            \
        else if (n_rows > 0 && o0 < o1)                                                                 \
            few_x16(kind, packed, o0, o1, x, (int)n_rows, n_in, y, ldy, scratch);                       \
    }

DEFINE_X16_AMX(q4_0, K_Q4_0, DI_GEMM_Q8_AMX_FEW_ROWS)
DEFINE_X16_AMX(q4_1, K_Q4_1, DI_GEMM_Q8_AMX_FEW_ROWS)
DEFINE_X16_AMX(q5_0, K_Q5_0, DI_GEMM_Q8_AMX_FEW_ROWS)
DEFINE_X16_AMX(q8_0, K_Q8_0, DI_GEMM_Q8_AMX_FEW_ROWS_Q8_0)
DEFINE_X16_AMX(q4_K, K_Q4_K, DI_GEMM_Q8_AMX_FEW_ROWS)

#endif
