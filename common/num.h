/* Conversions of parsed numbers (JSON, INI) to integers that are defined for every input:
 * a double outside the target type converts with undefined behaviour in C, so the range is
 * checked first. */
#ifndef WEFT_COMMON_NUM_H
#define WEFT_COMMON_NUM_H

#include <stdbool.h>
#include <stdint.h>

/* True, with *out = d, when d is an integer in [min, max] and in ±2^53 (every integer there is
 * exact in a double); false for fractions, NaN and anything outside. */
static inline bool weft_double_int(double d, int64_t min, int64_t max, int64_t *out)
{
    if (!(d >= -9007199254740992.0 && d <= 9007199254740992.0) || d != (double)(int64_t)d)
        return false;
    const int64_t x = (int64_t)d;
    if (x < min || x > max)
        return false;
    *out = x;
    return true;
}

/* d as an integer in [min, max], or def when it is none (see weft_double_int). */
static inline int64_t weft_double_int_or(double d, int64_t min, int64_t max, int64_t def)
{
    int64_t x;
    return weft_double_int(d, min, max, &x) ? x : def;
}

#endif
