/* Exact (f32 activation) matmul for AVX-512F: weights are dequantized 16
 * elements at a time into zmm registers and multiplied in f32, so results
 * stay within float rounding of the reference (the 1e-3 logit bar holds),
 * unlike the int8 activation path.
 *
 * Canonical order of this table: each (activation row r, output o) pair
 * has ONE zmm accumulator; chunk c (elements 16c .. 16c+15) is added by
 *   acc = fma(deq16(W[o], c), x[r][16c..], acc)
 * in chunk order, then the 16 lanes are summed by the fixed tree hsum16.
 * Decode (few rows) dequantizes in registers (deq32, two chunks; Q4_K
 * deq64_q4_K, the two sub-blocks that share their bytes, with the same
 * table and index per value); prefill stores the dequantized rows of an
 * output tile in scratch once and reloads them for every row tile -- the
 * same bits, since each value is one lookup in one table. Register
 * tiles (NR rows x NC outputs) only share loads, so a pair's result does not
 * depend on the batch size, the tile it lands in or the thread split.
 * n_in must be a multiple of 32 (every dtype here; matmul checks). */
#include "kernels/cpu/gemm_q8.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>

#define TGT __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl")))
#define ALWAYS __attribute__((always_inline))
#define NR 4      /* activation rows per register tile */
#define NC 4      /* outputs per register tile */
#define DEQ_ROWS 8 /* outputs dequantized into scratch at once (prefill) */
#define FUSED_MAX_ROWS 3 /* up to here deq16 runs in registers per row tile */
/* Prefetch distance: decode streams every weight once from L3/memory.
 * Q8_0 consumes bytes ~2x faster per instruction than the 4-bit kinds and
 * needs a longer lead (measured on a 49152 x 576 matrix: 1 KiB ahead 11-16
 * GB/s per core, 3-4 KiB 16-22). */
#define PREFETCH_BYTES 1024
#define PREFETCH_BYTES_Q8_0 3072
#define CHUNK 16 /* blocks whose scales are converted at once */
#define ROW_BLOCK_BYTES (512 * 1024) /* activations kept in L2 per row block (prefill) */

enum { K_F32, K_F16, K_Q4_0, K_Q4_1, K_Q8_0, K_Q4_K, K_BF16, K_Q6_K, K_Q5_0 };

TGT static inline float hsum16(__m512 v) {
    __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* 0, 1, ..., 15 as floats: the possible values of a nibble. */
TGT static inline ALWAYS __m512 iota16(void) {
    return _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}

/* Dequantizes 16 bytes of nibbles through a 16-entry table of the block's
 * values (table[q] = the dequantized value of q): vpermps reads only the
 * low 4 bits of each index, so the bytes widen straight into indices (low
 * nibbles) or are shifted once (high nibbles). table[q] is computed with
 * the same operation the direct form would apply to float(q), so the bits
 * are the same; it saves the masks, int->float converts and per-element
 * FMAs (decode is bound by these per-byte ops, not by memory). */
TGT static inline ALWAYS void nib_lookup(const uint8_t *qs, __m512 table, __m512 *lo, __m512 *hi) {
    __m512i idx = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)qs));
    *lo = _mm512_permutexvar_ps(idx, table);
    *hi = _mm512_permutexvar_ps(_mm512_srli_epi32(idx, 4), table);
}

/* The 16 scales d * sc[k] of Q6_K super-block sb, one per 16 elements in
 * element order. */
TGT static inline ALWAYS void q6_K_scales(const uint8_t *row, int64_t sb, float t[16]) {
    const di_block_q6_K *bl = (const di_block_q6_K *)(const void *)row + sb;
    _mm512_storeu_ps(t, _mm512_mul_ps(_mm512_set1_ps(_cvtsh_ss(bl->d)),
                                      _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                                          _mm_loadu_si128((const __m128i *)(const void *)bl->scales)))));
}

/* Per-block scale d and offset m of blocks c0 .. c0+n-1 (n <= CHUNK) of a
 * weight row, as floats: Q4_0, Q5_0 and Q8_0 d only, Q4_1 d and m, Q4_K the
 * sub-block's d * sc and dmin * mn. The f16 fields of Q4_0/Q4_1/Q8_0 are
 * gathered 16 blocks at a time. Both matmul shapes take their scales from
 * here, and each is one conversion or one product, so the bits are those
 * of the per-block scalar form. */
TGT static inline ALWAYS void block_scales(int kind, const uint8_t *row, int64_t c0, int n, float *d, float *m) {
    switch (kind) {
    case K_F32:
    case K_F16:
    case K_BF16:
        return;
    case K_Q4_K: { /* n is a multiple of 8: whole super-blocks */
        for (int h = 0; h < n / 8; h++) {
            const di_block_q4_K *bl = (const di_block_q4_K *)(const void *)row + (c0 >> 3) + h;
            uint64_t sc, mn;
            di_q4_K_scales_mins(bl->scales, &sc, &mn);
            __m256 fsc = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)sc)));
            __m256 fmn = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)mn)));
            _mm256_storeu_ps(d + 8 * h, _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(bl->d)), fsc));
            _mm256_storeu_ps(m + 8 * h, _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(bl->dmin)), fmn));
        }
        return;
    }
    case K_Q6_K: { /* n is a multiple of 8: whole super-blocks. Block p's
                    * two 16-element groups: d = d * sc[2j], m = d * sc[2j+1]
                    * (scale index 2j: ql/qh order, see deq32) */
        for (int h = 0; h < n / 8; h++) {
            float t[16];
            q6_K_scales(row, (c0 >> 3) + h, t);
            for (int j = 0; j < 8; j++) {
                /* block j of the super-block: half j/4, quarter j%4 -> scales 8*(j/4) + 2*(j%4) (+1) */
                int k = 8 * (j >> 2) + 2 * (j & 3);
                d[8 * h + j] = t[k];
                m[8 * h + j] = t[k + 1];
            }
        }
        return;
    }
    default: {
        const int64_t bb = kind == K_Q4_0 ? 18 : kind == K_Q4_1 ? 20 : kind == K_Q5_0 ? 22 : 34;
        const __mmask16 k = (__mmask16)((1u << n) - 1);
        const __m512i off = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                               _mm512_set1_epi32((int)bb));
        /* the first 4 bytes of each block: d (and m for Q4_1) */
        __m512i g = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), k, off, row + c0 * bb, 1);
        _mm512_storeu_ps(d, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(g)));
        if (kind == K_Q4_1) _mm512_storeu_ps(m, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(g, 16))));
        return;
    }
    }
}

/* Elements 32b .. 32b+31 of a weight row, dequantized: chunks 2b (*v0)
 * and 2b+1 (*v1); d, m: the block's entries from block_scales. */
TGT static inline ALWAYS void deq32(int kind, const uint8_t *row, int64_t b, float d, float m, __m512 *v0,
                                    __m512 *v1) {
    switch (kind) {
    case K_F32:
        *v0 = _mm512_loadu_ps((const float *)(const void *)row + 32 * b);
        *v1 = _mm512_loadu_ps((const float *)(const void *)row + 32 * b + 16);
        return;
    case K_F16: {
        const uint16_t *h = (const uint16_t *)(const void *)row + 32 * b;
        *v0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)h));
        *v1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(h + 16)));
        return;
    }
    case K_BF16: { /* the top half of an f32: widen and shift, exact */
        const uint16_t *h = (const uint16_t *)(const void *)row + 32 * b;
        *v0 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)h)), 16));
        *v1 = _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)(h + 16))), 16));
        return;
    }
    case K_Q4_0: { /* (q - 8) * d */
        const di_block_q4_0 *bl = (const di_block_q4_0 *)(const void *)row + b;
        __m512 t = _mm512_mul_ps(_mm512_sub_ps(iota16(), _mm512_set1_ps(8.0f)), _mm512_set1_ps(d));
        nib_lookup(bl->qs, t, v0, v1);
        return;
    }
    case K_Q4_1: { /* q * d + m, fused */
        const di_block_q4_1 *bl = (const di_block_q4_1 *)(const void *)row + b;
        __m512 t = _mm512_fmadd_ps(iota16(), _mm512_set1_ps(d), _mm512_set1_ps(m));
        nib_lookup(bl->qs, t, v0, v1);
        return;
    }
    case K_Q5_0: { /* d * (q - 16), q = nibble | bit j of qh << 4: one lookup in a 32-entry table */
        const di_block_q5_0 *bl = (const di_block_q5_0 *)(const void *)row + b;
        const __m512 vd = _mm512_set1_ps(d);
        const __m512 tlo = _mm512_mul_ps(vd, _mm512_sub_ps(iota16(), _mm512_set1_ps(16.0f))); /* q 0..15 */
        const __m512 thi = _mm512_mul_ps(vd, iota16());                                     /* q 16..31 */
        uint32_t qh;
        memcpy(&qh, bl->qh, sizeof qh); /* little-endian: bit j = element j */
        const __m512i raw = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)bl->qs));
        const __m512i b16 = _mm512_set1_epi32(16);
        __m512i lo = _mm512_and_si512(raw, _mm512_set1_epi32(0xF)), hi = _mm512_srli_epi32(raw, 4);
        lo = _mm512_mask_or_epi32(lo, (__mmask16)(qh & 0xFFFFu), lo, b16);
        hi = _mm512_mask_or_epi32(hi, (__mmask16)(qh >> 16), hi, b16);
        *v0 = _mm512_permutex2var_ps(tlo, lo, thi);
        *v1 = _mm512_permutex2var_ps(tlo, hi, thi);
        return;
    }
    case K_Q8_0: {
        const di_block_q8_0 *bl = (const di_block_q8_0 *)(const void *)row + b;
        __m512 vd = _mm512_set1_ps(d);
        __m128i q0 = _mm_loadu_si128((const __m128i *)(const void *)bl->qs);
        __m128i q1 = _mm_loadu_si128((const __m128i *)(const void *)(bl->qs + 16));
        *v0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q0)), vd);
        *v1 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q1)), vd);
        return;
    }
    case K_Q6_K: { /* (d * sc) * (q - 32), q = 4 bits of ql | 2 bits of qh << 4 */
        const di_block_q6_K *bl = (const di_block_q6_K *)(const void *)row + (b >> 3);
        const int j = (int)(b & 7), half = j >> 2, quarter = j & 3;
        /* quarter 0/1: low nibbles of ql[0..31] / ql[32..63]; 2/3: high ones */
        const uint8_t *ql = bl->ql + 64 * half + 32 * (quarter & 1), *qh = bl->qh + 32 * half;
        const int ls = 4 * (quarter >> 1), hs = 2 * quarter;
        const __m512i m4 = _mm512_set1_epi32(0xF), m2 = _mm512_set1_epi32(3), b32 = _mm512_set1_epi32(32);
        __m512 out[2];
        for (int c = 0; c < 2; c++) {
            __m512i l = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(ql + 16 * c)));
            __m512i h = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(qh + 16 * c)));
            l = _mm512_and_si512(_mm512_srli_epi32(l, (unsigned)ls), m4);
            h = _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(h, (unsigned)hs), m2), 4);
            __m512i q = _mm512_sub_epi32(_mm512_or_si512(l, h), b32);
            out[c] = _mm512_mul_ps(_mm512_set1_ps(c ? m : d), _mm512_cvtepi32_ps(q));
        }
        *v0 = out[0];
        *v1 = out[1];
        return;
    }
    default: { /* Q4_K: 8 sub-blocks of 32 per super-block */
        const di_block_q4_K *bl = (const di_block_q4_K *)(const void *)row + (b >> 3);
        int j = (int)(b & 7);
        /* sub-block j: bytes 32*(j/2) .. +31, low nibbles if j even */
        const uint8_t *qs = bl->qs + 32 * (j >> 1);
        __m512 t = _mm512_fmsub_ps(iota16(), _mm512_set1_ps(d), _mm512_set1_ps(m)); /* q * d - m, fused */
        /* the 32 elements are one nibble half of 32 bytes: low or high */
        __m512i i0 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)qs));
        __m512i i1 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(qs + 16)));
        if (j & 1) {
            i0 = _mm512_srli_epi32(i0, 4);
            i1 = _mm512_srli_epi32(i1, 4);
        }
        *v0 = _mm512_permutexvar_ps(i0, t);
        *v1 = _mm512_permutexvar_ps(i1, t);
        return;
    }
    }
}

/* Bytes of weight per 8 blocks of 32 elements (one K-quant super-block),
 * for prefetching. */
static inline int64_t block8_bytes(int kind) {
    return kind == K_F32   ? 1024
           : kind == K_F16 || kind == K_BF16 ? 512
           : kind == K_Q4_1 ? 160
           : kind == K_Q8_0 ? 272
           : kind == K_Q6_K ? 210
           : kind == K_Q5_0 ? 176
           : 144;
}

/* Q4_K sub-blocks 2h and 2h+1 of a super-block share 32 bytes of qs (low
 * and high nibbles): both dequantized from one widening of those bytes,
 * each value exactly as deq32 gives it (the same table and index). */
TGT static inline ALWAYS void deq64_q4_K(const uint8_t *row, int64_t b, float d0, float m0, float d1, float m1,
                                         __m512 v[4]) {
    const di_block_q4_K *bl = (const di_block_q4_K *)(const void *)row + (b >> 3);
    const uint8_t *qs = bl->qs + 32 * ((int)(b & 7) >> 1);
    __m512 t0 = _mm512_fmsub_ps(iota16(), _mm512_set1_ps(d0), _mm512_set1_ps(m0));
    __m512 t1 = _mm512_fmsub_ps(iota16(), _mm512_set1_ps(d1), _mm512_set1_ps(m1));
    __m512i i0 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)qs));
    __m512i i1 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(qs + 16)));
    v[0] = _mm512_permutexvar_ps(i0, t0);
    v[1] = _mm512_permutexvar_ps(i1, t0);
    v[2] = _mm512_permutexvar_ps(_mm512_srli_epi32(i0, 4), t1);
    v[3] = _mm512_permutexvar_ps(_mm512_srli_epi32(i1, 4), t1);
}

/* Q6_K: half hf (elements 128 hf .. +127) of super-block sb, as 8 chunks
 * v[c] in element order, chunk c scaled by sc[c] (q6_K_scales' values). The 6-bit values are assembled 64 at a time in bytes (low
 * nibbles of ql[0..63] with qh's bits 0-1 / 2-3: elements 0..63; high
 * nibbles with bits 4-5 / 6-7: elements 64..127), then each chunk is
 * widened once: the same integer q - 32 and the same product
 * sc * float(q - 32) as deq32, so the same bits, at a third of its
 * per-element instructions. */
TGT static inline ALWAYS void deq128_q6_K(const uint8_t *row, int64_t sb, int hf, const float *sc, __m512 v[8]) {
    const di_block_q6_K *bl = (const di_block_q6_K *)(const void *)row + sb;
    const __m512i q = _mm512_loadu_si512((const void *)(bl->ql + 64 * hf));
    const __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)(bl->qh + 32 * hf));
    const __m512i m4 = _mm512_set1_epi8(0x0F), m2 = _mm512_set1_epi8(3), b32 = _mm512_set1_epi8(32);
    const __m512i ha = _mm512_inserti64x4(_mm512_castsi256_si512(h), _mm256_srli_epi16(h, 2), 1);
    const __m512i hb = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_srli_epi16(h, 4)), _mm256_srli_epi16(h, 6), 1);
    _Alignas(64) int8_t b[128];
    _mm512_store_si512((void *)b, _mm512_sub_epi8(_mm512_or_si512(_mm512_and_si512(q, m4),
                                                                  _mm512_slli_epi16(_mm512_and_si512(ha, m2), 4)), b32));
    _mm512_store_si512((void *)(b + 64),
                       _mm512_sub_epi8(_mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(q, 4), m4),
                                                       _mm512_slli_epi16(_mm512_and_si512(hb, m2), 4)), b32));
#pragma GCC unroll 8
    for (int c = 0; c < 8; c++)
        v[c] = _mm512_mul_ps(_mm512_set1_ps(sc[c]),
                             _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_load_si128((const __m128i *)(const void *)(b + 16 * c)))));
}

/* How far ahead of its reads a decode tile prefetches each weight row.
 * The tile's NC rows are contiguous and are read side by side, so a lead
 * inside the row only reaches bytes the row's own stream brings soon
 * anyway; what pays is the next tile's rows: about NC rows ahead
 * (measured over 64 MB matrices on one core of the AMX Xeon: Q6_K 2048
 * wide 5.1 GB/s with a 1 or 3 KiB lead, 9.1 with 6 KiB), never less than
 * the fixed leads that were tuned on 576-wide rows. */
static inline int64_t prefetch_lead(int kind, int64_t row_bytes) {
    const int64_t floor = kind == K_Q8_0 ? PREFETCH_BYTES_Q8_0 : PREFETCH_BYTES, tile = NC * row_bytes;
    return tile > floor ? tile : floor;
}

/* One register tile, weights dequantized on the fly: rows r0.. (nr) x the
 * nc weight rows w[j]. Q4_K steps two blocks at a time (deq64_q4_K) with
 * its scales unpacked once per super-block; the FMAs still run in chunk
 * order. */
TGT static inline ALWAYS void tile_fused(int kind, const int nr, const int nc, const uint8_t *const *w,
                                         const float *x, int64_t ldx, int64_t r0, int64_t n_in, float *y,
                                         int64_t ldy, int64_t o) {
    __m512 acc[NR][NC];
#pragma GCC unroll 4
    for (int i = 0; i < nr; i++)
#pragma GCC unroll 4
        for (int j = 0; j < nc; j++) acc[i][j] = _mm512_setzero_ps();
    const int64_t bb8 = block8_bytes(kind), nb = n_in / 32;
    const int64_t pf = prefetch_lead(kind, bb8 * nb / 8);
    if (kind == K_Q4_K) {
        float d[NC][8], m[NC][8];
        for (int64_t b = 0; b < nb; b += 2) {
            __m512 wv[NC][4];
            const int s = (int)(b & 7);
            if (s == 0) {
#pragma GCC unroll 4
                for (int j = 0; j < nc; j++) block_scales(kind, w[j], b, 8, d[j], m[j]);
            }
#pragma GCC unroll 4
            for (int j = 0; j < nc; j++) {
                _mm_prefetch((const char *)w[j] + b * bb8 / 8 + pf, _MM_HINT_T0);
                deq64_q4_K(w[j], b, d[j][s], m[j][s], d[j][s + 1], m[j][s + 1], wv[j]);
            }
#pragma GCC unroll 4
            for (int i = 0; i < nr; i++) {
                const float *xr = x + (r0 + i) * ldx + 32 * b;
#pragma GCC unroll 4
                for (int c = 0; c < 4; c++) {
                    __m512 xv = _mm512_loadu_ps(xr + 16 * c);
#pragma GCC unroll 4
                    for (int j = 0; j < nc; j++) acc[i][j] = _mm512_fmadd_ps(wv[j][c], xv, acc[i][j]);
                }
            }
        }
    } else if (kind == K_Q6_K) { /* half a super-block (4 blocks) per step */
        float sc[NC][16]; /* chunk scales of the super-block, element order */
        for (int64_t b = 0; b < nb; b += 4) {
            const int hf = (int)(b & 7) >> 2;
            if (hf == 0) {
#pragma GCC unroll 4
                for (int j = 0; j < nc; j++) q6_K_scales(w[j], b >> 3, sc[j]);
            }
#pragma GCC unroll 4
            for (int j = 0; j < nc; j++) {
                __m512 wv[8];
                _mm_prefetch((const char *)w[j] + b * bb8 / 8 + pf, _MM_HINT_T0);
                _mm_prefetch((const char *)w[j] + b * bb8 / 8 + pf + 64, _MM_HINT_T0);
                deq128_q6_K(w[j], b >> 3, hf, sc[j] + 8 * hf, wv);
#pragma GCC unroll 4
                for (int i = 0; i < nr; i++) {
                    const float *xr = x + (r0 + i) * ldx + 32 * b;
#pragma GCC unroll 8
                    for (int c = 0; c < 8; c++) acc[i][j] = _mm512_fmadd_ps(wv[c], _mm512_loadu_ps(xr + 16 * c), acc[i][j]);
                }
            }
        }
    } else {
        float d[NC][CHUNK], m[NC][CHUNK];
        for (int64_t c0 = 0; c0 < nb; c0 += CHUNK) {
            const int n = nb - c0 < CHUNK ? (int)(nb - c0) : CHUNK;
#pragma GCC unroll 4
            for (int j = 0; j < nc; j++) block_scales(kind, w[j], c0, n, d[j], m[j]);
            for (int p = 0; p < n; p++) {
                const int64_t b = c0 + p;
                __m512 w0[NC], w1[NC];
#pragma GCC unroll 4
                for (int j = 0; j < nc; j++) {
                    _mm_prefetch((const char *)w[j] + b * bb8 / 8 + pf, _MM_HINT_T0);
                    deq32(kind, w[j], b, d[j][p], m[j][p], &w0[j], &w1[j]);
                }
#pragma GCC unroll 4
                for (int i = 0; i < nr; i++) {
                    const float *xr = x + (r0 + i) * ldx + 32 * b;
                    __m512 x0 = _mm512_loadu_ps(xr), x1 = _mm512_loadu_ps(xr + 16);
#pragma GCC unroll 4
                    for (int j = 0; j < nc; j++) {
                        acc[i][j] = _mm512_fmadd_ps(w0[j], x0, acc[i][j]);
                        acc[i][j] = _mm512_fmadd_ps(w1[j], x1, acc[i][j]);
                    }
                }
            }
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < nr; i++)
#pragma GCC unroll 4
        for (int j = 0; j < nc; j++) y[(r0 + i) * ldy + o + j] = hsum16(acc[i][j]);
}

/* The same with weights already dequantized: wd + j * n_in. */
TGT static inline ALWAYS void tile_deq(const int nr, const int nc, const float *wd, const float *x, int64_t ldx,
                                       int64_t r0, int64_t n_in, float *y, int64_t ldy, int64_t o) {
    __m512 acc[NR][NC];
#pragma GCC unroll 4
    for (int i = 0; i < nr; i++)
#pragma GCC unroll 4
        for (int j = 0; j < nc; j++) acc[i][j] = _mm512_setzero_ps();
    for (int64_t c = 0; c < n_in / 16; c++) {
        __m512 wv[NC];
#pragma GCC unroll 4
        for (int j = 0; j < nc; j++) wv[j] = _mm512_loadu_ps(wd + j * n_in + 16 * c);
#pragma GCC unroll 4
        for (int i = 0; i < nr; i++) {
            __m512 xv = _mm512_loadu_ps(x + (r0 + i) * ldx + 16 * c);
#pragma GCC unroll 4
            for (int j = 0; j < nc; j++) acc[i][j] = _mm512_fmadd_ps(wv[j], xv, acc[i][j]);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < nr; i++)
#pragma GCC unroll 4
        for (int j = 0; j < nc; j++) y[(r0 + i) * ldy + o + j] = hsum16(acc[i][j]);
}

TGT static inline ALWAYS void gemm_rows(int kind, const void *w, uint64_t row_bytes, int64_t o0, int64_t o1,
                                        const float *x, int64_t ldx, int64_t n_rows, int64_t n_in, float *y,
                                        int64_t ldy, float *scratch);

TGT static inline ALWAYS void gemm(int kind, const void *w, uint64_t row_bytes, int64_t o0, int64_t o1,
                                   const float *x, int64_t ldx, int64_t n_rows, int64_t n_in, float *y,
                                   int64_t ldy, float *scratch) {
    if (n_rows <= FUSED_MAX_ROWS) {
        for (int64_t o = o0; o < o1; o += NC) {
            const uint8_t *rows[NC];
            int nc = o1 - o < NC ? (int)(o1 - o) : NC;
            for (int j = 0; j < nc; j++) rows[j] = (const uint8_t *)w + (uint64_t)(o + j) * row_bytes;
            for (int64_t r = 0; r < n_rows; r++) {
                if (nc == NC) tile_fused(kind, 1, NC, rows, x, ldx, r, n_in, y, ldy, o);
                else
                    for (int j = 0; j < nc; j++) tile_fused(kind, 1, 1, rows + j, x, ldx, r, n_in, y, ldy, o + j);
            }
        }
        return;
    }
    /* Rows in blocks whose activations stay in L2 while every output panel
     * passes over them (otherwise each panel streams all of x from memory
     * again); a panel is dequantized once per block. Per pair the order is
     * unchanged, so are the bits. */
    int64_t rb = ROW_BLOCK_BYTES / (n_in * (int64_t)sizeof(float)) / NR * NR;
    if (rb < NR) rb = NR;
    for (int64_t r0 = 0; r0 < n_rows; r0 += rb) {
        const int64_t nr = n_rows - r0 < rb ? n_rows - r0 : rb;
        gemm_rows(kind, w, row_bytes, o0, o1, x + r0 * ldx, ldx, nr, n_in, y + r0 * ldy, ldy, scratch);
    }
}

/* The prefill shape on nr rows: output panels of DEQ_ROWS dequantized into
 * scratch, register tiles over the rows. */
TGT static inline ALWAYS void gemm_rows(int kind, const void *w, uint64_t row_bytes, int64_t o0, int64_t o1,
                                        const float *x, int64_t ldx, int64_t n_rows, int64_t n_in, float *y,
                                        int64_t ldy, float *scratch) {
    for (int64_t o = o0; o < o1; o += DEQ_ROWS) {
        int nd = o1 - o < DEQ_ROWS ? (int)(o1 - o) : DEQ_ROWS;
        for (int j = 0; j < nd; j++) {
            const uint8_t *row = (const uint8_t *)w + (uint64_t)(o + j) * row_bytes;
            const int64_t nb = n_in / 32;
            float d[CHUNK], m[CHUNK];
            for (int64_t c0 = 0; c0 < nb; c0 += CHUNK) {
                const int n = nb - c0 < CHUNK ? (int)(nb - c0) : CHUNK;
                block_scales(kind, row, c0, n, d, m);
                for (int p = 0; p < n; p++) {
                    __m512 v0, v1;
                    deq32(kind, row, c0 + p, d[p], m[p], &v0, &v1);
                    _mm512_storeu_ps(scratch + j * n_in + 32 * (c0 + p), v0);
                    _mm512_storeu_ps(scratch + j * n_in + 32 * (c0 + p) + 16, v1);
                }
            }
        }
        int j = 0;
        for (; j + NC <= nd; j += NC) {
            int64_t r = 0;
            for (; r + NR <= n_rows; r += NR) tile_deq(NR, NC, scratch + j * n_in, x, ldx, r, n_in, y, ldy, o + j);
            for (; r < n_rows; r++) tile_deq(1, NC, scratch + j * n_in, x, ldx, r, n_in, y, ldy, o + j);
        }
        for (; j < nd; j++)
            for (int64_t r = 0; r < n_rows; r++) tile_deq(1, 1, scratch + j * n_in, x, ldx, r, n_in, y, ldy, o + j);
    }
}

#define DEFINE_GEMM_F32(name, kind)                                                                  \
    TGT void di_gemm_f32_##name##_avx512(const void *w, uint64_t row_bytes, int64_t o0, int64_t o1,   \
                                         const float *x, int64_t ldx, int64_t n_rows, int64_t n_in,   \
                                         float *y, int64_t ldy, float *scratch) {                     \
        gemm(kind, w, row_bytes, o0, o1, x, ldx, n_rows, n_in, y, ldy, scratch);                     \
    }

DEFINE_GEMM_F32(f32, K_F32)
DEFINE_GEMM_F32(f16, K_F16)
DEFINE_GEMM_F32(bf16, K_BF16)
DEFINE_GEMM_F32(q5_0, K_Q5_0)
DEFINE_GEMM_F32(q4_0, K_Q4_0)
DEFINE_GEMM_F32(q4_1, K_Q4_1)
DEFINE_GEMM_F32(q8_0, K_Q8_0)
DEFINE_GEMM_F32(q4_K, K_Q4_K)
DEFINE_GEMM_F32(q6_K, K_Q6_K)

#endif
