/* bf16 -> f32 on the device: the backend's first kernel. */
#include <cuda_runtime.h>

#include "kernels/cuda/cuda.h"
#include "kernels/cuda/cuda_internal.h"

__global__ static void bf16_to_f32_kernel(float *dst, const uint16_t *src, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (; i < n; i += stride)
        dst[i] = __uint_as_float((unsigned)src[i] << 16);
}

extern "C" weft_status_t weft_cuda_bf16_to_f32(struct weft_cuda_ctx *ctx, float *dst,
                                               const uint16_t *src, size_t n)
{
    if (n == 0)
        return WEFT_OK;
    size_t blocks = (n + 255) / 256;
    if (blocks > 65535)
        blocks = 65535;
    bf16_to_f32_kernel<<<(unsigned)blocks, 256, 0, ctx->stream>>>(dst, src, n);
    return weft_cuda_status(cudaGetLastError(), "bf16_to_f32 launch");
}
