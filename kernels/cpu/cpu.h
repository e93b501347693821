/* CPU backend internals: the context, the thread pool and vector-friendly math shared by the
 * one-op-per-file kernels in this folder. */
#ifndef WEFT_KERNELS_CPU_CPU_H
#define WEFT_KERNELS_CPU_CPU_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cpu/gemm.h"
#include "kernels/kernels.h"

struct cpu_pool;
struct cpu_devmem;

/* Per-thread scratch of the attention kernel, reserved once with the context: f32 QT, scores and
 * accumulators, then the bf16 path's K tile, V and P pairs (attention_bf16.c). */
#define CPU_ATTN_BQ 64
#define CPU_ATTN_BK 128
#define CPU_ATTN_D_MAX 512
#define CPU_ATTN_F32_FLOATS                                                                   \
    (CPU_ATTN_D_MAX * CPU_ATTN_BQ + CPU_ATTN_BK * CPU_ATTN_BQ + CPU_ATTN_BQ * CPU_ATTN_D_MAX)
#define CPU_ATTN_BF16_FLOATS                                                                  \
    (CPU_ATTN_BK * CPU_ATTN_D_MAX / 2 + CPU_ATTN_BK / 2 * CPU_ATTN_D_MAX +                    \
     CPU_ATTN_BK / 2 * CPU_ATTN_BQ)
#define CPU_SCRATCH_FLOATS (CPU_ATTN_F32_FLOATS + CPU_ATTN_BF16_FLOATS)

struct weft_kctx {
    int threads;
    struct cpu_pool *pool;
    float **scratch; /* [threads] x CPU_SCRATCH_FLOATS */
    enum weft_conv_algo conv_algo; /* 3x3 convolutions: WEFT_CONV_DEFAULT picks */
    enum cpu_isa isa;              /* from cpuid */
    struct cpu_gemm_kernels gemm_f32, gemm_bf16;
    bool compute_bf16;             /* products in bf16 pairs (gemm_bf16) */
    void **gemm_scratch;           /* [threads] packing buffers for either kernel set */
    size_t gemm_scratch_bytes;
    void *gemm_xpack;              /* x packed once for every thread (cpu_gemm_xpack_bytes) */
    size_t gemm_xpack_bytes;
    struct cpu_devmem *devmem;     /* the devmem variant's buffers (devmem.c); NULL: plain */
};

/* The plain CPU table (backend.c), which the devmem variant's ops call after translating their
 * pointers, and the variant's cleanup (devmem.c). */
extern const struct weft_kernels cpu_host_kernels;
void cpu_devmem_destroy(struct weft_kctx *ctx);

/* fn(arg, begin, end, thread) over [0, n) split into contiguous ranges, one per thread (the
 * caller is thread 0). Ranges are multiples of grain except the last. Not reentrant. */
typedef void (*cpu_range_fn)(void *arg, int64_t begin, int64_t end, int thread);
void cpu_parallel(struct weft_kctx *ctx, int64_t n, int64_t grain, cpu_range_fn fn, void *arg);

weft_status_t cpu_pool_create(int threads, struct cpu_pool **pool_p);
void cpu_pool_destroy(struct cpu_pool *pool);

/* The GEMM (gemm.c): y (+)= x . w^T + b, w rows of wdt as stored. */
void cpu_gemm(struct weft_kctx *ctx, const float *x, int64_t ldx, const void *w,
              enum weft_dtype wdt, const float *b, float *y, int64_t ldy, int64_t m, int64_t n,
              int64_t k, int accumulate);

/* The same with w as [k][n] rows of stride ldw (a convolution's weight panel). */
/* Bytes of the shared x panels: CPU_GEMM_MSHARED rows x one k block of either kernel set. */
size_t cpu_gemm_xpack_bytes(const struct cpu_gemm_kernels *kr);

void cpu_gemm_kn(struct weft_kctx *ctx, const float *x, int64_t ldx, const void *w,
                 enum weft_dtype wdt, int64_t ldw, const float *b, float *y, int64_t ldy,
                 int64_t m, int64_t n, int64_t k, int accumulate);

/* Weights packed once (gemm.h's cpu_pack_w_fn layout): the bytes of a [n, k] weight of wdt (0:
 * none for that dtype or ISA, the weight stays as stored), the packing, and the GEMM on it. */
size_t cpu_gemm_wpack_bytes(const struct weft_kctx *ctx, enum weft_dtype wdt, int64_t n,
                            int64_t k);
void cpu_gemm_wpack(struct weft_kctx *ctx, const void *w, int64_t n, int64_t k, void *out);
void cpu_gemm_packed(struct weft_kctx *ctx, const float *x, int64_t ldx, const void *wpack,
                     const float *b, float *y, int64_t ldy, int64_t m, int64_t n, int64_t k,
                     int accumulate);

/* Ops, one per file, installed in the table by backend.c. */
void cpu_linear(struct weft_kctx *ctx, const float *x, int64_t ldx, const void *w,
                enum weft_dtype w_dtype, const float *b, float *y, int64_t ldy, int64_t m,
                int64_t n, int64_t k, int accumulate);
size_t cpu_linear_pack_bytes(struct weft_kctx *ctx, enum weft_dtype w_dtype, int64_t n,
                             int64_t k);
void cpu_linear_pack(struct weft_kctx *ctx, const void *w, enum weft_dtype w_dtype, void *packed,
                     int64_t n, int64_t k);
void cpu_linear_packed(struct weft_kctx *ctx, const float *x, int64_t ldx, const void *packed,
                       const float *b, float *y, int64_t ldy, int64_t m, int64_t n, int64_t k,
                       int accumulate);
void cpu_layernorm(struct weft_kctx *ctx, const float *x, int64_t ldx, float *y, int64_t ldy,
                   int64_t rows, int64_t d, float eps);
void cpu_rmsnorm(struct weft_kctx *ctx, float *x, int64_t ld, const float *w, int64_t rows,
                 int64_t heads, int64_t d, float eps);
void cpu_rope(struct weft_kctx *ctx, float *x, int64_t ld, const float *cos, const float *sin,
              int64_t rows, int64_t heads, int64_t d);
void cpu_attention(struct weft_kctx *ctx, const float *q, int64_t ldq, const float *k,
                   int64_t ldk, const float *v, int64_t ldv, float *out, int64_t ldo, float *lse,
                   int64_t sq, int64_t sk, int64_t heads, int64_t d, float scale);
/* One attention task's arguments (attention.c) and the online-softmax update of a scores tile
 * st [nk][BQ] (queries along the lanes): the running max m, sum l and each query's rescale. */
struct cpu_attn_arg {
    float *const *scratch;
    const float *q, *k, *v;
    float *out, *lse;
    int64_t ldq, ldk, ldv, ldo, sq, sk, heads, d;
    float scale;
    bool bf16; /* products in bf16 pairs (attention_bf16.c) */
    const float *bias; /* [heads, sq, sk] added to the scaled scores, or NULL (f32 path only) */
    bool causal;       /* keys after the query masked (f32 path only) */
};
void cpu_attention_masked(struct weft_kctx *ctx, const float *q, int64_t ldq, const float *k,
                          int64_t ldk, const float *v, int64_t ldv, float *out, int64_t ldo,
                          int64_t sq, int64_t sk, int64_t heads, int64_t d, float scale,
                          const float *bias, int causal);
void cpu_softmax_tile(float *st, int64_t nk, float *m, float *l, float *corr);
/* The bf16 path of one (head, query block), AVX512-BF16 by target attributes: Q, K, V and the
 * probabilities rounded to bf16 as they enter the products (torch's bf16 flash attention on the
 * CPU does the same), scores, softmax and sums in f32. d even. */
void cpu_attn_block_bf16(const struct cpu_attn_arg *a, int64_t h, int64_t i0, float *scratch);
void cpu_attn_merge(struct weft_kctx *ctx, float *out, int64_t ldo, float *lse,
                    const float *out_i, int64_t ldi, const float *lse_i, int64_t rows,
                    int64_t heads, int64_t d);
void cpu_gelu_tanh(struct weft_kctx *ctx, const float *x, int64_t ldx, float *y, int64_t ldy,
                   int64_t rows, int64_t n);
void cpu_silu(struct weft_kctx *ctx, const float *x, float *y, int64_t n);
void cpu_quick_gelu(struct weft_kctx *ctx, const float *x, int64_t ldx, float *y, int64_t ldy,
                    int64_t rows, int64_t n);
void cpu_mul(struct weft_kctx *ctx, float *y, int64_t ldy, const float *x, int64_t ldx,
             int64_t rows, int64_t n);
void cpu_swiglu(struct weft_kctx *ctx, const float *x, int64_t ldx, float *y, int64_t ldy,
                int64_t rows, int64_t n);
void cpu_scale_shift(struct weft_kctx *ctx, const float *x, int64_t ldx, const float *w,
                     const float *b, float *y, int64_t ldy, int64_t rows, int64_t d);
void cpu_modulate(struct weft_kctx *ctx, const float *x, int64_t ldx, const float *shift,
                  const float *scale, float *y, int64_t ldy, int64_t rows, int64_t d);
void cpu_gated_add(struct weft_kctx *ctx, float *x, int64_t ldx, const float *gate,
                   const float *y, int64_t ldy, int64_t rows, int64_t d);
void cpu_timestep_embed(struct weft_kctx *ctx, const float *t, int64_t n, float *out,
                        int64_t dim, float scale);
void cpu_conv2d_pack(struct weft_kctx *ctx, const void *w, enum weft_dtype w_dtype, void *packed,
                     int64_t cout, int64_t cin, int64_t k);
size_t cpu_conv2d_workspace(struct weft_kctx *ctx, int64_t h, int64_t w, int64_t cin,
                            int64_t cout, int64_t k);
void cpu_conv2d(struct weft_kctx *ctx, const float *x, const void *wt, enum weft_dtype w_dtype,
                const float *b, float *y, int64_t h, int64_t w, int64_t cin, int64_t cout,
                int64_t k, int accumulate, void *ws);

/* The direct convolution's shared arguments (conv2d.c) and its AVX-512 rows (conv2d_avx512.c,
 * compiled for AVX-512 by target attributes, called only when cpu_isa_detect() found it). */
#define CPU_CONV_KC 128 /* input channels per pass of the direct kernel */
#define CPU_CONV_CO_BLOCK 64
struct cpu_conv_arg {
    const float *x, *b;
    const void *wp;
    enum weft_dtype wdt;
    float *y;
    int64_t h, w, cin, cout, k;
    int accumulate;
    /* GEMM path: the current band */
    float *col;
    int64_t y0;
    /* direct path */
    float *const *scratch;
};
void cpu_conv_direct_rows_avx512(void *arg, int64_t begin, int64_t end, int thread);

void cpu_groupnorm(struct weft_kctx *ctx, const float *x, float *y, const float *gamma,
                   const float *beta, int64_t n, int64_t c, int64_t groups, float eps, int silu);
void cpu_upsample2x(struct weft_kctx *ctx, const float *x, float *y, int64_t h, int64_t w,
                    int64_t c);

/* exp(x) for x <= 0 (the softmax and SiLU/GELU range; larger x is clamped to 88), branch-free
 * so loops over it vectorize: 2^n * p(r) with |r| <= ln2/2 and a degree-6 polynomial; relative
 * error below 2 ulp. Below -87.3 it returns 0; NaN stays NaN. */
static inline float cpu_expf(float x)
{
    const float log2e = 1.44269504088896341f, ln2_hi = 0.693359375f, ln2_lo = -2.12194440e-4f;
    x = x < -87.3f ? -87.3f : (x > 88.0f ? 88.0f : x);
    float fn = x * log2e;
    fn = (fn + 12582912.0f) - 12582912.0f; /* round to nearest integer */
    float r = x - fn * ln2_hi;
    r = r - fn * ln2_lo;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    /* NaN in gives NaN out (through p), and the exponent is built from a finite fn: a NaN
     * cast to an integer is undefined. */
    int32_t e = (int32_t)(fn == fn ? fn : 0.0f) + 127;
    union { int32_t i; float f; } s = {.i = e << 23};
    return p * s.f;
}

#if !defined(__AVX512F__) && defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define CPU_HAVE_EXPF8 1
/* cpu_expf on 8 lanes, step for step (a NaN stays NaN: max and min return their second
 * operand when one is NaN). For AVX2 builds, whose compiler leaves the scalar loops partly
 * unvectorized. */
static inline __m256 cpu_expf8(__m256 x)
{
    x = _mm256_min_ps(_mm256_set1_ps(88.0f), _mm256_max_ps(_mm256_set1_ps(-87.3f), x));
    const __m256 magic = _mm256_set1_ps(12582912.0f);
    __m256 fn = _mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f));
    fn = _mm256_sub_ps(_mm256_add_ps(fn, magic), magic);
    __m256 r = _mm256_fnmadd_ps(fn, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(fn, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_add_epi32(_mm256_cvttps_epi32(fn), _mm256_set1_epi32(127));
    return _mm256_mul_ps(p, _mm256_castsi256_ps(_mm256_slli_epi32(e, 23)));
}

/* cpu_tanhf on 8 lanes. */
static inline __m256 cpu_tanhf8(__m256 y)
{
    const __m256 sign = _mm256_set1_ps(-0.0f), one = _mm256_set1_ps(1.0f);
    const __m256 a = _mm256_andnot_ps(sign, y);
    const __m256 e = cpu_expf8(_mm256_mul_ps(_mm256_set1_ps(-2.0f), a));
    const __m256 t = _mm256_div_ps(_mm256_sub_ps(one, e), _mm256_add_ps(one, e));
    return _mm256_or_ps(t, _mm256_and_ps(sign, y)); /* t >= 0: y's sign onto it */
}
#endif

/* tanh(y) = sign(y) (1 - e) / (1 + e), e = exp(-2|y|): no overflow, vectorizable. */
static inline float cpu_tanhf(float y)
{
    float a = fabsf(y);
    float e = cpu_expf(-2.0f * a);
    float t = (1.0f - e) / (1.0f + e);
    return y < 0.0f ? -t : t;
}

#endif
