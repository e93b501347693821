/* GroupNorm on NHWC pixels [n, c] (groups of c / groups consecutive channels), with an optional
 * fused SiLU: the VAE's norm -> activation pairs in one pass over the output.
 *
 * Statistics are two-pass (mean, then the mean of squared deviations, as torch's biased
 * variance) with per-channel partial sums in double, one array per thread in the thread's
 * scratch, reduced by the caller: a group of a 1024x1024 image has tens of millions of values,
 * too many for a float accumulator. The normalization is y = (x - mean_g) * a_c + beta_c with
 * a_c = gamma_c / sqrt(var_g + eps); torch folds the mean into the shift (x * a_c + b_c), which
 * loses digits to cancellation when |mean| is large against the spread. */
#include "kernels/cpu/cpu.h"

#define GN_MAX_C 8192 /* channels: partials [c] doubles, then 2 x [groups] doubles of stats */

_Static_assert(3 * GN_MAX_C * 2 <= CPU_SCRATCH_FLOATS, "groupnorm scratch");

struct gn_arg {
    const float *x;
    float *y;
    int64_t c, cg;
    float *const *scratch;
    const double *gmean; /* [groups], for the variance pass */
    const float *mean, *scale, *beta; /* [c], for the normalization pass */
    int silu;
};

static void sum_rows(void *varg, int64_t b, int64_t e, int thread)
{
    const struct gn_arg *a = varg;
    double *part = (double *)a->scratch[thread];
    const int64_t c = a->c;
    for (int64_t p = b; p < e; p++) {
        const float *row = a->x + p * c;
        for (int64_t j = 0; j < c; j++)
            part[j] += (double)row[j];
    }
}

static void sq_rows(void *varg, int64_t b, int64_t e, int thread)
{
    const struct gn_arg *a = varg;
    double *part = (double *)a->scratch[thread];
    const int64_t c = a->c, cg = a->cg, groups = c / cg;
    for (int64_t p = b; p < e; p++) {
        const float *row = a->x + p * c;
        for (int64_t g = 0; g < groups; g++) {
            const double m = a->gmean[g];
            for (int64_t j = g * cg; j < (g + 1) * cg; j++) {
                const double d = (double)row[j] - m;
                part[j] += d * d;
            }
        }
    }
}

static void norm_rows(void *varg, int64_t b, int64_t e, int thread)
{
    (void)thread;
    const struct gn_arg *a = varg;
    /* locals, not a->...: with -fno-strict-aliasing a store to out[j] could change a->mean,
     * which would keep the loops scalar */
    const float *mean = a->mean, *scale = a->scale, *beta = a->beta;
    const int64_t c = a->c;
    for (int64_t p = b; p < e; p++) {
        const float *row = a->x + p * c;
        float *out = a->y + p * c;
        if (!a->silu) {
            for (int64_t j = 0; j < c; j++)
                out[j] = (row[j] - mean[j]) * scale[j] + beta[j];
            continue;
        }
        for (int64_t j = 0; j < c; j++) {
            const float v = (row[j] - mean[j]) * scale[j] + beta[j];
            const float ex = cpu_expf(-fabsf(v)); /* as cpu_silu */
            out[j] = v * (v >= 0.0f ? 1.0f / (1.0f + ex) : ex / (1.0f + ex));
        }
    }
}

/* Per-thread partials -> per-group totals (in the caller's stats array). */
static void reduce(struct weft_kctx *ctx, int64_t c, int64_t cg, double *stats)
{
    const int64_t groups = c / cg;
    for (int64_t g = 0; g < groups; g++)
        stats[g] = 0.0;
    for (int t = 0; t < ctx->threads; t++) {
        double *part = (double *)ctx->scratch[t];
        for (int64_t j = 0; j < c; j++) {
            stats[j / cg] += part[j];
            part[j] = 0.0;
        }
    }
}

void cpu_groupnorm(struct weft_kctx *ctx, const float *x, float *y, const float *gamma,
                   const float *beta, int64_t n, int64_t c, int64_t groups, float eps, int silu)
{
    if (n <= 0 || c <= 0 || groups <= 0 || c % groups || c > GN_MAX_C)
        return;
    const int64_t cg = c / groups, grain = 1 + 16384 / c;
    /* thread 0's scratch: partials [0, c) doubles, then the group statistics */
    double *stats = (double *)ctx->scratch[0] + GN_MAX_C;
    for (int t = 0; t < ctx->threads; t++)
        memset(ctx->scratch[t], 0, (size_t)c * sizeof(double));
    struct gn_arg a = {.x = x, .y = y, .c = c, .cg = cg, .scratch = ctx->scratch, .silu = silu};
    const double count = (double)n * (double)cg;

    cpu_parallel(ctx, n, grain, sum_rows, &a);
    reduce(ctx, c, cg, stats);
    for (int64_t g = 0; g < groups; g++)
        stats[g] /= count;
    a.gmean = stats;
    cpu_parallel(ctx, n, grain, sq_rows, &a);
    /* variances next to the means: stats[groups + g] */
    reduce(ctx, c, cg, stats + groups);
    /* per-channel mean and scale where the partials were (they are zero again) */
    float *mean = ctx->scratch[0], *scale = ctx->scratch[0] + c;
    for (int64_t j = 0; j < c; j++) {
        const int64_t g = j / cg;
        const double rstd = 1.0 / sqrt(stats[groups + g] / count + (double)eps);
        mean[j] = (float)stats[g];
        scale[j] = (float)((double)gamma[j] * rstd);
    }
    a.mean = mean;
    a.scale = scale;
    a.beta = beta;
    cpu_parallel(ctx, n, grain, norm_rows, &a);
}
