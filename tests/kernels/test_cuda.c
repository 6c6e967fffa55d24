/* kernels/cuda against the CPU kernels and the exact references, on the same
 * random inputs (fixed seed), plus batch invariance.
 *
 * Tolerances, per kernel, and why:
 *  - dequant, embedding gather (every weight dtype), RoPE, SwiGLU, GeGLU,
 *    the f16 KV store, add, scale, row gather: EXACT (memcmp). The device code performs the CPU
 *    reference's operations in its order with each one rounded (nvcc
 *    -fmad=false; the CPU's C is ISO C11, which gcc does not contract), and
 *    RoPE's angles come from di_rope_angles on the host.
 *  - matmul, every dtype: EXACTLY the bits of di_cuda_host_matmul_row (the
 *    fixed reduction order run on the host), and
 *    |y - ref| <= (n_in / 32 + 5 + 1) u sum_i |w_i x_i|,
 *    u = 2^-24, against di_matmul_ref (double accumulation of the exactly
 *    dequantized weights). Each lane adds n_in / 32 products in order with
 *    fmaf (one rounding each), then 5 butterfly adds: the first-order
 *    error bound of that sum. The dtype does not enter: dequantization is
 *    exact, so every dtype has the same bound.
 *  - RMSNorm: within 2 ulp of di_rmsnorm: both sum squares in double (in
 *    another order), so the float mean square can differ in its last bit,
 *    which moves the scale (1/sqrt) by at most about one ulp.
 *  - softcap: within 8 ulp of cap * tanhf(x / cap): CUDA's tanhf is within
 *    2 ulp of tanh, glibc's within 1, then one multiply.
 *  - attention (split-K over fixed 512-key segments, then merged): per
 *    output, (4 d + (n_keys / 32 + 40) u) max|v| where d =
 *    (head_dim + 2) u max_t sum_i |q_i k_ti| scale + 2^-22 bounds a score's
 *    error plus the exp polynomial's (the CPU kernel sums in another order).
 *  - batch invariance (matmul: one row alone vs the same row inside batches
 *    of 7 and 32, GEMV vs GEMM; attention: rows alone vs batched, prefill
 *    vs decode): BIT-IDENTICAL.
 *
 * No cmocka: this binary is carried to a device machine whose image need
 * not have it. Without a usable GPU it prints one line and exits 77 (ctest
 * reports it skipped); with DI_CUDA_REQUIRE=1 (make test-cuda) that is a
 * failure instead. */
#include "kernels/backend.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cuda/backend_cuda.h"
#include "kernels/cuda/cuda_kernels.h"
#include "tensor/dtype.h"
#include "tensor/half.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SKIP_EXIT 77

static int n_checks, n_failed;
static di_cuda_ctx *ctx;

#define CHECK(cond, ...)                                                                                    \
    do {                                                                                                    \
        n_checks++;                                                                                         \
        if (!(cond)) {                                                                                      \
            n_failed++;                                                                                     \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                                     \
            printf(__VA_ARGS__);                                                                            \
            printf("\n");                                                                                   \
        }                                                                                                   \
    } while (0)

/* A CUDA call that must succeed; on failure the test stops (state unknown). */
#define MUST(call)                                                                                          \
    do {                                                                                                    \
        di_error e_ = {0};                                                                                  \
        if ((call) != DI_OK) {                                                                              \
            printf("FATAL %s:%d: %s: %s\n", __FILE__, __LINE__, #call, e_.msg);                             \
            exit(1);                                                                                        \
        }                                                                                                   \
    } while (0)
#define E (&e_)

/* ---- data ------------------------------------------------------------- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rnd64(void) { /* splitmix64 */
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static float rndf(void) { return (float)(rnd64() >> 40) / 16777216.0f * 2.0f - 1.0f; } /* [-1, 1) */

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        printf("FATAL: out of host memory\n");
        exit(1);
    }
    return p;
}

/* Device copy of host data; the caller frees it with di_cuda_free. */
static void *to_dev(const void *h, size_t bytes) {
    void *d = NULL;
    MUST(di_cuda_alloc(ctx, bytes, &d, E));
    MUST(di_cuda_upload(ctx, d, h, bytes, E));
    return d;
}

static void from_dev(void *h, const void *d, size_t bytes) {
    MUST(di_cuda_sync(ctx, E));
    MUST(di_cuda_download(ctx, h, d, bytes, E));
}

static const di_dtype weight_types[] = {DI_DTYPE_F32,  DI_DTYPE_F16,  DI_DTYPE_BF16, DI_DTYPE_Q4_0, DI_DTYPE_Q4_1,
                                        DI_DTYPE_Q5_0, DI_DTYPE_Q8_0, DI_DTYPE_Q4_K, DI_DTYPE_Q6_K};
#define N_WEIGHT_TYPES (int)(sizeof weight_types / sizeof weight_types[0])

static const char *dname(di_dtype t) { return di_dtype_traits_of(t)->name; }

/* (n_rows, n) random weights quantized to t: values with a per-row scale
 * spread over 2^-6 .. 2^6, so block scales of every size occur. */
static uint8_t *make_weights(di_dtype t, int64_t n_rows, int64_t n, uint64_t *row_bytes) {
    if (di_dtype_row_bytes(t, n, row_bytes) != DI_OK) {
        printf("FATAL: %s rows of %lld\n", dname(t), (long long)n);
        exit(1);
    }
    uint8_t *w = xmalloc((size_t)(*row_bytes * (uint64_t)n_rows));
    float *f = xmalloc(sizeof(float) * (size_t)n);
    for (int64_t r = 0; r < n_rows; r++) {
        float scale = ldexpf(1.0f, (int)(rnd64() % 13) - 6);
        for (int64_t i = 0; i < n; i++) f[i] = rndf() * scale * (i % 97 == 0 ? 8.0f : 1.0f);
        MUST(di_dtype_row_from_float(t, f, w + (uint64_t)r * *row_bytes, n, E));
    }
    free(f);
    return w;
}

static int bits_equal(const float *a, const float *b, int64_t n, int64_t *at) {
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], 4)) {
            *at = i;
            return 0;
        }
    return 1;
}

/* ---- dequantization and embeddings ----------------------------------------- */

static void dequant_matches_the_cpu_bit_for_bit(void) {
    const int64_t n_rows = 5, n = 1280; /* 5 K-quant super-blocks, 40 chunks */
    for (int ti = 0; ti < N_WEIGHT_TYPES; ti++) {
        di_dtype t = weight_types[ti];
        uint64_t rb;
        uint8_t *w = make_weights(t, n_rows, n, &rb);
        float *want = xmalloc(sizeof(float) * (size_t)(n_rows * n)), *got = xmalloc(sizeof(float) * (size_t)(n_rows * n));
        for (int64_t r = 0; r < n_rows; r++) MUST(di_dtype_row_to_float(t, w + r * rb, want + r * n, n, E));
        void *dw = to_dev(w, rb * n_rows);
        float *dout = NULL;
        MUST(di_cuda_alloc(ctx, sizeof(float) * (size_t)(n_rows * n), (void **)&dout, E));
        MUST(di_cuda_dequant(ctx, t, dw, rb, n_rows, n, dout, E));
        from_dev(got, dout, sizeof(float) * (size_t)(n_rows * n));
        int64_t bad = -1;
        for (int64_t i = 0; i < n_rows * n && bad < 0; i++)
            if (memcmp(&got[i], &want[i], 4)) bad = i;
        CHECK(bad < 0, "dequant %s: element %lld is %.9g, the CPU's %.9g", dname(t), (long long)bad,
              bad >= 0 ? got[bad] : 0.0, bad >= 0 ? want[bad] : 0.0);

        /* the embedding gather: repeated and out-of-order ids */
        int32_t ids[9] = {4, 0, 2, 2, 3, 1, 4, 0, 3};
        int32_t *did = to_dev(ids, sizeof ids);
        float *demb = NULL, *emb = xmalloc(sizeof(float) * (size_t)(9 * n));
        MUST(di_cuda_alloc(ctx, sizeof(float) * (size_t)(9 * n), (void **)&demb, E));
        MUST(di_cuda_embed(ctx, t, dw, rb, n_rows, did, 9, n, demb, E));
        from_dev(emb, demb, sizeof(float) * (size_t)(9 * n));
        int same = 1;
        for (int j = 0; j < 9; j++) same &= !memcmp(emb + j * n, want + ids[j] * n, sizeof(float) * (size_t)n);
        CHECK(same, "embed %s: a gathered row differs from the CPU's dequantized row", dname(t));
        di_cuda_free(ctx, demb);
        di_cuda_free(ctx, did);
        di_cuda_free(ctx, dout);
        di_cuda_free(ctx, dw);
        free(emb);
        free(got);
        free(want);
        free(w);
    }
}

/* No GPU needed: the dequantizers' source compiled for the host. */
static void host_dequant_matches_the_cpu_bit_for_bit(void) {
    const int64_t n = 2048;
    float *want = xmalloc(sizeof(float) * (size_t)n), *got = xmalloc(sizeof(float) * (size_t)n);
    for (int ti = 0; ti < N_WEIGHT_TYPES; ti++) {
        di_dtype t = weight_types[ti];
        uint64_t rb;
        uint8_t *w = make_weights(t, 1, n, &rb);
        MUST(di_dtype_row_to_float(t, w, want, n, E));
        MUST(di_cuda_host_dequant(t, w, n, got, E));
        int64_t at = 0;
        CHECK(bits_equal(got, want, n, &at), "host dequant %s: element %lld is %.9g, the CPU's %.9g", dname(t),
              (long long)at, got[at], want[at]);
        free(w);
    }
    di_error err = {0};
    CHECK(di_cuda_host_dequant(DI_DTYPE_Q5_1, want, 32, got, &err) == DI_ERR_UNSUPPORTED, "q5_1 is refused");
    CHECK(di_cuda_host_dequant(DI_DTYPE_Q4_K, want, 32, got, &err) == DI_ERR_INVALID_ARG, "32 is no Q4_K row");
    free(got);
    free(want);
}

/* No GPU needed: the CUDA backend table (backend_cuda.c) fills every op,
 * and once registered, --device cuda is refused with its reason (no device
 * here; on a GPU, no model forward yet), never a crash. */
static void backend_table_is_complete_and_refuses_models(void) {
    const di_backend_ops *ops = di_backend_cuda_ops();
    const char *missing = di_backend_ops_missing(ops);
    CHECK(missing == NULL, "cuda backend table: op '%s' is NULL", missing ? missing : "");
    CHECK(ops->name && strcmp(ops->name, "cuda") == 0, "cuda backend table is named '%s'", ops->name);
    di_backend_cuda_register();
    di_error err = {0};
    CHECK(di_device_check("cuda", "llama", &err) == DI_ERR_UNSUPPORTED, "--device cuda is refused");
    CHECK(strstr(err.msg, "no usable CUDA device") || strstr(err.msg, "does not yet implement the llama forward"),
          "--device cuda's reason: %s", err.msg);
}

/* No GPU needed: the matmul's reduction order on the host, within the
 * sum-order bound of di_matmul_ref (the same bound the device must meet,
 * and the device must give exactly these bits). */
static double matmul_bound_ratio(const float *wf, const float *x, const float *y, const float *ref, int64_t n_rows,
                                 int64_t n_in, int64_t n_out) {
    const double u = ldexp(1.0, -24);
    double worst = 0.0; /* error / bound */
    for (int64_t r = 0; r < n_rows; r++)
        for (int64_t o = 0; o < n_out; o++) {
            double abs_sum = 0.0;
            for (int64_t i = 0; i < n_in; i++) abs_sum += fabs((double)wf[o * n_in + i] * x[r * n_in + i]);
            double bound = (double)(n_in / 32 + 5 + 1) * u * abs_sum + 1e-30;
            double e = fabs((double)y[r * n_out + o] - ref[r * n_out + o]) / bound;
            worst = e > worst ? e : worst;
        }
    return worst;
}

static void host_matmul_order_is_within_the_bound(void) {
    const int64_t n_in = 1280, n_out = 20, n_rows = 3;
    float *x = xmalloc(sizeof(float) * (size_t)(n_rows * n_in)), *wf = xmalloc(sizeof(float) * (size_t)(n_out * n_in));
    float *y = xmalloc(sizeof(float) * (size_t)(n_rows * n_out)), *ref = xmalloc(sizeof(float) * (size_t)(n_rows * n_out));
    for (int64_t i = 0; i < n_rows * n_in; i++) x[i] = rndf() * 2.0f;
    for (int ti = 0; ti < N_WEIGHT_TYPES; ti++) {
        di_dtype t = weight_types[ti];
        uint64_t rb;
        uint8_t *w = make_weights(t, n_out, n_in, &rb);
        for (int64_t o = 0; o < n_out; o++) MUST(di_dtype_row_to_float(t, w + o * rb, wf + o * n_in, n_in, E));
        di_matmul_args ra = {.dtype = t, .w = w, .row_bytes = rb, .x = x, .ldx = n_in, .y = ref, .ldy = n_out,
                             .n_rows = n_rows, .n_in = n_in, .n_out = n_out};
        MUST(di_matmul_ref(&ra, E));
        for (int64_t r = 0; r < n_rows; r++) MUST(di_cuda_host_matmul_row(t, w, rb, x + r * n_in, n_in, n_out, y + r * n_out, E));
        double worst = matmul_bound_ratio(wf, x, y, ref, n_rows, n_in, n_out);
        CHECK(worst <= 1.0, "host matmul order %s: error is %.3g of the bound", dname(t), worst);
        free(w);
    }
    free(ref);
    free(y);
    free(wf);
    free(x);
}

static void embed_reports_a_bad_id(void) {
    uint64_t rb;
    uint8_t *w = make_weights(DI_DTYPE_Q8_0, 4, 64, &rb);
    void *dw = to_dev(w, rb * 4);
    int32_t ids[2] = {1, 4}; /* 4 is past a 4-row vocabulary */
    int32_t *did = to_dev(ids, sizeof ids);
    float *dout = NULL;
    MUST(di_cuda_alloc(ctx, sizeof(float) * 128, (void **)&dout, E));
    di_error err = {0};
    CHECK(di_cuda_embed(ctx, DI_DTYPE_Q8_0, dw, rb, 4, did, 2, 64, dout, &err) == DI_OK, "embed launch: %s", err.msg);
    di_status s = di_cuda_sync(ctx, &err);
    CHECK(s == DI_ERR_RANGE && strstr(err.msg, "row id"), "bad id: status %d, '%s'", (int)s, err.msg);
    CHECK(di_cuda_sync(ctx, &err) == DI_OK, "the flag is cleared once reported: %s", err.msg);
    di_cuda_free(ctx, dout);
    di_cuda_free(ctx, did);
    di_cuda_free(ctx, dw);
    free(w);
}

/* ---- matmul --------------------------------------------------------------- */

/* y (n_rows, n_out) = W x on the device with path. */
static void run_matmul(di_dtype t, const void *dw, uint64_t rb, const float *dx, int64_t n_rows, int64_t n_in,
                       int64_t n_out, di_cuda_mm_path path, float *y_host) {
    float *dy = NULL;
    MUST(di_cuda_alloc(ctx, sizeof(float) * (size_t)(n_rows * n_out), (void **)&dy, E));
    di_cuda_matmul_args a = {.dtype = t, .w = dw, .row_bytes = rb, .x = dx, .ldx = n_in, .y = dy, .ldy = n_out,
                             .n_rows = n_rows, .n_in = n_in, .n_out = n_out, .path = path};
    MUST(di_cuda_matmul(ctx, &a, E));
    from_dev(y_host, dy, sizeof(float) * (size_t)(n_rows * n_out));
    di_cuda_free(ctx, dy);
}

static void matmul_is_within_the_sum_order_bound(void) {
    const int64_t n_in = 1280, n_out = 70, n_rows = 33;
    float *x = xmalloc(sizeof(float) * (size_t)(n_rows * n_in));
    float *twin = xmalloc(sizeof(float) * (size_t)(n_rows * n_out));
    for (int64_t i = 0; i < n_rows * n_in; i++) x[i] = rndf() * 2.0f;
    float *dx = to_dev(x, sizeof(float) * (size_t)(n_rows * n_in));
    float *y = xmalloc(sizeof(float) * (size_t)(n_rows * n_out)), *ref = xmalloc(sizeof(float) * (size_t)(n_rows * n_out));
    float *wf = xmalloc(sizeof(float) * (size_t)(n_out * n_in));
    for (int ti = 0; ti < N_WEIGHT_TYPES; ti++) {
        di_dtype t = weight_types[ti];
        uint64_t rb;
        uint8_t *w = make_weights(t, n_out, n_in, &rb);
        for (int64_t o = 0; o < n_out; o++) MUST(di_dtype_row_to_float(t, w + o * rb, wf + o * n_in, n_in, E));
        di_matmul_args ra = {.dtype = t, .w = w, .row_bytes = rb, .x = x, .ldx = n_in, .y = ref, .ldy = n_out,
                             .n_rows = n_rows, .n_in = n_in, .n_out = n_out};
        MUST(di_matmul_ref(&ra, E));
        void *dw = to_dev(w, rb * n_out);
        for (int64_t r = 0; r < n_rows; r++)
            MUST(di_cuda_host_matmul_row(t, w, rb, x + r * n_in, n_in, n_out, twin + r * n_out, E));
        for (int path = DI_CUDA_MM_GEMV; path <= DI_CUDA_MM_GEMM; path++) {
            run_matmul(t, dw, rb, dx, n_rows, n_in, n_out, (di_cuda_mm_path)path, y);
            double worst = matmul_bound_ratio(wf, x, y, ref, n_rows, n_in, n_out);
            const char *pname = path == DI_CUDA_MM_GEMV ? "gemv" : "gemm";
            CHECK(worst <= 1.0, "matmul %s (%s): error is %.3g of the bound", dname(t), pname, worst);
            int64_t at = 0;
            CHECK(bits_equal(y, twin, n_rows * n_out, &at), "matmul %s (%s): output %lld is %.9g, the host twin's %.9g",
                  dname(t), pname, (long long)at, y[at], twin[at]);
        }
        di_cuda_free(ctx, dw);
        free(w);
    }
    di_cuda_free(ctx, dx);
    free(twin);
    free(wf);
    free(ref);
    free(y);
    free(x);
}

/* One row alone, inside a batch of 7 and inside a batch of 32, through the
 * AUTO choice and both forced paths: the same bits everywhere. */
static void matmul_rows_do_not_depend_on_the_batch(void) {
    const int64_t n_in = 2048, n_out = 300;
    float *x = xmalloc(sizeof(float) * 32 * (size_t)n_in);
    for (int64_t i = 0; i < 32 * n_in; i++) x[i] = rndf();
    float *dx = to_dev(x, sizeof(float) * 32 * (size_t)n_in);
    float *y32 = xmalloc(sizeof(float) * 32 * (size_t)n_out), *y7 = xmalloc(sizeof(float) * 7 * (size_t)n_out);
    float *y1 = xmalloc(sizeof(float) * (size_t)n_out);
    for (int ti = 0; ti < N_WEIGHT_TYPES; ti++) {
        di_dtype t = weight_types[ti];
        uint64_t rb;
        uint8_t *w = make_weights(t, n_out, n_in, &rb);
        void *dw = to_dev(w, rb * n_out);
        int same = 1;
        for (int path = DI_CUDA_MM_AUTO; path <= DI_CUDA_MM_GEMM; path++) {
            run_matmul(t, dw, rb, dx, 32, n_in, n_out, (di_cuda_mm_path)path, y32);
            /* rows 13..19 as a batch of 7: row 13 lands at tile position 0, not 5 */
            run_matmul(t, dw, rb, dx + 13 * n_in, 7, n_in, n_out, (di_cuda_mm_path)path, y7);
            for (int64_t j = 13; j < 20; j++) {
                run_matmul(t, dw, rb, dx + j * n_in, 1, n_in, n_out, DI_CUDA_MM_AUTO, y1);
                same &= !memcmp(y1, y7 + (j - 13) * n_out, sizeof(float) * (size_t)n_out);
                same &= !memcmp(y1, y32 + j * n_out, sizeof(float) * (size_t)n_out);
            }
        }
        CHECK(same, "matmul %s: a row's bits depend on its batch or the kernel", dname(t));
        di_cuda_free(ctx, dw);
        free(w);
    }
    di_cuda_free(ctx, dx);
    free(y1);
    free(y7);
    free(y32);
    free(x);
}

static void matmul_refuses_bad_arguments(void) {
    di_error err = {0};
    float *dx = NULL;
    MUST(di_cuda_alloc(ctx, 4096, (void **)&dx, E));
    di_cuda_matmul_args a = {.dtype = DI_DTYPE_Q5_1, .w = dx, .row_bytes = 24, .x = dx, .ldx = 32, .y = dx,
                             .ldy = 1, .n_rows = 1, .n_in = 32, .n_out = 1};
    CHECK(di_cuda_matmul(ctx, &a, &err) == DI_ERR_UNSUPPORTED && strstr(err.msg, "q5_1"), "q5_1: '%s'", err.msg);
    a.dtype = DI_DTYPE_Q4_0;
    a.n_in = a.ldx = 48;
    CHECK(di_cuda_matmul(ctx, &a, &err) != DI_OK, "48 inputs are not whole Q4_0 chunks");
    a.n_in = a.ldx = 32;
    a.row_bytes = 10;
    CHECK(di_cuda_matmul(ctx, &a, &err) == DI_ERR_INVALID_ARG, "a row stride below one block: '%s'", err.msg);
    a.row_bytes = 18;
    a.ldy = 0;
    CHECK(di_cuda_matmul(ctx, &a, &err) == DI_ERR_INVALID_ARG, "ldy below n_out");
    CHECK(di_cuda_matmul(NULL, &a, &err) == DI_ERR_INVALID_ARG, "NULL context");
    CHECK(di_cuda_sync(ctx, &err) == DI_OK, "refused calls queue nothing: %s", err.msg);
    di_cuda_free(ctx, dx);
}

/* ---- per-row and elementwise ops ------------------------------------------------ */

static void rmsnorm_is_within_two_ulp(void) {
    const int64_t sizes[2] = {576, 2304};
    for (int si = 0; si < 2; si++) {
        const int64_t n = sizes[si], rows = 6;
        float *x = xmalloc(sizeof(float) * (size_t)(rows * n)), *w = xmalloc(sizeof(float) * (size_t)n);
        float *want = xmalloc(sizeof(float) * (size_t)(rows * n)), *got = xmalloc(sizeof(float) * (size_t)(rows * n));
        for (int64_t i = 0; i < rows * n; i++) x[i] = rndf() * (float)(1 + i / n * 10);
        for (int64_t i = 0; i < n; i++) w[i] = 1.0f + rndf() * 0.5f;
        di_rmsnorm(x, w, want, rows, n, 1e-6f);
        float *dx = to_dev(x, sizeof(float) * (size_t)(rows * n)), *dw = to_dev(w, sizeof(float) * (size_t)n);
        MUST(di_cuda_rmsnorm(ctx, dx, dw, dx, rows, n, 1e-6f, E)); /* in place, as the forwards call it */
        from_dev(got, dx, sizeof(float) * (size_t)(rows * n));
        double worst = 0.0;
        for (int64_t i = 0; i < rows * n; i++) {
            double e = fabs((double)got[i] - want[i]) / (ldexp(fabs(want[i]), -23) + 1e-38);
            worst = e > worst ? e : worst;
        }
        CHECK(worst <= 2.0, "rmsnorm n=%lld: %.2f ulp from the CPU", (long long)n, worst);
        di_cuda_free(ctx, dx);
        di_cuda_free(ctx, dw);
        free(got);
        free(want);
        free(w);
        free(x);
    }
}

static void rope_matches_the_cpu_bit_for_bit(void) {
    const int32_t heads = 5, hd = 64, rows = 9;
    for (int neox = 0; neox <= 1; neox++)
        for (int32_t n_rot = 32; n_rot <= 64; n_rot += 32) {
            const int64_t n = (int64_t)rows * heads * hd;
            float *x = xmalloc(sizeof(float) * (size_t)n), *want = xmalloc(sizeof(float) * (size_t)n);
            float *got = xmalloc(sizeof(float) * (size_t)n), inv[32], *cs = xmalloc(sizeof(float) * (size_t)(rows * n_rot));
            int32_t pos[9] = {0, 1, 2, 17, 100, 511, 4095, 32767, 131071};
            for (int i = 0; i < n_rot / 2; i++) inv[i] = powf(10000.0f, -2.0f * (float)i / (float)n_rot);
            for (int64_t i = 0; i < n; i++) x[i] = want[i] = rndf() * 4.0f;
            di_rope(want, pos, rows, heads, hd, n_rot, inv, neox);
            for (int r = 0; r < rows; r++) di_rope_angles(pos[r], n_rot, inv, cs + r * n_rot);
            float *dx = to_dev(x, sizeof(float) * (size_t)n), *dcs = to_dev(cs, sizeof(float) * (size_t)(rows * n_rot));
            MUST(di_cuda_rope(ctx, dx, dcs, rows, heads, hd, n_rot, neox, E));
            from_dev(got, dx, sizeof(float) * (size_t)n);
            int64_t at = 0;
            CHECK(bits_equal(got, want, n, &at), "rope neox=%d n_rot=%d: element %lld %.9g vs %.9g", neox, (int)n_rot,
                  (long long)at, got[at], want[at]);
            di_cuda_free(ctx, dx);
            di_cuda_free(ctx, dcs);
            free(cs);
            free(got);
            free(want);
            free(x);
        }
}

/* Gates over a wide range (tiny, large, both signs, exact zeros) for both
 * gated activations. */
static void glu_matches_the_cpu_bit_for_bit(void) {
    const int64_t n = 8192 + 77;
    float *g = xmalloc(sizeof(float) * (size_t)n), *u = xmalloc(sizeof(float) * (size_t)n);
    float *want = xmalloc(sizeof(float) * (size_t)n), *got = xmalloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        g[i] = rndf() * ldexpf(1.0f, (int)(rnd64() % 24) - 16) * 100.0f;
        u[i] = rndf() * 3.0f;
    }
    g[0] = 0.0f;
    g[1] = -0.0f;
    g[2] = -200.0f;
    g[3] = 200.0f;
    float *du = to_dev(u, sizeof(float) * (size_t)n);
    for (int geglu = 0; geglu <= 1; geglu++) {
        memcpy(want, g, sizeof(float) * (size_t)n);
        if (geglu) di_geglu(want, u, n);
        else di_swiglu(want, u, n);
        float *dg = to_dev(g, sizeof(float) * (size_t)n);
        if (geglu) MUST(di_cuda_geglu(ctx, dg, du, n, E));
        else MUST(di_cuda_swiglu(ctx, dg, du, n, E));
        from_dev(got, dg, sizeof(float) * (size_t)n);
        int64_t at = 0;
        CHECK(bits_equal(got, want, n, &at), "%s: element %lld (gate %.9g) %.9g vs %.9g", geglu ? "geglu" : "swiglu",
              (long long)at, g[at], got[at], want[at]);
        di_cuda_free(ctx, dg);
    }
    di_cuda_free(ctx, du);
    free(got);
    free(want);
    free(u);
    free(g);
}

static void softcap_is_within_eight_ulp(void) {
    const int64_t n = 4096;
    const float cap = 30.0f; /* Gemma's final_logit_softcapping */
    float *x = xmalloc(sizeof(float) * (size_t)n), *got = xmalloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) x[i] = rndf() * 100.0f;
    float *dx = to_dev(x, sizeof(float) * (size_t)n);
    MUST(di_cuda_softcap(ctx, dx, n, cap, E));
    from_dev(got, dx, sizeof(float) * (size_t)n);
    double worst = 0.0;
    for (int64_t i = 0; i < n; i++) {
        float want = cap * tanhf(x[i] / cap); /* llama.c's formula */
        double e = fabs((double)got[i] - want) / (ldexp(fabs(want), -23) + 1e-38);
        worst = e > worst ? e : worst;
    }
    CHECK(worst <= 8.0, "softcap: %.2f ulp from cap * tanhf(x / cap)", worst);
    di_error err = {0};
    CHECK(di_cuda_softcap(ctx, dx, n, 0.0f, &err) == DI_ERR_INVALID_ARG, "cap 0 is refused");
    di_cuda_free(ctx, dx);
    free(got);
    free(x);
}

/* add, scale and the row gather: single roundings, so exact */
static void add_scale_gather_are_exact(void) {
    const int64_t rows = 5, n = 576;
    float *x = xmalloc(sizeof(float) * (size_t)(rows * n)), *y = xmalloc(sizeof(float) * (size_t)(rows * n));
    float *got = xmalloc(sizeof(float) * (size_t)(rows * n)), *want = xmalloc(sizeof(float) * (size_t)(rows * n));
    for (int64_t i = 0; i < rows * n; i++) x[i] = rndf() * 10.0f, y[i] = rndf();
    const float s = sqrtf(576.0f);
    for (int64_t i = 0; i < rows * n; i++) want[i] = (x[i] + y[i]) * s;
    float *dx = to_dev(x, sizeof(float) * (size_t)(rows * n)), *dy = to_dev(y, sizeof(float) * (size_t)(rows * n));
    MUST(di_cuda_add(ctx, dx, dy, rows * n, E));
    MUST(di_cuda_scale(ctx, dx, rows * n, s, E));
    from_dev(got, dx, sizeof(float) * (size_t)(rows * n));
    int64_t at = 0;
    CHECK(bits_equal(got, want, rows * n, &at), "add+scale: element %lld", (long long)at);
    int32_t idx[3] = {4, 0, 4};
    int32_t *didx = to_dev(idx, sizeof idx);
    MUST(di_cuda_gather_rows(ctx, dx, rows, n, didx, 3, dy, E));
    from_dev(got, dy, sizeof(float) * 3 * (size_t)n);
    int same = 1;
    for (int j = 0; j < 3; j++) same &= !memcmp(got + j * n, want + idx[j] * n, sizeof(float) * (size_t)n);
    CHECK(same, "gather_rows: a row differs");
    idx[1] = 5;
    MUST(di_cuda_upload(ctx, didx, idx, sizeof idx, E));
    MUST(di_cuda_gather_rows(ctx, dx, rows, n, didx, 3, dy, E));
    di_error err = {0};
    CHECK(di_cuda_sync(ctx, &err) == DI_ERR_RANGE, "gather_rows: row 5 of 5 is refused: '%s'", err.msg);
    di_cuda_free(ctx, didx);
    di_cuda_free(ctx, dy);
    di_cuda_free(ctx, dx);
    free(want);
    free(got);
    free(y);
    free(x);
}

/* ---- KV cache and attention ----------------------------------------------------- */

typedef struct attn_case {
    int32_t n_heads, n_kv, hd, bs, n_blocks, window;
} attn_case;

static void kv_store_rounds_like_the_cpu(void) {
    const int32_t n_kv = 2, hd = 64, bs = 16, n_blocks = 4;
    const int64_t row = n_kv * hd, slots_total = (int64_t)n_blocks * bs;
    di_cuda_kv_layer kv = {.n_blocks = n_blocks, .block_size = bs, .n_kv_heads = n_kv, .head_dim = hd};
    MUST(di_cuda_alloc(ctx, sizeof(uint16_t) * (size_t)(slots_total * row), (void **)&kv.k, E));
    MUST(di_cuda_alloc(ctx, sizeof(uint16_t) * (size_t)(slots_total * row), (void **)&kv.v, E));
    MUST(di_cuda_memset(ctx, kv.k, 0, sizeof(uint16_t) * (size_t)(slots_total * row), E));
    MUST(di_cuda_memset(ctx, kv.v, 0, sizeof(uint16_t) * (size_t)(slots_total * row), E));
    float k[3 * 128], v[3 * 128];
    for (int i = 0; i < 3 * 128; i++) {
        k[i] = rndf() * ldexpf(1.0f, (int)(rnd64() % 40) - 24); /* f16 subnormals to past 65504 */
        v[i] = rndf() * 70000.0f;
    }
    int32_t slots[3] = {5, 63, 17};
    float *dk = to_dev(k, sizeof k), *dv = to_dev(v, sizeof v);
    int32_t *ds = to_dev(slots, sizeof slots);
    MUST(di_cuda_kv_store(ctx, &kv, dk, dv, ds, 3, E));
    uint16_t *hk = xmalloc(sizeof(uint16_t) * (size_t)(slots_total * row)), *hv = xmalloc(sizeof(uint16_t) * (size_t)(slots_total * row));
    from_dev(hk, kv.k, sizeof(uint16_t) * (size_t)(slots_total * row));
    from_dev(hv, kv.v, sizeof(uint16_t) * (size_t)(slots_total * row));
    int same = 1;
    for (int r = 0; r < 3; r++)
        for (int64_t e = 0; e < row; e++) {
            same &= hk[slots[r] * row + e] == di_f32_to_f16(k[r * row + e]);
            same &= hv[slots[r] * row + e] == di_f32_to_f16(v[r * row + e]);
        }
    CHECK(same, "kv store: an f16 differs from di_f32_to_f16");
    slots[1] = 64; /* past 4 blocks of 16 */
    MUST(di_cuda_upload(ctx, ds, slots, sizeof slots, E));
    MUST(di_cuda_kv_store(ctx, &kv, dk, dv, ds, 3, E));
    di_error err = {0};
    CHECK(di_cuda_sync(ctx, &err) == DI_ERR_RANGE && strstr(err.msg, "KV slot"), "bad slot: '%s'", err.msg);
    di_cuda_free(ctx, ds);
    di_cuda_free(ctx, dv);
    di_cuda_free(ctx, dk);
    di_cuda_free(ctx, kv.k);
    di_cuda_free(ctx, kv.v);
    free(hk);
    free(hv);
}

/* Sequences: 0 decodes at pos 0, 1 at 36, 2 at 299, 3 prefills positions
 * 100..119 (20 rows), 4 decodes at 1300 (three split segments of 512), 5
 * at 530 (its window crosses the first split point). Rows 0..24 in that
 * order. The block tables scatter over the cache (longer sequences reuse
 * physical blocks, which attention does not mind). */
#define ATTN_SEQS 6
#define ATTN_ROWS 25

static void attention_case(const attn_case *tc) {
    const int32_t hd = tc->hd, bs = tc->bs, nb = tc->n_blocks;
    const int64_t row = (int64_t)tc->n_kv * hd, slots_total = (int64_t)nb * bs;
    const int64_t qrow = (int64_t)tc->n_heads * hd;
    const int32_t max_blocks = 1400 / bs + 1;
    uint16_t *kc = xmalloc(sizeof(uint16_t) * (size_t)(slots_total * row)), *vc = xmalloc(sizeof(uint16_t) * (size_t)(slots_total * row));
    float maxv = 0.0f;
    for (int64_t i = 0; i < slots_total * row; i++) {
        kc[i] = di_f32_to_f16(rndf());
        float vv = rndf() * 2.0f;
        vc[i] = di_f32_to_f16(vv);
        maxv = fabsf(di_f16_to_f32(vc[i])) > maxv ? fabsf(di_f16_to_f32(vc[i])) : maxv;
    }
    int32_t *tables = xmalloc(sizeof(int32_t) * ATTN_SEQS * (size_t)max_blocks);
    for (int s = 0; s < ATTN_SEQS; s++) {
        int32_t *t = tables + s * max_blocks;
        for (int32_t b = 0; b < max_blocks; b++) t[b] = (b * 7 + s * 3) % nb;
    }
    int32_t row_seq[ATTN_ROWS], pos[ATTN_ROWS];
    row_seq[0] = 0, pos[0] = 0;
    row_seq[1] = 1, pos[1] = 36;
    row_seq[2] = 2, pos[2] = 299;
    for (int j = 0; j < 20; j++) row_seq[3 + j] = 3, pos[3 + j] = 100 + j;
    row_seq[23] = 4, pos[23] = 1300;
    row_seq[24] = 5, pos[24] = 530;
    float *q = xmalloc(sizeof(float) * (size_t)(ATTN_ROWS * qrow));
    for (int64_t i = 0; i < ATTN_ROWS * qrow; i++) q[i] = rndf() * 2.0f;
    const float scale = 1.0f / sqrtf((float)hd);

    /* the CPU kernel */
    float *want = xmalloc(sizeof(float) * (size_t)(ATTN_ROWS * qrow));
    const int32_t *row_blocks[ATTN_ROWS];
    for (int r = 0; r < ATTN_ROWS; r++) row_blocks[r] = tables + row_seq[r] * max_blocks;
    di_attn_args ca = {.q = q, .n_rows = ATTN_ROWS, .n_heads = tc->n_heads, .n_kv_heads = tc->n_kv, .head_dim = hd,
                       .scale = scale, .k_cache = kc, .v_cache = vc, .kv_f16 = 1, .block_size = bs,
                       .row_blocks = row_blocks, .pos = pos, .out = want, .window = tc->window};
    const di_cpu_kernels *k = di_cpu_kernels_best();
    float *scratch = xmalloc(sizeof(float) * (size_t)di_attention_scratch_floats(tc->n_heads, hd, bs));
    di_attention(k, &ca, scratch, NULL);

    /* the device */
    di_cuda_kv_layer kv = {.n_blocks = nb, .block_size = bs, .n_kv_heads = tc->n_kv, .head_dim = hd};
    kv.k = to_dev(kc, sizeof(uint16_t) * (size_t)(slots_total * row));
    kv.v = to_dev(vc, sizeof(uint16_t) * (size_t)(slots_total * row));
    float *dq = to_dev(q, sizeof(float) * (size_t)(ATTN_ROWS * qrow)), *dout = NULL;
    int32_t *dt = to_dev(tables, sizeof(int32_t) * ATTN_SEQS * (size_t)max_blocks);
    int32_t *dseq = to_dev(row_seq, sizeof row_seq), *dpos = to_dev(pos, sizeof pos);
    MUST(di_cuda_alloc(ctx, sizeof(float) * (size_t)(ATTN_ROWS * qrow), (void **)&dout, E));
    di_cuda_attn_args ga = {.q = dq, .n_rows = ATTN_ROWS, .n_heads = tc->n_heads, .scale = scale, .kv = &kv,
                            .block_tables = dt, .n_seqs = ATTN_SEQS, .max_blocks = max_blocks, .row_seq = dseq,
                            .pos = dpos, .window = tc->window, .out = dout};
    MUST(di_cuda_attention(ctx, &ga, E));
    float *got = xmalloc(sizeof(float) * (size_t)(ATTN_ROWS * qrow));
    from_dev(got, dout, sizeof(float) * (size_t)(ATTN_ROWS * qrow));

    const double u = ldexp(1.0, -24);
    double worst = 0.0;
    for (int r = 0; r < ATTN_ROWS; r++) {
        int32_t first = tc->window > 0 && pos[r] >= tc->window ? pos[r] - tc->window + 1 : 0;
        int32_t n_keys = pos[r] - first + 1;
        for (int32_t h = 0; h < tc->n_heads; h++) {
            int32_t kvh = h / (tc->n_heads / tc->n_kv);
            const float *qh = q + r * qrow + (int64_t)h * hd;
            double max_abs_dot = 0.0;
            for (int32_t p = first; p <= pos[r]; p++) {
                const uint16_t *kr = kc + ((int64_t)row_blocks[r][p / bs] * bs + p % bs) * row + (int64_t)kvh * hd;
                double s = 0.0;
                for (int32_t i = 0; i < hd; i++) s += fabs((double)qh[i] * di_f16_to_f32(kr[i]));
                max_abs_dot = s > max_abs_dot ? s : max_abs_dot;
            }
            double d = (hd + 2) * u * max_abs_dot * scale + ldexp(1.0, -22);
            double tol = (4.0 * d + (n_keys / 32 + 40) * u) * maxv;
            for (int32_t i = 0; i < hd; i++) {
                int64_t at = r * qrow + (int64_t)h * hd + i;
                double e = fabs((double)got[at] - want[at]) / tol;
                worst = e > worst ? e : worst;
            }
        }
    }
    CHECK(worst <= 1.0, "attention heads %d/%d hd %d bs %d window %d: error is %.3g of the bound", (int)tc->n_heads,
          (int)tc->n_kv, (int)hd, (int)bs, (int)tc->window, worst);

    /* batch invariance: each row alone (a prefill row decoded by itself) */
    float *one = xmalloc(sizeof(float) * (size_t)qrow);
    int same = 1;
    for (int r = 0; r < ATTN_ROWS; r += (r < 21 ? 3 : 1)) {
        di_cuda_attn_args a1 = ga;
        a1.q = dq + r * qrow;
        a1.n_rows = 1;
        a1.row_seq = dseq + r;
        a1.pos = dpos + r;
        a1.out = dout;
        MUST(di_cuda_attention(ctx, &a1, E));
        from_dev(one, dout, sizeof(float) * (size_t)qrow);
        same &= !memcmp(one, got + r * qrow, sizeof(float) * (size_t)qrow);
    }
    CHECK(same, "attention hd %d window %d: a row alone differs from the same row in the batch", (int)hd,
          (int)tc->window);

    /* a position past n_pos: that row is NaN, DI_ERR_RANGE */
    di_cuda_attn_args an = ga;
    an.n_pos = 1000; /* row 23 sits at 1300 */
    MUST(di_cuda_attention(ctx, &an, E));
    di_error err = {0};
    CHECK(di_cuda_sync(ctx, &err) == DI_ERR_RANGE, "pos past n_pos: '%s'", err.msg);
    MUST(di_cuda_download(ctx, one, dout + 23 * qrow, sizeof(float) * (size_t)qrow, E));
    CHECK(isnan(one[0]) && isnan(one[qrow - 1]), "the row past n_pos is NaN");
    MUST(di_cuda_download(ctx, one, dout + 24 * qrow, sizeof(float) * (size_t)qrow, E));
    CHECK(!memcmp(one, got + 24 * qrow, sizeof(float) * (size_t)qrow), "the other rows are as before");

    /* a block id past the cache: NaN rows and DI_ERR_RANGE */
    tables[3 * max_blocks + 100 / bs] = nb; /* a block sequence 3's rows read */
    MUST(di_cuda_upload(ctx, dt, tables, sizeof(int32_t) * ATTN_SEQS * (size_t)max_blocks, E));
    MUST(di_cuda_attention(ctx, &ga, E));
    CHECK(di_cuda_sync(ctx, &err) == DI_ERR_RANGE && strstr(err.msg, "block id"), "bad block: '%s'", err.msg);

    di_cuda_free(ctx, dout);
    di_cuda_free(ctx, dpos);
    di_cuda_free(ctx, dseq);
    di_cuda_free(ctx, dt);
    di_cuda_free(ctx, dq);
    di_cuda_free(ctx, kv.k);
    di_cuda_free(ctx, kv.v);
    free(one);
    free(got);
    free(scratch);
    free(want);
    free(q);
    free(tables);
    free(vc);
    free(kc);
}

static void attention_matches_the_cpu_and_the_batch(void) {
    /* SmolLM2-135M (9/3 heads of 64), a Gemma-3-like local layer (4/1 of
     * 256, window 64) and an MHA head_dim 128 case with blocks of 32 */
    const attn_case cases[] = {
        {9, 3, 64, 16, 64, 0},
        {4, 1, 256, 16, 64, 64},
        {8, 8, 128, 32, 40, 0},
        {8, 2, 64, 16, 64, 37},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) attention_case(&cases[i]);
}

/* ---- the backend table on the device ------------------------------------------ */

/* buf_alloc/upload/download round-trip bytes, copy and zero work on device
 * buffers, and linear over a weight uploaded once (upload_weight) gives the
 * host twin's bits. */
static void backend_buffers_and_weights(void) {
    di_backend be;
    MUST(di_backend_cuda_open(0, &be, E));
    const di_backend_ops *op = be.ops;
    enum { N = 4099 };
    uint8_t *src = xmalloc(N), *back = xmalloc(N);
    for (int i = 0; i < N; i++) src[i] = (uint8_t)rnd64();
    uint8_t *d = op->buf_alloc(&be, N), *d2 = op->buf_alloc(&be, N);
    CHECK(d && d2, "buf_alloc(%d) gave a buffer", N);
    if (!d || !d2) return;
    op->download(&be, back, d, N);
    int fresh_zero = 1;
    for (int i = 0; i < N; i++) fresh_zero &= back[i] == 0;
    CHECK(fresh_zero, "buf_alloc is zero-filled");
    op->upload(&be, d, src, N);
    op->copy(&be, d2, d, N);
    op->zero(&be, d, N / 2);
    op->download(&be, back, d, N);
    int zero_ok = 1;
    for (int i = 0; i < N / 2; i++) zero_ok &= back[i] == 0;
    CHECK(zero_ok && memcmp(back + N / 2, src + N / 2, N - N / 2) == 0, "upload, zero, download");
    op->download(&be, back, d2, N);
    CHECK(memcmp(back, src, N) == 0, "upload, copy, download");
    op->buf_free(&be, d);
    op->buf_free(&be, d2);
    const int64_t n_in = 512, n_out = 24, n_rows = 3;
    uint64_t rb;
    uint8_t *w = make_weights(DI_DTYPE_Q4_K, n_out, n_in, &rb);
    const di_backend_weight hw = {DI_DTYPE_Q4_K, w, rb, n_in, n_out, NULL, 0};
    di_backend_weight dw;
    MUST(op->upload_weight(&be, &hw, &dw, E));
    float *x = xmalloc(sizeof(float) * (size_t)(n_rows * n_in)), *y = xmalloc(sizeof(float) * (size_t)(n_rows * n_out));
    float *twin = xmalloc(sizeof(float) * (size_t)(n_rows * n_out));
    for (int64_t i = 0; i < n_rows * n_in; i++) x[i] = rndf();
    for (int64_t r = 0; r < n_rows; r++)
        MUST(di_cuda_host_matmul_row(DI_DTYPE_Q4_K, w, rb, x + r * n_in, n_in, n_out, twin + r * n_out, E));
    float *dx = op->buf_alloc(&be, sizeof(float) * (size_t)(n_rows * n_in));
    float *dy = op->buf_alloc(&be, sizeof(float) * (size_t)(n_rows * n_out));
    CHECK(dx && dy, "buf_alloc for the activations");
    if (dx && dy) {
        op->upload(&be, dx, x, sizeof(float) * (size_t)(n_rows * n_in));
        const di_matmul_args a = {dw.dtype, dw.data, dw.row_bytes, dx, n_in, dy, n_out, n_rows, n_in, n_out, NULL};
        op->linear(&be, &a, 1, NULL, NULL);
        op->download(&be, y, dy, sizeof(float) * (size_t)(n_rows * n_out));
        int64_t at = 0;
        CHECK(bits_equal(y, twin, n_rows * n_out, &at), "linear on an uploaded weight: output %lld is %.9g, the twin's %.9g",
              (long long)at, y[at], twin[at]);
    }
    di_error err = {0};
    CHECK(op->check(&be, &err) == DI_OK, "backend check: %s", err.msg);
    op->buf_free(&be, dx);
    op->buf_free(&be, dy);
    op->release_weight(&be, &dw);
    CHECK(dw.data == NULL, "release_weight clears the pointer");
    /* a dtype without a kernel is refused at upload, not at the forward */
    const di_backend_weight q51 = {DI_DTYPE_Q5_1, w, rb, n_in, n_out, NULL, 0};
    CHECK(op->upload_weight(&be, &q51, &dw, &err) == DI_ERR_UNSUPPORTED, "q5_1 upload is refused");
    free(twin);
    free(y);
    free(x);
    free(w);
    free(back);
    free(src);
    di_backend_release(&be);
}

/* ---- main ------------------------------------------------------------------- */

int main(void) {
    const char *req = getenv("DI_CUDA_REQUIRE");
    const int require = req && strcmp(req, "0") != 0;
    int n = 0;
    di_error err = {0};
    host_dequant_matches_the_cpu_bit_for_bit();
    host_matmul_order_is_within_the_bound();
    backend_table_is_complete_and_refuses_models();
    if (n_failed) return 1;
    if (di_cuda_device_count(&n, &err) != DI_OK) {
        printf("test_cuda: CUDA tests %s: %s (only the host builds of the device dequantizers and of the "
               "matmul's reduction order, and the backend table's checks ran: %d checks passed)\n",
               require ? "FAILED (DI_CUDA_REQUIRE is set)" : "skipped", err.msg, n_checks);
        return require ? 1 : SKIP_EXIT;
    }
    if (di_cuda_ctx_create(0, &ctx, &err) != DI_OK) {
        printf("test_cuda: cannot open CUDA device 0: %s\n", err.msg);
        return 1;
    }
    char desc[256];
    di_cuda_ctx_describe(ctx, desc, sizeof desc);
    printf("test_cuda: %s\n", desc);
    struct {
        const char *name;
        void (*fn)(void);
    } tests[] = {
        {"dequant_matches_the_cpu_bit_for_bit", dequant_matches_the_cpu_bit_for_bit},
        {"embed_reports_a_bad_id", embed_reports_a_bad_id},
        {"matmul_is_within_the_sum_order_bound", matmul_is_within_the_sum_order_bound},
        {"matmul_rows_do_not_depend_on_the_batch", matmul_rows_do_not_depend_on_the_batch},
        {"matmul_refuses_bad_arguments", matmul_refuses_bad_arguments},
        {"rmsnorm_is_within_two_ulp", rmsnorm_is_within_two_ulp},
        {"rope_matches_the_cpu_bit_for_bit", rope_matches_the_cpu_bit_for_bit},
        {"glu_matches_the_cpu_bit_for_bit", glu_matches_the_cpu_bit_for_bit},
        {"softcap_is_within_eight_ulp", softcap_is_within_eight_ulp},
        {"add_scale_gather_are_exact", add_scale_gather_are_exact},
        {"kv_store_rounds_like_the_cpu", kv_store_rounds_like_the_cpu},
        {"attention_matches_the_cpu_and_the_batch", attention_matches_the_cpu_and_the_batch},
        {"backend_buffers_and_weights", backend_buffers_and_weights},
    };
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
        int before = n_failed;
        tests[i].fn();
        printf("[%s] %s\n", n_failed == before ? "  OK  " : " FAIL ", tests[i].name);
    }
    di_cuda_ctx_free(ctx);
    printf("test_cuda: %d checks, %d failed\n", n_checks, n_failed);
    return n_failed ? 1 : 0;
}
