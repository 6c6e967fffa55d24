/* Routed-expert FFN (llama_moe.h). Plan of one call:
 *   1. router logits for every row (one matmul), then per row a softmax,
 *      the top n_used and their weights;
 *   2. per expert (ascending id), the rows that chose it gathered into a
 *      block, gate and up in one dispatch, SwiGLU, down;
 *   3. every row adds w_j * y_j into its accumulator as its experts come,
 *      so the sum runs in ascending expert id for every row.
 * The result is copied to out last, so out may alias h. Every step is an
 * op of the backend (kernels/backend.h: linear, moe_route, moe_expert);
 * the expert loop itself runs here, on the host. */
#include "model/llama_moe.h"

#include "base/alloc.h"
#include "base/mapped_file.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct di_llama_moe_scratch {
    int64_t cap_rows, cap_mm, n_embd, n_ff, n_expert, n_used;
    float *logits;    /* (rows, n_expert) router output, then probabilities */
    int32_t *sel;     /* (rows, n_used) chosen expert ids */
    float *sel_w;     /* (rows, n_used) their weights */
    int32_t *rows;    /* (rows) the rows of the expert being run */
    float *w_rows;    /* (rows) their weights for it */
    float *xin;       /* (rows, n_embd) gathered input rows */
    float *gate, *up; /* (rows, n_ff) */
    float *y;         /* (rows, n_embd) one expert's output */
    float *acc;       /* (rows, n_embd) the weighted sum */
    float *mm;        /* di_matmul scratch */
};

void di_llama_moe_scratch_free(di_llama_moe_scratch *s) {
    if (!s) return;
    free(s->logits);
    free(s->sel);
    free(s->sel_w);
    free(s->rows);
    free(s->w_rows);
    free(s->xin);
    free(s->gate);
    free(s->up);
    free(s->y);
    free(s->acc);
    free(s->mm);
    free(s);
}

static di_status bind_mat(const di_gguf_tensor *t, const di_backend *be, int64_t n_expert, di_llama_moe_mat *m,
                          di_error *err) {
    const di_dtype_traits *tr = di_dtype_traits_of(t->dtype);
    if (!tr || !be->ops->supports(be, t->dtype)) {
        char name[96];
        be->ops->describe(be, name, sizeof name);
        return di_error_set(err, DI_ERR_UNSUPPORTED, "tensor '%s': dtype %s not supported by the %s backend", t->name,
                            tr ? tr->name : "?", name);
    }
    uint64_t rb, per, total;
    if (di_dtype_row_bytes(t->dtype, t->ne[0], &rb) != DI_OK || di_mul_overflow_u64(rb, (uint64_t)t->ne[1], &per) ||
        di_mul_overflow_u64(per, (uint64_t)n_expert, &total) || total > t->n_bytes)
        return di_error_set(err, DI_ERR_FORMAT, "tensor '%s': %lld experts of %lld x %lld %s do not fit its %llu bytes",
                            t->name, (long long)n_expert, (long long)t->ne[1], (long long)t->ne[0], tr->name,
                            (unsigned long long)t->n_bytes);
    if ((uintptr_t)t->data % 4 != 0 || (n_expert > 1 && per % 4 != 0))
        return di_error_set(err, DI_ERR_FORMAT, "tensor '%s': expert data not 4-byte aligned", t->name);
    *m = (di_llama_moe_mat){t->dtype, t->data, rb, per, t->ne[0], t->ne[1], NULL, 0};
    return DI_OK;
}

di_status di_llama_moe_bind(const di_llama_hparams *hp, const di_llama_layer_tensors *t, const di_backend *be,
                            di_llama_moe *out, di_error *err) {
    memset(out, 0, sizeof *out);
    di_status s;
    int64_t X = hp->n_expert;
    if ((s = bind_mat(t->ffn_gate_inp, be, 1, &out->router, err)) ||
        (s = bind_mat(t->ffn_gate_exps, be, X, &out->gate, err)) || (s = bind_mat(t->ffn_up_exps, be, X, &out->up, err)) ||
        (s = bind_mat(t->ffn_down_exps, be, X, &out->down, err)))
        return s;
    out->n_expert = (int32_t)hp->n_expert;
    out->n_used = (int32_t)hp->n_expert_used;
    out->norm = hp->expert_weights_norm;
    return DI_OK;
}

static di_backend_weight expert_weight(const di_llama_moe_mat *m, int32_t e);

static di_status upload_mat(di_llama_moe_mat *m, int32_t n, const di_backend *be, di_error *err) {
    if (!(m->packed = di_calloc((size_t)n, sizeof *m->packed)))
        return di_error_set(err, DI_ERR_NOMEM, "experts: out of memory");
    for (int32_t e = 0; e < n; e++) {
        di_backend_weight w = expert_weight(m, e), up;
        di_status s = be->ops->upload_weight(be, &w, &up, err);
        if (s != DI_OK) return s;
        m->packed[e] = up.packed;
        m->n_uploaded++;
        if (up.rows_unread) di_memory_release_hint(w.data, (size_t)(w.row_bytes * (uint64_t)w.n_out));
    }
    return DI_OK;
}

di_status di_llama_moe_upload(di_llama_moe *moe, const di_backend *be, di_error *err) {
    di_status s;
    if ((s = upload_mat(&moe->router, 1, be, err)) || (s = upload_mat(&moe->gate, moe->n_expert, be, err)) ||
        (s = upload_mat(&moe->up, moe->n_expert, be, err)) || (s = upload_mat(&moe->down, moe->n_expert, be, err)))
        return s;
    return DI_OK;
}

static void release_mat(di_llama_moe_mat *m, const di_backend *be) {
    for (int32_t e = 0; m->packed && e < m->n_uploaded; e++) {
        di_backend_weight w = expert_weight(m, e);
        be->ops->release_weight(be, &w);
    }
    free((void *)m->packed);
    m->packed = NULL;
    m->n_uploaded = 0;
}

void di_llama_moe_release(di_llama_moe *moe, const di_backend *be) {
    release_mat(&moe->router, be);
    release_mat(&moe->gate, be);
    release_mat(&moe->up, be);
    release_mat(&moe->down, be);
}

static int grow(void *pp, int64_t n, size_t size) {
    void **p = pp;
    void *q = di_malloc_array((size_t)(n > 0 ? n : 1), size);
    if (!q) return 0;
    free(*p);
    *p = q;
    return 1;
}

static di_status reserve(const di_llama_moe *moe, const di_backend *be, int64_t n_rows, int n_threads,
                         di_llama_moe_scratch **sp, di_error *err) {
    di_llama_moe_scratch *s = *sp;
    if (!s) {
        if (!(s = di_calloc(1, sizeof *s))) return di_error_set(err, DI_ERR_NOMEM, "experts: out of memory");
        *sp = s;
    }
    const int64_t E = moe->gate.n_in, F = moe->gate.n_out, X = moe->n_expert, K = moe->n_used;
    if (n_rows > s->cap_rows || E != s->n_embd || F > s->n_ff || X > s->n_expert || K > s->n_used) {
        int64_t n = n_rows > s->cap_rows ? n_rows : s->cap_rows;
        if (F > s->n_ff) s->n_ff = F;
        if (X > s->n_expert) s->n_expert = X;
        if (K > s->n_used) s->n_used = K;
        s->n_embd = E;
        s->cap_rows = 0;
        if (!grow(&s->logits, n * s->n_expert, sizeof(float)) || !grow(&s->sel, n * s->n_used, sizeof(int32_t)) ||
            !grow(&s->sel_w, n * s->n_used, sizeof(float)) || !grow(&s->rows, n, sizeof(int32_t)) ||
            !grow(&s->w_rows, n, sizeof(float)) || !grow(&s->xin, n * E, sizeof(float)) ||
            !grow(&s->gate, n * s->n_ff, sizeof(float)) || !grow(&s->up, n * s->n_ff, sizeof(float)) ||
            !grow(&s->y, n * E, sizeof(float)) || !grow(&s->acc, n * E, sizeof(float)))
            return di_error_set(err, DI_ERR_NOMEM, "experts: out of memory for %lld rows", (long long)n);
        s->cap_rows = n;
        s->cap_mm = 0;
    }
    int64_t widest = E > s->n_ff ? E : s->n_ff;
    int64_t mm = be->ops->linear_scratch_floats(be, s->cap_rows, widest, n_threads);
    if (mm > s->cap_mm) {
        if (!grow(&s->mm, mm, sizeof(float))) {
            s->cap_mm = 0;
            return di_error_set(err, DI_ERR_NOMEM, "experts: out of memory for matmul scratch");
        }
        s->cap_mm = mm;
    }
    return DI_OK;
}

static di_matmul_args expert_args(const di_llama_moe_mat *m, int32_t e, const float *x, int64_t ldx, float *y,
                                  int64_t ldy, int64_t n_rows) {
    return (di_matmul_args){m->dtype, m->data + (uint64_t)e * m->expert_bytes, m->row_bytes, x, ldx, y, ldy, n_rows,
                            m->n_in, m->n_out, m->packed ? m->packed[e] : NULL};
}

static di_backend_weight expert_weight(const di_llama_moe_mat *m, int32_t e) {
    return (di_backend_weight){m->dtype,   m->data + (uint64_t)e * m->expert_bytes, m->row_bytes, m->n_in, m->n_out,
                               m->packed ? m->packed[e] : NULL, 0};
}

di_status di_llama_moe_forward(const di_llama_moe *moe, const di_backend *be, const float *h, int64_t ldh,
                               int64_t n_rows, float *out, int64_t ld_out, di_llama_moe_scratch **scratch,
                               di_threadpool *pool, di_error *err) {
    if (n_rows <= 0) return DI_OK;
    int n_threads = di_threadpool_n_threads(pool);
    di_status st = reserve(moe, be, n_rows, n_threads, scratch, err);
    if (st) return st;
    di_llama_moe_scratch *s = *scratch;
    const di_backend_ops *op = be->ops;
    const int64_t E = moe->gate.n_in, F = moe->gate.n_out, X = moe->n_expert, K = moe->n_used;

    di_matmul_args ra = expert_args(&moe->router, 0, h, ldh, s->logits, X, n_rows);
    op->linear(be, &ra, 1, s->mm, pool);
    /* softmax, top K, weights (lowest id among ties) */
    op->moe_route(be, s->logits, n_rows, X, K, moe->norm, s->sel, s->sel_w);
    op->zero(be, s->acc, (size_t)(n_rows * E) * sizeof(float));

    for (int32_t e = 0; e < X; e++) {
        int64_t n = 0;
        for (int64_t r = 0; r < n_rows; r++)
            for (int64_t j = 0; j < K; j++)
                if (s->sel[r * K + j] == e) {
                    s->rows[n] = (int32_t)r;
                    s->w_rows[n] = s->sel_w[r * K + j];
                    n++;
                }
        if (n == 0) continue;
        const di_moe_expert_args ea = {
            .x = h, .ldx = ldh, .n_embd = E, .n_ff = F, .rows = s->rows, .w = s->w_rows, .n = n,
            .gate = expert_weight(&moe->gate, e), .up = expert_weight(&moe->up, e), .down = expert_weight(&moe->down, e),
            .xin = s->xin, .gate_buf = s->gate, .up_buf = s->up, .y = s->y, .acc = s->acc,
        };
        op->moe_expert(be, &ea, s->mm, pool);
    }
    for (int64_t r = 0; r < n_rows; r++) op->copy(be, out + r * ld_out, s->acc + r * E, (size_t)E * sizeof(float));
    return DI_OK;
}
