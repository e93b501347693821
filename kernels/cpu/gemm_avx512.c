/* GEMM micro-kernels for AVX-512 (see gemm.h): 12 x 32 tiles, 24 zmm accumulators, the B panel
 * (two zmm per k step) loaded once per step and each A element broadcast from memory.
 *
 *   f32 compute (avx512f, avx512bw): w widened to f32 while packed (bf16: a shift; f16: the
 *                vcvtph2ps of F16C/AVX-512F)
 *   bf16 compute (+ avx512_bf16): x and w rounded to bf16 pairs while packed, vdpbf16ps
 *                accumulates each pair's two products into f32
 *
 * Compiled for those ISAs by target attributes whatever the build's -march, and only called
 * when cpu_isa_detect() found them. */
#include "kernels/cpu/gemm.h"

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define MR 12
#define NR 32

#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,f16c,fma")))
#define T512BF __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,f16c,fma")))

static inline float widen1(const void *w, enum weft_dtype dtype, int64_t i)
{
    switch (dtype) {
    case WEFT_DTYPE_BF16: return weft_bf16_to_f32(((const uint16_t *)w)[i]);
    case WEFT_DTYPE_F16: return weft_f16_to_f32(((const uint16_t *)w)[i]);
    default: return ((const float *)w)[i];
    }
}

/* 16 consecutive values of a weight row as f32 (mask: which are real). */
T512 static inline __m512 load16(const void *w, enum weft_dtype dtype, int64_t i, __mmask16 m)
{
    switch (dtype) {
    case WEFT_DTYPE_BF16: {
        __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)w + i);
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    case WEFT_DTYPE_F16:
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)w + i));
    default:
        return _mm512_maskz_loadu_ps(m, (const float *)w + i);
    }
}

static inline __mmask16 tail_mask(int64_t left)
{
    return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u);
}

/* r[i] = column i of the 16 x 16 matrix of 32-bit words whose rows are r[0..15]. */
T512 static inline void transpose16(__m512i r[16])
{
    __m512i t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    for (int h = 0; h < 16; h += 8)
        for (int i = 0; i < 4; i++) {
            t[h + i] = _mm512_shuffle_i32x4(r[h + i], r[h + i + 4], 0x88);
            t[h + i + 4] = _mm512_shuffle_i32x4(r[h + i], r[h + i + 4], 0xdd);
        }
    for (int i = 0; i < 8; i++) {
        r[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xdd);
    }
}

/* ---------------------------------------------------------------------------------------- */
/* f32 compute                                                                               */

T512 static void pack_a(const float *x, int64_t ldx, int rows, int64_t kc, void *out)
{
    float *o = out;
    for (int64_t k = 0; k < kc; k++) {
        for (int i = 0; i < rows; i++)
            o[i] = x[i * ldx + k];
        for (int i = rows; i < MR; i++)
            o[i] = 0.0f;
        o += MR;
    }
}

/* 16 k steps of 16 columns at a time: each column's 16 values loaded (widened) as a row, then
 * the 16 x 16 block transposed in registers. */
T512 static void pack_b(const void *w, enum weft_dtype dtype, int64_t ldw, int cols, int64_t kc,
                        void *out)
{
    float *o = out;
    int64_t k = 0;
    for (; k + 16 <= kc; k += 16) {
        for (int half = 0; half < 2; half++) {
            __m512i blk[16];
            for (int j = 0; j < 16; j++) {
                const int col = half * 16 + j;
                blk[j] = _mm512_castps_si512(col < cols ? load16(w, dtype, col * ldw + k, 0xffff)
                                                        : _mm512_setzero_ps());
            }
            transpose16(blk);
            for (int kk = 0; kk < 16; kk++)
                _mm512_storeu_si512(o + (ptrdiff_t)kk * NR + (ptrdiff_t)half * 16, blk[kk]);
        }
        o += (ptrdiff_t)16 * NR;
    }
    for (; k < kc; k++, o += NR)
        for (int j = 0; j < NR; j++)
            o[j] = j < cols ? widen1(w, dtype, j * ldw + k) : 0.0f;
}

/* k rows of a [k][n] weight: each step's NR values are contiguous. */
T512 static void pack_bk(const void *w, enum weft_dtype dtype, int64_t ldw, int cols, int64_t kc,
                         void *out)
{
    float *o = out;
    const __mmask16 m0 = tail_mask(cols), m1 = cols > 16 ? tail_mask(cols - 16) : 0;
    for (int64_t k = 0; k < kc; k++, o += NR) {
        _mm512_store_ps(o, load16(w, dtype, k * ldw, m0));
        _mm512_store_ps(o + 16, m1 ? load16(w, dtype, k * ldw + 16, m1) : _mm512_setzero_ps());
    }
}

/* The tile's two column masks for nr real columns. */
static inline void col_masks(int nr, __mmask16 *m0, __mmask16 *m1)
{
    *m0 = tail_mask(nr);
    *m1 = nr > 16 ? tail_mask(nr - 16) : 0;
}

T512 static inline void store_tile(__m512 acc[MR][2], float *c, int64_t ldc, int mr, int nr,
                                   int mode, const float *bias)
{
    __mmask16 m0, m1;
    col_masks(nr, &m0, &m1);
    const __m512 b0 = bias ? _mm512_maskz_loadu_ps(m0, bias) : _mm512_setzero_ps();
    const __m512 b1 = bias && m1 ? _mm512_maskz_loadu_ps(m1, bias + 16) : _mm512_setzero_ps();
    for (int i = 0; i < mr; i++) {
        float *row = c + i * ldc;
        __m512 v0 = _mm512_add_ps(acc[i][0], b0), v1 = _mm512_add_ps(acc[i][1], b1);
        if (mode & 1) {
            v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, row));
            v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, row + 16));
        }
        _mm512_mask_storeu_ps(row, m0, v0);
        _mm512_mask_storeu_ps(row + 16, m1, v1);
    }
}

T512 static void ukr(int64_t kc, const void *av, const void *bv, float *c, int64_t ldc, int mr,
                     int nr, int mode, const float *bias)
{
    const float *a = av, *b = bv;
    __m512 acc[MR][2];
    for (int i = 0; i < MR; i++) {
        acc[i][0] = acc[i][1] = _mm512_setzero_ps();
        /* the tile of c is read or written at the end: its lines come while we compute */
        _mm_prefetch((const char *)(c + i * ldc), _MM_HINT_T0);
        _mm_prefetch((const char *)(c + i * ldc + 16), _MM_HINT_T0);
    }
#pragma GCC unroll 4
    for (int64_t k = 0; k < kc; k++, a += MR, b += NR) {
        const __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);
        for (int i = 0; i < MR; i++) {
            const __m512 ai = _mm512_set1_ps(a[i]);
            acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
        }
    }
    store_tile(acc, c, ldc, mr, nr, mode, bias);
}

/* The f32 micro-kernel on a B panel of bf16 pairs (a packed weight's, see gemm.h): per pair
 * two zmm of 16 columns x (k, k + 1), widened exactly by a shift and a mask, then the two k
 * steps in turn, so each accumulator sees the same products in the same order as ukr on the
 * panel pack_b widens. kc steps; an odd kc ends on a pair's first half. */
T512 static void ukr_wpairs(int64_t kc, const void *av, const void *bv, float *c, int64_t ldc,
                            int mr, int nr, int mode, const float *bias)
{
    const float *a = av;
    const __m512i *b = bv;
    const __m512i hi = _mm512_set1_epi32((int)0xffff0000u);
    __m512 acc[MR][2];
    for (int i = 0; i < MR; i++) {
        acc[i][0] = acc[i][1] = _mm512_setzero_ps();
        _mm_prefetch((const char *)(c + i * ldc), _MM_HINT_T0);
        _mm_prefetch((const char *)(c + i * ldc + 16), _MM_HINT_T0);
    }
    int64_t k = 0;
#pragma GCC unroll 2
    for (; k + 2 <= kc; k += 2, a += (ptrdiff_t)2 * MR, b += 2) {
        const __m512i p0 = _mm512_load_si512(b), p1 = _mm512_load_si512(b + 1);
        const __m512 b00 = _mm512_castsi512_ps(_mm512_slli_epi32(p0, 16));
        const __m512 b01 = _mm512_castsi512_ps(_mm512_slli_epi32(p1, 16));
        const __m512 b10 = _mm512_castsi512_ps(_mm512_and_si512(p0, hi));
        const __m512 b11 = _mm512_castsi512_ps(_mm512_and_si512(p1, hi));
        for (int i = 0; i < MR; i++) {
            const __m512 ai = _mm512_set1_ps(a[i]);
            acc[i][0] = _mm512_fmadd_ps(ai, b00, acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(ai, b01, acc[i][1]);
        }
        for (int i = 0; i < MR; i++) {
            const __m512 ai = _mm512_set1_ps(a[MR + i]);
            acc[i][0] = _mm512_fmadd_ps(ai, b10, acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(ai, b11, acc[i][1]);
        }
    }
    if (k < kc) {
        const __m512 b00 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_load_si512(b), 16));
        const __m512 b01 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_load_si512(b + 1), 16));
        for (int i = 0; i < MR; i++) {
            const __m512 ai = _mm512_set1_ps(a[i]);
            acc[i][0] = _mm512_fmadd_ps(ai, b00, acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(ai, b01, acc[i][1]);
        }
    }
    store_tile(acc, c, ldc, mr, nr, mode, bias);
}

/* Few rows: each weight row read once, 16 values at a time, against every x row. */
T512 static void rowdot(const float *x, int64_t ldx, const void *w, enum weft_dtype dtype,
                        int64_t ldw, const float *b, float *y, int64_t ldy, int64_t rows,
                        int64_t n, int64_t k, int mode)
{
    for (int64_t j = 0; j < n; j++) {
        __m512 acc[CPU_GEMM_ROWDOT_MAX];
        for (int64_t i = 0; i < rows; i++)
            acc[i] = _mm512_setzero_ps();
        for (int64_t kk = 0; kk < k; kk += 16) {
            const __mmask16 m = tail_mask(k - kk);
            const __m512 wv = load16(w, dtype, j * ldw + kk, m);
            for (int64_t i = 0; i < rows; i++)
                acc[i] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + i * ldx + kk), wv, acc[i]);
        }
        for (int64_t i = 0; i < rows; i++) {
            float v = _mm512_reduce_add_ps(acc[i]) + (b ? b[j] : 0.0f);
            y[i * ldy + j] = (mode & 1) ? y[i * ldy + j] + v : v;
        }
    }
}


/* ---------------------------------------------------------------------------------------- */
/* bf16 compute: pairs of consecutive k values, rounded to bf16                              */

static inline uint32_t pair_of(float lo, float hi)
{
    return (uint32_t)weft_f32_to_bf16(lo) | (uint32_t)weft_f32_to_bf16(hi) << 16;
}

/* 16 f32 to bf16 in the low half of each 32-bit lane, rounded as weft_f32_to_bf16 rounds
 * (nearest even; NaN kept quiet with its sign; denormals kept, unlike vcvtne2ps2bf16). */
T512BF static inline __m512i bf16_of16(__m512 v)
{
    const __m512i u = _mm512_castps_si512(v);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                  _mm512_set1_epi32(0x7f800000));
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(u, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff))), 16);
    const __m512i q = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    return _mm512_mask_blend_epi32(nan, r, q);
}

/* x's panel: per k pair the MR rows' words (bf16 of x[k], x[k + 1]); 16 pairs of a row at a
 * time, converted in registers and scattered to their places, the rest one by one. */
T512BF static void pack_a_bf16(const float *x, int64_t ldx, int rows, int64_t kc, void *out)
{
    uint32_t *o = out;
    int64_t k0 = 0;
    const __m512i at = _mm512_mullo_epi32(
        _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
        _mm512_set1_epi32(MR));
    for (; k0 + 32 <= kc; k0 += 32, o += (ptrdiff_t)16 * MR) {
        for (int i = 0; i < MR; i++) {
            __m512i v = _mm512_setzero_si512();
            if (i < rows) {
                const float *r = x + i * ldx + k0;
                const __m256i lo = _mm512_cvtepi32_epi16(bf16_of16(_mm512_loadu_ps(r)));
                const __m256i hi = _mm512_cvtepi32_epi16(bf16_of16(_mm512_loadu_ps(r + 16)));
                v = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
            }
            _mm512_i32scatter_epi32(o + i, at, v, 4);
        }
    }
    for (int64_t k = k0; k < kc; k += 2) {
        for (int i = 0; i < MR; i++) {
            if (i >= rows) {
                o[i] = 0;
                continue;
            }
            const float *r = x + i * ldx + k;
            o[i] = pair_of(r[0], k + 1 < kc ? r[1] : 0.0f);
        }
        o += MR;
    }
}

static inline uint16_t to_bf16(const void *w, enum weft_dtype dtype, int64_t i)
{
    return dtype == WEFT_DTYPE_BF16 ? ((const uint16_t *)w)[i]
                                    : weft_f32_to_bf16(widen1(w, dtype, i));
}

static void pack_bk_bf16(const void *w, enum weft_dtype dtype, int64_t ldw, int cols,
                         int64_t kc, void *out)
{
    uint16_t *o = out;
    for (int64_t k = 0; k < kc; k += 2, o += (ptrdiff_t)2 * NR) {
        for (int64_t j = 0; j < NR; j++) {
            o[2 * j] = j < cols ? to_bf16(w, dtype, k * ldw + j) : 0;
            o[2 * j + 1] = j < cols && k + 1 < kc ? to_bf16(w, dtype, (k + 1) * ldw + j) : 0;
        }
    }
}

/* The panel of a bf16 weight in its checkpoint layout [n, k]: each k pair of the packed panel
 * is the 32-bit word at that pair in each of the NR rows. A full panel goes 16 pairs at a time
 * as two 16 x 16 word transposes of contiguous row loads, the remaining pairs by gathers (the
 * element-wise loop below took 44 % of a 77-token CLIP-L forward, more than the products).
 * Plain AVX-512 (no bf16 arithmetic): it also packs weights once for the f32 kernels. */
T512 static void pack_b_pairs(const uint16_t *w, int64_t ldw, int cols, int64_t kc, void *out)
{
    uint16_t *o = out;
    int64_t k = 0;
    if (cols == NR && ldw <= INT32_MAX / NR) {
        for (; k + 32 <= kc; k += 32, o += (ptrdiff_t)32 * NR) {
            for (int half = 0; half < 2; half++) {
                __m512i r[16];
                for (int j = 0; j < 16; j++)
                    r[j] = _mm512_loadu_si512(w + (ptrdiff_t)(half * 16 + j) * ldw + k);
                transpose16(r);
                for (int p = 0; p < 16; p++)
                    _mm512_storeu_si512(o + (ptrdiff_t)p * 2 * NR + (ptrdiff_t)half * NR, r[p]);
            }
        }
        const __m512i lo = _mm512_mullo_epi32(
            _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
            _mm512_set1_epi32((int)ldw));
        const __m512i hi = _mm512_add_epi32(lo, _mm512_set1_epi32((int)(16 * ldw)));
        for (; k + 1 < kc; k += 2, o += (ptrdiff_t)2 * NR) {
            _mm512_storeu_si512(o, _mm512_i32gather_epi32(lo, w + k, 2));
            _mm512_storeu_si512(o + NR, _mm512_i32gather_epi32(hi, w + k, 2));
        }
    }
    for (; k < kc; k += 2, o += (ptrdiff_t)2 * NR) {
        for (int64_t j = 0; j < NR; j++) {
            const int64_t at = j * ldw + k;
            o[2 * j] = j < cols ? w[at] : 0;
            o[2 * j + 1] = j < cols && k + 1 < kc ? w[at + 1] : 0;
        }
    }
}

T512BF static void pack_b_bf16(const void *w, enum weft_dtype dtype, int64_t ldw, int cols,
                               int64_t kc, void *out)
{
    if (dtype == WEFT_DTYPE_BF16) {
        pack_b_pairs(w, ldw, cols, kc, out);
        return;
    }
    uint16_t *o = out;
    for (int64_t k = 0; k < kc; k += 2, o += (ptrdiff_t)2 * NR) {
        for (int64_t j = 0; j < NR; j++) {
            const int64_t at = j * ldw + k;
            o[2 * j] = j < cols ? to_bf16(w, dtype, at) : 0;
            o[2 * j + 1] = j < cols && k + 1 < kc ? to_bf16(w, dtype, at + 1) : 0;
        }
    }
}

/* A whole bf16 weight [n, k] as panels of NR columns, each the full k in pairs (gemm.h). */
T512 static void pack_wpairs(const uint16_t *w, int64_t n, int64_t k, int64_t p0, int64_t p1,
                             void *out)
{
    const size_t panel = (size_t)((k + 1) / 2) * 2 * NR * sizeof(uint16_t);
    for (int64_t p = p0; p < p1; p++) {
        const int cols = (int)(n - p * NR < NR ? n - p * NR : NR);
        pack_b_pairs(w + p * NR * k, k, cols, k, (char *)out + (size_t)p * panel);
    }
}

/* kp pairs of R rows (a constant where it is inlined): per pair the B panel is two zmm of 16
 * columns x 2 values, each A row one 32-bit broadcast of its two values. */
T512BF static inline __attribute__((always_inline)) void
ukr_bf16_rows(const int R, int64_t kp, const int32_t *a, const __m512i *b, float *c,
              int64_t ldc, int nr, int mode, const float *bias)
{
    __m512 acc[MR][2];
    for (int i = 0; i < R; i++) {
        acc[i][0] = acc[i][1] = _mm512_setzero_ps();
        _mm_prefetch((const char *)(c + i * ldc), _MM_HINT_T0);
        _mm_prefetch((const char *)(c + i * ldc + 16), _MM_HINT_T0);
    }
#pragma GCC unroll 4
    for (int64_t k = 0; k < kp; k++, a += MR, b += 2) {
        const __m512bh b0 = (__m512bh)_mm512_load_si512(b);
        const __m512bh b1 = (__m512bh)_mm512_load_si512(b + 1);
        for (int i = 0; i < R; i++) {
            const __m512bh ai = (__m512bh)_mm512_set1_epi32(a[i]);
            acc[i][0] = _mm512_dpbf16_ps(acc[i][0], ai, b0);
            acc[i][1] = _mm512_dpbf16_ps(acc[i][1], ai, b1);
        }
    }
    store_tile(acc, c, ldc, R, nr, mode, bias);
}

/* A tile of mr rows computes mr rows, not MR: a 77-row product's last tile has 5 (each element
 * gets the same products in the same order whatever the tile's height). */
T512BF static void ukr_bf16(int64_t kp, const void *av, const void *bv, float *c, int64_t ldc,
                            int mr, int nr, int mode, const float *bias)
{
    const int32_t *a = av;
    const __m512i *b = bv;
    switch (mr) {
#define ROWS(r)                                                                                   \
    case r: ukr_bf16_rows(r, kp, a, b, c, ldc, nr, mode, bias); break;
        ROWS(1) ROWS(2) ROWS(3) ROWS(4) ROWS(5) ROWS(6) ROWS(7) ROWS(8) ROWS(9) ROWS(10) ROWS(11)
#undef ROWS
    default: ukr_bf16_rows(MR, kp, a, b, c, ldc, nr, mode, bias); break;
    }
}

void cpu_gemm_avx512(struct cpu_gemm_kernels *k)
{
    *k = (struct cpu_gemm_kernels){
        .isa = CPU_ISA_AVX512, .bf16 = false, .mr = MR, .nr = NR, .kc = 256, .mc = 96,
        .elem = sizeof(float), .ukr = ukr, .pack_a = pack_a, .pack_b = pack_b,
        .pack_bk = pack_bk, .rowdot = rowdot, .ukr_wpairs = ukr_wpairs,
        .pack_wpairs = pack_wpairs,
    };
}

void cpu_gemm_avx512_bf16(struct cpu_gemm_kernels *k)
{
    *k = (struct cpu_gemm_kernels){
        .isa = CPU_ISA_AVX512_BF16, .bf16 = true, .mr = MR, .nr = NR, .kc = 512, .mc = 96,
        .elem = sizeof(uint16_t), .ukr = ukr_bf16, .pack_a = pack_a_bf16,
        .pack_b = pack_b_bf16, .pack_bk = pack_bk_bf16, .rowdot = rowdot,
        .pack_wpairs = pack_wpairs, /* its ukr reads the pairs as they are */
    };
}
