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
 * Everything is per token, in f32, in the reference's order of operations. */
#include "model/deepseek_v4_internal.h"

#include <math.h>
#include <string.h>

static float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

/* flat (n, N*D) = X / rms(X) over all N*D values of a token. */
static void normalize_copies(di_dsv4_ctx *c, int64_t n) {
    const di_dsv4_hparams *hp = &c->m->hp;
    int64_t w = (int64_t)hp->hc_mult * hp->n_embd;
    for (int64_t r = 0; r < n; r++) dsv4_rmsnorm(c->X + r * w, NULL, c->flat + r * w, w, hp->rms_eps);
}

void dsv4_hc_pre(di_dsv4_ctx *c, const dsv4_linear *fn, const float *base, const float *scale, int64_t n,
                 di_threadpool *pool) {
    const di_dsv4_hparams *hp = &c->m->hp;
    const int32_t N = hp->hc_mult, D = hp->n_embd, M = (2 + N) * N;
    const float eps = hp->hc_eps;
    normalize_copies(c, n);
    dsv4_linear_apply(c->m->k, fn, c->flat, (int64_t)N * D, c->mix, M, n, c->mm_scratch, pool);
    for (int64_t r = 0; r < n; r++) {
        const float *mx = c->mix + r * M;
        const float *X = c->X + r * N * D;
        float *post = c->post + r * N, *comb = c->comb + r * N * N, *h = c->h + r * D;
        float pre[16]; /* hc_mult <= 16 (config check) */
        for (int32_t i = 0; i < N; i++) {
            pre[i] = sigmoidf(mx[i] * scale[0] + base[i]) + eps;
            post[i] = 2.0f * sigmoidf(mx[N + i] * scale[1] + base[N + i]);
        }
        for (int32_t i = 0; i < N; i++) { /* row softmax */
            float *row = comb + i * N;
            float mxv = -INFINITY;
            for (int32_t j = 0; j < N; j++) {
                row[j] = mx[2 * N + i * N + j] * scale[2] + base[2 * N + i * N + j];
                mxv = row[j] > mxv ? row[j] : mxv;
            }
            float sum = 0.0f;
            for (int32_t j = 0; j < N; j++) sum += row[j] = expf(row[j] - mxv);
            for (int32_t j = 0; j < N; j++) row[j] = row[j] / sum + eps;
        }
        for (int32_t it = 0; it < hp->hc_iters; it++) {
            if (it > 0) /* the first pass normalizes columns only */
                for (int32_t i = 0; i < N; i++) {
                    float s = 0.0f;
                    for (int32_t j = 0; j < N; j++) s += comb[i * N + j];
                    for (int32_t j = 0; j < N; j++) comb[i * N + j] /= s + eps;
                }
            for (int32_t j = 0; j < N; j++) {
                float s = 0.0f;
                for (int32_t i = 0; i < N; i++) s += comb[i * N + j];
                for (int32_t i = 0; i < N; i++) comb[i * N + j] /= s + eps;
            }
        }
        for (int32_t d = 0; d < D; d++) {
            float s = 0.0f;
            for (int32_t i = 0; i < N; i++) s += pre[i] * X[(int64_t)i * D + d];
            h[d] = s;
        }
    }
}

void dsv4_hc_post(di_dsv4_ctx *c, int64_t n) {
    const int32_t N = c->m->hp.hc_mult, D = c->m->hp.n_embd;
    for (int64_t r = 0; r < n; r++) {
        const float *X = c->X + r * N * D, *y = c->y + r * D;
        const float *post = c->post + r * N, *comb = c->comb + r * N * N;
        float *Xn = c->Xn + r * N * D;
        for (int32_t k = 0; k < N; k++)
            for (int32_t d = 0; d < D; d++) {
                float s = 0.0f;
                for (int32_t j = 0; j < N; j++) s += comb[j * N + k] * X[(int64_t)j * D + d];
                Xn[(int64_t)k * D + d] = post[k] * y[d] + s;
            }
    }
    float *t = c->X;
    c->X = c->Xn;
    c->Xn = t;
}

void dsv4_hc_head(di_dsv4_ctx *c, int64_t n, di_threadpool *pool) {
    const di_dsv4_model *m = c->m;
    const int32_t N = m->hp.hc_mult, D = m->hp.n_embd;
    normalize_copies(c, n);
    dsv4_linear_apply(m->k, &m->hc_head_fn, c->flat, (int64_t)N * D, c->mix, N, n, c->mm_scratch, pool);
    for (int64_t r = 0; r < n; r++) {
        const float *X = c->X + r * N * D;
        float pre[16];
        for (int32_t i = 0; i < N; i++)
            pre[i] = sigmoidf(c->mix[r * N + i] * m->hc_head_scale[0] + m->hc_head_base[i]) + m->hp.hc_eps;
        for (int32_t d = 0; d < D; d++) {
            float s = 0.0f;
            for (int32_t i = 0; i < N; i++) s += pre[i] * X[(int64_t)i * D + d];
            c->h[r * D + d] = s;
        }
    }
}
