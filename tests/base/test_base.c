/* base: status messages, checked allocation, file mapping. */
#include "test_util.h"

#include "base/alloc.h"
#include "base/base64.h"
#include "base/mapped_file.h"
#include "base/status.h"
#include "base/strbuf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* What a pre-touch reported: the calls in order. */
typedef struct touch_log {
    int n;
    uint64_t done[16], total[16];
} touch_log;

static void log_touch(uint64_t done, uint64_t total, void *user) {
    touch_log *l = user;
    if (l->n < 16) {
        l->done[l->n] = done;
        l->total[l->n] = total;
    }
    l->n++;
}

/* A mapped file of 2.5 chunks (sparse: nothing written, every page reads
 * as zero): (0, size), one report per chunk boundary, (size, size). */
static void mapped_pretouch_reports_every_chunk(void **state) {
    (void)state;
    char path[] = "/tmp/di_test_pretouch_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const size_t size = DI_PRETOUCH_CHUNK_BYTES * 2 + DI_PRETOUCH_CHUNK_BYTES / 2 + 7; /* not page-sized */
    assert_int_equal(ftruncate(fd, (off_t)size), 0);
    close(fd);
    di_mapped_file f;
    di_error err;
    assert_int_equal(di_mapped_file_open(path, &f, &err), DI_OK);
    unlink(path);
    touch_log l = {0};
    /* from an odd offset: the range need not start on a page */
    assert_true(di_mapped_pretouch(f.data + 3, size - 3, log_touch, &l));
    assert_int_equal(l.n, 4);
    assert_int_equal(l.done[0], 0);
    assert_int_equal(l.done[1], DI_PRETOUCH_CHUNK_BYTES);
    assert_int_equal(l.done[2], 2 * DI_PRETOUCH_CHUNK_BYTES);
    assert_int_equal(l.done[3], size - 3);
    for (int i = 0; i < 4; i++) assert_int_equal(l.total[i], size - 3);
    /* no callback: the same work, silently */
    assert_true(di_mapped_pretouch(f.data, size, NULL, NULL));
    di_mapped_file_close(&f);
}

/* Nothing to touch, or more than half of memory: false, no call. */
static void mapped_pretouch_declines_empty_and_huge(void **state) {
    (void)state;
    touch_log l = {0};
    uint8_t byte = 1;
    assert_false(di_mapped_pretouch(NULL, 0, log_touch, &l));
    assert_false(di_mapped_pretouch(&byte, 0, log_touch, &l));
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    assert_true(pages > 0 && page > 0);
    /* never dereferenced: the size check comes first */
    assert_false(di_mapped_pretouch(&byte, (size_t)pages * (size_t)page, log_touch, &l));
    assert_int_equal(l.n, 0);
    assert_true(di_mapped_pretouch(&byte, 1, log_touch, &l));
    assert_int_equal(l.n, 2); /* (0, 1) and (1, 1) */
    assert_int_equal(l.done[1], 1);
}

/* The release hint keeps contents, on a file mapping and on heap memory
 * (where MADV_DONTNEED would have zeroed them). */
static void release_hint_keeps_contents(void **state) {
    (void)state;
    const size_t size = 5 * 4096 + 123;
    char path[] = "/tmp/di_test_release_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    uint8_t *buf = malloc(size);
    assert_non_null(buf);
    for (size_t i = 0; i < size; i++) buf[i] = (uint8_t)(i * 131 + 7);
    assert_int_equal(write(fd, buf, size), (ssize_t)size);
    close(fd);
    di_mapped_file f;
    di_error err;
    assert_int_equal(di_mapped_file_open(path, &f, &err), DI_OK);
    unlink(path);
    assert_memory_equal(f.data, buf, size);
    di_memory_release_hint(f.data + 100, size - 200);
    assert_memory_equal(f.data, buf, size);
    uint8_t *heap = malloc(size);
    assert_non_null(heap);
    memcpy(heap, buf, size);
    di_memory_release_hint(heap, size);
    assert_memory_equal(heap, buf, size);
    di_memory_release_hint(NULL, 0);
    di_memory_release_hint(heap, 1); /* no whole page: nothing */
    free(heap);
    free(buf);
    di_mapped_file_close(&f);
}

static void strbuf_appends_grows_and_stays_terminated(void **state) {
    (void)state;
    di_strbuf b = {0};
    assert_true(di_strbuf_put(&b, "", 0));
    assert_null(b.data); /* nothing put: nothing allocated */
    assert_true(di_strbuf_puts(&b, "ab"));
    di_strbuf_sink(&b, "cd", 1);
    assert_string_equal(b.data, "abc");
    char big[1000];
    memset(big, 'x', sizeof big);
    for (int i = 0; i < 5; i++) assert_true(di_strbuf_put(&b, big, sizeof big));
    assert_int_equal(b.len, 5003);
    assert_true(b.cap > b.len && b.data[b.len] == '\0' && b.data[3] == 'x');
    b.failed = true; /* sticky: a failed builder takes nothing more */
    assert_false(di_strbuf_puts(&b, "y"));
    assert_int_equal(b.len, 5003);
    di_strbuf_free(&b);
    assert_null(b.data);
    assert_false(b.failed);
}

static void base64_decodes_runs_and_names_the_bad_byte(void **state) {
    (void)state;
    uint8_t out[16];
    size_t n, bad = 99;
    assert_true(di_base64_decode("aGVsbG8", 7, out, &n, &bad)); /* "hello" without its '=' */
    assert_int_equal(n, 5);
    assert_memory_equal(out, "hello", 5);
    assert_true(di_base64_decode("+/+/", 4, out, &n, &bad));
    assert_int_equal(n, 3);
    assert_int_equal(out[0], 0xFB);
    assert_int_equal(out[1], 0xFF);
    assert_int_equal(out[2], 0xBF);
    assert_false(di_base64_decode("aGV-bG8", 7, out, &n, &bad));
    assert_int_equal(bad, 3);
    assert_true(di_base64_decode("", 0, out, &n, &bad));
    assert_int_equal(n, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(error_set_formats_message_and_returns_code),
        cmocka_unit_test(error_set_tolerates_null_and_truncates),
        cmocka_unit_test(status_names_are_distinct),
        cmocka_unit_test(strbuf_appends_grows_and_stays_terminated),
        cmocka_unit_test(base64_decodes_runs_and_names_the_bad_byte),
        cmocka_unit_test(alloc_rejects_overflowing_sizes),
        cmocka_unit_test(mapped_file_reports_missing_file),
        cmocka_unit_test(mapped_pretouch_reports_every_chunk),
        cmocka_unit_test(mapped_pretouch_declines_empty_and_huge),
        cmocka_unit_test(release_hint_keeps_contents),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
