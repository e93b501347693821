/* Tensor-parallel plans: resolution against real Diffusers checkpoints (FLUX.1, FLUX.2,
 * Qwen-Image), per-rank ranges, INI overrides, and every validation error naming the module,
 * the size and the degree. Nothing here reads a weight. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "model/flux.h"
#include "model/plan.h"
#include "st_write.h"
#include "test.h"

static struct weft_ckpt *open_ck(const char *rel)
{
    char dir[1024];
    snprintf(dir, sizeof(dir), "%s/%s", getenv("WEFT_SOURCE_ROOT"), rel);
    struct weft_ckpt *ck;
    CHECK_OK(weft_ckpt_open(dir, &ck, TERR));
    return ck;
}

static weft_status_t resolve(struct weft_ckpt *ck, const struct weft_tp_plan *plan, int degree,
                             int ranks, struct weft_tp_layout **lay)
{
    struct weft_model_info info;
    CHECK_OK(weft_model_info_get(ck, &info, TERR));
    return weft_tp_resolve(plan, ck, &info, degree, ranks, lay, TERR);
}

static void test_flux1(void)
{
    struct weft_ckpt *ck = open_ck("tests/data/flux1/tiny-g"); /* 12 heads, 2 + 1 blocks */
    struct weft_tp_plan plan;
    CHECK(weft_tp_plan_builtin(WEFT_FLUX_CLASS, &plan));
    CHECK_EQ(plan.n, 17);
    for (int T = 1; T <= 4; T++) {
        struct weft_tp_layout *lay;
        CHECK_OK(resolve(ck, &plan, T, 4, &lay));
        /* 12 planned Linears per double block, 5 per single block; 4 + 1 all-reduces */
        CHECK_EQ(lay->n_modules, 2 * 12 + 5);
        CHECK_EQ(lay->allreduce_per_pass, 2 * 4 + 1);
        const struct weft_tp_shard *po = weft_tp_find(lay, "single_transformer_blocks.0.proj_out.weight");
        CHECK(po && po->dim == 1 && po->n_blocks == 2 && po->blocks[0] == 96 &&
              po->blocks[1] == 384);
        CHECK(weft_tp_find(lay, "single_transformer_blocks.0.proj_out.bias")->dim == -1);
        CHECK(weft_tp_find(lay, "transformer_blocks.1.attn.to_q.bias")->dim == 0);
        CHECK(!weft_tp_find(lay, "norm_out.linear.weight")); /* replicated */
        struct weft_flux_config c;
        CHECK_OK(weft_flux_config_parse(weft_ckpt_config(ck), "cfg", &c, TERR));
        CHECK_OK(weft_flux_tp_check(&c, lay, TERR));
        weft_tp_layout_destroy(lay);
    }
    /* rank 1 of 4 on the packed proj_out: its slice of each block, concatenated */
    struct weft_tp_layout *lay;
    CHECK_OK(resolve(ck, &plan, 4, 4, &lay));
    struct weft_range r[WEFT_MAX_BLOCKS];
    int64_t local;
    int n = weft_tp_ranges(weft_tp_find(lay, "single_transformer_blocks.0.proj_out.weight"), 4, 1,
                           r, &local);
    CHECK(n == 2 && r[0].begin == 24 && r[0].end == 48 && r[1].begin == 96 + 96 &&
          r[1].end == 96 + 192 && local == 24 + 96);
    n = weft_tp_ranges(weft_tp_find(lay, "transformer_blocks.0.ff.net.0.proj.weight"), 4, 3, r,
                       &local);
    CHECK(n == 1 && r[0].begin == 288 && r[0].end == 384 && local == 96);
    weft_tp_layout_destroy(lay);

    CHECK_FAILS(resolve(ck, &plan, 5, 8, &lay), WEFT_ERR_CONFIG, "tp_degree 5",
                "num_attention_heads 12");
    CHECK_FAILS(resolve(ck, &plan, 4, 2, &lay), WEFT_ERR_CONFIG, "tp_degree 4",
                "2 ranks available");
    CHECK_FAILS(resolve(ck, &plan, 0, 2, &lay), WEFT_ERR_CONFIG, "tp_degree 0");

    /* INI overrides, with their file:line in errors */
    struct weft_conf conf;
    weft_conf_defaults(&conf);
    CHECK_OK(weft_conf_apply_string(&conf,
                                    "[tp_plan]\ntransformer_blocks.*.attn.to_q = "
                                    "packed_colwise(1, 2)\n",
                                    "p.ini"));
    struct weft_tp_plan p2 = plan;
    CHECK_OK(weft_tp_plan_apply_conf(&p2, &conf.tp_plan, TERR));
    CHECK_FAILS(resolve(ck, &p2, 3, 4, &lay), WEFT_ERR_CONFIG,
                "transformer_blocks.0.attn.to_q.weight", "packed block 0 of size 32",
                "tp_degree 3");
    weft_conf_defaults(&conf);
    CHECK_OK(weft_conf_apply_string(&conf, "[tp_plan]\nsingle_transformer_blocks.*.proj_out = "
                                           "packed_rowwise(7, 11)\n", "p.ini"));
    p2 = plan;
    CHECK_OK(weft_tp_plan_apply_conf(&p2, &conf.tp_plan, TERR));
    CHECK_FAILS(resolve(ck, &p2, 2, 4, &lay), WEFT_ERR_CONFIG, "p.ini:2",
                "single_transformer_blocks.0.proj_out.weight", "480", "sum 18");
    weft_conf_defaults(&conf);
    CHECK_OK(weft_conf_apply_string(&conf, "[tp_plan]\nblocks.*.attn.to_q = colwise\n", "p.ini"));
    p2 = plan;
    CHECK_OK(weft_tp_plan_apply_conf(&p2, &conf.tp_plan, TERR));
    CHECK_FAILS(resolve(ck, &p2, 2, 4, &lay), WEFT_ERR_CONFIG, "p.ini:2",
                "'blocks.' does not name a list of numbered blocks");
    weft_conf_defaults(&conf);
    CHECK_OK(weft_conf_apply_string(&conf, "[tp_plan]\nnorm_out = colwise\n", "p.ini"));
    p2 = plan;
    CHECK_OK(weft_tp_plan_apply_conf(&p2, &conf.tp_plan, TERR));
    CHECK_FAILS(resolve(ck, &p2, 2, 4, &lay), WEFT_ERR_CONFIG, "norm_out", "not a Linear layer");
    weft_conf_defaults(&conf);
    CHECK_OK(weft_conf_apply_string(&conf, "[tp_plan]\ntransformer_blocks.*.*.to_q = colwise\n",
                                    "p.ini"));
    p2 = plan;
    CHECK_OK(weft_tp_plan_apply_conf(&p2, &conf.tp_plan, TERR));
    CHECK_FAILS(resolve(ck, &p2, 2, 4, &lay), WEFT_ERR_CONFIG, "'*' may appear once");
    weft_conf_defaults(&conf);
    CHECK_OK(weft_conf_apply_string(&conf, "[tp_plan]\ntransformer_blocks.0.attn.to_q = rowwise\n",
                                    "p.ini"));
    p2 = plan;
    CHECK_OK(weft_tp_plan_apply_conf(&p2, &conf.tp_plan, TERR));
    CHECK_FAILS(resolve(ck, &p2, 2, 4, &lay), WEFT_ERR_CONFIG,
                "transformer_blocks.0.attn.to_q.weight", "planned twice");
    weft_conf_defaults(&conf);
    CHECK_OK(weft_conf_apply_string(&conf, "[tp_plan]\nx.*.y = sideways\n", "p.ini"));
    p2 = plan;
    CHECK_FAILS(weft_tp_plan_apply_conf(&p2, &conf.tp_plan, TERR), WEFT_ERR_CONFIG, "p.ini:2",
                "'sideways': unknown style");
    weft_conf_defaults(&conf);
    CHECK_OK(weft_conf_apply_string(&conf, "[tp_plan]\nx = colwise(1, 2)\n", "p.ini"));
    p2 = plan;
    CHECK_FAILS(weft_tp_plan_apply_conf(&p2, &conf.tp_plan, TERR), WEFT_ERR_CONFIG, "p.ini:2",
                "only packed styles take (blocks)");

    /* "none" removes an entry; the module becomes replicated, which breaks FLUX's dataflow */
    const char *opt = "tp_plan.transformer_blocks.*.attn.to_out.0=none";
    weft_conf_defaults(&conf);
    CHECK_OK(weft_conf_apply_override(&conf, opt));
    p2 = plan;
    CHECK_OK(weft_tp_plan_apply_conf(&p2, &conf.tp_plan, TERR));
    CHECK_EQ(p2.n, plan.n - 1);
    CHECK_OK(resolve(ck, &p2, 2, 4, &lay));
    struct weft_flux_config c;
    CHECK_OK(weft_flux_config_parse(weft_ckpt_config(ck), "cfg", &c, TERR));
    CHECK_FAILS(weft_flux_tp_check(&c, lay, TERR), WEFT_ERR_CONFIG,
                "transformer_blocks.0.attn.to_out.0", "replicate", "rowwise or packed_rowwise");
    weft_tp_layout_destroy(lay);
    weft_ckpt_close(ck);
}

static void test_other_classes(void)
{
    const char *dirs[] = {"tests/data/flux2/tiny", "tests/data/qwenimage/tiny"};
    const int modules[] = {14, 12}; /* planned Linears: one double (+ one single) block */
    for (int k = 0; k < 2; k++) {
        struct weft_ckpt *ck = open_ck(dirs[k]);
        struct weft_tp_plan plan;
        CHECK(weft_tp_plan_builtin(weft_ckpt_class(ck), &plan));
        for (int T = 2; T <= 4; T++) {
            struct weft_tp_layout *lay;
            CHECK_OK(resolve(ck, &plan, T, T, &lay));
            CHECK_EQ(lay->n_modules, modules[k]);
            weft_tp_layout_destroy(lay);
        }
        weft_ckpt_close(ck);
    }
    /* FLUX.2's fused single-block projection takes the model's absolute block sizes */
    struct weft_ckpt *ck = open_ck("tests/data/flux2/tiny");
    struct weft_tp_plan plan;
    CHECK(weft_tp_plan_builtin(weft_ckpt_class(ck), &plan));
    struct weft_tp_layout *lay;
    CHECK_OK(resolve(ck, &plan, 3, 3, &lay));
    const struct weft_tp_shard *s =
        weft_tp_find(lay, "single_transformer_blocks.0.attn.to_qkv_mlp_proj.weight");
    CHECK(s && s->dim == 0 && s->n_blocks == 5 && s->blocks[0] == 48 && s->blocks[3] == 12);
    s = weft_tp_find(lay, "transformer_blocks.0.ff.linear_in.weight"); /* proportions [1, 1] */
    CHECK(s && s->n_blocks == 2 && s->blocks[0] == 12 && s->blocks[1] == 12);
    weft_tp_layout_destroy(lay);
    CHECK_FAILS(resolve(ck, &plan, 5, 5, &lay), WEFT_ERR_CONFIG, "tp_degree 5",
                "num_attention_heads 12");
    weft_ckpt_close(ck);
}

/* A custom model (no built-in plan) with quantized weights, and a quantization_config. */
static void test_refusals(void)
{
    char dir[] = "/tmp/weft_test_plan_XXXXXX";
    CHECK(mkdtemp(dir));
    char path[1200];
    snprintf(path, sizeof(path), "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    CHECK(f && fputs("{\"_class_name\": \"MyModel\"}", f) >= 0 && fclose(f) == 0);
    uint8_t q8[64] = {0};
    struct st_spec t[] = {{"layer.weight", "F8_E4M3", 2, {8, 8}, q8, 64}};
    snprintf(path, sizeof(path), "%s/diffusion_pytorch_model.safetensors", dir);
    CHECK(st_write(path, t, 1, NULL) == 0);
    struct weft_ckpt *ck;
    CHECK_OK(weft_ckpt_open(dir, &ck, TERR));
    struct weft_tp_plan plan;
    CHECK(!weft_tp_plan_builtin("MyModel", &plan));
    struct weft_conf conf;
    weft_conf_defaults(&conf);
    CHECK_OK(weft_conf_apply_override(&conf, "tp_plan.layer=colwise"));
    CHECK_OK(weft_tp_plan_apply_conf(&plan, &conf.tp_plan, TERR));
    struct weft_tp_layout *lay;
    CHECK_FAILS(resolve(ck, &plan, 2, 2, &lay), WEFT_ERR_UNSUPPORTED, "layer.weight",
                "F8_E4M3", "quantized");
    weft_ckpt_close(ck);
    snprintf(path, sizeof(path), "%s/config.json", dir);
    f = fopen(path, "w");
    CHECK(f && fputs("{\"_class_name\": \"MyModel\", \"quantization_config\": {}}", f) >= 0 &&
          fclose(f) == 0);
    CHECK_OK(weft_ckpt_open(dir, &ck, TERR));
    CHECK_FAILS(resolve(ck, &plan, 2, 2, &lay), WEFT_ERR_UNSUPPORTED, "quantization_config");
    weft_ckpt_close(ck);
    snprintf(path, sizeof(path), "rm -rf '%s'", dir);
    CHECK(system(path) == 0);
}

int main(void)
{
    test_quiet();
    test_flux1();
    test_other_classes();
    test_refusals();
    return 0;
}
