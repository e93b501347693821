/* Merge a partial attention result into an accumulated one by their log-sum-exps, in f32 (ring
 * attention), one warp per (row, head), exactly as the CPU backend: with m = max(lse, lse_i),
 * w = e^(lse - m), w_i = e^(lse_i - m): out = (w out + w_i out_i) / (w + w_i), lse = m +
 * log(w + w_i); a side with lse -inf (no keys yet) leaves the other as is. */
#include <cuda_runtime.h>
#include <math_constants.h>

#include "kernels/cuda/cuda_internal.h"

__global__ static void merge_kernel(float *out, int64_t ldo, float *lse, const float *out_i,
                                    int64_t ldi, const float *lse_i, int64_t rows, int64_t heads,
                                    int64_t d)
{
    const int64_t item = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x % 32;
    if (item >= rows * heads)
        return;
    const int64_t r = item / heads, h = item % heads;
    float *o = out + r * ldo + h * d;
    const float *oi = out_i + r * ldi + h * d;
    const float l = lse[item], li = lse_i[item];
    if (li == -CUDART_INF_F)
        return;
    if (l == -CUDART_INF_F) {
        for (int64_t j = lane; j < d; j += 32)
            o[j] = oi[j];
        __syncwarp();
        if (lane == 0)
            lse[item] = li;
        return;
    }
    const float m = l > li ? l : li;
    const float w = expf(l - m), wi = expf(li - m), sum = w + wi;
    const float cw = w / sum, cwi = wi / sum;
    for (int64_t j = lane; j < d; j += 32)
        o[j] = cw * o[j] + cwi * oi[j];
    __syncwarp(); /* every lane has read lse[item] */
    if (lane == 0)
        lse[item] = m + logf(sum);
}

void cuda_attn_merge(struct weft_kctx *c, float *out, int64_t ldo, float *lse,
                     const float *out_i, int64_t ldi, const float *lse_i, int64_t rows,
                     int64_t heads, int64_t d)
{
    if (!cuda_begin(c) || rows <= 0 || heads <= 0 || d <= 0)
        return;
    const int64_t warps = rows * heads;
    merge_kernel<<<(unsigned)((warps + 7) / 8), 256, 0, c->stream>>>(out, ldo, lse, out_i, ldi,
                                                                    lse_i, rows, heads, d);
    cuda_launched(c, "attn_merge");
}
