/* The key set of one attention stage, V4 and V4.1 alike (the operands of
 * be->ops->sparse_attention and index_scores, kernels/backend.h): the
 * batch's rows visit cache records by address; each distinct record is
 * decoded once into one table (rows of a sequence share their window and
 * compressed entries) and every row lists its table rows in the order it
 * visits them. Decoding is exact and the table rows are the same floats
 * the rows gathered one by one before, so the bits do not change. */
#include "model/deepseek_v4_internal.h"

#include <stdlib.h>
#include <string.h>

di_status dsv4_keyset_begin(dsv4_keyset *ks, int64_t n_rows, int64_t ld, int64_t n_addr, di_error *err) {
    ks->ld = ld > 0 ? ld : 1;
    ks->n_keys = 0;
    const int64_t had = ks->cap_map;
    if (!dsv4_grow(&ks->addr, &ks->cap_list, n_rows * ks->ld, sizeof(int64_t)) ||
        !dsv4_grow(&ks->idx, &ks->cap_idx, n_rows * ks->ld, sizeof(int32_t)) ||
        !dsv4_grow(&ks->n_idx, &ks->cap_rows, n_rows, sizeof(int32_t)) ||
        !dsv4_grow(&ks->map, &ks->cap_map, n_addr, sizeof(int32_t)))
        return di_error_set(err, DI_ERR_NOMEM, "attention: out of memory for the key lists of %lld rows",
                            (long long)n_rows);
    if (ks->cap_map != had) memset(ks->map, 0xff, (size_t)ks->cap_map * sizeof(int32_t)); /* all -1 */
    return DI_OK;
}

di_status dsv4_keyset_index(dsv4_keyset *ks, int64_t n_rows, int32_t dim, di_error *err) {
    int64_t total = 0;
    for (int64_t r = 0; r < n_rows; r++) total += ks->n_idx[r];
    if (!dsv4_grow(&ks->key_addr, &ks->cap_keys, total > 0 ? total : 1, sizeof(int64_t)))
        return di_error_set(err, DI_ERR_NOMEM, "attention: out of memory for %lld keys", (long long)total);
    for (int64_t r = 0; r < n_rows; r++) {
        const int64_t *a = ks->addr + r * ks->ld;
        int32_t *ix = ks->idx + r * ks->ld;
        for (int32_t t = 0; t < ks->n_idx[r]; t++) {
            int32_t *slot = &ks->map[a[t]];
            if (*slot < 0) {
                *slot = (int32_t)ks->n_keys;
                ks->key_addr[ks->n_keys++] = a[t];
            }
            ix[t] = *slot;
        }
    }
    for (int64_t i = 0; i < ks->n_keys; i++) ks->map[ks->key_addr[i]] = -1; /* ready for the next stage */
    if (!dsv4_grow(&ks->keys, &ks->cap_key_floats, (ks->n_keys > 0 ? ks->n_keys : 1) * dim, sizeof(float)))
        return di_error_set(err, DI_ERR_NOMEM, "attention: out of memory for %lld keys of %d", (long long)ks->n_keys,
                            (int)dim);
    return DI_OK;
}

typedef struct fill_job {
    dsv4_keyset *ks;
    int32_t dim;
    void (*fn)(void *user, int64_t addr, float *dst);
    void *user;
} fill_job;

static void fill_row(void *arg, int64_t i) {
    const fill_job *j = arg;
    j->fn(j->user, j->ks->key_addr[i], j->ks->keys + i * j->dim);
}

void dsv4_keyset_fill(dsv4_keyset *ks, int32_t dim, void (*fn)(void *user, int64_t addr, float *dst), void *user,
                      di_threadpool *pool) {
    fill_job j = {ks, dim, fn, user};
    if (ks->n_keys > 0) di_threadpool_rows(pool, ks->n_keys, fill_row, &j);
}

int64_t dsv4_keyset_chunk_rows(int64_t n_rows, int64_t ld, int64_t dim) {
    int64_t c = DSV4_KEYSET_BUDGET / ((ld > 0 ? ld : 1) * (dim > 0 ? dim : 1));
    if (c < 1) c = 1;
    return c < n_rows ? c : n_rows;
}

void dsv4_keyset_free(dsv4_keyset *ks) {
    free(ks->addr);
    free(ks->idx);
    free(ks->n_idx);
    free(ks->map);
    free(ks->key_addr);
    free(ks->keys);
    memset(ks, 0, sizeof *ks);
}
