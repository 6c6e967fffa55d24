/* grammar: regex front end, checked against PCRE2 (an independent engine)
 * on random strings, plus the unsupported constructs. */
#include "grammar_test_util.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

/* xorshift: deterministic test inputs */
static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static bool pcre_full_match(pcre2_code *re, const char *s, size_t n) {
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    int rc = pcre2_match(re, (PCRE2_SPTR)s, n, 0, PCRE2_ANCHORED | PCRE2_ENDANCHORED, md, NULL);
    pcre2_match_data_free(md);
    return rc >= 0;
}

/* Compares our full-match grammar with PCRE2 on random strings drawn from
 * an alphabet that exercises the pattern. */
static void check_against_pcre(const char *pattern, const char *alphabet, uint32_t max_len, uint32_t n_trials) {
    di_grammar *g = NULL;
    di_error err = {0};
    if (di_grammar_compile_regex(pattern, strlen(pattern), &g, &err)) fail_msg("regex %s: %s", pattern, err.msg);
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF, &ec, &eo, NULL);
    if (!re) fail_msg("pcre2 rejects /%s/ (error %d at %zu)", pattern, ec, (size_t)eo);
    uint64_t seed = 0x9E3779B97F4A7C15ull ^ strlen(pattern);
    size_t na = strlen(alphabet);
    char buf[256];
    for (uint32_t t = 0; t < n_trials; t++) {
        uint32_t len = (uint32_t)(rng_next(&seed) % (max_len + 1));
        for (uint32_t i = 0; i < len; i++) buf[i] = alphabet[rng_next(&seed) % na];
        bool want = pcre_full_match(re, buf, len);
        bool got = gt_accepts(g, buf, len);
        if (want != got) fail_msg("/%s/ on \"%.*s\": pcre2 %d, grammar %d", pattern, (int)len, buf, want, got);
    }
    pcre2_code_free(re);
    di_grammar_free(g);
}

static void regex_agrees_with_pcre2_on_random_strings(void **state) {
    (void)state;
    check_against_pcre("a(b|c)*d", "abcd", 8, 3000);
    check_against_pcre("(ab|a)(bc|c)?", "abc", 5, 2000);
    check_against_pcre("[a-c]{2,4}x?", "abcdx", 6, 3000);
    check_against_pcre("\\d+(\\.\\d{1,2})?", "0123.a", 7, 3000);
    check_against_pcre("[^ab]+b", "abc-", 6, 3000);
    check_against_pcre("(?:x|y){3}|z+", "xyz", 5, 2000);
    check_against_pcre("\\w+@\\w+\\.com", "ab@.com_", 10, 3000);
    check_against_pcre("a.c", "abc\n", 4, 1000);
    check_against_pcre("[\\s-]*q", " -q\tx", 5, 2000);
    check_against_pcre("((a?)+b)*", "ab", 6, 2000);
    check_against_pcre("x{,2}", "x{,2}", 6, 2000); /* '{' literal when not a quantifier */
    check_against_pcre("[\\]\\-a]+", "]-a\\", 5, 2000);
    check_against_pcre("^ab$", "ab", 3, 100);
    /* nested repetitions: compiled through the automaton (rx_dfa) */
    check_against_pcre("(?:[a-c]+-?)+[a-c]/[a-c_-]+", "ab-/_", 10, 4000);
    check_against_pcre("(a|ab)+(c+d?)*", "abcd", 9, 4000);
    check_against_pcre("(?:x{1,3}y?){2,}", "xy", 9, 3000);
    /* anchors inside groups that open / close the pattern */
    check_against_pcre("(^[0-9]+\\.[0-9]+$)", "01.", 6, 3000);
    check_against_pcre("^$|(^(?:a+ )*a+$)", "a ", 7, 3000);
    check_against_pcre("^(a(b|c)$)|^d$", "abcd", 4, 2000);
}

static void regex_unicode_and_escapes(void **state) {
    (void)state;
    di_grammar *g = NULL;
    di_error err;
    const char *re = "[α-ω]\\u00e9\\x41\\u{1F600}.";
    assert_int_equal(di_grammar_compile_regex(re, strlen(re), &g, &err), DI_OK);
    assert_true(gt_accepts_str(g, "βéA😀x"));
    assert_false(gt_accepts_str(g, "béA😀x"));
    assert_false(gt_accepts_str(g, "βéA😀\n"));
    di_grammar_free(g);
}

static void regex_unsupported_constructs_are_named(void **state) {
    (void)state;
    struct { const char *re; di_status code; const char *word; } cases[] = {
        {"(?=a)b", DI_ERR_UNSUPPORTED, "lookaround"},
        {"(a)\\1", DI_ERR_UNSUPPORTED, "backreference"},
        {"\\bword", DI_ERR_UNSUPPORTED, "\\b"},
        {"\\p{L}", DI_ERR_UNSUPPORTED, "property"},
        {"a^b", DI_ERR_UNSUPPORTED, "'^'"},
        {"(^a|b)c", DI_ERR_UNSUPPORTED, "some alternatives"},
        {"(^a)*", DI_ERR_UNSUPPORTED, "repeated anchored"},
        {"(a$)b", DI_ERR_UNSUPPORTED, "'$'"},
        {"b(^a)", DI_ERR_UNSUPPORTED, "'^'"},
        {"(a", DI_ERR_FORMAT, "')'"},
        {"a)", DI_ERR_FORMAT, "')'"},
        {"*a", DI_ERR_FORMAT, "repeat"},
        {"a{2}{0,1}", DI_ERR_FORMAT, "repeat"},
        {"a**", DI_ERR_FORMAT, "repeat"},
        {"[a", DI_ERR_FORMAT, "class"},
        {"[z-a]", DI_ERR_FORMAT, "order"},
        {"a{3,1}", DI_ERR_FORMAT, "order"},
        {"a{1000000}", DI_ERR_RANGE, "limit"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        di_grammar *g = NULL;
        di_error err = {0};
        di_status s = di_grammar_compile_regex(cases[i].re, strlen(cases[i].re), &g, &err);
        if (s != cases[i].code || !strstr(err.msg, cases[i].word))
            fail_msg("/%s/: status %d msg '%s'", cases[i].re, s, err.msg);
        assert_null(g);
    }
}

static void regex_deep_groups_hit_the_limit(void **state) {
    (void)state;
    size_t depth = 50000, n = 0;
    char *t = malloc(2 * depth + 2);
    for (size_t i = 0; i < depth; i++) t[n++] = '(';
    t[n++] = 'a';
    for (size_t i = 0; i < depth; i++) t[n++] = ')';
    di_grammar *g = NULL;
    di_error err;
    assert_int_equal(di_grammar_compile_regex(t, n, &g, &err), DI_ERR_RANGE);
    free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(regex_agrees_with_pcre2_on_random_strings),
        cmocka_unit_test(regex_unicode_and_escapes),
        cmocka_unit_test(regex_unsupported_constructs_are_named),
        cmocka_unit_test(regex_deep_groups_hit_the_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
