/* The image pipeline of a device (see runtime.h). */
#include "worker/runtime.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/alloc.h"
#include "common/log.h"
#include "model/checkpoint.h"
#include "model/plan.h"
#include "model/scheduler.h"
#include "worker/denoise.h"
#include "worker/flux.h"
#include "worker/noise.h"
#include "worker/png.h"
#include "worker/prompt_cache.h"
#include "worker/text_encoder.h"
#include "text/tokenizer.h"

struct weft_runtime {
    struct weft_rt_opts opts;
    struct weft_rt_assign a;
    struct weft_model *model;
    struct weft_mesh_coord me;
    struct weft_par_transport *pt;
    const struct weft_par_comm *comm;
    struct weft_tp_layout *layout;
    struct weft_flux *flux;
    struct weft_vae *vae;
    struct weft_schedule sched;
    char layout_name[96];
    /* text (the replica's first rank): loaded on first use, kept unless staged */
    struct weft_tokenizer *tok_clip, *tok_t5;
    struct weft_clip_text *clip;
    struct weft_t5 *t5;
    /* T5 tensor-parallel over the tp group of the replica's first position (tp > 1 dividing
     * its heads and d_ff); NULL: T5 whole on the first rank */
    struct weft_tp_layout *t5_layout;
    uint64_t t5_bytes; /* what this rank holds of T5 (or will hold) */
    struct weft_prompt_cache *cache; /* outlives assignments: its keys name the model */
    bool detached;       /* weft_runtime_detach: no groups, weights kept for the next one */
    uint64_t kept_bytes; /* of the last assignment: weights kept from the one before */
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void weft_rt_assign_single(const char *model_dir, struct weft_rt_assign *out)
{
    memset(out, 0, sizeof(*out));
    snprintf(out->model, sizeof(out->model), "%s", model_dir);
    weft_layout_single(&out->layout);
    out->decode = true;
    out->compute = WEFT_DTYPE_F32;
}

weft_status_t weft_runtime_create(const struct weft_rt_opts *opts, struct weft_runtime **rt_p)
{
    struct weft_runtime *rt = weft_calloc(1, sizeof(*rt));
    if (!rt)
        return WEFT_ERR_NOMEM;
    rt->opts = *opts;
    if (weft_prompt_cache_create(opts->prompt_cache_bytes, &rt->cache) != WEFT_OK) {
        weft_free(rt);
        return WEFT_ERR_NOMEM;
    }
    *rt_p = rt;
    return WEFT_OK;
}

/* The text encoders and their groups' part (T5 tensor-parallel uses the tp group). */
static void drop_text(struct weft_runtime *rt)
{
    weft_clip_text_destroy(rt->clip);
    weft_t5_destroy(rt->t5);
    weft_tokenizer_close(rt->tok_clip);
    weft_tokenizer_close(rt->tok_t5);
    rt->clip = NULL, rt->t5 = NULL, rt->tok_clip = NULL, rt->tok_t5 = NULL;
    weft_tp_layout_destroy(rt->t5_layout);
    rt->t5_layout = NULL;
    rt->t5_bytes = 0;
}

void weft_runtime_unassign(struct weft_runtime *rt)
{
    if (!rt)
        return;
    weft_flux_destroy(rt->flux);
    weft_vae_destroy(rt->vae);
    drop_text(rt);
    weft_tp_layout_destroy(rt->layout);
    weft_par_transport_destroy(rt->pt);
    weft_model_close(rt->model);
    rt->flux = NULL, rt->vae = NULL, rt->layout = NULL, rt->pt = NULL, rt->comm = NULL;
    rt->model = NULL;
    rt->detached = false;
}

void weft_runtime_detach(struct weft_runtime *rt)
{
    if (!rt || !rt->model)
        return;
    drop_text(rt);
    weft_par_transport_destroy(rt->pt);
    rt->pt = NULL, rt->comm = NULL;
    rt->detached = true;
}

uint64_t weft_runtime_kept_bytes(const struct weft_runtime *rt)
{
    return rt->kept_bytes;
}

void weft_runtime_destroy(struct weft_runtime *rt)
{
    if (!rt)
        return;
    weft_runtime_unassign(rt);
    weft_prompt_cache_destroy(rt->cache);
    weft_free(rt);
}

const struct weft_model *weft_runtime_model(const struct weft_runtime *rt)
{
    return rt->detached ? NULL : rt->model;
}

/* The plan the coordinator checked, resolved here for this rank's loading. */
static weft_status_t resolve_plan(struct weft_runtime *rt, struct weft_error *err)
{
    struct weft_ckpt *ck;
    weft_status_t st = weft_ckpt_open(rt->model->transformer_dir, &ck, err);
    if (st != WEFT_OK)
        return st;
    struct weft_tp_plan plan;
    weft_tp_plan_builtin(rt->model->info.class_name, &plan);
    const int tp = rt->a.layout.mesh.tp;
    if ((st = weft_tp_plan_apply_conf(&plan, &rt->a.tp_plan, err)) == WEFT_OK)
        st = weft_tp_resolve(&plan, ck, &rt->model->info, tp, tp, &rt->layout, err);
    weft_ckpt_close(ck);
    return st;
}

/* Ranks within the replica group (WEFT_MESH_REPLICA's order): this rank's, and that of the
 * first rank of pipeline stage pp. */
static int replica_rank(const struct weft_runtime *rt, const struct weft_mesh_coord *c)
{
    struct weft_mesh_coord first = {.dp = c->dp};
    return weft_mesh_rank(&rt->a.layout.mesh, c) - weft_mesh_rank(&rt->a.layout.mesh, &first);
}

static int stage_rank(const struct weft_runtime *rt, int pp)
{
    const struct weft_mesh_coord c = {.dp = rt->me.dp, .pp = pp > 0 ? pp : 0};
    return replica_rank(rt, &c);
}

/* Who encodes text in a replica: with device_map the stages the plan put CLIP and T5 on
 * (text_encoder, text_encoder_2 in its hf_device_map); otherwise the replica's first rank
 * runs both, and with T5 tensor-parallel its tp group runs T5 with it. T5's rank keeps the
 * prompt cache. */
static int clip_root(const struct weft_runtime *rt)
{
    return rt->a.stage.on ? stage_rank(rt, rt->a.stage.clip) : 0;
}

static int t5_root(const struct weft_runtime *rt)
{
    return rt->a.stage.on ? stage_rank(rt, rt->a.stage.t5) : 0;
}

static bool clip_here(const struct weft_runtime *rt)
{
    return replica_rank(rt, &rt->me) == clip_root(rt);
}

static bool t5_here(const struct weft_runtime *rt)
{
    return replica_rank(rt, &rt->me) == t5_root(rt) ||
           (rt->t5_layout && rt->me.cfg == 0 && rt->me.pp == 0 && rt->me.ring == 0 &&
            rt->me.ulysses == 0);
}

/* T5's plan for this replica's tp degree, and the bytes this rank will hold of T5. A degree
 * that does not divide T5's heads and d_ff leaves T5 whole on the first rank. */
static weft_status_t plan_t5(struct weft_runtime *rt, struct weft_error *err)
{
    const struct weft_model *m = rt->model;
    const int tp = rt->a.layout.mesh.tp;
    if (!m->t5.encoder || weft_model_text_missing(m, (char[8]){0}, 8))
        return WEFT_OK;
    if (tp > 1 && weft_t5_tp_fits(&m->t5_cfg, tp)) {
        struct weft_ckpt *ck;
        weft_status_t st = weft_ckpt_open(m->t5.encoder_dir, &ck, err);
        if (st == WEFT_OK)
            st = weft_t5_tp_resolve(&m->t5_cfg, ck, tp, &rt->t5_layout, err);
        if (st == WEFT_OK)
            rt->t5_bytes = weft_t5_held_bytes_tp(&m->t5_cfg, ck, tp);
        weft_ckpt_close(ck);
        if (st != WEFT_OK)
            return st;
        WEFT_LOG_INFO("text", "T5 tensor-parallel over %d ranks: %llu bytes of its weights on "
                      "each", tp, (unsigned long long)rt->t5_bytes);
    } else {
        if (tp > 1)
            WEFT_LOG_INFO("text", "tp %d does not divide T5's %lld heads and d_ff %lld: the "
                          "replica's first rank runs it whole", tp,
                          (long long)m->t5_cfg.num_heads, (long long)m->t5_cfg.d_ff);
        rt->t5_bytes = m->t5.held_bytes;
    }
    if (!t5_here(rt))
        rt->t5_bytes = 0;
    return WEFT_OK;
}

/* The transformer's options for this rank of the assignment. */
static struct weft_flux_opts flux_opts(const struct weft_runtime *rt)
{
    const struct weft_rt_assign *a = &rt->a;
    return (struct weft_flux_opts){
        .kernels = rt->opts.kernels,
        .kctx = rt->opts.kctx,
        .dtype = a->compute,
        .tp_rank = rt->me.tp,
        .tp_size = a->layout.mesh.tp,
        .tp_layout = rt->layout,
        .tp_full_then_shard = a->tp_full_then_shard,
        .cp = {a->layout.mesh.ring, a->layout.mesh.ulysses,
               a->layout.ulysses_anything || a->layout.ring_anything, a->layout.rotation},
        .ring_rank = rt->me.ring,
        .ulysses_rank = rt->me.ulysses,
        .stage = {a->stage.on, a->stage.unit_first, a->stage.unit_last, a->stage.prev,
                  a->stage.next, a->stage.root},
        .comm = rt->comm,
    };
}

static weft_status_t load_transformer(struct weft_runtime *rt, struct weft_error *err)
{
    const struct weft_flux_opts o = flux_opts(rt);
    return weft_flux_load(rt->model->transformer_dir, &o, &rt->flux, err);
}

static weft_status_t load_vae(struct weft_runtime *rt, struct weft_error *err)
{
    struct weft_vae_opts vo = {rt->opts.kernels, rt->opts.kctx};
    return weft_vae_load(rt->model->vae_dir, &vo, &rt->vae, err);
}

static bool same_plan(const struct weft_conf_map *x, const struct weft_conf_map *y)
{
    if (x->n != y->n)
        return false;
    for (int i = 0; i < x->n; i++)
        if (strcmp(x->e[i].key, y->e[i].key) != 0 || strcmp(x->e[i].value, y->e[i].value) != 0)
            return false;
    return true;
}

/* Can the weights of the current (or detached) assignment serve a? The same model, dtype,
 * tensor-parallel degree, rank and plan; neither a pipeline stage; not staged. */
static bool can_keep(const struct weft_runtime *rt, const struct weft_rt_assign *a)
{
    if (!rt->flux || rt->opts.staged || rt->a.stage.on || a->stage.on ||
        strcmp(rt->a.model, a->model) != 0 || rt->a.compute != a->compute ||
        rt->a.layout.mesh.tp != a->layout.mesh.tp || !same_plan(&rt->a.tp_plan, &a->tp_plan) ||
        a->mesh_rank < 0 || a->mesh_rank >= weft_mesh_size(&a->layout.mesh))
        return false;
    struct weft_mesh_coord c;
    weft_mesh_coord(&a->layout.mesh, a->mesh_rank, &c);
    return c.tp == rt->me.tp;
}

weft_status_t weft_runtime_assign(struct weft_runtime *rt, const struct weft_rt_assign *a,
                                  struct weft_transport *world, struct weft_error *err)
{
    /* what the new assignment can take over instead of reading it again */
    struct weft_flux *flux = NULL;
    struct weft_vae *vae = NULL;
    struct weft_tp_layout *tpl = NULL;
    if (can_keep(rt, a)) {
        flux = rt->flux, tpl = rt->layout;
        rt->flux = NULL, rt->layout = NULL;
        if (a->decode && rt->vae)
            vae = rt->vae, rt->vae = NULL;
    }
    weft_runtime_unassign(rt);
    rt->kept_bytes = 0;
    rt->a = *a;
    const struct weft_kernels *K = rt->opts.kernels;
    if (K->set_compute(rt->opts.kctx, a->compute) != WEFT_OK)
        WEFT_LOG_WARN("worker", "%s compute is not available on this %s backend: products in "
                      "f32 (weights stay as stored)", weft_dtype_name(a->compute), K->name);
    weft_status_t st = weft_model_open(a->model, &rt->model, err);
    if (st == WEFT_OK)
        st = weft_model_check_layout(rt->model, &a->layout, &a->tp_plan, err);
    const int size = weft_mesh_size(&a->layout.mesh);
    if (st == WEFT_OK && (a->mesh_rank < 0 || a->mesh_rank >= size))
        st = weft_error_set(err, WEFT_ERR_INVALID, "worker", "mesh rank %d outside a %d-rank "
                            "mesh", a->mesh_rank, size);
    if (st == WEFT_OK && size > 1 && !world)
        st = weft_error_set(err, WEFT_ERR_INVALID, "worker",
                            "a %d-rank mesh needs a data-plane world", size);
    if (st == WEFT_OK && size > 1) {
        st = weft_par_transport_create(world, &a->layout.mesh, a->world_base, &rt->pt, err);
        if (st == WEFT_OK)
            weft_par_transport_set_device(rt->pt, K, rt->opts.kctx);
        rt->comm = st == WEFT_OK ? weft_par_transport_comm(rt->pt) : NULL;
    }
    if (st == WEFT_OK) {
        weft_mesh_coord(&a->layout.mesh, a->mesh_rank, &rt->me);
        weft_layout_name(&a->layout, rt->layout_name, sizeof(rt->layout_name));
    }
    if (st == WEFT_OK && a->layout.mesh.tp > 1) {
        if (tpl)
            rt->layout = tpl, tpl = NULL;
        else
            st = resolve_plan(rt, err);
    }
    if (st == WEFT_OK)
        st = plan_t5(rt, err);
    if (st == WEFT_OK && a->decode && !rt->model->has_vae && rt->opts.staged == false)
        st = weft_error_refuse(err, WEFT_ERR_UNSUPPORTED, "%s has no vae component to decode "
                               "with", a->model);
    if (st == WEFT_OK && !rt->opts.staged && flux) {
        const struct weft_flux_opts o = flux_opts(rt);
        if ((st = weft_flux_rebind(flux, &o, err)) == WEFT_OK) {
            rt->flux = flux, flux = NULL;
            rt->kept_bytes += weft_flux_weight_bytes(rt->flux);
        }
    } else if (st == WEFT_OK && !rt->opts.staged) {
        st = load_transformer(rt, err);
    }
    if (st == WEFT_OK && !rt->opts.staged && a->decode) {
        if (vae) {
            rt->vae = vae, vae = NULL;
            rt->kept_bytes += weft_vae_weight_bytes(rt->vae);
        } else {
            st = load_vae(rt, err);
        }
    }
    if (st == WEFT_OK && rt->kept_bytes)
        WEFT_LOG_INFO("worker", "%s: kept %.1f MB of weights loaded for the previous layout "
                      "(its tensor-parallel shard is the same): nothing read",
                      rt->layout_name, (double)rt->kept_bytes / 1e6);
    weft_flux_destroy(flux);
    weft_vae_destroy(vae);
    weft_tp_layout_destroy(tpl);
    if (st != WEFT_OK)
        weft_runtime_unassign(rt);
    return st;
}

void weft_runtime_bytes(const struct weft_runtime *rt, uint64_t *transformer_p, uint64_t *vae_p)
{
    *transformer_p = rt->flux ? weft_flux_weight_bytes(rt->flux) : 0;
    *vae_p = rt->vae ? weft_vae_weight_bytes(rt->vae) : 0;
    if (!rt->opts.staged || !rt->model)
        return;
    /* staged: what each stage will hold, in the checkpoints' dtypes */
    if (!rt->flux)
        *transformer_p = rt->model->transformer_held_bytes;
    if (!rt->vae && rt->model->has_vae && rt->a.decode)
        *vae_p = rt->model->vae_held_bytes;
}

void weft_runtime_comm_stats(const struct weft_runtime *rt, struct weft_par_stats *out)
{
    memset(out, 0, sizeof(*out));
    if (rt->pt)
        weft_par_transport_stats(rt->pt, out);
}

/* ---------------------------------------------------------------------------------------- */
/* Text                                                                                      */

uint64_t weft_runtime_text_bytes(const struct weft_runtime *rt)
{
    if (!rt->model || weft_model_text_missing(rt->model, (char[8]){0}, 8))
        return 0;
    uint64_t clip = 0, t5 = 0;
    if (clip_here(rt))
        clip = rt->clip ? weft_clip_text_weight_bytes(rt->clip) : rt->model->clip.held_bytes;
    if (t5_here(rt))
        t5 = rt->t5 ? weft_t5_weight_bytes(rt->t5) : rt->t5_bytes;
    return clip + t5;
}

void weft_runtime_text_stats(const struct weft_runtime *rt, struct weft_rt_text_stats *out)
{
    weft_prompt_cache_stats(rt->cache, &out->hits, &out->misses, &out->entries, &out->bytes);
}

/* Diffusers' warning for a truncated prompt, with what was dropped. */
static void warn_truncated(const char *which, const struct weft_tokens *t, int64_t max_len)
{
    if (strcmp(which, "CLIP") == 0)
        WEFT_LOG_WARN("text", "The following part of your input was truncated because CLIP can "
                      "only handle sequences up to %lld tokens: ['%s']", (long long)max_len,
                      t->dropped ? t->dropped : "");
    else
        WEFT_LOG_WARN("text", "The following part of your input was truncated because "
                      "`max_sequence_length` is set to %lld tokens: ['%s']", (long long)max_len,
                      t->dropped ? t->dropped : "");
}

static weft_status_t clip_pooled(struct weft_runtime *rt, const char *text, float *pooled,
                                 struct weft_error *err)
{
    const struct weft_model *m = rt->model;
    struct weft_text_opts o = {.kernels = rt->opts.kernels, .kctx = rt->opts.kctx,
                               .dtype = rt->a.compute};
    weft_status_t st = WEFT_OK;
    if (!rt->tok_clip)
        st = weft_tokenizer_open(m->clip.tokenizer_dir, WEFT_TOKENIZER_CLIP, &rt->tok_clip, err);
    if (st == WEFT_OK && !rt->clip)
        st = weft_clip_text_load(m->clip.encoder_dir, &o, &rt->clip, err);
    if (st != WEFT_OK)
        return st;
    /* FluxPipeline: max_length=self.tokenizer.model_max_length (77 for CLIP-L) */
    const int64_t max_len = weft_tokenizer_model_max_length(rt->tok_clip);
    if (max_len > m->clip_cfg.max_position_embeddings)
        return weft_error_refuse(err, WEFT_ERR_FORMAT, "%s: model_max_length %lld is above the "
                                 "encoder's max_position_embeddings %lld", m->clip.tokenizer_dir,
                                 (long long)max_len,
                                 (long long)m->clip_cfg.max_position_embeddings);
    struct weft_tokens t;
    if ((st = weft_tokenizer_encode(rt->tok_clip, text, strlen(text), max_len, "prompt", &t,
                                    err)) != WEFT_OK)
        return st;
    if (t.truncated)
        warn_truncated("CLIP", &t, max_len);
    st = weft_clip_text_forward(rt->clip, t.ids, t.len, NULL, pooled, err);
    weft_tokens_cleanup(&t);
    if (rt->opts.staged) {
        weft_clip_text_destroy(rt->clip);
        rt->clip = NULL;
    } else {
        weft_clip_text_release(rt->clip);
    }
    return st;
}

/* T5 tensor-parallel: every rank of the group learns whether one failed (mine is this rank's
 * status), so that none enters a collective alone and the first rank reports a peer's
 * failure. */
static weft_status_t t5_agree(struct weft_runtime *rt, weft_status_t mine, const char *what,
                              struct weft_error *err)
{
    if (!rt->t5_layout || !rt->comm) /* T5 tensor-parallel has a group to agree over */
        return mine;
    float bad = mine != WEFT_OK ? 1.0f : 0.0f;
    weft_status_t st = rt->comm->allreduce(rt->comm->tp, &bad, 1);
    if (st != WEFT_OK) /* the transport logged why */
        return weft_error_refuse(err, st, "T5's tensor-parallel group %s: %s", what,
                                 weft_status_str(st));
    if (mine == WEFT_OK && bad > 0.0f)
        return weft_error_peer(err, WEFT_ERR_UNSUPPORTED, "%.0f of T5's %d tensor-parallel "
                                 "ranks failed %s (their reports say why)", bad,
                                 rt->a.layout.mesh.tp, what);
    return mine;
}

/* prior: this rank's status so far (a failure skips T5 but still joins the agreement). */
static weft_status_t t5_embeds(struct weft_runtime *rt, weft_status_t prior, const char *text,
                               int64_t msl, float *embeds, struct weft_error *err)
{
    const struct weft_model *m = rt->model;
    struct weft_text_opts o = {.kernels = rt->opts.kernels, .kctx = rt->opts.kctx,
                               .dtype = rt->a.compute};
    if (rt->t5_layout) {
        o.tp_rank = rt->me.tp;
        o.tp_size = rt->a.layout.mesh.tp;
        o.tp_layout = rt->t5_layout;
        o.comm = rt->comm;
    }
    weft_status_t st = prior;
    struct weft_tokens t = {0};
    if (st == WEFT_OK && !rt->tok_t5)
        st = weft_tokenizer_open(m->t5.tokenizer_dir, WEFT_TOKENIZER_T5, &rt->tok_t5, err);
    if (st == WEFT_OK && !rt->t5)
        st = weft_t5_load(m->t5.encoder_dir, &o, &rt->t5, err);
    if (st == WEFT_OK)
        st = weft_tokenizer_encode(rt->tok_t5, text, strlen(text), msl, "prompt", &t, err);
    if ((st = t5_agree(rt, st, "before T5's forward pass", err)) != WEFT_OK) {
        weft_tokens_cleanup(&t);
        return st;
    }
    if (t.truncated && replica_rank(rt, &rt->me) == t5_root(rt))
        warn_truncated("T5", &t, msl);
    st = t5_agree(rt, weft_t5_forward(rt->t5, t.ids, t.len, embeds, err), "T5's forward pass",
                  err);
    weft_tokens_cleanup(&t);
    if (rt->opts.staged) {
        weft_t5_destroy(rt->t5);
        rt->t5 = NULL;
    } else {
        weft_t5_release(rt->t5);
    }
    return st;
}

static weft_status_t embeds_alloc(const struct weft_model *m, int64_t tokens,
                                  struct weft_prompt_embeds *pe, struct weft_error *err)
{
    pe->embeds = weft_malloc((size_t)(tokens * m->flux.joint_attention_dim) * sizeof(float));
    pe->pooled = weft_malloc((size_t)m->flux.pooled_projection_dim * sizeof(float));
    pe->tokens = tokens;
    if (!pe->embeds || !pe->pooled) {
        weft_prompt_embeds_cleanup(pe);
        return weft_error_set(err, WEFT_ERR_NOMEM, "worker", "out of memory for a prompt's "
                              "embeddings");
    }
    return WEFT_OK;
}

/* The replica agrees on a prompt's outcome before its embeddings move: slot 0 carries the
 * CLIP rank's status, slot 1 the T5 rank's, slot 2 counts the ranks that could not hold the
 * result. Every rank joins, so a failure anywhere fails every rank instead of leaving some
 * waiting in a broadcast. */
static weft_status_t agree(struct weft_runtime *rt, weft_status_t clip, weft_status_t t5,
                           weft_status_t mine, struct weft_error *err)
{
    const int me = replica_rank(rt, &rt->me);
    float v[3] = {me == clip_root(rt) ? (float)clip : 0.0f, me == t5_root(rt) ? (float)t5 : 0.0f,
                  mine != WEFT_OK ? 1.0f : 0.0f};
    weft_status_t st = rt->comm->allreduce(rt->comm->replica, v, 3);
    if (st != WEFT_OK) /* the transport logged why */
        return weft_error_refuse(err, st, "agreeing on a prompt's embeddings over the replica: "
                                 "%s", weft_status_str(st));
    if (mine != WEFT_OK)
        return mine; /* err says why */
    static const char *const who[2] = {"CLIP (text_encoder)", "T5 (text_encoder_2)"};
    for (int k = 0; k < 2; k++) {
        const bool root = me == (k ? t5_root(rt) : clip_root(rt));
        const weft_status_t s = (weft_status_t)v[k];
        if (s != WEFT_OK)
            return root ? s : weft_error_peer(err, s, "the rank that runs %s could not encode "
                                                "the prompt: %s (its report says why)", who[k],
                                                weft_status_str(s));
    }
    if (v[2] > 0.0f)
        return weft_error_peer(err, WEFT_ERR_NOMEM, "%.0f rank(s) of the replica had no memory "
                                 "for a prompt's embeddings", v[2]);
    return WEFT_OK;
}

weft_status_t weft_runtime_encode(struct weft_runtime *rt, const char *text,
                                  int64_t max_sequence_length, struct weft_prompt_embeds *out,
                                  struct weft_error *err)
{
    if (!rt->model)
        return weft_error_set(err, WEFT_ERR_PROTOCOL, "worker",
                              "a prompt was given to encode to a worker with no assignment");
    char why[400];
    if (weft_model_text_missing(rt->model, why, sizeof(why)))
        return weft_error_refuse(err, WEFT_ERR_UNSUPPORTED, "%s", why);
    const int64_t msl = max_sequence_length;
    if (msl < 1 || msl > WEFT_MODEL_MAX_SEQUENCE_LENGTH)
        return weft_error_refuse(err, WEFT_ERR_RANGE, "max_sequence_length %lld: 1..%d allowed",
                                 (long long)msl, WEFT_MODEL_MAX_SEQUENCE_LENGTH);
    const struct weft_model *m = rt->model;
    const struct weft_par_comm *c = rt->comm;
    const int64_t joint = m->flux.joint_attention_dim, pooled = m->flux.pooled_projection_dim;
    const int me = replica_rank(rt, &rt->me), croot = clip_root(rt), troot = t5_root(rt);
    const struct weft_prompt_key key = {rt->a.model, (int)rt->a.compute, msl, text};
    struct weft_prompt_embeds pe = {0};
    /* T5's rank keeps the cache: a prompt it has is shared from there, nothing encoded */
    float hit =
        me == troot && weft_prompt_cache_get(rt->cache, &key, joint, pooled, &pe) ? 1.0f : 0.0f;
    weft_status_t st = WEFT_OK;
    if (c && (st = c->bcast(c->replica, &hit, 1, troot)) != WEFT_OK) {
        weft_prompt_embeds_cleanup(&pe);
        return weft_error_refuse(err, st, "sharing a prompt's embeddings over the replica: %s",
                                 weft_status_str(st));
    }
    weft_status_t st_clip = WEFT_OK, st_t5 = WEFT_OK;
    if (!(hit > 0.0f && me == troot))
        st = embeds_alloc(m, msl, &pe, err);
    if (hit == 0.0f) {
        if (st == WEFT_OK && me == croot)
            st_clip = clip_pooled(rt, text, pe.pooled, err);
        /* T5 runs when this rank could hold the result and CLIP (here) went well; with T5
         * tensor-parallel a failure still joins the group's agreement */
        const weft_status_t prior = st != WEFT_OK ? st : st_clip;
        if (t5_here(rt) && (prior == WEFT_OK || rt->t5_layout))
            st_t5 = t5_embeds(rt, prior, text, msl, pe.embeds, err);
        else
            st_t5 = prior;
    }
    if (c) {
        st = agree(rt, st_clip, st_t5, st, err);
        const int from[2] = {hit > 0.0f ? troot : croot, troot};
        if (st == WEFT_OK)
            st = c->bcast(c->replica, pe.pooled, (size_t)pooled, from[0]);
        if (st == WEFT_OK)
            st = c->bcast(c->replica, pe.embeds, (size_t)(msl * joint), from[1]);
        if (st != WEFT_OK && !err->status)
            weft_error_refuse(err, st, "sharing a prompt's embeddings over the replica: %s",
                              weft_status_str(st));
    } else {
        st = st != WEFT_OK ? st : st_clip != WEFT_OK ? st_clip : st_t5;
    }
    if (st != WEFT_OK) {
        weft_prompt_embeds_cleanup(&pe);
        return st;
    }
    if (hit == 0.0f && me == troot)
        weft_prompt_cache_put(rt->cache, &key, joint, pooled, &pe);
    *out = pe;
    return WEFT_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* One image                                                                                 */

struct step_ctx {
    struct weft_runtime *rt;
    weft_rt_step_cb on_step;
    weft_rt_cancel_cb cancelled;
    void *arg;
    double last;
    struct weft_error *err;
};

static bool all_finite(const float *x, int64_t n)
{
    float acc = 0.0f;
    for (int64_t i = 0; i < n; i++)
        acc += x[i] * 0.0f; /* NaN or +-Inf anywhere makes the sum NaN */
    return acc == 0.0f;
}

/* After every step: values checked, the step reported, then the replica agrees on stopping.
 * Only the decoding rank polls the coordinator's cancel flag; the sum over the replica puts
 * every rank at the same step. The last step agrees too: a cancel that comes before the image
 * is decoded stops it there (no image), on every rank at once. */
static weft_status_t step_end(void *varg, int step, int steps, const float *lat, int64_t n)
{
    struct step_ctx *sc = varg;
    struct weft_runtime *rt = sc->rt;
    if (!all_finite(lat, n))
        return weft_error_set(sc->err, WEFT_ERR_FORMAT, "worker",
                              "the transformer produced values that are not finite at step %d "
                              "of %d (NaN or infinite weights or inputs?)", step + 1, steps);
    double now = now_s();
    if (rt->a.decode && sc->on_step)
        sc->on_step(sc->arg, step + 1, steps, now - sc->last);
    sc->last = now;
    float stop = rt->a.decode && sc->cancelled && sc->cancelled(sc->arg) ? 1.0f : 0.0f;
    if (rt->comm) {
        weft_status_t st =
            weft_par_transport_host_allreduce(rt->pt, WEFT_MESH_REPLICA, &stop, 1);
        if (st != WEFT_OK) /* the transport logged why */
            return weft_error_refuse(sc->err, st, "the replica's agreement after step %d of %d: "
                                     "%s", step + 1, steps, weft_status_str(st));
    }
    return stop > 0.0f ? WEFT_ERR_CANCELLED : WEFT_OK;
}

static weft_status_t denoise(struct weft_runtime *rt, const struct weft_rt_image *img,
                             float *latents, struct step_ctx *sc, struct weft_error *err)
{
    const int64_t unit = rt->model->side_unit;
    const int64_t gh = img->height / unit, gw = img->width / unit;
    weft_status_t st =
        weft_sched_plan(&rt->model->sched, img->steps, gh * gw, &rt->sched, err);
    if (st != WEFT_OK)
        return st;
    if (!rt->flux && (st = load_transformer(rt, err)) != WEFT_OK)
        return st;
    struct weft_denoise_params p = {
        .grid_h = gh,
        .grid_w = gw,
        .prompt_embeds = img->prompt_embeds,
        .s_txt = img->s_txt,
        .pooled = img->pooled,
        .guidance = img->guidance,
        .neg_prompt_embeds = img->neg_prompt_embeds,
        .neg_pooled = img->neg_pooled,
        .true_cfg_scale = img->true_cfg_scale,
        .cfg_comm = rt->a.layout.mesh.cfg > 1 ? rt->comm : NULL,
        .cfg_half = rt->me.cfg,
        .schedule = &rt->sched,
        .on_step = step_end,
        .cb_arg = sc,
    };
    st = weft_denoise(rt->flux, &p, latents, err);
    if (rt->opts.staged) {
        weft_flux_destroy(rt->flux); /* weights and activations */
        rt->flux = NULL;
    }
    return st;
}

static weft_status_t encode_png(struct weft_runtime *rt, const struct weft_rt_image *img,
                                const uint8_t *rgb, struct weft_rt_result *out,
                                struct weft_error *err)
{
    const struct weft_png_meta meta = {
        .prompt = img->png_prompt,
        .model = img->png_model ? img->png_model : rt->a.model,
        .layout = rt->layout_name,
        .job = img->png_job,
        .has_seed = !img->latents_init,
        .seed = img->seed,
        .steps = img->steps,
        .guidance = img->guidance,
        .width = img->width,
        .height = img->height,
        .image = img->png_job ? img->noise_index : -1,
        .prompt_index = img->png_prompt_index,
        .negative_prompt = img->neg_prompt_embeds ? img->png_negative_prompt : NULL,
        .true_cfg_scale = img->true_cfg_scale,
    };
    struct weft_png_meta_store store;
    struct weft_png_text text[WEFT_PNG_META_MAX];
    size_t n = weft_png_meta_text(&meta, &store, text);
    return weft_png_encode(rgb, img->width, img->height, n, text, &out->png, &out->png_len,
                           err);
}

/* Latents to the PNG: the pipeline's unpack and unscale (FluxPipeline's or Flux2Pipeline's),
 * the VAE, clamp to 8 bits. */
static weft_status_t decode(struct weft_runtime *rt, const struct weft_rt_image *img,
                            const float *latents, struct weft_rt_result *out,
                            struct weft_error *err)
{
    const struct weft_vae_config *vc = &rt->model->vae;
    const int64_t lat_h = img->height / vc->scale, lat_w = img->width / vc->scale;
    const int64_t npx = img->height * img->width * vc->out_channels;
    const size_t lat_bytes = (size_t)(lat_h * lat_w * vc->latent_channels) * sizeof(float);
    float *unpacked = weft_big_alloc(lat_bytes);
    float *image = weft_big_alloc((size_t)npx * sizeof(float));
    uint8_t *rgb = weft_malloc((size_t)npx);
    weft_status_t st = unpacked && image && rgb
                           ? WEFT_OK
                           : weft_error_set(err, WEFT_ERR_NOMEM, "worker",
                                            "out of memory for a %lldx%lld decode",
                                            (long long)img->width, (long long)img->height);
    if (st == WEFT_OK && !rt->vae)
        st = load_vae(rt, err);
    if (st == WEFT_OK) {
        weft_vae_unpack(rt->vae, latents, lat_h, lat_w, unpacked);
        st = weft_vae_decode(rt->vae, unpacked, lat_h, lat_w, img->tiling, image, err);
    }
    if (st == WEFT_OK && !all_finite(image, npx))
        st = weft_error_set(err, WEFT_ERR_FORMAT, "worker",
                            "the VAE produced values that are not finite (NaN or infinite "
                            "weights?)");
    if (st == WEFT_OK) {
        weft_vae_to_rgb8(image, npx, rgb);
        double t0 = now_s();
        st = encode_png(rt, img, rgb, out, err);
        out->png_s = now_s() - t0;
    }
    weft_big_free(unpacked, lat_bytes);
    weft_big_free(image, (size_t)npx * sizeof(float));
    if (st == WEFT_OK && img->keep_rgb)
        out->rgb = rgb;
    else
        weft_free(rgb);
    if (rt->opts.staged) {
        weft_vae_destroy(rt->vae);
        rt->vae = NULL;
    } else if (rt->vae) {
        weft_vae_release(rt->vae); /* keep the weights, give the activations back */
    }
    return st;
}

static weft_status_t check_image(const struct weft_runtime *rt, const struct weft_rt_image *img,
                                 struct weft_error *err)
{
    if (!rt->model)
        return weft_error_set(err, WEFT_ERR_PROTOCOL, "worker",
                              "an image was asked of a worker with no assignment");
    const int64_t tokens = img->s_txt;
    const struct weft_job_desc job = {
        .height = img->height, .width = img->width, .steps = img->steps,
        .guidance = img->guidance, .seed = img->seed, .count = 1, .n_prompts = 1,
        .prompt_tokens = &tokens, .decode = img->decode && rt->a.decode,
        .true_cfg_scale = img->true_cfg_scale,
        .negative_tokens = img->neg_prompt_embeds ? &tokens : NULL,
    };
    weft_status_t st = weft_job_check(rt->model, &rt->a.layout, &job, NULL, err);
    if (st == WEFT_OK && (img->noise_index < 0 || img->noise_index >= WEFT_JOB_MAX_IMAGES))
        st = weft_error_refuse(err, WEFT_ERR_RANGE, "image index %lld out of bounds",
                               (long long)img->noise_index);
    if (st != WEFT_OK)
        weft_error_log(err, "worker");
    return st;
}

weft_status_t weft_runtime_image(struct weft_runtime *rt, const struct weft_rt_image *img,
                                 weft_rt_step_cb on_step, weft_rt_cancel_cb cancelled, void *arg,
                                 struct weft_rt_result *out, struct weft_error *err)
{
    memset(out, 0, sizeof(*out));
    weft_status_t st = check_image(rt, img, err);
    if (st != WEFT_OK)
        return st;
    const int64_t n = weft_job_latent_elems(rt->model, img->height, img->width);
    float *latents = weft_big_alloc((size_t)n * sizeof(float));
    if (!latents)
        return weft_error_set(err, WEFT_ERR_NOMEM, "worker", "out of memory for the latents");
    if (img->latents_init)
        memcpy(latents, img->latents_init, (size_t)n * sizeof(float));
    else
        weft_noise_normal(img->seed, img->noise_index * n, n, latents);
    struct step_ctx sc = {rt, on_step, cancelled, arg, now_s(), err};
    double t0 = now_s();
    st = denoise(rt, img, latents, &sc, err);
    out->denoise_s = now_s() - t0;
    if (st == WEFT_OK && img->decode && rt->a.decode) {
        t0 = now_s();
        st = decode(rt, img, latents, out, err);
        out->decode_s = now_s() - t0 - out->png_s;
    }
    if (st == WEFT_OK && img->keep_latents) {
        out->latents = weft_malloc((size_t)n * sizeof(float));
        if (!out->latents)
            st = weft_error_set(err, WEFT_ERR_NOMEM, "worker", "out of memory for the latents");
        else
            memcpy(out->latents, latents, (size_t)n * sizeof(float));
        out->tokens = weft_job_image_tokens(rt->model, img->height, img->width);
        out->channels = rt->model->flux.in_channels;
    }
    weft_big_free(latents, (size_t)n * sizeof(float));
    if (st != WEFT_OK)
        weft_rt_result_cleanup(out);
    return st;
}

void weft_rt_result_cleanup(struct weft_rt_result *res)
{
    free(res->png);
    weft_free(res->latents);
    weft_free(res->rgb);
    res->png = NULL;
    res->latents = NULL;
    res->rgb = NULL;
}
