/* dst[i] = value for n floats. */
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_internal.h"

__global__ static void fill_kernel(float *dst, float value, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = value;
}

void cuda_fill(struct weft_kctx *c, float *dst, float value, int64_t n)
{
    if (!cuda_begin(c) || n <= 0)
        return;
    fill_kernel<<<cuda_blocks(n, 256), 256, 0, c->stream>>>(dst, value, n);
    cuda_launched(c, "fill");
}
