/* Dequantizing matmul (GEMV for decode, tiled GEMM for prefill), row
 * dequantization and the embedding gather.
 *
 * One kernel template, mm_kernel<DT, R, O>, is both: a block of 4 warps
 * takes R activation rows and 4 * O output rows of W. The rows' inputs are
 * staged in shared memory 1,024 elements (32 chunks of 32) at a time; lane
 * l of each warp takes chunk l of the stage, dequantizes it 8 elements at
 * a time for each of its warp's O weight rows, and accumulates
 *   acc[o][r] = fmaf(w[k], x[r][k], acc[o][r])   for k in chunk order,
 * so over the whole row lane l has summed chunks l, l + 32, l + 64, ... in
 * order. The 32 lane sums are then added by the warp butterfly
 * (di_dev_warp_sum). That sequence of operations per (r, o) is the same
 * for every R, O, grid and batch size: GEMV (R = 1) and GEMM (R = 8) give
 * identical bits, and a row alone equals that row inside any batch. The R
 * rows of a tile only share the dequantization of each weight chunk and the
 * loads; rows past n_rows compute on zeros and are not stored.
 *
 * Not tensor cores: those reduce in an order the hardware does not
 * document and want bf16/tf32 inputs, so they are a numerics mode of their
 * own (docs/CUDA.md). This is the exact-f32 path. */
#include "kernels/cuda/cuda_dequant.cuh"

#include <math.h>
#include <string.h>

#define MM_WARPS 4                       /* warps per block */
#define MM_STAGE_CHUNKS DI_CUDA_WARP     /* chunks per shared-memory stage: one per lane */
#define MM_STAGE (MM_STAGE_CHUNKS * DI_CUDA_CHUNK) /* 1,024 elements */
#define MM_PAD (DI_CUDA_CHUNK + 1)       /* 33: lanes reading the same offset of their chunks hit distinct banks */
#define GEMV_OUTS 2                      /* weight rows per warp in the GEMV */
#define GEMM_OUTS 4                      /* weight rows per warp in the GEMM */

template <int DT, int R, int O>
__global__ void __launch_bounds__(MM_WARPS *DI_CUDA_WARP)
    mm_kernel(const uint8_t *__restrict__ w, uint64_t row_bytes, const float *__restrict__ x, int64_t ldx,
              float *__restrict__ y, int64_t ldy, int64_t n_rows, int64_t n_in, int64_t n_out) {
    __shared__ float xs[R][MM_STAGE_CHUNKS][MM_PAD]; /* (R, 32 chunks, 32 + pad) */
    const int lane = threadIdx.x % DI_CUDA_WARP, warp = threadIdx.x / DI_CUDA_WARP;
    const int64_t o0 = ((int64_t)blockIdx.x * MM_WARPS + warp) * O;
    const int64_t r0 = (int64_t)blockIdx.y * R;
    const int64_t n_chunks = n_in / DI_CUDA_CHUNK;
    float acc[O][R];
#pragma unroll
    for (int o = 0; o < O; o++)
#pragma unroll
        for (int r = 0; r < R; r++) acc[o][r] = 0.0f;

    for (int64_t c0 = 0; c0 < n_chunks; c0 += MM_STAGE_CHUNKS) {
        for (int i = threadIdx.x; i < R * MM_STAGE; i += MM_WARPS * DI_CUDA_WARP) {
            int r = i / MM_STAGE, k = i % MM_STAGE;
            int64_t col = c0 * DI_CUDA_CHUNK + k;
            xs[r][k / DI_CUDA_CHUNK][k % DI_CUDA_CHUNK] =
                r0 + r < n_rows && col < n_in ? x[(r0 + r) * ldx + col] : 0.0f;
        }
        __syncthreads();
        const int64_t c = c0 + lane;
        if (c < n_chunks) {
#pragma unroll
            for (int p = 0; p < DI_CUDA_CHUNK / 8; p++) {
                float xv[R][8];
#pragma unroll
                for (int r = 0; r < R; r++)
#pragma unroll
                    for (int j = 0; j < 8; j++) xv[r][j] = xs[r][lane][8 * p + j];
#pragma unroll
                for (int o = 0; o < O; o++) {
                    if (o0 + o >= n_out) break; /* warp-uniform */
                    float wv[8];
                    di_deq<DT>::chunk8(w + (o0 + o) * row_bytes, c, p, wv);
#pragma unroll
                    for (int r = 0; r < R; r++)
#pragma unroll
                        for (int j = 0; j < 8; j++) acc[o][r] = fmaf(wv[j], xv[r][j], acc[o][r]);
                }
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int o = 0; o < O; o++)
#pragma unroll
        for (int r = 0; r < R; r++) {
            float s = di_dev_warp_sum(acc[o][r]);
            if (lane == 0 && o0 + o < n_out && r0 + r < n_rows) y[(r0 + r) * ldy + o0 + o] = s;
        }
}

/* Checks shared by the weight kernels: a supported dtype, n a positive
 * multiple of the dtype's block and of the 32-element chunk, row_bytes
 * the dtype's row size of n elements (at least: padded rows are fine) and
 * aligned pointers for the plain types. */
static di_status check_weights(const char *what, di_dtype dtype, const void *w, uint64_t row_bytes, int64_t n,
                               di_error *err) {
    if (!di_cuda_supports_dtype(dtype)) {
        const di_dtype_traits *t = di_dtype_traits_of(dtype);
        return di_cuda_fail(err, DI_ERR_UNSUPPORTED, "%s: weight dtype %s has no CUDA kernel", what,
                            t ? t->name : "(unknown)");
    }
    if (!w) return di_cuda_fail(err, DI_ERR_INVALID_ARG, "%s: weights are NULL", what);
    if (n <= 0 || n % DI_CUDA_CHUNK)
        return di_cuda_fail(err, DI_ERR_UNSUPPORTED, "%s: row length %lld is not a positive multiple of %d", what,
                            (long long)n, DI_CUDA_CHUNK);
    uint64_t need = 0;
    if (di_dtype_row_bytes(dtype, n, &need) != DI_OK)
        return di_cuda_fail(err, DI_ERR_INVALID_ARG, "%s: %lld elements do not fill whole %s blocks", what,
                            (long long)n, di_dtype_traits_of(dtype)->name);
    if (row_bytes < need)
        return di_cuda_fail(err, DI_ERR_INVALID_ARG, "%s: row stride %llu bytes is below the %llu of %lld elements",
                            what, (unsigned long long)row_bytes, (unsigned long long)need, (long long)n);
    /* every block field is read with 16-bit loads at least (cuda_dequant.cuh) */
    uint64_t align = dtype == DI_DTYPE_F32 ? 4 : 2;
    if ((uintptr_t)w % align || row_bytes % align)
        return di_cuda_fail(err, DI_ERR_INVALID_ARG, "%s: %s rows must be %llu-byte aligned", what,
                            di_dtype_traits_of(dtype)->name, (unsigned long long)align);
    return DI_OK;
}

extern "C" di_status di_cuda_matmul(di_cuda_ctx *c, const di_cuda_matmul_args *a, di_error *err) {
    if (!c || !a) return di_cuda_fail(err, DI_ERR_INVALID_ARG, "di_cuda_matmul: NULL argument");
    di_status s = check_weights("di_cuda_matmul", a->dtype, a->w, a->row_bytes, a->n_in, err);
    if (s) return s;
    if (a->n_rows < 0 || a->n_out < 0 || a->ldx < a->n_in || a->ldy < a->n_out)
        return di_cuda_fail(err, DI_ERR_INVALID_ARG, "di_cuda_matmul: bad shape (rows %lld, out %lld, ldx %lld, ldy %lld)",
                            (long long)a->n_rows, (long long)a->n_out, (long long)a->ldx, (long long)a->ldy);
    if (a->n_rows == 0 || a->n_out == 0) return DI_OK;
    if (!a->x || !a->y) return di_cuda_fail(err, DI_ERR_INVALID_ARG, "di_cuda_matmul: x or y is NULL");
    di_cuda_mm_path path = a->path;
    if (path == DI_CUDA_MM_AUTO) path = a->n_rows <= DI_CUDA_GEMV_MAX_ROWS ? DI_CUDA_MM_GEMV : DI_CUDA_MM_GEMM;
    const int outs = path == DI_CUDA_MM_GEMV ? GEMV_OUTS : GEMM_OUTS;
    const int rows = path == DI_CUDA_MM_GEMV ? 1 : DI_CUDA_GEMM_ROWS;
    int64_t gx = (a->n_out + MM_WARPS * outs - 1) / (MM_WARPS * outs), gy = (a->n_rows + rows - 1) / rows;
    if (gx > 0x7fffffff || gy > 65535)
        return di_cuda_fail(err, DI_ERR_RANGE, "di_cuda_matmul: grid %lld x %lld is past CUDA's limits", (long long)gx,
                            (long long)gy);
    if ((s = di_cuda_check(cudaSetDevice(c->device), "cudaSetDevice", err))) return s;
    dim3 grid((unsigned)gx, (unsigned)gy), block(MM_WARPS * DI_CUDA_WARP);
    const uint8_t *w = (const uint8_t *)a->w;
#define LAUNCH_GEMV(DT)                                                                                             \
    mm_kernel<DT, 1, GEMV_OUTS><<<grid, block, 0, c->stream>>>(w, a->row_bytes, a->x, a->ldx, a->y, a->ldy,         \
                                                                a->n_rows, a->n_in, a->n_out)
#define LAUNCH_GEMM(DT)                                                                                             \
    mm_kernel<DT, DI_CUDA_GEMM_ROWS, GEMM_OUTS><<<grid, block, 0, c->stream>>>(                                     \
        w, a->row_bytes, a->x, a->ldx, a->y, a->ldy, a->n_rows, a->n_in, a->n_out)
    if (path == DI_CUDA_MM_GEMV) {
        DI_CUDA_DISPATCH_DTYPE(a->dtype, LAUNCH_GEMV)
    } else {
        DI_CUDA_DISPATCH_DTYPE(a->dtype, LAUNCH_GEMM)
    }
#undef LAUNCH_GEMV
#undef LAUNCH_GEMM
    return di_cuda_launched("di_cuda_matmul", err);
}

/* ---- dequantization and the embedding gather ---------------------------- */

/* One thread per 8 elements: out row r = dequant(w row rows[r] or r). */
template <int DT>
__global__ void dequant_kernel(const uint8_t *__restrict__ w, uint64_t row_bytes, const int32_t *__restrict__ ids,
                               int64_t n_vocab, int64_t n_rows, int64_t n, float *__restrict__ out,
                               unsigned int *flags) {
    const int64_t per_row = n / 8;
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_rows * per_row) return;
    const int64_t r = i / per_row, e8 = i % per_row;
    float *o = out + r * n + e8 * 8;
    int64_t src = r;
    if (ids) {
        src = ids[r];
        if (src < 0 || src >= n_vocab) {
            if (e8 == 0) atomicOr(flags, DI_CUDA_FLAG_BAD_ID); /* an error flag, not a reduction */
            for (int j = 0; j < 8; j++) o[j] = __int_as_float(0x7fc00000);
            return;
        }
    }
    float v[8];
    di_deq<DT>::chunk8(w + (uint64_t)src * row_bytes, e8 / 4, (int)(e8 % 4), v);
    for (int j = 0; j < 8; j++) o[j] = v[j];
}

static di_status launch_dequant(di_cuda_ctx *c, const char *what, di_dtype dtype, const void *w, uint64_t row_bytes,
                                const int32_t *ids, int64_t n_vocab, int64_t n_rows, int64_t n, float *out,
                                di_error *err) {
    if (!c) return di_cuda_fail(err, DI_ERR_INVALID_ARG, "%s: NULL context", what);
    di_status s = check_weights(what, dtype, w, row_bytes, n, err);
    if (s) return s;
    if (n_rows < 0) return di_cuda_fail(err, DI_ERR_INVALID_ARG, "%s: negative row count", what);
    if (n_rows == 0) return DI_OK;
    if (!out) return di_cuda_fail(err, DI_ERR_INVALID_ARG, "%s: out is NULL", what);
    const int threads = 256;
    int64_t blocks = (n_rows * (n / 8) + threads - 1) / threads;
    if (blocks > 0x7fffffff) return di_cuda_fail(err, DI_ERR_RANGE, "%s: %lld rows are too many", what, (long long)n_rows);
    if ((s = di_cuda_check(cudaSetDevice(c->device), "cudaSetDevice", err))) return s;
    const uint8_t *wb = (const uint8_t *)w;
#define LAUNCH(DT)                                                                                                  \
    dequant_kernel<DT><<<(unsigned)blocks, threads, 0, c->stream>>>(wb, row_bytes, ids, n_vocab, n_rows, n, out,  \
                                                                    c->flags)
    DI_CUDA_DISPATCH_DTYPE(dtype, LAUNCH)
#undef LAUNCH
    return di_cuda_launched(what, err);
}

extern "C" di_status di_cuda_dequant(di_cuda_ctx *c, di_dtype dtype, const void *w, uint64_t row_bytes,
                                     int64_t n_rows, int64_t n, float *out, di_error *err) {
    return launch_dequant(c, "di_cuda_dequant", dtype, w, row_bytes, NULL, 0, n_rows, n, out, err);
}

extern "C" di_status di_cuda_embed(di_cuda_ctx *c, di_dtype dtype, const void *table, uint64_t row_bytes,
                                   int64_t n_vocab, const int32_t *ids, int64_t n_ids, int64_t n_embd, float *out,
                                   di_error *err) {
    if (!ids && n_ids > 0) return di_cuda_fail(err, DI_ERR_INVALID_ARG, "di_cuda_embed: ids are NULL");
    if (n_vocab <= 0) return di_cuda_fail(err, DI_ERR_INVALID_ARG, "di_cuda_embed: empty vocabulary");
    return launch_dequant(c, "di_cuda_embed", dtype, table, row_bytes, ids, n_vocab, n_ids, n_embd, out, err);
}

template <int DT> static void host_dequant(const uint8_t *row, int64_t n, float *out) {
    for (int64_t e8 = 0; e8 < n / 8; e8++) di_deq<DT>::chunk8(row, e8 / 4, (int)(e8 % 4), out + e8 * 8);
}

extern "C" di_status di_cuda_host_dequant(di_dtype dtype, const void *row, int64_t n, float *out, di_error *err) {
    uint64_t row_bytes = 0;
    if (di_cuda_supports_dtype(dtype) && n > 0) (void)di_dtype_row_bytes(dtype, n, &row_bytes);
    di_status s = check_weights("di_cuda_host_dequant", dtype, row, row_bytes, n, err);
    if (s) return s;
    if (!out) return di_cuda_fail(err, DI_ERR_INVALID_ARG, "di_cuda_host_dequant: out is NULL");
    const uint8_t *r = (const uint8_t *)row;
#define RUN(DT) host_dequant<DT>(r, n, out)
    DI_CUDA_DISPATCH_DTYPE(dtype, RUN)
#undef RUN
    return DI_OK;
}

/* mm_kernel's per-output arithmetic, lane by lane: lane l's fmaf chain over
 * chunks l, l + 32, ... (8 elements at a time, in order), then the xor
 * butterfly (lane i adds lane i ^ off, off = 16 .. 1; every lane ends with
 * the same sum, lane 0's is stored). */
template <int DT>
static void host_matmul_row(const uint8_t *w, uint64_t row_bytes, const float *x, int64_t n_in, int64_t n_out,
                            float *y) {
    const int64_t n_chunks = n_in / DI_CUDA_CHUNK;
    for (int64_t o = 0; o < n_out; o++) {
        float acc[DI_CUDA_WARP] = {0};
        for (int64_t c = 0; c < n_chunks; c++) {
            float *a = &acc[c % DI_CUDA_WARP];
            for (int p = 0; p < DI_CUDA_CHUNK / 8; p++) {
                float wv[8];
                di_deq<DT>::chunk8(w + (uint64_t)o * row_bytes, c, p, wv);
                for (int j = 0; j < 8; j++) *a = fmaf(wv[j], x[c * DI_CUDA_CHUNK + 8 * p + j], *a);
            }
        }
        for (int off = DI_CUDA_WARP / 2; off > 0; off >>= 1) {
            float next[DI_CUDA_WARP];
            for (int l = 0; l < DI_CUDA_WARP; l++) next[l] = acc[l] + acc[l ^ off];
            memcpy(acc, next, sizeof acc);
        }
        y[o] = acc[0];
    }
}

extern "C" di_status di_cuda_host_matmul_row(di_dtype dtype, const void *w, uint64_t row_bytes, const float *x,
                                             int64_t n_in, int64_t n_out, float *y, di_error *err) {
    di_status s = check_weights("di_cuda_host_matmul_row", dtype, w, row_bytes, n_in, err);
    if (s) return s;
    if (n_out < 0 || (n_out > 0 && (!x || !y)))
        return di_cuda_fail(err, DI_ERR_INVALID_ARG, "di_cuda_host_matmul_row: bad arguments");
    const uint8_t *wb = (const uint8_t *)w;
#define RUN(DT) host_matmul_row<DT>(wb, row_bytes, x, n_in, n_out, y)
    DI_CUDA_DISPATCH_DTYPE(dtype, RUN)
#undef RUN
    return DI_OK;
}
