/* SiLU: x * sigmoid(x) = x / (1 + exp(-x)). */
#include "kernels/cpu/cpu.h"

void cpu_silu(struct weft_kctx *ctx, const float *x, float *y, int64_t n)
{
    (void)ctx; /* applied to modulation inputs: a few thousand elements */
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        /* exp(-|v|) keeps the argument in the accurate range of cpu_expf */
        float e = cpu_expf(-fabsf(v));
        float s = v >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
        y[i] = v * s;
    }
}
