/* format/hf_config: the DeepSeek-V4 / V4.1-style seed configs read through
 * the getters a model loader uses; every malformed config rejected with a
 * message naming the key path; fuzz regressions replayed.
 * Data: scripts/gen_malformed_safetensors.py. */
#include "test_util.h"

#include "format/hf_config.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MIN_MALFORMED_CASES = 6, MAX_LAYERS = 1024, MAX_EOS = 8 };

/* What a DeepSeek-V4 loader reads, with the ranges it would enforce. The
 * malformed corpus is judged against this reader. */
typedef struct v4_fields {
    const char *model_type;
    int64_t vocab, hidden, layers, heads, head_dim, q_lora_rank, o_groups, o_lora_rank;
    int64_t n_routed_experts, experts_per_tok, hc_mult, pad_token_id;
    int64_t compress_ratios[MAX_LAYERS];
    size_t n_compress_ratios;
    int64_t eos[MAX_EOS];
    size_t n_eos;
    int64_t block_size[2];
    size_t n_block_size;
    double rms_eps, rope_factor, routed_scale;
    int64_t rope_orig_max_pos;
    int scoring;
    bool norm_topk, tie_embeddings;
} v4_fields;

static di_status read_v4(const di_hf_config *root, v4_fields *f, di_error *err) {
    static const char *const SCORING[] = {"sqrtsoftplus", "softmax", "sigmoid"};
    di_hf_config *text = NULL, *rope = NULL;
    di_status s;
#define TRY(x) do { if ((s = (x)) != DI_OK) goto done; } while (0)
    TRY(di_hf_config_get_string(root, "model_type", &f->model_type, err));
    TRY(di_hf_config_text_section(root, &text, err));
    TRY(di_hf_config_get_int(text, "vocab_size", 1, 1 << 24, &f->vocab, err));
    TRY(di_hf_config_get_int(text, "hidden_size", 1, 65536, &f->hidden, err));
    TRY(di_hf_config_get_int(text, "num_hidden_layers", 1, MAX_LAYERS, &f->layers, err));
    TRY(di_hf_config_get_int(text, "num_attention_heads", 1, 1024, &f->heads, err));
    TRY(di_hf_config_get_int(text, "head_dim", 1, 4096, &f->head_dim, err));
    TRY(di_hf_config_get_int(text, "q_lora_rank", 1, 65536, &f->q_lora_rank, err));
    TRY(di_hf_config_get_int(text, "o_groups", 1, 1024, &f->o_groups, err));
    TRY(di_hf_config_get_int(text, "o_lora_rank", 1, 65536, &f->o_lora_rank, err));
    TRY(di_hf_config_get_int(text, "n_routed_experts", 1, 65536, &f->n_routed_experts, err));
    TRY(di_hf_config_get_int(text, "num_experts_per_tok", 1, 65536, &f->experts_per_tok, err));
    TRY(di_hf_config_get_int_or(text, "hc_mult", 1, 16, 4, &f->hc_mult, err));
    TRY(di_hf_config_get_int_or(text, "pad_token_id", 0, f->vocab - 1, -1, &f->pad_token_id, err));
    TRY(di_hf_config_get_int_array(text, "compress_ratios", 0, 1024, f->compress_ratios,
                                   (size_t)f->layers, &f->n_compress_ratios, err));
    TRY(di_hf_config_get_token_ids(text, "eos_token_id", 0, f->vocab - 1, f->eos, MAX_EOS, &f->n_eos,
                                   err));
    TRY(di_hf_config_get_float(text, "rms_norm_eps", 1e-30, 1.0, &f->rms_eps, err));
    TRY(di_hf_config_get_float(text, "routed_scaling_factor", 0.0, 1e3, &f->routed_scale, err));
    TRY(di_hf_config_get_enum(text, "scoring_func", SCORING, 3, &f->scoring, err));
    TRY(di_hf_config_get_bool(text, "norm_topk_prob", &f->norm_topk, err));
    TRY(di_hf_config_get_bool_or(text, "tie_word_embeddings", false, &f->tie_embeddings, err));
    TRY(di_hf_config_section(text, "rope_scaling", &rope, err));
    TRY(di_hf_config_get_float(rope, "factor", 1.0, 1e6, &f->rope_factor, err));
    TRY(di_hf_config_get_int(rope, "original_max_position_embeddings", 1, 1 << 30,
                             &f->rope_orig_max_pos, err));
    TRY(di_hf_config_get_int_array(root, "quantization_config.weight_block_size", 1, 4096,
                                   f->block_size, 2, &f->n_block_size, err));
#undef TRY
done:
    di_hf_config_close(rope);
    di_hf_config_close(text);
    return s;
}

static di_hf_config *open_rel(const char *rel) {
    char path[1024];
    di_test_path(path, sizeof path, rel);
    di_hf_config *c = NULL;
    di_error err = {0};
    if (di_hf_config_open(path, &c, &err) != DI_OK) fail_msg("%s", err.msg);
    return c;
}

static void v4_seed_reads_top_level_fields(void **state) {
    (void)state;
    di_hf_config *c = open_rel("tests/data/seeds/config/deepseek_v4_tiny.json");
    v4_fields f;
    di_error err = {0};
    if (read_v4(c, &f, &err) != DI_OK) fail_msg("%s", err.msg);
    assert_string_equal(f.model_type, "deepseek_v4");
    assert_int_equal(f.hidden, 64);
    assert_int_equal(f.layers, 4);
    assert_int_equal(f.heads, 4);
    assert_int_equal(f.q_lora_rank, 32);
    assert_int_equal(f.o_groups, 2);
    assert_int_equal(f.n_routed_experts, 8);
    assert_int_equal(f.experts_per_tok, 2);
    assert_int_equal(f.n_compress_ratios, 4);
    assert_int_equal(f.compress_ratios[1], 4);
    assert_int_equal(f.compress_ratios[2], 128);
    assert_int_equal(f.n_eos, 1);
    assert_int_equal(f.eos[0], 1);
    assert_int_equal(f.pad_token_id, -1); /* null -> default */
    assert_int_equal(f.hc_mult, 4);
    assert_true(f.rms_eps == 1e-6);
    assert_true(f.rope_factor == 16.0);
    assert_int_equal(f.rope_orig_max_pos, 65536);
    assert_int_equal(f.scoring, 0);
    assert_true(f.norm_topk);
    assert_false(f.tie_embeddings);
    assert_int_equal(f.n_block_size, 2);
    assert_int_equal(f.block_size[0], 128);
    di_hf_config_close(c);
}

static void v41_seed_reads_text_config_section(void **state) {
    (void)state;
    di_hf_config *c = open_rel("tests/data/seeds/config/deepseek_v41_tiny.json");
    v4_fields f;
    di_error err = {0};
    if (read_v4(c, &f, &err) != DI_OK) fail_msg("%s", err.msg);
    assert_string_equal(f.model_type, "deepseek_v41");
    assert_int_equal(f.layers, 4);
    assert_int_equal(f.n_eos, 2);
    assert_int_equal(f.eos[1], 2);
    assert_int_equal(f.block_size[0], 32);
    /* A section outlives its parent and knows its path. */
    di_hf_config *text = NULL;
    assert_int_equal(di_hf_config_text_section(c, &text, &err), DI_OK);
    di_hf_config_close(c);
    assert_string_equal(di_hf_config_path(text), "text_config");
    int64_t v;
    assert_int_equal(di_hf_config_get_int(text, "hidden_size", 1, 8, &v, &err), DI_ERR_RANGE);
    assert_non_null(strstr(err.msg, "deepseek_v41_tiny.json: text_config.hidden_size: "
                                    "expected integer in [1, 8], got 64"));
    assert_int_equal(di_hf_config_get_int(text, "rope_scaling.beta_fast", 0, 100, &v, &err), DI_OK);
    assert_int_equal(v, 32);
    di_hf_config_close(text);
}

static void getters_report_missing_null_type_and_range(void **state) {
    (void)state;
    const char *json = "{\"a\": 3, \"n\": null, \"s\": \"x\", \"f\": 0.5, \"i\": 2, \"b\": true,"
                       " \"o\": {\"k\": [1, 2, 3], \"deep\": {\"x\": 1.5}}, \"arr\": [\"p\", 4]}";
    di_hf_config *c = NULL;
    di_error err = {0};
    assert_int_equal(di_hf_config_open_memory(json, strlen(json), "config.json", &c, &err), DI_OK);
    int64_t i;
    double d;
    bool b;
    const char *s;
    assert_int_equal(di_hf_config_get_int(c, "zz", 0, 9, &i, &err), DI_ERR_NOT_FOUND);
    assert_string_equal(err.msg, "config.json: zz: missing (expected integer in [0, 9])");
    assert_int_equal(di_hf_config_get_int(c, "n", 0, 9, &i, &err), DI_ERR_FORMAT);
    assert_int_equal(di_hf_config_get_int(c, "f", 0, 9, &i, &err), DI_ERR_FORMAT);
    assert_int_equal(di_hf_config_get_int(c, "a", 4, 9, &i, &err), DI_ERR_RANGE);
    assert_string_equal(err.msg, "config.json: a: expected integer in [4, 9], got 3");
    assert_int_equal(di_hf_config_get_int_or(c, "n", 0, 9, 7, &i, &err), DI_OK);
    assert_int_equal(i, 7);
    assert_int_equal(di_hf_config_get_int_or(c, "zz", 0, 9, 8, &i, &err), DI_OK);
    assert_int_equal(i, 8);
    assert_int_equal(di_hf_config_get_int_or(c, "s", 0, 9, 8, &i, &err), DI_ERR_FORMAT);
    /* Floats accept integers; ranges are inclusive. */
    assert_int_equal(di_hf_config_get_float(c, "i", 2.0, 2.0, &d, &err), DI_OK);
    assert_true(d == 2.0);
    assert_int_equal(di_hf_config_get_float(c, "f", 0.6, 1.0, &d, &err), DI_ERR_RANGE);
    assert_int_equal(di_hf_config_get_float_or(c, "n", 0, 1, 0.25, &d, &err), DI_OK);
    assert_true(d == 0.25);
    assert_int_equal(di_hf_config_get_bool(c, "b", &b, &err), DI_OK);
    assert_true(b);
    assert_int_equal(di_hf_config_get_bool(c, "i", &b, &err), DI_ERR_FORMAT);
    assert_int_equal(di_hf_config_get_bool_or(c, "zz", true, &b, &err), DI_OK);
    assert_int_equal(di_hf_config_get_string(c, "s", &s, &err), DI_OK);
    assert_string_equal(s, "x");
    assert_int_equal(di_hf_config_get_string_or(c, "zz", "dflt", &s, &err), DI_OK);
    assert_string_equal(s, "dflt");
    static const char *const NAMES[] = {"w", "x"};
    int e;
    assert_int_equal(di_hf_config_get_enum(c, "s", NAMES, 2, &e, &err), DI_OK);
    assert_int_equal(e, 1);
    assert_int_equal(di_hf_config_get_enum(c, "a", NAMES, 2, &e, &err), DI_ERR_FORMAT);
    assert_int_equal(di_hf_config_get_enum_or(c, "zz", NAMES, 2, 0, &e, &err), DI_OK);
    /* Dotted paths, and an intermediate that is not an object. */
    assert_true(di_hf_config_has(c, "o.deep.x"));
    assert_false(di_hf_config_has(c, "n"));
    assert_false(di_hf_config_has(c, "o.none"));
    assert_int_equal(di_hf_config_get_float(c, "o.deep.x", 0, 2, &d, &err), DI_OK);
    assert_int_equal(di_hf_config_get_int(c, "a.b", 0, 9, &i, &err), DI_ERR_FORMAT);
    assert_string_equal(err.msg, "config.json: a: expected an object, got integer");
    /* Arrays: length cap, element paths, string arrays. */
    int64_t arr[3];
    size_t n;
    assert_int_equal(di_hf_config_array_len(c, "o.k", &n, &err), DI_OK);
    assert_int_equal(n, 3);
    assert_int_equal(di_hf_config_get_int_array(c, "o.k", 0, 9, arr, 3, &n, &err), DI_OK);
    assert_int_equal(arr[2], 3);
    assert_int_equal(di_hf_config_get_int_array(c, "o.k", 0, 9, arr, 2, &n, &err), DI_ERR_RANGE);
    assert_int_equal(di_hf_config_get_int_array(c, "o.k", 2, 9, arr, 3, &n, &err), DI_ERR_RANGE);
    assert_string_equal(err.msg, "config.json: o.k[0]: expected integer in [2, 9], got 1");
    const char *strs[2];
    assert_int_equal(di_hf_config_get_string_array(c, "arr", strs, 2, &n, &err), DI_ERR_FORMAT);
    assert_string_equal(err.msg, "config.json: arr[1]: expected string, got 4");
    double fl[3];
    assert_int_equal(di_hf_config_get_float_array(c, "o.k", 0, 9, fl, 3, &n, &err), DI_OK);
    assert_true(fl[1] == 2.0);
    assert_int_equal(di_hf_config_get_token_ids(c, "a", 0, 9, arr, 3, &n, &err), DI_OK);
    assert_int_equal(n, 1);
    assert_int_equal(arr[0], 3);
    /* Sections: wrong type, and the root when there is no text_config. */
    di_hf_config *sec = NULL;
    assert_int_equal(di_hf_config_section(c, "a", &sec, &err), DI_ERR_FORMAT);
    assert_null(sec);
    assert_int_equal(di_hf_config_text_section(c, &sec, &err), DI_OK);
    assert_string_equal(di_hf_config_path(sec), "");
    di_hf_config_close(sec);
    di_hf_config_close(c);
}

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
    return names;
}

static void every_malformed_config_is_rejected_with_its_key_path(void **state) {
    (void)state;
    char tsv[1024], dir[1024];
    di_test_path(tsv, sizeof tsv, "tests/data/expected/malformed_config.tsv");
    di_test_path(dir, sizeof dir, "tests/data/malformed/config");
    size_t size;
    char *text = di_test_read_file(tsv, &size);
    assert_non_null(text);
    size_t n_files;
    char **files = list_dir(dir, &n_files);
    assert_non_null(files);
    size_t n_cases = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] == '#') continue;
        char *tab = strchr(line, '\t');
        assert_non_null(tab);
        *tab = '\0';
        const char *want = tab + 1;
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, line);
        di_hf_config *c = NULL;
        di_error err = {0};
        di_status s = di_hf_config_open(path, &c, &err);
        if (s == DI_OK) {
            v4_fields f;
            s = read_v4(c, &f, &err);
            di_hf_config_close(c);
        }
        if (s == DI_OK) fail_msg("%s: accepted", path);
        if (!strstr(err.msg, want)) fail_msg("%s: message \"%s\" lacks \"%s\"", line, err.msg, want);
        assert_non_null(strstr(err.msg, line)); /* names the file */
        n_cases++;
    }
    assert_int_equal(n_cases, n_files); /* every file has a manifest line */
    print_message("%zu malformed configs rejected\n", n_cases);
    assert_true(n_cases >= MIN_MALFORMED_CASES);
    for (size_t i = 0; i < n_files; i++) free(files[i]);
    free(files);
    free(text);
}

static void fuzz_regressions_do_not_crash(void **state) {
    (void)state;
    char dir[1024];
    di_test_path(dir, sizeof dir, "tests/data/fuzz-regress/config");
    size_t n;
    char **names = list_dir(dir, &n);
    for (size_t i = 0; i < n; i++) {
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        size_t size;
        char *data = di_test_read_file(path, &size);
        free(names[i]);
        if (!data) continue;
        di_hf_config *c = NULL;
        di_error err = {0};
        if (di_hf_config_open_memory(data, size, "regress", &c, &err) == DI_OK) {
            v4_fields f;
            (void)read_v4(c, &f, &err);
            di_hf_config_close(c);
        }
        free(data);
    }
    print_message("%zu config fuzz regressions replayed\n", n);
    free(names);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(v4_seed_reads_top_level_fields),
        cmocka_unit_test(v41_seed_reads_text_config_section),
        cmocka_unit_test(getters_report_missing_null_type_and_range),
        cmocka_unit_test(every_malformed_config_is_rejected_with_its_key_path),
        cmocka_unit_test(fuzz_regressions_do_not_crash),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
