/* format/safetensors: valid seeds written by the PyPI safetensors package
 * read back byte for byte; every malformed case rejected with a message;
 * fuzz regressions replayed. Data: scripts/gen_malformed_safetensors.py. */
#include "test_util.h"

#include "format/safetensors.h"

#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The issue asks for at least 20 malformed safetensors cases. */
enum { MIN_MALFORMED_CASES = 20 };

static json_t *load_json(const char *rel) {
    char path[1024];
    di_test_path(path, sizeof path, rel);
    json_error_t jerr;
    json_t *j = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (!j) fail_msg("%s: %s", path, jerr.text);
    return j;
}

static bool is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sorted entries of a folder (no dot files); *n set. NULL when absent. */
static char **list_dir(const char *path, size_t *n) {
    *n = 0;
    DIR *d = opendir(path);
    if (!d) return NULL;
    size_t cap = 16;
    char **names = malloc(cap * sizeof *names);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        if (*n == cap) names = realloc(names, (cap *= 2) * sizeof *names);
        names[(*n)++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, *n, sizeof *names, cmp_str);
    return names;
}

static void free_list(char **names, size_t n) {
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
}

static void hex_to_bytes(const char *hex, uint8_t *out, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        sscanf(hex + 2 * i, "%2x", &v);
        out[i] = (uint8_t)v;
    }
}

/* One tensor against the generator's record of what it wrote. */
static void check_tensor(const di_safetensors_tensor *t, const char *name, const json_t *want) {
    assert_non_null(t);
    assert_string_equal(t->name, name);
    di_dtype dt;
    assert_int_equal(di_dtype_from_safetensors(json_string_value(json_object_get(want, "dtype")),
                                               &dt), DI_OK);
    assert_int_equal(t->dtype, dt);
    const json_t *shape = json_object_get(want, "shape");
    assert_int_equal(t->n_dims, (int32_t)json_array_size(shape));
    uint64_t elems = 1;
    for (size_t d = 0; d < json_array_size(shape); d++) {
        assert_int_equal(t->shape[d], json_integer_value(json_array_get(shape, d)));
        elems *= (uint64_t)t->shape[d];
    }
    assert_int_equal(t->n_elems, elems);
    const char *hex = json_string_value(json_object_get(want, "hex"));
    size_t nb = strlen(hex) / 2;
    assert_int_equal(t->n_bytes, nb);
    uint8_t *bytes = malloc(nb ? nb : 1);
    hex_to_bytes(hex, bytes, nb);
    if (nb) assert_memory_equal(t->data, bytes, nb);
    free(bytes);
    assert_int_equal(t->shard, json_integer_value(json_object_get(want, "shard")));
}

static void check_metadata(const di_safetensors *st, const json_t *meta) {
    assert_int_equal(di_safetensors_metadata_count(st), json_object_size(meta));
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)meta, k, v) {
        const char *got = di_safetensors_metadata_get(st, k);
        assert_non_null(got);
        assert_string_equal(got, json_string_value(v));
    }
    const char *prev = "";
    for (uint64_t i = 0; i < di_safetensors_metadata_count(st); i++) {
        const char *key, *value;
        assert_int_equal(di_safetensors_metadata_at(st, i, &key, &value), DI_OK);
        assert_true(strcmp(prev, key) < 0);
        prev = key;
    }
}

static void seeds_read_back_with_the_bytes_the_reference_writer_wrote(void **state) {
    (void)state;
    json_t *exp = load_json("tests/data/expected/safetensors_seeds.json");
    const json_t *seeds = json_object_get(exp, "seeds");
    assert_true(json_object_size(seeds) >= 4);
    const char *seed;
    const json_t *rec;
    json_object_foreach((json_t *)seeds, seed, rec) {
        char rel[512], path[1024];
        snprintf(rel, sizeof rel, "tests/data/seeds/safetensors/%s", seed);
        di_test_path(path, sizeof path, rel);
        const json_t *tensors = json_object_get(rec, "tensors");
        di_error err = {0};
        if (strcmp(json_string_value(json_object_get(rec, "kind")), "file") == 0) {
            di_safetensors *st = NULL;
            if (di_safetensors_open(path, &st, &err) != DI_OK) fail_msg("%s", err.msg);
            assert_int_equal(di_safetensors_tensor_count(st), json_object_size(tensors));
            const char *name;
            const json_t *want;
            json_object_foreach((json_t *)tensors, name, want)
                check_tensor(di_safetensors_find(st, name), name, want);
            check_metadata(st, json_object_get(rec, "metadata"));
            /* Tensors come back in data order. */
            for (uint64_t i = 1; i < di_safetensors_tensor_count(st); i++)
                assert_true(di_safetensors_tensor_at(st, i - 1)->offset <=
                            di_safetensors_tensor_at(st, i)->offset);
            assert_null(di_safetensors_tensor_at(st, di_safetensors_tensor_count(st)));
            assert_null(di_safetensors_find(st, "no.such.tensor"));
            di_safetensors_close(st);
        }
        /* Every seed, file or folder, also opens as a checkpoint. */
        di_safetensors_checkpoint *ck = NULL;
        if (di_safetensors_checkpoint_open(path, &ck, &err) != DI_OK) fail_msg("%s", err.msg);
        assert_int_equal(di_safetensors_checkpoint_tensor_count(ck), json_object_size(tensors));
        const json_t *shards = json_object_get(rec, "shards");
        assert_int_equal(di_safetensors_checkpoint_shard_count(ck),
                         shards ? json_integer_value(shards) : 1);
        const char *name;
        const json_t *want;
        json_object_foreach((json_t *)tensors, name, want)
            check_tensor(di_safetensors_checkpoint_find(ck, name), name, want);
        for (uint64_t i = 0; i < di_safetensors_checkpoint_tensor_count(ck); i++) {
            const di_safetensors_tensor *t = di_safetensors_checkpoint_tensor_at(ck, i);
            assert_ptr_equal(di_safetensors_checkpoint_find(ck, t->name), t);
        }
        if (json_object_get(rec, "metadata") && !shards)
            check_metadata(di_safetensors_checkpoint_shard(ck, 0), json_object_get(rec, "metadata"));
        assert_null(di_safetensors_checkpoint_find(ck, "no.such.tensor"));
        di_safetensors_checkpoint_close(ck);
    }
    json_decref(exp);
}

static void sharded_index_parses_to_sorted_shards_and_entries(void **state) {
    (void)state;
    char path[1024];
    di_test_path(path, sizeof path, "tests/data/seeds/safetensors/sharded/model.safetensors.index.json");
    size_t size;
    char *data = di_test_read_file(path, &size);
    assert_non_null(data);
    di_safetensors_index *idx = NULL;
    di_error err = {0};
    if (di_safetensors_index_parse(data, size, path, &idx, &err) != DI_OK) fail_msg("%s", err.msg);
    assert_int_equal(di_safetensors_index_shard_count(idx), 3);
    assert_string_equal(di_safetensors_index_shard_name(idx, 0), "model-00001-of-00003.safetensors");
    assert_string_equal(di_safetensors_index_shard_name(idx, 2), "model-00003-of-00003.safetensors");
    assert_null(di_safetensors_index_shard_name(idx, 3));
    const char *prev = "";
    for (uint64_t i = 0; i < di_safetensors_index_entry_count(idx); i++) {
        const char *t;
        uint32_t s;
        assert_int_equal(di_safetensors_index_entry_at(idx, i, &t, &s), DI_OK);
        assert_true(strcmp(prev, t) < 0);
        assert_true(s < 3);
        prev = t;
    }
    const char *t;
    uint32_t s;
    assert_int_equal(di_safetensors_index_entry_at(idx, di_safetensors_index_entry_count(idx), &t, &s),
                     DI_ERR_RANGE);
    di_safetensors_index_free(idx);
    free(data);
}

static void memory_image_matches_file_and_every_truncation_is_rejected(void **state) {
    (void)state;
    char path[1024];
    di_test_path(path, sizeof path, "tests/data/seeds/safetensors/all_dtypes.safetensors");
    size_t size;
    uint8_t *data = (uint8_t *)di_test_read_file(path, &size);
    assert_non_null(data);
    di_safetensors *st = NULL;
    di_error err = {0};
    assert_int_equal(di_safetensors_open_memory(data, size, "mem", &st, &err), DI_OK);
    assert_string_equal(di_safetensors_name(st), "mem");
    const di_safetensors_tensor *t = di_safetensors_find(st, "model.layers.0.attn.wq_a.weight");
    assert_non_null(t);
    assert_int_equal(t->dtype, DI_DTYPE_F8_E4M3);
    assert_true((const uint8_t *)t->data >= data && (const uint8_t *)t->data + t->n_bytes <= data + size);
    di_safetensors_close(st);
    /* Cutting the file anywhere (length field, header, data) must fail:
     * the tensors tile the data section, so no prefix is itself valid. */
    for (size_t n = 0; n < size; n++) {
        uint8_t *copy = malloc(n ? n : 1); /* exact size, so ASan sees overreads */
        memcpy(copy, data, n);
        err.msg[0] = '\0';
        di_status s = di_safetensors_open_memory(copy, n, "cut", &st, &err);
        if (s == DI_OK) fail_msg("prefix of %zu bytes accepted", n);
        assert_null(st);
        assert_true(strlen(err.msg) > 0);
        free(copy);
    }
    free(data);
}

/* case -> substring, from the generator's manifest. */
typedef struct expect_row { char *name, *substr; bool seen; } expect_row;

static expect_row *load_tsv(const char *rel, size_t *n) {
    char path[1024];
    di_test_path(path, sizeof path, rel);
    size_t size;
    char *text = di_test_read_file(path, &size);
    assert_non_null(text);
    expect_row *rows = calloc(size + 1, sizeof *rows);
    *n = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] == '#') continue;
        char *tab = strchr(line, '\t');
        assert_non_null(tab);
        *tab = '\0';
        rows[*n].name = strdup(line);
        rows[*n].substr = strdup(tab + 1);
        (*n)++;
    }
    free(text);
    return rows;
}

static void free_tsv(expect_row *rows, size_t n) {
    for (size_t i = 0; i < n; i++) free(rows[i].name), free(rows[i].substr);
    free(rows);
}

static void expect_message(const char *what, const di_error *err, expect_row *rows, size_t n_rows,
                           const char *name) {
    if (strlen(err->msg) == 0) fail_msg("%s: rejected without a message", what);
    for (size_t i = 0; i < n_rows; i++) {
        if (strcmp(rows[i].name, name) != 0) continue;
        rows[i].seen = true;
        if (!strstr(err->msg, rows[i].substr))
            fail_msg("%s: message \"%s\" lacks \"%s\"", what, err->msg, rows[i].substr);
    }
}

static void every_malformed_case_is_rejected_with_a_clear_message(void **state) {
    (void)state;
    size_t n_rows;
    expect_row *rows = load_tsv("tests/data/expected/malformed_safetensors.tsv", &n_rows);
    char dir[1024];
    di_test_path(dir, sizeof dir, "tests/data/malformed/safetensors");
    size_t n;
    char **names = list_dir(dir, &n);
    assert_non_null(names);
    for (size_t i = 0; i < n; i++) {
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        di_error err = {0};
        if (!is_dir(path)) {
            di_safetensors *st = NULL;
            if (di_safetensors_open(path, &st, &err) == DI_OK) fail_msg("%s: accepted", path);
            assert_null(st);
            assert_non_null(strstr(err.msg, names[i])); /* names the file */
            expect_message(path, &err, rows, n_rows, names[i]);
            /* Same verdict from memory, in a buffer of the exact size. */
            size_t size;
            char *data = di_test_read_file(path, &size);
            assert_non_null(data);
            void *exact = malloc(size ? size : 1);
            memcpy(exact, data, size);
            err.msg[0] = '\0';
            assert_int_not_equal(di_safetensors_open_memory(exact, size, names[i], &st, &err), DI_OK);
            expect_message(path, &err, rows, n_rows, names[i]);
            free(exact);
            free(data);
        }
        di_safetensors_checkpoint *ck = NULL;
        err.msg[0] = '\0';
        if (di_safetensors_checkpoint_open(path, &ck, &err) == DI_OK)
            fail_msg("%s: accepted as a checkpoint", path);
        assert_null(ck);
        expect_message(path, &err, rows, n_rows, names[i]);
    }
    for (size_t i = 0; i < n_rows; i++)
        if (!rows[i].seen) fail_msg("manifest case %s has no file", rows[i].name);
    print_message("%zu malformed safetensors cases rejected\n", n);
    assert_true(n >= MIN_MALFORMED_CASES);
    free_list(names, n);
    free_tsv(rows, n_rows);
}

static void fuzz_regressions_do_not_crash(void **state) {
    (void)state;
    char dir[1024];
    di_test_path(dir, sizeof dir, "tests/data/fuzz-regress/safetensors");
    size_t n;
    char **names = list_dir(dir, &n);
    for (size_t i = 0; i < n; i++) {
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        size_t size;
        char *data = di_test_read_file(path, &size);
        if (!data) continue;
        void *exact = malloc(size ? size : 1);
        memcpy(exact, data, size);
        di_error err = {0};
        di_safetensors *st = NULL;
        if (di_safetensors_open_memory(exact, size, names[i], &st, &err) == DI_OK)
            di_safetensors_close(st);
        else
            assert_true(strlen(err.msg) > 0);
        di_safetensors_index *idx = NULL;
        if (di_safetensors_index_parse(exact, size, names[i], &idx, &err) == DI_OK)
            di_safetensors_index_free(idx);
        free(exact);
        free(data);
    }
    print_message("%zu safetensors fuzz regressions replayed\n", n);
    free_list(names, n);
}

static void missing_paths_are_reported(void **state) {
    (void)state;
    di_error err = {0};
    di_safetensors *st = NULL;
    assert_int_equal(di_safetensors_open("/nonexistent/m.safetensors", &st, &err), DI_ERR_IO);
    assert_non_null(strstr(err.msg, "/nonexistent/m.safetensors"));
    di_safetensors_checkpoint *ck = NULL;
    assert_int_not_equal(di_safetensors_checkpoint_open("/nonexistent/dir", &ck, &err), DI_OK);
    assert_int_equal(di_safetensors_open_memory(NULL, 4, "x", &st, &err), DI_ERR_INVALID_ARG);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(seeds_read_back_with_the_bytes_the_reference_writer_wrote),
        cmocka_unit_test(sharded_index_parses_to_sorted_shards_and_entries),
        cmocka_unit_test(memory_image_matches_file_and_every_truncation_is_rejected),
        cmocka_unit_test(every_malformed_case_is_rejected_with_a_clear_message),
        cmocka_unit_test(fuzz_regressions_do_not_crash),
        cmocka_unit_test(missing_paths_are_reported),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
