/* V4 attention of one layer over a batch (transformers' DeepseekV4Attention,
 * its HCA/CSA compressors and the lightning indexer).
 *
 *   qr  = q_norm(h Wq_a)                                  (n, q_lora)
 *   q   = rms(qr Wq_b) per head, rotary on its tail       (n, H, hd)
 *   kv  = kv_norm(h Wkv), rotary                          (n, hd)  K = V
 *   state of each row -> its position's slot of the paged cache:
 *     window kv; compressor raw kv and gate + ape[pos % r]; the indexer's
 *   rows that close a group (pos % r == r-1) pool it:
 *     entry[d] = sum_j softmax_j(gate[j][d]) kv[j][d] over the group's r
 *     slots (CSA: plus the previous group's first-half "Ca" series: 2r
 *     slots), then norm and rotary at position w*r -> that row's slot
 *   each row p attends over
 *     window   positions p-window+1 .. p
 *     HCA      every entry w < (p+1)/r
 *     CSA      the top index_topk entries w < (p+1)/r by the indexer score
 *              sum_h wts_h * relu(iq_h . ik_w) / sqrt(ihd)
 *   with a per-head sink logit in the softmax denominator; the output's
 *   rotary tail is rotated back by -p, then
 *   y = concat_g(att_g Wo_a_g) Wo_b.
 * Causality is by position alone (an entry is visible once its group has
 * closed), so a row's result depends only on its own sequence's cache. */
#include "model/deepseek_v4_internal.h"

#include "base/alloc.h"
#include "dist/dist.h"

#include "kernels/cpu/half.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- paged state access --------------------------------------------------- */

static int64_t slot_of(const di_batch *b, int32_t seq, int32_t pos) {
    return (int64_t)b->block_tables[seq][pos / b->block_size] * b->block_size + pos % b->block_size;
}

static void kv_put(di_dsv4_kv *kv, int32_t il, int64_t slot, int32_t off, const float *src, int32_t n) {
    int64_t at = slot * kv->lay[il].row + off;
    if (kv->dtype == DI_DTYPE_F16) {
        uint16_t *d = (uint16_t *)kv->data[il] + at;
        for (int32_t i = 0; i < n; i++) d[i] = di_float_to_half(src[i]);
    } else {
        memcpy((float *)kv->data[il] + at, src, (size_t)n * sizeof(float));
    }
}

static void kv_get(const di_dsv4_kv *kv, int32_t il, int64_t slot, int32_t off, float *dst, int32_t n) {
    int64_t at = slot * kv->lay[il].row + off;
    if (kv->dtype == DI_DTYPE_F16) {
        const uint16_t *s = (const uint16_t *)kv->data[il] + at;
        for (int32_t i = 0; i < n; i++) dst[i] = di_half_to_float(s[i]);
    } else {
        memcpy(dst, (const float *)kv->data[il] + at, (size_t)n * sizeof(float));
    }
}

/* ---- compressor group pooling --------------------------------------------- */

/* The groups one compressor closes in this step, pooled by the backend
 * (be->ops->compress_pool) in chunks: the raw rows of every group (CSA: the
 * previous group's first-half "Ca" series, then this group's "Cb"; HCA:
 * this group's) decoded into the tables, then the entries stored at off_out
 * of each group's last slot. */
typedef struct pool_stage {
    di_dsv4_ctx *c;
    const di_dsv4_kv *kv;
    int32_t il;
    const di_batch *b;
    const dsv4_compressor *cp;
    int32_t off_kv, off_gate;
    const int32_t *seq, *w; /* (chunk groups) */
    int64_t ld;             /* slots per group row of the tables */
    float *K, *G;           /* (chunk, ld, dim) */
    int32_t *ns;            /* (chunk) */
} pool_stage;

static void gather_group(void *user, int64_t g) {
    const pool_stage *st = user;
    const int32_t dim = st->cp->dim, coff = st->cp->coff, r = st->c->m->layers[st->il].ratio;
    const int32_t seq = st->seq[g], w = st->w[g];
    float *K = st->K + g * st->ld * dim, *G = st->G + g * st->ld * dim;
    int32_t ns = 0;
    if (coff == 2 && w > 0) /* previous group's "Ca" series: first half */
        for (int32_t j = 0; j < r; j++, ns++) {
            int64_t sl = slot_of(st->b, seq, (w - 1) * r + j);
            kv_get(st->kv, st->il, sl, st->off_kv, K + ns * dim, dim);
            kv_get(st->kv, st->il, sl, st->off_gate, G + ns * dim, dim);
        }
    for (int32_t j = 0; j < r; j++, ns++) { /* this group's "Cb" (or only) series */
        int64_t sl = slot_of(st->b, seq, w * r + j);
        kv_get(st->kv, st->il, sl, st->off_kv + (coff - 1) * dim, K + ns * dim, dim);
        kv_get(st->kv, st->il, sl, st->off_gate + (coff - 1) * dim, G + ns * dim, dim);
    }
    st->ns[g] = ns;
}

static di_status pool_groups(di_dsv4_ctx *c, di_dsv4_kv *kv, int32_t il, const di_batch *b, int64_t n_pool,
                             const dsv4_compressor *cp, int32_t off_kv, int32_t off_gate, int32_t off_out,
                             di_threadpool *pool, di_error *err) {
    const di_dsv4_model *m = c->m;
    const int32_t r = m->layers[il].ratio, dim = cp->dim;
    const int64_t ld = (int64_t)cp->coff * r;
    int64_t n_groups = 0;
    for (int64_t i = 0; i < n_pool; i++) {
        int32_t pos = c->cp ? c->cp_rows[2 * i + 1] : b->pos[i];
        n_groups += pos % r == r - 1;
    }
    if (n_groups == 0) return DI_OK;
    int64_t chunk = DSV4_KEYSET_BUDGET / (2 * ld * dim); /* the K and G tables */
    chunk = chunk < 1 ? 1 : chunk < n_groups ? chunk : n_groups;
    /* per group: its K and G tables, its entry, then (seq, w, slots, pos) */
    if (!dsv4_grow(&c->pool_buf, &c->cap_pool_buf, chunk * (2 * ld * dim + dim + 4), sizeof(float)))
        return di_error_set(err, DI_ERR_NOMEM, "deepseek_v4 compressor: out of memory for %lld groups",
                            (long long)chunk);
    float *K = c->pool_buf, *G = K + chunk * ld * dim, *out = G + chunk * ld * dim;
    int32_t *seqs = (int32_t *)(out + chunk * dim), *ws = seqs + chunk, *ns = ws + chunk, *pos = ns + chunk;
    pool_stage st = {c, kv, il, b, cp, off_kv, off_gate, seqs, ws, ld, K, G, ns};
    int64_t i = 0;
    while (i < n_pool) {
        int64_t ng = 0;
        for (; i < n_pool && ng < chunk; i++) {
            int32_t seq = c->cp ? c->cp_rows[2 * i] : b->seq[i], p = c->cp ? c->cp_rows[2 * i + 1] : b->pos[i];
            if (p % r != r - 1) continue;
            seqs[ng] = seq;
            ws[ng] = p / r;
            pos[ng++] = (p / r) * r; /* the entry's rotary position: its group's first */
        }
        if (ng == 0) break;
        di_threadpool_rows(pool, ng, gather_group, &st);
        const di_compress_pool_args a = {K, G, ng, ld, ns, dim, cp->norm, m->hp.rms_eps, m->hp.n_rot,
                                         m->inv_freq_compress, pos, out};
        m->be.ops->compress_pool(&m->be, &a, pool);
        for (int64_t g = 0; g < ng; g++)
            kv_put(kv, il, slot_of(b, seqs[g], ws[g] * r + r - 1), off_out, out + g * dim, dim);
    }
    return DI_OK;
}

/* ---- per-row attention ----------------------------------------------------- */

int64_t dsv4_attention_scratch_floats(const di_dsv4_model *m, int32_t max_pos) {
    const di_dsv4_hparams *hp = &m->hp;
    int32_t min_ratio = 0;
    for (int32_t il = 0; il < hp->n_layers; il++) {
        int32_t r = m->layers[il].ratio;
        if (r && (!min_ratio || r < min_ratio)) min_ratio = r;
    }
    int64_t n_comp = min_ratio ? ((int64_t)max_pos + 1) / min_ratio : 0;
    int64_t n_win = hp->window < (int64_t)max_pos + 1 ? hp->window : (int64_t)max_pos + 1;
    return m->be.ops->sparse_attention_scratch_floats(&m->be, n_win + n_comp);
}

/* One stage of the rows' attention over a chunk of rows [r0, r0 + n). Key
 * addresses: slot * 2 + 0 the window record, slot * 2 + 1 the compressed
 * entry closed at slot; index keys: the slot. */
typedef struct rows_stage {
    di_dsv4_ctx *c;
    const di_dsv4_kv *kv;
    int32_t il;
    const di_batch *b;
    int64_t r0;
    int64_t ld_score;   /* floats per row of c->iscore */
    const float *inv_freq;
} rows_stage;

static void get_key(void *user, int64_t addr, float *dst) {
    const rows_stage *st = user;
    kv_get(st->kv, st->il, addr >> 1, (addr & 1) ? st->kv->lay[st->il].off_comp : 0, dst, st->c->m->hp.head_dim);
}

static void get_ikey(void *user, int64_t addr, float *dst) {
    const rows_stage *st = user;
    kv_get(st->kv, st->il, addr, st->kv->lay[st->il].off_icomp, dst, st->c->m->hp.index_dim);
}

/* Entries a CSA row sees, and how many it keeps. */
static int32_t n_valid_of(const rows_stage *st, int64_t row) {
    return (st->b->pos[row] + 1) / st->c->m->layers[st->il].ratio;
}
static int32_t n_pick_of(const rows_stage *st, int32_t n_valid) {
    int32_t k = st->c->m->hp.index_topk;
    return k < n_valid ? k : n_valid;
}

/* The entries a CSA row scores: all it sees, or none when it keeps them all. */
static void index_list_row(void *user, int64_t i) {
    const rows_stage *st = user;
    dsv4_keyset *ks = &st->c->ks;
    const int64_t row = st->r0 + i;
    const int32_t n_valid = n_valid_of(st, row), r = st->c->m->layers[st->il].ratio, seq = st->b->seq[row];
    int64_t *a = ks->addr + i * ks->ld;
    ks->n_idx[i] = n_pick_of(st, n_valid) == n_valid ? 0 : n_valid;
    for (int32_t w = 0; w < ks->n_idx[i]; w++) a[w] = slot_of(st->b, seq, w * r + r - 1);
}

/* Indexer picks for a CSA row: the top min(topk, n_valid) entries by score
 * (ties to the lower index, which a near-tie-free golden never tests), in
 * ascending order, into c->ipick. */
static void index_pick_row(void *user, int64_t i) {
    const rows_stage *st = user;
    di_dsv4_ctx *c = st->c;
    const int64_t row = st->r0 + i;
    const int32_t n_valid = n_valid_of(st, row), k = n_pick_of(st, n_valid);
    int32_t *pick = c->ipick + row * c->m->hp.index_topk;
    float *score = c->iscore + i * st->ld_score;
    if (k == n_valid) {
        for (int32_t w = 0; w < n_valid; w++) pick[w] = w;
        return;
    }
    for (int32_t j = 0; j < k; j++) { /* selection: k is small next to n_valid */
        int32_t best = -1;
        for (int32_t w = 0; w < n_valid; w++)
            if (score[w] != -INFINITY && (best < 0 || score[w] > score[best])) best = w;
        pick[j] = best;
        score[best] = -INFINITY;
    }
    for (int32_t j = 1; j < k; j++) /* ascending: the order keys are visited */
        for (int32_t a = j; a > 0 && pick[a - 1] > pick[a]; a--) {
            int32_t t = pick[a];
            pick[a] = pick[a - 1];
            pick[a - 1] = t;
        }
}

/* The keys a row attends to, in order: its window, then every visible HCA
 * entry or its CSA picks. */
static void attn_list_row(void *user, int64_t i) {
    const rows_stage *st = user;
    const di_dsv4_ctx *c = st->c;
    const dsv4_layer *L = &c->m->layers[st->il];
    dsv4_keyset *ks = &st->c->ks;
    const int64_t row = st->r0 + i;
    const int32_t p = st->b->pos[row], seq = st->b->seq[row], r = L->ratio;
    const int32_t n_win = c->m->hp.window < p + 1 ? c->m->hp.window : p + 1, n_valid = r ? (p + 1) / r : 0;
    int64_t *a = ks->addr + i * ks->ld;
    int32_t t = 0;
    for (int32_t q = p - n_win + 1; q <= p; q++) a[t++] = slot_of(st->b, seq, q) * 2;
    if (L->kind == DI_DSV4_ATTN_HCA) {
        for (int32_t w = 0; w < n_valid; w++) a[t++] = slot_of(st->b, seq, w * r + r - 1) * 2 + 1;
    } else if (L->kind == DI_DSV4_ATTN_CSA && n_valid > 0) {
        const int32_t k = n_pick_of(st, n_valid), *pick = c->ipick + row * c->m->hp.index_topk;
        for (int32_t j = 0; j < k; j++) a[t++] = slot_of(st->b, seq, (k == n_valid ? j : pick[j]) * r + r - 1) * 2 + 1;
    }
    ks->n_idx[i] = t;
}

/* Every row of b attends (the indexer first on CSA layers): the key lists
 * and tables per chunk of rows, then the backend's stages. */
static di_status attend_rows(di_dsv4_ctx *c, const di_dsv4_kv *kv, int32_t il, const di_batch *b,
                             di_threadpool *pool, di_error *err) {
    const di_dsv4_model *m = c->m;
    const di_dsv4_hparams *hp = &m->hp;
    const dsv4_layer *L = &m->layers[il];
    const di_backend *be = &m->be;
    const int64_t n = b->n_rows, n_slots = (int64_t)kv->n_blocks * kv->block_size;
    const int32_t hd = hp->head_dim, H = hp->n_heads, IH = hp->index_heads, ihd = hp->index_dim, K = hp->index_topk;
    int32_t max_pos = 0;
    for (int64_t i = 0; i < n; i++) max_pos = b->pos[i] > max_pos ? b->pos[i] : max_pos;
    const int64_t n_valid_max = L->ratio ? ((int64_t)max_pos + 1) / L->ratio : 0;
    const int64_t n_win_max = hp->window < (int64_t)max_pos + 1 ? hp->window : (int64_t)max_pos + 1;
    dsv4_keyset *ks = &c->ks;
    rows_stage st = {c, kv, il, b, 0, n_valid_max,
                     L->kind == DI_DSV4_ATTN_WINDOW ? m->inv_freq_main : m->inv_freq_compress};
    di_status s;
    double t0 = dsv4_prof_now(c);
    if (L->kind == DI_DSV4_ATTN_CSA && n_valid_max > 0) {
        const int64_t chunk = dsv4_keyset_chunk_rows(n, n_valid_max, ihd);
        if (!dsv4_grow(&c->ipick, &c->cap_ipick, n * K, sizeof(int32_t)) ||
            !dsv4_grow(&c->iscore, &c->cap_iscore, chunk * n_valid_max, sizeof(float)))
            return di_error_set(err, DI_ERR_NOMEM, "deepseek_v4 indexer: out of memory for %lld rows", (long long)n);
        for (int64_t r0 = 0; r0 < n; r0 += chunk) {
            const int64_t nc = n - r0 < chunk ? n - r0 : chunk;
            st.r0 = r0;
            if ((s = dsv4_keyset_begin(ks, nc, n_valid_max, n_slots, err))) return s;
            di_threadpool_rows(pool, nc, index_list_row, &st);
            if ((s = dsv4_keyset_index(ks, nc, ihd, err))) return s;
            dsv4_keyset_fill(ks, ihd, get_ikey, &st, pool);
            const di_index_score_args ia = {c->iq + r0 * IH * ihd, c->iw + r0 * IH, nc, IH, ihd,
                                            1.0f / sqrtf((float)ihd), ks->keys, ks->idx, ks->ld, ks->n_idx,
                                            c->iscore, n_valid_max};
            be->ops->index_scores(be, &ia, pool);
            di_threadpool_rows(pool, nc, index_pick_row, &st);
        }
    }
    dsv4_prof_add(c, DI_DSV4_BLK_INDEXER, t0);
    t0 = dsv4_prof_now(c);
    const int64_t n_comp = L->kind == DI_DSV4_ATTN_HCA ? n_valid_max
                           : L->kind == DI_DSV4_ATTN_CSA ? (K < n_valid_max ? K : n_valid_max) : 0;
    const int64_t ld = n_win_max + n_comp, chunk = dsv4_keyset_chunk_rows(n, ld, hd);
    for (int64_t r0 = 0; r0 < n; r0 += chunk) {
        const int64_t nc = n - r0 < chunk ? n - r0 : chunk;
        st.r0 = r0;
        if ((s = dsv4_keyset_begin(ks, nc, ld, 2 * n_slots, err))) return s;
        di_threadpool_rows(pool, nc, attn_list_row, &st);
        if ((s = dsv4_keyset_index(ks, nc, hd, err))) return s;
        dsv4_keyset_fill(ks, hd, get_key, &st, pool);
        const di_sparse_attn_args aa = {c->q + r0 * H * hd, nc, H, hd, L->sink, ks->keys, ks->idx, ks->ld, ks->n_idx,
                                        c->att + r0 * H * hd};
        be->ops->sparse_attention(be, &aa, c->attn_scratch, pool);
        /* K = V carried the key's rotation: undo it at the query position */
        be->ops->rope_rows(be, c->att + r0 * H * hd, nc, H, hd, hp->n_rot, st.inv_freq, b->pos + r0, -1.0f, 0, pool);
        for (int64_t i = 0; c->prof_on && i < nc; i++) {
            c->prof.flops[DI_DSV4_BLK_ATTN_CORE] += 4.0 * (double)ks->n_idx[i] * (double)H * (double)hd; /* q.k, p*v */
            c->prof.bytes[DI_DSV4_BLK_ATTN_CORE] +=
                (double)ks->n_idx[i] * (double)hd * (kv->dtype == DI_DTYPE_F16 ? 2.0 : 4.0);
        }
    }
    dsv4_prof_add(c, DI_DSV4_BLK_ATTN_CORE, t0);
    return DI_OK;
}

/* ---- the layer ------------------------------------------------------------- */

/* Raw compressor projections of every row into its slot (gate + ape). */
static void store_raw(di_dsv4_kv *kv, int32_t il, const di_batch *b,
                      const dsv4_compressor *cp, int32_t ratio, const float *rkv, float *rg, int32_t off_kv,
                      int32_t off_gate) {
    const int32_t w = cp->coff * cp->dim;
    for (int32_t i = 0; i < b->n_rows; i++) {
        float *g = rg + (int64_t)i * w;
        const float *ape = cp->ape + (int64_t)(b->pos[i] % ratio) * w;
        for (int32_t d = 0; d < w; d++) g[d] += ape[d];
        int64_t sl = slot_of(b, b->seq[i], b->pos[i]);
        kv_put(kv, il, sl, off_kv, rkv + (int64_t)i * w, w);
        kv_put(kv, il, sl, off_gate, g, w);
    }
}

di_status dsv4_cp_gather_rows(di_dist *cp, const di_batch *b, const void *mine, int64_t row_bytes, dsv4_cp_rows *out,
                              di_error *err) {
    *out = (dsv4_cp_rows){NULL, NULL, 0};
    if (!(out->got = di_malloc_array((size_t)cp->size, sizeof *out->got)))
        return di_error_set(err, DI_ERR_NOMEM, "cp: out of memory");
    di_status s = di_dist_allgather_bytes(cp, mine, (int64_t)b->n_rows * row_bytes, &out->all, out->got, err);
    if (s) return s;
    const uint8_t *p = out->all;
    for (int32_t q = 0; q < cp->size; q++) {
        if (out->got[q] % row_bytes)
            return di_error_set(err, DI_ERR_IO, "cp: rank %d sent %lld bytes, not rows of %lld", (int)q,
                                (long long)out->got[q], (long long)row_bytes);
        out->got[q] /= row_bytes;
        for (int64_t j = 0; j < out->got[q]; j++, p += row_bytes) {
            int32_t sp[2];
            memcpy(sp, p, sizeof sp);
            if (sp[0] < 0 || sp[0] >= b->n_seq_slots || sp[1] < 0 || !b->block_tables[sp[0]] ||
                sp[1] / b->block_size >= b->n_blocks[sp[0]])
                return di_error_set(err, DI_ERR_IO, "cp: rank %d sent row (seq %d, pos %d) outside the step's tables",
                                    (int)q, (int)sp[0], (int)sp[1]);
        }
        out->total += out->got[q];
    }
    return DI_OK;
}

void dsv4_cp_rows_free(dsv4_cp_rows *g) {
    free(g->all);
    free(g->got);
    *g = (dsv4_cp_rows){NULL, NULL, 0};
}

/* Context parallelism: every rank of the group has stored its own rows'
 * state of layer il (window row, raw compressor and indexer projections);
 * the rows of all ranks, with their (seq, pos), are gathered and written
 * into this rank's cache, so the pooling and the attention below see the
 * whole sequence. The union's (seq, pos) go to c->cp_rows; *n_union rows. */
static di_status cp_share_state(di_dsv4_ctx *c, di_dsv4_kv *kv, int32_t il, const di_batch *b, int64_t *n_union,
                                di_error *err) {
    const int32_t row = kv->lay[il].row, stride = 2 + row; /* (seq, pos) as int32 bits, then the row */
    float *mine = di_malloc_array((size_t)(b->n_rows > 0 ? b->n_rows : 1) * (size_t)stride, sizeof(float));
    if (!mine) return di_error_set(err, DI_ERR_NOMEM, "cp: out of memory");
    for (int32_t i = 0; i < b->n_rows; i++) {
        float *o = mine + (int64_t)i * stride;
        int32_t sp[2] = {b->seq[i], b->pos[i]};
        memcpy(o, sp, sizeof sp);
        kv_get(kv, il, slot_of(b, b->seq[i], b->pos[i]), 0, o + 2, row);
    }
    dsv4_cp_rows g;
    di_status s = dsv4_cp_gather_rows(c->cp, b, mine, (int64_t)stride * 4, &g, err);
    free(mine);
    if (!s && g.total > c->cap_cp_rows) {
        int32_t *r = realloc(c->cp_rows, (size_t)g.total * 2 * sizeof *r);
        if (!r) s = di_error_set(err, DI_ERR_NOMEM, "cp: out of memory for %lld rows", (long long)g.total);
        else {
            c->cp_rows = r;
            c->cap_cp_rows = g.total;
        }
    }
    const float *in = g.all;
    for (int64_t j = 0; !s && j < g.total; j++) {
        const float *o = in + j * stride;
        int32_t sp[2];
        memcpy(sp, o, sizeof sp);
        c->cp_rows[2 * j] = sp[0];
        c->cp_rows[2 * j + 1] = sp[1];
        kv_put(kv, il, slot_of(b, sp[0], sp[1]), 0, o + 2, row);
    }
    if (!s) *n_union = g.total;
    dsv4_cp_rows_free(&g);
    return s;
}

di_status dsv4_attention(di_dsv4_ctx *c, di_dsv4_kv *kv, int32_t il, const di_batch *b, di_threadpool *pool,
                         di_error *err) {
    const di_dsv4_model *m = c->m;
    const di_dsv4_hparams *hp = &m->hp;
    const dsv4_layer *L = &m->layers[il];
    const dsv4_kv_layout *lay = &kv->lay[il];
    const int64_t n = b->n_rows, D = hp->n_embd, hd = hp->head_dim, H = hp->n_heads;
    const float *inv_freq = L->kind == DI_DSV4_ATTN_WINDOW ? m->inv_freq_main : m->inv_freq_compress;
    const di_backend *be = &m->be;
    float *mm = c->mm_scratch;

    double t0 = dsv4_prof_now(c);
    if (n == 0) goto share; /* CP placeholder: only the exchange and the pooling */
    dsv4_lin(be, &L->wq_a, c->h, D, c->qr, hp->q_lora, n, mm, pool);
    be->ops->rms_norm(be, c->qr, L->q_norm, c->qr, n, hp->q_lora, hp->rms_eps, 0, pool);
    dsv4_lin(be, &L->wq_b, c->qr, hp->q_lora, c->q, H * hd, n, mm, pool);
    dsv4_lin(be, &L->wkv, c->h, D, c->kvr, hd, n, mm, pool);
    be->ops->rms_norm(be, c->q, NULL, c->q, n * H, hd, hp->rms_eps, 0, pool);    /* per head */
    be->ops->rms_norm(be, c->kvr, L->kv_norm, c->kvr, n, hd, hp->rms_eps, 0, pool);
    be->ops->rope_rows(be, c->q, n, (int32_t)H, (int32_t)hd, hp->n_rot, inv_freq, b->pos, 1.0f, 0, pool);
    be->ops->rope_rows(be, c->kvr, n, 1, (int32_t)hd, hp->n_rot, inv_freq, b->pos, 1.0f, 0, pool);
    for (int64_t i = 0; i < n; i++) kv_put(kv, il, slot_of(b, b->seq[i], b->pos[i]), 0, c->kvr + i * hd, (int32_t)hd);
    dsv4_prof_add(c, DI_DSV4_BLK_ATTN_PROJ, t0);
    t0 = dsv4_prof_now(c);
    if (L->kind != DI_DSV4_ATTN_WINDOW) {
        const dsv4_compressor *cp = &L->comp;
        int64_t w = (int64_t)cp->coff * cp->dim;
        dsv4_lin(be, &cp->wkv, c->h, D, c->ckv, w, n, mm, pool);
        dsv4_lin(be, &cp->wgate, c->h, D, c->cg, w, n, mm, pool);
        store_raw(kv, il, b, cp, L->ratio, c->ckv, c->cg, lay->off_raw_kv, lay->off_raw_gate);
    }
    dsv4_prof_add(c, DI_DSV4_BLK_COMPRESS, t0);
    t0 = dsv4_prof_now(c);
    if (L->kind == DI_DSV4_ATTN_CSA) {
        const dsv4_compressor *cp = &L->icomp;
        int64_t w = 2 * (int64_t)cp->dim, IH = hp->index_heads, ihd = hp->index_dim;
        dsv4_lin(be, &cp->wkv, c->h, D, c->ikv, w, n, mm, pool);
        dsv4_lin(be, &cp->wgate, c->h, D, c->ig, w, n, mm, pool);
        store_raw(kv, il, b, cp, L->ratio, c->ikv, c->ig, lay->off_iraw_kv, lay->off_iraw_gate);
        dsv4_lin(be, &L->idx_wq_b, c->qr, hp->q_lora, c->iq, IH * ihd, n, mm, pool);
        dsv4_lin(be, &L->idx_wproj, c->h, D, c->iw, IH, n, mm, pool);
        const float wscale = 1.0f / sqrtf((float)IH);
        be->ops->rope_rows(be, c->iq, n, (int32_t)IH, (int32_t)ihd, hp->n_rot, m->inv_freq_compress, b->pos, 1.0f, 0,
                           pool);
        for (int64_t i = 0; i < n * IH; i++) c->iw[i] *= wscale;
    }
    dsv4_prof_add(c, DI_DSV4_BLK_INDEXER, t0);
share:;
    /* context parallel: the other ranks' rows of the same sequences too */
    int64_t n_pool = n;
    if (c->cp) {
        di_status s = cp_share_state(c, kv, il, b, &n_pool, err);
        if (s) return s;
    }
    /* every row's raw state is stored: pool the groups this batch closes
     * (with CP every rank pools every group the group's rows close) */
    if (L->ratio) {
        t0 = dsv4_prof_now(c);
        di_status s = pool_groups(c, kv, il, b, n_pool, &L->comp, lay->off_raw_kv, lay->off_raw_gate, lay->off_comp,
                                  pool, err);
        dsv4_prof_add(c, DI_DSV4_BLK_COMPRESS, t0);
        t0 = dsv4_prof_now(c);
        if (!s && L->kind == DI_DSV4_ATTN_CSA)
            s = pool_groups(c, kv, il, b, n_pool, &L->icomp, lay->off_iraw_kv, lay->off_iraw_gate, lay->off_icomp,
                            pool, err);
        dsv4_prof_add(c, DI_DSV4_BLK_INDEXER, t0);
        if (s) return s;
    }
    if (n == 0) return DI_OK;
    di_status s = attend_rows(c, kv, il, b, pool, err);
    if (s) return s;
    t0 = dsv4_prof_now(c);
    /* grouped output projection: group g reads heads [g*H/G, (g+1)*H/G) */
    const int64_t G = hp->o_groups, gin = H * hd / G, olr = hp->o_lora;
    for (int64_t g = 0; g < G; g++) {
        const dsv4_linear wg = dsv4_linear_rows(&L->wo_a, g * olr, olr);
        dsv4_lin(be, &wg, c->att + g * gin, H * hd, c->oa + g * olr, G * olr, n, mm, pool);
    }
    dsv4_lin(be, &L->wo_b, c->oa, G * olr, c->y, D, n, mm, pool);
    dsv4_prof_add(c, DI_DSV4_BLK_ATTN_PROJ, t0);
    return DI_OK;
}
