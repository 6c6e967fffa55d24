/* grammar: randomized walks over real-world schemas (jsonschemabench, a
 * subset committed in tests/data/jsonschemabench) with the DeepSeek-V3 vocabulary. At every step the
 * fast mask must equal the reference mask. The walks sample tokens from the
 * mask (so they reach string interiors, bounded strings, excluded property
 * names, numbers, nested values), roll back now and then, and all grammars
 * share one vocabulary: later schemas reuse the classifications published
 * by earlier ones through the vocabulary's shared cache, which is what this
 * test checks most. */
#include "grammar_test_util.h"

#include "grammar/matcher_internal.h"

static di_grammar_vocab *g_vocab;

#define WALK_STEPS 10      /* tokens per walk; the reference mask is ~30 ms */
#define ROLLBACK_ONE_IN 5  /* roll back after about one step in five */

static int load_vocab(void **state) {
    (void)state;
    char path[1024];
    di_test_data(path, sizeof path, "tokenizer/deepseek-v3/tokenizer.json");
    di_error err;
    if (di_grammar_vocab_from_hf_json(path, "<｜end▁of▁sentence｜>", &g_vocab, &err)) {
        printf("%s: %s (scripts/fetch-testdata.sh fetches it)\n", path, err.msg);
        return -1;
    }
    /* share every classification, not only the expensive ones, so that the
     * structural keys of small grammars are exercised too */
    if (g_vocab) g_vocab->share_budget = 1;
    return 0;
}

static int free_vocab(void **state) {
    (void)state;
    di_grammar_vocab_free(g_vocab);
    return 0;
}

static uint64_t next_rand(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

static char *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)len + 1);
    *n = fread(buf, 1, (size_t)len, f);
    fclose(f);
    buf[*n] = 0;
    return buf;
}

static void expect_masks_equal(di_grammar_matcher *m, uint32_t *fast, uint32_t *slow, size_t words, const char *what,
                               uint32_t step) {
    di_error err;
    assert_int_equal(di_grammar_matcher_fill_mask(m, fast, words, &err), DI_OK);
    assert_int_equal(di_grammar_matcher_fill_mask_slow(m, slow, words, &err), DI_OK);
    for (size_t w = 0; w < words; w++)
        if (fast[w] != slow[w]) fail_msg("%s step %u: mask word %zu fast %08x slow %08x", what, step, w, fast[w], slow[w]);
}

/* Picks an allowed token: half of the time one that contains a quote, so
 * that walks leave strings and move through the structure. */
static uint32_t pick(const uint32_t *mask, size_t words, uint32_t *allowed, uint64_t *seed) {
    uint32_t n = 0, n_q = 0;
    for (size_t w = 0; w < words; w++)
        for (uint32_t bits = mask[w]; bits; bits &= bits - 1) allowed[n++] = (uint32_t)(w * 32 + (uint32_t)__builtin_ctz(bits));
    if (!n) return UINT32_MAX;
    uint32_t t = allowed[next_rand(seed) % n];
    if (next_rand(seed) & 1) {
        for (uint32_t i = 0; i < n; i++) {
            uint32_t len;
            const uint8_t *b = di_grammar_vocab_token(g_vocab, allowed[i], &len);
            if (b && len && memchr(b, '"', len)) allowed[n_q++] = allowed[i];
        }
        if (n_q) t = allowed[next_rand(seed) % n_q];
    }
    return t;
}

static void walk_schema(const di_grammar *g, const char *name, uint64_t seed) {
    di_grammar_matcher *m;
    di_error err;
    assert_int_equal(di_grammar_matcher_create(g, g_vocab, &m, &err), DI_OK);
    size_t words = di_grammar_vocab_mask_words(g_vocab);
    uint32_t *fast = malloc(words * 4), *slow = malloc(words * 4), *allowed = malloc(words * 32 * 4);
    for (uint32_t step = 0; step < WALK_STEPS; step++) {
        expect_masks_equal(m, fast, slow, words, name, step);
        if (di_grammar_matcher_n_tokens(m) >= 2 && next_rand(&seed) % ROLLBACK_ONE_IN == 0) {
            uint32_t back = 1 + (uint32_t)(next_rand(&seed) % 2);
            assert_int_equal(di_grammar_matcher_rollback(m, back), DI_OK);
            continue;
        }
        uint32_t t = pick(fast, words, allowed, &seed);
        if (t == UINT32_MAX || !di_grammar_matcher_advance_token(m, t)) break;
        if (di_grammar_matcher_is_terminated(m)) break;
    }
    free(fast), free(slow), free(allowed);
    di_grammar_matcher_free(m);
}

/* A spread of keywords: bounded strings (minLength/maxLength), patterns and
 * formats, enums, anyOf, $ref, patternProperties, maxItems, and objects
 * that allow extra properties (the property-name exclusion automaton). */
static const char *const SCHEMAS[] = {
    "Github_easy/o10008.json",   "Github_easy/o11171.json",   "Github_medium/o10314.json",
    "Github_medium/o10505.json", "Github_medium/o1050.json",  "Github_medium/o1053.json",
    "Github_medium/o10078.json", "Github_medium/o10297.json", "Github_medium/o1191.json",
    "Github_medium/o10310.json", "Github_medium/o11684.json", "Github_medium/o12241.json",
};

static void fast_mask_equals_reference_on_random_walks(void **state) {
    (void)state;
    if (!g_vocab) skip();
    uint32_t walked = 0;
    for (size_t i = 0; i < sizeof SCHEMAS / sizeof SCHEMAS[0]; i++) {
        char rel[256], path[1024];
        snprintf(rel, sizeof rel, "tests/data/jsonschemabench/%s", SCHEMAS[i]);
        di_test_path(path, sizeof path, rel);
        size_t n = 0;
        char *text = read_file(path, &n);
        if (!text) fail_msg("cannot read %s", path);
        di_grammar *g = NULL;
        di_error err;
        if (di_grammar_compile_json_schema(text, n, NULL, &g, &err) == DI_OK) {
            walk_schema(g, SCHEMAS[i], 0x9E3779B97F4A7C15ull ^ (i + 1));
            walked++;
            di_grammar_free(g);
        }
        free(text);
    }
    assert_true(walked > 0);
}

/* Bounded strings: every count below, at and above the longest token
 * length is a different local key; counts past it must share one. */
static void bounded_strings_mask_like_the_reference(void **state) {
    (void)state;
    if (!g_vocab) skip();
    const char *schemas[] = {
        ("{\"type\":\"object\",\"properties\":{"
         "\"a\":{\"type\":\"string\",\"minLength\":3,\"maxLength\":200},"
         "\"b\":{\"type\":\"string\",\"minLength\":150}},\"required\":[\"a\",\"b\"]}"),
        /* counts that end inside a token: long tokens must be cut off */
        "{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":12},\"maxItems\":3}",
        "{\"type\":\"string\",\"minLength\":20,\"maxLength\":40}",
        "{\"type\":\"string\",\"minLength\":5}",
        /* long bounded strings: count loops inherited root to root, and
         * whole subtrees decided by their character counts */
        ("{\"type\":\"object\",\"properties\":{\"u\":{\"type\":\"string\",\"minLength\":44,\"maxLength\":45},"
         "\"v\":{\"type\":\"string\",\"maxLength\":7}},\"required\":[\"u\",\"v\"]}"),
        "{\"type\":\"array\",\"items\":{\"type\":\"string\",\"minLength\":2,\"maxLength\":30},\"minItems\":2}",
        /* pattern with bounds: the automaton times a character counter */
        "{\"type\":\"string\",\"pattern\":\"^(?:[a-z0-9]+-?)+$\",\"minLength\":3,\"maxLength\":30}",
        "{\"type\":\"array\",\"items\":{\"type\":\"string\",\"pattern\":\"x[a-c]*\\\"\",\"maxLength\":9}}",
    };
    for (size_t i = 0; i < sizeof schemas / sizeof schemas[0]; i++) {
        di_grammar *g;
        di_error err;
        assert_int_equal(di_grammar_compile_json_schema(schemas[i], strlen(schemas[i]), NULL, &g, &err), DI_OK);
        walk_schema(g, schemas[i], 7 + i);
        di_grammar_free(g);
    }
}

/* Objects of several bounded strings (Snowplow's shape): the first
 * masks inside each string walk 4k nodes with the DeepSeek-V3 vocabulary,
 * and the states a few characters in get hot on the way, where they take
 * their anchor's count loops (inherit_loops) instead of learning them;
 * with a minimum length the quote only becomes allowed some counts on. */
static void bounded_string_members_mask_like_the_reference(void **state) {
    (void)state;
    if (!g_vocab) skip();
    const char *schema =
        "{\"type\":\"object\",\"additionalProperties\":false,\"properties\":{"
        "\"action\":{\"type\":\"string\",\"maxLength\":100},"
        "\"kind\":{\"type\":\"string\",\"minLength\":4,\"maxLength\":100},"
        "\"title\":{\"type\":\"string\",\"maxLength\":6},"
        "\"body\":{\"type\":\"string\",\"maxLength\":1000}},"
        "\"required\":[\"action\",\"kind\",\"title\",\"body\"]}";
    /* each prefix ends where a mask is checked: a string's start, a few
     * characters in (multi-byte ones too), near a bound */
    const char *steps[] = {"{\"action\":\"", "ab", "\u00e9 x", "\",\"kind\":\"", "a", "bc", "d",
                           "\",\"title\":\"", "xyz", "\xe2\x80\x94", "w", "\",\"body\":\"", "  ", "\\n"};
    size_t words = di_grammar_vocab_mask_words(g_vocab);
    uint32_t *fast = malloc(words * 4), *slow = malloc(words * 4);
    di_grammar *g;
    di_grammar_matcher *m;
    di_error err;
    assert_int_equal(di_grammar_compile_json_schema(schema, strlen(schema), NULL, &g, &err), DI_OK);
    assert_int_equal(di_grammar_matcher_create(g, g_vocab, &m, &err), DI_OK);
    for (size_t k = 0; k < sizeof steps / sizeof steps[0]; k++) {
        assert_true(di_grammar_matcher_advance_bytes(m, (const uint8_t *)steps[k], strlen(steps[k])));
        expect_masks_equal(m, fast, slow, words, steps[k], (uint32_t)k);
    }
    di_grammar_matcher_free(m);
    di_grammar_free(g);
    free(fast), free(slow);
}

/* Grammars that differ only in a byte class, a repetition bound or where
 * a rule ends: their structural keys must differ (a shared classification
 * from one would be wrong for the other). Each is checked against the
 * reference after the other has published its classifications. */
static void near_isomorphic_grammars_do_not_share_wrongly(void **state) {
    (void)state;
    if (!g_vocab) skip();
    const char *res[] = {"[a-c]+x[0-9]*", "[d-f]+x[0-9]*", "[a-c]+y[0-9]*", "[a-c]{1,3}x[0-9]*",
                         "[a-c]{1,4}x[0-9]*", "t[a-z]{1,2}", "t[a-z]{1,3}", "([a-c]+x)+[0-9]*", "\"[a-z ]*\"", "\"[a-y ]*\""};
    const char *prefixes[] = {"", "ab", "abc", "d", "\"ab"};
    size_t words = di_grammar_vocab_mask_words(g_vocab);
    uint32_t *fast = malloc(words * 4), *slow = malloc(words * 4);
    for (size_t i = 0; i < sizeof res / sizeof res[0]; i++) {
        di_grammar *g;
        di_error err;
        assert_int_equal(di_grammar_compile_regex(res[i], strlen(res[i]), &g, &err), DI_OK);
        di_grammar_matcher *m;
        assert_int_equal(di_grammar_matcher_create(g, g_vocab, &m, &err), DI_OK);
        for (size_t p = 0; p < sizeof prefixes / sizeof prefixes[0]; p++) {
            di_grammar_matcher_reset(m);
            if (!di_grammar_matcher_advance_bytes(m, (const uint8_t *)prefixes[p], strlen(prefixes[p]))) continue;
            expect_masks_equal(m, fast, slow, words, res[i], (uint32_t)p);
        }
        di_grammar_matcher_free(m);
        di_grammar_free(g);
    }
    free(fast), free(slow);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fast_mask_equals_reference_on_random_walks),
        cmocka_unit_test(bounded_strings_mask_like_the_reference),
        cmocka_unit_test(bounded_string_members_mask_like_the_reference),
        cmocka_unit_test(near_isomorphic_grammars_do_not_share_wrongly),
    };
    return cmocka_run_group_tests(tests, load_vocab, free_vocab);
}
