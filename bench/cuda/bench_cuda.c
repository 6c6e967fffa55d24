/* Micro-benchmark of the CUDA kernels (kernels/cuda): the dequantizing GEMV
 * (decode, 1 row), the tiled GEMM at 8, 32 and 512 rows, and paged
 * attention decode, per weight dtype. Prints a markdown table (and writes it
 * to the file named by --out) with the GPU named: GB/s of weights read
 * against the HBM peak, TFLOP/s against the FP32 CUDA-core and the dense
 * BF16 tensor-core peaks.
 *
 *   bench_cuda [--out FILE] [--quick]
 *
 * Weights are random bytes (speed does not depend on the values). Each
 * figure is the mean over back-to-back launches after warm-ups, timed on the
 * wall clock around a stream sync (launches overlap, so per-launch overhead
 * is hidden once a kernel runs longer than a few microseconds). Exits 2 with
 * a message when there is no usable GPU. */
#include "kernels/cuda/cuda_kernels.h"
#include "tensor/dtype.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* NVIDIA H200 SXM datasheet figures: HBM3e bandwidth, FP32 (CUDA cores),
 * dense BF16 tensor cores (the measured ceiling here was ~790 TFLOP/s). */
#define PEAK_HBM_GBPS 4800.0
#define PEAK_FP32_TFLOPS 67.0
#define PEAK_BF16_TC_TFLOPS 989.0
#define MIN_TIMED_SECONDS 0.2 /* per figure */
#define WARMUPS 3

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static void fill_random(void *p, size_t bytes) {
    uint8_t *b = p;
    for (size_t i = 0; i < bytes; i += 8) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        size_t n = bytes - i < 8 ? bytes - i : 8;
        memcpy(b + i, &rng, n);
    }
}

static void die(const char *what, const di_error *e) {
    fprintf(stderr, "bench_cuda: %s: %s\n", what, e->msg);
    exit(1);
}

typedef struct mm_run {
    di_cuda_ctx *c;
    di_cuda_matmul_args a;
} mm_run;

/* Seconds per matmul launch. */
static double time_matmul(mm_run *m) {
    di_error e = {0};
    for (int i = 0; i < WARMUPS; i++)
        if (di_cuda_matmul(m->c, &m->a, &e)) die("matmul", &e);
    if (di_cuda_sync(m->c, &e)) die("sync", &e);
    int iters = 1;
    for (;;) {
        double t0 = now_s();
        for (int i = 0; i < iters; i++)
            if (di_cuda_matmul(m->c, &m->a, &e)) die("matmul", &e);
        if (di_cuda_sync(m->c, &e)) die("sync", &e);
        double dt = now_s() - t0;
        if (dt >= MIN_TIMED_SECONDS || iters >= 1 << 20) return dt / iters;
        iters = dt > 0.0 ? (int)(iters * (MIN_TIMED_SECONDS * 1.2 / dt)) + 1 : iters * 10;
    }
}

int main(int argc, char **argv) {
    const char *out_path = NULL;
    int quick = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--out") && i + 1 < argc) out_path = argv[++i];
        else if (!strcmp(argv[i], "--quick")) quick = 1;
        else {
            fprintf(stderr, "usage: bench_cuda [--out FILE] [--quick]\n");
            return 2;
        }
    }
    di_error e = {0};
    int n_dev = 0;
    if (di_cuda_device_count(&n_dev, &e) != DI_OK) {
        fprintf(stderr, "bench_cuda: %s\n", e.msg);
        return 2;
    }
    di_cuda_ctx *c = NULL;
    if (di_cuda_ctx_create(0, &c, &e)) die("device 0", &e);
    char desc[256];
    di_cuda_ctx_describe(c, desc, sizeof desc);

    /* a 7B-class FFN matrix: (n_out, n_in) = (14336, 4096); quick: a quarter */
    const int64_t n_out = quick ? 3584 : 14336, n_in = 4096;
    const int64_t rows_list[] = {1, 8, 32, 512};
    const int n_rows_list = 4;
    const di_dtype types[] = {DI_DTYPE_Q4_0, DI_DTYPE_Q4_1, DI_DTYPE_Q5_0, DI_DTYPE_Q8_0, DI_DTYPE_Q4_K,
                              DI_DTYPE_Q6_K, DI_DTYPE_F16,  DI_DTYPE_BF16, DI_DTYPE_F32};
    const int n_types = (int)(sizeof types / sizeof types[0]);

    size_t tbl_cap = 16384, tbl_len = 0;
    char *tbl = malloc(tbl_cap);
    if (!tbl) return 1;
#define EMIT(...) (tbl_len += (size_t)snprintf(tbl + tbl_len, tbl_cap - tbl_len, __VA_ARGS__))
    EMIT("# CUDA kernel micro-benchmark\n\nGPU: %s\n\n", desc);
    EMIT("Matmul W (%lld x %lld) times x (rows x %lld), f32 activations and accumulation (exact path, CUDA "
         "cores). GB/s: weight bytes per second (peak %.0f); TFLOP/s: 2 rows n_in n_out per second (peaks: FP32 "
         "%.0f, BF16 tensor cores %.0f).\n\n",
         (long long)n_out, (long long)n_in, (long long)n_in, PEAK_HBM_GBPS, PEAK_FP32_TFLOPS, PEAK_BF16_TC_TFLOPS);
    EMIT("| dtype | weights MB | rows | kernel | us | GB/s | %% HBM | TFLOP/s | %% FP32 |\n");
    EMIT("|---|---|---|---|---|---|---|---|---|\n");

    float *dx = NULL, *dy = NULL;
    if (di_cuda_alloc(c, sizeof(float) * 512 * (size_t)n_in, (void **)&dx, &e) ||
        di_cuda_alloc(c, sizeof(float) * 512 * (size_t)n_out, (void **)&dy, &e))
        die("alloc", &e);
    float *hx = malloc(sizeof(float) * 512 * (size_t)n_in);
    if (!hx) return 1;
    for (int64_t i = 0; i < 512 * n_in; i++) hx[i] = (float)((i * 2654435761u) % 2001) / 1000.0f - 1.0f;
    if (di_cuda_upload(c, dx, hx, sizeof(float) * 512 * (size_t)n_in, &e)) die("upload", &e);

    for (int ti = 0; ti < n_types; ti++) {
        uint64_t rb = 0;
        if (di_dtype_row_bytes(types[ti], n_in, &rb)) return 1;
        size_t wbytes = (size_t)(rb * (uint64_t)n_out);
        void *hw = malloc(wbytes), *dw = NULL;
        if (!hw) return 1;
        fill_random(hw, wbytes);
        if (types[ti] == DI_DTYPE_F32 || types[ti] == DI_DTYPE_F16 || types[ti] == DI_DTYPE_BF16)
            for (size_t i = 1; i < wbytes; i += 2) ((uint8_t *)hw)[i] &= 0x3f; /* finite, modest values */
        if (di_cuda_alloc(c, wbytes, &dw, &e) || di_cuda_upload(c, dw, hw, wbytes, &e)) die("weights", &e);
        free(hw);
        for (int ri = 0; ri < n_rows_list; ri++) {
            int64_t rows = rows_list[ri];
            mm_run m = {c, {.dtype = types[ti], .w = dw, .row_bytes = rb, .x = dx, .ldx = n_in, .y = dy, .ldy = n_out,
                            .n_rows = rows, .n_in = n_in, .n_out = n_out, .path = DI_CUDA_MM_AUTO}};
            double t = time_matmul(&m);
            double gbps = (double)wbytes / t * 1e-9, tflops = 2.0 * (double)rows * n_in * n_out / t * 1e-12;
            EMIT("| %s | %.1f | %lld | %s | %.1f | %.0f | %.1f | %.2f | %.1f |\n", di_dtype_traits_of(types[ti])->name,
                 (double)wbytes / 1e6, (long long)rows, rows <= DI_CUDA_GEMV_MAX_ROWS ? "gemv" : "gemm", t * 1e6,
                 gbps, 100.0 * gbps / PEAK_HBM_GBPS, tflops, 100.0 * tflops / PEAK_FP32_TFLOPS);
            printf("%s rows %lld: %.1f us\n", di_dtype_traits_of(types[ti])->name, (long long)rows, t * 1e6);
            fflush(stdout);
        }
        di_cuda_free(c, dw);
    }

    /* paged attention decode, Llama-3-8B heads (32 query, 8 KV, head_dim
     * 128), blocks of 16: many sequences, then one long one (split-K) */
    const int32_t attn_cfg[2][2] = {{32, quick ? 1024 : 4096}, {1, quick ? 8192 : 32768}};
    EMIT("\n| attention decode | K+V MB read | us | GB/s | %% HBM |\n|---|---|---|---|---|\n");
    for (int ci = 0; ci < 2; ci++) {
        const int32_t seqs = attn_cfg[ci][0], ctx_len = attn_cfg[ci][1], n_heads = 32, n_kv = 8, hd = 128, bs = 16;
        const int32_t max_blocks = ctx_len / bs, nb = seqs * max_blocks;
        const size_t cache_bytes = (size_t)nb * bs * n_kv * hd * sizeof(uint16_t);
        di_cuda_kv_layer kv = {.n_blocks = nb, .block_size = bs, .n_kv_heads = n_kv, .head_dim = hd};
        int32_t *tables = malloc(sizeof(int32_t) * (size_t)nb), *row_seq = malloc(sizeof(int32_t) * (size_t)seqs);
        int32_t *pos = malloc(sizeof(int32_t) * (size_t)seqs);
        if (!tables || !row_seq || !pos) return 1;
        for (int32_t i = 0; i < nb; i++) tables[i] = (int32_t)(((int64_t)i * 7919) % nb); /* scattered blocks */
        for (int32_t s = 0; s < seqs; s++) row_seq[s] = s, pos[s] = ctx_len - 1;
        int32_t *dt = NULL, *dseq = NULL, *dpos = NULL;
        float *dq = NULL, *dout = NULL;
        if (di_cuda_alloc(c, cache_bytes, (void **)&kv.k, &e) || di_cuda_alloc(c, cache_bytes, (void **)&kv.v, &e) ||
            di_cuda_memset(c, kv.k, 0x11, cache_bytes, &e) || di_cuda_memset(c, kv.v, 0x22, cache_bytes, &e) ||
            di_cuda_alloc(c, sizeof(int32_t) * (size_t)nb, (void **)&dt, &e) ||
            di_cuda_upload(c, dt, tables, sizeof(int32_t) * (size_t)nb, &e) ||
            di_cuda_alloc(c, sizeof(int32_t) * (size_t)seqs, (void **)&dseq, &e) ||
            di_cuda_upload(c, dseq, row_seq, sizeof(int32_t) * (size_t)seqs, &e) ||
            di_cuda_alloc(c, sizeof(int32_t) * (size_t)seqs, (void **)&dpos, &e) ||
            di_cuda_upload(c, dpos, pos, sizeof(int32_t) * (size_t)seqs, &e) ||
            di_cuda_alloc(c, sizeof(float) * (size_t)seqs * n_heads * hd, (void **)&dq, &e) ||
            di_cuda_memset(c, dq, 0, sizeof(float) * (size_t)seqs * n_heads * hd, &e) ||
            di_cuda_alloc(c, sizeof(float) * (size_t)seqs * n_heads * hd, (void **)&dout, &e))
            die("attention buffers", &e);
        di_cuda_attn_args aa = {.q = dq, .n_rows = seqs, .n_heads = n_heads, .scale = 0.088f, .kv = &kv,
                                .block_tables = dt, .n_seqs = seqs, .max_blocks = max_blocks, .row_seq = dseq,
                                .pos = dpos, .window = 0, .out = dout};
        for (int i = 0; i < WARMUPS; i++)
            if (di_cuda_attention(c, &aa, &e)) die("attention", &e);
        if (di_cuda_sync(c, &e)) die("sync", &e);
        int iters = 0;
        double t0 = now_s(), dt_s = 0.0;
        do {
            if (di_cuda_attention(c, &aa, &e)) die("attention", &e);
            iters++;
            if (iters % 8 == 0) {
                if (di_cuda_sync(c, &e)) die("sync", &e);
                dt_s = now_s() - t0;
            }
        } while (dt_s < MIN_TIMED_SECONDS);
        double ta = dt_s / iters, kv_gbps = 2.0 * (double)cache_bytes / ta * 1e-9;
        EMIT("| %d seqs x %d positions, %d/%d heads of %d | %.0f | %.1f | %.0f | %.1f |\n", (int)seqs, (int)ctx_len,
             (int)n_heads, (int)n_kv, (int)hd, 2.0 * (double)cache_bytes / 1e6, ta * 1e6, kv_gbps,
             100.0 * kv_gbps / PEAK_HBM_GBPS);
        printf("attention %d x %d: %.1f us\n", (int)seqs, (int)ctx_len, ta * 1e6);
        di_cuda_free(c, dout);
        di_cuda_free(c, dq);
        di_cuda_free(c, dpos);
        di_cuda_free(c, dseq);
        di_cuda_free(c, dt);
        di_cuda_free(c, kv.k);
        di_cuda_free(c, kv.v);
        free(tables);
        free(row_seq);
        free(pos);
    }

    fputs(tbl, stdout);
    if (out_path) {
        FILE *f = fopen(out_path, "w");
        if (!f || fputs(tbl, f) < 0 || fclose(f)) {
            fprintf(stderr, "bench_cuda: cannot write %s\n", out_path);
            return 1;
        }
    }
    di_cuda_free(c, dx);
    di_cuda_free(c, dy);
    di_cuda_ctx_free(c);
    free(hx);
    free(tbl);
    return 0;
}
