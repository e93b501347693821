/* y *= x elementwise (T5's gated feed-forward: gelu(wi_0 x) * wi_1 x). */
#include "kernels/cpu/cpu.h"

struct mul_arg {
    float *y;
    const float *x;
    int64_t ldy, ldx, n;
};

static void mul_rows(void *varg, int64_t b, int64_t e, int thread)
{
    (void)thread;
    const struct mul_arg *a = varg;
    const int64_t n = a->n;
    for (int64_t r = b; r < e; r++) {
        float *y = a->y + r * a->ldy;
        const float *x = a->x + r * a->ldx;
        for (int64_t j = 0; j < n; j++)
            y[j] *= x[j];
    }
}

void cpu_mul(struct weft_kctx *ctx, float *y, int64_t ldy, const float *x, int64_t ldx,
             int64_t rows, int64_t n)
{
    struct mul_arg a = {y, x, ldy, ldx, n};
    cpu_parallel(ctx, rows, 1 + 8192 / (n + 1), mul_rows, &a);
}
