/* tensor: dtype traits, row sizes, and dequantization of every type against
 * goldens from independent oracles (gguf.quants, numpy, ml_dtypes; see
 * scripts/gen_goldens_dtype.py). Quantizers are in test_quant.c. */
#include "golden.h"

#include "tensor/dtype.h"
#include "tensor/fp8.h"
#include "tensor/fp8_block.h"
#include "tensor/half.h"
#include "tensor/mxfp4.h"
#include "tensor/quant.h"

#include <math.h>
#include <string.h>

/* ---- traits -------------------------------------------------------------- */

static void traits_table_is_complete_and_consistent(void **state) {
    (void)state;
    for (int t = 0; t < DI_DTYPE_COUNT; t++) {
        const di_dtype_traits *tr = di_dtype_traits_of((di_dtype)t);
        assert_non_null(tr);
        assert_non_null(tr->name);
        assert_true(tr->block_size >= 1);
        assert_true(tr->block_bytes >= 1);
        assert_non_null(tr->to_float);
        assert_int_equal(tr->is_quantized, tr->block_size > 1);
        if (tr->ggml_type >= 0) {
            di_dtype back;
            assert_int_equal(di_dtype_from_ggml((uint32_t)tr->ggml_type, &back), DI_OK);
            assert_int_equal(back, t);
        }
    }
    assert_null(di_dtype_traits_of(DI_DTYPE_COUNT));
    assert_null(di_dtype_traits_of((di_dtype)-1));
}

static void traits_have_ggml_ids_and_sizes(void **state) {
    (void)state;
    static const struct { di_dtype t; int ggml; int block; int bytes; } WANT[] = {
        {DI_DTYPE_F32, 0, 1, 4},       {DI_DTYPE_F16, 1, 1, 2},      {DI_DTYPE_Q4_0, 2, 32, 18},
        {DI_DTYPE_Q4_1, 3, 32, 20},    {DI_DTYPE_Q5_0, 6, 32, 22},   {DI_DTYPE_Q5_1, 7, 32, 24},
        {DI_DTYPE_Q8_0, 8, 32, 34},    {DI_DTYPE_Q8_1, 9, 32, 36},   {DI_DTYPE_Q2_K, 10, 256, 84},
        {DI_DTYPE_Q3_K, 11, 256, 110}, {DI_DTYPE_Q4_K, 12, 256, 144}, {DI_DTYPE_Q5_K, 13, 256, 176},
        {DI_DTYPE_Q6_K, 14, 256, 210}, {DI_DTYPE_Q8_K, 15, 256, 292}, {DI_DTYPE_BF16, 30, 1, 2},
        {DI_DTYPE_MXFP4, 39, 32, 17},
    };
    for (size_t i = 0; i < sizeof WANT / sizeof WANT[0]; i++) {
        const di_dtype_traits *tr = di_dtype_traits_of(WANT[i].t);
        assert_int_equal(tr->ggml_type, WANT[i].ggml);
        assert_int_equal(tr->block_size, WANT[i].block);
        assert_int_equal(tr->block_bytes, WANT[i].bytes);
    }
    di_dtype t;
    assert_int_equal(di_dtype_from_ggml(4, &t), DI_ERR_UNSUPPORTED); /* removed Q4_2 */
    assert_int_equal(di_dtype_from_ggml(1000, &t), DI_ERR_UNSUPPORTED);
    assert_int_equal(di_dtype_from_safetensors("F8_E8M0", &t), DI_OK);
    assert_int_equal(t, DI_DTYPE_F8_E8M0);
    assert_int_equal(di_dtype_from_safetensors("F4", &t), DI_ERR_UNSUPPORTED);
}

static void row_bytes_checks_blocks_and_overflow(void **state) {
    (void)state;
    uint64_t b;
    assert_int_equal(di_dtype_row_bytes(DI_DTYPE_Q4_0, 64, &b), DI_OK);
    assert_int_equal(b, 36);
    assert_int_equal(di_dtype_row_bytes(DI_DTYPE_Q6_K, 512, &b), DI_OK);
    assert_int_equal(b, 420);
    assert_int_equal(di_dtype_row_bytes(DI_DTYPE_F16, 3, &b), DI_OK);
    assert_int_equal(b, 6);
    assert_int_equal(di_dtype_row_bytes(DI_DTYPE_F16, 0, &b), DI_OK);
    assert_int_equal(b, 0);
    assert_int_not_equal(di_dtype_row_bytes(DI_DTYPE_Q4_K, 255, &b), DI_OK);
    assert_int_not_equal(di_dtype_row_bytes(DI_DTYPE_F32, -1, &b), DI_OK);
    assert_int_not_equal(di_dtype_row_bytes(DI_DTYPE_COUNT, 32, &b), DI_OK);
    assert_int_equal(di_dtype_row_bytes(DI_DTYPE_F64, INT64_MAX, &b), DI_ERR_RANGE);
}

static void row_to_float_checks_its_arguments(void **state) {
    (void)state;
    uint8_t blk[sizeof(di_block_q4_0) * 2] = {0};
    float out[64];
    di_error err;
    assert_int_equal(di_dtype_row_to_float(DI_DTYPE_Q4_0, blk, out, 64, &err), DI_OK);
    assert_int_equal(di_dtype_row_to_float(DI_DTYPE_Q4_0, blk, out, 33, &err), DI_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "q4_0"));
    assert_int_equal(di_dtype_row_to_float(DI_DTYPE_Q4_0, blk, out, -32, &err), DI_ERR_INVALID_ARG);
    assert_int_equal(di_dtype_row_to_float(DI_DTYPE_COUNT, blk, out, 1, &err), DI_ERR_INVALID_ARG);
    assert_int_equal(di_dtype_row_to_float(DI_DTYPE_Q4_0, blk, out, 0, NULL), DI_OK);
    float in[256] = {0};
    uint8_t q[sizeof(di_block_q3_K)];
    assert_int_equal(di_dtype_row_from_float(DI_DTYPE_Q3_K, in, q, 256, &err), DI_ERR_UNSUPPORTED);
    assert_int_equal(di_dtype_row_from_float(DI_DTYPE_Q8_0, in, q, 31, &err), DI_ERR_INVALID_ARG);
}

/* ---- goldens: every type's to_float --------------------------------------- */

static void check_dequant_golden(const char *name, di_dtype t) {
    golden_file g;
    golden_load(&g, name);
    const golden_array *in = golden_get(&g, "input", GOLDEN_U8);
    const golden_array *want = golden_get(&g, "expected", GOLDEN_F32);
    const di_dtype_traits *tr = di_dtype_traits_of(t);
    uint64_t bytes;
    assert_int_equal(di_dtype_row_bytes(t, (int64_t)want->count, &bytes), DI_OK);
    assert_int_equal(bytes, in->count);
    float *expect = golden_floats(want);
    float *got = malloc(want->count * sizeof(float));
    assert_non_null(got);
    di_error err;
    assert_int_equal(di_dtype_row_to_float(t, in->data, got, (int64_t)want->count, &err), DI_OK);
    golden_expect_floats(tr->name, got, expect, want->count);
    free(got);
    free(expect);
    golden_free(&g);
}

static void golden_dequant_plain_floats(void **state) {
    (void)state;
    check_dequant_golden("dequant_f16", DI_DTYPE_F16);
    check_dequant_golden("dequant_bf16", DI_DTYPE_BF16);
}

static void golden_dequant_legacy_blocks(void **state) {
    (void)state;
    check_dequant_golden("dequant_q4_0", DI_DTYPE_Q4_0);
    check_dequant_golden("dequant_q4_1", DI_DTYPE_Q4_1);
    check_dequant_golden("dequant_q5_0", DI_DTYPE_Q5_0);
    check_dequant_golden("dequant_q5_1", DI_DTYPE_Q5_1);
    check_dequant_golden("dequant_q8_0", DI_DTYPE_Q8_0);
    check_dequant_golden("dequant_q8_1", DI_DTYPE_Q8_1);
}

static void golden_dequant_k_quants(void **state) {
    (void)state;
    check_dequant_golden("dequant_q2_K", DI_DTYPE_Q2_K);
    check_dequant_golden("dequant_q3_K", DI_DTYPE_Q3_K);
    check_dequant_golden("dequant_q4_K", DI_DTYPE_Q4_K);
    check_dequant_golden("dequant_q5_K", DI_DTYPE_Q5_K);
    check_dequant_golden("dequant_q6_K", DI_DTYPE_Q6_K);
    check_dequant_golden("dequant_q8_K", DI_DTYPE_Q8_K);
}

static void golden_dequant_fp8_and_mxfp4(void **state) {
    (void)state;
    check_dequant_golden("dequant_f8_e4m3", DI_DTYPE_F8_E4M3);
    check_dequant_golden("dequant_f8_e8m0", DI_DTYPE_F8_E8M0);
    check_dequant_golden("dequant_mxfp4", DI_DTYPE_MXFP4);
    golden_file g;
    golden_load(&g, "dequant_e2m1");
    const golden_array *in = golden_get(&g, "input", GOLDEN_U8);
    float *want = golden_floats(golden_get(&g, "expected", GOLDEN_F32));
    for (uint64_t i = 0; i < in->count; i++) {
        float got = di_e2m1_to_f32(in->data[i]);
        golden_expect_floats("e2m1", &got, &want[i], 1);
    }
    free(want);
    golden_free(&g);
}

/* ---- 16-bit float edge cases ---------------------------------------------- */

static void f16_converts_special_values(void **state) {
    (void)state;
    assert_true(di_f16_to_f32(0x7c00) == INFINITY);
    assert_true(di_f16_to_f32(0xfc00) == -INFINITY);
    assert_true(isnan(di_f16_to_f32(0x7e00)));
    assert_true(isnan(di_f16_to_f32(0x7c01))); /* signalling NaN stays NaN */
    assert_true(di_f16_to_f32(0x0001) == 0x1p-24f);
    assert_true(di_f16_to_f32(0x03ff) == 1023 * 0x1p-24f);
    assert_true(di_f16_to_f32(0x0400) == 0x1p-14f);
    assert_true(di_f16_to_f32(0x7bff) == 65504.0f);
    assert_int_equal(golden_bits(di_f16_to_f32(0x8000)), 0x80000000u);

    assert_int_equal(di_f32_to_f16(65504.0f), 0x7bff);
    assert_int_equal(di_f32_to_f16(65519.0f), 0x7bff); /* below the midpoint */
    assert_int_equal(di_f32_to_f16(65520.0f), 0x7c00); /* midpoint, to even = inf */
    assert_int_equal(di_f32_to_f16(1e10f), 0x7c00);
    assert_int_equal(di_f32_to_f16(-INFINITY), 0xfc00);
    uint16_t nan = di_f32_to_f16(NAN);
    assert_int_equal(nan & 0x7c00, 0x7c00);
    assert_true((nan & 0x03ff) != 0);
    assert_int_equal(di_f32_to_f16(0x1p-24f), 0x0001);
    assert_int_equal(di_f32_to_f16(0x1p-25f), 0x0000);     /* tie to even (0) */
    assert_int_equal(di_f32_to_f16(0x1.8p-24f), 0x0002);   /* 1.5 quanta, tie to even (2) */
    assert_int_equal(di_f32_to_f16(0x1.000002p-25f), 0x0001); /* just above the tie */
    assert_int_equal(di_f32_to_f16(-0.0f), 0x8000);
    assert_int_equal(di_f32_to_f16(1.0f + 0x1p-11f), 0x3c00);   /* tie, to even */
    assert_int_equal(di_f32_to_f16(1.0f + 0x3p-11f), 0x3c02);   /* tie, to even (up) */
    assert_int_equal(di_f32_to_f16(0x1p-14f - 0x1p-25f), 0x0400); /* rounds up into normals */
}

static void bf16_rounds_to_nearest_even_and_keeps_nan(void **state) {
    (void)state;
    assert_int_equal(di_f32_to_bf16(1.0f), 0x3f80);
    assert_int_equal(di_f32_to_bf16(di_f32_from_bits(0x3f808000u)), 0x3f80); /* tie, even */
    assert_int_equal(di_f32_to_bf16(di_f32_from_bits(0x3f818000u)), 0x3f82); /* tie, even (up) */
    assert_int_equal(di_f32_to_bf16(di_f32_from_bits(0x3f808001u)), 0x3f81);
    assert_int_equal(di_f32_to_bf16(INFINITY), 0x7f80);
    assert_int_equal(di_f32_to_bf16(di_f32_from_bits(0x7f7fffffu)), 0x7f80); /* FLT_MAX -> inf */
    assert_true(isnan(di_bf16_to_f32(di_f32_to_bf16(di_f32_from_bits(0x7f800001u)))));
    assert_int_equal(di_f32_to_bf16(di_f32_from_bits(0x00000001u)), 0x0000); /* subnormal */
    assert_int_equal(di_f32_to_bf16(di_f32_from_bits(0x00008000u)), 0x0000); /* tie, even */
    assert_int_equal(di_f32_to_bf16(di_f32_from_bits(0x00018000u)), 0x0002);
    assert_true(di_bf16_to_f32(0x0001) == 0x1p-133f);
    assert_int_equal(golden_bits(di_bf16_to_f32(0x8000)), 0x80000000u);
}

static void check_quant_golden_bytes(const char *name, di_dtype t) {
    golden_file g;
    golden_load(&g, name);
    const golden_array *in = golden_get(&g, "input", GOLDEN_F32);
    const golden_array *want = golden_get(&g, "expected", GOLDEN_U8);
    float *x = golden_floats(in);
    uint8_t *got = malloc(want->count);
    assert_non_null(got);
    assert_int_equal(di_dtype_row_from_float(t, x, got, (int64_t)in->count, NULL), DI_OK);
    for (uint64_t i = 0; i < want->count; i++)
        if (got[i] != want->data[i])
            fail_msg("%s: byte %llu: got 0x%02x, want 0x%02x", name, (unsigned long long)i, got[i],
                     want->data[i]);
    free(got);
    free(x);
    golden_free(&g);
}

static void golden_f16_and_bf16_from_f32(void **state) {
    (void)state;
    /* The f16 golden's NaN input: numpy keeps the payload, we quiet it;
     * both are NaN. Compare NaN-aware element by element. */
    golden_file g;
    golden_load(&g, "quant_f16");
    const golden_array *in = golden_get(&g, "input", GOLDEN_F32);
    const golden_array *want = golden_get(&g, "expected", GOLDEN_U8);
    float *x = golden_floats(in);
    for (uint64_t i = 0; i < in->count; i++) {
        uint16_t w;
        memcpy(&w, want->data + 2 * i, 2);
        uint16_t got = di_f32_to_f16(x[i]);
        if (isnan(x[i])) assert_true(isnan(di_f16_to_f32(got)) && isnan(di_f16_to_f32(w)));
        else if (got != w) fail_msg("f16 of %.9g: got 0x%04x want 0x%04x", (double)x[i], got, w);
    }
    free(x);
    golden_free(&g);
    check_quant_golden_bytes("quant_bf16", DI_DTYPE_BF16);
}

/* ---- FP8 elements ---------------------------------------------------------- */

static void golden_e4m3_from_f32(void **state) {
    (void)state;
    check_quant_golden_bytes("quant_f8_e4m3", DI_DTYPE_F8_E4M3);
}

static void e4m3_saturates_and_keeps_sign(void **state) {
    (void)state;
    assert_int_equal(di_f32_to_e4m3(448.0f), 0x7e);
    assert_int_equal(di_f32_to_e4m3(463.9f), 0x7e);
    assert_int_equal(di_f32_to_e4m3(1e9f), 0x7e);
    assert_int_equal(di_f32_to_e4m3(INFINITY), 0x7e);
    assert_int_equal(di_f32_to_e4m3(-INFINITY), 0xfe);
    assert_int_equal(di_f32_to_e4m3(NAN) & 0x7f, 0x7f);
    assert_int_equal(di_f32_to_e4m3(-0.0f), 0x80);
    assert_int_equal(di_f32_to_e4m3(0x1p-9f), 0x01);   /* smallest subnormal */
    assert_int_equal(di_f32_to_e4m3(0x1p-10f), 0x00);  /* tie, to even (0) */
    assert_int_equal(di_f32_to_e4m3(0x1.8p-9f), 0x02); /* tie, to even (2) */
    assert_int_equal(di_f32_to_e4m3(0x1.ep-7f), 0x08); /* 7.5 quanta -> 2^-6 */
    assert_true(di_e4m3_to_f32(0x7e) == DI_E4M3_MAX);
    assert_true(isnan(di_e4m3_to_f32(0x7f)));
    assert_true(isnan(di_e4m3_to_f32(0xff)));
    for (int b = 0; b < 256; b++) {
        if ((b & 0x7f) == 0x7f) continue;
        assert_int_equal(di_f32_to_e4m3(di_e4m3_to_f32((uint8_t)b)), b);
    }
}

static void e8m0_covers_its_range(void **state) {
    (void)state;
    assert_true(di_e8m0_to_f32(127) == 1.0f);
    assert_true(di_e8m0_to_f32(0) == 0x1p-127f);
    assert_true(di_e8m0_to_f32(1) == 0x1p-126f);
    assert_true(di_e8m0_to_f32(254) == 0x1p127f);
    assert_true(isnan(di_e8m0_to_f32(255)));
}

/* ---- plain integer and f64 types -------------------------------------------- */

static void integer_and_f64_rows_convert_as_numbers(void **state) {
    (void)state;
    float out[4];
    const int8_t i8[4] = {-128, -1, 0, 127};
    assert_int_equal(di_dtype_row_to_float(DI_DTYPE_I8, i8, out, 4, NULL), DI_OK);
    assert_true(out[0] == -128.0f && out[1] == -1.0f && out[3] == 127.0f);
    const int16_t i16[2] = {-32768, 1234};
    assert_int_equal(di_dtype_row_to_float(DI_DTYPE_I16, i16, out, 2, NULL), DI_OK);
    assert_true(out[0] == -32768.0f && out[1] == 1234.0f);
    const int32_t i32[2] = {INT32_MIN, 16777217};
    assert_int_equal(di_dtype_row_to_float(DI_DTYPE_I32, i32, out, 2, NULL), DI_OK);
    assert_true(out[0] == -2147483648.0f && out[1] == 16777216.0f); /* nearest f32 */
    const int64_t i64[2] = {INT64_MIN, 42};
    assert_int_equal(di_dtype_row_to_float(DI_DTYPE_I64, i64, out, 2, NULL), DI_OK);
    assert_true(out[0] == -0x1p63f && out[1] == 42.0f);
    const uint8_t u8[2] = {0, 255};
    assert_int_equal(di_dtype_row_to_float(DI_DTYPE_U8, u8, out, 2, NULL), DI_OK);
    assert_true(out[0] == 0.0f && out[1] == 255.0f);
    const uint8_t b[3] = {0, 1, 7};
    assert_int_equal(di_dtype_row_to_float(DI_DTYPE_BOOL, b, out, 3, NULL), DI_OK);
    assert_true(out[0] == 0.0f && out[1] == 1.0f && out[2] == 1.0f);
    const double f64[3] = {0.1, -1e300, 1e-50};
    assert_int_equal(di_dtype_row_to_float(DI_DTYPE_F64, f64, out, 3, NULL), DI_OK);
    assert_true(out[0] == 0.1f && out[1] == -INFINITY && out[2] == 0.0f);
    /* Unaligned rows are fine: converters load with memcpy. */
    uint8_t buf[9] = {0};
    float one = 1.0f;
    memcpy(buf + 1, &one, 4);
    assert_int_equal(di_dtype_row_to_float(DI_DTYPE_F32, buf + 1, out, 1, NULL), DI_OK);
    assert_true(out[0] == 1.0f);
}

/* ---- FP8 block-scaled layout ---------------------------------------------- */

static void check_fp8_block_golden(const char *name, di_dtype scale_dtype) {
    golden_file g;
    golden_load(&g, name);
    const golden_array *shape = golden_get(&g, "shape", GOLDEN_I64);
    int64_t dims[3];
    memcpy(dims, shape->data, sizeof dims);
    const golden_array *w = golden_get(&g, "weight", GOLDEN_U8);
    const golden_array *s = golden_get(&g, "scale", GOLDEN_U8);
    float *want = golden_floats(golden_get(&g, "expected", GOLDEN_F32));
    di_fp8_block_layout l = {dims[0], dims[1], (int32_t)dims[2], scale_dtype};
    int64_t sr, sc;
    di_error err;
    assert_int_equal(di_fp8_block_scale_shape(&l, &sr, &sc, &err), DI_OK);
    const di_dtype_traits *st = di_dtype_traits_of(scale_dtype);
    assert_int_equal((uint64_t)(sr * sc * st->block_bytes), s->count);
    float *got = malloc((size_t)(l.rows * l.cols) * sizeof(float));
    assert_non_null(got);
    assert_int_equal(di_fp8_block_dequantize_rows(&l, w->data, s->data, 0, l.rows, got, &err), DI_OK);
    golden_expect_floats(name, got, want, (uint64_t)(l.rows * l.cols));
    /* A row range that straddles a block edge gives the same rows. */
    int64_t r0 = l.block - 3, nr = 7;
    assert_int_equal(di_fp8_block_dequantize_rows(&l, w->data, s->data, r0, nr, got, &err), DI_OK);
    golden_expect_floats(name, got, want + r0 * l.cols, (uint64_t)(nr * l.cols));
    free(got);
    free(want);
    golden_free(&g);
}

static void golden_fp8_block_dequant(void **state) {
    (void)state;
    check_fp8_block_golden("fp8_block_b32_f32", DI_DTYPE_F32);
    check_fp8_block_golden("fp8_block_b32_e8m0", DI_DTYPE_F8_E8M0);
    check_fp8_block_golden("fp8_block_b128_e8m0", DI_DTYPE_F8_E8M0);
    check_fp8_block_golden("fp8_block_b128_bf16", DI_DTYPE_BF16);
}

static void fp8_block_rejects_bad_layouts_and_ranges(void **state) {
    (void)state;
    int64_t sr, sc;
    di_error err;
    di_fp8_block_layout l = {256, 300, 128, DI_DTYPE_F32};
    assert_int_equal(di_fp8_block_scale_shape(&l, &sr, &sc, &err), DI_OK);
    assert_int_equal(sr, 2);
    assert_int_equal(sc, 3);
    di_fp8_block_layout bad[] = {
        {0, 10, 32, DI_DTYPE_F32}, {10, -1, 32, DI_DTYPE_F32}, {10, 10, 0, DI_DTYPE_F32},
        {10, 10, 32, DI_DTYPE_Q4_0}, {10, 10, 32, DI_DTYPE_COUNT}, {INT64_MAX, 2, 32, DI_DTYPE_F32},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_not_equal(di_fp8_block_scale_shape(&bad[i], &sr, &sc, &err), DI_OK);
        assert_true(strlen(err.msg) > 0);
    }
    uint8_t w[4 * 4] = {0};
    float s = 1.0f, out[16];
    di_fp8_block_layout small = {4, 4, 32, DI_DTYPE_F32};
    assert_int_equal(di_fp8_block_dequantize_rows(&small, w, &s, 2, 2, out, &err), DI_OK);
    assert_int_equal(di_fp8_block_dequantize_rows(&small, w, &s, 3, 2, out, &err), DI_ERR_RANGE);
    assert_int_equal(di_fp8_block_dequantize_rows(&small, w, &s, -1, 1, out, &err), DI_ERR_RANGE);
    assert_int_equal(di_fp8_block_dequantize_rows(&small, w, &s, 1, INT64_MAX, out, &err), DI_ERR_RANGE);
}

/* ---- MXFP4: HF split layout and its relation to ggml blocks --------------- */

static void golden_mxfp4_split_dequant(void **state) {
    (void)state;
    golden_file g;
    golden_load(&g, "mxfp4_split");
    int64_t dims[2];
    memcpy(dims, golden_get(&g, "shape", GOLDEN_I64)->data, sizeof dims);
    const golden_array *blocks = golden_get(&g, "blocks", GOLDEN_U8);
    const golden_array *scales = golden_get(&g, "scales", GOLDEN_U8);
    float *want = golden_floats(golden_get(&g, "expected", GOLDEN_F32));
    int64_t rows = dims[0], cols = dims[1];
    assert_int_equal(blocks->count, (uint64_t)(rows * cols / 2));
    assert_int_equal(scales->count, (uint64_t)(rows * cols / 32));
    float *got = malloc((size_t)(rows * cols) * sizeof(float));
    assert_non_null(got);
    di_error err;
    assert_int_equal(di_mxfp4_split_dequantize_rows(rows, cols, blocks->data, scales->data, 0, rows, got, &err),
                     DI_OK);
    golden_expect_floats("mxfp4 split", got, want, (uint64_t)(rows * cols));
    assert_int_equal(di_mxfp4_split_dequantize_rows(rows, cols, blocks->data, scales->data, 3, 2, got, &err),
                     DI_OK);
    golden_expect_floats("mxfp4 split rows", got, want + 3 * cols, (uint64_t)(2 * cols));
    assert_int_equal(di_mxfp4_split_dequantize_rows(rows, cols, blocks->data, scales->data, 5, 2, got, &err),
                     DI_ERR_RANGE);
    assert_int_equal(di_mxfp4_split_dequantize_rows(rows, 48, blocks->data, scales->data, 0, 1, got, &err),
                     DI_ERR_INVALID_ARG);
    /* The golden has a NaN scale (row 2): conversion to ggml blocks refuses
     * it; rows 3.. convert and decode to the same numbers through the GGUF
     * block path. */
    int64_t groups = cols / 32;
    di_block_mxfp4 *blk = malloc((size_t)(rows * groups) * sizeof *blk);
    assert_non_null(blk);
    assert_int_equal(di_mxfp4_split_to_blocks(rows, cols, blocks->data, scales->data, blk, &err), DI_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "NaN"));
    int64_t r0 = 3, nr = rows - r0;
    assert_int_equal(di_mxfp4_split_to_blocks(nr, cols, blocks->data + r0 * cols / 2, scales->data + r0 * groups,
                                              blk, &err),
                     DI_OK);
    assert_int_equal(di_dtype_row_to_float(DI_DTYPE_MXFP4, blk, got, nr * cols, &err), DI_OK);
    /* Equal as numbers: ggml decodes code 8 (-0 in e2m1) as +0. */
    for (int64_t i = 0; i < nr * cols; i++)
        if (!(got[i] == want[r0 * cols + i]))
            fail_msg("mxfp4 split -> ggml blocks: element %lld: %g vs %g", (long long)i, (double)got[i],
                     (double)want[r0 * cols + i]);
    free(blk);
    free(got);
    free(want);
    golden_free(&g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(traits_table_is_complete_and_consistent),
        cmocka_unit_test(traits_have_ggml_ids_and_sizes),
        cmocka_unit_test(row_bytes_checks_blocks_and_overflow),
        cmocka_unit_test(row_to_float_checks_its_arguments),
        cmocka_unit_test(golden_dequant_plain_floats),
        cmocka_unit_test(golden_dequant_legacy_blocks),
        cmocka_unit_test(golden_dequant_k_quants),
        cmocka_unit_test(golden_dequant_fp8_and_mxfp4),
        cmocka_unit_test(f16_converts_special_values),
        cmocka_unit_test(bf16_rounds_to_nearest_even_and_keeps_nan),
        cmocka_unit_test(golden_f16_and_bf16_from_f32),
        cmocka_unit_test(golden_e4m3_from_f32),
        cmocka_unit_test(e4m3_saturates_and_keeps_sign),
        cmocka_unit_test(e8m0_covers_its_range),
        cmocka_unit_test(integer_and_f64_rows_convert_as_numbers),
        cmocka_unit_test(golden_fp8_block_dequant),
        cmocka_unit_test(fp8_block_rejects_bad_layouts_and_ranges),
        cmocka_unit_test(golden_mxfp4_split_dequant),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
