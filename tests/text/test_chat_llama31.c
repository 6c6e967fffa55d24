/* text/chat_llama31: Llama 3.1's chat template with tools, against jinja2
 * rendering the real template text (tests/data/golden/chat/llama31_tools.json,
 * scripts/gen_goldens_llama31_tools.py): every prompt byte-equal, the
 * template's exceptions errors; the tiny GGUF's template is recognized and
 * plain chats through di_tok_chat_apply equal the golden too; the JSON
 * tool call of a reply is read back, other replies are not calls. */
#include "test_util.h"

#include "format/gguf.h"
#include "text/chat_llama31.h"
#include "text/tokenizer.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static json_t *golden(void) {
    char path[4096];
    json_error_t je;
    json_t *doc = json_load_file(di_test_path(path, sizeof path, "tests/data/golden/chat/llama31_tools.json"), 0, &je);
    if (!doc) fail_msg("%s: %s", path, je.text);
    return doc;
}

static void test_renders_as_the_template(void **state) {
    (void)state;
    json_t *doc = golden();
    size_t i, n_ok = 0, n_err = 0;
    json_t *c;
    json_array_foreach(json_object_get(doc, "cases"), i, c) {
        const char *name = json_string_value(json_object_get(c, "name"));
        json_t *tools = json_object_get(c, "tools");
        char *text = NULL;
        size_t len = 0;
        di_error err = {0};
        di_status st = di_chat_llama31_render(json_object_get(c, "messages"), json_is_null(tools) ? NULL : tools,
                                              json_is_true(json_object_get(c, "add_generation_prompt")),
                                              json_string_value(json_object_get(doc, "bos")), &text, &len, &err);
        const char *want_err = json_string_value(json_object_get(c, "error"));
        if (want_err) {
            if (st == DI_OK) fail_msg("%s: rendered, the template raises '%s'", name, want_err);
            assert_string_equal(err.msg, want_err);
            n_err++;
            continue;
        }
        if (st) fail_msg("%s: %s", name, err.msg);
        const char *want = json_string_value(json_object_get(c, "prompt"));
        if (strcmp(text, want)) {
            size_t at = 0;
            while (text[at] && text[at] == want[at]) at++;
            fail_msg("%s: differs at byte %zu:\n ours     %.160s\n template %.160s", name, at, text + at, want + at);
        }
        assert_int_equal(len, strlen(want));
        free(text);
        n_ok++;
    }
    assert_true(n_ok >= 10 && n_err >= 2);
    json_decref(doc);
}

/* The tiny GGUF ships the 3.1 template: recognized, and plain chats through
 * the tokenizer's apply equal the golden's plain cases. */
static void test_gguf_template_is_recognized(void **state) {
    (void)state;
    char path[4096];
    di_error err = {0};
    di_gguf *g = NULL;
    if (di_gguf_open(di_test_path(path, sizeof path, "tests/data/golden/chat/tiny_llama31.gguf"), &g, &err))
        fail_msg("%s: %s", path, err.msg);
    di_tokenizer *t = NULL;
    if (di_tok_load_gguf(g, &t, &err)) fail_msg("tokenizer: %s", err.msg);
    assert_int_equal(di_tok_chat_kind(t), DI_CHAT_LLAMA31);
    assert_int_equal(di_tok_chat_from_name("llama3.1"), DI_CHAT_LLAMA31);
    json_t *doc = golden();
    size_t i, n = 0;
    json_t *c;
    json_array_foreach(json_object_get(doc, "cases"), i, c) {
        if (strncmp(json_string_value(json_object_get(c, "name")), "plain", 5)) continue;
        json_t *msgs = json_object_get(c, "messages");
        di_chat_msg m[8];
        size_t k;
        json_t *e;
        json_array_foreach(msgs, k, e) m[k] = (di_chat_msg){json_string_value(json_object_get(e, "role")),
                                                            json_string_value(json_object_get(e, "content"))};
        char *text = NULL;
        assert_int_equal(di_tok_chat_apply(t, DI_CHAT_UNKNOWN, m, json_array_size(msgs),
                                           json_is_true(json_object_get(c, "add_generation_prompt")), &text, NULL, &err),
                         DI_OK);
        assert_string_equal(text, json_string_value(json_object_get(c, "prompt")));
        free(text);
        n++;
    }
    assert_int_equal(n, 3);
    json_decref(doc);
    di_tok_free(t);
    di_gguf_close(g);
}

static void test_reads_the_json_call(void **state) {
    (void)state;
    static const struct {
        const char *text;
        const char *name, *args; /* NULL: not a call */
    } C[] = {
        {"{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"days\": 2}}", "get_weather",
         "{\"city\":\"Paris\",\"days\":2}"},
        {"  \n<|python_tag|>{\"name\": \"now\", \"parameters\": {}}\n ", "now", "{}"},
        {"{\"name\": \"now\", \"arguments\": {\"a\": [1, null]}}", "now", "{\"a\":[1,null]}"},
        {"It is sunny.", NULL, NULL},
        {"{\"name\": \"now\", \"parameters\": {}} and more", NULL, NULL},
        {"{\"name\": \"now\"}", NULL, NULL},
        {"{\"name\": 5, \"parameters\": {}}", NULL, NULL},
        {"{\"name\": \"now\", \"parameters\": \"x\"}", NULL, NULL},
        {"{\"name\": \"now\", \"parameters\": {}, \"extra\": 1}", NULL, NULL},
        {"{\"name\": \"now\", \"parameters\": {", NULL, NULL},
        {"", NULL, NULL},
    };
    for (size_t i = 0; i < sizeof C / sizeof C[0]; i++) {
        char *name, *args;
        bool ok = di_chat_llama31_parse_call(C[i].text, strlen(C[i].text), &name, &args);
        if (ok != (C[i].name != NULL)) fail_msg("'%s': %s", C[i].text, ok ? "a call" : "not a call");
        if (ok) {
            assert_string_equal(name, C[i].name);
            assert_string_equal(args, C[i].args);
        }
        free(name), free(args);
    }
    assert_true(di_chat_llama31_may_be_call("", 0));
    assert_true(di_chat_llama31_may_be_call(" \n{", 3));
    assert_true(di_chat_llama31_may_be_call("<|pyth", 6));
    assert_false(di_chat_llama31_may_be_call(" Hi", 3));
    assert_false(di_chat_llama31_may_be_call("<b>", 3));
}

static void test_bad_input_is_an_error(void **state) {
    (void)state;
    char *text = NULL;
    di_error err = {0};
    json_t *bad = json_loads("[{\"content\": \"no role\"}]", 0, NULL), *obj = json_object();
    assert_int_equal(di_chat_llama31_render(bad, NULL, true, "", &text, NULL, &err), DI_ERR_FORMAT);
    assert_int_equal(di_chat_llama31_render(obj, NULL, true, "", &text, NULL, &err), DI_ERR_INVALID_ARG);
    json_t *nameless = json_loads("[{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", \"tool_calls\": "
                                  "[{\"function\": {\"arguments\": {}}}]}]", 0, NULL);
    assert_int_equal(di_chat_llama31_render(nameless, NULL, true, "", &text, NULL, &err), DI_ERR_FORMAT);
    assert_null(text);
    json_decref(bad), json_decref(obj), json_decref(nameless);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_renders_as_the_template),
        cmocka_unit_test(test_gguf_template_is_recognized),
        cmocka_unit_test(test_reads_the_json_call),
        cmocka_unit_test(test_bad_input_is_an_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
