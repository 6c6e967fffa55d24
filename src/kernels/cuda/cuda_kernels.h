/* CUDA kernels for the model forwards: a self-contained, C-callable library
 * (libdeepinfer_cuda.a, built when CMake finds CUDA: -DDI_CUDA=ON|OFF|AUTO)
 * that a backend operations table wraps; docs/CUDA.md says how.
 *
 * Contract, as the CPU kernels' (kernels/cpu/kernels.h, DESIGN.md section 3):
 *  - Batch-invariant: a row's result depends only on that row's inputs.
 *    Every output (row r, output o) of the matmul is reduced in ONE fixed
 *    order whatever the batch size or the kernel (GEMV or tiled GEMM):
 *    lane l of a warp sums, with fmaf in element order, the 32-element
 *    chunks c = l, l + 32, l + 64, ... of the row, then the 32 lane sums
 *    are combined by the xor butterfly 16, 8, 4, 2, 1. No atomics, no
 *    split-K. Attention runs one warp per (row, query head) over the keys
 *    in order (one online-softmax step per 32 keys).
 *  - Exact where the arithmetic allows: dequantization (and so the
 *    embedding gather), RoPE (angles computed on the host by
 *    di_rope_angles and uploaded), SwiGLU/GeGLU (the CPU's exp polynomial),
 *    softcap and the f16 KV store give the CPU's bits; the sources are
 *    compiled with -fmad=false so no multiply-add is fused behind our back,
 *    and every intended fma is an explicit fmaf. Reductions (matmul dots,
 *    RMSNorm's sum of squares, attention) differ from the CPU only by sum
 *    order; tests/kernels/test_cuda.c states each bound.
 *
 * Memory: every pointer argument of a kernel is DEVICE memory (di_cuda_alloc)
 * unless its comment says host. Kernels are queued on the context's stream
 * and return once queued: argument errors and launch errors come back from
 * the call itself, errors while running from the next di_cuda_sync (or any
 * later call), as a di_status with the CUDA message. Nothing here exits or
 * aborts. A context is used by one host thread at a time.
 *
 * Matrix convention (as the CPU's): W is (n_out, n_in) row-major, rows of
 * di_dtype_row_bytes(dtype, n_in) bytes in GGUF block layout
 * (tensor/quant.h); y[r][o] = sum_i W[o][i] * x[r][i]. */
#ifndef DI_KERNELS_CUDA_CUDA_KERNELS_H
#define DI_KERNELS_CUDA_CUDA_KERNELS_H

#include "deepinfer.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "tensor/dtype.h" /* a C header without its own extern "C" */

/* ---- devices, memory, streams ------------------------------------------- */

typedef struct di_cuda_ctx di_cuda_ctx; /* one device and one stream */

/* Number of CUDA devices this process can use. With no driver or no GPU:
 * *n = 0 and DI_ERR_UNSUPPORTED with the runtime's reason (so a caller can
 * print why it skips). Never starts work on a device. */
di_status di_cuda_device_count(int *n, di_error *err);

/* Opens device `device` (0-based) with a fresh non-blocking stream. The
 * caller frees *out with di_cuda_ctx_free. */
di_status di_cuda_ctx_create(int device, di_cuda_ctx **out, di_error *err);
void di_cuda_ctx_free(di_cuda_ctx *c); /* NULL is a no-op; waits for the stream first */

/* "NVIDIA H200, sm_90, 132 SMs, 139.8 GiB, driver 13.0, runtime 13.0" into
 * buf (n bytes, always terminated). */
void di_cuda_ctx_describe(const di_cuda_ctx *c, char *buf, size_t n);

/* Device memory. di_cuda_free(NULL) is a no-op. */
di_status di_cuda_alloc(di_cuda_ctx *c, size_t bytes, void **dptr, di_error *err);
void di_cuda_free(di_cuda_ctx *c, void *dptr);
/* Synchronous copies: when they return, host memory may be reused or read. */
di_status di_cuda_upload(di_cuda_ctx *c, void *dst, const void *host_src, size_t bytes, di_error *err);
di_status di_cuda_download(di_cuda_ctx *c, void *host_dst, const void *src, size_t bytes, di_error *err);
di_status di_cuda_memset(di_cuda_ctx *c, void *dst, int byte, size_t bytes, di_error *err);
/* Device -> device, queued on the stream (ordered with the kernels). */
di_status di_cuda_copy(di_cuda_ctx *c, void *dst, const void *src, size_t bytes, di_error *err);
/* Waits for every queued kernel; reports the first error one of them hit. */
di_status di_cuda_sync(di_cuda_ctx *c, di_error *err);

/* True when the matmul, dequant and embedding kernels take this weight
 * dtype: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q8_0, Q4_K, Q6_K. */
int di_cuda_supports_dtype(di_dtype t);

/* ---- weights ---------------------------------------------------------- */

/* Rows of a weight matrix -> f32: out (n_rows, n) from w (n_rows rows of
 * row_bytes). Bit-identical to the dtype trait's to_float. */
di_status di_cuda_dequant(di_cuda_ctx *c, di_dtype dtype, const void *w, uint64_t row_bytes, int64_t n_rows,
                          int64_t n, float *out, di_error *err);

/* The device dequantizers' source compiled for the host: row (n elements,
 * host memory) -> out (n floats). Needs no GPU; lets a machine without one
 * check the kernels' block index math against the CPU (test_cuda does).
 * Same dtypes and checks as di_cuda_dequant. */
di_status di_cuda_host_dequant(di_dtype dtype, const void *row, int64_t n, float *out, di_error *err);

/* The matmul's fixed reduction order run on the host (the device
 * dequantizers' source, fmaf, the butterfly emulated): y (n_out) for one
 * activation row x (n_in), host memory. di_cuda_matmul must give these
 * bits for every row of every batch: test_cuda checks that on the device,
 * and the host twin against di_matmul_ref's bound without one. */
di_status di_cuda_host_matmul_row(di_dtype dtype, const void *w, uint64_t row_bytes, const float *x, int64_t n_in,
                                  int64_t n_out, float *y, di_error *err);

/* Embedding gather: out[r] = dequant(table row ids[r]); ids (n_ids) on the
 * device, each checked against n_vocab on the device (a bad id writes NaN
 * rows and is reported by di_cuda_sync as DI_ERR_RANGE). */
di_status di_cuda_embed(di_cuda_ctx *c, di_dtype dtype, const void *table, uint64_t row_bytes, int64_t n_vocab,
                        const int32_t *ids, int64_t n_ids, int64_t n_embd, float *out, di_error *err);

/* Which matmul kernel runs. AUTO picks by n_rows; the choice never changes
 * a bit of the result (see the contract above), only the speed. */
typedef enum di_cuda_mm_path {
    DI_CUDA_MM_AUTO = 0,
    DI_CUDA_MM_GEMV, /* one activation row per block: decode */
    DI_CUDA_MM_GEMM, /* tiles of DI_CUDA_GEMM_ROWS rows sharing each dequantized weight chunk: prefill */
} di_cuda_mm_path;

#define DI_CUDA_GEMM_ROWS 8     /* activation rows per GEMM tile */
#define DI_CUDA_GEMV_MAX_ROWS 2 /* AUTO: GEMV up to this many rows */

typedef struct di_cuda_matmul_args {
    di_dtype dtype;
    const void *w;      /* (n_out, n_in) rows of row_bytes */
    uint64_t row_bytes;
    const float *x;     /* (n_rows, ldx) */
    int64_t ldx;
    float *y;           /* (n_rows, ldy) */
    int64_t ldy;
    int64_t n_rows, n_in, n_out;
    di_cuda_mm_path path;
} di_cuda_matmul_args;

di_status di_cuda_matmul(di_cuda_ctx *c, const di_cuda_matmul_args *a, di_error *err);

/* ---- per-row and elementwise ops --------------------------------------- */

/* out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w; x, out (n_rows, n), w (n);
 * out may alias x. Sum of squares in double, fixed tree. */
di_status di_cuda_rmsnorm(di_cuda_ctx *c, const float *x, const float *w, float *out, int64_t n_rows, int64_t n,
                          float eps, di_error *err);

/* RoPE in place on x (n_rows, n_heads * head_dim), first n_rot dims of
 * every head; cs (n_rows, n_rot): each row's cos then sin of its n_rot / 2
 * angles, as di_rope_angles fills them on the host (so the angles are the
 * CPU's bits). neox as di_rope. */
di_status di_cuda_rope(di_cuda_ctx *c, float *x, const float *cs, int64_t n_rows, int32_t n_heads,
                       int32_t head_dim, int32_t n_rot, int neox, di_error *err);

/* gate[i] = silu(gate[i]) * up[i] / gelu_tanh(gate[i]) * up[i]; (n). */
di_status di_cuda_swiglu(di_cuda_ctx *c, float *gate, const float *up, int64_t n, di_error *err);
di_status di_cuda_geglu(di_cuda_ctx *c, float *gate, const float *up, int64_t n, di_error *err);

/* x[i] = cap * tanh(x[i] / cap) in place (final logit soft-capping); cap > 0. */
di_status di_cuda_softcap(di_cuda_ctx *c, float *x, int64_t n, float cap, di_error *err);

/* x[i] += y[i] (the residual adds); (n). */
di_status di_cuda_add(di_cuda_ctx *c, float *x, const float *y, int64_t n, di_error *err);

/* x[i] *= s in place (Gemma's embedding scale sqrt(n_embd)); (n). */
di_status di_cuda_scale(di_cuda_ctx *c, float *x, int64_t n, float s, di_error *err);

/* out[j] = x[rows[j]] for j < n_idx: the rows that want logits, before the
 * final norm; x (n_rows, n), rows (n_idx) device ints, checked on the
 * device against n_rows (a bad one writes NaN, reported by di_cuda_sync as
 * DI_ERR_RANGE), out (n_idx, n), not aliasing x. */
di_status di_cuda_gather_rows(di_cuda_ctx *c, const float *x, int64_t n_rows, int64_t n, const int32_t *rows,
                              int64_t n_idx, float *out, di_error *err);

/* ---- paged KV cache and attention --------------------------------------- */

/* One layer's cache, as the CPU's (kernels/cpu/attention.c): K and V each
 * (n_blocks, block_size, n_kv_heads, head_dim) f16. */
typedef struct di_cuda_kv_layer {
    uint16_t *k, *v;
    int32_t n_blocks, block_size, n_kv_heads, head_dim;
} di_cuda_kv_layer;

/* Stores rows k, v (n_rows, n_kv_heads * head_dim) f32 as f16 (round to
 * nearest even, as di_f32_to_f16) at slots[r] = block * block_size +
 * offset. Slots are checked on the device (a bad one is skipped and
 * reported by di_cuda_sync as DI_ERR_RANGE). */
di_status di_cuda_kv_store(di_cuda_ctx *c, const di_cuda_kv_layer *kv, const float *k, const float *v,
                           const int32_t *slots, int64_t n_rows, di_error *err);

typedef struct di_cuda_attn_args {
    const float *q;     /* (n_rows, n_heads * head_dim), after RoPE */
    int32_t n_rows, n_heads;
    float scale;        /* usually 1/sqrt(head_dim) */
    const di_cuda_kv_layer *kv;
    /* block tables, uploaded per step: (n_seqs, max_blocks) block ids;
     * row r belongs to sequence row_seq[r] and attends over positions
     * 0..pos[r] of it (causal prefill: consecutive rows with consecutive
     * pos; decode: one row per sequence). All device memory. */
    const int32_t *block_tables;
    int32_t n_seqs, max_blocks;
    const int32_t *row_seq; /* (n_rows) */
    const int32_t *pos;     /* (n_rows) */
    int32_t window;         /* 0, or the sliding window (keys pos-window+1..pos) */
    /* every pos[r] < n_pos (a row past it is an error); sizes the split
     * workspace. 0: max_blocks * block_size. */
    int32_t n_pos;
    float *out;             /* (n_rows, n_heads * head_dim) */
} di_cuda_attn_args;

/* Causal attention over the paged cache, GQA (query head h reads KV head
 * h / (n_heads / n_kv_heads)); head_dim a multiple of 32 up to
 * DI_CUDA_ATTN_MAX_HEAD_DIM. Split-K with a FIXED split: keys are cut at
 * multiples of DI_CUDA_ATTN_SPLIT_KEYS positions, each segment reduced by
 * one warp (online softmax per 32 keys), then the segments of a row are
 * merged in order; the split depends on nothing (not the batch, not the
 * context), so a row's bits do not either. Block ids, row_seq and pos are
 * checked on the device (a bad one writes NaN for that row and is
 * reported by di_cuda_sync as DI_ERR_RANGE). The context keeps the
 * workspace (n_rows x n_heads x ceil(n_pos / split) x (head_dim + 2)
 * floats), grown on demand. */
#define DI_CUDA_ATTN_MAX_HEAD_DIM 256
#define DI_CUDA_ATTN_SPLIT_KEYS 512
di_status di_cuda_attention(di_cuda_ctx *c, const di_cuda_attn_args *a, di_error *err);

#ifdef __cplusplus
}
#endif

#endif
