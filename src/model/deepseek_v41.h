/* DeepSeek-V4.1-Flash (`deepseek_v41`, the causal encoder-decoder) forward
 * over an HF checkpoint folder in the released layout.
 *
 *   m   = di_dsv41_load(dir, kernels, numerics)  config + shards, validated;
 *                                    weights stay in the mapping (FP8 32x32,
 *                                    FP4 experts, Engram tables mmapped)
 *   kv  = di_dsv41_kv_create(...)    paged per-position state, caller owns
 *   ctx = di_dsv41_ctx_create(m)     forward scratch
 *   di_dsv41_forward(ctx, kv, batch, logits, pool)
 *
 * The math is DeepSeek's DeepInfer 0.1.0 (model_executor/models/); the oracle is
 * scripts/oracle_v41.py, which calls DeepInfer's and tile-kernels' own
 * reference functions. What differs from V4 (deepseek_v4.h): shifted mHC
 * (a sublayer's input uses the previous sublayer's pre mix) with no hc_head,
 * no per-head q norm, ratio-2 gated pair pooling and ratio-1 compressors,
 * cross-layer sharing of compressed KV / index keys / top-k selections (the
 * role table below), an indexer whose keys come from the compressed latent,
 * a candidate-block stage, Engram n-gram memory on some layers, 32x32 FP8
 * blocks, no hash routing.
 *
 * Numerics: DI_DSV41_NUMERICS_DEEPINFER (the default) reproduces what
 * DeepSeek serves: per-token fp8 activations before every FP8/FP4 GEMM, bf16
 * at DeepInfer's rounding points, MXFP8 window KV, FP4 compressed KV, FP4
 * index q/k, bf16 index scores -- and stores the KV in those formats.
 * DI_DSV41_NUMERICS_IDEAL computes in f32 without simulated quantization
 * (weights are still the checkpoint's) and keeps f32 KV.
 *
 * Ownership: the model owns its mapping; kv caches and contexts are freed
 * before the model. One ctx per concurrent caller. */
#ifndef DI_MODEL_DEEPSEEK_V41_H
#define DI_MODEL_DEEPSEEK_V41_H

#include "base/status.h"
#include "base/threadpool.h"
#include "model/batch.h"
#include "kernels/cpu/kernels.h"
#include "model/deepseek_v4.h"
#include "text/tokenizer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DI_DSV41_MAX_LAYERS DI_DSV4_MAX_LAYERS
#define DI_DSV41_MAX_ENGRAM DI_DSV4_MAX_ENGRAM

typedef enum di_dsv41_numerics {
    DI_DSV41_NUMERICS_DEEPINFER = 0,
    DI_DSV41_NUMERICS_IDEAL = 1,
} di_dsv41_numerics;

/* "deepinfer" / "ideal" -> value; -1 when unknown. */
int di_dsv41_numerics_from_name(const char *name);
const char *di_dsv41_numerics_name(di_dsv41_numerics n);

/* One family, one struct (deepseek_v4.h): the hyper-parameters and the
 * layer role table both variants read with one config reader. */
typedef di_dsv4_role di_dsv41_role;
typedef di_dsv4_hparams di_dsv41_hparams;

typedef struct di_dsv41_model di_dsv41_model;
typedef struct di_dsv41_kv di_dsv41_kv;
typedef struct di_dsv41_ctx di_dsv41_ctx;

/* Reads dir/config.json only: 1 when it declares deepseek_v41. */
int di_dsv41_is_config(const char *dir);
/* Reads dir/config.json only: fills *hp when it is a valid V4.1 config. */
di_status di_dsv41_read_config(const char *dir, di_dsv41_hparams *hp, di_error *err);

/* Opens the folder; tok (optional, not owned, must outlive the model) is the
 * folder's tokenizer, needed when the config compresses the Engram vocab. */
di_status di_dsv41_load(const char *dir, const di_cpu_kernels *kernels, di_dsv41_numerics numerics,
                        const di_tokenizer *tok, di_dsv41_model **out, di_error *err);
void di_dsv41_free(di_dsv41_model *m);
const di_dsv41_hparams *di_dsv41_hparams_of(const di_dsv41_model *m);
const di_cpu_kernels *di_dsv41_kernels(const di_dsv41_model *m);
di_dsv41_numerics di_dsv41_numerics_of(const di_dsv41_model *m);
/* Writes the layer topology (one line per layer) into buf; returns buf. */
const char *di_dsv41_describe_layer(const di_dsv41_hparams *hp, int32_t il, char *buf, size_t cap);

/* KV bytes one token costs across all layers in the model's numerics (the
 * ratio-2 compressors' pending pair state included). */
uint64_t di_dsv41_kv_bytes_per_token(const di_dsv41_model *m);
di_status di_dsv41_kv_create(const di_dsv41_model *m, int32_t n_blocks, int32_t block_size, di_dsv41_kv **out,
                             di_error *err);
void di_dsv41_kv_free(di_dsv41_kv *kv);
/* Per-position region i of the cache (false past the last): the rows of
 * every slot, slot_bytes each, from base; for block copies (model.h). */
bool di_dsv41_kv_region(di_dsv41_kv *kv, int32_t i, uint8_t **base, size_t *slot_bytes);
/* Rollback of rejected speculative positions: positions >= n_keep of
 * seq_slot are forgotten, nothing is copied. Every record (window K=V,
 * compressed entry in the slot that closes it, the ratio-2 pending state in
 * the slot of the pair's first token, index key, token id) is stored per
 * position in the paged cache, and a row at position p reads only positions
 * < p of its sequence plus what it writes itself, so rewriting from n_keep
 * on replaces every forgotten record before it is read. No ring, so no
 * backtracking slots to size (DeepInfer's SWA ring has window + 6). */
/* Adds the DSpark stages' per-position window records to kv (the
 * drafter, model/deepseek_v41_dspark.h): from then on every forward also
 * writes each row's main keys. DI_ERR_UNSUPPORTED without a drafter. */
di_status di_dsv41_kv_enable_dspark(const di_dsv41_model *m, di_dsv41_kv *kv, di_error *err);
di_status di_dsv41_kv_truncate(di_dsv41_kv *kv, int32_t seq_slot, int32_t n_keep, di_error *err);

/* SWA bounded replay (DeepInfer's YoCo "compact" prefill truncation;
 * docs/BOUNDED_REPLAY.md): with di_batch.replay_from set, the layers from
 * n_prefill_layer on (the ratio-1 source and the decoders) run only on the
 * rows at or past replay_from of their sequence, while the source layer's
 * compressed KV and index keys are still stored for every row. Default
 * keep = window + DeepInfer's MAX_BACKTRACKING_TOKENS. */
#define DI_DSV41_REPLAY_BACKTRACK 6
int32_t di_dsv41_replay_default_keep(const di_dsv41_hparams *hp);
/* DI_OK when bounded replay with this keep can run on the model: it needs a
 * ratio-1 source layer, keep >= window (so that every decode row's window
 * was computed), no compressor on a decoder layer (theirs would need every
 * row), and DSpark target layers all on one side of the boundary. */
di_status di_dsv41_replay_check(const di_dsv41_model *m, int32_t keep, di_error *err);

di_status di_dsv41_ctx_create(const di_dsv41_model *m, di_dsv41_ctx **out, di_error *err);
void di_dsv41_ctx_free(di_dsv41_ctx *ctx);

/* Same contract as di_dsv4_forward: batch invariant, rows of one sequence in
 * increasing positions, logits (n_want, n_vocab) in row order. */
di_status di_dsv41_forward(di_dsv41_ctx *ctx, di_dsv41_kv *kv, const di_batch *b, float *logits_out,
                           di_threadpool *pool, di_error *err);

/* Debug/test hook: after the next forward, the selected compressed-entry
 * indices of index-source layer il for batch row r (ascending, n_out of
 * them, at most cap). Returns DI_ERR_NOT_FOUND when not recorded. */
void di_dsv41_ctx_record_topk(di_dsv41_ctx *ctx, int32_t il);
di_status di_dsv41_ctx_topk(const di_dsv41_ctx *ctx, int32_t row, int32_t *out, int32_t cap, int32_t *n_out);

/* Expert parallelism, as V4's (deepseek_v4.h: di_dsv4_ep_create and the
 * rest of the di_dsv4_ep calls work on the returned object): collective;
 * each rank packs its slots' weights from its own mapping. */
di_status di_dsv41_ep_create(const di_dsv41_model *m, di_dist *dist, const di_dsv4_ep_params *p, di_dsv4_ep **out,
                             di_error *err);
/* Makes c's forwards expert parallel (ep NULL: back to all experts local):
 * every rank then calls di_dsv41_forward equally often, with zero rows when
 * it has no work. */
void di_dsv41_ctx_set_ep(di_dsv41_ctx *ctx, di_dsv4_ep *ep);
/* Forced imbalance, as di_dsv4_ctx_set_route_skew (the one-process twin of
 * an EP run with force_imbalance): ratio 0 turns it off. */
void di_dsv41_ctx_set_route_skew(di_dsv41_ctx *ctx, double ratio, int32_t groups);

/* Makes c's forwards context parallel over cp (NULL: off): every rank
 * forwards its share of the same step's rows (model_cp.c splits them) and
 * gets the whole cache; collective per layer, a rank with no rows still
 * calls di_dsv41_forward with the step's block tables. */
void di_dsv41_ctx_set_cp(di_dsv41_ctx *ctx, struct di_dist *cp);

/* Trace hook for tests and debugging: called during each forward at every
 * sublayer boundary with the rows of this batch (in row order):
 *   "R_after_engram" (Engram layers), "R_after_attn", "R_after_ffn"
 *                    the residual copies (n_rows, hc_mult * n_embd) after
 *                    that point; the hook may overwrite them (teacher
 *                    forcing: the next sublayer then reads them)
 *   "xn_attn", "xn_ffn"   the normalized sublayer input (n_rows, n_embd)
 *   "attn_out", "moe_out" the sublayer output before the mHC post
 * layer is the layer index. NULL removes it. Not for production use: a
 * hook that writes changes the model's outputs. */
typedef void (*di_dsv41_hook_fn)(void *user, const char *point, int32_t layer, float *data, int64_t n_rows,
                                 int64_t row_floats);
void di_dsv41_ctx_set_hook(di_dsv41_ctx *ctx, di_dsv41_hook_fn fn, void *user);

#endif
