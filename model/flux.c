/* FLUX.1 config: Diffusers' FluxTransformer2DModel defaults, bounded and cross-checked. */
#include "model/flux.h"

#include "common/log.h"
#include "model/json_get.h"

#define BIG 1048576 /* bound on any width: keeps products far from overflow */

weft_status_t weft_flux_config_parse(const cJSON *cfg, const char *origin,
                                     struct weft_flux_config *out)
{
    struct weft_flux_config c = {0};
    static const int64_t axes_def[] = {16, 56, 56};
    weft_status_t st;
    if ((st = weft_json_get_int(cfg, "patch_size", 1, 1, 1, origin, &c.patch_size)) ||
        (st = weft_json_get_int(cfg, "in_channels", 64, 1, BIG, origin, &c.in_channels)) ||
        (st = weft_json_get_int(cfg, "out_channels", c.in_channels, 1, BIG, origin,
                                &c.out_channels)) ||
        (st = weft_json_get_int(cfg, "num_layers", 19, 0, 4096, origin, &c.num_layers)) ||
        (st = weft_json_get_int(cfg, "num_single_layers", 38, 0, 4096, origin,
                                &c.num_single_layers)) ||
        (st = weft_json_get_int(cfg, "attention_head_dim", 128, 2, 4096, origin,
                                &c.attention_head_dim)) ||
        (st = weft_json_get_int(cfg, "num_attention_heads", 24, 1, 4096, origin,
                                &c.num_attention_heads)) ||
        (st = weft_json_get_int(cfg, "joint_attention_dim", 4096, 1, BIG, origin,
                                &c.joint_attention_dim)) ||
        (st = weft_json_get_int(cfg, "pooled_projection_dim", 768, 1, BIG, origin,
                                &c.pooled_projection_dim)) ||
        (st = weft_json_get_bool(cfg, "guidance_embeds", false, origin, &c.guidance_embeds)) ||
        (st = weft_json_get_int_array(cfg, "axes_dims_rope", axes_def, 3, WEFT_FLUX_MAX_AXES, 0,
                                      4096, origin, c.axes_dims_rope, &c.n_axes)))
        return st;
    c.inner_dim = c.attention_head_dim * c.num_attention_heads;
    if (c.inner_dim > BIG) {
        WEFT_LOG_ERROR("model", "%s: %lld heads x %lld head_dim = %lld is too wide", origin,
                       (long long)c.num_attention_heads, (long long)c.attention_head_dim,
                       (long long)c.inner_dim);
        return WEFT_ERR_FORMAT;
    }
    c.mlp_hidden_dim = 4 * c.inner_dim;
    int64_t sum = 0;
    for (int i = 0; i < c.n_axes; i++) {
        if (c.axes_dims_rope[i] % 2) {
            WEFT_LOG_ERROR("model", "%s: axes_dims_rope[%d] = %lld is odd; RoPE rotates pairs",
                           origin, i, (long long)c.axes_dims_rope[i]);
            return WEFT_ERR_FORMAT;
        }
        sum += c.axes_dims_rope[i];
    }
    if (sum != c.attention_head_dim) {
        WEFT_LOG_ERROR("model", "%s: axes_dims_rope sum to %lld but attention_head_dim is %lld",
                       origin, (long long)sum, (long long)c.attention_head_dim);
        return WEFT_ERR_FORMAT;
    }
    if (c.in_channels % 4 != 0) {
        WEFT_LOG_ERROR("model", "%s: in_channels %lld is not 4 x latent channels (2x2 packing)",
                       origin, (long long)c.in_channels);
        return WEFT_ERR_FORMAT;
    }
    *out = c;
    return WEFT_OK;
}
