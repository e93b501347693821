/* CPU kernels against slow, obviously-correct references computed here in double precision.
 * Sizes cover the vectorized fast paths and their tails; strided rows check the ld arguments. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu.h"
#include "test.h"

static const struct weft_kernels *K;
static struct weft_kctx *ctx;

static uint64_t rng = 88172645463325252ull;
static float frand(void) /* uniform in [-1, 1) */
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static float *rnd(int64_t n, float scale)
{
    float *p = malloc((size_t)n * sizeof(float) + 4);
    for (int64_t i = 0; i < n; i++)
        p[i] = frand() * scale;
    return p;
}

/* max |a - b| / (max |b| + tiny) over n elements with strides */
static double rel_err(const float *a, int64_t lda, const double *b, int64_t ldb, int64_t rows,
                      int64_t cols)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) {
            double d = fabs((double)a[i * lda + j] - b[i * ldb + j]);
            num = d > num ? d : num;
            double m = fabs(b[i * ldb + j]);
            den = m > den ? m : den;
        }
    return num / (den + 1e-30);
}

static void check_err(const char *what, double err, double tol)
{
    if (!(err <= tol)) {
        fprintf(stderr, "%s: error %.3g > %.3g\n", what, err, tol);
        exit(1);
    }
}

static void test_linear(void)
{
    const int64_t m = 37, n = 29, k = 53, ldx = 60, ldy = 33;
    float *x = rnd(m * ldx, 1), *w = rnd(n * k, 1), *b = rnd(n, 1), *y = rnd(m * ldy, 1);
    float *y0 = malloc(m * ldy * sizeof(float));
    memcpy(y0, y, m * ldy * sizeof(float));
    double *ref = calloc((size_t)(m * n), sizeof(double));
    for (int pass = 0; pass < 3; pass++) { /* bias; no bias; accumulate with bias */
        const float *bias = pass == 1 ? NULL : b;
        int acc = pass == 2;
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double s = acc ? y[i * ldy + j] : 0.0;
                s += bias ? bias[j] : 0.0;
                for (int64_t c = 0; c < k; c++)
                    s += (double)x[i * ldx + c] * w[j * k + c];
                ref[i * n + j] = s;
            }
        K->linear(ctx, x, ldx, w, WEFT_DTYPE_F32, bias, y, ldy, m, n, k, acc);
        check_err("linear", rel_err(y, ldy, ref, n, m, n), 1e-5);
        for (int64_t i = 0; i < m; i++) /* padding columns untouched */
            for (int64_t j = n; j < ldy; j++)
                CHECK(y[i * ldy + j] == y0[i * ldy + j]);
    }
    free(x), free(w), free(b), free(y), free(y0), free(ref);
}

static void test_norms(void)
{
    const int64_t rows = 19, d = 96, ld = 100, heads = 3, hd = 32;
    float *x = rnd(rows * ld, 3), *y = calloc((size_t)(rows * ld), sizeof(float));
    for (int64_t i = 0; i < rows * ld; i++)
        x[i] += 0.5f; /* a nonzero mean */
    double *ref = calloc((size_t)(rows * d), sizeof(double));
    for (int64_t i = 0; i < rows; i++) {
        double mean = 0, var = 0;
        for (int64_t j = 0; j < d; j++)
            mean += x[i * ld + j];
        mean /= d;
        for (int64_t j = 0; j < d; j++)
            var += (x[i * ld + j] - mean) * (x[i * ld + j] - mean);
        var /= d;
        for (int64_t j = 0; j < d; j++)
            ref[i * d + j] = (x[i * ld + j] - mean) / sqrt(var + 1e-6);
    }
    K->layernorm(ctx, x, ld, y, ld, rows, d, 1e-6f);
    check_err("layernorm", rel_err(y, ld, ref, d, rows, d), 2e-6);

    float *w = rnd(hd, 1);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t h = 0; h < heads; h++) {
            double ss = 0;
            for (int64_t j = 0; j < hd; j++)
                ss += (double)x[i * ld + h * hd + j] * x[i * ld + h * hd + j];
            double inv = 1.0 / sqrt(ss / hd + 1e-6);
            for (int64_t j = 0; j < hd; j++)
                ref[i * d + h * hd + j] = x[i * ld + h * hd + j] * inv * w[j];
        }
    K->rmsnorm(ctx, x, ld, w, rows, heads, hd, 1e-6f);
    check_err("rmsnorm", rel_err(x, ld, ref, d, rows, d), 2e-6);
    free(x), free(y), free(ref), free(w);
}

static void test_rope(void)
{
    const int64_t rows = 23, heads = 4, d = 16, ld = heads * d + 8;
    float *x = rnd(rows * ld, 2), *c = malloc(rows * d * 4), *s = malloc(rows * d * 4);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < d; j += 2) {
            double ang = (double)i * pow(10000.0, -(double)j / d);
            c[i * d + j] = c[i * d + j + 1] = (float)cos(ang);
            s[i * d + j] = s[i * d + j + 1] = (float)sin(ang);
        }
    double *ref = malloc(rows * ld * sizeof(double));
    for (int64_t i = 0; i < rows; i++)
        for (int64_t h = 0; h < heads; h++)
            for (int64_t j = 0; j < d; j += 2) {
                double x0 = x[i * ld + h * d + j], x1 = x[i * ld + h * d + j + 1];
                ref[i * ld + h * d + j] = x0 * c[i * d + j] - x1 * s[i * d + j];
                ref[i * ld + h * d + j + 1] = x1 * c[i * d + j] + x0 * s[i * d + j];
            }
    K->rope(ctx, x, ld, c, s, rows, heads, d);
    check_err("rope", rel_err(x, ld, ref, ld, rows, heads * d), 1e-6);
    free(x), free(c), free(s), free(ref);
}

/* Naive attention in double, full score matrix. */
static void attn_ref(const float *q, int64_t ldq, const float *k, int64_t ldk, const float *v,
                     int64_t ldv, double *out, double *lse, int64_t sq, int64_t sk,
                     int64_t heads, int64_t d, double scale)
{
    double *sc = malloc((size_t)sk * sizeof(double));
    for (int64_t h = 0; h < heads; h++)
        for (int64_t i = 0; i < sq; i++) {
            double mx = -INFINITY;
            for (int64_t j = 0; j < sk; j++) {
                double s = 0;
                for (int64_t c = 0; c < d; c++)
                    s += (double)q[i * ldq + h * d + c] * k[j * ldk + h * d + c];
                sc[j] = s * scale;
                mx = sc[j] > mx ? sc[j] : mx;
            }
            double sum = 0;
            for (int64_t j = 0; j < sk; j++)
                sum += exp(sc[j] - mx);
            for (int64_t c = 0; c < d; c++) {
                double o = 0;
                for (int64_t j = 0; j < sk; j++)
                    o += exp(sc[j] - mx) / sum * v[j * ldv + h * d + c];
                out[i * heads * d + h * d + c] = o;
            }
            lse[i * heads + h] = mx + log(sum);
        }
    free(sc);
}

static bool attn_bf16; /* the bf16 pass: products in bf16 pairs */

static void test_attention_case(int64_t sq, int64_t sk, int64_t heads, int64_t d, float qscale)
{
    int64_t ldq = heads * d + 3, ldk = heads * d + 5, ldv = heads * d, ldo = heads * d + 1;
    float *q = rnd(sq * ldq, qscale), *k = rnd(sk * ldk, 1), *v = rnd(sk * ldv, 1);
    float *out = calloc((size_t)(sq * ldo), sizeof(float)), *lse = malloc(sq * heads * 4);
    double *ro = malloc(sq * heads * d * sizeof(double)), *rl = malloc(sq * heads * 8);
    double scale = 1.0 / sqrt((double)d);
    attn_ref(q, ldq, k, ldk, v, ldv, ro, rl, sq, sk, heads, d, scale);
    K->attention(ctx, q, ldq, k, ldk, v, ldv, out, ldo, lse, sq, sk, heads, d, (float)scale);
    char what[96];
    snprintf(what, sizeof(what), "attention sq=%lld sk=%lld h=%lld d=%lld", (long long)sq,
             (long long)sk, (long long)heads, (long long)d);
    /* Scores of magnitude ~qscale^2 carry f32 rounding into the exponent: scale the bound. */
    /* In bf16, q, k, v and p carry 2^-9 each: ~1e-2 on the output, and the scores' absolute
     * error (~ |score| 2^-8) moves the LSE as much. */
    double tol = (attn_bf16 ? 1e-2 : 2e-6) * (qscale > 1 ? qscale / 4 : 1);
    const double ltol = attn_bf16 ? 1e-2 * (qscale > 1 ? qscale * qscale / 4 : 1) : 1e-5;
    check_err(what, rel_err(out, ldo, ro, heads * d, sq, heads * d), tol);
    if (attn_bf16)
        printf("%s in bf16: error %.3g\n", what, rel_err(out, ldo, ro, heads * d, sq, heads * d));
    for (int64_t i = 0; i < sq * heads; i++)
        CHECK(fabs(lse[i] - rl[i]) <= ltol * (1 + fabs(rl[i])));

    /* Split the keys in two, attend to each part, merge by LSE: equal to the whole. */
    if (sk >= 2) {
        int64_t s1 = sk / 3 + 1;
        float *o2 = calloc((size_t)(sq * ldo), sizeof(float)), *l2 = malloc(sq * heads * 4);
        K->attention(ctx, q, ldq, k, ldk, v, ldv, out, ldo, lse, sq, s1, heads, d, (float)scale);
        K->attention(ctx, q, ldq, k + s1 * ldk, ldk, v + s1 * ldv, ldv, o2, ldo, l2, sq, sk - s1,
                     heads, d, (float)scale);
        K->attn_merge(ctx, out, ldo, lse, o2, ldo, l2, sq, heads, d);
        check_err("attn_merge", rel_err(out, ldo, ro, heads * d, sq, heads * d), 2 * tol);
        for (int64_t i = 0; i < sq * heads; i++)
            CHECK(fabs(lse[i] - rl[i]) <= 2 * ltol * (1 + fabs(rl[i])));
        free(o2), free(l2);
    }
    free(q), free(k), free(v), free(out), free(lse), free(ro), free(rl);
}

static void test_attention(void)
{
    test_attention_case(1, 1, 1, 8, 1);
    test_attention_case(70, 130, 3, 16, 1);  /* tails on both axes, small head */
    test_attention_case(64, 128, 2, 128, 1); /* full tiles: fast paths only */
    test_attention_case(65, 257, 2, 128, 1); /* full tiles plus tails */
    test_attention_case(61, 100, 1, 72, 1);  /* d not a multiple of 64 */
    test_attention_case(33, 300, 2, 128, 8); /* peaked softmax: online rescaling matters */
    test_attention_case(9, 1000, 1, 8, 30);  /* very peaked */
    /* the bf16 path, where the CPU has it (d odd stays f32: 7) */
    if (K->set_compute(ctx, WEFT_DTYPE_BF16) == WEFT_OK) {
        attn_bf16 = true;
        test_attention_case(1, 1, 1, 8, 1);
        test_attention_case(70, 131, 3, 16, 1); /* an odd key tail */
        test_attention_case(64, 128, 2, 128, 1);
        test_attention_case(65, 257, 2, 128, 1);
        test_attention_case(61, 100, 1, 72, 1);
        test_attention_case(33, 300, 2, 128, 8);
        test_attention_case(5, 9, 2, 7, 1);
        attn_bf16 = false;
        K->set_compute(ctx, WEFT_DTYPE_F32);
    }
}

/* attention_masked against the double reference with the bias and mask in the scores. */
static void test_masked_case(int64_t s, int64_t heads, int64_t d, bool with_bias, bool causal)
{
    const int64_t ld = heads * d + 2;
    float *q = rnd(s * ld, 1), *k = rnd(s * ld, 1), *v = rnd(s * ld, 1);
    float *bias = with_bias ? rnd(heads * s * s, 3) : NULL;
    float *out = calloc((size_t)(s * ld), sizeof(float));
    double *ref = malloc((size_t)(s * heads * d) * sizeof(double)), *sc = malloc(s * 8);
    const double scale = 0.37;
    for (int64_t h = 0; h < heads; h++)
        for (int64_t i = 0; i < s; i++) {
            double mx = -INFINITY, sum = 0;
            for (int64_t j = 0; j < s; j++) {
                double t = 0;
                for (int64_t c = 0; c < d; c++)
                    t += (double)q[i * ld + h * d + c] * k[j * ld + h * d + c];
                t = t * scale + (bias ? bias[(h * s + i) * s + j] : 0.0);
                sc[j] = causal && j > i ? -INFINITY : t;
                mx = sc[j] > mx ? sc[j] : mx;
            }
            for (int64_t j = 0; j < s; j++)
                sum += exp(sc[j] - mx);
            for (int64_t c = 0; c < d; c++) {
                double o = 0;
                for (int64_t j = 0; j < s; j++)
                    o += exp(sc[j] - mx) / sum * v[j * ld + h * d + c];
                ref[i * heads * d + h * d + c] = o;
            }
        }
    K->attention_masked(ctx, q, ld, k, ld, v, ld, out, ld, s, s, heads, d, (float)scale, bias,
                        causal);
    char what[96];
    snprintf(what, sizeof(what), "attention_masked s=%lld h=%lld d=%lld bias %d causal %d",
             (long long)s, (long long)heads, (long long)d, with_bias, causal);
    check_err(what, rel_err(out, ld, ref, heads * d, s, heads * d), 3e-6);
    free(q), free(k), free(v), free(bias), free(out), free(ref), free(sc);
}

static void test_masked(void)
{
    test_masked_case(1, 1, 8, true, true);
    test_masked_case(77, 3, 16, false, true);  /* CLIP: causal, tails on both axes */
    test_masked_case(130, 2, 64, true, false); /* T5: a position bias, several key tiles */
    test_masked_case(200, 2, 64, true, true);  /* both, tiles skipped past the diagonal */
    /* in bf16 compute it stays on the f32 path */
    if (K->set_compute(ctx, WEFT_DTYPE_BF16) == WEFT_OK) {
        test_masked_case(130, 2, 64, true, true);
        K->set_compute(ctx, WEFT_DTYPE_F32);
    }
}

static void test_elementwise(void)
{
    const int64_t rows = 7, n = 333, ld = 340;
    float *x = rnd(rows * ld, 6), *y = calloc((size_t)(rows * ld), sizeof(float));
    double *ref = malloc(rows * n * sizeof(double));
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < n; j++) {
            double v = x[i * ld + j];
            ref[i * n + j] = 0.5 * v * (1 + tanh(sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
        }
    K->gelu_tanh(ctx, x, ld, y, ld, rows, n);
    check_err("gelu_tanh", rel_err(y, ld, ref, n, rows, n), 1e-6);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < n; j++) {
            double v = x[i * ld + j];
            ref[i * n + j] = v / (1 + exp(-1.702 * v));
        }
    K->quick_gelu(ctx, x, ld, y, ld, rows, n);
    check_err("quick_gelu", rel_err(y, ld, ref, n, rows, n), 1e-6);
    {
        float *w = rnd(n, 1), *bb = rnd(n, 1), *z = rnd(rows * ld, 1);
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = 0; j < n; j++)
                ref[i * n + j] = (double)x[i * ld + j] * w[j] + bb[j];
        K->scale_shift(ctx, x, ld, w, bb, y, ld, rows, n);
        check_err("scale_shift", rel_err(y, ld, ref, n, rows, n), 1e-6);
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = 0; j < n; j++)
                ref[i * n + j] = (double)y[i * ld + j] * z[i * ld + j];
        K->mul(ctx, y, ld, z, ld, rows, n);
        check_err("mul", rel_err(y, ld, ref, n, rows, n), 1e-6);
        free(w), free(bb), free(z);
    }
    {
        /* SwiGLU: the gate half is x's first n / 2 columns, the value half the next n / 2 */
        const int64_t h = n / 2;
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = 0; j < h; j++) {
                double g = x[i * ld + j], v = x[i * ld + h + j];
                ref[i * h + j] = g / (1 + exp(-g)) * v;
            }
        K->swiglu(ctx, x, ld, y, ld, rows, h);
        check_err("swiglu", rel_err(y, ld, ref, h, rows, h), 1e-6);
    }

    float big[] = {-100.0f, -20.0f, -1.0f, 0.0f, 1e-4f, 3.0f, 50.0f, 100.0f};
    float out[8];
    K->silu(ctx, big, out, 8);
    for (int i = 0; i < 8; i++) {
        double v = big[i], want = v / (1 + exp(-v));
        CHECK(fabs(out[i] - want) <= 1e-6 * (1 + fabs(want)));
    }

    float *shift = rnd(n, 1), *scale = rnd(n, 1), *gate = rnd(n, 1);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < n; j++)
            ref[i * n + j] = (double)x[i * ld + j] * (1.0 + scale[j]) + shift[j];
    K->modulate(ctx, x, ld, shift, scale, y, ld, rows, n);
    check_err("modulate", rel_err(y, ld, ref, n, rows, n), 1e-6);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < n; j++)
            ref[i * n + j] = (double)x[i * ld + j] + (double)gate[j] * y[i * ld + j];
    K->gated_add(ctx, x, ld, gate, y, ld, rows, n);
    check_err("gated_add", rel_err(x, ld, ref, n, rows, n), 1e-6);
    free(x), free(y), free(ref), free(shift), free(scale), free(gate);

    /* the exp used by softmax/SiLU/GELU */
    double worst = 0;
    for (int i = 0; i <= 200000; i++) {
        float v = -87.0f * (float)i / 200000.0f;
        double e = fabs(cpu_expf(v) - exp(v)) / exp(v);
        worst = e > worst ? e : worst;
    }
    check_err("cpu_expf", worst, 3e-7);
}

static void test_timestep(void)
{
    float t[3] = {0.0f, 1.0f, 999.0f}, out[3 * 256];
    K->timestep_embed(ctx, t, 3, out, 256, 1.0f);
    for (int b = 0; b < 3; b++)
        for (int j = 0; j < 128; j++) {
            double f = exp(-log(10000.0) * j / 128.0), arg = (double)t[b] * f;
            /* f32 rounding of the argument dominates at t = 999: |arg| ulp ~ 6e-5 */
            double tol = 1e-6 + 2e-7 * fabs(arg);
            CHECK(fabs(out[b * 256 + j] - cos(arg)) <= tol);
            CHECK(fabs(out[b * 256 + 128 + j] - sin(arg)) <= tol);
        }
    /* Qwen-Image's Timesteps(scale=1000): the product t f first, then times the scale, each
     * rounded to f32 as torch does */
    float q[2] = {0.73f, 0.001f};
    K->timestep_embed(ctx, q, 2, out, 256, 1000.0f);
    for (int b = 0; b < 2; b++)
        for (int j = 0; j < 128; j++) {
            const float ex = (float)-9.210340371976184 * (float)j / 128.0f;
            const float arg = 1000.0f * (q[b] * expf(ex));
            CHECK(fabs(out[b * 256 + j] - cos((double)arg)) <= 1e-6);
            CHECK(fabs(out[b * 256 + 128 + j] - sin((double)arg)) <= 1e-6);
        }
}

int main(void)
{
    for (int threads = 1; threads <= 2; threads++) {
        CHECK_OK(weft_kernels_cpu_create(threads, &K, &ctx));
        test_linear();
        test_norms();
        test_rope();
        test_attention();
        test_masked();
        test_elementwise();
        test_timestep();
        weft_kernels_cpu_destroy(ctx);
    }
    return 0;
}
