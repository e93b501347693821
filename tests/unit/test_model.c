/* model/model.c: the model description refuses what weft cannot run before a weight is read
 * (classes in model_index.json and in each component, configs, channels), and the layout rules
 * refuse what the workers would (degrees against heads, the anything flags, device_map's
 * combinations, a [tp_plan] style the dataflow cannot take). Each refusal names its cause. */
#include <math.h>
#include <string.h>

#include "common/alloc.h"
#include "model/flux.h"
#include "model/job.h"
#include "model/scheduler.h"
#include "model/mesh.h"
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
    l.mesh.ring = 1, l.mesh.cfg = 2;
    expect_layout(m, &l, NULL, WEFT_ERR_CONFIG, "CFG parallelism");
    weft_layout_single(&l);
    l.mesh.cfg = 3;
    expect_layout(m, &l, NULL, WEFT_ERR_CONFIG, "cfg_degree must be 1 or 2");
    l.mesh.cfg = 2, l.mesh.tp = 2, l.mesh.ulysses = 2;
    expect_layout(m, &l, NULL, WEFT_OK, NULL);
    char name[96];
    weft_layout_name(&l, name, sizeof(name));
    CHECK(strcmp(name, "dp 1 x cfg 2 x ring 1 x ulysses 2 x tp 2") == 0);
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

/* dp 2 x cfg 2 x ring 1 x ulysses 2 x tp 2: the halves inside each replica, every model group
 * inside one half, the cfg group one rank of each half at the same place. */
static void test_mesh_cfg(void)
{
    const struct weft_mesh m = {.dp = 2, .ring = 1, .ulysses = 2, .tp = 2, .pp = 1, .cfg = 2};
    CHECK_EQ(weft_mesh_size(&m), 16);
    for (int r = 0; r < 16; r++) {
        struct weft_mesh_coord c;
        weft_mesh_coord(&m, r, &c);
        CHECK_EQ(weft_mesh_rank(&m, &c), r);
        CHECK_EQ(c.dp, r / 8);
        CHECK_EQ(c.cfg, r / 4 % 2);
    }
    int ranks[16], index = -1;
    CHECK_EQ(weft_mesh_group(&m, 13, WEFT_MESH_CFG, ranks, &index), 2);
    CHECK(ranks[0] == 9 && ranks[1] == 13 && index == 1);
    CHECK_EQ(weft_mesh_group(&m, 13, WEFT_MESH_TP, ranks, &index), 2);
    CHECK(ranks[0] == 12 && ranks[1] == 13);
    CHECK_EQ(weft_mesh_group(&m, 13, WEFT_MESH_CP, ranks, &index), 2);
    CHECK(ranks[0] == 13 && ranks[1] == 15);
    CHECK_EQ(weft_mesh_group(&m, 13, WEFT_MESH_REPLICA, ranks, &index), 8);
    CHECK(ranks[0] == 8 && index == 5);
    /* cfg 0 (or 1): the mesh it always was */
    const struct weft_mesh one = {2, 1, 2, 2, 1};
    CHECK_EQ(weft_mesh_size(&one), 8);
    CHECK_EQ(weft_mesh_group(&one, 5, WEFT_MESH_CFG, ranks, &index), 1);
    CHECK(ranks[0] == 5 && index == 0);
}

/* The classes' own defaults, checked against Diffusers' parameter counts of FLUX.1-dev
 * (guidance_embeds), FLUX.2-dev and Qwen-Image, built on torch's meta device: 11901408320 in
 * 1160 tensors, 32223281152 in 331, 20430401088 in 1933. */
static void flux_count(const char *json, int version, size_t tensors, uint64_t numel)
{
    cJSON *cfg = cJSON_Parse(json);
    CHECK(cfg);
    struct weft_flux_config c;
    CHECK_OK(weft_flux_config_parse(cfg, "config.json", &c, TERR));
    CHECK_EQ(c.version, version);
    const size_t n = weft_flux_params(&c, NULL);
    struct weft_param *p = weft_calloc(n, sizeof(*p));
    CHECK(p);
    CHECK_EQ(weft_flux_params(&c, p), n);
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++) {
        sum += (uint64_t)(p[i].shape[0] * (p[i].ndim == 2 ? p[i].shape[1] : 1));
        CHECK(version != 2 || strstr(p[i].name, ".bias") == NULL); /* FLUX.2 has none */
        CHECK(weft_flux_param_unit(&c, p[i].name) >= 0);
    }
    printf("%s: %zu tensors, %llu parameters\n", weft_flux_class(&c), n,
           (unsigned long long)sum);
    CHECK_EQ(n, tensors);
    CHECK_EQ(sum, numel);
    weft_free(p);
    cJSON_Delete(cfg);
}

static void test_flux_configs(void)
{
    flux_count("{\"_class_name\": \"FluxTransformer2DModel\", \"guidance_embeds\": true}", 1, 1160,
               11901408320ull);
    flux_count("{\"_class_name\": \"Flux2Transformer2DModel\"}", 2, 331, 32223281152ull);
    flux_count("{\"_class_name\": \"QwenImageTransformer2DModel\"}", 3, 1933, 20430401088ull);
    cJSON *cfg = cJSON_Parse("{\"_class_name\": \"Flux2Transformer2DModel\"}");
    struct weft_flux_config c;
    CHECK_OK(weft_flux_config_parse(cfg, "config.json", &c, TERR));
    CHECK_EQ(c.inner_dim, 6144);
    CHECK_EQ(c.mlp_hidden_dim, 18432);
    CHECK_EQ(c.n_axes, 4);
    CHECK_EQ(c.time_proj_dim, 256);
    CHECK(c.rope_theta == 2000.0 && c.guidance_embeds && c.pooled_projection_dim == 0);
    cJSON_Delete(cfg);
    /* FLUX.2's own keys are bounded and checked, each error naming the key */
    static const struct {
        const char *json, *needle;
    } bad[] = {
        {"{\"_class_name\": \"Flux2Transformer2DModel\", \"mlp_ratio\": 0.0001}", "mlp_ratio"},
        {"{\"_class_name\": \"Flux2Transformer2DModel\", \"timestep_guidance_channels\": 31}",
         "timestep_guidance_channels"},
        {"{\"_class_name\": \"Flux2Transformer2DModel\", \"rope_theta\": \"big\"}", "rope_theta"},
        {"{\"_class_name\": \"Flux2Transformer2DModel\", \"axes_dims_rope\": [32, 32, 32]}",
         "axes_dims_rope"},
        {"{\"_class_name\": \"QwenImageTransformer2DModel\", \"zero_cond_t\": true}", "zero_cond_t"},
        {"{\"_class_name\": \"QwenImageTransformer2DModel\", \"axes_dims_rope\": [16, 56, 56, 0]}",
         "Qwen-Image's RoPE has 3"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cfg = cJSON_Parse(bad[i].json);
        weft_error_clear(TERR);
        const weft_status_t st = weft_flux_config_parse(cfg, "config.json", &c, TERR);
        CHECK(st == WEFT_ERR_FORMAT || st == WEFT_ERR_UNSUPPORTED);
        CHECK_TEXT_HAS(bad[i].json, weft_error_text(TERR), bad[i].needle);
        cJSON_Delete(cfg);
    }
}

/* Flux2Pipeline's compute_empirical_mu on both of its branches, against Python's values. */
static void test_empirical_mu(void)
{
    struct weft_sched_config sc;
    weft_sched_config_flux_default(&sc);
    CHECK(sc.mu_rule == WEFT_MU_CALCULATE_SHIFT);
    sc.mu_rule = WEFT_MU_EMPIRICAL;
    static const struct {
        int64_t len;
        int steps;
        double mu;
    } cases[] = {{4096, 28, 2.151443161774889}, {5000, 50, 1.30301666}, {1, 1, 1.966706305839619}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const double mu = weft_sched_mu(&sc, cases[i].len, cases[i].steps);
        CHECK(fabs(mu - cases[i].mu) <= 1e-12 * fabs(cases[i].mu));
    }
}

/* [parallel] groups: layouts joined by '+', each "name N" joined by 'x'; the anything flags
 * land on the groups with the degree they relax; every malformed text is one line naming the
 * group. */
static void test_groups(void)
{
    struct weft_layout base, g[WEFT_LAYOUT_GROUPS_MAX];
    weft_layout_single(&base);
    base.ulysses_anything = true;
    base.rotation = WEFT_RING_P2P;
    int n = 0;
    CHECK_OK(weft_layout_parse_groups("ulysses 2 + dp 2", &base, g, &n, TERR));
    CHECK_EQ(n, 2);
    CHECK(g[0].mesh.dp == 1 && g[0].mesh.ulysses == 2 && g[0].mesh.ring == 1 &&
          g[0].mesh.tp == 1 && g[0].ulysses_anything && !g[0].ring_anything &&
          g[0].rotation == WEFT_RING_P2P);
    CHECK(g[1].mesh.dp == 2 && g[1].mesh.ulysses == 1 && !g[1].ulysses_anything);
    CHECK_EQ(weft_layout_replica_devices(&g[0]), 2);
    CHECK_EQ(weft_layout_replica_devices(&g[1]), 1);
    CHECK_OK(weft_layout_parse_groups("\tdp 3xtp 2 x cfg 2 x ring 2+ulysses 4 ", &base, g,
                                      &n, TERR));
    CHECK_EQ(n, 2);
    CHECK(g[0].mesh.dp == 3 && g[0].mesh.tp == 2 && g[0].mesh.cfg == 2 && g[0].mesh.ring == 2);
    CHECK_EQ(weft_layout_replica_devices(&g[0]), 8);
    CHECK(g[1].mesh.ulysses == 4 && g[1].mesh.dp == 1);
    char name[96];
    weft_layout_name(&g[0], name, sizeof(name));
    CHECK(strcmp(name, "dp 3 x cfg 2 x ring 2 x ulysses 1 x tp 2") == 0);
    CHECK_FAILS(weft_layout_parse_groups("", &base, g, &n, TERR), WEFT_ERR_CONFIG,
                "group 1 is empty");
    CHECK_FAILS(weft_layout_parse_groups("dp 2 + + tp 2", &base, g, &n, TERR),
                WEFT_ERR_CONFIG, "group 2 is empty");
    CHECK_FAILS(weft_layout_parse_groups("dp 2 + sp 2", &base, g, &n, TERR),
                WEFT_ERR_CONFIG, "group 2", "\"sp\" is not a degree");
    CHECK_FAILS(weft_layout_parse_groups("dp", &base, g, &n, TERR), WEFT_ERR_CONFIG,
                "dp needs a degree");
    CHECK_FAILS(weft_layout_parse_groups("tp 0", &base, g, &n, TERR), WEFT_ERR_CONFIG,
                "tp needs a degree from 1 to 1024");
    CHECK_FAILS(weft_layout_parse_groups("tp 1025", &base, g, &n, TERR), WEFT_ERR_CONFIG,
                "tp needs a degree");
    CHECK_FAILS(weft_layout_parse_groups("tp 99999999999999999999", &base, g, &n, TERR),
                WEFT_ERR_CONFIG, "tp needs a degree");
    CHECK_FAILS(weft_layout_parse_groups("tp 2 x tp 2", &base, g, &n, TERR),
                WEFT_ERR_CONFIG, "names tp twice");
    CHECK_FAILS(weft_layout_parse_groups("tp 2 ulysses 2", &base, g, &n, TERR),
                WEFT_ERR_CONFIG, "'u' where 'x' or '+' was expected");
    CHECK_FAILS(weft_layout_parse_groups("tp 2 x", &base, g, &n, TERR), WEFT_ERR_CONFIG,
                "a degree's name (dp, cfg, ring, ulysses or tp) expected after 'x'");
    CHECK_FAILS(weft_layout_parse_groups("DP 2", &base, g, &n, TERR), WEFT_ERR_CONFIG,
                "\"DP\" is not a degree");
    CHECK_FAILS(weft_layout_parse_groups("d\xcf\x81 2", &base, g, &n, TERR),
                WEFT_ERR_CONFIG, "\"d\xcf\x81\" is not a degree");
    CHECK_FAILS(weft_layout_parse_groups("dp 1024 x ring 1024", &base, g, &n, TERR),
                WEFT_ERR_CONFIG, "group 1 takes more than 65536 devices");
    CHECK_OK(weft_layout_parse_groups("dp 256 x ring 256", &base, g, &n, TERR));
    CHECK_FAILS(weft_layout_parse_groups("dp 1 + dp 1 + dp 1 + dp 1 + dp 1 + dp 1 + dp 1 + "
                                         "dp 1 + dp 1", &base, g, &n, TERR),
                WEFT_ERR_CONFIG, "more than 8 groups");
    CHECK_OK(weft_layout_parse_groups("dp 1 + dp 1 + dp 1 + dp 1 + dp 1 + dp 1 + dp 1 + dp 1",
                                      &base, g, &n, TERR));
    CHECK_EQ(n, 8);
    CHECK_EQ(weft_layout_groups_devices(g, n), 8);
}

int main(void)
{
    test_quiet();
    test_flux_configs();
    test_empirical_mu();
    test_mesh_cfg();
    test_open();
    test_layout();
    test_groups();
    printf("ok\n");
    return 0;
}
