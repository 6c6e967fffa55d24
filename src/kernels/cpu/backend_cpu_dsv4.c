/* The CPU backend's DeepSeek V4 / V4.1 stages (kernels/backend.h): y = x W^T
 * for the three weight kinds of a V4 checkpoint.
 *
 * PLAIN weights (F32/F16/BF16) go through di_matmul. FP8 block-scaled and
 * MXFP4 weights are dequantized by the kernel table (fp8_row / mxfp4_row:
 * value = e4m3 * block scale, or e2m1 * 2^(e-127), one exact f32 product)
 * into the task's scratch, once per step for every batch row:
 *  - few rows (decode): one output row at a time, dot_f32 with each x row;
 *  - more rows (prefill, or an expert's gathered tokens): 4 output rows are
 *    dequantized together and dot_f32_x4 shares each x row's loads between
 *    them (the table guarantees it equals dot_f32 bit for bit).
 * Either way every y[r][o] is dot_f32(dequant(W[o]), x[r]) -- the same fixed
 * sequence of float operations whatever the batch size or thread count,
 * which is what batch invariance needs. (Moved here unchanged from
 * model/deepseek_v4_linear.c when the DeepSeek forwards took the seam.) */
#include "kernels/cpu/backend_cpu_dsv4.h"

#include <math.h>
#include <string.h>

#define TASKS_PER_THREAD 4
#define TILE 4          /* output rows per dequantized tile (dot_f32_x4) */
/* Up to this many batch rows each output row is dotted on its own: the
 * tile only pays when the x rows are reused across its 4 weight rows. */
#define ROWWISE_MAX_ROWS 3
/* Below this many multiply-adds the caller runs the product alone: handing
 * work to a pool thread costs microseconds when it is spinning and a
 * scheduler wake-up (far more on a busy machine) when it sleeps, and decode
 * issues hundreds of such small products per token (mHC projections, the
 * router, per-expert products of one row). Results do not change: no
 * output's arithmetic depends on how the rows were split. */
#define INLINE_MAX_MACS (1 << 18)

/* Output rows dequantized at once for the table's f32 gemm (prefill). */
#define GEMM_TILE 16
/* Floats the f32 gemm itself needs next to them (its DEQ_ROWS copy). */
#define GEMM_SCRATCH_ROWS 8

int64_t di_cpu_scaled_linear_scratch(const di_backend *be, int64_t n_rows, int64_t n_in, int64_t n_tasks,
                                     int n_threads) {
    (void)be;
    /* plain weights go through di_matmul (its own layout over all threads);
     * FP8/MXFP4 tiles use one (GEMM_TILE + GEMM_SCRATCH_ROWS, n_in) region
     * per task */
    int64_t mm = di_matmul_scratch_floats(n_rows, n_in, n_threads);
    int64_t tile = n_tasks * ((GEMM_TILE + GEMM_SCRATCH_ROWS) * n_in + 64);
    return mm > tile ? mm : tile;
}

/* Row o of W as floats (n_in). */
static void scaled_row(const di_cpu_kernels *k, const di_scaled_weight *w, int64_t o, float *dst) {
    if (w->kind == DI_SCALED_FP8) {
        const uint8_t *row = (const uint8_t *)w->data + (uint64_t)o * w->row_bytes;
        const float *sc = w->scale + ((o + w->row_off) / w->block) * w->scale_cols;
        k->fp8_row(row, sc, w->block, dst, w->n_in);
        return;
    }
    if (w->kind == DI_SCALED_MXFP4) {
        const uint8_t *row = (const uint8_t *)w->data + (uint64_t)o * w->row_bytes;
        k->mxfp4_row(row, w->mx_scale + (uint64_t)o * (uint64_t)(w->n_in / 32), dst, w->n_in);
        return;
    }
    const uint8_t *row = (const uint8_t *)w->data + (uint64_t)o * w->row_bytes;
    di_dtype_row_to_float(w->dtype, row, dst, w->n_in, NULL);
}

typedef struct lin_job {
    const di_cpu_kernels *k;
    const di_scaled_weight *w;
    const float *x;
    int64_t ldx;
    float *y;
    int64_t ldy, n_rows;
    float *scratch;
    int64_t scratch_floats;
    int n_tasks;
} lin_job;

static void lin_task(void *arg, int64_t task, int thread) {
    const lin_job *j = arg;
    const int64_t n_in = j->w->n_in;
    float *tmp = j->scratch + (int64_t)thread * j->scratch_floats; /* (TILE, n_in) */
    int64_t o0, o1;
    di_threadpool_split_aligned(j->w->n_out, TILE, j->n_tasks, (int)task, &o0, &o1);
    const di_fused_fp8_kernels *fz = j->k->fused_fp8;
    if (j->n_rows <= ROWWISE_MAX_ROWS && fz) {
        /* decode: decode each weight row in registers against each x row */
        const di_scaled_weight *w = j->w;
        int64_t o = o0;
        /* four output rows at once where the four share one FP8 scale row
         * block (or are MXFP4): independent chains, same bits */
        for (; o + 4 <= o1; o += 4) {
            const uint8_t *row = (const uint8_t *)w->data + (uint64_t)o * w->row_bytes;
            int fp8 = w->kind == DI_SCALED_FP8;
            if (fp8 ? !fz->fp8_dot4 || (o + w->row_off) / w->block != (o + 3 + w->row_off) / w->block : !fz->mxfp4_dot4)
                break;
            for (int64_t r = 0; r < j->n_rows; r++) {
                const float *xr = j->x + r * j->ldx;
                float out[4];
                if (fp8)
                    fz->fp8_dot4(row, w->row_bytes, w->scale + ((o + w->row_off) / w->block) * w->scale_cols, 0,
                                 w->block, xr, n_in, out);
                else
                    fz->mxfp4_dot4(row, w->row_bytes, w->mx_scale + (uint64_t)o * (uint64_t)(n_in / 32), n_in / 32, xr,
                                   n_in, out);
                for (int q = 0; q < 4; q++) j->y[r * j->ldy + o + q] = out[q];
            }
        }
        for (; o < o1; o++) {
            const uint8_t *row = (const uint8_t *)w->data + (uint64_t)o * w->row_bytes;
            for (int64_t r = 0; r < j->n_rows; r++) {
                const float *xr = j->x + r * j->ldx;
                float v;
                if (w->kind == DI_SCALED_FP8)
                    v = fz->fp8_dot(row, w->scale + ((o + w->row_off) / w->block) * w->scale_cols, w->block, xr, n_in);
                else
                    v = fz->mxfp4_dot(row, w->mx_scale + (uint64_t)o * (uint64_t)(n_in / 32), xr, n_in);
                j->y[r * j->ldy + o] = v;
            }
        }
        return;
    }
    if (j->n_rows <= ROWWISE_MAX_ROWS) {
        for (int64_t o = o0; o < o1; o++) {
            scaled_row(j->k, j->w, o, tmp);
            for (int64_t r = 0; r < j->n_rows; r++)
                j->y[r * j->ldy + o] = j->k->dot_f32(tmp, j->x + r * j->ldx, n_in);
        }
        return;
    }
    di_gemm_f32_fn gemm = j->k->gemm_f32[DI_DTYPE_F32];
    if (gemm && n_in % 32 == 0) {
        /* prefill: dequantize GEMM_TILE rows once, then the table's register-
         * tiled f32 gemm over every activation row; its per-pair order is
         * dot_f32's (one zmm = the two canonical accumulators), so the bits
         * equal the decode path's */
        float *g_scr = tmp + GEMM_TILE * n_in;
        for (int64_t o = o0; o < o1; o += GEMM_TILE) {
            int64_t nt = o1 - o < GEMM_TILE ? o1 - o : GEMM_TILE;
            for (int64_t t = 0; t < nt; t++) scaled_row(j->k, j->w, o + t, tmp + t * n_in);
            gemm(tmp, (uint64_t)n_in * sizeof(float), 0, nt, j->x, j->ldx, j->n_rows, n_in, j->y + o, j->ldy, g_scr);
        }
        return;
    }
    for (int64_t o = o0; o < o1; o += TILE) {
        int64_t nt = o1 - o < TILE ? o1 - o : TILE;
        for (int64_t t = 0; t < nt; t++) scaled_row(j->k, j->w, o + t, tmp + t * n_in);
        for (int64_t r = 0; r < j->n_rows; r++) {
            const float *xr = j->x + r * j->ldx;
            float *yr = j->y + r * j->ldy + o;
            if (nt == TILE) {
                j->k->dot_f32_x4(tmp, n_in, xr, n_in, yr);
            } else {
                for (int64_t t = 0; t < nt; t++) yr[t] = j->k->dot_f32(tmp + t * n_in, xr, n_in);
            }
        }
    }
}

void di_cpu_scaled_linear(const di_backend *be, const di_scaled_weight *w, const float *x, int64_t ldx, float *y,
                          int64_t ldy, int64_t n_rows, float *scratch, di_threadpool *pool) {
    const di_cpu_kernels *k = be->ctx; /* the CPU backend's context */
    if (n_rows <= 0) return;
    if ((double)n_rows * (double)w->n_in * (double)w->n_out < INLINE_MAX_MACS) pool = NULL;
    if (w->kind == DI_SCALED_PLAIN) {
        di_matmul_args a = {w->dtype, w->data, w->row_bytes, x, ldx, y, ldy, n_rows, w->n_in, w->n_out, NULL};
        di_matmul(k, &a, scratch, pool);
        return;
    }
    int64_t n_tiles = (w->n_out + TILE - 1) / TILE;
    int64_t n_tasks = (int64_t)di_threadpool_n_threads(pool) * TASKS_PER_THREAD;
    if (n_tasks > n_tiles) n_tasks = n_tiles;
    lin_job j = {k, w, x, ldx, y, ldy, n_rows, scratch, (GEMM_TILE + GEMM_SCRATCH_ROWS) * w->n_in + 64, (int)n_tasks};
    di_threadpool_run(pool, n_tasks, lin_task, &j);
}

void di_cpu_scaled_rows(const di_backend *be, const di_scaled_weight *w, const int32_t *ids, int64_t n, float *dst,
                        int64_t ldd) {
    const di_cpu_kernels *k = be->ctx; /* the CPU backend's context */
    for (int64_t i = 0; i < n; i++) scaled_row(k, w, ids[i], dst + i * ldd);
}

void di_cpu_scaled_dot_rows(const di_backend *be, const di_scaled_weight *w, const float *x, float *y,
                            float *scratch) {
    const di_cpu_kernels *k = be->ctx; /* the CPU backend's context */
    for (int64_t o = 0; o < w->n_out; o++) {
        scaled_row(k, w, o, scratch);
        y[o] = k->dot_f32(scratch, x, w->n_in);
    }
}

/* ---- sparse attention with a sink, the indexer's scores -------------------
 * One pool task per row (rows differ in key count): each row's numbers are
 * the model's former per-row loop (dsv4_attend_sink, index_select), so they
 * do not depend on the batch or the split. */

int64_t di_cpu_sparse_attention_scratch(const di_backend *be, int64_t max_idx) {
    (void)be;
    return max_idx + 16;
}

typedef struct sparse_job {
    const di_cpu_kernels *k;
    const di_sparse_attn_args *a;
    float *scratch;
    int64_t scratch_floats;
} sparse_job;

static void sparse_row(void *arg, int64_t row, int thread) {
    const sparse_job *j = arg;
    const di_sparse_attn_args *a = j->a;
    const int32_t H = a->n_heads, hd = a->head_dim, n_keys = a->n_idx[row];
    const int32_t *idx = a->idx + row * a->ld_idx;
    const float *q_row = a->q + row * (int64_t)H * hd;
    float *o = a->out + row * (int64_t)H * hd, *logits = j->scratch + (int64_t)thread * j->scratch_floats;
    const float scale = 1.0f / sqrtf((float)hd);
    for (int32_t h = 0; h < H; h++) {
        const float *q = q_row + (int64_t)h * hd;
        float *out = o + (int64_t)h * hd;
        float mx = a->sink[h];
        for (int32_t t = 0; t < n_keys; t++) {
            logits[t] = j->k->dot_f32(q, a->keys + (int64_t)idx[t] * hd, hd) * scale;
            mx = logits[t] > mx ? logits[t] : mx;
        }
        float sum = expf(a->sink[h] - mx); /* the sink takes mass, gives no value */
        for (int32_t t = 0; t < n_keys; t++) sum += logits[t] = expf(logits[t] - mx);
        memset(out, 0, (size_t)hd * sizeof(float));
        for (int32_t t = 0; t < n_keys; t++) {
            float pr = logits[t] / sum;
            const float *v = a->keys + (int64_t)idx[t] * hd;
            for (int32_t d = 0; d < hd; d++) out[d] += pr * v[d];
        }
    }
}

void di_cpu_sparse_attention(const di_backend *be, const di_sparse_attn_args *a, float *scratch, di_threadpool *pool) {
    int64_t max_idx = 0;
    for (int64_t r = 0; r < a->n_rows; r++) max_idx = a->n_idx[r] > max_idx ? a->n_idx[r] : max_idx;
    sparse_job j = {be->ctx, a, scratch, di_cpu_sparse_attention_scratch(be, max_idx)};
    if (a->n_rows == 1) sparse_row(&j, 0, 0);
    else di_threadpool_run(pool, a->n_rows, sparse_row, &j);
}

typedef struct index_job {
    const di_cpu_kernels *k;
    const di_index_score_args *a;
} index_job;

static void index_row(void *arg, int64_t row, int thread) {
    (void)thread;
    const index_job *j = arg;
    const di_index_score_args *a = j->a;
    const int32_t IH = a->n_heads, ihd = a->head_dim;
    const float *iq = a->iq + row * (int64_t)IH * ihd, *iw = a->w + row * IH;
    const int32_t *idx = a->idx + row * a->ld_idx;
    float *score = a->score + row * a->ld_score;
    for (int32_t t = 0; t < a->n_idx[row]; t++) {
        const float *ik = a->keys + (int64_t)idx[t] * ihd;
        float s = 0.0f;
        for (int32_t h = 0; h < IH; h++) {
            float d = j->k->dot_f32(iq + (int64_t)h * ihd, ik, ihd);
            s += (d > 0.0f ? d : 0.0f) * a->scale * iw[h];
        }
        score[t] = s;
    }
}

void di_cpu_index_scores(const di_backend *be, const di_index_score_args *a, di_threadpool *pool) {
    index_job j = {be->ctx, a};
    if (a->n_rows == 1) index_row(&j, 0, 0);
    else di_threadpool_run(pool, a->n_rows, index_row, &j);
}
