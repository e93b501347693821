/* The whole FLUX denoising loop against FluxPipeline.__call__ itself: the schedule (mu, sigmas,
 * timesteps) bit for bit, and the latents after every step within 1e-4 relative L2; the
 * pipeline in bf16 (a bf16 checkpoint, the model in bf16) within 1e-2 of Diffusers' bf16 run,
 * with bf16 products where the CPU has them and with f32 ones. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "golden.h"
#include "worker/denoise.h"
#include "worker/noise.h"

struct step_check {
    struct golden *g;
    double worst;
};

static weft_status_t on_step(void *arg, int step, int steps, const float *latents, int64_t n)
{
    struct step_check *sc = arg;
    char name[32];
    snprintf(name, sizeof(name), "latents_step_%d", step);
    int64_t gn;
    float *want = golden_need(sc->g, name, &gn);
    CHECK_EQ(gn, n);
    double err = rel_l2(latents, want, n);
    printf("  step %d/%d: rel L2 %.3g\n", step + 1, steps, err);
    sc->worst = err > sc->worst ? err : sc->worst;
    free(want);
    return WEFT_OK;
}

static void run_loop_in(const struct weft_kernels *K, struct weft_kctx *kc, const char *model,
                        const char *golden_rel, enum weft_dtype dtype, double tol)
{
    char dir[1024];
    snprintf(dir, sizeof(dir), "%s/tests/data/flux1/%s", getenv("WEFT_SOURCE_ROOT"), model);
    struct weft_flux_opts opts = {K, kc, dtype};
    struct weft_flux *m;
    CHECK_OK(weft_flux_load(dir, &opts, &m, TERR));
    const struct weft_flux_config *c = weft_flux_get_config(m);
    struct golden g;
    golden_open(&g, golden_rel);
    char what[200];
    K->describe(kc, what, sizeof(what));
    printf("%s %s, model in %s, %s\n", model, golden_rel + 24, weft_dtype_name(dtype), what);
    float *height = golden_need(&g, "height", NULL), *width = golden_need(&g, "width", NULL);
    float *steps = golden_need(&g, "steps", NULL), *gs = golden_need(&g, "guidance_scale", NULL);
    float *mu = golden_need(&g, "mu", NULL), *sigmas = golden_need(&g, "sigmas", NULL);
    float *timesteps = golden_need(&g, "timesteps", NULL);
    int64_t n, n_pe;
    float *latents = golden_need(&g, "latents_init", &n);
    float *pe = golden_need(&g, "prompt_embeds", &n_pe);
    float *pooled = golden_need(&g, "pooled_prompt_embeds", NULL);

    struct weft_sched_config sc;
    weft_sched_config_flux_default(&sc);
    int64_t gh = (int64_t)*height / 16, gw = (int64_t)*width / 16;
    static struct weft_schedule sched;
    CHECK_OK(weft_sched_plan(&sc, (int)*steps, gh * gw, &sched, TERR));
    CHECK(fabs(sched.mu - (double)*mu) <= 1e-7);
    for (int i = 0; i <= sched.steps; i++)
        if (sched.sigmas[i] != sigmas[i]) {
            fprintf(stderr, "sigma %d: %.9g vs Diffusers %.9g\n", i, sched.sigmas[i], sigmas[i]);
            exit(1);
        }
    for (int i = 0; i < sched.steps; i++)
        CHECK(sched.timesteps[i] == timesteps[i]);

    struct step_check chk = {&g, 0};
    struct weft_denoise_params p = {
        .grid_h = gh,
        .grid_w = gw,
        .prompt_embeds = pe,
        .s_txt = n_pe / c->joint_attention_dim,
        .pooled = pooled,
        .guidance = *gs,
        .schedule = &sched,
        .on_step = on_step,
        .cb_arg = &chk,
    };
    CHECK_OK(weft_denoise(m, &p, latents, TERR));
    CHECK(chk.worst <= tol);
    free(height), free(width), free(steps), free(gs), free(mu), free(sigmas), free(timesteps);
    free(latents), free(pe), free(pooled);
    golden_close(&g);
    weft_flux_destroy(m);
}

static void run_loop(const struct weft_kernels *K, struct weft_kctx *kc, const char *model,
                     const char *golden_rel)
{
    run_loop_in(K, kc, model, golden_rel, WEFT_DTYPE_F32, 1e-4);
}

/* Random123's known answer for Philox4x32-10 with zero counter and key, and the normals'
 * independence from how the range is cut. */
static void test_noise(void)
{
    uint32_t ctr[4] = {0, 0, 0, 0};
    weft_philox4x32(ctr, 0, 0);
    CHECK(ctr[0] == 0x6627e8d5u && ctr[1] == 0xe169c58du && ctr[2] == 0xbc57ac4cu &&
          ctr[3] == 0x9b00dbd8u);
    float whole[1001], part[1001];
    weft_noise_normal(42, 0, 1001, whole);
    weft_noise_normal(42, 0, 3, part);
    weft_noise_normal(42, 3, 500, part + 3);
    weft_noise_normal(42, 503, 498, part + 503);
    CHECK(memcmp(whole, part, sizeof(whole)) == 0);
    double mean = 0, var = 0;
    float big[100000];
    weft_noise_normal(7, 0, 100000, big);
    for (int i = 0; i < 100000; i++)
        mean += big[i];
    mean /= 100000;
    for (int i = 0; i < 100000; i++)
        var += (big[i] - mean) * (big[i] - mean);
    var /= 100000;
    CHECK(fabs(mean) < 0.02 && fabs(var - 1.0) < 0.02);
    float other[1001];
    weft_noise_normal(43, 0, 1001, other);
    CHECK(memcmp(whole, other, sizeof(whole)) != 0);
}

int main(void)
{
    const struct weft_kernels *K;
    struct weft_kctx *kc;
    test_kernels_create(0, &K, &kc);
    test_noise();
    run_loop(K, kc, "tiny-g", "tests/data/flux1/golden/loop_tiny-g_16x16_t8.safetensors");
    run_loop(K, kc, "tiny-g", "tests/data/flux1/golden/loop_tiny-g_15x13_t7.safetensors");
    run_loop(K, kc, "tiny-nog", "tests/data/flux1/golden/loop_tiny-nog_16x16_t8.safetensors");
    for (int bf_products = 1; bf_products >= 0; bf_products--)
        if (K->set_compute(kc, bf_products ? WEFT_DTYPE_BF16 : WEFT_DTYPE_F32) == WEFT_OK)
            run_loop_in(K, kc, "tiny-bf16",
                        "tests/data/flux1/golden/loop_tiny-bf16_15x13_t7_bf16.safetensors",
                        WEFT_DTYPE_BF16, 1e-2);
    K->destroy(kc);
    return 0;
}
