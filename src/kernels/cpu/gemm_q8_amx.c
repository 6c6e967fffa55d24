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

/* Tile registers: block b's product reads A and B tiles b % 2 and goes
 * to C tile b % 4, so four products are in flight. Tile registers are not
 * renamed and a tile store does not overlap the multiplies, so block b's
 * C is stored two blocks after its product was issued (the product is
 * done by then) and scaled two blocks after that (the stored sums have
 * reached L1). Remainder rows (fewer than 16) reload the configuration
 * with that many rows in A and C. */
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

/* rows: of the A and C tiles (16, or the remainder). */
TGT static void load_config(int rows) {
    tile_config c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    const int r[8] = {rows, rows, 8, 8, rows, rows, rows, rows};
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

/* Scales the block sums c (nr rows of 16 int32) of block b into acc; dx
 * and sx point at the first row's activation scale and d * sum(q) of
 * block b, ldb floats apart per row. */
TGT static inline ALWAYS void epilogue(int kind, const int32_t *c, int nr, __m512 *acc, const float *dw,
                                       const float *mw, const float *dx, const float *sx, int64_t ldb,
                                       int64_t b) {
    const __m512 vdw = _mm512_load_ps(dw + b * NO);
    const __m512 vmw = _mm512_load_ps(mw + b * NO);
#pragma GCC unroll 16
    for (int i = 0; i < nr; i++) {
        __m512 isum = _mm512_cvtepi32_ps(_mm512_load_si512((const void *)(c + NO * i)));
        acc[i] = _mm512_fmadd_ps(isum, _mm512_mul_ps(vdw, _mm512_set1_ps(dx[i * ldb])), acc[i]);
        if (kind == K_Q4_1 || kind == K_Q4_K) acc[i] = _mm512_fmadd_ps(vmw, _mm512_set1_ps(sx[i * ldb]), acc[i]);
    }
}

/* Step j of the pipeline, phase k = j % 4 (tile numbers are literals):
 * issue block j's product into C tile k, store block j-2's C tile to its
 * slot, scale block j-4 from slot k. FULL: all three happen (no tests, so
 * the steady loop is straight-line code and acc stays in registers). */
#define STEP_ISSUE(k, TA, TB, TC)                                                                  \
    do {                                                                                           \
        _tile_loadd(TB, bt + (j0 + (k)) * BLOCK_TILE_BYTES, 64);                                   \
        _tile_loadd(TA, q + 32 * (j0 + (k)), ldq);                                                 \
        _tile_zero(TC);                                                                            \
        _tile_dpbssd(TC, TA, TB);                                                                  \
    } while (0)
#define STEP_STORE(k, TCS) _tile_stored(TCS, cbuf + (((k) + 2) & 3) * MR * NO, 64)
#define STEP_EPI(k)                                                                                \
    epilogue(kind, cbuf + (k)*MR * NO, nr, acc, dw, mw, dx + (j0 + (k)-4), sx + (j0 + (k)-4), ldb, j0 + (k)-4)
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

/* Rows r0 .. r0+nr-1 (the row count the A and C tiles are configured
 * with) against the prepared group, every block, into acc. */
TGT static inline ALWAYS void tile_rows(int kind, const int nr, const int8_t *bt, const float *dw,
                                        const float *mw, int64_t nb, const di_q8_rows *x, int64_t r0,
                                        __m512 *acc, int32_t *cbuf) {
    const int8_t *q = x->q + r0 * x->ldq;
    const long ldq = (long)x->ldq;
    const int64_t ldb = x->ldb;
    const float *dx = x->d + r0 * ldb, *sx = x->s + r0 * ldb;
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
}

/* 16 rows x one group into y (16 rows of ldy; keep: the group's outputs).
 * Its own accumulator array, indexed by constants only once the loops
 * unroll, so GCC keeps it in 16 registers (an array also indexed by a
 * variable, as rem_tile's, stays in memory: a load and a store per row
 * and block). */
TGT static inline ALWAYS void full_tile(int kind, const int8_t *bt, const float *dw, const float *mw, int64_t nb,
                                        const di_q8_rows *x, int64_t r0, int32_t *cbuf, float *y, int64_t ldy,
                                        __mmask16 keep) {
    __m512 acc[MR];
#pragma GCC unroll 16
    for (int i = 0; i < MR; i++) acc[i] = _mm512_setzero_ps();
    tile_rows(kind, MR, bt, dw, mw, nb, x, r0, acc, cbuf);
#pragma GCC unroll 16
    for (int i = 0; i < MR; i++) _mm512_mask_storeu_ps(y + i * ldy, keep, acc[i]);
}

/* The same for nr < 16 rows (the configured remainder shape). */
TGT static inline ALWAYS void rem_tile(int kind, int nr, const int8_t *bt, const float *dw, const float *mw,
                                       int64_t nb, const di_q8_rows *x, int64_t r0, int32_t *cbuf, float *y,
                                       int64_t ldy, __mmask16 keep) {
    __m512 acc[MR];
    for (int i = 0; i < nr; i++) acc[i] = _mm512_setzero_ps();
    tile_rows(kind, nr, bt, dw, mw, nb, x, r0, acc, cbuf);
    for (int i = 0; i < nr; i++) _mm512_mask_storeu_ps(y + i * ldy, keep, acc[i]);
}

/* scratch: di_gemm_q8_scratch_floats(n_in) floats = up to
 * DI_GEMM_Q8_AMX_GROUPS groups' tiles (nb * 512 bytes) and scales (2 * nb
 * * NO floats), 64-byte aligned inside. The groups of one chunk are
 * prepared first, then every 16-row tile of activations runs against all
 * of them: its rows (16 * n_in bytes) stay in L1 while the prepared
 * weights stream from L2 in order (rows outer, groups inner measured 1.3x
 * faster at 512 rows than groups outer, which streamed the activations
 * from L2 with 16 strided lines per tile). */
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
    int8_t *base = (int8_t *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    const int64_t group_bytes = nb * (BLOCK_TILE_BYTES + 2 * NO * (int64_t)sizeof(float));
    _Alignas(64) int32_t cbuf[C_SLOTS * MR * NO];
    const int64_t n_full = n_rows / MR * MR;
    const int rem = (int)(n_rows - n_full);
    int rows_cfg = 0; /* the configured A/C rows */
    for (int64_t c0 = o0; c0 < o1; c0 += DI_GEMM_Q8_AMX_GROUPS * NO) {
        const int64_t c1 = o1 - c0 < DI_GEMM_Q8_AMX_GROUPS * NO ? o1 : c0 + DI_GEMM_Q8_AMX_GROUPS * NO;
        for (int64_t o = c0; o < c1; o += NO) {
            int8_t *bt = base + (o - c0) / NO * group_bytes;
            float *dw = (float *)(void *)(bt + nb * BLOCK_TILE_BYTES);
            prep_group(kind, w, row_bytes, o, o1 - o < NO ? (int)(o1 - o) : NO, nb, bt, dw, dw + nb * NO);
        }
        for (int64_t r = 0; r < n_rows; r += MR) {
            const int nr = r < n_full ? MR : rem;
            if (nr != rows_cfg) {
                load_config(nr);
                rows_cfg = nr;
            }
            for (int64_t o = c0; o < c1; o += NO) {
                const int nc = o1 - o < NO ? (int)(o1 - o) : NO;
                const __mmask16 keep = (__mmask16)((1u << nc) - 1u);
                const int8_t *bt = base + (o - c0) / NO * group_bytes;
                const float *dw = (const float *)(const void *)(bt + nb * BLOCK_TILE_BYTES), *mw = dw + nb * NO;
                if (nr == MR) full_tile(kind, bt, dw, mw, nb, x, r, cbuf, y + r * ldy + o, ldy, keep);
                else rem_tile(kind, nr, bt, dw, mw, nb, x, r, cbuf, y + r * ldy + o, ldy, keep);
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
