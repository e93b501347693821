/* The FLUX denoising loop: ids, timesteps/1000 as FluxPipeline (FLUX.1) and Flux2Pipeline
 * (FLUX.2: 4-axis ids, the text's token index on the last; its mu rule is the schedule's) pass
 * them, a forward pass and an Euler step per timestep, on packed latents. Everything it needs is
 * reserved before the first step. */
#ifndef WEFT_WORKER_DENOISE_H
#define WEFT_WORKER_DENOISE_H

#include <stdint.h>

#include "model/scheduler.h"
#include "worker/flux.h"
#include "worker/par.h"

/* Called after every step with the latents after it (host memory). Non-OK stops the loop. */
typedef weft_status_t (*weft_denoise_step_cb)(void *arg, int step, int steps,
                                              const float *latents, int64_t n);

struct weft_denoise_params {
    int64_t grid_h, grid_w;      /* packed token grid: height / 16, width / 16 */
    const float *prompt_embeds;  /* [1, s_txt, joint_attention_dim] */
    int64_t s_txt;
    const float *pooled;         /* [1, pooled_projection_dim]; FLUX.2: none (NULL) */
    float guidance;              /* used when the model has guidance_embeds */
    /* true CFG (FluxPipeline's true_cfg_scale > 1 with a negative prompt): a second pass per
     * step on the negative embeddings (s_txt tokens too), combined as
     * neg + true_cfg_scale (pred - neg), each operation rounded to the model's dtype;
     * QwenImagePipeline's then rescales each token to the conditional prediction's norm */
    const float *neg_prompt_embeds; /* NULL: off */
    const float *neg_pooled;
    float true_cfg_scale;
    /* CFG parallelism: this rank's half of the replica (0 runs the prompt's pass, 1 the
     * negative prompt's) and the comm whose cfg group joins it to its peer in the other half;
     * the two predictions are exchanged once a step (an all-gather) and every rank combines
     * them as above. NULL: one rank runs both passes. Without true CFG both halves run the
     * prompt's pass and nothing is exchanged. */
    const struct weft_par_comm *cfg_comm;
    int cfg_half;
    const struct weft_schedule *schedule;
    weft_denoise_step_cb on_step; /* may be NULL */
    void *cb_arg;
};

/* latents: [grid_h * grid_w, in_channels], the initial noise in, the final latents out. err gets
 * the cause of a failure, except one of on_step's own (the callback reports it). A model in
 * bf16 (f16) runs FluxPipeline's loop in that dtype: the latents held in it (rounded on entry
 * and after each scheduler step, which computes in f32), the timestep cast to it before the
 * division by 1000. */
weft_status_t weft_denoise(struct weft_flux *model, const struct weft_denoise_params *p,
                           float *latents, struct weft_error *err);

/* FluxPipeline._prepare_latent_image_ids: [0, row, col] for each token, row-major
 * (n_axes columns; axes beyond the third are 0). */
void weft_flux_image_ids(int64_t grid_h, int64_t grid_w, int n_axes, float *ids);
/* The position ids the model's pipeline gives a grid_h x grid_w token grid and s_txt text
 * tokens ([S, n_axes] each): FluxPipeline's (image as above, text zeros), Flux2Pipeline's
 * (text [0, 0, 0, l]), or QwenImagePipeline's RoPE positions as ids (the image centred,
 * [0, r - (h - h/2), c - (w - w/2)]; text [m + l] on every axis, m = max(h/2, w/2)). */
void weft_flux_ids(const struct weft_flux_config *c, int64_t grid_h, int64_t grid_w,
                   int64_t s_txt, float *img_ids, float *txt_ids);

#endif
