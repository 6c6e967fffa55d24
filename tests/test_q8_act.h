/* Activation rows quantized by a table's int8 quantizer, for the gemm
 * tests (tests/kernels): the rows, their block scales and the di_q8_rows
 * view of them. */
#ifndef DI_TEST_Q8_ACT_H
#define DI_TEST_Q8_ACT_H

#include "kernels/cpu/kernels.h"

#include <stdlib.h>

typedef struct test_q8_act {
    int8_t *q;       /* (n_rows, n_in) */
    float *d, *s;    /* (n_rows, n_in / 32) */
    di_q8_rows rows; /* over q, d, s; no packing */
} test_q8_act;

/* x (n_rows, n_in) through k->quantize_q8, row by row. */
static inline test_q8_act test_q8_act_make(const di_cpu_kernels *k, const float *x, int64_t n_rows, int64_t n_in) {
    const int64_t nb = n_in / DI_Q8_ACT_BLOCK;
    test_q8_act a = {malloc((size_t)(n_rows * n_in)), malloc(sizeof(float) * (size_t)(n_rows * nb)),
                     malloc(sizeof(float) * (size_t)(n_rows * nb)), {0}};
    for (int64_t r = 0; r < n_rows; r++) k->quantize_q8(x + r * n_in, a.q + r * n_in, a.d + r * nb, a.s + r * nb, n_in);
    a.rows = (di_q8_rows){a.q, a.d, a.s, n_in, nb, NULL, NULL, NULL};
    return a;
}

static inline void test_q8_act_free(test_q8_act *a) {
    free(a->q);
    free(a->d);
    free(a->s);
}

#endif
