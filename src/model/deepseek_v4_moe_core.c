/* The one-process half of the DeepSeek family's MoE (V4 and V4.1; the EP
 * half is deepseek_v4_ep.c): each routed expert runs once per step over
 * the rows that chose it (its weights are read once however many rows
 * chose it), and each row's outputs are summed in its choice order, then
 * the shared expert's output is added. What an expert computes (V4: the
 * weight applied in the sum; V4.1: inside, with its roundings) is the
 * model's expert function, the one its EP owners run too. */
#include "model/deepseek_v4_internal.h"

#include "base/alloc.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

void dsv4_moe_local(const dsv4_moe_local_io *io, di_threadpool *pool) {
    const int64_t n = io->n, D = io->n_embd;
    const int32_t K = io->n_used;
    for (int32_t e = 0; e < io->n_experts; e++) {
        int64_t cnt = 0;
        for (int64_t i = 0; i < n * K; i++)
            if (io->sel[i] == e) {
                io->grow[cnt] = (int32_t)i;
                if (io->wg) io->wg[cnt] = io->selw[i];
                memcpy(io->xg + cnt * D, io->x + (i / K) * D, (size_t)D * sizeof(float));
                cnt++;
            }
        if (!cnt) continue;
        const dsv4_linear w[3] = {io->w1[e], io->w2[e], io->w3[e]};
        io->expert(io->user, w, io->xg, io->wg, cnt, io->yg, &io->sc, pool);
        for (int64_t j = 0; j < cnt; j++)
            memcpy(io->ysel + (int64_t)io->grow[j] * D, io->yg + j * D, (size_t)D * sizeof(float));
    }
}

di_status dsv4_ep_create_layers(const void *layers, size_t stride, size_t off_core, const di_dsv4_hparams *hp,
                                di_dist *d, const di_dsv4_ep_params *p, di_dsv4_ep **out, di_error *err) {
    *out = NULL;
    const int32_t L = hp->n_layers;
    const dsv4_linear **t = di_malloc_array((size_t)3 * (L > 0 ? L : 1), sizeof *t);
    if (!t) return di_error_set(err, DI_ERR_NOMEM, "ep: out of memory");
    const size_t off[3] = {off_core + offsetof(dsv4_core_w, w1), off_core + offsetof(dsv4_core_w, w2),
                           off_core + offsetof(dsv4_core_w, w3)};
    for (int32_t l = 0; l < L; l++)
        for (int w = 0; w < 3; w++)
            t[w * L + l] = *(const dsv4_linear *const *)((const char *)layers + (size_t)l * stride + off[w]);
    dsv4_ep_experts x = {L, hp->n_experts, hp->n_experts_used, hp->n_embd, hp->moe_ff, t, t + L, t + 2 * L};
    di_status s = dsv4_ep_create(&x, d, p, out, err);
    free(t); /* the core copies what it keeps */
    return s;
}

void dsv4_route_skew_set(float *factor, int32_t *groups_out, const di_dsv4_hparams *hp, double ratio, int32_t groups) {
    *groups_out = groups;
    *factor = dsv4_skew_factor(ratio, groups, hp->n_experts_used, hp->n_experts);
}

void dsv4_ep_attach_skew(const di_dsv4_ep *ep, float *factor, int32_t *groups_out, const di_dsv4_hparams *hp) {
    int32_t groups;
    double skew = ep ? dsv4_ep_skew(ep, &groups) : 0.0;
    if (skew >= 1) dsv4_route_skew_set(factor, groups_out, hp, skew, groups);
}
