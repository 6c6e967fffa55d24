/* base: status messages, checked allocation, file mapping. */
#include "test_util.h"

#include "base/alloc.h"
#include "base/mapped_file.h"
#include "base/status.h"

#include <string.h>

static void error_set_formats_message_and_returns_code(void **state) {
    (void)state;
    di_error err;
    di_status s = di_error_set(&err, DI_ERR_FORMAT, "field '%s': %d", "x", 7);
    assert_int_equal(s, DI_ERR_FORMAT);
    assert_int_equal(err.code, DI_ERR_FORMAT);
    assert_string_equal(err.msg, "field 'x': 7");
    di_error_prefix(&err, "%s: ", "f.gguf");
    assert_string_equal(err.msg, "f.gguf: field 'x': 7");
}

static void error_set_tolerates_null_and_truncates(void **state) {
    (void)state;
    assert_int_equal(di_error_set(NULL, DI_ERR_IO, "x"), DI_ERR_IO);
    di_error err;
    char big[2000];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = 0;
    di_error_set(&err, DI_ERR_IO, "%s", big);
    assert_int_equal(strlen(err.msg), sizeof err.msg - 1);
}

static void status_names_are_distinct(void **state) {
    (void)state;
    for (int a = DI_OK; a <= DI_ERR_INTERNAL; a++)
        for (int b = a + 1; b <= DI_ERR_INTERNAL; b++)
            assert_string_not_equal(di_status_name(a), di_status_name(b));
}

static void alloc_rejects_overflowing_sizes(void **state) {
    (void)state;
    assert_null(di_malloc_array(SIZE_MAX / 2, 4));
    assert_null(di_realloc_array(NULL, SIZE_MAX / 2, 4));
    uint64_t r;
    assert_true(di_mul_overflow_u64(UINT64_MAX, 2, &r));
    assert_false(di_add_overflow_u64(1, 2, &r));
    assert_int_equal(r, 3);
}

static void mapped_file_reports_missing_file(void **state) {
    (void)state;
    di_mapped_file f;
    di_error err;
    assert_int_equal(di_mapped_file_open("/nonexistent/x.gguf", &f, &err), DI_ERR_IO);
    assert_non_null(strstr(err.msg, "/nonexistent/x.gguf"));
    assert_int_equal(di_mapped_file_open("/", &f, &err), DI_ERR_IO);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(error_set_formats_message_and_returns_code),
        cmocka_unit_test(error_set_tolerates_null_and_truncates),
        cmocka_unit_test(status_names_are_distinct),
        cmocka_unit_test(alloc_rejects_overflowing_sizes),
        cmocka_unit_test(mapped_file_reports_missing_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
