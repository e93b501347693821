/* The direct 3x3 convolution's AVX-512 rows (see conv2d.c): each micro-tile is P pixels of one
 * output row x NV vectors of 16 output channels, its accumulators in registers over the taps and
 * a block of KC input channels. The weight is read as stored: f32 loaded, bf16 widened by a
 * shift, f16 by vcvtph2ps, 16 values per load.
 *
 * Compiled for AVX-512 by target attributes whatever the build's -march, and only called when
 * cpu_isa_detect() found it. */
#include "kernels/cpu/cpu.h"

#include <immintrin.h>

#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,f16c,fma")))
#define KC CPU_CONV_KC
#define CO_BLOCK CPU_CONV_CO_BLOCK

static const float zeros[KC];

T512 static inline __attribute__((always_inline)) __m512 wload(const void *w, int64_t i,
                                                                __mmask16 m,
                                                                const enum weft_dtype dt)
{
    if (dt == WEFT_DTYPE_BF16) {
        const __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)w + i);
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    if (dt == WEFT_DTYPE_F16)
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)w + i));
    return _mm512_maskz_loadu_ps(m, (const float *)w + i);
}

/* One micro-tile: P pixels from (yo, x0) x NV vectors of 16 output channels from co0, over
 * input channels [ci0, ci0 + nc). Pixels past the row end read zeros and write to dummy, so
 * every tile has the full P (constant) and the accumulators stay in registers. */
T512 static inline __attribute__((always_inline)) void
direct_tile(const struct cpu_conv_arg *a, int64_t yo, int64_t x0, int64_t co0, int64_t ci0,
            int64_t nc, int first, float *dummy, const int P, const int NV,
            const enum weft_dtype dt)
{
    const int64_t w = a->w, cin = a->cin, cout = a->cout, k = a->k, pad = k / 2;
    const int64_t bw = cout - co0 < CO_BLOCK ? cout - co0 : CO_BLOCK;
    const int64_t base = co0 * k * k * cin; /* the panel's first element */
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
            int64_t wi = base + ((ky * k + kx) * cin + ci0) * bw;
            for (int64_t c = 0; c < nc; c++, wi += bw) {
                __m512 wv[4];
#pragma GCC unroll 4
                for (int64_t t = 0; t < NV; t++)
                    wv[t] = wload(a->wp, wi + 16 * t, m[t], dt);
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

typedef void (*tile_fn)(const struct cpu_conv_arg *a, int64_t yo, int64_t x0, int64_t co0,
                        int64_t ci0, int64_t nc, int first, float *dummy);

/* Pixels per tile for NV vectors: about 24 accumulators, leaving registers for the weights. */
#define TILE_FN(P, NV, DT, NAME)                                                              \
    T512 static void tile_##P##x##NV##_##NAME(const struct cpu_conv_arg *a, int64_t yo,       \
                                              int64_t x0, int64_t co0, int64_t ci0,          \
                                              int64_t nc, int first, float *dummy)           \
    {                                                                                         \
        direct_tile(a, yo, x0, co0, ci0, nc, first, dummy, P, NV, DT);                        \
    }
#define TILES(DT, NAME)                                                                       \
    TILE_FN(16, 1, DT, NAME)                                                                  \
    TILE_FN(12, 2, DT, NAME)                                                                  \
    TILE_FN(8, 3, DT, NAME)                                                                   \
    TILE_FN(6, 4, DT, NAME)                                                                   \
    static const tile_fn tiles_##NAME[4] = {tile_16x1_##NAME, tile_12x2_##NAME,               \
                                            tile_8x3_##NAME, tile_6x4_##NAME};
TILES(WEFT_DTYPE_F32, f32)
TILES(WEFT_DTYPE_BF16, bf16)
TILES(WEFT_DTYPE_F16, f16)

void cpu_conv_direct_rows_avx512(void *varg, int64_t b, int64_t e, int thread)
{
    const struct cpu_conv_arg *a = varg;
    static const int pixels[4] = {16, 12, 8, 6};
    const tile_fn *fns = a->wdt == WEFT_DTYPE_BF16  ? tiles_bf16
                         : a->wdt == WEFT_DTYPE_F16 ? tiles_f16
                                                    : tiles_f32;
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
