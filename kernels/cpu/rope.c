/* Interleaved rotary embedding, in place (Diffusers' apply_rotary_emb, use_real, unbind -1). */
#include "kernels/cpu/cpu.h"

struct rope_arg {
    float *x;
    const float *cos, *sin;
    int64_t ld, heads, d;
};

static void rope_rows(void *varg, int64_t b, int64_t e, int thread)
{
    (void)thread;
    const struct rope_arg *a = varg;
    for (int64_t r = b; r < e; r++) {
        const float *c = a->cos + r * a->d, *s = a->sin + r * a->d;
        for (int64_t h = 0; h < a->heads; h++) {
            float *x = a->x + r * a->ld + h * a->d;
            for (int64_t j = 0; j < a->d; j += 2) {
                float x0 = x[j], x1 = x[j + 1];
                /* two products then a sum, as torch computes x*cos + rotated*sin */
                float p0 = x0 * c[j], q0 = -x1 * s[j];
                float p1 = x1 * c[j + 1], q1 = x0 * s[j + 1];
                x[j] = p0 + q0;
                x[j + 1] = p1 + q1;
            }
        }
    }
}

void cpu_rope(struct weft_kctx *ctx, float *x, int64_t ld, const float *cos, const float *sin,
              int64_t rows, int64_t heads, int64_t d)
{
    struct rope_arg a = {x, cos, sin, ld, heads, d};
    cpu_parallel(ctx, rows, 1 + 8192 / (heads * d + 1), rope_rows, &a);
}
