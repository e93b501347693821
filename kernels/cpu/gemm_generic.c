/* GEMM micro-kernels in plain C (see gemm.h): the fallback of any x86-64 or other CPU, and
 * the shapes the vector kernels follow. 4 x 8 tiles of f32. */
#include "kernels/cpu/gemm.h"

#include <string.h>

#define MR 4
#define NR 8

static inline float widen(const void *w, enum weft_dtype dtype, int64_t i)
{
    switch (dtype) {
    case WEFT_DTYPE_BF16: return weft_bf16_to_f32(((const uint16_t *)w)[i]);
    case WEFT_DTYPE_F16: return weft_f16_to_f32(((const uint16_t *)w)[i]);
    default: return ((const float *)w)[i];
    }
}

static void pack_a(const float *x, int64_t ldx, int rows, int64_t kc, void *out)
{
    float *o = out;
    for (int64_t k = 0; k < kc; k++)
        for (int i = 0; i < MR; i++)
            *o++ = i < rows ? x[i * ldx + k] : 0.0f;
}

static void pack_b(const void *w, enum weft_dtype dtype, int64_t ldw, int cols, int64_t kc,
                   void *out)
{
    float *o = out;
    for (int64_t k = 0; k < kc; k++)
        for (int j = 0; j < NR; j++)
            *o++ = j < cols ? widen(w, dtype, j * ldw + k) : 0.0f;
}

static void pack_bk(const void *w, enum weft_dtype dtype, int64_t ldw, int cols, int64_t kc,
                    void *out)
{
    float *o = out;
    for (int64_t k = 0; k < kc; k++)
        for (int j = 0; j < NR; j++)
            *o++ = j < cols ? widen(w, dtype, k * ldw + j) : 0.0f;
}

static void ukr(int64_t kc, const void *av, const void *bv, float *c, int64_t ldc, int mr,
                int nr, int mode, const float *bias)
{
    const float *a = av, *b = bv;
    float acc[MR][NR] = {{0}};
    for (int64_t k = 0; k < kc; k++, a += MR, b += NR)
        for (int i = 0; i < MR; i++)
            for (int j = 0; j < NR; j++)
                acc[i][j] += a[i] * b[j];
    for (int i = 0; i < mr; i++) {
        float *row = c + i * ldc;
        for (int j = 0; j < nr; j++) {
            float v = acc[i][j] + (bias ? bias[j] : 0.0f);
            row[j] = (mode & 1) ? row[j] + v : v;
        }
    }
}

/* Dot products over the weight rows as stored; each weight row read once for every x row. */
static void rowdot(const float *x, int64_t ldx, const void *w, enum weft_dtype dtype,
                   int64_t ldw, const float *b, float *y, int64_t ldy, int64_t rows, int64_t n,
                   int64_t k, int mode)
{
    for (int64_t j = 0; j < n; j++) {
        float acc[CPU_GEMM_ROWDOT_MAX] = {0};
        for (int64_t kk = 0; kk < k; kk++) {
            const float wv = widen(w, dtype, j * ldw + kk);
            for (int64_t i = 0; i < rows; i++)
                acc[i] += x[i * ldx + kk] * wv;
        }
        for (int64_t i = 0; i < rows; i++) {
            float v = acc[i] + (b ? b[j] : 0.0f);
            y[i * ldy + j] = (mode & 1) ? y[i * ldy + j] + v : v;
        }
    }
}

void cpu_gemm_generic(struct cpu_gemm_kernels *k)
{
    *k = (struct cpu_gemm_kernels){
        .isa = CPU_ISA_GENERIC, .bf16 = false, .mr = MR, .nr = NR, .kc = 256, .mc = 64,
        .elem = sizeof(float), .ukr = ukr, .pack_a = pack_a, .pack_b = pack_b,
        .pack_bk = pack_bk, .rowdot = rowdot,
    };
}
