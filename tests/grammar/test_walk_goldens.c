/* grammar: property test against an independent validator, without Python.
 * tests/data/golden/grammar/walks.json (scripts/gen_goldens_grammar.py) holds
 * seeded random walks through our masks over jsonschemabench schemas, with
 * the verdict of PyPI `jsonschema` on every walk that ended with EOS. Here
 * the same walks are regenerated (di_grammar_random_walk, DeepSeek-V3
 * tokenizer) and must match token for token, so the verdicts apply to what
 * the code does today; every complete walk must have been judged valid. */
#include "grammar_test_util.h"

#include "grammar/grammar_tok.h"

#include <jansson.h>

static void sampled_strings_validate_and_walks_are_reproduced(void **state) {
    (void)state;
    char path[1024];
    di_test_path(path, sizeof path, "tests/data/golden/grammar/walks.json");
    json_error_t je;
    json_t *doc = json_load_file(path, 0, &je);
    if (!doc) fail_msg("%s: %s", path, je.text);
    char tok_path[1024];
    di_test_data(tok_path, sizeof tok_path, "tokenizer/deepseek-v3");
    di_tokenizer *tok = NULL;
    di_error err;
    if (di_tok_load(tok_path, &tok, &err)) fail_msg("%s: %s", tok_path, err.msg);
    di_grammar_vocab *v = NULL;
    assert_int_equal(di_grammar_vocab_from_tokenizer(tok, &v, &err), DI_OK);
    uint32_t max = (uint32_t)json_integer_value(json_object_get(doc, "max_tokens"));
    assert_true(max > 0);
    uint32_t *ids = malloc(max * sizeof *ids);
    json_t *samples = json_object_get(doc, "samples");
    assert_true(json_array_size(samples) > 0);
    char *cur_schema = NULL;
    di_grammar *g = NULL;
    di_grammar_matcher *m = NULL;
    size_t i, n_complete = 0;
    json_t *s;
    json_array_foreach(samples, i, s) {
        const char *rel = json_string_value(json_object_get(s, "schema"));
        assert_non_null(rel);
        if (!cur_schema || strcmp(cur_schema, rel)) { /* walks of one schema are adjacent */
            di_grammar_matcher_free(m), m = NULL;
            di_grammar_free(g), g = NULL;
            free(cur_schema);
            cur_schema = strdup(rel);
            char sp[1024];
            snprintf(sp, sizeof sp, "%s/tests/data/%s", di_test_src_dir(), rel);
            size_t n;
            char *text = di_test_read_file(sp, &n);
            if (!text) fail_msg("cannot read %s", sp);
            /* Non-strict: the goldens predate the refusal of formats we do
             * not enforce (they were ignored then, as non-strict drops them
             * now), and a schema that compiles strictly compiles to the
             * same grammar non-strictly. */
            di_grammar_options opt = di_grammar_options_default();
            opt.lenient = true;
            if (di_grammar_compile_json_schema(text, n, &opt, &g, &err))
                fail_msg("%s no longer compiles: %s (regenerate the goldens if intended)", rel, err.msg);
            free(text);
            assert_int_equal(di_grammar_matcher_create(g, v, &m, &err), DI_OK);
        }
        uint64_t seed = (uint64_t)json_integer_value(json_object_get(s, "seed"));
        di_grammar_matcher_reset(m);
        uint32_t n_ids;
        bool complete;
        assert_int_equal(di_grammar_random_walk(m, seed, max, ids, &n_ids, &complete, &err), DI_OK);
        json_t *want = json_object_get(s, "ids");
        if (n_ids != json_array_size(want)) fail_msg("%s seed %llu: %u tokens, golden %zu", rel, (unsigned long long)seed, n_ids, json_array_size(want));
        for (uint32_t k = 0; k < n_ids; k++)
            if ((json_int_t)ids[k] != json_integer_value(json_array_get(want, k)))
                fail_msg("%s seed %llu: token %u is %u, golden %lld", rel, (unsigned long long)seed, k, ids[k],
                         (long long)json_integer_value(json_array_get(want, k)));
        assert_int_equal(complete, json_is_true(json_object_get(s, "complete")));
        if (complete) {
            n_complete++;
            if (!json_is_true(json_object_get(s, "valid")))
                fail_msg("%s seed %llu: the validator rejected our output: %s", rel, (unsigned long long)seed,
                         json_string_value(json_object_get(s, "error")));
        }
    }
    assert_true(n_complete > json_array_size(samples) / 2); /* the property is about complete strings */
    free(cur_schema);
    free(ids);
    di_grammar_matcher_free(m);
    di_grammar_free(g);
    di_grammar_vocab_free(v);
    di_tok_free(tok);
    json_decref(doc);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sampled_strings_validate_and_walks_are_reproduced),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
