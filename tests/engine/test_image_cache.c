/* engine/image_cache: the encoded-image cache alone (hits copy, the bytes
 * are compared in full, the config is part of the key, LRU eviction within
 * the byte cap, oversize entries not kept), then through the engine on the
 * tiny DeepSeek-V4.1 vision checkpoint: a second request with the same image
 * behind another prompt (so the prefix cache misses) does not run the tower
 * and gives the same tokens and logprobs, bit for bit, as an engine without
 * the cache. */
#include "test_util.h"

#include "deepinfer.h"
#include "engine/image_cache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROW 4 /* floats per row in the unit checks */

static void put_img(di_image_cache *c, uint64_t cfg, const char *bytes, int32_t n_tok, float base) {
    int32_t ids[8];
    float rows[8 * ROW];
    for (int32_t i = 0; i < n_tok; i++) ids[i] = 100 + i;
    for (int32_t i = 0; i < n_tok * ROW; i++) rows[i] = base + (float)i;
    di_image_cache_put(c, cfg, (const uint8_t *)bytes, strlen(bytes), ids, rows, n_tok, ROW);
}

static bool get_img(di_image_cache *c, uint64_t cfg, const char *bytes, float *first_row) {
    int32_t *ids, n;
    float *rows;
    bool hit = di_image_cache_get(c, cfg, (const uint8_t *)bytes, strlen(bytes), &ids, &rows, &n);
    if (hit) {
        assert_true(n > 0 && ids[0] == 100);
        *first_row = rows[0];
    } else {
        assert_null(ids);
        assert_null(rows);
    }
    free(ids);
    free(rows);
    return hit;
}

static void test_hits_copy_and_key_by_bytes_and_config(void **state) {
    (void)state;
    di_image_cache *c;
    di_error err;
    assert_int_equal(di_image_cache_create(1 << 20, &c, &err), DI_OK);
    float r = 0;
    assert_false(get_img(c, 1, "abcd", &r));
    put_img(c, 1, "abcd", 2, 7.0f);
    assert_true(get_img(c, 1, "abcd", &r));
    assert_true(r == 7.0f);
    assert_false(get_img(c, 2, "abcd", &r)); /* another preprocessing config */
    assert_false(get_img(c, 1, "abce", &r)); /* same length, other bytes */
    assert_false(get_img(c, 1, "abc", &r));
    put_img(c, 1, "abcd", 2, 9.0f); /* already there: the first stays */
    assert_true(get_img(c, 1, "abcd", &r));
    assert_true(r == 7.0f);
    di_image_cache_stats st;
    di_image_cache_get_stats(c, &st);
    assert_int_equal(st.hits, 2);
    assert_int_equal(st.misses, 4);
    assert_int_equal(st.entries, 1);
    di_image_cache_free(c);
}

static void test_lru_eviction_within_the_cap(void **state) {
    (void)state;
    /* an entry of 1 token costs 4 bytes of image + 4 of id + 16 of row = 24 */
    di_image_cache *c;
    di_error err;
    assert_int_equal(di_image_cache_create(3 * 24, &c, &err), DI_OK);
    float r;
    put_img(c, 0, "img1", 1, 1);
    put_img(c, 0, "img2", 1, 2);
    put_img(c, 0, "img3", 1, 3);
    assert_true(get_img(c, 0, "img1", &r)); /* img1 now most recent: img2 is the oldest */
    put_img(c, 0, "img4", 1, 4);
    assert_false(get_img(c, 0, "img2", &r));
    assert_true(get_img(c, 0, "img1", &r) && get_img(c, 0, "img3", &r) && get_img(c, 0, "img4", &r));
    di_image_cache_stats st;
    di_image_cache_get_stats(c, &st);
    assert_int_equal(st.entries, 3);
    assert_int_equal(st.evictions, 1);
    assert_true(st.bytes <= 3 * 24);
    put_img(c, 0, "huge", 8, 5); /* 4 + 32 + 128 bytes > the cap: not kept, nothing evicted */
    assert_false(get_img(c, 0, "huge", &r));
    di_image_cache_get_stats(c, &st);
    assert_int_equal(st.entries, 3);
    di_image_cache_free(c);

    assert_int_equal(di_image_cache_create(0, &c, &err), DI_OK); /* a zero cap keeps nothing */
    put_img(c, 0, "img1", 1, 1);
    assert_false(get_img(c, 0, "img1", &r));
    di_image_cache_free(c);
}

/* ---- through the engine ------------------------------------------------------- */

typedef struct out {
    int32_t ids[16], n, n_lp, n_prompt;
    float lp[16];
    int done;
    char err[256];
} out;

static int on_event(const di_event *ev) {
    out *o = ev->user;
    if (ev->token >= 0 && o->n_lp < 16) o->lp[o->n_lp++] = ev->logprob;
    if (ev->finish == DI_FINISH_REASON_NONE) return 0;
    for (int32_t i = 0; i < ev->n_tokens && i < 16; i++) o->ids[i] = ev->tokens[i];
    o->n = ev->n_tokens;
    o->n_prompt = ev->stats.n_prompt;
    if (ev->error) snprintf(o->err, sizeof o->err, "%s", ev->error);
    o->done = 1;
    return 0;
}

static di_engine *open_engine(double cache_mb) {
    char dir[4096];
    di_test_path(dir, sizeof dir, "tests/data/golden/deepseek_v41/tiny_vl");
    di_engine_params p = di_engine_params_default();
    p.model_path = dir;
    p.n_threads = 2;
    p.image_cache_mb = cache_mb;
    di_engine *e;
    di_error err;
    if (di_engine_create(&p, &e, &err)) {
        fprintf(stderr, "engine: %s\n", err.msg);
        fail();
    }
    return e;
}

static void ask_counted(di_engine *e, const char *before, const char *after, const uint8_t *img, size_t n, out *o,
                        size_t *counted) {
    const char *ph = di_engine_image_placeholder(e);
    assert_non_null(ph);
    char text[512];
    snprintf(text, sizeof text, "%s%s%s", before, ph, after);
    di_request r;
    memset(&r, 0, sizeof r);
    r.text = text;
    r.max_tokens = 6;
    r.ignore_eos = true;
    r.sampling = di_sampling_params_default();
    r.sampling.temperature = 0;
    r.sampling.logprobs = true;
    di_image_input im = {img, n};
    r.images = &im;
    r.n_images = 1;
    r.on_event = on_event;
    r.user = o;
    memset(o, 0, sizeof *o);
    di_error err;
    if (counted) assert_int_equal(di_engine_count_prompt(e, &r, counted, &err), DI_OK);
    assert_int_equal(di_engine_submit(e, &r, NULL, &err), DI_OK);
    assert_int_equal(di_engine_run(e, &err), DI_OK);
    assert_true(o->done && !o->err[0]);
}

static void ask(di_engine *e, const char *before, const char *after, const uint8_t *img, size_t n, out *o) {
    ask_counted(e, before, after, img, n, o, NULL);
}

/* di_engine_count_prompt counts an image as the positions it expands to
 * (chat fits its history with it), without running the tower */
static void test_count_prompt_counts_image_positions(void **state) {
    (void)state;
    char path[4096];
    di_test_path(path, sizeof path, "tests/data/golden/vision/images/rgb_300x200.png");
    size_t n, counted = 0;
    uint8_t *img = (uint8_t *)di_test_read_file(path, &n);
    assert_non_null(img);
    di_engine *e = open_engine(0);
    out o;
    ask_counted(e, "", "Describe it.", img, n, &o, &counted);
    assert_int_equal((int)counted, o.n_prompt);
    assert_true(counted > 40); /* 47 image positions (vision.md) */
    /* a bad image is an error, not a count */
    di_image_input bad = {(const uint8_t *)"not an image", 12};
    di_request r;
    memset(&r, 0, sizeof r);
    di_error err;
    char text[256];
    snprintf(text, sizeof text, "%sx", di_engine_image_placeholder(e));
    r.text = text;
    r.images = &bad;
    r.n_images = 1;
    assert_int_not_equal(di_engine_count_prompt(e, &r, &counted, &err), DI_OK);
    di_engine_stats st;
    di_engine_get_stats(e, &st);
    assert_int_equal(st.n_image_encodes, 1); /* the submit's, not the counts' */
    di_engine_free(e);
    free(img);
}

static void test_engine_repeated_image_skips_the_tower(void **state) {
    (void)state;
    char path[4096];
    di_test_path(path, sizeof path, "tests/data/golden/vision/images/rgb_17x91.png");
    size_t n;
    uint8_t *img = (uint8_t *)di_test_read_file(path, &n);
    assert_non_null(img);
    di_engine *e = open_engine(0);
    out a, b, ref;
    ask(e, "", "Describe it.", img, n, &a);
    di_engine_stats st;
    di_engine_get_stats(e, &st);
    assert_int_equal(st.n_image_encodes, 1);
    /* text before the image: the prompts differ from their first token on,
     * so the prefix cache has nothing for the second one */
    ask(e, "Look: ", "What colour is it?", img, n, &b);
    di_engine_get_stats(e, &st);
    assert_int_equal(st.n_prefix_hit_tokens, 0);
    assert_int_equal(st.n_image_encodes, 1);
    assert_int_equal(st.n_image_cache_hits, 1);
    assert_true(st.image_cache_entries == 1 && st.image_cache_bytes > 0);
    di_engine_free(e);

    e = open_engine(-1); /* no cache: the tower runs, same bits */
    ask(e, "Look: ", "What colour is it?", img, n, &ref);
    di_engine_get_stats(e, &st);
    assert_int_equal(st.n_image_encodes, 1);
    assert_int_equal(st.n_image_cache_hits, 0);
    assert_int_equal(b.n, ref.n);
    assert_int_equal(b.n_lp, ref.n_lp);
    assert_true(ref.n_lp == ref.n && ref.n == 6);
    assert_memory_equal(b.ids, ref.ids, sizeof(int32_t) * (size_t)ref.n);
    assert_memory_equal(b.lp, ref.lp, sizeof(float) * (size_t)ref.n_lp);
    di_engine_free(e);
    free(img);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hits_copy_and_key_by_bytes_and_config),
        cmocka_unit_test(test_lru_eviction_within_the_cap),
        cmocka_unit_test(test_engine_repeated_image_skips_the_tower),
        cmocka_unit_test(test_count_prompt_counts_image_positions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
