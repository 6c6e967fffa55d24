/* DeepSeek-V4 FP8 linears whose sides are not multiples of the 128 block
 * (partial edge blocks), against numpy + ml_dtypes
 * (scripts/gen_goldens_fp8_edge.py; transformers' dequantizer needs whole
 * blocks, so it cannot be the oracle here):
 *  - every dispatch table dequantizes every row bit for bit like ml_dtypes,
 *    also through a view that starts mid-block (the grouped output
 *    projection's row_off);
 *  - y = x W^T for 1 row (row-wise path) and 5 rows (4-row tiles) is within
 *    f32 rounding of the float64 product, and the two paths agree bit for
 *    bit (batch invariance), on 1 and 2 threads. */
#include "test_util.h"

#include "base/threadpool.h"
#include "model/deepseek_v4_internal.h"
#include "tensor/fp8.h"
#include "tensor/golden.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* golden_load reads GOLDEN_DIR (the dtype goldens) + name */
#define EDGE_GOLDEN "../deepseek_v4/fp8_edge/fp8_edge"
/* f32 dot of 300 terms vs float64, relative to sum |w x| (the terms cancel:
 * weights span e4m3's whole range): rounding is ~sqrt(300) * 2^-24 of it */
#define REL_TOL 1e-5

typedef struct edge {
    golden_file g;
    int64_t rows, cols, n_x;
    int32_t block;
    const uint8_t *w;
    float *scale, *deq, *x, *y;
    dsv4_linear lin;
} edge;

static void edge_load(edge *e) {
    golden_load(&e->g, EDGE_GOLDEN);
    float *dims = golden_floats(golden_get(&e->g, "dims", GOLDEN_F32));
    e->rows = (int64_t)dims[0];
    e->cols = (int64_t)dims[1];
    e->block = (int32_t)dims[2];
    e->n_x = (int64_t)dims[3];
    free(dims);
    assert_true(e->rows % e->block != 0 && e->cols % e->block != 0); /* the point of the golden */
    const golden_array *s = golden_get(&e->g, "scale", GOLDEN_U8);
    int64_t sr = (e->rows + e->block - 1) / e->block, sc = (e->cols + e->block - 1) / e->block;
    assert_int_equal(s->count, (uint64_t)(sr * sc));
    e->scale = malloc(sizeof(float) * (size_t)(sr * sc));
    for (int64_t i = 0; i < sr * sc; i++) e->scale[i] = di_e8m0_to_f32(s->data[i]);
    e->w = golden_get(&e->g, "weight", GOLDEN_U8)->data;
    e->deq = golden_floats(golden_get(&e->g, "deq", GOLDEN_F32));
    e->x = golden_floats(golden_get(&e->g, "x", GOLDEN_F32));
    e->y = golden_floats(golden_get(&e->g, "y", GOLDEN_F32));
    e->lin = (dsv4_linear){.kind = DSV4_W_FP8, .data = e->w, .row_bytes = (uint64_t)e->cols, .n_in = e->cols,
                           .n_out = e->rows, .scale = e->scale, .scale_cols = sc, .block = e->block};
}

static void edge_free(edge *e) {
    free(e->scale);
    free(e->deq);
    free(e->x);
    free(e->y);
    golden_free(&e->g);
}

static void test_partial_blocks_dequantize_like_ml_dtypes(void **state) {
    (void)state;
    edge e;
    edge_load(&e);
    float *row = malloc(sizeof(float) * (size_t)e.cols);
    for (int isa = 0; isa < DI_CPU_ISA_COUNT; isa++) {
        const di_cpu_kernels *k = di_cpu_kernels_get((di_cpu_isa)isa);
        if (!k) continue;
        char what[64];
        for (int64_t o = 0; o < e.rows; o++) {
            dsv4_linear_row(k, &e.lin, o, row);
            snprintf(what, sizeof what, "%s row %lld", k->name, (long long)o);
            golden_expect_floats(what, row, e.deq + o * e.cols, (uint64_t)e.cols);
        }
        /* a view of rows [72, rows): starts inside the first block row */
        const int64_t off = 72;
        dsv4_linear v = e.lin;
        v.data = e.w + off * e.cols;
        v.n_out = e.rows - off;
        v.row_off = off;
        for (int64_t o = 0; o < v.n_out; o++) {
            dsv4_linear_row(k, &v, o, row);
            snprintf(what, sizeof what, "%s view row %lld", k->name, (long long)o);
            golden_expect_floats(what, row, e.deq + (o + off) * e.cols, (uint64_t)e.cols);
        }
    }
    free(row);
    edge_free(&e);
}

static void test_partial_blocks_matmul_close_and_invariant(void **state) {
    (void)state;
    edge e;
    edge_load(&e);
    di_error err;
    di_threadpool *pool2;
    assert_int_equal(di_threadpool_create(2, &pool2, &err), DI_OK);
    float *scratch = malloc(sizeof(float) * (size_t)dsv4_linear_scratch_floats(e.n_x, e.cols, 2, 2));
    float *y1 = malloc(sizeof(float) * (size_t)(e.n_x * e.rows)), *yb = malloc(sizeof(float) * (size_t)(e.n_x * e.rows));
    for (int isa = 0; isa < DI_CPU_ISA_COUNT; isa++) {
        const di_cpu_kernels *k = di_cpu_kernels_get((di_cpu_isa)isa);
        if (!k) continue;
        for (int t = 0; t < 2; t++) {
            di_threadpool *pool = t ? pool2 : NULL;
            for (int64_t r = 0; r < e.n_x; r++) /* one row at a time: the row-wise path */
                dsv4_linear_apply(k, &e.lin, e.x + r * e.cols, e.cols, y1 + r * e.rows, e.rows, 1, scratch, pool);
            dsv4_linear_apply(k, &e.lin, e.x, e.cols, yb, e.rows, e.n_x, scratch, pool); /* 4-row tiles */
            for (int64_t i = 0; i < e.n_x * e.rows; i++) {
                if (golden_bits(y1[i]) != golden_bits(yb[i]))
                    fail_msg("%s, %d thread(s): y[%lld] alone %.9g, in a batch %.9g", k->name, t + 1, (long long)i,
                             (double)y1[i], (double)yb[i]);
                double want = e.y[i], mag = 0.0;
                const float *wr = e.deq + (i % e.rows) * e.cols, *xr = e.x + (i / e.rows) * e.cols;
                for (int64_t c = 0; c < e.cols; c++) mag += fabs((double)wr[c] * xr[c]);
                if (fabs(yb[i] - want) > REL_TOL * mag)
                    fail_msg("%s: y[%lld] = %.9g, numpy %.9g", k->name, (long long)i, (double)yb[i], want);
            }
        }
    }
    free(y1);
    free(yb);
    free(scratch);
    di_threadpool_free(pool2);
    edge_free(&e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_partial_blocks_dequantize_like_ml_dtypes),
        cmocka_unit_test(test_partial_blocks_matmul_close_and_invariant),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
