/* Sinusoidal timestep embedding as Diffusers computes it in f32 (kernels.h): exponent_j =
 * -ln(10000) j / half, freq = exp, arg = scale (t freq), out [cos(arg), sin(arg)]; odd dims end in 0.
 * Arguments reach 1000 radians, so the functions are evaluated in double. */
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_internal.h"

__global__ static void timestep_kernel(const float *t, int64_t n, float *out, int64_t dim,
                                       float scale)
{
    const int64_t half = dim / 2;
    const float neg_log = -9.210340371976184f;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n * dim;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t b = i / dim, j = i - b * dim;
        if (j >= 2 * half) {
            out[i] = 0.0f;
            continue;
        }
        const int64_t f = j < half ? j : j - half;
        const float ex = neg_log * (float)f / (float)half;
        /* exp, cos and sin through double, rounded once: the correctly rounded values the
         * CPU's libm gives (a 2-ulp expf would move a 1000-radian argument by 2e-4) */
        const float arg = scale * (t[b] * (float)exp((double)ex));
        out[i] = (float)(j < half ? cos((double)arg) : sin((double)arg));
    }
}

void cuda_timestep_embed(struct weft_kctx *c, const float *t, int64_t n, float *out,
                         int64_t dim, float scale)
{
    if (!cuda_begin(c) || n <= 0 || dim <= 0)
        return;
    timestep_kernel<<<cuda_blocks(n * dim, 256), 256, 0, c->stream>>>(t, n, out, dim, scale);
    cuda_launched(c, "timestep_embed");
}
