/* y = x w + b, w and b [d] broadcast over rows (b may be NULL; y may be x): a norm's affine
 * part. */
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_internal.h"

__global__ static void scale_shift_kernel(const float *x, int64_t ldx, const float *w,
                                          const float *b, float *y, int64_t ldy, int64_t rows,
                                          int64_t d)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < rows * d;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / d, j = i - r * d;
        const float v = x[r * ldx + j] * w[j];
        y[r * ldy + j] = b ? v + b[j] : v;
    }
}

void cuda_scale_shift(struct weft_kctx *c, const float *x, int64_t ldx, const float *w,
                      const float *b, float *y, int64_t ldy, int64_t rows, int64_t d)
{
    if (!cuda_begin(c) || rows <= 0 || d <= 0)
        return;
    scale_shift_kernel<<<cuda_blocks(rows * d, 256), 256, 0, c->stream>>>(x, ldx, w, b, y, ldy,
                                                                          rows, d);
    cuda_launched(c, "scale_shift");
}
