/* di_dist over MPI_COMM_WORLD (Open MPI). Built only when CMake finds MPI.
 *
 * Failure handling, so a dead or stuck rank ends the job in bounded time:
 *   - MPI_ERRORS_RETURN on the communicator: a failed call comes back here,
 *     is printed with the rank and the operation, and the job is aborted
 *     (MPI_Abort: after a failed collective the group cannot continue);
 *   - a watchdog thread: an operation still running after timeout_s prints
 *     which one and on which rank, and exits the process with status 3, and
 *     mpirun then ends the others. A rank that dies (signal, crash) is
 *     noticed by mpirun itself, which ends the job; the watchdog covers a
 *     peer that hangs without dying.
 *
 * Fault injection for the tests: DI_DIST_FAULT=RANK:N:kill|hang makes rank
 * RANK kill itself (SIGKILL) or stop forever before its N-th collective. */
#include "dist/dist.h"

#include "base/alloc.h"

#include <mpi.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define WATCHDOG_POLL_US 100000   /* how often the watchdog looks */
#define DEFAULT_TIMEOUT_S 120.0   /* a step of a tiny model takes milliseconds */
#define EXIT_STALLED 3

typedef struct mpi_impl {
    int finalize;               /* we called MPI_Init */
    double timeout_s;
    _Atomic(const char *) op;   /* operation in progress, NULL when none */
    _Atomic double op_t0;
    atomic_int stop;
    pthread_t watchdog;
    int have_watchdog;
    int fault_rank, fault_kill;
    int64_t fault_at;
    int *cnt_s, *dsp_s, *cnt_r, *dsp_r; /* (size) MPI int counts */
} mpi_impl;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *watchdog_main(void *arg) {
    di_dist *d = arg;
    mpi_impl *im = d->impl;
    while (!atomic_load(&im->stop)) {
        usleep(WATCHDOG_POLL_US);
        const char *op = atomic_load(&im->op);
        double dt = now_s() - atomic_load(&im->op_t0);
        if (op && dt > im->timeout_s) {
            fprintf(stderr,
                    "deepinfer: rank %d of %d: %s has not finished after %.0f s: a peer rank died or hangs; "
                    "ending the job\n", (int)d->rank, (int)d->size, op, dt);
            fflush(stderr);
            _exit(EXIT_STALLED);
        }
    }
    return NULL;
}

static void begin(di_dist *d, const char *op) {
    mpi_impl *im = d->impl;
    if (im->fault_rank == d->rank && d->n_collectives + 1 == im->fault_at) {
        fprintf(stderr, "deepinfer: rank %d: DI_DIST_FAULT: %s before %s #%lld\n", (int)d->rank,
                im->fault_kill ? "killing itself" : "hanging", op, (long long)im->fault_at);
        fflush(stderr);
        if (im->fault_kill) raise(SIGKILL);
        for (;;) pause();
    }
    atomic_store(&im->op_t0, now_s());
    atomic_store(&im->op, op);
}

static void end(di_dist *d) {
    mpi_impl *im = d->impl;
    d->seconds += now_s() - atomic_load(&im->op_t0);
    atomic_store(&im->op, (const char *)NULL);
    d->n_collectives++;
}

/* An MPI call failed: say where, then end the whole job. */
static di_status failed(di_dist *d, const char *op, int rc, di_error *err) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    fprintf(stderr, "deepinfer: rank %d of %d: MPI %s failed: %s; aborting the job\n", (int)d->rank,
            (int)d->size, op, msg);
    fflush(stderr);
    di_error_set(err, DI_ERR_IO, "MPI %s failed on rank %d: %s", op, (int)d->rank, msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
    return DI_ERR_IO;
}

static di_status to_counts(di_dist *d, const int64_t *bytes, int *cnt, int *dsp, di_error *err) {
    int64_t off = 0;
    for (int32_t q = 0; q < d->size; q++) {
        if (bytes[q] < 0 || bytes[q] > INT32_MAX || off > INT32_MAX)
            return di_error_set(err, DI_ERR_RANGE, "dist: %lld bytes for rank %d exceed MPI's int counts",
                                (long long)bytes[q], (int)q);
        cnt[q] = (int)bytes[q];
        dsp[q] = (int)off;
        off += bytes[q];
    }
    return off > INT32_MAX ? di_error_set(err, DI_ERR_RANGE, "dist: message too large") : DI_OK;
}

static di_status mpi_alltoallv(di_dist *d, const void *send, const int64_t *send_bytes, void *recv,
                               const int64_t *recv_bytes, di_error *err) {
    mpi_impl *im = d->impl;
    di_status s = to_counts(d, send_bytes, im->cnt_s, im->dsp_s, err);
    if (s || (s = to_counts(d, recv_bytes, im->cnt_r, im->dsp_r, err))) return s;
    for (int32_t q = 0; q < d->size; q++)
        if (q != d->rank) d->bytes_sent += send_bytes[q];
    begin(d, "MPI_Alltoallv");
    int rc = MPI_Alltoallv(send, im->cnt_s, im->dsp_s, MPI_BYTE, recv, im->cnt_r, im->dsp_r, MPI_BYTE,
                           MPI_COMM_WORLD);
    end(d);
    return rc == MPI_SUCCESS ? DI_OK : failed(d, "MPI_Alltoallv", rc, err);
}

static di_status mpi_allreduce(di_dist *d, int64_t *v, int32_t n, di_dist_op op, di_error *err) {
    MPI_Op mop = op == DI_DIST_SUM ? MPI_SUM : op == DI_DIST_MAX ? MPI_MAX : MPI_MIN;
    begin(d, "MPI_Allreduce");
    int rc = MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_INT64_T, mop, MPI_COMM_WORLD);
    end(d);
    return rc == MPI_SUCCESS ? DI_OK : failed(d, "MPI_Allreduce", rc, err);
}

static di_status mpi_p2p(di_dist *d, di_dist_msg *msgs, int32_t n, di_error *err) {
    MPI_Request *req = di_malloc_array((size_t)(n > 0 ? n : 1), sizeof *req);
    if (!req) return di_error_set(err, DI_ERR_NOMEM, "dist: out of memory");
    begin(d, "point-to-point weight transfer");
    int rc = MPI_SUCCESS;
    for (int32_t i = 0; i < n && rc == MPI_SUCCESS; i++) {
        if (msgs[i].bytes > INT32_MAX) {
            end(d);
            free(req);
            return di_error_set(err, DI_ERR_RANGE, "dist: message of %lld bytes", (long long)msgs[i].bytes);
        }
        rc = msgs[i].send ? MPI_Isend(msgs[i].buf, (int)msgs[i].bytes, MPI_BYTE, msgs[i].peer, msgs[i].tag,
                                      MPI_COMM_WORLD, &req[i])
                          : MPI_Irecv(msgs[i].buf, (int)msgs[i].bytes, MPI_BYTE, msgs[i].peer, msgs[i].tag,
                                      MPI_COMM_WORLD, &req[i]);
    }
    if (rc == MPI_SUCCESS) rc = MPI_Waitall(n, req, MPI_STATUSES_IGNORE);
    end(d);
    free(req);
    return rc == MPI_SUCCESS ? DI_OK : failed(d, "point-to-point transfer", rc, err);
}

static di_status mpi_barrier(di_dist *d, di_error *err) {
    begin(d, "MPI_Barrier");
    int rc = MPI_Barrier(MPI_COMM_WORLD);
    end(d);
    return rc == MPI_SUCCESS ? DI_OK : failed(d, "MPI_Barrier", rc, err);
}

static void mpi_free(di_dist *d) {
    mpi_impl *im = d->impl;
    if (im->have_watchdog) {
        atomic_store(&im->stop, 1);
        pthread_join(im->watchdog, NULL);
    }
    if (im->finalize) MPI_Finalize();
    free(im->cnt_s);
    free(im);
    free(d);
}

static const di_dist_ops MPI_OPS = {mpi_alltoallv, mpi_allreduce, mpi_p2p, mpi_barrier, mpi_free};

di_status di_dist_mpi_create(int *argc, char ***argv, double timeout_s, di_dist **out, di_error *err) {
    *out = NULL;
    di_dist *d = di_calloc(1, sizeof *d);
    mpi_impl *im = di_calloc(1, sizeof *im);
    if (!d || !im) {
        free(d);
        free(im);
        return di_error_set(err, DI_ERR_NOMEM, "dist: out of memory");
    }
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        int provided = 0;
        /* SERIALIZED: one thread at a time calls MPI -- the stepping thread,
         * which in serve is not the thread that initialized MPI; the watchdog
         * never does */
        if (MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
            free(d);
            free(im);
            return di_error_set(err, DI_ERR_IO, "dist: MPI_Init_thread failed");
        }
        im->finalize = 1;
        if (provided < MPI_THREAD_SERIALIZED) {
            MPI_Finalize();
            free(d);
            free(im);
            return di_error_set(err, DI_ERR_UNSUPPORTED, "dist: this MPI library gives no MPI_THREAD_SERIALIZED");
        }
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    d->ops = &MPI_OPS;
    d->rank = rank;
    d->size = size;
    d->impl = im;
    im->timeout_s = timeout_s > 0 ? timeout_s : DEFAULT_TIMEOUT_S;
    im->fault_rank = -1;
    const char *f = getenv("DI_DIST_FAULT");
    if (f && *f) {
        int fr = -1;
        long long fat = 0;
        char kind[16] = "";
        if (sscanf(f, "%d:%lld:%15s", &fr, &fat, kind) == 3 && fat > 0 &&
            (!strcmp(kind, "kill") || !strcmp(kind, "hang"))) {
            im->fault_rank = fr;
            im->fault_at = fat;
            im->fault_kill = !strcmp(kind, "kill");
        } else {
            fprintf(stderr, "deepinfer: ignoring DI_DIST_FAULT='%s' (want RANK:N:kill|hang)\n", f);
        }
    }
    im->cnt_s = di_malloc_array((size_t)size * 4, sizeof(int));
    if (!im->cnt_s) {
        mpi_free(d);
        return di_error_set(err, DI_ERR_NOMEM, "dist: out of memory");
    }
    im->dsp_s = im->cnt_s + size;
    im->cnt_r = im->cnt_s + 2 * size;
    im->dsp_r = im->cnt_s + 3 * size;
    if (pthread_create(&im->watchdog, NULL, watchdog_main, d) == 0) im->have_watchdog = 1;
    *out = d;
    return DI_OK;
}
