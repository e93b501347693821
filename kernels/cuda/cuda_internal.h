/* Shared between the CUDA backend's .cu files only. */
#ifndef WEFT_KERNELS_CUDA_CUDA_INTERNAL_H
#define WEFT_KERNELS_CUDA_CUDA_INTERNAL_H

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "common/status.h"

struct weft_cuda_ctx {
    int device;
    cudaStream_t stream;
    cublasHandle_t blas;
};

/* Translate and log foreign codes; they never leave the backend. */
weft_status_t weft_cuda_status(cudaError_t err, const char *what);
weft_status_t weft_cublas_status(cublasStatus_t st, const char *what);

#endif
