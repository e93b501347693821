/* One job's description and the rules it must meet. Every entry point (weft generate, weft
 * run, weft plan, the job API, both runners) and the worker that receives the job check it
 * with weft_job_check(), against the same model description and layout, so a job refused
 * anywhere is refused everywhere, and a job accepted anywhere runs everywhere.
 *
 * Image i of a job (0-based) belongs to prompt i / count and takes elements [i n, (i + 1) n)
 * of the seed's noise stream (n = elements of one image's packed latents), as Diffusers'
 * batched latents come from one generator. */
#ifndef WEFT_MODEL_JOB_H
#define WEFT_MODEL_JOB_H

#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"
#include "model/model.h"

/* Hard bounds: beyond these no configuration lets a job through. */
#define WEFT_JOB_MAX_SIDE 16384         /* pixels, height or width */
#define WEFT_JOB_MAX_TEXT_TOKENS WEFT_MODEL_MAX_TEXT_TOKENS
#define WEFT_JOB_MAX_STEPS WEFT_SCHED_MAX_STEPS
#define WEFT_JOB_MAX_PROMPTS 4096
#define WEFT_JOB_MAX_IMAGES 65536       /* prompts x count */
#define WEFT_JOB_MAX_GUIDANCE 1000.0
#define WEFT_JOB_MAX_TEXT_BYTES 65536   /* one text prompt, UTF-8 */

/* A scale a job may carry (guidance, true_cfg_scale): finite, 0..WEFT_JOB_MAX_GUIDANCE. */
static inline bool weft_job_scale_ok(double s)
{
    return s >= 0 && s <= WEFT_JOB_MAX_GUIDANCE; /* false for NaN; +-Inf out of range */
}

/* Whether a job runs true CFG, as FluxPipeline: negative prompts and true_cfg_scale above 1
 * (negatives with a smaller scale are kept and unused). */
static inline bool weft_job_true_cfg(int n_negatives, double true_cfg_scale)
{
    return n_negatives > 0 && true_cfg_scale > 1.0;
}

/* Configurable bounds ([api]); 0 means the hard bound. */
struct weft_job_limits {
    int64_t max_prompts, max_images, max_pixels, max_steps;
};

struct weft_job_desc {
    int64_t height, width; /* pixels */
    int64_t steps;
    double guidance;
    uint64_t seed;
    int64_t count;                /* images per prompt */
    int n_prompts;
    const int64_t *prompt_tokens; /* [n_prompts] text tokens of each prompt's embeddings */
    bool decode;                  /* images wanted (else final latents): needs a VAE */
    /* true classifier-free guidance (FluxPipeline's true_cfg_scale): 0 or 1 is off; above 1
     * each prompt needs a negative prompt of the same length (negative_tokens[n_prompts]) */
    double true_cfg_scale;
    const int64_t *negative_tokens; /* NULL: no negative prompts */
};

/* The job on this model and layout: sides positive multiples of the model's side unit up to
 * WEFT_JOB_MAX_SIDE, pixels, steps, prompts, images and guidance within their bounds (lim may be
 * NULL: hard bounds only), every prompt's tokens in 1..WEFT_JOB_MAX_TEXT_TOKENS, a VAE when
 * decoding, and the context-parallel split of the image and text sequences (plain modes need
 * lengths that divide by ring x ulysses; every rank needs at least one image token). The cause
 * is the job's, so nothing is logged above DEBUG: err says which field and why, naming the
 * [api] key or the [parallel] flag that would change the answer. */
weft_status_t weft_job_check(const struct weft_model *model, const struct weft_layout *layout,
                             const struct weft_job_desc *job, const struct weft_job_limits *lim,
                             struct weft_error *err);

/* Tokens of one image: (height / side_unit) x (width / side_unit). */
int64_t weft_job_image_tokens(const struct weft_model *model, int64_t height, int64_t width);
/* Elements of one image's packed latents (tokens x in_channels): the noise stride. */
int64_t weft_job_latent_elems(const struct weft_model *model, int64_t height, int64_t width);

#endif
