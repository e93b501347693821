/* Gated residual x += gate * y (FLUX's gate_msa / gate_mlp). */
#include "kernels/cpu/cpu.h"

struct gate_arg {
    float *x;
    const float *gate, *y;
    int64_t ldx, ldy, d;
};

static void gate_rows(void *varg, int64_t b, int64_t e, int thread)
{
    (void)thread;
    const struct gate_arg *a = varg;
    const int64_t d = a->d;
    const float *gate = a->gate;
    for (int64_t r = b; r < e; r++) {
        float *x = a->x + r * a->ldx;
        const float *y = a->y + r * a->ldy;
        if (gate)
            for (int64_t j = 0; j < d; j++)
                x[j] = x[j] + gate[j] * y[j];
        else
            for (int64_t j = 0; j < d; j++)
                x[j] = x[j] + y[j];
    }
}

void cpu_gated_add(struct weft_kctx *ctx, float *x, int64_t ldx, const float *gate,
                   const float *y, int64_t ldy, int64_t rows, int64_t d)
{
    struct gate_arg a = {x, gate, y, ldx, ldy, d};
    cpu_parallel(ctx, rows, 1 + 8192 / (d + 1), gate_rows, &a);
}
