/* model/engram: every piece against DeepSeek's own code, through the goldens
 * of scripts/gen_goldens_engram.py (tests/data/golden/engram/engram.json):
 * the compressed vocabulary of a small byte-level BPE (DeepInfer
 * CompressedVocabulary), the numpy RNG port (numpy itself), multipliers,
 * primes and offsets (NgramHashMapping / EngramLayout / make_offsets), n-gram
 * rows (fill_engram_row), hashed rows (TK engram_hash_ref), the gate (TK
 * engram_gate_ref) and FP8 table rows (torch float8_e4m3fn times 2^(s-127));
 * plus the real V4.1-Flash constants written out by hand, and the errors. */
#include "test_util.h"

#include "model/engram.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static json_t *golden(void) {
    static json_t *doc;
    if (!doc) {
        char path[4096];
        json_error_t jerr;
        doc = json_load_file(di_test_path(path, sizeof path, "tests/data/golden/engram/engram.json"), 0, &jerr);
        if (!doc) print_error("engram.json: %s (line %d)\n", jerr.text, jerr.line);
        assert_non_null(doc);
    }
    return doc;
}

static json_t *get(const json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    if (!v) print_error("golden: missing key %s\n", key);
    assert_non_null(v);
    return v;
}

static int64_t jint(const json_t *v) {
    if (json_is_string(v)) return strtoll(json_string_value(v), NULL, 10);
    assert_true(json_is_integer(v));
    return (int64_t)json_integer_value(v);
}

static di_tokenizer *load_tokenizer(const char *path) {
    di_tokenizer *t = NULL;
    di_error err = {0};
    di_status s = di_tok_load_json(path, &t, &err);
    if (s) print_error("%s: %s\n", path, err.msg);
    assert_int_equal(s, DI_OK);
    return t;
}

/* ---- compressed vocabulary ----------------------------------------------------- */

static void vocab_matches_deepinfer_compressed_vocabulary(void **state) {
    (void)state;
    const json_t *g = get(golden(), "vocab");
    char path[4096];
    di_tokenizer *t = load_tokenizer(di_test_path(path, sizeof path, "tests/data/golden/engram/tokenizer.json"));
    di_engram_vocab v;
    di_error err = {0};
    assert_int_equal(di_engram_vocab_build(t, &v, &err), DI_OK);
    const json_t *lookup = get(g, "lookup");
    assert_int_equal(v.n_vocab, jint(get(g, "n_vocab")));
    assert_int_equal((size_t)v.n_vocab, json_array_size(lookup));
    int bad = 0;
    for (int32_t i = 0; i < v.n_vocab; i++) {
        int64_t want = jint(json_array_get(lookup, (size_t)i));
        if (v.lookup[i] != want && bad++ < 10) {
            size_t n;
            const char *raw = di_tok_text(t, i, &n);
            print_error("id %d (%.*s): compressed %d, DeepInfer %lld\n", i, (int)n, raw, v.lookup[i], (long long)want);
        }
    }
    assert_int_equal(bad, 0);
    assert_int_equal(v.n_compressed, jint(get(g, "n_compressed")));
    assert_int_equal(v.pad, v.lookup[2]);
    di_engram_vocab_free(&v);
    di_tok_free(t);
}

static uint64_t fnv1a64_i32(const int32_t *a, int32_t n) {
    uint64_t h = 0xCBF29CE484222325ull;
    for (int32_t i = 0; i < n; i++)
        for (int b = 0; b < 4; b++) h = (h ^ (((uint32_t)a[i] >> (8 * b)) & 0xffu)) * 0x100000001B3ull;
    return h;
}

/* The DeepSeek-V3 tokenizer (128815 ids; testdata/, fetched) exercises the
 * normalizer on every real piece. */
static void vocab_matches_deepinfer_on_deepseek_v3_tokenizer(void **state) {
    (void)state;
    const json_t *g = json_object_get(golden(), "deepseek_v3_vocab");
    char path[4096];
    di_test_data(path, sizeof path, "tokenizer/deepseek-v3/tokenizer.json");
    if (!json_is_object(g)) skip();
    if (access(path, R_OK) != 0) fail_msg("%s missing (scripts/fetch-testdata.sh fetches it)", path);
    di_tokenizer *t = load_tokenizer(path);
    di_engram_vocab v;
    di_error err = {0};
    assert_int_equal(di_engram_vocab_build(t, &v, &err), DI_OK);
    assert_int_equal(v.n_vocab, jint(get(g, "n_vocab")));
    const json_t *sample = get(g, "sample");
    int64_t stride = jint(get(g, "sample_stride"));
    for (size_t i = 0; i < json_array_size(sample); i++)
        assert_int_equal(v.lookup[(int64_t)i * stride], jint(json_array_get(sample, i)));
    char hex[17];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)fnv1a64_i32(v.lookup, v.n_vocab));
    assert_string_equal(hex, json_string_value(get(g, "fnv1a64_hex")));
    assert_int_equal(v.n_compressed, jint(get(g, "n_compressed")));
    di_engram_vocab_free(&v);
    di_tok_free(t);
}

/* Writes a minimal byte-level BPE tokenizer.json whose added tokens are
 * given as JSON text; returns the path (static buffer). */
static const char *write_tokenizer(const char *added) {
    static char path[] = "/tmp/di_test_engram_XXXXXX";
    strcpy(path, "/tmp/di_test_engram_XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    assert_non_null(f);
    fprintf(f,
            "{\"added_tokens\":[%s],\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,"
            "\"trim_offsets\":true,\"use_regex\":true},\"decoder\":{\"type\":\"ByteLevel\"},"
            "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"c\":2,\"d\":3},\"merges\":[]}}",
            added);
    fclose(f);
    return path;
}

#define ADDED(id, text) "{\"id\":" #id ",\"content\":\"" text "\",\"single_word\":false,\"lstrip\":false," \
                        "\"rstrip\":false,\"normalized\":false,\"special\":true}"

static void vocab_rejects_pad_not_at_id_2(void **state) {
    (void)state;
    const char *cases[] = {ADDED(4, "\\uff5c"), ADDED(4, "<\\uff5c\\u2581pad\\u2581\\uff5c>")};
    const char *want[] = {"has no", "got 4"};
    for (int i = 0; i < 2; i++) {
        const char *path = write_tokenizer(cases[i]);
        di_tokenizer *t = load_tokenizer(path);
        unlink(path);
        di_engram_vocab v;
        di_error err = {0};
        assert_int_equal(di_engram_vocab_build(t, &v, &err), DI_ERR_FORMAT);
        if (!strstr(err.msg, want[i])) print_error("message: %s\n", err.msg);
        assert_non_null(strstr(err.msg, want[i]));
        assert_null(v.lookup);
        di_tok_free(t);
    }
}

/* ---- numpy RNG -------------------------------------------------------------------- */

static void np_rng_matches_numpy_integers(void **state) {
    (void)state;
    const json_t *g = get(golden(), "rng"), *cases = get(g, "cases");
    assert_true(json_array_size(cases) > 300);
    size_t i;
    const json_t *c;
    json_array_foreach(cases, i, c) {
        di_engram_np_rng r;
        di_engram_np_rng_seed(&r, strtoull(json_string_value(get(c, "seed")), NULL, 10));
        const json_t *vals = get(c, "values");
        int64_t got[8];
        size_t n = json_array_size(vals);
        assert_true(n <= 8);
        di_error err = {0};
        assert_int_equal(di_engram_np_rng_integers(&r, jint(get(c, "low")), jint(get(c, "high")), n, got, &err), DI_OK);
        for (size_t k = 0; k < n; k++) {
            if (got[k] != jint(json_array_get(vals, k)))
                print_error("seed %s low %s high %s [%zu]: %lld, numpy %s\n", json_string_value(get(c, "seed")),
                            json_string_value(get(c, "low")), json_string_value(get(c, "high")), k,
                            (long long)got[k], json_string_value(json_array_get(vals, k)));
            assert_int_equal(got[k], jint(json_array_get(vals, k)));
        }
    }
}

/* Calls of different ranges on one generator: 32-bit-range draws use the
 * buffered half of a 64-bit draw, so the call sequence matters. */
static void np_rng_matches_numpy_mixed_stream(void **state) {
    (void)state;
    const json_t *g = get(golden(), "rng"), *stream = get(g, "stream");
    di_engram_np_rng r;
    di_engram_np_rng_seed(&r, (uint64_t)jint(get(g, "stream_seed")));
    size_t i;
    const json_t *c;
    json_array_foreach(stream, i, c) {
        const json_t *vals = get(c, "values");
        int64_t got[4];
        size_t n = json_array_size(vals);
        assert_int_equal(di_engram_np_rng_integers(&r, 0, jint(get(c, "high")), n, got, NULL), DI_OK);
        for (size_t k = 0; k < n; k++) assert_int_equal(got[k], jint(json_array_get(vals, k)));
    }
}

static void np_rng_rejects_empty_range(void **state) {
    (void)state;
    di_engram_np_rng r;
    di_engram_np_rng_seed(&r, 1);
    int64_t out[1];
    di_error err = {0};
    assert_int_equal(di_engram_np_rng_integers(&r, 5, 5, 1, out, &err), DI_ERR_INVALID_ARG);
    assert_int_equal(di_engram_np_rng_integers(&r, 6, 5, 1, out, &err), DI_ERR_INVALID_ARG);
}

/* ---- layout -------------------------------------------------------------------------- */

static di_engram_config config_of(const json_t *c, int32_t *ids /* (>= 8) */) {
    const json_t *lids = get(c, "layer_ids");
    assert_true(json_array_size(lids) <= 8);
    for (size_t i = 0; i < json_array_size(lids); i++) ids[i] = (int32_t)jint(json_array_get(lids, i));
    return (di_engram_config){.layer_ids = ids,
                              .n_layers = (int32_t)json_array_size(lids),
                              .max_ngram = (int32_t)jint(get(c, "max_ngram")),
                              .n_heads = (int32_t)jint(get(c, "n_heads")),
                              .vocab_size = jint(get(c, "engram_vocab_size")),
                              .compressed_vocab = jint(get(c, "compressed_vocab")),
                              .seed = (uint64_t)jint(get(c, "seed"))};
}

static void layout_matches_ngram_hash_mapping(void **state) {
    (void)state;
    size_t i;
    const json_t *c;
    json_array_foreach(get(golden(), "layouts"), i, c) {
        int32_t ids[8];
        di_engram_config cfg = config_of(c, ids);
        di_engram_layout lay;
        di_error err = {0};
        di_status s = di_engram_layout_create(&cfg, &lay, &err);
        if (s) print_error("%s: %s\n", json_string_value(get(c, "name")), err.msg);
        assert_int_equal(s, DI_OK);
        assert_int_equal(lay.n_layers, cfg.n_layers);
        for (int32_t l = 0; l < lay.n_layers; l++) {
            const di_engram_layer *L = &lay.layers[l];
            const json_t *m = json_array_get(get(c, "multipliers"), (size_t)l);
            const json_t *p = json_array_get(get(c, "primes"), (size_t)l);
            const json_t *o = json_array_get(get(c, "offsets"), (size_t)l);
            assert_int_equal(json_array_size(m), (size_t)L->max_ngram);
            for (int32_t n = 0; n < L->max_ngram; n++) assert_int_equal(L->multipliers[n], jint(json_array_get(m, (size_t)n)));
            assert_int_equal(json_array_size(p), (size_t)L->n_cols);
            for (int32_t k = 0; k < L->n_cols; k++) {
                assert_int_equal(L->primes[k], jint(json_array_get(p, (size_t)k)));
                assert_int_equal(L->offsets[k], jint(json_array_get(o, (size_t)k)));
            }
            assert_int_equal(L->n_rows, jint(json_array_get(get(c, "row_sums"), (size_t)l)));
        }
        assert_ptr_equal(di_engram_layout_find(&lay, ids[0]), &lay.layers[0]);
        di_engram_layout_free(&lay);
    }
}

/* Written out from the notes (v41_forward_and_oracle.md 2.8), not the JSON:
 * engram_layer_ids [1, 14], max_ngram 4, 8 heads, engram_vocab_size 16000000
 * (primes from 15999999 up), compressed vocab 99092; the row sums equal the
 * config's engram_num_embeddings. */
static void layout_reproduces_v41_flash_constants(void **state) {
    (void)state;
    const int32_t ids[] = {1, 14};
    di_engram_config cfg = {.layer_ids = ids, .n_layers = 2, .max_ngram = 4, .n_heads = 8,
                            .vocab_size = 16000000, .compressed_vocab = 99092, .seed = 0};
    di_engram_layout lay;
    di_error err = {0};
    assert_int_equal(di_engram_layout_create(&cfg, &lay, &err), DI_OK);
    const int64_t l1[] = {76632096046245, 4839876093313, 35959672319349, 73987337458391};
    const int64_t l14[] = {67716810739261, 51510806800915, 30921347202721, 82619226485591};
    for (int n = 0; n < 4; n++) {
        assert_int_equal(lay.layers[0].multipliers[n], l1[n]);
        assert_int_equal(lay.layers[1].multipliers[n], l14[n]);
    }
    assert_int_equal(lay.layers[0].primes[0], 16000057);
    assert_int_equal(lay.layers[0].primes[7], 16000183);
    assert_int_equal(lay.layers[0].primes[8], 16000189);
    assert_int_equal(lay.layers[0].primes[23], 16000463);
    assert_int_equal(lay.layers[1].primes[0], 16000477);
    assert_int_equal(lay.layers[1].primes[23], 16000889);
    assert_int_equal(lay.layers[0].n_rows, 384006168);
    assert_int_equal(lay.layers[1].n_rows, 384016682);
    assert_int_equal(lay.layers[1].offsets[23], 384016682 - 16000889);
    di_engram_layout_free(&lay);
}

static void layout_rejects_bad_configs(void **state) {
    (void)state;
    const int32_t ids[] = {1, 1}, neg[] = {-1};
    const di_engram_config ok = {.layer_ids = ids, .n_layers = 1, .max_ngram = 4, .n_heads = 8,
                                 .vocab_size = 1000, .compressed_vocab = 50};
    struct { di_engram_config cfg; di_status want; } cases[] = {
        {ok, DI_OK},
        {ok, DI_ERR_INVALID_ARG}, /* duplicate layer id */
        {ok, DI_ERR_UNSUPPORTED}, /* max_ngram 1 */
        {ok, DI_ERR_UNSUPPORTED}, /* 0 heads */
        {ok, DI_ERR_INVALID_ARG}, /* empty compressed vocab */
        {ok, DI_ERR_INVALID_ARG}, /* negative layer id */
        {ok, DI_ERR_RANGE},       /* rows past int32 */
        {ok, DI_ERR_UNSUPPORTED}, /* seed + 10007 * id past 64 bits */
    };
    cases[1].cfg.n_layers = 2;
    cases[2].cfg.max_ngram = 1;
    cases[3].cfg.n_heads = 0;
    cases[4].cfg.compressed_vocab = 0;
    cases[5].cfg.layer_ids = neg;
    cases[6].cfg.vocab_size = 400000000; /* 24 primes of ~4e8 */
    cases[7].cfg.seed = UINT64_MAX - 5;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        di_engram_layout lay;
        di_error err = {0};
        di_status s = di_engram_layout_create(&cases[i].cfg, &lay, &err);
        if (s != cases[i].want) print_error("case %zu: status %d (%s)\n", i, s, err.msg);
        assert_int_equal(s, cases[i].want);
        if (s) assert_null(lay.layers);
        di_engram_layout_free(&lay);
    }
}

/* ---- n-gram rows and hash ---------------------------------------------------------------- */

static int32_t read_ids(const json_t *a, int32_t *out, size_t cap) {
    assert_true(json_array_size(a) <= cap);
    for (size_t i = 0; i < json_array_size(a); i++) out[i] = (int32_t)jint(json_array_get(a, i));
    return (int32_t)json_array_size(a);
}

static const json_t *layout_named(const char *name) {
    size_t i;
    const json_t *c;
    json_array_foreach(get(golden(), "layouts"), i, c) if (!strcmp(json_string_value(get(c, "name")), name)) return c;
    fail_msg("no layout %s", name);
    return NULL;
}

static void check_ngram_rows(const json_t *h, int32_t max_ngram) {
    int32_t comp[64], want[DI_ENGRAM_MAX_NGRAM], got[DI_ENGRAM_MAX_NGRAM];
    int32_t n = read_ids(get(h, "comp"), comp, 64);
    int32_t pad = (int32_t)jint(get(h, "pad"));
    for (int32_t p = 0; p < n; p++) {
        assert_int_equal(read_ids(json_array_get(get(h, "ngram_ids"), (size_t)p), want, DI_ENGRAM_MAX_NGRAM), max_ngram);
        assert_int_equal(di_engram_ngram_row(comp, n, p, max_ngram, pad, got, NULL), DI_OK);
        for (int32_t r = 0; r < max_ngram; r++) assert_int_equal(got[r], want[r]);
    }
}

static void ngram_rows_match_fill_engram_row(void **state) {
    (void)state;
    size_t i;
    const json_t *h;
    json_array_foreach(get(golden(), "hash"), i, h)
        check_ngram_rows(h, (int32_t)jint(get(layout_named(json_string_value(get(h, "layout"))), "max_ngram")));
    const json_t *img = get(golden(), "ngram_image");
    check_ngram_rows(img, (int32_t)jint(get(layout_named(json_string_value(get(img, "layout"))), "max_ngram")));
    /* the pad is the compressed id of raw id 2 */
    const json_t *lut = get(get(golden(), "vocab"), "lookup");
    assert_int_equal(jint(get(img, "pad")), jint(json_array_get(lut, 2)));
}

static void hash_matches_engram_hash_ref(void **state) {
    (void)state;
    size_t i;
    const json_t *h;
    json_array_foreach(get(golden(), "hash"), i, h) {
        int32_t ids[8];
        di_engram_config cfg = config_of(layout_named(json_string_value(get(h, "layout"))), ids);
        di_engram_layout lay;
        assert_int_equal(di_engram_layout_create(&cfg, &lay, NULL), DI_OK);
        const json_t *rows = get(h, "ngram_ids"), *index = get(h, "index");
        for (int32_t l = 0; l < lay.n_layers; l++) {
            const di_engram_layer *L = &lay.layers[l];
            for (size_t t = 0; t < json_array_size(rows); t++) {
                int32_t ng[DI_ENGRAM_MAX_NGRAM];
                int64_t got[DI_ENGRAM_MAX_COLS];
                read_ids(json_array_get(rows, t), ng, DI_ENGRAM_MAX_NGRAM);
                di_error err = {0};
                assert_int_equal(di_engram_hash_row(L, ng, got, &err), DI_OK);
                const json_t *want = json_array_get(json_array_get(index, (size_t)l), t);
                assert_int_equal(json_array_size(want), (size_t)L->n_cols);
                for (int32_t c = 0; c < L->n_cols; c++) {
                    assert_int_equal(got[c], jint(json_array_get(want, (size_t)c)));
                    assert_true(got[c] >= L->offsets[c] && got[c] < L->offsets[c] + L->primes[c]);
                }
            }
        }
        di_engram_layout_free(&lay);
    }
}

static void hash_rejects_ids_outside_compressed_vocab(void **state) {
    (void)state;
    const int32_t ids[] = {1};
    di_engram_config cfg = {.layer_ids = ids, .n_layers = 1, .max_ngram = 3, .n_heads = 2,
                            .vocab_size = 100, .compressed_vocab = 10};
    di_engram_layout lay;
    assert_int_equal(di_engram_layout_create(&cfg, &lay, NULL), DI_OK);
    int64_t out[4];
    di_error err = {0};
    const int32_t ok[] = {9, 0, 3}, big[] = {1, 10, 2}, image[] = {1, 2, DI_ENGRAM_IMAGE_SENTINEL};
    assert_int_equal(di_engram_hash_row(&lay.layers[0], ok, out, &err), DI_OK);
    assert_int_equal(di_engram_hash_row(&lay.layers[0], big, out, &err), DI_ERR_RANGE);
    assert_int_equal(di_engram_hash_row(&lay.layers[0], image, out, &err), DI_ERR_RANGE);
    int32_t row[3];
    const int32_t comp[] = {4, 5};
    assert_int_equal(di_engram_ngram_row(comp, 2, 2, 3, 7, row, &err), DI_ERR_RANGE);
    assert_int_equal(di_engram_ngram_row(comp, 2, 1, 3, 7, row, &err), DI_OK);
    assert_int_equal(row[0], 5);
    assert_int_equal(row[1], 4);
    assert_int_equal(row[2], 7);
    di_engram_layout_free(&lay);
}

/* ---- gate ------------------------------------------------------------------------------- */

static float *floats(const json_t *a, size_t want_n) {
    assert_int_equal(json_array_size(a), want_n);
    float *f = malloc(want_n * sizeof *f);
    assert_non_null(f);
    for (size_t i = 0; i < want_n; i++) f[i] = (float)json_number_value(json_array_get(a, i));
    return f;
}

static void gate_matches_engram_gate_ref(void **state) {
    (void)state;
    size_t i;
    const json_t *c;
    json_array_foreach(get(golden(), "gate"), i, c) {
        int32_t hc = (int32_t)jint(get(c, "hc")), d = (int32_t)jint(get(c, "d"));
        size_t n = (size_t)hc * d;
        float *x = floats(get(c, "x"), n), *kv = floats(get(c, "kv"), n + d);
        float *wh = floats(get(c, "wh"), n), *we = floats(get(c, "we"), n);
        float *gate_want = floats(get(c, "gate"), hc);
        float *bf_want = floats(get(c, "out_bf16"), n), *f32_want = floats(get(c, "out_f32"), n);
        float *out = malloc(n * sizeof *out), gate[DI_ENGRAM_MAX_HEADS];
        float eps = (float)json_number_value(get(c, "eps"));
        assert_int_equal(di_engram_gate(x, kv, kv + n, wh, we, hc, d, eps, false, out, gate, NULL), DI_OK);
        for (int32_t j = 0; j < hc; j++) assert_float_equal(gate[j], gate_want[j], 2e-6);
        for (size_t e = 0; e < n; e++) assert_float_equal(out[e], f32_want[e], 1e-5 * (1 + fabs(f32_want[e])));
        /* bf16 output: equal except where the f32 value sits within rounding
         * noise of a bf16 tie (none in these cases so far) */
        assert_int_equal(di_engram_gate(x, kv, kv + n, wh, we, hc, d, eps, true, out, NULL, NULL), DI_OK);
        int off = 0;
        for (size_t e = 0; e < n; e++) off += out[e] != bf_want[e];
        if (off) print_error("%s: %d of %zu bf16 outputs differ\n", json_string_value(get(c, "name")), off, n);
        assert_int_equal(off, 0);
        /* in place: out aliases x */
        assert_int_equal(di_engram_gate(x, kv, kv + n, wh, we, hc, d, eps, true, x, NULL, NULL), DI_OK);
        for (size_t e = 0; e < n; e++) assert_true(x[e] == bf_want[e]);
        free(x), free(kv), free(wh), free(we), free(gate_want), free(bf_want), free(f32_want), free(out);
    }
}

/* ---- FP8 rows --------------------------------------------------------------------------- */

static uint8_t *unhex(const char *s, size_t *n) {
    *n = strlen(s) / 2;
    uint8_t *b = malloc(*n);
    assert_non_null(b);
    for (size_t i = 0; i < *n; i++) {
        unsigned v;
        assert_int_equal(sscanf(s + 2 * i, "%2x", &v), 1);
        b[i] = (uint8_t)v;
    }
    return b;
}

static void gather_rows_matches_dequantized_table(void **state) {
    (void)state;
    const json_t *g = get(golden(), "rows");
    int64_t n_rows = jint(get(g, "n_rows"));
    int32_t hd = (int32_t)jint(get(g, "head_dim"));
    size_t nt, ns;
    uint8_t *table = unhex(json_string_value(get(g, "table_hex")), &nt);
    uint8_t *scales = unhex(json_string_value(get(g, "scales_hex")), &ns);
    assert_int_equal(nt, (size_t)n_rows * hd);
    assert_int_equal(ns, (size_t)n_rows * hd / 32);
    const json_t *ji = get(g, "index");
    int32_t n_idx = (int32_t)json_array_size(ji);
    int64_t idx[16];
    for (int32_t i = 0; i < n_idx; i++) idx[i] = jint(json_array_get(ji, (size_t)i));
    float *want = floats(get(g, "want"), (size_t)n_idx * hd);
    float *out = calloc((size_t)n_idx * hd, sizeof *out);
    di_error err = {0};
    assert_int_equal(di_engram_gather_rows(table, scales, n_rows, hd, idx, n_idx, out, &err), DI_OK);
    for (size_t e = 0; e < (size_t)n_idx * hd; e++) assert_true(out[e] == want[e]);
    /* an index past the table is an error, and nothing is read or written */
    int64_t bad[] = {0, n_rows};
    memset(out, 0, sizeof(float) * hd);
    assert_int_equal(di_engram_gather_rows(table, scales, n_rows, hd, bad, 2, out, &err), DI_ERR_RANGE);
    assert_non_null(strstr(err.msg, "outside"));
    assert_true(out[0] == 0.0f);
    int64_t neg[] = {-1};
    assert_int_equal(di_engram_gather_rows(table, scales, n_rows, hd, neg, 1, out, &err), DI_ERR_RANGE);
    assert_int_equal(di_engram_gather_rows(table, scales, n_rows, 48, idx, 1, out, &err), DI_ERR_INVALID_ARG);
    free(table), free(scales), free(want), free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(vocab_matches_deepinfer_compressed_vocabulary),
        cmocka_unit_test(vocab_matches_deepinfer_on_deepseek_v3_tokenizer),
        cmocka_unit_test(vocab_rejects_pad_not_at_id_2),
        cmocka_unit_test(np_rng_matches_numpy_integers),
        cmocka_unit_test(np_rng_matches_numpy_mixed_stream),
        cmocka_unit_test(np_rng_rejects_empty_range),
        cmocka_unit_test(layout_matches_ngram_hash_mapping),
        cmocka_unit_test(layout_reproduces_v41_flash_constants),
        cmocka_unit_test(layout_rejects_bad_configs),
        cmocka_unit_test(ngram_rows_match_fill_engram_row),
        cmocka_unit_test(hash_matches_engram_hash_ref),
        cmocka_unit_test(hash_rejects_ids_outside_compressed_vocab),
        cmocka_unit_test(gate_matches_engram_gate_ref),
        cmocka_unit_test(gather_rows_matches_dequantized_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
