/* DeepSeek-V4.1 context parallelism (model_cp.c splits a step's rows over
 * the ranks of c->cp). Every record of a position is a function of that
 * position's own row, so per layer each rank all-gathers what its rows
 * produced that other ranks' rows read:
 *
 *   the window record of every row (each row attends to the window before it);
 *   kv sources: the compressor's latent (and ratio 2: gate) of every row,
 *   so every rank closes every compressed entry (and index key) the step's
 *   rows close, pairs split between ranks included, in the same arithmetic
 *   as one process;
 *
 * and, once per forward, the token ids (Engram's n-grams read earlier
 * positions). Every rank then holds the whole cache and attends for its own
 * rows: logits byte-equal to one process, decode can go on anywhere. */
#include "model/deepseek_v41_internal.h"

#include "base/alloc.h"
#include "dist/dist.h"

#include <stdlib.h>
#include <string.h>

void di_dsv41_ctx_set_cp(di_dsv41_ctx *c, di_dist *cp) { c->cp = cp; }

di_status dsv41_cp_tokens(di_dsv41_ctx *c, di_dsv41_kv *kv, const di_batch *b, di_error *err) {
    int32_t *msg = di_malloc_array((size_t)3 * (b->n_rows > 0 ? b->n_rows : 1), sizeof *msg);
    if (!msg) return di_error_set(err, DI_ERR_NOMEM, "cp: out of memory");
    for (int32_t i = 0; i < b->n_rows; i++) {
        msg[3 * i] = b->seq[i];
        msg[3 * i + 1] = b->pos[i];
        msg[3 * i + 2] = b->token[i];
    }
    dsv4_cp_rows g;
    di_status s = dsv4_cp_gather_rows(c->cp, b, msg, 12, &g, err);
    free(msg);
    const int32_t *p = g.all;
    for (int64_t j = 0; !s && j < g.total; j++, p += 3) {
        if (p[2] < 0 || p[2] >= c->m->hp.n_vocab) s = di_error_set(err, DI_ERR_IO, "cp: a rank sent token %d", (int)p[2]);
        else kv->tokens[dsv41_slot(b, p[0], p[1])] = p[2];
    }
    dsv4_cp_rows_free(&g);
    return s;
}

/* The (seq, pos) a gathered layer row starts with; then come its window
 * record (byte 8), the compressor latent (kv sources) and gate (ratio 2). */
static void read_row_head(const uint8_t *p, int32_t *seq, int32_t *pos) {
    memcpy(seq, p, 4);
    memcpy(pos, p + 4, 4);
}

di_status dsv41_cp_layer(di_dsv41_ctx *c, di_dsv41_kv *kv, int32_t il, const di_batch *b, float *tmp,
                         di_error *err) {
    const di_dsv41_hparams *hp = &c->m->hp;
    const di_dsv41_role *ro = &hp->role[il];
    const int32_t hd = hp->head_dim, n = b->n_rows;
    const int src = ro->ratio && ro->kv_src == il, two = src && ro->ratio == 2;
    const int64_t W = kv->num == DI_DSV41_NUMERICS_DEEPINFER ? dsv41_mxfp8_bytes(hd) : 4 * (int64_t)hd;
    const int64_t rowb = 8 + W + (src ? 4 * (int64_t)hd : 0) + (two ? 4 * (int64_t)hd : 0);
    uint8_t *msg = malloc((size_t)(n > 0 ? n : 1) * (size_t)rowb);
    float *lat = di_malloc_array((size_t)2 * hd, sizeof *lat);
    if (!msg || !lat) {
        free(msg);
        free(lat);
        return di_error_set(err, DI_ERR_NOMEM, "cp: out of memory");
    }
    for (int32_t i = 0; i < n; i++) {
        uint8_t *r = msg + (size_t)i * rowb;
        memcpy(r, &b->seq[i], 4);
        memcpy(r + 4, &b->pos[i], 4);
        memcpy(r + 8, kv->data[il] + dsv41_slot(b, b->seq[i], b->pos[i]) * kv->lay[il].row + kv->lay[il].off_win,
               (size_t)W);
        if (src) memcpy(r + 8 + W, c->ckv + (int64_t)i * hd, (size_t)hd * 4);
        if (two) memcpy(r + 8 + W + 4 * hd, c->cg + (int64_t)i * hd, (size_t)hd * 4);
    }
    dsv4_cp_rows g;
    di_status s = dsv4_cp_gather_rows(c->cp, b, msg, rowb, &g, err);
    free(msg);
    /* every row's window record and pending pair state into this cache */
    const uint8_t *p = g.all;
    for (int32_t q = 0; !s && q < c->cp->size; q++)
        for (int64_t j = 0; j < g.got[q]; j++, p += rowb) {
            if (q == c->cp->rank) continue; /* its own rows are written already */
            int32_t seq, pos;
            read_row_head(p, &seq, &pos);
            int64_t slot = dsv41_slot(b, seq, pos);
            memcpy(kv->data[il] + slot * kv->lay[il].row + kv->lay[il].off_win, p + 8, (size_t)W);
            if (two && pos % 2 == 0) {
                float *st = (float *)(kv->data[il] + slot * kv->lay[il].row + kv->lay[il].off_state);
                memcpy(st, p + 8 + W, (size_t)hd * 4);
                memcpy(st + hd, p + 8 + W + 4 * hd, (size_t)hd * 4);
            }
        }
    /* then every entry the step's rows close, on every rank */
    p = g.all;
    for (int64_t j = 0; !s && src && j < g.total; j++, p += rowb) {
        int32_t seq, pos;
        read_row_head(p, &seq, &pos);
        if ((pos + 1) % ro->ratio) continue;
        memcpy(lat, p + 8 + W, (size_t)hd * 4);
        if (two) memcpy(lat + hd, p + 8 + W + 4 * hd, (size_t)hd * 4);
        dsv41_close_entry(c, kv, il, b, seq, pos, lat, two ? lat + hd : NULL, tmp);
    }
    free(lat);
    dsv4_cp_rows_free(&g);
    return s;
}
