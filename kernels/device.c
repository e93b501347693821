/* Which backend computes where: device names ("cpu", "cpu-devmem", "cuda:N", "auto") and the
 * one function that opens the backend of a device (kernels.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#if WEFT_HAVE_CUDA
#include "kernels/cuda/cuda.h"
#endif

/* GPUs this process can use (0 in a build without CUDA or on a machine without a driver), and
 * why there are none. */
static int gpu_count_why(char *why, size_t len)
{
#if WEFT_HAVE_CUDA
    int n = 0;
    return weft_cuda_device_count(&n, why, len) == WEFT_OK ? n : 0;
#else
    snprintf(why, len, "this weft was built without CUDA");
    return 0;
#endif
}

int weft_gpu_count(void)
{
    char why[160];
    return gpu_count_why(why, sizeof(why));
}

weft_status_t weft_gpu_info(int index, struct weft_gpu_info *info_p)
{
#if WEFT_HAVE_CUDA
    struct weft_cuda_device_info ci;
    weft_status_t st = weft_cuda_device_info(index, &ci);
    if (st != WEFT_OK)
        return st;
    struct weft_gpu_info info = {.index = index, .memory = ci.total_mem,
                                 .sm_count = ci.sm_count, .cc_major = ci.cc_major,
                                 .cc_minor = ci.cc_minor, .peers = ci.peers};
    snprintf(info.name, sizeof(info.name), "%s", ci.name);
    *info_p = info;
    return WEFT_OK;
#else
    (void)index;
    (void)info_p;
    return WEFT_ERR_NO_DEVICE;
#endif
}

static weft_status_t parse_index(const char *s, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < 0 || v > 1023)
        return WEFT_ERR_INVALID;
    *out = (int)v;
    return WEFT_OK;
}

weft_status_t weft_device_parse(const char *text, int local_rank, struct weft_device *dev_p,
                                char *why, size_t why_len)
{
    struct weft_device d = {WEFT_DEVICE_CPU, 0};
    if (strcmp(text, "cpu") == 0) {
        d.kind = WEFT_DEVICE_CPU;
    } else if (strcmp(text, "cpu-devmem") == 0) {
        d.kind = WEFT_DEVICE_CPU_DEVMEM;
    } else if (strcmp(text, "cuda") == 0) {
        d.kind = WEFT_DEVICE_CUDA;
    } else if (strncmp(text, "cuda:", 5) == 0) {
        d.kind = WEFT_DEVICE_CUDA;
        if (parse_index(text + 5, &d.index) != WEFT_OK) {
            snprintf(why, why_len, "device '%s': the GPU index after cuda: must be a number "
                     "from 0 to 1023", text);
            return WEFT_ERR_INVALID;
        }
    } else if (strcmp(text, "auto") == 0) {
        const int n = weft_gpu_count();
        if (n > 0) {
            d.kind = WEFT_DEVICE_CUDA;
            d.index = local_rank > 0 ? local_rank % n : 0;
        }
    } else {
        snprintf(why, why_len, "device '%s' is not one of cpu, cuda:N, auto (or cpu-devmem, "
                 "the CPU with device-like memory for tests)", text);
        return WEFT_ERR_INVALID;
    }
    *dev_p = d;
    return WEFT_OK;
}

void weft_device_name(const struct weft_device *dev, char *buf, size_t len)
{
    if (dev->kind == WEFT_DEVICE_CUDA)
        snprintf(buf, len, "cuda:%d", dev->index);
    else
        snprintf(buf, len, "%s", dev->kind == WEFT_DEVICE_CPU_DEVMEM ? "cpu-devmem" : "cpu");
}

weft_status_t weft_kernels_create(const struct weft_device *dev, int threads,
                                  const struct weft_kernels **ops_p, struct weft_kctx **ctx_p,
                                  char *why, size_t why_len)
{
    weft_status_t st;
    if (dev->kind == WEFT_DEVICE_CPU || dev->kind == WEFT_DEVICE_CPU_DEVMEM) {
        st = dev->kind == WEFT_DEVICE_CPU ? weft_kernels_cpu_create(threads, ops_p, ctx_p)
                                          : weft_kernels_cpu_devmem_create(threads, ops_p, ctx_p);
        if (st != WEFT_OK)
            snprintf(why, why_len, "the CPU backend: %s", weft_status_str(st));
        return st;
    }
#if WEFT_HAVE_CUDA
    char cause[160] = "";
    const int n = gpu_count_why(cause, sizeof(cause));
    if (n == 0) {
        snprintf(why, why_len, "cuda:%d: no usable GPU on this machine (the CUDA runtime says: "
                 "%s)", dev->index, cause);
        return WEFT_ERR_NO_DEVICE;
    }
    if (dev->index >= n) {
        snprintf(why, why_len, "cuda:%d: this machine has %d GPU%s (cuda:0 to cuda:%d)",
                 dev->index, n, n == 1 ? "" : "s", n - 1);
        return WEFT_ERR_NO_DEVICE;
    }
    st = weft_kernels_cuda_create(dev->index, ops_p, ctx_p);
    if (st != WEFT_OK)
        snprintf(why, why_len, "cuda:%d: the CUDA backend could not start: %s (the log says "
                 "why)", dev->index, weft_status_str(st));
    return st;
#else
    (void)threads;
    (void)ops_p;
    (void)ctx_p;
    snprintf(why, why_len, "cuda:%d: this weft was built without CUDA (meson setup "
             "-Dcuda=enabled with the CUDA toolkit)", dev->index);
    return WEFT_ERR_UNSUPPORTED;
#endif
}
