/* [parallel] mode = auto (see internal.h): the layout of the next jobs, planned from what waits
 * in the coordinator's queue with weft plan --auto's rules (model/autoplan.h) over the workers
 * that joined, and the switch to it. The mesh stays one layout at a time, its replicas running
 * jobs side by side; when the queue's head wants another, new jobs wait until the running ones
 * end (a drain; a head that would end before it runs on a free replica meanwhile: backfill),
 * then the mesh is planned again. A worker whose tensor-parallel shard is the
 * same in the new layout keeps its loaded weights (worker/runtime.h), so a switch between data
 * and context parallelism costs a rendezvous, not a load. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "coordinator/cluster/internal.h"
#include "model/job.h"

weft_status_t weft_cr_auto_init(struct cluster_runner *r, struct weft_error *err)
{
    const struct weft_conf *c = r->conf;
    const struct weft_conf_parallel *p = &c->parallel;
    if (p->mode != WEFT_PARALLEL_AUTO)
        return WEFT_OK;
    if (weft_cr_degrees_set(p))
        return weft_error_refuse(err, WEFT_ERR_CONFIG,
                                 "[parallel] mode = auto plans the degrees itself: leave "
                                 "tp_degree, ulysses_degree, ring_degree, dp_degree and "
                                 "cfg_degree at 1");
    if (c->device_map.strategy != WEFT_DEVMAP_NONE)
        return weft_error_refuse(err, WEFT_ERR_CONFIG,
                                 "[parallel] mode = auto chooses device_map itself where the "
                                 "rules say so: leave [device_map] strategy at none");
    if (c->parallel.groups[0])
        return weft_error_refuse(err, WEFT_ERR_CONFIG,
                                 "[parallel] mode = auto plans the layout itself: leave "
                                 "[parallel] groups empty");
    if (c->cluster.workers < 1)
        return weft_error_refuse(err, WEFT_ERR_CONFIG,
                                 "[parallel] mode = auto needs [cluster] workers: the devices "
                                 "it plans over");
    weft_status_t st = weft_autoplan_model_open(r->model, &r->am, err);
    if (st != WEFT_OK)
        return st;
    r->auto_mode = true;
    /* until a plan: one replica per worker (what the coordinator checks jobs against) */
    weft_layout_single(&r->check);
    r->check.mesh.dp = (int)c->cluster.workers;
    r->plan = (struct cr_plan){1, {r->check}};
    return WEFT_OK;
}

void weft_cr_auto_cleanup(struct cluster_runner *r)
{
    if (r->auto_mode)
        weft_autoplan_model_cleanup(&r->am);
}

/* The devices the joined workers make, as the planner sees them: each one's memory as its
 * inventory reports it (a CPU worker shares its host's memory with the host's other workers),
 * the least of them, and the hosts they are on; the rate and the link from [plan]. */
static int devices(const struct cluster_runner *r, struct weft_autoplan_devices *dev)
{
    const struct weft_conf_plan *cp = &r->conf->plan;
    *dev = (struct weft_autoplan_devices){.nodes = 1, .host_memory = cp->host_memory,
                                          .link = (enum weft_interconnect)cp->interconnect,
                                          .flops = (double)cp->device_gflops * 1e9,
                                          .link_bps = (double)cp->link_bandwidth,
                                          .link_latency = (double)cp->link_latency_us * 1e-6};
    const struct worker *ws[MAX_WORKERS];
    int n = 0;
    for (int i = 0; i < MAX_WORKERS && n < (int)r->conf->cluster.workers; i++)
        if (r->w[i].state == W_JOINED)
            ws[n++] = &r->w[i];
    int hosts = 0;
    uint64_t least = 0;
    for (int k = 0; k < n; k++) {
        int same = 1, first = 1; /* workers on its host, itself included */
        for (int q = 0; q < n; q++) {
            const bool here =
                q != k && strcmp(weft_cr_host_key(ws[q]), weft_cr_host_key(ws[k])) == 0;
            same += here;
            if (here && q < k)
                first = 0;
        }
        hosts += first;
        uint64_t b;
        bool shared;
        if (!weft_boot_inventory_memory(ws[k]->hello, &b, &shared))
            continue;
        if (shared) /* the host's RAM, its workers' together */
            b /= (uint64_t)same;
        least = !least || b < least ? b : least;
    }
    dev->n = n;
    dev->memory = least;
    /* the planner spreads devices evenly over nodes: uneven hosts count as one */
    dev->nodes = hosts > 0 && n % hosts == 0 ? hosts : 1;
    return n;
}

static bool same_layout(const struct weft_layout *a, const struct weft_layout *b)
{
    return a->mesh.dp == b->mesh.dp && a->mesh.ring == b->mesh.ring &&
           a->mesh.ulysses == b->mesh.ulysses && a->mesh.tp == b->mesh.tp &&
           a->mesh.pp == b->mesh.pp && a->mesh.cfg == b->mesh.cfg &&
           a->ulysses_anything == b->ulysses_anything && a->ring_anything == b->ring_anything &&
           a->device_map == b->device_map;
}

static bool same_plan(const struct cr_plan *a, const struct cr_plan *b)
{
    if (a->n != b->n)
        return false;
    for (int g = 0; g < a->n; g++)
        if (!same_layout(&a->g[g], &b->g[g]))
            return false;
    return true;
}

static double median(double *v, int n)
{
    for (int i = 1; i < n; i++) { /* insertion sort: a handful */
        const double x = v[i];
        int k = i;
        for (; k > 0 && v[k - 1] > x; k--)
            v[k] = v[k - 1];
        v[k] = x;
    }
    return n == 0 ? 0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double weft_cr_cost_predict(const struct weft_cr_cost *costs, int n, double step_flops,
                            double pixels, int64_t steps, int64_t images)
{
    if (n < 1)
        return 0;
    n = n < WEFT_CR_COSTS ? n : WEFT_CR_COSTS;
    double f[WEFT_CR_COSTS], p[WEFT_CR_COSTS], x[WEFT_CR_COSTS];
    for (int i = 0; i < n; i++)
        f[i] = costs[i].per_flop, p[i] = costs[i].per_pixel, x[i] = costs[i].fixed;
    return median(x, n) +
           (double)images * ((double)steps * step_flops * median(f, n) + pixels * median(p, n));
}

/* The job as the planner counts its steps: every prompt's text at the model's default length
 * (the submissions' own lengths are not kept; the same length on both sides of the ratio). */
static double step_flops(const struct cluster_runner *r, int64_t height, int64_t width, bool cfg)
{
    const struct weft_autoplan_job job = {.height = height, .width = width, .cfg = cfg,
                                          .text_tokens = r->model->default_text_tokens};
    return weft_autoplan_step_flops(&r->am, &job);
}

void weft_cr_auto_record(struct cluster_runner *r, const struct job_run *jr)
{
    if (!r->auto_mode || jr->images_done < 1 || jr->per < 1 || jr->steps < 1)
        return;
    const double flops = step_flops(r, jr->height, jr->width, jr->cfg);
    const double pixels = (double)jr->height * (double)jr->width;
    if (!(flops > 0) || !(pixels > 0))
        return;
    /* the images' steps and decodes ran on replicas of per workers each; the rest of the
     * job's time on its devices is what it costs whatever its size */
    const double steps_ds = jr->denoise_s * jr->per, decode_ds = jr->decode_s * jr->per;
    const double run_ds = (weft_cr_now() - jr->started) * (double)jr->devices;
    const double n = (double)jr->images_done;
    r->costs[r->n_costs++ % WEFT_CR_COSTS] = (struct weft_cr_cost){
        .per_flop = steps_ds / (n * (double)jr->steps * flops),
        .per_pixel = decode_ds / (n * pixels),
        .fixed = run_ds > steps_ds + decode_ds ? run_ds - steps_ds - decode_ds : 0};
}

/* The devices the recent stream keeps busy: L = lambda W (Little's law) in device-seconds, what
 * the last submissions cost (each one's images' steps and decodes and its fixed costs, queued,
 * running or ended, at what the last completed jobs' took: weft_cr_cost_predict) over the time
 * they came in, from the oldest of them to now (so it decays once they stop). The time is at
 * least their mean cost, so that a burst counts as its jobs and no more (a burst of two large
 * jobs keeps two devices busy, not as many as their work over the instant they came in). 0
 * below 3 submissions or before a job has completed: too few to say. */
static double stream_devices(const struct cluster_runner *r, const struct weft_runner_demand *d,
                             const double *cost, double *work_p, double *span_p)
{
    const int n = d->n_arrivals;
    if (n < 3 || r->n_costs < 1)
        return 0;
    double w = 0; /* the newest n - 1: the oldest opens the span */
    for (int i = 1; i < n; i++)
        w += cost[i];
    *span_p = d->now - d->arrivals[0].at;
    *work_p = w;
    const double span = *span_p > w / (n - 1) ? *span_p : w / (n - 1);
    return span > 0 ? w / span : 0;
}

/* The planner's layout over dev for a job, as the mesh runs it: dev.n / per replicas, and
 * every split of the sequence allowed to be uneven (the replicas take jobs of other shapes
 * than the one planned: one whose lengths do not divide must not be refused on them). false
 * when it planned nothing (err). */
static bool plan_layout(const struct cluster_runner *r, const struct weft_autoplan_devices *dev,
                        const struct weft_autoplan_job *job, struct weft_layout *out,
                        struct weft_autoplan *p, struct weft_error *err)
{
    if (weft_autoplan(&r->am, dev, job, p, err) != WEFT_OK)
        return false;
    weft_layout_single(out);
    out->rotation = (enum weft_ring_rotation)r->conf->parallel.ring_rotation;
    out->device_map = p->device_map;
    out->mesh = (struct weft_mesh){1, p->ring, p->ulysses, p->tp, p->device_map ? p->pp : 1,
                                   p->cfg};
    out->mesh.dp = dev->n / weft_layout_replica_devices(out);
    out->ulysses_anything = p->ulysses > 1;
    out->ring_anything = p->ring > 1;
    return true;
}

/* goal = latency, a stream that mixes small jobs with large ones (whose image pays for context
 * parallelism: WEFT_AUTOPLAN_MIN_TOKENS_PER_RANK tokens a rank, as weft_cr_route routes them):
 * unequal groups side by side instead of l, one layout for all. A replica for the large ones,
 * planned as a lone job over the devices the small ones leave (those they keep busy by
 * stream_devices' estimate, rounded up, and at least a small head job's images), the rest
 * single-device replicas. So a large job neither waits for the small ones' replicas nor
 * splits over all of them while small jobs queue, and heads of either kind want the same
 * plan. Only where:
 *   - the stream (stream: stream_devices) keeps at most half the devices busy, or while the
 *     mesh has such groups fewer than all of them (rounded): a stream that saturates the
 *     workers keeps l, replicas of one device each (the fixed "ulysses2+dp2" had dp 4's jobs
 *     per minute and 6x its median latency on bench serve's saturating stream); a large job
 *     that finds its replica busy takes a free single;
 *   - every device holds the largest job alone (the singles take large jobs while the split
 *     replica is busy);
 *   - l is not device_map, and a large head has one image (several get l's replicas).
 * false (nothing said) otherwise. */
static bool mixed(const struct cluster_runner *r, const struct weft_runner_demand *d,
                  const struct weft_autoplan_devices *dev, const struct weft_layout *l,
                  double stream, const double *cost, struct cr_plan *out, char *why,
                  size_t why_len)
{
    /* hysteresis: a stream near saturation would flip the mesh (and drain it) at every
     * fluctuation of the estimate; unequal groups begin at half the devices busy and end at
     * all of them (rounded) */
    const bool now_mixed = (r->planned || r->assigning) && r->mesh.n > 1;
    const bool busy_now = now_mixed ? stream >= dev->n - 0.5 : stream > dev->n / 2.0;
    if (r->conf->parallel.goal != WEFT_GOAL_LATENCY || l->device_map || dev->n < 3 ||
        d->n_arrivals < 3 || r->n_costs < 1 || busy_now)
        return false;
    const bool head_small = weft_job_image_tokens(r->model, d->height, d->width) /
                                WEFT_AUTOPLAN_MIN_TOKENS_PER_RANK < 2;
    if (!head_small && d->images > 1)
        return false;
    const struct weft_runner_arrival *big = NULL;
    int small = 0, large = 0;
    double work = 0, work_large = 0; /* among the newest n - 1 (the oldest opens the span) */
    for (int i = 1; i < d->n_arrivals; i++) {
        const struct weft_runner_arrival *a = &d->arrivals[i];
        const int64_t ranks = weft_job_image_tokens(r->model, a->height, a->width) /
                              WEFT_AUTOPLAN_MIN_TOKENS_PER_RANK;
        if (ranks >= 2) {
            if (!big || a->height * a->width > big->height * big->width)
                big = a;
            large++;
            work_large += cost[i];
        } else {
            small++;
            work += cost[i];
        }
    }
    if (!big || small == 0)
        return false;
    const struct weft_autoplan_job job = {
        .height = big->height, .width = big->width, .steps = big->steps, .prompts = 1,
        .text_tokens = r->model->default_text_tokens, .cfg = big->cfg,
        .goal = WEFT_GOAL_LATENCY};
    const struct weft_autoplan_memory one = weft_autoplan_memory_of(&r->am, &job, 1, 1, 1);
    if (one.weights + one.activations + one.workspace > dev->memory)
        return false;
    /* as stream_devices: over the time they came in, at least their mean cost */
    const double span0 = d->now - d->arrivals[0].at, mean = (work + work_large) / (small + large);
    const double span = span0 > mean ? span0 : mean;
    const double busy = span > 0 ? work / span : (double)dev->n;
    const double busy_large = span > 0 ? work_large / span : (double)dev->n;
    int keep = busy < 1 ? 1 : (int)ceil(busy);
    if (head_small && d->images > keep) /* what waits now runs on the singles */
        keep = d->images < dev->n ? (int)d->images : dev->n;
    struct weft_autoplan_devices left = *dev;
    left.n = dev->n - keep;
    if (left.n < 2)
        return false;
    if (left.n % left.nodes)
        left.nodes = 1;
    struct weft_autoplan p;
    struct weft_error err = WEFT_ERROR_INIT;
    struct weft_layout split;
    if (!plan_layout(r, &left, &job, &split, &p, &err))
        return false;
    weft_autoplan_cleanup(&p);
    const int per = weft_layout_replica_devices(&split);
    if (per < 2 || split.device_map ||
        weft_model_check_layout(r->model, &split, &r->conf->tp_plan, &err) != WEFT_OK)
        return false;
    split.mesh.dp = 1;
    struct weft_layout single;
    weft_layout_single(&single);
    single.rotation = split.rotation;
    single.mesh.dp = dev->n - per;
    *out = (struct cr_plan){2, {split, single}};
    char a[96];
    weft_layout_name(&split, a, sizeof(a));
    snprintf(why, why_len, "the recent stream mixes %d small job(s), keeping %.1f device(s) "
             "busy, with %d large one(s) keeping %.1f (the largest %lldx%lld: their images pay "
             "for context parallelism): %s for the large ones (a lone %lldx%lld job's latency plan "
             "given the %d devices the small ones leave: it takes %d) beside %d single-device "
             "replicas, side by side", small, busy, large, busy_large, (long long)big->width,
             (long long)big->height, a, (long long)big->width, (long long)big->height, left.n,
             per, dev->n - per);
    return true;
}

/* The plan the planner chooses for d over the joined workers (one layout, or unequal groups for
 * a mixed stream: mixed), its reasons in why; false when it chose nothing runnable (logged).
 * Every worker takes part: the replicas a latency plan leaves idle stay loaded for the next
 * jobs. */
static bool choose(struct cluster_runner *r, const struct weft_runner_demand *demand,
                   struct cr_plan *out, char *why, size_t why_len,
                   struct weft_autoplan_devices *dev_p, struct weft_autoplan_job *job_p)
{
    struct weft_runner_demand newest = *demand; /* the last WEFT_RUNNER_ARRIVALS, as promised */
    if (newest.n_arrivals > WEFT_RUNNER_ARRIVALS) {
        newest.arrivals += newest.n_arrivals - WEFT_RUNNER_ARRIVALS;
        newest.n_arrivals = WEFT_RUNNER_ARRIVALS;
    }
    const struct weft_runner_demand *d = &newest;
    struct weft_autoplan_devices dev;
    if (devices(r, &dev) < 1 || dev.memory == 0)
        return false;
    /* a stream plans for the devices it keeps busy, not only what waits now: one large job
     * among many small ones then stays on a data-parallel replica instead of draining the mesh
     * twice to run alone */
    const int64_t waiting = d->queued_images > 0 ? d->queued_images : 1;
    double work = 0, span = 0;
    double cost[WEFT_RUNNER_ARRIVALS] = {0}; /* what each submission costs: stream_devices */
    const int costs = r->n_costs < WEFT_CR_COSTS ? (int)r->n_costs : WEFT_CR_COSTS;
    for (int i = 0; i < d->n_arrivals && costs > 0; i++) {
        const struct weft_runner_arrival *a = &d->arrivals[i];
        cost[i] = weft_cr_cost_predict(r->costs, costs,
                                       step_flops(r, a->height, a->width, a->cfg),
                                       (double)a->height * (double)a->width, a->steps,
                                       a->images);
    }
    const double busy = stream_devices(r, d, cost, &work, &span);
    const int64_t streaming = (int64_t)(busy + 0.5);
    const struct weft_autoplan_job job = {
        .height = d->height, .width = d->width, .steps = d->steps,
        .prompts = streaming > waiting ? streaming : waiting,
        .text_tokens = d->text_tokens > 0 ? d->text_tokens : r->model->default_text_tokens,
        .cfg = d->cfg, .goal = (enum weft_goal)r->conf->parallel.goal};
    struct weft_autoplan p;
    struct weft_error err = WEFT_ERROR_INIT;
    struct weft_layout l;
    if (!plan_layout(r, &dev, &job, &l, &p, &err)) {
        WEFT_LOG_WARN("cluster", "auto: no layout for a %lldx%lld job on %d workers: %s",
                      (long long)d->height, (long long)d->width, dev.n, weft_error_text(&err));
        return false;
    }
    size_t n = 0;
    why[0] = '\0';
    if (streaming > waiting)
        n += (size_t)snprintf(why, why_len, "the recent stream keeps %.1f devices busy (the last "
                              "%d submissions bring %.1f device-seconds at what the last jobs' "
                              "steps, decodes and fixed costs took, in %.1f s or their mean if "
                              "longer): planned "
                              "for %lld images; ", busy, d->n_arrivals - 1, work, span,
                              (long long)streaming);
    if (weft_model_check_layout(r->model, &l, &r->conf->tp_plan, &err) != WEFT_OK) {
        WEFT_LOG_WARN("cluster", "auto: the planned layout cannot run: %s",
                      weft_error_text(&err));
        weft_autoplan_cleanup(&p);
        return false;
    }
    *out = (struct cr_plan){1, {l}};
    n = n < why_len ? n : why_len - 1;
    if (mixed(r, d, &dev, &l, busy, cost, out, why + n, why_len - n)) /* its reasons alone */
        n = why_len;
    for (int i = 0; i < p.n_reasons && n + 4 < why_len; i++)
        n += (size_t)snprintf(why + n, why_len - n, "%s%s", i ? "; " : "", p.reasons[i]);
    weft_autoplan_cleanup(&p);
    if (dev_p)
        *dev_p = dev;
    if (job_p)
        *job_p = job;
    return true;
}

/* The predicted seconds of one denoising step of job on layout l (a replica of l's devices),
 * or -1 when the planner has no rate or does not rank that layout. */
static double step_seconds(const struct cluster_runner *r, const struct weft_autoplan_devices *dev,
                           const struct weft_autoplan_job *job, const struct weft_layout *l)
{
    if (dev->flops <= 0)
        return -1;
    const int cfg = l->mesh.cfg > 1 ? l->mesh.cfg : 1;
    const int k = weft_layout_replica_devices(l);
    struct weft_autoplan_candidate cand[64];
    const int n = weft_autoplan_rank(&r->am, dev, job, k, cand, 64);
    for (int i = 0; i < n; i++) {
        const struct weft_autoplan_candidate *c = &cand[i];
        if (c->device_map == l->device_map &&
            (l->device_map || (c->cfg == cfg && c->ring == l->mesh.ring &&
                               c->ulysses == l->mesh.ulysses && c->tp == l->mesh.tp)))
            return c->time.total;
    }
    return -1;
}

/* What switching from now to want costs, seconds: with the same tensor-parallel shards the
 * workers keep their weights, and a plan costs what the last such plan took (its rendezvous);
 * otherwise every rank reads its new shard at the rate the last loading plan read (1 GB/s until
 * one was measured). */
static double switch_seconds(const struct cluster_runner *r, const struct cr_plan *want,
                             const struct cr_plan *now)
{
    bool same = true; /* every group of both with the first's shards */
    for (int g = 0; g < want->n + now->n; g++) {
        const struct weft_layout *l = g < want->n ? &want->g[g] : &now->g[g - want->n];
        same &= l->mesh.tp == want->g[0].mesh.tp && !l->device_map;
    }
    if (same)
        return r->plan_kept_s;
    int tp = 1; /* the group that reads the most */
    for (int g = 0; g < want->n; g++)
        tp = want->g[g].mesh.tp > tp ? want->g[g].mesh.tp : tp;
    tp = tp <= WEFT_AUTOPLAN_TP_MAX ? tp : 1;
    const double bytes = (double)(tp > 1 && r->am.tp_bytes[tp] ? r->am.tp_bytes[tp]
                                                               : r->am.transformer_bytes);
    return bytes / (r->load_bps > 0 ? r->load_bps : 1e9);
}

/* EASY backfilling, the HPC schedulers' rule: while the mesh drains for a switch, the queue's
 * head starts on free replicas of the mesh as it is when it would end before the drain does,
 * so the switch waits no longer for it. The drain is that of the jobs running when the switch
 * was decided (backfilled jobs never extend it: jobs of one size would otherwise chain on the
 * free replicas and the switch would wait for a gap in the stream). Work is counted in
 * pixel-steps (an image's decode counted as one step; the blocking jobs' left from their step
 * and image reports) on replicas of one layout; a small image's step costs less per pixel
 * than a large one's (attention grows with the square of the tokens), so the count errs on the
 * side of waiting. */
static void backfill_check(struct cluster_runner *r, const struct weft_runner_demand *d,
                           const char *want, const char *now, bool was)
{
    const int64_t free = weft_cr_free_replicas(r);
    const int64_t images = d->images > 0 ? d->images : 1;
    const int64_t used = images < free ? images : free;
    r->backfill = false;
    if (used < 1)
        return;
    const int64_t per = (images + used - 1) / used; /* images on its busiest replica */
    const double head = weft_cr_job_work(d->height, d->width, d->cfg, d->steps, per);
    const double drain = weft_cr_drain_work(r);
    if (head > drain)
        return;
    r->backfill = true;
    snprintf(r->backfill_why, sizeof(r->backfill_why),
             "the rules want %s and the mesh drains for it; this job runs on the mesh as it is "
             "(%s), on a free replica: %.0f pixel-steps, within the %.0f the jobs it drains for "
             "have left (backfill)", want, now, head, drain);
    if (!was)
        WEFT_LOG_INFO("cluster", "auto: %s", r->backfill_why);
}

/* The plan jobs run on now (the mesh of the current or coming plan). */
static bool current(const struct cluster_runner *r, struct cr_plan *out)
{
    *out = r->mesh;
    return r->planned || r->assigning;
}

/* The seconds what waits (job.prompts images of job) takes on plan p, on the group it would be
 * routed to (weft_cr_route), its images over that group's replicas; -1 when the planner has no
 * rate or does not rank that layout. */
static double waits_seconds(const struct cluster_runner *r, const struct weft_autoplan_devices *dev,
                            const struct weft_autoplan_job *job, const struct cr_plan *p)
{
    const int g = weft_cr_route(r, p, job->height, job->width, NULL);
    if (g < 0)
        return -1;
    const double t = step_seconds(r, dev, job, &p->g[g]);
    const int64_t rounds = (job->prompts + p->g[g].mesh.dp - 1) / p->g[g].mesh.dp;
    return t > 0 ? t * (double)rounds * (double)job->steps : -1;
}

void weft_cr_demand(struct weft_runner *base, const struct weft_runner_demand *d)
{
    struct cluster_runner *r = (struct cluster_runner *)base;
    const bool backfill = r->backfill;
    r->backfill = false; /* until this head is found to fit before the drain */
    if (!r->auto_mode || r->stopping || r->plan_error[0])
        return;
    struct cr_plan want, now;
    char why[640];
    struct weft_autoplan_devices dev;
    struct weft_autoplan_job job;
    if (!choose(r, d, &want, why, sizeof(why), &dev, &job))
        return;
    const bool have = current(r, &now);
    /* with a device rate, a switch must pay for itself on what waits: its images' steps over
     * the new layout's replicas and the switch against the same where the mesh is */
    const double t_now = have ? waits_seconds(r, &dev, &job, &now) : -1;
    double t_want = have ? waits_seconds(r, &dev, &job, &want) : -1;
    if (have && t_now > 0 && t_want > 0 && !same_plan(&want, &now)) {
        const double cost = switch_seconds(r, &want, &now);
        t_want += cost;
        if (t_want >= t_now) {
            if (r->switching) {
                r->switching = false;
                weft_cr_post_capacity(r);
            }
            char a[96 * WEFT_CR_GROUPS], b[96 * WEFT_CR_GROUPS];
            weft_cr_plan_name(&want, a, sizeof(a));
            weft_cr_plan_name(&now, b, sizeof(b));
            snprintf(r->layout_why, sizeof(r->layout_why),
                     "the rules want %s, but the mesh stays %s: what waits is predicted to take "
                     "%.3f s there and %.3f s on %s, the switch's %.3f s included", a, b, t_now,
                     t_want, a, cost);
            WEFT_LOG_DEBUG("cluster", "auto: %s", r->layout_why);
            return;
        }
    }
    const bool moved = r->switching && !same_plan(&r->want, &want);
    r->want = want;
    r->want_set = true;
    snprintf(r->want_why, sizeof(r->want_why), "%s", why);
    if (have && same_plan(&want, &now)) {
        snprintf(r->layout_why, sizeof(r->layout_why), "%s", why); /* the next job's reasons */
        if (r->switching) { /* the queue no longer asks for the switch */
            r->switching = false;
            weft_cr_post_capacity(r);
        }
        return;
    }
    if (!have) /* the first plan, or one after a loss, takes want */
        return;
    char a[96 * WEFT_CR_GROUPS], b[96 * WEFT_CR_GROUPS];
    weft_cr_plan_name(&want, a, sizeof(a));
    weft_cr_plan_name(&now, b, sizeof(b));
    if (!r->switching)
        WEFT_LOG_INFO("cluster", "auto: the next job (%lldx%lld, %lld step(s), %lld image(s) of "
                      "%lld waiting) wants %s, the mesh is %s: %s%s", (long long)d->width,
                      (long long)d->height, (long long)d->steps, (long long)d->images,
                      (long long)d->queued_images, a, b,
                      weft_cr_active_jobs(r) ? "new jobs wait for the running ones, then " : "",
                      "planning again");
    if (moved)
        WEFT_LOG_INFO("cluster", "auto: the mesh now drains for %s: %s", a, why);
    if (!r->switching) {
        r->switching = true;
        WEFT_LOG_INFO("cluster", "auto: %s", why);
        for (int i = 0; i < MAX_WORKERS; i++) /* the reservation: the drain waits for these */
            r->jobs[i].blocking = r->jobs[i].active;
    }
    if (!weft_cr_auto_switch(r))
        backfill_check(r, d, a, b, backfill); /* backfill: the last head's, for the log line */
}

bool weft_cr_auto_switch(struct cluster_runner *r)
{
    if (!r->switching || !r->planned || weft_cr_active_jobs(r) > 0)
        return false;
    r->replans++;
    weft_cr_plan_reset(r);
    weft_cr_plan_maybe(r);
    return true;
}

void weft_cr_auto_prepare(struct cluster_runner *r)
{
    if (!r->auto_mode)
        return;
    if (!r->want_set) { /* no job yet: plan for a stream of the model's default images */
        struct weft_autoplan_devices dev;
        const int n = devices(r, &dev);
        const struct weft_runner_demand d = {
            .height = r->model->default_side, .width = r->model->default_side, .steps = 28,
            .images = 1, .queued_images = n > 0 ? n : 1, .queued_jobs = 1};
        if (!choose(r, &d, &r->want, r->want_why, sizeof(r->want_why), NULL, NULL))
            return; /* the one-replica-per-worker layout, as checked at start */
        r->want_set = true;
    }
    r->plan = r->want;
    snprintf(r->layout_why, sizeof(r->layout_why), "%s", r->want_why);
    r->switching = false;
}

const char *weft_cr_layout_reason(struct weft_runner *base)
{
    const struct cluster_runner *r = (const struct cluster_runner *)base;
    if (r->auto_mode && r->switching && r->backfill)
        return r->backfill_why;
    return r->auto_mode && r->layout_why[0] ? r->layout_why : NULL;
}
