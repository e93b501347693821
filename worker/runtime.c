/* The worker's executor (see runtime.h). */
#include "worker/runtime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/alloc.h"
#include "common/log.h"
#include "model/plan.h"
#include "model/scheduler.h"
#include "worker/denoise.h"
#include "worker/noise.h"
#include "worker/par_transport.h"
#include "worker/png.h"
#include "worker/vae.h"

struct weft_runtime {
    const struct weft_kernels *K;
    struct weft_kctx *kc;
    struct weft_rt_assign a;
    struct weft_mesh_coord me;
    int assigned;
    struct weft_par_transport *pt;
    const struct weft_par_comm *comm;
    struct weft_tp_layout *layout;
    struct weft_flux *flux;
    struct weft_vae *vae;
    struct weft_sched_config sched_cfg;
    struct weft_schedule sched;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

weft_status_t weft_runtime_create(const struct weft_kernels *K, struct weft_kctx *kc,
                                  struct weft_runtime **rt_p)
{
    struct weft_runtime *rt = weft_calloc(1, sizeof(*rt));
    if (!rt)
        return WEFT_ERR_NOMEM;
    rt->K = K;
    rt->kc = kc;
    *rt_p = rt;
    return WEFT_OK;
}

void weft_runtime_unassign(struct weft_runtime *rt)
{
    if (!rt)
        return;
    weft_flux_destroy(rt->flux);
    weft_vae_destroy(rt->vae);
    weft_tp_layout_destroy(rt->layout);
    weft_par_transport_destroy(rt->pt);
    rt->flux = NULL, rt->vae = NULL, rt->layout = NULL, rt->pt = NULL, rt->comm = NULL;
    rt->assigned = 0;
}

void weft_runtime_destroy(struct weft_runtime *rt)
{
    weft_runtime_unassign(rt);
    weft_free(rt);
}

/* The model's plan with the assignment's overrides, resolved for the mesh's tp degree. */
static weft_status_t resolve_plan(struct weft_runtime *rt, const char *tdir)
{
    struct weft_ckpt *ck;
    weft_status_t st = weft_ckpt_open(tdir, &ck);
    if (st != WEFT_OK)
        return st;
    struct weft_model_info info;
    struct weft_tp_plan plan;
    if ((st = weft_model_info_get(ck, &info)) == WEFT_OK) {
        weft_tp_plan_builtin(info.class_name, &plan);
        st = weft_tp_plan_apply_conf(&plan, &rt->a.tp_plan);
    }
    if (st == WEFT_OK)
        st = weft_tp_resolve(&plan, ck, &info, rt->a.mesh.tp, rt->a.mesh.tp, &rt->layout);
    weft_ckpt_close(ck);
    return st;
}

weft_status_t weft_runtime_assign(struct weft_runtime *rt, const struct weft_rt_assign *a,
                                  struct weft_transport *world)
{
    weft_runtime_unassign(rt);
    rt->a = *a;
    weft_mesh_coord(&a->mesh, a->mesh_rank, &rt->me);
    char tdir[WEFT_CONF_PATH + 16], vdir[WEFT_CONF_PATH + 16];
    snprintf(tdir, sizeof(tdir), "%s/transformer", a->model);
    snprintf(vdir, sizeof(vdir), "%s/vae", a->model);
    weft_status_t st = weft_sched_config_load(a->model, &rt->sched_cfg);
    if (st == WEFT_OK && weft_mesh_size(&a->mesh) > 1) {
        if (!world) {
            WEFT_LOG_ERROR("worker", "a %d-rank mesh needs a data-plane world",
                           weft_mesh_size(&a->mesh));
            st = WEFT_ERR_INVALID;
        } else if ((st = weft_par_transport_create(world, &a->mesh, a->world_base, &rt->pt)) ==
                   WEFT_OK) {
            rt->comm = weft_par_transport_comm(rt->pt);
        }
    }
    if (st == WEFT_OK && a->mesh.tp > 1)
        st = resolve_plan(rt, tdir);
    if (st == WEFT_OK) {
        struct weft_flux_opts o = {
            .kernels = rt->K,
            .kctx = rt->kc,
            .tp_rank = rt->me.tp,
            .tp_size = a->mesh.tp,
            .tp_layout = rt->layout,
            .tp_full_then_shard = a->tp_full_then_shard,
            .cp = a->cp,
            .ring_rank = rt->me.ring,
            .ulysses_rank = rt->me.ulysses,
            .stage = a->stage,
            .comm = rt->comm,
        };
        o.cp.ring = a->mesh.ring, o.cp.ulysses = a->mesh.ulysses;
        st = weft_flux_load(tdir, &o, &rt->flux);
    }
    if (st == WEFT_OK && a->decode) {
        struct weft_vae_opts vo = {rt->K, rt->kc};
        st = weft_vae_load(vdir, &vo, &rt->vae);
    }
    if (st != WEFT_OK) {
        weft_runtime_unassign(rt);
        return st;
    }
    rt->assigned = 1;
    return WEFT_OK;
}

void weft_runtime_bytes(const struct weft_runtime *rt, uint64_t *transformer_p, uint64_t *vae_p)
{
    *transformer_p = rt->flux ? weft_flux_weight_bytes(rt->flux) : 0;
    *vae_p = rt->vae ? weft_vae_weight_bytes(rt->vae) : 0;
}

void weft_runtime_comm_stats(const struct weft_runtime *rt, struct weft_par_stats *out)
{
    memset(out, 0, sizeof(*out));
    if (rt->pt)
        weft_par_transport_stats(rt->pt, out);
}

struct step_ctx {
    struct weft_runtime *rt;
    weft_rt_step_cb on_step;
    weft_rt_cancel_cb cancelled;
    void *arg;
    double last;
};

/* After every step: report it, then agree on stopping. Only the decoding rank polls the
 * coordinator's cancel flag; the sum over the replica puts every rank at the same step. */
static weft_status_t step_end(void *varg, int step, int steps, const float *lat, int64_t n)
{
    (void)lat, (void)n;
    struct step_ctx *sc = varg;
    struct weft_runtime *rt = sc->rt;
    double now = now_s();
    if (rt->a.decode && sc->on_step)
        sc->on_step(sc->arg, step + 1, steps, now - sc->last);
    sc->last = now;
    float stop = rt->a.decode && sc->cancelled && sc->cancelled(sc->arg) ? 1.0f : 0.0f;
    if (rt->comm && step + 1 < steps) {
        weft_status_t st = rt->comm->allreduce(rt->comm->replica, &stop, 1);
        if (st != WEFT_OK)
            return st;
    }
    return stop > 0.0f && step + 1 < steps ? WEFT_ERR_CANCELLED : WEFT_OK;
}

static weft_status_t decode_png(struct weft_runtime *rt, const struct weft_rt_image *img,
                                const float *latents, struct weft_rt_result *out)
{
    const struct weft_vae_config *vc = weft_vae_get_config(rt->vae);
    const int64_t scale = 8, lat_h = img->height / scale, lat_w = img->width / scale;
    const int64_t npx = img->height * img->width * 3;
    float *unpacked = weft_big_alloc((size_t)(lat_h * lat_w * 16 + 16) * sizeof(float));
    float *image = weft_big_alloc((size_t)npx * sizeof(float));
    uint8_t *rgb = weft_malloc((size_t)npx);
    weft_status_t st = unpacked && image && rgb ? WEFT_OK : WEFT_ERR_NOMEM;
    if (st == WEFT_OK) {
        weft_vae_unpack_flux(vc, latents, lat_h, lat_w, unpacked);
        st = weft_vae_decode(rt->vae, unpacked, lat_h, lat_w, NULL, image);
    }
    if (st == WEFT_OK) {
        weft_vae_to_rgb8(image, npx, rgb);
        char seed[32], steps[16], guid[32], layout[96];
        snprintf(seed, sizeof(seed), "%llu", (unsigned long long)img->seed);
        snprintf(steps, sizeof(steps), "%d", img->steps);
        snprintf(guid, sizeof(guid), "%g", (double)img->guidance);
        if (rt->a.stage.on)
            snprintf(layout, sizeof(layout), "dp %d x %d device_map stages", rt->a.mesh.dp,
                     rt->a.mesh.pp);
        else
            snprintf(layout, sizeof(layout), "dp %d x ring %d x ulysses %d x tp %d",
                     rt->a.mesh.dp, rt->a.mesh.ring, rt->a.mesh.ulysses, rt->a.mesh.tp);
        const struct weft_png_text text[] = {
            {"prompt", img->png_prompt ? img->png_prompt : ""},
            {"seed", seed},
            {"steps", steps},
            {"guidance", guid},
            {"model", img->png_model ? img->png_model : rt->a.model},
            {"parallel layout", layout},
            {"Software", "weft " WEFT_VERSION},
        };
        st = weft_png_encode(rgb, img->width, img->height, sizeof(text) / sizeof(text[0]), text,
                             &out->png, &out->png_len);
    }
    weft_big_free(unpacked, (size_t)(lat_h * lat_w * 16 + 16) * sizeof(float));
    weft_big_free(image, (size_t)npx * sizeof(float));
    weft_free(rgb);
    weft_vae_release(rt->vae); /* keep the weights, give the activations back */
    return st;
}

weft_status_t weft_runtime_image(struct weft_runtime *rt, const struct weft_rt_image *img,
                                 weft_rt_step_cb on_step, weft_rt_cancel_cb cancelled, void *arg,
                                 struct weft_rt_result *out)
{
    memset(out, 0, sizeof(*out));
    if (!rt->assigned) {
        WEFT_LOG_ERROR("worker", "an image was asked of a worker with no assignment");
        return WEFT_ERR_PROTOCOL;
    }
    const struct weft_flux_config *c = weft_flux_get_config(rt->flux);
    const int64_t gh = img->height / 16, gw = img->width / 16, n = gh * gw * c->in_channels;
    weft_status_t st = weft_sched_plan(&rt->sched_cfg, img->steps, gh * gw, &rt->sched);
    float *latents = st == WEFT_OK ? weft_big_alloc((size_t)n * sizeof(float)) : NULL;
    if (st == WEFT_OK && !latents)
        st = WEFT_ERR_NOMEM;
    if (st != WEFT_OK)
        return st;
    weft_noise_normal(img->seed, img->noise_index * n, n, latents);
    struct step_ctx sc = {rt, on_step, cancelled, arg, now_s()};
    struct weft_denoise_params p = {
        .grid_h = gh,
        .grid_w = gw,
        .prompt_embeds = img->prompt_embeds,
        .s_txt = img->s_txt,
        .pooled = img->pooled,
        .guidance = img->guidance,
        .schedule = &rt->sched,
        .on_step = step_end,
        .cb_arg = &sc,
    };
    double t0 = now_s();
    st = weft_denoise(rt->flux, &p, latents);
    out->denoise_s = now_s() - t0;
    if (st == WEFT_OK && rt->a.decode) {
        t0 = now_s();
        st = decode_png(rt, img, latents, out);
        out->decode_s = now_s() - t0;
    }
    weft_big_free(latents, (size_t)n * sizeof(float));
    return st;
}
