/* Softmax attention with the per-row log-sum-exp, tiled with an online softmax (flash-style):
 * for each head and block of BQ queries, key/value tiles of BK rows stream through; the scores
 * tile is BK x BQ, never sq x sk. All accumulation in f32.
 *
 * Layout: the query block is transposed once per task (QT [d][BQ], pre-scaled), so the scores
 * come out transposed (ST [key][query]) with queries along the vector lanes. Then the row max,
 * the exponentials and the row sums of the softmax are plain lane-wise vector operations, and
 * no key tile is ever transposed. Tasks are (head, query block) pairs split across the pool.
 * With AVX-512 the two products use register-blocked micro-kernels (4 keys x 64 queries, and
 * 4 queries x 64 features), with AVX2 + FMA smaller ones (4 x 16 each); the plain loops are
 * the fallback and handle every tail. In bf16
 * compute (AVX512-BF16), attention_bf16.c's block takes the products in bf16 pairs. */
#include "kernels/cpu/cpu.h"

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

#define BQ CPU_ATTN_BQ
#define BK CPU_ATTN_BK
#define D_MAX CPU_ATTN_D_MAX /* head_dim limit of this backend (FLUX, FLUX.2, Qwen-Image: 128) */

#define attn_arg cpu_attn_arg

/* st[j][i] = sum_c k[j][c] qt[c][i] for keys j in [j0, nk), all BQ query lanes. */
static void scores_plain(const float *k, int64_t ldk, const float *qt, float *st, int64_t nk,
                         int64_t d, int64_t j0)
{
    for (int64_t j = j0; j < nk; j++) {
        float *row = st + j * BQ;
        for (int i = 0; i < BQ; i++)
            row[i] = 0.0f;
        for (int64_t c = 0; c < d; c++) {
            const float kv = k[j * ldk + c];
            const float *qrow = qt + c * BQ;
            for (int i = 0; i < BQ; i++)
                row[i] += kv * qrow[i];
        }
    }
}

/* acc[i][c] += sum_j pt[j][i] v[j][c] for queries i < nq and features c in [c0, d). */
static void pv_plain(const float *pt, const float *v, int64_t ldv, float *acc, int64_t nq,
                     int64_t nk, int64_t d, int64_t i0, int64_t c0)
{
    for (int64_t i = i0; i < nq; i++) {
        float *arow = acc + i * D_MAX;
        for (int64_t j = 0; j < nk; j++) {
            const float p = pt[j * BQ + i];
            const float *vrow = v + j * ldv;
            for (int64_t c = c0; c < d; c++)
                arow[c] += p * vrow[c];
        }
    }
}

#if defined(__AVX512F__)
static void scores_fast(const float *k, int64_t ldk, const float *qt, float *st, int64_t nk,
                        int64_t d)
{
    const int64_t nk4 = nk / 4 * 4;
    for (int64_t j = 0; j < nk4; j += 4) {
        __m512 a[4][4];
        for (int r = 0; r < 4; r++)
            for (int t = 0; t < 4; t++)
                a[r][t] = _mm512_setzero_ps();
        const float *k0 = k + j * ldk;
        for (int64_t c = 0; c < d; c++) {
            const float *qrow = qt + c * BQ;
            __m512 q0 = _mm512_loadu_ps(qrow), q1 = _mm512_loadu_ps(qrow + 16);
            __m512 q2 = _mm512_loadu_ps(qrow + 32), q3 = _mm512_loadu_ps(qrow + 48);
            for (int r = 0; r < 4; r++) {
                __m512 kb = _mm512_set1_ps(k0[r * ldk + c]);
                a[r][0] = _mm512_fmadd_ps(kb, q0, a[r][0]);
                a[r][1] = _mm512_fmadd_ps(kb, q1, a[r][1]);
                a[r][2] = _mm512_fmadd_ps(kb, q2, a[r][2]);
                a[r][3] = _mm512_fmadd_ps(kb, q3, a[r][3]);
            }
        }
        for (int r = 0; r < 4; r++)
            for (int t = 0; t < 4; t++)
                _mm512_storeu_ps(st + (j + r) * BQ + (int64_t)16 * t, a[r][t]);
    }
    if (nk4 < nk)
        scores_plain(k, ldk, qt, st, nk, d, nk4);
}

static void pv_fast(const float *pt, const float *v, int64_t ldv, float *acc, int64_t nq,
                    int64_t nk, int64_t d)
{
    const int64_t nq4 = nq / 4 * 4, d64 = d / 64 * 64;
    for (int64_t i = 0; i < nq4; i += 4) {
        for (int64_t c = 0; c < d64; c += 64) {
            __m512 a[4][4];
            for (int r = 0; r < 4; r++)
                for (int t = 0; t < 4; t++)
                    a[r][t] = _mm512_loadu_ps(acc + (i + r) * D_MAX + c + (int64_t)16 * t);
            for (int64_t j = 0; j < nk; j++) {
                const float *vrow = v + j * ldv + c;
                __m512 v0 = _mm512_loadu_ps(vrow), v1 = _mm512_loadu_ps(vrow + 16);
                __m512 v2 = _mm512_loadu_ps(vrow + 32), v3 = _mm512_loadu_ps(vrow + 48);
                for (int r = 0; r < 4; r++) {
                    __m512 pb = _mm512_set1_ps(pt[j * BQ + i + r]);
                    a[r][0] = _mm512_fmadd_ps(pb, v0, a[r][0]);
                    a[r][1] = _mm512_fmadd_ps(pb, v1, a[r][1]);
                    a[r][2] = _mm512_fmadd_ps(pb, v2, a[r][2]);
                    a[r][3] = _mm512_fmadd_ps(pb, v3, a[r][3]);
                }
            }
            for (int r = 0; r < 4; r++)
                for (int t = 0; t < 4; t++)
                    _mm512_storeu_ps(acc + (i + r) * D_MAX + c + (int64_t)16 * t, a[r][t]);
        }
        if (d64 < d)
            pv_plain(pt, v, ldv, acc, i + 4, nk, d, i, d64);
    }
    if (nq4 < nq)
        pv_plain(pt, v, ldv, acc, nq, nk, d, nq4, 0);
}
#define SCORES(k, ldk, qt, st, nk, d) scores_fast(k, ldk, qt, st, nk, d)
#define PV(pt, v, ldv, acc, nq, nk, d) pv_fast(pt, v, ldv, acc, nq, nk, d)
#elif defined(__AVX2__) && defined(__FMA__)
/* AVX2: 4 keys x 16 queries (scores) and 4 queries x 16 features (pv) in 8 accumulators, each
 * a named variable (GCC stores an array of them to the stack on every iteration). */
static void scores_fast(const float *k, int64_t ldk, const float *qt, float *st, int64_t nk,
                        int64_t d)
{
    const int64_t nk4 = nk / 4 * 4;
    for (int64_t j = 0; j < nk4; j += 4) {
        const float *k0 = k + j * ldk, *k1 = k0 + ldk, *k2 = k1 + ldk, *k3 = k2 + ldk;
        for (int i = 0; i < BQ; i += 16) {
            __m256 a00 = _mm256_setzero_ps(), a01 = _mm256_setzero_ps();
            __m256 a10 = _mm256_setzero_ps(), a11 = _mm256_setzero_ps();
            __m256 a20 = _mm256_setzero_ps(), a21 = _mm256_setzero_ps();
            __m256 a30 = _mm256_setzero_ps(), a31 = _mm256_setzero_ps();
            for (int64_t c = 0; c < d; c++) {
                const float *qrow = qt + c * BQ + i;
                const __m256 q0 = _mm256_loadu_ps(qrow), q1 = _mm256_loadu_ps(qrow + 8);
                __m256 kb = _mm256_broadcast_ss(k0 + c);
                a00 = _mm256_fmadd_ps(kb, q0, a00);
                a01 = _mm256_fmadd_ps(kb, q1, a01);
                kb = _mm256_broadcast_ss(k1 + c);
                a10 = _mm256_fmadd_ps(kb, q0, a10);
                a11 = _mm256_fmadd_ps(kb, q1, a11);
                kb = _mm256_broadcast_ss(k2 + c);
                a20 = _mm256_fmadd_ps(kb, q0, a20);
                a21 = _mm256_fmadd_ps(kb, q1, a21);
                kb = _mm256_broadcast_ss(k3 + c);
                a30 = _mm256_fmadd_ps(kb, q0, a30);
                a31 = _mm256_fmadd_ps(kb, q1, a31);
            }
            float *s0 = st + j * BQ + i, *s1 = s0 + BQ, *s2 = s1 + BQ, *s3 = s2 + BQ;
            _mm256_storeu_ps(s0, a00);
            _mm256_storeu_ps(s0 + 8, a01);
            _mm256_storeu_ps(s1, a10);
            _mm256_storeu_ps(s1 + 8, a11);
            _mm256_storeu_ps(s2, a20);
            _mm256_storeu_ps(s2 + 8, a21);
            _mm256_storeu_ps(s3, a30);
            _mm256_storeu_ps(s3 + 8, a31);
        }
    }
    if (nk4 < nk)
        scores_plain(k, ldk, qt, st, nk, d, nk4);
}

static void pv_fast(const float *pt, const float *v, int64_t ldv, float *acc, int64_t nq,
                    int64_t nk, int64_t d)
{
    const int64_t nq4 = nq / 4 * 4, d16 = d / 16 * 16;
    for (int64_t i = 0; i < nq4; i += 4) {
        for (int64_t c = 0; c < d16; c += 16) {
            float *r0 = acc + i * D_MAX + c, *r1 = r0 + D_MAX, *r2 = r1 + D_MAX,
                  *r3 = r2 + D_MAX;
            __m256 a00 = _mm256_loadu_ps(r0), a01 = _mm256_loadu_ps(r0 + 8);
            __m256 a10 = _mm256_loadu_ps(r1), a11 = _mm256_loadu_ps(r1 + 8);
            __m256 a20 = _mm256_loadu_ps(r2), a21 = _mm256_loadu_ps(r2 + 8);
            __m256 a30 = _mm256_loadu_ps(r3), a31 = _mm256_loadu_ps(r3 + 8);
            for (int64_t j = 0; j < nk; j++) {
                const float *vrow = v + j * ldv + c, *p = pt + j * BQ + i;
                const __m256 v0 = _mm256_loadu_ps(vrow), v1 = _mm256_loadu_ps(vrow + 8);
                __m256 pb = _mm256_broadcast_ss(p);
                a00 = _mm256_fmadd_ps(pb, v0, a00);
                a01 = _mm256_fmadd_ps(pb, v1, a01);
                pb = _mm256_broadcast_ss(p + 1);
                a10 = _mm256_fmadd_ps(pb, v0, a10);
                a11 = _mm256_fmadd_ps(pb, v1, a11);
                pb = _mm256_broadcast_ss(p + 2);
                a20 = _mm256_fmadd_ps(pb, v0, a20);
                a21 = _mm256_fmadd_ps(pb, v1, a21);
                pb = _mm256_broadcast_ss(p + 3);
                a30 = _mm256_fmadd_ps(pb, v0, a30);
                a31 = _mm256_fmadd_ps(pb, v1, a31);
            }
            _mm256_storeu_ps(r0, a00);
            _mm256_storeu_ps(r0 + 8, a01);
            _mm256_storeu_ps(r1, a10);
            _mm256_storeu_ps(r1 + 8, a11);
            _mm256_storeu_ps(r2, a20);
            _mm256_storeu_ps(r2 + 8, a21);
            _mm256_storeu_ps(r3, a30);
            _mm256_storeu_ps(r3 + 8, a31);
        }
        if (d16 < d)
            pv_plain(pt, v, ldv, acc, i + 4, nk, d, i, d16);
    }
    if (nq4 < nq)
        pv_plain(pt, v, ldv, acc, nq, nk, d, nq4, 0);
}
#define SCORES(k, ldk, qt, st, nk, d) scores_fast(k, ldk, qt, st, nk, d)
#define PV(pt, v, ldv, acc, nq, nk, d) pv_fast(pt, v, ldv, acc, nq, nk, d)
#else
#define SCORES(k, ldk, qt, st, nk, d) scores_plain(k, ldk, qt, st, nk, d, 0)
#define PV(pt, v, ldv, acc, nq, nk, d) pv_plain(pt, v, ldv, acc, nq, nk, d, 0, 0)
#endif

#if defined(CPU_HAVE_EXPF8)
/* The online-softmax update for one key tile, 8 query lanes at a time. */
void cpu_softmax_tile(float *st, int64_t nk, float *m, float *l, float *corr)
{
    for (int i = 0; i < BQ; i += 8) {
        const __m256 m0 = _mm256_loadu_ps(m + i);
        __m256 mx = m0;
        for (int64_t j = 0; j < nk; j++)
            mx = _mm256_max_ps(_mm256_loadu_ps(st + j * BQ + i), mx);
        /* corr = exp(m - mx), 0 where m was -inf (no key seen yet) */
        const __m256 seen = _mm256_cmp_ps(m0, _mm256_set1_ps(-INFINITY), _CMP_NEQ_OQ);
        _mm256_storeu_ps(corr + i, _mm256_and_ps(seen, cpu_expf8(_mm256_sub_ps(m0, mx))));
        _mm256_storeu_ps(m + i, mx);
        __m256 sum = _mm256_setzero_ps();
        for (int64_t j = 0; j < nk; j++) {
            float *row = st + j * BQ + i;
            const __m256 e = cpu_expf8(_mm256_sub_ps(_mm256_loadu_ps(row), mx));
            _mm256_storeu_ps(row, e);
            sum = _mm256_add_ps(sum, e);
        }
        _mm256_storeu_ps(l + i, _mm256_fmadd_ps(_mm256_loadu_ps(l + i),
                                                _mm256_loadu_ps(corr + i), sum));
    }
}
#else
/* The online-softmax update for one key tile: lane-wise over the BQ queries. */
void cpu_softmax_tile(float *st, int64_t nk, float *m, float *l, float *corr)
{
    float mx[BQ];
    for (int i = 0; i < BQ; i++)
        mx[i] = m[i];
    for (int64_t j = 0; j < nk; j++) {
        const float *row = st + j * BQ;
        for (int i = 0; i < BQ; i++)
            mx[i] = row[i] > mx[i] ? row[i] : mx[i];
    }
    float sum[BQ];
    for (int i = 0; i < BQ; i++) {
        corr[i] = m[i] == -INFINITY ? 0.0f : cpu_expf(m[i] - mx[i]);
        m[i] = mx[i];
        sum[i] = 0.0f;
    }
    for (int64_t j = 0; j < nk; j++) {
        float *row = st + j * BQ;
        for (int i = 0; i < BQ; i++) {
            row[i] = cpu_expf(row[i] - mx[i]);
            sum[i] += row[i];
        }
    }
    for (int i = 0; i < BQ; i++)
        l[i] = l[i] * corr[i] + sum[i];
}
#endif

/* The bias and the causal mask on a scores tile st [nk keys][BQ queries]. Every query keeps
 * key 0 (causal: j <= i), so no row is masked whole and the running max stays finite. */
static void bias_mask(const struct attn_arg *a, int64_t h, int64_t i0, int64_t nq, int64_t j0,
                      int64_t nk, float *st)
{
    for (int64_t j = 0; j < nk; j++) {
        float *row = st + j * BQ;
        if (a->bias) {
            const float *b = a->bias + (h * a->sq + i0) * a->sk + j0 + j;
            for (int64_t i = 0; i < nq; i++)
                row[i] += b[i * a->sk];
        }
        if (a->causal)
            for (int64_t i = 0; i < nq; i++)
                if (j0 + j > i0 + i)
                    row[i] = -INFINITY;
    }
}

static void attn_block(const struct attn_arg *a, int64_t h, int64_t i0, float *scratch)
{
    float *qt = scratch, *st = qt + (int64_t)D_MAX * BQ, *acc = st + (int64_t)BK * BQ;
    float m[BQ], l[BQ], corr[BQ];
    const int64_t d = a->d, nq = a->sq - i0 < BQ ? a->sq - i0 : BQ;
    const float *q = a->q + i0 * a->ldq + h * d;
    for (int64_t c = 0; c < d; c++) {
        float *row = qt + c * BQ;
        for (int64_t i = 0; i < nq; i++)
            row[i] = q[i * a->ldq + c] * a->scale;
        for (int64_t i = nq; i < BQ; i++)
            row[i] = 0.0f; /* padding lanes: finite scores, ignored at the end */
    }
    for (int i = 0; i < BQ; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
    }
    for (int64_t i = 0; i < nq; i++)
        memset(acc + i * D_MAX, 0, (size_t)d * sizeof(float));
    /* causal: key tiles after the block's last query are masked for all of it */
    const int64_t sk = a->causal && i0 + nq < a->sk ? i0 + nq : a->sk;
    for (int64_t j0 = 0; j0 < sk; j0 += BK) {
        const int64_t nk = sk - j0 < BK ? sk - j0 : BK;
        const float *k = a->k + j0 * a->ldk + h * d, *v = a->v + j0 * a->ldv + h * d;
        SCORES(k, a->ldk, qt, st, nk, d);
        if (a->bias || a->causal)
            bias_mask(a, h, i0, nq, j0, nk, st);
        cpu_softmax_tile(st, nk, m, l, corr);
        for (int64_t i = 0; i < nq; i++) {
            if (corr[i] == 1.0f)
                continue;
            float *arow = acc + i * D_MAX;
            for (int64_t c = 0; c < d; c++)
                arow[c] *= corr[i];
        }
        PV(st, v, a->ldv, acc, nq, nk, d);
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

static void attn_tasks(void *varg, int64_t b, int64_t e, int thread)
{
    const struct attn_arg *a = varg;
    int64_t qblocks = (a->sq + BQ - 1) / BQ;
    for (int64_t t = b; t < e; t++) {
#if defined(__x86_64__)
        if (a->bf16) {
            cpu_attn_block_bf16(a, t / qblocks, (t % qblocks) * BQ, a->scratch[thread]);
            continue;
        }
#endif
        attn_block(a, t / qblocks, (t % qblocks) * BQ, a->scratch[thread]);
    }
}

void cpu_attention(struct weft_kctx *ctx, const float *q, int64_t ldq, const float *k,
                   int64_t ldk, const float *v, int64_t ldv, float *out, int64_t ldo, float *lse,
                   int64_t sq, int64_t sk, int64_t heads, int64_t d, float scale)
{
    if (sq <= 0 || heads <= 0 || d > D_MAX)
        return; /* d > D_MAX is refused when the model is loaded */
    if (sk <= 0) { /* no keys: zero output, lse -inf */
        for (int64_t i = 0; i < sq; i++) {
            memset(out + i * ldo, 0, (size_t)(heads * d) * sizeof(float));
            for (int64_t h = 0; lse && h < heads; h++)
                lse[i * heads + h] = -INFINITY;
        }
        return;
    }
    /* bf16 products where the compute dtype says so and the CPU has them */
    const bool bf16 = ctx->compute_bf16 && ctx->gemm_bf16.bf16 && d % 2 == 0;
    struct attn_arg a = {ctx->scratch, q, k, v, out, lse, ldq, ldk, ldv, ldo, sq, sk, heads, d,
                         scale, bf16, NULL, false};
    cpu_parallel(ctx, heads * ((sq + BQ - 1) / BQ), 1, attn_tasks, &a);
}

/* With a bias and/or the causal mask: the f32 path (the text encoders'; their attention is a
 * small part of their time). */
void cpu_attention_masked(struct weft_kctx *ctx, const float *q, int64_t ldq, const float *k,
                          int64_t ldk, const float *v, int64_t ldv, float *out, int64_t ldo,
                          int64_t sq, int64_t sk, int64_t heads, int64_t d, float scale,
                          const float *bias, int causal)
{
    if (sq <= 0 || sk <= 0 || heads <= 0 || d > D_MAX)
        return;
    struct attn_arg a = {ctx->scratch, q, k, v, out, NULL, ldq, ldk, ldv, ldo, sq, sk, heads, d,
                         scale, false, bias, causal != 0};
    cpu_parallel(ctx, heads * ((sq + BQ - 1) / BQ), 1, attn_tasks, &a);
}
