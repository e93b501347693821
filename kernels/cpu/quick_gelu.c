/* CLIP's quick_gelu: x sigmoid(1.702 x), as transformers' QuickGELUActivation computes it. */
#include "kernels/cpu/cpu.h"

struct qg_arg {
    const float *x;
    float *y;
    int64_t ldx, ldy, n;
};

static void qg_rows(void *varg, int64_t b, int64_t e, int thread)
{
    (void)thread;
    const struct qg_arg *a = varg;
    const int64_t n = a->n;
    for (int64_t r = b; r < e; r++) {
        const float *x = a->x + r * a->ldx;
        float *y = a->y + r * a->ldy;
        for (int64_t j = 0; j < n; j++) {
            const float v = x[j], t = 1.702f * v;
            /* sigmoid(t) without overflow: e = exp(-|t|) <= 1 */
            const float ex = cpu_expf(-fabsf(t));
            const float sig = t >= 0.0f ? 1.0f / (1.0f + ex) : ex / (1.0f + ex);
            y[j] = v * sig;
        }
    }
}

void cpu_quick_gelu(struct weft_kctx *ctx, const float *x, int64_t ldx, float *y, int64_t ldy,
                    int64_t rows, int64_t n)
{
    struct qg_arg a = {x, y, ldx, ldy, n};
    cpu_parallel(ctx, rows, 1 + 8192 / (n + 1), qg_rows, &a);
}
