/* The CPU image kernels (conv2d both ways, GroupNorm, nearest upsampling) against slow
 * references in double precision written from the PyTorch definitions (NCHW weights [cout, cin,
 * k, k], zero padding). Shapes cover the direct kernel's tile widths and channel tails, more
 * input channels than one KC block, k = 1 and 3, bias, no bias and accumulation. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu.h"
#include "test.h"

static const struct weft_kernels *K;
static struct weft_kctx *ctx;

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void) /* uniform in [-1, 1) */
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static float *rnd(int64_t n, float scale, float offset)
{
    float *p = malloc((size_t)n * sizeof(float) + 4);
    CHECK(p);
    for (int64_t i = 0; i < n; i++)
        p[i] = frand() * scale + offset;
    return p;
}

/* max |a - ref| / max |ref| */
static double max_rel(const float *a, const double *ref, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - ref[i]), m = fabs(ref[i]);
        num = d > num ? d : num;
        den = m > den ? m : den;
    }
    return num / (den + 1e-30);
}

static void conv_ref(const float *x, const float *w, const float *b, const float *y0,
                     double *ref, int64_t h, int64_t wd, int64_t cin, int64_t cout, int64_t k)
{
    const int64_t pad = k / 2;
    for (int64_t yo = 0; yo < h; yo++)
        for (int64_t xo = 0; xo < wd; xo++)
            for (int64_t co = 0; co < cout; co++) {
                double s = (y0 ? y0[(yo * wd + xo) * cout + co] : 0.0) + (b ? b[co] : 0.0);
                for (int64_t ky = 0; ky < k; ky++)
                    for (int64_t kx = 0; kx < k; kx++) {
                        int64_t yy = yo + ky - pad, xx = xo + kx - pad;
                        if (yy < 0 || yy >= h || xx < 0 || xx >= wd)
                            continue;
                        for (int64_t ci = 0; ci < cin; ci++)
                            s += (double)x[(yy * wd + xx) * cin + ci] *
                                 w[((co * cin + ci) * k + ky) * k + kx];
                    }
                ref[(yo * wd + xo) * cout + co] = s;
            }
}

/* The weight rounded to dtype (the reference then uses exactly the values the kernel reads)
 * and stored in it. */
static void *as_dtype(float *w, int64_t n, enum weft_dtype dt)
{
    void *out = malloc((size_t)n * weft_dtype_size(dt));
    CHECK(out);
    for (int64_t i = 0; i < n; i++) {
        if (dt == WEFT_DTYPE_BF16) {
            ((uint16_t *)out)[i] = weft_f32_to_bf16(w[i]);
            w[i] = weft_bf16_to_f32(((uint16_t *)out)[i]);
        } else if (dt == WEFT_DTYPE_F16) {
            ((uint16_t *)out)[i] = weft_f32_to_f16(w[i]);
            w[i] = weft_f16_to_f32(((uint16_t *)out)[i]);
        } else {
            ((float *)out)[i] = w[i];
        }
    }
    return out;
}

/* Every algorithm, the AVX-512 direct kernel and the portable one, each weight dtype; in f32
 * compute within f32 rounding of the double reference, in bf16 compute (x rounded to bf16 on
 * the GEMM path) within bf16's. */
static void conv_case(int64_t h, int64_t wd, int64_t cin, int64_t cout, int64_t k,
                      enum weft_dtype dt)
{
    const int64_t n_out = h * wd * cout, nw = cout * cin * k * k;
    float *x = rnd(h * wd * cin, 1, 0), *w = rnd(nw, 0.3f, 0);
    void *wt = as_dtype(w, nw, dt);
    float *b = rnd(cout, 1, 0);
    void *packed = malloc((size_t)nw * weft_dtype_size(dt));
    float *resid = rnd(n_out, 1, 0), *y = malloc((size_t)n_out * sizeof(float) + 4);
    double *ref = malloc((size_t)n_out * sizeof(double) + 8);
    CHECK(packed && y && ref);
    K->conv2d_pack(ctx, wt, dt, packed, cout, cin, k);
    size_t ws_bytes = K->conv2d_workspace(ctx, h, wd, cin, cout, k);
    void *ws = ws_bytes ? malloc(ws_bytes) : NULL;
    CHECK(!ws_bytes || ws);
    const enum cpu_isa have = ctx->isa;
    for (int plain = 0; plain < 2; plain++) {
        ctx->isa = plain ? CPU_ISA_GENERIC : have; /* the direct kernel follows the ISA */
        for (int compute = 0; compute < 2; compute++) {
            if (compute && weft_kernels_cpu_set_compute(ctx, WEFT_DTYPE_BF16) != WEFT_OK)
                continue;
            const double tol = compute ? 1.5e-2 : 2e-6;
            for (int algo = WEFT_CONV_DEFAULT; algo < WEFT_CONV_ALGO_COUNT; algo++) {
                weft_kernels_cpu_set_conv_algo(ctx, (enum weft_conv_algo)algo);
                for (int pass = 0; pass < 3; pass++) { /* bias; no bias; bias + accumulate */
                    const float *bias = pass == 1 ? NULL : b;
                    int acc = pass == 2;
                    for (int64_t i = 0; i < n_out; i++)
                        y[i] = acc ? resid[i] : NAN; /* every output must be written */
                    conv_ref(x, w, bias, acc ? resid : NULL, ref, h, wd, cin, cout, k);
                    K->conv2d(ctx, x, packed, dt, bias, y, h, wd, cin, cout, k, acc, ws);
                    double err = max_rel(y, ref, n_out);
                    if (!(err <= tol)) {
                        fprintf(stderr, "conv2d %lldx%lld %lld->%lld k%lld %s weight, %s "
                                        "compute, %s, algo %d pass %d: error %.3g\n",
                                (long long)h, (long long)wd, (long long)cin, (long long)cout,
                                (long long)k, weft_dtype_name(dt), compute ? "bf16" : "f32",
                                plain ? "portable" : cpu_isa_name(have), algo, pass, err);
                        exit(1);
                    }
                }
            }
            weft_kernels_cpu_set_compute(ctx, WEFT_DTYPE_F32);
        }
    }
    ctx->isa = have;
    weft_kernels_cpu_set_conv_algo(ctx, WEFT_CONV_DEFAULT);
    free(x), free(w), free(wt), free(b), free(packed), free(resid), free(y), free(ref), free(ws);
}

static void test_conv2d(void)
{
    /* widths around the tile widths 16, 12, 8, 6; couts hitting 1..4 vectors and tails */
    static const int64_t cases[][5] = {
        {5, 7, 16, 64, 3},  {4, 13, 8, 3, 3},   {3, 17, 5, 20, 3},   {6, 12, 32, 40, 3},
        {2, 9, 130, 70, 3}, {1, 1, 4, 4, 3},    {7, 6, 3, 133, 3},   {8, 8, 64, 64, 3},
        {4, 11, 16, 32, 1}, {3, 5, 130, 3, 1},  {1, 25, 7, 65, 1},   {9, 3, 2, 17, 3},
    };
    static const enum weft_dtype dts[] = {WEFT_DTYPE_F32, WEFT_DTYPE_BF16, WEFT_DTYPE_F16};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        for (int d = 0; d < 3; d++)
            conv_case(cases[i][0], cases[i][1], cases[i][2], cases[i][3], cases[i][4], dts[d]);
}

static double silu_d(double v)
{
    return v / (1.0 + exp(-v));
}

static void groupnorm_case(int64_t n, int64_t c, int64_t groups, int silu, float offset)
{
    /* an offset far from zero makes a one-pass E[x^2] - E[x]^2 variance fail */
    float *x = rnd(n * c, 1, offset), *gamma = rnd(c, 1, 1), *beta = rnd(c, 1, 0);
    float *y = malloc((size_t)(n * c) * sizeof(float) + 4);
    double *ref = malloc((size_t)(n * c) * sizeof(double) + 8);
    CHECK(y && ref);
    const int64_t cg = c / groups;
    for (int64_t g = 0; g < groups; g++) {
        double s = 0, v = 0, cnt = (double)(n * cg);
        for (int64_t p = 0; p < n; p++)
            for (int64_t j = g * cg; j < (g + 1) * cg; j++)
                s += x[p * c + j];
        double mean = s / cnt;
        for (int64_t p = 0; p < n; p++)
            for (int64_t j = g * cg; j < (g + 1) * cg; j++)
                v += (x[p * c + j] - mean) * (x[p * c + j] - mean);
        double rstd = 1.0 / sqrt(v / cnt + 1e-6);
        for (int64_t p = 0; p < n; p++)
            for (int64_t j = g * cg; j < (g + 1) * cg; j++) {
                double o = (x[p * c + j] - mean) * rstd * gamma[j] + beta[j];
                ref[p * c + j] = silu ? silu_d(o) : o;
            }
    }
    K->groupnorm(ctx, x, y, gamma, beta, n, c, groups, 1e-6f, silu);
    double err = max_rel(y, ref, n * c);
    /* x - mean in f32: the mean's own rounding (|mean| 2^-24) is the floor with an offset */
    if (!(err <= 2e-6 * (1.0 + fabs(offset)))) {
        fprintf(stderr, "groupnorm n %lld c %lld groups %lld silu %d: error %.3g\n",
                (long long)n, (long long)c, (long long)groups, silu, err);
        exit(1);
    }
    K->groupnorm(ctx, x, x, gamma, beta, n, c, groups, 1e-6f, silu); /* in place */
    CHECK(memcmp(x, y, (size_t)(n * c) * sizeof(float)) == 0);
    free(x), free(gamma), free(beta), free(y), free(ref);
}

static void test_groupnorm(void)
{
    groupnorm_case(3, 32, 32, 0, 0.0f);
    groupnorm_case(37, 64, 32, 1, 0.5f);
    groupnorm_case(300, 96, 32, 0, 100.0f);
    groupnorm_case(4096, 32, 8, 1, -3.0f);
    groupnorm_case(5, 512, 1, 1, 0.0f);
}

static void test_upsample(void)
{
    const int64_t h = 5, w = 7, c = 3;
    float *x = rnd(h * w * c, 1, 0), *y = malloc((size_t)(4 * h * w * c) * sizeof(float));
    CHECK(y);
    K->upsample2x(ctx, x, y, h, w, c);
    for (int64_t oy = 0; oy < 2 * h; oy++)
        for (int64_t ox = 0; ox < 2 * w; ox++)
            for (int64_t j = 0; j < c; j++)
                CHECK(y[(oy * 2 * w + ox) * c + j] == x[((oy / 2) * w + ox / 2) * c + j]);
    free(x), free(y);
}

int main(void)
{
    for (int threads = 1; threads <= 3; threads++) {
        CHECK_OK(weft_kernels_cpu_create(threads, &K, &ctx));
        test_conv2d();
        test_groupnorm();
        test_upsample();
        weft_kernels_cpu_destroy(ctx);
    }
    return 0;
}
