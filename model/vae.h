/* AutoencoderKL (Diffusers' VAE: FLUX.1, SD3 and SD-class layouts) and AutoencoderKLFlux2
 * (FLUX.2's: the same encoder and decoder, 32 latent channels, and a BatchNorm2d's running
 * statistics over the 2 x 2-patchified latents that Flux2Pipeline undoes before decoding)
 * description: the typed config and the parameter inventory, shared by the coordinator (sizes
 * for placement, checks before anything loads) and the worker (which binds the decoder's
 * weights by these names).
 *
 * Supported: DownEncoderBlock2D / UpDecoderBlock2D blocks, group norm ("norm_type" group),
 * SiLU, the optional mid-block attention and the optional quant / post-quant 1x1 convs. */
#ifndef WEFT_MODEL_VAE_H
#define WEFT_MODEL_VAE_H

#include <cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

#define WEFT_VAE_CLASS "AutoencoderKL"
#define WEFT_VAE2_CLASS "AutoencoderKLFlux2"
#define WEFT_VAE3_CLASS "AutoencoderKLQwenImage"
#define WEFT_VAE3_MAX_Z 64
#define WEFT_VAE_MAX_BLOCKS 8
#define WEFT_VAE_MAX_CHANNELS 8192 /* the GroupNorm kernel's limit */

struct weft_vae_config {
    /* 1: AutoencoderKL, 2: AutoencoderKLFlux2, 3: AutoencoderKLQwenImage (a causal video VAE
     * decoded one frame at a time: its 3-D convolutions reduce to their last temporal tap;
     * RMS norms instead of group norms; block_out_channels are base_dim x dim_mult,
     * layers_per_block its num_res_blocks, latent_channels its z_dim) */
    int version;
    int64_t in_channels;      /* image channels (3) */
    int64_t out_channels;     /* image channels out of the decoder (3) */
    int64_t latent_channels;  /* 16 for FLUX, 4 for SD */
    int n_blocks;
    int64_t block_out_channels[WEFT_VAE_MAX_BLOCKS];
    int64_t layers_per_block; /* encoder resnets per block; the decoder has one more */
    int64_t norm_num_groups;
    int64_t sample_size;      /* tiling: the pixel tile edge Diffusers' enable_tiling uses */
    double scaling_factor;    /* AutoencoderKL (FluxPipeline's unscale); 1 for FLUX.2 */
    double shift_factor;      /* null in config.json (SD) reads as 0 */
    double batch_norm_eps;    /* AutoencoderKLFlux2: bn's eps (the running statistics are
                               * decoder parameters: bn.running_mean, bn.running_var [4 L]) */
    bool use_quant_conv;
    bool use_post_quant_conv;
    bool mid_block_add_attention;
    /* AutoencoderKLQwenImage: the upsamplers that would also double the frames (their time
     * convolution is unused for one frame), and the latents' per-channel statistics */
    bool temporal_up[WEFT_VAE_MAX_BLOCKS];
    float latents_mean[WEFT_VAE3_MAX_Z], latents_std[WEFT_VAE3_MAX_Z];
    /* derived */
    int64_t scale;            /* pixels per latent along an edge: 2^(n_blocks - 1) */
};

/* Parse config.json with Diffusers' class defaults for absent keys (the class from _class_name:
 * AutoencoderKLFlux2's defaults for it); origin names the file in err (recorded, or logged at
 * ERROR with NULL err). */
weft_status_t weft_vae_config_parse(const cJSON *config, const char *origin,
                                    struct weft_vae_config *out, struct weft_error *err);

/* Which part of the model a parameter belongs to: a decoder-only runtime loads only
 * WEFT_VAE_DECODER (the decoder and post_quant_conv). */
enum weft_vae_part {
    WEFT_VAE_ENCODER, /* encoder.* and quant_conv */
    WEFT_VAE_DECODER, /* decoder.* and post_quant_conv */
};

struct weft_vae_param {
    char name[96];
    enum weft_vae_part part;
    int ndim;
    int64_t shape[5]; /* conv weights [cout, cin, k, k] (AutoencoderKLQwenImage's 3-D ones
                       * [cout, cin, kt, k, k]), everything else [n] or [out, in] */
};

/* Every parameter of the model, in a fixed order (fill params, or count with NULL). */
size_t weft_vae_params(const struct weft_vae_config *c, struct weft_vae_param *params);
/* Numbers of elements of one part (for memory planning). */
int64_t weft_vae_part_numel(const struct weft_vae_config *c, enum weft_vae_part part);
/* Bytes one part is held in, its weights in ck's dtypes (weft_ckpt_held_bytes; NULL: f32). */
struct weft_ckpt;
uint64_t weft_vae_held_bytes(const struct weft_vae_config *c, const struct weft_ckpt *ck,
                             enum weft_vae_part part);

/* Decoder structure, block by block as Diffusers builds it: up block i (0 = the deepest, at
 * latent resolution) takes in_ch(i) channels and gives out_ch(i); it has layers_per_block + 1
 * resnets and, except the last, a 2x upsampler. */
int64_t weft_vae_up_in_channels(const struct weft_vae_config *c, int i);
int64_t weft_vae_up_out_channels(const struct weft_vae_config *c, int i);

/* One plain decode of an h x w latent grid, following the forward pass: the floats of its
 * input latents and of each of the three buffers the decoder turns between, and every
 * convolution's shape (at the grid it runs on; conv may be NULL) so that a backend can size
 * its workspace. One walk for the worker's reservation and the planner. */
typedef void (*weft_vae_conv_fn)(void *arg, int64_t h, int64_t w, int64_t cin, int64_t cout,
                                 int64_t k);
void weft_vae_decode_plan(const struct weft_vae_config *c, int64_t h, int64_t w,
                          weft_vae_conv_fn conv, void *arg, int64_t *lat_floats,
                          int64_t *buf_floats);

#endif
