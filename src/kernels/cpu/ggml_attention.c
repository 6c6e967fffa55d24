/* Attention with llama.cpp's CPU numerics when flash attention is off
 * (ggml_compat.h): per (row, head)
 *   s[t] = red16(lanes of fma(k16[t][i], q16[i]))        t = 0..pos
 *   e[t] = ggml_expf(s[t] * scale - max)  sum = double sum of red16 per 16 t
 *   p16[t] = f16(e[t] * (float)(1 / sum))
 *   out[i] = red16(lanes over t: fma(v16[t][i], p16[t]))
 * where x16 is x rounded to f16, "lanes" are the 16 f32 accumulators of an
 * AVX-512 tinyBLAS dot (element i, or position t, goes to lane i % 16) and
 * red16 is _mm512_reduce_add_ps's tree. K and V come from the f16 cache
 * (an f32 cache is rounded to f16 on read, as llama.cpp would have stored it).
 * The math is done lane by lane in C; the compiler vectorizes the loops. */
#include "kernels/cpu/ggml_compat.h"
#include "kernels/cpu/half.h"

#include <math.h>
#include <string.h>

#define W 16 /* tinyBLAS lanes (AVX-512 floats) */
#define TASKS_PER_THREAD 4

int64_t di_attention_ggml_scratch_floats(int32_t n_heads, int32_t n_kv_heads, int32_t head_dim, int32_t n_pos) {
    int64_t group = n_kv_heads > 0 ? n_heads / n_kv_heads : n_heads;
    int64_t n_pos_pad = ((int64_t)n_pos + W - 1) / W * W;
    /* scores, lane accumulators and f16-rounded q per head; one k/v row */
    return group * (n_pos_pad + (int64_t)W * head_dim + head_dim) + 2 * (int64_t)head_dim + W;
}

/* _mm512_reduce_add_ps: halves of 8, then 4, then pairs (GCC's order) */
static float red16(const float a[W]) {
    float t8[8], t4[4];
    for (int i = 0; i < 8; i++) t8[i] = a[i] + a[i + 8];
    for (int i = 0; i < 4; i++) t4[i] = t8[i] + t8[i + 4];
    return (t4[0] + t4[2]) + (t4[1] + t4[3]);
}

static float round_f16(float x) { return di_half_to_float(di_float_to_half(x)); }

/* One cache row (hd values of KV head kvh at position t) as floats rounded
 * to f16. */
static void cache_row(const di_cpu_kernels *k, const di_attn_args *a, const void *cache, const int32_t *blocks,
                      int32_t kvh, int32_t t, float *dst) {
    const int32_t hd = a->head_dim, bs = a->block_size;
    int64_t off = ((int64_t)blocks[t / bs] * bs + t % bs) * a->n_kv_heads * hd + (int64_t)kvh * hd;
    if (a->kv_f16) {
        k->f16_to_f32((const uint16_t *)cache + off, dst, hd);
    } else {
        const float *src = (const float *)cache + off;
        for (int32_t i = 0; i < hd; i++) dst[i] = round_f16(src[i]);
    }
}

static void attend_unit(const di_cpu_kernels *k, const di_attn_args *a, int32_t r, int32_t kvh, float *scratch,
                        int64_t n_pos_pad) {
    const int32_t hd = a->head_dim, group = a->n_heads / a->n_kv_heads;
    const int32_t pos = a->pos[r], n_t = pos + 1;
    const int32_t *blocks = a->row_blocks[r];
    float *score = scratch;                          /* (group, n_pos_pad) */
    float *acc = score + group * n_pos_pad;          /* (group, W, hd) */
    float *q16 = acc + (int64_t)group * W * hd;      /* (group, hd) */
    float *row = q16 + (int64_t)group * hd;          /* (hd) k or v row */
    float lane[W];

    for (int32_t g = 0; g < group; g++) {
        const float *q = a->q + ((int64_t)r * a->n_heads + kvh * group + g) * hd;
        for (int32_t i = 0; i < hd; i++) q16[g * hd + i] = round_f16(q[i]);
    }
    /* scores: lane l sums elements l, l+16, ... in order */
    const int32_t t0 = di_attn_first_pos(a, r); /* keys before the window: masked */
    for (int32_t g = 0; g < group; g++)
        for (int32_t t = 0; t < t0; t++) score[g * n_pos_pad + t] = -INFINITY;
    for (int32_t t = t0; t < n_t; t++) {
        cache_row(k, a, a->k_cache, blocks, kvh, t, row);
        for (int32_t g = 0; g < group; g++) {
            const float *qg = q16 + g * hd;
            memset(lane, 0, sizeof lane);
            int32_t i0 = 0;
            for (; i0 + W <= hd; i0 += W) /* whole vectors: the loop the compiler vectorizes */
                for (int32_t l = 0; l < W; l++) lane[l] = fmaf(row[i0 + l], qg[i0 + l], lane[l]);
            for (int32_t l = 0; i0 + l < hd; l++) lane[l] = fmaf(row[i0 + l], qg[i0 + l], lane[l]);
            score[g * n_pos_pad + t] = red16(lane) * a->scale;
        }
    }
    /* softmax over the row, probabilities rounded to f16 */
    for (int32_t g = 0; g < group; g++) {
        float *s = score + g * n_pos_pad;
        float mx = -INFINITY;
        for (int32_t t = 0; t < n_t; t++) mx = s[t] > mx ? s[t] : mx;
        for (int32_t t = 0; t < n_t; t++) s[t] = t < t0 ? 0.0f : di_ggml_expf(s[t] - mx);
        for (int64_t t = n_t; t < n_pos_pad; t++) s[t] = 0.0f; /* masked: exp(-inf) */
        double sum = 0.0;
        for (int64_t u0 = 0; u0 < n_pos_pad; u0 += W) sum += (double)red16(s + u0);
        float inv = (float)(1.0 / sum);
        for (int32_t t = 0; t < n_t; t++) s[t] = round_f16(s[t] * inv);
    }
    /* out: position t goes to lane t % 16 */
    memset(acc, 0, sizeof(float) * (size_t)group * W * (size_t)hd);
    for (int32_t t = t0; t < n_t; t++) {
        cache_row(k, a, a->v_cache, blocks, kvh, t, row);
        for (int32_t g = 0; g < group; g++) {
            float p = score[g * n_pos_pad + t];
            float *al = acc + ((int64_t)g * W + t % W) * hd;
            for (int32_t i = 0; i < hd; i++) al[i] = fmaf(row[i], p, al[i]);
        }
    }
    for (int32_t g = 0; g < group; g++) {
        float *o = a->out + ((int64_t)r * a->n_heads + kvh * group + g) * hd;
        const float *ag = acc + (int64_t)g * W * hd;
        for (int32_t i = 0; i < hd; i++) {
            for (int l = 0; l < W; l++) lane[l] = ag[(int64_t)l * hd + i];
            o[i] = red16(lane);
        }
    }
}

typedef struct attn_job {
    const di_cpu_kernels *k;
    const di_attn_args *a;
    float *scratch;
    int64_t scratch_floats, n_pos_pad, n_tasks;
} attn_job;

static void attn_task(void *arg, int64_t task, int thread) {
    const attn_job *job = arg;
    const di_attn_args *a = job->a;
    float *scratch = job->scratch + (int64_t)thread * job->scratch_floats;
    int64_t n_units = (int64_t)a->n_rows * a->n_kv_heads;
    for (int64_t u = task; u < n_units; u += job->n_tasks)
        attend_unit(job->k, a, (int32_t)(u / a->n_kv_heads), (int32_t)(u % a->n_kv_heads), scratch, job->n_pos_pad);
}

void di_attention_ggml(const di_cpu_kernels *k, const di_attn_args *a, int32_t n_pos, float *scratch,
                       di_threadpool *pool) {
    if (a->n_rows <= 0) return;
    int64_t n_units = (int64_t)a->n_rows * a->n_kv_heads;
    int64_t n_tasks = (int64_t)di_threadpool_n_threads(pool) * TASKS_PER_THREAD;
    if (n_tasks > n_units) n_tasks = n_units;
    attn_job job = {k, a, scratch,
                    di_attention_ggml_scratch_floats(a->n_heads, a->n_kv_heads, a->head_dim, n_pos),
                    ((int64_t)n_pos + W - 1) / W * W, n_tasks};
    di_threadpool_run(pool, n_tasks, attn_task, &job);
}
