/* text: tokenizer.json files in the shapes model families ship (Qwen2's
 * byte-level BPE with "" subword prefix/suffix, BERT WordPiece with its
 * normalizers, Unigram, T5's Unigram with a SentencePiece Precompiled
 * charsmap), built and trained with PyPI `tokenizers` by
 * scripts/gen_goldens_tokenizer_json.py: our loader must give its ids, id
 * for id, with and without the post-processor's special tokens. */
#include "test_util.h"

#include "text/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SEP "\n__ggml_vocab_test__\n"

static bool parse_ids(char *line, di_tok_ids *ids) {
    for (char *q = line, *end; *q; q = end) {
        long v = strtol(q, &end, 10);
        if (end == q) break;
        int32_t *p = realloc(ids->data, (ids->n + 1) * sizeof *p);
        if (!p) return false;
        ids->data = p;
        ids->data[ids->n++] = (int32_t)v;
    }
    return true;
}

/* Cases of dir/cases.inp against dir/<out_name>; returns matches. */
static int run_cases(const di_tokenizer *t, const char *dir, const char *out_name, bool add_special, int *n_cases) {
    char path[4096];
    size_t ni, no;
    snprintf(path, sizeof path, "%s/cases.inp", dir);
    char *inp = di_test_read_file(path, &ni);
    snprintf(path, sizeof path, "%s/%s", dir, out_name);
    char *outp = di_test_read_file(path, &no);
    assert_non_null(inp);
    assert_non_null(outp);
    int pass = 0, total = 0;
    char *p = inp, *o = outp;
    for (char *e; (e = strstr(p, SEP)); p = e + strlen(SEP)) {
        *e = '\0';
        char *nl = strchr(o, '\n');
        assert_non_null(nl);
        *nl = '\0';
        di_tok_ids want = {0}, got = {0};
        assert_true(parse_ids(o, &want));
        o = nl + 1;
        di_error err = {0};
        assert_int_equal(di_tok_encode(t, p, strlen(p), add_special, true, &got, &err), DI_OK);
        bool same = got.n == want.n && (!got.n || !memcmp(got.data, want.data, got.n * sizeof *got.data));
        if (!same) {
            print_message("mismatch on [%s]: got", p);
            for (size_t i = 0; i < got.n; i++) print_message(" %d", got.data[i]);
            print_message(" want");
            for (size_t i = 0; i < want.n; i++) print_message(" %d", want.data[i]);
            print_message("\n");
        }
        pass += same;
        total++;
        di_tok_ids_free(&got);
        free(want.data);
    }
    free(inp);
    free(outp);
    *n_cases = total;
    return pass;
}

static void check_shape(const char *name) {
    char dir[4096], rel[256];
    snprintf(rel, sizeof rel, "tests/data/golden/tokenizer/json/%s", name);
    di_test_path(dir, sizeof dir, rel);
    di_tokenizer *t = NULL;
    di_error err = {0};
    if (di_tok_load(dir, &t, &err)) fail_msg("%s: %s", name, err.msg);
    int n = 0, pass = run_cases(t, dir, "cases.out", false, &n);
    int ns = 0, pass_s = run_cases(t, dir, "cases.special.out", true, &ns);
    print_message("golden  %-16s %s: %d/%d, with special tokens %d/%d\n", name, di_tok_describe(t), pass, n,
                  pass_s, ns);
    assert_true(n > 40);
    assert_int_equal(pass, n);
    assert_int_equal(pass_s, ns);
    di_tok_free(t);
}

static void qwen2_shape_matches_hf(void **state) { (void)state; check_shape("qwen2"); }
static void wordpiece_bert_matches_hf(void **state) { (void)state; check_shape("wordpiece"); }
static void wordpiece_cased_matches_hf(void **state) { (void)state; check_shape("wordpiece_cased"); }
static void wordpiece_nfd_strip_accents_matches_hf(void **state) { (void)state; check_shape("wordpiece_nfd"); }
static void unigram_matches_hf(void **state) { (void)state; check_shape("unigram"); }
static void t5_precompiled_charsmap_matches_hf(void **state) { (void)state; check_shape("t5"); }

/* Hostile model sections: clear errors, never a crash or a wrong tokenizer. */
static void bad_model_sections_are_errors(void **state) {
    (void)state;
    static const char *const BAD[] = {
        "{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", \"x\"]]}}",
        "{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\"]]}}",
        "{\"model\": {\"type\": \"Unigram\", \"vocab\": []}}",
        "{\"model\": {\"type\": \"Unigram\", \"vocab\": {\"a\": 1}}}",
        "{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", 1]], \"byte_fallback\": true}}",
        "{\"model\": {\"type\": \"WordPiece\", \"vocab\": [1, 2]}}",
        "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"a\": -1}}}",
        "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"a\": 0}, \"continuing_subword_prefix\": "
        "\"0123456789abcdefghij\"}}",
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [], "
        "\"continuing_subword_prefix\": \"##\"}}",
        "{\"model\": {\"type\": \"WordLevel\", \"vocab\": {\"a\": 0}}}",
        /* Precompiled charsmaps: not base64; a trie larger than the blob */
        "{\"normalizer\": {\"type\": \"Precompiled\", \"precompiled_charsmap\": \"not base64!\"}, "
        "\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", 0]]}}",
        "{\"normalizer\": {\"type\": \"Precompiled\", \"precompiled_charsmap\": \"CAAAAGFiY2Q=\"}, "
        "\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", 0]]}}",
    };
    char path[] = "/tmp/di_tok_json_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fputs(BAD[i], f);
        fclose(f);
        di_tokenizer *t = NULL;
        di_error err = {0};
        assert_int_not_equal(di_tok_load(path, &t, &err), DI_OK);
        assert_null(t);
        assert_true(err.msg[0]);
    }
    /* A WordPiece vocab without unk: an unknown word is an error, not garbage. */
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"a\": 0, \"##b\": 1}}, "
          "\"pre_tokenizer\": {\"type\": \"BertPreTokenizer\"}}", f);
    fclose(f);
    di_tokenizer *t = NULL;
    di_error err = {0};
    assert_int_equal(di_tok_load(path, &t, &err), DI_OK);
    di_tok_ids ids = {0};
    assert_int_equal(di_tok_encode(t, "ab a", 4, false, false, &ids, &err), DI_OK);
    assert_int_equal(ids.n, 3);
    assert_int_equal(di_tok_encode(t, "z", 1, false, false, &ids, &err), DI_ERR_FORMAT);
    assert_int_equal(ids.n, 3);
    di_tok_ids_free(&ids);
    di_tok_free(t);
    /* A charsmap of random trie units (sizes consistent): lookups stay in
     * bounds; encoding gives ids or an error, never a crash. */
    f = fopen(path, "w");
    assert_non_null(f);
    fputs("{\"normalizer\": {\"type\": \"Precompiled\", \"precompiled_charsmap\": \"AAEAADi05lLkTafyNw2eJg4nE2VQpKOm0H9cDDMvixIkCD/SK5AviRHoGBj4yZ1dXZgxlXUE2Q6UXeLo9U7ngcx19jbYUJkJWqMAFlpnA2+bVA1rjwviESQXnD3Z9zgXzm4RjSZKrWy23SEPr5Ss08+SwZAjfLEfXRCM8lkwJjk4s3ChtXafoPFIP5WpDZ3y8TDWD88EvZP1CuaVFNqMZZzisQzM2uv5kNGYOLDX7As+l4GOy5bE262+FyKW1SNKQrJMa6Tm7STsY2qKwKEnHlhmJ5I4qvhOWAVtjy+o7dCUupeuixVELuLbYRqRv+OUaXM6kkfVj6PFUBgwA3JVX9I18Rh4AP/+AA==\"}, "
          "\"model\": {\"type\": \"Unigram\", \"unk_id\": 0, \"vocab\": [[\"<unk>\", 0], [\"a\", -1]]}}", f);
    fclose(f);
    assert_int_equal(di_tok_load(path, &t, &err), DI_OK);
    static const char *const TEXTS[] = {"abc", "\xC3\xA9\xE2\x91\xA0 x", "\xF0\x9F\x98\x80\xCC\x81", "", " \t\n"};
    for (size_t i = 0; i < sizeof TEXTS / sizeof TEXTS[0]; i++) {
        di_status rc = di_tok_encode(t, TEXTS[i], strlen(TEXTS[i]), false, false, &ids, &err);
        assert_true(rc == DI_OK || rc == DI_ERR_FORMAT);
        di_tok_ids_free(&ids);
    }
    di_tok_free(t);
    unlink(path);
}

static void write_file(const char *dir, const char *name, const char *text) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* What transformers 4.50+ writes with save_pretrained (found on a real
 * Qwen 2.5 folder, scripts/gen_hf_qwen_real.py): model_max_length spelled
 * out as 10^30 (past any JSON integer jansson holds) and the template in
 * chat_template.jinja instead of tokenizer_config.json. Both load. */
static void transformers_saved_config_loads(void **state) {
    (void)state;
    char dir[] = "/tmp/di_tok_cfg_XXXXXX";
    assert_non_null(mkdtemp(dir));
    write_file(dir, "tokenizer.json",
               "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"<|im_end|>\": 1}, \"merges\": []}}");
    write_file(dir, "tokenizer_config.json",
               "{\"eos_token\": \"<|im_end|>\", \"model_max_length\": 1000000000000000019884624838656}");
    write_file(dir, "chat_template.jinja", "{% for m in messages %}{{'<|im_start|>' + m['role']}}{% endfor %}");
    di_tokenizer *t = NULL;
    di_error err = {0};
    if (di_tok_load(dir, &t, &err)) fail_msg("%s", err.msg);
    assert_int_equal(di_tok_eos(t), 1);
    assert_int_equal(di_tok_chat_kind(t), DI_CHAT_CHATML);
    di_tok_free(t);
    /* the config's own template wins over the file */
    write_file(dir, "tokenizer_config.json", "{\"chat_template\": \"<start_of_turn>x<end_of_turn>\"}");
    assert_int_equal(di_tok_load(dir, &t, &err), DI_OK);
    assert_int_equal(di_tok_chat_kind(t), DI_CHAT_GEMMA);
    di_tok_free(t);
    char path[512];
    static const char *const FILES[] = {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"};
    for (size_t i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, FILES[i]);
        unlink(path);
    }
    rmdir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(qwen2_shape_matches_hf),
        cmocka_unit_test(wordpiece_bert_matches_hf),
        cmocka_unit_test(wordpiece_cased_matches_hf),
        cmocka_unit_test(wordpiece_nfd_strip_accents_matches_hf),
        cmocka_unit_test(unigram_matches_hf),
        cmocka_unit_test(t5_precompiled_charsmap_matches_hf),
        cmocka_unit_test(bad_model_sections_are_errors),
        cmocka_unit_test(transformers_saved_config_loads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
