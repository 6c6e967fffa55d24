/* grammar: JSON Schema front end (unit cases the official suite does not
 * pin down: property order, whitespace modes, errors naming keywords,
 * lenient mode, recursion, number bounds) and hostile inputs (deep
 * nesting, random mutations of schemas and grammars: must never crash). */
#include "grammar_test_util.h"

#include <jansson.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

static di_grammar *schema_opt(const char *s, const di_grammar_options *opt) {
    di_grammar *g = NULL;
    di_error err = {0};
    if (di_grammar_compile_json_schema(s, strlen(s), opt, &g, &err)) fail_msg("schema failed: %s\n%s", err.msg, s);
    return g;
}

static di_grammar *schema(const char *s) { return schema_opt(s, NULL); }

static void properties_follow_schema_order_and_required(void **state) {
    (void)state;
    di_grammar *g = schema("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"string\"},"
                           "\"c\":{\"type\":\"boolean\"}},\"required\":[\"b\"],\"additionalProperties\":false}");
    assert_true(gt_accepts_str(g, "{\"b\":\"x\"}"));
    assert_true(gt_accepts_str(g, "{\"a\":1,\"b\":\"x\",\"c\":true}"));
    assert_true(gt_accepts_str(g, "{\"b\":\"\",\"c\":false}"));
    assert_false(gt_accepts_str(g, "{\"b\":\"x\",\"a\":1}")); /* order */
    assert_false(gt_accepts_str(g, "{\"a\":1}"));             /* required */
    assert_false(gt_accepts_str(g, "{\"b\":\"x\",}"));
    assert_false(gt_accepts_str(g, "{\"b\":\"x\",\"d\":1}"));
    di_grammar_free(g);
}

static void additional_properties_exclude_listed_names(void **state) {
    (void)state;
    di_grammar *g = schema("{\"properties\":{\"foo\":{\"type\":\"integer\"}},\"additionalProperties\":{\"type\":\"string\"}}");
    assert_true(gt_accepts_str(g, "{\"foo\":1,\"bar\":\"x\",\"fo\":\"y\",\"fooo\":\"z\"}"));
    assert_true(gt_accepts_str(g, "{\"bar\":\"x\"}"));
    assert_false(gt_accepts_str(g, "{\"foo\":\"x\"}")); /* not as an extra */
    assert_false(gt_accepts_str(g, "{\"bar\":1}"));
    di_grammar_free(g);
}

static uint64_t js_rand(uint64_t *s);

/* The exclusion of listed names from extra keys (key_not_in: leaving the
 * names' trie at any depth, prefixes of names, names with short escapes
 * and UTF-8), on random keys written by jansson: a listed name takes a
 * string, any other key an integer. */
static void extra_keys_are_exactly_the_unlisted_ones(void **state) {
    (void)state;
    di_grammar *g = schema("{\"properties\":{\"ab\":{\"type\":\"string\"},\"abc\":{\"type\":\"string\"},"
                           "\"a\\\"b\":{\"type\":\"string\"},\"b\u00e9\":{\"type\":\"string\"},"
                           "\"\\n\":{\"type\":\"string\"}},\"additionalProperties\":{\"type\":\"integer\"}}");
    const char *names[] = {"ab", "abc", "a\"b", "b\xc3\xa9", "\n"};
    const char *alpha[] = {"a", "b", "c", "\"", "\xc3\xa9", "\n", "x"};
    uint64_t seed = 0x5DEECE66Dull;
    uint32_t n_named = 0;
    for (int t = 0; t < 3000; t++) {
        char key[64] = {0};
        size_t len = 0;
        int n = (int)(js_rand(&seed) % 5);
        for (int i = 0; i < n; i++) {
            const char *p = alpha[js_rand(&seed) % 7];
            memcpy(key + len, p, strlen(p));
            len += strlen(p);
        }
        bool named = false;
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) named |= !strcmp(key, names[i]);
        n_named += named;
        json_t *k = json_stringn(key, len);
        char *enc = json_dumps(k, JSON_ENCODE_ANY | JSON_COMPACT);
        char doc[160];
        snprintf(doc, sizeof doc, "{%s:1}", enc);
        if (gt_accepts_str(g, doc) == named) fail_msg("%s: expected %d", doc, !named);
        snprintf(doc, sizeof doc, "{%s:\"s\"}", enc);
        if (gt_accepts_str(g, doc) != named) fail_msg("%s: expected %d", doc, named);
        free(enc);
        json_decref(k);
    }
    assert_true(n_named > 0);
    di_grammar_free(g);
}

static void pattern_properties_generate_matching_keys(void **state) {
    (void)state;
    di_grammar *g = schema("{\"properties\":{\"id\":{\"type\":\"integer\"}},"
                           "\"patternProperties\":{\"^x-\":{\"type\":\"string\"}},\"additionalProperties\":false}");
    assert_true(gt_accepts_str(g, "{\"id\":1,\"x-a\":\"s\",\"x-\":\"t\"}"));
    assert_false(gt_accepts_str(g, "{\"id\":1,\"x-a\":1}"));
    assert_false(gt_accepts_str(g, "{\"id\":1,\"y\":\"s\"}"));
    di_grammar_free(g);
    /* a listed name matching the pattern would need both schemas */
    const char *both = "{\"properties\":{\"x-id\":{}},\"patternProperties\":{\"^x-\":{}}}";
    di_error err = {0};
    assert_int_equal(di_grammar_compile_json_schema(both, strlen(both), NULL, &g, &err), DI_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "'patternProperties'"));
}

static void flexible_whitespace_is_bounded(void **state) {
    (void)state;
    di_grammar_options opt = di_grammar_options_default();
    opt.whitespace = DI_GRAMMAR_WS_FLEXIBLE;
    di_grammar *g = schema_opt("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"array\",\"items\":{\"type\":\"integer\"}}}}", &opt);
    assert_true(gt_accepts_str(g, "{ \"a\" :\n [ 1 ,\t2 ] }"));
    assert_true(gt_accepts_str(g, "{\"a\":[1,2]}"));
    char big[128];
    snprintf(big, sizeof big, "{%*s\"a\":[]}", DI_GRAMMAR_MAX_WS + 1, "");
    assert_false(gt_accepts_str(g, big));
    di_grammar_free(g);
    g = schema("{\"type\":\"object\"}");
    assert_false(gt_accepts_str(g, "{ }"));
    di_grammar_free(g);
}

static void numbers_respect_bounds_exactly(void **state) {
    (void)state;
    di_grammar *g = schema("{\"type\":\"number\",\"minimum\":-2.5,\"exclusiveMaximum\":10}");
    const char *yes[] = {"-2.5", "-2.49", "-2", "0", "9.999", "3", "-0.1", "9"};
    const char *no[] = {"-2.51", "-3", "10", "10.0", "11", "1e2", "-2.500001"};
    for (size_t i = 0; i < sizeof yes / sizeof *yes; i++) if (!gt_accepts_str(g, yes[i])) fail_msg("rejected %s", yes[i]);
    for (size_t i = 0; i < sizeof no / sizeof *no; i++) if (gt_accepts_str(g, no[i])) fail_msg("accepted %s", no[i]);
    di_grammar_free(g);
    g = schema("{\"type\":\"integer\",\"minimum\":-120,\"maximum\":1234}");
    for (int x = -130; x <= 1300; x++) {
        char t[16];
        snprintf(t, sizeof t, "%d", x);
        if (gt_accepts_str(g, t) != (x >= -120 && x <= 1234)) fail_msg("integer %d", x);
    }
    assert_true(gt_accepts_str(g, "12.0"));
    assert_false(gt_accepts_str(g, "12.5"));
    assert_false(gt_accepts_str(g, "007"));
    di_grammar_free(g);
}

static void strings_lengths_formats_and_patterns(void **state) {
    (void)state;
    di_grammar *g = schema("{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}");
    assert_true(gt_accepts_str(g, "\"ab\""));
    assert_true(gt_accepts_str(g, "\"a\\u00e9\\n\""));
    assert_true(gt_accepts_str(g, "\"é😀\""));
    assert_false(gt_accepts_str(g, "\"a\""));
    assert_false(gt_accepts_str(g, "\"abcd\""));
    di_grammar_free(g);
    g = schema("{\"type\":\"string\",\"pattern\":\"^[a-z]+-\\\\d{2}$\"}");
    assert_true(gt_accepts_str(g, "\"ab-12\""));
    assert_false(gt_accepts_str(g, "\"ab-123\""));
    di_grammar_free(g);
    g = schema("{\"type\":\"string\",\"pattern\":\"x\\\"y\"}"); /* unanchored, with a quote */
    assert_true(gt_accepts_str(g, "\"--x\\\"y--\""));
    assert_false(gt_accepts_str(g, "\"xy\""));
    di_grammar_free(g);
    g = schema("{\"type\":\"string\",\"format\":\"date\"}");
    assert_true(gt_accepts_str(g, "\"2024-02-29\""));
    assert_false(gt_accepts_str(g, "\"2024-13-01\""));
    di_grammar_free(g);
}

static uint64_t js_rand(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

/* pattern with minLength/maxLength (the automaton times a character
 * counter), checked against PCRE2 (search semantics) plus a length count on
 * random strings, each written as JSON by jansson. */
static void check_pattern_length(const char *pattern, int lo, int hi, const char *const *alphabet, size_t n_alpha) {
    char s[512];
    if (hi >= 0) snprintf(s, sizeof s, "{\"type\":\"string\",\"pattern\":%s,\"minLength\":%d,\"maxLength\":%d}", pattern, lo, hi);
    else snprintf(s, sizeof s, "{\"type\":\"string\",\"pattern\":%s,\"minLength\":%d}", pattern, lo);
    di_grammar *g = schema(s);
    json_t *pj = json_loads(pattern, JSON_DECODE_ANY, NULL);
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)json_string_value(pj), PCRE2_ZERO_TERMINATED, PCRE2_UTF, &ec, &eo, NULL);
    assert_non_null(re);
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    uint64_t seed = 0x9E3779B97F4A7C15ull ^ (uint64_t)lo ^ strlen(pattern);
    uint32_t n_yes = 0;
    for (int t = 0; t < 4000; t++) {
        char text[256] = {0};
        size_t len = 0;
        int n_chars = (int)(js_rand(&seed) % 14);
        for (int i = 0; i < n_chars; i++) {
            const char *piece = alphabet[js_rand(&seed) % n_alpha];
            memcpy(text + len, piece, strlen(piece));
            len += strlen(piece);
        }
        bool want = pcre2_match(re, (PCRE2_SPTR)text, len, 0, 0, md, NULL) >= 0 && n_chars >= lo && (hi < 0 || n_chars <= hi);
        json_t *js = json_stringn(text, len);
        char *enc = json_dumps(js, JSON_ENCODE_ANY | JSON_COMPACT);
        bool got = gt_accepts_str(g, enc);
        if (got != want) fail_msg("%s on %s: expected %d", s, enc, want);
        n_yes += want;
        free(enc);
        json_decref(js);
    }
    assert_true(n_yes > 0); /* the cases are not all rejections */
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    json_decref(pj);
    di_grammar_free(g);
}

static void patterns_with_length_bounds_are_exact(void **state) {
    (void)state;
    const char *ab[] = {"a", "b", "-", "\"", "\xc3\xa9"};
    check_pattern_length("\"^(?:[ab\\u00e9]+-?)+$\"", 2, 6, ab, 5);
    check_pattern_length("\"^[a-z\\u00e9]*-[ab]+$\"", 3, 8, ab, 5);
    check_pattern_length("\"a\\\"b\"", 4, 9, ab, 5); /* unanchored, with a quote */
    check_pattern_length("\"^(ab|b)+\"", 5, -1, ab, 5);
    check_pattern_length("\"^[^-]*$\"", 0, 3, ab, 5);
    check_pattern_length("\"(^[ab]+-$)\"", 0, 7, ab, 5); /* anchors inside a group */
    check_pattern_length("\"^$|(^(?:a+-)*b$)\"", 0, 9, ab, 5);
    /* the shape of jsonschemabench Github_easy o10013 (a search for one hex
     * digit, exactly 12 characters): the closing quote sits in the
     * automaton's accepting states (rx_dfa's tail) */
    const char *hex[] = {"0", "f", "x", ")", "\"", "\xc3\xa9"};
    check_pattern_length("\"[0-9a-fA-F]+\"", 12, 12, hex, 6);
    check_pattern_length("\"[0-9a-fA-F]+\"", 3, 5, hex, 6);
    /* no length bounds: the automaton of an ambiguous pattern, same tail */
    check_pattern_length("\"^(?:[ab]+-?)+$\"", 0, -1, ab, 5);
}

static void not_if_and_dependencies_as_alternatives(void **state) {
    (void)state;
    /* not of an enum of strings: other strings, and the other types */
    di_grammar *g = schema("{\"not\":{\"enum\":[\"logs\",\"a\\\"b\"]}}");
    assert_true(gt_accepts_str(g, "\"log\""));
    assert_true(gt_accepts_str(g, "\"logss\""));
    assert_true(gt_accepts_str(g, "12"));
    assert_false(gt_accepts_str(g, "\"logs\""));
    assert_false(gt_accepts_str(g, "\"a\\\"b\""));
    di_grammar_free(g);
    /* not required: objects missing one of the names */
    g = schema("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"}},"
               "\"not\":{\"required\":[\"a\",\"b\"]}}");
    assert_true(gt_accepts_str(g, "{\"a\":1}"));
    assert_true(gt_accepts_str(g, "{}"));
    assert_false(gt_accepts_str(g, "{\"a\":1,\"b\":2}"));
    di_grammar_free(g);
    /* not of bounds and types */
    g = schema("{\"not\":{\"type\":\"string\",\"maxLength\":2}}");
    assert_true(gt_accepts_str(g, "\"abc\""));
    assert_true(gt_accepts_str(g, "true"));
    assert_false(gt_accepts_str(g, "\"ab\""));
    di_grammar_free(g);
    g = schema("{\"type\":\"integer\",\"not\":{\"anyOf\":[{\"maximum\":0},{\"minimum\":10}]}}");
    assert_true(gt_accepts_str(g, "5"));
    assert_false(gt_accepts_str(g, "0"));
    assert_false(gt_accepts_str(g, "10"));
    di_grammar_free(g);
    /* if / then / else on a property value */
    g = schema("{\"type\":\"object\",\"properties\":{\"k\":{\"type\":\"string\"},\"n\":{\"type\":\"integer\"}},"
               "\"required\":[\"k\"],\"if\":{\"properties\":{\"k\":{\"const\":\"num\"}}},"
               "\"then\":{\"required\":[\"n\"]},\"else\":{\"not\":{\"required\":[\"n\"]}}}");
    assert_true(gt_accepts_str(g, "{\"k\":\"num\",\"n\":1}"));
    assert_true(gt_accepts_str(g, "{\"k\":\"str\"}"));
    assert_false(gt_accepts_str(g, "{\"k\":\"num\"}"));
    assert_false(gt_accepts_str(g, "{\"k\":\"str\",\"n\":1}"));
    di_grammar_free(g);
    /* dependentRequired in both directions of the member order */
    g = schema("{\"type\":\"object\",\"properties\":{\"a\":{},\"b\":{},\"c\":{}},\"additionalProperties\":false,"
               "\"dependentRequired\":{\"c\":[\"a\"],\"a\":[\"b\"]}}");
    assert_true(gt_accepts_str(g, "{}"));
    assert_true(gt_accepts_str(g, "{\"b\":1}"));
    assert_true(gt_accepts_str(g, "{\"a\":1,\"b\":2,\"c\":3}"));
    assert_false(gt_accepts_str(g, "{\"a\":1}"));
    assert_false(gt_accepts_str(g, "{\"b\":1,\"c\":3}"));
    di_grammar_free(g);
    /* contains with minContains / maxContains */
    g = schema("{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"contains\":{\"minimum\":5},"
               "\"minContains\":1,\"maxContains\":2}");
    assert_true(gt_accepts_str(g, "[5]"));
    assert_true(gt_accepts_str(g, "[1,7,2,9,3]"));
    assert_false(gt_accepts_str(g, "[]"));
    assert_false(gt_accepts_str(g, "[1,2]"));
    assert_false(gt_accepts_str(g, "[5,6,7]"));
    assert_false(gt_accepts_str(g, "[5,\"x\"]"));
    di_grammar_free(g);
    g = schema("{\"contains\":{\"const\":\"a\"}}");
    assert_true(gt_accepts_str(g, "[1,\"a\",\"a\"]"));
    assert_true(gt_accepts_str(g, "{}")); /* only arrays must contain */
    assert_false(gt_accepts_str(g, "[\"b\"]"));
    di_grammar_free(g);
    /* allOf whose members close their properties differently */
    g = schema("{\"allOf\":[{\"properties\":{\"a\":{\"type\":\"integer\"}},\"additionalProperties\":false},"
               "{\"properties\":{\"b\":{\"type\":\"string\"}},\"additionalProperties\":{\"type\":\"integer\"}}]}");
    assert_true(gt_accepts_str(g, "{\"a\":1}"));
    assert_false(gt_accepts_str(g, "{\"a\":1,\"b\":\"x\"}")); /* b: not listed by the first */
    assert_false(gt_accepts_str(g, "{\"a\":\"x\"}"));
    di_grammar_free(g);
    /* integers past 64 bits read as reals (a huge maximum is no bound) */
    g = schema("{\"type\":\"integer\",\"maximum\":18446744073709551616}");
    assert_true(gt_accepts_str(g, "5"));
    di_grammar_free(g);
    /* a dependency on a property that cannot occur is no constraint */
    g = schema("{\"type\":\"object\",\"properties\":{\"r\":{}},\"additionalProperties\":false,"
               "\"dependencies\":{\"shape\":[\"circle\"]}}");
    assert_true(gt_accepts_str(g, "{\"r\":1}"));
    di_grammar_free(g);
}

static void recursive_refs_and_defs(void **state) {
    (void)state;
    di_grammar *g = schema("{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
                           "\"next\":{\"$ref\":\"#/$defs/node\"}},\"required\":[\"v\"],\"additionalProperties\":false}},"
                           "\"$ref\":\"#/$defs/node\"}");
    assert_true(gt_accepts_str(g, "{\"v\":1,\"next\":{\"v\":2,\"next\":{\"v\":3}}}"));
    assert_false(gt_accepts_str(g, "{\"v\":1,\"next\":{}}"));
    di_grammar_free(g);
}

static void unsupported_keywords_name_the_keyword_unless_lenient(void **state) {
    (void)state;
    const char *kws[] = {"not", "uniqueItems", "unevaluatedProperties", "propertyNames"};
    const char *vals[] = {"{\"pattern\":\"a\"}", "true", "{}", "{}"};
    for (size_t i = 0; i < sizeof kws / sizeof *kws; i++) {
        char s[128];
        snprintf(s, sizeof s, "{\"type\":\"object\",\"%s\":%s}", kws[i], vals[i]);
        di_grammar *g = NULL;
        di_error err = {0};
        assert_int_equal(di_grammar_compile_json_schema(s, strlen(s), NULL, &g, &err), DI_ERR_UNSUPPORTED);
        char quoted[64];
        snprintf(quoted, sizeof quoted, "'%s'", kws[i]);
        if (!strstr(err.msg, quoted)) fail_msg("message '%s' does not name %s", err.msg, kws[i]);
        di_grammar_options opt = di_grammar_options_default();
        opt.lenient = true;
        assert_int_equal(di_grammar_compile_json_schema(s, strlen(s), &opt, &g, &err), DI_OK);
        di_grammar_free(g);
    }
    /* value-dependent support names the keyword too */
    const char *mo = "{\"type\":\"number\",\"multipleOf\":3}";
    di_grammar *g0 = NULL;
    di_error e0 = {0};
    assert_int_equal(di_grammar_compile_json_schema(mo, strlen(mo), NULL, &g0, &e0), DI_ERR_UNSUPPORTED);
    assert_non_null(strstr(e0.msg, "'multipleOf'"));
    /* multipleOf 0.01: at most two fraction digits */
    const char *money = "{\"type\":\"number\",\"multipleOf\":0.01}";
    assert_int_equal(di_grammar_compile_json_schema(money, strlen(money), NULL, &g0, &e0), DI_OK);
    assert_true(gt_accepts_str(g0, "12.34"));
    assert_false(gt_accepts_str(g0, "12.345"));
    di_grammar_free(g0);
    /* unknown (non-standard) keywords are annotations */
    di_grammar *g = schema("{\"type\":\"integer\",\"x-custom\":{\"a\":1}}");
    di_grammar_free(g);
}

static void json_object_mode_accepts_any_object(void **state) {
    (void)state;
    di_grammar *g = NULL;
    di_error err;
    assert_int_equal(di_grammar_compile_json_object(NULL, &g, &err), DI_OK);
    assert_true(gt_accepts_str(g, "{}"));
    assert_true(gt_accepts_str(g, "{\"a\":[1,{\"b\":null}],\"c\":\"\\ud83d\\ude00\"}"));
    assert_false(gt_accepts_str(g, "[]"));
    assert_false(gt_accepts_str(g, "{\"a\":\"\\ud83d\"}")); /* lone surrogate escape */
    di_grammar_free(g);
}

static void deep_schema_nesting_hits_the_limit(void **state) {
    (void)state;
    size_t depth = 5000;
    size_t cap = depth * 20 + 64, n = 0;
    char *s = malloc(cap);
    for (size_t i = 0; i < depth; i++) n += (size_t)sprintf(s + n, "{\"items\":");
    n += (size_t)sprintf(s + n, "true");
    for (size_t i = 0; i < depth; i++) s[n++] = '}';
    di_grammar *g = NULL;
    di_error err = {0};
    di_status st = di_grammar_compile_json_schema(s, n, NULL, &g, &err);
    assert_int_not_equal(st, DI_OK); /* RANGE from us, or FORMAT from jansson's own depth limit */
    assert_null(g);
    free(s);
    /* a $ref cycle without a base case compiles (grammar recursion) */
    const char *loop = "{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/b\"},\"b\":{\"$ref\":\"#/$defs/a\"}},\"$ref\":\"#/$defs/a\"}";
    st = di_grammar_compile_json_schema(loop, strlen(loop), NULL, &g, &err);
    if (st == DI_OK) {
        assert_false(gt_accepts_str(g, "1"));
        di_grammar_free(g);
    }
}

static uint64_t rng(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

/* Random byte edits of valid inputs: every result must compile or fail
 * with a message, and compiled grammars must run. */
static void random_mutations_never_crash(void **state) {
    (void)state;
    const char *schemas[] = {
        "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"pattern\":\"^(ab|c)*[x-z]{2,}$\"},"
        "\"b\":{\"anyOf\":[{\"type\":\"integer\",\"minimum\":3},{\"enum\":[1,\"x\",null]}]}},\"required\":[\"a\"]}",
        "{\"$defs\":{\"t\":{\"type\":\"array\",\"prefixItems\":[{\"$ref\":\"#/$defs/t\"}],\"maxItems\":2}},\"allOf\":[{\"$ref\":\"#/$defs/t\"},{\"minItems\":1}]}",
    };
    const char *ebnf = "root ::= a+ (\"x\" | [^a-c\\n]{1,3})? b\na ::= \"(\" root? \")\" | [0-9]\nb ::= \"\" | \"!\" b\n";
    const char *alphabet = "{}[]\":,\\()*+?|^$-.0123456789abcxyz \n";
    uint64_t seed = 0x1234567887654321ull;
    char buf[512];
    for (int iter = 0; iter < 3000; iter++) {
        int kind = iter % 3;
        const char *src = kind == 2 ? ebnf : schemas[kind];
        size_t n = strlen(src);
        memcpy(buf, src, n);
        int edits = 1 + (int)(rng(&seed) % 4);
        for (int e = 0; e < edits; e++) {
            size_t at = rng(&seed) % n;
            char ch = alphabet[rng(&seed) % strlen(alphabet)];
            switch (rng(&seed) % 3) {
            case 0: buf[at] = ch; break;
            case 1: if (n + 1 < sizeof buf) { memmove(buf + at + 1, buf + at, n - at); buf[at] = ch; n++; } break;
            default: if (n > 1) { memmove(buf + at, buf + at + 1, n - at - 1); n--; } break;
            }
        }
        di_grammar *g = NULL;
        di_error err = {0};
        di_status st = kind == 2 ? di_grammar_compile_ebnf(buf, n, NULL, &g, &err)
                                 : di_grammar_compile_json_schema(buf, n, NULL, &g, &err);
        if (st != DI_OK) {
            assert_null(g);
            assert_true(err.msg[0] != 0);
            continue;
        }
        di_grammar_matcher *m;
        assert_int_equal(di_grammar_matcher_create(g, NULL, &m, &err), DI_OK);
        for (int k = 0; k < 64; k++) {
            uint8_t c = (uint8_t)alphabet[rng(&seed) % strlen(alphabet)];
            if (!di_grammar_matcher_advance_bytes(m, &c, 1) && (rng(&seed) & 3) == 0) di_grammar_matcher_reset(m);
        }
        di_grammar_matcher_free(m);
        di_grammar_free(g);
    }
}

/* A hostile grammar (exponentially ambiguous) runs into the parser's item
 * limits and is rejected, not a crash or a hang. */
static void ambiguous_grammar_is_bounded(void **state) {
    (void)state;
    di_grammar *g = gt_ebnf("root ::= s\ns ::= s s | s s s | \"a\" | \"\"\n");
    char text[300];
    memset(text, 'a', sizeof text);
    di_grammar_matcher *m;
    di_error err;
    assert_int_equal(di_grammar_matcher_create(g, NULL, &m, &err), DI_OK);
    (void)di_grammar_matcher_advance_bytes(m, (const uint8_t *)text, sizeof text);
    di_grammar_matcher_free(m);
    di_grammar_free(g);
}

/* A schema whose language is empty fails to compile, naming the keyword
 * (a sampler would otherwise find no token to sample); an empty branch
 * inside a satisfiable schema is fine. */
static void unsatisfiable_schemas_fail_naming_the_keyword(void **state) {
    (void)state;
    static const struct { const char *schema, *named; } cases[] = {
        {"{\"type\":\"integer\",\"minimum\":10,\"maximum\":5}", "'minimum' 10, 'maximum' 5"},
        {"{\"type\":\"number\",\"exclusiveMinimum\":1,\"exclusiveMaximum\":1}", "'exclusiveMinimum' 1"},
        {"{\"type\":\"string\",\"minLength\":5,\"maxLength\":2}", "'minLength' 5 is above 'maxLength' 2"},
        {"{\"type\":\"array\",\"minItems\":3,\"maxItems\":1}", "'minItems' 3 is above 'maxItems' 1"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"minLength\":2,\"maxLength\":1}},"
         "\"required\":[\"a\"]}", "at #/a"},
        {"{\"$ref\":\"#\"}", "'$ref'"},
        {"{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/b\"},\"b\":{\"$ref\":\"#/$defs/a\"}},\"$ref\":\"#/$defs/a\"}", "'$ref'"},
        {"false", "false"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        di_grammar *g = NULL;
        di_error err = {0};
        di_status st = di_grammar_compile_json_schema(cases[i].schema, strlen(cases[i].schema), NULL, &g, &err);
        if (st != DI_ERR_FORMAT || !strstr(err.msg, "matches nothing") || !strstr(err.msg, cases[i].named))
            fail_msg("%s: status %d, '%s' (wanted it to name %s)", cases[i].schema, (int)st, err.msg, cases[i].named);
        assert_null(g);
    }
    /* one empty branch of anyOf leaves the other */
    di_grammar *g = schema("{\"anyOf\":[{\"type\":\"integer\",\"minimum\":10,\"maximum\":5},{\"type\":\"boolean\"}]}");
    assert_true(gt_accepts_str(g, "true"));
    assert_false(gt_accepts_str(g, "7"));
    di_grammar_free(g);
    /* a recursive $ref with a way out is satisfiable */
    g = schema("{\"type\":\"array\",\"items\":{\"$ref\":\"#\"}}");
    assert_true(gt_accepts_str(g, "[[],[[]]]"));
    di_grammar_free(g);
    /* regexes: an empty class matches nothing either */
    di_error err = {0};
    assert_int_equal(di_grammar_compile_regex("a[^\\s\\S]", 8, &g, &err), DI_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "the regex matches nothing"));
}

/* One policy for what the grammar cannot enforce: strict (the default
 * options) refuses it naming it; lenient drops it and lists it, with the
 * path, in di_grammar_dropped; a fully enforced schema lists nothing. */
static void unenforced_features_are_refused_or_listed(void **state) {
    (void)state;
    const char *s = "{\"type\":\"object\",\"properties\":{\"ip\":{\"type\":\"string\",\"format\":\"ipv6\"},"
                    "\"t\":{\"type\":\"array\",\"uniqueItems\":true}}}";
    di_grammar *g = NULL;
    di_error err = {0};
    assert_int_equal(di_grammar_compile_json_schema(s, strlen(s), NULL, &g, &err), DI_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "'format' 'ipv6' is not enforced"));
    di_grammar_options opt = di_grammar_options_default();
    opt.lenient = true;
    g = schema_opt(s, &opt);
    assert_non_null(di_grammar_dropped(g));
    assert_string_equal(di_grammar_dropped(g), "'format' 'ipv6' at #/ip; 'uniqueItems' at #/t");
    assert_true(gt_accepts_str(g, "{\"ip\":\"not an address\",\"t\":[1,1]}"));
    di_grammar_free(g);
    g = schema_opt("{\"type\":\"string\",\"format\":\"ipv4\"}", &opt);
    assert_null(di_grammar_dropped(g));
    di_grammar_free(g);
}

/* A pattern with a construct the regex front end does not implement
 * (here a backreference) is one more unenforced part: strict refuses it,
 * lenient drops the pattern, keeps the string's other keywords and lists
 * it with the regex's reason. A malformed pattern is refused either way. */
static void unsupported_pattern_is_refused_or_dropped(void **state) {
    (void)state;
    const char *s = "{\"type\":\"object\",\"properties\":{\"w\":{\"type\":\"string\",\"pattern\":\"^(a)\\\\1$\","
                    "\"maxLength\":3}},\"required\":[\"w\"]}";
    di_grammar *g = NULL;
    di_error err = {0};
    assert_int_equal(di_grammar_compile_json_schema(s, strlen(s), NULL, &g, &err), DI_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "backreferences are not supported"));
    di_grammar_options opt = di_grammar_options_default();
    opt.lenient = true;
    g = schema_opt(s, &opt);
    assert_string_equal(di_grammar_dropped(g),
                        "'pattern' (regex at offset 6: backreferences are not supported) at #/w");
    assert_true(gt_accepts_str(g, "{\"w\":\"xyz\"}"));
    assert_false(gt_accepts_str(g, "{\"w\":\"wxyz\"}")); /* maxLength still holds */
    di_grammar_free(g);
    const char *bad = "{\"type\":\"string\",\"pattern\":\"[a-\"}";
    assert_int_equal(di_grammar_compile_json_schema(bad, strlen(bad), &opt, &g, &err), DI_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "unterminated character class"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(properties_follow_schema_order_and_required),
        cmocka_unit_test(additional_properties_exclude_listed_names),
        cmocka_unit_test(extra_keys_are_exactly_the_unlisted_ones),
        cmocka_unit_test(pattern_properties_generate_matching_keys),
        cmocka_unit_test(flexible_whitespace_is_bounded),
        cmocka_unit_test(numbers_respect_bounds_exactly),
        cmocka_unit_test(strings_lengths_formats_and_patterns),
        cmocka_unit_test(patterns_with_length_bounds_are_exact),
        cmocka_unit_test(not_if_and_dependencies_as_alternatives),
        cmocka_unit_test(recursive_refs_and_defs),
        cmocka_unit_test(unsupported_keywords_name_the_keyword_unless_lenient),
        cmocka_unit_test(json_object_mode_accepts_any_object),
        cmocka_unit_test(deep_schema_nesting_hits_the_limit),
        cmocka_unit_test(random_mutations_never_crash),
        cmocka_unit_test(ambiguous_grammar_is_bounded),
        cmocka_unit_test(unsatisfiable_schemas_fail_naming_the_keyword),
        cmocka_unit_test(unenforced_features_are_refused_or_listed),
        cmocka_unit_test(unsupported_pattern_is_refused_or_dropped),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
