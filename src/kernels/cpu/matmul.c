/* y = W x over a batch of rows, split over output rows only. di_matmul_multi
 * does several such products of the same rows in one dispatch: the parts'
 * output rows form one range of 8-row units that the tasks split, so a
 * layer's q/k/v (or gate/up) cost one pool round trip, not three (two).
 *
 * The int8 path (tables with quantize_q8, weight dtypes with gemm_q8): the
 * activation rows are quantized once per call (threaded over rows; for a
 * table with pack_q8, over whole 16-row tiles that the same task then
 * packs into the table's tile layout, once for every part and task), then
 * each task runs the table's gemm over its output rows against all rows
 * (a part whose weight the table packed, a->packed with gemm_q8_x16: the
 * packed gemm, its tasks cut at multiples of 16 rows, one packed group).
 * One instruction sequence per (row, output) for every batch size, so it
 * is batch-invariant like the f32 path below.
 *
 * The ggml path (the "ggml" table, Q4_0/Q4_1/Q8_0 weights): the same shape
 * with ggml's quantizer and dots (ggml_compat.h), so the products equal
 * llama.cpp's CPU backend.
 *
 * The f32 path: two shapes share one numeric definition,
 * dot_f32(dequant(W[o]), x[r]):
 *  - few rows (decode): the table's fused dot reads the quantized row once
 *    per batch row, never materializing it;
 *  - many rows (prefill): 4 weight rows are dequantized into the task's
 *    scratch once and dotted with every batch row by dot_f32_x4, so the
 *    weights are read once per tile of 4 output rows.
 * The table guarantees both give identical bits, so which shape runs (it
 * depends on the batch size) never changes a row's result. */
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/ggml_compat.h"
#include "kernels/cpu/half.h"

#include <string.h>

/* Below this many batch rows the fused dot wins: dequantizing into scratch
 * costs a store and a reload per weight, paid back only when it is reused. */
#define FUSED_MAX_ROWS 3
#define TILE 4 /* weight rows per dequantized tile (dot_f32_x4) */
#define REF_CHUNK 256 /* reference dequant chunk: a multiple of every block size */

/* Per-thread floats: the f32 path's dequantized tile or the gemm's scales. */
static int64_t thread_floats(int64_t n_in) {
    /* 8 rows: the widest dequantized tile of any gemm_f32 */
    int64_t a = 8 * n_in + 16, b = di_gemm_q8_scratch_floats(n_in);
    return a > b ? a : b;
}

/* Shared floats for n_rows quantized rows: int8 values (n_in bytes, in
 * floats rounded up) plus d and s per block, then room for a table's
 * packing of them (pack_q8; 64-byte aligned). */
static int64_t act_floats(int64_t n_rows, int64_t n_in) {
    return n_rows * ((n_in + 3) / 4 + 2 * (n_in / DI_Q8_ACT_BLOCK)) + 16 + di_q8_pack_bytes(n_rows, n_in) / 4 + 16;
}

int64_t di_matmul_scratch_floats(int64_t n_rows, int64_t n_in, int n_threads) {
    if (n_threads < 1) n_threads = 1;
    return act_floats(n_rows, n_in) + (int64_t)n_threads * thread_floats(n_in);
}

/* Tasks per thread: the pool hands tasks out dynamically, so a few per
 * thread even out threads that start late or run on a busy core. */
#define TASKS_PER_THREAD 4
/* Output rows in units of 8: a multiple of every gemm tile width (and of
 * TILE), so the tiles of a task are full except at a part's n_out. */
#define GEMM_ALIGN 8

typedef struct matmul_job {
    const di_cpu_kernels *k;
    const di_matmul_args *parts;
    int n_parts;
    int64_t part_unit0[DI_MATMUL_MAX_PARTS + 1]; /* first unit of each part; [n_parts] = total */
    float *scratch;           /* (n_threads, scratch_floats) */
    int64_t scratch_floats;
    int n_tasks;
    di_q8_rows xq;            /* the int8 path's quantized rows (q NULL: none) */
    int8_t *xq_q;             /* writable views of xq */
    float *xq_d, *xq_s;
    int8_t *xq_tiles;         /* the table's packing (pack_q8; NULL: none) */
    float *xq_td, *xq_ts;
} matmul_job;

/* Dequantizes one weight row through the table, or the trait as fallback. */
static void dequant_row(const di_cpu_kernels *k, di_dtype t, const void *w, float *dst, int64_t n) {
    if (k->dequant[t]) {
        k->dequant[t](w, dst, n);
        return;
    }
    di_dtype_traits_of(t)->to_float(w, dst, n);
}

/* True when matmul takes the int8 path for this table and dtype. */
static int uses_q8(const di_cpu_kernels *k, const di_matmul_args *a) {
    return k->quantize_q8 && k->gemm_q8[a->dtype] && a->n_in % DI_Q8_ACT_BLOCK == 0;
}

/* True when matmul takes the int8 path over x16-packed weights. */
static int uses_x16(const di_cpu_kernels *k, const di_matmul_args *a) {
    return a->packed && k->quantize_q8 && k->gemm_q8_x16[a->dtype] && a->n_in % DI_Q8_ACT_BLOCK == 0;
}

/* Output rows per task unit of a part: 16 (a packed group) or GEMM_ALIGN. */
static int64_t part_align(const di_cpu_kernels *k, const di_matmul_args *a) {
    return uses_x16(k, a) ? 16 : GEMM_ALIGN;
}

/* True when matmul takes the ggml path (ggml table, Q4_0/Q4_1/Q8_0). */
static int uses_ggml(const di_cpu_kernels *k, const di_matmul_args *a) {
    return k->ggml && di_ggml_supports(a->dtype) && a->n_in % DI_GGML_QK == 0;
}

/* Activation rows per pass of the ggml gemm: their quantized bytes stay in
 * L1/L2 while a task's weight rows stream past. */
#define GGML_ROW_TILE 32

/* ggml numerics over output rows [o0, o1): every (row, output) pair is one
 * di_ggml_kernels dot of the weight row with the row quantized by the same
 * table's quantizer. */
static void ggml_range(const matmul_job *job, const di_matmul_args *a, int64_t o0, int64_t o1) {
    const di_ggml_kernels *g = job->k->ggml;
    for (int64_t r0 = 0; r0 < a->n_rows; r0 += GGML_ROW_TILE) {
        int64_t r1 = r0 + GGML_ROW_TILE < a->n_rows ? r0 + GGML_ROW_TILE : a->n_rows;
        for (int64_t o = o0; o < o1; o += TILE) {
            const uint8_t *wr = (const uint8_t *)a->w + (uint64_t)o * a->row_bytes;
            for (int64_t r = r0; r < r1; r++) {
                const int8_t *q = job->xq.q + r * job->xq.ldq;
                const float *d = job->xq.d + r * job->xq.ldb, *s = job->xq.s + r * job->xq.ldb;
                float *y = a->y + r * a->ldy + o;
                if (o1 - o >= TILE) { /* 4 rows at once: the same bits as 4 dots */
                    g->dot_x4(a->dtype, wr, a->row_bytes, q, d, s, a->n_in, y);
                    continue;
                }
                for (int64_t j = 0; j < o1 - o; j++) y[j] = g->dot(a->dtype, wr + j * a->row_bytes, q, d, s, a->n_in);
            }
        }
    }
}

/* The generic f32 shapes (tables without a gemm_f32 for the dtype) over
 * output rows [o0, o1); tmp holds TILE dequantized rows. */
static void generic_range(const di_cpu_kernels *k, const di_matmul_args *a, int64_t o0, int64_t o1, float *tmp) {
    const uint8_t *w = a->w;
    di_row_dot_fn dot = k->dot[a->dtype];
    if (a->n_rows <= FUSED_MAX_ROWS) {
        for (int64_t o = o0; o < o1; o++) {
            const void *wr = w + (uint64_t)o * a->row_bytes;
            if (!dot) dequant_row(k, a->dtype, wr, tmp, a->n_in);
            for (int64_t r = 0; r < a->n_rows; r++) {
                const float *xr = a->x + r * a->ldx;
                a->y[r * a->ldy + o] = dot ? dot(wr, xr, a->n_in) : k->dot_f32(tmp, xr, a->n_in);
            }
        }
        return;
    }
    for (int64_t o = o0; o < o1; o += TILE) {
        int64_t nt = o1 - o < TILE ? o1 - o : TILE;
        for (int64_t j = 0; j < nt; j++)
            dequant_row(k, a->dtype, w + (uint64_t)(o + j) * a->row_bytes, tmp + j * a->n_in, a->n_in);
        for (int64_t r = 0; r < a->n_rows; r++) {
            const float *xr = a->x + r * a->ldx;
            float *yr = a->y + r * a->ldy + o;
            if (nt == TILE) {
                k->dot_f32_x4(tmp, a->n_in, xr, a->n_in, yr);
            } else {
                for (int64_t j = 0; j < nt; j++) yr[j] = k->dot_f32(tmp + j * a->n_in, xr, a->n_in);
            }
        }
    }
}

/* Output rows [o0, o1) of one part, through the path its dtype takes. */
static void part_range(const matmul_job *job, const di_matmul_args *a, int64_t o0, int64_t o1, float *tmp) {
    const di_cpu_kernels *k = job->k;
    if (job->xq.q && uses_ggml(k, a))
        ggml_range(job, a, o0, o1);
    else if (job->xq.q && uses_x16(k, a))
        k->gemm_q8_x16[a->dtype](a->w, a->row_bytes, a->packed, o0, o1, &job->xq, a->n_rows, a->n_in, a->y, a->ldy, tmp);
    else if (job->xq.q && uses_q8(k, a))
        k->gemm_q8[a->dtype](a->w, a->row_bytes, o0, o1, &job->xq, a->n_rows, a->n_in, a->y, a->ldy, tmp);
    else if (k->gemm_f32[a->dtype] && a->n_in % DI_Q8_ACT_BLOCK == 0)
        k->gemm_f32[a->dtype](a->w, a->row_bytes, o0, o1, a->x, a->ldx, a->n_rows, a->n_in, a->y, a->ldy, tmp);
    else
        generic_range(k, a, o0, o1, tmp);
}

/* One task: a contiguous range of the parts' concatenated output units. */
static void matmul_task(void *arg, int64_t task, int thread) {
    const matmul_job *job = arg;
    float *tmp = job->scratch + (int64_t)thread * job->scratch_floats;
    int64_t u0, u1;
    di_threadpool_split(job->part_unit0[job->n_parts], job->n_tasks, (int)task, &u0, &u1);
    for (int p = 0; p < job->n_parts && u0 < u1; p++) {
        int64_t b = job->part_unit0[p], e = job->part_unit0[p + 1];
        if (u0 >= e) continue;
        const di_matmul_args *a = &job->parts[p];
        int64_t pe = u1 < e ? u1 : e;
        const int64_t al = part_align(job->k, a);
        int64_t o0 = (u0 - b) * al, o1 = (pe - b) * al;
        if (o1 > a->n_out) o1 = a->n_out;
        part_range(job, a, o0, o1, tmp);
        u0 = pe;
    }
}

/* Quantizes rows [r0, r1) of a task's share, with the ggml quantizer when
 * the table has one (its parts take the ggml path), else the int8 one. */
static void quantize_task(void *arg, int64_t task, int thread) {
    (void)thread;
    const matmul_job *job = arg;
    const di_matmul_args *a = &job->parts[0];
    di_quantize_q8_fn quantize = job->k->ggml ? job->k->ggml->quantize : job->k->quantize_q8;
    int64_t r0, r1, t0 = 0, t1 = 0;
    if (job->xq_tiles) { /* whole 16-row tiles per task: quantize them, then pack them */
        di_threadpool_split((a->n_rows + 15) / 16, job->n_tasks, (int)task, &t0, &t1);
        r0 = t0 * 16;
        r1 = t1 * 16 < a->n_rows ? t1 * 16 : a->n_rows;
    } else {
        di_threadpool_split(a->n_rows, job->n_tasks, (int)task, &r0, &r1);
    }
    for (int64_t r = r0; r < r1; r++)
        quantize(a->x + r * a->ldx, job->xq_q + r * job->xq.ldq, job->xq_d + r * job->xq.ldb,
                            job->xq_s + r * job->xq.ldb, a->n_in);
    if (job->xq_tiles && t0 < t1)
        job->k->pack_q8(&job->xq, a->n_rows, a->n_in, t0, t1, job->xq_tiles, job->xq_td, job->xq_ts);
}

void di_matmul_multi(const di_cpu_kernels *k, const di_matmul_args *parts, int n_parts, float *scratch,
                     di_threadpool *pool) {
    if (n_parts < 1 || n_parts > DI_MATMUL_MAX_PARTS || parts[0].n_rows <= 0) return;
    const di_matmul_args *a = &parts[0];
    int n_threads = di_threadpool_n_threads(pool);
    matmul_job job = {.k = k, .parts = parts, .n_parts = n_parts, .scratch_floats = thread_floats(a->n_in)};
    job.scratch = scratch + act_floats(a->n_rows, a->n_in);
    int any_q8 = 0;
    for (int p = 0; p < n_parts; p++) {
        int64_t n_out = parts[p].n_out > 0 ? parts[p].n_out : 0;
        const int64_t al = part_align(k, &parts[p]);
        job.part_unit0[p + 1] = job.part_unit0[p] + (n_out + al - 1) / al;
        any_q8 |= k->ggml ? uses_ggml(k, &parts[p]) : uses_q8(k, &parts[p]) || uses_x16(k, &parts[p]);
    }
    int64_t n_units = job.part_unit0[n_parts];
    if (n_units == 0) return;
    if (any_q8) {
        /* scratch: [int8 rows | d | s | per-thread regions]; the rows are
         * quantized once for every part */
        int64_t nb = a->n_in / DI_Q8_ACT_BLOCK, qf = a->n_rows * ((a->n_in + 3) / 4);
        job.xq_q = (int8_t *)(void *)scratch;
        job.xq_d = scratch + qf;
        job.xq_s = job.xq_d + a->n_rows * nb;
        job.xq = (di_q8_rows){job.xq_q, job.xq_d, job.xq_s, a->n_in, nb, NULL, NULL, NULL};
        if (k->pack_q8 && !k->ggml) { /* after s; the tiles 64-byte aligned, then td and ts */
            int64_t rows16 = (a->n_rows + 15) / 16 * 16;
            uintptr_t p = (uintptr_t)(job.xq_s + a->n_rows * nb);
            job.xq_tiles = (int8_t *)(void *)((p + 63) & ~(uintptr_t)63);
            job.xq_td = (float *)(void *)(job.xq_tiles + rows16 * a->n_in);
            job.xq_ts = job.xq_td + rows16 * nb;
        }
        /* quantizing costs ~1/n_out of the gemm: split only big batches */
        int64_t nq = a->n_rows >= 16 ? n_threads : 1;
        job.n_tasks = (int)nq;
        if (nq > 1) di_threadpool_run(pool, nq, quantize_task, &job);
        else quantize_task(&job, 0, 0);
        if (job.xq_tiles) {
            job.xq.tiles = job.xq_tiles;
            job.xq.td = job.xq_td;
            job.xq.ts = job.xq_ts;
        }
    }
    int64_t n_tasks = (int64_t)n_threads * TASKS_PER_THREAD;
    if (n_tasks > n_units) n_tasks = n_units;
    job.n_tasks = (int)n_tasks;
    di_threadpool_run(pool, n_tasks, matmul_task, &job);
}

void di_matmul(const di_cpu_kernels *k, const di_matmul_args *a, float *scratch,
               di_threadpool *pool) {
    if (a->n_rows <= 0 || a->n_out <= 0) return;
    di_matmul_multi(k, a, 1, scratch, pool);
}

di_status di_matmul_ref(const di_matmul_args *a, di_error *err) {
    const di_dtype_traits *tr = di_dtype_traits_of(a->dtype);
    if (!tr) return di_error_set(err, DI_ERR_INVALID_ARG, "matmul: bad dtype %d", (int)a->dtype);
    int direct = a->dtype == DI_DTYPE_F32 || a->dtype == DI_DTYPE_F16;
    if (!direct && !tr->to_float)
        return di_error_set(err, DI_ERR_UNSUPPORTED, "matmul: dtype %s has no to_float", tr->name);
    if (a->n_in % tr->block_size != 0)
        return di_error_set(err, DI_ERR_INVALID_ARG, "matmul: n_in %lld not a multiple of %d",
                            (long long)a->n_in, (int)tr->block_size);
    float buf[REF_CHUNK]; /* one dequantized chunk of a weight row */
    for (int64_t o = 0; o < a->n_out; o++) {
        const uint8_t *wr = (const uint8_t *)a->w + (uint64_t)o * a->row_bytes;
        for (int64_t r = 0; r < a->n_rows; r++) {
            const float *xr = a->x + r * a->ldx;
            double s = 0.0;
            for (int64_t i = 0; i < a->n_in; i += REF_CHUNK) {
                int64_t m = a->n_in - i < REF_CHUNK ? a->n_in - i : REF_CHUNK;
                if (a->dtype == DI_DTYPE_F32) {
                    memcpy(buf, (const float *)(const void *)wr + i, (size_t)m * sizeof(float));
                } else if (a->dtype == DI_DTYPE_F16) {
                    const uint16_t *h = (const uint16_t *)(const void *)wr + i;
                    for (int64_t j = 0; j < m; j++) buf[j] = di_half_to_float(h[j]);
                } else {
                    tr->to_float(wr + i / tr->block_size * tr->block_bytes, buf, m);
                }
                for (int64_t j = 0; j < m; j++) s += (double)buf[j] * (double)xr[i + j];
            }
            a->y[r * a->ldy + o] = (float)s;
        }
    }
    return DI_OK;
}
