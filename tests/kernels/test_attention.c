/* kernels/cpu/attention_avx512.c against attention.c's portable reference
 * (the "c" table) on random shapes: head dims, GQA groups, block sizes
 * (below, at and above the 64-key step; 1; odd), f16 and f32 caches, rows
 * of several sequences with odd lengths. Then batch invariance, bit for bit:
 * a row gets the same output alone (a decode step) as with any 1..8
 * neighbours of its prefill chunk, on 1 or 2 threads. Shapes the AVX-512
 * path does not take (head_dim not a multiple of 16, blocks over 256 keys)
 * must give the reference's bits. Skipped on CPUs without AVX-512. */
#include "test_util.h"

#include "base/threadpool.h"
#include "kernels/cpu/half.h"
#include "kernels/cpu/kernels.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static di_test_rng rng = {0x9E3779B97F4A7C15ull};
static uint32_t rnd(void) { return di_test_rand(&rng); }
static float rndf(void) { return (float)rnd() / 4294967296.0f * 2.0f - 1.0f; }
static int32_t rndi(int32_t n) { return (int32_t)(rnd() % (uint32_t)n); }

enum { MAX_SEQS = 3 };

/* A random paged cache and a batch of rows over it. */
typedef struct attn_setup {
    int32_t n_heads, n_kv_heads, hd, bs, n_rows, n_blocks, kv_f16;
    float *q, *kc, *vc;     /* q (n_rows, n_heads*hd); f32 caches (n_blocks, bs, n_kv*hd) */
    uint16_t *kh, *vh;      /* the f16 caches */
    int32_t *table[MAX_SEQS]; /* per sequence: its blocks, shuffled over the cache */
    const int32_t **row_blocks;
    int32_t *pos;
} attn_setup;

/* seq_len[s] tokens in sequence s; rows: every sequence's last n_tail[s]
 * positions (a prefill chunk; 1 = a decode step), sequence by sequence. */
static void setup_init(attn_setup *s, int32_t n_heads, int32_t n_kv_heads, int32_t hd, int32_t bs, int kv_f16,
                       int n_seqs, const int32_t *seq_len, const int32_t *n_tail) {
    memset(s, 0, sizeof *s);
    s->n_heads = n_heads, s->n_kv_heads = n_kv_heads, s->hd = hd, s->bs = bs, s->kv_f16 = kv_f16;
    int32_t nb[MAX_SEQS];
    for (int i = 0; i < n_seqs; i++) {
        nb[i] = (seq_len[i] + bs - 1) / bs;
        s->n_blocks += nb[i];
        s->n_rows += n_tail[i];
    }
    int64_t row = (int64_t)n_kv_heads * hd, elems = (int64_t)s->n_blocks * bs * row;
    s->q = malloc(sizeof(float) * (size_t)s->n_rows * (size_t)(n_heads * hd));
    s->kc = malloc(sizeof(float) * (size_t)elems), s->vc = malloc(sizeof(float) * (size_t)elems);
    s->kh = malloc(sizeof(uint16_t) * (size_t)elems), s->vh = malloc(sizeof(uint16_t) * (size_t)elems);
    for (int64_t i = 0; i < (int64_t)s->n_rows * n_heads * hd; i++) s->q[i] = rndf() * 1.5f;
    for (int64_t i = 0; i < elems; i++) {
        s->kc[i] = rndf() * 2.0f, s->vc[i] = rndf();
        s->kh[i] = di_float_to_half(s->kc[i]), s->vh[i] = di_float_to_half(s->vc[i]);
    }
    /* a random permutation of the blocks, dealt to the sequences */
    int32_t *perm = malloc(sizeof(int32_t) * (size_t)s->n_blocks);
    for (int32_t i = 0; i < s->n_blocks; i++) perm[i] = i;
    for (int32_t i = s->n_blocks - 1; i > 0; i--) {
        int32_t j = rndi(i + 1), t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    s->row_blocks = malloc(sizeof(*s->row_blocks) * (size_t)s->n_rows);
    s->pos = malloc(sizeof(int32_t) * (size_t)s->n_rows);
    for (int i = 0, b0 = 0, r = 0; i < n_seqs; i++) {
        s->table[i] = malloc(sizeof(int32_t) * (size_t)nb[i]);
        for (int32_t b = 0; b < nb[i]; b++) s->table[i][b] = perm[b0 + b];
        b0 += nb[i];
        for (int32_t t = 0; t < n_tail[i]; t++, r++) {
            s->row_blocks[r] = s->table[i];
            s->pos[r] = seq_len[i] - n_tail[i] + t;
        }
    }
    free(perm);
}

static void setup_free(attn_setup *s) {
    free(s->q), free(s->kc), free(s->vc), free(s->kh), free(s->vh);
    for (int i = 0; i < MAX_SEQS; i++) free(s->table[i]);
    free(s->row_blocks), free(s->pos);
}

/* Rows [r0, r0 + n) of the setup through table k into out (n, n_heads*hd). */
static int32_t g_window; /* di_attn_args.window of run_rows (0 = none) */

static void run_rows(const attn_setup *s, const di_cpu_kernels *k, int32_t r0, int32_t n, float *out,
                     di_threadpool *pool) {
    int64_t qd = (int64_t)s->n_heads * s->hd;
    int n_threads = pool ? di_threadpool_n_threads(pool) : 1;
    float *scratch = malloc(sizeof(float) * (size_t)n_threads *
                            (size_t)di_attention_scratch_floats(s->n_heads, s->hd, s->bs));
    di_attn_args a = {
        .q = s->q + r0 * qd, .n_rows = n, .n_heads = s->n_heads, .n_kv_heads = s->n_kv_heads, .head_dim = s->hd,
        .scale = 1.0f / sqrtf((float)s->hd),
        .k_cache = s->kv_f16 ? (const void *)s->kh : (const void *)s->kc,
        .v_cache = s->kv_f16 ? (const void *)s->vh : (const void *)s->vc, .kv_f16 = s->kv_f16,
        .block_size = s->bs, .row_blocks = s->row_blocks + r0, .pos = s->pos + r0, .out = out,
        .window = g_window,
    };
    di_attention(k, &a, scratch, pool);
    free(scratch);
}

static const di_cpu_kernels *avx512_or_skip(void) {
    const di_cpu_kernels *k = di_cpu_kernels_get(DI_CPU_ISA_AVX512_VNNI);
    if (!k) {
        print_message("no AVX-512 on this CPU: skipped\n");
        skip();
    }
    assert_non_null(k->attn_run);
    return k;
}

/* Max |avx512 - c| over random shapes stays within float rounding of the
 * softmax average (outputs are averages of values in [-1, 1]). */
static void avx512_matches_reference_on_random_shapes(void **state) {
    (void)state;
    const di_cpu_kernels *k = avx512_or_skip(), *ref = di_cpu_kernels_get(DI_CPU_ISA_C);
    static const int32_t heads[][2] = {{9, 3}, {4, 4}, {8, 1}, {6, 2}};
    static const int32_t hds[] = {16, 32, 64, 128};
    static const int32_t bss[] = {1, 3, 4, 16, 20, 64, 100, 256};
    di_threadpool *pool;
    di_error err;
    assert_int_equal(di_threadpool_create(2, &pool, &err), DI_OK);
    double worst = 0;
    for (int c = 0; c < 48; c++) {
        int32_t nh = heads[c % 4][0], nkv = heads[c % 4][1], hd = hds[(c / 4) % 4], bs = bss[c % 8];
        int kv_f16 = (c / 2) % 2, n_seqs = 1 + rndi(MAX_SEQS);
        int32_t len[MAX_SEQS], tail[MAX_SEQS];
        for (int i = 0; i < n_seqs; i++) {
            len[i] = (1 + rndi(300)) | 1; /* odd lengths */
            tail[i] = rndi(3) == 0 ? 1 : 1 + rndi(len[i] < 40 ? len[i] : 40);
        }
        attn_setup s;
        setup_init(&s, nh, nkv, hd, bs, kv_f16, n_seqs, len, tail);
        size_t n_out = (size_t)s.n_rows * (size_t)(nh * hd);
        float *got = malloc(sizeof(float) * n_out), *want = malloc(sizeof(float) * n_out);
        run_rows(&s, k, 0, s.n_rows, got, pool);
        run_rows(&s, ref, 0, s.n_rows, want, NULL);
        for (size_t i = 0; i < n_out; i++) {
            double d = fabs((double)got[i] - (double)want[i]);
            if (d > worst) worst = d;
            if (!(d <= 2e-6))
                fail_msg("case %d (heads %d/%d hd %d bs %d f16 %d) [%zu]: %.9g vs %.9g", c, nh, nkv, hd, bs, kv_f16,
                         i, (double)got[i], (double)want[i]);
        }
        free(got), free(want);
        setup_free(&s);
    }
    print_message("avx512 vs c attention: worst |diff| %.3g\n", worst);
    di_threadpool_free(pool);
}

/* A prefill chunk of 37 rows (positions 203..239) and a decode row of a
 * second sequence: every row's output computed in windows of 1..9 rows
 * (the row and up to 8 neighbours, the window sliding so the row lands at
 * every place in it), on 1 and 2 threads, equals the whole batch's bits. */
static void avx512_row_is_bitwise_invariant(void **state) {
    (void)state;
    const di_cpu_kernels *k = avx512_or_skip();
    di_threadpool *pool;
    di_error err;
    assert_int_equal(di_threadpool_create(2, &pool, &err), DI_OK);
    static const int32_t bss[] = {16, 5, 64};
    for (int f16 = 0; f16 < 2; f16++)
        for (int b = 0; b < 3; b++) {
            attn_setup s;
            const int32_t len[2] = {240, 131}, tail[2] = {37, 1};
            setup_init(&s, 9, 3, 64, bss[b], f16, 2, len, tail);
            int64_t qd = (int64_t)s.n_heads * s.hd;
            float *all = malloc(sizeof(float) * (size_t)(s.n_rows * qd)), *win = malloc(sizeof(float) * 9 * (size_t)qd);
            run_rows(&s, k, 0, s.n_rows, all, pool);
            for (int32_t r = 0; r < s.n_rows; r++) {
                run_rows(&s, k, r, 1, win, NULL); /* alone: the decode step */
                assert_memory_equal(win, all + r * qd, sizeof(float) * (size_t)qd);
                for (int32_t w = 2; w <= 9; w++)
                    for (int32_t off = 0; off < w; off++) {
                        int32_t r0 = r - off;
                        if (r0 < 0 || r0 + w > s.n_rows) continue;
                        run_rows(&s, k, r0, w, win, (w + off) % 2 ? pool : NULL);
                        if (memcmp(win + off * qd, all + r * qd, sizeof(float) * (size_t)qd))
                            fail_msg("bs %d f16 %d: row %d differs in a window of %d at %d", bss[b], f16, r, w, off);
                    }
            }
            free(all), free(win);
            setup_free(&s);
        }
    di_threadpool_free(pool);
}

/* head_dim 24 (not a multiple of 16) and blocks of 300 keys fall back to
 * the reference: the avx512 table then gives the c table's bits when both
 * use the same dot (the avx2 entries are the avx512 table's: compare with
 * the avx2 table). */
static void avx512_falls_back_on_shapes_it_does_not_take(void **state) {
    (void)state;
    const di_cpu_kernels *k = avx512_or_skip(), *ref = di_cpu_kernels_get(DI_CPU_ISA_AVX2);
    assert_non_null(ref);
    static const int32_t shapes[][2] = {{24, 16}, {64, 300}};
    for (int i = 0; i < 2; i++) {
        attn_setup s;
        const int32_t len[1] = {401}, tail[1] = {9};
        setup_init(&s, 4, 2, shapes[i][0], shapes[i][1], 1, 1, len, tail);
        size_t n_out = (size_t)s.n_rows * (size_t)(s.n_heads * s.hd);
        float *got = malloc(sizeof(float) * n_out), *want = malloc(sizeof(float) * n_out);
        run_rows(&s, k, 0, s.n_rows, got, NULL);
        run_rows(&s, ref, 0, s.n_rows, want, NULL);
        assert_memory_equal(got, want, sizeof(float) * n_out);
        free(got), free(want);
        setup_free(&s);
    }
}

/* Softmax over keys first..pos of row r, head h, in double from the f32
 * cache: the definition of a sliding window (Gemma 3 local layers). */
static void naive_window_row(const attn_setup *s, int32_t r, int32_t h, int32_t window, double *out) {
    const int32_t hd = s->hd, kvh = h / (s->n_heads / s->n_kv_heads), pos = s->pos[r];
    const int32_t first = window > 0 && pos >= window ? pos - window + 1 : 0;
    const float *q = s->q + ((int64_t)r * s->n_heads + h) * hd;
    double mx = -INFINITY, sum = 0, w[1024];
    for (int32_t t = first; t <= pos; t++) {
        int64_t off = (((int64_t)s->row_blocks[r][t / s->bs] * s->bs + t % s->bs) * s->n_kv_heads + kvh) * hd;
        double d = 0;
        for (int32_t i = 0; i < hd; i++) d += (double)q[i] * s->kc[off + i];
        w[t - first] = d / sqrt((double)hd);
        mx = w[t - first] > mx ? w[t - first] : mx;
    }
    for (int32_t i = 0; i < hd; i++) out[i] = 0;
    for (int32_t t = first; t <= pos; t++) {
        int64_t off = (((int64_t)s->row_blocks[r][t / s->bs] * s->bs + t % s->bs) * s->n_kv_heads + kvh) * hd;
        double p = exp(w[t - first] - mx);
        sum += p;
        for (int32_t i = 0; i < hd; i++) out[i] += p * s->vc[off + i];
    }
    for (int32_t i = 0; i < hd; i++) out[i] /= sum;
}

/* A window that cuts keys off (rows past it, rows before it, a window
 * edge inside a block and on a block boundary) on every table: each
 * within float rounding of the naive softmax over the window (the AVX-512
 * table hands runs whose window binds to the portable loop, and keeps the
 * others). */
static void sliding_window_matches_naive(void **state) {
    (void)state;
    static const int32_t windows[] = {5, 16, 17, 40};
    for (size_t wi = 0; wi < sizeof windows / sizeof windows[0]; wi++) {
        attn_setup s;
        const int32_t len[2] = {70, 23}, tail[2] = {30, 23};
        setup_init(&s, 4, 2, 32, 16, 0, 2, len, tail);
        size_t n_out = (size_t)s.n_rows * (size_t)(s.n_heads * s.hd);
        float *got = malloc(sizeof(float) * n_out);
        g_window = windows[wi];
        for (int isa = DI_CPU_ISA_C; isa < DI_CPU_ISA_COUNT; isa++) {
            const di_cpu_kernels *k = di_cpu_kernels_get((di_cpu_isa)isa);
            if (!k) continue;
            run_rows(&s, k, 0, s.n_rows, got, NULL);
            double max_err = 0, want[64];
            for (int32_t r = 0; r < s.n_rows; r++)
                for (int32_t h = 0; h < s.n_heads; h++) {
                    naive_window_row(&s, r, h, g_window, want);
                    for (int32_t i = 0; i < s.hd; i++) {
                        double e = fabs(got[((size_t)r * s.n_heads + h) * s.hd + i] - want[i]);
                        max_err = e > max_err ? e : max_err;
                    }
                }
            assert_true(max_err < 1e-5);
        }
        g_window = 0;
        free(got);
        setup_free(&s);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(avx512_matches_reference_on_random_shapes),
        cmocka_unit_test(avx512_row_is_bitwise_invariant),
        cmocka_unit_test(avx512_falls_back_on_shapes_it_does_not_take),
        cmocka_unit_test(sliding_window_matches_naive),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
