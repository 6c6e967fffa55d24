/* format/gguf: valid seeds parse with the right values; every malformed file
 * is rejected with a message; real files (default model, shared vocab-only
 * files) load; fuzz regressions are handled without a crash.
 * Corpus: scripts/gen_malformed_gguf.py. */
#include "test_util.h"

#include "format/gguf.h"
#include "model/llama_hparams.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PATH_MAX_LEN 4096

static di_gguf *open_seed(const char *name) {
    char path[PATH_MAX_LEN], rel[256];
    snprintf(rel, sizeof rel, "tests/data/seeds/gguf/%s", name);
    di_gguf *g = NULL;
    di_error err = {0};
    di_status s = di_gguf_open(di_test_path(path, sizeof path, rel), &g, &err);
    if (s) print_error("%s: %s\n", name, err.msg);
    assert_int_equal(s, DI_OK);
    return g;
}

static bool has_suffix(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && strcmp(s + n - m, suf) == 0;
}

/* Calls fn(path, name) for each regular *.gguf (or any file when all) in dir,
 * sorted; returns the count. Missing dir -> 0. */
typedef void (*file_fn)(const char *path, const char *name);
static int for_each_file(const char *dir, bool all, file_fn fn) {
    struct dirent **list = NULL;
    int n = scandir(dir, &list, NULL, alphasort);
    if (n < 0) return 0;
    int count = 0;
    for (int i = 0; i < n; i++) {
        const char *name = list[i]->d_name;
        if (name[0] != '.' && (all || has_suffix(name, ".gguf"))) {
            char path[PATH_MAX_LEN];
            snprintf(path, sizeof path, "%s/%s", dir, name);
            fn(path, name);
            count++;
        }
        free(list[i]);
    }
    free(list);
    return count;
}

/* ---- valid files ---------------------------------------------------------- */

static void check_tiny_llama(di_gguf *g, uint32_t version, uint64_t alignment) {
    assert_int_equal(di_gguf_version(g), version);
    assert_int_equal(di_gguf_alignment(g), alignment);
    assert_int_equal(di_gguf_data_offset(g) % alignment, 0);
    assert_int_equal(di_gguf_tensor_count(g), 2 + 2 * 9);
    di_gguf_str arch;
    di_error err = {0};
    assert_int_equal(di_gguf_get_str(g, "general.architecture", &arch, &err), DI_OK);
    assert_int_equal(arch.len, 5);
    assert_memory_equal(arch.ptr, "llama", 5);
    uint32_t layers = 0;
    assert_int_equal(di_gguf_get_u32(g, "llama.block_count", &layers, &err), DI_OK);
    assert_int_equal(layers, 2);
    float eps = 0;
    assert_int_equal(di_gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &eps, &err), DI_OK);
    assert_float_equal(eps, 1e-5f, 1e-12f);

    const di_gguf_kv *tok = di_gguf_find_kv(g, "tokenizer.ggml.tokens");
    assert_non_null(tok);
    assert_int_equal(tok->type, DI_GGUF_ARRAY);
    assert_int_equal(tok->arr_type, DI_GGUF_STRING);
    assert_int_equal(tok->arr_len, 8);
    di_gguf_str t1;
    assert_int_equal(di_gguf_arr_get_str(tok, 1, &t1), DI_OK);
    assert_int_equal(t1.len, 3);
    assert_memory_equal(t1.ptr, "<s>", 3);
    assert_int_equal(di_gguf_arr_get_str(tok, 8, &t1), DI_ERR_RANGE);

    /* token_embd is tensor #0: values 1 + i/1024 (see the generator). */
    const di_gguf_tensor *e = di_gguf_find_tensor(g, "token_embd.weight");
    assert_non_null(e);
    assert_int_equal(e->n_dims, 2);
    assert_int_equal(e->ne[0], 4);
    assert_int_equal(e->ne[1], 8);
    assert_int_equal(e->ne[2], 1);
    assert_int_equal(e->dtype, DI_DTYPE_F32);
    assert_int_equal(e->n_elems, 32);
    assert_int_equal(e->n_bytes, 128);
    float v[32];
    memcpy(v, e->data, sizeof v);
    for (int i = 0; i < 32; i++) assert_float_equal(v[i], 1.0f + (float)i / 1024.0f, 0.0f);
    /* blk.1.ffn_down is tensor #19 in generator order: seed 20. */
    const di_gguf_tensor *d = di_gguf_find_tensor(g, "blk.1.ffn_down.weight");
    assert_non_null(d);
    memcpy(v, d->data, sizeof(float));
    assert_float_equal(v[0], 20.0f, 0.0f);
    assert_null(di_gguf_find_tensor(g, "output.weight"));
    assert_null(di_gguf_find_kv(g, "no.such.key"));
}

static void tiny_llama_v3_parses_with_right_values(void **state) {
    (void)state;
    di_gguf *g = open_seed("tiny_llama.gguf");
    check_tiny_llama(g, 3, 32);
    di_gguf_close(g);
}

static void tiny_llama_v2_parses(void **state) {
    (void)state;
    di_gguf *g = open_seed("tiny_llama_v2.gguf");
    check_tiny_llama(g, 2, 32);
    di_gguf_close(g);
}

static void custom_alignment_is_honoured(void **state) {
    (void)state;
    di_gguf *g = open_seed("tiny_llama_align64.gguf");
    check_tiny_llama(g, 3, 64);
    for (uint64_t i = 0; i < di_gguf_tensor_count(g); i++)
        assert_int_equal(di_gguf_tensor_at(g, i)->offset % 64, 0);
    di_gguf_close(g);
}

static void every_kv_type_reads_back(void **state) {
    (void)state;
    di_gguf *g = open_seed("zero_tensors_all_types.gguf");
    di_error err = {0};
    assert_int_equal(di_gguf_tensor_count(g), 0);
    uint32_t u32;
    uint64_t u64;
    int64_t i64;
    float f;
    bool b;
    di_gguf_str str;
    assert_int_equal(di_gguf_get_u32(g, "t.u8", &u32, &err), DI_OK);
    assert_int_equal(u32, 200);
    assert_int_equal(di_gguf_get_i64(g, "t.i8", &i64, &err), DI_OK);
    assert_int_equal(i64, -100);
    assert_int_equal(di_gguf_get_u32(g, "t.u16", &u32, &err), DI_OK);
    assert_int_equal(u32, 60000);
    assert_int_equal(di_gguf_get_i64(g, "t.i16", &i64, &err), DI_OK);
    assert_int_equal(i64, -30000);
    assert_int_equal(di_gguf_get_u32(g, "t.u32", &u32, &err), DI_OK);
    assert_int_equal(u32, 4000000000u);
    assert_int_equal(di_gguf_get_i64(g, "t.i32", &i64, &err), DI_OK);
    assert_int_equal(i64, -2000000000);
    assert_int_equal(di_gguf_get_f32(g, "t.f32", &f, &err), DI_OK);
    assert_float_equal(f, 0.5f, 0.0f);
    assert_int_equal(di_gguf_get_bool(g, "t.bool", &b, &err), DI_OK);
    assert_true(b);
    assert_int_equal(di_gguf_get_str(g, "t.str", &str, &err), DI_OK);
    assert_int_equal(str.len, 6);
    assert_memory_equal(str.ptr, "h\xc3\xa9llo", 6);
    assert_int_equal(di_gguf_get_u64(g, "t.u64", &u64, &err), DI_OK);
    assert_true(u64 == (1ull << 63) + 5);
    assert_int_equal(di_gguf_get_i64(g, "t.i64", &i64, &err), DI_OK);
    assert_true(i64 == -(1ll << 62));
    assert_int_equal(di_gguf_get_f32(g, "t.f64", &f, &err), DI_OK);
    assert_float_equal(f, -2.25f, 0.0f);
    assert_int_equal(di_gguf_get_str(g, "t.empty_str", &str, &err), DI_OK);
    assert_int_equal(str.len, 0);

    /* Conversions that do not fit are errors naming the key. */
    assert_int_equal(di_gguf_get_u32(g, "t.i8", &u32, &err), DI_ERR_RANGE);
    assert_non_null(strstr(err.msg, "t.i8"));
    assert_int_equal(di_gguf_get_u32(g, "t.u64", &u32, &err), DI_ERR_RANGE);
    assert_int_equal(di_gguf_get_i64(g, "t.u64", &i64, &err), DI_ERR_RANGE);
    assert_int_equal(di_gguf_get_u32(g, "t.str", &u32, &err), DI_ERR_FORMAT);
    assert_int_equal(di_gguf_get_str(g, "t.u8", &str, &err), DI_ERR_FORMAT);
    assert_int_equal(di_gguf_get_bool(g, "t.u8", &b, &err), DI_ERR_FORMAT);
    assert_int_equal(di_gguf_get_f32(g, "t.u8", &f, &err), DI_ERR_FORMAT);
    assert_int_equal(di_gguf_get_u32(g, "missing", &u32, &err), DI_ERR_NOT_FOUND);
    assert_non_null(strstr(err.msg, "missing"));

    const di_gguf_kv *a = di_gguf_find_kv(g, "t.arr_i16");
    assert_non_null(a);
    assert_int_equal(a->arr_type, DI_GGUF_INT16);
    assert_int_equal(a->arr_len, 3);
    assert_int_equal(di_gguf_arr_get_i64(a, 2, &i64), DI_OK);
    assert_int_equal(i64, -3);
    assert_int_equal(di_gguf_arr_get_i64(a, 3, &i64), DI_ERR_RANGE);
    double d;
    assert_int_equal(di_gguf_arr_get_f64(a, 1, &d), DI_OK);
    assert_float_equal(d, 2.0, 0.0);
    a = di_gguf_find_kv(g, "t.arr_f64");
    assert_int_equal(di_gguf_arr_get_f64(a, 1, &d), DI_OK);
    assert_float_equal(d, -0.25, 0.0);
    assert_int_equal(di_gguf_arr_get_i64(a, 0, &i64), DI_ERR_FORMAT);
    a = di_gguf_find_kv(g, "t.arr_str");
    assert_int_equal(a->arr_len, 3);
    assert_int_equal(di_gguf_arr_get_str(a, 1, &str), DI_OK);
    assert_int_equal(str.len, 0);
    assert_int_equal(di_gguf_arr_get_str(a, 2, &str), DI_OK);
    assert_memory_equal(str.ptr, "yz", 2);
    assert_int_equal(di_gguf_arr_get_i64(a, 0, &i64), DI_ERR_FORMAT);
    a = di_gguf_find_kv(g, "t.arr_bool");
    assert_int_equal(di_gguf_arr_get_i64(a, 1, &i64), DI_OK);
    assert_int_equal(i64, 1);
    a = di_gguf_find_kv(g, "t.arr_empty");
    assert_int_equal(a->arr_len, 0);
    assert_int_equal(di_gguf_arr_get_i64(a, 0, &i64), DI_ERR_RANGE);
    di_gguf_close(g);
}

static void quantized_tensor_size_follows_block_layout(void **state) {
    (void)state;
    di_gguf *g = open_seed("quant_tensor.gguf");
    const di_gguf_tensor *q = di_gguf_find_tensor(g, "q");
    assert_non_null(q);
    assert_int_equal(q->dtype, DI_DTYPE_Q8_0);
    assert_int_equal(q->n_elems, 64 * 3);
    assert_int_equal(q->n_bytes, 34 * 2 * 3);
    assert_int_equal(((const uint8_t *)q->data)[5], 5);
    const di_gguf_tensor *f = di_gguf_find_tensor(g, "f");
    assert_int_equal(f->offset % 32, 0);
    assert_true(f->offset >= q->n_bytes);
    di_gguf_close(g);
}

static void memory_image_parses_like_file(void **state) {
    (void)state;
    char path[PATH_MAX_LEN];
    size_t size = 0;
    char *buf = di_test_read_file(di_test_path(path, sizeof path, "tests/data/seeds/gguf/tiny_llama.gguf"), &size);
    assert_non_null(buf);
    di_gguf *g = NULL;
    di_error err = {0};
    assert_int_equal(di_gguf_open_memory(buf, size, "mem.gguf", &g, &err), DI_OK);
    assert_string_equal(di_gguf_name(g), "mem.gguf");
    check_tiny_llama(g, 3, 32);
    di_gguf_close(g);
    /* Every proper prefix of a file with tensors is rejected: truncation is
     * caught wherever it happens. */
    for (size_t n = 0; n < size; n++) {
        assert_int_not_equal(di_gguf_open_memory(buf, n, "prefix.gguf", &g, &err), DI_OK);
        assert_null(g);
        assert_true(err.msg[0] != '\0');
    }
    free(buf);
}

/* ---- malformed corpus ------------------------------------------------------ */

static int n_reader_rejects, n_llama_rejects;

static void check_malformed(const char *path, const char *name) {
    di_gguf *g = NULL;
    di_error err = {0};
    di_status s = di_gguf_open(path, &g, &err);
    bool llama_level = strncmp(name, "llama_", 6) == 0;
    if (!llama_level) {
        if (s == DI_OK) {
            print_error("%s: accepted by the reader\n", name);
            di_gguf_close(g);
            fail();
        }
        if (s != DI_ERR_FORMAT && s != DI_ERR_UNSUPPORTED && s != DI_ERR_RANGE)
            print_error("%s: status %d: %s\n", name, s, err.msg);
        assert_true(s == DI_ERR_FORMAT || s == DI_ERR_UNSUPPORTED || s == DI_ERR_RANGE);
        assert_null(g);
        n_reader_rejects++;
    } else {
        if (s != DI_OK) print_error("%s: reader rejected: %s\n", name, err.msg);
        assert_int_equal(s, DI_OK);
        di_llama_hparams hp;
        di_llama_tensors lt;
        s = di_llama_hparams_from_gguf(g, &hp, &err);
        if (s == DI_OK) {
            s = di_llama_validate_tensors(g, &hp, &lt, &err);
            di_llama_tensors_free(&lt);
        }
        di_gguf_close(g);
        if (s == DI_OK) print_error("%s: passed llama validation\n", name);
        assert_true(s == DI_ERR_FORMAT || s == DI_ERR_UNSUPPORTED || s == DI_ERR_RANGE);
        n_llama_rejects++;
    }
    /* The message names the file and says something after it. */
    assert_non_null(strstr(err.msg, name));
    assert_true(strlen(err.msg) > strlen(path) + 4);
}

static void every_malformed_file_is_rejected_with_a_message(void **state) {
    (void)state;
    char dir[PATH_MAX_LEN];
    n_reader_rejects = n_llama_rejects = 0;
    int n = for_each_file(di_test_path(dir, sizeof dir, "tests/data/malformed/gguf"), false,
                          check_malformed);
    print_message("malformed: %d files (%d reader-level, %d llama-level)\n", n, n_reader_rejects,
                  n_llama_rejects);
    assert_true(n_reader_rejects >= 45);
    assert_true(n_llama_rejects >= 20);
}

/* ---- real files ------------------------------------------------------------ */

static void default_model_loads_and_validates(void **state) {
    (void)state;
    const char *path = di_test_default_model();
    if (!path) skip();
    di_gguf *g = NULL;
    di_error err = {0};
    assert_int_equal(di_gguf_open(path, &g, &err), DI_OK);
    assert_int_equal(di_gguf_version(g), 3);
    assert_int_equal(di_gguf_tensor_count(g), 272);
    di_llama_hparams hp;
    assert_int_equal(di_llama_hparams_from_gguf(g, &hp, &err), DI_OK);
    assert_int_equal(hp.n_layers, 30);
    assert_int_equal(hp.n_embd, 576);
    assert_int_equal(hp.n_heads, 9);
    assert_int_equal(hp.n_heads_kv, 3);
    assert_int_equal(hp.head_dim, 64);
    assert_int_equal(hp.n_ff, 1536);
    assert_int_equal(hp.n_vocab, 49152);
    assert_int_equal(hp.tok.bos, 1);
    assert_int_equal(hp.tok.eos, 2);
    di_llama_tensors lt;
    di_status s = di_llama_validate_tensors(g, &hp, &lt, &err);
    if (s) print_error("%s\n", err.msg);
    assert_int_equal(s, DI_OK);
    assert_true(lt.tied_output);
    assert_ptr_equal(lt.output, lt.token_embd);
    assert_int_equal(lt.token_embd->dtype, DI_DTYPE_Q8_0);
    assert_int_equal(lt.layers[29].ffn_down->dtype, DI_DTYPE_Q4_1);
    di_llama_tensors_free(&lt);
    di_gguf_close(g);
}

static int n_vocab_files;

static void check_vocab_file(const char *path, const char *name) {
    di_gguf *g = NULL;
    di_error err = {0};
    di_status s = di_gguf_open(path, &g, &err);
    if (s) print_error("%s: %s\n", name, err.msg);
    assert_int_equal(s, DI_OK);
    const di_gguf_kv *tok = di_gguf_find_kv(g, "tokenizer.ggml.tokens");
    assert_non_null(tok);
    assert_true(tok->arr_len > 1000);
    /* Vocab-only llama files carry full hyper-parameters: those must pass. */
    di_gguf_str arch;
    if (di_gguf_get_str(g, "general.architecture", &arch, &err) == DI_OK && arch.len == 5 &&
        memcmp(arch.ptr, "llama", 5) == 0) {
        di_llama_hparams hp;
        s = di_llama_hparams_from_gguf(g, &hp, &err);
        if (s) print_error("%s: %s\n", name, err.msg);
        assert_int_equal(s, DI_OK);
        assert_int_equal(hp.n_tokens, tok->arr_len);
    }
    di_gguf_close(g);
    n_vocab_files++;
}

static void shared_vocab_files_parse(void **state) {
    (void)state;
    char dir[PATH_MAX_LEN];
    n_vocab_files = 0;
    for_each_file(di_test_data(dir, sizeof dir, "tokenizer"), false, check_vocab_file);
    assert_true(n_vocab_files >= 6); /* scripts/fetch-testdata.sh fetches them */
    print_message("vocab files: %d\n", n_vocab_files);
}

/* ---- fuzz regressions --------------------------------------------------- */

static void replay_regression(const char *path, const char *name) {
    size_t size = 0;
    char *buf = di_test_read_file(path, &size);
    assert_non_null(buf);
    di_gguf *g = NULL;
    di_error err = {0};
    if (di_gguf_open_memory(buf, size, name, &g, &err) == DI_OK) {
        di_llama_hparams hp;
        di_llama_tensors lt;
        if (di_llama_hparams_from_gguf(g, &hp, &err) == DI_OK) {
            di_llama_validate_tensors(g, &hp, &lt, &err);
            di_llama_tensors_free(&lt);
        }
        di_gguf_close(g);
    } else {
        assert_true(err.msg[0] != '\0');
    }
    free(buf);
}

static void fuzz_regressions_do_not_crash(void **state) {
    (void)state;
    char dir[PATH_MAX_LEN];
    int n = for_each_file(di_test_path(dir, sizeof dir, "tests/data/fuzz-regress/gguf"), true,
                          replay_regression);
    print_message("fuzz regressions: %d\n", n);
}

static void open_reports_missing_file_as_io(void **state) {
    (void)state;
    di_gguf *g = (di_gguf *)1;
    di_error err = {0};
    assert_int_equal(di_gguf_open("/nonexistent/x.gguf", &g, &err), DI_ERR_IO);
    assert_null(g);
    assert_non_null(strstr(err.msg, "x.gguf"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(tiny_llama_v3_parses_with_right_values),
        cmocka_unit_test(tiny_llama_v2_parses),
        cmocka_unit_test(custom_alignment_is_honoured),
        cmocka_unit_test(every_kv_type_reads_back),
        cmocka_unit_test(quantized_tensor_size_follows_block_layout),
        cmocka_unit_test(memory_image_parses_like_file),
        cmocka_unit_test(every_malformed_file_is_rejected_with_a_message),
        cmocka_unit_test(default_model_loads_and_validates),
        cmocka_unit_test(shared_vocab_files_parse),
        cmocka_unit_test(fuzz_regressions_do_not_crash),
        cmocka_unit_test(open_reports_missing_file_as_io),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
