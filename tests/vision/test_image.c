/* Image decoding and DeepSeek's preprocessing against DeepInfer's own
 * processor (goldens: scripts/gen_goldens_vision.py, PIL decode + resize,
 * rgb_pad_to_patches_ref) and deepseek-recipe's token counts; the malformed
 * corpus (scripts/gen_malformed_images.py) must be refused cleanly. */
#include "test_util.h"

#include "vision/image.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>

static json_t *manifest(void) {
    char p[1024];
    json_error_t je;
    json_t *m = json_load_file(di_test_path(p, sizeof p, "tests/data/golden/vision/manifest.json"), 0, &je);
    if (!m) fail_msg("manifest: %s", je.text);
    return m;
}

static di_image_cfg cfg_from(json_t *c) {
    json_t *r = json_object_get(c, "max_wh_ratio");
    return (di_image_cfg){.patch_size = (int32_t)json_integer_value(json_object_get(c, "patch_size")),
                          .downsample_ratio = (int32_t)json_integer_value(json_object_get(c, "downsample_ratio")),
                          .max_tokens = (int32_t)json_integer_value(json_object_get(c, "max_image_tokens")),
                          .min_pixels = json_integer_value(json_object_get(c, "min_pixels")),
                          .max_wh_ratio = json_is_null(r) ? 0 : json_number_value(r),
                          .mean = 0.5f,
                          .std = 0.5f};
}

static int32_t geti(json_t *o, const char *k) { return (int32_t)json_integer_value(json_object_get(o, k)); }

static uint8_t *read_golden(const char *file, const char *suffix, size_t *n) {
    char rel[512], p[1024];
    char stem[256];
    snprintf(stem, sizeof stem, "%s", file);
    char *dot = strrchr(stem, '.');
    if (dot) *dot = 0;
    snprintf(rel, sizeof rel, "tests/data/golden/vision/pre/%s.%s", stem, suffix);
    uint8_t *d = (uint8_t *)di_test_read_file(di_test_path(p, sizeof p, rel), n);
    if (!d) fail_msg("cannot read %s", rel);
    return d;
}

/* Layout = DeepInfer's compute_image_layout on ~800 sizes x 4 configs. */
static void test_layout_matches_deepinfer(void **st) {
    (void)st;
    json_t *m = manifest();
    json_t *cfgs = json_object_get(m, "layout_configs"), *rows = json_object_get(m, "layout");
    size_t i;
    json_t *r;
    int bad = 0;
    json_array_foreach(rows, i, r) {
        di_image_cfg c = cfg_from(json_array_get(cfgs, (size_t)geti(r, "cfg")));
        di_image_layout lay;
        di_error err = {0};
        di_status s = di_image_layout_of(geti(r, "w"), geti(r, "h"), &c, &lay, &err);
        if (s) fail_msg("cfg %d %dx%d: %s", geti(r, "cfg"), geti(r, "w"), geti(r, "h"), err.msg);
        if (lay.best_width != geti(r, "best_width") || lay.best_height != geti(r, "best_height") ||
            lay.n_vit_w != geti(r, "n_vit_w") || lay.n_vit_h != geti(r, "n_vit_h") ||
            lay.n_llm_w != geti(r, "n_llm_w") || lay.n_llm_h != geti(r, "n_llm_h") ||
            lay.num_tokens != geti(r, "num_tokens")) {
            if (bad++ < 5)
                print_message("cfg %d %dx%d: got %dx%d tokens %d, want %dx%d tokens %d\n", geti(r, "cfg"),
                              geti(r, "w"), geti(r, "h"), lay.best_width, lay.best_height, lay.num_tokens,
                              geti(r, "best_width"), geti(r, "best_height"), geti(r, "num_tokens"));
        }
    }
    assert_int_equal(bad, 0);
    assert_true(json_array_size(rows) > 700);
    json_decref(m);
}

/* Each test image: decoded RGB, resized RGB, patches and token types equal
 * DeepInfer's (PIL) bit for bit. */
static void test_pipeline_matches_deepinfer(void **st) {
    (void)st;
    json_t *m = manifest();
    di_image_cfg c = cfg_from(json_object_get(m, "tiny"));
    json_t *files = json_object_get(m, "files"), *f;
    size_t i;
    int n_checked = 0;
    json_array_foreach(files, i, f) {
        const char *name = json_string_value(json_object_get(f, "file"));
        char rel[512], p[1024];
        snprintf(rel, sizeof rel, "tests/data/golden/vision/images/%s", name);
        size_t n = 0;
        uint8_t *data = (uint8_t *)di_test_read_file(di_test_path(p, sizeof p, rel), &n);
        assert_non_null(data);
        di_image img;
        di_error err = {0};
        di_status s = di_image_decode(data, n, NULL, &img, &err);
        if (s) fail_msg("%s: %s", name, err.msg);
        assert_int_equal(img.width, geti(f, "width"));
        assert_int_equal(img.height, geti(f, "height"));
        size_t gn;
        uint8_t *dec = read_golden(name, "decoded.u8", &gn);
        assert_int_equal(gn, (size_t)img.width * img.height * 3);
        int maxd = 0;
        for (size_t k = 0; k < gn; k++) {
            int d = abs((int)dec[k] - (int)img.rgb[k]);
            maxd = d > maxd ? d : maxd;
        }
        if (maxd) fail_msg("%s: decoded pixels differ from PIL by up to %d", name, maxd);
        free(dec);
        json_t *gl = json_object_get(f, "layout");
        di_image_layout lay;
        assert_int_equal(di_image_layout_of(img.width, img.height, &c, &lay, &err), DI_OK);
        assert_int_equal(lay.num_tokens, geti(f, "n_tokens"));
        assert_int_equal(lay.best_width, geti(gl, "best_width"));
        assert_int_equal(lay.best_height, geti(gl, "best_height"));
        di_image rz;
        assert_int_equal(di_image_prepare(&img, &c, &lay, &rz, &err), DI_OK);
        assert_int_equal(rz.width, geti(f, "resized_w"));
        assert_int_equal(rz.height, geti(f, "resized_h"));
        uint8_t *gr = read_golden(name, "resized.u8", &gn);
        assert_int_equal(gn, (size_t)rz.width * rz.height * 3);
        maxd = 0;
        for (size_t k = 0; k < gn; k++) {
            int d = abs((int)gr[k] - (int)rz.rgb[k]);
            maxd = d > maxd ? d : maxd;
        }
        if (maxd) fail_msg("%s: resized pixels differ from PIL by up to %d", name, maxd);
        free(gr);
        const int64_t np = (int64_t)lay.n_vit_w * lay.n_vit_h, per = 3LL * c.patch_size * c.patch_size;
        assert_int_equal(np, geti(f, "n_patches"));
        float *pt = malloc((size_t)(np * per) * sizeof(float));
        assert_int_equal(di_image_patches(&rz, &c, &lay, pt, &err), DI_OK);
        float *gp = (float *)read_golden(name, "patches.f32", &gn);
        assert_int_equal(gn, (size_t)(np * per) * sizeof(float));
        assert_memory_equal(pt, gp, gn);
        free(gp);
        free(pt);
        uint8_t *tt = malloc((size_t)lay.num_tokens);
        di_image_token_types(&lay, tt);
        json_t *gt = json_object_get(f, "mm_token_type");
        assert_int_equal(json_array_size(gt), (size_t)lay.num_tokens);
        for (int32_t k = 0; k < lay.num_tokens; k++)
            assert_int_equal(tt[k], json_integer_value(json_array_get(gt, (size_t)k)));
        free(tt);
        di_image_free(&rz);
        di_image_free(&img);
        free(data);
        n_checked++;
    }
    assert_true(n_checked >= 20);
    json_decref(m);
}

/* deepseek-recipe resizes to patch multiples itself; its token count of that
 * output equals our layout's with patch 14 / ratio 3 and no further limit. */
static void test_recipe_token_counts(void **st) {
    (void)st;
    json_t *m = manifest();
    json_t *rows = json_object_get(m, "recipe"), *r;
    size_t i;
    int n = 0;
    di_image_cfg c = {.patch_size = 14, .downsample_ratio = 3, .max_tokens = 1 << 24, .mean = 0.5f, .std = 0.5f};
    json_array_foreach(rows, i, r) {
        if (!json_object_get(r, "width")) continue;
        di_image_layout lay;
        di_error err = {0};
        assert_int_equal(di_image_layout_of(geti(r, "width"), geti(r, "height"), &c, &lay, &err), DI_OK);
        assert_int_equal(lay.num_tokens, geti(r, "tokens"));
        assert_int_equal(lay.best_width, geti(r, "width")); /* the recipe's output is already on the grid */
        assert_int_equal(lay.best_height, geti(r, "height"));
        n++;
    }
    assert_true(n >= 40);
    json_decref(m);
}

/* Names in the corpus that are well-formed enough to decode. */
static int expect_ok(const char *name) { return !strcmp(name, "png_no_iend.png"); }

static void test_malformed_corpus_refused(void **st) {
    (void)st;
    static const char *names[] = {
        "empty.bin", "wrong_magic.bin", "text.bin", "png_truncated_header.png", "png_truncated_data.png",
        "png_no_iend.png", "png_bad_crc.png", "png_huge_dims.png", "png_zero_width.png", "png_bomb.png",
        "png_bad_depth.png", "jpeg_truncated_header.jpg", "jpeg_magic_only.jpg", "jpeg_cmyk.jpg",
        "webp_truncated.webp", "webp_header_only.webp", "webp_animated.webp", "jpeg_huge_dims.jpg"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char rel[512], p[1024];
        snprintf(rel, sizeof rel, "tests/data/malformed/image/%s", names[i]);
        size_t n = 0;
        uint8_t *data = (uint8_t *)di_test_read_file(di_test_path(p, sizeof p, rel), &n);
        assert_non_null(data);
        di_image img;
        di_error err = {0};
        di_status s = di_image_decode(data, n, NULL, &img, &err);
        if (expect_ok(names[i])) {
            if (s) fail_msg("%s: %s", names[i], err.msg);
            di_image_free(&img);
        } else {
            if (!s) fail_msg("%s: decoded, expected an error", names[i]);
            assert_true(err.msg[0] != 0);
            assert_null(img.rgb);
        }
        free(data);
    }
}

/* Limits: a valid image over the byte / pixel / side limit is refused
 * before decoding; every prefix of a valid file fails or decodes, no crash. */
static void test_limits_and_prefixes(void **st) {
    (void)st;
    char p[1024];
    size_t n = 0;
    uint8_t *data = (uint8_t *)di_test_read_file(
        di_test_path(p, sizeof p, "tests/data/golden/vision/images/jpeg_80x60_q90.jpg"), &n);
    assert_non_null(data);
    di_image img;
    di_error err = {0};
    di_image_limits lim;
    di_image_limits_default(&lim);
    lim.max_bytes = n - 1;
    assert_int_equal(di_image_decode(data, n, &lim, &img, &err), DI_ERR_RANGE);
    di_image_limits_default(&lim);
    lim.max_pixels = 80 * 60 - 1;
    assert_int_equal(di_image_decode(data, n, &lim, &img, &err), DI_ERR_RANGE);
    di_image_limits_default(&lim);
    lim.max_side = 79;
    assert_int_equal(di_image_decode(data, n, &lim, &img, &err), DI_ERR_RANGE);
    const char *files[] = {"jpeg_80x60_q90.jpg", "rgb_40x30.png", "webp_lossy_66x44.webp", "interlaced_31x23.png"};
#ifdef DI_SANITIZE_BUILD
    const size_t step = 97;
#else
    const size_t step = 7;
#endif
    for (size_t f = 0; f < 4; f++) {
        char rel[256];
        snprintf(rel, sizeof rel, "tests/data/golden/vision/images/%s", files[f]);
        size_t fn = 0;
        uint8_t *d = (uint8_t *)di_test_read_file(di_test_path(p, sizeof p, rel), &fn);
        assert_non_null(d);
        for (size_t k = 0; k < fn; k += step) {
            di_status s = di_image_decode(d, k, NULL, &img, &err);
            if (!s) di_image_free(&img);
        }
        free(d);
    }
    free(data);
}

static void test_layout_rejects_bad_config(void **st) {
    (void)st;
    di_image_cfg c = {.patch_size = 0, .downsample_ratio = 2, .max_tokens = 50, .mean = 0.5f, .std = 0.5f};
    di_image_layout lay;
    di_error err = {0};
    assert_int_not_equal(di_image_layout_of(10, 10, &c, &lay, &err), DI_OK);
    c.patch_size = 14;
    assert_int_not_equal(di_image_layout_of(0, 10, &c, &lay, &err), DI_OK);
    assert_int_not_equal(di_image_layout_of(10, -1, &c, &lay, &err), DI_OK);
    assert_int_equal(di_image_layout_of(1, 100000, &c, &lay, &err), DI_OK);
    assert_true(lay.num_tokens <= 50);
}

/* Every input the image fuzz target ever flagged (tests/data/fuzz-regress/
 * image, filled by scripts/fuzz.sh) and the malformed corpus, through what
 * fuzz/fuzz_image.c runs: decode, then layout, resize and patches on
 * success. Nothing is expected but a clean return (the sanitizer build
 * checks the memory). */
static void test_fuzz_regress_corpus_replays(void **st) {
    (void)st;
    static const char *dirs[] = {"tests/data/fuzz-regress/image", "tests/data/malformed/image"};
    int n_files = 0;
    for (size_t d = 0; d < sizeof dirs / sizeof *dirs; d++) {
        char dir[1024];
        DIR *dp = opendir(di_test_path(dir, sizeof dir, dirs[d]));
        if (!dp) continue;
        struct dirent *de;
        while ((de = readdir(dp))) {
            if (de->d_name[0] == '.' || strstr(de->d_name, ".md")) continue;
            char p[2048];
            snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
            size_t n = 0;
            uint8_t *data = (uint8_t *)di_test_read_file(p, &n);
            if (!data) continue;
            n_files++;
            di_image_limits lim = {.max_bytes = 1 << 20, .max_pixels = 1 << 20, .max_side = 4096};
            di_image img;
            di_error err;
            if (!di_image_decode(data, n, &lim, &img, &err)) {
                const di_image_cfg cfg = {.patch_size = 14, .downsample_ratio = 2, .max_tokens = 50,
                                          .min_pixels = 3136, .max_wh_ratio = 4, .mean = 0.5f, .std = 0.5f};
                di_image_layout lay;
                di_image rz = {0};
                if (!di_image_layout_of(img.width, img.height, &cfg, &lay, &err) &&
                    !di_image_prepare(&img, &cfg, &lay, &rz, &err)) {
                    float *px = malloc((size_t)lay.n_vit_w * lay.n_vit_h * 3 * 14 * 14 * sizeof(float));
                    assert_non_null(px);
                    (void)di_image_patches(&rz, &cfg, &lay, px, &err);
                    free(px);
                }
                di_image_free(&rz);
                di_image_free(&img);
            } else {
                assert_true(err.msg[0] != 0);
            }
            free(data);
        }
        closedir(dp);
    }
    assert_true(n_files >= 18);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout_matches_deepinfer),
        cmocka_unit_test(test_pipeline_matches_deepinfer),
        cmocka_unit_test(test_recipe_token_counts),
        cmocka_unit_test(test_malformed_corpus_refused),
        cmocka_unit_test(test_limits_and_prefixes),
        cmocka_unit_test(test_layout_rejects_bad_config),
        cmocka_unit_test(test_fuzz_regress_corpus_replays),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
