/* DeepSeek-V4 (`deepseek_v4`, V4-Flash) forward over an HF checkpoint folder.
 *
 *   m   = di_dsv4_load(dir)          config.json + safetensors, validated;
 *                                    weights stay in checkpoint dtype, mmapped
 *   kv  = di_dsv4_kv_create(...)     paged per-position state, owned by caller
 *   ctx = di_dsv4_ctx_create(m)      forward scratch, grown on demand
 *   di_dsv4_forward(ctx, kv, batch, logits, pool)
 *
 * The math is transformers' models/deepseek_v4 (the oracle of
 * scripts/gen_goldens_deepseek_v4.py): low-rank Q with per-head RMS norm,
 * one shared 512-wide K=V head with a trailing interleaved-rotary slice,
 * per-head attention sink, inverse rotary on the output, grouped low-rank
 * output projection; per layer a sliding window plus, for CSA layers,
 * overlapping ratio-4 compression scored by a lightning indexer (top-k), or
 * for HCA layers non-overlapping compression attended in full; mHC residual
 * copies mixed by a Sinkhorn-normalized matrix; MoE with sqrt-softplus
 * scores, selection-only bias, hash-routed first layers, clamped SwiGLU and
 * a shared expert.
 *
 * KV state (why it is all paged): every piece of per-sequence state is a
 * function of one position, so it is stored in that position's slot of the
 * engine's paged cache (block table addressing as for llama):
 *   - the window K=V row of every layer (attention reads positions
 *     pos-window+1..pos: a ring is just the last window of this);
 *   - a compressed layer's raw compressor projections (kv, gate + position
 *     bias) of the position; a group's pooled row is computed when the
 *     group's last position is processed and stored in that position's
 *     slot, so partial groups need no separate state;
 *   - the CSA indexer's raw projections and pooled keys likewise.
 * So prefill chunks, decode, preemption by recompute and prefix-cache hits
 * all work unchanged, and a row's result depends only on its own
 * sequence's cache. The price is memory: raw projections are kept for every
 * position, not only for open groups (a later optimization).
 *
 * DeepSeek-V4.1 (`deepseek_v41`) configs are refused with DI_ERR_UNSUPPORTED
 * here: deepseek_v41.h loads them (same hparams struct and topology).
 *
 * Ownership: the model owns its mapping; kv caches and contexts must be freed
 * before the model. One ctx per concurrent caller. */
#ifndef DI_MODEL_DEEPSEEK_V4_H
#define DI_MODEL_DEEPSEEK_V4_H

#include "base/status.h"
#include "base/threadpool.h"
#include "model/batch.h"
#include "kernels/cpu/kernels.h"
#include "tensor/dtype.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DI_DSV4_MAX_LAYERS 256
#define DI_DSV4_MAX_MTP 8           /* num_nextn_predict_layers limit */
#define DI_DSV4_KIND_UNKNOWN 0xff   /* mtp_attn_kind not given by the config */

typedef enum di_dsv4_attn_kind {
    DI_DSV4_ATTN_WINDOW = 0, /* sliding_attention */
    DI_DSV4_ATTN_CSA,        /* compressed_sparse_attention */
    DI_DSV4_ATTN_HCA,        /* heavily_compressed_attention */
} di_dsv4_attn_kind;

/* The two members of the family. They share one config reader, one
 * hyper-parameter struct and one layer topology; the reader's variant
 * table (deepseek_v4_config.c) says where they differ. */
typedef enum di_dsv4_variant {
    DI_DSV4_V4 = 0,  /* deepseek_v4: transformers' config, hc_head, hash routing */
    DI_DSV4_V41 = 1, /* deepseek_v41: DeepInfer's config, shifted mHC, CED decoders, Engram */
} di_dsv4_variant;

#define DI_DSV4_MAX_ENGRAM 8        /* Engram layers */

/* What one layer is and whom it reads: the family's topology, built once
 * by the config reader and checked there. V4.1 derives it the way
 * DeepInfer's hugging_face/config.py + cross_layer.py:SharedLayerTopology
 * do (each source map sends a layer to the nearest source at or before
 * it); a V4 layer shares nothing: every compressed layer owns its
 * compressor, CSA layers their indexer too, HCA layers have none. */
typedef struct di_dsv4_role {
    int32_t ratio;      /* compression ratio: 0 window only (V4: CSA / HCA ratio, V4.1: 1 or 2) */
    int32_t kv_src;     /* layer whose compressed KV it reads (itself: owns a compressor); -1 */
    int32_t idx_src;    /* layer whose top-k selection it attends with (itself: owns an indexer);
                         * -1 (window layers, V4's HCA layers: every compressed entry) */
    int32_t idxk_src;   /* index sources: the layer whose index keys it scores; -1 */
    int32_t cand_src;   /* index sources past the candidate source: scores only inside its blocks; -1 */
    int32_t engram;     /* slot in the Engram layer list, -1 */
    uint8_t cand_producer; /* the candidate source itself: keeps the top candidate blocks */
    uint8_t decoder;    /* past n_prefill_layer (a CED decoder): owns only its window KV */
} di_dsv4_role;

/* Hyper-parameters and topology of a family model, all validated (ranges,
 * divisibility, per-layer lists). The first block both variants read
 * alike; then the topology; then what only one of them has. */
typedef struct di_dsv4_hparams {
    di_dsv4_variant variant;
    int32_t n_vocab, n_embd, n_layers;
    int32_t n_heads, head_dim, n_rot;   /* n_rot: trailing rotary dims per head */
    int32_t q_lora, o_groups, o_lora;
    int32_t n_experts, n_experts_used, moe_ff, n_shared;
    int32_t hc_mult, hc_iters;
    float hc_eps;
    int32_t window;                     /* sliding_window */
    int32_t index_heads, index_dim, index_topk;
    float rms_eps, swiglu_limit, routed_scale;
    int32_t n_ctx_train;                /* max_position_embeddings (capped to int32) */
    int32_t bos, eos, pad;              /* -1 when absent */
    double rope_theta, compress_rope_theta;
    int yarn;                           /* compressed layers use YaRN */
    double yarn_factor, yarn_orig_ctx, yarn_beta_fast, yarn_beta_slow;
    int tied;                           /* tie_word_embeddings */
    int32_t fp8_block;                  /* quantization_config block edge, 0 = none */
    int32_t n_mtp;                      /* num_nextn_predict_layers (V4: MTP modules, V4.1: DSpark stages) */
    /* the topology */
    int32_t n_prefill_layer;            /* first ratio-1 layer (V4.1); n_layers: no CED decoders */
    di_dsv4_role role[DI_DSV4_MAX_LAYERS];
    uint8_t hash_moe[DI_DSV4_MAX_LAYERS];  /* 1: layer routes by tid2eid (V4 only) */
    /* V4 only */
    int32_t ratio_csa, ratio_hca;       /* compress_rates */
    uint8_t attn_kind[DI_DSV4_MAX_LAYERS]; /* di_dsv4_attn_kind per layer */
    /* attention kind of MTP module i from legacy compress_ratios entries
     * past n_layers, else DI_DSV4_KIND_UNKNOWN (then the tensors decide) */
    uint8_t mtp_attn_kind[DI_DSV4_MAX_MTP];
    /* V4.1 only */
    int32_t cand_topk_blocks, cand_block;   /* 0 when there is no candidate source */
    int use_fp4_kv;                          /* use_fp4_sparse_kv */
    int32_t n_engram, engram_layers[DI_DSV4_MAX_ENGRAM];
    int32_t engram_max_ngram, engram_heads, engram_head_dim;
    int64_t engram_vocab;                    /* engram_vocab_size (prime search start + 1) */
    int32_t engram_compressed_vocab;         /* engram_compressed_vocab_size, 0 = not compressed */
    /* DSpark (loaded and validated; run by the drafter) */
    int32_t dspark_block, dspark_markov_rank, dspark_noise_token;
    int32_t dspark_n_experts, dspark_n_experts_used;
    int32_t n_dspark_targets, dspark_targets[8];
} di_dsv4_hparams;

typedef struct di_dsv4_model di_dsv4_model;
typedef struct di_dsv4_kv di_dsv4_kv;
typedef struct di_dsv4_ctx di_dsv4_ctx;

/* Reads only dir/config.json: fills *hp when it is a valid V4 config.
 * DI_ERR_UNSUPPORTED for a V4.1 config (di_dsv41_read_config reads those)
 * or features not implemented. */
di_status di_dsv4_read_config(const char *dir, di_dsv4_hparams *hp, di_error *err);

/* Opens an HF checkpoint folder (config.json + model.safetensors or a
 * sharded index). kernels NULL picks di_cpu_kernels_best(). */
di_status di_dsv4_load(const char *dir, const di_cpu_kernels *kernels, di_dsv4_model **out,
                       di_error *err);
void di_dsv4_free(di_dsv4_model *m);
const di_dsv4_hparams *di_dsv4_hparams_of(const di_dsv4_model *m);
const di_cpu_kernels *di_dsv4_kernels(const di_dsv4_model *m);
const char *di_dsv4_attn_kind_name(di_dsv4_attn_kind k);
/* MTP modules whose weights were found and validated at load: 0 when the
 * checkpoint has no mtp.* tensors (transformers-saved folders drop them),
 * else num_nextn_predict_layers. They are not run yet (drafting is a later
 * issue). */
int32_t di_dsv4_mtp_modules(const di_dsv4_model *m);

/* Paged state for every layer (see above), dtype F32 or F16, zeroed. */
di_status di_dsv4_kv_create(const di_dsv4_model *m, int32_t n_blocks, int32_t block_size,
                            di_dtype dtype, di_dsv4_kv **out, di_error *err);
void di_dsv4_kv_free(di_dsv4_kv *kv);
/* Forgets positions >= n_keep of sequence slot seq_slot (speculative
 * rollback). Every piece of state is a function of one position, stored in
 * its slot (above), a rewritten position replaces the old one and no row
 * reads past its own position: nothing to undo, the call only checks. */
di_status di_dsv4_kv_truncate(di_dsv4_kv *kv, int32_t seq_slot, int32_t n_keep, di_error *err);
/* Per-position region i of the cache (false past the last): the rows of
 * every slot, slot_bytes each, from base; for block copies (model.h). */
bool di_dsv4_kv_region(di_dsv4_kv *kv, int32_t i, uint8_t **base, size_t *slot_bytes);
uint64_t di_dsv4_kv_bytes_per_token(const di_dsv4_model *m, di_dtype dtype);

di_status di_dsv4_ctx_create(const di_dsv4_model *m, di_dsv4_ctx **out, di_error *err);
void di_dsv4_ctx_free(di_dsv4_ctx *ctx);

/* Optional per-block timers, off by default. When on, every forward adds
 * the wall time of each block kind (and, for the heavy kernels, their
 * floating-point operations and weight/KV bytes read) into the context's
 * totals; when off the forward pays one predictable branch per block.
 * Timers read CLOCK_MONOTONIC around blocks that run on the pool, so the
 * times are wall time of the whole pool. The indexer's scoring runs inside
 * the attention rows (per thread): its share of that phase is measured per
 * thread and the phase's wall time split in that proportion. */
typedef enum di_dsv4_block {
    DI_DSV4_BLK_EMBED = 0,   /* embedding rows, copies */
    DI_DSV4_BLK_MHC,         /* hc_pre / hc_post of both sublayers, hc_head */
    DI_DSV4_BLK_NORM,        /* attn_norm / ffn_norm RMSNorms */
    DI_DSV4_BLK_ATTN_PROJ,   /* wq_a, q_norm, wq_b, wkv, norms, rotary, wo_a, wo_b */
    DI_DSV4_BLK_ATTN_CORE,   /* softmax attention over window + compressed keys */
    DI_DSV4_BLK_COMPRESS,    /* compressor projections, raw state, group pooling */
    DI_DSV4_BLK_INDEXER,     /* indexer projections, its pooling, top-k scoring */
    DI_DSV4_BLK_MOE_ROUTER,  /* router logits and top-k / hash routing */
    DI_DSV4_BLK_MOE_ROUTED,  /* routed experts incl. gather and weighted sum */
    DI_DSV4_BLK_MOE_SHARED,  /* the shared expert */
    DI_DSV4_BLK_HEAD,        /* final norm and vocabulary projection */
    DI_DSV4_BLK_COUNT
} di_dsv4_block;

typedef struct di_dsv4_profile {
    double seconds[DI_DSV4_BLK_COUNT];
    double flops[DI_DSV4_BLK_COUNT]; /* multiply-adds count 2; only where noted */
    double bytes[DI_DSV4_BLK_COUNT]; /* weight bytes (MoE), cache bytes (attention) */
    int64_t n_forward, n_rows;
} di_dsv4_profile;

/* on != 0 enables the timers and clears the totals; 0 disables them. */
void di_dsv4_ctx_set_profile(di_dsv4_ctx *ctx, int on);
/* Copies the totals since the last di_dsv4_ctx_set_profile(ctx, 1). */
void di_dsv4_ctx_get_profile(const di_dsv4_ctx *ctx, di_dsv4_profile *out);
const char *di_dsv4_block_name(di_dsv4_block b);

/* ---- expert parallelism (deepseek_v4_ep.c) --------------------------------
 * A group of ranks (di_dist, src/dist/dist.h) each runs its own batches
 * (attention data parallelism) and owns a slice of the routed experts; the
 * forward is then collective: every rank must call di_dsv4_forward the same
 * number of times, with zero rows when it has no work (a placeholder step).
 * Outputs are bit-identical to one process. The ep object owns the packed
 * weights of this rank's expert slots; free it after the contexts that use
 * it, before the model. */
typedef struct di_dist di_dist;
typedef struct di_dsv4_ep di_dsv4_ep;

typedef struct di_dsv4_ep_params {
    int32_t n_extra;        /* redundant expert slots, rounded up so every rank has as many */
    int32_t window;         /* EPLB: steps of expert counts kept (0 = 100, DeepInfer's) */
    int32_t interval;       /* EPLB: rebalance every this many forwards (first after a
                             * quarter); 0 = never (DeepInfer's default) */
    double force_imbalance; /* >= 1: route randomly with rank 0's initial experts this
                             * much hotter (DeepInfer's DEEPINFER_FORCE_IMBALANCE_RATIO;
                             * changes outputs, for load tests); 0 = off */
    int log;                /* rank 0 prints each rebalance's moe_lb to stderr */
} di_dsv4_ep_params;

typedef struct di_dsv4_ep_stats {
    int32_t n_physical, n_local;    /* expert slots in all, per rank */
    int64_t bytes_sent;             /* dispatch + combine bytes this rank sent to others */
    int64_t bytes_rows, bytes_meta, bytes_counts, bytes_combine; /* its parts: hidden rows
                                     * (once per row and remote rank), (row, slot, weight)
                                     * entry metadata, per-layer counts, expert outputs (one
                                     * per row's leading run on an owner, one per later
                                     * remote expert: the fixed-order sum allows no more) */
    int64_t bytes_min;              /* the routing's minimum: each row once to each distinct
                                     * remote rank and one row back, D floats each */
    int64_t n_row_layers;           /* rows x MoE layers this rank routed */
    int64_t n_rebalances, weight_bytes_moved;
    double moe_lb_before, moe_lb_after; /* of the last rebalance, on its window */
} di_dsv4_ep_stats;

/* Collective. Each rank packs its slots' weights from its own mapping. */
di_status di_dsv4_ep_create(const di_dsv4_model *m, di_dist *dist, const di_dsv4_ep_params *p,
                            di_dsv4_ep **out, di_error *err);
void di_dsv4_ep_free(di_dsv4_ep *ep);
/* Makes c's forwards expert parallel (ep NULL: back to all experts local). */
void di_dsv4_ctx_set_ep(di_dsv4_ctx *c, di_dsv4_ep *ep);
void di_dsv4_ep_get_stats(const di_dsv4_ep *ep, di_dsv4_ep_stats *out);
/* Logical expert of each physical slot of a layer (n_physical). */
const int32_t *di_dsv4_ep_placement(const di_dsv4_ep *ep, int32_t layer);
/* Collective: rebalance now from the window (also run by the forward every
 * interval); moves expert weights between ranks point to point. */
di_status di_dsv4_ep_rebalance(di_dsv4_ep *ep, di_error *err);
/* This rank's per-step logical expert counts in the EPLB window, oldest
 * first, into out (window steps, n_layers, n_experts) when out != NULL;
 * returns the number of steps held. */
int32_t di_dsv4_ep_window(const di_dsv4_ep *ep, int64_t *out);
/* Collective: moe_lb = sum(max)/sum(mean) of the entries each rank received
 * per forward and layer since the last call (1.0 = even). */
di_status di_dsv4_ep_measure_lb(di_dsv4_ep *ep, double *moe_lb, di_error *err);
/* Forced imbalance without EP (the one-process reference of a skewed EP
 * run): non-hash layers route by a per-row hash with the first
 * n_experts/groups experts `ratio` times as likely to be chosen as the
 * others would be over `groups` ranks (DeepInfer's mapping to a score
 * scale). ratio 0 turns it off. */
void di_dsv4_ctx_set_route_skew(di_dsv4_ctx *c, double ratio, int32_t groups);

/* ---- context parallelism (prefill) -----------------------------------------
 * The ranks of cp each run a share of the same sequences' rows (e.g.
 * di_cp_zigzag's split) over identical block tables and their own caches;
 * per layer each rank's state rows (window K=V row, raw compressor and
 * indexer projections) are gathered into every rank's cache, every rank
 * pools every group the gathered rows close, and each rank attends for its
 * own rows: a row's logits are bit-identical to one process, and every
 * rank ends with the whole sequences' cache (decode can go on anywhere).
 * Collective per layer; a rank with no rows still calls di_dsv4_forward. */
void di_dsv4_ctx_set_cp(di_dsv4_ctx *c, di_dist *cp);

/* Runs the batch like di_llama_forward (same validation and contract):
 * every row's state is written to kv, and for each row with want_logits (in
 * row order) n_vocab logits go to logits_out. Batch invariant: a row's
 * logits depend only on its sequence's tokens, not on the other rows, the
 * chunking or the thread count. */
di_status di_dsv4_forward(di_dsv4_ctx *ctx, di_dsv4_kv *kv, const di_batch *b, float *logits_out,
                          di_threadpool *pool, di_error *err);

#endif
