/* The int8-activation gemm for AVX-512 VNNI: each vpdpbusd multiplies TWO
 * 32-element blocks (64 bytes) of unsigned weights by signed activations
 * into 16 int32 lanes (4 consecutive products each).
 *
 * Per (row, output) pair there is ONE zmm accumulator. The row is walked in
 * chunks of up to 16 blocks; per chunk, with the chunk's block scales dw
 * (weights), dx (activations), offsets mw and s = dx * sum(q) as 16-lane
 * vectors (block k of the chunk in lane k, lanes past the row's end zero):
 *   acc = fma(mw, s, acc)                       the offset term, lane-wise
 *   per block pair: acc = fma(cvt(dpbusd(0, u, q)), perm(dw) * perm(dx), acc)
 * where perm spreads each block's scale over the lanes holding its
 * products. An odd last block goes through the same fma with its 8 lanes
 * (upper lanes masked off). The result is hsum16(acc). Every lane's scale
 * is the one float product dw_b * dx_b, whichever tile computes it, so a
 * pair's bits do not depend on the tile shape, the batch size or the
 * thread split (tiles of rows x outputs only share loads).
 *
 * Weight layouts: Q8_0 is made unsigned by +128 (vpdpbusd has no
 * intermediate saturation), with -128 dw folded into the offsets like Q4_0's
 * -8 dw. Q4_0/Q4_1 pairs are unpacked from their two 16-byte nibble arrays
 * as [low nibbles of b, of b+1, high nibbles of b, of b+1] (one shift and
 * mask for both blocks), so the activations' 16-byte quarters are permuted
 * to match. The per-block scales and offsets of each weight row are
 * written once per output group by gemm_q8_prep.h's scalar pass (gathering
 * them 16 blocks at a time cost ~2/3 of decode on Zen 4) and read as
 * 16-lane vectors.
 * Entered only after cpuid reports AVX512F/BW/VL/VNNI and OS ZMM state. */
#include "kernels/cpu/gemm_q8.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>
#include <math.h>

#define TGT __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
#define ALWAYS __attribute__((always_inline))
#define NR 4
#define NC 4
#define CHUNK 16 /* blocks per scale vector */
/* Decode streams every weight once from memory: while a group of NC
 * rows computes, the next group's rows are prefetched to L2 (gemm below).
 * Per-block prefetch inside the tile measured no better (Zen 4). */

enum { K_Q4_0, K_Q4_1, K_Q8_0, K_Q4_K, K_Q5_0, K_Q6_K };

#define FN(name) name##_avx512
#include "kernels/cpu/gemm_q8_prep.h"

TGT static inline float hsum16(__m512 v) {
    __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}


/* Q4_0/Q4_1 store each pair as low/high nibble halves (activations
 * permuted to match); Q8_0 and Q4_K unpack in natural order. */
static inline int nibble_pairs(int kind) { return kind == K_Q4_0 || kind == K_Q4_1; }

/* The 32 unsigned integers of block b of a weight row, natural order. */
TGT static inline ALWAYS __m256i load_u32(int kind, const uint8_t *row, int64_t b) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    switch (kind) {
    case K_Q4_0:
    case K_Q4_1: {
        const uint8_t *qs = kind == K_Q4_0 ? ((const di_block_q4_0 *)(const void *)row)[b].qs
                                           : ((const di_block_q4_1 *)(const void *)row)[b].qs;
        __m128i raw = _mm_loadu_si128((const __m128i *)(const void *)qs);
        return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), m4);
    }
    case K_Q8_0: {
        __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)((const di_block_q8_0 *)(const void *)row)[b].qs);
        return _mm256_xor_si256(v, _mm256_set1_epi8((char)0x80)); /* w + 128 */
    }
    case K_Q5_0: { /* nibbles | bit j of qh << 4 (element j: byte j) */
        const di_block_q5_0 *bl = (const di_block_q5_0 *)(const void *)row + b;
        uint32_t qh;
        memcpy(&qh, bl->qh, sizeof qh);
        __m128i raw = _mm_loadu_si128((const __m128i *)(const void *)bl->qs);
        __m256i u = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), m4);
        return _mm256_mask_add_epi8(u, (__mmask32)qh, u, _mm256_set1_epi8(16));
    }
    default: {
        const di_block_q4_K *bl = (const di_block_q4_K *)(const void *)row + (b >> 3);
        int j = (int)(b & 7);
        __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(bl->qs + 32 * (j >> 1)));
        if (j & 1) v = _mm256_srli_epi16(v, 4);
        return _mm256_and_si256(v, m4);
    }
    }
}

/* Blocks b and b+1 (b even) as one vector, in the kind's pair layout. */
TGT static inline ALWAYS __m512i load_pair(int kind, const uint8_t *row, int64_t b) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    switch (kind) {
    case K_Q4_0:
    case K_Q4_1: {
        const uint8_t *q0, *q1;
        if (kind == K_Q4_0) {
            q0 = ((const di_block_q4_0 *)(const void *)row)[b].qs;
            q1 = ((const di_block_q4_0 *)(const void *)row)[b + 1].qs;
        } else {
            q0 = ((const di_block_q4_1 *)(const void *)row)[b].qs;
            q1 = ((const di_block_q4_1 *)(const void *)row)[b + 1].qs;
        }
        __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)q0)),
                                            _mm_loadu_si128((const __m128i *)(const void *)q1), 1);
        return _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(v), _mm256_srli_epi16(v, 4), 1), m4);
    }
    case K_Q5_0: { /* natural order, block b then b+1: byte e of block b+h gets bit e of its qh */
        const di_block_q5_0 *bl = (const di_block_q5_0 *)(const void *)row + b;
        uint32_t qh0, qh1;
        memcpy(&qh0, bl[0].qh, sizeof qh0);
        memcpy(&qh1, bl[1].qh, sizeof qh1);
        __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)bl[0].qs)),
                                            _mm_loadu_si128((const __m128i *)(const void *)bl[1].qs), 1);
        /* [lo b, lo b+1, hi b, hi b+1] -> quarters 0 2 1 3: [lo b, hi b, lo b+1, hi b+1] */
        __m512i u = _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(v), _mm256_srli_epi16(v, 4), 1), m4);
        u = _mm512_shuffle_i64x2(u, u, 0xD8);
        return _mm512_mask_add_epi8(u, (__mmask64)qh0 | (__mmask64)qh1 << 32, u, _mm512_set1_epi8(16));
    }
    case K_Q8_0: {
        const di_block_q8_0 *bl = (const di_block_q8_0 *)(const void *)row + b;
        __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(const void *)bl[0].qs)),
                                       _mm256_loadu_si256((const __m256i *)(const void *)bl[1].qs), 1);
        return _mm512_xor_si512(v, _mm512_set1_epi8((char)0x80));
    }
    case K_Q6_K: { /* 32-element block k of a 128 half: ql[32 (k & 1) ..] nibble k >> 1, qh bits 2k, 2k+1 */
        const di_block_q6_K *bl = (const di_block_q6_K *)(const void *)row + (b >> 3);
        const int h = (int)((b & 7) >> 2), k = (int)(b & 3); /* k even: the pair is k, k+1 */
        __m512i lo = _mm512_loadu_si512((const void *)(bl->ql + 64 * h));
        if (k) lo = _mm512_srli_epi16(lo, 4);
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(const void *)(bl->qh + 32 * h));
        __m512i hi = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
        if (k) hi = _mm512_srli_epi16(hi, 4);
        hi = _mm512_slli_epi16(_mm512_and_si512(hi, _mm512_set1_epi8(3)), 4);
        return _mm512_or_si512(_mm512_and_si512(lo, m4), hi); /* q + 32 in 0 .. 63 */
    }
    default: { /* sub-blocks b, b+1 are the low and high nibbles of 32 bytes */
        const di_block_q4_K *bl = (const di_block_q4_K *)(const void *)row + (b >> 3);
        __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(bl->qs + 32 * ((b & 7) >> 1)));
        return _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(v), _mm256_srli_epi16(v, 4), 1), m4);
    }
    }
}

/* One register tile: activation rows r0 .. r0+nr-1 x the nc weight rows
 * w[0 .. nc-1], outputs o .. o+nc-1; row j's block scales and offsets are
 * dws[j * nb ..], mws[j * nb ..] (prep). */
TGT static inline ALWAYS void tile(int kind, const int nr, const int nc, const uint8_t *const *w, const float *dws,
                                   const float *mws, int64_t nb, const di_q8_rows *x, int64_t r0, float *y,
                                   int64_t ldy, int64_t o) {
    __m512 acc[NR][NC];
#pragma GCC unroll 4
    for (int i = 0; i < nr; i++)
#pragma GCC unroll 4
        for (int j = 0; j < nc; j++) acc[i][j] = _mm512_setzero_ps();
    /* lane -> block of the pair: nibble layout b b+1 b b+1 (4 lanes each),
     * natural layout b (8 lanes) b+1 (8 lanes) */
    const __m512i pair_idx = nibble_pairs(kind) ? _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1)
                                                : _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    /* Q6_K: a scale per 16 elements (4 lanes), so a chunk is one super-block
     * of 8 blocks whose 16 sub-block scales fill the scale vector */
    const int chunk = kind == K_Q6_K ? 8 : CHUNK;
    const int64_t ldw = kind == K_Q6_K ? 2 * nb : nb; /* floats of dws per weight row */
    const __m512i sub_idx = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    for (int64_t c0 = 0; c0 < nb; c0 += chunk) {
        const int n = nb - c0 < chunk ? (int)(nb - c0) : chunk;
        const __mmask16 k = (__mmask16)((1u << n) - 1);
        __m512 dw[NC], dx[NR];
#pragma GCC unroll 4
        for (int j = 0; j < nc; j++) {
            if (kind == K_Q6_K) { /* the offset -32 is in the integer dot */
                dw[j] = _mm512_loadu_ps(dws + j * ldw + 2 * c0);
                continue;
            }
            dw[j] = _mm512_maskz_loadu_ps(k, dws + j * nb + c0);
            const __m512 mw = _mm512_maskz_loadu_ps(k, mws + j * nb + c0);
#pragma GCC unroll 4
            for (int i = 0; i < nr; i++) {
                const __m512 s = _mm512_maskz_loadu_ps(k, x->s + (r0 + i) * x->ldb + c0);
                acc[i][j] = _mm512_fmadd_ps(mw, s, acc[i][j]);
            }
        }
#pragma GCC unroll 4
        for (int i = 0; i < nr; i++) dx[i] = _mm512_maskz_loadu_ps(k, x->d + (r0 + i) * x->ldb + c0);
        for (int p = 0; p + 2 <= n; p += 2) {
            const int64_t b = c0 + p;
            const __m512i idx = _mm512_add_epi32(pair_idx, _mm512_set1_epi32(p));
            const __m512i widx = kind == K_Q6_K ? _mm512_add_epi32(sub_idx, _mm512_set1_epi32(2 * p)) : idx;
            __m512i u[NC];
            __m512 dwp[NC];
#pragma GCC unroll 4
            for (int j = 0; j < nc; j++) {
                u[j] = load_pair(kind, w[j], b);
                dwp[j] = _mm512_permutexvar_ps(widx, dw[j]);
            }
#pragma GCC unroll 4
            for (int i = 0; i < nr; i++) {
                __m512i q = _mm512_loadu_si512((const void *)(x->q + (r0 + i) * x->ldq + 32 * b));
                if (nibble_pairs(kind)) q = _mm512_shuffle_i64x2(q, q, 0xD8); /* quarters 0 2 1 3 */
                const __m512 dxp = _mm512_permutexvar_ps(idx, dx[i]);
                /* Q6_K: each lane starts at -32 times its 4 activations' sum,
                 * so the dot is exactly that of (q - 32) */
                const __m512i dp0 = kind == K_Q6_K
                                        ? _mm512_sub_epi32(_mm512_setzero_si512(),
                                                           _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(32), q))
                                        : _mm512_setzero_si512();
#pragma GCC unroll 4
                for (int j = 0; j < nc; j++) {
                    __m512i dp = _mm512_dpbusd_epi32(dp0, u[j], q);
                    acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dp), _mm512_mul_ps(dwp[j], dxp), acc[i][j]);
                }
            }
        }
        if (n & 1) { /* the odd last block, natural order in lanes 0-7 */
            const int64_t b = c0 + n - 1;
            const __m512i idx = _mm512_set1_epi32(n - 1);
#pragma GCC unroll 4
            for (int i = 0; i < nr; i++) {
                __m512i q = _mm512_zextsi256_si512(
                    _mm256_loadu_si256((const __m256i *)(const void *)(x->q + (r0 + i) * x->ldq + 32 * b)));
                const __m512 dxp = _mm512_permutexvar_ps(idx, dx[i]);
#pragma GCC unroll 4
                for (int j = 0; j < nc; j++) {
                    __m512i dp = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_zextsi256_si512(load_u32(kind, w[j], b)), q);
                    __m512 sc = _mm512_mul_ps(_mm512_permutexvar_ps(idx, dw[j]), dxp);
                    acc[i][j] = _mm512_mask3_fmadd_ps(_mm512_cvtepi32_ps(dp), sc, acc[i][j], 0x00FF);
                }
            }
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < nr; i++)
#pragma GCC unroll 4
        for (int j = 0; j < nc; j++) y[(r0 + i) * ldy + o + j] = hsum16(acc[i][j]);
}

TGT static inline ALWAYS void gemm(int kind, const void *w, uint64_t row_bytes, int64_t o0, int64_t o1,
                                   const di_q8_rows *x, int64_t n_rows, int64_t n_in, float *y, int64_t ldy,
                                   float *scratch) {
    const int64_t nb = n_in / DI_Q8_ACT_BLOCK;
    /* (NC, nb) each; Q6_K: dw (NC, 2 nb), one scale per 16 elements, no mw */
    float *dw = scratch, *mw = scratch + NC * nb;
    const int64_t ldw = kind == K_Q6_K ? 2 * nb : nb;
    for (int64_t o = o0; o < o1; o += NC) {
        int nc = o1 - o < NC ? (int)(o1 - o) : NC;
        const uint8_t *rows[NC];
        for (int j = 0; j < nc; j++) {
            rows[j] = (const uint8_t *)w + (uint64_t)(o + j) * row_bytes;
            prep_avx512(kind, rows[j], nb, dw + j * ldw, mw + j * nb);
        }
        if (o + NC < o1) { /* the next group's rows, while this one computes */
            const uint8_t *next = (const uint8_t *)w + (uint64_t)(o + NC) * row_bytes;
            const uint64_t bytes = (uint64_t)(o1 - o - NC < NC ? o1 - o - NC : NC) * row_bytes;
            for (uint64_t off = 0; off < bytes; off += 64) _mm_prefetch((const char *)next + off, _MM_HINT_T1);
        }
        if (nc == NC) {
            int64_t r = 0;
            for (; r + NR <= n_rows; r += NR) tile(kind, NR, NC, rows, dw, mw, nb, x, r, y, ldy, o);
            for (; r < n_rows; r++) tile(kind, 1, NC, rows, dw, mw, nb, x, r, y, ldy, o);
        } else {
            for (int j = 0; j < nc; j++)
                for (int64_t r = 0; r < n_rows; r++)
                    tile(kind, 1, 1, rows + j, dw + j * ldw, mw + j * nb, nb, x, r, y, ldy, o + j);
        }
    }
}

#define DEFINE_GEMM(name, kind)                                                                        \
    TGT void di_gemm_q8_##name##_avx512(const void *w, uint64_t row_bytes, int64_t o0, int64_t o1,      \
                                        const di_q8_rows *x, int64_t n_rows, int64_t n_in, float *y,    \
                                        int64_t ldy, float *scratch) {                                  \
        gemm(kind, w, row_bytes, o0, o1, x, n_rows, n_in, y, ldy, scratch);                            \
    }

DEFINE_GEMM(q4_0, K_Q4_0)
DEFINE_GEMM(q4_1, K_Q4_1)
DEFINE_GEMM(q5_0, K_Q5_0)
DEFINE_GEMM(q8_0, K_Q8_0)
DEFINE_GEMM(q4_K, K_Q4_K)
DEFINE_GEMM(q6_K, K_Q6_K)

/* Quantization is the AVX2 one (the same bits in every table). */
void di_quantize_q8_avx512(const float *x, int8_t *q, float *d, float *s, int64_t n) {
    di_quantize_q8_avx2(x, q, d, s, n);
}

#endif
