/* DeepSeek-V4 forward over a flat ragged batch. Reads like the reference:
 *
 *   X = embed(tokens) copied hc_mult times                   (n, N, D)
 *   per layer:
 *     h = attn_norm(mHC collapse of X) ; y = attention(h)    (n, D)
 *     X = post * y + comb^T X
 *     h = ffn_norm(mHC collapse of X)  ; y = moe(h, tokens)
 *     X = post * y + comb^T X
 *   logits = head(norm(hc_head collapse of X[want]))         (n_want, vocab)
 *
 * The KV cache holds per position and layer (deepseek_v4.h says why):
 *   [0, hd)                      window K=V row (normed, rotated)
 *   compressed layers:           raw kv (coff*hd), raw gate + ape (coff*hd),
 *                                pooled entry (hd; valid at a group's last
 *                                position)
 *   CSA layers also:             the indexer's raw kv (2*ihd), gate (2*ihd),
 *                                pooled key (ihd)
 * in f32 or f16. */
#include "model/deepseek_v4_internal.h"

#include "base/alloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_BATCH_ROWS (1 << 20)
#define MAX_SEQ_SLOTS (1 << 24)

/* ---- model ------------------------------------------------------------------ */

di_status di_dsv4_load(const char *dir, const di_cpu_kernels *kernels, di_dsv4_model **out, di_error *err) {
    *out = NULL;
    di_dsv4_model *m = di_calloc(1, sizeof *m);
    if (!m) return di_error_set(err, DI_ERR_NOMEM, "deepseek_v4: out of memory");
    di_backend_cpu(kernels, &m->be);
    di_status s = di_dsv4_read_config(dir, &m->hp, err);
    if (s == DI_OK) s = di_safetensors_checkpoint_open(dir, &m->ck, err);
    if (s == DI_OK && (s = dsv4_bind_weights(m, err)) != DI_OK) di_error_prefix(err, "%s: ", dir);
    if (s != DI_OK) {
        di_dsv4_free(m);
        return s;
    }
    *out = m;
    return DI_OK;
}

void di_dsv4_free(di_dsv4_model *m) {
    if (!m) return;
    for (int32_t i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    free(m->layers);
    di_safetensors_checkpoint_close(m->ck);
    di_backend_release(&m->be);
    free(m);
}

const di_dsv4_hparams *di_dsv4_hparams_of(const di_dsv4_model *m) { return &m->hp; }
const di_cpu_kernels *di_dsv4_kernels(const di_dsv4_model *m) { return di_backend_cpu_kernels(&m->be); }

/* ---- KV cache ----------------------------------------------------------------- */

static dsv4_kv_layout layout_of(const di_dsv4_hparams *hp, int32_t il) {
    dsv4_kv_layout l = {.row = hp->head_dim, .off_raw_kv = -1, .off_raw_gate = -1, .off_comp = -1,
                        .off_iraw_kv = -1, .off_iraw_gate = -1, .off_icomp = -1};
    if (hp->attn_kind[il] == DI_DSV4_ATTN_WINDOW) return l;
    int32_t coff = hp->attn_kind[il] == DI_DSV4_ATTN_CSA ? 2 : 1;
    l.off_raw_kv = l.row;
    l.off_raw_gate = l.off_raw_kv + coff * hp->head_dim;
    l.off_comp = l.off_raw_gate + coff * hp->head_dim;
    l.row = l.off_comp + hp->head_dim;
    if (hp->attn_kind[il] == DI_DSV4_ATTN_CSA) {
        l.off_iraw_kv = l.row;
        l.off_iraw_gate = l.off_iraw_kv + 2 * hp->index_dim;
        l.off_icomp = l.off_iraw_gate + 2 * hp->index_dim;
        l.row = l.off_icomp + hp->index_dim;
    }
    return l;
}

uint64_t di_dsv4_kv_bytes_per_token(const di_dsv4_model *m, di_dtype dtype) {
    uint64_t elems = 0;
    for (int32_t il = 0; il < m->hp.n_layers; il++) elems += (uint64_t)layout_of(&m->hp, il).row;
    return elems * (dtype == DI_DTYPE_F32 ? 4 : 2);
}

di_status di_dsv4_kv_create(const di_dsv4_model *m, int32_t n_blocks, int32_t block_size, di_dtype dtype,
                            di_dsv4_kv **out, di_error *err) {
    *out = NULL;
    if (dtype != DI_DTYPE_F32 && dtype != DI_DTYPE_F16)
        return di_error_set(err, DI_ERR_UNSUPPORTED, "kv cache: dtype must be f32 or f16");
    di_dsv4_kv *kv = di_calloc(1, sizeof *kv);
    if (!kv) return di_error_set(err, DI_ERR_NOMEM, "kv cache: out of memory");
    kv->n_layers = m->hp.n_layers;
    kv->n_blocks = n_blocks;
    kv->block_size = block_size;
    kv->dtype = dtype;
    di_status s = dsv4_kv_begin(n_blocks, block_size, kv->n_layers, sizeof *kv->lay, (void **)&kv->lay, &kv->data, err);
    if (s) {
        di_dsv4_kv_free(kv);
        return s;
    }
    for (int32_t il = 0; il < kv->n_layers; il++) {
        kv->lay[il] = layout_of(&m->hp, il);
        s = dsv4_kv_alloc(&kv->data[il], (uint64_t)n_blocks * (uint64_t)block_size,
                                    (uint64_t)kv->lay[il].row * (dtype == DI_DTYPE_F32 ? 4 : 2), err);
        if (s) {
            di_dsv4_kv_free(kv);
            return s;
        }
    }
    *out = kv;
    return DI_OK;
}

di_status di_dsv4_kv_truncate(di_dsv4_kv *kv, int32_t seq_slot, int32_t n_keep, di_error *err) {
    if (!kv) return di_error_set(err, DI_ERR_INVALID_ARG, "deepseek_v4 KV truncate: NULL cache");
    return dsv4_kv_check_truncate("deepseek_v4", kv->n_blocks, kv->block_size, seq_slot, n_keep, err);
}

void di_dsv4_kv_free(di_dsv4_kv *kv) {
    if (!kv) return;
    for (int32_t il = 0; kv->data && il < kv->n_layers; il++) free(kv->data[il]);
    free(kv->data);
    free(kv->lay);
    free(kv);
}

/* ---- context ------------------------------------------------------------------ */

di_status di_dsv4_ctx_create(const di_dsv4_model *m, di_dsv4_ctx **out, di_error *err) {
    *out = NULL;
    di_dsv4_ctx *c = di_calloc(1, sizeof *c);
    if (!c) return di_error_set(err, DI_ERR_NOMEM, "deepseek_v4 ctx: out of memory");
    c->m = m;
    *out = c;
    return DI_OK;
}

/* The per-row scratch of c for n rows, in one table (grown and freed together). */
static size_t row_bufs(void *ctx, int64_t n, dsv4_buf *t) {
    di_dsv4_ctx *c = ctx;
    const di_dsv4_hparams *hp = &c->m->hp;
    const int64_t ND = n * hp->hc_mult * hp->n_embd;
    const dsv4_buf b[] = {
        {&c->X, ND, 4}, {&c->Xn, ND, 4}, {&c->flat, ND, 4}, {&c->ckv, n * 2 * hp->head_dim, 4},
        {&c->cg, n * 2 * hp->head_dim, 4}, {&c->ikv, n * 2 * hp->index_dim, 4}, {&c->ig, n * 2 * hp->index_dim, 4},
    };
    _Static_assert(DSV4_ROWS_N + sizeof b / sizeof *b <= DSV4_ROW_BUFS_MAX, "row_bufs: table too small");
    return dsv4_rows_table(&c->rows, hp, n, b, sizeof b / sizeof *b, t);
}

void di_dsv4_ctx_free(di_dsv4_ctx *c) {
    if (!c) return;
    dsv4_rows_free(c, row_bufs);
    free(c->pool_buf);
    free(c->mm_scratch);
    free(c->attn_scratch);
    free(c->seq_last);
    free(c->cp_rows);
    dsv4_keyset_free(&c->ks);
    free(c->iscore);
    free(c->ipick);
    free(c);
}

static di_status ctx_reserve(di_dsv4_ctx *c, int64_t n, int64_t n_tasks, int64_t n_seqs, int32_t max_pos,
                             di_error *err) {
    di_status s = dsv4_rows_grow(c, row_bufs, n, &c->cap_rows, "deepseek_v4", err);
    if (s) return s;
    const int64_t max_in = dsv4_core_max_in(&c->m->hp);
    c->attn_floats = dsv4_attention_scratch_floats(c->m, max_pos);
    if (!dsv4_grow(&c->mm_scratch, &c->cap_mm_floats,
                   dsv4_lin_scratch(&c->m->be, c->cap_rows, max_in, n_tasks, (int)n_tasks), 4) ||
        !dsv4_grow(&c->attn_scratch, &c->cap_attn_floats, n_tasks * c->attn_floats, 4) ||
        !dsv4_grow(&c->seq_last, &c->cap_seqs, n_seqs, sizeof(int32_t)))
        return di_error_set(err, DI_ERR_NOMEM, "deepseek_v4 ctx: out of memory for scratch (%lld rows, %lld tasks)",
                            (long long)n, (long long)n_tasks);
    return DI_OK;
}

/* ---- per-block timers ------------------------------------------------------------ */

static const char *const BLOCK_NAMES[DI_DSV4_BLK_COUNT] = {
    "embed", "mhc", "norm", "attn_proj", "attn_core", "compressor", "indexer",
    "moe_router", "moe_routed", "moe_shared", "head"};

const char *di_dsv4_block_name(di_dsv4_block b) {
    return b >= 0 && b < DI_DSV4_BLK_COUNT ? BLOCK_NAMES[b] : "?";
}

void di_dsv4_ctx_set_profile(di_dsv4_ctx *c, int on) {
    c->prof_on = on != 0;
    if (on) memset(&c->prof, 0, sizeof c->prof);
}

void di_dsv4_ctx_set_cp(di_dsv4_ctx *c, di_dist *cp) { c->cp = cp; }

void di_dsv4_ctx_get_profile(const di_dsv4_ctx *c, di_dsv4_profile *out) { *out = c->prof; }

double dsv4_prof_now(const di_dsv4_ctx *c) {
    if (!c->prof_on) return 0.0;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void dsv4_prof_add(di_dsv4_ctx *c, di_dsv4_block blk, double t0) {
    if (c->prof_on) c->prof.seconds[blk] += dsv4_prof_now(c) - t0;
}

/* ---- forward ------------------------------------------------------------------- */

di_status dsv4_batch_slots(const di_batch *b, int32_t *max_pos, di_error *err) {
    *max_pos = 0;
    if (b->n_seq_slots < 1 || b->n_seq_slots > MAX_SEQ_SLOTS)
        return di_error_set(err, DI_ERR_INVALID_ARG, "batch: n_seq_slots %d not in [1, %d]", (int)b->n_seq_slots,
                            MAX_SEQ_SLOTS);
    if (b->pos)
        for (int32_t i = 0; i < b->n_rows; i++) *max_pos = b->pos[i] > *max_pos ? b->pos[i] : *max_pos;
    return DI_OK;
}

/* Everything forward reads or writes through b (as di_llama_forward). */
di_status dsv4_validate_batch(int32_t *seq_last, int32_t n_vocab, int32_t kv_block_size, int32_t kv_n_blocks,
                              const di_batch *b, di_error *err) {
    if (!b->token || !b->seq || !b->pos || !b->want_logits || !b->block_tables || !b->n_blocks)
        return di_error_set(err, DI_ERR_INVALID_ARG, "batch: missing array");
    if (b->block_size != kv_block_size)
        return di_error_set(err, DI_ERR_INVALID_ARG, "batch: block_size %d but the cache has %d", (int)b->block_size,
                            (int)kv_block_size);
    for (int32_t s = 0; s < b->n_seq_slots; s++) seq_last[s] = -1;
    for (int32_t i = 0; i < b->n_rows; i++) {
        int32_t tok = b->token[i], s = b->seq[i], p = b->pos[i];
        if (tok < 0 || tok >= n_vocab)
            return di_error_set(err, DI_ERR_RANGE, "batch row %d: token %d not in [0, %d)", (int)i, (int)tok,
                                (int)n_vocab);
        if (s < 0 || s >= b->n_seq_slots)
            return di_error_set(err, DI_ERR_RANGE, "batch row %d: seq %d not in [0, %d)", (int)i, (int)s,
                                (int)b->n_seq_slots);
        if (p < 0 || p == INT32_MAX)
            return di_error_set(err, DI_ERR_RANGE, "batch row %d: position %d out of range", (int)i, (int)p);
        if (p <= seq_last[s])
            return di_error_set(err, DI_ERR_INVALID_ARG,
                                "batch row %d: seq %d position %d after position %d (must increase)", (int)i, (int)s,
                                (int)p, (int)seq_last[s]);
        seq_last[s] = p;
    }
    for (int32_t s = 0; s < b->n_seq_slots; s++) {
        if (seq_last[s] < 0) continue;
        int32_t need = seq_last[s] / b->block_size + 1;
        if (b->n_blocks[s] < need || !b->block_tables[s])
            return di_error_set(err, DI_ERR_RANGE, "batch seq %d: position %d needs %d blocks, table has %d", (int)s,
                                (int)seq_last[s], (int)need, (int)b->n_blocks[s]);
        for (int32_t j = 0; j < need; j++) {
            int32_t blk = b->block_tables[s][j];
            if (blk < 0 || blk >= kv_n_blocks)
                return di_error_set(err, DI_ERR_RANGE, "batch seq %d: block table entry %d = %d not in [0, %d)",
                                    (int)s, (int)j, (int)blk, (int)kv_n_blocks);
        }
    }
    return DI_OK;
}

di_status di_dsv4_forward(di_dsv4_ctx *c, di_dsv4_kv *kv, const di_batch *b, float *logits_out,
                          di_threadpool *pool, di_error *err) {
    if (!c || !kv || !b) return di_error_set(err, DI_ERR_INVALID_ARG, "forward: NULL argument");
    const di_dsv4_model *m = c->m;
    const di_dsv4_hparams *hp = &m->hp;
    if (kv->n_layers != hp->n_layers || kv->lay[0].row != layout_of(hp, 0).row)
        return di_error_set(err, DI_ERR_INVALID_ARG, "forward: kv cache was made for another model");
    if (b->n_rows < 0 || b->n_rows > MAX_BATCH_ROWS)
        return di_error_set(err, DI_ERR_INVALID_ARG, "batch: n_rows %d not in [0, %d]", (int)b->n_rows, MAX_BATCH_ROWS);
    if (b->n_rows == 0 && !c->ep && !c->cp) return DI_OK;
    if (b->n_rows == 0) { /* placeholder step: join every layer's exchanges with no rows */
        for (int32_t il = 0; il < hp->n_layers; il++) {
            di_status s = c->cp ? dsv4_attention(c, kv, il, b, pool, err) : DI_OK;
            if (!s && c->ep) s = dsv4_moe(c, il, NULL, 0, pool, err);
            if (s) return s;
        }
        return c->ep ? dsv4_ep_after_forward(c->ep, err) : DI_OK;
    }
    int32_t max_pos;
    di_status s = dsv4_batch_slots(b, &max_pos, err);
    if (s) return s;
    int32_t n_threads = di_threadpool_n_threads(pool);
    s = ctx_reserve(c, b->n_rows, n_threads, b->n_seq_slots, max_pos, err);
    if (s || (s = dsv4_validate_batch(c->seq_last, hp->n_vocab, kv->block_size, kv->n_blocks, b, err))) return s;
    int32_t n_want = 0;
    for (int32_t i = 0; i < b->n_rows; i++) n_want += b->want_logits[i] != 0;
    if (n_want > 0 && !logits_out)
        return di_error_set(err, DI_ERR_INVALID_ARG, "forward: %d rows want logits but logits_out is NULL", (int)n_want);

    const int64_t n = b->n_rows, D = hp->n_embd, N = hp->hc_mult;
    if (c->prof_on) {
        c->prof.n_forward++;
        c->prof.n_rows += n;
    }
    double t0 = dsv4_prof_now(c);
    dsv4_lin_rows(&m->be, &m->embed, b->token, n, c->X, N * D);
    for (int64_t i = 0; i < n; i++) {
        float *x = c->X + i * N * D;
        for (int64_t j = 1; j < N; j++) memcpy(x + j * D, x, (size_t)D * sizeof(float));
    }
    dsv4_prof_add(c, DI_DSV4_BLK_EMBED, t0);
    for (int32_t il = 0; il < hp->n_layers; il++) {
        const dsv4_layer *L = &m->layers[il];
        t0 = dsv4_prof_now(c);
        dsv4_hc_pre(c, &L->hc_attn_fn, L->hc_attn_base, L->hc_attn_scale, n, pool);
        dsv4_prof_add(c, DI_DSV4_BLK_MHC, t0);
        t0 = dsv4_prof_now(c);
        m->be.ops->rms_norm(&m->be, c->h, L->attn_norm, c->h, n, D, hp->rms_eps, 0, pool);
        dsv4_prof_add(c, DI_DSV4_BLK_NORM, t0);
        if ((s = dsv4_attention(c, kv, il, b, pool, err))) return s;
        t0 = dsv4_prof_now(c);
        dsv4_hc_post(c, n, pool);
        dsv4_hc_pre(c, &L->hc_ffn_fn, L->hc_ffn_base, L->hc_ffn_scale, n, pool);
        dsv4_prof_add(c, DI_DSV4_BLK_MHC, t0);
        t0 = dsv4_prof_now(c);
        m->be.ops->rms_norm(&m->be, c->h, L->ffn_norm, c->h, n, D, hp->rms_eps, 0, pool);
        dsv4_prof_add(c, DI_DSV4_BLK_NORM, t0);
        if ((s = dsv4_moe(c, il, b->token, n, pool, err))) return s;
        t0 = dsv4_prof_now(c);
        dsv4_hc_post(c, n, pool);
        dsv4_prof_add(c, DI_DSV4_BLK_MHC, t0);
    }
    if (c->ep && (s = dsv4_ep_after_forward(c->ep, err))) return s;
    if (n_want == 0) return DI_OK;
    t0 = dsv4_prof_now(c);
    /* collapse only the rows that want logits: move them to the front */
    int64_t j = 0;
    for (int32_t i = 0; i < b->n_rows; i++)
        if (b->want_logits[i]) {
            if (j != i) memmove(c->X + j * N * D, c->X + (int64_t)i * N * D, (size_t)(N * D) * sizeof(float));
            j++;
        }
    dsv4_hc_head(c, n_want, pool);
    dsv4_prof_add(c, DI_DSV4_BLK_MHC, t0);
    t0 = dsv4_prof_now(c);
    m->be.ops->rms_norm(&m->be, c->h, m->norm, c->h, n_want, D, hp->rms_eps, 0, pool);
    dsv4_lin(&m->be, &m->head, c->h, D, logits_out, hp->n_vocab, n_want, c->mm_scratch, pool);
    dsv4_prof_add(c, DI_DSV4_BLK_HEAD, t0);
    if (c->prof_on) {
        c->prof.flops[DI_DSV4_BLK_HEAD] += 2.0 * (double)n_want * (double)hp->n_vocab * (double)D;
        c->prof.bytes[DI_DSV4_BLK_HEAD] += dsv4_linear_bytes(&m->head);
    }
    return DI_OK;
}

/* Region i of the cache for block copies: layer i's rows (every per-position
 * record of the layer lives in its row). */
bool di_dsv4_kv_region(di_dsv4_kv *kv, int32_t i, uint8_t **base, size_t *slot_bytes) {
    if (i < 0 || i >= kv->n_layers) return false;
    *base = (uint8_t *)kv->data[i];
    *slot_bytes = (size_t)kv->lay[i].row * (kv->dtype == DI_DTYPE_F32 ? 4u : 2u);
    return true;
}
