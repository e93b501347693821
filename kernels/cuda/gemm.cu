/* f32 GEMM through cuBLAS, in the row-major Linear-layer convention of the CPU backend. */
#include <cublas_v2.h>

#include "kernels/cuda/cuda.h"
#include "kernels/cuda/cuda_internal.h"

extern "C" weft_status_t weft_cuda_gemm_f32(struct weft_cuda_ctx *ctx, int m, int n, int k,
                                            const float *a, const float *b, float *c)
{
    /* Row-major C = A B^T is column-major C^T = B A^T: cuBLAS computes op(B)=B^T (k x n view
     * of the [n, k] row-major weight) times A^T. */
    const float one = 1.0f, zero = 0.0f;
    return weft_cublas_status(cublasSgemm(ctx->blas, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &one, b,
                                          k, a, k, &zero, c, n),
                              "cublasSgemm");
}
