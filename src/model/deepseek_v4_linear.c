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



dsv4_linear dsv4_linear_rows(const dsv4_linear *w, int64_t r0, int64_t n) {
    dsv4_linear v = *w;
    v.n_out = n;
    v.data = (const uint8_t *)w->data + (uint64_t)r0 * w->row_bytes;
    if (v.kind == DSV4_W_FP8) v.row_off = w->row_off + r0;
    if (v.kind == DSV4_W_MXFP4) v.mx_scale += (uint64_t)r0 * (uint64_t)(v.n_in / 32);
    return v;
}
