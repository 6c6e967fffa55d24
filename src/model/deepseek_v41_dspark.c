/* The DSpark drafter (model/deepseek_v41_dspark.h): the main keys written
 * during the main forward, the draft block through the stages, and the
 * sequential heads. The stages reuse the forward's blocks (shifted mHC,
 * RMSNorm, MoE, the attention core and the grouped output projection);
 * what differs is the attention's key set (window over the stage's own
 * records, ending at the block's last position) and where the keys come
 * from (the projected target features for the main positions). Each step
 * follows the main layers' rounding points, so the numerics policy applies
 * unchanged. */
#include "model/deepseek_v41_dspark.h"

#include "model/deepseek_v41_internal.h"
#include "sample/dspark.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_K 64

int32_t di_dsv41_dspark_stages(const di_dsv41_model *m) { return m ? m->n_draft : 0; }

static uint8_t *drec(const di_dsv41_kv *kv, int32_t stage, int64_t slot) {
    return kv->draft[stage] + slot * kv->draft_row;
}

static void put_key(const di_dsv41_kv *kv, int32_t stage, int64_t slot, const float *x, int32_t n) {
    if (kv->num == DI_DSV41_NUMERICS_DEEPINFER) dsv41_mxfp8_encode(x, n, drec(kv, stage, slot));
    else memcpy(drec(kv, stage, slot), x, (size_t)n * 4);
}

static void get_key(const di_dsv41_kv *kv, int32_t stage, int64_t slot, float *x, int32_t n) {
    if (kv->num == DI_DSV41_NUMERICS_DEEPINFER) dsv41_mxfp8_decode(drec(kv, stage, slot), n, x);
    else memcpy(x, drec(kv, stage, slot), (size_t)n * 4);
}

/* kv (hd) <- rotary(kv_norm(kv)) at p, the window path of a main layer. */
static void finish_key(di_dsv41_ctx *c, const dsv41_layer *L, float *kvr, int32_t p) {
    const di_dsv41_model *m = c->m;
    const di_dsv41_hparams *hp = &m->hp;
    dsv41_norm(c, kvr, L->kv_norm, kvr, hp->head_dim);
    di_rope_tail(kvr, 1, hp->head_dim, hp->n_rot, m->inv_freq_main, p, 1.0f);
    if (dsv41_faithful(c)) dsv41_round_bf16(kvr, hp->head_dim);
}

void dsv41_draft_main_keys(di_dsv41_ctx *c, di_dsv41_kv *kv, const di_batch *b, di_threadpool *pool) {
    const di_dsv41_model *m = c->m;
    const di_dsv41_hparams *hp = &m->hp;
    const int64_t n = b->n_rows, D = hp->n_embd, T = hp->n_dspark_targets, hd = hp->head_dim;
    /* M = main_norm(main_proj F); c->feat is cast in place, c->y holds M */
    dsv41_linear(c, &m->main_proj, c->feat, T * D, c->y, D, n, 1, pool);
    dsv41_norm_rows(c, c->y, m->main_norm, n, D, pool);
    memcpy(c->xq, c->y, (size_t)(n * D) * sizeof(float));
    for (int32_t st = 0; st < m->n_draft; st++) {
        const dsv41_layer *L = &m->mtp[st];
        dsv41_linear(c, &L->wkv, c->xq, D, c->kvr, hd, n, 1, pool);
        for (int64_t i = 0; i < n; i++) {
            finish_key(c, L, c->kvr + i * hd, b->pos[i]);
            put_key(kv, st, dsv41_slot(b, b->seq[i], b->pos[i]), c->kvr + i * hd, (int32_t)hd);
        }
    }
}

typedef struct draft_stage {
    di_dsv41_ctx *c;
    const di_dsv41_kv *kv;
    int32_t stage, window;
    const di_batch *b;
    const int32_t *key_end;
    int64_t r0;           /* the chunk's first row */
} draft_stage;

/* Key address: the slot of the stage's record. */
static void draft_get_key(void *user, int64_t addr, float *dst) {
    const draft_stage *j = user;
    get_key(j->kv, j->stage, addr, dst, j->c->m->hp.head_dim);
}

static void draft_list_row(void *user, int64_t i) {
    const draft_stage *j = user;
    dsv4_keyset *ks = &j->c->ks;
    const int64_t row = j->r0 + i;
    const int32_t seq = j->b->seq[row], end = j->key_end[row];
    int32_t first = end - j->window + 1 > 0 ? end - j->window + 1 : 0, t = 0;
    int64_t *a = ks->addr + i * ks->ld;
    for (int32_t q = first; q <= end; q++) a[t++] = dsv41_slot(j->b, seq, q);
    ks->n_idx[i] = t;
}

di_status dsv41_draft_attention(di_dsv41_ctx *c, di_dsv41_kv *kv, int32_t stage, const di_batch *b,
                                const int32_t *key_end, int32_t window, di_threadpool *pool, di_error *err) {
    const di_dsv41_model *m = c->m;
    const di_dsv41_hparams *hp = &m->hp;
    const dsv41_layer *L = &m->mtp[stage];
    const int64_t n = b->n_rows, D = hp->n_embd, hd = hp->head_dim, H = hp->n_heads, QL = hp->q_lora;
    /* q_a and kv from one cast of h (q_a_kv_proj), q = wq_b(q_norm(q_a)), rotary */
    memcpy(c->xq, c->h, (size_t)(n * D) * sizeof(float));
    dsv41_linear(c, &L->wq_a, c->xq, D, c->qr, QL, n, 1, pool);
    dsv41_linear(c, &L->wkv, c->xq, D, c->kvr, hd, n, 1, pool);
    dsv41_norm_rows(c, c->qr, L->q_norm, n, QL, pool);
    dsv41_linear(c, &L->wq_b, c->qr, QL, c->q, H * hd, n, 1, pool);
    /* q came bf16 out of its linear (faithful): the op's first rounding changes nothing */
    m->be->ops->rope_rows(m->be, c->q, n, (int32_t)H, (int32_t)hd, hp->n_rot, m->inv_freq_main, b->pos, 1.0f,
                          dsv41_faithful(c), pool);
    for (int64_t i = 0; i < n; i++) {
        finish_key(c, L, c->kvr + i * hd, b->pos[i]);
        put_key(kv, stage, dsv41_slot(b, b->seq[i], b->pos[i]), c->kvr + i * hd, (int32_t)hd);
    }
    /* every key of the block is written before any row reads */
    draft_stage job = {c, kv, stage, window, b, key_end, 0};
    const dsv4_keyset_src src = {(int64_t)kv->n_blocks * kv->block_size, draft_get_key};
    di_status s = dsv41_sparse_attend(c, &src, b, window, L->sink, m->inv_freq_main, draft_list_row, &job, &job.r0,
                                      pool, err);
    if (s) return s;
    dsv41_out_proj(c, L, n, pool);
    return DI_OK;
}

static di_status check_req(const di_dsv41_model *m, const di_dsv41_kv *kv, const di_batch *t,
                           const di_dsv41_draft_req *q, int32_t k, di_error *err) {
    const di_dsv41_hparams *hp = &m->hp;
    if (q->seq < 0 || q->seq >= t->n_seq_slots || !t->block_tables[q->seq])
        return di_error_set(err, DI_ERR_INVALID_ARG, "dspark draft: sequence slot %d", (int)q->seq);
    if (q->golden < 0 || q->golden >= hp->n_vocab)
        return di_error_set(err, DI_ERR_INVALID_ARG, "dspark draft: golden token %d", (int)q->golden);
    int64_t last = (int64_t)q->last_pos + k;
    if (q->last_pos < 0 || last >= (int64_t)t->n_blocks[q->seq] * t->block_size)
        return di_error_set(err, DI_ERR_RANGE, "dspark draft: positions %d..%lld past the sequence's blocks",
                            (int)q->last_pos, (long long)last);
    for (int64_t b = 0; b <= last / t->block_size; b++) {
        int32_t blk = t->block_tables[q->seq][b];
        if (blk < 0 || blk >= kv->n_blocks)
            return di_error_set(err, DI_ERR_INVALID_ARG, "dspark draft: block %d out of range", (int)blk);
    }
    if (!(q->temperature >= 0.0f) || !(q->top_p > 0.0f && q->top_p <= 1.0f))
        return di_error_set(err, DI_ERR_INVALID_ARG, "dspark draft: temperature %g / top_p %g",
                            (double)q->temperature, (double)q->top_p);
    return DI_OK;
}

di_status di_dsv41_dspark_draft(di_dsv41_ctx *c, di_dsv41_kv *kv, const di_batch *tables,
                                const di_dsv41_draft_req *reqs, int32_t n_req, int32_t k, float conf_temperature,
                                float *logits, float *logprobs, float *conf, int32_t *drafts, di_threadpool *pool,
                                di_error *err) {
    if (!c || !kv || !tables || (n_req > 0 && !reqs))
        return di_error_set(err, DI_ERR_INVALID_ARG, "dspark draft: NULL argument");
    const di_dsv41_model *m = c->m;
    const di_dsv41_hparams *hp = &m->hp;
    if (m->n_draft < 1 || kv->n_draft != m->n_draft)
        return di_error_set(err, DI_ERR_UNSUPPORTED, "dspark draft: %s",
                            m->n_draft < 1 ? "the checkpoint has no drafter" : "DSpark is not enabled on this kv");
    if (k < 1 || k > MAX_K || n_req < 0 || (int64_t)n_req * k > 65536)
        return di_error_set(err, DI_ERR_INVALID_ARG, "dspark draft: %d requests x %d drafts", (int)n_req, (int)k);
    if (tables->block_size != kv->block_size || tables->n_seq_slots < 1 || !tables->block_tables ||
        !tables->n_blocks)
        return di_error_set(err, DI_ERR_INVALID_ARG, "dspark draft: block tables do not match the kv cache");
    if (n_req == 0) return DI_OK;
    di_status s;
    int32_t max_pos = 0;
    for (int32_t i = 0; i < n_req; i++) {
        if ((s = check_req(m, kv, tables, &reqs[i], k, err))) return s;
        max_pos = reqs[i].last_pos + k > max_pos ? reqs[i].last_pos + k : max_pos;
    }
    const int64_t n = (int64_t)n_req * k, D = hp->n_embd, N = hp->hc_mult, V = hp->n_vocab;
    const int32_t rank = hp->dspark_markov_rank, W = hp->window + k;
    /* the attention reads W + k keys: size the scratch for positions up to that */
    if ((s = dsv41_ctx_reserve(c, n, di_threadpool_n_threads(pool), tables->n_seq_slots,
                               max_pos > W + k ? max_pos : W + k, err)))
        return s;
    if (c->attn_floats < (int64_t)W * (hp->head_dim + 1))
        return di_error_set(err, DI_ERR_UNSUPPORTED, "dspark draft: %d drafts exceed the attention scratch", (int)k);
    int32_t *tok = malloc((size_t)n * sizeof(int32_t)), *seq = malloc((size_t)n * sizeof(int32_t));
    int32_t *pos = malloc((size_t)n * sizeof(int32_t)), *key_end = malloc((size_t)n * sizeof(int32_t));
    float *lg = malloc((size_t)V * sizeof(float)), *lp = malloc((size_t)V * sizeof(float));
    float *hb = malloc((size_t)n * D * sizeof(float)), *emb = malloc((size_t)(rank > 0 ? rank : 1) * sizeof(float));
    void *scratch = malloc(di_dspark_scratch_bytes((int32_t)V));
    if (!tok || !seq || !pos || !key_end || !lg || !lp || !hb || !emb || !scratch) {
        s = di_error_set(err, DI_ERR_NOMEM, "dspark draft: out of memory");
        goto done;
    }
    /* the block: [golden, noise x (k-1)] at last_pos+1 .. last_pos+k */
    for (int32_t i = 0; i < n_req; i++)
        for (int32_t t = 0; t < k; t++) {
            int64_t r = (int64_t)i * k + t;
            tok[r] = t == 0 ? reqs[i].golden : hp->dspark_noise_token;
            seq[r] = reqs[i].seq;
            pos[r] = reqs[i].last_pos + 1 + t;
            key_end[r] = reqs[i].last_pos + k;
        }
    di_batch b = *tables;
    b.n_rows = (int32_t)n;
    b.token = tok;
    b.seq = seq;
    b.pos = pos;
    b.want_logits = NULL;
    for (int64_t r = 0; r < n; r++) {
        float *x = c->R + r * N * D;
        dsv4_lin_rows(m->be, &m->embed, &tok[r], 1, x, 0);
        for (int64_t j = 1; j < N; j++) memcpy(x + j * D, x, (size_t)D * sizeof(float));
        for (int64_t j = 0; j < N; j++) c->pre[r * N + j] = j == 0 ? 1.0f : 0.0f;
    }
    for (int32_t st = 0; st < m->n_draft; st++) {
        const dsv41_layer *L = &m->mtp[st];
        dsv41_hc_pre(c, &L->hc_attn_fn, L->hc_attn_base, L->hc_attn_scale, n, pool);
        dsv41_norm_rows(c, c->h, L->attn_norm, n, D, pool);
        if ((s = dsv41_draft_attention(c, kv, st, &b, key_end, W, pool, err))) goto done;
        dsv41_hc_post(c, n, pool);
        dsv41_hc_pre(c, &L->hc_ffn_fn, L->hc_ffn_base, L->hc_ffn_scale, n, pool);
        dsv41_norm_rows(c, c->h, L->ffn_norm, n, D, pool);
        if ((s = dsv41_moe_layer(c, L, -1, n, pool, err))) goto done;
        dsv41_hc_post(c, n, pool);
    }
    /* h before the norm = the last pre mix of the copies; then norm + head */
    for (int64_t r = 0; r < n; r++) {
        const float *R = c->R + r * N * D, *pre = c->pre + r * N;
        float *h = hb + r * D;
        for (int64_t d = 0; d < D; d++) {
            float sm = 0.0f;
            for (int64_t q = 0; q < N; q++) sm += pre[q] * R[q * D + d];
            h[d] = sm;
        }
        if (dsv41_faithful(c)) dsv41_round_bf16(h, D);
        dsv41_norm(c, h, m->mtp_norm, c->h + r * D, D);
    }
    /* the heads, one step at a time (the Markov term needs the previous draft) */
    for (int32_t i = 0; i < n_req; i++) {
        const di_dsv41_draft_req *q = &reqs[i];
        int32_t prev = q->golden;
        for (int32_t t = 0; t < k; t++) {
            int64_t r = (int64_t)i * k + t;
            dsv41_lin_apply(c, &m->head, c->h + r * D, D, lg, V, 1, NULL);
            if (rank > 0) {
                dsv4_lin_rows(m->be, &m->markov_embed, &prev, 1, emb, 0);
                /* logits += E[prev] . H^T, one bf16 GEMM row with f32 output */
                float *mk = lp; /* scratch: V floats */
                dsv41_lin_apply(c, &m->markov_head, emb, rank, mk, V, 1, NULL);
                for (int64_t v = 0; v < V; v++) lg[v] += mk[v];
            }
            float cf = di_dspark_confidence(hb + r * D, (int32_t)D, rank > 0 ? emb : NULL, rank, m->conf_w,
                                            conf_temperature);
            if (logits) memcpy(logits + r * V, lg, (size_t)V * sizeof(float));
            if ((s = di_dspark_logprobs(lg, (int32_t)V, q->temperature, q->top_p, q->top_k, scratch, lp, err)))
                goto done;
            int32_t d = di_dspark_sample_logprobs(lp, (int32_t)V, q->seed + DI_DSPARK_MTP_SEED_OFFSET,
                                                  di_dspark_draft_position(q->sample_pos, 0, t));
            if (logprobs) memcpy(logprobs + r * V, lp, (size_t)V * sizeof(float));
            if (conf) conf[r] = cf;
            if (drafts) drafts[r] = d;
            prev = d;
        }
    }
    s = DI_OK;
done:
    free(tok);
    free(seq);
    free(pos);
    free(key_end);
    free(lg);
    free(lp);
    free(hb);
    free(emb);
    free(scratch);
    return s;
}
