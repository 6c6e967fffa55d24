/* SWA bounded replay for DeepSeek-V4.1 prefill: DeepInfer 0.1.0's YoCo
 * "compact" truncation (model_executor/models/v4_modules/yoco.py,
 * decoder_layer.py, attn.py:_store_yoco_full_kv; the C++ metadata side,
 * yoco_swa_visibility, in docs/BOUNDED_REPLAY.md). The layers from n_prefill_layer on (the ratio-1 source layer
 * and the decoders after it) need only the last window of the prompt, so:
 *
 *   layers < n_prefill_layer        every row (the encoder)
 *   layer n_prefill_layer           mHC pre + attn_norm on every row; its
 *                                   compressor (and index keys) on every
 *                                   row, so the compressed KV covers the
 *                                   whole prompt; then only the kept rows
 *                                   (pos >= replay_from of their sequence)
 *                                   go on: their residual copies, mixes,
 *                                   sublayer input, top-k and candidate
 *                                   blocks are moved to the front
 *   layers >= n_prefill_layer       kept rows only; window keys from
 *                                   replay_from on (yoco_swa_visibility)
 *
 * The first kept rows therefore see a shortened window: bounded replay is
 * an approximation of the exact forward, as in DeepInfer. The engine sets
 * replay_from = prompt length - keep per sequence, fixed for its lifetime,
 * so chunked prefill and recompute after preemption give the same bits as
 * one prefill; docs/BOUNDED_REPLAY.md says how the prefix cache stays
 * exact. */
#include "model/deepseek_v41_internal.h"

#include "base/alloc.h"

#include <stdlib.h>
#include <string.h>

int32_t di_dsv41_replay_default_keep(const di_dsv41_hparams *hp) { return hp->window + DI_DSV41_REPLAY_BACKTRACK; }

di_status di_dsv41_replay_check(const di_dsv41_model *m, int32_t keep, di_error *err) {
    const di_dsv41_hparams *hp = &m->hp;
    const int32_t nb = hp->n_prefill_layer;
    if (nb >= hp->n_layers)
        return di_error_set(err, DI_ERR_UNSUPPORTED,
                            "bounded replay: the model has no ratio-1 source layer, so no decoder layers to bound");
    if (keep < hp->window)
        return di_error_set(err, DI_ERR_INVALID_ARG,
                            "bounded replay: keep %d is below the window %d (decode rows would read window keys "
                            "that were never computed)",
                            (int)keep, (int)hp->window);
    for (int32_t l = nb + 1; l < hp->n_layers; l++)
        if (hp->role[l].ratio && hp->role[l].kv_src == l)
            return di_error_set(err, DI_ERR_UNSUPPORTED,
                                "bounded replay: decoder layer %d owns a compressor, which needs every prompt row",
                                (int)l);
    int n_before = 0, n_after = 0;
    for (int32_t t = 0; m->n_draft && t < hp->n_dspark_targets; t++) {
        if (hp->dspark_targets[t] < nb) n_before++;
        else n_after++;
    }
    if (n_before && n_after) /* DeepInfer asserts the same (deepseek.py:_init_yoco) */
        return di_error_set(err, DI_ERR_UNSUPPORTED,
                            "bounded replay: the DSpark target layers lie on both sides of layer %d", (int)nb);
    return DI_OK;
}

di_status dsv41_replay_validate(const di_dsv41_ctx *c, const di_batch *b, int *any_clipped, di_error *err) {
    *any_clipped = 0;
    if (!b->replay_from) return DI_OK;
    if (c->cp)
        return di_error_set(err, DI_ERR_UNSUPPORTED, "bounded replay: not with context parallelism (DeepInfer "
                                                     "re-splits the kept rows; this engine does not)");
    /* the model's structure (the keep itself is the caller's: replay_from) */
    di_status s = di_dsv41_replay_check(c->m, c->m->hp.window, err);
    if (s) return s;
    for (int32_t i = 0; i < b->n_rows; i++) {
        int32_t from = b->replay_from[b->seq[i]];
        if (from < 0)
            return di_error_set(err, DI_ERR_INVALID_ARG, "batch: replay_from %d of slot %d is negative", (int)from,
                                (int)b->seq[i]);
        if (b->pos[i] >= from) continue;
        if (b->want_logits[i])
            return di_error_set(err, DI_ERR_INVALID_ARG,
                                "batch: row %d (position %d) wants logits but lies before replay_from %d", (int)i,
                                (int)b->pos[i], (int)from);
        *any_clipped = 1;
    }
    return DI_OK;
}

/* Row k <- row i of a (rows, width) array, k <= i. */
static void move_row(void *base, int64_t width, size_t size, int64_t k, int64_t i) {
    if (k == i || width == 0) return;
    uint8_t *p = base;
    memmove(p + (size_t)(k * width) * size, p + (size_t)(i * width) * size, (size_t)width * size);
}

di_status dsv41_replay_compact(di_dsv41_ctx *c, const di_batch *b, di_batch *out, int64_t *n_kept, di_error *err) {
    const di_dsv41_hparams *hp = &c->m->hp;
    const int64_t n = b->n_rows, N = hp->hc_mult, D = hp->n_embd;
    if (n > c->cap_compact) {
        c->cap_compact = 0;
        if (!dsv4_regrow(&c->cb_token, n, sizeof(int32_t)) || !dsv4_regrow(&c->cb_seq, n, sizeof(int32_t)) ||
            !dsv4_regrow(&c->cb_pos, n, sizeof(int32_t)) || !dsv4_regrow(&c->cb_want, n, 1) ||
            !dsv4_regrow(&c->cb_embd, n, sizeof(float *)))
            return di_error_set(err, DI_ERR_NOMEM, "bounded replay: out of memory for %lld rows", (long long)n);
        c->cap_compact = n;
    }
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) {
        if (b->pos[i] < b->replay_from[b->seq[i]]) continue;
        move_row(c->R, N * D, sizeof(float), k, i);
        move_row(c->pre, N, sizeof(float), k, i);
        move_row(c->post, N, sizeof(float), k, i);
        move_row(c->comb, N * N, sizeof(float), k, i);
        move_row(c->h, D, sizeof(float), k, i);
        move_row(c->topk, hp->index_topk, sizeof(int32_t), k, i);
        move_row(c->cand, hp->cand_topk_blocks, sizeof(int32_t), k, i);
        c->cb_token[k] = b->token[i];
        c->cb_seq[k] = b->seq[i];
        c->cb_pos[k] = b->pos[i];
        c->cb_want[k] = b->want_logits[i];
        c->cb_embd[k] = b->embd ? b->embd[i] : NULL;
        k++;
    }
    *out = *b;
    out->n_rows = (int32_t)k;
    out->token = c->cb_token;
    out->seq = c->cb_seq;
    out->pos = c->cb_pos;
    out->want_logits = c->cb_want;
    out->embd = b->embd ? c->cb_embd : NULL;
    *n_kept = k;
    return DI_OK;
}
