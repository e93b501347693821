/* Sinusoidal timestep embedding exactly as Diffusers computes it in f32:
 * exponent_j = -ln(10000) * j (f32), / half (f32), freq = exp (f32), arg = scale (t * freq),
 * output [cos(arg), sin(arg)] (flip_sin_to_cos). */
#include "kernels/cpu/cpu.h"

void cpu_timestep_embed(struct weft_kctx *ctx, const float *t, int64_t n, float *out,
                        int64_t dim, float scale)
{
    (void)ctx;
    int64_t half = dim / 2;
    const float neg_log = (float)-9.210340371976184; /* -ln(10000), rounded to f32 like torch */
    for (int64_t b = 0; b < n; b++) {
        float *o = out + b * dim;
        for (int64_t j = 0; j < half; j++) {
            float ex = neg_log * (float)j;
            ex = ex / (float)half;
            float arg = t[b] * expf(ex);
            arg = scale * arg; /* Timesteps' scale, after the product */
            o[j] = cosf(arg);
            o[half + j] = sinf(arg);
        }
        if (dim % 2)
            o[dim - 1] = 0.0f; /* Diffusers zero-pads odd dims */
    }
}
