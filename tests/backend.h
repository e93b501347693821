/* The kernel backend a test runs on: the CPU backend; with WEFT_TEST_KERNELS=cpu-devmem in the
 * environment its devmem variant (buffers that are not host-visible, every pointer checked:
 * kernels/kernels.h), so the same test checks the device-memory discipline of the code it
 * drives (meson runs the parity suite both ways: the _devmem tests); with
 * WEFT_TEST_KERNELS=cuda the CUDA backend on cuda:0 (tests/gpu/run.sh; exit 77 without a GPU). */
#ifndef WEFT_TESTS_BACKEND_H
#define WEFT_TESTS_BACKEND_H

#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "test.h"

static inline const char *test_kernels_name(void)
{
    const char *v = getenv("WEFT_TEST_KERNELS");
    return v && *v ? v : "cpu";
}

/* Whether this run is on the devmem variant. */
static inline int test_devmem(void)
{
    return strcmp(test_kernels_name(), "cpu-devmem") == 0;
}

static inline void test_kernels_create(int threads, const struct weft_kernels **ops_p,
                                       struct weft_kctx **ctx_p)
{
    const char *v = test_kernels_name();
    struct weft_device dev;
    char why[300];
    if (strcmp(v, "cpu") != 0 && strcmp(v, "cpu-devmem") != 0 && strcmp(v, "cuda") != 0) {
        fprintf(stderr, "WEFT_TEST_KERNELS=%s: not cpu, cpu-devmem or cuda\n", v);
        exit(1);
    }
    CHECK_OK(weft_device_parse(strcmp(v, "cuda") == 0 ? "cuda:0" : v, -1, &dev, why,
                               sizeof(why)));
    weft_status_t st = weft_kernels_create(&dev, threads, ops_p, ctx_p, why, sizeof(why));
    if (st != WEFT_OK && dev.kind == WEFT_DEVICE_CUDA) {
        printf("skipped: %s\n", why);
        exit(TEST_SKIP);
    }
    if (st != WEFT_OK) {
        fprintf(stderr, "%s\n", why);
        exit(1);
    }
    CHECK((*ops_p)->host_visible == (dev.kind == WEFT_DEVICE_CPU));
}

/* A device copy of n floats of host memory (buf_free with n * 4 bytes). */
static inline float *test_dev_copy(const struct weft_kernels *K, struct weft_kctx *kc,
                                   const float *host, size_t n)
{
    void *d;
    CHECK_OK(K->buf_alloc(kc, n * sizeof(float) + 1, &d));
    K->upload(kc, d, host, n * sizeof(float));
    return d;
}

#endif
