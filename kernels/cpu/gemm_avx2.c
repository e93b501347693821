/* GEMM micro-kernels for AVX2 + FMA (see gemm.h): 6 x 16 tiles, 12 ymm accumulators, for the
 * x86-64 CPUs without AVX-512. w widened to f32 while packed (F16C for f16). Compiled for
 * those ISAs by target attributes, called only when cpu_isa_detect() found them. */
#include "kernels/cpu/gemm.h"

#include <immintrin.h>

#define MR 6
#define NR 16

#define TAVX2 __attribute__((target("avx2,fma,f16c")))

static inline float widen1(const void *w, enum weft_dtype dtype, int64_t i)
{
    switch (dtype) {
    case WEFT_DTYPE_BF16: return weft_bf16_to_f32(((const uint16_t *)w)[i]);
    case WEFT_DTYPE_F16: return weft_f16_to_f32(((const uint16_t *)w)[i]);
    default: return ((const float *)w)[i];
    }
}

/* 8 consecutive values of a weight row as f32 (all 8 exist). */
TAVX2 static inline __m256 load8(const void *w, enum weft_dtype dtype, int64_t i)
{
    switch (dtype) {
    case WEFT_DTYPE_BF16: {
        __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)w + i));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    case WEFT_DTYPE_F16:
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)w + i)));
    default:
        return _mm256_loadu_ps((const float *)w + i);
    }
}

static void pack_a(const float *x, int64_t ldx, int rows, int64_t kc, void *out)
{
    float *o = out;
    for (int64_t k = 0; k < kc; k++, o += MR)
        for (int i = 0; i < MR; i++)
            o[i] = i < rows ? x[i * ldx + k] : 0.0f;
}

static void pack_b(const void *w, enum weft_dtype dtype, int64_t ldw, int cols, int64_t kc,
                   void *out)
{
    float *o = out;
    for (int64_t k = 0; k < kc; k++, o += NR)
        for (int j = 0; j < NR; j++)
            o[j] = j < cols ? widen1(w, dtype, j * ldw + k) : 0.0f;
}

static void pack_bk(const void *w, enum weft_dtype dtype, int64_t ldw, int cols, int64_t kc,
                    void *out)
{
    float *o = out;
    for (int64_t k = 0; k < kc; k++, o += NR)
        for (int j = 0; j < NR; j++)
            o[j] = j < cols ? widen1(w, dtype, k * ldw + j) : 0.0f;
}

/* The 12 accumulators are named variables, not an array: GCC keeps an array of them in
 * registers but also stores every one to the stack on each k (12 stores per 12 FMAs, half the
 * FMA rate on a CPU with one 256-bit store a cycle). */
#define ACC_ROW(i) __m256 c##i##0 = _mm256_setzero_ps(), c##i##1 = _mm256_setzero_ps()
#define FMA_ROW(i)                                                                            \
    do {                                                                                      \
        const __m256 ai = _mm256_broadcast_ss(a + (i));                                       \
        c##i##0 = _mm256_fmadd_ps(ai, b0, c##i##0);                                           \
        c##i##1 = _mm256_fmadd_ps(ai, b1, c##i##1);                                           \
    } while (0)
#define STORE_ROW(i)                                                                          \
    do {                                                                                      \
        _mm256_store_ps(tile[i], c##i##0);                                                    \
        _mm256_store_ps(tile[i] + 8, c##i##1);                                                \
    } while (0)

TAVX2 static void ukr(int64_t kc, const void *av, const void *bv, float *c, int64_t ldc, int mr,
                      int nr, int mode, const float *bias)
{
    const float *a = av, *b = bv;
    ACC_ROW(0);
    ACC_ROW(1);
    ACC_ROW(2);
    ACC_ROW(3);
    ACC_ROW(4);
    ACC_ROW(5);
    for (int64_t k = 0; k < kc; k++, a += MR, b += NR) {
        const __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
        FMA_ROW(0);
        FMA_ROW(1);
        FMA_ROW(2);
        FMA_ROW(3);
        FMA_ROW(4);
        FMA_ROW(5);
    }
    float tile[MR][NR] __attribute__((aligned(32)));
    STORE_ROW(0);
    STORE_ROW(1);
    STORE_ROW(2);
    STORE_ROW(3);
    STORE_ROW(4);
    STORE_ROW(5);
    for (int i = 0; i < mr; i++) {
        float *row = c + i * ldc;
        for (int j = 0; j < nr; j++) {
            float v = tile[i][j] + (bias ? bias[j] : 0.0f);
            row[j] = (mode & 1) ? row[j] + v : v;
        }
    }
}
#undef ACC_ROW
#undef FMA_ROW
#undef STORE_ROW

TAVX2 static void rowdot(const float *x, int64_t ldx, const void *w, enum weft_dtype dtype,
                         int64_t ldw, const float *b, float *y, int64_t ldy, int64_t rows,
                         int64_t n, int64_t k, int mode)
{
    for (int64_t j = 0; j < n; j++) {
        __m256 acc[CPU_GEMM_ROWDOT_MAX];
        for (int64_t i = 0; i < rows; i++)
            acc[i] = _mm256_setzero_ps();
        int64_t kk = 0;
        for (; kk + 8 <= k; kk += 8) {
            const __m256 wv = load8(w, dtype, j * ldw + kk);
            for (int64_t i = 0; i < rows; i++)
                acc[i] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i * ldx + kk), wv, acc[i]);
        }
        for (int64_t i = 0; i < rows; i++) {
            float lanes[8] __attribute__((aligned(32)));
            _mm256_store_ps(lanes, acc[i]);
            float v = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
                      ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
            for (int64_t t = kk; t < k; t++)
                v += x[i * ldx + t] * widen1(w, dtype, j * ldw + t);
            v += b ? b[j] : 0.0f;
            y[i * ldy + j] = (mode & 1) ? y[i * ldy + j] + v : v;
        }
    }
}

void cpu_gemm_avx2(struct cpu_gemm_kernels *k)
{
    *k = (struct cpu_gemm_kernels){
        .isa = CPU_ISA_AVX2, .bf16 = false, .mr = MR, .nr = NR, .kc = 256, .mc = 72,
        .elem = sizeof(float), .ukr = ukr, .pack_a = pack_a, .pack_b = pack_b,
        .pack_bk = pack_bk, .rowdot = rowdot,
    };
}
