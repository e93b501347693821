/* Planning (see internal.h): the mesh from the workers there are (dp x ring x ulysses x tp
 * from [parallel], or replicas of device_map stages), the data-plane rendezvous, one ASSIGN per
 * worker, and their answers. A refused assignment makes the runner unavailable with the
 * worker's reason until the workers change. */
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "coordinator/cluster/internal.h"

int weft_cr_joined(const struct cluster_runner *r)
{
    int n = 0;
    for (int i = 0; i < MAX_WORKERS; i++)
        n += r->w[i].state == W_JOINED;
    return n;
}

int weft_cr_authed(const struct cluster_runner *r)
{
    int n = 0;
    for (int i = 0; i < MAX_WORKERS; i++)
        n += r->w[i].state == W_AUTHED;
    return n;
}

void weft_cr_rdv_close(struct cluster_runner *r)
{
    if (r->rdv_poll_open) {
        uv_poll_stop(&r->rdv_poll);
        uv_close((uv_handle_t *)&r->rdv_poll, NULL);
        r->rdv_poll_open = false;
    }
    weft_rdv_server_destroy(r->rdv);
    r->rdv = NULL;
}

void weft_cr_rdv_progress(struct cluster_runner *r)
{
    if (r->rdv && weft_rdv_server_progress(r->rdv, 0) == WEFT_OK)
        weft_cr_rdv_close(r); /* every rank has the table */
}

static void on_rdv(uv_poll_t *h, int status, int events)
{
    (void)status, (void)events;
    weft_cr_rdv_progress(h->data);
}

void weft_cr_plan_reset(struct cluster_runner *r)
{
    weft_cr_rdv_close(r);
    const bool had = r->planned || r->assigning;
    r->planned = r->assigning = false;
    r->epoch++;
    const union weft_msg m = {.epoch = {r->epoch}};
    for (int i = 0; i < MAX_WORKERS; i++) {
        struct worker *w = &r->w[i];
        if (w->rank >= 0 && w->state == W_JOINED)
            (void)weft_cr_send(w, WEFT_MSG_RESET, &m);
        w->rank = -1;
        w->assigned = 0;
    }
    if (had)
        weft_cr_post_capacity(r);
}

void weft_cr_devmap_drop(struct cluster_runner *r)
{
    weft_devmap_cleanup(&r->map);
    weft_free(r->map_units);
    r->map_units = NULL;
    memset(&r->map, 0, sizeof(r->map));
}

/* device_map: place the pipeline on the pp devices of a replica (device d of every replica
 * bounded by the least memory any replica's device d reported, and by max_memory). */
static weft_status_t devmap_plan(struct cluster_runner *r, struct worker **ranked, int n, int pp)
{
    uint64_t room[WEFT_DEVMAP_MAX_DEVICES] = {0};
    for (int k = 0; k < n; k++) {
        uint64_t b;
        bool shared;
        if (!weft_boot_inventory_memory(ranked[k]->hello, &b, &shared))
            b = 0;
        int d = k % pp;
        if (b && (!room[d] || b < room[d]))
            room[d] = b;
    }
    struct weft_max_memory mm;
    char why[200];
    if (weft_conf_parse_max_memory(r->conf->device_map.max_memory, &mm, why, sizeof(why)) !=
        WEFT_OK) {
        snprintf(r->plan_error, sizeof(r->plan_error), "[device_map] max_memory: %s", why);
        return WEFT_ERR_CONFIG;
    }
    weft_cr_devmap_drop(r);
    struct weft_error err = WEFT_ERROR_INIT;
    weft_status_t st = weft_devmap_plan_model(
        r->model,
        r->auto_mode ? WEFT_DEVMAP_BALANCED : (enum weft_devmap_strategy)r->conf->device_map.strategy,
        pp, room, &mm,
        &r->map, &r->map_units, r->map_comps, &err);
    if (st != WEFT_OK)
        snprintf(r->plan_error, sizeof(r->plan_error), "%s", weft_error_text(&err));
    return st;
}

/* The stage of device d: its transformer units, its neighbours and the output device in the
 * pipe group (device order), the devices that run the text encoders, and whether it
 * decodes. */
static void devmap_stage(const struct cluster_runner *r, int d, struct weft_msg_stage *s,
                         bool *decode_p)
{
    const struct weft_devmap *m = &r->map;
    const int tf = weft_devmap_find(m, "transformer");
    int first[WEFT_DEVMAP_MAX_DEVICES] = {0}, last[WEFT_DEVMAP_MAX_DEVICES] = {0};
    int prev = -1, next = -1, root = 0;
    for (int k = 0; k < m->n_devices; k++) {
        if (!weft_devmap_range(m, tf, k, &first[k], &last[k]))
            first[k] = last[k] = 0;
        if (last[k] == m->components[tf].n_units)
            root = k;
    }
    if (first[d] < last[d]) {
        for (int k = 0; k < m->n_devices; k++) {
            if (first[k] < last[k] && k < d)
                prev = k;
            if (first[k] < last[k] && k > d && next < 0)
                next = k;
        }
    }
    *decode_p = weft_devmap_decode_device(m) == d;
    *s = (struct weft_msg_stage){true, first[d], last[d], prev, next, root,
                                 weft_devmap_component_device(m, "text_encoder"),
                                 weft_devmap_component_device(m, "text_encoder_2")};
}

int weft_cr_plan_replicas(const struct cr_plan *p)
{
    int n = 0;
    for (int g = 0; g < p->n; g++)
        n += p->g[g].mesh.dp;
    return n;
}

int weft_cr_plan_workers(const struct cr_plan *p)
{
    return weft_layout_groups_devices(p->g, p->n);
}

int weft_cr_plan_group(const struct cr_plan *p, int rep, int *rep0_p, int *base_p)
{
    int rep0 = 0, base = 0;
    for (int g = 0; g < p->n; g++) {
        if (rep >= rep0 && rep < rep0 + p->g[g].mesh.dp) {
            *rep0_p = rep0;
            *base_p = base;
            return g;
        }
        rep0 += p->g[g].mesh.dp;
        base += p->g[g].mesh.dp * weft_layout_replica_devices(&p->g[g]);
    }
    return -1;
}

void weft_cr_plan_name(const struct cr_plan *p, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int g = 0; g < p->n && n + 1 < len; g++) {
        if (g)
            n += (size_t)snprintf(buf + n, len - n, " + ");
        if (n + 1 < len)
            weft_layout_name(&p->g[g], buf + n, len - n);
        n += strlen(buf + n);
    }
}

/* The mesh the workers there are make now, into out (0 workers: not yet). One layout takes
 * [cluster] workers (or dp_degree replicas); [parallel] groups take theirs. After a loss it
 * shrinks to whole replicas of the workers left: first one replica of each group, in order,
 * then the groups' other replicas, in order (a group with none left is dropped). */
static int mesh_workers(const struct cluster_runner *r, struct cr_plan *out,
                        int plan_group[WEFT_CR_GROUPS])
{
    struct cr_plan p = r->plan;
    if (p.n == 1 && !r->conf->parallel.groups[0]) { /* one layout over the workers */
        const int per = weft_layout_replica_devices(&p.g[0]);
        p.g[0].mesh.dp = r->conf->cluster.workers ? (int)r->conf->cluster.workers / per
                                                  : (int)r->conf->parallel.dp_degree;
    }
    const int want = weft_cr_plan_workers(&p);
    const int joined = weft_cr_joined(r);
    int left = joined >= want ? want : (r->epoch > 0 ? joined : 0);
    /* the groups in the order they get their first replica: those with the most of their
     * workers still here first (after a loss, an intact group stays whole and keeps its
     * weights), then in order */
    int present[WEFT_CR_GROUPS] = {0}, order[WEFT_CR_GROUPS];
    for (int i = 0; i < MAX_WORKERS; i++)
        if (r->w[i].state == W_JOINED && r->w[i].group >= 0 && r->w[i].group < p.n)
            present[r->w[i].group]++;
    for (int g = 0; g < p.n; g++) {
        int at = g;
        for (; at > 0 && present[order[at - 1]] < present[g]; at--)
            order[at] = order[at - 1];
        order[at] = g;
    }
    int dp[WEFT_CR_GROUPS] = {0};
    for (int pass = 0; pass < 2; pass++) {
        for (int o = 0; o < p.n; o++) {
            const int g = pass == 0 ? order[o] : o;
            const int per = weft_layout_replica_devices(&p.g[g]);
            int more = pass == 0 ? 1 : p.g[g].mesh.dp - dp[g];
            more = left / per < more ? left / per : more;
            if (more > 0 && (pass == 1 || dp[g] == 0))
                dp[g] += more, left -= more * per;
        }
    }
    out->n = 0;
    for (int g = 0; g < p.n; g++) {
        if (dp[g] < 1)
            continue;
        plan_group[out->n] = g;
        out->g[out->n] = p.g[g];
        out->g[out->n++].mesh.dp = dp[g];
    }
    return weft_cr_plan_workers(out);
}

/* The host a worker runs on, as its inventory names it: the kernel's boot id (one per booted
 * machine, whatever its names), else its host name. */
const char *weft_cr_host_key(const struct worker *w)
{
    const cJSON *id = w->hello ? cJSON_GetObjectItemCaseSensitive(w->hello, "host_id") : NULL;
    return id && cJSON_IsString(id) && id->valuestring[0] ? id->valuestring : w->host;
}

/* CPU kernel threads for the worker of mesh rank `rank`: its share of its host's cores among
 * the plan's workers there that compute at the same time (every worker; with device_map the
 * stages of one replica run in turn, so one per replica), at least 1. 0 (the worker keeps its
 * own) when it was started with a thread count or did not report its cores. */
static int32_t thread_share(const struct cluster_runner *r, struct worker *const *ranked, int n,
                            int rank)
{
    const cJSON *inv = ranked[rank]->hello;
    const cJSON *fixed = inv ? cJSON_GetObjectItemCaseSensitive(inv, "threads_fixed") : NULL;
    const cJSON *cores = inv ? cJSON_GetObjectItemCaseSensitive(inv, "cores") : NULL;
    if (cJSON_IsTrue(fixed) || !cores || !cJSON_IsNumber(cores) || cores->valuedouble < 1)
        return 0;
    const char *key = weft_cr_host_key(ranked[rank]);
    bool seen[MAX_WORKERS] = {false};
    int busy = 0;
    for (int k = 0; k < n; k++) {
        if (strcmp(weft_cr_host_key(ranked[k]), key) != 0)
            continue;
        if (r->mesh.g[0].device_map) { /* one group */
            struct weft_mesh_coord c;
            weft_mesh_coord(&r->mesh.g[0].mesh, k, &c);
            if (seen[c.dp])
                continue;
            seen[c.dp] = true;
        }
        busy++;
    }
    const double share = cores->valuedouble / (busy > 0 ? busy : 1);
    return share >= 1024 ? 1024 : share >= 1 ? (int32_t)share : 1;
}

/* The ASSIGN of the worker of world rank `rank`, in group g of the mesh (its first world rank
 * base, its first replica rep0). */
static void assign_one(struct cluster_runner *r, struct worker *w, int g, int base, int rep0,
                       int rank, const char *rdv, struct weft_msg_assign *m)
{
    const struct weft_layout *l = &r->mesh.g[g];
    const bool devmap = l->device_map;
    struct weft_mesh_coord c;
    weft_mesh_coord(&l->mesh, rank - base, &c);
    bool decode = c.cfg == 0 && c.ring == 0 && c.ulysses == 0 && c.tp == 0 && c.pp == 0;
    memset(m, 0, sizeof(*m));
    m->epoch = r->epoch;
    snprintf(m->model, sizeof(m->model), "%s", r->model_dir);
    snprintf(m->rdv, sizeof(m->rdv), "%s", rdv);
    m->world_size = r->n_mesh;
    m->world_rank = rank;
    m->world_base = base;
    m->layout = *l;
    m->tp_full_then_shard = r->conf->parallel.tp_load == 1;
    if (devmap)
        devmap_stage(r, c.pp, &m->stage, &decode);
    m->decode = decode;
    m->compute = r->conf->model.dtype;
    m->tp_plan = r->conf->tp_plan;
    w->rank = rank;
    w->group = r->mesh_group[g];
    w->replica = rep0 + c.dp;
    w->decode = decode;
    w->assigned = 0;
}

/* The data-plane rendezvous of an n-rank world; rdv gets its address ("" for one rank). */
static weft_status_t open_rdv(struct cluster_runner *r, int n, char *rdv, size_t len)
{
    rdv[0] = '\0';
    if (n <= 1)
        return WEFT_OK;
    struct weft_error err = WEFT_ERROR_INIT;
    if (weft_rdv_server_create(r->listen_host, 0, n, &r->rdv, &err) != WEFT_OK) {
        snprintf(r->plan_error, sizeof(r->plan_error), "cannot open a rendezvous: %s",
                 weft_error_text(&err));
        return WEFT_ERR_IO;
    }
    snprintf(rdv, len, "%s:%u", r->listen_host, (unsigned)weft_rdv_server_port(r->rdv));
    uv_poll_init(r->loop, &r->rdv_poll, weft_rdv_server_fd(r->rdv));
    r->rdv_poll.data = r;
    uv_poll_start(&r->rdv_poll, UV_READABLE, on_rdv);
    r->rdv_poll_open = true;
    return WEFT_OK;
}

/* After losses the mesh shrank to the workers left; when workers have joined since, it grows
 * back at the first moment no job runs on it (a new plan reloads every worker). */
static bool should_grow(struct cluster_runner *r)
{
    struct cr_plan p;
    int g[WEFT_CR_GROUPS];
    return r->planned && !r->assigning && weft_cr_active_jobs(r) == 0 &&
           mesh_workers(r, &p, g) > r->n_mesh;
}

void weft_cr_plan_maybe(struct cluster_runner *r)
{
    if (!r->stopping && !r->plan_error[0] && should_grow(r)) {
        WEFT_LOG_INFO("cluster", "%d workers can serve, the mesh has %d: planning again",
                      weft_cr_joined(r), r->n_mesh);
        weft_cr_plan_reset(r);
    }
    if (r->planned || r->assigning || r->stopping || r->plan_error[0])
        return;
    if (r->auto_mode && r->epoch == 0 && weft_cr_joined(r) < (int)r->conf->cluster.workers)
        return; /* the first plan waits for every worker: it plans over them */
    weft_cr_auto_prepare(r);
    struct cr_plan mesh;
    int plan_group[WEFT_CR_GROUPS];
    const int n = mesh_workers(r, &mesh, plan_group);
    if (n == 0)
        return;
    /* world ranks group by group: each group's workers of the last plan where they still are
     * (their loaded weights fit), then the other joined workers in their order */
    struct worker *ranked[MAX_WORKERS] = {NULL};
    bool taken[MAX_WORKERS] = {false};
    for (int g = 0, base = 0; g < mesh.n; g++) {
        const int size = mesh.g[g].mesh.dp * weft_layout_replica_devices(&mesh.g[g]);
        for (int i = 0, k = base; i < MAX_WORKERS && k < base + size; i++)
            if (r->w[i].state == W_JOINED && r->w[i].group == plan_group[g] && !taken[i])
                ranked[k++] = &r->w[i], taken[i] = true;
        base += size;
    }
    for (int k = 0, i = 0; k < n; k++) {
        for (; !ranked[k] && i < MAX_WORKERS; i++)
            if (r->w[i].state == W_JOINED && !taken[i])
                ranked[k] = &r->w[i], taken[i] = true;
    }
    r->mesh = mesh;
    memcpy(r->mesh_group, plan_group, sizeof(r->mesh_group));
    if (mesh.g[0].device_map &&
        devmap_plan(r, ranked, n, weft_layout_replica_devices(&mesh.g[0])) != WEFT_OK) {
        WEFT_LOG_ERROR("cluster", "%s", r->plan_error);
        weft_cr_post_capacity(r);
        return;
    }
    r->n_mesh = n;
    char rdv[WEFT_MSG_ADDR_MAX];
    if (open_rdv(r, n, rdv, sizeof(rdv)) != WEFT_OK) {
        WEFT_LOG_ERROR("cluster", "%s", r->plan_error);
        weft_cr_post_capacity(r);
        return;
    }
    r->assigning = true;
    r->plan_started = weft_cr_now();
    r->plan_kept = 0;
    for (int rep = 0; rep < MAX_WORKERS; rep++)
        r->replica_job[rep] = -1; /* no job runs across a new plan (they were stopped) */
    struct weft_msg_assign *m = weft_malloc(sizeof(*m));
    for (int g = 0, base = 0, rep0 = 0; g < mesh.n; g++) {
        const int size = mesh.g[g].mesh.dp * weft_layout_replica_devices(&mesh.g[g]);
        for (int rank = base; rank < base + size; rank++) {
            if (!m) {
                weft_cr_worker_lost(ranked[rank], "no memory for its assignment");
                return;
            }
            assign_one(r, ranked[rank], g, base, rep0, rank, rdv, m);
            m->threads = thread_share(r, ranked, n, rank);
            /* a worker whose link is gone is lost by its link's end, which plans again */
            (void)weft_cr_send(ranked[rank], WEFT_MSG_ASSIGN, (const union weft_msg *)m);
        }
        base += size;
        rep0 += mesh.g[g].mesh.dp;
    }
    weft_free(m);
    char name[96 * WEFT_CR_GROUPS];
    weft_cr_plan_name(&r->mesh, name, sizeof(name));
    WEFT_LOG_INFO("cluster", "epoch %llu: %s on %d workers", (unsigned long long)r->epoch, name,
                  n);
}

void weft_cr_on_assigned(struct cluster_runner *r, struct worker *w,
                         const struct weft_msg_assigned *m)
{
    if (m->epoch != r->epoch || !r->assigning || w->rank < 0)
        return; /* an answer to an older plan */
    if (m->status != WEFT_OK) {
        snprintf(r->plan_error, sizeof(r->plan_error), "worker %s (%s, pid %ld) could not take "
                 "its assignment: %s", w->id, w->host, w->pid,
                 m->error[0] ? m->error : weft_status_str((weft_status_t)m->status));
        WEFT_LOG_ERROR("cluster", "%s", r->plan_error);
        weft_cr_plan_reset(r);
        weft_cr_post_capacity(r); /* unavailable() changed: the queued jobs fail with it */
        return;
    }
    w->transformer_bytes = m->transformer_bytes;
    w->threads = m->threads;
    w->vae_bytes = m->vae_bytes;
    w->text_bytes = m->text_bytes;
    w->assigned = 1;
    r->kept_bytes += m->kept_bytes;
    r->plan_kept += m->kept_bytes;
    int done = 0;
    for (int i = 0; i < MAX_WORKERS; i++)
        done += r->w[i].rank >= 0 && r->w[i].assigned;
    if (done == r->n_mesh) {
        r->assigning = false;
        r->planned = true;
        /* what this plan cost, for auto's switching decisions */
        uint64_t held = 0;
        for (int i = 0; i < MAX_WORKERS; i++)
            if (r->w[i].rank >= 0)
                held += r->w[i].transformer_bytes + r->w[i].vae_bytes;
        const double dt = weft_cr_now() - r->plan_started;
        if (held > r->plan_kept && dt > 0)
            r->load_bps = (double)(held - r->plan_kept) / (double)r->n_mesh / dt;
        else if (r->plan_kept)
            r->plan_kept_s = dt;
        WEFT_LOG_INFO("cluster", "epoch %llu: every worker is loaded; serving",
                      (unsigned long long)r->epoch);
        weft_cr_post_capacity(r);
        weft_cr_plan_maybe(r); /* workers that joined while it formed: grow now it is idle */
    }
}
