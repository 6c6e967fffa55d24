/* The backend seam: one table of the operations a model forward runs, so a
 * second backend (CUDA, docs/CUDA.md) slots in without touching the forward.
 *
 *   di_backend be;  di_backend_cpu(kernels, &be)       (backend_cpu.c)
 *   be.ops->linear(&be, parts, n_parts, scratch, pool)  every weight dtype
 *   be.ops->embed_norm / rope_store / attention / add_norm / glu / ...
 *   the DeepSeek V4 / V4.1 forwards' stages: scaled_linear (FP8 / MXFP4
 *   / plain), sparse_attention, index_scores, mhc_*, rms_norm, rope_rows,
 *   clamped_glu, compress_pool, ds_route, moe_sum, round_rows (their
 *   section below; CPU: backend_cpu_dsv4*.c, backend_cpu_dsv41_round.c)
 *
 * The operations are shaped like the forward's stages, not like single
 * kernels: each takes a whole batch (n_rows rows) and does every fused step
 * of its stage, so a device backend issues one launch (or a few) per stage
 * and the CPU backend keeps its one pool dispatch per stage (same threads,
 * same bits, same cost as before the seam: backend_cpu.c runs the existing
 * kernels in their existing order).
 *
 * Contract, as the CPU kernels' (kernels/cpu/kernels.h):
 *  - batch-invariant: a row's result depends on that row only;
 *  - same bits per backend whatever the batch and thread count.
 *
 * Memory. The buffer ops at the end of the table (buf_alloc, buf_free,
 * upload, download, upload_weight, release_weight) give a forward memory
 * the backend's ops work on: host memory for the CPU (64-byte aligned
 * malloc, memcpy, weights used where they are plus an interleaved copy
 * where its int8 table has a gemm for it, pack_x16.h), device memory for a
 * device backend. docs/CUDA.md ("the seam") lists which of the forwards'
 * buffers go through them. The operand structs di_matmul_args and
 * di_attn_args are the CPU kernels' plain-data ones.
 *
 * Ops return void: a backend that can fail at run time (a device) latches
 * its first error in its context and reports it from `check` after the
 * forward (the CPU backend cannot fail once its arguments are validated,
 * and the forwards validate them before the first op). Every op of a table
 * is set: tests/kernels/test_backend.c checks that no entry is NULL. */
#ifndef DI_KERNELS_BACKEND_H
#define DI_KERNELS_BACKEND_H

#include "base/status.h"
#include "base/threadpool.h"
#include "kernels/cpu/kernels.h"
#include "tensor/dtype.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct di_backend di_backend;

/* One RoPE frequency table (a model has one, Gemma 3 a second for its
 * local layers). inv_freq drives the exact kernels (di_rope_angles); the
 * ggml numerics recompute the angles from theta_scale, freq_scale and the
 * optional factors as llama.cpp does (di_ggml_rope). */
typedef struct di_rope_table {
    const float *inv_freq;   /* (n_rot / 2) */
    float theta_scale;       /* powf(base, -2 / n_rot) */
    float freq_scale;        /* linear scaling, 1 = none */
    const float *factors;    /* (n_rot / 2) divisors (rope_freqs, LongRoPE), or NULL */
} di_rope_table;

/* A weight matrix as an operand: (n_out, n_in) rows of row_bytes. */
typedef struct di_backend_weight {
    di_dtype dtype;
    const void *data;
    uint64_t row_bytes;
    int64_t n_in, n_out;
    /* the backend's own layout of the same matrix, made by upload_weight
     * (the CPU's: pack_x16.h where its table has a gemm for it), or NULL */
    const void *packed;
    /* set by upload_weight: linear will not read data again (only
     * packed), so a loader may let its pages go (di_memory_release_hint) */
    int rows_unread;
} di_backend_weight;

/* embed_norm: x[r] = dequant(emb row tokens[r]) (* scale when scale != 0);
 * h[r] = rmsnorm(x[r], norm); and each row's RoPE angles (cos then sin,
 * n_rot floats) at pos[r] for rope[0] into cs[0] and, when rope[1] is set,
 * for rope[1] into cs[1] (the ggml numerics compute angles in rope_store
 * instead and leave cs unwritten). */
typedef struct di_embed_norm_args {
    const di_backend_weight *emb; /* (n_vocab, n_embd) */
    const int32_t *tokens, *pos;  /* (n_rows) */
    int64_t n_rows, n_embd;
    float scale;                  /* Gemma's sqrt(n_embd); 0 = none */
    const float *norm;            /* (n_embd) layer 0's attention norm */
    float eps;
    float *x, *h;                 /* (n_rows, n_embd) */
    int32_t n_rot;
    const di_rope_table *rope[2]; /* rope[1] NULL: one table */
    float *cs[2];                 /* (n_rows, n_rot) each */
} di_embed_norm_args;

/* rope_store: per row, q/k/v += their biases (when bq is set: qwen2), q
 * and k RMS-normalized per head (when q_norm is set: gemma3, qwen3), RoPE
 * on q and k (angles cs from embed_norm, or the table for ggml), then k
 * and v stored into the layer's paged cache at the row's position:
 * slot = row_blocks[r][pos / block_size] * block_size + pos % block_size. */
typedef struct di_rope_store_args {
    float *q, *k, *v;                 /* (n_rows, n_heads * head_dim), (n_rows, n_heads_kv * head_dim) x 2 */
    const int32_t *pos;               /* (n_rows) */
    int64_t n_rows;
    int32_t n_heads, n_heads_kv, head_dim, n_rot;
    int neox;                         /* 0: adjacent pairs, 1: halves */
    const float *bq, *bk, *bv;        /* (q_dim), (kv_dim) x 2, or all NULL */
    const float *q_norm, *k_norm;     /* (head_dim) each, or both NULL */
    float eps;
    const di_rope_table *rope;        /* this layer's table */
    const float *cs;                  /* (n_rows, n_rot) its angles from embed_norm */
    void *k_cache, *v_cache;          /* (n_blocks, block_size, n_heads_kv, head_dim) */
    di_dtype kv_dtype;                /* DI_DTYPE_F16 or DI_DTYPE_F32 */
    int32_t block_size;
    const int32_t *const *row_blocks; /* (n_rows) -> the row's block table, validated */
} di_rope_store_args;

typedef enum di_glu_kind {
    DI_GLU_SWIGLU = 0, /* gate = silu(gate) * up */
    DI_GLU_GEGLU,      /* gate = gelu_tanh(gate) * up (Gemma) */
} di_glu_kind;

/* moe_expert: one expert over the rows that chose it: xin[i] = x[rows[i]];
 * gate, up = xin G, xin U (one dispatch); gate = silu(gate) * up;
 * y = gate D; acc[rows[i]] += w[i] * y[i]. The caller runs the experts in
 * ascending id, so every row sums its experts in that order. */
typedef struct di_moe_expert_args {
    const float *x;                   /* (n_total, ldx) the FFN input */
    int64_t ldx, n_embd, n_ff;
    const int32_t *rows;              /* (n) rows of x, ascending */
    const float *w;                   /* (n) their weights for this expert */
    int64_t n;
    di_backend_weight gate, up, down; /* this expert's (n_ff, n_embd) x 2 and (n_embd, n_ff) */
    float *xin, *gate_buf, *up_buf, *y; /* (n, n_embd), (n, n_ff) x 2, (n, n_embd) scratch */
    float *acc;                       /* (n_total, n_embd) */
} di_moe_expert_args;

/* ---- DeepSeek V4 / V4.1 operands ---- */

/* A DeepSeek linear's weight as the checkpoint stores it (the family's
 * dsv4_linear, model/deepseek_v4_internal.h, is this type). */
typedef enum di_scaled_kind {
    DI_SCALED_PLAIN = 0, /* rows of dtype (F32 / F16 / BF16), di_matmul's */
    DI_SCALED_FP8,       /* e4m3 bytes, scale[(o + row_off) / block][i / block] */
    DI_SCALED_MXFP4,     /* HF split layout: (n_out, n_in/2) e2m1 pairs, (n_out, n_in/32) e8m0 */
} di_scaled_kind;

typedef struct di_scaled_weight {
    di_scaled_kind kind;
    di_dtype dtype;          /* PLAIN: the row dtype */
    const void *data;        /* (n_out, n_in) rows of row_bytes */
    uint64_t row_bytes;
    int64_t n_in, n_out;
    const float *scale;      /* FP8: (ceil(n_out/B), scale_cols) as f32 */
    int64_t scale_cols;
    int32_t block;           /* FP8 block edge B */
    int64_t row_off;         /* FP8: this view starts at row row_off of its scale grid */
    const uint8_t *mx_scale; /* MXFP4: (n_out, n_in / 32) e8m0 bytes */
} di_scaled_weight;

/* sparse_attention: for each row r and each of its H heads of q[r] (H, hd),
 * softmax over the keys keys[idx[r][t]], t < n_idx[r] (K = V rows of hd), of
 * q.k / sqrt(hd), with the head's sink logit in the denominator (it takes
 * mass, gives no value); out[r] (H, hd) the weighted sum of those rows. The
 * batch's distinct keys are in one table, so rows of a sequence share them
 * (the caller gathers them from its cache records). */
typedef struct di_sparse_attn_args {
    const float *q;        /* (n_rows, H*hd) */
    int64_t n_rows;
    int32_t n_heads, head_dim;
    const float *sink;     /* (H) */
    const float *keys;     /* (n_keys, hd) */
    const int32_t *idx;    /* (n_rows, ld_idx) key rows of each row, in the order it visits them */
    int64_t ld_idx;
    const int32_t *n_idx;  /* (n_rows) */
    float *out;            /* (n_rows, H*hd) */
} di_sparse_attn_args;

/* index_scores (the lightning indexer): score[r][t] = sum over heads h in
 * order of relu(iq[r]_h . keys[idx[r][t]]) * scale * w[r][h], t < n_idx[r]. */
typedef struct di_index_score_args {
    const float *iq;       /* (n_rows, IH*ihd) */
    const float *w;        /* (n_rows, IH) head weights */
    int64_t n_rows;
    int32_t n_heads, head_dim;
    float scale;
    const float *keys;     /* (n_keys, ihd) */
    const int32_t *idx;    /* (n_rows, ld_idx) */
    int64_t ld_idx;
    const int32_t *n_idx;  /* (n_rows) */
    float *score;          /* (n_rows, ld_score) */
    int64_t ld_score;
} di_index_score_args;

/* mhc_pre: the manifold-constrained hyper-connections before a sublayer,
 * per row r of the residual copies X[r] (N, D) and the mix projection
 * mix[r] ((2+N)*N) of the rows (by scaled_linear):
 *   DI_MHC_V4:      pre, post[r], comb[r] = the mixes' weights (sigmoid,
 *                   row softmax, Sinkhorn: columns, then iters - 1 times
 *                   rows and columns, each +eps); h[r] = sum_i pre_i X[r]_i
 *   DI_MHC_SHIFTED: h[r] = sum_i pre[r]_i X[r]_i with the carried pre (bf16
 *                   when round_bf16), then the weights of mix[r] * rsqrt(
 *                   mean X[r]^2 + rms_eps) into pre[r], post[r], comb[r]
 *                   (V4.1: the projection ran on the raw copies). */
typedef enum di_mhc_kind { DI_MHC_V4 = 0, DI_MHC_SHIFTED } di_mhc_kind;
typedef struct di_mhc_pre_args {
    di_mhc_kind kind;
    const float *X;            /* (n_rows, N, D) */
    const float *mix;          /* (n_rows, (2+N)*N) */
    const float *base, *scale; /* ((2+N)*N), (3) */
    int64_t n_rows;
    int32_t N, D, iters;       /* N <= 16 */
    float eps, rms_eps;
    int round_bf16;
    float *pre;                /* (n_rows, N): SHIFTED in/out; V4: unused, may be NULL */
    float *post, *comb, *h;    /* (n_rows, N), (n_rows, N, N), (n_rows, D) */
} di_mhc_pre_args;

/* compress_pool (V4's compressors): per group g, per channel d, out[g][d] =
 * sum over its n_slots[g] slots j of softmax_j(gate[g][j][d]) kv[g][j][d]
 * (gate is overwritten), then RMSNorm with norm (the square sum in double)
 * and the interleaved tail rotary (n_rot dims of the one dim-wide head)
 * at pos[g]. */
typedef struct di_compress_pool_args {
    const float *kv;          /* (n_groups, ld_slots, dim) */
    float *gate;              /* (n_groups, ld_slots, dim) */
    int64_t n_groups, ld_slots;
    const int32_t *n_slots;   /* (n_groups) */
    int32_t dim;
    const float *norm;        /* (dim) */
    float eps;
    int32_t n_rot;
    const float *inv_freq;    /* (n_rot / 2) */
    const int32_t *pos;       /* (n_groups) */
    float *out;               /* (n_groups, dim) */
} di_compress_pool_args;

/* ds_route (the family's router), per row r of logits (n_rows, E):
 * scores s = sqrt(softplus(logits)) (torch's threshold 20) in place; the
 * row's K experts sel[r] = tid2eid[tokens[r]] (hash routing) when tid2eid
 * is set, else the K largest selection values (ties to the lower id,
 * largest first): draws[r] when given (forced imbalance), else s + bias
 * (bias_alt for rows with tokens[r] >= alt_from when bias_alt is set:
 * V4.1's image rows); sorted ascending by id when sort_sel (V4); then the
 * weights selw[r][k] = s[sel_k] / (sum over k in that order + 1e-20) * scale. */
typedef struct di_route_args {
    float *logits;                 /* (n_rows, E) -> the scores */
    int64_t n_rows;
    int32_t n_experts, n_used;
    const int32_t *tokens;         /* (n_rows), or NULL (no hash, no bias_alt) */
    const int32_t *tid2eid;        /* (n_vocab, K) or NULL */
    const float *draws;            /* (n_rows, E) or NULL */
    const float *bias, *bias_alt;  /* (E) each; bias_alt may be NULL */
    int32_t alt_from;
    float *vsel;                   /* (n_rows, E) scratch for the selection values (may be draws) */
    int sort_sel;
    float scale;
    int32_t *sel;                  /* (n_rows, K) */
    float *selw;                   /* (n_rows, K) */
} di_route_args;

/* round_rows' casts (V4.1's DeepInfer-faithful numerics): bf16 round to
 * nearest even, or fp8act: e4m3 with one power-of-two scale per 32 values
 * (ceil(log2(max(amax, 1e-4) / 448))), DeepInfer's per-token cast. */
typedef enum di_round_kind { DI_ROUND_BF16 = 0, DI_ROUND_FP8ACT } di_round_kind;

typedef struct di_backend_ops {
    const char *name; /* "cpu", "cuda" */
    /* Frees what the backend context owns (no-op for the CPU). */
    void (*release)(di_backend *be);
    /* A one-line description for `deepinfer info` / bench ("cpu (avx512-q8)"). */
    void (*describe)(const di_backend *be, char *buf, size_t n);
    /* The first run-time error since the last call (DI_OK when none). */
    di_status (*check)(const di_backend *be, di_error *err);

    /* ---- weights ---- */
    /* True when linear takes weights of dtype. */
    int (*supports)(const di_backend *be, di_dtype dtype);
    /* n elements of dtype from src -> f32 dst (norm vectors at load). */
    void (*dequant)(const di_backend *be, di_dtype dtype, const void *src, float *dst, int64_t n);

    /* ---- linear ---- */
    /* Scratch floats linear needs for n_rows rows of n_in inputs on n_threads threads. */
    int64_t (*linear_scratch_floats)(const di_backend *be, int64_t n_rows, int64_t n_in, int n_threads);
    /* 1..DI_MATMUL_MAX_PARTS matmuls over the same activation rows (q/k/v,
     * gate/up) in one dispatch; each part's bits as alone (di_matmul_multi). */
    void (*linear)(const di_backend *be, const di_matmul_args *parts, int n_parts, float *scratch,
                   di_threadpool *pool);

    /* ---- the forward's row stages ---- */
    void (*embed_norm)(const di_backend *be, const di_embed_norm_args *a, di_threadpool *pool);
    void (*rope_store)(const di_backend *be, const di_rope_store_args *a, di_threadpool *pool);
    /* post NULL: x += h; else h = rmsnorm(h, post), x += h (Gemma's post
     * norms). Then, norm set: h = rmsnorm(x, norm). x, h (n_rows, n). */
    void (*add_norm)(const di_backend *be, float *x, float *h, const float *post, const float *norm, int64_t n_rows,
                     int64_t n, float eps, di_threadpool *pool);
    /* gate (n_rows, n) = glu(gate, up) elementwise. */
    void (*glu)(const di_backend *be, di_glu_kind kind, float *gate, const float *up, int64_t n_rows, int64_t n,
                di_threadpool *pool);
    /* out (n_want, n) = rmsnorm(the rows r of x (n_rows, n) with want[r], in order, norm). */
    void (*gather_norm)(const di_backend *be, const float *x, int64_t n_rows, int64_t n, const uint8_t *want,
                        const float *norm, float eps, float *out);
    /* x[i] = cap * tanh(x[i] / cap), (n); cap > 0. */
    void (*softcap)(const di_backend *be, float *x, int64_t n, float cap);

    /* ---- attention over the paged KV cache ---- */
    /* Scratch floats per pool thread for rows attending over up to n_pos positions. */
    int64_t (*attention_scratch_floats)(const di_backend *be, int32_t n_heads, int32_t n_kv_heads, int32_t head_dim,
                                        int32_t block_size, int32_t n_pos);
    /* di_attention's contract; n_pos bounds a->pos[r] + 1. scratch (n_threads, attention_scratch_floats). */
    void (*attention)(const di_backend *be, const di_attn_args *a, int32_t n_pos, float *scratch,
                      di_threadpool *pool);

    /* ---- routed experts ---- */
    /* Per row of logits (n_rows, n_expert): softmax, then the n_used
     * largest (lowest id among ties) into sel / sel_w (n_rows, n_used),
     * renormalized to sum 1 when norm. sel and sel_w are host memory: the
     * expert loop runs on the host. */
    void (*moe_route)(const di_backend *be, float *logits, int64_t n_rows, int64_t n_expert, int64_t n_used,
                      bool norm, int32_t *sel, float *sel_w);
    void (*moe_expert)(const di_backend *be, const di_moe_expert_args *a, float *scratch, di_threadpool *pool);

    /* ---- DeepSeek V4 / V4.1 stages ---- */
    /* Scratch floats scaled_linear needs for n_rows rows of n_in inputs,
     * split into up to n_tasks tasks on n_threads threads. */
    int64_t (*scaled_linear_scratch_floats)(const di_backend *be, int64_t n_rows, int64_t n_in, int64_t n_tasks,
                                            int n_threads);
    /* y (n_rows, ldy) = x (n_rows, ldx) W^T for every kind of w; each
     * y[r][o] is one fixed sequence of float operations whatever n_rows
     * and the thread count (the PLAIN kind: linear's bits). */
    void (*scaled_linear)(const di_backend *be, const di_scaled_weight *w, const float *x, int64_t ldx, float *y,
                          int64_t ldy, int64_t n_rows, float *scratch, di_threadpool *pool);
    /* dst (n, ldd) row i = row ids[i] of w as floats (n_in): the embedding
     * lookup and rows read at load. */
    void (*scaled_rows)(const di_backend *be, const di_scaled_weight *w, const int32_t *ids, int64_t n, float *dst,
                        int64_t ldd);
    /* y (n_out) = W x for one row x (n_in), each output the dot of the
     * dequantized weight row with x in the backend's dot order (the V4.1
     * index key of an entry); scratch n_in floats. */
    void (*scaled_dot_rows)(const di_backend *be, const di_scaled_weight *w, const float *x, float *y,
                            float *scratch);
    /* Scratch floats per pool thread for sparse_attention with up to max_idx keys a row. */
    int64_t (*sparse_attention_scratch_floats)(const di_backend *be, int64_t max_idx);
    /* scratch (n_threads, sparse_attention_scratch_floats). */
    void (*sparse_attention)(const di_backend *be, const di_sparse_attn_args *a, float *scratch,
                             di_threadpool *pool);
    void (*index_scores)(const di_backend *be, const di_index_score_args *a, di_threadpool *pool);
    void (*mhc_pre)(const di_backend *be, const di_mhc_pre_args *a, di_threadpool *pool);
    /* Xn[r]_k (N, D) = post[r]_k y[r] + sum_j comb[r][j][k] X[r]_j, then
     * rounded to bf16 when round_bf16 (V4.1 faithful). */
    void (*mhc_post)(const di_backend *be, const float *X, const float *y, const float *post, const float *comb,
                     int32_t N, int32_t D, int64_t n_rows, int round_bf16, float *Xn, di_threadpool *pool);
    /* V4's head collapse: h[r] (D) = sum_i w_i X[r]_i, w_i = sigmoid(mix[r]_i * scale + base_i) + eps. */
    void (*mhc_head)(const di_backend *be, const float *X, const float *mix, const float *base, float scale,
                     float eps, int32_t N, int32_t D, int64_t n_rows, float *h, di_threadpool *pool);
    /* The family's RMSNorm: out[r] = x[r] * (1 / sqrt(mean(x[r]^2) + eps))
     * (* w elementwise when w is set; the square sum in double, as
     * transformers), then rounded to bf16 when round_bf16. x, out (n_rows,
     * n), may alias. */
    void (*rms_norm)(const di_backend *be, const float *x, const float *w, float *out, int64_t n_rows, int64_t n,
                     float eps, int round_bf16, di_threadpool *pool);
    /* The family's rotary, per row r of x (n_rows, n_heads * dim): the
     * trailing n_rot dims of each head rotated in interleaved pairs (2i,
     * 2i+1) by angle (float)pos[r] * inv_freq[i] (sign -1: the inverse);
     * with round_bf16 the row is rounded to bf16 before and after (V4.1
     * faithful). n_rot / 2 <= 256. */
    void (*rope_rows)(const di_backend *be, float *x, int64_t n_rows, int32_t n_heads, int32_t dim, int32_t n_rot,
                      const float *inv_freq, const int32_t *pos, float sign, int round_bf16, di_threadpool *pool);
    /* The experts' clamped SwiGLU over gate, up (n_rows, n): with
     * round_bf16 both first rounded to bf16 (V4.1 faithful); then gate =
     * silu(min(gate, limit)) * clamp(up, -limit, limit), times row_w[r]
     * when row_w is set (V4.1's weight inside the expert). */
    void (*clamped_glu)(const di_backend *be, float *gate, float *up, int64_t n_rows, int64_t n, float limit,
                        int round_bf16, const float *row_w, di_threadpool *pool);
    void (*compress_pool)(const di_backend *be, const di_compress_pool_args *a, di_threadpool *pool);
    /* sel / selw are host memory: the expert loop (and EP's exchange) runs on the host. */
    void (*ds_route)(const di_backend *be, const di_route_args *a, di_threadpool *pool);
    /* The routed sum: y[r] (D) = from 0, or from partial[r] over the first
     * plen[r] choices (EP: their owner's sum; plen NULL: none), s = s +
     * ysel[r][k] * selw[r][k] for the later choices k in order (a plain add
     * when selw is NULL: the expert applied it), then + shared[r]. ysel
     * (n_rows, K, D). EP owners step with the same expression, so they round
     * alike (model/deepseek_v4_internal.h, dsv4_moe_mac). */
    void (*moe_sum)(const di_backend *be, int64_t n_rows, int32_t K, int32_t D, const float *ysel, const float *selw,
                    const int32_t *plen, const float *partial, const float *shared, float *y, di_threadpool *pool);
    /* x (n_rows, ldx): the first n values of each row cast and back in place. */
    void (*round_rows)(const di_backend *be, di_round_kind kind, float *x, int64_t n_rows, int64_t ldx, int64_t n,
                       di_threadpool *pool);

    /* ---- memory ---- */
    void (*copy)(const di_backend *be, void *dst, const void *src, size_t bytes);
    void (*zero)(const di_backend *be, void *dst, size_t bytes);

    /* ---- buffers (keep at the end of the table) ---- */
    /* A buffer of bytes the ops can work on (the CPU: host memory; CUDA:
     * device memory), aligned to DI_BACKEND_ALIGN and zero-filled (the
     * CPU's large buffers lazily: fresh pages); bytes 0 gives a valid
     * minimal buffer. NULL on failure, with the reason latched for check
     * (the CPU: out of memory is the only reason). */
    void *(*buf_alloc)(const di_backend *be, size_t bytes);
    void (*buf_free)(const di_backend *be, void *buf); /* NULL: no-op */
    /* host -> buffer and buffer -> host, bytes each; synchronous: the host
     * memory may be reused or read on return. Errors are latched for check. */
    void (*upload)(const di_backend *be, void *dst, const void *host_src, size_t bytes);
    void (*download)(const di_backend *be, void *host_dst, const void *src, size_t bytes);
    /* Weight matrix w (host memory as loaded: n_out rows of row_bytes) once
     * into the backend's memory: *out is w with data the backend's copy
     * (the CPU: *out = *w, the host rows used in place). Release with
     * release_weight. At load, so the error comes back directly. */
    di_status (*upload_weight)(const di_backend *be, const di_backend_weight *w, di_backend_weight *out,
                               di_error *err);
    void (*release_weight)(const di_backend *be, di_backend_weight *w); /* w->data is NULL after */
} di_backend_ops;

/* buf_alloc's alignment: the CPU kernels' widest vector loads (AVX-512) and a
 * cache line. */
#define DI_BACKEND_ALIGN 64

/* A backend: its table and its context (the CPU's: the kernel table). A
 * value type; release with ops->release (di_backend_release). */
struct di_backend {
    const di_backend_ops *ops;
    const void *ctx;  /* the CPU backend's const di_cpu_kernels * */
    void *state;      /* a device backend's mutable context, NULL for the CPU */
};

/* The CPU backend over kernel table k (NULL: di_cpu_kernels_best()). Cannot fail. */
void di_backend_cpu(const di_cpu_kernels *k, di_backend *out);
/* The CPU backend's kernel table (NULL for another backend). */
const di_cpu_kernels *di_backend_cpu_kernels(const di_backend *be);
const di_backend_ops *di_backend_cpu_ops(void);

/* What a --device string names: "cpu" (or NULL / ""), "cuda" (device 0) or
 * "cuda:N". DI_ERR_INVALID_ARG with a message naming the accepted forms for
 * anything else. */
typedef enum di_device_kind { DI_DEVICE_CPU = 0, DI_DEVICE_CUDA } di_device_kind;
di_status di_device_parse(const char *device, di_device_kind *kind, int *index, di_error *err);

/* Checks that device can run a model of architecture arch ("llama",
 * "deepseek_v4", ...; NULL: not known yet) in this build: DI_OK for the
 * CPU; for CUDA the clear reason it cannot (DI_ERR_UNSUPPORTED: this build
 * has no CUDA backend, no CUDA device was found, or the CUDA backend does
 * not yet implement the model; DI_ERR_RANGE: no such device index), never
 * a crash. */
di_status di_device_check(const char *device, const char *arch, di_error *err);

/* A device backend linked into the program registers its opener (the CUDA
 * one: di_backend_cuda_register, src/kernels/cuda/backend_cuda.c, linked
 * into the command when CMake builds the CUDA library), so that this
 * library keeps no link dependency on it. open: device index -> a backend
 * (released by the caller), or the reason there is none (no driver, no
 * such device). Call before any engine is created. */
typedef di_status (*di_backend_open_fn)(int index, di_backend *out, di_error *err);
void di_backend_register_cuda(di_backend_open_fn open);

/* The name of the first NULL entry of ops (NULL when complete), for the tests. */
const char *di_backend_ops_missing(const di_backend_ops *ops);

static inline void di_backend_release(di_backend *be) {
    if (be && be->ops) be->ops->release(be);
}

#endif
