/* The benchmarks' shared statistics (bench/stats.h): medians and quartiles against numpy's
 * default (linear) quantiles, missing samples, paired ratios and their verdicts, the printed and
 * JSON forms, and the common options (at least 5 rounds unless --quick). */
#include <math.h>
#include <string.h>

#include "bench/stats.h"
#include "test.h"

#define NEAR(a, b) (fabs((a) - (b)) < 1e-9)

static void series(struct weft_bench_series *s, const double *v, int n)
{
    memset(s, 0, sizeof(*s));
    for (int k = 0; k < n; k++)
        weft_bench_series_set(s, k, v[k]);
}

static void check_stats(void)
{
    struct weft_bench_series s;
    struct weft_bench_stats st;
    /* out of order on purpose: the series keeps round order, the statistics sort a copy */
    const double odd[] = {5, 1, 4, 2, 3};
    series(&s, odd, 5);
    CHECK_EQ(weft_bench_stats_of(&s, &st), 5);
    CHECK(NEAR(st.median, 3) && NEAR(st.min, 1) && NEAR(st.max, 5));
    CHECK(NEAR(st.q1, 2) && NEAR(st.q3, 4));
    CHECK(NEAR(s.v[0], 5)); /* not sorted in place */
    /* numpy.percentile([1..8], [25, 50, 75]) = 2.75, 4.5, 6.25 */
    const double eight[] = {8, 7, 6, 5, 4, 3, 2, 1};
    series(&s, eight, 8);
    weft_bench_stats_of(&s, &st);
    CHECK(NEAR(st.q1, 2.75) && NEAR(st.median, 4.5) && NEAR(st.q3, 6.25));
    /* a missing round (NaN) is left out; a gap before a later round is missing too */
    memset(&s, 0, sizeof(s));
    weft_bench_series_set(&s, 0, 10);
    weft_bench_series_set(&s, 3, 20);
    CHECK_EQ(s.n, 4);
    CHECK(isnan(s.v[1]) && isnan(s.v[2]));
    CHECK_EQ(weft_bench_stats_of(&s, &st), 2);
    CHECK(NEAR(st.median, 15));
    weft_bench_series_set(&s, WEFT_BENCH_MAX_ROUNDS, 1); /* out of range: ignored */
    CHECK_EQ(s.n, 4);
    memset(&s, 0, sizeof(s));
    CHECK_EQ(weft_bench_stats_of(&s, &st), 0);
    CHECK(isnan(st.median));
}

static void check_compare(void)
{
    struct weft_bench_series a, b;
    struct weft_bench_cmp c;
    /* disjoint ranges: a is twice b in every round */
    const double fast[] = {100, 101, 99, 102, 100}, slow[] = {200, 202, 198, 204, 200};
    series(&a, slow, 5);
    series(&b, fast, 5);
    weft_bench_compare(&a, &b, &c);
    CHECK_EQ(c.verdict, WEFT_BENCH_HIGHER);
    CHECK(NEAR(c.r.median, 2) && NEAR(c.r.min, 2) && NEAR(c.r.max, 2));
    CHECK(!strcmp(weft_bench_verdict_str(&c, "slower", "faster"), "slower"));
    weft_bench_compare(&b, &a, &c);
    CHECK_EQ(c.verdict, WEFT_BENCH_LOWER);
    CHECK(NEAR(c.r.median, 0.5));
    /* the ratio is of each round's pair, not of the medians: a drift shared by both sides
     * cancels (a = 1.1 b in every round while both double over the run) */
    const double bd[] = {100, 150, 200, 120, 180}, ad[] = {110, 165, 220, 132, 198};
    series(&a, ad, 5);
    series(&b, bd, 5);
    weft_bench_compare(&a, &b, &c);
    CHECK(NEAR(c.r.min, 1.1) && NEAR(c.r.max, 1.1));
    CHECK_EQ(c.verdict, WEFT_BENCH_SAME); /* but the ranges overlap: no winner declared */
    CHECK(!strcmp(weft_bench_verdict_str(&c, "x", "y"), "no difference"));
    /* overlapping ranges, ratios on both sides of 1 */
    const double p[] = {10, 12, 11, 13, 9}, q[] = {11, 11, 12, 12, 10};
    series(&a, p, 5);
    series(&b, q, 5);
    weft_bench_compare(&a, &b, &c);
    CHECK_EQ(c.verdict, WEFT_BENCH_SAME);
    /* fewer than 5 pairs: no verdict, whatever the figures; a missing round is no pair */
    series(&a, slow, 5);
    series(&b, fast, 5);
    b.v[2] = NAN;
    weft_bench_compare(&a, &b, &c);
    CHECK_EQ(c.r.n, 4);
    CHECK(isnan(c.ratio.v[2]));
    CHECK_EQ(c.verdict, WEFT_BENCH_FEW);
    CHECK(!strcmp(weft_bench_verdict_str(&c, "x", "y"), "too few rounds"));
}

static void check_format(void)
{
    struct weft_bench_series s;
    char buf[128];
    const double v[] = {439.31, 436.4, 445.3, 440.0, 438.0};
    series(&s, v, 5);
    CHECK(!strcmp(weft_bench_fmt(&s, 1, 1, buf, sizeof(buf)), "439.3 [436.4-445.3]"));
    CHECK(!strcmp(weft_bench_fmt(&s, 1e-3, 3, buf, sizeof(buf)), "0.439 [0.436-0.445]"));
    const double eight[] = {1, 2, 3, 4, 5, 6, 7, 8};
    series(&s, eight, 8);
    CHECK(!strcmp(weft_bench_fmt(&s, 1, 2, buf, sizeof(buf)),
                  "4.50 [1.00-8.00] IQR 2.75-6.25"));
    series(&s, v, 1);
    CHECK(!strcmp(weft_bench_fmt(&s, 1, 0, buf, sizeof(buf)), "439 (1 round)"));
    memset(&s, 0, sizeof(s));
    CHECK(!strcmp(weft_bench_fmt(&s, 1, 0, buf, sizeof(buf)), "-"));
    /* JSON: every statistic, the samples in round order, null for a missing one */
    series(&s, v, 5);
    s.v[1] = NAN;
    cJSON *j = weft_bench_json_fig(&s, 2.0);
    CHECK(NEAR(cJSON_GetObjectItem(j, "median")->valuedouble, 2 * 439.655));
    CHECK(NEAR(cJSON_GetObjectItem(j, "min")->valuedouble, 2 * 438.0));
    CHECK(cJSON_IsNumber(cJSON_GetObjectItem(j, "q1")));
    CHECK(cJSON_IsNumber(cJSON_GetObjectItem(j, "q3")));
    CHECK_EQ(cJSON_GetObjectItem(j, "n")->valueint, 4);
    cJSON *samples = cJSON_GetObjectItem(j, "samples");
    CHECK_EQ(cJSON_GetArraySize(samples), 5);
    CHECK(cJSON_IsNull(cJSON_GetArrayItem(samples, 1)));
    CHECK(NEAR(cJSON_GetArrayItem(samples, 0)->valuedouble, 2 * 439.31));
    cJSON_Delete(j);
}

static int parse(struct weft_bench *b, int argc, char **argv)
{
    weft_bench_init(b, "test");
    for (int i = 1; i < argc; i++)
        if (weft_bench_opt(b, argc, argv, &i) != 1)
            return -1;
    return weft_bench_begin(b);
}

static void check_options(void)
{
    struct weft_bench b;
    char *none[] = {"x"};
    CHECK_EQ(parse(&b, 1, none), 0);
    CHECK(b.rounds == 5 && b.warmup == 1 && !b.quick && !b.json);
    CHECK(b.date[0] && strstr(b.date, "UTC"));
    CHECK(b.load_before[0] >= 0); /* /proc/loadavg exists on Linux */
    char *three[] = {"x", "--rounds", "3"};
    CHECK_EQ(parse(&b, 3, three), -1); /* fewer than 5 only for tests */
    char *quick3[] = {"x", "--quick", "--rounds=3", "--json"};
    CHECK_EQ(parse(&b, 4, quick3), 0);
    CHECK(b.quick && b.json && b.rounds == 3);
    char *quick[] = {"x", "--quick", "--warmup", "0"};
    CHECK_EQ(parse(&b, 4, quick), 0);
    CHECK(b.rounds == WEFT_BENCH_QUICK_ROUNDS && b.warmup == 0);
    char *nine[] = {"x", "--rounds", "9"};
    CHECK_EQ(parse(&b, 3, nine), 0);
    CHECK_EQ(b.rounds, 9);
    char *bad[] = {"x", "--rounds", "five"};
    CHECK_EQ(parse(&b, 3, bad), -1);
    char *old[] = {"x", "--repeats", "3"};
    CHECK_EQ(parse(&b, 3, old), -1);
    char *other[] = {"x", "--np", "2"};
    int i = 1;
    weft_bench_init(&b, "test");
    CHECK_EQ(weft_bench_opt(&b, 3, other, &i), 0); /* not ours: left to the bench */
    CHECK_EQ(i, 1);
    weft_bench_end(&b);
    cJSON *j = weft_bench_json_context(&b);
    CHECK(!strcmp(cJSON_GetObjectItem(j, "bench")->valuestring, "test"));
    CHECK_EQ(cJSON_GetArraySize(cJSON_GetObjectItem(j, "load_after")), 3);
    cJSON_Delete(j);
}

/* Quantiles of unsorted samples (a latency list): numpy's linear rule, the input sorted. */
static void check_quantile(void)
{
    double x[] = {4, 1, 3, 2};
    CHECK(fabs(weft_bench_quantile(x, 4, 0.5) - 2.5) < 1e-12);
    CHECK(x[0] == 1 && x[3] == 4);
    CHECK(fabs(weft_bench_quantile(x, 4, 0.99) - 3.97) < 1e-12);
    CHECK(weft_bench_quantile(x, 4, 0) == 1 && weft_bench_quantile(x, 4, 1) == 4);
    double one[] = {7};
    CHECK(weft_bench_quantile(one, 1, 0.99) == 7);
    CHECK(isnan(weft_bench_quantile(one, 0, 0.5)));
}

int main(void)
{
    check_quantile();
    check_stats();
    check_compare();
    check_format();
    check_options();
    return 0;
}
