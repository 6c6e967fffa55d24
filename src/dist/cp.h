/* Balanced context parallelism: DeepInfer's zigzag split of prefill rows
 * (model_executor/layers/tilelang_ops/prepare_cp_mirror.py,
 * prepare_cp_mirror_ref). Each sequence of length sq is cut into 2*cp
 * pieces of ps = ceil(sq / (2 cp)) rows; rank r holds pieces r and
 * 2cp-1-r, so every rank's causal attention work is about the same.
 * Missing rows of the last pieces are padding (-1). */
#ifndef DI_DIST_CP_H
#define DI_DIST_CP_H

#include <stdint.h>

/* Rows per rank: sum over sequences of 2 * ps (padding included). */
int64_t di_cp_rows_per_rank(const int32_t *seq_lens, int32_t n_seqs, int32_t cp);

/* mirror (rows per rank): the global row (sequences concatenated) each of
 * rank's rows holds, or -1 for padding; reverse (sum of seq_lens): where
 * each global row sits in the rank-major concatenation of all ranks' rows
 * (rank * rows_per_rank + offset). Either may be NULL. */
void di_cp_zigzag(const int32_t *seq_lens, int32_t n_seqs, int32_t cp, int32_t rank, int32_t *mirror,
                  int32_t *reverse);

#endif
