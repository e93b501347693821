/* Shared between the CUDA backend's .cu files only: the context behind struct weft_kctx, error
 * recording, launch helpers, and the ops each file defines (one op per file, backend.cu fills
 * the table).
 *
 * Every op is enqueued on the context's one stream and returns at once; the first error (a bad
 * launch, a cuBLASLt failure, an illegal address seen at a sync) is logged once and kept, and
 * status/sync report it. After an error the ops do nothing: a context with a sticky device
 * error is unusable anyway, and a shape error must not be followed by work on garbage. */
#ifndef WEFT_KERNELS_CUDA_CUDA_INTERNAL_H
#define WEFT_KERNELS_CUDA_CUDA_INTERNAL_H

#include <cuda_runtime.h>
#include <stdint.h>

#include "common/dtype.h"
#include "common/status.h"
#include "kernels/cuda/blaslt.h"
#include "kernels/kernels.h"

/* Device memory grown on demand, stream-ordered (cudaMallocAsync): operand conversions and
 * im2col bands. It grows to the largest shape once and is then reused. */
struct cuda_scratch {
    void *p;
    size_t bytes;
};

/* A cuBLASLt algorithm chosen for one GEMM shape, kept so the heuristic runs once per shape. */
struct cuda_gemm_key {
    int64_t m, n, k, lda, ldb, ldd;
    int ab_type, bias, accumulate, align; /* cudaDataType_t of A and B, flags, alignment */
};
struct cuda_gemm_algo {
    struct cuda_gemm_key key;
    cublasLtMatmulAlgo_t algo;
    bool valid;
};
#define CUDA_GEMM_CACHE 128

struct weft_kctx {
    int device;
    cudaStream_t stream;
    cublasLtHandle_t lt;
    void *lt_ws; /* cuBLASLt workspace */
    size_t lt_ws_bytes;
    struct cuda_scratch xconv;  /* x converted for reduced-precision products */
    struct cuda_scratch wconv;  /* a weight converted to the products' dtype */
    struct cuda_scratch col;    /* conv2d's im2col band when the caller's workspace is short */
    struct cuda_scratch stats;  /* groupnorm's per-group sums (doubles) */
    enum weft_dtype compute;    /* f32, bf16 or f16 products (f32 accumulation) */
    weft_status_t status;       /* the first error */
    struct cuda_gemm_algo cache[CUDA_GEMM_CACHE];
    int cache_next;
    /* the device */
    char name[256];
    int cc_major, cc_minor, sm_count;
    size_t total_mem, smem_optin; /* bytes; the largest dynamic shared memory a block may opt in to */
    int lt_version;
};

/* Translate and log foreign codes (they never leave the backend); record the first failure in
 * the context. Return the weft status (WEFT_OK for success). */
weft_status_t cuda_check(struct weft_kctx *c, cudaError_t err, const char *what);
weft_status_t cuda_check_blas(struct weft_kctx *c, cublasStatus_t st, const char *what);
/* After a kernel launch: its launch error, if any, recorded. */
void cuda_launched(struct weft_kctx *c, const char *what);
/* An op refused before it launched (a shape this backend does not do): logged, recorded. */
void cuda_refuse(struct weft_kctx *c, const char *op, const char *why);
/* The op may run: no error recorded yet. */
static inline bool cuda_ok(const struct weft_kctx *c)
{
    return c->status == WEFT_OK;
}
/* The context's device made current on the calling thread (a worker computes on a thread of
 * its own, not the one that created the context; the runtime's current device is per thread),
 * a failure recorded. */
void cuda_enter(struct weft_kctx *c);
/* cuda_enter, then cuda_ok: the start of every op. */
static inline bool cuda_begin(struct weft_kctx *c)
{
    cuda_enter(c);
    return cuda_ok(c);
}
/* s grown to at least bytes (stream-ordered); NULL with the error recorded. */
void *cuda_scratch_get(struct weft_kctx *c, struct cuda_scratch *s, size_t bytes);
void cuda_scratch_free(struct weft_kctx *c, struct cuda_scratch *s);

/* Blocks for n items of threads each, capped for grid-stride loops. */
static inline unsigned cuda_blocks(int64_t n, int threads)
{
    int64_t b = (n + threads - 1) / threads;
    return (unsigned)(b < 1 ? 1 : (b > 65535 * 32 ? 65535 * 32 : b));
}

/* dst[i] = src[i] converted, n elements between f32, bf16 and f16 (convert.cu). */
void cuda_convert(struct weft_kctx *c, void *dst, enum weft_dtype dst_type, const void *src,
                  enum weft_dtype src_type, int64_t n);
/* rows x cols f32 at stride ld converted to contiguous rows of dst_type (convert.cu). */
void cuda_convert_rows(struct weft_kctx *c, void *dst, enum weft_dtype dst_type,
                       const float *src, int64_t ld, int64_t rows, int64_t cols);
/* y[m, n] (ldy) (+)= x[m, k] (ldx) . w[n, k]^T + b, w of wdt, products in the context's compute
 * dtype (linear.cu); conv2d calls it for its bands. */
void cuda_gemm(struct weft_kctx *c, const float *x, int64_t ldx, const void *w,
               enum weft_dtype wdt, const float *b, float *y, int64_t ldy, int64_t m, int64_t n,
               int64_t k, int accumulate);

/* The ops, one per file. */
void cuda_copy_rows(struct weft_kctx *c, float *dst, int64_t ld_dst, const float *src,
                    int64_t ld_src, int64_t rows, int64_t cols);
void cuda_fill(struct weft_kctx *c, float *dst, float value, int64_t n);
void cuda_linear(struct weft_kctx *c, const float *x, int64_t ldx, const void *w,
                 enum weft_dtype w_dtype, const float *b, float *y, int64_t ldy, int64_t m,
                 int64_t n, int64_t k, int accumulate);
void cuda_layernorm(struct weft_kctx *c, const float *x, int64_t ldx, float *y, int64_t ldy,
                    int64_t rows, int64_t d, float eps);
void cuda_rmsnorm(struct weft_kctx *c, float *x, int64_t ld, const float *w, int64_t rows,
                  int64_t heads, int64_t d, float eps);
void cuda_rope(struct weft_kctx *c, float *x, int64_t ld, const float *cs, const float *sn,
               int64_t rows, int64_t heads, int64_t d);
void cuda_attention(struct weft_kctx *c, const float *q, int64_t ldq, const float *k,
                    int64_t ldk, const float *v, int64_t ldv, float *out, int64_t ldo,
                    float *lse, int64_t sq, int64_t sk, int64_t heads, int64_t d, float scale);
void cuda_attention_masked(struct weft_kctx *c, const float *q, int64_t ldq, const float *k,
                           int64_t ldk, const float *v, int64_t ldv, float *out, int64_t ldo,
                           int64_t sq, int64_t sk, int64_t heads, int64_t d, float scale,
                           const float *bias, int causal);
void cuda_attn_merge(struct weft_kctx *c, float *out, int64_t ldo, float *lse,
                     const float *out_i, int64_t ldi, const float *lse_i, int64_t rows,
                     int64_t heads, int64_t d);
void cuda_gelu_tanh(struct weft_kctx *c, const float *x, int64_t ldx, float *y, int64_t ldy,
                    int64_t rows, int64_t n);
void cuda_silu(struct weft_kctx *c, const float *x, float *y, int64_t n);
void cuda_quick_gelu(struct weft_kctx *c, const float *x, int64_t ldx, float *y, int64_t ldy,
                     int64_t rows, int64_t n);
void cuda_mul(struct weft_kctx *c, float *y, int64_t ldy, const float *x, int64_t ldx,
              int64_t rows, int64_t n);
void cuda_swiglu(struct weft_kctx *c, const float *x, int64_t ldx, float *y, int64_t ldy,
                 int64_t rows, int64_t n);
void cuda_scale_shift(struct weft_kctx *c, const float *x, int64_t ldx, const float *w,
                      const float *b, float *y, int64_t ldy, int64_t rows, int64_t d);
void cuda_modulate(struct weft_kctx *c, const float *x, int64_t ldx, const float *shift,
                   const float *scale, float *y, int64_t ldy, int64_t rows, int64_t d);
void cuda_gated_add(struct weft_kctx *c, float *x, int64_t ldx, const float *gate,
                    const float *y, int64_t ldy, int64_t rows, int64_t d);
void cuda_timestep_embed(struct weft_kctx *c, const float *t, int64_t n, float *out,
                         int64_t dim, float scale);
void cuda_conv2d_pack(struct weft_kctx *c, const void *w, enum weft_dtype w_dtype, void *packed,
                      int64_t cout, int64_t cin, int64_t k);
size_t cuda_conv2d_workspace(struct weft_kctx *c, int64_t h, int64_t w, int64_t cin,
                             int64_t cout, int64_t k);
void cuda_conv2d(struct weft_kctx *c, const float *x, const void *wt, enum weft_dtype w_dtype,
                 const float *b, float *y, int64_t h, int64_t w, int64_t cin, int64_t cout,
                 int64_t k, int accumulate, void *ws);
void cuda_groupnorm(struct weft_kctx *c, const float *x, float *y, const float *gamma,
                    const float *beta, int64_t n, int64_t ch, int64_t groups, float eps,
                    int silu);
void cuda_upsample2x(struct weft_kctx *c, const float *x, float *y, int64_t h, int64_t w,
                     int64_t ch);

#endif
