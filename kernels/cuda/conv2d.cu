/* 2-D convolution on NHWC images (stride 1, zero padding k / 2, k = 1 or 3) as im2col in bands
 * of output rows + the backend's GEMM (linear.cu), the weight in its checkpoint dtype.
 *
 * The packed weight is [cout][k*k][cin]: element (co, tap, ci) = w[co][ci][ky][kx] (tap = ky k
 * + kx), so it is a Linear weight [cout, k*k*cin] against im2col rows [pixel][tap][cin]. A 1x1
 * convolution is one GEMM on the image itself. A band is bounded to CONV_BAND_BYTES of im2col,
 * so the workspace stays small at any image size. */
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_internal.h"

#define CONV_BAND_BYTES ((size_t)64 << 20)

__global__ static void pack_kernel(const char *w, size_t es, char *packed, int64_t cout,
                                   int64_t cin, int64_t taps)
{
    const int64_t n = cout * cin * taps;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        /* i indexes the destination: (co, t, ci) */
        const int64_t ci = i % cin, t = (i / cin) % taps, co = i / (cin * taps);
        const char *src = w + (size_t)((co * cin + ci) * taps + t) * es;
        char *dst = packed + (size_t)i * es;
        if (es == 4)
            *(uint32_t *)dst = *(const uint32_t *)src;
        else
            *(uint16_t *)dst = *(const uint16_t *)src;
    }
}

void cuda_conv2d_pack(struct weft_kctx *c, const void *w, enum weft_dtype w_dtype, void *packed,
                      int64_t cout, int64_t cin, int64_t k)
{
    const size_t es = weft_dtype_size(w_dtype);
    if (!cuda_begin(c) || cout <= 0 || cin <= 0 || k <= 0)
        return;
    if (es != 2 && es != 4) {
        cuda_refuse(c, "conv2d_pack", "weights must be f32, bf16 or f16");
        return;
    }
    const int64_t n = cout * cin * k * k;
    pack_kernel<<<cuda_blocks(n, 256), 256, 0, c->stream>>>((const char *)w, es, (char *)packed,
                                                             cout, cin, k * k);
    cuda_launched(c, "conv2d_pack");
}

static int64_t band_rows(int64_t h, int64_t w, int64_t cin, int64_t k)
{
    const size_t row = (size_t)(w * k * k * cin) * sizeof(float);
    const int64_t r = (int64_t)(CONV_BAND_BYTES / (row ? row : 1));
    return r < 1 ? 1 : (r > h ? h : r);
}

size_t cuda_conv2d_workspace(struct weft_kctx *c, int64_t h, int64_t w, int64_t cin,
                             int64_t cout, int64_t k)
{
    (void)c, (void)cout;
    if (k == 1 || h <= 0 || w <= 0 || cin <= 0)
        return 0;
    return (size_t)band_rows(h, w, cin, k) * (size_t)(w * k * k * cin) * sizeof(float);
}

/* col[(r * w + x) * taps * cin + t * cin + ci] for output rows y0 + r, r < rows. */
__global__ static void im2col_kernel(const float *x, float *col, int64_t h, int64_t w,
                                     int64_t cin, int64_t k, int64_t y0, int64_t rows)
{
    const int64_t taps = k * k, pad = k / 2, n = rows * w * taps * cin;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t ci = i % cin, t = (i / cin) % taps, px = i / (cin * taps);
        const int64_t oy = y0 + px / w, ox = px % w;
        const int64_t iy = oy + t / k - pad, ix = ox + t % k - pad;
        col[i] = iy >= 0 && iy < h && ix >= 0 && ix < w ? x[(iy * w + ix) * cin + ci] : 0.0f;
    }
}

void cuda_conv2d(struct weft_kctx *c, const float *x, const void *wt, enum weft_dtype w_dtype,
                 const float *b, float *y, int64_t h, int64_t w, int64_t cin, int64_t cout,
                 int64_t k, int accumulate, void *ws)
{
    if (!cuda_begin(c) || h <= 0 || w <= 0 || cin <= 0 || cout <= 0)
        return;
    if (k != 1 && k != 3) {
        cuda_refuse(c, "conv2d", "kernel size must be 1 or 3");
        return;
    }
    if (k == 1) {
        cuda_gemm(c, x, cin, wt, w_dtype, b, y, cout, h * w, cout, cin, accumulate);
        return;
    }
    const int64_t band = band_rows(h, w, cin, k), kdim = k * k * cin;
    float *col = (float *)ws;
    if (!col && !(col = (float *)cuda_scratch_get(
                      c, &c->col, cuda_conv2d_workspace(c, h, w, cin, cout, k))))
        return;
    for (int64_t y0 = 0; y0 < h && cuda_ok(c); y0 += band) {
        const int64_t rows = h - y0 < band ? h - y0 : band;
        im2col_kernel<<<cuda_blocks(rows * w * kdim, 256), 256, 0, c->stream>>>(x, col, h, w, cin,
                                                                                k, y0, rows);
        cuda_launched(c, "conv2d (im2col)");
        cuda_gemm(c, col, kdim, wt, w_dtype, b, y + y0 * w * cout, cout, rows * w, cout, kdim,
                  accumulate);
    }
}
