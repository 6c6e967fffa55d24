/* tensor: reference quantizers. Byte-for-byte against gguf.quants.quantize
 * where it has a quantizer (goldens), and quantize -> dequantize round trips
 * within each format's error bound on random data elsewhere. */
#include "golden.h"

#include "tensor/dtype.h"
#include "tensor/fp8.h"
#include "tensor/fp8_block.h"
#include "tensor/half.h"
#include "tensor/mxfp4.h"
#include "tensor/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define N_BLOCKS_K 64 /* super-blocks per random round-trip test */
#define TEST_SEED 0x5eedULL

/* ---- deterministic random numbers (splitmix64 + Box-Muller) --------------- */

typedef struct rng { uint64_t s; } rng;

static uint64_t rng_next(rng *r) {
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static double rng_uniform(rng *r) { /* (0, 1) */
    return ((double)(rng_next(r) >> 11) + 0.5) * 0x1p-53;
}

static float rng_normal(rng *r) {
    return (float)(sqrt(-2.0 * log(rng_uniform(r))) * cos(6.283185307179586 * rng_uniform(r)));
}

/* n normal values in blocks of `block` with a per-block magnitude spread over
 * 2^-8..2^4, like the rows of a real weight matrix. */
static float *random_floats(rng *r, int64_t n, int block) {
    float *x = malloc((size_t)n * sizeof *x);
    assert_non_null(x);
    for (int64_t b = 0; b < n / block; b++) {
        float scale = ldexpf(1.0f, (int)(rng_next(r) % 13) - 8);
        for (int i = 0; i < block; i++) x[b * block + i] = rng_normal(r) * scale;
    }
    return x;
}

/* ---- byte-for-byte against gguf.quants ------------------------------------- */

static void check_quant_golden(const char *name, di_dtype t) {
    golden_file g;
    golden_load(&g, name);
    const golden_array *in = golden_get(&g, "input", GOLDEN_F32);
    const golden_array *want = golden_get(&g, "expected", GOLDEN_U8);
    float *x = golden_floats(in);
    uint64_t bytes;
    assert_int_equal(di_dtype_row_bytes(t, (int64_t)in->count, &bytes), DI_OK);
    assert_int_equal(bytes, want->count);
    uint8_t *got = malloc(bytes);
    assert_non_null(got);
    assert_int_equal(di_dtype_row_from_float(t, x, got, (int64_t)in->count, NULL), DI_OK);
    int block_bytes = di_dtype_traits_of(t)->block_bytes;
    for (uint64_t i = 0; i < bytes; i++)
        if (got[i] != want->data[i])
            fail_msg("%s: block %llu byte %llu: got 0x%02x, want 0x%02x", name,
                     (unsigned long long)(i / (uint64_t)block_bytes), (unsigned long long)(i % (uint64_t)block_bytes),
                     got[i], want->data[i]);
    free(got);
    free(x);
    golden_free(&g);
}

static void quantizers_match_gguf_byte_for_byte(void **state) {
    (void)state;
    check_quant_golden("quant_q8_0", DI_DTYPE_Q8_0);
    check_quant_golden("quant_q4_0", DI_DTYPE_Q4_0);
    check_quant_golden("quant_q4_1", DI_DTYPE_Q4_1);
    check_quant_golden("quant_q5_0", DI_DTYPE_Q5_0);
    check_quant_golden("quant_q5_1", DI_DTYPE_Q5_1);
    check_quant_golden("quant_mxfp4", DI_DTYPE_MXFP4);
}

/* ---- round trips ------------------------------------------------------------ */

/* Quantizes and dequantizes n random values (magnitude changing every
 * `run` elements) through t; returns the dequantized copy (caller frees)
 * and the input in *x_out. */
static float *round_trip(di_dtype t, int64_t n, int run, uint64_t seed, float **x_out) {
    rng r = {seed};
    float *x = random_floats(&r, n, run);
    uint64_t bytes;
    assert_int_equal(di_dtype_row_bytes(t, n, &bytes), DI_OK);
    uint8_t *q = malloc(bytes);
    float *y = malloc((size_t)n * sizeof *y);
    assert_non_null(q);
    assert_non_null(y);
    di_error err;
    assert_int_equal(di_dtype_row_from_float(t, x, q, n, &err), DI_OK);
    assert_int_equal(di_dtype_row_to_float(t, q, y, n, &err), DI_OK);
    free(q);
    *x_out = x;
    return y;
}

/* Per-block bound for the legacy formats: every element within `steps`
 * quantization steps of its input, the step being the block's range over the
 * number of levels. Half a step is the rounding error; the rest covers the
 * scale's own rounding to f16 (relative 2^-11, times up to 31 levels).
 * Q4_0 / Q5_0 put the extreme element on the long side of an asymmetric
 * range (-8..7): values beyond `reach` steps on the other side clip, and
 * err by their excess over reach steps. */
static void check_block_bound(di_dtype t, float levels, float reach, bool symmetric, float steps) {
    const int64_t n = 32 * 256;
    float *x;
    float *y = round_trip(t, n, 32, TEST_SEED + (uint64_t)t, &x);
    for (int64_t b = 0; b < n / 32; b++) {
        float mn = x[b * 32], mx = x[b * 32], amax = 0.0f;
        for (int i = 0; i < 32; i++) {
            float v = x[b * 32 + i];
            if (v < mn) mn = v;
            if (v > mx) mx = v;
            if (fabsf(v) > amax) amax = fabsf(v);
        }
        float step = symmetric ? amax / levels : (mx - mn) / levels;
        for (int i = 0; i < 32; i++) {
            float e = fabsf(x[b * 32 + i] - y[b * 32 + i]);
            float bound = steps * step;
            if (symmetric && fabsf(x[b * 32 + i]) > reach * step)
                bound = fmaxf(bound, fabsf(x[b * 32 + i]) - reach * step + (steps - 0.5f) * step);
            if (e > bound)
                fail_msg("%s block %lld elem %d: |%g - %g| = %g > %g steps of %g", di_dtype_traits_of(t)->name,
                         (long long)b, i, (double)x[b * 32 + i], (double)y[b * 32 + i], (double)e, (double)steps,
                         (double)step);
        }
    }
    free(x);
    free(y);
}

static void legacy_round_trips_stay_within_half_a_step(void **state) {
    (void)state;
    /* Q8: symmetric, 127 levels per side. Q4_0/Q5_0: the extreme element
     * sits on -8/-16, so the step is amax / 8 (/ 16). Q4_1/Q5_1: range over
     * 15 / 31. 0.5 steps of rounding + scale rounding slack. */
    check_block_bound(DI_DTYPE_Q8_0, 127.0f, 127.0f, true, 0.57f);
    check_block_bound(DI_DTYPE_Q8_1, 127.0f, 127.0f, true, 0.57f);
    check_block_bound(DI_DTYPE_Q4_0, 8.0f, 7.0f, true, 0.51f);
    check_block_bound(DI_DTYPE_Q5_0, 16.0f, 15.0f, true, 0.52f);
    check_block_bound(DI_DTYPE_Q4_1, 15.0f, 15.0f, false, 0.52f);
    check_block_bound(DI_DTYPE_Q5_1, 31.0f, 31.0f, false, 0.54f);
}

/* Root-mean-square error relative to the RMS of the input, per super-block
 * (blocks have very different magnitudes); returns the worst block. */
static double worst_block_rel_rmse(const float *x, const float *y, int64_t n, int block) {
    double worst = 0.0;
    for (int64_t b = 0; b < n / block; b++) {
        double se = 0.0, sx = 0.0;
        for (int i = 0; i < block; i++) {
            double d = (double)x[b * block + i] - y[b * block + i];
            se += d * d;
            sx += (double)x[b * block + i] * x[b * block + i];
        }
        double rel = sqrt(se / sx);
        if (rel > worst) worst = rel;
    }
    return worst;
}

static void k_quant_round_trips_meet_their_error_bounds(void **state) {
    (void)state;
    const int64_t n = DI_QK_K * N_BLOCKS_K;
    struct { di_dtype t; double max_rel_rmse; } CASES[] = {
        /* Gaussian data: 4 bits with per-32 scale and offset gives ~0.07 relative
         * RMSE, 6 bits per 16 about 0.02, Q8_K (8-bit, one scale per 256)
         * about 0.008 (worst block 0.01). Bounds have margin but catch a broken layout, whose
         * error is ~1. */
        {DI_DTYPE_Q4_K, 0.11},
        {DI_DTYPE_Q6_K, 0.03},
        {DI_DTYPE_Q8_K, 0.015},
    };
    for (size_t c = 0; c < sizeof CASES / sizeof CASES[0]; c++) {
        float *x;
        float *y = round_trip(CASES[c].t, n, DI_QK_K, TEST_SEED + c, &x);
        double worst = worst_block_rel_rmse(x, y, n, DI_QK_K);
        if (!(worst < CASES[c].max_rel_rmse))
            fail_msg("%s: worst block relative RMSE %.4f >= %.4f", di_dtype_traits_of(CASES[c].t)->name, worst,
                     CASES[c].max_rel_rmse);
        free(x);
        free(y);
    }
}

/* The K-quant search must beat the plain "range / levels" quantizer it
 * starts from: compare Q4_K with Q4_1 (same bits, per-32 scale and min, but
 * f16 scales and no search) on the same data. */
static void q4_K_is_at_least_as_accurate_as_q4_1(void **state) {
    (void)state;
    const int64_t n = DI_QK_K * N_BLOCKS_K;
    float *x1, *x2;
    float *yk = round_trip(DI_DTYPE_Q4_K, n, DI_QK_K, TEST_SEED, &x1);
    float *y1 = round_trip(DI_DTYPE_Q4_1, n, DI_QK_K, TEST_SEED, &x2);
    assert_memory_equal(x1, x2, (size_t)n * sizeof(float));
    double ek = 0.0, e1 = 0.0;
    for (int64_t i = 0; i < n; i++) {
        ek += ((double)x1[i] - yk[i]) * ((double)x1[i] - yk[i]);
        e1 += ((double)x1[i] - y1[i]) * ((double)x1[i] - y1[i]);
    }
    if (!(ek < e1)) fail_msg("q4_K squared error %g not below q4_1's %g", ek, e1);
    free(x1);
    free(x2);
    free(yk);
    free(y1);
}

static void quantizers_handle_zero_and_constant_blocks(void **state) {
    (void)state;
    static const di_dtype TYPES[] = {DI_DTYPE_Q4_0, DI_DTYPE_Q4_1, DI_DTYPE_Q5_0, DI_DTYPE_Q5_1,
                                     DI_DTYPE_Q8_0, DI_DTYPE_Q8_1, DI_DTYPE_Q4_K, DI_DTYPE_Q6_K,
                                     DI_DTYPE_Q8_K, DI_DTYPE_MXFP4};
    float x[DI_QK_K], y[DI_QK_K];
    uint8_t q[sizeof(di_block_q8_K)];
    for (size_t k = 0; k < sizeof TYPES / sizeof TYPES[0]; k++) {
        const di_dtype_traits *tr = di_dtype_traits_of(TYPES[k]);
        int64_t n = tr->block_size;
        for (int variant = 0; variant < 3; variant++) {
            float v = variant == 0 ? 0.0f : variant == 1 ? 0.75f : -2.0f;
            for (int64_t i = 0; i < n; i++) x[i] = v;
            assert_int_equal(di_dtype_row_from_float(TYPES[k], x, q, n, NULL), DI_OK);
            assert_int_equal(di_dtype_row_to_float(TYPES[k], q, y, n, NULL), DI_OK);
            for (int64_t i = 0; i < n; i++)
                if (fabsf(y[i] - v) > 0.01f * fabsf(v) + 1e-6f)
                    fail_msg("%s: constant %g came back as %g", tr->name, (double)v, (double)y[i]);
        }
    }
}

static void q8_1_and_q8_K_carry_consistent_sums(void **state) {
    (void)state;
    rng r = {TEST_SEED};
    float *x = random_floats(&r, DI_QK_K, DI_QK_K);
    di_block_q8_K k;
    di_quant_q8_K_from_float(x, &k, DI_QK_K);
    for (int j = 0; j < DI_QK_K / 16; j++) {
        int sum = 0;
        for (int l = 0; l < 16; l++) sum += k.qs[j * 16 + l];
        assert_int_equal(k.bsums[j], sum);
    }
    di_block_q8_1 b[DI_QK_K / DI_QK8_1];
    di_quant_q8_1_from_float(x, b, DI_QK_K);
    for (int i = 0; i < DI_QK_K / DI_QK8_1; i++) {
        int sum = 0;
        for (int l = 0; l < DI_QK8_1; l++) sum += b[i].qs[l];
        float d = di_f16_to_f32(b[i].d), s = di_f16_to_f32(b[i].s);
        /* s = f16(d_f32 * sum); d itself is rounded to f16 too. */
        assert_true(fabsf(s - d * (float)sum) <= 2e-3f * fabsf(d * (float)sum) + 1e-6f);
    }
    free(x);
}

/* ---- FP8 block quantizer --------------------------------------------------- */

/* e4m3 keeps 3 mantissa bits: a normal value is within 2^-4 relative; below
 * the normal range (|x / s| < 2^-6) the absolute error is half the subnormal
 * quantum, 2^-10 * s. */
static void check_fp8_round_trip(int64_t rows, int64_t cols, int32_t block, di_dtype scale_dtype, bool pow2) {
    di_fp8_block_layout l = {rows, cols, block, scale_dtype};
    int64_t sr, sc;
    di_error err;
    assert_int_equal(di_fp8_block_scale_shape(&l, &sr, &sc, &err), DI_OK);
    rng r = {TEST_SEED + (uint64_t)block};
    float *x = random_floats(&r, rows * cols, (int)cols);
    x[0] = 0.0f;
    uint8_t *w = malloc((size_t)(rows * cols));
    uint8_t *s = malloc((size_t)(sr * sc) * 4);
    float *y = malloc((size_t)(rows * cols) * sizeof *y);
    assert_true(w && s && y);
    assert_int_equal(di_fp8_block_quantize(&l, x, pow2, w, s, &err), DI_OK);
    assert_int_equal(di_fp8_block_dequantize_rows(&l, w, s, 0, rows, y, &err), DI_OK);
    for (int64_t i = 0; i < rows * cols; i++) {
        int64_t br = (i / cols) / block, bc = (i % cols) / block;
        float scale;
        if (scale_dtype == DI_DTYPE_F8_E8M0) scale = di_e8m0_to_f32(s[br * sc + bc]);
        else if (scale_dtype == DI_DTYPE_BF16) {
            uint16_t b16;
            memcpy(&b16, s + 2 * (br * sc + bc), 2);
            scale = di_bf16_to_f32(b16);
        } else memcpy(&scale, s + 4 * (br * sc + bc), 4);
        if (pow2) {
            int e;
            assert_true(frexpf(scale, &e) == 0.5f); /* a power of two */
        }
        float bound = fmaxf(0x1p-4f * fabsf(x[i]), 0x1p-10f * scale) * 1.0001f;
        if (!(fabsf(x[i] - y[i]) <= bound))
            fail_msg("fp8 block B=%d: element %lld: %g -> %g (scale %g)", block, (long long)i, (double)x[i],
                     (double)y[i], (double)scale);
    }
    free(x);
    free(w);
    free(s);
    free(y);
}

static void fp8_block_round_trips_within_e4m3_precision(void **state) {
    (void)state;
    check_fp8_round_trip(96, 80, DI_FP8_BLOCK_V41, DI_DTYPE_F32, false);
    check_fp8_round_trip(96, 80, DI_FP8_BLOCK_V41, DI_DTYPE_F32, true);
    check_fp8_round_trip(70, 45, DI_FP8_BLOCK_V41, DI_DTYPE_F8_E8M0, true); /* partial blocks */
    check_fp8_round_trip(200, 136, DI_FP8_BLOCK_V4, DI_DTYPE_F8_E8M0, true);
    check_fp8_round_trip(130, 129, DI_FP8_BLOCK_V4, DI_DTYPE_BF16, false);
}

static void fp8_block_scales_use_the_e4m3_range(void **state) {
    (void)state;
    /* One 32x32 block whose largest element is 1000: float scale maps it to
     * exactly 448; the power-of-two scale rounds up (2^ceil(log2(1000/448)) =
     * 4), so 1000 becomes 250 in e4m3 range and nothing saturates. */
    float x[32 * 32];
    for (int i = 0; i < 32 * 32; i++) x[i] = (float)(i % 7) - 3.0f;
    x[5] = 1000.0f;
    uint8_t w[32 * 32], e;
    float fs;
    di_fp8_block_layout lf = {32, 32, 32, DI_DTYPE_F32};
    assert_int_equal(di_fp8_block_quantize(&lf, x, false, w, &fs, NULL), DI_OK);
    assert_true(fs == 1000.0f / 448.0f);
    assert_int_equal(w[5], DI_E4M3_MAX_BITS);
    di_fp8_block_layout le = {32, 32, 32, DI_DTYPE_F8_E8M0};
    assert_int_equal(di_fp8_block_quantize(&le, x, false, w, &e, NULL), DI_OK);
    assert_int_equal(e, DI_E8M0_BIAS + 2);
    assert_true(di_e4m3_to_f32(w[5]) == 256.0f); /* 250 rounds to 256 in e4m3 */
    /* All-zero block: scale 1, codes 0. */
    float z[4] = {0};
    uint8_t wz[4];
    di_fp8_block_layout lz = {2, 2, 32, DI_DTYPE_F8_E8M0};
    assert_int_equal(di_fp8_block_quantize(&lz, z, true, wz, &e, NULL), DI_OK);
    assert_int_equal(e, DI_E8M0_BIAS);
    assert_int_equal(wz[0] | wz[1] | wz[2] | wz[3], 0);
    /* Non-finite input is refused. */
    z[2] = NAN;
    di_error err;
    assert_int_equal(di_fp8_block_quantize(&lz, z, true, wz, &e, &err), DI_ERR_INVALID_ARG);
}

/* ---- MXFP4 ----------------------------------------------------------------- */

/* e2m1 with the OCP scale choice: elements up to 6 * scale are within half
 * the local e2m1 spacing (<= 1 * scale, relative 1/4 above 1 * scale); the
 * clipped top of the range (6*scale < |x| < 8*scale) errs by up to 2 *
 * scale. Overall: |err| <= max(0.25 * |x|, 0.25 * scale) unless clipped. */
static void check_mxfp4_error(const float *x, const float *y, int64_t n, const uint8_t *scale_of_group) {
    for (int64_t i = 0; i < n; i++) {
        float s = di_e8m0_to_f32(scale_of_group[i / DI_MXFP4_GROUP]);
        float err = fabsf(x[i] - y[i]);
        float bound = fabsf(x[i]) > DI_E2M1_MAX * s ? fabsf(x[i]) - DI_E2M1_MAX * s + 1e-6f * s
                                                     : fmaxf(0.25f * fabsf(x[i]), 0.25f * s);
        if (err > bound)
            fail_msg("mxfp4 elem %lld: %g -> %g (scale %g)", (long long)i, (double)x[i], (double)y[i], (double)s);
    }
}

static void mxfp4_round_trips_in_both_layouts(void **state) {
    (void)state;
    const int64_t rows = 16, cols = 128, groups = cols / DI_MXFP4_GROUP;
    rng r = {TEST_SEED};
    float *x = random_floats(&r, rows * cols, DI_MXFP4_GROUP);
    uint8_t blocks[16 * 64], scales[16 * 4];
    float y[16 * 128], y2[16 * 128];
    di_error err;
    assert_int_equal(di_mxfp4_split_quantize(rows, cols, x, blocks, scales, &err), DI_OK);
    assert_int_equal(di_mxfp4_split_dequantize_rows(rows, cols, blocks, scales, 0, rows, y, &err), DI_OK);
    check_mxfp4_error(x, y, rows * cols, scales);
    /* The ggml block quantizer makes the same numbers; converting the split
     * tensor to blocks gives the same bytes. */
    di_block_mxfp4 b1[16 * 4], b2[16 * 4];
    assert_int_equal(di_dtype_row_from_float(DI_DTYPE_MXFP4, x, b1, rows * cols, &err), DI_OK);
    assert_int_equal(di_mxfp4_split_to_blocks(rows, cols, blocks, scales, b2, &err), DI_OK);
    assert_memory_equal(b1, b2, sizeof b1);
    assert_int_equal(di_dtype_row_to_float(DI_DTYPE_MXFP4, b1, y2, rows * cols, &err), DI_OK);
    for (int64_t i = 0; i < rows * cols; i++) assert_true(y[i] == y2[i]);
    for (int64_t g = 0; g < rows * groups; g++) assert_int_equal(b1[g].e, scales[g]);
    assert_int_equal(di_mxfp4_split_quantize(rows, 100, x, blocks, scales, &err), DI_ERR_INVALID_ARG);
    free(x);
}

static void mxfp4_scale_and_code_choice(void **state) {
    (void)state;
    /* amax in [4, 8) -> scale 1 (code 127): 6 maps to code 7, 7 clips to 6. */
    assert_int_equal(di_mxfp4_scale_for_absmax(4.0f), 127);
    assert_int_equal(di_mxfp4_scale_for_absmax(7.99f), 127);
    assert_int_equal(di_mxfp4_scale_for_absmax(8.0f), 128);
    assert_int_equal(di_mxfp4_scale_for_absmax(0.0f), 0);
    assert_int_equal(di_mxfp4_scale_for_absmax(0x1p-140f), 0);   /* clamped */
    assert_int_equal(di_mxfp4_scale_for_absmax(0x1p127f), 252);
    assert_int_equal(di_mxfp4_nearest_code(6.0f, 127), 7);
    assert_int_equal(di_mxfp4_nearest_code(7.0f, 127), 7);
    assert_int_equal(di_mxfp4_nearest_code(-0.25f, 127), 0);  /* tie 0 / -0.5: first code, +0 */
    assert_int_equal(di_mxfp4_nearest_code(2.5f, 127), 4);    /* tie 2 / 3: smaller */
    assert_int_equal(di_mxfp4_nearest_code(-5.0f, 127), 14);  /* tie -4 / -6: smaller magnitude */
    assert_int_equal(di_mxfp4_nearest_code(0.7f, 127), 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(quantizers_match_gguf_byte_for_byte),
        cmocka_unit_test(legacy_round_trips_stay_within_half_a_step),
        cmocka_unit_test(k_quant_round_trips_meet_their_error_bounds),
        cmocka_unit_test(q4_K_is_at_least_as_accurate_as_q4_1),
        cmocka_unit_test(quantizers_handle_zero_and_constant_blocks),
        cmocka_unit_test(q8_1_and_q8_K_carry_consistent_sums),
        cmocka_unit_test(fp8_block_round_trips_within_e4m3_precision),
        cmocka_unit_test(fp8_block_scales_use_the_e4m3_range),
        cmocka_unit_test(mxfp4_round_trips_in_both_layouts),
        cmocka_unit_test(mxfp4_scale_and_code_choice),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
