/* AdaLN modulation y = x * (1 + scale) + shift, per-feature scale and shift. */
#include "kernels/cpu/cpu.h"

struct mod_arg {
    const float *x, *shift, *scale;
    float *y;
    int64_t ldx, ldy, d;
};

static void mod_rows(void *varg, int64_t b, int64_t e, int thread)
{
    (void)thread;
    const struct mod_arg *a = varg;
    const int64_t d = a->d;
    const float *scale = a->scale, *shift = a->shift;
    for (int64_t r = b; r < e; r++) {
        const float *x = a->x + r * a->ldx;
        float *y = a->y + r * a->ldy;
        for (int64_t j = 0; j < d; j++)
            y[j] = x[j] * (1.0f + scale[j]) + shift[j];
    }
}

void cpu_modulate(struct weft_kctx *ctx, const float *x, int64_t ldx, const float *shift,
                  const float *scale, float *y, int64_t ldy, int64_t rows, int64_t d)
{
    struct mod_arg a = {x, shift, scale, y, ldx, ldy, d};
    cpu_parallel(ctx, rows, 1 + 8192 / (d + 1), mod_rows, &a);
}
