/* y = x W^T for the three weight kinds of a V4 checkpoint, plus the small
 * per-vector helpers (RMSNorm, interleaved rotary) the V4 files share.
 *
 * PLAIN weights (F32/F16/BF16) go through di_matmul. FP8 block-scaled and
 * MXFP4 weights are dequantized one output row at a time into the task's
 * scratch (value = e4m3 * block scale, or e2m1 * 2^(e-127): one exact f32
 * product) and dotted with every batch row by dot_f32. Either way every
 * y[r][o] is the same fixed sequence of float operations whatever the batch
 * size or thread count, which is what batch invariance needs. */
#include "model/deepseek_v4_internal.h"

#include "tensor/fp8.h"
#include "tensor/mxfp4.h"

#include <math.h>

#define TASKS_PER_THREAD 4

int64_t dsv4_linear_scratch_floats(int64_t n_in) {
    int64_t mm = di_matmul_scratch_floats(n_in);
    return mm > n_in + 16 ? mm : n_in + 16;
}

static const float E2M1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                               -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

void dsv4_linear_row(const dsv4_linear *w, int64_t o, float *dst) {
    if (w->kind == DSV4_W_FP8) {
        const uint8_t *row = (const uint8_t *)w->data + (uint64_t)o * w->row_bytes;
        const float *sc = w->scale + ((o + w->row_off) / w->block) * w->scale_cols;
        for (int64_t i = 0; i < w->n_in; i++) dst[i] = di_e4m3_to_f32(row[i]) * sc[i / w->block];
        return;
    }
    if (w->kind == DSV4_W_MXFP4) {
        const uint8_t *row = (const uint8_t *)w->data + (uint64_t)o * w->row_bytes;
        const uint8_t *sc = w->mx_scale + (uint64_t)o * (uint64_t)(w->n_in / 32);
        for (int64_t g = 0; g < w->n_in / 32; g++) {
            /* e = 255 is NaN in OCP; the loader rejects it, so ldexpf is exact */
            float scale = ldexpf(1.0f, (int)sc[g] - 127);
            for (int j = 0; j < 16; j++) {
                uint8_t b = row[g * 16 + j];
                dst[g * 32 + 2 * j] = E2M1[b & 15] * scale;
                dst[g * 32 + 2 * j + 1] = E2M1[b >> 4] * scale;
            }
        }
        return;
    }
    const uint8_t *row = (const uint8_t *)w->data + (uint64_t)o * w->row_bytes;
    di_dtype_row_to_float(w->dtype, row, dst, w->n_in, NULL);
}

typedef struct lin_job {
    const di_cpu_kernels *k;
    const dsv4_linear *w;
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
    float *tmp = j->scratch + (int64_t)thread * j->scratch_floats; /* (n_in) */
    int64_t o0, o1;
    di_threadpool_split(j->w->n_out, j->n_tasks, (int)task, &o0, &o1);
    for (int64_t o = o0; o < o1; o++) {
        dsv4_linear_row(j->w, o, tmp);
        for (int64_t r = 0; r < j->n_rows; r++)
            j->y[r * j->ldy + o] = j->k->dot_f32(tmp, j->x + r * j->ldx, j->w->n_in);
    }
}

void dsv4_linear_apply(const di_cpu_kernels *k, const dsv4_linear *w, const float *x, int64_t ldx,
                       float *y, int64_t ldy, int64_t n_rows, float *scratch, di_threadpool *pool) {
    if (n_rows <= 0) return;
    if (w->kind == DSV4_W_PLAIN) {
        di_matmul_args a = {w->dtype, w->data, w->row_bytes, x, ldx, y, ldy, n_rows, w->n_in, w->n_out};
        di_matmul(k, &a, scratch, pool);
        return;
    }
    int64_t n_tasks = (int64_t)di_threadpool_n_threads(pool) * TASKS_PER_THREAD;
    if (n_tasks > w->n_out) n_tasks = w->n_out;
    lin_job j = {k, w, x, ldx, y, ldy, n_rows, scratch, dsv4_linear_scratch_floats(w->n_in), (int)n_tasks};
    di_threadpool_run(pool, n_tasks, lin_task, &j);
}

void dsv4_rmsnorm(const float *x, const float *w, float *out, int64_t n, float eps) {
    double ss = 0.0;
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * (double)x[i];
    /* transformers: x * rsqrt(mean + eps), then * weight */
    float scale = 1.0f / sqrtf((float)(ss / (double)n) + eps);
    if (w)
        for (int64_t i = 0; i < n; i++) out[i] = w[i] * (x[i] * scale);
    else
        for (int64_t i = 0; i < n; i++) out[i] = x[i] * scale;
}

void dsv4_rope(float *x, int32_t n_heads, int32_t dim, int32_t n_rot, const float *inv_freq,
               int32_t pos, float sign) {
    float c[DSV4_MAX_ROPE_PAIRS], s[DSV4_MAX_ROPE_PAIRS];
    int32_t n_pairs = n_rot / 2;
    float p = (float)pos; /* the reference multiplies in f32: (float)pos * inv_freq */
    for (int32_t i = 0; i < n_pairs; i++) {
        float ang = p * inv_freq[i];
        c[i] = cosf(ang);
        s[i] = sign * sinf(ang);
    }
    for (int32_t h = 0; h < n_heads; h++) {
        float *v = x + (int64_t)h * dim + (dim - n_rot); /* [nope | rope]: rope is the tail */
        for (int32_t i = 0; i < n_pairs; i++) {
            float x0 = v[2 * i], x1 = v[2 * i + 1];
            v[2 * i] = x0 * c[i] - x1 * s[i];
            v[2 * i + 1] = x1 * c[i] + x0 * s[i];
        }
    }
}
