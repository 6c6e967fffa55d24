/* A deterministic stand-in for a model forward, for scheduler tests.
 *
 * Its "KV cache" stores, per (block, offset), the token and position a row
 * wrote there. The next token after a row is a hash of ALL the tokens of its
 * sequence read back through the batch's block table, so any block-table
 * corruption, stale or missing KV, wrong position or shared-block overwrite
 * changes the output (or is reported directly). fake_reference_next computes
 * the same function straight from a token list: the oracle for "the result
 * is what this request alone would produce".
 *
 * Header-only (static inline) because the build links one test_*.c per
 * executable. */
#ifndef DI_TESTS_FAKE_MODEL_H
#define DI_TESTS_FAKE_MODEL_H

#include "model/batch.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct fake_model {
    int32_t n_blocks, block_size, vocab;
    int32_t *kv_token;   /* (n_blocks, block_size) token written there, -1 never */
    int32_t *kv_pos;     /* (n_blocks, block_size) position written there, -1 never */
    int64_t *kv_stamp;   /* (n_blocks, block_size) forward call that last wrote */
    int32_t *slot_last;  /* (max slots) last position seen per slot in one batch */
    int32_t *tmp_tokens; /* (n_blocks * block_size) tokens read back for one row */
    int32_t max_slots;
    int64_t n_calls;
    int64_t n_rows;
} fake_model;

/* The model's function: next token after tokens[0..n). FNV-1a over the ids
 * and their positions, reduced to the vocabulary. */
static inline int32_t fake_reference_next(const int32_t *tokens, int32_t n, int32_t vocab) {
    uint64_t h = UINT64_C(0xcbf29ce484222325);
    for (int32_t i = 0; i < n; i++) {
        h ^= (uint64_t)(uint32_t)tokens[i] * UINT64_C(0x9e3779b97f4a7c15) + (uint64_t)i;
        h *= UINT64_C(0x100000001b3);
    }
    h ^= h >> 31;
    return (int32_t)(h % (uint64_t)vocab);
}

static inline bool fake_model_init(fake_model *m, int32_t n_blocks, int32_t block_size,
                                   int32_t max_slots, int32_t vocab) {
    size_t cells = (size_t)n_blocks * (size_t)block_size;
    m->n_blocks = n_blocks;
    m->block_size = block_size;
    m->vocab = vocab;
    m->max_slots = max_slots;
    m->n_calls = m->n_rows = 0;
    m->kv_token = malloc(cells * sizeof *m->kv_token);
    m->kv_pos = malloc(cells * sizeof *m->kv_pos);
    m->kv_stamp = calloc(cells, sizeof *m->kv_stamp);
    m->slot_last = malloc((size_t)max_slots * sizeof *m->slot_last);
    m->tmp_tokens = malloc(cells * sizeof *m->tmp_tokens);
    if (!m->kv_token || !m->kv_pos || !m->kv_stamp || !m->slot_last || !m->tmp_tokens) return false;
    for (size_t i = 0; i < cells; i++) m->kv_token[i] = m->kv_pos[i] = -1;
    return true;
}

static inline void fake_model_free(fake_model *m) {
    free(m->kv_token);
    free(m->kv_pos);
    free(m->kv_stamp);
    free(m->slot_last);
    free(m->tmp_tokens);
}

/* Physical cell of (slot, pos) through the batch's block table, or -1. */
static inline int64_t fake_cell(const fake_model *m, const di_batch *b, int32_t slot, int32_t pos) {
    int32_t bi = pos / b->block_size;
    if (bi >= b->n_blocks[slot] || !b->block_tables[slot]) return -1;
    int32_t blk = b->block_tables[slot][bi];
    if (blk < 0 || blk >= m->n_blocks) return -1;
    return (int64_t)blk * m->block_size + pos % b->block_size;
}

/* Runs one batch: validates its shape, writes every row's KV, then for each
 * row with want_logits reads its whole sequence back and writes the next
 * token to next_out[row]. Returns false with a reason in why on any
 * inconsistency a real model would silently turn into garbage. */
static inline bool fake_model_forward(fake_model *m, const di_batch *b, int32_t *next_out,
                                      char *why, size_t why_size) {
    m->n_calls++;
    if (b->n_rows < 0 || b->block_size != m->block_size || b->n_seq_slots > m->max_slots) {
        snprintf(why, why_size, "bad batch header");
        return false;
    }
    for (int32_t s = 0; s < b->n_seq_slots; s++) m->slot_last[s] = -1;
    /* Pass 1: every row writes its KV. */
    for (int32_t r = 0; r < b->n_rows; r++) {
        int32_t slot = b->seq[r], pos = b->pos[r];
        if (slot < 0 || slot >= b->n_seq_slots || pos < 0) {
            snprintf(why, why_size, "row %d: slot %d pos %d", (int)r, (int)slot, (int)pos);
            return false;
        }
        /* Rows of one sequence are consecutive positions, in order. */
        if (m->slot_last[slot] >= 0 && pos != m->slot_last[slot] + 1) {
            snprintf(why, why_size, "row %d: slot %d jumps from pos %d to %d", (int)r, (int)slot,
                     (int)m->slot_last[slot], (int)pos);
            return false;
        }
        m->slot_last[slot] = pos;
        int64_t c = fake_cell(m, b, slot, pos);
        if (c < 0) {
            snprintf(why, why_size, "row %d: slot %d pos %d has no block", (int)r, (int)slot, (int)pos);
            return false;
        }
        /* A block in two sequences' tables is a shared prefix block: it must
         * never be written. */
        int32_t blk = (int32_t)(c / m->block_size);
        for (int32_t s = 0; s < b->n_seq_slots; s++) {
            if (s == slot || !b->block_tables[s]) continue;
            for (int32_t i = 0; i < b->n_blocks[s]; i++)
                if (b->block_tables[s][i] == blk) {
                    snprintf(why, why_size, "row %d: slot %d writes block %d shared with slot %d",
                             (int)r, (int)slot, (int)blk, (int)s);
                    return false;
                }
        }
        if (m->kv_stamp[c] == m->n_calls) {
            snprintf(why, why_size, "row %d: cell of block %d written twice in one batch", (int)r,
                     (int)blk);
            return false;
        }
        m->kv_stamp[c] = m->n_calls;
        m->kv_token[c] = b->token[r];
        m->kv_pos[c] = pos;
    }
    /* Pass 2: rows that want logits read their sequence back. */
    for (int32_t r = 0; r < b->n_rows; r++) {
        if (!b->want_logits[r]) continue;
        int32_t slot = b->seq[r], pos = b->pos[r];
        for (int32_t p = 0; p <= pos; p++) {
            int64_t c = fake_cell(m, b, slot, p);
            if (c < 0 || m->kv_pos[c] != p) {
                snprintf(why, why_size, "row %d: slot %d reads pos %d, cell holds pos %d", (int)r,
                         (int)slot, (int)p, c < 0 ? -1 : (int)m->kv_pos[c]);
                return false;
            }
            m->tmp_tokens[p] = m->kv_token[c];
        }
        next_out[r] = fake_reference_next(m->tmp_tokens, pos + 1, m->vocab);
    }
    m->n_rows += b->n_rows;
    return true;
}

#endif
