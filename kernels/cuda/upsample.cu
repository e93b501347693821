/* Nearest-neighbour 2x upsampling of NHWC pixels: output (y, x) is input (y / 2, x / 2). */
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_internal.h"

__global__ static void upsample_kernel(const float *x, float *y, int64_t h, int64_t w,
                                       int64_t ch)
{
    const int64_t n = 4 * h * w * ch;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t c = i % ch, px = i / ch, ox = px % (2 * w), oy = px / (2 * w);
        y[i] = x[((oy / 2) * w + ox / 2) * ch + c];
    }
}

void cuda_upsample2x(struct weft_kctx *c, const float *x, float *y, int64_t h, int64_t w,
                     int64_t ch)
{
    if (!cuda_begin(c) || h <= 0 || w <= 0 || ch <= 0)
        return;
    upsample_kernel<<<cuda_blocks(4 * h * w * ch, 256), 256, 0, c->stream>>>(x, y, h, w, ch);
    cuda_launched(c, "upsample2x");
}
