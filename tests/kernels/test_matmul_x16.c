/* The x16-packed int8 gemm (pack_x16.h, gemm_q8_x16_avx512.c): against a
 * scalar C oracle of its numerics bit for bit, for every batch size, output
 * sub-range and thread count (so a row never depends on its batch), and
 * the oracle against the f32 reference within the int8 bound (so the
 * numerics and the packing are the right sums, not only self-consistent).
 * Also: the CPU backend's upload_weight packs exactly where the table has
 * the gemm, and release frees it. */
#include "test_q8_act.h"
#include "test_util.h"

#include "base/threadpool.h"
#include "kernels/backend.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/pack_x16.h"
#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/half.h"
#include "tensor/half.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static di_test_rng rng = {0x51ED270B8E4A1C3Dull};
static uint32_t rnd(void) { return di_test_rand(&rng); }
static float rndf(void) { return (float)rnd() / 4294967296.0f * 2.0f - 1.0f; }

/* Random quant bits with realistic f16 scales. */
static uint8_t *random_k_weights(di_dtype t, int64_t n_out, int64_t n_in, uint64_t *rb) {
    assert_int_equal(di_dtype_row_bytes(t, n_in, rb), DI_OK);
    size_t size = (size_t)(*rb * (uint64_t)n_out);
    uint8_t *w = malloc(size);
    assert_non_null(w);
    for (size_t i = 0; i < size; i++) w[i] = (uint8_t)rnd();
    for (int64_t b = 0; b < n_out * (n_in / 32); b++) {
        switch (t) {
        case DI_DTYPE_Q4_0: ((di_block_q4_0 *)(void *)w)[b].d = di_float_to_half(0.1f * rndf()); continue;
        case DI_DTYPE_Q5_0: ((di_block_q5_0 *)(void *)w)[b].d = di_float_to_half(0.05f * rndf()); continue;
        case DI_DTYPE_Q8_0: ((di_block_q8_0 *)(void *)w)[b].d = di_float_to_half(0.01f * rndf()); continue;
        case DI_DTYPE_Q4_1:
            ((di_block_q4_1 *)(void *)w)[b].d = di_float_to_half(0.1f * rndf());
            ((di_block_q4_1 *)(void *)w)[b].m = di_float_to_half(0.5f * rndf());
            continue;
        default: break;
        }
        if (b >= n_out * (n_in / 256)) break;
        if (t == DI_DTYPE_Q4_K) {
            ((di_block_q4_K *)(void *)w)[b].d = di_float_to_half(0.01f * rndf());
            ((di_block_q4_K *)(void *)w)[b].dmin = di_float_to_half(0.01f * rndf());
        } else {
            ((di_block_q6_K *)(void *)w)[b].d = di_float_to_half(0.001f * rndf());
        }
    }
    return w;
}

/* The 32-element kinds' numerics: the stored value u, unsigned, and the
 * block scale and offset. */
static float oracle_32(di_dtype t, const uint8_t *row, const int8_t *q, const float *dx, const float *xs, int64_t n_in) {
    float acc = 0.0f, off = 0.0f;
    for (int64_t b = 0; b < n_in / 32; b++) {
        int dot = 0;
        float dw, mw;
        for (int e = 0; e < 32; e++) {
            int u;
            if (t == DI_DTYPE_Q8_0) {
                u = ((const di_block_q8_0 *)(const void *)row)[b].qs[e] + 128;
            } else {
                const uint8_t *qs = t == DI_DTYPE_Q4_0   ? ((const di_block_q4_0 *)(const void *)row)[b].qs
                                    : t == DI_DTYPE_Q4_1 ? ((const di_block_q4_1 *)(const void *)row)[b].qs
                                                         : ((const di_block_q5_0 *)(const void *)row)[b].qs;
                u = (qs[e % 16] >> (e < 16 ? 0 : 4)) & 15;
                if (t == DI_DTYPE_Q5_0) {
                    uint32_t qh;
                    memcpy(&qh, ((const di_block_q5_0 *)(const void *)row)[b].qh, 4);
                    u |= (int)(qh >> e & 1) << 4;
                }
            }
            dot += u * q[32 * b + e];
        }
        switch (t) {
        case DI_DTYPE_Q4_0: dw = di_half_to_float(((const di_block_q4_0 *)(const void *)row)[b].d), mw = -8.0f * dw; break;
        case DI_DTYPE_Q4_1:
            dw = di_half_to_float(((const di_block_q4_1 *)(const void *)row)[b].d);
            mw = di_half_to_float(((const di_block_q4_1 *)(const void *)row)[b].m);
            break;
        case DI_DTYPE_Q5_0: dw = di_half_to_float(((const di_block_q5_0 *)(const void *)row)[b].d), mw = -16.0f * dw; break;
        default: dw = di_half_to_float(((const di_block_q8_0 *)(const void *)row)[b].d), mw = -128.0f * dw; break;
        }
        acc = fmaf((float)dot, dw * dx[b], acc);
        off = fmaf(mw, xs[b], off);
    }
    return acc + off;
}

/* The packed gemm's numerics (gemm_q8_x16_avx512.c's header), one pair. */
static float oracle(di_dtype t, const uint8_t *row, const int8_t *q, const float *dx, const float *xs, int64_t n_in) {
    if (t != DI_DTYPE_Q4_K && t != DI_DTYPE_Q6_K) return oracle_32(t, row, q, dx, xs, n_in);
    float y = 0.0f;
    for (int64_t s = 0; s < n_in / 256; s++) {
        const int8_t *qs = q + 256 * s;
        float acc = 0.0f;
        if (t == DI_DTYPE_Q4_K) {
            const di_block_q4_K *b = (const di_block_q4_K *)(const void *)row + s;
            const float dmin = di_half_to_float(b->dmin);
            for (int j = 0; j < 8; j++) {
                int sc, mn, dot = 0;
                di_q4_K_scale_min(b->scales, j, &sc, &mn);
                for (int e = 0; e < 32; e++) dot += ((b->qs[32 * (j / 2) + e] >> (4 * (j & 1))) & 15) * qs[32 * j + e];
                acc = fmaf((float)(sc * dot), dx[8 * s + j], acc);
                y = fmaf(-(dmin * (float)mn), xs[8 * s + j], y);
            }
            y = fmaf(di_half_to_float(b->d), acc, y);
        } else {
            const di_block_q6_K *b = (const di_block_q6_K *)(const void *)row + s;
            for (int h = 0; h < 2; h++)
                for (int qi = 0; qi < 2; qi++)
                    for (int k = 0; k < 4; k++) {
                        const int j = 8 * h + 2 * k + qi;
                        int dot = 0, sum = 0;
                        for (int l = 16 * qi; l < 16 * qi + 16; l++) {
                            int lo = b->ql[64 * h + 32 * (k & 1) + l], hi = b->qh[32 * h + l];
                            int u = ((k < 2 ? lo : lo >> 4) & 15) | ((hi >> (2 * k)) & 3) << 4;
                            int v = qs[128 * h + 32 * k + l];
                            dot += u * v;
                            sum += v;
                        }
                        acc = fmaf((float)(b->scales[j] * (dot - 32 * sum)), dx[8 * s + j / 2], acc);
                    }
            y = fmaf(di_half_to_float(b->d), acc, y);
        }
    }
    return y;
}

/* The int8 bound of kernels.h: half a step per activation times |w|, plus
 * float rounding. */
static double q8_bound(const float *w, const float *x, int64_t n) {
    double s = 1e-6;
    for (int64_t b = 0; b < n / 32; b++) {
        double amax = 0, sw = 0;
        for (int i = 0; i < 32; i++) {
            amax = fmax(amax, fabs((double)x[b * 32 + i]));
            sw += fabs((double)w[b * 32 + i]);
            s += fabs((double)w[b * 32 + i] * x[b * 32 + i]) * 4e-6;
        }
        s += amax / 127.0 / 2.0 * sw * (1 + 1e-6);
    }
    return s;
}

static const di_cpu_kernels *x16_table(void) {
    const di_cpu_kernels *k = di_cpu_kernels_by_name("avx512-q8");
    return k && k->gemm_q8_x16[DI_DTYPE_Q4_K] ? k : NULL;
}

static void packed_gemm_matches_oracle_bitwise(void **state) {
    (void)state;
    const di_cpu_kernels *k = x16_table();
    if (!k) {
        printf("kernels: no AVX-512 VNNI on this CPU, x16 gemm test skipped\n");
        return;
    }
    const di_dtype types[] = {DI_DTYPE_Q4_K, DI_DTYPE_Q6_K, DI_DTYPE_Q4_0, DI_DTYPE_Q4_1, DI_DTYPE_Q5_0, DI_DTYPE_Q8_0};
    const int64_t sizes[] = {96, 256, 768}; /* 3 blocks of 32 (the 32-element kinds only), 1 and 3 super-blocks */
    const int64_t n_out = 53, max_rows = 70; /* a short last group; rows past the Q6_K row chunk of 64 */
    di_threadpool *pool;
    di_error err;
    assert_int_equal(di_threadpool_create(2, &pool, &err), DI_OK);
    for (size_t d = 0; d < sizeof types / sizeof types[0]; d++) {
        const di_dtype t = types[d];
        for (int si = 0; si < 3; si++) {
            const int64_t n_in = sizes[si];
            if (!di_x16_packable(t, n_in)) continue;
            const int64_t nb = n_in / 32;
            uint64_t rb;
            uint8_t *w = random_k_weights(t, n_out, n_in, &rb);
            uint8_t *pk = malloc(di_x16_packed_bytes(t, n_out, n_in));
            di_x16_pack(t, w, rb, n_out, n_in, pk);
            float *x = malloc(sizeof(float) * (size_t)(max_rows * n_in));
            for (int64_t i = 0; i < max_rows * n_in; i++) x[i] = rndf() * (i % 97 == 0 ? 20.0f : 1.0f);
            test_q8_act act = test_q8_act_make(k, x, max_rows, n_in);
            const int8_t *q = act.q;
            const float *xd = act.d, *xs = act.s;
            float *want = malloc(sizeof(float) * (size_t)(max_rows * n_out)), *deq = malloc(sizeof(float) * (size_t)n_in);
            for (int64_t o = 0; o < n_out; o++) {
                di_dtype_traits_of(t)->to_float(w + o * rb, deq, n_in);
                for (int64_t r = 0; r < max_rows; r++) {
                    float v = oracle(t, w + o * rb, q + r * n_in, xd + r * nb, xs + r * nb, n_in);
                    want[r * n_out + o] = v;
                    double ref = 0;
                    for (int64_t i = 0; i < n_in; i++) ref += (double)deq[i] * x[r * n_in + i];
                    if (fabs(v - ref) > q8_bound(deq, x + r * n_in, n_in))
                        fail_msg("%s n_in %lld [%lld,%lld]: oracle %.9g vs f32 %.9g", di_dtype_traits_of(t)->name,
                                 (long long)n_in, (long long)r, (long long)o, (double)v, ref);
                }
            }
            float *y = malloc(sizeof(float) * (size_t)(max_rows * n_out));
            float *scratch = malloc(sizeof(float) * (size_t)di_matmul_scratch_floats(max_rows, n_in, 2));
            for (int64_t rows = 1; rows <= max_rows; rows++) {
                /* a task's share: groups 1 and 2 of 4 (the last one short) */
                memset(y, 0xff, sizeof(float) * (size_t)(max_rows * n_out));
                k->gemm_q8_x16[t](w, rb, pk, 16, 48, &act.rows, rows, n_in, y, n_out, scratch);
                for (int64_t r = 0; r < rows; r++)
                    for (int64_t o = 0; o < n_out; o++) {
                        float got = y[r * n_out + o], exp = want[r * n_out + o];
                        if (o >= 16 && o < 48 ? memcmp(&got, &exp, sizeof got) != 0 : !isnan(got))
                            fail_msg("%s n_in %lld rows %lld [%lld,%lld]: %.9g vs oracle %.9g",
                                     di_dtype_traits_of(t)->name, (long long)n_in, (long long)rows, (long long)r,
                                     (long long)o, (double)got, (double)exp);
                    }
                if (rows != 1 && rows != 5 && rows != max_rows) continue;
                /* the whole matmul, through every table whose entry is this
                 * gemm (the AMX table's Q6_K, where the CPU has AMX) */
                const di_cpu_kernels *tabs[2] = {k, di_cpu_kernels_by_name("avx512-amx-q8")};
                for (int ti = 0; ti < 2; ti++) {
                    if (!tabs[ti] || tabs[ti]->gemm_q8_x16[t] != k->gemm_q8_x16[t]) continue;
                    for (int threads = 1; threads <= 2; threads++) {
                        memset(y, 0xff, sizeof(float) * (size_t)(max_rows * n_out));
                        di_matmul_args a = {t, w, rb, x, n_in, y, n_out, rows, n_in, n_out, pk};
                        di_matmul(tabs[ti], &a, scratch, threads == 2 ? pool : NULL);
                        if (memcmp(y, want, sizeof(float) * (size_t)(rows * n_out)) != 0)
                            fail_msg("%s %s n_in %lld: %lld rows on %d threads differ from the oracle", tabs[ti]->name,
                                     di_dtype_traits_of(t)->name, (long long)n_in, (long long)rows, threads);
                    }
                }
            }
            free(w);
            free(pk);
            free(x);
            test_q8_act_free(&act);
            free(want);
            free(deq);
            free(y);
            free(scratch);
        }
    }
    di_threadpool_free(pool);
}

/* upload_weight packs for the table with the gemm, and only for packable
 * shapes; the rows are left as they were. */
static void upload_weight_packs_where_the_table_can(void **state) {
    (void)state;
    uint64_t rb;
    uint8_t *w = random_k_weights(DI_DTYPE_Q4_K, 20, 512, &rb);
    const char *names[] = {"exact", "q8", "c-q8"};
    for (int i = 0; i < 3; i++) {
        const di_cpu_kernels *k = di_cpu_kernels_by_name(names[i]);
        if (!k) continue;
        di_backend be;
        di_backend_cpu(k, &be);
        di_backend_weight in = {.dtype = DI_DTYPE_Q4_K, .data = w, .row_bytes = rb, .n_in = 512, .n_out = 20}, up;
        di_error err;
        assert_int_equal(be.ops->upload_weight(&be, &in, &up, &err), DI_OK);
        assert_ptr_equal(up.data, w);
        const int want = k->quantize_q8 && k->gemm_q8_x16[DI_DTYPE_Q4_K];
        assert_int_equal(up.packed != NULL, want);
        if (want) { /* the same bytes as di_x16_pack makes */
            uint64_t bytes = di_x16_packed_bytes(DI_DTYPE_Q4_K, 20, 512);
            assert_int_equal(bytes, 2 * 2 * sizeof(di_block_q4_K_x16));
            uint8_t *pk = malloc(bytes);
            di_x16_pack(DI_DTYPE_Q4_K, w, rb, 20, 512, pk);
            assert_memory_equal(pk, up.packed, bytes);
            free(pk);
        }
        be.ops->release_weight(&be, &up);
        assert_null(up.packed);
        di_backend_weight odd = in; /* f16 rows: no x16 layout */
        odd.dtype = DI_DTYPE_F16;
        odd.row_bytes = 1024;
        assert_int_equal(be.ops->upload_weight(&be, &odd, &up, &err), DI_OK);
        assert_null(up.packed);
        be.ops->release_weight(&be, &up);
        di_backend_release(&be);
    }
    assert_int_equal(di_x16_packed_bytes(DI_DTYPE_Q4_K, 20, 300), 0);
    assert_int_equal(di_x16_packed_bytes(DI_DTYPE_Q4_0, 20, 300), 0);
    assert_int_equal(di_x16_packed_bytes(DI_DTYPE_F32, 20, 512), 0);
    assert_int_equal(di_x16_packed_bytes(DI_DTYPE_Q8_0, 17, 64), 2 * 2 * sizeof(di_block_q8_0_x16));
    free(w);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(packed_gemm_matches_oracle_bitwise),
        cmocka_unit_test(upload_weight_packs_where_the_table_can),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
