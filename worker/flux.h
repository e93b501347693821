/* FLUX.1 transformer (Diffusers' FluxTransformer2DModel) on any kernel backend.
 *
 * Weights are bound by checkpoint key through the model layer's tables (model/flux.h) and read
 * once at load (bf16/f16 checkpoints converted to f32). Activations are reserved once per
 * (batch, image tokens, text tokens) and reused by every forward pass: nothing is allocated in
 * the denoising loop. */
#ifndef WEFT_WORKER_FLUX_H
#define WEFT_WORKER_FLUX_H

#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"
#include "kernels/kernels.h"
#include "model/cp.h"
#include "model/flux.h"
#include "worker/par.h"

struct weft_flux;
struct weft_tp_layout;

struct weft_flux_opts {
    const struct weft_kernels *kernels;
    struct weft_kctx *kctx;
    /* The dtype the model runs in, with Diffusers' semantics of a model in that dtype: bf16
     * (f16) rounds the timestep and guidance as the model's .to(dtype) * 1000 does and returns
     * its output rounded to it. The products' own dtype is the backend's (set_compute). */
    enum weft_dtype dtype;
    /* Tensor parallelism (tp_size 1 or 0: none). The layout is the plan resolved against this
     * checkpoint (model/plan.h); this rank keeps heads [r H/T, (r+1) H/T) and reads only its
     * byte ranges of each planned tensor, unless tp_full_then_shard, which reads every tensor
     * whole and keeps the local slice (Diffusers' enable_parallelism path: same result, more
     * memory). Rowwise outputs are summed over comm->tp, the bias added once after. */
    int tp_rank, tp_size;
    const struct weft_tp_layout *tp_layout;
    int tp_full_then_shard;
    /* Context parallelism (ring x ulysses <= 1: none): FLUX.1's plan splits the text and image
     * tokens and both id arrays at model entry (chunk ring_rank * ulysses + ulysses_rank),
     * computes RoPE from the local ids, attends across ranks (worker/cp_attention.h) and
     * gathers the output after proj_out, so every rank returns the full output. */
    struct weft_cp_layout cp;
    int ring_rank, ulysses_rank;
    /* A layer pipeline (device_map): this rank holds units [unit_first, unit_last) of
     * model/flux.h's units (none when equal), receives the hidden states and time embedding
     * from pipe rank prev (none for the first stage, which embeds) and passes them to pipe rank
     * next; pipe rank root holds the output layers and sends the output to every pipe rank, so
     * every rank returns it. Not combined with tensor or context parallelism. */
    struct weft_flux_stage {
        bool on;
        int unit_first, unit_last;
        int prev, next, root; /* ranks in comm->pipe, -1: none */
    } stage;
    /* The collectives, for tensor or context parallelism and the pipeline. */
    const struct weft_par_comm *comm;
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
 * hold exactly the parameters the config implies, with those shapes. err gets the cause: a
 * checkpoint's own fault is recorded (logged at ERROR with NULL err), a failure on this side
 * (options that do not fit, memory, a read) logged once and recorded. */
weft_status_t weft_flux_load(const char *dir, const struct weft_flux_opts *opts,
                             struct weft_flux **model_p, struct weft_error *err);
void weft_flux_destroy(struct weft_flux *model);
/* The same weights in another parallel context: opts' context parallelism, ranks and
 * collectives replace the model's (its activations are reserved again on the next pass). The
 * tensor-parallel shard cannot change: tp_size and tp_rank must equal the loaded ones, and
 * neither the old nor the new context may be a pipeline stage (WEFT_ERR_INVALID, nothing
 * changed). The rest of opts is ignored. */
weft_status_t weft_flux_rebind(struct weft_flux *model, const struct weft_flux_opts *opts,
                               struct weft_error *err);
const struct weft_flux_config *weft_flux_get_config(const struct weft_flux *model);
/* Bytes of weights held (this stage's only, in a pipeline). */
size_t weft_flux_weight_bytes(const struct weft_flux *model);
/* The dtype it runs in (weft_flux_opts.dtype). */
enum weft_dtype weft_flux_dtype(const struct weft_flux *model);

/* Reserve activations for this shape (a no-op when the current reservation fits). s_img and
 * s_txt are the full lengths; a context-parallel rank reserves for its chunk. Fails (before
 * anything is allocated) when the lengths cannot be split as the layout requires. */
weft_status_t weft_flux_reserve(struct weft_flux *model, int64_t batch, int64_t s_img,
                                int64_t s_txt, struct weft_error *err);
/* out: [B, S_img, out_channels], host memory. Reserves on first use of a larger shape. */
weft_status_t weft_flux_forward(struct weft_flux *model, const struct weft_flux_inputs *in,
                                float *out);

#endif
