/* Reader for the golden files written by scripts/gen_goldens_dtype.py
 * (format described there): named arrays of u8, f32 or i64. Header-only
 * because each test_*.c is its own executable linked with test_util.c only.
 * Test code: failures go through cmocka's fail_msg. */
#ifndef DI_TESTS_TENSOR_GOLDEN_H
#define DI_TESTS_TENSOR_GOLDEN_H

#include "test_util.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GOLDEN_MAGIC "DIGOLD\0\1"
#define GOLDEN_MAGIC_BYTES 8
#define GOLDEN_NAME_BYTES 24
#define GOLDEN_MAX_ARRAYS 8
#define GOLDEN_DIR "tests/data/golden/dtype/"

enum { GOLDEN_U8 = 1, GOLDEN_F32 = 2, GOLDEN_I64 = 3 };

typedef struct golden_array {
    char name[GOLDEN_NAME_BYTES + 1];
    uint32_t kind;
    uint64_t count;
    const uint8_t *data; /* points into golden_file.buf */
} golden_array;

typedef struct golden_file {
    char *buf;
    size_t size;
    int n;
    golden_array arrays[GOLDEN_MAX_ARRAYS];
} golden_file;

static inline size_t golden_elem_size(uint32_t kind) {
    return kind == GOLDEN_U8 ? 1 : kind == GOLDEN_F32 ? 4 : kind == GOLDEN_I64 ? 8 : 0;
}

/* Loads GOLDEN_DIR<name>.bin; fails the test when missing or malformed. */
static inline void golden_load(golden_file *g, const char *name) {
    char rel[256], path[4096];
    snprintf(rel, sizeof rel, GOLDEN_DIR "%s.bin", name);
    di_test_path(path, sizeof path, rel);
    memset(g, 0, sizeof *g);
    g->buf = di_test_read_file(path, &g->size);
    if (!g->buf) fail_msg("cannot read golden %s (run `make goldens`?)", path);
    if (g->size < GOLDEN_MAGIC_BYTES + 4 || memcmp(g->buf, GOLDEN_MAGIC, GOLDEN_MAGIC_BYTES) != 0)
        fail_msg("%s: bad magic", path);
    uint32_t n;
    memcpy(&n, g->buf + GOLDEN_MAGIC_BYTES, 4);
    if (n > GOLDEN_MAX_ARRAYS) fail_msg("%s: %u arrays", path, n);
    size_t off = GOLDEN_MAGIC_BYTES + 4;
    for (uint32_t i = 0; i < n; i++) {
        golden_array *a = &g->arrays[i];
        if (g->size - off < GOLDEN_NAME_BYTES + 16) fail_msg("%s: truncated header", path);
        memcpy(a->name, g->buf + off, GOLDEN_NAME_BYTES);
        a->name[GOLDEN_NAME_BYTES] = 0;
        memcpy(&a->kind, g->buf + off + GOLDEN_NAME_BYTES, 4);
        memcpy(&a->count, g->buf + off + GOLDEN_NAME_BYTES + 8, 8);
        off += GOLDEN_NAME_BYTES + 16;
        size_t es = golden_elem_size(a->kind);
        if (es == 0 || a->count > (g->size - off) / es) fail_msg("%s: bad array %s", path, a->name);
        a->data = (const uint8_t *)g->buf + off;
        off += es * a->count;
    }
    g->n = (int)n;
}

static inline void golden_free(golden_file *g) {
    free(g->buf);
    g->buf = NULL;
}

/* The named array, checked to be of the given kind. */
static inline const golden_array *golden_get(const golden_file *g, const char *name, uint32_t kind) {
    for (int i = 0; i < g->n; i++)
        if (strcmp(g->arrays[i].name, name) == 0) {
            if (g->arrays[i].kind != kind) fail_msg("golden array %s has kind %u", name, g->arrays[i].kind);
            return &g->arrays[i];
        }
    fail_msg("golden array %s missing", name);
    return NULL;
}

/* Copies a golden f32 array into a malloc'd, aligned buffer (the file data
 * is not 4-byte aligned). Caller frees. */
static inline float *golden_floats(const golden_array *a) {
    float *f = malloc(a->count * sizeof(float) + 1);
    assert_non_null(f);
    memcpy(f, a->data, a->count * sizeof(float));
    return f;
}

static inline uint32_t golden_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* Same value bit for bit, where any NaN equals any NaN (payloads differ
 * between numpy, ml_dtypes and us and carry no meaning here). */
static inline int golden_same(float got, float want) {
    if (isnan(got) || isnan(want)) return isnan(got) && isnan(want);
    return golden_bits(got) == golden_bits(want);
}

/* Fails on the first element that is not golden_same, naming it. */
static inline void golden_expect_floats(const char *what, const float *got, const float *want, uint64_t n) {
    for (uint64_t i = 0; i < n; i++)
        if (!golden_same(got[i], want[i]))
            fail_msg("%s: element %llu: got %.9g (0x%08x), want %.9g (0x%08x)", what, (unsigned long long)i,
                     (double)got[i], golden_bits(got[i]), (double)want[i], golden_bits(want[i]));
}

#endif
