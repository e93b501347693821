/* FLUX.1 transformer (Diffusers' FluxTransformer2DModel) on any kernel backend.
 *
 * Weights are bound by checkpoint key through the model layer's tables (model/flux.h) and read
 * once at load (bf16/f16 checkpoints converted to f32). Activations are reserved once per
 * (batch, image tokens, text tokens) and reused by every forward pass: nothing is allocated in
 * the denoising loop. */
#ifndef WEFT_WORKER_FLUX_H
#define WEFT_WORKER_FLUX_H

#include <stdint.h>

#include "common/status.h"
#include "kernels/kernels.h"
#include "model/flux.h"

struct weft_flux;
struct weft_tp_layout;

/* Sum count floats in place across the tensor-parallel group (a transport all-reduce). */
typedef weft_status_t (*weft_flux_allreduce_fn)(void *arg, float *buf, size_t count);

struct weft_flux_opts {
    const struct weft_kernels *kernels;
    struct weft_kctx *kctx;
    /* Tensor parallelism (tp_size 1 or 0: none). The layout is the plan resolved against this
     * checkpoint (model/plan.h); this rank keeps heads [r H/T, (r+1) H/T) and reads only its
     * byte ranges of each planned tensor, unless tp_full_then_shard, which reads every tensor
     * whole and keeps the local slice (Diffusers' enable_parallelism path: same result, more
     * memory). Rowwise outputs are summed with allreduce, the bias added once after. */
    int tp_rank, tp_size;
    const struct weft_tp_layout *tp_layout;
    int tp_full_then_shard;
    weft_flux_allreduce_fn allreduce;
    void *allreduce_arg;
};

/* Inputs of one forward pass, host memory, f32, as FluxPipeline passes them to the model. */
struct weft_flux_inputs {
    int64_t batch, s_img, s_txt;
    const float *hidden;    /* [B, S_img, in_channels] packed latents */
    const float *encoder;   /* [B, S_txt, joint_attention_dim] prompt embeddings */
    const float *pooled;    /* [B, pooled_projection_dim] */
    const float *timestep;  /* [B] already divided by 1000 (the model multiplies by 1000) */
    const float *guidance;  /* [B], required iff the model has guidance_embeds */
    const float *img_ids;   /* [S_img, n_axes] */
    const float *txt_ids;   /* [S_txt, n_axes] */
};

/* Open the model folder (config.json + safetensors) and load every weight. The checkpoint must
 * hold exactly the parameters the config implies, with those shapes. */
weft_status_t weft_flux_load(const char *dir, const struct weft_flux_opts *opts,
                             struct weft_flux **model_p);
void weft_flux_destroy(struct weft_flux *model);
const struct weft_flux_config *weft_flux_get_config(const struct weft_flux *model);
/* Bytes of weights held. */
size_t weft_flux_weight_bytes(const struct weft_flux *model);

/* Reserve activations for this shape (a no-op when the current reservation fits). */
weft_status_t weft_flux_reserve(struct weft_flux *model, int64_t batch, int64_t s_img,
                                int64_t s_txt);
/* out: [B, S_img, out_channels], host memory. Reserves on first use of a larger shape. */
weft_status_t weft_flux_forward(struct weft_flux *model, const struct weft_flux_inputs *in,
                                float *out);

#endif
