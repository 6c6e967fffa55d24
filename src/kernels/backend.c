/* Device names and the backend checks shared by every backend (backend.h). */
#include "kernels/backend.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define DEVICE_FORMS "cpu, cuda or cuda:N"

di_status di_device_parse(const char *device, di_device_kind *kind, int *index, di_error *err) {
    *kind = DI_DEVICE_CPU;
    *index = 0;
    if (!device || !device[0] || !strcmp(device, "cpu")) return DI_OK;
    if (!strncmp(device, "cuda", 4) && (device[4] == '\0' || device[4] == ':')) {
        *kind = DI_DEVICE_CUDA;
        if (device[4] == '\0') return DI_OK;
        const char *s = device + 5;
        char *end = NULL;
        errno = 0;
        long v = *s >= '0' && *s <= '9' ? strtol(s, &end, 10) : -1;
        if (v >= 0 && v <= 1024 && errno == 0 && end && *end == '\0') {
            *index = (int)v;
            return DI_OK;
        }
    }
    return di_error_set(err, DI_ERR_INVALID_ARG, "device '%.64s' unknown: expected " DEVICE_FORMS, device);
}

static di_backend_open_fn g_cuda_open; /* set once at start-up, before any engine */

void di_backend_register_cuda(di_backend_open_fn open) { g_cuda_open = open; }

di_status di_device_check(const char *device, const char *arch, di_error *err) {
    di_device_kind kind;
    int index;
    di_status s = di_device_parse(device, &kind, &index, err);
    if (s != DI_OK || kind == DI_DEVICE_CPU) return s;
    /* The CUDA library (src/kernels/cuda/, libdeepinfer_cuda) is separate:
     * only a program that links it and registers its opener has one. */
    if (!g_cuda_open)
        return di_error_set(err, DI_ERR_UNSUPPORTED,
                            "device '%.64s': deepinfer was built without a CUDA backend (docs/CUDA.md); use "
                            "--device cpu",
                            device);
    di_backend be;
    if ((s = g_cuda_open(index, &be, err)) != DI_OK) {
        if (err) di_error_prefix(err, "device '%.64s': ", device);
        return s;
    }
    char desc[160];
    be.ops->describe(&be, desc, sizeof desc);
    di_backend_release(&be);
    /* its table wraps the CUDA kernels, but the forwards do not upload their
     * weights or per-step tables yet and four stage ops have no kernel
     * (docs/CUDA.md): no model runs on it yet */
    return di_error_set(err, DI_ERR_UNSUPPORTED,
                        "device '%.64s' (%s): the cuda backend does not yet implement the %s forward "
                        "(docs/CUDA.md); use --device cpu",
                        device, desc, arch ? arch : "model");
}

const char *di_backend_ops_missing(const di_backend_ops *ops) {
    /* every entry after name is a function pointer */
#define ENTRY(f) {#f, offsetof(di_backend_ops, f)}
    static const struct {
        const char *name;
        size_t off;
    } entries[] = {
        ENTRY(release),     ENTRY(describe),   ENTRY(check),      ENTRY(supports),
        ENTRY(dequant),     ENTRY(linear_scratch_floats),         ENTRY(linear),
        ENTRY(embed_norm),  ENTRY(rope_store), ENTRY(add_norm),   ENTRY(glu),
        ENTRY(gather_norm), ENTRY(softcap),    ENTRY(attention_scratch_floats),
        ENTRY(attention),   ENTRY(moe_route),  ENTRY(moe_expert), ENTRY(copy),
        ENTRY(zero),
        /* DeepSeek V4 / V4.1 stages */
        ENTRY(scaled_linear_scratch_floats), ENTRY(scaled_linear), ENTRY(scaled_rows), ENTRY(scaled_dot_rows),
        ENTRY(sparse_attention_scratch_floats), ENTRY(sparse_attention), ENTRY(index_scores),
        ENTRY(mhc_pre), ENTRY(mhc_post), ENTRY(mhc_head), ENTRY(rms_norm), ENTRY(rope_rows), ENTRY(clamped_glu),
        ENTRY(compress_pool), ENTRY(ds_route), ENTRY(moe_sum), ENTRY(round_rows),
        /* the buffer ops, last in the table */
        ENTRY(buf_alloc),   ENTRY(buf_free),   ENTRY(upload),     ENTRY(download),
        ENTRY(upload_weight),                  ENTRY(release_weight),
    };
#undef ENTRY
    if (!ops) return "ops";
    if (!ops->name) return "name";
    /* the table must list every entry: its size says how many there are */
    _Static_assert(sizeof(di_backend_ops) == sizeof(const char *) + (19 + 17 + 6) * sizeof(void (*)(void)),
                   "di_backend_ops changed: update di_backend_ops_missing");
    for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++) {
        void (*fn)(void);
        memcpy(&fn, (const char *)ops + entries[i].off, sizeof fn);
        if (!fn) return entries[i].name;
    }
    return NULL;
}
