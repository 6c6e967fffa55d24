/* The int8-activation gemm for AVX-512 VNNI: each vpdpbusd multiplies TWO
 * 32-element blocks (64 bytes) of unsigned weights by signed activations
 * into 16 int32 lanes, lanes 0-7 from block b and 8-15 from block b+1 (4
 * consecutive elements each). Per (row, output) pair and block pair:
 *   acc = fma(cvt(dpbusd(0, u, q)), dw2 * dx2, acc)
 * where dw2 / dx2 hold the two blocks' scales, each over its 8 lanes. An odd
 * last block goes through the 256-bit form into a second accumulator. The
 * result is hsum16(acc) + hsum8(tail) + mdot(mw, s) (the offset dot, as in
 * gemm_q8_c.c). Q8_0 weights are made unsigned by +128 (vpdpbusd has no
 * intermediate saturation), with -128 dw folded into the offsets like Q4_0's
 * -8 dw. Tiles of 4 rows x 4 outputs share loads only: every pair runs the
 * same instruction sequence whatever the batch size or thread split.
 * Entered only after cpuid reports AVX512F/BW/VL/VNNI and OS ZMM state. */
#include "kernels/cpu/gemm_q8.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>
#include <math.h>

#define TGT __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
#define ALWAYS __attribute__((always_inline))
#define NR 4
#define NC 4
#define PREFETCH_BYTES 1024

enum { K_Q4_0, K_Q4_1, K_Q8_0, K_Q4_K };

TGT static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

TGT static inline float hsum16(__m512 v) {
    return hsum8(_mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
}

/* Out of line so every tile shape runs the very same code. */
__attribute__((noinline)) TGT static float mdot(const float *mw, const float *s, int64_t nb) {
    /* 8 lanes (block b into lane b % 8), the fixed hsum, then the tail */
    __m256 acc = _mm256_setzero_ps();
    int64_t b = 0;
    for (; b + 8 <= nb; b += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(mw + b), _mm256_loadu_ps(s + b), acc);
    float t = hsum8(acc);
    for (; b < nb; b++) t = fmaf(mw[b], s[b], t);
    return t;
}

static inline int64_t block_bytes(int kind) {
    return kind == K_Q4_0 ? 18 : kind == K_Q4_1 ? 20 : kind == K_Q8_0 ? 34 : 18;
}

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
    default: {
        const di_block_q4_K *bl = (const di_block_q4_K *)(const void *)row + (b >> 3);
        int j = (int)(b & 7);
        __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(bl->qs + 32 * (j >> 1)));
        if (j & 1) v = _mm256_srli_epi16(v, 4);
        return _mm256_and_si256(v, m4);
    }
    }
}

/* Blocks 2p and 2p+1 as one vector. */
TGT static inline ALWAYS __m512i load_u64(int kind, const uint8_t *row, int64_t p) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(load_u32(kind, row, 2 * p)), load_u32(kind, row, 2 * p + 1), 1);
}

/* Per-block scale (dw, also expanded x8 into dw8) and offset mw of a row. */
TGT static inline ALWAYS void prep(int kind, const uint8_t *row, int64_t nb, float *dw8, float *mw) {
    for (int64_t b = 0; b < nb; b++) {
        float dw, m;
        switch (kind) {
        case K_Q4_0:
            dw = _cvtsh_ss(((const di_block_q4_0 *)(const void *)row)[b].d);
            m = -8.0f * dw;
            break;
        case K_Q4_1:
            dw = _cvtsh_ss(((const di_block_q4_1 *)(const void *)row)[b].d);
            m = _cvtsh_ss(((const di_block_q4_1 *)(const void *)row)[b].m);
            break;
        case K_Q8_0:
            dw = _cvtsh_ss(((const di_block_q8_0 *)(const void *)row)[b].d);
            m = -128.0f * dw;
            break;
        default: {
            const di_block_q4_K *bl = (const di_block_q4_K *)(const void *)row + (b >> 3);
            int sc, mn;
            di_q4_K_scale_min(bl->scales, (int)(b & 7), &sc, &mn);
            dw = _cvtsh_ss(bl->d) * (float)sc;
            m = -_cvtsh_ss(bl->dmin) * (float)mn;
            break;
        }
        }
        _mm256_storeu_ps(dw8 + 8 * b, _mm256_set1_ps(dw));
        mw[b] = m;
    }
}

TGT static inline ALWAYS void tile(int kind, const int nr, const int nc, const uint8_t *const *w, const float *dw8,
                                   const float *mw, int64_t nb, const di_q8_rows *x, int64_t r0, float *y,
                                   int64_t ldy, int64_t o) {
    __m512 acc[NR][NC];
    const __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
#pragma GCC unroll 4
    for (int i = 0; i < nr; i++)
#pragma GCC unroll 4
        for (int j = 0; j < nc; j++) acc[i][j] = _mm512_setzero_ps();
    const int64_t bb = block_bytes(kind);
    for (int64_t p = 0; p < nb / 2; p++) {
        __m512i u[NC];
#pragma GCC unroll 4
        for (int j = 0; j < nc; j++) {
            _mm_prefetch((const char *)w[j] + 2 * p * bb + PREFETCH_BYTES, _MM_HINT_T0);
            u[j] = load_u64(kind, w[j], p);
        }
#pragma GCC unroll 4
        for (int i = 0; i < nr; i++) {
            const int64_t r = r0 + i;
            __m512i q = _mm512_loadu_si512((const void *)(x->q + r * x->ldq + 64 * p));
            __m128 d2 = _mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)(const void *)(x->d + r * x->ldb + 2 * p)));
            __m512 dx = _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(d2));
#pragma GCC unroll 4
            for (int j = 0; j < nc; j++) {
                __m512i dp = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u[j], q);
                __m512 sc = _mm512_mul_ps(_mm512_loadu_ps(dw8 + j * 8 * nb + 16 * p), dx);
                acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dp), sc, acc[i][j]);
            }
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < nr; i++)
#pragma GCC unroll 4
        for (int j = 0; j < nc; j++) {
            const int64_t r = r0 + i;
            float v = hsum16(acc[i][j]);
            if (nb & 1) { /* the odd last block, 256 bits wide */
                int64_t b = nb - 1;
                __m256i q = _mm256_loadu_si256((const __m256i *)(const void *)(x->q + r * x->ldq + 32 * b));
                __m256i dp = _mm256_dpbusd_epi32(_mm256_setzero_si256(), load_u32(kind, w[j], b), q);
                __m256 sc = _mm256_mul_ps(_mm256_loadu_ps(dw8 + j * 8 * nb + 8 * b), _mm256_set1_ps(x->d[r * x->ldb + b]));
                v = v + hsum8(_mm256_mul_ps(_mm256_cvtepi32_ps(dp), sc));
            }
            v = v + mdot(mw + j * nb, x->s + r * x->ldb, nb);
            y[r * ldy + o + j] = v;
        }
}

TGT static inline ALWAYS void gemm(int kind, const void *w, uint64_t row_bytes, int64_t o0, int64_t o1,
                                   const di_q8_rows *x, int64_t n_rows, int64_t n_in, float *y, int64_t ldy,
                                   float *scratch) {
    const int64_t nb = n_in / DI_Q8_ACT_BLOCK;
    float *dw8 = scratch, *mw = scratch + NC * 8 * nb; /* (NC, 8 nb) and (NC, nb) */
    for (int64_t o = o0; o < o1; o += NC) {
        int nc = o1 - o < NC ? (int)(o1 - o) : NC;
        const uint8_t *rows[NC];
        for (int j = 0; j < nc; j++) {
            rows[j] = (const uint8_t *)w + (uint64_t)(o + j) * row_bytes;
            prep(kind, rows[j], nb, dw8 + j * 8 * nb, mw + j * nb);
        }
        if (nc == NC) {
            int64_t r = 0;
            for (; r + NR <= n_rows; r += NR) tile(kind, NR, NC, rows, dw8, mw, nb, x, r, y, ldy, o);
            for (; r < n_rows; r++) tile(kind, 1, NC, rows, dw8, mw, nb, x, r, y, ldy, o);
        } else {
            for (int j = 0; j < nc; j++)
                for (int64_t r = 0; r < n_rows; r++)
                    tile(kind, 1, 1, rows + j, dw8 + j * 8 * nb, mw + j * nb, nb, x, r, y, ldy, o + j);
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
DEFINE_GEMM(q8_0, K_Q8_0)
DEFINE_GEMM(q4_K, K_Q4_K)

/* Quantization is the AVX2 one (the same bits in every table). */
void di_quantize_q8_avx512(const float *x, int8_t *q, float *d, float *s, int64_t n) {
    di_quantize_q8_avx2(x, q, d, s, n);
}

#endif
