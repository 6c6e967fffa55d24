/* Causal attention over the paged f16 KV cache (decode and prefill), GQA,
 * sliding windows.
 *
 * One warp per (row, query head). The row's keys first .. pos are visited
 * in steps of 32 aligned positions (step k covers 32k .. 32k + 31, so a
 * row's steps depend on its own first and pos only); in a step lane t
 * scores key 32k + t (dot over head_dim in order, then * scale), and the
 * running (max m, sum l, accumulator acc) is updated once:
 *   m' = max(m, warp max);  p_t = e^(s_t - m');  c = e^(m - m')
 *   l' = l c + warp_sum(p);  acc'[d] = acc[d] c + sum_t p_t v_t[d] (t in order)
 * with the CPU's exp (di_dev_exp_nonpos) and out = acc * (1 / l). Lane i
 * owns dims i, i + 32, ... of acc. Nothing is shared between rows or
 * heads, no split over the keys: a row's output depends on its q, its
 * keys and values, and nothing else, so prefill and decode and any batch
 * give it the same bits. Rows of one sequence read the same K/V blocks
 * through L2; a tiled (flash-style) prefill that shares them in shared
 * memory with the same per-row arithmetic is the next step (docs/CUDA.md). */
#include "kernels/cuda/cuda_common.cuh"

#include <cuda_fp16.h>

#define ATTN_WARPS 4 /* query heads per block (of one row) */
#define MAX_DIMS_PER_LANE (DI_CUDA_ATTN_MAX_HEAD_DIM / DI_CUDA_WARP)

__device__ __forceinline__ float h2f(uint16_t h) { return __half2float(__ushort_as_half(h)); }

template <int DPL> /* head_dim / 32 */
__global__ void __launch_bounds__(ATTN_WARPS *DI_CUDA_WARP)
    attn_kernel(const float *__restrict__ q, int32_t n_heads, float scale, const uint16_t *__restrict__ kc,
                const uint16_t *__restrict__ vc, int32_t n_blocks, int32_t bs, int32_t n_kv_heads,
                const int32_t *__restrict__ tables, int32_t n_seqs, int32_t max_blocks,
                const int32_t *__restrict__ row_seq, const int32_t *__restrict__ pos_of, int32_t window,
                float *__restrict__ out, unsigned int *flags) {
    constexpr int HD = DPL * DI_CUDA_WARP;
    __shared__ float qs[ATTN_WARPS][HD];
    const int lane = threadIdx.x % DI_CUDA_WARP, warp = threadIdx.x / DI_CUDA_WARP;
    const int32_t r = blockIdx.x, h = blockIdx.y * ATTN_WARPS + warp;
    if (h >= n_heads) return; /* the whole warp: no later block-wide sync */
    const int32_t kvh = h / (n_heads / n_kv_heads);
    float *o = out + ((int64_t)r * n_heads + h) * HD;
    const float *qr = q + ((int64_t)r * n_heads + h) * HD;
    for (int d = lane; d < HD; d += DI_CUDA_WARP) qs[warp][d] = qr[d];
    __syncwarp();

    const int32_t seq = row_seq[r], pos = pos_of[r];
    bool bad = seq < 0 || seq >= n_seqs || pos < 0 || (int64_t)pos >= (int64_t)max_blocks * bs;
    const int32_t first = window > 0 && pos >= window ? pos - window + 1 : 0;
    const int32_t *table = tables + (int64_t)(bad ? 0 : seq) * max_blocks;
    const int64_t tok_stride = (int64_t)n_kv_heads * HD; /* halves per token slot */

    float m = -INFINITY, l = 0.0f, acc[DPL];
#pragma unroll
    for (int i = 0; i < DPL; i++) acc[i] = 0.0f;
    for (int32_t k0 = first / DI_CUDA_WARP * DI_CUDA_WARP; !bad && k0 <= pos; k0 += DI_CUDA_WARP) {
        const int32_t key = k0 + lane;
        const bool valid = key >= first && key <= pos;
        /* this lane's key's slot, or -1 */
        int64_t slot = -1;
        if (valid) {
            int32_t b = table[key / bs];
            if (b < 0 || b >= n_blocks) bad = true;
            else slot = (int64_t)b * bs + key % bs;
        }
        if (__any_sync(DI_CUDA_FULL_MASK, bad)) {
            bad = true;
            break;
        }
        float s = -INFINITY;
        if (valid) {
            const uint16_t *kr = kc + slot * tok_stride + (int64_t)kvh * HD;
            float dot = 0.0f;
            for (int d = 0; d < HD; d += 8) {
                uint4 u = *(const uint4 *)(kr + d); /* 8 halves: rows are 16-byte aligned (HD % 32 == 0) */
                const uint16_t *hv = (const uint16_t *)&u;
#pragma unroll
                for (int j = 0; j < 8; j++) dot = fmaf(qs[warp][d + j], h2f(hv[j]), dot);
            }
            s = __fmul_rn(dot, scale);
        }
        const float m_new = fmaxf(m, di_dev_warp_max(s));
        const float corr = di_dev_exp_nonpos(__fsub_rn(m, m_new)); /* 0 on the first step (m = -inf) */
        const float p = valid ? di_dev_exp_nonpos(__fsub_rn(s, m_new)) : 0.0f;
        l = __fadd_rn(__fmul_rn(l, corr), di_dev_warp_sum(p));
#pragma unroll
        for (int i = 0; i < DPL; i++) acc[i] = __fmul_rn(acc[i], corr);
        const int32_t t0 = first > k0 ? first - k0 : 0, t1 = pos - k0 < DI_CUDA_WARP - 1 ? pos - k0 : DI_CUDA_WARP - 1;
        for (int32_t t = t0; t <= t1; t++) { /* only valid keys: an unwritten V slot may hold NaN */
            const float pt = __shfl_sync(DI_CUDA_FULL_MASK, p, t);
            const int64_t st = __shfl_sync(DI_CUDA_FULL_MASK, slot, t);
            const uint16_t *vr = vc + st * tok_stride + (int64_t)kvh * HD;
#pragma unroll
            for (int i = 0; i < DPL; i++) acc[i] = fmaf(pt, h2f(vr[lane + DI_CUDA_WARP * i]), acc[i]);
        }
        m = m_new;
    }
    if (bad) {
        if (lane == 0) atomicOr(flags, DI_CUDA_FLAG_BAD_BLOCK); /* an error flag, not a reduction */
        for (int d = lane; d < HD; d += DI_CUDA_WARP) o[d] = __int_as_float(0x7fc00000);
        return;
    }
    const float inv = __fdiv_rn(1.0f, l);
#pragma unroll
    for (int i = 0; i < DPL; i++) o[lane + DI_CUDA_WARP * i] = __fmul_rn(acc[i], inv);
}

extern "C" di_status di_cuda_attention(di_cuda_ctx *c, const di_cuda_attn_args *a, di_error *err) {
    if (!c || !a || !a->kv) return di_cuda_fail(err, DI_ERR_INVALID_ARG, "di_cuda_attention: NULL argument");
    const di_cuda_kv_layer *kv = a->kv;
    const int32_t hd = kv->head_dim;
    if (hd <= 0 || hd % DI_CUDA_WARP || hd > DI_CUDA_ATTN_MAX_HEAD_DIM)
        return di_cuda_fail(err, DI_ERR_UNSUPPORTED,
                            "di_cuda_attention: head_dim %d is not a multiple of 32 up to %d", (int)hd,
                            DI_CUDA_ATTN_MAX_HEAD_DIM);
    if (a->n_rows < 0 || a->n_heads <= 0 || kv->n_kv_heads <= 0 || a->n_heads % kv->n_kv_heads ||
        kv->n_blocks <= 0 || kv->block_size <= 0 || a->n_seqs <= 0 || a->max_blocks <= 0 || a->window < 0)
        return di_cuda_fail(err, DI_ERR_INVALID_ARG,
                            "di_cuda_attention: bad shape (rows %d, heads %d/%d, blocks %d of %d, seqs %d x %d, window %d)",
                            (int)a->n_rows, (int)a->n_heads, (int)kv->n_kv_heads, (int)kv->n_blocks, (int)kv->block_size,
                            (int)a->n_seqs, (int)a->max_blocks, (int)a->window);
    if (a->n_rows == 0) return DI_OK;
    if (!a->q || !a->out || !kv->k || !kv->v || !a->block_tables || !a->row_seq || !a->pos)
        return di_cuda_fail(err, DI_ERR_INVALID_ARG, "di_cuda_attention: NULL pointer");
    if (((uintptr_t)kv->k | (uintptr_t)kv->v) % 16)
        return di_cuda_fail(err, DI_ERR_INVALID_ARG, "di_cuda_attention: the cache must be 16-byte aligned");
    di_status s = di_cuda_check(cudaSetDevice(c->device), "cudaSetDevice", err);
    if (s) return s;
    dim3 grid((unsigned)a->n_rows, (unsigned)((a->n_heads + ATTN_WARPS - 1) / ATTN_WARPS)), block(ATTN_WARPS * DI_CUDA_WARP);
#define LAUNCH(DPL)                                                                                                 \
    attn_kernel<DPL><<<grid, block, 0, c->stream>>>(a->q, a->n_heads, a->scale, kv->k, kv->v, kv->n_blocks,         \
                                                     kv->block_size, kv->n_kv_heads, a->block_tables, a->n_seqs,   \
                                                     a->max_blocks, a->row_seq, a->pos, a->window, a->out, c->flags)
    switch (hd / DI_CUDA_WARP) {
    case 1: LAUNCH(1); break;
    case 2: LAUNCH(2); break;
    case 3: LAUNCH(3); break;
    case 4: LAUNCH(4); break;
    case 5: LAUNCH(5); break;
    case 6: LAUNCH(6); break;
    case 7: LAUNCH(7); break;
    case 8: LAUNCH(8); break;
    default: break;
    }
#undef LAUNCH
    return di_cuda_launched("di_cuda_attention", err);
}
