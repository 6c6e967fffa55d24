/* Reference quantizers for Q4_K, Q6_K (weights) and Q8_K (activations).
 *
 * gguf.quants has no K-quant quantizer, so these are not byte-compatible
 * with llama.cpp's output (whose search heuristics are its own); they are
 * written from the format definition and tested for error against the float
 * input (tests/tensor/test_quant.c). The recipe for the weight formats:
 *   1. per sub-block, search a few candidate scales around the naive
 *      range/levels one, and for each candidate's codes solve the
 *      least-squares scale (and offset, for Q4_K) in closed form; keep the
 *      candidate with the smallest squared error;
 *   2. quantize the sub-block scales against one f16 super-scale;
 *   3. requantize every element against the scale it will really be
 *      decoded with (f16 super-scale times the integer sub-scale), so the
 *      rounding of step 2 does not leave codes chosen for a different scale.
 * Q8_K follows ggml's quantize_row_q8_K_ref, which kernels pair with. */
#include "tensor/half.h"
#include "tensor/quant.h"

#include <math.h>
#include <string.h>

#define Q4K_SUB 32          /* elements per Q4_K sub-block */
#define Q4K_NSUB (DI_QK_K / Q4K_SUB)
#define Q4K_LEVELS 15       /* 4-bit codes 0..15 */
#define K_SCALE_LEVELS 63   /* 6-bit sub-scales and sub-mins 0..63 */
#define Q6K_SUB 16
#define Q6K_NSUB (DI_QK_K / Q6K_SUB)
#define Q6K_HALF 32         /* codes -32..31 stored as q + 32 */
#define Q6K_SCALE_LEVELS 127 /* int8 sub-scales -127..127 */
#define Q8K_LEVELS 127
/* Candidate scale search: level counts nmax + STEP * k, k in -RANGE..RANGE.
 * Stretching the grid a little past the extremes lets outliers clip when
 * that lowers the total error; 0.1 steps are fine enough to matter. */
#define SEARCH_RANGE 10
#define SEARCH_STEP 0.1f

/* Round half to even, clamped to [lo, hi]; NaN gives lo. The clamp comes
 * first because converting an out-of-range float to int is undefined. */
static inline int round_clamp(float v, int lo, int hi) {
    if (!(v >= (float)lo)) return lo;
    if (v >= (float)hi) return hi;
    return (int)rintf(v);
}

/* ---- Q6_K ---------------------------------------------------------------- */

/* Best signed scale s for x ~ s * q, q in -32..31, by the search above. */
/* n <= Q6K_SUB. */
static float q6_sub_scale(const float *x, int n) {
    float amax = 0.0f, max = 0.0f;
    for (int i = 0; i < n; i++) {
        if (amax < fabsf(x[i])) {
            amax = fabsf(x[i]);
            max = x[i];
        }
    }
    if (amax == 0.0f) return 0.0f;
    /* Map the extreme element to -32 (the side with one more level). */
    float best_s = max / -(float)Q6K_HALF, best_err = INFINITY;
    for (int k = -SEARCH_RANGE; k <= SEARCH_RANGE; k++) {
        float iscale = -((float)Q6K_HALF + SEARCH_STEP * (float)k) / max;
        double sxq = 0.0, sqq = 0.0;
        int q[Q6K_SUB];
        for (int i = 0; i < n; i++) {
            q[i] = round_clamp(iscale * x[i], -Q6K_HALF, Q6K_HALF - 1);
            sxq += (double)x[i] * q[i];
            sqq += (double)q[i] * q[i];
        }
        if (sqq == 0.0) continue;
        float s = (float)(sxq / sqq);
        double err = 0.0;
        for (int i = 0; i < n; i++) {
            double r = (double)x[i] - (double)s * q[i];
            err += r * r;
        }
        if (err < best_err) {
            best_err = (float)err;
            best_s = s;
        }
    }
    return best_s;
}

void di_quant_q6_K_from_float(const float *src, void *dst, int64_t n) {
    uint8_t *p = dst;
    for (int64_t b = 0; b < n / DI_QK_K; b++, src += DI_QK_K) {
        float s[Q6K_NSUB], smax = 0.0f;
        for (int j = 0; j < Q6K_NSUB; j++) {
            s[j] = q6_sub_scale(src + j * Q6K_SUB, Q6K_SUB);
            if (fabsf(s[j]) > smax) smax = fabsf(s[j]);
        }
        di_block_q6_K blk;
        memset(&blk, 0, sizeof blk);
        float d = smax / (float)Q6K_SCALE_LEVELS;
        blk.d = di_f32_to_f16(d);
        float dq = di_f16_to_f32(blk.d);
        for (int j = 0; j < Q6K_NSUB; j++) {
            int sc = dq > 0.0f ? round_clamp(s[j] / dq, -Q6K_SCALE_LEVELS, Q6K_SCALE_LEVELS) : 0;
            blk.scales[j] = (int8_t)sc;
            float ds = dq * (float)sc;
            for (int l = 0; l < Q6K_SUB; l++) {
                int e = j * Q6K_SUB + l;
                int q = ds != 0.0f ? round_clamp(src[e] / ds, -Q6K_HALF, Q6K_HALF - 1) : 0;
                int code = q + Q6K_HALF;
                /* Inverse of nibble_q6 / crumb_at in quant_k.c. */
                int g = e / 128, r = e % 128;
                blk.ql[g * 64 + r % 64] |= (uint8_t)((code & 0x0f) << (4 * (r / 64)));
                blk.qh[g * 32 + r % 32] |= (uint8_t)((code >> 4) << (2 * (r / 32)));
            }
        }
        memcpy(p + b * sizeof blk, &blk, sizeof blk);
    }
}

/* ---- Q4_K ---------------------------------------------------------------- */

/* Best x ~ s * q - m with q in 0..15, s >= 0, m >= 0 (the format cannot
 * store a positive offset, so sub-blocks that are all positive start at 0). */
static void q4k_sub_scale_min(const float *x, int n /* <= Q4K_SUB */, float *s_out,
                              float *m_out) {
    float mn = 0.0f, mx = x[0];
    for (int i = 0; i < n; i++) {
        if (x[i] < mn) mn = x[i];
        if (x[i] > mx) mx = x[i];
    }
    *s_out = 0.0f;
    *m_out = -mn;
    if (!(mx > mn)) return;
    float best_err = INFINITY;
    for (int k = -SEARCH_RANGE; k <= SEARCH_RANGE; k++) {
        float iscale = ((float)Q4K_LEVELS + SEARCH_STEP * (float)k) / (mx - mn);
        double sq = 0.0, sqq = 0.0, sx = 0.0, sxq = 0.0;
        int q[Q4K_SUB];
        for (int i = 0; i < n; i++) {
            q[i] = round_clamp(iscale * (x[i] - mn), 0, Q4K_LEVELS);
            sq += q[i];
            sqq += (double)q[i] * q[i];
            sx += x[i];
            sxq += (double)x[i] * q[i];
        }
        /* Least squares for x ~ s*q + c; the format needs c <= 0. */
        double det = n * sqq - sq * sq;
        double s, c;
        if (det > 0.0) {
            s = (n * sxq - sq * sx) / det;
            c = (sqq * sx - sq * sxq) / det;
        } else {
            s = 0.0;
            c = sx / n;
        }
        if (c > 0.0) {
            c = 0.0;
            s = sqq > 0.0 ? sxq / sqq : 0.0;
        }
        if (s < 0.0) continue;
        double err = 0.0;
        for (int i = 0; i < n; i++) {
            double r = x[i] - (s * q[i] + c);
            err += r * r;
        }
        if (err < best_err) {
            best_err = (float)err;
            *s_out = (float)s;
            *m_out = (float)-c;
        }
    }
}

/* Inverse of di_quant_k4_scale_min. */
static void k4_pack_scales(const uint8_t *sc, const uint8_t *m, uint8_t *out) {
    for (int j = 0; j < 4; j++) {
        out[j] = (uint8_t)(sc[j] | (sc[j + 4] >> 4) << 6);
        out[j + 4] = (uint8_t)(m[j] | (m[j + 4] >> 4) << 6);
        out[j + 8] = (uint8_t)((sc[j + 4] & 0x0f) | (m[j + 4] & 0x0f) << 4);
    }
}

void di_quant_q4_K_from_float(const float *src, void *dst, int64_t n) {
    uint8_t *p = dst;
    for (int64_t b = 0; b < n / DI_QK_K; b++, src += DI_QK_K) {
        float s[Q4K_NSUB], m[Q4K_NSUB], smax = 0.0f, mmax = 0.0f;
        for (int j = 0; j < Q4K_NSUB; j++) {
            q4k_sub_scale_min(src + j * Q4K_SUB, Q4K_SUB, &s[j], &m[j]);
            if (s[j] > smax) smax = s[j];
            if (m[j] > mmax) mmax = m[j];
        }
        di_block_q4_K blk;
        memset(&blk, 0, sizeof blk);
        blk.d = di_f32_to_f16(smax / (float)K_SCALE_LEVELS);
        blk.dmin = di_f32_to_f16(mmax / (float)K_SCALE_LEVELS);
        float dq = di_f16_to_f32(blk.d), dmq = di_f16_to_f32(blk.dmin);
        uint8_t sc[Q4K_NSUB], mn[Q4K_NSUB];
        for (int j = 0; j < Q4K_NSUB; j++) {
            sc[j] = (uint8_t)(dq > 0.0f ? round_clamp(s[j] / dq, 0, K_SCALE_LEVELS) : 0);
            mn[j] = (uint8_t)(dmq > 0.0f ? round_clamp(m[j] / dmq, 0, K_SCALE_LEVELS) : 0);
        }
        k4_pack_scales(sc, mn, blk.scales);
        for (int j = 0; j < Q4K_NSUB; j++) {
            float ds = dq * (float)sc[j];
            float dm = dmq * (float)mn[j];
            for (int l = 0; l < Q4K_SUB; l++) {
                int e = j * Q4K_SUB + l;
                int q = ds != 0.0f ? round_clamp((src[e] + dm) / ds, 0, Q4K_LEVELS) : 0;
                blk.qs[(j / 2) * 32 + l] |= (uint8_t)(q << (4 * (j % 2)));
            }
        }
        memcpy(p + b * sizeof blk, &blk, sizeof blk);
    }
}

/* ---- Q8_K ---------------------------------------------------------------- */

/* The extreme element maps to -127 exactly; d is the exact f32 inverse of
 * the scale used, so dot-product kernels can multiply by d. */
void di_quant_q8_K_from_float(const float *src, void *dst, int64_t n) {
    uint8_t *p = dst;
    for (int64_t b = 0; b < n / DI_QK_K; b++, src += DI_QK_K) {
        di_block_q8_K blk;
        memset(&blk, 0, sizeof blk);
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < DI_QK_K; j++) {
            if (amax < fabsf(src[j])) {
                amax = fabsf(src[j]);
                max = src[j];
            }
        }
        if (amax > 0.0f) {
            float iscale = -(float)Q8K_LEVELS / max;
            for (int j = 0; j < DI_QK_K; j++)
                blk.qs[j] = (int8_t)round_clamp(iscale * src[j], -Q8K_LEVELS - 1, Q8K_LEVELS);
            for (int j = 0; j < DI_QK_K / 16; j++) {
                int sum = 0;
                for (int l = 0; l < 16; l++) sum += blk.qs[j * 16 + l];
                blk.bsums[j] = (int16_t)sum;
            }
            blk.d = 1.0f / iscale;
        }
        memcpy(p + b * sizeof blk, &blk, sizeof blk);
    }
}
