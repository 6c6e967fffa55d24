/* The int8-activation gemm on AMX tiles (Sapphire Rapids and later): the
 * gemm_q8 entries of the "avx512-amx-q8" table. Batches too small to fill
 * a tile (decode) run gemm_q8_amx_few.c's VNNI kernel instead, which
 * computes the same bits (the numerics below); everything else runs here.
 *
 * Per tile product (TDPBSSD, signed x signed bytes into int32):
 *   A = 16 weight rows (one group of outputs) x one 32-element block: for
 *       Q8_0 full groups read straight from the weight rows (stride
 *       row_bytes, nothing prepared); otherwise unpacked once per group
 *       and row chunk into scratch (unpack_group: nibbles split, Q4_0's -8
 *       applied, no transpose);
 *   B = the same block of 16 activation rows in the VNNI layout (row k
 *       holds elements 4k..4k+3 of each row), packed with their scales
 *       once per chunk of DI_GEMM_Q8_AMX_ROWS rows (pack_rows; rows past
 *       the batch are 0, so every tile has one shape and the
 *       configuration is loaded once per call);
 *   C = 16 outputs x 16 rows of exact block sums isum, stored to L1 and
 *       scaled in floats, one vector of 16 rows per output; the 16 x 16
 *       accumulators are transposed in registers once per (group, row
 *       tile) into y.
 * One tile product covers ONE block (K = 32) because every block has its own
 * weight and activation scales: the sums of two blocks never mix. Four C
 * tiles are in flight (tile_pair): a tile store does not overlap the
 * multiplies on this core and tile registers are not renamed, so each C
 * tile is stored two blocks after its product and scaled two blocks after
 * its store (bench/README.md has the measurements).
 *
 * Numerics (per activation row r and output o, blocks b in order):
 *   acc = fma((float)isum_b, dw_b * dx_b, acc)
 *   acc = fma(mw_b, s_b, acc)            (Q4_1 and Q4_K only: the minimums)
 * with isum_b the exact integer dot of block b (Q4_0's offset -8, Q5_0's -16
 * and Q8_0's sign are inside it), dw/mw the block scale and offset (gemm_q8_c.c) and
 * dx, s the activation block's scale and d * sum(q) (the products are
 * formed as dx * dw and mw * s lane-wise, the same IEEE results). Each
 * (r, o) pair runs this same sequence whatever tile or lane it sits in,
 * the batch size, the output range or the thread, so the table is
 * batch-invariant (tests/kernels pins it bit for bit to a scalar oracle).
 * It is NOT bit-identical to "avx512-q8", which scales 16 lanes of
 * 4-element partial sums (gemm_q8_avx512.c); both stay within the int8
 * error bound of the reference (tests/kernels).
 *
 * Entered only after dispatch.c saw AMX-TILE/AMX-INT8 in cpuid, XCR0 bits
 * 17-18 set and the kernel granted this process the tile data state
 * (arch_prctl ARCH_REQ_XCOMP_PERM). */
#include "kernels/cpu/gemm_q8.h"

#if defined(__x86_64__)

#include <immintrin.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define TGT __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni,amx-tile,amx-int8")))
#define ALWAYS __attribute__((always_inline))
#define NO 16 /* outputs per group: the rows of the A and C tiles */
#define MR 16 /* activation rows per row tile: the 16 int32 columns of C */
/* one 16 x 32-byte tile: a block of 16 weight rows, or 16 activation rows
 * in the VNNI layout (8 x 64 bytes) */
#define BLOCK_TILE_BYTES 512

enum { K_Q4_0, K_Q4_1, K_Q8_0, K_Q4_K, K_Q5_0 };

/* Tile registers: block b's product reads A and B tiles b % 2 and goes
 * to C tile b % 4, so four products are in flight. Tile registers are not
 * renamed and a tile store does not overlap the multiplies, so block b's
 * C is stored two blocks after its product was issued (the product is
 * done by then) and scaled two blocks after that (the stored sums have
 * reached L1). Every tile has one shape for every call: A 16 x 32 bytes
 * (weight rows), B 8 x 64 bytes (16 activation rows, VNNI), C 16 x 16. */
#define T_A0 0 /* (GCC's tile intrinsics paste the number into the asm) */
#define T_A1 1
#define T_B0 2
#define T_B1 3
#define T_C0 4
#define T_C1 5
#define T_C2 6
#define T_C3 7
#define C_SLOTS 4 /* C tiles in flight, each with its L1 slot */

typedef struct tile_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

TGT static void load_config(void) {
    tile_config c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    const int r[8] = {NO, NO, 8, 8, NO, NO, NO, NO};
    const int cols[8] = {32, 32, 64, 64, 64, 64, 64, 64};
    for (int t = 0; t < 8; t++) {
        c.rows[t] = (uint8_t)r[t];
        c.colsb[t] = (uint16_t)cols[t];
    }
    /* GCC's _tile_loadconfig names only 8 bytes of c as its input: make
     * the whole struct reach memory first */
    __asm__ volatile("" : : "r"(&c) : "memory");
    _tile_loadconfig(&c);
}

/* ---- weight preparation --------------------------------------------------- */

/* Scale dw and offset mw of every block of one weight row, as gemm_q8_c.c
 * (mw unused for Q4_0 and Q8_0), into column j of (nb, NO) arrays. */
TGT static inline ALWAYS void row_scales(int kind, const uint8_t *row, int64_t nb, float *dw, float *mw, int j) {
    switch (kind) {
    case K_Q4_0:
        for (int64_t b = 0; b < nb; b++) dw[b * NO + j] = _cvtsh_ss(((const di_block_q4_0 *)(const void *)row)[b].d);
        break;
    case K_Q4_1:
        for (int64_t b = 0; b < nb; b++) {
            const di_block_q4_1 *bl = (const di_block_q4_1 *)(const void *)row + b;
            dw[b * NO + j] = _cvtsh_ss(bl->d);
            mw[b * NO + j] = _cvtsh_ss(bl->m);
        }
        break;
    case K_Q8_0:
        for (int64_t b = 0; b < nb; b++) dw[b * NO + j] = _cvtsh_ss(((const di_block_q8_0 *)(const void *)row)[b].d);
        break;
    case K_Q5_0:
        for (int64_t b = 0; b < nb; b++) dw[b * NO + j] = _cvtsh_ss(((const di_block_q5_0 *)(const void *)row)[b].d);
        break;
    default:
        for (int64_t sb = 0; sb < nb / 8; sb++) {
            const di_block_q4_K *bl = (const di_block_q4_K *)(const void *)row + sb;
            float d = _cvtsh_ss(bl->d), dmin = _cvtsh_ss(bl->dmin);
            for (int k = 0; k < 8; k++) {
                int sc, mn;
                di_q4_K_scale_min(bl->scales, k, &sc, &mn);
                dw[(sb * 8 + k) * NO + j] = d * (float)sc;
                mw[(sb * 8 + k) * NO + j] = -dmin * (float)mn;
            }
        }
        break;
    }
}

/* Bytes per 32-element block of a Q4_0/Q4_1/Q5_0/Q8_0 row (Q4_K: per 256). */
static inline int64_t block_bytes(int kind) {
    return kind == K_Q4_0 ? 18 : kind == K_Q4_1 ? 20 : kind == K_Q8_0 ? 34 : kind == K_Q5_0 ? 22 : 144;
}

/* Scales (and Q4_1 minimums) of block b of the 16 rows, gathered: the f16
 * d (and m) start each block; missing outputs (mask off) get 0. */
TGT static inline ALWAYS void gather_scales(int kind, const uint8_t *base, __m512i offs, __mmask16 keep, int64_t b,
                                            float *dw, float *mw) {
    __m512i g = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), keep, offs, base + b * block_bytes(kind), 1);
    _mm512_store_ps(dw + b * NO, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(g)));
    if (kind == K_Q4_1) _mm512_store_ps(mw + b * NO, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(g, 16))));
}

/* Q4_K: scales and minimums of the 8 sub-blocks of super-block sb of the
 * 16 rows (as di_q4_K_scale_min and row_scales), from 4 gathers: d|dmin and
 * the 12 scale bytes as 3 dwords s0 (bytes 0-3), s1 (4-7), s2 (8-11). */
TGT static inline ALWAYS void gather_scales_q4_K(const uint8_t *base, __m512i offs, __mmask16 keep, int64_t sb,
                                                 float *dw, float *mw) {
    const uint8_t *p = base + sb * (int64_t)sizeof(di_block_q4_K);
    const __m512i z = _mm512_setzero_si512(), m6 = _mm512_set1_epi32(63), m4 = _mm512_set1_epi32(15);
    const __m512i m2 = _mm512_set1_epi32(3);
    __m512i dd = _mm512_mask_i32gather_epi32(z, keep, offs, p, 1);
    __m512i s0 = _mm512_mask_i32gather_epi32(z, keep, offs, p + 4, 1);
    __m512i s1 = _mm512_mask_i32gather_epi32(z, keep, offs, p + 8, 1);
    __m512i s2 = _mm512_mask_i32gather_epi32(z, keep, offs, p + 12, 1);
    const __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dd));
    const __m512 dmin = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dd, 16)));
    const __m512 ndmin = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(dmin), _mm512_set1_epi32(INT32_MIN)));
    for (int j = 0; j < 8; j++) {
        __m512i sc, mn;
        if (j < 4) {
            sc = _mm512_and_si512(_mm512_srli_epi32(s0, 8 * j), m6);
            mn = _mm512_and_si512(_mm512_srli_epi32(s1, 8 * j), m6);
        } else {
            const int i = 8 * (j - 4);
            sc = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(s2, i), m4),
                                 _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(s0, i + 6), m2), 4));
            mn = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(s2, i + 4), m4),
                                 _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(s1, i + 6), m2), 4));
        }
        _mm512_store_ps(dw + (sb * 8 + j) * NO, _mm512_mul_ps(d, _mm512_cvtepi32_ps(sc)));
        _mm512_store_ps(mw + (sb * 8 + j) * NO, _mm512_mul_ps(ndmin, _mm512_cvtepi32_ps(mn)));
    }
}

/* 16 bytes at byte off of 4 rows, one row per 128-bit lane (0: missing). */
TGT static inline ALWAYS __m512i load4(const uint8_t *const *rows, int64_t off) {
    __m512i v = _mm512_setzero_si512();
    if (rows[0]) v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(const void *)(rows[0] + off)));
    if (rows[1]) v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(const void *)(rows[1] + off)), 1);
    if (rows[2]) v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(const void *)(rows[2] + off)), 2);
    if (rows[3]) v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(const void *)(rows[3] + off)), 3);
    return v;
}

/* v[m] holds rows 4m..4m+3 (one per 128-bit lane) x dwords k0..k0+3 ->
 * out + 64 k for k = k0..k0+3: 16 rows of dword k. Two rounds of 2-source
 * permutes: first dwords {k0, k0+1} and {k0+2, k0+3} of 8 rows, then the
 * two 8-row halves side by side. */
TGT static inline ALWAYS void transpose4x16(const __m512i *v, int8_t *out) {
    const __m512i ia = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 1, 5, 9, 13, 17, 21, 25, 29);
    const __m512i ib = _mm512_setr_epi32(2, 6, 10, 14, 18, 22, 26, 30, 3, 7, 11, 15, 19, 23, 27, 31);
    const __m512i lo8 = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23);
    const __m512i hi8 = _mm512_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
    __m512i pa = _mm512_permutex2var_epi32(v[0], ia, v[1]), pb = _mm512_permutex2var_epi32(v[0], ib, v[1]);
    __m512i qa = _mm512_permutex2var_epi32(v[2], ia, v[3]), qb = _mm512_permutex2var_epi32(v[2], ib, v[3]);
    _mm512_store_si512((void *)(out + 0), _mm512_permutex2var_epi32(pa, lo8, qa));
    _mm512_store_si512((void *)(out + 64), _mm512_permutex2var_epi32(pa, hi8, qa));
    _mm512_store_si512((void *)(out + 128), _mm512_permutex2var_epi32(pb, lo8, qb));
    _mm512_store_si512((void *)(out + 192), _mm512_permutex2var_epi32(pb, hi8, qb));
}

/* Scales dw and offsets mw (nb, NO) of outputs o .. o+nc-1 (nc <= 16;
 * missing ones are 0). */
TGT static inline ALWAYS void prep_scales(int kind, const void *w, uint64_t row_bytes, int64_t o, int nc,
                                          int64_t nb, float *dw, float *mw) {
    const __mmask16 keep = (__mmask16)((1u << nc) - 1u);
    if (row_bytes <= (uint64_t)INT32_MAX / NO) {
        const __m512i offs = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                                _mm512_set1_epi32((int)row_bytes));
        const uint8_t *base = (const uint8_t *)w + (uint64_t)o * row_bytes;
        if (kind == K_Q4_K)
            for (int64_t sb = 0; sb < nb / 8; sb++) gather_scales_q4_K(base, offs, keep, sb, dw, mw);
        else
            for (int64_t b = 0; b < nb; b++) gather_scales(kind, base, offs, keep, b, dw, mw);
        return;
    }
    for (int j = 0; j < NO; j++) {
        if (j < nc) {
            row_scales(kind, (const uint8_t *)w + (uint64_t)(o + j) * row_bytes, nb, dw, mw, j);
        } else {
            for (int64_t b = 0; b < nb; b++) dw[b * NO + j] = mw[b * NO + j] = 0.0f;
        }
    }
}

/* Outputs o .. o+nc-1 -> at (nb A tiles of BLOCK_TILE_BYTES: row j = the
 * 32 signed weight integers of block b of output o+j in element order;
 * rows from nc on are 0). Q4_0/Q4_1: low nibbles are elements 0-15, high
 * 16-31 (Q4_0 minus 8); Q4_K: sub-block 2c the low and 2c+1 the high
 * nibbles of the same 32 bytes; Q5_0: as Q4_0 with the high bit of element
 * e (bit e of qh) adding 16, minus 16; Q8_0: the bytes as stored. Two rows
 * per 512-bit vector. */
TGT static inline ALWAYS void unpack_group(int kind, const void *w, uint64_t row_bytes, int64_t o, int nc,
                                           int64_t nb, int8_t *at) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), eight = _mm512_set1_epi8(8), sixteen = _mm512_set1_epi8(16);
    /* lanes [lo0 hi0 lo1 hi1]: 128-bit lanes 0, 2 of lo/hi (row 0 and 1 in lanes 0 and 1) */
    const __m512i il = _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11);
    for (int j = 0; j < NO; j += 2) {
        const uint8_t *r0 = j < nc ? (const uint8_t *)w + (uint64_t)(o + j) * row_bytes : NULL;
        const uint8_t *r1 = j + 1 < nc ? (const uint8_t *)w + (uint64_t)(o + j + 1) * row_bytes : NULL;
        if (kind == K_Q4_K) {
            for (int64_t c = 0; c < nb / 2; c++) {
                const int64_t off = (c >> 2) * (int64_t)sizeof(di_block_q4_K) + 16 + 32 * (c & 3);
                __m512i v = _mm512_setzero_si512();
                if (r0) v = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(const void *)(r0 + off)));
                if (r1) v = _mm512_inserti64x4(v, _mm256_loadu_si256((const __m256i *)(const void *)(r1 + off)), 1);
                _mm512_store_si512((void *)(at + 2 * c * BLOCK_TILE_BYTES + 32 * j), _mm512_and_si512(v, m4));
                _mm512_store_si512((void *)(at + (2 * c + 1) * BLOCK_TILE_BYTES + 32 * j),
                                   _mm512_and_si512(_mm512_srli_epi16(v, 4), m4));
            }
            continue;
        }
        for (int64_t b = 0; b < nb; b++) {
            int8_t *dst = at + b * BLOCK_TILE_BYTES + 32 * j;
            if (kind == K_Q8_0) {
                const int64_t off = b * block_bytes(kind) + 2;
                __m512i v = _mm512_setzero_si512();
                if (r0) v = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(const void *)(r0 + off)));
                if (r1) v = _mm512_inserti64x4(v, _mm256_loadu_si256((const __m256i *)(const void *)(r1 + off)), 1);
                _mm512_store_si512((void *)dst, v);
                continue;
            }
            if (kind == K_Q5_0) { /* row 0's elements in bytes 0-31, row 1's in 32-63 */
                const int64_t off = b * block_bytes(kind);
                __m512i v = _mm512_setzero_si512();
                uint32_t h0 = 0, h1 = 0;
                if (r0) {
                    v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(const void *)(r0 + off + 6)));
                    memcpy(&h0, r0 + off + 2, sizeof h0);
                }
                if (r1) {
                    v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(const void *)(r1 + off + 6)), 1);
                    memcpy(&h1, r1 + off + 2, sizeof h1);
                }
                __m512i t = _mm512_permutex2var_epi64(_mm512_and_si512(v, m4), il,
                                                      _mm512_and_si512(_mm512_srli_epi16(v, 4), m4));
                t = _mm512_mask_add_epi8(t, (__mmask64)h0 | (__mmask64)h1 << 32, t, sixteen);
                const __mmask64 live = (r0 ? 0xFFFFFFFFull : 0) | (r1 ? 0xFFFFFFFFull << 32 : 0);
                _mm512_store_si512((void *)dst, _mm512_mask_sub_epi8(t, live, t, sixteen)); /* missing rows stay 0 */
                continue;
            }
            const int64_t off = b * block_bytes(kind) + (kind == K_Q4_0 ? 2 : 4);
            __m512i v = _mm512_setzero_si512();
            if (r0) v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(const void *)(r0 + off)));
            if (r1) v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(const void *)(r1 + off)), 1);
            __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
            if (kind == K_Q4_0) { /* signed: nibble - 8; missing rows stay 0 */
                const __mmask64 live = (r0 ? 0xFFFFull : 0) | (r1 ? 0xFFFFull << 16 : 0);
                lo = _mm512_mask_sub_epi8(lo, live, lo, eight);
                hi = _mm512_mask_sub_epi8(hi, live, hi, eight);
            }
            _mm512_store_si512((void *)dst, _mm512_permutex2var_epi64(lo, il, hi));
        }
    }
}

/* ---- activation packing ------------------------------------------------------ */

/* Activation rows r0 .. r0+n-1 -> bt (ceil(n/16) row tiles x nb blocks of
 * BLOCK_TILE_BYTES, VNNI: row k holds elements 4k..4k+3 of each of the 16
 * rows) and their scales dt, st ((tile, block), 16 rows); rows from n on
 * are 0 (their sums are 0 and never stored). */
TGT static inline ALWAYS void pack_rows(const di_q8_rows *x, int64_t r0, int64_t n, int64_t nb, int8_t *bt,
                                        float *dt, float *st) {
    /* the scales of 16 rows by one gather when their offsets fit int32 */
    const int gather = x->ldb <= INT32_MAX / MR;
    const __m512i ldb = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                           _mm512_set1_epi32(gather ? (int)x->ldb : 0));
    for (int64_t t = 0; t * MR < n; t++) {
        const uint8_t *rows[MR];
        const int nr = n - t * MR < MR ? (int)(n - t * MR) : MR;
        for (int i = 0; i < MR; i++)
            rows[i] = i < nr ? (const uint8_t *)(const void *)(x->q + (r0 + t * MR + i) * x->ldq) : NULL;
        const __mmask16 live = (__mmask16)((1u << nr) - 1u);
        for (int64_t b = 0; b < nb; b++) {
            __m512i a[4], e[4];
            for (int m = 0; m < 4; m++) {
                a[m] = load4(rows + 4 * m, 32 * b);
                e[m] = load4(rows + 4 * m, 32 * b + 16);
            }
            int8_t *out = bt + (t * nb + b) * BLOCK_TILE_BYTES;
            transpose4x16(a, out);
            transpose4x16(e, out + 256);
            const int64_t xb = (r0 + t * MR) * x->ldb + b;
            float *d = dt + (t * nb + b) * MR, *s = st + (t * nb + b) * MR;
            if (gather) {
                _mm512_store_ps(d, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), live, ldb, x->d + xb, 4));
                _mm512_store_ps(s, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), live, ldb, x->s + xb, 4));
                continue;
            }
            for (int i = 0; i < MR; i++) {
                d[i] = i < nr ? x->d[xb + i * x->ldb] : 0.0f;
                s[i] = i < nr ? x->s[xb + i * x->ldb] : 0.0f;
            }
        }
    }
}

/* ---- tile products and the float epilogue ----------------------------------- */

/* Scales the block sums c of block b (row j: output j against the 16
 * activation rows) into acc (acc[j]: output j, lane i: row i). dx, sx: the
 * 16 rows' activation scale and d * sum(q) of block b. */
TGT static inline ALWAYS void epilogue(int kind, const int32_t *c, __m512 *acc, const float *dw, const float *mw,
                                       const float *dx, const float *sx, int64_t b) {
    const __m512 vdx = _mm512_load_ps(dx), vsx = _mm512_load_ps(sx);
#pragma GCC unroll 16
    for (int j = 0; j < NO; j++) {
        const __m512 isum = _mm512_cvtepi32_ps(_mm512_load_si512((const void *)(c + MR * j)));
        acc[j] = _mm512_fmadd_ps(isum, _mm512_mul_ps(_mm512_set1_ps(dw[b * NO + j]), vdx), acc[j]);
        if (kind == K_Q4_1 || kind == K_Q4_K) acc[j] = _mm512_fmadd_ps(_mm512_set1_ps(mw[b * NO + j]), vsx, acc[j]);
    }
}

/* Few rows (nr <= FEW_ROWS, e.g. decode): scaling 16 lanes of rows for
 * each output wastes most of the work, so the sums of row i are gathered
 * as a column of c and acc[i] holds row i's 16 outputs instead (the same
 * operations per (row, output), so the same bits). */
#define FEW_ROWS 4
TGT static inline ALWAYS void epilogue_few(int kind, const int32_t *c, int nr, __m512 *acc, const float *dw,
                                           const float *mw, const float *dx, const float *sx, int64_t b) {
    const __m512 vdw = _mm512_load_ps(dw + b * NO), vmw = _mm512_load_ps(mw + b * NO);
    const __m512i col = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                           _mm512_set1_epi32(MR));
#pragma GCC unroll 4
    for (int i = 0; i < FEW_ROWS; i++) {
        if (i >= nr) break;
        const __m512i sums = _mm512_i32gather_epi32(_mm512_add_epi32(col, _mm512_set1_epi32(i)), c, 4);
        const __m512 isum = _mm512_cvtepi32_ps(sums);
        acc[i] = _mm512_fmadd_ps(isum, _mm512_mul_ps(vdw, _mm512_set1_ps(dx[i])), acc[i]);
        if (kind == K_Q4_1 || kind == K_Q4_K) acc[i] = _mm512_fmadd_ps(vmw, _mm512_set1_ps(sx[i]), acc[i]);
    }
}

/* Step j of the pipeline, phase k = j % 4 (tile numbers are literals):
 * issue block j's product into C tile k, store block j-2's C tile to its
 * slot, scale block j-4 from slot k. FULL: all three happen (no tests, so
 * the steady loop is straight-line code and acc stays in registers). */
#define STEP_ISSUE(k, TA, TB, TC)                                                                  \
    do {                                                                                           \
        _tile_loadd(TA, a + (j0 + (k)) * a_block, a_stride);                                      \
        _tile_loadd(TB, bt + (j0 + (k)) * BLOCK_TILE_BYTES, 64);                                   \
        _tile_zero(TC);                                                                            \
        _tile_dpbssd(TC, TA, TB);                                                                  \
    } while (0)
#define STEP_STORE(k, TCS) _tile_stored(TCS, cbuf + (((k) + 2) & 3) * MR * NO, 64)
#define STEP_EPI(k)                                                                                \
    do {                                                                                           \
        const int64_t bb = j0 + (k)-4;                                                             \
        if (few) epilogue_few(kind, cbuf + (k)*MR * NO, nr, acc, dw, mw, dt + bb * MR, st + bb * MR, bb); \
        else epilogue(kind, cbuf + (k)*MR * NO, acc, dw, mw, dt + bb * MR, st + bb * MR, bb);        \
    } while (0)
#define STEP_FULL(k, TA, TB, TC, TCS)                                                              \
    do {                                                                                           \
        STEP_ISSUE(k, TA, TB, TC);                                                                 \
        STEP_STORE(k, TCS);                                                                        \
        STEP_EPI(k);                                                                               \
    } while (0)
#define STEP(k, TA, TB, TC, TCS)                                                                   \
    do {                                                                                           \
        const int64_t j = j0 + (k);                                                                \
        if (j < nb) STEP_ISSUE(k, TA, TB, TC);                                                     \
        if (j >= 2 && j - 2 < nb) STEP_STORE(k, TCS);                                              \
        if (j >= 4 && j - 4 < nb) STEP_EPI(k);                                                     \
    } while (0)

/* In-register 16 x 16 transpose of floats: v[i] lane j -> v[j] lane i
 * (unpack within 128-bit lanes, then two rounds of 128-bit shuffles). */
TGT static inline ALWAYS void transpose16(__m512 *v) {
    __m512 t[16];
#pragma GCC unroll 8
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(v[i], v[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(v[i], v[i + 1]);
    }
#pragma GCC unroll 4
    for (int i = 0; i < 16; i += 4) {
        v[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
        v[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
        v[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
        v[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
    }
    /* v[4q + c] now holds, per 128-bit lane l, rows 4q..4q+3 of column 4l + c */
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        __m512 a = _mm512_shuffle_f32x4(v[c], v[4 + c], 0x88), b = _mm512_shuffle_f32x4(v[c], v[4 + c], 0xDD);
        __m512 e = _mm512_shuffle_f32x4(v[8 + c], v[12 + c], 0x88), f = _mm512_shuffle_f32x4(v[8 + c], v[12 + c], 0xDD);
        t[c] = _mm512_shuffle_f32x4(a, e, 0x88);      /* column c */
        t[8 + c] = _mm512_shuffle_f32x4(a, e, 0xDD);  /* column 8 + c */
        t[4 + c] = _mm512_shuffle_f32x4(b, f, 0x88);  /* column 4 + c */
        t[12 + c] = _mm512_shuffle_f32x4(b, f, 0xDD); /* column 12 + c */
    }
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) v[i] = t[i];
}

/* One group (16 outputs, A tiles at a: block b at a + b * a_block, rows
 * a_stride apart) against one packed row tile (bt, dt, st) into
 * y[i * ldy + j] for rows i < nr and outputs j < nc. acc is indexed by
 * constants only (the loops unroll), so it stays in 16 registers. */
TGT static inline ALWAYS void tile_pair(int kind, const int8_t *a, int64_t a_block, long a_stride, const float *dw,
                                        const float *mw, const int8_t *bt, const float *dt, const float *st,
                                        int64_t nb, int32_t *cbuf, float *y, int64_t ldy, int nr, int nc,
                                        const int few) {
    __m512 acc[NO];
#pragma GCC unroll 16
    for (int j = 0; j < NO; j++) acc[j] = _mm512_setzero_ps();
    int64_t j0 = 0;
    STEP(0, T_A0, T_B0, T_C0, T_C2);
    STEP(1, T_A1, T_B1, T_C1, T_C3);
    STEP(2, T_A0, T_B0, T_C2, T_C0);
    STEP(3, T_A1, T_B1, T_C3, T_C1);
    for (j0 = C_SLOTS; j0 + C_SLOTS <= nb; j0 += C_SLOTS) {
        STEP_FULL(0, T_A0, T_B0, T_C0, T_C2);
        STEP_FULL(1, T_A1, T_B1, T_C1, T_C3);
        STEP_FULL(2, T_A0, T_B0, T_C2, T_C0);
        STEP_FULL(3, T_A1, T_B1, T_C3, T_C1);
    }
    for (; j0 < nb + C_SLOTS; j0 += C_SLOTS) {
        STEP(0, T_A0, T_B0, T_C0, T_C2);
        STEP(1, T_A1, T_B1, T_C1, T_C3);
        STEP(2, T_A0, T_B0, T_C2, T_C0);
        STEP(3, T_A1, T_B1, T_C3, T_C1);
    }
    const __mmask16 keep = (__mmask16)((1u << nc) - 1u);
    /* (every acc index a constant once unrolled: an index that varies at
     * run time would keep the whole array in memory, a load and a store
     * per row and block) */
    if (few) { /* acc is (row, output) already */
#pragma GCC unroll 4
        for (int i = 0; i < FEW_ROWS; i++)
            if (i < nr) _mm512_mask_storeu_ps(y + i * ldy, keep, acc[i]);
        return;
    }
    /* acc is (output, row): transpose to y's (row, output) */
    transpose16(acc);
#pragma GCC unroll 16
    for (int i = 0; i < MR; i++)
        if (i < nr) _mm512_mask_storeu_ps(y + i * ldy, keep, acc[i]);
}

/* Small batches (decode; gemm_q8.h has the limits): the VNNI path of
 * gemm_q8_amx_few.c with the same numerics, group by group, with the same
 * scales. No tile state is touched. scratch: dw and mw of one group, then
 * the rows' block sums of q. */
TGT static inline ALWAYS void gemm_few(int kind, const void *w, uint64_t row_bytes, int64_t o0, int64_t o1,
                                       const di_q8_rows *x, int64_t n_rows, int64_t nb, float *y, int64_t ldy,
                                       float *scratch) {
    float *dw = (float *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63), *mw = dw + nb * NO;
    int32_t *qsum = (int32_t *)(void *)(mw + nb * NO);
    if (kind == K_Q4_0 || kind == K_Q5_0 || kind == K_Q8_0) di_gemm_q8_amx_few_qsum(x, n_rows, nb, qsum);
    for (int64_t o = o0; o < o1; o += NO) {
        const int nc = o1 - o < NO ? (int)(o1 - o) : NO;
        prep_scales(kind, w, row_bytes, o, nc, nb, dw, mw);
        float *yo = y + o;
        switch (kind) {
        case K_Q4_0:
            di_gemm_q8_amx_few_q4_0(w, row_bytes, o, nc, dw, mw, x, qsum, (int)n_rows, nb, yo, ldy);
            break;
        case K_Q4_1:
            di_gemm_q8_amx_few_q4_1(w, row_bytes, o, nc, dw, mw, x, qsum, (int)n_rows, nb, yo, ldy);
            break;
        case K_Q8_0:
            di_gemm_q8_amx_few_q8_0(w, row_bytes, o, nc, dw, mw, x, qsum, (int)n_rows, nb, yo, ldy);
            break;
        case K_Q5_0:
            di_gemm_q8_amx_few_q5_0(w, row_bytes, o, nc, dw, mw, x, qsum, (int)n_rows, nb, yo, ldy);
            break;
        default:
            di_gemm_q8_amx_few_q4_K(w, row_bytes, o, nc, dw, mw, x, qsum, (int)n_rows, nb, yo, ldy);
            break;
        }
    }
}

/* scratch: di_gemm_q8_scratch_floats(n_in) floats, 64-byte aligned inside:
 * the packed activations of up to DI_GEMM_Q8_AMX_ROWS rows (n_in bytes and
 * 2 floats per block each), one group's A tiles (nb * 512 bytes) and its
 * scales (2 * nb * NO floats). Rows go in chunks of DI_GEMM_Q8_AMX_ROWS,
 * packed once per chunk; each group's weights are unpacked once per chunk
 * (Q8_0 full groups: not at all, the tiles load straight from the rows)
 * and run against every row tile of the chunk. */
TGT static inline ALWAYS void gemm(int kind, const void *w, uint64_t row_bytes, int64_t o0, int64_t o1,
                                   const di_q8_rows *x, int64_t n_rows, int64_t n_in, float *y, int64_t ldy,
                                   float *scratch) {
    const int64_t nb = n_in / DI_Q8_ACT_BLOCK;
    if (n_rows <= 0 || o0 >= o1) return;
    if (nb == 0) { /* an empty dot, as the other tables: 0 */
        for (int64_t r = 0; r < n_rows; r++)
            for (int64_t o = o0; o < o1; o++) y[r * ldy + o] = 0.0f;
        return;
    }
    if (n_rows < (kind == K_Q8_0 ? DI_GEMM_Q8_AMX_FEW_ROWS_Q8_0 : DI_GEMM_Q8_AMX_FEW_ROWS)) {
        gemm_few(kind, w, row_bytes, o0, o1, x, n_rows, nb, y, ldy, scratch);
        return;
    }
    int8_t *bt = (int8_t *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    int8_t *at = bt + DI_GEMM_Q8_AMX_ROWS * n_in;
    float *dt = (float *)(void *)(at + nb * BLOCK_TILE_BYTES), *st = dt + DI_GEMM_Q8_AMX_ROWS * nb;
    float *dw = st + DI_GEMM_Q8_AMX_ROWS * nb, *mw = dw + nb * NO;
    _Alignas(64) int32_t cbuf[C_SLOTS * MR * NO];
    load_config();
    for (int64_t rc = 0; rc < n_rows; rc += DI_GEMM_Q8_AMX_ROWS) {
        const int64_t n = n_rows - rc < DI_GEMM_Q8_AMX_ROWS ? n_rows - rc : DI_GEMM_Q8_AMX_ROWS;
        const int8_t *pt = bt;
        const float *pd = dt, *ps = st;
        if (x->tiles && n_rows >= DI_GEMM_Q8_AMX_FEW_ROWS) { /* packed once for every task (matmul.c) */
            pt = x->tiles + rc / MR * nb * BLOCK_TILE_BYTES;
            pd = x->td + rc / MR * nb * MR;
            ps = x->ts + rc / MR * nb * MR;
        } else {
            pack_rows(x, rc, n, nb, bt, dt, st);
        }
        for (int64_t o = o0; o < o1; o += NO) {
            const int nc = o1 - o < NO ? (int)(o1 - o) : NO;
            prep_scales(kind, w, row_bytes, o, nc, nb, dw, mw);
            const int8_t *a = at;
            int64_t a_block = BLOCK_TILE_BYTES;
            long a_stride = 32;
            if (kind == K_Q8_0 && nc == NO && row_bytes <= (uint64_t)INT32_MAX) {
                a = (const int8_t *)w + (uint64_t)o * row_bytes + 2; /* block b's qs, rows row_bytes apart */
                a_block = block_bytes(kind);
                a_stride = (long)row_bytes;
            } else {
                unpack_group(kind, w, row_bytes, o, nc, nb, at);
            }
            for (int64_t t = 0; t * MR < n; t++) {
                const int nr = n - t * MR < MR ? (int)(n - t * MR) : MR;
                const int8_t *b = pt + t * nb * BLOCK_TILE_BYTES;
                const float *d = pd + t * nb * MR, *sm = ps + t * nb * MR;
                float *yt = y + (rc + t * MR) * ldy + o;
                if (nr <= FEW_ROWS)
                    tile_pair(kind, a, a_block, a_stride, dw, mw, b, d, sm, nb, cbuf, yt, ldy, nr, nc, 1);
                else
                    tile_pair(kind, a, a_block, a_stride, dw, mw, b, d, sm, nb, cbuf, yt, ldy, nr, nc, 0);
            }
        }
    }
    _tile_release();
}

#define DEFINE_GEMM(name, kind)                                                                        \
    TGT void di_gemm_q8_##name##_amx(const void *w, uint64_t row_bytes, int64_t o0, int64_t o1,         \
                                     const di_q8_rows *x, int64_t n_rows, int64_t n_in, float *y,       \
                                     int64_t ldy, float *scratch) {                                     \
        gemm(kind, w, row_bytes, o0, o1, x, n_rows, n_in, y, ldy, scratch);                            \
    }

DEFINE_GEMM(q4_0, K_Q4_0)
DEFINE_GEMM(q4_1, K_Q4_1)
DEFINE_GEMM(q5_0, K_Q5_0)
DEFINE_GEMM(q8_0, K_Q8_0)
DEFINE_GEMM(q4_K, K_Q4_K)

/* Row tiles [t0, t1) of all n_rows rows, for matmul.c's shared packing
 * (tiles, td, ts 64-byte aligned, laid out as pack_rows from tile 0). */
TGT void di_pack_q8_amx(const di_q8_rows *x, int64_t n_rows, int64_t n_in, int64_t t0, int64_t t1, int8_t *tiles,
                        float *td, float *ts) {
    const int64_t nb = n_in / DI_Q8_ACT_BLOCK, r0 = t0 * MR, r1 = t1 * MR < n_rows ? t1 * MR : n_rows;
    /* below DI_GEMM_Q8_AMX_FEW_ROWS nothing is packed: the VNNI path reads
     * x->q, and a Q8_0 gemm on tiles packs its few rows itself */
    if (r0 >= r1 || nb == 0 || n_rows < DI_GEMM_Q8_AMX_FEW_ROWS) return;
    pack_rows(x, r0, r1 - r0, nb, tiles + t0 * nb * BLOCK_TILE_BYTES, td + t0 * nb * MR, ts + t0 * nb * MR);
}

/* Quantization is the AVX2 one (the same bits in every table). */
void di_quantize_q8_amx(const float *x, int8_t *q, float *d, float *s, int64_t n) {
    di_quantize_q8_avx2(x, q, d, s, n);
}

/* Linux keeps the 8 KiB tile data state off until a process asks for it. */
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

int di_amx_request_permission(void) {
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}

#endif
