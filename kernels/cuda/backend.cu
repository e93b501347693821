/* The CUDA backend: its table, the context (one stream, a cuBLASLt handle and workspace),
 * device memory, transfers, synchronisation and the compute dtype. The ops are one per file in
 * this folder. */
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

#include "kernels/cuda/cuda.h"
#include "kernels/cuda/cuda_internal.h"

#include "common/alloc.h"
#include "common/log.h"

#define LT_WORKSPACE (32u << 20) /* cuBLASLt's recommendation for Hopper */

void *cuda_scratch_get(struct weft_kctx *c, struct cuda_scratch *s, size_t bytes)
{
    if (bytes <= s->bytes)
        return s->p;
    if (s->p)
        (void)cuda_check(c, cudaFreeAsync(s->p, c->stream), "cudaFreeAsync (scratch)");
    s->p = NULL;
    s->bytes = 0;
    void *p = NULL;
    if (cuda_check(c, cudaMallocAsync(&p, bytes, c->stream), "cudaMallocAsync (scratch)") !=
        WEFT_OK)
        return NULL;
    s->p = p;
    s->bytes = bytes;
    return p;
}

void cuda_scratch_free(struct weft_kctx *c, struct cuda_scratch *s)
{
    if (s->p)
        (void)cudaFreeAsync(s->p, c->stream);
    s->p = NULL;
    s->bytes = 0;
}

static weft_status_t buf_alloc(struct weft_kctx *c, size_t bytes, void **ptr_p)
{
    cuda_enter(c);
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e == cudaErrorMemoryAllocation) {
        /* the caller's to handle (it says what it was for): the context stays usable */
        (void)cudaGetLastError();
        WEFT_LOG_DEBUG("cuda", "cudaMalloc(%zu): out of device memory", bytes);
        return WEFT_ERR_NOMEM;
    }
    weft_status_t st = cuda_check(c, e, "cudaMalloc");
    if (st == WEFT_OK &&
        (st = cuda_check(c, cudaMemsetAsync(p, 0, bytes, c->stream), "cudaMemsetAsync")) !=
            WEFT_OK)
        (void)cudaFree(p);
    if (st == WEFT_OK)
        *ptr_p = p;
    return st;
}

static void buf_free(struct weft_kctx *c, void *ptr, size_t bytes)
{
    (void)bytes;
    cuda_enter(c);
    if (ptr)
        (void)cuda_check(c, cudaFree(ptr), "cudaFree");
}

static void upload(struct weft_kctx *c, void *dst, const void *host, size_t bytes)
{
    if (cuda_begin(c) && bytes)
        (void)cuda_check(c, cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, c->stream),
                         "upload (cudaMemcpyAsync)");
}

static void download(struct weft_kctx *c, void *host, const void *src, size_t bytes)
{
    if (cuda_begin(c) && bytes)
        (void)cuda_check(c, cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, c->stream),
                         "download (cudaMemcpyAsync)");
}

static weft_status_t sync_stream(struct weft_kctx *c)
{
    cuda_enter(c);
    (void)cuda_check(c, cudaStreamSynchronize(c->stream), "cudaStreamSynchronize");
    return c->status;
}

/* Without waiting: an error the device already reported (a fault in a finished kernel). */
static weft_status_t status(struct weft_kctx *c)
{
    cuda_enter(c);
    if (c->status == WEFT_OK) {
        cudaError_t e = cudaStreamQuery(c->stream);
        if (e != cudaErrorNotReady)
            (void)cuda_check(c, e, "the stream");
    }
    return c->status;
}

static weft_status_t set_compute(struct weft_kctx *c, enum weft_dtype dtype)
{
    if (dtype != WEFT_DTYPE_F32 && dtype != WEFT_DTYPE_BF16 && dtype != WEFT_DTYPE_F16) {
        c->compute = WEFT_DTYPE_F32;
        return WEFT_ERR_UNSUPPORTED;
    }
    if (dtype == WEFT_DTYPE_BF16 && c->cc_major < 8) { /* bf16 tensor cores: Ampere on */
        c->compute = WEFT_DTYPE_F32;
        return WEFT_ERR_UNSUPPORTED;
    }
    c->compute = dtype;
    return WEFT_OK;
}

static void describe(const struct weft_kctx *c, char *buf, size_t len)
{
    snprintf(buf, len,
             "cuda:%d %s (sm_%d%d, %d SMs, %.1f GiB), cuBLASLt %d GEMM, weft flash attention "
             "(f32), %s compute",
             c->device, c->name, c->cc_major, c->cc_minor, c->sm_count,
             (double)c->total_mem / (double)(1ull << 30), c->lt_version,
             weft_dtype_name(c->compute));
}

static void destroy(struct weft_kctx *c)
{
    if (!c)
        return;
    cuda_enter(c);
    if (c->stream)
        (void)cudaStreamSynchronize(c->stream);
    cuda_scratch_free(c, &c->xconv);
    cuda_scratch_free(c, &c->wconv);
    cuda_scratch_free(c, &c->col);
    cuda_scratch_free(c, &c->stats);
    if (c->stream)
        (void)cudaStreamSynchronize(c->stream);
    if (c->lt_ws)
        (void)cudaFree(c->lt_ws);
    if (c->lt)
        (void)cuda_lt.cublasLtDestroy(c->lt);
    if (c->stream)
        (void)cudaStreamDestroy(c->stream);
    weft_free(c);
}

static const struct weft_kernels cuda_kernels = {
    .name = "cuda",
    .host_visible = 0,
    .destroy = destroy,
    .buf_alloc = buf_alloc,
    .buf_free = buf_free,
    .upload = upload,
    .download = download,
    .copy_rows = cuda_copy_rows,
    .fill = cuda_fill,
    .sync = sync_stream,
    .status = status,
    .set_compute = set_compute,
    .describe = describe,
    .linear = cuda_linear,
    .linear_pack_bytes = NULL, /* weights stay as stored: cuBLASLt takes them so */
    .linear_pack = NULL,
    .linear_packed = NULL,
    .layernorm = cuda_layernorm,
    .rmsnorm = cuda_rmsnorm,
    .rope = cuda_rope,
    .attention = cuda_attention,
    .attention_masked = cuda_attention_masked,
    .attn_merge = cuda_attn_merge,
    .gelu_tanh = cuda_gelu_tanh,
    .silu = cuda_silu,
    .quick_gelu = cuda_quick_gelu,
    .mul = cuda_mul,
    .swiglu = cuda_swiglu,
    .scale_shift = cuda_scale_shift,
    .modulate = cuda_modulate,
    .gated_add = cuda_gated_add,
    .timestep_embed = cuda_timestep_embed,
    .conv2d_pack = cuda_conv2d_pack,
    .conv2d_workspace = cuda_conv2d_workspace,
    .conv2d = cuda_conv2d,
    .groupnorm = cuda_groupnorm,
    .upsample2x = cuda_upsample2x,
};

extern "C" weft_status_t weft_kernels_cuda_create(int device, const struct weft_kernels **ops_p,
                                                  struct weft_kctx **ctx_p)
{
    int n = 0;
    if (weft_cuda_device_count(&n, NULL, 0) != WEFT_OK || device < 0 || device >= n) {
        WEFT_LOG_ERROR("cuda", "cuda:%d: no such GPU (%d usable)", device, n);
        return WEFT_ERR_NO_DEVICE;
    }
    struct weft_kctx *c = (struct weft_kctx *)weft_calloc(1, sizeof(*c));
    if (!c)
        return WEFT_ERR_NOMEM;
    c->device = device;
    c->compute = WEFT_DTYPE_F32;
    char why[256];
    weft_status_t st = cuda_lt_open(why, sizeof(why));
    if (st != WEFT_OK) {
        WEFT_LOG_ERROR("cuda", "cuda:%d: %s", device, why);
        weft_free(c);
        return st;
    }
    st = cuda_check(c, cudaSetDevice(device), "cudaSetDevice");
    cudaDeviceProp prop;
    if (st == WEFT_OK)
        st = cuda_check(c, cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
    if (st == WEFT_OK) {
        snprintf(c->name, sizeof(c->name), "%s", prop.name);
        c->cc_major = prop.major, c->cc_minor = prop.minor;
        c->sm_count = prop.multiProcessorCount;
        c->total_mem = prop.totalGlobalMem;
        c->smem_optin = prop.sharedMemPerBlockOptin;
        c->lt_version = (int)cuda_lt.cublasLtGetVersion();
        if (c->cc_major < 8) {
            WEFT_LOG_ERROR("cuda", "cuda:%d: %s is sm_%d%d; this build runs on sm_80 and newer",
                           device, c->name, c->cc_major, c->cc_minor);
            st = c->status = WEFT_ERR_UNSUPPORTED;
        }
    }
    if (st == WEFT_OK)
        st = cuda_check(c, cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking),
                        "cudaStreamCreate");
    if (st == WEFT_OK)
        st = cuda_check_blas(c, cuda_lt.cublasLtCreate(&c->lt), "cublasLtCreate");
    if (st == WEFT_OK && (st = cuda_check(c, cudaMalloc(&c->lt_ws, LT_WORKSPACE),
                                          "cudaMalloc (cuBLASLt workspace)")) == WEFT_OK)
        c->lt_ws_bytes = LT_WORKSPACE;
    if (st != WEFT_OK) {
        destroy(c);
        return st;
    }
    WEFT_LOG_DEBUG("cuda", "cuda:%d: %s, sm_%d%d, %d SMs, %zu MiB", device, c->name, c->cc_major,
                   c->cc_minor, c->sm_count, c->total_mem >> 20);
    *ops_p = &cuda_kernels;
    *ctx_p = c;
    return WEFT_OK;
}
