/* grammar: replays the inputs the fuzzer once crashed on
 * (tests/data/fuzz-regress/grammar) through the same harness. */
#include "test_util.h"

#include "../../fuzz/fuzz_grammar.c"

#include <dirent.h>
#include <stdio.h>

static void fuzz_regressions_replay_cleanly(void **state) {
    (void)state;
    char dir[1024];
    di_test_path(dir, sizeof dir, "tests/data/fuzz-regress/grammar");
    LLVMFuzzerInitialize(NULL, NULL);
    DIR *d = opendir(dir);
    if (!d) skip();
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        size_t size;
        char *buf = di_test_read_file(path, &size);
        assert_non_null(buf);
        LLVMFuzzerTestOneInput((const uint8_t *)buf, size);
        free(buf);
        n++;
    }
    closedir(d);
    di_grammar_vocab_free(g_vocab);
    printf("replayed %d inputs\n", n);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(fuzz_regressions_replay_cleanly)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
