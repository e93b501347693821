/* AutoencoderKL config (Diffusers' class defaults, bounded) and parameter inventory. */
#include "model/vae.h"

#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/error.h"
#include "common/log.h"
#include "model/checkpoint.h"
#include "model/json_get.h"

/* Every listed block type must be `want` (the only kind weft implements). */
static weft_status_t check_block_types(const cJSON *cfg, const char *key, const char *want,
                                       int n_blocks, const char *origin, struct weft_error *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (!v || cJSON_IsNull(v))
        return WEFT_OK; /* Diffusers' default: one block of the supported kind per level */
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != n_blocks)
        return weft_error_refuse_or_log(err, WEFT_ERR_FORMAT, "model",
                                        "%s: \"%s\" must be an array of %d block types (one per "
                                        "block_out_channels entry)",
                                        origin, key, n_blocks);
    const cJSON *e;
    cJSON_ArrayForEach(e, v)
    {
        if (!cJSON_IsString(e) || strcmp(e->valuestring, want) != 0)
            return weft_error_refuse_or_log(
                err, WEFT_ERR_UNSUPPORTED, "model", "%s: \"%s\" has %s; weft implements only %s",
                origin, key, cJSON_IsString(e) ? e->valuestring : "a non-string entry", want);
    }
    return WEFT_OK;
}

/* sample_size is an integer or, in some configs, [height, width]; Diffusers takes the first. */
static weft_status_t get_sample_size(const cJSON *cfg, const char *origin, int64_t *out,
                                     struct weft_error *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, "sample_size");
    if (!cJSON_IsArray(v))
        return weft_json_get_int(cfg, "sample_size", 32, 8, 1 << 20, origin, out, err);
    const cJSON *first = cJSON_GetArrayItem(v, 0);
    double d = first && cJSON_IsNumber(first) ? first->valuedouble : -1.0;
    if (!(d >= 8.0 && d <= (double)(1 << 20)) || d != (double)(int64_t)d)
        return weft_error_refuse_or_log(
            err, WEFT_ERR_FORMAT, "model",
            "%s: \"sample_size\" is an array whose first entry is not an "
            "integer in [8, %d]",
            origin, 1 << 20);
    *out = (int64_t)d;
    return WEFT_OK;
}

static weft_status_t parse_strings(const cJSON *cfg, const char *origin, int n_blocks,
                                   struct weft_error *err)
{
    const char *act, *norm;
    weft_status_t st;
    if ((st = weft_json_get_string(cfg, "act_fn", "silu", origin, &act, err)) ||
        (st = weft_json_get_string(cfg, "norm_type", "group", origin, &norm, err)))
        return st;
    if (strcmp(act, "silu") != 0 && strcmp(act, "swish") != 0)
        return weft_error_refuse_or_log(err, WEFT_ERR_UNSUPPORTED, "model",
                                        "%s: act_fn \"%s\": weft implements only silu", origin,
                                        act);
    if (strcmp(norm, "group") != 0)
        return weft_error_refuse_or_log(err, WEFT_ERR_UNSUPPORTED, "model",
                                        "%s: norm_type \"%s\": weft implements only group", origin,
                                        norm);
    const cJSON *mean = cJSON_GetObjectItemCaseSensitive(cfg, "latents_mean");
    if (mean && !cJSON_IsNull(mean))
        WEFT_LOG_DEBUG("model", "%s: latents_mean/latents_std are a pipeline's business; the "
                                "FLUX pipeline does not use them", origin);
    if ((st = check_block_types(cfg, "up_block_types", "UpDecoderBlock2D", n_blocks, origin, err)))
        return st;
    return check_block_types(cfg, "down_block_types", "DownEncoderBlock2D", n_blocks, origin, err);
}

/* AutoencoderKLFlux2's own keys: the batch norm's eps, a 2 x 2 patch (the only one its
 * pipeline packs), and a decoder as wide as the encoder. */
static weft_status_t parse_v2(const cJSON *cfg, const char *origin, struct weft_vae_config *c,
                              struct weft_error *err)
{
    static const int64_t patch_def[] = {2, 2};
    int64_t patch[2], dec[WEFT_VAE_MAX_BLOCKS];
    int n_patch, n_dec;
    weft_status_t st;
    if ((st = weft_json_get_double(cfg, "batch_norm_eps", 1e-4, 0.0, 1.0, origin,
                                   &c->batch_norm_eps, err)) ||
        (st = weft_json_get_int_array(cfg, "patch_size", patch_def, 2, 2, 1, 64, origin, patch,
                                      &n_patch, err)))
        return st;
    if (n_patch != 2 || patch[0] != 2 || patch[1] != 2)
        return weft_error_refuse_or_log(err, WEFT_ERR_UNSUPPORTED, "model",
                                        "%s: patch_size must be [2, 2] (Flux2Pipeline's 2 x 2 "
                                        "packing)", origin);
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(cfg, "decoder_block_out_channels");
    if (!d || cJSON_IsNull(d))
        return WEFT_OK;
    if ((st = weft_json_get_int_array(cfg, "decoder_block_out_channels", NULL, 0,
                                      WEFT_VAE_MAX_BLOCKS, 1, WEFT_VAE_MAX_CHANNELS, origin, dec,
                                      &n_dec, err)))
        return st;
    bool same = n_dec == c->n_blocks;
    for (int i = 0; same && i < n_dec; i++)
        same = dec[i] == c->block_out_channels[i];
    if (!same)
        return weft_error_refuse_or_log(err, WEFT_ERR_UNSUPPORTED, "model",
                                        "%s: decoder_block_out_channels differ from "
                                        "block_out_channels; weft decodes only a decoder as wide "
                                        "as the encoder", origin);
    return WEFT_OK;
}

/* AutoencoderKLQwenImage: its own keys, mapped onto the common fields. */
static weft_status_t parse_v3(const cJSON *cfg, const char *origin, struct weft_vae_config *c,
                              struct weft_error *err)
{
    static const int64_t mult_def[] = {1, 2, 4, 4};
    int64_t base, mult[WEFT_VAE_MAX_BLOCKS];
    int n_mult;
    weft_status_t st;
    if ((st = weft_json_get_int(cfg, "base_dim", 96, 1, WEFT_VAE_MAX_CHANNELS, origin, &base,
                                err)) ||
        (st = weft_json_get_int(cfg, "z_dim", 16, 1, WEFT_VAE3_MAX_Z, origin, &c->latent_channels,
                                err)) ||
        (st = weft_json_get_int_array(cfg, "dim_mult", mult_def, 4, WEFT_VAE_MAX_BLOCKS, 1, 64,
                                      origin, mult, &n_mult, err)) ||
        (st = weft_json_get_int(cfg, "num_res_blocks", 2, 1, 64, origin, &c->layers_per_block,
                                err)) ||
        (st = weft_json_get_int(cfg, "input_channels", 3, 1, 64, origin, &c->out_channels, err)))
        return st;
    const cJSON *as = cJSON_GetObjectItemCaseSensitive(cfg, "attn_scales");
    if (as && !cJSON_IsArray(as) && !cJSON_IsNull(as))
        return weft_error_refuse_or_log(err, WEFT_ERR_FORMAT, "model",
                                        "%s: attn_scales is not an array", origin);
    if (cJSON_IsArray(as) && cJSON_GetArraySize(as) > 0)
        return weft_error_refuse_or_log(err, WEFT_ERR_UNSUPPORTED, "model",
                                        "%s: attn_scales is not empty; weft decodes "
                                        "AutoencoderKLQwenImage with its mid-block attention only",
                                        origin);
    const cJSON *td = cJSON_GetObjectItemCaseSensitive(cfg, "temperal_downsample");
    const int n_td = cJSON_IsArray(td) ? cJSON_GetArraySize(td) : 3;
    if ((td && !cJSON_IsArray(td)) || n_td != n_mult - 1)
        return weft_error_refuse_or_log(err, WEFT_ERR_FORMAT, "model",
                                        "%s: temperal_downsample must list %d booleans (one per "
                                        "down block but the last)", origin, n_mult - 1);
    /* the decoder's up blocks take them reversed */
    for (int i = 0; i < n_td; i++) {
        const cJSON *b = td ? cJSON_GetArrayItem(td, i) : NULL;
        if (b && !cJSON_IsBool(b))
            return weft_error_refuse_or_log(err, WEFT_ERR_FORMAT, "model",
                                            "%s: temperal_downsample[%d] is not a boolean",
                                            origin, i);
        c->temporal_up[n_td - 1 - i] = b ? cJSON_IsTrue(b) : i > 0;
    }
    static const char *const stats[] = {"latents_mean", "latents_std"};
    for (int k = 0; k < 2; k++) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(cfg, stats[k]);
        if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != (int)c->latent_channels)
            return weft_error_refuse_or_log(err, WEFT_ERR_FORMAT, "model",
                                            "%s: %s must list z_dim = %lld numbers", origin,
                                            stats[k], (long long)c->latent_channels);
        for (int i = 0; i < (int)c->latent_channels; i++) {
            const cJSON *v = cJSON_GetArrayItem(a, i);
            const double d = cJSON_IsNumber(v) ? v->valuedouble : 0.0;
            if (!cJSON_IsNumber(v) || (k == 1 && !(d > 0.0)) || !(d > -1e6 && d < 1e6))
                return weft_error_refuse_or_log(err, WEFT_ERR_FORMAT, "model",
                                                "%s: %s[%d] is not %s", origin, stats[k], i,
                                                k ? "a positive number" : "a number");
            (k ? c->latents_std : c->latents_mean)[i] = (float)d;
        }
    }
    c->n_blocks = n_mult;
    for (int i = 0; i < n_mult; i++)
        c->block_out_channels[i] = base * mult[i];
    c->in_channels = c->out_channels;
    c->sample_size = 1024; /* QwenImagePipeline's default image */
    c->norm_num_groups = 1; /* unused: RMS norms */
    c->mid_block_add_attention = true;
    c->use_quant_conv = c->use_post_quant_conv = true;
    c->scale = (int64_t)1 << (n_mult - 1);
    return WEFT_OK;
}

weft_status_t weft_vae_config_parse(const cJSON *cfg, const char *origin,
                                    struct weft_vae_config *out, struct weft_error *err)
{
    struct weft_vae_config c = {.version = 1, .scaling_factor = 1.0};
    const cJSON *cls3 = cJSON_GetObjectItemCaseSensitive(cfg, "_class_name");
    if (cJSON_IsString(cls3) && strcmp(cls3->valuestring, WEFT_VAE3_CLASS) == 0) {
        c.version = 3;
        weft_status_t st = parse_v3(cfg, origin, &c, err);
        if (st == WEFT_OK)
            *out = c;
        return st;
    }
    const cJSON *cls = cJSON_GetObjectItemCaseSensitive(cfg, "_class_name");
    if (cJSON_IsString(cls) && strcmp(cls->valuestring, WEFT_VAE2_CLASS) == 0)
        c.version = 2;
    const bool v2 = c.version == 2;
    static const int64_t bo_def[] = {64}, bo_def2[] = {128, 256, 512, 512};
    weft_status_t st;
    if ((st = weft_json_get_int(cfg, "in_channels", 3, 1, 64, origin, &c.in_channels, err)) ||
        (st = weft_json_get_int(cfg, "out_channels", 3, 1, 64, origin, &c.out_channels, err)) ||
        (st = weft_json_get_int(cfg, "latent_channels", v2 ? 32 : 4, 1, 1024, origin,
                                &c.latent_channels, err)) ||
        (st = weft_json_get_int_array(cfg, "block_out_channels", v2 ? bo_def2 : bo_def,
                                      v2 ? 4 : 1, WEFT_VAE_MAX_BLOCKS, 1, WEFT_VAE_MAX_CHANNELS,
                                      origin, c.block_out_channels, &c.n_blocks, err)) ||
        (st = weft_json_get_int(cfg, "layers_per_block", v2 ? 2 : 1, 1, 64, origin,
                                &c.layers_per_block, err)) ||
        (st = weft_json_get_int(cfg, "norm_num_groups", 32, 1, WEFT_VAE_MAX_CHANNELS, origin,
                                &c.norm_num_groups, err)) ||
        (st = get_sample_size(cfg, origin, &c.sample_size, err)) ||
        (!v2 && (st = weft_json_get_double(cfg, "scaling_factor", 0.18215, 1e-6, 1e6, origin,
                                           &c.scaling_factor, err))) ||
        (!v2 && (st = weft_json_get_double(cfg, "shift_factor", 0.0, -1e6, 1e6, origin,
                                           &c.shift_factor, err))) ||
        (v2 && (st = parse_v2(cfg, origin, &c, err))) ||
        (st = weft_json_get_bool(cfg, "use_quant_conv", true, origin, &c.use_quant_conv, err)) ||
        (st = weft_json_get_bool(cfg, "use_post_quant_conv", true, origin, &c.use_post_quant_conv,
                                 err)) ||
        (st = weft_json_get_bool(cfg, "mid_block_add_attention", true, origin,
                                 &c.mid_block_add_attention, err)) ||
        (st = parse_strings(cfg, origin, c.n_blocks, err)))
        return st;
    for (int i = 0; i < c.n_blocks; i++) {
        if (c.block_out_channels[i] % c.norm_num_groups)
            return weft_error_refuse_or_log(
                err, WEFT_ERR_FORMAT, "model",
                "%s: block_out_channels[%d] = %lld is not a multiple of "
                "norm_num_groups %lld",
                origin, i, (long long)c.block_out_channels[i], (long long)c.norm_num_groups);
    }
    c.scale = (int64_t)1 << (c.n_blocks - 1);
    *out = c;
    return WEFT_OK;
}

int64_t weft_vae_up_in_channels(const struct weft_vae_config *c, int i)
{
    /* up block i follows block n-1-i of the encoder in reverse: its input is the previous up
     * block's output, the first one's the deepest width */
    return i == 0 ? c->block_out_channels[c->n_blocks - 1]
                  : c->block_out_channels[c->n_blocks - i];
}

int64_t weft_vae_up_out_channels(const struct weft_vae_config *c, int i)
{
    return c->block_out_channels[c->n_blocks - 1 - i];
}

/* ---------------------------------------------------------------------------------------- */
/* Inventory                                                                                 */

struct emit {
    struct weft_vae_param *p; /* NULL: count only */
    size_t n;
    enum weft_vae_part part;
    int64_t numel[2]; /* elements per part */
};

static void param(struct emit *e, const char *prefix, const char *name, const char *suffix,
                  int ndim, int64_t d0, int64_t d1, int64_t k)
{
    if (e->p) {
        struct weft_vae_param *p = &e->p[e->n];
        snprintf(p->name, sizeof(p->name), "%s%s%s", prefix, name, suffix);
        p->part = e->part;
        p->ndim = ndim;
        p->shape[0] = d0;
        p->shape[1] = d1;
        p->shape[2] = p->shape[3] = k;
    }
    e->numel[e->part] += ndim == 4 ? d0 * d1 * k * k : ndim == 2 ? d0 * d1 : d0;
    e->n++;
}

/* AutoencoderKLQwenImage's causal 3-D convolution [cout, cin, kt, k, k] with its bias. */
static void conv3(struct emit *e, const char *prefix, const char *name, int64_t cout,
                  int64_t cin, int64_t kt, int64_t k)
{
    if (e->p) {
        struct weft_vae_param *p = &e->p[e->n];
        snprintf(p->name, sizeof(p->name), "%s%s.weight", prefix, name);
        p->part = e->part;
        p->ndim = 5;
        p->shape[0] = cout, p->shape[1] = cin, p->shape[2] = kt, p->shape[3] = p->shape[4] = k;
    }
    e->numel[e->part] += cout * cin * kt * k * k;
    e->n++;
    param(e, prefix, name, ".bias", 1, cout, 0, 0);
}

/* A QwenImageRMS_norm's gamma: [c, 1, 1, 1] (resnets, the output) or [c, 1, 1] (attention). */
static void gamma(struct emit *e, const char *prefix, const char *name, int64_t c, int ndim)
{
    if (e->p) {
        struct weft_vae_param *p = &e->p[e->n];
        snprintf(p->name, sizeof(p->name), "%s%s.gamma", prefix, name);
        p->part = e->part;
        p->ndim = ndim;
        p->shape[0] = c;
        p->shape[1] = p->shape[2] = p->shape[3] = 1;
    }
    e->numel[e->part] += c;
    e->n++;
}

static void conv(struct emit *e, const char *prefix, const char *name, int64_t cout,
                 int64_t cin, int64_t k)
{
    param(e, prefix, name, ".weight", 4, cout, cin, k);
    param(e, prefix, name, ".bias", 1, cout, 0, 0);
}

static void vector_pair(struct emit *e, const char *prefix, const char *name, int64_t n)
{
    param(e, prefix, name, ".weight", 1, n, 0, 0);
    param(e, prefix, name, ".bias", 1, n, 0, 0);
}

static void linear(struct emit *e, const char *prefix, const char *name, int64_t out,
                   int64_t in)
{
    param(e, prefix, name, ".weight", 2, out, in, 0);
    param(e, prefix, name, ".bias", 1, out, 0, 0);
}

static void resnet(struct emit *e, const char *prefix, int64_t cin, int64_t cout)
{
    vector_pair(e, prefix, "norm1", cin);
    conv(e, prefix, "conv1", cout, cin, 3);
    vector_pair(e, prefix, "norm2", cout);
    conv(e, prefix, "conv2", cout, cout, 3);
    if (cin != cout)
        conv(e, prefix, "conv_shortcut", cout, cin, 1);
}

static void mid_block(struct emit *e, const char *top, const struct weft_vae_config *c)
{
    const int64_t ch = c->block_out_channels[c->n_blocks - 1];
    char prefix[64];
    snprintf(prefix, sizeof(prefix), "%smid_block.resnets.0.", top);
    resnet(e, prefix, ch, ch);
    if (c->mid_block_add_attention) {
        snprintf(prefix, sizeof(prefix), "%smid_block.attentions.0.", top);
        vector_pair(e, prefix, "group_norm", ch);
        linear(e, prefix, "to_q", ch, ch);
        linear(e, prefix, "to_k", ch, ch);
        linear(e, prefix, "to_v", ch, ch);
        linear(e, prefix, "to_out.0", ch, ch);
    }
    snprintf(prefix, sizeof(prefix), "%smid_block.resnets.1.", top);
    resnet(e, prefix, ch, ch);
}

static void encoder(struct emit *e, const struct weft_vae_config *c)
{
    if (c->version == 3) /* its encoder is not weft's business: decode only */
        return;
    const int64_t *bo = c->block_out_channels;
    char prefix[96];
    e->part = WEFT_VAE_ENCODER;
    conv(e, "encoder.", "conv_in", bo[0], c->in_channels, 3);
    for (int i = 0; i < c->n_blocks; i++) {
        const int64_t prev = i == 0 ? bo[0] : bo[i - 1], out = bo[i];
        for (int64_t j = 0; j < c->layers_per_block; j++) {
            snprintf(prefix, sizeof(prefix), "encoder.down_blocks.%d.resnets.%lld.", i,
                     (long long)j);
            resnet(e, prefix, j == 0 ? prev : out, out);
        }
        if (i < c->n_blocks - 1) {
            snprintf(prefix, sizeof(prefix), "encoder.down_blocks.%d.downsamplers.0.", i);
            conv(e, prefix, "conv", out, out, 3);
        }
    }
    mid_block(e, "encoder.", c);
    vector_pair(e, "encoder.", "conv_norm_out", bo[c->n_blocks - 1]);
    conv(e, "encoder.", "conv_out", 2 * c->latent_channels, bo[c->n_blocks - 1], 3);
    if (c->use_quant_conv)
        conv(e, "", "quant_conv", 2 * c->latent_channels, 2 * c->latent_channels, 1);
}

static void resnet3(struct emit *e, const char *prefix, int64_t cin, int64_t cout)
{
    gamma(e, prefix, "norm1", cin, 4);
    conv3(e, prefix, "conv1", cout, cin, 3, 3);
    gamma(e, prefix, "norm2", cout, 4);
    conv3(e, prefix, "conv2", cout, cout, 3, 3);
    if (cin != cout)
        conv3(e, prefix, "conv_shortcut", cout, cin, 1, 1);
}

/* AutoencoderKLQwenImage's decoder (QwenImageDecoder3d) and post_quant_conv. Its channels:
 * dims = base x [mult[-1]] + reversed(mult); up block i goes from dims[i] (halved after the
 * first: each upsampler halves) to dims[i + 1]. */
static void decoder_v3(struct emit *e, const struct weft_vae_config *c)
{
    const int n = c->n_blocks;
    int64_t dims[WEFT_VAE_MAX_BLOCKS + 1];
    dims[0] = c->block_out_channels[n - 1];
    for (int i = 0; i < n; i++)
        dims[i + 1] = c->block_out_channels[n - 1 - i];
    char prefix[96];
    e->part = WEFT_VAE_DECODER;
    conv3(e, "", "post_quant_conv", c->latent_channels, c->latent_channels, 1, 1);
    conv3(e, "decoder.", "conv_in", dims[0], c->latent_channels, 3, 3);
    resnet3(e, "decoder.mid_block.resnets.0.", dims[0], dims[0]);
    gamma(e, "decoder.mid_block.attentions.0.", "norm", dims[0], 3);
    conv(e, "decoder.mid_block.attentions.0.", "to_qkv", 3 * dims[0], dims[0], 1);
    conv(e, "decoder.mid_block.attentions.0.", "proj", dims[0], dims[0], 1);
    resnet3(e, "decoder.mid_block.resnets.1.", dims[0], dims[0]);
    for (int i = 0; i < n; i++) {
        const int64_t in = i ? dims[i] / 2 : dims[i], out = dims[i + 1];
        for (int64_t j = 0; j < c->layers_per_block + 1; j++) {
            snprintf(prefix, sizeof(prefix), "decoder.up_blocks.%d.resnets.%lld.", i, (long long)j);
            resnet3(e, prefix, j ? out : in, out);
        }
        if (i == n - 1)
            continue;
        snprintf(prefix, sizeof(prefix), "decoder.up_blocks.%d.upsamplers.0.", i);
        conv(e, prefix, "resample.1", out / 2, out, 3);
        if (c->temporal_up[i])
            conv3(e, prefix, "time_conv", 2 * out, out, 3, 1);
    }
    gamma(e, "decoder.", "norm_out", dims[n], 4);
    conv3(e, "decoder.", "conv_out", c->out_channels, dims[n], 3, 3);
}

static void decoder(struct emit *e, const struct weft_vae_config *c)
{
    if (c->version == 3) {
        decoder_v3(e, c);
        return;
    }
    char prefix[96];
    e->part = WEFT_VAE_DECODER;
    if (c->use_post_quant_conv)
        conv(e, "", "post_quant_conv", c->latent_channels, c->latent_channels, 1);
    conv(e, "decoder.", "conv_in", c->block_out_channels[c->n_blocks - 1], c->latent_channels,
         3);
    mid_block(e, "decoder.", c);
    for (int i = 0; i < c->n_blocks; i++) {
        const int64_t in = weft_vae_up_in_channels(c, i), out = weft_vae_up_out_channels(c, i);
        for (int64_t j = 0; j < c->layers_per_block + 1; j++) {
            snprintf(prefix, sizeof(prefix), "decoder.up_blocks.%d.resnets.%lld.", i,
                     (long long)j);
            resnet(e, prefix, j == 0 ? in : out, out);
        }
        if (i < c->n_blocks - 1) {
            snprintf(prefix, sizeof(prefix), "decoder.up_blocks.%d.upsamplers.0.", i);
            conv(e, prefix, "conv", out, out, 3);
        }
    }
    vector_pair(e, "decoder.", "conv_norm_out", c->block_out_channels[0]);
    conv(e, "decoder.", "conv_out", c->out_channels, c->block_out_channels[0], 3);
    if (c->version == 2) { /* the statistics Flux2Pipeline undoes before the decoder */
        param(e, "bn.", "running_mean", "", 1, 4 * c->latent_channels, 0, 0);
        param(e, "bn.", "running_var", "", 1, 4 * c->latent_channels, 0, 0);
    } /* bn.num_batches_tracked, BatchNorm's bookkeeping, is no parameter (the worker skips it) */
}

size_t weft_vae_params(const struct weft_vae_config *c, struct weft_vae_param *params)
{
    struct emit e = {params, 0, WEFT_VAE_ENCODER, {0, 0}};
    encoder(&e, c);
    decoder(&e, c);
    return e.n;
}

int64_t weft_vae_part_numel(const struct weft_vae_config *c, enum weft_vae_part part)
{
    struct emit e = {NULL, 0, WEFT_VAE_ENCODER, {0, 0}};
    encoder(&e, c);
    decoder(&e, c);
    return e.numel[part];
}

uint64_t weft_vae_held_bytes(const struct weft_vae_config *c, const struct weft_ckpt *ck,
                             enum weft_vae_part part)
{
    const size_t n = weft_vae_params(c, NULL);
    struct weft_vae_param *p = weft_calloc(n + 1, sizeof(*p));
    if (!p) /* an estimate is still an answer: f32 */
        return (uint64_t)weft_vae_part_numel(c, part) * sizeof(float);
    weft_vae_params(c, p);
    uint64_t bytes = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i].part != part)
            continue;
        int64_t numel = 1;
        for (int d = 0; d < p[i].ndim; d++)
            numel *= p[i].shape[d];
        bytes += weft_ckpt_held_bytes(ck, p[i].name, p[i].ndim, numel);
    }
    weft_free(p);
    return bytes;
}

static int64_t max64(int64_t a, int64_t b)
{
    return a > b ? a : b;
}

void weft_vae_decode_plan(const struct weft_vae_config *c, int64_t h, int64_t w,
                          weft_vae_conv_fn on_conv, void *arg, int64_t *lat_floats,
                          int64_t *buf_floats)
{
    const int64_t L = c->latent_channels, deep = c->block_out_channels[c->n_blocks - 1];
    const int64_t n = h * w;
    int64_t buf = n * max64(L, deep);
    if (c->mid_block_add_attention)
        buf = max64(buf, 3 * n * deep);
    if (on_conv) {
        on_conv(arg, h, w, L, deep, 3);
        on_conv(arg, h, w, deep, deep, 3);
    }
    for (int i = 0; i < c->n_blocks; i++) {
        const int64_t in = weft_vae_up_in_channels(c, i), out = weft_vae_up_out_channels(c, i);
        buf = max64(buf, h * w * max64(in, out));
        if (on_conv) {
            on_conv(arg, h, w, in, out, 3);
            on_conv(arg, h, w, out, out, 3);
        }
        if (i < c->n_blocks - 1) { /* the 2x upsampler */
            h *= 2;
            w *= 2;
            buf = max64(buf, h * w * out);
            if (on_conv)
                on_conv(arg, h, w, out, out, 3);
        }
    }
    buf = max64(buf, h * w * max64(c->block_out_channels[0], c->out_channels));
    if (on_conv)
        on_conv(arg, h, w, c->block_out_channels[0], c->out_channels, 3);
    *lat_floats = n * L;
    *buf_floats = buf;
}
