/* Llama-family forward pass over GGUF weights (SmolLM2, Llama 2/3 shapes).
 *
 *   model = di_llama_load(gguf)      weights point into the GGUF mapping
 *   kv    = di_llama_kv_create(...)  paged K/V storage, owned by the caller
 *   ctx   = di_llama_ctx_create(..)  scratch for forward, grown on demand
 *   di_llama_forward(ctx, kv, batch, logits, par)
 *
 * One forward processes a flat ragged batch (src/model/batch.h): prefill
 * chunks and decode tokens of many sequences mixed. Every row's K/V is
 * written to the cache before any row attends, and every row reads its keys
 * back from the cache, so a row's logits are the same bits whether its
 * sequence arrived in one chunk, in many, or alongside other sequences, and
 * for any thread count (kernels/cpu/kernels.h). The batch is untrusted:
 * forward validates it completely before touching the cache.
 *
 * Ownership: the gguf handle must outlive the model; the model must outlive
 * its kv caches and contexts. One ctx per concurrent caller. */
#ifndef DI_MODEL_LLAMA_H
#define DI_MODEL_LLAMA_H

#include "base/status.h"
#include "base/threadpool.h"
#include "model/batch.h"
#include "format/gguf.h"
#include "kernels/backend.h"
#include "kernels/cpu/kernels.h"
#include "model/llama_hparams.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct di_llama_model di_llama_model;
typedef struct di_llama_kv di_llama_kv;
typedef struct di_llama_ctx di_llama_ctx;

/* Binds a GGUF of architecture "llama": hyper-parameters and tensors are
 * validated by model/llama_hparams.h, then this checks that the kernels can
 * read every weight dtype and that the features used are implemented (rope
 * scaling none/linear). kernels NULL picks di_cpu_kernels_best(); the model
 * runs on the CPU backend over them (kernels/backend.h). The caller owns
 * *out. */
di_status di_llama_load(const di_gguf *g, const di_cpu_kernels *kernels, di_llama_model **out,
                        di_error *err);
/* The same from hyper-parameters and tensors validated elsewhere (an HF
 * folder: model/llama_hf.h); rope_neox: q/k rotate halves (HF layout) rather
 * than adjacent pairs (llama GGUFs). The tensors' data must outlive the
 * model; the structs themselves may be freed after the call. */
di_status di_llama_load_parts(const di_llama_hparams *hp, const di_llama_tensors *t, bool rope_neox,
                              const di_cpu_kernels *kernels, di_llama_model **out, di_error *err);
void di_llama_free(di_llama_model *m);
const di_llama_hparams *di_llama_hparams_of(const di_llama_model *m);
/* The CPU kernel table of its backend (NULL on another backend). */
const di_cpu_kernels *di_llama_kernels(const di_llama_model *m);
/* The backend every op of its forward runs on (kernels/backend.h): the CPU
 * backend over the kernels given at load. */
const di_backend *di_llama_backend(const di_llama_model *m);

/* Paged cache for every layer: K and V of (n_blocks, block_size, n_head_kv,
 * head_dim) elements of dtype DI_DTYPE_F32 or DI_DTYPE_F16. Contents start
 * zeroed. The caller owns *out. */
di_status di_llama_kv_create(const di_llama_model *m, int32_t n_blocks, int32_t block_size,
                             di_dtype dtype, di_llama_kv **out, di_error *err);
void di_llama_kv_free(di_llama_kv *kv);
/* Per-position region i of the cache (false past the last): the rows of
 * every slot, slot_bytes each, from base; for block copies (model.h). */
bool di_llama_kv_region(di_llama_kv *kv, int32_t i, uint8_t **base, size_t *slot_bytes);
int32_t di_llama_kv_n_blocks(const di_llama_kv *kv);
int32_t di_llama_kv_block_size(const di_llama_kv *kv);

/* Forward scratch. Grows to the largest batch seen; steady state does not
 * allocate. The caller owns *out. */
di_status di_llama_ctx_create(const di_llama_model *m, di_llama_ctx **out, di_error *err);
void di_llama_ctx_free(di_llama_ctx *ctx);

/* Number of rows of b with want_logits set (the rows of logits_out). */
int32_t di_llama_batch_n_logits(const di_batch *b);

/* Runs the batch: writes K/V of every row into kv, and for each row with
 * want_logits (in row order) a row of n_vocab logits into logits_out
 * (n_want_logits, n_vocab). pool NULL runs on the calling thread.
 * Validation (DI_ERR_INVALID_ARG / DI_ERR_RANGE, nothing written): token
 * ids in [0, n_vocab), seq in [0, n_seq_slots), pos >= 0, block_size equal
 * to the cache's, every needed block table entry present and in
 * [0, n_blocks), rows of a sequence in strictly increasing position order.
 * Positions before a row that are not in this batch must already be in the
 * cache (the engine's contract; not checkable here). */
di_status di_llama_forward(di_llama_ctx *ctx, di_llama_kv *kv, const di_batch *b, float *logits_out,
                           di_threadpool *pool, di_error *err);

#endif
