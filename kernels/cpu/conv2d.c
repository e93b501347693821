/* 2-D convolution on NHWC images (stride 1, zero padding k / 2, k = 1 or 3), computed two ways:
 *
 * - GEMM: im2col of a band of output rows into [rows * w, k*k*cin] (a band is bounded to
 *   CONV_BAND_BYTES, so the workspace stays small at any image size), then one OpenBLAS sgemm
 *   per band against the packed weight [k*k*cin, cout];
 * - direct: a register-blocked kernel that reads the input in place: each micro-tile is P
 *   pixels of one output row x up to 64 output channels, accumulated over the taps and over a
 *   block of KC input channels whose weight panel (9 x KC x 64 floats, 288 KiB) stays in L2.
 *
 * Both read the packed weight in panels of 64 output channels: panel p (channels [64p, 64p +
 * bw), bw = 64 or what is left) holds w'[(tap * cin + ci) * bw + j] = w[64p + j][ci][ky][kx]
 * (tap = ky * k + kx), contiguous, so the direct kernel streams one panel with unit stride (a
 * row stride of cout floats would map a panel's rows onto a few cache sets once cout reaches
 * 512) and sgemm takes each panel as a row-major B [k*k*cin, bw]. 1x1 convolutions are one
 * sgemm per panel in both.
 *
 * The default for 3x3 is the direct kernel where AVX-512 is available (im2col + sgemm
 * otherwise): on the VAE decoder's shapes it is the faster one on the machines measured, because
 * im2col writes and re-reads 9x the input per band and sgemm gets only 3 output columns for
 * conv_out. Figures: bench/README.md, "VAE decode". */
#include <cblas.h>

#include "kernels/cpu/cpu.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#define CONV_BAND_BYTES ((size_t)16 << 20)
#define KC 128 /* input channels per pass of the direct kernel */
#define CO_BLOCK 64

void cpu_conv2d_pack(struct weft_kctx *ctx, const float *w, float *packed, int64_t cout,
                     int64_t cin, int64_t k)
{
    (void)ctx;
    const int64_t taps = k * k;
    for (int64_t co = 0; co < cout; co++) {
        const int64_t co0 = co / CO_BLOCK * CO_BLOCK, j = co - co0;
        const int64_t bw = cout - co0 < CO_BLOCK ? cout - co0 : CO_BLOCK;
        float *panel = packed + co0 * taps * cin;
        for (int64_t ci = 0; ci < cin; ci++)
            for (int64_t t = 0; t < taps; t++)
                panel[(t * cin + ci) * bw + j] = w[(co * cin + ci) * taps + t];
    }
}

/* Panel of output channels [co0, co0 + *bw_p). */
static const float *panel_at(const float *wp, int64_t co0, int64_t cout, int64_t cin,
                             int64_t k, int64_t *bw_p)
{
    *bw_p = cout - co0 < CO_BLOCK ? cout - co0 : CO_BLOCK;
    return wp + co0 * k * k * cin;
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

struct conv_arg {
    const float *x, *wp, *b;
    float *y;
    int64_t h, w, cin, cout, k;
    int accumulate;
    /* GEMM path: the current band */
    float *col;
    int64_t y0;
    /* direct path */
    float *const *scratch;
    int64_t n_cob;
};

/* y rows [b, e) (pixels) = b, or += b when accumulating. */
static void bias_rows(void *varg, int64_t b, int64_t e, int thread)
{
    (void)thread;
    const struct conv_arg *a = varg;
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
    const struct conv_arg *a = varg;
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

static void conv_gemm(struct weft_kctx *ctx, struct conv_arg *a, void *ws)
{
    const int64_t h = a->h, w = a->w, cout = a->cout;
    if (a->b)
        cpu_parallel(ctx, h * w, 1 + 16384 / (cout + 1), bias_rows, a);
    const float beta = a->b || a->accumulate ? 1.0f : 0.0f;
    int64_t bw;
    if (a->k == 1) {
        for (int64_t co0 = 0; co0 < cout; co0 += CO_BLOCK) {
            const float *panel = panel_at(a->wp, co0, cout, a->cin, 1, &bw);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)(h * w),
                        (blasint)bw, (blasint)a->cin, 1.0f, a->x, (blasint)a->cin, panel,
                        (blasint)bw, beta, a->y + co0, (blasint)cout);
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
            const float *panel = panel_at(a->wp, co0, cout, a->cin, a->k, &bw);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)n, (blasint)bw,
                        (blasint)kk, 1.0f, a->col, (blasint)kk, panel, (blasint)bw, beta,
                        a->y + y0 * w * cout + co0, (blasint)cout);
        }
    }
}

/* ---------------------------------------------------------------------------------------- */
/* Direct kernel                                                                             */

static const float zeros[KC];

#if defined(__AVX512F__)

/* One micro-tile: P pixels from (yo, x0) x NV vectors of 16 output channels from co0, over
 * input channels [ci0, ci0 + nc). Pixels past the row end read zeros and write to dummy, so
 * every tile has the full P (constant) and the accumulators stay in registers. */
static inline __attribute__((always_inline)) void
direct_tile(const struct conv_arg *a, int64_t yo, int64_t x0, int64_t co0, int64_t ci0,
            int64_t nc, int first, float *dummy, const int P, const int NV)
{
    const int64_t w = a->w, cin = a->cin, cout = a->cout, k = a->k, pad = k / 2;
    int64_t bw;
    const float *panel = panel_at(a->wp, co0, cout, cin, k, &bw);
    __mmask16 m[4];
    for (int64_t t = 0; t < 4; t++) {
        int64_t rem = cout - co0 - 16 * t;
        m[t] = rem >= 16 ? (__mmask16)0xffff : rem > 0 ? (__mmask16)((1u << rem) - 1) : 0;
    }
    float *dst[16];
    __m512 acc[16][4];
#pragma GCC unroll 16
    for (int i = 0; i < P; i++) {
        dst[i] = x0 + i < w ? a->y + (yo * w + x0 + i) * cout + co0 : dummy;
#pragma GCC unroll 4
        for (int64_t t = 0; t < NV; t++) {
            __m512 v = _mm512_setzero_ps();
            if (!first || a->accumulate)
                v = _mm512_maskz_loadu_ps(m[t], dst[i] + 16 * t);
            if (first && a->b)
                v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m[t], a->b + co0 + 16 * t));
            acc[i][t] = v;
        }
    }
    for (int64_t ky = 0; ky < k; ky++) {
        const int64_t yy = yo + ky - pad;
        if (yy < 0 || yy >= a->h)
            continue;
        for (int64_t kx = 0; kx < k; kx++) {
            const float *src[16];
#pragma GCC unroll 16
            for (int i = 0; i < P; i++) {
                const int64_t xx = x0 + i + kx - pad;
                src[i] = xx >= 0 && xx < w ? a->x + (yy * w + xx) * cin + ci0 : zeros;
            }
            const float *wk = panel + ((ky * k + kx) * cin + ci0) * bw;
            for (int64_t c = 0; c < nc; c++, wk += bw) {
                __m512 wv[4];
#pragma GCC unroll 4
                for (int64_t t = 0; t < NV; t++)
                    wv[t] = _mm512_maskz_loadu_ps(m[t], wk + 16 * t);
#pragma GCC unroll 16
                for (int i = 0; i < P; i++) {
                    const __m512 xb = _mm512_set1_ps(src[i][c]);
#pragma GCC unroll 4
                    for (int64_t t = 0; t < NV; t++)
                        acc[i][t] = _mm512_fmadd_ps(xb, wv[t], acc[i][t]);
                }
            }
        }
    }
#pragma GCC unroll 16
    for (int i = 0; i < P; i++)
#pragma GCC unroll 4
        for (int64_t t = 0; t < NV; t++)
            _mm512_mask_storeu_ps(dst[i] + 16 * t, m[t], acc[i][t]);
}

/* Pixels per tile for NV vectors: about 24 accumulators, leaving registers for the weights. */
#define TILE_FN(P, NV)                                                                      \
    static void tile_##P##x##NV(const struct conv_arg *a, int64_t yo, int64_t x0,           \
                                int64_t co0, int64_t ci0, int64_t nc, int first,            \
                                float *dummy)                                               \
    {                                                                                       \
        direct_tile(a, yo, x0, co0, ci0, nc, first, dummy, P, NV);                          \
    }
TILE_FN(16, 1)
TILE_FN(12, 2)
TILE_FN(8, 3)
TILE_FN(6, 4)

typedef void (*tile_fn)(const struct conv_arg *a, int64_t yo, int64_t x0, int64_t co0,
                        int64_t ci0, int64_t nc, int first, float *dummy);

static void direct_rows(void *varg, int64_t b, int64_t e, int thread)
{
    const struct conv_arg *a = varg;
    static const tile_fn fns[4] = {tile_16x1, tile_12x2, tile_8x3, tile_6x4};
    static const int pixels[4] = {16, 12, 8, 6};
    float *dummy = a->scratch[thread]; /* 64 floats that absorb the tail pixels' stores */
    for (int64_t task = b; task < e; task++) {
        const int64_t cob = task / a->h, yo = task % a->h, co0 = cob * CO_BLOCK;
        const int64_t left = a->cout - co0;
        const int nv = left >= CO_BLOCK ? 4 : (int)((left + 15) / 16);
        const tile_fn fn = fns[nv - 1];
        const int p = pixels[nv - 1];
        for (int64_t ci0 = 0; ci0 < a->cin; ci0 += KC) {
            const int64_t nc = a->cin - ci0 < KC ? a->cin - ci0 : KC;
            for (int64_t x0 = 0; x0 < a->w; x0 += p)
                fn(a, yo, x0, co0, ci0, nc, ci0 == 0, dummy);
        }
    }
}

#else /* portable fallback: the compiler vectorizes the loop over output channels */

static void direct_rows(void *varg, int64_t b, int64_t e, int thread)
{
    (void)thread;
    const struct conv_arg *a = varg;
    const int64_t w = a->w, cin = a->cin, cout = a->cout, k = a->k, pad = k / 2;
    for (int64_t task = b; task < e; task++) {
        const int64_t cob = task / a->h, yo = task % a->h, co0 = cob * CO_BLOCK;
        const int64_t nco = cout - co0 < CO_BLOCK ? cout - co0 : CO_BLOCK;
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
                    const float *wk = a->wp + co0 * k * k * cin + (ky * k + kx) * cin * nco;
                    for (int64_t ci = 0; ci < cin; ci++)
                        for (int64_t c = 0; c < nco; c++)
                            dst[c] += src[ci] * wk[ci * nco + c];
                }
            }
        }
    }
}

#endif

static void conv_direct(struct weft_kctx *ctx, struct conv_arg *a)
{
    (void)zeros;
    a->scratch = ctx->scratch;
    a->n_cob = (a->cout + CO_BLOCK - 1) / CO_BLOCK;
    cpu_parallel(ctx, a->n_cob * a->h, 1, direct_rows, a);
}

void cpu_conv2d(struct weft_kctx *ctx, const float *x, const float *wt, const float *b, float *y,
                int64_t h, int64_t w, int64_t cin, int64_t cout, int64_t k, int accumulate,
                void *ws)
{
    if (h <= 0 || w <= 0 || cout <= 0)
        return;
    struct conv_arg a = {.x = x, .wp = wt, .b = b, .y = y, .h = h, .w = w, .cin = cin,
                         .cout = cout, .k = k, .accumulate = accumulate};
    enum weft_conv_algo algo = ctx->conv_algo;
    if (algo == WEFT_CONV_DEFAULT) {
#if defined(__AVX512F__)
        algo = WEFT_CONV_DIRECT;
#else
        algo = WEFT_CONV_GEMM;
#endif
    }
    if (k == 1 || algo == WEFT_CONV_GEMM)
        conv_gemm(ctx, &a, ws);
    else
        conv_direct(ctx, &a);
}
