/* Truncated checkpoints: a transformer or VAE file cut short is refused when the model is
 * opened (its header promises more bytes than the file has), naming the file; and a file cut
 * short after it was opened and checked (another process truncating it) fails the read of the
 * first tensor past the end, naming the tensor and the offset, without a crash. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/model.h"
#include "model/safetensors.h"
#include "model_variant.h"
#include "test.h"
#include "worker/runtime.h"

/* Replace the variant's link at rel by a copy of the first `keep` of its bytes. */
static void cut(const char *dir, const char *rel, double keep)
{
    char src[1024], dst[256];
    snprintf(src, sizeof(src), "%s/tests/data/random/flux-tiny/%s", getenv("WEFT_SOURCE_ROOT"), rel);
    snprintf(dst, sizeof(dst), "%s/%s", dir, rel);
    CHECK(unlink(dst) == 0);
    FILE *in = fopen(src, "rb"), *out = fopen(dst, "wb");
    CHECK(in && out);
    struct stat sb;
    CHECK(stat(src, &sb) == 0);
    size_t n = (size_t)((double)sb.st_size * keep);
    static char buf[1 << 16];
    while (n) {
        size_t k = fread(buf, 1, n < sizeof(buf) ? n : sizeof(buf), in);
        CHECK(k > 0 && fwrite(buf, 1, k, out) == k);
        n -= k;
    }
    fclose(in);
    CHECK(fclose(out) == 0);
}

static void expect_assign_fails(const char *dir, const char *sub)
{
    const struct weft_kernels *K;
    struct weft_kctx *kc;
    CHECK_OK(weft_kernels_cpu_create(1, &K, &kc));
    const struct weft_rt_opts ro = {K, kc, false};
    struct weft_runtime *rt;
    CHECK_OK(weft_runtime_create(&ro, &rt));
    static struct weft_rt_assign a;
    weft_rt_assign_single(dir, &a);
    struct weft_error err = WEFT_ERROR_INIT;
    weft_status_t st = weft_runtime_assign(rt, &a, NULL, &err);
    printf("%s: %s\n", sub, weft_error_text(&err));
    CHECK(st != WEFT_OK && strstr(weft_error_text(&err), sub));
    CHECK(weft_runtime_model(rt) == NULL);
    weft_runtime_destroy(rt);
    weft_kernels_cpu_destroy(kc);
}

int main(void)
{
    test_quiet();
    static const char *const files[] = {"transformer/diffusion_pytorch_model.safetensors",
                                        "vae/diffusion_pytorch_model.safetensors"};
    static const double keeps[] = {0.5, 0.999, 0.0001};
    for (int f = 0; f < 2; f++) {
        for (int k = 0; k < 3; k++) {
            char dir[64];
            variant_make(dir);
            cut(dir, files[f], keeps[k]);
            expect_assign_fails(dir, f ? "vae/diffusion_pytorch_model.safetensors"
                                       : "transformer/diffusion_pytorch_model.safetensors");
            variant_remove(dir);
        }
    }

    /* cut after the header was checked */
    char dir[64], path[256];
    variant_make(dir);
    cut(dir, files[0], 1.0);
    snprintf(path, sizeof(path), "%s/%s", dir, files[0]);
    struct weft_st_file *f;
    CHECK_OK(weft_st_open(path, &f, TERR));
    struct stat sb;
    CHECK(stat(path, &sb) == 0);
    CHECK(truncate(path, sb.st_size / 2) == 0);
    size_t n = weft_st_count(f), failed = 0;
    float *buf = NULL;
    for (size_t i = 0; i < n; i++) {
        const struct weft_st_tensor *t = weft_st_at(f, i);
        buf = realloc(buf, (size_t)t->numel * sizeof(float) + 4);
        CHECK(buf);
        struct weft_error err = WEFT_ERROR_INIT;
        weft_status_t st = weft_st_read(f, t, buf, WEFT_DTYPE_F32, &err);
        if (t->offset + t->nbytes > (uint64_t)sb.st_size / 2) {
            CHECK(st == WEFT_ERR_IO && err.status == st);
            if (!failed++)
                printf("the first tensor past the cut: %s\n", weft_error_text(&err));
            CHECK(strstr(weft_error_text(&err), t->name));
        } else {
            CHECK_OK(st);
        }
    }
    printf("%zu of %zu tensors past the cut refused\n", failed, n);
    CHECK(failed > 0);
    free(buf);
    weft_st_close(f);
    variant_remove(dir);
    printf("ok\n");
    return 0;
}
