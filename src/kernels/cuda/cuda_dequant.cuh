/* Device dequantizers, one per weight dtype: elements [32c + 8p, 32c + 8p + 8)
 * of a weight row (c a 32-element chunk of the row, p = 0..3) -> 8 floats.
 *
 * Every value is computed by the operations of the CPU reference converter
 * (tensor/quant_legacy.c, quant_k.c, half.c) in the same order, each
 * rounded separately (DI_MUL / DI_ADD never fuse), so the results are
 * the trait to_float's bits; tests/kernels/test_cuda.c checks it with
 * memcmp, on the device and (through di_cuda_host_dequant, the same
 * source compiled for the host) on machines without a GPU. Block layouts: tensor/quant.h (GGUF's ggml-common.h). */
#ifndef DI_KERNELS_CUDA_CUDA_DEQUANT_CUH
#define DI_KERNELS_CUDA_CUDA_DEQUANT_CUH

#include "kernels/cuda/cuda_common.cuh"

#define DI_CUDA_CHUNK 32 /* elements per chunk: the unit of the fixed reduction order */

/* Little-endian loads. GGUF blocks of 18, 20, 22, 34 or 210 bytes leave
 * block fields 2-byte aligned at best, so the weight kernels require (and
 * check) 2-byte aligned rows and read 8 code bytes as four 16-bit loads
 * instead of eight byte loads. */
DI_HD uint16_t ld_u16(const uint8_t *p) {
#ifdef __CUDA_ARCH__
    return *(const uint16_t *)p;
#else
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
#endif
}
DI_HD float ld_f16(const uint8_t *p) { return di_dev_f16_to_f32(ld_u16(p)); }

/* 8 bytes at p (2-byte aligned) as two little-endian words. */
struct di_bytes8 {
    uint32_t w[2];
    DI_HD int at(int j) const { return (int)((w[j >> 2] >> (8 * (j & 3))) & 0xffu); }
};
DI_HD di_bytes8 ld_bytes8(const uint8_t *p) {
    di_bytes8 b;
    b.w[0] = (uint32_t)ld_u16(p) | (uint32_t)ld_u16(p + 2) << 16;
    b.w[1] = (uint32_t)ld_u16(p + 4) | (uint32_t)ld_u16(p + 6) << 16;
    return b;
}

/* (float)((int)q - off) for 0 <= q, off < 2^22, exactly, without an
 * int-to-float conversion (a quarter-rate instruction on the GPU): 2^23 + q
 * has q in its mantissa, and the difference of two floats in [2^23, 2^24)
 * that is an integer this small is exact. The same bits as the CPU's
 * (float)(q - off) cast. */
DI_HD float di_q_to_f32(uint32_t q, uint32_t off) {
    return DI_SUB(di_bits_f32(0x4B000000u | q), di_bits_f32(0x4B000000u | off));
}

template <int DT> struct di_deq;

template <> struct di_deq<DI_DTYPE_F32> {
    DI_HD static void chunk8(const uint8_t *row, int64_t c, int p, float *o) {
        const float *v = (const float *)row + c * 32 + 8 * p; /* f32 rows are 4-byte aligned */
        for (int j = 0; j < 8; j++) o[j] = v[j];
    }
};

template <> struct di_deq<DI_DTYPE_F16> {
    DI_HD static void chunk8(const uint8_t *row, int64_t c, int p, float *o) {
        const uint16_t *v = (const uint16_t *)row + c * 32 + 8 * p;
        for (int j = 0; j < 8; j++) o[j] = di_dev_f16_to_f32(v[j]);
    }
};

template <> struct di_deq<DI_DTYPE_BF16> {
    DI_HD static void chunk8(const uint8_t *row, int64_t c, int p, float *o) {
        const uint16_t *v = (const uint16_t *)row + c * 32 + 8 * p;
        for (int j = 0; j < 8; j++) o[j] = di_dev_bf16_to_f32(v[j]);
    }
};

/* Q4_0 (18 bytes): d, then qs[16]: element j < 16 is the low nibble of
 * qs[j], element j >= 16 the high nibble of qs[j - 16]; x = d * (q - 8). */
template <> struct di_deq<DI_DTYPE_Q4_0> {
    DI_HD static void chunk8(const uint8_t *row, int64_t c, int p, float *o) {
        const uint8_t *b = row + c * 18;
        float d = ld_f16(b);
        const di_bytes8 qs = ld_bytes8(b + 2 + 8 * (p & 1));
        int shift = p < 2 ? 0 : 4;
        for (int j = 0; j < 8; j++) o[j] = DI_MUL(d, di_q_to_f32((uint32_t)(qs.at(j) >> shift) & 15u, 8));
    }
};

/* Q4_1 (20 bytes): d, m, qs[16] as Q4_0; x = (d * q) + m. */
template <> struct di_deq<DI_DTYPE_Q4_1> {
    DI_HD static void chunk8(const uint8_t *row, int64_t c, int p, float *o) {
        const uint8_t *b = row + c * 20;
        float d = ld_f16(b), m = ld_f16(b + 2);
        const di_bytes8 qs = ld_bytes8(b + 4 + 8 * (p & 1));
        int shift = p < 2 ? 0 : 4;
        for (int j = 0; j < 8; j++) o[j] = DI_ADD(DI_MUL(d, di_q_to_f32((uint32_t)(qs.at(j) >> shift) & 15u, 0)), m);
    }
};

/* Q5_0 (22 bytes): d, qh (u32 LE: bit j is bit 4 of element j), qs[16] as
 * Q4_0; x = d * (q - 16). */
template <> struct di_deq<DI_DTYPE_Q5_0> {
    DI_HD static void chunk8(const uint8_t *row, int64_t c, int p, float *o) {
        const uint8_t *b = row + c * 22;
        float d = ld_f16(b);
        uint32_t qh = (uint32_t)ld_u16(b + 2) | (uint32_t)ld_u16(b + 4) << 16;
        const di_bytes8 qs = ld_bytes8(b + 6 + 8 * (p & 1));
        int shift = p < 2 ? 0 : 4;
        for (int j = 0; j < 8; j++) {
            int e = 8 * p + j;
            int q = ((qs.at(j) >> shift) & 15) | (int)((qh >> e) & 1u) << 4;
            o[j] = DI_MUL(d, di_q_to_f32((uint32_t)q, 16));
        }
    }
};

/* Q8_0 (34 bytes): d, qs[32] int8; x = q * d. */
template <> struct di_deq<DI_DTYPE_Q8_0> {
    DI_HD static void chunk8(const uint8_t *row, int64_t c, int p, float *o) {
        const uint8_t *b = row + c * 34;
        float d = ld_f16(b);
        const di_bytes8 qs = ld_bytes8(b + 2 + 8 * p);
        for (int j = 0; j < 8; j++) o[j] = DI_MUL(di_q_to_f32((uint32_t)qs.at(j) ^ 0x80u, 128), d); /* int8 q = (q ^ 0x80) - 128 */
    }
};

/* Q4_K (144 bytes per 256): d, dmin, scales[12], qs[128]. Chunk c is
 * sub-block s = c % 8 of super-block c / 8: 6-bit sc, m from the packed
 * scales (di_quant_k4_scale_min), nibble (s % 2) of qs[(s / 2) * 32 + l];
 * x = (d * sc) * q - (dmin * m). */
template <> struct di_deq<DI_DTYPE_Q4_K> {
    DI_HD static void chunk8(const uint8_t *row, int64_t c, int p, float *o) {
        const uint8_t *b = row + (c / 8) * 144;
        int s = (int)(c % 8);
        float d = ld_f16(b), dmin = ld_f16(b + 2);
        const uint8_t *sc6 = b + 4;
        int sc, m;
        if (s < 4) {
            sc = sc6[s] & 63;
            m = sc6[s + 4] & 63;
        } else {
            sc = (sc6[s + 4] & 0x0f) | ((sc6[s - 4] >> 6) << 4);
            m = (sc6[s + 4] >> 4) | ((sc6[s] >> 6) << 4);
        }
        float d1 = DI_MUL(d, (float)sc), m1 = DI_MUL(dmin, (float)m);
        const di_bytes8 qs = ld_bytes8(b + 16 + (s / 2) * 32 + 8 * p);
        int shift = 4 * (s % 2);
        for (int j = 0; j < 8; j++) o[j] = DI_SUB(DI_MUL(d1, di_q_to_f32((uint32_t)(qs.at(j) >> shift) & 15u, 0)), m1);
    }
};

/* Q6_K (210 bytes per 256): ql[128], qh[64], scales[16] int8, d. Element e
 * of the super-block: low nibble (e % 128) / 64 of ql[(e / 128) * 64 +
 * e % 64], high crumb (e % 128) / 32 of qh[(e / 128) * 32 + e % 32];
 * x = (d * scales[e / 16]) * (q - 32). */
template <> struct di_deq<DI_DTYPE_Q6_K> {
    DI_HD static void chunk8(const uint8_t *row, int64_t c, int p, float *o) {
        const uint8_t *b = row + (c / 8) * 210;
        int e0 = (int)(c % 8) * 32 + 8 * p; /* 8 elements in one 16-element sub-block */
        float d = ld_f16(b + 208);
        float dl = DI_MUL(d, (float)(int8_t)b[192 + e0 / 16]);
        int g = e0 / 128, h = (e0 % 128) / 64, l0 = e0 % 64, s = (e0 % 128) / 32, m0 = e0 % 32;
        const di_bytes8 ql = ld_bytes8(b + g * 64 + l0), qh = ld_bytes8(b + 128 + g * 32 + m0);
        for (int j = 0; j < 8; j++) {
            uint32_t q = (uint32_t)(((ql.at(j) >> (4 * h)) & 15) | ((qh.at(j) >> (2 * s)) & 3) << 4);
            o[j] = DI_MUL(dl, di_q_to_f32(q, 32));
        }
    }
};

/* Calls F<DT>::run(args...) for the runtime dtype t; false when t has no
 * device dequantizer (di_cuda_supports_dtype). */
#define DI_CUDA_DISPATCH_DTYPE(t, CALL)                                                                              \
    switch (t) {                                                                                                     \
    case DI_DTYPE_F32: CALL(DI_DTYPE_F32); break;                                                                    \
    case DI_DTYPE_F16: CALL(DI_DTYPE_F16); break;                                                                    \
    case DI_DTYPE_BF16: CALL(DI_DTYPE_BF16); break;                                                                  \
    case DI_DTYPE_Q4_0: CALL(DI_DTYPE_Q4_0); break;                                                                  \
    case DI_DTYPE_Q4_1: CALL(DI_DTYPE_Q4_1); break;                                                                  \
    case DI_DTYPE_Q5_0: CALL(DI_DTYPE_Q5_0); break;                                                                  \
    case DI_DTYPE_Q8_0: CALL(DI_DTYPE_Q8_0); break;                                                                  \
    case DI_DTYPE_Q4_K: CALL(DI_DTYPE_Q4_K); break;                                                                  \
    case DI_DTYPE_Q6_K: CALL(DI_DTYPE_Q6_K); break;                                                                  \
    default: break;                                                                                                  \
    }

#endif
