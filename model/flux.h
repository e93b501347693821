/* FLUX.1 (FluxTransformer2DModel) description: the typed config, shared by the coordinator (to
 * plan and validate before anything loads) and the worker (to execute). */
#ifndef WEFT_MODEL_FLUX_H
#define WEFT_MODEL_FLUX_H

#include <cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/status.h"

#define WEFT_FLUX_CLASS "FluxTransformer2DModel"
#define WEFT_FLUX_MAX_AXES 4

struct weft_flux_config {
    int64_t patch_size;
    int64_t in_channels;
    int64_t out_channels;
    int64_t num_layers;
    int64_t num_single_layers;
    int64_t attention_head_dim;
    int64_t num_attention_heads;
    int64_t joint_attention_dim;
    int64_t pooled_projection_dim;
    bool guidance_embeds;
    int n_axes;
    int64_t axes_dims_rope[WEFT_FLUX_MAX_AXES];
    /* derived */
    int64_t inner_dim;      /* heads x head_dim */
    int64_t mlp_hidden_dim; /* 4 x inner_dim */
};

/* Parse config.json with Diffusers' class defaults for absent keys; origin names the file in
 * errors. Checks types, bounds and consistency (axes sum to head_dim, each axis even). */
weft_status_t weft_flux_config_parse(const cJSON *config, const char *origin,
                                     struct weft_flux_config *out);

#endif
