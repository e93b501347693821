/* Element types and conversions between the floating formats weft computes in.
 *
 * bf16/f16 -> f32 is exact; f32 -> bf16/f16 rounds to nearest, ties to even, keeps NaN a NaN
 * (quiet) and Inf an Inf, and f32 -> f16 overflows to Inf as IEEE requires. */
#ifndef WEFT_COMMON_DTYPE_H
#define WEFT_COMMON_DTYPE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum weft_dtype {
    WEFT_DTYPE_F32,
    WEFT_DTYPE_BF16,
    WEFT_DTYPE_F16,
    WEFT_DTYPE_F64,
    WEFT_DTYPE_I64,
    WEFT_DTYPE_I32,
    WEFT_DTYPE_U8,
    WEFT_DTYPE_COUNT
};

size_t weft_dtype_size(enum weft_dtype dtype);
/* "f32", "bf16", ... */
const char *weft_dtype_name(enum weft_dtype dtype);
/* Accepts "f32"/"float32", "bf16"/"bfloat16", "f16"/"float16"; returns -1 when unknown. */
int weft_dtype_parse(const char *name);
static inline int weft_dtype_is_float(enum weft_dtype d)
{
    return d == WEFT_DTYPE_F32 || d == WEFT_DTYPE_BF16 || d == WEFT_DTYPE_F16 ||
           d == WEFT_DTYPE_F64;
}

static inline float weft_bf16_to_f32(uint16_t h)
{
    union { uint32_t u; float f; } v = {.u = (uint32_t)h << 16};
    return v.f;
}

static inline uint16_t weft_f32_to_bf16(float f)
{
    union { float f; uint32_t u; } v = {.f = f};
    if ((v.u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep sign, make it quiet */
        return (uint16_t)((v.u >> 16) | 0x0040u);
    uint32_t rounding = 0x7fffu + ((v.u >> 16) & 1u);
    return (uint16_t)((v.u + rounding) >> 16);
}

float weft_f16_to_f32(uint16_t h);
uint16_t weft_f32_to_f16(float f);

/* x rounded to dtype's precision (bf16, f16: round to nearest even; f32: x), as f32: what
 * a tensor of that dtype holds after torch's .to(dtype). */
static inline float weft_dtype_round(enum weft_dtype dtype, float x)
{
    if (dtype == WEFT_DTYPE_BF16)
        return weft_bf16_to_f32(weft_f32_to_bf16(x));
    if (dtype == WEFT_DTYPE_F16)
        return weft_f16_to_f32(weft_f32_to_f16(x));
    return x;
}
void weft_dtype_round_n(enum weft_dtype dtype, float *x, size_t n);

/* Convert n elements between any two of f32, bf16, f16 (same type: memcpy). src and dst either
 * do not overlap or are the same pointer (in-place, in a buffer sized for the larger type). */
void weft_dtype_convert(void *dst, enum weft_dtype dst_type, const void *src,
                        enum weft_dtype src_type, size_t n);

#ifdef __cplusplus
}
#endif

#endif
