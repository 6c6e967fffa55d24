/* DeepSeek-V4 MTP module weights (mtp.0.*): validated at load, never run.
 *
 * The fixture tests/data/golden/deepseek_v4/tiny_mtp comes from
 * scripts/gen_goldens_deepseek_v4_mtp.py: tiny_bf16's weights (shard 1, a
 * symlink) plus an MTP module written with safetensors in the layout of the
 * V4 base release (shard 2). transformers has no MTP module, so there is no
 * oracle for MTP logits; what is checked is that the folder loads, that the
 * main model's logits do not change, and that every kind of mistake in the
 * mtp.* tensors is refused with a message naming it. */
#include "test_util.h"

#include "dsv_golden.h"

#include "base/threadpool.h"
#include "model/deepseek_v4.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SHARD1 "model-00001-of-00002.safetensors"
#define SHARD2 "model-00002-of-00002.safetensors"
#define INDEX "model.safetensors.index.json"
#define BLOCK 4
#define N_BLOCKS 16

static char *model_dir(char *buf, size_t size, const char *name) {
    return dsv_golden_dir(buf, size, "deepseek_v4", name);
}

static char *read_in(const char *model, const char *file, size_t *size) {
    char dir[4096], path[4400];
    model_dir(dir, sizeof dir, model);
    snprintf(path, sizeof path, "%s/%s", dir, file);
    char *b = di_test_read_file(path, size);
    assert_non_null(b);
    return b;
}

/* Last-position logits of one fixed prompt. */
static void prompt_logits(const di_dsv4_model *m, float *out) {
    di_error err;
    di_dsv4_kv *kv;
    di_dsv4_ctx *ctx;
    assert_int_equal(di_dsv4_kv_create(m, N_BLOCKS, BLOCK, DI_DTYPE_F32, &kv, &err), DI_OK);
    assert_int_equal(di_dsv4_ctx_create(m, &ctx, &err), DI_OK);
    enum { N = 13 };
    int32_t tok[N], seq[N] = {0}, pos[N], table[N_BLOCKS], nb = N_BLOCKS;
    uint8_t want[N] = {0};
    for (int i = 0; i < N; i++) {
        tok[i] = (i * 37 + 5) % di_dsv4_hparams_of(m)->n_vocab;
        pos[i] = i;
    }
    for (int i = 0; i < N_BLOCKS; i++) table[i] = i;
    want[N - 1] = 1;
    const int32_t *tables[1] = {table};
    di_batch b = {N, tok, seq, pos, want, 1, BLOCK, tables, &nb, NULL, NULL};
    assert_int_equal(di_dsv4_forward(ctx, kv, &b, out, NULL, &err), DI_OK);
    di_dsv4_ctx_free(ctx);
    di_dsv4_kv_free(kv);
}

static void test_mtp_module_loads_and_leaves_logits_alone(void **state) {
    (void)state;
    char dir[4096];
    di_error err = {0};
    di_dsv4_model *with = NULL, *without = NULL;
    assert_int_equal(di_dsv4_load(model_dir(dir, sizeof dir, "tiny_mtp"), NULL, &with, &err), DI_OK);
    assert_int_equal(di_dsv4_load(model_dir(dir, sizeof dir, "tiny_bf16"), NULL, &without, &err), DI_OK);
    assert_int_equal(di_dsv4_mtp_modules(with), 1);
    assert_int_equal(di_dsv4_hparams_of(with)->n_mtp, 1);
    assert_int_equal(di_dsv4_hparams_of(with)->mtp_attn_kind[0], DI_DSV4_ATTN_CSA);
    assert_int_equal(di_dsv4_mtp_modules(without), 0);
    int32_t V = di_dsv4_hparams_of(with)->n_vocab;
    float *a = malloc(sizeof(float) * (size_t)V), *b = malloc(sizeof(float) * (size_t)V);
    prompt_logits(with, a);
    prompt_logits(without, b);
    assert_memory_equal(a, b, sizeof(float) * (size_t)V);
    free(a);
    free(b);
    di_dsv4_free(with);
    di_dsv4_free(without);
}

/* ---- broken variants ---------------------------------------------------------- */

/* Same-length replacement of the first `from` at or after `after` (or the
 * start); fails the test when absent. */
static void patch(char *buf, size_t size, const char *after, const char *from, const char *to) {
    size_t n = strlen(from);
    assert_int_equal(n, strlen(to));
    char *start = buf;
    if (after) {
        start = memmem(buf, size, after, strlen(after));
        assert_non_null(start);
    }
    char *at = memmem(start, size - (size_t)(start - buf), from, n);
    assert_non_null(at);
    memcpy(at, to, n);
}

static void write_file(const char *dir, const char *name, const void *data, size_t size) {
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(data, 1, size, fp), size);
    fclose(fp);
}

/* A temp copy of tiny_mtp with the given config / index / shard 2 text and
 * shard 1 linked to tiny_bf16's weights; loads it and expects the error. */
static void expect_error(const char *config, const char *index, const char *shard2, size_t shard2_size,
                         di_status want, const char *needle) {
    char dir[64] = "/tmp/di_dsv4_mtp_XXXXXX", src[4096], rel[4200], link[4400];
    assert_non_null(mkdtemp(dir));
    write_file(dir, "config.json", config, strlen(config));
    write_file(dir, INDEX, index, strlen(index));
    write_file(dir, SHARD2, shard2, shard2_size);
    snprintf(rel, sizeof rel, "%s/model.safetensors", model_dir(src, sizeof src, "tiny_bf16"));
    char *abs = realpath(rel, NULL);
    assert_non_null(abs);
    snprintf(link, sizeof link, "%s/%s", dir, SHARD1);
    assert_int_equal(symlink(abs, link), 0);
    free(abs);
    di_dsv4_model *m = NULL;
    di_error err = {0};
    dsv_expect_refusal(di_dsv4_load(dir, NULL, &m, &err), &err, want, needle);
    assert_null(m);
    const char *files[] = {"config.json", INDEX, SHARD1, SHARD2};
    for (int i = 0; i < 4; i++) {
        char p[4400];
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        unlink(p);
    }
    rmdir(dir);
}

/* tiny_mtp's config with key set to the JSON value (jansson round trip). */
static char *config_with(const char *key, const char *value, const char *key2, const char *value2) {
    char *text = read_in("tiny_mtp", "config.json", NULL);
    json_error_t jerr;
    json_t *j = json_loads(text, 0, &jerr);
    free(text);
    assert_non_null(j);
    json_object_set_new(j, key, json_loads(value, JSON_DECODE_ANY, &jerr));
    if (key2) json_object_set_new(j, key2, json_loads(value2, JSON_DECODE_ANY, &jerr));
    char *out = json_dumps(j, 0);
    json_decref(j);
    return out;
}

static void test_mtp_mistakes_rejected(void **state) {
    (void)state;
    size_t n2;
    char *cfg = read_in("tiny_mtp", "config.json", NULL);
    char *index = read_in("tiny_mtp", INDEX, NULL);
    char *shard2 = read_in("tiny_mtp", SHARD2, &n2);
    char *bad = malloc(n2), *bad_index = strdup(index);

    printf("config says no MTP module, but the weights have one\n");
    char *c = config_with("num_nextn_predict_layers", "0", "compress_ratios", "[0, 0, 4, 128, 4, 128]");
    expect_error(c, index, shard2, n2, DI_ERR_FORMAT, "MTP module 0 but num_nextn_predict_layers is 0");
    free(c);

    printf("config says two modules, the weights have one\n");
    c = config_with("num_nextn_predict_layers", "2", NULL, NULL);
    expect_error(c, index, shard2, n2, DI_ERR_FORMAT, "missing tensor 'mtp.1.hc_attn_fn'");
    free(c);

    printf("a module index past the config\n");
    memcpy(bad, shard2, n2);
    patch(bad, n2, NULL, "\"mtp.0.enorm.weight\"", "\"mtp.1.enorm.weight\"");
    patch(bad_index, strlen(bad_index), NULL, "\"mtp.0.enorm.weight\"", "\"mtp.1.enorm.weight\"");
    expect_error(cfg, bad_index, bad, n2, DI_ERR_FORMAT,
                 "tensor 'mtp.1.enorm.weight': MTP module 1 but num_nextn_predict_layers is 1");

    printf("a missing MTP tensor\n");
    memcpy(bad, shard2, n2);
    strcpy(bad_index, index);
    patch(bad, n2, NULL, "\"mtp.0.hnorm.weight\"", "\"mtp.0.hnorx.weight\"");
    patch(bad_index, strlen(bad_index), NULL, "\"mtp.0.hnorm.weight\"", "\"mtp.0.hnorx.weight\"");
    expect_error(cfg, bad_index, bad, n2, DI_ERR_FORMAT, "missing tensor 'mtp.0.hnorm.weight'");

    printf("a wrongly shaped MTP tensor (same bytes, [8, 512] for [64, 64])\n");
    memcpy(bad, shard2, n2);
    patch(bad, n2, "\"mtp.0.e_proj.weight\"", "[64,64]", "[8,512]");
    expect_error(cfg, index, bad, n2, DI_ERR_FORMAT, "'mtp.0.e_proj.weight': shape must be [64, 64]");

    printf("tensors the module's kind does not have (config: window-only MTP layer)\n");
    c = config_with("compress_ratios", "[0, 0, 4, 128, 4, 128, 0]", NULL, NULL);
    expect_error(c, index, shard2, n2, DI_ERR_FORMAT, "unexpected tensor 'mtp.0.attn.");
    free(c);

    printf("an MTP name without a module index\n");
    memcpy(bad, shard2, n2);
    strcpy(bad_index, index);
    patch(bad, n2, NULL, "\"mtp.0.norm.weight\"", "\"mtp.x.norm.weight\"");
    patch(bad_index, strlen(bad_index), NULL, "\"mtp.0.norm.weight\"", "\"mtp.x.norm.weight\"");
    expect_error(cfg, bad_index, bad, n2, DI_ERR_FORMAT, "unexpected tensor 'mtp.x.norm.weight'");

    free(bad);
    free(bad_index);
    free(shard2);
    free(index);
    free(cfg);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mtp_module_loads_and_leaves_logits_alone),
        cmocka_unit_test(test_mtp_mistakes_rejected),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
