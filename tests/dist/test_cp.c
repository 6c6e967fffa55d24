/* dist/cp: DeepInfer's zigzag context-parallel split against
 * prepare_cp_mirror_ref's own output (tests/data/golden/cp/zigzag.json,
 * scripts/gen_goldens_cp.py), and the balance it is for. */
#include "test_util.h"

#include "dist/cp.h"

#include <jansson.h>
#include <stdlib.h>

static void zigzag_matches_prepare_cp_mirror_ref(void **state) {
    (void)state;
    char path[4096];
    json_error_t je;
    json_t *root = json_load_file(di_test_path(path, sizeof path, "tests/data/golden/cp/zigzag.json"), 0, &je);
    assert_non_null(root);
    json_t *cases = json_object_get(root, "cases");
    assert_true(json_array_size(cases) >= 70);
    for (size_t ci = 0; ci < json_array_size(cases); ci++) {
        json_t *c = json_array_get(cases, ci), *jl = json_object_get(c, "seq_lens");
        int32_t cp = (int32_t)json_integer_value(json_object_get(c, "cp")), n = (int32_t)json_array_size(jl);
        int32_t lens[16], total = 0;
        for (int32_t i = 0; i < n; i++) total += lens[i] = (int32_t)json_integer_value(json_array_get(jl, (size_t)i));
        int64_t per = di_cp_rows_per_rank(lens, n, cp);
        int32_t *mirror = malloc((size_t)per * sizeof *mirror), *rev = malloc((size_t)total * sizeof *rev);
        for (int32_t r = 0; r < cp; r++) {
            json_t *wm = json_array_get(json_object_get(c, "mirror"), (size_t)r);
            assert_int_equal((int64_t)json_array_size(wm), per);
            di_cp_zigzag(lens, n, cp, r, mirror, r == 0 ? rev : NULL);
            for (int64_t i = 0; i < per; i++) assert_int_equal(mirror[i], json_integer_value(json_array_get(wm, (size_t)i)));
        }
        json_t *wr = json_object_get(c, "reverse");
        for (int32_t i = 0; i < total; i++) assert_int_equal(rev[i], json_integer_value(json_array_get(wr, (size_t)i)));
        free(mirror);
        free(rev);
    }
    json_decref(root);
}

/* Causal work of a row is its position + 1: the zigzag gives every rank
 * nearly the same sum (here within one piece's worth of rows). */
static void zigzag_balances_causal_work(void **state) {
    (void)state;
    const int32_t lens[1] = {4096}, cp = 4;
    int64_t per = di_cp_rows_per_rank(lens, 1, cp), work[4] = {0};
    int32_t *mirror = malloc((size_t)per * sizeof *mirror);
    for (int32_t r = 0; r < cp; r++) {
        di_cp_zigzag(lens, 1, cp, r, mirror, NULL);
        for (int64_t i = 0; i < per; i++)
            if (mirror[i] >= 0) work[r] += mirror[i] + 1;
    }
    for (int32_t r = 1; r < cp; r++) assert_true(llabs(work[r] - work[0]) <= 4096 / (2 * cp));
    free(mirror);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(zigzag_matches_prepare_cp_mirror_ref),
        cmocka_unit_test(zigzag_balances_causal_work),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
