/* sample/rng: Philox4x32-10 known answers and the stream layout. */
#include "test_util.h"

#include "sample/rng.h"

#include <math.h>
#include <string.h>

/* Random123's kat_vectors, the three "philox4x32 10" lines
 * (columns: counter[4], key[2], expected output[4]). */
static const struct {
    uint32_t ctr[4], key[2], out[4];
} kat[] = {
    {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
    {{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
     {0xffffffffu, 0xffffffffu},
     {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
    {{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
     {0xa4093822u, 0x299f31d0u},
     {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}},
};

static void philox_matches_random123_known_answers(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof kat / sizeof kat[0]; i++) {
        uint32_t out[4];
        di_rng_philox4x32_10(kat[i].ctr, kat[i].key, out);
        for (int j = 0; j < 4; j++) assert_int_equal(out[j], kat[i].out[j]);
    }
}

static void philox_output_may_alias_counter(void **state) {
    (void)state;
    uint32_t x[4];
    memcpy(x, kat[2].ctr, sizeof x);
    di_rng_philox4x32_10(x, kat[2].key, x);
    for (int j = 0; j < 4; j++) assert_int_equal(x[j], kat[2].out[j]);
}

/* Produced by scripts/gen_rng_vectors.py, an independent Python Philox that
 * checks itself against the same Random123 vectors first. Columns: seed,
 * domain, position, draw, expected word. */
static const struct {
    uint64_t seed;
    uint32_t domain;
    uint64_t position;
    uint32_t draw, want;
} stream_vectors[] = {
    {0x0000000000000000ull, 0u, 0x0000000000000000ull, 0u, 0x6627e8d5u},
    {0x000000000000002aull, 0u, 0x0000000000000007ull, 0u, 0x5bbd83b1u},
    {0x000000000000002aull, 0u, 0x0000000000000007ull, 3u, 0x2e6b75b7u},
    {0x000000000000002aull, 0u, 0x0000000000000007ull, 5u, 0x5281c34eu},
    {0x0123456789abcdefull, 1u, 0xfedcba9876543210ull, 9u, 0xeb4b5945u},
    {0x000000000000002aull, 2u, 0x0000010000000000ull, 0u, 0x4921d980u},
};

static void stream_layout_matches_python_reference(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof stream_vectors / sizeof stream_vectors[0]; i++) {
        uint32_t got = di_rng_u32(stream_vectors[i].seed, stream_vectors[i].domain,
                                  stream_vectors[i].position, stream_vectors[i].draw);
        assert_int_equal(got, stream_vectors[i].want);
    }
}

static void unit_float_is_in_half_open_interval_with_24_bits(void **state) {
    (void)state;
    assert_true(di_rng_unit_float(0) == 0.0f);
    float top = di_rng_unit_float(0xffffffffu);
    assert_true(top < 1.0f);
    assert_true(top == 1.0f - 1.0f / 16777216.0f);
    /* The low 8 bits are dropped; bit 8 is the smallest step. */
    assert_true(di_rng_unit_float(0xffu) == 0.0f);
    assert_true(di_rng_unit_float(0x100u) == 1.0f / 16777216.0f);
}

static void uniform_mean_and_variance_are_plausible(void **state) {
    (void)state;
    const int n = 200000;
    double sum = 0, sq = 0;
    for (int i = 0; i < n; i++) {
        float u = di_rng_uniform(7, DI_RNG_DOMAIN_SAMPLE, (uint64_t)i, 0);
        assert_true(u >= 0.0f && u < 1.0f);
        sum += u;
        sq += (double)u * u;
    }
    double mean = sum / n, var = sq / n - mean * mean;
    /* Standard error of the mean is sqrt(1/12/n) ~ 6.5e-4; 5 sigma. */
    assert_true(fabs(mean - 0.5) < 3.3e-3);
    assert_true(fabs(var - 1.0 / 12.0) < 2e-3);
}

/* Streams that differ in seed, position, draw or domain must not collide:
 * count equal words between pairs of streams over many positions. For
 * independent 32-bit words a match has probability 2^-32 each. */
static void streams_differ_by_seed_position_draw_and_domain(void **state) {
    (void)state;
    int same_seed = 0, same_pos = 0, same_draw = 0, same_domain = 0;
    for (uint64_t p = 0; p < 4096; p++) {
        uint32_t a = di_rng_u32(1, 0, p, 0);
        same_seed += a == di_rng_u32(2, 0, p, 0);
        same_pos += a == di_rng_u32(1, 0, p + 1, 0);
        same_draw += a == di_rng_u32(1, 0, p, 1);
        same_domain += a == di_rng_u32(1, 1, p, 0);
    }
    assert_int_equal(same_seed, 0);
    assert_int_equal(same_pos, 0);
    assert_int_equal(same_draw, 0);
    assert_int_equal(same_domain, 0);
    /* Seeds that differ only in the high word are different keys too. */
    assert_int_not_equal(di_rng_u32(1, 0, 0, 0), di_rng_u32(1 | (1ull << 32), 0, 0, 0));
    /* Positions that differ only in the high word are different counters. */
    assert_int_not_equal(di_rng_u32(1, 0, 5, 0), di_rng_u32(1, 0, 5 | (1ull << 32), 0));
}

/* The whole point of a counter-based generator: a value depends only on
 * its address, so reading streams in any order gives the same numbers. */
static void values_do_not_depend_on_call_order(void **state) {
    (void)state;
    enum { N = 64 };
    uint32_t fwd[N], rev[N];
    for (int i = 0; i < N; i++) fwd[i] = di_rng_u32(99, 0, (uint64_t)i * 3, (uint32_t)i % 7);
    for (int i = N - 1; i >= 0; i--) {
        (void)di_rng_u32(12345, 0, (uint64_t)i, 0); /* unrelated traffic */
        rev[i] = di_rng_u32(99, 0, (uint64_t)i * 3, (uint32_t)i % 7);
    }
    assert_memory_equal(fwd, rev, sizeof fwd);
}

/* Byte-level chi-square of the low and high bytes of consecutive draws, a
 * cheap check that no lane or byte of the block is stuck or biased. */
static void bytes_pass_chi_square(void **state) {
    (void)state;
    enum { BINS = 256, N = 256 * 400 };
    for (int shift = 0; shift < 32; shift += 8) {
        int count[BINS] = {0};
        for (int i = 0; i < N; i++) {
            uint32_t w = di_rng_u32(2024, 0, (uint64_t)(i / 4), (uint32_t)(i % 4));
            count[(w >> shift) & 0xff]++;
        }
        double e = (double)N / BINS, chi2 = 0;
        for (int b = 0; b < BINS; b++) chi2 += (count[b] - e) * (count[b] - e) / e;
        /* 255 degrees of freedom: the 0.999 quantile is about 330.5. */
        assert_true(chi2 < 330.5);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(philox_matches_random123_known_answers),
        cmocka_unit_test(philox_output_may_alias_counter),
        cmocka_unit_test(stream_layout_matches_python_reference),
        cmocka_unit_test(unit_float_is_in_half_open_interval_with_24_bits),
        cmocka_unit_test(uniform_mean_and_variance_are_plausible),
        cmocka_unit_test(streams_differ_by_seed_position_draw_and_domain),
        cmocka_unit_test(values_do_not_depend_on_call_order),
        cmocka_unit_test(bytes_pass_chi_square),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
