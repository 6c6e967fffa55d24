/* Causal attention over the paged KV cache with an online softmax.
 *
 * For one (row, KV head) unit, the KV blocks of the row's sequence are
 * visited in order; for each block, every query head of the group scores the
 * block's valid positions, and the running (max m, sum l, accumulator acc) of
 * that head is rescaled once per block:
 *   m' = max(m, max_t s_t);  l' = l e^(m-m') + sum_t e^(s_t-m');
 *   acc' = acc e^(m-m') + sum_t e^(s_t-m') v_t;  out = acc / l.
 * F16 caches are widened one block at a time into the task's scratch. */
#include "kernels/cpu/kernels.h"

#include <math.h>
#include <string.h>

int64_t di_attention_scratch_floats(int32_t n_heads, int32_t head_dim, int32_t block_size) {
    /* k and v of one block, the block's scores, and acc/m/l of every head */
    return 2 * (int64_t)block_size * head_dim + block_size + (int64_t)n_heads * (head_dim + 2) + 16;
}

#define TASKS_PER_THREAD 4 /* dynamic hand-out evens out uneven rows */

typedef struct attn_job {
    const di_cpu_kernels *k;
    const di_attn_args *a;
    float *scratch;           /* (n_threads, scratch_floats) */
    int64_t scratch_floats;
    int64_t n_tasks;
} attn_job;

static void attend_unit(const di_cpu_kernels *k, const di_attn_args *a, int32_t r, int32_t kvh,
                        float *scratch) {
    const int32_t hd = a->head_dim, bs = a->block_size;
    const int32_t group = a->n_heads / a->n_kv_heads;
    const int64_t tok_stride = (int64_t)a->n_kv_heads * hd; /* floats/halves per token slot */
    float *kbuf = scratch;               /* (bs, hd) when the cache is f16 */
    float *vbuf = kbuf + (int64_t)bs * hd; /* (bs, hd) */
    float *score = vbuf + (int64_t)bs * hd; /* (bs) */
    float *acc = score + bs;             /* (group, hd) */
    float *m = acc + (int64_t)group * hd; /* (group) */
    float *l = m + group;                /* (group) */
    for (int32_t g = 0; g < group; g++) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
    }
    memset(acc, 0, sizeof(float) * (size_t)group * (size_t)hd);

    const int32_t pos = a->pos[r];
    const int32_t *blocks = a->row_blocks[r];
    for (int32_t b = 0; b * bs <= pos; b++) {
        int32_t n_valid = pos + 1 - b * bs < bs ? pos + 1 - b * bs : bs;
        int64_t base = (int64_t)blocks[b] * bs * tok_stride + (int64_t)kvh * hd;
        const float *kb, *vb; /* (n_valid, ld) */
        int64_t ld;
        if (a->kv_f16) {
            const uint16_t *kc = a->k_cache, *vc = a->v_cache;
            for (int32_t t = 0; t < n_valid; t++) {
                k->f16_to_f32(kc + base + t * tok_stride, kbuf + (int64_t)t * hd, hd);
                k->f16_to_f32(vc + base + t * tok_stride, vbuf + (int64_t)t * hd, hd);
            }
            kb = kbuf;
            vb = vbuf;
            ld = hd;
        } else {
            kb = (const float *)a->k_cache + base;
            vb = (const float *)a->v_cache + base;
            ld = tok_stride;
        }
        for (int32_t g = 0; g < group; g++) {
            int32_t h = kvh * group + g;
            const float *q = a->q + ((int64_t)r * a->n_heads + h) * hd;
            float bmax = -INFINITY;
            for (int32_t t = 0; t < n_valid; t++) {
                score[t] = k->dot_f32(q, kb + t * ld, hd) * a->scale;
                bmax = score[t] > bmax ? score[t] : bmax;
            }
            float m_new = bmax > m[g] ? bmax : m[g];
            float corr = expf(m[g] - m_new); /* 0 on the first block (m = -inf) */
            float *ag = acc + (int64_t)g * hd;
            float sum = 0.0f;
            for (int32_t i = 0; i < hd; i++) ag[i] *= corr;
            for (int32_t t = 0; t < n_valid; t++) {
                float p = expf(score[t] - m_new);
                sum += p;
                const float *v = vb + t * ld;
                for (int32_t i = 0; i < hd; i++) ag[i] += p * v[i];
            }
            l[g] = l[g] * corr + sum;
            m[g] = m_new;
        }
    }
    for (int32_t g = 0; g < group; g++) {
        int32_t h = kvh * group + g;
        float *o = a->out + ((int64_t)r * a->n_heads + h) * hd;
        float inv = 1.0f / l[g];
        for (int32_t i = 0; i < hd; i++) o[i] = acc[(int64_t)g * hd + i] * inv;
    }
}

/* Units are dealt round-robin (task t gets t, t + n_tasks, ...) so that the
 * long rows at the end of a prefill chunk spread over all tasks. */
static void attn_task(void *arg, int64_t task, int thread) {
    const attn_job *job = arg;
    const di_attn_args *a = job->a;
    float *scratch = job->scratch + (int64_t)thread * job->scratch_floats;
    int64_t n_units = (int64_t)a->n_rows * a->n_kv_heads;
    for (int64_t u = task; u < n_units; u += job->n_tasks)
        attend_unit(job->k, a, (int32_t)(u / a->n_kv_heads), (int32_t)(u % a->n_kv_heads), scratch);
}

void di_attention(const di_cpu_kernels *k, const di_attn_args *a, float *scratch,
                  di_threadpool *pool) {
    if (a->n_rows <= 0) return;
    int64_t n_units = (int64_t)a->n_rows * a->n_kv_heads;
    int64_t n_tasks = (int64_t)di_threadpool_n_threads(pool) * TASKS_PER_THREAD;
    if (n_tasks > n_units) n_tasks = n_units;
    attn_job job = {k, a, scratch, di_attention_scratch_floats(a->n_heads, a->head_dim, a->block_size),
                    n_tasks};
    di_threadpool_run(pool, n_tasks, attn_task, &job);
}
