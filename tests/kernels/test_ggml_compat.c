/* kernels/cpu ggml numerics (ggml_compat.h): the C and AVX2 quantizers and
 * dots agree bit for bit; the quantizer follows ggml's definition on hand
 * blocks; dots, expf, RMSNorm, RoPE and attention stay within their
 * rounding of exact math; the ggml table's matmul and attention are batch-
 * and thread-invariant. The end-to-end agreement with llama.cpp itself is
 * tests/cli/perplexity.sh. */
#include "test_util.h"

#include "base/threadpool.h"
#include "kernels/cpu/ggml_compat.h"
#include "kernels/cpu/half.h"
#include "kernels/cpu/quant_blocks.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static di_test_rng rng = {0x6A09E667F3BCC908ull};
static uint32_t rnd(void) { return di_test_rand(&rng); }
static float rndf(void) { return (float)rnd() / 4294967296.0f * 2.0f - 1.0f; } /* [-1, 1) */

static const di_dtype TYPES[] = {DI_DTYPE_Q4_0, DI_DTYPE_Q4_1, DI_DTYPE_Q8_0};

static uint8_t *random_weights(di_dtype t, int64_t n_out, int64_t n_in, uint64_t *row_bytes) {
    assert_int_equal(di_dtype_row_bytes(t, n_in, row_bytes), DI_OK);
    size_t size = (size_t)(*row_bytes * (uint64_t)n_out);
    uint8_t *w = malloc(size);
    assert_non_null(w);
    for (size_t i = 0; i < size; i++) w[i] = (uint8_t)rnd();
    int64_t nb = n_in * n_out / DI_QK;
    for (int64_t b = 0; b < nb; b++) {
        if (t == DI_DTYPE_Q4_0) ((di_block_q4_0 *)(void *)w)[b].d = di_float_to_half(0.1f * rndf());
        if (t == DI_DTYPE_Q8_0) {
            di_block_q8_0 *q = (di_block_q8_0 *)(void *)w + b;
            q->d = di_float_to_half(0.01f * rndf());
            for (int j = 0; j < DI_QK; j++) q->qs[j] = q->qs[j] == -128 ? -127 : q->qs[j]; /* ggml never stores -128 */
        }
        if (t == DI_DTYPE_Q4_1) {
            ((di_block_q4_1 *)(void *)w)[b].d = di_float_to_half(0.1f * rndf());
            ((di_block_q4_1 *)(void *)w)[b].m = di_float_to_half(0.5f * rndf());
        }
    }
    return w;
}

/* Random activations with the awkward cases: an all-zero block, exact
 * half-way ties (x * 127 / amax = k + 0.5) and a wide dynamic range. */
static void fill_activations(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = rndf() * (i % 97 == 0 ? 40.0f : 1.0f);
    if (n >= 64) {
        memset(x, 0, 32 * sizeof(float));
        x[32] = 127.0f; /* id = 1: x = k + 0.5 must round to even */
        for (int j = 1; j < 32; j++) x[32 + j] = (float)(j - 16) + 0.5f;
    }
}

static void c_and_avx2_quantize_and_dot_identically(void **state) {
    (void)state;
    const di_ggml_kernels *avx2 = di_ggml_kernels_avx2();
    if (!avx2) {
        fprintf(stderr, "no AVX2: only the C kernels exist\n");
        skip();
    }
    enum { N = 576, OUT = 24 };
    static float x[N];
    static int8_t qa[N], qb[N];
    static float da[N / 32], db[N / 32], sa[N / 32], sb[N / 32];
    for (int rep = 0; rep < 8; rep++) {
        fill_activations(x, N);
        di_ggml_kernels_c.quantize(x, qa, da, sa, N);
        avx2->quantize(x, qb, db, sb, N);
        assert_memory_equal(qa, qb, sizeof qa);
        assert_memory_equal(da, db, sizeof da);
        assert_memory_equal(sa, sb, sizeof sa);
        for (size_t t = 0; t < sizeof TYPES / sizeof TYPES[0]; t++) {
            uint64_t rb;
            uint8_t *w = random_weights(TYPES[t], OUT, N, &rb);
            for (int o = 0; o < OUT; o++) {
                float c = di_ggml_kernels_c.dot(TYPES[t], w + o * rb, qa, da, sa, N);
                float v = avx2->dot(TYPES[t], w + o * rb, qa, da, sa, N);
                if (memcmp(&c, &v, sizeof c)) fail_msg("dtype %d row %d: c %.9g avx2 %.9g", (int)TYPES[t], o, c, v);
                if (o % 4) continue;
                float x4[4], c4[4]; /* 4 rows at once: each the row's dot */
                avx2->dot_x4(TYPES[t], w + o * rb, rb, qa, da, sa, N, x4);
                di_ggml_kernels_c.dot_x4(TYPES[t], w + o * rb, rb, qa, da, sa, N, c4);
                for (int j = 0; j < 4; j++) {
                    float one = di_ggml_kernels_c.dot(TYPES[t], w + (o + j) * rb, qa, da, sa, N);
                    assert_memory_equal(&x4[j], &one, sizeof one);
                    assert_memory_equal(&c4[j], &one, sizeof one);
                }
            }
            free(w);
        }
    }
}

static void quantizer_follows_ggml_definition(void **state) {
    (void)state;
    float x[64];
    fill_activations(x, 64);
    int8_t q[64];
    float d[2], s[2];
    di_ggml_kernels_c.quantize(x, q, d, s, 64);
    /* the zero block: d = s = 0, q = 0 */
    assert_true(d[0] == 0.0f && s[0] == 0.0f);
    for (int j = 0; j < 32; j++) assert_int_equal(q[j], 0);
    /* amax 127: d = 1 (exact in f16), q = x rounded half to even */
    assert_true(d[1] == 1.0f);
    assert_int_equal(q[32], 127);
    int32_t sum = 127;
    for (int j = 1; j < 32; j++) {
        float v = (float)(j - 16) + 0.5f;
        int32_t want = (int32_t)v; /* toward zero */
        if (fabsf(v - (float)want) == 0.5f && want % 2 != 0) want += v > 0 ? 1 : -1;
        assert_int_equal(q[32 + j], want);
        sum += want;
    }
    assert_true(s[1] == di_half_to_float(di_float_to_half((float)sum)));
    /* a generic block: d is amax / 127 rounded to f16, s = f16(d * sum q) */
    float y[32];
    for (int j = 0; j < 32; j++) y[j] = 0.37f * rndf();
    y[5] = -0.9f;
    di_ggml_kernels_c.quantize(y, q, d, s, 32);
    assert_true(d[0] == di_half_to_float(di_float_to_half(0.9f / 127.0f)));
    sum = 0;
    for (int j = 0; j < 32; j++) {
        assert_int_equal(q[j], (int32_t)nearbyintf(y[j] * (127.0f / 0.9f)));
        sum += q[j];
    }
    assert_int_equal(q[5], -127);
    assert_true(s[0] == di_half_to_float(di_float_to_half(0.9f / 127.0f * (float)sum)));
}

/* The dot is the exact sum of dequantized weight times dequantized
 * activation, up to float rounding of the lanes and the Q4_1 minimums. */
static void dot_matches_dequantized_math(void **state) {
    (void)state;
    enum { N = 1536, OUT = 8 };
    static float x[N];
    static int8_t q[N];
    static float d[N / 32], s[N / 32], wf[N];
    fill_activations(x, N);
    di_ggml_kernels_c.quantize(x, q, d, s, N);
    for (size_t t = 0; t < sizeof TYPES / sizeof TYPES[0]; t++) {
        uint64_t rb;
        uint8_t *w = random_weights(TYPES[t], OUT, N, &rb);
        for (int o = 0; o < OUT; o++) {
            di_dtype_traits_of(TYPES[t])->to_float(w + o * rb, wf, N);
            double want = 0, mag = 0;
            for (int i = 0; i < N; i++) {
                double xi = (double)q[i] * d[i / 32];
                want += (double)wf[i] * xi;
                mag += fabs((double)wf[i] * xi);
            }
            if (TYPES[t] == DI_DTYPE_Q4_1) { /* the minimum goes through s = f16(d * sum q) */
                want = 0;
                for (int b = 0; b < N / 32; b++) {
                    const di_block_q4_1 *blk = (const di_block_q4_1 *)(const void *)(w + o * rb) + b;
                    double dw = di_half_to_float(blk->d), mw = di_half_to_float(blk->m);
                    for (int j = 0; j < 32; j++) {
                        int qw = j < 16 ? blk->qs[j] & 15 : blk->qs[j - 16] >> 4;
                        want += dw * qw * (double)q[b * 32 + j] * d[b];
                    }
                    want += mw * s[b];
                    mag += fabs(mw * s[b]);
                }
            }
            float got = di_ggml_kernels_c.dot(TYPES[t], w + o * rb, q, d, s, N);
            if (fabs(got - want) > 1e-5 * mag + 1e-6)
                fail_msg("dtype %d row %d: %.9g vs %.9g (mag %.3g)", (int)TYPES[t], o, got, want, mag);
        }
        free(w);
    }
}

static void expf_is_close_to_libm_and_saturates(void **state) {
    (void)state;
    for (int i = 0; i <= 190000; i++) {
        float x = -100.0f + (float)i * 0.00095f; /* up to 80.5 */
        double want = exp((double)x);
        float got = di_ggml_expf(x);
        if (want < 1e-37) continue; /* subnormal results: checked below */
        if (fabs(got - want) > 3e-7 * want) fail_msg("expf(%.9g) = %.9g, want %.9g", x, got, want);
    }
    assert_true(di_ggml_expf(0.0f) == 1.0f);
    assert_true(di_ggml_expf(-INFINITY) == 0.0f);
    assert_true(di_ggml_expf(-200.0f) == 0.0f);
    assert_true(isinf(di_ggml_expf(200.0f)));
    float g[3] = {0.0f, 3.0f, -3.0f}, u[3] = {5.0f, 1.0f, 2.0f};
    di_ggml_swiglu(g, u, 3);
    assert_true(g[0] == 0.0f);
    assert_true(fabsf(g[1] - 3.0f / (1.0f + expf(-3.0f))) < 1e-6f);
    assert_true(fabsf(g[2] - 2.0f * (-3.0f / (1.0f + expf(3.0f)))) < 1e-6f);
}

static void rmsnorm_and_rope_stay_close_to_exact(void **state) {
    (void)state;
    enum { E = 576, HEADS = 3, HD = 64 };
    static float x[E], w[E], a[E], b[E];
    for (int i = 0; i < E; i++) x[i] = rndf() * 3.0f, w[i] = rndf();
    di_ggml_rmsnorm(x, w, a, E, 1e-5f);
    di_rmsnorm(x, w, b, 1, E, 1e-5f);
    for (int i = 0; i < E; i++) assert_true(fabsf(a[i] - b[i]) <= 1e-6f * (fabsf(b[i]) + 1e-3f));
    /* RoPE: the iterated float angles drift from the exact ones by a few
     * ulps of pos * theta; at pos 4000 that is ~1e-3 rad at most */
    float inv_freq[HD / 2];
    for (int i = 0; i < HD / 2; i++) inv_freq[i] = (float)(1.0 / pow(10000.0, 2.0 * i / HD));
    float theta_scale = powf(10000.0f, -2.0f / HD);
    for (int neox = 0; neox < 2; neox++) {
        for (int32_t pos = 0; pos <= 4000; pos += 500) {
            for (int i = 0; i < HEADS * HD; i++) a[i] = b[i] = rndf();
            di_ggml_rope(a, pos, HEADS, HD, HD, theta_scale, 1.0f, NULL, neox);
            di_rope(b, &pos, 1, HEADS, HD, HD, inv_freq, neox);
            for (int i = 0; i < HEADS * HD; i++)
                if (fabsf(a[i] - b[i]) > 3e-3f) fail_msg("neox %d pos %d [%d]: %g vs %g", neox, pos, i, a[i], b[i]);
        }
    }
    /* position 0 is the identity */
    for (int i = 0; i < HD; i++) a[i] = b[i] = rndf();
    di_ggml_rope(a, 0, 1, HD, HD, theta_scale, 1.0f, NULL, 0);
    assert_memory_equal(a, b, HD * sizeof(float));
}

/* ---- matmul and attention through the ggml table ------------------------ */

static void ggml_matmul_is_close_and_invariant(void **state) {
    (void)state;
    const di_cpu_kernels *k = di_cpu_kernels_ggml();
    assert_string_equal(k->name, "ggml");
    assert_ptr_equal(di_cpu_kernels_by_name("ggml"), k);
    assert_non_null(k->ggml);
    enum { N_IN = 192, N_OUT = 40, ROWS = 9 };
    di_threadpool *pool;
    di_error err;
    assert_int_equal(di_threadpool_create(2, &pool, &err), DI_OK);
    static float x[ROWS * N_IN], y[ROWS * N_OUT], y1[N_OUT], yr[ROWS * N_OUT];
    float *scratch = malloc(sizeof(float) * (size_t)di_matmul_scratch_floats(ROWS, N_IN, 2));
    assert_non_null(scratch);
    fill_activations(x, ROWS * N_IN);
    for (size_t t = 0; t < sizeof TYPES / sizeof TYPES[0]; t++) {
        uint64_t rb;
        uint8_t *w = random_weights(TYPES[t], N_OUT, N_IN, &rb);
        di_matmul_args a = {TYPES[t], w, rb, x, N_IN, y, N_OUT, ROWS, N_IN, N_OUT, NULL};
        di_matmul(k, &a, scratch, pool);
        di_matmul_args ar = a;
        ar.y = yr;
        assert_int_equal(di_matmul_ref(&ar, &err), DI_OK);
        for (int r = 0; r < ROWS; r++) { /* each row alone, one thread: the same bits */
            di_matmul_args a1 = a;
            a1.x = x + r * N_IN;
            a1.y = y1;
            a1.n_rows = 1;
            di_matmul(k, &a1, scratch, NULL);
            assert_memory_equal(y1, y + r * N_OUT, sizeof y1);
            /* and each pair is exactly the table's dot of the quantized row */
            int8_t q[N_IN];
            float d[N_IN / 32], s[N_IN / 32];
            k->ggml->quantize(x + r * N_IN, q, d, s, N_IN);
            for (int o = 0; o < N_OUT; o++) {
                float want = k->ggml->dot(TYPES[t], w + o * rb, q, d, s, N_IN);
                assert_memory_equal(&want, &y1[o], sizeof want);
                /* against f32 math: each activation is off by at most d/2
                 * plus the f16 rounding of d (127 * d * 2^-11 < 0.07 d) */
                float wf[N_IN];
                di_dtype_traits_of(TYPES[t])->to_float(w + o * rb, wf, N_IN);
                double bound = 1e-6;
                for (int i = 0; i < N_IN; i++)
                    bound += fabs(wf[i]) * 0.57 * d[i / 32] + 1e-5 * fabs(wf[i] * x[r * N_IN + i]);
                if (fabs(y1[o] - yr[r * N_OUT + o]) > bound)
                    fail_msg("dtype %d row %d out %d: %g vs %g (bound %g)", (int)TYPES[t], r, o, y1[o],
                             yr[r * N_OUT + o], bound);
            }
        }
        free(w);
    }
    free(scratch);
    di_threadpool_free(pool);
}

enum { HEADS = 6, KV_HEADS = 2, HD = 32, BS = 4, NBLK = 12, ROWS = 7 };

static float q_rows[ROWS][HEADS * HD];
static float kc[NBLK][BS][KV_HEADS * HD], vc[NBLK][BS][KV_HEADS * HD];
static uint16_t kh[NBLK][BS][KV_HEADS * HD], vh[NBLK][BS][KV_HEADS * HD];

static void ggml_attention_is_close_and_invariant(void **state) {
    (void)state;
    const di_cpu_kernels *k = di_cpu_kernels_ggml();
    int32_t table[2][6];
    const int32_t *row_blocks[ROWS];
    static const int32_t seq[ROWS] = {0, 1, 0, 1, 1, 0, 1};
    int32_t pos[ROWS] = {0, 3, 5, 4, 12, 21, 23};
    for (int r = 0; r < ROWS; r++)
        for (int i = 0; i < HEADS * HD; i++) q_rows[r][i] = rndf();
    /* the f32 cache holds f16 values, so both caches must give the same bits */
    for (int b = 0; b < NBLK; b++)
        for (int t = 0; t < BS; t++)
            for (int i = 0; i < KV_HEADS * HD; i++) {
                kh[b][t][i] = di_float_to_half(rndf() * 2.0f);
                vh[b][t][i] = di_float_to_half(rndf());
                kc[b][t][i] = di_half_to_float(kh[b][t][i]);
                vc[b][t][i] = di_half_to_float(vh[b][t][i]);
            }
    for (int j = 0; j < 6; j++) table[0][j] = 11 - 2 * j, table[1][j] = 2 * j;
    for (int r = 0; r < ROWS; r++) row_blocks[r] = table[seq[r]];
    di_threadpool *pool;
    di_error err;
    assert_int_equal(di_threadpool_create(2, &pool, &err), DI_OK);
    int64_t sf = di_attention_ggml_scratch_floats(HEADS, KV_HEADS, HD, 24);
    int64_t se = di_attention_scratch_floats(HEADS, HD, BS);
    float *scratch = malloc(sizeof(float) * 2 * (size_t)(sf > se ? sf : se));
    assert_non_null(scratch);
    static float out[2][ROWS][HEADS * HD], exact[ROWS][HEADS * HD], one[HEADS * HD];
    for (int f16 = 0; f16 < 2; f16++) {
        di_attn_args a = {
            .q = &q_rows[0][0], .n_rows = ROWS, .n_heads = HEADS, .n_kv_heads = KV_HEADS, .head_dim = HD,
            .scale = 1.0f / sqrtf((float)HD), .k_cache = f16 ? (const void *)kh : (const void *)kc,
            .v_cache = f16 ? (const void *)vh : (const void *)vc, .kv_f16 = f16, .block_size = BS,
            .row_blocks = row_blocks, .pos = pos, .out = &out[f16][0][0],
        };
        di_attention_ggml(k, &a, 24, scratch, pool);
        if (f16) {
            a.out = &exact[0][0];
            di_attention(k, &a, scratch, pool);
        }
        for (int r = 0; r < ROWS; r++) { /* the row alone, one thread, tighter n_pos: the same bits */
            di_attn_args a1 = a;
            a1.q = q_rows[r];
            a1.n_rows = 1;
            a1.row_blocks = &row_blocks[r];
            a1.pos = &pos[r];
            a1.out = one;
            di_attention_ggml(k, &a1, pos[r] + 1, scratch, NULL);
            assert_memory_equal(one, out[f16][r], sizeof one);
        }
    }
    assert_memory_equal(out[0], out[1], sizeof out[0]);
    /* f16 rounding of q and of the probabilities: ~1e-3 of |v| */
    for (int r = 0; r < ROWS; r++)
        for (int i = 0; i < HEADS * HD; i++)
            if (fabsf(out[1][r][i] - exact[r][i]) > 2e-3f)
                fail_msg("row %d [%d]: ggml %g exact %g", r, i, out[1][r][i], exact[r][i]);
    free(scratch);
    di_threadpool_free(pool);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(c_and_avx2_quantize_and_dot_identically),
        cmocka_unit_test(quantizer_follows_ggml_definition),
        cmocka_unit_test(dot_matches_dequantized_math),
        cmocka_unit_test(expf_is_close_to_libm_and_saturates),
        cmocka_unit_test(rmsnorm_and_rope_stay_close_to_exact),
        cmocka_unit_test(ggml_matmul_is_close_and_invariant),
        cmocka_unit_test(ggml_attention_is_close_and_invariant),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
