/* grammar: EBNF (GBNF) front end, the Earley matcher (advance, rollback,
 * accepting) and token masks over synthetic vocabularies. */
#include "grammar_test_util.h"

static void ebnf_literals_alternatives_and_sequences(void **state) {
    (void)state;
    di_grammar *g = gt_ebnf("root ::= \"ab\" | \"c\" \"d\"\n");
    assert_true(gt_accepts_str(g, "ab"));
    assert_true(gt_accepts_str(g, "cd"));
    assert_false(gt_accepts_str(g, "a"));
    assert_false(gt_accepts_str(g, "abc"));
    assert_false(gt_accepts_str(g, ""));
    di_grammar_free(g);
}

static void ebnf_repetitions_and_bounds(void **state) {
    (void)state;
    di_grammar *g = gt_ebnf("root ::= \"a\"* \"b\"+ \"c\"? \"d\"{2} \"e\"{1,3} \"f\"{2,}\n");
    assert_true(gt_accepts_str(g, "bddeff"));
    assert_true(gt_accepts_str(g, "aaabbbcddeeefffff"));
    assert_false(gt_accepts_str(g, "ddeff"));      /* b+ */
    assert_false(gt_accepts_str(g, "bdeff"));      /* d{2} */
    assert_false(gt_accepts_str(g, "bddeeeeff"));  /* e{1,3} */
    assert_false(gt_accepts_str(g, "bddef"));      /* f{2,} */
    di_grammar_free(g);
    g = gt_ebnf("root ::= [a-c]{,2} \"x\"\n");
    assert_true(gt_accepts_str(g, "x"));
    assert_true(gt_accepts_str(g, "abx"));
    assert_false(gt_accepts_str(g, "abcx"));
    di_grammar_free(g);
}

static void ebnf_classes_unicode_and_escapes(void **state) {
    (void)state;
    di_grammar *g = gt_ebnf("root ::= [^\"\\\\] \"\\x41\\u00e9\\n\" [α-ω] .\n");
    assert_true(gt_accepts_str(g, "zAé\nβ€"));
    assert_true(gt_accepts_str(g, "éAé\nω😀"));
    assert_false(gt_accepts_str(g, "\"Aé\nβx"));
    assert_false(gt_accepts_str(g, "zAé\nAx"));
    /* invalid UTF-8 is never produced by a class */
    assert_false(gt_accepts(g, "\xff" "A\xc3\xa9\n\xce\xb2x", 8));
    di_grammar_free(g);
}

static void ebnf_rules_recursion_comments_and_newlines(void **state) {
    (void)state;
    const char *text =
        "# arithmetic\n"
        "root ::= expr\n"
        "expr ::= expr \"+\" term | term   # left recursive\n"
        "term ::= \"(\" expr \")\" |\n"
        "         num\n"
        "num  ::= [0-9]+\n";
    di_grammar *g = gt_ebnf(text);
    assert_true(gt_accepts_str(g, "1+2+(3+45)"));
    assert_true(gt_accepts_str(g, "((7))"));
    assert_false(gt_accepts_str(g, "1+"));
    assert_false(gt_accepts_str(g, "(1"));
    di_grammar_free(g);
    g = gt_ebnf("root ::= (\n  \"a\"\n  | \"b\"\n) x\nx ::= \"\" | \"!\"\n");
    assert_true(gt_accepts_str(g, "a"));
    assert_true(gt_accepts_str(g, "b!"));
    di_grammar_free(g);
}

static void ebnf_nullable_and_ambiguous_grammars(void **state) {
    (void)state;
    di_grammar *g = gt_ebnf("root ::= a a a\na ::= \"x\"? | \"\" | a\n");
    assert_true(gt_accepts_str(g, ""));
    assert_true(gt_accepts_str(g, "xxx"));
    assert_false(gt_accepts_str(g, "xxxx"));
    di_grammar_free(g);
    g = gt_ebnf("root ::= s\ns ::= s s | \"x\" | \"\"\n");
    assert_true(gt_accepts_str(g, "xxxxxxxxxxxxxxxxxxxx"));
    di_grammar_free(g);
    g = gt_ebnf("root ::= (\"a\"*)* \"b\"\n");
    assert_true(gt_accepts_str(g, "aaab"));
    assert_true(gt_accepts_str(g, "b"));
    di_grammar_free(g);
}

static void ebnf_errors_are_reported_not_fatal(void **state) {
    (void)state;
    const char *bad[] = {
        "root ::= \"abc\n",         "root ::= [abc\n",        "root ::= (\"a\"\n",
        "root ::= x\n",             "foo ::= \"a\"\n",        "root ::= \"a\" )\n",
        "root = \"a\"\n",           "root ::= \"\\q\"\n",     "root ::= \"a\"{3,1}\n",
        "root ::= \"a\"{99999999}\n", "root ::= [z-a]\n",     "root ::= \"a\"\nroot ::= \"b\"\n",
        "root ::= <[1]>\n",         "root ::= \"\\x4\"\n",    "root ::= \xff\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        di_grammar *g = NULL;
        di_error err = {0};
        di_status s = di_grammar_compile_ebnf(bad[i], strlen(bad[i]), NULL, &g, &err);
        if (s == DI_OK) fail_msg("accepted bad grammar %zu: %s", i, bad[i]);
        assert_null(g);
        assert_true(strlen(err.msg) > 0);
    }
}

static void ebnf_deep_nesting_hits_the_limit(void **state) {
    (void)state;
    size_t depth = 100000;
    char *t = malloc(2 * depth + 64);
    size_t n = (size_t)sprintf(t, "root ::= ");
    for (size_t i = 0; i < depth; i++) t[n++] = '(';
    t[n++] = '"', t[n++] = 'a', t[n++] = '"';
    for (size_t i = 0; i < depth; i++) t[n++] = ')';
    t[n++] = '\n';
    di_grammar *g = NULL;
    di_error err;
    assert_int_equal(di_grammar_compile_ebnf(t, n, NULL, &g, &err), DI_ERR_RANGE);
    free(t);
}

static void matcher_rollback_restores_state(void **state) {
    (void)state;
    di_grammar *g = gt_ebnf("root ::= \"{\" [a-z]* \"}\"\n");
    const char *toks[] = {"{", "ab", "c}", "}", "x", "{}"};
    di_grammar_vocab *v = gt_vocab(toks, 6);
    di_grammar_matcher *m;
    di_error err;
    assert_int_equal(di_grammar_matcher_create(g, v, &m, &err), DI_OK);
    assert_false(di_grammar_matcher_advance_token(m, 1));
    assert_true(di_grammar_matcher_advance_token(m, 0));
    assert_true(di_grammar_matcher_advance_token(m, 1));
    assert_true(di_grammar_matcher_advance_token(m, 1));
    assert_false(di_grammar_matcher_is_accepting(m));
    assert_true(di_grammar_matcher_advance_token(m, 2));
    assert_true(di_grammar_matcher_is_accepting(m));
    assert_true(di_grammar_matcher_is_terminated(m));
    assert_int_equal(di_grammar_matcher_n_tokens(m), 4);
    assert_int_equal(di_grammar_matcher_rollback(m, 2), DI_OK);
    assert_false(di_grammar_matcher_is_accepting(m));
    assert_true(di_grammar_matcher_advance_token(m, 3));
    assert_true(di_grammar_matcher_is_accepting(m));
    assert_true(di_grammar_matcher_advance_token(m, 6)); /* EOS */
    assert_false(di_grammar_matcher_advance_token(m, 4));
    assert_int_equal(di_grammar_matcher_rollback(m, 1), DI_OK);
    assert_true(di_grammar_matcher_is_accepting(m));
    assert_int_equal(di_grammar_matcher_rollback(m, 9), DI_ERR_INVALID_ARG);
    assert_int_equal(di_grammar_matcher_rollback(m, 3), DI_OK);
    assert_int_equal(di_grammar_matcher_n_tokens(m), 0);
    assert_true(di_grammar_matcher_advance_token(m, 5));
    di_grammar_matcher_free(m);
    di_grammar_vocab_free(v);
    di_grammar_free(g);
}

static void mask_matches_reference_on_synthetic_vocab(void **state) {
    (void)state;
    di_grammar *g = gt_ebnf("root ::= \"[\" (num (\",\" num)*)? \"]\"\nnum ::= \"-\"? [0-9]+\n");
    const char *toks[] = {"[", "]", ",", "-", "1", "12", "[1", "1,", ",-", "]]", "a", "[]", "3]", "", "-0,"};
    uint32_t n = sizeof toks / sizeof toks[0];
    di_grammar_vocab *v = gt_vocab(toks, n);
    di_grammar_matcher *m;
    di_error err;
    assert_int_equal(di_grammar_matcher_create(g, v, &m, &err), DI_OK);
    uint32_t fast[2], slow[2];
    const uint32_t walk[] = {6, 7, 14, 12};
    for (size_t step = 0; step <= 4; step++) {
        assert_int_equal(di_grammar_matcher_fill_mask(m, fast, 2, &err), DI_OK);
        assert_int_equal(di_grammar_matcher_fill_mask_slow(m, slow, 2, &err), DI_OK);
        assert_memory_equal(fast, slow, sizeof fast);
        assert_false(gt_bit(fast, 10)); /* "a" */
        assert_false(gt_bit(fast, 13)); /* empty token */
        if (step == 4) {
            assert_true(gt_bit(fast, n)); /* EOS when accepting */
            break;
        }
        assert_false(gt_bit(fast, n));
        assert_true(gt_bit(fast, walk[step]));
        assert_true(di_grammar_matcher_advance_token(m, walk[step]));
    }
    assert_int_equal(di_grammar_matcher_fill_mask(m, fast, 0, &err), DI_ERR_INVALID_ARG);
    di_grammar_matcher_free(m);
    di_grammar_vocab_free(v);
    di_grammar_free(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(ebnf_literals_alternatives_and_sequences),
        cmocka_unit_test(ebnf_repetitions_and_bounds),
        cmocka_unit_test(ebnf_classes_unicode_and_escapes),
        cmocka_unit_test(ebnf_rules_recursion_comments_and_newlines),
        cmocka_unit_test(ebnf_nullable_and_ambiguous_grammars),
        cmocka_unit_test(ebnf_errors_are_reported_not_fatal),
        cmocka_unit_test(ebnf_deep_nesting_hits_the_limit),
        cmocka_unit_test(matcher_rollback_restores_state),
        cmocka_unit_test(mask_matches_reference_on_synthetic_vocab),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
