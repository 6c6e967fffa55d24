/* Server internals without HTTP clients (those are in the pytest suite):
 * the UTF-8 repair behind every JSON string we emit, parameter checks, and
 * the lifecycle (create on a free port, shut down twice, free). */
#include "test_util.h"

#include "server/server_internal.h"

#include <stdlib.h>
#include <string.h>

static void check_string(const char *in, size_t n, const char *want) {
    json_t *j = srv_json_string(in, n);
    assert_non_null(j);
    assert_int_equal(json_string_length(j), strlen(want));
    assert_memory_equal(json_string_value(j), want, strlen(want));
    json_decref(j);
}

static void test_json_string_keeps_valid_utf8(void **state) {
    (void)state;
    check_string("h\xC3\xA9llo \xE2\x82\xAC \xF0\x9F\x98\x80", 15, "h\xC3\xA9llo \xE2\x82\xAC \xF0\x9F\x98\x80");
    check_string("", 0, "");
    check_string(NULL, 0, "");
}

static void test_json_string_replaces_invalid_bytes(void **state) {
    (void)state;
    /* A token that is half of a character, stray continuation bytes, an
     * overlong slash, a surrogate, past U+10FFFF, and an embedded NUL. */
    check_string("a\xE2\x82", 3, "a\xEF\xBF\xBD\xEF\xBF\xBD");
    check_string("\x80x\xBF", 3, "\xEF\xBF\xBDx\xEF\xBF\xBD");
    check_string("\xC0\xAF", 2, "\xEF\xBF\xBD\xEF\xBF\xBD");
    check_string("\xED\xA0\x80", 3, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
    check_string("\xF4\x90\x80\x80", 4, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
}

static void test_buf_grows_and_formats(void **state) {
    (void)state;
    srv_buf b = {0};
    for (int i = 0; i < 1000; i++) assert_true(srv_buf_printf(&b, "%d,", i));
    char big[2000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    assert_true(srv_buf_printf(&b, "%s", big)); /* longer than the stack buffer */
    assert_int_equal(b.data[b.len], '\0');
    assert_int_equal(strncmp(b.data, "0,1,2,", 6), 0);
    assert_int_equal(b.len, strlen(b.data));
    srv_buf_free(&b);
    assert_null(b.data);
}

static srv_head_verdict check_head(const char *h, size_t limit) {
    return srv_head_check(h, strlen(h), limit);
}

static void test_head_check_limit_is_exact(void **state) {
    (void)state;
    const char *h = "GET / HTTP/1.1\r\nHost: x\r\n\r\n"; /* 27 bytes */
    assert_int_equal(strlen(h), 27);
    srv_head_verdict v = check_head(h, 27);
    assert_int_equal(v.kind, SRV_HEAD_OK);
    assert_int_equal(v.head_bytes, 27);
    v = check_head(h, 26);
    assert_int_equal(v.kind, SRV_HEAD_REFUSE);
    assert_int_equal(v.status, 431);
    /* Not complete yet: more is needed while under the limit, refused past it. */
    assert_int_equal(check_head("GET / HTTP/1.1\r\nHost: x\r\n", 100).kind, SRV_HEAD_NEED_MORE);
    assert_int_equal(check_head("GET / HTTP/1.1\r\nHost: xxxxxxxxxxxxxxxx", 20).status, 431);
    /* Bare LF line ends and leading empty lines count too. */
    assert_int_equal(check_head("\r\nGET / HTTP/1.0\n\n", 100).kind, SRV_HEAD_OK);
    assert_int_equal(check_head("\r\nGET / HTTP/1.0\n\n", 100).head_bytes, 18);
    /* The body after the head is not looked at. */
    assert_int_equal(check_head("GET / HTTP/1.0\r\n\r\n\x01\x02 junk", 18).kind, SRV_HEAD_OK);
}

static void test_head_check_refuses_bad_heads(void **state) {
    (void)state;
    const char *bad400[] = {
        "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1e3\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: x\r\nContent-Length:\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 12345678901234567890\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-length: 3\r\n\r\n",
        "GET / HTTP/1.1\r\n\r\n",
        "GET /\r\nHost: x\r\n\r\n",
        "GET / HTTP/1.1 \r\nHost: x\r\n\r\n",
        "GET / HTTP/1.1\r\nHost x\r\n\r\n",
        "GET / HTTP/1.1\r\n: x\r\n\r\n",
        " GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof bad400 / sizeof bad400[0]; i++) {
        srv_head_verdict v = check_head(bad400[i], 4096);
        assert_int_equal(v.kind, SRV_HEAD_REFUSE);
        assert_int_equal(v.status, 400);
        assert_true(v.message[0]);
    }
    assert_int_equal(check_head("GET / HTTP/2.0\r\nHost: x\r\n\r\n", 4096).status, 505);
    assert_int_equal(check_head("GET / HTTP/1.1\r\nhOsT: x\r\n\tfolded\r\nContent-Length:  7 \r\n"
                                "content-length: 7\r\n\r\n", 4096).kind, SRV_HEAD_OK);
}

static di_engine *open_engine(void) {
    const char *model = di_test_default_model();
    if (!model) return NULL;
    di_engine_params p = di_engine_params_default();
    p.model_path = model;
    p.n_threads = 1;
    p.n_ctx = 256;
    di_engine *e = NULL;
    di_error err;
    assert_int_equal(di_engine_create(&p, &e, &err), DI_OK);
    return e;
}

static void test_create_rejects_bad_limits(void **state) {
    (void)state;
    di_server_params p = di_server_params_default();
    di_server *s = NULL;
    di_error err;
    assert_int_equal(di_server_create(NULL, &p, &s, &err), DI_ERR_INVALID_ARG);
    di_engine *e = open_engine();
    if (!e) skip();
    const char *fields[] = {"queue", "connections", "n", "body", "headers", "idle", "cors"};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        p = di_server_params_default();
        p.port = 0;
        switch (i) {
        case 0: p.max_queue = 0; break;
        case 1: p.max_connections = 0; break;
        case 2: p.max_n = 0; break;
        case 3: p.max_body_bytes = 0; break;
        case 4: p.max_header_bytes = 10; break;
        case 5: p.idle_timeout_s = 0; break;
        default: p.cors_origin = "https://a.example\r\nX-Evil: 1"; break;
        }
        assert_int_equal(di_server_create(e, &p, &s, &err), i == 6 ? DI_ERR_INVALID_ARG : DI_ERR_RANGE);
        assert_null(s);
    }
    di_engine_free(e);
}

static void test_lifecycle_on_a_free_port(void **state) {
    (void)state;
    di_engine *e = open_engine();
    if (!e) skip();
    di_server_params p = di_server_params_default();
    p.port = 0;
    p.api_key = "k";
    p.model_name = "m";
    di_server *s = NULL;
    di_error err;
    assert_int_equal(di_server_create(e, &p, &s, &err), DI_OK);
    assert_int_not_equal(di_server_port(s), 0);
    /* A second server cannot take the same port. */
    di_server *s2 = NULL;
    p.port = di_server_port(s);
    assert_int_equal(di_server_create(e, &p, &s2, &err), DI_ERR_IO);
    assert_null(s2);
    di_server_cancel_all(s);
    di_server_shutdown(s, 100);
    di_server_shutdown(s, 100); /* idempotent */
    di_server_free(s);
    /* Freed without an explicit shutdown. */
    p.port = 0;
    assert_int_equal(di_server_create(e, &p, &s, &err), DI_OK);
    di_server_free(s);
    di_server_free(NULL);
    di_engine_free(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_string_keeps_valid_utf8),
        cmocka_unit_test(test_json_string_replaces_invalid_bytes),
        cmocka_unit_test(test_buf_grows_and_formats),
        cmocka_unit_test(test_head_check_limit_is_exact),
        cmocka_unit_test(test_head_check_refuses_bad_heads),
        cmocka_unit_test(test_create_rejects_bad_limits),
        cmocka_unit_test(test_lifecycle_on_a_free_port),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
