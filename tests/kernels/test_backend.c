/* kernels/backend.h: the CPU backend's table is complete for every kernel
 * table, its stage ops give the CPU kernels' bits on any thread count, and
 * --device names parse or fail with the reason (a CUDA device on this build
 * is refused clearly, before any model file is read). */
#include "test_util.h"

#include "base/threadpool.h"
#include "kernels/backend.h"
#include "kernels/cpu/ggml_compat.h"
#include "model/model.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static di_test_rng rng = {0x13198A2E03707344ull};
static float rndf(void) { return (float)di_test_rand(&rng) / 4294967296.0f * 2.0f - 1.0f; }

static void cpu_table_has_every_op(void **state) {
    (void)state;
    const char *tables[] = {"exact", "q8", "ggml", "c", "c-q8"};
    for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++) {
        const di_cpu_kernels *k = di_cpu_kernels_by_name(tables[i]);
        assert_non_null(k);
        di_backend be;
        di_backend_cpu(k, &be);
        const char *missing = di_backend_ops_missing(be.ops);
        if (missing) fail_msg("cpu backend over %s: op '%s' is NULL", tables[i], missing);
        assert_ptr_equal(di_backend_cpu_kernels(&be), k);
        assert_string_equal(be.ops->name, "cpu");
        char desc[96];
        be.ops->describe(&be, desc, sizeof desc);
        assert_non_null(strstr(desc, k->name));
        di_error err = {0};
        assert_int_equal(be.ops->check(&be, &err), DI_OK);
        di_backend_release(&be);
    }
    di_backend be;
    di_backend_cpu(NULL, &be); /* NULL: the best exact table */
    assert_ptr_equal(di_backend_cpu_kernels(&be), di_cpu_kernels_best());
    /* a table with a hole is caught */
    di_backend_ops holed = *di_backend_cpu_ops();
    holed.moe_expert = NULL;
    assert_string_equal(di_backend_ops_missing(&holed), "moe_expert");
    holed = *di_backend_cpu_ops();
    holed.release = NULL;
    assert_string_equal(di_backend_ops_missing(&holed), "release");
    /* the buffer ops, last in the table, are covered too */
    holed = *di_backend_cpu_ops();
    holed.buf_alloc = NULL;
    assert_string_equal(di_backend_ops_missing(&holed), "buf_alloc");
    holed = *di_backend_cpu_ops();
    holed.release_weight = NULL;
    assert_string_equal(di_backend_ops_missing(&holed), "release_weight");
}

/* the CPU's buffers are aligned host memory: bytes round-trip through
 * upload/download, copy and zero work on them, and weights are used in
 * place */
static void cpu_buffers_round_trip(void **state) {
    (void)state;
    enum { N = 1000 };
    di_backend be;
    di_backend_cpu(NULL, &be);
    const di_backend_ops *op = be.ops;
    static uint8_t src[N], back[N];
    for (int i = 0; i < N; i++) src[i] = (uint8_t)di_test_rand(&rng);
    uint8_t *buf = op->buf_alloc(&be, N), *buf2 = op->buf_alloc(&be, N);
    assert_non_null(buf);
    assert_non_null(buf2);
    assert_int_equal((uintptr_t)buf % DI_BACKEND_ALIGN, 0);
    assert_int_equal((uintptr_t)buf2 % DI_BACKEND_ALIGN, 0);
    memset(back, 0xA5, N);
    op->download(&be, back, buf, N);
    for (int i = 0; i < N; i++) assert_int_equal(back[i], 0); /* zero-filled */
    op->upload(&be, buf, src, N);
    memset(back, 0xA5, N);
    op->download(&be, back, buf, N);
    assert_memory_equal(back, src, N);
    op->copy(&be, buf2, buf, N);
    op->zero(&be, buf, N / 2);
    op->download(&be, back, buf, N);
    for (int i = 0; i < N / 2; i++) assert_int_equal(back[i], 0);
    assert_memory_equal(back + N / 2, src + N / 2, N - N / 2);
    op->download(&be, back, buf2, N);
    assert_memory_equal(back, src, N);
    /* 0 bytes: a valid buffer; copies of nothing touch nothing */
    void *empty = op->buf_alloc(&be, 0);
    assert_non_null(empty);
    assert_int_equal((uintptr_t)empty % DI_BACKEND_ALIGN, 0);
    op->upload(&be, empty, NULL, 0);
    op->download(&be, NULL, empty, 0);
    op->buf_free(&be, empty);
    op->buf_free(&be, NULL);
    /* a size that cannot be rounded to the alignment: NULL, not a wrap */
    assert_null(op->buf_alloc(&be, SIZE_MAX));
    op->buf_free(&be, buf);
    op->buf_free(&be, buf2);
    di_error err = {0};
    assert_int_equal(op->check(&be, &err), DI_OK);
    /* weights stay where the loader put them */
    const di_backend_weight w = {.dtype = DI_DTYPE_Q8_0, .data = src, .row_bytes = 34, .n_in = 32, .n_out = 4};
    di_backend_weight d;
    memset(&d, 0, sizeof d);
    assert_int_equal(op->upload_weight(&be, &w, &d, &err), DI_OK);
    assert_ptr_equal(d.data, src);
    assert_int_equal(d.dtype, w.dtype);
    assert_int_equal(d.row_bytes, w.row_bytes);
    assert_int_equal(d.n_in, w.n_in);
    assert_int_equal(d.n_out, w.n_out);
    op->release_weight(&be, &d);
    assert_null(d.data);
    assert_ptr_equal(w.data, src);
    di_backend_release(&be);
}

/* add_norm and glu through the backend equal the kernels called directly,
 * on 1 and 2 threads, in both numerics */
static void stage_ops_give_the_kernels_bits(void **state) {
    (void)state;
    enum { ROWS = 13, N = 96 };
    di_threadpool *pool = NULL;
    di_error err;
    assert_int_equal(di_threadpool_create(2, &pool, &err), DI_OK);
    static float x0[ROWS * N], h0[ROWS * N], w[N], post[N], x[ROWS * N], h[ROWS * N], xr[ROWS * N], hr[ROWS * N];
    for (int i = 0; i < ROWS * N; i++) x0[i] = rndf(), h0[i] = rndf();
    for (int i = 0; i < N; i++) w[i] = 1.0f + rndf() / 4, post[i] = 1.0f + rndf() / 4;
    const char *tables[] = {"exact", "ggml"};
    for (int t = 0; t < 2; t++) {
        const di_cpu_kernels *k = di_cpu_kernels_by_name(tables[t]);
        di_backend be;
        di_backend_cpu(k, &be);
        for (int threads = 0; threads < 2; threads++) {
            di_threadpool *p = threads ? pool : NULL;
            /* x += rmsnorm(h, post); h = rmsnorm(x, w) */
            memcpy(x, x0, sizeof x);
            memcpy(h, h0, sizeof h);
            be.ops->add_norm(&be, x, h, post, w, ROWS, N, 1e-5f, p);
            memcpy(xr, x0, sizeof xr);
            memcpy(hr, h0, sizeof hr);
            for (int r = 0; r < ROWS; r++) {
                float *xx = xr + r * N, *hh = hr + r * N;
                if (k->ggml) di_ggml_rmsnorm(hh, post, hh, N, 1e-5f);
                else di_rmsnorm(hh, post, hh, 1, N, 1e-5f);
                for (int i = 0; i < N; i++) xx[i] += hh[i];
                if (k->ggml) di_ggml_rmsnorm(xx, w, hh, N, 1e-5f);
                else di_rmsnorm(xx, w, hh, 1, N, 1e-5f);
            }
            assert_memory_equal(x, xr, sizeof x);
            assert_memory_equal(h, hr, sizeof h);
            /* gate = silu(gate) * up */
            memcpy(x, x0, sizeof x);
            be.ops->glu(&be, DI_GLU_SWIGLU, x, h0, ROWS, N, p);
            memcpy(xr, x0, sizeof xr);
            for (int r = 0; r < ROWS; r++) {
                if (k->ggml) di_ggml_swiglu(xr + r * N, h0 + r * N, N);
                else di_swiglu(xr + r * N, h0 + r * N, N);
            }
            assert_memory_equal(x, xr, sizeof x);
            memcpy(x, x0, sizeof x);
            be.ops->glu(&be, DI_GLU_GEGLU, x, h0, ROWS, N, p);
            memcpy(xr, x0, sizeof xr);
            for (int r = 0; r < ROWS; r++) di_geglu(xr + r * N, h0 + r * N, N);
            assert_memory_equal(x, xr, sizeof x);
        }
    }
    di_threadpool_free(pool);
}

/* The DeepSeek stages: a row alone (no pool) gives the bits it gets in a
 * batch on 2 threads, and sparse attention is the sink softmax it says */
static void deepseek_stages_are_batch_and_thread_invariant(void **state) {
    (void)state;
    enum { ROWS = 7, H = 3, HD = 32, NK = 20, LD = 12 };
    di_threadpool *pool = NULL;
    di_error err;
    assert_int_equal(di_threadpool_create(2, &pool, &err), DI_OK);
    di_backend be;
    di_backend_cpu(NULL, &be);
    static float q[ROWS * H * HD], keys[NK * HD], sink[H], iw[ROWS * H], out[ROWS * H * HD], one[H * HD];
    static float sc[ROWS * LD], sc1[LD], scratch[2 * (LD + 64)];
    static int32_t idx[ROWS * LD], n_idx[ROWS];
    for (int i = 0; i < ROWS * H * HD; i++) q[i] = rndf();
    for (int i = 0; i < NK * HD; i++) keys[i] = rndf();
    for (int i = 0; i < H; i++) sink[i] = rndf();
    for (int i = 0; i < ROWS * H; i++) iw[i] = rndf();
    for (int r = 0; r < ROWS; r++) {
        n_idx[r] = r == 0 ? 0 : 1 + r % LD; /* row 0: only the sink, all zero out */
        for (int t = 0; t < LD; t++) idx[r * LD + t] = (int32_t)((r * 7 + t * 3) % NK);
    }
    assert_true(be.ops->sparse_attention_scratch_floats(&be, LD) <= LD + 64);
    di_sparse_attn_args a = {q, ROWS, H, HD, sink, keys, idx, LD, n_idx, out};
    be.ops->sparse_attention(&be, &a, scratch, pool);
    di_index_score_args ia = {q, iw, ROWS, H, HD, 0.25f, keys, idx, LD, n_idx, sc, LD};
    be.ops->index_scores(&be, &ia, pool);
    for (int r = 0; r < ROWS; r++) {
        di_sparse_attn_args a1 = {q + r * H * HD, 1, H, HD, sink, keys, idx + r * LD, LD, n_idx + r, one};
        be.ops->sparse_attention(&be, &a1, scratch, NULL);
        assert_memory_equal(one, out + r * H * HD, sizeof one);
        di_index_score_args i1 = {q + r * H * HD, iw + r * H, 1, H, HD, 0.25f, keys, idx + r * LD, LD, n_idx + r,
                                  sc1, LD};
        be.ops->index_scores(&be, &i1, NULL);
        assert_memory_equal(sc1, sc + r * LD, (size_t)n_idx[r] * sizeof(float));
        for (int h = 0; h < H; h++) { /* the reference in double */
            const float *qh = q + (r * H + h) * HD;
            double lg[LD], mx = sink[h], sum, o[HD] = {0};
            for (int t = 0; t < n_idx[r]; t++) {
                double d = 0;
                for (int e = 0; e < HD; e++) d += (double)qh[e] * keys[idx[r * LD + t] * HD + e];
                lg[t] = d / sqrt((double)HD);
                mx = lg[t] > mx ? lg[t] : mx;
            }
            sum = exp(sink[h] - mx);
            for (int t = 0; t < n_idx[r]; t++) sum += lg[t] = exp(lg[t] - mx);
            for (int t = 0; t < n_idx[r]; t++)
                for (int e = 0; e < HD; e++) o[e] += lg[t] / sum * keys[idx[r * LD + t] * HD + e];
            for (int e = 0; e < HD; e++) assert_true(fabs(o[e] - out[(r * H + h) * HD + e]) < 1e-5);
        }
    }
    /* rms_norm and mhc_post: rows alone = the batch on 2 threads */
    enum { N = 2, D = 64 };
    static float X[ROWS * N * D], y[ROWS * D], post[ROWS * N], comb[ROWS * N * N], Xn[ROWS * N * D], Xr[N * D];
    for (int i = 0; i < ROWS * N * D; i++) X[i] = rndf();
    for (int i = 0; i < ROWS * D; i++) y[i] = rndf();
    for (int i = 0; i < ROWS * N; i++) post[i] = rndf();
    for (int i = 0; i < ROWS * N * N; i++) comb[i] = rndf();
    for (int round = 0; round < 2; round++) {
        be.ops->mhc_post(&be, X, y, post, comb, N, D, ROWS, round, Xn, pool);
        for (int r = 0; r < ROWS; r++) {
            be.ops->mhc_post(&be, X + r * N * D, y + r * D, post + r * N, comb + r * N * N, N, D, 1, round, Xr, NULL);
            assert_memory_equal(Xr, Xn + r * N * D, sizeof Xr);
        }
        be.ops->rms_norm(&be, X, NULL, Xn, ROWS * N, D, 1e-6f, round, pool);
        for (int r = 0; r < ROWS * N; r++) {
            be.ops->rms_norm(&be, X + r * D, NULL, Xr, 1, D, 1e-6f, round, NULL);
            assert_memory_equal(Xr, Xn + r * D, D * sizeof(float));
        }
    }
    di_threadpool_free(pool);
}

static void device_names_parse_or_say_what_is_expected(void **state) {
    (void)state;
    di_device_kind kind;
    int index;
    di_error err = {0};
    const char *cpu[] = {NULL, "", "cpu"};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(di_device_parse(cpu[i], &kind, &index, &err), DI_OK);
        assert_int_equal(kind, DI_DEVICE_CPU);
        assert_int_equal(di_device_check(cpu[i], "llama", &err), DI_OK);
    }
    assert_int_equal(di_device_parse("cuda", &kind, &index, &err), DI_OK);
    assert_int_equal(kind, DI_DEVICE_CUDA);
    assert_int_equal(index, 0);
    assert_int_equal(di_device_parse("cuda:3", &kind, &index, &err), DI_OK);
    assert_int_equal(kind, DI_DEVICE_CUDA);
    assert_int_equal(index, 3);
    const char *bad[] = {"gpu", "CPU", "cuda:", "cuda:x", "cuda:1x", "cuda0", "cuda:-1", "cuda:99999", "cudax", " cpu"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (di_device_parse(bad[i], &kind, &index, &err) != DI_ERR_INVALID_ARG) fail_msg("'%s' accepted", bad[i]);
        assert_non_null(strstr(err.msg, "expected cpu, cuda or cuda:N"));
        assert_int_equal(di_device_check(bad[i], "llama", &err), DI_ERR_INVALID_ARG);
    }
    /* this library has no CUDA backend: a clear refusal, never a crash */
    assert_int_equal(di_device_check("cuda:1", "llama", &err), DI_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "CUDA backend"));
    assert_non_null(strstr(err.msg, "cuda:1"));
}

/* the model refuses the device before reading the file: the path need not exist */
static void model_open_refuses_a_device_it_cannot_run_on(void **state) {
    (void)state;
    di_model *m = (di_model *)&m;
    di_error err = {0};
    assert_int_equal(di_model_open_on("/nonexistent/model.gguf", NULL, NULL, "cuda", &m, &err), DI_ERR_UNSUPPORTED);
    assert_null(m);
    assert_non_null(strstr(err.msg, "CUDA backend"));
    assert_int_equal(di_model_open_on("/nonexistent/model.gguf", NULL, NULL, "tpu", &m, &err), DI_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "'tpu'"));
    /* cpu goes on to the file (which is missing) */
    assert_int_not_equal(di_model_open_on("/nonexistent/model.gguf", NULL, NULL, "cpu", &m, &err), DI_OK);
    assert_null(strstr(err.msg, "device"));
    char path[4096];
    di_test_path(path, sizeof path, "tests/data/seeds/gguf/tiny_llama.gguf");
    assert_int_equal(di_model_open_on(path, NULL, NULL, "cpu", &m, &err), DI_OK);
    di_model_facts f;
    di_model_get_facts(m, &f);
    assert_string_equal(f.device, "cpu");
    di_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(cpu_table_has_every_op),
        cmocka_unit_test(cpu_buffers_round_trip),
        cmocka_unit_test(stage_ops_give_the_kernels_bits),
        cmocka_unit_test(deepseek_stages_are_batch_and_thread_invariant),
        cmocka_unit_test(device_names_parse_or_say_what_is_expected),
        cmocka_unit_test(model_open_refuses_a_device_it_cannot_run_on),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
