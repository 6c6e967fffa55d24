/* ggml numerics (see ggml_compat.h): the activation quantizer and quantized
 * dots in portable C and AVX2, and the per-row ops.
 *
 * The dot's float work is defined lane by lane so that C and AVX2 agree bit
 * for bit: integer products of a block are summed exactly in 8 int32 lanes of
 * 4 elements each (maddubs + madd, or a C loop), converted to float, and FMA'd
 * with the block's scale product into that lane's accumulator. */
#include "kernels/cpu/ggml_compat.h"
#include "kernels/cpu/half.h"
#include "kernels/cpu/quant_blocks.h"

#include <math.h>
#include <string.h>

#define LANES 8 /* hsum_float_8's width */

int di_ggml_supports(di_dtype dtype) {
    return dtype == DI_DTYPE_Q4_0 || dtype == DI_DTYPE_Q4_1 || dtype == DI_DTYPE_Q8_0;
}

/* hsum_float_8's tree: (a0+a4 + a2+a6) + (a1+a5 + a3+a7) */
static float hsum8_c(const float a[LANES]) {
    float r0 = a[0] + a[4], r1 = a[1] + a[5], r2 = a[2] + a[6], r3 = a[3] + a[7];
    return (r0 + r2) + (r1 + r3);
}

/* ---- portable C ------------------------------------------------------------ */

static void quantize_c(const float *x, int8_t *q, float *d, float *s, int64_t n) {
    for (int64_t b = 0; b < n / DI_GGML_QK; b++) {
        const float *xb = x + b * DI_GGML_QK;
        int8_t *qb = q + b * DI_GGML_QK;
        float amax = 0.0f;
        for (int j = 0; j < DI_GGML_QK; j++) amax = fmaxf(amax, fabsf(xb[j]));
        float db = amax / 127.0f;
        float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        int32_t sum = 0;
        for (int j = 0; j < DI_GGML_QK; j++) {
            /* |x * id| <= 127 up to rounding, so the int8 never saturates */
            int32_t v = (int32_t)nearbyintf(xb[j] * id); /* half to even */
            qb[j] = (int8_t)v;
            sum += v;
        }
        d[b] = di_half_to_float(di_float_to_half(db));
        s[b] = di_half_to_float(di_float_to_half(db * (float)sum));
    }
}

/* Element j of a weight block as a signed integer. */
static int32_t weight_q(di_dtype dtype, const uint8_t *blk, int j) {
    switch (dtype) {
    case DI_DTYPE_Q4_0: {
        const di_block_q4_0 *w = (const di_block_q4_0 *)(const void *)blk;
        return (j < 16 ? w->qs[j] & 15 : w->qs[j - 16] >> 4) - 8;
    }
    case DI_DTYPE_Q4_1: {
        const di_block_q4_1 *w = (const di_block_q4_1 *)(const void *)blk;
        return j < 16 ? w->qs[j] & 15 : w->qs[j - 16] >> 4;
    }
    default:
        return ((const di_block_q8_0 *)(const void *)blk)->qs[j];
    }
}

static uint64_t block_bytes(di_dtype dtype) {
    return dtype == DI_DTYPE_Q4_0 ? sizeof(di_block_q4_0)
           : dtype == DI_DTYPE_Q4_1 ? sizeof(di_block_q4_1) : sizeof(di_block_q8_0);
}

static float dot_c(di_dtype dtype, const void *w, const int8_t *q, const float *d, const float *s, int64_t n) {
    float acc[LANES] = {0};
    float summs = 0.0f; /* Q4_1: sum of m * s */
    const uint8_t *blk = w;
    for (int64_t b = 0; b < n / DI_GGML_QK; b++, blk += block_bytes(dtype)) {
        uint16_t wd;
        memcpy(&wd, blk, sizeof wd);
        float dd = di_half_to_float(wd) * d[b];
        if (dtype == DI_DTYPE_Q4_1) {
            uint16_t wm;
            memcpy(&wm, blk + 2, sizeof wm);
            summs = fmaf(di_half_to_float(wm), s[b], summs);
        }
        const int8_t *qb = q + b * DI_GGML_QK;
        for (int l = 0; l < LANES; l++) {
            int32_t p = 0;
            for (int j = 4 * l; j < 4 * l + 4; j++) p += weight_q(dtype, blk, j) * qb[j];
            acc[l] = fmaf(dd, (float)p, acc[l]);
        }
    }
    return hsum8_c(acc) + summs;
}

static void dot_x4_c(di_dtype dtype, const void *w, uint64_t row_bytes, const int8_t *q, const float *d,
                     const float *s, int64_t n, float out[4]) {
    for (int j = 0; j < 4; j++) out[j] = dot_c(dtype, (const uint8_t *)w + j * row_bytes, q, d, s, n);
}

const di_ggml_kernels di_ggml_kernels_c = {"c", quantize_c, dot_c, dot_x4_c};

/* ---- AVX2 -------------------------------------------------------------------- */

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2,fma,f16c")))

AVX2 static inline float hsum8_avx2(__m256 v) {
    __m128 r = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

AVX2 static void quantize_avx2(const float *x, int8_t *q, float *d, float *s, int64_t n) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int64_t b = 0; b < n / DI_GGML_QK; b++) {
        const float *xb = x + b * DI_GGML_QK;
        __m256 v[4];
        __m256 mx = _mm256_setzero_ps();
        for (int i = 0; i < 4; i++) {
            v[i] = _mm256_loadu_ps(xb + 8 * i);
            mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, v[i]));
        }
        __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(mx, 1), _mm256_castps256_ps128(mx));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        float amax = _mm_cvtss_f32(m4);
        float db = amax / 127.0f;
        __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
        __m256i iv[4];
        for (int i = 0; i < 4; i++)
            iv[i] = _mm256_cvtps_epi32(
                _mm256_round_ps(_mm256_mul_ps(v[i], id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        __m256i sum = _mm256_add_epi32(_mm256_add_epi32(iv[0], iv[1]), _mm256_add_epi32(iv[2], iv[3]));
        __m128i s4 = _mm_add_epi32(_mm256_extracti128_si256(sum, 1), _mm256_castsi256_si128(sum));
        s4 = _mm_hadd_epi32(s4, s4);
        s4 = _mm_hadd_epi32(s4, s4);
        int32_t isum = _mm_cvtsi128_si32(s4);
        __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(iv[0], iv[1]), _mm256_packs_epi32(iv[2], iv[3]));
        _mm256_storeu_si256((__m256i *)(void *)(q + b * DI_GGML_QK), _mm256_permutevar8x32_epi32(p, perm));
        d[b] = di_half_to_float(di_float_to_half(db));
        s[b] = di_half_to_float(di_float_to_half(db * (float)isum));
    }
}

/* 32 weight elements of a block as bytes in element order; signed for Q4_0
 * and Q8_0, unsigned 0..15 for Q4_1. */
AVX2 static inline __m256i nibbles(const uint8_t *qs) {
    __m128i t = _mm_loadu_si128((const __m128i *)(const void *)qs);
    __m256i b = _mm256_insertf128_si256(_mm256_castsi128_si256(t), _mm_srli_epi16(t, 4), 1);
    return _mm256_and_si256(b, _mm256_set1_epi8(15));
}

/* int32 lane l = sum of x[4l+j] * y[4l+j], x unsigned bytes, y signed */
AVX2 static inline __m256 lane_sums_us(__m256i x, __m256i y) {
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(x, y), _mm256_set1_epi16(1)));
}

/* the same for signed x: |x| times y with x's sign */
AVX2 static inline __m256 lane_sums_ss(__m256i x, __m256i y) {
    return lane_sums_us(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}

/* f16 -> f32 with F16C (exact, so the same as di_half_to_float) */
AVX2 static inline float h2f(uint16_t h) { return _cvtsh_ss(h); }

AVX2 static float dot_avx2(di_dtype dtype, const void *w, const int8_t *q, const float *d, const float *s,
                           int64_t n) {
    __m256 acc = _mm256_setzero_ps();
    float summs = 0.0f;
    int64_t nb = n / DI_GGML_QK;
    if (dtype == DI_DTYPE_Q4_1) {
        const di_block_q4_1 *x = w;
        for (int64_t b = 0; b < nb; b++) {
            summs = fmaf(h2f(x[b].m), s[b], summs);
            __m256 dd = _mm256_set1_ps(h2f(x[b].d) * d[b]);
            __m256i qy = _mm256_loadu_si256((const __m256i *)(const void *)(q + b * DI_GGML_QK));
            acc = _mm256_fmadd_ps(dd, lane_sums_us(nibbles(x[b].qs), qy), acc);
        }
    } else if (dtype == DI_DTYPE_Q4_0) {
        const di_block_q4_0 *x = w;
        for (int64_t b = 0; b < nb; b++) {
            __m256 dd = _mm256_set1_ps(h2f(x[b].d) * d[b]);
            __m256i qx = _mm256_sub_epi8(nibbles(x[b].qs), _mm256_set1_epi8(8));
            __m256i qy = _mm256_loadu_si256((const __m256i *)(const void *)(q + b * DI_GGML_QK));
            acc = _mm256_fmadd_ps(dd, lane_sums_ss(qx, qy), acc);
        }
    } else {
        const di_block_q8_0 *x = w;
        for (int64_t b = 0; b < nb; b++) {
            __m256 dd = _mm256_set1_ps(h2f(x[b].d) * d[b]);
            __m256i qx = _mm256_loadu_si256((const __m256i *)(const void *)x[b].qs);
            __m256i qy = _mm256_loadu_si256((const __m256i *)(const void *)(q + b * DI_GGML_QK));
            acc = _mm256_fmadd_ps(dd, lane_sums_ss(qx, qy), acc);
        }
    }
    return hsum8_avx2(acc) + summs;
}

/* Lane sums of one weight block with the activation block qy; dtype is a
 * constant at every call, so the branches fold away. */
AVX2 static inline __attribute__((always_inline)) __m256 block_lanes(di_dtype dtype, const uint8_t *blk,
                                                                       __m256i qy) {
    if (dtype == DI_DTYPE_Q4_1) return lane_sums_us(nibbles(((const di_block_q4_1 *)(const void *)blk)->qs), qy);
    if (dtype == DI_DTYPE_Q4_0)
        return lane_sums_ss(_mm256_sub_epi8(nibbles(((const di_block_q4_0 *)(const void *)blk)->qs),
                                            _mm256_set1_epi8(8)), qy);
    return lane_sums_ss(_mm256_loadu_si256((const __m256i *)(const void *)((const di_block_q8_0 *)(const void *)blk)->qs),
                        qy);
}

/* dot_avx2's sequence for 4 rows at once (same operations per row). */
AVX2 static inline __attribute__((always_inline)) void dot_x4_impl(di_dtype dtype, const uint8_t *w,
                                                                     uint64_t row_bytes, const int8_t *q,
                                                                     const float *d, const float *s, int64_t n,
                                                                     float out[4]) {
    const uint64_t bb = block_bytes(dtype);
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    float summs[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int64_t b = 0; b < n / DI_GGML_QK; b++) {
        __m256i qy = _mm256_loadu_si256((const __m256i *)(const void *)(q + b * DI_GGML_QK));
        for (int j = 0; j < 4; j++) {
            const uint8_t *blk = w + j * row_bytes + (uint64_t)b * bb;
            uint16_t h[2];
            memcpy(h, blk, dtype == DI_DTYPE_Q4_1 ? 4 : 2);
            if (dtype == DI_DTYPE_Q4_1) summs[j] = fmaf(h2f(h[1]), s[b], summs[j]);
            acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(h2f(h[0]) * d[b]), block_lanes(dtype, blk, qy), acc[j]);
        }
    }
    for (int j = 0; j < 4; j++) out[j] = hsum8_avx2(acc[j]) + summs[j];
}

AVX2 static void dot_x4_avx2(di_dtype dtype, const void *w, uint64_t row_bytes, const int8_t *q, const float *d,
                             const float *s, int64_t n, float out[4]) {
    if (dtype == DI_DTYPE_Q4_1) dot_x4_impl(DI_DTYPE_Q4_1, w, row_bytes, q, d, s, n, out);
    else if (dtype == DI_DTYPE_Q4_0) dot_x4_impl(DI_DTYPE_Q4_0, w, row_bytes, q, d, s, n, out);
    else dot_x4_impl(DI_DTYPE_Q8_0, w, row_bytes, q, d, s, n, out);
}

static const di_ggml_kernels ggml_avx2 = {"avx2", quantize_avx2, dot_avx2, dot_x4_avx2};

const di_ggml_kernels *di_ggml_kernels_avx2(void) {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return &ggml_avx2;
    return NULL;
}
#else
const di_ggml_kernels *di_ggml_kernels_avx2(void) { return NULL; }
#endif

/* ---- per-row ops --------------------------------------------------------- */

float di_ggml_expf(float x) {
    /* exp(x) = 2^n * e^b, n = round(x / ln 2) by the 1.5*2^23 trick, b the
     * remainder from a two-part ln 2, e^b by a fixed polynomial; ggml's
     * coefficients and FMA grouping */
    const float shift = 0x1.8p23f;
    float z = fmaf(x, 0x1.715476p+0f, shift);
    float n = z - shift;
    float b = fmaf(-n, 0x1.7f7d1cp-20f, fmaf(-n, 0x1.62e4p-1f, x));
    float u = b * b;
    float j = fmaf(fmaf(fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)), u,
                   fmaf(0x1.ffffecp-1f, b, 1.0f));
    if (!(fabsf(n) <= 192.0f)) return n <= 0.0f ? 0.0f : INFINITY;
    /* j * 2^n (scalef): one exact multiply while 2^n and the result are
     * normal floats (j is within [0.7, 1.5]), ldexpf's rounding beyond */
    if (n >= -125.0f && n <= 127.0f) {
        uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
        float p2;
        memcpy(&p2, &bits, sizeof p2);
        return j * p2;
    }
    return ldexpf(j, (int)n);
}

void di_ggml_swiglu(float *gate, const float *up, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i];
        gate[i] = g / (1.0f + di_ggml_expf(0.0f - g)) * up[i];
    }
}

void di_ggml_rmsnorm(const float *x, const float *w, float *out, int64_t n, float eps) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        float sq = x[i] * x[i]; /* rounded to float before the double sum */
        sum += (double)sq;
    }
    float mean = (float)(sum / (double)n);
    float scale = 1.0f / sqrtf(mean + eps);
    for (int64_t i = 0; i < n; i++) out[i] = x[i] * scale * w[i];
}

#define MAX_ROPE_PAIRS 512 /* as di_rope; the loader rejects larger heads */

void di_ggml_rope(float *x, int32_t pos, int32_t n_heads, int32_t head_dim, int32_t n_rot, float theta_scale,
                  float freq_scale, const float *factors, int neox) {
    int32_t n_pairs = n_rot / 2;
    if (n_pairs > MAX_ROPE_PAIRS) n_pairs = MAX_ROPE_PAIRS;
    float c[MAX_ROPE_PAIRS], sn[MAX_ROPE_PAIRS];
    float theta = (float)pos;
    for (int32_t i = 0; i < n_pairs; i++) {
        float t = freq_scale * (factors ? theta / factors[i] : theta);
        c[i] = cosf(t);
        sn[i] = sinf(t);
        theta *= theta_scale;
    }
    for (int32_t h = 0; h < n_heads; h++) {
        float *v = x + (int64_t)h * head_dim;
        for (int32_t i = 0; i < n_pairs; i++) {
            int32_t i0 = neox ? i : 2 * i;
            int32_t i1 = neox ? i + n_pairs : 2 * i + 1;
            float x0 = v[i0], x1 = v[i1];
            /* ggml's compiled code fuses the first product into the add */
            v[i0] = fmaf(x0, c[i], -(x1 * sn[i]));
            v[i1] = fmaf(x0, sn[i], x1 * c[i]);
        }
    }
}
