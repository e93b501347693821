/* GELU, tanh approximation, on rows x n with strides: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715
 * x^3))). */
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_internal.h"

__global__ static void gelu_kernel(const float *x, int64_t ldx, float *y, int64_t ldy,
                                   int64_t rows, int64_t n)
{
    const float k0 = 0.7978845608028654f, k1 = 0.044715f;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < rows * n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / n, j = i - r * n;
        const float v = x[r * ldx + j];
        y[r * ldy + j] = 0.5f * v * (1.0f + tanhf(k0 * (v + k1 * v * v * v)));
    }
}

void cuda_gelu_tanh(struct weft_kctx *c, const float *x, int64_t ldx, float *y, int64_t ldy,
                    int64_t rows, int64_t n)
{
    if (!cuda_begin(c) || rows <= 0 || n <= 0)
        return;
    gelu_kernel<<<cuda_blocks(rows * n, 256), 256, 0, c->stream>>>(x, ldx, y, ldy, rows, n);
    cuda_launched(c, "gelu_tanh");
}
