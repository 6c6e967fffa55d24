/* Per-row and elementwise ops: RMSNorm, RoPE, SwiGLU, GeGLU, softcap, the
 * residual add, scaling, the row gather and the f16 KV store. Each follows kernels/cpu/ops.c's
 * formula operation by operation (compiled with -fmad=false, so a*b - c*d
 * rounds each product as the CPU's C does); only RMSNorm's sum and
 * softcap's tanh can differ from the CPU's bits (docs/CUDA.md). */
#include "kernels/cuda/cuda_common.cuh"

#define ELEM_THREADS 256
#define NORM_THREADS 256 /* one block per row; also the width of the fixed sum tree */

static di_status begin(di_cuda_ctx *c, const char *what, int64_t n, di_error *err) {
    if (!c) return di_cuda_fail(err, DI_ERR_INVALID_ARG, "%s: NULL context", what);
    if (n < 0) return di_cuda_fail(err, DI_ERR_INVALID_ARG, "%s: negative size", what);
    if ((n + ELEM_THREADS - 1) / ELEM_THREADS > 0x7fffffff)
        return di_cuda_fail(err, DI_ERR_RANGE, "%s: %lld elements are too many for one launch", what, (long long)n);
    return di_cuda_check(cudaSetDevice(c->device), "cudaSetDevice", err);
}

static inline unsigned elem_blocks(int64_t n) { return (unsigned)((n + ELEM_THREADS - 1) / ELEM_THREADS); }

/* ---- RMSNorm ---------------------------------------------------------- */

/* Thread t sums x[i]^2 (double) for i = t, t + 256, ... in order, then the
 * 256 partial sums are halved pairwise in shared memory (s[t] += s[t + h],
 * h = 128 .. 1): one fixed order per row length. */
__global__ void __launch_bounds__(NORM_THREADS)
    rmsnorm_kernel(const float *x, const float *__restrict__ w, float *out, int64_t n, float eps) {
    __shared__ double part[NORM_THREADS];
    __shared__ float scale_s;
    const float *xr = x + (int64_t)blockIdx.x * n;
    float *yr = out + (int64_t)blockIdx.x * n;
    double ss = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += NORM_THREADS) ss = __dadd_rn(ss, __dmul_rn((double)xr[i], (double)xr[i]));
    part[threadIdx.x] = ss;
    __syncthreads();
    for (int h = NORM_THREADS / 2; h > 0; h >>= 1) {
        if ((int)threadIdx.x < h) part[threadIdx.x] = __dadd_rn(part[threadIdx.x], part[threadIdx.x + h]);
        __syncthreads();
    }
    if (threadIdx.x == 0) scale_s = 1.0f / sqrtf(__fadd_rn((float)(part[0] / (double)n), eps));
    __syncthreads();
    const float scale = scale_s;
    for (int64_t i = threadIdx.x; i < n; i += NORM_THREADS) yr[i] = __fmul_rn(__fmul_rn(xr[i], scale), w[i]);
}

extern "C" di_status di_cuda_rmsnorm(di_cuda_ctx *c, const float *x, const float *w, float *out, int64_t n_rows,
                                     int64_t n, float eps, di_error *err) {
    di_status s = begin(c, "di_cuda_rmsnorm", n_rows, err);
    if (s) return s;
    if (n <= 0) return di_cuda_fail(err, DI_ERR_INVALID_ARG, "di_cuda_rmsnorm: row length %lld", (long long)n);
    if (n_rows == 0) return DI_OK;
    if (!x || !w || !out) return di_cuda_fail(err, DI_ERR_INVALID_ARG, "di_cuda_rmsnorm: NULL pointer");
    rmsnorm_kernel<<<(unsigned)n_rows, NORM_THREADS, 0, c->stream>>>(x, w, out, n, eps);
    return di_cuda_launched("di_cuda_rmsnorm", err);
}

/* ---- RoPE ------------------------------------------------------------- */

/* One thread per (row, head, pair): the rotation of di_rope_apply. */
__global__ void rope_kernel(float *x, const float *__restrict__ cs, int64_t n_rows, int32_t n_heads,
                            int32_t head_dim, int32_t n_rot, int neox) {
    const int32_t n_pairs = n_rot / 2;
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_rows * n_heads * n_pairs) return;
    const int64_t r = i / ((int64_t)n_heads * n_pairs);
    const int32_t h = (int32_t)(i / n_pairs % n_heads), k = (int32_t)(i % n_pairs);
    const float cv = cs[r * n_rot + k], sv = cs[r * n_rot + n_pairs + k];
    float *v = x + (r * n_heads + h) * head_dim;
    const int32_t i0 = neox ? k : 2 * k, i1 = neox ? k + n_pairs : 2 * k + 1;
    const float x0 = v[i0], x1 = v[i1];
    v[i0] = __fsub_rn(__fmul_rn(x0, cv), __fmul_rn(x1, sv));
    v[i1] = __fadd_rn(__fmul_rn(x0, sv), __fmul_rn(x1, cv));
}

extern "C" di_status di_cuda_rope(di_cuda_ctx *c, float *x, const float *cs, int64_t n_rows, int32_t n_heads,
                                  int32_t head_dim, int32_t n_rot, int neox, di_error *err) {
    if (n_heads <= 0 || head_dim <= 0 || n_rot < 0 || n_rot % 2 || n_rot > head_dim)
        return di_cuda_fail(err, DI_ERR_INVALID_ARG, "di_cuda_rope: bad shape (heads %d, head_dim %d, n_rot %d)",
                            (int)n_heads, (int)head_dim, (int)n_rot);
    if (n_rows < 0) return di_cuda_fail(err, DI_ERR_INVALID_ARG, "di_cuda_rope: negative row count");
    int64_t n = n_rows * n_heads * (n_rot / 2);
    di_status s = begin(c, "di_cuda_rope", n, err);
    if (s || n == 0) return s;
    if (!x || !cs) return di_cuda_fail(err, DI_ERR_INVALID_ARG, "di_cuda_rope: NULL pointer");
    rope_kernel<<<elem_blocks(n), ELEM_THREADS, 0, c->stream>>>(x, cs, n_rows, n_heads, head_dim, n_rot, neox);
    return di_cuda_launched("di_cuda_rope", err);
}

/* ---- gated activations -------------------------------------------------- */

/* di_swiglu: e = e^-|g|; silu(g) = g / (1 + e) for g >= 0, g e / (1 + e)
 * below; times up. */
__global__ void swiglu_kernel(float *gate, const float *__restrict__ up, int64_t n) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float g = gate[i], e = di_dev_exp_nonpos(-fabsf(g));
    const float num = g >= 0.0f ? g : __fmul_rn(g, e);
    gate[i] = __fmul_rn(__fdiv_rn(num, __fadd_rn(1.0f, e)), up[i]);
}

/* di_geglu: z2 = 2 sqrt(2/pi) (g + 0.044715 g^3), gelu = g sigmoid(z2),
 * the CPU's expression with each operation rounded in its order. */
__global__ void geglu_kernel(float *gate, const float *__restrict__ up, int64_t n) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float g = gate[i];
    const float cube = __fmul_rn(__fmul_rn(__fmul_rn(0.044715f, g), g), g);
    const float z2 = __fmul_rn(__fmul_rn(2.0f, 0.7978845608028654f), __fadd_rn(g, cube));
    const float e = di_dev_exp_nonpos(-fabsf(z2));
    const float num = z2 >= 0.0f ? g : __fmul_rn(g, e);
    gate[i] = __fmul_rn(__fdiv_rn(num, __fadd_rn(1.0f, e)), up[i]);
}

static di_status launch_glu(di_cuda_ctx *c, const char *what, int geglu, float *gate, const float *up, int64_t n,
                            di_error *err) {
    di_status s = begin(c, what, n, err);
    if (s || n == 0) return s;
    if (!gate || !up) return di_cuda_fail(err, DI_ERR_INVALID_ARG, "%s: NULL pointer", what);
    if (geglu) geglu_kernel<<<elem_blocks(n), ELEM_THREADS, 0, c->stream>>>(gate, up, n);
    else swiglu_kernel<<<elem_blocks(n), ELEM_THREADS, 0, c->stream>>>(gate, up, n);
    return di_cuda_launched(what, err);
}

extern "C" di_status di_cuda_swiglu(di_cuda_ctx *c, float *gate, const float *up, int64_t n, di_error *err) {
    return launch_glu(c, "di_cuda_swiglu", 0, gate, up, n, err);
}

extern "C" di_status di_cuda_geglu(di_cuda_ctx *c, float *gate, const float *up, int64_t n, di_error *err) {
    return launch_glu(c, "di_cuda_geglu", 1, gate, up, n, err);
}

/* ---- softcap and add ---------------------------------------------------- */

/* llama.c's cap * tanhf(x / cap); CUDA's tanhf is within 2 ulp of tanh,
 * glibc's within 1, hence the stated tolerance. */
__global__ void softcap_kernel(float *x, int64_t n, float cap) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = __fmul_rn(cap, tanhf(__fdiv_rn(x[i], cap)));
}

extern "C" di_status di_cuda_softcap(di_cuda_ctx *c, float *x, int64_t n, float cap, di_error *err) {
    if (!(cap > 0.0f)) return di_cuda_fail(err, DI_ERR_INVALID_ARG, "di_cuda_softcap: cap must be positive");
    di_status s = begin(c, "di_cuda_softcap", n, err);
    if (s || n == 0) return s;
    if (!x) return di_cuda_fail(err, DI_ERR_INVALID_ARG, "di_cuda_softcap: NULL pointer");
    softcap_kernel<<<elem_blocks(n), ELEM_THREADS, 0, c->stream>>>(x, n, cap);
    return di_cuda_launched("di_cuda_softcap", err);
}

__global__ void add_kernel(float *x, const float *__restrict__ y, int64_t n) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = __fadd_rn(x[i], y[i]);
}

extern "C" di_status di_cuda_add(di_cuda_ctx *c, float *x, const float *y, int64_t n, di_error *err) {
    di_status s = begin(c, "di_cuda_add", n, err);
    if (s || n == 0) return s;
    if (!x || !y) return di_cuda_fail(err, DI_ERR_INVALID_ARG, "di_cuda_add: NULL pointer");
    add_kernel<<<elem_blocks(n), ELEM_THREADS, 0, c->stream>>>(x, y, n);
    return di_cuda_launched("di_cuda_add", err);
}

__global__ void scale_kernel(float *x, int64_t n, float s) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = __fmul_rn(x[i], s);
}

extern "C" di_status di_cuda_scale(di_cuda_ctx *c, float *x, int64_t n, float s, di_error *err) {
    di_status st = begin(c, "di_cuda_scale", n, err);
    if (st || n == 0) return st;
    if (!x) return di_cuda_fail(err, DI_ERR_INVALID_ARG, "di_cuda_scale: NULL pointer");
    scale_kernel<<<elem_blocks(n), ELEM_THREADS, 0, c->stream>>>(x, n, s);
    return di_cuda_launched("di_cuda_scale", err);
}

__global__ void gather_rows_kernel(const float *__restrict__ x, int64_t n_rows, int64_t n,
                                   const int32_t *__restrict__ rows, int64_t n_idx, float *__restrict__ out,
                                   unsigned int *flags) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_idx * n) return;
    const int64_t j = i / n, e = i % n, r = rows[j];
    if (r < 0 || r >= n_rows) {
        if (e == 0) atomicOr(flags, DI_CUDA_FLAG_BAD_ID); /* an error flag, not a reduction */
        out[i] = __int_as_float(0x7fc00000);
        return;
    }
    out[i] = x[r * n + e];
}

extern "C" di_status di_cuda_gather_rows(di_cuda_ctx *c, const float *x, int64_t n_rows, int64_t n,
                                         const int32_t *rows, int64_t n_idx, float *out, di_error *err) {
    if (n_rows < 0 || n <= 0 || n_idx < 0)
        return di_cuda_fail(err, DI_ERR_INVALID_ARG, "di_cuda_gather_rows: bad shape");
    di_status s = begin(c, "di_cuda_gather_rows", n_idx * n, err);
    if (s || n_idx == 0) return s;
    if (!x || !rows || !out) return di_cuda_fail(err, DI_ERR_INVALID_ARG, "di_cuda_gather_rows: NULL pointer");
    gather_rows_kernel<<<elem_blocks(n_idx * n), ELEM_THREADS, 0, c->stream>>>(x, n_rows, n, rows, n_idx, out,
                                                                               c->flags);
    return di_cuda_launched("di_cuda_gather_rows", err);
}

/* ---- KV store ----------------------------------------------------------- */

/* One thread per element of a (row, kv head * head_dim) slot; K and V. */
__global__ void kv_store_kernel(uint16_t *kc, uint16_t *vc, const float *__restrict__ k, const float *__restrict__ v,
                                const int32_t *__restrict__ slots, int64_t n_rows, int64_t row_elems,
                                int64_t n_slots, unsigned int *flags) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_rows * row_elems) return;
    const int64_t r = i / row_elems, e = i % row_elems;
    const int64_t slot = slots[r];
    if (slot < 0 || slot >= n_slots) {
        if (e == 0) atomicOr(flags, DI_CUDA_FLAG_BAD_SLOT); /* an error flag, not a reduction */
        return;
    }
    kc[slot * row_elems + e] = di_dev_f32_to_f16(k[i]);
    vc[slot * row_elems + e] = di_dev_f32_to_f16(v[i]);
}

extern "C" di_status di_cuda_kv_store(di_cuda_ctx *c, const di_cuda_kv_layer *kv, const float *k, const float *v,
                                      const int32_t *slots, int64_t n_rows, di_error *err) {
    if (!kv || kv->n_blocks <= 0 || kv->block_size <= 0 || kv->n_kv_heads <= 0 || kv->head_dim <= 0)
        return di_cuda_fail(err, DI_ERR_INVALID_ARG, "di_cuda_kv_store: bad cache shape");
    const int64_t row_elems = (int64_t)kv->n_kv_heads * kv->head_dim;
    di_status s = begin(c, "di_cuda_kv_store", n_rows * row_elems, err);
    if (s || n_rows == 0) return s;
    if (!kv->k || !kv->v || !k || !v || !slots)
        return di_cuda_fail(err, DI_ERR_INVALID_ARG, "di_cuda_kv_store: NULL pointer");
    kv_store_kernel<<<elem_blocks(n_rows * row_elems), ELEM_THREADS, 0, c->stream>>>(
        kv->k, kv->v, k, v, slots, n_rows, row_elems, (int64_t)kv->n_blocks * kv->block_size, c->flags);
    return di_cuda_launched("di_cuda_kv_store", err);
}
