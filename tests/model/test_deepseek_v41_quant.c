/* model/deepseek_v41_quant: the DeepInfer-faithful casts against scalar
 * references written from their definitions (tile-kernels torch/cast.py
 * cast with round_sf, cache_common.py's FP4 record): fp8 activations, the
 * MXFP8 / FP4 KV records and the FP4 index vectors, on random vectors that
 * span zeros, subnormal-range values, ties and the e4m3 limit; and the
 * lookup tables against the element conversions of src/tensor/fp8.c. */
#include "test_util.h"

#include "model/deepseek_v41_internal.h"
#include "model/deepseek_v41_luts.h"
#include "tensor/fp8.h"
#include "tensor/half.h"

#include <math.h>
#include <string.h>

static float fbits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint32_t ubits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float pow2_up(float v) { return fbits((ubits(v) + 0x7fffffu) & 0x7f800000u); }

/* cast(fmt e4m3, block (1, 32), round_sf=True) then cast_back, one block */
static void ref_fp8(const float *x, float *out, int n) {
    float amax = 0;
    for (int i = 0; i < n; i++) amax = fmaxf(amax, fabsf(x[i]));
    float sc = pow2_up(fmaxf(amax, 1e-4f) / 448.0f), inv = 1.0f / sc;
    for (int i = 0; i < n; i++) {
        float v = fminf(fmaxf(x[i] * inv, -448.0f), 448.0f);
        out[i] = di_e4m3_to_f32(di_f32_to_e4m3(v)) * sc;
    }
}

static int e2m1_ref(float v) { /* nearest e2m1 magnitude code, ties to even code */
    static const float mags[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
    float m = fminf(fabsf(v), 6.0f);
    int best = 0;
    for (int c = 1; c < 8; c++) {
        float d = fabsf(mags[c] - m), db = fabsf(mags[best] - m);
        if (d < db || (d == db && c % 2 == 0)) best = c;
    }
    return best | (signbit(v) ? 8 : 0);
}

static void fill(di_test_rng *r, float *x, int n, int round) {
    for (int i = 0; i < n; i++) {
        uint32_t k = di_test_rand(r);
        float mag = ldexpf(1.0f, (int)(k % 40) - 30 + round % 7);
        x[i] = ((int)(di_test_rand(r) % 2001) - 1000) / 1000.0f * mag;
        if (k % 17 == 0) x[i] = 0.0f;
        if (k % 23 == 0) x[i] = 0.75f * mag; /* ties */
    }
}

static void luts_match_the_element_conversions(void **state) {
    (void)state;
    for (int i = 0; i < 256; i++) {
        float a = E4M3_LUT[i], b = di_e4m3_to_f32((uint8_t)i);
        assert_true((isnan(a) && isnan(b)) || ubits(a) == ubits(b));
    }
    for (int i = 0; i < 16; i++) assert_int_equal(ubits(E2M1_LUT[i]), ubits(di_e2m1_to_f32((uint8_t)i)));
}

static void fp8_activation_cast_matches_reference(void **state) {
    (void)state;
    di_test_rng r = {41};
    float x[512], y[512], want[512];
    for (int round = 0; round < 200; round++) {
        fill(&r, x, 512, round);
        memcpy(y, x, sizeof x);
        dsv41_round_fp8(y, 512);
        for (int b = 0; b < 512; b += 32) ref_fp8(x + b, want + b, 32);
        for (int i = 0; i < 512; i++)
            if (ubits(y[i]) != ubits(want[i])) fail_msg("round %d [%d] %a: %a vs %a", round, i, x[i], y[i], want[i]);
        /* the MXFP8 record decodes to the same values (exact in bf16) */
        uint8_t rec[512 + 16];
        dsv41_mxfp8_encode(x, 512, rec);
        dsv41_mxfp8_decode(rec, 512, y);
        for (int i = 0; i < 512; i++) assert_int_equal(ubits(y[i]), ubits(want[i]));
    }
}

static void fp4_records_match_reference(void **state) {
    (void)state;
    di_test_rng r = {42};
    float x[512], y[512];
    for (int round = 0; round < 200; round++) {
        fill(&r, x, 512, round);
        uint8_t rec[512];
        dsv41_nvfp4_encode(x, 512, rec);
        dsv41_nvfp4_decode(rec, 512, y);
        for (int b = 0; b < 512; b += 16) { /* V41_FP4_FORMAT: e4m3 scale per 16 */
            float amax = 0;
            for (int i = 0; i < 16; i++) amax = fmaxf(amax, fabsf(x[b + i]));
            float sf = di_e4m3_to_f32(di_f32_to_e4m3(fminf(fmaxf(amax, 6.0f * 0x1p-9f) * (1.0f / 6.0f), 448.0f)));
            float inv = 1.0f / sf;
            for (int i = 0; i < 16; i++) {
                float want = di_bf16_to_f32(di_f32_to_bf16(di_e2m1_to_f32((uint8_t)e2m1_ref(x[b + i] * inv)) * sf));
                if (ubits(y[b + i]) != ubits(want)) fail_msg("nvfp4 [%d] %a: %a vs %a", b + i, x[b + i], y[b + i], want);
            }
        }
        /* FP4 index vectors: power-of-two scale per 32 */
        float z[128];
        memcpy(z, x, sizeof z);
        dsv41_round_fp4_index(z, 128);
        uint8_t irec[80];
        float zd[128];
        dsv41_fp4i_encode(x, 128, irec);
        dsv41_fp4i_decode(irec, 128, zd);
        for (int b = 0; b < 128; b += 32) {
            float amax = 0;
            for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[b + i]));
            float sc = pow2_up(fmaxf(amax, 6.0f * 0x1p-126f) / 6.0f), inv = 1.0f / sc;
            for (int i = 0; i < 32; i++) {
                float want = di_e2m1_to_f32((uint8_t)e2m1_ref(x[b + i] * inv)) * sc;
                assert_int_equal(ubits(z[b + i]), ubits(want));
                assert_int_equal(ubits(zd[b + i]), ubits(want));
            }
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(luts_match_the_element_conversions),
        cmocka_unit_test(fp8_activation_cast_matches_reference),
        cmocka_unit_test(fp4_records_match_reference),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
