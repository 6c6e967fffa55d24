/* DeepSeek-V4.1 internals shared by the deepseek_v41*.c files. The pieces:
 *
 *   deepseek_v41_config.c  V4.1's column of the family's config reader
 *                          (deepseek_v4_config.c builds the role table)
 *   deepseek_v41_load.c    tensors bound by name (V4's binders), checked
 *   deepseek_v41_quant.c   the numerics policy: bf16, fp8 activations,
 *                          MXFP8 / FP4 KV records, FP4 index vectors
 *   deepseek_v41_attn.c    attention: window, compressors, indexer, sink
 *   deepseek_v41.c         KV, contexts, shifted mHC, the forward
 *   deepseek_v41_moe.c     routing, experts, the shared expert; EP glue
 *   deepseek_v41_cp.c      context parallelism: per-layer record exchange
 *   engram.c               Engram hashing, vocabulary, gate (model/engram.h)
 *
 * Shared with V4 (deepseek_v4_internal.h): dsv4_linear (FP8 block-scaled and
 * MXFP4 weights, batch-invariant products), RMSNorm, interleaved rotary, the
 * weight binders (the core weights of a layer: DSV4_CORE_FIELDS), one
 * token's mHC, the sink attention core, the MoE core and EP, the context /
 * KV buffers; V4.1 adds its roundings and roles around them. */
#ifndef DI_MODEL_DEEPSEEK_V41_INTERNAL_H
#define DI_MODEL_DEEPSEEK_V41_INTERNAL_H

#include "model/deepseek_v4_internal.h"
#include "model/deepseek_v41.h"
#include "model/engram.h"

#include <stdint.h>

#define DSV41_FP8_BLOCK 32          /* weight_block_size of the release */
#define DSV41_MAX_ROPE_PAIRS 256
#define DSV41_MAX_TOPK_EXPERTS 64
#define DSV41_MAX_HC 16

typedef struct dsv41_engram_w {
    const float *q_weight, *k_weight; /* (hc, D) */
    dsv4_linear wkv;                  /* ((hc+1)*D, n_cols*head_dim) FP8 */
    const uint8_t *table;             /* (rows, head_dim) e4m3, mapped */
    const uint8_t *table_scale;       /* (rows, head_dim/32) e8m0, mapped */
    int64_t rows;
    const di_engram_layer *hash;      /* multipliers, primes, offsets (in the layout) */
} dsv41_engram_w;

typedef struct dsv41_layer {
    DSV4_CORE_MEMBER;                   /* mHC, norms, attention projections, router, experts */
    /* compressor (kv sources) */
    dsv4_linear c_wkv, c_wgate;         /* (hd, D) BF16; wgate only for ratio 2 */
    const float *c_norm;                /* (hd) */
    /* indexer (index sources) */
    dsv4_linear i_wq_b;                 /* (IH*ihd, q_lora) */
    dsv4_linear i_wproj;                /* (IH, D) BF16 */
    dsv4_linear i_wk;                   /* (ihd, hd) BF16: index-K sources */
    const float *i_knorm;               /* (ihd) */
    /* MoE */
    const float *gate_bias;             /* (E) selection only */
    const float *gate_bias_vl;          /* (E) the same for image rows (gate.bias_vl), NULL without vision */
    dsv41_engram_w *engram;             /* Engram layers, else NULL */
    int32_t n_experts, n_used;          /* this layer's MoE (DSpark stages have their own) */
} dsv41_layer;

struct di_dsv41_model {
    di_dsv4_model base;       /* mapping, owned buffers, fp8 block: V4's binders use it */
    di_dsv41_hparams hp;
    di_dsv41_numerics num;
    const di_backend *be;     /* &base.be: the forward's operations (kernels/backend.h) */
    dsv4_linear embed, head;  /* (V, D) */
    const float *norm;        /* (D) */
    dsv41_layer *layers;      /* (n_layers) */
    dsv41_engram_w *engram;   /* (n_engram) */
    di_engram_vocab vocab;    /* token -> compressed id (identity when not compressed) */
    di_engram_layout layout;  /* hash constants of every Engram layer */
    float inv_freq_main[DSV41_MAX_ROPE_PAIRS], inv_freq_compress[DSV41_MAX_ROPE_PAIRS];
    struct dsv41_vision *vision; /* the image tower (deepseek_v41_vision.c), NULL = text only */
    /* DSpark drafter (deepseek_v41_dspark.c); n_draft 0 when the checkpoint has none */
    int32_t n_draft;
    dsv41_layer *mtp;           /* (n_draft) window-only stages with their own MoE */
    dsv4_linear main_proj;      /* (D, n_targets*D) FP8: target features -> main hidden */
    const float *main_norm;     /* (D) */
    const float *mtp_norm;      /* (D) the last stage's final norm */
    dsv4_linear markov_embed, markov_head; /* (V, rank) BF16 each; rank 0: none */
    float *conf_w;              /* (D + rank) the confidence head */
};

/* Per-layer record layout of one KV slot, in bytes. */
typedef struct dsv41_kv_layout {
    int32_t row;              /* bytes per position */
    int32_t off_win;          /* window K=V record */
    int32_t off_comp;         /* compressed entry (kv sources), -1 */
    int32_t off_state;        /* ratio 2: pending (latent, gate) f32 of the pair's first token, -1 */
    int32_t off_ikey;         /* index key (index-K sources), -1 */
} dsv41_kv_layout;

struct di_dsv41_kv {
    int32_t n_layers, n_blocks, block_size;
    di_dsv41_numerics num;
    dsv41_kv_layout *lay;     /* (n_layers) */
    uint8_t **data;           /* (n_layers) -> (slots, lay.row) */
    int32_t *tokens;          /* (slots) token id of each position (Engram n-grams) */
    /* DSpark (di_dsv41_kv_enable_dspark): each stage's window K=V record per
     * position, main keys from the main forward, draft keys over them */
    int32_t n_draft;
    int32_t draft_row;        /* bytes per position */
    uint8_t **draft;          /* (n_draft) -> (slots, draft_row) */
};

struct di_dsv41_ctx {
    const di_dsv41_model *m;
    int64_t cap_rows, cap_tasks, cap_mm, cap_attn;
    float *R, *Rn;            /* (n, N, D) residual copies */
    float *pre;               /* (n, N) carried pre mix */
    DSV4_ROWS_MEMBER;         /* mix, post, comb, h, y, qr, q, kvr, iq, iw, att, oa, router, experts */
    float *xq;                /* (n, D) h cast for the fp8 GEMMs */
    float *ckv, *cg;          /* (n, hd) compressor latent and gate */
    float *wg;                /* (n*K) routing weights of the gathered rows */
    di_dsv4_ep *ep;           /* expert parallelism (not owned), NULL = all experts here */
    di_dist *cp;              /* context parallel group (not owned), NULL = none */
    float skew_factor;        /* forced routing imbalance (di_dsv41_ctx_set_route_skew), 0 = off */
    int32_t skew_groups;
    float *eg;                /* (n, cols*ehd) Engram rows */
    float *ekv;               /* (n, (N+1)*D) Engram keys/value */
    int32_t *topk;            /* (n, index_topk) current selection, -1 filled */
    int32_t *cand;            /* (n, cand_topk_blocks) candidate blocks, -1 filled */
    float *mm_scratch;
    float *attn_scratch;      /* (tasks, attn_floats) */
    int64_t attn_floats;
    dsv4_keyset ks;           /* the attention's key lists and table (deepseek_v4_keys.c) */
    float *iscore;            /* (chunk rows, entries) indexer scores */
    int64_t cap_iscore;
    int32_t *seq_last;
    int64_t cap_seqs;
    int32_t record_layer;     /* di_dsv41_ctx_record_topk */
    int32_t *rec_topk;        /* (cap_rows, index_topk) */
    int32_t rec_valid;
    di_dsv41_hook_fn hook;    /* di_dsv41_ctx_set_hook, NULL */
    void *hook_user;
    const int32_t *row_token;   /* (rows) this forward's token ids (image rows: >= vocab) */
    float *feat;              /* (n, n_targets*D) DSpark target features of this forward */
    int64_t cap_feat;
    /* bounded replay (deepseek_v41_replay.c): the kept rows as a batch */
    int32_t kv_done_layer;    /* layer whose compressor already ran on every row this forward, -1 */
    int64_t cap_compact;
    int32_t *cb_token, *cb_seq, *cb_pos; /* (cap_compact) */
    uint8_t *cb_want;
    const float **cb_embd;
};

/* ---- numerics (deepseek_v41_quant.c) ------------------------------------ */

/* x <- bf16(x), round to nearest even. */
void dsv41_round_bf16(float *x, int64_t n);
/* x <- fp8act(x): e4m3 with one power-of-two scale per 32 values
 * (ceil(log2(max(amax, 1e-4) / 448))), DeepInfer's per-token cast. n % 32 == 0. */
void dsv41_round_fp8(float *x, int64_t n);
/* FP4 index vector (e2m1, power-of-two scale per 32) round trip. */
void dsv41_round_fp4_index(float *x, int64_t n);

/* Record sizes in bytes of n values in the KV formats. */
int32_t dsv41_mxfp8_bytes(int32_t n);  /* e4m3 + ue8m0 per 32 */
int32_t dsv41_nvfp4_bytes(int32_t n);  /* e2m1 pairs + e4m3 scale per 16 */
int32_t dsv41_fp4i_bytes(int32_t n);   /* e2m1 pairs + ue8m0 per 32 */
void dsv41_mxfp8_encode(const float *x, int32_t n, uint8_t *out);
void dsv41_mxfp8_decode(const uint8_t *in, int32_t n, float *out);
void dsv41_nvfp4_encode(const float *x, int32_t n, uint8_t *out);
void dsv41_nvfp4_decode(const uint8_t *in, int32_t n, float *out);
void dsv41_fp4i_encode(const float *x, int32_t n, uint8_t *out);
void dsv41_fp4i_decode(const uint8_t *in, int32_t n, float *out);

/* ---- load ----------------------------------------------------------------- */

di_status dsv41_bind_weights(di_dsv41_model *m, di_error *err);

/* ---- blocks --------------------------------------------------------------- */

/* y = x W^T with the policy's input cast (fp8act before FP8/FP4 weights in
 * the faithful mode) and output rounding (bf16 when round_out). x is
 * modified when it is cast. */
void dsv41_linear(const di_dsv41_ctx *c, const dsv4_linear *w, float *x, int64_t ldx, float *y, int64_t ldy,
                  int64_t n, int round_out, di_threadpool *pool);
static inline int dsv41_faithful(const di_dsv41_ctx *c) { return c->m->num == DI_DSV41_NUMERICS_DEEPINFER; }

/* RMSNorm of one vector with the policy's rounding of the output. */
void dsv41_norm(const di_dsv41_ctx *c, const float *x, const float *w, float *out, int64_t n);

/* Attention of layer il on h (n, D) -> y (n, D). With c->cp collective
 * (deepseek_v41_cp.c): every rank calls it for every layer, n may be 0. */
di_status dsv41_attention(di_dsv41_ctx *c, di_dsv41_kv *kv, int32_t il, const di_batch *b, di_threadpool *pool,
                          di_error *err);
/* Closes compressed entry (p+1)/ratio-1 of seq at row position p (pools or
 * takes the latent, normalizes, rotates, stores; index key too). lat/gate:
 * that row's f32 compressor projections; tmp: 2 hd + ihd floats. */
void dsv41_close_entry(di_dsv41_ctx *c, di_dsv41_kv *kv, int32_t il, const di_batch *b, int32_t seq, int32_t p,
                       const float *lat, const float *gate, float *tmp);
/* The compressor of kv source il (projections, pending pair states, the
 * entries the rows close) on every row of b; dsv41_attention runs it unless
 * c->kv_done_layer == il. */
void dsv41_compress(di_dsv41_ctx *c, di_dsv41_kv *kv, int32_t il, const di_batch *b, di_threadpool *pool);
/* Bounded replay (deepseek_v41_replay.c). Validates b->replay_from and
 * says whether any row is clipped (then the forward compacts at
 * n_prefill_layer). */
di_status dsv41_replay_validate(const di_dsv41_ctx *c, const di_batch *b, int *any_clipped, di_error *err);
/* Keeps the rows of b at or past replay_from: moves their per-row state
 * (residual copies, mHC mixes, sublayer input, top-k, candidate blocks) to
 * the front and fills *out with their rows; returns how many. */
di_status dsv41_replay_compact(di_dsv41_ctx *c, const di_batch *b, di_batch *out, int64_t *n_kept, di_error *err);
/* CP exchanges: the token ids of the step's rows (once per forward), and
 * per layer every rank's window records and compressor projections, the
 * entries they close closed on every rank (deepseek_v41_cp.c). */
di_status dsv41_cp_tokens(di_dsv41_ctx *c, di_dsv41_kv *kv, const di_batch *b, di_error *err);
di_status dsv41_cp_layer(di_dsv41_ctx *c, di_dsv41_kv *kv, int32_t il, const di_batch *b, float *tmp,
                         di_error *err);
/* The rows of b attend through the backend's sparse attention, in chunks
 * of rows (dsv4_keyset_chunk_rows over lists of up to ld keys of head_dim): *r0 <- the
 * chunk's first row, list_row(user, i) writes chunk row i's key addresses
 * into c->ks, src decodes them; then each output c->att row is rounded
 * (faithful), rotated back at its position with inv_freq, rounded again. */
di_status dsv41_sparse_attend(di_dsv41_ctx *c, const dsv4_keyset_src *src, const di_batch *b, int64_t ld,
                              const float *sink, const float *inv_freq, void (*list_row)(void *user, int64_t i),
                              void *user, int64_t *r0, di_threadpool *pool, di_error *err);
/* x (n_rows, len) <- RMSNorm(x) * w on the backend, bf16 when faithful (dsv41_norm's rows). */
void dsv41_norm_rows(const di_dsv41_ctx *c, float *x, const float *w, int64_t n_rows, int64_t len, di_threadpool *pool);
/* y (n, D) = the grouped output projection of c->att. */
void dsv41_out_proj(di_dsv41_ctx *c, const dsv41_layer *L, int64_t n, di_threadpool *pool);
/* Window-only attention of a DSpark stage over its own records (kv->draft[stage]):
 * each row writes its key at its position, then attends positions
 * key_end[row] - window + 1 .. key_end[row] (the main keys up to the last
 * accepted position plus the whole draft block: bidirectional in the block). */
di_status dsv41_draft_attention(di_dsv41_ctx *c, di_dsv41_kv *kv, int32_t stage, const di_batch *b,
                                const int32_t *key_end, int32_t window, di_threadpool *pool, di_error *err);
/* The main keys of every row of b into each stage's records, from the rows'
 * target features c->feat (update_main_cache). */
void dsv41_draft_main_keys(di_dsv41_ctx *c, di_dsv41_kv *kv, const di_batch *b, di_threadpool *pool);
/* Shared blocks of the forward (deepseek_v41.c), used by the drafter too. */
di_status dsv41_ctx_reserve(di_dsv41_ctx *c, int64_t rows, int64_t n_tasks, int64_t n_seqs, int32_t max_pos,
                            di_error *err);
void dsv41_hc_pre(di_dsv41_ctx *c, const dsv4_linear *fn, const float *base, const float *scale, int64_t n,
                  di_threadpool *pool);
void dsv41_hc_post(di_dsv41_ctx *c, int64_t n, di_threadpool *pool);
void dsv41_lin_apply(const di_dsv41_ctx *c, const dsv4_linear *w, const float *x, int64_t ldx, float *y,
                     int64_t ldy, int64_t n, di_threadpool *pool);
int64_t dsv41_attention_scratch_floats(const di_dsv41_model *m, int32_t max_pos);
int64_t dsv41_slot(const di_batch *b, int32_t seq, int32_t pos);
/* MoE of layer il on h (n, D) -> y (n, D). With c->ep collective: every rank
 * calls it for every layer, n may be 0 (a placeholder step). */
di_status dsv41_moe(di_dsv41_ctx *c, int32_t il, int64_t n, di_threadpool *pool, di_error *err);
/* The same for a layer struct with its own expert counts (a DSpark stage):
 * ep_layer is the layer index the EP core knows it by, or -1 to run every
 * expert here. */
di_status dsv41_moe_layer(di_dsv41_ctx *c, const dsv41_layer *L, int32_t ep_layer, int64_t n, di_threadpool *pool,
                          di_error *err);

#endif
