/* SwiGLU on a fused projection: y[:, j] = silu(x[:, j]) * x[:, n + j], j < n. */
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_internal.h"

__global__ static void swiglu_kernel(const float *x, int64_t ldx, float *y, int64_t ldy,
                                     int64_t rows, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < rows * n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / n, j = i - r * n;
        const float v = x[r * ldx + j], e = expf(-fabsf(v));
        const float s = v >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
        y[r * ldy + j] = v * s * x[r * ldx + n + j];
    }
}

void cuda_swiglu(struct weft_kctx *c, const float *x, int64_t ldx, float *y, int64_t ldy,
                 int64_t rows, int64_t n)
{
    if (!cuda_begin(c) || rows <= 0 || n <= 0)
        return;
    swiglu_kernel<<<cuda_blocks(rows * n, 256), 256, 0, c->stream>>>(x, ldx, y, ldy, rows, n);
    cuda_launched(c, "swiglu");
}
