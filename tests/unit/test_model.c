/* model/model.c: the model description refuses what weft cannot run before a weight is read
 * (classes in model_index.json and in each component, configs, channels), and the layout rules
 * refuse what the workers would (degrees against heads, the anything flags, device_map's
 * combinations, a [tp_plan] style the dataflow cannot take). Each refusal names its cause. */
#include <string.h>

#include "model/job.h"
#include "model/model.h"
#include "model_variant.h"
#include "test.h"

static void expect_open(const char *dir, weft_status_t want, const char *sub)
{
    struct weft_model *m = NULL;
    struct weft_error err = WEFT_ERROR_INIT;
    weft_status_t st = weft_model_open(dir, &m, &err);
    if (st != want || (sub && !strstr(weft_error_text(&err), sub))) {
        fprintf(stderr, "open %s: got %d \"%s\", want %d with \"%s\"\n", dir, st,
                weft_error_text(&err), want, sub ? sub : "");
        exit(1);
    }
    weft_model_close(m);
}

/* One edit of a fresh variant, opened: refused with sub. */
static void refused(const char *rel, const char *key, const char *value, weft_status_t want,
                    const char *sub)
{
    char dir[64];
    variant_make(dir);
    variant_set(dir, rel, key, value);
    expect_open(dir, want, sub);
    variant_remove(dir);
}

static void test_open(void)
{
    char dir[1024];
    snprintf(dir, sizeof(dir), "%s/tests/data/random/flux-tiny", getenv("WEFT_SOURCE_ROOT"));
    struct weft_model *m;
    struct weft_error err = WEFT_ERROR_INIT;
    CHECK_OK(weft_model_open(dir, &m, &err));
    CHECK(m->pipeline && m->has_vae && strcmp(m->pipeline_class, "FluxPipeline") == 0);
    CHECK_EQ(m->vae_scale, 8);
    CHECK_EQ(m->side_unit, 16);
    CHECK_EQ(m->flux.num_attention_heads, 12);
    CHECK(m->transformer_file_bytes > 0 && m->vae_file_bytes > 0);
    weft_model_close(m);
    /* the transformer folder alone: latents only, FluxPipeline's default scale */
    snprintf(dir, sizeof(dir), "%s/tests/data/random/flux-tiny/transformer", getenv("WEFT_SOURCE_ROOT"));
    CHECK_OK(weft_model_open(dir, &m, &err));
    CHECK(!m->pipeline && !m->has_vae && m->side_unit == 16);
    weft_model_close(m);
    expect_open("/nonexistent", WEFT_ERR_NOT_FOUND, "not a pipeline folder");

    refused("model_index.json", "_class_name", "\"StableDiffusion3Pipeline\"",
            WEFT_ERR_UNSUPPORTED, "FluxPipeline");
    refused("model_index.json", "transformer", "[\"diffusers\", \"SD3Transformer2DModel\"]",
            WEFT_ERR_UNSUPPORTED, "\"transformer\"");
    refused("model_index.json", "transformer", NULL, WEFT_ERR_FORMAT, "no \"transformer\"");
    refused("transformer/config.json", "_class_name", "\"SD3Transformer2DModel\"",
            WEFT_ERR_UNSUPPORTED, "_class_name");
    refused("vae/config.json", "_class_name", "\"AutoencoderTiny\"", WEFT_ERR_UNSUPPORTED,
            "AutoencoderKL");
    refused("vae/config.json", "latent_channels", "8", WEFT_ERR_FORMAT, "latent_channels");
    refused("transformer/config.json", "out_channels", "32", WEFT_ERR_FORMAT, "out_channels");
    refused("transformer/config.json", "in_channels", "62", WEFT_ERR_FORMAT, "in_channels 62");
    refused("scheduler/scheduler_config.json", "use_karras_sigmas", "true", WEFT_ERR_UNSUPPORTED,
            "karras");
    refused("scheduler/scheduler_config.json", "_class_name", "\"DDIMScheduler\"",
            WEFT_ERR_UNSUPPORTED, "FlowMatchEulerDiscreteScheduler");

    /* model_index.json that is not JSON, and a vae/ it names that is not there */
    char v[64];
    variant_make(v);
    variant_write(v, "model_index.json", "{\"_class_name\": \"FluxPipeline\",");
    expect_open(v, WEFT_ERR_FORMAT, "model_index.json");
    variant_remove(v);
    variant_make(v);
    char path[128];
    snprintf(path, sizeof(path), "%s/vae/config.json", v);
    CHECK(unlink(path) == 0);
    expect_open(v, WEFT_ERR_NOT_FOUND, "vae");
    variant_remove(v);
    /* a null vae entry: no VAE, latents only */
    variant_make(v);
    variant_set(v, "model_index.json", "vae", "[null, null]");
    struct weft_model *nv;
    CHECK_OK(weft_model_open(v, &nv, &err));
    CHECK(!nv->has_vae);
    weft_model_close(nv);
    variant_remove(v);
}

static void expect_layout(const struct weft_model *m, const struct weft_layout *l,
                          const struct weft_conf_map *plan, weft_status_t want, const char *sub)
{
    struct weft_error err = WEFT_ERROR_INIT;
    weft_status_t st = weft_model_check_layout(m, l, plan, &err);
    if (st != want || (sub && !strstr(weft_error_text(&err), sub))) {
        fprintf(stderr, "layout dp %d ring %d ulysses %d tp %d: got %d \"%s\", want %d with "
                        "\"%s\"\n", l->mesh.dp, l->mesh.ring, l->mesh.ulysses, l->mesh.tp, st,
                weft_error_text(&err), want, sub ? sub : "");
        exit(1);
    }
}

static void test_layout(void)
{
    char dir[1024];
    snprintf(dir, sizeof(dir), "%s/tests/data/random/flux-tiny", getenv("WEFT_SOURCE_ROOT"));
    struct weft_model *m;
    struct weft_error err = WEFT_ERROR_INIT;
    CHECK_OK(weft_model_open(dir, &m, &err));
    struct weft_layout l;
    weft_layout_single(&l);
    expect_layout(m, &l, NULL, WEFT_OK, NULL);
    l.mesh.tp = 2, l.mesh.ulysses = 2;
    expect_layout(m, &l, NULL, WEFT_OK, NULL);
    l.mesh.tp = 5, l.mesh.ulysses = 1;
    expect_layout(m, &l, NULL, WEFT_ERR_CONFIG, "does not divide num_attention_heads 12");
    l.mesh.tp = 1, l.mesh.ulysses = 16;
    expect_layout(m, &l, NULL, WEFT_ERR_CONFIG, "fewer than ulysses_degree 16");
    l.mesh.ulysses = 5;
    expect_layout(m, &l, NULL, WEFT_ERR_CONFIG, "ulysses_anything");
    l.ulysses_anything = true;
    expect_layout(m, &l, NULL, WEFT_OK, NULL);
    weft_layout_single(&l);
    l.ring_anything = true;
    expect_layout(m, &l, NULL, WEFT_ERR_CONFIG, "ring_anything needs ring_degree > 1");
    weft_layout_single(&l);
    l.device_map = true, l.mesh.pp = 2, l.mesh.tp = 2;
    expect_layout(m, &l, NULL, WEFT_ERR_CONFIG, "tensor parallelism");
    l.mesh.tp = 1, l.mesh.ring = 2;
    expect_layout(m, &l, NULL, WEFT_ERR_CONFIG, "context parallelism");
    /* a [tp_plan] entry whose style the dataflow cannot take, resolved as the workers will */
    weft_layout_single(&l);
    l.mesh.tp = 2;
    struct weft_conf_map plan = {.n = 1};
    snprintf(plan.e[0].key, sizeof(plan.e[0].key), "transformer_blocks.*.attn.to_q");
    snprintf(plan.e[0].value, sizeof(plan.e[0].value), "rowwise");
    snprintf(plan.e[0].origin, sizeof(plan.e[0].origin), "test.ini:3");
    expect_layout(m, &l, &plan, WEFT_ERR_CONFIG, "to_q");
    snprintf(plan.e[0].value, sizeof(plan.e[0].value), "diagonal");
    expect_layout(m, &l, &plan, WEFT_ERR_CONFIG, "test.ini:3");
    weft_model_close(m);
}

int main(void)
{
    test_quiet();
    test_open();
    test_layout();
    printf("ok\n");
    return 0;
}
