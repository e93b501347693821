/* The cluster runner (see cluster_runner.h). */
#include "coordinator/cluster_runner.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/sha256.h"
#include "control/proto.h"
#include "model/checkpoint.h"
#include "model/devmap.h"
#include "model/flux.h"
#include "model/mesh.h"
#include "model/safetensors.h"
#include "transport/comm.h"
#include "transport/link.h"

#define MAX_WORKERS 256
#define STOP_WAIT_MS 3000 /* after stop(), how long running jobs may take to stop */
#define TICK_MS 20

enum wstate {
    W_FREE,
    W_BOOT,   /* TCP connected, challenge sent */
    W_AUTHED, /* proved the secret, waiting for its link's HELLO */
    W_JOINED, /* control link up */
};

struct worker {
    struct cluster_runner *r;
    enum wstate state;
    int index;
    char id[16], host[256];
    long pid;
    cJSON *hello;
    uv_tcp_t tcp;
    int tcp_open;
    char challenge[65];
    uint8_t *rbuf;
    size_t rlen, rcap;
    struct weft_link *link;
    double last_heard;
    /* the current plan */
    int rank; /* world rank, -1 when outside the mesh */
    int replica, decode, assigned;
    uint64_t transformer_bytes, vae_bytes;
};

struct job_run {
    uint64_t key;
    int active;
    int pending; /* replicas still running */
    weft_status_t status;
    char reason[256];
    char out_dir[1024];
    char id[64];
};

struct cluster_runner {
    struct weft_runner base;
    uv_loop_t *loop;
    struct weft_runner_sink *sink;
    const struct weft_conf *conf;
    char model_dir[WEFT_CONF_PATH], secret[WEFT_CONF_STR], listen_host[256];
    struct weft_flux_config flux;
    uv_tcp_t server;
    uv_poll_t link_poll;
    uv_timer_t tick;
    double next_ping;
    struct weft_link_host *host;
    struct worker w[MAX_WORKERS];
    int next_id;
    /* planning */
    int epoch, planned, assigning;
    char plan_error[256];
    struct weft_mesh mesh;
    int n_mesh;
    /* device_map: the placement of the current plan (map.n_devices 0: none) */
    struct weft_devmap map;
    struct weft_devmap_unit *map_units;
    struct weft_devmap_component map_comps[2];
    struct weft_rdv_server *rdv;
    uv_poll_t rdv_poll;
    int rdv_poll_open;
    /* jobs run side by side, each on its own data-parallel replicas */
    struct job_run jobs[MAX_WORKERS];
    int replica_job[MAX_WORKERS]; /* per replica: its job's index in jobs, -1 free */
    int stopping, closed;
    double stop_deadline; /* stopping: jobs not finished by then are given up */
    uint64_t jobs_done, images_done, workers_lost;
    /* the workers' collectives, summed over jobs and ranks, per process-group kind and op */
    struct comm_total {
        char group[16], op[16];
        double seconds, bytes, calls;
    } comm[32];
    int n_comm;
};

static double now_s(void)
{
    return (double)uv_hrtime() * 1e-9;
}

static void post(struct cluster_runner *r, struct weft_runner_event *ev)
{
    weft_runner_post(r->sink, ev);
}

static void post_capacity(struct cluster_runner *r)
{
    struct weft_runner_event ev = {.kind = WEFT_RUNNER_EV_CAPACITY};
    post(r, &ev);
}

static weft_status_t send_to(struct worker *w, unsigned type, cJSON *json, const void *tail,
                             size_t tail_len)
{
    if (w->state != W_JOINED || !w->link) {
        cJSON_Delete(json);
        return WEFT_ERR_PEER_LOST;
    }
    void *buf;
    size_t len;
    weft_status_t st = weft_msg_pack(json, tail, tail_len, &buf, &len);
    cJSON_Delete(json);
    if (st == WEFT_OK) {
        st = weft_link_send(w->link, (uint16_t)type, buf, len);
        weft_free(buf);
    }
    return st;
}

static void plan_maybe(struct cluster_runner *r);
static void worker_lost(struct worker *w, const char *why);

/* ---------------------------------------------------------------------------------------- */
/* Jobs                                                                                      */

static void shutdown_cluster(struct cluster_runner *r);

/* The running job a worker's message names by its key, or NULL. */
static struct job_run *job_find(struct cluster_runner *r, const cJSON *key)
{
    if (!cJSON_IsNumber(key))
        return NULL;
    for (int i = 0; i < MAX_WORKERS; i++)
        if (r->jobs[i].active && r->jobs[i].key == (uint64_t)key->valuedouble)
            return &r->jobs[i];
    return NULL;
}

static int active_jobs(const struct cluster_runner *r)
{
    int n = 0;
    for (int i = 0; i < MAX_WORKERS; i++)
        n += r->jobs[i].active;
    return n;
}

static int free_replicas(const struct cluster_runner *r)
{
    int n = 0;
    for (int rep = 0; rep < r->mesh.dp && rep < MAX_WORKERS; rep++)
        n += r->replica_job[rep] < 0;
    return n;
}

static void job_finish(struct cluster_runner *r, struct job_run *jr)
{
    struct weft_runner_event ev = {.kind = WEFT_RUNNER_EV_FINISHED, .job = jr->key,
                                   .status = jr->status};
    snprintf(ev.reason, sizeof(ev.reason), "%s", jr->reason);
    const int index = (int)(jr - r->jobs);
    for (int rep = 0; rep < MAX_WORKERS; rep++)
        if (r->replica_job[rep] == index)
            r->replica_job[rep] = -1;
    jr->active = 0;
    r->jobs_done++;
    post(r, &ev);
    if (r->stopping && active_jobs(r) == 0)
        shutdown_cluster(r);
}

static void job_fail(struct job_run *jr, weft_status_t st, const char *reason)
{
    if (jr->status == WEFT_OK || jr->status == WEFT_ERR_CANCELLED) {
        jr->status = st;
        snprintf(jr->reason, sizeof(jr->reason), "%s", reason);
    }
}

/* Every prompt's prompt_embeds then pooled_prompt_embeds, as floats, one after another. */
static weft_status_t load_prompts(struct cluster_runner *r, const struct weft_runner_job *job,
                                  cJSON *prompts, float **tail_p, size_t *len_p)
{
    size_t len = 0, cap = 0;
    float *tail = NULL;
    weft_status_t st = WEFT_OK;
    for (int i = 0; i < job->n_prompts && st == WEFT_OK; i++) {
        struct weft_st_file *f;
        if ((st = weft_st_open(job->prompt_paths[i], &f)) != WEFT_OK)
            break;
        const struct weft_st_tensor *pe = weft_st_find(f, "prompt_embeds");
        const struct weft_st_tensor *po = weft_st_find(f, "pooled_prompt_embeds");
        if (!pe || !po || pe->ndim != 3 || pe->shape[2] != r->flux.joint_attention_dim ||
            po->numel != r->flux.pooled_projection_dim) {
            WEFT_LOG_ERROR("cluster", "%s: prompt embeddings do not fit the model",
                           job->prompt_paths[i]);
            st = WEFT_ERR_FORMAT;
        } else {
            size_t need = (size_t)(pe->numel + po->numel);
            if (len + need > cap) {
                cap = (len + need) * 2;
                float *nt = weft_realloc(tail, cap * sizeof(float));
                if (!nt)
                    st = WEFT_ERR_NOMEM;
                else
                    tail = nt;
            }
            if (st == WEFT_OK && (st = weft_st_read(f, pe, tail + len, WEFT_DTYPE_F32)) ==
                                     WEFT_OK)
                st = weft_st_read(f, po, tail + len + pe->numel, WEFT_DTYPE_F32);
            len += need;
            cJSON *p = cJSON_CreateObject();
            cJSON_AddNumberToObject(p, "s_txt", (double)pe->shape[1]);
            cJSON_AddNumberToObject(p, "joint", (double)pe->shape[2]);
            cJSON_AddNumberToObject(p, "pooled", (double)po->numel);
            const char *slash = strrchr(job->prompt_paths[i], '/');
            cJSON_AddStringToObject(p, "name", slash ? slash + 1 : job->prompt_paths[i]);
            cJSON_AddItemToArray(prompts, p);
        }
        weft_st_close(f);
    }
    if (st != WEFT_OK) {
        weft_free(tail);
        return st;
    }
    *tail_p = tail;
    *len_p = len * sizeof(float);
    return WEFT_OK;
}

static weft_status_t cr_start(struct weft_runner *base, const struct weft_runner_job *job)
{
    struct cluster_runner *r = (struct cluster_runner *)base;
    int reps[MAX_WORKERS], n_free = 0, slot = -1;
    for (int rep = 0; rep < r->mesh.dp && rep < MAX_WORKERS; rep++)
        if (r->replica_job[rep] < 0)
            reps[n_free++] = rep;
    for (int i = 0; i < MAX_WORKERS && slot < 0; i++)
        if (!r->jobs[i].active)
            slot = i;
    if (!r->planned || r->stopping || n_free == 0 || slot < 0) {
        WEFT_LOG_ERROR("cluster", "job %s: the cluster is not ready or has no free replica",
                       job->id);
        return WEFT_ERR_BUSY;
    }
    cJSON *prompts = cJSON_CreateArray();
    float *tail = NULL;
    size_t tail_len = 0;
    weft_status_t st = load_prompts(r, job, prompts, &tail, &tail_len);
    if (st != WEFT_OK) {
        cJSON_Delete(prompts);
        return st;
    }
    struct job_run *jr = &r->jobs[slot];
    memset(jr, 0, sizeof(*jr));
    jr->key = job->key;
    jr->active = 1;
    snprintf(jr->out_dir, sizeof(jr->out_dir), "%s", job->out_dir);
    snprintf(jr->id, sizeof(jr->id), "%s", job->id);
    /* the free replicas, no more than there are images; split_between_processes over them:
     * contiguous chunks, the first ones one longer (an image's noise depends on its index
     * only, so the split changes no pixel) */
    const int64_t n_img = (int64_t)job->n_prompts * job->count;
    const int dp = n_img < n_free ? (int)n_img : n_free;
    for (int k = 0; k < dp; k++) {
        const int rep = reps[k];
        int64_t first = n_img / dp * k + (k < n_img % dp ? k : n_img % dp);
        int64_t count = n_img / dp + (k < n_img % dp);
        r->replica_job[rep] = slot;
        jr->pending++;
        for (int i = 0; i < MAX_WORKERS; i++) {
            struct worker *w = &r->w[i];
            if (w->state != W_JOINED || w->rank < 0 || w->replica != rep)
                continue;
            cJSON *m = cJSON_CreateObject();
            cJSON_AddNumberToObject(m, "job", (double)job->key);
            cJSON_AddNumberToObject(m, "height", (double)job->height);
            cJSON_AddNumberToObject(m, "width", (double)job->width);
            cJSON_AddNumberToObject(m, "steps", (double)job->steps);
            cJSON_AddNumberToObject(m, "guidance", job->guidance);
            cJSON_AddNumberToObject(m, "seed", (double)job->seed);
            cJSON_AddStringToObject(m, "model_name", r->model_dir);
            cJSON_AddItemToObject(m, "prompts", cJSON_Duplicate(prompts, 1));
            cJSON *imgs = cJSON_AddArrayToObject(m, "images");
            for (int64_t x = first; x < first + count; x++) {
                cJSON *pair = cJSON_CreateArray();
                cJSON_AddItemToArray(pair, cJSON_CreateNumber((double)x));
                const int64_t prompt = x / job->count; /* the image's prompt */
                cJSON_AddItemToArray(pair, cJSON_CreateNumber((double)prompt));
                cJSON_AddItemToArray(imgs, pair);
            }
            if (send_to(w, WEFT_MSG_RUN, m, tail, tail_len) != WEFT_OK)
                job_fail(jr, WEFT_ERR_PEER_LOST, "a worker could not be reached");
        }
    }
    cJSON_Delete(prompts);
    weft_free(tail);
    WEFT_LOG_INFO("cluster", "job %s: %lld images on %d of %d replicas", job->id,
                  (long long)n_img, jr->pending, r->mesh.dp);
    if (jr->pending == 0)
        job_finish(r, jr);
    return WEFT_OK;
}

static void cr_cancel(struct weft_runner *base, uint64_t key)
{
    struct cluster_runner *r = (struct cluster_runner *)base;
    struct job_run *jr = NULL;
    for (int i = 0; i < MAX_WORKERS && !jr; i++)
        if (r->jobs[i].active && r->jobs[i].key == key)
            jr = &r->jobs[i];
    if (!jr)
        return;
    job_fail(jr, WEFT_ERR_CANCELLED, "cancelled");
    for (int i = 0; i < MAX_WORKERS; i++) {
        struct worker *w = &r->w[i];
        if (w->state == W_JOINED && w->rank >= 0 && w->decode &&
            r->replica_job[w->replica] == (int)(jr - r->jobs)) {
            cJSON *m = cJSON_CreateObject();
            cJSON_AddNumberToObject(m, "job", (double)key);
            (void)send_to(w, WEFT_MSG_CANCEL, m, NULL, 0);
        }
    }
}

/* Jobs that may run at once: those running, and one more per free replica. */
static int cr_capacity(struct weft_runner *base)
{
    struct cluster_runner *r = (struct cluster_runner *)base;
    return r->planned && !r->stopping ? active_jobs(r) + free_replicas(r) : 0;
}

/* ---------------------------------------------------------------------------------------- */
/* Planning: the mesh, the rendezvous of its data-plane world, the assignments               */

static void rdv_close(struct cluster_runner *r)
{
    if (r->rdv_poll_open) {
        uv_poll_stop(&r->rdv_poll);
        uv_close((uv_handle_t *)&r->rdv_poll, NULL);
        r->rdv_poll_open = 0;
    }
    weft_rdv_server_destroy(r->rdv);
    r->rdv = NULL;
}

static void on_rdv(uv_poll_t *h, int status, int events)
{
    (void)status, (void)events;
    struct cluster_runner *r = h->data;
    if (r->rdv && weft_rdv_server_progress(r->rdv, 0) == WEFT_OK)
        rdv_close(r); /* every rank has the table */
}

/* The mesh breaks (a worker lost, an assignment failed): everyone drops it. */
static void plan_reset(struct cluster_runner *r)
{
    rdv_close(r);
    int had = r->planned || r->assigning;
    r->planned = r->assigning = 0;
    r->epoch++;
    for (int i = 0; i < MAX_WORKERS; i++) {
        struct worker *w = &r->w[i];
        if (w->rank >= 0 && w->state == W_JOINED) {
            cJSON *m = cJSON_CreateObject();
            cJSON_AddNumberToObject(m, "epoch", r->epoch);
            (void)send_to(w, WEFT_MSG_RESET, m, NULL, 0);
        }
        w->rank = -1;
        w->assigned = 0;
    }
    if (had)
        post_capacity(r);
}

static void devmap_drop(struct cluster_runner *r)
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
        const cJSON *mem = ranked[k]->hello
                               ? cJSON_GetObjectItemCaseSensitive(ranked[k]->hello, "memory")
                               : NULL;
        uint64_t b =
            mem && cJSON_IsNumber(mem) && mem->valuedouble > 0 ? (uint64_t)mem->valuedouble : 0;
        int d = k % pp;
        if (b && (!room[d] || b < room[d]))
            room[d] = b;
    }
    struct weft_max_memory mm;
    char why[200];
    if (weft_conf_parse_max_memory(r->conf->device_map.max_memory, &mm, why, sizeof(why)) !=
        WEFT_OK) {
        WEFT_LOG_ERROR("cluster", "[device_map] max_memory: %s", why);
        return WEFT_ERR_CONFIG;
    }
    devmap_drop(r);
    return weft_devmap_plan_model(r->model_dir,
                                  (enum weft_devmap_strategy)r->conf->device_map.strategy, pp,
                                  room, &mm, &r->map, &r->map_units, r->map_comps);
}

/* The stage of device d: its transformer units, its neighbours and the output device in the
 * pipe group (device order), and whether it decodes. */
static cJSON *devmap_stage(const struct cluster_runner *r, int d, int *decode_p)
{
    const struct weft_devmap *m = &r->map;
    int first[WEFT_DEVMAP_MAX_DEVICES] = {0}, last[WEFT_DEVMAP_MAX_DEVICES] = {0};
    int prev = -1, next = -1, root = 0;
    for (int k = 0; k < m->n_devices; k++) {
        if (!weft_devmap_range(m, 0, k, &first[k], &last[k]))
            first[k] = last[k] = 0;
        if (last[k] == m->components[0].n_units)
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
    *decode_p = m->n_components > 1 ? weft_devmap_exec_device(m, 1, 0) == d : d == root;
    cJSON *s = cJSON_CreateObject();
    cJSON_AddNumberToObject(s, "stages", m->n_devices);
    cJSON_AddNumberToObject(s, "unit_first", first[d]);
    cJSON_AddNumberToObject(s, "unit_last", last[d]);
    cJSON_AddNumberToObject(s, "prev", prev);
    cJSON_AddNumberToObject(s, "next", next);
    cJSON_AddNumberToObject(s, "root", root);
    return s;
}

static void plan_maybe(struct cluster_runner *r)
{
    if (r->planned || r->assigning || r->stopping || r->plan_error[0])
        return;
    const struct weft_conf_parallel *p = &r->conf->parallel;
    const bool devmap = r->conf->device_map.strategy != WEFT_DEVMAP_NONE;
    /* device_map: a replica is [cluster] workers / dp_degree devices (checked at start) */
    const int per = devmap ? (int)(r->conf->cluster.workers / p->dp_degree)
                           : (int)(p->ring_degree * p->ulysses_degree * p->tp_degree);
    int want = r->conf->cluster.workers ? (int)r->conf->cluster.workers
                                        : (int)p->dp_degree * per;
    int joined = 0;
    for (int i = 0; i < MAX_WORKERS; i++)
        joined += r->w[i].state == W_JOINED;
    /* after a loss, a smaller data-parallel width with the workers left */
    int n = joined >= want ? want : (r->epoch > 0 ? joined / per * per : 0);
    if (n < per || n == 0)
        return;
    if (n % per) {
        snprintf(r->plan_error, sizeof(r->plan_error),
                 "%d workers do not divide into replicas of ring %lld x ulysses %lld x tp %lld",
                 n, (long long)p->ring_degree, (long long)p->ulysses_degree,
                 (long long)p->tp_degree);
        WEFT_LOG_ERROR("cluster", "%s", r->plan_error);
        return;
    }
    r->mesh = (struct weft_mesh){n / per, (int)p->ring_degree, (int)p->ulysses_degree,
                                 (int)p->tp_degree};
    if (devmap) {
        struct worker *ranked[MAX_WORKERS];
        int k = 0;
        for (int i = 0; i < MAX_WORKERS && k < n; i++)
            if (r->w[i].state == W_JOINED)
                ranked[k++] = &r->w[i];
        if (devmap_plan(r, ranked, n, per) != WEFT_OK) {
            snprintf(r->plan_error, sizeof(r->plan_error), "%s", weft_log_last_error());
            return;
        }
        r->mesh = (struct weft_mesh){n / per, 1, 1, 1, per};
    }
    r->n_mesh = n;
    char rdv[300] = "";
    if (n > 1) {
        if (weft_rdv_server_create(r->listen_host, 0, n, &r->rdv) != WEFT_OK) {
            snprintf(r->plan_error, sizeof(r->plan_error), "cannot open a rendezvous: %s",
                     weft_log_last_error());
            return;
        }
        snprintf(rdv, sizeof(rdv), "%s:%u", r->listen_host,
                 (unsigned)weft_rdv_server_port(r->rdv));
        uv_poll_init(r->loop, &r->rdv_poll, weft_rdv_server_fd(r->rdv));
        r->rdv_poll.data = r;
        uv_poll_start(&r->rdv_poll, UV_READABLE, on_rdv);
        r->rdv_poll_open = 1;
    }
    r->assigning = 1;
    for (int rep = 0; rep < MAX_WORKERS; rep++)
        r->replica_job[rep] = -1; /* no job runs across a new plan (they were stopped) */
    int rank = 0;
    for (int i = 0; i < MAX_WORKERS && rank < n; i++) {
        struct worker *w = &r->w[i];
        if (w->state != W_JOINED)
            continue;
        struct weft_mesh_coord c;
        weft_mesh_coord(&r->mesh, rank, &c);
        w->rank = rank;
        w->replica = c.dp;
        w->decode = c.ring == 0 && c.ulysses == 0 && c.tp == 0 && c.pp == 0;
        w->assigned = 0;
        cJSON *stage = devmap ? devmap_stage(r, c.pp, &w->decode) : NULL;
        cJSON *m = cJSON_CreateObject();
        cJSON_AddNumberToObject(m, "epoch", r->epoch);
        cJSON_AddStringToObject(m, "model", r->model_dir);
        cJSON_AddStringToObject(m, "rdv", rdv);
        cJSON_AddNumberToObject(m, "world_size", n);
        cJSON_AddNumberToObject(m, "world_rank", rank);
        cJSON_AddNumberToObject(m, "world_base", 0);
        cJSON_AddNumberToObject(m, "dp", r->mesh.dp);
        cJSON_AddNumberToObject(m, "ring", r->mesh.ring);
        cJSON_AddNumberToObject(m, "ulysses", r->mesh.ulysses);
        cJSON_AddNumberToObject(m, "tp", r->mesh.tp);
        cJSON_AddBoolToObject(m, "anything", p->ulysses_anything || p->ring_anything);
        cJSON_AddStringToObject(m, "rotation", p->ring_rotation ? "p2p" : "allgather");
        cJSON_AddBoolToObject(m, "tp_full_then_shard", p->tp_load == 1);
        cJSON_AddBoolToObject(m, "decode", w->decode);
        if (stage)
            cJSON_AddItemToObject(m, "stage", stage);
        cJSON *plan = cJSON_AddObjectToObject(m, "tp_plan");
        for (int k = 0; k < r->conf->tp_plan.n; k++)
            cJSON_AddStringToObject(plan, r->conf->tp_plan.e[k].key, r->conf->tp_plan.e[k].value);
        (void)send_to(w, WEFT_MSG_ASSIGN, m, NULL, 0);
        rank++;
    }
    if (devmap)
        WEFT_LOG_INFO("cluster", "epoch %d: dp %d replicas of %d device_map devices on %d "
                                 "workers", r->epoch, r->mesh.dp, per, n);
    else
        WEFT_LOG_INFO("cluster", "epoch %d: mesh dp %d x ring %d x ulysses %d x tp %d on %d "
                                 "workers", r->epoch, r->mesh.dp, r->mesh.ring, r->mesh.ulysses,
                      r->mesh.tp, n);
}

static void on_assigned(struct cluster_runner *r, struct worker *w, const cJSON *j)
{
    const cJSON *ep = cJSON_GetObjectItemCaseSensitive(j, "epoch");
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(j, "status");
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(j, "error");
    if (!cJSON_IsNumber(ep) || ep->valueint != r->epoch || !r->assigning || w->rank < 0)
        return; /* an answer to an older plan */
    if (!cJSON_IsNumber(st) || st->valueint != WEFT_OK) {
        snprintf(r->plan_error, sizeof(r->plan_error), "worker %s (%s:%ld) could not take its "
                 "assignment: %s", w->id, w->host, w->pid,
                 cJSON_IsString(err) ? err->valuestring : "no reason");
        WEFT_LOG_ERROR("cluster", "%s", r->plan_error);
        plan_reset(r);
        return;
    }
    const cJSON *tb = cJSON_GetObjectItemCaseSensitive(j, "transformer_bytes");
    const cJSON *vb = cJSON_GetObjectItemCaseSensitive(j, "vae_bytes");
    w->transformer_bytes = cJSON_IsNumber(tb) ? (uint64_t)tb->valuedouble : 0;
    w->vae_bytes = cJSON_IsNumber(vb) ? (uint64_t)vb->valuedouble : 0;
    w->assigned = 1;
    int done = 0;
    for (int i = 0; i < MAX_WORKERS; i++)
        done += r->w[i].rank >= 0 && r->w[i].assigned;
    if (done == r->n_mesh) {
        r->assigning = 0;
        r->planned = 1;
        WEFT_LOG_INFO("cluster", "epoch %d: every worker is loaded; serving", r->epoch);
        post_capacity(r);
    }
}

/* ---------------------------------------------------------------------------------------- */
/* Messages from workers                                                                     */

static void on_step_msg(struct cluster_runner *r, const cJSON *j)
{
    const struct job_run *jr = job_find(r, cJSON_GetObjectItemCaseSensitive(j, "job"));
    if (!jr)
        return;
    struct weft_runner_event ev = {.kind = WEFT_RUNNER_EV_STEP, .job = jr->key, .n_images = 1};
    const cJSON *v;
    if ((v = cJSON_GetObjectItemCaseSensitive(j, "image")) && cJSON_IsNumber(v))
        ev.image = v->valueint;
    if ((v = cJSON_GetObjectItemCaseSensitive(j, "step")) && cJSON_IsNumber(v))
        ev.step = v->valueint;
    if ((v = cJSON_GetObjectItemCaseSensitive(j, "steps")) && cJSON_IsNumber(v))
        ev.steps = v->valueint;
    if ((v = cJSON_GetObjectItemCaseSensitive(j, "seconds")) && cJSON_IsNumber(v))
        ev.seconds = v->valuedouble;
    post(r, &ev);
}

static void on_image_msg(struct cluster_runner *r, const cJSON *j, const void *png, size_t len)
{
    struct job_run *jr = job_find(r, cJSON_GetObjectItemCaseSensitive(j, "job"));
    const cJSON *img = cJSON_GetObjectItemCaseSensitive(j, "image");
    if (!jr || !cJSON_IsNumber(img) || img->valueint < 0 || len < 8 ||
        memcmp(png, "\x89PNG\r\n\x1a\n", 8) != 0) {
        WEFT_LOG_WARN("cluster", "an image message that fits no running job was dropped");
        return;
    }
    char path[1100];
    snprintf(path, sizeof(path), "%s/%d.png", jr->out_dir, img->valueint);
    if (weft_runner_file_write(path, png, len) != WEFT_OK) {
        job_fail(jr, WEFT_ERR_IO, weft_log_last_error());
        return;
    }
    static const char *const stages[] = {"denoise_s", "decode_s"};
    for (int k = 0; k < 2; k++) {
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(j, stages[k]);
        if (!cJSON_IsNumber(s))
            continue;
        struct weft_runner_event ev = {.kind = WEFT_RUNNER_EV_STAGE, .job = jr->key,
                                       .seconds = s->valuedouble};
        snprintf(ev.stage, sizeof(ev.stage), "%.*s", (int)strlen(stages[k]) - 2, stages[k]);
        post(r, &ev);
    }
    struct weft_runner_event ev = {.kind = WEFT_RUNNER_EV_IMAGE, .job = jr->key,
                                   .image = img->valueint};
    const cJSON *wv = cJSON_GetObjectItemCaseSensitive(j, "width");
    const cJSON *hv = cJSON_GetObjectItemCaseSensitive(j, "height");
    ev.width = cJSON_IsNumber(wv) ? wv->valueint : 0;
    ev.height = cJSON_IsNumber(hv) ? hv->valueint : 0;
    r->images_done++;
    post(r, &ev);
}

static bool metric_label(const char *s)
{
    size_t n = strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789_");
    return n > 0 && n < 16 && s[n] == '\0';
}

/* A job's "comm": {group: {op: [seconds, bytes, calls]}} from one worker, added to the totals;
 * anything malformed is ignored (metrics only). */
static void add_comm(struct cluster_runner *r, const cJSON *comm)
{
    for (const cJSON *g = cJSON_IsObject(comm) ? comm->child : NULL; g; g = g->next) {
        for (const cJSON *op = cJSON_IsObject(g) ? g->child : NULL; op; op = op->next) {
            if (!metric_label(g->string) || !metric_label(op->string) ||
                cJSON_GetArraySize(op) != 3)
                continue;
            double v[3];
            for (int k = 0; k < 3; k++) {
                const cJSON *x = cJSON_GetArrayItem(op, k);
                v[k] = cJSON_IsNumber(x) && x->valuedouble >= 0 ? x->valuedouble : 0;
            }
            struct comm_total *t = NULL;
            for (int i = 0; i < r->n_comm && !t; i++)
                if (!strcmp(r->comm[i].group, g->string) && !strcmp(r->comm[i].op, op->string))
                    t = &r->comm[i];
            if (!t && r->n_comm < (int)(sizeof(r->comm) / sizeof(r->comm[0]))) {
                t = &r->comm[r->n_comm++];
                snprintf(t->group, sizeof(t->group), "%s", g->string);
                snprintf(t->op, sizeof(t->op), "%s", op->string);
            }
            if (t)
                t->seconds += v[0], t->bytes += v[1], t->calls += v[2];
        }
    }
}

static void on_done_msg(struct cluster_runner *r, struct worker *w, const cJSON *j)
{
    add_comm(r, cJSON_GetObjectItemCaseSensitive(j, "comm"));
    struct job_run *jr = job_find(r, cJSON_GetObjectItemCaseSensitive(j, "job"));
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(j, "status");
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(j, "error");
    if (!jr)
        return;
    weft_status_t s = cJSON_IsNumber(st) ? (weft_status_t)st->valueint : WEFT_ERR_PROTOCOL;
    if (s != WEFT_OK && s != WEFT_ERR_CANCELLED) {
        char reason[256];
        snprintf(reason, sizeof(reason), "worker %s (%s:%ld): %s", w->id, w->host, w->pid,
                 cJSON_IsString(err) && err->valuestring[0] ? err->valuestring
                                                            : weft_status_str(s));
        job_fail(jr, s, reason);
    } else if (s == WEFT_ERR_CANCELLED) {
        job_fail(jr, s, "cancelled");
    }
    if (!w->decode || r->replica_job[w->replica] != (int)(jr - r->jobs))
        return; /* the replica's decoding rank speaks for it, once */
    r->replica_job[w->replica] = -1; /* free for the next job */
    if (--jr->pending == 0)
        job_finish(r, jr);
}

static void on_msg(struct weft_link *link, uint16_t type, const void *data, size_t len,
                   void *arg)
{
    (void)link;
    struct worker *w = arg;
    struct cluster_runner *r = w->r;
    cJSON *j;
    const void *tail;
    size_t tail_len;
    char from[64];
    snprintf(from, sizeof(from), "worker %s", w->id);
    if (weft_msg_unpack(data, len, from, &j, &tail, &tail_len) != WEFT_OK) {
        worker_lost(w, "sent a malformed control message");
        return;
    }
    w->last_heard = now_s();
    switch (type) {
    case WEFT_MSG_PING:
        break;
    case WEFT_MSG_ASSIGNED:
        on_assigned(r, w, j);
        break;
    case WEFT_MSG_STEP:
        on_step_msg(r, j);
        break;
    case WEFT_MSG_IMAGE:
        on_image_msg(r, j, tail, tail_len);
        break;
    case WEFT_MSG_DONE:
        on_done_msg(r, w, j);
        break;
    default:
        WEFT_LOG_WARN("cluster", "worker %s sent an unexpected %s message", w->id,
                      weft_msg_name(type));
    }
    cJSON_Delete(j);
}

static void on_down(struct weft_link *link, weft_status_t why, void *arg)
{
    (void)link;
    struct worker *w = arg;
    char reason[96];
    snprintf(reason, sizeof(reason), "control link down (%s)", weft_status_str(why));
    w->link = NULL; /* the link is gone */
    worker_lost(w, reason);
}

/* A link's first message names its worker. */
static void on_first_msg(struct weft_link *link, uint16_t type, const void *data, size_t len,
                         void *arg)
{
    struct cluster_runner *r = arg;
    cJSON *j;
    const void *tail;
    size_t tail_len;
    const cJSON *id = NULL;
    if (type != WEFT_MSG_HELLO ||
        weft_msg_unpack(data, len, "a new link", &j, &tail, &tail_len) != WEFT_OK) {
        WEFT_LOG_WARN("cluster", "a control link opened without a hello: closed");
        weft_link_close(link);
        return;
    }
    id = cJSON_GetObjectItemCaseSensitive(j, "id");
    struct worker *w = NULL;
    for (int i = 0; i < MAX_WORKERS && cJSON_IsString(id); i++)
        if (r->w[i].state == W_AUTHED && strcmp(r->w[i].id, id->valuestring) == 0)
            w = &r->w[i];
    cJSON_Delete(j);
    if (!w) {
        WEFT_LOG_WARN("cluster", "a control link named no authenticated worker: closed");
        weft_link_close(link);
        return;
    }
    w->link = link;
    w->state = W_JOINED;
    w->last_heard = now_s();
    weft_link_set_callbacks(link, on_msg, on_down, w);
    WEFT_LOG_INFO("cluster", "worker %s joined (%s, pid %ld)", w->id, w->host, w->pid);
    plan_maybe(r);
}

static void on_accept(struct weft_link_host *host, struct weft_link *link, void *arg)
{
    (void)host;
    weft_link_set_callbacks(link, on_first_msg, NULL, arg);
}

/* ---------------------------------------------------------------------------------------- */
/* The worker port: the authenticated bootstrap                                              */

static void on_tcp_closed(uv_handle_t *h)
{
    struct worker *w = h->data;
    w->tcp_open = 0;
    weft_free(w->rbuf);
    w->rbuf = NULL;
    w->rlen = w->rcap = 0;
    cJSON_Delete(w->hello);
    w->hello = NULL;
    w->state = W_FREE;
}

static void worker_lost(struct worker *w, const char *why)
{
    struct cluster_runner *r = w->r;
    if (w->state == W_FREE)
        return;
    int was_joined = w->state == W_JOINED, in_mesh = w->rank >= 0;
    if (was_joined) {
        WEFT_LOG_WARN("cluster", "worker %s (%s, pid %ld) lost: %s", w->id, w->host, w->pid, why);
        r->workers_lost++;
    }
    if (w->link) {
        weft_link_close(w->link);
        w->link = NULL;
    }
    w->state = W_BOOT; /* no longer counted; freed when its socket closes */
    if (in_mesh) {
        /* the mesh is planned again: every running job stops (and runs again if the
         * coordinator's attempts allow) */
        for (int i = 0; i < MAX_WORKERS; i++) {
            struct job_run *jr = &r->jobs[i];
            if (!jr->active)
                continue;
            char reason[256];
            if (r->replica_job[w->replica] == i)
                snprintf(reason, sizeof(reason), "worker %s (%s, pid %ld) was lost during the "
                         "job: %s", w->id, w->host, w->pid, why);
            else
                snprintf(reason, sizeof(reason), "the mesh was planned again: worker %s (%s, "
                         "pid %ld) of another replica was lost", w->id, w->host, w->pid);
            job_fail(jr, WEFT_ERR_PEER_LOST, reason);
            job_finish(r, jr);
        }
        w->rank = -1;
        plan_reset(r);
    }
    if (w->tcp_open && !uv_is_closing((uv_handle_t *)&w->tcp))
        uv_close((uv_handle_t *)&w->tcp, on_tcp_closed);
    plan_maybe(r);
}

static void write_done(uv_write_t *req, int status)
{
    (void)status;
    weft_free(req->data);
    weft_free(req);
}

static int boot_write(struct worker *w, cJSON *json)
{
    char *text = cJSON_PrintUnformatted(json);
    cJSON_Delete(json);
    if (!text)
        return -1;
    size_t n = strlen(text);
    uint8_t *buf = weft_malloc(n + 4);
    uv_write_t *req = weft_malloc(sizeof(*req));
    if (!buf || !req) {
        cJSON_free(text);
        weft_free(buf);
        weft_free(req);
        return -1;
    }
    for (int i = 0; i < 4; i++)
        buf[i] = (uint8_t)(n >> (8 * i));
    /* a length-prefixed frame: no terminating NUL goes on the wire */
    memcpy(buf + 4, text, n); /* NOLINT(bugprone-not-null-terminated-result) */
    cJSON_free(text);
    req->data = buf;
    uv_buf_t b = uv_buf_init((char *)buf, (unsigned)(n + 4));
    if (uv_write(req, (uv_stream_t *)&w->tcp, &b, 1, write_done) != 0) {
        weft_free(buf);
        weft_free(req);
        return -1;
    }
    return 0;
}

static void refuse(struct worker *w, const char *why)
{
    WEFT_LOG_WARN("cluster", "refused a worker connection: %s", why);
    cJSON *m = cJSON_CreateObject();
    cJSON_AddNumberToObject(m, "weft", WEFT_PROTO_VERSION);
    cJSON_AddBoolToObject(m, "accepted", 0);
    cJSON_AddStringToObject(m, "error", why);
    (void)boot_write(w, m);
    w->state = W_BOOT;
    uv_close((uv_handle_t *)&w->tcp, on_tcp_closed);
}

static void on_boot_frame(struct worker *w, cJSON *j)
{
    struct cluster_runner *r = w->r;
    if (w->state != W_BOOT) {
        worker_lost(w, "sent data on its bootstrap connection after joining");
        return;
    }
    const cJSON *resp = cJSON_GetObjectItemCaseSensitive(j, "response");
    const cJSON *ch = cJSON_GetObjectItemCaseSensitive(j, "challenge");
    const cJSON *hello = cJSON_GetObjectItemCaseSensitive(j, "hello");
    char want[65];
    weft_boot_proof(r->secret, "worker", w->challenge, want);
    if (!cJSON_IsString(resp) || strlen(resp->valuestring) != 64 ||
        weft_ct_compare(resp->valuestring, want, 64) != 0) {
        refuse(w, "wrong cluster secret");
        return;
    }
    uint8_t raw[32];
    const cJSON *link = hello ? cJSON_GetObjectItemCaseSensitive(hello, "link") : NULL;
    if (!ch || !cJSON_IsString(ch) || weft_unhex(ch->valuestring, raw, 32) != 0 ||
        !cJSON_IsObject(hello) || !link || !cJSON_IsString(link)) {
        refuse(w, "malformed hello");
        return;
    }
    size_t alen;
    void *addr = weft_unbase64(link->valuestring, &alen);
    const void *mine;
    size_t mlen;
    if (!addr || weft_link_host_address(r->host, &mine, &mlen) != WEFT_OK) {
        weft_free(addr);
        refuse(w, "malformed link address");
        return;
    }
    weft_free(addr); /* the worker connects to us; its address is kept only for display */
    const cJSON *host = cJSON_GetObjectItemCaseSensitive(hello, "host");
    const cJSON *pid = cJSON_GetObjectItemCaseSensitive(hello, "pid");
    snprintf(w->host, sizeof(w->host), "%s", cJSON_IsString(host) ? host->valuestring : "?");
    w->pid = cJSON_IsNumber(pid) ? (long)pid->valuedouble : 0;
    w->hello = cJSON_Duplicate(hello, 1);
    cJSON_DeleteItemFromObjectCaseSensitive(w->hello, "link");
    snprintf(w->id, sizeof(w->id), "w%d", r->next_id++);
    char proof[65];
    weft_boot_proof(r->secret, "coordinator", ch->valuestring, proof);
    char *b64 = weft_base64(mine, mlen);
    cJSON *m = cJSON_CreateObject();
    cJSON_AddNumberToObject(m, "weft", WEFT_PROTO_VERSION);
    cJSON_AddBoolToObject(m, "accepted", 1);
    cJSON_AddStringToObject(m, "id", w->id);
    cJSON_AddStringToObject(m, "response", proof);
    cJSON_AddStringToObject(m, "link", b64 ? b64 : "");
    weft_free(b64);
    w->state = W_AUTHED;
    w->last_heard = now_s();
    if (boot_write(w, m) != 0)
        worker_lost(w, "cannot answer its bootstrap");
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct worker *w = h->data;
    if (w->rcap - w->rlen < 4096) {
        size_t cap = w->rcap ? w->rcap * 2 : 8192;
        uint8_t *nb = cap <= WEFT_BOOT_MAX + 8 ? weft_realloc(w->rbuf, cap) : NULL;
        if (nb) {
            w->rbuf = nb;
            w->rcap = cap;
        }
    }
    (void)suggested;
    *buf = uv_buf_init((char *)w->rbuf + w->rlen, (unsigned)(w->rcap - w->rlen));
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    (void)buf;
    struct worker *w = s->data;
    if (n < 0) {
        worker_lost(w, n == UV_EOF ? "its process ended (bootstrap connection closed)"
                                   : uv_strerror((int)n));
        return;
    }
    w->rlen += (size_t)n;
    while (w->rlen >= 4 && w->state != W_FREE) {
        size_t len = (size_t)w->rbuf[0] | (size_t)w->rbuf[1] << 8 | (size_t)w->rbuf[2] << 16 |
                     (size_t)w->rbuf[3] << 24;
        if (len == 0 || len > WEFT_BOOT_MAX) {
            worker_lost(w, "sent an oversized bootstrap frame");
            return;
        }
        if (w->rlen < 4 + len) {
            if (w->rcap < 4 + len && w->rcap >= WEFT_BOOT_MAX + 8) {
                worker_lost(w, "bootstrap frame too large");
                return;
            }
            break;
        }
        cJSON *j = cJSON_ParseWithLength((const char *)w->rbuf + 4, len);
        memmove(w->rbuf, w->rbuf + 4 + len, w->rlen - 4 - len);
        w->rlen -= 4 + len;
        if (!cJSON_IsObject(j)) {
            cJSON_Delete(j);
            refuse(w, "bootstrap frame is not a JSON object");
            return;
        }
        on_boot_frame(w, j);
        cJSON_Delete(j);
    }
}

static void on_connection(uv_stream_t *server, int status)
{
    struct cluster_runner *r = server->data;
    if (status < 0)
        return;
    struct worker *w = NULL;
    for (int i = 0; i < MAX_WORKERS && !w; i++)
        if (r->w[i].state == W_FREE && !r->w[i].tcp_open)
            w = &r->w[i];
    uv_tcp_t tmp;
    if (!w) { /* full: accept and close, so the client is told at once */
        uv_tcp_init(r->loop, &tmp);
        if (uv_accept(server, (uv_stream_t *)&tmp) == 0)
            WEFT_LOG_WARN("cluster", "more than %d workers: a connection refused", MAX_WORKERS);
        uv_close((uv_handle_t *)&tmp, NULL);
        return;
    }
    uv_tcp_init(r->loop, &w->tcp);
    w->tcp.data = w;
    w->tcp_open = 1;
    w->state = W_BOOT;
    w->rank = -1;
    if (uv_accept(server, (uv_stream_t *)&w->tcp) != 0 ||
        weft_boot_challenge(w->challenge) != WEFT_OK) {
        uv_close((uv_handle_t *)&w->tcp, on_tcp_closed);
        return;
    }
    w->last_heard = now_s();
    cJSON *m = cJSON_CreateObject();
    cJSON_AddNumberToObject(m, "weft", WEFT_PROTO_VERSION);
    cJSON_AddStringToObject(m, "challenge", w->challenge);
    if (boot_write(w, m) != 0 ||
        uv_read_start((uv_stream_t *)&w->tcp, on_alloc, on_read) != 0)
        uv_close((uv_handle_t *)&w->tcp, on_tcp_closed);
}

/* ---------------------------------------------------------------------------------------- */
/* The loop's side: link progress, heartbeats, timeouts                                      */

static void on_link_fd(uv_poll_t *h, int status, int events)
{
    (void)status, (void)events;
    struct cluster_runner *r = h->data;
    weft_link_host_progress(r->host);
}

static void on_tick(uv_timer_t *t)
{
    struct cluster_runner *r = t->data;
    weft_link_host_progress(r->host);
    /* the rendezvous's own connections are not under the poll: drive it here too */
    if (r->rdv && weft_rdv_server_progress(r->rdv, 0) == WEFT_OK)
        rdv_close(r);
    double now = now_s();
    if (r->stopping && active_jobs(r) && now > r->stop_deadline) {
        /* a worker that does not answer the cancel (stopped, hung) must not hold the
         * shutdown: its jobs end cancelled and stay in the journal for the next start */
        WEFT_LOG_WARN("cluster", "%d job(s) did not stop within %d ms: given up", active_jobs(r),
                      STOP_WAIT_MS);
        for (int i = 0; i < MAX_WORKERS && !r->closed; i++)
            if (r->jobs[i].active)
                job_finish(r, &r->jobs[i]);
        return;
    }
    const double lost = (double)r->conf->cluster.worker_timeout_ms / 1e3;
    bool ping = now >= r->next_ping;
    if (ping)
        r->next_ping = now + (double)r->conf->cluster.heartbeat_ms / 1e3;
    for (int i = 0; i < MAX_WORKERS; i++) {
        struct worker *w = &r->w[i];
        if (w->state == W_FREE)
            continue;
        if ((w->state == W_BOOT || w->state == W_AUTHED) && w->tcp_open &&
            now - w->last_heard > lost) {
            worker_lost(w, "did not finish joining in time");
            continue;
        }
        if (w->state != W_JOINED)
            continue;
        if (now - w->last_heard > lost) {
            char why[64];
            snprintf(why, sizeof(why), "silent for %.1f s", now - w->last_heard);
            worker_lost(w, why);
        } else if (ping) {
            (void)send_to(w, WEFT_MSG_PING, cJSON_CreateObject(), NULL, 0);
        }
    }
}

/* ---------------------------------------------------------------------------------------- */

static cJSON *cr_describe(struct weft_runner *base)
{
    struct cluster_runner *r = (struct cluster_runner *)base;
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "runner", "cluster");
    cJSON_AddBoolToObject(d, "ready", r->planned);
    cJSON_AddStringToObject(d, "model", r->model_dir);
    cJSON_AddNumberToObject(d, "epoch", r->epoch);
    if (r->plan_error[0])
        cJSON_AddStringToObject(d, "error", r->plan_error);
    cJSON *ws = cJSON_AddArrayToObject(d, "workers");
    cJSON *tf = cJSON_CreateArray(), *vae = cJSON_CreateArray();
    for (int i = 0; i < MAX_WORKERS; i++) {
        const struct worker *w = &r->w[i];
        if (w->state != W_JOINED && w->state != W_AUTHED)
            continue;
        cJSON *e = w->hello ? cJSON_Duplicate(w->hello, 1) : cJSON_CreateObject();
        cJSON_AddStringToObject(e, "id", w->id);
        cJSON_AddStringToObject(e, "state", w->state != W_JOINED ? "joining"
                                            : w->rank < 0        ? "idle"
                                            : w->assigned        ? (r->replica_job[w->replica] >= 0
                                                                        ? "busy"
                                                                        : "ready")
                                                                 : "loading");
        cJSON_AddNumberToObject(e, "rank", w->rank);
        if (w->rank >= 0) {
            cJSON_AddNumberToObject(e, "replica", w->replica);
            cJSON_AddNumberToObject(e, "transformer_bytes", (double)w->transformer_bytes);
            cJSON_AddNumberToObject(e, "vae_bytes", (double)w->vae_bytes);
            cJSON_AddItemToArray(tf, cJSON_CreateString(w->id));
            if (w->decode)
                cJSON_AddItemToArray(vae, cJSON_CreateString(w->id));
        }
        cJSON_AddItemToArray(ws, e);
    }
    cJSON *mesh = cJSON_AddObjectToObject(d, "mesh");
    cJSON_AddNumberToObject(mesh, "dp", r->planned || r->assigning ? r->mesh.dp : 0);
    cJSON_AddNumberToObject(mesh, "ring", r->mesh.ring);
    cJSON_AddNumberToObject(mesh, "ulysses", r->mesh.ulysses);
    cJSON_AddNumberToObject(mesh, "tp", r->mesh.tp);
    if (r->map.n_devices && (r->planned || r->assigning)) {
        /* device_map: unit -> "device d (the workers that are device d of each replica)" */
        cJSON_AddNumberToObject(mesh, "stages", r->mesh.pp);
        cJSON_Delete(tf), cJSON_Delete(vae);
        char names[WEFT_DEVMAP_MAX_DEVICES][160];
        const char *labels[WEFT_DEVMAP_MAX_DEVICES];
        for (int k = 0; k < r->map.n_devices; k++) {
            int len = snprintf(names[k], sizeof(names[k]), "device %d (", k);
            int any = 0;
            for (int i = 0; i < MAX_WORKERS; i++) {
                const struct worker *w = &r->w[i];
                if (w->rank >= 0 && w->rank % r->mesh.pp == k && len < 150)
                    len += snprintf(names[k] + len, sizeof(names[k]) - (size_t)len, "%s%s",
                                    any++ ? ", " : "", w->id);
            }
            snprintf(names[k] + len, sizeof(names[k]) - (size_t)len, ")");
            labels[k] = names[k];
        }
        cJSON *dm = weft_devmap_json(&r->map, labels);
        cJSON_AddStringToObject(dm, "prompt_embeds",
                                "coordinator (precomputed, sent with each job)");
        cJSON_AddItemToObject(d, "device_map", dm);
        cJSON_AddStringToObject(d, "device_map_strategy",
                                r->conf->device_map.strategy == WEFT_DEVMAP_AUTO ? "auto"
                                                                                 : "balanced");
    } else {
        cJSON *dm = cJSON_AddObjectToObject(d, "device_map");
        cJSON_AddStringToObject(dm, "prompt_embeds",
                                "coordinator (precomputed, sent with each job)");
        cJSON_AddItemToObject(dm, "transformer", tf);
        cJSON_AddItemToObject(dm, "vae", vae);
    }
    cJSON_AddNumberToObject(d, "workers_lost", (double)r->workers_lost);
    return d;
}

static void cr_metrics(struct weft_runner *base, struct weft_sbuf *out)
{
    struct cluster_runner *r = (struct cluster_runner *)base;
    int joined = 0;
    for (int i = 0; i < MAX_WORKERS; i++)
        joined += r->w[i].state == W_JOINED;
    weft_sbuf_printf(out,
                     "# HELP weft_workers Workers joined to the coordinator.\n"
                     "# TYPE weft_workers gauge\nweft_workers %d\n"
                     "# HELP weft_workers_lost_total Workers lost since start.\n"
                     "# TYPE weft_workers_lost_total counter\nweft_workers_lost_total %llu\n"
                     "# HELP weft_mesh_epoch Plans made since start.\n"
                     "# TYPE weft_mesh_epoch gauge\nweft_mesh_epoch %d\n",
                     joined, (unsigned long long)r->workers_lost, r->epoch);
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

/* Workers are told to exit and every handle of ours is closed, so the loop can end. */
static void shutdown_cluster(struct cluster_runner *r)
{
    if (r->closed)
        return;
    r->closed = 1;
    for (int i = 0; i < MAX_WORKERS; i++) {
        struct worker *w = &r->w[i];
        if (w->state == W_JOINED) {
            (void)send_to(w, WEFT_MSG_SHUTDOWN, cJSON_CreateObject(), NULL, 0);
            (void)weft_link_flush(w->link, 1000);
        }
        if (w->tcp_open && !uv_is_closing((uv_handle_t *)&w->tcp))
            uv_close((uv_handle_t *)&w->tcp, on_tcp_closed);
    }
    rdv_close(r);
    uv_close((uv_handle_t *)&r->server, NULL);
    uv_poll_stop(&r->link_poll);
    uv_close((uv_handle_t *)&r->link_poll, NULL);
    uv_timer_stop(&r->tick);
    uv_close((uv_handle_t *)&r->tick, NULL);
}

static void cr_stop(struct weft_runner *base)
{
    struct cluster_runner *r = (struct cluster_runner *)base;
    r->stopping = 1;
    r->stop_deadline = now_s() + STOP_WAIT_MS / 1e3;
    if (active_jobs(r) == 0) {
        shutdown_cluster(r);
        return;
    }
    for (int i = 0; i < MAX_WORKERS; i++) /* shut down when the last FINISHED goes out */
        if (r->jobs[i].active)
            cr_cancel(base, r->jobs[i].key);
}

static void cr_destroy(struct weft_runner *base)
{
    struct cluster_runner *r = (struct cluster_runner *)base;
    weft_link_host_destroy(r->host); /* closes every link */
    weft_rdv_server_destroy(r->rdv);
    devmap_drop(r);
    for (int i = 0; i < MAX_WORKERS; i++) {
        weft_free(r->w[i].rbuf);
        cJSON_Delete(r->w[i].hello);
    }
    weft_free(r);
}

static const struct weft_runner_ops cluster_ops = {
    .name = "cluster",
    .start = cr_start,
    .cancel = cr_cancel,
    .capacity = cr_capacity,
    .describe = cr_describe,
    .metrics = cr_metrics,
    .stop = cr_stop,
    .destroy = cr_destroy,
};

static weft_status_t bind_port(struct cluster_runner *r, const char *listen, const char *port_file)
{
    const char *colon = strrchr(listen, ':');
    if (!colon || colon == listen || (size_t)(colon - listen) >= sizeof(r->listen_host)) {
        WEFT_LOG_ERROR("cluster", "[cluster] listen = '%s': expected host:port", listen);
        return WEFT_ERR_CONFIG;
    }
    snprintf(r->listen_host, sizeof(r->listen_host), "%.*s", (int)(colon - listen), listen);
    struct sockaddr_storage sa;
    int port = atoi(colon + 1);
    if (uv_ip4_addr(r->listen_host, port, (struct sockaddr_in *)&sa) != 0 &&
        uv_ip6_addr(r->listen_host, port, (struct sockaddr_in6 *)&sa) != 0) {
        WEFT_LOG_ERROR("cluster", "[cluster] listen = '%s': not a numeric address", listen);
        return WEFT_ERR_CONFIG;
    }
    uv_tcp_init(r->loop, &r->server);
    r->server.data = r;
    int rc = uv_tcp_bind(&r->server, (const struct sockaddr *)&sa, 0);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&r->server, 128, on_connection);
    if (rc != 0) {
        WEFT_LOG_ERROR("cluster", "cannot listen for workers on %s: %s", listen, uv_strerror(rc));
        return WEFT_ERR_IO;
    }
    struct sockaddr_storage bound;
    int blen = sizeof(bound);
    uv_tcp_getsockname(&r->server, (struct sockaddr *)&bound, &blen);
    int bport = ntohs(((struct sockaddr_in *)&bound)->sin_port);
    WEFT_LOG_INFO("cluster", "waiting for workers on %s:%d", r->listen_host, bport);
    if (port_file) {
        char text[300];
        int n = snprintf(text, sizeof(text), "%s:%d\n", r->listen_host, bport);
        if (weft_runner_file_write(port_file, text, (size_t)n) != WEFT_OK)
            return WEFT_ERR_IO;
    }
    return WEFT_OK;
}

/* device_map refusals that need no worker: the combinations it does not support, a replica
 * size, and a pipeline that fits no max_memory (checked again with the workers' memory). */
static weft_status_t devmap_check(const struct weft_cluster_runner_opts *opts)
{
    const struct weft_conf *c = opts->conf;
    if (c->device_map.strategy == WEFT_DEVMAP_NONE)
        return WEFT_OK;
    const struct weft_conf_parallel *p = &c->parallel;
    if (p->tp_degree > 1) {
        WEFT_LOG_ERROR("cluster", "[device_map] strategy cannot be combined with tensor "
                                  "parallelism (tp_degree %lld): tensor parallelism already "
                                  "places each rank's shard on that rank's device; set "
                                  "tp_degree = 1 or strategy = none",
                       (long long)p->tp_degree);
        return WEFT_ERR_CONFIG;
    }
    if (p->ring_degree > 1 || p->ulysses_degree > 1) {
        WEFT_LOG_ERROR("cluster", "[device_map] strategy cannot be combined with context "
                                  "parallelism (ring %lld x ulysses %lld) in this version: each "
                                  "stage of a layer pipeline holds whole sequences; set the "
                                  "degrees to 1 or strategy = none",
                       (long long)p->ring_degree, (long long)p->ulysses_degree);
        return WEFT_ERR_CONFIG;
    }
    const int64_t workers = c->cluster.workers, dp = p->dp_degree;
    if (workers < 1 || workers % dp) {
        WEFT_LOG_ERROR("cluster", "[device_map] needs [cluster] workers = dp_degree x devices "
                                  "per replica (workers %lld, dp_degree %lld)",
                       (long long)workers, (long long)dp);
        return WEFT_ERR_CONFIG;
    }
    struct weft_max_memory mm;
    char why[200];
    if (weft_conf_parse_max_memory(c->device_map.max_memory, &mm, why, sizeof(why)) != WEFT_OK) {
        WEFT_LOG_ERROR("cluster", "[device_map] max_memory: %s", why);
        return WEFT_ERR_CONFIG;
    }
    struct weft_devmap map;
    struct weft_devmap_unit *units = NULL;
    struct weft_devmap_component comps[2];
    weft_status_t st = weft_devmap_plan_model(opts->model_dir,
                                              (enum weft_devmap_strategy)c->device_map.strategy,
                                              (int)(workers / dp), NULL, &mm, &map, &units, comps);
    if (st == WEFT_OK)
        weft_devmap_cleanup(&map);
    weft_free(units);
    return st;
}

weft_status_t weft_cluster_runner_create(const struct weft_cluster_runner_opts *opts,
                                         uv_loop_t *loop, struct weft_runner_sink *sink,
                                         struct weft_runner **runner_p)
{
    weft_status_t st0;
    if (!opts->secret || !opts->secret[0]) {
        WEFT_LOG_ERROR("cluster", "no cluster secret: set [cluster] secret or secret_file");
        return WEFT_ERR_CONFIG;
    }
    if ((st0 = devmap_check(opts)) != WEFT_OK)
        return st0;
    struct cluster_runner *r = weft_calloc(1, sizeof(*r));
    if (!r)
        return WEFT_ERR_NOMEM;
    r->base.ops = &cluster_ops;
    r->loop = loop;
    r->sink = sink;
    r->conf = opts->conf;
    snprintf(r->model_dir, sizeof(r->model_dir), "%s", opts->model_dir);
    snprintf(r->secret, sizeof(r->secret), "%s", opts->secret);
    for (int i = 0; i < MAX_WORKERS; i++) {
        r->w[i].r = r;
        r->w[i].index = i;
        r->w[i].rank = -1;
        r->replica_job[i] = -1;
    }
    /* the model's config, to check prompt embeddings before a job goes out */
    char tdir[WEFT_CONF_PATH + 16];
    snprintf(tdir, sizeof(tdir), "%s%s", opts->model_dir,
             weft_path_kind(opts->model_dir) == WEFT_PATH_PIPELINE ? "/transformer" : "");
    struct weft_ckpt *ck;
    weft_status_t st = weft_ckpt_open(tdir, &ck);
    if (st == WEFT_OK) {
        st = weft_flux_config_parse(weft_ckpt_config(ck), tdir, &r->flux);
        weft_ckpt_close(ck);
    }
    if (st == WEFT_OK)
        st = weft_link_host_create(opts->conf->transport.tls[0] ? opts->conf->transport.tls : NULL,
                                   on_accept, r, &r->host);
    if (st != WEFT_OK) {
        weft_free(r);
        return st;
    }
    if ((st = bind_port(r, opts->conf->cluster.listen, opts->port_file)) != WEFT_OK) {
        uv_close((uv_handle_t *)&r->server, NULL);
        weft_link_host_destroy(r->host);
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
