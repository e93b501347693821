/* The denoising loop (see denoise.h). */
#include "worker/denoise.h"

#include <math.h>
#include <string.h>

#include "common/alloc.h"
#include "common/error.h"

void weft_flux_image_ids(int64_t grid_h, int64_t grid_w, int n_axes, float *ids)
{
    for (int64_t r = 0; r < grid_h; r++)
        for (int64_t c = 0; c < grid_w; c++) {
            float *row = ids + (r * grid_w + c) * n_axes;
            for (int a = 0; a < n_axes; a++)
                row[a] = a == 1 ? (float)r : a == 2 ? (float)c : 0.0f;
        }
}

void weft_flux_ids(const struct weft_flux_config *c, int64_t grid_h, int64_t grid_w,
                   int64_t s_txt, float *img_ids, float *txt_ids)
{
    const int n = c->n_axes;
    if (c->version == 3) {
        /* QwenEmbedRope with scale_rope: frame 0, rows and columns centred (row r at
         * r - (h - h / 2)), the text after the image's largest half-extent on every axis */
        const int64_t r0 = grid_h - grid_h / 2, c0 = grid_w - grid_w / 2;
        const int64_t m = grid_h / 2 > grid_w / 2 ? grid_h / 2 : grid_w / 2;
        for (int64_t r = 0; r < grid_h; r++)
            for (int64_t k = 0; k < grid_w; k++) {
                float *row = img_ids + (r * grid_w + k) * n;
                row[0] = 0.0f, row[1] = (float)(r - r0), row[2] = (float)(k - c0);
            }
        for (int64_t l = 0; l < s_txt; l++)
            for (int a = 0; a < n; a++)
                txt_ids[l * n + a] = (float)(m + l);
        return;
    }
    weft_flux_image_ids(grid_h, grid_w, n, img_ids);
    /* text ids: FluxPipeline's are zeros; Flux2Pipeline._prepare_text_ids puts each token's
     * index on the last axis, [0, 0, 0, l] */
    memset(txt_ids, 0, (size_t)(s_txt * n) * sizeof(float));
    for (int64_t l = 0; c->version == 2 && l < s_txt; l++)
        txt_ids[l * n + n - 1] = (float)l;
}

/* True CFG: pred = neg + scale (pred - neg), each operation rounded to the model's dtype
 * (FluxPipeline's); QwenImagePipeline then rescales each token's row to the conditional
 * prediction's norm, comb * (|pred| / |comb|) (norms over the channels, accumulated in double
 * and rounded as torch.norm returns them). */
static void cfg_combine(float *pred, const float *neg, float scale, int64_t rows, int64_t ch,
                        bool renorm, enum weft_dtype dt)
{
    for (int64_t r = 0; r < rows; r++) {
        float *p = pred + r * ch;
        const float *q = neg + r * ch;
        double pn = 0.0, cn = 0.0;
        for (int64_t k = 0; renorm && k < ch; k++)
            pn += (double)p[k] * (double)p[k];
        for (int64_t k = 0; k < ch; k++) {
            const float d = weft_dtype_round(dt, p[k] - q[k]);
            p[k] = weft_dtype_round(dt, q[k] + weft_dtype_round(dt, scale * d));
            cn += (double)p[k] * (double)p[k];
        }
        if (!renorm)
            continue;
        const float ratio = weft_dtype_round(dt, weft_dtype_round(dt, (float)sqrt(pn)) /
                                                     weft_dtype_round(dt, (float)sqrt(cn)));
        for (int64_t k = 0; k < ch; k++)
            p[k] = weft_dtype_round(dt, p[k] * ratio);
    }
}

weft_status_t weft_denoise(struct weft_flux *m, const struct weft_denoise_params *p,
                           float *latents, struct weft_error *err)
{
    const struct weft_flux_config *c = weft_flux_get_config(m);
    const int64_t s_img = p->grid_h * p->grid_w, n = s_img * c->in_channels;
    if (p->grid_h < 1 || p->grid_w < 1 || p->s_txt < 0 || !p->schedule)
        return weft_error_set(err, WEFT_ERR_INVALID, "denoise", "empty image grid or no schedule");
    weft_status_t st = weft_flux_reserve(m, 1, s_img, p->s_txt, err);
    if (st != WEFT_OK)
        return st;
    float *img_ids = weft_malloc((size_t)(s_img * c->n_axes) * sizeof(float));
    float *txt_ids = weft_calloc((size_t)(p->s_txt * c->n_axes) + 1, sizeof(float));
    /* FLUX.2 and Qwen-Image have no pooled embedding */
    const bool cfg = p->neg_prompt_embeds && (p->neg_pooled || c->version != 1) &&
                     p->true_cfg_scale > 1.0f;
    const bool split = cfg && p->cfg_comm && p->cfg_comm->cfg; /* CFG parallelism */
    /* pred, then neg (true CFG): adjacent, so the halves' all-gather fills both at once */
    const size_t pred_bytes = (size_t)n * (cfg ? 2 : 1) * sizeof(float);
    float *pred = weft_big_alloc(pred_bytes), *neg = cfg && pred ? pred + n : NULL;
    if (!img_ids || !txt_ids || !pred) {
        st = weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
        goto out;
    }
    weft_flux_ids(c, p->grid_h, p->grid_w, p->s_txt, img_ids, txt_ids);
    float t_in, g_in = p->guidance;
    struct weft_flux_inputs in = {
        .batch = 1,
        .s_img = s_img,
        .s_txt = p->s_txt,
        .hidden = latents,
        .encoder = p->prompt_embeds,
        .pooled = p->pooled,
        .timestep = &t_in,
        .guidance = c->guidance_embeds ? &g_in : NULL,
        .img_ids = img_ids,
        .txt_ids = txt_ids,
    };
    const struct weft_schedule *s = p->schedule;
    const enum weft_dtype dt = weft_flux_dtype(m);
    weft_dtype_round_n(dt, latents, (size_t)n); /* prepare_latents draws in the model's dtype */
    for (int i = 0; i < s->steps; i++) {
        /* FluxPipeline passes t.to(dtype) / 1000, computed in dtype */
        t_in = weft_dtype_round(dt, weft_dtype_round(dt, s->timesteps[i]) / 1000.0f);
        if (split) {
            /* this half's pass, then the halves' two predictions on both */
            const bool neg_half = p->cfg_half == 1;
            in.encoder = neg_half ? p->neg_prompt_embeds : p->prompt_embeds;
            in.pooled = neg_half ? p->neg_pooled : p->pooled;
            float *mine = neg_half ? neg : pred;
            if ((st = weft_flux_forward(m, &in, mine)) != WEFT_OK) {
                weft_error_refuse(err, st, "the transformer failed at step %d of %d (%s): %s",
                                  i + 1, s->steps, neg_half ? "negative prompt, CFG half 1"
                                                            : "CFG half 0",
                                  weft_status_str(st));
                break;
            }
            const size_t counts[2] = {(size_t)n, (size_t)n};
            if ((st = p->cfg_comm->host_allgatherv(p->cfg_comm->cfg, mine, pred,
                                                    counts)) != WEFT_OK) {
                weft_error_refuse(err, st, "exchanging the CFG halves' predictions at step %d of "
                                  "%d: %s", i + 1, s->steps, weft_status_str(st));
                break;
            }
        } else if ((st = weft_flux_forward(m, &in, pred)) != WEFT_OK) {
            /* the kernels and collectives below logged the cause where they met it */
            weft_error_refuse(err, st, "the transformer failed at step %d of %d: %s", i + 1,
                              s->steps, weft_status_str(st));
            break;
        } else if (cfg) {
            in.encoder = p->neg_prompt_embeds, in.pooled = p->neg_pooled;
            st = weft_flux_forward(m, &in, neg);
            in.encoder = p->prompt_embeds, in.pooled = p->pooled;
            if (st != WEFT_OK) {
                weft_error_refuse(err, st, "the transformer failed at step %d of %d (negative "
                                  "prompt): %s", i + 1, s->steps, weft_status_str(st));
                break;
            }
        }
        if (cfg) /* Qwen-Image's pipeline renormalises */
            cfg_combine(pred, neg, p->true_cfg_scale, s_img, c->in_channels, c->version == 3, dt);
        weft_sched_step(s, i, latents, pred, n);
        weft_dtype_round_n(dt, latents, (size_t)n); /* prev_sample.to(model_output.dtype) */
        if (p->on_step && (st = p->on_step(p->cb_arg, i, s->steps, latents, n)) != WEFT_OK)
            break;
    }
out:
    weft_free(img_ids);
    weft_free(txt_ids);
    weft_big_free(pred, pred_bytes);
    return st;
}
