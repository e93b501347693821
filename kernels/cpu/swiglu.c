/* SwiGLU on a fused projection: y[:, j] = silu(x[:, j]) * x[:, n + j], j < n (FLUX.2's
 * feed-forward activation: the gate half first, then the value half). */
#include "kernels/cpu/cpu.h"

struct swiglu_arg {
    const float *x;
    float *y;
    int64_t ldx, ldy, n;
};

/* silu(v) w, with exp(-|v|) so the argument stays in cpu_expf's accurate range */
static inline float silu_mul(float v, float w)
{
    const float e = cpu_expf(-fabsf(v));
    const float s = v >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
    return v * s * w;
}

static void swiglu_rows(void *varg, int64_t b, int64_t e, int thread)
{
    (void)thread;
    const struct swiglu_arg *a = varg;
    const int64_t n = a->n; /* locals: stores through y could alias *a otherwise */
    for (int64_t r = b; r < e; r++) {
        const float *x = a->x + r * a->ldx;
        float *y = a->y + r * a->ldy;
        int64_t j = 0;
#if defined(CPU_HAVE_EXPF8)
        const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
        for (; j + 8 <= n; j += 8) {
            const __m256 v = _mm256_loadu_ps(x + j), w = _mm256_loadu_ps(x + n + j);
            const __m256 ex = cpu_expf8(_mm256_or_ps(v, sign)); /* exp(-|v|) */
            const __m256 den = _mm256_add_ps(one, ex);
            const __m256 neg = _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_LT_OQ);
            const __m256 s = _mm256_div_ps(_mm256_blendv_ps(one, ex, neg), den);
            _mm256_storeu_ps(y + j, _mm256_mul_ps(_mm256_mul_ps(v, s), w));
        }
#endif
        for (; j < n; j++)
            y[j] = silu_mul(x[j], x[n + j]);
    }
}

void cpu_swiglu(struct weft_kctx *ctx, const float *x, int64_t ldx, float *y, int64_t ldy,
                int64_t rows, int64_t n)
{
    struct swiglu_arg a = {x, y, ldx, ldy, n};
    cpu_parallel(ctx, rows, 1 + 8192 / (n + 1), swiglu_rows, &a);
}
