/* Causal attention over the paged f16 KV cache (decode and prefill), GQA,
 * sliding windows, split-K with a fixed split.
 *
 * Phase 1, one warp per (row, query head, segment): segment g holds the
 * row's keys among positions [g S, g S + S) (S = DI_CUDA_ATTN_SPLIT_KEYS),
 * visited in steps of 32 aligned positions; in a step lane t scores key
 * 32k + t (dot over head_dim in order, then * scale), and the running
 * (max m, sum l, accumulator acc) is updated once:
 *   m' = max(m, warp max);  p_t = e^(s_t - m');  c = e^(m - m')
 *   l' = l c + warp_sum(p);  acc'[d] = acc[d] c + sum_t p_t v_t[d] (t in order)
 * with the CPU's exp (di_dev_exp_nonpos); lane i owns dims i, i + 32, ...
 * The segment's (m, l, acc) go to the workspace.
 * Phase 2, one warp per (row, head): the row's segments g0..g1 are merged
 * in order, M = max m_g, L = sum l_g e^(m_g - M), acc = sum acc_g
 * e^(m_g - M), out = acc * (1 / L).
 * The split points are fixed positions, so which keys share a segment and
 * the order of every sum depend on the row's own first and last position
 * only: nothing is shared between rows or heads, and prefill, decode and
 * any batch give a row the same bits. Rows of one sequence read the same
 * K/V blocks through L2; a tiled (flash-style) prefill that shares them in
 * shared memory with the same per-row arithmetic is a next step
 * (docs/CUDA.md). */
#include "kernels/cuda/cuda_common.cuh"

#include <cuda_fp16.h>

#define ATTN_WARPS 4 /* query heads per block (of one row) */
#define SPLIT DI_CUDA_ATTN_SPLIT_KEYS

__device__ __forceinline__ float h2f(uint16_t h) { return __half2float(__ushort_as_half(h)); }

/* The row's sequence and positions, or false when they are out of range. */
__device__ __forceinline__ bool row_ok(const int32_t *row_seq, const int32_t *pos_of, int32_t r, int32_t n_seqs,
                                       int32_t max_blocks, int32_t bs, int32_t n_pos, int32_t *seq, int32_t *pos) {
    *seq = row_seq[r];
    *pos = pos_of[r];
    return *seq >= 0 && *seq < n_seqs && *pos >= 0 && *pos < n_pos && (int64_t)*pos < (int64_t)max_blocks * bs;
}

__device__ __forceinline__ int32_t first_key(int32_t pos, int32_t window) {
    return window > 0 && pos >= window ? pos - window + 1 : 0;
}

/* Workspace of (row, head, segment): m, l, then acc (HD). */
template <int HD>
__device__ __forceinline__ float *part_at(float *ws, int32_t r, int32_t h, int32_t g, int32_t n_heads, int32_t n_segs) {
    return ws + (((int64_t)r * n_heads + h) * n_segs + g) * (HD + 2);
}

template <int DPL> /* head_dim / 32 */
__global__ void __launch_bounds__(ATTN_WARPS *DI_CUDA_WARP)
    attn_split_kernel(const float *__restrict__ q, int32_t n_heads, float scale, const uint16_t *__restrict__ kc,
                      const uint16_t *__restrict__ vc, int32_t n_blocks, int32_t bs, int32_t n_kv_heads,
                      const int32_t *__restrict__ tables, int32_t n_seqs, int32_t max_blocks,
                      const int32_t *__restrict__ row_seq, const int32_t *__restrict__ pos_of, int32_t window,
                      int32_t n_pos, int32_t n_segs, float *__restrict__ ws, unsigned int *flags) {
    constexpr int HD = DPL * DI_CUDA_WARP;
    __shared__ float qs[ATTN_WARPS][HD];
    const int lane = threadIdx.x % DI_CUDA_WARP, warp = threadIdx.x / DI_CUDA_WARP;
    const int32_t r = blockIdx.x, h = blockIdx.y * ATTN_WARPS + warp, g = blockIdx.z;
    if (h >= n_heads) return; /* the whole warp: no later block-wide sync */
    int32_t seq, pos;
    bool bad = !row_ok(row_seq, pos_of, r, n_seqs, max_blocks, bs, n_pos, &seq, &pos);
    const int32_t first = bad ? 0 : first_key(pos, window);
    const int32_t lo = first > g * SPLIT ? first : g * SPLIT, hi = pos < g * SPLIT + SPLIT - 1 ? pos : g * SPLIT + SPLIT - 1;
    if (!bad && lo > hi) return; /* not one of this row's segments: phase 2 never reads it */
    float *part = part_at<HD>(ws, r, h, bad ? 0 : g, n_heads, n_segs);
    if (bad) {
        if (g == 0) { /* phase 2 writes the NaN row */
            if (lane == 0) atomicOr(flags, DI_CUDA_FLAG_BAD_BLOCK); /* an error flag, not a reduction */
        }
        return;
    }
    const int32_t kvh = h / (n_heads / n_kv_heads);
    const float *qr = q + ((int64_t)r * n_heads + h) * HD;
    for (int d = lane; d < HD; d += DI_CUDA_WARP) qs[warp][d] = qr[d];
    __syncwarp();
    const int32_t *table = tables + (int64_t)seq * max_blocks;
    const int64_t tok_stride = (int64_t)n_kv_heads * HD; /* halves per token slot */

    float m = -INFINITY, l = 0.0f, acc[DPL];
#pragma unroll
    for (int i = 0; i < DPL; i++) acc[i] = 0.0f;
    for (int32_t k0 = lo / DI_CUDA_WARP * DI_CUDA_WARP; k0 <= hi; k0 += DI_CUDA_WARP) {
        const int32_t key = k0 + lane;
        const bool valid = key >= lo && key <= hi;
        int64_t slot = -1; /* this lane's key's slot */
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
        const int32_t t0 = lo > k0 ? lo - k0 : 0, t1 = hi - k0 < DI_CUDA_WARP - 1 ? hi - k0 : DI_CUDA_WARP - 1;
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
        l = __int_as_float(0x7fc00000); /* phase 2 then writes NaN */
    }
    if (lane == 0) {
        part[0] = m;
        part[1] = l;
    }
#pragma unroll
    for (int i = 0; i < DPL; i++) part[2 + lane + DI_CUDA_WARP * i] = acc[i];
}

/* Phase 2: merge the row's segments in order. */
template <int DPL>
__global__ void __launch_bounds__(ATTN_WARPS *DI_CUDA_WARP)
    attn_merge_kernel(int32_t n_heads, int32_t bs, int32_t n_seqs, int32_t max_blocks,
                      const int32_t *__restrict__ row_seq, const int32_t *__restrict__ pos_of, int32_t window,
                      int32_t n_pos, int32_t n_segs, const float *__restrict__ ws, float *__restrict__ out) {
    constexpr int HD = DPL * DI_CUDA_WARP;
    const int lane = threadIdx.x % DI_CUDA_WARP, warp = threadIdx.x / DI_CUDA_WARP;
    const int32_t r = blockIdx.x, h = blockIdx.y * ATTN_WARPS + warp;
    if (h >= n_heads) return;
    float *o = out + ((int64_t)r * n_heads + h) * HD;
    int32_t seq, pos;
    if (!row_ok(row_seq, pos_of, r, n_seqs, max_blocks, bs, n_pos, &seq, &pos)) {
        for (int d = lane; d < HD; d += DI_CUDA_WARP) o[d] = __int_as_float(0x7fc00000);
        return;
    }
    const int32_t g0 = first_key(pos, window) / SPLIT, g1 = pos / SPLIT;
    const float *ws_row = part_at<HD>((float *)ws, r, h, 0, n_heads, n_segs);
    float mx = -INFINITY;
    for (int32_t g = g0; g <= g1; g++) mx = fmaxf(mx, ws_row[(int64_t)g * (HD + 2)]);
    float l = 0.0f, acc[DPL];
#pragma unroll
    for (int i = 0; i < DPL; i++) acc[i] = 0.0f;
    for (int32_t g = g0; g <= g1; g++) {
        const float *part = ws_row + (int64_t)g * (HD + 2);
        const float w = di_dev_exp_nonpos(__fsub_rn(part[0], mx)); /* 1 when the row has one segment */
        l = fmaf(part[1], w, l);
#pragma unroll
        for (int i = 0; i < DPL; i++) acc[i] = fmaf(part[2 + lane + DI_CUDA_WARP * i], w, acc[i]);
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
        kv->n_blocks <= 0 || kv->block_size <= 0 || a->n_seqs <= 0 || a->max_blocks <= 0 || a->window < 0 ||
        a->n_pos < 0)
        return di_cuda_fail(err, DI_ERR_INVALID_ARG,
                            "di_cuda_attention: bad shape (rows %d, heads %d/%d, blocks %d of %d, seqs %d x %d, window %d)",
                            (int)a->n_rows, (int)a->n_heads, (int)kv->n_kv_heads, (int)kv->n_blocks, (int)kv->block_size,
                            (int)a->n_seqs, (int)a->max_blocks, (int)a->window);
    if (a->n_rows == 0) return DI_OK;
    if (!a->q || !a->out || !kv->k || !kv->v || !a->block_tables || !a->row_seq || !a->pos)
        return di_cuda_fail(err, DI_ERR_INVALID_ARG, "di_cuda_attention: NULL pointer");
    if (((uintptr_t)kv->k | (uintptr_t)kv->v) % 16)
        return di_cuda_fail(err, DI_ERR_INVALID_ARG, "di_cuda_attention: the cache must be 16-byte aligned");
    const int64_t table_pos = (int64_t)a->max_blocks * kv->block_size;
    const int64_t n_pos64 = a->n_pos > 0 && a->n_pos < table_pos ? a->n_pos : table_pos;
    if (n_pos64 > 0x7fffffff) return di_cuda_fail(err, DI_ERR_RANGE, "di_cuda_attention: block tables too long");
    const int32_t n_pos = (int32_t)n_pos64, n_segs = (int32_t)((n_pos64 + SPLIT - 1) / SPLIT);
    const uint64_t ws_bytes = (uint64_t)a->n_rows * a->n_heads * n_segs * (hd + 2) * sizeof(float);
    if (n_segs > 65535) return di_cuda_fail(err, DI_ERR_RANGE, "di_cuda_attention: %d segments", (int)n_segs);
    di_status s = di_cuda_check(cudaSetDevice(c->device), "cudaSetDevice", err);
    if (s) return s;
    void *ws = NULL;
    if ((s = di_cuda_scratch(c, (size_t)ws_bytes, &ws, err))) return s;
    const unsigned head_blocks = (unsigned)((a->n_heads + ATTN_WARPS - 1) / ATTN_WARPS);
    dim3 grid1((unsigned)a->n_rows, head_blocks, (unsigned)n_segs), grid2((unsigned)a->n_rows, head_blocks);
    dim3 block(ATTN_WARPS * DI_CUDA_WARP);
#define LAUNCH(DPL)                                                                                                     do {                                                                                                                    attn_split_kernel<DPL><<<grid1, block, 0, c->stream>>>(                                                                 a->q, a->n_heads, a->scale, kv->k, kv->v, kv->n_blocks, kv->block_size, kv->n_kv_heads, a->block_tables,             a->n_seqs, a->max_blocks, a->row_seq, a->pos, a->window, n_pos, n_segs, (float *)ws, c->flags);                attn_merge_kernel<DPL><<<grid2, block, 0, c->stream>>>(a->n_heads, kv->block_size, a->n_seqs,                                                                               a->max_blocks, a->row_seq, a->pos, a->window, n_pos,                                                                 n_segs, (const float *)ws, a->out);                     } while (0)
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
