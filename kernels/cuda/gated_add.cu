/* Gated residual x += gate * y (gate [d] broadcast over rows; NULL: a plain add). y's row stride
 * may be 0 (a bias broadcast over the rows). */
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_internal.h"

__global__ static void gated_add_kernel(float *x, int64_t ldx, const float *gate,
                                        const float *y, int64_t ldy, int64_t rows, int64_t d)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < rows * d;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / d, j = i - r * d;
        const float v = y[r * ldy + j];
        x[r * ldx + j] = gate ? x[r * ldx + j] + gate[j] * v : x[r * ldx + j] + v;
    }
}

void cuda_gated_add(struct weft_kctx *c, float *x, int64_t ldx, const float *gate,
                    const float *y, int64_t ldy, int64_t rows, int64_t d)
{
    if (!cuda_begin(c) || rows <= 0 || d <= 0)
        return;
    gated_add_kernel<<<cuda_blocks(rows * d, 256), 256, 0, c->stream>>>(x, ldx, gate, y, ldy,
                                                                        rows, d);
    cuda_launched(c, "gated_add");
}
