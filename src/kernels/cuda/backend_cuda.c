/* The CUDA backend table (kernels/backend.h) over the CUDA kernel library
 * (cuda_kernels.h). Compiled into libdeepinfer_cuda when CMake builds it
 * (cmake/cuda.cmake) and registered by the command at start-up
 * (di_backend_cuda_register), so libdeepinfer itself never links the CUDA
 * runtime.
 *
 * Built (with the project's C flags) and linked into the command; NEVER
 * RUN ON A GPU. Every op is set (test_cuda checks the table's completeness
 * without a GPU). The llama forward allocates its cache and row buffers
 * through the buffer ops, but its weights and per-step tables are still
 * host memory (docs/CUDA.md, "the seam"), so di_device_check refuses
 * every model on this backend and no op below is reached from the engine.
 * The ops that have a kernel call it on the pointers they are given
 * (device memory by the CUDA library's contract); the ones without a
 * kernel latch a clear DI_ERR_UNSUPPORTED, reported by `check`. */
#include "kernels/backend.h"
#include "base/alloc.h"
#include "kernels/cuda/backend_cuda.h"
#include "kernels/cuda/cuda_kernels.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct cuda_state {
    di_cuda_ctx *ctx;
    di_status first; /* the first error since the last check */
    di_error err;
} cuda_state;

static cuda_state *state_of(const di_backend *be) { return be->state; }

/* Keeps the first error of a step; the forward reads it through check. */
static void latch(const di_backend *be, di_status s, const di_error *e) {
    cuda_state *st = state_of(be);
    if (s == DI_OK || st->first != DI_OK) return;
    st->first = s;
    st->err = *e;
}

static void missing(const di_backend *be, const char *op) {
    di_error e = {0};
    snprintf(e.msg, sizeof e.msg, "cuda backend: op '%s' is not implemented yet (docs/CUDA.md)", op);
    e.code = DI_ERR_UNSUPPORTED;
    latch(be, DI_ERR_UNSUPPORTED, &e);
}

static void cuda_release(di_backend *be) {
    cuda_state *st = state_of(be);
    if (!st) return;
    di_cuda_ctx_free(st->ctx);
    free(st);
    be->state = NULL;
}

static void cuda_describe(const di_backend *be, char *buf, size_t n) {
    char dev[128];
    di_cuda_ctx_describe(state_of(be)->ctx, dev, sizeof dev);
    snprintf(buf, n, "cuda: %s", dev);
}

static di_status cuda_check(const di_backend *be, di_error *err) {
    cuda_state *st = state_of(be);
    di_error e = {0};
    di_status s = di_cuda_sync(st->ctx, &e);
    latch(be, s, &e);
    s = st->first;
    if (s != DI_OK && err) *err = st->err;
    st->first = DI_OK;
    return s;
}

static int cuda_supports(const di_backend *be, di_dtype dtype) {
    (void)be;
    return di_cuda_supports_dtype(dtype);
}

static void cuda_dequant(const di_backend *be, di_dtype dtype, const void *src, float *dst, int64_t n) {
    di_error e = {0};
    uint64_t rb = 0;
    di_status s = di_dtype_row_bytes(dtype, n, &rb);
    if (s == DI_OK) s = di_cuda_dequant(state_of(be)->ctx, dtype, src, rb, 1, n, dst, &e);
    latch(be, s, &e);
}

static int64_t cuda_linear_scratch(const di_backend *be, int64_t n_rows, int64_t n_in, int n_threads) {
    (void)be, (void)n_rows, (void)n_in, (void)n_threads;
    return 0; /* the CUDA matmul needs no caller scratch */
}

static void cuda_linear(const di_backend *be, const di_matmul_args *parts, int n_parts, float *scratch,
                        di_threadpool *pool) {
    (void)scratch, (void)pool;
    for (int i = 0; i < n_parts; i++) { /* each part's bits as alone */
        const di_matmul_args *p = &parts[i];
        di_cuda_matmul_args a = {p->dtype, p->w, p->row_bytes, p->x, p->ldx, p->y, p->ldy,
                                 p->n_rows, p->n_in, p->n_out, DI_CUDA_MM_AUTO};
        di_error e = {0};
        latch(be, di_cuda_matmul(state_of(be)->ctx, &a, &e), &e);
    }
}

static void cuda_embed_norm(const di_backend *be, const di_embed_norm_args *a, di_threadpool *pool) {
    (void)a, (void)pool;
    missing(be, "embed_norm"); /* needs the token ids and RoPE angles uploaded per step */
}

static void cuda_rope_store(const di_backend *be, const di_rope_store_args *a, di_threadpool *pool) {
    (void)a, (void)pool;
    missing(be, "rope_store"); /* needs the slots uploaded and a broadcast bias add */
}

static void cuda_add_norm(const di_backend *be, float *x, float *h, const float *post, const float *norm,
                          int64_t n_rows, int64_t n, float eps, di_threadpool *pool) {
    (void)pool;
    di_cuda_ctx *c = state_of(be)->ctx;
    di_error e = {0};
    di_status s = DI_OK;
    if (post) s = di_cuda_rmsnorm(c, h, post, h, n_rows, n, eps, &e);
    if (s == DI_OK) s = di_cuda_add(c, x, h, n_rows * n, &e);
    if (s == DI_OK && norm) s = di_cuda_rmsnorm(c, x, norm, h, n_rows, n, eps, &e);
    latch(be, s, &e);
}

static void cuda_glu(const di_backend *be, di_glu_kind kind, float *gate, const float *up, int64_t n_rows, int64_t n,
                     di_threadpool *pool) {
    (void)pool;
    di_error e = {0};
    di_cuda_ctx *c = state_of(be)->ctx;
    di_status s = kind == DI_GLU_GEGLU ? di_cuda_geglu(c, gate, up, n_rows * n, &e)
                                       : di_cuda_swiglu(c, gate, up, n_rows * n, &e);
    latch(be, s, &e);
}

static void cuda_gather_norm(const di_backend *be, const float *x, int64_t n_rows, int64_t n, const uint8_t *want,
                             const float *norm, float eps, float *out) {
    (void)x, (void)n_rows, (void)n, (void)want, (void)norm, (void)eps, (void)out;
    missing(be, "gather_norm"); /* needs the want rows uploaded as indices */
}

static void cuda_softcap(const di_backend *be, float *x, int64_t n, float cap) {
    di_error e = {0};
    latch(be, di_cuda_softcap(state_of(be)->ctx, x, n, cap, &e), &e);
}

static int64_t cuda_attention_scratch(const di_backend *be, int32_t n_heads, int32_t n_kv_heads, int32_t head_dim,
                                      int32_t block_size, int32_t n_pos) {
    (void)be, (void)n_heads, (void)n_kv_heads, (void)head_dim, (void)block_size, (void)n_pos;
    return 0; /* the context keeps the split workspace */
}

static void cuda_attention(const di_backend *be, const di_attn_args *a, int32_t n_pos, float *scratch,
                           di_threadpool *pool) {
    (void)a, (void)n_pos, (void)scratch, (void)pool;
    missing(be, "attention"); /* needs the block tables uploaded as (n_seqs, max_blocks) */
}

static void cuda_moe_route(const di_backend *be, float *logits, int64_t n_rows, int64_t n_expert, int64_t n_used,
                           bool norm, int32_t *sel, float *sel_w) {
    (void)logits, (void)n_rows, (void)n_expert, (void)n_used, (void)norm, (void)sel, (void)sel_w;
    missing(be, "moe_route");
}

static void cuda_moe_expert(const di_backend *be, const di_moe_expert_args *a, float *scratch, di_threadpool *pool) {
    (void)a, (void)scratch, (void)pool;
    missing(be, "moe_expert");
}

static void cuda_copy(const di_backend *be, void *dst, const void *src, size_t bytes) {
    di_error e = {0};
    latch(be, di_cuda_copy(state_of(be)->ctx, dst, src, bytes, &e), &e);
}

static void cuda_zero(const di_backend *be, void *dst, size_t bytes) {
    di_error e = {0};
    latch(be, di_cuda_memset(state_of(be)->ctx, dst, 0, bytes, &e), &e);
}

/* ---- buffers: device memory ---------------------------------------------- */

static void *cuda_buf_alloc(const di_backend *be, size_t bytes) {
    void *p = NULL;
    di_error e = {0};
    di_cuda_ctx *c = state_of(be)->ctx;
    di_status s = di_cuda_alloc(c, bytes, &p, &e); /* cudaMalloc: 256-byte aligned */
    if (s == DI_OK && (s = di_cuda_memset(c, p, 0, bytes, &e)) != DI_OK) {
        di_cuda_free(c, p);
        p = NULL;
    }
    latch(be, s, &e);
    return s == DI_OK ? p : NULL;
}

static void cuda_buf_free(const di_backend *be, void *buf) { di_cuda_free(state_of(be)->ctx, buf); }

static void cuda_upload(const di_backend *be, void *dst, const void *host_src, size_t bytes) {
    di_error e = {0};
    latch(be, di_cuda_upload(state_of(be)->ctx, dst, host_src, bytes, &e), &e);
}

static void cuda_download(const di_backend *be, void *host_dst, const void *src, size_t bytes) {
    di_error e = {0};
    latch(be, di_cuda_download(state_of(be)->ctx, host_dst, src, bytes, &e), &e);
}

/* The GGUF rows as they are (the kernels dequantize the block layout). */
static di_status cuda_upload_weight(const di_backend *be, const di_backend_weight *w, di_backend_weight *out,
                                    di_error *err) {
    *out = *w;
    out->data = NULL;
    out->packed = NULL;
    out->rows_unread = 1; /* linear reads the device copy */
    if (!di_cuda_supports_dtype(w->dtype))
        return di_error_set(err, DI_ERR_UNSUPPORTED, "cuda backend: no kernel for %s weights",
                            di_dtype_traits_of(w->dtype)->name);
    uint64_t bytes;
    if (w->n_out < 0 || di_mul_overflow_u64(w->row_bytes, (uint64_t)w->n_out, &bytes) || bytes > SIZE_MAX)
        return di_error_set(err, DI_ERR_RANGE, "cuda backend: weight of %lld rows of %llu bytes overflows",
                            (long long)w->n_out, (unsigned long long)w->row_bytes);
    di_cuda_ctx *c = state_of(be)->ctx;
    void *d = NULL;
    di_status s = di_cuda_alloc(c, (size_t)bytes, &d, err);
    if (s == DI_OK && (s = di_cuda_upload(c, d, w->data, (size_t)bytes, err)) != DI_OK) di_cuda_free(c, d);
    if (s == DI_OK) out->data = d;
    return s;
}

static void cuda_release_weight(const di_backend *be, di_backend_weight *w) {
    di_cuda_free(state_of(be)->ctx, (void *)w->data);
    w->data = NULL;
}

/* ---- DeepSeek V4 / V4.1 stages: no kernels yet ---- */

static int64_t cuda_scaled_linear_scratch(const di_backend *be, int64_t n_rows, int64_t n_in, int64_t n_tasks,
                                          int n_threads) {
    (void)be, (void)n_rows, (void)n_in, (void)n_tasks, (void)n_threads;
    return 0;
}

static void cuda_scaled_linear(const di_backend *be, const di_scaled_weight *w, const float *x, int64_t ldx, float *y,
                               int64_t ldy, int64_t n_rows, float *scratch, di_threadpool *pool) {
    (void)w, (void)x, (void)ldx, (void)y, (void)ldy, (void)n_rows, (void)scratch, (void)pool;
    missing(be, "scaled_linear"); /* needs FP8 block-scaled and MXFP4 gemms */
}

static void cuda_scaled_rows(const di_backend *be, const di_scaled_weight *w, const int32_t *ids, int64_t n,
                             float *dst, int64_t ldd) {
    (void)w, (void)ids, (void)n, (void)dst, (void)ldd;
    missing(be, "scaled_rows");
}

static void cuda_scaled_dot_rows(const di_backend *be, const di_scaled_weight *w, const float *x, float *y,
                                 float *scratch) {
    (void)w, (void)x, (void)y, (void)scratch;
    missing(be, "scaled_dot_rows");
}

static int64_t cuda_sparse_attention_scratch(const di_backend *be, int64_t max_idx) {
    (void)be, (void)max_idx;
    return 0;
}

static void cuda_sparse_attention(const di_backend *be, const di_sparse_attn_args *a, float *scratch,
                                  di_threadpool *pool) {
    (void)a, (void)scratch, (void)pool;
    missing(be, "sparse_attention");
}

static void cuda_index_scores(const di_backend *be, const di_index_score_args *a, di_threadpool *pool) {
    (void)a, (void)pool;
    missing(be, "index_scores");
}

static void cuda_mhc_pre(const di_backend *be, const di_mhc_pre_args *a, di_threadpool *pool) {
    (void)a, (void)pool;
    missing(be, "mhc_pre");
}

static void cuda_mhc_post(const di_backend *be, const float *X, const float *y, const float *post, const float *comb,
                          int32_t N, int32_t D, int64_t n_rows, int round_bf16, float *Xn, di_threadpool *pool) {
    (void)X, (void)y, (void)post, (void)comb, (void)N, (void)D, (void)n_rows, (void)round_bf16, (void)Xn, (void)pool;
    missing(be, "mhc_post");
}

static void cuda_mhc_head(const di_backend *be, const float *X, const float *mix, const float *base, float scale,
                          float eps, int32_t N, int32_t D, int64_t n_rows, float *h, di_threadpool *pool) {
    (void)X, (void)mix, (void)base, (void)scale, (void)eps, (void)N, (void)D, (void)n_rows, (void)h, (void)pool;
    missing(be, "mhc_head");
}

static void cuda_rms_norm(const di_backend *be, const float *x, const float *w, float *out, int64_t n_rows, int64_t n,
                          float eps, int round_bf16, di_threadpool *pool) {
    (void)x, (void)w, (void)out, (void)n_rows, (void)n, (void)eps, (void)round_bf16, (void)pool;
    missing(be, "rms_norm");
}

static void cuda_rope_rows(const di_backend *be, float *x, int64_t n_rows, int32_t n_heads, int32_t dim, int32_t n_rot,
                           const float *inv_freq, const int32_t *pos, float sign, int round_bf16, di_threadpool *pool) {
    (void)x, (void)n_rows, (void)n_heads, (void)dim, (void)n_rot, (void)inv_freq, (void)pos, (void)sign,
        (void)round_bf16, (void)pool;
    missing(be, "rope_rows");
}

static void cuda_clamped_glu(const di_backend *be, float *gate, float *up, int64_t n_rows, int64_t n, float limit,
                             int round_bf16, const float *row_w, di_threadpool *pool) {
    (void)gate, (void)up, (void)n_rows, (void)n, (void)limit, (void)round_bf16, (void)row_w, (void)pool;
    missing(be, "clamped_glu");
}

static void cuda_compress_pool(const di_backend *be, const di_compress_pool_args *a, di_threadpool *pool) {
    (void)a, (void)pool;
    missing(be, "compress_pool");
}

static void cuda_ds_route(const di_backend *be, const di_route_args *a, di_threadpool *pool) {
    (void)a, (void)pool;
    missing(be, "ds_route");
}

static void cuda_moe_sum(const di_backend *be, int64_t n_rows, int32_t K, int32_t D, const float *ysel,
                         const float *selw, const int32_t *plen, const float *partial, const float *shared, float *y,
                         di_threadpool *pool) {
    (void)n_rows, (void)K, (void)D, (void)ysel, (void)selw, (void)plen, (void)partial, (void)shared, (void)y,
        (void)pool;
    missing(be, "moe_sum");
}

static void cuda_round_rows(const di_backend *be, di_round_kind kind, float *x, int64_t n_rows, int64_t ldx,
                            int64_t n, di_threadpool *pool) {
    (void)kind, (void)x, (void)n_rows, (void)ldx, (void)n, (void)pool;
    missing(be, "round_rows");
}

static const di_backend_ops CUDA_OPS = {
    .name = "cuda",
    .release = cuda_release,
    .describe = cuda_describe,
    .check = cuda_check,
    .supports = cuda_supports,
    .dequant = cuda_dequant,
    .linear_scratch_floats = cuda_linear_scratch,
    .linear = cuda_linear,
    .embed_norm = cuda_embed_norm,
    .rope_store = cuda_rope_store,
    .add_norm = cuda_add_norm,
    .glu = cuda_glu,
    .gather_norm = cuda_gather_norm,
    .softcap = cuda_softcap,
    .attention_scratch_floats = cuda_attention_scratch,
    .attention = cuda_attention,
    .moe_route = cuda_moe_route,
    .moe_expert = cuda_moe_expert,
    .scaled_linear_scratch_floats = cuda_scaled_linear_scratch,
    .scaled_linear = cuda_scaled_linear,
    .scaled_rows = cuda_scaled_rows,
    .scaled_dot_rows = cuda_scaled_dot_rows,
    .sparse_attention_scratch_floats = cuda_sparse_attention_scratch,
    .sparse_attention = cuda_sparse_attention,
    .index_scores = cuda_index_scores,
    .mhc_pre = cuda_mhc_pre,
    .mhc_post = cuda_mhc_post,
    .mhc_head = cuda_mhc_head,
    .rms_norm = cuda_rms_norm,
    .rope_rows = cuda_rope_rows,
    .clamped_glu = cuda_clamped_glu,
    .compress_pool = cuda_compress_pool,
    .ds_route = cuda_ds_route,
    .moe_sum = cuda_moe_sum,
    .round_rows = cuda_round_rows,
    .copy = cuda_copy,
    .zero = cuda_zero,
    .buf_alloc = cuda_buf_alloc,
    .buf_free = cuda_buf_free,
    .upload = cuda_upload,
    .download = cuda_download,
    .upload_weight = cuda_upload_weight,
    .release_weight = cuda_release_weight,
};

/* The opener di_device_check calls: the device's context, or why there is none. */
di_status di_backend_cuda_open(int index, di_backend *out, di_error *err) {
    memset(out, 0, sizeof *out);
    cuda_state *st = calloc(1, sizeof *st);
    if (!st) return di_error_set(err, DI_ERR_NOMEM, "cuda backend: out of memory");
    di_status s = di_cuda_ctx_create(index, &st->ctx, err);
    if (s != DI_OK) {
        free(st);
        return s;
    }
    out->ops = &CUDA_OPS;
    out->state = st;
    return DI_OK;
}

const di_backend_ops *di_backend_cuda_ops(void) { return &CUDA_OPS; }

void di_backend_cuda_register(void) { di_backend_register_cuda(di_backend_cuda_open); }
