/* The int8-activation gemm on AMX tiles (Sapphire Rapids and later): the
 * gemm_q8 entries of the "avx512-amx-q8" table, for every row count.
 *
 * Per tile product (TDPBSSD, signed x signed bytes into int32):
 *   A = 16 activation rows x one 32-element block, read straight from the
 *       quantized rows (stride ldq);
 *   B = the same block of 16 weight rows in the VNNI layout (row k holds
 *       elements 4k..4k+3 of each of the 16 outputs), built per group of 16
 *       outputs in the task's scratch (prep_group: scales gathered, nibbles
 *       unpacked, Q4_0's -8 applied, 4 rows per vector through a two-round
 *       dword transpose). Not repacked at load: at 512 rows this costs ~3%
 *       of the gemm, at 32 rows 20-25%, at 1 row (decode) ~60%, and the
 *       1-row call is still faster than avx512-q8 (bench/README.md);
 *   C = 16 x 16 exact block sums isum, stored to L1 and scaled in floats.
 * One tile product covers ONE block (K = 32) because every block has its own
 * weight and activation scales: the sums of two blocks never mix.
 *
 * Numerics (per activation row r and output o, blocks b in order):
 *   acc = fma((float)isum_b, dw_b * dx_b, acc)
 *   acc = fma(mw_b, s_b, acc)            (Q4_1 and Q4_K only: the minimums)
 * with isum_b the exact integer dot of block b (Q4_0's offset -8 and Q8_0's
 * sign are inside it), dw/mw the block scale and offset (gemm_q8_c.c) and
 * dx, s the activation block's scale and d * sum(q). Each (r, o) pair runs
 * this same sequence whatever tile it sits in (full 16-row tile or the
 * remainder tile), the batch size, the output range or the thread, so the
 * table is batch-invariant. It is NOT bit-identical to "avx512-q8", which
 * scales 16 lanes of 4-element partial sums (gemm_q8_avx512.c); both stay
 * within the int8 error bound of the reference (tests/kernels).
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
#define NO 16 /* outputs per group: the tile's 16 int32 columns */
#define MR 16 /* activation rows per full tile */
#define BLOCK_TILE_BYTES 512 /* one block of 16 outputs, VNNI layout */

enum { K_Q4_0, K_Q4_1, K_Q8_0, K_Q4_K };

/* Tile registers: A, B and C alternate between two registers per block so
 * consecutive blocks overlap; the remainder rows (fewer than 16, after full
 * tiles) have their own A and C shapes. */
#define T_A0 0 /* (GCC's tile intrinsics paste the number into the asm) */
#define T_A1 1
#define T_B0 2
#define T_B1 3
#define T_C0 4
#define T_C1 5
#define T_AR 6
#define T_CR 7

typedef struct tile_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

/* main: rows of the A0/A1/C0/C1 tiles; rem: of the remainder tiles. */
TGT static void load_config(int main, int rem) {
    tile_config c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    const int rows[8] = {main, main, 8, 8, main, main, rem, rem};
    const int cols[8] = {32, 32, 64, 64, 64, 64, 32, 64};
    for (int t = 0; t < 8; t++) {
        c.rows[t] = (uint8_t)rows[t];
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

/* Bytes per 32-element block of a Q4_0/Q4_1/Q8_0 row (Q4_K: per 256). */
static inline int64_t block_bytes(int kind) {
    return kind == K_Q4_0 ? 18 : kind == K_Q4_1 ? 20 : kind == K_Q8_0 ? 34 : 144;
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

/* 16 nibble bytes of 4 rows (block b) -> the low nibbles (elements 0-15,
 * dwords k = 0..3) and high nibbles (k = 4..7), one row per 128-bit lane. */
TGT static inline ALWAYS void nibbles4(int kind, const uint8_t *const *rows, int64_t b, __m512i *lo, __m512i *hi) {
    const __m512i v = load4(rows, b * block_bytes(kind) + (kind == K_Q4_0 ? 2 : 4));
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    *lo = _mm512_and_si512(v, m4);
    *hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
    if (kind == K_Q4_0) { /* signed: nibble - 8; missing rows stay 0 */
        const __mmask64 live = (rows[0] ? 0xFFFFull : 0) | (rows[1] ? 0xFFFFull << 16 : 0) |
                               (rows[2] ? 0xFFFFull << 32 : 0) | (rows[3] ? 0xFFFFull << 48 : 0);
        *lo = _mm512_mask_sub_epi8(*lo, live, *lo, _mm512_set1_epi8(8));
        *hi = _mm512_mask_sub_epi8(*hi, live, *hi, _mm512_set1_epi8(8));
    }
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

/* Outputs o .. o+nc-1 (nc <= 16; missing ones are zero) -> bt (nb blocks of
 * BLOCK_TILE_BYTES, VNNI layout) and dw, mw (nb, NO).
 * Every kind loads 16 bytes of 4 rows per vector (load4) and transposes
 * them with transpose4x16: the low/high nibbles of Q4_0/Q4_1 (dwords 0-3 /
 * 4-7), the two halves of a Q8_0 block, and for Q4_K the two halves of the
 * 32 bytes that hold sub-blocks 2c (low nibbles) and 2c+1 (high). */
TGT static inline ALWAYS void prep_group(int kind, const void *w, uint64_t row_bytes, int64_t o, int nc,
                                         int64_t nb, int8_t *bt, float *dw, float *mw) {
    const uint8_t *rows[NO];
    for (int j = 0; j < NO; j++) rows[j] = j < nc ? (const uint8_t *)w + (uint64_t)(o + j) * row_bytes : NULL;
    const __mmask16 keep = (__mmask16)((1u << nc) - 1u);
    if (row_bytes <= (uint64_t)INT32_MAX / NO) {
        const __m512i offs = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                                _mm512_set1_epi32((int)row_bytes));
        const uint8_t *base = (const uint8_t *)w + (uint64_t)o * row_bytes;
        if (kind == K_Q4_K)
            for (int64_t sb = 0; sb < nb / 8; sb++) gather_scales_q4_K(base, offs, keep, sb, dw, mw);
        else
            for (int64_t b = 0; b < nb; b++) gather_scales(kind, base, offs, keep, b, dw, mw);
    } else {
        for (int j = 0; j < NO; j++) {
            if (rows[j]) {
                row_scales(kind, rows[j], nb, dw, mw, j);
            } else {
                for (int64_t b = 0; b < nb; b++) dw[b * NO + j] = mw[b * NO + j] = 0.0f;
            }
        }
    }
    if (kind == K_Q4_0 || kind == K_Q4_1) {
        for (int64_t b = 0; b < nb; b++) {
            __m512i lo[4], hi[4];
            for (int m = 0; m < 4; m++) nibbles4(kind, rows + 4 * m, b, &lo[m], &hi[m]);
            transpose4x16(lo, bt + b * BLOCK_TILE_BYTES);
            transpose4x16(hi, bt + b * BLOCK_TILE_BYTES + 256);
        }
        return;
    }
    if (kind == K_Q8_0) { /* elements 0-15 (dwords 0-3) and 16-31 (4-7), 4 rows per vector */
        for (int64_t b = 0; b < nb; b++) {
            __m512i a[4], e[4];
            for (int m = 0; m < 4; m++) {
                a[m] = load4(rows + 4 * m, b * block_bytes(kind) + 2);
                e[m] = load4(rows + 4 * m, b * block_bytes(kind) + 18);
            }
            transpose4x16(a, bt + b * BLOCK_TILE_BYTES);
            transpose4x16(e, bt + b * BLOCK_TILE_BYTES + 256);
        }
        return;
    }
    if (kind == K_Q4_K) { /* sub-blocks 2c (low nibbles) and 2c+1 (high) share 32 bytes */
        const __m512i m4 = _mm512_set1_epi8(0x0F);
        for (int64_t c = 0; c < nb / 2; c++) {
            const int64_t off = (c >> 2) * (int64_t)sizeof(di_block_q4_K) + 16 + 32 * (c & 3);
            __m512i a[4], e[4], v[4];
            for (int m = 0; m < 4; m++) {
                a[m] = load4(rows + 4 * m, off);      /* elements 0-15 */
                e[m] = load4(rows + 4 * m, off + 16); /* elements 16-31 */
            }
            int8_t *t0 = bt + 2 * c * BLOCK_TILE_BYTES, *t1 = t0 + BLOCK_TILE_BYTES;
            for (int m = 0; m < 4; m++) v[m] = _mm512_and_si512(a[m], m4);
            transpose4x16(v, t0);
            for (int m = 0; m < 4; m++) v[m] = _mm512_and_si512(e[m], m4);
            transpose4x16(v, t0 + 256);
            for (int m = 0; m < 4; m++) v[m] = _mm512_and_si512(_mm512_srli_epi16(a[m], 4), m4);
            transpose4x16(v, t1);
            for (int m = 0; m < 4; m++) v[m] = _mm512_and_si512(_mm512_srli_epi16(e[m], 4), m4);
            transpose4x16(v, t1 + 256);
        }
        return;
    }
}

/* ---- tile products and the float epilogue ----------------------------------- */

/* Scales the block sums c (nr rows of 16 int32) of block b into acc. */
TGT static inline ALWAYS void epilogue(int kind, const int32_t *c, int nr, __m512 *acc, const float *dw,
                                       const float *mw, const di_q8_rows *x, int64_t r0, int64_t b) {
    const __m512 vdw = _mm512_load_ps(dw + b * NO);
    const __m512 vmw = _mm512_load_ps(mw + b * NO);
#pragma GCC unroll 16
    for (int i = 0; i < nr; i++) {
        const int64_t xb = (r0 + i) * x->ldb + b;
        __m512 isum = _mm512_cvtepi32_ps(_mm512_load_si512((const void *)(c + NO * i)));
        acc[i] = _mm512_fmadd_ps(isum, _mm512_mul_ps(vdw, _mm512_set1_ps(x->d[xb])), acc[i]);
        if (kind == K_Q4_1 || kind == K_Q4_K) acc[i] = _mm512_fmadd_ps(vmw, _mm512_set1_ps(x->s[xb]), acc[i]);
    }
}

/* One block's tile product: A (activation rows) x B (the block's weights)
 * into a zeroed C. */
#define ISSUE(ta, tb, tc, blk)                                                                     \
    do {                                                                                           \
        _tile_loadd(ta, q + 32 * (blk), ldq);                                                      \
        _tile_loadd(tb, bt + (blk)*BLOCK_TILE_BYTES, 64);                                          \
        _tile_zero(tc);                                                                            \
        _tile_dpbssd(tc, ta, tb);                                                                  \
    } while (0)

/* Rows r0 .. r0+nr-1 (the row count the A0/A1/C0/C1 tiles are configured
 * with) against the prepared group. Software-pipelined: the products of
 * blocks b+2 and b+3 are issued before the epilogues of b and b+1, so the
 * tile unit works while the float epilogue runs. */
TGT static inline ALWAYS void pipelined_tile(int kind, const int nr, const int8_t *bt, const float *dw,
                                             const float *mw, int64_t nb, const di_q8_rows *x, int64_t r0,
                                             __m512 *acc, int32_t *cbuf) {
    const int8_t *q = x->q + r0 * x->ldq;
    const long ldq = (long)x->ldq;
    ISSUE(T_A0, T_B0, T_C0, 0);
    if (nb >= 2) ISSUE(T_A1, T_B1, T_C1, 1);
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
        _tile_stored(T_C0, cbuf, 64);
        _tile_stored(T_C1, cbuf + MR * NO, 64);
        if (b + 2 < nb) ISSUE(T_A0, T_B0, T_C0, b + 2);
        if (b + 3 < nb) ISSUE(T_A1, T_B1, T_C1, b + 3);
        epilogue(kind, cbuf, nr, acc, dw, mw, x, r0, b);
        epilogue(kind, cbuf + MR * NO, nr, acc, dw, mw, x, r0, b + 1);
    }
    if (b < nb) { /* odd nb: the last block is in C0 */
        _tile_stored(T_C0, cbuf, 64);
        epilogue(kind, cbuf, nr, acc, dw, mw, x, r0, b);
    }
}

/* The last n_rows % 16 rows after full tiles (the remainder shape). */
TGT static inline ALWAYS void rem_tile(int kind, int nr, const int8_t *bt, const float *dw, const float *mw,
                                       int64_t nb, const di_q8_rows *x, int64_t r0, __m512 *acc, int32_t *cbuf) {
    const int8_t *q = x->q + r0 * x->ldq;
    for (int64_t b = 0; b < nb; b++) {
        _tile_loadd(T_AR, q + 32 * b, (long)x->ldq);
        _tile_loadd(T_B0, bt + b * BLOCK_TILE_BYTES, 64);
        _tile_zero(T_CR);
        _tile_dpbssd(T_CR, T_AR, T_B0);
        _tile_stored(T_CR, cbuf, 64);
        epilogue(kind, cbuf, nr, acc, dw, mw, x, r0, b);
    }
}

/* scratch: di_gemm_q8_scratch_floats(n_in) floats = the group's tiles (nb *
 * 512 bytes) and scales (2 * nb * NO floats), 64-byte aligned inside. */
TGT static inline ALWAYS void gemm(int kind, const void *w, uint64_t row_bytes, int64_t o0, int64_t o1,
                                   const di_q8_rows *x, int64_t n_rows, int64_t n_in, float *y, int64_t ldy,
                                   float *scratch) {
    const int64_t nb = n_in / DI_Q8_ACT_BLOCK;
    if (n_rows <= 0 || o0 >= o1) return; /* (a tile of 0 rows is an invalid config) */
    if (nb == 0) { /* an empty dot, as the other tables: 0 */
        for (int64_t r = 0; r < n_rows; r++)
            for (int64_t o = o0; o < o1; o++) y[r * ldy + o] = 0.0f;
        return;
    }
    int8_t *bt = (int8_t *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    float *dw = (float *)(void *)(bt + nb * BLOCK_TILE_BYTES), *mw = dw + nb * NO;
    _Alignas(64) int32_t cbuf[2 * MR * NO];
    const int64_t n_full = n_rows / MR * MR;
    const int rem = (int)(n_rows - n_full);
    /* fewer than 16 rows in all (decode): the pipelined tiles take that
     * shape; else they are full and the remainder has its own tiles */
    const int only_rem = n_full == 0;
    load_config(only_rem ? rem : MR, rem ? rem : MR);
    for (int64_t o = o0; o < o1; o += NO) {
        const int nc = o1 - o < NO ? (int)(o1 - o) : NO;
        const __mmask16 keep = (__mmask16)((1u << nc) - 1u);
        prep_group(kind, w, row_bytes, o, nc, nb, bt, dw, mw);
        for (int64_t r = 0; r < n_rows; r += MR) {
            const int nr = r < n_full ? MR : rem;
            __m512 acc[MR]; /* full tiles: 16 registers (the loops unroll) */
#pragma GCC unroll 16
            for (int i = 0; i < MR; i++) acc[i] = _mm512_setzero_ps();
            if (nr == MR) {
                pipelined_tile(kind, MR, bt, dw, mw, nb, x, r, acc, cbuf);
#pragma GCC unroll 16
                for (int i = 0; i < MR; i++) _mm512_mask_storeu_ps(y + (r + i) * ldy + o, keep, acc[i]);
            } else {
                if (only_rem) pipelined_tile(kind, nr, bt, dw, mw, nb, x, r, acc, cbuf);
                else rem_tile(kind, nr, bt, dw, mw, nb, x, r, acc, cbuf);
                for (int i = 0; i < nr; i++) _mm512_mask_storeu_ps(y + (r + i) * ldy + o, keep, acc[i]);
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
DEFINE_GEMM(q8_0, K_Q8_0)
DEFINE_GEMM(q4_K, K_Q4_K)

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
