/* What the library does with a JSON Schema the grammar cannot fully
 * enforce (issue 28): the caller chooses the policy per request with
 * di_constraint.lenient, the same switch the server's `strict` and the
 * CLI's --strict set. Lenient (what the front ends send by default)
 * compiles and reports what it dropped through di_engine_check_constraint;
 * not lenient refuses it naming it, at check and at submit; an
 * unsatisfiable schema is refused under both. */
#include "test_util.h"

#include "deepinfer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *UNKNOWN_FORMAT =
    "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\",\"format\":\"x-made-up\"}},"
    "\"required\":[\"id\"]}";

static di_engine *open_engine(void) {
    di_engine_params p = di_engine_params_default();
    p.model_path = di_test_default_model();
    p.n_threads = 1;
    p.n_ctx = 256;
    p.kv_tokens = 1024;
    di_engine *e = NULL;
    di_error err;
    assert_int_equal(di_engine_create(&p, &e, &err), DI_OK);
    return e;
}

/* Keeps the request's finish reason (user: a di_finish). */
static int on_event(const di_event *ev) {
    if (ev->finish != DI_FINISH_REASON_NONE) *(di_finish *)ev->user = ev->finish;
    return 0;
}

static void unknown_format_is_reported_when_lenient_and_refused_when_strict(void **state) {
    (void)state;
    if (!di_test_default_model()) skip();
    di_engine *e = open_engine();
    char notes[512];
    di_error err = {0};
    di_constraint c = {DI_CONSTRAINT_JSON_SCHEMA, UNKNOWN_FORMAT, false, true};
    assert_int_equal(di_engine_check_constraint(e, &c, notes, sizeof notes, &err), DI_OK);
    assert_string_equal(notes, "'format' 'x-made-up' at #/id");

    /* the request runs under the lenient grammar */
    di_request r;
    memset(&r, 0, sizeof r);
    r.text = "An id as JSON:";
    r.max_tokens = 4;
    r.sampling = di_sampling_params_default();
    r.constraint = c;
    r.on_event = on_event;
    di_finish fin = DI_FINISH_REASON_NONE;
    r.user = &fin;
    assert_int_equal(di_engine_submit(e, &r, NULL, &err), DI_OK);
    assert_int_equal(di_engine_run(e, &err), DI_OK);
    assert_true(fin == DI_FINISH_REASON_LENGTH || fin == DI_FINISH_REASON_STOP);

    c.lenient = false;
    assert_int_equal(di_engine_check_constraint(e, &c, notes, sizeof notes, &err), DI_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "'format' 'x-made-up' is not enforced"));
    assert_string_equal(notes, "");
    r.constraint = c;
    assert_int_equal(di_engine_submit(e, &r, NULL, &err), DI_ERR_UNSUPPORTED);

    /* an enforced schema has nothing to report */
    c = (di_constraint){DI_CONSTRAINT_JSON_SCHEMA, "{\"type\":\"string\",\"format\":\"date\"}", false, true};
    assert_int_equal(di_engine_check_constraint(e, &c, notes, sizeof notes, &err), DI_OK);
    assert_string_equal(notes, "");
    di_engine_free(e);
}

static void unsatisfiable_schema_is_refused_under_both_policies(void **state) {
    (void)state;
    if (!di_test_default_model()) skip();
    di_engine *e = open_engine();
    char notes[512];
    di_error err = {0};
    for (int lenient = 0; lenient < 2; lenient++) {
        di_constraint c = {DI_CONSTRAINT_JSON_SCHEMA, "{\"type\":\"integer\",\"minimum\":10,\"maximum\":5}", false,
                           lenient != 0};
        assert_int_equal(di_engine_check_constraint(e, &c, notes, sizeof notes, &err), DI_ERR_FORMAT);
        assert_non_null(strstr(err.msg, "matches nothing"));
    }
    di_engine_free(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(unknown_format_is_reported_when_lenient_and_refused_when_strict),
        cmocka_unit_test(unsatisfiable_schema_is_refused_under_both_policies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
