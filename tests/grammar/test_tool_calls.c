/* grammar: required tool calls in DeepSeek's DSML (tool_calls.c). The
 * recipe's own rendering of calls (tests/data/golden/dsml/render.json,
 * deepseek-recipe 0.2.0) and calls rendered by src/text/dsml_render.c (equal
 * to the recipe's on that corpus) are accepted token by token over the
 * tiny DeepSeek vocabulary with its special tokens, with the fast mask equal
 * to the reference one and "｜DSML｜" allowed only right after "<" or "</";
 * the same characters as plain text, calls that break the schema, a wrong
 * tool and a second call without parallel_tool_calls are rejected. */
#include "grammar_test_util.h"

#include "grammar/grammar_tok.h"
#include "text/dsml.h"

#include <jansson.h>

#define DSML_TOK "\xef\xbd\x9c" "DSML\xef\xbd\x9c"

static di_tokenizer *g_tok;
static di_grammar_vocab *g_vocab;
static int32_t g_dsml_id, g_eos_id;

static int setup(void **state) {
    (void)state;
    char path[4096];
    di_error err = {0};
    if (di_tok_load(di_test_path(path, sizeof path, "tests/data/golden/dsml/tokenizer.json"), &g_tok, &err))
        fail_msg("%s: %s", path, err.msg);
    if (di_grammar_vocab_from_tokenizer(g_tok, &g_vocab, &err)) fail_msg("vocab: %s", err.msg);
    di_tok_ids ids = {0};
    if (di_tok_encode(g_tok, DSML_TOK, strlen(DSML_TOK), false, true, &ids, &err) || ids.n != 1)
        fail_msg("｜DSML｜ is not one token");
    g_dsml_id = ids.data[0];
    ids.n = 0;
    static const char EOS[] = "<｜end▁of▁sentence｜>";
    if (di_tok_encode(g_tok, EOS, strlen(EOS), false, true, &ids, &err) || ids.n != 1 || !di_tok_is_eog(g_tok, ids.data[0]))
        fail_msg("no end-of-sentence token");
    g_eos_id = ids.data[0];
    di_tok_ids_free(&ids);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    di_grammar_vocab_free(g_vocab);
    di_tok_free(g_tok);
    return 0;
}

/* The spec for tools given as Chat Completions tools (or bare functions). */
static char *spec_of(const json_t *tools, bool v41, bool parallel) {
    json_t *list = json_array();
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        json_t *f = json_object_get(t, "function");
        if (!f) f = (json_t *)t;
        json_t *o = json_pack("{s:O}", "name", json_object_get(f, "name"));
        json_t *p = json_object_get(f, "parameters");
        json_object_set(o, "parameters", p ? p : json_null());
        json_array_append_new(list, o);
    }
    json_t *spec = json_pack("{s:s, s:b, s:o}", "syntax", v41 ? "dsml_v41" : "dsml_v4", "parallel", parallel, "tools", list);
    char *s = json_dumps(spec, 0);
    json_decref(spec);
    return s;
}

static di_grammar *compile(const json_t *tools, bool v41, bool parallel) {
    char *spec = spec_of(tools, v41, parallel);
    di_grammar_options o = di_grammar_options_default();
    o.whitespace = DI_GRAMMAR_WS_FLEXIBLE;
    o.lenient = true;
    di_grammar *g = NULL;
    di_error err = {0};
    if (di_grammar_compile_tool_calls(spec, strlen(spec), &o, &g, &err)) fail_msg("compile: %s\n%s", err.msg, spec);
    free(spec);
    return g;
}

/* Walks ids through a fresh token matcher: each id must be in the (fast ==
 * reference) mask, where no special token but ｜DSML｜ is ever allowed and
 * that one only after "<" or "</"; true when all pass and EOS ends it. */
static bool walk_ids(const di_grammar *g, const int32_t *ids, size_t n) {
    di_grammar_matcher *m;
    di_error err;
    assert_int_equal(di_grammar_matcher_create(g, g_vocab, &m, &err), DI_OK);
    size_t words = di_grammar_vocab_mask_words(g_vocab);
    uint32_t *fast = calloc(words, 4), *slow = calloc(words, 4);
    char text[8192];
    size_t tl = 0;
    bool ok = true;
    for (size_t i = 0; i <= n && ok; i++) {
        assert_int_equal(di_grammar_matcher_fill_mask(m, fast, words, &err), DI_OK);
        assert_int_equal(di_grammar_matcher_fill_mask_slow(m, slow, words, &err), DI_OK);
        assert_memory_equal(fast, slow, words * 4);
        for (int32_t id = 0; id < di_tok_vocab_size(g_tok); id++) {
            if (!gt_bit(fast, (uint32_t)id) || id == g_eos_id) continue;
            di_tok_type ty = di_tok_type_of(g_tok, id);
            if (ty == DI_TOK_TYPE_NORMAL || ty == DI_TOK_TYPE_BYTE) continue;
            if (id != g_dsml_id) fail_msg("special token %d allowed at step %zu", (int)id, i);
            bool after_lt = (tl >= 1 && text[tl - 1] == '<') || (tl >= 2 && !memcmp(text + tl - 2, "</", 2));
            if (!after_lt) fail_msg("｜DSML｜ allowed at step %zu, after \"%.*s\"", i, (int)tl, text);
        }
        if (i == n) {
            ok = di_grammar_matcher_is_accepting(m) && gt_bit(fast, (uint32_t)g_eos_id);
            break;
        }
        ok = gt_bit(fast, (uint32_t)ids[i]) && di_grammar_matcher_advance_token(m, (uint32_t)ids[i]);
        char piece[256];
        int64_t k = di_tok_piece(g_tok, ids[i], true, piece, sizeof piece);
        if (k > 0 && tl + (size_t)k < sizeof text) memcpy(text + tl, piece, (size_t)k), tl += (size_t)k;
    }
    free(fast), free(slow);
    di_grammar_matcher_free(m);
    return ok;
}

/* text tokenized with ｜DSML｜ as the special token (special) or as text. */
static bool walk_text(const di_grammar *g, const char *text, bool special) {
    di_tok_ids ids = {0};
    di_error err;
    assert_int_equal(di_tok_encode(g_tok, text, strlen(text), false, special, &ids, &err), DI_OK);
    bool ok = walk_ids(g, ids.data, ids.n);
    di_tok_ids_free(&ids);
    return ok;
}

/* The output part of a call block in prompt: after the last opening tag
 * (which the prompt for a required call ends with) through the closing
 * one. malloc'd. */
static char *block_of(const char *prompt, bool v41) {
    const char *open = v41 ? "<" DSML_TOK " calls>\n" : "<" DSML_TOK "tool_calls>\n";
    const char *close = v41 ? "</" DSML_TOK " calls>" : "</" DSML_TOK "tool_calls>";
    const char *end = NULL, *start = NULL;
    for (const char *p = prompt; (p = strstr(p, close)); p++) end = p;
    assert_non_null(end);
    for (const char *p = prompt; (p = strstr(p, open)) && p < end; p++) start = p + strlen(open);
    assert_non_null(start);
    size_t n = (size_t)(end - start) + strlen(close);
    char *s = malloc(n + 1);
    memcpy(s, start, n);
    s[n] = 0;
    return s;
}

/* The recipe's rendering of two parallel calls (render.json case 6: every
 * argument valid under its tool's schema, in schema order), V4 and V4.1. */
static void test_accepts_recipe_rendered_calls(void **state) {
    (void)state;
    char path[4096];
    json_error_t je;
    json_t *doc = json_load_file(di_test_path(path, sizeof path, "tests/data/golden/dsml/render.json"), 0, &je);
    if (!doc) fail_msg("%s: %s", path, je.text);
    json_t *cs = json_array_get(json_object_get(doc, "cases"), 6);
    json_t *tools = json_object_get(json_object_get(cs, "conversation"), "tools");
    for (int v41 = 0; v41 < 2; v41++) {
        const char *prompt = json_string_value(json_object_get(json_object_get(cs, v41 ? "v41" : "v4"), "prompt"));
        assert_non_null(prompt);
        char *block = block_of(prompt, v41);
        assert_non_null(strstr(block, "name=\"search\""));
        di_grammar *g = compile(tools, v41, true);
        assert_true(walk_text(g, block, true));
        /* the same characters as text are not the special token */
        assert_false(walk_text(g, block, false));
        di_grammar_free(g);
        /* one call only: the second is refused */
        g = compile(tools, v41, false);
        assert_false(walk_text(g, block, true));
        di_grammar_free(g);
        free(block);
    }
    json_decref(doc);
}

static const char TOOLS[] =
    "[{\"name\": \"get_weather\", \"parameters\": {\"type\": \"object\", \"properties\": {"
    "\"city\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 14},"
    "\"unit\": {\"type\": \"string\", \"enum\": [\"celsius\", \"fahrenheit\"]}, \"detail\": {\"type\": \"boolean\"}},"
    "\"required\": [\"city\"]}},"
    "{\"name\": \"search\", \"parameters\": {\"type\": \"object\", \"properties\": {\"query\": {\"type\": \"string\"},"
    "\"tags\": {\"type\": \"array\", \"items\": {\"type\": \"string\"}}, \"mode\": {\"anyOf\": [{\"type\": \"string\","
    "\"pattern\": \"^[a-z]+$\"}, {\"type\": \"integer\"}]}, \"since\": {\"type\": [\"string\", \"null\"]}},"
    "\"required\": [\"query\"], \"additionalProperties\": false}},"
    "{\"name\": \"now\", \"parameters\": {\"type\": \"object\", \"properties\": {}, \"additionalProperties\": false}},"
    "{\"name\": \"note\", \"parameters\": {\"type\": \"object\"}},"
    "{\"name\": \"ping\", \"parameters\": null}]";

static const struct {
    const char *name, *args;
    bool valid;
} CALLS[] = {
    {"get_weather", "{\"city\": \"Paris\"}", true},
    {"get_weather", "{\"city\": \"Z\\u00fcrich <b> \\\"q\\\"\\n2\", \"days\": 3, \"unit\": \"celsius\", \"detail\": true}", true},
    {"get_weather", "{\"city\": \"Oslo\", \"detail\": false}", true},
    {"search", "{\"query\": \"a\", \"tags\": [\"x\", \"y\"], \"mode\": \"fast\", \"since\": null}", true},
    {"search", "{\"query\": \"a\", \"mode\": 7, \"since\": \"2020\"}", true},
    {"now", "{}", true},
    {"note", "{}", true},
    {"note", "{\"text\": \"hi\", \"n\": [1, {\"b\": null}]}", true},
    {"ping", "{}", true},
    {"get_wether", "{\"city\": \"Paris\"}", false},             /* no such tool */
    {"get_weather", "{\"days\": 3}", false},                      /* city is required */
    {"get_weather", "{\"city\": \"Paris\", \"unit\": \"kelvin\"}", false},
    {"get_weather", "{\"city\": \"Paris\", \"days\": 0}", false}, /* minimum 1 */
    {"get_weather", "{\"city\": \"Paris\", \"days\": 15}", false},
    {"get_weather", "{\"city\": \"Paris\", \"days\": \"3\"}", false}, /* a string for an integer */
    {"get_weather", "{\"city\": 5}", false},
    {"get_weather", "{\"days\": 3, \"city\": \"Paris\"}", false}, /* not in schema order */
    {"get_weather", "{\"city\": \"Paris\", \"wind\": 1}", false}, /* not a listed property */
    {"search", "{\"query\": \"a\", \"mode\": \"Fast\"}", false},  /* pattern */
    {"search", "{\"query\": \"a\", \"mode\": 1.5}", false},
    {"now", "{\"a\": 1}", false},
    {"ping", "{\"a\": 1}", false},
};

/* The block our renderer (equal to the recipe's) writes for one call, as a
 * byte string with the special token spelled DI_GRAMMAR_SPECIAL_BYTE-first. */
static char *rendered_call(const char *name, const char *args, bool v41, size_t *len) {
    json_t *conv = json_pack("{s:[{s:s, s:s}, {s:s, s:s, s:[{s:s, s:s, s:{s:s, s:s}}]}], s:b}", "messages", "role",
                             "user", "content", "q", "role", "assistant", "content", "", "tool_calls", "id", "c1",
                             "type", "function", "function", "name", name, "arguments", args, "thinking", false);
    di_dsml_conv *c;
    di_error err;
    assert_int_equal(di_dsml_conv_from_json(conv, &c, &err), DI_OK);
    json_decref(conv);
    di_dsml_prompt p;
    assert_int_equal(di_dsml_render(c, v41 ? DI_DSML_V41 : DI_DSML_V4, &p, &err), DI_OK);
    di_dsml_conv_free(c);
    /* special ranges: ｜DSML｜ gets the special byte in front */
    char *out = malloc(2 * p.len + 1);
    size_t n = 0, r = 0;
    for (size_t i = 0; i < p.len; i++) {
        while (r < p.n_ranges && p.ranges[r][1] <= i) r++;
        if (r < p.n_ranges && p.ranges[r][0] == i && !memcmp(p.text + i, DSML_TOK, strlen(DSML_TOK)))
            out[n++] = (char)DI_GRAMMAR_SPECIAL_BYTE;
        out[n++] = p.text[i];
    }
    out[n] = 0;
    di_dsml_prompt_free(&p);
    const char *open = v41 ? "<\xff" DSML_TOK " calls>\n" : "<\xff" DSML_TOK "tool_calls>\n";
    const char *close = v41 ? "</\xff" DSML_TOK " calls>" : "</\xff" DSML_TOK "tool_calls>";
    char *a = strstr(out, open), *b = strstr(out, close);
    assert_non_null(a);
    assert_non_null(b);
    a += strlen(open);
    *len = (size_t)(b - a) + strlen(close);
    memmove(out, a, *len);
    out[*len] = 0;
    return out;
}

static void test_calls_follow_the_schemas(void **state) {
    (void)state;
    json_t *tools = json_loads(TOOLS, 0, NULL);
    assert_non_null(tools);
    for (int v41 = 0; v41 < 2; v41++) {
        di_grammar *g = compile(tools, v41, true);
        for (size_t i = 0; i < sizeof CALLS / sizeof CALLS[0]; i++) {
            size_t n;
            char *s = rendered_call(CALLS[i].name, CALLS[i].args, v41, &n);
            bool got = gt_accepts(g, s, n);
            if (got != CALLS[i].valid)
                fail_msg("v4%s %s(%s): %s, want %s\n%s", v41 ? ".1" : "", CALLS[i].name, CALLS[i].args,
                         got ? "accepted" : "rejected", CALLS[i].valid ? "accepted" : "rejected", s);
            /* without the special byte (plain characters) nothing passes */
            char *plain = malloc(n + 1);
            size_t k = 0;
            for (size_t j = 0; j < n; j++)
                if ((unsigned char)s[j] != DI_GRAMMAR_SPECIAL_BYTE) plain[k++] = s[j];
            assert_false(gt_accepts(g, plain, k));
            free(plain);
            free(s);
        }
        di_grammar_free(g);
    }
    json_decref(tools);
}

/* A named function: the grammar holds only that tool. */
static void test_named_tool_only(void **state) {
    (void)state;
    json_t *all = json_loads(TOOLS, 0, NULL), *one = json_array();
    json_array_append(one, json_array_get(all, 2)); /* now */
    di_grammar *g = compile(one, true, true);
    size_t n;
    char *s = rendered_call("now", "{}", true, &n);
    assert_true(gt_accepts(g, s, n));
    free(s);
    s = rendered_call("get_weather", "{\"city\": \"Paris\"}", true, &n);
    assert_false(gt_accepts(g, s, n));
    free(s);
    /* the empty block and text after the block are refused */
    assert_false(gt_accepts_str(g, "</\xff" DSML_TOK " calls>"));
    s = rendered_call("now", "{}", true, &n);
    char *more = malloc(n + 3);
    memcpy(more, s, n);
    memcpy(more + n, "hi", 3);
    assert_false(gt_accepts(g, more, n + 2));
    free(more), free(s);
    di_grammar_free(g);
    json_decref(one), json_decref(all);
}

static void test_bad_specs_are_errors(void **state) {
    (void)state;
    static const char *const BAD[] = {
        "not json",
        "{\"syntax\": \"xml\", \"tools\": [{\"name\": \"a\"}]}",
        "{\"syntax\": \"dsml_v41\", \"tools\": []}",
        "{\"syntax\": \"dsml_v41\", \"tools\": [{\"name\": \"a\"}], \"parallel\": 1}",
        "{\"syntax\": \"dsml_v41\", \"tools\": [{\"name\": 5}]}",
        "{\"syntax\": \"dsml_v41\", \"tools\": [{\"name\": \"a\\\"b\"}]}",
        "{\"syntax\": \"dsml_v41\", \"tools\": [{\"name\": \"a\", \"parameters\": 5}]}",
        "{\"syntax\": \"dsml_v41\", \"tools\": [{\"name\": \"a\", \"parameters\": {\"type\": \"object\", "
        "\"properties\": {\"x\": {}}, \"required\": [\"y\"]}}]}",
        "{\"syntax\": \"dsml_v41\", \"tools\": [{\"name\": \"a\", \"parameters\": {\"type\": \"object\", "
        "\"properties\": {\"x>\": {}}, \"required\": [\"x>\"]}}]}",
        "{\"syntax\": \"dsml_v41\", \"tools\": [{\"name\": \"a\", \"parameters\": {\"type\": \"object\", "
        "\"properties\": {\"x\": {\"type\": \"integer\", \"minimum\": 5, \"maximum\": 1}}, \"required\": [\"x\"]}}]}",
    };
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        di_grammar *g = NULL;
        di_error err = {0};
        di_status st = di_grammar_compile_tool_calls(BAD[i], strlen(BAD[i]), NULL, &g, &err);
        if (st == DI_OK) fail_msg("accepted: %s", BAD[i]);
        assert_null(g);
        assert_true(err.msg[0] != 0);
    }
}

/* Vocabulary rules for named special tokens. */
static void test_named_tokens_in_vocab(void **state) {
    (void)state;
    const uint8_t *b[3] = {(const uint8_t *)"<", (const uint8_t *)"\xff" "X", (const uint8_t *)"\xff"};
    uint32_t l[3] = {1, 2, 1};
    uint8_t f[3] = {DI_GRAMMAR_TOKEN_NORMAL, DI_GRAMMAR_TOKEN_NAMED, DI_GRAMMAR_TOKEN_NORMAL};
    di_grammar_vocab *v;
    di_error err;
    assert_int_equal(di_grammar_vocab_create(3, b, l, f, &v, &err), DI_OK);
    /* an EBNF grammar (code points) never reaches a named token */
    di_grammar *g = gt_ebnf("root ::= \"<\" [^a]*");
    di_grammar_matcher *m;
    assert_int_equal(di_grammar_matcher_create(g, v, &m, &err), DI_OK);
    uint32_t mask[1];
    assert_true(di_grammar_matcher_advance_token(m, 0));
    assert_int_equal(di_grammar_matcher_fill_mask(m, mask, 1, &err), DI_OK);
    assert_int_equal(mask[0] & 6u, 0);
    di_grammar_matcher_free(m);
    di_grammar_free(g);
    di_grammar_vocab_free(v);
    /* a named token must be the special byte + text */
    const uint8_t *bad[1] = {(const uint8_t *)"<x>"};
    uint32_t bl[1] = {3};
    uint8_t bf[1] = {DI_GRAMMAR_TOKEN_NAMED};
    assert_int_equal(di_grammar_vocab_create(1, bad, bl, bf, &v, &err), DI_ERR_INVALID_ARG);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_accepts_recipe_rendered_calls),
        cmocka_unit_test(test_calls_follow_the_schemas),
        cmocka_unit_test(test_named_tool_only),
        cmocka_unit_test(test_bad_specs_are_errors),
        cmocka_unit_test(test_named_tokens_in_vocab),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
