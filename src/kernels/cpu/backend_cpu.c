/* The CPU backend (kernels/backend.h): every op is the existing CPU kernels
 * in the order the llama forward ran them before the seam, so the bits and
 * the pool dispatches are the same. The context is the kernel table; its
 * "ggml" numerics (ggml_compat.h) switch RMSNorm, RoPE, SiLU and attention
 * here, where the forward used to test k->ggml itself.
 *
 * The row stages run as contiguous row ranges on the pool (one dispatch per
 * stage): each row's result depends on that row alone, whichever thread
 * computes it, and the fused steps of a stage touch a row once. */
#include "kernels/backend.h"

#include "kernels/cpu/backend_cpu_dsv4.h"
#include "kernels/cpu/ggml_compat.h"
#include "kernels/cpu/pack_x16.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const di_cpu_kernels *kernels_of(const di_backend *be) { return be->ctx; }

/* ---- per-row helpers, in the numerics of the table ----------------------- */

/* h = rmsnorm(x) * w over n elements (one row) */
static void rmsnorm_n(const di_cpu_kernels *k, const float *x, const float *w, float *h, int64_t n, float eps) {
    if (k->ggml) di_ggml_rmsnorm(x, w, h, n, eps);
    else di_rmsnorm(x, w, h, 1, n, eps);
}

/* q/k head norm: every head of x (n_heads, head_dim) normalized alone */
static void head_norm(const di_cpu_kernels *k, float *x, int32_t n_heads, int64_t hd, const float *w, float eps) {
    for (int32_t h = 0; h < n_heads; h++) rmsnorm_n(k, x + h * hd, w, x + h * hd, hd, eps);
}

static void add_row(float *x, const float *d, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] += d[i];
}

static void dequant_row(const di_cpu_kernels *k, di_dtype dtype, const void *src, float *dst, int64_t n) {
    if (k->dequant[dtype]) k->dequant[dtype](src, dst, n);
    else di_dtype_traits_of(dtype)->to_float(src, dst, n);
}

static void glu_row(const di_cpu_kernels *k, di_glu_kind kind, float *gate, const float *up, int64_t n) {
    if (kind == DI_GLU_GEGLU) di_geglu(gate, up, n);
    else if (k->ggml) di_ggml_swiglu(gate, up, n);
    else di_swiglu(gate, up, n);
}

/* ---- row stages on the pool --------------------------------------------- */

typedef enum stage { STAGE_EMBED_NORM, STAGE_ROPE_STORE, STAGE_ADD_NORM, STAGE_GLU } stage;

typedef struct rows_job {
    stage st;
    const di_cpu_kernels *k;
    int n_tasks;
    int64_t n_rows;
    const di_embed_norm_args *en;
    const di_rope_store_args *rs;
    /* add_norm / glu */
    float *x, *h;
    const float *post, *norm, *up;
    int64_t n;
    float eps;
    di_glu_kind glu;
} rows_job;

static void embed_norm_row(const di_cpu_kernels *k, const di_embed_norm_args *a, int64_t r) {
    const int64_t E = a->n_embd;
    float *x = a->x + r * E, *h = a->h + r * E;
    const di_backend_weight *e = a->emb;
    dequant_row(k, e->dtype, (const uint8_t *)e->data + (uint64_t)a->tokens[r] * e->row_bytes, x, E);
    if (a->scale != 0.0f)
        for (int64_t i = 0; i < E; i++) x[i] *= a->scale;
    rmsnorm_n(k, x, a->norm, h, E, a->eps);
    if (!k->ggml)
        for (int t = 0; t < 2 && a->rope[t]; t++)
            di_rope_angles(a->pos[r], a->n_rot, a->rope[t]->inv_freq, a->cs[t] + r * a->n_rot);
}

static void rope_store_row(const di_cpu_kernels *k, const di_rope_store_args *a, int64_t r) {
    const int64_t hd = a->head_dim, q_dim = (int64_t)a->n_heads * hd, kv_dim = (int64_t)a->n_heads_kv * hd;
    float *q = a->q + r * q_dim, *kx = a->k + r * kv_dim, *vx = a->v + r * kv_dim;
    if (a->bq) {
        add_row(q, a->bq, q_dim);
        add_row(kx, a->bk, kv_dim);
        add_row(vx, a->bv, kv_dim);
    }
    if (a->q_norm) {
        head_norm(k, q, a->n_heads, hd, a->q_norm, a->eps);
        head_norm(k, kx, a->n_heads_kv, hd, a->k_norm, a->eps);
    }
    const int32_t pos = a->pos[r];
    if (k->ggml) {
        const di_rope_table *t = a->rope;
        di_ggml_rope(q, pos, a->n_heads, a->head_dim, a->n_rot, t->theta_scale, t->freq_scale, t->factors, a->neox);
        di_ggml_rope(kx, pos, a->n_heads_kv, a->head_dim, a->n_rot, t->theta_scale, t->freq_scale, t->factors,
                     a->neox);
    } else { /* di_rope's bits, with the angles of embed_norm */
        const float *cs = a->cs + r * a->n_rot;
        di_rope_apply(q, a->n_heads, a->head_dim, a->n_rot, cs, a->neox);
        di_rope_apply(kx, a->n_heads_kv, a->head_dim, a->n_rot, cs, a->neox);
    }
    int32_t blk = a->row_blocks[r][pos / a->block_size];
    int64_t slot = ((int64_t)blk * a->block_size + pos % a->block_size) * kv_dim;
    if (a->kv_dtype == DI_DTYPE_F16) {
        k->f32_to_f16(kx, (uint16_t *)a->k_cache + slot, kv_dim);
        k->f32_to_f16(vx, (uint16_t *)a->v_cache + slot, kv_dim);
    } else {
        memcpy((float *)a->k_cache + slot, kx, (size_t)kv_dim * sizeof(float));
        memcpy((float *)a->v_cache + slot, vx, (size_t)kv_dim * sizeof(float));
    }
}

static void rows_task(void *arg, int64_t task, int thread) {
    (void)thread;
    const rows_job *j = arg;
    const di_cpu_kernels *k = j->k;
    int64_t r0, r1;
    di_threadpool_split(j->n_rows, j->n_tasks, (int)task, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        switch (j->st) {
        case STAGE_EMBED_NORM: embed_norm_row(k, j->en, r); break;
        case STAGE_ROPE_STORE: rope_store_row(k, j->rs, r); break;
        case STAGE_ADD_NORM: {
            float *x = j->x + r * j->n, *h = j->h + r * j->n;
            if (j->post) rmsnorm_n(k, h, j->post, h, j->n, j->eps);
            add_row(x, h, j->n);
            if (j->norm) rmsnorm_n(k, x, j->norm, h, j->n, j->eps);
            break;
        }
        case STAGE_GLU: glu_row(k, j->glu, j->x + r * j->n, j->up + r * j->n, j->n); break;
        }
    }
}

/* Rows per task below which a stage is not worth a dispatch. */
#define ROWS_PER_TASK_MIN 4

static void run_rows(rows_job *j, di_threadpool *pool) {
    int64_t n_tasks = di_threadpool_n_threads(pool);
    if (n_tasks > j->n_rows / ROWS_PER_TASK_MIN) n_tasks = j->n_rows / ROWS_PER_TASK_MIN;
    if (n_tasks < 1) n_tasks = 1;
    j->n_tasks = (int)n_tasks;
    if (n_tasks == 1) rows_task(j, 0, 0);
    else di_threadpool_run(pool, n_tasks, rows_task, j);
}

/* ---- the ops -------------------------------------------------------------- */

static void cpu_release(di_backend *be) { (void)be; }

static void cpu_describe(const di_backend *be, char *buf, size_t n) {
    snprintf(buf, n, "cpu (kernels %s)", kernels_of(be)->name);
}

static di_status cpu_check(const di_backend *be, di_error *err) {
    (void)be;
    (void)err;
    return DI_OK;
}

static int cpu_supports(const di_backend *be, di_dtype dtype) { return di_cpu_kernels_supports(kernels_of(be), dtype); }

static void cpu_dequant(const di_backend *be, di_dtype dtype, const void *src, float *dst, int64_t n) {
    dequant_row(kernels_of(be), dtype, src, dst, n);
}

static int64_t cpu_linear_scratch(const di_backend *be, int64_t n_rows, int64_t n_in, int n_threads) {
    (void)be;
    return di_matmul_scratch_floats(n_rows, n_in, n_threads);
}

static void cpu_linear(const di_backend *be, const di_matmul_args *parts, int n_parts, float *scratch,
                       di_threadpool *pool) {
    if (n_parts == 1) di_matmul(kernels_of(be), parts, scratch, pool);
    else di_matmul_multi(kernels_of(be), parts, n_parts, scratch, pool);
}

static void cpu_embed_norm(const di_backend *be, const di_embed_norm_args *a, di_threadpool *pool) {
    rows_job j = {.st = STAGE_EMBED_NORM, .k = kernels_of(be), .n_rows = a->n_rows, .en = a};
    run_rows(&j, pool);
}

static void cpu_rope_store(const di_backend *be, const di_rope_store_args *a, di_threadpool *pool) {
    rows_job j = {.st = STAGE_ROPE_STORE, .k = kernels_of(be), .n_rows = a->n_rows, .rs = a};
    run_rows(&j, pool);
}

static void cpu_add_norm(const di_backend *be, float *x, float *h, const float *post, const float *norm,
                         int64_t n_rows, int64_t n, float eps, di_threadpool *pool) {
    rows_job j = {.st = STAGE_ADD_NORM, .k = kernels_of(be), .n_rows = n_rows, .x = x, .h = h, .post = post,
                  .norm = norm, .n = n, .eps = eps};
    run_rows(&j, pool);
}

static void cpu_glu(const di_backend *be, di_glu_kind kind, float *gate, const float *up, int64_t n_rows, int64_t n,
                    di_threadpool *pool) {
    rows_job j = {.st = STAGE_GLU, .k = kernels_of(be), .n_rows = n_rows, .x = gate, .up = up, .n = n, .glu = kind};
    run_rows(&j, pool);
}

static void cpu_gather_norm(const di_backend *be, const float *x, int64_t n_rows, int64_t n, const uint8_t *want,
                            const float *norm, float eps, float *out) {
    int64_t j = 0;
    for (int64_t i = 0; i < n_rows; i++)
        if (want[i]) memcpy(out + j++ * n, x + i * n, (size_t)n * sizeof(float));
    for (int64_t r = 0; r < j; r++) rmsnorm_n(kernels_of(be), out + r * n, norm, out + r * n, n, eps);
}

static void cpu_softcap(const di_backend *be, float *x, int64_t n, float cap) {
    (void)be;
    for (int64_t i = 0; i < n; i++) x[i] = cap * tanhf(x[i] / cap);
}

static int64_t cpu_attention_scratch(const di_backend *be, int32_t n_heads, int32_t n_kv_heads, int32_t head_dim,
                                     int32_t block_size, int32_t n_pos) {
    int64_t s = di_attention_scratch_floats(n_heads, head_dim, block_size);
    if (kernels_of(be)->ggml) {
        /* n_pos grows with the context: the ggml attention scores whole rows */
        int64_t g = di_attention_ggml_scratch_floats(n_heads, n_kv_heads, head_dim, n_pos);
        if (g > s) s = g;
    }
    return s;
}

static void cpu_attention(const di_backend *be, const di_attn_args *a, int32_t n_pos, float *scratch,
                          di_threadpool *pool) {
    const di_cpu_kernels *k = kernels_of(be);
    if (k->ggml) di_attention_ggml(k, a, n_pos, scratch, pool);
    else di_attention(k, a, scratch, pool);
}

/* Softmax, then repeated arg-max, lowest id on ties (llama.cpp's argsort
 * order for equal values is unspecified; ties do not occur with real logits). */
static void cpu_moe_route(const di_backend *be, float *logits, int64_t n_rows, int64_t X, int64_t K, bool norm,
                          int32_t *sel_all, float *sel_w_all) {
    (void)be;
    for (int64_t r = 0; r < n_rows; r++) {
        float *p = logits + r * X, *sel_w = sel_w_all + r * K;
        int32_t *sel = sel_all + r * K;
        di_softmax(p, X);
        float sum = 0.0f;
        for (int64_t j = 0; j < K; j++) {
            int64_t best = -1;
            for (int64_t e = 0; e < X; e++) {
                bool taken = false;
                for (int64_t i = 0; i < j && !taken; i++) taken = sel[i] == e;
                if (!taken && (best < 0 || p[e] > p[best])) best = e;
            }
            sel[j] = (int32_t)best;
            sel_w[j] = p[best];
            sum += p[best];
        }
        if (norm && sum > 0.0f)
            for (int64_t j = 0; j < K; j++) sel_w[j] /= sum;
    }
}

static di_matmul_args weight_args(const di_backend_weight *w, const float *x, int64_t ldx, float *y, int64_t ldy,
                                  int64_t n_rows) {
    return (di_matmul_args){w->dtype, w->data, w->row_bytes, x, ldx, y, ldy, n_rows, w->n_in, w->n_out, w->packed};
}

static void cpu_moe_expert(const di_backend *be, const di_moe_expert_args *a, float *scratch, di_threadpool *pool) {
    const di_cpu_kernels *k = kernels_of(be);
    const int64_t E = a->n_embd, F = a->n_ff, n = a->n;
    for (int64_t i = 0; i < n; i++) memcpy(a->xin + i * E, a->x + a->rows[i] * a->ldx, (size_t)E * sizeof(float));
    const di_matmul_args gu[2] = {weight_args(&a->gate, a->xin, E, a->gate_buf, F, n),
                                  weight_args(&a->up, a->xin, E, a->up_buf, F, n)};
    di_matmul_multi(k, gu, 2, scratch, pool);
    for (int64_t i = 0; i < n; i++) glu_row(k, DI_GLU_SWIGLU, a->gate_buf + i * F, a->up_buf + i * F, F);
    di_matmul_args da = weight_args(&a->down, a->gate_buf, F, a->y, E, n);
    di_matmul(k, &da, scratch, pool);
    for (int64_t i = 0; i < n; i++) {
        float *acc = a->acc + (int64_t)a->rows[i] * E;
        const float *y = a->y + i * E, w = a->w[i];
        for (int64_t d = 0; d < E; d++) acc[d] += w * y[d];
    }
}

static void cpu_copy(const di_backend *be, void *dst, const void *src, size_t bytes) {
    (void)be;
    memcpy(dst, src, bytes);
}

static void cpu_zero(const di_backend *be, void *dst, size_t bytes) {
    (void)be;
    memset(dst, 0, bytes);
}

/* ---- buffers: host memory ------------------------------------------------ */

/* calloc, so a big buffer (the KV cache) costs no page until written, as
 * before the buffer ops; the aligned pointer sits inside the block and the
 * block's own pointer just below it, for buf_free. */
static void *cpu_buf_alloc(const di_backend *be, size_t bytes) {
    (void)be;
    const size_t extra = sizeof(void *) + DI_BACKEND_ALIGN - 1;
    if (bytes > SIZE_MAX - extra) return NULL;
    uint8_t *base = calloc(1, bytes + extra);
    if (!base) return NULL; /* the caller reports DI_ERR_NOMEM */
    uint8_t *p = base + sizeof(void *);
    p += (DI_BACKEND_ALIGN - (uintptr_t)p % DI_BACKEND_ALIGN) % DI_BACKEND_ALIGN;
    memcpy(p - sizeof base, &base, sizeof base);
    return p;
}

static void cpu_buf_free(const di_backend *be, void *buf) {
    (void)be;
    if (!buf) return;
    void *base;
    memcpy(&base, (uint8_t *)buf - sizeof base, sizeof base);
    free(base);
}

static void cpu_upload(const di_backend *be, void *dst, const void *host_src, size_t bytes) {
    (void)be;
    if (bytes) memcpy(dst, host_src, bytes);
}

static void cpu_download(const di_backend *be, void *host_dst, const void *src, size_t bytes) {
    (void)be;
    if (bytes) memcpy(host_dst, src, bytes);
}

/* The CPU kernels read the weights where they were loaded (mmap or the
 * loader's buffers). Where the table has an int8 gemm over the x16 layout
 * for the dtype (pack_x16.h), a packed copy is made once here and the
 * rows stay as they are for everything else (embedding lookups, the
 * exact tables). */
static di_status cpu_upload_weight(const di_backend *be, const di_backend_weight *w, di_backend_weight *out,
                                   di_error *err) {
    const di_cpu_kernels *k = kernels_of(be);
    *out = *w;
    out->packed = NULL;
    out->rows_unread = 0;
    if (!k->quantize_q8 || !k->gemm_q8_x16[w->dtype] || !di_x16_packable(w->dtype, w->n_in)) return DI_OK;
    uint64_t bytes = di_x16_packed_bytes(w->dtype, w->n_out, w->n_in);
    void *p = bytes ? cpu_buf_alloc(be, (size_t)bytes) : NULL;
    if (!p)
        return di_error_set(err, DI_ERR_NOMEM, "packing a %lld x %lld weight: out of memory", (long long)w->n_out,
                            (long long)w->n_in);
    di_x16_pack(w->dtype, w->data, w->row_bytes, w->n_out, w->n_in, p);
    out->packed = p;
    out->rows_unread = !(k->x16_reads_rows && k->gemm_q8[w->dtype]); /* the AMX tiles read rows */
    return DI_OK;
}

static void cpu_release_weight(const di_backend *be, di_backend_weight *w) {
    cpu_buf_free(be, (void *)(uintptr_t)w->packed);
    w->packed = NULL;
    w->data = NULL; /* the rows stay the loader's */
}

static const di_backend_ops CPU_OPS = {
    .name = "cpu",
    .release = cpu_release,
    .describe = cpu_describe,
    .check = cpu_check,
    .supports = cpu_supports,
    .dequant = cpu_dequant,
    .linear_scratch_floats = cpu_linear_scratch,
    .linear = cpu_linear,
    .embed_norm = cpu_embed_norm,
    .rope_store = cpu_rope_store,
    .add_norm = cpu_add_norm,
    .glu = cpu_glu,
    .gather_norm = cpu_gather_norm,
    .softcap = cpu_softcap,
    .attention_scratch_floats = cpu_attention_scratch,
    .attention = cpu_attention,
    .moe_route = cpu_moe_route,
    .moe_expert = cpu_moe_expert,
    /* ---- DeepSeek V4 / V4.1 stages (backend_cpu_dsv4.c, backend_cpu_dsv4_rows.c) ---- */
    .scaled_linear_scratch_floats = di_cpu_scaled_linear_scratch,
    .scaled_linear = di_cpu_scaled_linear,
    .scaled_rows = di_cpu_scaled_rows,
    .scaled_dot_rows = di_cpu_scaled_dot_rows,
    .sparse_attention_scratch_floats = di_cpu_sparse_attention_scratch,
    .sparse_attention = di_cpu_sparse_attention,
    .index_scores = di_cpu_index_scores,
    .mhc_pre = di_cpu_mhc_pre, /* backend_cpu_dsv4_rows.c */
    .mhc_post = di_cpu_mhc_post,
    .mhc_head = di_cpu_mhc_head,
    .rms_norm = di_cpu_rms_norm,
    .rope_rows = di_cpu_rope_rows,
    .clamped_glu = di_cpu_clamped_glu,
    .compress_pool = di_cpu_compress_pool,
    .ds_route = di_cpu_ds_route,
    .moe_sum = di_cpu_moe_sum,
    .round_rows = di_cpu_round_rows, /* backend_cpu_dsv41_round.c */
    .copy = cpu_copy,
    .zero = cpu_zero,
    .buf_alloc = cpu_buf_alloc,
    .buf_free = cpu_buf_free,
    .upload = cpu_upload,
    .download = cpu_download,
    .upload_weight = cpu_upload_weight,
    .release_weight = cpu_release_weight,
};

void di_backend_cpu(const di_cpu_kernels *k, di_backend *out) {
    out->ops = &CPU_OPS;
    out->ctx = k ? k : di_cpu_kernels_best();
    out->state = NULL;
}

const di_cpu_kernels *di_backend_cpu_kernels(const di_backend *be) {
    return be && be->ops == &CPU_OPS ? be->ctx : NULL;
}

const di_backend_ops *di_backend_cpu_ops(void) { return &CPU_OPS; }
