/* AutoencoderKLQwenImage (Qwen-Image's VAE, a causal video VAE) decoding one frame, on any
 * kernel backend: weights read from its checkpoint (the decoder and post_quant_conv; the
 * encoder and the upsamplers' time convolutions are not read), each 3-D convolution kept as
 * its last temporal tap, packed once. model/vae.h describes the config. */
#ifndef WEFT_WORKER_VAE_QWEN_H
#define WEFT_WORKER_VAE_QWEN_H

#include <stdint.h>

#include "common/error.h"
#include "kernels/kernels.h"
#include "model/vae.h"

struct weft_ckpt;
struct weft_vae_qwen;

weft_status_t weft_vae_qwen_load(struct weft_ckpt *ck, const struct weft_vae_config *cfg,
                                 const struct weft_kernels *K, struct weft_kctx *kc,
                                 struct weft_vae_qwen **q_p, struct weft_error *err);
void weft_vae_qwen_destroy(struct weft_vae_qwen *q);
/* Give the activations back (the weights stay). */
void weft_vae_qwen_release(struct weft_vae_qwen *q);
size_t weft_vae_qwen_weight_bytes(const struct weft_vae_qwen *q);
/* latents: host [lat_h, lat_w, z_dim], already denormalised; image: host [lat_h x scale,
 * lat_w x scale, 3], clamped to [-1, 1] as Diffusers' _decode does. Activations are reserved
 * on the first grid this size and kept. */
weft_status_t weft_vae_qwen_decode(struct weft_vae_qwen *q, const float *latents, int64_t lat_h,
                                   int64_t lat_w, float *image, struct weft_error *err);
/* QwenImagePipeline's decode prologue: _unpack_latents (token (i, j), feature c*4 + dy*2 + dx)
 * and latents / (1 / latents_std) + latents_mean. */
void weft_vae_qwen_unpack(const struct weft_vae_config *c, const float *packed, int64_t lat_h,
                          int64_t lat_w, float *latents);

#endif
