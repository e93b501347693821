/* Choosing the strategy (see autoplan.h). */
#include "model/autoplan.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "model/checkpoint.h"
#include "model/cp.h"
#include "model/model.h"
#include "model/plan.h"
#include "model/text_encoder.h"


int weft_link_parse(const char *s)
{
    static const char *const names[] = {"none", "pcie", "nvlink"};
    for (int i = 0; i < 3; i++)
        if (strcmp(s, names[i]) == 0)
            return i;
    return -1;
}

const char *weft_link_name(enum weft_interconnect link)
{
    return link == WEFT_LINK_NVLINK ? "NVLink" : link == WEFT_LINK_PCIE ? "PCIe" : "no link";
}

/* Nominal figures of a link kind (autoplan.h): bytes per second, seconds a call. */
static double link_bps(enum weft_interconnect link)
{
    return link == WEFT_LINK_NVLINK ? 300e9 : link == WEFT_LINK_PCIE ? 24e9 : 10e9;
}

static double link_latency(enum weft_interconnect link)
{
    return link == WEFT_LINK_NVLINK ? 10e-6 : link == WEFT_LINK_PCIE ? 20e-6 : 30e-6;
}

static const char *gb(uint64_t b, char *buf, size_t len)
{
    if (b >= 1000000000ull)
        snprintf(buf, len, "%.1f GB", (double)b / 1e9);
    else
        snprintf(buf, len, "%.1f MB", (double)b / 1e6);
    return buf;
}

static void reason(struct weft_autoplan *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void reason(struct weft_autoplan *p, const char *fmt, ...)
{
    if (p->n_reasons >= WEFT_AUTOPLAN_REASONS)
        return;
    va_list ap;
    va_start(ap, fmt);
    /* NOLINTNEXTLINE(clang-analyzer-valist.Uninitialized): a false positive on glibc */
    vsnprintf(p->reasons[p->n_reasons++], sizeof(p->reasons[0]), fmt, ap);
    va_end(ap);
}

/* ---------------------------------------------------------------------------------------- */
/* The model                                                                                 */

weft_status_t weft_autoplan_model_open(const struct weft_model *model,
                                       struct weft_autoplan_model *out, struct weft_error *err)
{
    memset(out, 0, sizeof(*out));
    out->flux = model->flux;
    out->has_vae = model->has_vae;
    out->vae = model->vae;
    out->side_unit = model->side_unit;
    out->transformer_bytes = model->transformer_held_bytes;
    out->vae_bytes = model->has_vae ? model->vae_held_bytes : 0;
    char why[8];
    const bool text = !weft_model_text_missing(model, why, sizeof(why));
    out->clip_bytes = text ? model->clip.held_bytes : 0;
    out->t5_bytes = text ? model->t5.held_bytes : 0;
    struct weft_ckpt *ck, *vck = NULL, *tck = NULL;
    weft_status_t st = weft_ckpt_open(model->transformer_dir, &ck, err);
    if (st != WEFT_OK)
        return st;
    struct weft_tp_plan plan;
    const bool has_plan = weft_tp_plan_builtin(model->info.class_name, &plan);
    for (int t = 1; t <= WEFT_AUTOPLAN_TP_MAX; t++) {
        struct weft_tp_layout *lay = NULL;
        struct weft_error quiet = WEFT_ERROR_INIT; /* a degree that does not resolve is no
                                                    * candidate, not an error */
        if (t == 1) {
            out->tp_bytes[1] = out->transformer_bytes;
            continue;
        }
        if (model->info.heads > 0 && model->info.heads % t) /* no degree: nothing to resolve */
            continue;
        if (!has_plan || weft_tp_resolve(&plan, ck, &model->info, t, t, &lay, &quiet) != WEFT_OK)
            continue;
        out->tp_bytes[t] = lay->replicated_bytes + lay->planned_bytes / (uint64_t)t;
        out->tp_allreduces[t] = lay->allreduce_per_pass;
        weft_tp_layout_destroy(lay);
    }
    if (text && (st = weft_ckpt_open(model->t5.encoder_dir, &tck, err)) == WEFT_OK) {
        for (int t = 2; t <= WEFT_AUTOPLAN_TP_MAX; t++)
            if (weft_t5_tp_fits(&model->t5_cfg, t))
                out->t5_tp_bytes[t] = weft_t5_held_bytes_tp(&model->t5_cfg, tck, t);
    }
    if (st == WEFT_OK && model->has_vae)
        st = weft_ckpt_open(model->vae_dir, &vck, err);
    const uint64_t text_bytes[2] = {out->clip_bytes, out->t5_bytes};
    if (st == WEFT_OK)
        st = weft_devmap_flux_pipeline(&model->flux, ck, model->has_vae ? &model->vae : NULL,
                                       vck, text_bytes, &out->units, out->comps, &out->n_comps,
                                       err);
    weft_ckpt_close(ck);
    weft_ckpt_close(vck);
    weft_ckpt_close(tck);
    return st;
}

void weft_autoplan_model_cleanup(struct weft_autoplan_model *m)
{
    weft_free(m->units);
    m->units = NULL;
}

/* ---------------------------------------------------------------------------------------- */
/* Memory and messages of one layout                                                         */

static int64_t image_tokens(const struct weft_autoplan_model *m,
                            const struct weft_autoplan_job *job)
{
    return (job->height / m->side_unit) * (job->width / m->side_unit);
}

/* The VAE decoder's activations for the job's image (its convolution workspace, which depends
 * on the backend, not counted). */
static uint64_t vae_act_bytes(const struct weft_autoplan_model *m,
                              const struct weft_autoplan_job *job)
{
    if (!m->has_vae)
        return 0;
    const int64_t scale = m->side_unit / 2;
    int64_t lat, buf;
    weft_vae_decode_plan(&m->vae, job->height / scale, job->width / scale, NULL, NULL, &lat,
                         &buf);
    return (uint64_t)(lat + 3 * buf) * sizeof(float);
}

struct weft_autoplan_memory weft_autoplan_memory_of(const struct weft_autoplan_model *m,
                                                    const struct weft_autoplan_job *job, int ring,
                                                    int ulysses, int tp)
{
    struct weft_autoplan_memory mem = {0};
    const int cp = ring * ulysses;
    const int64_t s_img = image_tokens(m, job), s_txt = job->text_tokens;
    int64_t b, ni, nt;
    weft_cp_chunk(s_img, cp, 0, &b, &ni);
    weft_cp_chunk(s_txt, cp, 0, &b, &nt);
    /* the replica's first rank: its transformer share, the text encoders (T5 sliced over the
     * tp group when its heads allow), the VAE */
    const uint64_t t5 = tp > 1 && m->t5_tp_bytes[tp] ? m->t5_tp_bytes[tp] : m->t5_bytes;
    mem.weights = m->tp_bytes[tp] + m->clip_bytes + t5 + m->vae_bytes;
    mem.activations = weft_flux_act_sizes(&m->flux, tp, cp > 1, 1, ni, nt, s_img, NULL) +
                      vae_act_bytes(m, job);
    if (cp > 1) {
        int64_t *rows = weft_calloc((size_t)cp, sizeof(*rows));
        if (rows) {
            for (int c = 0; c < cp; c++) {
                int64_t ci, ct;
                weft_cp_chunk(s_img, cp, c, &b, &ci);
                weft_cp_chunk(s_txt, cp, c, &b, &ct);
                rows[c] = ci + ct;
            }
            const struct weft_cp_layout l = {ring, ulysses, true, WEFT_RING_ALLGATHER};
            mem.workspace = weft_cp_attn_sizes(&l, 0, 0, m->flux.num_attention_heads / tp,
                                               m->flux.attention_head_dim, rows, NULL);
            weft_free(rows);
        }
    }
    return mem;
}

static uint64_t total(const struct weft_autoplan_memory *m)
{
    return m->weights + m->activations + m->workspace;
}

/* What the first rank sends in one step. */
static void messages(const struct weft_autoplan_model *m, const struct weft_autoplan_job *job,
                     struct weft_autoplan *p)
{
    const struct weft_flux_config *f = &m->flux;
    /* true CFG: two passes a step, one on each half with CFG parallelism */
    const int cp = p->ring * p->ulysses, passes = job->cfg && p->cfg < 2 ? 2 : 1;
    const int64_t s_img = image_tokens(m, job), layers = f->num_layers + f->num_single_layers;
    int64_t b, ni, nt;
    weft_cp_chunk(s_img, cp, 0, &b, &ni);
    weft_cp_chunk(job->text_tokens, cp, 0, &b, &nt);
    const double S = (double)(ni + nt), D = (double)f->inner_dim, Dl = D / p->tp;
    if (p->tp > 1) {
        /* a ring all-reduce sends 2 (t - 1) / t of the buffer */
        p->tp_allreduces = passes * m->tp_allreduces[p->tp];
        p->tp_bytes = p->tp_allreduces * 2.0 * (p->tp - 1) / p->tp * S * D * 4;
    }
    if (p->ulysses > 1) { /* q, k, v there (one call) and the output back (another): (u - 1)
                           * / u of each moves */
        p->ulysses_calls = passes * (int)layers * 2;
        p->ulysses_bytes =
            passes * (double)layers * 4.0 * (p->ulysses - 1) / p->ulysses * S * Dl * 4;
    }
    if (p->ring > 1) { /* every other ring rank's K and V (two all-gathers) */
        p->ring_calls = passes * (int)layers * 2;
        p->ring_bytes = passes * (double)layers * (p->ring - 1) * 2.0 * S * p->ulysses *
                        (Dl / p->ulysses) * 4;
    }
    if (p->device_map) { /* the hidden states and time embedding at a stage boundary, and the
                          * output from the last stage to the others */
        p->stage_calls = passes * p->pp;
        p->stage_bytes = passes * ((S * D + D) * 4 +
                                   (double)s_img * (double)f->out_channels * 4 * (p->pp - 1));
    }
    if (job->cfg && p->cfg > 1) { /* this half's prediction to the other (one all-gather) */
        p->cfg_calls = 1;
        p->cfg_bytes = (double)s_img * (double)f->out_channels * 4;
    }
}

/* calls collectives moving bytes in a group of span consecutive devices (the mesh's inner
 * degrees first: tp, then ulysses, then ring): over the network once it leaves a host. */
static double coll_time(const struct weft_autoplan_devices *dev, int span, int calls,
                        double bytes)
{
    if (!calls)
        return 0;
    double bps = WEFT_AUTOPLAN_NET_BPS, lat = WEFT_AUTOPLAN_NET_LATENCY;
    if (span <= dev->n / dev->nodes) {
        bps = dev->link_bps > 0 ? dev->link_bps : link_bps(dev->link);
        lat = dev->link_latency > 0 ? dev->link_latency : link_latency(dev->link);
    }
    return calls * lat + bytes / bps;
}

double weft_autoplan_step_flops(const struct weft_autoplan_model *m,
                                const struct weft_autoplan_job *job)
{
    if (m->side_unit < 1)
        return 0;
    return (job->cfg ? 2.0 : 1.0) *
           weft_flux_flops(&m->flux, image_tokens(m, job), job->text_tokens);
}

/* The step time of p (its messages counted), autoplan.h's weft_autoplan_time. */
static void predict_time(const struct weft_autoplan_model *m,
                         const struct weft_autoplan_devices *dev,
                         const struct weft_autoplan_job *job, struct weft_autoplan *p)
{
    struct weft_autoplan_time *t = &p->time;
    memset(t, 0, sizeof(*t));
    if (!(dev->flops > 0))
        return;
    const int cp = p->ring * p->ulysses;
    const int64_t s_img = image_tokens(m, job), s_txt = job->text_tokens;
    int64_t b, ni, nt;
    weft_cp_chunk(s_img, cp, 0, &b, &ni);
    weft_cp_chunk(s_txt, cp, 0, &b, &nt);
    /* a rank's queries are its chunk's, its Linear rows too; tp splits both again. Stages of a
     * device_map run one after another: the replica's step is the whole pass. */
    const double share =
        p->device_map ? 1.0 : (double)(ni + nt) / (double)(s_img + s_txt) / p->tp;
    /* CFG parallelism runs one half on each of its replica's halves */
    t->compute = weft_autoplan_step_flops(m, job) / (job->cfg && p->cfg >= 2 ? 2.0 : 1.0) *
                 share / dev->flops;
    t->tp = coll_time(dev, p->tp, p->tp_allreduces, p->tp_bytes);
    t->ulysses = coll_time(dev, p->tp * p->ulysses, p->ulysses_calls, p->ulysses_bytes);
    t->ring = coll_time(dev, p->tp * cp, p->ring_calls, p->ring_bytes);
    t->stage = coll_time(dev, p->pp, p->stage_calls, p->stage_bytes);
    /* the halves are the mesh's next degree out: peers tp x cp apart */
    t->cfg = coll_time(dev, 2 * p->tp * cp, p->cfg_calls, p->cfg_bytes);
    t->total = t->compute + t->tp + t->ulysses + t->ring + t->stage + t->cfg;
}

/* ---------------------------------------------------------------------------------------- */
/* Choosing                                                                                  */

/* The anything flags of p's ring x ulysses over k ranks: set where the image and text tokens do
 * not split evenly over k; returns whether they do. */
static bool set_anything(const struct weft_autoplan_model *m, const struct weft_autoplan_job *job,
                         int k, struct weft_autoplan *p)
{
    const int64_t s_img = image_tokens(m, job);
    const bool even = s_img % k == 0 && job->text_tokens % k == 0;
    p->ulysses_anything = !even && p->ulysses > 1;
    p->ring_anything = !even && p->ring > 1;
    return even;
}

/* k context-parallel ranks: Ulysses over the largest divisor of the heads that fits one node
 * and divides k, ring over the rest (across nodes); the anything flags where the lengths do
 * not split evenly. */
static void choose_cp(const struct weft_autoplan_model *m, const struct weft_autoplan_job *job,
                      int k, int tp, int per_node, struct weft_autoplan *p)
{
    const int64_t heads = m->flux.num_attention_heads / tp, s_img = image_tokens(m, job);
    int u = 1;
    for (int d = 1; d <= k && d <= per_node; d++)
        if (k % d == 0 && heads % d == 0)
            u = d;
    p->ulysses = u, p->ring = k / u;
    const bool even = set_anything(m, job, k, p);
    if (u < k && u < per_node && k <= per_node)
        reason(p, "%lld heads%s do not divide by %d: Ulysses %d, ring %d (ring splits the "
               "sequence, not the heads)", (long long)heads, tp > 1 ? " per tp rank" : "", k, u,
               p->ring);
    else if (p->ring > 1 && u > 1)
        reason(p, "Ulysses %d inside a node, ring %d across nodes", u, p->ring);
    else if (p->ring > 1)
        reason(p, "ring %d across nodes (the tp group fills each node)", p->ring);
    if (!even)
        reason(p, "the %lld image and %lld text tokens do not split evenly over %d ranks: "
               "%s_anything", (long long)s_img, (long long)job->text_tokens, k,
               u > 1 && p->ring > 1 ? "ulysses_anything and ring" : u > 1 ? "ulysses" : "ring");
}

/* Latency with spare devices and a known device rate: the context-parallel degree (1 to
 * spare) whose predicted step is the shortest, the fewest devices on a tie; returns it. */
static int choose_cp_timed(const struct weft_autoplan_model *m,
                           const struct weft_autoplan_devices *dev,
                           const struct weft_autoplan_job *job, int spare, int per_node,
                           struct weft_autoplan *p)
{
    struct weft_autoplan best = *p, q;
    messages(m, job, &best);
    predict_time(m, dev, job, &best);
    const double alone = best.time.total;
    int best_k = 1;
    for (int k = 2; k <= spare; k++) {
        q = *p;
        choose_cp(m, job, k, p->tp, per_node / p->tp ? per_node / p->tp : 1, &q);
        const struct weft_autoplan_memory mq =
            weft_autoplan_memory_of(m, job, q.ring, q.ulysses, q.tp);
        if (total(&mq) > dev->memory)
            continue;
        messages(m, job, &q);
        predict_time(m, dev, job, &q);
        if (q.time.total < best.time.total) {
            best = q;
            best_k = k;
        }
    }
    *p = best;
    if (best_k > 1)
        reason(p, "latency: %d prompt(s) leave %d device(s) per replica spare; at the "
               "device's rate context parallelism over %d ranks is the fastest predicted "
               "(%.2f ms a step, %.2f ms unsplit)", (int)job->prompts, spare, best_k,
               best.time.total * 1e3, alone * 1e3);
    else
        reason(p, "latency: %d device(s) per replica spare, but at the device's rate no "
               "context-parallel degree beats the unsplit step (%.2f ms predicted): its "
               "messages outweigh the compute it saves", spare, alone * 1e3);
    return best_k;
}

/* Tensor-parallel degrees the plan resolves at, up to limit. */
static bool tp_ok(const struct weft_autoplan_model *m, int t, int limit)
{
    return t <= limit && t <= WEFT_AUTOPLAN_TP_MAX && m->tp_bytes[t] &&
           m->flux.num_attention_heads % t == 0;
}

/* What device d of a device_map holds: its units' weights, the transformer's activations where
 * it runs blocks of it, the VAE decoder's where it decodes (a worker reserves only what its
 * stage runs). */
static struct weft_autoplan_memory devmap_held(const struct weft_devmap *map, int d, uint64_t act,
                                               uint64_t vact)
{
    struct weft_autoplan_memory held = {map->used[d], 0, 0};
    const int t = weft_devmap_find(map, "transformer");
    int first, last;
    if (t >= 0 && weft_devmap_range(map, t, d, &first, &last))
        held.activations += act;
    if (weft_devmap_decode_device(map) == d)
        held.activations += vact;
    return held;
}

/* device_map over pp devices: every device keeps room for the transformer's activations and the
 * VAE's (the placement comes before what it implies: whatever it is given then fits); the
 * peak is the fullest device's own weights and activations (devmap_held). */
static bool try_devmap(const struct weft_autoplan_model *m, const struct weft_autoplan_job *job,
                       const struct weft_autoplan_devices *dev, int pp, struct weft_autoplan *p)
{
    const uint64_t act = weft_flux_act_sizes(&m->flux, 1, false, 1, image_tokens(m, job),
                                             job->text_tokens, image_tokens(m, job), NULL);
    const uint64_t vact = vae_act_bytes(m, job);
    if (act + vact >= dev->memory)
        return false;
    uint64_t room[WEFT_DEVMAP_MAX_DEVICES];
    for (int d = 0; d < pp; d++)
        room[d] = dev->memory - act - vact;
    struct weft_max_memory mm = {0};
    if (dev->host_memory) {
        mm.has_cpu = true;
        mm.cpu = dev->host_memory;
    }
    struct weft_devmap map;
    struct weft_error quiet = WEFT_ERROR_INIT;
    if (weft_devmap_plan(WEFT_DEVMAP_BALANCED, m->comps, m->n_comps, pp, room, &mm, &map,
                         &quiet) != WEFT_OK)
        return false;
    p->map = map;
    p->device_map = true;
    p->pp = pp;
    p->ring = p->ulysses = p->tp = 1;
    uint64_t best = 0;
    for (int d = 0; d < pp; d++) {
        const struct weft_autoplan_memory held = devmap_held(&map, d, act, vact);
        if (total(&held) > best) {
            best = total(&held);
            p->peak = held;
            p->peak_device = d;
        }
    }
    return true;
}

static weft_status_t check_inputs(const struct weft_autoplan_model *m,
                                  const struct weft_autoplan_devices *dev,
                                  const struct weft_autoplan_job *job, struct weft_error *err)
{
    if (dev->n < 1 || dev->n > WEFT_DEVMAP_MAX_DEVICES * 16 || dev->nodes < 1 ||
        dev->n % dev->nodes || !dev->memory)
        return weft_error_refuse(err, WEFT_ERR_INVALID, "plan --auto: %d devices over %d "
                                 "node(s) with %llu bytes each: need 1..1024 devices spread "
                                 "evenly over the nodes and a device memory", dev->n,
                                 dev->nodes, (unsigned long long)dev->memory);
    if (m->side_unit < 1 || job->height < m->side_unit || job->width < m->side_unit ||
        job->height % m->side_unit || job->width % m->side_unit || job->height > 16384 ||
        job->width > 16384)
        return weft_error_refuse(err, WEFT_ERR_INVALID, "plan --auto: %lldx%lld: sides must "
                                 "be multiples of %lld up to 16384", (long long)job->height,
                                 (long long)job->width, (long long)m->side_unit);
    if (job->prompts < 1 || job->steps < 1 || job->text_tokens < 1 ||
        job->text_tokens > WEFT_MODEL_MAX_TEXT_TOKENS)
        return weft_error_refuse(err, WEFT_ERR_INVALID, "plan --auto: prompts and steps at "
                                 "least 1, text tokens 1..%d", WEFT_MODEL_MAX_TEXT_TOKENS);
    return WEFT_OK;
}

/* The replica when the pipeline does not fit one device. */
static weft_status_t choose_split(const struct weft_autoplan_model *m,
                                  const struct weft_autoplan_devices *dev,
                                  const struct weft_autoplan_job *job, struct weft_autoplan *p,
                                  struct weft_error *err)
{
    const int n = dev->n, per_node = dev->n / dev->nodes;
    const uint64_t M = dev->memory;
    char a[32], b[32], c[32];
    const struct weft_autoplan_memory one = weft_autoplan_memory_of(m, job, 1, 1, 1);
    if (one.weights < M) {
        /* the weights fit: the activations are the problem */
        reason(p, "the weights fit one device (%s of %s) but not with the activations of %lld "
               "image tokens (%s): context parallelism, the smallest degree that fits",
               gb(one.weights, a, sizeof(a)), gb(M, b, sizeof(b)),
               (long long)image_tokens(m, job),
               gb(one.activations + one.workspace, c, sizeof(c)));
        for (int k = 2; k <= n; k++) {
            struct weft_autoplan q = *p;
            choose_cp(m, job, k, 1, per_node, &q);
            if (total((struct weft_autoplan_memory[]){
                    weft_autoplan_memory_of(m, job, q.ring, q.ulysses, 1)}) <= M) {
                *p = q;
                return WEFT_OK;
            }
        }
        reason(p, "no context-parallel degree up to %d devices fits them alone: the weights "
               "must shrink too", n);
    }
    uint64_t largest = 0;
    const char *which = "";
    const struct {
        const char *name;
        uint64_t bytes;
    } parts[4] = {{"the transformer", m->transformer_bytes}, {"T5", m->t5_bytes},
                  {"CLIP", m->clip_bytes}, {"the VAE", m->vae_bytes}};
    for (int i = 0; i < 4; i++)
        if (parts[i].bytes > largest)
            largest = parts[i].bytes, which = parts[i].name;
    const bool one_too_big = largest + one.activations >= M;
    if (one_too_big && dev->link == WEFT_LINK_NVLINK) {
        reason(p, "%s's weights (%s) do not fit a %s device with its activations: NVLink, so "
               "tensor parallelism (weight memory and latency both shrink) before device_map",
               which, gb(largest, a, sizeof(a)), gb(M, b, sizeof(b)));
        for (int t = 2; t <= per_node; t++) { /* tensor parallelism alone */
            if (!tp_ok(m, t, per_node))
                continue;
            const struct weft_autoplan_memory mt = weft_autoplan_memory_of(m, job, 1, 1, t);
            if (total(&mt) > M)
                continue;
            p->tp = t;
            reason(p, "tp %d: the smallest degree that fits (%s per device)", t,
                   gb(total(&mt), a, sizeof(a)));
            if (m->flux.num_attention_heads % per_node)
                reason(p, "tensor-parallel degrees divide the %lld heads: %d devices per node "
                       "cannot all join one tp group", (long long)m->flux.num_attention_heads,
                       per_node);
            return WEFT_OK;
        }
        for (int t = 2; t <= per_node; t++) { /* the weights fit at t, not the activations */
            if (!tp_ok(m, t, per_node))
                continue;
            const struct weft_autoplan_memory mt = weft_autoplan_memory_of(m, job, 1, 1, t);
            if (mt.weights >= M)
                continue;
            for (int k = 2; k * t <= n; k++) {
                struct weft_autoplan q = *p;
                q.tp = t;
                choose_cp(m, job, k, t, per_node / t ? per_node / t : 1, &q);
                const struct weft_autoplan_memory mq =
                    weft_autoplan_memory_of(m, job, q.ring, q.ulysses, t);
                if (total(&mq) <= M) {
                    reason(&q, "weights and activations both too large: tp %d for the weights "
                           "(%s per rank), context parallelism %d for the activations", t,
                           gb(mt.weights, a, sizeof(a)), k);
                    *p = q;
                    return WEFT_OK;
                }
            }
        }
        reason(p, "no tensor-parallel degree up to %d (within a node) fits: device_map",
               per_node);
    } else if (one_too_big) {
        /* what tp 2 would send: the same count as a chosen layout's */
        struct weft_autoplan at2 = {.dp = 1, .cfg = 1, .ring = 1, .ulysses = 1, .pp = 1,
                                    .tp = tp_ok(m, 2, n) ? 2 : 1};
        messages(m, job, &at2);
        const int t = at2.tp > 1;
        const double bytes = at2.tp_bytes;
        reason(p, "%s's weights (%s) do not fit a %s device with its activations; over %s "
               "tensor parallelism's %d all-reduces per pass (%s a step at tp 2, %.0f ms at "
               "%.0f GB/s) can outweigh the compute it saves: device_map",
               which, gb(largest, a, sizeof(a)), gb(M, b, sizeof(b)),
               weft_link_name(dev->link), t ? m->tp_allreduces[2] : 0,
               gb((uint64_t)bytes, c, sizeof(c)), bytes / link_bps(dev->link) * 1e3,
               link_bps(dev->link) / 1e9);
    } else {
        reason(p, "every component fits a device alone (the largest, %s, %s) but not all "
               "together (%s with the activations, devices of %s): device_map",
               which, gb(largest, a, sizeof(a)), gb(total(&one), b, sizeof(b)),
               gb(M, c, sizeof(c)));
    }
    for (int pp = 2; pp <= n && pp <= WEFT_DEVMAP_MAX_DEVICES; pp++)
        if (try_devmap(m, job, dev, pp, p)) {
            reason(p, "device_map balanced over %d devices per replica (the fewest that hold "
                   "it, each keeping room for the activations)", pp);
            return WEFT_OK;
        }
    return weft_error_refuse(err, WEFT_ERR_INVALID, "no layout of %d devices of %s holds "
                             "the pipeline (%s of weights, %s of activations at %lldx%lld)%s",
                             n, gb(M, a, sizeof(a)), gb(one.weights, b, sizeof(b)),
                             gb(one.activations + one.workspace, c, sizeof(c)),
                             (long long)job->height, (long long)job->width,
                             dev->link == WEFT_LINK_NVLINK ? "" : " (tensor parallelism "
                             "not tried: it needs NVLink)");
}

weft_status_t weft_autoplan(const struct weft_autoplan_model *m,
                            const struct weft_autoplan_devices *dev,
                            const struct weft_autoplan_job *job, struct weft_autoplan *p,
                            struct weft_error *err)
{
    memset(p, 0, sizeof(*p));
    p->dp = p->cfg = p->ring = p->ulysses = p->tp = p->pp = 1;
    weft_status_t st = check_inputs(m, dev, job, err);
    if (st != WEFT_OK)
        return st;
    const int n = dev->n, per_node = dev->n / dev->nodes;
    const uint64_t M = dev->memory;
    const int64_t s_img = image_tokens(m, job);
    char a[32], b[32], c[32];
    const struct weft_autoplan_memory one = weft_autoplan_memory_of(m, job, 1, 1, 1);
    if (total(&one) <= M) {
        reason(p, "the pipeline fits one device: %s of %s (weights %s, activations %s)",
               gb(total(&one), a, sizeof(a)), gb(M, b, sizeof(b)), gb(one.weights, c, sizeof(c)),
               gb(one.activations, (char[32]){0}, 32));
        if (job->goal == WEFT_GOAL_THROUGHPUT || job->prompts >= n)
            reason(p, "%s: data parallelism, one replica per device (the only strategy that "
                   "scales throughput linearly and leaves one prompt's latency alone)",
                   job->goal == WEFT_GOAL_THROUGHPUT ? "throughput" : "as many prompts as "
                   "devices");
    } else if ((st = choose_split(m, dev, job, p, err)) != WEFT_OK) {
        return st;
    }
    /* latency: devices the prompts leave spare split each prompt's sequence */
    int per = p->device_map ? p->pp : p->ring * p->ulysses * p->tp;
    if (job->goal == WEFT_GOAL_LATENCY && !p->device_map && p->ring * p->ulysses == 1) {
        int64_t spare = n / per / (job->prompts < n ? job->prompts : n);
        if (job->cfg && spare >= 2) {
            p->cfg = 2;
            per *= 2;
            spare /= 2;
            reason(p, "latency, true CFG: CFG parallelism, the prompt's and the negative "
                   "prompt's passes at once on two halves of the replica, %d device(s) each "
                   "(one exchange of the predictions a step, %.2f MB), before splitting the "
                   "sequence", per / 2,
                   (double)s_img * (double)m->flux.out_channels * 4 / 1e6);
        }
        const int64_t by_tokens = s_img / WEFT_AUTOPLAN_MIN_TOKENS_PER_RANK;
        const int k = (int)(spare < by_tokens ? spare : by_tokens);
        if (dev->flops > 0 && spare >= 2) {
            per *= choose_cp_timed(m, dev, job, (int)spare, per_node, p);
        } else if (k >= 2) {
            reason(p, "latency: %lld prompt(s) leave %lld device(s) per replica spare; the "
                   "image's %lld tokens split over %d ranks: context parallelism",
                   (long long)job->prompts, (long long)spare, (long long)s_img, k);
            choose_cp(m, job, k, p->tp, per_node / p->tp ? per_node / p->tp : 1, p);
            per *= k;
        } else if (spare >= 2) {
            reason(p, "latency: the image's %lld tokens are too few to split (context "
                   "parallelism pays from about %d tokens per rank)", (long long)s_img,
                   WEFT_AUTOPLAN_MIN_TOKENS_PER_RANK);
        }
    }

    p->dp = n / per;
    if (job->goal == WEFT_GOAL_LATENCY && p->dp > job->prompts)
        p->dp = (int)job->prompts;
    p->idle = n - p->dp * per;
    if (p->dp > 1)
        reason(p, "%d replicas of %d device(s): the prompts split between them", p->dp, per);
    if (p->idle)
        reason(p, "%d device(s) left idle (%s)", p->idle,
               n / per > p->dp ? "more replicas than prompts"
                               : "the degrees must divide what they split");
    if (job->cfg && p->cfg < 2)
        reason(p, "CFG: two transformer passes a step on each replica (%s)",
               job->goal == WEFT_GOAL_THROUGHPUT ? "throughput: the devices make replicas"
               : p->device_map ? "CFG parallelism does not combine with device_map"
                               : "no spare devices for CFG parallelism");
    if (!p->device_map) {
        p->peak = weft_autoplan_memory_of(m, job, p->ring, p->ulysses, p->tp);
        p->peak_device = 0;
    }
    messages(m, job, p);
    predict_time(m, dev, job, p);
    return WEFT_OK;
}

static bool faster(const struct weft_autoplan_candidate *a,
                   const struct weft_autoplan_candidate *b)
{
    if (a->time.total != b->time.total)
        return a->time.total < b->time.total;
    return total(&a->peak) < total(&b->peak);
}

/* q (degrees and peak set) into the ranking out[*n], kept sorted and at most max long. */
static void rank_add(const struct weft_autoplan_model *m,
                     const struct weft_autoplan_devices *dev,
                     const struct weft_autoplan_job *job, struct weft_autoplan *q,
                     struct weft_autoplan_candidate *out, int *n, int max)
{
    messages(m, job, q);
    predict_time(m, dev, job, q);
    const struct weft_autoplan_candidate c = {
        .cfg = q->cfg, .ring = q->ring, .ulysses = q->ulysses, .tp = q->tp, .pp = q->pp,
        .device_map = q->device_map, .anything = q->ulysses_anything || q->ring_anything,
        .peak = q->peak, .time = q->time,
        .bytes = q->tp_bytes + q->ulysses_bytes + q->ring_bytes + q->stage_bytes + q->cfg_bytes};
    int at = *n;
    while (at > 0 && faster(&c, &out[at - 1])) {
        if (at < max)
            out[at] = out[at - 1];
        at--;
    }
    if (at < max)
        out[at] = c;
    *n += *n < max;
}

int weft_autoplan_rank(const struct weft_autoplan_model *m,
                       const struct weft_autoplan_devices *dev,
                       const struct weft_autoplan_job *job, int k,
                       struct weft_autoplan_candidate *out, int max)
{
    struct weft_error quiet = WEFT_ERROR_INIT;
    if (k < 1 || k > dev->n || check_inputs(m, dev, job, &quiet) != WEFT_OK)
        return 0;
    const int per_node = dev->n / dev->nodes;
    int n = 0;
    for (int h = 1; h <= (job->cfg && k % 2 == 0 ? 2 : 1); h++) { /* CFG-parallel halves */
        const int kh = k / h;
        for (int tp = 1; tp <= kh; tp++) {
            if (kh % tp || (tp > 1 && !tp_ok(m, tp, per_node)))
                continue;
            const int64_t heads = m->flux.num_attention_heads / tp;
            for (int u = 1; u <= kh / tp; u++) {
                if ((kh / tp) % u || heads % u || (u > 1 && tp * u > per_node))
                    continue;
                struct weft_autoplan q = {.dp = 1, .cfg = h, .ring = kh / tp / u, .ulysses = u,
                                          .tp = tp, .pp = 1};
                set_anything(m, job, kh / tp, &q);
                q.peak = weft_autoplan_memory_of(m, job, q.ring, u, tp);
                if (total(&q.peak) <= dev->memory)
                    rank_add(m, dev, job, &q, out, &n, max);
            }
        }
    }
    struct weft_autoplan q = {.dp = 1, .cfg = 1, .ring = 1, .ulysses = 1, .tp = 1, .pp = 1};
    if (k > 1 && k <= WEFT_DEVMAP_MAX_DEVICES && try_devmap(m, job, dev, k, &q)) {
        rank_add(m, dev, job, &q, out, &n, max);
        weft_devmap_cleanup(&q.map);
    }
    return n;
}

void weft_autoplan_cleanup(struct weft_autoplan *p)
{
    if (p->device_map)
        weft_devmap_cleanup(&p->map);
    p->device_map = false;
}
