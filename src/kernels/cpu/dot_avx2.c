/* The AVX2 + FMA + F16C dispatch table. Each function carries a target
 * attribute, so this file builds without -march=native and is only entered
 * after di_cpu_kernels_get has checked cpuid.
 *
 * Canonical order (what makes fused and dequantized paths agree bit for bit):
 * elements [16j, 16j+8) are FMA'd into accumulator 0 and [16j+8, 16j+16)
 * into accumulator 1; at the end acc0 + acc1 is reduced by a fixed tree
 * (hsum), then elements past the last multiple of 16 are added one by one.
 * Quantized rows have n a multiple of 32, so a block of 32 is two steps. */
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/half.h"
#include "kernels/cpu/quant_blocks.h"
#include "tensor/fp8.h"
#include "tensor/half.h"
#include "kernels/cpu/gemm_q8.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>
#include <math.h>

#define AVX2 __attribute__((target("avx2,fma,f16c")))

AVX2 static inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* a (n), b (n): the canonical order */
AVX2 static float dot_f32_avx2(const float *a, const float *b, int64_t n) {
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t n16 = n - n % 16, i = 0;
    for (; i < n16; i += 16) {
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
    }
    float s = hsum(_mm256_add_ps(acc0, acc1));
    for (; i < n; i++) s = fmaf(a[i], b[i], s);
    return s;
}

/* 4 rows of w against one x: same per-row order as dot_f32_avx2. */
AVX2 static void dot_f32_x4_avx2(const float *w, int64_t ldw, const float *x, int64_t n, float out[4]) {
    __m256 a00 = _mm256_setzero_ps(), a01 = _mm256_setzero_ps();
    __m256 a10 = _mm256_setzero_ps(), a11 = _mm256_setzero_ps();
    __m256 a20 = _mm256_setzero_ps(), a21 = _mm256_setzero_ps();
    __m256 a30 = _mm256_setzero_ps(), a31 = _mm256_setzero_ps();
    const float *w0 = w, *w1 = w + ldw, *w2 = w + 2 * ldw, *w3 = w + 3 * ldw;
    int64_t n16 = n - n % 16, i = 0;
    for (; i < n16; i += 16) {
        __m256 x0 = _mm256_loadu_ps(x + i), x1 = _mm256_loadu_ps(x + i + 8);
        a00 = _mm256_fmadd_ps(_mm256_loadu_ps(w0 + i), x0, a00);
        a01 = _mm256_fmadd_ps(_mm256_loadu_ps(w0 + i + 8), x1, a01);
        a10 = _mm256_fmadd_ps(_mm256_loadu_ps(w1 + i), x0, a10);
        a11 = _mm256_fmadd_ps(_mm256_loadu_ps(w1 + i + 8), x1, a11);
        a20 = _mm256_fmadd_ps(_mm256_loadu_ps(w2 + i), x0, a20);
        a21 = _mm256_fmadd_ps(_mm256_loadu_ps(w2 + i + 8), x1, a21);
        a30 = _mm256_fmadd_ps(_mm256_loadu_ps(w3 + i), x0, a30);
        a31 = _mm256_fmadd_ps(_mm256_loadu_ps(w3 + i + 8), x1, a31);
    }
    float s0 = hsum(_mm256_add_ps(a00, a01)), s1 = hsum(_mm256_add_ps(a10, a11));
    float s2 = hsum(_mm256_add_ps(a20, a21)), s3 = hsum(_mm256_add_ps(a30, a31));
    for (; i < n; i++) {
        s0 = fmaf(w0[i], x[i], s0);
        s1 = fmaf(w1[i], x[i], s1);
        s2 = fmaf(w2[i], x[i], s2);
        s3 = fmaf(w3[i], x[i], s3);
    }
    out[0] = s0;
    out[1] = s1;
    out[2] = s2;
    out[3] = s3;
}

/* ---- per-dtype dequantizers: each block lands in 4 vectors of 8 ---- */

/* Q4_0/Q4_1 nibbles of one block as 4 float vectors: elements 0-7, 8-15
 * (low nibbles of qs[0..15]) and 16-23, 24-31 (high nibbles). */
AVX2 static inline void q4_nibbles(const uint8_t *qs, __m256 v[4]) {
    __m128i raw = _mm_loadu_si128((const __m128i *)qs);
    __m128i lo = _mm_and_si128(raw, _mm_set1_epi8(0x0F));
    __m128i hi = _mm_and_si128(_mm_srli_epi16(raw, 4), _mm_set1_epi8(0x0F));
    v[0] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo));
    v[1] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8)));
    v[2] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi));
    v[3] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8)));
}

AVX2 static inline void q4_0_vecs(const di_block_q4_0 *b, __m256 v[4]) {
    __m256 d = _mm256_set1_ps(_cvtsh_ss(b->d));
    __m256 eight = _mm256_set1_ps(8.0f);
    q4_nibbles(b->qs, v);
    for (int k = 0; k < 4; k++) v[k] = _mm256_mul_ps(_mm256_sub_ps(v[k], eight), d);
}

AVX2 static inline void q4_1_vecs(const di_block_q4_1 *b, __m256 v[4]) {
    __m256 d = _mm256_set1_ps(_cvtsh_ss(b->d)), m = _mm256_set1_ps(_cvtsh_ss(b->m));
    q4_nibbles(b->qs, v);
    for (int k = 0; k < 4; k++) v[k] = _mm256_fmadd_ps(v[k], d, m);
}

AVX2 static inline void q8_0_vecs(const di_block_q8_0 *b, __m256 v[4]) {
    __m256 d = _mm256_set1_ps(_cvtsh_ss(b->d));
    for (int k = 0; k < 4; k++) {
        __m128i q = _mm_loadl_epi64((const __m128i *)(b->qs + 8 * k));
        v[k] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d);
    }
}

/* How far ahead the fused dots prefetch weights. Decode streams every
 * weight once from memory; measured here (VM, shared cores) a software
 * prefetch ~1 KiB ahead lifts the Q4_1 dot from ~1.3 to ~2.5 GB/s, since
 * the hardware prefetcher alone leaves the core waiting. */
#define PREFETCH_BYTES 1024

/* One definition per 32-element block type: dequant stores the 4 vectors,
 * dot feeds them into the canonical accumulators (0, 1, 0, 1). */
#define DEFINE_Q32(name, block_t, vecs_fn)                                      \
    AVX2 static void dequant_##name##_avx2(const void *w, float *dst, int64_t n) { \
        const block_t *b = w;                                                   \
        for (int64_t i = 0; i < n / DI_QK; i++) {                               \
            __m256 v[4];                                                        \
            vecs_fn(&b[i], v);                                                  \
            for (int k = 0; k < 4; k++) _mm256_storeu_ps(dst + i * DI_QK + 8 * k, v[k]); \
        }                                                                       \
    }                                                                           \
    AVX2 static float dot_##name##_avx2(const void *w, const float *x, int64_t n) { \
        const block_t *b = w;                                                   \
        __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();          \
        for (int64_t i = 0; i < n / DI_QK; i++) {                               \
            __m256 v[4];                                                        \
            _mm_prefetch((const char *)(b + i) + PREFETCH_BYTES, _MM_HINT_T0);  \
            vecs_fn(&b[i], v);                                                  \
            const float *xb = x + i * DI_QK;                                    \
            acc0 = _mm256_fmadd_ps(v[0], _mm256_loadu_ps(xb), acc0);            \
            acc1 = _mm256_fmadd_ps(v[1], _mm256_loadu_ps(xb + 8), acc1);        \
            acc0 = _mm256_fmadd_ps(v[2], _mm256_loadu_ps(xb + 16), acc0);       \
            acc1 = _mm256_fmadd_ps(v[3], _mm256_loadu_ps(xb + 24), acc1);       \
        }                                                                       \
        return hsum(_mm256_add_ps(acc0, acc1));                                 \
    }

DEFINE_Q32(q4_0, di_block_q4_0, q4_0_vecs)
DEFINE_Q32(q4_1, di_block_q4_1, q4_1_vecs)
DEFINE_Q32(q8_0, di_block_q8_0, q8_0_vecs)

/* Q6_K: the block is unpacked by the shared scalar routine (the compiler
 * vectorizes it), then dotted in the canonical order. */
AVX2 static void dequant_q6_K_avx2(const void *w, float *dst, int64_t n) {
    const di_block_q6_K *b = w;
    for (int64_t i = 0; i < n / DI_QK_K; i++)
        di_q6_K_block_to_float(&b[i], _cvtsh_ss(b[i].d), dst + i * DI_QK_K);
}

AVX2 static float dot_q6_K_avx2(const void *w, const float *x, int64_t n) {
    const di_block_q6_K *b = w;
    float tmp[DI_QK_K]; /* one dequantized super-block */
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / DI_QK_K; i++) {
        di_q6_K_block_to_float(&b[i], _cvtsh_ss(b[i].d), tmp);
        const float *xb = x + i * DI_QK_K;
        for (int j = 0; j < DI_QK_K; j += 16) {
            acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(tmp + j), _mm256_loadu_ps(xb + j), acc0);
            acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(tmp + j + 8), _mm256_loadu_ps(xb + j + 8), acc1);
        }
    }
    return hsum(_mm256_add_ps(acc0, acc1));
}

AVX2 static void f16_to_f32_avx2(const uint16_t *src, float *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++) dst[i] = di_half_to_float(src[i]);
}

AVX2 static void f32_to_f16_avx2(const float *src, uint16_t *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) dst[i] = di_float_to_half(src[i]);
}

AVX2 static void dequant_f32_avx2(const void *w, float *dst, int64_t n) {
    const float *src = w;
    for (int64_t i = 0; i < n; i++) dst[i] = src[i];
}

AVX2 static void dequant_f16_avx2(const void *w, float *dst, int64_t n) { f16_to_f32_avx2(w, dst, n); }

AVX2 static float dot_f32_row_avx2(const void *w, const float *x, int64_t n) {
    return dot_f32_avx2(w, x, n);
}

/* F16 rows in the canonical order; the tail past n16 is converted scalar,
 * exactly as dequant_f16_avx2 + dot_f32_avx2 would see it. */
AVX2 static float dot_f16_row_avx2(const void *w, const float *x, int64_t n) {
    const uint16_t *src = w;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t n16 = n - n % 16, i = 0;
    for (; i < n16; i += 16) {
        __m256 w0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i)));
        __m256 w1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i + 8)));
        acc0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + i), acc0);
        acc1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + i + 8), acc1);
    }
    float s = hsum(_mm256_add_ps(acc0, acc1));
    for (; i < n; i++) s = fmaf(di_half_to_float(src[i]), x[i], s);
    return s;
}

/* e4m3 -> f32 eight at a time through F16C: the byte's exponent and
 * mantissa fields, moved up 7 bits, are an f16 with the same fields (bias 15
 * instead of 7, subnormals included), i.e. the value times 2^-8; times 256
 * is exact. NaN codes (S.1111.111) get the f16 exponent forced to all ones.
 * Then one multiply by the block scale, as in the scalar form. */
AVX2 static inline __m256 e4m3x8(const uint8_t *w) {
    __m128i b = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)(const void *)w));
    __m128i mag = _mm_and_si128(b, _mm_set1_epi16(0x7f));
    __m128i h = _mm_or_si128(_mm_slli_epi16(_mm_and_si128(b, _mm_set1_epi16(0x80)), 8), _mm_slli_epi16(mag, 7));
    __m128i nan = _mm_cmpeq_epi16(mag, _mm_set1_epi16(0x7f));
    h = _mm_or_si128(h, _mm_and_si128(nan, _mm_set1_epi16(0x7c00)));
    return _mm256_mul_ps(_mm256_cvtph_ps(h), _mm256_set1_ps(256.0f));
}

AVX2 static void fp8_row_avx2(const uint8_t *w, const float *scale, int32_t block, float *dst, int64_t n) {
    for (int64_t b0 = 0; b0 < n; b0 += block) {
        int64_t b1 = b0 + block < n ? b0 + block : n, i = b0;
        float sc = scale[b0 / block];
        __m256 vs = _mm256_set1_ps(sc);
        for (; i + 8 <= b1; i += 8) _mm256_storeu_ps(dst + i, _mm256_mul_ps(e4m3x8(w + i), vs));
        for (; i < b1; i++) dst[i] = di_e4m3_to_f32(w[i]) * sc;
    }
}

/* 8 e2m1 codes (one per 32-bit lane) times scale: magnitude from a
 * permute of the 8 non-negative values, sign bit 3 moved to bit 31 (so code
 * 8 is -0.0 as in the scalar table). */
AVX2 static inline __m256 e2m1x8(__m128i codes8, __m256 vs) {
    const __m256 lut = _mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f);
    __m256i idx = _mm256_cvtepu8_epi32(codes8);
    __m256 mag = _mm256_permutevar8x32_ps(lut, idx);
    __m256i sign = _mm256_slli_epi32(_mm256_and_si256(idx, _mm256_set1_epi32(8)), 28);
    return _mm256_mul_ps(_mm256_or_ps(mag, _mm256_castsi256_ps(sign)), vs);
}

AVX2 static void mxfp4_row_avx2(const uint8_t *w, const uint8_t *e8m0, float *dst, int64_t n) {
    const __m128i low4 = _mm_set1_epi8(0x0f);
    for (int64_t g = 0; g < n / 32; g++) {
        /* 2^(e-127): the exponent field itself, but for the subnormal e = 0 */
        __m256 vs = e8m0[g] ? _mm256_castsi256_ps(_mm256_set1_epi32((int)((uint32_t)e8m0[g] << 23)))
                            : _mm256_set1_ps(ldexpf(1.0f, -127));
        __m128i bytes = _mm_loadu_si128((const __m128i *)(const void *)(w + g * 16));
        __m128i lo = _mm_and_si128(bytes, low4), hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), low4);
        __m128i c0 = _mm_unpacklo_epi8(lo, hi), c1 = _mm_unpackhi_epi8(lo, hi); /* elements 0..15, 16..31 */
        float *d = dst + g * 32;
        _mm256_storeu_ps(d, e2m1x8(c0, vs));
        _mm256_storeu_ps(d + 8, e2m1x8(_mm_srli_si128(c0, 8), vs));
        _mm256_storeu_ps(d + 16, e2m1x8(c1, vs));
        _mm256_storeu_ps(d + 24, e2m1x8(_mm_srli_si128(c1, 8), vs));
    }
}

/* BF16 is the top half of an f32: widen and shift, exact. */
AVX2 static inline __m256 bf16x8(const uint16_t *p) {
    __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

AVX2 static void dequant_bf16_avx2(const void *w, float *dst, int64_t n) {
    const uint16_t *src = w;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, bf16x8(src + i));
    for (; i < n; i++) dst[i] = di_bf16_to_f32(src[i]);
}

/* BF16 rows in the canonical order (as dot_f16_row_avx2). */
AVX2 static float dot_bf16_row_avx2(const void *w, const float *x, int64_t n) {
    const uint16_t *src = w;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t n16 = n - n % 16, i = 0;
    for (; i < n16; i += 16) {
        acc0 = _mm256_fmadd_ps(bf16x8(src + i), _mm256_loadu_ps(x + i), acc0);
        acc1 = _mm256_fmadd_ps(bf16x8(src + i + 8), _mm256_loadu_ps(x + i + 8), acc1);
    }
    float s = hsum(_mm256_add_ps(acc0, acc1));
    for (; i < n; i++) s = fmaf(di_bf16_to_f32(src[i]), x[i], s);
    return s;
}

/* The float entries every x86 table shares (the f32 activation path). */
#define AVX2_FLOAT_ENTRIES                                                     \
    .dot_f32 = dot_f32_avx2,                                                   \
    .dot_f32_x4 = dot_f32_x4_avx2,                                             \
    .dequant = {                                                               \
        [DI_DTYPE_F32] = dequant_f32_avx2,                                     \
        [DI_DTYPE_F16] = dequant_f16_avx2,                                     \
        [DI_DTYPE_BF16] = dequant_bf16_avx2,                                   \
        [DI_DTYPE_Q4_0] = dequant_q4_0_avx2,                                   \
        [DI_DTYPE_Q4_1] = dequant_q4_1_avx2,                                   \
        [DI_DTYPE_Q8_0] = dequant_q8_0_avx2,                                   \
        [DI_DTYPE_Q6_K] = dequant_q6_K_avx2,                                   \
    },                                                                         \
    .dot = {                                                                   \
        [DI_DTYPE_F32] = dot_f32_row_avx2,                                     \
        [DI_DTYPE_F16] = dot_f16_row_avx2,                                     \
        [DI_DTYPE_BF16] = dot_bf16_row_avx2,                                   \
        [DI_DTYPE_Q4_0] = dot_q4_0_avx2,                                       \
        [DI_DTYPE_Q4_1] = dot_q4_1_avx2,                                       \
        [DI_DTYPE_Q8_0] = dot_q8_0_avx2,                                       \
        [DI_DTYPE_Q6_K] = dot_q6_K_avx2,                                       \
    },                                                                         \
    .fp8_row = fp8_row_avx2,                                                   \
    .mxfp4_row = mxfp4_row_avx2,                                               \
    .f16_to_f32 = f16_to_f32_avx2,                                             \
    .f32_to_f16 = f32_to_f16_avx2

/* Each table has an int8 activation twin ("-q8"). The AVX-512 tables add
 * their own files' gemms (gemm_f32_avx512.c: exact zmm tiles;
 * gemm_q8_avx512.c: VNNI); their remaining float entries are these AVX2
 * ones. */
extern const di_cpu_kernels di_cpu_kernels_avx2_q8, di_cpu_kernels_avx512_q8;
extern const di_fused_fp8_kernels di_fused_fp8_avx2, di_fused_fp8_avx512;
const di_cpu_kernels di_cpu_kernels_avx2 = {
    .name = "avx2", AVX2_FLOAT_ENTRIES, .fused_fp8 = &di_fused_fp8_avx2, .exact = &di_cpu_kernels_avx2, .q8 = &di_cpu_kernels_avx2_q8,
};
const di_cpu_kernels di_cpu_kernels_avx2_q8 = {
    .name = "avx2-q8", AVX2_FLOAT_ENTRIES, .fused_fp8 = &di_fused_fp8_avx2, DI_GEMM_Q8_ENTRIES(avx2),
    .exact = &di_cpu_kernels_avx2, .q8 = &di_cpu_kernels_avx2_q8,
};
const di_cpu_kernels di_cpu_kernels_avx512 = {
    .name = "avx512", AVX2_FLOAT_ENTRIES, .fused_fp8 = &di_fused_fp8_avx512, .attn_run = di_attn_run_avx512, DI_GEMM_F32_ENTRIES(avx512),
    .exact = &di_cpu_kernels_avx512, .q8 = &di_cpu_kernels_avx512_q8,
};
const di_cpu_kernels di_cpu_kernels_avx512_q8 = {
    .name = "avx512-q8", AVX2_FLOAT_ENTRIES, .fused_fp8 = &di_fused_fp8_avx512, .attn_run = di_attn_run_avx512, DI_GEMM_F32_ENTRIES(avx512), DI_GEMM_Q8_ENTRIES_AVX512,
    .exact = &di_cpu_kernels_avx512, .q8 = &di_cpu_kernels_avx512_q8,
};
/* AMX: the avx512 exact entries; the int8 twin's gemms are gemm_q8_amx.c. */
extern const di_cpu_kernels di_cpu_kernels_avx512_amx_q8;
const di_cpu_kernels di_cpu_kernels_avx512_amx = {
    .name = "avx512-amx", AVX2_FLOAT_ENTRIES, .fused_fp8 = &di_fused_fp8_avx512, .attn_run = di_attn_run_avx512, DI_GEMM_F32_ENTRIES(avx512),
    .exact = &di_cpu_kernels_avx512_amx, .q8 = &di_cpu_kernels_avx512_amx_q8,
};
const di_cpu_kernels di_cpu_kernels_avx512_amx_q8 = {
    .name = "avx512-amx-q8", AVX2_FLOAT_ENTRIES, .fused_fp8 = &di_fused_fp8_avx512, .attn_run = di_attn_run_avx512, DI_GEMM_F32_ENTRIES(avx512), DI_GEMM_Q8_ENTRIES(amx), DI_GEMM_Q8_X16_ENTRIES_AMX, .pack_q8 = di_pack_q8_amx,
    .exact = &di_cpu_kernels_avx512_amx, .q8 = &di_cpu_kernels_avx512_amx_q8,
};

#endif
