/* The DSpark drafter of DeepSeek-V4.1 checkpoints (mtp.0 .. mtp.<n-1>), as
 * DeepSeek's DeepInfer 0.1.0 runs it (models/mtp/dflash.py:DFlash,
 * decoder_layer.py:DFlashDecoderLayer, v4_modules/attn.py:DFlashAttention):
 *
 *   main forward   (di_dsv41_kv_enable_dspark on the kv) every row's target
 *                  features F = [mean_j R_l[j] for l in dspark_target_layer_ids]
 *                  (the trunk entering those layers' attention), M =
 *                  main_norm(main_proj F), and each stage's key
 *                  rotary(kv_norm(M Wkv_i)) into that stage's record of the
 *                  row's position (rejected rows are overwritten later)
 *   draft          one block per sequence, [golden, noise x (k-1)] at
 *                  positions p+1 .. p+k (p = the last position fed to the
 *                  main model); through every stage: shifted mHC, window
 *                  attention over the main keys p-W+1 .. p plus the whole
 *                  block (bidirectional, with the sink), mHC, the stage's
 *                  own MoE; then h = the last pre mix of the copies
 *   heads          per step s in order: logits = head(norm(h_s)) +
 *                  markov_head(prev) with prev the golden (s = 0) or the
 *                  draft of step s-1; confidence sigmoid([h_s; embed(prev)].w
 *                  / T); the draft sampled from logits with the request's
 *                  temperature / top-p / top-k on the draft RNG stream
 *                  (seed + DI_DSPARK_MTP_SEED_OFFSET, position
 *                  di_dspark_draft_position(sample_pos, 0, s))
 *
 * Oracle: scripts/oracle_v41/dspark.py (the oracle's V4.1 forward extended
 * with the drafter from DeepInfer's code); goldens of
 * scripts/gen_goldens_dspark_v41.py; test tests/model/test_deepseek_v41_dspark.c. */
#ifndef DI_MODEL_DEEPSEEK_V41_DSPARK_H
#define DI_MODEL_DEEPSEEK_V41_DSPARK_H

#include "model/deepseek_v41.h"

#include <stdint.h>

typedef struct di_dsv41_draft_req {
    int32_t seq;          /* sequence slot in the tables' block tables */
    int32_t golden;       /* the token just sampled (not yet fed to the main model) */
    int32_t last_pos;     /* position of the last token fed to the main model */
    float temperature;    /* the request's sampling: < 1e-5 is greedy */
    float top_p;          /* (0, 1] */
    int32_t top_k;        /* < 0: off */
    uint64_t seed;        /* the request's seed (the target stream's) */
    int32_t sample_pos;   /* draft step s samples at sample_pos + s + 1 */
} di_dsv41_draft_req;

/* Number of draft stages of m (0: the checkpoint has no drafter). */
int32_t di_dsv41_dspark_stages(const di_dsv41_model *m);

/* Drafts k tokens (1 <= k <= 64) for each of n_req sequences in one forward
 * of the stages. tables: only n_seq_slots, block_size, block_tables,
 * n_blocks are read (the engine's block tables, covering positions up to
 * last_pos + k); kv must have DSpark enabled and hold the main keys of
 * positions <= last_pos. Outputs (row = req * k + s; any may be NULL):
 *   logits (n_req*k, V)    raw draft logits, the Markov correction included
 *   logprobs (n_req*k, V)  after the request's temperature / top-p / top-k
 *   conf (n_req*k)         confidence of each draft
 *   drafts (n_req*k)       the sampled drafts
 * ctx: a context of the same model (not used by a main forward at the same
 * time). */
di_status di_dsv41_dspark_draft(di_dsv41_ctx *ctx, di_dsv41_kv *kv, const di_batch *tables,
                                const di_dsv41_draft_req *reqs, int32_t n_req, int32_t k, float conf_temperature,
                                float *logits, float *logprobs, float *conf, int32_t *drafts, di_threadpool *pool,
                                di_error *err);

#endif
