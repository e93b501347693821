/* 2-D convolution on NHWC images (stride 1, zero padding k / 2, k = 1 or 3), the weight in its
 * checkpoint dtype (f32, bf16, f16), computed two ways:
 *
 * - GEMM: im2col of a band of output rows into [rows * w, k*k*cin] (a band is bounded to
 *   CONV_BAND_BYTES, so the workspace stays small at any image size), then the backend's GEMM
 *   (gemm.c) per band against the packed weight [k*k*cin, cout];
 * - direct: a register-blocked kernel that reads the input in place: each micro-tile is P
 *   pixels of one output row x up to 64 output channels, accumulated over the taps and over a
 *   block of KC input channels whose weight panel (9 x KC x 64 values) stays in L2.
 *
 * Both read the packed weight in panels of 64 output channels: panel p (channels [64p, 64p +
 * bw), bw = 64 or what is left) holds w'[(tap * cin + ci) * bw + j] = w[64p + j][ci][ky][kx]
 * (tap = ky * k + kx), contiguous, so the direct kernel streams one panel with unit stride (a
 * row stride of cout values would map a panel's rows onto a few cache sets once cout reaches
 * 512) and the GEMM takes each panel as a [k*k*cin][bw] weight. 1x1 convolutions are one GEMM
 * per panel in both.
 *
 * The default for 3x3 is the direct kernel where the CPU has AVX-512 (conv2d_avx512.c, chosen
 * at run time), im2col + GEMM otherwise: on the VAE decoder's shapes it is the faster one on the
 * machines measured, because im2col writes and re-reads 9x the input per band and the GEMM gets
 * only 3 output columns for conv_out. Figures: bench/README.md, "VAE decode". */
#include "kernels/cpu/cpu.h"

#if !defined(__x86_64__) /* no AVX-512 file: never chosen (ctx->isa stays below it) */
#define cpu_conv_direct_rows_avx512 direct_rows_plain
#endif

#define CONV_BAND_BYTES ((size_t)16 << 20)
#define KC CPU_CONV_KC
#define CO_BLOCK CPU_CONV_CO_BLOCK

void cpu_conv2d_pack(struct weft_kctx *ctx, const void *w, enum weft_dtype w_dtype, void *packed,
                     int64_t cout, int64_t cin, int64_t k)
{
    (void)ctx;
    const int64_t taps = k * k;
    const size_t es = weft_dtype_size(w_dtype);
    for (int64_t co = 0; co < cout; co++) {
        const int64_t co0 = co / CO_BLOCK * CO_BLOCK, j = co - co0;
        const int64_t bw = cout - co0 < CO_BLOCK ? cout - co0 : CO_BLOCK;
        char *panel = (char *)packed + (size_t)(co0 * taps * cin) * es;
        for (int64_t ci = 0; ci < cin; ci++)
            for (int64_t t = 0; t < taps; t++)
                memcpy(panel + (size_t)((t * cin + ci) * bw + j) * es,
                       (const char *)w + (size_t)((co * cin + ci) * taps + t) * es, es);
    }
}

/* Panel of output channels [co0, co0 + *bw_p). */
static const void *panel_at(const struct cpu_conv_arg *a, int64_t co0, int64_t *bw_p)
{
    *bw_p = a->cout - co0 < CO_BLOCK ? a->cout - co0 : CO_BLOCK;
    return (const char *)a->wp + (size_t)(co0 * a->k * a->k * a->cin) * weft_dtype_size(a->wdt);
}

static int64_t band_rows(int64_t h, int64_t w, int64_t cin, int64_t k)
{
    size_t row = (size_t)(w * k * k * cin) * sizeof(float);
    int64_t r = (int64_t)(CONV_BAND_BYTES / (row ? row : 1));
    return r < 1 ? 1 : (r > h ? h : r);
}

size_t cpu_conv2d_workspace(struct weft_kctx *ctx, int64_t h, int64_t w, int64_t cin,
                            int64_t cout, int64_t k)
{
    (void)ctx, (void)cout;
    if (k == 1 || h <= 0 || w <= 0)
        return 0;
    /* Enough for the GEMM path whichever algorithm is selected, so switching is always safe. */
    return (size_t)band_rows(h, w, cin, k) * (size_t)(w * k * k * cin) * sizeof(float);
}

/* y rows [b, e) (pixels) = b, or += b when accumulating. */
static void bias_rows(void *varg, int64_t b, int64_t e, int thread)
{
    (void)thread;
    const struct cpu_conv_arg *a = varg;
    const float *bias = a->b; /* a local: stores to row[] cannot change it (vectorizes) */
    const int64_t cout = a->cout;
    for (int64_t p = b; p < e; p++) {
        float *row = a->y + p * cout;
        if (a->accumulate)
            for (int64_t c = 0; c < cout; c++)
                row[c] += bias[c];
        else
            memcpy(row, bias, (size_t)cout * sizeof(float));
    }
}

/* Band pixels [b, e): col[p][tap * cin + ci] = x at the tap's neighbour, 0 outside. */
static void im2col_rows(void *varg, int64_t b, int64_t e, int thread)
{
    (void)thread;
    const struct cpu_conv_arg *a = varg;
    const int64_t w = a->w, cin = a->cin, k = a->k, pad = k / 2, kk = k * k * cin;
    const size_t bytes = (size_t)cin * sizeof(float);
    for (int64_t p = b; p < e; p++) {
        const int64_t yo = a->y0 + p / w, xo = p % w;
        float *dst = a->col + p * kk;
        for (int64_t ky = 0; ky < k; ky++) {
            const int64_t yy = yo + ky - pad;
            for (int64_t kx = 0; kx < k; kx++, dst += cin) {
                const int64_t xx = xo + kx - pad;
                if (yy < 0 || yy >= a->h || xx < 0 || xx >= w)
                    memset(dst, 0, bytes);
                else
                    memcpy(dst, a->x + (yy * w + xx) * cin, bytes);
            }
        }
    }
}

static void conv_gemm(struct weft_kctx *ctx, struct cpu_conv_arg *a, void *ws)
{
    const int64_t h = a->h, w = a->w, cout = a->cout;
    if (a->b)
        cpu_parallel(ctx, h * w, 1 + 16384 / (cout + 1), bias_rows, a);
    const int acc = a->b || a->accumulate;
    int64_t bw;
    if (a->k == 1) {
        for (int64_t co0 = 0; co0 < cout; co0 += CO_BLOCK) {
            const void *panel = panel_at(a, co0, &bw);
            cpu_gemm_kn(ctx, a->x, a->cin, panel, a->wdt, bw, NULL, a->y + co0, cout, h * w, bw,
                        a->cin, acc);
        }
        return;
    }
    const int64_t rows = band_rows(h, w, a->cin, a->k), kk = a->k * a->k * a->cin;
    a->col = ws;
    for (int64_t y0 = 0; y0 < h; y0 += rows) {
        const int64_t n = (y0 + rows <= h ? rows : h - y0) * w;
        a->y0 = y0;
        cpu_parallel(ctx, n, 64, im2col_rows, a);
        for (int64_t co0 = 0; co0 < cout; co0 += CO_BLOCK) {
            const void *panel = panel_at(a, co0, &bw);
            cpu_gemm_kn(ctx, a->col, kk, panel, a->wdt, bw, NULL, a->y + y0 * w * cout + co0,
                        cout, n, bw, kk, acc);
        }
    }
}

/* The portable direct kernel (the AVX-512 one is conv2d_avx512.c): the compiler vectorizes the
 * loop over output channels of an f32 weight; other dtypes are widened per tap. */
static inline float wval(const void *w, enum weft_dtype dt, int64_t i)
{
    switch (dt) {
    case WEFT_DTYPE_BF16: return weft_bf16_to_f32(((const uint16_t *)w)[i]);
    case WEFT_DTYPE_F16: return weft_f16_to_f32(((const uint16_t *)w)[i]);
    default: return ((const float *)w)[i];
    }
}

static void direct_rows_plain(void *varg, int64_t b, int64_t e, int thread)
{
    (void)thread;
    const struct cpu_conv_arg *a = varg;
    const int64_t w = a->w, cin = a->cin, cout = a->cout, k = a->k, pad = k / 2;
    for (int64_t task = b; task < e; task++) {
        const int64_t cob = task / a->h, yo = task % a->h, co0 = cob * CO_BLOCK;
        int64_t nco;
        const void *panel = panel_at(a, co0, &nco);
        for (int64_t xo = 0; xo < w; xo++) {
            float *dst = a->y + (yo * w + xo) * cout + co0;
            for (int64_t c = 0; c < nco; c++)
                dst[c] = (a->accumulate ? dst[c] : 0.0f) + (a->b ? a->b[co0 + c] : 0.0f);
            for (int64_t ky = 0; ky < k; ky++) {
                const int64_t yy = yo + ky - pad;
                for (int64_t kx = 0; kx < k; kx++) {
                    const int64_t xx = xo + kx - pad;
                    if (yy < 0 || yy >= a->h || xx < 0 || xx >= w)
                        continue;
                    const float *src = a->x + (yy * w + xx) * cin;
                    const int64_t base = (ky * k + kx) * cin * nco;
                    if (a->wdt == WEFT_DTYPE_F32) {
                        const float *wk = (const float *)panel + base;
                        for (int64_t ci = 0; ci < cin; ci++)
                            for (int64_t c = 0; c < nco; c++)
                                dst[c] += src[ci] * wk[ci * nco + c];
                    } else {
                        for (int64_t ci = 0; ci < cin; ci++)
                            for (int64_t c = 0; c < nco; c++)
                                dst[c] += src[ci] * wval(panel, a->wdt, base + ci * nco + c);
                    }
                }
            }
        }
    }
}

void cpu_conv2d(struct weft_kctx *ctx, const float *x, const void *wt, enum weft_dtype w_dtype,
                const float *b, float *y, int64_t h, int64_t w, int64_t cin, int64_t cout,
                int64_t k, int accumulate, void *ws)
{
    if (h <= 0 || w <= 0 || cout <= 0)
        return;
    struct cpu_conv_arg a = {.x = x, .wp = wt, .wdt = w_dtype, .b = b, .y = y, .h = h, .w = w,
                             .cin = cin, .cout = cout, .k = k, .accumulate = accumulate,
                             .scratch = ctx->scratch};
    const bool avx512 = ctx->isa >= CPU_ISA_AVX512;
    enum weft_conv_algo algo = ctx->conv_algo;
    if (algo == WEFT_CONV_DEFAULT)
        algo = avx512 ? WEFT_CONV_DIRECT : WEFT_CONV_GEMM;
    if (k == 1 || algo == WEFT_CONV_GEMM) {
        conv_gemm(ctx, &a, ws);
        return;
    }
    const int64_t n_cob = (cout + CO_BLOCK - 1) / CO_BLOCK;
    cpu_parallel(ctx, n_cob * h, 1, avx512 ? cpu_conv_direct_rows_avx512 : direct_rows_plain, &a);
}
