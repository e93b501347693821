/* Linear layer y = x . w^T + b through OpenBLAS sgemm (its own threads). */
#include <cblas.h>

#include "kernels/cpu/cpu.h"

void cpu_linear(struct weft_kctx *ctx, const float *x, int64_t ldx, const float *w,
                const float *b, float *y, int64_t ldy, int64_t m, int64_t n, int64_t k,
                int accumulate)
{
    (void)ctx;
    if (m <= 0 || n <= 0)
        return;
    float beta = accumulate ? 1.0f : 0.0f;
    if (b) {
        /* Bias first, then accumulate the product: one pass over y instead of two. */
        for (int64_t i = 0; i < m; i++) {
            float *row = y + i * ldy;
            if (accumulate)
                for (int64_t j = 0; j < n; j++)
                    row[j] += b[j];
            else
                memcpy(row, b, (size_t)n * sizeof(float));
        }
        beta = 1.0f;
    }
    if (k <= 0) {
        if (!b && !accumulate)
            for (int64_t i = 0; i < m; i++)
                memset(y + i * ldy, 0, (size_t)n * sizeof(float));
        return;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)m, (blasint)n, (blasint)k, 1.0f,
                x, (blasint)ldx, w, (blasint)k, beta, y, (blasint)ldy);
}
