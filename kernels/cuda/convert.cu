/* Element conversions between f32, bf16 and f16 on the device: operands of reduced-precision
 * products (x rounded as it enters a GEMM, a weight converted to the products' dtype). Round to
 * nearest even, as the CPU backend's weft_f32_to_bf16 and the hardware conversions do. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_internal.h"

__device__ static inline float load_as_f32(const void *p, int t, int64_t i)
{
    if (t == WEFT_DTYPE_BF16)
        return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    if (t == WEFT_DTYPE_F16)
        return __half2float(((const __half *)p)[i]);
    return ((const float *)p)[i];
}

__device__ static inline void store_from_f32(void *p, int t, int64_t i, float v)
{
    if (t == WEFT_DTYPE_BF16)
        ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v);
    else if (t == WEFT_DTYPE_F16)
        ((__half *)p)[i] = __float2half_rn(v);
    else
        ((float *)p)[i] = v;
}

__global__ static void convert_kernel(void *dst, int dt, const void *src, int st, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        store_from_f32(dst, dt, i, load_as_f32(src, st, i));
}

__global__ static void convert_rows_kernel(void *dst, int dt, const float *src, int64_t ld,
                                           int64_t rows, int64_t cols)
{
    const int64_t n = rows * cols;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / cols, j = i - r * cols;
        store_from_f32(dst, dt, i, src[r * ld + j]);
    }
}

void cuda_convert(struct weft_kctx *c, void *dst, enum weft_dtype dst_type, const void *src,
                  enum weft_dtype src_type, int64_t n)
{
    if (!cuda_begin(c) || n <= 0)
        return;
    convert_kernel<<<cuda_blocks(n, 256), 256, 0, c->stream>>>(dst, (int)dst_type, src,
                                                                (int)src_type, n);
    cuda_launched(c, "convert");
}

void cuda_convert_rows(struct weft_kctx *c, void *dst, enum weft_dtype dst_type,
                       const float *src, int64_t ld, int64_t rows, int64_t cols)
{
    if (!cuda_begin(c) || rows <= 0 || cols <= 0)
        return;
    convert_rows_kernel<<<cuda_blocks(rows * cols, 256), 256, 0, c->stream>>>(
        dst, (int)dst_type, src, ld, rows, cols);
    cuda_launched(c, "convert_rows");
}
