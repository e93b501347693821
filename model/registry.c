/* Model classes the planner knows (see registry.h). */
#include "model/registry.h"

#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "model/flux.h"
#include "model/json_get.h"

/* FLUX.1, FLUX.2 and Qwen-Image (the config's _class_name tells them apart): the fused layers
 * whose plan style takes its blocks from the model (Diffusers' _tp_packed_*_blocks
 * attributes; Qwen-Image has none). */
static weft_status_t flux(const cJSON *cfg, const char *origin, struct weft_model_info *info,
                          struct weft_error *err)
{
    struct weft_flux_config c;
    weft_status_t st = weft_flux_config_parse(cfg, origin, &c, err);
    if (st != WEFT_OK)
        return st;
    info->heads = c.num_attention_heads;
    info->head_dim = c.attention_head_dim;
    struct weft_flux_linear_desc sgl[WEFT_FLUX_SINGLE_COUNT];
    weft_flux_single_linears(&c, sgl);
    static const char *const v1_keys[] = {NULL, "single_transformer_blocks.*.proj_out"};
    static const char *const v2_keys[] = {"single_transformer_blocks.*.attn.to_qkv_mlp_proj",
                                          "single_transformer_blocks.*.attn.to_out"};
    const int layers[] = {WEFT_FLUX_S_QKV_MLP, WEFT_FLUX_S_PROJ_OUT};
    info->n_packed = 0;
    for (int i = 0; i < 2 && c.version != 3; i++) {
        const char *key = c.version == 2 ? v2_keys[i] : v1_keys[i];
        const struct weft_flux_linear_desc *l = &sgl[layers[i]];
        if (!key)
            continue;
        struct weft_packed_blocks *p = &info->packed[info->n_packed++];
        p->module = key;
        p->dim = l->role == WEFT_TP_ROLE_SPLIT_OUT ? 0 : 1;
        p->n = l->n_blocks;
        for (int k = 0; k < l->n_blocks; k++)
            p->sizes[k] = l->blocks[k];
    }
    return WEFT_OK;
}

static const struct {
    const char *name;
    weft_status_t (*get)(const cJSON *cfg, const char *origin, struct weft_model_info *info,
                         struct weft_error *err);
} classes[] = {
    {"FluxTransformer2DModel", flux},
    {"Flux2Transformer2DModel", flux},
    {"QwenImageTransformer2DModel", flux},
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
