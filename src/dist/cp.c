/* The zigzag split (cp.h), prepare_cp_mirror_ref's loops in C. */
#include "dist/cp.h"

static int32_t piece_of(int32_t sq, int32_t cp) { return (sq + 2 * cp - 1) / (2 * cp); }

int64_t di_cp_rows_per_rank(const int32_t *seq_lens, int32_t n_seqs, int32_t cp) {
    int64_t n = 0;
    for (int32_t i = 0; i < n_seqs; i++) n += 2 * (int64_t)piece_of(seq_lens[i], cp);
    return n;
}

void di_cp_zigzag(const int32_t *seq_lens, int32_t n_seqs, int32_t cp, int32_t rank, int32_t *mirror,
                  int32_t *reverse) {
    const int64_t per_rank = di_cp_rows_per_rank(seq_lens, n_seqs, cp);
    int64_t cu_q = 0, cu_e = 0, m = 0;
    for (int32_t i = 0; i < n_seqs; i++) {
        const int32_t sq = seq_lens[i], ps = piece_of(sq, cp);
        for (int32_t r = 0; r < cp; r++)
            for (int32_t half = 0; half < 2; half++) {
                int32_t block = half ? 2 * cp - 1 - r : r;
                for (int32_t j = 0; j < ps; j++) {
                    int32_t local = ps * block + j;
                    if (reverse && local < sq)
                        reverse[cu_q + local] = (int32_t)(r * per_rank + cu_e + (int64_t)half * ps + j);
                    if (mirror && r == rank) mirror[m++] = local < sq ? (int32_t)(cu_q + local) : -1;
                }
            }
        cu_q += sq;
        cu_e += 2 * (int64_t)ps;
    }
}
