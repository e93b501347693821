/* CUDA device discovery (cuda.h), and the backend's error translation (cuda_internal.h). */
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stdio.h>

#include "kernels/cuda/cuda.h"
#include "kernels/cuda/cuda_internal.h"

#include "common/log.h"

static weft_status_t translate(cudaError_t err)
{
    if (err == cudaErrorMemoryAllocation)
        return WEFT_ERR_NOMEM;
    if (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver ||
        err == cudaErrorInvalidDevice)
        return WEFT_ERR_NO_DEVICE;
    /* errors that leave the context unusable poison the device: the process must exit */
    if (err == cudaErrorIllegalAddress || err == cudaErrorLaunchFailure ||
        err == cudaErrorHardwareStackError || err == cudaErrorIllegalInstruction ||
        err == cudaErrorMisalignedAddress || err == cudaErrorInvalidPc ||
        err == cudaErrorECCUncorrectable || err == cudaErrorLaunchTimeout)
        return WEFT_ERR_DEVICE;
    return WEFT_ERR_INVALID;
}

weft_status_t cuda_check(struct weft_kctx *c, cudaError_t err, const char *what)
{
    if (err == cudaSuccess)
        return WEFT_OK;
    const weft_status_t st = translate(err);
    if (!c || c->status == WEFT_OK) /* the first cause only: the rest follow from it */
        WEFT_LOG_ERROR("cuda", "%s: %s (%s)", what, cudaGetErrorString(err),
                       cudaGetErrorName(err));
    if (c && c->status == WEFT_OK)
        c->status = st;
    return st;
}

weft_status_t cuda_check_blas(struct weft_kctx *c, cublasStatus_t s, const char *what)
{
    if (s == CUBLAS_STATUS_SUCCESS)
        return WEFT_OK;
    const weft_status_t st = s == CUBLAS_STATUS_ALLOC_FAILED ? WEFT_ERR_NOMEM
                             : s == CUBLAS_STATUS_NOT_SUPPORTED || s == CUBLAS_STATUS_INVALID_VALUE
                                 ? WEFT_ERR_UNSUPPORTED
                                 : WEFT_ERR_DEVICE;
    if (!c || c->status == WEFT_OK)
        WEFT_LOG_ERROR("cuda", "%s: %s", what, cuda_lt.cublasLtGetStatusString(s));
    if (c && c->status == WEFT_OK)
        c->status = st;
    return st;
}

void cuda_launched(struct weft_kctx *c, const char *what)
{
    (void)cuda_check(c, cudaGetLastError(), what);
}

void cuda_enter(struct weft_kctx *c)
{
    static thread_local int current = -1; /* this thread's device, as far as we set it */
    if (current == c->device)
        return;
    if (cuda_check(c, cudaSetDevice(c->device), "cudaSetDevice") == WEFT_OK)
        current = c->device;
}

void cuda_refuse(struct weft_kctx *c, const char *op, const char *why)
{
    if (c->status == WEFT_OK) {
        WEFT_LOG_ERROR("cuda", "%s: %s", op, why);
        c->status = WEFT_ERR_UNSUPPORTED;
    }
}

extern "C" weft_status_t weft_cuda_device_count(int *count_p, char *why, size_t why_len)
{
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess || n <= 0) {
        const char *text = err != cudaSuccess ? cudaGetErrorString(err) : "zero devices";
        WEFT_LOG_DEBUG("cuda", "no usable GPU: %s", text);
        if (why)
            snprintf(why, why_len, "%s", text);
        (void)cudaGetLastError(); /* a failed probe leaves an error behind: clear it */
        return WEFT_ERR_NO_DEVICE;
    }
    *count_p = n;
    return WEFT_OK;
}

extern "C" weft_status_t weft_cuda_device_info(int index, struct weft_cuda_device_info *info_p)
{
    cudaDeviceProp prop;
    weft_status_t st = cuda_check(NULL, cudaGetDeviceProperties(&prop, index),
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
    info.peers = 0;
    int n = 0;
    if (cudaGetDeviceCount(&n) == cudaSuccess)
        for (int j = 0; j < n && j < 64; j++) {
            int can = 0;
            if (j != index && cudaDeviceCanAccessPeer(&can, index, j) == cudaSuccess && can)
                info.peers |= 1ull << j;
        }
    (void)cudaGetLastError();
    *info_p = info;
    return WEFT_OK;
}
