/* FLUX.1's text encoders on any kernel backend: transformers' CLIPTextModel (the pooled output
 * FluxPipeline takes from text_encoder/) and T5EncoderModel (the token embeddings it takes
 * from text_encoder_2/), in transformers' order of operations.
 *
 * Weights are bound by checkpoint key through the model layer's inventories
 * (model/text_encoder.h) and held in their stored dtype; the token embeddings stay on the host
 * (the rows of one prompt are gathered there, as f32, and uploaded). Activations are f32,
 * reserved for the longest sequence seen and reused. T5 runs tensor-parallel when given a
 * layout: q, k, v and wi_0, wi_1 colwise (each rank its heads and its share of d_ff), o and wo
 * rowwise (partial sums all-reduced over comm->tp), the relative position bias sliced by
 * heads; CLIP is small and always whole. */
#ifndef WEFT_WORKER_TEXT_ENCODER_H
#define WEFT_WORKER_TEXT_ENCODER_H

#include <stdint.h>

#include "common/error.h"
#include "kernels/kernels.h"
#include "model/text_encoder.h"
#include "worker/par.h"

struct weft_tp_layout;

struct weft_text_opts {
    const struct weft_kernels *kernels;
    struct weft_kctx *kctx;
    /* The dtype the model runs in, as the pipeline holds it: bf16 (f16) returns the outputs
     * rounded to it, as the model's own dtype does in transformers. Products in the backend's
     * compute dtype (set_compute). */
    enum weft_dtype dtype;
    /* T5 only: tensor parallelism (tp_size 1 or 0: none), the plan resolved against the
     * checkpoint (weft_t5_tp_plan), collectives over comm->tp. */
    int tp_rank, tp_size;
    const struct weft_tp_layout *tp_layout;
    const struct weft_par_comm *comm;
};

struct weft_clip_text;
struct weft_t5;

/* Open a text_encoder/ folder and load it. The checkpoint must hold exactly the parameters the
 * config implies (CLIP's position_ids buffer aside), with those shapes; err names the tensor. */
weft_status_t weft_clip_text_load(const char *dir, const struct weft_text_opts *opts,
                                  struct weft_clip_text **model_p, struct weft_error *err);
void weft_clip_text_destroy(struct weft_clip_text *m);
const struct weft_clip_text_config *weft_clip_text_get_config(const struct weft_clip_text *m);
size_t weft_clip_text_weight_bytes(const struct weft_clip_text *m);
/* ids [n] (1 <= n <= max_position_embeddings, each below vocab_size) -> pooled [hidden_size]
 * (pooler_output) and, when hidden is not NULL, last_hidden_state [n, hidden_size]; host
 * memory. */
weft_status_t weft_clip_text_forward(struct weft_clip_text *m, const int32_t *ids, int64_t n,
                                     float *hidden, float *pooled, struct weft_error *err);

weft_status_t weft_t5_load(const char *dir, const struct weft_text_opts *opts,
                           struct weft_t5 **model_p, struct weft_error *err);
void weft_t5_destroy(struct weft_t5 *m);
const struct weft_t5_config *weft_t5_get_config(const struct weft_t5 *m);
size_t weft_t5_weight_bytes(const struct weft_t5 *m);
/* ids [n] (1 <= n <= 4096, each below vocab_size) -> out [n, d_model] (last_hidden_state), host
 * memory; every rank of a tensor-parallel group returns it whole. A peer-lost status when a
 * collective failed. */
weft_status_t weft_t5_forward(struct weft_t5 *m, const int32_t *ids, int64_t n, float *out,
                              struct weft_error *err);
/* Give the activations back (the weights stay). */
void weft_t5_release(struct weft_t5 *m);
void weft_clip_text_release(struct weft_clip_text *m);

#endif
