/* V4.1 attention of one layer over a batch (DeepInfer v4_modules/attn.py:
 * V4Attention.forward, compress.py:Compressor, index_attn.py:MQA and
 * tilelang_ops/candidate_blocks.py), with the layer's role deciding which
 * parts run (deepseek_v41.h):
 *
 *   qa, kv  = fp8act(h) [Wq_a; Wkv]                      (n, q_lora), (n, hd)
 *   qr      = q_norm(qa); q = fp8act(qr) Wq_b, rotary    (n, H, hd)  no per-head norm
 *   kv      = rotary(kv_norm(kv))  -> window record of the row's slot (MXFP8)
 *   kv source, ratio 2: latent, gate = h [Wkv_c; Wgate] (f32); the pair's
 *             first token keeps them in its slot; the second pools
 *             c = sum_t softmax_t(gate)[ch] latent_t[ch]
 *   kv source, ratio 1: c = h Wkv_c per token
 *             c -> pre = norm_c(c); entry = rotary(pre) at the pair's first
 *             position -> compressed record (FP4) of the closing slot;
 *             index-K sources also key = rotary(k_norm(pre Wk)) (FP4)
 *   index source: iq = fp8act(qr) Wq_b_idx, rotary, FP4; w = h Wproj
 *             score_j = sum_h w_h relu(iq_h . key_j) (bf16) over the visible
 *             entries j < (p+1)/ratio of its kv source (inside the
 *             candidate blocks past the candidate source); top index_topk
 *             of them, ties to the lower index, kept for the layers that
 *             reuse this selection; the candidate source also keeps its
 *             top blocks (block score = max, the last block always kept)
 *   o       = softmax-with-sink over window positions p-window+1..p of its
 *             own records and the selected entries of its kv source;
 *             inverse rotary at p; y = (fp8 per group o Wo_a_g) Wo_b.
 *
 * Every record is a function of its own position, so it lives in that
 * position's paged slot and chunked prefill, prefix hits and recompute all
 * read the same bytes; a row's result depends only on its sequence. */
#include "model/deepseek_v41_internal.h"

#include <float.h>
#include <math.h>
#include <string.h>

#define BF16_MAX 3.38953139e38f

int64_t dsv41_slot(const di_batch *b, int32_t seq, int32_t pos) {
    return (int64_t)b->block_tables[seq][pos / b->block_size] * b->block_size + pos % b->block_size;
}

static uint8_t *rec(const di_dsv41_kv *kv, int32_t il, int64_t slot, int32_t off) {
    return kv->data[il] + slot * kv->lay[il].row + off;
}

/* A record's format in the faithful mode (f32 otherwise): window K=V
 * MXFP8, compressed entries FP4 (use_fp4_sparse_kv) or MXFP8, index keys
 * FP4 with power-of-two scales. */
typedef enum rec_fmt { FMT_MXFP8, FMT_NVFP4, FMT_FP4I } rec_fmt;

static void put_rec(di_dsv41_kv *kv, int32_t il, int64_t slot, int32_t off, rec_fmt fmt, const float *x, int32_t n) {
    uint8_t *d = rec(kv, il, slot, off);
    if (kv->num != DI_DSV41_NUMERICS_DEEPINFER) memcpy(d, x, (size_t)n * 4);
    else if (fmt == FMT_NVFP4) dsv41_nvfp4_encode(x, n, d);
    else if (fmt == FMT_FP4I) dsv41_fp4i_encode(x, n, d);
    else dsv41_mxfp8_encode(x, n, d);
}
static void get_rec(const di_dsv41_kv *kv, int32_t il, int64_t slot, int32_t off, rec_fmt fmt, float *x, int32_t n) {
    const uint8_t *d = rec(kv, il, slot, off);
    if (kv->num != DI_DSV41_NUMERICS_DEEPINFER) memcpy(x, d, (size_t)n * 4);
    else if (fmt == FMT_NVFP4) dsv41_nvfp4_decode(d, n, x);
    else if (fmt == FMT_FP4I) dsv41_fp4i_decode(d, n, x);
    else dsv41_mxfp8_decode(d, n, x);
}
static void put_win(di_dsv41_kv *kv, int32_t il, int64_t slot, const float *x, int32_t n) {
    put_rec(kv, il, slot, kv->lay[il].off_win, FMT_MXFP8, x, n);
}
static void get_win(const di_dsv41_kv *kv, int32_t il, int64_t slot, float *x, int32_t n) {
    get_rec(kv, il, slot, kv->lay[il].off_win, FMT_MXFP8, x, n);
}
static void put_comp(di_dsv41_kv *kv, int32_t il, int64_t slot, const float *x, int32_t n, int fp4) {
    put_rec(kv, il, slot, kv->lay[il].off_comp, fp4 ? FMT_NVFP4 : FMT_MXFP8, x, n);
}
static void get_comp(const di_dsv41_kv *kv, int32_t il, int64_t slot, float *x, int32_t n, int fp4) {
    get_rec(kv, il, slot, kv->lay[il].off_comp, fp4 ? FMT_NVFP4 : FMT_MXFP8, x, n);
}
static void put_ikey(di_dsv41_kv *kv, int32_t il, int64_t slot, const float *x, int32_t n) {
    put_rec(kv, il, slot, kv->lay[il].off_ikey, FMT_FP4I, x, n);
}
static void get_ikey(const di_dsv41_kv *kv, int32_t il, int64_t slot, float *x, int32_t n) {
    get_rec(kv, il, slot, kv->lay[il].off_ikey, FMT_FP4I, x, n);
}

static void maybe_bf16(const di_dsv41_ctx *c, float *x, int64_t n) {
    if (dsv41_faithful(c)) dsv41_round_bf16(x, n);
}

/* ---- compressed entries ------------------------------------------------------ */

/* Entry j of sequence seq is closed by the row at position j*r + r - 1:
 * pool (ratio 2) or take (ratio 1) the latent, normalize, rotate at j*r,
 * store; index-K sources add the index key. lat/gate: this row's f32
 * projections. */
void dsv41_close_entry(di_dsv41_ctx *c, di_dsv41_kv *kv, int32_t il, const di_batch *b, int32_t seq, int32_t p,
                       const float *lat, const float *gate, float *tmp) {
    const di_dsv41_model *m = c->m;
    const di_dsv41_hparams *hp = &m->hp;
    const dsv41_layer *L = &m->layers[il];
    const int32_t hd = hp->head_dim, r = hp->role[il].ratio;
    float *e = tmp, *pre = tmp + hd, *key = tmp + 2 * hd; /* (hd), (hd), (ihd) */
    if (r == 2) {
        const float *st = (const float *)rec(kv, il, dsv41_slot(b, seq, p - 1), kv->lay[il].off_state);
        const float *lat0 = st, *gate0 = st + hd;
        for (int32_t d = 0; d < hd; d++) {
            /* per-channel softmax over the two tokens (tl/compress.py ref) */
            float mx = gate0[d] > gate[d] ? gate0[d] : gate[d];
            float e0 = expf(gate0[d] - mx), e1 = expf(gate[d] - mx), s = e0 + e1;
            e[d] = lat0[d] * (e0 / s) + lat[d] * (e1 / s);
        }
        maybe_bf16(c, e, hd);
    } else {
        memcpy(e, lat, (size_t)hd * sizeof(float));
    }
    dsv41_norm(c, e, L->c_norm, pre, hd);
    int32_t j = (p + 1) / r - 1, rpos = j * r;
    memcpy(e, pre, (size_t)hd * sizeof(float));
    di_rope_tail(e, 1, hd, hp->n_rot, m->inv_freq_compress, rpos, 1.0f);
    maybe_bf16(c, e, hd);
    int64_t slot = dsv41_slot(b, seq, p);
    put_comp(kv, il, slot, e, hd, hp->use_fp4_kv);
    if (hp->role[il].idxk_src == il) {
        const int32_t ihd = hp->index_dim;
        float w[4096]; /* wk is a small bf16 matrix: one row at a time, hd <= 4096 */
        m->be->ops->scaled_dot_rows(m->be, &L->i_wk, pre, key, w);
        maybe_bf16(c, key, ihd);
        dsv41_norm(c, key, L->i_knorm, key, ihd);
        di_rope_tail(key, 1, ihd, hp->n_rot, m->inv_freq_compress, rpos, 1.0f);
        maybe_bf16(c, key, ihd);
        put_ikey(kv, il, slot, key, ihd);
    }
}

/* ---- per-row attention ----------------------------------------------------------- */

int64_t dsv41_attention_scratch_floats(const di_dsv41_model *m, int32_t max_pos) {
    const di_dsv41_hparams *hp = &m->hp;
    int64_t n_ent = (int64_t)max_pos + 1; /* ratio 1 bounds every layer's entry count */
    int64_t n_win = hp->window < n_ent ? hp->window : n_ent;
    int64_t n_sel = hp->index_topk < n_ent ? hp->index_topk : n_ent;
    int64_t n_keys = n_win + n_sel;
    int64_t n_blk = hp->cand_block ? n_ent / hp->cand_block + 1 : 0;
    /* keys (n_keys, hd), logits (n_keys), scores + order (2 n_ent), block
     * scores + order (2 n_blk), an index key, a head dot row */
    return n_keys * hp->head_dim + n_keys + 2 * n_ent + 2 * n_blk + hp->index_dim + 64;
}

/* k largest of v[0..n) by (value desc, index asc) into out, ascending indices. */
static int32_t top_k(const float *v, int32_t n, int32_t k, int32_t *idx, int32_t *out) {
    if (k >= n) {
        for (int32_t i = 0; i < n; i++) out[i] = i;
        return n;
    }
    for (int32_t i = 0; i < n; i++) idx[i] = i;
    /* partial selection: k rounds of a max scan would be O(nk); a heap-free
     * quickselect keeps it O(n) on average and the tie rule exact */
    int32_t lo = 0, hi = n - 1, want = k - 1;
    while (lo < hi) {
        int32_t piv = idx[(lo + hi) / 2], i = lo, j = hi;
        float pv = v[piv];
        while (i <= j) {
            while (v[idx[i]] > pv || (v[idx[i]] == pv && idx[i] < piv)) i++;
            while (v[idx[j]] < pv || (v[idx[j]] == pv && idx[j] > piv)) j--;
            if (i <= j) {
                int32_t t = idx[i];
                idx[i] = idx[j];
                idx[j] = t;
                i++;
                j--;
            }
        }
        if (want <= j) hi = j;
        else if (want >= i) lo = i;
        else break;
    }
    memcpy(out, idx, (size_t)k * sizeof(int32_t));
    for (int32_t a = 1; a < k; a++) /* ascending indices: k is small */
        for (int32_t z = a; z > 0 && out[z - 1] > out[z]; z--) {
            int32_t t = out[z];
            out[z] = out[z - 1];
            out[z - 1] = t;
        }
    return k;
}

/* One stage of the rows' attention over a chunk of rows [r0, r0 + n). Key
 * addresses: slot * 2 + 0 the window record of layer il, slot * 2 + 1 the
 * compressed entry of the kv source closed at slot; index keys: the slot
 * (of the index-K source). */
typedef struct rows_stage {
    di_dsv41_ctx *c;
    const di_dsv41_kv *kv;
    int32_t il;
    const di_batch *b;
    int64_t r0;
    int64_t ld_score;   /* floats per row of c->iscore */
} rows_stage;

static void get_key(void *user, int64_t addr, float *dst) {
    const rows_stage *st = user;
    const di_dsv41_hparams *hp = &st->c->m->hp;
    if (addr & 1) get_comp(st->kv, hp->role[st->il].kv_src, addr >> 1, dst, hp->head_dim, hp->use_fp4_kv);
    else get_win(st->kv, st->il, addr >> 1, dst, hp->head_dim);
}

static void get_index_key(void *user, int64_t addr, float *dst) {
    const rows_stage *st = user;
    const di_dsv41_hparams *hp = &st->c->m->hp;
    get_ikey(st->kv, hp->role[st->il].idxk_src, addr, dst, hp->index_dim);
}

/* Calls visit(j) for every entry an index row scores, in order: all its
 * klen entries, or those inside its candidate blocks past the candidate
 * source. Returns the count. */
#define FOR_SCORED(c, hp, ro, row, klen, j, body)                                                         \
    do {                                                                                                  \
        const int32_t *cand_ = (ro)->cand_src >= 0 ? (c)->cand + (row) * (hp)->cand_topk_blocks : NULL;   \
        for (int32_t bi_ = 0; cand_ ? bi_ < (hp)->cand_topk_blocks : bi_ < 1; bi_++) {                     \
            int32_t j0_ = 0, j1_ = (klen);                                                                \
            if (cand_) {                                                                                  \
                if (cand_[bi_] < 0) break;                                                                \
                j0_ = cand_[bi_] * (hp)->cand_block;                                                      \
                j1_ = j0_ + (hp)->cand_block < (klen) ? j0_ + (hp)->cand_block : (klen);                  \
            }                                                                                             \
            for (int32_t j = j0_; j < j1_; j++) body                                                      \
        }                                                                                                 \
    } while (0)

/* The index keys an index row scores, in the order it scores them. */
static void index_list_row(void *user, int64_t i) {
    const rows_stage *st = user;
    di_dsv41_ctx *c = st->c;
    const di_dsv41_hparams *hp = &c->m->hp;
    const di_dsv41_role *ro = &hp->role[st->il];
    dsv4_keyset *ks = &c->ks;
    const int64_t row = st->r0 + i;
    const int32_t r = ro->ratio, p = st->b->pos[row], seq = st->b->seq[row], klen = (p + 1) / r;
    int64_t *a = ks->addr + i * ks->ld;
    int32_t t = 0;
    if (klen > 0) FOR_SCORED(c, hp, ro, row, klen, j, { a[t++] = dsv41_slot(st->b, seq, j * r + r - 1); });
    ks->n_idx[i] = t;
}

/* The index source's selection for one row into c->topk[row] (-1 filled),
 * and at the candidate source its candidate blocks into c->cand[row], from
 * the row's scores (c->iscore, in index_list_row's order). */
static void index_pick_row(void *arg, int64_t i, int thread) {
    const rows_stage *st = arg;
    di_dsv41_ctx *c = st->c;
    const di_dsv41_hparams *hp = &c->m->hp;
    const di_dsv41_role *ro = &hp->role[st->il];
    const int64_t row = st->r0 + i;
    const int32_t r = ro->ratio, p = st->b->pos[row], klen = (p + 1) / r, K = hp->index_topk;
    float *scr = c->attn_scratch + (int64_t)thread * c->attn_floats;
    float *score = scr; /* (klen) scores, (klen) order */
    int32_t *order = (int32_t *)(scr + klen);
    int32_t *sel = c->topk + row * K;
    for (int32_t q = 0; q < K; q++) sel[q] = -1;
    if (klen <= 0) return;
    for (int32_t j = 0; j < klen; j++) score[j] = -INFINITY;
    const float *got = c->iscore + i * st->ld_score;
    int32_t n_scored = 0;
    FOR_SCORED(c, hp, ro, row, klen, j, { score[j] = got[n_scored++]; });
    if (dsv41_faithful(c)) dsv41_round_bf16(score, klen); /* -inf stays -inf */
    if (n_scored < klen && n_scored <= K) { /* every scored entry is kept */
        int32_t t = 0;
        for (int32_t j = 0; j < klen; j++)
            if (score[j] != -INFINITY) sel[t++] = j;
    } else {
        top_k(score, klen, K, order, sel);
    }
    if (ro->cand_producer && hp->cand_topk_blocks) {
        const int32_t B = hp->cand_block, nb = (klen + B - 1) / B, TB = hp->cand_topk_blocks;
        float *bs = score; /* reuse: block scores overwrite the first nb scores */
        for (int32_t bi = 0; bi < nb; bi++) {
            float mx = -INFINITY;
            for (int32_t j = bi * B; j < (bi + 1) * B && j < klen; j++) mx = score[j] > mx ? score[j] : mx;
            bs[bi] = mx < BF16_MAX ? mx : BF16_MAX;
        }
        bs[nb - 1] = INFINITY; /* the last valid block is always kept */
        int32_t *cd = c->cand + row * TB;
        for (int32_t q = 0; q < TB; q++) cd[q] = -1;
        top_k(bs, nb, TB, order, cd);
    }
}

/* The keys row attends to, in order: its window (from replay_from for a
 * bounded-replay decoder), then the compressed entries its top-k selected. */
static void attn_list_row(void *user, int64_t i) {
    const rows_stage *st = user;
    const di_dsv41_ctx *c = st->c;
    const di_dsv41_hparams *hp = &c->m->hp;
    const di_dsv41_role *ro = &hp->role[st->il];
    const di_batch *b = st->b;
    dsv4_keyset *ks = &st->c->ks;
    const int64_t row = st->r0 + i;
    const int32_t p = b->pos[row], seq = b->seq[row];
    const int32_t n_win = hp->window < p + 1 ? hp->window : p + 1;
    const int32_t *sel = ro->ratio ? c->topk + row * hp->index_topk : NULL;
    int32_t t0 = p - n_win + 1, t = 0;
    /* bounded replay: a decoder row sees window keys from its sequence's
     * replay_from on (DeepInfer's yoco_swa_visibility); nothing before it
     * was computed in these layers */
    if (b->replay_from && st->il >= hp->n_prefill_layer && b->replay_from[seq] > t0) t0 = b->replay_from[seq];
    int64_t *a = ks->addr + i * ks->ld;
    for (int32_t q = t0; q <= p; q++) a[t++] = dsv41_slot(b, seq, q) * 2;
    for (int32_t q = 0; sel && q < hp->index_topk && sel[q] >= 0; q++)
        a[t++] = dsv41_slot(b, seq, sel[q] * ro->ratio + ro->ratio - 1) * 2 + 1;
    ks->n_idx[i] = t;
}

di_status dsv41_sparse_attend(di_dsv41_ctx *c, const dsv4_keyset_src *src, const di_batch *b, int64_t ld,
                              const float *sink, const float *inv_freq, void (*list_row)(void *user, int64_t i),
                              void *user, int64_t *r0, di_threadpool *pool, di_error *err) {
    const di_backend *be = c->m->be;
    const int32_t hd = c->m->hp.head_dim, H = c->m->hp.n_heads;
    dsv4_keyset *ks = &c->ks;
    const int64_t n = b->n_rows, chunk = dsv4_keyset_chunk_rows(n, ld, hd);
    di_status s;
    for (*r0 = 0; *r0 < n; *r0 += chunk) {
        const int64_t nc = n - *r0 < chunk ? n - *r0 : chunk;
        if ((s = dsv4_keyset_begin(ks, nc, ld, src->n_addr, err))) return s;
        di_threadpool_rows(pool, nc, list_row, user);
        if ((s = dsv4_keyset_index(ks, nc, hd, err))) return s;
        dsv4_keyset_fill(ks, hd, src->get, user, pool);
        const di_sparse_attn_args aa = {c->q + *r0 * H * hd, nc, H, hd, sink, ks->keys, ks->idx, ks->ld, ks->n_idx,
                                        c->att + *r0 * H * hd};
        be->ops->sparse_attention(be, &aa, c->attn_scratch, pool);
        /* rounded, the inverse rotary at the row's position, rounded (faithful) */
        be->ops->rope_rows(be, c->att + *r0 * H * hd, nc, H, hd, c->m->hp.n_rot, inv_freq, b->pos + *r0, -1.0f,
                           dsv41_faithful(c), pool);
    }
    return DI_OK;
}

/* Every row of b attends (the index selection first on index sources). */
static di_status attend_rows(di_dsv41_ctx *c, const di_dsv41_kv *kv, int32_t il, const di_batch *b,
                             di_threadpool *pool, di_error *err) {
    const di_dsv41_model *m = c->m;
    const di_dsv41_hparams *hp = &m->hp;
    const di_dsv41_role *ro = &hp->role[il];
    const di_backend *be = m->be;
    const int64_t n = b->n_rows, n_slots = (int64_t)kv->n_blocks * kv->block_size;
    const int32_t IH = hp->index_heads, ihd = hp->index_dim;
    int32_t max_pos = 0;
    for (int64_t i = 0; i < n; i++) max_pos = b->pos[i] > max_pos ? b->pos[i] : max_pos;
    dsv4_keyset *ks = &c->ks;
    rows_stage st = {c, kv, il, b, 0, 0};
    di_status s;
    if (ro->ratio && ro->idx_src == il) {
        const int64_t klen_max = ((int64_t)max_pos + 1) / ro->ratio, ld = klen_max > 0 ? klen_max : 1;
        const int64_t chunk = dsv4_keyset_chunk_rows(n, ld, ihd);
        if (!dsv4_grow(&c->iscore, &c->cap_iscore, chunk * ld, sizeof(float)))
            return di_error_set(err, DI_ERR_NOMEM, "deepseek_v41 indexer: out of memory for %lld rows", (long long)n);
        st.ld_score = ld;
        for (int64_t r0 = 0; r0 < n; r0 += chunk) {
            const int64_t nc = n - r0 < chunk ? n - r0 : chunk;
            st.r0 = r0;
            if ((s = dsv4_keyset_begin(ks, nc, ld, n_slots, err))) return s;
            di_threadpool_rows(pool, nc, index_list_row, &st);
            if ((s = dsv4_keyset_index(ks, nc, ihd, err))) return s;
            dsv4_keyset_fill(ks, ihd, get_index_key, &st, pool);
            const di_index_score_args ia = {c->iq + r0 * IH * ihd, c->iw + r0 * IH, nc, IH, ihd, 1.0f, ks->keys,
                                            ks->idx, ks->ld, ks->n_idx, c->iscore, ld};
            be->ops->index_scores(be, &ia, pool);
            di_threadpool_run(pool, nc, index_pick_row, &st);
        }
    }
    const int64_t n_win = hp->window < (int64_t)max_pos + 1 ? hp->window : (int64_t)max_pos + 1;
    const dsv4_keyset_src src = {2 * n_slots, get_key};
    return dsv41_sparse_attend(c, &src, b, n_win + (ro->ratio ? hp->index_topk : 0), m->layers[il].sink,
                               ro->ratio ? m->inv_freq_compress : m->inv_freq_main, attn_list_row, &st, &st.r0, pool,
                               err);
}

/* ---- the compressor ----------------------------------------------------------- */

void dsv41_compress(di_dsv41_ctx *c, di_dsv41_kv *kv, int32_t il, const di_batch *b, di_threadpool *pool) {
    const di_dsv41_hparams *hp = &c->m->hp;
    const dsv41_layer *L = &c->m->layers[il];
    const di_dsv41_role *ro = &hp->role[il];
    const int64_t n = b->n_rows, D = hp->n_embd, hd = hp->head_dim;
    /* compressor projections: bf16 weights on the bf16 h, no fp8 cast */
    dsv41_linear(c, &L->c_wkv, c->h, D, c->ckv, hd, n, ro->ratio == 1, pool);
    if (ro->ratio == 2) dsv41_linear(c, &L->c_wgate, c->h, D, c->cg, hd, n, 0, pool);
    /* first every pending first-of-pair state, then close entries, so a
     * pair split across rows of this batch finds its first half */
    if (ro->ratio == 2)
        for (int64_t i = 0; i < n; i++) {
            if (b->pos[i] % 2) continue;
            float *st = (float *)rec(kv, il, dsv41_slot(b, b->seq[i], b->pos[i]), kv->lay[il].off_state);
            memcpy(st, c->ckv + i * hd, (size_t)hd * sizeof(float));
            memcpy(st + hd, c->cg + i * hd, (size_t)hd * sizeof(float));
        }
    float *tmp = c->attn_scratch; /* 2 hd + ihd floats; rows are done one by one here */
    for (int64_t i = 0; i < n && !c->cp; i++) {
        if ((b->pos[i] + 1) % ro->ratio) continue;
        dsv41_close_entry(c, kv, il, b, b->seq[i], b->pos[i], c->ckv + i * hd,
                          ro->ratio == 2 ? c->cg + i * hd : NULL, tmp);
    }
}

/* ---- the layer ------------------------------------------------------------------- */

/* The rows' projections of layer il: q (rotated), the window K=V record
 * (normalized, rotated, stored), and for index sources the indexer's
 * queries (rotated, FP4 round trip when faithful) and head weights. */
static void project_rows(di_dsv41_ctx *c, di_dsv41_kv *kv, int32_t il, const di_batch *b, di_threadpool *pool) {
    const di_dsv41_model *m = c->m;
    const di_dsv41_hparams *hp = &m->hp;
    const dsv41_layer *L = &m->layers[il];
    const int own_index = hp->role[il].ratio && hp->role[il].idx_src == il;
    const int64_t n = b->n_rows, D = hp->n_embd, hd = hp->head_dim, H = hp->n_heads;
    const int64_t IH = hp->index_heads, ihd = hp->index_dim, QL = hp->q_lora;
    const float *inv_freq = hp->role[il].ratio ? m->inv_freq_compress : m->inv_freq_main;
    const di_backend *be = m->be;

    /* q_a and the window kv from one cast of h (DeepInfer merges the two GEMMs) */
    memcpy(c->xq, c->h, (size_t)(n * D) * sizeof(float));
    dsv41_linear(c, &L->wq_a, c->xq, D, c->qr, QL, n, 1, pool);
    dsv41_linear(c, &L->wkv, c->xq, D, c->kvr, hd, n, 1, pool);
    dsv41_norm_rows(c, c->qr, L->q_norm, n, QL, pool);
    dsv41_linear(c, &L->wq_b, c->qr, QL, c->q, H * hd, n, 1, pool);
    if (own_index) {
        dsv41_linear(c, &L->i_wq_b, c->qr, QL, c->iq, IH * ihd, n, 1, pool);
        dsv41_linear(c, &L->i_wproj, c->h, D, c->iw, IH, n, 1, pool); /* bf16 GEMM on bf16 h */
    }
    /* q and kv came bf16 out of their linear / norm (faithful), so the
     * op's rounding before the rotation changes nothing */
    const int faithful = dsv41_faithful(c);
    be->ops->rope_rows(be, c->q, n, (int32_t)H, (int32_t)hd, hp->n_rot, inv_freq, b->pos, 1.0f, faithful, pool);
    dsv41_norm_rows(c, c->kvr, L->kv_norm, n, hd, pool);
    be->ops->rope_rows(be, c->kvr, n, 1, (int32_t)hd, hp->n_rot, inv_freq, b->pos, 1.0f, faithful, pool);
    for (int64_t i = 0; i < n; i++) put_win(kv, il, dsv41_slot(b, b->seq[i], b->pos[i]), c->kvr + i * hd, (int32_t)hd);
    if (own_index) {
        be->ops->rope_rows(be, c->iq, n, (int32_t)IH, (int32_t)ihd, hp->n_rot, m->inv_freq_compress, b->pos, 1.0f,
                           faithful, pool);
        if (faithful)
            for (int64_t i = 0; i < n; i++) dsv41_round_fp4_index(c->iq + i * IH * ihd, IH * ihd);
    }
}

/* Projections, the compressor (kv sources), CP's exchange, then each row
 * attends and the grouped output projection gives y. */
di_status dsv41_attention(di_dsv41_ctx *c, di_dsv41_kv *kv, int32_t il, const di_batch *b, di_threadpool *pool,
                          di_error *err) {
    const di_dsv41_role *ro = &c->m->hp.role[il];
    const int64_t n = b->n_rows;
    project_rows(c, kv, il, b, pool);
    if (ro->ratio && ro->kv_src == il && c->kv_done_layer != il) dsv41_compress(c, kv, il, b, pool);
    /* CP: the other ranks' rows of this step (their records, the entries
     * they close) before anyone attends */
    if (c->cp) {
        di_status s = dsv41_cp_layer(c, kv, il, b, c->attn_scratch, err);
        if (s) return s;
    }
    if (n == 0) return DI_OK;
    di_status s = attend_rows(c, kv, il, b, pool, err);
    if (s) return s;
    if (c->record_layer == il && ro->ratio && ro->idx_src == il) {
        memcpy(c->rec_topk, c->topk, (size_t)(n * c->m->hp.index_topk) * sizeof(int32_t));
        c->rec_valid = (int32_t)n;
    }
    dsv41_out_proj(c, &c->m->layers[il], n, pool);
    return DI_OK;
}

void dsv41_out_proj(di_dsv41_ctx *c, const dsv41_layer *L, int64_t n, di_threadpool *pool) {
    const di_dsv41_hparams *hp = &c->m->hp;
    const int64_t D = hp->n_embd, hd = hp->head_dim, H = hp->n_heads;
    /* grouped output projection: group g reads heads [g*H/G, (g+1)*H/G) */
    const int64_t G = hp->o_groups, gin = H * hd / G, olr = hp->o_lora;
    for (int64_t g = 0; g < G; g++) {
        const dsv4_linear wg = dsv4_linear_rows(&L->wo_a, g * olr, olr);
        dsv41_linear(c, &wg, c->att + g * gin, H * hd, c->oa + g * olr, G * olr, n, 0, pool);
    }
    if (dsv41_faithful(c)) /* use_fp8_einsum_output: wo_a's output is fp8 per 32 */
        c->m->be->ops->round_rows(c->m->be, DI_ROUND_FP8ACT, c->oa, n, G * olr, G * olr, pool);
    dsv41_linear(c, &L->wo_b, c->oa, G * olr, c->y, D, n, 1, pool);
}
