/* y *= x elementwise on rows x n with strides (T5's gated feed-forward). */
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_internal.h"

__global__ static void mul_kernel(float *y, int64_t ldy, const float *x, int64_t ldx,
                                  int64_t rows, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < rows * n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / n, j = i - r * n;
        y[r * ldy + j] *= x[r * ldx + j];
    }
}

void cuda_mul(struct weft_kctx *c, float *y, int64_t ldy, const float *x, int64_t ldx,
              int64_t rows, int64_t n)
{
    if (!cuda_begin(c) || rows <= 0 || n <= 0)
        return;
    mul_kernel<<<cuda_blocks(rows * n, 256), 256, 0, c->stream>>>(y, ldy, x, ldx, rows, n);
    cuda_launched(c, "mul");
}
