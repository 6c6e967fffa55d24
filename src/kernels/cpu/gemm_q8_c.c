/* The int8 activation path in plain C: the portable fallback and the
 * readable statement of what the SIMD files compute.
 *
 * Every supported weight block of 32 elements is, for the dot product,
 *   w[i] = dw * u[i] + mw          (u: the stored integers)
 * so with activations x[i] ~= dx * q[i] (kernels.h):
 *   sum w[i] x[i] ~= dw dx sum u[i] q[i] + mw * s,   s = dx * sum q[i].
 * The first term is an exact integer sum scaled once per block; the second
 * is collected per output row as a short dot of the mw and s arrays. Block
 * kinds: Q4_0 (u = nibble, mw = -8 dw), Q4_1 (mw = m), Q5_0 (u = nibble |
 * high bit << 4, mw = -16 dw), Q8_0 (u signed, mw = 0), Q4_K (each
 * 32-element sub-block: dw = d sc_j, mw = -dmin m_j). */
#include "kernels/cpu/gemm_q8.h"

#include <math.h>

void di_quantize_q8_c(const float *x, int8_t *q, float *d, float *s, int64_t n) {
    for (int64_t b = 0; b < n / DI_Q8_ACT_BLOCK; b++) {
        const float *xb = x + b * DI_Q8_ACT_BLOCK;
        float amax = 0.0f;
        for (int i = 0; i < DI_Q8_ACT_BLOCK; i++) {
            float a = fabsf(xb[i]);
            amax = a > amax ? a : amax;
        }
        float db = amax / 127.0f;
        float id = db != 0.0f ? 1.0f / db : 0.0f;
        int sum = 0;
        for (int i = 0; i < DI_Q8_ACT_BLOCK; i++) {
            /* nearest-even, as the SIMD converts do under the default mode */
            float v = nearbyintf(xb[i] * id);
            v = v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v;
            q[b * DI_Q8_ACT_BLOCK + i] = (int8_t)v;
            sum += (int)v;
        }
        d[b] = db;
        s[b] = db * (float)sum;
    }
}

/* Scales, offsets and integers of block b of one weight row. */
static void block_q4_0(const void *row, int64_t b, float *dw, float *mw, int u[32]) {
    const di_block_q4_0 *bl = (const di_block_q4_0 *)row + b;
    *dw = di_half_to_float(bl->d);
    *mw = -8.0f * *dw;
    for (int j = 0; j < 16; j++) {
        u[j] = bl->qs[j] & 15;
        u[j + 16] = bl->qs[j] >> 4;
    }
}

static void block_q4_1(const void *row, int64_t b, float *dw, float *mw, int u[32]) {
    const di_block_q4_1 *bl = (const di_block_q4_1 *)row + b;
    *dw = di_half_to_float(bl->d);
    *mw = di_half_to_float(bl->m);
    for (int j = 0; j < 16; j++) {
        u[j] = bl->qs[j] & 15;
        u[j + 16] = bl->qs[j] >> 4;
    }
}

static void block_q5_0(const void *row, int64_t b, float *dw, float *mw, int u[32]) {
    const di_block_q5_0 *bl = (const di_block_q5_0 *)row + b;
    uint32_t qh = (uint32_t)bl->qh[0] | (uint32_t)bl->qh[1] << 8 | (uint32_t)bl->qh[2] << 16 | (uint32_t)bl->qh[3] << 24;
    *dw = di_half_to_float(bl->d);
    *mw = -16.0f * *dw;
    for (int j = 0; j < 16; j++) {
        u[j] = (bl->qs[j] & 15) | (int)((qh >> j) & 1u) << 4;
        u[j + 16] = (bl->qs[j] >> 4) | (int)((qh >> (j + 16)) & 1u) << 4;
    }
}

static void block_q8_0(const void *row, int64_t b, float *dw, float *mw, int u[32]) {
    const di_block_q8_0 *bl = (const di_block_q8_0 *)row + b;
    *dw = di_half_to_float(bl->d);
    *mw = 0.0f;
    for (int j = 0; j < 32; j++) u[j] = bl->qs[j];
}

static void block_q4_K(const void *row, int64_t b, float *dw, float *mw, int u[32]) {
    const di_block_q4_K *bl = (const di_block_q4_K *)row + b / 8;
    int j = (int)(b % 8), sc, mn;
    di_q4_K_scale_min(bl->scales, j, &sc, &mn);
    *dw = di_half_to_float(bl->d) * (float)sc;
    *mw = -di_half_to_float(bl->dmin) * (float)mn;
    const uint8_t *qs = bl->qs + 32 * (j / 2);
    for (int l = 0; l < 32; l++) u[l] = j % 2 ? qs[l] >> 4 : qs[l] & 15;
}

typedef void (*block_fn)(const void *row, int64_t b, float *dw, float *mw, int u[32]);

static void gemm_generic(block_fn blk, const void *w, uint64_t row_bytes, int64_t o0, int64_t o1,
                         const di_q8_rows *x, int64_t n_rows, int64_t n_in, float *y, int64_t ldy) {
    int64_t nb = n_in / DI_Q8_ACT_BLOCK;
    for (int64_t o = o0; o < o1; o++) {
        const void *row = (const uint8_t *)w + (uint64_t)o * row_bytes;
        for (int64_t r = 0; r < n_rows; r++) {
            const int8_t *q = x->q + r * x->ldq;
            const float *d = x->d + r * x->ldb, *s = x->s + r * x->ldb;
            float acc = 0.0f, macc = 0.0f;
            for (int64_t b = 0; b < nb; b++) {
                float dw, mw;
                int u[32], isum = 0;
                blk(row, b, &dw, &mw, u);
                for (int i = 0; i < 32; i++) isum += u[i] * q[b * 32 + i];
                acc += (float)isum * (dw * d[b]);
                macc += mw * s[b];
            }
            y[r * ldy + o] = acc + macc;
        }
    }
}

#define DEFINE_GEMM_C(name)                                                                      \
    void di_gemm_q8_##name##_c(const void *w, uint64_t row_bytes, int64_t o0, int64_t o1,        \
                               const di_q8_rows *x, int64_t n_rows, int64_t n_in, float *y,      \
                               int64_t ldy, float *scratch) {                                    \
        (void)scratch;                                                                           \
        gemm_generic(block_##name, w, row_bytes, o0, o1, x, n_rows, n_in, y, ldy);               \
    }

DEFINE_GEMM_C(q4_0)
DEFINE_GEMM_C(q4_1)
DEFINE_GEMM_C(q5_0)
DEFINE_GEMM_C(q8_0)
DEFINE_GEMM_C(q4_K)
