/* Synthetic FLUX checkpoints (see synth.h). */
#include "bench/synth.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <cJSON.h>
#include <stdlib.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/tensor.h"
#include "model/safetensors.h"
#include "model/text_encoder.h"
#include "model/vae.h"
#include "worker/noise.h"

void weft_synth_flux_config(struct weft_flux_config *c, int64_t heads, int64_t head_dim,
                            int64_t double_blocks, int64_t single_blocks)
{
    *c = (struct weft_flux_config){
        .version = 1,
        .patch_size = 1,
        .in_channels = 64,
        .out_channels = 64,
        .num_layers = double_blocks,
        .num_single_layers = single_blocks,
        .attention_head_dim = head_dim,
        .num_attention_heads = heads,
        .joint_attention_dim = 4096,
        .pooled_projection_dim = 768,
        .guidance_embeds = true,
        .time_proj_dim = WEFT_FLUX_TIME_PROJ_DIM,
        .rope_theta = 10000.0,
        .eps = 1e-6f,
        .n_axes = 3,
    };
    /* FLUX.1's (16, 56, 56) split, scaled to head_dim */
    int64_t a0 = head_dim / 8 / 2 * 2, rest = (head_dim - a0) / 2 / 2 * 2;
    c->axes_dims_rope[0] = a0;
    c->axes_dims_rope[1] = rest;
    c->axes_dims_rope[2] = head_dim - a0 - rest;
    c->inner_dim = heads * head_dim;
    c->mlp_hidden_dim = 4 * c->inner_dim;
}

struct fill_ctx {
    const struct weft_param *params;
    enum weft_dtype dtype;
    uint64_t seed;
};

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static weft_status_t fill(void *arg, size_t i, uint64_t offset, void *buf, size_t bytes)
{
    const struct fill_ctx *fc = arg;
    const struct weft_param *p = &fc->params[i];
    size_t esz = weft_dtype_size(fc->dtype), n = bytes / esz;
    uint64_t first = offset / esz;
    bool norm = p->ndim == 1 && strstr(p->name, "norm_") != NULL;
    int64_t fan_in = p->ndim == 2 ? p->shape[1] : 0;
    if (p->ndim == 1 && !norm) { /* a bias: bound from the weight's fan-in (previous param) */
        fan_in = fc->params[i - 1].shape[1];
    }
    float bound = norm ? 0.0f : 1.0f / sqrtf((float)fan_in);
    uint64_t base = mix(fc->seed ^ ((uint64_t)i << 40));
    for (size_t k = 0; k < n; k++) {
        float v = 1.0f;
        if (!norm) {
            uint64_t r = mix(base + first + k);
            v = ((float)(r >> 40) / 16777216.0f * 2.0f - 1.0f) * bound;
        }
        if (fc->dtype == WEFT_DTYPE_F32)
            ((float *)buf)[k] = v;
        else if (fc->dtype == WEFT_DTYPE_BF16)
            ((uint16_t *)buf)[k] = weft_f32_to_bf16(v);
        else
            ((uint16_t *)buf)[k] = weft_f32_to_f16(v);
    }
    return WEFT_OK;
}

void weft_synth_flux2_config(struct weft_flux_config *c, int64_t heads, int64_t head_dim,
                             int64_t double_blocks, int64_t single_blocks)
{
    weft_synth_flux_config(c, heads, head_dim, double_blocks, single_blocks);
    c->version = 2;
    c->in_channels = c->out_channels = 128;
    c->joint_attention_dim = 15360;
    c->pooled_projection_dim = 0;
    c->rope_theta = 2000.0;
    c->n_axes = 4;
    const int64_t a = head_dim / 4 / 2 * 2;
    for (int i = 0; i < 3; i++)
        c->axes_dims_rope[i] = a;
    c->axes_dims_rope[3] = head_dim - 3 * a;
    c->mlp_hidden_dim = 3 * c->inner_dim;
}

void weft_synth_qwen_config(struct weft_flux_config *c, int64_t heads, int64_t head_dim,
                            int64_t blocks)
{
    weft_synth_flux_config(c, heads, head_dim, blocks, 0);
    c->version = 3;
    c->patch_size = 2;
    c->joint_attention_dim = 3584;
    c->pooled_projection_dim = 0;
    c->guidance_embeds = false;
}

static weft_status_t write_config(const char *dir, const struct weft_flux_config *c)
{
    char path[2048];
    snprintf(path, sizeof(path), "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) {
        WEFT_LOG_ERROR("bench", "%s: cannot create: %s", path, strerror(errno));
        return WEFT_ERR_IO;
    }
    if (c->version == 3)
        fprintf(f,
                "{\n  \"_class_name\": \"%s\",\n  \"_diffusers_version\": \"0.42.1\",\n"
                "  \"attention_head_dim\": %lld,\n  \"axes_dims_rope\": [%lld, %lld, %lld],\n"
                "  \"guidance_embeds\": false,\n  \"in_channels\": %lld,\n"
                "  \"joint_attention_dim\": %lld,\n  \"num_attention_heads\": %lld,\n"
                "  \"num_layers\": %lld,\n  \"out_channels\": %lld,\n  \"patch_size\": 2\n}\n",
                WEFT_QWEN_CLASS, (long long)c->attention_head_dim,
                (long long)c->axes_dims_rope[0], (long long)c->axes_dims_rope[1],
                (long long)c->axes_dims_rope[2], (long long)c->in_channels,
                (long long)c->joint_attention_dim, (long long)c->num_attention_heads,
                (long long)c->num_layers, (long long)c->out_channels / 4);
    else if (c->version == 2)
        fprintf(f,
                "{\n  \"_class_name\": \"%s\",\n  \"_diffusers_version\": \"0.42.1\",\n"
                "  \"attention_head_dim\": %lld,\n  \"axes_dims_rope\": [%lld, %lld, %lld, %lld],\n"
                "  \"eps\": 1e-06,\n  \"guidance_embeds\": %s,\n  \"in_channels\": %lld,\n"
                "  \"joint_attention_dim\": %lld,\n  \"mlp_ratio\": 3.0,\n"
                "  \"num_attention_heads\": %lld,\n  \"num_layers\": %lld,\n"
                "  \"num_single_layers\": %lld,\n  \"out_channels\": null,\n  \"patch_size\": 1,\n"
                "  \"rope_theta\": 2000,\n  \"timestep_guidance_channels\": %lld\n}\n",
                WEFT_FLUX2_CLASS, (long long)c->attention_head_dim,
                (long long)c->axes_dims_rope[0], (long long)c->axes_dims_rope[1],
                (long long)c->axes_dims_rope[2], (long long)c->axes_dims_rope[3],
                c->guidance_embeds ? "true" : "false", (long long)c->in_channels,
                (long long)c->joint_attention_dim, (long long)c->num_attention_heads,
                (long long)c->num_layers, (long long)c->num_single_layers,
                (long long)c->time_proj_dim);
    else
    fprintf(f,
            "{\n  \"_class_name\": \"%s\",\n  \"_diffusers_version\": \"0.42.1\",\n"
            "  \"attention_head_dim\": %lld,\n  \"axes_dims_rope\": [%lld, %lld, %lld],\n"
            "  \"guidance_embeds\": %s,\n  \"in_channels\": %lld,\n"
            "  \"joint_attention_dim\": %lld,\n  \"num_attention_heads\": %lld,\n"
            "  \"num_layers\": %lld,\n  \"num_single_layers\": %lld,\n  \"out_channels\": null,\n"
            "  \"patch_size\": 1,\n  \"pooled_projection_dim\": %lld\n}\n",
            WEFT_FLUX_CLASS, (long long)c->attention_head_dim, (long long)c->axes_dims_rope[0],
            (long long)c->axes_dims_rope[1], (long long)c->axes_dims_rope[2],
            c->guidance_embeds ? "true" : "false", (long long)c->in_channels,
            (long long)c->joint_attention_dim, (long long)c->num_attention_heads,
            (long long)c->num_layers, (long long)c->num_single_layers,
            (long long)c->pooled_projection_dim);
    if (fclose(f) != 0) {
        WEFT_LOG_ERROR("bench", "%s: write failed", path);
        return WEFT_ERR_IO;
    }
    return WEFT_OK;
}

weft_status_t weft_synth_flux_write(const char *dir, const struct weft_flux_config *c,
                                    enum weft_dtype dtype, uint64_t seed)
{
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        WEFT_LOG_ERROR("bench", "%s: cannot create: %s", dir, strerror(errno));
        return WEFT_ERR_IO;
    }
    weft_status_t st = write_config(dir, c);
    if (st != WEFT_OK)
        return st;
    size_t n = weft_flux_params(c, NULL);
    struct weft_param *params = weft_calloc(n, sizeof(*params));
    struct weft_st_out *outs = weft_calloc(n, sizeof(*outs));
    if (!params || !outs) {
        st = WEFT_ERR_NOMEM;
        goto out;
    }
    weft_flux_params(c, params);
    for (size_t i = 0; i < n; i++)
        outs[i] = (struct weft_st_out){params[i].name, dtype, params[i].ndim, params[i].shape,
                                       NULL};
    char path[2048];
    snprintf(path, sizeof(path), "%s/diffusion_pytorch_model.safetensors", dir);
    struct fill_ctx fc = {params, dtype, seed};
    const struct weft_st_meta meta[] = {{"format", "pt"}};
    st = weft_st_write_stream(path, n, outs, 1, meta, fill, &fc, NULL);
out:
    weft_free(params);
    weft_free(outs);
    return st;
}

weft_status_t weft_synth_flux_write_sharded(const char *dir, const struct weft_flux_config *c,
                                            enum weft_dtype dtype, uint64_t shard_bytes,
                                            bool sparse, uint64_t seed)
{
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        WEFT_LOG_ERROR("bench", "%s: cannot create: %s", dir, strerror(errno));
        return WEFT_ERR_IO;
    }
    weft_status_t st = write_config(dir, c);
    if (st != WEFT_OK)
        return st;
    const size_t n = weft_flux_params(c, NULL);
    struct weft_param *params = weft_calloc(n, sizeof(*params));
    struct weft_st_out *outs = weft_calloc(n, sizeof(*outs));
    size_t *shard_of = weft_calloc(n, sizeof(*shard_of));
    cJSON *index = cJSON_CreateObject(), *map = cJSON_CreateObject();
    if (!params || !outs || !shard_of || !index || !map) {
        st = WEFT_ERR_NOMEM;
        goto out;
    }
    weft_flux_params(c, params);
    /* shards in parameter order, a new one when the next tensor would pass shard_bytes */
    size_t shards = 1;
    uint64_t in_shard = 0, total = 0;
    for (size_t i = 0; i < n; i++) {
        const uint64_t b = (uint64_t)weft_shape_numel(params[i].ndim, params[i].shape) *
                           weft_dtype_size(dtype);
        if (in_shard > 0 && in_shard + b > shard_bytes)
            shards++, in_shard = 0;
        shard_of[i] = shards - 1;
        in_shard += b, total += b;
        outs[i] = (struct weft_st_out){params[i].name, dtype, params[i].ndim, params[i].shape,
                                       NULL};
    }
    char name[96], path[2048];
    for (size_t s = 0, first = 0; s < shards && st == WEFT_OK; s++) {
        size_t last = first;
        while (last < n && shard_of[last] == s)
            last++;
        snprintf(name, sizeof(name), "diffusion_pytorch_model-%05zu-of-%05zu.safetensors", s + 1,
                 shards);
        snprintf(path, sizeof(path), "%s/%s", dir, name);
        for (size_t i = first; i < last; i++)
            cJSON_AddStringToObject(map, params[i].name, name);
        /* the fill callback indexes params from the shard's first tensor */
        struct fill_ctx fc = {params + first, dtype, seed + s};
        const struct weft_st_meta meta[] = {{"format", "pt"}};
        st = weft_st_write_stream(path, last - first, outs + first, 1, meta,
                                  sparse ? NULL : fill, &fc, NULL);
        first = last;
    }
    if (st == WEFT_OK) {
        cJSON *md = cJSON_AddObjectToObject(index, "metadata");
        cJSON_AddNumberToObject(md, "total_size", (double)total);
        cJSON_AddItemToObject(index, "weight_map", map);
        map = NULL;
        char *text = cJSON_Print(index);
        snprintf(path, sizeof(path), "%s/diffusion_pytorch_model.safetensors.index.json", dir);
        FILE *f = text ? fopen(path, "w") : NULL;
        const bool wrote = f && fputs(text, f) >= 0;
        if (!f || (fclose(f) != 0) || !wrote) {
            WEFT_LOG_ERROR("bench", "%s: cannot write", path);
            st = WEFT_ERR_IO;
        }
        free(text);
    }
out:
    cJSON_Delete(map);
    cJSON_Delete(index);
    weft_free(shard_of);
    weft_free(params);
    weft_free(outs);
    return st;
}

/* ---------------------------------------------------------------------------------------- */
/* FLUX.1's VAE and a whole pipeline                                                         */

void weft_synth_vae_config(struct weft_vae_config *c)
{
    *c = (struct weft_vae_config){
        .in_channels = 3, .out_channels = 3, .latent_channels = 16, .n_blocks = 4,
        .block_out_channels = {128, 256, 512, 512}, .layers_per_block = 2,
        .norm_num_groups = 32, .sample_size = 1024, .scaling_factor = 0.3611,
        .shift_factor = 0.1159, .use_quant_conv = false, .use_post_quant_conv = false,
        .mid_block_add_attention = true, .scale = 8,
    };
}

struct vae_fill_ctx {
    const struct weft_vae_param *params;
    enum weft_dtype dtype;
};

/* torch's default init bound 1/sqrt(fan_in) for weights and biases; norms weight 1, bias 0. */
static weft_status_t vae_fill(void *arg, size_t i, uint64_t offset, void *buf, size_t bytes)
{
    const struct vae_fill_ctx *fc = arg;
    const struct weft_vae_param *params = fc->params, *p = &params[i];
    const size_t esz = weft_dtype_size(fc->dtype);
    const bool norm = strstr(p->name, "norm") != NULL;
    const bool bias = p->ndim == 1 && strstr(p->name, ".bias") != NULL;
    const struct weft_vae_param *w = bias && i > 0 ? &params[i - 1] : p;
    int64_t fan_in = w->ndim == 4 ? w->shape[1] * w->shape[2] * w->shape[3]
                                  : w->ndim == 2 ? w->shape[1] : 1;
    float bound = 1.0f / sqrtf((float)fan_in);
    for (size_t k = 0; k < bytes / esz; k++) {
        uint64_t r = mix(((uint64_t)i << 40) + offset / esz + k);
        float u = (float)(r >> 40) / 16777216.0f * 2.0f - 1.0f;
        const float v = norm ? (bias ? 0.0f : 1.0f) : u * bound;
        if (fc->dtype == WEFT_DTYPE_BF16)
            ((uint16_t *)buf)[k] = weft_f32_to_bf16(v);
        else if (fc->dtype == WEFT_DTYPE_F16)
            ((uint16_t *)buf)[k] = weft_f32_to_f16(v);
        else
            ((float *)buf)[k] = v;
    }
    return WEFT_OK;
}

static weft_status_t write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        WEFT_LOG_ERROR("bench", "%s: %s", path, strerror(errno));
        return WEFT_ERR_IO;
    }
    bool ok = fputs(text, f) >= 0;
    ok = fclose(f) == 0 && ok;
    return ok ? WEFT_OK : WEFT_ERR_IO;
}

weft_status_t weft_synth_vae_write(const char *dir, enum weft_dtype dtype)
{
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return WEFT_ERR_IO;
    char path[2048];
    snprintf(path, sizeof(path), "%s/config.json", dir);
    weft_status_t st = write_text(path,
        "{\"_class_name\": \"AutoencoderKL\", \"_diffusers_version\": \"0.42.1\",\n"
        " \"act_fn\": \"silu\", \"block_out_channels\": [128, 256, 512, 512],\n"
        " \"down_block_types\": [\"DownEncoderBlock2D\", \"DownEncoderBlock2D\", "
        "\"DownEncoderBlock2D\", \"DownEncoderBlock2D\"],\n"
        " \"force_upcast\": true, \"in_channels\": 3, \"latent_channels\": 16,\n"
        " \"latents_mean\": null, \"latents_std\": null, \"layers_per_block\": 2,\n"
        " \"mid_block_add_attention\": true, \"norm_num_groups\": 32, \"out_channels\": 3,\n"
        " \"sample_size\": 1024, \"scaling_factor\": 0.3611, \"shift_factor\": 0.1159,\n"
        " \"up_block_types\": [\"UpDecoderBlock2D\", \"UpDecoderBlock2D\", "
        "\"UpDecoderBlock2D\", \"UpDecoderBlock2D\"],\n"
        " \"use_post_quant_conv\": false, \"use_quant_conv\": false}\n");
    if (st != WEFT_OK)
        return st;
    struct weft_vae_config c;
    weft_synth_vae_config(&c);
    size_t n = weft_vae_params(&c, NULL);
    struct weft_vae_param *params = weft_calloc(n, sizeof(*params));
    struct weft_st_out *outs = weft_calloc(n, sizeof(*outs));
    if (params && outs) {
        weft_vae_params(&c, params);
        for (size_t i = 0; i < n; i++)
            outs[i] = (struct weft_st_out){params[i].name, dtype, params[i].ndim,
                                           params[i].shape, NULL};
        snprintf(path, sizeof(path), "%s/diffusion_pytorch_model.safetensors", dir);
        const struct weft_st_meta meta[] = {{"format", "pt"}};
        struct vae_fill_ctx fc = {params, dtype};
        st = weft_st_write_stream(path, n, outs, 1, meta, vae_fill, &fc, NULL);
    } else {
        st = WEFT_ERR_NOMEM;
    }
    weft_free(params);
    weft_free(outs);
    return st;
}

weft_status_t weft_synth_pipeline_write(const char *dir, const struct weft_flux_config *cfg,
                                        enum weft_dtype tf_dtype, enum weft_dtype vae_dtype,
                                        int64_t text)
{
    char path[2048];
    const struct weft_flux_config fc = *cfg;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        WEFT_LOG_ERROR("bench", "%s: cannot create: %s", dir, strerror(errno));
        return WEFT_ERR_IO;
    }
    snprintf(path, sizeof(path), "%s/model_index.json", dir);
    weft_status_t st = write_text(path,
        "{\"_class_name\": \"FluxPipeline\", \"_diffusers_version\": \"0.42.1\",\n"
        " \"scheduler\": [\"diffusers\", \"FlowMatchEulerDiscreteScheduler\"],\n"
        " \"transformer\": [\"diffusers\", \"FluxTransformer2DModel\"],\n"
        " \"vae\": [\"diffusers\", \"AutoencoderKL\"]}\n");
    snprintf(path, sizeof(path), "%s/transformer", dir);
    if (st == WEFT_OK)
        st = weft_synth_flux_write(path, &fc, tf_dtype, 7);
    snprintf(path, sizeof(path), "%s/vae", dir);
    if (st == WEFT_OK)
        st = weft_synth_vae_write(path, vae_dtype);
    snprintf(path, sizeof(path), "%s/scheduler", dir);
    if (st == WEFT_OK && mkdir(path, 0755) != 0)
        st = WEFT_ERR_IO;
    snprintf(path, sizeof(path), "%s/scheduler/scheduler_config.json", dir);
    if (st == WEFT_OK) /* FLUX.1-dev's */
        st = write_text(path,
            "{\"_class_name\": \"FlowMatchEulerDiscreteScheduler\", \"base_image_seq_len\": 256,\n"
            " \"base_shift\": 0.5, \"max_image_seq_len\": 4096, \"max_shift\": 1.15,\n"
            " \"num_train_timesteps\": 1000, \"shift\": 3.0, \"use_dynamic_shifting\": true}\n");
    snprintf(path, sizeof(path), "%s/prompts", dir);
    if (st == WEFT_OK && mkdir(path, 0755) != 0)
        st = WEFT_ERR_IO;
    if (st != WEFT_OK)
        return st;
    const int64_t pe_shape[3] = {1, text, fc.joint_attention_dim};
    const int64_t po_shape[2] = {1, fc.pooled_projection_dim};
    float *pe = weft_malloc((size_t)(text * fc.joint_attention_dim) * sizeof(float));
    float *po = weft_malloc((size_t)fc.pooled_projection_dim * sizeof(float));
    if (pe && po) {
        weft_noise_normal(11, 0, text * fc.joint_attention_dim, pe);
        weft_noise_normal(12, 0, fc.pooled_projection_dim, po);
        const struct weft_st_out t[2] = {{"prompt_embeds", WEFT_DTYPE_F32, 3, pe_shape, pe},
                                         {"pooled_prompt_embeds", WEFT_DTYPE_F32, 2, po_shape, po}};
        snprintf(path, sizeof(path), "%s/prompts/bench.safetensors", dir);
        st = weft_st_write(path, 2, t, 0, NULL, NULL);
    } else {
        st = WEFT_ERR_NOMEM;
    }
    weft_free(pe);
    weft_free(po);
    return st;
}


/* ---------------------------------------------------------------------------------------- */
/* Text encoders                                                                             */

struct text_fill {
    const struct weft_text_param *params;
    enum weft_dtype dtype;
    uint64_t seed;
};

static bool ends_with(const char *s, const char *end)
{
    const size_t n = strlen(s), e = strlen(end);
    return n >= e && strcmp(s + n - e, end) == 0;
}

static weft_status_t text_fill(void *arg, size_t i, uint64_t offset, void *buf, size_t bytes)
{
    const struct text_fill *fc = arg;
    const struct weft_text_param *p = &fc->params[i];
    const size_t esz = weft_dtype_size(fc->dtype), n = bytes / esz;
    const uint64_t first = offset / esz;
    const bool vec = p->ndim == 1, norm = vec && strstr(p->name, "norm") != NULL;
    const bool table = strstr(p->name, "embed") || strstr(p->name, "shared") ||
                       strstr(p->name, "relative_attention_bias");
    const float bound = vec ? 0.0f : table ? 1.0f : 1.0f / sqrtf((float)p->shape[1]);
    const float fixed = norm && ends_with(p->name, "weight") ? 1.0f : 0.0f;
    const uint64_t base = mix(fc->seed ^ ((uint64_t)i << 40));
    for (size_t k = 0; k < n; k++) {
        float v = fixed;
        if (!vec)
            v = ((float)(mix(base + first + k) >> 40) / 16777216.0f * 2.0f - 1.0f) * bound;
        if (fc->dtype == WEFT_DTYPE_F32)
            ((float *)buf)[k] = v;
        else if (fc->dtype == WEFT_DTYPE_BF16)
            ((uint16_t *)buf)[k] = weft_f32_to_bf16(v);
        else
            ((uint16_t *)buf)[k] = weft_f32_to_f16(v);
    }
    return WEFT_OK;
}

static weft_status_t write_encoder(const char *dir, const char *config, size_t n,
                                struct weft_text_param *params, enum weft_dtype dtype,
                                uint64_t seed)
{
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        WEFT_LOG_ERROR("bench", "%s: cannot create: %s", dir, strerror(errno));
        return WEFT_ERR_IO;
    }
    char path[2048];
    snprintf(path, sizeof(path), "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f || fputs(config, f) < 0 || fclose(f) != 0) {
        WEFT_LOG_ERROR("bench", "%s: cannot write", path);
        return WEFT_ERR_IO;
    }
    struct weft_st_out *outs = weft_calloc(n, sizeof(*outs));
    int64_t(*shapes)[2] = weft_calloc(n, sizeof(*shapes));
    weft_status_t st = outs && shapes ? WEFT_OK : WEFT_ERR_NOMEM;
    for (size_t i = 0; st == WEFT_OK && i < n; i++) {
        shapes[i][0] = params[i].shape[0];
        shapes[i][1] = params[i].shape[1];
        outs[i] = (struct weft_st_out){params[i].name, dtype, params[i].ndim, shapes[i], NULL};
    }
    snprintf(path, sizeof(path), "%s/model.safetensors", dir);
    struct text_fill fc = {params, dtype, seed};
    const struct weft_st_meta meta[] = {{"format", "pt"}};
    if (st == WEFT_OK)
        st = weft_st_write_stream(path, n, outs, 1, meta, text_fill, &fc, NULL);
    weft_free(outs);
    weft_free(shapes);
    return st;
}

static const char *dtype_word(enum weft_dtype d)
{
    return d == WEFT_DTYPE_BF16 ? "bfloat16" : d == WEFT_DTYPE_F16 ? "float16" : "float32";
}

weft_status_t weft_synth_clip_text_write(const char *dir, const struct weft_clip_text_config *c,
                                         enum weft_dtype dtype, uint64_t seed)
{
    char cfg[1024];
    snprintf(cfg, sizeof(cfg),
             "{\n  \"architectures\": [\"CLIPTextModel\"],\n  \"model_type\": "
             "\"clip_text_model\",\n  \"dtype\": \"%s\",\n  \"hidden_act\": \"quick_gelu\",\n"
             "  \"hidden_size\": %lld,\n  \"intermediate_size\": %lld,\n"
             "  \"num_attention_heads\": %lld,\n  \"num_hidden_layers\": %lld,\n"
             "  \"max_position_embeddings\": %lld,\n  \"vocab_size\": %lld,\n"
             "  \"layer_norm_eps\": 1e-05,\n  \"bos_token_id\": 0,\n  \"eos_token_id\": 2,\n"
             "  \"pad_token_id\": 1,\n  \"projection_dim\": 768\n}\n",
             dtype_word(dtype), (long long)c->hidden_size, (long long)c->intermediate_size,
             (long long)c->num_attention_heads, (long long)c->num_hidden_layers,
             (long long)c->max_position_embeddings, (long long)c->vocab_size);
    const size_t n = weft_clip_text_params(c, "", NULL);
    struct weft_text_param *p = weft_calloc(n, sizeof(*p));
    if (!p)
        return WEFT_ERR_NOMEM;
    weft_clip_text_params(c, "", p);
    weft_status_t st = write_encoder(dir, cfg, n, p, dtype, seed);
    weft_free(p);
    return st;
}

weft_status_t weft_synth_t5_write(const char *dir, const struct weft_t5_config *c,
                                  enum weft_dtype dtype, uint64_t seed)
{
    char cfg[1400];
    snprintf(cfg, sizeof(cfg),
             "{\n  \"architectures\": [\"T5EncoderModel\"],\n  \"model_type\": \"t5\",\n"
             "  \"dtype\": \"%s\",\n  \"d_ff\": %lld,\n  \"d_kv\": %lld,\n  \"d_model\": %lld,\n"
             "  \"dense_act_fn\": \"gelu_new\",\n  \"feed_forward_proj\": \"gated-gelu\",\n"
             "  \"is_gated_act\": true,\n  \"layer_norm_epsilon\": 1e-06,\n"
             "  \"num_heads\": %lld,\n  \"num_layers\": %lld,\n"
             "  \"relative_attention_max_distance\": %lld,\n"
             "  \"relative_attention_num_buckets\": %lld,\n  \"vocab_size\": %lld,\n"
             "  \"eos_token_id\": 1,\n  \"pad_token_id\": 0,\n  \"tie_word_embeddings\": true,\n"
             "  \"is_encoder_decoder\": false,\n  \"use_cache\": false\n}\n",
             dtype_word(dtype), (long long)c->d_ff, (long long)c->d_kv, (long long)c->d_model,
             (long long)c->num_heads, (long long)c->num_layers, (long long)c->max_distance,
             (long long)c->num_buckets, (long long)c->vocab_size);
    const size_t n = weft_t5_params(c, "shared.weight", NULL);
    struct weft_text_param *p = weft_calloc(n, sizeof(*p));
    if (!p)
        return WEFT_ERR_NOMEM;
    weft_t5_params(c, "shared.weight", p);
    weft_status_t st = write_encoder(dir, cfg, n, p, dtype, seed);
    weft_free(p);
    return st;
}
