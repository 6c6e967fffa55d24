/* "ggml" numerics: what llama.cpp's CPU backend (ggml-cpu, x86 build) computes
 * for a llama-family forward, reproduced on our own code so that teacher-forced
 * argmaxes agree with llama.cpp's near-ties included (issue 4). Opt-in: engine
 * param kernels = "ggml" (`--kernels ggml`); the exact tables stay the default.
 *
 * What differs from the exact path, each read from the ggml sources that
 * llama-cpp-python 0.3.36 vendors (facts only, no code taken):
 *  - matmul of a Q4_0/Q4_1/Q8_0 weight: the activation row is quantized per
 *    block of 32 (x86 quantize_row_q8_1/q8_0): amax, d = amax / 127 stored as
 *    f16, q = round-half-even(x * (127 / amax)), s = d * sum(q) stored as f16;
 *    the dot keeps 8 float lanes, lane l accumulating
 *    fma(d_w * d_x, (float)sum of the integer products of elements 4l..4l+3, acc)
 *    over the blocks, reduced by the fixed SSE tree of hsum_float_8, and Q4_1
 *    adds its minimums as sum over blocks of m * s (scalar, in block order).
 *    Other weight dtypes keep the exact path (llama.cpp would use Q8_K there).
 *  - attention without flash attention (llama-cpp-python's default): Q rounded
 *    to f16 and dotted with the f16 K cache in 16 f32 lanes (llamafile tinyBLAS,
 *    AVX-512), scaled, softmax over the whole row with ggml's vector expf and a
 *    double sum of 16-lane partial sums, probabilities rounded to f16, then
 *    multiplied with the f16 V cache in 16 lanes over positions.
 *  - RMSNorm: sum of float squares in double, mean rounded to float.
 *  - RoPE: angle of pair i is pos * theta_scale^i accumulated by repeated float
 *    multiplication, theta_scale = powf(base, -2 / n_rot).
 *  - SiLU: ggml's vector expf (a degree-5 polynomial, not libm's expf).
 * Every function is per row, so the mode is batch-invariant like the others. */
#ifndef DI_KERNELS_CPU_GGML_COMPAT_H
#define DI_KERNELS_CPU_GGML_COMPAT_H

#include "kernels/cpu/kernels.h"

#include <stdint.h>

#define DI_GGML_QK 32 /* ggml's Q8_0/Q8_1 block */

/* One ISA's activation quantizer and quantized dot; the C and the AVX2
 * versions give identical bits (tests/kernels/test_ggml_compat.c). */
typedef struct di_ggml_kernels {
    const char *name;
    /* x (n), n a multiple of 32 -> q (n), d (n/32), s (n/32); d and s hold
     * f16 values widened to float. */
    void (*quantize)(const float *x, int8_t *q, float *d, float *s, int64_t n);
    /* One weight row w (n elements of dtype, a di_ggml_supports dtype) dotted
     * with one quantized activation row. */
    float (*dot)(di_dtype dtype, const void *w, const int8_t *q, const float *d, const float *s, int64_t n);
    /* 4 consecutive weight rows (row_bytes apart) against one activation
     * row: out[j] equals dot(w + j * row_bytes, ...) bit for bit (the rows
     * only share the activation loads and interleave their chains). */
    void (*dot_x4)(di_dtype dtype, const void *w, uint64_t row_bytes, const int8_t *q, const float *d,
                   const float *s, int64_t n, float out[4]);
} di_ggml_kernels;

extern const di_ggml_kernels di_ggml_kernels_c;
/* NULL when this CPU (or build) has no AVX2 + FMA */
const di_ggml_kernels *di_ggml_kernels_avx2(void);

/* True when matmul reproduces llama.cpp's activation quantization for dtype. */
int di_ggml_supports(di_dtype dtype);

/* ggml's vector expf (ggml_v_expf), one lane at a time: within ~1.5 ulp of
 * expf, 0 below about -88 * 1.5, inf above. */
float di_ggml_expf(float x);

/* gate[i] = x / (1 + di_ggml_expf(-x)) * up[i], x = gate[i]; gate, up (n). */
void di_ggml_swiglu(float *gate, const float *up, int64_t n);

/* out = x * (1 / sqrtf(mean + eps)) * w with the mean of float squares summed
 * in double (ggml rms_norm fused with mul); x, out, w (n); out may alias x. */
void di_ggml_rmsnorm(const float *x, const float *w, float *out, int64_t n, float eps);

/* RoPE of one row x (n_heads * head_dim) at position pos, ggml's angles:
 * theta_0 = pos, theta_{i+1} = theta_i * theta_scale (float), angle of pair i
 * = freq_scale * theta_i / factors[i] (factors may be NULL). neox as di_rope. */
void di_ggml_rope(float *x, int32_t pos, int32_t n_heads, int32_t head_dim, int32_t n_rot, float theta_scale,
                  float freq_scale, const float *factors, int neox);

/* Scratch floats per pool thread for di_attention_ggml when the rows attend
 * over at most n_pos positions (max pos + 1). */
int64_t di_attention_ggml_scratch_floats(int32_t n_heads, int32_t n_kv_heads, int32_t head_dim, int32_t n_pos);

/* di_attention's contract (same arguments, units and invariance) with the
 * numerics of ggml's non-flash attention; n_pos bounds a->pos[r] + 1.
 * scratch: (n_threads, di_attention_ggml_scratch_floats) floats. */
void di_attention_ggml(const di_cpu_kernels *k, const di_attn_args *a, int32_t n_pos, float *scratch,
                       di_threadpool *pool);

#endif
