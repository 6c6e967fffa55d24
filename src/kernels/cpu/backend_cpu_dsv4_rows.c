/* The CPU backend's row stages of the DeepSeek V4 / V4.1 forwards
 * (kernels/backend.h: mHC, RMSNorm, rotary, the experts' clamped SwiGLU):
 * the operations deepseek_v4_mhc.c, deepseek_v4_moe.c, deepseek_v41*.c ran
 * per token before the seam, moved unchanged (same f32
 * order of operations, the reference's), split over row ranges on the pool
 * (a row's numbers never depend on the split). */
#include "kernels/cpu/backend_cpu_dsv4.h"

#include "tensor/half.h"

#include <math.h>
#include <string.h>


static float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

static void round_bf16(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = di_bf16_to_f32(di_f32_to_bf16(x[i]));
}

/* The rows' ops take their arguments const; the pool's row runner takes
 * a plain pointer it hands back unchanged. */
typedef struct const_rows {
    void (*fn)(const void *user, int64_t row);
    const void *user;
} const_rows;

static void const_row(void *arg, int64_t row) {
    const const_rows *c = arg;
    c->fn(c->user, row);
}

static void run_rows(di_threadpool *pool, int64_t n, void (*fn)(const void *user, int64_t row), const void *user) {
    const_rows c = {fn, user};
    di_threadpool_rows(pool, n, const_row, &c);
}

/* ---- one token's mHC ------------------------------------------------------ */

static void mhc_weights(const float *mx, const float *base, const float *scale, int32_t N, int32_t iters, float eps,
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

static void mhc_collapse(const float *pre, const float *X, int32_t N, int32_t D, float *h) {
    for (int32_t d = 0; d < D; d++) {
        float sm = 0.0f;
        for (int32_t i = 0; i < N; i++) sm += pre[i] * X[(int64_t)i * D + d];
        h[d] = sm;
    }
}

static void mhc_expand(const float *X, const float *y, const float *post, const float *comb, int32_t N, int32_t D,
                     float *Xn) {
    for (int32_t k = 0; k < N; k++)
        for (int32_t d = 0; d < D; d++) {
            float sm = 0.0f;
            for (int32_t jj = 0; jj < N; jj++) sm += comb[jj * N + k] * X[(int64_t)jj * D + d];
            Xn[(int64_t)k * D + d] = post[k] * y[d] + sm;
        }
}

/* ---- the stages ----------------------------------------------------------- */

static void mhc_pre_row(const void *arg, int64_t r) {
    const di_mhc_pre_args *a = arg;
    const int32_t N = a->N, D = a->D, M = (2 + N) * N;
    const float *X = a->X + r * N * D;
    float *h = a->h + r * D;
    if (a->kind == DI_MHC_V4) {
        float pre[16]; /* hc_mult <= 16 (config check) */
        mhc_weights(a->mix + r * M, a->base, a->scale, N, a->iters, a->eps, pre, a->post + r * N, a->comb + r * N * N);
        mhc_collapse(pre, X, N, D, h);
        return;
    }
    float *pre = a->pre + r * N;
    mhc_collapse(pre, X, N, D, h);
    if (a->round_bf16) round_bf16(h, D);
    /* the mix projection already ran on the raw copies: scale by rsqrt(mean R^2 + eps) */
    float ss = 0.0f;
    for (int64_t i = 0; i < (int64_t)N * D; i++) ss += X[i] * X[i];
    float rs = 1.0f / sqrtf((float)((double)ss / ((double)N * D)) + a->rms_eps);
    float mx[(2 + 16) * 16];
    for (int32_t i = 0; i < M; i++) mx[i] = a->mix[r * M + i] * rs;
    mhc_weights(mx, a->base, a->scale, N, a->iters, a->eps, pre, a->post + r * N, a->comb + r * N * N);
}

void di_cpu_mhc_pre(const di_backend *be, const di_mhc_pre_args *a, di_threadpool *pool) {
    (void)be;
    run_rows(pool, a->n_rows, mhc_pre_row, a);
}

typedef struct post_args {
    const float *X, *y, *post, *comb;
    float *Xn;
    int32_t N, D;
    int round;
} post_args;

static void post_row(const void *arg, int64_t r) {
    const post_args *a = arg;
    const int64_t N = a->N, D = a->D;
    float *Xn = a->Xn + r * N * D;
    mhc_expand(a->X + r * N * D, a->y + r * D, a->post + r * N, a->comb + r * N * N, a->N, a->D, Xn);
    if (a->round) round_bf16(Xn, N * D);
}

void di_cpu_mhc_post(const di_backend *be, const float *X, const float *y, const float *post, const float *comb,
                     int32_t N, int32_t D, int64_t n_rows, int round_bf16_, float *Xn, di_threadpool *pool) {
    (void)be;
    post_args a = {X, y, post, comb, Xn, N, D, round_bf16_};
    run_rows(pool, n_rows, post_row, &a);
}

void di_cpu_mhc_head(const di_backend *be, const float *X, const float *mix, const float *base, float scale, float eps,
                     int32_t N, int32_t D, int64_t n_rows, float *h, di_threadpool *pool) {
    (void)be, (void)pool; /* a handful of rows at the head: inline */
    for (int64_t r = 0; r < n_rows; r++) {
        float pre[16];
        for (int32_t i = 0; i < N; i++) pre[i] = sigmoidf(mix[r * N + i] * scale + base[i]) + eps;
        mhc_collapse(pre, X + r * N * D, N, D, h + r * D);
    }
}

typedef struct norm_args {
    const float *x, *w;
    float *out;
    int64_t n;
    float eps;
    int round;
} norm_args;


static void norm_row(const void *arg, int64_t r) {
    const norm_args *a = arg;
    float *out = a->out + r * a->n;
    di_rmsnorm_f64(a->x + r * a->n, a->w, out, a->n, a->eps);
    if (a->round) round_bf16(out, a->n);
}

void di_cpu_rms_norm(const di_backend *be, const float *x, const float *w, float *out, int64_t n_rows, int64_t n,
                     float eps, int round_bf16_, di_threadpool *pool) {
    (void)be;
    norm_args a = {x, w, out, n, eps, round_bf16_};
    run_rows(pool, n_rows, norm_row, &a);
}


typedef struct rope_args {
    float *x;
    int32_t n_heads, dim, n_rot;
    const float *inv_freq;
    const int32_t *pos;
    float sign;
    int round;
} rope_args;

static void rope_row(const void *arg, int64_t r) {
    const rope_args *a = arg;
    const int64_t w = (int64_t)a->n_heads * a->dim;
    float *x = a->x + r * w;
    if (a->round) round_bf16(x, w);
    di_rope_tail(x, a->n_heads, a->dim, a->n_rot, a->inv_freq, a->pos[r], a->sign);
    if (a->round) round_bf16(x, w);
}

void di_cpu_rope_rows(const di_backend *be, float *x, int64_t n_rows, int32_t n_heads, int32_t dim, int32_t n_rot,
                      const float *inv_freq, const int32_t *pos, float sign, int round_bf16_, di_threadpool *pool) {
    (void)be;
    rope_args a = {x, n_heads, dim, n_rot, inv_freq, pos, sign, round_bf16_};
    run_rows(pool, n_rows, rope_row, &a);
}

typedef struct glu_args {
    float *gate, *up;
    int64_t n;
    float limit;
    int round;
    const float *row_w;
} glu_args;

static void glu_row(const void *arg, int64_t r) {
    const glu_args *a = arg;
    float *gate = a->gate + r * a->n, *up = a->up + r * a->n;
    const float limit = a->limit;
    if (a->round) {
        round_bf16(gate, a->n);
        round_bf16(up, a->n);
    }
    for (int64_t i = 0; i < a->n; i++) {
        float g = gate[i] < limit ? gate[i] : limit;
        float u = up[i] < -limit ? -limit : up[i] > limit ? limit : up[i];
        gate[i] = g / (1.0f + expf(-g)) * u;
    }
    if (a->row_w)
        for (int64_t i = 0; i < a->n; i++) gate[i] *= a->row_w[r];
}

void di_cpu_clamped_glu(const di_backend *be, float *gate, float *up, int64_t n_rows, int64_t n, float limit,
                        int round_bf16_, const float *row_w, di_threadpool *pool) {
    (void)be;
    glu_args a = {gate, up, n, limit, round_bf16_, row_w};
    /* elementwise: small batches (decode's experts) stay on the calling thread */
    run_rows(n_rows * n < (1 << 16) ? NULL : pool, n_rows, glu_row, &a);
}

static void pool_row(const void *arg, int64_t g) {
    const di_compress_pool_args *a = arg;
    const int32_t dim = a->dim, ns = a->n_slots[g];
    const float *K = a->kv + g * a->ld_slots * dim;
    float *G = a->gate + g * a->ld_slots * dim, *out = a->out + g * dim;
    for (int32_t d = 0; d < dim; d++) {
        float mx = -INFINITY;
        for (int32_t j = 0; j < ns; j++) mx = G[j * dim + d] > mx ? G[j * dim + d] : mx;
        float sum = 0.0f;
        for (int32_t j = 0; j < ns; j++) sum += G[j * dim + d] = expf(G[j * dim + d] - mx);
        float acc = 0.0f;
        for (int32_t j = 0; j < ns; j++) acc += K[j * dim + d] * (G[j * dim + d] / sum);
        out[d] = acc;
    }
    di_rmsnorm_f64(out, a->norm, out, dim, a->eps);
    di_rope_tail(out, 1, dim, a->n_rot, a->inv_freq, a->pos[g], 1.0f);
}

void di_cpu_compress_pool(const di_backend *be, const di_compress_pool_args *a, di_threadpool *pool) {
    (void)be;
    run_rows(pool, a->n_groups, pool_row, a);
}

/* ---- the router (deepseek_v4_moe.c's and deepseek_v41_moe.c's route) ---- */

static float sqrt_softplus(float x) {
    /* torch softplus: beta 1, threshold 20 (linear above it) */
    float sp = x > 20.0f ? x : log1pf(expf(x));
    return sqrtf(sp);
}

/* sel (K) <- the K largest of v (E), largest first, ties to the lower id */
static void topk_select(const float *v, int32_t E, int32_t K, int32_t *sel) {
    for (int32_t k = 0; k < K; k++) {
        int32_t best = -1;
        float bv = 0.0f;
        for (int32_t e = 0; e < E; e++) {
            int taken = 0;
            for (int32_t j = 0; j < k; j++) taken |= sel[j] == e;
            if (taken) continue;
            if (best < 0 || v[e] > bv) {
                best = e;
                bv = v[e];
            }
        }
        sel[k] = best;
    }
}

static void route_row(const void *arg, int64_t r) {
    const di_route_args *a = arg;
    const int32_t E = a->n_experts, K = a->n_used;
    float *lg = a->logits + r * E, *w = a->selw + r * K;
    int32_t *sel = a->sel + r * K;
    for (int32_t e = 0; e < E; e++) lg[e] = sqrt_softplus(lg[e]);
    if (a->tid2eid) {
        memcpy(sel, a->tid2eid + (int64_t)a->tokens[r] * K, (size_t)K * sizeof *sel);
    } else {
        float *v = a->vsel + r * E;
        if (a->draws) {
            if (v != a->draws + r * E) memcpy(v, a->draws + r * E, (size_t)E * sizeof(float));
        } else {
            const float *bias = a->bias_alt && a->tokens[r] >= a->alt_from ? a->bias_alt : a->bias;
            for (int32_t e = 0; e < E; e++) v[e] = lg[e] + bias[e];
        }
        topk_select(v, E, K, sel);
    }
    if (a->sort_sel)
        for (int32_t k = 1; k < K; k++) /* insertion sort by id */
            for (int32_t j = k; j > 0 && sel[j - 1] > sel[j]; j--) {
                int32_t t = sel[j];
                sel[j] = sel[j - 1];
                sel[j - 1] = t;
            }
    float sum = 0.0f;
    for (int32_t k = 0; k < K; k++) sum += w[k] = lg[sel[k]];
    for (int32_t k = 0; k < K; k++) w[k] = w[k] / (sum + 1e-20f) * a->scale;
}

void di_cpu_ds_route(const di_backend *be, const di_route_args *a, di_threadpool *pool) {
    (void)be, (void)pool; /* E x K selection per row: the caller's thread, as before */
    for (int64_t r = 0; r < a->n_rows; r++) route_row(a, r);
}

/* ---- the routed sum (deepseek_v4_moe_core.c's dsv4_moe_sum) ---- */

/* one step of a row's sum: dsv4_moe_mac's expression, as EP owners step */
static inline float moe_mac(float s, float y, float w) { return s + y * w; }

typedef struct sum_args {
    int32_t K, D;
    const float *ysel, *selw, *partial, *shared;
    const int32_t *plen;
    float *y;
} sum_args;

static void sum_row(const void *arg, int64_t r) {
    const sum_args *a = arg;
    const int32_t K = a->K, D = a->D;
    /* EP: the owner of the row's leading run of experts sent their sum */
    const int32_t k0 = a->plen ? a->plen[r] : 0;
    const float *part = a->partial ? a->partial + r * D : NULL;
    const float *ys = a->ysel + r * K * D, *w = a->selw ? a->selw + r * K : NULL;
    float *yr = a->y + r * D;
    const float *sh = a->shared + r * D;
    if (w)
        for (int32_t d = 0; d < D; d++) {
            float s = k0 ? part[d] : 0.0f;
            for (int32_t k = k0; k < K; k++) s = moe_mac(s, ys[(int64_t)k * D + d], w[k]);
            yr[d] = s + sh[d];
        }
    else
        for (int32_t d = 0; d < D; d++) {
            float s = k0 ? part[d] : 0.0f;
            for (int32_t k = k0; k < K; k++) s = s + ys[(int64_t)k * D + d];
            yr[d] = s + sh[d];
        }
}

void di_cpu_moe_sum(const di_backend *be, int64_t n_rows, int32_t K, int32_t D, const float *ysel, const float *selw,
                    const int32_t *plen, const float *partial, const float *shared, float *y, di_threadpool *pool) {
    (void)be, (void)pool; /* memory-bound and small: the caller's thread, as before */
    sum_args a = {K, D, ysel, selw, partial, shared, plen, y};
    for (int64_t r = 0; r < n_rows; r++) sum_row(&a, r);
}
