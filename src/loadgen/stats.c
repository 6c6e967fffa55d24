/* Percentiles and latency summaries for `bench serve` records. */
#include "loadgen/loadgen.h"

#include "base/alloc.h"
#include "base/status.h"

#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Rank h = q (n - 1), value between the neighbours floor(h) and floor(h)+1:
 * numpy.percentile's default and statistics.quantiles(method='inclusive'). */
double di_lg_percentile(const double *sorted, size_t n, double q) {
    if (n == 0) return 0;
    if (q <= 0) return sorted[0];
    if (q >= 1) return sorted[n - 1];
    double h = q * (double)(n - 1);
    size_t lo = (size_t)h;
    if (lo + 1 >= n) return sorted[n - 1];
    double frac = h - (double)lo;
    return sorted[lo] + frac * (sorted[lo + 1] - sorted[lo]);
}

di_status di_lg_summarize(const double *x, size_t n, di_lg_summary *out, di_error *err) {
    memset(out, 0, sizeof *out);
    if (n == 0) return DI_OK;
    double *s = di_malloc_array(n, sizeof *s);
    if (!s) return di_error_set(err, DI_ERR_NOMEM, "summary of %zu samples", n);
    memcpy(s, x, n * sizeof *s);
    qsort(s, n, sizeof *s, cmp_double);
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += s[i];
    out->n = n;
    out->mean = sum / (double)n;
    out->p50 = di_lg_percentile(s, n, 0.50);
    out->p95 = di_lg_percentile(s, n, 0.95);
    out->p99 = di_lg_percentile(s, n, 0.99);
    out->max = s[n - 1];
    free(s);
    return DI_OK;
}
