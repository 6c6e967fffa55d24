/* kernels/cpu matmul: every dispatch table against the reference on random
 * weights of each fast-path dtype, the fused == dequantized contract bit for
 * bit, and batch / thread invariance of di_matmul. */
#include "test_q8_act.h"
#include "test_util.h"

#include "base/threadpool.h"
#include "kernels/cpu/gemm_q8.h"
#include "kernels/cpu/half.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/pack_x16.h"
#include "kernels/cpu/quant_blocks.h"
#include "tensor/fp8.h"
#include "tensor/half.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static di_test_rng rng = {0x9E3779B97F4A7C15ull};
static uint32_t rnd(void) { return di_test_rand(&rng); }
static float rndf(void) { return (float)rnd() / 4294967296.0f * 2.0f - 1.0f; } /* [-1, 1) */

static const di_dtype FAST_TYPES[] = {DI_DTYPE_F32, DI_DTYPE_F16, DI_DTYPE_BF16, DI_DTYPE_Q4_0,
                                      DI_DTYPE_Q4_1, DI_DTYPE_Q8_0, DI_DTYPE_Q6_K};
/* FAST_TYPES plus those with only a gemm path (Q4_K: gemm_q8 and
 * gemm_f32; Q5_0: gemm_f32). */
static const di_dtype MATMUL_TYPES[] = {DI_DTYPE_F32,  DI_DTYPE_F16,  DI_DTYPE_Q4_0, DI_DTYPE_Q4_1,
                                        DI_DTYPE_Q5_0, DI_DTYPE_Q8_0, DI_DTYPE_Q6_K, DI_DTYPE_Q4_K};

/* Random but well-formed weights: finite f16 scales of realistic size and
 * random quant bits. Returns (n_out, row_bytes) bytes; *row_bytes set. */
static uint8_t *random_weights(di_dtype t, int64_t n_out, int64_t n_in, uint64_t *row_bytes) {
    assert_int_equal(di_dtype_row_bytes(t, n_in, row_bytes), DI_OK);
    size_t size = (size_t)(*row_bytes * (uint64_t)n_out);
    uint8_t *w = malloc(size);
    assert_non_null(w);
    for (size_t i = 0; i < size; i++) w[i] = (uint8_t)rnd();
    int64_t n = n_in * n_out;
    switch (t) {
    case DI_DTYPE_F32:
        for (int64_t i = 0; i < n; i++) ((float *)(void *)w)[i] = rndf();
        break;
    case DI_DTYPE_F16:
        for (int64_t i = 0; i < n; i++) ((uint16_t *)(void *)w)[i] = di_float_to_half(rndf());
        break;
    case DI_DTYPE_BF16:
        for (int64_t i = 0; i < n; i++) ((uint16_t *)(void *)w)[i] = di_f32_to_bf16(rndf());
        break;
    case DI_DTYPE_Q4_0:
        for (int64_t b = 0; b < n / DI_QK; b++) ((di_block_q4_0 *)(void *)w)[b].d = di_float_to_half(0.1f * rndf());
        break;
    case DI_DTYPE_Q4_1:
        for (int64_t b = 0; b < n / DI_QK; b++) {
            ((di_block_q4_1 *)(void *)w)[b].d = di_float_to_half(0.1f * rndf());
            ((di_block_q4_1 *)(void *)w)[b].m = di_float_to_half(0.5f * rndf());
        }
        break;
    case DI_DTYPE_Q5_0:
        for (int64_t b = 0; b < n / DI_QK; b++) ((di_block_q5_0 *)(void *)w)[b].d = di_float_to_half(0.05f * rndf());
        break;
    case DI_DTYPE_Q8_0:
        for (int64_t b = 0; b < n / DI_QK; b++) ((di_block_q8_0 *)(void *)w)[b].d = di_float_to_half(0.01f * rndf());
        break;
    case DI_DTYPE_Q6_K:
        for (int64_t b = 0; b < n / DI_QK_K; b++) ((di_block_q6_K *)(void *)w)[b].d = di_float_to_half(0.001f * rndf());
        break;
    case DI_DTYPE_Q4_K:
        for (int64_t b = 0; b < n / DI_QK_K; b++) {
            ((di_block_q4_K *)(void *)w)[b].d = di_float_to_half(0.002f * rndf());
            ((di_block_q4_K *)(void *)w)[b].dmin = di_float_to_half(0.005f * rndf());
        }
        break;
    default:
        fail_msg("no generator for dtype %d", (int)t);
    }
    return w;
}

static float *random_floats(int64_t n) {
    float *x = malloc(sizeof(float) * (size_t)n);
    assert_non_null(x);
    for (int64_t i = 0; i < n; i++) x[i] = rndf();
    return x;
}

static const di_cpu_kernels *tables[2 * DI_CPU_ISA_COUNT]; /* exact ones, then int8 twins */
static int n_tables;

static int setup(void **state) {
    (void)state;
    n_tables = 0;
    for (int isa = 0; isa < DI_CPU_ISA_COUNT; isa++) {
        const di_cpu_kernels *k = di_cpu_kernels_get((di_cpu_isa)isa);
        if (k) tables[n_tables++] = k;
        else printf("kernels: isa %d not available on this CPU, skipped\n", isa);
    }
    for (int i = 0, n = n_tables; i < n; i++) tables[n_tables++] = tables[i]->q8;
    return 0;
}

/* The contract that makes decode and prefill agree: for every table and
 * dtype, dot(w, x) == dot_f32(dequant(w), x) and dot_f32_x4 == 4 dot_f32. */
static void fused_dot_equals_dequantized_dot_bitwise(void **state) {
    (void)state;
    const int64_t n_in = 512 + 256; /* 3 super-blocks, 24 blocks */
    for (int ti = 0; ti < n_tables; ti++) {
        const di_cpu_kernels *k = tables[ti];
        for (size_t d = 0; d < sizeof FAST_TYPES / sizeof FAST_TYPES[0]; d++) {
            di_dtype t = FAST_TYPES[d];
            assert_non_null(k->dot[t]);
            assert_non_null(k->dequant[t]);
            uint64_t rb;
            uint8_t *w = random_weights(t, 4, n_in, &rb);
            float *x = random_floats(n_in), *deq = random_floats(4 * n_in);
            for (int j = 0; j < 4; j++) k->dequant[t](w + j * rb, deq + j * n_in, n_in);
            float x4[4];
            k->dot_f32_x4(deq, n_in, x, n_in, x4);
            for (int j = 0; j < 4; j++) {
                float fused = k->dot[t](w + j * rb, x, n_in);
                float plain = k->dot_f32(deq + j * n_in, x, n_in);
                if (memcmp(&fused, &plain, sizeof fused) != 0 || memcmp(&x4[j], &plain, sizeof plain) != 0)
                    fail_msg("%s %s row %d: fused %.9g, dequant+dot %.9g, x4 %.9g", k->name,
                             di_dtype_traits_of(t)->name, j, (double)fused, (double)plain, (double)x4[j]);
            }
            free(w);
            free(x);
            free(deq);
        }
        /* odd lengths exercise the scalar tails of the float paths */
        for (int64_t n = 1; n < 40; n += 3) {
            float *a = random_floats(4 * n), *b = random_floats(n), x4[4];
            uint16_t *h = malloc(sizeof(uint16_t) * (size_t)n);
            float *hf = malloc(sizeof(float) * (size_t)n);
            for (int64_t i = 0; i < n; i++) h[i] = di_float_to_half(a[i]);
            k->dequant[DI_DTYPE_F16](h, hf, n);
            float f16dot = k->dot[DI_DTYPE_F16](h, b, n), f16plain = k->dot_f32(hf, b, n);
            assert_memory_equal(&f16dot, &f16plain, sizeof f16dot);
            k->dot_f32_x4(a, n, b, n, x4);
            for (int j = 0; j < 4; j++) {
                float s = k->dot_f32(a + j * n, b, n);
                assert_memory_equal(&s, &x4[j], sizeof s);
            }
            free(a);
            free(b);
            free(h);
            free(hf);
        }
    }
}

/* Per-element bound for a float32 dot of n terms against a double
 * reference: rounding of n accumulations (relative n * 2^-24 in the worst
 * case, ~sqrt(n) typically) of sum |w x|, plus a 1-ulp difference per
 * dequantized weight (FMA vs separate multiply-add). */
static double dot_tolerance(const float *w, const float *x, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += fabs((double)w[i] * x[i]);
    return s * 4e-6 + 1e-6;
}

/* What quantizing the activations to int8 adds to a dot (kernels.h): each
 * element moves by at most half its block's step d = amax / 127, so the dot
 * moves by at most sum_b d_b / 2 * sum_{i in b} |w_i|; plus the float
 * rounding of the block sums (as dot_tolerance). */
static double q8_tolerance(const float *w, const float *x, int64_t n) {
    double s = dot_tolerance(w, x, n);
    for (int64_t b = 0; b < n / 32; b++) {
        double amax = 0, sw = 0;
        for (int i = 0; i < 32; i++) {
            amax = fmax(amax, fabs((double)x[b * 32 + i]));
            sw += fabs((double)w[b * 32 + i]);
        }
        s += amax / 127.0 / 2.0 * sw * (1 + 1e-6);
    }
    return s;
}

/* The tolerance of table k for dtype t: exact f32 or the int8 path. */
static double table_tolerance(const di_cpu_kernels *k, di_dtype t, const float *w, const float *x, int64_t n) {
    return k->quantize_q8 && k->gemm_q8[t] ? q8_tolerance(w, x, n) : dot_tolerance(w, x, n);
}

/* Dequantizes one row through the table, else the dtype trait. */
static void dequant_any(di_dtype t, const uint8_t *w, float *dst, int64_t n) {
    if (tables[0]->dequant[t]) tables[0]->dequant[t](w, dst, n);
    else di_dtype_traits_of(t)->to_float(w, dst, n);
}

/* Rows of n_in inputs: 768 (24 blocks of 32, 3 K super-blocks), and for the
 * 32-element kinds 608 and 544 (19 and 17 blocks: an odd last block after
 * a full chunk of 16 and after none of a pair). */
static void matmul_matches_reference_at(int64_t n_in) {
    const int64_t n_out = 37, n_rows = 5;
    for (size_t d = 0; d < sizeof MATMUL_TYPES / sizeof MATMUL_TYPES[0]; d++) {
        di_dtype t = MATMUL_TYPES[d];
        if (n_in % di_dtype_traits_of(t)->block_size != 0) continue;
        uint64_t rb;
        uint8_t *w = random_weights(t, n_out, n_in, &rb);
        float *x = random_floats(n_rows * n_in);
        float *yref = calloc((size_t)(n_rows * n_out), sizeof(float));
        di_matmul_args a = {t, w, rb, x, n_in, yref, n_out, n_rows, n_in, n_out, NULL};
        di_error err;
        di_status s = di_matmul_ref(&a, &err);
        if (s == DI_ERR_UNSUPPORTED) {
            /* quant to_float lives in the dtype library; until it is there
             * the tables are checked against each other below */
            printf("matmul_ref: %s\n", err.msg);
            free(w);
            free(x);
            free(yref);
            continue;
        }
        assert_int_equal(s, DI_OK);
        /* dequantized weights (through the C table) for the error bound */
        float *deq = malloc(sizeof(float) * (size_t)(n_out * n_in));
        for (int64_t o = 0; o < n_out; o++) dequant_any(t, w + o * rb, deq + o * n_in, n_in);
        for (int ti = 0; ti < n_tables; ti++) {
            const di_cpu_kernels *k = tables[ti];
            float *y = calloc((size_t)(n_rows * n_out), sizeof(float));
            float *scratch = malloc(sizeof(float) * (size_t)di_matmul_scratch_floats(n_rows, n_in, 1));
            a.y = y;
            di_matmul(k, &a, scratch, NULL);
            for (int64_t r = 0; r < n_rows; r++)
                for (int64_t o = 0; o < n_out; o++) {
                    double tol = table_tolerance(k, t, deq + o * n_in, x + r * n_in, n_in);
                    double diff = fabs((double)y[r * n_out + o] - yref[r * n_out + o]);
                    if (diff > tol)
                        fail_msg("%s %s [%lld,%lld]: %.9g vs ref %.9g (tol %.3g)", k->name,
                                 di_dtype_traits_of(t)->name, (long long)r, (long long)o,
                                 (double)y[r * n_out + o], (double)yref[r * n_out + o], tol);
                }
            free(y);
            free(scratch);
        }
        free(deq);
        free(w);
        free(x);
        free(yref);
    }
}

static void matmul_matches_reference_on_random_data(void **state) {
    (void)state;
    matmul_matches_reference_at(768);
    matmul_matches_reference_at(608);
    matmul_matches_reference_at(544);
}

/* The C and AVX2 tables dequantize independently: they must agree to an
 * ulp-level tolerance (the C Q4_1 path may or may not fuse d*q+m). */
static void tables_agree_on_dequantization(void **state) {
    (void)state;
    if (n_tables < 2) skip();
    const int64_t n = 1024;
    for (size_t d = 0; d < sizeof FAST_TYPES / sizeof FAST_TYPES[0]; d++) {
        di_dtype t = FAST_TYPES[d];
        uint64_t rb;
        uint8_t *w = random_weights(t, 1, n, &rb);
        float *a = malloc(sizeof(float) * n), *b = malloc(sizeof(float) * n);
        tables[0]->dequant[t](w, a, n);
        for (int ti = 1; ti < n_tables; ti++) {
            tables[ti]->dequant[t](w, b, n);
            for (int64_t i = 0; i < n; i++)
                if (fabsf(a[i] - b[i]) > 1e-6f * fabsf(a[i]) + 1e-9f)
                    fail_msg("%s %s [%lld]: %.9g vs c %.9g", tables[ti]->name, di_dtype_traits_of(t)->name,
                             (long long)i, (double)b[i], (double)a[i]);
        }
        free(w);
        free(a);
        free(b);
    }
}

/* fp8_row / mxfp4_row of every table equal the scalar definition bit for
 * bit over all byte values (NaN codes stay NaN, the e2m1 negative zero
 * stays -0), with a partial last FP8 block and odd tails. */
static void tables_dequantize_fp8_and_mxfp4_exactly(void **state) {
    (void)state;
    enum { N = 1024 + 128 + 40, BLOCK = 128, NSC = (N + BLOCK - 1) / BLOCK, NMX = 1024 };
    uint8_t w[N], e[NMX / 32];
    float scale[NSC], got[N], want[N];
    for (int i = 0; i < N; i++) w[i] = (uint8_t)(i < 256 ? (uint32_t)i : rnd());
    const float sc_vals[] = {1.0f, 0x1p-127f, 0x1p-20f, 0x1p+20f, 0.37f, -3.0f, 0x1p-9f, 448.0f, 2.5e-3f, 1e-30f};
    for (int b = 0; b < NSC; b++) scale[b] = sc_vals[b % (sizeof sc_vals / sizeof *sc_vals)];
    for (int g = 0; g < NMX / 32; g++) e[g] = (uint8_t)(g < 4 ? (uint32_t)g : g < 8 ? (uint32_t)(250 + g - 4) : rnd() % 255);
    for (int ti = 0; ti < n_tables; ti++) {
        const di_cpu_kernels *k = tables[ti];
        for (int n = N; n >= N - 3; n -= 3) { /* full length, and tails that cut a SIMD step */
            for (int i = 0; i < n; i++) want[i] = di_e4m3_to_f32(w[i]) * scale[i / BLOCK];
            k->fp8_row(w, scale, BLOCK, got, n);
            for (int i = 0; i < n; i++)
                if (memcmp(&got[i], &want[i], 4) && !(isnan(got[i]) && isnan(want[i])))
                    fail_msg("%s fp8_row n=%d [%d] byte %02x: %a vs %a", k->name, n, i, w[i], (double)got[i],
                             (double)want[i]);
        }
        for (int i = 0; i < NMX; i++)
            want[i] = di_e2m1_to_f32((uint8_t)(i % 2 ? w[i / 2] >> 4 : w[i / 2] & 15)) * ldexpf(1.0f, e[i / 32] - 127);
        k->mxfp4_row(w, e, got, NMX);
        for (int i = 0; i < NMX; i++)
            if (memcmp(&got[i], &want[i], 4))
                fail_msg("%s mxfp4_row [%d]: %a vs %a", k->name, i, (double)got[i], (double)want[i]);
    }
}

/* The fused FP8 / MXFP4 row dots equal dot_f32 of the dequantized row bit
 * for bit (the decode path uses them, the batched path dequantizes), for
 * blocks of 32 and 128, lengths with and without a tail, NaN-free random
 * codes including subnormal and extreme scales. */
static void fused_fp8_dots_equal_dequantized_dots(void **state) {
    (void)state;
    enum { N = 1024 + 64 + 8, NMX = 1024 };
    static uint8_t w[N], e[NMX / 32];
    static float x[N], row[N];
    for (int i = 0; i < N; i++) {
        w[i] = (uint8_t)rnd();
        if ((w[i] & 0x7f) == 0x7f) w[i] ^= 1; /* no NaN codes */
        x[i] = (float)((int)(rnd() % 2001) - 1000) / 257.0f;
    }
    for (int g = 0; g < NMX / 32; g++) e[g] = (uint8_t)(g < 2 ? (uint32_t)g : 100 + rnd() % 50);
    int n_checked = 0;
    for (int ti = 0; ti < n_tables; ti++) {
        const di_cpu_kernels *k = tables[ti];
        if (!k->fused_fp8) continue;
        const int blocks[] = {32, 128, 24};
        for (int bi = 0; bi < 3; bi++) {
            int B = blocks[bi];
            float scale[N / 24 + 2];
            for (int b = 0; b < N / 24 + 2; b++) scale[b] = ldexpf(1.0f, (int)(rnd() % 40) - 20);
            for (int n = N; n >= N - 9; n -= 3) {
                k->fp8_row(w, scale, B, row, n);
                float want = k->dot_f32(row, x, n), got = k->fused_fp8->fp8_dot(w, scale, B, x, n);
                if (memcmp(&got, &want, 4)) fail_msg("%s fp8_dot block %d n %d: %a vs %a", k->name, B, n, (double)got, (double)want);
            }
        }
        k->mxfp4_row(w, e, row, NMX);
        float want = k->dot_f32(row, x, NMX), got = k->fused_fp8->mxfp4_dot(w, e, x, NMX);
        if (memcmp(&got, &want, 4)) fail_msg("%s mxfp4_dot: %a vs %a", k->name, (double)got, (double)want);
        /* the four-row forms: rows 256 bytes apart, their own scales */
        if (k->fused_fp8->fp8_dot4) {
            float scale4[4 * 8], out[4];
            for (int b = 0; b < 4 * 8; b++) scale4[b] = ldexpf(1.0f, (int)(rnd() % 30) - 15);
            k->fused_fp8->fp8_dot4(w, 256, scale4, 8, 32, x, 256, out);
            for (int q = 0; q < 4; q++) {
                float one = k->fused_fp8->fp8_dot(w + 256 * q, scale4 + 8 * q, 32, x, 256);
                if (memcmp(&one, &out[q], 4)) fail_msg("%s fp8_dot4 row %d: %a vs %a", k->name, q, (double)out[q], (double)one);
            }
            k->fused_fp8->mxfp4_dot4(w, 128, e, 8, x, 256, out);
            for (int q = 0; q < 4; q++) {
                float one = k->fused_fp8->mxfp4_dot(w + 128 * q, e + 8 * q, x, 256);
                if (memcmp(&one, &out[q], 4)) fail_msg("%s mxfp4_dot4 row %d", k->name, q);
            }
        }
        n_checked++;
    }
    print_message("%d tables with fused FP8 dots checked\n", n_checked);
}

/* A row's outputs are the same bits alone, inside batches of every size
 * (both the fused and the tiled shape, and BIG_ROWS: more rows than the
 * exact AVX-512 gemm keeps in one L2 row block at this width), and on 1 or
 * 2 threads. */
#define BIG_ROWS 300
static void matmul_is_batch_and_thread_invariant(void **state) {
    (void)state;
    const int64_t n_in = 768, n_out = 75, max_rows = BIG_ROWS;
    di_threadpool *pool;
    di_error err;
    assert_int_equal(di_threadpool_create(2, &pool, &err), DI_OK);
    for (int ti = 0; ti < n_tables; ti++) {
        const di_cpu_kernels *k = tables[ti];
        for (size_t d = 0; d < sizeof MATMUL_TYPES / sizeof MATMUL_TYPES[0]; d++) {
            di_dtype t = MATMUL_TYPES[d];
            uint64_t rb;
            uint8_t *w = random_weights(t, n_out, n_in, &rb);
            float *x = random_floats(max_rows * n_in);
            float *alone = malloc(sizeof(float) * (size_t)(max_rows * n_out));
            float *y = malloc(sizeof(float) * (size_t)(max_rows * n_out));
            float *scratch = malloc(sizeof(float) * (size_t)di_matmul_scratch_floats(max_rows, n_in, 2));
            for (int64_t r = 0; r < max_rows; r++) {
                di_matmul_args a = {t, w, rb, x + r * n_in, n_in, alone + r * n_out, n_out, 1, n_in, n_out, NULL};
                di_matmul(k, &a, scratch, NULL);
            }
            for (int64_t rows = 2; rows <= max_rows; rows = rows < 9 ? rows + 1 : max_rows + (rows == max_rows)) {
                for (int threads = 1; threads <= 2; threads++) {
                    memset(y, 0xff, sizeof(float) * (size_t)(max_rows * n_out));
                    di_matmul_args a = {t, w, rb, x, n_in, y, n_out, rows, n_in, n_out, NULL};
                    di_matmul(k, &a, scratch, threads == 2 ? pool : NULL);
                    if (memcmp(y, alone, sizeof(float) * (size_t)(rows * n_out)) != 0)
                        fail_msg("%s %s: %lld rows on %d threads differ from rows alone", k->name,
                                 di_dtype_traits_of(t)->name, (long long)rows, threads);
                }
            }
            free(w);
            free(x);
            free(alone);
            free(y);
            free(scratch);
        }
    }
    di_threadpool_free(pool);
}

/* di_matmul_multi gives every part the bits di_matmul gives it alone, for
 * parts of mixed dtypes and sizes (not multiples of the 8-row unit), rows
 * 1..9, on 1 and 2 threads. */
static void matmul_multi_equals_separate_matmuls(void **state) {
    (void)state;
    const int64_t max_rows = 9, max_in = 768;
    const int64_t n_out[3] = {37, 16, 75};
    const int64_t set_in[3] = {608, 768, 608}; /* 19 blocks of 32 (odd); K-quants need 256s */
    const di_dtype types[3][3] = {{DI_DTYPE_Q4_1, DI_DTYPE_Q4_1, DI_DTYPE_Q4_1},
                                  {DI_DTYPE_Q4_K, DI_DTYPE_Q6_K, DI_DTYPE_Q8_0},
                                  {DI_DTYPE_Q4_0, DI_DTYPE_F16, DI_DTYPE_F32}};
    di_threadpool *pool;
    di_error err;
    assert_int_equal(di_threadpool_create(2, &pool, &err), DI_OK);
    float *x = random_floats(max_rows * max_in);
    float *scratch = malloc(sizeof(float) * (size_t)di_matmul_scratch_floats(max_rows, max_in, 2));
    for (int ti = 0; ti < n_tables; ti++) {
        const di_cpu_kernels *k = tables[ti];
        for (int set = 0; set < 3; set++) {
            const int64_t n_in = set_in[set];
            uint8_t *w[3];
            float *want[3], *got[3];
            di_matmul_args parts[3];
            for (int p = 0; p < 3; p++) {
                uint64_t rb;
                w[p] = random_weights(types[set][p], n_out[p], n_in, &rb);
                want[p] = malloc(sizeof(float) * (size_t)(max_rows * n_out[p]));
                got[p] = malloc(sizeof(float) * (size_t)(max_rows * n_out[p]));
                parts[p] = (di_matmul_args){types[set][p], w[p], rb, x, n_in, want[p], n_out[p], 1, n_in, n_out[p], NULL};
            }
            for (int64_t rows = 1; rows <= max_rows; rows++) {
                for (int p = 0; p < 3; p++) {
                    parts[p].n_rows = rows;
                    parts[p].y = want[p];
                    di_matmul(k, &parts[p], scratch, NULL);
                    parts[p].y = got[p];
                }
                for (int threads = 1; threads <= 2; threads++) {
                    for (int p = 0; p < 3; p++) memset(got[p], 0xff, sizeof(float) * (size_t)(rows * n_out[p]));
                    di_matmul_multi(k, parts, 3, scratch, threads == 2 ? pool : NULL);
                    for (int p = 0; p < 3; p++)
                        if (memcmp(got[p], want[p], sizeof(float) * (size_t)(rows * n_out[p])) != 0)
                            fail_msg("%s set %d part %d (%s): %lld rows on %d threads differ from di_matmul", k->name,
                                     set, p, di_dtype_traits_of(types[set][p])->name, (long long)rows, threads);
                }
            }
            for (int p = 0; p < 3; p++) {
                free(w[p]);
                free(want[p]);
                free(got[p]);
            }
        }
    }
    free(x);
    free(scratch);
    di_threadpool_free(pool);
}

/* The all-at-once Q4_K scale unpack agrees with the per-sub-block one on
 * random packed bytes. */
static void q4_K_scales_mins_match_scale_min(void **state) {
    (void)state;
    for (int it = 0; it < 1000; it++) {
        uint8_t s12[12];
        for (int i = 0; i < 12; i++) s12[i] = (uint8_t)rnd();
        uint64_t sc, mn;
        di_q4_K_scales_mins(s12, &sc, &mn);
        for (int j = 0; j < 8; j++) {
            int want_sc, want_mn;
            di_q4_K_scale_min(s12, j, &want_sc, &want_mn);
            assert_int_equal((int)((sc >> (8 * j)) & 0xff), want_sc);
            assert_int_equal((int)((mn >> (8 * j)) & 0xff), want_mn);
        }
    }
}

/* Dtypes without a fast path go through the trait's to_float + dot_f32 in
 * both matmul shapes: check them against the reference, on weights made by
 * the dtype library's reference quantizer, and check the shapes agree. */
static void generic_path_matches_reference_for_other_dtypes(void **state) {
    (void)state;
    const int64_t n_in = 512, n_out = 9, n_rows = 6;
    int n_checked = 0;
    for (int t = 0; t < DI_DTYPE_COUNT; t++) {
        const di_dtype_traits *tr = di_dtype_traits_of((di_dtype)t);
        if (!tr->to_float || !tr->from_float || n_in % tr->block_size != 0) continue;
        uint64_t rb;
        assert_int_equal(di_dtype_row_bytes((di_dtype)t, n_in, &rb), DI_OK);
        float *src = random_floats(n_in * n_out), *x = random_floats(n_rows * n_in);
        uint8_t *w = malloc((size_t)(rb * (uint64_t)n_out));
        for (int64_t o = 0; o < n_out; o++) tr->from_float(src + o * n_in, w + o * rb, n_in);
        float *deq = malloc(sizeof(float) * (size_t)(n_in * n_out));
        for (int64_t o = 0; o < n_out; o++) tr->to_float(w + o * rb, deq + o * n_in, n_in);
        float *yref = malloc(sizeof(float) * (size_t)(n_rows * n_out));
        float *y = malloc(sizeof(float) * (size_t)(n_rows * n_out)), *y1 = malloc(sizeof(float) * (size_t)n_out);
        float *scratch = malloc(sizeof(float) * (size_t)di_matmul_scratch_floats(n_rows, n_in, 1));
        di_matmul_args a = {(di_dtype)t, w, rb, x, n_in, yref, n_out, n_rows, n_in, n_out, NULL};
        di_error err;
        assert_int_equal(di_matmul_ref(&a, &err), DI_OK);
        for (int ti = 0; ti < n_tables; ti++) {
            assert_true(di_cpu_kernels_supports(tables[ti], (di_dtype)t));
            a.y = y;
            di_matmul(tables[ti], &a, scratch, NULL);
            for (int64_t r = 0; r < n_rows; r++) {
                di_matmul_args one = {(di_dtype)t, w, rb, x + r * n_in, n_in, y1, n_out, 1, n_in, n_out, NULL};
                di_matmul(tables[ti], &one, scratch, NULL);
                assert_memory_equal(y1, y + r * n_out, sizeof(float) * (size_t)n_out);
                for (int64_t o = 0; o < n_out; o++) {
                    double tol = table_tolerance(tables[ti], (di_dtype)t, deq + o * n_in, x + r * n_in, n_in);
                    if (fabs((double)y[r * n_out + o] - yref[r * n_out + o]) > tol)
                        fail_msg("%s %s [%lld,%lld]: %.9g vs ref %.9g", tables[ti]->name, tr->name, (long long)r,
                                 (long long)o, (double)y[r * n_out + o], (double)yref[r * n_out + o]);
                }
            }
        }
        n_checked++;
        free(src);
        free(x);
        free(w);
        free(deq);
        free(yref);
        free(y);
        free(y1);
        free(scratch);
    }
    assert_true(n_checked >= 10);
}

/* Every table quantizes activations to the same bits (nearest-even of
 * x * (127 / amax) through one multiply), including all-zero and tiny
 * blocks, and its int8 gemm stays within float-order noise of the C one. */
static void q8_tables_quantize_identically_and_agree(void **state) {
    (void)state;
    const int64_t n = 768, nb = n / 32, n_out = 13, n_rows = 6;
    float *x = random_floats(n_rows * n);
    for (int i = 0; i < 32; i++) x[i] = 0.0f;           /* block 0: zeros */
    for (int i = 32; i < 64; i++) x[i] = 1e-30f * rndf(); /* block 1: tiny */
    int8_t *q0 = malloc((size_t)(n_rows * n)), *q1 = malloc((size_t)(n_rows * n));
    float *d0 = malloc(sizeof(float) * (size_t)(n_rows * nb)), *d1 = malloc(sizeof(float) * (size_t)(n_rows * nb));
    float *s0 = malloc(sizeof(float) * (size_t)(n_rows * nb)), *s1 = malloc(sizeof(float) * (size_t)(n_rows * nb));
    const di_cpu_kernels *c = tables[0]->q8; /* c-q8 */
    assert_non_null(c->quantize_q8);
    for (int64_t r = 0; r < n_rows; r++) c->quantize_q8(x + r * n, q0 + r * n, d0 + r * nb, s0 + r * nb, n);
    for (int i = 0; i < 32; i++) assert_int_equal(q0[i], 0);
    for (int ti = 0; ti < n_tables; ti++) {
        const di_cpu_kernels *k = tables[ti];
        if (!k->quantize_q8 || k == c) continue;
        for (int64_t r = 0; r < n_rows; r++) k->quantize_q8(x + r * n, q1 + r * n, d1 + r * nb, s1 + r * nb, n);
        assert_memory_equal(q0, q1, (size_t)(n_rows * n));
        assert_memory_equal(d0, d1, sizeof(float) * (size_t)(n_rows * nb));
        assert_memory_equal(s0, s1, sizeof(float) * (size_t)(n_rows * nb));
        di_q8_rows xq = {q0, d0, s0, n, nb, NULL, NULL, NULL};
        for (size_t d = 0; d < sizeof MATMUL_TYPES / sizeof MATMUL_TYPES[0]; d++) {
            di_dtype t = MATMUL_TYPES[d];
            if (!c->gemm_q8[t]) continue;
            assert_non_null(k->gemm_q8[t]);
            uint64_t rb;
            uint8_t *w = random_weights(t, n_out, n, &rb);
            float *yc = malloc(sizeof(float) * (size_t)(n_rows * n_out)), *yk = malloc(sizeof(float) * (size_t)(n_rows * n_out));
            float *scratch = malloc(sizeof(float) * (size_t)di_gemm_q8_scratch_floats(n));
            float *deq = malloc(sizeof(float) * (size_t)n);
            c->gemm_q8[t](w, rb, 0, n_out, &xq, n_rows, n, yc, n_out, scratch);
            k->gemm_q8[t](w, rb, 0, n_out, &xq, n_rows, n, yk, n_out, scratch);
            for (int64_t o = 0; o < n_out; o++) {
                dequant_any(t, w + o * rb, deq, n);
                for (int64_t r = 0; r < n_rows; r++) {
                    double tol = dot_tolerance(deq, x + r * n, n);
                    if (fabs((double)yc[r * n_out + o] - yk[r * n_out + o]) > tol)
                        fail_msg("%s %s [%lld,%lld]: %.9g vs c %.9g", k->name, di_dtype_traits_of(t)->name,
                                 (long long)r, (long long)o, (double)yk[r * n_out + o], (double)yc[r * n_out + o]);
                }
            }
            free(w);
            free(yc);
            free(yk);
            free(scratch);
            free(deq);
        }
    }
    free(x);
    free(q0);
    free(q1);
    free(d0);
    free(d1);
    free(s0);
    free(s1);
}

/* The AMX table's numerics (gemm_q8_amx.c), written out in scalar C: per
 * block the exact integer dot of the signed weight integers (Q4_0 nibble -
 * 8, Q5_0 (nibble | high bit << 4) - 16, Q8_0 as stored, Q4_1/Q4_K nibble)
 * with q, then
 *   acc = fma(isum, dw * dx, acc), and for Q4_1/Q4_K acc = fma(mw, s, acc). */
static float amx_oracle(di_dtype t, const uint8_t *row, const int8_t *q, const float *d, const float *s,
                        int64_t nb) {
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        int u[32];
        float dw, mw = 0.0f;
        if (t == DI_DTYPE_Q4_0 || t == DI_DTYPE_Q4_1) {
            const uint8_t *qs = t == DI_DTYPE_Q4_0 ? ((const di_block_q4_0 *)(const void *)row)[b].qs
                                                   : ((const di_block_q4_1 *)(const void *)row)[b].qs;
            for (int j = 0; j < 16; j++) {
                u[j] = qs[j] & 15;
                u[j + 16] = qs[j] >> 4;
            }
            if (t == DI_DTYPE_Q4_0) {
                dw = di_half_to_float(((const di_block_q4_0 *)(const void *)row)[b].d);
                for (int j = 0; j < 32; j++) u[j] -= 8;
            } else {
                dw = di_half_to_float(((const di_block_q4_1 *)(const void *)row)[b].d);
                mw = di_half_to_float(((const di_block_q4_1 *)(const void *)row)[b].m);
            }
        } else if (t == DI_DTYPE_Q5_0) {
            const di_block_q5_0 *bl = (const di_block_q5_0 *)(const void *)row + b;
            uint32_t qh = (uint32_t)bl->qh[0] | (uint32_t)bl->qh[1] << 8 | (uint32_t)bl->qh[2] << 16 |
                          (uint32_t)bl->qh[3] << 24;
            dw = di_half_to_float(bl->d);
            for (int j = 0; j < 16; j++) {
                u[j] = ((bl->qs[j] & 15) | (int)((qh >> j) & 1u) << 4) - 16;
                u[j + 16] = ((bl->qs[j] >> 4) | (int)((qh >> (j + 16)) & 1u) << 4) - 16;
            }
        } else if (t == DI_DTYPE_Q8_0) {
            const di_block_q8_0 *bl = (const di_block_q8_0 *)(const void *)row + b;
            dw = di_half_to_float(bl->d);
            for (int j = 0; j < 32; j++) u[j] = bl->qs[j];
        } else {
            const di_block_q4_K *bl = (const di_block_q4_K *)(const void *)row + b / 8;
            int j = (int)(b % 8), sc, mn;
            di_q4_K_scale_min(bl->scales, j, &sc, &mn);
            dw = di_half_to_float(bl->d) * (float)sc;
            mw = -di_half_to_float(bl->dmin) * (float)mn;
            for (int l = 0; l < 32; l++) u[l] = j % 2 ? bl->qs[32 * (j / 2) + l] >> 4 : bl->qs[32 * (j / 2) + l] & 15;
        }
        int32_t isum = 0;
        for (int i = 0; i < 32; i++) isum += u[i] * q[32 * b + i];
        acc = fmaf((float)isum, dw * d[b], acc);
        if (t == DI_DTYPE_Q4_1 || t == DI_DTYPE_Q4_K) acc = fmaf(mw, s[b], acc);
    }
    return acc;
}

/* One AMX oracle case: random weights of t (n_out, n_in), their x16 copy,
 * max_rows random activation rows quantized by k. */
typedef struct amx_case {
    uint8_t *w, *pk;
    uint64_t rb;
    float *x;
    test_q8_act act;
} amx_case;

static amx_case amx_case_make(const di_cpu_kernels *k, di_dtype t, int64_t n_out, int64_t n_in, int64_t max_rows) {
    amx_case c = {0};
    c.w = random_weights(t, n_out, n_in, &c.rb);
    c.pk = malloc(di_x16_packed_bytes(t, n_out, n_in));
    di_x16_pack(t, c.w, c.rb, n_out, n_in, c.pk);
    c.x = random_floats(max_rows * n_in);
    c.act = test_q8_act_make(k, c.x, max_rows, n_in);
    return c;
}

static void amx_case_free(amx_case *c) {
    free(c->w);
    free(c->pk);
    free(c->x);
    test_q8_act_free(&c->act);
}

/* Every AMX table (where the CPU has AMX) equals amx_oracle bit for bit for
 * every batch size from 1 to past the gemm's row chunk: the VNNI few-row
 * path (fewer than DI_GEMM_Q8_AMX_FEW_ROWS rows), the tiles' full and
 * remainder row tiles (their own few-row epilogue included), output
 * groups cut short (unpacked) or full (Q8_0: loaded from the rows),
 * output sub-ranges, batches longer than the gemm's chunk of
 * DI_GEMM_Q8_AMX_ROWS packed rows, odd block counts, and 1 or 2 threads
 * through di_matmul -- so its rows never depend on the batch. */
static void amx_gemm_matches_block_order_oracle_bitwise(void **state) {
    (void)state;
    const di_dtype types[] = {DI_DTYPE_Q4_0, DI_DTYPE_Q4_1, DI_DTYPE_Q5_0, DI_DTYPE_Q8_0, DI_DTYPE_Q4_K};
    const int64_t max_rows = DI_GEMM_Q8_AMX_ROWS + 17, n_out = 53;
    const int64_t sub0 = 3, sub1 = n_out - 3; /* full groups and a short one */
    di_threadpool *pool;
    di_error err;
    assert_int_equal(di_threadpool_create(2, &pool, &err), DI_OK);
    int n_checked = 0;
    for (int ti = 0; ti < n_tables; ti++) {
        const di_cpu_kernels *k = tables[ti];
        if (!k->quantize_q8 || !strstr(k->name, "amx")) continue;
        for (size_t d = 0; d < sizeof types / sizeof types[0]; d++) {
            di_dtype t = types[d];
            for (int64_t n_in = 96; n_in <= 768; n_in += 672) {
                if (t == DI_DTYPE_Q4_K && n_in % 256) continue;
                const int64_t nb = n_in / 32;
                amx_case c = amx_case_make(k, t, n_out, n_in, max_rows);
                const uint8_t *w = c.w, *pk = c.pk;
                const uint64_t rb = c.rb;
                const float *x = c.x;
                const int8_t *q = c.act.q;
                const float *xd = c.act.d, *xs = c.act.s;
                float *want = malloc(sizeof(float) * (size_t)(max_rows * n_out));
                for (int64_t r = 0; r < max_rows; r++)
                    for (int64_t o = 0; o < n_out; o++)
                        want[r * n_out + o] = amx_oracle(t, w + o * rb, q + r * n_in, xd + r * nb, xs + r * nb, nb);
                float *y = malloc(sizeof(float) * (size_t)(max_rows * n_out));
                float *scratch = malloc(sizeof(float) * (size_t)di_matmul_scratch_floats(max_rows, n_in, 2));
                const di_q8_rows xq = c.act.rows; /* the gemm packs by itself */
                for (int64_t rows = 1; rows <= max_rows; rows++) {
                    /* the gemm on a sub-range of outputs (a task's share) */
                    memset(y, 0xff, sizeof(float) * (size_t)(max_rows * n_out));
                    k->gemm_q8[t](w, rb, sub0, sub1, &xq, rows, n_in, y, n_out, scratch);
                    for (int64_t r = 0; r < rows; r++)
                        for (int64_t o = 0; o < n_out; o++) {
                            float got = y[r * n_out + o], exp = want[r * n_out + o];
                            int in_range = o >= sub0 && o < sub1;
                            if (in_range ? memcmp(&got, &exp, sizeof got) != 0 : !isnan(got))
                                fail_msg("%s %s n_in %lld rows %lld [%lld,%lld]: %.9g vs oracle %.9g", k->name,
                                         di_dtype_traits_of(t)->name, (long long)n_in, (long long)rows, (long long)r,
                                         (long long)o, (double)got, (double)exp);
                        }
                    /* the whole matmul on 1 and 2 threads, on the rows and on the
                     * x16 copy the loader makes (the packed path crosses from
                     * VNNI to the tiles at the limit) */
                    for (int threads = 1; threads <= 2; threads++)
                        for (int packed = 0; packed < 2; packed++) {
                            memset(y, 0xff, sizeof(float) * (size_t)(max_rows * n_out));
                            di_matmul_args a = {t, w, rb, x, n_in, y, n_out, rows, n_in, n_out, packed ? pk : NULL};
                            di_matmul(k, &a, scratch, threads == 2 ? pool : NULL);
                            if (memcmp(y, want, sizeof(float) * (size_t)(rows * n_out)) != 0)
                                fail_msg("%s %s n_in %lld: %lld rows on %d threads%s differ from the oracle", k->name,
                                         di_dtype_traits_of(t)->name, (long long)n_in, (long long)rows, threads,
                                         packed ? " (x16)" : "");
                        }
                    n_checked++;
                }
                amx_case_free(&c);
                free(want);
                free(y);
                free(scratch);
            }
        }
    }
    if (!n_checked) printf("kernels: no AMX table on this CPU, AMX oracle test skipped\n");
    else printf("kernels: AMX oracle: %d shapes checked\n", n_checked);
    di_threadpool_free(pool);
}

/* The AMX table's x16 entries below its tile limits (decode) run on
 * AVX-512 VNNI alone, on the packed copy: the same oracle bit for bit, so
 * a batch that crosses the limit (tiles on the rows) keeps every row's
 * bits. Checked wherever VNNI is, AMX or not. */
static void amx_x16_few_rows_match_the_oracle_bitwise(void **state) {
    (void)state;
#if defined(__x86_64__)
    if (!di_cpu_kernels_by_name("avx512-q8")) {
        printf("kernels: no AVX-512 VNNI, AMX x16 oracle test skipped\n");
        return;
    }
    const di_dtype types[] = {DI_DTYPE_Q4_0, DI_DTYPE_Q4_1, DI_DTYPE_Q5_0, DI_DTYPE_Q8_0, DI_DTYPE_Q4_K};
    const di_gemm_q8_x16_fn fns[] = {di_gemm_q8_x16_q4_0_amx, di_gemm_q8_x16_q4_1_amx, di_gemm_q8_x16_q5_0_amx,
                                     di_gemm_q8_x16_q8_0_amx, di_gemm_q8_x16_q4_K_amx};
    const int64_t n_out = 53, max_rows = DI_GEMM_Q8_AMX_FEW_ROWS - 1;
    const di_cpu_kernels *k = di_cpu_kernels_by_name("avx512-q8");
    int n_checked = 0;
    for (size_t d = 0; d < sizeof types / sizeof types[0]; d++) {
        const di_dtype t = types[d];
        const int64_t rows_below = t == DI_DTYPE_Q8_0 ? DI_GEMM_Q8_AMX_FEW_ROWS_Q8_0 - 1 : max_rows;
        for (int64_t n_in = 96; n_in <= 768; n_in += 672) {
            if (!di_x16_packable(t, n_in)) continue;
            const int64_t nb = n_in / 32;
            amx_case c = amx_case_make(k, t, n_out, n_in, max_rows);
            const int8_t *q = c.act.q;
            const float *xd = c.act.d, *xs = c.act.s;
            float *y = malloc(sizeof(float) * (size_t)(max_rows * n_out));
            float *scratch = malloc(sizeof(float) * (size_t)di_gemm_q8_scratch_floats(n_in));
            for (int64_t rows = 1; rows <= rows_below; rows++) {
                memset(y, 0xff, sizeof(float) * (size_t)(max_rows * n_out));
                fns[d](c.w, c.rb, c.pk, 16, n_out, &c.act.rows, rows, n_in, y, n_out, scratch);
                for (int64_t r = 0; r < rows; r++)
                    for (int64_t o = 0; o < n_out; o++) {
                        float got = y[r * n_out + o];
                        float exp = amx_oracle(t, c.w + o * c.rb, q + r * n_in, xd + r * nb, xs + r * nb, nb);
                        if (o >= 16 ? memcmp(&got, &exp, sizeof got) != 0 : !isnan(got))
                            fail_msg("amx x16 %s n_in %lld rows %lld [%lld,%lld]: %.9g vs oracle %.9g",
                                     di_dtype_traits_of(t)->name, (long long)n_in, (long long)rows, (long long)r,
                                     (long long)o, (double)got, (double)exp);
                    }
                n_checked++;
            }
            amx_case_free(&c);
            free(y);
            free(scratch);
        }
    }
    printf("kernels: AMX x16 few-row oracle: %d shapes checked\n", n_checked);
#else
    (void)state;
#endif
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fused_dot_equals_dequantized_dot_bitwise),
        cmocka_unit_test(matmul_matches_reference_on_random_data),
        cmocka_unit_test(tables_agree_on_dequantization),
        cmocka_unit_test(tables_dequantize_fp8_and_mxfp4_exactly),
        cmocka_unit_test(fused_fp8_dots_equal_dequantized_dots),
        cmocka_unit_test(matmul_is_batch_and_thread_invariant),
        cmocka_unit_test(matmul_multi_equals_separate_matmuls),
        cmocka_unit_test(q4_K_scales_mins_match_scale_min),
        cmocka_unit_test(generic_path_matches_reference_for_other_dtypes),
        cmocka_unit_test(q8_tables_quantize_identically_and_agree),
        cmocka_unit_test(amx_gemm_matches_block_order_oracle_bitwise),
        cmocka_unit_test(amx_x16_few_rows_match_the_oracle_bitwise),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
