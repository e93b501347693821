/* The staged FLUX.1 pipeline (see pipeline.h). */
#include "worker/pipeline.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/alloc.h"
#include "common/log.h"
#include "model/checkpoint.h"
#include "model/flux.h"
#include "model/safetensors.h"
#include "model/scheduler.h"
#include "worker/noise.h"

enum { COMP_PROMPT, COMP_TRANSFORMER, COMP_VAE, COMP_COUNT };

struct weft_pipeline {
    const struct weft_kernels *K;
    struct weft_kctx *kc;
    bool keep;
    char tdir[2048], vdir[2048];
    struct weft_sched_config sched;
    struct weft_flux_config fcfg;
    struct weft_vae_config vcfg;
    bool has_vae;
    struct weft_pipeline_component comp[COMP_COUNT];
    size_t n_comp;
    struct weft_flux *flux;
    struct weft_vae *vae;
};

const char *weft_pipe_stage_name(enum weft_pipe_stage stage)
{
    static const char *const names[WEFT_STAGE_COUNT] = {"encode", "denoise", "decode"};
    return stage < WEFT_STAGE_COUNT ? names[stage] : "?";
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* ---------------------------------------------------------------------------------------- */
/* Opening: configs and checkpoint headers, no weights                                       */

static uint64_t ckpt_file_bytes(const struct weft_ckpt *ck)
{
    uint64_t n = 0;
    for (size_t i = 0; i < weft_ckpt_file_count(ck); i++)
        n += weft_st_file_size(weft_ckpt_file_at(ck, i));
    return n;
}

static weft_status_t open_config(const char *dir, const char *want_class, struct weft_ckpt **ck_p,
                                 char *origin, size_t len)
{
    weft_status_t st = weft_ckpt_open(dir, ck_p);
    if (st != WEFT_OK)
        return st;
    if (strcmp(weft_ckpt_class(*ck_p), want_class) != 0) {
        WEFT_LOG_ERROR("pipeline", "%s: class '%s' is not %s", dir, weft_ckpt_class(*ck_p),
                       want_class);
        weft_ckpt_close(*ck_p);
        return WEFT_ERR_UNSUPPORTED;
    }
    snprintf(origin, len, "%s/config.json", dir);
    return WEFT_OK;
}

static weft_status_t probe_transformer(struct weft_pipeline *p)
{
    struct weft_ckpt *ck;
    char origin[2100];
    weft_status_t st = open_config(p->tdir, WEFT_FLUX_CLASS, &ck, origin, sizeof(origin));
    if (st != WEFT_OK)
        return st;
    st = weft_flux_config_parse(weft_ckpt_config(ck), origin, &p->fcfg);
    size_t n = st == WEFT_OK ? weft_flux_params(&p->fcfg, NULL) : 0;
    struct weft_param *params = st == WEFT_OK ? weft_calloc(n + 1, sizeof(*params)) : NULL;
    if (st == WEFT_OK && !params)
        st = WEFT_ERR_NOMEM;
    uint64_t numel = 0;
    if (st == WEFT_OK) {
        weft_flux_params(&p->fcfg, params);
        for (size_t i = 0; i < n; i++)
            numel += (uint64_t)params[i].shape[0] *
                     (uint64_t)(params[i].ndim == 2 ? params[i].shape[1] : 1);
    }
    p->comp[COMP_TRANSFORMER] = (struct weft_pipeline_component){
        "transformer", WEFT_FLUX_CLASS, p->tdir, WEFT_STAGE_DENOISE, {WEFT_DEVICE_CPU, 0},
        ckpt_file_bytes(ck), numel * sizeof(float), false};
    weft_free(params);
    weft_ckpt_close(ck);
    return st;
}

static weft_status_t probe_vae(struct weft_pipeline *p)
{
    struct weft_ckpt *ck;
    char origin[2100];
    weft_status_t st = open_config(p->vdir, WEFT_VAE_CLASS, &ck, origin, sizeof(origin));
    if (st != WEFT_OK)
        return st;
    st = weft_vae_config_parse(weft_ckpt_config(ck), origin, &p->vcfg);
    if (st == WEFT_OK && p->vcfg.latent_channels * 4 != p->fcfg.in_channels) {
        WEFT_LOG_ERROR("pipeline", "%s: latent_channels %lld does not match the transformer's "
                                   "in_channels %lld (4 x latent channels, 2x2 packing)",
                       origin, (long long)p->vcfg.latent_channels,
                       (long long)p->fcfg.in_channels);
        st = WEFT_ERR_FORMAT;
    }
    uint64_t numel = (uint64_t)weft_vae_part_numel(&p->vcfg, WEFT_VAE_DECODER);
    p->comp[COMP_VAE] = (struct weft_pipeline_component){
        "vae", WEFT_VAE_CLASS, p->vdir, WEFT_STAGE_DECODE, {WEFT_DEVICE_CPU, 0},
        ckpt_file_bytes(ck), numel * sizeof(float), false};
    p->has_vae = st == WEFT_OK;
    weft_ckpt_close(ck);
    return st;
}

/* The transformer and VAE folders and the scheduler config of a pipeline folder. */
static weft_status_t resolve(struct weft_pipeline *p, const char *dir)
{
    weft_sched_config_flux_default(&p->sched);
    enum weft_path_kind kind = weft_path_kind(dir);
    if (kind == WEFT_PATH_MODEL) {
        snprintf(p->tdir, sizeof(p->tdir), "%s", dir);
        return WEFT_OK;
    }
    if (kind != WEFT_PATH_PIPELINE) {
        WEFT_LOG_ERROR("pipeline", "%s: not a pipeline folder (model_index.json) or a model "
                                   "folder (config.json)", dir);
        return WEFT_ERR_NOT_FOUND;
    }
    struct weft_pipe *pipe;
    weft_status_t st = weft_pipe_open(dir, &pipe);
    if (st != WEFT_OK)
        return st;
    const struct weft_pipe_component *t = weft_pipe_find(pipe, "transformer");
    const struct weft_pipe_component *v = weft_pipe_find(pipe, "vae");
    const struct weft_pipe_component *s = weft_pipe_find(pipe, "scheduler");
    if (!t || !t->class_name) {
        WEFT_LOG_ERROR("pipeline", "%s/model_index.json: no transformer component", dir);
        st = WEFT_ERR_FORMAT;
    }
    snprintf(p->tdir, sizeof(p->tdir), "%s/transformer", dir);
    if (v && v->class_name)
        snprintf(p->vdir, sizeof(p->vdir), "%s/vae", dir);
    if (st == WEFT_OK && s && s->class_name) {
        char path[2100];
        cJSON *json;
        snprintf(path, sizeof(path), "%s/scheduler/scheduler_config.json", dir);
        if ((st = weft_json_read_file(path, 1 << 20, &json)) == WEFT_OK) {
            st = weft_sched_config_parse(json, path, &p->sched);
            cJSON_Delete(json);
        }
    }
    weft_pipe_close(pipe);
    return st;
}

weft_status_t weft_pipeline_open(const char *dir, const struct weft_pipeline_opts *opts,
                                 struct weft_pipeline **pipe_p)
{
    struct weft_pipeline *p = weft_calloc(1, sizeof(*p));
    if (!p)
        return WEFT_ERR_NOMEM;
    p->K = opts->kernels;
    p->kc = opts->kctx;
    p->keep = opts->keep_resident;
    p->comp[COMP_PROMPT] = (struct weft_pipeline_component){
        "prompt_embeds", "precomputed (safetensors)", NULL, WEFT_STAGE_ENCODE,
        {WEFT_DEVICE_CPU, 0}, 0, 0, false};
    weft_status_t st = resolve(p, dir);
    if (st == WEFT_OK)
        st = probe_transformer(p);
    if (st == WEFT_OK && p->vdir[0])
        st = probe_vae(p);
    if (st != WEFT_OK) {
        weft_pipeline_close(p);
        return st;
    }
    p->n_comp = p->has_vae ? 3 : 2;
    *pipe_p = p;
    return WEFT_OK;
}

void weft_pipeline_close(struct weft_pipeline *p)
{
    if (!p)
        return;
    weft_flux_destroy(p->flux);
    weft_vae_destroy(p->vae);
    weft_free(p);
}

size_t weft_pipeline_component_count(const struct weft_pipeline *p)
{
    return p->n_comp;
}

const struct weft_pipeline_component *
weft_pipeline_component_at(const struct weft_pipeline *p, size_t i)
{
    return i < p->n_comp ? &p->comp[i] : NULL;
}

const struct weft_flux_config *weft_pipeline_flux_config(const struct weft_pipeline *p)
{
    return &p->fcfg;
}

const struct weft_vae_config *weft_pipeline_vae_config(const struct weft_pipeline *p)
{
    return p->has_vae ? &p->vcfg : NULL;
}

bool weft_pipeline_has_vae(const struct weft_pipeline *p)
{
    return p->has_vae;
}

/* ---------------------------------------------------------------------------------------- */
/* Stages                                                                                    */

struct prompt {
    float *embeds, *pooled;
    int64_t tokens;
};

static weft_status_t read_f32(struct weft_st_file *f, const struct weft_st_tensor *t,
                              float **out)
{
    float *p = weft_malloc((size_t)t->numel * sizeof(float) + 4);
    if (!p)
        return WEFT_ERR_NOMEM;
    weft_status_t st = weft_st_read(f, t, p, WEFT_DTYPE_F32);
    if (st != WEFT_OK) {
        weft_free(p);
        return st;
    }
    *out = p;
    return WEFT_OK;
}

/* Text conditioning: the precomputed embeddings of the job's prompt file. */
static weft_status_t stage_encode(struct weft_pipeline *p, const char *path, struct prompt *pr)
{
    struct weft_st_file *f;
    weft_status_t st = weft_st_open(path, &f);
    if (st != WEFT_OK)
        return st;
    const struct weft_flux_config *c = &p->fcfg;
    const struct weft_st_tensor *pe = weft_st_find(f, "prompt_embeds");
    const struct weft_st_tensor *po = weft_st_find(f, "pooled_prompt_embeds");
    if (!pe || pe->ndim != 3 || pe->shape[0] != 1 || pe->shape[2] != c->joint_attention_dim ||
        !po || po->numel != c->pooled_projection_dim) {
        WEFT_LOG_ERROR("pipeline", "%s: needs prompt_embeds [1, T, %lld] and "
                                   "pooled_prompt_embeds [1, %lld] (the transformer's "
                                   "joint_attention_dim and pooled_projection_dim)", path,
                       (long long)c->joint_attention_dim, (long long)c->pooled_projection_dim);
        st = WEFT_ERR_FORMAT;
    }
    if (st == WEFT_OK && (st = read_f32(f, pe, &pr->embeds)) == WEFT_OK)
        st = read_f32(f, po, &pr->pooled);
    if (st == WEFT_OK) {
        pr->tokens = pe->shape[1];
        p->comp[COMP_PROMPT].file_bytes = weft_st_file_size(f);
    }
    weft_st_close(f);
    return st;
}

static weft_status_t stage_denoise(struct weft_pipeline *p, const struct weft_pipeline_job *job,
                                   const struct prompt *pr, float *latents)
{
    const int64_t gh = job->height / 16, gw = job->width / 16, tokens = gh * gw;
    struct weft_schedule *sched = weft_malloc(sizeof(*sched));
    if (!sched)
        return WEFT_ERR_NOMEM;
    weft_status_t st = weft_sched_plan(&p->sched, job->steps, tokens, sched);
    if (st == WEFT_OK && !p->flux) {
        struct weft_flux_opts fo = {p->K, p->kc};
        if ((st = weft_flux_load(p->tdir, &fo, &p->flux)) == WEFT_OK)
            p->comp[COMP_TRANSFORMER].loaded = true;
    }
    if (st == WEFT_OK) {
        struct weft_denoise_params dp = {
            .grid_h = gh, .grid_w = gw, .prompt_embeds = pr->embeds, .s_txt = pr->tokens,
            .pooled = pr->pooled, .guidance = job->guidance, .schedule = sched,
            .on_step = job->on_step, .cb_arg = job->cb_arg,
        };
        st = weft_denoise(p->flux, &dp, latents);
    }
    if (!p->keep) {
        weft_flux_destroy(p->flux); /* weights and activations */
        p->flux = NULL;
        p->comp[COMP_TRANSFORMER].loaded = false;
    }
    weft_free(sched);
    return st;
}

static weft_status_t stage_decode(struct weft_pipeline *p, const struct weft_pipeline_job *job,
                                  struct weft_pipeline_result *r)
{
    const struct weft_vae_config *c = &p->vcfg;
    const int64_t lh = job->height / c->scale, lw = job->width / c->scale;
    const int64_t n_img = job->height * job->width * c->out_channels;
    float *lat = weft_big_alloc((size_t)(lh * lw * c->latent_channels) * sizeof(float));
    r->image = weft_malloc((size_t)n_img * sizeof(float));
    r->rgb = weft_malloc((size_t)n_img);
    weft_status_t st = lat && r->image && r->rgb ? WEFT_OK : WEFT_ERR_NOMEM;
    if (st == WEFT_OK && !p->vae) {
        struct weft_vae_opts vo = {p->K, p->kc};
        if ((st = weft_vae_load(p->vdir, &vo, &p->vae)) == WEFT_OK)
            p->comp[COMP_VAE].loaded = true;
    }
    if (st == WEFT_OK) {
        weft_vae_unpack_flux(c, r->latents, lh, lw, lat);
        st = weft_vae_decode(p->vae, lat, lh, lw, job->tiling, r->image);
    }
    if (st == WEFT_OK)
        weft_vae_to_rgb8(r->image, n_img, r->rgb);
    if (!p->keep) {
        weft_vae_destroy(p->vae);
        p->vae = NULL;
        p->comp[COMP_VAE].loaded = false;
    } else if (p->vae) {
        weft_vae_release(p->vae); /* weights stay; a next job may have another size */
    }
    weft_big_free(lat, (size_t)(lh * lw * c->latent_channels) * sizeof(float));
    return st;
}

static weft_status_t check_job(const struct weft_pipeline *p, const struct weft_pipeline_job *j)
{
    /* FLUX latents are 1/8 of the image, packed 2x2 into tokens */
    const int64_t unit = 16;
    if (j->height < unit || j->width < unit || j->height % unit || j->width % unit ||
        j->height > 16384 || j->width > 16384) {
        WEFT_LOG_ERROR("pipeline", "image %lldx%lld: height and width must be multiples of %lld "
                                   "up to 16384", (long long)j->width, (long long)j->height,
                       (long long)unit);
        return WEFT_ERR_INVALID;
    }
    if (j->decode && !p->has_vae) {
        WEFT_LOG_ERROR("pipeline", "%s: no vae component to decode with (a pipeline folder "
                                   "with vae/ is needed for images)", p->tdir);
        return WEFT_ERR_INVALID;
    }
    if (j->decode && p->vcfg.scale != 8) {
        WEFT_LOG_ERROR("pipeline", "%s: the VAE scales by %lld, FLUX packing needs 8", p->vdir,
                       (long long)p->vcfg.scale);
        return WEFT_ERR_UNSUPPORTED;
    }
    if (!j->prompt_embeds) {
        WEFT_LOG_ERROR("pipeline", "no prompt embeddings file");
        return WEFT_ERR_INVALID;
    }
    return WEFT_OK;
}

weft_status_t weft_pipeline_run(struct weft_pipeline *p, const struct weft_pipeline_job *job,
                                struct weft_pipeline_result *out)
{
    weft_status_t st = check_job(p, job);
    if (st != WEFT_OK)
        return st;
    struct weft_pipeline_result r = {0};
    struct prompt pr = {0};
    r.tokens = (job->height / 16) * (job->width / 16);
    r.channels = p->fcfg.in_channels;
    r.height = job->height;
    r.width = job->width;
    double t0 = now();
    st = stage_encode(p, job->prompt_embeds, &pr);
    r.seconds[WEFT_STAGE_ENCODE] = now() - t0;
    const size_t n = (size_t)(r.tokens * r.channels);
    if (st == WEFT_OK && !(r.latents = weft_malloc(n * sizeof(float))))
        st = WEFT_ERR_NOMEM;
    if (st == WEFT_OK) {
        if (job->latents_init)
            memcpy(r.latents, job->latents_init, n * sizeof(float));
        else
            weft_noise_normal(job->seed, 0, (int64_t)n, r.latents);
        t0 = now();
        st = stage_denoise(p, job, &pr, r.latents);
        r.seconds[WEFT_STAGE_DENOISE] = now() - t0;
    }
    weft_free(pr.embeds);
    weft_free(pr.pooled);
    if (st == WEFT_OK && job->decode) {
        t0 = now();
        st = stage_decode(p, job, &r);
        r.seconds[WEFT_STAGE_DECODE] = now() - t0;
    }
    if (st != WEFT_OK) {
        weft_pipeline_result_cleanup(&r);
        return st;
    }
    *out = r;
    return WEFT_OK;
}

void weft_pipeline_result_cleanup(struct weft_pipeline_result *r)
{
    weft_free(r->latents);
    weft_free(r->image);
    weft_free(r->rgb);
    memset(r, 0, sizeof(*r));
}
