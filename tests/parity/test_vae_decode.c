/* The AutoencoderKL decoder against Diffusers' own vae.decode (tests/data/vae/golden, made by
 * tests/golden/make_vae.py with tests/data/random/flux-tiny/vae): from the packed latents through the
 * pipeline's unpack and unscale, the image within 1e-4 relative L2 and the 8-bit pixels within
 * one level; the tiled decode (3x3 overlapping tiles) within 1e-4. Also: loading refuses a
 * checkpoint that does not match its config. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "common/alloc.h"
#include "golden.h"
#include "worker/vae.h"

static const struct weft_kernels *K;
static struct weft_kctx *kc;

/* NCHW [c, h, w] -> NHWC [h, w, c] */
static float *to_nhwc(const float *src, int64_t c, int64_t h, int64_t w)
{
    float *dst = malloc((size_t)(c * h * w) * sizeof(float) + 4);
    CHECK(dst);
    for (int64_t ch = 0; ch < c; ch++)
        for (int64_t i = 0; i < h * w; i++)
            dst[i * c + ch] = src[ch * h * w + i];
    return dst;
}

static struct weft_vae *load_vae(void)
{
    char dir[1024];
    snprintf(dir, sizeof(dir), "%s/tests/data/random/flux-tiny/vae", getenv("WEFT_SOURCE_ROOT"));
    struct weft_vae_opts opts = {K, kc};
    struct weft_vae *v;
    CHECK_OK(weft_vae_load(dir, &opts, &v, TERR));
    return v;
}

static void decode_case(struct weft_vae *v, const char *rel, int64_t lh, int64_t lw)
{
    const struct weft_vae_config *c = weft_vae_get_config(v);
    struct golden g;
    golden_open(&g, rel);
    int64_t n_packed, n_img;
    float *packed = golden_need(&g, "packed", &n_packed);
    float *want_lat = golden_need(&g, "latents", NULL);
    float *want_nchw = golden_need(&g, "image", &n_img);
    float *want_u8 = golden_need(&g, "image_u8", NULL);
    const int64_t L = c->latent_channels, H = lh * c->scale, W = lw * c->scale;
    CHECK_EQ(n_packed, lh * lw * L);
    CHECK_EQ(n_img, H * W * 3);

    /* the pipeline's prologue: unpack, / scaling_factor + shift_factor */
    float *lat = malloc((size_t)(lh * lw * L) * sizeof(float));
    CHECK(lat);
    weft_vae_unpack_flux(c, packed, lh, lw, lat);
    float *want_lat_nhwc = to_nhwc(want_lat, L, lh, lw);
    double lat_err = rel_l2(lat, want_lat_nhwc, lh * lw * L);
    CHECK(lat_err <= 1e-7);

    float *img = malloc((size_t)n_img * sizeof(float));
    uint8_t *u8 = malloc((size_t)n_img);
    CHECK(img && u8);
    CHECK_OK(weft_vae_decode(v, lat, lh, lw, NULL, img, TERR));
    float *want = to_nhwc(want_nchw, 3, H, W);
    double err = rel_l2(img, want, n_img);
    weft_vae_to_rgb8(img, n_img, u8);
    int64_t differ = 0, worst = 0;
    for (int64_t i = 0; i < n_img; i++) {
        int64_t d = llabs((long long)u8[i] - (long long)want_u8[i]);
        differ += d != 0;
        worst = d > worst ? d : worst;
    }
    printf("%s: latents rel L2 %.3g, image rel L2 %.3g, %lld of %lld 8-bit values differ "
           "(max %lld level)\n", rel + 22, lat_err, err, (long long)differ, (long long)n_img,
           (long long)worst);
    CHECK(err <= 1e-4);
    CHECK(worst <= 1);
    free(packed), free(want_lat), free(want_nchw), free(want_u8), free(lat), free(want_lat_nhwc);
    free(img), free(u8), free(want);
    golden_close(&g);
}

static void tiled_case(struct weft_vae *v)
{
    const struct weft_vae_config *c = weft_vae_get_config(v);
    struct golden g;
    golden_open(&g, "tests/data/vae/golden/decode_tiled_16x16.safetensors");
    int64_t n_img;
    float *lat_nchw = golden_need(&g, "latents", NULL);
    float *want_nchw = golden_need(&g, "image", &n_img);
    const int64_t lh = 16, lw = 16, H = lh * c->scale, W = lw * c->scale;
    CHECK_EQ(n_img, H * W * 3);
    float *lat = to_nhwc(lat_nchw, c->latent_channels, lh, lw);
    float *want = to_nhwc(want_nchw, 3, H, W);
    float *img = malloc((size_t)n_img * sizeof(float)), *plain = malloc((size_t)n_img * 4);
    CHECK(img && plain);
    /* as make_vae.py sets them: tile_latent_min_size 8, tile_sample_min_size 64, overlap 0.25 */
    struct weft_vae_tiling t;
    weft_vae_tiling_latent(c, 8, &t);
    CHECK_EQ(t.tile_sample, 64);
    size_t host_bytes;
    size_t tiled_bytes = weft_vae_activation_bytes(v, lh, lw, &t, &host_bytes);
    size_t plain_bytes = weft_vae_activation_bytes(v, lh, lw, NULL, NULL);
    CHECK(tiled_bytes > 0 && tiled_bytes < plain_bytes);
    CHECK_OK(weft_vae_decode(v, lat, lh, lw, &t, img, TERR));
    double err = rel_l2(img, want, n_img);
    CHECK_OK(weft_vae_decode(v, lat, lh, lw, NULL, plain, TERR));
    double seam = rel_l2(plain, want, n_img);
    printf("decode_tiled_16x16: rel L2 %.3g (untiled vs tiled golden: %.3g); device bytes "
           "%zu tiled vs %zu untiled, host %zu\n", err, seam, tiled_bytes, plain_bytes,
           host_bytes);
    CHECK(err <= 1e-4);
    CHECK(seam > 1e-3); /* the blend is real: untiled output differs from the tiled golden */

    /* a tile step that is not a whole number of latents is refused, not cropped wrongly */
    struct weft_vae_tiling bad = t;
    bad.overlap = 0.3;
    test_quiet();
    CHECK_FAILS(weft_vae_decode(v, lat, lh, lw, &bad, img, TERR), WEFT_ERR_INVALID, "tiling");
    weft_log_set_sink(NULL, NULL);
    free(lat_nchw), free(want_nchw), free(lat), free(want), free(img), free(plain);
    golden_close(&g);
}

/* A copy of the VAE folder whose config disagrees with its weights must not load. */
static void refusals(void)
{
    char dir[1024], cmd[4096];
    snprintf(dir, sizeof(dir), "%s/vae_bad_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    CHECK(mkdtemp(dir));
    snprintf(cmd, sizeof(cmd),
             "cp '%s/tests/data/random/flux-tiny/vae/diffusion_pytorch_model.safetensors' '%s/' && "
             "sed 's/\"latent_channels\": 16/\"latent_channels\": 8/' "
             "'%s/tests/data/random/flux-tiny/vae/config.json' > '%s/config.json'",
             getenv("WEFT_SOURCE_ROOT"), dir, getenv("WEFT_SOURCE_ROOT"), dir);
    CHECK(system(cmd) == 0);
    struct weft_vae_opts opts = {K, kc};
    struct weft_vae *v = NULL;
    test_quiet();
    CHECK_FAILS(weft_vae_load(dir, &opts, &v, TERR), WEFT_ERR_FORMAT, "has shape",
                "config implies");
    snprintf(cmd, sizeof(cmd),
             "sed 's/UpDecoderBlock2D/AttnUpDecoderBlock2D/' "
             "'%s/tests/data/random/flux-tiny/vae/config.json' > '%s/config.json'",
             getenv("WEFT_SOURCE_ROOT"), dir);
    CHECK(system(cmd) == 0);
    CHECK_FAILS(weft_vae_load(dir, &opts, &v, TERR), WEFT_ERR_UNSUPPORTED, "up_block_types",
                "AttnUpDecoderBlock2D");
    weft_log_set_sink(NULL, NULL);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
}

int main(void)
{
    test_kernels_create(0, &K, &kc);
    struct weft_vae *v = load_vae();
    const struct weft_vae_config *c = weft_vae_get_config(v);
    CHECK_EQ(c->latent_channels, 16);
    CHECK_EQ(c->scale, 8);
    CHECK(!c->use_post_quant_conv && fabs(c->scaling_factor - 0.3611) < 1e-12);
    /* the inventory is the file: the loader found every tensor in it with its shape, and
     * there are as many (encoder included) as it lists */
    char path[1100];
    snprintf(path, sizeof(path), "%s/tests/data/random/flux-tiny/vae/diffusion_pytorch_model.safetensors",
             getenv("WEFT_SOURCE_ROOT"));
    struct weft_st_file *f;
    CHECK_OK(weft_st_open(path, &f, TERR));
    CHECK_EQ(weft_st_count(f), weft_vae_params(c, NULL));
    int64_t file_numel = 0;
    for (size_t i = 0; i < weft_st_count(f); i++)
        file_numel += weft_st_at(f, i)->numel;
    CHECK_EQ(file_numel, weft_vae_part_numel(c, WEFT_VAE_ENCODER) +
                             weft_vae_part_numel(c, WEFT_VAE_DECODER));
    weft_st_close(f);
    CHECK(weft_vae_weight_bytes(v) / 4 >= (size_t)weft_vae_part_numel(c, WEFT_VAE_DECODER));
    /* the CPU's two convolution algorithms (another backend has its own) */
    for (int algo = WEFT_CONV_GEMM; algo < WEFT_CONV_ALGO_COUNT && weft_kernels_is_cpu(K); algo++) {
        weft_kernels_cpu_set_conv_algo(kc, (enum weft_conv_algo)algo);
        printf("conv2d %s:\n", algo == WEFT_CONV_GEMM ? "im2col + GEMM" : "direct");
        decode_case(v, "tests/data/vae/golden/decode_8x8.safetensors", 8, 8);
        decode_case(v, "tests/data/vae/golden/decode_10x6.safetensors", 10, 6);
    }
    if (weft_kernels_is_cpu(K))
        weft_kernels_cpu_set_conv_algo(kc, WEFT_CONV_DEFAULT);
    tiled_case(v);
    weft_vae_destroy(v);
    refusals();
    K->destroy(kc);
    return 0;
}
