/* text/dsml: DeepSeek V4 / V4.1 conversation rendering and encoding against
 * deepseek-recipe goldens (tests/data/golden/dsml/render.json, made by
 * scripts/gen_goldens_dsml.py): prompt bytes, special-token ranges and ids
 * equal for every case; plus the recipe's JSON number layout and hostile
 * conversations (clear errors, no crash). */
#include "test_util.h"

#include "text/dsml.h"

#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static json_t *load_golden(void) {
    char path[4096];
    json_error_t je;
    json_t *doc = json_load_file(di_test_path(path, sizeof path, "tests/data/golden/dsml/render.json"), 0, &je);
    if (!doc) fail_msg("%s: %s", path, je.text);
    return doc;
}

static di_tokenizer *load_tok(void) {
    char path[4096];
    di_error err = {0};
    di_tokenizer *t = NULL;
    if (di_tok_load(di_test_path(path, sizeof path, "tests/data/golden/dsml/tokenizer.json"), &t, &err))
        fail_msg("%s: %s", path, err.msg);
    return t;
}

/* Where two byte strings first differ, for the failure message. */
static size_t first_diff(const char *a, size_t na, const char *b, size_t nb) {
    size_t i = 0;
    while (i < na && i < nb && a[i] == b[i]) i++;
    return i;
}

static int check_one(di_tokenizer *t, const di_dsml_conv *c, di_dsml_version v, const json_t *want, size_t ci) {
    const char *vn = v == DI_DSML_V4 ? "v4" : "v41";
    di_dsml_prompt p;
    di_error err = {0};
    if (json_object_get(want, "error")) {
        print_error("case %zu %s: the recipe refuses (%s); we rendered it\n", ci, vn,
                    json_string_value(json_object_get(want, "error")));
        return 1;
    }
    if (di_dsml_render(c, v, &p, &err)) {
        print_error("case %zu %s: %s\n", ci, vn, err.msg);
        return 1;
    }
    int bad = 0;
    const json_t *wp = json_object_get(want, "prompt");
    const char *ws = json_string_value(wp);
    size_t wn = json_string_length(wp);
    if (p.len != wn || memcmp(p.text, ws, wn)) {
        size_t d = first_diff(p.text, p.len, ws, wn);
        size_t from = d > 60 ? d - 60 : 0;
        print_error("case %zu %s: prompt differs at byte %zu\n  ours: %.*s|%.60s\n  want: %.*s|%.60s\n", ci, vn, d,
                    (int)(d - from), p.text + from, p.text + d, (int)(d - from), ws + from, ws + d);
        bad = 1;
    }
    const json_t *wr = json_object_get(want, "special_ranges");
    bool ranges_ok = json_array_size(wr) == p.n_ranges;
    for (size_t i = 0; ranges_ok && i < p.n_ranges; i++) {
        const json_t *r = json_array_get(wr, i);
        ranges_ok = (size_t)json_integer_value(json_array_get(r, 0)) == p.ranges[i][0] &&
                    (size_t)json_integer_value(json_array_get(r, 1)) == p.ranges[i][1];
    }
    if (!bad && !ranges_ok) {
        print_error("case %zu %s: special ranges differ (%zu vs %zu)\n", ci, vn, p.n_ranges, json_array_size(wr));
        bad = 1;
    }
    di_tok_ids ids = {0};
    if (!bad && di_dsml_encode(t, &p, &ids, &err)) {
        print_error("case %zu %s: encode: %s\n", ci, vn, err.msg);
        bad = 1;
    }
    const json_t *wi = json_object_get(want, "ids");
    if (!bad) {
        bool ids_ok = json_array_size(wi) == ids.n;
        for (size_t i = 0; ids_ok && i < ids.n; i++) ids_ok = json_integer_value(json_array_get(wi, i)) == ids.data[i];
        if (!ids_ok) {
            print_error("case %zu %s: ids differ (%zu vs %zu)\n", ci, vn, ids.n, json_array_size(wi));
            bad = 1;
        }
    }
    di_tok_ids_free(&ids);
    di_dsml_prompt_free(&p);
    return bad;
}

static void render_and_encode_equal_recipe(void **state) {
    (void)state;
    json_t *doc = load_golden();
    di_tokenizer *t = load_tok();
    const json_t *cases = json_object_get(doc, "cases");
    assert_true(json_array_size(cases) >= 100);
    int bad = 0;
    for (size_t i = 0; i < json_array_size(cases); i++) {
        const json_t *cs = json_array_get(cases, i);
        di_dsml_conv *c = NULL;
        di_error err = {0};
        if (di_dsml_conv_from_json(json_object_get(cs, "conversation"), &c, &err)) {
            print_error("case %zu: conversation refused: %s\n", i, err.msg);
            bad++;
            continue;
        }
        bad += check_one(t, c, DI_DSML_V4, json_object_get(cs, "v4"), i);
        bad += check_one(t, c, DI_DSML_V41, json_object_get(cs, "v41"), i);
        di_dsml_conv_free(c);
    }
    di_tok_free(t);
    json_decref(doc);
    assert_int_equal(bad, 0);
}

/* The recipe's printing of JSON numbers, from its own prompts: V4.1 as
 * Python's repr, V4 in ryu's layout with "e+". */
static void json_numbers_print_like_recipe(void **state) {
    (void)state;
    static const struct {
        const char *in, *v41, *v4;
    } V[] = {
        {"[0.1, 1e20, 1.0, -0.0, 2.5e-8, 1e16, 1e15, 0.0001, 0.00001, 1e-6, 123.456, 5, -7]",
         "[0.1, 1e+20, 1.0, -0.0, 2.5e-08, 1e+16, 1000000000000000.0, 0.0001, 1e-05, 1e-06, 123.456, 5, -7]",
         "[0.1, 1e+20, 1.0, -0.0, 2.5e-8, 1e+16, 1000000000000000.0, 0.0001, 0.00001, 1e-6, 123.456, 5, -7]"},
        {"{\"b\": [true, false, null], \"a\": \"\\u0001\\n\\\"é\"}", "{\"b\": [true, false, null], \"a\": \"\\u0001\\n\\\"é\"}",
         "{\"b\": [true, false, null], \"a\": \"\\u0001\\n\\\"é\"}"},
        {"[1.7976931348623157e308, 5e-324]", "[1.7976931348623157e+308, 5e-324]", "[1.7976931348623157e+308, 5e-324]"},
        {"[]", "[]", "[]"},
    };
    for (size_t i = 0; i < sizeof V / sizeof V[0]; i++) {
        json_t *v = json_loads(V[i].in, JSON_DECODE_ANY, NULL);
        assert_non_null(v);
        char *s = di_dsml_json_dumps(v, DI_DSML_V41);
        assert_string_equal(s, V[i].v41);
        free(s);
        s = di_dsml_json_dumps(v, DI_DSML_V4);
        assert_string_equal(s, V[i].v4);
        free(s);
        json_decref(v);
    }
}

static di_status conv_from_text(const char *text, di_error *err) {
    json_t *root = json_loads(text, 0, NULL);
    assert_non_null(root);
    di_dsml_conv *c = NULL;
    di_status s = di_dsml_conv_from_json(root, &c, err);
    if (!s) {
        di_dsml_prompt p;
        assert_int_equal(di_dsml_render(c, DI_DSML_V41, &p, err), DI_OK);
        di_dsml_prompt_free(&p);
    }
    di_dsml_conv_free(c);
    json_decref(root);
    return s;
}

static void hostile_conversations_are_refused(void **state) {
    (void)state;
    /* The regression corpus: every file a conversation that must be refused. */
    char dir[4096];
    di_test_path(dir, sizeof dir, "tests/data/malformed/dsml");
    struct dirent **list = NULL;
    int n = scandir(dir, &list, NULL, alphasort), files = 0;
    assert_true(n > 0);
    for (int i = 0; i < n; i++) {
        const char *name = list[i]->d_name;
        size_t nl = strlen(name);
        if (nl > 5 && !strcmp(name + nl - 5, ".json")) {
            char path[4096 + 256 + 8];
            snprintf(path, sizeof path, "%s/%s", dir, name);
            char *text = di_test_read_file(path, NULL);
            assert_non_null(text);
            di_error err = {0};
            di_status s = conv_from_text(text, &err);
            if (s == DI_OK) fail_msg("accepted: %s", name);
            assert_true(err.msg[0] != '\0');
            free(text);
            files++;
        }
        free(list[i]);
    }
    free(list);
    print_message("malformed/dsml: %d conversations refused\n", files);
    assert_true(files >= 25);
    /* 10,000 tools: past DI_DSML_MAX_TOOLS. */
    json_t *root = json_object(), *tools = json_array();
    for (int i = 0; i < 10000; i++) {
        char name[32];
        snprintf(name, sizeof name, "tool_%d", i);
        json_array_append_new(tools, json_pack("{s:s, s:{s:s}}", "type", "function", "function", "name", name));
    }
    json_object_set_new(root, "tools", tools);
    di_dsml_conv *c = NULL;
    di_error err = {0};
    assert_int_equal(di_dsml_conv_from_json(root, &c, &err), DI_ERR_RANGE);
    assert_null(c);
    json_decref(root);
}

/* A 10 MB tool result renders (no quadratic work, no limit of ours). */
static void large_tool_result_renders(void **state) {
    (void)state;
#ifdef DI_SANITIZE_BUILD
    const size_t n = 1u << 20;
#else
    const size_t n = 10u << 20;
#endif
    char *big = malloc(n + 1);
    memset(big, 'x', n);
    big[n] = '\0';
    json_t *root = json_pack("{s:[{s:s},{s:s,s:s,s:s}]}", "messages", "role", "user", "role", "tool", "content", big,
                             "tool_call_id", "c1");
    free(big);
    di_dsml_conv *c = NULL;
    di_error err = {0};
    assert_int_equal(di_dsml_conv_from_json(root, &c, &err), DI_OK);
    di_dsml_prompt p;
    assert_int_equal(di_dsml_render(c, DI_DSML_V4, &p, &err), DI_OK);
    assert_true(p.len > n);
    di_dsml_prompt_free(&p);
    di_dsml_conv_free(c);
    json_decref(root);
}

static void encode_refuses_unknown_special_token(void **state) {
    (void)state;
    di_tokenizer *t = load_tok();
    char text[] = "a<｜nope｜>b";
    size_t ranges[1][2] = {{1, sizeof text - 2}};
    di_dsml_prompt p = {.text = text, .len = sizeof text - 1, .ranges = ranges, .n_ranges = 1};
    di_tok_ids ids = {0};
    di_error err = {0};
    assert_int_equal(di_dsml_encode(t, &p, &ids, &err), DI_ERR_NOT_FOUND);
    ranges[0][0] = 5;
    ranges[0][1] = 2;
    assert_int_equal(di_dsml_encode(t, &p, &ids, &err), DI_ERR_INVALID_ARG);
    di_tok_ids_free(&ids);
    di_tok_free(t);
}

/* Plain messages (what the engine passes for a V4.1 chat) render as the
 * chat goldens of scripts/gen_goldens_chat_v41.py (the recipe, thinking off). */
static void plain_messages_match_chat_goldens(void **state) {
    (void)state;
    char path[4096];
    json_t *doc = json_load_file(di_test_path(path, sizeof path, "tests/data/golden/chat/deepseek_v41.json"), 0, NULL);
    assert_non_null(doc);
    const char *bos = json_string_value(json_object_get(doc, "bos"));
    const json_t *cases = json_object_get(doc, "cases");
    assert_true(json_array_size(cases) > 0);
    for (size_t i = 0; i < json_array_size(cases); i++) {
        const json_t *cs = json_array_get(cases, i), *msgs = json_object_get(cs, "messages");
        size_t n = json_array_size(msgs);
        const char *roles[16], *contents[16];
        assert_true(n <= 16);
        for (size_t k = 0; k < n; k++) {
            roles[k] = json_string_value(json_object_get(json_array_get(msgs, k), "role"));
            contents[k] = json_string_value(json_object_get(json_array_get(msgs, k), "content"));
        }
        di_dsml_conv *c = NULL;
        di_error err = {0};
        assert_int_equal(di_dsml_conv_from_messages(roles, contents, n, false, &c, &err), DI_OK);
        di_dsml_prompt p;
        assert_int_equal(di_dsml_render(c, DI_DSML_V41, &p, &err), DI_OK);
        size_t nb = strlen(bos);
        assert_true(p.len >= nb && !memcmp(p.text, bos, nb));
        assert_string_equal(p.text + nb, json_string_value(json_object_get(cs, "prompt")));
        di_dsml_prompt_free(&p);
        di_dsml_conv_free(c);
    }
    const char *bad_roles[] = {"developer"}, *bad_contents[] = {"x"};
    di_dsml_conv *c = NULL;
    di_error err = {0};
    assert_int_equal(di_dsml_conv_from_messages(bad_roles, bad_contents, 1, false, &c, &err), DI_ERR_FORMAT);
    json_decref(doc);
}

/* di_tok_chat_encode, the one call the engine makes for chat messages,
 * picks the rendering by the chat kind: DI_CHAT_DEEPSEEK41 gives exactly
 * the conversation renderer's ids (render + encode above) when the
 * tokenizer has its special tokens, the template's text encoded with
 * special parsing when it lacks them (tiny checkpoints), and every other
 * kind the template's; DI_CHAT_UNKNOWN is the tokenizer's own kind. */
static void chat_encode_picks_renderer_by_kind(void **state) {
    (void)state;
    char path[4096];
    json_t *doc = json_load_file(di_test_path(path, sizeof path, "tests/data/golden/chat/deepseek_v41.json"), 0, NULL);
    assert_non_null(doc);
    di_tokenizer *special = load_tok(), *plain = NULL;
    di_error err = {0};
    if (di_tok_load(di_test_path(path, sizeof path, "tests/data/golden/deepseek_v41/tiny/tokenizer.json"), &plain,
                    &err))
        fail_msg("%s: %s", path, err.msg);
    const json_t *cases = json_object_get(doc, "cases");
    for (size_t i = 0; i < json_array_size(cases); i++) {
        const json_t *msgs = json_object_get(json_array_get(cases, i), "messages");
        size_t n = json_array_size(msgs);
        assert_true(n <= 16);
        di_chat_msg m[16];
        const char *roles[16], *contents[16];
        for (size_t k = 0; k < n; k++) {
            roles[k] = m[k].role = json_string_value(json_object_get(json_array_get(msgs, k), "role"));
            contents[k] = m[k].content = json_string_value(json_object_get(json_array_get(msgs, k), "content"));
        }
        /* with the special tokens: the renderer's ids */
        di_dsml_conv *c = NULL;
        di_dsml_prompt p;
        di_tok_ids want = {0}, got = {0};
        assert_int_equal(di_dsml_conv_from_messages(roles, contents, n, false, &c, &err), DI_OK);
        assert_int_equal(di_dsml_render(c, DI_DSML_V41, &p, &err), DI_OK);
        assert_int_equal(di_dsml_encode(special, &p, &want, &err), DI_OK);
        assert_int_equal(di_tok_chat_encode(special, DI_CHAT_DEEPSEEK41, m, n, &got, &err), DI_OK);
        assert_int_equal(got.n, want.n);
        assert_memory_equal(got.data, want.data, want.n * sizeof *want.data);
        di_dsml_prompt_free(&p);
        di_dsml_conv_free(c);
        /* without them, and for another kind: the template's text */
        const struct { di_tokenizer *t; di_chat_kind kind; } text_cases[] = {
            {plain, DI_CHAT_DEEPSEEK41}, {special, DI_CHAT_CHATML}, {plain, DI_CHAT_UNKNOWN}};
        for (size_t k = 0; k < sizeof text_cases / sizeof text_cases[0]; k++) {
            di_tokenizer *t = text_cases[k].t;
            char *text = NULL;
            di_tok_ids_free(&want);
            di_tok_ids_free(&got);
            assert_int_equal(di_tok_chat_apply(t, text_cases[k].kind, m, n, true, &text, NULL, &err), DI_OK);
            assert_int_equal(di_tok_encode(t, text, strlen(text), false, true, &want, &err), DI_OK);
            assert_int_equal(di_tok_chat_encode(t, text_cases[k].kind, m, n, &got, &err), DI_OK);
            assert_int_equal(got.n, want.n);
            assert_memory_equal(got.data, want.data, want.n * sizeof *want.data);
            free(text);
        }
        di_tok_ids_free(&want);
        di_tok_ids_free(&got);
    }
    /* a message without content is refused, never read: by the
     * conversation (checked before any special token is looked up) or by
     * the template path */
    di_chat_msg bad[] = {{"user", NULL}};
    di_tok_ids ids = {0};
    assert_int_equal(di_tok_chat_encode(plain, DI_CHAT_DEEPSEEK41, bad, 1, &ids, &err), DI_ERR_FORMAT);
    assert_int_equal(di_tok_chat_encode(special, DI_CHAT_DEEPSEEK41, bad, 1, &ids, &err), DI_ERR_FORMAT);
    assert_int_equal(di_tok_chat_encode(special, DI_CHAT_CHATML, bad, 1, &ids, &err), DI_ERR_INVALID_ARG);
    di_tok_ids_free(&ids);
    di_tok_free(plain);
    di_tok_free(special);
    json_decref(doc);
}

/* Feeds out[0..n) cut at the given points (ascending, within (0, n)). */
static di_dsml_parser *parse_pieces(const char *model, bool thinking, const char *out, size_t n, const size_t *cuts,
                                    size_t n_cuts) {
    di_dsml_parser *p = NULL;
    di_error err = {0};
    assert_int_equal(di_dsml_parser_create(strcmp(model, "v4") ? DI_DSML_V41 : DI_DSML_V4, thinking, true, &p, &err),
                     DI_OK);
    size_t at = 0;
    for (size_t k = 0; k <= n_cuts; k++) {
        size_t end = k < n_cuts ? cuts[k] : n;
        assert_int_equal(di_dsml_parser_push(p, out + at, end - at, &err), DI_OK);
        at = end;
    }
    assert_int_equal(di_dsml_parser_finish(p, &err), DI_OK);
    return p;
}

static bool str_eq(const json_t *want, const char *got, size_t n) {
    if (json_is_null(want) || !want) return got == NULL;
    return got && json_string_length(want) == n && !memcmp(json_string_value(want), got, n);
}

static int check_message(const di_dsml_parser *p, const json_t *want, size_t ci, const char *how) {
    const di_dsml_message *m = di_dsml_parser_message(p);
    const json_t *calls = json_object_get(want, "tool_calls");
    bool ok = str_eq(json_object_get(want, "content"), m->content, m->content_len) &&
              str_eq(json_object_get(want, "reasoning_content"), m->reasoning, m->reasoning_len) &&
              json_array_size(calls) == m->n_calls;
    for (size_t k = 0; ok && k < m->n_calls; k++) {
        const json_t *c = json_array_get(calls, k);
        ok = str_eq(json_object_get(c, "name"), m->calls[k].name, m->calls[k].name_len) &&
             str_eq(json_object_get(c, "arguments"), m->calls[k].arguments, m->calls[k].arguments_len);
    }
    const char *finish = m->n_calls ? "tool_calls" : "stop";
    ok = ok && !strcmp(finish, json_string_value(json_object_get(want, "finish_reason")));
    if (!ok) {
        char *w = json_dumps(want, JSON_ENSURE_ASCII);
        print_error("parse case %zu (%s): got content \"%s\" reasoning \"%s\" %zu calls%s%s; want %s\n", ci, how,
                    m->content, m->reasoning ? m->reasoning : "(null)", m->n_calls, m->n_calls ? " args " : "",
                    m->n_calls ? m->calls[0].arguments : "", w);
        free(w);
    }
    return !ok;
}

/* The recipe's accumulated message for each recorded output, whatever the
 * split: whole, one byte at a time, and random pieces. */
static void parse_equals_recipe_at_any_split(void **state) {
    (void)state;
    char path[4096];
    json_error_t je;
    json_t *doc = json_load_file(di_test_path(path, sizeof path, "tests/data/golden/dsml/parse.json"), 0, &je);
    if (!doc) fail_msg("%s: %s", path, je.text);
    const json_t *cases = json_object_get(doc, "cases");
    assert_true(json_array_size(cases) >= 40);
    di_test_rng rng = {0x5eed};
    int bad = 0, known = 0;
    for (size_t i = 0; i < json_array_size(cases); i++) {
        const json_t *cs = json_array_get(cases, i), *want = json_object_get(cs, "message");
        if (json_object_get(cs, "known_difference")) { /* documented in the golden script */
            known++;
            continue;
        }
        const char *model = json_string_value(json_object_get(cs, "model"));
        bool thinking = json_is_true(json_object_get(cs, "thinking"));
        const char *out = json_string_value(json_object_get(cs, "output"));
        size_t n = json_string_length(json_object_get(cs, "output"));
        di_dsml_parser *p = parse_pieces(model, thinking, out, n, NULL, 0);
        bad += check_message(p, want, i, "whole");
        di_dsml_parser_free(p);
        size_t *cuts = malloc((n ? n : 1) * sizeof *cuts);
        for (size_t k = 1; k < n; k++) cuts[k - 1] = k;
        p = parse_pieces(model, thinking, out, n, cuts, n ? n - 1 : 0);
        bad += check_message(p, want, i, "bytes");
        di_dsml_parser_free(p);
        for (int r = 0; r < 4 && n > 1; r++) {
            size_t nc = 0;
            for (size_t k = 1; k < n; k++)
                if (di_test_rand(&rng) % 5 == 0) cuts[nc++] = k;
            p = parse_pieces(model, thinking, out, n, cuts, nc);
            bad += check_message(p, want, i, "random");
            di_dsml_parser_free(p);
        }
        free(cuts);
    }
    print_message("parse: %d outputs skipped as known differences\n", known);
    assert_true(known <= 4);
    json_decref(doc);
    assert_int_equal(bad, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(render_and_encode_equal_recipe),
        cmocka_unit_test(json_numbers_print_like_recipe),
        cmocka_unit_test(hostile_conversations_are_refused),
        cmocka_unit_test(large_tool_result_renders),
        cmocka_unit_test(encode_refuses_unknown_special_token),
        cmocka_unit_test(plain_messages_match_chat_goldens),
        cmocka_unit_test(chat_encode_picks_renderer_by_kind),
        cmocka_unit_test(parse_equals_recipe_at_any_split),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
