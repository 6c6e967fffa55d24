/* Shared by the CUDA sources: the context, error plumbing, and the device
 * twins of tensor/half.h's conversions. C++ (nvcc) only. */
#ifndef DI_KERNELS_CUDA_CUDA_COMMON_CUH
#define DI_KERNELS_CUDA_CUDA_COMMON_CUH

#include "kernels/cuda/cuda_kernels.h"

#include <cuda_runtime.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* Device-side range errors (a bad token id, slot, block id): kernels OR a
 * bit into the context's flag word; di_cuda_sync reads and clears it. */
enum {
    DI_CUDA_FLAG_BAD_ID = 1,
    DI_CUDA_FLAG_BAD_SLOT = 2,
    DI_CUDA_FLAG_BAD_BLOCK = 4,
};

struct di_cuda_ctx {
    int device;
    cudaStream_t stream;
    unsigned int *flags; /* device: one word of DI_CUDA_FLAG_* bits */
    void *scratch;       /* device workspace of the split attention, grown on demand */
    size_t scratch_bytes;
    cudaDeviceProp prop;
    int driver_version, runtime_version;
};

/* Fills err like di_error_set (base/status.c), kept local so the CUDA
 * library needs nothing from libdeepinfer. Returns code. */
di_status di_cuda_fail(di_error *err, di_status code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* A CUDA runtime error -> DI_ERR_INTERNAL (DI_ERR_NOMEM for allocation
 * failures) with "what: cudaErrorName: message". Clears the runtime's
 * sticky-free last error. */
di_status di_cuda_check(cudaError_t e, const char *what, di_error *err);

/* c->scratch with at least bytes (grown with cudaMalloc, which waits for
 * queued work first, so a kernel still reading the old one is done). */
di_status di_cuda_scratch(di_cuda_ctx *c, size_t bytes, void **out, di_error *err);

/* After a launch: configuration errors come back at once. */
static inline di_status di_cuda_launched(const char *what, di_error *err) {
    return di_cuda_check(cudaGetLastError(), what, err);
}

/* Threads of a warp and of the kernels' blocks. */
#define DI_CUDA_WARP 32
#define DI_CUDA_FULL_MASK 0xffffffffu

/* Device code that also compiles for the host (the dequantizers: a
 * machine without a GPU runs them through di_cuda_host_dequant to check
 * their index math). On the host the plain operators are used: the host
 * compiler sees C++ without -march, so it has no FMA to contract into. */
#define DI_HD __host__ __device__ __forceinline__
#ifdef __CUDA_ARCH__
#define DI_MUL(a, b) __fmul_rn((a), (b))
#define DI_ADD(a, b) __fadd_rn((a), (b))
#define DI_SUB(a, b) __fsub_rn((a), (b))
#else
#define DI_MUL(a, b) ((a) * (b))
#define DI_ADD(a, b) ((a) + (b))
#define DI_SUB(a, b) ((a) - (b))
#endif

DI_HD float di_bits_f32(uint32_t u) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}

/* tensor/half.h's di_f16_to_f32 / di_f32_to_f16, bit for bit, on the
 * device (the hardware conversions agree for every finite value; NaN
 * payloads are what could differ, so these are the same integer code). */
DI_HD float di_dev_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h & 0x7c00u) >> 10;
    uint32_t mant = h & 0x03ffu;
    if (exp == 0x1f) return di_bits_f32(sign | 0x7f800000u | (mant << 13));
    if (exp != 0) return di_bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
    if (mant == 0) return di_bits_f32(sign);
    float v = DI_MUL((float)mant, 0x1p-24f);
    return sign ? -v : v;
}

__device__ __forceinline__ uint16_t di_dev_f32_to_f16(float f) {
    uint32_t u = __float_as_uint(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7c00u | 0x0200u | ((a >> 13) & 0x03ffu));
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) {
        float t = __fadd_rn(__uint_as_float(a), 0.5f);
        return (uint16_t)(sign | (__float_as_uint(t) - __float_as_uint(0.5f)));
    }
    uint32_t odd = (a >> 13) & 1u;
    a += ((uint32_t)(-112) << 23) + 0xfffu + odd;
    return (uint16_t)(sign | (a >> 13));
}

DI_HD float di_dev_bf16_to_f32(uint16_t b) { return di_bits_f32((uint32_t)b << 16); }

/* attention.c's di_exp_nonpos for one value, the same fmaf sequence, so
 * SwiGLU, GeGLU and the softmax use the CPU's exp bits. */
__device__ __forceinline__ float di_dev_exp_nonpos(float v) {
    const float log2e = 1.44269504f, ln2_hi = 0.693145752f, ln2_lo = 1.42860677e-6f;
    const float shift = 12582912.0f;
    float c = v < -87.0f ? -87.0f : v;
    float t = fmaf(c, log2e, shift);
    float nf = __fsub_rn(t, shift);
    float r = fmaf(-nf, ln2_hi, c);
    r = fmaf(-nf, ln2_lo, r);
    float p = fmaf(r, 1.0f / 5040.0f, 1.0f / 720.0f);
    p = fmaf(p, r, 1.0f / 120.0f);
    p = fmaf(p, r, 1.0f / 24.0f);
    p = fmaf(p, r, 1.0f / 6.0f);
    p = fmaf(p, r, 0.5f);
    p = fmaf(p, r, 1.0f);
    p = fmaf(p, r, 1.0f);
    uint32_t sc = (__float_as_uint(t) - 0x4B400000u + 127u) << 23;
    return v < -87.0f ? 0.0f : __fmul_rn(p, __uint_as_float(sc));
}

/* Sum over the warp by the xor butterfly 16, 8, 4, 2, 1: every lane ends
 * with the same bits (each step adds a commutative pair), and the order is
 * fixed, so it is the one reduction tree of the whole library. */
__device__ __forceinline__ float di_dev_warp_sum(float v) {
    for (int off = 16; off > 0; off >>= 1) v = __fadd_rn(v, __shfl_xor_sync(DI_CUDA_FULL_MASK, v, off));
    return v;
}

__device__ __forceinline__ float di_dev_warp_max(float v) {
    for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(DI_CUDA_FULL_MASK, v, off));
    return v;
}

#endif
