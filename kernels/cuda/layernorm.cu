/* LayerNorm without affine, one block per row: two passes over the row (the mean, then the mean
 * of squared deviations) as the CPU backend computes them, in f32. */
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/reduce.cuh"

__global__ static void layernorm_kernel(const float *x, int64_t ldx, float *y, int64_t ldy,
                                        int64_t d, float eps)
{
    __shared__ float red[32];
    const float *xr = x + (int64_t)blockIdx.x * ldx;
    float *yr = y + (int64_t)blockIdx.x * ldy;
    float s = 0.0f;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x)
        s += xr[j];
    const float mean = block_sum(s, red) / (float)d;
    float v = 0.0f;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
        const float t = xr[j] - mean;
        v += t * t;
    }
    const float inv = 1.0f / sqrtf(block_sum(v, red) / (float)d + eps);
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x)
        yr[j] = (xr[j] - mean) * inv;
}

void cuda_layernorm(struct weft_kctx *c, const float *x, int64_t ldx, float *y, int64_t ldy,
                    int64_t rows, int64_t d, float eps)
{
    if (!cuda_begin(c) || rows <= 0 || d <= 0)
        return;
    /* one block per row (grids in x reach 2^31 - 1 blocks) */
    layernorm_kernel<<<(unsigned)rows, d >= 1024 ? 256 : 128, 0, c->stream>>>(x, ldx, y, ldy, d,
                                                                              eps);
    cuda_launched(c, "layernorm");
}
