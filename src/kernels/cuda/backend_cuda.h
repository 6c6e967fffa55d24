/* The CUDA backend table (backend_cuda.c, in libdeepinfer_cuda): a program
 * that links the CUDA library calls di_backend_cuda_register once at
 * start-up, and --device cuda[:N] then reaches it through
 * di_device_check (kernels/backend.h). Never run on a GPU (docs/CUDA.md). */
#ifndef DI_KERNELS_CUDA_BACKEND_CUDA_H
#define DI_KERNELS_CUDA_BACKEND_CUDA_H

#include "kernels/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

void di_backend_cuda_register(void);
/* The backend on CUDA device index (released with di_backend_release), or
 * the runtime's reason there is none; what di_device_check opens. */
di_status di_backend_cuda_open(int index, di_backend *out, di_error *err);
/* The table, for its completeness test. */
const di_backend_ops *di_backend_cuda_ops(void);

#ifdef __cplusplus
}
#endif

#endif
