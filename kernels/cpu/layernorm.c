/* LayerNorm without affine (FLUX's norm1/norm2/norm_out): two-pass mean and variance in f32. */
#include "kernels/cpu/cpu.h"

struct ln_arg {
    const float *x;
    float *y;
    int64_t ldx, ldy, d;
    float eps;
};

static void ln_rows(void *varg, int64_t b, int64_t e, int thread)
{
    (void)thread;
    const struct ln_arg *a = varg;
    const int64_t d = a->d;
    const float eps = a->eps;
    for (int64_t r = b; r < e; r++) {
        const float *x = a->x + r * a->ldx;
        float *y = a->y + r * a->ldy;
        float sum = 0.0f;
        for (int64_t j = 0; j < d; j++)
            sum += x[j];
        float mean = sum / (float)d;
        float var = 0.0f;
        for (int64_t j = 0; j < d; j++) {
            float c = x[j] - mean;
            var += c * c;
        }
        float inv = 1.0f / sqrtf(var / (float)d + eps);
        for (int64_t j = 0; j < d; j++)
            y[j] = (x[j] - mean) * inv;
    }
}

void cpu_layernorm(struct weft_kctx *ctx, const float *x, int64_t ldx, float *y, int64_t ldy,
                   int64_t rows, int64_t d, float eps)
{
    struct ln_arg a = {x, y, ldx, ldy, d, eps};
    cpu_parallel(ctx, rows, 1 + 8192 / (d + 1), ln_rows, &a);
}
