/* Linear layers through cuBLASLt, in the row-major Linear convention of the CPU backend:
 * y[m, n] (+)= x[m, k] . w[n, k]^T + b[n], with f32 accumulation and the bias in the epilogue.
 *
 * Column-major, that is D[n, m] = op(A) . B with A the weight viewed as a k x n matrix (lda k,
 * transposed) and B the activations viewed as k x m (ldb ldx). Products in the context's
 * compute dtype, as the CPU backend computes them: f32 (a bf16 or f16 weight widened to f32 on
 * the device first: exact), or bf16/f16 (x and, unless already of that dtype, the weight
 * rounded to it as they enter the product, as torch's reduced-precision matmul does). TF32 is
 * never used. The algorithm the heuristic picks is kept per shape. When cuBLASLt has no
 * algorithm for a shape (an odd stride, say), a plain tiled kernel with the same semantics
 * computes it. */
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <string.h>

#include "kernels/cuda/cuda_internal.h"

/* The largest power of two (up to 256) dividing the address and the row stride in bytes: what
 * cuBLASLt's heuristic must know to pick a kernel whose vector loads are legal. */
static int align_of(const void *p, int64_t ld_bytes)
{
    uintptr_t v = (uintptr_t)p | (uintptr_t)ld_bytes | 256u;
    return (int)(v & (~v + 1));
}

/* ---- the fallback: a tiled SIMT GEMM -------------------------------------------------------
 * 64 x 64 output tiles, 256 threads each computing 4 x 4, k in steps of 16 through shared
 * memory. Operands are read as stored (f32, bf16, f16) and rounded to the products' dtype. */
#define FT 64
#define FK 16

__device__ static inline float rd(const void *p, int t, int64_t i)
{
    if (t == WEFT_DTYPE_BF16)
        return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    if (t == WEFT_DTYPE_F16)
        return __half2float(((const __half *)p)[i]);
    return ((const float *)p)[i];
}

__device__ static inline float round_to(int t, float v)
{
    if (t == WEFT_DTYPE_BF16)
        return __bfloat162float(__float2bfloat16_rn(v));
    if (t == WEFT_DTYPE_F16)
        return __half2float(__float2half_rn(v));
    return v;
}

__global__ static void gemm_fallback(const float *x, int64_t ldx, const void *w, int wdt,
                                     const float *b, float *y, int64_t ldy, int64_t m,
                                     int64_t n, int64_t k, int accumulate, int pt)
{
    __shared__ float xs[FK][FT + 1], ws[FK][FT + 1];
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const int64_t r0 = (int64_t)blockIdx.y * FT, c0 = (int64_t)blockIdx.x * FT;
    float acc[4][4] = {};
    for (int64_t k0 = 0; k0 < k; k0 += FK) {
        for (int i = threadIdx.x; i < FT * FK; i += blockDim.x) {
            const int rr = i / FK, kk = i % FK;
            const int64_t r = r0 + rr, col = c0 + rr, kg = k0 + kk;
            xs[kk][rr] = r < m && kg < k ? round_to(pt, x[r * ldx + kg]) : 0.0f;
            ws[kk][rr] = col < n && kg < k ? round_to(pt, rd(w, wdt, col * k + kg)) : 0.0f;
        }
        __syncthreads();
        for (int kk = 0; kk < FK; kk++)
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 4; j++)
                    acc[i][j] += xs[kk][ty + 16 * i] * ws[kk][tx + 16 * j];
        __syncthreads();
    }
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            const int64_t r = r0 + ty + 16 * i, col = c0 + tx + 16 * j;
            if (r >= m || col >= n)
                continue;
            float v = acc[i][j] + (b ? b[col] : 0.0f);
            y[r * ldy + col] = accumulate ? y[r * ldy + col] + v : v;
        }
}

static void fallback(struct weft_kctx *c, const float *x, int64_t ldx, const void *w,
                     enum weft_dtype wdt, const float *b, float *y, int64_t ldy, int64_t m,
                     int64_t n, int64_t k, int accumulate)
{
    dim3 grid((unsigned)((n + FT - 1) / FT), (unsigned)((m + FT - 1) / FT));
    if (grid.y > 65535) {
        for (int64_t r = 0; r < m && cuda_ok(c); r += 65535 * (int64_t)FT)
            fallback(c, x + r * ldx, ldx, w, wdt, b, y + r * ldy, ldy,
                     m - r < 65535 * (int64_t)FT ? m - r : 65535 * (int64_t)FT, n, k, accumulate);
        return;
    }
    gemm_fallback<<<grid, 256, 0, c->stream>>>(x, ldx, w, (int)wdt, b, y, ldy, m, n, k,
                                                accumulate, (int)c->compute);
    cuda_launched(c, "linear (fallback GEMM)");
}

/* ---- cuBLASLt -------------------------------------------------------------------------------- */

static bool key_eq(const struct cuda_gemm_key *a, const struct cuda_gemm_key *b)
{
    return memcmp(a, b, sizeof(*a)) == 0;
}

/* The algorithm for this shape: from the cache, or the heuristic's first choice (kept). */
static bool find_algo(struct weft_kctx *c, const struct cuda_gemm_key *key,
                      cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t la,
                      cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t ld,
                      cublasLtMatmulAlgo_t *algo)
{
    for (int i = 0; i < CUDA_GEMM_CACHE; i++)
        if (c->cache[i].valid && key_eq(&c->cache[i].key, key)) {
            *algo = c->cache[i].algo;
            return true;
        }
    cublasLtMatmulPreference_t pref;
    if (cuda_check_blas(c, cuda_lt.cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate"))
        return false;
    const uint64_t ws = c->lt_ws_bytes;
    const uint32_t al = (uint32_t)key->align;
    (void)cuda_lt.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                               sizeof(ws));
    const cublasLtMatmulPreferenceAttributes_t aligns[] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (size_t i = 0; i < sizeof(aligns) / sizeof(aligns[0]); i++)
        (void)cuda_lt.cublasLtMatmulPreferenceSetAttribute(pref, aligns[i], &al, sizeof(al));
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    cublasStatus_t s =
        cuda_lt.cublasLtMatmulAlgoGetHeuristic(c->lt, op, la, lb, ld, ld, pref, 1, &res, &found);
    (void)cuda_lt.cublasLtMatmulPreferenceDestroy(pref);
    if (s != CUBLAS_STATUS_SUCCESS || found < 1)
        return false; /* no algorithm: the caller's fallback */
    struct cuda_gemm_algo *slot = &c->cache[c->cache_next];
    c->cache_next = (c->cache_next + 1) % CUDA_GEMM_CACHE;
    slot->key = *key;
    slot->algo = res.algo;
    slot->valid = true;
    *algo = res.algo;
    return true;
}

/* The matmul itself; false when cuBLASLt has no algorithm for it (nothing was enqueued). */
static bool lt_matmul(struct weft_kctx *c, const void *A, cudaDataType_t ab, const void *B,
                      int64_t ldb, const float *bias, float *y, int64_t ldy, int64_t m, int64_t n,
                      int64_t k, int accumulate)
{
    cublasLtMatmulDesc_t op = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, ld = NULL;
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    bool done = false;
    if (cuda_check_blas(c, cuda_lt.cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F),
                        "cublasLtMatmulDescCreate"))
        return true; /* an error recorded: nothing more to do */
    (void)cuda_lt.cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
    (void)cuda_lt.cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
    if (bias) {
        const cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_BIAS;
        const cudaDataType_t bt = CUDA_R_32F;
        (void)cuda_lt.cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof(ep));
        (void)cuda_lt.cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                             sizeof(bias));
        (void)cuda_lt.cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt,
                                             sizeof(bt));
    }
    const size_t esz = ab == CUDA_R_32F ? 4 : 2;
    if (cuda_check_blas(c, cuda_lt.cublasLtMatrixLayoutCreate(&la, ab, (uint64_t)k, (uint64_t)n, k),
                        "cublasLtMatrixLayoutCreate") ||
        cuda_check_blas(c, cuda_lt.cublasLtMatrixLayoutCreate(&lb, ab, (uint64_t)k, (uint64_t)m, ldb),
                        "cublasLtMatrixLayoutCreate") ||
        cuda_check_blas(c, cuda_lt.cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, (uint64_t)n, (uint64_t)m,
                                                      ldy),
                        "cublasLtMatrixLayoutCreate")) {
        done = true;
        goto out;
    }
    {
        int al = align_of(A, k * (int64_t)esz), a2 = align_of(B, ldb * (int64_t)esz);
        int a3 = align_of(y, ldy * 4), a4 = bias ? align_of(bias, 4) : 256;
        al = al < a2 ? al : a2;
        al = al < a3 ? al : a3;
        al = al < a4 ? al : a4;
        struct cuda_gemm_key key;
        memset(&key, 0, sizeof(key)); /* compared with memcmp: padding too */
        key.m = m, key.n = n, key.k = k, key.lda = k, key.ldb = ldb, key.ldd = ldy;
        key.ab_type = (int)ab, key.bias = bias != NULL, key.accumulate = accumulate;
        key.align = al;
        cublasLtMatmulAlgo_t algo;
        if (!find_algo(c, &key, op, la, lb, ld, &algo))
            goto out;
        const float one = 1.0f, beta = accumulate ? 1.0f : 0.0f;
        const cublasStatus_t s = cuda_lt.cublasLtMatmul(c->lt, op, &one, A, la, B, lb, &beta, y, ld, y,
                                                ld, &algo, c->lt_ws, c->lt_ws_bytes, c->stream);
        /* an algorithm that turns the shape down after all: the fallback takes it */
        done = s != CUBLAS_STATUS_NOT_SUPPORTED;
        if (done)
            (void)cuda_check_blas(c, s, "linear (cublasLtMatmul)");
    }
out:
    if (ld)
        (void)cuda_lt.cublasLtMatrixLayoutDestroy(ld);
    if (lb)
        (void)cuda_lt.cublasLtMatrixLayoutDestroy(lb);
    if (la)
        (void)cuda_lt.cublasLtMatrixLayoutDestroy(la);
    (void)cuda_lt.cublasLtMatmulDescDestroy(op);
    return done;
}

/* y = b (or y += b) over m rows: a GEMM with k = 0. */
__global__ static void bias_rows(const float *b, float *y, int64_t ldy, int64_t m, int64_t n,
                                 int accumulate)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < m * n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / n, j = i - r * n;
        const float v = b ? b[j] : 0.0f;
        y[r * ldy + j] = accumulate ? y[r * ldy + j] + v : v;
    }
}

void cuda_gemm(struct weft_kctx *c, const float *x, int64_t ldx, const void *w,
               enum weft_dtype wdt, const float *b, float *y, int64_t ldy, int64_t m, int64_t n,
               int64_t k, int accumulate)
{
    if (!cuda_begin(c) || m <= 0 || n <= 0)
        return;
    if (k <= 0) {
        bias_rows<<<cuda_blocks(m * n, 256), 256, 0, c->stream>>>(b, y, ldy, m, n, accumulate);
        cuda_launched(c, "linear (k = 0)");
        return;
    }
    if (wdt != WEFT_DTYPE_F32 && wdt != WEFT_DTYPE_BF16 && wdt != WEFT_DTYPE_F16) {
        cuda_refuse(c, "linear", "weights must be f32, bf16 or f16");
        return;
    }
    const enum weft_dtype pt = c->compute;
    const void *A = w, *B = x;
    int64_t ldb = ldx;
    cudaDataType_t ab = CUDA_R_32F;
    if (pt == WEFT_DTYPE_F32) {
        if (wdt != WEFT_DTYPE_F32) {
            void *wf = cuda_scratch_get(c, &c->wconv, (size_t)(n * k) * sizeof(float));
            if (!wf)
                return;
            cuda_convert(c, wf, WEFT_DTYPE_F32, w, wdt, n * k);
            A = wf;
        }
    } else {
        ab = pt == WEFT_DTYPE_BF16 ? CUDA_R_16BF : CUDA_R_16F;
        if (wdt != pt) {
            void *wh = cuda_scratch_get(c, &c->wconv, (size_t)(n * k) * 2);
            if (!wh)
                return;
            cuda_convert(c, wh, pt, w, wdt, n * k);
            A = wh;
        }
        void *xh = cuda_scratch_get(c, &c->xconv, (size_t)(m * k) * 2);
        if (!xh)
            return;
        cuda_convert_rows(c, xh, pt, x, ldx, m, k);
        B = xh;
        ldb = k;
    }
    if (!cuda_begin(c) || lt_matmul(c, A, ab, B, ldb, b, y, ldy, m, n, k, accumulate))
        return;
    /* no cuBLASLt algorithm for this shape: the plain kernel, on the operands as given (it
     * rounds them to the products' dtype itself) */
    fallback(c, x, ldx, w, wdt, b, y, ldy, m, n, k, accumulate);
}

void cuda_linear(struct weft_kctx *c, const float *x, int64_t ldx, const void *w,
                 enum weft_dtype w_dtype, const float *b, float *y, int64_t ldy, int64_t m,
                 int64_t n, int64_t k, int accumulate)
{
    cuda_gemm(c, x, ldx, w, w_dtype, b, y, ldy, m, n, k, accumulate);
}
