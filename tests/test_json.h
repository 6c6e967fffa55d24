/* Small helpers the model tests share for their JSON goldens (jansson). */
#ifndef DI_TEST_JSON_H
#define DI_TEST_JSON_H

#include "test_util.h"

#include <jansson.h>
#include <stdint.h>

/* A JSON array of ids into out (at most cap, asserted); returns the count. */
static inline int32_t di_test_json_ids(json_t *arr, int32_t *out, int32_t cap) {
    int32_t n = (int32_t)json_array_size(arr);
    assert_true(n <= cap);
    for (int32_t i = 0; i < n; i++) out[i] = (int32_t)json_integer_value(json_array_get(arr, (size_t)i));
    return n;
}

/* The index of the largest of x[0 .. n), the lowest among ties. */
static inline int32_t di_test_argmax(const float *x, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

#endif
