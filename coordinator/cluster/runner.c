/* The cluster runner's operations (control/runner.h), its tick (link progress, heartbeats,
 * deadlines), describe and metrics, and its life cycle. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/log.h"
#include "coordinator/cluster/internal.h"
#include "coordinator/cluster_runner.h"

double weft_cr_now(void)
{
    return (double)uv_hrtime() * 1e-9;
}

void weft_cr_post_capacity(struct cluster_runner *r)
{
    const struct weft_runner_event ev = {.kind = WEFT_RUNNER_EV_CAPACITY};
    weft_runner_post(r->sink, &ev);
}

weft_status_t weft_cr_send(struct worker *w, unsigned type, const union weft_msg *msg)
{
    if (w->state != W_JOINED || !w->link)
        return WEFT_ERR_PEER_LOST;
    void *buf;
    size_t len;
    struct weft_error err = WEFT_ERROR_INIT;
    weft_status_t st = weft_msg_encode(type, msg, &buf, &len, &err);
    if (st != WEFT_OK) {
        WEFT_LOG_ERROR("cluster", "worker %s: cannot send a %s message: %s", w->id,
                       weft_msg_name(type), weft_error_text(&err));
        return st;
    }
    st = weft_link_send(w->link, (uint16_t)type, buf, len);
    weft_free(buf);
    return st;
}

/* Jobs that may run at once: those running, and one more per free replica. */
static int cr_capacity(struct weft_runner *base)
{
    struct cluster_runner *r = (struct cluster_runner *)base;
    if (!r->planned || r->stopping)
        return 0;
    /* auto, switching: the mesh drains before it is planned again, but for a head that ends
     * before the drain would (auto.c) */
    return weft_cr_active_jobs(r) +
           (r->switching && !r->backfill ? 0 : weft_cr_free_replicas(r));
}

static const char *cr_unavailable(struct weft_runner *base)
{
    struct cluster_runner *r = (struct cluster_runner *)base;
    return r->plan_error[0] ? r->plan_error : NULL;
}

/* The layout of the mesh (one group's, dp shrunk after losses); with [parallel] groups,
 * single-device replicas as many as the groups' (the coordinator checks each job against every
 * group: cr_check_layouts). */
static void cr_layout(struct weft_runner *base, struct weft_layout *out)
{
    const struct cluster_runner *r = (const struct cluster_runner *)base;
    *out = r->check;
    if ((r->planned || r->assigning) && r->mesh.n == 1)
        *out = r->mesh.g[0]; /* dp may have shrunk after a loss; auto's plan */
    else if (r->planned || r->assigning)
        out->mesh.dp = weft_cr_plan_replicas(&r->mesh);
}

/* [parallel] groups: each group's layout (a job must fit every one: it may start on any). */
static int cr_check_layouts(struct weft_runner *base, struct weft_layout *out, int max)
{
    const struct cluster_runner *r = (const struct cluster_runner *)base;
    if (!r->conf->parallel.groups[0] || r->auto_mode)
        return 0;
    int n = 0;
    for (; n < r->plan.n && n < max; n++)
        out[n] = r->plan.g[n];
    return n;
}

/* The layout of the group the job start() took last runs on. */
static void cr_started_layout(struct weft_runner *base, struct weft_layout *out)
{
    const struct cluster_runner *r = (const struct cluster_runner *)base;
    if (r->started_group >= 0 && r->started_group < r->mesh.n)
        *out = r->mesh.g[r->started_group];
    else
        cr_layout(base, out);
}

/* ---------------------------------------------------------------------------------------- */

static void on_link_fd(uv_poll_t *h, int status, int events)
{
    (void)status, (void)events;
    struct cluster_runner *r = h->data;
    weft_link_host_progress(r->host);
}

static void workers_tick(struct cluster_runner *r, double now)
{
    const double lost = (double)r->conf->cluster.worker_timeout_ms / 1e3;
    const bool ping = now >= r->next_ping;
    if (ping)
        r->next_ping = now + (double)r->conf->cluster.heartbeat_ms / 1e3;
    for (int i = 0; i < MAX_WORKERS; i++) {
        struct worker *w = &r->w[i];
        if (w->state != W_JOINED)
            continue;
        if (now - w->last_heard > lost) {
            char why[64];
            snprintf(why, sizeof(why), "silent for %.1f s", now - w->last_heard);
            weft_cr_worker_lost(w, why);
        } else if (ping) {
            (void)weft_cr_send(w, WEFT_MSG_PING, NULL);
        }
    }
}

static void on_tick(uv_timer_t *t)
{
    struct cluster_runner *r = t->data;
    weft_link_host_progress(r->host);
    /* the rendezvous's own connections are not under the poll: drive it here too */
    weft_cr_rdv_progress(r);
    const double now = weft_cr_now();
    weft_cr_jobs_tick(r, now);
    if (r->closed)
        return;
    weft_cr_boot_tick(r, now);
    workers_tick(r, now);
}

/* ---------------------------------------------------------------------------------------- */

static const char *worker_state(const struct cluster_runner *r, const struct worker *w)
{
    if (w->state != W_JOINED)
        return "joining";
    if (w->rank < 0)
        return "idle";
    if (!w->assigned)
        return "loading";
    return r->replica_job[w->replica] >= 0 ? "busy" : "ready";
}

/* device_map: unit -> "device d (the workers that are device d of each replica)". */
static void describe_devmap(const struct cluster_runner *r, cJSON *d)
{
    char names[WEFT_DEVMAP_MAX_DEVICES][160];
    const char *labels[WEFT_DEVMAP_MAX_DEVICES];
    for (int k = 0; k < r->map.n_devices; k++) {
        int len = snprintf(names[k], sizeof(names[k]), "device %d (", k);
        int any = 0;
        for (int i = 0; i < MAX_WORKERS; i++) {
            const struct worker *w = &r->w[i];
            if (w->rank >= 0 && w->rank % r->mesh.g[0].mesh.pp == k && len < 150)
                len += snprintf(names[k] + len, sizeof(names[k]) - (size_t)len, "%s%s",
                                any++ ? ", " : "", w->id);
        }
        snprintf(names[k] + len, sizeof(names[k]) - (size_t)len, ")");
        labels[k] = names[k];
    }
    cJSON *dm = weft_devmap_json(&r->map, labels);
    cJSON_AddStringToObject(dm, "prompt_embeds", "coordinator (precomputed, sent with each job)");
    cJSON_AddItemToObject(d, "device_map", dm);
    cJSON_AddStringToObject(d, "device_map_strategy",
                            r->conf->device_map.strategy == WEFT_DEVMAP_AUTO ? "auto"
                                                                             : "balanced");
}

static cJSON *cr_describe(struct weft_runner *base)
{
    struct cluster_runner *r = (struct cluster_runner *)base;
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "runner", "cluster");
    cJSON_AddBoolToObject(d, "ready", r->planned);
    cJSON_AddStringToObject(d, "model", r->model_dir);
    cJSON_AddNumberToObject(d, "epoch", (double)r->epoch);
    if (r->plan_error[0])
        cJSON_AddStringToObject(d, "error", r->plan_error);
    cJSON *ws = cJSON_AddArrayToObject(d, "workers");
    cJSON *tf = cJSON_CreateArray(), *vae = cJSON_CreateArray(), *te = cJSON_CreateArray();
    for (int i = 0; i < MAX_WORKERS; i++) {
        const struct worker *w = &r->w[i];
        if (w->state != W_JOINED && w->state != W_AUTHED)
            continue;
        cJSON *e = w->hello ? cJSON_Duplicate(w->hello, 1) : cJSON_CreateObject();
        cJSON_AddStringToObject(e, "id", w->id);
        cJSON_AddStringToObject(e, "state", worker_state(r, w));
        cJSON_AddNumberToObject(e, "rank", w->rank);
        if (w->rank >= 0) {
            cJSON_AddNumberToObject(e, "replica", w->replica);
            cJSON_AddNumberToObject(e, "transformer_bytes", (double)w->transformer_bytes);
            cJSON_AddNumberToObject(e, "vae_bytes", (double)w->vae_bytes);
            cJSON_AddNumberToObject(e, "text_bytes", (double)w->text_bytes);
            if (w->assigned)
                cJSON_ReplaceItemInObject(e, "threads", cJSON_CreateNumber(w->threads));
            cJSON_AddItemToArray(tf, cJSON_CreateString(w->id));
            if (w->decode)
                cJSON_AddItemToArray(vae, cJSON_CreateString(w->id));
            if (w->text_bytes)
                cJSON_AddItemToArray(te, cJSON_CreateString(w->id));
        }
        cJSON_AddItemToArray(ws, e);
    }
    cJSON_AddStringToObject(d, "mode", r->auto_mode ? "auto" : "fixed");
    if (r->auto_mode) {
        cJSON_AddStringToObject(d, "goal",
                                r->conf->parallel.goal == WEFT_GOAL_THROUGHPUT ? "throughput"
                                                                               : "latency");
        cJSON_AddNumberToObject(d, "replans", (double)r->replans);
        cJSON_AddNumberToObject(d, "kept_bytes", (double)r->kept_bytes);
        cJSON_AddBoolToObject(d, "switching", r->switching);
        if (r->switching) { /* what the mesh drains for, and why */
            char want[96 * WEFT_CR_GROUPS];
            weft_cr_plan_name(&r->want, want, sizeof(want));
            cJSON_AddStringToObject(d, "want", want);
            cJSON_AddStringToObject(d, "want_reason", r->want_why);
        }
        cJSON_AddNumberToObject(d, "backfilled", (double)r->backfilled);
    }
    /* the mesh: its replicas, the degrees of its first group (of its only one, but with
     * [parallel] groups), and every group */
    const bool planned = r->planned || r->assigning;
    const struct cr_plan *p = planned ? &r->mesh : &r->plan;
    const struct weft_layout *l0 = &p->g[0];
    cJSON *mesh = cJSON_AddObjectToObject(d, "mesh");
    cJSON_AddNumberToObject(mesh, "dp", planned ? weft_cr_plan_replicas(p) : 0);
    cJSON_AddNumberToObject(mesh, "cfg", l0->mesh.cfg > 1 ? l0->mesh.cfg : 1);
    cJSON_AddNumberToObject(mesh, "ring", l0->mesh.ring);
    cJSON_AddNumberToObject(mesh, "ulysses", l0->mesh.ulysses);
    cJSON_AddNumberToObject(mesh, "tp", l0->mesh.tp);
    cJSON *groups = cJSON_AddArrayToObject(mesh, "groups");
    for (int g = 0, rep0 = 0; g < p->n; rep0 += p->g[g++].mesh.dp) {
        char name[96];
        weft_layout_name(&p->g[g], name, sizeof(name));
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "layout", name);
        cJSON_AddNumberToObject(e, "replicas", planned ? p->g[g].mesh.dp : 0);
        cJSON_AddNumberToObject(e, "devices_per_replica", weft_layout_replica_devices(&p->g[g]));
        cJSON *ids = cJSON_AddArrayToObject(e, "workers");
        for (int i = 0; planned && i < MAX_WORKERS; i++)
            if (r->w[i].rank >= 0 && r->w[i].replica >= rep0 &&
                r->w[i].replica < rep0 + p->g[g].mesh.dp)
                cJSON_AddItemToArray(ids, cJSON_CreateString(r->w[i].id));
        cJSON_AddItemToArray(groups, e);
    }
    if (r->map.n_devices && planned) {
        cJSON_AddNumberToObject(mesh, "stages", l0->mesh.pp);
        cJSON_Delete(tf), cJSON_Delete(vae), cJSON_Delete(te);
        describe_devmap(r, d); /* the text encoders are in the map, placed like the rest */
    } else {
        cJSON *dm = cJSON_AddObjectToObject(d, "device_map");
        cJSON_AddStringToObject(dm, "prompt_embeds",
                                "coordinator (precomputed, sent with each job)");
        if (cJSON_GetArraySize(te)) {
            cJSON_AddItemToObject(dm, "text_encoder", cJSON_Duplicate(te, 1));
            cJSON_AddItemToObject(dm, "text_encoder_2", te);
        } else {
            cJSON_Delete(te);
        }
        cJSON_AddItemToObject(dm, "transformer", tf);
        cJSON_AddItemToObject(dm, "vae", vae);
    }
    cJSON_AddNumberToObject(d, "workers_lost", (double)r->workers_lost);
    cJSON_AddNumberToObject(d, "jobs_stalled", (double)r->jobs_stalled);
    cJSON_AddNumberToObject(d, "connections_refused", (double)r->refused);
    return d;
}

static void cr_metrics(struct weft_runner *base, struct weft_sbuf *out)
{
    struct cluster_runner *r = (struct cluster_runner *)base;
    weft_sbuf_printf(out,
                     "# HELP weft_workers Workers joined to the coordinator.\n"
                     "# TYPE weft_workers gauge\nweft_workers %d\n"
                     "# HELP weft_workers_lost_total Workers lost since start.\n"
                     "# TYPE weft_workers_lost_total counter\nweft_workers_lost_total %llu\n"
                     "# HELP weft_jobs_stalled_total Jobs taken back from workers that did not "
                     "advance them.\n"
                     "# TYPE weft_jobs_stalled_total counter\nweft_jobs_stalled_total %llu\n"
                     "# HELP weft_worker_connections_refused_total Connections to the worker "
                     "port refused (over the bootstrap pool or its per-address share).\n"
                     "# TYPE weft_worker_connections_refused_total counter\n"
                     "weft_worker_connections_refused_total %llu\n"
                     "# HELP weft_mesh_epoch Plans made since start.\n"
                     "# TYPE weft_mesh_epoch gauge\nweft_mesh_epoch %llu\n"
                     "# HELP weft_mesh_replans_total Plans [parallel] mode = auto made for "
                     "the queue's next jobs after the first.\n"
                     "# TYPE weft_mesh_replans_total counter\nweft_mesh_replans_total %llu\n"
                     "# HELP weft_weights_kept_bytes_total Bytes of weights workers kept "
                     "loaded over a new plan instead of reading them again.\n"
                     "# TYPE weft_weights_kept_bytes_total counter\n"
                     "weft_weights_kept_bytes_total %llu\n"
                     "# HELP weft_jobs_backfilled_total Jobs [parallel] mode = auto started on "
                     "the mesh as it was while it drained for a switch (they end before it).\n"
                     "# TYPE weft_jobs_backfilled_total counter\nweft_jobs_backfilled_total %llu\n",
                     weft_cr_joined(r), (unsigned long long)r->workers_lost,
                     (unsigned long long)r->jobs_stalled, (unsigned long long)r->refused,
                     (unsigned long long)r->epoch, (unsigned long long)r->replans,
                     (unsigned long long)r->kept_bytes, (unsigned long long)r->backfilled);
    weft_prompt_cache_metrics(out, r->prompt_cache_hits, r->prompt_cache_misses, 0, false);
    static const char *const kinds[3][2] = {
        {"seconds", "Time the workers spent in collectives (summed over ranks)."},
        {"bytes", "Bytes the workers' collectives sent (summed over ranks)."},
        {"calls", "Collective calls (summed over ranks)."},
    };
    for (int k = 0; k < 3 && r->n_comm; k++) {
        weft_sbuf_printf(out, "# HELP weft_collective_%s_total %s\n"
                              "# TYPE weft_collective_%s_total counter\n",
                         kinds[k][0], kinds[k][1], kinds[k][0]);
        for (int i = 0; i < r->n_comm; i++) {
            const struct comm_total *t = &r->comm[i];
            weft_sbuf_printf(out, "weft_collective_%s_total{group=\"%s\",op=\"%s\"} %.17g\n",
                             kinds[k][0], t->group, t->op,
                             k == 0 ? t->seconds : k == 1 ? t->bytes : t->calls);
        }
    }
}

void weft_cr_leave(struct worker *w)
{
    if (weft_cr_send(w, WEFT_MSG_SHUTDOWN, NULL) == WEFT_OK)
        w->state = W_LEAVING;
    else
        weft_cr_worker_lost(w, "cannot be told to stop");
}

static int leaving(const struct cluster_runner *r)
{
    int n = 0;
    for (int i = 0; i < MAX_WORKERS; i++)
        n += r->w[i].state == W_LEAVING;
    return n;
}

/* Workers are told to exit and every handle of ours is closed, so the loop can end.
 *
 * A worker answers SHUTDOWN by closing its link (agent.c, session()), and we wait for that
 * before closing ours: a link closed while the message is still on its way (the worker busy,
 * the transport slow) reads on the worker's side as a lost coordinator, which it rejoins until
 * its join timeout. A worker between its bootstrap and its hello is answered with SHUTDOWN
 * when the hello comes (bootstrap.c, on_first_msg), so wait a little for those too. Both waits
 * are bounded: a worker that never answers is closed anyway. */
void weft_cr_shutdown(struct cluster_runner *r)
{
    if (r->closed)
        return;
    r->closed = true;
    for (int i = 0; i < MAX_WORKERS; i++)
        if (r->w[i].state == W_JOINED)
            weft_cr_leave(&r->w[i]);
    const double t0 = weft_cr_now();
    for (;;) {
        const double t = weft_cr_now() - t0;
        const bool wait_leave = leaving(r) > 0 && t < LEAVE_WAIT_MS / 1e3;
        const bool wait_hello = weft_cr_authed(r) > 0 && t < 1.0;
        if (!wait_leave && !wait_hello)
            break;
        weft_link_host_progress(r->host);
        usleep(2000);
    }
    for (int i = 0; i < MAX_WORKERS; i++)
        if (r->w[i].state == W_LEAVING) {
            WEFT_LOG_WARN("cluster", "worker %s did not close its link within %d ms of SHUTDOWN: "
                                     "closed", r->w[i].id, LEAVE_WAIT_MS);
            weft_cr_worker_lost(&r->w[i], "did not leave");
        }
    weft_cr_boot_close(r);
    weft_cr_rdv_close(r);
    uv_poll_stop(&r->link_poll);
    uv_close((uv_handle_t *)&r->link_poll, NULL);
    uv_timer_stop(&r->tick);
    uv_close((uv_handle_t *)&r->tick, NULL);
}

static void cr_stop(struct weft_runner *base)
{
    struct cluster_runner *r = (struct cluster_runner *)base;
    r->stopping = true;
    r->stop_deadline = weft_cr_now() + STOP_WAIT_MS / 1e3;
    if (weft_cr_active_jobs(r) == 0) {
        weft_cr_shutdown(r);
        return;
    }
    for (int i = 0; i < MAX_WORKERS; i++) /* shut down when the last FINISHED goes out */
        if (r->jobs[i].active)
            weft_cr_cancel(base, r->jobs[i].key);
}

static void cr_destroy(struct weft_runner *base)
{
    struct cluster_runner *r = (struct cluster_runner *)base;
    weft_link_host_destroy(r->host); /* closes every link */
    weft_rdv_server_destroy(r->rdv);
    weft_cr_devmap_drop(r);
    weft_cr_auto_cleanup(r);
    for (int i = 0; i < MAX_WORKERS; i++)
        cJSON_Delete(r->w[i].hello);
    weft_free(r);
}

static const struct weft_runner_ops cluster_ops = {
    .name = "cluster",
    .start = weft_cr_start,
    .cancel = weft_cr_cancel,
    .capacity = cr_capacity,
    .unavailable = cr_unavailable,
    .layout = cr_layout,
    .started_layout = cr_started_layout,
    .check_layouts = cr_check_layouts,
    .demand = weft_cr_demand,
    .layout_reason = weft_cr_layout_reason,
    .describe = cr_describe,
    .metrics = cr_metrics,
    .stop = cr_stop,
    .destroy = cr_destroy,
};

/* [parallel] groups: every group against the model, and their workers against [cluster]. check
 * (layout() before a plan) is as many single-device replicas as the groups have replicas: the
 * coordinator checks each job against every group besides (cr_check_layouts). */
static weft_status_t check_groups(const struct weft_cluster_runner_opts *opts,
                                  struct cr_plan *plan, struct weft_layout *check,
                                  struct weft_error *err)
{
    const struct weft_conf *c = opts->conf;
    const struct weft_conf_parallel *p = &c->parallel;
    if (weft_cr_degrees_set(p))
        return weft_error_refuse(err, WEFT_ERR_CONFIG,
                                 "[parallel] groups sets the degrees of each group: leave "
                                 "tp_degree, ulysses_degree, ring_degree, dp_degree and "
                                 "cfg_degree at 1");
    if (c->device_map.strategy != WEFT_DEVMAP_NONE)
        return weft_error_refuse(err, WEFT_ERR_CONFIG,
                                 "[parallel] groups does not combine with [device_map] in this "
                                 "version: leave one of them unset");
    struct weft_layout base;
    weft_layout_from_conf(c, 0, &base);
    weft_status_t st = weft_layout_parse_groups(p->groups, &base, plan->g, &plan->n, err);
    if (st != WEFT_OK)
        return st;
    for (int g = 0; g < plan->n; g++) {
        const struct weft_layout *l = &plan->g[g];
        struct weft_error why = WEFT_ERROR_INIT;
        char name[96];
        weft_layout_name(l, name, sizeof(name));
        if (weft_model_check_layout(opts->model, l, &c->tp_plan, &why) != WEFT_OK)
            return weft_error_refuse(err, WEFT_ERR_CONFIG, "[parallel] groups: group %d (%s): "
                                     "%s", g + 1, name, weft_error_text(&why));
    }
    weft_layout_single(check);
    check->mesh.dp = weft_cr_plan_replicas(plan);
    const int workers = weft_cr_plan_workers(plan);
    if (workers > MAX_WORKERS)
        return weft_error_refuse(err, WEFT_ERR_CONFIG,
                                 "[parallel] groups (\"%s\") takes %d workers; a cluster holds "
                                 "at most %d", p->groups, workers, MAX_WORKERS);
    if (c->cluster.workers && c->cluster.workers != workers)
        return weft_error_refuse(err, WEFT_ERR_CONFIG,
                                 "[cluster] workers is %lld but [parallel] groups takes %d "
                                 "(\"%s\"): make them agree, or leave workers at 0",
                                 (long long)c->cluster.workers, workers, p->groups);
    return WEFT_OK;
}

/* Everything that needs no worker: the layout against the model (degrees, plans, device_map's
 * combinations and replica size) and a device map for max_memory alone; with [parallel]
 * groups, each group's (check_groups). */
static weft_status_t check_start(const struct weft_cluster_runner_opts *opts,
                                 struct cr_plan *plan, struct weft_layout *check,
                                 struct weft_error *err)
{
    const struct weft_conf *c = opts->conf;
    if (c->parallel.groups[0] && c->parallel.mode != WEFT_PARALLEL_AUTO)
        return check_groups(opts, plan, check, err);
    struct weft_layout *layout = check;
    plan->n = 1;
    const bool devmap = c->device_map.strategy != WEFT_DEVMAP_NONE;
    const int64_t workers = c->cluster.workers, dp = c->parallel.dp_degree;
    if (devmap && (workers < 1 || workers % dp))
        return weft_error_refuse(err, WEFT_ERR_CONFIG,
                                 "[device_map] needs [cluster] workers = dp_degree x devices per "
                                 "replica (workers %lld, dp_degree %lld)", (long long)workers,
                                 (long long)dp);
    weft_layout_from_conf(c, devmap ? (int)(workers / dp) : 0, layout);
    plan->g[0] = *layout;
    weft_status_t st = weft_model_check_layout(opts->model, layout, &c->tp_plan, err);
    if (st != WEFT_OK || !devmap)
        return st;
    struct weft_max_memory mm;
    char why[200];
    if (weft_conf_parse_max_memory(c->device_map.max_memory, &mm, why, sizeof(why)) != WEFT_OK)
        return weft_error_refuse(err, WEFT_ERR_CONFIG, "[device_map] max_memory: %s", why);
    struct weft_devmap map;
    struct weft_devmap_unit *units = NULL;
    struct weft_devmap_component comps[WEFT_DEVMAP_PIPELINE_MAX];
    st = weft_devmap_plan_model(opts->model, (enum weft_devmap_strategy)c->device_map.strategy,
                                layout->mesh.pp, NULL, &mm, &map, &units, comps, err);
    if (st == WEFT_OK)
        weft_devmap_cleanup(&map);
    weft_free(units);
    return st;
}

weft_status_t weft_cluster_runner_create(const struct weft_cluster_runner_opts *opts,
                                         uv_loop_t *loop, struct weft_runner_sink *sink,
                                         struct weft_runner **runner_p, struct weft_error *err)
{
    if (!opts->secret || !opts->secret[0])
        return weft_error_refuse(err, WEFT_ERR_CONFIG,
                                 "no cluster secret: set [cluster] secret or secret_file");
    struct cr_plan plan;
    struct weft_layout check;
    weft_status_t st = check_start(opts, &plan, &check, err);
    if (st != WEFT_OK)
        return st;
    struct cluster_runner *r = weft_calloc(1, sizeof(*r));
    if (!r)
        return weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
    r->base.ops = &cluster_ops;
    r->loop = loop;
    r->sink = sink;
    r->conf = opts->conf;
    r->model = opts->model;
    r->plan = plan;
    r->check = check;
    r->started_group = -1;
    snprintf(r->model_dir, sizeof(r->model_dir), "%s", opts->model_dir);
    snprintf(r->secret, sizeof(r->secret), "%s", opts->secret);
    for (int i = 0; i < MAX_WORKERS; i++) {
        r->w[i].r = r;
        r->w[i].rank = -1;
        r->w[i].group = -1;
        r->replica_job[i] = -1;
    }
    if ((st = weft_cr_auto_init(r, err)) != WEFT_OK) {
        weft_free(r);
        return st;
    }
    st = weft_link_host_create(opts->conf->transport.tls[0] ? opts->conf->transport.tls : NULL,
                               weft_cr_on_accept, r, &r->host);
    if (st != WEFT_OK) { /* the transport logged why */
        weft_cr_auto_cleanup(r);
        weft_free(r);
        return weft_error_refuse(err, st, "cannot open the workers' control links: %s",
                                 weft_status_str(st));
    }
    if ((st = weft_cr_listen(r, opts->conf->cluster.listen, opts->port_file, err)) != WEFT_OK) {
        weft_link_host_destroy(r->host);
        weft_cr_auto_cleanup(r);
        weft_free(r);
        return st;
    }
    uv_poll_init(loop, &r->link_poll, weft_link_host_fd(r->host));
    r->link_poll.data = r;
    uv_poll_start(&r->link_poll, UV_READABLE, on_link_fd);
    uv_timer_init(loop, &r->tick);
    r->tick.data = r;
    uv_timer_start(&r->tick, on_tick, TICK_MS, TICK_MS);
    *runner_p = &r->base;
    return WEFT_OK;
}
