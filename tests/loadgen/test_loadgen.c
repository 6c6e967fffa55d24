/* The network-free parts of `deepinfer bench serve` (src/loadgen/): the SSE
 * parser on every split of a stream and on hostile ones, percentiles
 * against numpy's definition, length distributions, the seeded workload
 * and the record's counts, goodput and cost. */
#include "test_util.h"

#include "loadgen/loadgen.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* cmocka 1.1 has no assert_double_equal */
#define assert_near(a, b, eps) assert_true(fabs((double)(a) - (double)(b)) <= (eps))

typedef struct events {
    char got[16][128];
    int n;
} events;

static int collect(void *user, const char *data, size_t n) {
    events *e = user;
    if (e->n < 16) {
        snprintf(e->got[e->n], sizeof e->got[0], "%.*s", (int)n, data);
        e->n++;
    }
    return 0;
}

/* CRLF, CR and LF line ends, comments, other fields, multi-line data,
 * no space after the colon, an event without data (not delivered). */
static const char STREAM[] = ": keep-alive\r\n"
                             "event: x\r\ndata: {\"a\":1}\r\n\r\n"
                             "data:two\rdata: lines\r\r"
                             "id: 7\n\n"
                             "data: [DONE]\n\n";

static void check_stream_events(const events *e) {
    assert_int_equal(e->n, 3);
    assert_string_equal(e->got[0], "{\"a\":1}");
    assert_string_equal(e->got[1], "two\nlines");
    assert_string_equal(e->got[2], "[DONE]");
}

static void test_sse_events_same_for_every_split(void **state) {
    (void)state;
    size_t n = sizeof STREAM - 1;
    for (size_t cut1 = 0; cut1 <= n; cut1++) {
        for (size_t cut2 = cut1; cut2 <= n; cut2 += 7) {
            di_sse_parser p;
            di_sse_init(&p, 4096);
            events e = {0};
            di_error err;
            assert_int_equal(di_sse_feed(&p, STREAM, cut1, collect, &e, &err), DI_OK);
            assert_int_equal(di_sse_feed(&p, STREAM + cut1, cut2 - cut1, collect, &e, &err), DI_OK);
            assert_int_equal(di_sse_feed(&p, STREAM + cut2, n - cut2, collect, &e, &err), DI_OK);
            check_stream_events(&e);
            assert_false(di_sse_pending(&p));
            di_sse_free(&p);
        }
    }
}

static void test_sse_byte_at_a_time(void **state) {
    (void)state;
    di_sse_parser p;
    di_sse_init(&p, 4096);
    events e = {0};
    di_error err;
    for (size_t i = 0; i < sizeof STREAM - 1; i++) assert_int_equal(di_sse_feed(&p, STREAM + i, 1, collect, &e, &err), DI_OK);
    check_stream_events(&e);
    di_sse_free(&p);
}

static void test_sse_unfinished_event_is_pending(void **state) {
    (void)state;
    di_sse_parser p;
    di_sse_init(&p, 4096);
    events e = {0};
    di_error err;
    assert_int_equal(di_sse_feed(&p, "data: {\"half", 12, collect, &e, &err), DI_OK);
    assert_int_equal(e.n, 0);
    assert_true(di_sse_pending(&p));
    assert_int_equal(di_sse_feed(&p, "\n", 1, collect, &e, &err), DI_OK);
    assert_true(di_sse_pending(&p)); /* data seen, no blank line yet */
    di_sse_free(&p);
}

static void test_sse_refuses_endless_line(void **state) {
    (void)state;
    di_sse_parser p;
    di_sse_init(&p, 64);
    char junk[100];
    memset(junk, 'x', sizeof junk);
    di_error err;
    assert_int_equal(di_sse_feed(&p, junk, sizeof junk, collect, &(events){0}, &err), DI_ERR_FULL);
    di_sse_free(&p);
    /* many data lines that add up past the limit */
    di_sse_init(&p, 64);
    di_status st = DI_OK;
    for (int i = 0; i < 20 && !st; i++) st = di_sse_feed(&p, "data: 0123456789\n", 17, collect, &(events){0}, &err);
    assert_int_equal(st, DI_ERR_FULL);
    di_sse_free(&p);
}

static int stop_now(void *user, const char *data, size_t n) {
    (void)user, (void)data, (void)n;
    return 1;
}

static void test_sse_consumer_can_stop(void **state) {
    (void)state;
    di_sse_parser p;
    di_sse_init(&p, 4096);
    di_error err;
    assert_int_equal(di_sse_feed(&p, STREAM, sizeof STREAM - 1, stop_now, NULL, &err), DI_ERR_CANCELLED);
    di_sse_free(&p);
}

/* numpy.percentile([1..10], q) = 5.5, 9.55, 9.91 (linear method). */
static void test_percentile_matches_numpy_linear(void **state) {
    (void)state;
    double x[10] = {10, 3, 1, 7, 2, 9, 4, 8, 6, 5};
    di_lg_summary s;
    di_error err;
    assert_int_equal(di_lg_summarize(x, 10, &s, &err), DI_OK);
    assert_int_equal(s.n, 10);
    assert_near(s.p50, 5.5, 1e-12);
    assert_near(s.p95, 9.55, 1e-12);
    assert_near(s.p99, 9.91, 1e-12);
    assert_near(s.mean, 5.5, 1e-12);
    assert_near(s.max, 10, 0);
    assert_near(x[0], 10, 0); /* input untouched */
    double one = 4;
    assert_int_equal(di_lg_summarize(&one, 1, &s, &err), DI_OK);
    assert_near(s.p99, 4, 0);
    assert_int_equal(di_lg_summarize(NULL, 0, &s, &err), DI_OK);
    assert_int_equal(s.n, 0);
}

static void test_length_specs_parse_and_refuse(void **state) {
    (void)state;
    di_lg_len d;
    di_error err;
    assert_int_equal(di_lg_len_parse("fixed:64", &d, &err), DI_OK);
    assert_int_equal(d.kind, DI_LG_LEN_FIXED);
    assert_int_equal(di_lg_len_parse("uniform:8:32", &d, &err), DI_OK);
    assert_int_equal(di_lg_len_parse("lognormal:100:400", &d, &err), DI_OK);
    const char *bad[] = {"", "fixed", "fixed:0", "fixed:x", "fixed:1e9", "uniform:9:8", "uniform:1",
                         "lognormal:100:50", "lognormal:10:1000", "normal:1:2", "fixed:3:4", "fixed:nan"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_not_equal(di_lg_len_parse(bad[i], &d, &err), DI_OK);
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* The lognormal's sample mean and p99 come out near the asked ones; uniform
 * stays inside its bounds and reaches both. */
static void test_lengths_have_asked_moments(void **state) {
    (void)state;
    enum { N = 100000 };
    int64_t *v = malloc(N * sizeof *v);
    assert_non_null(v);
    di_lg_len d;
    di_error err;
    assert_int_equal(di_lg_len_parse("lognormal:200:800", &d, &err), DI_OK);
    uint64_t rng = 42;
    double sum = 0;
    for (int i = 0; i < N; i++) sum += (double)(v[i] = di_lg_len_sample(&d, &rng));
    qsort(v, N, sizeof *v, cmp_i64);
    assert_true(fabs(sum / N - 200) < 200 * 0.03);
    assert_true(fabs((double)v[N * 99 / 100] - 800) < 800 * 0.05);
    assert_int_equal(di_lg_len_parse("uniform:3:5", &d, &err), DI_OK);
    int seen[8] = {0};
    for (int i = 0; i < 1000; i++) {
        int64_t x = di_lg_len_sample(&d, &rng);
        assert_true(x >= 3 && x <= 5);
        seen[x]++;
    }
    assert_true(seen[3] && seen[4] && seen[5]);
    free(v);
}

static void test_workload_spec_refuses_bad_keys(void **state) {
    (void)state;
    di_lg_workload w;
    di_error err;
    const char *bad[] = {"turns=0", "turns=2.5", "shared=1.5", "nope=1", "turns", "input=fixed:0", "system=-1",
                         "prompts="};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_not_equal(di_lg_workload_parse(bad[i], &w, &err), DI_OK);
        di_lg_workload_free(&w);
    }
    assert_int_equal(di_lg_workload_parse("turns=3,system=10,shared=0.5,input=uniform:2:4,output=fixed:8,seed=9", &w,
                                          &err),
                     DI_OK);
    assert_int_equal(w.turns, 3);
    assert_int_equal(w.seed, 9);
    di_lg_workload_free(&w);
}

static char *turn_text(json_t *body, size_t i) {
    return strdup(json_string_value(json_object_get(json_array_get(json_object_get(body, "messages"), i), "content")));
}

/* Same seed: the same user turns; history re-sent; the shared system prompt
 * is one text for every conversation with shared=1, distinct with 0. */
static void test_conversations_are_seeded_and_resend_history(void **state) {
    (void)state;
    di_lg_workload w;
    di_error err;
    assert_int_equal(di_lg_workload_parse("turns=2,system=12,shared=1,input=fixed:5,output=fixed:7", &w, &err), DI_OK);
    di_lg_conv a, b, c;
    json_t *ba, *bb, *bc;
    assert_int_equal(di_lg_conv_start(&w, 3, &a, &err), DI_OK);
    assert_int_equal(di_lg_conv_start(&w, 3, &b, &err), DI_OK);
    assert_int_equal(di_lg_conv_start(&w, 4, &c, &err), DI_OK);
    assert_int_equal(di_lg_conv_next(&w, &a, &ba, &err), DI_OK);
    assert_int_equal(di_lg_conv_next(&w, &b, &bb, &err), DI_OK);
    assert_int_equal(di_lg_conv_next(&w, &c, &bc, &err), DI_OK);
    char *sa = json_dumps(ba, JSON_SORT_KEYS), *sb = json_dumps(bb, JSON_SORT_KEYS);
    assert_string_equal(sa, sb);
    free(sa), free(sb);
    assert_int_equal(json_integer_value(json_object_get(ba, "max_tokens")), 7);
    char *sys_a = turn_text(ba, 0), *sys_c = turn_text(bc, 0), *user_a = turn_text(ba, 1), *user_c = turn_text(bc, 1);
    assert_string_equal(sys_a, sys_c);      /* shared system prompt */
    assert_string_not_equal(user_a, user_c); /* different conversations */
    json_decref(ba), json_decref(bb), json_decref(bc);
    assert_int_equal(di_lg_conv_reply(&a, "the reply", &err), DI_OK);
    assert_true(di_lg_conv_more(&w, &a));
    assert_int_equal(di_lg_conv_next(&w, &a, &ba, &err), DI_OK);
    json_t *m = json_object_get(ba, "messages");
    assert_int_equal(json_array_size(m), 4); /* system, user, assistant, user */
    char *again = turn_text(ba, 1), *reply = turn_text(ba, 2);
    assert_string_equal(again, user_a);
    assert_string_equal(reply, "the reply");
    json_decref(ba);
    assert_false(di_lg_conv_more(&w, &a));
    assert_int_not_equal(di_lg_conv_next(&w, &a, &ba, &err), DI_OK);
    free(sys_a), free(sys_c), free(user_a), free(user_c), free(again), free(reply);
    di_lg_conv_free(&a), di_lg_conv_free(&b), di_lg_conv_free(&c);
    di_lg_workload_free(&w);

    assert_int_equal(di_lg_workload_parse("system=12,shared=0", &w, &err), DI_OK);
    assert_int_equal(di_lg_conv_start(&w, 0, &a, &err), DI_OK);
    assert_int_equal(di_lg_conv_start(&w, 1, &b, &err), DI_OK);
    assert_int_equal(di_lg_conv_next(&w, &a, &ba, &err), DI_OK);
    assert_int_equal(di_lg_conv_next(&w, &b, &bb, &err), DI_OK);
    sys_a = turn_text(ba, 0), sys_c = turn_text(bb, 0);
    assert_string_not_equal(sys_a, sys_c);
    free(sys_a), free(sys_c);
    json_decref(ba), json_decref(bb);
    di_lg_conv_free(&a), di_lg_conv_free(&b);
    di_lg_workload_free(&w);
}

static void test_prompt_file_lines(void **state) {
    (void)state;
    char path[] = "/tmp/di-loadgen-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fputs("{\"prompt\": \"first\"}\n\n\"second\"\n{\"messages\": [{\"role\": \"user\", \"content\": \"third\"}]}\n", f);
    fclose(f);
    di_lg_workload w;
    di_error err;
    char spec[64];
    snprintf(spec, sizeof spec, "prompts=%s,turns=2", path);
    assert_int_equal(di_lg_workload_parse(spec, &w, &err), DI_OK);
    assert_int_equal(di_lg_workload_load(&w, &err), DI_OK);
    assert_int_equal(w.n_prompts, 3);
    di_lg_conv c;
    json_t *b;
    assert_int_equal(di_lg_conv_start(&w, 1, &c, &err), DI_OK);
    assert_int_equal(di_lg_conv_next(&w, &c, &b, &err), DI_OK);
    char *t = turn_text(b, 0); /* conversation 1, turn 0 -> line (1 * 2 + 0) % 3 = 2 */
    assert_string_equal(t, "third");
    free(t);
    json_decref(b);
    di_lg_conv_free(&c);
    di_lg_workload_free(&w);
    f = fopen(path, "w");
    fputs("{\"prompt\": \"ok\"}\n{\"prompt\": 5}\n", f);
    fclose(f);
    assert_int_equal(di_lg_workload_parse(spec, &w, &err), DI_OK);
    assert_int_not_equal(di_lg_workload_load(&w, &err), DI_OK);
    assert_non_null(strstr(err.msg, "line 2"));
    di_lg_workload_free(&w);
    remove(path);
}

static di_lg_sample ok_sample(double ttft, double tpot, int64_t out) {
    di_lg_sample s = {0};
    s.outcome = DI_LG_OK;
    s.ttft_ms = ttft;
    s.tpot_ms = tpot;
    s.e2e_ms = ttft + tpot * (double)(out - 1);
    s.output_tokens = out;
    s.prompt_tokens = 100;
    s.cached_tokens = 50;
    return s;
}

/* Counts add up, goodput counts only requests within both SLO bounds, cost
 * is the machine's price over the run divided by delivered tokens. */
static void test_record_counts_goodput_and_cost(void **state) {
    (void)state;
    di_lg_sample s[5] = {ok_sample(500, 50, 11), ok_sample(1500, 50, 11), ok_sample(500, 150, 11),
                         ok_sample(200, 10, 11)};
    s[4].outcome = DI_LG_TIMEOUT;
    snprintf(s[4].reason, sizeof s[4].reason, "stalled");
    di_lg_slo slo = {1000, 100};
    di_lg_price price = {3.6, -1}; /* 3.6 / hour over 10 s = 0.01 */
    di_error err;
    double itl[3] = {1, 2, 3};
    json_t *r = di_lg_record_metrics(s, 5, itl, 3, 10.0, 8.0, &slo, &price, true, &err);
    assert_non_null(r);
    json_t *q = json_object_get(r, "requests");
    assert_int_equal(json_integer_value(json_object_get(q, "sent")), 5);
    assert_int_equal(json_integer_value(json_object_get(q, "ok")), 4);
    assert_int_equal(json_integer_value(json_object_get(q, "timeouts")), 1);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(q, "reasons"), "stalled")), 1);
    assert_near(json_real_value(json_object_get(r, "goodput_requests_per_s")), 0.2, 1e-12);
    assert_near(json_real_value(json_object_get(r, "output_tokens_per_s")), 4.4, 1e-12);
    assert_near(json_real_value(json_object_get(r, "cost_per_million_output_tokens")), 0.01 / 44e-6, 1e-9);
    assert_near(json_real_value(json_object_get(r, "prefix_cache_hit_rate")), 0.5, 1e-12);
    assert_near(json_real_value(json_object_get(r, "busy_fraction")), 0.8, 1e-12);
    assert_true(json_is_null(json_object_get(r, "energy_wh_per_million_output_tokens")));
    assert_int_equal(json_array_size(json_object_get(r, "samples")), 5);
    assert_near(json_real_value(json_object_get(json_object_get(r, "itl_ms"), "p50")), 2, 1e-12);
    json_decref(r);
    price.cost_per_hour = -1;
    r = di_lg_record_metrics(s, 5, itl, 3, 10.0, 8.0, &slo, &price, false, &err);
    assert_true(json_is_null(json_object_get(r, "cost_per_million_output_tokens")));
    assert_null(json_object_get(r, "samples"));
    json_decref(r);
    r = di_lg_record_metrics(NULL, 0, NULL, 0, 0, 0, &slo, &price, true, &err); /* nothing sent */
    assert_non_null(r);
    json_decref(r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sse_events_same_for_every_split),
        cmocka_unit_test(test_sse_byte_at_a_time),
        cmocka_unit_test(test_sse_unfinished_event_is_pending),
        cmocka_unit_test(test_sse_refuses_endless_line),
        cmocka_unit_test(test_sse_consumer_can_stop),
        cmocka_unit_test(test_percentile_matches_numpy_linear),
        cmocka_unit_test(test_length_specs_parse_and_refuse),
        cmocka_unit_test(test_lengths_have_asked_moments),
        cmocka_unit_test(test_workload_spec_refuses_bad_keys),
        cmocka_unit_test(test_conversations_are_seeded_and_resend_history),
        cmocka_unit_test(test_prompt_file_lines),
        cmocka_unit_test(test_record_counts_goodput_and_cost),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
