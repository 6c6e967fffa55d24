/* The transport between ranks, behind one small interface, so the model
 * calls dispatch / combine / weight moves without knowing MPI.
 *
 *   di_dist_local_create()     one process (size 1): every collective is a copy
 *   di_dist_mpi_create()       MPI_COMM_WORLD (src/dist/dist_mpi.c, built only
 *                              when CMake finds MPI; DI_HAVE_MPI then defined
 *                              for the command)
 *
 * Every operation is collective over the whole group unless it says
 * otherwise, and every rank must call them in the same order. Buffers are
 * plain bytes: nothing assumes the ranks share memory. A failed operation
 * returns non-zero with a message; the MPI implementation also ends the job
 * by itself (error handler, collective watchdog) when a peer is gone, so a
 * dead rank never leaves the others waiting (dist_mpi.c says how).
 *
 * Ownership: di_dist_free frees what *_create made. */
#ifndef DI_DIST_DIST_H
#define DI_DIST_DIST_H

#include "base/status.h"

#include <stdint.h>

typedef enum di_dist_op { DI_DIST_SUM = 0, DI_DIST_MAX, DI_DIST_MIN } di_dist_op;

/* One point-to-point transfer of di_dist_p2p. */
typedef struct di_dist_msg {
    int32_t peer;
    int32_t send;        /* 1: send buf to peer, 0: receive into buf from peer */
    void *buf;
    int64_t bytes;
    int32_t tag;
} di_dist_msg;

typedef struct di_dist di_dist;

typedef struct di_dist_ops {
    /* recv gets from each peer q recv_bytes[q] bytes, laid out in rank order;
     * send holds send_bytes[q] bytes for each q in rank order. */
    di_status (*alltoallv)(di_dist *d, const void *send, const int64_t *send_bytes, void *recv,
                           const int64_t *recv_bytes, di_error *err);
    /* v (n) reduced in place over all ranks. */
    di_status (*allreduce_i64)(di_dist *d, int64_t *v, int32_t n, di_dist_op op, di_error *err);
    /* Posts every message at once and waits for all (no ordering deadlock).
     * Not collective: only the ranks named as peers take part. */
    di_status (*p2p)(di_dist *d, di_dist_msg *msgs, int32_t n, di_error *err);
    di_status (*barrier)(di_dist *d, di_error *err);
    void (*free)(di_dist *d);
} di_dist_ops;

struct di_dist {
    const di_dist_ops *ops;
    int32_t rank, size;
    /* bytes this rank sent to other ranks through alltoallv (not itself) */
    int64_t bytes_sent;
    int64_t n_collectives;
    double seconds;      /* wall time inside operations (MPI: waiting included) */
    void *impl;
};

di_status di_dist_local_create(di_dist **out, di_error *err);
#ifdef DI_HAVE_MPI
/* Calls MPI_Init_thread when MPI is not initialized yet (and MPI_Finalize in
 * di_dist_free then). timeout_s > 0: a collective or transfer that has not
 * finished after that many seconds ends the process with a message naming
 * the operation (a peer died or hangs); 0 = the default 120 s. */
di_status di_dist_mpi_create(int *argc, char ***argv, double timeout_s, di_dist **out, di_error *err);
/* Every rank's bytes on every rank: *out (malloc'd, caller frees) holds
 * them in rank order, out_bytes[q] (size entries) their lengths. */
di_status di_dist_allgather_bytes(di_dist *d, const void *buf, int64_t n_bytes, void **out, int64_t *out_bytes,
                                  di_error *err);

#endif
void di_dist_free(di_dist *d);

static inline di_status di_dist_alltoallv(di_dist *d, const void *send, const int64_t *send_bytes, void *recv,
                                          const int64_t *recv_bytes, di_error *err) {
    return d->ops->alltoallv(d, send, send_bytes, recv, recv_bytes, err);
}
static inline di_status di_dist_allreduce_i64(di_dist *d, int64_t *v, int32_t n, di_dist_op op, di_error *err) {
    return d->ops->allreduce_i64(d, v, n, op, err);
}
static inline di_status di_dist_p2p(di_dist *d, di_dist_msg *msgs, int32_t n, di_error *err) {
    return d->ops->p2p(d, msgs, n, err);
}
static inline di_status di_dist_barrier(di_dist *d, di_error *err) { return d->ops->barrier(d, err); }

/* Exchanges one int64 per peer: recv[q] = what q put in its send[rank]. */
di_status di_dist_alltoall_i64(di_dist *d, const int64_t *send, int64_t *recv, di_error *err);
/* Gathers every rank's bytes on root: *out (malloc'd, caller frees) holds
 * them in rank order and out_bytes[q] (size entries) their lengths; other
 * ranks get *out = NULL. */
di_status di_dist_gather_bytes(di_dist *d, int32_t root, const void *buf, int64_t n_bytes, void **out,
                               int64_t *out_bytes, di_error *err);

/* Every rank's bytes on every rank: *out (malloc'd, caller frees) holds
 * them in rank order, out_bytes[q] (size entries) their lengths. */
di_status di_dist_allgather_bytes(di_dist *d, const void *buf, int64_t n_bytes, void **out, int64_t *out_bytes,
                                  di_error *err);

#endif
