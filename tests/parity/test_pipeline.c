/* The whole pipeline against FluxPipeline.__call__ on the embedded default model
 * (tests/data/pipeline, made by tests/golden/make_default_model.py): red-fox embeddings,
 * 256x256, 4 steps, guidance 3.5, from the golden initial latents. The final latents within
 * 1e-4 relative L2, the 8-bit image within one level, through the one image pipeline
 * (worker/runtime.h). Staged (each component freed after its stage) and resident runs give the
 * same bytes; the component inventory is known before any weight is read. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "golden.h"
#include "model/model.h"
#include "worker/runtime.h"

static const struct weft_kernels *K;
static struct weft_kctx *kc;

/* The description is known before any weight is read: classes, sizes on disk, what each
 * component will hold once loaded. */
static void check_components(const struct weft_runtime *rt)
{
    const struct weft_model *m = weft_runtime_model(rt);
    CHECK(m->pipeline && m->has_vae);
    CHECK(strcmp(m->pipeline_class, "FluxPipeline") == 0);
    CHECK_EQ(m->side_unit, 16);
    uint64_t tb, vb;
    weft_runtime_bytes(rt, &tb, &vb);
    /* bf16 on disk and held bf16: the file's bytes, less its header, plus the f32 vectors
     * (biases and norm weights, a few percent of this tiny model) */
    CHECK_EQ(tb, m->transformer_held_bytes);
    CHECK(tb > m->transformer_file_bytes / 2 && tb < m->transformer_file_bytes * 11 / 10);
    /* the file holds the encoder too; the decoder is what a decode-only runtime loads */
    CHECK(vb > 0 && vb < m->vae_file_bytes);
    CHECK_EQ(vb, m->vae_held_bytes);
    printf("components: transformer %.2f MB file / %.2f MB loaded, vae %.2f MB file / %.2f MB "
           "decoder\n", m->transformer_file_bytes / 1e6, tb / 1e6, m->vae_file_bytes / 1e6,
           vb / 1e6);
}

static void run(bool staged, struct weft_rt_result *r)
{
    char dir[1024], prompt[1100];
    snprintf(dir, sizeof(dir), "%s/tests/data/random/flux-tiny", getenv("WEFT_SOURCE_ROOT"));
    snprintf(prompt, sizeof(prompt), "%s/prompts/red-fox.safetensors", dir);
    const struct weft_rt_opts opts = {K, kc, staged};
    struct weft_runtime *rt;
    CHECK_OK(weft_runtime_create(&opts, &rt));
    static struct weft_rt_assign a;
    weft_rt_assign_single(dir, &a);
    struct weft_error err = WEFT_ERROR_INIT;
    CHECK_OK(weft_runtime_assign(rt, &a, NULL, &err));
    check_components(rt);
    struct weft_prompt_embeds pe;
    CHECK_OK(weft_model_prompt_read(weft_runtime_model(rt), prompt, &pe, &err));
    struct golden g;
    golden_open(&g, "tests/data/pipeline/golden_default_red-fox_256.safetensors");
    int64_t n;
    float *init = golden_need(&g, "latents_init", &n);
    const struct weft_rt_image img = {
        .prompt_embeds = pe.embeds, .s_txt = pe.tokens, .pooled = pe.pooled, .height = 256,
        .width = 256, .steps = 4, .guidance = 3.5f, .latents_init = init, .decode = true,
        .keep_latents = true, .keep_rgb = true, .png_prompt_index = -1,
    };
    CHECK_OK(weft_runtime_image(rt, &img, NULL, NULL, NULL, r, &err));
    CHECK_EQ(r->tokens * r->channels, n);
    CHECK(r->png && r->png_len > 8);
    free(init);
    golden_close(&g);
    weft_prompt_embeds_cleanup(&pe);
    weft_runtime_destroy(rt);
}

/* True classifier-free guidance (FluxPipeline's true_cfg_scale 3 with a negative prompt) against
 * Diffusers: two passes a step, combined as neg + 3 (pred - neg). */
static void true_cfg(void)
{
    char dir[1024], pos[1100], neg[1100];
    snprintf(dir, sizeof(dir), "%s/tests/data/random/flux-tiny", getenv("WEFT_SOURCE_ROOT"));
    snprintf(pos, sizeof(pos), "%s/prompts/red-fox.safetensors", dir);
    snprintf(neg, sizeof(neg), "%s/prompts/lighthouse.safetensors", dir);
    const struct weft_rt_opts opts = {K, kc, false};
    struct weft_runtime *rt;
    CHECK_OK(weft_runtime_create(&opts, &rt));
    static struct weft_rt_assign a;
    weft_rt_assign_single(dir, &a);
    struct weft_error err = WEFT_ERROR_INIT;
    CHECK_OK(weft_runtime_assign(rt, &a, NULL, &err));
    struct weft_prompt_embeds pe, ne;
    CHECK_OK(weft_model_prompt_read(weft_runtime_model(rt), pos, &pe, &err));
    CHECK_OK(weft_model_prompt_read(weft_runtime_model(rt), neg, &ne, &err));
    struct golden g;
    golden_open(&g, "tests/data/pipeline_cfg/golden_true_cfg_red-fox_128.safetensors");
    int64_t n;
    float *init = golden_need(&g, "latents_init", &n);
    float *want = golden_need(&g, "latents_final", &n);
    struct weft_rt_image img = {
        .prompt_embeds = pe.embeds, .s_txt = pe.tokens, .pooled = pe.pooled, .height = 128,
        .width = 128, .steps = 4, .guidance = 3.5f, .neg_prompt_embeds = ne.embeds,
        .neg_pooled = ne.pooled, .true_cfg_scale = 3.0f, .latents_init = init, .decode = true,
        .keep_latents = true, .keep_rgb = true, .png_prompt_index = -1,
    };
    struct weft_rt_result r;
    CHECK_OK(weft_runtime_image(rt, &img, NULL, NULL, NULL, &r, &err));
    CHECK_EQ(r.tokens * r.channels, n);
    const struct weft_st_tensor *u8t = weft_st_find(g.f, "image_u8");
    CHECK(u8t && u8t->numel == 128 * 128 * 3);
    uint8_t *want_u8 = malloc((size_t)u8t->numel);
    CHECK(want_u8);
    CHECK_OK(weft_st_read(g.f, u8t, want_u8, WEFT_DTYPE_U8, TERR));
    int64_t worst = 0;
    for (int64_t i = 0; i < u8t->numel; i++) {
        const int64_t d = llabs((long long)r.rgb[i] - (long long)want_u8[i]);
        worst = d > worst ? d : worst;
    }
    const double e = rel_l2(r.latents, want, n);
    printf("true CFG 3 (negative prompt lighthouse) 128x128, 4 steps: latents_final rel L2 %.3g, "
           "image within %lld level(s) of Diffusers'\n", e, (long long)worst);
    CHECK(e <= 1e-4);
    CHECK(worst <= 1);
    weft_rt_result_cleanup(&r);
    /* a scale without a negative prompt, or a negative prompt of another length: refused */
    img.neg_prompt_embeds = NULL;
    CHECK_FAILS(weft_runtime_image(rt, &img, NULL, NULL, NULL, &r, TERR), WEFT_ERR_INVALID,
                "needs a negative prompt");
    free(init), free(want), free(want_u8);
    golden_close(&g);
    weft_prompt_embeds_cleanup(&pe);
    weft_prompt_embeds_cleanup(&ne);
    weft_runtime_destroy(rt);
}

int main(void)
{
    test_kernels_create(0, &K, &kc);
    struct weft_rt_result staged, resident;
    run(true, &staged);
    run(false, &resident);
    CHECK(memcmp(staged.latents, resident.latents,
                 (size_t)(staged.tokens * staged.channels) * sizeof(float)) == 0);
    CHECK(memcmp(staged.rgb, resident.rgb, (size_t)(256 * 256 * 3)) == 0);

    struct golden g;
    golden_open(&g, "tests/data/pipeline/golden_default_red-fox_256.safetensors");
    int64_t n, n_px;
    float *want = golden_need(&g, "latents_final", &n);
    const struct weft_st_tensor *u8t = weft_st_find(g.f, "image_u8"); /* stored as U8 */
    CHECK(u8t && u8t->dtype == WEFT_DTYPE_U8);
    n_px = u8t->numel;
    uint8_t *want_u8 = malloc((size_t)n_px);
    CHECK(want_u8);
    CHECK_OK(weft_st_read(g.f, u8t, want_u8, WEFT_DTYPE_U8, TERR));
    CHECK_EQ(n, staged.tokens * staged.channels);
    CHECK_EQ(n_px, 256 * 256 * 3);
    double err = rel_l2(staged.latents, want, n);
    int64_t differ = 0, worst = 0;
    for (int64_t i = 0; i < n_px; i++) {
        int64_t d = llabs((long long)staged.rgb[i] - (long long)want_u8[i]);
        differ += d != 0;
        worst = d > worst ? d : worst;
    }
    printf("pipeline red-fox 256x256, 4 steps: latents_final rel L2 %.3g; %lld of %lld 8-bit "
           "values differ from Diffusers' image (max %lld level); denoise %.2f s, decode %.2f s\n",
           err, (long long)differ, (long long)n_px, (long long)worst, staged.denoise_s,
           staged.decode_s);
    CHECK(err <= 1e-4);
    CHECK(worst <= 1);
    free(want), free(want_u8);
    golden_close(&g);
    weft_rt_result_cleanup(&staged);
    weft_rt_result_cleanup(&resident);
    true_cfg();
    K->destroy(kc);
    return 0;
}
