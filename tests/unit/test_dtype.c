/* dtype conversions: exhaustive round trips, NaN/Inf, round-to-nearest-even against references
 * (exact double arithmetic for bf16, a search over every f16 value for f16); and the checked
 * double-to-integer conversion of parsed numbers (common/num.h). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "common/dtype.h"
#include "common/num.h"
#include "test.h"

static uint32_t f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void)
{
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

/* Nearest bf16 by exact comparison in double; ties to even; overflow to Inf. */
static uint16_t bf16_ref(float f)
{
    uint32_t u = f2u(f);
    uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);
    double x = fabs((double)f);
    double vlo = fabs((double)u2f((uint32_t)lo << 16));
    double vhi = (hi & 0x7fff) == 0x7f80 ? ldexp(1.0, 128) : fabs((double)u2f((uint32_t)hi << 16));
    double dlo = x - vlo, dhi = vhi - x;
    if (dlo < dhi)
        return lo;
    if (dhi < dlo)
        return hi;
    return (lo & 1) ? hi : lo;
}

static void test_bf16(void)
{
    for (uint32_t h = 0; h < 65536; h++) {
        float f = weft_bf16_to_f32((uint16_t)h);
        uint16_t back = weft_f32_to_bf16(f);
        if (isnan(f))
            CHECK(isnan(weft_bf16_to_f32(back)));
        else
            CHECK_EQ(back, h);
    }
    for (int i = 0; i < 2000000; i++) {
        float f = u2f(rnd() ^ (rnd() << 16));
        if (isnan(f) || isinf(f))
            continue;
        uint16_t got = weft_f32_to_bf16(f), want = bf16_ref(f);
        if (got != want) {
            fprintf(stderr, "bf16(%a): got %04x want %04x\n", (double)f, got, want);
            CHECK(0);
        }
    }
    /* ties: 1 + 2^-8 is halfway between 1 and 1+2^-7 -> even (1); 1 + 3*2^-8 -> up */
    CHECK_EQ(weft_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);
    CHECK_EQ(weft_f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);
    CHECK_EQ(weft_f32_to_bf16(INFINITY), 0x7f80);
    CHECK_EQ(weft_f32_to_bf16(-INFINITY), 0xff80);
    CHECK_EQ(weft_f32_to_bf16(3.4e38f), 0x7f80); /* rounds past the largest bf16 */
    CHECK(isnan(weft_bf16_to_f32(weft_f32_to_bf16(NAN))));
    CHECK(isnan(weft_bf16_to_f32(weft_f32_to_bf16(u2f(0x7f800001u))))); /* low-payload NaN */
    CHECK_EQ(weft_f32_to_bf16(-0.0f), 0x8000);
}

/* Nearest f16 by search over every finite f16 value (exact in double); ties to even; values at
 * or past 65520 (halfway to 2^16) overflow to Inf. Independent of any compiler's _Float16. */
static double f16_val[0x7c00];

static uint16_t f16_ref(float f)
{
    double x = fabs((double)f);
    uint16_t sign = signbit(f) ? 0x8000 : 0;
    if (x >= 65520.0)
        return sign | 0x7c00;
    int lo = 0, hi = 0x7bff; /* largest h with f16_val[h] <= x */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (f16_val[mid] <= x)
            lo = mid;
        else
            hi = mid - 1;
    }
    if (lo == 0x7bff)
        return sign | 0x7bff;
    double dlo = x - f16_val[lo], dhi = f16_val[lo + 1] - x;
    int h = dlo < dhi ? lo : dhi < dlo ? lo + 1 : (lo & 1 ? lo + 1 : lo);
    return (uint16_t)(sign | h);
}

static void test_f16(void)
{
    for (int h = 0; h < 0x7c00; h++) { /* the format's definition, by hand */
        int e = h >> 10, mnt = h & 0x3ff;
        f16_val[h] = e ? ldexp(1.0 + mnt / 1024.0, e - 15) : ldexp(mnt / 1024.0, -14);
    }
    for (uint32_t h = 0; h < 65536; h++) {
        float f = weft_f16_to_f32((uint16_t)h);
        int e = (h >> 10) & 0x1f;
        if (e == 0x1f) {
            CHECK((h & 0x3ff) ? isnan(f) : isinf(f));
            if (isnan(f))
                CHECK(isnan(weft_f16_to_f32(weft_f32_to_f16(f))));
            else
                CHECK_EQ(weft_f32_to_f16(f), h);
            continue;
        }
        double want = (h & 0x8000) ? -f16_val[h & 0x7fff] : f16_val[h & 0x7fff];
        CHECK((double)f == want);
        CHECK_EQ(weft_f32_to_f16(f), h);
    }
    for (int i = 0; i < 2000000; i++) {
        /* bias towards the f16 range, subnormals and overflow edge included */
        uint32_t u = rnd() ^ (rnd() << 16);
        if (i & 1)
            u = (u & 0x807fffffu) | ((uint32_t)(100 + (rnd() % 50)) << 23);
        float f = u2f(u);
        if (isnan(f))
            continue;
        uint16_t got = weft_f32_to_f16(f), want = f16_ref(f);
        if (got != want) {
            fprintf(stderr, "f16(%a): got %04x want %04x\n", (double)f, got, want);
            CHECK(0);
        }
    }
    CHECK_EQ(weft_f32_to_f16(65504.0f), 0x7bff);
    CHECK_EQ(weft_f32_to_f16(65520.0f), 0x7c00); /* halfway to 2^16 rounds to Inf */
    CHECK_EQ(weft_f32_to_f16(0x1p-25f), 0x0000); /* tie with zero -> even (zero) */
    CHECK_EQ(weft_f32_to_f16(0x1.8p-25f), 0x0001);
    CHECK_EQ(weft_f32_to_f16(-INFINITY), 0xfc00);
}

static void test_convert(void)
{
    float src[7] = {1.0f, -2.5f, 3.14159f, 0.0f, -0.0f, 65504.0f, 1e-3f};
    uint16_t bf[7], hf[7];
    float back[7];
    weft_dtype_convert(bf, WEFT_DTYPE_BF16, src, WEFT_DTYPE_F32, 7);
    weft_dtype_convert(hf, WEFT_DTYPE_F16, src, WEFT_DTYPE_F32, 7);
    for (int i = 0; i < 7; i++) {
        CHECK_EQ(bf[i], weft_f32_to_bf16(src[i]));
        CHECK_EQ(hf[i], weft_f32_to_f16(src[i]));
    }
    /* in place, widening: bf16 values at the start of an f32-sized buffer */
    float buf[7];
    memcpy(buf, bf, sizeof(bf));
    weft_dtype_convert(buf, WEFT_DTYPE_F32, buf, WEFT_DTYPE_BF16, 7);
    for (int i = 0; i < 7; i++)
        CHECK(buf[i] == weft_bf16_to_f32(bf[i]));
    weft_dtype_convert(back, WEFT_DTYPE_F32, hf, WEFT_DTYPE_F16, 7);
    for (int i = 0; i < 7; i++)
        CHECK(back[i] == weft_f16_to_f32(hf[i]));
    CHECK_EQ(weft_dtype_parse("bfloat16"), WEFT_DTYPE_BF16);
    CHECK_EQ(weft_dtype_parse("f16"), WEFT_DTYPE_F16);
    CHECK_EQ(weft_dtype_parse("f8"), -1);
}

/* Integers in range convert; fractions, NaN, infinities and values past the range or past 2^53
 * (where a double no longer holds every integer) are refused before any conversion. */
static void test_double_int(void)
{
    int64_t x = -7;
    CHECK(weft_double_int(0.0, 0, 10, &x) && x == 0);
    CHECK(weft_double_int(-3.0, -5, 10, &x) && x == -3);
    CHECK(weft_double_int(9007199254740992.0, 0, INT64_MAX, &x) && x == 9007199254740992);
    x = 42;
    const double bad[] = {0.5, -0.25, 11.0, -6.0, 3.3e124, -1e300, 18446744073709551616.0,
                          9007199254740994.0, NAN, INFINITY, -INFINITY};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        CHECK(!weft_double_int(bad[i], -5, 10, &x) && x == 42);
    CHECK(!weft_double_int(9223372036854775808.0, 0, INT64_MAX, &x));
    CHECK_EQ(weft_double_int_or(3.3e124, 0, INT32_MAX, -1), -1);
    CHECK_EQ(weft_double_int_or(77.0, 0, INT32_MAX, -1), 77);
}

int main(void)
{
    test_bf16();
    test_f16();
    test_convert();
    test_double_int();
    return 0;
}
