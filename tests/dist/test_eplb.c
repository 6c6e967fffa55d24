/* dist/eplb: DeepInfer's EPLB policy against policy.py's own placements
 * (tests/data/golden/eplb/cases.json, scripts/gen_goldens_eplb.py), the
 * window ring, moe_lb, and the local (one-process) transport. */
#include "test_util.h"

#include "dist/dist.h"
#include "dist/eplb.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int64_t *ints_of(json_t *a, int64_t *n) {
    *n = (int64_t)json_array_size(a);
    int64_t *v = malloc((size_t)(*n > 0 ? *n : 1) * sizeof *v);
    for (int64_t i = 0; i < *n; i++) v[i] = json_integer_value(json_array_get(a, (size_t)i));
    return v;
}

#define GET(o, k) ((int32_t)json_integer_value(json_object_get(o, k)))

static void rebalance_matches_deepinfer_policy(void **state) {
    (void)state;
    char path[4096];
    json_error_t je;
    json_t *root = json_load_file(di_test_path(path, sizeof path, "tests/data/golden/eplb/cases.json"), 0, &je);
    assert_non_null(root);
    json_t *cases = json_object_get(root, "cases");
    assert_true(json_array_size(cases) >= 50);
    size_t n_ok = 0;
    for (size_t ci = 0; ci < json_array_size(cases); ci++) {
        json_t *c = json_array_get(cases, ci);
        int32_t S = GET(c, "steps"), L = GET(c, "layers"), E = GET(c, "experts"), P = GET(c, "physical"),
                cap = GET(c, "local");
        int64_t nt, np, nl, nc;
        int64_t *tok = ints_of(json_object_get(c, "tokens"), &nt);
        int64_t *wp = ints_of(json_object_get(c, "physical_to_logical"), &np);
        int64_t *wl = ints_of(json_object_get(c, "logical_to_physical"), &nl);
        int64_t *wc = ints_of(json_object_get(c, "logical_count"), &nc);
        assert_int_equal(nt, (int64_t)S * L * E);
        int32_t *p2l = malloc((size_t)np * 4), *l2p = malloc((size_t)nl * 4), *cnt = malloc((size_t)nc * 4);
        di_error err;
        assert_int_equal(di_eplb_rebalance(tok, S, L, E, P, cap, p2l, l2p, cnt, &err), DI_OK);
        int same = 1;
        for (int64_t i = 0; i < np; i++) same &= p2l[i] == wp[i];
        for (int64_t i = 0; i < nl; i++) same &= l2p[i] == wl[i];
        for (int64_t i = 0; i < nc; i++) same &= cnt[i] == wc[i];
        if (!same)
            for (int64_t i = 0; i < np; i++)
                if (p2l[i] != wp[i]) {
                    printf("  first p2l difference at %lld: %d, policy.py %lld\n", (long long)i, p2l[i], (long long)wp[i]);
                    break;
                }
        if (!same)
            printf("case %zu (%s, %d steps, %d layers, %d experts, %d physical, %d per rank) differs\n", ci,
                   json_string_value(json_object_get(c, "kind")), S, L, E, P, cap);
        n_ok += (size_t)same;
        /* with the first rank's experts hot, the placement lowers the imbalance
         * of the window it was made from */
        int32_t *ip = malloc((size_t)np * 4), *il = malloc((size_t)nl * 4), *ic = malloc((size_t)nc * 4);
        di_eplb_initial(L, E, P, ip, il, ic);
        double before = di_eplb_moe_lb(tok, S, L, E, P, cap, ip, ic);
        double after = di_eplb_moe_lb(tok, S, L, E, P, cap, p2l, cnt);
        if (!strcmp(json_string_value(json_object_get(c, "kind")), "hot_rank") && P / cap > 1)
            assert_true(after < before);
        free(ip);
        free(il);
        free(ic);
        free(tok);
        free(wp);
        free(wl);
        free(wc);
        free(p2l);
        free(l2p);
        free(cnt);
    }
    assert_int_equal(n_ok, json_array_size(cases));
    json_decref(root);
}

static void initial_layout_is_deepinfers(void **state) {
    (void)state;
    int32_t p2l[10], l2p[8 * 3], cnt[8];
    di_eplb_initial(1, 8, 10, p2l, l2p, cnt);
    const int32_t want[10] = {0, 1, 2, 3, 4, 5, 6, 7, 0, 1};
    for (int i = 0; i < 10; i++) assert_int_equal(p2l[i], want[i]);
    assert_int_equal(cnt[0], 2);
    assert_int_equal(cnt[2], 1);
    assert_int_equal(l2p[0 * 3 + 1], 8);
    assert_int_equal(l2p[2 * 3 + 1], -1);
}

static void moe_lb_is_sum_max_over_sum_mean(void **state) {
    (void)state;
    /* 1 layer, 4 experts on 2 ranks (2 each): step 0 loads 6 | 0, step 1 2 | 2 */
    const int64_t tok[] = {3, 3, 0, 0, 1, 1, 1, 1};
    int32_t p2l[4], l2p[4], cnt[4];
    di_eplb_initial(1, 4, 4, p2l, l2p, cnt);
    double lb = di_eplb_moe_lb(tok, 2, 1, 4, 4, 2, p2l, cnt);
    assert_true(lb > (6.0 + 2.0) / (3.0 + 2.0) - 1e-12 && lb < (6.0 + 2.0) / (3.0 + 2.0) + 1e-12);
}

static void window_keeps_the_last_steps_oldest_first(void **state) {
    (void)state;
    di_eplb_window w;
    di_error err;
    assert_int_equal(di_eplb_window_init(&w, 3, 1, 2, &err), DI_OK);
    for (int s = 0; s < 5; s++) {
        w.current[0] = s;
        w.current[1] = 10 * s;
        di_eplb_window_push(&w);
        assert_int_equal(w.current[0], 0);
    }
    int64_t out[6];
    assert_int_equal(di_eplb_window_copy(&w, out), 3);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(out[2 * i], 2 + i);
        assert_int_equal(out[2 * i + 1], 10 * (2 + i));
    }
    di_eplb_window_free(&w);
}

static void rebalance_rejects_bad_shapes(void **state) {
    (void)state;
    int64_t tok[8] = {0};
    int32_t p2l[8], l2p[8], cnt[8];
    di_error err;
    assert_int_equal(di_eplb_rebalance(tok, 1, 1, 8, 6, 2, p2l, l2p, cnt, &err), DI_ERR_INVALID_ARG);
    assert_int_equal(di_eplb_rebalance(tok, 1, 1, 8, 8, 3, p2l, l2p, cnt, &err), DI_ERR_INVALID_ARG);
}

static void local_dist_is_a_group_of_one(void **state) {
    (void)state;
    di_dist *d;
    di_error err;
    assert_int_equal(di_dist_local_create(&d, &err), DI_OK);
    assert_int_equal(d->size, 1);
    const char msg[] = "hello";
    char got[8] = {0};
    int64_t sb = 5, rb = 5;
    assert_int_equal(di_dist_alltoallv(d, msg, &sb, got, &rb, &err), DI_OK);
    assert_string_equal(got, "hello");
    int64_t v = 7;
    assert_int_equal(di_dist_allreduce_i64(d, &v, 1, DI_DIST_MAX, &err), DI_OK);
    assert_int_equal(v, 7);
    void *all = NULL;
    int64_t lens[1];
    assert_int_equal(di_dist_gather_bytes(d, 0, msg, 5, &all, lens, &err), DI_OK);
    assert_int_equal(lens[0], 5);
    assert_memory_equal(all, msg, 5);
    free(all);
    di_dist_msg m = {.peer = 0, .send = 1, .buf = got, .bytes = 1};
    assert_int_not_equal(di_dist_p2p(d, &m, 1, &err), DI_OK);
    di_dist_free(d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(rebalance_matches_deepinfer_policy),
        cmocka_unit_test(initial_layout_is_deepinfers),
        cmocka_unit_test(moe_lb_is_sum_max_over_sum_mean),
        cmocka_unit_test(window_keeps_the_last_steps_oldest_first),
        cmocka_unit_test(rebalance_rejects_bad_shapes),
        cmocka_unit_test(local_dist_is_a_group_of_one),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
