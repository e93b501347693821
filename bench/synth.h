/* Synthetic checkpoints for benchmarks: a Diffusers-format FluxTransformer2DModel folder
 * (config.json + one safetensors file) with random weights, streamed to disk so a 5 GB model
 * never sits in memory. Weights follow torch's Linear init bound 1/sqrt(fan_in); QK norms are 1. */
#ifndef WEFT_BENCH_SYNTH_H
#define WEFT_BENCH_SYNTH_H

#include <stdbool.h>
#include <stdint.h>

#include "common/dtype.h"
#include "common/status.h"
#include "model/flux.h"

/* A FLUX-shaped config: heads x head_dim wide, with the given block counts. */
void weft_synth_flux_config(struct weft_flux_config *c, int64_t heads, int64_t head_dim,
                            int64_t double_blocks, int64_t single_blocks);
/* FLUX.2-shaped (Flux2Transformer2DModel): in 128 channels, text 15360 wide, 256 sinusoidal
 * channels, MLP 3x, four RoPE axes of head_dim / 4 (rounded to even; the last takes the rest),
 * rope_theta 2000. The writer below writes its class and keys. */
void weft_synth_flux2_config(struct weft_flux_config *c, int64_t heads, int64_t head_dim,
                             int64_t double_blocks, int64_t single_blocks);
/* Qwen-Image-shaped (QwenImageTransformer2DModel): in 64 channels (16 packed 2 x 2), out 16 x
 * 2 x 2, text 3584 wide, RoPE axes (16, 56, 56) scaled to head_dim, blocks double ones. */
void weft_synth_qwen_config(struct weft_flux_config *c, int64_t heads, int64_t head_dim,
                            int64_t blocks);
weft_status_t weft_synth_flux_write(const char *dir, const struct weft_flux_config *c,
                                    enum weft_dtype dtype, uint64_t seed);
/* The same as Diffusers saves a large model: shards of at most shard_bytes each
 * (diffusion_pytorch_model-0000i-of-0000N.safetensors, tensors in parameter order) and the
 * index (diffusion_pytorch_model.safetensors.index.json). sparse: the data are holes (zeros,
 * no disk used), for benchmarks of memory and planning that never look at the values. */
weft_status_t weft_synth_flux_write_sharded(const char *dir, const struct weft_flux_config *c,
                                            enum weft_dtype dtype, uint64_t shard_bytes,
                                            bool sparse, uint64_t seed);

/* FLUX.1's AutoencoderKL config (16 latent channels, 128-256-512-512, 2 layers per block) and a
 * folder of it with random weights in dtype (torch's init bounds; norms 1 and 0). */
struct weft_vae_config;
void weft_synth_vae_config(struct weft_vae_config *c);
weft_status_t weft_synth_vae_write(const char *dir, enum weft_dtype dtype);
/* A FluxPipeline folder: model_index.json, transformer/ (cfg, tf_dtype), vae/ (FLUX.1's, in
 * vae_dtype), scheduler/ (FLUX.1-dev's), prompts/bench.safetensors (random embeddings of text
 * tokens). */
weft_status_t weft_synth_pipeline_write(const char *dir, const struct weft_flux_config *cfg,
                                        enum weft_dtype tf_dtype, enum weft_dtype vae_dtype,
                                        int64_t text);

/* transformers' text encoders with random weights in dtype (bf16: as FLUX.1 ships them): a
 * CLIPTextModel (quick_gelu, 77 positions) or a T5EncoderModel (v1.1: gated-gelu) folder,
 * config.json + model.safetensors, keys as transformers 5 saves them. Linear weights follow
 * torch's init bound 1/sqrt(fan_in), biases 0, norms 1, embeddings within +-1. */
struct weft_clip_text_config;
struct weft_t5_config;
weft_status_t weft_synth_clip_text_write(const char *dir, const struct weft_clip_text_config *c,
                                         enum weft_dtype dtype, uint64_t seed);
weft_status_t weft_synth_t5_write(const char *dir, const struct weft_t5_config *c,
                                  enum weft_dtype dtype, uint64_t seed);

#endif
