/* The staged FLUX.1 pipeline on one device: text conditioning (precomputed prompt embeddings
 * for now) -> denoise (transformer) -> decode (VAE) -> 8-bit RGB.
 *
 * The pipeline knows its components before loading any weight: their classes, folders, the
 * bytes each holds once loaded and the device each runs on (all on the one CPU device today;
 * the device_map planner will place them). By default a stage loads its component and frees
 * it, activations included, when the stage is done, so the peak is the largest stage rather
 * than the sum; keep_resident keeps every component loaded across stages and runs (a server
 * generating many images). */
#ifndef WEFT_WORKER_PIPELINE_H
#define WEFT_WORKER_PIPELINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/tensor.h"
#include "kernels/kernels.h"
#include "worker/denoise.h"
#include "worker/vae.h"

enum weft_pipe_stage {
    WEFT_STAGE_ENCODE,  /* text conditioning */
    WEFT_STAGE_DENOISE, /* transformer */
    WEFT_STAGE_DECODE,  /* VAE decoder */
    WEFT_STAGE_COUNT
};

const char *weft_pipe_stage_name(enum weft_pipe_stage stage);

struct weft_pipeline;

struct weft_pipeline_component {
    const char *name;       /* "prompt_embeds", "transformer", "vae" */
    const char *class_name; /* "FluxTransformer2DModel", "AutoencoderKL", ... */
    const char *dir;        /* folder (NULL for precomputed embeddings: a per-job file) */
    enum weft_pipe_stage stage;
    struct weft_device device;
    uint64_t file_bytes;   /* on disk */
    uint64_t weight_bytes; /* held once loaded (f32 on the CPU backend); 0 when none */
    bool loaded;
};

struct weft_pipeline_opts {
    const struct weft_kernels *kernels;
    struct weft_kctx *kctx;
    bool keep_resident; /* false: free each component when its stage is done */
};

struct weft_pipeline_job {
    const char *prompt_embeds; /* safetensors: prompt_embeds [1, T, D], pooled_prompt_embeds */
    int64_t height, width;     /* pixels, multiples of 2 x the VAE scale */
    int steps;
    float guidance;
    uint64_t seed;              /* noise when latents_init is NULL */
    const float *latents_init;  /* [tokens, in_channels] packed, or NULL */
    bool decode;                /* false: stop at the final latents */
    const struct weft_vae_tiling *tiling; /* NULL: decode in one piece */
    weft_denoise_step_cb on_step;
    void *cb_arg;
};

struct weft_pipeline_result {
    float *latents;     /* [tokens, in_channels], the final packed latents */
    int64_t tokens, channels;
    float *image;       /* [height, width, 3] before clamping (decode only) */
    uint8_t *rgb;       /* [height, width, 3] (decode only) */
    int64_t height, width;
    double seconds[WEFT_STAGE_COUNT]; /* each stage, loading included */
};

/* Open a pipeline folder (model_index.json: transformer/, scheduler/, vae/) or a transformer
 * folder alone (no decoding then). Reads configs and checkpoint headers only. */
weft_status_t weft_pipeline_open(const char *dir, const struct weft_pipeline_opts *opts,
                                 struct weft_pipeline **pipe_p);
void weft_pipeline_close(struct weft_pipeline *pipe);

size_t weft_pipeline_component_count(const struct weft_pipeline *pipe);
const struct weft_pipeline_component *
weft_pipeline_component_at(const struct weft_pipeline *pipe, size_t i);
const struct weft_flux_config *weft_pipeline_flux_config(const struct weft_pipeline *pipe);
/* NULL when the pipeline has no VAE. */
const struct weft_vae_config *weft_pipeline_vae_config(const struct weft_pipeline *pipe);
bool weft_pipeline_has_vae(const struct weft_pipeline *pipe);

weft_status_t weft_pipeline_run(struct weft_pipeline *pipe, const struct weft_pipeline_job *job,
                                struct weft_pipeline_result *out);
void weft_pipeline_result_cleanup(struct weft_pipeline_result *res);

#endif
