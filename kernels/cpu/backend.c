/* The CPU backend: its table, memory (huge-page buffers) and the thread pool's lifetime. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/alloc.h"
#include "common/log.h"
#include "kernels/cpu/cpu.h"

static weft_status_t buf_alloc(struct weft_kctx *ctx, size_t bytes, void **ptr_p)
{
    (void)ctx;
    void *p = weft_big_alloc(bytes);
    if (!p)
        return WEFT_ERR_NOMEM;
    *ptr_p = p;
    return WEFT_OK;
}

static void buf_free(struct weft_kctx *ctx, void *ptr, size_t bytes)
{
    (void)ctx;
    weft_big_free(ptr, bytes);
}

static void upload(struct weft_kctx *ctx, void *dst, const void *host, size_t bytes)
{
    (void)ctx;
    if (dst != host)
        memcpy(dst, host, bytes);
}

struct rows_arg {
    float *dst;
    const float *src;
    int64_t ld_dst, ld_src, cols;
};

static void copy_rows_range(void *varg, int64_t b, int64_t e, int thread)
{
    (void)thread;
    const struct rows_arg *a = varg;
    for (int64_t r = b; r < e; r++)
        memcpy(a->dst + r * a->ld_dst, a->src + r * a->ld_src, (size_t)a->cols * sizeof(float));
}

static void copy_rows(struct weft_kctx *ctx, float *dst, int64_t ld_dst, const float *src,
                      int64_t ld_src, int64_t rows, int64_t cols)
{
    struct rows_arg a = {dst, src, ld_dst, ld_src, cols};
    cpu_parallel(ctx, rows, 1 + 16384 / (cols + 1), copy_rows_range, &a);
}

static void fill(struct weft_kctx *ctx, float *dst, float value, int64_t n)
{
    (void)ctx;
    for (int64_t i = 0; i < n; i++)
        dst[i] = value;
}

static weft_status_t no_error(struct weft_kctx *ctx)
{
    (void)ctx;
    return WEFT_OK;
}

const struct weft_kernels cpu_host_kernels = {
    .name = "cpu",
    .host_visible = 1,
    .destroy = weft_kernels_cpu_destroy,
    .buf_alloc = buf_alloc,
    .buf_free = buf_free,
    .upload = upload,
    .download = upload,
    .copy_rows = copy_rows,
    .fill = fill,
    .sync = no_error,
    .status = no_error,
    .set_compute = weft_kernels_cpu_set_compute,
    .describe = weft_kernels_cpu_describe,
    .linear = cpu_linear,
    .linear_pack_bytes = cpu_linear_pack_bytes,
    .linear_pack = cpu_linear_pack,
    .linear_packed = cpu_linear_packed,
    .layernorm = cpu_layernorm,
    .rmsnorm = cpu_rmsnorm,
    .rope = cpu_rope,
    .attention = cpu_attention,
    .attention_masked = cpu_attention_masked,
    .attn_merge = cpu_attn_merge,
    .gelu_tanh = cpu_gelu_tanh,
    .silu = cpu_silu,
    .quick_gelu = cpu_quick_gelu,
    .mul = cpu_mul,
    .swiglu = cpu_swiglu,
    .scale_shift = cpu_scale_shift,
    .modulate = cpu_modulate,
    .gated_add = cpu_gated_add,
    .timestep_embed = cpu_timestep_embed,
    .conv2d_pack = cpu_conv2d_pack,
    .conv2d_workspace = cpu_conv2d_workspace,
    .conv2d = cpu_conv2d,
    .groupnorm = cpu_groupnorm,
    .upsample2x = cpu_upsample2x,
};

int weft_kernels_cpu_usable_cores(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    return 1;
}

/* What depends on the thread count: the pool and each thread's scratch. */
static void threads_fini(struct weft_kctx *ctx)
{
    cpu_pool_destroy(ctx->pool);
    ctx->pool = NULL;
    for (int i = 0; ctx->scratch && i < ctx->threads; i++)
        weft_big_free(ctx->scratch[i], CPU_SCRATCH_FLOATS * sizeof(float));
    weft_free(ctx->scratch);
    ctx->scratch = NULL;
    for (int i = 0; ctx->gemm_scratch && i < ctx->threads; i++)
        weft_big_free(ctx->gemm_scratch[i], ctx->gemm_scratch_bytes);
    weft_free(ctx->gemm_scratch);
    ctx->gemm_scratch = NULL;
}

static weft_status_t threads_init(struct weft_kctx *ctx, int threads)
{
    ctx->threads = threads;
    weft_status_t st = cpu_pool_create(ctx->threads, &ctx->pool);
    if (st != WEFT_OK)
        return st;
    ctx->scratch = weft_calloc((size_t)ctx->threads, sizeof(*ctx->scratch));
    for (int i = 0; ctx->scratch && i < ctx->threads; i++)
        if (!(ctx->scratch[i] = weft_big_alloc(CPU_SCRATCH_FLOATS * sizeof(float))))
            break;
    ctx->gemm_scratch = weft_calloc((size_t)ctx->threads, sizeof(*ctx->gemm_scratch));
    for (int i = 0; ctx->gemm_scratch && i < ctx->threads; i++)
        if (!(ctx->gemm_scratch[i] = weft_big_alloc(ctx->gemm_scratch_bytes)))
            break;
    if (!ctx->scratch || !ctx->scratch[ctx->threads - 1] || !ctx->gemm_scratch ||
        !ctx->gemm_scratch[ctx->threads - 1]) {
        threads_fini(ctx);
        return WEFT_ERR_NOMEM;
    }
    return WEFT_OK;
}

weft_status_t weft_kernels_cpu_create(int threads, const struct weft_kernels **ops_p,
                                      struct weft_kctx **ctx_p)
{
    struct weft_kctx *ctx = weft_calloc(1, sizeof(*ctx));
    if (!ctx)
        return WEFT_ERR_NOMEM;
    /* the GEMM's kernels from what this CPU can do, and the size of their packing buffers */
    ctx->isa = cpu_isa_detect();
    cpu_gemm_kernels_get(ctx->isa, false, &ctx->gemm_f32);
    if (!cpu_gemm_kernels_get(ctx->isa, true, &ctx->gemm_bf16))
        ctx->gemm_bf16 = ctx->gemm_f32;
    size_t a = cpu_gemm_scratch_bytes(&ctx->gemm_f32, CPU_GEMM_NC);
    size_t b = cpu_gemm_scratch_bytes(&ctx->gemm_bf16, CPU_GEMM_NC);
    ctx->gemm_scratch_bytes = a > b ? a : b;
    a = cpu_gemm_xpack_bytes(&ctx->gemm_f32), b = cpu_gemm_xpack_bytes(&ctx->gemm_bf16);
    ctx->gemm_xpack_bytes = a > b ? a : b;
    if (!(ctx->gemm_xpack = weft_big_alloc(ctx->gemm_xpack_bytes))) {
        weft_free(ctx);
        return WEFT_ERR_NOMEM;
    }
    weft_status_t st = threads_init(ctx, threads > 0 ? threads : weft_kernels_cpu_usable_cores());
    if (st != WEFT_OK) {
        weft_big_free(ctx->gemm_xpack, ctx->gemm_xpack_bytes);
        weft_free(ctx);
        return st;
    }
    char what[160];
    weft_kernels_cpu_describe(ctx, what, sizeof(what));
    WEFT_LOG_DEBUG("kernels", "cpu backend: %s", what);
    *ops_p = &cpu_host_kernels;
    *ctx_p = ctx;
    return WEFT_OK;
}

weft_status_t weft_kernels_cpu_set_threads(struct weft_kctx *ctx, int threads)
{
    if (threads < 1)
        return WEFT_ERR_INVALID;
    if (threads == ctx->threads)
        return WEFT_OK;
    const int before = ctx->threads;
    threads_fini(ctx);
    weft_status_t st = threads_init(ctx, threads);
    if (st != WEFT_OK && threads_init(ctx, before) != WEFT_OK) /* back to what worked */
        return WEFT_ERR_NOMEM; /* no pool at all: the context is unusable */
    return st;
}

void weft_kernels_cpu_destroy(struct weft_kctx *ctx)
{
    if (!ctx)
        return;
    cpu_devmem_destroy(ctx);
    threads_fini(ctx);
    weft_big_free(ctx->gemm_xpack, ctx->gemm_xpack_bytes);
    weft_free(ctx);
}

int weft_kernels_cpu_threads(const struct weft_kctx *ctx)
{
    return ctx->threads;
}

weft_status_t weft_kernels_cpu_set_compute(struct weft_kctx *ctx, enum weft_dtype dtype)
{
    if (dtype != WEFT_DTYPE_F32 && dtype != WEFT_DTYPE_BF16) {
        ctx->compute_bf16 = false;
        return WEFT_ERR_UNSUPPORTED;
    }
    const bool want = dtype == WEFT_DTYPE_BF16;
    if (want && !ctx->gemm_bf16.bf16) {
        ctx->compute_bf16 = false;
        return WEFT_ERR_UNSUPPORTED;
    }
    ctx->compute_bf16 = want;
    return WEFT_OK;
}

void weft_kernels_cpu_describe(const struct weft_kctx *ctx, char *buf, size_t len)
{
    const struct cpu_gemm_kernels *k = ctx->compute_bf16 ? &ctx->gemm_bf16 : &ctx->gemm_f32;
    snprintf(buf, len,
             "weft gemm, %s kernels (%dx%d tiles; cpuid: %s), %s compute (bf16 compute %s), "
             "%d thread%s", cpu_isa_name(k->isa), k->mr, k->nr, cpu_isa_name(ctx->isa),
             ctx->compute_bf16 ? "bf16" : "f32",
             ctx->gemm_bf16.bf16 ? "available" : "not available: no avx512_bf16", ctx->threads,
             ctx->threads == 1 ? "" : "s");
}

void weft_kernels_cpu_set_conv_algo(struct weft_kctx *ctx, enum weft_conv_algo algo)
{
    ctx->conv_algo = algo < WEFT_CONV_ALGO_COUNT ? algo : WEFT_CONV_DEFAULT;
}
