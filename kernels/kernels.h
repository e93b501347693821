/* The kernel backend table: one set of operations per backend (CPU reference, CUDA).
 *
 * Model code calls the math only through this table, on buffers the backend allocated, so a
 * forward pass runs unchanged on any backend. Activations are f32. Weights stay in their
 * checkpoint's dtype (f32, bf16, f16): the operations that read a weight matrix (linear,
 * conv2d) take its dtype and read it as stored; small parameter vectors (biases, norm weights)
 * are f32. The backend's compute dtype (set_compute) says whether products run in f32 or in
 * bf16 with f32 accumulation. Row-major throughout; every
 * operation that reads or writes rows takes a row stride (in elements) so model code can work
 * on column slices (heads of a joint sequence, one half of a packed projection) without copies.
 *
 * Operations return nothing: a backend records its first error (a CUDA launch failure, say) and
 * its status op reports it; model code checks once per block. The CPU backend never fails
 * after its buffers are allocated.
 *
 * Memory. Every pointer an operation takes is the backend's memory (buf_alloc), never host
 * memory, unless host_visible says the two are the same. Host code reaches a buffer only through
 * upload, download and the operations; it never reads or writes one directly. Operations run in
 * order on one stream per context: upload returns once the host memory may be reused; download
 * fills host memory that may be read only after sync (which waits for everything queued). The
 * CPU backend's "devmem" variant (weft_kernels_cpu_devmem_create) keeps these rules as a GPU
 * would, and checks them: its buffers cannot be touched from the host, every pointer an
 * operation gets must lie in one of its buffers with the extent the operation reads, and a
 * download's host memory holds NaNs until sync. */
#ifndef WEFT_KERNELS_KERNELS_H
#define WEFT_KERNELS_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "common/dtype.h"
#include "common/status.h"
#include "common/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

struct weft_kctx; /* a backend instance: the CPU thread pool, or a CUDA stream and handles */

struct weft_kernels {
    const char *name;
    int host_visible; /* buffers are plain host memory (the CPU backend): no staging needed */

    /* The context and everything it holds (NULL: nothing). */
    void (*destroy)(struct weft_kctx *ctx);
    /* Memory on the backend's device (zeroed). */
    weft_status_t (*buf_alloc)(struct weft_kctx *ctx, size_t bytes, void **ptr_p);
    void (*buf_free)(struct weft_kctx *ctx, void *ptr, size_t bytes);
    void (*upload)(struct weft_kctx *ctx, void *dst, const void *host, size_t bytes);
    void (*download)(struct weft_kctx *ctx, void *host, const void *src, size_t bytes);
    /* rows x cols floats between strided row sets on the device */
    void (*copy_rows)(struct weft_kctx *ctx, float *dst, int64_t ld_dst, const float *src,
                      int64_t ld_src, int64_t rows, int64_t cols);
    void (*fill)(struct weft_kctx *ctx, float *dst, float value, int64_t n);
    weft_status_t (*sync)(struct weft_kctx *ctx);
    weft_status_t (*status)(struct weft_kctx *ctx);
    /* The dtype products are computed in: f32, or bf16 (f16) with f32 accumulation, x and the
     * weights rounded as they enter the product, as torch's reduced-precision matmul does.
     * WEFT_ERR_UNSUPPORTED when this backend or device has no such path: f32 is kept. */
    weft_status_t (*set_compute)(struct weft_kctx *ctx, enum weft_dtype dtype);
    /* One line naming the GEMM, what it dispatched to, the compute dtype and the threads. */
    void (*describe)(const struct weft_kctx *ctx, char *buf, size_t len);

    /* y[m, n] (row stride ldy) = x[m, k] (row stride ldx) . w[n, k]^T + b[n] (b may be NULL),
     * w contiguous rows of w_dtype (f32, bf16 or f16) as the checkpoint stores them. With
     * accumulate, y += instead of =. */
    void (*linear)(struct weft_kctx *ctx, const float *x, int64_t ldx, const void *w,
                   enum weft_dtype w_dtype, const float *b, float *y, int64_t ldy, int64_t m,
                   int64_t n, int64_t k, int accumulate);
    /* A linear weight packed once at load time into the backend's own layout, so linear_packed
     * never rearranges it per call (the CPU: the GEMM's weight panels; at a few dozen rows
     * packing them on every call cost a quarter of a forward). linear_pack_bytes: the bytes of
     * w [n, k] of w_dtype packed, 0 when this backend keeps such a weight as stored (then call
     * linear; the CPU packs bf16 weights on its AVX-512 kernels). linear_pack writes them to
     * packed (64-byte aligned, as buf_alloc's memory is; not overlapping w); the weight as
     * stored may then be freed. NULL entries: the backend packs nothing (CUDA). */
    size_t (*linear_pack_bytes)(struct weft_kctx *ctx, enum weft_dtype w_dtype, int64_t n,
                                int64_t k);
    void (*linear_pack)(struct weft_kctx *ctx, const void *w, enum weft_dtype w_dtype,
                        void *packed, int64_t n, int64_t k);
    /* linear on a packed weight: the result of linear on the weight as stored, bit for bit
     * when m is above a few rows; with few rows (the CPU: 6) the products are f32 as linear's
     * are, summed in another order. Any compute dtype, whichever was set when it was packed. */
    void (*linear_packed)(struct weft_kctx *ctx, const float *x, int64_t ldx, const void *packed,
                          const float *b, float *y, int64_t ldy, int64_t m, int64_t n, int64_t k,
                          int accumulate);
    /* y = (x - mean) / sqrt(var + eps) over each row of d (no affine), rows of stride ld. */
    void (*layernorm)(struct weft_kctx *ctx, const float *x, int64_t ldx, float *y, int64_t ldy,
                      int64_t rows, int64_t d, float eps);
    /* In place, each d-vector: x * rsqrt(mean(x^2) + eps) * w; rows of h heads x d, stride ld. */
    void (*rmsnorm)(struct weft_kctx *ctx, float *x, int64_t ld, const float *w, int64_t rows,
                    int64_t heads, int64_t d, float eps);
    /* In place, interleaved pairs: x[2i] = x[2i]c - x[2i+1]s, x[2i+1] = x[2i+1]c + x[2i]s with
     * cos/sin rows [rows, d] (each pair's two entries equal), for each of h heads. */
    void (*rope)(struct weft_kctx *ctx, float *x, int64_t ld, const float *cos,
                 const float *sin, int64_t rows, int64_t heads, int64_t d);
    /* Softmax attention for h heads: q [sq, h, d] (stride ldq), k/v [sk, h, d] (ldk, ldv) ->
     * out [sq, h, d] (ldo) and, when lse != NULL, the per-row log-sum-exp lse[sq, h]
     * (natural log, of the scaled scores). Never forms the sq x sk matrix. */
    void (*attention)(struct weft_kctx *ctx, const float *q, int64_t ldq, const float *k,
                      int64_t ldk, const float *v, int64_t ldv, float *out, int64_t ldo,
                      float *lse, int64_t sq, int64_t sk, int64_t heads, int64_t d, float scale);
    /* The same with an additive bias on the scaled scores, bias [heads, sq, sk] contiguous
     * (NULL: none; T5's relative position bias), and with causal set, query i attends to keys
     * j <= i only (CLIP's causal mask; sq == sk). No log-sum-exp. */
    void (*attention_masked)(struct weft_kctx *ctx, const float *q, int64_t ldq, const float *k,
                             int64_t ldk, const float *v, int64_t ldv, float *out, int64_t ldo,
                             int64_t sq, int64_t sk, int64_t heads, int64_t d, float scale,
                             const float *bias, int causal);
    /* Merge a partial attention result into an accumulated one by their LSEs (ring attention):
     * out = (e^lse out + e^lse_i out_i) / (e^lse + e^lse_i), lse = log(e^lse + e^lse_i). */
    void (*attn_merge)(struct weft_kctx *ctx, float *out, int64_t ldo, float *lse,
                       const float *out_i, int64_t ldi, const float *lse_i, int64_t rows,
                       int64_t heads, int64_t d);
    /* Elementwise on rows x n (strides ldx, ldy): y = gelu_tanh(x), y = silu(x). */
    void (*gelu_tanh)(struct weft_kctx *ctx, const float *x, int64_t ldx, float *y, int64_t ldy,
                      int64_t rows, int64_t n);
    void (*silu)(struct weft_kctx *ctx, const float *x, float *y, int64_t n);
    /* y = x sigmoid(1.702 x) (CLIP's quick_gelu), rows x n with strides ldx, ldy. */
    void (*quick_gelu)(struct weft_kctx *ctx, const float *x, int64_t ldx, float *y, int64_t ldy,
                       int64_t rows, int64_t n);
    /* y *= x elementwise, rows x n with strides (a gated feed-forward's product). */
    void (*mul)(struct weft_kctx *ctx, float *y, int64_t ldy, const float *x, int64_t ldx,
                int64_t rows, int64_t n);
    /* SwiGLU of a fused projection: y[:, j] = silu(x[:, j]) * x[:, n + j] for j < n (x holds
     * 2n columns of each row: the gate half, then the value half). y must not overlap x. */
    void (*swiglu)(struct weft_kctx *ctx, const float *x, int64_t ldx, float *y, int64_t ldy,
                   int64_t rows, int64_t n);
    /* y = x w + b, w and b [d] broadcast over rows (b may be NULL): a norm's affine part. y may
     * be x. */
    void (*scale_shift)(struct weft_kctx *ctx, const float *x, int64_t ldx, const float *w,
                        const float *b, float *y, int64_t ldy, int64_t rows, int64_t d);
    /* AdaLN modulation: y = x * (1 + scale) + shift, scale/shift [d] broadcast over rows. */
    void (*modulate)(struct weft_kctx *ctx, const float *x, int64_t ldx, const float *shift,
                     const float *scale, float *y, int64_t ldy, int64_t rows, int64_t d);
    /* Gated residual: x += gate * y, gate [d] broadcast over rows (gate NULL: plain add). */
    void (*gated_add)(struct weft_kctx *ctx, float *x, int64_t ldx, const float *gate,
                      const float *y, int64_t ldy, int64_t rows, int64_t d);
    /* Sinusoidal timestep embedding (Diffusers' get_timestep_embedding with
     * flip_sin_to_cos=True, downscale_freq_shift=0, max_period=10000): out[n, dim] =
     * [cos(a), sin(a)], a = scale (t f) (two f32 roundings, as torch's), f_j =
     * exp(-ln(10000) j / (dim/2)); scale is Timesteps' (1 for FLUX, 1000 for Qwen-Image). */
    void (*timestep_embed)(struct weft_kctx *ctx, const float *t, int64_t n, float *out,
                           int64_t dim, float scale);

    /* Image ops (the VAE). An image is its pixels as rows, [h * w, c] row-major (NHWC). */

    /* Repack a convolution weight from PyTorch's [cout, cin, k, k] into this backend's layout,
     * in its own dtype (f32, bf16 or f16: the same number of elements, the same bytes), once at
     * load time. */
    void (*conv2d_pack)(struct weft_kctx *ctx, const void *w, enum weft_dtype w_dtype,
                        void *packed, int64_t cout, int64_t cin, int64_t k);
    /* Bytes of workspace conv2d needs for this shape (0: none). */
    size_t (*conv2d_workspace)(struct weft_kctx *ctx, int64_t h, int64_t w, int64_t cin,
                               int64_t cout, int64_t k);
    /* y [h, w, cout] = conv(x [h, w, cin], packed weight wt of w_dtype) + b (b may be NULL):
     * stride 1, zero padding k / 2, k 1 or 3. With accumulate, y += (a residual connection,
     * fused). ws holds conv2d_workspace bytes. x and y do not overlap. */
    void (*conv2d)(struct weft_kctx *ctx, const float *x, const void *wt, enum weft_dtype w_dtype,
                   const float *b, float *y, int64_t h, int64_t w, int64_t cin, int64_t cout,
                   int64_t k, int accumulate, void *ws);
    /* GroupNorm on n pixels of c channels: groups of c / groups consecutive channels, mean and
     * variance of each group over all its n x c / groups values; y = (x - mean) /
     * sqrt(var + eps) * gamma + beta, then y = silu(y) when silu is set. y may be x;
     * c is at most 8192. */
    void (*groupnorm)(struct weft_kctx *ctx, const float *x, float *y, const float *gamma,
                      const float *beta, int64_t n, int64_t c, int64_t groups, float eps,
                      int silu);
    /* Nearest-neighbour 2x upsampling: y [2h, 2w, c] from x [h, w, c]. */
    void (*upsample2x)(struct weft_kctx *ctx, const float *x, float *y, int64_t h, int64_t w,
                       int64_t c);
};

/* Devices (struct weft_device, common/tensor.h) by name. */
/* "cpu", "cpu-devmem", "cuda" (= cuda:0), "cuda:N", or "auto": the GPU of this process's local
 * rank (local_rank modulo the GPUs present; GPU 0 when local_rank < 0) when there is a GPU, else
 * the CPU. WEFT_ERR_INVALID with a one-line reason in why for anything else. */
weft_status_t weft_device_parse(const char *text, int local_rank, struct weft_device *dev_p,
                                char *why, size_t why_len);
/* "cpu", "cpu-devmem", "cuda:N". */
void weft_device_name(const struct weft_device *dev, char *buf, size_t len);
/* The backend of dev (threads: the CPU backends' count, 0 every usable core). A CUDA device in
 * a build without CUDA, or on a machine without that GPU, fails with a one-line reason in why
 * (WEFT_ERR_UNSUPPORTED, WEFT_ERR_NO_DEVICE). Destroy with ops->destroy(ctx). */
weft_status_t weft_kernels_create(const struct weft_device *dev, int threads,
                                  const struct weft_kernels **ops_p, struct weft_kctx **ctx_p,
                                  char *why, size_t why_len);
/* The GPUs this process can use (0 in a build without CUDA or without a driver), and what
 * each is. */
struct weft_gpu_info {
    int index;
    char name[256];
    uint64_t memory; /* bytes */
    int sm_count, cc_major, cc_minor;
    uint64_t peers; /* bit j: it can reach GPU j directly (NVLink or PCIe peer access) */
};
int weft_gpu_count(void);
weft_status_t weft_gpu_info(int index, struct weft_gpu_info *info_p);
/* Whether ops is one of the CPU backends (weft_kernels_cpu_* apply to its context). */
int weft_kernels_is_cpu(const struct weft_kernels *ops);

/* The CUDA backend on device ordinal `device` (builds with CUDA only): one stream, a cuBLASLt
 * handle, buffers in device memory (host_visible 0). WEFT_ERR_NO_DEVICE when there is no such
 * GPU. */
weft_status_t weft_kernels_cuda_create(int device, const struct weft_kernels **ops_p,
                                       struct weft_kctx **ctx_p);

/* The CPU backend: threads 0 = every core this process may run on. */
weft_status_t weft_kernels_cpu_create(int threads, const struct weft_kernels **ops_p,
                                      struct weft_kctx **ctx_p);
/* The CPU backend with device-like memory (host_visible 0), to test model and worker code
 * against the rules above without a GPU: the same kernels, the same results bit for bit. A
 * pointer that breaks a rule is a recorded error (WEFT_ERR_INTERNAL, logged with the op and the
 * argument) and the op does nothing; a direct host access to a buffer faults (SIGSEGV). The
 * weft_kernels_cpu_* functions apply to its context too. */
weft_status_t weft_kernels_cpu_devmem_create(int threads, const struct weft_kernels **ops_p,
                                             struct weft_kctx **ctx_p);
void weft_kernels_cpu_destroy(struct weft_kctx *ctx);
int weft_kernels_cpu_threads(const struct weft_kctx *ctx);
/* A new thread count (>= 1), between jobs: the pool and its scratch are remade. On failure the
 * old count is kept where it can be. */
weft_status_t weft_kernels_cpu_set_threads(struct weft_kctx *ctx, int threads);
/* The cores this process may run on (its affinity mask). */
int weft_kernels_cpu_usable_cores(void);
/* set_compute: f32 (the default) or bf16 (needs avx512_bf16; f16 is not a CPU path): else f32
 * is kept and WEFT_ERR_UNSUPPORTED returned. */
weft_status_t weft_kernels_cpu_set_compute(struct weft_kctx *ctx, enum weft_dtype dtype);
/* One line: the GEMM, the ISA it dispatched to from cpuid, the compute dtype, the threads
 * ("weft gemm, avx512_bf16 kernels, f32 compute, 2 threads"). */
void weft_kernels_cpu_describe(const struct weft_kctx *ctx, char *buf, size_t len);

/* How the CPU backend computes 3x3 convolutions (1x1 ones are always one GEMM). */
enum weft_conv_algo {
    WEFT_CONV_DEFAULT, /* the faster one on the machines measured (bench/README.md) */
    WEFT_CONV_GEMM,    /* im2col in row bands + the backend's GEMM */
    WEFT_CONV_DIRECT,  /* register-blocked direct kernel, no im2col */
    WEFT_CONV_ALGO_COUNT
};
void weft_kernels_cpu_set_conv_algo(struct weft_kctx *ctx, enum weft_conv_algo algo);

#ifdef __cplusplus
}
#endif

#endif
