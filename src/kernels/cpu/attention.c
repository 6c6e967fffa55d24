/* Causal attention over the paged KV cache with an online softmax.
 *
 * For one (row, KV head) pair, the KV blocks of the row's sequence are
 * visited in order; for each block, every query head of the group scores the
 * block's valid positions, and the running (max m, sum l, accumulator acc) of
 * that head is rescaled once per block:
 *   m' = max(m, max_t s_t);  l' = l e^(m-m') + sum_t e^(s_t-m');
 *   acc' = acc e^(m-m') + sum_t e^(s_t-m') v_t;  out = acc / l.
 *
 * Blocking: a work unit is up to ROW_CHUNK consecutive batch rows and one KV
 * head. Consecutive rows of the same sequence (a prefill chunk) share each
 * KV block: an f16 cache is widened once per block into the task's scratch
 * and every row of the run then reads it. Only loads are shared: each row
 * runs exactly the arithmetic it would run alone (its own block count and
 * valid positions, scores, exp, sums and accumulation in the same order), so
 * its output does not depend on the other rows, the chunking or the threads
 * (DESIGN.md section 3).
 *
 * This file is the portable reference and the task split. A table with an
 * attn_run (the AVX-512 tables: attention_avx512.c, transposed K, 16-key
 * score vectors, online softmax per 64-key step) runs each unit instead
 * when it takes the shape; its bits differ from this code's (another sum
 * order) but obey the same invariance. */
#include "kernels/cpu/kernels.h"

#include <math.h>
#include <string.h>

#define ROW_CHUNK DI_ATTN_ROW_CHUNK

int64_t di_attention_scratch_floats(int32_t n_heads, int32_t head_dim, int32_t block_size) {
    /* the reference: k and v of one block, the block's scores and acc/m/l
     * of every head of ROW_CHUNK rows; attention_avx512.c: k and v of one
     * step (k padded to whole 16-key chunks), and per head of ROW_CHUNK
     * rows the step's scores and acc/m/l; 64 bytes of alignment */
    int64_t sk16 = ((int64_t)di_attention_step_keys(block_size) + 15) / 16 * 16;
    return 2 * sk16 * head_dim + (int64_t)ROW_CHUNK * n_heads * (head_dim + 2 + sk16) + 32;
}

/* e^x for x <= 0 (larger x are not clamped: callers pass differences to a
 * running max). x = n ln2 + r with n = round(x / ln2), |r| <= ln2/2 (ln2 split
 * in a 16-bit-exact high part and a low part, so n ln2_hi is exact), e^r by
 * its degree-7 Taylor polynomial in Horner form (truncation r^8/8! < 5.3e-9
 * relative), then scaled by 2^n through the exponent bits. Below -87 (where
 * 2^n would leave the normal range) the result is 0 instead of a denormal
 * of at most 1.7e-38. Relative error vs expf: tests/kernels/test_ops.c
 * checks it stays under 2^-22 (measured: 7.8e-8, under one ulp). Every mul-add is an explicit fmaf,
 * so the bits do not depend on the compiler's contraction choices, and the
 * loop is elementwise: an element's result depends on its input only. */
void di_exp_nonpos(float *x, int64_t n) {
    const float log2e = 1.44269504f, ln2_hi = 0.693145752f, ln2_lo = 1.42860677e-6f;
    const float shift = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    for (int64_t i = 0; i < n; i++) {
        float v = x[i], c = v < -87.0f ? -87.0f : v;
        float t = fmaf(c, log2e, shift);
        float nf = t - shift;
        float r = fmaf(-nf, ln2_hi, c);
        r = fmaf(-nf, ln2_lo, r);
        float p = fmaf(r, 1.0f / 5040.0f, 1.0f / 720.0f);
        p = fmaf(p, r, 1.0f / 120.0f);
        p = fmaf(p, r, 1.0f / 24.0f);
        p = fmaf(p, r, 1.0f / 6.0f);
        p = fmaf(p, r, 0.5f);
        p = fmaf(p, r, 1.0f);
        p = fmaf(p, r, 1.0f);
        union { float f; uint32_t u; } tb = {t}, sc; /* unsigned: no overflow on NaN */
        sc.u = (tb.u - 0x4B400000u + 127u) << 23;      /* 2^n: n sits in t's low bits */
        x[i] = v < -87.0f ? 0.0f : p * sc.f;
    }
}

#define TASKS_PER_THREAD 4 /* dynamic hand-out evens out uneven rows */

typedef struct attn_job {
    const di_cpu_kernels *k;
    const di_attn_args *a;
    float *scratch;           /* (n_threads, scratch_floats) */
    int64_t scratch_floats;
    int64_t n_tasks;
} attn_job;

#define ACC_TILE 32 /* accumulator elements kept in registers across a block */

/* ag[i] = ag[i] * corr, then ag[i] = fmaf(p[t], v[t][i], ag[i]) for t in
 * order: the same operations per element for any hd, tile by tile. */
static void accumulate(float *ag, int32_t hd, float corr, const float *p, const float *vb, int64_t ld,
                       int32_t n_valid) {
    int32_t i0 = 0;
    for (; i0 + ACC_TILE <= hd; i0 += ACC_TILE) {
        float r[ACC_TILE];
        for (int32_t i = 0; i < ACC_TILE; i++) r[i] = ag[i0 + i] * corr;
        for (int32_t t = 0; t < n_valid; t++) {
            const float *v = vb + t * ld + i0;
            for (int32_t i = 0; i < ACC_TILE; i++) r[i] = fmaf(p[t], v[i], r[i]);
        }
        for (int32_t i = 0; i < ACC_TILE; i++) ag[i0 + i] = r[i];
    }
    for (int32_t i = i0; i < hd; i++) {
        float r = ag[i] * corr;
        for (int32_t t = 0; t < n_valid; t++) r = fmaf(p[t], vb[t * ld + i], r);
        ag[i] = r;
    }
}

/* One row's heads of KV head kvh against block b (n_valid positions of
 * K/V rows kb, vb with stride ld); state acc (group, hd), m, l (group). */
static void attend_block(const di_cpu_kernels *k, const di_attn_args *a, int32_t r, int32_t kvh,
                         const float *kb, const float *vb, int64_t ld, int32_t n_valid, float *score,
                         float *acc, float *m, float *l) {
    const int32_t hd = a->head_dim, group = a->n_heads / a->n_kv_heads;
    for (int32_t g = 0; g < group; g++) {
        int32_t h = kvh * group + g;
        const float *q = a->q + ((int64_t)r * a->n_heads + h) * hd;
        int32_t t = 0;
        /* dot_f32_x4 equals dot_f32 per row bit for bit (kernels.h) */
        for (; t + 4 <= n_valid; t += 4) k->dot_f32_x4(kb + t * ld, ld, q, hd, score + t);
        for (; t < n_valid; t++) score[t] = k->dot_f32(q, kb + t * ld, hd);
        float bmax = -INFINITY;
        for (t = 0; t < n_valid; t++) {
            score[t] *= a->scale;
            bmax = score[t] > bmax ? score[t] : bmax;
        }
        float m_new = bmax > m[g] ? bmax : m[g];
        float corr = m[g] - m_new; /* e^corr: 0 on the first block (m = -inf) */
        di_exp_nonpos(&corr, 1);
        for (t = 0; t < n_valid; t++) score[t] -= m_new;
        di_exp_nonpos(score, n_valid);
        float sum = 0.0f;
        for (t = 0; t < n_valid; t++) sum += score[t];
        accumulate(acc + (int64_t)g * hd, hd, corr, score, vb, ld, n_valid);
        l[g] = l[g] * corr + sum;
        m[g] = m_new;
    }
}

/* Rows r0..r0+n-1 (one sequence: the same block table) for KV head kvh. */
static void attend_run(const di_cpu_kernels *k, const di_attn_args *a, int32_t r0, int32_t n, int32_t kvh,
                       float *scratch) {
    const int32_t hd = a->head_dim, bs = a->block_size;
    const int32_t group = a->n_heads / a->n_kv_heads;
    const int64_t tok_stride = (int64_t)a->n_kv_heads * hd; /* floats/halves per token slot */
    float *kbuf = scratch;                  /* (bs, hd) when the cache is f16 */
    float *vbuf = kbuf + (int64_t)bs * hd;  /* (bs, hd) */
    float *score = vbuf + (int64_t)bs * hd; /* (bs) */
    float *acc = score + bs;                /* (n, group, hd) */
    float *m = acc + (int64_t)n * group * hd; /* (n, group) */
    float *l = m + (int64_t)n * group;      /* (n, group) */
    int32_t max_pos = 0;
    for (int32_t j = 0; j < n; j++) max_pos = a->pos[r0 + j] > max_pos ? a->pos[r0 + j] : max_pos;
    for (int32_t g = 0; g < n * group; g++) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
    }
    memset(acc, 0, sizeof(float) * (size_t)n * (size_t)group * (size_t)hd);

    const int32_t *blocks = a->row_blocks[r0];
    int32_t min_first = max_pos; /* the window's first key over the rows */
    for (int32_t j = 0; j < n; j++) {
        int32_t f = di_attn_first_pos(a, r0 + j);
        min_first = f < min_first ? f : min_first;
    }
    for (int32_t b = min_first / bs; b * bs <= max_pos; b++) {
        int32_t n_load = max_pos + 1 - b * bs < bs ? max_pos + 1 - b * bs : bs;
        int64_t base = (int64_t)blocks[b] * bs * tok_stride + (int64_t)kvh * hd;
        const float *kb, *vb; /* (n_load, ld) */
        int64_t ld;
        if (a->kv_f16) {
            const uint16_t *kc = a->k_cache, *vc = a->v_cache;
            for (int32_t t = 0; t < n_load; t++) {
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
        for (int32_t j = 0; j < n; j++) {
            int32_t pos = a->pos[r0 + j];
            if (b * bs > pos) continue; /* this row's history ended earlier */
            int32_t n_valid = pos + 1 - b * bs < bs ? pos + 1 - b * bs : bs;
            /* keys of this block before the row's window are skipped */
            int32_t skip = di_attn_first_pos(a, r0 + j) - b * bs;
            if (skip >= n_valid) continue;
            if (skip < 0) skip = 0;
            int64_t s = (int64_t)j * group;
            attend_block(k, a, r0 + j, kvh, kb + skip * ld, vb + skip * ld, ld, n_valid - skip, score,
                         acc + s * hd, m + s, l + s);
        }
    }
    for (int32_t j = 0; j < n; j++)
        for (int32_t g = 0; g < group; g++) {
            int32_t h = kvh * group + g;
            float *o = a->out + ((int64_t)(r0 + j) * a->n_heads + h) * hd;
            const float *ag = acc + ((int64_t)j * group + g) * hd;
            float inv = 1.0f / l[(int64_t)j * group + g];
            for (int32_t i = 0; i < hd; i++) o[i] = ag[i] * inv;
        }
}

/* Units (row chunk, KV head) are dealt round-robin (task t gets t,
 * t + n_tasks, ...) so that the long rows at the end of a prefill chunk
 * spread over all tasks. A chunk is split into runs of one sequence. */
static void attn_task(void *arg, int64_t task, int thread) {
    const attn_job *job = arg;
    const di_attn_args *a = job->a;
    float *scratch = job->scratch + (int64_t)thread * job->scratch_floats;
    int64_t n_chunks = ((int64_t)a->n_rows + ROW_CHUNK - 1) / ROW_CHUNK;
    int64_t n_units = n_chunks * a->n_kv_heads;
    for (int64_t u = task; u < n_units; u += job->n_tasks) {
        int32_t c0 = (int32_t)(u / a->n_kv_heads) * ROW_CHUNK, kvh = (int32_t)(u % a->n_kv_heads);
        int32_t c1 = c0 + ROW_CHUNK < a->n_rows ? c0 + ROW_CHUNK : a->n_rows;
        for (int32_t r = c0; r < c1;) {
            int32_t e = r + 1;
            /* a run also ends where the window starts cutting keys off: the
             * rows before keep the fast table's bits whatever shares their
             * chunk (the fast tables hand windowed runs to attend_run) */
            while (e < c1 && a->row_blocks[e] == a->row_blocks[r] && (di_attn_first_pos(a, e) > 0) == (di_attn_first_pos(a, r) > 0)) e++;
            if (!job->k->attn_run || !job->k->attn_run(a, r, e - r, kvh, scratch))
                attend_run(job->k, a, r, e - r, kvh, scratch);
            r = e;
        }
    }
}

void di_attention(const di_cpu_kernels *k, const di_attn_args *a, float *scratch,
                  di_threadpool *pool) {
    if (a->n_rows <= 0) return;
    int64_t n_units = ((int64_t)a->n_rows + ROW_CHUNK - 1) / ROW_CHUNK * a->n_kv_heads;
    int64_t n_tasks = (int64_t)di_threadpool_n_threads(pool) * TASKS_PER_THREAD;
    if (n_tasks > n_units) n_tasks = n_units;
    attn_job job = {k, a, scratch, di_attention_scratch_floats(a->n_heads, a->head_dim, a->block_size),
                    n_tasks};
    di_threadpool_run(pool, n_tasks, attn_task, &job);
}
