/* The image pipeline of a device: the one code path from prompt embeddings to a PNG, for
 * `weft generate` (one device, staged), the local runner (one device, resident) and every
 * worker of a cluster (its place in a mesh, resident).
 *
 * An assignment says which model, which layout and which place in it this device holds; the
 * runtime validates the model and the layout with the description layer's rules
 * (model/model.h), joins the process groups of its replica, loads its shards of the
 * transformer and, where it decodes, the VAE. Then it runs images on command: noise from the
 * seed (or given latents), the FLUX denoising loop, the VAE, 8-bit RGB, the PNG with the
 * generation parameters (worker/png.h's vocabulary). It decides nothing: the assignment and
 * the job say everything. Every rank of a replica runs the same images in the same order; the
 * collectives keep them in step, and the decoding rank agrees cancellation with the others at
 * each step end. */
#ifndef WEFT_WORKER_RUNTIME_H
#define WEFT_WORKER_RUNTIME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "conf/conf.h"
#include "kernels/kernels.h"
#include "model/job.h"
#include "model/model.h"
#include "transport/comm.h"
#include "worker/par_transport.h"
#include "worker/vae.h"

struct weft_runtime;

struct weft_rt_opts {
    const struct weft_kernels *kernels;
    struct weft_kctx *kctx;
    /* One device running one job (weft generate): each component is loaded when its stage
     * starts and freed, activations included, when it ends, so the peak is the largest stage.
     * Otherwise every component stays loaded from the assignment on. */
    bool staged;
    /* Bytes of encoded text prompts kept for reuse ([model] prompt_cache; 0: none). */
    uint64_t prompt_cache_bytes;
};

struct weft_rt_assign {
    char model[WEFT_CONF_PATH];   /* pipeline folder, or a transformer folder (latents only) */
    struct weft_layout layout;    /* the whole mesh */
    int mesh_rank;                /* this device's place; world rank = world_base + mesh_rank */
    int world_base;
    bool tp_full_then_shard;
    struct weft_conf_map tp_plan; /* [tp_plan] overrides of the model's plan */
    bool decode;                  /* this rank loads the VAE and makes the images */
    enum weft_dtype compute;      /* [model] dtype: products in f32 or bf16 (f32 where the
                                   * backend has no such path, said in the log) */
    /* device_map: this rank's stage of the transformer's layer pipeline (.on false without) */
    struct weft_rt_stage {
        bool on;
        int unit_first, unit_last, prev, next, root;
        int clip, t5; /* the stages that run CLIP and T5 (-1: none; without device_map the
                       * replica's first rank runs both) */
    } stage;
};

/* The one-device assignment of model_dir. */
void weft_rt_assign_single(const char *model_dir, struct weft_rt_assign *out);

weft_status_t weft_runtime_create(const struct weft_rt_opts *opts, struct weft_runtime **rt_p);
void weft_runtime_destroy(struct weft_runtime *rt);

/* Take an assignment over the data-plane world (NULL for a one-rank mesh): open and check the
 * model and the layout, build the replica's process groups, load this rank's shards (unless
 * staged). Collective over the replica only through the transport's groups. */
weft_status_t weft_runtime_assign(struct weft_runtime *rt, const struct weft_rt_assign *a,
                                  struct weft_transport *world, struct weft_error *err);
/* Drop the assignment (models, groups); the world is the caller's. */
void weft_runtime_unassign(struct weft_runtime *rt);
/* Drop the assignment's groups (before the world they use goes) and its text encoders, but
 * keep the transformer's and the VAE's weights: the next weft_runtime_assign takes them over
 * when its tensor-parallel shard is the same (same model, dtype, tp degree, tp rank and plan,
 * no pipeline stage; unless staged), and frees them otherwise. No image runs in between
 * (weft_runtime_model is NULL). */
void weft_runtime_detach(struct weft_runtime *rt);
/* Bytes of weights the last assignment kept from the one before (0: it read everything). */
uint64_t weft_runtime_kept_bytes(const struct weft_runtime *rt);
/* The assigned model's description (NULL without an assignment). */
const struct weft_model *weft_runtime_model(const struct weft_runtime *rt);
/* Bytes of transformer shards and of the VAE this rank holds (or will hold, when staged). */
void weft_runtime_bytes(const struct weft_runtime *rt, uint64_t *transformer_p, uint64_t *vae_p);
/* The collectives' time, bytes and calls per group and kind since the assignment (zeros for a
 * one-rank mesh). */
void weft_runtime_comm_stats(const struct weft_runtime *rt, struct weft_par_stats *out);

/* One text prompt encoded as FluxPipeline.encode_prompt does: CLIP's pooled output and T5's
 * token embeddings at max_sequence_length (1..WEFT_MODEL_MAX_SEQUENCE_LENGTH), in the model's
 * dtype. The replica's first rank (tensor, context and pipeline rank 0) tokenizes and encodes
 * (loading the tokenizers and encoders on first use; in staged mode each encoder is freed after
 * its pass) and keeps the result in its cache; every other rank of the replica receives it.
 * With tp > 1 dividing T5's heads and d_ff, T5 runs tensor-parallel over that rank's tp group
 * (each rank loading its slices); CLIP stays on the first rank.
 * Collective over the replica: every rank calls it with the same text, in the same order. A text
 * the tokenizers refuse (not UTF-8) is WEFT_ERR_INVALID on every rank; a model that cannot encode
 * text, WEFT_ERR_UNSUPPORTED naming what is missing. out is written only on success. */
weft_status_t weft_runtime_encode(struct weft_runtime *rt, const char *text,
                                  int64_t max_sequence_length, struct weft_prompt_embeds *out,
                                  struct weft_error *err);

/* The text prompt cache of this rank, since the runtime was created. */
struct weft_rt_text_stats {
    uint64_t hits, misses;  /* prompts found in the cache / encoded */
    uint64_t entries, bytes; /* held now */
};
void weft_runtime_text_stats(const struct weft_runtime *rt, struct weft_rt_text_stats *out);
/* Bytes the text encoders hold on this rank (or will hold, when staged or not loaded yet). */
uint64_t weft_runtime_text_bytes(const struct weft_runtime *rt);

struct weft_rt_image {
    const float *prompt_embeds; /* [1, s_txt, joint_attention_dim] */
    int64_t s_txt;
    const float *pooled;        /* [1, pooled_projection_dim] */
    int64_t height, width;      /* pixels */
    int steps;
    float guidance;
    /* true CFG: the negative prompt's embeddings (s_txt tokens, as the prompt's) and
     * FluxPipeline's true_cfg_scale (on above 1 with them; NULL embeddings: off) */
    const float *neg_prompt_embeds, *neg_pooled;
    float true_cfg_scale;
    uint64_t seed;
    int64_t noise_index;        /* image i of a job: elements [i n, (i+1) n) of the noise */
    const float *latents_init;  /* start from these packed latents instead (NULL: noise) */
    const struct weft_vae_tiling *tiling; /* NULL: decode in one piece */
    bool decode;                /* false: stop at the latents (needs no VAE) */
    bool keep_latents;          /* hand the final packed latents back */
    bool keep_rgb;              /* hand the 8-bit image back (decoding rank) */
    /* the PNG's text: prompt, model, job, image, prompt_index (seed, steps, guidance, size
     * and layout are the runtime's own) */
    const char *png_prompt, *png_model, *png_job;
    const char *png_negative_prompt; /* NULL: none */
    int64_t png_prompt_index;   /* -1: none */
};

/* Called on the decoding rank after each step (seconds: the step's time). */
typedef void (*weft_rt_step_cb)(void *arg, int step, int steps, double seconds);
/* Polled on the decoding rank at each step end: nonzero asks the replica to stop there. */
typedef int (*weft_rt_cancel_cb)(void *arg);

struct weft_rt_result {
    void *png;        /* the encoded image on the decoding rank (free()), NULL elsewhere */
    size_t png_len;
    float *latents;   /* keep_latents: [tokens, in_channels] (weft_free) */
    uint8_t *rgb;     /* keep_rgb: [height, width, 3] (weft_free) */
    int64_t tokens, channels;
    double denoise_s, decode_s, png_s; /* loading included when staged */
};

/* One image. The job is checked first (weft_job_check with this runtime's model and layout):
 * a bad one fails with WEFT_ERR_INVALID or WEFT_ERR_RANGE before any work. WEFT_ERR_CANCELLED
 * when the replica agreed to stop; WEFT_ERR_FORMAT when the transformer or the VAE produced
 * values that are not finite (err names the step); a peer-lost status when a collective
 * failed (the world is unusable then: unassign). */
weft_status_t weft_runtime_image(struct weft_runtime *rt, const struct weft_rt_image *img,
                                 weft_rt_step_cb on_step, weft_rt_cancel_cb cancelled, void *arg,
                                 struct weft_rt_result *out, struct weft_error *err);
void weft_rt_result_cleanup(struct weft_rt_result *res);

#endif
