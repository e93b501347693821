/* RMSNorm over each head's d-vector, in place: one warp per (row, head). */
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/reduce.cuh"

__global__ static void rmsnorm_kernel(float *x, int64_t ld, const float *w, int64_t rows,
                                      int64_t heads, int64_t d, float eps)
{
    const int64_t item = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x % 32;
    if (item >= rows * heads)
        return; /* whole warps leave together: blockDim is a multiple of 32 */
    float *v = x + (item / heads) * ld + (item % heads) * d;
    float ss = 0.0f;
    for (int64_t j = lane; j < d; j += 32)
        ss += v[j] * v[j];
    const float inv = 1.0f / sqrtf(warp_sum(ss) / (float)d + eps);
    for (int64_t j = lane; j < d; j += 32)
        v[j] = v[j] * inv * w[j];
}

void cuda_rmsnorm(struct weft_kctx *c, float *x, int64_t ld, const float *w, int64_t rows,
                  int64_t heads, int64_t d, float eps)
{
    if (!cuda_begin(c) || rows <= 0 || heads <= 0 || d <= 0)
        return;
    const int64_t warps = rows * heads; /* 8 per block: grids in x reach 2^31 - 1 blocks */
    rmsnorm_kernel<<<(unsigned)((warps + 7) / 8), 256, 0, c->stream>>>(x, ld, w, rows, heads, d,
                                                                      eps);
    cuda_launched(c, "rmsnorm");
}
