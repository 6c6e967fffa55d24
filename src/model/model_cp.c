/* Context parallelism of one batch (model_cp.h). */
#include "model/model_cp.h"

#include "base/alloc.h"
#include "dist/cp.h"

#include <stdlib.h>
#include <string.h>

/* A fingerprint of the batch (rows, tokens, slots, positions), the same on
 * every rank when the ranks agree. */
static int64_t batch_hash(const di_batch *b) {
    uint64_t h = 1469598103934665603ull ^ (uint64_t)b->n_rows;
    for (int32_t i = 0; i < b->n_rows; i++) {
        uint64_t v = (uint64_t)(uint32_t)b->token[i] ^ (uint64_t)(uint32_t)b->seq[i] << 20 ^
                     (uint64_t)(uint32_t)b->pos[i] << 40 ^ (uint64_t)b->want_logits[i] << 63;
        h = (h ^ v) * 1099511628211ull;
    }
    return (int64_t)(h >> 1);
}

/* This rank's rows of b (indices into b, ascending): each sequence's rows
 * (in batch order, which is increasing position) zigzag-split over cp. */
static int32_t share_rows(const di_batch *b, int32_t cp, int32_t rank, int32_t *order, int32_t *lens,
                          int32_t *mirror, int32_t *rows) {
    /* order: b's rows grouped by sequence, sequences by first appearance */
    int32_t n_seqs = 0, k = 0;
    for (int32_t i = 0; i < b->n_rows; i++) {
        int seen = 0;
        for (int32_t j = 0; j < i && !seen; j++) seen = b->seq[j] == b->seq[i];
        if (seen) continue;
        lens[n_seqs] = 0;
        for (int32_t j = i; j < b->n_rows; j++)
            if (b->seq[j] == b->seq[i]) {
                order[k++] = j;
                lens[n_seqs]++;
            }
        n_seqs++;
    }
    int64_t per = di_cp_rows_per_rank(lens, n_seqs, cp);
    di_cp_zigzag(lens, n_seqs, cp, rank, mirror, NULL);
    int32_t n = 0;
    for (int64_t j = 0; j < per; j++)
        if (mirror[j] >= 0) rows[n++] = order[mirror[j]];
    /* ascending batch order keeps each sequence's positions increasing */
    for (int32_t a = 1; a < n; a++)
        for (int32_t c = a; c > 0 && rows[c - 1] > rows[c]; c--) {
            int32_t t = rows[c];
            rows[c] = rows[c - 1];
            rows[c - 1] = t;
        }
    return n;
}

di_status di_cp_agree(di_dist *d, const di_batch *b, di_error *err) {
    int64_t agree[2] = {batch_hash(b), -batch_hash(b)};
    di_status s = di_dist_allreduce_i64(d, agree, 2, DI_DIST_MAX, err);
    if (s) return s;
    if (agree[0] != -agree[1])
        return di_error_set(err, DI_ERR_INVALID_ARG,
                            "cp: the ranks hold different batches (sampling without a common --seed?)");
    return DI_OK;
}

di_status di_cp_forward(di_dist *d, int32_t n_vocab, const di_batch *b, float *logits_out, di_cp_share_fn fwd,
                        void *user, di_error *err) {
    di_status s = DI_OK;
    const int32_t n = b->n_rows, V = n_vocab;
    /* order, lens, rows: n each; mirror: at most n + 2 cp per sequence */
    int64_t cap_m = (int64_t)n + 2ll * d->size * (n > 0 ? n : 1);
    int32_t *buf = di_malloc_array((size_t)(3 * (int64_t)n + cap_m + 1), sizeof(int32_t));
    int32_t *tok = di_malloc_array((size_t)3 * (n > 0 ? n : 1), sizeof(int32_t));
    uint8_t *want = malloc((size_t)(n > 0 ? n : 1));
    if (!buf || !tok || !want) {
        free(buf);
        free(tok);
        free(want);
        return di_error_set(err, DI_ERR_NOMEM, "cp: out of memory for %d rows", (int)n);
    }
    int32_t *order = buf, *lens = buf + n, *rows = buf + 2 * n, *mirror = buf + 3 * n;
    int32_t m = share_rows(b, d->size, d->rank, order, lens, mirror, rows);
    int32_t *sq = tok + n, *pos = tok + 2 * n, n_want = 0;
    for (int32_t i = 0; i < m; i++) {
        tok[i] = b->token[rows[i]];
        sq[i] = b->seq[rows[i]];
        pos[i] = b->pos[rows[i]];
        want[i] = b->want_logits[rows[i]];
        n_want += want[i] != 0;
    }
    di_batch share = *b;
    share.n_rows = m;
    share.token = tok;
    share.seq = sq;
    share.pos = pos;
    share.want_logits = want;
    /* message: n_want row indices, then their logits */
    size_t msg_bytes = (size_t)n_want * (sizeof(int32_t) + (size_t)V * sizeof(float));
    uint8_t *msg = malloc(msg_bytes ? msg_bytes : 1);
    void *all = NULL;
    int64_t *got = di_malloc_array((size_t)d->size, sizeof *got);
    if (!msg || !got) {
        s = di_error_set(err, DI_ERR_NOMEM, "cp: out of memory for logits");
        goto done;
    }
    float *lg = (float *)(msg + (size_t)n_want * sizeof(int32_t));
    /* the share's logits straight after the indices (float-aligned: 4-byte ints) */
    if ((s = fwd(user, &share, lg, err))) goto done;
    for (int32_t i = 0, w = 0; i < m; i++)
        if (want[i]) {
            int32_t r = rows[i];
            memcpy(msg + (size_t)w++ * sizeof(int32_t), &r, sizeof r);
        }
    if ((s = di_dist_allgather_bytes(d, msg, (int64_t)msg_bytes, &all, got, err))) goto done;
    /* logits rows in b's order: the j-th wanting row of b */
    int32_t *slot = order; /* reuse: b row -> its logits row */
    for (int32_t i = 0, w = 0; i < n; i++) slot[i] = b->want_logits[i] ? w++ : -1;
    const uint8_t *p = all;
    const int64_t rec = (int64_t)(sizeof(int32_t) + (size_t)V * sizeof(float));
    for (int32_t q = 0; q < d->size; q++) {
        if (got[q] % rec) {
            s = di_error_set(err, DI_ERR_IO, "cp: rank %d sent %lld bytes of logits", (int)q, (long long)got[q]);
            goto done;
        }
        int64_t k = got[q] / rec;
        const float *ql = (const float *)(p + k * sizeof(int32_t));
        for (int64_t j = 0; j < k; j++) {
            int32_t r;
            memcpy(&r, p + j * sizeof(int32_t), sizeof r);
            if (r < 0 || r >= n || slot[r] < 0) {
                s = di_error_set(err, DI_ERR_IO, "cp: rank %d sent logits of row %d, not a wanting row", (int)q, (int)r);
                goto done;
            }
            memcpy(logits_out + (size_t)slot[r] * V, ql + j * V, (size_t)V * sizeof(float));
        }
        p += got[q];
    }
done:
    free(all);
    free(got);
    free(msg);
    free(buf);
    free(tok);
    free(want);
    return s;
}
