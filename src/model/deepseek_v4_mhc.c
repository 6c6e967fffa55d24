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
 * Everything is per token, in f32, in the reference's order of operations;
 * the per-token work is split over row ranges on the pool (a row's numbers
 * never depend on the split). */
#include "model/deepseek_v4_internal.h"

#include <math.h>
#include <string.h>

static float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

#define TASKS_PER_THREAD 4

/* The mHC passes' arguments beside the context. */
typedef struct mhc_args {
    di_dsv4_ctx *c;
    const float *base, *scale;
} mhc_args;

int dsv4_rows_tasks(int64_t n, di_threadpool *pool) {
    int64_t t = (int64_t)di_threadpool_n_threads(pool) * TASKS_PER_THREAD;
    return (int)(t < n ? t : n);
}

typedef struct rows_run {
    void (*fn)(void *user, int64_t row);
    void *user;
    int64_t n;
    int n_tasks;
} rows_run;

static void rows_task(void *arg, int64_t task, int thread) {
    (void)thread;
    const rows_run *j = arg;
    int64_t r0, r1;
    di_threadpool_split(j->n, j->n_tasks, (int)task, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) j->fn(j->user, r);
}

void dsv4_rows_run(di_threadpool *pool, int64_t n, void (*fn)(void *user, int64_t row), void *user) {
    rows_run j = {fn, user, n, dsv4_rows_tasks(n, pool)};
    di_threadpool_run(pool, j.n_tasks, rows_task, &j);
}

/* ---- one token's mHC, shared by the family (V4 here, V4.1's shifted mHC
 * in deepseek_v41.c): the same operations in the same order for both ---- */

void dsv4_mhc_weights(const float *mx, const float *base, const float *scale, int32_t N, int32_t iters, float eps,
                      float *pre, float *post, float *comb) {
    for (int32_t i = 0; i < N; i++) {
        pre[i] = sigmoidf(mx[i] * scale[0] + base[i]) + eps;
        post[i] = 2.0f * sigmoidf(mx[N + i] * scale[1] + base[N + i]);
    }
    for (int32_t i = 0; i < N; i++) { /* row softmax */
        float *row = comb + i * N;
        float mxv = -INFINITY;
        for (int32_t jj = 0; jj < N; jj++) {
            row[jj] = mx[2 * N + i * N + jj] * scale[2] + base[2 * N + i * N + jj];
            mxv = row[jj] > mxv ? row[jj] : mxv;
        }
        float sum = 0.0f;
        for (int32_t jj = 0; jj < N; jj++) sum += row[jj] = expf(row[jj] - mxv);
        for (int32_t jj = 0; jj < N; jj++) row[jj] = row[jj] / sum + eps;
    }
    for (int32_t it = 0; it < iters; it++) {
        if (it > 0) /* the first pass normalizes columns only */
            for (int32_t i = 0; i < N; i++) {
                float sm = 0.0f;
                for (int32_t jj = 0; jj < N; jj++) sm += comb[i * N + jj];
                for (int32_t jj = 0; jj < N; jj++) comb[i * N + jj] /= sm + eps;
            }
        for (int32_t jj = 0; jj < N; jj++) {
            float sm = 0.0f;
            for (int32_t i = 0; i < N; i++) sm += comb[i * N + jj];
            for (int32_t i = 0; i < N; i++) comb[i * N + jj] /= sm + eps;
        }
    }
}

void dsv4_mhc_collapse(const float *pre, const float *X, int32_t N, int32_t D, float *h) {
    for (int32_t d = 0; d < D; d++) {
        float sm = 0.0f;
        for (int32_t i = 0; i < N; i++) sm += pre[i] * X[(int64_t)i * D + d];
        h[d] = sm;
    }
}

void dsv4_mhc_expand(const float *X, const float *y, const float *post, const float *comb, int32_t N, int32_t D,
                     float *Xn) {
    for (int32_t k = 0; k < N; k++)
        for (int32_t d = 0; d < D; d++) {
            float sm = 0.0f;
            for (int32_t jj = 0; jj < N; jj++) sm += comb[jj * N + k] * X[(int64_t)jj * D + d];
            Xn[(int64_t)k * D + d] = post[k] * y[d] + sm;
        }
}

float dsv4_mhc_head_weight(float mix, float base, float scale, float eps) { return sigmoidf(mix * scale + base) + eps; }

/* ---- the post pass over a batch, shared by the family ---------------------- */

typedef struct post_args {
    const float *X, *y, *post, *comb; /* (n, N, D), (n, D), (n, N), (n, N, N) */
    float *Xn;                        /* (n, N, D) */
    int32_t N, D;
    void (*finish)(float *x, int64_t n);
} post_args;

static void post_row(void *arg, int64_t r) {
    const post_args *a = arg;
    const int64_t N = a->N, D = a->D;
    float *Xn = a->Xn + r * N * D;
    dsv4_mhc_expand(a->X + r * N * D, a->y + r * D, a->post + r * N, a->comb + r * N * N, a->N, a->D, Xn);
    if (a->finish) a->finish(Xn, N * D);
}

void dsv4_mhc_post(float **X, float **Xn, const float *y, const float *post, const float *comb, int32_t N, int32_t D,
                   int64_t n, void (*finish)(float *x, int64_t n), di_threadpool *pool) {
    post_args a = {*X, y, post, comb, *Xn, N, D, finish};
    dsv4_rows_run(pool, n, post_row, &a);
    float *t = *X;
    *X = *Xn;
    *Xn = t;
}

/* ---- V4's mHC over a batch ---------------------------------------------------- */

/* Row r of hc_pre after the projection: weights, Sinkhorn, collapse. */
static void hc_pre_row(void *arg, int64_t r) {
    const mhc_args *a = arg;
    di_dsv4_ctx *c = a->c;
    const di_dsv4_hparams *hp = &c->m->hp;
    const int32_t N = hp->hc_mult, D = hp->n_embd, M = (2 + N) * N;
    float pre[16]; /* hc_mult <= 16 (config check) */
    dsv4_mhc_weights(c->mix + r * M, a->base, a->scale, N, hp->hc_iters, hp->hc_eps, pre, c->post + r * N,
                     c->comb + r * N * N);
    dsv4_mhc_collapse(pre, c->X + r * N * D, N, D, c->h + r * D);
}

/* flat (n, N*D) = X / rms(X) over all N*D values of a token: row r. */
static void normalize_row(void *arg, int64_t r) {
    const di_dsv4_ctx *c = arg;
    const di_dsv4_hparams *hp = &c->m->hp;
    const int64_t w = (int64_t)hp->hc_mult * hp->n_embd;
    dsv4_rmsnorm(c->X + r * w, NULL, c->flat + r * w, w, hp->rms_eps);
}

void dsv4_hc_pre(di_dsv4_ctx *c, const dsv4_linear *fn, const float *base, const float *scale, int64_t n,
                 di_threadpool *pool) {
    const di_dsv4_hparams *hp = &c->m->hp;
    const int32_t N = hp->hc_mult, D = hp->n_embd, M = (2 + N) * N;
    dsv4_rows_run(pool, n, normalize_row, c);
    dsv4_lin(&c->m->be, fn, c->flat, (int64_t)N * D, c->mix, M, n, c->mm_scratch, pool);
    mhc_args a = {c, base, scale};
    dsv4_rows_run(pool, n, hc_pre_row, &a);
}

void dsv4_hc_post(di_dsv4_ctx *c, int64_t n, di_threadpool *pool) {
    dsv4_mhc_post(&c->X, &c->Xn, c->y, c->post, c->comb, c->m->hp.hc_mult, c->m->hp.n_embd, n, NULL, pool);
}

void dsv4_hc_head(di_dsv4_ctx *c, int64_t n, di_threadpool *pool) {
    const di_dsv4_model *m = c->m;
    const int32_t N = m->hp.hc_mult, D = m->hp.n_embd;
    dsv4_rows_run(pool, n, normalize_row, c);
    dsv4_lin(&m->be, &m->hc_head_fn, c->flat, (int64_t)N * D, c->mix, N, n, c->mm_scratch, pool);
    for (int64_t r = 0; r < n; r++) {
        float pre[16];
        for (int32_t i = 0; i < N; i++)
            pre[i] = dsv4_mhc_head_weight(c->mix[r * N + i], m->hc_head_base[i], m->hc_head_scale[0], m->hp.hc_eps);
        dsv4_mhc_collapse(pre, c->X + r * N * D, N, D, c->h + r * D);
    }
}
