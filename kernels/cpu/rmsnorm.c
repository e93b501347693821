/* RMSNorm over each head's d-vector (FLUX's QK norms): x * rsqrt(mean(x^2) + eps) * w. */
#include "kernels/cpu/cpu.h"

struct rms_arg {
    float *x;
    const float *w;
    int64_t ld, heads, d;
    float eps;
};

static void rms_rows(void *varg, int64_t b, int64_t e, int thread)
{
    (void)thread;
    const struct rms_arg *a = varg;
    for (int64_t r = b; r < e; r++) {
        for (int64_t h = 0; h < a->heads; h++) {
            float *x = a->x + r * a->ld + h * a->d;
            float ss = 0.0f;
            for (int64_t j = 0; j < a->d; j++)
                ss += x[j] * x[j];
            float inv = 1.0f / sqrtf(ss / (float)a->d + a->eps);
            for (int64_t j = 0; j < a->d; j++)
                x[j] = x[j] * inv * a->w[j];
        }
    }
}

void cpu_rmsnorm(struct weft_kctx *ctx, float *x, int64_t ld, const float *w, int64_t rows,
                 int64_t heads, int64_t d, float eps)
{
    struct rms_arg a = {x, w, ld, heads, d, eps};
    cpu_parallel(ctx, rows, 1 + 8192 / (heads * d + 1), rms_rows, &a);
}
