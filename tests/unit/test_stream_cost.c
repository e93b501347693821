/* auto's stream estimate prices a job from what the last completed jobs cost, taken apart
 * (coordinator/cluster/internal.h weft_cr_cost_predict): their steps per FLOP, their decodes
 * per pixel and their fixed costs, each the median of the records. A large job after small
 * ones pays the small jobs' fixed cost once, not in proportion to its size. */
#include <math.h>

#include "coordinator/cluster/internal.h"
#include "test.h"

static bool near(double got, double want)
{
    printf("  %.6g (want %.6g)\n", got, want);
    return fabs(got - want) <= 1e-9 * fabs(want);
}

int main(void)
{
    test_quiet();
    struct weft_cr_cost c[WEFT_CR_COSTS + 4];
    /* none completed: nothing to say */
    CHECK(weft_cr_cost_predict(c, 0, 1e9, 1e4, 2, 1) == 0);

    /* five small jobs: 0.3 device-seconds each beyond their steps and decodes, a step 1e-9
     * device-seconds per FLOP, a decode 1e-6 per pixel */
    for (int i = 0; i < 5; i++)
        c[i] = (struct weft_cr_cost){.per_flop = 1e-9 * (1 + 0.01 * i),
                                     .per_pixel = 1e-6 * (1 - 0.01 * i), .fixed = 0.3 + 0.01 * i};
    /* medians: 1.02e-9, 0.98e-6, 0.32 */
    const double small_flops = 2e8, small_px = 128.0 * 128.0;
    const double small = 0.32 + 2 * small_flops * 1.02e-9 + small_px * 0.98e-6;
    CHECK(near(weft_cr_cost_predict(c, 5, small_flops, small_px, 2, 1), small));
    /* a 768 x 768 job of 2 steps whose step the planner counts 100 times the small one's: its
     * steps and decode scale, its fixed cost does not (one unit of "work" at the small jobs'
     * all-in rate would make it 0.75 / 0.74 x 100 = about 100x the small job instead) */
    const double large_flops = 100 * small_flops, large_px = 768.0 * 768.0;
    const double large = 0.32 + 2 * large_flops * 1.02e-9 + large_px * 0.98e-6;
    CHECK(near(weft_cr_cost_predict(c, 5, large_flops, large_px, 2, 1), large));
    CHECK(large < 100 * small);
    /* more images repeat the steps and decodes, not the fixed cost */
    CHECK(near(weft_cr_cost_predict(c, 5, large_flops, large_px, 2, 3) - large,
               2 * (large - 0.32)));
    /* a job that stalled (50 s beyond its work) among them moves no median */
    c[5] = (struct weft_cr_cost){.per_flop = 1e-7, .per_pixel = 1e-4, .fixed = 50};
    c[6] = (struct weft_cr_cost){.per_flop = 1e-9, .per_pixel = 1e-6, .fixed = 0.3};
    /* seven: medians 1.02e-9 (of 1, 1, 1.01, 1.02, 1.03, 1.04, 100), 0.99e-6 (of 0.96, 0.97,
     * 0.98, 0.99, 1, 1, 100), 0.32 (of 0.3, 0.3, 0.31, 0.32, 0.33, 0.34, 50) */
    CHECK(near(weft_cr_cost_predict(c, 7, large_flops, large_px, 2, 1),
               0.32 + 2 * large_flops * 1.02e-9 + large_px * 0.99e-6));
    /* an even count: the mean of the middle two (of 0.3, 0.3, 0.31, 0.32, 0.33 and the
     * stall's 50: 0.31 and 0.32) */
    c[4] = c[6];
    CHECK(near(weft_cr_cost_predict(c, 6, 0, 0, 2, 1), 0.315));
    /* the ring holds WEFT_CR_COSTS: records past it are not read */
    for (int i = 0; i < WEFT_CR_COSTS + 4; i++)
        c[i] = (struct weft_cr_cost){.per_flop = 0, .per_pixel = 0,
                                     .fixed = i < WEFT_CR_COSTS ? 1.0 : 1000.0};
    CHECK(near(weft_cr_cost_predict(c, WEFT_CR_COSTS + 4, 1e9, 1e4, 2, 1), 1.0));
    return 0;
}
