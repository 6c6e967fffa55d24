/* Buffers of the DeepSeek family's contexts and KV caches (V4 and V4.1):
 * a context lists its per-row scratch in one table (dsv4_buf) that grows
 * and frees it, and each KV layer's records are one zeroed allocation. */
#include "model/deepseek_v4_internal.h"

#include "base/alloc.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int dsv4_regrow(void *pp, int64_t n, size_t size) {
    void **p = pp;
    void *q = di_malloc_array((size_t)(n > 0 ? n : 1), size);
    if (!q) return 0;
    free(*p);
    *p = q;
    return 1;
}

int dsv4_grow(void *pp, int64_t *cap, int64_t n, size_t size) {
    if (n <= *cap) return 1;
    *cap = 0;
    if (!dsv4_regrow(pp, n, size)) return 0;
    *cap = n;
    return 1;
}

int dsv4_regrow_all(const dsv4_buf *b, size_t n_bufs) {
    for (size_t i = 0; i < n_bufs; i++)
        if (!dsv4_regrow(b[i].pp, b[i].n, b[i].size)) return 0;
    return 1;
}

void dsv4_free_all(const dsv4_buf *b, size_t n_bufs) {
    for (size_t i = 0; i < n_bufs; i++) {
        void **p = b[i].pp;
        free(*p);
        *p = NULL;
    }
}

di_status dsv4_rows_grow(void *ctx, dsv4_rows_fn table, int64_t n, int64_t *cap_rows, const char *arch,
                         di_error *err) {
    if (n <= *cap_rows) return DI_OK;
    *cap_rows = 0;
    dsv4_buf t[DSV4_ROW_BUFS_MAX];
    if (!dsv4_regrow_all(t, table(ctx, n, t)))
        return di_error_set(err, DI_ERR_NOMEM, "%s ctx: out of memory for %lld rows", arch, (long long)n);
    *cap_rows = n;
    return DI_OK;
}

size_t dsv4_rows_table(dsv4_rows *r, const di_dsv4_hparams *hp, int64_t n, const dsv4_buf *own, size_t n_own,
                       dsv4_buf *t) {
    const int64_t D = hp->n_embd, N = hp->hc_mult, M = (2 + N) * N, HD = (int64_t)hp->n_heads * hp->head_dim;
    const int64_t K = hp->n_experts_used, F = hp->moe_ff, IHD = (int64_t)hp->index_heads * hp->index_dim;
    const dsv4_buf b[] = {
        {&r->mix, n * M, 4}, {&r->post, n * N, 4}, {&r->comb, n * N * N, 4}, {&r->h, n * D, 4}, {&r->y, n * D, 4},
        {&r->qr, n * hp->q_lora, 4}, {&r->q, n * HD, 4}, {&r->kvr, n * hp->head_dim, 4}, {&r->iq, n * IHD, 4},
        {&r->iw, n * hp->index_heads, 4}, {&r->att, n * HD, 4}, {&r->oa, n * hp->o_groups * hp->o_lora, 4},
        {&r->logit, n * hp->n_experts, 4}, {&r->vsel, n * hp->n_experts, 4}, {&r->sel, n * K, 4},
        {&r->selw, n * K, 4}, {&r->ysel, n * K * D, 4}, {&r->grow, n * K, 4}, {&r->xg, n * K * D, 4},
        {&r->g1, n * K * F, 4}, {&r->g3, n * K * F, 4}, {&r->yg, n * K * D, 4},
    };
    _Static_assert(sizeof b / sizeof *b == sizeof(dsv4_rows) / sizeof(float *), "dsv4_rows_table: a field is missing");
    memcpy(t, b, sizeof b);
    memcpy(t + sizeof b / sizeof *b, own, n_own * sizeof *own);
    return sizeof b / sizeof *b + n_own;
}

void dsv4_rows_free(void *ctx, dsv4_rows_fn table) {
    dsv4_buf t[DSV4_ROW_BUFS_MAX];
    dsv4_free_all(t, table(ctx, 0, t));
}

int64_t dsv4_core_max_in(const di_dsv4_hparams *hp) {
    const int64_t D = hp->n_embd, N = hp->hc_mult, HD = (int64_t)hp->n_heads * hp->head_dim;
    int64_t m = dsv4_max64(dsv4_max64(N * D, HD),
                           dsv4_max64(dsv4_max64(hp->q_lora, hp->moe_ff), (int64_t)hp->o_groups * hp->o_lora));
    return dsv4_max64(m, D);
}

di_status dsv4_kv_alloc(void **out, uint64_t slots, uint64_t row_bytes, di_error *err) {
    *out = NULL;
    uint64_t bytes;
    if (di_mul_overflow_u64(slots, row_bytes, &bytes) || bytes > SIZE_MAX / 2)
        return di_error_set(err, DI_ERR_RANGE, "kv cache: size overflows");
    *out = di_calloc((size_t)bytes, 1);
    if (!*out) return di_error_set(err, DI_ERR_NOMEM, "kv cache: out of memory");
    return DI_OK;
}

di_status dsv4_kv_begin(int32_t n_blocks, int32_t block_size, int32_t n_layers, size_t lay_size, void **lay,
                        void *data, di_error *err) {
    *lay = NULL;
    *(void **)data = NULL;
    if (n_blocks < 1 || block_size < 1)
        return di_error_set(err, DI_ERR_INVALID_ARG, "kv cache: %d blocks of %d tokens", (int)n_blocks,
                            (int)block_size);
    *lay = di_calloc((size_t)n_layers, lay_size);
    *(void **)data = di_calloc((size_t)n_layers, sizeof(void *));
    if (!*lay || !*(void **)data) return di_error_set(err, DI_ERR_NOMEM, "kv cache: out of memory");
    return DI_OK;
}

di_status dsv4_kv_check_truncate(const char *arch, int32_t n_blocks, int32_t block_size, int32_t seq_slot,
                                 int32_t n_keep, di_error *err) {
    if (seq_slot < 0 || n_keep < 0)
        return di_error_set(err, DI_ERR_INVALID_ARG, "%s KV truncate: slot %d, keep %d", arch, (int)seq_slot,
                            (int)n_keep);
    if ((int64_t)n_keep > (int64_t)n_blocks * block_size)
        return di_error_set(err, DI_ERR_RANGE, "%s KV truncate: keep %d past the cache's %lld positions", arch,
                            (int)n_keep, (long long)n_blocks * block_size);
    return DI_OK;
}
