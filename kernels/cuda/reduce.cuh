/* Block and warp reductions shared by the CUDA kernels (blockDim.x a multiple of 32, at most
 * 1024; red holds 32 floats of shared memory). Every thread gets the result. */
#ifndef WEFT_KERNELS_CUDA_REDUCE_CUH
#define WEFT_KERNELS_CUDA_REDUCE_CUH

#include <cuda_runtime.h>

__device__ static inline float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ static inline float warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ static inline float block_sum(float v, float *red)
{
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
    v = warp_sum(v);
    __syncthreads(); /* red may still be read from a previous reduction */
    if (lane == 0)
        red[warp] = v;
    __syncthreads();
    v = lane < nw ? red[lane] : 0.0f;
    return warp_sum(v);
}

#endif
