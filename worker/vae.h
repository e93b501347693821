/* The AutoencoderKL decoder (Diffusers' Decoder, as FLUX.1 uses it) on any kernel backend,
 * optionally tiled as AutoencoderKL.tiled_decode does it, plus the FLUX pipeline's decode
 * prologue (unpack, unscale) and epilogue (clamp, 8-bit RGB).
 *
 * Images are NHWC (pixels as rows of channels) throughout: a conv is a GEMM-shaped op on rows,
 * the mid-block attention runs on the same rows with no transposes, and the RGB output is
 * already interleaved as a PNG wants it. Weights are bound by checkpoint key through the model
 * layer's inventory (model/vae.h); only the decoder part is read. Activations are reserved once
 * per latent size (or tile size) and reused. */
#ifndef WEFT_WORKER_VAE_H
#define WEFT_WORKER_VAE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "kernels/kernels.h"
#include "model/vae.h"

struct weft_vae;

struct weft_vae_opts {
    const struct weft_kernels *kernels;
    struct weft_kctx *kctx;
};

/* Tiled decoding (AutoencoderKL.enable_tiling): overlapping latent tiles of tile_latent, each
 * decoded alone, blended over int(tile_sample * overlap) pixels with the tile above and the
 * tile to the left, then cropped. Used only when the latent grid is larger than one tile. */
struct weft_vae_tiling {
    bool enabled;
    int64_t tile_latent; /* tile edge in latents (Diffusers' tile_latent_min_size) */
    int64_t tile_sample; /* tile edge in pixels (tile_sample_min_size): tile_latent x scale */
    double overlap;      /* tile_overlap_factor, in [0, 1) */
};

/* What enable_tiling() sets: tile_sample = config sample_size, tile_latent = sample_size /
 * scale, overlap 0.25. */
void weft_vae_tiling_default(const struct weft_vae_config *c, struct weft_vae_tiling *t);
/* Tiles of tile_latent latents with the default overlap (tile_sample follows). */
void weft_vae_tiling_latent(const struct weft_vae_config *c, int64_t tile_latent,
                            struct weft_vae_tiling *t);

/* Open the VAE folder (config.json + safetensors, class AutoencoderKL) and load the decoder.
 * Every tensor must be a parameter of the config (encoder ones are checked, not read). err
 * gets the cause as weft_flux_load's does. */
weft_status_t weft_vae_load(const char *dir, const struct weft_vae_opts *opts,
                            struct weft_vae **vae_p, struct weft_error *err);
void weft_vae_destroy(struct weft_vae *vae);
const struct weft_vae_config *weft_vae_get_config(const struct weft_vae *vae);
/* Bytes of decoder weights held. */
size_t weft_vae_weight_bytes(const struct weft_vae *vae);

/* Device bytes a decode of a lat_h x lat_w grid reserves (activations and workspace), tiled
 * or not; host bytes of the tile rows kept for blending in *host_p (may be NULL). */
size_t weft_vae_activation_bytes(const struct weft_vae *vae, int64_t lat_h, int64_t lat_w,
                                 const struct weft_vae_tiling *tiling, size_t *host_p);
/* Reserve for this grid (a no-op when the current reservation fits). A grid or tiling that
 * cannot be decoded is the request's fault (recorded in err; logged at ERROR with NULL err). */
weft_status_t weft_vae_reserve(struct weft_vae *vae, int64_t lat_h, int64_t lat_w,
                               const struct weft_vae_tiling *tiling, struct weft_error *err);
/* Give the activations back (the weights stay). */
void weft_vae_release(struct weft_vae *vae);

/* latents: host [lat_h, lat_w, latent_channels], already unscaled (the decoder's input);
 * image: host [lat_h x scale, lat_w x scale, out_channels], not clamped. tiling may be NULL. */
weft_status_t weft_vae_decode(struct weft_vae *vae, const float *latents, int64_t lat_h,
                              int64_t lat_w, const struct weft_vae_tiling *tiling, float *image,
                              struct weft_error *err);

/* FluxPipeline's decode prologue: packed latents [lat_h/2 x lat_w/2, 4 x latent_channels]
 * (token (i, j), feature c*4 + dy*2 + dx) to latents [lat_h, lat_w, latent_channels], each
 * divided by scaling_factor, plus shift_factor. */
void weft_vae_unpack_flux(const struct weft_vae_config *c, const float *packed, int64_t lat_h,
                          int64_t lat_w, float *latents);
/* The pipeline's decode prologue for this VAE: FluxPipeline's above (AutoencoderKL), or
 * Flux2Pipeline's (AutoencoderKLFlux2): each packed feature times sqrt(running_var + eps) plus
 * running_mean of the VAE's batch norm, then the same 2 x 2 unpatchify. */
void weft_vae_unpack(const struct weft_vae *vae, const float *packed, int64_t lat_h,
                     int64_t lat_w, float *latents);
/* VaeImageProcessor.postprocess + numpy_to_pil: round(clamp(x / 2 + 0.5, 0, 1) x 255). */
void weft_vae_to_rgb8(const float *image, int64_t n, uint8_t *out);

#endif
