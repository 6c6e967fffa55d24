/* kernels/cpu per-row ops and attention: half conversion against F16C,
 * RMSNorm, the two RoPE pairings (and their equivalence under the llama
 * GGUF q/k row permutation), and paged attention against a naive softmax. */
#include "test_util.h"

#include "base/threadpool.h"
#include "kernels/cpu/half.h"
#include "kernels/cpu/kernels.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static di_test_rng rng = {0x243F6A8885A308D3ull};
static uint32_t rnd(void) { return di_test_rand(&rng); }
static float rndf(void) { return (float)rnd() / 4294967296.0f * 2.0f - 1.0f; }

static void half_round_trips_and_matches_tables(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 0x10000u; h++) {
        float f = di_half_to_float((uint16_t)h);
        if (isnan(f)) continue;
        assert_int_equal(di_float_to_half(f), h);
    }
    assert_true(di_half_to_float(0x3c00) == 1.0f);
    assert_true(di_half_to_float(0x0001) == ldexpf(1.0f, -24));
    assert_int_equal(di_float_to_half(65520.0f), 0x7c00);        /* rounds to inf */
    assert_int_equal(di_float_to_half(65519.0f), 0x7bff);        /* largest finite */
    assert_int_equal(di_float_to_half(ldexpf(1.0f, -25)), 0);    /* tie to even: 0 */
    assert_int_equal(di_float_to_half(ldexpf(1.5f, -25)), 1);
    /* every table converts like the portable code (F16C rounds to nearest even) */
    enum { N = 4096 };
    float src[N], back[N];
    uint16_t a[N], b[N];
    for (int i = 0; i < N; i++) {
        uint32_t bits = rnd();
        memcpy(&src[i], &bits, 4);
        if (isnan(src[i])) src[i] = 1.0f;
        if (i % 2) src[i] = rndf() * 1000.0f; /* plenty of in-range values too */
    }
    for (int isa = 0; isa < DI_CPU_ISA_COUNT; isa++) {
        const di_cpu_kernels *k = di_cpu_kernels_get((di_cpu_isa)isa);
        if (!k) continue;
        k->f32_to_f16(src, a, N);
        for (int i = 0; i < N; i++) b[i] = di_float_to_half(src[i]);
        assert_memory_equal(a, b, sizeof a);
        k->f16_to_f32(a, back, N);
        for (int i = 0; i < N; i++) assert_true(back[i] == di_half_to_float(a[i]));
    }
}

static void rmsnorm_scales_to_unit_rms(void **state) {
    (void)state;
    float x[2 * 64], w[64], y[2 * 64];
    for (int i = 0; i < 128; i++) x[i] = rndf() * 3.0f;
    for (int i = 0; i < 64; i++) w[i] = 1.0f;
    di_rmsnorm(x, w, y, 2, 64, 1e-6f);
    for (int r = 0; r < 2; r++) {
        double ss = 0;
        for (int i = 0; i < 64; i++) ss += (double)y[r * 64 + i] * y[r * 64 + i];
        assert_true(fabs(ss / 64 - 1.0) < 1e-4);
    }
}

/* llama GGUFs permute q/k rows so that HF's rotate_half pairs (i, i+d/2)
 * become adjacent pairs (2i, 2i+1). Applying the adjacent-pair rope to the
 * permuted vector must equal permuting the halves-rope result. */
static void rope_adjacent_pairs_equal_halves_under_permutation(void **state) {
    (void)state;
    enum { HD = 64, HEADS = 3, PAIRS = HD / 2 };
    float inv_freq[PAIRS];
    for (int i = 0; i < PAIRS; i++) inv_freq[i] = (float)(1.0 / pow(100000.0, 2.0 * i / HD));
    float x[HEADS * HD], xp[HEADS * HD];
    for (int i = 0; i < HEADS * HD; i++) x[i] = rndf();
    /* permute: halves layout (i, i+32) -> adjacent (2i, 2i+1) */
    for (int h = 0; h < HEADS; h++)
        for (int i = 0; i < PAIRS; i++) {
            xp[h * HD + 2 * i] = x[h * HD + i];
            xp[h * HD + 2 * i + 1] = x[h * HD + i + PAIRS];
        }
    int32_t pos = 1234;
    di_rope(x, &pos, 1, HEADS, HD, HD, inv_freq, 1);
    di_rope(xp, &pos, 1, HEADS, HD, HD, inv_freq, 0);
    for (int h = 0; h < HEADS; h++)
        for (int i = 0; i < PAIRS; i++) {
            assert_true(xp[h * HD + 2 * i] == x[h * HD + i]);
            assert_true(xp[h * HD + 2 * i + 1] == x[h * HD + i + PAIRS]);
        }
    /* position 0 is the identity; a rotation keeps each pair's norm */
    float y[HD], y0[HD];
    for (int i = 0; i < HD; i++) y[i] = y0[i] = rndf();
    pos = 0;
    di_rope(y, &pos, 1, 1, HD, HD, inv_freq, 0);
    assert_memory_equal(y, y0, sizeof y);
    pos = 77;
    di_rope(y, &pos, 1, 1, HD, HD, inv_freq, 0);
    for (int i = 0; i < PAIRS; i++) {
        double a = (double)y[2 * i] * y[2 * i] + (double)y[2 * i + 1] * y[2 * i + 1];
        double b = (double)y0[2 * i] * y0[2 * i] + (double)y0[2 * i + 1] * y0[2 * i + 1];
        assert_true(fabs(a - b) < 1e-5);
    }
    /* partial rotary: dims past n_rot are untouched */
    for (int i = 0; i < HD; i++) y[i] = y0[i];
    di_rope(y, &pos, 1, 1, HD, 32, inv_freq, 0);
    assert_memory_equal(y + 32, y0 + 32, sizeof(float) * 32);
}

static void swiglu_and_softmax_are_exact_enough(void **state) {
    (void)state;
    float g[3] = {0.0f, 2.0f, -3.0f}, u[3] = {5.0f, 1.0f, 2.0f};
    di_swiglu(g, u, 3);
    assert_true(g[0] == 0.0f);
    assert_true(fabsf(g[1] - 2.0f / (1.0f + expf(-2.0f))) < 1e-6f);
    assert_true(fabsf(g[2] - 2.0f * (-3.0f / (1.0f + expf(3.0f)))) < 1e-6f);
    float s[4] = {1000.0f, 1000.0f, 0.0f, -INFINITY};
    di_softmax(s, 4);
    assert_true(fabsf(s[0] - 0.5f) < 1e-6f && fabsf(s[1] - 0.5f) < 1e-6f && s[3] == 0.0f);
}

/* di_swiglu on a sweep of gates over [-100, 100] (both signs, both
 * branches, past where e^-|g| underflows) and odd lengths (chunk tails):
 * within 2^-21 relative of silu(g) * u computed in double; inf and NaN
 * behave like the plain formula. */
static void swiglu_matches_double_silu_on_a_sweep(void **state) {
    (void)state;
    enum { N = 4099 };
    static float g[N], u[N], g0[N];
    for (int i = 0; i < N; i++) {
        g0[i] = g[i] = -100.0f + 200.0f * (float)i / (float)(N - 1);
        u[i] = 0.5f + (float)(i % 7);
    }
    di_swiglu(g, u, N);
    for (int i = 0; i < N; i++) {
        double x = g0[i], want = x / (1.0 + exp(-x)) * u[i];
        double tol = fabs(want) * ldexp(1.0, -21) + 1e-30;
        if (fabs((double)g[i] - want) > tol) fail_msg("swiglu(%g) = %g, want %g", x, (double)g[i], want);
    }
    float gi[3] = {INFINITY, -INFINITY, NAN}, ui[3] = {2.0f, 1.0f, 1.0f};
    di_swiglu(gi, ui, 3);
    assert_true(gi[0] == INFINITY && isnan(gi[1]) && isnan(gi[2]));
}

/* di_geglu on a sweep of gates over [-30, 30] and odd lengths: within
 * float rounding of PyTorch's tanh-approximated GELU times u, computed in
 * double (tolerance 2^-20 relative, scaled by 1 + |2z| for the rounding of
 * the tanh argument z itself, + 1e-30 where the value underflows). */
static void geglu_matches_double_gelu_tanh_on_a_sweep(void **state) {
    (void)state;
    enum { N = 4097 };
    static float g[N], u[N], g0[N];
    for (int i = 0; i < N; i++) {
        g0[i] = g[i] = -30.0f + 60.0f * (float)i / (float)(N - 1);
        u[i] = 0.25f + (float)(i % 5);
    }
    di_geglu(g, u, N);
    for (int i = 0; i < N; i++) {
        double x = g0[i], z = 0.7978845608028654 * (x + 0.044715 * x * x * x);
        double want = x / (1.0 + exp(-2.0 * z)) * u[i]; /* = x/2 (1 + tanh z), without its cancellation */
        double tol = fabs(want) * ldexp(1.0, -20) * (1.0 + fabs(2.0 * z)) + 1e-30;
        if (fabs((double)g[i] - want) > tol) fail_msg("geglu(%g) = %.9g, want %.9g", x, (double)g[i], want);
    }
    float h[3] = {0.0f, 1.0f, -1.0f}, v[3] = {1.0f, 1.0f, 1.0f};
    di_geglu(h, v, 3);
    assert_true(h[0] == 0.0f && fabsf(h[1] - 0.8411920f) < 1e-6f && fabsf(h[2] + 0.1588080f) < 1e-6f);
}

/* The attention softmax's polynomial exp: within 2^-22 relative of exp
 * (in double) on [-87, 0], exactly 1 at 0, 0 below -87 and at -inf. */
static void exp_nonpos_is_within_its_bound(void **state) {
    (void)state;
    enum { N = 1 << 16 };
    static float x[N];
    double worst = 0;
    for (int rep = 0; rep < 16; rep++) {
        for (int i = 0; i < N; i++) x[i] = -87.0f * (float)((double)(rep * N + i) / (16.0 * N));
        if (rep == 0) x[1] = -1e-30f, x[2] = -0.34657359f, x[3] = -0.34657362f, x[4] = -87.0f;
        static float y[N];
        memcpy(y, x, sizeof x);
        di_exp_nonpos(y, N);
        for (int i = 0; i < N; i++) {
            double want = exp((double)x[i]), rel = fabs((double)y[i] - want) / want;
            if (rel > worst) worst = rel;
            if (rel > 0x1p-22) fail_msg("exp(%.9g) = %.9g, want %.9g (rel %.3g)", (double)x[i], (double)y[i], want, rel);
        }
    }
    print_message("di_exp_nonpos: worst relative error %.3g (2^-23 = %.3g)\n", worst, 0x1p-23);
    float z[5] = {0.0f, -87.001f, -100.0f, -INFINITY, -1e30f};
    di_exp_nonpos(z, 5);
    assert_true(z[0] == 1.0f && z[1] == 0.0f && z[2] == 0.0f && z[3] == 0.0f && z[4] == 0.0f);
}

/* ---- attention -------------------------------------------------------- */

enum { HEADS = 6, KV_HEADS = 2, HD = 32, BS = 4, NBLK = 12, ROWS = 7 };

typedef struct attn_case {
    float q[ROWS][HEADS * HD];
    float kc[NBLK][BS][KV_HEADS * HD]; /* the f32 cache */
    float vc[NBLK][BS][KV_HEADS * HD];
    uint16_t kh[NBLK][BS][KV_HEADS * HD]; /* the same in f16 */
    uint16_t vh[NBLK][BS][KV_HEADS * HD];
    int32_t table[2][6];     /* two sequences, 6 blocks each, scattered */
    const int32_t *row_blocks[ROWS];
    int32_t pos[ROWS];
} attn_case;

/* by_seq: rows ordered by sequence (runs of 3 and 4 rows of one sequence,
 * which di_attention groups to share K/V) instead of interleaved */
static void attn_case_init(attn_case *c, int by_seq) {
    for (int r = 0; r < ROWS; r++)
        for (int i = 0; i < HEADS * HD; i++) c->q[r][i] = rndf();
    for (int b = 0; b < NBLK; b++)
        for (int t = 0; t < BS; t++)
            for (int i = 0; i < KV_HEADS * HD; i++) {
                c->kc[b][t][i] = rndf() * 2.0f;
                c->vc[b][t][i] = rndf();
                c->kh[b][t][i] = di_float_to_half(c->kc[b][t][i]);
                c->vh[b][t][i] = di_float_to_half(c->vc[b][t][i]);
            }
    for (int j = 0; j < 6; j++) {
        c->table[0][j] = 11 - 2 * j;
        c->table[1][j] = 2 * j;
    }
    /* rows: seq 0 at 0, 5, 21 (last position of its 6 blocks: 23), seq 1 at 3, 4, 12, 23 */
    static const int32_t seq[2][ROWS] = {{0, 1, 0, 1, 1, 0, 1}, {0, 0, 0, 1, 1, 1, 1}};
    static const int32_t pos[2][ROWS] = {{0, 3, 5, 4, 12, 21, 23}, {0, 5, 21, 3, 4, 12, 23}};
    for (int r = 0; r < ROWS; r++) {
        c->row_blocks[r] = c->table[seq[by_seq][r]];
        c->pos[r] = pos[by_seq][r];
    }
}

/* Softmax in double over the cache (read through the block table). */
static void naive_attention(const attn_case *c, int use_f16, int r, int h, double *out) {
    int kvh = h / (HEADS / KV_HEADS);
    double score[64], mx = -INFINITY, sum = 0;
    for (int p = 0; p <= c->pos[r]; p++) {
        int b = c->row_blocks[r][p / BS], t = p % BS;
        double s = 0;
        for (int i = 0; i < HD; i++) {
            double k = use_f16 ? di_half_to_float(c->kh[b][t][kvh * HD + i]) : c->kc[b][t][kvh * HD + i];
            s += (double)c->q[r][h * HD + i] * k;
        }
        score[p] = s / sqrt((double)HD);
        mx = fmax(mx, score[p]);
    }
    for (int i = 0; i < HD; i++) out[i] = 0;
    for (int p = 0; p <= c->pos[r]; p++) {
        int b = c->row_blocks[r][p / BS], t = p % BS;
        double e = exp(score[p] - mx);
        sum += e;
        for (int i = 0; i < HD; i++)
            out[i] += e * (use_f16 ? di_half_to_float(c->vh[b][t][kvh * HD + i]) : c->vc[b][t][kvh * HD + i]);
    }
    for (int i = 0; i < HD; i++) out[i] /= sum;
}

static void attention_matches_naive_softmax_and_is_invariant(void **state) {
    (void)state;
    static attn_case c;
    di_threadpool *pool;
    di_error err;
    assert_int_equal(di_threadpool_create(2, &pool, &err), DI_OK);
    int64_t sf = di_attention_scratch_floats(HEADS, HD, BS);
    float *scratch = malloc(sizeof(float) * 2 * (size_t)sf);
    static float out[ROWS][HEADS * HD], one[HEADS * HD];
    for (int order = 0; order < 2; order++) {
    attn_case_init(&c, order);
    for (int isa = 0; isa < DI_CPU_ISA_COUNT; isa++) {
        const di_cpu_kernels *k = di_cpu_kernels_get((di_cpu_isa)isa);
        if (!k) continue;
        for (int f16 = 0; f16 < 2; f16++) {
            di_attn_args a = {
                .q = &c.q[0][0], .n_rows = ROWS, .n_heads = HEADS, .n_kv_heads = KV_HEADS, .head_dim = HD,
                .scale = 1.0f / sqrtf((float)HD),
                .k_cache = f16 ? (const void *)c.kh : (const void *)c.kc,
                .v_cache = f16 ? (const void *)c.vh : (const void *)c.vc, .kv_f16 = f16, .block_size = BS,
                .row_blocks = c.row_blocks, .pos = c.pos, .out = &out[0][0],
            };
            di_attention(k, &a, scratch, pool);
            for (int r = 0; r < ROWS; r++) {
                for (int h = 0; h < HEADS; h++) {
                    double want[HD];
                    naive_attention(&c, f16, r, h, want);
                    for (int i = 0; i < HD; i++)
                        if (fabs(out[r][h * HD + i] - want[i]) > 1e-5)
                            fail_msg("%s f16=%d row %d head %d [%d]: %.7g vs %.7g", k->name, f16, r, h, i,
                                     (double)out[r][h * HD + i], want[i]);
                }
                /* the row alone, one thread: the same bits */
                di_attn_args a1 = a;
                a1.q = c.q[r];
                a1.n_rows = 1;
                a1.row_blocks = &c.row_blocks[r];
                a1.pos = &c.pos[r];
                a1.out = one;
                di_attention(k, &a1, scratch, NULL);
                assert_memory_equal(one, out[r], sizeof one);
            }
        }
    }
    }
    free(scratch);
    di_threadpool_free(pool);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(half_round_trips_and_matches_tables),
        cmocka_unit_test(rmsnorm_scales_to_unit_rms),
        cmocka_unit_test(rope_adjacent_pairs_equal_halves_under_permutation),
        cmocka_unit_test(swiglu_and_softmax_are_exact_enough),
        cmocka_unit_test(swiglu_matches_double_silu_on_a_sweep),
        cmocka_unit_test(geglu_matches_double_gelu_tanh_on_a_sweep),
        cmocka_unit_test(exp_nonpos_is_within_its_bound),
        cmocka_unit_test(attention_matches_naive_softmax_and_is_invariant),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
