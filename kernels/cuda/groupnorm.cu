/* GroupNorm on n pixels of c channels (NHWC), optionally followed by SiLU, as the CPU backend
 * computes it: two-pass statistics in double (a group of a 1024x1024 image holds tens of
 * millions of values), then y = (x - mean_g) * a_c + beta_c with a_c = gamma_c / sqrt(var_g +
 * eps) rounded to f32. Blocks sum slices of a group's pixels and add their partial sums
 * atomically into per-group doubles. */
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_internal.h"

__device__ static double block_sum_d(double v, double *red)
{
    red[threadIdx.x] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s)
            red[threadIdx.x] += red[threadIdx.x + s];
        __syncthreads();
    }
    return red[0];
}

/* pass 0: stats[g] += sum x; pass 1: stats[groups + g] += sum (x - stats[g] / count)^2 */
__global__ static void gn_stats(const float *x, int64_t n, int64_t c, int64_t cg,
                                int64_t groups, double *stats, int pass, double count)
{
    __shared__ double red[256];
    const int64_t g = blockIdx.y, per = cg * n, chunk = (per + gridDim.x - 1) / gridDim.x;
    const int64_t b = (int64_t)blockIdx.x * chunk, e = b + chunk < per ? b + chunk : per;
    const double mean = pass ? stats[g] / count : 0.0;
    double s = 0.0;
    for (int64_t i = b + threadIdx.x; i < e; i += blockDim.x) {
        const int64_t p = i / cg, j = i - p * cg;
        const double v = (double)x[p * c + g * cg + j] - mean;
        s += pass ? v * v : v;
    }
    s = block_sum_d(s, red);
    if (threadIdx.x == 0)
        atomicAdd(&stats[pass * groups + g], s);
}

/* Per channel: the group's mean and a_c = gamma_c / sqrt(var_g + eps), rounded to f32 once. */
__global__ static void gn_coefs(const float *gamma, int64_t c, int64_t cg, int64_t groups,
                                const double *stats, double count, float eps, float *mean,
                                float *scale)
{
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < c;
         j += (int64_t)gridDim.x * blockDim.x) {
        const int64_t g = j / cg;
        const double rstd = 1.0 / sqrt(stats[groups + g] / count + (double)eps);
        mean[j] = (float)(stats[g] / count);
        scale[j] = (float)((double)gamma[j] * rstd);
    }
}

__global__ static void gn_norm(const float *x, float *y, const float *mean, const float *scale,
                               const float *beta, int64_t n, int64_t c, int silu)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n * c;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t j = i % c;
        const float v = (x[i] - mean[j]) * scale[j] + beta[j];
        if (!silu) {
            y[i] = v;
            continue;
        }
        const float ex = expf(-fabsf(v));
        y[i] = v * (v >= 0.0f ? 1.0f / (1.0f + ex) : ex / (1.0f + ex));
    }
}

void cuda_groupnorm(struct weft_kctx *c, const float *x, float *y, const float *gamma,
                    const float *beta, int64_t n, int64_t ch, int64_t groups, float eps,
                    int silu)
{
    if (!cuda_begin(c) || n <= 0 || ch <= 0 || groups <= 0)
        return;
    if (ch % groups || groups > 65535) {
        cuda_refuse(c, "groupnorm", "channels must be a multiple of groups (at most 65535)");
        return;
    }
    /* scratch: 2 x groups doubles of sums, then the mean and scale of each channel */
    const size_t sb = 2 * (size_t)groups * sizeof(double);
    double *stats = (double *)cuda_scratch_get(c, &c->stats, sb + 2 * (size_t)ch * sizeof(float));
    if (!stats ||
        cuda_check(c, cudaMemsetAsync(stats, 0, 2 * (size_t)groups * sizeof(double), c->stream),
                   "groupnorm (cudaMemsetAsync)") != WEFT_OK)
        return;
    const int64_t cg = ch / groups, per = cg * n;
    int64_t chunks = (per + 4095) / 4096, want = (4 * (int64_t)c->sm_count + groups - 1) / groups;
    chunks = chunks < want ? chunks : want;
    chunks = chunks < 1 ? 1 : chunks;
    const double count = (double)per;
    const dim3 grid((unsigned)chunks, (unsigned)groups);
    for (int pass = 0; pass < 2; pass++) {
        gn_stats<<<grid, 256, 0, c->stream>>>(x, n, ch, cg, groups, stats, pass, count);
        cuda_launched(c, "groupnorm (statistics)");
    }
    float *mean = (float *)((char *)stats + sb), *scale = mean + ch;
    gn_coefs<<<cuda_blocks(ch, 256), 256, 0, c->stream>>>(gamma, ch, cg, groups, stats, count, eps,
                                                         mean, scale);
    cuda_launched(c, "groupnorm (coefficients)");
    gn_norm<<<cuda_blocks(n * ch, 256), 256, 0, c->stream>>>(x, y, mean, scale, beta, n, ch, silu);
    cuda_launched(c, "groupnorm");
}
