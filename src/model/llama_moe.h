/* Routed-expert FFN of the llama-family variants (Qwen3-MoE, Mixtral):
 * the dense gate/up/down of a layer replaced by n_expert SwiGLU experts of
 * which each token uses the top n_used.
 *
 *   p      = softmax(h Wr)                     (n_rows, n_expert)  router
 *   top    = the n_used largest p (lowest id first among ties)
 *   w_j    = p_j / sum(top) (expert_weights_norm), else p_j
 *   out    = sum_j w_j * (silu(h Gj) * (h Uj)) Dj      in ascending expert id
 *
 * Each expert runs once per forward on the rows that chose it, gathered
 * into a contiguous block; the matmul kernels are batch invariant per row
 * and every row sums its experts in the same order, so a row's output does
 * not depend on which other rows share the batch.
 *
 * Weights point into the GGUF mapping: the per-expert matrices are slices
 * of the stacked ffn_*_exps tensors (ne [n_in, n_out, n_expert]). */
#ifndef DI_MODEL_LLAMA_MOE_H
#define DI_MODEL_LLAMA_MOE_H

#include "base/status.h"
#include "base/threadpool.h"
#include "kernels/backend.h"
#include "model/llama_hparams.h"

#include <stdbool.h>
#include <stdint.h>

/* One stacked matrix: expert e's (n_out, n_in) rows start at
 * data + e * expert_bytes. */
typedef struct di_llama_moe_mat {
    di_dtype dtype;
    const uint8_t *data;
    uint64_t row_bytes, expert_bytes;
    int64_t n_in, n_out;
    /* per expert, the backend's copy (upload_weight's packed), or NULL */
    const void **packed;
    int32_t n_uploaded; /* experts that went through upload_weight */
} di_llama_moe_mat;

typedef struct di_llama_moe {
    di_llama_moe_mat router;    /* one "expert": (n_expert, n_embd) */
    di_llama_moe_mat gate, up;  /* (n_expert) x (n_ff_exp, n_embd) */
    di_llama_moe_mat down;      /* (n_expert) x (n_embd, n_ff_exp) */
    int32_t n_expert, n_used;
    bool norm;
} di_llama_moe;

/* Binds layer t's expert tensors (validated by di_llama_validate_tensors)
 * for backend be. DI_ERR_UNSUPPORTED when be cannot read a dtype. */
di_status di_llama_moe_bind(const di_llama_hparams *hp, const di_llama_layer_tensors *t, const di_backend *be,
                            di_llama_moe *out, di_error *err);

/* Passes every expert matrix (and the router) through be's upload_weight
 * (the CPU: an x16-packed copy where its table has the gemm) and hints
 * that the rows it copied are not read again. release undoes it; safe
 * on a half-uploaded or never-uploaded moe. */
di_status di_llama_moe_upload(di_llama_moe *moe, const di_backend *be, di_error *err);
void di_llama_moe_release(di_llama_moe *moe, const di_backend *be);

/* Scratch of the expert FFN, grown on demand; one per forward context. */
typedef struct di_llama_moe_scratch di_llama_moe_scratch;
void di_llama_moe_scratch_free(di_llama_moe_scratch *s);

/* out (n_rows, ld_out) = the expert FFN of h (n_rows, ldh), both n_embd
 * wide, on backend be (the CPU's "ggml" kernels: llama.cpp's SiLU).
 * *scratch is created or grown here (NULL at first). */
di_status di_llama_moe_forward(const di_llama_moe *moe, const di_backend *be, const float *h, int64_t ldh,
                               int64_t n_rows, float *out, int64_t ld_out, di_llama_moe_scratch **scratch,
                               di_threadpool *pool, di_error *err);

#endif
