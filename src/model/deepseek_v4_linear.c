/* The V4 family's linears on the CPU backend over a given kernel table
 * (the tests' form: the forwards call the model's backend, dsv4_lin; the
 * CPU's y = x W^T for the three weight kinds is kernels/cpu/
 * backend_cpu_dsv4.c), plus the small per-vector helpers (RMSNorm,
 * interleaved rotary) the V4 files share. */
#include "model/deepseek_v4_internal.h"

#include <math.h>

int64_t dsv4_linear_scratch_floats(int64_t n_rows, int64_t n_in, int64_t n_tasks, int n_threads) {
    di_backend be;
    di_backend_cpu(NULL, &be);
    return dsv4_lin_scratch(&be, n_rows, n_in, n_tasks, n_threads);
}

void dsv4_linear_row(const di_cpu_kernels *k, const dsv4_linear *w, int64_t o, float *dst) {
    di_backend be;
    di_backend_cpu(k, &be);
    int32_t id = (int32_t)o;
    dsv4_lin_rows(&be, w, &id, 1, dst, 0);
}

void dsv4_linear_apply(const di_cpu_kernels *k, const dsv4_linear *w, const float *x, int64_t ldx,
                       float *y, int64_t ldy, int64_t n_rows, float *scratch, di_threadpool *pool) {
    di_backend be;
    di_backend_cpu(k, &be);
    dsv4_lin(&be, w, x, ldx, y, ldy, n_rows, scratch, pool);
}

double dsv4_linear_bytes(const dsv4_linear *w) {
    double b = (double)w->row_bytes * (double)w->n_out;
    if (w->kind == DSV4_W_MXFP4) b += (double)w->n_out * (double)(w->n_in / 32);
    /* FP8 scales: (n_out/B) x (n_in/B) floats, negligible next to the bytes */
    return b;
}

void dsv4_rmsnorm(const float *x, const float *w, float *out, int64_t n, float eps) {
    double ss = 0.0;
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * (double)x[i];
    /* transformers: x * rsqrt(mean + eps), then * weight */
    float scale = 1.0f / sqrtf((float)(ss / (double)n) + eps);
    if (w)
        for (int64_t i = 0; i < n; i++) out[i] = w[i] * (x[i] * scale);
    else
        for (int64_t i = 0; i < n; i++) out[i] = x[i] * scale;
}

void dsv4_rope(float *x, int32_t n_heads, int32_t dim, int32_t n_rot, const float *inv_freq,
               int32_t pos, float sign) {
    float c[DSV4_MAX_ROPE_PAIRS], s[DSV4_MAX_ROPE_PAIRS];
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

dsv4_linear dsv4_linear_rows(const dsv4_linear *w, int64_t r0, int64_t n) {
    dsv4_linear v = *w;
    v.n_out = n;
    v.data = (const uint8_t *)w->data + (uint64_t)r0 * w->row_bytes;
    if (v.kind == DSV4_W_FP8) v.row_off = w->row_off + r0;
    if (v.kind == DSV4_W_MXFP4) v.mx_scale += (uint64_t)r0 * (uint64_t)(v.n_in / 32);
    return v;
}
