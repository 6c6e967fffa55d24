/* The flat ragged batch that every model forward takes (DESIGN.md section 3).
 * Rows from different sequences, prefill chunks and decode tokens mix freely.
 * Row i is token[i] of sequence slot seq[i] at position pos[i]; the model
 * writes that row's K/V into the paged cache at
 *   physical block = block_tables[seq[i]][pos[i] / block_size],
 *   offset         = pos[i] % block_size,
 * and attends over positions 0..pos[i] of the same sequence (rows of one
 * sequence appear in increasing position order within a batch). */
#ifndef DI_MODEL_BATCH_H
#define DI_MODEL_BATCH_H

#include <stdint.h>

typedef struct di_batch {
    int32_t n_rows;
    const int32_t *token;        /* (n_rows) token ids */
    const int32_t *seq;          /* (n_rows) sequence slot, 0 <= seq < n_seq_slots */
    const int32_t *pos;          /* (n_rows) position in the sequence, >= 0 */
    const uint8_t *want_logits;  /* (n_rows) 1 when this row's logits are needed */
    /* Paged KV addressing, owned by the engine's block manager: */
    int32_t n_seq_slots;
    int32_t block_size;          /* tokens per KV block */
    const int32_t *const *block_tables; /* (n_seq_slots) -> (blocks of that sequence) */
    const int32_t *n_blocks;     /* (n_seq_slots) valid entries in each block table;
                                    0 (and a NULL table) for a slot with no sequence */
    /* Optional input embeddings (NULL = every row embeds its token): row i
     * reads embd[i] (n_embd floats) instead of the token's row when it is not
     * NULL. Image positions (a vision model's image ids past its text
     * vocabulary) carry their vision rows this way; a model without images
     * rejects them. */
    const float *const *embd;
    /* Optional SWA bounded replay (models with encoder and decoder layers
     * only, NULL = exact): per sequence slot, the first position its
     * decoder layers run on. Rows below it go through the encoder layers
     * only (the source layer still stores their compressed KV) and must not
     * want logits; decoder rows see window keys from that position on. The
     * engine sets it to prompt length - keep (docs/BOUNDED_REPLAY.md). */
    const int32_t *replay_from;
} di_batch;

#endif
