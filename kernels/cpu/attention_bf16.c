/* Attention's bf16 path (see cpu.h, cpu_attn_block_bf16): the f32 path's flash-style blocks
 * (attention.c) with both products taken by vdpbf16ps, which multiplies pairs of bf16 and adds
 * both products to an f32 lane.
 *
 *   scores  st[j][i] = sum_c K[j][c] Q'[i][c]: the lanes are queries. Q' (scaled) is packed
 *           once per block as qt2[c/2][i] = (Q'[i][c], Q'[i][c+1]); a key's pair of features is
 *           a dword of its bf16 row, broadcast.
 *   values  acc[i][c] += sum_j P[i][j] V[j][c]: the lanes are features. V is packed per key
 *           tile as v2[j/2][c] = (V[j][c], V[j+1][c]), P as p2[j/2][i] = (P[j][i], P[j+1][i]).
 *
 * Packing a key tile costs BK x d conversions against BQ x BK x d products (1/64). The online
 * softmax, the rescaling and the final division stay in f32 (cpu_softmax_tile).
 *
 * Compiled for AVX512-BF16 by target attributes whatever the build's -march; attention.c calls
 * it only when the CPU has it and the compute dtype is bf16. */
#include "kernels/cpu/cpu.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define BQ CPU_ATTN_BQ
#define BK CPU_ATTN_BK
#define D_MAX CPU_ATTN_D_MAX
#define TBF __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,fma")))

static inline uint32_t pair(float lo, float hi)
{
    return (uint32_t)weft_f32_to_bf16(lo) | (uint32_t)weft_f32_to_bf16(hi) << 16;
}

static inline float pair_dot(uint32_t a, uint32_t b)
{
    return weft_bf16_to_f32((uint16_t)a) * weft_bf16_to_f32((uint16_t)b) +
           weft_bf16_to_f32((uint16_t)(a >> 16)) * weft_bf16_to_f32((uint16_t)(b >> 16));
}

/* st[j][i] for keys [j0, nk) one lane at a time (the tail of the 4-key tiles). */
static void scores_tail(const uint32_t *kb, const uint32_t *qt2, float *st, int64_t j0,
                        int64_t nk, int64_t d2)
{
    for (int64_t j = j0; j < nk; j++)
        for (int i = 0; i < BQ; i++) {
            float s = 0.0f;
            for (int64_t c = 0; c < d2; c++)
                s += pair_dot(kb[j * d2 + c], qt2[c * BQ + i]);
            st[j * BQ + i] = s;
        }
}

TBF static void scores(const uint32_t *kb, const uint32_t *qt2, float *st, int64_t nk,
                       int64_t d2)
{
    const int64_t nk4 = nk / 4 * 4;
    for (int64_t j = 0; j < nk4; j += 4) {
        __m512 a[4][4];
        for (int r = 0; r < 4; r++)
            for (int t = 0; t < 4; t++)
                a[r][t] = _mm512_setzero_ps();
        const uint32_t *k0 = kb + j * d2;
        for (int64_t c = 0; c < d2; c++) {
            const uint32_t *qrow = qt2 + c * BQ;
            const __m512bh q0 = (__m512bh)_mm512_loadu_si512(qrow);
            const __m512bh q1 = (__m512bh)_mm512_loadu_si512(qrow + 16);
            const __m512bh q2 = (__m512bh)_mm512_loadu_si512(qrow + 32);
            const __m512bh q3 = (__m512bh)_mm512_loadu_si512(qrow + 48);
            for (int r = 0; r < 4; r++) {
                const __m512bh kp = (__m512bh)_mm512_set1_epi32((int)k0[r * d2 + c]);
                a[r][0] = _mm512_dpbf16_ps(a[r][0], kp, q0);
                a[r][1] = _mm512_dpbf16_ps(a[r][1], kp, q1);
                a[r][2] = _mm512_dpbf16_ps(a[r][2], kp, q2);
                a[r][3] = _mm512_dpbf16_ps(a[r][3], kp, q3);
            }
        }
        for (int r = 0; r < 4; r++)
            for (int t = 0; t < 4; t++)
                _mm512_storeu_ps(st + (j + r) * BQ + (int64_t)16 * t, a[r][t]);
    }
    if (nk4 < nk)
        scores_tail(kb, qt2, st, nk4, nk, d2);
}

/* acc rows [i0, nq) x features [c0, d) one lane at a time (the tails). */
static void pv_tail(const uint32_t *p2, const uint32_t *v2, float *acc, int64_t i0, int64_t nq,
                    int64_t c0, int64_t d, int64_t nk2)
{
    for (int64_t i = i0; i < nq; i++)
        for (int64_t c = c0; c < d; c++) {
            float s = 0.0f;
            for (int64_t j = 0; j < nk2; j++)
                s += pair_dot(p2[j * BQ + i], v2[j * d + c]);
            acc[i * D_MAX + c] += s;
        }
}

TBF static void pv(const uint32_t *p2, const uint32_t *v2, float *acc, int64_t nq, int64_t nk2,
                   int64_t d)
{
    const int64_t nq4 = nq / 4 * 4, d64 = d / 64 * 64;
    for (int64_t i = 0; i < nq4; i += 4) {
        for (int64_t c = 0; c < d64; c += 64) {
            __m512 a[4][4];
            for (int r = 0; r < 4; r++)
                for (int t = 0; t < 4; t++)
                    a[r][t] = _mm512_loadu_ps(acc + (i + r) * D_MAX + c + (int64_t)16 * t);
            for (int64_t j = 0; j < nk2; j++) {
                const uint32_t *vrow = v2 + j * d + c;
                const __m512bh v0 = (__m512bh)_mm512_loadu_si512(vrow);
                const __m512bh v1 = (__m512bh)_mm512_loadu_si512(vrow + 16);
                const __m512bh vv2 = (__m512bh)_mm512_loadu_si512(vrow + 32);
                const __m512bh v3 = (__m512bh)_mm512_loadu_si512(vrow + 48);
                for (int r = 0; r < 4; r++) {
                    const __m512bh pp = (__m512bh)_mm512_set1_epi32((int)p2[j * BQ + i + r]);
                    a[r][0] = _mm512_dpbf16_ps(a[r][0], pp, v0);
                    a[r][1] = _mm512_dpbf16_ps(a[r][1], pp, v1);
                    a[r][2] = _mm512_dpbf16_ps(a[r][2], pp, vv2);
                    a[r][3] = _mm512_dpbf16_ps(a[r][3], pp, v3);
                }
            }
            for (int r = 0; r < 4; r++)
                for (int t = 0; t < 4; t++)
                    _mm512_storeu_ps(acc + (i + r) * D_MAX + c + (int64_t)16 * t, a[r][t]);
        }
        if (d64 < d)
            pv_tail(p2, v2, acc, i, i + 4, d64, d, nk2);
    }
    if (nq4 < nq)
        pv_tail(p2, v2, acc, nq4, nq, 0, d, nk2);
}

/* dst[c] = (bf16 a[c], bf16 b[c]) for c < n; b NULL: zeros (an odd tail). */
TBF static void pairs(const float *a, const float *b, uint32_t *dst, int64_t n)
{
    int64_t c = 0;
    for (; c + 16 <= n; c += 16) {
        const __m512i lo = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(a + c)));
        const __m512i hi = b ? _mm512_cvtepu16_epi32(
                                   (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(b + c)))
                             : _mm512_setzero_si512();
        _mm512_storeu_si512(dst + c, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
    }
    for (; c < n; c++)
        dst[c] = pair(a[c], b ? b[c] : 0.0f);
}

/* A row's n values (n even) as n/2 pairs of neighbours: its bf16, in order. */
TBF static void row_bf16(const float *a, uint32_t *dst, int64_t n)
{
    int64_t c = 0;
    for (; c + 32 <= n; c += 32)
        _mm512_storeu_si512(dst + c / 2, (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(a + c + 16),
                                                                        _mm512_loadu_ps(a + c)));
    for (; c < n; c += 2)
        dst[c / 2] = pair(a[c], a[c + 1]);
}

TBF void cpu_attn_block_bf16(const struct cpu_attn_arg *a, int64_t h, int64_t i0, float *scratch)
{
    float *st = scratch + (int64_t)D_MAX * BQ, *acc = st + (int64_t)BK * BQ;
    uint32_t *qt2 = (uint32_t *)scratch; /* [d/2][BQ], within the f32 path's QT */
    uint32_t *kb = (uint32_t *)(scratch + CPU_ATTN_F32_FLOATS); /* [BK][d/2] */
    uint32_t *v2 = kb + (int64_t)BK * D_MAX / 2;                 /* [BK/2][d] */
    uint32_t *p2 = v2 + (int64_t)BK / 2 * D_MAX;                 /* [BK/2][BQ] */
    float m[BQ], l[BQ], corr[BQ];
    const int64_t d = a->d, d2 = d / 2, nq = a->sq - i0 < BQ ? a->sq - i0 : BQ;
    const float *q = a->q + i0 * a->ldq + h * d;
    for (int64_t c = 0; c < d2; c++) {
        uint32_t *row = qt2 + c * BQ;
        for (int64_t i = 0; i < nq; i++)
            row[i] = pair(q[i * a->ldq + 2 * c] * a->scale, q[i * a->ldq + 2 * c + 1] * a->scale);
        for (int64_t i = nq; i < BQ; i++)
            row[i] = 0; /* padding lanes: finite scores, ignored at the end */
    }
    for (int i = 0; i < BQ; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
    }
    for (int64_t i = 0; i < nq; i++)
        memset(acc + i * D_MAX, 0, (size_t)d * sizeof(float));
    for (int64_t j0 = 0; j0 < a->sk; j0 += BK) {
        const int64_t nk = a->sk - j0 < BK ? a->sk - j0 : BK, nk2 = (nk + 1) / 2;
        const float *k = a->k + j0 * a->ldk + h * d, *v = a->v + j0 * a->ldv + h * d;
        for (int64_t j = 0; j < nk; j++)
            row_bf16(k + j * a->ldk, kb + j * d2, d);
        for (int64_t j = 0; j < nk2; j++) {
            const float *v0 = v + 2 * j * a->ldv, *v1 = 2 * j + 1 < nk ? v0 + a->ldv : NULL;
            pairs(v0, v1, v2 + j * d, d);
        }
        scores(kb, qt2, st, nk, d2);
        cpu_softmax_tile(st, nk, m, l, corr);
        for (int64_t i = 0; i < nq; i++) {
            if (corr[i] == 1.0f)
                continue;
            float *arow = acc + i * D_MAX;
            for (int64_t c = 0; c < d; c++)
                arow[c] *= corr[i];
        }
        for (int64_t j = 0; j < nk2; j++) {
            const float *s0 = st + 2 * j * BQ, *s1 = 2 * j + 1 < nk ? s0 + BQ : NULL;
            pairs(s0, s1, p2 + j * BQ, BQ);
        }
        pv(p2, v2, acc, nq, nk2, d);
    }
    for (int64_t i = 0; i < nq; i++) {
        float *o = a->out + (i0 + i) * a->ldo + h * d;
        const float inv = 1.0f / l[i];
        for (int64_t c = 0; c < d; c++)
            o[c] = acc[i * D_MAX + c] * inv;
        if (a->lse)
            a->lse[(i0 + i) * a->heads + h] = m[i] + logf(l[i]);
    }
}
#endif
