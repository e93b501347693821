/* Sum kernels of the reducing collectives: f32 accumulation, one rounding at the end.
 *
 * The loops are kept free of aliasing (restrict, or one pointer when a result overwrites its
 * own input) so the compiler vectorises them: they run between two messages of a pipelined
 * ring, on data the receive has just brought into cache. */
#include <string.h>

#include "common/dtype.h"
#include "transport/internal.h"

#define TILE 512

static inline float ld16(uint16_t h, enum weft_dtype dtype)
{
    return dtype == WEFT_DTYPE_BF16 ? weft_bf16_to_f32(h) : weft_f16_to_f32(h);
}

static inline uint16_t st16(float f, enum weft_dtype dtype)
{
    return dtype == WEFT_DTYPE_BF16 ? weft_f32_to_bf16(f) : weft_f32_to_f16(f);
}

static void add_f32(float *restrict acc, const float *restrict x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        acc[i] += x[i];
}

static void add_bf16(float *restrict acc, const uint16_t *restrict x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        acc[i] += weft_bf16_to_f32(x[i]);
}

static void add_f16(float *restrict acc, const uint16_t *restrict x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        acc[i] += weft_f16_to_f32(x[i]);
}

void weft_tp_sum_acc(float *acc, const void *x, size_t n, enum weft_dtype dtype)
{
    if (dtype == WEFT_DTYPE_F32)
        add_f32(acc, x, n);
    else if (dtype == WEFT_DTYPE_BF16)
        add_bf16(acc, x, n);
    else
        add_f16(acc, x, n);
}

void weft_tp_sum_load(float *acc, const void *x, size_t n, enum weft_dtype dtype)
{
    if (dtype == WEFT_DTYPE_F32) {
        memcpy(acc, x, n * sizeof(float));
        return;
    }
    const uint16_t *h = x;
    for (size_t i = 0; i < n; i++)
        acc[i] = ld16(h[i], dtype);
}

void weft_tp_sum_store(void *out, const float *acc, size_t n, enum weft_dtype dtype)
{
    if (dtype == WEFT_DTYPE_F32) {
        if (out != acc)
            memcpy(out, acc, n * sizeof(float));
        return;
    }
    uint16_t *h = out;
    for (size_t i = 0; i < n; i++)
        h[i] = st16(acc[i], dtype);
}

/* The raw 16-bit values sit in the upper half of the f32 slot (see coll_ring.c), so the slot
 * fills from the front while the raw values ahead of each tile are still unread. */
void weft_tp_sum_first(void *acc, const void *x, size_t n, enum weft_dtype dtype)
{
    float *a = acc;
    if (dtype == WEFT_DTYPE_F32) {
        add_f32(a, x, n);
        return;
    }
    const uint16_t *raw = (const uint16_t *)((const char *)acc + n * 2);
    const uint16_t *h = x;
    uint16_t tmp[TILE];
    for (size_t k = 0; k < n; k += TILE) {
        size_t m = n - k < TILE ? n - k : TILE;
        memcpy(tmp, raw + k, m * 2);
        for (size_t i = 0; i < m; i++)
            a[k + i] = ld16(tmp[i], dtype) + ld16(h[k + i], dtype);
    }
}

static void final_f32(float *restrict out, const float *restrict acc, const float *restrict x,
                      size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = acc[i] + x[i];
}

static void final_f32_inplace(float *restrict xo, const float *restrict acc, size_t n)
{
    for (size_t i = 0; i < n; i++)
        xo[i] = acc[i] + xo[i];
}

static void final_16(uint16_t *restrict out, const float *restrict acc,
                     const uint16_t *restrict x, size_t n, enum weft_dtype dtype)
{
    if (dtype == WEFT_DTYPE_BF16) {
        for (size_t i = 0; i < n; i++)
            out[i] = weft_f32_to_bf16(acc[i] + weft_bf16_to_f32(x[i]));
    } else {
        for (size_t i = 0; i < n; i++)
            out[i] = weft_f32_to_f16(acc[i] + weft_f16_to_f32(x[i]));
    }
}

static void final_16_inplace(uint16_t *restrict xo, const float *restrict acc, size_t n,
                             enum weft_dtype dtype)
{
    if (dtype == WEFT_DTYPE_BF16) {
        for (size_t i = 0; i < n; i++)
            xo[i] = weft_f32_to_bf16(acc[i] + weft_bf16_to_f32(xo[i]));
    } else {
        for (size_t i = 0; i < n; i++)
            xo[i] = weft_f32_to_f16(acc[i] + weft_f16_to_f32(xo[i]));
    }
}

void weft_tp_sum_final(void *out, const void *acc, bool raw, const void *x, size_t n,
                       enum weft_dtype dtype)
{
    if (dtype == WEFT_DTYPE_F32) {
        if (out == x)
            final_f32_inplace(out, acc, n);
        else
            final_f32(out, acc, x, n);
        return;
    }
    if (!raw) {
        if (out == x)
            final_16_inplace(out, acc, n, dtype);
        else
            final_16(out, acc, x, n, dtype);
        return;
    }
    /* both operands still 16-bit: widen a tile of the first into f32, then as above */
    float tmp[TILE];
    const uint16_t *r = acc;
    for (size_t k = 0; k < n; k += TILE) {
        size_t m = n - k < TILE ? n - k : TILE;
        for (size_t i = 0; i < m; i++)
            tmp[i] = ld16(r[k + i], dtype);
        if (out == x)
            final_16_inplace((uint16_t *)out + k, tmp, m, dtype);
        else
            final_16((uint16_t *)out + k, tmp, (const uint16_t *)x + k, m, dtype);
    }
}
