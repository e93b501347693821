/* CUDA backend: device discovery and the first kernels. Built when the `cuda` meson feature is
 * enabled; callers see only weft status codes (cudaError_t and cublasStatus_t stop here).
 *
 * Any error from cudaGetDeviceCount means "no GPU": on machines without a driver it returns
 * cudaErrorInsufficientDriver (35), not cudaErrorNoDevice. */
#ifndef WEFT_KERNELS_CUDA_CUDA_H
#define WEFT_KERNELS_CUDA_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct weft_cuda_device_info {
    int index;
    char name[256];
    size_t total_mem;
    int cc_major, cc_minor;
    int sm_count;
};

/* Number of usable devices; WEFT_ERR_NO_DEVICE (logged at debug level) when there are none. */
weft_status_t weft_cuda_device_count(int *count_p);
weft_status_t weft_cuda_device_info(int index, struct weft_cuda_device_info *info_p);

struct weft_cuda_ctx;
/* Select the device, create a stream and a cuBLAS handle. */
weft_status_t weft_cuda_ctx_create(int device, struct weft_cuda_ctx **ctx_p);
void weft_cuda_ctx_destroy(struct weft_cuda_ctx *ctx);

weft_status_t weft_cuda_malloc(struct weft_cuda_ctx *ctx, size_t bytes, void **ptr_p);
void weft_cuda_free(struct weft_cuda_ctx *ctx, void *ptr);
weft_status_t weft_cuda_copy_to_device(struct weft_cuda_ctx *ctx, void *dst, const void *src,
                                       size_t bytes);
weft_status_t weft_cuda_copy_to_host(struct weft_cuda_ctx *ctx, void *dst, const void *src,
                                     size_t bytes);
weft_status_t weft_cuda_sync(struct weft_cuda_ctx *ctx);

/* dst[i] = float(src[i]) for bf16 src, on the device (the first kernel). */
weft_status_t weft_cuda_bf16_to_f32(struct weft_cuda_ctx *ctx, float *dst, const uint16_t *src,
                                    size_t n);
/* Row-major C[m,n] = A[m,k] x B[n,k]^T (a Linear layer: B is the [out, in] weight), f32. */
weft_status_t weft_cuda_gemm_f32(struct weft_cuda_ctx *ctx, int m, int n, int k, const float *a,
                                 const float *b, float *c);

#ifdef __cplusplus
}
#endif

#endif
