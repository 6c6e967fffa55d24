/* Per-row and elementwise ops. Each row is computed from that row alone in a
 * fixed order, which is all batch invariance asks of them; they are cheap
 * next to the matmuls, so they stay plain C. */
#include "kernels/cpu/kernels.h"

#include <math.h>

#define MAX_ROPE_PAIRS 512 /* n_rot / 2 limit; the loader rejects larger heads */

void di_rmsnorm(const float *x, const float *w, float *out, int64_t n_rows, int64_t n, float eps) {
    for (int64_t r = 0; r < n_rows; r++) {
        const float *xr = x + r * n;
        float *yr = out + r * n;
        /* double sum: the mean square of a few thousand values then carries
         * no order-dependent rounding worth talking about */
        double ss = 0.0;
        for (int64_t i = 0; i < n; i++) ss += (double)xr[i] * (double)xr[i];
        float scale = 1.0f / sqrtf((float)(ss / (double)n) + eps);
        for (int64_t i = 0; i < n; i++) yr[i] = (xr[i] * scale) * w[i];
    }
}

void di_rope_angles(int32_t pos, int32_t n_rot, const float *inv_freq, float *cs) {
    int32_t n_pairs = n_rot / 2;
    /* angle in float like the HF reference: (float)pos * inv_freq */
    float p = (float)pos;
    for (int32_t i = 0; i < n_pairs; i++) {
        float ang = p * inv_freq[i];
        cs[i] = cosf(ang);
        cs[n_pairs + i] = sinf(ang);
    }
}

void di_rope_apply(float *x, int32_t n_heads, int32_t head_dim, int32_t n_rot, const float *cs, int neox) {
    int32_t n_pairs = n_rot / 2;
    const float *c = cs, *s = cs + n_pairs;
    for (int32_t h = 0; h < n_heads; h++) {
        float *v = x + (int64_t)h * head_dim;
        for (int32_t i = 0; i < n_pairs; i++) {
            int32_t i0 = neox ? i : 2 * i;
            int32_t i1 = neox ? i + n_pairs : 2 * i + 1;
            float x0 = v[i0], x1 = v[i1];
            v[i0] = x0 * c[i] - x1 * s[i];
            v[i1] = x0 * s[i] + x1 * c[i];
        }
    }
}

void di_rope(float *x, const int32_t *pos, int64_t n_rows, int32_t n_heads, int32_t head_dim,
             int32_t n_rot, const float *inv_freq, int neox) {
    if (n_rot / 2 > MAX_ROPE_PAIRS) n_rot = 2 * MAX_ROPE_PAIRS; /* unreachable after load checks */
    float cs[2 * MAX_ROPE_PAIRS]; /* (n_rot) cos, sin of the current row */
    for (int64_t r = 0; r < n_rows; r++) {
        di_rope_angles(pos[r], n_rot, inv_freq, cs);
        di_rope_apply(x + r * n_heads * (int64_t)head_dim, n_heads, head_dim, n_rot, cs, neox);
    }
}

/* Elements per chunk of di_swiglu: its exp arguments live on the stack. */
#define SWIGLU_CHUNK 256

/* silu(g) = g / (1 + e^-g), with e^-|g| from di_exp_nonpos (vectorized,
 * explicit fmaf, within 2^-22 of exp) instead of libm's scalar expf, which
 * made this loop ~13% of a 32-sequence decode step: for g >= 0 it is
 * g / (1 + e) exactly as written, for g < 0 the same value as
 * g e / (1 + e) (e = e^g <= 1: no overflow for large -g). Elementwise,
 * so batch invariance holds; inf and NaN inputs give what the plain
 * formula gives (silu(-inf) = NaN, as -inf / inf). */
void di_swiglu(float *gate, const float *up, int64_t n) {
    float e[SWIGLU_CHUNK];
    for (int64_t i0 = 0; i0 < n; i0 += SWIGLU_CHUNK) {
        int64_t m = n - i0 < SWIGLU_CHUNK ? n - i0 : SWIGLU_CHUNK;
        float *g = gate + i0;
        const float *u = up + i0;
        for (int64_t i = 0; i < m; i++) e[i] = -fabsf(g[i]);
        di_exp_nonpos(e, m);
        for (int64_t i = 0; i < m; i++) {
            float num = g[i] >= 0.0f ? g[i] : g[i] * e[i];
            g[i] = num / (1.0f + e[i]) * u[i];
        }
    }
}

/* gelu_tanh(g) = g/2 (1 + tanh(z)), z = sqrt(2/pi) (g + 0.044715 g^3), the
 * formula of PyTorch's tanh approximation, computed as the identical
 * g * sigmoid(2z) = g / (1 + e^-2z) with e^-|2z| from di_exp_nonpos as in
 * di_swiglu (libm's scalar tanhf was ~20% of a Gemma prefill). Against
 * tanhf the result moves by float rounding (tests/kernels/test_ops checks
 * it within 4e-7 relative + 1e-30 over a sweep); elementwise, so batch
 * invariant. */
#define GELU_SQRT_2_OVER_PI 0.7978845608028654f
#define GELU_COEF_A 0.044715f

void di_geglu(float *gate, const float *up, int64_t n) {
    float e[SWIGLU_CHUNK];
    for (int64_t i0 = 0; i0 < n; i0 += SWIGLU_CHUNK) {
        int64_t m = n - i0 < SWIGLU_CHUNK ? n - i0 : SWIGLU_CHUNK;
        float *g = gate + i0;
        const float *u = up + i0;
        for (int64_t i = 0; i < m; i++) {
            float z2 = 2.0f * GELU_SQRT_2_OVER_PI * (g[i] + GELU_COEF_A * g[i] * g[i] * g[i]);
            e[i] = -fabsf(z2);
        }
        di_exp_nonpos(e, m);
        for (int64_t i = 0; i < m; i++) {
            float z2 = 2.0f * GELU_SQRT_2_OVER_PI * (g[i] + GELU_COEF_A * g[i] * g[i] * g[i]);
            float num = z2 >= 0.0f ? g[i] : g[i] * e[i];
            g[i] = num / (1.0f + e[i]) * u[i];
        }
    }
}

void di_softmax(float *x, int64_t n) {
    if (n <= 0) return;
    float mx = x[0];
    for (int64_t i = 1; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += x[i];
    }
    float inv = (float)(1.0 / sum);
    for (int64_t i = 0; i < n; i++) x[i] *= inv;
}

void di_rope_tail(float *x, int32_t n_heads, int32_t dim, int32_t n_rot, const float *inv_freq, int32_t pos,
                     float sign) {
    float c[256], s[256]; /* n_rot <= 512 */
    int32_t n_pairs = n_rot / 2;
    float p = (float)pos; /* the reference multiplies in f32: (float)pos * inv_freq */
    for (int32_t i = 0; i < n_pairs; i++) {
        float ang = p * inv_freq[i];
        c[i] = cosf(ang);
        s[i] = sign * sinf(ang);
    }
    for (int32_t h = 0; h < n_heads; h++) {
        float *v = x + (int64_t)h * dim + (dim - n_rot); /* [nope | rope]: rope is the tail */
        for (int32_t i = 0; i < n_pairs; i++) {
            float x0 = v[2 * i], x1 = v[2 * i + 1];
            v[2 * i] = x0 * c[i] - x1 * s[i];
            v[2 * i + 1] = x1 * c[i] + x0 * s[i];
        }
    }
}

void di_rmsnorm_f64(const float *x, const float *w, float *out, int64_t n, float eps) {
    double ss = 0.0;
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * (double)x[i];
    /* transformers: x * rsqrt(mean + eps), then * weight */
    float scale = 1.0f / sqrtf((float)(ss / (double)n) + eps);
    if (w)
        for (int64_t i = 0; i < n; i++) out[i] = w[i] * (x[i] * scale);
    else
        for (int64_t i = 0; i < n; i++) out[i] = x[i] * scale;
}
