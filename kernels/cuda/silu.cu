/* SiLU: x * sigmoid(x), with exp(-|x|) so the exponential never overflows (as the CPU). */
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_internal.h"

__global__ static void silu_kernel(const float *x, float *y, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const float v = x[i], e = expf(-fabsf(v));
        y[i] = v * (v >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e));
    }
}

void cuda_silu(struct weft_kctx *c, const float *x, float *y, int64_t n)
{
    if (!cuda_begin(c) || n <= 0)
        return;
    silu_kernel<<<cuda_blocks(n, 256), 256, 0, c->stream>>>(x, y, n);
    cuda_launched(c, "silu");
}
