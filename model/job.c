/* The rules of a job (see job.h). */
#include "model/job.h"

#include <stdio.h>

static int64_t bound(int64_t configured, int64_t hard)
{
    return configured > 0 && configured < hard ? configured : hard;
}

int64_t weft_job_image_tokens(const struct weft_model *model, int64_t height, int64_t width)
{
    return (height / model->side_unit) * (width / model->side_unit);
}

int64_t weft_job_latent_elems(const struct weft_model *model, int64_t height, int64_t width)
{
    return weft_job_image_tokens(model, height, width) * model->flux.in_channels;
}

static weft_status_t check_size(const struct weft_model *m, const struct weft_job_desc *j,
                                const struct weft_job_limits *lim, struct weft_error *err)
{
    const int64_t unit = m->side_unit;
    if (j->height < unit || j->width < unit || j->height > WEFT_JOB_MAX_SIDE ||
        j->width > WEFT_JOB_MAX_SIDE)
        return weft_error_refuse(err, WEFT_ERR_RANGE,
                                 "height %lld x width %lld: each side must be %lld..%d pixels",
                                 (long long)j->height, (long long)j->width, (long long)unit,
                                 WEFT_JOB_MAX_SIDE);
    if (j->height % unit || j->width % unit)
        return weft_error_refuse(err, WEFT_ERR_INVALID,
                                 "height %lld x width %lld: both must be multiples of %lld (the "
                                 "VAE's %lldx downsampling, then 2 x 2 packing)",
                                 (long long)j->height, (long long)j->width, (long long)unit,
                                 (long long)m->vae_scale);
    const int64_t max_pixels = bound(lim ? lim->max_pixels : 0, INT64_MAX);
    if (j->height * j->width > max_pixels)
        return weft_error_refuse(err, WEFT_ERR_RANGE,
                                 "%lld x %lld is %lld pixels, over the limit %lld ([api] "
                                 "max_pixels)", (long long)j->width, (long long)j->height,
                                 (long long)j->height * (long long)j->width, (long long)max_pixels);
    return WEFT_OK;
}

static weft_status_t check_counts(const struct weft_job_desc *j,
                                  const struct weft_job_limits *lim, struct weft_error *err)
{
    const int64_t max_steps = bound(lim ? lim->max_steps : 0, WEFT_JOB_MAX_STEPS);
    const int64_t max_prompts = bound(lim ? lim->max_prompts : 0, WEFT_JOB_MAX_PROMPTS);
    const int64_t max_images = bound(lim ? lim->max_images : 0, WEFT_JOB_MAX_IMAGES);
    const char *api = lim ? " ([api] max_steps)" : "";
    if (j->steps < 1 || j->steps > max_steps)
        return weft_error_refuse(err, WEFT_ERR_RANGE, "steps %lld: 1..%lld allowed%s",
                                 (long long)j->steps, (long long)max_steps, api);
    if (j->n_prompts < 1 || j->n_prompts > max_prompts)
        return weft_error_refuse(err, WEFT_ERR_RANGE, "%d prompts: 1..%lld allowed%s",
                                 j->n_prompts, (long long)max_prompts,
                                 lim ? " ([api] max_prompts)" : "");
    if (j->count < 1 || j->count > max_images ||
        (int64_t)j->n_prompts * j->count > max_images)
        return weft_error_refuse(err, WEFT_ERR_RANGE,
                                 "%d prompts x count %lld: at most %lld images%s", j->n_prompts,
                                 (long long)j->count, (long long)max_images,
                                 lim ? " ([api] max_images)" : "");
    if (!weft_job_scale_ok(j->guidance))
        return weft_error_refuse(err, WEFT_ERR_RANGE, "guidance %g: a number in 0..%g expected",
                                 j->guidance, WEFT_JOB_MAX_GUIDANCE);
    if (!weft_job_scale_ok(j->true_cfg_scale))
        return weft_error_refuse(err, WEFT_ERR_RANGE, "true_cfg_scale %g: a number in 0..%g "
                                 "expected (1 or less: off)", j->true_cfg_scale,
                                 WEFT_JOB_MAX_GUIDANCE);
    if (j->true_cfg_scale > 1 && !j->negative_tokens)
        return weft_error_refuse(err, WEFT_ERR_INVALID, "true_cfg_scale %g needs a negative "
                                 "prompt (FluxPipeline's true CFG is on with both)",
                                 j->true_cfg_scale);
    for (int i = 0; j->negative_tokens && i < j->n_prompts; i++)
        if (j->negative_tokens[i] != j->prompt_tokens[i])
            return weft_error_refuse(err, WEFT_ERR_INVALID, "the negative prompt's embeddings "
                                     "have %lld tokens, prompt %d's %lld: they must match "
                                     "(FluxPipeline pads both to max_sequence_length)",
                                     (long long)j->negative_tokens[i], i,
                                     (long long)j->prompt_tokens[i]);
    return WEFT_OK;
}

/* How the context-parallel ranks split the image and each prompt's text. */
static weft_status_t check_split(const struct weft_layout *l, int64_t s_img,
                                 const struct weft_job_desc *j, struct weft_error *err)
{
    const int w = l->mesh.ring * l->mesh.ulysses;
    if (w <= 1)
        return WEFT_OK;
    const bool anything = l->ulysses_anything || l->ring_anything;
    const char *flag = l->mesh.ulysses > 1 ? "ulysses_anything" : "ring_anything";
    if (s_img < w)
        return weft_error_refuse(err, WEFT_ERR_RANGE,
                                 "%lld image tokens cannot give each of %d context-parallel "
                                 "ranks one", (long long)s_img, w);
    if (!anything && s_img % w)
        return weft_error_refuse(err, WEFT_ERR_INVALID,
                                 "image sequence length %lld does not divide by the "
                                 "context-parallel degree %d (ring %d x ulysses %d); set "
                                 "[parallel] %s = true to split it unevenly", (long long)s_img,
                                 w, l->mesh.ring, l->mesh.ulysses, flag);
    for (int i = 0; i < j->n_prompts && !anything; i++) {
        if (j->prompt_tokens[i] % w)
            return weft_error_refuse(err, WEFT_ERR_INVALID,
                                     "prompt %d: text sequence length %lld does not divide by "
                                     "the context-parallel degree %d (ring %d x ulysses %d); "
                                     "set [parallel] %s = true to split it unevenly", i,
                                     (long long)j->prompt_tokens[i], w, l->mesh.ring,
                                     l->mesh.ulysses, flag);
    }
    return WEFT_OK;
}

weft_status_t weft_job_check(const struct weft_model *model, const struct weft_layout *layout,
                             const struct weft_job_desc *job, const struct weft_job_limits *lim,
                             struct weft_error *err)
{
    weft_status_t st;
    if ((st = check_size(model, job, lim, err)) != WEFT_OK ||
        (st = check_counts(job, lim, err)) != WEFT_OK)
        return st;
    for (int i = 0; i < job->n_prompts; i++) {
        const int64_t t = job->prompt_tokens[i];
        if (t < 1 || t > WEFT_JOB_MAX_TEXT_TOKENS)
            return weft_error_refuse(err, WEFT_ERR_RANGE,
                                     "prompt %d: %lld text tokens; 1..%d allowed", i,
                                     (long long)t, WEFT_JOB_MAX_TEXT_TOKENS);
    }
    if (model->flux.version == 2 && job->negative_tokens)
        return weft_error_refuse(err, WEFT_ERR_UNSUPPORTED,
                                 "a negative prompt: Flux2Pipeline has no true CFG (FLUX.2's "
                                 "guidance is embedded: the guidance scale)");
    if (job->decode && !model->has_vae)
        return weft_error_refuse(err, WEFT_ERR_UNSUPPORTED,
                                 "%s has no vae component: images need a pipeline folder with "
                                 "vae/ (or ask for latents)", model->dir);
    return check_split(layout, weft_job_image_tokens(model, job->height, job->width), job, err);
}
