/* Test data and naive references for the collectives: every rank can compute any rank's input
 * from (seed, rank, index), so the expected output is computed locally, element by element. */
#ifndef WEFT_TESTS_INTEGRATION_COLL_REF_H
#define WEFT_TESTS_INTEGRATION_COLL_REF_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/dtype.h"
#include "transport/comm.h"

static inline uint64_t ref_mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Input element key of rank r: a value in [-1, 1) with 24 random bits, so sums of a few terms
 * depend on their order and on where they are rounded. */
static inline float ref_value(uint32_t seed, int r, uint64_t key)
{
    uint64_t h = ref_mix(((uint64_t)seed << 48) ^ ((uint64_t)(unsigned)r << 40) ^ key);
    return (float)((h >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

/* The element as stored in dtype, read back as f32 (exact). */
static inline float ref_input(enum weft_dtype dt, uint32_t seed, int r, uint64_t key)
{
    float f = ref_value(seed, r, key);
    if (dt == WEFT_DTYPE_BF16)
        return weft_bf16_to_f32(weft_f32_to_bf16(f));
    if (dt == WEFT_DTYPE_F16)
        return weft_f16_to_f32(weft_f32_to_f16(f));
    return f;
}

static inline void ref_store(void *buf, size_t i, enum weft_dtype dt, float f)
{
    if (dt == WEFT_DTYPE_F32)
        ((float *)buf)[i] = f;
    else if (dt == WEFT_DTYPE_BF16)
        ((uint16_t *)buf)[i] = weft_f32_to_bf16(f);
    else
        ((uint16_t *)buf)[i] = weft_f32_to_f16(f);
}

static inline float ref_load(const void *buf, size_t i, enum weft_dtype dt)
{
    if (dt == WEFT_DTYPE_F32)
        return ((const float *)buf)[i];
    if (dt == WEFT_DTYPE_BF16)
        return weft_bf16_to_f32(((const uint16_t *)buf)[i]);
    return weft_f16_to_f32(((const uint16_t *)buf)[i]);
}

/* Fill n elements of rank r's input, keys key0 + i. */
static inline void ref_fill(void *buf, size_t n, enum weft_dtype dt, uint32_t seed, int r,
                            uint64_t key0)
{
    for (size_t i = 0; i < n; i++)
        ref_store(buf, i, dt, ref_value(seed, r, key0 + i));
}

/* The defined sum (comm.h): f32, terms in the order owner+1, ..., owner, rounded once. */
static inline float ref_sum(enum weft_dtype dt, uint32_t seed, int n, int owner, uint64_t key)
{
    float acc = ref_input(dt, seed, (owner + 1) % n, key);
    for (int k = 2; k <= n; k++)
        acc += ref_input(dt, seed, (owner + k) % n, key);
    return acc;
}

/* Compare n elements of got with the expected values (rounded to dt), bit for bit. Prints the
 * first difference. Returns 0 when equal. */
static inline int ref_check(const char *what, const void *got, size_t i, enum weft_dtype dt,
                            float want_f32)
{
    uint8_t want[4];
    ref_store(want, 0, dt, want_f32);
    size_t es = weft_dtype_size(dt);
    if (memcmp((const char *)got + i * es, want, es) == 0)
        return 0;
    fprintf(stderr, "%s: element %zu is %.9g, expected %.9g\n", what, i, ref_load(got, i, dt),
            ref_load(want, 0, dt));
    return 1;
}

#endif
