/* The whole pipeline against FluxPipeline.__call__ on the embedded default model
 * (tests/data/pipeline, made by tests/golden/make_default_model.py): red-fox embeddings,
 * 256x256, 4 steps, guidance 3.5, from the golden initial latents. The final latents within
 * 1e-4 relative L2, the 8-bit image within one level. Staged (each component freed after its
 * stage) and resident runs give the same bytes; the component inventory is known before any
 * weight is read. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "golden.h"
#include "worker/pipeline.h"

static const struct weft_kernels *K;
static struct weft_kctx *kc;

static void check_components(const struct weft_pipeline *p)
{
    CHECK_EQ(weft_pipeline_component_count(p), 3);
    static const char *const names[] = {"prompt_embeds", "transformer", "vae"};
    for (size_t i = 0; i < 3; i++) {
        const struct weft_pipeline_component *c = weft_pipeline_component_at(p, i);
        CHECK(strcmp(c->name, names[i]) == 0);
        CHECK_EQ(c->stage, (int)i);
        CHECK_EQ(c->device.kind, WEFT_DEVICE_CPU);
        CHECK(!c->loaded);
    }
    const struct weft_pipeline_component *t = weft_pipeline_component_at(p, 1);
    const struct weft_pipeline_component *v = weft_pipeline_component_at(p, 2);
    /* bf16 on disk, f32 once loaded: about twice the file */
    CHECK(t->weight_bytes > t->file_bytes && t->weight_bytes < 2 * t->file_bytes + 4096);
    /* the file holds the encoder too; the decoder is what a decode-only runtime loads */
    CHECK(v->weight_bytes > 0 && v->weight_bytes < v->file_bytes);
    printf("components: transformer %.2f MB file / %.2f MB loaded, vae %.2f MB file / %.2f MB "
           "decoder\n", t->file_bytes / 1e6, t->weight_bytes / 1e6, v->file_bytes / 1e6,
           v->weight_bytes / 1e6);
}

static void run(bool keep, struct weft_pipeline_result *r)
{
    char dir[1024], prompt[1100];
    snprintf(dir, sizeof(dir), "%s/models/flux-tiny", getenv("WEFT_SOURCE_ROOT"));
    snprintf(prompt, sizeof(prompt), "%s/prompts/red-fox.safetensors", dir);
    struct weft_pipeline_opts opts = {K, kc, keep};
    struct weft_pipeline *p;
    CHECK_OK(weft_pipeline_open(dir, &opts, &p));
    check_components(p);
    struct golden g;
    golden_open(&g, "tests/data/pipeline/golden_default_red-fox_256.safetensors");
    int64_t n;
    float *init = golden_need(&g, "latents_init", &n);
    struct weft_pipeline_job job = {
        .prompt_embeds = prompt, .height = 256, .width = 256, .steps = 4, .guidance = 3.5f,
        .latents_init = init, .decode = true,
    };
    CHECK_OK(weft_pipeline_run(p, &job, r));
    CHECK_EQ(r->tokens * r->channels, n);
    for (size_t i = 1; i < 3; i++) /* staged: freed after their stage; resident: kept */
        CHECK_EQ(weft_pipeline_component_at(p, i)->loaded, keep);
    free(init);
    golden_close(&g);
    weft_pipeline_close(p);
}

int main(void)
{
    CHECK_OK(weft_kernels_cpu_create(0, &K, &kc));
    struct weft_pipeline_result staged, resident;
    run(false, &staged);
    run(true, &resident);
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
    CHECK_OK(weft_st_read(g.f, u8t, want_u8, WEFT_DTYPE_U8));
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
           err, (long long)differ, (long long)n_px, (long long)worst,
           staged.seconds[WEFT_STAGE_DENOISE], staged.seconds[WEFT_STAGE_DECODE]);
    CHECK(err <= 1e-4);
    CHECK(worst <= 1);
    free(want), free(want_u8);
    golden_close(&g);
    weft_pipeline_result_cleanup(&staged);
    weft_pipeline_result_cleanup(&resident);
    weft_kernels_cpu_destroy(kc);
    return 0;
}
