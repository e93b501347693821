/* Element type table and f16 conversion (bf16 is inline in the header). */
#include "common/dtype.h"

#include <string.h>

static const struct {
    const char *name;
    const char *alias;
    size_t size;
} dtype_info[WEFT_DTYPE_COUNT] = {
    [WEFT_DTYPE_F32] = {"f32", "float32", 4},  [WEFT_DTYPE_BF16] = {"bf16", "bfloat16", 2},
    [WEFT_DTYPE_F16] = {"f16", "float16", 2},  [WEFT_DTYPE_F64] = {"f64", "float64", 8},
    [WEFT_DTYPE_I64] = {"i64", "int64", 8},    [WEFT_DTYPE_I32] = {"i32", "int32", 4},
    [WEFT_DTYPE_U8] = {"u8", "uint8", 1},
};

size_t weft_dtype_size(enum weft_dtype dtype)
{
    return (unsigned)dtype < WEFT_DTYPE_COUNT ? dtype_info[dtype].size : 0;
}

const char *weft_dtype_name(enum weft_dtype dtype)
{
    return (unsigned)dtype < WEFT_DTYPE_COUNT ? dtype_info[dtype].name : "?";
}

int weft_dtype_parse(const char *name)
{
    for (int i = 0; i < WEFT_DTYPE_COUNT; i++)
        if (strcmp(name, dtype_info[i].name) == 0 || strcmp(name, dtype_info[i].alias) == 0)
            return i;
    return -1;
}

float weft_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13); /* Inf or NaN (payload kept) */
    } else if (exp != 0) {
        bits = sign | ((exp + 112u) << 23) | (man << 13);
    } else if (man == 0) {
        bits = sign;
    } else { /* subnormal: renormalise */
        int e = -1;
        do {
            e++;
            man <<= 1;
        } while ((man & 0x400u) == 0);
        bits = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ffu) << 13);
    }
    union { uint32_t u; float f; } v = {.u = bits};
    return v.f;
}

uint16_t weft_f32_to_f16(float f)
{
    union { float f; uint32_t u; } v = {.f = f};
    uint32_t u = v.u;
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t absu = u & 0x7fffffffu;
    if (absu > 0x7f800000u) /* NaN */
        return (uint16_t)(sign | 0x7e00u | ((absu >> 13) & 0x3ffu));
    if (absu >= 0x477ff000u) /* rounds to >= 65520: Inf */
        return (uint16_t)(sign | 0x7c00u);
    if (absu < 0x38800000u) { /* below the smallest normal f16: subnormal or zero */
        if (absu < 0x33000000u) /* < 2^-25 rounds to zero */
            return sign;
        uint32_t exp = absu >> 23;
        uint32_t man = (absu & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - exp; /* value = res * 2^-24; shift is in [14, 24] */
        uint32_t half = 1u << (shift - 1);
        uint32_t rest = man & ((1u << shift) - 1);
        uint32_t res = man >> shift;
        if (rest > half || (rest == half && (res & 1u)))
            res++;
        return (uint16_t)(sign | res);
    }
    uint32_t res = absu - 0x38000000u; /* rebias exponent 127 -> 15 */
    uint32_t rest = res & 0x1fffu;
    res >>= 13;
    if (rest > 0x1000u || (rest == 0x1000u && (res & 1u)))
        res++;
    return (uint16_t)(sign | res);
}

void weft_dtype_convert(void *dst, enum weft_dtype dst_type, const void *src,
                        enum weft_dtype src_type, size_t n)
{
    if (dst_type == src_type) {
        if (dst != src)
            memcpy(dst, src, n * weft_dtype_size(dst_type));
        return;
    }
    float *df = dst;
    const float *sf = src;
    uint16_t *dh = dst;
    const uint16_t *sh = src;
    if (src_type == WEFT_DTYPE_F32 && dst_type == WEFT_DTYPE_BF16) {
        for (size_t i = 0; i < n; i++)
            dh[i] = weft_f32_to_bf16(sf[i]);
    } else if (src_type == WEFT_DTYPE_F32 && dst_type == WEFT_DTYPE_F16) {
        for (size_t i = 0; i < n; i++)
            dh[i] = weft_f32_to_f16(sf[i]);
    } else if (src_type == WEFT_DTYPE_BF16 && dst_type == WEFT_DTYPE_F32) {
        for (size_t i = n; i-- > 0;) /* backwards: dst may extend src in place */
            df[i] = weft_bf16_to_f32(sh[i]);
    } else if (src_type == WEFT_DTYPE_F16 && dst_type == WEFT_DTYPE_F32) {
        for (size_t i = n; i-- > 0;)
            df[i] = weft_f16_to_f32(sh[i]);
    } else if (src_type == WEFT_DTYPE_BF16 && dst_type == WEFT_DTYPE_F16) {
        for (size_t i = 0; i < n; i++)
            dh[i] = weft_f32_to_f16(weft_bf16_to_f32(sh[i]));
    } else if (src_type == WEFT_DTYPE_F16 && dst_type == WEFT_DTYPE_BF16) {
        for (size_t i = 0; i < n; i++)
            dh[i] = weft_f32_to_bf16(weft_f16_to_f32(sh[i]));
    }
}

void weft_dtype_round_n(enum weft_dtype dtype, float *x, size_t n)
{
    if (dtype == WEFT_DTYPE_F32)
        return;
    for (size_t i = 0; i < n; i++)
        x[i] = weft_dtype_round(dtype, x[i]);
}
