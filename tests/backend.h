/* The kernel backend a test runs on: the CPU backend, or with WEFT_TEST_KERNELS=cpu-devmem in
 * the environment its devmem variant (buffers that are not host-visible, every pointer checked:
 * kernels/kernels.h), so the same test checks the device-memory discipline of the code it
 * drives. meson runs the parity suite both ways (the _devmem tests). */
#ifndef WEFT_TESTS_BACKEND_H
#define WEFT_TESTS_BACKEND_H

#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "test.h"

/* Whether this run is on the devmem variant. */
static inline int test_devmem(void)
{
    const char *v = getenv("WEFT_TEST_KERNELS");
    return v && strcmp(v, "cpu-devmem") == 0;
}

static inline void test_kernels_create(int threads, const struct weft_kernels **ops_p,
                                       struct weft_kctx **ctx_p)
{
    const char *v = getenv("WEFT_TEST_KERNELS");
    if (v && *v && strcmp(v, "cpu") != 0 && strcmp(v, "cpu-devmem") != 0) {
        fprintf(stderr, "WEFT_TEST_KERNELS=%s: not cpu or cpu-devmem\n", v);
        exit(1);
    }
    CHECK_OK(test_devmem() ? weft_kernels_cpu_devmem_create(threads, ops_p, ctx_p)
                           : weft_kernels_cpu_create(threads, ops_p, ctx_p));
    CHECK((*ops_p)->host_visible == !test_devmem());
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
