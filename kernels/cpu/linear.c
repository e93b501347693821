/* Linear layer y = x . w^T + b through the CPU GEMM (gemm.c): w as the checkpoint stores it,
 * or packed once at load time into the GEMM's weight panels (bf16 weights on the AVX-512
 * kernels), which the GEMM then reads in place instead of packing them on every call. At 77
 * rows (a CLIP prompt) that packing was a quarter of a bf16 forward. */
#include <assert.h>

#include "kernels/cpu/cpu.h"

void cpu_linear(struct weft_kctx *ctx, const float *x, int64_t ldx, const void *w,
                enum weft_dtype w_dtype, const float *b, float *y, int64_t ldy, int64_t m,
                int64_t n, int64_t k, int accumulate)
{
    cpu_gemm(ctx, x, ldx, w, w_dtype, b, y, ldy, m, n, k, accumulate);
}

size_t cpu_linear_pack_bytes(struct weft_kctx *ctx, enum weft_dtype w_dtype, int64_t n,
                             int64_t k)
{
    return cpu_gemm_wpack_bytes(ctx, w_dtype, n, k);
}

void cpu_linear_pack(struct weft_kctx *ctx, const void *w, enum weft_dtype w_dtype, void *packed,
                     int64_t n, int64_t k)
{
    assert(cpu_gemm_wpack_bytes(ctx, w_dtype, n, k) > 0);
    (void)w_dtype;
    cpu_gemm_wpack(ctx, w, n, k, packed);
}

void cpu_linear_packed(struct weft_kctx *ctx, const float *x, int64_t ldx, const void *packed,
                       const float *b, float *y, int64_t ldy, int64_t m, int64_t n, int64_t k,
                       int accumulate)
{
    assert(((uintptr_t)packed & 63) == 0);
    cpu_gemm_packed(ctx, x, ldx, packed, b, y, ldy, m, n, k, accumulate);
}
