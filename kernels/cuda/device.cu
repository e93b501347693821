/* CUDA device discovery, context (stream + cuBLAS handle) and memory. */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdio.h>

#include "kernels/cuda/cuda.h"
#include "kernels/cuda/cuda_internal.h"

#include "common/alloc.h"
#include "common/log.h"

weft_status_t weft_cuda_status(cudaError_t err, const char *what)
{
    if (err == cudaSuccess)
        return WEFT_OK;
    WEFT_LOG_ERROR("cuda", "%s: %s (%s)", what, cudaGetErrorString(err), cudaGetErrorName(err));
    if (err == cudaErrorMemoryAllocation)
        return WEFT_ERR_NOMEM;
    /* Errors that leave the context unusable poison the device: the process must exit. */
    if (err == cudaErrorIllegalAddress || err == cudaErrorLaunchFailure ||
        err == cudaErrorHardwareStackError || err == cudaErrorIllegalInstruction ||
        err == cudaErrorMisalignedAddress || err == cudaErrorInvalidPc ||
        err == cudaErrorECCUncorrectable)
        return WEFT_ERR_DEVICE;
    return WEFT_ERR_INVALID;
}

weft_status_t weft_cublas_status(cublasStatus_t st, const char *what)
{
    if (st == CUBLAS_STATUS_SUCCESS)
        return WEFT_OK;
    WEFT_LOG_ERROR("cuda", "%s: %s", what, cublasGetStatusString(st));
    return st == CUBLAS_STATUS_ALLOC_FAILED ? WEFT_ERR_NOMEM : WEFT_ERR_DEVICE;
}

extern "C" weft_status_t weft_cuda_device_count(int *count_p)
{
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess || n <= 0) {
        WEFT_LOG_DEBUG("cuda", "no usable GPU: %s",
                       err != cudaSuccess ? cudaGetErrorString(err) : "zero devices");
        (void)cudaGetLastError(); /* clear the sticky-free error so later probes start clean */
        return WEFT_ERR_NO_DEVICE;
    }
    *count_p = n;
    return WEFT_OK;
}

extern "C" weft_status_t weft_cuda_device_info(int index, struct weft_cuda_device_info *info_p)
{
    cudaDeviceProp prop;
    weft_status_t st = weft_cuda_status(cudaGetDeviceProperties(&prop, index),
                                        "cudaGetDeviceProperties");
    if (st != WEFT_OK)
        return st;
    struct weft_cuda_device_info info;
    info.index = index;
    snprintf(info.name, sizeof(info.name), "%s", prop.name);
    info.total_mem = prop.totalGlobalMem;
    info.cc_major = prop.major;
    info.cc_minor = prop.minor;
    info.sm_count = prop.multiProcessorCount;
    *info_p = info;
    return WEFT_OK;
}

extern "C" weft_status_t weft_cuda_ctx_create(int device, struct weft_cuda_ctx **ctx_p)
{
    struct weft_cuda_ctx *ctx = (struct weft_cuda_ctx *)weft_calloc(1, sizeof(*ctx));
    if (!ctx)
        return WEFT_ERR_NOMEM;
    ctx->device = device;
    weft_status_t st = weft_cuda_status(cudaSetDevice(device), "cudaSetDevice");
    if (st != WEFT_OK)
        goto err_free;
    st = weft_cuda_status(cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking),
                          "cudaStreamCreate");
    if (st != WEFT_OK)
        goto err_free;
    st = weft_cublas_status(cublasCreate(&ctx->blas), "cublasCreate");
    if (st != WEFT_OK)
        goto err_stream;
    st = weft_cublas_status(cublasSetStream(ctx->blas, ctx->stream), "cublasSetStream");
    if (st != WEFT_OK)
        goto err_blas;
    *ctx_p = ctx;
    return WEFT_OK;
err_blas:
    cublasDestroy(ctx->blas);
err_stream:
    cudaStreamDestroy(ctx->stream);
err_free:
    weft_free(ctx);
    return st;
}

extern "C" void weft_cuda_ctx_destroy(struct weft_cuda_ctx *ctx)
{
    if (!ctx)
        return;
    cublasDestroy(ctx->blas);
    cudaStreamDestroy(ctx->stream);
    weft_free(ctx);
}

extern "C" weft_status_t weft_cuda_malloc(struct weft_cuda_ctx *ctx, size_t bytes, void **ptr_p)
{
    (void)ctx;
    void *p = NULL;
    weft_status_t st = weft_cuda_status(cudaMalloc(&p, bytes ? bytes : 1), "cudaMalloc");
    if (st == WEFT_OK)
        *ptr_p = p;
    return st;
}

extern "C" void weft_cuda_free(struct weft_cuda_ctx *ctx, void *ptr)
{
    (void)ctx;
    if (ptr)
        cudaFree(ptr);
}

extern "C" weft_status_t weft_cuda_copy_to_device(struct weft_cuda_ctx *ctx, void *dst,
                                                  const void *src, size_t bytes)
{
    return weft_cuda_status(
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, ctx->stream), "cudaMemcpy H2D");
}

extern "C" weft_status_t weft_cuda_copy_to_host(struct weft_cuda_ctx *ctx, void *dst,
                                                const void *src, size_t bytes)
{
    weft_status_t st = weft_cuda_status(
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, ctx->stream), "cudaMemcpy D2H");
    return st == WEFT_OK ? weft_cuda_sync(ctx) : st;
}

extern "C" weft_status_t weft_cuda_sync(struct weft_cuda_ctx *ctx)
{
    return weft_cuda_status(cudaStreamSynchronize(ctx->stream), "cudaStreamSynchronize");
}
