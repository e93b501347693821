/* Softmax attention with the per-row log-sum-exp, flash style (online softmax, f32 throughout):
 * the sq x sk score matrix is never formed.
 *
 * One block of 4 warps per (block of BQ queries, head). The query block sits in shared memory,
 * pre-scaled (as the CPU backend scales q before its products); key/value tiles of BK = 32 rows
 * stream through shared memory. Warp w owns query rows w, w + 4, ...: for a key tile each lane
 * holds the score of key `lane` for each of its rows, so a row's max and sum are warp
 * reductions, and the online-softmax update (m, l, the rescale of the accumulators) is kept in
 * registers, identical in every lane. The probabilities go to shared memory for the PV product,
 * where lane owns output features lane, lane + 32, ... of each of its rows. K rows are padded to
 * an odd stride so a warp reading one feature of 32 keys hits 32 banks.
 *
 * Any head_dim up to 512 (the tile sizes shrink as it grows: BQ = 64, 64, 32, 16 for head_dim up
 * to 64, 128, 256, 512), any strides, any lengths. With no keys the output is zero and the LSE
 * -inf, as on the CPU.
 *
 * attention_masked is the same kernel with an additive bias [heads, sq, sk] on the scaled scores
 * (T5's relative positions) and/or the causal mask (CLIP), no LSE. A masked score is -inf before
 * the tile's max: the first key tile always holds key 0, which no query masks, so every row's
 * running max is finite from its first tile on and exp never sees -inf - -inf. */
#include <cuda_runtime.h>
#include <math_constants.h>

#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/reduce.cuh"

#define BK 32
#define NW 4

template <int DMAX, int BQ>
__global__ void __launch_bounds__(NW * 32)
    flash_f32(const float *q, int64_t ldq, const float *k, int64_t ldk, const float *v,
              int64_t ldv, float *out, int64_t ldo, float *lse, int64_t sq, int64_t sk,
              int64_t heads, int d, float scale, const float *bias, int causal)
{
    constexpr int ROWS = BQ / NW, COLS = DMAX / 32;
    extern __shared__ float smem[];
    const int kst = d | 1;
    float *Qs = smem;           /* [BQ][d] */
    float *Ks = Qs + BQ * d;    /* [BK][kst] */
    float *Vs = Ks + BK * kst;  /* [BK][d] */
    float *Ps = Vs + BK * d;    /* [BQ][BK] */
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int64_t h = blockIdx.y, i0 = (int64_t)blockIdx.x * BQ;

    for (int idx = tid; idx < BQ * d; idx += NW * 32) {
        const int i = idx / d, c = idx - i * d;
        const int64_t r = i0 + i;
        Qs[idx] = r < sq ? q[r * ldq + h * d + c] * scale : 0.0f;
    }
    float acc[ROWS][COLS], m[ROWS], l[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; r++) {
        m[r] = -CUDART_INF_F;
        l[r] = 0.0f;
#pragma unroll
        for (int u = 0; u < COLS; u++)
            acc[r][u] = 0.0f;
    }

    /* causal: the keys after the block's last query are masked for all of it */
    const int64_t kend = causal && i0 + BQ < sk ? i0 + BQ : sk;
    for (int64_t j0 = 0; j0 < kend; j0 += BK) {
        const int nk = kend - j0 < BK ? (int)(kend - j0) : BK;
        __syncthreads(); /* the last tile's K, V and P are read (and Q is written) */
        for (int idx = tid; idx < BK * d; idx += NW * 32) {
            const int j = idx / d, c = idx - j * d;
            const bool in = j < nk;
            Ks[j * kst + c] = in ? k[(j0 + j) * ldk + h * d + c] : 0.0f;
            Vs[j * d + c] = in ? v[(j0 + j) * ldv + h * d + c] : 0.0f;
        }
        __syncthreads();

        /* scores of key `lane` against each of this warp's rows */
        float s[ROWS];
#pragma unroll
        for (int r = 0; r < ROWS; r++)
            s[r] = 0.0f;
        const float *kr = Ks + lane * kst;
        for (int c = 0; c < d; c++) {
            const float kv = kr[c];
#pragma unroll
            for (int r = 0; r < ROWS; r++)
                s[r] += Qs[(warp + NW * r) * d + c] * kv;
        }

        /* online softmax: every lane of the warp computes the same m, l and rescale */
#pragma unroll
        for (int r = 0; r < ROWS; r++) {
            const int64_t row = i0 + warp + NW * r, key = j0 + lane;
            if (bias && lane < nk && row < sq)
                s[r] += bias[(h * sq + row) * sk + key];
            const float x = lane < nk && !(causal && key > row) ? s[r] : -CUDART_INF_F;
            const float mn = fmaxf(m[r], warp_max(x)); /* finite: the tile has a key */
            const float corr = m[r] == -CUDART_INF_F ? 0.0f : expf(m[r] - mn);
            const float p = x == -CUDART_INF_F ? 0.0f : expf(x - mn);
            l[r] = l[r] * corr + warp_sum(p);
            m[r] = mn;
            Ps[(warp + NW * r) * BK + lane] = p;
#pragma unroll
            for (int u = 0; u < COLS; u++)
                acc[r][u] *= corr;
        }
        __syncwarp(); /* this warp's rows of P are written */

        for (int j = 0; j < nk; j++) {
            float vv[COLS];
#pragma unroll
            for (int u = 0; u < COLS; u++) {
                const int c = lane + 32 * u;
                vv[u] = c < d ? Vs[j * d + c] : 0.0f;
            }
#pragma unroll
            for (int r = 0; r < ROWS; r++) {
                const float p = Ps[(warp + NW * r) * BK + j];
#pragma unroll
                for (int u = 0; u < COLS; u++)
                    acc[r][u] += p * vv[u];
            }
        }
    }

#pragma unroll
    for (int r = 0; r < ROWS; r++) {
        const int64_t row = i0 + warp + NW * r;
        if (row >= sq)
            continue;
        const float inv = 1.0f / l[r];
#pragma unroll
        for (int u = 0; u < COLS; u++) {
            const int c = lane + 32 * u;
            if (c < d)
                out[row * ldo + h * d + c] = acc[r][u] * inv;
        }
        if (lse && lane == 0)
            lse[row * heads + h] = m[r] + logf(l[r]);
    }
}

/* No keys: zero rows, LSE -inf. */
__global__ static void no_keys(float *out, int64_t ldo, float *lse, int64_t sq, int64_t heads,
                               int64_t d)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < sq * heads * d;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / (heads * d), j = i - r * heads * d;
        out[r * ldo + j] = 0.0f;
        if (lse && j % d == 0)
            lse[r * heads + j / d] = -CUDART_INF_F;
    }
}

static size_t smem_bytes(int bq, int d)
{
    return (size_t)(bq * d + BK * (d | 1) + BK * d + bq * BK) * sizeof(float);
}

template <int DMAX, int BQ>
static void launch(struct weft_kctx *c, const float *q, int64_t ldq, const float *k, int64_t ldk,
                   const float *v, int64_t ldv, float *out, int64_t ldo, float *lse, int64_t sq,
                   int64_t sk, int64_t heads, int d, float scale, const float *bias, int causal)
{
    const size_t smem = smem_bytes(BQ, d);
    if (smem > c->smem_optin) {
        cuda_refuse(c, "attention", "head_dim needs more shared memory than this GPU has");
        return;
    }
    if (smem > 48 * 1024 &&
        cuda_check(c,
                   cudaFuncSetAttribute(flash_f32<DMAX, BQ>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
                   "attention (cudaFuncSetAttribute)") != WEFT_OK)
        return;
    const dim3 grid((unsigned)((sq + BQ - 1) / BQ), (unsigned)heads);
    flash_f32<DMAX, BQ><<<grid, NW * 32, smem, c->stream>>>(q, ldq, k, ldk, v, ldv, out, ldo,
                                                             lse, sq, sk, heads, d, scale, bias,
                                                             causal);
    cuda_launched(c, "attention");
}

/* The head_dim's tile sizes. */
static void dispatch(struct weft_kctx *c, const float *q, int64_t ldq, const float *k,
                     int64_t ldk, const float *v, int64_t ldv, float *out, int64_t ldo,
                     float *lse, int64_t sq, int64_t sk, int64_t heads, int64_t d, float scale,
                     const float *bias, int causal)
{
    const int di = (int)d;
    if (d <= 64)
        launch<64, 64>(c, q, ldq, k, ldk, v, ldv, out, ldo, lse, sq, sk, heads, di, scale, bias,
                       causal);
    else if (d <= 128)
        launch<128, 64>(c, q, ldq, k, ldk, v, ldv, out, ldo, lse, sq, sk, heads, di, scale, bias,
                        causal);
    else if (d <= 256)
        launch<256, 32>(c, q, ldq, k, ldk, v, ldv, out, ldo, lse, sq, sk, heads, di, scale, bias,
                        causal);
    else
        launch<512, 16>(c, q, ldq, k, ldk, v, ldv, out, ldo, lse, sq, sk, heads, di, scale, bias,
                        causal);
}

void cuda_attention(struct weft_kctx *c, const float *q, int64_t ldq, const float *k,
                    int64_t ldk, const float *v, int64_t ldv, float *out, int64_t ldo,
                    float *lse, int64_t sq, int64_t sk, int64_t heads, int64_t d, float scale)
{
    if (!cuda_begin(c) || sq <= 0 || heads <= 0 || d <= 0)
        return;
    if (d > 512 || heads > 65535) {
        cuda_refuse(c, "attention", "head_dim above 512 or more than 65535 heads");
        return;
    }
    if (sk <= 0) {
        no_keys<<<cuda_blocks(sq * heads * d, 256), 256, 0, c->stream>>>(out, ldo, lse, sq, heads,
                                                                        d);
        cuda_launched(c, "attention (no keys)");
        return;
    }
    dispatch(c, q, ldq, k, ldk, v, ldv, out, ldo, lse, sq, sk, heads, d, scale, NULL, 0);
}

void cuda_attention_masked(struct weft_kctx *c, const float *q, int64_t ldq, const float *k,
                           int64_t ldk, const float *v, int64_t ldv, float *out, int64_t ldo,
                           int64_t sq, int64_t sk, int64_t heads, int64_t d, float scale,
                           const float *bias, int causal)
{
    /* no keys: nothing written, as the CPU */
    if (!cuda_begin(c) || sq <= 0 || sk <= 0 || heads <= 0 || d <= 0)
        return;
    if (d > 512 || heads > 65535) {
        cuda_refuse(c, "attention_masked", "head_dim above 512 or more than 65535 heads");
        return;
    }
    dispatch(c, q, ldq, k, ldk, v, ldv, out, ldo, NULL, sq, sk, heads, d, scale, bias,
             causal != 0);
}
