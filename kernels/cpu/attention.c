/* Softmax attention with the per-row log-sum-exp, tiled with an online softmax (flash-style):
 * for each head and block of BQ queries, key/value tiles of BK rows stream through; the scores
 * tile is BQ x BK, never sq x sk. All accumulation in f32.
 *
 * Tasks are (head, query block) pairs split across the pool. The two products (Q K^T and P V)
 * use AVX-512 register-blocked micro-kernels when the build targets it and the tile is full;
 * everything else (tails, other CPUs) takes the plain loops below, which are the reference the
 * fast paths are tested against. */
#include "kernels/cpu/cpu.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#define BQ 64
#define BK 128
#define D_MAX 512 /* head_dim limit of this backend (FLUX, FLUX.2, Qwen-Image use 128) */

struct attn_arg {
    float *const *scratch;
    const float *q, *k, *v;
    float *out, *lse;
    int64_t ldq, ldk, ldv, ldo, sq, sk, heads, d;
    float scale;
};

/* s[i][j] = sum_c q[i][c] kt[c][j] for i < nq, j < nk (kt row stride BK, s row stride BK). */
static void scores_plain(const float *q, int64_t ldq, const float *kt, float *s, int64_t nq,
                         int64_t nk, int64_t d, int64_t i0, int64_t j0)
{
    for (int64_t i = i0; i < nq; i++) {
        float *srow = s + i * BK;
        for (int64_t j = j0; j < nk; j++)
            srow[j] = 0.0f;
        for (int64_t c = 0; c < d; c++) {
            float qv = q[i * ldq + c];
            const float *krow = kt + c * BK;
            for (int64_t j = j0; j < nk; j++)
                srow[j] += qv * krow[j];
        }
    }
}

/* acc[i][c] += sum_j p[i][j] v[j][c] for i < nq, c in [c0, d). */
static void pv_plain(const float *p, const float *v, int64_t ldv, float *acc, int64_t nq,
                     int64_t nk, int64_t d, int64_t i0, int64_t c0)
{
    for (int64_t i = i0; i < nq; i++) {
        float *arow = acc + i * D_MAX;
        for (int64_t j = 0; j < nk; j++) {
            float pv = p[i * BK + j];
            const float *vrow = v + j * ldv;
            for (int64_t c = c0; c < d; c++)
                arow[c] += pv * vrow[c];
        }
    }
}

#if defined(__AVX512F__)
/* 8 query rows x 32 keys per block, 16 accumulators in registers across the d loop. */
static void scores_avx512(const float *q, int64_t ldq, const float *kt, float *s, int64_t nq,
                          int64_t nk, int64_t d)
{
    int64_t nq8 = nq / 8 * 8, nk32 = nk / 32 * 32;
    for (int64_t i = 0; i < nq8; i += 8) {
        for (int64_t j = 0; j < nk32; j += 32) {
            __m512 a[8][2];
            for (int r = 0; r < 8; r++)
                a[r][0] = a[r][1] = _mm512_setzero_ps();
            for (int64_t c = 0; c < d; c++) {
                __m512 k0 = _mm512_loadu_ps(kt + c * BK + j);
                __m512 k1 = _mm512_loadu_ps(kt + c * BK + j + 16);
                for (int r = 0; r < 8; r++) {
                    __m512 qb = _mm512_set1_ps(q[(i + r) * ldq + c]);
                    a[r][0] = _mm512_fmadd_ps(qb, k0, a[r][0]);
                    a[r][1] = _mm512_fmadd_ps(qb, k1, a[r][1]);
                }
            }
            for (int r = 0; r < 8; r++) {
                _mm512_storeu_ps(s + (i + r) * BK + j, a[r][0]);
                _mm512_storeu_ps(s + (i + r) * BK + j + 16, a[r][1]);
            }
        }
        if (nk32 < nk)
            scores_plain(q + i * ldq, ldq, kt, s + i * BK, 8, nk, d, 0, nk32);
    }
    if (nq8 < nq)
        scores_plain(q, ldq, kt, s, nq, nk, d, nq8, 0);
}

/* 4 query rows x 64 features per block, 16 accumulators across the key loop. */
static void pv_avx512(const float *p, const float *v, int64_t ldv, float *acc, int64_t nq,
                      int64_t nk, int64_t d)
{
    int64_t nq4 = nq / 4 * 4, d64 = d / 64 * 64;
    for (int64_t i = 0; i < nq4; i += 4) {
        for (int64_t c = 0; c < d64; c += 64) {
            __m512 a[4][4];
            for (int r = 0; r < 4; r++)
                for (int t = 0; t < 4; t++)
                    a[r][t] = _mm512_loadu_ps(acc + (i + r) * D_MAX + c + 16 * t);
            for (int64_t j = 0; j < nk; j++) {
                const float *vrow = v + j * ldv + c;
                __m512 v0 = _mm512_loadu_ps(vrow), v1 = _mm512_loadu_ps(vrow + 16);
                __m512 v2 = _mm512_loadu_ps(vrow + 32), v3 = _mm512_loadu_ps(vrow + 48);
                for (int r = 0; r < 4; r++) {
                    __m512 pb = _mm512_set1_ps(p[(i + r) * BK + j]);
                    a[r][0] = _mm512_fmadd_ps(pb, v0, a[r][0]);
                    a[r][1] = _mm512_fmadd_ps(pb, v1, a[r][1]);
                    a[r][2] = _mm512_fmadd_ps(pb, v2, a[r][2]);
                    a[r][3] = _mm512_fmadd_ps(pb, v3, a[r][3]);
                }
            }
            for (int r = 0; r < 4; r++)
                for (int t = 0; t < 4; t++)
                    _mm512_storeu_ps(acc + (i + r) * D_MAX + c + 16 * t, a[r][t]);
        }
        if (d64 < d)
            pv_plain(p + i * BK, v, ldv, acc + i * D_MAX, 4, nk, d, 0, d64);
    }
    if (nq4 < nq)
        pv_plain(p, v, ldv, acc, nq, nk, d, nq4, 0);
}
#endif

_Static_assert(D_MAX * BK + BQ * BK + BQ * D_MAX <= CPU_SCRATCH_FLOATS, "scratch too small");

static void attn_block(const struct attn_arg *a, int64_t h, int64_t i0, float *scratch)
{
    float *kt = scratch, *s = kt + D_MAX * BK, *acc = s + BQ * BK;
    float m[BQ], l[BQ];
    const int64_t d = a->d, nq = a->sq - i0 < BQ ? a->sq - i0 : BQ;
    const float *q = a->q + i0 * a->ldq + h * d;
    for (int64_t i = 0; i < nq; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
        memset(acc + i * D_MAX, 0, (size_t)d * sizeof(float));
    }
    for (int64_t j0 = 0; j0 < a->sk; j0 += BK) {
        const int64_t nk = a->sk - j0 < BK ? a->sk - j0 : BK;
        const float *k = a->k + j0 * a->ldk + h * d, *v = a->v + j0 * a->ldv + h * d;
        for (int64_t j = 0; j < nk; j++)
            for (int64_t c = 0; c < d; c++)
                kt[c * BK + j] = k[j * a->ldk + c];
#if defined(__AVX512F__)
        scores_avx512(q, a->ldq, kt, s, nq, nk, d);
#else
        scores_plain(q, a->ldq, kt, s, nq, nk, d, 0, 0);
#endif
        for (int64_t i = 0; i < nq; i++) {
            float *srow = s + i * BK;
            float mx = -INFINITY;
            for (int64_t j = 0; j < nk; j++) {
                srow[j] *= a->scale;
                mx = srow[j] > mx ? srow[j] : mx;
            }
            float m_new = m[i] > mx ? m[i] : mx;
            float corr = m[i] == -INFINITY ? 0.0f : cpu_expf(m[i] - m_new);
            float sum = 0.0f;
            for (int64_t j = 0; j < nk; j++) {
                srow[j] = cpu_expf(srow[j] - m_new);
                sum += srow[j];
            }
            l[i] = l[i] * corr + sum;
            m[i] = m_new;
            if (corr != 1.0f) {
                float *arow = acc + i * D_MAX;
                for (int64_t c = 0; c < d; c++)
                    arow[c] *= corr;
            }
        }
#if defined(__AVX512F__)
        pv_avx512(s, v, a->ldv, acc, nq, nk, d);
#else
        pv_plain(s, v, a->ldv, acc, nq, nk, d, 0, 0);
#endif
    }
    for (int64_t i = 0; i < nq; i++) {
        float *o = a->out + (i0 + i) * a->ldo + h * d;
        float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
        for (int64_t c = 0; c < d; c++)
            o[c] = acc[i * D_MAX + c] * inv;
        if (a->lse)
            a->lse[(i0 + i) * a->heads + h] = l[i] > 0.0f ? m[i] + logf(l[i]) : -INFINITY;
    }
}

static void attn_tasks(void *varg, int64_t b, int64_t e, int thread)
{
    const struct attn_arg *a = varg;
    int64_t qblocks = (a->sq + BQ - 1) / BQ;
    for (int64_t t = b; t < e; t++)
        attn_block(a, t / qblocks, (t % qblocks) * BQ, a->scratch[thread]);
}

void cpu_attention(struct weft_kctx *ctx, const float *q, int64_t ldq, const float *k,
                   int64_t ldk, const float *v, int64_t ldv, float *out, int64_t ldo, float *lse,
                   int64_t sq, int64_t sk, int64_t heads, int64_t d, float scale)
{
    if (sq <= 0 || heads <= 0 || d > D_MAX)
        return; /* d > D_MAX is refused when the model is loaded */
    struct attn_arg a = {ctx->scratch, q, k, v, out, lse, ldq, ldk, ldv, ldo, sq, sk, heads, d,
                         scale};
    if (sk <= 0) { /* no keys: zero output, lse -inf */
        for (int64_t i = 0; i < sq; i++) {
            memset(out + i * ldo, 0, (size_t)(heads * d) * sizeof(float));
            for (int64_t h = 0; lse && h < heads; h++)
                lse[i * heads + h] = -INFINITY;
        }
        return;
    }
    cpu_parallel(ctx, heads * ((sq + BQ - 1) / BQ), 1, attn_tasks, &a);
}
