/* y = x w + b per row (a LayerNorm's affine part, after the kernel table's layernorm). */
#include "kernels/cpu/cpu.h"

struct ss_arg {
    const float *x, *w, *b;
    float *y;
    int64_t ldx, ldy, d;
};

static void ss_rows(void *varg, int64_t b, int64_t e, int thread)
{
    (void)thread;
    const struct ss_arg *a = varg;
    const int64_t d = a->d;
    const float *w = a->w, *bias = a->b;
    for (int64_t r = b; r < e; r++) {
        const float *x = a->x + r * a->ldx;
        float *y = a->y + r * a->ldy;
        if (bias)
            for (int64_t j = 0; j < d; j++)
                y[j] = x[j] * w[j] + bias[j];
        else
            for (int64_t j = 0; j < d; j++)
                y[j] = x[j] * w[j];
    }
}

void cpu_scale_shift(struct weft_kctx *ctx, const float *x, int64_t ldx, const float *w,
                     const float *b, float *y, int64_t ldy, int64_t rows, int64_t d)
{
    struct ss_arg a = {x, w, b, y, ldx, ldy, d};
    cpu_parallel(ctx, rows, 1 + 8192 / (d + 1), ss_rows, &a);
}
