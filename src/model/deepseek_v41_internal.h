/* DeepSeek-V4.1 internals shared by the deepseek_v41*.c files. The pieces:
 *
 *   deepseek_v41_config.c  config.json -> hparams + the layer role table
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
 * MXFP4 weights, batch-invariant products), RMSNorm, interleaved rotary and
 * the weight binders. */
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
    dsv4_linear hc_attn_fn, hc_ffn_fn;  /* ((2+N)*N, N*D) F32 */
    const float *hc_attn_base, *hc_attn_scale, *hc_ffn_base, *hc_ffn_scale;
    const float *attn_norm, *ffn_norm;  /* (D) */
    dsv4_linear wq_a;                   /* (q_lora, D) */
    const float *q_norm;                /* (q_lora) */
    dsv4_linear wq_b;                   /* (H*hd, q_lora) */
    dsv4_linear wkv;                    /* (hd, D) */
    const float *kv_norm;               /* (hd) */
    dsv4_linear wo_a;                   /* (G*o_lora, H*hd/G) */
    dsv4_linear wo_b;                   /* (D, G*o_lora) */
    const float *sink;                  /* (H) */
    /* compressor (kv sources) */
    dsv4_linear c_wkv, c_wgate;         /* (hd, D) BF16; wgate only for ratio 2 */
    const float *c_norm;                /* (hd) */
    /* indexer (index sources) */
    dsv4_linear i_wq_b;                 /* (IH*ihd, q_lora) */
    dsv4_linear i_wproj;                /* (IH, D) BF16 */
    dsv4_linear i_wk;                   /* (ihd, hd) BF16: index-K sources */
    const float *i_knorm;               /* (ihd) */
    /* MoE */
    dsv4_linear gate;                   /* (E, D) */
    const float *gate_bias;             /* (E) selection only */
    dsv4_linear *w1, *w2, *w3;          /* (E) each */
    dsv4_linear sh_w1, sh_w2, sh_w3;
    dsv41_engram_w *engram;             /* Engram layers, else NULL */
} dsv41_layer;

struct di_dsv41_model {
    di_dsv4_model base;       /* mapping, owned buffers, fp8 block: V4's binders use it */
    di_dsv41_hparams hp;
    di_dsv41_numerics num;
    const di_cpu_kernels *k;
    dsv4_linear embed, head;  /* (V, D) */
    const float *norm;        /* (D) */
    dsv41_layer *layers;      /* (n_layers) */
    dsv41_engram_w *engram;   /* (n_engram) */
    di_engram_vocab vocab;    /* token -> compressed id (identity when not compressed) */
    di_engram_layout layout;  /* hash constants of every Engram layer */
    float inv_freq_main[DSV41_MAX_ROPE_PAIRS], inv_freq_compress[DSV41_MAX_ROPE_PAIRS];
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
};

struct di_dsv41_ctx {
    const di_dsv41_model *m;
    int64_t cap_rows, cap_tasks, cap_mm, cap_attn;
    float *R, *Rn;            /* (n, N, D) residual copies */
    float *pre;               /* (n, N) carried pre mix */
    float *mix;               /* (n, (2+N)*N) */
    float *post, *comb;       /* (n, N), (n, N, N) */
    float *h, *y;             /* (n, D) */
    float *xq;                /* (n, D) h cast for the fp8 GEMMs */
    float *qr;                /* (n, q_lora) */
    float *q;                 /* (n, H*hd) */
    float *kvr;               /* (n, hd) */
    float *ckv, *cg;          /* (n, hd) compressor latent and gate */
    float *iq;                /* (n, IH*ihd) */
    float *iw;                /* (n, IH) */
    float *att;               /* (n, H*hd) */
    float *oa;                /* (n, G*o_lora) */
    float *logit;             /* (n, E) */
    int32_t *sel;             /* (n, K) */
    float *selw;              /* (n, K) */
    float *ysel;              /* (n*K, D) */
    int32_t *grow;            /* (n*K) */
    float *xg, *g1, *g3, *yg; /* (n*K, D), (n*K, F) x2, (n*K, D) */
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
    int32_t *seq_last;
    int64_t cap_seqs;
    int32_t record_layer;     /* di_dsv41_ctx_record_topk */
    int32_t *rec_topk;        /* (cap_rows, index_topk) */
    int32_t rec_valid;
    di_dsv41_hook_fn hook;    /* di_dsv41_ctx_set_hook, NULL */
    void *hook_user;
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
/* CP exchanges: the token ids of the step's rows (once per forward), and
 * per layer every rank's window records and compressor projections, the
 * entries they close closed on every rank (deepseek_v41_cp.c). */
di_status dsv41_cp_tokens(di_dsv41_ctx *c, di_dsv41_kv *kv, const di_batch *b, di_error *err);
di_status dsv41_cp_layer(di_dsv41_ctx *c, di_dsv41_kv *kv, int32_t il, const di_batch *b, float *tmp,
                         di_error *err);
int64_t dsv41_attention_scratch_floats(const di_dsv41_model *m, int32_t max_pos);
int64_t dsv41_slot(const di_batch *b, int32_t seq, int32_t pos);
/* MoE of layer il on h (n, D) -> y (n, D). With c->ep collective: every rank
 * calls it for every layer, n may be 0 (a placeholder step). */
di_status dsv41_moe(di_dsv41_ctx *c, int32_t il, int64_t n, di_threadpool *pool, di_error *err);

#endif
