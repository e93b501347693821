/* Model classes the planner knows (see registry.h). */
#include "model/registry.h"

#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "model/flux.h"
#include "model/json_get.h"

static weft_status_t flux1(const cJSON *cfg, const char *origin, struct weft_model_info *info,
                           struct weft_error *err)
{
    struct weft_flux_config c;
    weft_status_t st = weft_flux_config_parse(cfg, origin, &c, err);
    if (st != WEFT_OK)
        return st;
    info->heads = c.num_attention_heads;
    info->head_dim = c.attention_head_dim;
    info->n_packed = 1;
    info->packed[0] = (struct weft_packed_blocks){"single_transformer_blocks.*.proj_out", 1, 2,
                                                  {c.inner_dim, c.mlp_hidden_dim}};
    return WEFT_OK;
}

static weft_status_t flux2(const cJSON *cfg, const char *origin, struct weft_model_info *info,
                           struct weft_error *err)
{
    int64_t heads, head_dim;
    double ratio;
    weft_status_t st;
    if ((st = weft_json_get_int(cfg, "num_attention_heads", 48, 1, 4096, origin, &heads, err)) ||
        (st = weft_json_get_int(cfg, "attention_head_dim", 128, 1, 4096, origin, &head_dim, err)) ||
        (st = weft_json_get_double(cfg, "mlp_ratio", 3.0, 0.0, 64.0, origin, &ratio, err)))
        return st;
    int64_t inner = heads * head_dim, mlp = (int64_t)((double)inner * ratio);
    info->heads = heads;
    info->head_dim = head_dim;
    info->n_packed = 2;
    info->packed[0] = (struct weft_packed_blocks){
        "single_transformer_blocks.*.attn.to_qkv_mlp_proj", 0, 5, {inner, inner, inner, mlp, mlp}};
    info->packed[1] = (struct weft_packed_blocks){"single_transformer_blocks.*.attn.to_out", 1, 2,
                                                  {inner, mlp}};
    return WEFT_OK;
}

static weft_status_t qwen(const cJSON *cfg, const char *origin, struct weft_model_info *info,
                          struct weft_error *err)
{
    weft_status_t st;
    if ((st = weft_json_get_int(cfg, "num_attention_heads", 24, 1, 4096, origin, &info->heads,
                                err)) ||
        (st = weft_json_get_int(cfg, "attention_head_dim", 128, 1, 4096, origin, &info->head_dim,
                                err)))
        return st;
    info->n_packed = 0;
    return WEFT_OK;
}

static const struct {
    const char *name;
    weft_status_t (*get)(const cJSON *cfg, const char *origin, struct weft_model_info *info,
                         struct weft_error *err);
} classes[] = {
    {"FluxTransformer2DModel", flux1},
    {"Flux2Transformer2DModel", flux2},
    {"QwenImageTransformer2DModel", qwen},
};

weft_status_t weft_model_info_get(const struct weft_ckpt *ck, struct weft_model_info *info_p,
                                  struct weft_error *err)
{
    struct weft_model_info info = {.class_name = weft_ckpt_class(ck)};
    char origin[1100];
    snprintf(origin, sizeof(origin), "%s/config.json", weft_ckpt_dir(ck));
    for (size_t i = 0; i < sizeof(classes) / sizeof(classes[0]); i++) {
        if (strcmp(info.class_name, classes[i].name) == 0) {
            weft_status_t st = classes[i].get(weft_ckpt_config(ck), origin, &info, err);
            if (st != WEFT_OK)
                return st;
            info.class_name = classes[i].name; /* static storage */
            break;
        }
    }
    *info_p = info;
    return WEFT_OK;
}
