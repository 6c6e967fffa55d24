/* The V4.1 vision tower on tiny_vl against DeepInfer's own VisionTransformer /
 * MlpProjector / batch_downsample_ref / replace_input_embeds_ref run in f32 on
 * CPU (scripts/gen_goldens_vision_tower.py), from the same patch tensors
 * (scripts/gen_goldens_vision.py), and the whole bytes -> rows path. */
#include "test_util.h"

#include "model/deepseek_v41_vision.h"
#include "text/tokenizer.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* f32 against f32 through a different summation order: relative to the
 * tensor's RMS, well inside float rounding of a 2-block tower */
#define TOL_REL 1e-4

typedef struct fixture {
    di_tokenizer *tok;
    di_dsv41_model *m;
    di_threadpool *pool;
} fixture;

static int setup(void **state) {
    static fixture f;
    memset(&f, 0, sizeof f);
    char dir[1024];
    di_error err;
    di_test_path(dir, sizeof dir, "tests/data/golden/deepseek_v41/tiny_vl");
    if (di_tok_load_json(dir, &f.tok, &err) || di_dsv41_load(dir, NULL, DI_DSV41_NUMERICS_IDEAL, f.tok, &f.m, &err) ||
        di_threadpool_create(2, &f.pool, &err)) {
        fprintf(stderr, "tiny_vl: %s\n", err.msg);
        return -1;
    }
    *state = &f;
    return 0;
}

static int teardown(void **state) {
    fixture *f = *state;
    di_threadpool_free(f->pool);
    di_dsv41_free(f->m);
    di_tok_free(f->tok);
    return 0;
}

static void *read_rel(const char *rel, size_t *n) {
    char p[1024];
    void *d = di_test_read_file(di_test_path(p, sizeof p, rel), n);
    if (!d) fail_msg("cannot read %s", rel);
    return d;
}

/* max |a - b| / rms(b) */
static double rel_err(const float *a, const float *b, int64_t n) {
    double ss = 0, mx = 0;
    for (int64_t i = 0; i < n; i++) {
        ss += (double)b[i] * b[i];
        double d = fabs((double)a[i] - b[i]);
        mx = d > mx ? d : mx;
    }
    return mx / sqrt(ss / (double)n);
}

static void test_tower_matches_deepinfer(void **state) {
    fixture *f = *state;
    assert_true(di_dsv41_has_vision(f->m));
    assert_int_equal(di_dsv41_image_token_id(f->m), 4);
    const di_image_cfg *geo = di_dsv41_image_cfg(f->m);
    size_t n;
    char *js = read_rel("tests/data/golden/vision/tower/tower.json", &n);
    json_error_t je;
    json_t *t = json_loads(js, 0, &je);
    assert_non_null(t);
    json_t *imgs = json_object_get(t, "images"), *im;
    size_t i;
    double worst_vit = 0, worst_rows = 0;
    json_array_foreach(imgs, i, im) {
        const char *file = json_string_value(json_object_get(im, "file"));
        char stem[256], rel[512];
        snprintf(stem, sizeof stem, "%s", file);
        *strrchr(stem, '.') = 0;
        /* the layout from the image's own size, as a request computes it */
        snprintf(rel, sizeof rel, "tests/data/golden/vision/images/%s", file);
        size_t nb;
        uint8_t *bytes = read_rel(rel, &nb);
        di_image img;
        di_error err = {0};
        assert_int_equal(di_image_decode(bytes, nb, NULL, &img, &err), DI_OK);
        di_image_layout lay;
        assert_int_equal(di_image_layout_of(img.width, img.height, geo, &lay, &err), DI_OK);
        const int64_t np = json_integer_value(json_object_get(im, "n_patches"));
        const int64_t nt = json_integer_value(json_object_get(im, "n_tokens"));
        const int64_t E = json_integer_value(json_object_get(im, "vit_dim"));
        const int64_t D = json_integer_value(json_object_get(im, "n_embd"));
        assert_int_equal(np, (int64_t)lay.n_vit_w * lay.n_vit_h);
        assert_int_equal(nt, lay.num_tokens);
        snprintf(rel, sizeof rel, "tests/data/golden/vision/pre/%s.patches.f32", stem);
        float *patches = read_rel(rel, &nb);
        snprintf(rel, sizeof rel, "tests/data/golden/vision/tower/%s.vit.f32", stem);
        float *gv = read_rel(rel, &nb);
        assert_int_equal(nb, (size_t)(np * E) * sizeof(float));
        snprintf(rel, sizeof rel, "tests/data/golden/vision/tower/%s.rows.f32", stem);
        float *gr = read_rel(rel, &nb);
        assert_int_equal(nb, (size_t)(nt * D) * sizeof(float));
        float *vit = malloc((size_t)(np * E) * sizeof(float)), *rows = malloc((size_t)(nt * D) * sizeof(float));
        assert_int_equal(di_dsv41_vision_forward(f->m, &lay, patches, vit, rows, f->pool, &err), DI_OK);
        const double ev = rel_err(vit, gv, np * E), er = rel_err(rows, gr, nt * D);
        print_message("%-22s %3lld patches %3lld tokens: vit max err %.2e, rows max err %.2e (of RMS)\n", file,
                      (long long)np, (long long)nt, ev, er);
        worst_vit = ev > worst_vit ? ev : worst_vit;
        worst_rows = er > worst_rows ? er : worst_rows;
        /* the whole path from bytes gives the same rows, and DeepInfer's token ids */
        di_dsv41_image_rows ir;
        assert_int_equal(di_dsv41_encode_image(f->m, bytes, nb = 0, NULL, &ir, f->pool, &err), DI_ERR_FORMAT);
        snprintf(rel, sizeof rel, "tests/data/golden/vision/images/%s", file);
        free(bytes);
        bytes = read_rel(rel, &nb);
        assert_int_equal(di_dsv41_encode_image(f->m, bytes, nb, NULL, &ir, f->pool, &err), DI_OK);
        assert_int_equal(ir.n_tokens, nt);
        assert_memory_equal(ir.rows, rows, (size_t)(nt * D) * sizeof(float));
        const int32_t V = di_dsv41_hparams_of(f->m)->n_vocab;
        assert_int_equal(ir.token[0], V + DI_IMAGE_TOKEN_IMAGE);
        for (int64_t k = 1; k < nt; k++) assert_int_equal(ir.token[k], V + DI_IMAGE_TOKEN_PAD);
        di_dsv41_image_rows_free(&ir);
        free(vit);
        free(rows);
        free(gv);
        free(gr);
        free(patches);
        free(bytes);
        di_image_free(&img);
    }
    assert_true(json_array_size(imgs) >= 4);
    assert_true(worst_vit < TOL_REL);
    assert_true(worst_rows < TOL_REL);
    json_decref(t);
    free(js);
}

/* A bad image is an error, never a crash; a text-only model refuses images. */
static void test_encode_rejects_bad_input(void **state) {
    fixture *f = *state;
    static const char *bad[] = {"png_truncated_data.png", "jpeg_cmyk.jpg", "png_bomb.png", "text.bin"};
    for (size_t i = 0; i < 4; i++) {
        char rel[256];
        snprintf(rel, sizeof rel, "tests/data/malformed/image/%s", bad[i]);
        size_t nb;
        uint8_t *bytes = read_rel(rel, &nb);
        di_dsv41_image_rows ir;
        di_error err = {0};
        assert_int_not_equal(di_dsv41_encode_image(f->m, bytes, nb, NULL, &ir, f->pool, &err), DI_OK);
        assert_null(ir.rows);
        assert_true(err.msg[0] != 0);
        free(bytes);
    }
}

/* The full multimodal forward (tiny_vl, ideal numerics): placeholders
 * expanded as DeepInfer does, image rows from our tower, bias_vl routing and
 * the Engram image mask, prefill then the oracle's greedy ids teacher-forced:
 * every logit row within FWD_TOL of the logit scale of the V4.1 oracle
 * extended with images (gen_goldens_vision_tower.py), and the same greedy. */
#define FWD_TOL 1e-4
#define FWD_BLOCK 16
#define FWD_BLOCKS 8

static void test_multimodal_forward_matches_oracle(void **state) {
    fixture *f = *state;
    const di_dsv41_hparams *hp = di_dsv41_hparams_of(f->m);
    const int32_t V = hp->n_vocab, D = hp->n_embd, ph = di_dsv41_image_token_id(f->m);
    size_t n;
    char *js = read_rel("tests/data/golden/vision/tower/forward.json", &n);
    json_error_t je;
    json_t *doc = json_loads(js, 0, &je), *cs, *c;
    assert_non_null(doc);
    cs = json_object_get(doc, "cases");
    size_t ci;
    json_array_foreach(cs, ci, c) {
        json_t *prompt = json_object_get(c, "prompt"), *images = json_object_get(c, "images");
        json_t *expanded = json_object_get(c, "expanded"), *greedy = json_object_get(c, "greedy");
        const int32_t np = (int32_t)json_array_size(expanded), ng = (int32_t)json_array_size(greedy);
        int32_t *ids = malloc(sizeof(int32_t) * (size_t)(np + ng)), *pos = malloc(sizeof(int32_t) * (size_t)(np + ng));
        int32_t *seq = calloc((size_t)(np + ng), sizeof(int32_t));
        const float **embd = calloc((size_t)(np + ng), sizeof(float *));
        uint8_t *want = malloc((size_t)(np + ng));
        di_dsv41_image_rows ir[4];
        int32_t n_img = 0, k = 0;
        /* our own placeholder expansion */
        for (size_t t = 0; t < json_array_size(prompt); t++) {
            const int32_t id = (int32_t)json_integer_value(json_array_get(prompt, t));
            if (id != ph) {
                ids[k++] = id;
                continue;
            }
            char rel[256];
            snprintf(rel, sizeof rel, "tests/data/golden/vision/images/%s",
                     json_string_value(json_array_get(images, (size_t)n_img)));
            size_t nb;
            uint8_t *bytes = read_rel(rel, &nb);
            di_error err = {0};
            assert_int_equal(di_dsv41_encode_image(f->m, bytes, nb, NULL, &ir[n_img], f->pool, &err), DI_OK);
            free(bytes);
            for (int32_t r = 0; r < ir[n_img].n_tokens; r++, k++) {
                ids[k] = ir[n_img].token[r];
                embd[k] = ir[n_img].rows + (int64_t)r * D;
            }
            n_img++;
        }
        assert_int_equal(k, np);
        for (int32_t i = 0; i < np; i++) assert_int_equal(ids[i], json_integer_value(json_array_get(expanded, (size_t)i)));
        for (int32_t i = 0; i < np + ng; i++) {
            pos[i] = i;
            want[i] = 1;
        }
        for (int32_t i = 0; i < ng; i++) ids[np + i] = (int32_t)json_integer_value(json_array_get(greedy, (size_t)i));
        char rel[128];
        snprintf(rel, sizeof rel, "tests/data/golden/vision/tower/forward_%zu.logits.f32", ci);
        size_t nb;
        float *gold = read_rel(rel, &nb);
        const int32_t rows = np + ng - 1;
        assert_int_equal(nb, sizeof(float) * (size_t)rows * V);
        double scale = 0;
        for (int64_t i = 0; i < (int64_t)rows * V; i++) scale = fmax(scale, fabs(gold[i]));
        di_dsv41_kv *kv;
        di_dsv41_ctx *ctx;
        di_error err = {0};
        assert_int_equal(di_dsv41_kv_create(f->m, FWD_BLOCKS, FWD_BLOCK, &kv, &err), DI_OK);
        assert_int_equal(di_dsv41_ctx_create(f->m, &ctx, &err), DI_OK);
        int32_t table[FWD_BLOCKS];
        for (int32_t i = 0; i < FWD_BLOCKS; i++) table[i] = FWD_BLOCKS - 1 - i;
        const int32_t *tables[1] = {table};
        const int32_t n_blocks[1] = {FWD_BLOCKS};
        float *out = malloc(sizeof(float) * (size_t)(np + ng) * V);
        /* prefill in one batch, then one row per decode step */
        di_batch b = {.n_rows = np, .token = ids, .seq = seq, .pos = pos, .want_logits = want, .n_seq_slots = 1,
                      .block_size = FWD_BLOCK, .block_tables = tables, .n_blocks = n_blocks,
                      .embd = (const float *const *)embd};
        assert_int_equal(di_dsv41_forward(ctx, kv, &b, out, f->pool, &err), DI_OK);
        for (int32_t s = 0; s + 1 < ng; s++) {
            di_batch d = {.n_rows = 1, .token = ids + np + s, .seq = seq, .pos = pos + np + s, .want_logits = want,
                          .n_seq_slots = 1, .block_size = FWD_BLOCK, .block_tables = tables, .n_blocks = n_blocks};
            assert_int_equal(di_dsv41_forward(ctx, kv, &d, out + (int64_t)(np + s) * V, f->pool, &err), DI_OK);
        }
        double worst = 0;
        int greedy_same = 0;
        for (int32_t r = 0; r < rows; r++) {
            int32_t am = 0;
            for (int32_t v = 0; v < V; v++) {
                worst = fmax(worst, fabs((double)out[(int64_t)r * V + v] - gold[(int64_t)r * V + v]));
                if (out[(int64_t)r * V + v] > out[(int64_t)r * V + am]) am = v;
            }
            if (r >= np - 1) greedy_same += am == ids[r + 1];
        }
        print_message("case %zu: %d positions (%d images), max |logit err| %.2e = %.2e of scale %.2f, greedy %d/%d\n",
                      ci, np, n_img, worst, worst / scale, scale, greedy_same, ng);
        assert_true(worst < FWD_TOL * scale);
        assert_int_equal(greedy_same, ng);
        /* an image row without its embedding is refused */
        di_batch bad = b;
        bad.embd = NULL;
        assert_int_equal(di_dsv41_forward(ctx, kv, &bad, out, f->pool, &err), DI_ERR_INVALID_ARG);
        di_dsv41_ctx_free(ctx);
        di_dsv41_kv_free(kv);
        for (int32_t i = 0; i < n_img; i++) di_dsv41_image_rows_free(&ir[i]);
        free(out);
        free(gold);
        free(ids);
        free(pos);
        free(seq);
        free(embd);
        free(want);
    }
    json_decref(doc);
    free(js);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tower_matches_deepinfer),
        cmocka_unit_test(test_encode_rejects_bad_input),
        cmocka_unit_test(test_multimodal_forward_matches_oracle),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
