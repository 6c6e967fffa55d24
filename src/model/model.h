/* A loaded model of any supported architecture behind one small interface,
 * so the engine never switches on the architecture itself.
 *
 *   di_model_open(path)            a GGUF file (llama) or an HF checkpoint
 *                                  folder (deepseek_v4); architecture detected,
 *                                  weights bound and validated, tokenizer built
 *   di_model_kv_create(...)        paged KV storage for the engine's pool
 *   di_model_ctx_create(...)       forward scratch (one per stepping thread)
 *   di_model_forward(ctx, kv, batch, logits, pool)
 *
 * Ownership: the model owns its file mapping and tokenizer; kv caches and
 * contexts are owned by the caller and must be freed before the model. */
#ifndef DI_MODEL_MODEL_H
#define DI_MODEL_MODEL_H

#include "base/status.h"
#include "base/threadpool.h"
#include "model/batch.h"
#include "tensor/dtype.h"
#include "text/tokenizer.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct di_model di_model;
typedef struct di_model_kv di_model_kv;
typedef struct di_model_ctx di_model_ctx;

typedef struct di_model_facts {
    const char *arch;      /* "llama", "deepseek_v4", "deepseek_v41" */
    int32_t n_vocab;       /* rows of the logits */
    int32_t n_ctx_train;   /* context the model was trained for */
    int32_t n_layers;
    int32_t n_embd;
    const char *kernels;   /* name of the CPU kernel table in use */
    const char *device;    /* the backend its forward runs on: "cpu" (kernels/backend.h) */
} di_model_facts;

/* kernels: a table name for di_cpu_kernels_by_name, or NULL for the
 * default (di_cpu_kernels_best). numerics: DeepSeek-V4.1's numerics policy
 * ("deepinfer", the default when NULL, or "ideal"); other architectures
 * refuse anything but NULL. */
di_status di_model_open(const char *path, const char *kernels, const char *numerics, di_model **out,
                        di_error *err);
/* di_model_open on a device: "cpu" (NULL: the default) or "cuda[:N]"
 * (kernels/backend.h, di_device_check); a device this build cannot run
 * the model on fails with the reason (DI_ERR_UNSUPPORTED) before the
 * file is read, a malformed name with DI_ERR_INVALID_ARG. */
di_status di_model_open_on(const char *path, const char *kernels, const char *numerics, const char *device,
                           di_model **out, di_error *err);
void di_model_free(di_model *m);
void di_model_get_facts(const di_model *m, di_model_facts *out);
const di_tokenizer *di_model_tokenizer(const di_model *m);
/* Reads the weights of a GGUF model into memory now (di_mapped_pretouch
 * over the span of its tensor data), reporting progress to fn (may be
 * NULL). Returns false, having done nothing, for HF checkpoint folders
 * (their loaders already read every weight) and where di_mapped_pretouch
 * declines. Cannot fail. */
bool di_model_pretouch(const di_model *m, di_load_progress_fn fn, void *user);

/* dtype: DI_DTYPE_F16 or DI_DTYPE_F32. */
di_status di_model_kv_create(const di_model *m, int32_t n_blocks, int32_t block_size, di_dtype dtype,
                             di_model_kv **out, di_error *err);
void di_model_kv_free(di_model_kv *kv);
/* One block's KV as bytes, for records that outlive the pool (the disk
 * tier, prefill -> decode transfer): every per-position state of the
 * architecture (llama K/V; DeepSeek window, compressed, index-key and
 * compressor records, V4.1's token ids) of the block's block_size slots.
 * Writing a block read from another cache of the same model, numerics and
 * dtype gives the same bits as computing it. */
uint64_t di_model_kv_block_bytes(const di_model_kv *kv);
di_status di_model_kv_block_read(di_model_kv *kv, int32_t block, void *out, di_error *err);
di_status di_model_kv_block_write(di_model_kv *kv, int32_t block, const void *in, di_error *err);
/* Rollback after speculative verification: positions >= n_keep of this
 * sequence slot are forgotten (the next forward may rewrite them from
 * n_keep on), without copying. llama and DeepSeek-V4.1 keep every per-
 * position record in the paged cache and read only positions below the row
 * they compute, so this validates and returns DI_OK; DeepSeek-V4 returns
 * DI_ERR_UNSUPPORTED. The engine keeps the block tables. */
di_status di_model_kv_truncate(di_model_kv *kv, int32_t seq_slot, int32_t n_keep, di_error *err);
/* Bytes of KV storage per token (all layers), for sizing the pool. */
uint64_t di_model_kv_bytes_per_token(const di_model *m, di_dtype dtype);

di_status di_model_ctx_create(const di_model *m, di_model_ctx **out, di_error *err);
void di_model_ctx_free(di_model_ctx *ctx);

/* Makes ctx's forwards expert parallel over d (collective over d; MoE
 * architectures only, DI_ERR_UNSUPPORTED otherwise). The ctx then owns the
 * expert-parallel state and frees it with itself; d must outlive it. */
di_status di_model_ctx_set_ep(const di_model *m, di_model_ctx *ctx, struct di_dist *d, const di_ep_params *p,
                              di_error *err);

/* Speculative decoding's rollback: positions >= n_keep of this slot are
 * forgotten (the next forward of the slot continues at n_keep). llama: a
 * no-op (positions are overwritten). DI_ERR_UNSUPPORTED where an
 * architecture's state cannot be rolled back (deepseek_v4 for now); the
 * engine then refuses --spec for that model. */
di_status di_model_kv_truncate(di_model_kv *kv, int32_t seq_slot, int32_t n_keep, di_error *err);

/* Makes ctx's forwards context parallel over d (deepseek_v4 / v41; with EP,
 * over the same group): every rank must then forward the same batches; a batch of at least
 * min_rows rows is split over the ranks (DeepInfer's zigzag), smaller ones
 * run whole on every rank. Every rank gets all logits and the whole cache.
 * d must outlive ctx. */
di_status di_model_ctx_set_cp(const di_model *m, di_model_ctx *ctx, struct di_dist *d, int32_t min_rows,
                              di_error *err);

/* logits_out: (rows of b with want_logits, n_vocab), in row order. With an
 * expert-parallel ctx the call is collective and b may have zero rows. */
/* Image input (DeepSeek-V4.1 with a vision tower). The prompt's placeholder
 * token id, -1 when the model takes no images. */
int32_t di_model_image_token(const di_model *m);
/* One image's bytes -> the ids and input rows of its expanded placeholder
 * (model/deepseek_v41_vision.h); *n_tokens rows of n_embd floats, caller
 * frees *ids and *rows. */
di_status di_model_encode_image(const di_model *m, const void *bytes, size_t n_bytes, int32_t **ids, float **rows,
                                int32_t *n_tokens, di_threadpool *pool, di_error *err);

/* The number of positions one image's placeholder expands to, without
 * running the tower (decode and layout only). */
di_status di_model_image_n_tokens(const di_model *m, const void *bytes, size_t n_bytes, int32_t *n_tokens,
                                  di_error *err);

/* SWA bounded replay (docs/BOUNDED_REPLAY.md): keep < 0 asks for the
 * model's default (DeepSeek-V4.1: window + 6); *keep_out is what the
 * engine then uses for di_batch.replay_from = prompt length - keep.
 * DI_ERR_UNSUPPORTED for other architectures or a V4.1 topology it cannot
 * bound, DI_ERR_INVALID_ARG for a keep below the window. */
di_status di_model_bounded_replay(const di_model *m, int32_t keep, int32_t *keep_out, di_error *err);
/* The DeepSeek-V4.1 objects behind the generic handles, for model code
 * that works beside the main forward (the DSpark drafter,
 * spec/drafter_dspark.c); NULL when the model (or the kv's model) is not
 * deepseek_v41. Not owned: they live as long as the handle. */
struct di_dsv41_model;
struct di_dsv41_kv;
const struct di_dsv41_model *di_model_as_dsv41(const di_model *m);
struct di_dsv41_kv *di_model_kv_as_dsv41(di_model_kv *kv);

di_status di_model_forward(di_model_ctx *ctx, di_model_kv *kv, const di_batch *b,
                           float *logits_out, di_threadpool *pool, di_error *err);

#endif
