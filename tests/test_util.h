/* Helpers shared by the test executables (cmocka). */
#ifndef DI_TEST_UTIL_H
#define DI_TEST_UTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

/* Repo root (DI_SRC, set by ctest; "." otherwise). */
const char *di_test_src_dir(void);
/* Writes "<repo>/<rel>" into buf (size bytes); returns buf. */
char *di_test_path(char *buf, size_t size, const char *rel);
/* Writes "<repo>/testdata/<rel>" (third-party data fetched by
 * scripts/fetch-testdata.sh, which `make test` runs); returns buf. */
char *di_test_data(char *buf, size_t size, const char *rel);
/* Path of the default model, or NULL when it has not been fetched. */
const char *di_test_default_model(void);
/* Reads a whole file into a malloc'd buffer (NUL-terminated); NULL on error. */
char *di_test_read_file(const char *path, size_t *size);

/* xorshift64* stream for deterministic random test data: a file keeps one
 * with a fixed seed, so its data is the same on every run. */
typedef struct di_test_rng {
    uint64_t s;
} di_test_rng;
uint32_t di_test_rand(di_test_rng *r);

#endif
