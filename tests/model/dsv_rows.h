/* The batch driver the DeepSeek model tests share (V4 and V4.1 alike):
 * n_slots (<= DSV_ROWS_SLOTS) sequences in slots over one cache of n_blocks
 * blocks, slot s owning blocks [s*per, (s+1)*per) in reverse order so no sequence
 * is laid out contiguously; rows are appended one by one and handed to the
 * model's forward as a di_batch. The model-specific runner (model, KV,
 * context, forward call) wraps it. */
#ifndef DI_TESTS_MODEL_DSV_ROWS_H
#define DI_TESTS_MODEL_DSV_ROWS_H

#include "test_util.h"

#include "model/batch.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define DSV_ROWS_SLOTS 4

typedef struct dsv_rows {
    int32_t n_slots, block_size;
    int32_t *tables[DSV_ROWS_SLOTS];          /* (per) each, owned */
    const int32_t *table_ptrs[DSV_ROWS_SLOTS];
    int32_t n_blocks[DSV_ROWS_SLOTS];
    int32_t n, cap;                           /* rows so far, capacity */
    int32_t *tok, *seq, *pos;                 /* (cap) */
    uint8_t *want;                            /* (cap) */
} dsv_rows;

static inline void dsv_rows_init(dsv_rows *r, int32_t n_slots, int32_t n_blocks, int32_t block_size, int32_t cap) {
    memset(r, 0, sizeof *r);
    assert_true(n_slots >= 1 && n_slots <= DSV_ROWS_SLOTS);
    r->n_slots = n_slots;
    r->block_size = block_size;
    const int32_t per = n_blocks / n_slots;
    for (int s = 0; s < n_slots; s++) {
        r->tables[s] = malloc(sizeof(int32_t) * (size_t)per);
        assert_non_null(r->tables[s]);
        for (int j = 0; j < per; j++) r->tables[s][j] = s * per + (per - 1 - j);
        r->table_ptrs[s] = r->tables[s];
        r->n_blocks[s] = per;
    }
    r->cap = cap;
    r->tok = malloc(sizeof(int32_t) * (size_t)cap);
    r->seq = malloc(sizeof(int32_t) * (size_t)cap);
    r->pos = malloc(sizeof(int32_t) * (size_t)cap);
    r->want = malloc((size_t)cap);
    assert_true(r->tok && r->seq && r->pos && r->want);
}

static inline void dsv_rows_free(dsv_rows *r) {
    for (int s = 0; s < r->n_slots; s++) free(r->tables[s]);
    free(r->tok);
    free(r->seq);
    free(r->pos);
    free(r->want);
}

static inline void dsv_rows_add(dsv_rows *r, int32_t tok, int32_t seq, int32_t pos, int want) {
    assert_true(r->n < r->cap);
    r->tok[r->n] = tok;
    r->seq[r->n] = seq;
    r->pos[r->n] = pos;
    r->want[r->n] = (uint8_t)want;
    r->n++;
}

/* The rows so far as a batch; the caller runs it, then sets r->n = 0. */
static inline di_batch dsv_rows_batch(const dsv_rows *r) {
    di_batch b = {.n_rows = r->n, .token = r->tok, .seq = r->seq, .pos = r->pos, .want_logits = r->want,
                  .n_seq_slots = r->n_slots, .block_size = r->block_size, .block_tables = r->table_ptrs,
                  .n_blocks = r->n_blocks};
    return b;
}

#endif
