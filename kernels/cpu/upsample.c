/* Nearest-neighbour 2x upsampling of NHWC pixels (torch's F.interpolate(scale_factor=2,
 * mode="nearest")): output pixel (y, x) is input pixel (y / 2, x / 2). One task per input row
 * writes its two output rows; the second is a copy of the first. */
#include "kernels/cpu/cpu.h"

struct up_arg {
    const float *x;
    float *y;
    int64_t w, c;
};

static void up_rows(void *varg, int64_t b, int64_t e, int thread)
{
    (void)thread;
    const struct up_arg *a = varg;
    const int64_t w = a->w, c = a->c;
    const size_t px = (size_t)c * sizeof(float);
    for (int64_t r = b; r < e; r++) {
        const float *src = a->x + r * w * c;
        float *dst = a->y + 2 * r * (2 * w) * c;
        for (int64_t i = 0; i < w; i++) {
            memcpy(dst + (2 * i) * c, src + i * c, px);
            memcpy(dst + (2 * i + 1) * c, src + i * c, px);
        }
        memcpy(dst + 2 * w * c, dst, 2 * (size_t)w * px);
    }
}

void cpu_upsample2x(struct weft_kctx *ctx, const float *x, float *y, int64_t h, int64_t w,
                    int64_t c)
{
    struct up_arg a = {x, y, w, c};
    cpu_parallel(ctx, h, 1 + 4096 / (w * c + 1), up_rows, &a);
}
