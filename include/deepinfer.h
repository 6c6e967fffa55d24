/* DeepInfer public C API.
 *
 * The command line tool, the server and the benchmarks use only what is
 * declared here; tensors, kernels and the scheduler stay behind it.
 * Conventions: functions that can fail return di_status (0 = ok) and fill a
 * di_error the caller owns; out-parameters come last; every _open or _create
 * has one matching _close or _free. */
#ifndef DEEPINFER_H
#define DEEPINFER_H

#ifdef __cplusplus
extern "C" {
#endif

#define DI_VERSION_STRING "0.1.0"

typedef enum di_status {
    DI_OK = 0,
    DI_ERR_IO,          /* file or socket could not be read/written */
    DI_ERR_FORMAT,      /* input is malformed (model file, JSON, ...) */
    DI_ERR_NOMEM,       /* allocation failed */
    DI_ERR_UNSUPPORTED, /* well-formed but not supported (yet) */
    DI_ERR_INVALID_ARG, /* caller passed a bad argument */
    DI_ERR_RANGE,       /* value outside its allowed range */
    DI_ERR_NOT_FOUND,   /* named item does not exist */
    DI_ERR_CANCELLED,   /* work was cancelled */
    DI_ERR_FULL,        /* a capacity (queue, KV cache, context) is exhausted */
    DI_ERR_INTERNAL,    /* a bug: an invariant did not hold */
} di_status;

/* An error: status plus a human-readable message naming what failed and why
 * (e.g. "model.gguf: tensor 'blk.0.attn_q.weight': offset past end of file"). */
typedef struct di_error {
    di_status code;
    char msg[512];
} di_error;

/* Short fixed name of a status ("invalid format"). Never NULL. */
const char *di_status_name(di_status s);

#ifdef __cplusplus
}
#endif
#endif
