/* DeepSeek-V4.1 forward over a flat ragged batch (DeepInfer
 * mm/deepseek.py:DeepseekModel.forward with the shifted mHC of
 * v4_modules/hc.py; oracle: scripts/oracle_v41.py). Reads like the reference:
 *
 *   R = N copies of embed(tokens); pre = one-hot stream 0      (n, N, D)
 *   per layer l:
 *     [Engram layers: R = engram(R)]
 *     x = sum_j pre_j R_j ; (pre, post, C) = mixes(R, fn_attn)  shifted: the
 *     R = post * attention(attn_norm(x)) + C^T R                 previous pre
 *     x = sum_j pre_j R_j ; (pre, post, C) = mixes(R, fn_ffn)
 *     R = post * moe(ffn_norm(x)) + C^T R
 *   logits = head(norm(sum_j pre_j R_j))       no hc_head in V4.1
 *
 * KV per position and layer (bytes, deepinfer / ideal numerics):
 *   window K=V record        528 (MXFP8) / 2048 (f32)       every layer
 *   compressed entry         288 (FP4) / 2048               kv sources, in the
 *                                                           slot that closes it
 *   ratio-2 pending state    4096 (f32 latent + gate)       kv sources of ratio 2
 *   index key                68 (FP4) / 512                 index-K sources
 * plus the token id of each position (Engram's n-grams). Decoder layers own
 * only the window record: they read their kv source's entries. */
#include "model/deepseek_v41_internal.h"
#include "model/deepseek_v41_vision.h"

#include "base/alloc.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_BATCH_ROWS (1 << 20)

/* ---- model ---------------------------------------------------------------------- */

static di_status build_engram(di_dsv41_model *m, const di_tokenizer *tok, di_error *err) {
    const di_dsv41_hparams *hp = &m->hp;
    di_status s;
    if (hp->engram_compressed_vocab) {
        if (!tok)
            return di_error_set(err, DI_ERR_FORMAT,
                                "Engram compresses the vocabulary through tokenizer.json, which is missing");
        if ((s = di_engram_vocab_build(tok, &m->vocab, err))) return s;
        if (m->vocab.n_compressed != hp->engram_compressed_vocab)
            return di_error_set(err, DI_ERR_FORMAT,
                                "tokenizer.json gives %d compressed ids, config.json engram_compressed_vocab_size %d",
                                (int)m->vocab.n_compressed, (int)hp->engram_compressed_vocab);
        if (m->vocab.n_vocab < hp->n_vocab) {
            /* ids past the tokenizer (padding rows of the vocab) map to pad */
            int32_t *lk = di_realloc_array(m->vocab.lookup, (size_t)hp->n_vocab, sizeof(int32_t));
            if (!lk) return di_error_set(err, DI_ERR_NOMEM, "out of memory");
            for (int32_t i = m->vocab.n_vocab; i < hp->n_vocab; i++) lk[i] = m->vocab.pad;
            m->vocab.lookup = lk;
            m->vocab.n_vocab = hp->n_vocab;
        }
    } else {
        m->vocab.lookup = di_malloc_array((size_t)hp->n_vocab, sizeof(int32_t));
        if (!m->vocab.lookup) return di_error_set(err, DI_ERR_NOMEM, "out of memory");
        for (int32_t i = 0; i < hp->n_vocab; i++) m->vocab.lookup[i] = i;
        m->vocab.n_vocab = m->vocab.n_compressed = hp->n_vocab;
        m->vocab.pad = DI_ENGRAM_PAD_TOKEN_ID < hp->n_vocab ? DI_ENGRAM_PAD_TOKEN_ID : 0;
    }
    /* engram_layer_ids absent or []: no Engram (hf/config.py:_build_engram
     * returns None for an empty list; the other engram_* keys are not read) */
    if (hp->n_engram == 0) return DI_OK;
    di_engram_config ec = {.layer_ids = hp->engram_layers, .n_layers = hp->n_engram,
                           .max_ngram = hp->engram_max_ngram, .n_heads = hp->engram_heads,
                           .vocab_size = hp->engram_vocab, .compressed_vocab = m->vocab.n_compressed, .seed = 0};
    if ((s = di_engram_layout_create(&ec, &m->layout, err))) return s;
    m->engram = di_calloc((size_t)hp->n_engram, sizeof *m->engram);
    if ((s = dsv4_own(&m->base, m->engram, err))) return s;
    for (int32_t i = 0; i < hp->n_engram; i++) m->engram[i].hash = &m->layout.layers[i];
    return DI_OK;
}

static void fill_base(di_dsv41_model *m) {
    di_dsv4_hparams *b = &m->base.hp;
    const di_dsv41_hparams *hp = &m->hp;
    b->fp8_block = DSV41_FP8_BLOCK;
    b->n_rot = hp->n_rot;
    b->yarn_factor = hp->yarn_factor;
    b->yarn_orig_ctx = hp->yarn_orig_ctx;
    b->yarn_beta_fast = hp->yarn_beta_fast;
    b->yarn_beta_slow = hp->yarn_beta_slow;
}

di_status di_dsv41_load(const char *dir, const di_cpu_kernels *kernels, di_dsv41_numerics numerics,
                        const di_tokenizer *tok, di_dsv41_model **out, di_error *err) {
    *out = NULL;
    if (numerics != DI_DSV41_NUMERICS_DEEPINFER && numerics != DI_DSV41_NUMERICS_IDEAL)
        return di_error_set(err, DI_ERR_INVALID_ARG, "deepseek_v41: unknown numerics %d", (int)numerics);
    di_dsv41_model *m = di_calloc(1, sizeof *m);
    if (!m) return di_error_set(err, DI_ERR_NOMEM, "deepseek_v41: out of memory");
    di_backend_cpu(kernels, &m->base.be);
    m->be = &m->base.be;
    m->num = numerics;
    di_status s = di_dsv41_read_config(dir, &m->hp, err);
    if (s == DI_OK) {
        fill_base(m);
        s = di_safetensors_checkpoint_open(dir, &m->base.ck, err);
        if (s == DI_OK && (s = build_engram(m, tok, err)) == DI_OK && (s = dsv41_bind_weights(m, err)) == DI_OK)
            s = dsv41_vision_load(m, dir, err);
        if (s) di_error_prefix(err, "%s: ", dir);
    }
    if (s != DI_OK) {
        di_dsv41_free(m);
        return s;
    }
    dsv4_build_inv_freq(&m->base.hp, m->hp.rope_theta, 0, m->inv_freq_main);
    dsv4_build_inv_freq(&m->base.hp, m->hp.compress_rope_theta, m->hp.yarn, m->inv_freq_compress);
    *out = m;
    return DI_OK;
}

void di_dsv41_free(di_dsv41_model *m) {
    if (!m) return;
    di_engram_vocab_free(&m->vocab);
    di_engram_layout_free(&m->layout);
    for (int32_t i = 0; i < m->base.n_owned; i++) free(m->base.owned[i]);
    free(m->base.owned);
    di_safetensors_checkpoint_close(m->base.ck);
    di_backend_release(&m->base.be);
    free(m);
}

const di_dsv41_hparams *di_dsv41_hparams_of(const di_dsv41_model *m) { return &m->hp; }
const di_cpu_kernels *di_dsv41_kernels(const di_dsv41_model *m) { return di_backend_cpu_kernels(m->be); }
di_dsv41_numerics di_dsv41_numerics_of(const di_dsv41_model *m) { return m->num; }

/* ---- KV cache ----------------------------------------------------------------------- */

static dsv41_kv_layout layout_of(const di_dsv41_hparams *hp, di_dsv41_numerics num, int32_t il) {
    const di_dsv41_role *r = &hp->role[il];
    const int faithful = num == DI_DSV41_NUMERICS_DEEPINFER;
    const int32_t hd = hp->head_dim, ihd = hp->index_dim;
    dsv41_kv_layout l = {.off_win = 0, .off_comp = -1, .off_state = -1, .off_ikey = -1};
    l.row = faithful ? dsv41_mxfp8_bytes(hd) : 4 * hd;
    if (r->ratio && r->kv_src == il) {
        l.off_comp = l.row;
        l.row += !faithful ? 4 * hd : hp->use_fp4_kv ? dsv41_nvfp4_bytes(hd) : dsv41_mxfp8_bytes(hd);
        if (r->ratio == 2) {
            l.row = (l.row + 3) & ~3; /* f32 state */
            l.off_state = l.row;
            l.row += 8 * hd;
        }
    }
    if (r->ratio && r->idxk_src == il) {
        l.off_ikey = l.row;
        l.row += faithful ? dsv41_fp4i_bytes(ihd) : 4 * ihd;
    }
    l.row = (l.row + 3) & ~3;
    return l;
}

uint64_t di_dsv41_kv_bytes_per_token(const di_dsv41_model *m) {
    uint64_t bytes = sizeof(int32_t); /* the token id */
    for (int32_t il = 0; il < m->hp.n_layers; il++) bytes += (uint64_t)layout_of(&m->hp, m->num, il).row;
    return bytes;
}

di_status di_dsv41_kv_create(const di_dsv41_model *m, int32_t n_blocks, int32_t block_size, di_dsv41_kv **out,
                             di_error *err) {
    *out = NULL;
    const uint64_t slots = (uint64_t)(n_blocks > 0 ? n_blocks : 0) * (uint64_t)(block_size > 0 ? block_size : 0);
    di_dsv41_kv *kv = di_calloc(1, sizeof *kv);
    if (!kv) return di_error_set(err, DI_ERR_NOMEM, "kv cache: out of memory");
    kv->n_layers = m->hp.n_layers;
    kv->n_blocks = n_blocks;
    kv->block_size = block_size;
    kv->num = m->num;
    di_status s = dsv4_kv_begin(n_blocks, block_size, kv->n_layers, sizeof *kv->lay, (void **)&kv->lay, &kv->data, err);
    if (!s && !(kv->tokens = di_calloc((size_t)slots, sizeof(int32_t))))
        s = di_error_set(err, DI_ERR_NOMEM, "kv cache: out of memory");
    if (s) {
        di_dsv41_kv_free(kv);
        return s;
    }
    for (int32_t il = 0; il < kv->n_layers; il++) {
        kv->lay[il] = layout_of(&m->hp, m->num, il);
        s = dsv4_kv_alloc((void **)&kv->data[il], slots, (uint64_t)kv->lay[il].row, err);
        if (s) {
            di_dsv41_kv_free(kv);
            return s;
        }
    }
    *out = kv;
    return DI_OK;
}

void di_dsv41_kv_free(di_dsv41_kv *kv) {
    if (!kv) return;
    for (int32_t il = 0; kv->data && il < kv->n_layers; il++) free(kv->data[il]);
    free(kv->data);
    free(kv->lay);
    free(kv->tokens);
    for (int32_t i = 0; kv->draft && i < kv->n_draft; i++) free(kv->draft[i]);
    free(kv->draft);
    free(kv);
}

di_status di_dsv41_kv_enable_dspark(const di_dsv41_model *m, di_dsv41_kv *kv, di_error *err) {
    if (!m || !kv) return di_error_set(err, DI_ERR_INVALID_ARG, "kv enable dspark: NULL argument");
    if (m->n_draft < 1) return di_error_set(err, DI_ERR_UNSUPPORTED, "deepseek_v41: the checkpoint has no DSpark drafter");
    if (kv->n_draft) return DI_OK;
    const uint64_t slots = (uint64_t)kv->n_blocks * (uint64_t)kv->block_size;
    const int32_t hd = m->hp.head_dim;
    kv->draft_row = m->num == DI_DSV41_NUMERICS_DEEPINFER ? ((dsv41_mxfp8_bytes(hd) + 3) & ~3) : 4 * hd;
    kv->draft = di_calloc((size_t)m->n_draft, sizeof *kv->draft);
    if (!kv->draft) return di_error_set(err, DI_ERR_NOMEM, "kv cache: out of memory for DSpark");
    for (int32_t i = 0; i < m->n_draft; i++) {
        kv->draft[i] = di_calloc((size_t)slots, (size_t)kv->draft_row);
        if (!kv->draft[i]) {
            for (int32_t j = 0; j < i; j++) free(kv->draft[j]);
            free(kv->draft);
            kv->draft = NULL;
            return di_error_set(err, DI_ERR_NOMEM, "kv cache: out of memory for DSpark");
        }
    }
    kv->n_draft = m->n_draft;
    return DI_OK;
}

di_status di_dsv41_kv_truncate(di_dsv41_kv *kv, int32_t seq_slot, int32_t n_keep, di_error *err) {
    if (!kv) return di_error_set(err, DI_ERR_INVALID_ARG, "deepseek_v41 KV truncate: NULL cache");
    /* position-indexed records: see deepseek_v41.h */
    return dsv4_kv_check_truncate("deepseek_v41", kv->n_blocks, kv->block_size, seq_slot, n_keep, err);
}

/* ---- context ------------------------------------------------------------------------- */

di_status di_dsv41_ctx_create(const di_dsv41_model *m, di_dsv41_ctx **out, di_error *err) {
    *out = NULL;
    di_dsv41_ctx *c = di_calloc(1, sizeof *c);
    if (!c) return di_error_set(err, DI_ERR_NOMEM, "deepseek_v41 ctx: out of memory");
    c->m = m;
    c->record_layer = -1;
    c->kv_done_layer = -1;
    *out = c;
    return DI_OK;
}

/* The per-row scratch of c for n rows, in one table (grown and freed together). */
static size_t row_bufs(void *ctx, int64_t n, dsv4_buf *t) {
    di_dsv41_ctx *c = ctx;
    const di_dsv41_hparams *hp = &c->m->hp;
    const int64_t D = hp->n_embd, N = hp->hc_mult, K = hp->n_experts_used;
    const int64_t ecols = (int64_t)(hp->engram_max_ngram > 1 ? hp->engram_max_ngram - 1 : 0) * hp->engram_heads;
    const dsv4_buf b[] = {
        {&c->R, n * N * D, 4}, {&c->Rn, n * N * D, 4}, {&c->pre, n * N, 4}, {&c->xq, n * D, 4},
        {&c->ckv, n * hp->head_dim, 4}, {&c->cg, n * hp->head_dim, 4}, {&c->wg, n * K, 4},
        {&c->eg, n * dsv4_max64(ecols * hp->engram_head_dim, 1), 4}, {&c->ekv, n * (N + 1) * D, 4},
        {&c->topk, n * hp->index_topk, 4}, {&c->cand, n * dsv4_max64(hp->cand_topk_blocks, 1), 4},
        {&c->rec_topk, n * hp->index_topk, 4}, {&c->feat, n * dsv4_max64(hp->n_dspark_targets, 1) * D, 4},
    };
    _Static_assert(DSV4_ROWS_N + sizeof b / sizeof *b <= DSV4_ROW_BUFS_MAX, "row_bufs: table too small");
    return dsv4_rows_table(&c->rows, hp, n, b, sizeof b / sizeof *b, t);
}

void di_dsv41_ctx_free(di_dsv41_ctx *c) {
    if (!c) return;
    dsv4_rows_free(c, row_bufs);
    void *ps[] = {c->mm_scratch, c->attn_scratch, c->seq_last, c->cb_token, c->cb_seq, c->cb_pos, c->cb_want,
                  (void *)c->cb_embd};
    for (size_t i = 0; i < sizeof ps / sizeof *ps; i++) free(ps[i]);
    dsv4_keyset_free(&c->ks);
    free(c->iscore);
    free(c);
}

di_status dsv41_ctx_reserve(di_dsv41_ctx *c, int64_t n, int64_t n_tasks, int64_t n_seqs, int32_t max_pos,
                            di_error *err) {
    const di_dsv41_hparams *hp = &c->m->hp;
    const int64_t D = hp->n_embd;
    const int64_t ecols = (int64_t)(hp->engram_max_ngram > 1 ? hp->engram_max_ngram - 1 : 0) * hp->engram_heads;
    di_status s = dsv4_rows_grow(c, row_bufs, n, &c->cap_rows, "deepseek_v41", err);
    if (s) return s;
    int64_t max_in = dsv4_max64(dsv4_core_max_in(hp), ecols * hp->engram_head_dim);
    max_in = dsv4_max64(max_in, (int64_t)hp->n_dspark_targets * D + hp->dspark_markov_rank);
    c->attn_floats = dsv41_attention_scratch_floats(c->m, max_pos);
    if (!dsv4_grow(&c->mm_scratch, &c->cap_mm, dsv4_lin_scratch(c->m->be, c->cap_rows, max_in, n_tasks, (int)n_tasks),
                   4) ||
        !dsv4_grow(&c->attn_scratch, &c->cap_attn, n_tasks * c->attn_floats, 4) ||
        !dsv4_grow(&c->seq_last, &c->cap_seqs, n_seqs, sizeof(int32_t)))
        return di_error_set(err, DI_ERR_NOMEM, "deepseek_v41 ctx: out of memory for scratch (%lld rows, %lld tasks)",
                            (long long)n, (long long)n_tasks);
    return DI_OK;
}

void di_dsv41_ctx_record_topk(di_dsv41_ctx *c, int32_t il) {
    c->record_layer = il;
    c->rec_valid = 0;
}

di_status di_dsv41_ctx_topk(const di_dsv41_ctx *c, int32_t row, int32_t *out, int32_t cap, int32_t *n_out) {
    *n_out = 0;
    if (row < 0 || row >= c->rec_valid) return DI_ERR_NOT_FOUND;
    const int32_t K = c->m->hp.index_topk, *sel = c->rec_topk + (int64_t)row * K;
    for (int32_t i = 0; i < K && sel[i] >= 0 && *n_out < cap; i++) out[(*n_out)++] = sel[i];
    return DI_OK;
}

/* ---- numerics-aware helpers ----------------------------------------------------------- */

/* y = x W^T, f32 accumulation in the kernel table's fixed order. */
void dsv41_lin_apply(const di_dsv41_ctx *c, const dsv4_linear *w, const float *x, int64_t ldx, float *y, int64_t ldy,
                     int64_t n, di_threadpool *pool) {
    dsv4_lin(c->m->be, w, x, ldx, y, ldy, n, c->mm_scratch, pool);
}

void dsv41_linear(const di_dsv41_ctx *c, const dsv4_linear *w, float *x, int64_t ldx, float *y, int64_t ldy,
                  int64_t n, int round_out, di_threadpool *pool) {
    const int faithful = dsv41_faithful(c);
    const di_backend *be = c->m->be;
    if (faithful && w->kind != DSV4_W_PLAIN) be->ops->round_rows(be, DI_ROUND_FP8ACT, x, n, ldx, w->n_in, pool);
    dsv41_lin_apply(c, w, x, ldx, y, ldy, n, pool);
    if (faithful && round_out) be->ops->round_rows(be, DI_ROUND_BF16, y, n, ldy, w->n_out, pool);
}

void dsv41_norm(const di_dsv41_ctx *c, const float *x, const float *w, float *out, int64_t n) {
    di_rmsnorm_f64(x, w, out, n, (float)c->m->hp.rms_eps);
    if (dsv41_faithful(c)) dsv41_round_bf16(out, n);
}


/* ---- shifted mHC ---------------------------------------------------------------------- */

void dsv41_hc_pre(di_dsv41_ctx *c, const dsv4_linear *fn, const float *base, const float *scale, int64_t n,
                  di_threadpool *pool) {
    const di_dsv41_hparams *hp = &c->m->hp;
    const di_backend *be = c->m->be;
    const int32_t N = hp->hc_mult, D = hp->n_embd, M = (2 + N) * N;
    dsv41_lin_apply(c, fn, c->R, (int64_t)N * D, c->mix, M, n, pool);
    /* after the mix projection, per row: the sublayer input h = sum_j
     * pre_prev_j R_j (the carried pre), then this sublayer's pre / post /
     * comb from mix (TK torch/mhc.py mhc_pre_split_mixes_ref + the Sinkhorn loop) */
    const di_mhc_pre_args a = {DI_MHC_SHIFTED, c->R, c->mix, base, scale, n, N, D, hp->hc_iters, (float)hp->hc_eps,
                               (float)hp->rms_eps, dsv41_faithful(c), c->pre, c->post, c->comb, c->h};
    be->ops->mhc_pre(be, &a, pool);
}

/* R_k <- post_k y + sum_j comb[j][k] R_j (TK mhc_post_ref), bf16 when faithful. */
void dsv41_hc_post(di_dsv41_ctx *c, int64_t n, di_threadpool *pool) {
    dsv4_mhc_post(c->m->be, &c->R, &c->Rn, c->y, c->post, c->comb, c->m->hp.hc_mult, c->m->hp.n_embd, n,
                  dsv41_faithful(c), pool);
}

/* The family's RMSNorm of n rows of x (n_rows, len) on the backend, bf16 when faithful. */
void dsv41_norm_rows(const di_dsv41_ctx *c, float *x, const float *w, int64_t n_rows, int64_t len, di_threadpool *pool) {
    c->m->be->ops->rms_norm(c->m->be, x, w, x, n_rows, len, (float)c->m->hp.rms_eps, dsv41_faithful(c), pool);
}

/* ---- Engram ------------------------------------------------------------------------------ */

/* R <- engram(R) for every row (notes 2.8): n-gram ids from the sequence's
 * stored tokens, hashed rows of the FP8 table, keys and value from one
 * projection, then the gate per residual copy. */
static di_status engram(di_dsv41_ctx *c, di_dsv41_kv *kv, const dsv41_layer *L, const di_batch *b,
                        di_threadpool *pool, di_error *err) {
    const di_dsv41_model *m = c->m;
    const di_dsv41_hparams *hp = &m->hp;
    const dsv41_engram_w *e = L->engram;
    const int32_t N = hp->hc_mult, D = hp->n_embd, G = hp->engram_max_ngram, ehd = hp->engram_head_dim;
    const int32_t cols = e->hash->n_cols;
    const int64_t n = b->n_rows, W = (int64_t)cols * ehd;
    di_status s;
    for (int64_t i = 0; i < n; i++) {
        int32_t ids[DI_ENGRAM_MAX_NGRAM];
        int64_t rows[DI_ENGRAM_MAX_COLS];
        if (b->token[i] >= hp->n_vocab) { /* an image row: no lookup, R unchanged (TK image_token_mask) */
            memset(c->eg + i * W, 0, (size_t)W * sizeof(float));
            continue;
        }
        /* fill_engram_row: pad before the sequence, and from an image token on */
        int hit_image = 0;
        for (int32_t r = 0; r < G; r++) {
            int32_t p = b->pos[i] - r;
            int32_t t = p < 0 || hit_image ? -1 : kv->tokens[dsv41_slot(b, b->seq[i], p)];
            hit_image |= t >= hp->n_vocab;
            ids[r] = t < 0 || t >= hp->n_vocab ? m->vocab.pad : m->vocab.lookup[t];
        }
        if ((s = di_engram_hash_row(e->hash, ids, rows, err)) ||
            (s = di_engram_gather_rows(e->table, e->table_scale, e->rows, ehd, rows, cols, c->eg + i * W, err)))
            return s;
    }
    dsv41_linear(c, &e->wkv, c->eg, W, c->ekv, (int64_t)(N + 1) * D, n, 1, pool);
    for (int64_t i = 0; i < n; i++) {
        if (b->token[i] >= hp->n_vocab) continue;
        float *R = c->R + i * N * D;
        const float *kvv = c->ekv + i * (N + 1) * D;
        if ((s = di_engram_gate(R, kvv, kvv + (int64_t)N * D, e->q_weight, e->k_weight, N, D, (float)hp->rms_eps,
                                dsv41_faithful(c), R, NULL, err)))
            return s;
    }
    return DI_OK;
}

/* The trace hook (di_dsv41_ctx_set_hook): a no-op unless a test set one. */
#define HOOK(c, point, il, ptr, n, width)                                             \
    do {                                                                              \
        if ((c)->hook) (c)->hook((c)->hook_user, point, il, ptr, n, width);           \
    } while (0)

void di_dsv41_ctx_set_hook(di_dsv41_ctx *c, di_dsv41_hook_fn fn, void *user) {
    c->hook = fn;
    c->hook_user = user;
}

/* DSpark target feature of the trunk entering layer il's attention
 * (dflash_input_store_ref): the mean of the residual copies, bf16 in the
 * faithful mode, into column block t of c->feat. */
static void capture_feature(di_dsv41_ctx *c, int32_t il, int64_t n) {
    const di_dsv41_hparams *hp = &c->m->hp;
    const int64_t D = hp->n_embd, N = hp->hc_mult, T = hp->n_dspark_targets;
    for (int64_t t = 0; t < T; t++) {
        if (hp->dspark_targets[t] != il) continue;
        for (int64_t i = 0; i < n; i++) {
            const float *R = c->R + i * N * D;
            float *f = c->feat + (i * T + t) * D;
            for (int64_t d = 0; d < D; d++) {
                float sm = 0.0f;
                for (int64_t k = 0; k < N; k++) sm += R[k * D + d];
                f[d] = sm / (float)N;
            }
            if (dsv41_faithful(c)) dsv41_round_bf16(f, D);
        }
    }
}

/* ---- forward ------------------------------------------------------------------------------- */

di_status di_dsv41_forward(di_dsv41_ctx *c, di_dsv41_kv *kv, const di_batch *b, float *logits_out,
                           di_threadpool *pool, di_error *err) {
    if (!c || !kv || !b) return di_error_set(err, DI_ERR_INVALID_ARG, "forward: NULL argument");
    const di_dsv41_model *m = c->m;
    const di_dsv41_hparams *hp = &m->hp;
    if (kv->n_layers != hp->n_layers || kv->num != m->num || kv->lay[0].row != layout_of(hp, m->num, 0).row)
        return di_error_set(err, DI_ERR_INVALID_ARG, "forward: kv cache was made for another model");
    if (b->n_rows < 0 || b->n_rows > MAX_BATCH_ROWS)
        return di_error_set(err, DI_ERR_INVALID_ARG, "batch: n_rows %d not in [0, %d]", (int)b->n_rows, MAX_BATCH_ROWS);
    di_status s = DI_OK;
    if (b->n_rows == 0) { /* EP / CP: a placeholder step keeps the collectives in step */
        if (!c->ep && !c->cp) return DI_OK;
        if (c->cp && ((s = dsv41_ctx_reserve(c, 1, di_threadpool_n_threads(pool), 1, 0, err)) ||
                      (s = dsv41_cp_tokens(c, kv, b, err))))
            return s;
        for (int32_t il = 0; il < hp->n_layers && !s; il++) {
            if (c->cp) s = dsv41_attention(c, kv, il, b, pool, err);
            if (!s && c->ep) s = dsv41_moe(c, il, 0, pool, err);
        }
        return s || !c->ep ? s : dsv4_ep_after_forward(c->ep, err);
    }
    int32_t max_pos;
    if ((s = dsv4_batch_slots(b, &max_pos, err))) return s;
    s = dsv41_ctx_reserve(c, b->n_rows, di_threadpool_n_threads(pool), b->n_seq_slots, max_pos, err);
    /* image rows carry ids vocab + 0..4 and must bring their embedding */
    const int32_t n_ids = hp->n_vocab + (m->vision ? DI_IMAGE_TOKEN_NUM_SPECIAL : 0);
    if (s || (s = dsv4_validate_batch(c->seq_last, n_ids, kv->block_size, kv->n_blocks, b, err))) return s;
    for (int32_t i = 0; i < b->n_rows; i++)
        if (b->token[i] >= hp->n_vocab && (!b->embd || !b->embd[i]))
            return di_error_set(err, DI_ERR_INVALID_ARG, "batch: row %d is an image token without its embedding",
                                (int)i);
    int32_t n_want = 0;
    for (int32_t i = 0; i < b->n_rows; i++) n_want += b->want_logits[i] != 0;
    if (n_want > 0 && !logits_out)
        return di_error_set(err, DI_ERR_INVALID_ARG, "forward: %d rows want logits but logits_out is NULL", (int)n_want);
    int clipped = 0;
    if ((s = dsv41_replay_validate(c, b, &clipped, err))) return s;
    c->rec_valid = 0;

    const int64_t D = hp->n_embd, N = hp->hc_mult;
    int64_t n = b->n_rows;
    c->row_token = b->token; /* the MoE router picks gate.bias_vl for image rows */
    for (int64_t i = 0; i < n; i++) {
        kv->tokens[dsv41_slot(b, b->seq[i], b->pos[i])] = b->token[i];
        float *x = c->R + i * N * D;
        if (b->embd && b->embd[i]) memcpy(x, b->embd[i], (size_t)D * sizeof(float));
        else dsv4_lin_rows(m->be, &m->embed, &b->token[i], 1, x, 0);
        for (int64_t j = 1; j < N; j++) memcpy(x + j * D, x, (size_t)D * sizeof(float));
        for (int64_t j = 0; j < N; j++) c->pre[i * N + j] = j == 0 ? 1.0f : 0.0f; /* one-hot first pre */
    }
    if (c->cp && (s = dsv41_cp_tokens(c, kv, b, err))) return s; /* Engram reads the other ranks' tokens */
    /* bb: the rows the layers run on; past the bounded-replay boundary only
     * the kept ones (deepseek_v41_replay.c) */
    const di_batch *bb = b;
    di_batch kept;
    const int32_t boundary = clipped ? hp->n_prefill_layer : -1;
    for (int32_t il = 0; il < hp->n_layers; il++) {
        const dsv41_layer *L = &m->layers[il];
        if (L->engram && n > 0 && (s = engram(c, kv, L, bb, pool, err))) return s;
        if (L->engram) HOOK(c, "R_after_engram", il, c->R, n, N * D);
        if (kv->n_draft && il != boundary) capture_feature(c, il, n);
        dsv41_hc_pre(c, &L->hc_attn_fn, L->hc_attn_base, L->hc_attn_scale, n, pool);
        dsv41_norm_rows(c, c->h, L->attn_norm, n, D, pool);
        if (il == boundary) {
            /* the source layer's compressed KV from every row, then the kept rows go on */
            dsv41_compress(c, kv, il, bb, pool);
            c->kv_done_layer = il;
            if ((s = dsv41_replay_compact(c, b, &kept, &n, err))) return s;
            bb = &kept;
            c->row_token = kept.token;
            if (kv->n_draft) capture_feature(c, il, n); /* R is what hc_pre read */
        }
        HOOK(c, "xn_attn", il, c->h, n, D);
        if (n > 0 || c->cp) s = dsv41_attention(c, kv, il, bb, pool, err);
        c->kv_done_layer = -1;
        if (s) return s;
        HOOK(c, "attn_out", il, c->y, n, D);
        if (n > 0) dsv41_hc_post(c, n, pool);
        HOOK(c, "R_after_attn", il, c->R, n, N * D);
        if (n > 0) dsv41_hc_pre(c, &L->hc_ffn_fn, L->hc_ffn_base, L->hc_ffn_scale, n, pool);
        dsv41_norm_rows(c, c->h, L->ffn_norm, n, D, pool);
        HOOK(c, "xn_ffn", il, c->h, n, D);
        if ((n > 0 || c->ep) && (s = dsv41_moe(c, il, n, pool, err))) return s;
        HOOK(c, "moe_out", il, c->y, n, D);
        if (n > 0) dsv41_hc_post(c, n, pool);
        HOOK(c, "R_after_ffn", il, c->R, n, N * D);
    }
    /* DSpark main keys: the features were captured on the rows of their
     * side of the boundary (di_dsv41_replay_check keeps them on one side) */
    if (kv->n_draft) {
        const di_batch *fb = boundary >= 0 && hp->n_dspark_targets > 0 && hp->dspark_targets[0] >= boundary ? bb : b;
        if (fb->n_rows > 0) dsv41_draft_main_keys(c, kv, fb, pool);
    }
    if (c->ep && (s = dsv4_ep_after_forward(c->ep, err))) return s;
    if (n_want == 0) return DI_OK;
    /* the last FFN's pre collapses the copies (no hc_head) */
    int64_t j = 0;
    for (int32_t i = 0; i < bb->n_rows; i++) {
        if (!bb->want_logits[i]) continue;
        const float *R = c->R + (int64_t)i * N * D, *pre = c->pre + (int64_t)i * N;
        float *h = c->h + j * D;
        for (int64_t d = 0; d < D; d++) {
            float sm = 0.0f;
            for (int64_t k = 0; k < N; k++) sm += pre[k] * R[k * D + d];
            h[d] = sm;
        }
        if (dsv41_faithful(c)) dsv41_round_bf16(h, D);
        dsv41_norm(c, h, m->norm, h, D);
        j++;
    }
    dsv41_lin_apply(c, &m->head, c->h, D, logits_out, hp->n_vocab, n_want, pool);
    return DI_OK;
}

/* Region i of the cache for block copies: layer i's records (window,
 * compressed entry, pending pair state, index key), then the token ids
 * Engram reads as region n_layers. */
bool di_dsv41_kv_region(di_dsv41_kv *kv, int32_t i, uint8_t **base, size_t *slot_bytes) {
    if (i < 0 || i > kv->n_layers) return false;
    if (i == kv->n_layers) {
        *base = (uint8_t *)kv->tokens;
        *slot_bytes = sizeof(int32_t);
    } else {
        *base = kv->data[i];
        *slot_bytes = (size_t)kv->lay[i].row;
    }
    return true;
}
