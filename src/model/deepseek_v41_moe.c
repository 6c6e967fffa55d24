/* DeepSeek-V4.1 MoE (DeepInfer's mega-MoE, oracle: scripts/oracle_v41.py):
 *
 *   scores = sqrt(softplus(gate(h)));  top-K of scores + bias
 *   w_k    = score_k / sum score * routed_scale
 *   y      = sum_k w2_k(w_k * swiglu(w1_k x, w3_k x)) + shared(x)
 *
 * x is h cast to fp8 activations in the deepinfer numerics. The routed sum
 * runs in choice order from 0, then the shared output is added; with expert
 * parallelism (c->ep) the routed experts run on their owner ranks through
 * the family's EP core (deepseek_v4_ep.c), which sums a row's leading run on
 * one owner there in the same order, so the result is bit-identical. */
#include "model/deepseek_v41_internal.h"

#include "base/alloc.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* sqrt-softplus scores, top-K of score + bias (ties to the lower id),
 * weights s / (sum s + 1e-20) * routed_scale (TK moe_topk_gate_forward).
 * Image rows (token id >= vocab: the image segment's IMAGE / IMAGE_PAD ids)
 * select with gate.bias_vl (TK moe_topk_gate_forward's image_bias). */
static void route(di_dsv41_ctx *c, const dsv41_layer *L, int32_t il, int64_t n, di_threadpool *pool) {
    const di_dsv41_hparams *hp = &c->m->hp;
    const int32_t E = L->n_experts, K = L->n_used;
    /* forced imbalance (the EP benchmark's knob) on the main layers only (il >= 0): skewed draws from the
     * row's own content as the selection values */
    const int32_t n_hot = c->skew_factor > 0.0f && il >= 0 ? E / c->skew_groups : 0;
    for (int64_t r = 0; n_hot && r < n; r++)
        for (int32_t e = 0; e < E; e++)
            c->vsel[r * E + e] =
                dsv4_row_uniform(0, il, c->h + r * hp->n_embd, e) * (e < n_hot ? c->skew_factor : 1.0f);
    const int alt = il >= 0 && L->gate_bias_vl && c->row_token;
    const di_route_args a = {c->logit, n, E, K, alt ? c->row_token : NULL, NULL, n_hot ? c->vsel : NULL,
                             L->gate_bias, alt ? L->gate_bias_vl : NULL, hp->n_vocab, c->vsel, 0,
                             (float)hp->routed_scale, c->sel, c->selw};
    c->m->be->ops->ds_route(c->m->be, &a, pool);
}

/* y (cnt, D) = w2(wts * swiglu(w1 x, w3 x)) for w = {w1, w2, w3} on x (cnt,
 * D, already cast), with the numerics' roundings; wts NULL = 1 (shared). */
static void expert(const di_dsv41_ctx *c, const dsv4_linear *w1, const dsv4_linear *w2, const dsv4_linear *w3,
                   const float *x, const float *wts, int64_t cnt, float *g1, float *g3, float *y, float *mm,
                   di_threadpool *pool) {
    const di_dsv41_hparams *hp = &c->m->hp;
    const int64_t D = hp->n_embd, F = hp->moe_ff;
    const int faithful = dsv41_faithful(c);
    dsv4_lin(c->m->be, w1, x, D, g1, F, cnt, mm, pool);
    dsv4_lin(c->m->be, w3, x, D, g3, F, cnt, mm, pool);
    c->m->be->ops->clamped_glu(c->m->be, g1, g3, cnt, F, (float)hp->swiglu_limit, faithful, wts, pool);
    if (faithful && w2->kind != DSV4_W_PLAIN)
        c->m->be->ops->round_rows(c->m->be, DI_ROUND_FP8ACT, g1, cnt, F, F, pool);
    dsv4_lin(c->m->be, w2, g1, F, y, D, cnt, mm, pool);
    if (faithful) c->m->be->ops->round_rows(c->m->be, DI_ROUND_BF16, y, cnt, D, D, pool);
}

static void ep_expert(void *user, const dsv4_linear *w, float *x, const float *wts, int64_t cnt, float *y,
                      const dsv4_ep_scratch *sc, di_threadpool *pool) {
    expert(user, &w[0], &w[1], &w[2], x, wts, cnt, sc->g1, sc->g3, y, sc->mm, pool);
}

/* One step of a row's routed sum: the weight was applied inside the expert. */
static float ep_add(float acc, float y, float w) {
    (void)w;
    return acc + y;
}

di_status dsv41_moe(di_dsv41_ctx *c, int32_t il, int64_t n, di_threadpool *pool, di_error *err) {
    return dsv41_moe_layer(c, &c->m->layers[il], il, n, pool, err);
}

di_status dsv41_moe_layer(di_dsv41_ctx *c, const dsv41_layer *L, int32_t il, int64_t n, di_threadpool *pool,
                          di_error *err) {
    const di_dsv41_model *m = c->m;
    const di_dsv41_hparams *hp = &m->hp;
    const int32_t E = L->n_experts, K = L->n_used, D = hp->n_embd;
    di_dsv4_ep *ep = il >= 0 ? c->ep : NULL;
    if (n > 0) {
        dsv4_lin(m->be, &L->gate, c->h, D, c->logit, E, n, c->mm_scratch, pool); /* bf16, f32 out */
        route(c, L, il, n, pool);
        memcpy(c->xq, c->h, (size_t)n * D * sizeof(float));
        if (dsv41_faithful(c)) m->be->ops->round_rows(m->be, DI_ROUND_FP8ACT, c->xq, n, D, D, pool);
    }
    const int32_t *plen = NULL;
    const float *partial = NULL;
    if (ep) {
        dsv4_ep_layer io = {.layer = il, .n = n, .x = c->xq, .sel = c->sel, .selw = c->selw,
                            .expert = ep_expert, .mac = ep_add, .user = c, .ysel = c->ysel};
        di_status s = dsv4_ep_routed(ep, &io, pool, err);
        if (s) return s;
        plen = io.plen;
        partial = io.partial;
    }
    if (n == 0) return DI_OK;
    if (!ep) {
        dsv4_moe_local_io io = {.w1 = L->w1, .w2 = L->w2, .w3 = L->w3, .n_experts = E, .n_used = K, .n_embd = D,
                                .n = n, .x = c->xq, .sel = c->sel, .selw = c->selw, .expert = ep_expert,
                                .user = c, .sc = {c->g1, c->g3, c->mm_scratch}, .xg = c->xg, .yg = c->yg,
                                .grow = c->grow, .wg = c->wg, .ysel = c->ysel};
        dsv4_moe_local(&io, pool);
    }
    /* the shared expert on the same cast input */
    expert(c, &L->sh_w1, &L->sh_w2, &L->sh_w3, c->xq, NULL, n, c->g1, c->g3, c->yg, c->mm_scratch, pool);
    /* routed outputs in choice order from 0 (EP: the owner of the leading
     * run sent its sum; selw NULL: the expert applied the weight, the sum
     * adds, as ep_add on the owners), then the shared one */
    c->m->be->ops->moe_sum(c->m->be, n, K, D, c->ysel, NULL, plen, partial, c->yg, c->y, pool);
    if (dsv41_faithful(c)) c->m->be->ops->round_rows(c->m->be, DI_ROUND_BF16, c->y, n, D, D, pool);
    return DI_OK;
}

di_status di_dsv41_ep_create(const di_dsv41_model *m, di_dist *d, const di_dsv4_ep_params *p, di_dsv4_ep **out,
                             di_error *err) {
    return dsv4_ep_create_layers(m->layers, sizeof *m->layers, offsetof(dsv41_layer, core), &m->hp, d, p, out, err);
}

void di_dsv41_ctx_set_route_skew(di_dsv41_ctx *c, double ratio, int32_t groups) {
    dsv4_route_skew_set(&c->skew_factor, &c->skew_groups, &c->m->hp, ratio, groups);
}

void di_dsv41_ctx_set_ep(di_dsv41_ctx *c, di_dsv4_ep *ep) {
    c->ep = ep;
    dsv4_ep_attach_skew(ep, &c->skew_factor, &c->skew_groups, &c->m->hp);
}
