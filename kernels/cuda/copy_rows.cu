/* Strided row copies between device buffers: one 2-D copy on the stream. */
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_internal.h"

void cuda_copy_rows(struct weft_kctx *c, float *dst, int64_t ld_dst, const float *src,
                    int64_t ld_src, int64_t rows, int64_t cols)
{
    if (!cuda_begin(c) || rows <= 0 || cols <= 0)
        return;
    (void)cuda_check(c,
                     cudaMemcpy2DAsync(dst, (size_t)ld_dst * sizeof(float), src,
                                       (size_t)ld_src * sizeof(float),
                                       (size_t)cols * sizeof(float), (size_t)rows,
                                       cudaMemcpyDeviceToDevice, c->stream),
                     "copy_rows (cudaMemcpy2DAsync)");
}
