/* model/deepseek_v41: every bad V4.1 folder of the regression corpus
 * tests/data/malformed/deepseek_v41/ (one JSON file a case) is refused with a clear error
 * naming the file, key or tensor -- never a crash. Each corpus entry is a
 * mutation of the tiny golden checkpoint:
 *
 *   "config" / "root"   keys merged into text_config / the root (null deletes)
 *   "flatten"           text_config removed
 *   "drop_shard"        that shard file left out
 *   "retype"            [tensor, dtype]: the header's dtype string replaced
 *                       (padded with JSON whitespace, so the header stays valid)
 *   "truncate"          [shard, bytes]: the file cut short by that many bytes
 *   "expect"            a substring the error message must contain
 *
 * The mutated folder is built under /tmp from links to the real files. */
#include "test_util.h"

#include "model/deepseek_v41.h"
#include "text/tokenizer.h"

#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MIN_CASES 15

static char src_dir[4096];

static void link_or_copy(const char *name, const char *dst_dir, int copy) {
    char from[4608], to[4608];
    snprintf(from, sizeof from, "%s/%s", src_dir, name);
    snprintf(to, sizeof to, "%s/%s", dst_dir, name);
    char *abs = realpath(from, NULL);
    assert_non_null(abs);
    if (!copy) {
        assert_int_equal(symlink(abs, to), 0);
    } else {
        size_t size;
        char *data = di_test_read_file(abs, &size);
        assert_non_null(data);
        FILE *fp = fopen(to, "wb");
        assert_non_null(fp);
        assert_int_equal(fwrite(data, 1, size, fp), size);
        fclose(fp);
        free(data);
    }
    free(abs);
}

/* Replaces the dtype of `tensor` in the copied shard's header; 0 when the
 * shard does not hold it. */
static int retype(const char *path, const char *tensor, const char *dtype) {
    size_t size;
    char *d = di_test_read_file(path, &size);
    assert_non_null(d);
    char key[512];
    snprintf(key, sizeof key, "\"%s\":{\"dtype\":\"", tensor);
    char *at = memmem(d, size, key, strlen(key));
    if (!at) {
        free(d);
        return 0;
    }
    char *v = at + strlen(key), *end = strchr(v, '"');
    size_t old_len = (size_t)(end - v), new_len = strlen(dtype);
    assert_true(new_len <= old_len);
    memcpy(v, dtype, new_len);
    v[new_len] = '"';
    memset(v + new_len + 1, ' ', old_len - new_len); /* JSON whitespace before the comma */
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(d, 1, size, fp), size);
    fclose(fp);
    free(d);
    return 1;
}

static void merge(json_t *dst, json_t *patch) {
    const char *k;
    json_t *v;
    json_object_foreach(patch, k, v) {
        if (json_is_null(v)) json_object_del(dst, k);
        else json_object_set(dst, k, v);
    }
}

static void build_case(json_t *c, char *dir, size_t size) {
    snprintf(dir, size, "/tmp/di_v41_bad_XXXXXX");
    assert_non_null(mkdtemp(dir));
    char path[4608];
    snprintf(path, sizeof path, "%s/config.json", src_dir);
    json_error_t jerr;
    json_t *cfg = json_load_file(path, 0, &jerr);
    assert_non_null(cfg);
    if (json_object_get(c, "config")) merge(json_object_get(cfg, "text_config"), json_object_get(c, "config"));
    if (json_object_get(c, "root")) merge(cfg, json_object_get(c, "root"));
    if (json_is_true(json_object_get(c, "flatten"))) json_object_del(cfg, "text_config");
    snprintf(path, sizeof path, "%s/config.json", dir);
    assert_int_equal(json_dump_file(cfg, path, 0), 0);
    json_decref(cfg);
    link_or_copy("tokenizer.json", dir, 0);
    link_or_copy("model.safetensors.index.json", dir, 0);
    const char *drop = json_string_value(json_object_get(c, "drop_shard"));
    json_t *rt = json_object_get(c, "retype"), *tr = json_object_get(c, "truncate");
    DIR *d = opendir(src_dir);
    assert_non_null(d);
    struct dirent *e;
    int retyped = 0;
    while ((e = readdir(d)) != NULL) {
        const char *n = e->d_name;
        if (!strstr(n, ".safetensors") || strstr(n, ".json")) continue;
        if (drop && !strcmp(n, drop)) continue;
        int is_tr = tr && !strcmp(n, json_string_value(json_array_get(tr, 0)));
        link_or_copy(n, dir, rt || is_tr);
        snprintf(path, sizeof path, "%s/%s", dir, n);
        if (rt) retyped += retype(path, json_string_value(json_array_get(rt, 0)), json_string_value(json_array_get(rt, 1)));
        if (is_tr) {
            struct stat st;
            assert_int_equal(stat(path, &st), 0);
            assert_int_equal(truncate(path, st.st_size - (off_t)json_integer_value(json_array_get(tr, 1))), 0);
        }
    }
    closedir(d);
    assert_true(!rt || retyped == 1);
}

static void remove_case(const char *dir) {
    DIR *d = opendir(dir);
    struct dirent *e;
    char path[4608];
    while (d && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    if (d) closedir(d);
    rmdir(dir);
}

static void every_corpus_entry_is_refused_clearly(void **state) {
    (void)state;
    di_test_path(src_dir, sizeof src_dir, "tests/data/golden/deepseek_v41/tiny");
    char corpus[4096];
    di_test_path(corpus, sizeof corpus, "tests/data/malformed/deepseek_v41");
    DIR *d = opendir(corpus);
    assert_non_null(d);
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d)) != NULL) {
        if (!strstr(e->d_name, ".json")) continue;
        char path[4608], dir[4096];
        snprintf(path, sizeof path, "%s/%s", corpus, e->d_name);
        json_error_t jerr;
        json_t *c = json_load_file(path, 0, &jerr);
        assert_non_null(c);
        build_case(c, dir, sizeof dir);
        di_error err = {0};
        di_tokenizer *tok = NULL;
        di_status s = di_tok_load_json(dir, &tok, &err);
        di_dsv41_model *m = NULL;
        if (s == DI_OK) s = di_dsv41_load(dir, NULL, DI_DSV41_NUMERICS_DEEPINFER, tok, &m, &err);
        const char *want = json_string_value(json_object_get(c, "expect"));
        printf("%-32s -> %s\n", e->d_name, err.msg);
        if (s == DI_OK || !strstr(err.msg, want)) {
            fprintf(stderr, "%s: status %d, message \"%s\" lacks \"%s\"\n", e->d_name, (int)s, err.msg, want);
            fail();
        }
        assert_null(m);
        di_tok_free(tok);
        remove_case(dir);
        json_decref(c);
        n++;
    }
    closedir(d);
    assert_true(n >= MIN_CASES);
}

/* The unmodified folder loads (the corpus checks are not vacuous). */
static void the_unmodified_folder_loads(void **state) {
    (void)state;
    di_test_path(src_dir, sizeof src_dir, "tests/data/golden/deepseek_v41/tiny");
    json_t *c = json_object();
    char dir[4096];
    build_case(c, dir, sizeof dir);
    di_error err = {0};
    di_tokenizer *tok = NULL;
    assert_int_equal(di_tok_load_json(dir, &tok, &err), DI_OK);
    di_dsv41_model *m = NULL;
    if (di_dsv41_load(dir, NULL, DI_DSV41_NUMERICS_DEEPINFER, tok, &m, &err)) fail_msg("%s", err.msg);
    di_dsv41_free(m);
    di_tok_free(tok);
    remove_case(dir);
    json_decref(c);
}

/* Mutations DeepInfer 0.1.0's loader accepts load here too: engram_layer_ids
 * [] or absent is a model without Engram (hf/config.py:_build_engram returns
 * None and reads no other engram_* key; the tables left in the checkpoint
 * have no counterpart and are skipped, as weights.py:_load_engram_tables
 * skips them with a warning). */
static void folders_deepinfer_accepts_load(void **state) {
    (void)state;
    di_test_path(src_dir, sizeof src_dir, "tests/data/golden/deepseek_v41/tiny");
    static const char *const cases[] = {
        "{\"config\": {\"engram_layer_ids\": []}}",
        "{\"config\": {\"engram_layer_ids\": null, \"engram_max_ngram_size\": null, \"engram_n_heads\": null,"
        " \"engram_head_dim\": null, \"engram_vocab_size\": null, \"engram_compressed_vocab_size\": null}}",
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        json_error_t jerr;
        json_t *c = json_loads(cases[i], 0, &jerr);
        assert_non_null(c);
        char dir[4096];
        build_case(c, dir, sizeof dir);
        di_error err = {0};
        di_tokenizer *tok = NULL;
        assert_int_equal(di_tok_load_json(dir, &tok, &err), DI_OK);
        di_dsv41_model *m = NULL;
        if (di_dsv41_load(dir, NULL, DI_DSV41_NUMERICS_DEEPINFER, tok, &m, &err)) fail_msg("case %zu: %s", i, err.msg);
        const di_dsv41_hparams *hp = di_dsv41_hparams_of(m);
        assert_int_equal(hp->n_engram, 0);
        for (int32_t l = 0; l < hp->n_layers; l++) assert_int_equal(hp->role[l].engram, -1);
        di_dsv41_free(m);
        di_tok_free(tok);
        remove_case(dir);
        json_decref(c);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_unmodified_folder_loads),
        cmocka_unit_test(folders_deepinfer_accepts_load),
        cmocka_unit_test(every_corpus_entry_is_refused_clearly),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
