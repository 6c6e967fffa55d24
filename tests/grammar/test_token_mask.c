/* grammar: token masks over the DeepSeek-V3 vocabulary (128k byte-level BPE
 * tokens read from testdata/, fetched). Each instance is tokenized (greedy
 * longest match: any segmentation is a valid walk), then walked token by
 * token: the token must be allowed by the mask, then advanced. The cached
 * fast mask is compared with the per-token reference on a sample of
 * steps. */
#include "grammar_test_util.h"

#include "grammar/grammar_tok.h"
#include "grammar/matcher_internal.h"

static di_grammar_vocab *g_vocab;
static const uint32_t EOS_ID = 1; /* <｜end▁of▁sentence｜> */

static int load_vocab(void **state) {
    (void)state;
    char path[1024];
    di_test_data(path, sizeof path, "tokenizer/deepseek-v3/tokenizer.json");
    di_error err;
    if (di_grammar_vocab_from_hf_json(path, "<｜end▁of▁sentence｜>", &g_vocab, &err)) {
        printf("%s: %s (scripts/fetch-testdata.sh fetches it)\n", path, err.msg);
        g_vocab = NULL;
        return -1;
    }
    return 0;
}

static int free_vocab(void **state) {
    (void)state;
    di_grammar_vocab_free(g_vocab);
    return 0;
}

/* Walks text through m; compares fast and slow masks every `every` steps
 * (0: never). Returns true when every token was allowed and the end is
 * accepting (and EOS allowed there). */
static bool walk(di_grammar_matcher *m, const char *text, uint32_t every) {
    size_t n = strlen(text), words = di_grammar_vocab_mask_words(g_vocab);
    uint32_t *ids = malloc((n + 1) * sizeof *ids);
    int64_t nt = di_grammar_vocab_greedy_tokenize(g_vocab, (const uint8_t *)text, n, ids, n + 1);
    assert_true(nt > 0);
    uint32_t *fast = malloc(words * 4), *slow = malloc(words * 4);
    di_error err;
    bool ok = true;
    for (int64_t i = 0; i <= nt && ok; i++) {
        assert_int_equal(di_grammar_matcher_fill_mask(m, fast, words, &err), DI_OK);
        if (every && i % every == 0) {
            assert_int_equal(di_grammar_matcher_fill_mask_slow(m, slow, words, &err), DI_OK);
            for (size_t w = 0; w < words; w++)
                if (fast[w] != slow[w])
                    fail_msg("step %lld of %s: mask word %zu fast %08x slow %08x", (long long)i, text, w, fast[w], slow[w]);
        }
        if (i == nt) {
            ok = di_grammar_matcher_is_accepting(m) && gt_bit(fast, EOS_ID);
            break;
        }
        ok = gt_bit(fast, ids[i]) && di_grammar_matcher_advance_token(m, ids[i]);
    }
    free(ids), free(fast), free(slow);
    return ok;
}

/* Compiles schema and walks text through it, the fast mask checked against
 * the reference at every step (walk's every = 1); fails the test on a
 * mismatch or when text is not accepted. */
static void walk_schema(const char *schema, const char *text) {
    di_grammar *g;
    di_error err;
    assert_int_equal(di_grammar_compile_json_schema(schema, strlen(schema), NULL, &g, &err), DI_OK);
    di_grammar_matcher *m;
    assert_int_equal(di_grammar_matcher_create(g, g_vocab, &m, &err), DI_OK);
    assert_true(walk(m, text, 1));
    di_grammar_matcher_free(m);
    di_grammar_free(g);
}

static void instances_walk_through_the_mask_token_by_token(void **state) {
    (void)state;
    if (!g_vocab) skip();
    const char *schema =
        "{\"type\":\"object\",\"properties\":{"
        "\"name\":{\"type\":\"string\",\"maxLength\":40},"
        "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150},"
        "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"maxItems\":4},"
        "\"kind\":{\"enum\":[\"cat\",\"dog\",null]},"
        "\"score\":{\"type\":\"number\",\"exclusiveMinimum\":-1.5},"
        "\"when\":{\"type\":\"string\",\"format\":\"date-time\"}},"
        "\"required\":[\"name\",\"age\"],\"additionalProperties\":false}";
    di_grammar *g;
    di_error err;
    assert_int_equal(di_grammar_compile_json_schema(schema, strlen(schema), NULL, &g, &err), DI_OK);
    di_grammar_matcher *m;
    assert_int_equal(di_grammar_matcher_create(g, g_vocab, &m, &err), DI_OK);
    const char *good[] = {
        "{\"name\":\"Ada Lovelace\",\"age\":36}",
        "{\"name\":\"\\\"quoted\\\" \\u00e9 ünïcödé 🦙\",\"age\":150,\"tags\":[\"a\",\"b c\"],\"kind\":null}",
        "{\"name\":\"x\",\"age\":0,\"score\":-1.25,\"when\":\"2024-02-29T12:30:00Z\"}",
        "{\"name\":\"Ada Lovelace\",\"age\":36,\"kind\":\"dog\"}",
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        di_grammar_matcher_reset(m);
        if (!walk(m, good[i], i == 1 ? 3 : 0)) fail_msg("rejected %s", good[i]);
    }
    const char *bad[] = {
        "{\"age\":36}", "{\"name\":\"x\",\"age\":151}", "{\"name\":\"x\",\"age\":1,\"extra\":1}",
        "{\"name\":\"x\",\"age\":1,\"score\":-1.5}", "{\"name\":\"x\",\"age\":1,\"tags\":[\"1\",\"2\",\"3\",\"4\",\"5\"]}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        di_grammar_matcher_reset(m);
        if (walk(m, bad[i], 0)) fail_msg("accepted %s", bad[i]);
    }
    di_grammar_matcher_free(m);
    di_grammar_free(g);
}

static void fast_mask_equals_reference_in_json_object_mode(void **state) {
    (void)state;
    if (!g_vocab) skip();
    di_grammar_options opt = di_grammar_options_default();
    opt.whitespace = DI_GRAMMAR_WS_FLEXIBLE;
    di_grammar *g;
    di_error err;
    assert_int_equal(di_grammar_compile_json_object(&opt, &g, &err), DI_OK);
    di_grammar_matcher *m;
    assert_int_equal(di_grammar_matcher_create(g, g_vocab, &m, &err), DI_OK);
    assert_true(walk(m, "{\"a\": [1, 2.5e-3, {\"b\": \"c\\n\"}],\n  \"d\": true}", 2));
    di_grammar_matcher_free(m);
    di_grammar_free(g);
}

/* vocab cskip against its definition, from the tokens' bytes: a node is
 * "content" when every token below it continues, from the node's byte on,
 * with JSON string content bytes forming a well-formed UTF-8 prefix; cskip
 * leads past the run of content siblings starting at the node. */
static void content_runs_match_the_token_bytes(void **state) {
    (void)state;
    if (!g_vocab) skip();
    const di_grammar_vocab *v = g_vocab;
    bool *only = malloc((size_t)v->n_nodes * sizeof *only);
    uint32_t n_content = 0, n_runs = 0;
    for (uint32_t i = 0; i < v->n_nodes; i++) {
        bool ok = true;
        for (uint32_t q = v->tok_start[i]; ok && q < v->tok_start[v->skip[i]]; q++) {
            uint32_t t = v->trie_tok[q];
            uint8_t u = MT_U8_START;
            for (uint64_t j = v->off[t] + v->depth[i]; ok && j < v->off[t + 1]; j++) {
                uint8_t x = v->data[j];
                u = mt_u8_next(u, x);
                ok = u != MT_U8_BAD && (x >= 0x80 || (x >= 0x20 && x != '"' && x != '\\'));
            }
        }
        only[i] = ok;
        n_content += ok;
    }
    for (uint32_t i = 0; i < v->n_nodes; i++) {
        uint32_t j = i;
        while (j < v->n_nodes && only[j] && (j == i || v->depth[j] == v->depth[i])) j = v->skip[j];
        if (j != i && j < v->n_nodes && v->depth[j] > v->depth[i]) fail_msg("node %u: walked below its level", i);
        if (v->cskip[i] != j) fail_msg("node %u (depth %u): cskip %u, expected %u", i, v->depth[i], v->cskip[i], j);
        n_runs += j > v->skip[i];
    }
    /* the vocabulary has both kinds, and runs longer than one subtree */
    assert_true(n_content > 1000 && n_content < v->n_nodes - 1000);
    assert_true(n_runs > 1000);
    free(only);
}

/* vocab frontier against its definition, from the tokens' bytes. A node
 * is on a content path when every character from the trie root to it is
 * string content (ASCII mt_json_content, or a UTF-8 character well formed
 * on every token through its first byte); frontier nodes are the first
 * nodes off such paths at a character boundary. Then below a node whose
 * path is content and ends at a character boundary, the tokens outside its
 * frontier entries are string content to their end, which is what the
 * content descend of token_mask_walk.c accepts unseen. */
static bool char_ok_below(const di_grammar_vocab *v, uint32_t a) {
    for (uint32_t q = v->tok_start[a]; q < v->tok_start[v->skip[a]]; q++) {
        uint32_t t = v->trie_tok[q];
        uint8_t u = MT_U8_START;
        for (uint64_t j = v->off[t] + v->depth[a]; j < v->off[t + 1]; j++) {
            u = mt_u8_next(u, v->data[j]);
            if (u == MT_U8_BAD) return false;
            if (u == MT_U8_START) break;
        }
    }
    return true;
}

static void frontier_matches_the_token_bytes(void **state) {
    (void)state;
    if (!g_vocab) skip();
    const di_grammar_vocab *v = g_vocab;
    /* per depth: the decoder state after the path to the last node seen
     * there, or 0xFF when that path left string content */
    uint8_t *after = malloc((size_t)v->max_len + 1);
    uint32_t g = 0, n_gok = 0, n_checked = 0;
    for (uint32_t i = 0; i < v->n_nodes; i++) {
        uint32_t d = v->depth[i];
        uint8_t b = v->byte[i], q = d ? after[d - 1] : MT_U8_START;
        bool front = q == MT_U8_START && (b < 0x80 ? !(b >= 0x20 && b != '"' && b != '\\') : !char_ok_below(v, i));
        if (front) {
            if (g >= v->n_frontier || v->frontier[g].node != i) fail_msg("node %u: missing from the frontier", i);
            const mt_frontier *f = &v->frontier[g++];
            assert_int_equal(f->skip, v->skip[i]);
            assert_int_equal(f->tok_lo, v->tok_start[i]);
            assert_int_equal(f->tok_hi, v->tok_start[v->skip[i]]);
            /* its row for the count descend: depth, byte, and the
             * characters above it (counted on its last token) */
            const mt_fnode *fn = &v->fnode[g - 1];
            uint32_t t = v->trie_tok[f->tok_hi - 1], ch = 0;
            for (uint32_t j = 0; j < d; j++) ch += (v->data[v->off[t] + j] & 0xC0) != 0x80;
            if (fn->dep != d || fn->byte != b || fn->ch != ch)
                fail_msg("node %u: fnode (%u, %u, %u), expected (%u, %u, %u)", i, fn->ch, fn->dep, fn->byte, ch, d, b);
        } else if (g < v->n_frontier && v->frontier[g].node == i) {
            fail_msg("node %u: in the frontier, not on its edge", i);
        }
        after[d] = front || q == 0xFF ? 0xFF : mt_u8_next(q, b);
        bool gok = after[d] == MT_U8_START;
        if (v->gspan[i].idx != g - front) fail_msg("node %u: gspan.idx %u, expected %u", i, v->gspan[i].idx, g - front);
        if (!gok) {
            if (v->gspan[i].cnt != UINT32_MAX) fail_msg("node %u: not on a content path, gspan.cnt %u", i, v->gspan[i].cnt);
            continue;
        }
        n_gok++;
        /* the entries lie in i's subtree; every other token below i is
         * content from i's next byte to its end (checked on every 16th
         * such node, to keep the test short) */
        mt_gspan gs = v->gspan[i];
        if (gs.cnt == UINT32_MAX) fail_msg("node %u: on a content path, gspan.cnt unset", i);
        for (uint32_t k = 0; k < gs.cnt; k++) {
            const mt_frontier *f = &v->frontier[gs.idx + k];
            assert_true(f->node > i && f->skip <= v->skip[i]);
        }
        if (n_gok % 16) continue;
        n_checked++;
        uint32_t k = 0;
        for (uint32_t q2 = v->tok_start[i + 1]; q2 < v->tok_start[v->skip[i]]; q2++) {
            while (k < gs.cnt && v->frontier[gs.idx + k].tok_hi <= q2) k++;
            if (k < gs.cnt && v->frontier[gs.idx + k].tok_lo <= q2) continue; /* under a frontier node */
            uint32_t t = v->trie_tok[q2];
            uint8_t u = MT_U8_START;
            for (uint64_t j = v->off[t] + d + 1; j < v->off[t + 1]; j++) {
                uint8_t x = v->data[j];
                u = mt_u8_next(u, x);
                if (u == MT_U8_BAD || (x < 0x80 && !(x >= 0x20 && x != '"' && x != '\\')))
                    fail_msg("node %u: token %u is not content below it, nor under a frontier node", i, t);
            }
        }
    }
    assert_int_equal(g, v->n_frontier);
    /* both kinds of node occur, and ill-formed characters start some of the frontier */
    uint32_t n_high = 0;
    for (uint32_t k = 0; k < v->n_frontier; k++) n_high += v->byte[v->frontier[k].node] >= 0x80;
    assert_true(v->n_frontier > 100 && n_gok > 10000 && n_checked > 100 && n_high > 0);
    free(after);
}

/* A byte-level vocabulary made for the content descend's edges: every
 * single byte (partial and ill-formed UTF-8 among them), tokens that are
 * prefixes of each other through a key's name, characters of two to four
 * bytes with and without a closing quote, and ill-formed sequences.
 * At an open object's key (named keys, one of them non-ASCII, or any
 * string) the fast masks equal the reference at every step. */
static void content_descend_masks_equal_reference_on_edge_tokens(void **state) {
    (void)state;
    static const char *extra[] = {
        "t", "ti", "tit", "titl", "title", "title\"", "title\":", "\"", "\":", "\",", "\"}", "\",\"",
        "x", "xy", "xy\"", "xy\":", "\xC3\xA9", "\xC3\xA9\"", "\xE4\x28", "\xE4\x28\"", "\xE4\xB8",
        "\xE4\xB8\xAD", "\xE4\xB8\xAD\"", "\xE4\xB8\xADx", "\xE4\xB8\xAD\xE4\xB8", "\xF0\x9F",
        "\xF0\x9F\xA6\x99", "\xF0\x9F\xA6\x99\"", "\xED\xA0\x80", "\xC0\xAF", "\xFF\"",
        "\\\"", "\\n", "a\\", "a\x01", "\x01\"", "\xC3\xBC", "\303\274ber",
        "\303\274b", "t\xC3\xBC", "\xC3\xA9t", "\xC3\xA9\xC3", "null", "\":null", ", \"", ",\"",
        "{\"", "{\"t", "{\"title\":", "12", "\"\xC3\xA9", "\"\xE4\xB8\xAD", "\"ti",
    };
    uint32_t n_extra = sizeof extra / sizeof extra[0];
    const char *toks[255 + sizeof extra / sizeof extra[0]];
    char singles[255][2];
    for (uint32_t b = 1; b < 256; b++) singles[b - 1][0] = (char)b, singles[b - 1][1] = 0, toks[b - 1] = singles[b - 1];
    for (uint32_t k = 0; k < n_extra; k++) toks[255 + k] = extra[k];
    di_grammar_vocab *v = gt_vocab(toks, 255 + n_extra);
    v->share_budget = 1; /* the shared cache too */
    /* open objects: named keys come in schema order, then any others;
     * regexes: a string whose first character (t, or u-umlaut) leads to
     * digits only, any other to any content: the content descend's
     * exception children must still be walked */
    static const struct {
        bool regex;
        const char *grammar, *text;
    } cases[] = {
        {false, "{\"type\":\"object\",\"properties\":{\"title\":{\"type\":\"integer\"},\"tag\":{\"type\":\"string\"}}}",
         "{\"title\":12,\"tag\":\"x\",\"xy\":null,\"\xE4\xB8\xAD\":\"\xC3\xA9\",\"\303\274ber\":null,"
         "\"a\\\"\xF0\x9F\xA6\x99\":1,\"ti\":{\"\":[]}}"},
        {false, "{\"type\":\"object\",\"properties\":{\"title\":{\"type\":\"integer\"},\"\303\274ber\":{\"type\":\"null\"}}}",
         "{\"title\":12,\"\303\274ber\":null,\"xy\":null,\"\xE4\xB8\xAD\":\"\xC3\xA9\",\"a\\\"\xF0\x9F\xA6\x99\":1,"
         "\"ti\":{\"\":[]},\"tag\":\"x\"}"},
        {true, "\"(t[0-9]*|[^t\"\\\\\\x00-\\x1F][^\"\\\\\\x00-\\x1F]*)\"", "\"xy\xE4\xB8\xAD\xC3\xA9t\""},
        {true, "\"(t[0-9]*|[^t\"\\\\\\x00-\\x1F][^\"\\\\\\x00-\\x1F]*)\"", "\"t12\""},
        {true, "\"(t[0-9]*|\303\274[0-9]*|[^t\303\274\"\\\\\\x00-\\x1F][^\"\\\\\\x00-\\x1F]*)\"", "\"\303\2741\""},
        {true, "\"(t[0-9]*|\303\274[0-9]*|[^t\303\274\"\\\\\\x00-\\x1F][^\"\\\\\\x00-\\x1F]*)\"", "\"xt\303\274\""},
    };
    size_t words = di_grammar_vocab_mask_words(v);
    uint32_t ids[256], *fast = malloc(words * 4), *slow = malloc(words * 4);
    for (size_t s = 0; s < sizeof cases / sizeof cases[0]; s++) {
        int64_t nt = di_grammar_vocab_greedy_tokenize(v, (const uint8_t *)cases[s].text, strlen(cases[s].text), ids, 256);
        assert_true(nt > 0 && nt <= 256);
        di_grammar *g;
        di_error err;
        const char *gr = cases[s].grammar;
        di_status st = cases[s].regex ? di_grammar_compile_regex(gr, strlen(gr), &g, &err)
                                      : di_grammar_compile_json_schema(gr, strlen(gr), NULL, &g, &err);
        if (st) fail_msg("case %zu: %s", s, err.msg);
        di_grammar_matcher *m;
        assert_int_equal(di_grammar_matcher_create(g, v, &m, &err), DI_OK);
        for (int64_t i = 0; i <= nt; i++) {
            assert_int_equal(di_grammar_matcher_fill_mask(m, fast, words, &err), DI_OK);
            assert_int_equal(di_grammar_matcher_fill_mask_slow(m, slow, words, &err), DI_OK);
            if (memcmp(fast, slow, words * 4)) fail_msg("case %zu step %lld: fast mask differs from the reference", s, (long long)i);
            if (i == nt) break;
            if (!gt_bit(fast, ids[i])) fail_msg("case %zu step %lld: token %u not allowed", s, (long long)i, ids[i]);
            assert_true(di_grammar_matcher_advance_token(m, ids[i]));
        }
        assert_true(di_grammar_matcher_is_accepting(m));
        di_grammar_matcher_free(m);
        di_grammar_free(g);
    }
    free(fast), free(slow);
    di_grammar_vocab_free(v);
}

/* Keys of an open object (a named property, in schema order, or any
 * string) hold both string content and the quote that closes the key:
 * fast masks at every step equal the reference. */
static void open_object_key_masks_equal_reference(void **state) {
    (void)state;
    if (!g_vocab) skip();
    const char *schema = "{\"type\":\"object\",\"properties\":{\"title\":{\"type\":\"string\"},"
                         "\"order\":{\"type\":\"integer\"},\"image\":{\"type\":\"string\"}}}";
    walk_schema(schema, "{\"title\":\"ünï\",\"order\":7,\"image\":\"\",\"t\u00e9 x\":\"a\\\"b\",\"\":null}");
}

/* The key of an extra member is marked open-string (every content token is
 * allowed at its start, taken from the per-tokenizer table without a walk);
 * a closed object has no such rule. Masks at keys whose names share
 * prefixes, hold escapes and UTF-8, equal the reference at every step. */
static void open_key_masks_equal_reference(void **state) {
    (void)state;
    const char *closed = "{\"type\":\"object\",\"properties\":{\"a\":{}},\"additionalProperties\":false}";
    di_grammar *g;
    di_error err;
    assert_int_equal(di_grammar_compile_json_schema(closed, strlen(closed), NULL, &g, &err), DI_OK);
    assert_null(g->open_start);
    di_grammar_free(g);
    const char *schema = "{\"type\":\"object\",\"properties\":{\"ab\":{\"type\":\"integer\"},"
                         "\"abc\":{\"type\":\"string\"},\"a\\\"q\":{},\"\u00e9t\u00e9\":{}},"
                         "\"additionalProperties\":{\"type\":\"boolean\"}}";
    assert_int_equal(di_grammar_compile_json_schema(schema, strlen(schema), NULL, &g, &err), DI_OK);
    assert_non_null(g->open_start);
    if (!g_vocab) {
        di_grammar_free(g);
        skip();
    }
    di_grammar_matcher *m;
    assert_int_equal(di_grammar_matcher_create(g, g_vocab, &m, &err), DI_OK);
    assert_true(walk(m, "{\"ab\":1,\"abc\":\"x\",\"a\\\"q\":null,\"a\":true,\"\u00e9t\":false,"
                        "\"\u00e9t\u00e9x\":true,\"abcd\":false,\"\\n\":true,\"\":false}", 1));
    di_grammar_matcher_reset(m);
    assert_false(walk(m, "{\"ab\":1,\"ab\":true}", 0)); /* a listed name is no extra key */
    di_grammar_matcher_free(m);
    di_grammar_free(g);
}

/* Whether every UTF-8 character loops (u8_returns) is explored once per
 * mid-character state (u8_memo). Strings that exclude one three-byte
 * character (so one lead byte reaches its own mid-character states, where
 * a single path dies) or every character of one lead byte, and one that
 * allows all: tokens holding the excluded characters must be rejected at
 * the string start and inside it. Fast masks equal the reference at every
 * step. */
static void utf8_loops_mask_like_the_reference(void **state) {
    (void)state;
    if (!g_vocab) skip();
    static const struct {
        const char *schema, *instance;
    } cases[] = {
        {"{\"type\":\"string\",\"pattern\":\"^[^\u4e2d]*$\"}", "\"ab\u6587\u5b57 \u00e9t\u00e9 x\u56fd\""},
        {"{\"type\":\"string\",\"pattern\":\"^[^\u0400-\u04ff]*$\"}", "\"ab\u6587\u5b57 \u00e9t\u00e9 x\u4e2d\""},
        {"{\"type\":\"string\"}", "\"ab\u6587\u4e2d \u00e9t\u00e9 x\u0416\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        di_grammar *g;
        di_grammar_matcher *m;
        di_error err;
        assert_int_equal(di_grammar_compile_json_schema(cases[i].schema, strlen(cases[i].schema), NULL, &g, &err), DI_OK);
        assert_int_equal(di_grammar_matcher_create(g, g_vocab, &m, &err), DI_OK);
        assert_true(walk(m, cases[i].instance, 1));
        di_grammar_matcher_free(m);
        di_grammar_free(g);
    }
}

/* Strings whose pattern is an automaton (rx_dfa): a search with a length
 * bound (one state per count) and an ambiguous pattern; the closing quote
 * lies inside the automaton, so tokens that run past the last allowed
 * character are rejected by the local classification itself. Fast masks
 * equal the reference at every step. */
static void pattern_automaton_masks_equal_reference(void **state) {
    (void)state;
    if (!g_vocab) skip();
    const char *schema = "{\"type\":\"object\",\"properties\":{"
                         "\"id\":{\"type\":\"string\",\"pattern\":\"[0-9a-fA-F]+\",\"minLength\":12,\"maxLength\":12},"
                         "\"slug\":{\"type\":\"string\",\"pattern\":\"^(?:[a-z]+-?)+$\"}},"
                         "\"required\":[\"id\",\"slug\"],\"additionalProperties\":false}";
    di_grammar *g;
    di_error err;
    assert_int_equal(di_grammar_compile_json_schema(schema, strlen(schema), NULL, &g, &err), DI_OK);
    di_grammar_matcher *m;
    assert_int_equal(di_grammar_matcher_create(g, g_vocab, &m, &err), DI_OK);
    assert_true(walk(m, "{\"id\":\")),Rig \\\"ab\u00e90\",\"slug\":\"some-slug-words\"}", 1));
    di_grammar_matcher_reset(m);
    assert_true(walk(m, "{\"id\":\"0123456789ab\",\"slug\":\"a\"}", 1));
    di_grammar_matcher_reset(m);
    assert_false(walk(m, "{\"id\":\"0123456789abc\",\"slug\":\"a\"}", 0)); /* 13 characters */
    di_grammar_matcher_free(m);
    di_grammar_free(g);
}

static void rollback_then_mask_matches_fresh_state(void **state) {
    (void)state;
    if (!g_vocab) skip();
    const char *re = "(ab|cd)+[0-9]{2,5}";
    di_grammar *g;
    di_error err;
    assert_int_equal(di_grammar_compile_regex(re, strlen(re), &g, &err), DI_OK);
    di_grammar_matcher *m, *fresh;
    assert_int_equal(di_grammar_matcher_create(g, g_vocab, &m, &err), DI_OK);
    assert_int_equal(di_grammar_matcher_create(g, g_vocab, &fresh, &err), DI_OK);
    uint32_t ids[32];
    int64_t n = di_grammar_vocab_greedy_tokenize(g_vocab, (const uint8_t *)"abcdab1234", 10, ids, 32);
    assert_true(n > 2);
    for (int64_t i = 0; i < n; i++) assert_true(di_grammar_matcher_advance_token(m, ids[i]));
    assert_int_equal(di_grammar_matcher_rollback(m, 2), DI_OK);
    for (int64_t i = 0; i < n - 2; i++) assert_true(di_grammar_matcher_advance_token(fresh, ids[i]));
    size_t words = di_grammar_vocab_mask_words(g_vocab);
    uint32_t *a = malloc(words * 4), *b = malloc(words * 4);
    assert_int_equal(di_grammar_matcher_fill_mask(m, a, words, &err), DI_OK);
    assert_int_equal(di_grammar_matcher_fill_mask_slow(fresh, b, words, &err), DI_OK);
    assert_memory_equal(a, b, words * 4);
    free(a), free(b);
    di_grammar_matcher_free(m);
    di_grammar_matcher_free(fresh);
    di_grammar_free(g);
}

/* Whole-state masks are stored in blocks (token_mask.c, store_mask): a
 * walk through more distinct states than a block holds, one byte at a
 * time through a sequence where every position allows different tokens,
 * then the same walk again after rolling back to the start, now served
 * from the stored masks. Every served mask must equal the one computed
 * on the first pass; a few are checked against the reference too. */
static void stored_masks_are_served_across_blocks(void **state) {
    (void)state;
    if (!g_vocab) skip();
    const char *re = "(abcdefghijklmnopqrstuvwxyz){3}";
    const char *text = "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz";
    size_t n = strlen(text), words = di_grammar_vocab_mask_words(g_vocab);
    di_grammar *g;
    di_grammar_matcher *m;
    di_error err;
    assert_int_equal(di_grammar_compile_regex(re, strlen(re), &g, &err), DI_OK);
    assert_int_equal(di_grammar_matcher_create(g, g_vocab, &m, &err), DI_OK);
    uint32_t *first = malloc((n + 1) * words * 4), *again = malloc(words * 4), *slow = malloc(words * 4);
    uint32_t ids[80];
    for (size_t i = 0; i < n; i++) {
        uint32_t id;
        assert_int_equal(di_grammar_vocab_greedy_tokenize(g_vocab, (const uint8_t *)text + i, 1, &id, 1), 1);
        ids[i] = id;
    }
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i <= n; i++) {
            uint32_t *mk = pass ? again : first + i * words;
            assert_int_equal(di_grammar_matcher_fill_mask(m, mk, words, &err), DI_OK);
            if (pass && memcmp(mk, first + i * words, words * 4)) fail_msg("stored mask %zu differs", i);
            if (pass && i % 25 == 0) {
                assert_int_equal(di_grammar_matcher_fill_mask_slow(m, slow, words, &err), DI_OK);
                assert_memory_equal(mk, slow, words * 4);
            }
            if (i < n) assert_true(di_grammar_matcher_advance_token(m, ids[i]));
        }
        assert_int_equal(di_grammar_matcher_rollback(m, (uint32_t)n), DI_OK);
    }
    free(first), free(again), free(slow);
    di_grammar_matcher_free(m);
    di_grammar_free(g);
}

/* Uncertain tokens (those that leave the local state, then go on through
 * the outside) are checked by stepping whole-state ids, with the parser
 * stepped only where a step is not known yet (check_uncertain). Right
 * after a backslash in a string every token that starts with an escape
 * character is uncertain. A byte-level vocabulary with every single byte
 * (partial and ill-formed UTF-8 among them), tokens that are prefixes of
 * each other past the escape, tokens that close the string and go on into
 * the next member, and non-ASCII and ill-formed bytes after the escape;
 * several escapes per string and strings per instance, so that later
 * masks step through what earlier ones learnt. Fast masks equal the
 * reference at every step. */
static void uncertain_tokens_after_escapes_equal_reference(void **state) {
    (void)state;
    static const char *extra[] = {
        "n", "na", "nab", "nabc", "n\"", "n\",", "n\",\"", "n\",\"b", "n\",\"b\":", "n\"}", "n\"]", "n\"x",
        "\"\"", "\"\",", "\"\",\"", "\"\"}", "\\\\", "\\\\\"", "\\\\\",", "\\\"", "\\n", "/", "/\"", "/\xF0\x9F\xA6\x99",
        "/\xF0\x9F\xA6\x99\"", "t\xC3\xA9", "t\xC3\xA9\",", "t\xE4\x28", "t\xE4\xB8", "t\xE4\xB8\xAD\"", "t\xFF",
        "t\xC0\xAF", "t\x01", "b\\", "b\\n", "b\\u", "f\\\"", "r\"\"", "u0", "u00", "u00e", "u00e9", "u00e9x",
        "u00e9\"", "u00e9\",", "uD83D", "u12G", "\xC3\xA9", "\xE4\xB8\xAD", "ab", "ab\\", "12", "12}", "\":",
        "\",\"", "\",", ",\"", "{\"", "\"]", "\"}", "null", "c\":\"", "nq", "nqz", "tq", "/q",
    };
    uint32_t n_extra = sizeof extra / sizeof extra[0];
    const char *toks[255 + sizeof extra / sizeof extra[0]];
    char singles[255][2];
    for (uint32_t b = 1; b < 256; b++) singles[b - 1][0] = (char)b, singles[b - 1][1] = 0, toks[b - 1] = singles[b - 1];
    for (uint32_t k = 0; k < n_extra; k++) toks[255 + k] = extra[k];
    di_grammar_vocab *v = gt_vocab(toks, 255 + n_extra);
    v->share_budget = 1; /* the shared cache too */
    static const struct {
        int kind; /* 0 schema, 1 regex, 2 any JSON object */
        const char *grammar, *text;
    } cases[] = {
        {0, "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"},\"b\":{\"type\":\"integer\"},"
            "\"c\":{\"type\":\"string\",\"maxLength\":6}},\"required\":[\"a\",\"b\"]}",
         "{\"a\":\"x\\nab\\\"\\\\\\u00e9\\/\xF0\x9F\xA6\x99\\t\xC3\xA9\\n\",\"b\":12,\"c\":\"\\n\\t\\u00e9\\\\\"}"},
        {0, "{\"type\":\"array\",\"items\":{\"type\":\"string\"}}",
         "[\"\\n\",\"\\\"\\\"\",\"ab\\\\\",\"\\u00e9x\",\"\\/\xE4\xB8\xAD\",\"\\b\\f\\r\"]"},
        {0, "{\"type\":\"object\",\"additionalProperties\":{\"type\":\"string\"}}",
         "{\"n\\\"\":\"\\n\",\"\\\\b\":\"\\\"\",\"c\":\"\\u00e9\\nab\"}"},
        {1, "\"([a-z]|\\\\[nt\"])*\"x[0-9]*", "\"ab\\nc\\\"\"x12"},
        {2, NULL, "{\"n\\\"\": [\"\\n\", \"\\u00e9\\\\\"], \"b\": {\"\\/\": \"\\\"\"}}"},
        /* a string that reads all ASCII content but q after an escape:
         * the tokens of an escape character and content (esc_tail) with a
         * q must be rejected, the others allowed (escape_loops) */
        {0, "{\"type\":\"string\",\"pattern\":\"^[^q]*$\"}", "\"ab\\nab\\tab\\/ab\\\"\""},
        {0, "{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":4}}", "[\"ab\\na\",\"a\\tq\"]"},
    };
    size_t words = di_grammar_vocab_mask_words(v);
    uint32_t ids[256], *fast = malloc(words * 4), *slow = malloc(words * 4);
    for (size_t s = 0; s < sizeof cases / sizeof cases[0]; s++) {
        int64_t nt = di_grammar_vocab_greedy_tokenize(v, (const uint8_t *)cases[s].text, strlen(cases[s].text), ids, 256);
        assert_true(nt > 0 && nt <= 256);
        di_grammar *g;
        di_error err;
        const char *gr = cases[s].grammar;
        di_grammar_options opt = di_grammar_options_default();
        opt.whitespace = DI_GRAMMAR_WS_FLEXIBLE;
        di_status st = cases[s].kind == 1   ? di_grammar_compile_regex(gr, strlen(gr), &g, &err)
                       : cases[s].kind == 2 ? di_grammar_compile_json_object(&opt, &g, &err)
                                            : di_grammar_compile_json_schema(gr, strlen(gr), NULL, &g, &err);
        if (st) fail_msg("case %zu: %s", s, err.msg);
        di_grammar_matcher *m;
        assert_int_equal(di_grammar_matcher_create(g, v, &m, &err), DI_OK);
        uint32_t n_unc = 0; /* masks right after a token that ends in a backslash */
        for (int64_t i = 0; i <= nt; i++) {
            assert_int_equal(di_grammar_matcher_fill_mask(m, fast, words, &err), DI_OK);
            assert_int_equal(di_grammar_matcher_fill_mask_slow(m, slow, words, &err), DI_OK);
            if (memcmp(fast, slow, words * 4)) {
                uint32_t t = 0;
                while (gt_bit(fast, t) == gt_bit(slow, t)) t++;
                fail_msg("case %zu step %lld: fast mask differs from the reference (token %u)", s, (long long)i, t);
            }
            n_unc += i > 0 && v->data[v->off[ids[i - 1] + 1] - 1] == '\\';
            if (i == nt) break;
            if (!gt_bit(fast, ids[i])) fail_msg("case %zu step %lld: token %u not allowed", s, (long long)i, ids[i]);
            assert_true(di_grammar_matcher_advance_token(m, ids[i]));
        }
        assert_true(n_unc > 0); /* some masks came right after a backslash */
        assert_true(di_grammar_matcher_is_accepting(m));
        di_grammar_matcher_free(m);
        di_grammar_free(g);
    }
    free(fast), free(slow);
    di_grammar_vocab_free(v);
}

/* The same with DeepSeek-V3's 128k tokens: some 3k of them are uncertain
 * right after a backslash. */
static void escapes_walk_equals_reference(void **state) {
    (void)state;
    if (!g_vocab) skip();
    const char *schema = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"},"
                         "\"b\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":8}}}}";
    walk_schema(schema, "{\"a\":\"say \\\"hi\\\"\\n\\tto \\u00e9\\\\ \xE4\xB8\xAD\\/\",\"b\":[\"\\n\",\"x\\\"\\\"\",\"\\u4e2d\"]}");
}

/* Class descend: a string whose pattern class is not all of string
 * content, with its length counted in the automaton's states (each count a
 * new state, nothing loops): the tokens made of class bytes are decided by
 * their length, and only the subtrees past the first byte off the class
 * are walked. Exact length (dies after the count), minimum only (loops
 * once reached), and small classes (letters, digits: below the table's
 * threshold, walked as before), on a byte-level
 * vocabulary with every single byte, runs of class bytes of many lengths,
 * prefixes of each other, class runs ending in a quote, an escape, a
 * non-ASCII or an ill-formed byte, or a byte off the class. Fast masks
 * equal the reference at every step. */
static void class_descend_masks_equal_reference(void **state) {
    (void)state;
    static const char *extra[] = {
        "ab", "abc", "abcd", "abcde", "abcdef", "abcdefgh", "abcdefghijkl", "abcdefghijklmnop", "aaaaaaaaaaaaaaaaaaaaaaaaa",
        "ab\"", "abc\",", "abcdefgh\"", "abcdefghijkl\"}", "ab\\\"", "ab\\\\", "a\\", "ab~", "a~b", "ab\xC3\xA9", "ab\xE4\x28",
        "ab\xE4\xB8", "ab\xFF", "\xC3\xA9", "\"\"", "\",\"", "\"}", "12", "123", "1234", "12345678", "123a", "12.5", "1e5",
        "12\"", " (x)", "(x)", "x{}", "{}\"", "=\\\"", ": ", "aaaa", "aaaaaaaa", "aaaaaaaaaaaaaaaa",
    };
    uint32_t n_extra = sizeof extra / sizeof extra[0];
    const char *toks[255 + sizeof extra / sizeof extra[0]];
    char singles[255][2];
    for (uint32_t b = 1; b < 256; b++) singles[b - 1][0] = (char)b, singles[b - 1][1] = 0, toks[b - 1] = singles[b - 1];
    for (uint32_t k = 0; k < n_extra; k++) toks[255 + k] = extra[k];
    di_grammar_vocab *v = gt_vocab(toks, 255 + n_extra);
    v->share_budget = 1;
    static const struct {
        const char *schema, *text;
    } cases[] = {
        {"{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\",\"pattern\":\"^[ !\\\"#$%&()*+,./0-9:;<=>?@A-Z\\\\\\\\a-z{|}]+$\","
         "\"minLength\":12,\"maxLength\":12},\"s\":{\"type\":\"string\",\"pattern\":\"^[ !\\\"#$%&()*+,./0-9:;<=>?@A-Z\\\\\\\\a-z{|}]+$\","
         "\"minLength\":9}},\"additionalProperties\":false}",
         "{\"id\":\"ab\\\"cd (x)1{}\",\"s\":\"abcdefghijkl\\\\\\\"x:  aaaaaaaaaaaaaaaa\"}"},
        {"{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\",\"pattern\":\"^[a-z]+$\",\"minLength\":3,\"maxLength\":5},"
         "\"n\":{\"type\":\"string\",\"pattern\":\"^[0-9]*$\",\"maxLength\":10}}}",
         "{\"id\":\"abcd\",\"n\":\"12345678\"}"},
    };
    size_t words = di_grammar_vocab_mask_words(v);
    uint32_t ids[256], *fast = malloc(words * 4), *slow = malloc(words * 4);
    for (size_t s = 0; s < sizeof cases / sizeof cases[0]; s++) {
        int64_t nt = di_grammar_vocab_greedy_tokenize(v, (const uint8_t *)cases[s].text, strlen(cases[s].text), ids, 256);
        assert_true(nt > 0 && nt <= 256);
        di_grammar *g;
        di_error err;
        const char *gr = cases[s].schema;
        if (di_grammar_compile_json_schema(gr, strlen(gr), NULL, &g, &err)) fail_msg("case %zu: %s", s, err.msg);
        di_grammar_matcher *m;
        assert_int_equal(di_grammar_matcher_create(g, v, &m, &err), DI_OK);
        for (int64_t i = 0; i <= nt; i++) {
            assert_int_equal(di_grammar_matcher_fill_mask(m, fast, words, &err), DI_OK);
            assert_int_equal(di_grammar_matcher_fill_mask_slow(m, slow, words, &err), DI_OK);
            if (memcmp(fast, slow, words * 4)) {
                uint32_t t = 0;
                while (gt_bit(fast, t) == gt_bit(slow, t)) t++;
                fail_msg("case %zu step %lld: fast mask differs from the reference (token %u)", s, (long long)i, t);
            }
            if (i == nt) break;
            if (!gt_bit(fast, ids[i])) fail_msg("case %zu step %lld: token %u not allowed", s, (long long)i, ids[i]);
            assert_true(di_grammar_matcher_advance_token(m, ids[i]));
        }
        assert_true(di_grammar_matcher_is_accepting(m));
        di_grammar_matcher_free(m);
        di_grammar_free(g);
    }
    free(fast), free(slow);
    di_grammar_vocab_free(v);
}

/* Count descend (token_mask_length.c): at a string-interior root on the content
 * fast path, the tokens that are not content alone are found from the
 * per-tokenizer frontier list, each frontier node decided from the state k
 * characters on. A byte-level vocabulary with runs of 0 to 9 characters
 * (ASCII or multi-byte) ahead of a quote, an escape, a control byte, a
 * partial or ill-formed character: bounded members of an object (the
 * string closes into the rest of the object, which the classification
 * walks), one with a minimum length (the quote dead for the first
 * counts), one unbounded in effect (exact loops). Every count of every
 * string is checked against the reference, characters added one at a
 * time, so each frontier path meets the bound at every distance. */
static void count_descend_masks_equal_reference(void **state) {
    (void)state;
    static const char *heads[] = {"", "a", "ab", "abc", "abcd", "abcde", "abcdef", "abcdefg", "abcdefgh", "abcdefghi",
                                  "\xC3\xA9", "a\xC3\xA9", "\xE4\xB8\xAD\xE4\xB8\xAD", "\xF0\x9F\xA6\x99x", "  ", "    "};
    static const char *tails[] = {"\"", "\",", "\"}", "\",\"", "\n", "\\n", "\\\"", "\\u00e9", "\\u00", "\\", "\x01",
                                  "\xC3", "\xE4\x28", "\xE4\xB8", "\xFF", "\"\xC3\xA9"};
    enum { N_HEADS = sizeof heads / sizeof heads[0], N_TAILS = sizeof tails / sizeof tails[0] };
    static char extra[N_HEADS * N_TAILS][32];
    const char *toks[255 + N_HEADS * N_TAILS + N_HEADS];
    char singles[255][2];
    uint32_t n = 0;
    for (uint32_t b = 1; b < 256; b++) singles[b - 1][0] = (char)b, singles[b - 1][1] = 0, toks[n++] = singles[b - 1];
    for (uint32_t h = 0; h < N_HEADS; h++) {
        if (h && strlen(heads[h]) > 1) toks[n++] = heads[h]; /* the run alone: a content token */
        for (uint32_t t = 0; t < N_TAILS; t++) {
            snprintf(extra[h * N_TAILS + t], sizeof extra[0], "%s%s", heads[h], tails[t]);
            if (strlen(extra[h * N_TAILS + t]) > 1) toks[n++] = extra[h * N_TAILS + t];
        }
    }
    di_grammar_vocab *v = gt_vocab(toks, n);
    v->share_budget = 1; /* the shared cache too */
    const char *schema =
        "{\"type\":\"object\",\"additionalProperties\":false,\"properties\":{"
        "\"a\":{\"type\":\"string\",\"maxLength\":3},\"b\":{\"type\":\"string\",\"minLength\":3,\"maxLength\":7},"
        "\"c\":{\"type\":\"string\",\"maxLength\":12},\"d\":{\"type\":\"string\",\"maxLength\":5000}},"
        "\"required\":[\"a\",\"b\",\"c\",\"d\"]}";
    static const struct {
        const char *open;
        uint32_t max;
    } members[] = {{"{\"a\":\"", 3}, {"\",\"b\":\"", 7}, {"\",\"c\":\"", 12}, {"\",\"d\":\"", 14}};
    static const char *chars[] = {"a", "\xC3\xA9", "z", "\xE4\xB8\xAD", "\\n", " "}; /* one character each */
    size_t words = di_grammar_vocab_mask_words(v);
    uint32_t *fast = malloc(words * 4), *slow = malloc(words * 4);
    di_grammar *g;
    di_error err;
    assert_int_equal(di_grammar_compile_json_schema(schema, strlen(schema), NULL, &g, &err), DI_OK);
    /* twice: the second matcher meets the strings with the first one's
     * classifications published in the shared cache */
    for (int pass = 0; pass < 2; pass++) {
        di_grammar_matcher *m;
        assert_int_equal(di_grammar_matcher_create(g, v, &m, &err), DI_OK);
        for (size_t s = 0; s < sizeof members / sizeof members[0]; s++) {
            const char *o = members[s].open;
            assert_true(di_grammar_matcher_advance_bytes(m, (const uint8_t *)o, strlen(o)));
            for (uint32_t k = 0;; k++) {
                assert_int_equal(di_grammar_matcher_fill_mask(m, fast, words, &err), DI_OK);
                assert_int_equal(di_grammar_matcher_fill_mask_slow(m, slow, words, &err), DI_OK);
                if (memcmp(fast, slow, words * 4)) {
                    uint32_t t = 0;
                    while (gt_bit(fast, t) == gt_bit(slow, t)) t++;
                    fail_msg("pass %d member %zu after %u characters: token %u fast %d reference %d", pass, s, k, t,
                             gt_bit(fast, t), gt_bit(slow, t));
                }
                if (k == members[s].max) break;
                const char *x = chars[(k + s + (uint32_t)pass) % (sizeof chars / sizeof chars[0])];
                assert_true(di_grammar_matcher_advance_bytes(m, (const uint8_t *)x, strlen(x)));
            }
        }
        assert_true(di_grammar_matcher_advance_bytes(m, (const uint8_t *)"\"}", 2));
        assert_true(di_grammar_matcher_is_accepting(m));
        di_grammar_matcher_free(m);
    }
    di_grammar_free(g);
    free(fast), free(slow);
    di_grammar_vocab_free(v);
}

/* The same with DeepSeek-V3's 128k tokens (Github_easy o10012's class). */
static void class_descend_walk_equals_reference(void **state) {
    (void)state;
    if (!g_vocab) skip();
    const char *schema = "{\"type\":\"object\",\"properties\":{"
                         "\"id\":{\"type\":\"string\",\"pattern\":\"^[ !\\\"#$%&()*+,./0-9:;<=>?@A-Z\\\\\\\\a-z{|}]+$\","
                         "\"minLength\":20,\"maxLength\":20},"
                         "\"s\":{\"type\":\"string\",\"pattern\":\"^[ !\\\"#$%&()*+,./0-9:;<=>?@A-Z\\\\\\\\a-z{|}]+$\","
                         "\"minLength\":10}},\"additionalProperties\":false}";
    walk_schema(schema, "{\"id\":\"say \\\"hi\\\" to (all) 12\",\"s\":\"The quick brown fox: {jumps} \\\\ over\"}");
}

/* The real tokenizer (text module) through the adapter: its encoding of
 * an instance walks through the mask, and its EOS ends the walk. */
static void tokenizer_encoding_walks_through_the_mask(void **state) {
    (void)state;
    char path[1024];
    di_test_data(path, sizeof path, "tokenizer/deepseek-v3");
    di_tokenizer *tok = NULL;
    di_error err;
    if (di_tok_load(path, &tok, &err)) fail_msg("%s: %s", path, err.msg);
    di_grammar_vocab *v = NULL;
    assert_int_equal(di_grammar_vocab_from_tokenizer(tok, &v, &err), DI_OK);
    const char *schema = "{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{"
                         "\"id\":{\"type\":\"string\",\"format\":\"uuid\"},\"ok\":{\"type\":\"boolean\"}},"
                         "\"required\":[\"id\"]},\"minItems\":1}";
    const char *inst = "[{\"id\":\"123e4567-e89b-12d3-a456-426614174000\",\"ok\":true},"
                       "{\"id\":\"00000000-0000-0000-0000-00000000abcd\"}]";
    di_grammar *g;
    assert_int_equal(di_grammar_compile_json_schema(schema, strlen(schema), NULL, &g, &err), DI_OK);
    di_grammar_matcher *m;
    assert_int_equal(di_grammar_matcher_create(g, v, &m, &err), DI_OK);
    di_tok_ids ids = {0};
    assert_int_equal(di_tok_encode(tok, inst, strlen(inst), false, false, &ids, &err), DI_OK);
    size_t words = di_grammar_vocab_mask_words(v);
    uint32_t *mask = malloc(words * 4);
    for (size_t i = 0; i < ids.n; i++) {
        assert_int_equal(di_grammar_matcher_fill_mask(m, mask, words, &err), DI_OK);
        if (!gt_bit(mask, (uint32_t)ids.data[i])) fail_msg("token %zu (id %d) not allowed", i, ids.data[i]);
        assert_true(di_grammar_matcher_advance_token(m, (uint32_t)ids.data[i]));
    }
    assert_int_equal(di_grammar_matcher_fill_mask(m, mask, words, &err), DI_OK);
    int32_t eos = di_tok_eos(tok);
    assert_true(gt_bit(mask, (uint32_t)eos));
    assert_true(di_grammar_matcher_advance_token(m, (uint32_t)eos));
    assert_true(di_grammar_matcher_is_terminated(m));
    free(mask);
    di_tok_ids_free(&ids);
    di_grammar_matcher_free(m);
    di_grammar_free(g);
    di_grammar_vocab_free(v);
    di_tok_free(tok);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(instances_walk_through_the_mask_token_by_token),
        cmocka_unit_test(fast_mask_equals_reference_in_json_object_mode),
        cmocka_unit_test(rollback_then_mask_matches_fresh_state),
        cmocka_unit_test(stored_masks_are_served_across_blocks),
        cmocka_unit_test(content_runs_match_the_token_bytes),
        cmocka_unit_test(open_object_key_masks_equal_reference),
        cmocka_unit_test(frontier_matches_the_token_bytes),
        cmocka_unit_test(content_descend_masks_equal_reference_on_edge_tokens),
        cmocka_unit_test(pattern_automaton_masks_equal_reference),
        cmocka_unit_test(utf8_loops_mask_like_the_reference),
        cmocka_unit_test(open_key_masks_equal_reference),
        cmocka_unit_test(uncertain_tokens_after_escapes_equal_reference),
        cmocka_unit_test(escapes_walk_equals_reference),
        cmocka_unit_test(class_descend_masks_equal_reference),
        cmocka_unit_test(class_descend_walk_equals_reference),
        cmocka_unit_test(count_descend_masks_equal_reference),
        cmocka_unit_test(tokenizer_encoding_walks_through_the_mask),
    };
    return cmocka_run_group_tests(tests, load_vocab, free_vocab);
}
