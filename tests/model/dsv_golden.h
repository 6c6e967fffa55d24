/* The golden harness the DeepSeek model tests share (V4 and V4.1 alike),
 * beside the batch driver of dsv_rows.h: where a tiny checkpoint and its
 * goldens live, reading them, the prompt ids of a case, feeding a prompt
 * through a model's runner in steps (one prefill, token by token, chunks),
 * argmax, and the check of a refusal (status and a substring of the
 * message). The model-specific runner (model, KV, context, forward call)
 * stays in each test; it hands dsv_feed its run function. */
#ifndef DI_TESTS_MODEL_DSV_GOLDEN_H
#define DI_TESTS_MODEL_DSV_GOLDEN_H

#include "test_util.h"

#include "dsv_rows.h"

#include "base/status.h"
#include "base/threadpool.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* tests/data/golden/<family>/<name> ("deepseek_v4", "tiny_bf16"). */
static inline char *dsv_golden_dir(char *buf, size_t size, const char *family, const char *name) {
    char rel[256];
    snprintf(rel, sizeof rel, "tests/data/golden/%s/%s", family, name);
    return di_test_path(buf, size, rel);
}

/* <dir>/<file> parsed as JSON; NULL (with a message) when it cannot be. */
static inline json_t *dsv_load_json(const char *dir, const char *file) {
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    json_error_t jerr;
    json_t *doc = json_load_file(path, 0, &jerr);
    if (!doc) fprintf(stderr, "%s: %s\n", path, jerr.text);
    return doc;
}

/* <dir>/<file> as floats, *n of them; NULL when it cannot be read. */
static inline float *dsv_load_f32(const char *dir, const char *file, size_t *n) {
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    size_t size = 0;
    float *f = (float *)(void *)di_test_read_file(path, &size);
    *n = size / sizeof(float);
    return f;
}

static inline size_t dsv_n_cases(json_t *doc) { return json_array_size(json_object_get(doc, "cases")); }

/* The prompt of case i of a goldens.json into ids (at most cap); its length. */
static inline int32_t dsv_case_prompt(json_t *doc, size_t i, int32_t *ids, int32_t cap) {
    json_t *p = json_object_get(json_array_get(json_object_get(doc, "cases"), i), "prompt");
    const int32_t n = (int32_t)json_array_size(p);
    assert_true(n > 0 && n <= cap);
    for (int32_t t = 0; t < n; t++) ids[t] = (int32_t)json_integer_value(json_array_get(p, (size_t)t));
    return n;
}

/* The prompt length of case i (to size the ids). */
static inline int32_t dsv_case_len(json_t *doc, size_t i) {
    return (int32_t)json_array_size(json_object_get(json_array_get(json_object_get(doc, "cases"), i), "prompt"));
}

static inline int32_t dsv_argmax(const float *x, int32_t n) {
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* A model's runner: its cache, its context and the rows being built; ops
 * are the model's forward and destructors (the test makes kv and ctx with
 * the model's own create calls). */
typedef struct dsv_model_ops {
    di_status (*forward)(void *ctx, void *kv, const di_batch *b, float *logits, di_threadpool *pool, di_error *err);
    void (*kv_free)(void *kv);
    void (*ctx_free)(void *ctx);
} dsv_model_ops;

typedef struct dsv_runner {
    const dsv_model_ops *ops;
    void *kv, *ctx;       /* the model's di_dsv4_kv / di_dsv41_kv and context, owned */
    dsv_rows rows;        /* the batch being built */
} dsv_runner;

static inline void dsv_runner_free(dsv_runner *r) {
    r->ops->ctx_free(r->ctx);
    r->ops->kv_free(r->kv);
    dsv_rows_free(&r->rows);
}

static inline void dsv_runner_add(dsv_runner *r, int32_t tok, int32_t seq, int32_t pos, int want) {
    dsv_rows_add(&r->rows, tok, seq, pos, want);
}

/* Runs the rows built so far (then forgets them); logits of wanted rows in
 * row order. rv: a dsv_runner (the dsv_run_fn shape). */
static inline di_status dsv_runner_run(void *rv, float *logits, di_threadpool *pool, di_error *err) {
    dsv_runner *r = rv;
    di_batch b = dsv_rows_batch(&r->rows);
    di_status s = r->ops->forward(r->ctx, r->kv, &b, logits, pool, err);
    r->rows.n = 0;
    return s;
}

/* A runner's forward of the rows built so far (logits of wanted rows in
 * row order); it empties the rows. */
typedef di_status (*dsv_run_fn)(void *runner, float *logits, di_threadpool *pool, di_error *err);

/* Feeds ids[0..n) into sequence slot `slot` of the runner whose rows are
 * `rows`, step rows a forward (n: one prefill, 1: decode), every row
 * wanted: out gets (n, n_vocab) logits. Fails the test on an error, naming
 * `what`. */
static inline void dsv_feed(dsv_rows *rows, dsv_run_fn run, void *runner, const int32_t *ids, int32_t n, int32_t slot,
                            int32_t step, int32_t n_vocab, float *out, di_threadpool *pool, const char *what) {
    di_error err;
    for (int32_t t0 = 0; t0 < n; t0 += step) {
        int32_t t1 = t0 + step < n ? t0 + step : n;
        for (int32_t t = t0; t < t1; t++) dsv_rows_add(rows, ids[t], slot, t, 1);
        if (run(runner, out + (size_t)t0 * n_vocab, pool, &err) != DI_OK) {
            fprintf(stderr, "%s: %s\n", what, err.msg);
            fail();
        }
    }
}

/* A refusal: status want and needle in the message (printed either way). */
static inline void dsv_expect_refusal(di_status s, const di_error *err, di_status want, const char *needle) {
    printf("  -> %s\n", err->msg);
    if (s != want || !strstr(err->msg, needle)) {
        fprintf(stderr, "expected status %d with '%s', got %d: %s\n", (int)want, needle, (int)s, err->msg);
        fail();
    }
}

#endif
