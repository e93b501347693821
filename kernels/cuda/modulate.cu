/* AdaLN modulation y = x * (1 + scale) + shift, scale and shift [d] broadcast over rows. */
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_internal.h"

__global__ static void modulate_kernel(const float *x, int64_t ldx, const float *shift,
                                       const float *scale, float *y, int64_t ldy, int64_t rows,
                                       int64_t d)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < rows * d;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / d, j = i - r * d;
        y[r * ldy + j] = x[r * ldx + j] * (1.0f + scale[j]) + shift[j];
    }
}

void cuda_modulate(struct weft_kctx *c, const float *x, int64_t ldx, const float *shift,
                   const float *scale, float *y, int64_t ldy, int64_t rows, int64_t d)
{
    if (!cuda_begin(c) || rows <= 0 || d <= 0)
        return;
    modulate_kernel<<<cuda_blocks(rows * d, 256), 256, 0, c->stream>>>(x, ldx, shift, scale, y,
                                                                       ldy, rows, d);
    cuda_launched(c, "modulate");
}
