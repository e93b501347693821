/* Linear layer y = x . w^T + b through the CPU GEMM (gemm.c), w as the checkpoint stores it. */
#include "kernels/cpu/cpu.h"

void cpu_linear(struct weft_kctx *ctx, const float *x, int64_t ldx, const void *w,
                enum weft_dtype w_dtype, const float *b, float *y, int64_t ldy, int64_t m,
                int64_t n, int64_t k, int accumulate)
{
    cpu_gemm(ctx, x, ldx, w, w_dtype, b, y, ldy, m, n, k, accumulate);
}
