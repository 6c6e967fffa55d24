/* Manifold-constrained hyper-connections (mHC): the residual stream is N
 * copies of the hidden vector, X (N, D) per token.
 *
 * Before each sublayer one linear map of the RMS-normalized, flattened
 * copies gives 2N + N*N numbers:
 *   pre_i  = sigmoid(m_i * s0 + b_i) + eps           collapse weights
 *   post_i = 2 sigmoid(m_{N+i} * s1 + b_{N+i})        expand weights
 *   comb   = softmax_rows(m_{2N..} * s2 + b_{2N..}) + eps, then made doubly
 *            stochastic: columns normalized, then (iters - 1) times rows
 *            then columns (Sinkhorn-Knopp), each with +eps in the divisor
 * the sublayer sees h = sum_i pre_i X_i, and afterwards
 *   X'_k = post_k * out + sum_j comb[j][k] X_j.
 * Everything is per token, in f32, in the reference's order of operations
 * (the backend's mhc_pre / mhc_post / mhc_head; the CPU's in kernels/cpu/
 * backend_cpu_dsv4_rows.c); the per-row passes are split over row ranges on the
 * pool (a row's numbers never depend on the split). */
#include "model/deepseek_v4_internal.h"

#include <math.h>
#include <string.h>

/* ---- mHC over a batch, shared by the family: the backend's stages
 * (be->ops->mhc_pre / mhc_post / mhc_head, kernels/backend.h) ---- */

void dsv4_mhc_post(const di_backend *be, float **X, float **Xn, const float *y, const float *post, const float *comb,
                   int32_t N, int32_t D, int64_t n, int round_bf16, di_threadpool *pool) {
    be->ops->mhc_post(be, *X, y, post, comb, N, D, n, round_bf16, *Xn, pool);
    float *t = *X;
    *X = *Xn;
    *Xn = t;
}

/* ---- V4's mHC over a batch ---------------------------------------------------- */

void dsv4_hc_pre(di_dsv4_ctx *c, const dsv4_linear *fn, const float *base, const float *scale, int64_t n,
                 di_threadpool *pool) {
    const di_dsv4_hparams *hp = &c->m->hp;
    const di_backend *be = &c->m->be;
    const int32_t N = hp->hc_mult, D = hp->n_embd, M = (2 + N) * N;
    /* flat (n, N*D) = X / rms(X) over all N*D values of a token */
    be->ops->rms_norm(be, c->X, NULL, c->flat, n, (int64_t)N * D, hp->rms_eps, 0, pool);
    dsv4_lin(be, fn, c->flat, (int64_t)N * D, c->mix, M, n, c->mm_scratch, pool);
    const di_mhc_pre_args a = {DI_MHC_V4, c->X, c->mix, base, scale, n, N, D, hp->hc_iters, hp->hc_eps, hp->rms_eps,
                               0, NULL, c->post, c->comb, c->h};
    be->ops->mhc_pre(be, &a, pool);
}

void dsv4_hc_post(di_dsv4_ctx *c, int64_t n, di_threadpool *pool) {
    dsv4_mhc_post(&c->m->be, &c->X, &c->Xn, c->y, c->post, c->comb, c->m->hp.hc_mult, c->m->hp.n_embd, n, 0, pool);
}

void dsv4_hc_head(di_dsv4_ctx *c, int64_t n, di_threadpool *pool) {
    const di_dsv4_model *m = c->m;
    const di_backend *be = &m->be;
    const int32_t N = m->hp.hc_mult, D = m->hp.n_embd;
    be->ops->rms_norm(be, c->X, NULL, c->flat, n, (int64_t)N * D, m->hp.rms_eps, 0, pool);
    dsv4_lin(be, &m->hc_head_fn, c->flat, (int64_t)N * D, c->mix, N, n, c->mm_scratch, pool);
    be->ops->mhc_head(be, c->X, c->mix, m->hc_head_base, m->hc_head_scale[0], m->hp.hc_eps, N, D, n, c->h, pool);
}
