/* Unigram (SentencePiece's unigram model as HF tokenizers runs it): the
 * segmentation of a pre-token whose pieces' scores sum highest (Viterbi
 * over every vocab entry that matches at every character position).
 *
 * Kept identical to HF's lattice, ties included: a position with no
 * single-character entry gets an unk node of one character scored
 * min_score - 10; among equal sums the path whose last piece begins
 * earliest wins (HF visits the nodes ending at a position in the order of
 * their beginnings and keeps the first best); sums are in double, as HF's
 * f64 scores; consecutive unks are fused into one (fuse_unk). */
#include "text/tok_internal.h"

#include "base/alloc.h"

#include <float.h>
#include <stdlib.h>
#include <string.h>

di_status tok_unigram_word(const di_tokenizer *t, const char *w, size_t n, tok_scratch *s,
                           di_tok_ids *out, di_error *err) {
    (void)s;
    if (n == 0) return DI_OK;
    /* best[p]: highest sum of a segmentation of w[0..p); from[p]: where its
     * last piece begins; via[p]: that piece's id (-1 = unk). Only character
     * boundaries are reached. */
    double *best = di_malloc_array(n + 1, sizeof *best);
    size_t *from = di_malloc_array(n + 1, sizeof *from);
    int32_t *via = di_malloc_array(n + 1, sizeof *via);
    bool *reached = calloc(n + 1, sizeof *reached);
    di_status rc = DI_OK;
    if (!best || !from || !via || !reached) {
        rc = di_error_set(err, DI_ERR_NOMEM, "tokenizer: out of memory");
        goto done;
    }
    reached[0] = true;
    best[0] = 0.0;
    /* Forward over beginnings in ascending order: relaxing with "strictly
     * greater" keeps the earliest beginning among equal sums. */
    for (size_t b = 0; b < n; b += tok_utf8_len((uint8_t)w[b])) {
        if (!reached[b]) continue;
        size_t c1 = tok_utf8_len((uint8_t)w[b]);
        bool single = false;
        size_t max = n - b < t->uni_max_bytes ? n - b : t->uni_max_bytes;
        for (size_t l = c1; l <= max; l += l < n - b ? tok_utf8_len((uint8_t)w[b + l]) : 1) {
            int32_t id = tok_find_key(t, w + b, l);
            if (id < 0) continue;
            if (l == c1) single = true;
            double sc = best[b] + t->uni_score[id];
            if (!reached[b + l] || sc > best[b + l]) {
                reached[b + l] = true;
                best[b + l] = sc;
                from[b + l] = b;
                via[b + l] = id;
            }
        }
        if (!single) {
            double sc = best[b] + t->uni_unk_score;
            if (!reached[b + c1] || sc > best[b + c1]) {
                reached[b + c1] = true;
                best[b + c1] = sc;
                from[b + c1] = b;
                via[b + c1] = -1;
            }
        }
    }
    /* Every position is reachable (unk nodes), so walk back from n. */
    size_t k = 0;
    for (size_t p = n; p > 0; p = from[p]) k++;
    size_t n0 = out->n;
    for (size_t i = 0; i < k; i++)
        if (!tok_ids_push(out, 0)) {
            out->n = n0;
            rc = di_error_set(err, DI_ERR_NOMEM, "tokenizer: out of memory");
            goto done;
        }
    size_t i = k;
    for (size_t p = n; p > 0; p = from[p]) out->data[n0 + --i] = via[p];
    /* unks: fuse runs, then map to the unk id */
    size_t m = n0;
    for (size_t j = n0; j < n0 + k; j++) {
        if (out->data[j] < 0 && m > n0 && out->data[m - 1] < 0) continue;
        out->data[m++] = out->data[j];
    }
    out->n = m;
    for (size_t j = n0; j < m; j++) {
        if (out->data[j] >= 0) continue;
        if (t->unk < 0) {
            out->n = n0;
            rc = di_error_set(err, DI_ERR_FORMAT, "tokenizer: Unigram piece not in the vocabulary and no unk_id");
            goto done;
        }
        out->data[j] = t->unk;
    }
done:
    free(best);
    free(from);
    free(via);
    free(reached);
    return rc;
}
