/* Fused dequantize-and-dot for DeepSeek's block-scaled FP8 and MXFP4 rows
 * (kernel table entries fp8_dot / mxfp4_dot): the weight row is decoded in
 * registers and multiplied with x at once, instead of being written to a
 * scratch row that dot_f32 reads back (the decode path of dsv4_linear,
 * where each weight row meets one to three activation rows).
 *
 * Bit-exact contract: each returns dot_f32(fp8_row(w) / mxfp4_row(w), x, n)
 * of the same table -- the canonical order of dot_avx2.c (elements
 * [16j, 16j+8) into accumulator 0, [16j+8, 16j+16) into accumulator 1, a
 * fixed reduction tree, then the tail one by one). The AVX-512 versions keep
 * that order in one zmm: its low half is accumulator 0 and its high half
 * accumulator 1, and the reduction adds the halves before the same tree.
 * Decoded values are the exact products the row functions compute, so the
 * fused and the dequantized paths agree bit for bit (tested). */
#include "kernels/cpu/kernels.h"
#include "tensor/fp8.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define AVX2 __attribute__((target("avx2,fma,f16c")))
#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))

AVX2 static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* 2^(e - 127) as the row functions compute it (ldexpf), without the call. */
static inline float e8m0_scale(uint8_t e) {
    if (e == 0) return ldexpf(1.0f, -127); /* subnormal */
    uint32_t u = (uint32_t)e << 23;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* 16 e4m3 bytes -> f16 bit patterns (as dot_avx2.c's e4m3x8, 16 wide). */
AVX2 static inline __m256i e4m3_to_h16(const uint8_t *w) {
    __m256i b = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(const void *)w));
    __m256i mag = _mm256_and_si256(b, _mm256_set1_epi16(0x7f));
    __m256i h = _mm256_or_si256(_mm256_slli_epi16(_mm256_and_si256(b, _mm256_set1_epi16(0x80)), 8),
                                _mm256_slli_epi16(mag, 7));
    __m256i nan = _mm256_cmpeq_epi16(mag, _mm256_set1_epi16(0x7f));
    return _mm256_or_si256(h, _mm256_and_si256(nan, _mm256_set1_epi16(0x7c00)));
}

/* ---- AVX2 ------------------------------------------------------------------ */

AVX2 static float fp8_dot_avx2(const uint8_t *w, const float *scale, int32_t block, const float *x, int64_t n) {
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    const __m256 k256 = _mm256_set1_ps(256.0f);
    int64_t n16 = block % 16 ? 0 : n - n % 16, i = 0;
    for (; i < n16; i += 16) {
        __m256 vs = _mm256_set1_ps(scale[i / block]);
        __m256i h = e4m3_to_h16(w + i);
        __m256 w0 = _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(h)), k256), vs);
        __m256 w1 = _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtph_ps(_mm256_extracti128_si256(h, 1)), k256), vs);
        acc0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + i), acc0);
        acc1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + i + 8), acc1);
    }
    if (n16 == 0 && n >= 16) { /* odd block: the canonical order on decoded values */
        for (; i + 16 <= n; i += 16) {
            float t[16];
            for (int q = 0; q < 16; q++) t[q] = di_e4m3_to_f32(w[i + q]) * scale[(i + q) / block];
            acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(t), _mm256_loadu_ps(x + i), acc0);
            acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(t + 8), _mm256_loadu_ps(x + i + 8), acc1);
        }
    }
    float s = hsum8(_mm256_add_ps(acc0, acc1));
    for (; i < n; i++) s = fmaf(di_e4m3_to_f32(w[i]) * scale[i / block], x[i], s);
    return s;
}

/* 32 e2m1 codes of one scale group, elements 0..31 as 4 x 8 lanes. */
AVX2 static inline __m256 e2m1x8_scaled(__m128i codes8, __m256 vs) {
    const __m256 lut = _mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f);
    __m256i idx = _mm256_cvtepu8_epi32(codes8);
    __m256 mag = _mm256_permutevar8x32_ps(lut, idx);
    __m256i sign = _mm256_slli_epi32(_mm256_and_si256(idx, _mm256_set1_epi32(8)), 28);
    return _mm256_mul_ps(_mm256_or_ps(mag, _mm256_castsi256_ps(sign)), vs);
}

AVX2 static float mxfp4_dot_avx2(const uint8_t *w, const uint8_t *e8m0, const float *x, int64_t n) {
    const __m128i low4 = _mm_set1_epi8(0x0f);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    for (int64_t g = 0; g < n / 32; g++) {
        __m256 vs = _mm256_set1_ps(e8m0_scale(e8m0[g]));
        __m128i bytes = _mm_loadu_si128((const __m128i *)(const void *)(w + g * 16));
        __m128i lo = _mm_and_si128(bytes, low4), hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), low4);
        __m128i c0 = _mm_unpacklo_epi8(lo, hi), c1 = _mm_unpackhi_epi8(lo, hi);
        const float *xg = x + g * 32;
        acc0 = _mm256_fmadd_ps(e2m1x8_scaled(c0, vs), _mm256_loadu_ps(xg), acc0);
        acc1 = _mm256_fmadd_ps(e2m1x8_scaled(_mm_srli_si128(c0, 8), vs), _mm256_loadu_ps(xg + 8), acc1);
        acc0 = _mm256_fmadd_ps(e2m1x8_scaled(c1, vs), _mm256_loadu_ps(xg + 16), acc0);
        acc1 = _mm256_fmadd_ps(e2m1x8_scaled(_mm_srli_si128(c1, 8), vs), _mm256_loadu_ps(xg + 24), acc1);
    }
    return hsum8(_mm256_add_ps(acc0, acc1)); /* n is a multiple of 32: no tail */
}

/* ---- AVX-512 ------------------------------------------------------------------ */

AVX512 static inline float hsum_halves(__m512 acc) {
    __m256 lo = _mm512_castps512_ps256(acc);
    __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1));
    return hsum8(_mm256_add_ps(lo, hi));
}

/* Decode streams each weight once from memory: fetch this far ahead
 * (as gemm_f32_avx512.c measured for 1-byte weights). */
#define PREFETCH_BYTES 2048

AVX512 static float fp8_dot_avx512(const uint8_t *w, const float *scale, int32_t block, const float *x, int64_t n) {
    if (block % 16) return fp8_dot_avx2(w, scale, block, x, n);
    __m512 acc = _mm512_setzero_ps();
    int64_t n16 = n - n % 16, i = 0;
    for (; i < n16; i += 16) {
        if (i % 64 == 0) _mm_prefetch((const char *)(w + i + PREFETCH_BYTES), _MM_HINT_T0);
        /* (v * 256) * s == v * (256 * s): every factor and partial product
         * is exact (a shift of an e4m3 value), so one rounding either way */
        __m512 wv = _mm512_mul_ps(_mm512_cvtph_ps(e4m3_to_h16(w + i)), _mm512_set1_ps(256.0f * scale[i / block]));
        acc = _mm512_fmadd_ps(wv, _mm512_loadu_ps(x + i), acc);
    }
    float s = hsum_halves(acc);
    for (; i < n; i++) s = fmaf(di_e4m3_to_f32(w[i]) * scale[i / block], x[i], s);
    return s;
}

AVX512 static float mxfp4_dot_avx512(const uint8_t *w, const uint8_t *e8m0, const float *x, int64_t n) {
    const __m512 lut = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f, -1.0f, -1.5f,
                                      -2.0f, -3.0f, -4.0f, -6.0f);
    const __m128i low4 = _mm_set1_epi8(0x0f);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t g = 0; g < n / 32; g++) {
        if (g % 4 == 0) _mm_prefetch((const char *)(w + g * 16 + PREFETCH_BYTES), _MM_HINT_T0);
        __m512 vs = _mm512_set1_ps(e8m0_scale(e8m0[g]));
        __m128i bytes = _mm_loadu_si128((const __m128i *)(const void *)(w + g * 16));
        __m128i lo = _mm_and_si128(bytes, low4), hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), low4);
        __m512 w0 = _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi)), lut), vs);
        __m512 w1 = _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_cvtepu8_epi32(_mm_unpackhi_epi8(lo, hi)), lut), vs);
        acc = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x + g * 32), acc);
        acc = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + g * 32 + 16), acc);
    }
    return hsum_halves(acc);
}

/* Four rows (stride row_bytes, scale rows sstride floats apart) against one x:
 * four independent accumulator chains, so the FMA latency of one row's
 * single chain no longer bounds decode; each row's arithmetic is
 * fp8_dot_avx512's, so out[j] equals it bit for bit. block % 16 == 0. */
AVX512 static void fp8_dot4_avx512(const uint8_t *w, uint64_t row_bytes, const float *scale, int64_t sstride,
                                   int32_t block, const float *x, int64_t n, float out[4]) {
    if (block % 16) {
        for (int j = 0; j < 4; j++) out[j] = fp8_dot_avx2(w + j * row_bytes, scale + j * sstride, block, x, n);
        return;
    }
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
    const uint8_t *w0 = w, *w1 = w + row_bytes, *w2 = w + 2 * row_bytes, *w3 = w + 3 * row_bytes;
    int64_t n16 = n - n % 16, i = 0;
    for (; i < n16; i += 16) {
        if (i % 64 == 0) {
            _mm_prefetch((const char *)(w0 + i + PREFETCH_BYTES), _MM_HINT_T0);
            _mm_prefetch((const char *)(w1 + i + PREFETCH_BYTES), _MM_HINT_T0);
            _mm_prefetch((const char *)(w2 + i + PREFETCH_BYTES), _MM_HINT_T0);
            _mm_prefetch((const char *)(w3 + i + PREFETCH_BYTES), _MM_HINT_T0);
        }
        __m512 xv = _mm512_loadu_ps(x + i);
        int64_t b = i / block;
        a0 = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtph_ps(e4m3_to_h16(w0 + i)), _mm512_set1_ps(256.0f * scale[b])), xv, a0);
        a1 = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtph_ps(e4m3_to_h16(w1 + i)),
                                           _mm512_set1_ps(256.0f * scale[sstride + b])), xv, a1);
        a2 = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtph_ps(e4m3_to_h16(w2 + i)),
                                           _mm512_set1_ps(256.0f * scale[2 * sstride + b])), xv, a2);
        a3 = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtph_ps(e4m3_to_h16(w3 + i)),
                                           _mm512_set1_ps(256.0f * scale[3 * sstride + b])), xv, a3);
    }
    __m512 acc[4] = {a0, a1, a2, a3};
    for (int j = 0; j < 4; j++) {
        float s = hsum_halves(acc[j]);
        const uint8_t *wj = w + j * row_bytes;
        const float *sj = scale + j * sstride;
        for (int64_t t = i; t < n; t++) s = fmaf(di_e4m3_to_f32(wj[t]) * sj[t / block], x[t], s);
        out[j] = s;
    }
}

/* Four MXFP4 rows (stride row_bytes, scale rows sstride bytes apart), as above. */
AVX512 static void mxfp4_dot4_avx512(const uint8_t *w, uint64_t row_bytes, const uint8_t *e8m0, int64_t sstride,
                                     const float *x, int64_t n, float out[4]) {
    const __m512 lut = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f, -1.0f, -1.5f,
                                      -2.0f, -3.0f, -4.0f, -6.0f);
    const __m128i low4 = _mm_set1_epi8(0x0f);
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    for (int64_t g = 0; g < n / 32; g++) {
        __m512 x0 = _mm512_loadu_ps(x + g * 32), x1 = _mm512_loadu_ps(x + g * 32 + 16);
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            const uint8_t *wj = w + j * row_bytes + g * 16;
            if (g % 4 == 0) _mm_prefetch((const char *)(wj + PREFETCH_BYTES), _MM_HINT_T0);
            __m512 vs = _mm512_set1_ps(e8m0_scale(e8m0[j * sstride + g]));
            __m128i bytes = _mm_loadu_si128((const __m128i *)(const void *)wj);
            __m128i lo = _mm_and_si128(bytes, low4), hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), low4);
            __m512 v0 = _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi)), lut), vs);
            __m512 v1 = _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_cvtepu8_epi32(_mm_unpackhi_epi8(lo, hi)), lut), vs);
            acc[j] = _mm512_fmadd_ps(v0, x0, acc[j]);
            acc[j] = _mm512_fmadd_ps(v1, x1, acc[j]);
        }
    }
    for (int j = 0; j < 4; j++) out[j] = hsum_halves(acc[j]);
}

const di_fused_fp8_kernels di_fused_fp8_avx2 = {fp8_dot_avx2, mxfp4_dot_avx2, NULL, NULL};
const di_fused_fp8_kernels di_fused_fp8_avx512 = {fp8_dot_avx512, mxfp4_dot_avx512, fp8_dot4_avx512, mxfp4_dot4_avx512};

#endif
