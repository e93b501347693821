/* Interleaved rotary embedding in place, one thread per (row, head, pair): x[2i] = x[2i]c -
 * x[2i+1]s, x[2i+1] = x[2i+1]c + x[2i]s, two products then a sum (no fused multiply-add), as
 * torch and the CPU backend compute it. */
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_internal.h"

__global__ static void rope_kernel(float *x, int64_t ld, const float *cs, const float *sn,
                                   int64_t rows, int64_t heads, int64_t d)
{
    const int64_t half = d / 2, n = rows * heads * half;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / (heads * half), rem = i - r * heads * half;
        const int64_t h = rem / half, j = 2 * (rem - h * half);
        float *v = x + r * ld + h * d + j;
        const float *c = cs + r * d + j, *s = sn + r * d + j;
        const float x0 = v[0], x1 = v[1];
        v[0] = __fadd_rn(__fmul_rn(x0, c[0]), __fmul_rn(-x1, s[0]));
        v[1] = __fadd_rn(__fmul_rn(x1, c[1]), __fmul_rn(x0, s[1]));
    }
}

void cuda_rope(struct weft_kctx *c, float *x, int64_t ld, const float *cs, const float *sn,
               int64_t rows, int64_t heads, int64_t d)
{
    const int64_t n = rows * heads * (d / 2);
    if (!cuda_begin(c) || rows <= 0 || heads <= 0 || n <= 0)
        return;
    rope_kernel<<<cuda_blocks(n, 256), 256, 0, c->stream>>>(x, ld, cs, sn, rows, heads, d);
    cuda_launched(c, "rope");
}
