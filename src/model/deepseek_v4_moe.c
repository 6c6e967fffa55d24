/* V4 mixture of experts, per token:
 *   s_e = sqrt(softplus(router_e . h))                      all experts (ds_route)
 *   chosen = top-K of s_e + bias_e   (bias picks, never weighs)
 *            or tid2eid[token] on hash-routed layers
 *   w_k = s_chosen_k / (sum_k s_chosen_k + 1e-20) * routed_scaling_factor
 *   y = sum_k w_k * E_k(h) + S(h)
 * with E and S the clamped SwiGLU experts: gate clamped above at `limit`, up
 * clamped to [-limit, limit], silu(gate) * up (the backend's clamped_glu),
 * then down.
 *
 * Experts run on the rows that chose them (gathered), and each (row, expert)
 * output is stored on its own, then summed per row in ascending expert order
 * (the reference's loop order), so a row's result never depends on what the
 * other rows chose. */
#include "model/deepseek_v4_internal.h"

#include "base/alloc.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* DeepInfer's _map_unbalanced_ratio_to_factor: the score scale f (hot
 * experts ~ U(0, f), the others ~ U(0, 1)) that makes one group of n_hot of
 * E experts get `ratio` times the selections of each of the other groups. */
float dsv4_skew_factor(double ratio, int32_t groups, int32_t K, int32_t E) {
    if (!(ratio >= 1.0 && groups > 1 && E >= groups)) return 0.0f; /* off */
    double x = ratio / (ratio + groups - 1), n_hot = (double)E / groups;
    double t = 1.0 - (1.0 - x) * K / (E - n_hot), denom = 1.0 - x * K / n_hot;
    return denom > 0 ? (float)(t / denom) : 100.0f; /* saturate when unachievable */
}

void di_dsv4_ctx_set_route_skew(di_dsv4_ctx *c, double ratio, int32_t groups) {
    dsv4_route_skew_set(&c->skew_factor, &c->skew_groups, &c->m->hp, ratio, groups);
}

/* A uniform [0, 1) draw from a row's own content: the token, the layer and
 * the bits of its first hidden values, so a row's draw never depends on its
 * batch or rank (splitmix64). */
float dsv4_row_uniform(int32_t token, int32_t il, const float *h, int32_t e) {
    uint32_t b0, b1;
    memcpy(&b0, &h[0], 4);
    memcpy(&b1, &h[1], 4);
    uint64_t z = ((uint64_t)(uint32_t)token << 32 | b0) ^ ((uint64_t)b1 << 17) ^ ((uint64_t)il << 48) ^
                 ((uint64_t)e * 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)(z >> 40) * (1.0f / 16777216.0f);
}

/* Chooses each row's experts and weights into c->sel / c->selw, sorted by
 * expert id (ties between equal ids keep their order): the backend's
 * ds_route, with the forced imbalance's draws made here from each row's
 * own content. */
static void route(di_dsv4_ctx *c, const dsv4_layer *L, const int32_t *tokens, int64_t n, di_threadpool *pool) {
    const di_dsv4_model *m = c->m;
    const di_dsv4_hparams *hp = &m->hp;
    const int32_t E = hp->n_experts, K = hp->n_experts_used;
    const int skew = !L->hash_moe && c->skew_factor > 0.0f;
    if (skew) {
        const int32_t il = (int32_t)(L - m->layers), n_hot = E / c->skew_groups;
        for (int64_t r = 0; r < n; r++)
            for (int32_t e = 0; e < E; e++)
                c->vsel[r * E + e] =
                    dsv4_row_uniform(tokens[r], il, c->h + r * hp->n_embd, e) * (e < n_hot ? c->skew_factor : 1.0f);
    }
    const di_route_args a = {c->logit, n, E, K, tokens, L->hash_moe ? L->tid2eid : NULL, skew ? c->vsel : NULL,
                             L->gate_bias, NULL, 0, c->vsel, 1, hp->routed_scale, c->sel, c->selw};
    m->be.ops->ds_route(&m->be, &a, pool);
}

/* ---- expert parallelism: V4's side of the family's EP core ---------------- */

/* One expert on its gathered rows (the weight is applied in the row's sum,
 * dsv4_moe_mac): the same function here and on an EP owner. */
static void run_expert(di_dsv4_ctx *c, const dsv4_linear *w, const float *x, int64_t cnt, float *y,
                       const dsv4_ep_scratch *sc, di_threadpool *pool) {
    const di_dsv4_model *m = c->m;
    const int64_t D = m->hp.n_embd, F = m->hp.moe_ff;
    dsv4_lin(&m->be, &w[0], x, D, sc->g1, F, cnt, sc->mm, pool);
    dsv4_lin(&m->be, &w[2], x, D, sc->g3, F, cnt, sc->mm, pool);
    m->be.ops->clamped_glu(&m->be, sc->g1, sc->g3, cnt, F, m->hp.swiglu_limit, 0, NULL, pool);
    dsv4_lin(&m->be, &w[1], sc->g1, F, y, D, cnt, sc->mm, pool);
    if (c->prof_on) c->prof.flops[DI_DSV4_BLK_MOE_ROUTED] += 6.0 * (double)cnt * (double)D * (double)F;
}

static void ep_expert(void *user, const dsv4_linear *w, float *x, const float *wts, int64_t cnt, float *y,
                      const dsv4_ep_scratch *sc, di_threadpool *pool) {
    (void)wts;
    run_expert(user, w, x, cnt, y, sc, pool);
}

/* The same in this process, with the weight bytes it read for the profile. */
static void local_expert(void *user, const dsv4_linear *w, float *x, const float *wts, int64_t cnt, float *y,
                         const dsv4_ep_scratch *sc, di_threadpool *pool) {
    (void)wts;
    di_dsv4_ctx *c = user;
    run_expert(c, w, x, cnt, y, sc, pool);
    if (c->prof_on)
        c->prof.bytes[DI_DSV4_BLK_MOE_ROUTED] += dsv4_linear_bytes(&w[0]) + dsv4_linear_bytes(&w[1]) +
                                                  dsv4_linear_bytes(&w[2]);
}

static float ep_mac(float acc, float y, float w) { return dsv4_moe_mac(acc, y, w); }

di_status di_dsv4_ep_create(const di_dsv4_model *m, di_dist *d, const di_dsv4_ep_params *p, di_dsv4_ep **out,
                            di_error *err) {
    return dsv4_ep_create_layers(m->layers, sizeof *m->layers, offsetof(dsv4_layer, core), &m->hp, d, p, out, err);
}

void di_dsv4_ctx_set_ep(di_dsv4_ctx *c, di_dsv4_ep *ep) {
    c->ep = ep;
    dsv4_ep_attach_skew(ep, &c->skew_factor, &c->skew_groups, &c->m->hp);
}

di_status dsv4_moe(di_dsv4_ctx *c, int32_t il, const int32_t *tokens, int64_t n, di_threadpool *pool,
                   di_error *err) {
    const di_dsv4_model *m = c->m;
    const di_dsv4_hparams *hp = &m->hp;
    const dsv4_layer *L = &m->layers[il];
    const int32_t E = hp->n_experts, K = hp->n_experts_used, D = hp->n_embd, F = hp->moe_ff;
    double t0 = dsv4_prof_now(c);
    if (n > 0) {
        dsv4_lin(&m->be, &L->gate, c->h, D, c->logit, E, n, c->mm_scratch, pool);
        route(c, L, tokens, n, pool);
    }
    dsv4_prof_add(c, DI_DSV4_BLK_MOE_ROUTER, t0);
    t0 = dsv4_prof_now(c);
    if (c->ep) {
        dsv4_ep_layer io = {.layer = il, .n = n, .x = c->h, .sel = c->sel, .selw = c->selw,
                            .expert = ep_expert, .mac = ep_mac, .user = c, .ysel = c->ysel};
        di_status s = dsv4_ep_routed(c->ep, &io, pool, err);
        if (s) return s;
        c->ep_plen = io.plen;
        c->ep_partial = io.partial;
    }
    if (n == 0) return DI_OK;
    if (!c->ep) {
        dsv4_moe_local_io io = {.w1 = L->w1, .w2 = L->w2, .w3 = L->w3, .n_experts = E, .n_used = K, .n_embd = D,
                                .n = n, .x = c->h, .sel = c->sel, .selw = c->selw, .expert = local_expert,
                                .user = c, .sc = {c->g1, c->g3, c->mm_scratch}, .xg = c->xg, .yg = c->yg,
                                .grow = c->grow, .wg = NULL, .ysel = c->ysel};
        dsv4_moe_local(&io, pool);
    }
    dsv4_prof_add(c, DI_DSV4_BLK_MOE_ROUTED, t0);
    /* shared expert into yg */
    t0 = dsv4_prof_now(c);
    dsv4_lin(&m->be, &L->sh_w1, c->h, D, c->g1, F, n, c->mm_scratch, pool);
    dsv4_lin(&m->be, &L->sh_w3, c->h, D, c->g3, F, n, c->mm_scratch, pool);
    m->be.ops->clamped_glu(&m->be, c->g1, c->g3, n, F, hp->swiglu_limit, 0, NULL, pool);
    dsv4_lin(&m->be, &L->sh_w2, c->g1, F, c->yg, D, n, c->mm_scratch, pool);
    dsv4_prof_add(c, DI_DSV4_BLK_MOE_SHARED, t0);
    if (c->prof_on) {
        c->prof.flops[DI_DSV4_BLK_MOE_SHARED] += 6.0 * (double)n * (double)D * (double)F;
        c->prof.bytes[DI_DSV4_BLK_MOE_SHARED] +=
            dsv4_linear_bytes(&L->sh_w1) + dsv4_linear_bytes(&L->sh_w2) + dsv4_linear_bytes(&L->sh_w3);
    }
    /* the routed sum in ascending expert order, then the shared output */
    t0 = dsv4_prof_now(c);
    m->be.ops->moe_sum(&m->be, n, K, D, c->ysel, c->selw, c->ep ? c->ep_plen : NULL, c->ep ? c->ep_partial : NULL,
                       c->yg, c->y, pool);
    dsv4_prof_add(c, DI_DSV4_BLK_MOE_ROUTED, t0);
    return DI_OK;
}
