/* GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
#include "kernels/cpu/cpu.h"

struct gelu_arg {
    const float *x;
    float *y;
    int64_t ldx, ldy, n;
};

static void gelu_rows(void *varg, int64_t b, int64_t e, int thread)
{
    (void)thread;
    const struct gelu_arg *a = varg;
    const float k0 = 0.7978845608028654f, k1 = 0.044715f;
    const int64_t n = a->n; /* locals: stores through y could alias *a otherwise */
    for (int64_t r = b; r < e; r++) {
        const float *x = a->x + r * a->ldx;
        float *y = a->y + r * a->ldy;
        int64_t j = 0;
#if defined(CPU_HAVE_EXPF8)
        for (; j + 8 <= n; j += 8) {
            const __m256 v = _mm256_loadu_ps(x + j);
            const __m256 v3 = _mm256_mul_ps(_mm256_mul_ps(v, v), v);
            const __m256 inner = _mm256_mul_ps(_mm256_set1_ps(k0),
                                               _mm256_fmadd_ps(_mm256_set1_ps(k1), v3, v));
            const __m256 h = _mm256_mul_ps(_mm256_set1_ps(0.5f), v);
            _mm256_storeu_ps(y + j, _mm256_fmadd_ps(h, cpu_tanhf8(inner), h));
        }
#endif
        for (; j < n; j++) {
            float v = x[j];
            float inner = k0 * (v + k1 * v * v * v);
            y[j] = 0.5f * v * (1.0f + cpu_tanhf(inner));
        }
    }
}

void cpu_gelu_tanh(struct weft_kctx *ctx, const float *x, int64_t ldx, float *y, int64_t ldy,
                   int64_t rows, int64_t n)
{
    struct gelu_arg a = {x, y, ldx, ldy, n};
    cpu_parallel(ctx, rows, 1 + 8192 / (n + 1), gelu_rows, &a);
}
