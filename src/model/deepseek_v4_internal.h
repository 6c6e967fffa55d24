/* DeepSeek-V4 internals shared by the deepseek_v4*.c files (not a public
 * header). The pieces:
 *
 *   deepseek_v4_config.c  the family's config reader (both variants): the shared
 *                         keys, V4's own, the layer role table; every value checked
 *   deepseek_v4_load.c    tensors bound by name, shapes and dtypes checked
 *   deepseek_v4_linear.c  the linears' CPU-table forms for the tests (the forwards
 *                         call the model's backend: dsv4_lin, be->ops->scaled_linear)
 *   deepseek_v4_keys.c    the attention's key lists and table (be->ops->sparse_attention)
 *   deepseek_v4_attn.c    attention: window, compressor, indexer, sink (through the backend)
 *   deepseek_v4_moe.c     router (sqrt-softplus, bias, hash) and experts
 *   deepseek_v4_ep.c      expert parallelism: dispatch/combine over di_dist, EPLB
 *   deepseek_v4_mhc.c     manifold-constrained hyper-connections
 *   deepseek_v4.c         KV cache, contexts, the forward over a batch
 *
 * Shared with DeepSeek-V4.1 (deepseek_v41_internal.h), one copy each: the
 * linears, the core-weight binders, one token's mHC, the sink attention
 * core (deepseek_v4_attn.c), the MoE core (deepseek_v4_moe_core.c: top-K
 * selection, per-expert gather loop, routed sum, EP tables), the EP core,
 * the context / KV buffers (deepseek_v4_scratch.c).
 */
#ifndef DI_MODEL_DEEPSEEK_V4_INTERNAL_H
#define DI_MODEL_DEEPSEEK_V4_INTERNAL_H

#include "format/hf_config.h"
#include "format/safetensors.h"
#include "kernels/backend.h"
#include "kernels/cpu/kernels.h"
#include "model/deepseek_v4.h"

#include <stdint.h>

#define DSV4_MAX_ROPE_PAIRS 256  /* n_rot / 2 limit (the real model has 32) */

/* One linear layer W (n_out, n_in) as the checkpoint stores it: the
 * backend seam's operand (kernels/backend.h, di_scaled_weight), so the
 * forwards hand their weights to be->ops->scaled_linear as they are. */
typedef di_scaled_kind dsv4_wkind;
#define DSV4_W_PLAIN DI_SCALED_PLAIN /* F32 / F16 / BF16 rows read by di_matmul */
#define DSV4_W_FP8 DI_SCALED_FP8     /* e4m3 bytes, scale[o / B][i / B] (floats owned by the model) */
#define DSV4_W_MXFP4 DI_SCALED_MXFP4 /* HF split layout: (n_out, n_in/2) e2m1 pairs, (n_out, n_in/32) e8m0 */
typedef di_scaled_weight dsv4_linear;

/* A compressor (the attention's, or the indexer's at index_head_dim). */
typedef struct dsv4_compressor {
    int32_t dim;          /* output width: head_dim or index_head_dim */
    int32_t coff;         /* 2 with overlap (CSA: series Ca and Cb), 1 without (HCA) */
    dsv4_linear wkv, wgate; /* (coff*dim, n_embd) */
    const float *ape;     /* (ratio, coff*dim) position bias added to the gate */
    const float *norm;    /* (dim) RMSNorm weight of the pooled row */
} dsv4_compressor;

/* The weights every layer of the family has, V4 and V4.1 alike: the mHC
 * maps of its two sublayers, the norms, the attention's projections and
 * sink, the MoE's router and experts. A layer struct holds them as an
 * anonymous union of the fields (L->wq_a, read by the forward) and one
 * named view (L->core, filled by dsv4_bind_core_attn / _moe); both name
 * the same members in the same order. Shapes: D = n_embd, N = hc_mult,
 * H heads of hd, G output groups, E experts of width F. */
#define DSV4_CORE_FIELDS                                                                        \
    dsv4_linear hc_attn_fn, hc_ffn_fn;     /* ((2+N)*N, N*D) F32 */                             \
    const float *hc_attn_base, *hc_attn_scale, *hc_ffn_base, *hc_ffn_scale; /* ((2+N)*N), (3) */ \
    const float *attn_norm, *ffn_norm;     /* (D) */                                            \
    dsv4_linear wq_a;                      /* (q_lora, D) */                                    \
    const float *q_norm;                   /* (q_lora) */                                       \
    dsv4_linear wq_b;                      /* (H*hd, q_lora) */                                 \
    dsv4_linear wkv;                       /* (hd, D) */                                        \
    const float *kv_norm;                  /* (hd) */                                           \
    dsv4_linear wo_a;                      /* (G*o_lora, H*hd/G) */                             \
    dsv4_linear wo_b;                      /* (D, G*o_lora) */                                  \
    const float *sink;                     /* (H) */                                            \
    dsv4_linear gate;                      /* (E, D) router */                                  \
    dsv4_linear *w1, *w2, *w3;             /* (E) each: (F, D), (D, F), (F, D) */               \
    dsv4_linear sh_w1, sh_w2, sh_w3;       /* the shared expert */
typedef struct dsv4_core_w {
    DSV4_CORE_FIELDS
} dsv4_core_w;
#define DSV4_CORE_MEMBER                                                                        \
    union {                                                                                     \
        dsv4_core_w core;                                                                       \
        struct {                                                                                \
            DSV4_CORE_FIELDS                                                                    \
        };                                                                                      \
    }

/* The sizes dsv4_bind_core_* check the core tensors against. */
typedef struct dsv4_core_dims {
    int64_t n_embd, hc_mult, q_lora, n_heads, head_dim, o_groups, o_lora, moe_ff;
} dsv4_core_dims;

typedef struct dsv4_layer {
    di_dsv4_attn_kind kind;
    int32_t ratio;        /* compression ratio; 0 for window-only */
    int hash_moe;         /* routes by tid2eid */
    DSV4_CORE_MEMBER;
    dsv4_compressor comp; /* CSA/HCA */
    dsv4_compressor icomp;/* CSA: the indexer's compressor */
    dsv4_linear idx_wq_b; /* CSA: (index_heads*index_dim, q_lora) */
    dsv4_linear idx_wproj;/* CSA: (index_heads, n_embd) */
    const float *gate_bias; /* (n_experts) selection-only bias; NULL on hash layers */
    int32_t *tid2eid;     /* (n_vocab, n_experts_used) owned, validated; hash layers */
} dsv4_layer;

/* One V3-style MTP module of the V4 base release (`mtp.<i>.` in the
 * checkpoint; DeepSeek's inference MTPBlock): a full block (attention of its
 * own kind, MoE, mHC) fed by e_proj(enorm(embed(token))) + h_proj(hnorm(h))
 * of the main model's last hidden copies, with its own mHC head collapse
 * and final norm before the shared vocabulary head. Loaded and validated;
 * not run yet. */
typedef struct dsv4_mtp {
    dsv4_layer block;
    dsv4_linear e_proj, h_proj;       /* (n_embd, n_embd) */
    const float *enorm, *hnorm, *norm; /* (n_embd) */
    dsv4_linear hc_head_fn;           /* (N, N*n_embd) */
    const float *hc_head_base, *hc_head_scale; /* (N), (1) */
} dsv4_mtp;

struct di_dsv4_model {
    di_dsv4_hparams hp;
    di_backend be;        /* the forward's operations (kernels/backend.h): the CPU backend over the load's table */
    di_safetensors_checkpoint *ck; /* owned */
    dsv4_linear embed;    /* (n_vocab, n_embd) */
    dsv4_linear head;     /* (n_vocab, n_embd) */
    const float *norm;    /* (n_embd) */
    dsv4_linear hc_head_fn; /* (N, N*n_embd) */
    const float *hc_head_base, *hc_head_scale; /* (N), (1) */
    dsv4_layer *layers;   /* (n_layers) */
    float inv_freq_main[DSV4_MAX_ROPE_PAIRS];     /* (n_rot/2) window-only layers */
    float inv_freq_compress[DSV4_MAX_ROPE_PAIRS]; /* (n_rot/2) compressed layers */
    void **owned;         /* (n_owned) buffers freed with the model */
    int32_t n_owned;
    dsv4_mtp *mtp;        /* (n_mtp) when the checkpoint has mtp.* tensors, else NULL */
    int32_t n_mtp;
    /* load-time bookkeeping: every mtp.* tensor bound, so leftovers
     * (unknown names) are reported */
    const void **mtp_bound; /* (mtp_bound_cap) tensor addresses */
    int64_t n_mtp_bound, mtp_bound_cap;
};

/* The per-row scratch every layer of the family uses, V4 and V4.1 alike,
 * held by a context as DSV4_ROWS_MEMBER (the fields by name, c->h, and the
 * view c->rows that dsv4_rows_table lists). rows = the batch's rows; shapes
 * as DSV4_CORE_FIELDS, IH index heads of ihd, K experts a row. */
#define DSV4_ROWS_FIELDS                                                                        \
    float *mix;               /* (rows, (2+N)*N) mHC projections */                             \
    float *post, *comb;       /* (rows, N), (rows, N, N) */                                     \
    float *h, *y;             /* (rows, D) sublayer input / output */                           \
    float *qr;                /* (rows, q_lora) */                                              \
    float *q;                 /* (rows, H*hd) */                                                \
    float *kvr;               /* (rows, hd) */                                                  \
    float *iq;                /* (rows, IH*ihd) indexer queries */                              \
    float *iw;                /* (rows, IH) indexer head weights */                             \
    float *att;               /* (rows, H*hd) attention output */                               \
    float *oa;                /* (rows, G*o_lora) grouped projection output */                  \
    float *logit;             /* (rows, E) router logits */                                     \
    float *vsel;              /* (rows, E) selection values (score + bias, or skewed draws) */  \
    int32_t *sel;             /* (rows, K) chosen experts, ascending */                         \
    float *selw;              /* (rows, K) their weights */                                     \
    float *ysel;              /* (rows*K, D) expert outputs */                                  \
    int32_t *grow;            /* (rows*K) gathered (row*K + k) of one expert */                 \
    float *xg, *g1, *g3, *yg; /* (rows*K, D), (rows*K, F) x2, (rows*K, D) */
typedef struct dsv4_rows {
    DSV4_ROWS_FIELDS
} dsv4_rows;
#define DSV4_ROWS_MEMBER                                                                        \
    union {                                                                                     \
        dsv4_rows rows;                                                                         \
        struct {                                                                                \
            DSV4_ROWS_FIELDS                                                                    \
        };                                                                                      \
    }

/* Per-layer row of the KV cache, in elements (see deepseek_v4.c). */
typedef struct dsv4_kv_layout {
    int32_t row;          /* elements per position */
    int32_t off_raw_kv, off_raw_gate, off_comp;    /* attention compressor; -1 if none */
    int32_t off_iraw_kv, off_iraw_gate, off_icomp; /* indexer; -1 if none */
} dsv4_kv_layout;

struct di_dsv4_kv {
    int32_t n_layers, n_blocks, block_size;
    di_dtype dtype;       /* F32 or F16 */
    dsv4_kv_layout *lay;  /* (n_layers) */
    void **data;          /* (n_layers) -> (n_blocks*block_size, lay.row) */
};

/* The key set of one attention stage (deepseek_v4_keys.c), V4 and V4.1
 * alike: the operands of be->ops->sparse_attention / index_scores. Each
 * row r lists the cache records it visits by address (addr[r][t], t <
 * n_idx[r], a model-defined number below n_addr); dsv4_keyset_index gives
 * each distinct record one table row (idx[r][t]) and dsv4_keyset_fill
 * decodes them into keys (n_keys, dim) on the pool. */
typedef struct dsv4_keyset {
    int64_t *addr;        /* (rows, ld) */
    int32_t *idx;         /* (rows, ld) */
    int32_t *n_idx;       /* (rows) */
    int64_t ld, cap_list, cap_idx, cap_rows;
    int32_t *map;         /* (cap_map) address -> table row, -1 between stages */
    int64_t cap_map;
    int64_t *key_addr;    /* (n_keys) table row -> address */
    int64_t n_keys, cap_keys;
    float *keys;          /* (n_keys, dim) */
    int64_t cap_key_floats;
} dsv4_keyset;

/* Forward scratch, grown to the largest batch seen (deepseek_v4.c). */
struct di_dsv4_ctx {
    const di_dsv4_model *m;
    int64_t cap_rows, cap_seqs, cap_attn_floats; /* rows, seq slots, floats in attn_scratch */
    int64_t cap_mm_floats; /* floats in mm_scratch */
    float *X, *Xn;        /* (rows, N, D) residual copies, current and next */
    float *flat;          /* (rows, N*D) normalized copies (mHC input) */
    DSV4_ROWS_MEMBER;
    float *ckv, *cg;      /* (rows, 2*hd) compressor projections */
    float *ikv, *ig;      /* (rows, 2*ihd) indexer compressor projections */
    float *pool_buf;      /* the compressor groups' tables (pool_groups, deepseek_v4_attn.c) */
    int64_t cap_pool_buf;
    float *mm_scratch;    /* (cap_mm_floats): dsv4_linear_scratch_floats(rows, max n_in, threads) */
    float *attn_scratch;  /* (tasks, cap_attn_floats / tasks) */
    int64_t attn_floats;  /* per task, for this forward */
    int32_t *seq_last;    /* (seqs) */
    dsv4_keyset ks;       /* the attention's key lists and table (deepseek_v4_keys.c) */
    float *iscore;        /* (chunk rows, entries) indexer scores */
    int32_t *ipick;       /* (rows, index_topk) the indexer's picks, ascending */
    int64_t cap_iscore, cap_ipick;
    /* per-block timers (di_dsv4_ctx_set_profile); prof_on 0 costs a branch */
    int prof_on;
    di_dsv4_profile prof;
    di_dsv4_ep *ep;       /* expert parallelism (not owned), NULL = all experts here */
    const int32_t *ep_plen;   /* EP, per row of the last MoE: leading experts already summed */
    const float *ep_partial;  /* (rows, D) that sum (the owner's, in the one-process order) */
    di_dist *cp;          /* context parallelism group (not owned), NULL = none */
    int32_t *cp_rows;     /* (cap_cp_rows, 2) (seq, pos) of the CP group's rows this layer */
    int64_t cap_cp_rows;
    float skew_factor;    /* forced routing imbalance (di_dsv4_ctx_set_route_skew), 0 = off */
    int32_t skew_groups;
};

/* ---- per-block timers ---------------------------------------------------- */

/* Seconds on a monotonic clock when c profiles, else 0 (no clock read). */
double dsv4_prof_now(const di_dsv4_ctx *c);
/* Adds now - t0 to block blk when c profiles. */
void dsv4_prof_add(di_dsv4_ctx *c, di_dsv4_block blk, double t0);
/* Weight bytes one dsv4_linear_apply reads (data and scales). */
double dsv4_linear_bytes(const dsv4_linear *w);

/* ---- config and load ---------------------------------------------------- */

/* The family's one config reader (deepseek_v4_config.c): dir/config.json
 * -> *hp as variant v reads it, the layer role table built and checked. */
di_status dsv4_read_config(const char *dir, di_dsv4_variant v, di_dsv4_hparams *hp, di_error *err);
/* What a variant's own keys give the topology builder: each layer's
 * compression ratio and the layers that own compressed KV, an indexer,
 * index keys (ascending), the candidate source (-1). */
typedef struct dsv4_sources {
    int32_t ratio[DI_DSV4_MAX_LAYERS];
    int32_t kv[DI_DSV4_MAX_LAYERS], idx[DI_DSV4_MAX_LAYERS], idxk[DI_DSV4_MAX_LAYERS];
    int32_t n_kv, n_idx, n_idxk, cand;
} dsv4_sources;
/* V4.1's column of the reader (deepseek_v41_config.c): the text section
 * and the root checks; then its own keys, shape checks and sources. */
di_status dsv41_config_open(const di_hf_config *root, di_hf_config **text, di_error *err);
di_status dsv41_config_read(const di_hf_config *root, const di_hf_config *t, di_dsv4_hparams *hp, dsv4_sources *src,
                            di_error *err);
/* The config readers' shorthand (V4 and V4.1; format/hf_config.h): read one
 * range-checked value of cfg into dst, or jump to done with s set. */
#define DSV4_CFG_INT_OR(cfg, key, lo, hi, def, dst)                                           \
    do {                                                                                      \
        int64_t v_;                                                                           \
        if ((s = di_hf_config_get_int_or(cfg, key, lo, hi, def, &v_, err))) goto done;        \
        (dst) = (int32_t)v_;                                                                  \
    } while (0)
#define DSV4_CFG_INT(cfg, key, lo, hi, dst)                                                   \
    do {                                                                                      \
        int64_t v_;                                                                           \
        if ((s = di_hf_config_get_int(cfg, key, lo, hi, &v_, err))) goto done;                \
        (dst) = (int32_t)v_;                                                                  \
    } while (0)
#define DSV4_CFG_FLOAT_OR(cfg, key, lo, hi, def, dst)                                         \
    do {                                                                                      \
        double v_;                                                                            \
        if ((s = di_hf_config_get_float_or(cfg, key, lo, hi, def, &v_, err))) goto done;      \
        (dst) = v_;                                                                           \
    } while (0)
di_status dsv4_bind_weights(di_dsv4_model *m, di_error *err);
/* The binders bind_weights uses, for DeepSeek-V4.1's loader: m supplies the
 * mapping (m->ck), the FP8 block edge (m->hp.fp8_block) and the owned list. */
di_status dsv4_bind_linear(di_dsv4_model *m, const char *base, int64_t n_out, int64_t n_in, int allow_mx,
                           dsv4_linear *w, di_error *err);
di_status dsv4_bind_vec(di_dsv4_model *m, const char *name, int64_t n, const float **out, di_error *err);
di_status dsv4_bind_float_matrix(di_dsv4_model *m, const char *name, int64_t rows, int64_t cols, dsv4_linear *w,
                                 di_error *err);
/* The loaders' shorthand (V4 and V4.1): bind the tensor "<pfx>.<suffix>"
 * of model m into dst; the caller has char name[], di_status s and
 * di_error *err in scope and returns s on failure. */
#define DSV4_BIND_LIN(m, pfx, suffix, o, i, mx, dst)                                          \
    do {                                                                                      \
        snprintf(name, sizeof name, "%s.%s", pfx, suffix);                                    \
        if ((s = dsv4_bind_linear(m, name, o, i, mx, dst, err))) return s;                    \
    } while (0)
#define DSV4_BIND_VEC(m, pfx, suffix, n, dst)                                                 \
    do {                                                                                      \
        snprintf(name, sizeof name, "%s.%s", pfx, suffix);                                    \
        if ((s = dsv4_bind_vec(m, name, n, dst, err))) return s;                              \
    } while (0)
/* The core weights of the layer under pfx ("layers.3", "mtp.0"), in the
 * order the loaders report a missing one: _attn the mHC maps, norms,
 * attention projections and sink; _moe the n_exp routed experts
 * (ffn.experts.<e>.w1/w2/w3, MXFP4 allowed, in one owned array) and the
 * shared one (the router and its bias are the model's: V4 routes hash
 * layers by tid2eid). */
di_status dsv4_bind_core_attn(di_dsv4_model *m, const char *pfx, const dsv4_core_dims *d, dsv4_core_w *w,
                              di_error *err);
di_status dsv4_bind_core_moe(di_dsv4_model *m, const char *pfx, const dsv4_core_dims *d, int32_t n_exp,
                             dsv4_core_w *w, di_error *err);
/* Rotary inverse frequencies (n_rot/2) for base theta, YaRN from hp when yarn. */
void dsv4_build_inv_freq(const di_dsv4_hparams *hp, double base, int yarn, float *out);
/* Keeps p until the model is freed; frees p and fails on no memory. */
di_status dsv4_own(di_dsv4_model *m, void *p, di_error *err);

/* ---- buffers of contexts and caches (deepseek_v4_scratch.c) ------------- */

/* One scratch buffer of a context: *pp holds n elements of size bytes. */
typedef struct dsv4_buf {
    void *pp;             /* the address of the buffer's pointer */
    int64_t n;
    size_t size;
} dsv4_buf;

/* *pp <- a fresh n-element buffer (contents lost); 0 on no memory, *pp kept. */
int dsv4_regrow(void *pp, int64_t n, size_t size);
/* Grows *pp to n elements when n > *cap (then *cap = n); 0 on no memory,
 * with *cap 0 so the next call tries again. */
int dsv4_grow(void *pp, int64_t *cap, int64_t n, size_t size);
/* dsv4_regrow over a table; 0 as soon as one fails. */
int dsv4_regrow_all(const dsv4_buf *b, size_t n_bufs);
/* Frees every buffer of a table (n and size unread) and clears the pointers. */
void dsv4_free_all(const dsv4_buf *b, size_t n_bufs);
static inline int64_t dsv4_max64(int64_t a, int64_t b) { return a > b ? a : b; }
/* A context's per-row scratch for n rows as a table (the context's
 * row_bufs): fills t (at most DSV4_ROW_BUFS_MAX entries), returns the count. */
#define DSV4_ROW_BUFS_MAX 48
typedef size_t (*dsv4_rows_fn)(void *ctx, int64_t n, dsv4_buf *t);
/* Regrows every buffer of ctx's table to n rows when n > *cap_rows
 * (contents lost), then *cap_rows = n; arch names the model in the error. */
di_status dsv4_rows_grow(void *ctx, dsv4_rows_fn table, int64_t n, int64_t *cap_rows, const char *arch,
                         di_error *err);
/* Frees every buffer of ctx's table. */
void dsv4_rows_free(void *ctx, dsv4_rows_fn table);
/* A context's table for n rows of hp's model into t: the entries of r's
 * buffers (DSV4_ROWS_FIELDS), then the n_own of its own; returns the count
 * (at most DSV4_ROW_BUFS_MAX: DSV4_ROWS_N + n_own). */
#define DSV4_ROWS_N (sizeof(dsv4_rows) / sizeof(float *))
size_t dsv4_rows_table(dsv4_rows *r, const di_dsv4_hparams *hp, int64_t n, const dsv4_buf *own, size_t n_own,
                       dsv4_buf *t);
/* The widest input of a layer's core linears (mHC maps, attention and
 * output projections, experts): the linear scratch is sized from it. */
int64_t dsv4_core_max_in(const di_dsv4_hparams *hp);
/* *out <- slots * row_bytes zeroed bytes (one KV layer), overflow checked. */
di_status dsv4_kv_alloc(void **out, uint64_t slots, uint64_t row_bytes, di_error *err);
/* The start of both caches' create: checks the block counts and allocates
 * lay (n_layers entries of lay_size bytes) and data (the address of a
 * pointer array: n_layers NULL pointers); the caller frees both on failure. */
di_status dsv4_kv_begin(int32_t n_blocks, int32_t block_size, int32_t n_layers, size_t lay_size, void **lay,
                        void *data, di_error *err);
/* The rollback check both caches make (arch names the model in the message):
 * their records are per position, so nothing is moved. */
di_status dsv4_kv_check_truncate(const char *arch, int32_t n_blocks, int32_t block_size, int32_t seq_slot,
                                 int32_t n_keep, di_error *err);

/* ---- linear ------------------------------------------------------------- */

/* The forwards' linears, through the model's backend (kernels/backend.h):
 * y (n_rows, ldy) = x (n_rows, ldx) W^T, batch invariant (each y[r][o] one
 * fixed sequence of float operations); rows: dst (n, ldd) row i = row
 * ids[i] of W as floats; scratch: what dsv4_lin needs. */
static inline int64_t dsv4_lin_scratch(const di_backend *be, int64_t n_rows, int64_t n_in, int64_t n_tasks,
                                       int n_threads) {
    return be->ops->scaled_linear_scratch_floats(be, n_rows, n_in, n_tasks, n_threads);
}
static inline void dsv4_lin(const di_backend *be, const dsv4_linear *w, const float *x, int64_t ldx, float *y,
                            int64_t ldy, int64_t n_rows, float *scratch, di_threadpool *pool) {
    be->ops->scaled_linear(be, w, x, ldx, y, ldy, n_rows, scratch, pool);
}
static inline void dsv4_lin_rows(const di_backend *be, const dsv4_linear *w, const int32_t *ids, int64_t n,
                                 float *dst, int64_t ldd) {
    be->ops->scaled_rows(be, w, ids, n, dst, ldd);
}
/* The same on the CPU backend over kernel table k (the tests' form; EP
 * sizes its host scratch with dsv4_linear_scratch_floats). */
int64_t dsv4_linear_scratch_floats(int64_t n_rows, int64_t n_in, int64_t n_tasks, int n_threads);
void dsv4_linear_apply(const di_cpu_kernels *k, const dsv4_linear *w, const float *x, int64_t ldx,
                       float *y, int64_t ldy, int64_t n_rows, float *scratch, di_threadpool *pool);
/* The view of rows [r0, r0 + n) of w (the grouped output projection's
 * groups): data, FP8 scale row offset and MXFP4 scales moved along. */
dsv4_linear dsv4_linear_rows(const dsv4_linear *w, int64_t r0, int64_t n);
/* Row o of W as floats (n_in), on the CPU backend over k (the tests' form). */
void dsv4_linear_row(const di_cpu_kernels *k, const dsv4_linear *w, int64_t o, float *dst);

/* One vector's rotary (the host code's single entries): di_rope_tail,
 * kernels/cpu/kernels.h; a batch's: the backend's rope_rows. */

/* Per-row passes on the pool: di_threadpool_rows (base/threadpool.h). */

/* ---- mHC, shared by the family (deepseek_v4_mhc.c) ----------------------
 * V4 and V4.1 (shifted: the collapse uses the previous sublayer's pre, the
 * mixes are scaled by the copies' rsqrt first) run the backend's mhc_pre
 * (kinds DI_MHC_V4 / DI_MHC_SHIFTED), mhc_post and mhc_head. */

/* The post pass of a sublayer over n rows: Xn_r <- expand(X_r, y_r, post_r,
 * comb_r) (rounded to bf16 when round_bf16: V4.1 faithful) by the backend;
 * then *X and *Xn swap (the new copies become *X). */
void dsv4_mhc_post(const di_backend *be, float **X, float **Xn, const float *y, const float *post, const float *comb,
                   int32_t N, int32_t D, int64_t n, int round_bf16, di_threadpool *pool);

/* ---- blocks (each over the rows of one batch) ---------------------------- */

/* mHC before a sublayer: from X (n, N, D) computes post (n, N), comb
 * (n, N, N) and the collapsed input h (n, D). fn/base/scale as in dsv4_layer. */
void dsv4_hc_pre(di_dsv4_ctx *c, const dsv4_linear *fn, const float *base, const float *scale, int64_t n,
                 di_threadpool *pool);
/* After it: Xn = post * y + comb^T X, then X <- Xn. */
void dsv4_hc_post(di_dsv4_ctx *c, int64_t n, di_threadpool *pool);
/* Final collapse of X into h (n, D) (before the norm and head). */
void dsv4_hc_head(di_dsv4_ctx *c, int64_t n, di_threadpool *pool);

/* MoE of layer il on h (n, D) -> y (n, D); tokens for hash routing. With
 * c->ep the routed experts run on their owner ranks (collective: every rank
 * calls it for every layer, n may be 0). */
di_status dsv4_moe(di_dsv4_ctx *c, int32_t il, const int32_t *tokens, int64_t n, di_threadpool *pool,
                   di_error *err);
/* One step of the routed sum, s + y * w: the one-process combine and an EP
 * owner's partial sums use this same expression, so they round alike. */
static inline float dsv4_moe_mac(float s, float y, float w) { return s + y * w; }
/* Forced imbalance (di_dsv4_ctx_set_route_skew, shared with V4.1): the
 * score scale of the hot experts (0 = off: ratio < 1, one group, or fewer
 * experts than groups), and a row's uniform draw for expert e from its own
 * content (token, layer, first hidden values). */
float dsv4_skew_factor(double ratio, int32_t groups, int32_t K, int32_t E);
float dsv4_row_uniform(int32_t token, int32_t il, const float *h, int32_t e);

/* ---- expert parallelism of the family (deepseek_v4_ep.c) ----------------
 * The EP core serves V4 and V4.1 alike: it moves rows to the owners of
 * their experts and the outputs back; what an expert computes and how a
 * row's outputs add up are the model's (expert, mac below). */

/* A model's routed experts: layer l's expert e is w1[l][e], w2[l][e], w3[l][e]. */
typedef struct dsv4_ep_experts {
    int32_t n_layers, n_experts, n_used, n_embd, moe_ff;
    const dsv4_linear *const *w1, *const *w2, *const *w3; /* (n_layers) -> (n_experts), not owned */
} dsv4_ep_experts;

/* Owner-side scratch an expert may use: g1, g3 (cnt, moe_ff) and the matmul
 * scratch for cnt rows. */
typedef struct dsv4_ep_scratch {
    float *g1, *g3, *mm;
} dsv4_ep_scratch;

/* y (cnt, D) = expert w = {w1, w2, w3} on x (cnt, D) (x may be modified);
 * wts: each row's routing weight, for models that apply it inside. */
typedef void (*dsv4_ep_expert_fn)(void *user, const dsv4_linear *w, float *x, const float *wts, int64_t cnt,
                                  float *y, const dsv4_ep_scratch *sc, di_threadpool *pool);

/* The routed experts of one MoE layer in this process (no EP), V4 and V4.1
 * alike (deepseek_v4_moe_core.c): each expert once over the rows that
 * chose it, with the expert function its EP owners run. */
typedef struct dsv4_moe_local_io {
    const dsv4_linear *w1, *w2, *w3; /* (n_experts) each */
    int32_t n_experts, n_used, n_embd;
    int64_t n;
    const float *x;        /* (n, D) the experts' input */
    const int32_t *sel;    /* (n, K) chosen experts */
    const float *selw;     /* (n, K) their weights */
    dsv4_ep_expert_fn expert;
    void *user;
    dsv4_ep_scratch sc;    /* the expert's scratch */
    float *xg, *yg;        /* (n*K, D) one expert's gathered inputs / outputs */
    int32_t *grow;         /* (n*K) their (row*K + k) */
    float *wg;             /* (n*K) their weights, or NULL: the expert gets wts NULL */
    float *ysel;           /* out: (n*K, D) each choice's output */
} dsv4_moe_local_io;
void dsv4_moe_local(const dsv4_moe_local_io *io, di_threadpool *pool);
/* The routed sum in choice order, then + shared: the backend's moe_sum (kernels/backend.h). */

/* The routed half of one MoE layer on this rank's n rows (n may be 0). */
typedef struct dsv4_ep_layer {
    int32_t layer;
    int64_t n;
    const float *x;        /* (n, D) the experts' input */
    const int32_t *sel;    /* (n, K) chosen experts, in the order the row sums them */
    const float *selw;     /* (n, K) their weights */
    dsv4_ep_expert_fn expert;
    float (*mac)(float acc, float y, float w); /* one step of a row's sum */
    void *user;
    /* out: row r's first plen[r] outputs come summed (acc from 0 by mac, in
     * k order) in partial (n, D); each later one in ysel (n*K, D) */
    float *ysel;
    const int32_t *plen;
    const float *partial;
} dsv4_ep_layer;

/* Collective: an EP group over d for the experts x. */
di_status dsv4_ep_create(const dsv4_ep_experts *x, di_dist *d, const di_dsv4_ep_params *p, di_dsv4_ep **out,
                         di_error *err);
/* dsv4_ep_create for a family model: layer l (hp->n_layers structs of
 * stride bytes) holds its core weights (dsv4_core_w, with the expert
 * arrays w1 / w2 / w3 of n_experts each) at byte offset off_core. */
di_status dsv4_ep_create_layers(const void *layers, size_t stride, size_t off_core, const di_dsv4_hparams *hp,
                                di_dist *d, const di_dsv4_ep_params *p, di_dsv4_ep **out, di_error *err);
/* A context's forced routing imbalance (its skew_factor / skew_groups):
 * _set from a ratio (0 = off), _attach from ep's params when they force one. */
void dsv4_route_skew_set(float *factor, int32_t *groups_out, const di_dsv4_hparams *hp, double ratio, int32_t groups);
void dsv4_ep_attach_skew(const di_dsv4_ep *ep, float *factor, int32_t *groups_out, const di_dsv4_hparams *hp);
/* Collective: the routed experts of io through their owner ranks. */
di_status dsv4_ep_routed(di_dsv4_ep *ep, dsv4_ep_layer *io, di_threadpool *pool, di_error *err);
/* The window push and, when due, the rebalance after each forward. */
di_status dsv4_ep_after_forward(di_dsv4_ep *ep, di_error *err);
/* The forced-imbalance ratio of ep's params (0 = off) and its rank groups. */
double dsv4_ep_skew(const di_dsv4_ep *ep, int32_t *groups);

/* Context parallelism's one exchange, V4 and V4.1 alike: this rank's
 * b->n_rows rows of row_bytes (each starting with its (seq, pos) as two
 * int32) gathered from every rank in rank order. Every gathered row is
 * checked whole and inside b's block tables before it is used. *out is
 * set also on failure; dsv4_cp_rows_free frees it. */
typedef struct dsv4_cp_rows {
    void *all;            /* (total, row_bytes) rank 0's rows first */
    int64_t *got;         /* (cp->size) rows each rank sent */
    int64_t total;
} dsv4_cp_rows;
di_status dsv4_cp_gather_rows(di_dist *cp, const di_batch *b, const void *mine, int64_t row_bytes, dsv4_cp_rows *out,
                              di_error *err);
void dsv4_cp_rows_free(dsv4_cp_rows *g);
/* Attention of layer il on h (n, D) -> y (n, D); writes this layer's state
 * of every row into kv first (with c->cp: of every row of the CP group,
 * gathered; collective then). The batch was validated. */
di_status dsv4_attention(di_dsv4_ctx *c, di_dsv4_kv *kv, int32_t il, const di_batch *b, di_threadpool *pool,
                         di_error *err);
/* The rows' sparse attention with a sink and the indexer's scores are the
 * backend's (be->ops->sparse_attention / index_scores); the key lists they
 * read: */
/* A stage runs its rows in chunks of dsv4_keyset_chunk_rows(n, ld, dim)
 * so that, at worst (no record shared between rows), its key table of ld
 * keys of dim floats a row stays within this many floats (64 MiB), as its
 * lists do (a row's numbers do not depend on its chunk). */
#define DSV4_KEYSET_BUDGET ((int64_t)1 << 24)
int64_t dsv4_keyset_chunk_rows(int64_t n_rows, int64_t ld, int64_t dim);
/* Lists for n_rows rows of up to ld records over addresses [0, n_addr). */
di_status dsv4_keyset_begin(dsv4_keyset *ks, int64_t n_rows, int64_t ld, int64_t n_addr, di_error *err);
/* Once every row's addr and n_idx are written: table rows in first-visit
 * order, keys sized for them at dim floats each. */
di_status dsv4_keyset_index(dsv4_keyset *ks, int64_t n_rows, int32_t dim, di_error *err);
/* keys row i = fn(user, key_addr[i]) for every table row, on the pool. */
void dsv4_keyset_fill(dsv4_keyset *ks, int32_t dim, void (*fn)(void *user, int64_t addr, float *dst), void *user,
                      di_threadpool *pool);
void dsv4_keyset_free(dsv4_keyset *ks);
/* Where a stage's keys come from: addresses below n_addr, decoded by get. */
typedef struct dsv4_keyset_src {
    int64_t n_addr;
    void (*get)(void *user, int64_t addr, float *dst);
} dsv4_keyset_src;
/* Scratch floats per task that dsv4_attention needs for positions < max_pos+1. */
int64_t dsv4_attention_scratch_floats(const di_dsv4_model *m, int32_t max_pos);

/* The slot count of b checked, and the largest position of its rows (for
 * the scratch), before the forward sizes anything. */
di_status dsv4_batch_slots(const di_batch *b, int32_t *max_pos, di_error *err);
/* The batch checks every forward makes before touching the cache (tokens in
 * the vocab, slots in range, increasing positions per sequence, block
 * tables covering them); seq_last: n_seq_slots of scratch. Shared by V4.1. */
di_status dsv4_validate_batch(int32_t *seq_last, int32_t n_vocab, int32_t kv_block_size, int32_t kv_n_blocks,
                              const di_batch *b, di_error *err);

/* One vector's RMSNorm (host code): di_rmsnorm_f64, kernels/cpu/kernels.h. */

#endif
