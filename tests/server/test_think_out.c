/* server/think_out: a <think> reply split into reasoning_content and
 * content, whole and streamed at every split point (the deltas of any
 * split add up to the whole message); without an opening tag, or with
 * thinking off, everything is content. */
#include "test_util.h"

#include "server/think_out.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static char *field(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return v && json_is_string(v) ? strdup(json_string_value(v)) : NULL;
}

/* Feeds text split at cut (then the rest, final) and returns the
 * concatenated deltas of each side; whole gets the final message. */
static void run(const char *text, size_t cut, bool thinking, char **reason, char **content, json_t **whole) {
    srv_think_out *o = srv_think_out_new(thinking);
    assert_non_null(o);
    char rbuf[256] = "", cbuf[256] = "";
    size_t n = strlen(text);
    for (int step = 0; step < 2; step++) {
        const char *p = step ? text + cut : text;
        size_t len = step ? n - cut : cut;
        assert_true(srv_think_out_push(o, p, len, step == 1));
        json_t *d = srv_think_out_deltas(o), *x;
        size_t i;
        json_array_foreach(d, i, x) {
            json_t *rc = json_object_get(x, "reasoning_content"), *ct = json_object_get(x, "content");
            if (rc) strcat(rbuf, json_string_value(rc));
            if (ct) strcat(cbuf, json_string_value(ct));
        }
        json_decref(d);
    }
    *whole = srv_think_out_message(o);
    *reason = strdup(rbuf);
    *content = strdup(cbuf);
    srv_think_out_free(o);
}

static void reply_splits_at_the_tags_for_every_cut(void **state) {
    (void)state;
    static const struct { const char *text; bool thinking; const char *reason, *content; bool null_reason; } cases[] = {
        {"<think>\nLet me add.\n</think>\n\n4", true, "Let me add.\n", "4", false},
        {"<think>\n\n</think>\n\nHi there", true, "", "Hi there", false},
        {"No thought, just <think> text", true, "", "No thought, just <think> text", true},
        {"<thin", true, "", "<thin", true},                       /* a prefix that never became the tag */
        {"<think>unfinished </thi", true, "unfinished </thi", "", false}, /* ended inside the thought */
        {"<think>a</think>b", false, "", "<think>a</think>b", true}, /* thinking off: all content */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        size_t n = strlen(cases[c].text);
        for (size_t cut = 0; cut <= n; cut++) {
            char *r, *t;
            json_t *m;
            run(cases[c].text, cut, cases[c].thinking, &r, &t, &m);
            assert_string_equal(r, cases[c].reason);
            assert_string_equal(t, cases[c].content);
            char *mc = field(m, "content");
            assert_string_equal(mc, cases[c].content);
            json_t *mr = json_object_get(m, "reasoning_content");
            if (!cases[c].thinking) assert_null(mr);
            else if (cases[c].null_reason) assert_true(json_is_null(mr));
            else assert_string_equal(json_string_value(mr), cases[c].reason);
            free(mc);
            free(r);
            free(t);
            json_decref(m);
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(reply_splits_at_the_tags_for_every_cut),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
