/* format/gguf_write: a rewritten file reads back with the same metadata
 * (every kv of every type, strings and arrays included), the replaced
 * u32 key, and byte-identical tensors at the source alignment; bad tensor
 * sizes are refused without leaving a file. */
#include "test_util.h"

#include "format/gguf.h"
#include "format/gguf_write.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static di_gguf *open_path(const char *path) {
    di_gguf *g = NULL;
    di_error err = {0};
    di_status s = di_gguf_open(path, &g, &err);
    if (s) print_error("%s: %s\n", path, err.msg);
    assert_int_equal(s, DI_OK);
    return g;
}

static void assert_kv_equal(const di_gguf_kv *a, const di_gguf_kv *b) {
    assert_string_equal(a->key, b->key);
    assert_int_equal(a->type, b->type);
    if (a->type == DI_GGUF_STRING) {
        assert_true(a->str.len == b->str.len && !memcmp(a->str.ptr, b->str.ptr, (size_t)a->str.len));
    } else if (a->type == DI_GGUF_ARRAY) {
        assert_int_equal(a->arr_type, b->arr_type);
        assert_true(a->arr_len == b->arr_len);
        for (uint64_t i = 0; i < a->arr_len; i++) {
            if (a->arr_type == DI_GGUF_STRING) {
                assert_true(a->arr_str[i].len == b->arr_str[i].len &&
                            !memcmp(a->arr_str[i].ptr, b->arr_str[i].ptr, (size_t)a->arr_str[i].len));
            } else {
                double x, y;
                assert_int_equal(di_gguf_arr_get_f64(a, i, &x), DI_OK);
                assert_int_equal(di_gguf_arr_get_f64(b, i, &y), DI_OK);
                assert_memory_equal(&x, &y, sizeof x);
            }
        }
    } else {
        assert_memory_equal(&a->val, &b->val, sizeof a->val);
    }
}

/* Rewrites seed with its own tensors and general.file_type = 7. */
static void roundtrip(const char *seed) {
    char src_path[4096], rel[256], out[] = "/tmp/di_gguf_write_XXXXXX";
    snprintf(rel, sizeof rel, "tests/data/seeds/gguf/%s", seed);
    di_gguf *g = open_path(di_test_path(src_path, sizeof src_path, rel));
    int fd = mkstemp(out);
    assert_true(fd >= 0);
    close(fd);
    uint64_t n = di_gguf_tensor_count(g);
    di_gguf_wtensor *wt = calloc(n + 1, sizeof *wt);
    for (uint64_t i = 0; i < n; i++) {
        const di_gguf_tensor *t = di_gguf_tensor_at(g, i);
        wt[i] = (di_gguf_wtensor){t->name, t->n_dims, {t->ne[0], t->ne[1], t->ne[2], t->ne[3]}, t->ggml_type,
                                  t->data, t->n_bytes};
    }
    di_error err;
    assert_int_equal(di_gguf_write_file(out, g, "general.file_type", 7, wt, n, &err), DI_OK);
    di_gguf *h = open_path(out);
    assert_true(di_gguf_alignment(h) == di_gguf_alignment(g));
    uint64_t extra = di_gguf_find_kv(g, "general.file_type") ? 0 : 1;
    assert_true(di_gguf_kv_count(h) == di_gguf_kv_count(g) + extra);
    for (uint64_t i = 0; i < di_gguf_kv_count(g); i++) {
        const di_gguf_kv *a = di_gguf_kv_at(g, i), *b = di_gguf_kv_at(h, i);
        if (!strcmp(a->key, "general.file_type")) continue;
        assert_kv_equal(a, b);
    }
    uint32_t ft;
    assert_int_equal(di_gguf_get_u32(h, "general.file_type", &ft, &err), DI_OK);
    assert_int_equal(ft, 7);
    assert_true(di_gguf_tensor_count(h) == n);
    for (uint64_t i = 0; i < n; i++) {
        const di_gguf_tensor *a = di_gguf_tensor_at(g, i), *b = di_gguf_tensor_at(h, i);
        assert_string_equal(a->name, b->name);
        assert_int_equal(a->n_dims, b->n_dims);
        assert_memory_equal(a->ne, b->ne, sizeof a->ne);
        assert_int_equal(a->ggml_type, b->ggml_type);
        assert_true(a->n_bytes == b->n_bytes);
        assert_memory_equal(a->data, b->data, (size_t)a->n_bytes);
        assert_true((di_gguf_data_offset(h) + b->offset) % di_gguf_alignment(h) == 0);
    }
    di_gguf_close(h);
    /* a size that does not match the shape: refused, nothing written */
    if (n > 0) {
        wt[0].n_bytes += 1;
        assert_int_equal(remove(out), 0);
        assert_int_equal(di_gguf_write_file(out, g, NULL, 0, wt, n, &err), DI_ERR_INVALID_ARG);
        assert_true(access(out, F_OK) != 0);
    } else {
        remove(out);
    }
    free(wt);
    di_gguf_close(g);
}

static void rewritten_files_read_back_identically(void **state) {
    (void)state;
    roundtrip("tiny_llama.gguf");
    roundtrip("tiny_llama_align64.gguf");
    roundtrip("tiny_llama_v2.gguf");
    roundtrip("quant_tensor.gguf");
    roundtrip("zero_tensors_all_types.gguf");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(rewritten_files_read_back_identically),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
