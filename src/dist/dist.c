/* The one-process transport (size 1) and the helpers built on the ops. */
#include "dist/dist.h"

#include "base/alloc.h"

#include <stdlib.h>
#include <string.h>

static di_status local_alltoallv(di_dist *d, const void *send, const int64_t *send_bytes, void *recv,
                                 const int64_t *recv_bytes, di_error *err) {
    if (send_bytes[0] != recv_bytes[0])
        return di_error_set(err, DI_ERR_INVALID_ARG, "dist: alltoallv sends %lld bytes to itself, expects %lld",
                            (long long)send_bytes[0], (long long)recv_bytes[0]);
    if (send_bytes[0]) memmove(recv, send, (size_t)send_bytes[0]);
    d->n_collectives++;
    return DI_OK;
}

static di_status local_allreduce(di_dist *d, int64_t *v, int32_t n, di_dist_op op, di_error *err) {
    d->n_collectives++;
    return DI_OK;
}

static di_status local_p2p(di_dist *d, di_dist_msg *msgs, int32_t n, di_error *err) {
    if (n) return di_error_set(err, DI_ERR_INVALID_ARG, "dist: point-to-point transfer in a group of one");
    return DI_OK;
}

static di_status local_barrier(di_dist *d, di_error *err) { return DI_OK; }

static void local_free(di_dist *d) { free(d); }

static const di_dist_ops LOCAL_OPS = {local_alltoallv, local_allreduce, local_p2p, local_barrier, local_free};

di_status di_dist_local_create(di_dist **out, di_error *err) {
    di_dist *d = di_calloc(1, sizeof *d);
    if (!d) return di_error_set(err, DI_ERR_NOMEM, "dist: out of memory");
    d->ops = &LOCAL_OPS;
    d->rank = 0;
    d->size = 1;
    *out = d;
    return DI_OK;
}

void di_dist_free(di_dist *d) {
    if (d) d->ops->free(d);
}

di_status di_dist_alltoall_i64(di_dist *d, const int64_t *send, int64_t *recv, di_error *err) {
    int64_t *bytes = di_malloc_array((size_t)d->size, sizeof *bytes);
    if (!bytes) return di_error_set(err, DI_ERR_NOMEM, "dist: out of memory");
    for (int32_t q = 0; q < d->size; q++) bytes[q] = (int64_t)sizeof(int64_t);
    di_status s = di_dist_alltoallv(d, send, bytes, recv, bytes, err);
    free(bytes);
    return s;
}

di_status di_dist_gather_bytes(di_dist *d, int32_t root, const void *buf, int64_t n_bytes, void **out,
                               int64_t *out_bytes, di_error *err) {
    *out = NULL;
    const int32_t P = d->size;
    int64_t *cnt = di_calloc((size_t)P * 3, sizeof *cnt), *sb = cnt + P, *rb = cnt + 2 * P;
    if (!cnt) return di_error_set(err, DI_ERR_NOMEM, "dist: out of memory");
    cnt[root] = n_bytes;
    di_status s = di_dist_alltoall_i64(d, cnt, rb, err); /* rb[q]: q's length (root only uses it) */
    if (s) goto done;
    int64_t total = 0;
    for (int32_t q = 0; q < P; q++) {
        sb[q] = q == root ? n_bytes : 0;
        if (d->rank != root) rb[q] = 0;
        total += rb[q];
    }
    void *all = NULL;
    if (d->rank == root && !(all = malloc((size_t)(total > 0 ? total : 1)))) {
        s = di_error_set(err, DI_ERR_NOMEM, "dist: out of memory for %lld gathered bytes", (long long)total);
        goto done;
    }
    if ((s = di_dist_alltoallv(d, buf, sb, all, rb, err))) {
        free(all);
        goto done;
    }
    if (d->rank == root) {
        memcpy(out_bytes, rb, (size_t)P * sizeof *rb);
        *out = all;
    }
done:
    free(cnt);
    return s;
}

di_status di_dist_allgather_bytes(di_dist *d, const void *buf, int64_t n_bytes, void **out, int64_t *out_bytes,
                                  di_error *err) {
    *out = NULL;
    const int32_t P = d->size;
    int64_t *cnt = di_malloc_array((size_t)P * 2, sizeof *cnt), *sb = cnt + P;
    if (!cnt) return di_error_set(err, DI_ERR_NOMEM, "dist: out of memory");
    for (int32_t q = 0; q < P; q++) cnt[q] = n_bytes;
    di_status s = di_dist_alltoall_i64(d, cnt, out_bytes, err);
    int64_t total = 0;
    for (int32_t q = 0; !s && q < P; q++) total += out_bytes[q];
    void *all = s ? NULL : malloc((size_t)(total > 0 ? total : 1));
    if (!s && !all) s = di_error_set(err, DI_ERR_NOMEM, "dist: out of memory for %lld bytes", (long long)total);
    /* the same bytes to every peer: one send buffer repeated */
    char *rep = NULL;
    if (!s && !(rep = malloc((size_t)(n_bytes * P > 0 ? n_bytes * P : 1))))
        s = di_error_set(err, DI_ERR_NOMEM, "dist: out of memory");
    if (!s) {
        for (int32_t q = 0; q < P; q++) {
            if (n_bytes) memcpy(rep + (int64_t)q * n_bytes, buf, (size_t)n_bytes);
            sb[q] = n_bytes;
        }
        s = di_dist_alltoallv(d, rep, sb, all, out_bytes, err);
    }
    free(rep);
    free(cnt);
    if (s) {
        free(all);
        return s;
    }
    *out = all;
    return DI_OK;
}
