/* CUDA backend skeleton: device enumeration, the first kernel and cuBLAS against the CPU.
 * Exits 77 (skip) when there is no usable GPU. */
#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/dtype.h"
#include "kernels/cuda/cuda.h"
#include "test.h"

int main(void)
{
    int n_dev = 0;
    if (weft_cuda_device_count(&n_dev) != WEFT_OK) {
        fprintf(stderr, "no GPU: skipped\n");
        return TEST_SKIP;
    }
    struct weft_cuda_device_info info;
    CHECK_OK(weft_cuda_device_info(0, &info));
    printf("device 0: %s, %zu MiB, sm_%d%d, %d SMs\n", info.name, info.total_mem >> 20,
           info.cc_major, info.cc_minor, info.sm_count);
    struct weft_cuda_ctx *ctx;
    CHECK_OK(weft_cuda_ctx_create(0, &ctx));

    enum { N = 100003, M = 67, K = 129, NN = 45 };
    uint16_t *h = malloc(N * sizeof(*h));
    float *f = malloc(N * sizeof(*f));
    for (int i = 0; i < N; i++)
        h[i] = weft_f32_to_bf16((float)sin(i * 0.01) * 100.0f);
    void *dh, *df;
    CHECK_OK(weft_cuda_malloc(ctx, N * sizeof(*h), &dh));
    CHECK_OK(weft_cuda_malloc(ctx, N * sizeof(*f), &df));
    CHECK_OK(weft_cuda_copy_to_device(ctx, dh, h, N * sizeof(*h)));
    CHECK_OK(weft_cuda_bf16_to_f32(ctx, df, dh, N));
    CHECK_OK(weft_cuda_copy_to_host(ctx, f, df, N * sizeof(*f)));
    for (int i = 0; i < N; i++)
        CHECK(f[i] == weft_bf16_to_f32(h[i]));

    float *a = malloc(M * K * 4), *b = malloc(NN * K * 4), *c = malloc(M * NN * 4),
          *ref = malloc(M * NN * 4);
    for (int i = 0; i < M * K; i++)
        a[i] = (float)((i * 7 % 13) - 6) / 7.0f;
    for (int i = 0; i < NN * K; i++)
        b[i] = (float)((i * 5 % 11) - 5) / 5.0f;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, NN, K, 1.0f, a, K, b, K, 0.0f, ref,
                NN);
    void *da, *db, *dc;
    CHECK_OK(weft_cuda_malloc(ctx, M * K * 4, &da));
    CHECK_OK(weft_cuda_malloc(ctx, NN * K * 4, &db));
    CHECK_OK(weft_cuda_malloc(ctx, M * NN * 4, &dc));
    CHECK_OK(weft_cuda_copy_to_device(ctx, da, a, M * K * 4));
    CHECK_OK(weft_cuda_copy_to_device(ctx, db, b, NN * K * 4));
    CHECK_OK(weft_cuda_gemm_f32(ctx, M, NN, K, da, db, dc));
    CHECK_OK(weft_cuda_copy_to_host(ctx, c, dc, M * NN * 4));
    double err = 0, nrm = 0;
    for (int i = 0; i < M * NN; i++) {
        err += (c[i] - ref[i]) * (c[i] - ref[i]);
        nrm += ref[i] * ref[i];
    }
    printf("gemm relative L2 error vs OpenBLAS: %.3g\n", sqrt(err / nrm));
    CHECK(sqrt(err / nrm) < 1e-5); /* TF32 is off by default for cublasSgemm */
    weft_cuda_free(ctx, da), weft_cuda_free(ctx, db), weft_cuda_free(ctx, dc);
    weft_cuda_free(ctx, dh), weft_cuda_free(ctx, df);
    weft_cuda_ctx_destroy(ctx);
    free(h), free(f), free(a), free(b), free(c), free(ref);
    return 0;
}
