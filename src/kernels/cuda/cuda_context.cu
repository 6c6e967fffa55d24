/* Devices, memory, the stream and error plumbing of the CUDA library.
 *
 * The runtime is linked statically (libcudart_static), so a binary built
 * here starts on a machine without the driver: the first runtime call then
 * fails with cudaErrorInsufficientDriver / NoDevice, which
 * di_cuda_device_count turns into a message instead of a crash. */
#include "kernels/cuda/cuda_common.cuh"

#include <stdlib.h>
#include <string.h>

di_status di_cuda_fail(di_error *err, di_status code, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->code = code;
    }
    return code;
}

di_status di_cuda_check(cudaError_t e, const char *what, di_error *err) {
    if (e == cudaSuccess) return DI_OK;
    (void)cudaGetLastError(); /* clear a non-sticky error so the next call starts clean */
    di_status code = e == cudaErrorMemoryAllocation ? DI_ERR_NOMEM : DI_ERR_INTERNAL;
    return di_cuda_fail(err, code, "%s: %s: %s", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

extern "C" di_status di_cuda_device_count(int *n, di_error *err) {
    if (!n) return di_cuda_fail(err, DI_ERR_INVALID_ARG, "di_cuda_device_count: n is NULL");
    *n = 0;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        const char *hint = e == cudaErrorInsufficientDriver
                               ? ": no NVIDIA driver is loaded, or it is older than this CUDA runtime needs"
                               : "";
        return di_cuda_fail(err, DI_ERR_UNSUPPORTED, "no usable CUDA device (%s%s)", cudaGetErrorName(e), hint);
    }
    if (count == 0) return di_cuda_fail(err, DI_ERR_UNSUPPORTED, "no usable CUDA device: the driver lists none");
    *n = count;
    return DI_OK;
}

extern "C" di_status di_cuda_ctx_create(int device, di_cuda_ctx **out, di_error *err) {
    if (!out) return di_cuda_fail(err, DI_ERR_INVALID_ARG, "di_cuda_ctx_create: out is NULL");
    *out = NULL;
    int n = 0;
    di_status s = di_cuda_device_count(&n, err);
    if (s) return s;
    if (device < 0 || device >= n)
        return di_cuda_fail(err, DI_ERR_RANGE, "CUDA device %d does not exist (%d found)", device, n);
    di_cuda_ctx *c = (di_cuda_ctx *)calloc(1, sizeof *c);
    if (!c) return di_cuda_fail(err, DI_ERR_NOMEM, "di_cuda_ctx_create: out of host memory");
    c->device = device;
    if ((s = di_cuda_check(cudaSetDevice(device), "cudaSetDevice", err)) ||
        (s = di_cuda_check(cudaGetDeviceProperties(&c->prop, device), "cudaGetDeviceProperties", err)) ||
        (s = di_cuda_check(cudaDriverGetVersion(&c->driver_version), "cudaDriverGetVersion", err)) ||
        (s = di_cuda_check(cudaRuntimeGetVersion(&c->runtime_version), "cudaRuntimeGetVersion", err))) {
        free(c);
        return s;
    }
    if (c->prop.major < 8) { /* the kernels use nothing newer, but nothing older was ever built for */
        s = di_cuda_fail(err, DI_ERR_UNSUPPORTED, "CUDA device %d (%s) is sm_%d%d: this build targets sm_90", device,
                         c->prop.name, c->prop.major, c->prop.minor);
        free(c);
        return s;
    }
    if ((s = di_cuda_check(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), "cudaStreamCreate", err))) {
        free(c);
        return s;
    }
    if ((s = di_cuda_check(cudaMalloc((void **)&c->flags, sizeof *c->flags), "cudaMalloc(flags)", err)) ||
        (s = di_cuda_check(cudaMemsetAsync(c->flags, 0, sizeof *c->flags, c->stream), "cudaMemset(flags)", err)) ||
        (s = di_cuda_check(cudaStreamSynchronize(c->stream), "cudaStreamSynchronize", err))) {
        if (c->flags) cudaFree(c->flags);
        cudaStreamDestroy(c->stream);
        free(c);
        return s;
    }
    *out = c;
    return DI_OK;
}

di_status di_cuda_scratch(di_cuda_ctx *c, size_t bytes, void **out, di_error *err) {
    if (bytes <= c->scratch_bytes) {
        *out = c->scratch;
        return DI_OK;
    }
    di_status s = di_cuda_check(cudaStreamSynchronize(c->stream), "cudaStreamSynchronize(scratch)", err);
    if (s) return s;
    cudaFree(c->scratch);
    c->scratch = NULL;
    c->scratch_bytes = 0;
    size_t grown = bytes + bytes / 4; /* headroom: a growing context does not reallocate every step */
    if ((s = di_cuda_alloc(c, grown, &c->scratch, err))) return s;
    c->scratch_bytes = grown;
    *out = c->scratch;
    return DI_OK;
}

extern "C" void di_cuda_ctx_free(di_cuda_ctx *c) {
    if (!c) return;
    cudaSetDevice(c->device);
    cudaStreamSynchronize(c->stream);
    cudaFree(c->scratch);
    cudaFree(c->flags);
    cudaStreamDestroy(c->stream);
    (void)cudaGetLastError();
    free(c);
}

extern "C" void di_cuda_ctx_describe(const di_cuda_ctx *c, char *buf, size_t n) {
    if (!buf || n == 0) return;
    if (!c) {
        snprintf(buf, n, "(no CUDA context)");
        return;
    }
    snprintf(buf, n, "%s, sm_%d%d, %d SMs, %.1f GiB, driver %d.%d, runtime %d.%d", c->prop.name, c->prop.major,
             c->prop.minor, c->prop.multiProcessorCount, (double)c->prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0),
             c->driver_version / 1000, c->driver_version % 1000 / 10, c->runtime_version / 1000,
             c->runtime_version % 1000 / 10);
}

extern "C" di_status di_cuda_alloc(di_cuda_ctx *c, size_t bytes, void **dptr, di_error *err) {
    if (!c || !dptr) return di_cuda_fail(err, DI_ERR_INVALID_ARG, "di_cuda_alloc: NULL argument");
    *dptr = NULL;
    if (bytes == 0) bytes = 1; /* a valid, distinct pointer for empty tensors */
    di_status s = di_cuda_check(cudaSetDevice(c->device), "cudaSetDevice", err);
    if (s) return s;
    cudaError_t e = cudaMalloc(dptr, bytes);
    if (e != cudaSuccess) {
        *dptr = NULL;
        (void)cudaGetLastError();
        return di_cuda_fail(err, e == cudaErrorMemoryAllocation ? DI_ERR_NOMEM : DI_ERR_INTERNAL,
                            "cudaMalloc(%zu bytes): %s", bytes, cudaGetErrorString(e));
    }
    return DI_OK;
}

extern "C" void di_cuda_free(di_cuda_ctx *c, void *dptr) {
    if (!c || !dptr) return;
    cudaSetDevice(c->device);
    cudaFree(dptr); /* implicitly synchronizes: no kernel still reads it */
    (void)cudaGetLastError();
}

extern "C" di_status di_cuda_upload(di_cuda_ctx *c, void *dst, const void *host_src, size_t bytes, di_error *err) {
    if (!c || (bytes && (!dst || !host_src))) return di_cuda_fail(err, DI_ERR_INVALID_ARG, "di_cuda_upload: NULL argument");
    if (!bytes) return DI_OK;
    di_status s = di_cuda_check(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, c->stream),
                                "cudaMemcpy(host to device)", err);
    return s ? s : di_cuda_check(cudaStreamSynchronize(c->stream), "cudaStreamSynchronize(upload)", err);
}

extern "C" di_status di_cuda_download(di_cuda_ctx *c, void *host_dst, const void *src, size_t bytes, di_error *err) {
    if (!c || (bytes && (!src || !host_dst)))
        return di_cuda_fail(err, DI_ERR_INVALID_ARG, "di_cuda_download: NULL argument");
    if (!bytes) return DI_OK;
    di_status s = di_cuda_check(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, c->stream),
                                "cudaMemcpy(device to host)", err);
    return s ? s : di_cuda_check(cudaStreamSynchronize(c->stream), "cudaStreamSynchronize(download)", err);
}

extern "C" di_status di_cuda_memset(di_cuda_ctx *c, void *dst, int byte, size_t bytes, di_error *err) {
    if (!c || (bytes && !dst)) return di_cuda_fail(err, DI_ERR_INVALID_ARG, "di_cuda_memset: NULL argument");
    if (!bytes) return DI_OK;
    return di_cuda_check(cudaMemsetAsync(dst, byte, bytes, c->stream), "cudaMemsetAsync", err);
}

extern "C" di_status di_cuda_copy(di_cuda_ctx *c, void *dst, const void *src, size_t bytes, di_error *err) {
    if (!c || (bytes && (!dst || !src))) return di_cuda_fail(err, DI_ERR_INVALID_ARG, "di_cuda_copy: NULL argument");
    if (!bytes) return DI_OK;
    return di_cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->stream),
                         "cudaMemcpy(device to device)", err);
}

extern "C" di_status di_cuda_sync(di_cuda_ctx *c, di_error *err) {
    if (!c) return di_cuda_fail(err, DI_ERR_INVALID_ARG, "di_cuda_sync: NULL context");
    di_status s = di_cuda_check(cudaStreamSynchronize(c->stream), "a CUDA kernel failed", err);
    if (s) return s;
    unsigned int flags = 0;
    if ((s = di_cuda_check(cudaMemcpyAsync(&flags, c->flags, sizeof flags, cudaMemcpyDeviceToHost, c->stream),
                           "cudaMemcpy(flags)", err)) ||
        (s = di_cuda_check(cudaStreamSynchronize(c->stream), "cudaStreamSynchronize(flags)", err)))
        return s;
    if (!flags) return DI_OK;
    if ((s = di_cuda_check(cudaMemsetAsync(c->flags, 0, sizeof *c->flags, c->stream), "cudaMemset(flags)", err)))
        return s;
    return di_cuda_fail(err, DI_ERR_RANGE, "CUDA kernel input out of range:%s%s%s",
                        flags & DI_CUDA_FLAG_BAD_ID ? " token or row id past its table" : "",
                        flags & DI_CUDA_FLAG_BAD_SLOT ? " KV slot past the cache" : "",
                        flags & DI_CUDA_FLAG_BAD_BLOCK ? " block id, sequence or position out of range" : "");
}

extern "C" int di_cuda_supports_dtype(di_dtype t) {
    switch (t) {
    case DI_DTYPE_F32:
    case DI_DTYPE_F16:
    case DI_DTYPE_BF16:
    case DI_DTYPE_Q4_0:
    case DI_DTYPE_Q4_1:
    case DI_DTYPE_Q5_0:
    case DI_DTYPE_Q8_0:
    case DI_DTYPE_Q4_K:
    case DI_DTYPE_Q6_K: return 1;
    default: return 0;
    }
}
