/* Engram of DeepSeek-V4.1 (module `engram`): the n-gram memory that layers
 * 1 and 14 of V4.1-Flash add to the residual streams before attention.
 * Each piece follows a DeepInfer 0.1.0 / tile-kernels 2.1.0 function and is
 * tested bit-exactly against it (tests/model/test_engram.c, goldens from
 * scripts/gen_goldens_engram.py):
 *
 *   vocab   di_engram_vocab_build      engram_metadata.py:CompressedVocabulary
 *   rng     di_engram_np_rng_*         numpy default_rng(seed).integers(.., int64)
 *   layout  di_engram_layout_create    EngramLayout.from_cfg + NgramHashMapping
 *                                      + tile_kernels make_offsets
 *   ngram   di_engram_ngram_row        csrc prepare_tensor_input_base.cpp:fill_engram_row
 *   hash    di_engram_hash_row         tile_kernels torch/engram.py:engram_hash_ref
 *   gate    di_engram_gate             tile_kernels torch/engram.py:engram_gate_ref
 *   rows    di_engram_gather_rows      the FP8 e4m3 table rows times their
 *                                      UE8M0 scales (TK cast_back semantics)
 *
 * Pipeline for one token at position pos of a sequence of compressed ids:
 *   di_engram_ngram_row -> ids (max_ngram) -> di_engram_hash_row per layer ->
 *   rows ((max_ngram-1)*n_heads) -> di_engram_gather_rows -> the projection
 *   (elsewhere) -> k (hc, d), v (d) -> di_engram_gate. */
#ifndef DI_MODEL_ENGRAM_H
#define DI_MODEL_ENGRAM_H

#include "base/status.h"
#include "text/tokenizer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- compressed vocabulary ---------------------------------------------- */

/* DeepInfer requires the pad token at this id (CompressedVocabulary asserts
 * token_to_id("<｜▁pad▁｜>") == 2); it is also DEEPINFER_ENGRAM_PAD_TOKEN's
 * default, the raw id whose compressed id pads n-grams before the start. */
#define DI_ENGRAM_PAD_TOKEN_ID 2
#define DI_ENGRAM_PAD_TOKEN_TEXT "<\xEF\xBD\x9C\xE2\x96\x81pad\xE2\x96\x81\xEF\xBD\x9C>" /* <｜▁pad▁｜> */

typedef struct di_engram_vocab {
    int32_t *lookup;      /* (n_vocab) raw token id -> compressed id */
    int32_t n_vocab;      /* the tokenizer's size, added tokens included */
    int32_t n_compressed; /* number of distinct keys = compressed vocab size */
    int32_t pad;          /* lookup[DI_ENGRAM_PAD_TOKEN_ID] */
} di_engram_vocab;

/* Each id is decoded alone with special tokens kept; a piece that is not
 * valid UTF-8 alone (HF would show U+FFFD) or contains U+FFFD is keyed by its
 * raw vocabulary spelling, any other by NFKC -> NFD -> strip marks ->
 * lowercase -> [ \t\r\n]+ to " " -> strip White_Space (a lone " " is kept),
 * or by the piece itself when that leaves nothing. Compressed ids count keys
 * in order of first appearance. DI_ERR_FORMAT when the pad token is missing
 * or not at id 2. Fills *out (caller frees with di_engram_vocab_free). */
di_status di_engram_vocab_build(const di_tokenizer *t, di_engram_vocab *out, di_error *err);
void di_engram_vocab_free(di_engram_vocab *v);

/* ---- numpy Generator port (PCG64 seeded by SeedSequence) ------------------- */

typedef struct di_engram_np_rng {
    uint64_t state_hi, state_lo; /* PCG64 128-bit LCG state */
    uint64_t inc_hi, inc_lo;     /* its odd increment */
    bool has_u32;                /* numpy's buffered upper half word */
    uint32_t u32;
} di_engram_np_rng;

/* np.random.default_rng(seed) for a non-negative integer seed. */
void di_engram_np_rng_seed(di_engram_np_rng *r, uint64_t seed);
uint64_t di_engram_np_rng_next_u64(di_engram_np_rng *r);
/* rng.integers(low, high, n, dtype=np.int64): high exclusive, Lemire's
 * bounded draws exactly as numpy's random_bounded_uint64_fill makes them.
 * DI_ERR_INVALID_ARG unless low < high. */
di_status di_engram_np_rng_integers(di_engram_np_rng *r, int64_t low, int64_t high, size_t n,
                                    int64_t *out, di_error *err);

/* ---- layout: multipliers, primes, offsets -------------------------------- */

#define DI_ENGRAM_MAX_NGRAM 8  /* engram_max_ngram_size limit of this port (V4.1: 4) */
#define DI_ENGRAM_MAX_HEADS 32 /* engram_n_heads limit (V4.1: 8) */
#define DI_ENGRAM_MAX_COLS ((DI_ENGRAM_MAX_NGRAM - 1) * DI_ENGRAM_MAX_HEADS)
#define DI_ENGRAM_LAYER_SEED_STRIDE 10007 /* NgramHashMapping: rng seed = seed + 10007 * layer_id */

/* The config values that drive the layout (HF text_config names). */
typedef struct di_engram_config {
    const int32_t *layer_ids; /* (n_layers) engram_layer_ids, config order */
    int32_t n_layers;
    int32_t max_ngram;        /* engram_max_ngram_size, >= 2 */
    int32_t n_heads;          /* engram_n_heads */
    int64_t vocab_size;       /* engram_vocab_size: each chain of primes starts above vocab_size - 1 */
    int64_t compressed_vocab; /* the compressed vocabulary's size (di_engram_vocab.n_compressed) */
    uint64_t seed;            /* NgramHashMapping seed; DeepInfer uses 0 */
} di_engram_config;

/* One Engram layer. Columns c = (n - 2) * n_heads + h for n-gram order n in
 * 2..max_ngram and head h (n-major, the order of the hash output). */
typedef struct di_engram_layer {
    int32_t layer_id;
    int32_t max_ngram, n_heads, n_cols; /* n_cols = (max_ngram - 1) * n_heads */
    int64_t compressed_vocab;           /* ids must lie in [0, compressed_vocab) */
    int64_t multipliers[DI_ENGRAM_MAX_NGRAM]; /* (max_ngram) odd: 2 * integers(0, bound) + 1 */
    int64_t primes[DI_ENGRAM_MAX_COLS];       /* (n_cols) table size of each column */
    int64_t offsets[DI_ENGRAM_MAX_COLS];      /* (n_cols) exclusive prefix sums of primes */
    int64_t n_rows;                           /* sum of primes: the layer's table rows */
} di_engram_layer;

typedef struct di_engram_layout {
    di_engram_layer *layers; /* (n_layers) in config order */
    int32_t n_layers;
} di_engram_layout;

/* Multipliers: bound = max(1, (INT64_MAX / compressed_vocab) / 2), per layer
 * rng(seed + 10007 * layer_id).integers(0, bound, max_ngram) * 2 + 1.
 * Primes: the next prime above vocab_size - 1, then the next, per head and
 * order, never reusing one across layers (sympy.nextprime chain). Rows must
 * fit int32 as tile-kernels indexes them. Caller frees with
 * di_engram_layout_free. */
di_status di_engram_layout_create(const di_engram_config *cfg, di_engram_layout *out, di_error *err);
void di_engram_layout_free(di_engram_layout *l);
/* The layer with this id, or NULL. */
const di_engram_layer *di_engram_layout_find(const di_engram_layout *l, int32_t layer_id);

/* ---- n-gram ids and hash --------------------------------------------------- */

#define DI_ENGRAM_IMAGE_SENTINEL (-1) /* CompressedTokenizer.IMAGE_SENTINEL */

/* fill_engram_row for one position: out[r] = comp[pos - r] for r in
 * [0, max_ngram); pad where pos - r < 0, and from an image sentinel on
 * (that lookback and every longer one). comp holds the compressed ids of
 * positions [0, n_comp); pos must be < n_comp. */
di_status di_engram_ngram_row(const int32_t *comp, int64_t n_comp, int64_t pos, int32_t max_ngram,
                              int32_t pad, int32_t *out /* (max_ngram) */, di_error *err);

/* engram_hash_ref for one token: acc = ids[0] * m[0]; for n = 1..max_ngram-1:
 * acc ^= ids[n] * m[n], then out[(n-1)*n_heads + h] = acc % primes + offsets.
 * ids = comp[pos], comp[pos-1], ... (di_engram_ngram_row). The int64 products
 * cannot overflow because of the multiplier bound, so every id must lie in
 * [0, compressed_vocab) (DI_ERR_RANGE otherwise; image tokens, which TK
 * masks to -1, are the caller's to skip). out: (n_cols) global table rows. */
di_status di_engram_hash_row(const di_engram_layer *L, const int32_t *ngram_ids /* (max_ngram) */,
                             int64_t *out /* (n_cols) */, di_error *err);

/* ---- gate ------------------------------------------------------------------ */

#define DI_ENGRAM_GATE_CLAMP 1e-6f /* EngramEmbedding.clamp_value */

/* engram_gate_ref for one token, in f32. For each stream j < hc:
 *   dot_j = sum_c (x_j*wh_j)[c] (k_j*we_j)[c] * rsqrt(mean x_j^2 + eps)
 *           * rsqrt(mean k_j^2 + eps) * d^-0.5
 *   g_j   = sigmoid(sign(dot_j) * sqrt(max(|dot_j|, 1e-6)))
 *   out_j = x_j + g_j * v
 * The reference rounds out to bf16 (its output dtype): round_bf16 does that
 * (round to nearest even). eps is the model's rms_norm_eps (V4.1: 1e-20).
 * out may alias x. gate (hc) may be NULL. */
di_status di_engram_gate(const float *x /* (hc, d) */, const float *k /* (hc, d) */,
                         const float *v /* (d) */, const float *wh /* (hc, d) q_weight */,
                         const float *we /* (hc, d) k_weight */, int32_t hc, int32_t d, float eps,
                         bool round_bf16, float *out /* (hc, d) */, float *gate /* (hc) */,
                         di_error *err);

/* ---- table rows ------------------------------------------------------------ */

#define DI_ENGRAM_SCALE_BLOCK 32 /* one UE8M0 scale per 32 values of a row */

/* out[i] = e4m3(table[idx[i]]) * 2^(scales[idx[i]] - 127) blockwise, from a
 * (memory-mapped) table (n_rows, head_dim) with scales (n_rows, head_dim/32).
 * DI_ERR_RANGE for an index outside [0, n_rows) (nothing is read then);
 * head_dim must be a multiple of 32. */
di_status di_engram_gather_rows(const uint8_t *table, const uint8_t *scales, int64_t n_rows,
                                int32_t head_dim, const int64_t *idx, int32_t n_idx,
                                float *out /* (n_idx, head_dim) */, di_error *err);

#endif
