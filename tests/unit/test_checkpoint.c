/* Diffusers folders: single and sharded checkpoints, the index checked both ways, refusals,
 * pipeline folders, and the FLUX.1 typed config. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/checkpoint.h"
#include "model/flux.h"
#include "st_write.h"
#include "test.h"

static char dir[] = "/tmp/weft_test_ck_XXXXXX";

static const char *p(const char *name)
{
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof(buf[k]), "%s/%s", dir, name);
    return buf[k];
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    CHECK(f && fputs(text, f) >= 0 && fclose(f) == 0);
}

static float data[16];

static void make_shards(const char *sub)
{
    char d[512];
    snprintf(d, sizeof(d), "%s/%s", dir, sub);
    mkdir(d, 0755);
    char path[600];
    snprintf(path, sizeof(path), "%s/config.json", d);
    write_text(path, "{\"_class_name\": \"TinyModel\", \"width\": 4}\n");
    struct st_spec s1[] = {{"a.weight", "F32", 2, {2, 2}, data, 16},
                           {"a.bias", "F32", 1, {2}, data, 8}};
    struct st_spec s2[] = {{"b.weight", "F32", 1, {4}, data, 16}};
    snprintf(path, sizeof(path), "%s/m-00001-of-00002.safetensors", d);
    CHECK(st_write(path, s1, 2, "{\"format\":\"pt\"}") == 0);
    snprintf(path, sizeof(path), "%s/m-00002-of-00002.safetensors", d);
    CHECK(st_write(path, s2, 1, NULL) == 0);
}

static void write_index(const char *sub, const char *map)
{
    char path[600], text[2048];
    snprintf(path, sizeof(path), "%s/%s/diffusion_pytorch_model.safetensors.index.json", dir, sub);
    snprintf(text, sizeof(text), "{\"metadata\": {\"total_size\": 40}, \"weight_map\": %s}", map);
    write_text(path, text);
}

#define GOOD_MAP                                                                             \
    "{\"a.weight\": \"m-00001-of-00002.safetensors\", \"a.bias\": "                          \
    "\"m-00001-of-00002.safetensors\", \"b.weight\": \"m-00002-of-00002.safetensors\"}"

static void test_sharded(void)
{
    make_shards("good");
    write_index("good", GOOD_MAP);
    struct weft_ckpt *ck;
    CHECK_OK(weft_ckpt_open(p("good"), &ck, TERR));
    CHECK(weft_ckpt_sharded(ck));
    CHECK_EQ(weft_ckpt_file_count(ck), 2);
    CHECK_EQ(weft_ckpt_count(ck), 3);
    CHECK(strcmp(weft_ckpt_class(ck), "TinyModel") == 0);
    CHECK(strcmp(weft_ckpt_at(ck, 0)->info->name, "a.bias") == 0); /* name order */
    const struct weft_ckpt_tensor *b = weft_ckpt_find(ck, "b.weight");
    CHECK(b && b->info->numel == 4);
    float got[4];
    CHECK_OK(weft_st_read(b->file, b->info, got, WEFT_DTYPE_F32, TERR));
    CHECK(memcmp(got, data, 16) == 0);
    CHECK(!weft_ckpt_find(ck, "c"));
    weft_ckpt_close(ck);

    make_shards("escape");
    write_index("escape", "{\"a.weight\": \"../good/m-00001-of-00002.safetensors\"}");
    CHECK_FAILS(weft_ckpt_open(p("escape"), &ck, TERR), WEFT_ERR_FORMAT, "a.weight",
                "not a plain file name");

    make_shards("missing");
    write_index("missing", "{\"a.weight\": \"m-00001-of-00002.safetensors\", \"a.bias\": "
                           "\"m-00001-of-00002.safetensors\", \"b.weight\": "
                           "\"m-00002-of-00002.safetensors\", \"c\": "
                           "\"m-00002-of-00002.safetensors\"}");
    CHECK_FAILS(weft_ckpt_open(p("missing"), &ck, TERR), WEFT_ERR_FORMAT, "'c'",
                "does not contain it");

    make_shards("unlisted");
    write_index("unlisted", "{\"a.weight\": \"m-00001-of-00002.safetensors\", \"b.weight\": "
                            "\"m-00002-of-00002.safetensors\"}");
    CHECK_FAILS(weft_ckpt_open(p("unlisted"), &ck, TERR), WEFT_ERR_FORMAT, "'a.bias'",
                "does not list");

    make_shards("noshard");
    write_index("noshard", "{\"a.weight\": \"m-00009-of-00009.safetensors\"}");
    CHECK_FAILS(weft_ckpt_open(p("noshard"), &ck, TERR), WEFT_ERR_NOT_FOUND,
                "m-00009-of-00009.safetensors", "cannot open");

    make_shards("badjson");
    write_text(p("badjson/diffusion_pytorch_model.safetensors.index.json"), "{\"weight_map\": ");
    CHECK_FAILS(weft_ckpt_open(p("badjson"), &ck, TERR), WEFT_ERR_FORMAT, "index.json",
                "not valid JSON");
    write_text(p("badjson/diffusion_pytorch_model.safetensors.index.json"), "{\"x\": {}}");
    CHECK_FAILS(weft_ckpt_open(p("badjson"), &ck, TERR), WEFT_ERR_FORMAT, "no \"weight_map\"");
}

static void test_folders(void)
{
    struct weft_ckpt *ck;
    mkdir(p("bin"), 0755);
    write_text(p("bin/config.json"), "{}");
    write_text(p("bin/diffusion_pytorch_model.bin"), "x");
    CHECK_FAILS(weft_ckpt_open(p("bin"), &ck, TERR), WEFT_ERR_UNSUPPORTED, "non-safetensors");
    mkdir(p("empty"), 0755);
    write_text(p("empty/config.json"), "{}");
    CHECK_FAILS(weft_ckpt_open(p("empty"), &ck, TERR), WEFT_ERR_NOT_FOUND, "no weights");
    mkdir(p("noconfig"), 0755);
    CHECK_FAILS(weft_ckpt_open(p("noconfig"), &ck, TERR), WEFT_ERR_NOT_FOUND, "config.json");
    write_text(p("empty/config.json"), "[1]");
    CHECK_FAILS(weft_ckpt_open(p("empty"), &ck, TERR), WEFT_ERR_FORMAT, "not a JSON object");
    write_text(p("empty/config.json"), "{\"a\": \"\xff\"}");
    CHECK_FAILS(weft_ckpt_open(p("empty"), &ck, TERR), WEFT_ERR_FORMAT, "UTF-8");
    CHECK_EQ(weft_path_kind(p("good")), WEFT_PATH_MODEL);
    CHECK_EQ(weft_path_kind(p("good/m-00002-of-00002.safetensors")), WEFT_PATH_SAFETENSORS);
    CHECK_EQ(weft_path_kind(p("noconfig")), WEFT_PATH_NONE);

    mkdir(p("pipe"), 0755);
    write_text(p("pipe/model_index.json"),
               "{\"_class_name\": \"FluxPipeline\", \"_diffusers_version\": \"0.42.1\", "
               "\"scheduler\": [\"diffusers\", \"FlowMatchEulerDiscreteScheduler\"], "
               "\"text_encoder\": [null, null], \"transformer\": [\"diffusers\", "
               "\"FluxTransformer2DModel\"]}");
    CHECK_EQ(weft_path_kind(p("pipe")), WEFT_PATH_PIPELINE);
    struct weft_pipe *pipe;
    CHECK_OK(weft_pipe_open(p("pipe"), &pipe, TERR));
    CHECK_EQ(weft_pipe_count(pipe), 3);
    CHECK(strcmp(weft_pipe_class(pipe), "FluxPipeline") == 0);
    CHECK(weft_pipe_find(pipe, "text_encoder")->class_name == NULL);
    CHECK(strcmp(weft_pipe_find(pipe, "transformer")->class_name, "FluxTransformer2DModel") == 0);
    weft_pipe_close(pipe);
    write_text(p("pipe/model_index.json"), "{\"../x\": [\"diffusers\", \"X\"]}");
    CHECK_FAILS(weft_pipe_open(p("pipe"), &pipe, TERR), WEFT_ERR_FORMAT, "not a plain folder name");
    write_text(p("pipe/model_index.json"), "{\"vae\": [\"diffusers\"]}");
    CHECK_FAILS(weft_pipe_open(p("pipe"), &pipe, TERR), WEFT_ERR_FORMAT, "'vae'",
                "[library, class]");
}

static void test_flux_config(void)
{
    struct weft_flux_config c;
    cJSON *j = cJSON_Parse("{\"_class_name\": \"FluxTransformer2DModel\"}");
    CHECK_OK(weft_flux_config_parse(j, "cfg", &c, TERR));
    CHECK_EQ(c.num_layers, 19); /* Diffusers' class defaults */
    CHECK_EQ(c.num_single_layers, 38);
    CHECK_EQ(c.inner_dim, 3072);
    CHECK_EQ(c.mlp_hidden_dim, 12288);
    CHECK_EQ(c.n_axes, 3);
    CHECK_EQ(c.axes_dims_rope[1], 56);
    CHECK_EQ(c.out_channels, 64);
    CHECK(!c.guidance_embeds);
    cJSON_Delete(j);
    struct {
        const char *json, *reason;
    } bad[] = {
        {"{\"num_layers\": \"2\"}", "\"num_layers\" is not an integer"},
        {"{\"num_layers\": -1}", "outside [0, 4096]"},
        {"{\"axes_dims_rope\": [16, 56, 50]}", "sum to 122 but attention_head_dim is 128"},
        {"{\"axes_dims_rope\": [15, 57, 56]}", "axes_dims_rope[0] = 15 is odd"},
        {"{\"axes_dims_rope\": [64, 64]}", "axes_dims_rope has 2 axes; FLUX.1's RoPE has 3"},
        {"{\"axes_dims_rope\": [32, 32, 32, 32]}", "has 4 axes; FLUX.1's RoPE has 3"},
        {"{\"guidance_embeds\": 1}", "not true or false"},
        {"{\"num_attention_heads\": 4096, \"attention_head_dim\": 4096, "
         "\"axes_dims_rope\": [4096]}", "too wide"},
        {"{\"patch_size\": 2}", "patch_size"},
    };
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        j = cJSON_Parse(bad[k].json);
        CHECK(j);
        CHECK_FAILS(weft_flux_config_parse(j, "cfg.json", &c, TERR), WEFT_ERR_FORMAT, "cfg.json",
                    bad[k].reason);
        cJSON_Delete(j);
    }
}

/* The Diffusers-saved sharded FLUX.1 checkpoint from tests/golden/make_flux.py. */
static void test_real_sharded(void)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/tests/data/flux1/tiny-nog", getenv("WEFT_SOURCE_ROOT"));
    struct weft_ckpt *ck;
    CHECK_OK(weft_ckpt_open(path, &ck, TERR));
    CHECK(weft_ckpt_sharded(ck));
    CHECK(weft_ckpt_file_count(ck) >= 3);
    CHECK(strcmp(weft_ckpt_class(ck), WEFT_FLUX_CLASS) == 0);
    struct weft_flux_config c;
    CHECK_OK(weft_flux_config_parse(weft_ckpt_config(ck), path, &c, TERR));
    CHECK(!c.guidance_embeds);
    CHECK(weft_ckpt_find(ck, "transformer_blocks.0.attn.to_q.weight"));
    CHECK(weft_ckpt_find(ck, "single_transformer_blocks.0.proj_out.weight"));
    CHECK(!weft_ckpt_find(ck, "time_text_embed.guidance_embedder.linear_1.weight"));
    /* the tensors against the config's parameters: all there; a config that differs from the
     * checkpoint is refused naming the first tensor that does not fit (weft plan once took
     * such folders, and only the workers' loading refused them) */
    CHECK_OK(weft_flux_check_params(&c, ck, TERR));
    struct weft_flux_config more = c, fewer = c, guided = c, wide = c;
    more.num_layers++;
    CHECK_FAILS(weft_flux_check_params(&more, ck, TERR), WEFT_ERR_FORMAT,
                "missing tensor 'transformer_blocks.", "(required by the config)");
    fewer.num_single_layers--;
    CHECK_FAILS(weft_flux_check_params(&fewer, ck, TERR), WEFT_ERR_FORMAT,
                "unexpected tensor 'single_transformer_blocks.", "not a parameter of");
    guided.guidance_embeds = true;
    CHECK_FAILS(weft_flux_check_params(&guided, ck, TERR), WEFT_ERR_FORMAT,
                "missing tensor 'time_text_embed.guidance_embedder");
    wide.joint_attention_dim *= 2;
    CHECK_FAILS(weft_flux_check_params(&wide, ck, TERR), WEFT_ERR_FORMAT,
                "context_embedder.weight' has shape", "but the config implies");
    weft_ckpt_close(ck);
}

int main(void)
{
    test_quiet();
    CHECK(mkdtemp(dir));
    for (int i = 0; i < 16; i++)
        data[i] = (float)i;
    test_sharded();
    test_folders();
    test_flux_config();
    test_real_sharded();
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
    return 0;
}
